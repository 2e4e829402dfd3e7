/*
 * Poisoning (issue #9, section 2): 20% of the devices of a fleet
 * (starling-agent --fleet --poison 0.2:MODE) send x100-scaled, sign-flipped
 * or NaN updates to the starling-coordinator program; runs side by side:
 *
 *   clean-def     no poisoning, clipping + trimmed mean (the reference)
 *   scale100-def  20% scale100, clipping + trimmed mean
 *   flip-def      20% flip, clipping + trimmed mean
 *   nan-def       20% nan, clipping + trimmed mean
 *   clean-avg     no poisoning, plain FedAvg (no clipping)
 *   scale100-avg  20% scale100, plain FedAvg: the control that shows the
 *                 accuracy assertion can fail. Its model may diverge (lenet5
 *                 does after one round: every later update is NaN, the
 *                 devices sit the rounds out, every round is abandoned), so
 *                 it is stopped when the others are done (see wait_all) and
 *                 judged by the model it has.
 *
 * Asserted for every run: the task runs all its rounds and every round
 * closes (8 honest devices cover the target of 7; the control: every round
 * it finished closed iff it met quorum); the fleet and the
 * coordinator stop cleanly; no device's loop failed; every acknowledged
 * update is stored exactly once and every stored update is acknowledged or
 * pending; exactly round(0.2 * 10) = 2 devices poisoned (0 in clean runs)
 * and the fleet's summary says so; the final model decodes (every
 * parameter finite).
 * NaN: every upload of a NaN poisoner was refused with HTTP 422, content
 * type application/problem+json, problem reason "nonfinite" (the agent's
 * log of the answer), once per discarded participation; the coordinator's
 * starling_updates_rejected_total{reason="nonfinite"} equals the number of
 * those refusals; no update of a poisoner is stored and its acks.log is
 * empty; honest devices had nothing refused.
 * scale100 / flip: the poisoners' updates really are poisoned and were
 * accepted (so the defence had something to do): a stored scale100 update
 * has at least 10x the median honest norm; a stored flip update points
 * against the mean honest update of its round (cosine < 0) while honest
 * ones point with it.
 * The tasks use the classic residual, undecayed ("error_feedback": "residual",
 * "residual_decay": 1): under
 * tracking, a flip poisoner's residual (global model minus what the
 * coordinator holds for it) grows along the model's own moves and turns its
 * updates back toward the honest direction within a few rounds (measured:
 * cosine up to +0.07 with the honest mean), which would leave the defence
 * little to do; the classic residual keeps the attack at full strength.
 * Accuracy (test split, final model, the same rounds and seeds): every
 * defended poisoned run is within MARGIN of clean-def; scale100-avg is at
 * least DROP below clean-avg.
 *   CI (no argument): logreg, 200 samples per device, 15 rounds, test on the
 *   first 2,000 test images; MARGIN 5 points (see ci_plan), DROP 5 points.
 *   `--slow`: lenet5 on the real Fashion-MNIST (skipped when missing), 30
 *   rounds, the 10,000 test images; MARGIN 2 points (the issue's), DROP 5.
 * The crafted NaN frame itself is checked in process for every value mode
 * (test_nan_frames): CRC valid, refused by the decoder with SL_ENONFINITE.
 */
#include <math.h>
#include <signal.h>
#include <sys/wait.h>

#include "../../device/agent/agent_int.h"
#include "../support/sl_split_test.h"
#include "../support/sl_test.h"
#include "fl_harness.h"
#include "starling/codec.h"
#include "starling/data.h"
#include "starling/nn.h"

#define DEVICES 10
#define POISON  "0.2" /* of DEVICES: 2 poisoners */

static int slow;

typedef struct plan {
    const char *model;
    unsigned of, rounds;
    size_t train, test;     /* CI: samples of the generated data */
    const char *config_fmt; /* %s name, %u rounds, %s aggregation */
    const char *defence;    /* the aggregation keys of the -def runs */
    double margin, drop;
    double seconds; /* for one batch of runs */
} plan;

/*
 * CI margin: 5 points. The run is short (15 rounds of logreg on 2,000
 * images, accuracy still rising) and not bit-reproducible (which 7 of the
 * 10 devices report first changes from run to run); in 5 runs of this plan
 * the defended poisoned runs stayed 0.0 to 2.5 points from clean-def,
 * while undefended scale100 lost 9.8 to 18 points to clean FedAvg, so 5
 * points passes every defended run, and DROP = MARGIN: the control must
 * fail the very check the defended runs pass. Clipping at 3.0: the honest updates' median norm here
 * is 3.4 to 5 (the test prints it), so the clip trims honest updates mildly and cuts scale100 ones
 * (norm 300+) by two orders of magnitude. The report deadline is 15 s: rounds close at the target
 * long before it, but six coordinators and fleets at once beside other tests on a 2-core CI machine
 * once left a round without quorum at 4 s.
 */
static const plan ci_plan = {
    "logreg",
    10,
    15,
    2000,
    2000,
    "{\"name\":\"%s\",\"rounds\":%u,\"target\":7,\"quorum\":5,\"over_selection\":1.43,"
    "\"selection_window_ms\":1200,\"report_deadline_ms\":15000,\"values\":\"fp16\","
    "\"error_feedback\":\"residual\",\"residual_decay\":1,"
    "\"density\":0.1,\"local_epochs\":1,\"batch\":16,\"local_lr\":0.05,\"seed\":5%s}",
    ",\"aggregator\":\"trimmed_mean\",\"trim_fraction\":0.3,\"clip_norm\":3.0",
    0.05,
    0.05,
    75,
};

static const plan slow_plan = {
    "lenet5",
    40,
    30,
    0,
    0,
    "{\"name\":\"%s\",\"rounds\":%u,\"target\":7,\"quorum\":5,\"over_selection\":1.43,"
    "\"selection_window_ms\":2000,\"report_deadline_ms\":30000,\"values\":\"fp16\","
    "\"error_feedback\":\"residual\",\"residual_decay\":1,"
    "\"density\":0.1,\"warmup_rounds\":2,\"warmup_density\":0.3,\"local_epochs\":1,"
    "\"batch\":32,\"local_lr\":0.05,\"local_momentum\":0.9,\"seed\":5%s}",
    ",\"aggregator\":\"trimmed_mean\",\"trim_fraction\":0.3,\"clip_norm\":5.0",
    0.02,
    0.05,
    1500,
};

typedef struct setting {
    const char *name;
    const char *mode; /* --poison 0.2:<mode>; NULL: clean */
    int defended;
    int control; /* undefended under attack: need not finish (see wait_all) */
    fl_coord c;
    int64_t task;
    pid_t fleet;
    int finished;
    double seconds;
    char state[700], log[700], poison[32];
    fl_run run;
    size_t acked, pending;
    unsigned npoisoners;
    unsigned poisoner[DEVICES];       /* dev index K */
    int64_t poisoner_id[DEVICES];     /* its device id */
    unsigned long long refused;       /* NaN: 422 nonfinite answers in the agents' log */
    unsigned long long metric_nonfin; /* the coordinator's counter */
    double accuracy;
    /* stored updates: norms and cosines with the honest mean of their round */
    double honest_norm_median, poisoned_norm_max, honest_cos_min, poisoned_cos_max;
    size_t poisoned_stored;
} setting;

/* ---- the crafted NaN frame, in process --------------------------------------------------------
 */

static void check_nan_frame(const sl_layout *layout, const void *frame, size_t len, int reencoded)
{
    void *nan_frame = NULL, *again = NULL;
    size_t nan_len = 0, again_len = 0, differ = 0;
    sl_frame_header h;
    sl_update *u = NULL;
    assert_int_equal(sl_frame_decode_update(layout, frame, len, NULL, &u), SL_OK);
    sl_update_free(u);
    u = NULL;
    assert_int_equal(sl__agent_poison_frame(layout, frame, len, &nan_frame, &nan_len), SL_OK);
    /* an intact frame (magic, sizes, CRC) whose only fault is the NaN */
    assert_int_equal(sl_frame_peek_header(nan_frame, nan_len, &h), SL_OK);
    {
        sl_frame_header orig;
        assert_int_equal(sl_frame_peek_header(frame, len, &orig), SL_OK);
        assert_int_equal(h.flags, orig.flags); /* a flat frame stays flat */
    }
    assert_int_equal(sl_frame_decode_update(layout, nan_frame, nan_len, NULL, &u), SL_ENONFINITE);
    assert_null(u);
    if (reencoded) {
        assert_true(nan_len < len);
    } else {
        /* a value (2 or 4 bytes) and the CRC changed, nothing else */
        assert_int_equal(nan_len, len);
        for (size_t i = 0; i < len; i++)
            differ += ((const uint8_t *)frame)[i] != ((const uint8_t *)nan_frame)[i];
        assert_true(differ >= 1 && differ <= 8);
    }
    /* the same bytes every time: a cut upload resumes */
    assert_int_equal(sl__agent_poison_frame(layout, frame, len, &again, &again_len), SL_OK);
    assert_int_equal(again_len, nan_len);
    assert_memory_equal(again, nan_frame, nan_len);
    free(again);
    free(nan_frame);
}

static void test_nan_frames(void **state)
{
    static const sl_value_mode modes[] = {SL_VALUE_FP32, SL_VALUE_FP16,    SL_VALUE_BF16,
                                          SL_VALUE_INT8, SL_VALUE_TERNARY, SL_VALUE_SIGN};
    static const char text[] = "w 8 8\nb 32\n";
    sl_model *model = NULL;
    const sl_layout *layout;
    sl_layout *zl = NULL;
    uint32_t idx[64];
    float val[64];
    sl_frame_header hdr = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 3, 17, 0};
    sl_encode_params p;
    sl_agent_options o;
    (void)state;
    assert_int_equal(sl_model_create("logreg", &model), SL_OK);
    layout = sl_model_layout(model);
    hdr.layout_hash = sl_layout_hash(layout);
    for (uint32_t i = 0; i < 64; i++) {
        idx[i] = i * 97;
        val[i] = (float)((i % 7) - 3) * 0.01f + (float)i * 1e-4f;
    }
    for (size_t m = 0; m < 2 * sizeof modes / sizeof modes[0]; m++) {
        /* weight: 64 values (fp32/fp16/bf16 sections may be zstd-coded);
         * bias: 3 values (stored); per-tensor and flat frames */
        static const uint32_t bias_idx[3] = {0, 4, 9};
        sl_sparse_tensor ts[2] = {{64, idx, val}, {3, bias_idx, val}};
        void *frame = NULL;
        size_t len = 0;
        sl_encode_params_default(&p);
        p.values = modes[m % (sizeof modes / sizeof modes[0])];
        p.flat = m >= sizeof modes / sizeof modes[0];
        assert_int_equal(sl_frame_encode_update(layout, &hdr, ts, &p, NULL, &frame, &len), SL_OK);
        check_nan_frame(layout, frame, len, 0);
        free(frame);
    }
    /* every value section zstd-coded (constant values, >= 64 raw bytes):
     * nothing to patch in place, the frame is re-encoded shorter */
    assert_int_equal(sl_layout_parse(text, strlen(text), &zl), SL_OK);
    hdr.layout_hash = sl_layout_hash(zl);
    {
        uint32_t ix[64];
        float v[64];
        sl_sparse_tensor ts[2] = {{64, ix, v}, {32, ix, v}};
        void *frame = NULL;
        size_t len = 0;
        for (uint32_t i = 0; i < 64; i++) {
            ix[i] = i;
            v[i] = 0.25f;
        }
        for (int flat = 0; flat <= 1; flat++) {
            sl_encode_params_default(&p);
            p.flat = flat;
            assert_int_equal(sl_frame_encode_update(zl, &hdr, ts, &p, NULL, &frame, &len), SL_OK);
            check_nan_frame(zl, frame, len, 1);
            free(frame);
        }
    }
    /* a lone agent's draw: P = 1 always poisons, P = 0 never, no mode never */
    sl_agent_options_default(&o);
    o.faults.poison_mode = SL_AGENT_POISON_FLIP;
    o.faults.poison = 1.0;
    assert_int_equal(sl__agent_poison_draw(&o), SL_AGENT_POISON_FLIP);
    o.faults.poison = 0.0;
    assert_int_equal(sl__agent_poison_draw(&o), SL_AGENT_POISON_NONE);
    o.faults.poison = 1.0;
    o.faults.poison_mode = SL_AGENT_POISON_NONE;
    assert_int_equal(sl__agent_poison_draw(&o), SL_AGENT_POISON_NONE);
    /* the update transforms */
    {
        float u[3] = {1.5f, -2.0f, 0.0f};
        sl__agent_poison_update(SL_AGENT_POISON_SCALE100, u, 3);
        assert_true(u[0] == 150.0f && u[1] == -200.0f && u[2] == 0.0f);
        sl__agent_poison_update(SL_AGENT_POISON_FLIP, u, 3);
        assert_true(u[0] == -150.0f && u[1] == 200.0f);
        sl__agent_poison_update(SL_AGENT_POISON_NAN, u, 3); /* NaN is the frame's business */
        assert_true(u[0] == -150.0f && u[1] == 200.0f);
    }
    {
        sl_agent_poison mode = SL_AGENT_POISON_NONE;
        assert_int_equal(sl_agent_poison_parse("scale100", &mode), SL_OK);
        assert_int_equal(mode, SL_AGENT_POISON_SCALE100);
        assert_int_equal(sl_agent_poison_parse("scale", &mode), SL_EINVAL);
        assert_int_equal(mode, SL_AGENT_POISON_SCALE100);
        assert_string_equal(sl_agent_poison_name(SL_AGENT_POISON_NAN), "nan");
    }
    sl_layout_free(zl);
    sl_model_free(model);
}

/* ---- federated runs ------------------------------------------------------------------------- */

static void start(setting *st, const plan *p, const char *root, const char *data)
{
    char config[1024], devices[16], of[16], task[32];
    fl_coord_init(&st->c, root, st->name);
    fl_coord_start(&st->c);
    snprintf(config, sizeof config, p->config_fmt, st->name, p->rounds,
             st->defended ? p->defence : "");
    st->task = fl_create_task(&st->c, p->model, config);
    snprintf(st->state, sizeof st->state, "%s/%s-fleet", root, st->name);
    snprintf(st->log, sizeof st->log, "%s/%s-fleet.log", root, st->name);
    snprintf(st->poison, sizeof st->poison, "%s:%s", POISON, st->mode ? st->mode : "scale100");
    snprintf(devices, sizeof devices, "%u", DEVICES);
    snprintf(of, sizeof of, "%u", p->of);
    snprintf(task, sizeof task, "%lld", (long long)st->task);
    {
        const char *a[] = {"--coordinator",
                           st->c.url,
                           "--task",
                           task,
                           "--fleet",
                           devices,
                           "--of",
                           of,
                           "--partition",
                           "iid",
                           "--data",
                           data,
                           "--state-dir",
                           st->state,
                           "--enrolment-token-file",
                           st->c.enrol_file,
                           "--seed",
                           "9",
                           "--retry-base",
                           "50ms",
                           "--max-wait",
                           "500ms",
                           "--request-timeout",
                           "20s",
                           "--log-level",
                           "debug",
                           st->mode ? "--poison" : NULL,
                           st->poison,
                           NULL};
        st->fleet = fl_spawn_agent(a, st->log);
    }
}

/*
 * Wait for the tasks to finish, at most @seconds. A control run (undefended,
 * poisoned) may never finish: once its model diverged every honest update
 * is NaN, the devices sit the rounds out and every round is abandoned at its
 * deadline. It gets the time the others took plus a quarter (at least 5 s)
 * and is then judged by the model it has.
 */
static void wait_all(setting *sts, size_t n, double seconds)
{
    double t0 = fl_now(), end = t0 + seconds * sl_test_time_scale(), others_done = 0;
    for (;;) {
        size_t open = 0, open_others = 0;
        double now = fl_now();
        for (size_t i = 0; i < n; i++)
            if (!sts[i].finished && fl_task_finished(&sts[i].c) == 1) {
                sts[i].finished = 1;
                sts[i].seconds = now - t0;
            }
        for (size_t i = 0; i < n; i++) {
            open += !sts[i].finished;
            open_others += !sts[i].finished && !sts[i].control;
        }
        if (open_others == 0 && others_done == 0)
            others_done = now;
        if (open == 0 || now >= end ||
            (others_done > 0 && now - others_done >= fmax(5.0, 0.25 * (others_done - t0)))) {
            for (size_t i = 0; i < n; i++)
                if (!sts[i].finished)
                    sts[i].seconds = now - t0;
            return;
        }
        fl_sleep_ms(100);
    }
}

static char *read_log(const char *path)
{
    void *text = NULL;
    size_t len = 0;
    if (sl_fs_read_file(path, 256 << 20, &text, &len) != SL_OK)
        fail_msg("%s: cannot read the log", path);
    return text;
}

static unsigned long long count_lines(const char *text, const char *a, const char *b)
{
    unsigned long long n = 0;
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        if (strstr(buf, a) != NULL && (b == NULL || strstr(buf, b) != NULL))
            n++;
        line = eol ? eol + 1 : NULL;
    }
    return n;
}

/* The poisoners the fleet named ("dev=K poisons its updates (MODE)"). */
static void find_poisoners(setting *st, const char *log)
{
    const char *p = log;
    while ((p = strstr(p, " poisons its updates (")) != NULL) {
        const char *q = p;
        char mode[32];
        unsigned k;
        while (q > log && q[-1] != '=')
            q--;
        if (sscanf(q, "%u poisons its updates (%31[a-z0-9])", &k, mode) != 2 || k >= DEVICES)
            fail_msg("%s: a poisoner line that does not parse", st->name);
        if (st->mode == NULL || strcmp(mode, st->mode) != 0)
            fail_msg("%s: dev=%u poisons with %s", st->name, k, mode);
        if (st->npoisoners == DEVICES)
            fail_msg("%s: too many poisoner lines", st->name);
        st->poisoner[st->npoisoners++] = k;
        p += 10;
    }
}

static int is_poisoner(const setting *st, int64_t device_id)
{
    for (unsigned i = 0; i < st->npoisoners; i++)
        if (st->poisoner_id[i] == device_id)
            return 1;
    return 0;
}

static unsigned long long metric(const char *text, const char *name)
{
    const char *p = strstr(text, name);
    if (p == NULL)
        fail_msg("/metrics has no %s", name);
    return strtoull(p + strlen(name), NULL, 10);
}

/* The NaN run: every refusal is a 422 problem+json "nonfinite" to a poisoner. */
static void check_nan(setting *st, const char *log)
{
    unsigned long long discarded_all = count_lines(log, "event=discarded", NULL), mine = 0;
    unsigned long long refused_any = count_lines(log, "upload refused: HTTP 422", NULL);
    st->refused = count_lines(
        log, "upload refused: HTTP 422 unprocessable nonfinite (application/problem+json", NULL);
    if (refused_any != st->refused)
        fail_msg("%s: %llu 422 refusals, %llu of them problem+json nonfinite; see %s", st->name,
                 refused_any, st->refused, st->log);
    for (unsigned i = 0; i < st->npoisoners; i++) {
        char tag[64];
        unsigned long long d, r;
        snprintf(tag, sizeof tag, "dev=%u device=%lld event=", st->poisoner[i],
                 (long long)st->poisoner_id[i]);
        d = count_lines(log, tag, "event=discarded");
        r = count_lines(log, tag, "reason=nonfinite");
        if (d == 0 || d != r)
            fail_msg("%s: poisoner dev=%u: %llu discarded, %llu for nonfinite", st->name,
                     st->poisoner[i], d, r);
        if (count_lines(log, tag, "event=accepted") != 0)
            fail_msg("%s: poisoner dev=%u had an update accepted", st->name, st->poisoner[i]);
        mine += d;
    }
    /* honest devices: nothing refused */
    if (discarded_all != mine)
        fail_msg("%s: %llu discarded participations, %llu of them poisoners'", st->name,
                 discarded_all, mine);
    if (st->refused != mine || st->metric_nonfin != mine)
        fail_msg("%s: %llu NaN refusals logged, %llu discarded, coordinator counted %llu", st->name,
                 st->refused, mine, st->metric_nonfin);
}

typedef struct norm_ctx {
    const sl_layout *layout;
    size_t n;
    const setting *st;
    double *dense[FL_MAX_ACCEPTED];
    int poisoned[FL_MAX_ACCEPTED];
    size_t count;
    sl_store *store; /* a split update is read against the versions it names */
    int64_t task;
} norm_ctx;

static int collect_dense(void *ctx, int64_t device_id, const void *frame, size_t len,
                         uint32_t num_samples, const uint8_t *sha256)
{
    norm_ctx *c = ctx;
    (void)num_samples;
    (void)sha256;
    assert_true(c->count < FL_MAX_ACCEPTED);
    c->dense[c->count] = calloc(c->n, sizeof(double));
    assert_non_null(c->dense[c->count]);
    {
        void *plain;
        size_t plain_len;
        assert_int_equal(
            sl_test_plain_frame(c->store, c->task, c->layout, frame, len, &plain, &plain_len),
            SL_OK);
        assert_int_equal(sl_frame_accumulate_update_f64(c->layout, plain, plain_len, NULL, 1.0,
                                                        c->dense[c->count]),
                         SL_OK);
        free(plain);
    }
    c->poisoned[c->count] = is_poisoner(c->st, device_id);
    c->count++;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Norms of the stored updates, and cosines with the honest mean of their round. */
static void measure_updates(setting *st, const plan *p, sl_store *s)
{
    sl_model *model = NULL;
    double *honest_norms = NULL;
    size_t nh = 0, cap = 0;
    assert_int_equal(sl_model_create(p->model, &model), SL_OK);
    st->honest_cos_min = 1;
    st->poisoned_cos_max = -1;
    for (size_t r = 0; r < st->run.n; r++) {
        norm_ctx c = {
            sl_model_layout(model), sl_model_params(model), st, {NULL}, {0}, 0, s, st->task};
        double *mean = calloc(c.n, sizeof *mean), mean_norm = 0;
        size_t honest = 0;
        assert_non_null(mean);
        assert_int_equal(sl_store_foreach_update(s, st->run.rounds[r].rec.id, collect_dense, &c),
                         0);
        for (size_t u = 0; u < c.count; u++)
            if (!c.poisoned[u]) {
                for (size_t i = 0; i < c.n; i++)
                    mean[i] += c.dense[u][i];
                honest++;
            }
        for (size_t i = 0; i < c.n; i++)
            mean_norm += mean[i] * mean[i];
        mean_norm = sqrt(mean_norm);
        for (size_t u = 0; u < c.count; u++) {
            double norm = 0, dot = 0, cosine;
            for (size_t i = 0; i < c.n; i++) {
                norm += c.dense[u][i] * c.dense[u][i];
                dot += c.dense[u][i] * mean[i];
            }
            norm = sqrt(norm);
            cosine = norm > 0 && mean_norm > 0 ? dot / (norm * mean_norm) : 0;
            if (c.poisoned[u]) {
                st->poisoned_stored++;
                if (norm > st->poisoned_norm_max)
                    st->poisoned_norm_max = norm;
                if (honest > 0 && cosine > st->poisoned_cos_max)
                    st->poisoned_cos_max = cosine;
            } else {
                if (nh == cap) {
                    cap = cap ? 2 * cap : 64;
                    honest_norms = realloc(honest_norms, cap * sizeof *honest_norms);
                    assert_non_null(honest_norms);
                }
                honest_norms[nh++] = norm;
                if (honest > 1 && cosine < st->honest_cos_min)
                    st->honest_cos_min = cosine;
            }
            free(c.dense[u]);
        }
        free(mean);
    }
    if (nh > 0) {
        qsort(honest_norms, nh, sizeof *honest_norms, cmp_double);
        st->honest_norm_median = honest_norms[nh / 2];
    }
    free(honest_norms);
    sl_model_free(model);
}

/* Test accuracy of the final model (which must decode: every parameter finite). */
static double final_accuracy(setting *st, const plan *p, sl_store *s, const sl_dataset *test)
{
    sl_model_record m;
    sl_model *model = NULL;
    float *params;
    double acc = 0, loss = 0;
    assert_int_equal(sl_store_get_model(s, st->task, st->run.final_version, &m), SL_OK);
    assert_int_equal(sl_model_create(p->model, &model), SL_OK);
    params = malloc(sl_model_params(model) * sizeof *params);
    assert_non_null(params);
    if (sl_frame_decode_model(sl_model_layout(model), m.frame, m.frame_len, NULL, 0, params) !=
        SL_OK)
        fail_msg("%s: the final model (version %lld) does not decode", st->name,
                 (long long)st->run.final_version);
    assert_int_equal(sl_evaluate(model, params, test->x, test->y, NULL, test->n, 256, &acc, &loss),
                     SL_OK);
    free(params);
    sl_model_free(model);
    sl_store_model_free(&m);
    return acc;
}

static void finish(setting *st, const plan *p, const sl_dataset *test)
{
    int code;
    sl_store *s;
    sl_client_response r;
    uint64_t stored = 0, round_rejected = 0;
    char *log, want[64];
    kill(st->fleet, SIGTERM);
    code = ag_wait(st->fleet, 30000);
    st->fleet = 0; /* reaped (or killed) by ag_wait */
    /* the counter lives in the coordinator's memory: read it before it stops */
    if (fl_request(&st->c, "GET", "/metrics", NULL, &r) != SL_OK || r.status != 200 ||
        r.body == NULL)
        fail_msg("%s: GET /metrics failed", st->name);
    st->metric_nonfin =
        metric((const char *)r.body, "starling_updates_rejected_total{reason=\"nonfinite\"} ");
    sl_client_response_free(&r);
    fl_coord_stop(&st->c);
    if (!st->finished && !st->control)
        fail_msg("%s: the task did not finish in time; see %s and %s", st->name, st->c.log,
                 st->log);
    if (code != 0)
        fail_msg("%s: the fleet ended with %d after SIGTERM; see %s", st->name, code, st->log);
    log = read_log(st->log);
    find_poisoners(st, log);
    if (st->npoisoners != (st->mode ? 2u : 0u))
        fail_msg("%s: %u poisoners", st->name, st->npoisoners);
    snprintf(want, sizeof want, " %u poisoned, 0 devices failed", st->npoisoners);
    if (count_lines(log, "fleet of ", want) != 1)
        fail_msg("%s: the fleet's summary does not say \"%s\"; see %s", st->name, want, st->log);
    for (unsigned i = 0; i < st->npoisoners; i++) {
        char dir[800];
        snprintf(dir, sizeof dir, "%s/dev-%u", st->state, st->poisoner[i]);
        st->poisoner_id[i] = ag_device_id(dir);
    }

    s = fl_open_store(st->c.data_dir);
    fl_read_run(s, st->task, &st->run);
    if (st->finished) {
        fl_check_round_count(&st->run, p->rounds, st->name);
        assert_int_equal(fl_check_quorum(&st->run), p->rounds);
    } else {
        fl_check_quorum(&st->run); /* a stalled control: the rounds it finished */
    }
    if (st->run.closed != p->rounds && !st->control) {
        for (size_t i = 0; i < st->run.n; i++)
            if (st->run.rounds[i].rec.state != SL_ROUND_CLOSED)
                fprintf(stderr, "%s: round no %lld: %u of quorum %u reported (%s)\n", st->name,
                        (long long)st->run.rounds[i].rec.round_no, st->run.rounds[i].rec.reported,
                        st->run.rounds[i].rec.quorum, st->run.rounds[i].rec.error);
        fail_msg("%s: %llu of %u rounds closed", st->name, (unsigned long long)st->run.closed,
                 p->rounds);
    }
    st->acked = fl_check_fleet_acks(s, st->state, DEVICES, &st->pending);
    for (size_t i = 0; i < st->run.n; i++) {
        stored += st->run.rounds[i].n;
        round_rejected += st->run.rounds[i].rec.rejected;
    }
    if (stored != st->acked + st->pending)
        fail_msg("%s: %llu updates stored, %zu acknowledged + %zu pending", st->name,
                 (unsigned long long)stored, st->acked, st->pending);
    measure_updates(st, p, s);
    if (st->mode != NULL && strcmp(st->mode, "nan") == 0) {
        check_nan(st, log);
        if (st->poisoned_stored != 0)
            fail_msg("%s: %zu NaN poisoners' updates are stored", st->name, st->poisoned_stored);
        for (unsigned i = 0; i < st->npoisoners; i++) {
            char dir[800];
            ag_ack *acks = NULL;
            snprintf(dir, sizeof dir, "%s/dev-%u", st->state, st->poisoner[i]);
            if (ag_read_acks(dir, &acks) != 0)
                fail_msg("%s: NaN poisoner dev=%u has acknowledgements", st->name, st->poisoner[i]);
            free(acks);
        }
    } else {
        /* only NaN frames are refused */
        if (count_lines(log, "upload refused: HTTP 422", NULL) != 0 || st->metric_nonfin != 0)
            fail_msg("%s: updates were refused as unprocessable; see %s", st->name, st->log);
    }
    if (st->mode != NULL && strcmp(st->mode, "scale100") == 0 &&
        (st->poisoned_stored == 0 || !(st->poisoned_norm_max >= 10 * st->honest_norm_median)))
        fail_msg("%s: %zu poisoned updates stored, largest norm %g vs honest median %g", st->name,
                 st->poisoned_stored, st->poisoned_norm_max, st->honest_norm_median);
    if (st->mode != NULL && strcmp(st->mode, "flip") == 0 &&
        (st->poisoned_stored == 0 || !(st->poisoned_cos_max < 0) || !(st->honest_cos_min > 0)))
        fail_msg("%s: %zu poisoned updates stored; cosine with the honest mean: poisoned at most "
                 "%g, honest at least %g",
                 st->name, st->poisoned_stored, st->poisoned_cos_max, st->honest_cos_min);
    st->accuracy = final_accuracy(st, p, s, test);
    sl_store_close(s);
    free(log);
    fprintf(
        stderr,
        "%s: %s %.1f s, %llu rounds closed, %zu acknowledged, %u poisoners (%zu of their updates "
        "stored, %llu NaN refusals); honest norm median %.3g, poisoned max %.3g; cosine "
        "honest min %.3f, poisoned max %.3f; accuracy %.4f; the rounds record %llu "
        "rejections\n",
        st->name, st->finished ? "finished in" : "stopped unfinished after", st->seconds,
        (unsigned long long)st->run.closed, st->acked, st->npoisoners, st->poisoned_stored,
        st->refused, st->honest_norm_median, st->poisoned_norm_max, st->honest_cos_min,
        st->poisoned_cos_max, st->accuracy, (unsigned long long)round_rejected);
}

/* The runs of test_poisoning, for the teardown: a failed assertion must
 * not leave coordinators and fleets running. */
static setting *live;
static size_t nlive;

static int kill_leftovers(void **state)
{
    (void)state;
    for (size_t i = 0; i < nlive; i++) {
        if (live[i].fleet > 0) {
            kill(live[i].fleet, SIGKILL);
            waitpid(live[i].fleet, NULL, 0);
            live[i].fleet = 0;
        }
        if (live[i].c.pid > 0)
            fl_coord_kill(&live[i].c);
    }
    nlive = 0;
    return 0;
}

static void test_poisoning(void **state)
{
    static setting sts[] = {
        {.name = "clean-def", .mode = NULL, .defended = 1},
        {.name = "scale100-def", .mode = "scale100", .defended = 1},
        {.name = "flip-def", .mode = "flip", .defended = 1},
        {.name = "nan-def", .mode = "nan", .defended = 1},
        {.name = "clean-avg", .mode = NULL, .defended = 0},
        {.name = "scale100-avg", .mode = "scale100", .defended = 0, .control = 1},
    };
    const size_t n = sizeof sts / sizeof sts[0];
    const plan *p = slow ? &slow_plan : &ci_plan;
    live = sts;
    nlive = n;
    sl_dataset *test = NULL;
    char root[512], data[600], err[256];
    int failed = 0;
    (void)state;
    sl_test_mkdtemp(root, sizeof root, "fl_poison");
    if (slow) {
        FILE *f;
        snprintf(data, sizeof data, "%s/train-images-idx3-ubyte.gz", SL_DATA_FASHION_MNIST_DIR);
        f = fopen(data, "rb");
        if (f == NULL) {
            sl_test_rmtree(root);
            fprintf(stderr,
                    "skipped: the real Fashion-MNIST (%s, Debian dataset-fashion-mnist) "
                    "is not installed\n",
                    SL_DATA_FASHION_MNIST_DIR);
            skip();
        }
        fclose(f);
        snprintf(data, sizeof data, "%s", SL_DATA_FASHION_MNIST_DIR);
    } else {
        snprintf(data, sizeof data, "%s/fmnist", root);
        ag_make_data(data, p->train, p->test);
    }
    if (sl_data_load_fashion_mnist(data, 0, &test, err, sizeof err) != SL_OK)
        fail_msg("test split: %s", err);
    if (slow) {
        /* two at a time: lenet5 keeps the cores busy */
        for (size_t i = 0; i < n; i += 2) {
            size_t m = n - i < 2 ? n - i : 2;
            for (size_t j = 0; j < m; j++)
                start(&sts[i + j], p, root, data);
            wait_all(&sts[i], m, p->seconds);
            for (size_t j = 0; j < m; j++)
                finish(&sts[i + j], p, test);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            start(&sts[i], p, root, data);
        wait_all(sts, n, p->seconds);
        for (size_t i = 0; i < n; i++)
            finish(&sts[i], p, test);
    }
    fprintf(stderr, "accuracy after %u rounds (%s):", p->rounds, p->model);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s %.4f%s", sts[i].name, sts[i].accuracy, i + 1 < n ? "," : "\n");
    for (size_t i = 1; i < 4; i++)
        if (fabs(sts[i].accuracy - sts[0].accuracy) > p->margin) {
            fprintf(stderr, "%s: accuracy %.4f is not within %.0f points of clean-def's %.4f\n",
                    sts[i].name, sts[i].accuracy, p->margin * 100, sts[0].accuracy);
            failed = 1;
        }
    if (!(sts[4].accuracy - sts[5].accuracy >= p->drop)) {
        fprintf(stderr,
                "control: undefended scale100 %.4f is not %.0f points below clean FedAvg %.4f: "
                "this test could not tell a working defence from none\n",
                sts[5].accuracy, p->drop * 100, sts[4].accuracy);
        failed = 1;
    }
    assert_false(failed);
    for (size_t i = 0; i < n; i++) {
        fl_run_free(&sts[i].run);
        fl_coord_free(&sts[i].c);
    }
    sl_dataset_free(test);
    sl_test_rmtree(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_frames),
        cmocka_unit_test_teardown(test_poisoning, kill_leftovers),
    };
    slow = argc > 1 && strcmp(argv[1], "--slow") == 0;
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
