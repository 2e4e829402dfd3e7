/* meta.c - devices, tasks and the audit log. */
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static int text_ok(const char *t)
{
    return t != NULL && strlen(t) < SL_STORE_MAX_TEXT;
}

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

int sl_store_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                          int64_t *device_id)
{
    enrol_args a = {key, key_len, capabilities ? capabilities : "{}", 0};
    int rc;
    if (s == NULL || key == NULL || key_len == 0 || key_len > SL_STORE_MAX_KEY ||
        device_id == NULL || !text_ok(a.caps))
        return SL_EINVAL;
    rc = sl__write(s, enrol_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK)
        *device_id = a.id;
    return rc;
}

int sl_store_get_device(sl_store *s, int64_t device_id, sl_device_record *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT public_key, enrolled_at, last_seen, capabilities FROM devices "
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

int sl_store_touch_device(sl_store *s, int64_t device_id)
{
    touch_args a = {device_id};
    if (s == NULL)
        return SL_EINVAL;
    return sl__write(s, touch_exec, &a, SL__WRITE_TIMEOUT_MS);
}

/* ---- tasks --------------------------------------------------------------- */

typedef struct task_args {
    const char *name, *config, *layout;
    int64_t id;
} task_args;

static int task_exec(sl_store *s, sl__conn *c, void *arg)
{
    task_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "SELECT id, config, layout FROM tasks WHERE name = ?1", &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *cfg = (const char *)sqlite3_column_text(st, 1);
        const char *lay = (const char *)sqlite3_column_text(st, 2);
        int same = cfg && lay && strcmp(cfg, a->config) == 0 && strcmp(lay, a->layout) == 0;
        a->id = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        return same ? SL_OK : SL_ECONFLICT;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    rc = sl__stmt(c, "INSERT INTO tasks (name, config, layout, created_at) VALUES (?1, ?2, ?3, ?4)",
                  &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->config, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->layout, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    a->id = sqlite3_last_insert_rowid(c->db);
    return SL_OK;
}

int sl_store_create_task(sl_store *s, const char *name, const char *config_json,
                         const char *layout_text, int64_t *task_id)
{
    task_args a = {name, config_json, layout_text, 0};
    int rc;
    if (s == NULL || name == NULL || name[0] == '\0' || strlen(name) > 256 || config_json == NULL ||
        layout_text == NULL || task_id == NULL)
        return SL_EINVAL;
    rc = sl__write(s, task_exec, &a, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK)
        *task_id = a.id;
    return rc;
}

int sl_store_get_task(sl_store *s, int64_t task_id, sl_task_record *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    sl_task_record t = {0};
    int rc;
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT name, config, layout, created_at FROM tasks WHERE id = ?1", &st);
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

int sl_store_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
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

void sl_store_task_free(sl_task_record *t)
{
    if (t == NULL)
        return;
    free(t->name);
    free(t->config_json);
    free(t->layout_text);
    t->name = t->config_json = t->layout_text = NULL;
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

int sl_store_audit(sl_store *s, const char *actor, const char *action, const char *detail)
{
    audit_args a = {actor, action, detail ? detail : ""};
    if (s == NULL || !text_ok(actor) || !text_ok(action) || !text_ok(a.detail))
        return SL_EINVAL;
    return sl__write(s, audit_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl_store_count_audit(sl_store *s, uint64_t *count)
{
    int64_t n = 0;
    int rc;
    if (s == NULL || count == NULL)
        return SL_EINVAL;
    rc = sl__query_int64(s, "SELECT count(*) FROM audit", 0, 0, &n);
    if (rc == SL_OK)
        *count = (uint64_t)n;
    return rc;
}

/* ---- readiness ---------------------------------------------------------- */

static int probe_exec(sl_store *s, sl__conn *c, void *arg)
{
    sqlite3_stmt *st;
    int rc;
    (void)s;
    (void)arg;
    /* rewrites the row as it is: a page goes to the WAL and the commit is synced */
    rc = sl__stmt(c, "UPDATE schema_version SET version = version", &st);
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

int sl_store_probe_write(sl_store *s)
{
    if (s == NULL)
        return SL_EINVAL;
    return sl__write(s, probe_exec, NULL, SL__WRITE_TIMEOUT_MS);
}
