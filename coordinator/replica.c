/*
 * replica.c - coordinator replicas sharing one store (issue #21).
 *
 * Every replica serves check-ins, downloads and uploads; exactly one, the
 * leader, runs round transitions (open, select, close). Leadership is a
 * lease in the store (sl_store_lead()): the leader renews it every quarter
 * of its length; a replica that finds it expired takes over with the next
 * epoch, and the store then refuses every round write of the older epoch
 * (SL_EFENCED), so a leader that was paused or cut off cannot close a round
 * after its successor started. A killed leader's rounds therefore move on
 * within about one lease (default 5 s) plus a tick.
 *
 * What crosses replicas goes through the store, never from replica to
 * replica:
 *   - updates: any replica stores them (durable before its answer); the
 *     leader counts them from the store before deciding on a round, and
 *     reads them all after its move to AGGREGATING (the store refuses
 *     updates from then on, so none is acknowledged and left out);
 *   - check-ins: a follower records them (sl_store_put_checkin()); the
 *     leader adds the devices to the round's pool before it selects;
 *   - downloads: every replica writes what it served of the open round's
 *     downloads (bytes, devices) at its sync and reads the others' back for
 *     its status; the leader sums them into the round's bytes_down and
 *     downloads at the close, and a follower's last write, once it sees the
 *     round over, raises them by what it served after the leader's read;
 *     an ended round's write the store refuses (the leader's at the close,
 *     a follower's last) is kept and written again at each sync (and when
 *     the engine stops) until the store takes it;
 *   - rounds, models and tasks: followers re-read a task from the store
 *     when its newest round changed, so their answers (selected or not,
 *     the model version, deadlines) follow the leader's within a sync
 *     interval.
 * Promoted, a replica reloads every task from the store as a restart would
 * (open rounds resume with their participants and stored updates).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

static int flush_partial(sl_engine *e, sl__task *t);
static int sync_downloads(sl_engine *e, sl__task *t);
static void keep_late(sl_engine *e, sl__task *t, int why);
static void write_late(sl_engine *e);

/* How often a replica re-reads the store (followers) or refreshes counts (the leader). */
#define SYNC_MS 250

static int64_t mono_ms(void)
{
    return sl_clock_monotonic_ns(NULL) / 1000000;
}

int sl__engine_leads(const sl_engine *e)
{
    return e->replica[0] == '\0' || e->leader;
}

/* Replace task @t (NULL: a task new to this replica) with the store's version of it. */
static int reload_task(sl_engine *e, sl__task *t, int64_t task_id)
{
    char err[256] = "";
    sl__task *fresh = NULL;
    int rc = sl__engine_load_task(e, task_id, &fresh, err, sizeof err);
    if (rc == SL_ENOENT && t == NULL)
        return SL_OK; /* created, but its initial model not stored yet */
    if (rc != SL_OK)
        return rc;
    if (t == NULL)
        return sl__engine_add_task(e, fresh);
    /* the sum of the updates this replica took reaches the store before the task goes */
    if ((rc = flush_partial(e, t)) != SL_OK)
        sl_log(SL_LOG_WARN, "replica", "storing a partial sum: %s; its updates are read",
               sl_strerror(rc));
    /* and its downloads: written now, and kept while the round is the same one; when that round
     * is over, written once more even if unchanged, so that the store settles the closed
     * round's figures with them (sl_store_put_downloads: the leader's read at the close may
     * have come before this replica's last write) */
    int over = t->round_open && !(fresh->round_open && fresh->round.id == t->round.id);
    if (over && t->dl_round == t->round.id && (t->dl_bytes > 0 || t->downloaded.n > 0))
        t->dl_dirty = 1; /* (a replica that served nothing of the round writes nothing) */
    if ((rc = sync_downloads(e, t)) != SL_OK) {
        if (over && t->dl_dirty && t->dl_round == t->round.id)
            keep_late(e, t, rc); /* written again at the next syncs, until the store takes it */
        else
            sl_log(SL_LOG_WARN, "replica", "storing the downloads: %s", sl_strerror(rc));
    }
    if (fresh->round_open && t->round_open && fresh->round.id == t->round.id) {
        sl__idset swap = fresh->downloaded;
        fresh->downloaded = t->downloaded;
        t->downloaded = swap;
        swap = fresh->dl_others;
        fresh->dl_others = t->dl_others;
        t->dl_others = swap;
        fresh->dl_round = t->dl_round;
        fresh->dl_bytes = t->dl_bytes;
        fresh->dl_others_bytes = t->dl_others_bytes;
        fresh->dl_dirty = t->dl_dirty;
        fresh->dl_adopt_round = t->dl_adopt_round; /* this process's counts are the newer */
    }
    for (size_t i = 0; i < e->ntasks; i++)
        if (e->tasks[i] == t)
            e->tasks[i] = fresh;
    sl__task_free(t);
    return SL_OK;
}

static int newest_round(void *ctx, const sl_round_record *r)
{
    *(sl_round_record *)ctx = *r;
    return 0;
}

/* A follower's view of task @t: reloaded when the store's newest round is another one, or
 * the same in another state; else the count of stored updates. */
static int follow_task(sl_engine *e, sl__task *t)
{
    sl_round_record r;
    uint64_t stored = 0;
    int rc;
    memset(&r, 0, sizeof r);
    rc = sl_store_list_rounds(e->store, t->id, 0, 1, newest_round, &r);
    if (rc != SL_OK)
        return rc;
    if (r.id != t->round.id || r.state != t->round.state || r.base_version != t->round.base_version)
        return reload_task(e, t, t->id);
    if (t->round_open && r.state == SL_ROUND_TRAINING) {
        rc = sl_store_count_updates(e->store, r.id, &stored);
        if (rc == SL_OK)
            t->round.reported = (uint32_t)stored;
    }
    return rc;
}

typedef struct absorb_ctx {
    sl_engine *e;
    sl__task *t;
    int64_t now;
} absorb_ctx;

/* A device that checked in at another replica joins the pool, as a check-in here would. */
static int absorb_one(void *ctx, int64_t device_id, int64_t at_ms)
{
    absorb_ctx *a = ctx;
    sl__task *t = a->t;
    sl__device *d = sl__engine_device(a->e, device_id);
    (void)at_ms;
    if (d == NULL)
        return SL_ENOMEM;
    if (a->now < d->cooldown_until_ms || sl__idset_has(&t->refused, device_id) ||
        sl__idset_has(&t->selected, device_id))
        return 0;
    if (sl__idset_add(&t->pool, device_id) != SL_OK)
        return 0;
    t->checked_in++;
    if (t->select_idle) {
        /* the first device of an empty pool starts the selection window (engine.c) */
        int64_t limit = t->round.opened_at_ms + t->cfg.report_deadline_ms;
        int64_t at = a->now + t->cfg.selection_window_ms;
        t->select_idle = 0;
        if (at > limit)
            at = limit;
        if (at > t->round.select_deadline_ms) {
            int64_t report = t->round.report_deadline_ms - t->round.select_deadline_ms;
            t->round.select_deadline_ms = at;
            t->round.report_deadline_ms = at + report;
        }
    }
    return 0;
}

/* The leader's view of task @t: check-ins other replicas relayed join a selecting round's
 * pool (those since the previous round's training began: devices told to come back for
 * this selection); updates other replicas stored count toward a training round. */
static int lead_task(sl_engine *e, sl__task *t)
{
    uint64_t stored = 0;
    int rc = SL_OK;
    if (!t->round_open)
        return SL_OK;
    if (t->round.state == SL_ROUND_SELECTING) {
        absorb_ctx a = {e, t, sl__engine_now(e)};
        int64_t since =
            t->round.opened_at_ms - t->cfg.report_deadline_ms - t->cfg.selection_window_ms;
        rc = sl_store_list_checkins(e->store, t->id, since, absorb_one, &a);
    } else if (t->round.state == SL_ROUND_TRAINING) {
        rc = sl_store_count_updates(e->store, t->round.id, &stored);
        if (rc == SL_OK && stored > t->round.reported) {
            t->round.reported = (uint32_t)stored;
            if (t->round.reported >= t->cfg.quorum && t->quorum_at_ms < 0)
                t->quorum_at_ms = sl__engine_now(e) - t->round.select_deadline_ms;
        }
    }
    return rc;
}

/* Tasks created at another replica. */
typedef struct new_ctx {
    sl_engine *e;
    int rc;
} new_ctx;

static int load_new(void *ctx, int64_t task_id)
{
    new_ctx *n = ctx;
    if (sl__engine_find_task(n->e, task_id) == NULL) {
        int rc = reload_task(n->e, NULL, task_id);
        if (rc != SL_OK && n->rc == SL_OK)
            n->rc = rc;
    }
    return 0;
}

/* Every task as the store holds it now (a promotion: the state of a restart). */
static int reload_all(sl_engine *e)
{
    new_ctx n = {e, SL_OK};
    int rc = SL_OK;
    for (size_t i = 0; i < e->ntasks && rc == SL_OK; i++)
        rc = reload_task(e, e->tasks[i], e->tasks[i]->id);
    if (rc == SL_OK)
        rc = sl_store_list_tasks(e->store, load_new, &n);
    return rc == SL_OK ? n.rc : rc;
}

static void demote(sl_engine *e, const char *why)
{
    if (!e->leader)
        return;
    e->leader = 0;
    e->demotions++;
    sl_log(SL_LOG_WARN, "replica", "%s no longer leads (epoch %llu): %s", e->replica,
           (unsigned long long)e->epoch, why);
}

void sl__replica_fenced(sl_engine *e)
{
    demote(e, "a newer leader took over");
    e->renew_at_ms = 0;
}

/* Take or renew the lease when it is time; a promotion reloads every task. */
static int lease(sl_engine *e, int64_t now)
{
    uint64_t epoch = 0;
    int64_t lease_ms = e->opt.lease_ms;
    int rc;
    if (now < e->renew_at_ms)
        return SL_OK;
    rc = sl_store_lead(e->store, e->replica, lease_ms, &epoch);
    if (rc == SL_OK) {
        e->renewed_ms = now;
        e->renew_at_ms = now + lease_ms / 4;
        if (!e->leader || epoch != e->epoch) {
            /* a promotion, or a leader that was paused while another took the lease and lost
             * it again (a new epoch: its tasks moved on meanwhile) loads the store's state.
             * The busy marks of an earlier leadership go; the open rounds' participants are
             * marked again as their tasks load */
            if (e->leader)
                demote(e, "another replica led meanwhile (a newer epoch)");
            sl__engine_clear_busy(e);
            e->promoting = 1;
            rc = reload_all(e);
            e->promoting = 0;
            if (rc != SL_OK) /* try again at the next tick, still following */
                return rc;
            e->leader = 1;
            e->epoch = epoch;
            e->promotions++;
            sl_log(SL_LOG_INFO, "replica", "%s leads (epoch %llu)", e->replica,
                   (unsigned long long)epoch);
        }
        return SL_OK;
    }
    e->renew_at_ms = now + (lease_ms / 4 < 1000 ? lease_ms / 4 : 1000);
    if (rc == SL_EBUSY) {
        demote(e, "another replica holds the lease");
        return SL_OK;
    }
    /* the store did not answer: a leader that cannot renew assumes it lost the lease when
     * its last renewal is as old as the lease (the fence would refuse its writes anyway) */
    if (e->leader && now - e->renewed_ms >= lease_ms)
        demote(e, "the lease could not be renewed");
    return rc;
}

int sl__replica_tick(sl_engine *e, int *lead)
{
    new_ctx n = {e, SL_OK};
    int64_t now = mono_ms();
    int rc;
    *lead = 1;
    if (e->replica[0] == '\0')
        return SL_OK;
    rc = lease(e, now);
    *lead = e->leader;
    if (rc != SL_OK || now - e->synced_ms < SYNC_MS)
        return rc;
    e->synced_ms = now;
    write_late(e); /* ended rounds' downloads the store refused before */
    rc = sl_store_list_tasks(e->store, load_new, &n);
    if (rc == SL_OK)
        rc = n.rc;
    for (size_t i = 0; i < e->ntasks && rc == SL_OK; i++) {
        /* this replica's partial sums reach the store within a sync interval */
        int frc = flush_partial(e, e->tasks[i]);
        if (frc != SL_OK)
            sl_log(SL_LOG_WARN, "replica", "storing a partial sum: %s", sl_strerror(frc));
        /* and its downloads; the others' are read back (what its status counts) */
        if ((frc = sync_downloads(e, e->tasks[i])) != SL_OK)
            sl_log(SL_LOG_WARN, "replica", "storing or reading the downloads: %s",
                   sl_strerror(frc));
        rc = e->leader ? lead_task(e, e->tasks[i]) : follow_task(e, e->tasks[i]);
    }
    return rc;
}

int sl_engine_role(sl_engine *e, int *leader, uint64_t *epoch, uint64_t *promotions)
{
    if (e == NULL)
        return SL_EINVAL;
    pthread_mutex_lock(&e->lock);
    if (leader != NULL)
        *leader = sl__engine_leads(e);
    if (epoch != NULL)
        *epoch = e->epoch;
    if (promotions != NULL)
        *promotions = e->promotions;
    pthread_mutex_unlock(&e->lock);
    return SL_OK;
}

uint64_t sl_engine_models_retired(sl_engine *e)
{
    uint64_t n;
    if (e == NULL)
        return 0;
    pthread_mutex_lock(&e->lock);
    n = e->models_retired;
    pthread_mutex_unlock(&e->lock);
    return n;
}

uint64_t sl_engine_updates_retired(sl_engine *e)
{
    uint64_t n;
    if (e == NULL)
        return 0;
    pthread_mutex_lock(&e->lock);
    n = e->updates_retired;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* ---- partial sums ------------------------------------------------------------------------ */

/* The FedAvg family sums in fixed point and can split its sums; FedBuff weighs an update by
 * its staleness at the close, and the robust aggregators sort: those read every update. */
static int partials_ok(const sl_engine *e, const sl__task *t)
{
    return e->replica[0] != '\0' && !t->cfg.fedbuff && t->cfg.aggregator != SL_AGG_TRIMMED_MEAN &&
           t->cfg.aggregator != SL_AGG_MEDIAN;
}

/* Drop task @t's partial (partial_lock held). */
static void drop_partial(sl__task *t)
{
    sl__agg_free(t->partial);
    t->partial = NULL;
    sl__idset_clear(&t->partial_ids);
    t->partial_dirty = 0;
}

void sl__replica_fold(sl_engine *e, sl__task *t, int64_t round_id, int64_t device_id,
                      const void *frame, size_t len, uint32_t num_samples, uint32_t local_steps)
{
    if (!partials_ok(e, t))
        return;
    pthread_mutex_lock(&e->partial_lock);
    if (t->partial_round != round_id) { /* a new round: a new sum */
        drop_partial(t);
        t->partial_round = round_id;
        if (sl__agg_begin(&t->cfg, t->layout, &t->partial) != SL_OK)
            t->partial = NULL;
    }
    /* the sum covers exactly the devices listed: a device whose add failed is left to the
     * leader to read (the whole sum is dropped, as an add that failed may have half-added) */
    if (t->partial != NULL && sl__idset_add(&t->partial_ids, device_id) == SL_OK) {
        if (sl__agg_add_steps(t->partial, frame, len, num_samples ? num_samples : 1, local_steps) ==
            SL_OK)
            t->partial_dirty = 1;
        else
            drop_partial(t); /* partial_round stays: no sum for this round from here on */
    }
    pthread_mutex_unlock(&e->partial_lock);
}

/* Store task @t's partial sum when it changed (gate held exclusively: no fold runs). */
static int flush_partial(sl_engine *e, sl__task *t)
{
    void *data = NULL;
    size_t len = 0;
    int rc = SL_OK;
    pthread_mutex_lock(&e->partial_lock);
    if (t->partial != NULL && t->partial_dirty) {
        rc = sl__agg_export(t->partial, &data, &len);
        if (rc == SL_OK)
            rc = sl_store_put_partial(e->store, t->partial_round, e->replica, data, len,
                                      t->partial_ids.ids, t->partial_ids.n);
        if (rc == SL_OK)
            t->partial_dirty = 0;
    }
    pthread_mutex_unlock(&e->partial_lock);
    free(data);
    return rc;
}

typedef struct merge_ctx {
    sl_engine *e;
    sl__agg *agg;
    sl__idset covered; /* the devices the merged partials cover */
    uint32_t merged;   /* updates they hold */
    int rc;
} merge_ctx;

static int merge_one(void *ctx, const char *replica, const void *data, size_t len,
                     const int64_t *devices, size_t n)
{
    merge_ctx *m = ctx;
    /* a partial that does not merge (damaged, another layout) is left out: its updates are
     * read one by one, as if it did not exist */
    if (sl__agg_merge(m->agg, data, len) != SL_OK) {
        sl_log(SL_LOG_WARN, "replica", "the partial sum of %s does not merge: its updates are read",
               replica);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (sl__idset_add(&m->covered, devices[i]) == SL_ENOMEM) {
            m->rc = SL_ENOMEM;
            return 1;
        }
    m->e->partials_merged++;
    m->merged += (uint32_t)n;
    return 0;
}

typedef struct uncovered_ctx {
    merge_ctx *m;
    int (*add)(void *ctx, int64_t device_id, const void *frame, size_t len, uint32_t num_samples,
               const uint8_t *sha256);
    void *ctx;
} uncovered_ctx;

static int add_uncovered(void *ctx, int64_t device_id, const void *frame, size_t len,
                         uint32_t num_samples, const uint8_t *sha256)
{
    uncovered_ctx *u = ctx;
    if (sl__idset_has(&u->m->covered, device_id))
        return 0;
    u->m->e->updates_read++;
    return u->add(u->ctx, device_id, frame, len, num_samples, sha256);
}

int sl__replica_add_round(sl_engine *e, sl__task *t, int64_t round_id, sl__agg *agg,
                          int (*add)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                     uint32_t num_samples, const uint8_t *sha256),
                          void *ctx, uint32_t *merged)
{
    merge_ctx m;
    uncovered_ctx u;
    int rc;
    *merged = 0;
    if (!partials_ok(e, t))
        return sl_store_foreach_update(e->store, round_id, add, ctx);
    if (t->partial_round == round_id && (rc = flush_partial(e, t)) != SL_OK)
        sl_log(SL_LOG_WARN, "replica",
               "storing this replica's partial sum: %s; its updates are "
               "read",
               sl_strerror(rc));
    memset(&m, 0, sizeof m);
    m.e = e;
    m.agg = agg;
    rc = sl_store_foreach_partial(e->store, round_id, merge_one, &m);
    if (rc == SL_OK)
        rc = m.rc;
    u.m = &m;
    u.add = add;
    u.ctx = ctx;
    if (rc == SL_OK) /* device-id order, as without partials */
        rc = sl_store_foreach_update(e->store, round_id, add_uncovered, &u);
    sl__idset_free(&m.covered);
    *merged = m.merged;
    return rc;
}

/* ---- downloads ----------------------------------------------------------------------------- */

/* @a + @b, at most INT64_MAX (what the store keeps). */
static uint64_t add_bytes(uint64_t a, uint64_t b)
{
    const uint64_t most = (uint64_t)INT64_MAX;
    a = a < most ? a : most;
    return b < most - a ? a + b : most;
}

void sl__replica_count_download(sl__task *t, uint64_t bytes)
{
    if (t->dl_round != t->round.id) { /* the first of this round */
        t->dl_round = t->round.id;
        t->dl_bytes = t->dl_others_bytes = 0;
        sl__idset_clear(&t->dl_others);
    }
    t->dl_bytes = add_bytes(t->dl_bytes, bytes);
    t->dl_dirty = 1;
}

int sl__replica_downloads(const sl__task *t, uint64_t *bytes, sl__idset *devices)
{
    int same = t->dl_round == t->round.id;
    int rc;
    sl__idset_clear(devices);
    *bytes = same ? add_bytes(t->dl_bytes, t->dl_others_bytes) : 0;
    rc = sl__idset_merge(devices, &t->downloaded);
    if (rc == SL_OK && same)
        rc = sl__idset_merge(devices, &t->dl_others);
    return rc;
}

typedef struct downloads_ctx {
    const char *self; /* NULL: every replica's */
    int only_self;    /* 1: self's alone; 0: all but self's */
    uint64_t bytes;
    sl__idset devices;
    int rc;
} downloads_ctx;

static int add_downloads(void *ctx, const char *replica, uint64_t bytes, const int64_t *devices,
                         size_t n)
{
    downloads_ctx *d = ctx;
    if (d->self != NULL && (strcmp(replica, d->self) == 0) != d->only_self)
        return 0;
    d->bytes = add_bytes(d->bytes, bytes);
    for (size_t i = 0; i < n; i++)
        if (sl__idset_add(&d->devices, devices[i]) == SL_ENOMEM) {
            d->rc = SL_ENOMEM;
            return 1;
        }
    return 0;
}

/* Write this replica's downloads of @t's open round when they changed; then read every
 * replica's (@self: all but this one's), into @d. */
static int store_downloads(sl_engine *e, sl__task *t, const char *self, downloads_ctx *d)
{
    int rc = SL_OK;
    memset(d, 0, sizeof *d);
    d->self = self;
    if (t->dl_dirty && t->dl_round == t->round.id) {
        rc = sl_store_put_downloads(e->store, t->round.id, e->replica, t->dl_bytes,
                                    t->downloaded.ids, t->downloaded.n);
        if (rc == SL_OK)
            t->dl_dirty = 0;
    }
    if (rc == SL_OK)
        rc = sl_store_foreach_downloads(e->store, t->round.id, add_downloads, d);
    if (rc == SL_OK)
        rc = d->rc;
    return rc;
}

/* A task loaded with its round open (this replica restarted, was promoted, or first sees the
 * task): what it served of that round before, as the store holds it, joins its counts, once,
 * before it writes them (the write replaces the stored record). */
static int adopt_downloads(sl_engine *e, sl__task *t)
{
    downloads_ctx d;
    int rc;
    if (t->dl_adopt_round == 0)
        return SL_OK;
    if (!t->round_open || t->round.id != t->dl_adopt_round) {
        t->dl_adopt_round = 0; /* another round since: nothing of it was served before */
        return SL_OK;
    }
    memset(&d, 0, sizeof d);
    d.self = e->replica;
    d.only_self = 1;
    rc = sl_store_foreach_downloads(e->store, t->round.id, add_downloads, &d);
    if (rc == SL_OK)
        rc = d.rc;
    if (rc == SL_OK) {
        if (t->dl_round != t->round.id) {
            t->dl_round = t->round.id;
            t->dl_bytes = t->dl_others_bytes = 0;
            sl__idset_clear(&t->dl_others);
        }
        if ((rc = sl__idset_merge(&t->downloaded, &d.devices)) == SL_OK) {
            t->dl_bytes = add_bytes(t->dl_bytes, d.bytes);
            t->dl_adopt_round = 0;
        }
    }
    sl__idset_free(&d.devices);
    return rc;
}

/* A round's downloads this replica served, not yet in the store though the round is over. */
struct sl__dl_late {
    int64_t round_id;
    uint64_t bytes;
    sl__idset devices;
    int adopt; /* 1: the store's record of this replica for the round (from before a restart or a
                  promotion) is not counted in yet: it joins before the write, which replaces it */
};

/* At most this many rounds wait; past it the oldest is given up (logged). */
#define LATE_MAX 64

static void drop_late(sl_engine *e, size_t i)
{
    sl__idset_free(&e->dl_late[i].devices);
    memmove(&e->dl_late[i], &e->dl_late[i + 1], (e->ndl_late - i - 1) * sizeof *e->dl_late);
    e->ndl_late--;
}

/* Task @t's round is over and what this replica served of it did not reach the store (@why):
 * kept, to be written at the next syncs (write_late). A record of the same round is replaced:
 * the counts only grow. */
static void keep_late(sl_engine *e, sl__task *t, int why)
{
    struct sl__dl_late *l = NULL;
    size_t i;
    for (i = 0; i < e->ndl_late; i++)
        if (e->dl_late[i].round_id == t->round.id)
            break;
    if (i == e->ndl_late) {
        if (e->ndl_late == LATE_MAX) {
            sl_log(SL_LOG_WARN, "replica",
                   "downloads of round %lld not stored after %d later rounds: given up",
                   (long long)e->dl_late[0].round_id, LATE_MAX);
            drop_late(e, 0);
            i = e->ndl_late;
        }
        l = realloc(e->dl_late, (e->ndl_late + 1) * sizeof *l);
        if (l == NULL) {
            sl_log(SL_LOG_WARN, "replica", "downloads of round %lld: out of memory, not stored",
                   (long long)t->round.id);
            return;
        }
        e->dl_late = l;
        memset(&l[i], 0, sizeof *l);
        e->ndl_late++;
    }
    l = &e->dl_late[i];
    l->round_id = t->round.id;
    sl__idset_clear(&l->devices);
    if (sl__idset_merge(&l->devices, &t->downloaded) != SL_OK) {
        sl_log(SL_LOG_WARN, "replica", "downloads of round %lld: out of memory, not stored",
               (long long)t->round.id);
        drop_late(e, i);
        return;
    }
    l->bytes = t->dl_round == t->round.id ? t->dl_bytes : 0;
    l->adopt = t->dl_adopt_round == t->round.id;
    sl_log(SL_LOG_WARN, "replica",
           "storing the downloads of round %lld, which is over: %s; written again at each sync",
           (long long)t->round.id, sl_strerror(why));
}

/* Write one kept record (its stored counterpart joined first when not adopted yet). */
static int write_one_late(sl_engine *e, struct sl__dl_late *l)
{
    int rc;
    if (l->adopt) {
        downloads_ctx d;
        memset(&d, 0, sizeof d);
        d.self = e->replica;
        d.only_self = 1;
        rc = sl_store_foreach_downloads(e->store, l->round_id, add_downloads, &d);
        if (rc == SL_OK)
            rc = d.rc;
        if (rc == SL_OK && (rc = sl__idset_merge(&l->devices, &d.devices)) == SL_OK) {
            l->bytes = add_bytes(l->bytes, d.bytes);
            l->adopt = 0;
        }
        sl__idset_free(&d.devices);
        if (rc != SL_OK)
            return rc;
    }
    return sl_store_put_downloads(e->store, l->round_id, e->replica, l->bytes, l->devices.ids,
                                  l->devices.n);
}

/* The kept records, oldest first, until the store refuses one (it is likely down: the rest
 * wait for the next sync). */
static void write_late(sl_engine *e)
{
    for (size_t i = 0; i < e->ndl_late;) { /* a round still open here (its close failed): its
                                              task's counts are newer and written at its sync */
        sl__task *t = NULL;
        for (size_t k = 0; k < e->ntasks && t == NULL; k++)
            if (e->tasks[k]->round_open && e->tasks[k]->round.id == e->dl_late[i].round_id &&
                e->tasks[k]->dl_round == e->dl_late[i].round_id)
                t = e->tasks[k];
        if (t == NULL) {
            i++;
            continue;
        }
        t->dl_dirty = 1;
        drop_late(e, i);
    }
    while (e->ndl_late > 0) {
        int rc = write_one_late(e, &e->dl_late[0]);
        if (rc == SL_ENOENT || rc == SL_EINVAL) { /* the round is gone, or the record is bad */
            sl_log(SL_LOG_WARN, "replica", "downloads of round %lld: %s; given up",
                   (long long)e->dl_late[0].round_id, sl_strerror(rc));
        } else if (rc != SL_OK)
            return;
        drop_late(e, 0);
    }
}

void sl__replica_free(sl_engine *e)
{
    if (e->replica[0] != '\0')
        write_late(e);
    for (size_t i = 0; i < e->ndl_late; i++) {
        sl_log(SL_LOG_WARN, "replica", "stopping: the downloads of round %lld are not stored",
               (long long)e->dl_late[i].round_id);
        sl__idset_free(&e->dl_late[i].devices);
    }
    free(e->dl_late);
    e->dl_late = NULL;
    e->ndl_late = 0;
}

/* At each sync: this replica's downloads reach the store, the others' are read back. */
static int sync_downloads(sl_engine *e, sl__task *t)
{
    downloads_ctx d;
    int rc;
    if ((rc = adopt_downloads(e, t)) != SL_OK || !t->round_open || t->round.id < 1)
        return rc; /* not adopted: nothing written, which would replace the stored record */
    rc = store_downloads(e, t, e->replica, &d);
    if (rc == SL_OK) {
        if (t->dl_round != t->round.id) { /* none served here yet */
            t->dl_round = t->round.id;
            t->dl_bytes = 0;
        }
        sl__idset_free(&t->dl_others);
        t->dl_others = d.devices;
        t->dl_others_bytes = d.bytes;
        return SL_OK;
    }
    sl__idset_free(&d.devices);
    return rc;
}

void sl__replica_close_downloads(sl_engine *e, sl__task *t, sl_round_record *r)
{
    downloads_ctx d;
    int rc;
    if (e->replica[0] == '\0')
        return;
    memset(&d, 0, sizeof d);
    rc = adopt_downloads(e, t);
    if (rc == SL_OK) /* this replica's written, then every replica's read */
        rc = store_downloads(e, t, NULL, &d);
    if (rc != SL_OK && t->dl_dirty && t->dl_round == t->round.id)
        keep_late(e, t, rc); /* not written: the store takes it later and raises the figures */
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "replica",
               "reading the replicas' downloads of round %lld: %s; counting this replica's "
               "and the others' as last read",
               (long long)r->id, sl_strerror(rc));
        sl__idset_free(&d.devices);
        memset(&d, 0, sizeof d);
        if (sl__replica_downloads(t, &d.bytes, &d.devices) != SL_OK) {
            sl__idset_free(&d.devices);
            return; /* out of memory: the figures stay this replica's */
        }
    }
    r->bytes_down = (int64_t)add_bytes(d.bytes, 0);
    r->downloads = d.devices.n > UINT32_MAX ? UINT32_MAX : (uint32_t)d.devices.n;
    sl__idset_free(&d.devices);
}
