/*
 * The store's PostgreSQL backend, opened by a postgresql:// URI: against a real
 * throwaway cluster (tests/support/sl_pg.h; skipped, naming why, where
 * PostgreSQL is not installed). The schema migrates to the SQLite store's
 * version with the same tables and columns; a second open changes nothing;
 * replicas opening at once migrate once; a newer database is refused and
 * left alone; a bad connection string is a clear error; what was committed
 * survives a crash of the server.
 */
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "../../support/sl_pg.h"
#include "../../support/sl_store_test.h"

static sl_test_pg g_pg;
static int g_skip;
static char g_why[300];

static int setup(void **state)
{
    (void)state;
    if (sl_test_pg_start(&g_pg, g_why, sizeof g_why) != 0)
        g_skip = 1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_pg_stop(&g_pg);
    return 0;
}

#define NEED_PG()                                              \
    do {                                                       \
        if (g_skip) {                                          \
            print_message("PostgreSQL: %s: skipped\n", g_why); \
            skip();                                            \
        }                                                      \
    } while (0)

static PGconn *connect_db(const char *db)
{
    char ci[400];
    PGconn *c;
    snprintf(ci, sizeof ci, "host=%s user=starling dbname=%s", g_pg.dir, db);
    c = PQconnectdb(ci);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect %s: %s", db, PQerrorMessage(c));
    return c;
}

static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static long long query_int(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long long v;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* The store's URI of database @db of the test cluster (its Unix socket). */
static void conninfo_of(const char *db, char *out, size_t cap)
{
    snprintf(out, cap, "postgresql://starling@/%s?host=%s", db, g_pg.dir);
}

static int pg_open(const char *uri, sl_store **out, char *err, size_t cap)
{
    sl_store_options o;
    sl_store_options_default(&o);
    o.path = uri;
    return sl_store_open(&o, out, err, cap);
}

/* "table.column" lines, sorted, of the SQLite store's schema and of the PostgreSQL one. */
static char *sqlite_columns(void)
{
    char dir[512], path[600], *out = calloc(1, 1 << 16);
    sqlite3 *db;
    sqlite3_stmt *st;
    sl_store *s;
    size_t n = 0;
    sl_test_mkdtemp(dir, sizeof dir, "store_pg_schema");
    s = sl_test_store_open(dir, NULL, NULL);
    assert_non_null(s);
    sl_store_close(s);
    snprintf(path, sizeof path, "%s/store.db", dir);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT m.name || '.' || p.name FROM sqlite_schema m, "
                                        "pragma_table_info(m.name) p WHERE m.type = 'table' "
                                        "ORDER BY 1",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
        n += (size_t)snprintf(out + n, (1 << 16) - n, "%s\n", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    sl_test_rmtree(dir);
    return out;
}

static char *pg_columns(PGconn *c)
{
    PGresult *r = PQexec(c, "SELECT table_name || '.' || column_name FROM "
                            "information_schema.columns WHERE table_schema = 'public' "
                            "ORDER BY (table_name || '.' || column_name) COLLATE \"C\"");
    char *out = calloc(1, 1 << 16);
    size_t n = 0;
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    for (int i = 0; i < PQntuples(r); i++)
        n += (size_t)snprintf(out + n, (1 << 16) - n, "%s\n", PQgetvalue(r, i, 0));
    PQclear(r);
    return out;
}

static void test_migrate_like_sqlite(void **state)
{
    char ci[400], err[300] = "";
    sl_store *s = NULL;
    PGconn *c;
    char *want, *got;
    int v = 0;
    (void)state;
    NEED_PG();
    c = connect_db("postgres");
    exec_ok(c, "CREATE DATABASE schema_test");
    PQfinish(c);
    conninfo_of("schema_test", ci, sizeof ci);
    if (pg_open(ci, &s, err, sizeof err) != SL_OK)
        fail_msg("open: %s", err);
    assert_int_equal(sl_store_schema_version(s, &v), SL_OK);
    assert_int_equal(v, SL_STORE_SCHEMA_VERSION);
    sl_store_close(s);
    /* the same tables and columns as the SQLite store at its version */
    c = connect_db("schema_test");
    want = sqlite_columns();
    got = pg_columns(c);
    if (strcmp(want, got) != 0)
        fail_msg("SQLite's columns:\n%s\nPostgreSQL's:\n%s", want, got);
    free(want);
    free(got);
    /* blobs are bytea, a digest must be 32 bytes, "offset" is a column */
    assert_int_equal(query_int(c, "SELECT count(*) FROM information_schema.columns WHERE "
                                  "table_schema = 'public' AND data_type = 'bytea' AND "
                                  "column_name IN "
                                  "('frame', 'sha256', 'data', 'public_key', 'secret')"),
                     8);
    {
        PGresult *r = PQexec(c, "INSERT INTO session_secrets VALUES (1, '\\x00', 0)");
        assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
        assert_non_null(strstr(PQresultErrorMessage(r), "check"));
        PQclear(r);
    }
    /* a second open is a no-op */
    exec_ok(c, "INSERT INTO tasks (name, config, layout, created_at) VALUES ('t', '{}', 'w 1', 1)");
    if (pg_open(ci, &s, err, sizeof err) != SL_OK)
        fail_msg("reopen: %s", err);
    sl_store_close(s);
    assert_int_equal(query_int(c, "SELECT count(*) FROM tasks"), 1);
    assert_int_equal(query_int(c, "SELECT version FROM schema_version"), SL_STORE_SCHEMA_VERSION);
    PQfinish(c);
}

/* Four replicas open a fresh database at once: each step runs once, all open. */
static void test_replicas_migrate_once(void **state)
{
    char ci[400];
    pid_t pids[4];
    PGconn *c;
    (void)state;
    NEED_PG();
    c = connect_db("postgres");
    exec_ok(c, "CREATE DATABASE race_test");
    PQfinish(c);
    conninfo_of("race_test", ci, sizeof ci);
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char err[300] = "";
            sl_store *s = NULL;
            int rc = pg_open(ci, &s, err, sizeof err);
            if (rc != SL_OK)
                fprintf(stderr, "replica %d: %s\n", i, err);
            sl_store_close(s);
            _exit(rc == SL_OK ? 0 : 1);
        }
    }
    for (int i = 0; i < 4; i++) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    c = connect_db("race_test");
    assert_int_equal(query_int(c, "SELECT count(*) FROM schema_version"), 1);
    assert_int_equal(query_int(c, "SELECT version FROM schema_version"), SL_STORE_SCHEMA_VERSION);
    assert_int_equal(query_int(c, "SELECT count(*) FROM information_schema.tables WHERE "
                                  "table_schema = 'public'"),
                     14);
    PQfinish(c);
}

/* A newer database is refused and left alone; a bad connection string is a clear error. */
static void test_refusals(void **state)
{
    char ci[400], err[300] = "";
    sl_store *s = (sl_store *)0x1;
    PGconn *c;
    (void)state;
    NEED_PG();
    c = connect_db("postgres");
    exec_ok(c, "CREATE DATABASE newer_test");
    PQfinish(c);
    conninfo_of("newer_test", ci, sizeof ci);
    assert_int_equal(pg_open(ci, &s, err, sizeof err), SL_OK);
    sl_store_close(s);
    c = connect_db("newer_test");
    exec_ok(c, "UPDATE schema_version SET version = 99");
    s = (sl_store *)0x1;
    assert_int_equal(pg_open(ci, &s, err, sizeof err), SL_EVERSION);
    assert_null(s);
    assert_non_null(strstr(err, "schema version 99, newer than this build's"));
    assert_null(strchr(err, '\n'));
    assert_int_equal(query_int(c, "SELECT version FROM schema_version"), 99);
    PQfinish(c);

    conninfo_of("no_such_db", ci, sizeof ci);
    assert_int_equal(pg_open(ci, &s, err, sizeof err), SL_EIO);
    assert_non_null(strstr(err, "cannot connect to PostgreSQL"));
    assert_non_null(strstr(err, "no_such_db"));
    assert_int_equal(pg_open("postgresql:///x?host=/nonexistent", &s, err, sizeof err), SL_EIO);
    assert_int_equal(pg_open(NULL, &s, err, sizeof err), SL_EINVAL);
}

/* What was committed survives an immediate stop of the server (a crash), and the store opens. */
static void test_server_crash(void **state)
{
    char ci[400], err[300] = "";
    sl_store *s = NULL;
    PGconn *c;
    (void)state;
    NEED_PG();
    c = connect_db("postgres");
    exec_ok(c, "CREATE DATABASE crash_test");
    PQfinish(c);
    conninfo_of("crash_test", ci, sizeof ci);
    assert_int_equal(pg_open(ci, &s, err, sizeof err), SL_OK);
    sl_store_close(s);
    c = connect_db("crash_test");
    exec_ok(c, "INSERT INTO tasks (name, config, layout, created_at) VALUES ('kept', '{}', "
               "'w 1', 1)");
    PQfinish(c);
    assert_int_equal(sl_test_pg_restart(&g_pg, 1), 0);
    if (pg_open(ci, &s, err, sizeof err) != SL_OK)
        fail_msg("open after the crash: %s", err);
    sl_store_close(s);
    c = connect_db("crash_test");
    assert_int_equal(query_int(c, "SELECT count(*) FROM tasks WHERE name = 'kept'"), 1);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_like_sqlite),
        cmocka_unit_test(test_replicas_migrate_once),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_server_crash),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
