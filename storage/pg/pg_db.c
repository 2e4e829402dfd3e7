/*
 * pg_db.c - the PostgreSQL backend's connections, transactions with
 * retries, parameters and column readers: the bottom of its layers
 * (pg_int.h); pg_store.c opens and closes the store.
 */
#include <endian.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pg_int.h"

/* ---- parameters ---------------------------------------------------------- */

void sl__pgq_int(sl__pgq *q, int64_t v)
{
    snprintf(q->num[q->n], sizeof q->num[q->n], "%" PRId64, v);
    q->val[q->n] = q->num[q->n];
    q->len[q->n] = 0;
    q->fmt[q->n] = 0;
    q->n++;
}

void sl__pgq_double(sl__pgq *q, double v)
{
    if (isnan(v)) {
        sl__pgq_text(q, NULL);
        return;
    }
    /* 17 significant digits: the text round-trips to the same double */
    snprintf(q->num[q->n], sizeof q->num[q->n], "%.17g", v);
    q->val[q->n] = q->num[q->n];
    q->len[q->n] = 0;
    q->fmt[q->n] = 0;
    q->n++;
}

void sl__pgq_text(sl__pgq *q, const char *t)
{
    q->val[q->n] = t;
    q->len[q->n] = 0;
    q->fmt[q->n] = 0;
    q->n++;
}

void sl__pgq_bytes(sl__pgq *q, const void *ptr, size_t n)
{
    /* a zero-length binary parameter must not be NULL: NULL means SQL NULL */
    q->val[q->n] = n > 0 ? ptr : "";
    q->len[q->n] = (int)n;
    q->fmt[q->n] = 1;
    q->n++;
}

/* ---- statements and errors ----------------------------------------------- */

/* Set by sl__pg_exec() when a statement hit a unique violation (SQLSTATE 23505):
 * sl__pg_tx() then tells a race between replicas inserting the same row (run
 * again: the next attempt reads the winner's row) from a conflict its body
 * decided on. Per thread: a transaction runs on its caller's thread. */
/* initial-exec: no call into the dynamic loader (__tls_get_addr) for a flag of this library */
static _Thread_local int tl_unique_violation __attribute__((tls_model("initial-exec")));

int sl__pg_status(PGconn *c, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (PQstatus(c) != CONNECTION_OK || state == NULL)
        return SL_EBUSY; /* the connection broke: sl__pg_tx() reconnects and retries */
    if (strcmp(state, "23505") == 0)
        return SL_ECONFLICT;
    if (strcmp(state, "23503") == 0)
        return SL_ENOENT;
    if (strcmp(state, "53100") == 0)
        return SL_ENOSPC;
    if (strcmp(state, "57014") == 0)
        return SL_ETIMEDOUT;
    if (strncmp(state, "22", 2) == 0)
        return SL_EINVAL;
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
        strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0)
        return SL_EBUSY;
    return SL_EIO;
}

int sl__pg_exec(PGconn *c, const char *sql, const sl__pgq *q, PGresult **out)
{
    PGresult *r;
    ExecStatusType st;
    if (out != NULL)
        *out = NULL;
    if (q == NULL || q->n == 0)
        r = PQexecParams(c, sql, 0, NULL, NULL, NULL, NULL, 1);
    else
        r = PQexecParams(c, sql, q->n, NULL, q->val, q->len, q->fmt, 1);
    st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        int rc = sl__pg_status(c, r);
        if (rc == SL_ECONFLICT)
            tl_unique_violation = 1;
        PQclear(r);
        return rc;
    }
    if (out != NULL)
        *out = r;
    else
        PQclear(r);
    return SL_OK;
}

int sl__pg_script(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? SL_OK : sl__pg_status(c, r);
    PQclear(r);
    return rc;
}

/* ---- column readers ------------------------------------------------------ */

int sl__pg_isnull(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col);
}

int64_t sl__pg_int(const PGresult *r, int row, int col)
{
    const char *v = PQgetvalue(r, row, col);
    uint64_t u8;
    uint32_t u4;
    uint16_t u2;
    if (PQgetisnull(r, row, col))
        return 0;
    switch (PQgetlength(r, row, col)) {
    case 8:
        memcpy(&u8, v, 8);
        return (int64_t)be64toh(u8);
    case 4:
        memcpy(&u4, v, 4);
        return (int32_t)be32toh(u4);
    case 2:
        memcpy(&u2, v, 2);
        return (int16_t)be16toh(u2);
    default:
        return 0;
    }
}

double sl__pg_double(const PGresult *r, int row, int col)
{
    uint64_t u;
    double d;
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
        return NAN;
    memcpy(&u, PQgetvalue(r, row, col), 8);
    u = be64toh(u);
    memcpy(&d, &u, 8);
    return d;
}

void sl__pg_copy_text(const PGresult *r, int row, int col, char *dst, size_t cap)
{
    size_t n = PQgetisnull(r, row, col) ? 0 : (size_t)PQgetlength(r, row, col);
    if (cap == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(dst, PQgetvalue(r, row, col), n);
    dst[n] = '\0';
}

int sl__pg_dup_text(const PGresult *r, int row, int col, char **out)
{
    size_t n;
    char *copy;
    *out = NULL;
    if (PQgetisnull(r, row, col))
        return SL_OK;
    n = (size_t)PQgetlength(r, row, col);
    copy = malloc(n + 1);
    if (copy == NULL)
        return SL_ENOMEM;
    memcpy(copy, PQgetvalue(r, row, col), n);
    copy[n] = '\0';
    *out = copy;
    return SL_OK;
}

int sl__pg_dup_bytes(const PGresult *r, int row, int col, void **out, size_t *len)
{
    size_t n;
    void *copy;
    *out = NULL;
    *len = 0;
    if (PQgetisnull(r, row, col))
        return SL_OK;
    n = (size_t)PQgetlength(r, row, col);
    copy = malloc(n ? n : 1);
    if (copy == NULL)
        return SL_ENOMEM;
    memcpy(copy, PQgetvalue(r, row, col), n);
    *out = copy;
    *len = n;
    return SL_OK;
}

uint64_t sl__pg_changes(const PGresult *r)
{
    const char *t = PQcmdTuples((PGresult *)r);
    return t != NULL && t[0] != '\0' ? strtoull(t, NULL, 10) : 0;
}

int64_t sl__pg_now_ms(const sl__pg *p)
{
    return sl_clock_wall_ns(p->opt.clock) / 1000000;
}

/* ---- the pool ------------------------------------------------------------ */

/* A connection with our session settings; NULL with @err when it cannot be made. */
PGconn *sl__pg_connect(const char *conninfo, char *err, size_t cap)
{
    PGconn *c = PQconnectdb(conninfo);
    if (c == NULL || PQstatus(c) != CONNECTION_OK) {
        snprintf(err, cap, "cannot connect to PostgreSQL: %s",
                 c ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        return NULL;
    }
    /* quiet NOTICEs; an acknowledged write is flushed on the primary (and on synchronous
     * standbys, when the server has them) before COMMIT returns */
    if (sl__pg_script(c, "SET client_min_messages = warning; SET synchronous_commit = on") !=
        SL_OK) {
        snprintf(err, cap, "PostgreSQL session settings: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

static int pool_get(sl__pg *p, int64_t deadline_ms, sl__pgconn **out)
{
    struct timespec until;
    int rc = SL_OK;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(deadline_ms / 1000);
    until.tv_nsec += (long)(deadline_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->lock);
    for (;;) {
        for (uint32_t i = 0; i < p->nconns; i++) {
            if (!p->conns[i].in_use) {
                p->conns[i].in_use = 1;
                *out = &p->conns[i];
                pthread_mutex_unlock(&p->lock);
                return SL_OK;
            }
        }
        if (pthread_cond_timedwait(&p->free_c, &p->lock, &until) != 0) {
            rc = SL_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void pool_put(sl__pg *p, sl__pgconn *pc)
{
    pthread_mutex_lock(&p->lock);
    pc->in_use = 0;
    pthread_cond_signal(&p->free_c);
    pthread_mutex_unlock(&p->lock);
}

/* A usable connection in @pc: reconnect when the old one broke (server restart, failover). */
static int healthy(sl__pg *p, sl__pgconn *pc)
{
    char err[256];
    if (pc->conn != NULL && PQstatus(pc->conn) == CONNECTION_OK &&
        PQtransactionStatus(pc->conn) == PQTRANS_IDLE)
        return SL_OK;
    PQfinish(pc->conn);
    pc->conn = sl__pg_connect(p->conninfo, err, sizeof err);
    return pc->conn != NULL ? SL_OK : SL_EBUSY;
}

static int64_t mono_ms(void)
{
    return sl_clock_monotonic_ns(NULL) / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int sl__pg_tx(sl__pg *p, int readonly, int64_t timeout_ms, sl__pg_fn fn, void *arg)
{
    int64_t start = mono_ms(), backoff = 5;
    int unique_retries = 0;
    sl__pgconn *pc;
    int rc;

    if (timeout_ms <= 0)
        timeout_ms = SL__PG_TIMEOUT_MS;
    rc = pool_get(p, timeout_ms, &pc);
    if (rc != SL_OK)
        return rc;
    for (;;) {
        tl_unique_violation = 0;
        rc = healthy(p, pc);
        if (rc == SL_OK)
            rc = sl__pg_exec(pc->conn,
                             readonly ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN",
                             NULL, NULL);
        if (rc == SL_OK)
            rc = fn(p, pc->conn, arg);
        /* a read-only transaction has read all it needed when its body returns (list bodies
         * have handed rows to their callers): a COMMIT lost with the connection changes
         * nothing, and running the body again would hand the rows out twice */
        if (rc == SL_OK && !readonly)
            rc = sl__pg_exec(pc->conn, "COMMIT", NULL, NULL);
        else if (rc == SL_OK)
            (void)sl__pg_exec(pc->conn, "COMMIT", NULL, NULL);
        else if (pc->conn != NULL && PQstatus(pc->conn) == CONNECTION_OK)
            (void)sl__pg_exec(pc->conn, "ROLLBACK", NULL, NULL);
        /* a broken connection, a serialization failure or deadlock, or two replicas inserting
         * the same idempotent row at once: run the whole transaction again */
        if (rc == SL_ECONFLICT && tl_unique_violation && unique_retries < 3)
            unique_retries++;
        else if (rc != SL_EBUSY)
            break;
        if (mono_ms() - start + backoff > timeout_ms) {
            rc = SL_ETIMEDOUT;
            break;
        }
        pthread_mutex_lock(&p->lock);
        p->retries++;
        pthread_mutex_unlock(&p->lock);
        sleep_ms(backoff);
        backoff = backoff < 1000 ? backoff * 2 : 1000;
    }
    pool_put(p, pc);
    return rc;
}
