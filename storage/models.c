/* models.c - model versions (frames, digests, metrics, optimiser state) and retention. */
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int sl__put_model_exec(sl_store *s, sl__conn *c, const sl_model_put *m)
{
    sqlite3_stmt *st;
    int rc =
        sl__stmt(c, "SELECT sha256 FROM model_versions WHERE task_id = ?1 AND version = ?2", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, m->task_id);
    sqlite3_bind_int64(st, 2, m->version);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) { /* idempotent: the same version again is fine */
        int same = sqlite3_column_bytes(st, 0) == 32 &&
                   memcmp(sqlite3_column_blob(st, 0), m->sha256, 32) == 0;
        sqlite3_reset(st);
        return same ? SL_OK : SL_ECONFLICT;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c,
                  "INSERT INTO model_versions (task_id, version, parent, frame, sha256, "
                  "created_at, metrics, opt_state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, m->task_id);
    sqlite3_bind_int64(st, 2, m->version);
    sqlite3_bind_int64(st, 3, m->parent);
    sqlite3_bind_blob64(st, 4, m->frame, m->frame_len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, m->sha256, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, sl__now_ms(s));
    if (m->metrics != NULL)
        sqlite3_bind_text(st, 7, m->metrics, -1, SQLITE_STATIC);
    if (m->opt_state != NULL)
        sqlite3_bind_blob64(st, 8, m->opt_state, m->opt_state_len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT /* no such task */
                                                : sl__status_from_sqlite(rc);
    return SL_OK;
}

static int put_model_exec(sl_store *s, sl__conn *c, void *arg)
{
    return sl__put_model_exec(s, c, arg);
}

int sl__sq_put_model(sl_store *s, const sl_model_put *m)
{
    return sl__write(s, put_model_exec, (void *)m, SL__WRITE_TIMEOUT_MS);
}

static int dup_blob(sqlite3_stmt *st, int col, void **out, size_t *len)
{
    const void *p = sqlite3_column_blob(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    void *copy;
    if (p == NULL) {
        *out = NULL;
        *len = 0;
        return SL_OK;
    }
    copy = malloc(n ? n : 1);
    if (copy == NULL)
        return SL_ENOMEM;
    memcpy(copy, p, n);
    *out = copy;
    *len = n;
    return SL_OK;
}

int sl__sq_get_model(sl_store *s, int64_t task_id, int64_t version, int info, sl_model_record *out)
{
    /* a retired version's frame is empty (retain_exec): its bytes are not found, its
     * record is */
    static const char by_version[] =
        "SELECT version, parent, created_at, frame, sha256, metrics, opt_state "
        "FROM model_versions WHERE task_id = ?1 AND version = ?2 AND length(frame) > 0";
    static const char latest[] =
        "SELECT version, parent, created_at, frame, sha256, metrics, opt_state "
        "FROM model_versions WHERE task_id = ?1 AND length(frame) > 0 "
        "ORDER BY version DESC LIMIT 1";
    static const char info_by_version[] =
        "SELECT version, parent, created_at, length(frame), sha256, metrics "
        "FROM model_versions WHERE task_id = ?1 AND version = ?2";
    static const char info_latest[] =
        "SELECT version, parent, created_at, length(frame), sha256, metrics "
        "FROM model_versions WHERE task_id = ?1 ORDER BY version DESC LIMIT 1";
    sl_model_record m = {0};
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;

    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  info ? (version > 0 ? info_by_version : info_latest)
                       : (version > 0 ? by_version : latest),
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, task_id);
        if (version > 0)
            sqlite3_bind_int64(st, 2, version);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            m.task_id = task_id;
            m.version = sqlite3_column_int64(st, 0);
            m.parent = sqlite3_column_int64(st, 1);
            m.created_at_ms = sqlite3_column_int64(st, 2);
            if (info) {
                m.frame_len = (size_t)sqlite3_column_int64(st, 3);
                m.retired = m.frame_len == 0;
                rc = SL_OK;
            } else {
                rc = dup_blob(st, 3, &m.frame, &m.frame_len);
            }
            if (rc == SL_OK && sqlite3_column_bytes(st, 4) != 32)
                rc = SL_ECORRUPT;
            if (rc == SL_OK) {
                memcpy(m.sha256, sqlite3_column_blob(st, 4), 32);
                rc = sl__dup_text(st, 5, &m.metrics);
            }
            if (rc == SL_OK && !info)
                rc = dup_blob(st, 6, &m.opt_state, &m.opt_state_len);
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    if (rc != SL_OK) {
        sl_store_model_free(&m);
        return rc;
    }
    *out = m;
    return SL_OK;
}

typedef struct metrics_args {
    int64_t task_id, version;
    const char *metrics;
} metrics_args;

static int metrics_exec(sl_store *s, sl__conn *c, void *arg)
{
    metrics_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(
        c, "UPDATE model_versions SET metrics = ?3 WHERE task_id = ?1 AND version = ?2", &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->task_id);
    sqlite3_bind_int64(st, 2, a->version);
    sqlite3_bind_text(st, 3, a->metrics, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    return sqlite3_changes(c->db) == 1 ? SL_OK : SL_ENOENT;
}

int sl__sq_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics)
{
    metrics_args a = {task_id, version, metrics};
    return sl__write(s, metrics_exec, &a, SL__WRITE_TIMEOUT_MS);
}

typedef struct retain_args {
    int64_t task_id;
    uint32_t keep_last, keep_every, retired;
} retain_args;

static int retain_exec(sl_store *s, sl__conn *c, void *arg)
{
    retain_args *a = arg;
    sqlite3_stmt *st;
    int rc;
    (void)s;
    /* one statement: the bytes of everything outside the keep rules go; the records stay */
    rc = sl__stmt(c,
                  "UPDATE model_versions SET frame = X'', opt_state = NULL "
                  "WHERE task_id = ?1 AND version > 1 AND length(frame) > 0 "
                  "AND version NOT IN (SELECT version FROM model_versions WHERE task_id = ?1 "
                  "                    ORDER BY version DESC LIMIT ?2) "
                  "AND (?3 = 0 OR version % ?3 != 0) "
                  "AND version NOT IN (SELECT base_version FROM rounds WHERE task_id = ?1 "
                  "                    AND state < 3)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->task_id);
    sqlite3_bind_int64(st, 2, a->keep_last);
    sqlite3_bind_int64(st, 3, a->keep_every);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->retired = (uint32_t)sqlite3_changes(c->db);
    return SL_OK;
}

int sl__sq_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                         uint32_t *retired)
{
    retain_args a = {task_id, keep_last, keep_every, 0};
    int rc;
    rc = sl__write(s, retain_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK && retired != NULL)
        *retired = a.retired;
    return rc;
}
