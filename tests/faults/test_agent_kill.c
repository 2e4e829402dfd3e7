/*
 * The device agent killed with SIGKILL at random instants of its life,
 * restarted from its state directory each time, against a coordinator that
 * keeps running (in this process). Three agent processes work on one task;
 * one killer thread per agent picks a phase of its life to hit (right after
 * its start, or a few milliseconds after a line of its log: check-in, a
 * range of the model download, the end of training, the pending upload,
 * upload progress, the receipt before the residual is written, the
 * acknowledgement), kills, and restarts it.
 *
 * Where each kill landed is read from the state directory the kill left:
 *   mid-write     a temporary file of an atomic write is there (the write
 *                 was cut between open and rename)
 *   mid-download  model.partial is there (bytes of a download in progress)
 *   mid-upload    a pending upload is there with fewer bytes acknowledged
 *                 than its frame holds
 *   other         anything else (start-up, check-in, waiting, training)
 * The distribution is printed with the last log event before each kill.
 *
 * Afterwards (invariants of DESIGN.md: an acknowledged update is never lost
 * and never counted twice; an agent resumes from its directory):
 *   - every line of every acks.log is an update the store holds, with that
 *     update id, exactly once for its (round, device); no (round, device)
 *     is acknowledged twice;
 *   - every finished round's reported count equals the updates stored;
 *   - every stored update is acknowledged in an acks.log, or is the
 *     pending upload of an agent stopped before it heard the receipt;
 *   - every state directory opens again (key, model, residual, pending),
 *     and no temporary file survives a restart;
 *   - residual mass: for every agent, the sum of its updates the store
 *     holds under an acknowledgement + its residual on disk == the sum of
 *     every update it trained into a committed generation (audit/, see
 *     sl_agent_options.audit), within float rounding; nothing discarded;
 *   - the kills hit mid-download, mid-upload and mid-write;
 *   - the agents made progress despite the kills.
 * `test_agent_kill <seconds> <kills>` changes the run (default 120 s at
 * most, 100 kills; the slow label runs 1000).
 */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "../integration/agent_harness.h"
#include "../support/sl_split_test.h"
#include "../support/sl_test.h"
#include "starling/codec.h"
#include "starling/nn.h"

#define AGENTS 3

static const char *const events[] = {"start",    "enrolled", "checkin",  "download",
                                     "model",    "epoch",    "prepared", "progress",
                                     "accepted", "folded",   "other"};
#define NEVENTS (sizeof events / sizeof events[0])

enum { AT_WRITE, AT_DOWNLOAD, AT_UPLOAD, AT_OTHER, NWHERE };
static const char *const wheres[NWHERE] = {"mid-write", "mid-download", "mid-upload", "other"};

/* A target: what to wait for in the log after the agent's (re)start, and
 * the longest random delay after it, in milliseconds. TMP_FILE: wait until
 * a temporary file of an atomic write appears in the state directory (the
 * agent is writing one of its files), then kill at once. */
typedef struct target {
    const char *needle; /* NULL: right after the start */
    int delay_ms;
} target;

#define TMP_FILE "<tmp>"

static const target targets[] = {
    {NULL, 60},                   /* start-up: data, key, enrolment */
    {"event=checkin ", 15},       /* the model request */
    {"event=download ", 3},       /* between two ranges of the model */
    {"event=download ", 0},       /* ... at once */
    {"event=epoch ", 3},          /* audit, pending frame and vectors written */
    {"event=prepared ", 6},       /* the upload starts */
    {"event=progress ", 2},       /* between two PATCHes */
    {"event=progress ", 0},       /* ... at once */
    {": accepted as update ", 0}, /* the receipt came: the residual is written */
    {": accepted as update ", 2}, /* ... acks.log, counters */
    {"event=accepted ", 2},       /* after: counters, the next check-in */
    {TMP_FILE, 0},                /* inside an atomic write (residual, pending, model...) */
    {TMP_FILE, 0},
};
#define NTARGETS (sizeof targets / sizeof targets[0])

static double seconds = 120;
static int max_kills = 100;

typedef struct killer {
    int k;
    const char *const *args;
    const char *log, *state;
    pid_t pid;
    long offset; /* where the current life's log starts */
    uint64_t rng;
    unsigned hist[NEVENTS], where[NWHERE];
    unsigned kills;
} killer;

static atomic_int kills_total;
static double deadline;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n = 0;
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fclose(f);
    }
    return n;
}

static int exists(const char *dir, const char *name)
{
    char path[800];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f != NULL)
        fclose(f);
    return f != NULL;
}

/* Bytes of the current life's log from @from (at most @cap - 1), NUL-terminated. */
static size_t read_from(const char *log, long from, char *buf, size_t cap)
{
    FILE *f = fopen(log, "rb");
    size_t n = 0;
    if (f != NULL) {
        if (fseek(f, from, SEEK_SET) == 0)
            n = fread(buf, 1, cap - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return n;
}

/* Wait until @needle appears in the log after byte @from (at most @ms);
 * the scan moves on through a long log with an overlap. */
static int wait_text(const char *log, long from, const char *needle, int ms)
{
    static _Thread_local char buf[65536];
    long pos = from, overlap = (long)strlen(needle);
    for (int waited = 0; waited < ms; waited += 2) {
        size_t n = read_from(log, pos, buf, sizeof buf);
        if (strstr(buf, needle) != NULL)
            return 1;
        if ((long)n > overlap)
            pos += (long)n - overlap;
        if (n < sizeof buf - 1)
            sleep_ms(2);
    }
    return 0;
}

/* The last event the agent logged in its current life. */
static size_t last_event(const char *log, long from)
{
    static _Thread_local char buf[8193];
    char *p, *last = NULL;
    long size = file_size(log), start = size - 8192 > from ? size - 8192 : from;
    read_from(log, start, buf, sizeof buf);
    for (p = buf; (p = strstr(p, "event=")) != NULL; p += 6)
        last = p + 6;
    if (last == NULL)
        return 0;
    for (size_t i = 1; i + 1 < NEVENTS; i++)
        if (strncmp(last, events[i], strlen(events[i])) == 0 && last[strlen(events[i])] == ' ')
            return i;
    return NEVENTS - 1;
}

/* A temporary file of an interrupted atomic write in @dir/@sub. */
static int has_tmp(const char *dir, const char *sub)
{
    char path[2100];
    struct dirent *e;
    DIR *d;
    int found = 0;
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    d = opendir(path);
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL && !found)
        found = strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return found;
}

/* A pending upload with bytes still to send (pending/upload's offset below
 * the frame's length in pending/meta). */
static int upload_unfinished(const char *dir)
{
    char path[800], *p;
    void *meta = NULL, *up = NULL;
    size_t len;
    long long flen = -1, off = 0;
    int unfinished;
    snprintf(path, sizeof path, "%s/pending/meta", dir);
    if (sl_fs_read_file(path, 1 << 16, &meta, &len) != SL_OK)
        return 0;
    if ((p = strstr(meta, "\nframe_len=")) != NULL)
        flen = strtoll(p + 11, NULL, 10);
    snprintf(path, sizeof path, "%s/pending/upload", dir);
    if (sl_fs_read_file(path, 1 << 16, &up, &len) == SL_OK && (p = strstr(up, "offset=")) != NULL)
        off = strtoll(p + 7, NULL, 10);
    unfinished = flen > 0 && off < flen;
    free(meta);
    free(up);
    return unfinished;
}

static size_t where_killed(const char *dir)
{
    if (has_tmp(dir, ".") || has_tmp(dir, "pending") || has_tmp(dir, "audit"))
        return AT_WRITE;
    if (exists(dir, "model.partial"))
        return AT_DOWNLOAD;
    if (upload_unfinished(dir))
        return AT_UPLOAD;
    return AT_OTHER;
}

/* Wait (at most @ms) until a write is in progress in @dir. */
static int wait_tmp(const char *dir, int ms)
{
    double end = now_s() + ms / 1000.0;
    struct timespec ts = {0, 200000};
    while (now_s() < end) {
        if (has_tmp(dir, ".") || has_tmp(dir, "pending") || has_tmp(dir, "audit"))
            return 1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void *killer_main(void *arg)
{
    killer *kl = arg;
    while (now_s() < deadline && atomic_load(&kills_total) < max_kills) {
        const target *t = &targets[sl_test_rand(&kl->rng) % NTARGETS];
        long delay =
            t->delay_ms > 0 ? (long)(sl_test_rand(&kl->rng) % (uint64_t)(t->delay_ms + 1)) : 0;
        if (t->needle != NULL && strcmp(t->needle, TMP_FILE) == 0)
            wait_tmp(kl->state, 2500);
        else if (t->needle == NULL || wait_text(kl->log, kl->offset, t->needle, 2500))
            sleep_ms(delay);
        if (atomic_fetch_add(&kills_total, 1) >= max_kills)
            break;
        kill(kl->pid, SIGKILL);
        waitpid(kl->pid, NULL, 0);
        kl->kills++;
        kl->hist[last_event(kl->log, kl->offset)]++;
        kl->where[where_killed(kl->state)]++;
        kl->offset = file_size(kl->log);
        kl->pid = ag_spawn_agent(kl->args, kl->log);
    }
    return NULL;
}

/* ---- residual mass --------------------------------------------------------------------------- */

typedef struct sent_sum {
    const sl_layout *layout;
    sl_store *store; /* a split update is read against the versions it names */
    int64_t task;
    int64_t device;
    double *dense;
    unsigned found;
} sent_sum;

static int add_sent(void *ctx, int64_t device_id, const void *frame, size_t len,
                    uint32_t num_samples, const uint8_t *sha256)
{
    sent_sum *s = ctx;
    (void)num_samples, (void)sha256;
    if (device_id != s->device)
        return 0;
    void *plain;
    size_t plain_len;
    int rc;
    s->found++;
    if (sl_test_plain_frame(s->store, s->task, s->layout, frame, len, &plain, &plain_len) != SL_OK)
        return -1;
    rc = sl_frame_accumulate_update_f64(s->layout, plain, plain_len, NULL, 1.0, s->dense);
    free(plain);
    return rc == SL_OK ? 0 : -1;
}

/* sum of acknowledged frames (from the store) + residual == audit/trained.<resolved gen>;
 * returns the largest error, *@scale the largest |trained|. */
static double mass_error(ag_coord *c, int64_t task, const char *state, const ag_ack *acks,
                         size_t nacks, const float *residual, size_t n, double *scale)
{
    char path[2048];
    void *text = NULL, *trained = NULL;
    size_t len = 0;
    unsigned long long resolved = 0, discarded = 0;
    sl_model *m = NULL;
    sent_sum s;
    double worst = 0;
    char *p;
    snprintf(path, sizeof path, "%s/counters", state);
    assert_int_equal(sl_fs_read_file(path, 1 << 16, &text, &len), SL_OK);
    assert_non_null(p = strstr(text, "resolved_gen="));
    resolved = strtoull(p + 13, NULL, 10);
    assert_non_null(p = strstr(text, "discarded="));
    discarded = strtoull(p + 10, NULL, 10);
    free(text);
    /* a discarded update is dropped on purpose: none is expected here */
    assert_int_equal(discarded, 0);
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    assert_int_equal(sl_model_params(m), n);
    s.layout = sl_model_layout(m);
    s.store = c->store;
    s.task = task;
    s.device = ag_device_id(state);
    s.dense = calloc(n, sizeof(double));
    assert_non_null(s.dense);
    for (size_t i = 0; i < nacks; i++) {
        s.found = 0;
        assert_int_equal(sl_store_foreach_update(c->store, acks[i].round, add_sent, &s), 0);
        assert_int_equal(s.found, 1);
    }
    if (resolved > 0) {
        snprintf(path, sizeof path, "%s/audit/trained.%llu", state, resolved);
        if (sl_fs_read_file(path, n * sizeof(double) + 1, &trained, &len) != SL_OK)
            fail_msg("%s is missing", path);
        assert_int_equal(len, n * sizeof(double));
    } else {
        trained = calloc(n, sizeof(double));
        assert_non_null(trained);
    }
    *scale = 0;
    for (size_t i = 0; i < n; i++) {
        double want = ((const double *)trained)[i], got = s.dense[i] + (double)residual[i];
        if (fabs(got - want) > worst)
            worst = fabs(got - want);
        if (fabs(want) > *scale)
            *scale = fabs(want);
    }
    fprintf(stderr,
            "%s: %zu acknowledged, %llu generations resolved: max |sent + residual - "
            "trained| %.3g (scale %.3g)\n",
            state, nacks, resolved, worst, *scale);
    free(trained);
    free(s.dense);
    sl_model_free(m);
    return worst;
}

static void test_kill_agents(void **state)
{
    char dir[512], data_dir[600], task_s[32], client_s[AGENTS][8], states[AGENTS][600];
    char logs[AGENTS][600];
    const char *args[AGENTS][40];
    killer kl[AGENTS];
    pthread_t threads[AGENTS];
    unsigned hist[NEVENTS] = {0}, where[NWHERE] = {0};
    uint64_t updates, closed;
    size_t acked = 0, in_flight = 0;
    ag_coord c;
    int64_t task;
    int kills = 0;
    double t0;
    (void)state;

    sl_test_mkdtemp(dir, sizeof dir, "agent_kill");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ag_make_data(data_dir, AGENTS * 120, 50);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          /* the classic residual, undecayed: its mass is what the audit
                           * checks (sent + residual = trained) */
                          "{\"name\":\"kill\",\"target\":3,\"quorum\":1,\"over_selection\":1,"
                          "\"error_feedback\":\"residual\",\"residual_decay\":1,"
                          "\"selection_window_ms\":200,\"report_deadline_ms\":3000,"
                          "\"values\":\"fp16\",\"density\":0.05,\"local_epochs\":1,"
                          "\"batch\":32,\"local_lr\":0.05}");
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    memset(kl, 0, sizeof kl);
    for (int k = 0; k < AGENTS; k++) {
        const char *a[] = {"--coordinator",
                           c.url,
                           "--task",
                           task_s,
                           "--data",
                           data_dir,
                           "--partition",
                           "iid",
                           "--of",
                           "3",
                           "--client",
                           client_s[k],
                           "--state-dir",
                           states[k],
                           "--enrolment-token-file",
                           c.enrol_file,
                           "--retry-base",
                           "20ms",
                           "--max-wait",
                           "500ms",
                           "--chunk",
                           "4K",
                           "--download-chunk",
                           "32K",
                           "--audit",
                           "--request-timeout",
                           "5s",
                           "--log-level",
                           "debug",
                           NULL};
        snprintf(client_s[k], sizeof client_s[k], "%d", k);
        snprintf(states[k], sizeof states[k], "%s/agent-%d", dir, k);
        snprintf(logs[k], sizeof logs[k], "%s/agent-%d.log", dir, k);
        memcpy(args[k], a, sizeof a);
        kl[k].k = k;
        kl[k].args = args[k];
        kl[k].log = logs[k];
        kl[k].state = states[k];
        kl[k].rng = 0x5eed + 7919 * (uint64_t)k;
        kl[k].pid = ag_spawn_agent(args[k], logs[k]);
    }
    t0 = now_s();
    deadline = t0 + seconds;
    atomic_store(&kills_total, 0);
    for (int k = 0; k < AGENTS; k++)
        assert_int_equal(pthread_create(&threads[k], NULL, killer_main, &kl[k]), 0);
    for (int k = 0; k < AGENTS; k++)
        pthread_join(threads[k], NULL);
    fprintf(stderr, "kills took %.1f s\n", now_s() - t0);
    sleep_ms(300); /* the last ones restarted have their SIGTERM handler */
    for (int k = 0; k < AGENTS; k++)
        kill(kl[k].pid, SIGTERM);
    for (int k = 0; k < AGENTS; k++) {
        int code = ag_wait(kl[k].pid, 15000);
        if (code != 0)
            fail_msg("agent %d ended with %d after SIGTERM", k, code);
        kills += (int)kl[k].kills;
        for (size_t i = 0; i < NEVENTS; i++)
            hist[i] += kl[k].hist[i];
        for (size_t i = 0; i < NWHERE; i++)
            where[i] += kl[k].where[i];
    }
    fprintf(stderr, "%d kills; where they landed:", kills);
    for (size_t i = 0; i < NWHERE; i++)
        fprintf(stderr, " %s %u", wheres[i], where[i]);
    fprintf(stderr, "\nthe last event before each:");
    for (size_t i = 0; i < NEVENTS; i++)
        if (hist[i] > 0)
            fprintf(stderr, " %s %u", events[i], hist[i]);
    fprintf(stderr, "\n");

    ag_coord_stop_server(&c);
    for (int k = 0; k < AGENTS; k++) {
        ag_ack *acks;
        size_t n = ag_read_acks(states[k], &acks), nres = 0;
        sl_agent_options o;
        sl_agent *a = NULL;
        char err[256];
        uint8_t sha[32];
        int64_t round;
        const float *residual;
        double worst, scale;
        acked += ag_check_acks(&c, acks, n);
        if (ag_pending(states[k], &round, sha) &&
            ag_stored(&c, round, ag_device_id(states[k]), sha))
            in_flight++;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++)
                assert_true(acks[i].gen != acks[j].gen);
        /* the directory opens again, whatever instant the last kill hit,
         * and what a killed write left is cleaned up */
        sl_agent_options_default(&o);
        o.coordinator = c.url;
        o.task_id = task;
        o.state_dir = states[k];
        o.audit = 1;
        if (sl_agent_create(&o, &a, err, sizeof err) != SL_OK)
            fail_msg("agent %d's state does not open: %s", k, err);
        assert_false(has_tmp(states[k], ".") || has_tmp(states[k], "pending") ||
                     has_tmp(states[k], "audit"));
        residual = sl_agent_residual(a, &nres);
        if (residual == NULL) {
            assert_int_equal(n, 0); /* never held a model: never sent anything */
        } else {
            worst = mass_error(&c, task, states[k], acks, n, residual, nres, &scale);
            assert_true(scale > 0 || n == 0);
            assert_true(worst <= 1e-6 * scale + 1e-8);
        }
        sl_agent_free(a);
        free(acks);
    }
    ag_count_task(&c, task, &updates, &closed);
    fprintf(stderr,
            "%zu acknowledged updates, %zu stored and pending, %llu stored, %llu rounds closed, "
            "version %lld\n",
            acked, in_flight, (unsigned long long)updates, (unsigned long long)closed,
            (long long)ag_model_version(&c, task));
    assert_true(kills >= max_kills);
    /* the kills reached the instants that matter */
    assert_true(where[AT_DOWNLOAD] >= 3);
    assert_true(where[AT_UPLOAD] >= 3);
    assert_true(where[AT_WRITE] >= 3);
    /* every stored update is acknowledged, or pending in a stopped agent
     * (its next run gets the receipt): nothing stored is unaccounted for */
    assert_int_equal(updates, acked + in_flight);
    assert_true(acked >= 3);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_agents),
    };
    if (argc > 1)
        seconds = strtod(argv[1], NULL);
    if (argc > 2)
        max_kills = (int)strtol(argv[2], NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
