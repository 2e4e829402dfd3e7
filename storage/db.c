/* db.c - connections, statement cache, reader pool and column helpers: the bottom of the
 * SQLite backend's layers (store_int.h); sqlite.c opens and closes the store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int sl__status_from_sqlite(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return SL_OK;
    case SQLITE_NOMEM:
        return SL_ENOMEM;
    case SQLITE_FULL:
        return SL_ENOSPC;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return SL_EBUSY;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return SL_ECORRUPT;
    case SQLITE_CONSTRAINT:
        return SL_ECONFLICT;
    case SQLITE_CANTOPEN:
        return SL_ENOENT;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
        return SL_EPERM;
    case SQLITE_TOOBIG:
        return SL_ETOOBIG;
    case SQLITE_RANGE:
    case SQLITE_MISUSE:
        return SL_EINVAL;
    default:
        return SL_EIO;
    }
}

int64_t sl__now_ms(const sl_store *s)
{
    return sl_clock_wall_ns(s->opt.clock) / 1000000;
}

int sl__exec(sl__conn *c, const char *sql)
{
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return sl__status_from_sqlite(rc);
}

int sl__stmt(sl__conn *c, const char *sql, sqlite3_stmt **out)
{
    sqlite3_stmt *st;
    int rc;
    for (size_t i = 0; i < c->nstmt; i++) {
        if (c->cache[i].sql == sql) {
            sqlite3_reset(c->cache[i].stmt);
            sqlite3_clear_bindings(c->cache[i].stmt);
            *out = c->cache[i].stmt;
            return SL_OK;
        }
    }
    rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK)
        return sl__status_from_sqlite(rc);
    if (c->nstmt < SL__STMT_CACHE) {
        c->cache[c->nstmt].sql = sql;
        c->cache[c->nstmt].stmt = st;
        c->nstmt++;
    } else {
        /* more distinct statements than slots is a programming error: keep working */
        sqlite3_finalize(c->cache[SL__STMT_CACHE - 1].stmt);
        c->cache[SL__STMT_CACHE - 1].sql = sql;
        c->cache[SL__STMT_CACHE - 1].stmt = st;
    }
    *out = st;
    return SL_OK;
}

static int wal_hook(void *ctx, sqlite3 *db, const char *name, int pages)
{
    sl_store *s = ctx;
    (void)db;
    (void)name;
    s->wal_pages = (uint64_t)pages;
    return SQLITE_OK;
}

int sl__conn_open(sl_store *s, sl__conn *c, int readonly)
{
    int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                SQLITE_OPEN_NOMUTEX;
    int rc;

    memset(c, 0, sizeof *c);
    rc = sqlite3_open_v2(s->path, &c->db, flags, s->opt.vfs);
    if (rc != SQLITE_OK) {
        rc = sl__status_from_sqlite(rc);
        sqlite3_close_v2(c->db);
        c->db = NULL;
        return rc;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, (int)s->opt.busy_timeout_ms);
    rc = sl__exec(c, "PRAGMA foreign_keys = ON");
    if (rc == SL_OK && !readonly) {
        /* the acknowledgement path: a commit returns after the fsync */
        rc = sl__exec(c, "PRAGMA journal_mode = WAL");
        if (rc == SL_OK)
            rc = sl__exec(c, "PRAGMA synchronous = FULL");
        /* checkpoints are the writer's decision (writer.c), never a side effect */
        if (rc == SL_OK)
            rc = sl__exec(c, "PRAGMA wal_autocheckpoint = 0");
        if (rc == SL_OK)
            sqlite3_wal_hook(c->db, wal_hook, s);
    }
    if (rc != SL_OK) {
        sl__conn_close(c);
        return rc;
    }
    return SL_OK;
}

void sl__conn_close(sl__conn *c)
{
    for (size_t i = 0; i < c->nstmt; i++)
        sqlite3_finalize(c->cache[i].stmt);
    c->nstmt = 0;
    if (c->db != NULL)
        sqlite3_close_v2(c->db);
    c->db = NULL;
}

int sl__reader_get(sl_store *s, sl__conn **out)
{
    struct timespec until;
    int rc = SL_OK;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30; /* every wait has a deadline */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        for (uint32_t i = 0; i < s->nreaders; i++) {
            if (!s->readers[i].in_use) {
                s->readers[i].in_use = 1;
                *out = &s->readers[i];
                pthread_mutex_unlock(&s->lock);
                return SL_OK;
            }
        }
        if (pthread_cond_timedwait(&s->free_rd, &s->lock, &until) != 0) {
            rc = SL_EBUSY;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void sl__reader_put(sl_store *s, sl__conn *c)
{
    pthread_mutex_lock(&s->lock);
    c->in_use = 0;
    pthread_cond_signal(&s->free_rd);
    pthread_mutex_unlock(&s->lock);
}

void sl__copy_text(sqlite3_stmt *st, int col, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    size_t n = t ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (cap == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    if (n > 0)
        memcpy(dst, t, n);
    dst[n] = '\0';
}

int sl__dup_text(sqlite3_stmt *st, int col, char **out)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    size_t n;
    char *copy;
    if (t == NULL) {
        *out = NULL;
        return sqlite3_errcode(sqlite3_db_handle(st)) == SQLITE_NOMEM ? SL_ENOMEM : SL_OK;
    }
    n = (size_t)sqlite3_column_bytes(st, col);
    copy = malloc(n + 1);
    if (copy == NULL)
        return SL_ENOMEM;
    memcpy(copy, t, n);
    copy[n] = '\0';
    *out = copy;
    return SL_OK;
}

int sl__query_int64(sl_store *s, const char *sql, int nbind, int64_t arg, int64_t *out)
{
    sl__conn *c;
    sqlite3_stmt *st;
    int rc;
    if ((rc = sl__reader_get(s, &c)) != SL_OK)
        return rc;
    rc = sl__stmt(c, sql, &st);
    if (rc == SL_OK) {
        int step;
        if (nbind > 0)
            sqlite3_bind_int64(st, 1, arg);
        step = sqlite3_step(st);
        if (step == SQLITE_ROW)
            *out = sqlite3_column_int64(st, 0);
        rc = step == SQLITE_ROW ? SL_OK : sl__status_from_sqlite(step);
        sqlite3_reset(st);
    }
    sl__reader_put(s, c);
    return rc;
}
