/*
 * Disk faults under the coordinator (issue #9, section 2): a coordinator in
 * this process (store, engine and REST server, as agent_harness.c opens
 * one) whose store runs on the fault-injecting SQLite VFS
 * (tests/support/sl_faultvfs.c), and a fleet of simulated devices
 * (starling-agent --fleet) uploading to it over real HTTP. Cycle after
 * cycle, from the N-th call on (N drawn at random), every write fails with
 * ENOSPC (SQLITE_FULL) or EIO (SQLITE_IOERR_WRITE), or every fsync with EIO
 * (SQLITE_IOERR_FSYNC); after a while the disk comes back.
 *
 * Asserted:
 *   - while the disk fails, no new upload is acknowledged: the devices'
 *     acks.log files gain no first-time receipt (an acknowledgement would
 *     name an update whose commit could not be durable);
 *   - while the disk fails, the devices' requests are answered 5xx (their
 *     log shows the retries), and requests that must write get a clear 5xx
 *     application/problem+json answer with a type: POST /v1/tasks, and
 *     GET /readyz (whose write transaction proves the database takes
 *     writes);
 *   - the service recovers when the disk does: /readyz answers 200, uploads
 *     are acknowledged again and rounds close again (two more versions);
 *   - afterwards, the database reopened through the ordinary VFS passes
 *     PRAGMA integrity_check, and every acknowledged update of every
 *     device is in it exactly once (ag_check_acks), every round's reported
 *     count equals its stored updates, every stored update is acknowledged
 *     or pending.
 * `test_fl_disk <cycles> [seed]` (default 3: one of each kind); the slow
 * label runs 30.
 */
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "../support/sl_faultvfs.h"
#include "../support/sl_test.h"
#include "fl_harness.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/nn.h"

#define DEVICES 3

static int cycles = 3;
static uint64_t seed = 0xd15cf0a1;
static long max_nth = 20;

static void coord_open(ag_coord *c, const char *root)
{
    sl_store_options so;
    sl_engine_options eo;
    sl_server_options vo;
    sl_client_options co;
    char db[700], err[256];
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/coord", root);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    snprintf(db, sizeof db, "%s/starling.db", c->dir);
    snprintf(c->enrol_file, sizeof c->enrol_file, "%s/enrol", c->dir);
    assert_int_equal(sl_fs_write_atomic(c->enrol_file, AG_ENROL "\n", strlen(AG_ENROL) + 1, 0600),
                     SL_OK);
    sl_store_options_default(&so);
    so.path = db;
    so.vfs = SL_FAULTVFS_NAME;
    if (sl_store_open(&so, &c->store, err, sizeof err) != SL_OK)
        fail_msg("store: %s", err);
    sl_engine_options_default(&eo);
    eo.retry_after_min_ms = 100;
    eo.retry_after_max_ms = 1000;
    if (sl_engine_open(c->store, &eo, &c->engine, err, sizeof err) != SL_OK)
        fail_msg("engine: %s", err);
    sl_server_options_default(&vo);
    vo.listen = "127.0.0.1:0";
    vo.insecure_http = 1;
    vo.admin_token = AG_ADMIN;
    vo.enrolment_token = AG_ENROL;
    vo.device_rate = 0;
    vo.threads = 4;
    vo.tick_interval_ms = 20;
    if (sl_server_create(&vo, c->store, c->engine, &c->server, err, sizeof err) != SL_OK)
        fail_msg("server: %s", err);
    if (sl_server_start(c->server, err, sizeof err) != SL_OK)
        fail_msg("server start: %s", err);
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:%u", (unsigned)sl_server_port(c->server));
    memset(&co, 0, sizeof co);
    co.base_url = c->url;
    co.admin_token = AG_ADMIN;
    co.max_attempts = 1;
    co.request_timeout_ms = 40000;
    assert_int_equal(sl_client_create(&co, &c->admin), SL_OK);
}

/* First-time acknowledgements (dup = 0) in the devices' acks.log files. */
static size_t fresh_acks(const char *fleet)
{
    size_t total = 0;
    for (int k = 0; k < DEVICES; k++) {
        char state[700];
        ag_ack *acks = NULL;
        size_t n;
        snprintf(state, sizeof state, "%s/dev-%d", fleet, k);
        n = ag_read_acks(state, &acks);
        for (size_t i = 0; i < n; i++)
            total += acks[i].dup == 0;
        free(acks);
    }
    return total;
}

/* The body of POST /v1/tasks for a one-round logreg task named @name
 * (malloc'd): valid, so that only its write can fail. */
static char *task_body(const char *name)
{
    sl_model *m = NULL;
    float *params;
    void *frame = NULL;
    size_t len = 0, cap, b64cap;
    char layout[4096], *b64, *body, *p;
    assert_int_equal(sl_model_create("logreg", &m), SL_OK);
    params = malloc(sl_model_params(m) * sizeof *params);
    assert_non_null(params);
    assert_int_equal(sl_model_init(m, params, 7), SL_OK);
    assert_int_equal(sl_frame_encode_model(sl_model_layout(m), params, 1, 3, &frame, &len), SL_OK);
    assert_true(sl_layout_format(sl_model_layout(m), layout, sizeof layout) < sizeof layout);
    b64cap = 4 * (len / 3 + 2) + 1;
    b64 = malloc(b64cap);
    assert_non_null(b64);
    assert_int_equal(sl_base64_encode(frame, len, b64, b64cap), SL_OK);
    cap = b64cap + 2 * sizeof layout + 256;
    body = malloc(cap);
    assert_non_null(body);
    p = body + snprintf(body, cap,
                        "{\"config\":{\"name\":\"%s\",\"rounds\":1,\"target\":1,\"quorum\":1},"
                        "\"layout\":\"",
                        name);
    for (const char *t = layout; *t != '\0'; t++) {
        if (*t == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else {
            *p++ = *t;
        }
    }
    snprintf(p, cap - (size_t)(p - body), "\",\"model\":\"%s\"}", b64);
    free(b64);
    free(frame);
    free(params);
    sl_model_free(m);
    return body;
}

/* A request that must write gets a 5xx problem document while the disk fails. */
static void expect_problem(ag_coord *c, const char *method, const char *path, const char *body,
                           const char *what)
{
    sl_client_response r;
    int rc;
    memset(&r, 0, sizeof r);
    rc = sl_client_request(c->admin, method, path, body, body ? strlen(body) : 0,
                           body ? "application/json" : NULL, NULL, &r);
    if (rc != SL_OK)
        fail_msg("%s %s (%s): no answer: %s", method, path, what, sl_strerror(rc));
    if (r.status < 500 || r.status > 599 ||
        strncmp(r.content_type, "application/problem+json", 24) != 0 || r.body == NULL ||
        strstr((const char *)r.body, "\"type\"") == NULL)
        fail_msg("%s %s while %s: HTTP %ld %s %s", method, path, what, r.status, r.content_type,
                 r.body ? (const char *)r.body : "");
    fprintf(stderr, "  %s %s: HTTP %ld %s\n", method, path, r.status, (const char *)r.body);
    sl_client_response_free(&r);
}

/* Whether the file @path holds @needle (a missing file holds nothing). */
/* Wait (at most 30 s, scaled) until @task has an open round with a device training in it:
 * an upload is then on its way, so a disk failed from now on meets a device's request
 * (armed between rounds, the failure can pass with the devices only checking in). */
static void wait_training(ag_coord *c, int64_t task)
{
    double end = fl_now() + 30.0 * sl_test_time_scale();
    while (fl_now() < end) {
        sl_task_status *st = malloc(sizeof *st);
        sl_round_stats rs;
        int busy = 0;
        assert_non_null(st);
        if (sl_engine_task_status(c->engine, task, st) == SL_OK && st->round_open &&
            sl_engine_round_stats(c->engine, st->round.id, &rs) == SL_OK)
            busy = rs.training > 0;
        free(st);
        if (busy)
            return;
        fl_sleep_ms(20);
    }
}

static int log_has(const char *path, const char *needle)
{
    void *text = NULL;
    size_t len = 0;
    int found;
    if (sl_fs_read_file(path, 64 << 20, &text, &len) != SL_OK)
        return 0;
    found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

static long readyz(ag_coord *c)
{
    sl_client_response r;
    long status = -1;
    memset(&r, 0, sizeof r);
    if (sl_client_request(c->admin, "GET", "/readyz", NULL, 0, NULL, NULL, &r) == SL_OK)
        status = r.status;
    sl_client_response_free(&r);
    return status;
}

typedef struct fault_kind {
    int what, err;
    const char *name;
} fault_kind;

static const fault_kind kinds[] = {
    {SL_FAULT_WRITE, SQLITE_FULL, "ENOSPC on write"},
    {SL_FAULT_WRITE, SQLITE_IOERR_WRITE, "EIO on write"},
    {SL_FAULT_SYNC, SQLITE_IOERR_FSYNC, "EIO on fsync"},
};

static void test_disk_faults(void **state)
{
    char root[400], data[600], fleet_dir[600], log[600], task_s[32], devices[16];
    char coord_dir[512];
    ag_coord c;
    int64_t task;
    pid_t fleet;
    uint64_t rng = seed;
    sl_store *s;
    fl_run run;
    size_t acked, pending, stored = 0;
    double end;
    int code, ready_while_failing = 0;
    (void)state;

    assert_int_equal(sl_faultvfs_register(), SQLITE_OK);
    sl_test_mkdtemp(root, sizeof root, "fl_disk");
    snprintf(data, sizeof data, "%s/fmnist", root);
    ag_make_data(data, DEVICES * 80, 50);
    coord_open(&c, root);
    task = ag_create_task(&c, "logreg",
                          "{\"name\":\"disk\",\"target\":3,\"quorum\":2,\"over_selection\":1,"
                          "\"selection_window_ms\":300,\"report_deadline_ms\":4000,"
                          "\"values\":\"fp16\",\"density\":0.3,\"local_epochs\":1,\"batch\":16,"
                          "\"local_lr\":0.05}");
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    snprintf(devices, sizeof devices, "%d", DEVICES);
    snprintf(fleet_dir, sizeof fleet_dir, "%s/fleet", root);
    snprintf(log, sizeof log, "%s/fleet.log", root);
    {
        const char *a[] = {"--coordinator",
                           c.url,
                           "--task",
                           task_s,
                           "--fleet",
                           devices,
                           "--of",
                           devices,
                           "--data",
                           data,
                           "--state-dir",
                           fleet_dir,
                           "--enrolment-token-file",
                           c.enrol_file,
                           "--retry-base",
                           "50ms",
                           "--max-wait",
                           "500ms",
                           "--max-attempts",
                           "1000",
                           "--request-timeout",
                           "20s",
                           "--chunk",
                           "1K",
                           "--log-level",
                           "debug",
                           NULL};
        fleet = fl_spawn_agent(a, log);
    }
    /* rounds close before the first fault */
    end = fl_now() + 60.0 * sl_test_time_scale();
    while (ag_model_version(&c, task) < 3 && fl_now() < end)
        fl_sleep_ms(50);
    if (ag_model_version(&c, task) < 3)
        fail_msg("no round closed before the faults; see %s", log);

    for (int i = 0; i < cycles; i++) {
        const fault_kind *k = &kinds[i % 3];
        long nth = 1 + (long)(sl_test_rand(&rng) % (uint64_t)max_nth);
        size_t before, during, after;
        int64_t v0;
        long ready;
        fprintf(stderr, "cycle %d: %s from call %ld on\n", i, k->name, nth);
        wait_training(&c, task);
        sl_faultvfs_arm(k->what, nth, k->err);
        end = fl_now() + 30.0 * sl_test_time_scale();
        while (sl_faultvfs_injected() == 0 && fl_now() < end)
            fl_sleep_ms(5);
        if (sl_faultvfs_injected() == 0)
            fail_msg("cycle %d: the fault was never reached (call %ld)", i, nth);
        /* answers already on the wire when the disk failed land in acks.log now */
        fl_sleep_ms(400);
        before = fresh_acks(fleet_dir);
        {
            char name[32], *body;
            snprintf(name, sizeof name, "probe-%d", i);
            body = task_body(name);
            expect_problem(&c, "POST", "/v1/tasks", body, k->name);
            free(body);
        }
        /* checked at the end, so that the other invariants are checked first */
        ready = readyz(&c);
        if (ready != 503)
            ready_while_failing++;
        fprintf(stderr, "  GET /readyz: HTTP %ld\n", ready);
        fl_sleep_ms(1200);
        /* give the devices time to meet the failing disk (a loaded machine may not have
         * sent one writing request yet): at most 15 s more, until one was answered 5xx */
        end = fl_now() + 15.0 * sl_test_time_scale();
        while (fl_now() < end && !log_has(log, "HTTP 50"))
            fl_sleep_ms(100);
        during = fresh_acks(fleet_dir);
        if (during != before)
            fail_msg("cycle %d (%s from call %ld): %zu uploads acknowledged while every %s "
                     "failed",
                     i, k->name, nth, during - before,
                     k->what == SL_FAULT_SYNC ? "fsync" : "write");
        fprintf(stderr, "  %ld faults injected; no upload acknowledged meanwhile\n",
                sl_faultvfs_injected());
        sl_faultvfs_disarm();
        /* recovery: ready again, uploads acknowledged again, rounds close again */
        v0 = ag_model_version(&c, task);
        end = fl_now() + 60.0 * sl_test_time_scale();
        while (fl_now() < end &&
               (ag_model_version(&c, task) < v0 + 2 || fresh_acks(fleet_dir) <= during))
            fl_sleep_ms(50);
        after = fresh_acks(fleet_dir);
        ready = readyz(&c);
        if (ag_model_version(&c, task) < v0 + 2 || after <= during || ready != 200)
            fail_msg("cycle %d (%s from call %ld): no recovery: version %lld -> %lld, acks %zu "
                     "-> %zu, /readyz %ld; see %s",
                     i, k->name, nth, (long long)v0, (long long)ag_model_version(&c, task), during,
                     after, ready, log);
        fprintf(stderr, "  recovered: version %lld -> %lld, %zu more uploads acknowledged\n",
                (long long)v0, (long long)ag_model_version(&c, task), after - during);
    }

    kill(fleet, SIGTERM);
    code = ag_wait(fleet, 30000);
    if (code != 0)
        fail_msg("the fleet ended with %d after SIGTERM; see %s", code, log);
    /* the devices were answered (5xx, then retried), not left hanging */
    {
        void *text = NULL;
        size_t len = 0;
        assert_int_equal(sl_fs_read_file(log, 64 << 20, &text, &len), SL_OK);
        if (strstr(text, "HTTP 50") == NULL)
            fail_msg("no device request was answered 5xx while the disk failed; see %s", log);
        free(text);
    }
    snprintf(coord_dir, sizeof coord_dir, "%s", c.dir);
    ag_coord_close(&c);
    /* the database through the ordinary VFS: intact, and holding every acknowledged update */
    s = fl_open_store(coord_dir);
    fl_read_run(s, task, &run);
    acked = fl_check_fleet_acks(s, fleet_dir, DEVICES, &pending);
    for (size_t i = 0; i < run.n; i++)
        stored += run.rounds[i].n;
    if (stored != acked + pending)
        fail_msg("%zu updates stored, %zu acknowledged + %zu pending", stored, acked, pending);
    fl_check_quorum(&run);
    fprintf(stderr,
            "%d fault cycles: %zu rounds (%llu closed), %zu acknowledged updates, all "
            "stored once\n",
            cycles, run.n, (unsigned long long)run.closed, acked);
    fl_run_free(&run);
    sl_store_close(s);
    if (ready_while_failing > 0)
        fail_msg("GET /readyz answered other than 503 in %d of %d cycles while every %s failed "
                 "(its write transaction writes nothing when no upload session expired)",
                 ready_while_failing, cycles, "write or fsync");
    sl_test_rmtree(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_faults),
    };
    if (argc > 1)
        cycles = (int)strtol(argv[1], NULL, 10);
    if (argc > 2)
        seed = strtoull(argv[2], NULL, 0);
    if (cycles > 3)
        max_nth = 200;
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
