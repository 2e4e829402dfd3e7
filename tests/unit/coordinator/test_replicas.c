/*
 * Coordinator replicas sharing one store, in process (coordinator/replica.c):
 * three engines, each with its own store handle on one database, a
 * simulated clock, simulated devices. `test_replicas` runs on an SQLite
 * file; `test_replicas pg` on a throwaway PostgreSQL cluster (skipped,
 * naming why, without one).
 *
 *   - one leads, the others follow; a follower relays check-ins, the leader
 *     draws from them, followers answer the selection and store updates,
 *     the leader counts them and closes the round at its target;
 *   - every round's model is the same bits as one engine's run over the same
 *     accepted updates, whichever replicas took them;
 *   - the leader stops (its lease runs out): another takes over within the
 *     lease and the run goes on; the old leader, back, is fenced: it closes
 *     nothing and follows; no acknowledged update is lost or counted twice.
 */
#include <unistd.h>

#include "../../support/sl_engine_test.h"
#include "../../support/sl_store_test.h"
#include "backend.h"
#include "coord_int.h"
#include "starling/round.h"
#ifdef SL_HAVE_PG
#include <libpq-fe.h>

#include "../../support/sl_pg.h"
#endif

#define LAYOUT  "w 40 50\nb 40\n"
#define T0      (1764465820000LL * 1000000LL)
#define LEASE   2000
#define DEVICES 8
#define CONFIG                                                                           \
    "{\"name\":\"replicas\",\"target\":4,\"quorum\":3,\"over_selection\":1,"             \
    "\"selection_window_ms\":1000,\"report_deadline_ms\":20000,\"rounds\":6,\"seed\":7," \
    "\"cooldown_ms\":0}"

static int g_pg_mode;
#ifdef SL_HAVE_PG
static sl_test_pg g_pg;
#endif

/* One run: @n engines over one store. */
typedef struct cluster {
    char dir[512], path[700];
    sl_clock_manual clock;
    sl_store *store[3];
    sl_engine *engine[3];
    size_t n;
    sl_layout *layout;
    int64_t task, devices[DEVICES];
} cluster;

static sl_store *open_store(cluster *c)
{
    sl_store_options o;
    char err[512];
    sl_store *s = NULL;
    sl_store_options_default(&o);
    o.path = c->path;
    o.clock = &c->clock.clock;
    if (sl_store_open(&o, &s, err, sizeof err) != SL_OK)
        fail_msg("store %s: %s", c->path, err);
    return s;
}

static void open_engine(cluster *c, size_t i)
{
    static const char *const names[3] = {"replica-a", "replica-b", "replica-c"};
    sl_engine_options o;
    char err[256];
    sl_engine_options_default(&o);
    o.clock = &c->clock.clock;
    o.replica = c->n > 1 ? names[i] : NULL;
    o.lease_ms = LEASE;
    c->store[i] = open_store(c);
    if (sl_engine_open(c->store[i], &o, &c->engine[i], err, sizeof err) != SL_OK)
        fail_msg("engine %zu: %s", i, err);
}

static void new_database(cluster *c, const char *name)
{
#ifdef SL_HAVE_PG
    if (g_pg_mode) {
        static int n;
        char sql[64], ci[300];
        PGconn *pc;
        PGresult *r;
        snprintf(ci, sizeof ci, "host=%s user=starling dbname=postgres", g_pg.dir);
        pc = PQconnectdb(ci);
        snprintf(sql, sizeof sql, "CREATE DATABASE r%d", ++n);
        r = PQexec(pc, sql);
        assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
        PQfinish(pc);
        snprintf(c->path, sizeof c->path, "postgresql://starling@/r%d?host=%s", n, g_pg.dir);
        return;
    }
#endif
    snprintf(c->path, sizeof c->path, "%s/%s.db", c->dir, name);
}

static void cluster_init(cluster *c, const char *name, size_t n)
{
    char err[256];
    void *frame;
    size_t len, np;
    float *w;
    memset(c, 0, sizeof *c);
    sl_test_mkdtemp(c->dir, sizeof c->dir, name);
    new_database(c, name);
    c->n = n;
    sl_clock_manual_init(&c->clock, 0, T0);
    assert_int_equal(sl_layout_parse(LAYOUT, strlen(LAYOUT), &c->layout), SL_OK);
    np = (size_t)sl_layout_params(c->layout);
    w = calloc(np, sizeof *w);
    for (size_t i = 0; i < np; i++)
        w[i] = (float)((int)(i % 13) - 6) * 0.01f;
    assert_int_equal(sl_frame_encode_model(c->layout, w, 1, 3, &frame, &len), SL_OK);
    free(w);
    for (size_t i = 0; i < n; i++)
        open_engine(c, i);
    /* the task is created at a replica that does not lead (the last one) */
    if (sl_engine_create_task(c->engine[n - 1], CONFIG, LAYOUT, frame, len, &c->task, err,
                              sizeof err) != SL_OK)
        fail_msg("create task: %s", err);
    free(frame);
    for (size_t i = 0; i < DEVICES; i++) {
        uint8_t key[8] = {(uint8_t)(i + 1), 0x5a};
        assert_int_equal(sl_store_enrol_device(c->store[0], key, 8, "{}", &c->devices[i]), SL_OK);
    }
}

static void cluster_free(cluster *c)
{
    for (size_t i = 0; i < c->n; i++) {
        sl_engine_close(c->engine[i]);
        sl_store_close(c->store[i]);
    }
    sl_layout_free(c->layout);
    sl_test_rmtree(c->dir);
}

/* Advance the clock by @ms and tick the engines that run (@up: bit i for engine i), with
 * a pause long enough for their sync interval to pass. */
static void tick(cluster *c, int64_t ms, unsigned up)
{
    sl_clock_manual_advance(&c->clock, ms * 1000000);
    /* PostgreSQL's leases run on the server's clock, not the simulated one */
    usleep(g_pg_mode && ms >= LEASE ? (useconds_t)ms * 1000 : 260000);
    for (size_t i = 0; i < c->n; i++)
        if (up & (1u << i)) {
            int rc = sl_engine_tick(c->engine[i], NULL);
            if (rc != SL_OK)
                fail_msg("tick of replica %zu: %s", i, sl_strerror(rc));
        }
}

static int leads(cluster *c, size_t i)
{
    int leader = 0;
    assert_int_equal(sl_engine_role(c->engine[i], &leader, NULL, NULL), SL_OK);
    return leader;
}

static sl_task_status status_at(cluster *c, size_t i)
{
    sl_task_status st;
    assert_int_equal(sl_engine_task_status(c->engine[i], c->task, &st), SL_OK);
    return st;
}

static const sl_checkin_info info = {100, "avx2", "", 0, 0, 0};

static size_t leader_of(cluster *c, unsigned up)
{
    for (size_t i = 0; i < c->n; i++)
        if ((up & (1u << i)) && leads(c, i))
            return i;
    fail_msg("no replica leads");
    return 0;
}

/* Every device checks in for the selecting round (device k at replica @route[k % nroute]);
 * none is selected before the draw. */
static void check_in_all(cluster *c, const size_t *route, size_t nroute)
{
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result r;
        size_t at = route[k % nroute];
        assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &r),
                         SL_OK);
        if (r.selected)
            fail_msg("device %zu at replica %zu: selected for round %lld before the draw", k, at,
                     (long long)r.round_id);
    }
}

/* The selected devices (asking the replicas of @route) upload; the leader closes the round.
 * Returns the new model version (0 when the round did not close). */
static int64_t upload_all(cluster *c, unsigned up, const size_t *route, size_t nroute,
                          int64_t *round_id, uint64_t *acked)
{
    size_t lead = leader_of(c, up);
    sl_round_record rec;
    sl_round_stats st;
    uint64_t bytes = 0;
    uint32_t downloads = 0;
    *round_id = status_at(c, lead).round.id;
    assert_int_equal(status_at(c, lead).round.state, SL_ROUND_TRAINING);
    /* the selected devices download the model from their replicas; every replica's status
     * then counts them all, and so does the closed round */
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result r;
        size_t at = route[k % nroute];
        assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &r),
                         SL_OK);
        if (!r.selected)
            continue;
        assert_int_equal(sl_engine_count_download(c->engine[at], c->task, c->devices[k], 1000 + k),
                         SL_OK);
        bytes += 1000 + k;
        downloads++;
    }
    tick(c, 0, up); /* written */
    tick(c, 0, up); /* read back */
    for (size_t i = 0; i < c->n; i++) {
        if (!(up & (1u << i)))
            continue;
        assert_int_equal(sl_engine_round_stats(c->engine[i], *round_id, &st), SL_OK);
        assert_int_equal(st.downloaded, downloads);
        assert_int_equal(st.round.bytes_down, (int64_t)bytes);
    }
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result r;
        sl_accept_result res;
        uint8_t sha[32];
        void *frame;
        size_t len, at = route[k % nroute];
        assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &r),
                         SL_OK);
        if (!r.selected)
            continue;
        assert_int_equal(r.round_id, *round_id);
        sl_test_make_update(c->layout, k, r.round_id, r.model_version, 1.0f, &frame, &len, sha);
        assert_int_equal(sl_engine_accept(c->engine[at], r.round_id, c->devices[k], frame, len,
                                          (uint32_t)(50 + k), sha, &res),
                         SL_OK);
        free(frame);
        assert_true(res.accepted);
        (*acked)++;
    }
    tick(c, 100, up); /* the leader counts the stored updates and closes at the target */
    tick(c, 0, up);
    assert_int_equal(sl_store_get_round(c->store[lead], *round_id, &rec), SL_OK);
    assert_int_equal(rec.bytes_down, (int64_t)bytes);
    assert_int_equal(rec.downloads, downloads);
    return rec.state == SL_ROUND_CLOSED ? rec.base_version + 1 : 0;
}

/* One round through the replicas in @up: check-ins, the leader's draw (it absorbs the
 * check-ins other replicas relayed), uploads, the close. */
static int64_t run_round(cluster *c, unsigned up, const size_t *route, size_t nroute,
                         int64_t *round_id, uint64_t *acked)
{
    assert_true(status_at(c, leader_of(c, up)).round_open);
    check_in_all(c, route, nroute);
    tick(c, 1100, up); /* the leader selects */
    tick(c, 0, up);    /* the followers see the selection */
    return upload_all(c, up, route, nroute, round_id, acked);
}

static void model_digest(cluster *c, int64_t version, uint8_t *sha)
{
    sl_model_record m;
    assert_int_equal(sl_store_get_model(c->store[0], c->task, version, &m), SL_OK);
    memcpy(sha, m.sha256, 32);
    sl_store_model_free(&m);
}

static int count_reporter(void *ctx, int64_t device_id)
{
    (void)device_id;
    (*(uint64_t *)ctx)++;
    return 0;
}

static void test_replicas_and_failover(void **state)
{
    static const size_t spread[3] = {0, 1, 2}, one[1] = {0};
    cluster r, single;
    uint8_t a[32], b[32];
    int64_t round_id, v, ref;
    uint64_t acked = 0, stored = 0, ref_acked = 0;
    (void)state;
    cluster_init(&r, "replicas", 3);
    cluster_init(&single, "single", 1);
    tick(&r, 0, 7);
    tick(&single, 0, 1);
    /* exactly one leads: the first to take the lease */
    assert_int_equal(leads(&r, 0) + leads(&r, 1) + leads(&r, 2), 1);
    assert_true(leads(&r, 0));

    /* two rounds with devices spread over the three replicas; the same devices and updates
     * through one engine alone */
    for (int k = 0; k < 2; k++) {
        v = run_round(&r, 7, spread, 3, &round_id, &acked);
        ref = run_round(&single, 1, one, 1, &round_id, &ref_acked);
        assert_true(v > 0);
        assert_int_equal(v, ref);
        model_digest(&r, v, a);
        model_digest(&single, ref, b);
        assert_memory_equal(a, b, 32); /* the same bits, whichever replica took which update */
    }
    /* the followers serve the leader's model version */
    assert_int_equal(status_at(&r, 1).model_version, v);
    assert_int_equal(status_at(&r, 2).model_version, v);

    /* the leader stops (killed, paused) as the devices check in for the next round at the
     * other replicas: its lease runs out, another replica leads, draws from the relayed
     * check-ins and the run goes on */
    check_in_all(&r, spread + 1, 2);
    tick(&r, LEASE + 100, 6);
    tick(&r, 0, 6);
    assert_int_equal(leads(&r, 1) + leads(&r, 2), 1);
    v = upload_all(&r, 6, spread + 1, 2, &round_id, &acked);
    ref = run_round(&single, 1, one, 1, &round_id, &ref_acked);
    assert_true(v > 0);
    model_digest(&r, v, a);
    model_digest(&single, ref, b);
    assert_memory_equal(a, b, 32);

    /* the old leader comes back: fenced, it follows, its view catches up; nothing doubled.
     * (The replicas that run tick meanwhile: the single engine's round took long enough, on
     * PostgreSQL's real clock, for the new leader's lease to run out if they did not.) */
    tick(&r, 0, 6);
    assert_true(leads(&r, 0)); /* it has not heard yet */
    tick(&r, 0, 7);
    tick(&r, 0, 7);
    assert_false(leads(&r, 0));
    assert_int_equal(leads(&r, 0) + leads(&r, 1) + leads(&r, 2), 1);
    assert_int_equal(status_at(&r, 0).model_version, v);
    v = run_round(&r, 7, spread, 3, &round_id, &acked);
    ref = run_round(&single, 1, one, 1, &round_id, &ref_acked);
    assert_true(v > 0);
    model_digest(&r, v, a);
    model_digest(&single, ref, b);
    assert_memory_equal(a, b, 32);

    /* every acknowledged update is stored once: the rounds' reporters add up to the acks */
    for (int64_t id = 1; id <= round_id; id++)
        assert_int_equal(sl_store_list_reporters(r.store[0], id, count_reporter, &stored), SL_OK);
    assert_int_equal(stored, acked);
    assert_int_equal(acked, ref_acked);
    {
        /* the leaders added the replicas' partial sums, and read only what they did not cover */
        uint64_t merged = 0, read = 0;
        for (size_t i = 0; i < r.n; i++) {
            merged += r.engine[i]->partials_merged;
            read += r.engine[i]->updates_read;
        }
        print_message("closes added %llu partial sums and read %llu of %llu updates one by one\n",
                      (unsigned long long)merged, (unsigned long long)read,
                      (unsigned long long)acked);
        assert_true(merged >= 1);
        assert_true(read < acked);
    }
    cluster_free(&r);
    cluster_free(&single);
}

/* Device @k downloads @bytes of the model at replica @at; 1 when it is selected (counted). */
static int download_at(cluster *c, size_t at, size_t k, uint64_t bytes)
{
    sl_checkin_result cr;
    assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &cr), SL_OK);
    if (!cr.selected)
        return 0;
    assert_int_equal(sl_engine_count_download(c->engine[at], c->task, c->devices[k], bytes), SL_OK);
    return 1;
}

/* Selected device @k sends its update to replica @at, which acknowledges it. */
static void upload_at(cluster *c, size_t at, size_t k)
{
    sl_checkin_result cr;
    sl_accept_result res;
    uint8_t sha[32];
    void *frame;
    size_t len;
    assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &cr), SL_OK);
    assert_true(cr.selected);
    sl_test_make_update(c->layout, k, cr.round_id, cr.model_version, 1.0f, &frame, &len, sha);
    assert_int_equal(sl_engine_accept(c->engine[at], cr.round_id, c->devices[k], frame, len,
                                      (uint32_t)(50 + k), sha, &res),
                     SL_OK);
    free(frame);
    assert_true(res.accepted);
}

/* Two replicas (engine 0 leads) select a round of every device (spread over both); the
 * selected, as replica @at answers them, in @sel. Returns the round's id. */
static int64_t select_round(cluster *c, size_t at, size_t *sel, size_t *nsel)
{
    static const size_t spread[2] = {0, 1};
    *nsel = 0;
    tick(c, 0, 3);
    assert_true(leads(c, 0));
    check_in_all(c, spread, 2);
    tick(c, 1100, 3); /* the leader selects */
    tick(c, 0, 3);    /* the follower sees the selection */
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(c->engine[at], c->task, c->devices[k], &info, &cr),
                         SL_OK);
        if (cr.selected)
            sel[(*nsel)++] = k;
    }
    assert_true(*nsel >= 4);
    return status_at(c, 0).round.id;
}

/* A round selected at the leader; selected device j downloads 1000 + 100 j bytes at replica
 * @at[j], j < 4; the first @synced are written and read back (two syncs) before the rest. */
static int64_t serve_four(cluster *c, const size_t at[4], size_t synced, size_t *sel, size_t *nsel)
{
    int64_t round_id = select_round(c, 0, sel, nsel);
    assert_true(*nsel >= 4);
    for (size_t j = 0; j < 4; j++) {
        if (j == synced) {
            tick(c, 0, 3);
            tick(c, 0, 3);
        }
        assert_true(download_at(c, at[j], sel[j], 1000 + 100 * j));
    }
    return round_id;
}

/* serve_four's replicas: the leader, the leader, the follower, the follower */
static const size_t late_at[4] = {0, 0, 1, 1};

static int failing_downloads(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx)
{
    (void)s, (void)round_id, (void)fn, (void)ctx;
    return SL_EIO;
}

/* The leader cannot read the replicas' downloads at the close: the round still counts its own
 * and the others' as it last read them (at its sync), not its own alone, and closes; what a
 * follower wrote after that read joins the round at the follower's next sync. */
static void test_downloads_when_the_store_fails(void **state)
{
    static const size_t spread[2] = {0, 1};
    cluster r;
    sl__store_ops broken;
    const sl__store_ops *real;
    sl_round_record rec;
    int64_t round_id;
    uint64_t bytes = 0;
    uint32_t downloads = 0, served[2] = {0, 0};
    size_t again = DEVICES;
    (void)state;
    cluster_init(&r, "downloads_fail", 2);
    tick(&r, 0, 3);
    assert_true(leads(&r, 0));
    check_in_all(&r, spread, 2);
    tick(&r, 1100, 3); /* the leader selects */
    tick(&r, 0, 3);    /* the follower sees the selection */
    round_id = status_at(&r, 0).round.id;
    for (size_t k = 0; k < DEVICES; k++) { /* the selected download at each replica in turn */
        sl_checkin_result cr;
        size_t at = spread[downloads % 2];
        assert_int_equal(sl_engine_checkin(r.engine[at], r.task, r.devices[k], &info, &cr), SL_OK);
        if (!cr.selected)
            continue;
        assert_int_equal(sl_engine_count_download(r.engine[at], r.task, r.devices[k], 500 + k),
                         SL_OK);
        bytes += 500 + k;
        downloads++;
        served[at]++;
        if (at == 0 && again == DEVICES)
            again = k;
    }
    assert_true(served[0] > 0 && served[1] > 0);
    tick(&r, 0, 3); /* written */
    tick(&r, 0, 3); /* read back */
    real = ((sl__store_head *)(void *)r.store[0])->ops;
    broken = *real;
    broken.foreach_downloads = failing_downloads;
    ((sl__store_head *)(void *)r.store[0])->ops = &broken;
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        sl_accept_result res;
        uint8_t sha[32];
        void *frame;
        size_t len, at = spread[k % 2]; /* any replica takes an update */
        assert_int_equal(sl_engine_checkin(r.engine[at], r.task, r.devices[k], &info, &cr), SL_OK);
        if (!cr.selected)
            continue;
        sl_test_make_update(r.layout, k, cr.round_id, cr.model_version, 1.0f, &frame, &len, sha);
        assert_int_equal(sl_engine_accept(r.engine[at], cr.round_id, r.devices[k], frame, len,
                                          (uint32_t)(50 + k), sha, &res),
                         SL_OK);
        free(frame);
        assert_true(res.accepted);
    }
    /* a device the leader served fetches the model again at the follower, which writes it at
     * its sync; the leader has not read it when it closes */
    assert_true(again < DEVICES);
    assert_true(download_at(&r, 1, again, 700));
    tick(&r, 0, 2);
    tick(&r, 100, 1); /* the leader closes, its read of the downloads failing */
    ((sl__store_head *)(void *)r.store[0])->ops = real;
    assert_int_equal(sl_store_get_round(r.store[0], round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_CLOSED);
    assert_int_equal(rec.bytes_down, (int64_t)bytes);
    assert_int_equal(rec.downloads, downloads);
    /* the follower sees the close and writes its record once more, unchanged since: the store
     * settles the round with it (the device was counted already) */
    tick(&r, 0, 2);
    assert_int_equal(sl_store_get_round(r.store[0], round_id, &rec), SL_OK);
    assert_int_equal(rec.bytes_down, (int64_t)bytes + 700);
    assert_int_equal(rec.downloads, downloads);
    cluster_free(&r);
}

/* What a replica served of a round outlives its restart under the same name and its promotion:
 * every replica's status and the closed round count every download. */
static void test_downloads_across_restart_and_promotion(void **state)
{
    cluster r;
    sl_round_record rec;
    sl_round_stats st;
    int64_t round_id;
    size_t sel[DEVICES], nsel = 0;
    uint64_t bytes = 0;
    (void)state;
    cluster_init(&r, "downloads_restart", 2);
    round_id = select_round(&r, 1, sel, &nsel);
    /* the follower serves two, writes them, and restarts (same name); a third before its
     * first sync must not replace the two in the store */
    assert_true(download_at(&r, 1, sel[0], 1000));
    assert_true(download_at(&r, 1, sel[1], 1100));
    tick(&r, 0, 3);
    sl_engine_close(r.engine[1]);
    sl_store_close(r.store[1]);
    open_engine(&r, 1);
    assert_true(download_at(&r, 1, sel[2], 1200));
    tick(&r, 0, 3); /* written */
    tick(&r, 0, 3); /* read back */
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(sl_engine_round_stats(r.engine[i], round_id, &st), SL_OK);
        assert_int_equal(st.downloaded, 3);
        assert_int_equal(st.round.bytes_down, 3300);
    }
    /* the leader stops: the follower leads (its tasks reloaded), serves the fourth, closes */
    tick(&r, LEASE + 100, 2);
    tick(&r, 0, 2);
    assert_true(leads(&r, 1));
    assert_true(download_at(&r, 1, sel[3], 1300));
    bytes = 4600;
    for (size_t j = 0; j < nsel; j++)
        upload_at(&r, 1, sel[j]);
    tick(&r, 100, 2); /* the new leader closes */
    tick(&r, 0, 2);
    assert_int_equal(sl_store_get_round(r.store[1], round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_CLOSED);
    assert_int_equal(rec.bytes_down, (int64_t)bytes);
    assert_int_equal(rec.downloads, 4);
    cluster_free(&r);
}

/* What a follower serves after its last write before the leader's close (the leader reads the
 * replicas' downloads at the close) joins the closed round's figures once the follower sees
 * the close: its last write settles them in the store. */
static void test_downloads_after_the_leaders_read(void **state)
{
    cluster r;
    sl_round_record rec;
    int64_t round_id;
    size_t sel[DEVICES], nsel = 0;
    (void)state;
    cluster_init(&r, "downloads_late", 2);
    /* the leader serves two, the follower one, written and read back; the follower serves one
     * more, which no sync of it writes before the leader's close (at the last upload, which
     * meets the round's target) */
    round_id = serve_four(&r, late_at, 3, sel, &nsel);
    for (size_t j = 0; j < nsel; j++) /* the selected upload at the leader */
        upload_at(&r, 0, sel[j]);
    tick(&r, 100, 1);
    tick(&r, 0, 1);
    assert_int_equal(sl_store_get_round(r.store[0], round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_CLOSED);
    assert_int_equal(rec.bytes_down, 3300);
    assert_int_equal(rec.downloads, 3);
    tick(&r, 0, 2); /* the follower sees the close */
    assert_int_equal(sl_store_get_round(r.store[0], round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_CLOSED);
    assert_int_equal(rec.bytes_down, 4600);
    assert_int_equal(rec.downloads, 4);
    cluster_free(&r);
}

static int failing_put(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                       const int64_t *devices, size_t n)
{
    (void)s, (void)round_id, (void)replica, (void)bytes, (void)devices, (void)n;
    return SL_EIO;
}

/* Replica @i's store refuses to write downloads (@broken: NULL puts the real one back). */
static void break_put(cluster *c, size_t i, sl__store_ops *broken, const sl__store_ops **real)
{
    sl__store_head *h = (sl__store_head *)(void *)c->store[i];
    if (broken == NULL) {
        h->ops = *real;
        return;
    }
    *real = h->ops;
    *broken = **real;
    broken->put_downloads = failing_put;
    h->ops = broken;
}

static void assert_round(cluster *c, int64_t round_id, int64_t bytes, uint32_t downloads)
{
    sl_round_record rec;
    assert_int_equal(sl_store_get_round(c->store[0], round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_CLOSED);
    assert_int_equal(rec.bytes_down, bytes);
    assert_int_equal(rec.downloads, downloads);
}

/* A follower's last write of a closed round's downloads that the store refuses is kept and
 * written again at its next syncs (@by_stopping: when it stops), until the store takes it:
 * the round's figures then count it (they did not, before: it was logged and lost). */
static void late_downloads(int by_stopping)
{
    cluster r;
    sl__store_ops broken;
    const sl__store_ops *real = NULL;
    int64_t round_id;
    size_t sel[DEVICES], nsel = 0;
    cluster_init(&r, by_stopping ? "downloads_stop" : "downloads_again", 2);
    round_id = serve_four(&r, late_at, 3, sel, &nsel); /* the last after the follower's write */
    for (size_t j = 0; j < nsel; j++)
        upload_at(&r, 0, sel[j]);
    tick(&r, 100, 1); /* (closed at the last upload) */
    assert_round(&r, round_id, 3300, 3);
    break_put(&r, 1, &broken, &real);
    tick(&r, 0, 2); /* the follower sees the close; its write is refused, and kept */
    tick(&r, 0, 2); /* refused again */
    assert_round(&r, round_id, 3300, 3);
    assert_int_equal(r.engine[1]->ndl_late, 1);
    break_put(&r, 1, NULL, &real);
    if (by_stopping) { /* a replica that stops writes it once more */
        sl_engine_close(r.engine[1]);
        sl_store_close(r.store[1]);
        assert_round(&r, round_id, 4600, 4);
        open_engine(&r, 1);
    } else {
        tick(&r, 0, 2); /* taken */
        assert_round(&r, round_id, 4600, 4);
        assert_int_equal(r.engine[1]->ndl_late, 0);
    }
    tick(&r, 0, 3); /* nothing more to write; the figures stay */
    assert_round(&r, round_id, 4600, 4);
    cluster_free(&r);
}

static void test_late_downloads_written_again(void **state)
{
    (void)state;
    late_downloads(0);
}

static void test_late_downloads_written_when_stopping(void **state)
{
    (void)state;
    late_downloads(1);
}

/* The leader's own write at the close refused (its read not made): the round closes with its
 * own counts and the others' as last read, and its write is kept. A follower's last write
 * raises the figures to the records' sum, which lacks the leader's last download; once the
 * leader's kept write is taken, the sum is every download (before, it stayed short). */
static void test_leaders_refused_write_at_the_close(void **state)
{
    cluster r;
    sl__store_ops broken;
    const sl__store_ops *real = NULL;
    int64_t round_id;
    size_t sel[DEVICES], nsel = 0;
    (void)state;
    cluster_init(&r, "downloads_leader", 2);
    static const size_t at[4] = {0, 1, 0, 1};
    round_id = serve_four(&r, at, 2, sel, &nsel); /* the last two not written before the close */
    break_put(&r, 0, &broken, &real);
    for (size_t j = 0; j < nsel; j++) /* the last upload closes the round; the write refused */
        upload_at(&r, 0, sel[j]);
    tick(&r, 100, 1);
    assert_round(&r, round_id, 3300, 3);
    assert_int_equal(r.engine[0]->ndl_late, 1);
    tick(&r, 0, 2); /* the follower's last write: 1000 + 1100 + 1300 over three devices */
    assert_round(&r, round_id, 3400, 3);
    break_put(&r, 0, NULL, &real);
    tick(&r, 0, 1); /* the leader's kept write taken */
    assert_round(&r, round_id, 4600, 4);
    assert_int_equal(r.engine[0]->ndl_late, 0);
    cluster_free(&r);
}

/* The race at an abandon: the leader counts a round's updates at its report deadline (fewer
 * than the quorum) and closes it as abandoned; a follower stores an update in between and
 * answers the device. Whatever the order, an update the follower acknowledges must be carried
 * into the next round: here it comes just before the leader's close is written, after its
 * count. The leader moves the round on in the store before the count it abandons by, so the
 * follower finds the round over and answers "late" (the device keeps its update); earlier
 * builds counted and then closed, so the follower acknowledged the update and the round was
 * abandoned as empty, carrying nothing: an acknowledged update never aggregated. */
static struct {
    cluster *c;
    const sl__store_ops *real;
    size_t device;
    int64_t round_id;
    int raced;
    sl_accept_result res;
} g_race;

static int upload_then_close(sl_store *s, const sl_round_record *r, const sl_model_put *m)
{
    if (!g_race.raced && r->id == g_race.round_id) {
        uint8_t sha[32];
        void *frame;
        size_t len;
        g_race.raced = 1;
        sl_test_make_update(g_race.c->layout, g_race.device, r->id, 1, 1.0f, &frame, &len, sha);
        assert_int_equal(sl_engine_accept(g_race.c->engine[1], r->id,
                                          g_race.c->devices[g_race.device], frame, len, 60, sha,
                                          &g_race.res),
                         SL_OK);
        free(frame);
    }
    return g_race.real->close_round(s, r, m);
}

static void test_update_racing_an_abandon(void **state)
{
    static const size_t spread[2] = {0, 1};
    cluster r;
    sl__store_ops racing;
    sl_round_record rec;
    uint64_t stored = 0;
    (void)state;
    cluster_init(&r, "abandon_race", 2);
    tick(&r, 0, 3);
    assert_true(leads(&r, 0));
    check_in_all(&r, spread, 2);
    tick(&r, 1100, 3); /* the leader selects */
    tick(&r, 0, 3);    /* the follower sees the selection */
    memset(&g_race, 0, sizeof g_race);
    g_race.c = &r;
    g_race.round_id = status_at(&r, 0).round.id;
    g_race.device = DEVICES;
    for (size_t k = 0; k < DEVICES && g_race.device == DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[1], r.task, r.devices[k], &info, &cr), SL_OK);
        if (cr.selected)
            g_race.device = k;
    }
    assert_true(g_race.device < DEVICES);
    g_race.real = ((sl__store_head *)(void *)r.store[0])->ops;
    racing = *g_race.real;
    racing.close_round = upload_then_close;
    ((sl__store_head *)(void *)r.store[0])->ops = &racing;
    tick(&r, 20000, 1); /* the report deadline: no update, the leader abandons the round */
    ((sl__store_head *)(void *)r.store[0])->ops = g_race.real;
    assert_true(g_race.raced);
    assert_int_equal(sl_store_get_round(r.store[0], g_race.round_id, &rec), SL_OK);
    assert_int_equal(rec.state, SL_ROUND_ABANDONED);
    assert_int_equal(sl_store_count_updates(r.store[0], g_race.round_id, &stored), SL_OK);
    if (g_race.res.accepted && strstr(rec.error, "carried into the next round") == NULL)
        fail_msg("an acknowledged update in a round abandoned without carrying it: \"%s\"",
                 rec.error);
    assert_false(g_race.res.accepted); /* the round was over in the store: late */
    assert_int_equal(g_race.res.reason, SL_REJECT_LATE);
    assert_int_equal(stored, 0);
    cluster_free(&r);
}

/* Another task with @config and a zero model, created at replica 0: its id. */
static int64_t second_task(cluster *c, const char *config)
{
    char err[256];
    void *frame;
    size_t len, np = (size_t)sl_layout_params(c->layout);
    float *w = calloc(np, sizeof *w);
    int64_t id = 0;
    assert_int_equal(sl_frame_encode_model(c->layout, w, 1, 3, &frame, &len), SL_OK);
    free(w);
    if (sl_engine_create_task(c->engine[0], config, LAYOUT, frame, len, &id, err, sizeof err) !=
        SL_OK)
        fail_msg("create task: %s", err);
    free(frame);
    return id;
}

/* A device in one task's open round is busy for the others, across a promotion: the new leader
 * marks the participants of the rounds open when it takes over, so another task's draw does
 * not take them (before, a promoted replica kept busy marks for the rounds it drew itself
 * only, and drew A's devices for B). @promote 0: the same draw by the first leader. */
static void busy_draw(int promote, int *in_a, int *in_b)
{
    static const size_t at0[1] = {0};
    cluster r;
    size_t drawer = promote ? 1 : 0;
    unsigned up = promote ? 2u : 3u;
    int64_t task_b;
    sl_task_status st;
    cluster_init(&r, promote ? "busy_promoted" : "busy_kept", 2);
    tick(&r, 0, 3);
    assert_true(leads(&r, 0));
    check_in_all(&r, at0, 1);
    tick(&r, 1100, 3); /* A draws 4 of the 8 */
    tick(&r, 0, 3);
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[0], r.task, r.devices[k], &info, &cr), SL_OK);
        in_a[k] = cr.selected;
    }
    task_b = second_task(&r, "{\"name\":\"b\",\"target\":4,\"quorum\":3,\"over_selection\":1,"
                             "\"selection_window_ms\":10000,\"report_deadline_ms\":60000,"
                             "\"rounds\":2,\"seed\":11,\"cooldown_ms\":0}");
    tick(&r, 0, 3);
    tick(&r, 0, 3);
    if (promote) { /* the leader stops; the other replica takes over within the lease */
        tick(&r, LEASE + 100, 2);
        tick(&r, 0, 2);
        assert_true(leads(&r, 1));
    }
    for (size_t k = 0; k < DEVICES; k++) { /* every device asks B at the one that leads */
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[drawer], task_b, r.devices[k], &info, &cr),
                         SL_OK);
        assert_false(cr.selected);
    }
    assert_int_equal(sl_engine_task_status(r.engine[drawer], task_b, &st), SL_OK);
    tick(&r, st.round.select_deadline_ms - sl_clock_wall_ns(&r.clock.clock) / 1000000 + 100, up);
    tick(&r, 0, up);
    assert_int_equal(sl_engine_task_status(r.engine[drawer], task_b, &st), SL_OK);
    assert_int_equal(st.round.state, SL_ROUND_TRAINING);
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[drawer], task_b, r.devices[k], &info, &cr),
                         SL_OK);
        in_b[k] = cr.selected;
    }
    cluster_free(&r);
}

static void test_busy_after_promotion(void **state)
{
    int a[DEVICES], b[DEVICES], a_kept[DEVICES], b_kept[DEVICES], na = 0, nb = 0;
    (void)state;
    busy_draw(0, a_kept, b_kept);
    busy_draw(1, a, b);
    assert_memory_equal(a, a_kept, sizeof a); /* the same draws in A */
    for (size_t k = 0; k < DEVICES; k++) {
        assert_false(a_kept[k] && b_kept[k]);
        assert_false(a[k] && b[k]);
        na += a[k];
        nb += b[k];
    }
    assert_int_equal(na, 4);
    assert_int_equal(nb, 4); /* the four A did not select */
}

/* A replica that leads again forgets the busy marks of its earlier leadership: the round it
 * drew was ended by the leader in between, which released its devices; before, they stayed
 * busy in the first replica's memory and no task there drew them again. */
static void test_busy_marks_of_an_earlier_leadership(void **state)
{
    static const size_t at0[1] = {0}, at1[1] = {1};
    cluster r;
    int64_t task_b, round_id;
    uint64_t acked = 0;
    sl_task_status st;
    int nb = 0;
    (void)state;
    cluster_init(&r, "busy_flap", 2);
    tick(&r, 0, 3);
    assert_true(leads(&r, 0));
    check_in_all(&r, at0, 1);
    tick(&r, 1100, 3); /* replica 0 draws A's round: 4 devices busy there */
    tick(&r, 0, 3);
    tick(&r, LEASE + 100, 2); /* replica 0 pauses; replica 1 leads and closes A's round */
    tick(&r, 0, 2);
    assert_true(leads(&r, 1));
    assert_true(upload_all(&r, 2, at1, 1, &round_id, &acked) > 0);
    tick(&r, LEASE + 100, 1); /* replica 1 pauses; replica 0 leads again */
    tick(&r, 0, 1);
    assert_true(leads(&r, 0));
    task_b = second_task(&r, "{\"name\":\"all\",\"target\":8,\"quorum\":4,\"over_selection\":1,"
                             "\"selection_window_ms\":1000,\"report_deadline_ms\":60000,"
                             "\"rounds\":2,\"seed\":3,\"cooldown_ms\":0}");
    tick(&r, 0, 1);
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[0], task_b, r.devices[k], &info, &cr), SL_OK);
    }
    tick(&r, 1100, 1);
    assert_int_equal(sl_engine_task_status(r.engine[0], task_b, &st), SL_OK);
    assert_int_equal(st.round.state, SL_ROUND_TRAINING);
    for (size_t k = 0; k < DEVICES; k++) {
        sl_checkin_result cr;
        assert_int_equal(sl_engine_checkin(r.engine[0], task_b, r.devices[k], &info, &cr), SL_OK);
        nb += cr.selected;
    }
    assert_int_equal(nb, DEVICES); /* A's first four among them */
    cluster_free(&r);
}

/* A replica that does not lead refuses an operator's abort (503: retry, another replica
 * will), and a stale leader cannot close a round: the store fences it. */
static void test_follower_refuses_transitions(void **state)
{
    cluster r;
    sl_task_status st;
    (void)state;
    cluster_init(&r, "fence", 2);
    tick(&r, 0, 3);
    tick(&r, 0, 3);
    st = status_at(&r, 1);
    assert_true(st.round_open);
    assert_int_equal(sl_engine_abort_round(r.engine[1], st.round.id), SL_EFENCED);
    assert_int_equal(sl_engine_abort_round(r.engine[0], st.round.id), SL_OK);
    cluster_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_and_failover),
        cmocka_unit_test(test_follower_refuses_transitions),
        cmocka_unit_test(test_downloads_when_the_store_fails),
        cmocka_unit_test(test_downloads_across_restart_and_promotion),
        cmocka_unit_test(test_downloads_after_the_leaders_read),
        cmocka_unit_test(test_late_downloads_written_again),
        cmocka_unit_test(test_late_downloads_written_when_stopping),
        cmocka_unit_test(test_leaders_refused_write_at_the_close),
        cmocka_unit_test(test_update_racing_an_abandon),
        cmocka_unit_test(test_busy_after_promotion),
        cmocka_unit_test(test_busy_marks_of_an_earlier_leadership),
    };
    if (argc > 1 && strcmp(argv[1], "pg") == 0) {
#ifdef SL_HAVE_PG
        char why[300];
        int rc;
        if (sl_test_pg_start(&g_pg, why, sizeof why) != 0) {
            fprintf(stderr, "PostgreSQL: %s\n", why);
            return 77;
        }
        g_pg_mode = 1;
        rc = cmocka_run_group_tests(tests, NULL, NULL);
        sl_test_pg_stop(&g_pg);
        return rc;
#else
        fprintf(stderr, "this build has no PostgreSQL store\n");
        return 77;
#endif
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
