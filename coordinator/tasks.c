/*
 * tasks.c - the engine's tasks as the store keeps them: loading one (its
 * configuration, layout, model, open round, refusals and the paces of its
 * closed rounds), the engine's table of them, and freeing one. Below the
 * replicas (replica.c reloads a follower's tasks through here) and the
 * round's life (lifecycle.c); above the selection (select.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "coord_int.h"
#include "starling/contract.h"

int64_t sl__engine_now(const sl_engine *e)
{
    return sl_clock_wall_ns(e->opt.clock) / 1000000;
}

sl__task *sl__engine_find_task(sl_engine *e, int64_t task_id)
{
    for (size_t i = 0; i < e->ntasks; i++)
        if (e->tasks[i]->id == task_id)
            return e->tasks[i];
    return NULL;
}

int sl__engine_add_task(sl_engine *e, sl__task *t)
{
    sl__task **grown = realloc(e->tasks, (e->ntasks + 1) * sizeof *grown);
    if (grown == NULL)
        return SL_ENOMEM;
    e->tasks = grown;
    e->tasks[e->ntasks++] = t;
    return SL_OK;
}

typedef struct resume_ctx {
    sl_engine *e;
    sl__task *t;
} resume_ctx;

/* A participant of the open round: selected, and (once drawn) busy until the round ends, as
 * lifecycle.c's draw marks it, so that no other task selects it meanwhile. Only where this
 * engine ends the round and so releases the mark: a single coordinator, or a replica loading
 * its tasks to lead (a follower re-reads tasks at every round and closes none). */
static int resume_participant(void *ctx, const sl_participant_record *p)
{
    resume_ctx *r = ctx;
    int rc = sl__idset_add(&r->t->selected, p->device_id);
    if (rc == SL_EEXIST)
        rc = SL_OK;
    if (rc == SL_OK && r->t->round.state != SL_ROUND_SELECTING &&
        (r->e->replica[0] == '\0' || r->e->promoting)) {
        sl__device *d = sl__engine_device(r->e, p->device_id);
        if (d == NULL)
            return SL_ENOMEM;
        d->cooldown_until_ms = INT64_MAX;
    }
    return rc;
}

/* The cool-down of the task's ended rounds, newest first: their participants rest until
 * closed_at + cooldown_ms, as lifecycle.c's release_participants set it before a restart. */
typedef struct rest_ctx {
    sl_engine *e;
    sl__task *t;
    int64_t now, until;
    int rc;
} rest_ctx;

static int rest_participant(void *ctx, const sl_participant_record *p)
{
    rest_ctx *c = ctx;
    sl__device *d = sl__engine_device(c->e, p->device_id);
    if (d == NULL) {
        c->rc = SL_ENOMEM;
        return 1;
    }
    if (d->cooldown_until_ms < c->until)
        d->cooldown_until_ms = c->until;
    return 0;
}

static int rest_round(void *ctx, const sl_round_record *r)
{
    rest_ctx *c = ctx;
    int rc;
    if (r->state != SL_ROUND_CLOSED && r->state != SL_ROUND_ABANDONED)
        return 0; /* the open one */
    if (r->closed_at_ms + c->t->cfg.cooldown_ms <= c->now)
        return 1; /* rested, and every round before it too */
    c->until = r->closed_at_ms + c->t->cfg.cooldown_ms;
    rc = sl_store_list_participants(c->e->store, r->id, rest_participant, c);
    if (rc != SL_OK && c->rc == SL_OK)
        c->rc = rc;
    return c->rc != SL_OK;
}

static int resume_round(void *ctx, const sl_round_record *round)
{
    resume_ctx *r = ctx;
    sl__task *t = r->t;
    uint64_t stored = 0;
    int rc;
    if (round->task_id != t->id)
        return 0;
    /* the newest unfinished round is the open one */
    t->round = *round;
    t->round_open = 1;
    sl__idset_clear(&t->selected);
    rc = sl_store_list_participants(r->e->store, round->id, resume_participant, r);
    if (rc == SL_OK)
        rc = sl_store_count_updates(r->e->store, round->id, &stored);
    if (rc == SL_OK)
        t->round.reported = (uint32_t)stored;
    t->quorum_at_ms = -1;
    if (rc == SL_OK && round->state == SL_ROUND_SELECTING && r->e->replica[0] == '\0') {
        /* The pool was in memory (replicas keep their check-ins in the store instead). Its
         * devices were told to come back for the draw's answer within the spread after the
         * window's end (sl__select_spread_ms), other devices no sooner than retry_after_min_ms
         * after they asked: the resumed window ends the longer of the two (and half a second
         * for the request) after the later of its end and now, within the round's bound, so they
         * are in the pool again when it draws, and the draw is the one a coordinator that was not
         * restarted makes. The extension is not stored, so each restart would make it anew: the
         * window ends by its end and twice that wait at the latest, after which a restart (a crash
         * loop) draws at once from the devices back since, as it did before the extension, instead
         * of never. */
        int64_t now = sl__engine_now(r->e), at = round->select_deadline_ms;
        int64_t spread = sl__select_spread_ms(&t->cfg);
        int64_t back =
            r->e->opt.retry_after_min_ms > spread ? r->e->opt.retry_after_min_ms : spread;
        int64_t limit = round->opened_at_ms + t->cfg.report_deadline_ms;
        int64_t most = round->select_deadline_ms + 2 * (back + 500);
        at = (at > now ? at : now) + back + 500;
        if (at > most)
            at = most;
        if (at > limit)
            at = limit;
        if (at > t->round.select_deadline_ms) {
            t->round.report_deadline_ms += at - t->round.select_deadline_ms;
            t->round.select_deadline_ms = at;
        }
    }
    return rc;
}

static int newest_round(void *ctx, const sl_round_record *r)
{
    sl__task *t = ctx;
    t->round = *r;
    return 0;
}

static void spec_hash(const char *spec, char hex[65])
{
    uint8_t sha[32];
    if (mbedtls_sha256_ret((const unsigned char *)spec, strlen(spec), sha, 0) != 0) {
        hex[0] = '\0';
        return;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", sha[i]);
}

static int add_refuser(void *ctx, int64_t task_id, int64_t device_id, const char *reason,
                       int64_t at_ms)
{
    sl__task *t = ctx;
    int rc = sl__idset_add(&t->refused, device_id);
    (void)task_id, (void)reason, (void)at_ms;
    return rc == SL_EEXIST ? SL_OK : rc;
}

int sl__engine_load_task(sl_engine *e, int64_t task_id, sl__task **out, char *err, size_t errcap)
{
    sl_task_record rec;
    sl_model_record m;
    sl__task *t;
    resume_ctx rctx;
    int rc = sl_store_get_task(e->store, task_id, &rec);
    if (rc != SL_OK)
        return rc;
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        sl_store_task_free(&rec);
        return SL_ENOMEM;
    }
    t->id = task_id;
    if (rec.model_spec != NULL)
        spec_hash(rec.model_spec, t->spec_sha256);
    if (rec.data_contract != NULL) {
        sl_contract *dc = NULL;
        spec_hash(rec.data_contract, t->contract_sha256);
        /* checked when the task was created: a stored contract that no longer parses is a
         * corrupt store */
        rc = sl_contract_parse(rec.data_contract, strlen(rec.data_contract), &dc, err, errcap);
        if (rc != SL_OK) {
            sl_store_task_free(&rec);
            free(t);
            return SL_ECORRUPT;
        }
        t->contract_min_samples =
            dc->min_samples > UINT32_MAX ? UINT32_MAX : (uint32_t)dc->min_samples;
        sl_contract_free(dc);
    }
    rc =
        sl_task_config_parse_stored(rec.config_json, strlen(rec.config_json), &t->cfg, err, errcap);
    if (rc == SL_OK)
        rc = sl_layout_parse(rec.layout_text, strlen(rec.layout_text), &t->layout);
    sl_store_task_free(&rec);
    if (rc == SL_OK) {
        t->n = (size_t)sl_layout_params(t->layout);
        t->model = malloc((t->n ? t->n : 1) * sizeof *t->model);
        rc = t->model ? sl_store_get_model(e->store, task_id, 0, &m) : SL_ENOMEM;
        if (rc == SL_OK) {
            rc = sl_frame_decode_model(t->layout, m.frame, m.frame_len, NULL, 0, t->model);
            if (rc == SL_OK && m.opt_state != NULL)
                rc = sl_server_state_decode(m.opt_state, m.opt_state_len, t->n, &t->opt);
            t->version = m.version;
            sl_store_model_free(&m);
        }
    }
    if (rc == SL_OK) {
        /* the last round number, and whether the task already ran all its rounds */
        rctx.e = e;
        rctx.t = t;
        rc = sl_store_unfinished_rounds(e->store, resume_round, &rctx);
    }
    if (rc == SL_OK) /* who refuses its model, as the devices last said */
        rc = sl_store_list_refusals(e->store, task_id, 0, add_refuser, t);
    if (rc == SL_OK && !t->round_open) {
        /* between rounds: continue numbering after the newest one */
        rc = sl_store_list_rounds(e->store, task_id, 0, 1, newest_round, t);
        if (t->cfg.rounds > 0 && (uint64_t)t->round.round_no >= t->cfg.rounds)
            t->finished = 1;
    }
    if (rc == SL_OK && t->cfg.cooldown_ms > 0) { /* who still rests after its last rounds */
        rest_ctx rest = {e, t, sl__engine_now(e), 0, SL_OK};
        rc = sl_store_list_rounds(e->store, task_id, 0, UINT32_MAX, rest_round, &rest);
        if (rc == 1 || rc == SL_OK)
            rc = rest.rc;
    }
    if (rc == SL_OK) /* the paces of its closed rounds, as before a restart */
        rc = sl__task_load_paces(e, t);
    if (t->round_open) /* replicas: what this replica served of it before (replica.c) */
        t->dl_adopt_round = t->round.id;
    if (rc != SL_OK) {
        if (errcap > 0 && err[0] == '\0')
            snprintf(err, errcap, "task %lld: %s", (long long)task_id, sl_strerror(rc));
        sl__task_free(t);
        return rc;
    }
    *out = t;
    return SL_OK;
}

/* The task's paces over its newest SL__PACE_ROUNDS closed rounds, oldest first, into
 * @t->down_bytes_ewma (bytes a device downloaded: deltas included; with replicas, every
 * replica's, which the round's record counts) and
 * @t->train_ms_ewma (the selection's deadline to the close): each an average weighing a
 * round 0.3 and what came before 0.7, from the store alone, so that the engine computes the
 * same after a restart, and a follower the leader's. */
typedef struct paces {
    sl_round_record r[SL__PACE_ROUNDS];
    size_t n;
} paces;

static int collect_pace(void *ctx, const sl_round_record *r)
{
    paces *p = ctx;
    if (p->n < SL__PACE_ROUNDS)
        p->r[p->n++] = *r;
    return 0;
}

int sl__task_load_paces(sl_engine *e, sl__task *t)
{
    paces *p = calloc(1, sizeof *p);
    double down = 0, train = 0;
    int rc;
    if (p == NULL)
        return SL_ENOMEM;
    rc = sl_store_list_rounds(e->store, t->id, 0, SL__PACE_ROUNDS, collect_pace, p);
    for (size_t i = p->n; rc == SL_OK && i-- > 0;) { /* newest first: from the oldest */
        const sl_round_record *r = &p->r[i];
        if (r->state != SL_ROUND_CLOSED)
            continue;
        if (r->bytes_down > 0 && (r->downloads > 0 || r->selected > 0)) {
            /* rounds stored before schema 12 did not count their downloads */
            double per =
                (double)r->bytes_down / (double)(r->downloads > 0 ? r->downloads : r->selected);
            down = down > 0 ? 0.7 * down + 0.3 * per : per;
        }
        if (r->select_deadline_ms > 0 && r->closed_at_ms >= r->select_deadline_ms) {
            double ms = (double)(r->closed_at_ms - r->select_deadline_ms);
            train = train > 0 ? 0.7 * train + 0.3 * ms : ms;
        }
    }
    free(p);
    if (rc == SL_OK) {
        t->down_bytes_ewma = down;
        t->train_ms_ewma = train;
    }
    return rc;
}

void sl__task_free(sl__task *t)
{
    if (t == NULL)
        return;
    sl_layout_free(t->layout);
    free(t->model);
    sl_server_state_free(&t->opt);
    sl__idset_free(&t->pool);
    sl__idset_free(&t->selected);
    sl__idset_free(&t->downloaded);
    sl__idset_free(&t->dl_others);
    sl__idset_free(&t->waiting);
    sl__idset_free(&t->refused);
    sl__idset_free(&t->partial_ids);
    sl__idset_free(&t->sm_devices);
    sl__idset_free(&t->sm_pending);
    sl__agg_free(t->partial);
    free(t);
}
