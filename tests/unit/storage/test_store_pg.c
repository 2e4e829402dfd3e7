/*
 * The store's PostgreSQL backend, opened by a postgresql:// URI: against a real
 * throwaway cluster (tests/support/sl_pg.h; skipped, naming why, where
 * PostgreSQL is not installed). The schema migrates to the SQLite store's
 * version with the same tables and columns; a second open changes nothing;
 * replicas opening at once migrate once; a newer database is refused and
 * left alone; a bad connection string is a clear error; what was committed
 * survives a crash of the server; an SQLite store migrates into an empty
 * one (and only an empty one); lost connections and a restarted primary are
 * retried transparently; one update sent to four replicas at once is stored
 * once; serialization failures under SERIALIZABLE are run again. The store's operations themselves:
 * `test_store pg`.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "../../support/sl_pg.h"
#include "../../support/sl_store_test.h"
#include "pg/pg_int.h"

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
                                  "('frame', 'sha256', 'data', 'public_key', 'secret', 'devices')"),
                     11);
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
                     18);
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

/* A database of the cluster, new, as the store's URI in @uri. */
static void fresh_db(const char *name, char *uri, size_t cap)
{
    char sql[128];
    PGconn *c = connect_db("postgres");
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    exec_ok(c, sql);
    PQfinish(c);
    conninfo_of(name, uri, cap);
}

static int digest_of(void *ctx, int64_t device_id, const void *frame, size_t len,
                     uint32_t num_samples, const uint8_t *sha256)
{
    uint8_t *all = ctx;
    (void)frame, (void)len, (void)num_samples;
    memcpy(all + 32 * (device_id - 1), sha256, 32);
    return 0;
}

/* `starling store migrate`: every row with its id; the new store goes on where the old one
 * stopped (a half-sent upload finishes, new rows take fresh ids); a non-empty target is
 * refused and left as it was. */
static void test_migrate_from_sqlite(void **state)
{
    char dir[512], path[600], uri[400], err[600] = "";
    uint8_t frame[600], sha[32], want[32 * 3], got[32 * 3];
    sl_store *s;
    sl_upload_record up = {0};
    sl_store_receipt rc1;
    sl_model_put m = {0};
    sl_model_record mr;
    int64_t round_id, devices[3], task = 0, dev4 = 0;
    uint64_t rows = 0, n = 0, off = 0;
    (void)state;
    NEED_PG();
    sl_test_mkdtemp(dir, sizeof dir, "store_migrate");
    s = sl_test_store_open(dir, NULL, NULL);
    assert_non_null(s);
    sl_test_store_fixture(s, &round_id, devices, 3);
    m.task_id = 1;
    m.version = 1;
    m.frame = "initial model";
    m.frame_len = 13;
    m.sha256 = sha;
    assert_int_equal(sl_store_put_model(s, &m), SL_OK);
    for (int i = 0; i < 2; i++) {
        sl_update_put u = {round_id, devices[i], frame, sizeof frame, 10, sha, 0};
        sl_test_update_bytes((uint64_t)i, frame, sizeof frame, sha);
        memcpy(want + 32 * i, sha, 32);
        assert_int_equal(sl_store_put_update(s, &u, 5000, &rc1), SL_OK);
    }
    /* the third device is half-way through a resumable upload */
    sl_test_update_bytes(2, frame, sizeof frame, sha);
    memcpy(want + 64, sha, 32);
    snprintf(up.id, sizeof up.id, "half-way");
    up.device_id = devices[2];
    up.round_id = round_id;
    up.length = sizeof frame;
    memcpy(up.sha256, sha, 32);
    up.num_samples = 10;
    up.expires_at_ms = sl_clock_wall_ns(NULL) / 1000000 + 3600000;
    assert_int_equal(sl_store_create_upload(s, &up), SL_OK);
    assert_int_equal(sl_store_append_upload(s, "half-way", 0, frame, 200, 5000, &off), SL_OK);
    assert_int_equal(sl_store_audit(s, "op", "test", "before"), SL_OK);
    sl_store_close(s);
    snprintf(path, sizeof path, "%s/store.db", dir);

    fresh_db("migrated", uri, sizeof uri);
    if (sl_store_migrate(path, uri, &rows, err, sizeof err) != SL_OK)
        fail_msg("migrate: %s", err);
    assert_true(rows >= 10);
    assert_int_equal(pg_open(uri, &s, err, sizeof err), SL_OK);
    assert_string_equal(sl_store_backend(s), "postgresql");
    assert_int_equal(sl_store_get_model(s, 1, 1, &mr), SL_OK);
    assert_memory_equal(mr.frame, "initial model", 13);
    sl_store_model_free(&mr);
    assert_int_equal(sl_store_count_updates(s, round_id, &n), SL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sl_store_append_upload(s, "half-way", 200, frame + 200, 400, 5000, &off),
                     SL_OK);
    assert_int_equal(sl_store_finish_upload(s, "half-way", 5000, &rc1), SL_OK);
    memset(got, 0, sizeof got);
    assert_int_equal(sl_store_foreach_update(s, round_id, digest_of, got), SL_OK);
    assert_memory_equal(got, want, sizeof want); /* device ids kept: 1, 2, 3 */
    /* new rows after the copied ids */
    assert_int_equal(sl_store_create_task(s, "second", "{}", "w 1\n", &task), SL_OK);
    assert_int_equal(task, 2);
    assert_int_equal(sl_store_enrol_device(s, (const uint8_t *)"new key", 7, "{}", &dev4), SL_OK);
    assert_int_equal(dev4, 4);
    assert_int_equal(sl_store_count_audit(s, &n), SL_OK);
    assert_int_equal(n, 1);
    sl_store_close(s);

    /* into a store that has rows: refused, nothing copied */
    rows = 0;
    assert_int_equal(sl_store_migrate(path, uri, &rows, err, sizeof err), SL_EEXIST);
    assert_non_null(strstr(err, "not empty"));
    {
        PGconn *c = connect_db("migrated");
        assert_int_equal(query_int(c, "SELECT count(*) FROM tasks"), 2);
        PQfinish(c);
    }
    assert_int_equal(sl_store_migrate(uri, path, &rows, err, sizeof err), SL_EINVAL);
    sl_test_rmtree(dir);
}

/* The server drops the store's connections (an administrator, a failover of the primary)
 * and then restarts: the store reconnects and the calls succeed; nothing is lost. */
static void test_connection_lost(void **state)
{
    char uri[400], err[300];
    sl_store *s;
    int64_t round_id, devices[2];
    uint8_t frame[100], sha[32];
    sl_store_receipt r1, r2;
    uint64_t n = 0;
    PGconn *c;
    (void)state;
    NEED_PG();
    fresh_db("dropped", uri, sizeof uri);
    assert_int_equal(pg_open(uri, &s, err, sizeof err), SL_OK);
    sl_test_store_fixture(s, &round_id, devices, 2);
    c = connect_db("postgres");
    exec_ok(c, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
               "'dropped' AND pid <> pg_backend_pid()");
    PQfinish(c);
    sl_test_update_bytes(1, frame, sizeof frame, sha);
    {
        sl_update_put u = {round_id, devices[0], frame, sizeof frame, 5, sha, 0};
        assert_int_equal(sl_store_put_update(s, &u, 10000, &r1), SL_OK);
        assert_int_equal(r1.duplicate, 0);
        /* the primary restarts (fast: connections close): the retry gets the receipt */
        assert_int_equal(sl_test_pg_restart(&g_pg, 0), 0);
        assert_int_equal(sl_store_put_update(s, &u, 10000, &r2), SL_OK);
        assert_int_equal(r2.duplicate, 1);
        assert_int_equal(r2.update_id, r1.update_id);
    }
    assert_int_equal(sl_store_count_updates(s, round_id, &n), SL_OK);
    assert_int_equal(n, 1);
    sl_store_close(s);
}

typedef struct racer {
    const char *uri;
    const sl_update_put *u;
    sl_store_receipt receipt;
    int rc;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    char err[300];
    sl_store *s = NULL;
    r->rc = pg_open(r->uri, &s, err, sizeof err);
    if (r->rc == SL_OK)
        r->rc = sl_store_put_update(s, r->u, 10000, &r->receipt);
    sl_store_close(s);
    return NULL;
}

/* One update retried to four replicas at once: stored once, one original receipt, three
 * duplicates of it. */
static void test_same_update_four_replicas(void **state)
{
    char uri[400], err[300];
    sl_store *s;
    int64_t round_id, devices[1];
    uint8_t frame[100], sha[32];
    racer r[4];
    pthread_t th[4];
    int originals = 0;
    uint64_t n = 0;
    (void)state;
    NEED_PG();
    fresh_db("raced", uri, sizeof uri);
    assert_int_equal(pg_open(uri, &s, err, sizeof err), SL_OK);
    sl_test_store_fixture(s, &round_id, devices, 1);
    sl_test_update_bytes(3, frame, sizeof frame, sha);
    {
        sl_update_put u = {round_id, devices[0], frame, sizeof frame, 5, sha, 0};
        for (int i = 0; i < 4; i++) {
            r[i].uri = uri;
            r[i].u = &u;
            pthread_create(&th[i], NULL, race, &r[i]);
        }
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].rc, SL_OK);
        assert_int_equal(r[i].receipt.update_id, r[0].receipt.update_id);
        originals += !r[i].receipt.duplicate;
    }
    assert_int_equal(originals, 1);
    assert_int_equal(sl_store_count_updates(s, round_id, &n), SL_OK);
    assert_int_equal(n, 1);
    sl_store_close(s);
}

typedef struct contender {
    const char *uri;
    int64_t task, round_id, device;
    int ok, calls;
    uint64_t retries;
} contender;

static void *contend(void *arg)
{
    contender *c = arg;
    char err[300];
    sl_store *s = NULL;
    if (pg_open(c->uri, &s, err, sizeof err) != SL_OK)
        return NULL;
    for (int k = 0; k < 40; k++) {
        c->calls += 2;
        c->ok += sl_store_put_checkin(s, c->task, c->device) == SL_OK;
        c->ok += sl_store_set_participant(s, c->round_id, c->device, SL_PART_TRAINING, "") == SL_OK;
    }
    c->retries = ((sl__pg *)(void *)s)->retries;
    sl_store_close(s);
    return NULL;
}

/* Under SERIALIZABLE (an operator's default_transaction_isolation), replicas writing the same
 * rows at once get serialization failures: the store runs those transactions again, and
 * every call succeeds. */
static void test_serialization_failures_retried(void **state)
{
    char uri[400], err[300];
    sl_store *s;
    int64_t round_id, devices[1];
    sl_round_record r;
    contender c[4];
    pthread_t th[4];
    uint64_t retries = 0;
    PGconn *pc;
    (void)state;
    NEED_PG();
    fresh_db("serial", uri, sizeof uri);
    assert_int_equal(pg_open(uri, &s, err, sizeof err), SL_OK);
    sl_test_store_fixture(s, &round_id, devices, 1);
    assert_int_equal(sl_store_get_round(s, round_id, &r), SL_OK);
    sl_store_close(s);
    pc = connect_db("postgres");
    exec_ok(pc, "ALTER DATABASE serial SET default_transaction_isolation = 'serializable'");
    PQfinish(pc);
    for (int i = 0; i < 4; i++) {
        c[i] = (contender){uri, r.task_id, round_id, devices[0], 0, 0, 0};
        pthread_create(&th[i], NULL, contend, &c[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(c[i].ok, c[i].calls);
        assert_int_equal(c[i].calls, 80);
        retries += c[i].retries;
    }
    print_message("%llu transactions retried after serialization failures\n",
                  (unsigned long long)retries);
    assert_true(retries > 0); /* the contention was real */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_like_sqlite),
        cmocka_unit_test(test_replicas_migrate_once),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_server_crash),
        cmocka_unit_test(test_migrate_from_sqlite),
        cmocka_unit_test(test_connection_lost),
        cmocka_unit_test(test_same_update_four_replicas),
        cmocka_unit_test(test_serialization_failures_retried),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
