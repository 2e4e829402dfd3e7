/*
 * lifecycle.c - a round's life: open, select, close (aggregate or abandon).
 * Every function runs with the engine's gate held exclusively (no accept in
 * flight) and its lock held, and persists each transition before it changes
 * the in-memory state.
 */
#include <math.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int sl__task_open_round(sl_engine *e, sl__task *t)
{
    sl_round_record r;
    int64_t now = sl__engine_now(e);
    int rc;

    memset(&r, 0, sizeof r);
    r.task_id = t->id;
    r.round_no = t->round.round_no + 1;
    r.base_version = t->version;
    r.target = t->cfg.fedbuff ? t->cfg.buffer_size : t->cfg.target;
    r.quorum = t->cfg.quorum;
    r.opened_at_ms = now;
    if (t->cfg.fedbuff) { /* no selection: every eligible device may contribute */
        r.state = SL_ROUND_TRAINING;
        r.select_deadline_ms = now;
    } else {
        r.state = SL_ROUND_SELECTING;
        r.select_deadline_ms = now + t->cfg.selection_window_ms;
    }
    r.report_deadline_ms = r.select_deadline_ms + sl__report_window(e, t, r.round_no);
    rc = sl_store_create_round(e->store, &r);
    if (rc != SL_OK)
        return rc;
    t->round = r;
    t->round_open = 1;
    sl__idset_clear(&t->pool);
    sl__idset_clear(&t->selected);
    sl__idset_clear(&t->downloaded);
    t->checked_in = 0;
    /* devices that asked during the last round are in this one's pool */
    for (size_t i = 0; i < t->waiting.n; i++)
        if (sl__idset_add(&t->pool, t->waiting.ids[i]) == SL_OK)
            t->checked_in++;
    sl__idset_clear(&t->waiting);
    t->select_idle = t->pool.n == 0;
    t->quorum_at_ms = -1;
    memset(t->rejected, 0, sizeof t->rejected);
    return SL_OK;
}

/* Seeded selection among the pool: the same pool and seed give the same set. */
int sl__task_select(sl_engine *e, sl__task *t)
{
    size_t want = (size_t)ceil((double)t->cfg.target * t->cfg.over_selection);
    size_t n = t->pool.n < want ? t->pool.n : want;
    int64_t *ids;
    uint64_t state = mix64(t->cfg.seed ^ mix64((uint64_t)t->round.round_no));
    sl_round_record r = t->round;
    int rc;

    if (t->pool.n < t->cfg.quorum) {
        /* Quorum is out of reach with this pool. Devices that were busy or asleep may still
         * come: keep selecting, a window at a time, for as long as a report deadline; then
         * give up rather than wait for the deadline of a round that cannot make quorum. */
        int64_t now = sl__engine_now(e), window = t->cfg.selection_window_ms;
        if (window > 0 && now + window <= r.opened_at_ms + t->cfg.report_deadline_ms) {
            int64_t report = r.report_deadline_ms - r.select_deadline_ms; /* the round's window */
            r.select_deadline_ms = now + window;
            r.report_deadline_ms = r.select_deadline_ms + report;
            rc = sl_store_update_round(e->store, &r);
            if (rc == SL_OK) {
                t->round = r;
                t->select_idle = t->pool.n == 0;
            }
            return rc;
        }
        return sl__task_close(e, t, "too few eligible devices checked in");
    }
    ids = malloc((t->pool.n ? t->pool.n : 1) * sizeof *ids);
    if (ids == NULL)
        return SL_ENOMEM;
    memcpy(ids, t->pool.ids, t->pool.n * sizeof *ids);
    if (t->cfg.paced_selection || t->cfg.fairness_rounds > 0) {
        /* the fleet's history orders the pool (select.c); the first n are selected */
        rc = sl__select_order(e, t, ids, t->pool.n);
        if (rc != SL_OK) {
            free(ids);
            return rc;
        }
    }
    /* otherwise a partial Fisher-Yates over the sorted pool */
    for (size_t i = 0; !(t->cfg.paced_selection || t->cfg.fairness_rounds > 0) && i < n; i++) {
        size_t j;
        int64_t tmp;
        state = mix64(state);
        j = i + (size_t)(state % (uint64_t)(t->pool.n - i));
        tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
    r.state = SL_ROUND_TRAINING;
    r.selected = (uint32_t)n;
    if (r.target > n) /* fewer than the target came: the round ends when they all reported */
        r.target = (uint32_t)n;
    if (t->cfg.time_budget) {
        /* a planned round (select.c): its window fits the selected devices' paces, and it
         * waits for all of them, since each was given the steps that fit in it */
        int64_t window = 0, now = sl__engine_now(e);
        rc = sl__budget_plan(e, t, ids, n, &window);
        if (rc != SL_OK) {
            free(ids);
            return rc;
        }
        if (window > 0) {
            int64_t from = now > r.select_deadline_ms ? now : r.select_deadline_ms;
            if (from + window < r.report_deadline_ms)
                r.report_deadline_ms = from + window;
            r.target = (uint32_t)n;
        }
    }
    rc = sl_store_select_participants(e->store, &r, ids, n);
    if (rc == SL_OK) {
        t->round = r;
        sl__idset_clear(&t->selected);
        for (size_t i = 0; i < n && rc == SL_OK; i++) {
            sl__device *d = sl__engine_device(e, ids[i]);
            rc = d ? sl__idset_add(&t->selected, ids[i]) : SL_ENOMEM;
            if (d != NULL) /* busy while the round runs; the cool-down starts at its end */
                d->cooldown_until_ms = INT64_MAX;
        }
        sl__idset_clear(&t->pool);
    }
    free(ids);
    return rc;
}

typedef struct agg_ctx {
    sl__agg *agg;
    const sl__task *t;
    sl_engine *e; /* split updates are read against the supports it computes */
    uint32_t added;
    /* FedNova: the local steps of the round being added, in device-id order */
    int64_t *dev;
    uint32_t *steps;
    size_t nsteps, cap;
    int rc;
} agg_ctx;

static int collect_steps(void *ctx, int64_t device_id, uint32_t local_steps)
{
    agg_ctx *a = ctx;
    if (a->nsteps == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int64_t *dev = realloc(a->dev, cap * sizeof *dev);
        uint32_t *steps = dev ? realloc(a->steps, cap * sizeof *steps) : NULL;
        if (dev != NULL)
            a->dev = dev;
        if (steps == NULL) {
            a->rc = SL_ENOMEM;
            return 1;
        }
        a->steps = steps;
        a->cap = cap;
    }
    a->dev[a->nsteps] = device_id;
    a->steps[a->nsteps++] = local_steps;
    return 0;
}

/* The steps device @id reported in the round being added (0: none). */
static uint32_t steps_of(const agg_ctx *a, int64_t id)
{
    size_t lo = 0, hi = a->nsteps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->dev[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a->nsteps && a->dev[lo] == id ? a->steps[lo] : 0;
}

/* One round's updates into the aggregation (replicas' partial sums where they have them);
 * FedNova first reads the steps each update reports. *@added grows by the updates added. */
static int add_round(sl_engine *e, sl__task *t, int64_t round_id, agg_ctx *ctx);

/* Rounds abandoned since the model last changed: their acknowledged
 * updates were trained from the same version as the closing round's, so
 * they are aggregated with it instead of being lost. */
#define CARRIED "acknowledged updates are carried into the next round"

typedef struct carried {
    int64_t base_version, current;
    int64_t *ids; /* newest first */
    size_t n, cap;
    int rc;
} carried;

static int collect_carried(void *ctx, const sl_round_record *r)
{
    carried *c = ctx;
    if (r->id == c->current)
        return 0;
    if (r->state != SL_ROUND_ABANDONED || r->base_version != c->base_version)
        return 1; /* the model changed before it: stop */
    if (strstr(r->error, CARRIED) == NULL)
        return 0; /* aborted by the operator, or nothing to carry */
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        int64_t *ids = realloc(c->ids, cap * sizeof *ids);
        if (ids == NULL) {
            c->rc = SL_ENOMEM;
            return 1;
        }
        c->ids = ids;
        c->cap = cap;
    }
    c->ids[c->n++] = r->id;
    return 0;
}

static int add_one(agg_ctx *a, const void *frame, size_t len, uint32_t num_samples, uint32_t steps);

/* An update the store holds but the fixed-point sum cannot take (a value at or above its
 * bound: only one stored before the engine refused such values at upload) is left out with a
 * warning, rather than holding the round's close back forever. */
static int add_update(void *ctx, int64_t device_id, const void *frame, size_t len,
                      uint32_t num_samples, const uint8_t *sha256)
{
    agg_ctx *a = ctx;
    sl_frame_header h;
    void *flat = NULL;
    size_t flat_len = 0;
    int rc;
    (void)sha256;
    if (sl_frame_peek_header(frame, len, &h) == SL_OK && (h.flags & SL_FRAME_FLAG_SPLIT)) {
        /* stored as sent: its positions against the change between two stored versions */
        rc = sl__splits_unsplit(&a->e->splits, a->e->store, a->t->id, a->t->layout,
                                &a->e->opt.limits, frame, len, &flat, &flat_len);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "engine",
                   "device %lld's stored split update does not decode against versions %llu "
                   "to %llu: %s",
                   (long long)device_id, (unsigned long long)h.ref_version,
                   (unsigned long long)h.base_version, sl_strerror(rc));
            return rc == SL_ESUPPORT ? SL_ECORRUPT : rc; /* acknowledged: never left out */
        }
        frame = flat;
        len = flat_len;
    }
    a->added++;
    rc = add_one(a, frame, len, num_samples, steps_of(a, device_id));
    free(flat);
    if (rc == SL_ERANGE) {
        sl_log(SL_LOG_WARN, "engine",
               "device %lld's stored update has a value beyond the aggregation's bound: left "
               "out of the sum",
               (long long)device_id);
        a->added--;
        return SL_OK;
    }
    return rc;
}

static int add_one(agg_ctx *a, const void *frame, size_t len, uint32_t num_samples, uint32_t steps)
{
    sl_frame_header h;
    if (num_samples == 0)
        num_samples = 1; /* a device that reports no count still counts once */
    if (a->t->cfg.fedbuff && sl_frame_peek_header(frame, len, &h) == SL_OK &&
        h.base_version <= (uint64_t)a->t->version) {
        /* FedBuff's staleness discount: 1 / sqrt(1 + versions behind) */
        double staleness = (double)((uint64_t)a->t->version - h.base_version);
        return sl__agg_add_weighted(a->agg, frame, len,
                                    (double)num_samples / sqrt(1.0 + staleness));
    }
    return sl__agg_add_steps(a->agg, frame, len, num_samples, steps);
}

static int add_round(sl_engine *e, sl__task *t, int64_t round_id, agg_ctx *ctx)
{
    uint32_t merged = 0;
    int rc = SL_OK;
    ctx->nsteps = 0;
    if (t->cfg.fednova) {
        ctx->rc = SL_OK;
        rc = sl_store_list_steps(e->store, round_id, collect_steps, ctx);
        if (rc == SL_OK || rc == 1)
            rc = ctx->rc;
    }
    if (rc == SL_OK)
        rc = sl__replica_add_round(e, t, round_id, ctx->agg, add_update, ctx, &merged);
    ctx->added += merged;
    return rc;
}

/* The task's acknowledged updates and the devices that made them (sender_mean_weight): from
 * the store's device history, ascending by device. */
typedef struct participations {
    sl__task *t;
} participations;

static int count_participation(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
                               int64_t last_round_no)
{
    sl__task *t = ((participations *)ctx)->t;
    (void)selected;
    (void)last_round_no;
    t->sm_updates += reported;
    if (reported > 0) {
        int rc = sl__idset_add(&t->sm_devices, device_id); /* ascending: appended */
        if (rc != SL_OK && rc != SL_EEXIST)
            return rc;
    }
    return 0;
}

/* Round @r's reporters not counted yet into t->sm_pending (FedBuff's buffers have no
 * participants, which the history counts: none); @fresh: how many are new to the task. */
static int new_reporters(sl_engine *e, sl__task *t, const sl_round_record *r, uint64_t *fresh)
{
    int rc = SL_OK;
    *fresh = 0;
    if (t->sm_pending_round != r->round_no) {
        sl__idset_clear(&t->sm_pending);
        t->sm_pending_round = 0;
        if (!t->cfg.fedbuff && r->round_no > t->sm_round) {
            rc = sl_store_list_reporters(e->store, r->id, sl__idset_collect, &t->sm_pending);
            if (rc != SL_OK) {
                sl__idset_clear(&t->sm_pending);
                return rc;
            }
        }
        t->sm_pending_round = r->round_no;
    }
    for (size_t i = 0; i < t->sm_pending.n; i++)
        *fresh += !sl__idset_has(&t->sm_devices, t->sm_pending.ids[i]);
    return rc;
}

/* Count round @r's reporters in, after its close committed: those its weight read (or, for an
 * abandoned round, read now), merged in order. */
static void count_round(sl_engine *e, sl__task *t, const sl_round_record *r)
{
    uint64_t fresh;
    if (!t->sm_valid || r->round_no <= t->sm_round)
        return;
    if (new_reporters(e, t, r, &fresh) != SL_OK ||
        sl__idset_merge(&t->sm_devices, &t->sm_pending) != SL_OK) {
        t->sm_valid = 0; /* read again at the next aggregate */
    } else {
        t->sm_updates += t->sm_pending.n;
        t->sm_round = r->round_no;
    }
    sl__idset_clear(&t->sm_pending);
    t->sm_pending_round = 0;
}

/* ---- the senders' mean's history, read ahead of the close (engine.c's tick, outside the lock) */

int sl__sm_wanted(const sl__task *t, int64_t *before)
{
    if (sl_sender_mean_length(&t->cfg) <= 0 || t->cfg.fedbuff || t->sm_valid || !t->round_open ||
        t->round.round_no < 1)
        return 0;
    *before = t->round.round_no;
    return 1;
}

typedef struct sm_read_ctx {
    sl__idset *devices;
    uint64_t updates;
} sm_read_ctx;

static int count_into(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
                      int64_t last_round_no)
{
    sm_read_ctx *c = ctx;
    (void)selected;
    (void)last_round_no;
    c->updates += reported;
    if (reported > 0) {
        int rc = sl__idset_add(c->devices, device_id); /* ascending: appended */
        if (rc != SL_OK && rc != SL_EEXIST)
            return rc;
    }
    return 0;
}

int sl__sm_read(sl_engine *e, int64_t task_id, int64_t before, sl__idset *devices,
                uint64_t *updates)
{
    sm_read_ctx c = {devices, 0};
    int rc = sl_store_device_history_before(e->store, task_id, before, count_into, &c);
    *updates = c.updates;
    return rc;
}

void sl__sm_install(sl_engine *e, sl__task *t, int64_t before, sl__idset *devices, uint64_t updates)
{
    sl__idset swap;
    e->history_reads++;
    if (t->sm_valid || !t->round_open || t->round.round_no != before)
        return; /* the round moved on meanwhile (its close read the history itself) */
    swap = t->sm_devices;
    t->sm_devices = *devices;
    *devices = swap; /* the caller frees what was there */
    t->sm_updates = updates;
    t->sm_round = before - 1; /* through the last round before the open one: its own reporters
                                 are read at its close (new_reporters) */
    sl__idset_clear(&t->sm_pending);
    t->sm_pending_round = 0;
    t->sm_valid = 1;
}

/* The senders' mean's weight at this aggregate (sl_sender_mean_weight): by the acknowledged
 * updates the task's devices have made on average, this round's included, as the store counts
 * them, so a restarted coordinator or another leader gets the same weight. The history is read
 * once after the task is loaded; later rounds add their reporters (count_round). 0 without the
 * senders' mean. @fresh_rule: whether sender_mean_fresh's rule applies (sl_sender_mean_fresh_at).
 */
static int sender_mean_weight(sl_engine *e, sl__task *t, const sl_round_record *r, double *weight,
                              int *fresh_rule)
{
    uint64_t updates, devices, fresh = 0;
    double mean;
    int rc = SL_OK;
    *weight = 0;
    *fresh_rule = 0;
    if (sl_sender_mean_length(&t->cfg) <= 0)
        return SL_OK;
    if (!t->sm_valid) { /* this round's stored updates included */
        participations p = {t};
        sl__idset_clear(&t->sm_devices);
        t->sm_updates = 0;
        e->history_reads++;
        rc = sl_store_device_history(e->store, t->id, count_participation, &p);
        if (rc != SL_OK)
            return rc;
        t->sm_valid = 1;
        t->sm_round = r->round_no;
        sl__idset_clear(&t->sm_pending);
        t->sm_pending_round = 0;
    }
    if ((rc = new_reporters(e, t, r, &fresh)) != SL_OK)
        return rc;
    updates = t->sm_updates + t->sm_pending.n;
    devices = t->sm_devices.n + fresh;
    mean = devices ? (double)updates / (double)devices : 1;
    *weight = sl_sender_mean_weight(&t->cfg, mean, r->round_no);
    *fresh_rule = sl_sender_mean_fresh_at(&t->cfg, mean, r->round_no);
    return SL_OK;
}

/* sender_mean_fresh: whether this aggregate takes an update from a device that the one that
 * made the held version did not (it missed that aggregate, or it is new): its residual may hold
 * mass the held version's aggregate already moved, which the senders' mean would magnify. */
static int missed_last(const sl_server_state *held, const sl__idset *took)
{
    size_t j = 0;
    for (size_t i = 0; i < took->n; i++) { /* both ascending */
        while (j < held->ndevices && held->devices[j] < took->ids[i])
            j++;
        if (j == held->ndevices || held->devices[j] != took->ids[i])
            return 1;
    }
    return 0;
}

/* sender_mean_fresh: the devices of round @round_id's acknowledged updates into @took. */
static int took_round(sl_engine *e, const sl__task *t, int64_t round_id, sl__idset *took)
{
    if (!t->cfg.sender_mean_fresh || sl_sender_mean_length(&t->cfg) <= 0 || t->cfg.fedbuff)
        return SL_OK;
    return sl_store_list_reporters(e->store, round_id, sl__idset_collect, took);
}

/* Aggregate the round's stored updates into the next model version. */
static int aggregate(sl_engine *e, sl__task *t, sl_round_record *r, sl_model_put *m, void **frame,
                     void **opt_bytes, float **next_model, sl_server_state *next_opt,
                     uint8_t sha[32], uint32_t *carried_count)
{
    double *delta = NULL;
    sl__agg *agg = NULL;
    agg_ctx ctx;
    uint32_t count = 0;
    size_t flen = 0, olen = 0;
    sl__idset took = {NULL, 0, 0}; /* sender_mean_fresh: the devices this aggregate takes */
    uint8_t *carried_bits = NULL;
    int fresh = t->cfg.sender_mean_fresh && sl_sender_mean_length(&t->cfg) > 0 && !t->cfg.fedbuff;
    int rc;

    *frame = *opt_bytes = NULL;
    *next_model = NULL;
    memset(next_opt, 0, sizeof *next_opt);
    rc = sl__agg_begin(&t->cfg, t->layout, &agg);
    if (rc != SL_OK)
        return rc;
    memset(&ctx, 0, sizeof ctx);
    ctx.agg = agg;
    ctx.t = t;
    ctx.e = e;
    if (!t->cfg.fedbuff) { /* abandoned rounds of this version first, oldest first */
        carried c;
        memset(&c, 0, sizeof c);
        c.base_version = r->base_version;
        c.current = r->id;
        rc = sl_store_list_rounds(e->store, t->id, 0, UINT32_MAX, collect_carried, &c);
        rc = c.rc != SL_OK ? c.rc : rc < 0 ? rc : SL_OK;
        for (size_t i = c.n; i-- > 0 && rc == SL_OK;) {
            rc = add_round(e, t, c.ids[i], &ctx);
            if (rc == SL_OK)
                rc = took_round(e, t, c.ids[i], &took);
        }
        *carried_count = ctx.added;
        free(c.ids);
    }
    if (rc == SL_OK) /* device-id order; other replicas' partial sums where they have them */
        rc = add_round(e, t, r->id, &ctx);
    if (rc == SL_OK)
        rc = took_round(e, t, r->id, &took);
    delta = malloc((t->n ? t->n : 1) * sizeof *delta);
    *next_model = malloc((t->n ? t->n : 1) * sizeof **next_model);
    if (rc == SL_OK && (delta == NULL || *next_model == NULL))
        rc = SL_ENOMEM;
    if (rc == SL_OK) { /* the senders' mean's weight, by the devices' participations */
        double weight;
        int fresh_rule;
        rc = sender_mean_weight(e, t, r, &weight, &fresh_rule);
        if (rc == SL_OK)
            rc = sl__agg_sender_mean(agg, weight);
        /* sender_mean_fresh: after an aggregate this one's devices were not all in, the
         * coordinates that aggregate carried are averaged over all updates (README: Fast
         * starts); the held version's state names them (none for the initial model). Under
         * sender_mean_partial only where the fade is longer than its floor */
        if (rc == SL_OK && fresh && fresh_rule && weight > 0 && t->opt.carried != NULL &&
            t->opt.n == t->n && missed_last(&t->opt, &took))
            rc = sl__agg_sender_mean_skip(agg, t->opt.carried);
    }
    if (rc == SL_OK)
        rc = sl__agg_finish(agg, mix64(t->cfg.seed ^ 0x5eedu ^ (uint64_t)r->round_no), delta,
                            &count);
    if (rc == SL_OK && fresh) { /* what this aggregate carried, for the next one */
        if ((carried_bits = malloc((t->n + 7) / 8 + 1)) == NULL)
            rc = SL_ENOMEM;
        else
            rc = sl__agg_carried(agg, carried_bits);
    }
    if (rc == SL_OK) {
        memcpy(*next_model, t->model, t->n * sizeof(float));
        if (t->opt.n > 0) { /* continue from the committed optimiser state, on a copy */
            void *tmp;
            size_t tlen;
            rc = sl_server_state_encode(&t->opt, &tmp, &tlen);
            if (rc == SL_OK) {
                rc = sl_server_state_decode(tmp, tlen, t->n, next_opt);
                free(tmp);
            }
        }
    }
    if (rc == SL_OK) { /* at this aggregate's server learning rate (a ramp: by the version) */
        sl_task_config *cfg = malloc(sizeof *cfg);
        if (cfg == NULL) {
            rc = SL_ENOMEM;
        } else {
            *cfg = t->cfg;
            cfg->server_lr = sl_server_lr_at(&t->cfg, t->version);
            rc = sl_server_apply(cfg, delta, t->n, *next_model, next_opt);
            free(cfg);
        }
    }
    if (rc == SL_OK && fresh) { /* stored with the version it makes */
        free(next_opt->carried);
        free(next_opt->devices);
        next_opt->n = t->n;
        next_opt->carried = carried_bits;
        next_opt->devices = took.ids;
        next_opt->ndevices = took.n;
        carried_bits = NULL;
        memset(&took, 0, sizeof took);
    }
    if (rc == SL_OK)
        rc = sl_frame_encode_model(t->layout, *next_model, (uint64_t)(t->version + 1), 3, frame,
                                   &flen);
    if (rc == SL_OK && next_opt->n > 0)
        rc = sl_server_state_encode(next_opt, opt_bytes, &olen);
    if (rc == SL_OK && mbedtls_sha256_ret(*frame, flen, sha, 0) != 0)
        rc = SL_EIO;
    if (rc == SL_OK) {
        m->task_id = t->id;
        m->version = t->version + 1;
        m->parent = t->version;
        m->frame = *frame;
        m->frame_len = flen;
        m->sha256 = sha;
        m->metrics = NULL;
        m->opt_state = *opt_bytes;
        m->opt_state_len = olen;
        r->reported = count - *carried_count; /* this round's own reports */
    }
    sl__agg_free(agg);
    sl__idset_free(&took);
    free(carried_bits);
    free(ctx.dev);
    free(ctx.steps);
    free(delta);
    return rc;
}

/* The round ended: its participants rest for the cool-down from now. */
static void release_participants(sl_engine *e, sl__task *t, int64_t now)
{
    for (size_t i = 0; i < t->selected.n; i++) {
        sl__device *d = sl__engine_device(e, t->selected.ids[i]);
        if (d != NULL)
            d->cooldown_until_ms = now + t->cfg.cooldown_ms;
    }
}

/* Retention after a close (the task's retain_last / retain_every), before the next round
 * opens: every update the store holds was aggregated by this close or the ones before (an
 * abandoned round's carried updates by the next close of its version), so no version a
 * stored split update is read against is retired under it; an accept checks that the
 * versions a split update names are not retired (engine.c). A failure is logged: the next
 * close retires what this one left. */
static void retain_after_close(sl_engine *e, sl__task *t)
{
    uint32_t retired = 0;
    uint64_t updates = 0;
    int rc;
    /* the updates of the rounds over, but the last retain_last of them: each was aggregated
     * by its close, or carried into this one (an abandoned round of its version), and no close
     * reads them again */
    rc = sl_store_retain_updates(e->store, t->id, t->cfg.retain_last, &updates);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, "engine", "task %lld: retiring old rounds' updates failed: %s",
               (long long)t->id, sl_strerror(rc));
    e->updates_retired += updates; /* lock held, as for every close */
    rc = sl_store_retain_models(e->store, t->id, t->cfg.retain_last, t->cfg.retain_every, &retired);
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "engine", "task %lld: retiring old model versions failed: %s",
               (long long)t->id, sl_strerror(rc));
        return;
    }
    e->models_retired += retired; /* lock held, as for every close */
    if (retired > 0)
        sl_log(SL_LOG_INFO, "engine",
               "task %lld: %u model version(s) retired (keeping the last %u%s)", (long long)t->id,
               retired, t->cfg.retain_last,
               t->cfg.retain_every > 0 ? " and every retain_every-th" : "");
}

int sl__task_close(sl_engine *e, sl__task *t, const char *abandon_reason)
{
    int by_operator = abandon_reason != NULL && strcmp(abandon_reason, SL__ABORTED) == 0;
    sl_round_record r = t->round;
    sl_model_put m;
    sl_server_state next_opt;
    float *next_model = NULL;
    void *frame = NULL, *opt_bytes = NULL;
    uint64_t stored = 0;
    uint32_t carried_count = 0;
    uint8_t sha[32];
    int rc;

    r.closed_at_ms = sl__engine_now(e);
    r.downloads = (uint32_t)t->downloaded.n; /* whose downloads bytes_down counts */
    sl__replica_close_downloads(e, t, &r);   /* with replicas: every replica's */
    rc = sl_store_count_updates(e->store, r.id, &stored);
    if (rc != SL_OK)
        return rc;
    if (abandon_reason == NULL && (stored < t->cfg.quorum || stored == 0) &&
        t->round.state != SL_ROUND_AGGREGATING) {
        /* short of the quorum: the round moves on in the store before the count it is abandoned
         * by, so that an update another replica stores meanwhile is counted (carried into the
         * next round) or refused as late, never acknowledged and then left out. A crash from
         * here on closes it again from AGGREGATING. */
        r.state = SL_ROUND_AGGREGATING;
        if ((rc = sl_store_update_round(e->store, &r)) != SL_OK)
            return rc;
        t->round.state = SL_ROUND_AGGREGATING;
        if ((rc = sl_store_count_updates(e->store, r.id, &stored)) != SL_OK)
            return rc;
    }
    if (abandon_reason == NULL && (stored < t->cfg.quorum || stored == 0))
        abandon_reason = "quorum not met by the report deadline";
    if (abandon_reason != NULL) {
        int last = t->cfg.rounds > 0 && (uint64_t)r.round_no >= t->cfg.rounds;
        r.state = SL_ROUND_ABANDONED;
        if (stored == 0 || t->cfg.fedbuff || by_operator)
            snprintf(r.error, sizeof r.error, "%s", abandon_reason);
        else if (last)
            snprintf(r.error, sizeof r.error,
                     "%s; the task ends: its %llu acknowledged updates "
                     "are not aggregated",
                     abandon_reason, (unsigned long long)stored);
        else /* the record says so, and aggregate() of the next round of this version reads it */
            snprintf(r.error, sizeof r.error, "%s; its %llu %s", abandon_reason,
                     (unsigned long long)stored, CARRIED);
        r.dropped = r.selected > r.reported ? r.selected - r.reported : 0;
        rc = sl_store_close_round(e->store, &r, NULL); /* the model does not change */
        if (rc != SL_OK)
            return rc;
        release_participants(e, t, r.closed_at_ms);
        count_round(e, t, &r); /* its updates count for the senders' mean all the same */
        t->round = r;
        t->round_open = 0;
        /* the budget of rounds counts abandoned ones too (as a restart does): a task whose
         * devices are all gone ends instead of opening rounds for ever */
        if (t->cfg.rounds > 0 && (uint64_t)r.round_no >= t->cfg.rounds)
            t->finished = 1;
        return SL_OK;
    }
    /* AGGREGATING is persisted first: a crash from here on redoes the aggregation */
    if (t->round.state != SL_ROUND_AGGREGATING) {
        r.state = SL_ROUND_AGGREGATING;
        rc = sl_store_update_round(e->store, &r);
        if (rc != SL_OK)
            return rc;
        t->round.state = SL_ROUND_AGGREGATING;
    }
    rc = aggregate(e, t, &r, &m, &frame, &opt_bytes, &next_model, &next_opt, sha, &carried_count);
    if (rc == SL_OK) {
        r.state = SL_ROUND_CLOSED;
        r.dropped = r.selected > r.reported ? r.selected - r.reported : 0;
        rc = sl_store_close_round(e->store, &r, &m); /* model and close: one transaction */
    }
    if (rc == SL_OK) {
        free(t->model);
        t->model = next_model;
        next_model = NULL;
        t->version = m.version;
        sl_server_state_free(&t->opt);
        t->opt = next_opt;
        memset(&next_opt, 0, sizeof next_opt);
        release_participants(e, t, r.closed_at_ms);
        count_round(e, t, &r); /* the senders' mean's counts, now that the close committed */
        /* what downloads weigh and how long rounds train, from the closed rounds the store
         * keeps (this one now among them): a restarted coordinator plans the same */
        if (sl__task_load_paces(e, t) != SL_OK)
            sl_log(SL_LOG_WARN, "engine",
                   "task %lld: reading the paces of closed rounds failed; "
                   "the last ones stay",
                   (long long)t->id);
        t->round = r;
        t->round_open = 0;
        if (t->cfg.rounds > 0 && (uint64_t)r.round_no >= t->cfg.rounds)
            t->finished = 1;
        if (t->cfg.retain_last > 0)
            retain_after_close(e, t);
    }
    if (rc != SL_OK)
        t->sm_valid = 0; /* the senders' mean's counts are read again at the retry */
    sl_server_state_free(&next_opt);
    free(next_model);
    free(frame);
    free(opt_bytes);
    return rc;
}

int sl__task_advance(sl_engine *e, sl__task *t, int64_t *next_deadline)
{
    int64_t now = sl__engine_now(e);
    int rc = SL_OK;

    if (!t->round_open && !t->finished)
        rc = sl__task_open_round(e, t);
    if (rc == SL_OK && t->round_open && t->round.state == SL_ROUND_SELECTING &&
        now >= t->round.select_deadline_ms)
        rc = sl__task_select(e, t);
    if (rc == SL_OK && t->round_open &&
        (t->round.state == SL_ROUND_AGGREGATING ||
         (t->round.state == SL_ROUND_TRAINING &&
          (t->round.reported >= t->round.target || now >= t->round.report_deadline_ms))))
        rc = sl__task_close(e, t, NULL);
    /* a round that just ended opens the next one at once */
    if (rc == SL_OK && !t->round_open && !t->finished)
        rc = sl__task_open_round(e, t);
    if (t->round_open && next_deadline != NULL) {
        int64_t d = t->round.state == SL_ROUND_SELECTING ? t->round.select_deadline_ms
                                                         : t->round.report_deadline_ms;
        if (d < *next_deadline)
            *next_deadline = d;
    }
    return rc;
}
