/* pg_models.c - model versions on PostgreSQL (models.c's twin). */
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

int sl__pg_put_model_exec(sl__pg *p, PGconn *c, const sl_model_put *m)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, m->task_id);
    sl__pgq_int(&q, m->version);
    sl__pgq_int(&q, m->parent);
    sl__pgq_bytes(&q, m->frame, m->frame_len);
    sl__pgq_bytes(&q, m->sha256, 32);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    sl__pgq_text(&q, m->metrics);
    if (m->opt_state != NULL)
        sl__pgq_bytes(&q, m->opt_state, m->opt_state_len);
    else
        sl__pgq_text(&q, NULL);
    rc = sl__pg_exec(c,
                     "INSERT INTO model_versions (task_id, version, parent, frame, sha256, "
                     "created_at, metrics, opt_state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                     "ON CONFLICT (task_id, version) DO NOTHING",
                     &q, &r);
    if (rc != SL_OK) /* a foreign key: no such task */
        return rc;
    if (sl__pg_changes(r) == 1) {
        PQclear(r);
        return SL_OK;
    }
    PQclear(r);
    /* idempotent: the same version again is fine, another digest is a conflict */
    q.n = 2;
    rc = sl__pg_exec(c, "SELECT sha256 FROM model_versions WHERE task_id = $1 AND version = $2", &q,
                     &r);
    if (rc != SL_OK)
        return rc;
    rc = PQntuples(r) == 1 && PQgetlength(r, 0, 0) == 32 &&
                 memcmp(PQgetvalue(r, 0, 0), m->sha256, 32) == 0
             ? SL_OK
             : SL_ECONFLICT;
    PQclear(r);
    return rc;
}

static int put_model_exec(sl__pg *p, PGconn *c, void *arg)
{
    return sl__pg_put_model_exec(p, c, arg);
}

int sl__pg_put_model(sl_store *s, const sl_model_put *m)
{
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, put_model_exec, (void *)m);
}

typedef struct get_args {
    int64_t task_id, version;
    int info;
    sl_model_record *out;
} get_args;

static int get_exec(sl__pg *p, PGconn *c, void *arg)
{
    get_args *a = arg;
    sl_model_record m = {0};
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task_id);
    if (a->version > 0)
        sl__pgq_int(&q, a->version);
    /* a retired version's frame is empty (retain_exec): its bytes are not found, its
     * record is (models.c's queries) */
    rc = sl__pg_exec(
        c,
        a->info          ? (a->version > 0
                                ? "SELECT version, parent, created_at, octet_length(frame), sha256, metrics "
                                  "FROM model_versions WHERE task_id = $1 AND version = $2"
                                : "SELECT version, parent, created_at, octet_length(frame), sha256, metrics "
                                  "FROM model_versions WHERE task_id = $1 ORDER BY version DESC LIMIT 1")
        : a->version > 0 ? "SELECT version, parent, created_at, frame, sha256, metrics, opt_state "
                           "FROM model_versions WHERE task_id = $1 AND version = $2 "
                           "AND octet_length(frame) > 0"
                         : "SELECT version, parent, created_at, frame, sha256, metrics, opt_state "
                           "FROM model_versions WHERE task_id = $1 AND octet_length(frame) > 0 "
                           "ORDER BY version DESC LIMIT 1",
        &q, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) == 0)
        rc = SL_ENOENT;
    else if (PQgetlength(r, 0, 4) != 32)
        rc = SL_ECORRUPT;
    if (rc == SL_OK) {
        m.task_id = a->task_id;
        m.version = sl__pg_int(r, 0, 0);
        m.parent = sl__pg_int(r, 0, 1);
        m.created_at_ms = sl__pg_int(r, 0, 2);
        memcpy(m.sha256, PQgetvalue(r, 0, 4), 32);
        if (a->info) {
            m.frame_len = (size_t)sl__pg_int(r, 0, 3);
            m.retired = m.frame_len == 0;
        } else {
            rc = sl__pg_dup_bytes(r, 0, 3, &m.frame, &m.frame_len);
        }
        if (rc == SL_OK)
            rc = sl__pg_dup_text(r, 0, 5, &m.metrics);
        if (rc == SL_OK && !a->info)
            rc = sl__pg_dup_bytes(r, 0, 6, &m.opt_state, &m.opt_state_len);
    }
    PQclear(r);
    if (rc != SL_OK) {
        sl_store_model_free(&m);
        return rc;
    }
    *a->out = m;
    return SL_OK;
}

int sl__pg_get_model(sl_store *s, int64_t task_id, int64_t version, int info, sl_model_record *out)
{
    get_args a = {task_id, version, info, out};
    return sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, get_exec, &a);
}

typedef struct metrics_args {
    int64_t task_id, version;
    const char *metrics;
} metrics_args;

static int metrics_exec(sl__pg *p, PGconn *c, void *arg)
{
    metrics_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task_id);
    sl__pgq_int(&q, a->version);
    sl__pgq_text(&q, a->metrics);
    rc = sl__pg_exec(
        c, "UPDATE model_versions SET metrics = $3 WHERE task_id = $1 AND version = $2", &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = sl__pg_changes(r) == 1 ? SL_OK : SL_ENOENT;
    PQclear(r);
    return rc;
}

int sl__pg_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics)
{
    metrics_args a = {task_id, version, metrics};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, metrics_exec, &a);
}

typedef struct retain_args {
    int64_t task_id;
    uint32_t keep_last, keep_every, retired;
} retain_args;

static int retain_exec(sl__pg *p, PGconn *c, void *arg)
{
    retain_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task_id);
    sl__pgq_int(&q, a->keep_last);
    sl__pgq_int(&q, a->keep_every);
    /* one statement: the bytes of everything outside the keep rules go, the records stay
     * (models.c's rules) */
    rc = sl__pg_exec(c,
                     "UPDATE model_versions SET frame = ''::bytea, opt_state = NULL "
                     "WHERE task_id = $1 AND version > 1 AND octet_length(frame) > 0 "
                     "AND version NOT IN (SELECT version FROM model_versions WHERE task_id = $1 "
                     "                    ORDER BY version DESC LIMIT $2) "
                     "AND ($3::bigint = 0 OR version % $3::bigint != 0) "
                     "AND version NOT IN (SELECT base_version FROM rounds WHERE task_id = $1 "
                     "                    AND state < 3)",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    a->retired = (uint32_t)sl__pg_changes(r);
    PQclear(r);
    return SL_OK;
}

int sl__pg_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                         uint32_t *retired)
{
    retain_args a = {task_id, keep_last, keep_every, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, retain_exec, &a);
    if (rc == SL_OK && retired != NULL)
        *retired = a.retired;
    return rc;
}
