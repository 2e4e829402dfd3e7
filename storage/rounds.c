/* rounds.c - rounds, their participants, and closing a round with its new model. */
#include <string.h>

#include "store_int.h"

#define ROUND_COLUMNS                                                                          \
    "id, task_id, round_no, base_version, state, target, quorum, opened_at, select_deadline, " \
    "report_deadline, closed_at, selected, reported, dropped, late, rejected, bytes_up, "      \
    "bytes_down, error, downloads"

static void read_round(sqlite3_stmt *st, sl_round_record *r)
{
    r->id = sqlite3_column_int64(st, 0);
    r->task_id = sqlite3_column_int64(st, 1);
    r->round_no = sqlite3_column_int64(st, 2);
    r->base_version = sqlite3_column_int64(st, 3);
    r->state = (sl_round_state)sqlite3_column_int(st, 4);
    r->target = (uint32_t)sqlite3_column_int64(st, 5);
    r->quorum = (uint32_t)sqlite3_column_int64(st, 6);
    r->opened_at_ms = sqlite3_column_int64(st, 7);
    r->select_deadline_ms = sqlite3_column_int64(st, 8);
    r->report_deadline_ms = sqlite3_column_int64(st, 9);
    r->closed_at_ms = sqlite3_column_int64(st, 10);
    r->selected = (uint32_t)sqlite3_column_int64(st, 11);
    r->reported = (uint32_t)sqlite3_column_int64(st, 12);
    r->dropped = (uint32_t)sqlite3_column_int64(st, 13);
    r->late = (uint32_t)sqlite3_column_int64(st, 14);
    r->rejected = (uint32_t)sqlite3_column_int64(st, 15);
    r->bytes_up = sqlite3_column_int64(st, 16);
    r->bytes_down = sqlite3_column_int64(st, 17);
    sl__copy_text(st, 18, r->error, sizeof r->error);
    r->downloads = (uint32_t)sqlite3_column_int64(st, 19);
}

/* Bind every column but id as ?2..?20 in ROUND_COLUMNS order (id is ?1). */
static void bind_round(sqlite3_stmt *st, const sl_round_record *r)
{
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, r->task_id);
    sqlite3_bind_int64(st, 3, r->round_no);
    sqlite3_bind_int64(st, 4, r->base_version);
    sqlite3_bind_int(st, 5, (int)r->state);
    sqlite3_bind_int64(st, 6, r->target);
    sqlite3_bind_int64(st, 7, r->quorum);
    sqlite3_bind_int64(st, 8, r->opened_at_ms);
    sqlite3_bind_int64(st, 9, r->select_deadline_ms);
    sqlite3_bind_int64(st, 10, r->report_deadline_ms);
    sqlite3_bind_int64(st, 11, r->closed_at_ms);
    sqlite3_bind_int64(st, 12, r->selected);
    sqlite3_bind_int64(st, 13, r->reported);
    sqlite3_bind_int64(st, 14, r->dropped);
    sqlite3_bind_int64(st, 15, r->late);
    sqlite3_bind_int64(st, 16, r->rejected);
    sqlite3_bind_int64(st, 17, r->bytes_up);
    sqlite3_bind_int64(st, 18, r->bytes_down);
    sqlite3_bind_text(st, 19, r->error, (int)strnlen(r->error, sizeof r->error), SQLITE_STATIC);
    sqlite3_bind_int64(st, 20, r->downloads);
}

static int create_exec(sl_store *s, sl__conn *c, void *arg)
{
    sl_round_record *r = arg;
    sqlite3_stmt *st;
    int rc = sl__sq_fenced(s, c);
    if (rc != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "INSERT INTO rounds (" ROUND_COLUMNS ") VALUES (NULL, ?2, ?3, ?4, ?5, ?6, "
                  "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                  &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    bind_round(st, r);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    r->id = sqlite3_last_insert_rowid(c->db);
    return SL_OK;
}

int sl__sq_create_round(sl_store *s, sl_round_record *r)
{
    sl_round_record copy;
    int rc;
    copy = *r;
    rc = sl__write(s, create_exec, &copy, SL__WRITE_TIMEOUT_MS);
    if (rc == SL_OK)
        r->id = copy.id;
    return rc;
}

static int update_round_exec(sl_store *s, sl__conn *c, const sl_round_record *r)
{
    sqlite3_stmt *st;
    int rc =
        sl__stmt(c,
                 "UPDATE rounds SET task_id = ?2, round_no = ?3, base_version = ?4, "
                 "state = ?5, target = ?6, quorum = ?7, opened_at = ?8, "
                 "select_deadline = ?9, report_deadline = ?10, closed_at = ?11, "
                 "selected = ?12, reported = ?13, dropped = ?14, late = ?15, "
                 "rejected = ?16, bytes_up = ?17, bytes_down = ?18, error = ?19, downloads = ?20 "
                 "WHERE id = ?1",
                 &st);
    (void)s;
    if (rc != SL_OK)
        return rc;
    bind_round(st, r);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return sl__status_from_sqlite(rc);
    return sqlite3_changes(c->db) == 1 ? SL_OK : SL_ENOENT;
}

static int update_exec(sl_store *s, sl__conn *c, void *arg)
{
    int rc = sl__sq_fenced(s, c);
    return rc == SL_OK ? update_round_exec(s, c, arg) : rc;
}

int sl__sq_update_round(sl_store *s, const sl_round_record *r)
{
    return sl__write(s, update_exec, (void *)r, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_get_round(sl_store *s, int64_t round_id, sl_round_record *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, "SELECT " ROUND_COLUMNS " FROM rounds WHERE id = ?1", &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, round_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            read_round(st, out);
            rc = SL_OK;
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

/* Run a round query and call @fn per row; the statement binds ?1..?3 from the args. */
static int each_round(sl_store *s, const char *sql, int64_t a1, int64_t a2, int64_t a3,
                      int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, sql, &st);
    if (rc == SL_OK) {
        int step;
        if (sqlite3_bind_parameter_count(st) >= 1)
            sqlite3_bind_int64(st, 1, a1);
        if (sqlite3_bind_parameter_count(st) >= 2)
            sqlite3_bind_int64(st, 2, a2);
        if (sqlite3_bind_parameter_count(st) >= 3)
            sqlite3_bind_int64(st, 3, a3);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            sl_round_record r;
            read_round(st, &r);
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

int sl__sq_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                       int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    return each_round(s,
                      "SELECT " ROUND_COLUMNS " FROM rounds WHERE task_id = ?1 "
                      "ORDER BY round_no DESC LIMIT ?3 OFFSET ?2",
                      task_id, offset, limit, fn, ctx);
}

int sl__sq_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    return each_round(s, "SELECT " ROUND_COLUMNS " FROM rounds WHERE state < 3 ORDER BY id", 0, 0,
                      0, fn, ctx);
}

typedef struct close_args {
    const sl_round_record *r;
    const sl_model_put *m;
} close_args;

static int close_exec(sl_store *s, sl__conn *c, void *arg)
{
    close_args *a = arg;
    int rc = sl__sq_fenced(s, c);
    if (rc == SL_OK && a->m != NULL)
        rc = sl__put_model_exec(s, c, a->m);
    if (rc == SL_OK)
        rc = update_round_exec(s, c, a->r);
    return rc; /* the writer's savepoint undoes the model if the round fails */
}

int sl__sq_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m)
{
    close_args a = {r, m};
    return sl__write(s, close_exec, &a, SL__WRITE_TIMEOUT_MS);
}

typedef struct part_args {
    int64_t round_id, device_id;
    sl_participant_state state;
    const char *reason;
    int existing; /* only a row already there (sl_store_mark_participant) */
} part_args;

static int part_exec(sl_store *s, sl__conn *c, void *arg)
{
    part_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      a->existing
                          ? "UPDATE round_participants SET state = ?3, reason = ?4, updated_at = "
                            "?5 WHERE round_id = ?1 AND device_id = ?2"
                          : "INSERT INTO round_participants (round_id, device_id, state, reason, "
                            "updated_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (round_id, "
                            "device_id) DO UPDATE SET state = ?3, reason = ?4, updated_at = ?5",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->round_id);
    sqlite3_bind_int64(st, 2, a->device_id);
    sqlite3_bind_int(st, 3, (int)a->state);
    sqlite3_bind_text(st, 4, a->reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such round or device */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return a->existing && sqlite3_changes(c->db) != 1 ? SL_ENOENT : SL_OK;
}

int sl__sq_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                           sl_participant_state state, const char *reason)
{
    part_args a = {round_id, device_id, state, reason ? reason : "", 0};
    return sl__write(s, part_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                            sl_participant_state state, const char *reason)
{
    part_args a = {round_id, device_id, state, reason ? reason : "", 1};
    return sl__write(s, part_exec, &a, SL__WRITE_TIMEOUT_MS);
}

typedef struct select_args {
    const sl_round_record *r;
    const int64_t *devices;
    size_t n;
} select_args;

static int select_exec(sl_store *s, sl__conn *c, void *arg)
{
    select_args *a = arg;
    sqlite3_stmt *st;
    int64_t now = sl__now_ms(s);
    int rc = sl__sq_fenced(s, c);
    if (rc != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "INSERT INTO round_participants (round_id, device_id, state, reason, "
                  "updated_at) VALUES (?1, ?2, 0, '', ?3) ON CONFLICT DO NOTHING",
                  &st);
    if (rc != SL_OK)
        return rc;
    for (size_t i = 0; i < a->n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, a->r->id);
        sqlite3_bind_int64(st, 2, a->devices[i]);
        sqlite3_bind_int64(st, 3, now);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) {
            sqlite3_reset(st);
            return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
    }
    sqlite3_reset(st);
    return update_round_exec(s, c, a->r);
}

int sl__sq_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                               size_t n)
{
    select_args a = {r, devices, n};
    return sl__write(s, select_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_list_participants(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const sl_participant_record *p), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT device_id, state, reason, updated_at FROM round_participants "
                  "WHERE round_id = ?1 ORDER BY device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, round_id);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            sl_participant_record p;
            p.round_id = round_id;
            p.device_id = sqlite3_column_int64(st, 0);
            p.state = (sl_participant_state)sqlite3_column_int(st, 1);
            sl__copy_text(st, 2, p.reason, sizeof p.reason);
            p.updated_at_ms = sqlite3_column_int64(st, 3);
            rc = fn(ctx, &p);
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
