/*
 * engine.c - the engine's API: open (with recovery), tasks, check-in and
 * selection pools, accepting updates, ticks, statistics.
 *
 * Locking: `gate` is a read-write lock that accepts hold shared for their
 * whole validate-store-count sequence; closing a round takes it exclusive,
 * so the set of acknowledged updates a round aggregates is exactly the set
 * stored before it closed. `lock` protects the in-memory state and is held
 * only briefly by accepts (never across their durable write). Order: gate,
 * then lock.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "coord_int.h"
#include "starling/contract.h"

void sl_engine_options_default(sl_engine_options *o)
{
    memset(o, 0, sizeof *o);
    o->retry_after_min_ms = 1000;
    o->retry_after_max_ms = 300000;
    o->lease_ms = 5000;
}

/* ---- opening: the stored tasks (tasks.c loads each) ------------------------------------------ */

static int load_task(sl_engine *e, int64_t task_id, char *err, size_t errcap)
{
    sl__task *t = NULL;
    int rc = sl__engine_load_task(e, task_id, &t, err, errcap);
    if (rc == SL_OK && (rc = sl__engine_add_task(e, t)) != SL_OK)
        sl__task_free(t);
    return rc;
}

typedef struct open_ctx {
    sl_engine *e;
    char *err;
    size_t errcap;
} open_ctx;

static int load_one(void *ctx, int64_t task_id)
{
    open_ctx *o = ctx;
    sl_model_record m;
    int rc = sl_store_get_model(o->e->store, task_id, 0, &m);
    if (rc == SL_ENOENT)
        return SL_OK; /* created but its initial model never stored: creating it again completes it
                       */
    if (rc != SL_OK)
        return rc;
    sl_store_model_free(&m);
    return load_task(o->e, task_id, o->err, o->errcap);
}

int sl_engine_open(sl_store *store, const sl_engine_options *o, sl_engine **out, char *err,
                   size_t errcap)
{
    char dummy[8];
    sl_engine *e;
    open_ctx ctx;
    int64_t next;
    int rc;

    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (store == NULL || out == NULL)
        return SL_EINVAL;
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return SL_ENOMEM;
    e->store = store;
    if (o != NULL)
        e->opt = *o;
    else
        sl_engine_options_default(&e->opt);
    if (e->opt.replica != NULL) {
        size_t n = strlen(e->opt.replica);
        if (n == 0 || n >= sizeof e->replica || e->opt.lease_ms < 100) {
            snprintf(err, errcap, "replica: a name of 1 to %zu bytes and a lease of 100 ms or more",
                     sizeof e->replica - 1);
            free(e);
            return SL_EINVAL;
        }
        memcpy(e->replica, e->opt.replica, n + 1);
        e->opt.replica = e->replica;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->partial_lock, NULL);
    pthread_rwlock_init(&e->gate, NULL);
    sl__splits_init(&e->splits);
    ctx.e = e;
    ctx.err = err;
    ctx.errcap = errcap;
    /* recovery: every task with its model, optimiser state and open round */
    rc = sl_store_list_tasks(store, load_one, &ctx);
    /* rounds whose deadlines passed while we were down are settled now */
    if (rc == SL_OK)
        rc = sl_engine_tick(e, &next);
    if (rc != SL_OK) {
        if (err[0] == '\0')
            snprintf(err, errcap, "recovery failed: %s", sl_strerror(rc));
        sl_engine_close(e);
        return rc;
    }
    *out = e;
    return SL_OK;
}

void sl_engine_close(sl_engine *e)
{
    if (e == NULL)
        return;
    sl__replica_free(e); /* ended rounds' downloads not stored yet: a last try */
    for (size_t i = 0; i < e->ntasks; i++)
        sl__task_free(e->tasks[i]);
    free(e->tasks);
    free(e->devices);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->partial_lock);
    pthread_rwlock_destroy(&e->gate);
    sl__splits_free(&e->splits);
    free(e);
}

int sl_engine_create_task(sl_engine *e, const char *config_json, const char *layout_text,
                          const void *model_frame, size_t frame_len, int64_t *task_id, char *err,
                          size_t errcap)
{
    return sl_engine_create_task_spec(e, config_json, layout_text, NULL, model_frame, frame_len,
                                      task_id, err, errcap);
}

int sl_engine_create_task_spec(sl_engine *e, const char *config_json, const char *layout_text,
                               const char *model_spec, const void *model_frame, size_t frame_len,
                               int64_t *task_id, char *err, size_t errcap)
{
    return sl_engine_create_task_docs(e, config_json, layout_text, model_spec, NULL, model_frame,
                                      frame_len, task_id, err, errcap);
}

int sl_engine_create_task_docs(sl_engine *e, const char *config_json, const char *layout_text,
                               const char *model_spec, const char *data_contract,
                               const void *model_frame, size_t frame_len, int64_t *task_id,
                               char *err, size_t errcap)
{
    char dummy[8], *canonical = NULL;
    sl_task_config cfg;
    sl_layout *layout = NULL;
    float *params = NULL;
    uint8_t sha[32];
    int64_t id = 0;
    sl_model_put m;
    int rc;

    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (e == NULL || config_json == NULL || layout_text == NULL || model_frame == NULL ||
        task_id == NULL)
        return SL_EINVAL;
    rc = sl_task_config_parse(config_json, strlen(config_json), &cfg, err, errcap);
    if (rc != SL_OK)
        return rc;
    rc = sl_layout_parse(layout_text, strlen(layout_text), &layout);
    if (rc != SL_OK) {
        snprintf(err, errcap, "layout: %s", sl_strerror(rc));
        return rc;
    }
    /* "frozen" names what the layout has (422 config otherwise, nothing stored) */
    if ((rc = sl_task_config_check_layout(&cfg, layout, err, errcap)) != SL_OK)
        goto done;
    if (model_spec != NULL &&
        (rc = sl__spec_check_layout(model_spec, layout, err, errcap)) != SL_OK)
        goto done;
    if (data_contract != NULL) {
        char why[400];
        sl_contract *dc = NULL;
        rc = sl_contract_parse(data_contract, strlen(data_contract), &dc, why, sizeof why);
        sl_contract_free(dc);
        if (rc != SL_OK) {
            snprintf(err, errcap, "data_contract: %s", why);
            rc = SL_ESPEC;
            goto done;
        }
    }
    params = malloc((size_t)sl_layout_params(layout) * sizeof *params);
    rc =
        params ? sl_frame_decode_model(layout, model_frame, frame_len, NULL, 0, params) : SL_ENOMEM;
    if (rc != SL_OK) {
        snprintf(err, errcap, "initial model: %s", sl_strerror(rc));
        goto done;
    }
    if (mbedtls_sha256_ret(model_frame, frame_len, sha, 0) != 0) {
        rc = SL_EIO;
        goto done;
    }
    rc = sl_task_config_to_json(&cfg, &canonical);
    if (rc == SL_OK)
        rc = sl_store_create_task_docs(e->store, cfg.name, canonical, layout_text, model_spec,
                                       data_contract, &id);
    if (rc == SL_OK) {
        memset(&m, 0, sizeof m);
        m.task_id = id;
        m.version = 1;
        m.frame = model_frame;
        m.frame_len = frame_len;
        m.sha256 = sha;
        rc = sl_store_put_model(e->store, &m);
    }
    if (rc != SL_OK) {
        snprintf(err, errcap, "cannot store the task: %s", sl_strerror(rc));
        goto done;
    }
    pthread_rwlock_wrlock(&e->gate);
    pthread_mutex_lock(&e->lock);
    if (sl__engine_find_task(e, id) == NULL)
        rc = load_task(e, id, err, errcap);
    if (rc == SL_OK && sl__engine_leads(e)) /* else the leader opens its first round */
        rc = sl__task_advance(e, sl__engine_find_task(e, id), NULL);
    pthread_mutex_unlock(&e->lock);
    pthread_rwlock_unlock(&e->gate);
    if (rc == SL_OK)
        *task_id = id;
done:
    free(canonical);
    free(params);
    sl_layout_free(layout);
    return rc;
}

/* ---- check-in -------------------------------------------------------------- */

static int eligible(const sl__task *t, const sl__device *d, const sl_checkin_info *info,
                    int64_t now)
{
    if (info->num_samples < t->cfg.min_samples || info->num_samples < t->contract_min_samples ||
        now < d->cooldown_until_ms)
        return 0;
    if (t->cfg.required_caps[0] != '\0') {
        /* a whole comma-separated name */
        size_t n = strlen(t->cfg.required_caps);
        const char *p = info->capabilities;
        while ((p = strstr(p, t->cfg.required_caps)) != NULL) {
            int start = p == info->capabilities || p[-1] == ',';
            int end = p[n] == '\0' || p[n] == ',';
            if (start && end)
                return 1;
            p += n;
        }
        return 0;
    }
    return 1;
}

/* When the open round is likely to close: the report deadline, or sooner when closed rounds
 * have been reaching their target early (the moving average of their training time). */
static int64_t expected_close(const sl__task *t, int64_t now)
{
    int64_t at = t->round.report_deadline_ms;
    if (t->round.state == SL_ROUND_TRAINING && t->round.reported > 0 &&
        now > t->round.select_deadline_ms && t->round.target > t->round.reported) {
        /* reports so far, extrapolated to the target: a guess even before any round closed */
        double spent = (double)(now - t->round.select_deadline_ms);
        int64_t lin = t->round.select_deadline_ms +
                      (int64_t)(spent * (double)t->round.target / (double)t->round.reported);
        if (lin < at)
            at = lin;
    }
    if (t->train_ms_ewma > 0 &&
        (t->round.state == SL_ROUND_SELECTING || t->round.state == SL_ROUND_TRAINING)) {
        int64_t guess = t->round.select_deadline_ms + (int64_t)t->train_ms_ewma;
        if (guess < now)
            guess = now;
        if (guess < at)
            at = guess;
    }
    return at;
}

/* Pace steering: come back at @at plus a jitter spread over @spread, no sooner than @min_ms,
 * no later than retry_after_max_ms. */
static int64_t retry_at(sl_engine *e, int64_t now, int64_t at, int64_t spread, int64_t min_ms)
{
    int64_t wait;
    e->rng ^= e->rng << 13;
    e->rng ^= e->rng >> 7;
    e->rng ^= e->rng << 17;
    wait = at - now + (spread > 0 ? (int64_t)(e->rng % (uint64_t)spread) : 0);
    if (wait < min_ms)
        wait = min_ms;
    if (wait > e->opt.retry_after_max_ms)
        wait = e->opt.retry_after_max_ms;
    return wait;
}

/* The soonest a device of the pool may come back for the draw's answer: SL__RENDEZVOUS_MIN_MS
 * while the draw is due (until the spread after the window's end), retry_after_min_ms once it
 * is late (a leader replica gone, a coordinator restarting), so that a late draw is not polled
 * for every 50 ms. */
static int64_t rendezvous_min(const sl_engine *e, const sl__task *t, int64_t now)
{
    return now <= t->round.select_deadline_ms + sl__select_spread_ms(&t->cfg)
               ? SL__RENDEZVOUS_MIN_MS
               : e->opt.retry_after_min_ms;
}

/* The budget of a selected device: the pace it reports now (kept in the store, so that a
 * restarted coordinator, or another replica, knows it) or, when it reports none, the one it
 * reported last. */
static uint32_t budget_for(sl_engine *e, const sl_task_config *cfg, uint64_t params,
                           uint64_t down_bytes, int64_t task_id, int64_t device_id,
                           const sl_checkin_info *info, int64_t now, int64_t deadline_ms)
{
    sl_store_pace pace = {info->step_ms, info->up_bps, info->down_bps, 0};
    int rc;
    if (pace.step_ms > 0 && isfinite(pace.step_ms) && isfinite(pace.up_bps) && pace.up_bps >= 0 &&
        isfinite(pace.down_bps) && pace.down_bps >= 0) {
        if ((rc = sl_store_put_pace(e->store, task_id, device_id, &pace)) != SL_OK)
            sl_log(SL_LOG_WARN, "engine", "keeping the pace of device %lld: %s",
                   (long long)device_id, sl_strerror(rc));
    } else if (sl_store_get_pace(e->store, task_id, device_id, &pace) != SL_OK) {
        memset(&pace, 0, sizeof pace);
    }
    return sl_engine_budget_steps(cfg, params, down_bytes, now, deadline_ms, pace.step_ms,
                                  pace.up_bps, pace.down_bps);
}

int sl_engine_checkin(sl_engine *e, int64_t task_id, int64_t device_id, const sl_checkin_info *info,
                      sl_checkin_result *out)
{
    sl_checkin_result r;
    sl__task *t;
    sl__device *d;
    int64_t now;
    int relay = 0, prc;   /* relay: record the check-in in the store for the leader's selection */
    int budget = 0;       /* a selected device of a task with time budgets */
    int64_t round_no = 0; /* a selected device's round: its participations before it */
    int64_t budget_end = 0;
    sl_task_config cfg;
    uint64_t params = 0, down_bytes = 0;

    if (e == NULL || info == NULL || out == NULL || device_id <= 0)
        return SL_EINVAL;
    if (e->rng == 0)
        e->rng = 0x2545F4914F6CDD1DULL;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&e->lock);
    t = sl__engine_find_task(e, task_id);
    if (t == NULL) {
        pthread_mutex_unlock(&e->lock);
        return SL_ENOENT;
    }
    now = sl__engine_now(e);
    d = sl__engine_device(e, device_id);
    if (d == NULL) {
        pthread_mutex_unlock(&e->lock);
        return SL_ENOMEM;
    }
    r.task_id = t->id;
    memcpy(r.model_spec_sha256, t->spec_sha256, sizeof r.model_spec_sha256);
    memcpy(r.data_contract_sha256, t->contract_sha256, sizeof r.data_contract_sha256);
    if (info->refusal[0] != '\0') {
        /* the device cannot train this model: never selected until it says otherwise; it
         * checks in rarely (its limits or the model would have to change) */
        r.refusal_changed = sl__idset_add(&t->refused, device_id) == SL_OK;
        (void)sl__idset_del(&t->pool, device_id);
        (void)sl__idset_del(&t->waiting, device_id);
        r.retry_after_ms = e->opt.retry_after_max_ms;
        pthread_mutex_unlock(&e->lock);
        *out = r;
        return SL_OK;
    }
    r.refusal_changed = sl__idset_del(&t->refused, device_id) == SL_OK;
    if (!t->round_open) {
        r.retry_after_ms = e->opt.retry_after_max_ms;
    } else if (t->cfg.fedbuff) {
        if (eligible(t, d, info, now)) {
            r.selected = 1;
            if (sl__idset_add(&t->selected, device_id) == SL_OK)
                t->checked_in++;
        } else {
            r.retry_after_ms =
                retry_at(e, now, now, t->cfg.selection_window_ms, e->opt.retry_after_min_ms);
        }
    } else if (t->round.state == SL_ROUND_SELECTING && !sl__engine_leads(e)) {
        /* another replica leads: it draws from the check-ins relayed through the store */
        relay = eligible(t, d, info, now);
        r.retry_after_ms = retry_at(e, now, t->round.select_deadline_ms,
                                    sl__select_spread_ms(&t->cfg), rendezvous_min(e, t, now));
    } else if (t->round.state == SL_ROUND_SELECTING) {
        /* join the pool; the draw happens when the window closes */
        if (sl__idset_has(&t->pool, device_id) ||
            (eligible(t, d, info, now) && sl__idset_add(&t->pool, device_id) == SL_OK)) {
            if (t->select_idle) {
                /* the first device of an empty pool: the whole window starts now (within
                 * the round's bound), so devices that come together are drawn together */
                int64_t limit = t->round.opened_at_ms + t->cfg.report_deadline_ms;
                int64_t at = now + t->cfg.selection_window_ms;
                t->select_idle = 0;
                if (at > limit)
                    at = limit;
                if (at > t->round.select_deadline_ms) {
                    int64_t report = t->round.report_deadline_ms - t->round.select_deadline_ms;
                    t->round.select_deadline_ms = at;
                    t->round.report_deadline_ms = at + report;
                }
            }
            if (!sl__idset_has(&t->selected, device_id))
                t->checked_in++;
            r.retry_after_ms = retry_at(e, now, t->round.select_deadline_ms,
                                        sl__select_spread_ms(&t->cfg), rendezvous_min(e, t, now));
        } else {
            r.retry_after_ms = retry_at(e, now, expected_close(t, now), t->cfg.selection_window_ms,
                                        e->opt.retry_after_min_ms);
        }
    } else if (sl__idset_has(&t->selected, device_id)) {
        r.selected = 1; /* idempotent: the same assignment again */
        /* a device that already reported waits for the next round: about when this one closes */
        r.retry_after_ms = retry_at(e, now, expected_close(t, now), t->cfg.selection_window_ms,
                                    e->opt.retry_after_min_ms);
    } else {
        if (t->round.state == SL_ROUND_TRAINING && eligible(t, d, info, now)) {
            if (sl__engine_leads(e))
                (void)sl__idset_add(&t->waiting, device_id); /* ENOMEM: it just joins later */
            else
                relay = 1; /* for the leader's next selection */
        }
        /* spread the next check-ins over the next round's selection window: it opens at the
         * report deadline at the latest, and about when rounds have been closing if they
         * close early (the target reached), so waiting devices are back for its selection */
        r.retry_after_ms = retry_at(e, now, expected_close(t, now), t->cfg.selection_window_ms,
                                    e->opt.retry_after_min_ms);
    }
    if (r.selected) {
        r.round_id = t->round.id;
        r.round_no = t->round.round_no;
        r.model_version = t->version;
        r.report_deadline_ms = t->round.report_deadline_ms;
        round_no = t->round.round_no;
        if (t->cfg.time_budget) {
            budget = 1;
            cfg = t->cfg;
            params = t->n;
            down_bytes = (uint64_t)t->down_bytes_ewma;
            /* a planned round (every selected device awaited) runs to its deadline; else
             * the time it will likely run: its deadline, or sooner when rounds have been
             * closing at their target earlier (a device trained past it would be late) */
            budget_end = !t->cfg.fedbuff && t->round.target >= t->round.selected
                             ? t->round.report_deadline_ms
                             : expected_close(t, now);
        }
    }
    pthread_mutex_unlock(&e->lock);
    /* the rounds of this task that selected the device before this one, as the store's
     * participants say (the density warm-up counts from it: 0 in its first round, after a
     * restart and at any replica alike); outside the lock, as the pace below. The check-in has
     * already changed the engine's state, so a failed read does not fail it: the assignment
     * goes out with participation 0 (the warm-up's first density: more bytes, nothing lost) */
    if (round_no > 0 && (prc = sl_store_device_rounds(e->store, task_id, device_id, round_no,
                                                      &r.participation)) != SL_OK) {
        r.participation = 0;
        sl_log(SL_LOG_WARN, "engine", "participations of device %lld: %s (0 assumed)",
               (long long)device_id, sl_strerror(prc));
    }
    if (budget) /* outside the lock: the pace is read from or written to the store */
        r.max_steps =
            budget_for(e, &cfg, params, down_bytes, task_id, device_id, info, now, budget_end);
    /* durable before the answer, as the leader's pool is not: a lost relay only means the
     * device is drawn at a later selection */
    if (relay && (prc = sl_store_put_checkin(e->store, task_id, device_id)) != SL_OK)
        sl_log(SL_LOG_WARN, "replica", "relaying the check-in of device %lld: %s",
               (long long)device_id, sl_strerror(prc));
    *out = r;
    return SL_OK;
}

/* ---- accepting updates ---------------------------------------------------- */

static const char *const reason_names[] = {
    "none", "unknown_round",      "late",  "not_selected", "layout", "malformed", "nonfinite",
    "norm", "duplicate_conflict", "stale", "range",        "steps",  "reference",
};

const char *sl_reject_reason_name(sl_reject_reason r)
{
    if ((unsigned)r >= sizeof reason_names / sizeof reason_names[0])
        return "?";
    return reason_names[r];
}

uint32_t sl_engine_steps_limit(const sl_task_config *cfg)
{
    if (cfg != NULL && cfg->time_budget && cfg->max_local_steps > 0)
        return cfg->max_local_steps;
    return SL_ENGINE_MAX_STEPS;
}

static sl__task *task_of_round(sl_engine *e, int64_t round_id)
{
    for (size_t i = 0; i < e->ntasks; i++)
        if (e->tasks[i]->round_open && e->tasks[i]->round.id == round_id)
            return e->tasks[i];
    return NULL;
}

int sl_engine_update_limit(sl_engine *e, int64_t round_id, uint64_t *max_bytes)
{
    sl__task *t;
    int rc = SL_ENOENT;
    if (e == NULL || max_bytes == NULL)
        return SL_EINVAL;
    pthread_mutex_lock(&e->lock);
    if ((t = task_of_round(e, round_id)) != NULL) {
        *max_bytes = (uint64_t)t->n * 4 + (uint64_t)t->n / 8 + 1 +
                     64 * (uint64_t)sl_layout_tensors(t->layout) + 4096;
        rc = SL_OK;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int sl_engine_upload_allowed(sl_engine *e, int64_t round_id, int64_t device_id,
                             sl_reject_reason *why)
{
    sl__task *t;
    if (e == NULL || why == NULL)
        return SL_EINVAL;
    *why = SL_REJECT_NONE;
    pthread_mutex_lock(&e->lock);
    if ((t = task_of_round(e, round_id)) != NULL && !t->cfg.fedbuff &&
        (t->round.state == SL_ROUND_SELECTING ||
         (t->round.state == SL_ROUND_TRAINING && !sl__idset_has(&t->selected, device_id))))
        *why = SL_REJECT_NOT_SELECTED; /* as sl_engine_accept_steps() would answer */
    pthread_mutex_unlock(&e->lock);
    return SL_OK;
}

/* Count a rejection in the open round of @t (if any) and answer it. */
static int reject(sl__task *t, sl_accept_result *out, sl_reject_reason why)
{
    if (t != NULL) {
        t->rejected[why]++;
        /* the round's record (written with its next transition) counts them too */
        if (why == SL_REJECT_LATE)
            t->round.late++;
        else
            t->round.rejected++;
    }
    out->accepted = 0;
    out->reason = why;
    return SL_OK;
}

/*
 * A round that already ended. A retry of an update that was stored before it
 * closed (the answer was lost) gets its original receipt: it was counted, and
 * the device must commit, not fold. Anything else is late: the device folds.
 */
static int answer_closed(sl_engine *e, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                         sl_accept_result *out)
{
    sl_round_record r;
    int rc = sl_store_get_round(e->store, round_id, &r);
    if (rc == SL_ENOENT)
        return reject(NULL, out, SL_REJECT_UNKNOWN_ROUND);
    if (rc != SL_OK)
        return rc;
    rc = sl_store_get_receipt(e->store, round_id, device_id, sha256, &out->receipt);
    if (rc == SL_OK) {
        out->accepted = 1;
        out->reason = SL_REJECT_NONE;
        return SL_OK;
    }
    if (rc != SL_ENOENT && rc != SL_ECONFLICT)
        return rc;
    /* a participant's record says it came late; a device the round never selected gets the
     * same answer and is not made a participant by it (nor counted as late) */
    rc = sl_store_mark_participant(e->store, round_id, device_id, SL_PART_LATE, "round closed");
    r.late++;
    if (rc == SL_OK && e->replica[0] == '\0')
        rc = sl_store_update_round(e->store, &r); /* with replicas the leader's record wins */
    (void)rc; /* the answer is "late" either way; the counter is best effort */
    return reject(NULL, out, SL_REJECT_LATE);
}

int sl_engine_accept(sl_engine *e, int64_t round_id, int64_t device_id, const void *frame,
                     size_t len, uint32_t num_samples, const uint8_t *sha256, sl_accept_result *out)
{
    return sl_engine_accept_steps(e, round_id, device_id, frame, len, num_samples, 0, sha256, out);
}

int sl_engine_accept_steps(sl_engine *e, int64_t round_id, int64_t device_id, const void *frame,
                           size_t len, uint32_t num_samples, uint32_t local_steps,
                           const uint8_t *sha256, sl_accept_result *out)
{
    sl_accept_result res;
    sl_frame_header h;
    sl__task *t;
    const sl_layout *layout;
    sl_update_put u;
    int64_t base, current_round = 0;
    double norm, max_abs = 0;
    int rc, trc, close_now = 0, track = 0;
    void *flat = NULL;          /* a split frame's flat one (replicas) */
    sl_support *support = NULL; /* a split frame's */
    const void *plain = frame;
    size_t flat_len = 0, plain_len = len;

    if (e == NULL || frame == NULL || sha256 == NULL || out == NULL)
        return SL_EINVAL;
    memset(&res, 0, sizeof res);
    pthread_rwlock_rdlock(&e->gate);
    pthread_mutex_lock(&e->lock);
    t = task_of_round(e, round_id);
    if (t == NULL) {
        /* FedBuff: an update for an earlier buffer of an open task goes to the current one */
        sl_round_record r;
        pthread_mutex_unlock(&e->lock);
        if (sl_store_get_round(e->store, round_id, &r) == SL_OK) {
            pthread_mutex_lock(&e->lock);
            t = sl__engine_find_task(e, r.task_id);
            if (t != NULL && (!t->cfg.fedbuff || !t->round_open))
                t = NULL;
            if (t == NULL)
                pthread_mutex_unlock(&e->lock);
        }
        if (t == NULL) {
            rc = answer_closed(e, round_id, device_id, sha256, &res);
            goto out_gate;
        }
    }
    if (t->round.state == SL_ROUND_SELECTING) {
        rc = reject(t, &res, SL_REJECT_NOT_SELECTED);
        goto out_lock;
    }
    if (t->round.state != SL_ROUND_TRAINING) {
        /* the round is ending (its target was met; the close has not gone through, e.g.
         * the disk failed it): a retry of an update it stored gets its receipt, as after
         * the close, or the device would fold work the model counts. The gate, held
         * shared, keeps the round from closing meanwhile. */
        int64_t rid = t->round.id;
        pthread_mutex_unlock(&e->lock);
        rc = sl_store_get_receipt(e->store, rid, device_id, sha256, &res.receipt);
        pthread_mutex_lock(&e->lock);
        if (rc == SL_OK) {
            res.accepted = 1;
            res.reason = SL_REJECT_NONE;
        } else if (rc == SL_ENOENT || rc == SL_ECONFLICT) {
            rc = reject(t, &res, SL_REJECT_LATE);
        }
        goto out_lock;
    }
    if (!t->cfg.fedbuff && !sl__idset_has(&t->selected, device_id)) {
        rc = reject(t, &res, SL_REJECT_NOT_SELECTED);
        goto out_lock;
    }
    if (local_steps > sl_engine_steps_limit(&t->cfg) || (t->cfg.fednova && local_steps == 0) ||
        !sl__agg_steps_ok(&t->cfg, local_steps)) { /* FedNova's sums could not take them */
        rc = reject(t, &res, SL_REJECT_STEPS);
        goto out_lock;
    }
    layout = t->layout; /* lives as long as the engine */
    base = t->version;
    current_round = t->round.id;
    track = !t->cfg.fedbuff; /* a selected participant of this round, with a record */
    pthread_mutex_unlock(&e->lock);

    /* validate outside the lock: decoding is the expensive part */
    rc = sl_frame_peek_header(frame, len, &h);
    if (rc == SL_OK && (h.kind != SL_FRAME_UPDATE || h.layout_hash != sl_layout_hash(layout)))
        rc = SL_ELAYOUT;
    if (rc == SL_OK && !t->cfg.fedbuff &&
        (h.base_version != (uint64_t)base || h.round != (uint64_t)round_id))
        rc = SL_ELAYOUT;
    if (rc == SL_OK && t->cfg.fedbuff &&
        (h.base_version > (uint64_t)base ||
         (uint64_t)base - h.base_version > t->cfg.max_staleness)) {
        pthread_mutex_lock(&e->lock);
        rc = reject(t, &res, h.base_version > (uint64_t)base ? SL_REJECT_LAYOUT : SL_REJECT_STALE);
        goto out_lock;
    }
    if (rc == SL_OK && (h.flags & SL_FRAME_FLAG_SPLIT)) {
        /* positions split by what the device downloaded: checked against the support of
         * the versions it names; stored as sent, the bytes its digest names, and read
         * against the same support when the round aggregates. Under retention both versions
         * must still be kept, whatever support is in memory: the close reads them again
         * after a restart */
        rc = sl__splits_support(&e->splits, e->store, t->id, layout, h.ref_version, h.base_version,
                                t->cfg.retain_last > 0, &support);
        if (rc == SL_ENOENT)
            rc = SL_ESUPPORT; /* a version this coordinator does not keep */
        else if (rc != SL_OK && rc != SL_EINVAL)
            goto out_gate; /* the store could not give the versions: the device retries */
    }
    if (rc == SL_OK)
        rc = sl__update_norm(layout, frame, len, &e->opt.limits, support, &norm, &max_abs);
    if (rc == SL_OK && support != NULL && e->replica[0] != '\0') {
        /* a replica folds it into its partial sum as the plain frame of the same update */
        rc = sl_frame_unsplit(layout, frame, len, &e->opt.limits, support, &flat, &flat_len);
        if (rc != SL_OK)
            goto out_gate; /* it decoded just now: only memory can fail it */
        plain = flat;
        plain_len = flat_len;
    }
    if (rc != SL_OK) {
        sl_reject_reason why = rc == SL_ELAYOUT      ? SL_REJECT_LAYOUT
                               : rc == SL_ENONFINITE ? SL_REJECT_NONFINITE
                               : rc == SL_ESUPPORT   ? SL_REJECT_REFERENCE
                                                     : SL_REJECT_MALFORMED;
        pthread_mutex_lock(&e->lock);
        rc = reject(t, &res, why);
        goto out_lock;
    }
    if (t->cfg.max_update_norm > 0 && norm > t->cfg.max_update_norm) {
        pthread_mutex_lock(&e->lock);
        rc = reject(t, &res, SL_REJECT_NORM);
        goto out_lock;
    }
    if (!sl__agg_value_ok(&t->cfg, norm, max_abs)) { /* the fixed-point sum would refuse it */
        pthread_mutex_lock(&e->lock);
        rc = reject(t, &res, SL_REJECT_RANGE);
        goto out_lock;
    }
    /* durable before the answer; shares an fsync with concurrent accepts */
    u.round_id = current_round;
    u.device_id = device_id;
    u.frame = frame;
    u.frame_len = len;
    u.num_samples = num_samples;
    u.sha256 = sha256;
    u.local_steps = local_steps;
    rc = sl_store_put_update(e->store, &u, 30000, &res.receipt);
    if (rc == SL_OK && !res.receipt.duplicate) /* replicas: into this one's partial sum */
        sl__replica_fold(e, t, current_round, device_id, plain, plain_len, num_samples,
                         local_steps);
    pthread_mutex_lock(&e->lock);
    if (rc == SL_ECONFLICT) {
        rc = reject(t, &res, SL_REJECT_DUPLICATE_CONFLICT);
    } else if (rc == SL_ESTATE) {
        /* the store holds the round as aggregating or over (another replica's leader moved
         * it on while this one still had it in training): late, the device folds */
        rc = reject(t, &res, SL_REJECT_LATE);
    } else if (rc == SL_OK) {
        res.accepted = 1;
        if (!res.receipt.duplicate) {
            t->round.reported++;
            t->round.bytes_up += (int64_t)len;
            if (t->round.reported >= t->cfg.quorum && t->quorum_at_ms < 0)
                t->quorum_at_ms = sl__engine_now(e) - t->round.select_deadline_ms;
        }
        close_now = t->round.reported >= t->round.target;
    }
out_lock:
    pthread_mutex_unlock(&e->lock);
out_gate:
    pthread_rwlock_unlock(&e->gate);
    free(flat);
    sl_support_free(support);
    if (rc == SL_OK && track && !res.accepted && res.reason != SL_REJECT_DUPLICATE_CONFLICT) {
        /* the participant's record says why (the device list counts it); a different
         * second update leaves the first one's record alone. Best effort, as for late. */
        int prc = sl_store_set_participant(e->store, current_round, device_id, SL_PART_REJECTED,
                                           sl_reject_reason_name(res.reason));
        (void)prc;
    }
    if (rc == SL_OK) {
        *out = res;
        /* the target is met: close without waiting for the next tick. The update is
         * durable and counted whatever the close does: a failed close is the engine's
         * to retry (every tick does), not the device's, so the answer stays a receipt */
        if (close_now && (trc = sl_engine_tick(e, NULL)) != SL_OK)
            sl_log(SL_LOG_WARN, "engine",
                   "closing round %lld at its target: %s; the next tick "
                   "retries",
                   (long long)current_round, sl_strerror(trc));
    }
    return rc;
}

/* ---- ticks, statistics, metrics, operator actions ------------------------ */

/* The senders' mean's device history of every task whose open round will need it, read outside
 * the locks (a long task's is large) and installed under the lock (lifecycle.c); a read that
 * fails is left to the close, which reads it itself. */
static void read_histories(sl_engine *e)
{
    for (size_t i = 0;; i++) {
        sl__idset devices = {NULL, 0, 0};
        uint64_t updates = 0;
        int64_t task_id, before = 0;
        sl__task *t;
        int rc;
        pthread_mutex_lock(&e->lock);
        if (i >= e->ntasks) {
            pthread_mutex_unlock(&e->lock);
            return;
        }
        t = e->tasks[i];
        if (!sl__engine_leads(e) || !sl__sm_wanted(t, &before)) {
            pthread_mutex_unlock(&e->lock);
            continue;
        }
        task_id = t->id;
        pthread_mutex_unlock(&e->lock);
        rc = sl__sm_read(e, task_id, before, &devices, &updates);
        pthread_mutex_lock(&e->lock);
        if (rc == SL_OK && (t = sl__engine_find_task(e, task_id)) != NULL)
            sl__sm_install(e, t, before, &devices, updates);
        pthread_mutex_unlock(&e->lock);
        sl__idset_free(&devices);
    }
}

int sl_engine_tick(sl_engine *e, int64_t *next_deadline_ms)
{
    int64_t next = INT64_MAX;
    int rc = SL_OK, lead = 1;
    if (e == NULL)
        return SL_EINVAL;
    read_histories(e);
    pthread_rwlock_wrlock(&e->gate);
    pthread_mutex_lock(&e->lock);
    rc = sl__replica_tick(e, &lead);
    for (size_t i = 0; lead && i < e->ntasks; i++) {
        int trc = sl__task_advance(e, e->tasks[i], &next);
        if (trc == SL_EFENCED) { /* a newer leader: this replica only follows from now on */
            sl__replica_fenced(e);
            break;
        }
        if (trc != SL_OK && rc == SL_OK)
            rc = trc; /* one task's storage failure does not stop the others */
    }
    pthread_mutex_unlock(&e->lock);
    pthread_rwlock_unlock(&e->gate);
    if (next_deadline_ms != NULL)
        *next_deadline_ms = next;
    return rc;
}

int sl_engine_round_stats(sl_engine *e, int64_t round_id, sl_round_stats *out)
{
    sl_round_stats st;
    sl__idset rep = {NULL, 0, 0}, all = {NULL, 0, 0};
    sl__task *t;
    int rc = SL_OK, open;
    if (e == NULL || out == NULL)
        return SL_EINVAL;
    memset(&st, 0, sizeof st);
    st.time_to_quorum_ms = -1;
    st.mean_loss = st.mean_accuracy = NAN;
    /* who reported comes from the store (the engine keeps only the count), read
     * outside the lock; a report landing after this read counts as training
     * until the next call */
    pthread_mutex_lock(&e->lock);
    open = task_of_round(e, round_id) != NULL;
    pthread_mutex_unlock(&e->lock);
    if (open &&
        (rc = sl_store_list_reporters(e->store, round_id, sl__idset_collect, &rep)) != SL_OK) {
        sl__idset_free(&rep);
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    t = task_of_round(e, round_id);
    if (t != NULL) {
        /* with replicas, every replica's downloads: this one's and the others' as last read */
        const sl__idset *down = &t->downloaded;
        uint64_t bytes = 0;
        st.round = t->round;
        if (e->replica[0] != '\0' && sl__replica_downloads(t, &bytes, &all) == SL_OK) {
            down = &all;
            st.round.bytes_down = bytes > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)bytes;
        }
        st.checked_in = t->checked_in;
        st.downloaded = (uint32_t)down->n;
        for (size_t i = 0; i < down->n; i++)
            st.training += !sl__idset_has(&rep, down->ids[i]);
        for (size_t i = 0; i < t->selected.n; i++)
            st.downloading += !sl__idset_has(&rep, t->selected.ids[i]) &&
                              !sl__idset_has(down, t->selected.ids[i]);
        memcpy(st.rejected_by_reason, t->rejected, sizeof t->rejected);
        st.time_to_quorum_ms = t->quorum_at_ms;
    }
    pthread_mutex_unlock(&e->lock);
    sl__idset_free(&rep);
    sl__idset_free(&all);
    if (t == NULL)
        rc = sl_store_get_round(e->store, round_id, &st.round);
    if (rc == SL_OK)
        rc = sl_store_round_eval(e->store, round_id, &st.eval);
    if (rc != SL_OK)
        return rc;
    st.mean_loss = st.eval.loss;
    st.mean_accuracy = st.eval.accuracy;
    pthread_mutex_lock(&e->lock);
    t = sl__engine_find_task(e, st.round.task_id);
    if (t != NULL && st.round.bytes_up > 0)
        st.compression_vs_dense =
            (double)st.round.reported * (double)t->n * 4.0 / (double)st.round.bytes_up;
    pthread_mutex_unlock(&e->lock);
    *out = st;
    return SL_OK;
}

int sl_engine_report_metrics(sl_engine *e, int64_t task_id, int64_t version, int64_t device_id,
                             double loss, double accuracy, uint32_t samples)
{
    sl_store_eval ev = {samples, loss, accuracy, NAN, NAN};
    return sl_engine_report_eval(e, task_id, version, device_id, &ev);
}

int sl_engine_report_eval(sl_engine *e, int64_t task_id, int64_t version, int64_t device_id,
                          const sl_store_eval *ev)
{
    char json[320], num[4][40];
    const double vals[4] = {ev ? ev->loss : 0, ev ? ev->accuracy : 0, ev ? ev->mae : 0,
                            ev ? ev->rmse : 0};
    sl__task *t;
    int64_t round_id = 0;
    if (e == NULL || ev == NULL || ev->samples == 0 || !isfinite(ev->loss) || ev->loss < 0 ||
        !(isnan(ev->accuracy) || (ev->accuracy >= 0 && ev->accuracy <= 1)) ||
        !(isnan(ev->mae) || (isfinite(ev->mae) && ev->mae >= 0)) ||
        !(isnan(ev->rmse) || (isfinite(ev->rmse) && ev->rmse >= 0)) ||
        (isnan(ev->accuracy) && isnan(ev->mae) && isnan(ev->rmse)))
        return SL_EINVAL;
    pthread_mutex_lock(&e->lock);
    t = sl__engine_find_task(e, task_id);
    if (t != NULL && t->round_open && version == t->round.base_version &&
        sl__idset_has(&t->selected, device_id))
        round_id = t->round.id;
    pthread_mutex_unlock(&e->lock);
    if (t == NULL)
        return SL_ENOENT;
    if (device_id != 0) {
        /* a device evaluates the base model of the round it was selected for, on its held-out
         * samples (federated evaluation): kept with the round */
        if (round_id == 0)
            return SL_ESTATE;
        return sl_store_put_eval(e->store, round_id, device_id, ev);
    }
    /* an evaluator's metrics are the version's */
    for (int i = 0; i < 4; i++)
        snprintf(num[i], sizeof num[i], isnan(vals[i]) ? "null" : "%.9g", vals[i]);
    snprintf(json, sizeof json,
             "{\"loss\":%s,\"accuracy\":%s,\"mae\":%s,\"rmse\":%s,\"samples\":%u}", num[0], num[1],
             num[2], num[3], ev->samples);
    return sl_store_set_model_metrics(e->store, task_id, version, json);
}

int sl_engine_count_download(sl_engine *e, int64_t task_id, int64_t device_id, uint64_t bytes)
{
    sl__task *t;
    int rc = SL_ENOENT;
    if (e == NULL)
        return SL_EINVAL;
    pthread_mutex_lock(&e->lock);
    t = sl__engine_find_task(e, task_id);
    if (t != NULL && !t->round_open) {
        rc = SL_ESTATE;
    } else if (t != NULL) {
        /* saturate rather than wrap: a counter, not an invariant */
        uint64_t room = (uint64_t)INT64_MAX - (uint64_t)t->round.bytes_down;
        t->round.bytes_down += (int64_t)(bytes < room ? bytes : room);
        rc = SL_OK;
        if (device_id > 0 && sl__idset_add(&t->downloaded, device_id) == SL_ENOMEM)
            rc = SL_ENOMEM;
        if (e->replica[0] != '\0') /* every replica's reach the store (replica.c) */
            sl__replica_count_download(t, bytes);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int sl_engine_abort_round(sl_engine *e, int64_t round_id)
{
    sl__task *t;
    sl_round_record r;
    int rc;
    if (e == NULL)
        return SL_EINVAL;
    pthread_rwlock_wrlock(&e->gate);
    pthread_mutex_lock(&e->lock);
    t = task_of_round(e, round_id);
    if (t != NULL && !sl__engine_leads(e)) {
        rc = SL_EFENCED; /* the leader's to do: this replica does not run transitions */
    } else if (t != NULL) {
        rc = sl__task_close(e, t, SL__ABORTED);
        if (rc == SL_OK)
            rc = sl__task_advance(e, t, NULL);
    } else {
        rc = sl_store_get_round(e->store, round_id, &r) == SL_OK ? SL_ESTATE : SL_ENOENT;
    }
    pthread_mutex_unlock(&e->lock);
    pthread_rwlock_unlock(&e->gate);
    return rc;
}

int sl_engine_task_status(sl_engine *e, int64_t task_id, sl_task_status *out)
{
    sl__task *t;
    if (e == NULL || out == NULL)
        return SL_EINVAL;
    pthread_mutex_lock(&e->lock);
    t = sl__engine_find_task(e, task_id);
    if (t != NULL) {
        memset(out, 0, sizeof *out);
        out->task_id = t->id;
        out->cfg = t->cfg;
        out->model_version = t->version;
        out->round_open = t->round_open;
        out->finished = t->finished;
        out->round = t->round;
        out->checked_in = t->checked_in;
    }
    pthread_mutex_unlock(&e->lock);
    return t != NULL ? SL_OK : SL_ENOENT;
}
