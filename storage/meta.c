/* meta.c - devices, tasks and the audit log. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ---- devices ------------------------------------------------------------ */

typedef struct enrol_args {
    const uint8_t *key;
    size_t key_len;
    const char *caps;
    int64_t id;
} enrol_args;

static int enrol_exec(sl_store *s, sl__conn *c, void *arg)
{
    enrol_args *a = arg;
    sqlite3_stmt *st;
    int64_t now = sl__now_ms(s);
    int rc = sl__stmt(c, "SELECT id FROM devices WHERE public_key = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_blob(st, 1, a->key, (int)a->key_len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) { /* the same key again: the same device */
        a->id = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return SL_OK;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c,
                  "INSERT INTO devices (public_key, enrolled_at, last_seen, capabilities) "
                  "VALUES (?1, ?2, ?2, ?3)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_blob(st, 1, a->key, (int)a->key_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_text(st, 3, a->caps, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->id = sqlite3_last_insert_rowid(c->db);
    return SL_OK;
}

int sl__sq_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                        int64_t *device_id)
{
    enrol_args a = {key, key_len, capabilities ? capabilities : "{}", 0};
    int rc;
    rc = sl__write(s, enrol_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK)
        *device_id = a.id;
    return rc;
}

typedef struct disable_args {
    int64_t id;
    int disabled;
} disable_args;

static int disable_exec(sl_store *s, sl__conn *c, void *arg)
{
    disable_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "UPDATE devices SET state = ?2 WHERE id = ?1", &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->id);
    sqlite3_bind_text(st, 2, a->disabled ? "disabled" : "active", -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    return sqlite3_changes(c->db) == 1 ? SL_OK : SL_ENOENT;
}

int sl__sq_set_device_disabled(sl_store *s, int64_t device_id, int disabled)
{
    disable_args a = {device_id, disabled != 0};
    return sl__write(s, disable_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_get_device(sl_store *s, int64_t device_id, sl_device_record *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT public_key, enrolled_at, last_seen, capabilities, state FROM devices "
                  "WHERE id = ?1",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, device_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            size_t n = (size_t)sqlite3_column_bytes(st, 0);
            if (n > SL_STORE_MAX_KEY) {
                rc = SL_ECORRUPT;
            } else {
                out->id = device_id;
                memcpy(out->public_key, sqlite3_column_blob(st, 0), n);
                out->key_len = n;
                out->enrolled_at_ms = sqlite3_column_int64(st, 1);
                out->last_seen_ms = sqlite3_column_int64(st, 2);
                sl__copy_text(st, 3, out->capabilities, sizeof out->capabilities);
                {
                    const char *state = (const char *)sqlite3_column_text(st, 4);
                    out->disabled = state != NULL && strcmp(state, "disabled") == 0;
                }
                rc = SL_OK;
            }
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

typedef struct touch_args {
    int64_t id;
} touch_args;

static int touch_exec(sl_store *s, sl__conn *c, void *arg)
{
    touch_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "UPDATE devices SET last_seen = ?2 WHERE id = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->id);
    sqlite3_bind_int64(st, 2, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    return sqlite3_changes(c->db) == 1 ? SL_OK : SL_ENOENT;
}

int sl__sq_touch_device(sl_store *s, int64_t device_id)
{
    touch_args a = {device_id};
    return sl__write(s, touch_exec, &a, SL__WRITE_TIMEOUT_MS);
}

/* ---- tasks --------------------------------------------------------------- */

typedef struct task_args {
    const char *name, *config, *layout, *spec, *contract;
    int64_t id;
} task_args;

static int same_text(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int task_exec(sl_store *s, sl__conn *c, void *arg)
{
    task_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "SELECT id, config, layout, model_spec, data_contract FROM tasks "
                      "WHERE name = ?1",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *cfg = (const char *)sqlite3_column_text(st, 1);
        const char *lay = (const char *)sqlite3_column_text(st, 2);
        const char *spec = (const char *)sqlite3_column_text(st, 3);
        const char *contract = (const char *)sqlite3_column_text(st, 4);
        int same = cfg && lay && strcmp(cfg, a->config) == 0 && strcmp(lay, a->layout) == 0 &&
                   same_text(spec, a->spec) && same_text(contract, a->contract);
        a->id = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return same ? SL_OK : SL_ECONFLICT;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c,
                  "INSERT INTO tasks (name, config, layout, created_at, model_spec, "
                  "data_contract) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->config, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->layout, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, sl__now_ms(s));
    if (a->spec != NULL)
        sqlite3_bind_text(st, 5, a->spec, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 5);
    if (a->contract != NULL)
        sqlite3_bind_text(st, 6, a->contract, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 6);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->id = sqlite3_last_insert_rowid(c->db);
    return SL_OK;
}

int sl__sq_create_task_docs(sl_store *s, const char *name, const char *config_json,
                            const char *layout_text, const char *model_spec,
                            const char *data_contract, int64_t *task_id)
{
    task_args a = {name, config_json, layout_text, model_spec, data_contract, 0};
    int rc;
    rc = sl__write(s, task_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK)
        *task_id = a.id;
    return rc;
}

int sl__sq_get_task(sl_store *s, int64_t task_id, sl_task_record *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    sl_task_record t = {0};
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT name, config, layout, created_at, model_spec, data_contract FROM tasks "
                  "WHERE id = ?1",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, task_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            t.id = task_id;
            t.created_at_ms = sqlite3_column_int64(st, 3);
            rc = sl__dup_text(st, 0, &t.name);
            if (rc == SL_OK)
                rc = sl__dup_text(st, 1, &t.config_json);
            if (rc == SL_OK)
                rc = sl__dup_text(st, 2, &t.layout_text);
            if (rc == SL_OK && sqlite3_column_type(st, 4) != SQLITE_NULL)
                rc = sl__dup_text(st, 4, &t.model_spec);
            if (rc == SL_OK && sqlite3_column_type(st, 5) != SQLITE_NULL)
                rc = sl__dup_text(st, 5, &t.data_contract);
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    if (rc != SL_OK) {
        sl_store_task_free(&t);
        return rc;
    }
    *out = t;
    return SL_OK;
}

int sl__sq_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT id FROM tasks ORDER BY id", &st);
    if (rc == SL_OK) {
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = fn(ctx, sqlite3_column_int64(st, 0));
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

/* ---- refusals ------------------------------------------------------------ */

typedef struct refusal_args {
    int64_t task, device;
    const char *reason;
} refusal_args;

static int refusal_exec(sl_store *s, sl__conn *c, void *arg)
{
    refusal_args *a = arg;
    sqlite3_stmt *st;
    int rc;
    if (a->reason[0] == '\0')
        rc = sl__stmt(c, "DELETE FROM device_refusals WHERE task_id = ?1 AND device_id = ?2", &st);
    else
        rc = sl__stmt(c,
                      "INSERT INTO device_refusals (task_id, device_id, reason, at) "
                      "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (task_id, device_id) DO UPDATE SET "
                      "reason = excluded.reason, at = excluded.at",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->task);
    sqlite3_bind_int64(st, 2, a->device);
    if (a->reason[0] != '\0') {
        sqlite3_bind_text(st, 3, a->reason, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, sl__now_ms(s));
    }
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE                    ? SL_OK
           : rc == SQLITE_CONSTRAINT_FOREIGNKEY ? SL_ENOENT /* no such task, round or device */
                                                : sl__status_from_sqlite(rc);
}

int sl__sq_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason)
{
    refusal_args a = {task_id, device_id, reason};
    return sl__write(s, refusal_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                         int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                   const char *reason, int64_t at_ms),
                         void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT task_id, device_id, reason, at FROM device_refusals "
                  "WHERE (?1 = 0 OR task_id = ?1) AND (?2 = 0 OR device_id = ?2) "
                  "ORDER BY task_id, device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, device_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            const char *reason = (const char *)sqlite3_column_text(st, 2);
            rc = fn(ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                    reason ? reason : "", sqlite3_column_int64(st, 3));
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

/* ---- federated evaluation ------------------------------------------------------------ */

typedef struct eval_args {
    int64_t round, device;
    const sl_store_eval *ev;
} eval_args;

static void bind_metric(sqlite3_stmt *st, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

static int same_metric(sqlite3_stmt *st, int i, double v)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return isnan(v);
    return !isnan(v) && sqlite3_column_double(st, i) == v;
}

static int eval_exec(sl_store *s, sl__conn *c, void *arg)
{
    eval_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "SELECT samples, loss, accuracy, mae, rmse FROM round_evals "
                      "WHERE round_id = ?1 AND device_id = ?2",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->round);
    sqlite3_bind_int64(st, 2, a->device);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int same = sqlite3_column_int64(st, 0) == (int64_t)a->ev->samples &&
                   sqlite3_column_double(st, 1) == a->ev->loss &&
                   same_metric(st, 2, a->ev->accuracy) && same_metric(st, 3, a->ev->mae) &&
                   same_metric(st, 4, a->ev->rmse);
        sqlite3_reset(st);
        return same ? SL_OK : SL_ECONFLICT;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c,
                  "INSERT INTO round_evals (round_id, device_id, samples, loss, accuracy, mae, "
                  "rmse, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->round);
    sqlite3_bind_int64(st, 2, a->device);
    sqlite3_bind_int64(st, 3, a->ev->samples);
    sqlite3_bind_double(st, 4, a->ev->loss);
    bind_metric(st, 5, a->ev->accuracy);
    bind_metric(st, 6, a->ev->mae);
    bind_metric(st, 7, a->ev->rmse);
    sqlite3_bind_int64(st, 8, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE                    ? SL_OK
           : rc == SQLITE_CONSTRAINT_FOREIGNKEY ? SL_ENOENT /* no such round or device */
                                                : sl__status_from_sqlite(rc);
}

int sl__sq_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev)
{
    eval_args a = {round_id, device_id, ev};
    return sl__write(s, eval_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    sl_store_eval_sum sum = {0, 0, NAN, NAN, NAN, NAN};
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    /* each metric weighted by the samples of the reports that have it */
    rc = sl__stmt(c,
                  "SELECT count(*), total(samples), total(loss * samples) / total(samples), "
                  "total(accuracy * samples) / total(CASE WHEN accuracy IS NULL THEN 0 ELSE "
                  "samples END), "
                  "total(mae * samples) / total(CASE WHEN mae IS NULL THEN 0 ELSE samples END), "
                  "total(rmse * rmse * samples) / total(CASE WHEN rmse IS NULL THEN 0 ELSE "
                  "samples END), count(accuracy), count(mae), count(rmse) "
                  "FROM round_evals WHERE round_id = ?1",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, round_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0) {
            sum.devices = (uint32_t)sqlite3_column_int64(st, 0);
            sum.samples = (uint64_t)sqlite3_column_double(st, 1);
            sum.loss = sqlite3_column_double(st, 2);
            if (sqlite3_column_int64(st, 6) > 0)
                sum.accuracy = sqlite3_column_double(st, 3);
            if (sqlite3_column_int64(st, 7) > 0)
                sum.mae = sqlite3_column_double(st, 4);
            if (sqlite3_column_int64(st, 8) > 0)
                sum.rmse = sqrt(sqlite3_column_double(st, 5));
        }
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    if (rc == SL_OK)
        *out = sum;
    return rc;
}

int sl__sq_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out)
{
    sl_store_eval_sum none = {0, 0, NAN, NAN, NAN, NAN};
    int64_t id = 0;
    int rc;
    rc = sl__query_int64(s,
                         "SELECT coalesce(max(e.round_id), 0) FROM round_evals e JOIN rounds r ON "
                         "r.id = e.round_id WHERE r.task_id = ?1",
                         1, task_id, &id);
    if (rc != SL_OK)
        return rc;
    *round_id = id;
    if (id == 0) {
        *out = none;
        return SL_OK;
    }
    return sl__sq_round_eval(s, id, out);
}

/* ---- audit --------------------------------------------------------------- */

typedef struct audit_args {
    const char *actor, *action, *detail;
} audit_args;

static int audit_exec(sl_store *s, sl__conn *c, void *arg)
{
    audit_args *a = arg;
    sqlite3_stmt *st;
    int rc =
        sl__stmt(c, "INSERT INTO audit (at, actor, action, detail) VALUES (?1, ?2, ?3, ?4)", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, sl__now_ms(s));
    sqlite3_bind_text(st, 2, a->actor, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->action, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, a->detail, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl__sq_audit(sl_store *s, const char *actor, const char *action, const char *detail)
{
    audit_args a = {actor, action, detail ? detail : ""};
    return sl__write(s, audit_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_count_audit(sl_store *s, uint64_t *count)
{
    int64_t n = 0;
    int rc;
    rc = sl__query_int64(s, "SELECT count(*) FROM audit", 0, 0, &n);
    if (rc == SL_OK)
        *count = (uint64_t)n;
    return rc;
}

/* ---- readiness ---------------------------------------------------------- */

static int probe_exec(sl_store *s, sl__conn *c, void *arg)
{
    sqlite3_stmt *st;
    char sql[64];
    int64_t n;
    int rc;
    (void)s;
    (void)arg;
    /* The header's user_version counts probes (the schema version has its own table). A
     * row rewritten as it is would not do: SQLite writes nothing for it. */
    rc = sl__stmt(c, "PRAGMA user_version", &st);
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    n = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (rc != SQLITE_ROW)
        return sl__status_from_sqlite(rc);
    snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)((n + 1) & 0x7fffffff));
    return sl__exec(c, sql);
}

int sl__sq_probe_write(sl_store *s)
{
    return sl__write(s, probe_exec, NULL, SL__WRITE_TIMEOUT_MS);
}

/* ---- listing devices ---------------------------------------------------- */

int sl__sq_count_devices(sl_store *s, uint64_t *count)
{
    int64_t n = 0;
    int rc;
    rc = sl__query_int64(s, "SELECT count(*) FROM devices", 0, 0, &n);
    if (rc == SL_OK)
        *count = (uint64_t)n;
    return rc;
}

/* The page of devices first, then the counts of those devices only: one pass over
 * round_participants and one over the (round_id, device_id) index of updates per
 * page, whatever the fleet's size. */
const char sl__list_devices_sql[] =
    "WITH page AS (SELECT id, enrolled_at, last_seen, state FROM devices WHERE id > ?3 "
    "              ORDER BY id LIMIT ?2 OFFSET ?1), "
    "parts AS (SELECT device_id, count(*) AS n, sum(state = 6) AS rejected, "
    "                 sum(state = 5) AS late FROM round_participants "
    "          WHERE device_id IN (SELECT id FROM page) GROUP BY device_id), "
    "ups AS (SELECT device_id, count(*) AS n FROM updates "
    "        WHERE device_id IN (SELECT id FROM page) GROUP BY device_id) "
    "SELECT page.id, page.enrolled_at, page.last_seen, page.state, coalesce(parts.n, 0), "
    "       coalesce(ups.n, 0), coalesce(parts.rejected, 0), coalesce(parts.late, 0) "
    "FROM page LEFT JOIN parts ON parts.device_id = page.id "
    "LEFT JOIN ups ON ups.device_id = page.id ORDER BY page.id";

static uint32_t count_column(sqlite3_stmt *st, int col)
{
    int64_t v = sqlite3_column_int64(st, col);
    return v < 0 ? 0 : v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

int sl__sq_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                        int (*fn)(void *ctx, const sl_device_summary *d), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, sl__list_devices_sql, &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, offset);
        sqlite3_bind_int64(st, 2, limit);
        sqlite3_bind_int64(st, 3, after);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            sl_device_summary d;
            memset(&d, 0, sizeof d);
            d.id = sqlite3_column_int64(st, 0);
            d.enrolled_at_ms = sqlite3_column_int64(st, 1);
            d.last_seen_ms = sqlite3_column_int64(st, 2);
            sl__copy_text(st, 3, d.state, sizeof d.state);
            d.participations = count_column(st, 4);
            d.reported = count_column(st, 5);
            d.rejected = count_column(st, 6);
            d.late = count_column(st, 7);
            rc = fn(ctx, &d);
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

int sl__sq_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                          void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT device_id FROM updates WHERE round_id = ?1 ORDER BY device_id", &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = fn(ctx, sqlite3_column_int64(st, 0));
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
