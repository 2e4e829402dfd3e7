/*
 * The SQLite spool: the example tables of starling/spool.h, run from the
 * header itself; both layouts (feature columns, one float32 BLOB), reading
 * in chunks and resuming after a rowid, rows an application deletes, a writer
 * appending meanwhile (another connection in a transaction: uncommitted rows
 * unseen, committed ones read next; another process holding the write lock:
 * waited for; WAL mode), and every refusal with its message: a missing table
 * or column (listing what is there), NULL, text, Inf, NaN in a blob, a blob
 * of the wrong length, an integer beyond 2^24, not a database, an empty file,
 * bad options.
 */
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <sqlite3.h>

#include "../../support/sl_test.h"
#include "starling/spool.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

static char dir[512];
static char path[600];

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "data_spool");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(dir);
    return 0;
}

/* A fresh database file @name for this test, opened read-write (the application's side). */
static sqlite3 *app_db(const char *name)
{
    sqlite3 *db = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static void exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg);
}

static void check_err(int rc, int want, const char *err, const char *needle)
{
    if (rc != want || strstr(err, needle) == NULL)
        fail_msg("status %d (want %d), message \"%s\" (want \"%s\")", rc, want, err, needle);
}

static sl_spool *open_ok(const sl_spool_options *o)
{
    char err[512] = "";
    sl_spool *s = NULL;
    if (sl_spool_open(path, o, &s, err, sizeof err) != SL_OK)
        fail_msg("open: %s", err);
    return s;
}

static void expect_open_refused(const sl_spool_options *o, int want, const char *needle)
{
    char err[512] = "";
    sl_spool *s = (sl_spool *)0x1;
    check_err(sl_spool_open(path, o, &s, err, sizeof err), want, err, needle);
    assert_true(s == (sl_spool *)0x1); /* untouched */
}

static const char *const TEMP_HUM[] = {"temp", "hum"};

/* Rows 1..@n of the feature-column layout: label i % 3, temp i + 0.5, hum -i. */
static void insert_rows(sqlite3 *db, int from, int to)
{
    char sql[200];
    for (int i = from; i <= to; i++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO samples (label, temp, hum, note) VALUES (%d, %d.5, %d, 'n')", i % 3,
                 i, -i);
        exec(db, sql);
    }
}

static void check_row(const float *x, const float *y, int i)
{
    if (y[0] != (float)(i % 3) || x[0] != (float)i + 0.5f || x[1] != (float)-i)
        fail_msg("row %d: y %g, x %g %g", i, y[0], x[0], x[1]);
}

static const char *const CREATE_SAMPLES =
    "CREATE TABLE samples (id INTEGER PRIMARY KEY AUTOINCREMENT, label INTEGER NOT NULL, "
    "temp REAL, hum REAL, note TEXT)";

/* The header's example: its indented lines (before "What the application must do") as SQL. */
static void test_header_example(void **state)
{
    const char *const features[] = {"temp", "hum"};
    sl_spool_options o = {.label = "label", .features = features, .nfeatures = 2};
    sl_spool_options b = {.table = "frames", .label = "label", .blob = "x", .nfeatures = 2};
    char line[256], sql[4096] = "", err[512] = "";
    size_t used = 0, n = 0;
    float x[2], y[1];
    int64_t last = 0;
    sqlite3 *db = app_db("example.db");
    FILE *f = fopen(SL_SOURCE_DIR "/device/data/include/starling/spool.h", "r");
    sl_spool *s;
    (void)state;
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL && strstr(line, "What the application") == NULL)
        if (strncmp(line, " *   ", 5) == 0) {
            int w = snprintf(sql + used, sizeof sql - used, "%s", line + 5);
            assert_true(w > 0 && (size_t)w < sizeof sql - used);
            used += (size_t)w;
        }
    fclose(f);
    assert_non_null(strstr(sql, "CREATE TABLE samples"));
    assert_non_null(strstr(sql, "CREATE TABLE frames"));
    exec(db, sql);
    s = open_ok(&o);
    assert_int_equal(sl_spool_read(s, 0, x, y, 1, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 1 && last == 1 && y[0] == 1 && x[0] == 21.5f && x[1] == 0.25f);
    sl_spool_close(s);
    s = open_ok(&b);
    assert_int_equal(sl_spool_read(s, 0, x, y, 1, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 1 && last == 1 && y[0] == -0.5f && x[0] == 1 && x[1] == -2);
    sl_spool_close(s);
    sqlite3_close(db);
}

static void test_feature_columns(void **state)
{
    sl_spool_options o = {.label = "label", .features = TEMP_HUM, .nfeatures = 2};
    sqlite3 *db = app_db("features.db");
    char err[512] = "";
    float x[2 * 40], y[40];
    size_t n = 99;
    int64_t last = -1;
    uint64_t count = 0;
    sl_spool *s;
    (void)state;
    exec(db, CREATE_SAMPLES);
    s = open_ok(&o);
    assert_int_equal(sl_spool_features(s), 2);
    /* nothing yet */
    assert_int_equal(sl_spool_read(s, 0, x, y, 10, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(last, 0);
    assert_int_equal(sl_spool_count(s, 0, &count, err, sizeof err), SL_OK);
    assert_int_equal(count, 0);
    insert_rows(db, 1, 25);
    assert_int_equal(sl_spool_count(s, 0, &count, err, sizeof err), SL_OK);
    assert_int_equal(count, 25);
    assert_int_equal(sl_spool_count(s, 20, &count, err, sizeof err), SL_OK);
    assert_int_equal(count, 5);
    /* in chunks of 7, resuming after the last rowid read */
    {
        int64_t after = 0;
        int seen = 0;
        do {
            assert_int_equal(sl_spool_read(s, after, x, y, 7, &n, &last, err, sizeof err), SL_OK);
            for (size_t i = 0; i < n; i++)
                check_row(x + 2 * i, y + i, seen + 1 + (int)i);
            seen += (int)n;
            assert_true(n == 0 || last == seen);
            after = last;
        } while (n > 0);
        assert_int_equal(seen, 25);
        assert_int_equal(last, 25);
    }
    /* max 0 reads nothing */
    n = 9;
    assert_int_equal(sl_spool_read(s, 3, NULL, NULL, 0, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 0 && last == 3);
    assert_int_equal(sl_spool_read(s, 3, NULL, NULL, 1, &n, &last, err, sizeof err), SL_EINVAL);
    /* the application deletes rows, read and not yet read: reading goes on past the gaps */
    exec(db, "DELETE FROM samples WHERE id IN (2, 3, 11, 25)");
    insert_rows(db, 26, 27);
    assert_int_equal(sl_spool_read(s, 10, x, y, 40, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 15); /* 12..24, 26, 27 */
    check_row(x, y, 12);
    check_row(x + 2 * 12, y + 12, 24);
    check_row(x + 2 * 13, y + 13, 26);
    assert_int_equal(last, 27);
    /* deleting the newest row does not let its rowid be reused (AUTOINCREMENT) */
    exec(db, "DELETE FROM samples WHERE id = 27");
    insert_rows(db, 28, 28);
    assert_int_equal(sl_spool_read(s, 27, x, y, 40, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 1);
    assert_int_equal(last, 28);
    assert_int_equal(sl_spool_count(s, 0, &count, err, sizeof err), SL_OK);
    assert_int_equal(count, 23);
    sl_spool_close(s);
    sl_spool_close(NULL);

    /* the features in another order, names in another case, a table named with a quote */
    exec(db, "CREATE TABLE \"odd \"\"name\" (\"order\" REAL, lbl REAL)");
    exec(db, "INSERT INTO \"odd \"\"name\" VALUES (1.25, 2.5), (' 3 ', '-4e1')");
    {
        const char *const f[] = {"ORDER"};
        sl_spool_options q = {.table = "odd \"name", .label = "lbl", .features = f, .nfeatures = 1};
        s = open_ok(&q);
        assert_int_equal(sl_spool_read(s, 0, x, y, 5, &n, &last, err, sizeof err), SL_OK);
        assert_int_equal(n, 2);
        assert_true(x[0] == 1.25f && y[0] == 2.5f && x[1] == 3 && y[1] == -40);
        sl_spool_close(s);
    }
    {
        const char *const f[] = {"hum", "temp"};
        sl_spool_options q = {.label = "LABEL", .features = f, .nfeatures = 2};
        s = open_ok(&q);
        assert_int_equal(sl_spool_read(s, 0, x, y, 1, &n, &last, err, sizeof err), SL_OK);
        assert_true(n == 1 && last == 1 && x[0] == -1 && x[1] == 1.5f && y[0] == 1);
        sl_spool_close(s);
    }
    sqlite3_close(db);
}

/* One BLOB of little-endian float32 per row. */
static void put_blob_row(sqlite3 *db, double label, const float *v, int n, int bytes)
{
    sqlite3_stmt *st;
    uint8_t b[64];
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
    assert_int_equal(
        sqlite3_prepare_v2(db, "INSERT INTO images (target, px) VALUES (?1, ?2)", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_double(st, 1, label);
    sqlite3_bind_blob(st, 2, b, bytes, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

static void test_blob(void **state)
{
    sl_spool_options o = {.table = "images", .label = "target", .blob = "px", .nfeatures = 3};
    sqlite3 *db = app_db("blob.db");
    float x[3 * 8], y[8];
    char err[512] = "";
    size_t n;
    int64_t last, bad = 0;
    sl_spool *s;
    (void)state;
    exec(db, "CREATE TABLE images (id INTEGER PRIMARY KEY AUTOINCREMENT, target REAL, px BLOB)");
    for (int i = 0; i < 5; i++) {
        float v[3] = {(float)i, -0.25f * (float)i, 1e-3f};
        put_blob_row(db, 0.5 * i, v, 3, 12);
    }
    s = open_ok(&o);
    assert_int_equal(sl_spool_features(s), 3);
    assert_int_equal(sl_spool_read(s, 0, x, y, 8, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 5);
    assert_int_equal(last, 5);
    for (int i = 0; i < 5; i++)
        assert_true(y[i] == 0.5f * (float)i && x[3 * i] == (float)i &&
                    x[3 * i + 1] == -0.25f * (float)i && x[3 * i + 2] == 1e-3f);
    assert_int_equal(sl_spool_refused(s, &bad), SL_ENOENT);
    /* a blob one value short, a NaN inside one, NULL, text in the blob column */
    {
        float v[3] = {1, NAN, 2};
        put_blob_row(db, 1, v, 3, 8);  /* rowid 6 */
        put_blob_row(db, 1, v, 3, 12); /* rowid 7 */
    }
    exec(db, "INSERT INTO images (target, px) VALUES (1, NULL), (1, 'abcdefghijkl')");
    check_err(sl_spool_read(s, 5, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "blob.db: table 'images', rowid 6, column 'px': a BLOB of 8 bytes where 3 float32 "
              "take 12");
    assert_true(n == 5 && last == 5); /* untouched */
    assert_int_equal(sl_spool_refused(s, &bad), SL_OK);
    assert_int_equal(bad, 6);
    check_err(sl_spool_read(s, 6, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 7, column 'px': value 1 is not a finite number");
    check_err(sl_spool_read(s, 7, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 8, column 'px': NULL");
    check_err(sl_spool_read(s, 8, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 9, column 'px': not a BLOB");
    /* the rows before a bad one are returned by a smaller read */
    assert_int_equal(sl_spool_read(s, 3, x, y, 2, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 2 && last == 5);
    assert_int_equal(sl_spool_read(s, 9, x, y, 8, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 0 && last == 9);
    assert_int_equal(sl_spool_refused(s, &bad), SL_ENOENT);
    sl_spool_close(s);
    sqlite3_close(db);
}

static void test_bad_values(void **state)
{
    sl_spool_options o = {.label = "label", .features = TEMP_HUM, .nfeatures = 2};
    sqlite3 *db = app_db("values.db");
    float x[2 * 8], y[8];
    char err[512] = "";
    size_t n = 0;
    int64_t last = 0;
    sl_spool *s;
    sqlite3_stmt *st;
    (void)state;
    exec(db, "CREATE TABLE samples (id INTEGER PRIMARY KEY AUTOINCREMENT, label, temp REAL, "
             "hum)");
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, 2, 3)");         /* 1: fine */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, NULL, 3)");      /* 2 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, 2, 'warm')");    /* 3 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, 9e999, 3)");     /* 4: Inf */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (16777217, 2, 3)");  /* 5 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, 1e300, 3)");     /* 6 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (1, 2, x'00')");     /* 7 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES ('', 2, 3)");        /* 8 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES ('0x10', 2, 3)");    /* 9 */
    exec(db, "INSERT INTO samples (label, temp, hum) VALUES (-16777216, 2, 3)"); /* 10: fine */
    /* 11: a NaN bound as a double is stored as NULL */
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO samples (label, temp, hum) VALUES (1, 2, ?1)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_double(st, 1, NAN);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    s = open_ok(&o);
    check_err(sl_spool_read(s, 0, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "values.db: table 'samples', rowid 2, column 'temp': NULL");
    assert_true(n == 0 && last == 0); /* nothing returned, though row 1 was fine */
    check_err(sl_spool_read(s, 2, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 3, column 'hum': text that is not a number");
    check_err(sl_spool_read(s, 3, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 4, column 'temp': not a finite number");
    check_err(sl_spool_read(s, 4, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 5, column 'label': an integer beyond 2^24");
    check_err(sl_spool_read(s, 5, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 6, column 'temp': beyond float32's range");
    check_err(sl_spool_read(s, 6, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 7, column 'hum': a BLOB, not a number");
    check_err(sl_spool_read(s, 7, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 8, column 'label': text that is not a number");
    check_err(sl_spool_read(s, 8, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 9, column 'label': text that is not a number");
    check_err(sl_spool_read(s, 9, x, y, 8, &n, &last, err, sizeof err), SL_ECORRUPT, err,
              "rowid 11, column 'hum': NULL");
    assert_int_equal(sl_spool_read(s, 9, x, y, 1, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 1 && last == 10 && y[0] == -16777216.0f);
    assert_int_equal(sl_spool_read(s, 0, x, y, 1, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 1 && last == 1 && y[0] == 1 && x[0] == 2 && x[1] == 3);
    sl_spool_close(s);
    sqlite3_close(db);
}

/* Another connection appends in a transaction while the spool reads (rollback journal, WAL). */
static void appender(const char *name, const char *mode)
{
    sl_spool_options o = {.label = "label", .features = TEMP_HUM, .nfeatures = 2};
    sqlite3 *db = app_db(name);
    float x[2 * 64], y[64];
    char err[512] = "", pragma[64];
    size_t n;
    int64_t last;
    uint64_t count;
    sl_spool *s;
    snprintf(pragma, sizeof pragma, "PRAGMA journal_mode=%s", mode);
    exec(db, pragma);
    exec(db, CREATE_SAMPLES);
    insert_rows(db, 1, 3);
    s = open_ok(&o);
    assert_int_equal(sl_spool_read(s, 0, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 3 && last == 3);
    /* rows written but not committed are not seen, by a read or a count */
    exec(db, "BEGIN");
    insert_rows(db, 4, 10);
    assert_int_equal(sl_spool_read(s, 3, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 0 && last == 3);
    assert_int_equal(sl_spool_count(s, 0, &count, err, sizeof err), SL_OK);
    assert_int_equal(count, 3);
    exec(db, "COMMIT");
    /* committed: read by the next call */
    assert_int_equal(sl_spool_read(s, 3, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_true(n == 7 && last == 10);
    for (int i = 0; i < 7; i++)
        check_row(x + 2 * i, y + i, 4 + i);
    /* a transaction rolled back leaves nothing to read */
    exec(db, "BEGIN");
    insert_rows(db, 11, 12);
    exec(db, "ROLLBACK");
    insert_rows(db, 13, 13);
    assert_int_equal(sl_spool_read(s, 10, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 1);
    check_row(x, y, 13);
    /* the spool holds no lock between calls: the application can take an exclusive one */
    exec(db, "BEGIN EXCLUSIVE");
    insert_rows(db, 14, 14);
    exec(db, "COMMIT");
    if (strcmp(mode, "wal") == 0)
        exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(sl_spool_read(s, last, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_int_equal(n, 1);
    check_row(x, y, 14);
    sl_spool_close(s);
    sqlite3_close(db);
}

static void test_writer_rollback_journal(void **state)
{
    (void)state;
    appender("rollback.db", "DELETE");
}

static void test_writer_wal(void **state)
{
    (void)state;
    appender("wal.db", "WAL");
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/*
 * Another process holds the database's exclusive lock (rollback journal) for
 * a while, its rows not yet committed: the read waits for the lock instead of
 * failing, then sees the rows that were committed. A busy timeout shorter
 * than the lock gives SL_EBUSY.
 */
static void test_writer_process(void **state)
{
    sl_spool_options o = {.label = "label", .features = TEMP_HUM, .nfeatures = 2};
    sqlite3 *db = app_db("process.db");
    float x[2 * 64], y[64];
    char err[512] = "";
    size_t n;
    int64_t last;
    int ready[2], status;
    double t0;
    pid_t pid;
    sl_spool *s, *impatient;
    (void)state;
    exec(db, CREATE_SAMPLES);
    insert_rows(db, 1, 2);
    sqlite3_close(db);
    o.busy_timeout_ms = 60000; /* the writer's commit syncs: slow on a loaded disk */
    s = open_ok(&o);
    o.busy_timeout_ms = 50;
    impatient = open_ok(&o);
    assert_int_equal(pipe(ready), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *w = NULL;
        close(ready[0]);
        if (sqlite3_open(path, &w) != SQLITE_OK ||
            sqlite3_exec(w, "PRAGMA synchronous = OFF", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(w, "BEGIN EXCLUSIVE", NULL, NULL, NULL) != SQLITE_OK)
            _exit(1);
        insert_rows(w, 3, 6);
        if (write(ready[1], "x", 1) != 1)
            _exit(2);
        usleep((useconds_t)(400000 * sl_test_time_scale()));
        _exit(sqlite3_exec(w, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : 3);
    }
    close(ready[1]);
    {
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
    }
    close(ready[0]);
    check_err(sl_spool_read(impatient, 0, x, y, 64, &n, &last, err, sizeof err), SL_EBUSY, err,
              "locked by a writer for more than 50 ms");
    t0 = now_s();
    assert_int_equal(sl_spool_read(s, 0, x, y, 64, &n, &last, err, sizeof err), SL_OK);
    assert_true(now_s() - t0 > 0.1); /* it waited */
    assert_int_equal(n, 6);
    assert_int_equal(last, 6);
    check_row(x + 2 * 5, y + 5, 6);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sl_spool_close(impatient);
    sl_spool_close(s);
}

static void test_refusals(void **state)
{
    sl_spool_options o = {.label = "label", .features = TEMP_HUM, .nfeatures = 2};
    const char *const twice[] = {"temp", "TEMP"}, *const with_label[] = {"temp", "label"};
    const char *const nameless[] = {"temp", ""};
    sqlite3 *db = app_db("refuse.db");
    FILE *f;
    (void)state;
    exec(db, CREATE_SAMPLES);
    exec(db, "CREATE TABLE other (a)");
    exec(db, "CREATE TABLE norowid (k INTEGER PRIMARY KEY, label, temp, hum) WITHOUT ROWID");
    exec(db, "CREATE VIEW v AS SELECT label, temp, hum FROM samples");
    sqlite3_close(db);
    {
        sl_spool_options q = o;
        q.table = "sample";
        expect_open_refused(&q, SL_ENOENT,
                            "refuse.db: no table 'sample' (the database has: 'norowid', 'other', "
                            "'samples')");
        q.table = "norowid";
        expect_open_refused(&q, SL_EUNSUPPORTED, "table 'norowid' has no rowid");
        q.table = "v";
        expect_open_refused(&q, SL_EUNSUPPORTED, "'v' is a view");
    }
    {
        const char *const wrong[] = {"temp", "humidity"};
        sl_spool_options q = {.label = "label", .features = wrong, .nfeatures = 2};
        expect_open_refused(&q, SL_ENOENT,
                            "table 'samples' has no column 'humidity' (it has: 'id', 'label', "
                            "'temp', 'hum', 'note')");
        q.label = "class";
        expect_open_refused(&q, SL_ENOENT, "has no column 'class'");
        q.label = "label";
        q.features = NULL;
        q.blob = "pixels";
        expect_open_refused(&q, SL_ENOENT, "has no column 'pixels'");
    }
    /* bad options */
    {
        sl_spool_options q = o;
        q.label = NULL;
        expect_open_refused(&q, SL_EINVAL, "no label column");
        q = o;
        q.blob = "note";
        expect_open_refused(&q, SL_EINVAL, "either feature columns or one blob column");
        q = o;
        q.nfeatures = 0;
        expect_open_refused(&q, SL_EINVAL, "0 features");
        q.features = twice;
        q.nfeatures = 2;
        expect_open_refused(&q, SL_EDUPLICATE, "feature column 'TEMP' named twice");
        q.features = with_label;
        expect_open_refused(&q, SL_EDUPLICATE, "'label' is both the label and a feature");
        q.features = nameless;
        expect_open_refused(&q, SL_EINVAL, "feature 1 has no name");
        assert_int_equal(sl_spool_open(path, NULL, NULL, NULL, 0), SL_EINVAL);
    }
    /* not a database, an empty file, no file, a folder */
    snprintf(path, sizeof path, "%s/text.db", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 100; i++)
        fputs("label,temp,hum\n", f);
    fclose(f);
    expect_open_refused(&o, SL_EMAGIC, "text.db: not an SQLite database");
    snprintf(path, sizeof path, "%s/empty.db", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    expect_open_refused(&o, SL_ETRUNCATED, "empty.db: an empty file");
    snprintf(path, sizeof path, "%s/missing.db", dir);
    expect_open_refused(&o, SL_ENOENT, "missing.db: no such file");
    snprintf(path, sizeof path, "%s", dir);
    expect_open_refused(&o, SL_EINVAL, "not a regular file");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_example),
        cmocka_unit_test(test_feature_columns),
        cmocka_unit_test(test_blob),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_writer_rollback_journal),
        cmocka_unit_test(test_writer_wal),
        cmocka_unit_test(test_writer_process),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
