/*
 * pg_lead.c - leadership of the replicas sharing a PostgreSQL store
 * (sl_store_lead()): the leader row, locked FOR UPDATE while a replica
 * renews or takes over, so two replicas never both win; lease times on the
 * server's clock, so replicas whose clocks differ still agree on expiry.
 * The fence itself is checked by pg_rounds.c (sl__pg_fenced()). And the
 * check-ins that replicas which do not lead relay to the leader.
 */
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

/* The server's wall clock in ms: one clock for every replica. */
#define NOW_MS "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

typedef struct lead_args {
    const char *owner;
    int64_t lease_ms;
    uint64_t fence, epoch;
} lead_args;

static int lead_exec(sl__pg *p, PGconn *c, void *arg)
{
    lead_args *a = arg;
    char owner[SL_STORE_MAX_OWNER] = "";
    PGresult *r = NULL;
    sl__pgq q = {0};
    sl__lead_action act;
    int have, rc;
    (void)p;
    /* the first replica ever creates the row it then competes for, with epoch 0 (nobody) */
    rc = sl__pg_exec(c,
                     "INSERT INTO leader (id, owner, epoch, expires_at) VALUES (1, '', 0, 0) "
                     "ON CONFLICT (id) DO NOTHING",
                     NULL, NULL);
    if (rc == SL_OK)
        rc = sl__pg_exec(
            c, "SELECT owner, epoch, expires_at, " NOW_MS " FROM leader WHERE id = 1 FOR UPDATE",
            NULL, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return SL_EIO;
    }
    sl__pg_copy_text(r, 0, 0, owner, sizeof owner);
    have = sl__pg_int(r, 0, 1) > 0;
    a->epoch = (uint64_t)sl__pg_int(r, 0, 1);
    act = sl__lead_decide(have, owner, a->epoch, sl__pg_int(r, 0, 2), sl__pg_int(r, 0, 3), a->owner,
                          a->fence);
    PQclear(r);
    if (act == SL__LEAD_BUSY)
        return SL_EEXIST; /* SL_EBUSY to the caller; sl__pg_tx() would retry SL_EBUSY */
    if (act == SL__LEAD_TAKE)
        a->epoch++;
    sl__pgq_text(&q, a->owner);
    sl__pgq_int(&q, (int64_t)a->epoch);
    sl__pgq_int(&q, a->lease_ms);
    return sl__pg_exec(
        c, "UPDATE leader SET owner = $1, epoch = $2, expires_at = " NOW_MS " + $3 WHERE id = 1",
        &q, NULL);
}

int sl__pg_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch)
{
    sl__pg *p = (sl__pg *)(void *)s;
    lead_args a = {owner, lease_ms, 0, 0};
    int rc;
    pthread_mutex_lock(&p->lock);
    a.fence = p->fence;
    pthread_mutex_unlock(&p->lock);
    rc = sl__pg_tx(p, 0, SL__PG_TIMEOUT_MS, lead_exec, &a);
    if (rc == SL_EEXIST)
        rc = SL_EBUSY;
    if (rc == SL_OK) {
        pthread_mutex_lock(&p->lock);
        p->fence = a.epoch;
        pthread_mutex_unlock(&p->lock);
    }
    if (rc == SL_OK || rc == SL_EBUSY)
        *epoch = a.epoch;
    return rc;
}

typedef struct leader_args {
    char *owner;
    size_t cap;
    uint64_t *epoch;
    int64_t *remaining_ms;
} leader_args;

static int leader_exec(sl__pg *p, PGconn *c, void *arg)
{
    leader_args *a = arg;
    PGresult *r = NULL;
    int rc;
    (void)p;
    rc = sl__pg_exec(c, "SELECT owner, epoch, expires_at - " NOW_MS " FROM leader WHERE id = 1",
                     NULL, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) != 1 || sl__pg_int(r, 0, 1) == 0) {
        rc = SL_ENOENT;
    } else {
        if (a->owner != NULL)
            sl__pg_copy_text(r, 0, 0, a->owner, a->cap);
        if (a->epoch != NULL)
            *a->epoch = (uint64_t)sl__pg_int(r, 0, 1);
        if (a->remaining_ms != NULL)
            *a->remaining_ms = sl__pg_int(r, 0, 2);
    }
    PQclear(r);
    return rc;
}

int sl__pg_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms)
{
    leader_args a = {owner, cap, epoch, remaining_ms};
    return sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, leader_exec, &a);
}

typedef struct resign_args {
    const char *owner;
    uint64_t fence;
} resign_args;

static int resign_exec(sl__pg *p, PGconn *c, void *arg)
{
    resign_args *a = arg;
    sl__pgq q = {0};
    (void)p;
    sl__pgq_text(&q, a->owner);
    sl__pgq_int(&q, (int64_t)a->fence);
    return sl__pg_exec(
        c, "UPDATE leader SET expires_at = " NOW_MS " WHERE id = 1 AND owner = $1 AND epoch = $2",
        &q, NULL);
}

int sl__pg_resign(sl_store *s, const char *owner)
{
    sl__pg *p = (sl__pg *)(void *)s;
    resign_args a = {owner, 0};
    pthread_mutex_lock(&p->lock);
    a.fence = p->fence;
    pthread_mutex_unlock(&p->lock);
    if (a.fence == 0)
        return SL_OK;
    return sl__pg_tx(p, 0, SL__PG_TIMEOUT_MS, resign_exec, &a);
}

typedef struct checkin_args {
    int64_t task, device;
} checkin_args;

static int checkin_exec(sl__pg *p, PGconn *c, void *arg)
{
    checkin_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->device);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    return sl__pg_exec(c,
                       "INSERT INTO checkins (task_id, device_id, at) VALUES ($1, $2, $3) "
                       "ON CONFLICT (task_id, device_id) DO UPDATE SET at = excluded.at",
                       &q, NULL);
}

int sl__pg_put_checkin(sl_store *s, int64_t task_id, int64_t device_id)
{
    checkin_args a = {task_id, device_id};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, checkin_exec, &a);
}

typedef struct checkins_args {
    int64_t task, since;
    int (*fn)(void *ctx, int64_t device_id, int64_t at_ms);
    void *ctx;
    int stop;
} checkins_args;

static int checkins_exec(sl__pg *p, PGconn *c, void *arg)
{
    checkins_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->since);
    rc = sl__pg_exec(c,
                     "SELECT device_id, at FROM checkins WHERE task_id = $1 AND at >= $2 "
                     "ORDER BY device_id",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    for (int i = 0; i < PQntuples(r) && a->stop == 0; i++)
        a->stop = a->fn(a->ctx, sl__pg_int(r, i, 0), sl__pg_int(r, i, 1));
    PQclear(r);
    return SL_OK;
}

int sl__pg_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                         int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx)
{
    checkins_args a = {task_id, since_ms, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, checkins_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

/* ---- partial sums ---------------------------------------------------------------------- */

typedef struct partial_args {
    int64_t round;
    const char *replica;
    const void *data;
    size_t len;
    const uint8_t *devices;
    size_t dlen, n;
} partial_args;

static int partial_exec(sl__pg *p, PGconn *c, void *arg)
{
    partial_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_int(&q, a->round);
    sl__pgq_text(&q, a->replica);
    sl__pgq_bytes(&q, a->data, a->len);
    sl__pgq_bytes(&q, a->devices, a->dlen);
    sl__pgq_int(&q, (int64_t)a->n);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    return sl__pg_exec(c,
                       "INSERT INTO round_partials (round_id, replica, data, devices, updates, at) "
                       "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (round_id, replica) DO UPDATE "
                       "SET data = excluded.data, devices = excluded.devices, "
                       "updates = excluded.updates, at = excluded.at",
                       &q, NULL);
}

int sl__pg_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                       size_t len, const int64_t *devices, size_t n)
{
    partial_args a = {round_id, replica, data, len, NULL, 0, n};
    uint8_t *enc = NULL;
    int rc = sl__devices_encode(devices, n, &enc, &a.dlen);
    a.devices = enc;
    if (rc == SL_OK)
        rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, partial_exec, &a);
    free(enc);
    return rc;
}

typedef struct partials_args {
    int64_t round;
    int (*fn)(void *ctx, const char *replica, const void *data, size_t len, const int64_t *devices,
              size_t n);
    void *ctx;
    int stop;
} partials_args;

static int partials_exec(sl__pg *p, PGconn *c, void *arg)
{
    partials_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round);
    rc = sl__pg_exec(c,
                     "SELECT replica, data, devices FROM round_partials WHERE round_id = $1 "
                     "ORDER BY replica COLLATE \"C\"",
                     &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r) && a->stop == 0; i++) {
        int64_t *ids = NULL;
        size_t n = 0;
        rc = sl__devices_decode(PQgetvalue(r, i, 2), (size_t)PQgetlength(r, i, 2), &ids, &n);
        if (rc == SL_OK)
            a->stop = a->fn(a->ctx, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                            (size_t)PQgetlength(r, i, 1), ids, n);
        free(ids);
    }
    PQclear(r);
    return rc;
}

int sl__pg_foreach_partial(sl_store *s, int64_t round_id,
                           int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                     const int64_t *devices, size_t n),
                           void *ctx)
{
    partials_args a = {round_id, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, partials_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

/* ---- replicas' downloads --------------------------------------------------------------- */

typedef struct downloads_args {
    int64_t round;
    const char *replica;
    uint64_t bytes;
    const uint8_t *devices;
    size_t dlen;
} downloads_args;

/* A record written after its round closed (a replica's last interval, which the leader's read
 * at the close missed): the round's bytes_down and downloads rise to every record's sum, in
 * the same transaction (the round's row locked first once closed, so two replicas' last writes
 * add up).
 * They never fall: the close may have counted what no record holds. */
static int settle_downloads(PGconn *c, int64_t round_id)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    sl__dl_tally t;
    int closed, rc;
    sl__pgq_int(&q, round_id);
    rc = sl__pg_exec(c, "SELECT state FROM rounds WHERE id = $1", &q, &r);
    closed = rc == SL_OK && PQntuples(r) == 1 && sl__pg_int(r, 0, 0) >= SL_ROUND_CLOSED;
    PQclear(r);
    if (rc != SL_OK || !closed)
        return rc; /* open: no lock, so the replicas' writes at every sync never wait */
    /* closed: two replicas' last writes take turns, each then reading the other's committed
     * record (a statement's snapshot under READ COMMITTED); NO KEY, so the lock does not wait
     * for the key-share lock of another record's insert (its foreign key) */
    rc = sl__pg_exec(c, "SELECT 1 FROM rounds WHERE id = $1 FOR NO KEY UPDATE", &q, NULL);
    if (rc != SL_OK)
        return rc;
    sl__dl_tally_init(&t);
    rc = sl__pg_exec(c, "SELECT bytes, devices FROM round_downloads WHERE round_id = $1", &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r); i++)
        rc = sl__dl_tally_add(&t, sl__pg_int(r, i, 0), PQgetvalue(r, i, 1),
                              (size_t)PQgetlength(r, i, 1));
    PQclear(r);
    if (rc == SL_OK) {
        sl__pgq u = {0};
        sl__pgq_int(&u, round_id);
        sl__pgq_int(&u, (int64_t)t.bytes);
        sl__pgq_int(&u, (int64_t)sl__dl_tally_devices(&t));
        rc = sl__pg_exec(c,
                         "UPDATE rounds SET bytes_down = GREATEST(bytes_down, $2), "
                         "downloads = GREATEST(downloads, $3) WHERE id = $1",
                         &u, NULL);
    }
    sl__dl_tally_free(&t);
    return rc;
}

static int downloads_exec(sl__pg *p, PGconn *c, void *arg)
{
    downloads_args *a = arg;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, a->round);
    sl__pgq_text(&q, a->replica);
    sl__pgq_int(&q, (int64_t)a->bytes);
    sl__pgq_bytes(&q, a->devices ? (const void *)a->devices : "", a->dlen);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    rc = sl__pg_exec(c,
                     "INSERT INTO round_downloads (round_id, replica, bytes, devices, at) "
                     "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (round_id, replica) DO UPDATE "
                     "SET bytes = excluded.bytes, devices = excluded.devices, at = excluded.at",
                     &q, NULL);
    return rc == SL_OK ? settle_downloads(c, a->round) : rc;
}

int sl__pg_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                         const int64_t *devices, size_t n)
{
    downloads_args a = {round_id, replica, bytes, NULL, 0};
    uint8_t *enc = NULL;
    int rc = sl__devices_encode(devices, n, &enc, &a.dlen);
    a.devices = enc;
    if (rc == SL_OK)
        rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, downloads_exec, &a);
    free(enc);
    return rc;
}

typedef struct downloads_list_args {
    int64_t round;
    int (*fn)(void *ctx, const char *replica, uint64_t bytes, const int64_t *devices, size_t n);
    void *ctx;
    int stop;
} downloads_list_args;

static int downloads_list_exec(sl__pg *p, PGconn *c, void *arg)
{
    downloads_list_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round);
    rc = sl__pg_exec(c,
                     "SELECT replica, bytes, devices FROM round_downloads WHERE round_id = $1 "
                     "ORDER BY replica COLLATE \"C\"",
                     &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r) && a->stop == 0; i++) {
        int64_t *ids = NULL, bytes = sl__pg_int(r, i, 1);
        size_t n = 0;
        rc = sl__devices_decode(PQgetvalue(r, i, 2), (size_t)PQgetlength(r, i, 2), &ids, &n);
        if (rc == SL_OK)
            a->stop = a->fn(a->ctx, PQgetvalue(r, i, 0), bytes > 0 ? (uint64_t)bytes : 0, ids, n);
        free(ids);
    }
    PQclear(r);
    return rc;
}

int sl__pg_foreach_downloads(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx)
{
    downloads_list_args a = {round_id, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, downloads_list_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}
