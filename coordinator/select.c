/*
 * select.c - selection that knows the fleet (#22), and the arithmetic of time
 * budgets (a device's steps, its full window: sl_engine_budget_steps(),
 * sl_engine_full_window()): a task's "paced_selection"
 * prefers devices likely to report in time, and its "fairness_rounds" N puts
 * first every eligible device no round selected in the last N rounds, so
 * slow devices still take part.
 *
 * The history is the store's (sl_store_device_history(): rounds that
 * selected a device and the ones it reported to, derived from the rounds,
 * participants and updates), read at each selection: a restarted
 * coordinator, or a new leader, selects exactly as one that never stopped.
 *
 * Order of the pool (every step a pure function of the pool, the history,
 * the task's seed and the round's number):
 *   1. due devices (fairness): never selected, or last selected N or more
 *      rounds ago; the longest-waiting first, then by id;
 *   2. the others: paced, by the key -ln(u) / w (Efraimidis and Spirakis'
 *      weighted sampling without replacement), w = (reports + 1) /
 *      (selections + 2) the device's smoothed rate of reporting in time, u
 *      uniform in (0, 1] from a hash of (seed, round, device); otherwise a
 *      seeded shuffle.
 * The first `want` of that order are selected.
 *
 * And the adaptive deadline (deadline_percentile): a new round's report
 * window is that percentile of the delays after selection with which the
 * updates of the last deadline_rounds rounds arrived, with a quarter more,
 * within [min_report_deadline_ms, report_deadline_ms]: a fleet that reports
 * in 8 s gets 10 s, not the 60 s a task may allow for its worst case.
 *
 * Under time budgets a round is planned instead, once its devices are
 * selected (sl__budget_plan): each selected device's full window (the time it
 * needs to download, train max_local_steps and upload at the pace it last
 * reported, sl_engine_full_window) is read from its pace in the store, and the
 * round's window is their percentile (deadline_percentile, or target over
 * selected), plus the spread over which the selected devices come back for
 * their answer, within the same bounds. The round then waits for every selected
 * device: those slower than the plan were given fewer steps, so their work
 * arrives in time and is aggregated rather than computed for nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

typedef struct hist {
    int64_t device, last;
    uint32_t selected, reported;
} hist;

typedef struct hist_list {
    hist *h;
    size_t n, cap;
} hist_list;

static int add_hist(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
                    int64_t last_round_no)
{
    hist_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        hist *h = realloc(l->h, cap * sizeof *h);
        if (h == NULL)
            return SL_ENOMEM;
        l->h = h;
        l->cap = cap;
    }
    l->h[l->n++] = (hist){device_id, last_round_no, selected, reported};
    return 0;
}

static int by_device(const void *pa, const void *pb)
{
    const hist *a = pa, *b = pb;
    return a->device < b->device ? -1 : a->device > b->device;
}

/* Device @id's history (zeros when it never took part); @l in device-id order. */
static hist history_of(const hist_list *l, int64_t id)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->h[mid].device < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < l->n && l->h[lo].device == id)
        return l->h[lo];
    return (hist){id, 0, 0, 0};
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct cand {
    int64_t id, last;
    int due;
    double key; /* paced: smaller first; otherwise the shuffle's draw */
} cand;

static int by_order(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->due != b->due)
        return a->due ? -1 : 1;
    if (a->due && a->last != b->last)
        return a->last < b->last ? -1 : 1;
    if (!a->due && a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int sl__select_order(sl_engine *e, const sl__task *t, int64_t *ids, size_t n)
{
    hist_list l = {NULL, 0, 0};
    cand *c;
    uint64_t base = mix64(t->cfg.seed ^ mix64((uint64_t)t->round.round_no) ^ 0x5e1ec7ull);
    /* the pool's devices' histories alone: a selection reads what it orders, not the task's
     * whole history, which grows with every round */
    int rc = sl_store_device_history_of(e->store, t->id, ids, n, add_hist, &l);
    if (rc != SL_OK) {
        free(l.h);
        return rc;
    }
    if (l.n > 1)
        qsort(l.h, l.n, sizeof *l.h, by_device);
    c = malloc((n ? n : 1) * sizeof *c);
    if (c == NULL) {
        free(l.h);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        hist h = history_of(&l, ids[i]);
        uint64_t draw = mix64(base ^ (uint64_t)ids[i]);
        double u = ((double)(draw >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
        double w = ((double)h.reported + 1.0) / ((double)h.selected + 2.0);
        c[i].id = ids[i];
        c[i].last = h.last;
        c[i].due = t->cfg.fairness_rounds > 0 &&
                   (h.last == 0 || t->round.round_no - h.last >= (int64_t)t->cfg.fairness_rounds);
        c[i].key = t->cfg.paced_selection ? -log(u) / w : (double)draw;
    }
    qsort(c, n, sizeof *c, by_order);
    for (size_t i = 0; i < n; i++)
        ids[i] = c[i].id;
    free(c);
    free(l.h);
    return SL_OK;
}

/* ---- adaptive deadline -------------------------------------------------------------------- */

typedef struct delays {
    int64_t *d;
    size_t n, cap;
} delays;

static int add_delay(void *ctx, int64_t delay_ms)
{
    delays *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        int64_t *d = realloc(l->d, cap * sizeof *d);
        if (d == NULL)
            return SL_ENOMEM;
        l->d = d;
        l->cap = cap;
    }
    l->d[l->n++] = delay_ms;
    return 0;
}

static int by_delay(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

int64_t sl__report_window(sl_engine *e, const sl__task *t, int64_t round_no)
{
    const sl_task_config *c = &t->cfg;
    delays l = {NULL, 0, 0};
    int64_t w = c->report_deadline_ms, after = round_no - 1 - (int64_t)c->deadline_rounds;
    if (c->deadline_percentile == 0 || (c->time_budget && c->max_local_steps > 0))
        return w; /* time budgets: planned at the selection (sl__budget_plan) */
    /* the delays of the last deadline_rounds rounds' updates, from the store: a restarted
     * coordinator or a new leader computes the same window */
    if (sl_store_report_delays(e->store, t->id, after < 0 ? 0 : after, add_delay, &l) == SL_OK &&
        l.n >= 2) {
        size_t k;
        double at;
        qsort(l.d, l.n, sizeof *l.d, by_delay);
        k = (size_t)ceil((double)c->deadline_percentile / 100.0 * (double)l.n);
        at = (double)l.d[k > 0 ? k - 1 : 0] * 1.25;
        w = at > (double)c->report_deadline_ms ? c->report_deadline_ms : (int64_t)ceil(at);
        if (w < c->min_report_deadline_ms)
            w = c->min_report_deadline_ms;
    }
    free(l.d);
    return w;
}

/* ---- planned rounds (time budgets) -------------------------------------------------------- */

int64_t sl__select_spread_ms(const sl_task_config *c)
{
    double want = ceil((double)c->target * c->over_selection);
    if (!(want * 2 < (double)SL__SELECT_SPREAD_MS)) /* NaN too */
        return SL__SELECT_SPREAD_MS;
    return want * 2 > SL__SELECT_SPREAD_MIN_MS ? (int64_t)want * 2 : SL__SELECT_SPREAD_MIN_MS;
}

static int by_window(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

typedef struct plan_ctx {
    const sl__task *t;
    int64_t *w; /* the full windows, one per selected device with a pace */
    size_t m, cap;
} plan_ctx;

static int add_window(void *ctx, int64_t device_id, const sl_store_pace *p)
{
    plan_ctx *pc = ctx;
    int64_t full = sl_engine_full_window(&pc->t->cfg, pc->t->n, (uint64_t)pc->t->down_bytes_ewma,
                                         p->step_ms, p->up_bps, p->down_bps);
    (void)device_id;
    if (full > 0 && pc->m < pc->cap)
        pc->w[pc->m++] = full;
    return 0;
}

int sl__budget_plan(sl_engine *e, const sl__task *t, const int64_t *ids, size_t n, int64_t *window)
{
    const sl_task_config *c = &t->cfg;
    plan_ctx pc = {t, NULL, 0, n};
    int64_t *w;
    size_t m, k;
    double f;
    int rc;
    *window = 0;
    if (!c->time_budget || c->fedbuff || c->max_local_steps == 0 || n == 0)
        return SL_OK;
    w = pc.w = malloc(n * sizeof *w);
    if (w == NULL)
        return SL_ENOMEM;
    /* the selected devices' paces in one read (a device never measured trains
     * max_local_steps, outside the plan) */
    if ((rc = sl_store_get_paces(e->store, t->id, ids, n, add_window, &pc)) != SL_OK) {
        free(w);
        return rc;
    }
    m = pc.m;
    if (m > 0) {
        f = c->deadline_percentile > 0 ? (double)c->deadline_percentile / 100.0
                                       : (double)(c->target < n ? c->target : n) / (double)n;
        k = (size_t)ceil(f * (double)m);
        qsort(w, m, sizeof *w, by_window);
        /* the devices come for their answer up to the spread after the selection */
        *window = w[k > 0 ? (k <= m ? k - 1 : m - 1) : 0] + sl__select_spread_ms(c);
        if (*window > c->report_deadline_ms)
            *window = c->report_deadline_ms;
        if (*window < c->min_report_deadline_ms)
            *window = c->min_report_deadline_ms;
    }
    free(w);
    return SL_OK;
}

/* ---- time budgets: a device's steps and full window ------------------------------------- */

/* What a time budget keeps back for the unforeseen (a slower step, a retried request): a tenth
 * of the time left, and at least this (ms). */
#define BUDGET_MARGIN_MS 250.0

/* The model's download and the update's upload at @down_bps and @up_bps (0: unknown), ms:
 * the model's @down_bytes (0: in fp32), the update at about 6 bytes a sent value (value and
 * position). */
static void transfer_ms(const sl_task_config *cfg, uint64_t params, uint64_t down_bytes,
                        double up_bps, double down_bps, double *down_ms, double *up_ms)
{
    if (!(up_bps > 0) || !isfinite(up_bps))
        up_bps = 100e3;
    if (!(down_bps > 0) || !isfinite(down_bps))
        down_bps = 1e6;
    *down_ms = (down_bytes > 0 ? (double)down_bytes : (double)params * 4.0) / down_bps * 1000.0;
    *up_ms = ((double)params * cfg->density * 6.0 + 1024.0) / up_bps * 1000.0;
}

uint32_t sl_engine_budget_steps(const sl_task_config *cfg, uint64_t params, uint64_t down_bytes,
                                int64_t now_ms, int64_t deadline_ms, double step_ms, double up_bps,
                                double down_bps)
{
    double left, margin, down_ms, up_ms, steps;
    if (cfg == NULL || !cfg->time_budget)
        return 0;
    if (!(step_ms > 0) || !isfinite(step_ms))
        return cfg->max_local_steps; /* nothing measured yet: as many as the task allows */
    transfer_ms(cfg, params, down_bytes, up_bps, down_bps, &down_ms, &up_ms);
    left = (double)(deadline_ms - now_ms);
    margin = left / 10 > BUDGET_MARGIN_MS ? left / 10 : BUDGET_MARGIN_MS;
    steps = floor((left - margin - down_ms - up_ms) / step_ms);
    if (!(steps >= cfg->min_local_steps))
        return cfg->min_local_steps;
    if (cfg->max_local_steps > 0 && steps > cfg->max_local_steps)
        return cfg->max_local_steps;
    return steps > SL_ENGINE_MAX_STEPS ? SL_ENGINE_MAX_STEPS : (uint32_t)steps;
}

int64_t sl_engine_full_window(const sl_task_config *cfg, uint64_t params, uint64_t down_bytes,
                              double step_ms, double up_bps, double down_bps)
{
    double down_ms, up_ms, work, w;
    if (cfg == NULL || !cfg->time_budget || cfg->max_local_steps == 0 || !(step_ms > 0) ||
        !isfinite(step_ms))
        return 0;
    transfer_ms(cfg, params, down_bytes, up_bps, down_bps, &down_ms, &up_ms);
    work = down_ms + (double)cfg->max_local_steps * step_ms + up_ms;
    /* sl_engine_budget_steps keeps a tenth of the time left, at least BUDGET_MARGIN_MS */
    w = work / 0.9 > work + BUDGET_MARGIN_MS ? work / 0.9 : work + BUDGET_MARGIN_MS;
    return w >= 9.2e18 ? INT64_MAX : (int64_t)ceil(w);
}
