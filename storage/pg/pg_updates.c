/*
 * pg_updates.c - acknowledged updates and resumable uploads on PostgreSQL
 * (updates.c's twin). An update is acknowledged once its transaction has
 * committed (synchronous_commit on: flushed on the primary and on the
 * synchronous standbys the server names). (round, device) is unique, so a
 * retry to any replica finds the original receipt: acknowledged once,
 * never twice.
 */
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

/* The receipt of the update stored for (round, device) when it is @u's (a retry): SL_OK,
 * SL_ECONFLICT (another update is stored), or @none when there is none. */
static int receipt_of(PGconn *c, const sl_update_put *u, sl_store_receipt *out, int none)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, u->round_id);
    sl__pgq_int(&q, u->device_id);
    rc = sl__pg_exec(c,
                     "SELECT id, received_at, sha256 FROM updates WHERE round_id = $1 AND "
                     "device_id = $2",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) != 1)
        rc = none;
    else if (PQgetlength(r, 0, 2) != 32 || memcmp(PQgetvalue(r, 0, 2), u->sha256, 32) != 0)
        rc = SL_ECONFLICT;
    else {
        out->update_id = sl__pg_int(r, 0, 0);
        out->received_at_ms = sl__pg_int(r, 0, 1);
        out->duplicate = 1;
    }
    PQclear(r);
    return rc;
}

/*
 * The round takes updates while SELECTING or TRAINING: SL_OK, SL_ENOENT or SL_ESTATE. The
 * share lock orders this update against the leader's move to AGGREGATING (an update of the
 * row): an update another replica acknowledges commits before the leader reads the round's
 * updates, or sees the round aggregating and is refused; none falls in between.
 */
static int round_open(PGconn *c, int64_t round_id)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, round_id);
    rc = sl__pg_exec(c, "SELECT state FROM rounds WHERE id = $1 FOR SHARE", &q, &r);
    if (rc == SL_OK)
        rc = PQntuples(r) == 0                          ? SL_ENOENT
             : sl__pg_int(r, 0, 0) <= SL_ROUND_TRAINING ? SL_OK
                                                        : SL_ESTATE;
    PQclear(r);
    return rc;
}

int sl__pg_put_update_exec(sl__pg *p, PGconn *c, const sl_update_put *u, sl_store_receipt *out)
{
    int64_t now = sl__pg_now_ms(p);
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc = round_open(c, u->round_id);
    if (rc == SL_ESTATE) /* a retry of an update stored before the round closed: its receipt */
        return receipt_of(c, u, out, SL_ESTATE);
    if (rc != SL_OK)
        return rc;
    sl__pgq_int(&q, u->round_id);
    sl__pgq_int(&q, u->device_id);
    sl__pgq_bytes(&q, u->frame, u->frame_len);
    sl__pgq_int(&q, u->num_samples);
    sl__pgq_bytes(&q, u->sha256, 32);
    sl__pgq_int(&q, now);
    sl__pgq_int(&q, u->local_steps);
    rc = sl__pg_exec(c,
                     "INSERT INTO updates (round_id, device_id, frame, num_samples, sha256, "
                     "received_at, local_steps) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                     "ON CONFLICT (round_id, device_id) DO NOTHING RETURNING id",
                     &q, &r);
    if (rc != SL_OK) /* a foreign key: no such round or device */
        return rc;
    if (PQntuples(r) == 1) {
        out->update_id = sl__pg_int(r, 0, 0);
        out->received_at_ms = now;
        out->duplicate = 0;
        PQclear(r);
        return SL_OK;
    }
    PQclear(r);
    /* (round, device) has an update already: the same one is a retry */
    return receipt_of(c, u, out, SL_EIO);
}

typedef struct put_args {
    const sl_update_put *u;
    sl_store_receipt receipt;
} put_args;

static int put_exec(sl__pg *p, PGconn *c, void *arg)
{
    put_args *a = arg;
    return sl__pg_put_update_exec(p, c, a->u, &a->receipt);
}

int sl__pg_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                      sl_store_receipt *out)
{
    put_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.u = u;
    rc = sl__pg_tx((sl__pg *)(void *)s, 0, timeout_ms, put_exec, &a);
    if (rc == SL_OK)
        *out = a.receipt;
    return rc;
}

typedef struct receipt_args {
    int64_t round_id, device_id;
    const uint8_t *sha256;
    sl_store_receipt *out;
} receipt_args;

static int receipt_exec(sl__pg *p, PGconn *c, void *arg)
{
    receipt_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round_id);
    sl__pgq_int(&q, a->device_id);
    rc = sl__pg_exec(c,
                     "SELECT id, received_at, sha256 FROM updates WHERE round_id = $1 AND "
                     "device_id = $2",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) == 0)
        rc = SL_ENOENT;
    else if (PQgetlength(r, 0, 2) != 32 || memcmp(PQgetvalue(r, 0, 2), a->sha256, 32) != 0)
        rc = SL_ECONFLICT;
    else {
        a->out->update_id = sl__pg_int(r, 0, 0);
        a->out->received_at_ms = sl__pg_int(r, 0, 1);
        a->out->duplicate = 1;
    }
    PQclear(r);
    return rc;
}

int sl__pg_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                       sl_store_receipt *out)
{
    receipt_args a = {round_id, device_id, sha256, out};
    return sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, receipt_exec, &a);
}

typedef struct count_args {
    int64_t round_id;
    uint64_t n;
} count_args;

static int count_exec(sl__pg *p, PGconn *c, void *arg)
{
    count_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round_id);
    rc = sl__pg_exec(c, "SELECT count(*)::bigint FROM updates WHERE round_id = $1", &q, &r);
    if (rc == SL_OK)
        a->n = (uint64_t)sl__pg_int(r, 0, 0);
    PQclear(r);
    return rc;
}

int sl__pg_count_updates(sl_store *s, int64_t round_id, uint64_t *count)
{
    count_args a = {round_id, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, count_exec, &a);
    if (rc == SL_OK)
        *count = a.n;
    return rc;
}

typedef struct each_args {
    int64_t round_id;
    int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len, uint32_t num_samples,
              const uint8_t *sha256);
    void *ctx;
    int stop;   /* @fn's non-zero answer */
    int called; /* @fn has seen a row: the transaction must not run again */
} each_args;

/* Rows come through a cursor, 64 at a time: a round's frames never all sit in memory. */
static int each_exec(sl__pg *p, PGconn *c, void *arg)
{
    each_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc, n;
    (void)p;
    sl__pgq_int(&q, a->round_id);
    rc = sl__pg_exec(c,
                     "DECLARE each_update NO SCROLL CURSOR FOR SELECT device_id, frame, "
                     "num_samples, sha256 FROM updates WHERE round_id = $1 ORDER BY device_id",
                     &q, NULL);
    do {
        if (rc == SL_OK)
            rc = sl__pg_exec(c, "FETCH 64 FROM each_update", NULL, &r);
        n = rc == SL_OK ? PQntuples(r) : 0;
        for (int i = 0; i < n && a->stop == 0 && rc == SL_OK; i++) {
            if (PQgetlength(r, i, 3) != 32) {
                rc = SL_ECORRUPT;
                break;
            }
            a->called = 1;
            a->stop = a->fn(a->ctx, sl__pg_int(r, i, 0), PQgetvalue(r, i, 1),
                            (size_t)PQgetlength(r, i, 1), (uint32_t)sl__pg_int(r, i, 2),
                            (const uint8_t *)PQgetvalue(r, i, 3));
        }
        PQclear(r);
        r = NULL;
    } while (rc == SL_OK && n > 0 && a->stop == 0);
    /* once the caller has seen rows a retry would show them twice: fail instead */
    return rc == SL_EBUSY && a->called ? SL_EIO : rc;
}

int sl__pg_foreach_update(sl_store *s, int64_t round_id,
                          int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                    uint32_t num_samples, const uint8_t *sha256),
                          void *ctx)
{
    each_args a = {round_id, fn, ctx, 0, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, each_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

/* ---- resumable uploads --------------------------------------------------- */

static int create_upload_exec(sl__pg *p, PGconn *c, void *arg)
{
    const sl_upload_record *u = arg;
    int64_t now = sl__pg_now_ms(p);
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    /* the device's row, locked: its creates on any replica take their turns at the count */
    sl__pgq_int(&q, u->device_id);
    rc = sl__pg_exec(c, "SELECT id FROM devices WHERE id = $1 FOR UPDATE", &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = PQntuples(r) == 1 ? SL_OK : SL_ENOENT;
    PQclear(r);
    if (rc != SL_OK)
        return rc;
    q.n = 0;
    sl__pgq_text(&q, u->id);
    rc = sl__pg_exec(c, "SELECT 1 FROM uploads WHERE id = $1", &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = PQntuples(r) > 0 ? SL_EEXIST : SL_OK; /* nothing changed */
    PQclear(r);
    if (rc != SL_OK)
        return rc;
    /* the device's live sessions for other rounds; those of this round it replaces */
    q.n = 0;
    sl__pgq_int(&q, u->device_id);
    sl__pgq_int(&q, u->round_id);
    sl__pgq_int(&q, now);
    rc = sl__pg_exec(c,
                     "SELECT count(*) FROM uploads WHERE device_id = $1 AND round_id <> $2 AND "
                     "expires_at > $3",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = sl__pg_int(r, 0, 0) >= SL_STORE_UPLOADS_PER_DEVICE ? SL_ELIMIT : SL_OK;
    PQclear(r);
    if (rc != SL_OK)
        return rc;
    rc = sl__pg_exec(c,
                     "DELETE FROM uploads WHERE device_id = $1 AND round_id = $2 AND "
                     "expires_at > $3",
                     &q, NULL);
    if (rc != SL_OK)
        return rc;
    q.n = 0;
    sl__pgq_text(&q, u->id);
    sl__pgq_int(&q, u->device_id);
    sl__pgq_int(&q, u->round_id);
    sl__pgq_int(&q, (int64_t)u->length);
    sl__pgq_bytes(&q, u->sha256, 32);
    sl__pgq_int(&q, u->num_samples);
    sl__pgq_int(&q, u->expires_at_ms);
    sl__pgq_int(&q, u->local_steps);
    /* the bytes grow as they arrive (SQLite reserves them up front) */
    rc = sl__pg_exec(c,
                     "INSERT INTO uploads (id, device_id, round_id, length, \"offset\", sha256, "
                     "num_samples, expires_at, data, local_steps) VALUES ($1, $2, $3, $4, 0, $5, "
                     "$6, $7, ''::bytea, $8) ON CONFLICT (id) DO NOTHING",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = sl__pg_changes(r) == 1 ? SL_OK : SL_EEXIST;
    PQclear(r);
    return rc;
}

int sl__pg_create_upload(sl_store *s, const sl_upload_record *r)
{
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, create_upload_exec, (void *)r);
}

/* A session's row (@lock: FOR UPDATE): SL_OK live, SL_ETIMEDOUT expired, SL_ENOENT none. */
static int load_any_upload(sl__pg *p, PGconn *c, const char *id, int lock, sl_upload_record *u)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_text(&q, id);
    rc = sl__pg_exec(c,
                     lock ? "SELECT device_id, round_id, length, \"offset\", sha256, num_samples, "
                            "expires_at, local_steps FROM uploads WHERE id = $1 FOR UPDATE"
                          : "SELECT device_id, round_id, length, \"offset\", sha256, num_samples, "
                            "expires_at, local_steps FROM uploads WHERE id = $1",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) == 0)
        rc = SL_ENOENT;
    else if (sl__pg_int(r, 0, 6) <= sl__pg_now_ms(p))
        rc = SL_ETIMEDOUT;
    else if (PQgetlength(r, 0, 4) != 32)
        rc = SL_ECORRUPT;
    else {
        memset(u, 0, sizeof *u);
        memcpy(u->id, id, strlen(id));
        u->device_id = sl__pg_int(r, 0, 0);
        u->round_id = sl__pg_int(r, 0, 1);
        u->length = (uint64_t)sl__pg_int(r, 0, 2);
        u->offset = (uint64_t)sl__pg_int(r, 0, 3);
        memcpy(u->sha256, PQgetvalue(r, 0, 4), 32);
        u->num_samples = (uint32_t)sl__pg_int(r, 0, 5);
        u->expires_at_ms = sl__pg_int(r, 0, 6);
        u->local_steps = (uint32_t)sl__pg_int(r, 0, 7);
    }
    PQclear(r);
    return rc;
}

/* A live session only: writes on an expired one fail as on an unknown id. */
static int load_upload(sl__pg *p, PGconn *c, const char *id, int lock, sl_upload_record *u)
{
    int rc = load_any_upload(p, c, id, lock, u);
    return rc == SL_ETIMEDOUT ? SL_ENOENT : rc;
}

typedef struct get_args {
    const char *id;
    sl_upload_record rec;
} get_args;

static int get_upload_exec(sl__pg *p, PGconn *c, void *arg)
{
    get_args *a = arg;
    return load_any_upload(p, c, a->id, 0, &a->rec);
}

int sl__pg_get_upload(sl_store *s, const char *id, sl_upload_record *out)
{
    get_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.id = id;
    rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, get_upload_exec, &a);
    if (rc == SL_OK)
        *out = a.rec;
    return rc;
}

typedef struct append_args {
    const char *id;
    uint64_t offset;
    const void *data;
    size_t len;
    uint64_t new_offset;
} append_args;

static int append_exec(sl__pg *p, PGconn *c, void *arg)
{
    append_args *a = arg;
    sl_upload_record u;
    sl__pgq q = {0};
    int rc = load_upload(p, c, a->id, 1, &u);
    if (rc != SL_OK)
        return rc;
    if (a->offset != u.offset)
        return SL_ECONFLICT;
    if (a->len > u.length - u.offset)
        return SL_ETOOBIG;
    sl__pgq_text(&q, a->id);
    sl__pgq_bytes(&q, a->data, a->len);
    sl__pgq_int(&q, (int64_t)(u.offset + a->len));
    rc = sl__pg_exec(c, "UPDATE uploads SET data = data || $2, \"offset\" = $3 WHERE id = $1", &q,
                     NULL);
    if (rc == SL_OK)
        a->new_offset = u.offset + a->len;
    return rc;
}

int sl__pg_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data, size_t len,
                         int64_t timeout_ms, uint64_t *new_offset)
{
    append_args a = {id, offset, data, len, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, timeout_ms, append_exec, &a);
    if (rc == SL_OK)
        *new_offset = a.new_offset;
    return rc;
}

/* The first @len bytes of a session's data, malloc'd. */
static int read_data(PGconn *c, const char *id, uint64_t len, void **out)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    size_t n = 0;
    int rc;
    sl__pgq_text(&q, id);
    rc = sl__pg_exec(c, "SELECT data FROM uploads WHERE id = $1", &q, &r);
    if (rc == SL_OK && (PQntuples(r) != 1 || (uint64_t)PQgetlength(r, 0, 0) < len))
        rc = SL_ECORRUPT;
    if (rc == SL_OK)
        rc = sl__pg_dup_bytes(r, 0, 0, out, &n);
    PQclear(r);
    return rc;
}

typedef struct read_args {
    const char *id;
    void *buf;
    size_t len;
} read_args;

static int read_exec(sl__pg *p, PGconn *c, void *arg)
{
    read_args *a = arg;
    sl_upload_record u;
    int rc = load_upload(p, c, a->id, 0, &u);
    if (rc == SL_OK)
        rc = read_data(c, a->id, u.offset, &a->buf);
    if (rc == SL_OK)
        a->len = (size_t)u.offset;
    return rc;
}

int sl__pg_read_upload(sl_store *s, const char *id, void **out, size_t *len)
{
    read_args a = {id, NULL, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, read_exec, &a);
    if (rc != SL_OK) {
        free(a.buf);
        return rc;
    }
    *out = a.buf;
    *len = a.len;
    return SL_OK;
}

typedef struct finish_args {
    const char *id;
    sl_store_receipt receipt;
} finish_args;

static int finish_exec(sl__pg *p, PGconn *c, void *arg)
{
    finish_args *a = arg;
    sl_upload_record u;
    sl_update_put put;
    sl__pgq q = {0};
    void *data = NULL;
    int rc = load_upload(p, c, a->id, 1, &u);
    if (rc != SL_OK)
        return rc;
    if (u.offset != u.length)
        return SL_ESTATE;
    if ((rc = read_data(c, a->id, u.length, &data)) != SL_OK)
        return rc;
    put.round_id = u.round_id;
    put.device_id = u.device_id;
    put.frame = data;
    put.frame_len = (size_t)u.length;
    put.num_samples = u.num_samples;
    put.sha256 = u.sha256;
    put.local_steps = u.local_steps;
    rc = sl__pg_put_update_exec(p, c, &put, &a->receipt);
    free(data);
    if (rc != SL_OK)
        return rc;
    sl__pgq_text(&q, a->id);
    return sl__pg_exec(c, "DELETE FROM uploads WHERE id = $1", &q, NULL);
}

int sl__pg_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out)
{
    finish_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.id = id;
    rc = sl__pg_tx((sl__pg *)(void *)s, 0, timeout_ms, finish_exec, &a);
    if (rc == SL_OK)
        *out = a.receipt;
    return rc;
}

typedef struct delete_args {
    const char *id;
    int found;
} delete_args;

static int delete_exec(sl__pg *p, PGconn *c, void *arg)
{
    delete_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_text(&q, a->id);
    rc = sl__pg_exec(c, "DELETE FROM uploads WHERE id = $1", &q, &r);
    if (rc == SL_OK)
        a->found = sl__pg_changes(r) > 0;
    PQclear(r);
    return rc;
}

int sl__pg_delete_upload(sl_store *s, const char *id)
{
    delete_args a = {id, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, delete_exec, &a);
    if (rc == SL_OK && !a.found)
        rc = SL_ENOENT;
    return rc;
}

typedef struct expire_args {
    uint32_t deleted;
} expire_args;

/* Expired sessions give back their bytes at once; the small row that stays lets
 * sl_store_get_upload() say "expired" for SL_STORE_UPLOAD_TOMBSTONE_MS more. */
static int expire_exec(sl__pg *p, PGconn *c, void *arg)
{
    expire_args *a = arg;
    int64_t now = sl__pg_now_ms(p);
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, now);
    /* an offset of -1 marks a released session (its bytes grow as they arrive, so an empty
     * one would not tell a session that never received a byte from a released one) */
    rc = sl__pg_exec(c,
                     "UPDATE uploads SET data = ''::bytea, \"offset\" = -1 WHERE expires_at <= $1 "
                     "AND \"offset\" >= 0",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    a->deleted = (uint32_t)sl__pg_changes(r);
    PQclear(r);
    q.n = 0;
    sl__pgq_int(&q, now - SL_STORE_UPLOAD_TOMBSTONE_MS);
    return sl__pg_exec(c, "DELETE FROM uploads WHERE expires_at <= $1", &q, NULL);
}

int sl__pg_expire_uploads(sl_store *s, uint32_t *deleted)
{
    expire_args a = {0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, expire_exec, &a);
    if (rc == SL_OK && deleted != NULL)
        *deleted = a.deleted;
    return rc;
}

typedef struct steps_args {
    int64_t round_id;
    int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps);
    void *ctx;
    int stop;
} steps_args;

static int steps_exec(sl__pg *p, PGconn *c, void *arg)
{
    steps_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round_id);
    rc = sl__pg_exec(c,
                     "SELECT device_id, local_steps FROM updates WHERE round_id = $1 "
                     "ORDER BY device_id",
                     &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r) && a->stop == 0; i++)
        a->stop = a->fn(a->ctx, sl__pg_int(r, i, 0), (uint32_t)sl__pg_int(r, i, 1));
    PQclear(r);
    return rc;
}

int sl__pg_list_steps(sl_store *s, int64_t round_id,
                      int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx)
{
    steps_args a = {round_id, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, steps_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

/* The rounds of task $1 that are over, but the latest $2 of those, whose updates still hold
 * their bytes (sl_store_retain_updates) */
#define RETIRING_ROUNDS                                                                       \
    "SELECT id FROM rounds WHERE task_id = $1 AND state >= 3 AND updates_retired = 0 "        \
    "AND round_no < coalesce((SELECT round_no FROM rounds WHERE task_id = $1 AND state >= 3 " \
    "                         ORDER BY round_no DESC LIMIT 1 OFFSET $2::bigint - 1), 0)"

typedef struct retain_updates_args {
    int64_t task_id;
    uint32_t keep_rounds;
    uint64_t retired;
} retain_updates_args;

static int retain_updates_exec(sl__pg *p, PGconn *c, void *arg)
{
    static const char *const sql[] = {
        "UPDATE updates SET frame = ''::bytea WHERE octet_length(frame) > 0 AND round_id IN "
        "(" RETIRING_ROUNDS ")",
        "DELETE FROM round_partials WHERE round_id IN (" RETIRING_ROUNDS ")",
        /* last: it takes the rounds out of the set the two above read */
        "UPDATE rounds SET updates_retired = 1 WHERE id IN (" RETIRING_ROUNDS ")"};
    retain_updates_args *a = arg;
    (void)p;
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        PGresult *r = NULL;
        sl__pgq q = {0};
        int rc;
        sl__pgq_int(&q, a->task_id);
        sl__pgq_int(&q, a->keep_rounds);
        rc = sl__pg_exec(c, sql[i], &q, &r);
        if (rc != SL_OK)
            return rc;
        if (i == 0)
            a->retired = (uint64_t)sl__pg_changes(r);
        PQclear(r);
    }
    return SL_OK;
}

int sl__pg_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired)
{
    retain_updates_args a = {task_id, keep_rounds, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, retain_updates_exec, &a);
    if (rc == SL_OK && retired != NULL)
        *retired = a.retired;
    return rc;
}
