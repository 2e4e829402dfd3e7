/*
 * The round engine with a simulated clock and simulated devices, in
 * process: the round life cycle and every rejection, the dropout matrix,
 * determinism under shuffled arrivals and restarts, a 10,000-device run,
 * and kill -9 after every persisted transition.
 */
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>

#include <mbedtls/sha256.h>

#include "../../support/sl_faultvfs.h"
#include "../../support/sl_engine_test.h"
#include "../../support/sl_store_test.h"
#include "coord_int.h"
#include "starling/round.h"
#include "store_int.h"

#define LAYOUT "w 40 50\nb 40\n"
#define T0     (1764465820000LL * 1000000LL)

typedef struct sim {
    char dir[512];
    sl_clock_manual clock;
    sl_store *store;
    sl_engine *engine;
    sl_layout *layout;
    int64_t task;
    int64_t *devices;
    size_t ndevices;
} sim;

static const char *sim_vfs; /* the store's SQLite VFS (NULL: the default) */

static void sim_open_engine(sim *s)
{
    char err[256];
    sl_engine_options o;
    sl_engine_options_default(&o);
    o.clock = &s->clock.clock;
    s->store = sl_test_store_open(s->dir, sim_vfs, &s->clock.clock);
    assert_non_null(s->store);
    assert_int_equal(sl_engine_open(s->store, &o, &s->engine, err, sizeof err), SL_OK);
}

static void sim_restart(sim *s)
{
    sl_engine_close(s->engine);
    sl_store_close(s->store);
    sim_open_engine(s);
}

/* Open (or reopen) the simulation in s->dir: idempotent, so a restarted
 * process can run it again over what a killed one left. */
static void sim_setup(sim *s, size_t ndevices, const char *config)
{
    char err[256];
    void *frame;
    size_t len, n;
    float *w;
    sl_clock_manual_init(&s->clock, 0, T0);
    sim_open_engine(s);
    assert_int_equal(sl_layout_parse(LAYOUT, strlen(LAYOUT), &s->layout), SL_OK);
    n = (size_t)sl_layout_params(s->layout);
    w = calloc(n, sizeof *w);
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((int)(i % 13) - 6) * 0.01f;
    assert_int_equal(sl_frame_encode_model(s->layout, w, 1, 3, &frame, &len), SL_OK);
    if (sl_engine_create_task(s->engine, config, LAYOUT, frame, len, &s->task, err, sizeof err) !=
        SL_OK)
        fail_msg("create task: %s", err);
    free(frame);
    free(w);
    s->ndevices = ndevices;
    s->devices = malloc(ndevices * sizeof *s->devices);
    for (size_t i = 0; i < ndevices; i++) {
        uint8_t key[8];
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)((i + 1) >> (8 * b));
        assert_int_equal(sl_store_enrol_device(s->store, key, 8, "{}", &s->devices[i]), SL_OK);
    }
}

static void sim_init(sim *s, const char *name, size_t ndevices, const char *config)
{
    memset(s, 0, sizeof *s);
    sl_test_mkdtemp(s->dir, sizeof s->dir, name);
    sim_setup(s, ndevices, config);
}

static void sim_free(sim *s)
{
    sl_engine_close(s->engine);
    sl_store_close(s->store);
    sl_layout_free(s->layout);
    free(s->devices);
    sl_test_rmtree(s->dir);
}

/* Advance the simulated clock to wall time @ms and tick. */
static void sim_at(sim *s, int64_t ms)
{
    int64_t now = s->clock.wall_ns / 1000000, next;
    if (ms > now)
        sl_clock_manual_advance(&s->clock, (ms - now) * 1000000);
    assert_int_equal(sl_engine_tick(s->engine, &next), SL_OK);
}

/* Device @i's update for (round, version): a deterministic sparse update. */
static void make_update(const sim *s, size_t i, int64_t round_id, int64_t version, float scale,
                        void **frame, size_t *len, uint8_t *sha)
{
    sl_test_make_update(s->layout, i, round_id, version, scale, frame, len, sha);
}

static sl_checkin_info info = {100, "avx2", "", 0, 0, 0};

static sl_task_status status(sim *s)
{
    sl_task_status st;
    assert_int_equal(sl_engine_task_status(s->engine, s->task, &st), SL_OK);
    return st;
}

/* Every device checks in; the window closes; the selected ones are returned (indices). */
static size_t select_round(sim *s, size_t *chosen)
{
    sl_task_status st = status(s);
    sl_checkin_result r;
    size_t n = 0;
    assert_true(st.round_open);
    assert_int_equal(st.round.state, SL_ROUND_SELECTING);
    for (size_t i = 0; i < s->ndevices; i++) {
        assert_int_equal(sl_engine_checkin(s->engine, s->task, s->devices[i], &info, &r), SL_OK);
        assert_false(r.selected); /* the draw happens when the window closes */
        assert_true(r.retry_after_ms >= 1000);
    }
    sim_at(s, st.round.select_deadline_ms);
    st = status(s);
    if (!st.round_open || st.round.round_no != status(s).round.round_no)
        return 0;
    for (size_t i = 0; i < s->ndevices && st.round.state == SL_ROUND_TRAINING; i++) {
        assert_int_equal(sl_engine_checkin(s->engine, s->task, s->devices[i], &info, &r), SL_OK);
        if (r.selected) {
            assert_int_equal(r.round_id, st.round.id);
            assert_int_equal(r.model_version, st.model_version);
            assert_int_equal(r.report_deadline_ms, st.round.report_deadline_ms);
            chosen[n++] = i;
        } else {
            assert_true(r.retry_after_ms > 0);
        }
    }
    return n;
}

/* Selected device @i uploads its update for the open round; returns the outcome. */
static sl_accept_result upload(sim *s, size_t i, float scale)
{
    sl_task_status st = status(s);
    sl_accept_result res;
    uint8_t sha[32];
    void *frame;
    size_t len;
    make_update(s, i, st.round.id, st.model_version, scale, &frame, &len, sha);
    assert_int_equal(sl_engine_accept(s->engine, st.round.id, s->devices[i], frame, len,
                                      (uint32_t)(50 + i % 7), sha, &res),
                     SL_OK);
    free(frame);
    return res;
}

static void model_sha(sim *s, int64_t version, uint8_t *sha)
{
    sl_model_record m;
    assert_int_equal(sl_store_get_model(s->store, s->task, version, &m), SL_OK);
    memcpy(sha, m.sha256, 32);
    sl_store_model_free(&m);
}

#define CONFIG(extra)                                                         \
    "{\"name\":\"fmnist\",\"target\":10,\"quorum\":6,\"over_selection\":1.3," \
    "\"selection_window_ms\":2000,\"report_deadline_ms\":10000,\"rounds\":50" extra "}"

/* A round's participant rows, and whether @device is among them. */
typedef struct part_count {
    int64_t device;
    size_t rows;
    int found;
} part_count;

static int count_part(void *ctx, const sl_participant_record *p)
{
    part_count *c = ctx;
    c->rows++;
    c->found |= p->device_id == c->device;
    return 0;
}

static void test_round_lifecycle(void **state)
{
    sim s;
    size_t chosen[64], n;
    sl_task_status st;
    sl_accept_result res;
    sl_round_stats stats;
    (void)state;
    sim_init(&s, "engine_life", 30, CONFIG(""));
    st = status(&s);
    assert_int_equal(st.model_version, 1);
    assert_int_equal(st.round.round_no, 1);
    n = select_round(&s, chosen);
    assert_int_equal(n, 13); /* ceil(10 * 1.3) */
    /* a device that was not selected */
    for (size_t i = 0; i < s.ndevices; i++) {
        int picked = 0;
        for (size_t j = 0; j < n; j++)
            picked |= chosen[j] == i;
        if (!picked) {
            res = upload(&s, i, 1.0f);
            assert_false(res.accepted);
            assert_int_equal(res.reason, SL_REJECT_NOT_SELECTED);
            break;
        }
    }
    /* ten reports close the round early; the eleventh is late */
    for (size_t j = 0; j < 10; j++) {
        res = upload(&s, chosen[j], 1.0f);
        assert_true(res.accepted);
        if (j == 0) { /* a retry is the same acknowledgement */
            sl_accept_result again = upload(&s, chosen[0], 1.0f);
            assert_true(again.accepted);
            assert_int_equal(again.receipt.duplicate, 1);
            assert_int_equal(again.receipt.update_id, res.receipt.update_id);
        }
    }
    st = status(&s);
    assert_int_equal(st.model_version, 2);
    assert_int_equal(st.round.round_no, 2); /* the next round opened */
    assert_int_equal(st.round.state, SL_ROUND_SELECTING);
    {
        sl_round_record r1;
        uint8_t sha[32];
        void *frame;
        size_t len;
        assert_int_equal(sl_store_get_round(s.store, st.round.id - 1, &r1), SL_OK);
        assert_int_equal(r1.state, SL_ROUND_CLOSED);
        assert_int_equal(r1.reported, 10);
        assert_int_equal(r1.dropped, 3);
        make_update(&s, chosen[11], r1.id, 1, 1.0f, &frame, &len, sha);
        assert_int_equal(
            sl_engine_accept(s.engine, r1.id, s.devices[chosen[11]], frame, len, 5, sha, &res),
            SL_OK);
        assert_false(res.accepted);
        assert_int_equal(res.reason, SL_REJECT_LATE);
        free(frame);
        /* a retry of an update the closed round counted (its answer was lost) is not late */
        make_update(&s, chosen[0], r1.id, 1, 1.0f, &frame, &len, sha);
        assert_int_equal(
            sl_engine_accept(s.engine, r1.id, s.devices[chosen[0]], frame, len, 5, sha, &res),
            SL_OK);
        assert_true(res.accepted);
        assert_int_equal(res.receipt.duplicate, 1);
        free(frame);
        {
            /* a device the round never selected (it opened an upload while the round trained)
             * gets "late" too, but does not become one of the round's participants nor count
             * as late: what it sends changes nothing */
            size_t outsider = s.ndevices, rows = 0;
            part_count pc = {0};
            for (size_t i = 0; i < s.ndevices && outsider == s.ndevices; i++) {
                int picked = 0;
                for (size_t j = 0; j < n; j++)
                    picked |= chosen[j] == i;
                if (!picked)
                    outsider = i;
            }
            assert_true(outsider < s.ndevices);
            make_update(&s, outsider, r1.id, 1, 1.0f, &frame, &len, sha);
            assert_int_equal(
                sl_engine_accept(s.engine, r1.id, s.devices[outsider], frame, len, 5, sha, &res),
                SL_OK);
            free(frame);
            assert_false(res.accepted);
            assert_int_equal(res.reason, SL_REJECT_LATE);
            pc.device = s.devices[outsider];
            assert_int_equal(sl_store_list_participants(s.store, r1.id, count_part, &pc), SL_OK);
            rows = pc.rows;
            assert_int_equal(rows, n);
            assert_int_equal(pc.found, 0);
        }
        assert_int_equal(sl_engine_round_stats(s.engine, r1.id, &stats), SL_OK);
        assert_int_equal(stats.round.late, 1);
        assert_true(stats.compression_vs_dense > 10);
    }
    sim_free(&s);
}

/* The updates of (device index, round id) pairs into a reference aggregate, in device-id order
 * within each round (as the engine reads them). */
typedef struct sent_upd {
    size_t i;
    int64_t round_id;
} sent_upd;

static int by_device(const void *a, const void *b)
{
    const sent_upd *x = a, *y = b;
    if (x->round_id != y->round_id)
        return x->round_id < y->round_id ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The stored version @base + 1 is, bit for bit, version @base plus @lr times the FedAvg of the
 * @n updates @sent (made on @base; sorted here into the engine's order), under the senders'
 * mean at weight @weight (0: the plain mean), leaving out the coordinates set in @skip (NULL:
 * none); @carried (NULL, or params bits) receives what the updates sent. */
static int reference_fresh(sim *s, const sl_task_config *cfg, sent_upd *sent, size_t n,
                           int64_t base, double lr, double weight, const uint8_t *skip,
                           uint8_t *carried)
{
    int equal;
    size_t d = (size_t)sl_layout_params(s->layout);
    sl_task_config c = *cfg;
    sl_model_record m;
    sl__agg *agg;
    uint32_t count;
    double *delta = malloc(d * sizeof *delta);
    float *ref = malloc(d * sizeof *ref), *got = malloc(d * sizeof *got);
    qsort(sent, n, sizeof sent[0], by_device);
    assert_int_equal(sl__agg_begin(&c, s->layout, &agg), SL_OK);
    for (size_t k = 0; k < n; k++) {
        void *frame;
        size_t len;
        uint8_t sha[32];
        make_update(s, sent[k].i, sent[k].round_id, base, 1.0f, &frame, &len, sha);
        assert_int_equal(sl__agg_add(agg, frame, len, (uint32_t)(50 + sent[k].i % 7)), SL_OK);
        free(frame);
    }
    assert_int_equal(sl__agg_sender_mean(agg, weight), SL_OK);
    assert_int_equal(sl__agg_sender_mean_skip(agg, skip), SL_OK);
    assert_int_equal(sl__agg_finish(agg, 0, delta, &count), SL_OK);
    assert_int_equal(count, n);
    if (carried != NULL)
        assert_int_equal(sl__agg_carried(agg, carried), SL_OK);
    sl__agg_free(agg);
    assert_int_equal(sl_store_get_model(s->store, s->task, base, &m), SL_OK);
    assert_int_equal(sl_frame_decode_model(s->layout, m.frame, m.frame_len, NULL, 0, ref), SL_OK);
    sl_store_model_free(&m);
    c.server_lr = lr;
    assert_int_equal(sl_server_apply(&c, delta, d, ref, NULL), SL_OK);
    assert_int_equal(sl_store_get_model(s->store, s->task, base + 1, &m), SL_OK);
    assert_int_equal(sl_frame_decode_model(s->layout, m.frame, m.frame_len, NULL, 0, got), SL_OK);
    sl_store_model_free(&m);
    equal = memcmp(got, ref, d * sizeof *ref) == 0;
    free(delta);
    free(ref);
    free(got);
    return equal;
}

static int reference_equal(sim *s, const sl_task_config *cfg, sent_upd *sent, size_t n,
                           int64_t base, double lr, double weight)
{
    return reference_fresh(s, cfg, sent, n, base, lr, weight, NULL, NULL);
}

static void check_reference(sim *s, const sl_task_config *cfg, sent_upd *sent, size_t n,
                            int64_t base, double lr, double weight)
{
    if (!reference_equal(s, cfg, sent, n, base, lr, weight))
        fail_msg("version %lld differs from its reference aggregate", (long long)base + 1);
}

/* The acknowledged updates @n made by the devices @dev (one entry per update) over the
 * distinct devices among them: the participations that weigh the senders' mean. */
static double mean_participations(const size_t *dev, size_t n)
{
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && dev[j] != dev[i])
            j++;
        distinct += j == i;
    }
    return distinct ? (double)n / (double)distinct : 1;
}

/* An abandoned round's acknowledged updates are aggregated with the next
 * round that closes on the same model version; a round the operator aborts
 * is not carried. Checked bit for bit against a reference aggregate. */
static void test_abandoned_updates_carried(void **state)
{
    static const char cfg_json[] = CONFIG("");
    sim s;
    size_t chosen[64], n, nsent = 0, acked[32], nacked = 0;
    sent_upd sent[32];
    sl_task_status st;
    sl_round_record r1, r2, r3;
    sl_task_config cfg;
    char err[256];
    (void)state;
    sim_init(&s, "engine_carry", 30, cfg_json);
    /* round 1: three of the quorum of six report, then the deadline */
    n = select_round(&s, chosen);
    assert_true(n >= 6);
    st = status(&s);
    r1.id = st.round.id;
    for (size_t j = 0; j < 3; j++) {
        assert_true(upload(&s, chosen[j], 1.0f).accepted);
        sent[nsent++] = (sent_upd){chosen[j], r1.id};
        acked[nacked++] = chosen[j];
    }
    sim_at(&s, st.round.report_deadline_ms);
    assert_int_equal(sl_store_get_round(s.store, r1.id, &r1), SL_OK);
    assert_int_equal(r1.state, SL_ROUND_ABANDONED);
    assert_non_null(strstr(r1.error, "its 3 acknowledged updates are carried into the next round"));
    assert_int_equal(status(&s).model_version, 1);
    /* round 2: two report, then the operator aborts it: not carried */
    n = select_round(&s, chosen);
    assert_true(n >= 2);
    r2.id = status(&s).round.id;
    for (size_t j = 0; j < 2; j++) {
        assert_true(upload(&s, chosen[j], 2.0f).accepted);
        acked[nacked++] = chosen[j]; /* acknowledged: a participation, though not aggregated */
    }
    assert_int_equal(sl_engine_abort_round(s.engine, r2.id), SL_OK);
    assert_int_equal(sl_store_get_round(s.store, r2.id, &r2), SL_OK);
    assert_int_equal(r2.state, SL_ROUND_ABANDONED);
    assert_string_equal(r2.error, "aborted by the operator");
    /* round 3: ten report and close it */
    n = select_round(&s, chosen);
    assert_true(n >= 10);
    r3.id = status(&s).round.id;
    for (size_t j = 0; j < 10; j++) {
        assert_true(upload(&s, chosen[j], 1.0f).accepted);
        sent[nsent++] = (sent_upd){chosen[j], r3.id};
        acked[nacked++] = chosen[j];
    }
    st = status(&s);
    assert_int_equal(st.model_version, 2);
    assert_int_equal(sl_store_get_round(s.store, r3.id, &r3), SL_OK);
    assert_int_equal(r3.state, SL_ROUND_CLOSED);
    assert_int_equal(r3.reported, 10); /* its own reports */

    /* the reference: model 1 + FedAvg of round 1's three and round 3's ten, at the first
     * rate, under the default senders' mean at the fifteen acknowledged updates' weight */
    assert_int_equal(sl_task_config_parse(cfg_json, strlen(cfg_json), &cfg, err, sizeof err),
                     SL_OK);
    assert_true(sl_sender_mean_length(&cfg) > 0);
    check_reference(&s, &cfg, sent, nsent, 1, sl_server_lr_at(&cfg, 1),
                    sl_sender_mean_weight(&cfg, mean_participations(acked, nacked), r3.round_no));
    sim_free(&s);
}

/* A server learning rate ramp (#23): the k-th aggregate moves the model by the rate of its
 * version (3, then 2, then 1 from the third on), the same bits as the reference's. */
static void test_server_lr_ramp(void **state)
{
    static const char cfg_json[] = CONFIG(",\"error_feedback\":\"residual\","
                                          "\"server_lr_boost\":3,\"server_lr_ramp\":2");
    static const double want_lr[] = {3.0, 2.0, 1.0};
    sim s;
    sl_task_config cfg;
    char err[256];
    (void)state;
    sim_init(&s, "engine_ramp", 12, cfg_json);
    assert_int_equal(sl_task_config_parse(cfg_json, strlen(cfg_json), &cfg, err, sizeof err),
                     SL_OK);
    for (int k = 0; k < 3; k++) {
        size_t chosen[64], n = select_round(&s, chosen);
        sent_upd idx[10];
        int64_t round_id = status(&s).round.id, base = status(&s).model_version;
        assert_int_equal(base, k + 1);
        assert_true(n >= 10);
        for (size_t j = 0; j < 10; j++) {
            assert_true(upload(&s, chosen[j], 1.0f).accepted);
            idx[j] = (sent_upd){chosen[j], round_id};
        }
        assert_int_equal(status(&s).model_version, base + 1);
        assert_float_equal(sl_server_lr_at(&cfg, base), want_lr[k], 1e-15);
        /* the reference: the base model plus want_lr[k] times FedAvg of the ten */
        check_reference(&s, &cfg, idx, 10, base, want_lr[k], 0); /* a ramp: no senders' mean */
    }
    sim_free(&s);
}

/* The senders' mean (#23): an aggregate divides each coordinate by (1 - a) W + a S_j, a faded
 * by the acknowledged updates the task's devices have made on average (1 - (p - 1) / 2 under
 * sender_mean_rounds 2), the same bits as the reference's. Ten of 30 devices report to each
 * round, so p falls behind the round's number and the weight by the version alone is another
 * model (checked), as is the weight by participations alone (the task's default
 * sender_mean_share counts them times the share of rounds, checked too); a restart before the last
 * upload of the third round changes nothing; the reference for a = 1 differs from the plain mean's
 * (the check can fail). sender_mean_fleet runs @rounds such rounds of ten on a fleet of @fleet
 * (the k-th reporting from the k * @rotate-th selected device on) and counts the checks that
 * could tell the weight from another (test_sender_mean with 30 devices
 * and sender_mean_rounds 2; test_sender_mean_partial). */
static void sender_mean_fleet(const char *name, size_t fleet, size_t rotate, const char *cfg_json,
                              int rounds, int *behind, int *shared, int *freshened, int *shortened,
                              int *held_back)
{
    sim s;
    sl_task_config cfg, plain, whole;
    size_t acked[256], nacked = 0, prev[10] = {0};
    uint8_t *carried = NULL, *prev_carried = NULL;
    char err[256];
    sim_init(&s, name, fleet, cfg_json);
    assert_int_equal(sl_task_config_parse(cfg_json, strlen(cfg_json), &cfg, err, sizeof err),
                     SL_OK);
    assert_int_equal(cfg.server_lr_ramp, 0);
    whole = cfg; /* the fade by local epochs, not shortened where devices sit out rounds */
    whole.sender_mean_partial = 0;
    for (int k = 0; k < rounds; k++) {
        size_t chosen[64], n = select_round(&s, chosen);
        sent_upd idx[10];
        int64_t round_id = status(&s).round.id, base = status(&s).model_version;
        int64_t round_no = status(&s).round.round_no;
        double p, w, by_version, by_participations, by_whole;
        assert_int_equal(base, k + 1);
        assert_true(n >= 10);
        for (size_t j = 0; j < 10; j++) {
            if (k == 2 && j == 9) {
                sim_restart(&s); /* the restarted engine counts the same participations */
                /* its first tick (at the open) read the history of the rounds before this
                 * one, outside the lock, before the close needs it */
                assert_int_equal(s.engine->history_reads, 1);
                assert_int_equal(status(&s).round.id, round_id);
                assert_true(status(&s).round_open);
            }
            size_t c = chosen[(j + (size_t)k * rotate) % n];
            assert_true(upload(&s, c, 1.0f).accepted);
            idx[j] = (sent_upd){c, round_id};
            acked[nacked++] = c;
        }
        assert_int_equal(status(&s).model_version, base + 1);
        p = mean_participations(acked, nacked);
        assert_int_equal(round_no, k + 1);
        w = sl_sender_mean_weight(&cfg, p, round_no);
        { /* sender_mean_fresh (the default): after the first aggregate, one that takes a device
             the last did not leaves what the last carried out of the senders' mean */
            const uint8_t *skip = NULL, *missed = NULL;
            size_t d = (size_t)sl_layout_params(s.layout);
            assert_int_equal(cfg.sender_mean_fresh, 1);
            if (prev_carried != NULL && w > 0)
                for (size_t j = 0; j < 10 && missed == NULL; j++) {
                    size_t i = 0;
                    while (i < 10 && prev[i] != idx[j].i)
                        i++;
                    if (i == 10)
                        missed = prev_carried; /* a device the last aggregate did not take */
                }
            /* under sender_mean_partial, only where the fade is longer than its floor */
            if (sl_sender_mean_fresh_at(&cfg, p, round_no))
                skip = missed;
            else if (missed != NULL) { /* the rule held back: leaving it out is another model */
                (*held_back)++;
                assert_false(reference_fresh(&s, &cfg, idx, 10, base, 1.0, w, missed, NULL));
            }
            carried = malloc((d + 7) / 8);
            if (!reference_fresh(&s, &cfg, idx, 10, base, 1.0, w, skip, carried))
                fail_msg("version %lld differs from its reference aggregate", (long long)base + 1);
            /* where devices sit out rounds, the whole fade by local epochs is another model */
            by_whole = sl_sender_mean_weight(&whole, p, round_no);
            if (by_whole != w) {
                (*shortened)++;
                assert_false(reference_fresh(&s, &cfg, idx, 10, base, 1.0, by_whole, skip, NULL));
            }
            if (skip != NULL) { /* and without it, another model: the check can fail */
                (*freshened)++;
                assert_false(reference_equal(&s, &cfg, idx, 10, base, 1.0, w));
            }
            free(prev_carried);
            prev_carried = carried;
            for (size_t j = 0; j < 10; j++)
                prev[j] = idx[j].i;
        }
        /* the device history is read once by an engine (its first aggregate, after the start
         * or the restart); later rounds add their reporters to what it counted */
        assert_int_equal(s.engine->history_reads, 1);
        if (k == 0) { /* the first: a = 1, and the plain mean is another model */
            assert_float_equal(w, 1.0, 0);
            plain = cfg;
            plain.sender_mean_rounds = plain.sender_mean_epochs = plain.sender_mean_partial = 0;
            assert_false(reference_equal(&s, &plain, idx, 10, base, 1.0, 0));
        }
        by_version = sl_sender_mean_at(&cfg, (double)base);
        if (p < (double)base && w != by_version) { /* not the weight of a fade by version */
            (*behind)++;
            assert_false(reference_equal(&s, &cfg, idx, 10, base, 1.0, by_version));
        }
        /* nor, where the devices report to fewer rounds than the task ran, by participations
         * alone (the fade before sender_mean_share) */
        by_participations = sl_sender_mean_at(&cfg, p);
        if (p < (double)round_no && w != by_participations) {
            (*shared)++;
            assert_false(reference_equal(&s, &cfg, idx, 10, base, 1.0, by_participations));
        }
    }
    free(prev_carried);
    sim_free(&s);
}

static void test_sender_mean(void **state)
{
    static const char cfg_json[] = CONFIG(",\"error_feedback\":\"residual\","
                                          "\"sender_mean_rounds\":2");
    int behind = 0, shared = 0, freshened = 0, shortened = 0, held_back = 0;
    (void)state;
    sender_mean_fleet("engine_sender_mean", 30, 0, cfg_json, 4, &behind, &shared, &freshened,
                      &shortened, &held_back);
    assert_int_equal(held_back, 0); /* without sender_mean_partial the rule always applies */
    assert_true(behind > 0);
    assert_true(shared > 0);
    assert_true(freshened > 0);     /* 10 of 30 a round: the restart's round among them */
    assert_int_equal(shortened, 0); /* sender_mean_partial is the fade by local epochs' */
}

/* sender_mean_partial (#23, the default with sender_mean_epochs): ten of twelve devices report
 * to each round (two others left out each time), so the share of rounds the average device reports
 * to falls below 1 from the second round, the fade of 60 local epochs (60 updates at the task's one
 * epoch) lasts share^5 of that, counted times the share, and each version is its reference
 * aggregate's bits at that weight (across a restart), while the whole fade's weight is another
 * model (checked); sender_mean_fresh's rule applies there (a fade of 20-40 participations). On
 * thirty where ten report, the fade is at its floor and the rule is held back (checked: the
 * model differs from the one leaving the last support out). */
static void test_sender_mean_partial(void **state)
{
    static const char cfg_json[] = CONFIG(",\"local_epochs\":1,\"density\":0.1");
    sl_task_config cfg;
    char err[256];
    int behind = 0, shared = 0, freshened = 0, shortened = 0, held_back = 0;
    (void)state;
    assert_int_equal(sl_task_config_parse(cfg_json, strlen(cfg_json), &cfg, err, sizeof err),
                     SL_OK);
    assert_int_equal(cfg.sender_mean_epochs, SL_SENDER_MEAN_EPOCHS_DEFAULT);
    assert_int_equal(cfg.sender_mean_partial, SL_SENDER_MEAN_PARTIAL_DEFAULT);
    assert_int_equal(cfg.sender_mean_fresh, 1);
    sender_mean_fleet("engine_sender_mean_partial", 12, 2, cfg_json, 4, &behind, &shared,
                      &freshened, &shortened, &held_back);
    assert_true(shortened >= 2); /* every aggregate after the first */
    assert_true(freshened > 0);  /* a share near 0.83: a fade of 20-40, longer than 6 */
    assert_int_equal(held_back, 0);
    /* ten of thirty: a share falling towards 0.4, the fade at its floor of 6 once it is below
     * 0.63, and sender_mean_fresh's rule held back there where a device missed the last
     * aggregate (leaving it out is another model) */
    behind = shared = freshened = shortened = 0;
    sender_mean_fleet("engine_sender_mean_floor", 30, 0, cfg_json, 4, &behind, &shared, &freshened,
                      &shortened, &held_back);
    assert_true(held_back > 0);
}

/* sender_mean_fresh where every device reports to every round: no aggregate takes a device the
 * one before did not, so nothing is left out (the senders' mean as without the rule, bit for
 * bit, across a restart); each version's stored state names what its aggregate carried and its
 * devices. */
static void test_sender_mean_fresh_full(void **state)
{
    static const char cfg_json[] = "{\"name\":\"fmnist\",\"target\":10,\"quorum\":10,"
                                   "\"over_selection\":1,\"selection_window_ms\":2000,"
                                   "\"report_deadline_ms\":10000,\"rounds\":50,"
                                   "\"local_epochs\":10}";
    sim s;
    sl_task_config cfg;
    size_t acked[64], nacked = 0;
    uint8_t *prev_carried = NULL;
    char err[256];
    (void)state;
    sim_init(&s, "engine_fresh_full", 10, cfg_json);
    assert_int_equal(sl_task_config_parse(cfg_json, strlen(cfg_json), &cfg, err, sizeof err),
                     SL_OK);
    assert_int_equal(cfg.sender_mean_fresh, 1);
    assert_true(sl_sender_mean_length(&cfg) == 6.0); /* 60 epochs of 10 */
    for (int k = 0; k < 3; k++) {
        size_t chosen[64], n = select_round(&s, chosen), d = (size_t)sl_layout_params(s.layout);
        sent_upd idx[10];
        int64_t round_id = status(&s).round.id, base = status(&s).model_version;
        uint8_t *carried = malloc((d + 7) / 8);
        sl_model_record m;
        sl_server_state st = {0};
        double w;
        assert_int_equal(n, 10);
        if (k == 2)
            sim_restart(&s); /* the held version's state comes from the store */
        for (size_t j = 0; j < 10; j++) {
            assert_true(upload(&s, chosen[j], 1.0f).accepted);
            idx[j] = (sent_upd){chosen[j], round_id};
            acked[nacked++] = chosen[j];
        }
        assert_int_equal(status(&s).model_version, base + 1);
        w = sl_sender_mean_weight(&cfg, mean_participations(acked, nacked),
                                  status(&s).round.round_no - 1);
        assert_true(w > 0);
        if (!reference_fresh(&s, &cfg, idx, 10, base, 1.0, w, NULL, carried))
            fail_msg("version %lld differs from its reference aggregate", (long long)base + 1);
        if (prev_carried != NULL) /* leaving the last support out would be another model */
            assert_false(reference_fresh(&s, &cfg, idx, 10, base, 1.0, w, prev_carried, NULL));
        assert_int_equal(sl_store_get_model(s.store, s.task, base + 1, &m), SL_OK);
        assert_non_null(m.opt_state);
        assert_int_equal(sl_server_state_decode(m.opt_state, m.opt_state_len, d, &st), SL_OK);
        sl_store_model_free(&m);
        assert_non_null(st.carried);
        assert_memory_equal(st.carried, carried, d / 8);
        assert_int_equal(st.ndevices, 10);
        for (size_t j = 0; j < 10; j++)
            assert_int_equal(st.devices[j], s.devices[j]); /* every device, ascending */
        sl_server_state_free(&st);
        free(prev_carried);
        prev_carried = carried;
    }
    free(prev_carried);
    sim_free(&s);
}

/* An assignment's participation (the density warm-up's step) is the number of this task's
 * earlier rounds that selected the device: 0 in its first round, counted from the store, so
 * a restarted engine hands out the same numbers. */
static void test_assignment_participation(void **state)
{
    sim s;
    uint32_t before[64] = {0};
    int checked = 0;
    (void)state;
    sim_init(&s, "engine_participation", 30, CONFIG(",\"error_feedback\":\"residual\""));
    for (int k = 0; k < 4; k++) {
        size_t chosen[64], n = select_round(&s, chosen);
        assert_true(n >= 10);
        if (k == 2)
            sim_restart(&s);
        for (size_t j = 0; j < n; j++) {
            sl_checkin_result r;
            assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[j]], &info, &r),
                             SL_OK);
            assert_true(r.selected);
            assert_int_equal(r.participation, before[chosen[j]]);
            checked += before[chosen[j]] > 0;
        }
        for (size_t j = 0; j < 10; j++)
            assert_true(upload(&s, chosen[j], 1.0f).accepted);
        assert_int_equal(status(&s).model_version, k + 2);
        for (size_t j = 0; j < n; j++)
            before[chosen[j]]++;
    }
    assert_true(checked > 0); /* some devices came back after a round that selected them */
    sim_free(&s);
}

/* The store fails to count a device's earlier rounds at its check-in: the check-in has already
 * changed the engine's state (the device is a participant), so it still succeeds, with the
 * assignment's participation 0 (the warm-up's first density), and the round goes on. */
static int failing_device_rounds(sl_store *st, int64_t task_id, int64_t device_id,
                                 int64_t before_round_no, uint32_t *out)
{
    (void)st, (void)task_id, (void)device_id, (void)before_round_no;
    *out = 7; /* whatever a failing backend left: the engine must not hand it out */
    return SL_EIO;
}

static void test_participation_read_fails(void **state)
{
    sim s;
    sl__store_ops broken;
    const sl__store_ops *real;
    size_t chosen[64], n;
    uint32_t before[64] = {0};
    int came_back = 0;
    sl_checkin_result r;
    (void)state;
    sim_init(&s, "engine_participation_fails", 12, CONFIG(",\"error_feedback\":\"residual\""));
    n = select_round(&s, chosen); /* a first round */
    for (size_t j = 0; j < n; j++)
        before[chosen[j]] = 1;
    for (size_t j = 0; j < 10; j++)
        assert_true(upload(&s, chosen[j], 1.0f).accepted);
    assert_int_equal(status(&s).model_version, 2);
    real = ((sl__store_head *)(void *)s.store)->ops;
    broken = *real;
    broken.device_rounds = failing_device_rounds;
    ((sl__store_head *)(void *)s.store)->ops = &broken;
    n = select_round(&s, chosen); /* every selected device's check-in succeeds */
    assert_true(n >= 10);
    for (size_t j = 0; j < n; j++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[j]], &info, &r),
                         SL_OK);
        assert_true(r.selected);
        assert_int_equal(r.participation, 0);
        came_back += before[chosen[j]] > 0;
    }
    assert_true(came_back > 0); /* with the read working, some would have answered 1 */
    ((sl__store_head *)(void *)s.store)->ops = real;
    /* the read back, the same check-ins answer the store's count; the round closes as usual */
    for (size_t j = 0; j < n; j++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[j]], &info, &r),
                         SL_OK);
        assert_int_equal(r.participation, before[chosen[j]]);
    }
    for (size_t j = 0; j < 10; j++)
        assert_true(upload(&s, chosen[j], 1.0f).accepted);
    assert_int_equal(status(&s).model_version, 3);
    sim_free(&s);
}

/* A task stored before the senders' mean existed (its canonical JSON lacks sender_mean_rounds,
 * sender_mean_epochs and sender_mean_fresh) keeps aggregating as it did after an upgrade: not
 * today's default. */
static void test_stored_config_keeps_its_rule(void **state)
{
    sim s;
    sqlite3 *db;
    char path[700], *sqlerr = NULL;
    sl_task_status st;
    (void)state;
    sim_init(&s, "engine_stored_cfg", 12, CONFIG(""));
    st = status(&s);
    /* a new task: the senders' mean, faded by local epochs, fresh */
    assert_int_equal(st.cfg.sender_mean_rounds, 0);
    assert_int_equal(st.cfg.sender_mean_epochs, SL_SENDER_MEAN_EPOCHS_DEFAULT);
    assert_int_equal(st.cfg.sender_mean_fresh, 1);
    assert_int_equal(st.cfg.sender_mean_partial, SL_SENDER_MEAN_PARTIAL_DEFAULT);
    sl_engine_close(s.engine);
    sl_store_close(s.store);
    snprintf(path, sizeof path, "%s/store.db", s.dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    {
        static const char *const gone[] = {
            "\"sender_mean_rounds\": 0",   "\"sender_mean_rounds\":0",
            "\"sender_mean_epochs\": 60",  "\"sender_mean_epochs\":60",
            "\"sender_mean_fresh\": true", "\"sender_mean_fresh\":true",
            "\"sender_mean_partial\": 5",  "\"sender_mean_partial\":5"};
        for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
            char sql[256];
            snprintf(sql, sizeof sql,
                     "UPDATE tasks SET config = replace(replace(config, '%s, ', ''), '%s,', '')",
                     gone[i], gone[i]);
            if (sqlite3_exec(db, sql, NULL, NULL, &sqlerr) != SQLITE_OK)
                fail_msg("%s", sqlerr);
        }
    }
    {
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT count(*) FROM tasks WHERE instr(config, "
                                            "'sender_mean_rounds') = 0 AND instr(config, "
                                            "'sender_mean_epochs') = 0 AND instr(config, "
                                            "'sender_mean_fresh') = 0 AND instr(config, "
                                            "'sender_mean_partial') = 0 AND instr(config, "
                                            "'sender_mean') > 0",
                                            -1, &q, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(q, 0), 1); /* the key is gone, the rest is there */
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
    sim_open_engine(&s);
    st = status(&s);
    assert_int_equal(st.cfg.sender_mean_rounds, 0);
    assert_int_equal(st.cfg.sender_mean_epochs, 0);
    assert_int_equal(st.cfg.sender_mean_fresh, 0);
    assert_int_equal(st.cfg.sender_mean_partial, 0);
    assert_int_equal(st.cfg.server_lr_ramp, 0);
    assert_float_equal(sl_sender_mean_at(&st.cfg, 1), 0.0, 0);
    sim_free(&s);
}

typedef struct part_seen {
    const sim *s;
    int state[64];
    char reason[64][128];
} part_seen;

static int note_part(void *ctx, const sl_participant_record *p)
{
    part_seen *seen = ctx;
    for (size_t i = 0; i < seen->s->ndevices && i < 64; i++)
        if (seen->s->devices[i] == p->device_id) {
            seen->state[i] = (int)p->state;
            snprintf(seen->reason[i], sizeof seen->reason[i], "%s", p->reason);
        }
    return 0;
}

static void test_rejections(void **state)
{
    sim s;
    size_t chosen[64], n;
    sl_task_status st;
    sl_accept_result res;
    uint8_t sha[32];
    void *frame;
    size_t len;
    (void)state;
    sim_init(&s, "engine_reject", 20, CONFIG(",\"max_update_norm\":5"));
    n = select_round(&s, chosen);
    assert_true(n >= 10);
    st = status(&s);
    /* wrong base version */
    make_update(&s, chosen[0], st.round.id, 7, 1.0f, &frame, &len, sha);
    assert_int_equal(
        sl_engine_accept(s.engine, st.round.id, s.devices[chosen[0]], frame, len, 1, sha, &res),
        SL_OK);
    assert_int_equal(res.reason, SL_REJECT_LAYOUT);
    free(frame);
    /* malformed: a truncated frame */
    make_update(&s, chosen[0], st.round.id, 1, 1.0f, &frame, &len, sha);
    assert_int_equal(
        sl_engine_accept(s.engine, st.round.id, s.devices[chosen[0]], frame, len - 9, 1, sha, &res),
        SL_OK);
    assert_int_equal(res.reason, SL_REJECT_MALFORMED);
    free(frame);
    /* the norm bound */
    res = upload(&s, chosen[1], 1000.0f);
    assert_int_equal(res.reason, SL_REJECT_NORM);
    /* unknown round */
    make_update(&s, chosen[2], 9999, 1, 1.0f, &frame, &len, sha);
    assert_int_equal(
        sl_engine_accept(s.engine, 9999, s.devices[chosen[2]], frame, len, 1, sha, &res), SL_OK);
    assert_int_equal(res.reason, SL_REJECT_UNKNOWN_ROUND);
    free(frame);
    /* a different update from the same device: refused, the first one stands */
    res = upload(&s, chosen[3], 1.0f);
    assert_true(res.accepted);
    res = upload(&s, chosen[3], 2.0f);
    assert_false(res.accepted);
    assert_int_equal(res.reason, SL_REJECT_DUPLICATE_CONFLICT);
    {
        sl_round_stats stats;
        assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &stats), SL_OK);
        assert_int_equal(stats.round.reported, 1);
        assert_int_equal(stats.rejected_by_reason[SL_REJECT_LAYOUT], 1);
        assert_int_equal(stats.rejected_by_reason[SL_REJECT_MALFORMED], 1);
        assert_int_equal(stats.rejected_by_reason[SL_REJECT_NORM], 1);
        assert_int_equal(stats.rejected_by_reason[SL_REJECT_DUPLICATE_CONFLICT], 1);
    }
    { /* the participants' records: the last reason for each refused device */
        part_seen seen = {&s, {0}, {{0}}};
        assert_int_equal(sl_store_list_participants(s.store, st.round.id, note_part, &seen), SL_OK);
        assert_int_equal(seen.state[chosen[0]], SL_PART_REJECTED);
        assert_string_equal(seen.reason[chosen[0]], "malformed");
        assert_int_equal(seen.state[chosen[1]], SL_PART_REJECTED);
        assert_string_equal(seen.reason[chosen[1]], "norm");
        assert_int_not_equal(seen.state[chosen[3]], SL_PART_REJECTED); /* its first one stands */
        assert_int_equal(seen.state[chosen[4]], SL_PART_SELECTED);
    }
    sim_free(&s);

    /* the fixed-point bound of a task that does not clip (values below 2^16): refused at the
     * upload, reason "range", nothing stored; the same values under clipping are accepted */
    for (int clipped = 0; clipped < 2; clipped++) {
        sim_init(&s, "engine_range", 20, clipped ? CONFIG(",\"clip_norm\":10") : CONFIG(""));
        n = select_round(&s, chosen);
        assert_true(n >= 3);
        st = status(&s);
        res = upload(&s, chosen[0], 300000.0f); /* values up to 150,000 */
        if (clipped) {
            assert_true(res.accepted);
        } else {
            sl_round_stats stats;
            part_seen seen = {&s, {0}, {{0}}};
            assert_false(res.accepted);
            assert_int_equal(res.reason, SL_REJECT_RANGE);
            assert_string_equal(sl_reject_reason_name(res.reason), "range");
            assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &stats), SL_OK);
            assert_int_equal(stats.round.reported, 0);
            assert_int_equal(stats.rejected_by_reason[SL_REJECT_RANGE], 1);
            assert_int_equal(sl_store_list_participants(s.store, st.round.id, note_part, &seen),
                             SL_OK);
            assert_string_equal(seen.reason[chosen[0]], "range");
        }
        res = upload(&s, chosen[1], 1000.0f); /* values up to 500: within the bound */
        assert_true(res.accepted);
        sim_free(&s);
    }

    /* an update stored before such values were refused (put into the store directly) is left
     * out of the sum: the round still closes, with the others */
    {
        sl_update_put u;
        sl_store_receipt rec;
        sl_round_record r;
        sim_init(&s, "engine_range_old", 20, CONFIG(""));
        n = select_round(&s, chosen);
        assert_true(n >= 7);
        st = status(&s);
        make_update(&s, chosen[0], st.round.id, st.model_version, 300000.0f, &frame, &len, sha);
        u.round_id = st.round.id;
        u.device_id = s.devices[chosen[0]];
        u.frame = frame;
        u.frame_len = len;
        u.num_samples = 50;
        u.sha256 = sha;
        assert_int_equal(sl_store_put_update(s.store, &u, 30000, &rec), SL_OK);
        free(frame);
        for (size_t j = 1; j <= 6; j++)
            assert_true(upload(&s, chosen[j], 1.0f).accepted);
        sim_at(&s, st.round.report_deadline_ms);
        assert_int_equal(sl_store_get_round(s.store, st.round.id, &r), SL_OK);
        assert_int_equal(r.state, SL_ROUND_CLOSED);
        assert_int_equal(r.reported, 6);
        assert_int_equal(status(&s).model_version, st.model_version + 1);
        sim_free(&s);
    }
}

/* Dropout matrix: a round closes iff quorum, never outlives its deadline, the run goes on. */
static void test_dropout_matrix(void **state)
{
    static const double rates[] = {0.0, 0.1, 0.3, 0.5, 0.9, 1.0};
    (void)state;
    for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
        sim s;
        uint64_t rng = 77 + ri;
        int closed = 0, abandoned = 0;
        sim_init(&s, "engine_drop", 40, CONFIG(""));
        for (int round = 0; round < 6; round++) {
            size_t chosen[64], n = select_round(&s, chosen), reported = 0;
            sl_task_status st = status(&s);
            int64_t round_id = st.round.id, deadline = st.round.report_deadline_ms;
            sl_round_record r;
            for (size_t j = 0; j < n; j++) {
                double u = (double)(sl_test_rand(&rng) >> 11) / 9007199254740992.0;
                if (u < rates[ri] || !status(&s).round_open || status(&s).round.id != round_id)
                    continue;
                if (upload(&s, chosen[j], 1.0f).accepted)
                    reported++;
            }
            if (status(&s).round.id == round_id)
                sim_at(&s, deadline); /* nobody else comes: the deadline decides */
            assert_int_equal(sl_store_get_round(s.store, round_id, &r), SL_OK);
            assert_true(r.closed_at_ms <= deadline);
            if (r.state == SL_ROUND_CLOSED) {
                assert_true(reported >= 6);
                closed++;
            } else {
                assert_int_equal(r.state, SL_ROUND_ABANDONED);
                assert_true(reported < 6);
                abandoned++;
            }
            assert_true(status(&s).round.id > round_id); /* the run continues */
        }
        print_message("dropout %.0f%%: %d closed, %d abandoned\n", rates[ri] * 100, closed,
                      abandoned);
        if (rates[ri] == 0.0)
            assert_int_equal(closed, 6);
        if (rates[ri] == 1.0)
            assert_int_equal(abandoned, 6);
        sim_free(&s);
    }
}

/* The same accepted set gives the same model bits: any arrival order, with restarts. */
static void run_deterministic(const char *name, uint64_t order_seed, int restart_every,
                              uint8_t shas[3][32])
{
    sim s;
    sim_init(&s, name, 16,
             "{\"name\":\"det\",\"target\":12,\"quorum\":8,\"selection_window_ms\":2000,"
             "\"report_deadline_ms\":10000,\"aggregator\":\"fedadam\","
             "\"error_feedback\":\"residual\"}");
    for (int round = 0; round < 3; round++) {
        size_t chosen[64], n = select_round(&s, chosen), k = 0;
        uint64_t rng = order_seed + (uint64_t)round;
        sl_task_status st = status(&s);
        /* the accepted set: the 9 lowest-index selected devices, in a shuffled order */
        size_t set[9];
        assert_true(n >= 9);
        for (size_t j = 0; j < 9; j++)
            set[j] = chosen[j];
        for (size_t j = 8; j > 0; j--) {
            size_t r = (size_t)(sl_test_rand(&rng) % (j + 1)), tmp = set[j];
            set[j] = set[r];
            set[r] = tmp;
        }
        for (size_t j = 0; j < 9; j++) {
            assert_true(upload(&s, set[j], 1.0f).accepted);
            if (restart_every && ++k % (size_t)restart_every == 0)
                sim_restart(&s);
        }
        sim_at(&s, st.round.report_deadline_ms);
        if (restart_every)
            sim_restart(&s);
        model_sha(&s, round + 2, shas[round]);
    }
    sim_free(&s);
}

static void test_determinism(void **state)
{
    uint8_t a[3][32], b[3][32], c[3][32];
    (void)state;
    run_deterministic("det_a", 1, 0, a);
    run_deterministic("det_b", 99, 0, b);
    run_deterministic("det_c", 5, 2, c);
    for (int r = 0; r < 3; r++) {
        assert_memory_equal(a[r], b[r], 32);
        assert_memory_equal(a[r], c[r], 32);
    }
    assert_memory_not_equal(a[0], a[1], 32);
}

/*
 * Drive rounds from wherever the task is until round @last closed: every
 * device checks in during selection; of the selected, the nine with the
 * lowest index report. Idempotent, so it resumes after a restart.
 */
static void drive(sim *s, int64_t last)
{
    for (;;) {
        sl_task_status st = status(s);
        size_t chosen[64], n = 0;
        if (st.finished || (st.round.round_no > last) ||
            (!st.round_open && st.round.round_no >= last))
            return;
        if (st.round.state == SL_ROUND_SELECTING) {
            n = select_round(s, chosen);
        } else {
            sl_checkin_result r;
            for (size_t i = 0; i < s->ndevices; i++) {
                assert_int_equal(sl_engine_checkin(s->engine, s->task, s->devices[i], &info, &r),
                                 SL_OK);
                if (r.selected)
                    chosen[n++] = i;
            }
        }
        st = status(s);
        for (size_t j = 0; j < n && j < 9; j++)
            if (status(s).round.id == st.round.id)
                assert_true(upload(s, chosen[j], 1.0f).accepted);
        if (status(s).round.id == st.round.id)
            sim_at(s, st.round.report_deadline_ms);
    }
}

#define KILL_CONFIG                                                               \
    "{\"name\":\"kill\",\"target\":12,\"quorum\":8,\"selection_window_ms\":2000," \
    "\"report_deadline_ms\":10000,\"rounds\":3,\"aggregator\":\"fedavgm\","       \
    "\"error_feedback\":\"residual\",\"server_lr_boost\":2,\"server_lr_ramp\":3}"

static long kill_at, commits_seen;

static void kill_hook(void)
{
    if (++commits_seen == kill_at)
        raise(SIGKILL); /* right after a transition became durable */
}

/* kill -9 after every persisted transition; the restarted engine ends in the same model. */
static void test_kill_after_every_transition(void **state)
{
    sim ref;
    uint8_t want[32];
    long total;
    (void)state;
    /* the uninterrupted run, counting its commits */
    memset(&ref, 0, sizeof ref);
    sl_test_mkdtemp(ref.dir, sizeof ref.dir, "kill_ref");
    commits_seen = 0;
    kill_at = -1;
    sl__store_commit_hook = kill_hook;
    sim_setup(&ref, 12, KILL_CONFIG);
    drive(&ref, 3);
    total = commits_seen;
    sl__store_commit_hook = NULL;
    assert_true(status(&ref).finished);
    model_sha(&ref, 4, want);
    sim_free(&ref);

    for (long k = 1; k <= total; k++) {
        sim s;
        int st;
        pid_t pid;
        uint8_t got[32];
        memset(&s, 0, sizeof s);
        sl_test_mkdtemp(s.dir, sizeof s.dir, "kill_run");
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            commits_seen = 0;
            kill_at = k;
            sl__store_commit_hook = kill_hook;
            sim_setup(&s, 12, KILL_CONFIG);
            drive(&s, 3);
            _exit(0); /* k past the last commit: ran to the end */
        }
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0));
        /* restart in this process over what the killed one left */
        sim_setup(&s, 12, KILL_CONFIG);
        drive(&s, 3);
        assert_true(status(&s).finished);
        model_sha(&s, 4, got);
        if (memcmp(got, want, 32) != 0)
            fail_msg("killed after commit %ld of %ld: the final model differs", k, total);
        sim_free(&s);
    }
    print_message("killed after each of %ld commits: every restart ended in the same model\n",
                  total);
}

/* 10,000 devices, 100 rounds: memory stays O(model), not O(devices x model). */
static void test_ten_thousand_devices(void **state)
{
    sim s;
    const char *fast = "/dev/shm";
    struct mallinfo2 before, after;
    size_t model_bytes;
    uint64_t rng = 5;
    int closed = 0;
    (void)state;
    memset(&s, 0, sizeof s);
    if (access(fast, W_OK) == 0) /* fsync-free storage: this is about memory, not disks */
        setenv("SL_TEST_TMPDIR", fast, 1);
    sl_test_mkdtemp(s.dir, sizeof s.dir, "engine_10k");
    unsetenv("SL_TEST_TMPDIR");
    sim_setup(&s, 10000,
              "{\"name\":\"big\",\"target\":100,\"quorum\":50,\"selection_window_ms\":1000,"
              "\"report_deadline_ms\":5000,\"rounds\":100}");
    model_bytes = (size_t)sl_layout_params(s.layout) * 4;
    before = mallinfo2();
    for (int round = 0; round < 100; round++) {
        sl_task_status st = status(&s);
        sl_checkin_result r;
        size_t picked = 0;
        for (size_t i = 0; i < s.ndevices; i++)
            sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r);
        sim_at(&s, st.round.select_deadline_ms);
        st = status(&s);
        {
            size_t *sel = malloc(200 * sizeof *sel);
            for (size_t i = 0; i < s.ndevices && st.round.state == SL_ROUND_TRAINING; i++) {
                assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r),
                                 SL_OK);
                if (r.selected && picked < 200)
                    sel[picked++] = i;
            }
            for (size_t j = 0; j < picked; j++) {
                /* 20% drop out; once 100 reported the round is closed and the rest are late */
                if (sl_test_rand(&rng) % 10 < 2 || status(&s).round.id != st.round.id)
                    continue;
                (void)upload(&s, sel[j], 1.0f);
            }
            free(sel);
        }
        assert_int_equal(picked, 130);
        if (status(&s).round.id == st.round.id)
            sim_at(&s, st.round.report_deadline_ms);
    }
    {
        sl_round_record r;
        for (int64_t id = 1; sl_store_get_round(s.store, id, &r) == SL_OK; id++) {
            assert_true(r.state == SL_ROUND_CLOSED || r.state == SL_ROUND_ABANDONED);
            closed += r.state == SL_ROUND_CLOSED;
        }
    }
    after = mallinfo2();
    print_message("10000 devices, 100 rounds: heap grew by %zu bytes (model %zu bytes)\n",
                  after.uordblks > before.uordblks ? after.uordblks - before.uordblks : 0,
                  model_bytes);
#if !defined(__SANITIZE_ADDRESS__)
    /* O(devices x model) would be gigabytes; O(model) plus the device table is small */
    assert_true(after.uordblks < before.uordblks + 8 * model_bytes + 10000 * 64 + (16u << 20));
#endif
    print_message("%d of 100 rounds closed (the rest missed quorum)\n", closed);
    assert_true(closed >= 90);
    assert_true(status(&s).finished);
    sim_free(&s);
}

/* FedBuff: no rounds to wait for; every B updates make a version; stale ones are refused. */
/* One FedNova round: the selected devices upload in @order (a permutation of the chosen),
 * device k reporting @steps[k] local steps, with a restart after the second upload when
 * @restart; the new model's digest in @sha. */
static void fednova_round(uint32_t *steps, int reverse, int restart, uint8_t *sha)
{
    sim s;
    size_t chosen[64], n;
    sl_task_status st;
    sim_init(&s, "fednova", 12,
             "{\"name\":\"nova\",\"target\":6,\"quorum\":6,\"over_selection\":1,"
             "\"selection_window_ms\":2000,\"report_deadline_ms\":10000,\"rounds\":5,"
             "\"fednova\":true,\"error_feedback\":\"residual\",\"seed\":5}");
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_int_equal(n, 6);
    st = status(&s);
    for (size_t k = 0; k < n; k++) {
        size_t i = chosen[reverse ? n - 1 - k : k];
        sl_accept_result res;
        uint8_t d[32];
        void *frame;
        size_t len;
        make_update(&s, i, st.round.id, st.model_version, 1.0f, &frame, &len, d);
        assert_int_equal(sl_engine_accept_steps(s.engine, st.round.id, s.devices[i], frame, len,
                                                (uint32_t)(50 + i % 7), steps[i], d, &res),
                         SL_OK);
        free(frame);
        assert_true(res.accepted);
        if (restart && k == 1)
            sim_restart(&s);
    }
    sim_at(&s, st.round.report_deadline_ms);
    assert_int_equal(status(&s).model_version, 2);
    model_sha(&s, 2, sha);
    sim_free(&s);
}

/* FedNova in the engine: the steps each device reports change the model (unequal steps
 * give another model than equal ones), and the model is the same bits whatever the order
 * of the uploads and across a restart. */
static void test_fednova_steps(void **state)
{
    uint32_t unequal[12], equal[12];
    uint8_t a[32], b[32], c[32], d[32];
    (void)state;
    for (int i = 0; i < 12; i++) {
        unequal[i] = 1 + 9 * (uint32_t)i;
        equal[i] = 20;
    }
    fednova_round(unequal, 0, 0, a);
    fednova_round(unequal, 1, 0, b);
    fednova_round(unequal, 0, 1, c);
    fednova_round(equal, 0, 0, d);
    assert_memory_equal(a, b, 32);
    assert_memory_equal(a, c, 32);
    assert_memory_not_equal(a, d, 32);
}

/* Device @i of the round open in @s uploads a unit update reporting @steps local steps. */
static sl_accept_result upload_steps(sim *s, size_t i, uint32_t steps)
{
    sl_task_status st = status(s);
    sl_accept_result res;
    uint8_t d[32];
    void *frame;
    size_t len;
    make_update(s, i, st.round.id, st.model_version, 1.0f, &frame, &len, d);
    assert_int_equal(sl_engine_accept_steps(s->engine, st.round.id, s->devices[i], frame, len, 40,
                                            steps, d, &res),
                     SL_OK);
    free(frame);
    return res;
}

/* The local steps an update reports are bounded: above the task's max_local_steps under a
 * time budget, above SL_ENGINE_MAX_STEPS otherwise, or none at all for FedNova (whose mean
 * is scaled by what devices claim): refused with reason "steps", nothing stored, and the
 * same device's honest update is accepted after. */
static void test_steps_refused(void **state)
{
    static const struct {
        const char *extra;
        uint32_t bad, good;
    } cases[] = {
        {",\"time_budget\":true,\"max_local_steps\":500", 501, 500},
        {"", SL_ENGINE_MAX_STEPS + 1, SL_ENGINE_MAX_STEPS},
        {",\"time_budget\":true", SL_ENGINE_MAX_STEPS + 1, 7},
        {",\"fednova\":true", 0, 1},
        {",\"fednova\":true", UINT32_MAX, 3},
    };
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char cfg[512];
        size_t chosen[64], n;
        sl_round_stats stats;
        sl_accept_result res;
        sl_task_status st;
        sim s;
        snprintf(cfg, sizeof cfg,
                 "{\"name\":\"steps\",\"target\":4,\"quorum\":4,\"over_selection\":1,"
                 "\"selection_window_ms\":2000,\"report_deadline_ms\":60000,\"rounds\":2,"
                 "\"error_feedback\":\"residual\"%s}",
                 cases[c].extra);
        sim_init(&s, "engine_steps", 8, cfg);
        sim_at(&s, T0 / 1000000);
        n = select_round(&s, chosen);
        assert_int_equal(n, 4);
        st = status(&s);
        res = upload_steps(&s, chosen[0], cases[c].bad);
        assert_false(res.accepted);
        assert_int_equal(res.reason, SL_REJECT_STEPS);
        assert_string_equal(sl_reject_reason_name(res.reason), "steps");
        assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &stats), SL_OK);
        assert_int_equal(stats.round.reported, 0);
        assert_int_equal(stats.rejected_by_reason[SL_REJECT_STEPS], 1);
        res = upload_steps(&s, chosen[1], cases[c].good);
        assert_true(res.accepted);
        assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &stats), SL_OK);
        assert_int_equal(stats.round.reported, 1);
        sim_free(&s);
    }
}

/* One round's draw over 26 devices: 0-19 check in, (@restart: the coordinator restarts,) 20-25
 * check in half a second later, 0-19 come back for their answer just after the window's end;
 * @selected[i]: device i drawn. */
static void pool_draw(int restart, int *selected)
{
    sim s;
    sl_checkin_result r;
    sl_task_status st;
    int64_t t0 = T0 / 1000000, window_end;
    sim_init(&s, restart ? "engine_pool_restart" : "engine_pool", 26, CONFIG(""));
    sim_at(&s, t0);
    for (size_t i = 0; i < 20; i++)
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
    window_end = status(&s).round.select_deadline_ms;
    if (restart)
        sim_restart(&s);
    sim_at(&s, t0 + 500);
    for (size_t i = 20; i < 26; i++)
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
    sim_at(&s, window_end + 300);
    for (size_t i = 0; i < 20; i++)
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
    st = status(&s);
    if (st.round.state == SL_ROUND_SELECTING)
        sim_at(&s, st.round.select_deadline_ms);
    st = status(&s);
    assert_int_equal(st.round.state, SL_ROUND_TRAINING);
    for (size_t i = 0; i < 26; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        selected[i] = r.selected;
    }
    sim_free(&s);
}

/* A coordinator restarted while a round selects draws what it would have drawn: the pool was
 * in memory, so the resumed window lasts until the devices that were in it have come back for
 * their answer (earlier builds drew at the window's end from the six devices that came after
 * the restart). */
static void test_restart_while_selecting(void **state)
{
    int plain[26], restarted[26], drawn = 0;
    (void)state;
    pool_draw(0, plain);
    pool_draw(1, restarted);
    for (size_t i = 0; i < 26; i++)
        drawn += plain[i];
    assert_int_equal(drawn, 13); /* ceil(10 * 1.3) of 26 */
    assert_memory_equal(plain, restarted, sizeof plain);
}

/* The pool comes back for the draw's answer over 2 ms for each device the round selects (100
 * ms at least, 1 s at most) after the window's end, not after retry_after_min_ms (1 s): 6
 * selected of 8 come back within 100 ms of the window's end, as does a device that asks 10 ms
 * before it (50 ms later at the soonest) or after it before the draw (but a draw later than the
 * spread is asked for no sooner than retry_after_min_ms); a round that selects
 * 1,000 spreads its pool over the second after the end. Earlier builds spread every pool over
 * a second and told a device that asked late in the window to come back a second later. */
static void test_come_back_for_the_draw(void **state)
{
    sim s;
    sl_checkin_result r;
    sl_task_status st;
    int64_t most = 0;
    (void)state;
    sim_init(&s, "come_back", 8,
             "{\"name\":\"small\",\"target\":4,\"quorum\":2,\"over_selection\":1.5,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":60000,\"rounds\":2}");
    sim_at(&s, T0 / 1000000);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        assert_false(r.selected);
        assert_true(r.retry_after_ms >= 1000 && r.retry_after_ms < 1100);
    }
    st = status(&s);
    assert_int_equal(st.round.state, SL_ROUND_SELECTING);
    sim_at(&s, st.round.select_deadline_ms - 10);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[6], &info, &r), SL_OK);
    assert_true(r.retry_after_ms >= 50 && r.retry_after_ms < 110);
    /* at the end, before the draw's tick: soon again */
    sl_clock_manual_advance(&s.clock, 15000000);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[7], &info, &r), SL_OK);
    assert_false(r.selected);
    assert_true(r.retry_after_ms >= 50 && r.retry_after_ms < 100);
    /* a draw later than the spread (a coordinator that has not ticked: a leader gone) is not
     * polled for every 50 ms: retry_after_min_ms again */
    sl_clock_manual_advance(&s.clock, 100000000);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[7], &info, &r), SL_OK);
    assert_false(r.selected);
    assert_true(r.retry_after_ms >= 1000);
    sim_free(&s);

    sim_init(&s, "come_back_big", 8,
             "{\"name\":\"big\",\"target\":1000,\"quorum\":2,\"over_selection\":1,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":60000,\"rounds\":2}");
    sim_at(&s, T0 / 1000000);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        assert_true(r.retry_after_ms >= 1000 && r.retry_after_ms < 2000);
        most = r.retry_after_ms > most ? r.retry_after_ms : most;
    }
    assert_true(most >= 1100); /* spread over the second, not 100 ms (8 draws of 1,000) */
    sim_free(&s);
}

/* A coordinator in a crash loop while a round selects (restarted every 0.9 s, its devices
 * checking in between) still draws: the resumed window is extended at most to twice the wait
 * for the devices' return after its end. Earlier builds extended it from every restart anew,
 * past the next one, and the round never drew. */
static void test_restart_loop_while_selecting(void **state)
{
    sim s;
    sl_checkin_result r;
    int64_t t;
    int drew_at = -1, drawn = 0;
    (void)state;
    sim_init(&s, "engine_restart_loop", 26, CONFIG(""));
    t = T0 / 1000000;
    sim_at(&s, t);
    for (size_t i = 0; i < 20; i++)
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
    t = status(&s).round.select_deadline_ms - 200;
    for (int k = 0; k < 8 && drew_at < 0; k++) {
        sim_at(&s, t);
        sim_restart(&s);
        sim_at(&s, t + 400);
        for (size_t i = 0; i < 26; i++)
            assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        sim_at(&s, t + 899);
        if (status(&s).round.state == SL_ROUND_TRAINING)
            drew_at = k;
        t += 900;
    }
    if (drew_at < 0)
        fail_msg("eight restarts 0.9 s apart: the round still selects");
    for (size_t i = 0; i < 26; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        drawn += r.selected;
    }
    assert_int_equal(drawn, 13);
    sim_free(&s);
}

/* Two rounds of a task whose devices rest for ten minutes after a round (cooldown_ms): the
 * second round's draw, @restart: after a restart between the rounds; @first, @second[i]:
 * device i drawn in each. */
static void cooldown_draws(int restart, int *first, int *second)
{
    sim s;
    size_t chosen[64], n;
    sim_init(&s, restart ? "engine_rest_restart" : "engine_rest", 30,
             CONFIG(",\"cooldown_ms\":600000"));
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_int_equal(n, 13);
    memset(first, 0, 30 * sizeof *first);
    for (size_t k = 0; k < n; k++) {
        first[chosen[k]] = 1;
        if (k < 10)
            assert_true(upload(&s, chosen[k], 1.0f).accepted);
    }
    sim_at(&s, s.clock.wall_ns / 1000000 + 1);
    assert_int_equal(status(&s).model_version, 2);
    if (restart)
        sim_restart(&s);
    n = select_round(&s, chosen);
    assert_int_equal(n, 13); /* of the 17 that did not take part */
    memset(second, 0, 30 * sizeof *second);
    for (size_t k = 0; k < n; k++)
        second[chosen[k]] = 1;
    sim_free(&s);
}

/* A device in one task's open round is busy for every other task; over a restart too: task B
 * draws among the devices task A did not select, as without a restart. @busy, @drawn[i]:
 * device i selected by A, by B. */
static void busy_draws(int restart, int *busy, int *drawn)
{
    sim s;
    size_t chosen[64], n;
    char err[256];
    void *frame;
    size_t len;
    int64_t other;
    sl_checkin_result r;
    sl_task_status st;
    sim_init(&s, restart ? "engine_busy_restart" : "engine_busy", 30, CONFIG(""));
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_int_equal(n, 13);
    memset(busy, 0, 30 * sizeof *busy);
    for (size_t k = 0; k < n; k++)
        busy[chosen[k]] = 1;
    {
        size_t np = (size_t)sl_layout_params(s.layout);
        float *m = calloc(np, sizeof *m);
        assert_int_equal(sl_frame_encode_model(s.layout, m, 1, 3, &frame, &len), SL_OK);
        free(m);
    }
    if (sl_engine_create_task(s.engine,
                              "{\"name\":\"other\",\"target\":10,\"quorum\":6,"
                              "\"over_selection\":1.3,\"selection_window_ms\":2000,"
                              "\"report_deadline_ms\":10000,\"rounds\":5}",
                              LAYOUT, frame, len, &other, err, sizeof err) != SL_OK)
        fail_msg("create task: %s", err);
    free(frame);
    if (restart)
        sim_restart(&s);
    for (size_t i = 0; i < 30; i++)
        assert_int_equal(sl_engine_checkin(s.engine, other, s.devices[i], &info, &r), SL_OK);
    assert_int_equal(sl_engine_task_status(s.engine, other, &st), SL_OK);
    sim_at(&s, st.round.select_deadline_ms);
    for (size_t i = 0; i < 30; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, other, s.devices[i], &info, &r), SL_OK);
        drawn[i] = r.selected;
    }
    sim_free(&s);
}

/* What the selection excludes outlives a restart (read from the store's rounds and
 * participants): the devices of a round that ended rest for the task's cooldown_ms, and a
 * device in one task's open round is not drawn by another. Earlier builds kept both in memory
 * only: after a restart the rested devices were drawn again at once. */
static void test_rest_and_busy_after_restart(void **state)
{
    int first[30], second[30], first_r[30], second_r[30], busy[30], drawn[30], busy_r[30],
        drawn_r[30], n = 0;
    (void)state;
    cooldown_draws(0, first, second);
    cooldown_draws(1, first_r, second_r);
    assert_memory_equal(first, first_r, sizeof first);
    assert_memory_equal(second, second_r, sizeof second);
    for (size_t i = 0; i < 30; i++)
        assert_false(first[i] && second[i]);
    busy_draws(0, busy, drawn);
    busy_draws(1, busy_r, drawn_r);
    assert_memory_equal(busy, busy_r, sizeof busy);
    assert_memory_equal(drawn, drawn_r, sizeof drawn);
    for (size_t i = 0; i < 30; i++) {
        assert_false(busy[i] && drawn[i]);
        n += drawn[i];
    }
    assert_int_equal(n, 13); /* of the 17 A did not select */
}

/* Nothing a device reports makes the coordinator acknowledge an update and then fail to
 * aggregate it: six reports of 2^32 - 1 samples close their round (earlier builds refused the
 * fifth in the sum and held the close back for good), and under FedNova, in a task stored
 * before the configuration refused SGD momentum 0.9999, an update whose effective steps the
 * sums cannot take is refused at upload ("steps"), nothing stored, while one they can take is
 * acknowledged and aggregated. */
static void test_reports_the_sum_takes(void **state)
{
    sim s;
    size_t chosen[64], n;
    sl_task_status st;
    sl_accept_result res;
    sl_round_stats stats;
    (void)state;
    sim_init(&s, "engine_big_counts", 6,
             "{\"name\":\"big\",\"target\":6,\"quorum\":6,\"over_selection\":1,"
             "\"selection_window_ms\":2000,\"report_deadline_ms\":60000,\"rounds\":3}");
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_int_equal(n, 6);
    st = status(&s);
    for (size_t k = 0; k < n; k++) {
        uint8_t d[32];
        void *frame;
        size_t len;
        make_update(&s, chosen[k], st.round.id, st.model_version, 1.0f, &frame, &len, d);
        assert_int_equal(sl_engine_accept(s.engine, st.round.id, s.devices[chosen[k]], frame, len,
                                          UINT32_MAX, d, &res),
                         SL_OK);
        free(frame);
        assert_true(res.accepted);
    }
    assert_int_equal(sl_engine_tick(s.engine, NULL), SL_OK);
    assert_int_equal(status(&s).model_version, 2); /* closed at its target */
    sim_free(&s);

    sim_init(&s, "engine_nova_stored", 8,
             "{\"name\":\"nova\",\"target\":4,\"quorum\":4,\"over_selection\":1,"
             "\"selection_window_ms\":2000,\"report_deadline_ms\":60000,\"rounds\":2,"
             "\"fednova\":true,\"local_momentum\":0.999,\"error_feedback\":\"residual\"}");
    sl_engine_close(s.engine);
    sl_store_close(s.store);
    {
        sqlite3 *db;
        char path[700], *sqlerr = NULL;
        snprintf(path, sizeof path, "%s/store.db", s.dir);
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        if (sqlite3_exec(db,
                         "UPDATE tasks SET config = replace(replace(config, "
                         "'\"local_momentum\": 0.999,', '\"local_momentum\": 0.9999,'), "
                         "'\"local_momentum\":0.999,', '\"local_momentum\":0.9999,')",
                         NULL, NULL, &sqlerr) != SQLITE_OK)
            fail_msg("%s", sqlerr);
        sqlite3_close(db);
    }
    sim_open_engine(&s);
    assert_true(status(&s).cfg.local_momentum == 0.9999); /* loaded as stored */
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_int_equal(n, 4);
    st = status(&s);
    res = upload_steps(&s, chosen[0], 1000000); /* about 1e10 effective steps */
    assert_false(res.accepted);
    assert_int_equal(res.reason, SL_REJECT_STEPS);
    assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &stats), SL_OK);
    assert_int_equal(stats.round.reported, 0);
    for (size_t k = 1; k < 4; k++)
        assert_true(upload_steps(&s, chosen[k], 100000).accepted); /* 9e8: within 2^30 */
    res = upload_steps(&s, chosen[0], 100000);
    assert_true(res.accepted);
    assert_int_equal(sl_engine_tick(s.engine, NULL), SL_OK);
    assert_int_equal(status(&s).model_version, 2);
    sim_free(&s);
}

/* Time budgets: the steps that fit before the deadline at a device's pace, within the
 * task's bounds; the pace a device reports is kept in the store, so a restarted engine gives
 * the same budget to a device that reports none. */
static void test_time_budget(void **state)
{
    sl_task_config c;
    char err[256];
    sim s;
    size_t chosen[64], n;
    sl_checkin_result r, again;
    sl_checkin_info paced = {100, "avx2", "", 200.0, 8000.0, 8000.0};
    const char *cfg = "{\"name\":\"budget\",\"target\":4,\"quorum\":2,\"over_selection\":1,"
                      "\"selection_window_ms\":2000,\"report_deadline_ms\":60000,\"rounds\":3,"
                      "\"density\":0.01,\"time_budget\":true,\"min_local_steps\":2,"
                      "\"max_local_steps\":500}";
    (void)state;
    assert_int_equal(sl_task_config_parse(cfg, strlen(cfg), &c, err, sizeof err), SL_OK);
    /* 60 s left: a tenth kept back, 0.4 s to download 100,000 fp32 parameters at 1 MB/s */
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 10, 100e3, 1e6), 500);
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 200, 100e3, 1e6), 267);
    /* 64 kbit/s: 50 s to download the model */
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 200, 8000, 8000), 15);
    /* one step would not fit: the task's minimum */
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 2000, 8000, 8000), 2);
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 0, 0, 0), 500);
    c.time_budget = 0;
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 60000, 10, 100e3, 1e6), 0);
    {
        const char *bad = "{\"name\":\"b\",\"target\":2,\"min_local_steps\":9,"
                          "\"max_local_steps\":3}";
        assert_int_equal(sl_task_config_parse(bad, strlen(bad), &c, err, sizeof err),
                         SL_ECONFIG_VALUE);
        assert_non_null(strstr(err, "max_local_steps"));
    }

    /* in the engine: the budget of a selected device, from the pace it reports or kept */
    sim_init(&s, "budget", 6, cfg);
    sim_at(&s, T0 / 1000000);
    n = select_round(&s, chosen);
    assert_true(n >= 2);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[0]], &paced, &r), SL_OK);
    assert_true(r.selected);
    assert_true(r.max_steps >= 2 && r.max_steps < 500); /* 64 kbit/s and 200 ms a step */
    sim_restart(&s);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[0]], &info, &again),
                     SL_OK);
    assert_true(again.selected);
    assert_int_equal(again.max_steps, r.max_steps); /* the pace survived the restart */
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[1]], &info, &again),
                     SL_OK);
    assert_int_equal(again.max_steps, 500); /* no pace known: the task's bound */
    sim_free(&s);
}

static int by_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

/* A planned round (time budgets): once the paces are known, a round's window is the
 * target-over-selected percentile of its selected devices' full windows (download,
 * max_local_steps, upload), each device's budget fits that window (the ones at or under the
 * percentile get max_local_steps, the slower fewer), and the round closes when every
 * selected device has reported, not at its target: no device's work is cut off. The plan
 * survives a restart. The first round, with no pace known, closes at its target. */
static void test_planned_round(void **state)
{
    sl_task_config c;
    char err[256];
    sim s;
    size_t chosen[64], n;
    sl_checkin_result r;
    sl_task_status st;
    int64_t full[64], w, window;
    int slower = 0;
    const char *cfg = "{\"name\":\"plan\",\"target\":4,\"quorum\":2,\"over_selection\":1.5,"
                      "\"selection_window_ms\":2000,\"report_deadline_ms\":60000,\"rounds\":3,"
                      "\"density\":0.01,\"time_budget\":true,\"min_local_steps\":2,"
                      "\"max_local_steps\":100,\"min_report_deadline_ms\":1000}";
    (void)state;
    assert_int_equal(sl_task_config_parse(cfg, strlen(cfg), &c, err, sizeof err), SL_OK);
    /* 100,000 parameters: 0.4 s down at 1 MB/s, 1 s of steps, 70.24 ms up, 250 ms of margin */
    assert_int_equal(sl_engine_full_window(&c, 100000, 0, 10, 100e3, 1e6), 1721);
    /* 100 s of work: a tenth kept back */
    assert_int_equal(sl_engine_full_window(&c, 100000, 0, 994.7024, 100e3, 1e6), 111045);
    assert_int_equal(sl_engine_full_window(&c, 100000, 0, 0, 100e3, 1e6), 0); /* unknown pace */
    /* downloads of 200 kB (deltas) rather than the 400 kB of the model in fp32 */
    assert_int_equal(sl_engine_full_window(&c, 100000, 200000, 10, 100e3, 1e6), 1521);
    /* a full window gives exactly max_local_steps */
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 1721, 10, 100e3, 1e6), 100);
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 111045, 994.7024, 100e3, 1e6), 100);
    assert_int_equal(sl_engine_budget_steps(&c, 100000, 0, 0, 1500, 10, 100e3, 1e6), 77);

    sim_init(&s, "plan", 8, cfg);
    sim_at(&s, T0 / 1000000);
    /* round 1: no pace known, so no plan: the round closes at its target (4 of 6) */
    n = select_round(&s, chosen);
    assert_int_equal(n, 6);
    st = status(&s);
    assert_int_equal(st.round.target, 4);
    assert_int_equal(st.round.report_deadline_ms - st.round.select_deadline_ms, 60000);
    for (size_t k = 0; k < n; k++) { /* device i: a step of 20 + 40 i ms, told at check-in */
        sl_checkin_info paced = {100, "avx2", "", 20.0 + 40.0 * (double)chosen[k], 100e3, 1e6};
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[k]], &paced, &r),
                         SL_OK);
        assert_true(r.selected);
        assert_int_equal(r.max_steps, 100); /* the whole 60 s window */
        /* its download: 1,000 bytes (the plan counts what downloads weigh, not fp32's 8,160) */
        assert_int_equal(sl_engine_count_download(s.engine, s.task, s.devices[chosen[k]], 1000),
                         SL_OK);
    }
    sim_at(&s, st.round.select_deadline_ms + 2500); /* the round trains 2.5 s */
    for (size_t k = 0; k < 4; k++)
        assert_true(upload(&s, chosen[k], 1.0f).accepted);
    assert_int_equal(status(&s).round.round_no, 2); /* closed at the target */
    {
        /* what downloads weigh and how long rounds train come from the store's closed
         * rounds: a restart before the next plan keeps them (the plan below expects
         * 1,000 bytes, not fp32's 8,160) */
        double down = s.engine->tasks[0]->down_bytes_ewma;
        double train = s.engine->tasks[0]->train_ms_ewma;
        assert_float_equal(down, 1000.0, 0);
        assert_float_equal(train, 2500.0, 0);
        sim_restart(&s);
        assert_true(s.engine->tasks[0]->down_bytes_ewma == down);
        assert_true(s.engine->tasks[0]->train_ms_ewma == train);
    }

    /* round 2: the selected devices' paces plan it */
    n = select_round(&s, chosen);
    assert_int_equal(n, 6);
    st = status(&s);
    {
        size_t m = 0;
        int64_t sorted[64];
        sl_store_pace p;
        for (size_t k = 0; k < n; k++) {
            full[k] = 0;
            if (sl_store_get_pace(s.store, s.task, s.devices[chosen[k]], &p) == SL_OK) {
                full[k] = sl_engine_full_window(&c, 2040, 1000, p.step_ms, p.up_bps, p.down_bps);
                sorted[m++] = full[k];
            }
        }
        assert_true(m >= 3); /* round 1's six of eight devices told their pace */
        qsort(sorted, m, sizeof *sorted, by_i64);
        /* and the time over which the devices come back for their answer: 2 ms for each of
         * the 6 the round selects, 100 ms at least */
        w = sorted[(size_t)ceil(4.0 / 6.0 * (double)m) - 1] + 100;
    }
    window = st.round.report_deadline_ms - st.round.select_deadline_ms;
    print_message("planned window %lld ms (full windows up to %lld ms)\n", (long long)window,
                  (long long)w);
    assert_int_equal(window, w);
    assert_int_equal(st.round.target, 6); /* every selected device is awaited */
    sim_restart(&s);                      /* the plan is the store's */
    assert_int_equal(status(&s).round.report_deadline_ms, st.round.report_deadline_ms);
    assert_int_equal(status(&s).round.target, 6);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[chosen[k]], &info, &r),
                         SL_OK);
        assert_true(r.selected);
        assert_int_equal(r.report_deadline_ms, st.round.report_deadline_ms);
        if (full[k] > 0 && full[k] <= window - 100)
            assert_int_equal(r.max_steps, 100);
        else if (full[k] > window - 100 && ++slower)
            assert_true(r.max_steps < 100); /* slower than the plan: fewer steps, in time */
        else
            assert_int_equal(r.max_steps, 100); /* never measured */
    }
    assert_true(slower >= 1);
    for (size_t k = 0; k < 5; k++)
        assert_true(upload(&s, chosen[k], 1.0f).accepted);
    st = status(&s);
    assert_int_equal(st.round.round_no, 2); /* past its target of 4: still open */
    assert_int_equal(st.round.reported, 5);
    assert_true(upload(&s, chosen[5], 1.0f).accepted);
    assert_int_equal(status(&s).round.round_no, 3); /* the sixth closed it */
    {
        sl_round_record rr;
        assert_int_equal(sl_store_get_round(s.store, st.round.id, &rr), SL_OK);
        assert_int_equal(rr.state, SL_ROUND_CLOSED);
        assert_int_equal(rr.reported, 6);
    }
    sim_free(&s);
}

#define SEL_ROUNDS 12

/* Rounds of 12 devices, 4 selected a round; devices 0, 3, 6, 9 never report (a slow link, a
 * dead battery); the others report at once. Selections into @sel[round][device]; with
 * @restart the engine restarts before every selection. */
static void selection_run(const char *extra, int restart, unsigned char sel[SEL_ROUNDS][12])
{
    char cfg[512];
    sim s;
    snprintf(cfg, sizeof cfg,
             "{\"name\":\"sel\",\"target\":4,\"quorum\":2,\"over_selection\":1,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":5000,\"rounds\":%d,"
             "\"seed\":3%s}",
             SEL_ROUNDS, extra);
    sim_init(&s, "select", 12, cfg);
    sim_at(&s, T0 / 1000000);
    memset(sel, 0, SEL_ROUNDS * 12);
    for (int round = 0; round < SEL_ROUNDS; round++) {
        size_t chosen[64], n;
        sl_task_status st;
        if (restart)
            sim_restart(&s);
        n = select_round(&s, chosen);
        assert_int_equal(n, 4);
        st = status(&s); /* the round just selected */
        for (size_t k = 0; k < n; k++) {
            sel[round][chosen[k]] = 1;
            if (chosen[k] % 3 != 0)
                assert_true(upload(&s, chosen[k], 1.0f).accepted);
        }
        if (status(&s).round.id == st.round.id) /* not closed at its target: at its deadline */
            sim_at(&s, st.round.report_deadline_ms);
    }
    sim_free(&s);
}

/* Selection that knows the fleet: with fairness every device takes part at least once in
 * every 3 rounds; paced selection picks the devices that report more often than the ones
 * that never do; both select the same after restarts as without. */
static void test_selection_knows_fleet(void **state)
{
    unsigned char a[SEL_ROUNDS][12], b[SEL_ROUNDS][12];
    int never = 0, others = 0;
    (void)state;
    selection_run(",\"fairness_rounds\":3", 0, a);
    for (int round = 0; round + 3 <= SEL_ROUNDS; round++)
        for (int d = 0; d < 12; d++)
            assert_true(a[round][d] + a[round + 1][d] + a[round + 2][d] >= 1);
    selection_run(",\"fairness_rounds\":3", 1, b);
    assert_memory_equal(a, b, sizeof a);

    selection_run(",\"paced_selection\":true", 0, a);
    for (int round = 4; round < SEL_ROUNDS; round++) /* once the history says who reports */
        for (int d = 0; d < 12; d++)
            *(d % 3 == 0 ? &never : &others) += a[round][d];
    print_message("rounds 5-12: %d selections of the 4 that never report, %d of the 8 others\n",
                  never, others);
    /* a device that never reports is selected at most half as often as one that does */
    assert_true(4 * never < others);
    selection_run(",\"paced_selection\":true", 1, b);
    assert_memory_equal(a, b, sizeof a);
}

/* Adaptive deadline: a round's report window follows the delays with which the last rounds'
 * updates arrived (90th percentile, a quarter more), within the task's bounds. */
static void test_adaptive_deadline(void **state)
{
    sim s;
    size_t chosen[64], n;
    sl_task_status st;
    (void)state;
    sim_init(&s, "deadline", 6,
             "{\"name\":\"dl\",\"target\":4,\"quorum\":2,\"over_selection\":1,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":60000,\"rounds\":4,"
             "\"deadline_percentile\":90,\"min_report_deadline_ms\":2000}");
    sim_at(&s, T0 / 1000000);
    st = status(&s);
    assert_int_equal(st.round.report_deadline_ms - st.round.select_deadline_ms, 60000);
    /* round 1: the updates arrive 4 s after the selection */
    n = select_round(&s, chosen);
    st = status(&s);
    sim_at(&s, st.round.select_deadline_ms + 4000);
    for (size_t k = 0; k < n; k++)
        assert_true(upload(&s, chosen[k], 1.0f).accepted);
    st = status(&s); /* round 2 opened at the target: 4 s x 1.25 */
    assert_int_equal(st.round.round_no, 2);
    assert_int_equal(st.round.report_deadline_ms - st.round.select_deadline_ms, 5000);
    /* round 2: at once; the window of round 3 takes both rounds' delays, 90th percentile */
    n = select_round(&s, chosen);
    for (size_t k = 0; k < n; k++)
        assert_true(upload(&s, chosen[k], 1.0f).accepted);
    sim_restart(&s); /* the window comes from the store */
    st = status(&s);
    assert_int_equal(st.round.round_no, 3);
    assert_int_equal(st.round.report_deadline_ms - st.round.select_deadline_ms, 5000);
    sim_free(&s);
}

static void test_fedbuff(void **state)
{
    sim s;
    sl_checkin_result r;
    sl_accept_result res;
    (void)state;
    sim_init(&s, "fedbuff", 20,
             "{\"name\":\"async\",\"target\":5,\"quorum\":1,\"fedbuff\":true,"
             "\"buffer_size\":5,\"max_staleness\":1,\"report_deadline_ms\":60000}");
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
        assert_true(r.selected);
        assert_int_equal(r.participation, 0);
        assert_true(upload(&s, i, 1.0f).accepted);
    }
    assert_int_equal(status(&s).model_version, 2);
    /* the next buffer's assignments count the buffers that took a device's update (the
     * density warm-up's step): none selects anyone */
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[0], &info, &r), SL_OK);
    assert_true(r.selected);
    assert_int_equal(r.participation, 1);
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[19], &info, &r), SL_OK);
    assert_true(r.selected);
    assert_int_equal(r.participation, 0);
    /* an update from version 1 is one version stale: still accepted */
    {
        sl_task_status st = status(&s);
        uint8_t sha[32];
        void *frame;
        size_t len;
        make_update(&s, 7, st.round.id, 1, 1.0f, &frame, &len, sha);
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[7], &info, &r), SL_OK);
        assert_int_equal(
            sl_engine_accept(s.engine, st.round.id, s.devices[7], frame, len, 10, sha, &res),
            SL_OK);
        assert_true(res.accepted);
        free(frame);
        for (size_t i = 8; i < 12; i++) {
            assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r), SL_OK);
            assert_true(upload(&s, i, 1.0f).accepted);
        }
        assert_int_equal(status(&s).model_version, 3);
        /* now version 1 is two versions old */
        st = status(&s);
        make_update(&s, 13, st.round.id, 1, 1.0f, &frame, &len, sha);
        assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[13], &info, &r), SL_OK);
        assert_int_equal(
            sl_engine_accept(s.engine, st.round.id, s.devices[13], frame, len, 10, sha, &res),
            SL_OK);
        assert_false(res.accepted);
        assert_int_equal(res.reason, SL_REJECT_STALE);
        free(frame);
    }
    sim_free(&s);
}

/* Model bytes sent to devices are counted in the open round and persisted when it closes. */
/*
 * The disk fails after the update that meets a round's target was stored and before the
 * round's close went through. The update counts: its answer is a receipt, not an error
 * the device would retry into "late" and fold back into its residual (counted twice);
 * a retry of it while the close is pending gets the same receipt; once the disk is back
 * the next tick closes the round with the update in it, once. Tried with the fault at
 * every write from the first on, until one lands between the two.
 */
#define CLOSE_CONFIG                                                      \
    "{\"name\":\"close\",\"target\":2,\"quorum\":1,\"over_selection\":1," \
    "\"selection_window_ms\":2000,\"report_deadline_ms\":10000,\"rounds\":3}"

static void test_receipt_while_close_fails(void **state)
{
    int hit = 0;
    (void)state;
    assert_int_equal(sl_faultvfs_register(), 0);
    sim_vfs = SL_FAULTVFS_NAME;
    for (long k = 1; k <= 200 && !hit; k++) {
        sim s;
        size_t chosen[2];
        sl_task_status st, mid;
        sl_accept_result res, again;
        sl_store_receipt rec;
        uint8_t sha[32];
        void *frame;
        size_t len;
        int rc, stored;
        sim_init(&s, "close_fail", 2, CLOSE_CONFIG);
        assert_int_equal(select_round(&s, chosen), 2);
        assert_true(upload(&s, chosen[0], 1.0f).accepted);
        st = status(&s);
        make_update(&s, chosen[1], st.round.id, st.model_version, 1.0f, &frame, &len, sha);
        sl_faultvfs_arm(SL_FAULT_WRITE, k, 10 /* SQLITE_IOERR */);
        rc = sl_engine_accept(s.engine, st.round.id, s.devices[chosen[1]], frame, len, 60, sha,
                              &res);
        stored =
            sl_store_get_receipt(s.store, st.round.id, s.devices[chosen[1]], sha, &rec) == SL_OK;
        mid = status(&s);
        if (stored && mid.round_open && mid.round.id == st.round.id) {
            hit = 1;
            print_message("write %ld failed: the update stored, the close pending (state %d)\n", k,
                          (int)mid.round.state);
            assert_int_equal(rc, SL_OK);
            assert_true(res.accepted);
            assert_int_equal(res.receipt.update_id, rec.update_id);
            /* the device's retry while the close is still failing */
            assert_int_equal(sl_engine_accept(s.engine, st.round.id, s.devices[chosen[1]], frame,
                                              len, 60, sha, &again),
                             SL_OK);
            assert_true(again.accepted);
            assert_true(again.receipt.duplicate);
            assert_int_equal(again.receipt.update_id, rec.update_id);
            sl_faultvfs_disarm();
            sim_at(&s, st.round.select_deadline_ms + 1);
            mid = status(&s);
            assert_int_equal(mid.model_version, st.model_version + 1);
            {
                sl_round_record r;
                uint64_t n = 0;
                assert_int_equal(sl_store_get_round(s.store, st.round.id, &r), SL_OK);
                assert_int_equal(r.state, SL_ROUND_CLOSED);
                assert_int_equal(r.reported, 2);
                assert_int_equal(sl_store_count_updates(s.store, st.round.id, &n), SL_OK);
                assert_int_equal(n, 2);
            }
        }
        sl_faultvfs_disarm();
        free(frame);
        sim_free(&s);
    }
    sim_vfs = NULL;
    assert_true(hit);
}

static void test_count_download(void **state)
{
    sim s;
    size_t chosen[8], n;
    sl_task_status st;
    sl_round_stats stats;
    sl_round_record stored;
    int64_t round_id;
    (void)state;
    sim_init(&s, "engine_down", 4,
             "{\"name\":\"down\",\"target\":2,\"quorum\":2,\"over_selection\":1.0,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":10000,\"rounds\":1}");
    assert_int_equal(sl_engine_count_download(s.engine, s.task + 100, 0, 10), SL_ENOENT);
    assert_int_equal(sl_engine_count_download(NULL, s.task, 0, 10), SL_EINVAL);
    /* while selecting (a device fetching the model early) and while training */
    assert_int_equal(sl_engine_count_download(s.engine, s.task, 0, 1000), SL_OK);
    n = select_round(&s, chosen);
    assert_int_equal(n, 2);
    assert_int_equal(sl_engine_count_download(s.engine, s.task, s.devices[chosen[0]], 200), SL_OK);
    assert_int_equal(sl_engine_count_download(s.engine, s.task, s.devices[chosen[1]], 30), SL_OK);
    /* a resumed download of the same device: bytes add up, the device counts once */
    assert_int_equal(sl_engine_count_download(s.engine, s.task, s.devices[chosen[0]], 4), SL_OK);
    assert_int_equal(sl_engine_count_download(s.engine, s.task, 0, 0), SL_OK);
    st = status(&s);
    round_id = st.round.id;
    assert_int_equal(st.round.bytes_down, 1234);
    assert_int_equal(sl_engine_round_stats(s.engine, round_id, &stats), SL_OK);
    assert_int_equal(stats.round.bytes_down, 1234);
    assert_int_equal(stats.downloaded, 2);
    /* not written on every download: the store still has the selection's value */
    assert_int_equal(sl_store_get_round(s.store, round_id, &stored), SL_OK);
    assert_int_equal(stored.bytes_down, 1000);
    /* the close persists it */
    assert_true(upload(&s, chosen[0], 1.0f).accepted);
    assert_true(upload(&s, chosen[1], 1.0f).accepted);
    assert_int_equal(sl_store_get_round(s.store, round_id, &stored), SL_OK);
    assert_int_equal(stored.state, SL_ROUND_CLOSED);
    assert_int_equal(stored.bytes_down, 1234);
    /* the only round ran: nothing open to count in, and the closed round is unchanged */
    st = status(&s);
    assert_true(st.finished);
    assert_false(st.round_open);
    assert_int_equal(sl_engine_count_download(s.engine, s.task, 0, 99), SL_ESTATE);
    sim_restart(&s);
    assert_int_equal(sl_engine_round_stats(s.engine, round_id, &stats), SL_OK);
    assert_int_equal(stats.round.bytes_down, 1234);
    assert_int_equal(sl_engine_count_download(s.engine, s.task, 0, 99), SL_ESTATE);
    sim_free(&s);
}

/* A task's model spec: the engine checks only the layout it implies, check-ins carry its
 * SHA-256, and a device that refuses the model is never selected until it stops refusing (which
 * survives a restart). */
static void test_model_spec_and_refusals(void **state)
{
    static const char spec[] = "{\"starling_model\": 1, \"name\": \"t\", \"params\": ["
                               "{\"name\": \"w\", \"shape\": [40, 50]}, "
                               "{\"name\": \"b\", \"shape\": [40]}], \"nodes\": []}";
    static const char *const bad[] = {
        "{\"starling_model\": 2, \"params\": []}",
        "{\"starling_model\": 1}",
        "{\"starling_model\": 1, \"params\": [{\"name\": \"w\", \"shape\": [40, 50]}]}",
        "{\"starling_model\": 1, \"params\": [{\"name\": \"w\", \"shape\": [50, 40]}, "
        "{\"name\": \"b\", \"shape\": [40]}]}",
        "{\"starling_model\": 1, \"params\": [{\"name\": \"b\", \"shape\": [40]}, "
        "{\"name\": \"w\", \"shape\": [40, 50]}]}",
        "[1, 2]",
        "not json"};
    sim s;
    char err[320], hex[65];
    uint8_t sha[32];
    void *frame;
    size_t len;
    float *w;
    int64_t task, again;
    sl_checkin_result r;
    sl_checkin_info refusing = info;
    sl_task_record rec;
    sl_task_status st;
    (void)state;
    sim_init(&s, "engine_spec", 3, CONFIG(""));
    w = calloc((size_t)sl_layout_params(s.layout), sizeof *w);
    assert_int_equal(sl_frame_encode_model(s.layout, w, 1, 3, &frame, &len), SL_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(sl_engine_create_task_spec(s.engine, "{\"name\":\"bad\",\"target\":2}",
                                                    LAYOUT, bad[i], frame, len, &task, err,
                                                    sizeof err),
                         SL_ESPEC);
        assert_true(strncmp(err, "model_spec: ", 12) == 0);
    }
    /* "frozen" must name the layout's tensors or a module of them */
    err[0] = '\0';
    assert_int_equal(sl_engine_create_task_spec(s.engine,
                                                "{\"name\":\"fz\",\"target\":2,"
                                                "\"frozen\":[\"w\",\"nope\"]}",
                                                LAYOUT, spec, frame, len, &task, err, sizeof err),
                     SL_ECONFIG_VALUE);
    assert_non_null(strstr(err, "nope"));
    /* nothing of the refused tasks was stored */
    assert_int_equal(sl_store_get_task(s.store, s.task + 1, &rec), SL_ENOENT);
    assert_int_equal(sl_engine_create_task_spec(s.engine, "{\"name\":\"spec\",\"target\":2}",
                                                LAYOUT, spec, frame, len, &task, err, sizeof err),
                     SL_OK);
    assert_int_equal(sl_engine_create_task_spec(s.engine, "{\"name\":\"spec\",\"target\":2}",
                                                LAYOUT, spec, frame, len, &again, err, sizeof err),
                     SL_OK);
    assert_int_equal(task, again);
    free(frame);
    free(w);
    assert_int_equal(sl_store_get_task(s.store, task, &rec), SL_OK);
    assert_string_equal(rec.model_spec, spec);
    sl_store_task_free(&rec);
    mbedtls_sha256_ret((const unsigned char *)spec, strlen(spec), sha, 0);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", sha[i]);
    sim_at(&s, T0 / 1000000 + 1); /* ms: 1 ms after the start (T0 is in ns) */
    /* the task without a spec has no hash */
    assert_int_equal(sl_engine_checkin(s.engine, s.task, s.devices[0], &info, &r), SL_OK);
    assert_string_equal(r.model_spec_sha256, "");
    /* device 0 refuses: recorded once, never pooled */
    snprintf(refusing.refusal, sizeof refusing.refusal, "needs 300 MB of activations");
    assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[0], &refusing, &r), SL_OK);
    assert_string_equal(r.model_spec_sha256, hex);
    assert_false(r.selected);
    assert_true(r.refusal_changed);
    assert_int_equal(sl_store_set_refusal(s.store, task, s.devices[0], refusing.refusal), SL_OK);
    assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[0], &refusing, &r), SL_OK);
    assert_false(r.refusal_changed);
    /* the others are selected (target 2 of 3 devices, over-selection): device 0 never */
    for (int k = 0; k < 3; k++)
        for (size_t i = 1; i < 3; i++)
            assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[i], &info, &r), SL_OK);
    assert_int_equal(sl_engine_task_status(s.engine, task, &st), SL_OK);
    assert_int_equal(st.round.state, SL_ROUND_SELECTING);
    sim_at(&s, st.round.select_deadline_ms); /* the selection window closes */
    for (size_t i = 1; i < 3; i++) {
        assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[i], &info, &r), SL_OK);
        assert_true(r.selected);
    }
    assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[0], &refusing, &r), SL_OK);
    assert_false(r.selected);
    /* the refusal survives a restart: a check-in without one clears it (once) */
    sim_restart(&s);
    assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[0], &info, &r), SL_OK);
    assert_true(r.refusal_changed);
    assert_int_equal(sl_engine_checkin(s.engine, task, s.devices[0], &info, &r), SL_OK);
    assert_false(r.refusal_changed);
    sim_free(&s);
}

/* The sorted id sets' merge (the senders' mean adds each round's reporters with it): in
 * order, an id in both once, into the set's own array from the back. */
/* A stored version's parameters. */
static float *version_params(sim *s, int64_t version)
{
    sl_model_record m;
    float *w = malloc((size_t)sl_layout_params(s->layout) * sizeof *w);
    assert_int_equal(sl_store_get_model(s->store, s->task, version, &m), SL_OK);
    assert_int_equal(sl_frame_decode_model(s->layout, m.frame, m.frame_len, NULL, 0, w), SL_OK);
    sl_store_model_free(&m);
    return w;
}

/* Device @i's update for the open round as a flat frame, and split against @sup (the change
 * from @ref): one update, whose positions are three in four of @gather's coordinates from
 * the @i-th on and every 97th of the others, values from @i. */
static void split_update(sim *s, size_t i, const sl_support *gather, const sl_support *sup,
                         uint64_t ref, void **plain, size_t *plain_len, void **split,
                         size_t *split_len, uint8_t *sha)
{
    sl_task_status st = status(s);
    sl_frame_header h = {SL_FRAME_VERSION,           SL_FRAME_UPDATE,       0, 0,
                         (uint64_t)st.model_version, (uint64_t)st.round.id, 0};
    size_t d = (size_t)sl_layout_params(s->layout), k = 0, n[2] = {0, 0};
    const uint8_t *bits = sl_support_bits(gather, NULL);
    uint32_t *idx = malloc(d * sizeof *idx);
    float *val = malloc(d * sizeof *val);
    sl_sparse_tensor ts[2];
    sl_encode_params p;
    size_t w = (size_t)sl_layout_tensor(s->layout, 0)->count;
    for (size_t j = 0; j < d; j++) {
        int in = (bits[j >> 3] >> (j & 7)) & 1;
        if (in ? (j + i) % 4 != 0 : (j + i) % 97 == 0) {
            idx[k] = (uint32_t)(j < w ? j : j - w);
            val[k++] = (float)((int)((j * 7 + i) % 21) - 10) * 0.01f + 0.001f;
            n[j >= w]++;
        }
    }
    ts[0].n = n[0];
    ts[0].idx = idx;
    ts[0].val = val;
    ts[1].n = n[1];
    ts[1].idx = idx + n[0];
    ts[1].val = val + n[0];
    sl_encode_params_default(&p);
    p.flat = 1;
    assert_int_equal(sl_frame_encode_update(s->layout, &h, ts, &p, NULL, plain, plain_len), SL_OK);
    p.split = sup;
    p.ref_version = ref;
    assert_int_equal(sl_frame_encode_update(s->layout, &h, ts, &p, NULL, split, split_len), SL_OK);
    mbedtls_sha256_ret(*split, *split_len, sha, 0);
    free(idx);
    free(val);
}

typedef struct stored_frame {
    int64_t device;
    void *frame;
    size_t len;
} stored_frame;

static int find_frame(void *ctx, int64_t device_id, const void *frame, size_t len,
                      uint32_t num_samples, const uint8_t *sha256)
{
    stored_frame *f = ctx;
    (void)num_samples;
    (void)sha256;
    if (device_id == f->device) {
        f->frame = malloc(len);
        memcpy(f->frame, frame, len);
        f->len = len;
    }
    return 0;
}

/*
 * Split updates (codecs/FORMAT.md): positions coded against the change from a version the
 * device held. The engine computes that support from its stored versions (each pair read
 * once), stores the update as sent (the bytes its digest names), counts those bytes, and
 * aggregates it against the same support: the next model is the base plus the weighted mean
 * of the updates the plain frames carry. A frame against another support, or against a
 * version the store no longer keeps, is refused ("reference") and nothing is stored.
 */
/* Device @i's split update against @sup (the change from @ref), sent for the open round: the
 * engine's answer. */
static sl_accept_result send_split(sim *s, size_t i, const sl_support *sup, uint64_t ref)
{
    sl_task_status st = status(s);
    sl_accept_result res;
    void *plain, *split;
    size_t plain_len, split_len;
    uint8_t sha[32];
    split_update(s, i, sup, sup, ref, &plain, &plain_len, &split, &split_len, sha);
    assert_int_equal(((uint8_t *)split)[6], SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
    assert_int_equal(
        sl_engine_accept(s->engine, st.round.id, s->devices[i], split, split_len, 60, sha, &res),
        SL_OK);
    free(plain);
    free(split);
    return res;
}

static void test_split_updates(void **state)
{
    sim s;
    sl_task_status st;
    sl_accept_result res;
    sl_round_stats rs;
    sl_support *sup = NULL, *wrong = NULL;
    float *v1, *v2, *v3, *v4;
    size_t chosen[64], n, plain_len, split_len, d;
    void *plain, *split;
    uint8_t sha[32];
    uint64_t before;
    stored_frame got;
    double *sum, weight = 0;
    (void)state;
    /* plain FedAvg: no senders' mean, no server rate ramp */
    sim_init(&s, "split", 20, CONFIG(",\"sender_mean_rounds\":0,\"server_lr_ramp\":0"));
    d = (size_t)sl_layout_params(s.layout);
    drive(&s, 2); /* versions 1, 2 and 3 */
    n = select_round(&s, chosen);
    assert_true(n >= 7);
    st = status(&s);
    assert_int_equal(st.model_version, 3);
    v1 = version_params(&s, 1);
    v2 = version_params(&s, 2);
    v3 = version_params(&s, 3);
    assert_int_equal(sl_support_diff(s.layout, v2, v3, &sup), SL_OK);
    assert_int_equal(sl_support_diff(s.layout, v1, v3, &wrong), SL_OK);
    assert_true(sl_support_count(sup) > 0);
    sum = calloc(d, sizeof *sum);

    /* six devices that held version 2: accepted, stored as sent, the bytes sent counted */
    before = s.engine->splits.reads;
    for (size_t k = 0; k < 6; k++) {
        uint32_t samples = (uint32_t)(50 + k * 10);
        split_update(&s, chosen[k], sup, sup, 2, &plain, &plain_len, &split, &split_len, sha);
        assert_int_equal(((uint8_t *)split)[6], SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
        assert_true(split_len < plain_len);
        assert_int_equal(sl_engine_accept(s.engine, st.round.id, s.devices[chosen[k]], split,
                                          split_len, samples, sha, &res),
                         SL_OK);
        assert_true(res.accepted);
        got.device = s.devices[chosen[k]];
        got.frame = NULL;
        assert_int_equal(sl_store_foreach_update(s.store, st.round.id, find_frame, &got), SL_OK);
        assert_non_null(got.frame);
        assert_int_equal(got.len, split_len);
        assert_memory_equal(got.frame, split, split_len);
        free(got.frame);
        assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &rs), SL_OK);
        assert_int_equal(rs.round.reported, k + 1);
        if (k == 0) {
            assert_int_equal(rs.round.bytes_up, (int64_t)split_len);
            /* the same bytes again: the receipt, as for any retry */
            assert_int_equal(sl_engine_accept(s.engine, st.round.id, s.devices[chosen[0]], split,
                                              split_len, samples, sha, &res),
                             SL_OK);
            assert_true(res.accepted && res.receipt.duplicate);
        }
        /* what the model should move by: the plain frame's values, weighted */
        assert_int_equal(
            sl_frame_accumulate_update_f64(s.layout, plain, plain_len, NULL, (double)samples, sum),
            SL_OK);
        weight += samples;
        free(plain);
        free(split);
    }
    assert_int_equal(s.engine->splits.reads, before + 1); /* one pair, read once */
    assert_true(s.engine->splits.hits >= 6);

    /* coded against the change from version 1 but naming version 2: refused, not stored */
    split_update(&s, chosen[6], sup, wrong, 2, &plain, &plain_len, &split, &split_len, sha);
    assert_int_equal(((uint8_t *)split)[6], SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
    assert_int_equal(sl_engine_accept(s.engine, st.round.id, s.devices[chosen[6]], split, split_len,
                                      60, sha, &res),
                     SL_OK);
    assert_false(res.accepted);
    assert_string_equal(sl_reject_reason_name(res.reason), "reference");
    free(plain);
    free(split);

    /* the round closes at its deadline (quorum 6) from the stored split frames, read by an
     * engine that kept nothing in memory: version 4 = version 3 + the weighted mean */
    sim_restart(&s);
    sim_at(&s, st.round.report_deadline_ms);
    assert_int_equal(status(&s).model_version, 4);
    v4 = version_params(&s, 4);
    for (size_t j = 0; j < d; j++)
        assert_true(fabs((double)v4[j] - ((double)v3[j] + sum[j] / weight)) < 1e-6);

    /* against a version the store no longer keeps (retention took version 2) */
    assert_int_equal(sl_store_retain_models(s.store, s.task, 1, 0, NULL), SL_OK);
    sim_restart(&s); /* nothing kept in memory */
    n = select_round(&s, chosen);
    assert_true(n >= 1);
    st = status(&s);
    assert_int_equal(st.model_version, 4);
    sl_support_free(sup);
    sup = NULL;
    assert_int_equal(sl_support_diff(s.layout, v2, v4, &sup), SL_OK);
    res = send_split(&s, chosen[0], sup, 2);
    assert_false(res.accepted);
    assert_string_equal(sl_reject_reason_name(res.reason), "reference");
    assert_int_equal(sl_engine_round_stats(s.engine, st.round.id, &rs), SL_OK);
    assert_int_equal(rs.round.reported, 0);
    sl_support_free(sup);
    sl_support_free(wrong);
    free(sum);
    free(v1);
    free(v2);
    free(v3);
    free(v4);
    sim_free(&s);
}

/* The supports kept: the pair used least recently goes when a ninth is read, so a pair
 * every round's devices use stays however many others come and go; a kept support is
 * the one read again from the store. */
/* Retention (the task's retain_last and retain_every): after each close the bytes of the
 * versions outside the rules are retired and their records kept; the models are those of a
 * run without retention; a split update naming a retired version is refused (reason
 * "reference"), also when the support of its pair is in memory: the close reads the
 * versions again after a restart. */
typedef struct task_rounds {
    sl_round_record r[64];
    size_t n;
} task_rounds;

static int collect_round(void *ctx, const sl_round_record *r)
{
    task_rounds *t = ctx;
    if (t->n < 64)
        t->r[t->n++] = *r;
    return 0;
}

static int frame_bytes(void *ctx, int64_t device_id, const void *frame, size_t len,
                       uint32_t num_samples, const uint8_t *sha256)
{
    size_t *c = ctx;
    (void)device_id;
    (void)frame;
    (void)num_samples;
    (void)sha256;
    c[0]++;
    c[1] += len > 0;
    return 0;
}

/* Every round of @s's task that is over but the last @keep (0: all kept) has its updates'
 * records and none of their bytes; the others keep every update's bytes. */
static void check_update_retention(sim *s, size_t keep)
{
    task_rounds t;
    size_t over = 0, seen = 0;
    t.n = 0;
    assert_int_equal(sl_store_list_rounds(s->store, s->task, 0, 64, collect_round, &t), SL_OK);
    for (size_t i = 0; i < t.n; i++)
        over += t.r[i].state >= SL_ROUND_CLOSED;
    for (size_t i = 0; i < t.n; i++) { /* newest first */
        size_t c[2] = {0, 0};
        int over_i = t.r[i].state >= SL_ROUND_CLOSED;
        int gone = keep > 0 && over_i && seen >= keep;
        seen += over_i;
        assert_int_equal(sl_store_foreach_update(s->store, t.r[i].id, frame_bytes, c), SL_OK);
        assert_int_equal(c[0], t.r[i].reported); /* the records */
        assert_int_equal(c[1], gone ? 0 : c[0]);
    }
    assert_true(over >= keep + 3); /* something was retired */
}

static void test_retention(void **state)
{
    sim a, b;
    sl_task_status st;
    sl_accept_result res;
    sl_model_record m;
    sl_support *sup = NULL;
    float *v4, *v6, *v7;
    size_t chosen[64], n;
    uint8_t sa[32], sb[32];
    uint32_t retired;
    (void)state;
    sim_init(&a, "retain", 20,
             CONFIG(",\"sender_mean_rounds\":0,\"server_lr_ramp\":0,\"retain_last\":2,"
                    "\"retain_every\":4"));
    sim_init(&b, "noretain", 20, CONFIG(",\"sender_mean_rounds\":0,\"server_lr_ramp\":0"));
    drive(&a, 6); /* versions 1 to 7 */
    drive(&b, 6);
    assert_int_equal(status(&a).model_version, 7);
    assert_int_equal(status(&b).model_version, 7);
    for (int64_t v = 1; v <= 7; v++) {
        int kept = v == 1 || v == 4 || v >= 6; /* version 1, every 4th, the last 2 */
        int rc = sl_store_get_model(a.store, a.task, v, &m);
        assert_int_equal(rc, kept ? SL_OK : SL_ENOENT);
        if (rc == SL_OK)
            sl_store_model_free(&m);
        /* the record stays, with the digest of the same model as without retention */
        assert_int_equal(sl_store_get_model_info(a.store, a.task, v, &m), SL_OK);
        assert_int_equal(m.retired, !kept);
        model_sha(&b, v, sb);
        assert_memory_equal(m.sha256, sb, 32);
        sl_store_model_free(&m);
    }

    /* round 7 (base 7): the support of the pair (6, 7) in memory, then version 6 retired */
    n = select_round(&a, chosen);
    assert_true(n >= 7);
    st = status(&a);
    v4 = version_params(&a, 4);
    v6 = version_params(&a, 6);
    v7 = version_params(&a, 7);
    assert_int_equal(sl_support_diff(a.layout, v6, v7, &sup), SL_OK);
    {
        sl_support *cached = NULL;
        assert_int_equal(
            sl__splits_support(&a.engine->splits, a.store, a.task, a.layout, 6, 7, 0, &cached),
            SL_OK);
        sl_support_free(cached);
    }
    assert_int_equal(sl_store_retain_models(a.store, a.task, 1, 4, &retired), SL_OK);
    assert_int_equal(retired, 1); /* 6; 4 and 7 stay (every 4th, the open round's base) */
    {
        /* the pair is still in memory; asked to check, the splits find version 6 gone */
        sl_support *cached = NULL;
        assert_int_equal(
            sl__splits_support(&a.engine->splits, a.store, a.task, a.layout, 6, 7, 0, &cached),
            SL_OK);
        sl_support_free(cached);
        cached = NULL;
        assert_int_equal(
            sl__splits_support(&a.engine->splits, a.store, a.task, a.layout, 6, 7, 1, &cached),
            SL_ENOENT);
        assert_null(cached);
    }
    res = send_split(&a, chosen[0], sup, 6);
    assert_false(res.accepted);
    assert_string_equal(sl_reject_reason_name(res.reason), "reference");
    sl_support_free(sup);
    sup = NULL;

    /* against version 4, kept: accepted and stored as sent */
    assert_int_equal(sl_support_diff(a.layout, v4, v7, &sup), SL_OK);
    assert_true(send_split(&a, chosen[1], sup, 4).accepted);
    for (size_t k = 2; k < 7; k++) /* 6 updates: the quorum */
        assert_true(upload(&a, chosen[k], 1.0f).accepted);

    /* the round closes from the store after a restart (versions 4 and 7 read again), then the
     * close's retention: the last 2 (7, 8), every 4th (4, 8) and version 1 */
    sim_restart(&a);
    sim_at(&a, st.round.report_deadline_ms);
    assert_int_equal(status(&a).model_version, 8);
    for (int64_t v = 1; v <= 8; v++) {
        int kept = v == 1 || v == 4 || v >= 7;
        int rc = sl_store_get_model(a.store, a.task, v, &m);
        assert_int_equal(rc, kept ? SL_OK : SL_ENOENT);
        if (rc == SL_OK)
            sl_store_model_free(&m);
    }
    /* the models up to version 7 were those of the run without retention */
    model_sha(&a, 7, sa);
    model_sha(&b, 7, sb);
    assert_memory_equal(sa, sb, 32);
    drive(&a, 9);
    assert_int_equal(status(&a).model_version, 10);
    /* the updates of the rounds over but the last 2 have no bytes left; the records stay */
    check_update_retention(&a, 2);
    check_update_retention(&b, 0);
    assert_true(sl_engine_updates_retired(a.engine) > 0);
    assert_int_equal(sl_engine_updates_retired(b.engine), 0);
    free(v4);
    free(v6);
    free(v7);
    sl_support_free(sup);
    sim_free(&a);
    sim_free(&b);
}

static void test_split_cache(void **state)
{
    sim s;
    sl__splits *c;
    sl_support *sup = NULL, *again = NULL;
    uint64_t reads;
    (void)state;
    sim_init(&s, "split_cache", 20, CONFIG(""));
    drive(&s, 10); /* versions 1 to 11 */
    c = &s.engine->splits;
    reads = c->reads;
#define GET(ref)                                                                             \
    do {                                                                                     \
        assert_int_equal(sl__splits_support(c, s.store, s.task, s.layout, ref, 11, 0, &sup), \
                         SL_OK);                                                             \
        sl_support_free(sup);                                                                \
        sup = NULL;                                                                          \
    } while (0)
    for (uint64_t ref = 1; ref <= 8; ref++)
        GET(ref);
    assert_int_equal(c->reads, reads + 8);
    GET(1); /* kept: now the most recently used */
    assert_int_equal(c->reads, reads + 8);
    GET(9); /* a ninth: version 2's pair goes, not version 1's */
    assert_int_equal(c->reads, reads + 9);
    GET(1);
    assert_int_equal(c->reads, reads + 9);
    GET(2);
    assert_int_equal(c->reads, reads + 10);
#undef GET
    /* a kept support is what the store gives */
    assert_int_equal(sl__splits_support(c, s.store, s.task, s.layout, 1, 11, 0, &sup), SL_OK);
    {
        sl__splits fresh;
        sl__splits_init(&fresh);
        assert_int_equal(sl__splits_support(&fresh, s.store, s.task, s.layout, 1, 11, 0, &again),
                         SL_OK);
        assert_int_equal(fresh.reads, 1);
        assert_int_equal(sl_support_crc(again), sl_support_crc(sup));
        assert_int_equal(sl_support_count(again), sl_support_count(sup));
        sl__splits_free(&fresh);
        sl_support_free(again);
        again = NULL;
    }
    /* versions the store does not hold, and a pair that is no change to a later version */
    assert_int_equal(sl__splits_support(c, s.store, s.task, s.layout, 12, 13, 0, &again),
                     SL_ENOENT);
    assert_int_equal(sl__splits_support(c, s.store, s.task, s.layout, 11, 40, 0, &again),
                     SL_ENOENT);
    assert_int_equal(sl__splits_support(c, s.store, s.task, s.layout, 5, 5, 0, &again), SL_EINVAL);
    assert_null(again);
    sl_support_free(sup);
    sim_free(&s);
}

static void test_idset_merge(void **state)
{
    sl__idset a = {NULL, 0, 0}, b = {NULL, 0, 0};
    static const int64_t first[] = {3, 7, 9}, second[] = {1, 7, 8, 12},
                         want[] = {1, 3, 7, 8, 9, 12};
    (void)state;
    assert_int_equal(sl__idset_merge(&a, &b), SL_OK); /* both empty */
    assert_int_equal(a.n, 0);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(sl__idset_collect(&a, first[i]), SL_OK);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(sl__idset_collect(&b, second[i]), SL_OK);
    assert_int_equal(sl__idset_collect(&b, 8), SL_OK); /* again: kept once */
    assert_int_equal(sl__idset_merge(&a, &b), SL_OK);
    assert_int_equal(a.n, 6);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(a.ids[i], want[i]);
    assert_int_equal(sl__idset_merge(&a, &b), SL_OK); /* all already in */
    assert_int_equal(a.n, 6);
    sl__idset_clear(&b);
    assert_int_equal(sl__idset_merge(&a, &b), SL_OK);
    assert_int_equal(a.n, 6);
    for (int64_t id = 100; id < 300; id++) /* beyond the capacity: grown */
        assert_int_equal(sl__idset_collect(&b, id), SL_OK);
    assert_int_equal(sl__idset_merge(&a, &b), SL_OK);
    assert_int_equal(a.n, 206);
    for (size_t i = 1; i < a.n; i++)
        assert_true(a.ids[i - 1] < a.ids[i]);
    sl__idset_free(&a);
    sl__idset_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_updates),
        cmocka_unit_test(test_split_cache),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_idset_merge),
        cmocka_unit_test(test_round_lifecycle),
        cmocka_unit_test(test_model_spec_and_refusals),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_dropout_matrix),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_fedbuff),
        cmocka_unit_test(test_fednova_steps),
        cmocka_unit_test(test_reports_the_sum_takes),
        cmocka_unit_test(test_restart_while_selecting),
        cmocka_unit_test(test_come_back_for_the_draw),
        cmocka_unit_test(test_restart_loop_while_selecting),
        cmocka_unit_test(test_rest_and_busy_after_restart),
        cmocka_unit_test(test_steps_refused),
        cmocka_unit_test(test_time_budget),
        cmocka_unit_test(test_planned_round),
        cmocka_unit_test(test_selection_knows_fleet),
        cmocka_unit_test(test_adaptive_deadline),
        cmocka_unit_test(test_count_download),
        cmocka_unit_test(test_receipt_while_close_fails),
        cmocka_unit_test(test_abandoned_updates_carried),
        cmocka_unit_test(test_server_lr_ramp),
        cmocka_unit_test(test_sender_mean),
        cmocka_unit_test(test_sender_mean_partial),
        cmocka_unit_test(test_sender_mean_fresh_full),
        cmocka_unit_test(test_assignment_participation),
        cmocka_unit_test(test_participation_read_fails),
        cmocka_unit_test(test_stored_config_keeps_its_rule),
        cmocka_unit_test(test_kill_after_every_transition),
        cmocka_unit_test(test_ten_thousand_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
