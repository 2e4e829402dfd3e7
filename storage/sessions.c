/*
 * sessions.c - device sessions (issue #20): the coordinator's session
 * secrets by epoch, and the sessions it issued, so that operators can list
 * and revoke them. A session's key is derived from its epoch's secret and
 * its token (api/common/session.c), never stored; the rows here hold what
 * an operator sees and what a revocation needs.
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "store_int.h"

static int load_secret(sqlite3_stmt *st, uint32_t *epoch, uint8_t secret[SL_STORE_SECRET_LEN])
{
    if (sqlite3_column_bytes(st, 1) != SL_STORE_SECRET_LEN)
        return SL_ECORRUPT;
    *epoch = (uint32_t)sqlite3_column_int64(st, 0);
    memcpy(secret, sqlite3_column_blob(st, 1), SL_STORE_SECRET_LEN);
    return SL_OK;
}

typedef struct secret_args {
    int rotate;
    uint32_t epoch;
    uint8_t secret[SL_STORE_SECRET_LEN];
} secret_args;

/* The newest secret, made when there is none (or, rotating, always). */
static int secret_exec(sl_store *s, sl__conn *c, void *arg)
{
    secret_args *a = arg;
    sqlite3_stmt *st;
    uint32_t epoch = 0;
    int rc =
        sl__stmt(c, "SELECT epoch, secret FROM session_secrets ORDER BY epoch DESC LIMIT 1", &st);
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        rc = load_secret(st, &a->epoch, a->secret);
        epoch = a->epoch;
        sqlite3_reset(st);
        if (rc != SL_OK || !a->rotate)
            return rc;
    } else {
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return sl__status_from_sqlite(rc);
    }
    if (getrandom(a->secret, sizeof a->secret, 0) != (ssize_t)sizeof a->secret)
        return SL_EIO;
    a->epoch = epoch + 1;
    rc = sl__stmt(c, "INSERT INTO session_secrets (epoch, secret, created_at) VALUES (?1, ?2, ?3)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->epoch);
    sqlite3_bind_blob(st, 2, a->secret, sizeof a->secret, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                          uint8_t secret[SL_STORE_SECRET_LEN])
{
    secret_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.rotate = rotate;
    rc = sl__write(s, secret_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK) {
        *epoch = a.epoch;
        memcpy(secret, a.secret, SL_STORE_SECRET_LEN);
    }
    memset(a.secret, 0, sizeof a.secret);
    return rc;
}

int sl__sq_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN])
{
    sl__conn *c;
    sqlite3_stmt *st;
    uint32_t got;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT epoch, secret FROM session_secrets WHERE epoch = ?1", &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, epoch);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_ROW    ? load_secret(st, &got, secret)
             : rc == SQLITE_DONE ? SL_ENOENT
                                 : sl__status_from_sqlite(rc);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

typedef struct session_args {
    const sl_store_session *rec;
} session_args;

/* A session's record as ?1 (id) .. ?5 (expiry). */
static void bind_session(sqlite3_stmt *st, const sl_store_session *r)
{
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->device_id);
    sqlite3_bind_int64(st, 3, r->epoch);
    sqlite3_bind_int64(st, 4, r->issued_at_ms);
    sqlite3_bind_int64(st, 5, r->expires_at_ms);
}

static int session_exec(sl_store *s, sl__conn *c, void *arg)
{
    const sl_store_session *r = ((session_args *)arg)->rec;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "INSERT INTO sessions (id, device_id, epoch, issued_at, expires_at) "
                      "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING",
                      &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    bind_session(st, r);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return rc == SQLITE_CONSTRAINT_FOREIGNKEY ? SL_ENOENT /* no such device */
                                                  : sl__status_from_sqlite(rc);
    if (sqlite3_changes(c->db) == 1)
        return SL_OK;
    /* the id is taken: the same record again is done (as on PostgreSQL), another a conflict */
    rc = sl__stmt(c,
                  "SELECT 1 FROM sessions WHERE id = ?1 AND device_id = ?2 AND epoch = ?3 AND "
                  "issued_at = ?4 AND expires_at = ?5",
                  &st);
    if (rc != SL_OK)
        return rc;
    bind_session(st, r);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? SL_OK : rc == SQLITE_DONE ? SL_ECONFLICT : sl__status_from_sqlite(rc);
}

int sl__sq_put_session(sl_store *s, const sl_store_session *rec)
{
    session_args a = {rec};
    return sl__write(s, session_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                         int (*fn)(void *ctx, const sl_store_session *rec), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    /* one device's by its index (revoking them holds the server's session lock) */
    rc = sl__stmt(c,
                  device_id != 0
                      ? "SELECT id, device_id, epoch, issued_at, expires_at, revoked_at FROM "
                        "sessions WHERE device_id = ?1 AND expires_at > ?2 ORDER BY issued_at, id"
                      : "SELECT id, device_id, epoch, issued_at, expires_at, revoked_at FROM "
                        "sessions WHERE ?1 = 0 AND expires_at > ?2 ORDER BY issued_at, id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, device_id);
        sqlite3_bind_int64(st, 2, now_ms);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            sl_store_session r;
            const char *id = (const char *)sqlite3_column_text(st, 0);
            memset(&r, 0, sizeof r);
            snprintf(r.id, sizeof r.id, "%s", id ? id : "");
            r.device_id = sqlite3_column_int64(st, 1);
            r.epoch = (uint32_t)sqlite3_column_int64(st, 2);
            r.issued_at_ms = sqlite3_column_int64(st, 3);
            r.expires_at_ms = sqlite3_column_int64(st, 4);
            r.revoked_at_ms =
                sqlite3_column_type(st, 5) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 5);
            rc = fn(ctx, &r);
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

typedef struct revoke_args {
    int64_t device;
    const char *id;
    uint64_t count;
} revoke_args;

static int revoke_exec(sl_store *s, sl__conn *c, void *arg)
{
    revoke_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "UPDATE sessions SET revoked_at = ?3 WHERE device_id = ?1 AND "
                      "(?2 IS NULL OR id = ?2) AND revoked_at IS NULL AND expires_at > ?3",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->device);
    if (a->id != NULL)
        sqlite3_bind_text(st, 2, a->id, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->count = (uint64_t)sqlite3_changes(c->db);
    return SL_OK;
}

int sl__sq_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count)
{
    revoke_args a = {device_id, id, 0};
    int rc;
    rc = sl__write(s, revoke_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK && count != NULL)
        *count = a.count;
    return rc;
}
