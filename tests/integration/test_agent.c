/*
 * The device agent against a real coordinator (store, engine and REST
 * server in this process, on a loopback port):
 *   - a fleet of 5 devices, until the model reaches version 4, with
 *     dropouts, stragglers, transfers cut at random bytes, and crashes
 *     around uploads: rounds close, the model advances, every line of every
 *     acks.log is an update the store holds exactly once, every stored
 *     update is acknowledged or pending in a stopped device, cut transfers
 *     resumed (HEAD of an upload, ranged GET);
 *   - fold and commit: the round of the first update is aborted before it
 *     is sent, so the agent folds (residual = residual + delta exactly);
 *     the second is accepted (residual + what the coordinator received ==
 *     what was accumulated; over both rounds, sent + residual == the sum
 *     of the trained deltas);
 *   - every transfer cut with one attempt per call: the agent itself
 *     resumes uploads (from the persisted offset) and downloads (the bytes
 *     kept in model.partial, with Range);
 *   - bandwidth-aware density: a device that measured a slow link sends a
 *     lower density than scheduled (not below the floor);
 *   - TLS and the starling-agent program: test_agent_prog.c.
 * `test_agent --slow` runs a longer fleet (lenet5, 10 devices, until
 * version 8, int8 values, DGC momentum correction).
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "../../device/agent/agent_int.h"
#include "../support/sl_split_test.h"
#include "../support/sl_test.h"
#include "agent_harness.h"
#include "starling/codec.h"
#include "starling/nn.h"

void ag_base_options(sl_agent_options *o, const ag_coord *c, int64_t task, const char *dir,
                     const sl_agent_data *data)
{
    sl_agent_options_default(o);
    o->coordinator = c->url;
    o->enrolment_token = AG_ENROL;
    o->task_id = task;
    o->state_dir = dir;
    o->data = data;
    o->chunk_bytes = 8 * 1024;
    o->download_chunk_bytes = 16 * 1024; /* several ranges: cuts fall between them */
    o->retry_base_ms = 20;
    o->max_wait_ms = 1000;
    o->request_timeout_ms = 10000;
    o->seed = 7;
}

/* ---- a fleet with faults ------------------------------------------------------------------- */

typedef struct watch {
    ag_coord *c;
    int64_t task, want;
    double limit_s;
    int reached;
    volatile sig_atomic_t stop;
} watch;

/* Stop the fleet once the model reached version @want (or the time is up):
 * devices stop at their next step, wherever they are. */
static void *watcher(void *arg)
{
    watch *w = arg;
    for (double t = 0; t < w->limit_s && !w->stop; t += 0.05) {
        struct timespec ts = {0, 50000000};
        if (ag_model_version(w->c, w->task) >= w->want) {
            w->reached = 1;
            break;
        }
        nanosleep(&ts, NULL);
    }
    w->stop = 1;
    return NULL;
}

typedef struct steps_seen {
    uint64_t updates;
    uint32_t min, max;
    uint32_t steps[64]; /* the round's, in device-id order */
    size_t n, k;
    uint64_t partial; /* updates of less than an epoch */
} steps_seen;

/* A run's bound on the steps an update reports (a task's time budget); 0: none. */
static uint32_t g_max_steps;
/* A heterogeneous fleet's bounds (sl_agent_options speed_max, link_*_bps); 0: none. */
static double g_speed_max, g_link_min, g_link_max;

static int check_steps(void *ctx, int64_t device_id, uint32_t local_steps)
{
    steps_seen *s = ctx;
    (void)device_id;
    s->updates++;
    if (s->n < sizeof s->steps / sizeof s->steps[0])
        s->steps[s->n++] = local_steps;
    if (local_steps < s->min)
        s->min = local_steps;
    if (local_steps > s->max)
        s->max = local_steps;
    return 0;
}

/* The samples an update says it used (batches of 32): its client's (@per_device); under a
 * time budget (g_budget) those it processed, each whole epoch of ceil(per_device / 32) steps
 * counting per_device and each step of a cut one 32. */
static size_t g_per_device;
static int g_budget;
static int check_samples(void *ctx, int64_t device_id, const void *frame, size_t len,
                         uint32_t num_samples, const uint8_t *sha256)
{
    steps_seen *s = ctx;
    uint64_t steps, per_epoch = (g_per_device + 31) / 32;
    (void)device_id, (void)frame, (void)len, (void)sha256;
    assert_true(s->k < s->n);
    steps = s->steps[s->k++];
    if (!g_budget) {
        assert_int_equal(num_samples, g_per_device);
        return 0;
    }
    assert_int_equal(num_samples, (steps / per_epoch) * g_per_device + (steps % per_epoch) * 32);
    s->partial += steps < per_epoch;
    return 0;
}

/* The stored frames' bytes, and how many are split (codecs/FORMAT.md: stored as sent). */
typedef struct stored_bytes {
    uint64_t bytes, split, n, retired;
} stored_bytes;

static int add_len(void *ctx, int64_t device_id, const void *frame, size_t len,
                   uint32_t num_samples, const uint8_t *sha256)
{
    stored_bytes *b = ctx;
    sl_frame_header h;
    (void)device_id, (void)num_samples, (void)sha256;
    b->n++;
    if (len == 0) { /* its bytes retired: its round is over (the task's retain_last) */
        b->retired++;
        return 0;
    }
    assert_int_equal(sl_frame_peek_header(frame, len, &h), SL_OK);
    b->bytes += len;
    b->split += (h.flags & SL_FRAME_FLAG_SPLIT) != 0;
    return 0;
}

/* Updates of @task stored split; every closed round's bytes_up is its stored frames' bytes
 * (what the devices sent, split or not), summed into *@sent; rounds whose updates retention
 * retired (all of a round's or none, and only in rounds over) are counted in *@retired. */
static uint64_t split_updates(ag_coord *c, int64_t task, uint64_t *sent, uint64_t *retired)
{
    uint64_t n = 0;
    *sent = *retired = 0;
    for (int64_t r = 1; r <= 64; r++) {
        sl_round_record rec;
        stored_bytes b = {0, 0, 0, 0};
        if (sl_store_get_round(c->store, r, &rec) != SL_OK || rec.task_id != task)
            continue;
        assert_int_equal(sl_store_foreach_update(c->store, r, add_len, &b), SL_OK);
        n += b.split;
        if (b.retired > 0) {
            assert_int_equal(b.retired, b.n);
            assert_true(rec.state >= SL_ROUND_CLOSED);
            (*retired)++;
            continue;
        }
        if (rec.bytes_up == 0) /* a round that never closed: its bytes were not written */
            continue;
        assert_int_equal((uint64_t)rec.bytes_up, b.bytes);
        *sent += b.bytes;
    }
    return n;
}

static unsigned g_want_split; /* run_fleet: split updates stored at least (reset by it) */
static int g_retention;       /* run_fleet: the task retires versions (reset by it) */

static void run_fleet(const char *name, const char *model, const char *config, unsigned devices,
                      int64_t versions, size_t per_device, double limit_s,
                      const sl_agent_faults *faults, unsigned max_attempts, double dgc_momentum)
{
    char dir[512], data_dir[600], state[600];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent_fleet_summary s;
    uint64_t updates, closed, acked = 0, in_flight = 0;
    pthread_t tid;
    watch w;
    char err[256];
    int retention = g_retention;

    g_retention = 0;
    sl_test_mkdtemp(dir, sizeof dir, name);
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(state, sizeof state, "%s/fleet", dir);
    ag_make_data(data_dir, devices * per_device, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    memset(&w, 0, sizeof w);
    w.c = &c;
    w.task = ag_create_task(&c, model, config);
    w.want = versions;
    w.limit_s = limit_s * sl_test_time_scale();
    if (sl_agent_data_load(data_dir, "iid", devices, 0, devices, 3, &data, err, sizeof err) !=
        SL_OK)
        fail_msg("data: %s", err);
    ag_base_options(&o, &c, w.task, state, data);
    if (strcmp(model, "lenet5") == 0) /* its updates (~3 kB) span chunks: a cut between resumes */
        o.chunk_bytes = 1024;
    o.stop = &w.stop;
    o.faults = *faults;
    o.max_attempts = max_attempts;
    o.dgc_momentum = dgc_momentum;
    if (g_speed_max > 1)
        o.speed_max = g_speed_max;
    o.link_min_bps = g_link_min;
    o.link_max_bps = g_link_max;
    assert_int_equal(pthread_create(&tid, NULL, watcher, &w), 0);
    assert_int_equal(sl_agent_fleet_run(&o, devices, &s), SL_OK);
    pthread_join(tid, NULL);
    fprintf(stderr,
            "%s: accepted %llu (dup %llu), folded %llu, dropped %llu, crashes %llu, cuts %llu, "
            "resumes %llu, %llu bytes up, %llu down, model version %lld\n",
            name, (unsigned long long)s.accepted, (unsigned long long)s.duplicates,
            (unsigned long long)s.folded, (unsigned long long)s.dropped,
            (unsigned long long)s.crashes, (unsigned long long)s.cuts,
            (unsigned long long)s.resumes, (unsigned long long)s.bytes_up,
            (unsigned long long)s.bytes_down, (long long)ag_model_version(&c, w.task));
    assert_true(w.reached);
    assert_int_equal(s.failed, 0);
    assert_true(s.accepted >= devices);
    assert_true(s.cuts > 0);
    assert_true(s.resumes > 0);
    if (retention) {
        /* devices asked for deltas from versions retention had retired (404), took the full
         * models and went on; the retired versions' records stay */
        sl_client_response r;
        const char *at;
        long missing = 0;
        sl_model_record m;
        ag_admin(&c, "GET", "/metrics", NULL, &r);
        assert_int_equal(r.status, 200);
        static const char line[] =
            "starling_http_requests_total{route=\"/v1/models/{version}\",status=\"404\"} ";
        at = strstr((const char *)r.body, line);
        if (at != NULL)
            missing = strtol(at + strlen(line), NULL, 10);
        sl_client_response_free(&r);
        fprintf(stderr, "%s: %ld model downloads refused (a retired version)\n", name, missing);
        assert_true(missing >= 1);
        assert_int_equal(sl_store_get_model_info(c.store, w.task, 2, &m), SL_OK);
        assert_true(m.retired);
        sl_store_model_free(&m);
        assert_int_equal(sl_store_get_model(c.store, w.task, 2, &m), SL_ENOENT);
    }
    ag_coord_stop_server(&c);
    for (unsigned k = 0; k < devices; k++) {
        char dev[700];
        ag_ack *acks;
        uint8_t sha[32];
        int64_t round;
        size_t n;
        snprintf(dev, sizeof dev, "%s/dev-%u", state, k);
        n = ag_read_acks(dev, &acks);
        acked += ag_check_acks(&c, acks, n);
        free(acks);
        /* stopped with an upload the coordinator has but the agent has not
         * heard of yet: its next run gets the receipt (duplicate) */
        if (ag_pending(dev, &round, sha) && ag_stored(&c, round, ag_device_id(dev), sha))
            in_flight++;
    }
    assert_int_equal(acked, s.accepted);
    for (unsigned k = 0, prev = 0; k < devices; k++) { /* enrolled in their places' order */
        char dev[700];
        int64_t id;
        snprintf(dev, sizeof dev, "%s/dev-%u", state, k);
        id = ag_device_id(dev);
        assert_true(id > (int64_t)prev);
        prev = (unsigned)id;
    }
    if (g_link_max > 0) { /* the paces the devices told: step time and download speed */
        unsigned measured = 0;
        for (unsigned k = 0; k < devices; k++) {
            char dev[700];
            sl_store_pace p;
            snprintf(dev, sizeof dev, "%s/dev-%u", state, k);
            if (sl_store_get_pace(c.store, w.task, ag_device_id(dev), &p) != SL_OK)
                continue;
            assert_true(p.step_ms > 0);
            if (p.down_bps > 0) {
                /* at most the link's rate (a burst of its bucket aside) */
                assert_true(p.down_bps < 2 * g_link_max);
                measured++;
            }
        }
        fprintf(stderr, "%s: %u of %u devices told their download speed\n", name, measured,
                devices);
        assert_true(measured >= devices / 2);
    }
    ag_count_task(&c, w.task, &updates, &closed);
    {
        uint64_t sent, gone, split = split_updates(&c, w.task, &sent, &gone), want = g_want_split;
        g_want_split = 0;
        fprintf(stderr,
                "%s: %llu updates split of %llu stored; %llu bytes sent; %llu rounds' "
                "updates retired\n",
                name, (unsigned long long)split, (unsigned long long)updates,
                (unsigned long long)sent, (unsigned long long)gone);
        assert_true(split >= want);
        if (retention)
            assert_true(gone > 0);
        else
            assert_int_equal(gone, 0);
    }
    /* nothing stored is unaccounted for: acknowledged, or pending in a
     * stopped agent whose next run gets the receipt (a lost answer gets its
     * receipt even after the round closed) */
    assert_int_equal(updates, acked + in_flight);
    assert_true(closed >= 2);
    { /* every stored update says how many steps trained it: one epoch of its samples */
        steps_seen seen = {0, UINT32_MAX, 0, {0}, 0, 0, 0};
        g_per_device = per_device;
        g_budget = strstr(config, "\"time_budget\":true") != NULL;
        for (int64_t r = 1; r <= 64; r++) {
            seen.n = seen.k = 0;
            assert_int_equal(sl_store_list_steps(c.store, r, check_steps, &seen), SL_OK);
            if (strstr(config, "\"batch\":32") != NULL) /* the samples each update used */
                assert_int_equal(sl_store_foreach_update(c.store, r, check_samples, &seen), SL_OK);
        }
        if (g_max_steps > 0 && g_max_steps * 32 < per_device) /* budgets within an epoch */
            assert_int_equal(seen.partial, seen.updates);
        assert_int_equal(seen.updates, updates);
        assert_true(seen.min >= 1 && seen.min != UINT32_MAX);
        if (g_max_steps > 0) /* a time budget: never more steps than it gave */
            assert_int_equal(seen.max, g_max_steps);
    }
    ag_coord_close(&c);
    sl_agent_data_free(data);
    sl_test_rmtree(dir);
}

static const sl_agent_faults fleet_faults = {.dropout = 0.1,
                                             .cut = 0.5,
                                             .cut_span = 48 * 1024,
                                             .straggle = 0.2,
                                             .straggle_factor = 3,
                                             .crash = 0.2};

static void test_fleet(void **state)
{
    (void)state;
    g_want_split = 1; /* devices that downloaded deltas sent split updates, through crashes */
    run_fleet("agent_fleet", "mlp", AG_MLP_TASK("fleet", 4, 2), 5, 4, 200, 60, &fleet_faults, 5, 0);
}

/* The fleet of test_fleet on a task that keeps only its latest model version
 * ("retain_last": 1): from round 3 on every device's delta request names a retired version
 * (404) and it takes the full model instead; through the same drop-outs, crashes and cut
 * transfers, every acknowledged update is stored once and the task reaches its versions. */
static void test_fleet_retention(void **state)
{
    (void)state;
    g_retention = 1;
    run_fleet("agent_retain", "mlp",
              "{\"name\":\"retain\",\"target\":4,\"quorum\":2,\"over_selection\":1.25,"
              "\"selection_window_ms\":400,\"report_deadline_ms\":4000,\"values\":\"fp16\","
              "\"density\":0.05,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05,"
              "\"local_momentum\":0.9,\"retain_last\":1}",
              5, 5, 200, 60, &fleet_faults, 5, 0);
}

/* A task with time budgets: 3 local epochs would be 21 steps of 200 samples in batches of
 * 32; the budget (at most 5 steps, less than an epoch of 7) cuts them, and every update says
 * it ran 5 or fewer and used 32 samples a step (FedAvg weighs it by them), the devices' pace
 * reaching the coordinator from their second check-in on. (The heterogeneous fleet below
 * checks budgets of whole epochs and more: 200 samples an epoch.) */
static void test_time_budget(void **state)
{
    (void)state;
    g_max_steps = 5;
    run_fleet("agent_budget", "mlp",
              "{\"name\":\"budget\",\"target\":4,\"quorum\":2,\"over_selection\":1.25,"
              "\"selection_window_ms\":400,\"report_deadline_ms\":4000,\"values\":\"fp16\","
              "\"density\":0.05,\"local_epochs\":3,\"batch\":32,\"local_lr\":0.05,"
              "\"local_momentum\":0.9,\"time_budget\":true,\"max_local_steps\":5,"
              "\"fednova\":true,\"error_feedback\":\"residual\"}",
              5, 4, 200, 60, &fleet_faults, 5, 0);
    g_max_steps = 0;
}

/* A heterogeneous fleet: devices up to 6x slower, links of 0.4 to 4 Mbit/s, a time-budgeted
 * FedNova task with an adaptive deadline, paced and fair selection; the run completes with
 * every acknowledged update stored once (run_fleet's checks), and the devices' paces in the
 * store hold their step time and the download speed they measured, within their link's. */
static void test_heterogeneous_fleet(void **state)
{
    (void)state;
    g_speed_max = 6;
    g_link_min = 400e3 / 8;
    g_link_max = 4e6 / 8;
    run_fleet("agent_hetero", "mlp",
              "{\"name\":\"hetero\",\"target\":4,\"quorum\":2,\"over_selection\":1.25,"
              "\"selection_window_ms\":400,\"report_deadline_ms\":6000,\"values\":\"fp16\","
              "\"density\":0.05,\"local_epochs\":2,\"batch\":32,\"local_lr\":0.05,"
              "\"local_momentum\":0.9,\"time_budget\":true,\"max_local_steps\":14,"
              "\"fednova\":true,\"error_feedback\":\"residual\",\"paced_selection\":true,"
              "\"fairness_rounds\":3,\"deadline_percentile\":90}",
              5, 4, 200, 90, &fleet_faults, 5, 0);
    g_speed_max = g_link_min = g_link_max = 0;
}

/* Every transfer cut, and the client allowed a single attempt: each cut
 * ends the call, so what resumes is the agent: uploads from the offset it
 * persisted (a 409 corrects it), downloads from the bytes kept in
 * model.partial (Range) -- across attempts, as across restarts. */
static void test_cut_every_transfer(void **state)
{
    const sl_agent_faults cut_all = {.cut = 1.0, .cut_span = 64 * 1024, .straggle_factor = 1};
    (void)state;
    run_fleet("agent_cut", "mlp", AG_MLP_TASK("cut", 2, 2), 2, 3, 200, 60, &cut_all, 1, 0);
}

static void test_fleet_slow(void **state)
{
    (void)state;
    run_fleet("agent_fleet_slow", "lenet5",
              "{\"name\":\"slow\",\"target\":8,\"quorum\":4,\"over_selection\":1.25,"
              "\"selection_window_ms\":600,\"report_deadline_ms\":15000,\"values\":\"int8\","
              "\"density\":0.05,\"local_epochs\":2,\"batch\":32,\"local_lr\":0.05}",
              10, 8, 300, 600, &fleet_faults, 5, 0.5);
}

/* ---- fold, then commit ------------------------------------------------------------------- */

typedef struct fold_ctx {
    ag_coord *c;
    sl_agent *agent;
    size_t n;
    int prepared, folded, accepted;
    int64_t round[2];
    float *delta[2], *before[2], *acc[2], *after[2];
} fold_ctx;

static float *copy(const float *v, size_t n)
{
    float *out = malloc(n * sizeof *out);
    assert_non_null(out);
    memcpy(out, v, n * sizeof *out);
    return out;
}

static void fold_event(void *ctx, const sl_agent_event *ev)
{
    fold_ctx *f = ctx;
    size_t n = 0;
    const float *res;
    if (ev->kind == SL_AGENT_EV_PREPARED) {
        int i = f->prepared++;
        assert_true(i < 2);
        f->round[i] = ev->round_id;
        f->delta[i] = copy(ev->delta, f->n);
        f->before[i] = copy(ev->residual, f->n);
        f->acc[i] = copy(ev->accumulated, f->n);
        if (i == 0) {
            /* the round ends before a byte of the update is sent */
            char path[96];
            sl_client_response r;
            snprintf(path, sizeof path, "/v1/rounds/%lld/abort", (long long)ev->round_id);
            ag_admin(f->c, "POST", path, NULL, &r);
            assert_int_equal(r.status, 200);
            sl_client_response_free(&r);
        }
    } else if (ev->kind == SL_AGENT_EV_FOLDED || ev->kind == SL_AGENT_EV_ACCEPTED) {
        res = sl_agent_residual(f->agent, &n);
        assert_int_equal(n, f->n);
        f->after[f->prepared - 1] = copy(res, n);
        if (ev->kind == SL_AGENT_EV_FOLDED)
            f->folded++;
        else
            f->accepted++;
    }
}

typedef struct sent_ctx {
    const sl_layout *layout;
    int64_t device;
    float *dense;
    int found;
    sl_store *store; /* a split update is read against the versions it names */
    int64_t task;
} sent_ctx;

static int add_sent(void *ctx, int64_t device_id, const void *frame, size_t len,
                    uint32_t num_samples, const uint8_t *sha256)
{
    sent_ctx *s = ctx;
    void *plain;
    size_t plain_len;
    (void)num_samples, (void)sha256;
    if (device_id != s->device)
        return 0;
    assert_int_equal(
        sl_test_plain_frame(s->store, s->task, s->layout, frame, len, &plain, &plain_len), SL_OK);
    assert_int_equal(sl_frame_accumulate_update(s->layout, plain, plain_len, NULL, 1.0f, s->dense),
                     SL_OK);
    free(plain);
    s->found++;
    return 0;
}

/* @decay: the task's residual_decay (the check-in carries it to the compressor) */
static void check_fold_and_commit(double decay)
{
    char dir[512], data_dir[600], err[256], agent_dir[600], cfg[600];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent_stats st;
    sl_model *m = NULL;
    fold_ctx f;
    sent_ctx sent;
    int64_t task;
    double worst = 0, scale = 0;
    const float g = (float)decay;
    sl_test_mkdtemp(dir, sizeof dir, "agent_fold");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    ag_make_data(data_dir, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    snprintf(cfg, sizeof cfg,
             "{\"name\":\"fold\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
             "\"error_feedback\":\"residual\",\"residual_decay\":%.17g,"
             "\"selection_window_ms\":200,\"report_deadline_ms\":10000,"
             "\"values\":\"fp16\",\"density\":0.1,\"local_epochs\":1,"
             "\"batch\":32,\"local_lr\":0.05}",
             decay);
    task = ag_create_task(&c, "mlp", cfg);
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    memset(&f, 0, sizeof f);
    f.c = &c;
    f.n = sl_model_params(m);
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 2;
    o.on_event = fold_event;
    o.event_ctx = &f;
    assert_int_equal(sl_agent_create(&o, &f.agent, err, sizeof err), SL_OK);
    assert_int_equal(sl_agent_run(f.agent), SL_OK);
    assert_int_equal(sl_agent_get_stats(f.agent, &st), SL_OK);
    assert_int_equal(f.prepared, 2);
    assert_int_equal(f.folded, 1);
    assert_int_equal(f.accepted, 1);
    assert_int_equal(st.folded, 1);
    assert_int_equal(st.accepted, 1);
    assert_true(f.round[1] > f.round[0]);
    for (size_t i = 0; i < f.n; i++) {
        /* a fold keeps everything: residual = residual + delta, bit for bit */
        assert_true(f.before[0][i] == 0.0f);
        assert_true(f.acc[0][i] == f.before[0][i] + f.delta[0][i]);
        assert_true(f.after[0][i] == f.acc[0][i]);
        assert_true(f.before[1][i] == f.after[0][i]);
        assert_true(f.acc[1][i] == g * f.before[1][i] + f.delta[1][i]);
    }
    /* a commit keeps what was not received: residual + received == accumulated */
    sent.layout = sl_model_layout(m);
    sent.store = c.store;
    sent.task = task;
    sent.device = st.device_id;
    sent.dense = calloc(f.n, sizeof(float));
    sent.found = 0;
    assert_non_null(sent.dense);
    assert_int_equal(sl_store_foreach_update(c.store, f.round[1], add_sent, &sent), 0);
    assert_int_equal(sent.found, 1);
    for (size_t i = 0; i < f.n; i++) {
        double total = (double)f.delta[0][i] + (double)f.delta[1][i];
        double got = (double)sent.dense[i] + (double)f.after[1][i];
        assert_true(fabs((double)f.after[1][i] + sent.dense[i] - f.acc[1][i]) <=
                    1e-6 * fabs(f.acc[1][i]) + 1e-9);
        if (fabs(got - total) > worst)
            worst = fabs(got - total);
        if (fabs(total) > scale)
            scale = fabs(total);
    }
    fprintf(stderr,
            "fold/commit (decay %g): sent + residual vs sum of deltas: max error %.3g (scale "
            "%.3g)\n",
            decay, worst, scale);
    if (decay == 1.0) /* nothing is lost without a decay */
        assert_true(worst <= 1e-6 * scale + 1e-8);
    else /* the decay removed mass */
        assert_true(worst > 1e-3 * scale);
    for (int i = 0; i < 2; i++) {
        free(f.delta[i]);
        free(f.before[i]);
        free(f.acc[i]);
        free(f.after[i]);
    }
    free(sent.dense);
    sl_agent_free(f.agent);
    sl_model_free(m);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

static void test_fold_and_commit(void **state)
{
    (void)state;
    check_fold_and_commit(1.0);
    check_fold_and_commit(0.5);
}

/* ---- tracking error feedback ----------------------------------------------------------------- */

typedef struct track_ctx {
    fold_ctx f;
    int64_t version[3];
    float *before2;
} track_ctx;

static void track_event(void *ctx, const sl_agent_event *ev)
{
    track_ctx *t = ctx;
    if (ev->kind == SL_AGENT_EV_PREPARED) {
        int i = t->f.prepared;
        assert_true(i < 3);
        t->version[i] = ev->model_version;
        if (i == 2) { /* the third round: only what the residual became */
            t->before2 = copy(ev->residual, t->f.n);
            t->f.prepared++;
            return;
        }
    }
    if (t->f.prepared == 3) /* the third round's outcome is not checked */
        return;
    fold_event(&t->f, ev);
}

static float *stored_model(ag_coord *c, int64_t task, int64_t version, const sl_layout *l)
{
    sl_model_record mr;
    float *w = malloc((size_t)sl_layout_params(l) * sizeof *w);
    assert_non_null(w);
    assert_int_equal(sl_store_get_model(c->store, task, version, &mr), SL_OK);
    assert_int_equal(sl_frame_decode_model(l, mr.frame, mr.frame_len, NULL, 0, w), SL_OK);
    sl_store_model_free(&mr);
    return w;
}

/* The default error feedback tracks the model the coordinator holds for the
 * device: a fold leaves the residual as it was (the delta is learnt again);
 * an acknowledged update subtracts exactly what the coordinator decodes; the
 * next model brings its round's move into the residual before training.
 * @mode KILL_MID_ABSORB: a process absorbs the next model's move, saves the
 * residual and dies before it replaces its model: the move is then in the
 * residual once, not absorbed again by the next process's download.
 * @mode MISSED: another device takes part in two rounds while this one is
 * away; the residual still takes the exact move of the version its update
 * went into (the agent fetches that version first), not the average move
 * over the three versions it missed. */
enum { TRACK_PLAIN, TRACK_KILL_MID_ABSORB, TRACK_MISSED };

static void check_tracking(int mode)
{
    char dir[512], data_dir[600], err[256], agent_dir[600];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent_stats st;
    sl_model *m = NULL;
    track_ctx t;
    sent_ctx sent;
    int64_t task;
    float *w1, *w2;
    size_t moved = 0, sent_n = 0;
    sl_test_mkdtemp(dir, sizeof dir, "agent_track");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    ag_make_data(data_dir, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          "{\"name\":\"track\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
                          "\"error_feedback\":\"tracking\","
                          "\"selection_window_ms\":200,\"report_deadline_ms\":10000,"
                          "\"values\":\"ternary\",\"density\":0.05,\"local_epochs\":1,"
                          "\"batch\":32,\"local_lr\":0.05}");
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    memset(&t, 0, sizeof t);
    t.f.c = &c;
    t.f.n = sl_model_params(m);
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 2;
    o.on_event = track_event;
    o.event_ctx = &t;
    assert_int_equal(sl_agent_create(&o, &t.f.agent, err, sizeof err), SL_OK);
    assert_int_equal(sl_agent_run(t.f.agent), SL_OK);
    assert_int_equal(sl_agent_get_stats(t.f.agent, &st), SL_OK);
    sl_agent_free(t.f.agent);
    assert_int_equal(t.f.folded, 1);
    assert_int_equal(t.f.accepted, 1);
    if (mode == TRACK_MISSED) {
        sl_agent *other = NULL;
        char other_dir[640];
        snprintf(other_dir, sizeof other_dir, "%s/other", dir);
        ag_base_options(&o, &c, task, other_dir, data);
        o.rounds = 2;
        assert_int_equal(sl_agent_create(&o, &other, err, sizeof err), SL_OK);
        assert_int_equal(sl_agent_run(other), SL_OK);
        sl_agent_free(other);
    }
    if (mode == TRACK_KILL_MID_ABSORB) {
        sl_agent *k = NULL;
        int64_t next = t.version[1] + 1;
        float *w;
        sl_model_record mr;
        for (int i = 0; i < 500 && sl_store_get_model(c.store, task, next, &mr) != SL_OK; i++)
            usleep(10000); /* round 2 closes right after its one report */
        sl_store_model_free(&mr);
        w = stored_model(&c, task, next, sl_model_layout(m));
        ag_base_options(&o, &c, task, agent_dir, data);
        assert_int_equal(sl_agent_create(&o, &k, err, sizeof err), SL_OK);
        assert_int_equal(k->version, t.version[1]); /* the cache vouches for round 2's model */
        assert_int_equal(k->absorb, 1);
        assert_int_equal(sl__agent_absorb(k, w, next), SL_OK);
        assert_int_equal(k->absorb, 0);
        assert_int_equal(k->version, t.version[1]); /* killed before the model is replaced */
        sl_agent_free(k);
        free(w);
    }
    /* a third round in a new process: the absorb flag was saved with the residual */
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 1;
    o.on_event = track_event;
    o.event_ctx = &t;
    assert_int_equal(sl_agent_create(&o, &t.f.agent, err, sizeof err), SL_OK);
    assert_int_equal(sl_agent_run(t.f.agent), SL_OK);
    assert_int_equal(t.f.prepared, 3);
    assert_non_null(t.before2);
    /* the aborted round made no model: the first two trained from one version */
    assert_int_equal(t.version[0], t.version[1]);
    assert_true(t.version[2] > t.version[1]);
    /* with the other device's two rounds, three versions on */
    assert_int_equal(t.version[2], t.version[1] + (mode == TRACK_MISSED ? 3 : 1));
    sent.layout = sl_model_layout(m);
    sent.store = c.store;
    sent.task = task;
    sent.device = st.device_id;
    sent.dense = calloc(t.f.n, sizeof(float));
    sent.found = 0;
    assert_non_null(sent.dense);
    assert_int_equal(sl_store_foreach_update(c.store, t.f.round[1], add_sent, &sent), 0);
    assert_int_equal(sent.found, 1);
    w1 = stored_model(&c, task, t.version[1], sent.layout);
    /* the version the acknowledged update went into: the next one */
    w2 = stored_model(&c, task, t.version[1] + 1, sent.layout);
    for (size_t i = 0; i < t.f.n; i++) {
        float want;
        /* fold: nothing kept */
        assert_true(t.f.before[0][i] == 0.0f);
        assert_true(t.f.acc[0][i] == t.f.delta[0][i]);
        assert_true(t.f.after[0][i] == 0.0f);
        assert_true(t.f.before[1][i] == 0.0f);
        /* commit: the residual minus what the coordinator decodes */
        assert_true(t.f.after[1][i] == t.f.before[1][i] - sent.dense[i]);
        sent_n += sent.dense[i] != 0.0f;
        /* absorb: plus the move of the round the update went into, exactly */
        want = t.f.after[1][i] + (float)(((double)w2[i] - (double)w1[i]) / 1.0);
        assert_true(t.before2[i] == want);
        moved += w2[i] != w1[i];
    }
    fprintf(stderr, "tracking%s: %zu values sent, %zu parameters moved, versions %lld -> %lld\n",
            mode == TRACK_KILL_MID_ABSORB ? " (killed mid-absorb)"
            : mode == TRACK_MISSED        ? " (versions missed)"
                                          : "",
            sent_n, moved, (long long)t.version[1], (long long)t.version[2]);
    assert_true(sent_n > 0 && moved > 0);
    free(w1);
    free(w2);
    for (int i = 0; i < 2; i++) {
        free(t.f.delta[i]);
        free(t.f.before[i]);
        free(t.f.acc[i]);
        free(t.f.after[i]);
    }
    free(t.before2);
    free(sent.dense);
    sl_agent_free(t.f.agent);
    sl_model_free(m);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

static void test_tracking_feedback(void **state)
{
    (void)state;
    check_tracking(TRACK_PLAIN);
    check_tracking(TRACK_KILL_MID_ABSORB);
    check_tracking(TRACK_MISSED);
}

/* ---- the check-in answer ------------------------------------------------------------------- */

/* A check-in answer with @comp as the "compression" object's extra keys. */
static int parse_answer(const char *comp, sl__agent_assignment *out)
{
    char json[1024];
    int n = snprintf(json, sizeof json,
                     "{\"selected\":true,\"task_id\":1,\"round_id\":7,\"round_no\":3,"
                     "\"model_version\":4,\"report_deadline_ms\":1000,\"retry_after_ms\":0,"
                     "\"participation\":2,\"compression\":{\"values\":\"ternary\","
                     "\"density\":0.01,\"warmup_rounds\":0,\"warmup_density\":0.25%s},"
                     "\"training\":{\"epochs\":1,\"batch\":32,\"lr\":0.01,\"momentum\":0.9,"
                     "\"prox_mu\":0}}",
                     comp);
    assert_true(n > 0 && (size_t)n < sizeof json);
    return sl__agent_parse_assignment(json, (size_t)n, out);
}

/* What the agent takes from a check-in answer: the compression keys the
 * coordinator sends, their meaning when an older coordinator leaves them
 * out, and a refusal (nothing changed) for every bad value. */
static void test_checkin_answer(void **state)
{
    sl__agent_assignment a, keep;
    static const char *const bad[] = {
        ",\"topk_scope\":\"global\"",
        ",\"topk_scope\":1",
        ",\"error_feedback\":\"none\"",
        ",\"error_feedback\":null",
        ",\"error_feedback\":\"residual\",\"residual_decay\":0",
        ",\"error_feedback\":\"residual\",\"residual_decay\":1.5",
        ",\"error_feedback\":\"residual\",\"residual_decay\":\"0.9\"",
        ",\"error_feedback\":\"tracking\",\"residual_decay\":0.9",
    };
    (void)state;
    /* everything said */
    assert_int_equal(parse_answer(",\"topk_scope\":\"model\",\"error_feedback\":\"tracking\","
                                  "\"residual_decay\":1",
                                  &a),
                     SL_OK);
    assert_true(a.selected);
    assert_int_equal(a.round_id, 7);
    assert_int_equal(a.values, SL_VALUE_TERNARY);
    assert_int_equal(a.topk_scope, SL_TOPK_MODEL);
    assert_int_equal(a.feedback, SL_EF_TRACKING);
    assert_true(a.residual_decay == 1.0);
    /* an older coordinator: per tensor, the classic residual, no decay */
    assert_int_equal(parse_answer("", &a), SL_OK);
    assert_int_equal(a.topk_scope, SL_TOPK_TENSOR);
    assert_int_equal(a.feedback, SL_EF_RESIDUAL);
    assert_true(a.residual_decay == 1.0);
    /* a decay with the classic residual, said or meant by the missing key */
    assert_int_equal(parse_answer(",\"residual_decay\":0.5", &a), SL_OK);
    assert_true(a.residual_decay == 0.5);
    assert_int_equal(parse_answer(",\"error_feedback\":\"residual\",\"residual_decay\":0.9", &a),
                     SL_OK);
    assert_true(a.residual_decay == 0.9);
    /* refusals change nothing */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        memcpy(&keep, &a, sizeof a);
        rc = parse_answer(bad[i], &a);
        if (rc != SL_ESYNTAX)
            fail_msg("check-in answer with %s: %d, expected SL_ESYNTAX", bad[i], rc);
        assert_memory_equal(&keep, &a, sizeof a);
    }
    assert_int_equal(sl__agent_parse_assignment("not json", 8, &a), SL_ESYNTAX);
}

/* ---- top-k scope -------------------------------------------------------------------------- */

typedef struct scope_ctx {
    const sl_layout *layout;
    sl_store *store; /* a split update is read against the versions it names */
    int64_t task;
    size_t n[64], tensors;
    int found;
    int64_t round;
} scope_ctx;

static void scope_event(void *ctx, const sl_agent_event *ev)
{
    if (ev->kind == SL_AGENT_EV_ACCEPTED)
        ((scope_ctx *)ctx)->round = ev->round_id;
}

static int count_sent(void *ctx, int64_t device_id, const void *frame, size_t len,
                      uint32_t num_samples, const uint8_t *sha256)
{
    scope_ctx *s = ctx;
    sl_update *u = NULL;
    void *plain;
    size_t plain_len;
    (void)device_id, (void)num_samples, (void)sha256;
    assert_int_equal(
        sl_test_plain_frame(s->store, s->task, s->layout, frame, len, &plain, &plain_len), SL_OK);
    assert_int_equal(sl_frame_decode_update(s->layout, plain, plain_len, NULL, &u), SL_OK);
    free(plain);
    assert_true(u->tensors <= 64);
    s->tensors = u->tensors;
    for (size_t t = 0; t < u->tensors; t++)
        s->n[t] = u->n[t];
    sl_update_free(u);
    s->found++;
    return 0;
}

/* The task's topk_scope reaches the agent through the check-in: "tensor"
 * sends the density in every tensor, the default ("model") one top-k over
 * the whole vector. The pending upload records the scope it was made with. */
static void check_scope(const char *scope_json, sl_topk_scope want)
{
    char dir[512], data_dir[600], err[256], agent_dir[600], cfg[512];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent *a = NULL;
    sl_model *m = NULL;
    scope_ctx sc;
    int64_t task;
    size_t total = 0, d, as_tensor = 0;
    const double density = 0.1;
    sl_test_mkdtemp(dir, sizeof dir, "agent_scope");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    ag_make_data(data_dir, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    snprintf(cfg, sizeof cfg,
             "{\"name\":\"scope\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
             "\"selection_window_ms\":200,\"report_deadline_ms\":10000,\"values\":\"fp32\","
             "\"density\":%g%s,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05}",
             density, scope_json);
    task = ag_create_task(&c, "mlp", cfg);
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    memset(&sc, 0, sizeof sc);
    sc.layout = sl_model_layout(m);
    sc.store = c.store;
    sc.task = task;
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 1;
    o.on_event = scope_event;
    o.event_ctx = &sc;
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_agent_run(a), SL_OK);
    assert_true(sc.round > 0);
    assert_int_equal(sl_store_foreach_update(c.store, sc.round, count_sent, &sc), 0);
    assert_int_equal(sc.found, 1);
    d = (size_t)sl_layout_params(sc.layout);
    for (size_t t = 0; t < sc.tensors; t++) {
        size_t count = (size_t)sl_layout_tensor(sc.layout, t)->count;
        size_t k = (size_t)ceil(density * (double)count);
        total += sc.n[t];
        as_tensor += sc.n[t] == (k ? k : 1);
        if (want == SL_TOPK_TENSOR) /* trained float deltas: no exact zeros */
            assert_int_equal(sc.n[t], k ? k : 1);
    }
    if (want == SL_TOPK_MODEL) { /* the same total, not spread as per tensor */
        assert_int_equal(total, (size_t)ceil(density * (double)d));
        assert_true(as_tensor < sc.tensors);
    }
    fprintf(stderr, "topk_scope %s: %zu of %zu parameters sent over %zu tensors\n",
            sl_topk_scope_name(want), total, d, sc.tensors);
    sl_agent_free(a);
    sl_model_free(m);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

/* A pending upload records its scope and error feedback; pending/meta
 * written before they existed (no topk_scope / error_feedback line) still
 * resumes, and an unknown value is damage: the pending upload is dropped,
 * not guessed at. */
static volatile sig_atomic_t stop_prepared;

static void stop_at_prepared(void *ctx, const sl_agent_event *ev)
{
    (void)ctx;
    if (ev->kind == SL_AGENT_EV_PREPARED)
        stop_prepared = 1;
}

/* Replace pending/meta's "<key>=" line with @line ("" removes it). */
static void rewrite_meta(const char *agent_dir, const char *key, const char *line)
{
    char path[700], *text, *p, *eol, needle[64];
    void *raw = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/pending/meta", agent_dir);
    snprintf(needle, sizeof needle, "\n%s=", key);
    assert_int_equal(sl_fs_read_file(path, 1 << 16, &raw, &len), SL_OK);
    text = raw;
    p = strstr(text, needle);
    assert_non_null(p); /* written by this build */
    eol = strchr(p + 1, '\n');
    assert_non_null(eol);
    {
        char out[1 << 12];
        int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(p - text + 1), text, line, eol + 1);
        assert_true(n > 0 && (size_t)n < sizeof out);
        assert_int_equal(sl_fs_write_atomic(path, out, (size_t)n, 0600), SL_OK);
    }
    free(raw);
}

static void check_pending_scope(const char *key, const char *line, int resumes)
{
    char dir[512], data_dir[600], err[256], agent_dir[600], meta[700];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent *a = NULL;
    sl_agent_stats st;
    struct stat sb;
    int64_t task;
    sl_test_mkdtemp(dir, sizeof dir, "agent_pending_scope");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    snprintf(meta, sizeof meta, "%s/pending/meta", agent_dir);
    ag_make_data(data_dir, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp", AG_MLP_TASK("pscope", 1, 1));
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    /* train, persist the pending upload, stop before sending it */
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 1;
    stop_prepared = 0;
    o.stop = &stop_prepared;
    o.on_event = stop_at_prepared;
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    sl_agent_run(a);
    sl_agent_free(a);
    assert_int_equal(stat(meta, &sb), 0);
    rewrite_meta(agent_dir, key, line);
    /* a new process over that state */
    ag_base_options(&o, &c, task, agent_dir, data);
    o.rounds = 1;
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    assert_int_equal(stat(meta, &sb) == 0, resumes); /* dropped at load when damaged */
    if (resumes) { /* the kept upload goes out and is acknowledged */
        assert_int_equal(sl_agent_run(a), SL_OK);
        assert_int_equal(sl_agent_get_stats(a, &st), SL_OK);
        assert_true(st.accepted >= 1);
    }
    sl_agent_free(a);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

static void test_pending_scope(void **state)
{
    (void)state;
    check_pending_scope("topk_scope", "", 1);                    /* older: no line, per tensor */
    check_pending_scope("topk_scope", "topk_scope=tensor\n", 1); /* either commits the same way */
    check_pending_scope("topk_scope", "topk_scope=global\n", 0); /* not a scope: damage */
    /* the same for the error feedback the upload was made with */
    check_pending_scope("error_feedback", "", 1); /* older state: no line, the classic residual */
    check_pending_scope("error_feedback", "error_feedback=residual\n", 1);
    check_pending_scope("error_feedback", "error_feedback=none\n", 0);
}

static void test_topk_scope(void **state)
{
    (void)state;
    check_scope("", SL_TOPK_MODEL);
    check_scope(",\"topk_scope\":\"model\"", SL_TOPK_MODEL);
    check_scope(",\"topk_scope\":\"tensor\"", SL_TOPK_TENSOR);
}

/* ---- split frames: the supports the agent keeps ---------------------------------------------- */

/* model.support is kept beside the model it belongs to and pending/support beside a split
 * pending frame: a new process finds both; a support that is not the held version's is not
 * used; a pending support that does not match its frame (or its digest) drops the pending
 * upload, as any damage. */
static void test_split_state(void **state)
{
    char dir[512], data_dir[600], err[256], agent_dir[600], path[700];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent *a = NULL;
    sl_model *m = NULL;
    sl_support *sup = NULL;
    const sl_layout *l;
    float *w0, *w1;
    void *model, *frame;
    size_t n, model_len, frame_len, k = 0;
    uint32_t *idx;
    float *val;
    uint64_t hash;
    int64_t task;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_split_state");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    ag_make_data(data_dir, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp", AG_MLP_TASK("split", 1, 1));
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    l = sl_model_layout(m);
    hash = sl_layout_hash(l);
    n = sl_model_params(m);
    /* versions 3 and 5 of a model: the second moves one coordinate in ten */
    w0 = calloc(n, sizeof *w0);
    w1 = calloc(n, sizeof *w1);
    idx = malloc(n * sizeof *idx);
    val = malloc(n * sizeof *val);
    for (size_t j = 0; j < n; j++) {
        w0[j] = (float)(j % 17) * 0.01f;
        w1[j] = w0[j] + (j % 10 == 3 ? 0.5f : 0.0f);
    }
    assert_int_equal(sl_support_diff(l, w0, w1, &sup), SL_OK);
    assert_int_equal(sl_frame_encode_model(l, w1, 5, 1, &model, &model_len), SL_OK);

    ag_base_options(&o, &c, task, agent_dir, data);
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl__agent_set_model(a, m), SL_OK);
    m = NULL; /* the agent's now */
    assert_int_equal(sl__agent_save_model(a, model, model_len, 5), SL_OK);
    a->version = 5;
    assert_int_equal(sl__agent_save_support(a, sup, 3), SL_OK);
    sup = NULL; /* the agent's now */
    /* a split pending upload of version 5, its positions in the support */
    for (size_t j = 3; j < n && k < n / 20; j += 10) {
        idx[k] = (uint32_t)j;
        val[k++] = 0.25f;
    }
    {
        sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 5, 7, 0};
        sl_sparse_tensor ts[16];
        sl_encode_params p;
        size_t nt = sl_layout_tensors(a->layout), at = 0;
        assert_true(nt <= 16);
        for (size_t t = 0; t < nt; t++) { /* the flat indices, tensor by tensor */
            const sl_tensor_desc *td = sl_layout_tensor(a->layout, t);
            size_t from = at;
            for (; at < k && idx[at] < td->offset + td->count; at++)
                idx[at] = (uint32_t)(idx[at] - td->offset);
            ts[t].n = at - from;
            ts[t].idx = idx + from;
            ts[t].val = val + from;
        }
        sl_encode_params_default(&p);
        p.flat = 1;
        p.values = SL_VALUE_TERNARY;
        p.split = a->split;
        p.ref_version = 3;
        assert_int_equal(sl_frame_encode_update(a->layout, &h, ts, &p, NULL, &frame, &frame_len),
                         SL_OK);
        assert_int_equal(((uint8_t *)frame)[6], SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
    }
    a->pending.present = 1;
    a->pending.gen = 1;
    a->pending.task_id = task;
    a->pending.round_id = 7;
    a->pending.base_version = 5;
    a->pending.density = 0.05;
    a->pending.layout_hash = sl_layout_hash(a->layout);
    a->pending.frame = frame;
    a->pending.frame_len = frame_len;
    sl_sha256(frame, frame_len, a->pending.frame_sha);
    a->pending.acc = calloc(n, sizeof(float));
    assert_int_equal(sl_support_load(a->layout, sl_support_bits(a->split, NULL), (n + 7) / 8,
                                     &a->pending.support),
                     SL_OK);
    a->pending.support_ref = 3;
    assert_int_equal(sl__agent_save_pending(a), SL_OK);
    sl_agent_free(a);

    /* a new process: the model, its support, and the pending upload with its own */
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl__agent_registry_model(hash, &m), SL_OK);
    assert_int_equal(sl__agent_set_model(a, m), SL_OK);
    m = NULL;
    assert_int_equal(sl__agent_load_model(a), SL_OK);
    assert_int_equal(a->version, 5);
    assert_non_null(a->split);
    assert_int_equal(a->split_ref, 3);
    assert_int_equal(sl_support_count(a->split), (n + 6) / 10);
    assert_true(a->pending.present);
    assert_non_null(a->pending.support);
    assert_int_equal(a->pending.support_ref, 3);
    assert_int_equal(sl_support_crc(a->pending.support), sl_support_crc(a->split));
    /* a model that came whole: the old support goes with the old model */
    sl__agent_drop_support(a);
    assert_int_equal(sl__agent_load_model(a), SL_OK);
    assert_null(a->split);
    /* a support written for another version than the one held is not used */
    a->version = 4;
    assert_int_equal(sl_support_diff(a->layout, w0, w1, &sup), SL_OK);
    assert_int_equal(sl__agent_save_support(a, sup, 3), SL_OK);
    sup = NULL;
    assert_int_equal(sl__agent_load_model(a), SL_OK); /* version 5 held, the support says 4 */
    assert_int_equal(a->version, 5);
    assert_null(a->split);
    /* pending/support damaged: the pending upload is dropped, loudly, as any damage */
    snprintf(path, sizeof path, "%s/pending/support", agent_dir);
    {
        void *bits;
        size_t blen;
        assert_int_equal(sl_fs_read_file(path, 1 << 20, &bits, &blen), SL_OK);
        ((uint8_t *)bits)[0] ^= 0x08; /* coordinate 3: out of the support */
        assert_int_equal(sl_fs_write_atomic(path, bits, blen, 0600), SL_OK);
        free(bits);
    }
    assert_int_equal(sl__agent_load_pending(a), SL_OK);
    assert_false(a->pending.present);
    sl_agent_free(a);
    free(w0);
    free(w1);
    free(idx);
    free(val);
    free(model);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

/* ---- bandwidth-aware density ----------------------------------------------------------------- */

typedef struct density_ctx {
    double density;
    uint64_t bytes;
} density_ctx;

static void density_event(void *ctx, const sl_agent_event *ev)
{
    density_ctx *d = ctx;
    if (ev->kind == SL_AGENT_EV_PREPARED) {
        d->density = ev->value;
        d->bytes = ev->bytes;
    }
}

/* A device that measured 2 kB/s of upload (counters, as a previous run left
 * them) cannot move the scheduled 5% of mlp (~20 kB) in the 4 s the round
 * gives: it sends less, down to the floor (10% of the schedule), and the
 * rest waits in its residual. */
static void test_bandwidth_density(void **state)
{
    char dir[512], data_dir[600], agent_dir[600], counters[700], err[256];
    ag_coord c;
    sl_agent_data *data = NULL;
    sl_agent_options o;
    sl_agent *a = NULL;
    density_ctx d = {0, 0};
    int64_t task;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_bw");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    snprintf(counters, sizeof counters, "%s/counters", agent_dir);
    ag_make_data(data_dir, 200, 50);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          "{\"name\":\"bw\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
                          "\"selection_window_ms\":200,\"report_deadline_ms\":4000,"
                          "\"values\":\"fp16\",\"density\":0.05,\"local_epochs\":1}");
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    assert_int_equal(mkdir(agent_dir, 0700), 0);
    assert_int_equal(sl_fs_write_atomic(counters, "bw_ewma=2000\nbpnz_ewma=2\n", 25, 0600), SL_OK);
    ag_base_options(&o, &c, task, agent_dir, data);
    o.once = 1;
    o.on_event = density_event;
    o.event_ctx = &d;
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_agent_run(a), SL_OK);
    fprintf(stderr, "bandwidth-aware: density %.4g (scheduled 0.05), %llu bytes\n", d.density,
            (unsigned long long)d.bytes);
    assert_true(d.density >= 0.005 * 0.999);
    assert_true(d.density < 0.025);
    assert_true(d.bytes < 20000);
    sl_agent_free(a);
    sl_agent_data_free(data);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_and_commit),
        cmocka_unit_test(test_bandwidth_density),
        cmocka_unit_test(test_tracking_feedback),
        cmocka_unit_test(test_checkin_answer),
        cmocka_unit_test(test_topk_scope),
        cmocka_unit_test(test_pending_scope),
        cmocka_unit_test(test_split_state),
        cmocka_unit_test(test_tls_ca_and_pin),
        cmocka_unit_test(test_fleet),
        cmocka_unit_test(test_fleet_retention),
        cmocka_unit_test(test_time_budget),
        cmocka_unit_test(test_heterogeneous_fleet),
        cmocka_unit_test(test_cut_every_transfer),
        cmocka_unit_test(test_program),
        cmocka_unit_test(test_evaluator_half_answers),
    };
    const struct CMUnitTest slow[] = {
        cmocka_unit_test(test_fleet_slow),
    };
    signal(SIGPIPE, SIG_IGN);
    if (getenv("SL_TEST_VERBOSE") != NULL) {
        sl_log_set_sink(sl_log_sink_stderr, NULL);
        sl_log_set_level(SL_LOG_INFO);
    }
    if (argc > 1 && strcmp(argv[1], "--slow") == 0)
        return cmocka_run_group_tests(slow, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
