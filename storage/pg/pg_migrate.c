/*
 * pg_migrate.c - sl_store_migrate(): copy an SQLite store into an empty
 * PostgreSQL one (a fleet outgrowing one host). Both sides are first
 * brought to this build's schema version, so their tables and columns are
 * the same (the PostgreSQL test compares them); every table is then copied
 * row for row, ids included, in one PostgreSQL transaction: the target
 * ends up with all of it or none of it. The identity sequences then resume
 * after the copied ids. The source is only read.
 */
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "pg_int.h"

/* Parents before children (foreign keys); "leader" is not copied: replicas elect anew. */
static const char *const tables[] = {
    "tasks",           "devices",  "model_versions", "rounds",          "round_participants",
    "updates",         "uploads",  "audit",          "device_refusals", "round_evals",
    "session_secrets", "sessions", "checkins",       "round_partials",  "device_pace",
    "round_downloads"};
/* Tables whose id is an identity column in PostgreSQL (a rowid in SQLite). */
static const char *const identities[] = {"tasks", "devices", "rounds", "updates", "audit"};

typedef struct migrate_args {
    sqlite3 *src;
    uint64_t rows;
    char *err;
    size_t cap;
} migrate_args;

/* Bind column @i of the SQLite row as the next parameter, as PostgreSQL takes it. */
static void bind_value(sl__pgq *q, sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        sl__pgq_int(q, sqlite3_column_int64(st, i));
        break;
    case SQLITE_FLOAT:
        sl__pgq_double(q, sqlite3_column_double(st, i));
        break;
    case SQLITE_TEXT:
        sl__pgq_text(q, (const char *)sqlite3_column_text(st, i));
        break;
    case SQLITE_BLOB:
        sl__pgq_bytes(q, sqlite3_column_blob(st, i), (size_t)sqlite3_column_bytes(st, i));
        break;
    default:
        sl__pgq_text(q, NULL);
        break;
    }
}

/* INSERT INTO @table ("c1", ...) VALUES ($1, ...) for the columns of @st. */
static int insert_sql(const char *table, sqlite3_stmt *st, char *sql, size_t cap)
{
    int n = sqlite3_column_count(st);
    size_t used = (size_t)snprintf(sql, cap, "INSERT INTO %s (", table);
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(sql + used, cap - used, "%s\"%s\"", i ? ", " : "",
                                 sqlite3_column_name(st, i));
    used += (size_t)snprintf(sql + used, cap - used, ") VALUES (");
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(sql + used, cap - used, "%s$%d", i ? ", " : "", i + 1);
    used += (size_t)snprintf(sql + used, cap - used, ")");
    return n <= SL__PG_MAXP && used < cap ? SL_OK : SL_ETOOBIG;
}

static int copy_table(PGconn *c, migrate_args *a, const char *table)
{
    char sql[2048];
    sqlite3_stmt *st = NULL;
    int rc, step;
    snprintf(sql, sizeof sql, "SELECT * FROM %s", table);
    if (sqlite3_prepare_v2(a->src, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(a->err, a->cap, "the SQLite store: %s", sqlite3_errmsg(a->src));
        return SL_ECORRUPT;
    }
    rc = insert_sql(table, st, sql, sizeof sql);
    while (rc == SL_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        sl__pgq q = {0};
        for (int i = 0; i < sqlite3_column_count(st); i++)
            bind_value(&q, st, i);
        rc = sl__pg_exec(c, sql, &q, NULL);
        if (rc != SL_OK)
            snprintf(a->err, a->cap, "copying %s: %s", table, PQerrorMessage(c));
        else
            a->rows++;
    }
    if (rc == SL_OK && step != SQLITE_DONE) {
        snprintf(a->err, a->cap, "reading %s: %s", table, sqlite3_errmsg(a->src));
        rc = SL_EIO;
    }
    sqlite3_finalize(st);
    return rc;
}

static int migrate_exec(sl__pg *p, PGconn *c, void *arg)
{
    migrate_args *a = arg;
    PGresult *r = NULL;
    int rc;
    char sql[256];
    (void)p;
    a->rows = 0;
    /* only into an empty store: never merge two fleets' ids */
    rc = sl__pg_exec(c,
                     "SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM devices) + "
                     "(SELECT count(*) FROM rounds) + (SELECT count(*) FROM audit)",
                     NULL, &r);
    if (rc == SL_OK && sl__pg_int(r, 0, 0) != 0) {
        snprintf(a->err, a->cap,
                 "the PostgreSQL store is not empty (it has tasks, devices, rounds or audit "
                 "rows): migrate into a new database");
        rc = SL_EEXIST;
    }
    PQclear(r);
    for (size_t i = 0; rc == SL_OK && i < sizeof tables / sizeof tables[0]; i++)
        rc = copy_table(c, a, tables[i]);
    /* SQLite reserves an upload's whole length up front; here the bytes end at the offset */
    if (rc == SL_OK)
        rc = sl__pg_exec(c, "UPDATE uploads SET data = substring(data FROM 1 FOR \"offset\"::int)",
                         NULL, NULL);
    for (size_t i = 0; rc == SL_OK && i < sizeof identities / sizeof identities[0]; i++) {
        snprintf(sql, sizeof sql,
                 "SELECT setval(pg_get_serial_sequence('%s', 'id'), "
                 "coalesce((SELECT max(id) FROM %s), 0) + 1, false)",
                 identities[i], identities[i]);
        rc = sl__pg_exec(c, sql, NULL, NULL);
    }
    return rc;
}

int sl__pg_migrate_from(const char *from_path, sl_store *to, uint64_t *rows, char *err,
                        size_t errcap)
{
    migrate_args a = {NULL, 0, err, errcap};
    int rc;
    if (sqlite3_open_v2(from_path, &a.src, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(err, errcap, "%s: %s", from_path, sqlite3_errmsg(a.src));
        sqlite3_close(a.src);
        return SL_EIO;
    }
    /* the source's tables stay as they are while it is read */
    rc = sqlite3_exec(a.src, "BEGIN", NULL, NULL, NULL) == SQLITE_OK ? SL_OK : SL_EBUSY;
    if (rc == SL_OK)
        rc = sl__pg_tx((sl__pg *)(void *)to, 0, 24 * 3600 * 1000LL, migrate_exec, &a);
    sqlite3_close(a.src);
    if (rc == SL_OK && rows != NULL)
        *rows = a.rows;
    return rc;
}
