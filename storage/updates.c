/* updates.c - acknowledged updates (group-committed, idempotent) and resumable uploads. */
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* The receipt of the update stored for (round, device) when it is @u's (a retry): SL_OK,
 * SL_ECONFLICT (another update is stored), or @none when there is none. */
static int receipt_exec(sl__conn *c, const sl_update_put *u, sl_store_receipt *out, int none)
{
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "SELECT id, received_at, sha256 FROM updates WHERE round_id = ?1 AND "
                      "device_id = ?2",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, u->round_id);
    sqlite3_bind_int64(st, 2, u->device_id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int same = sqlite3_column_bytes(st, 2) == 32 &&
                   memcmp(sqlite3_column_blob(st, 2), u->sha256, 32) == 0;
        if (same) {
            out->update_id = sqlite3_column_int64(st, 0);
            out->received_at_ms = sqlite3_column_int64(st, 1);
            out->duplicate = 1;
        }
        sqlite3_reset(st);
        return same ? SL_OK : SL_ECONFLICT;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? none : sl__status_from_sqlite(rc);
}

/* The round takes updates while SELECTING or TRAINING: SL_OK, SL_ENOENT (no such round) or
 * SL_ESTATE (it is aggregating or over). */
static int round_open(sl__conn *c, int64_t round_id)
{
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "SELECT state FROM rounds WHERE id = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, round_id);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW    ? (sqlite3_column_int(st, 0) <= SL_ROUND_TRAINING ? SL_OK : SL_ESTATE)
         : rc == SQLITE_DONE ? SL_ENOENT
                             : sl__status_from_sqlite(rc);
    sqlite3_reset(st);
    return rc;
}

int sl__put_update_exec(sl_store *s, sl__conn *c, const sl_update_put *u, sl_store_receipt *out)
{
    sqlite3_stmt *st;
    int64_t now = sl__now_ms(s);
    int rc = round_open(c, u->round_id);
    if (rc == SL_ESTATE) /* a retry of an update stored before the round closed: its receipt */
        return receipt_exec(c, u, out, SL_ESTATE);
    if (rc != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "INSERT INTO updates (round_id, device_id, frame, num_samples, sha256, "
                  "received_at, local_steps) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                  "ON CONFLICT (round_id, device_id) DO NOTHING",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, u->round_id);
    sqlite3_bind_int64(st, 2, u->device_id);
    sqlite3_bind_blob64(st, 3, u->frame, u->frame_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, u->num_samples);
    sqlite3_bind_blob(st, 5, u->sha256, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, now);
    sqlite3_bind_int64(st, 7, u->local_steps);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such round or device */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    if (sqlite3_changes(c->db) == 1) {
        out->update_id = sqlite3_last_insert_rowid(c->db);
        out->received_at_ms = now;
        out->duplicate = 0;
        return SL_OK;
    }
    /* (round, device) has an update already: the same one is a retry */
    return receipt_exec(c, u, out, SL_EIO);
}

typedef struct put_args {
    const sl_update_put *u;
    sl_store_receipt receipt;
} put_args;

static int put_exec(sl_store *s, sl__conn *c, void *arg)
{
    put_args *a = arg;
    return sl__put_update_exec(s, c, a->u, &a->receipt);
}

int sl__sq_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                      sl_store_receipt *out)
{
    put_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.u = u;
    rc = sl__write(s, put_exec, &a, timeout_ms);
    if (rc == SL_OK)
        *out = a.receipt;
    return rc;
}

int sl__sq_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                       sl_store_receipt *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT id, received_at, sha256 FROM updates WHERE round_id = ?1 AND "
                  "device_id = ?2",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, round_id);
        sqlite3_bind_int64(st, 2, device_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            if (sqlite3_column_bytes(st, 2) == 32 &&
                memcmp(sqlite3_column_blob(st, 2), sha256, 32) == 0) {
                out->update_id = sqlite3_column_int64(st, 0);
                out->received_at_ms = sqlite3_column_int64(st, 1);
                out->duplicate = 1;
                rc = SL_OK;
            } else {
                rc = SL_ECONFLICT;
            }
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

int sl__sq_count_updates(sl_store *s, int64_t round_id, uint64_t *count)
{
    int64_t n = 0;
    int rc;
    rc = sl__query_int64(s, "SELECT count(*) FROM updates WHERE round_id = ?1", 1, round_id, &n);
    if (rc == SL_OK)
        *count = (uint64_t)n;
    return rc;
}

int sl__sq_foreach_update(sl_store *s, int64_t round_id,
                          int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                    uint32_t num_samples, const uint8_t *sha256),
                          void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    /* one read transaction: a consistent set even while updates keep arriving */
    rc = sl__stmt(c,
                  "SELECT device_id, frame, num_samples, sha256 FROM updates WHERE round_id = ?1 "
                  "ORDER BY device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            if (sqlite3_column_bytes(st, 3) != 32) {
                rc = SL_ECORRUPT;
                break;
            }
            rc = fn(ctx, sqlite3_column_int64(st, 0), sqlite3_column_blob(st, 1),
                    (size_t)sqlite3_column_bytes(st, 1), (uint32_t)sqlite3_column_int64(st, 2),
                    sqlite3_column_blob(st, 3));
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

/* ---- resumable uploads --------------------------------------------------- */

/* One integer that @sql (with ?1 .. ?4 bound to @a .. @d) selects into *@out. */
static int count_of(sl__conn *c, const char *sql, const char *id, int64_t a, int64_t b, int64_t d,
                    int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sl__stmt(c, sql, &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, a);
    sqlite3_bind_int64(st, 3, b);
    sqlite3_bind_int64(st, 4, d);
    rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    rc = rc == SQLITE_ROW ? SL_OK : sl__status_from_sqlite(rc);
    sqlite3_reset(st);
    return rc;
}

static int create_upload_exec(sl_store *s, sl__conn *c, void *arg)
{
    const sl_upload_record *r = arg;
    sqlite3_stmt *st;
    int64_t now = sl__now_ms(s), n = 0;
    int rc = count_of(c, "SELECT count(*) FROM uploads WHERE id = ?1", r->id, 0, 0, 0, &n);
    if (rc == SL_OK && n > 0)
        return SL_EEXIST; /* nothing changed */
    /* the device's live sessions for other rounds; those of this round it replaces */
    if (rc == SL_OK)
        rc = count_of(c,
                      "SELECT count(*) FROM uploads WHERE device_id = ?2 AND round_id <> ?3 AND "
                      "expires_at > ?4 AND id <> ?1",
                      r->id, r->device_id, r->round_id, now, &n);
    if (rc != SL_OK)
        return rc;
    if (n >= SL_STORE_UPLOADS_PER_DEVICE)
        return SL_ELIMIT;
    rc = sl__stmt(
        c, "DELETE FROM uploads WHERE device_id = ?1 AND round_id = ?2 AND expires_at > ?3", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, r->device_id);
    sqlite3_bind_int64(st, 2, r->round_id);
    sqlite3_bind_int64(st, 3, now);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c,
                  "INSERT INTO uploads (id, device_id, round_id, length, offset, sha256, "
                  "num_samples, expires_at, data, local_steps) VALUES (?1, ?2, ?3, ?4, 0, "
                  "?5, ?6, ?7, zeroblob(?4), ?8)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->device_id);
    sqlite3_bind_int64(st, 3, r->round_id);
    sqlite3_bind_int64(st, 4, (int64_t)r->length);
    sqlite3_bind_blob(st, 5, r->sha256, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, r->num_samples);
    sqlite3_bind_int64(st, 7, r->expires_at_ms);
    sqlite3_bind_int64(st, 8, r->local_steps);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY)
        return SL_EEXIST;
    if (rc != SQLITE_DONE)
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return SL_OK;
}

int sl__sq_create_upload(sl_store *s, const sl_upload_record *r)
{
    return sl__write(s, create_upload_exec, (void *)r, SL__WRITE_TIMEOUT_MS);
}

/*
 * Read a session's row (rowid for blob I/O) on connection @c: SL_OK for a
 * live session, SL_ETIMEDOUT for one whose expiry passed (its row is still
 * there, perhaps only as the tombstone sl_store_expire_uploads() leaves),
 * SL_ENOENT when there is no row.
 */
static int load_any_upload(sl_store *s, sl__conn *c, const char *id, sl_upload_record *r,
                           int64_t *rowid)
{
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "SELECT rowid, device_id, round_id, length, offset, sha256, num_samples, "
                      "expires_at, local_steps FROM uploads WHERE id = ?1",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_int64(st, 7) <= sl__now_ms(s)) {
        rc = SL_ETIMEDOUT;
    } else if (rc == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 5) != 32) {
            sqlite3_reset(st);
            return SL_ECORRUPT;
        }
        memset(r, 0, sizeof *r);
        memcpy(r->id, id, strlen(id));
        *rowid = sqlite3_column_int64(st, 0);
        r->device_id = sqlite3_column_int64(st, 1);
        r->round_id = sqlite3_column_int64(st, 2);
        r->length = (uint64_t)sqlite3_column_int64(st, 3);
        r->offset = (uint64_t)sqlite3_column_int64(st, 4);
        memcpy(r->sha256, sqlite3_column_blob(st, 5), 32);
        r->num_samples = (uint32_t)sqlite3_column_int64(st, 6);
        r->expires_at_ms = sqlite3_column_int64(st, 7);
        r->local_steps = (uint32_t)sqlite3_column_int64(st, 8);
        rc = SL_OK;
    } else if (rc != SL_ETIMEDOUT) {
        rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
    }
    sqlite3_reset(st);
    return rc;
}

/* A live session only: an expired one is SL_ENOENT here (writes on it fail
 * as on an unknown id, so SL_ETIMEDOUT keeps meaning "the write timed out"). */
static int load_upload(sl_store *s, sl__conn *c, const char *id, sl_upload_record *r,
                       int64_t *rowid)
{
    int rc = load_any_upload(s, c, id, r, rowid);
    return rc == SL_ETIMEDOUT ? SL_ENOENT : rc;
}

int sl__sq_get_upload(sl_store *s, const char *id, sl_upload_record *out)
{
    sl__conn *c;
    sl_upload_record r;
    int64_t rowid;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = load_any_upload(s, c, id, &r, &rowid);
    sl__reader_put(s, c);
    if (rc == SL_OK)
        *out = r;
    return rc;
}

typedef struct append_args {
    const char *id;
    uint64_t offset;
    const void *data;
    size_t len;
    uint64_t new_offset;
} append_args;

static int append_exec(sl_store *s, sl__conn *c, void *arg)
{
    append_args *a = arg;
    sl_upload_record r = {0};
    sqlite3_blob *blob;
    sqlite3_stmt *st;
    int64_t rowid = 0;
    int rc = load_upload(s, c, a->id, &r, &rowid);
    if (rc != SL_OK)
        return rc;
    if (a->offset != r.offset)
        return SL_ECONFLICT;
    if (a->len > r.length - r.offset)
        return SL_ETOOBIG;
    if (a->len > 0) {
        rc = sqlite3_blob_open(c->db, "main", "uploads", "data", rowid, 1, &blob);
        if (rc != SQLITE_OK)
            return sl__status_from_sqlite(rc);
        rc = sqlite3_blob_write(blob, a->data, (int)a->len, (int)a->offset);
        sqlite3_blob_close(blob);
        if (rc != SQLITE_OK)
            return sl__status_from_sqlite(rc);
    }
    rc = sl__stmt(c, "UPDATE uploads SET offset = ?2 WHERE rowid = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, rowid);
    sqlite3_bind_int64(st, 2, (int64_t)(r.offset + a->len));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->new_offset = r.offset + a->len;
    return SL_OK;
}

int sl__sq_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data, size_t len,
                         int64_t timeout_ms, uint64_t *new_offset)
{
    append_args a = {id, offset, data, len, 0};
    int rc;
    rc = sl__write(s, append_exec, &a, timeout_ms);
    if (rc == SL_OK)
        *new_offset = a.new_offset;
    return rc;
}

/* Copy the first @r->offset bytes of a session's data. */
static int read_data(sl__conn *c, int64_t rowid, uint64_t len, void **out)
{
    sqlite3_blob *blob;
    void *buf = malloc(len ? (size_t)len : 1);
    int rc;
    if (buf == NULL)
        return SL_ENOMEM;
    rc = sqlite3_blob_open(c->db, "main", "uploads", "data", rowid, 0, &blob);
    if (rc == SQLITE_OK) {
        if (len > 0)
            rc = sqlite3_blob_read(blob, buf, (int)len, 0);
        sqlite3_blob_close(blob);
    }
    if (rc != SQLITE_OK) {
        free(buf);
        return sl__status_from_sqlite(rc);
    }
    *out = buf;
    return SL_OK;
}

int sl__sq_read_upload(sl_store *s, const char *id, void **out, size_t *len)
{
    sl__conn *c;
    sl_upload_record r;
    int64_t rowid;
    void *buf = NULL;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    /* the row and its blob under one read transaction */
    rc = sl__exec(c, "BEGIN");
    if (rc == SL_OK) {
        rc = load_upload(s, c, id, &r, &rowid);
        if (rc == SL_OK)
            rc = read_data(c, rowid, r.offset, &buf);
        sl__exec(c, "COMMIT");
    }
    sl__reader_put(s, c);
    if (rc == SL_OK) {
        *out = buf;
        *len = (size_t)r.offset;
    }
    return rc;
}

typedef struct finish_args {
    const char *id;
    sl_store_receipt receipt;
} finish_args;

static int finish_exec(sl_store *s, sl__conn *c, void *arg)
{
    finish_args *a = arg;
    sl_upload_record r;
    sl_update_put u;
    sqlite3_stmt *st;
    int64_t rowid = 0;
    void *data;
    int rc = load_upload(s, c, a->id, &r, &rowid);
    if (rc != SL_OK)
        return rc;
    if (r.offset != r.length)
        return SL_ESTATE;
    if ((rc = read_data(c, rowid, r.length, &data)) != SL_OK)
        return rc;
    u.round_id = r.round_id;
    u.device_id = r.device_id;
    u.frame = data;
    u.frame_len = (size_t)r.length;
    u.num_samples = r.num_samples;
    u.sha256 = r.sha256;
    u.local_steps = r.local_steps;
    rc = sl__put_update_exec(s, c, &u, &a->receipt);
    free(data);
    if (rc != SL_OK)
        return rc;
    rc = sl__stmt(c, "DELETE FROM uploads WHERE rowid = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, rowid);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out)
{
    finish_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.id = id;
    rc = sl__write(s, finish_exec, &a, timeout_ms);
    if (rc == SL_OK)
        *out = a.receipt;
    return rc;
}

typedef struct delete_args {
    const char *id;
    int found;
} delete_args;

static int delete_exec(sl_store *s, sl__conn *c, void *arg)
{
    delete_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "DELETE FROM uploads WHERE id = ?1", &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->found = sqlite3_changes(c->db) > 0;
    return SL_OK;
}

int sl__sq_delete_upload(sl_store *s, const char *id)
{
    delete_args a = {id, 0};
    int rc;
    rc = sl__write(s, delete_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK && !a.found)
        rc = SL_ENOENT;
    return rc;
}

typedef struct expire_args {
    uint32_t deleted;
} expire_args;

/* Expired sessions give back their bytes at once; the small row that stays
 * lets sl_store_get_upload() say "expired" (SL_ETIMEDOUT) rather than
 * "unknown" for SL_STORE_UPLOAD_TOMBSTONE_MS more. */
static int expire_exec(sl_store *s, sl__conn *c, void *arg)
{
    expire_args *a = arg;
    sqlite3_stmt *st;
    int64_t now = sl__now_ms(s);
    int rc = sl__stmt(c,
                      "UPDATE uploads SET data = zeroblob(0) WHERE expires_at <= ?1 AND "
                      "length(data) > 0",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->deleted = (uint32_t)sqlite3_changes(c->db);
    rc = sl__stmt(c, "DELETE FROM uploads WHERE expires_at <= ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, now - SL_STORE_UPLOAD_TOMBSTONE_MS);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_expire_uploads(sl_store *s, uint32_t *deleted)
{
    expire_args a = {0};
    int rc;
    rc = sl__write(s, expire_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK && deleted != NULL)
        *deleted = a.deleted;
    return rc;
}

int sl__sq_list_steps(sl_store *s, int64_t round_id,
                      int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT device_id, local_steps FROM updates WHERE round_id = ?1 "
                  "ORDER BY device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = fn(ctx, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1));
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

/* The rounds of task ?1 that are over, but the latest ?2 of those, whose updates still hold
 * their bytes (sl_store_retain_updates) */
#define RETIRING_ROUNDS                                                                       \
    "SELECT id FROM rounds WHERE task_id = ?1 AND state >= 3 AND updates_retired = 0 "        \
    "AND round_no < coalesce((SELECT round_no FROM rounds WHERE task_id = ?1 AND state >= 3 " \
    "                         ORDER BY round_no DESC LIMIT 1 OFFSET ?2 - 1), 0)"

typedef struct retain_updates_args {
    int64_t task_id;
    uint32_t keep_rounds;
    uint64_t retired;
} retain_updates_args;

static int retain_updates_exec(sl_store *s, sl__conn *c, void *arg)
{
    static const char *const sql[] = {
        "UPDATE updates SET frame = X'' WHERE length(frame) > 0 AND round_id IN (" RETIRING_ROUNDS
        ")",
        "DELETE FROM round_partials WHERE round_id IN (" RETIRING_ROUNDS ")",
        /* last: it takes the rounds out of the set the two above read */
        "UPDATE rounds SET updates_retired = 1 WHERE id IN (" RETIRING_ROUNDS ")"};
    retain_updates_args *a = arg;
    (void)s;
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        sqlite3_stmt *st;
        int rc = sl__stmt(c, sql[i], &st);
        if (rc != SL_OK)
            return rc;
        sqlite3_bind_int64(st, 1, a->task_id);
        sqlite3_bind_int64(st, 2, a->keep_rounds);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return sl__status_from_sqlite(rc);
        if (i == 0)
            a->retired = (uint64_t)sqlite3_changes(c->db);
    }
    return SL_OK;
}

int sl__sq_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired)
{
    retain_updates_args a = {task_id, keep_rounds, 0};
    int rc = sl__write(s, retain_updates_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK && retired != NULL)
        *retired = a.retired;
    return rc;
}
