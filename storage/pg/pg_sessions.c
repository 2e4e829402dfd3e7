/*
 * pg_sessions.c - device sessions on PostgreSQL (sessions.c's twin): the
 * coordinator's session secrets by epoch, and the sessions it issued.
 * Replicas share the secrets: the newest epoch is the one every replica
 * issues with, and two replicas rotating at once make one new epoch.
 */
#include <string.h>
#include <sys/random.h>

#include "pg_int.h"

static sl__pg *pg_of(sl_store *s)
{
    return (sl__pg *)(void *)s;
}

/* Column @col of the first row: a secret, copied to @secret. */
static int load_secret(const PGresult *r, int col, uint8_t secret[SL_STORE_SECRET_LEN])
{
    if (PQgetlength(r, 0, col) != SL_STORE_SECRET_LEN)
        return SL_ECORRUPT;
    memcpy(secret, PQgetvalue(r, 0, col), SL_STORE_SECRET_LEN);
    return SL_OK;
}

typedef struct secret_args {
    int rotate;
    int64_t now;
    uint32_t epoch; /* the newest epoch seen (0: none) */
    uint8_t secret[SL_STORE_SECRET_LEN];
} secret_args;

/* The newest secret into @a; *@found 0 (and epoch 0) when there is none. */
static int newest_secret(PGconn *c, secret_args *a, int *found)
{
    PGresult *r = NULL;
    int rc = sl__pg_exec(c, "SELECT epoch, secret FROM session_secrets ORDER BY epoch DESC LIMIT 1",
                         NULL, &r);
    *found = 0;
    a->epoch = 0;
    if (rc == SL_OK && PQntuples(r) == 1) {
        *found = 1;
        a->epoch = (uint32_t)sl__pg_int(r, 0, 0);
        rc = load_secret(r, 1, a->secret);
    }
    PQclear(r);
    return rc;
}

/* A new secret as epoch a->epoch + 1; *@made 0 when another replica made that epoch first. */
static int make_secret(PGconn *c, secret_args *a, int *made)
{
    uint8_t fresh[SL_STORE_SECRET_LEN];
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    *made = 0;
    if (getrandom(fresh, sizeof fresh, 0) != (ssize_t)sizeof fresh)
        return SL_EIO;
    sl__pgq_int(&q, (int64_t)a->epoch + 1);
    sl__pgq_bytes(&q, fresh, sizeof fresh);
    sl__pgq_int(&q, a->now);
    rc = sl__pg_exec(c,
                     "INSERT INTO session_secrets (epoch, secret, created_at) VALUES ($1, $2, $3) "
                     "ON CONFLICT (epoch) DO NOTHING",
                     &q, &r);
    if (rc == SL_OK && sl__pg_changes(r) == 1) {
        *made = 1;
        a->epoch++;
        memcpy(a->secret, fresh, sizeof fresh);
    }
    PQclear(r);
    memset(fresh, 0, sizeof fresh);
    return rc;
}

/* The newest secret, made when there is none (or, rotating, always). */
static int secret_exec(sl__pg *p, PGconn *c, void *arg)
{
    secret_args *a = arg;
    int found = 0, made = 0;
    int rc = newest_secret(c, a, &found);
    (void)p;
    if (rc != SL_OK || (found && !a->rotate))
        return rc;
    rc = make_secret(c, a, &made);
    if (rc != SL_OK || made)
        return rc;
    /* another replica made the next epoch (and committed) while we did: take its secret,
     * the newest one, as sessions.c would have after running after it */
    rc = newest_secret(c, a, &found);
    return rc == SL_OK && !found ? SL_EBUSY : rc;
}

int sl__pg_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                          uint8_t secret[SL_STORE_SECRET_LEN])
{
    secret_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.rotate = rotate;
    a.now = sl__pg_now_ms(pg_of(s));
    rc = sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, secret_exec, &a);
    if (rc == SL_OK) {
        *epoch = a.epoch;
        memcpy(secret, a.secret, SL_STORE_SECRET_LEN);
    }
    memset(a.secret, 0, sizeof a.secret);
    return rc;
}

static int secret_of_exec(sl__pg *p, PGconn *c, void *arg)
{
    secret_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->epoch);
    rc = sl__pg_exec(c, "SELECT secret FROM session_secrets WHERE epoch = $1", &q, &r);
    if (rc == SL_OK)
        rc = PQntuples(r) == 1 ? load_secret(r, 0, a->secret) : SL_ENOENT;
    PQclear(r);
    return rc;
}

int sl__pg_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN])
{
    secret_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.epoch = epoch;
    rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, secret_of_exec, &a);
    if (rc == SL_OK)
        memcpy(secret, a.secret, SL_STORE_SECRET_LEN);
    memset(a.secret, 0, sizeof a.secret);
    return rc;
}

/*
 * An issued session. Its id is random (128 bits), so an id that is there
 * already is this same record again: a transaction retried after its COMMIT
 * went unanswered, which must not turn into a failure. The same id with
 * other values is SL_ECONFLICT, as in sessions.c.
 */
static int session_exec(sl__pg *p, PGconn *c, void *arg)
{
    const sl_store_session *rec = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_text(&q, rec->id);
    sl__pgq_int(&q, rec->device_id);
    sl__pgq_int(&q, rec->epoch);
    sl__pgq_int(&q, rec->issued_at_ms);
    sl__pgq_int(&q, rec->expires_at_ms);
    /* a foreign key fails as SL_ENOENT: no such device */
    rc = sl__pg_exec(c,
                     "INSERT INTO sessions (id, device_id, epoch, issued_at, expires_at) "
                     "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                     &q, &r);
    if (rc == SL_OK && sl__pg_changes(r) == 0) {
        PQclear(r);
        rc = sl__pg_exec(c,
                         "SELECT 1 FROM sessions WHERE id = $1 AND device_id = $2 AND "
                         "epoch = $3 AND issued_at = $4 AND expires_at = $5",
                         &q, &r);
        if (rc == SL_OK && PQntuples(r) != 1)
            rc = SL_ECONFLICT;
    }
    PQclear(r);
    return rc;
}

int sl__pg_put_session(sl_store *s, const sl_store_session *rec)
{
    return sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, session_exec, (void *)rec);
}

typedef struct list_args {
    int64_t device, now;
    int (*fn)(void *ctx, const sl_store_session *rec);
    void *ctx;
    int done; /* the rows were handed out: a retried transaction must not repeat them */
    int stop; /* fn's non-zero answer, returned as it is (pg_int.h) */
} list_args;

static void read_session(const PGresult *r, int i, sl_store_session *rec)
{
    memset(rec, 0, sizeof *rec);
    sl__pg_copy_text(r, i, 0, rec->id, sizeof rec->id);
    rec->device_id = sl__pg_int(r, i, 1);
    rec->epoch = (uint32_t)sl__pg_int(r, i, 2);
    rec->issued_at_ms = sl__pg_int(r, i, 3);
    rec->expires_at_ms = sl__pg_int(r, i, 4);
    rec->revoked_at_ms = sl__pg_int(r, i, 5); /* NULL reads as 0: not revoked */
}

static int list_exec(sl__pg *p, PGconn *c, void *arg)
{
    list_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    if (a->done)
        return SL_OK;
    sl__pgq_int(&q, a->device);
    sl__pgq_int(&q, a->now);
    /* COLLATE "C": ids in byte order, as SQLite's BINARY collation orders them */
    /* one device's by its index (revoking them holds the server's session lock) */
    rc = sl__pg_exec(c,
                     a->device != 0 ? "SELECT id, device_id, epoch, issued_at, expires_at, "
                                      "revoked_at FROM sessions WHERE device_id = $1 AND "
                                      "expires_at > $2 ORDER BY issued_at, id COLLATE \"C\""
                                    : "SELECT id, device_id, epoch, issued_at, expires_at, "
                                      "revoked_at FROM sessions WHERE $1::bigint = 0 AND "
                                      "expires_at > $2 ORDER BY issued_at, id COLLATE \"C\"",
                     &q, &r);
    if (rc == SL_OK) {
        a->done = 1;
        for (int i = 0; i < PQntuples(r) && a->stop == 0; i++) {
            sl_store_session rec;
            read_session(r, i, &rec);
            a->stop = a->fn(a->ctx, &rec);
        }
    }
    PQclear(r);
    return rc;
}

int sl__pg_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                         int (*fn)(void *ctx, const sl_store_session *rec), void *ctx)
{
    list_args a = {device_id, now_ms, fn, ctx, 0, 0};
    int rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, list_exec, &a);
    return a.stop != 0 ? a.stop : rc;
}

typedef struct revoke_args {
    int64_t device, now;
    const char *id;
    uint64_t count;
} revoke_args;

static int revoke_exec(sl__pg *p, PGconn *c, void *arg)
{
    revoke_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->device);
    sl__pgq_text(&q, a->id); /* NULL: every live session of the device */
    sl__pgq_int(&q, a->now);
    rc = sl__pg_exec(c,
                     "UPDATE sessions SET revoked_at = $3 WHERE device_id = $1 AND "
                     "($2::text IS NULL OR id = $2) AND revoked_at IS NULL AND expires_at > $3",
                     &q, &r);
    if (rc == SL_OK)
        a->count = sl__pg_changes(r);
    PQclear(r);
    return rc;
}

int sl__pg_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count)
{
    revoke_args a = {device_id, sl__pg_now_ms(pg_of(s)), id, 0};
    int rc = sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, revoke_exec, &a);
    if (rc == SL_OK && count != NULL)
        *count = a.count;
    return rc;
}
