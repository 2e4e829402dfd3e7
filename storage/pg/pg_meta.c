/*
 * pg_meta.c - devices, tasks, refusals, federated evaluation, the audit log
 * and the write probe on PostgreSQL (meta.c's twin).
 *
 * The idempotent inserts (a device by its key, a task by its name, a
 * device's evaluation of a round) look the row up first, insert with ON
 * CONFLICT DO NOTHING when it is missing, and look again when another
 * replica inserted it in between (at READ COMMITTED, the server's default for
 * the write transactions, each statement sees the newest commits; at a
 * stricter level the insert fails to serialize and sl__pg_tx() runs it
 * again). Looking first spends no identity value on a repeated call, and no
 * statement raises a unique violation.
 */
#include <math.h>
#include <string.h>

#include "pg_int.h"

static sl__pg *pg_of(sl_store *s)
{
    return (sl__pg *)(void *)s;
}

/* ---- shared steps ----------------------------------------------------------- */

/* One statement in its own write transaction; @changes: the rows it changed. */
typedef struct stmt_args {
    const char *sql;
    sl__pgq q;
    uint64_t changes;
} stmt_args;

static int stmt_exec(sl__pg *p, PGconn *c, void *arg)
{
    stmt_args *a = arg;
    PGresult *r = NULL;
    int rc = sl__pg_exec(c, a->sql, &a->q, &r);
    (void)p;
    if (rc == SL_OK)
        a->changes = sl__pg_changes(r);
    PQclear(r);
    return rc;
}

static int run_stmt(sl_store *s, stmt_args *a)
{
    return sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, stmt_exec, a);
}

/* An UPDATE of one row: @missing when it matched none. */
static int update_one(sl_store *s, stmt_args *a, int missing)
{
    int rc = run_stmt(s, a);
    return rc == SL_OK && a->changes != 1 ? missing : rc;
}

/* The first column of the first row of a query without parameters, in a read transaction. */
typedef struct int_args {
    const char *sql;
    int64_t v;
} int_args;

static int int_exec(sl__pg *p, PGconn *c, void *arg)
{
    int_args *a = arg;
    PGresult *r = NULL;
    int rc = sl__pg_exec(c, a->sql, NULL, &r);
    (void)p;
    if (rc == SL_OK)
        a->v = PQntuples(r) > 0 ? sl__pg_int(r, 0, 0) : 0;
    PQclear(r);
    return rc;
}

static int count_rows(sl_store *s, const char *sql, uint64_t *count)
{
    int_args a = {sql, 0};
    int rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, int_exec, &a);
    if (rc == SL_OK)
        *count = (uint64_t)a.v;
    return rc;
}

/* Run @sql; when it returns a row, its first column into *@id and *@hit = 1. */
static int exec_id(PGconn *c, const char *sql, const sl__pgq *q, int64_t *id, int *hit)
{
    PGresult *r = NULL;
    int rc = sl__pg_exec(c, sql, q, &r);
    if (rc == SL_OK && PQntuples(r) > 0) {
        *id = sl__pg_int(r, 0, 0);
        *hit = 1;
    }
    PQclear(r);
    return rc;
}

/* A step of an idempotent insert: *@hit when it found (or inserted) the row. */
typedef int (*row_step)(PGconn *c, void *arg, int *hit);

static int find_or_insert(PGconn *c, void *arg, row_step find, row_step insert)
{
    int hit = 0;
    int rc = find(c, arg, &hit);
    if (rc == SL_OK && !hit)
        rc = insert(c, arg, &hit);
    if (rc == SL_OK && !hit) /* a concurrent writer committed the row after our look-up */
        rc = find(c, arg, &hit);
    /* the row went away in between (nothing deletes these): run the transaction again */
    return rc == SL_OK && !hit ? SL_EBUSY : rc;
}

/*
 * A list: its query, then one call of the caller's fn per row (pg_int.h). A
 * transaction retried after its rows were handed out (its COMMIT failed) runs
 * nothing: the caller has seen every row it asked for, and must not see them twice.
 */
typedef struct list_args list_args;
struct list_args {
    const char *sql;
    sl__pgq q;
    int (*row)(const list_args *a, const PGresult *r, int i); /* calls the caller's fn */
    union {
        int (*id)(void *ctx, int64_t id);
        int (*refusal)(void *ctx, int64_t task_id, int64_t device_id, const char *reason,
                       int64_t at_ms);
        int (*device)(void *ctx, const sl_device_summary *d);
    } fn;
    void *ctx;
    int done; /* the rows were handed out */
    int stop; /* fn's non-zero answer, returned as it is */
};

static int list_exec(sl__pg *p, PGconn *c, void *arg)
{
    list_args *a = arg;
    PGresult *r = NULL;
    int rc;
    (void)p;
    if (a->done)
        return SL_OK;
    rc = sl__pg_exec(c, a->sql, &a->q, &r);
    if (rc == SL_OK) {
        a->done = 1;
        for (int i = 0; i < PQntuples(r) && a->stop == 0; i++)
            a->stop = a->row(a, r, i);
    }
    PQclear(r);
    return rc;
}

static int run_list(sl_store *s, list_args *a)
{
    int rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, list_exec, a);
    return a->stop != 0 ? a->stop : rc;
}

static int id_row(const list_args *a, const PGresult *r, int i)
{
    return a->fn.id(a->ctx, sl__pg_int(r, i, 0));
}

/* ---- devices ------------------------------------------------------------ */

typedef struct enrol_args {
    const uint8_t *key;
    size_t key_len;
    const char *caps;
    int64_t now;
    int64_t id;
} enrol_args;

static int device_find(PGconn *c, void *arg, int *hit)
{
    enrol_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_bytes(&q, a->key, a->key_len);
    return exec_id(c, "SELECT id FROM devices WHERE public_key = $1", &q, &a->id, hit);
}

static int device_insert(PGconn *c, void *arg, int *hit)
{
    enrol_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_bytes(&q, a->key, a->key_len);
    sl__pgq_int(&q, a->now);
    sl__pgq_text(&q, a->caps);
    return exec_id(c,
                   "INSERT INTO devices (public_key, enrolled_at, last_seen, capabilities) "
                   "VALUES ($1, $2, $2, $3) ON CONFLICT (public_key) DO NOTHING RETURNING id",
                   &q, &a->id, hit);
}

static int enrol_exec(sl__pg *p, PGconn *c, void *arg)
{
    (void)p;
    return find_or_insert(c, arg, device_find, device_insert); /* the same key: the same id */
}

int sl__pg_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                        int64_t *device_id)
{
    enrol_args a = {key, key_len, capabilities, sl__pg_now_ms(pg_of(s)), 0};
    int rc = sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, enrol_exec, &a);
    if (rc == SL_OK)
        *device_id = a.id;
    return rc;
}

int sl__pg_set_device_disabled(sl_store *s, int64_t device_id, int disabled)
{
    stmt_args a = {.sql = "UPDATE devices SET state = $2 WHERE id = $1"};
    sl__pgq_int(&a.q, device_id);
    sl__pgq_text(&a.q, disabled ? "disabled" : "active");
    return update_one(s, &a, SL_ENOENT);
}

typedef struct device_args {
    int64_t id;
    sl_device_record rec;
} device_args;

/* The first row of device_exec's query into @rec; SL_ECORRUPT for an oversized key. */
static int read_device(const PGresult *r, int64_t id, sl_device_record *rec)
{
    size_t n = (size_t)PQgetlength(r, 0, 0);
    if (n > SL_STORE_MAX_KEY)
        return SL_ECORRUPT;
    rec->id = id;
    memcpy(rec->public_key, PQgetvalue(r, 0, 0), n);
    rec->key_len = n;
    rec->enrolled_at_ms = sl__pg_int(r, 0, 1);
    rec->last_seen_ms = sl__pg_int(r, 0, 2);
    sl__pg_copy_text(r, 0, 3, rec->capabilities, sizeof rec->capabilities);
    rec->disabled = strcmp(PQgetvalue(r, 0, 4), "disabled") == 0;
    return SL_OK;
}

static int device_exec(sl__pg *p, PGconn *c, void *arg)
{
    device_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->id);
    rc = sl__pg_exec(c,
                     "SELECT public_key, enrolled_at, last_seen, capabilities, state FROM devices "
                     "WHERE id = $1",
                     &q, &r);
    if (rc == SL_OK)
        rc = PQntuples(r) == 1 ? read_device(r, a->id, &a->rec) : SL_ENOENT;
    PQclear(r);
    return rc;
}

int sl__pg_get_device(sl_store *s, int64_t device_id, sl_device_record *out)
{
    device_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.id = device_id;
    rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, device_exec, &a);
    if (rc == SL_OK)
        *out = a.rec;
    return rc;
}

int sl__pg_touch_device(sl_store *s, int64_t device_id)
{
    stmt_args a = {.sql = "UPDATE devices SET last_seen = $2 WHERE id = $1"};
    sl__pgq_int(&a.q, device_id);
    sl__pgq_int(&a.q, sl__pg_now_ms(pg_of(s)));
    return update_one(s, &a, SL_ENOENT);
}

int sl__pg_count_devices(sl_store *s, uint64_t *count)
{
    return count_rows(s, "SELECT count(*)::bigint FROM devices", count);
}

/* meta.c's query: the page of devices first, then the counts of those devices only. */
static const char list_devices_sql[] =
    "WITH page AS (SELECT id, enrolled_at, last_seen, state FROM devices WHERE id > $3 "
    "              ORDER BY id LIMIT $2 OFFSET $1), "
    "parts AS (SELECT device_id, count(*) AS n, count(*) FILTER (WHERE state = 6) AS rejected, "
    "                 count(*) FILTER (WHERE state = 5) AS late FROM round_participants "
    "          WHERE device_id IN (SELECT id FROM page) GROUP BY device_id), "
    "ups AS (SELECT device_id, count(*) AS n FROM updates "
    "        WHERE device_id IN (SELECT id FROM page) GROUP BY device_id) "
    "SELECT page.id, page.enrolled_at, page.last_seen, page.state, coalesce(parts.n, 0), "
    "       coalesce(ups.n, 0), coalesce(parts.rejected, 0), coalesce(parts.late, 0) "
    "FROM page LEFT JOIN parts ON parts.device_id = page.id "
    "LEFT JOIN ups ON ups.device_id = page.id ORDER BY page.id";

static uint32_t count_column(const PGresult *r, int i, int col)
{
    int64_t v = sl__pg_int(r, i, col);
    return v < 0 ? 0 : v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static int device_row(const list_args *a, const PGresult *r, int i)
{
    sl_device_summary d;
    memset(&d, 0, sizeof d);
    d.id = sl__pg_int(r, i, 0);
    d.enrolled_at_ms = sl__pg_int(r, i, 1);
    d.last_seen_ms = sl__pg_int(r, i, 2);
    sl__pg_copy_text(r, i, 3, d.state, sizeof d.state);
    d.participations = count_column(r, i, 4);
    d.reported = count_column(r, i, 5);
    d.rejected = count_column(r, i, 6);
    d.late = count_column(r, i, 7);
    return a->fn.device(a->ctx, &d);
}

int sl__pg_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                        int (*fn)(void *ctx, const sl_device_summary *d), void *ctx)
{
    list_args a = {.sql = list_devices_sql, .row = device_row, .fn.device = fn, .ctx = ctx};
    sl__pgq_int(&a.q, offset);
    sl__pgq_int(&a.q, limit);
    sl__pgq_int(&a.q, after);
    return run_list(s, &a);
}

int sl__pg_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                          void *ctx)
{
    list_args a = {.sql = "SELECT device_id FROM updates WHERE round_id = $1 ORDER BY device_id",
                   .row = id_row,
                   .fn.id = fn,
                   .ctx = ctx};
    sl__pgq_int(&a.q, round_id);
    return run_list(s, &a);
}

/* ---- tasks --------------------------------------------------------------- */

typedef struct task_args {
    const char *name, *config, *layout, *spec, *contract;
    int64_t now;
    int64_t id;
} task_args;

/* Whether text column @col of the first row holds @t (NULL: SQL NULL). */
static int same_text(const PGresult *r, int col, const char *t)
{
    if (sl__pg_isnull(r, 0, col))
        return t == NULL;
    return t != NULL && strcmp(PQgetvalue(r, 0, col), t) == 0;
}

/* An existing task of that name: SL_OK when it is the same task, SL_ECONFLICT when not. */
static int task_find(PGconn *c, void *arg, int *hit)
{
    task_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_text(&q, a->name);
    rc = sl__pg_exec(c,
                     "SELECT id, config, layout, model_spec, data_contract FROM tasks "
                     "WHERE name = $1",
                     &q, &r);
    if (rc == SL_OK && PQntuples(r) == 1) {
        *hit = 1;
        a->id = sl__pg_int(r, 0, 0);
        if (!same_text(r, 1, a->config) || !same_text(r, 2, a->layout) ||
            !same_text(r, 3, a->spec) || !same_text(r, 4, a->contract))
            rc = SL_ECONFLICT;
    }
    PQclear(r);
    return rc;
}

static int task_insert(PGconn *c, void *arg, int *hit)
{
    task_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_text(&q, a->name);
    sl__pgq_text(&q, a->config);
    sl__pgq_text(&q, a->layout);
    sl__pgq_int(&q, a->now);
    sl__pgq_text(&q, a->spec);
    sl__pgq_text(&q, a->contract);
    return exec_id(c,
                   "INSERT INTO tasks (name, config, layout, created_at, model_spec, "
                   "data_contract) VALUES ($1, $2, $3, $4, $5, $6) "
                   "ON CONFLICT (name) DO NOTHING RETURNING id",
                   &q, &a->id, hit);
}

static int task_exec(sl__pg *p, PGconn *c, void *arg)
{
    (void)p;
    return find_or_insert(c, arg, task_find, task_insert);
}

int sl__pg_create_task_docs(sl_store *s, const char *name, const char *config_json,
                            const char *layout_text, const char *model_spec,
                            const char *data_contract, int64_t *task_id)
{
    task_args a = {
        name, config_json, layout_text, model_spec, data_contract, sl__pg_now_ms(pg_of(s)), 0};
    int rc = sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, task_exec, &a);
    if (rc == SL_OK)
        *task_id = a.id;
    return rc;
}

typedef struct get_task_args {
    int64_t id;
    sl_task_record t;
} get_task_args;

static int task_texts(const PGresult *r, sl_task_record *t)
{
    int rc = sl__pg_dup_text(r, 0, 0, &t->name);
    if (rc == SL_OK)
        rc = sl__pg_dup_text(r, 0, 1, &t->config_json);
    if (rc == SL_OK)
        rc = sl__pg_dup_text(r, 0, 2, &t->layout_text);
    if (rc == SL_OK)
        rc = sl__pg_dup_text(r, 0, 4, &t->model_spec);
    if (rc == SL_OK)
        rc = sl__pg_dup_text(r, 0, 5, &t->data_contract);
    return rc;
}

static int get_task_exec(sl__pg *p, PGconn *c, void *arg)
{
    get_task_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl_store_task_free(&a->t); /* a retried transaction starts again */
    sl__pgq_int(&q, a->id);
    rc = sl__pg_exec(c,
                     "SELECT name, config, layout, created_at, model_spec, data_contract FROM "
                     "tasks WHERE id = $1",
                     &q, &r);
    if (rc == SL_OK && PQntuples(r) != 1)
        rc = SL_ENOENT;
    if (rc == SL_OK) {
        a->t.id = a->id;
        a->t.created_at_ms = sl__pg_int(r, 0, 3);
        rc = task_texts(r, &a->t);
    }
    PQclear(r);
    return rc;
}

int sl__pg_get_task(sl_store *s, int64_t task_id, sl_task_record *out)
{
    get_task_args a;
    int rc;
    memset(&a, 0, sizeof a);
    a.id = task_id;
    rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, get_task_exec, &a);
    if (rc != SL_OK) {
        sl_store_task_free(&a.t);
        return rc;
    }
    *out = a.t;
    return SL_OK;
}

int sl__pg_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx)
{
    list_args a = {
        .sql = "SELECT id FROM tasks ORDER BY id", .row = id_row, .fn.id = fn, .ctx = ctx};
    return run_list(s, &a);
}

/* ---- refusals ------------------------------------------------------------ */

int sl__pg_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason)
{
    stmt_args a = {.sql = "DELETE FROM device_refusals WHERE task_id = $1 AND device_id = $2"};
    sl__pgq_int(&a.q, task_id);
    sl__pgq_int(&a.q, device_id);
    if (reason[0] != '\0') { /* an empty reason clears it */
        a.sql = "INSERT INTO device_refusals (task_id, device_id, reason, at) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (task_id, device_id) DO UPDATE SET "
                "reason = excluded.reason, at = excluded.at";
        sl__pgq_text(&a.q, reason);
        sl__pgq_int(&a.q, sl__pg_now_ms(pg_of(s)));
    }
    return run_stmt(s, &a);
}

static int refusal_row(const list_args *a, const PGresult *r, int i)
{
    return a->fn.refusal(a->ctx, sl__pg_int(r, i, 0), sl__pg_int(r, i, 1), PQgetvalue(r, i, 2),
                         sl__pg_int(r, i, 3));
}

int sl__pg_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                         int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                   const char *reason, int64_t at_ms),
                         void *ctx)
{
    list_args a = {.sql = "SELECT task_id, device_id, reason, at FROM device_refusals "
                          "WHERE ($1::bigint = 0 OR task_id = $1) "
                          "AND ($2::bigint = 0 OR device_id = $2) ORDER BY task_id, device_id",
                   .row = refusal_row,
                   .fn.refusal = fn,
                   .ctx = ctx};
    sl__pgq_int(&a.q, task_id);
    sl__pgq_int(&a.q, device_id);
    return run_list(s, &a);
}

/* ---- federated evaluation ------------------------------------------------------------ */

typedef struct eval_args {
    int64_t round, device, now;
    const sl_store_eval *ev;
} eval_args;

/* Whether float8 column @col of the first row holds @v exactly (NaN: SQL NULL). */
static int same_metric(const PGresult *r, int col, double v)
{
    if (sl__pg_isnull(r, 0, col))
        return isnan(v);
    return !isnan(v) && sl__pg_double(r, 0, col) == v;
}

/* The device's report of the round: SL_OK when it is the same report, SL_ECONFLICT when not. */
static int eval_find(PGconn *c, void *arg, int *hit)
{
    eval_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, a->round);
    sl__pgq_int(&q, a->device);
    rc = sl__pg_exec(c,
                     "SELECT samples, loss, accuracy, mae, rmse FROM round_evals "
                     "WHERE round_id = $1 AND device_id = $2",
                     &q, &r);
    if (rc == SL_OK && PQntuples(r) == 1) {
        *hit = 1;
        if (sl__pg_int(r, 0, 0) != (int64_t)a->ev->samples ||
            sl__pg_double(r, 0, 1) != a->ev->loss || !same_metric(r, 2, a->ev->accuracy) ||
            !same_metric(r, 3, a->ev->mae) || !same_metric(r, 4, a->ev->rmse))
            rc = SL_ECONFLICT;
    }
    PQclear(r);
    return rc;
}

static int eval_insert(PGconn *c, void *arg, int *hit)
{
    eval_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, a->round);
    sl__pgq_int(&q, a->device);
    sl__pgq_int(&q, a->ev->samples);
    sl__pgq_double(&q, a->ev->loss);
    sl__pgq_double(&q, a->ev->accuracy); /* NaN: NULL */
    sl__pgq_double(&q, a->ev->mae);
    sl__pgq_double(&q, a->ev->rmse);
    sl__pgq_int(&q, a->now);
    rc = sl__pg_exec(c,
                     "INSERT INTO round_evals (round_id, device_id, samples, loss, accuracy, mae, "
                     "rmse, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                     "ON CONFLICT (round_id, device_id) DO NOTHING",
                     &q, &r);
    if (rc == SL_OK) /* a foreign key fails as SL_ENOENT: no such round or device */
        *hit = sl__pg_changes(r) == 1;
    PQclear(r);
    return rc;
}

static int eval_exec(sl__pg *p, PGconn *c, void *arg)
{
    (void)p;
    return find_or_insert(c, arg, eval_find, eval_insert);
}

int sl__pg_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev)
{
    eval_args a = {round_id, device_id, sl__pg_now_ms(pg_of(s)), ev};
    return sl__pg_tx(pg_of(s), 0, SL__PG_TIMEOUT_MS, eval_exec, &a);
}

/*
 * meta.c's aggregate, each metric weighted by the samples of the reports that
 * have it. The same numbers as SQLite's: its total() adds doubles one by one
 * in the primary key's order (device_id within the round), and so does sum()
 * of float8 with ORDER BY device_id; NULLIF stands for SQLite's NULL on a
 * division by zero (PostgreSQL would raise an error).
 */
static const char round_eval_sql[] =
    "SELECT count(*)::bigint, coalesce(sum(samples::float8 ORDER BY device_id), 0), "
    "sum(loss * samples ORDER BY device_id) / "
    "  NULLIF(coalesce(sum(samples::float8 ORDER BY device_id), 0), 0), "
    "sum(accuracy * samples ORDER BY device_id) / NULLIF(coalesce(sum((CASE WHEN accuracy IS "
    "  NULL THEN 0 ELSE samples END)::float8 ORDER BY device_id), 0), 0), "
    "sum(mae * samples ORDER BY device_id) / NULLIF(coalesce(sum((CASE WHEN mae IS NULL THEN 0 "
    "  ELSE samples END)::float8 ORDER BY device_id), 0), 0), "
    "sum(rmse * rmse * samples ORDER BY device_id) / NULLIF(coalesce(sum((CASE WHEN rmse IS "
    "  NULL THEN 0 ELSE samples END)::float8 ORDER BY device_id), 0), 0), "
    "count(accuracy)::bigint, count(mae)::bigint, count(rmse)::bigint "
    "FROM round_evals WHERE round_id = $1";

static int eval_sum(PGconn *c, int64_t round_id, sl_store_eval_sum *out)
{
    sl_store_eval_sum sum = {0, 0, NAN, NAN, NAN, NAN};
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, round_id);
    rc = sl__pg_exec(c, round_eval_sql, &q, &r);
    if (rc == SL_OK && PQntuples(r) == 1 && sl__pg_int(r, 0, 0) > 0) {
        sum.devices = (uint32_t)sl__pg_int(r, 0, 0);
        sum.samples = (uint64_t)sl__pg_double(r, 0, 1);
        sum.loss = sl__pg_double(r, 0, 2);
        if (sl__pg_int(r, 0, 6) > 0)
            sum.accuracy = sl__pg_double(r, 0, 3);
        if (sl__pg_int(r, 0, 7) > 0)
            sum.mae = sl__pg_double(r, 0, 4);
        if (sl__pg_int(r, 0, 8) > 0)
            sum.rmse = sqrt(sl__pg_double(r, 0, 5));
    }
    PQclear(r);
    if (rc == SL_OK)
        *out = sum;
    return rc;
}

typedef struct eval_read_args {
    int64_t task;  /* last_eval: the task; round_eval: unused */
    int64_t round; /* the round (last_eval: found, 0 when none) */
    sl_store_eval_sum sum;
} eval_read_args;

static int round_eval_exec(sl__pg *p, PGconn *c, void *arg)
{
    eval_read_args *a = arg;
    (void)p;
    return eval_sum(c, a->round, &a->sum);
}

int sl__pg_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out)
{
    eval_read_args a = {0, round_id, {0, 0, NAN, NAN, NAN, NAN}};
    int rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, round_eval_exec, &a);
    if (rc == SL_OK)
        *out = a.sum;
    return rc;
}

/* The newest round with evaluations and their aggregate, in one snapshot. */
static int last_eval_exec(sl__pg *p, PGconn *c, void *arg)
{
    eval_read_args *a = arg;
    sl_store_eval_sum none = {0, 0, NAN, NAN, NAN, NAN};
    sl__pgq q = {0};
    int found = 0;
    int rc;
    (void)p;
    a->round = 0;
    sl__pgq_int(&q, a->task);
    rc = exec_id(c,
                 "SELECT coalesce(max(e.round_id), 0) FROM round_evals e JOIN rounds r ON "
                 "r.id = e.round_id WHERE r.task_id = $1",
                 &q, &a->round, &found);
    if (rc != SL_OK || a->round == 0) {
        a->sum = none;
        return rc;
    }
    return eval_sum(c, a->round, &a->sum);
}

int sl__pg_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out)
{
    eval_read_args a = {task_id, 0, {0, 0, NAN, NAN, NAN, NAN}};
    int rc = sl__pg_tx(pg_of(s), 1, SL__PG_TIMEOUT_MS, last_eval_exec, &a);
    if (rc == SL_OK) {
        *round_id = a.round;
        *out = a.sum;
    }
    return rc;
}

/* ---- audit --------------------------------------------------------------- */

int sl__pg_audit(sl_store *s, const char *actor, const char *action, const char *detail)
{
    stmt_args a = {.sql = "INSERT INTO audit (at, actor, action, detail) VALUES ($1, $2, $3, $4)"};
    sl__pgq_int(&a.q, sl__pg_now_ms(pg_of(s)));
    sl__pgq_text(&a.q, actor);
    sl__pgq_text(&a.q, action);
    sl__pgq_text(&a.q, detail);
    return run_stmt(s, &a);
}

int sl__pg_count_audit(sl_store *s, uint64_t *count)
{
    return count_rows(s, "SELECT count(*)::bigint FROM audit", count);
}

/* ---- readiness ---------------------------------------------------------- */

/*
 * A write that reaches the disk. Taking a transaction id (txid_current())
 * would not do: PostgreSQL commits a transaction that wrote no WAL record
 * asynchronously (xact.c, RecordTransactionCommit), so its COMMIT returns
 * before any flush. Rewriting schema_version's one row as it is writes a new
 * row version to the WAL, which COMMIT flushes (synchronous_commit on); the
 * value stays, so migrations and readers see nothing change.
 */
int sl__pg_probe_write(sl_store *s)
{
    stmt_args a = {.sql = "UPDATE schema_version SET version = version"};
    return update_one(s, &a, SL_ECORRUPT); /* schema_version holds one row */
}
