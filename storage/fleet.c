/*
 * fleet.c - what the store knows of a task's fleet, on SQLite, for
 * heterogeneous fleets (#22): each device's pace as it last reported it
 * (time budgets), its history of selections and reports (fair and paced
 * selection) and the delays of past rounds' reports (adaptive deadlines).
 * pg/pg_fleet.c is its PostgreSQL twin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ---- devices' pace ------------------------------------------------------------------------ */

typedef struct pace_args {
    int64_t task, device;
    const sl_store_pace *p;
} pace_args;

static int pace_exec(sl_store *s, sl__conn *c, void *arg)
{
    pace_args *a = arg;
    sqlite3_stmt *st;
    int rc = sl__stmt(c,
                      "INSERT INTO device_pace (task_id, device_id, step_ms, up_bps, down_bps, at) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (task_id, device_id) DO UPDATE "
                      "SET step_ms = excluded.step_ms, up_bps = excluded.up_bps, "
                      "down_bps = excluded.down_bps, at = excluded.at",
                      &st);
    if (rc != SL_OK)
        return rc;
    sqlite3_bind_int64(st, 1, a->task);
    sqlite3_bind_int64(st, 2, a->device);
    sqlite3_bind_double(st, 3, a->p->step_ms);
    sqlite3_bind_double(st, 4, a->p->up_bps);
    sqlite3_bind_double(st, 5, a->p->down_bps);
    sqlite3_bind_int64(st, 6, sl__now_ms(s));
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) /* a foreign key: no such task or device */
        return (rc & 0xff) == SQLITE_CONSTRAINT ? SL_ENOENT : sl__status_from_sqlite(rc);
    return SL_OK;
}

int sl__sq_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p)
{
    pace_args a = {task_id, device_id, p};
    return sl__write(s, pace_exec, &a, SL__WRITE_TIMEOUT_MS);
}

int sl__sq_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT step_ms, up_bps, down_bps, at FROM device_pace WHERE task_id = ?1 AND "
                  "device_id = ?2",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, device_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            out->step_ms = sqlite3_column_double(st, 0);
            out->up_bps = sqlite3_column_double(st, 1);
            out->down_bps = sqlite3_column_double(st, 2);
            out->at_ms = sqlite3_column_int64(st, 3);
            rc = SL_OK;
        } else {
            rc = rc == SQLITE_DONE ? SL_ENOENT : sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

/* Run @sql (?1 the task, ?2 a device) for each of the @n devices @ids in one read snapshot; for
 * each that has a row, its first @ncol (<= 4) columns, as integers and as doubles, go to @row
 * after the statement is reset. Stops at @row's first non-zero return (returned). pg_fleet.c's
 * by_ids is its PostgreSQL twin. */
static int by_ids(sl_store *s, const char *sql, int64_t task_id, const int64_t *ids, size_t n,
                  int ncol, int (*row)(void *arg, int64_t id, const int64_t *iv, const double *dv),
                  void *arg)
{
    sl__conn *c;
    sqlite3_stmt *st = NULL;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__exec(c, "BEGIN"); /* one snapshot for them all */
    if (rc == SL_OK)
        rc = sl__stmt(c, sql, &st);
    for (size_t i = 0; rc == SL_OK && i < n; i++) {
        int64_t iv[4];
        double dv[4];
        int step;
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, ids[i]);
        step = sqlite3_step(st);
        for (int k = 0; step == SQLITE_ROW && k < ncol; k++) {
            iv[k] = sqlite3_column_int64(st, k);
            dv[k] = sqlite3_column_double(st, k);
        }
        sqlite3_reset(st);
        if (step == SQLITE_ROW)
            rc = row(arg, ids[i], iv, dv);
        else if (step != SQLITE_DONE)
            rc = sl__status_from_sqlite(step);
    }
    (void)sl__exec(c, "COMMIT");
    sl__reader_put(s, c);
    return rc;
}

typedef struct history_of_args {
    int (*fn)(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
              int64_t last_round_no);
    void *ctx;
} history_of_args;

static int history_of_row(void *arg, int64_t id, const int64_t *iv, const double *dv)
{
    history_of_args *a = arg;
    (void)dv;
    if (iv[0] <= 0)
        return 0; /* never selected: the aggregate's row says so */
    return a->fn(a->ctx, id, (uint32_t)iv[0], (uint32_t)iv[1], iv[2]);
}

int sl__sq_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                             int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                       uint32_t reported, int64_t last_round_no),
                             void *ctx)
{
    history_of_args a = {fn, ctx};
    /* by the participants' device index: the device's rows, not the task's */
    return by_ids(s,
                  "SELECT count(*), count(u.device_id), max(r.round_no) FROM "
                  "round_participants p JOIN rounds r ON r.id = p.round_id LEFT JOIN updates "
                  "u ON u.round_id = p.round_id AND u.device_id = p.device_id WHERE "
                  "p.device_id = ?2 AND r.task_id = ?1",
                  task_id, ids, n, 3, history_of_row, &a);
}

typedef struct paces_args {
    int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace);
    void *ctx;
} paces_args;

static int pace_row(void *arg, int64_t id, const int64_t *iv, const double *dv)
{
    paces_args *a = arg;
    sl_store_pace p = {dv[0], dv[1], dv[2], iv[3]};
    return a->fn(a->ctx, id, &p);
}

int sl__sq_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                     int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace), void *ctx)
{
    paces_args a = {fn, ctx};
    return by_ids(s,
                  "SELECT step_ms, up_bps, down_bps, at FROM device_pace WHERE task_id = ?1 "
                  "AND device_id = ?2",
                  task_id, ids, n, 4, pace_row, &a);
}

/* ---- devices' history --------------------------------------------------------------------- */

int sl__sq_device_history(sl_store *s, int64_t task_id, int64_t before_round_no,
                          int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                    uint32_t reported, int64_t last_round_no),
                          void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  "SELECT p.device_id, count(*), count(u.device_id), max(r.round_no) FROM "
                  "round_participants p "
                  "JOIN rounds r ON r.id = p.round_id LEFT JOIN updates u ON u.round_id = "
                  "p.round_id AND u.device_id = p.device_id WHERE r.task_id = ?1 AND "
                  "r.round_no < ?2 GROUP BY p.device_id ORDER BY p.device_id",
                  &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, before_round_no);
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = fn(ctx, sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1),
                    (uint32_t)sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3));
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

int sl__sq_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                         uint32_t *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c,
                  /* from the device's own rows (both tables are indexed by device), each
                   * round once, not from every round of the task */
                  "SELECT count(*) FROM (SELECT round_id FROM round_participants WHERE "
                  "device_id = ?2 UNION SELECT round_id FROM updates WHERE device_id = ?2) x "
                  "JOIN rounds r ON r.id = x.round_id WHERE r.task_id = ?1 AND r.round_no < ?3",
                  &st);
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, device_id);
        sqlite3_bind_int64(st, 3, before_round_no);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            int64_t n = sqlite3_column_int64(st, 0);
            *out = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
            rc = SL_OK;
        } else {
            rc = sl__status_from_sqlite(rc);
        }
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}

/* ---- report delays ------------------------------------------------------------------------ */

int sl__sq_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                         int (*fn)(void *ctx, int64_t delay_ms), void *ctx)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc =
        sl__stmt(c,
                 "SELECT max(u.received_at - r.select_deadline, 0) FROM updates u JOIN rounds r ON "
                 "r.id = u.round_id WHERE r.task_id = ?1 AND r.round_no > ?2 "
                 "ORDER BY r.round_no, u.device_id",
                 &st);
    if (rc == SL_OK) {
        int step;
        sqlite3_bind_int64(st, 1, task_id);
        sqlite3_bind_int64(st, 2, after_round_no);
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
