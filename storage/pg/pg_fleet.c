/*
 * pg_fleet.c - what the store knows of a task's fleet, on PostgreSQL
 * (fleet.c's twin): each device's last reported pace, its history of
 * selections and reports, and the delays of past rounds' reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

/* ---- devices' pace ------------------------------------------------------------------------ */

typedef struct pace_args {
    int64_t task, device;
    const sl_store_pace *p;
    sl_store_pace *out;
} pace_args;

static int pace_exec(sl__pg *p, PGconn *c, void *arg)
{
    pace_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->device);
    sl__pgq_double(&q, a->p->step_ms);
    sl__pgq_double(&q, a->p->up_bps);
    sl__pgq_double(&q, a->p->down_bps);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    return sl__pg_exec(c,
                       "INSERT INTO device_pace (task_id, device_id, step_ms, up_bps, down_bps, "
                       "at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (task_id, device_id) DO "
                       "UPDATE SET step_ms = excluded.step_ms, up_bps = excluded.up_bps, "
                       "down_bps = excluded.down_bps, at = excluded.at",
                       &q, NULL);
}

int sl__pg_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *pace)
{
    pace_args a = {task_id, device_id, pace, NULL};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, pace_exec, &a);
}

static int get_pace_exec(sl__pg *p, PGconn *c, void *arg)
{
    pace_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->device);
    rc = sl__pg_exec(c,
                     "SELECT step_ms, up_bps, down_bps, at FROM device_pace WHERE task_id = $1 "
                     "AND device_id = $2",
                     &q, &r);
    if (rc == SL_OK && PQntuples(r) == 0)
        rc = SL_ENOENT;
    if (rc == SL_OK) {
        a->out->step_ms = sl__pg_double(r, 0, 0);
        a->out->up_bps = sl__pg_double(r, 0, 1);
        a->out->down_bps = sl__pg_double(r, 0, 2);
        a->out->at_ms = sl__pg_int(r, 0, 3);
    }
    PQclear(r);
    return rc;
}

int sl__pg_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out)
{
    pace_args a = {task_id, device_id, NULL, out};
    return sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, get_pace_exec, &a);
}

typedef struct history_of_args {
    int64_t task;
    const int64_t *ids;
    size_t n;
    int64_t *rows; /* 4 a device (id, selected, reported, last): handed out once the read
                      committed, so that a retried one hands none out twice */
    size_t m;
} history_of_args;

/* The ids per query: an array literal of at most this many (a few hundred kB). */
#define IDS_PER_QUERY 8192

/* "{id,id,...}" of @ids[at .. end) into @list (@cap bytes: 21 a device and 3). */
static void id_list(char *list, size_t cap, const int64_t *ids, size_t at, size_t end)
{
    size_t len = 0;
    list[len++] = '{';
    for (size_t i = at; i < end; i++)
        len +=
            (size_t)snprintf(list + len, cap - len, i > at ? ",%lld" : "%lld", (long long)ids[i]);
    list[len++] = '}';
    list[len] = '\0';
}

/* @sql ($1 the task @task, $2 an array of device ids) over the @n devices @ids, in statements
 * of at most IDS_PER_QUERY of them; @row gets each row of each result. */
static int by_ids(PGconn *c, const char *sql, int64_t task, const int64_t *ids, size_t n,
                  void (*row)(void *ctx, PGresult *r, int i), void *ctx)
{
    size_t cap = IDS_PER_QUERY * 21 + 3;
    char *list = malloc(cap);
    int rc = SL_OK;
    if (list == NULL)
        return SL_ENOMEM;
    for (size_t at = 0; at < n && rc == SL_OK; at += IDS_PER_QUERY) {
        size_t end = n - at < IDS_PER_QUERY ? n : at + IDS_PER_QUERY;
        PGresult *r = NULL;
        sl__pgq q = {0};
        id_list(list, cap, ids, at, end);
        sl__pgq_int(&q, task);
        sl__pgq_text(&q, list);
        rc = sl__pg_exec(c, sql, &q, &r);
        for (int i = 0; rc == SL_OK && i < PQntuples(r); i++)
            row(ctx, r, i);
        PQclear(r);
    }
    free(list);
    return rc;
}

static void history_of_row(void *ctx, PGresult *r, int i)
{
    history_of_args *a = ctx;
    if (a->m < a->n) { /* a device per row: at most n */
        for (int k = 0; k < 4; k++)
            a->rows[4 * a->m + (size_t)k] = sl__pg_int(r, i, k);
        a->m++;
    }
}

static int history_of_exec(sl__pg *p, PGconn *c, void *arg)
{
    history_of_args *a = arg;
    (void)p;
    a->m = 0; /* a retry reads them all again */
    return by_ids(c,
                  "SELECT p.device_id, count(*)::bigint, count(u.device_id)::bigint, "
                  "max(r.round_no) FROM round_participants p JOIN rounds r ON r.id = "
                  "p.round_id LEFT JOIN updates u ON u.round_id = p.round_id AND "
                  "u.device_id = p.device_id WHERE p.device_id = ANY($2::bigint[]) AND "
                  "r.task_id = $1 GROUP BY p.device_id",
                  a->task, a->ids, a->n, history_of_row, a);
}

int sl__pg_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                             int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                       uint32_t reported, int64_t last_round_no),
                             void *ctx)
{
    history_of_args a = {task_id, ids, n, malloc(4 * n * sizeof(int64_t)), 0};
    int rc = a.rows != NULL ? SL_OK : SL_ENOMEM;
    if (rc == SL_OK)
        rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, history_of_exec, &a);
    for (size_t i = 0; rc == SL_OK && i < a.m; i++)
        rc = fn(ctx, a.rows[4 * i], (uint32_t)a.rows[4 * i + 1], (uint32_t)a.rows[4 * i + 2],
                a.rows[4 * i + 3]);
    free(a.rows);
    return rc;
}

typedef struct paces_args {
    int64_t task;
    const int64_t *ids;
    size_t n;
    int64_t *found;       /* the rows read: handed out once the transaction committed, so */
    sl_store_pace *paces; /* that a retried one does not hand any out twice */
    size_t m;
} paces_args;

static void paces_row(void *ctx, PGresult *r, int i)
{
    paces_args *a = ctx;
    if (a->m < a->n) { /* a device per row: at most n */
        sl_store_pace pace = {sl__pg_double(r, i, 1), sl__pg_double(r, i, 2),
                              sl__pg_double(r, i, 3), sl__pg_int(r, i, 4)};
        a->found[a->m] = sl__pg_int(r, i, 0);
        a->paces[a->m++] = pace;
    }
}

static int get_paces_exec(sl__pg *p, PGconn *c, void *arg)
{
    paces_args *a = arg;
    (void)p;
    a->m = 0; /* a retry reads them all again */
    return by_ids(c,
                  "SELECT device_id, step_ms, up_bps, down_bps, at FROM device_pace WHERE "
                  "task_id = $1 AND device_id = ANY($2::bigint[])",
                  a->task, a->ids, a->n, paces_row, a);
}

int sl__pg_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                     int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace), void *ctx)
{
    paces_args a = {task_id, ids, n, malloc(n * sizeof(int64_t)), malloc(n * sizeof(sl_store_pace)),
                    0};
    int rc = a.found != NULL && a.paces != NULL ? SL_OK : SL_ENOMEM;
    if (rc == SL_OK)
        rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, get_paces_exec, &a);
    for (size_t i = 0; rc == SL_OK && i < a.m; i++)
        rc = fn(ctx, a.found[i], &a.paces[i]);
    free(a.found);
    free(a.paces);
    return rc;
}

/* ---- devices' history --------------------------------------------------------------------- */

typedef struct history_args {
    int64_t task, before;
    int (*fn)(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
              int64_t last_round_no);
    void *ctx;
    int stop;
} history_args;

static int history_exec(sl__pg *p, PGconn *c, void *arg)
{
    history_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->before);
    rc = sl__pg_exec(c,
                     "SELECT p.device_id, count(*)::bigint, count(u.device_id)::bigint, "
                     "max(r.round_no) FROM round_participants p "
                     "JOIN rounds r ON r.id = p.round_id LEFT JOIN updates u ON u.round_id = "
                     "p.round_id AND u.device_id = p.device_id WHERE r.task_id = $1 AND "
                     "r.round_no < $2 GROUP BY p.device_id ORDER BY p.device_id",
                     &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r) && a->stop == 0; i++)
        a->stop = a->fn(a->ctx, sl__pg_int(r, i, 0), (uint32_t)sl__pg_int(r, i, 1),
                        (uint32_t)sl__pg_int(r, i, 2), sl__pg_int(r, i, 3));
    PQclear(r);
    return rc;
}

int sl__pg_device_history(sl_store *s, int64_t task_id, int64_t before_round_no,
                          int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                    uint32_t reported, int64_t last_round_no),
                          void *ctx)
{
    history_args a = {task_id, before_round_no, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, history_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

typedef struct rounds_args {
    int64_t task, device, before;
    uint32_t *out;
} rounds_args;

static int rounds_exec(sl__pg *p, PGconn *c, void *arg)
{
    rounds_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->device);
    sl__pgq_int(&q, a->before);
    rc = sl__pg_exec(c,
                     /* from the device's own rows (indexed by device), each round once */
                     "SELECT count(*)::bigint FROM (SELECT round_id FROM round_participants "
                     "WHERE device_id = $2 UNION SELECT round_id FROM updates WHERE device_id = "
                     "$2) x JOIN rounds r ON r.id = x.round_id WHERE r.task_id = $1 AND "
                     "r.round_no < $3",
                     &q, &r);
    if (rc == SL_OK && PQntuples(r) == 1) {
        int64_t n = sl__pg_int(r, 0, 0);
        *a->out = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    }
    PQclear(r);
    return rc;
}

int sl__pg_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                         uint32_t *out)
{
    rounds_args a = {task_id, device_id, before_round_no, out};
    return sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, rounds_exec, &a);
}

/* ---- report delays ------------------------------------------------------------------------ */

typedef struct delays_args {
    int64_t task, after;
    int (*fn)(void *ctx, int64_t delay_ms);
    void *ctx;
    int stop;
} delays_args;

static int delays_exec(sl__pg *p, PGconn *c, void *arg)
{
    delays_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->task);
    sl__pgq_int(&q, a->after);
    rc = sl__pg_exec(
        c,
        "SELECT greatest(u.received_at - r.select_deadline, 0) FROM updates u JOIN rounds r ON "
        "r.id = u.round_id WHERE r.task_id = $1 AND r.round_no > $2 "
        "ORDER BY r.round_no, u.device_id",
        &q, &r);
    for (int i = 0; rc == SL_OK && i < PQntuples(r) && a->stop == 0; i++)
        a->stop = a->fn(a->ctx, sl__pg_int(r, i, 0));
    PQclear(r);
    return rc;
}

int sl__pg_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                         int (*fn)(void *ctx, int64_t delay_ms), void *ctx)
{
    delays_args a = {task_id, after_round_no, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, delays_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}
