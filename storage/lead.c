/*
 * lead.c - leadership of the replicas that share the store, on SQLite
 * (sl_store_lead()): one leader row with the owner, its fencing epoch and
 * the lease's expiry, written through the writer like every write. With
 * SQLite the replicas are processes on one host sharing the file; the
 * fence check in rounds.c refuses a round write of an older epoch. And the
 * check-ins that replicas which do not lead relay to the leader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

typedef struct lead_args {
    const char *owner;
    int64_t lease_ms;
    uint64_t fence; /* the epoch this store leads with (0: none) */
    uint64_t epoch; /* out */
} lead_args;

static int lead_exec(sl_store *s, sl__conn *c, void *arg)
{
    lead_args *a = arg;
    sqlite3_stmt *st;
    char owner[SL_STORE_MAX_OWNER] = "";
    uint64_t epoch = 0;
    int64_t expires = 0, now = sl__now_ms(s);
    int have, rc = sl__stmt(c, "SELECT owner, epoch, expires_at FROM leader WHERE id = 1", &st);
    sl__lead_action act;
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    have = rc == SQLITE_ROW;
    if (have) {
        sl__copy_text(st, 0, owner, sizeof owner);
        epoch = (uint64_t)sqlite3_column_int64(st, 1);
        expires = sqlite3_column_int64(st, 2);
    }
    sqlite3_reset(st);
    if (!have && rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    act = sl__lead_decide(have, owner, epoch, expires, now, a->owner, a->fence);
    a->epoch = act == SL__LEAD_TAKE ? epoch + 1 : epoch;
    if (act == SL__LEAD_BUSY)
        return SL_EBUSY;
    rc = sl__stmt(c,
                  "INSERT INTO leader (id, owner, epoch, expires_at) VALUES (1, ?1, ?2, ?3) "
                  "ON CONFLICT (id) DO UPDATE SET owner = ?1, epoch = ?2, expires_at = ?3",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->owner, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)a->epoch);
    sqlite3_bind_int64(st, 3, now + a->lease_ms);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch)
{
    lead_args a = {owner, lease_ms, 0, 0};
    int rc;
    pthread_mutex_lock(&s->lock);
    a.fence = s->fence;
    pthread_mutex_unlock(&s->lock);
    rc = sl__write(s, lead_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK) {
        pthread_mutex_lock(&s->lock);
        s->fence = a.epoch;
        pthread_mutex_unlock(&s->lock);
    }
    if (rc == SL_OK || rc == SL_EBUSY)
        *epoch = a.epoch;
    return rc;
}

int sl__sq_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT owner, epoch, expires_at FROM leader WHERE id = 1", &st);
    if (rc == SL_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            if (owner != NULL)
                sl__copy_text(st, 0, owner, cap);
            if (epoch != NULL)
                *epoch = (uint64_t)sqlite3_column_int64(st, 1);
            if (remaining_ms != NULL)
                *remaining_ms = sqlite3_column_int64(st, 2) - sl__now_ms(s);
            rc = SL_OK;
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

typedef struct resign_args {
    const char *owner;
    uint64_t fence;
} resign_args;

static int resign_exec(sl_store *s, sl__conn *c, void *arg)
{
    resign_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(
        c, "UPDATE leader SET expires_at = ?3 WHERE id = 1 AND owner = ?1 AND epoch = ?2", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->owner, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)a->fence);
    sqlite3_bind_int64(st, 3, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_resign(sl_store *s, const char *owner)
{
    resign_args a = {owner, 0};
    pthread_mutex_lock(&s->lock);
    a.fence = s->fence;
    pthread_mutex_unlock(&s->lock);
    if (a.fence == 0)
        return SL_OK;
    return sl__write(s, resign_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_fenced(sl_store *s, sl__conn *c)
{
    sqlite3_stmt *st;
    uint64_t fence;
    int rc;
    pthread_mutex_lock(&s->lock);
    fence = s->fence;
    pthread_mutex_unlock(&s->lock);
    if (fence == 0) /* not a replica that leads: nothing to check */
        return SL_OK;
    rc = sl__stmt(c, "SELECT epoch FROM leader WHERE id = 1", &st);
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW && (uint64_t)sqlite3_column_int64(st, 0) == fence ? SL_OK
         : rc == SQLITE_ROW || rc == SQLITE_DONE                            ? SL_EFENCED
                                                 : sl__status_from_sqlite(rc);
    sqlite3_reset(st);
    return rc;
}

typedef struct checkin_args {
    int64_t task, device;
} checkin_args;

static int checkin_exec(sl_store *s, sl__conn *c, void *arg)
{
    checkin_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "INSERT INTO checkins (task_id, device_id, at) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (task_id, device_id) DO UPDATE SET at = excluded.at",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->task);
    sqlite3_bind_int64(st, 2, a->device);
    sqlite3_bind_int64(st, 3, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such task or device */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return SL_OK;
}

int sl__sq_put_checkin(sl_store *s, int64_t task_id, int64_t device_id)
{
    checkin_args a = {task_id, device_id};
    return sl__write(s, checkin_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                         int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT device_id, at FROM checkins WHERE task_id = ?1 AND at >= ?2 "
                  "ORDER BY device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, since_ms);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = fn(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
            if (rc != 0)
                break;
        }
        if (rc == 0 && step != SQLITE_DONE)
            rc = sl__status_from_sqlite(step);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
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

static int partial_exec(sl_store *s, sl__conn *c, void *arg)
{
    partial_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "INSERT INTO round_partials (round_id, replica, data, devices, updates, at) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (round_id, replica) DO UPDATE "
                      "SET data = excluded.data, devices = excluded.devices, "
                      "updates = excluded.updates, at = excluded.at",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->round);
    sqlite3_bind_text(st, 2, a->replica, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 3, a->data, a->len, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 4, a->devices, a->dlen, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (int64_t)a->n);
    sqlite3_bind_int64(st, 6, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such round */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return SL_OK;
}

int sl__sq_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                       size_t len, const int64_t *devices, size_t n)
{
    partial_args a = {round_id, replica, data, len, NULL, 0, n};
    uint8_t *enc = NULL;
    int rc = sl__devices_encode(devices, n, &enc, &a.dlen);
    a.devices = enc;
    if (rc == SL_OK)
        rc = sl__write(s, partial_exec, &a, SL__WRITE_TIMEOUT_MS);
    free(enc);
    return rc;
}

int sl__sq_foreach_partial(sl_store *s, int64_t round_id,
                           int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                     const int64_t *devices, size_t n),
                           void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT replica, data, devices FROM round_partials WHERE round_id = ?1 "
                  "ORDER BY replica",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t *ids = NULL;
            size_t n = 0;
            const char *replica = (const char *)sqlite3_column_text(st, 0);
            rc = sl__devices_decode(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                                    &ids, &n);
            if (rc == SL_OK)
                rc = fn(ctx, replica ? replica : "", sqlite3_column_blob(st, 1),
                        (size_t)sqlite3_column_bytes(st, 1), ids, n);
            free(ids);
            if (rc != 0)
                break;
        }
        if (rc == 0 && step != SQLITE_DONE)
            rc = sl__status_from_sqlite(step);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
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
 * the same transaction. They never fall: the close may have counted what no record holds. */
static int settle_downloads(sl__conn *c, int64_t round_id)
{
    sqlite3_stmt *st;
    sl__dl_tally t;
    int step, rc = sl__stmt(c, "SELECT state FROM rounds WHERE id = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, round_id);
    step = sqlite3_step(st);
    rc = step == SQLITE_ROW ? (sqlite3_column_int(st, 0) >= SL_ROUND_CLOSED ? 1 : 0)
                            : sl__status_from_sqlite(step == SQLITE_DONE ? SQLITE_OK : step);
    sqlite3_reset(st);
    if (rc <= 0)
        return rc; /* open (or unknown: the insert's foreign key would have refused it) */
    sl__dl_tally_init(&t);
    rc = sl__stmt(c, "SELECT bytes, devices FROM round_downloads WHERE round_id = ?1", &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, round_id);
        while (rc == SL_OK && (step = sqlite3_step(st)) == SQLITE_ROW)
            rc = sl__dl_tally_add(&t, sqlite3_column_int64(st, 0), sqlite3_column_blob(st, 1),
                                  (size_t)sqlite3_column_bytes(st, 1));
        if (rc == SL_OK && step != SQLITE_DONE)
            rc = sl__status_from_sqlite(step);
        sqlite3_reset(st);
    }
    if (rc == SL_OK)
        rc = sl__stmt(c,
                      "UPDATE rounds SET bytes_down = MAX(bytes_down, ?2), "
                      "downloads = MAX(downloads, ?3) WHERE id = ?1",
                      &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, round_id);
        sqlite3_bind_int64(st, 2, (int64_t)t.bytes);
        sqlite3_bind_int64(st, 3, (int64_t)sl__dl_tally_devices(&t));
        step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(step);
    }
    sl__dl_tally_free(&t);
    return rc;
}

static int downloads_exec(sl_store *s, sl__conn *c, void *arg)
{
    downloads_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "INSERT INTO round_downloads (round_id, replica, bytes, devices, at) "
                      "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (round_id, replica) DO UPDATE "
                      "SET bytes = excluded.bytes, devices = excluded.devices, at = excluded.at",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->round);
    sqlite3_bind_text(st, 2, a->replica, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (int64_t)a->bytes);
    sqlite3_bind_blob64(st, 4, a->devices ? (const void *)a->devices : "", a->dlen, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such round */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return settle_downloads(c, a->round);
}

int sl__sq_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                         const int64_t *devices, size_t n)
{
    downloads_args a = {round_id, replica, bytes, NULL, 0};
    uint8_t *enc = NULL;
    int rc = sl__devices_encode(devices, n, &enc, &a.dlen);
    a.devices = enc;
    if (rc == SL_OK)
        rc = sl__write(s, downloads_exec, &a, SL__WRITE_TIMEOUT_MS);
    free(enc);
    return rc;
}

int sl__sq_foreach_downloads(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT replica, bytes, devices FROM round_downloads WHERE round_id = ?1 "
                  "ORDER BY replica",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t *ids = NULL, bytes = sqlite3_column_int64(st, 1);
            size_t n = 0;
            const char *replica = (const char *)sqlite3_column_text(st, 0);
            rc = sl__devices_decode(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                                    &ids, &n);
            if (rc == SL_OK)
                rc = fn(ctx, replica ? replica : "", bytes > 0 ? (uint64_t)bytes : 0, ids, n);
            free(ids);
            if (rc != 0)
                break;
        }
        if (rc == 0 && step != SQLITE_DONE)
            rc = sl__status_from_sqlite(step);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}
