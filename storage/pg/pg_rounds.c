/*
 * pg_rounds.c - rounds and participants on PostgreSQL (rounds.c's twin),
 * with the leader's fence: once this process leads with an epoch
 * (sl_store_lead()), every write of a round's record first takes a share
 * lock on the leader row and is refused (SL_EFENCED) when the row holds a
 * newer epoch. A new leader's takeover updates that row, so it waits for
 * such writes in flight to commit, and none of the old epoch commits after.
 */
#include <string.h>

#include "pg_int.h"

#define ROUND_COLUMNS                                                                          \
    "id, task_id, round_no, base_version, state, target, quorum, opened_at, select_deadline, " \
    "report_deadline, closed_at, selected, reported, dropped, late, rejected, bytes_up, "      \
    "bytes_down, error, downloads"

static void read_round(const PGresult *r, int row, sl_round_record *out)
{
    memset(out, 0, sizeof *out);
    out->id = sl__pg_int(r, row, 0);
    out->task_id = sl__pg_int(r, row, 1);
    out->round_no = sl__pg_int(r, row, 2);
    out->base_version = sl__pg_int(r, row, 3);
    out->state = (sl_round_state)sl__pg_int(r, row, 4);
    out->target = (uint32_t)sl__pg_int(r, row, 5);
    out->quorum = (uint32_t)sl__pg_int(r, row, 6);
    out->opened_at_ms = sl__pg_int(r, row, 7);
    out->select_deadline_ms = sl__pg_int(r, row, 8);
    out->report_deadline_ms = sl__pg_int(r, row, 9);
    out->closed_at_ms = sl__pg_int(r, row, 10);
    out->selected = (uint32_t)sl__pg_int(r, row, 11);
    out->reported = (uint32_t)sl__pg_int(r, row, 12);
    out->dropped = (uint32_t)sl__pg_int(r, row, 13);
    out->late = (uint32_t)sl__pg_int(r, row, 14);
    out->rejected = (uint32_t)sl__pg_int(r, row, 15);
    out->bytes_up = sl__pg_int(r, row, 16);
    out->bytes_down = sl__pg_int(r, row, 17);
    sl__pg_copy_text(r, row, 18, out->error, sizeof out->error);
    out->downloads = (uint32_t)sl__pg_int(r, row, 19);
}

/* Every column but the id, in ROUND_COLUMNS order, as the next parameters. */
static void bind_round(sl__pgq *q, const sl_round_record *r)
{
    sl__pgq_int(q, r->task_id);
    sl__pgq_int(q, r->round_no);
    sl__pgq_int(q, r->base_version);
    sl__pgq_int(q, (int64_t)r->state);
    sl__pgq_int(q, r->target);
    sl__pgq_int(q, r->quorum);
    sl__pgq_int(q, r->opened_at_ms);
    sl__pgq_int(q, r->select_deadline_ms);
    sl__pgq_int(q, r->report_deadline_ms);
    sl__pgq_int(q, r->closed_at_ms);
    sl__pgq_int(q, r->selected);
    sl__pgq_int(q, r->reported);
    sl__pgq_int(q, r->dropped);
    sl__pgq_int(q, r->late);
    sl__pgq_int(q, r->rejected);
    sl__pgq_int(q, r->bytes_up);
    sl__pgq_int(q, r->bytes_down);
    sl__pgq_text(q, r->error);
    sl__pgq_int(q, r->downloads);
}

int sl__pg_fenced(sl__pg *p, PGconn *c)
{
    PGresult *r = NULL;
    uint64_t fence;
    int rc;
    pthread_mutex_lock(&p->lock);
    fence = p->fence;
    pthread_mutex_unlock(&p->lock);
    if (fence == 0) /* not a replica that leads: nothing to check */
        return SL_OK;
    rc = sl__pg_exec(c, "SELECT epoch FROM leader WHERE id = 1 FOR SHARE", NULL, &r);
    if (rc != SL_OK)
        return rc;
    rc = PQntuples(r) == 1 && (uint64_t)sl__pg_int(r, 0, 0) == fence ? SL_OK : SL_EFENCED;
    PQclear(r);
    return rc;
}

static int create_exec(sl__pg *p, PGconn *c, void *arg)
{
    sl_round_record *rec = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc = sl__pg_fenced(p, c);
    if (rc != SL_OK)
        return rc;
    bind_round(&q, rec);
    /* (task, round_no) is unique: a retry after a lost COMMIT answer finds its own row */
    rc = sl__pg_exec(c,
                     "INSERT INTO rounds (" ROUND_COLUMNS ") VALUES (DEFAULT, $1, $2, $3, $4, $5, "
                     "$6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) "
                     "ON CONFLICT (task_id, round_no) DO NOTHING RETURNING id",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    if (PQntuples(r) == 1) {
        rec->id = sl__pg_int(r, 0, 0);
        PQclear(r);
        return SL_OK;
    }
    PQclear(r);
    q.n = 0;
    sl__pgq_int(&q, rec->task_id);
    sl__pgq_int(&q, rec->round_no);
    rc = sl__pg_exec(c, "SELECT id, opened_at FROM rounds WHERE task_id = $1 AND round_no = $2", &q,
                     &r);
    if (rc != SL_OK)
        return rc;
    /* the same round again (a retry) is its id; another round with that number a conflict */
    rc = PQntuples(r) == 1 && sl__pg_int(r, 0, 1) == rec->opened_at_ms ? SL_OK : SL_ECONFLICT;
    if (rc == SL_OK)
        rec->id = sl__pg_int(r, 0, 0);
    PQclear(r);
    return rc;
}

int sl__pg_create_round(sl_store *s, sl_round_record *rec)
{
    sl_round_record copy = *rec;
    int rc = sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, create_exec, &copy);
    if (rc == SL_OK)
        rec->id = copy.id;
    return rc;
}

static int update_round_exec(PGconn *c, const sl_round_record *rec)
{
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    sl__pgq_int(&q, rec->id);
    bind_round(&q, rec);
    rc = sl__pg_exec(
        c,
        "UPDATE rounds SET task_id = $2, round_no = $3, base_version = $4, "
        "state = $5, target = $6, quorum = $7, opened_at = $8, "
        "select_deadline = $9, report_deadline = $10, closed_at = $11, "
        "selected = $12, reported = $13, dropped = $14, late = $15, "
        "rejected = $16, bytes_up = $17, bytes_down = $18, error = $19, downloads = $20 "
        "WHERE id = $1",
        &q, &r);
    if (rc != SL_OK)
        return rc;
    rc = sl__pg_changes(r) == 1 ? SL_OK : SL_ENOENT;
    PQclear(r);
    return rc;
}

static int update_exec(sl__pg *p, PGconn *c, void *arg)
{
    int rc = sl__pg_fenced(p, c);
    return rc == SL_OK ? update_round_exec(c, arg) : rc;
}

int sl__pg_update_round(sl_store *s, const sl_round_record *r)
{
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, update_exec, (void *)r);
}

/* A round query's rows, one call of @fn each; $1..$3 bound from @a. */
typedef struct each_args {
    const char *sql;
    int nargs;
    int64_t a[3];
    int (*fn)(void *ctx, const sl_round_record *r);
    void *ctx;
    int found;
    int stop; /* @fn's non-zero answer: returned as it is, never retried */
} each_args;

static int each_exec(sl__pg *p, PGconn *c, void *arg)
{
    each_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    for (int i = 0; i < a->nargs; i++)
        sl__pgq_int(&q, a->a[i]);
    rc = sl__pg_exec(c, a->sql, &q, &r);
    if (rc != SL_OK)
        return rc;
    a->found = PQntuples(r);
    for (int i = 0; i < PQntuples(r) && a->stop == 0; i++) {
        sl_round_record rec;
        read_round(r, i, &rec);
        a->stop = a->fn(a->ctx, &rec);
    }
    PQclear(r);
    return SL_OK;
}

static int copy_round(void *ctx, const sl_round_record *r)
{
    *(sl_round_record *)ctx = *r;
    return 0;
}

int sl__pg_get_round(sl_store *s, int64_t round_id, sl_round_record *out)
{
    sl_round_record rec;
    each_args a = {"SELECT " ROUND_COLUMNS " FROM rounds WHERE id = $1",
                   1,
                   {round_id, 0, 0},
                   copy_round,
                   &rec,
                   0,
                   0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, each_exec, &a);
    if (rc == SL_OK && a.found == 0)
        return SL_ENOENT;
    if (rc == SL_OK)
        *out = rec;
    return rc;
}

int sl__pg_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                       int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    each_args a = {"SELECT " ROUND_COLUMNS " FROM rounds WHERE task_id = $1 "
                   "ORDER BY round_no DESC LIMIT $3 OFFSET $2",
                   3,
                   {task_id, offset, limit},
                   fn,
                   ctx,
                   0,
                   0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, each_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

int sl__pg_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    each_args a = {"SELECT " ROUND_COLUMNS " FROM rounds WHERE state < 3 ORDER BY id",
                   0,
                   {0, 0, 0},
                   fn,
                   ctx,
                   0,
                   0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, each_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}

typedef struct close_args {
    const sl_round_record *r;
    const sl_model_put *m;
} close_args;

static int close_exec(sl__pg *p, PGconn *c, void *arg)
{
    close_args *a = arg;
    int rc = sl__pg_fenced(p, c);
    if (rc == SL_OK && a->m != NULL)
        rc = sl__pg_put_model_exec(p, c, a->m);
    if (rc == SL_OK)
        rc = update_round_exec(c, a->r);
    return rc; /* the rollback undoes the model if the round fails */
}

int sl__pg_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m)
{
    close_args a = {r, m};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, close_exec, &a);
}

typedef struct part_args {
    int64_t round_id, device_id;
    sl_participant_state state;
    const char *reason;
    int existing; /* only a row already there (sl_store_mark_participant) */
} part_args;

static int part_exec(sl__pg *p, PGconn *c, void *arg)
{
    part_args *a = arg;
    sl__pgq q = {0};
    sl__pgq_int(&q, a->round_id);
    sl__pgq_int(&q, a->device_id);
    sl__pgq_int(&q, (int64_t)a->state);
    sl__pgq_text(&q, a->reason);
    sl__pgq_int(&q, sl__pg_now_ms(p));
    if (a->existing) {
        PGresult *r = NULL;
        int rc = sl__pg_exec(c,
                             "UPDATE round_participants SET state = $3, reason = $4, updated_at = "
                             "$5 WHERE round_id = $1 AND device_id = $2 RETURNING device_id",
                             &q, &r);
        if (rc == SL_OK && PQntuples(r) != 1)
            rc = SL_ENOENT;
        PQclear(r);
        return rc;
    }
    /* a foreign key (no such round or device) is SL_ENOENT */
    return sl__pg_exec(c,
                       "INSERT INTO round_participants (round_id, device_id, state, reason, "
                       "updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (round_id, device_id) "
                       "DO UPDATE SET state = $3, reason = $4, updated_at = $5",
                       &q, NULL);
}

int sl__pg_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                           sl_participant_state state, const char *reason)
{
    part_args a = {round_id, device_id, state, reason, 0};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, part_exec, &a);
}

int sl__pg_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                            sl_participant_state state, const char *reason)
{
    part_args a = {round_id, device_id, state, reason, 1};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, part_exec, &a);
}

typedef struct select_args {
    const sl_round_record *r;
    const int64_t *devices;
    size_t n;
} select_args;

static int select_exec(sl__pg *p, PGconn *c, void *arg)
{
    select_args *a = arg;
    int64_t now = sl__pg_now_ms(p);
    int rc = sl__pg_fenced(p, c);
    for (size_t i = 0; rc == SL_OK && i < a->n; i++) {
        sl__pgq q = {0};
        sl__pgq_int(&q, a->r->id);
        sl__pgq_int(&q, a->devices[i]);
        sl__pgq_int(&q, now);
        rc = sl__pg_exec(c,
                         "INSERT INTO round_participants (round_id, device_id, state, reason, "
                         "updated_at) VALUES ($1, $2, 0, '', $3) ON CONFLICT DO NOTHING",
                         &q, NULL);
    }
    return rc == SL_OK ? update_round_exec(c, a->r) : rc;
}

int sl__pg_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                               size_t n)
{
    select_args a = {r, devices, n};
    return sl__pg_tx((sl__pg *)(void *)s, 0, SL__PG_TIMEOUT_MS, select_exec, &a);
}

typedef struct parts_args {
    int64_t round_id;
    int (*fn)(void *ctx, const sl_participant_record *p);
    void *ctx;
    int stop;
} parts_args;

static int parts_exec(sl__pg *p, PGconn *c, void *arg)
{
    parts_args *a = arg;
    PGresult *r = NULL;
    sl__pgq q = {0};
    int rc;
    (void)p;
    sl__pgq_int(&q, a->round_id);
    rc = sl__pg_exec(c,
                     "SELECT device_id, state, reason, updated_at FROM round_participants "
                     "WHERE round_id = $1 ORDER BY device_id",
                     &q, &r);
    if (rc != SL_OK)
        return rc;
    for (int i = 0; i < PQntuples(r) && a->stop == 0; i++) {
        sl_participant_record rec;
        rec.round_id = a->round_id;
        rec.device_id = sl__pg_int(r, i, 0);
        rec.state = (sl_participant_state)sl__pg_int(r, i, 1);
        sl__pg_copy_text(r, i, 2, rec.reason, sizeof rec.reason);
        rec.updated_at_ms = sl__pg_int(r, i, 3);
        a->stop = a->fn(a->ctx, &rec);
    }
    PQclear(r);
    return SL_OK;
}

int sl__pg_list_participants(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const sl_participant_record *p), void *ctx)
{
    parts_args a = {round_id, fn, ctx, 0};
    int rc = sl__pg_tx((sl__pg *)(void *)s, 1, SL__PG_TIMEOUT_MS, parts_exec, &a);
    return rc == SL_OK ? a.stop : rc;
}
