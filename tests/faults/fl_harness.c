/* fl_harness.c - see fl_harness.h. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../support/sl_test.h"
#include "fl_harness.h"
#include "starling/api_sign.h"

double fl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fl_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void write_text(const char *path, const char *text)
{
    assert_int_equal(sl_fs_write_atomic(path, text, strlen(text), 0600), SL_OK);
}

/* A port the kernel just handed out (and took back): free unless someone
 * grabs it in between, which on loopback in a test is unlikely. */
static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

void fl_coord_init(fl_coord *c, const char *root, const char *name)
{
    sl_client_options co;
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/%s", root, name);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    snprintf(c->data_dir, sizeof c->data_dir, "%s/data", c->dir);
    snprintf(c->log, sizeof c->log, "%s/coordinator.log", c->dir);
    snprintf(c->admin_file, sizeof c->admin_file, "%s/admin", c->dir);
    snprintf(c->enrol_file, sizeof c->enrol_file, "%s/enrol", c->dir);
    write_text(c->admin_file, AG_ADMIN "\n");
    write_text(c->enrol_file, AG_ENROL "\n");
    snprintf(c->listen, sizeof c->listen, "127.0.0.1:%d", free_port());
    snprintf(c->url, sizeof c->url, "http://%s", c->listen);
    memset(&co, 0, sizeof co);
    co.base_url = c->url;
    co.admin_token = AG_ADMIN;
    co.max_attempts = 1;
    co.connect_timeout_ms = 2000;
    co.request_timeout_ms = 10000;
    assert_int_equal(sl_client_create(&co, &c->admin), SL_OK);
}

void fl_coord_start(fl_coord *c)
{
    char *argv[] = {(char *)SL_COORDINATOR_BIN,
                    "--listen",
                    c->listen,
                    "--data-dir",
                    c->data_dir,
                    "--insecure-http",
                    "--admin-token-file",
                    c->admin_file,
                    "--enrolment-token-file",
                    c->enrol_file,
                    "--device-rate",
                    "0",
                    "--grace",
                    "2s",
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    double end;
    size_t n = 14; /* the first free slot */
    if (c->store[0] != '\0') {
        argv[n++] = "--store";
        argv[n++] = c->store;
    }
    if (c->replica[0] != '\0') {
        argv[n++] = "--replica";
        argv[n++] = c->replica;
    }
    if (c->lease[0] != '\0') {
        argv[n++] = "--leader-lease";
        argv[n++] = c->lease;
    }
    assert_int_equal(c->pid, 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        int fd = open(c->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        sl_test_execv(SL_COORDINATOR_BIN, argv);
        _exit(127);
    }
    c->starts++;
    end = fl_now() + 20.0 * sl_test_time_scale();
    while (fl_now() < end) {
        sl_client_response r;
        int status;
        memset(&r, 0, sizeof r);
        if (sl_client_request(c->admin, "GET", "/healthz", NULL, 0, NULL, NULL, &r) == SL_OK) {
            long code = r.status;
            sl_client_response_free(&r);
            if (code == 200)
                return;
        }
        if (waitpid(c->pid, &status, WNOHANG) == c->pid)
            fail_msg("the coordinator (start %u) exited with status %d; see %s", c->starts, status,
                     c->log);
        fl_sleep_ms(20);
    }
    fail_msg("the coordinator (start %u) did not answer /healthz in 20 s; see %s", c->starts,
             c->log);
}

void fl_coord_kill(fl_coord *c)
{
    assert_true(c->pid > 0);
    kill(c->pid, SIGKILL);
    assert_int_equal(waitpid(c->pid, NULL, 0), c->pid);
    c->pid = 0;
}

void fl_coord_stop(fl_coord *c)
{
    int code;
    assert_true(c->pid > 0);
    kill(c->pid, SIGTERM);
    code = ag_wait(c->pid, 20000);
    c->pid = 0;
    if (code != 0)
        fail_msg("the coordinator ended with %d after SIGTERM; see %s", code, c->log);
}

void fl_coord_free(fl_coord *c)
{
    if (c->pid > 0)
        fl_coord_kill(c);
    sl_client_free(c->admin);
    c->admin = NULL;
}

int fl_request(fl_coord *c, const char *method, const char *path, const char *body,
               sl_client_response *r)
{
    memset(r, 0, sizeof *r);
    return sl_client_request(c->admin, method, path, body, body ? strlen(body) : 0,
                             body ? "application/json" : NULL, NULL, r);
}

int64_t fl_create_task(fl_coord *c, const char *model, const char *config_json)
{
    ag_coord ag;
    memset(&ag, 0, sizeof ag);
    snprintf(ag.url, sizeof ag.url, "%s", c->url);
    ag.admin = c->admin;
    return ag_create_task(&ag, model, config_json);
}

int fl_task_finished(fl_coord *c)
{
    sl_client_response r;
    int finished;
    if (fl_request(c, "GET", "/v1/status", NULL, &r) != SL_OK)
        return -1;
    if (r.status != 200 || r.body == NULL) {
        sl_client_response_free(&r);
        return -1;
    }
    finished = strstr((const char *)r.body, "\"finished\":true") != NULL;
    sl_client_response_free(&r);
    return finished;
}

int64_t fl_model_version(fl_coord *c)
{
    sl_client_response r;
    const char *at;
    int64_t version = -1;
    if (fl_request(c, "GET", "/v1/status", NULL, &r) != SL_OK)
        return -1;
    if (r.status == 200 && r.body != NULL &&
        (at = strstr((const char *)r.body, "\"model_version\":")) != NULL)
        version = strtoll(at + strlen("\"model_version\":"), NULL, 10);
    sl_client_response_free(&r);
    return version;
}

pid_t fl_spawn_agent(const char *const *args, const char *log)
{
    return ag_spawn_agent(args, log);
}

void fl_copy_tree(const char *from, const char *to)
{
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

sl_store *fl_open_store(const char *data_dir)
{
    sl_store_options so;
    sl_store *s = NULL;
    char db[700], err[256];
    sl_store_options_default(&so);
    if (sl_store_is_url(data_dir))
        snprintf(db, sizeof db, "%s", data_dir);
    else
        snprintf(db, sizeof db, "%s/starling.db", data_dir);
    so.path = db;
    so.check = SL_STORE_CHECK_FULL;
    if (sl_store_open(&so, &s, err, sizeof err) != SL_OK)
        fail_msg("store %s: %s", db, err);
    return s;
}

/* ---- a run ---------------------------------------------------------------------------- */

typedef struct round_list {
    sl_round_record *r;
    size_t n, cap;
} round_list;

static int collect_round(void *ctx, const sl_round_record *r)
{
    round_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->r = realloc(l->r, l->cap * sizeof *l->r);
        assert_non_null(l->r);
    }
    l->r[l->n++] = *r;
    return 0;
}

static int collect_update(void *ctx, int64_t device_id, const void *frame, size_t len,
                          uint32_t num_samples, const uint8_t *sha256)
{
    fl_round *fr = ctx;
    uint8_t digest[32];
    (void)num_samples;
    if (len == 0) /* retention took its bytes (the task's retain_last): the record stays */
        fr->retired++;
    else
        sl_sha256(frame, len, digest);
    if (len > 0 && memcmp(digest, sha256, 32) != 0)
        fail_msg("round %lld: the update of device %lld is not the bytes of its digest",
                 (long long)fr->rec.id, (long long)device_id);
    if (fr->n == FL_MAX_ACCEPTED)
        fail_msg("round %lld: more than %d updates", (long long)fr->rec.id, FL_MAX_ACCEPTED);
    if (fr->n > 0 && fr->acc[fr->n - 1].device >= device_id)
        fail_msg("round %lld: updates not in device-id order (or twice)", (long long)fr->rec.id);
    fr->acc[fr->n].device = device_id;
    memcpy(fr->acc[fr->n].sha, sha256, 32);
    fr->n++;
    return 0;
}

/* The digest of version @v, checked against its frame; a version whose bytes retention
 * retired (the task's retain_last) gives its record's. */
static int model_sha(sl_store *s, int64_t task, int64_t v, uint8_t sha[32], int64_t *parent)
{
    sl_model_record m;
    uint8_t digest[32];
    if (sl_store_get_model(s, task, v, &m) != SL_OK) {
        if (sl_store_get_model_info(s, task, v, &m) != SL_OK)
            return 0;
        assert_true(m.retired);
        memcpy(sha, m.sha256, 32);
        if (parent != NULL)
            *parent = m.parent;
        sl_store_model_free(&m);
        return 1;
    }
    sl_sha256(m.frame, m.frame_len, digest);
    if (memcmp(digest, m.sha256, 32) != 0)
        fail_msg("model version %lld: the stored digest is not the frame's", (long long)v);
    memcpy(sha, m.sha256, 32);
    if (parent != NULL)
        *parent = m.parent;
    sl_store_model_free(&m);
    return 1;
}

void fl_read_run(sl_store *s, int64_t task, fl_run *out)
{
    round_list l = {NULL, 0, 0};
    sl_model_record latest;
    memset(out, 0, sizeof *out);
    assert_int_equal(sl_store_list_rounds(s, task, 0, 100000, collect_round, &l), 0);
    out->rounds = calloc(l.n ? l.n : 1, sizeof *out->rounds);
    assert_non_null(out->rounds);
    out->n = l.n;
    for (size_t i = 0; i < l.n; i++) {
        fl_round *fr = &out->rounds[i];
        uint64_t count = 0;
        fr->rec = l.r[l.n - 1 - i]; /* newest first in the list */
        assert_int_equal(sl_store_foreach_update(s, fr->rec.id, collect_update, fr), 0);
        assert_int_equal(sl_store_count_updates(s, fr->rec.id, &count), SL_OK);
        assert_int_equal(count, fr->n);
        if (fr->retired > 0 && (fr->retired != fr->n || fr->rec.state < SL_ROUND_CLOSED))
            fail_msg("round %lld (state %d): %zu of its %zu updates retired", (long long)fr->rec.id,
                     (int)fr->rec.state, fr->retired, fr->n);
        if ((fr->rec.state == SL_ROUND_CLOSED || fr->rec.state == SL_ROUND_ABANDONED) &&
            fr->rec.reported != fr->n)
            fail_msg("round %lld (no %lld) reports %u updates, %zu are stored",
                     (long long)fr->rec.id, (long long)fr->rec.round_no, fr->rec.reported, fr->n);
        if (!model_sha(s, task, fr->rec.base_version, fr->base_sha, NULL))
            fail_msg("round %lld: base version %lld is not stored", (long long)fr->rec.id,
                     (long long)fr->rec.base_version);
        if (fr->rec.state == SL_ROUND_CLOSED) {
            int64_t parent = -1;
            out->closed++;
            fr->model_version = fr->rec.base_version + 1;
            if (!model_sha(s, task, fr->model_version, fr->model_sha, &parent))
                fail_msg("round %lld closed but version %lld is not stored", (long long)fr->rec.id,
                         (long long)fr->model_version);
            assert_int_equal(parent, fr->rec.base_version);
        } else if (fr->rec.state == SL_ROUND_ABANDONED) {
            out->abandoned++;
        }
        /* rounds follow each other: each one starts from the model the last closed one made */
        if (i > 0) {
            const fl_round *prev = &out->rounds[i - 1];
            int64_t want =
                prev->rec.state == SL_ROUND_CLOSED ? prev->model_version : prev->rec.base_version;
            assert_int_equal(fr->rec.round_no, prev->rec.round_no + 1);
            assert_int_equal(fr->rec.base_version, want);
        }
    }
    free(l.r);
    assert_int_equal(sl_store_get_model(s, task, 0, &latest), SL_OK);
    out->final_version = latest.version;
    memcpy(out->final_sha, latest.sha256, 32);
    sl_store_model_free(&latest);
    assert_int_equal(out->final_version, 1 + (int64_t)out->closed);
}

void fl_run_free(fl_run *r)
{
    free(r->rounds);
    memset(r, 0, sizeof *r);
}

int fl_same_accepted(const fl_round *a, const fl_round *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->acc[i].device != b->acc[i].device || memcmp(a->acc[i].sha, b->acc[i].sha, 32) != 0)
            return 0;
    return 1;
}

size_t fl_check_fleet_acks(sl_store *s, const char *fleet_dir, unsigned devices, size_t *pending)
{
    ag_coord ag;
    size_t total = 0, in_flight = 0;
    memset(&ag, 0, sizeof ag);
    ag.store = s;
    for (unsigned k = 0; k < devices; k++) {
        char state[700];
        ag_ack *acks = NULL;
        size_t n;
        int64_t round;
        uint8_t sha[32];
        snprintf(state, sizeof state, "%s/dev-%u", fleet_dir, k);
        n = ag_read_acks(state, &acks);
        total += ag_check_acks(&ag, acks, n);
        if (ag_pending(state, &round, sha) && ag_stored(&ag, round, ag_device_id(state), sha))
            in_flight++;
        free(acks);
    }
    if (pending != NULL)
        *pending = in_flight;
    return total;
}

size_t fl_check_quorum(const fl_run *r)
{
    size_t checked = 0;
    for (size_t i = 0; i < r->n; i++) {
        const sl_round_record *rec = &r->rounds[i].rec;
        if (rec->state == SL_ROUND_CLOSED) {
            if (rec->reported < rec->quorum)
                fail_msg("round no %lld closed with %u reports, below its quorum %u",
                         (long long)rec->round_no, rec->reported, rec->quorum);
            checked++;
        } else if (rec->state == SL_ROUND_ABANDONED) {
            if (rec->reported >= rec->quorum)
                fail_msg("round no %lld abandoned with %u reports, its quorum %u was met (%s)",
                         (long long)rec->round_no, rec->reported, rec->quorum, rec->error);
            checked++;
        }
    }
    return checked;
}

void fl_check_round_count(const fl_run *r, unsigned rounds, const char *name)
{
    if (r->n == rounds)
        return;
    if (r->n > rounds && rounds > 0) {
        const sl_round_record *last = &r->rounds[rounds - 1].rec;
        fail_msg("%s: the task is configured for %u rounds and ran %zu: round no %u ended %s "
                 "(%s) and the next one opened anyway",
                 name, rounds, r->n, rounds,
                 last->state == SL_ROUND_ABANDONED ? "ABANDONED" : "CLOSED", last->error);
    }
    fail_msg("%s: the task is configured for %u rounds and ran %zu", name, rounds, r->n);
}

/* ---- fleets ------------------------------------------------------------------------------ */

void fl_fleet_argv(fl_fleet *f, const fl_coord *c, int64_t task, unsigned devices, const char *data,
                   const char *state, const char *log)
{
    const char *a[] = {"--coordinator",
                       c->url,
                       "--task",
                       f->task,
                       "--fleet",
                       f->devices,
                       "--of",
                       f->devices,
                       "--partition",
                       "iid",
                       "--data",
                       data,
                       "--state-dir",
                       f->state,
                       "--enrolment-token-file",
                       c->enrol_file,
                       "--seed",
                       "3",
                       "--retry-base",
                       "20ms",
                       "--max-wait",
                       "400ms",
                       "--max-attempts",
                       "30",
                       "--request-timeout",
                       "5s",
                       "--chunk",
                       "2K",
                       "--download-chunk",
                       "8K",
                       "--bandwidth-aware=false",
                       "--log-level",
                       "debug",
                       NULL};
    snprintf(f->task, sizeof f->task, "%lld", (long long)task);
    snprintf(f->devices, sizeof f->devices, "%u", devices);
    snprintf(f->state, sizeof f->state, "%s", state);
    snprintf(f->log, sizeof f->log, "%s", log);
    memcpy(f->argv, a, sizeof a);
}

/* Enrol the fleet's devices once: a coordinator with no task, a fleet that
 * enrols and then finds task 999 missing; stopped once every device.id is
 * written. */
void fl_make_template(const char *root, const char *data, unsigned devices, fl_coord *t)
{
    char state[600], log[600];
    fl_fleet f;
    pid_t pid;
    double end;
    int code;
    snprintf(state, sizeof state, "%s/tmpl-fleet", root);
    snprintf(log, sizeof log, "%s/tmpl-fleet.log", root);
    fl_coord_init(t, root, "tmpl");
    fl_coord_start(t);
    fl_fleet_argv(&f, t, 999, devices, data, state, log);
    pid = fl_spawn_agent(f.argv, log);
    end = fl_now() + 30.0 * sl_test_time_scale();
    for (unsigned k = 0; k < devices && fl_now() < end;) {
        char path[800];
        struct stat st;
        snprintf(path, sizeof path, "%s/dev-%u/device.id", state, k);
        if (stat(path, &st) == 0)
            k++;
        else if (waitpid(pid, &code, WNOHANG) == pid)
            fail_msg("the enrolling fleet exited (%d); see %s", code, log);
        else
            fl_sleep_ms(20);
    }
    kill(pid, SIGTERM);
    code = ag_wait(pid, 20000);
    assert_int_equal(code, 0);
    for (unsigned k = 0; k < devices; k++) {
        char dev[700];
        snprintf(dev, sizeof dev, "%s/dev-%u", state, k);
        assert_true(ag_device_id(dev) > 0);
    }
    fl_coord_stop(t);
}

size_t fl_compare_runs(const fl_run *ref, const fl_run *other)
{
    size_t matched = 0, both_closed = 0, prefix = 0, compared;
    int in_prefix = 1;
    char a[65], b[65];
    compared = ref->n < other->n ? ref->n : other->n;
    for (size_t i = 0; i < compared; i++) {
        const fl_round *r = &ref->rounds[i], *k = &other->rounds[i];
        int same;
        assert_int_equal(r->rec.round_no, k->rec.round_no);
        same = memcmp(r->base_sha, k->base_sha, 32) == 0 && fl_same_accepted(r, k);
        if (!same) {
            in_prefix = 0;
            fprintf(stderr, "round %lld: differs (%s base, %zu vs %zu accepted, state %d vs %d)\n",
                    (long long)r->rec.round_no,
                    memcmp(r->base_sha, k->base_sha, 32) == 0 ? "same" : "another", r->n, k->n,
                    r->rec.state, k->rec.state);
            continue;
        }
        matched++;
        prefix += in_prefix;
        /* the same base and the same accepted set: the same outcome, bit for bit */
        if (r->rec.state != k->rec.state)
            fail_msg("round %lld: the same accepted set, but state %d vs %d",
                     (long long)r->rec.round_no, r->rec.state, k->rec.state);
        if (r->rec.state == SL_ROUND_CLOSED) {
            both_closed++;
            if (memcmp(r->model_sha, k->model_sha, 32) != 0) {
                sl_hex(r->model_sha, 32, a);
                sl_hex(k->model_sha, 32, b);
                fail_msg("round %lld: the same base and accepted set, but model %s vs %s",
                         (long long)r->rec.round_no, a, b);
            }
        }
    }
    fprintf(stderr,
            "accepted sets matched in %zu of %zu rounds (%zu with the same new model, the first "
            "%zu in a row)\n",
            matched, compared, both_closed, prefix);
    if (prefix == compared && ref->n == other->n) {
        assert_memory_equal(ref->final_sha, other->final_sha, 32);
        fprintf(stderr, "every round matched: the final models are bit-identical\n");
    }
    return matched;
}
