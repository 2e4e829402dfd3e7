/*
 * A device's data read through its task's contract (starling/source.h), from
 * every scheme, each data set written here into a temporary folder: the exact
 * preprocessed values and labels that come out, growth (appended CSV rows,
 * new spool rows, new files in class folders; a half-written line or a .tmp
 * file not read), windows of a series (layout, stride, each label rule), and
 * each refusal of DATA_CONTRACT.md with its reason: a missing column (the
 * columns there are listed), a wrong shape, a non-finite value, a label
 * outside the classes, an empty or truncated file, a file replaced while it
 * was read, a corrupt image, a WAV at another rate, a folder that is not a
 * class. A refused source keeps refusing with the same reason.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <minizip/zip.h>
#include <png.h>
#include <sqlite3.h>
#include <zlib.h>

#include "../../support/sl_test.h"
#include "starling/logmel.h"
#include "starling/source.h"

#include "data_int.h"

#define MAXS 64 /* samples a test reads at once */

static char g_dir[512];
static float g_x[MAXS * 4096], g_y[MAXS * 8];

/* ---- files ----------------------------------------------------------------------------------- */

static void path_of(const char *rel, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", g_dir, rel);
}

static void write_bytes(const char *rel, const char *mode, const void *data, size_t len)
{
    char path[1024];
    FILE *f;
    path_of(rel, path, sizeof path);
    f = fopen(path, mode);
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void put_text(const char *rel, const char *text)
{
    write_bytes(rel, "wb", text, strlen(text));
}

static void append_text(const char *rel, const char *text)
{
    write_bytes(rel, "ab", text, strlen(text));
}

static void make_dir(const char *rel)
{
    char path[1024];
    path_of(rel, path, sizeof path);
    assert_int_equal(mkdir(path, 0755), 0);
}

/* "SCHEME:" + the temporary folder + "/" + @rest into @out. */
static const char *uri_of(const char *scheme, const char *rest, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s/%s", scheme, g_dir, rest);
    return out;
}

/* ---- contracts and sources ------------------------------------------------------------------- */

static sl_contract *contract(const char *json)
{
    char err[512] = "";
    sl_contract *c = NULL;
    if (sl_contract_parse(json, strlen(json), &c, err, sizeof err) != SL_OK)
        fail_msg("contract refused: %s: %s", err, json);
    return c;
}

static sl_source *open_ok(const char *uri, const sl_contract *c)
{
    char err[512] = "";
    sl_source *s = NULL;
    int rc = sl_source_open(uri, c, &s, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("open %s: %d: %s", uri, rc, err);
    assert_non_null(s);
    return s;
}

static void open_refused(const char *uri, const sl_contract *c, int status, const char *words)
{
    char err[512] = "";
    sl_source *s = (sl_source *)0x1;
    int rc = sl_source_open(uri, c, &s, err, sizeof err);
    if (rc != status || strstr(err, words) == NULL)
        fail_msg("open %s: status %d (want %d), reason \"%s\" (want \"%s\")", uri, rc, status, err,
                 words);
    assert_ptr_equal(s, (sl_source *)0x1);
}

static size_t read_ok(sl_source *s, size_t max)
{
    char err[512] = "";
    size_t n = 12345;
    int rc = sl_source_read(s, g_x, g_y, max, &n, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("read: %d: %s", rc, err);
    assert_true(n <= max);
    return n;
}

/* A refusal with @status and @words, then the same refusal again (sticky), word for word. */
static void read_refused(sl_source *s, int status, const char *words)
{
    char err[512] = "", again[512] = "";
    size_t n = 12345;
    int rc = sl_source_read(s, g_x, g_y, MAXS, &n, err, sizeof err);
    if (rc != status || strstr(err, words) == NULL)
        fail_msg("read: status %d (want %d), reason \"%s\" (want \"%s\")", rc, status, err, words);
    assert_int_equal(n, 12345); /* nothing returned */
    assert_int_equal(sl_source_read(s, g_x, g_y, MAXS, &n, again, sizeof again), status);
    assert_string_equal(again, err);
    assert_int_equal(n, 12345);
}

static void expect_values(const float *got, const float *want, size_t n, float tol,
                          const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol))
            fail_msg("%s: value %zu is %.9g, wanted %.9g", what, i, (double)got[i],
                     (double)want[i]);
}

/* ---- CSV ------------------------------------------------------------------------------------- */

static void test_csv_columns_and_labels(void **state)
{
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    /* the contract's feature order from shuffled columns, a column that is not read, class
     * names and class indices in the label field */
    put_text("shuffled.csv", "c,kind,b,ts,a\n3,dog,2,100,1\n6,0,5,101,4\n9,cow,8,102,7\n");
    c = contract("{\"input\": {\"features\": [\"a\", \"b\", \"c\"]}, \"label\": {\"kind\": "
                 "\"class\", \"column\": \"kind\", \"classes\": [\"cat\", \"dog\", \"cow\"]}}");
    s = open_ok(uri_of("csv:", "shuffled.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 3);
    {
        const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[3] = {1, 0, 2};
        expect_values(g_x, x, 9, 0, "x");
        expect_values(g_y, y, 3, 0, "y");
    }
    assert_int_equal(read_ok(s, MAXS), 0);
    /* growth: a complete line is read, a line without its newline waits */
    append_text("shuffled.csv", "12,cat,11,103,10\n15,dog,14,");
    assert_int_equal(read_ok(s, MAXS), 1);
    {
        const float x[3] = {10, 11, 12};
        expect_values(g_x, x, 3, 0, "appended x");
        assert_true(g_y[0] == 0);
    }
    append_text("shuffled.csv", "104,13");
    assert_int_equal(read_ok(s, MAXS), 0);
    append_text("shuffled.csv", "\n");
    assert_int_equal(read_ok(s, MAXS), 1);
    {
        const float x[3] = {13, 14, 15};
        expect_values(g_x, x, 3, 0, "completed x");
        assert_true(g_y[0] == 1);
    }
    sl_source_close(s);
    /* ?label= names another label column */
    put_text("species.csv", "a,kind,species,b,c\n1,dog,cow,2,3\n");
    s = open_ok(uri_of("csv:", "species.csv?label=species", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_y[0] == 2);
    sl_source_close(s);
    /* kind= and classes= must say what the contract says */
    open_refused(uri_of("csv:", "species.csv?kind=target", uri, sizeof uri), c, SL_EINVAL,
                 "kind=target; the task's data contract says class");
    open_refused(uri_of("csv:", "species.csv?classes=4", uri, sizeof uri), c, SL_EINVAL,
                 "classes=4; the task's data contract has 3");
    s = open_ok(uri_of("csv:", "species.csv?kind=class&classes=3", uri, sizeof uri), c);
    sl_source_close(s);
    sl_contract_free(c);

    /* the default label column "label"; scale, then per-feature standardisation */
    put_text("scaled.csv", "label,c,b,a\n0,3,2,1\n1,6,5,4\n");
    c = contract("{\"input\": {\"features\": [\"a\", \"b\", \"c\"]}, \"label\": {\"kind\": "
                 "\"class\", \"classes\": 2}, \"preprocess\": {\"scale\": {\"factor\": 2, "
                 "\"offset\": 1}, \"standardize\": {\"mean\": [3, 5, 7], \"std\": [1, 2, 4]}}}");
    s = open_ok(uri_of("csv:", "scaled.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[6] = {0, 0, 0, 6, 3, 1.5f}, y[2] = {0, 1};
        expect_values(g_x, x, 6, 1e-6f, "scaled x");
        expect_values(g_y, y, 2, 0, "scaled y");
    }
    sl_source_close(s);
    sl_contract_free(c);
}

static void test_csv_options(void **state)
{
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    c = contract("{\"input\": {\"features\": [\"x1\", \"x2\"]}, \"label\": {\"kind\": "
                 "\"target\", \"column\": \"y\"}}");
    /* delimiters, lines skipped before the header */
    put_text("semi.csv", "x2;y;x1\n2;0.5;1\n4;-1.5;3\n");
    s = open_ok(uri_of("csv:", "semi.csv?delimiter=;", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {1, 2, 3, 4}, y[2] = {0.5f, -1.5f};
        expect_values(g_x, x, 4, 0, "semicolon x");
        expect_values(g_y, y, 2, 0, "semicolon y");
    }
    sl_source_close(s);
    put_text("tab.csv", "# exported\n# by a sensor\nx1\tx2\ty\n1\t2\t3\n");
    s = open_ok(uri_of("csv:", "tab.csv?delimiter=tab&skip=2", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_x[0] == 1 && g_x[1] == 2 && g_y[0] == 3);
    sl_source_close(s);
    put_text("space.csv", "x1 x2 y\n5 6 7\n");
    s = open_ok(uri_of("csv:", "space.csv?delimiter=space", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_x[0] == 5 && g_x[1] == 6 && g_y[0] == 7);
    sl_source_close(s);
    /* the named label column overridden by ?label= */
    put_text("other.csv", "x1,x2,y,z\n1,2,3,4\n");
    s = open_ok(uri_of("csv:", "other.csv?label=z", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_y[0] == 4);
    sl_source_close(s);
    sl_contract_free(c);

    /* no features named: every column but the label and the timestamp, in file order */
    c = contract("{\"input\": {\"shape\": [2]}, \"label\": {\"kind\": \"class\", \"classes\": 2}}");
    put_text("stamped.csv", "t,x1,label,x2\n1700000000,0.25,1,-3\n1700000001,0.5,0,-4\n");
    s = open_ok(uri_of("csv:", "stamped.csv?timestamp=t", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {0.25f, -3, 0.5f, -4}, y[2] = {1, 0};
        expect_values(g_x, x, 4, 0, "stamped x");
        expect_values(g_y, y, 2, 0, "stamped y");
    }
    sl_source_close(s);
    /* ... without ?timestamp= the time would be a feature: three values where two are wanted */
    open_refused(uri_of("csv:", "stamped.csv", uri, sizeof uri), c, SL_EINVAL,
                 "3 feature columns; the task's sample has 2 values a row");
    open_refused(uri_of("csv:", "stamped.csv?timestamp=time", uri, sizeof uri), c, SL_ENOENT,
                 "no timestamp column 'time' (the file has: t, x1, label, x2)");
    sl_contract_free(c);
}

static void test_csv_multi_column_labels(void **state)
{
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    /* multi-target: the label's columns in the contract's order */
    c = contract("{\"input\": {\"features\": [\"a\", \"b\"]}, \"label\": {\"kind\": \"target\", "
                 "\"columns\": [\"t1\", \"t2\"]}}");
    put_text("targets.csv", "t2,a,t1,b\n20,1,10,2\n40,3,30,4\n60,5,50,6\n");
    s = open_ok(uri_of("csv:", "targets.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, 2), 2);
    {
        const float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
        expect_values(g_x, x, 4, 0, "targets x");
        expect_values(g_y, y, 4, 0, "targets y");
    }
    assert_int_equal(read_ok(s, 2), 1);
    assert_true(g_x[0] == 5 && g_x[1] == 6 && g_y[0] == 50 && g_y[1] == 60);
    sl_source_close(s);
    /* ?label= cannot rename a label of two columns */
    open_refused(uri_of("csv:", "targets.csv?label=t1", uri, sizeof uri), c, SL_EINVAL,
                 "?label= renames one column; the task's label has 2 columns");
    put_text("targets_short.csv", "a,b,t1\n1,2,3\n");
    open_refused(uri_of("csv:", "targets_short.csv", uri, sizeof uri), c, SL_ENOENT,
                 "no feature column 't2' (the file has: a, b, t1)");
    sl_contract_free(c);

    /* multi-label: a 0/1 column per class */
    c = contract("{\"input\": {\"features\": [\"f\"]}, \"label\": {\"kind\": \"multilabel\", "
                 "\"classes\": [\"x\", \"y\", \"z\"], \"columns\": [\"is_x\", \"is_y\", "
                 "\"is_z\"]}}");
    put_text("multi.csv", "is_z,f,is_x,is_y\n1,0.5,0,1\n0,1.5,1,0\n");
    s = open_ok(uri_of("csv:", "multi.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[2] = {0.5f, 1.5f}, y[6] = {0, 1, 1, 1, 0, 0};
        expect_values(g_x, x, 2, 0, "multilabel x");
        expect_values(g_y, y, 6, 0, "multilabel y");
    }
    append_text("multi.csv", "1,2.5,2,0\n");
    read_refused(s, SL_ERANGE, "row 3: a multi-label value is 0 or 1 (class x: 2)");
    sl_source_close(s);
    sl_contract_free(c);

    /* a label of several values needs its columns named */
    c = contract("{\"input\": {\"features\": [\"f\"]}, \"label\": {\"kind\": \"target\", "
                 "\"dim\": 2}}");
    open_refused(uri_of("csv:", "multi.csv", uri, sizeof uri), c, SL_EINVAL,
                 "its contract names their columns (label.columns)");
    sl_contract_free(c);
}

static void test_csv_refusals(void **state)
{
    char uri[1400], path[1024], fresh[1024];
    sl_contract *c;
    sl_source *s;
    (void)state;
    c = contract("{\"input\": {\"features\": [\"a\", \"b\", \"c\"]}, \"label\": {\"kind\": "
                 "\"class\", \"classes\": [\"cat\", \"dog\"]}}");
    /* a missing column: the reason lists the columns there are */
    put_text("missing.csv", "a,b,label,d\n1,2,cat,4\n");
    open_refused(uri_of("csv:", "missing.csv", uri, sizeof uri), c, SL_ENOENT,
                 "missing.csv: no feature column 'c' (the file has: a, b, label, d)");
    put_text("nolabel.csv", "a,b,c\n1,2,3\n");
    open_refused(uri_of("csv:", "nolabel.csv", uri, sizeof uri), c, SL_ENOENT,
                 "no label column 'label' (the file has: a, b, c)");
    /* an empty file, a file that is not there, a header without its newline */
    put_text("empty.csv", "");
    open_refused(uri_of("csv:", "empty.csv", uri, sizeof uri), c, SL_ETRUNCATED,
                 "empty.csv: the file is empty");
    open_refused(uri_of("csv:", "absent.csv", uri, sizeof uri), c, SL_ENOENT,
                 "absent.csv: no such file");
    put_text("headless.csv", "a,b,c,label");
    open_refused(uri_of("csv:", "headless.csv", uri, sizeof uri), c, SL_ETRUNCATED,
                 "the header line has no newline");
    /* a header alone is 0 samples so far, not an error */
    put_text("header.csv", "a,b,c,label\n");
    s = open_ok(uri_of("csv:", "header.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 0);
    sl_source_close(s);

    /* a non-finite value: refused with its line and column, then every read refuses alike */
    put_text("inf.csv", "a,b,c,label\n1,2,3,cat\n1,inf,3,dog\n");
    s = open_ok(uri_of("csv:", "inf.csv", uri, sizeof uri), c);
    read_refused(s, SL_ENONFINITE, "inf.csv: line 3, column 2 (b): not a finite number: 'inf'");
    append_text("inf.csv", "1,2,3,cat\n"); /* later good rows change nothing: sticky */
    read_refused(s, SL_ENONFINITE, "line 3, column 2 (b)");
    sl_source_close(s);
    put_text("nan.csv", "a,b,c,label\nnan,2,3,cat\n");
    s = open_ok(uri_of("csv:", "nan.csv", uri, sizeof uri), c);
    read_refused(s, SL_ENONFINITE, "line 2, column 1 (a): not a finite number: 'nan'");
    sl_source_close(s);
    /* a label outside the classes, by name and by index */
    put_text("bird.csv", "a,b,c,label\n1,2,3,bird\n");
    s = open_ok(uri_of("csv:", "bird.csv", uri, sizeof uri), c);
    read_refused(s, SL_ERANGE, "unknown class name (the classes are: cat, dog): 'bird'");
    sl_source_close(s);
    put_text("index.csv", "a,b,c,label\n1,2,3,1\n1,2,3,2\n");
    s = open_ok(uri_of("csv:", "index.csv", uri, sizeof uri), c);
    read_refused(s, SL_ERANGE, "line 3, column 4 (label)");
    sl_source_close(s);
    /* a text value, a short row */
    put_text("text.csv", "a,b,c,label\n1,two,3,cat\n");
    s = open_ok(uri_of("csv:", "text.csv", uri, sizeof uri), c);
    read_refused(s, SL_ESYNTAX, "column 2 (b): not a number: 'two'");
    sl_source_close(s);
    put_text("short.csv", "a,b,c,label\n1,2,cat\n");
    s = open_ok(uri_of("csv:", "short.csv", uri, sizeof uri), c);
    read_refused(s, SL_ECOUNT, "line 2: 3 fields where the file has 4 columns");
    sl_source_close(s);

    /* a file replaced while it is read (rename over it): csv reports SL_ESTATE */
    put_text("replaced.csv", "a,b,c,label\n1,2,3,cat\n");
    s = open_ok(uri_of("csv:", "replaced.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1);
    put_text("replaced.new", "a,b,c,label\n1,2,3,cat\n4,5,6,dog\n");
    path_of("replaced.new", fresh, sizeof fresh);
    path_of("replaced.csv", path, sizeof path);
    assert_int_equal(rename(fresh, path), 0);
    read_refused(s, SL_ESTATE, "replaced.csv: the file changed while it was read");
    sl_source_close(s);
    /* ... or truncated below what was read */
    put_text("truncated.csv", "a,b,c,label\n1,2,3,cat\n4,5,6,dog\n");
    s = open_ok(uri_of("csv:", "truncated.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    path_of("truncated.csv", path, sizeof path);
    assert_int_equal(truncate(path, 14), 0);
    read_refused(s, SL_ESTATE, "the file changed while it was read");
    sl_source_close(s);

    /* the source and the contract must fit */
    {
        sl_contract *img = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", "
                                    "\"classes\": 2}, \"preprocess\": {\"image\": {\"width\": 2, "
                                    "\"height\": 2}}}");
        open_refused(uri_of("csv:", "header.csv", uri, sizeof uri), img, SL_EINVAL,
                     "the task's samples are images (images:DIR)");
        sl_contract_free(img);
    }
    open_refused("csv:", c, SL_EINVAL, "a path, then ?options");
    open_refused("file.csv", c, SL_EINVAL, "a data source is csv:, npy:");
    sl_contract_free(c);
}

/* ---- windows of a series --------------------------------------------------------------------- */

/* Rows r of a series: a = r, b = 100 - 10 r, the label L[r]. */
static const int L[10] = {0, 1, 1, 2, 2, 1, 2, 0, 0, 2};

static void series_rows(const char *rel, int from, int to, const char *mode)
{
    char text[1024];
    size_t len = 0;
    if (mode[0] == 'w')
        len += (size_t)snprintf(text, sizeof text, "a,b,label\n");
    for (int r = from; r <= to; r++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%d,%d,%d\n", r, 100 - 10 * r, L[r]);
    write_bytes(rel, mode, text, len);
}

/* The window of rows @first..@first+3 as [feature][step], with @b_scale applied to b's row. */
static void expect_window(const float *x, int first, float b_mean, float b_std, const char *what)
{
    float want[8];
    for (int t = 0; t < 4; t++) {
        want[t] = (float)(first + t);
        want[4 + t] = ((float)(100 - 10 * (first + t)) - b_mean) / b_std;
    }
    expect_values(x, want, 8, 1e-6f, what);
}

static void test_windows(void **state)
{
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    /* size 4, stride 2, the last row's label */
    c = contract("{\"input\": {\"features\": [\"a\", \"b\"]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 3}, \"preprocess\": {\"window\": {\"size\": 4, \"stride\": 2}}}");
    series_rows("series.csv", 0, 4, "wb");
    s = open_ok(uri_of("csv:", "series.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 1); /* rows 0-3; row 4 waits for the next window */
    expect_window(g_x, 0, 0, 1, "window 0");
    assert_true(g_y[0] == (float)L[3]);
    assert_int_equal(read_ok(s, MAXS), 0);
    /* growth: rows 5-7 complete the windows of rows 2-5 and 4-7 */
    series_rows("series.csv", 5, 7, "ab");
    assert_int_equal(read_ok(s, MAXS), 2);
    expect_window(g_x, 2, 0, 1, "window 2-5");
    expect_window(g_x + 8, 4, 0, 1, "window 4-7");
    assert_true(g_y[0] == (float)L[5] && g_y[1] == (float)L[7]);
    /* a half-written row is not read until its line is complete */
    append_text("series.csv", "8,20,");
    assert_int_equal(read_ok(s, MAXS), 0);
    append_text("series.csv", "0\n9,10,2");
    assert_int_equal(read_ok(s, MAXS), 0); /* row 8 alone completes no window */
    append_text("series.csv", "\n");
    assert_int_equal(read_ok(s, MAXS), 1);
    expect_window(g_x, 6, 0, 1, "window 6-9");
    assert_true(g_y[0] == (float)L[9]);
    sl_source_close(s);
    /* one window a read when asked for one */
    s = open_ok(uri_of("csv:", "series.csv", uri, sizeof uri), c);
    for (int w = 0; w < 4; w++) {
        assert_int_equal(read_ok(s, 1), 1);
        expect_window(g_x, 2 * w, 0, 1, "one by one");
    }
    assert_int_equal(read_ok(s, 1), 0);
    sl_source_close(s);
    sl_contract_free(c);

    /* the majority (the smallest class on a tie), and per-feature standardisation of a window */
    c = contract("{\"input\": {\"features\": [\"a\", \"b\"]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 3}, \"preprocess\": {\"window\": {\"size\": 4, \"stride\": 2, "
                 "\"label\": \"majority\"}, \"standardize\": {\"mean\": [0, 100], \"std\": [1, "
                 "10]}}}");
    s = open_ok(uri_of("csv:", "series.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 4);
    {
        /* labels 0 1 1 2 -> 1; 1 2 2 1 -> 1 (tie); 2 1 2 0 -> 2; 2 0 0 2 -> 0 (tie) */
        const float y[4] = {1, 1, 2, 0};
        expect_values(g_y, y, 4, 0, "majority");
        for (int w = 0; w < 4; w++)
            expect_window(g_x + 8 * w, 2 * w, 100, 10, "standardised window");
    }
    sl_source_close(s);
    sl_contract_free(c);

    /* targets: the mean of the window's rows; stride 1 */
    put_text("targets.csv", "a,b,y\n0,0,0\n1,0,0.5\n2,0,1\n3,0,1.5\n4,0,4\n");
    c = contract("{\"input\": {\"features\": [\"a\", \"b\"]}, \"label\": {\"kind\": \"target\", "
                 "\"column\": \"y\"}, \"preprocess\": {\"window\": {\"size\": 4, \"stride\": 1}}}");
    s = open_ok(uri_of("csv:", "targets.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    assert_true(g_y[0] == 0.75f && g_y[1] == 1.75f);
    assert_true(g_x[0] == 0 && g_x[3] == 3 && g_x[8] == 1 && g_x[11] == 4);
    sl_source_close(s);
    sl_contract_free(c);

    /* two targets: the mean of each */
    put_text("two.csv", "z,a,y\n1,0,2\n3,1,4\n5,2,6\n7,3,8\n");
    c = contract("{\"input\": {\"features\": [\"a\"]}, \"label\": {\"kind\": \"target\", "
                 "\"columns\": [\"y\", \"z\"]}, \"preprocess\": {\"window\": {\"size\": 2}}}");
    s = open_ok(uri_of("csv:", "two.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {0, 1, 2, 3}, y[4] = {3, 2, 7, 6};
        expect_values(g_x, x, 4, 0, "two targets x");
        expect_values(g_y, y, 4, 0, "two targets y");
    }
    sl_source_close(s);
    sl_contract_free(c);

    /* stride beyond the size skips rows: windows of rows 0-1, 3-4 */
    c = contract("{\"input\": {\"features\": [\"a\"]}, \"label\": {\"kind\": \"target\", "
                 "\"column\": \"y\"}, \"preprocess\": {\"window\": {\"size\": 2, \"stride\": 3, "
                 "\"label\": \"last\"}}}");
    s = open_ok(uri_of("csv:", "targets.csv", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {0, 1, 3, 4}, y[2] = {0.5f, 4};
        expect_values(g_x, x, 4, 0, "stride 3 x");
        expect_values(g_y, y, 2, 0, "stride 3 y");
    }
    sl_source_close(s);
    sl_contract_free(c);
}

/* ---- NumPy ----------------------------------------------------------------------------------- */

/* numpy.save's bytes of @dict and @len bytes of data (malloc'd, *@n of them), version 1.0. */
static uint8_t *npy_bytes(const char *dict, const void *data, size_t len, size_t *n)
{
    size_t dl = strlen(dict), total = 10 + dl + 1, pad = (64 - total % 64) % 64, at = 10;
    uint32_t hl = (uint32_t)(dl + pad + 1);
    uint8_t *b = malloc(total + pad + len);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)hl;
    b[9] = (uint8_t)(hl >> 8);
    memcpy(b + at, dict, dl);
    at += dl;
    memset(b + at, ' ', pad);
    at += pad;
    b[at++] = '\n';
    if (len)
        memcpy(b + at, data, len);
    *n = at + len;
    return b;
}

static void write_npy(const char *rel, const char *dict, const void *data, size_t len)
{
    size_t n;
    uint8_t *b = npy_bytes(dict, data, len, &n);
    write_bytes(rel, "wb", b, n);
    free(b);
}

/* x: float64 (4, 2, 3), x[i][j][k] = i + j / 2 + k / 8; y: int64 class indices. */
static double g_x8[4 * 6];
static const int64_t g_y8[4] = {0, 2, 1, 2};
#define X8_DICT "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 2, 3), }"
#define Y8_DICT "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"

static void check_x8(const float *x, size_t first, size_t n, const char *what)
{
    float want[4 * 6];
    for (size_t i = 0; i < n * 6; i++)
        want[i] = (float)g_x8[first * 6 + i];
    expect_values(x, want, n * 6, 0, what);
}

static void test_npy(void **state)
{
    char uri[2200], ypath[1024];
    sl_contract *c, *t;
    sl_source *s;
    (void)state;
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 6; v++)
            g_x8[i * 6 + v] = i + (v / 3) / 2.0 + (v % 3) / 8.0;
    write_npy("x.npy", X8_DICT, g_x8, sizeof g_x8);
    write_npy("y.npy", Y8_DICT, g_y8, sizeof g_y8);
    c = contract("{\"input\": {\"shape\": [2, 3]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 3}}");
    path_of("y.npy", ypath, sizeof ypath);
    snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
    s = open_ok(uri, c);
    assert_int_equal(read_ok(s, 3), 3);
    check_x8(g_x, 0, 3, "npy rows 0-2");
    assert_true(g_y[0] == 0 && g_y[1] == 2 && g_y[2] == 1);
    assert_int_equal(read_ok(s, 3), 1);
    check_x8(g_x, 3, 1, "npy row 3");
    assert_true(g_y[0] == 2);
    assert_int_equal(read_ok(s, 3), 0); /* read once */
    sl_source_close(s);

    /* targets: y of (n, tdim) */
    {
        const float yt[8] = {0.5f, -1, 1.5f, -2, 2.5f, -3, 3.5f, -4};
        write_npy("yt.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", yt,
                  sizeof yt);
        t = contract("{\"input\": {\"shape\": [6]}, \"label\": {\"kind\": \"target\", "
                     "\"dim\": 2}, \"preprocess\": {\"standardize\": {\"mean\": 1, \"std\": "
                     "0.5}}}");
        path_of("yt.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
        s = open_ok(uri, t);
        assert_int_equal(read_ok(s, MAXS), 4);
        expect_values(g_y, yt, 8, 0, "npy targets");
        for (size_t i = 0; i < 24; i++)
            if (g_x[i] != (float)((g_x8[i] - 1.0) / 0.5))
                fail_msg("standardised x[%zu] = %g", i, (double)g_x[i]);
        sl_source_close(s);
        /* ... the class contract's y has one value a row */
        snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
        open_refused(uri, c, SL_EINVAL, "y has 2 values a row; the task's label has 1");
        sl_contract_free(t);
    }

    /* input.dtype: the arrays must hold what the contract says (x here is float64) */
    {
        sl_contract *d = contract("{\"input\": {\"shape\": [2, 3], \"dtype\": \"float32\"}, "
                                  "\"label\": {\"kind\": \"class\", \"classes\": 3}}");
        sl_contract *d8 = contract("{\"input\": {\"shape\": [2, 3], \"dtype\": \"float64\"}, "
                                   "\"label\": {\"kind\": \"class\", \"classes\": 3}}");
        path_of("y.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
        open_refused(uri, d, SL_EINVAL,
                     "x holds float64; the task's contract says input.dtype "
                     "float32");
        s = open_ok(uri, d8);
        assert_int_equal(read_ok(s, MAXS), 4);
        sl_source_close(s);
        sl_contract_free(d);
        sl_contract_free(d8);
    }

    /* a wrong row size; x and y of different lengths; no y */
    {
        float x5[20] = {0};
        write_npy("x5.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }", x5,
                  sizeof x5);
        path_of("y.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/x5.npy?y=%s", g_dir, ypath);
        open_refused(uri, c, SL_EINVAL, "x has 5 values a row; the task's sample has 6");
        write_npy("y3.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", g_y8,
                  3 * sizeof *g_y8);
        path_of("y3.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
        open_refused(uri, c, SL_EINVAL, "x has 4 rows, y 3");
        open_refused(uri_of("npy:", "x.npy", uri, sizeof uri), c, SL_EINVAL,
                     "?y=FILE names the labels' array");
    }

    /* a label outside the classes; a non-finite value; a truncated file */
    {
        const int64_t bad[4] = {0, 1, 3, 0};
        double nan8[24];
        size_t n;
        uint8_t *b;
        write_npy("ybad.npy", Y8_DICT, bad, sizeof bad);
        path_of("ybad.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/x.npy?y=%s", g_dir, ypath);
        s = open_ok(uri, c);
        assert_int_equal(read_ok(s, 2), 2);
        read_refused(s, SL_ERANGE, "row 3: label 3 is outside the task's 3 classes");
        sl_source_close(s);

        memcpy(nan8, g_x8, sizeof nan8);
        nan8[13] = NAN;
        write_npy("xnan.npy", X8_DICT, nan8, sizeof nan8);
        path_of("y.npy", ypath, sizeof ypath);
        snprintf(uri, sizeof uri, "npy:%s/xnan.npy?y=%s", g_dir, ypath);
        s = open_ok(uri, c);
        read_refused(s, SL_ENONFINITE, "xnan.npy: row 2, column 1: not a finite number");
        sl_source_close(s);

        b = npy_bytes(X8_DICT, g_x8, sizeof g_x8, &n);
        write_bytes("xcut.npy", "wb", b, n - 9);
        free(b);
        snprintf(uri, sizeof uri, "npy:%s/xcut.npy?y=%s", g_dir, ypath);
        open_refused(uri, c, SL_ETRUNCATED, "xcut.npy:");
        write_bytes("xempty.npy", "wb", "", 0);
        snprintf(uri, sizeof uri, "npy:%s/xempty.npy?y=%s", g_dir, ypath);
        open_refused(uri, c, SL_EMAGIC, "xempty.npy: not a .npy file");
    }
    sl_contract_free(c);
}

static void write_npz(const char *rel, const char *const *names, const uint8_t *const *bytes,
                      const size_t *lens, size_t n, int method)
{
    char path[1024];
    zipFile zf;
    path_of(rel, path, sizeof path);
    zf = zipOpen64(path, APPEND_STATUS_CREATE);
    assert_non_null(zf);
    for (size_t i = 0; i < n; i++) {
        zip_fileinfo zi;
        memset(&zi, 0, sizeof zi);
        assert_int_equal(zipOpenNewFileInZip(zf, names[i], &zi, NULL, 0, NULL, 0, NULL, method,
                                             method ? Z_DEFAULT_COMPRESSION : 0),
                         ZIP_OK);
        assert_int_equal(zipWriteInFileInZip(zf, bytes[i], (unsigned)lens[i]), ZIP_OK);
        assert_int_equal(zipCloseFileInZip(zf), ZIP_OK);
    }
    assert_int_equal(zipClose(zf, NULL), ZIP_OK);
}

static void test_npz(void **state)
{
    char uri[1400];
    size_t lens[2];
    uint8_t *bytes[2];
    sl_contract *c;
    sl_source *s;
    (void)state;
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 6; v++)
            g_x8[i * 6 + v] = i + (v / 3) / 2.0 + (v % 3) / 8.0;
    bytes[0] = npy_bytes(X8_DICT, g_x8, sizeof g_x8, &lens[0]);
    bytes[1] = npy_bytes(Y8_DICT, g_y8, sizeof g_y8, &lens[1]);
    {
        const char *const names[2] = {"x.npy", "y.npy"};
        write_npz("stored.npz", names, (const uint8_t *const *)bytes, lens, 2, 0);
    }
    {
        const char *const names[2] = {"labels.npy", "features.npy"};
        const uint8_t *swapped[2] = {bytes[1], bytes[0]};
        const size_t swapped_lens[2] = {lens[1], lens[0]};
        write_npz("deflated.npz", names, swapped, swapped_lens, 2, Z_DEFLATED);
    }
    c = contract("{\"input\": {\"shape\": [2, 3]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 3}, \"preprocess\": {\"scale\": {\"factor\": 8}}}");
    s = open_ok(uri_of("npz:", "stored.npz", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 4);
    for (size_t i = 0; i < 24; i++)
        if (g_x[i] != (float)(g_x8[i] * 8))
            fail_msg("stored.npz x[%zu] = %g", i, (double)g_x[i]);
    assert_true(g_y[0] == 0 && g_y[1] == 2 && g_y[2] == 1 && g_y[3] == 2);
    assert_int_equal(read_ok(s, MAXS), 0);
    sl_source_close(s);
    s = open_ok(uri_of("npz:", "deflated.npz?x=features&y=labels", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, 2), 2);
    assert_true(g_x[6] == 8 && g_x[7] == 8 + 1 && g_y[1] == 2);
    assert_int_equal(read_ok(s, 2), 2);
    assert_true(g_x[6] == 24 && g_y[1] == 2);
    sl_source_close(s);
    /* the default names are not in that archive: the reason says which are */
    open_refused(uri_of("npz:", "deflated.npz", uri, sizeof uri), c, SL_ENOENT, "x");
    open_refused(uri_of("npz:", "stored.npz?z=1", uri, sizeof uri), c, SL_EINVAL,
                 "unknown option \"z\"");
    free(bytes[0]);
    free(bytes[1]);
    sl_contract_free(c);
}

/* ---- IDX ------------------------------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* @n images of 2 x 3 pixels (pixel k of image i: 40 i + k) and their labels, in @dir. */
static void write_idx(const char *dir, uint32_t n, const uint8_t *labels, size_t images, int gz)
{
    uint8_t img[16 + 16 * 6], lab[8 + 16];
    char rel[300], path[1024];
    put_be32(img, 0x803);
    put_be32(img + 4, n);
    put_be32(img + 8, 2);
    put_be32(img + 12, 3);
    for (size_t i = 0; i < images * 6; i++)
        img[16 + i] = (uint8_t)(40 * (i / 6) + i % 6);
    put_be32(lab, 0x801);
    put_be32(lab + 4, n);
    memcpy(lab + 8, labels, n);
    for (int k = 0; k < 2; k++) {
        const uint8_t *b = k ? lab : img;
        size_t len = k ? 8 + n : 16 + images * 6;
        snprintf(rel, sizeof rel, "%s/train-%s-idx%d-ubyte%s", dir, k ? "labels" : "images",
                 k ? 1 : 3, gz ? ".gz" : "");
        if (!gz) {
            write_bytes(rel, "wb", b, len);
        } else {
            gzFile f;
            path_of(rel, path, sizeof path);
            f = gzopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(gzwrite(f, b, (unsigned)len), (int)len);
            assert_int_equal(gzclose(f), Z_OK);
        }
    }
}

static void test_idx(void **state)
{
    const uint8_t labels[4] = {2, 0, 9, 12};
    char uri[1400];
    sl_contract *c, *t;
    sl_source *s;
    (void)state;
    c = contract("{\"input\": {\"shape\": [1, 2, 3]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 10}, \"preprocess\": {\"scale\": {\"factor\": 0.5}}}");
    for (int gz = 0; gz < 2; gz++) {
        const char *dir = gz ? "idxgz" : "idx";
        make_dir(dir);
        write_idx(dir, 3, labels, 3, gz);
        s = open_ok(uri_of("idx:", dir, uri, sizeof uri), c);
        assert_int_equal(read_ok(s, 2), 2);
        for (size_t i = 0; i < 12; i++)
            if (g_x[i] != (float)(40 * (i / 6) + i % 6) * 0.5f)
                fail_msg("%s: x[%zu] = %g", dir, i, (double)g_x[i]);
        assert_true(g_y[0] == 2 && g_y[1] == 0);
        assert_int_equal(read_ok(s, 2), 1);
        assert_true(g_x[0] == 40 && g_x[5] == 42.5f && g_y[0] == 9);
        assert_int_equal(read_ok(s, 2), 0);
        sl_source_close(s);
    }
    /* a label outside the classes, named by its row */
    make_dir("idxbad");
    write_idx("idxbad", 4, labels, 4, 0);
    s = open_ok(uri_of("idx:", "idxbad", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, 3), 3);
    read_refused(s, SL_ERANGE, "row 4: label 12 is outside the task's 10 classes");
    sl_source_close(s);
    /* images cut short */
    make_dir("idxcut");
    write_idx("idxcut", 3, labels, 2, 1);
    s = open_ok(uri_of("idx:", "idxcut", uri, sizeof uri), c);
    read_refused(s, SL_ETRUNCATED, "images truncated");
    sl_source_close(s);
    /* images of another size; no files; a label that is not a class */
    t = contract("{\"input\": {\"shape\": [28, 28]}, \"label\": {\"kind\": \"class\", "
                 "\"classes\": 10}}");
    open_refused(uri_of("idx:", "idx", uri, sizeof uri), t, SL_EINVAL,
                 "images of 2x3; the task's sample has 784 values");
    sl_contract_free(t);
    open_refused(uri_of("idx:", "nowhere", uri, sizeof uri), c, SL_ENOENT, "cannot open");
    t = contract("{\"input\": {\"shape\": [6]}, \"label\": {\"kind\": \"target\"}}");
    open_refused(uri_of("idx:", "idx", uri, sizeof uri), t, SL_EINVAL, "IDX labels are classes");
    sl_contract_free(t);
    sl_contract_free(c);
}

/* ---- images ---------------------------------------------------------------------------------- */

/* An 8-bit grey (@comps 1) or RGB (@comps 3) PNG. */
static void write_png(const char *rel, unsigned w, unsigned h, int comps, const uint8_t *px)
{
    char path[1024];
    png_structp png;
    png_infop info;
    FILE *f;
    path_of(rel, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    assert_non_null(png);
    info = png_create_info_struct(png);
    assert_non_null(info);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng could not write %s", rel);
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, 8, comps == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (unsigned y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(px + (size_t)y * w * comps));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    assert_int_equal(fclose(f), 0);
}

static void write_jpeg(const char *rel, unsigned w, unsigned h, const uint8_t *px)
{
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    char path[1024];
    FILE *f;
    path_of(rel, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = w, cinfo.image_height = h, cinfo.input_components = 1;
    cinfo.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, 100, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)cinfo.next_scanline * w);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    assert_int_equal(fclose(f), 0);
}

/* The change test's hook: rewrites or cuts the file it is armed for, once. */
static struct {
    const char *rel; /* the file to change, under the test's folder */
    int mode;        /* 1: rewrite as a flat grey PNG; 2: cut to half */
    int calls, changed;
} g_change;

static void change_file(const char *path, void *arg)
{
    char want[1024];
    (void)arg;
    g_change.calls++;
    path_of(g_change.rel, want, sizeof want);
    if (g_change.mode == 0 || strcmp(path, want) != 0)
        return;
    if (g_change.mode == 1) {
        static uint8_t flat[28 * 28];
        memset(flat, 200, sizeof flat);
        write_png(g_change.rel, 28, 28, 1, flat);
    } else {
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(truncate(path, st.st_size / 2), 0);
    }
    g_change.mode = 0;
    g_change.changed++;
}

/* A folder source's file that changes while it is decoded: not taken by that read (nothing
 * returned, no refusal), then taken as it is at the next read, or refused there if it is now
 * corrupt. Through the sources' hook table, between the decode and the check after it. */
static void test_folder_file_changed_while_read(void **state)
{
    static const sl__source_hooks hooks = {change_file, NULL};
    static uint8_t grey[28 * 28];
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    for (unsigned i = 0; i < 28 * 28; i++)
        grey[i] = (uint8_t)(i % 200);
    make_dir("chg");
    make_dir("chg/cat");
    make_dir("chg/dog");
    write_png("chg/cat/a.png", 28, 28, 1, grey);
    write_png("chg/dog/b.png", 28, 28, 1, grey);
    c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"cat\", "
                 "\"dog\"]}, \"preprocess\": {\"image\": {\"width\": 28, \"height\": 28}}}");
    s = open_ok(uri_of("images:", "chg", uri, sizeof uri), c);
    sl__source_set_hooks(&hooks);

    /* a.png rewritten (same size, same second) during its decode: only b.png is taken */
    g_change.rel = "chg/cat/a.png", g_change.mode = 1, g_change.calls = g_change.changed = 0;
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_int_equal(g_change.changed, 1);
    assert_int_equal(g_change.calls, 2);
    assert_true(g_y[0] == 1 && g_x[0] == 0 && g_x[201] == 1); /* b.png, dog */
    /* the next read takes a.png as it is now */
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_y[0] == 0);
    for (unsigned i = 0; i < 28 * 28; i++)
        if (g_x[i] != 200.0f)
            fail_msg("a.png's pixel %u: %g, wanted the rewritten 200", i, (double)g_x[i]);
    assert_int_equal(read_ok(s, MAXS), 0);

    /* c.png cut to half during its decode: not taken then, refused as truncated at the next
     * read, with its path */
    write_png("chg/cat/c.png", 28, 28, 1, grey);
    g_change.rel = "chg/cat/c.png", g_change.mode = 2, g_change.changed = 0;
    assert_int_equal(read_ok(s, MAXS), 0);
    assert_int_equal(g_change.changed, 1);
    read_refused(s, SL_ETRUNCATED, "chg/cat/c.png");

    sl__source_set_hooks(NULL);
    sl_source_close(s);
    sl_contract_free(c);
}

static float luma(const uint8_t *p)
{
    return (float)(0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]);
}

/* A grey 28 x 28 image (exact), an RGB 56 x 56 one to luma and halved, a grey JPEG. */
static void test_images(void **state)
{
    static uint8_t grey[28 * 28], rgb[56 * 56 * 3], flat[28 * 28];
    char uri[1400], path[1024];
    sl_contract *c;
    sl_source *s;
    (void)state;
    for (unsigned i = 0; i < 28 * 28; i++)
        grey[i] = (uint8_t)((i % 28) * 7 + (i / 28) * 3);
    for (unsigned i = 0; i < 56 * 56 * 3; i++)
        rgb[i] = (uint8_t)(i * 37 % 251);
    memset(flat, 100, sizeof flat);
    make_dir("img");
    make_dir("img/cat");
    make_dir("img/dog");
    make_dir("img/.cache"); /* skipped, though not a class */
    write_png("img/cat/a.png", 28, 28, 1, grey);
    write_png("img/cat/b.png", 56, 56, 3, rgb);
    write_jpeg("img/dog/c.jpg", 28, 28, flat);
    put_text("img/notes.txt", "files beside the class folders are not samples\n");
    /* names an application writes before it renames: never read */
    write_bytes("img/dog/d.png.tmp", "wb", "half", 4);
    write_bytes("img/dog/e.part", "wb", "half", 4);
    write_bytes("img/dog/.f.png", "wb", "half", 4);
    c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"cat\", "
                 "\"dog\", \"cow\"]}, \"preprocess\": {\"image\": {\"width\": 28, \"height\": "
                 "28}}}");
    s = open_ok(uri_of("images:", "img", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 3); /* in name order: cat/a, cat/b, dog/c */
    for (unsigned i = 0; i < 28 * 28; i++)
        if (g_x[i] != (float)grey[i])
            fail_msg("grey pixel %u: %g, wanted %u", i, (double)g_x[i], grey[i]);
    for (unsigned y = 0; y < 28; y++)
        for (unsigned x = 0; x < 28; x++) {
            /* halving samples between pixels 2x and 2x + 1 with weight 1/2, rows then columns */
            const uint8_t *p = rgb + ((size_t)(2 * y) * 56 + 2 * x) * 3;
            float top = 0.5f * luma(p) + 0.5f * luma(p + 3);
            float bottom = 0.5f * luma(p + 56 * 3) + 0.5f * luma(p + 56 * 3 + 3);
            float want = 0.5f * top + 0.5f * bottom, got = g_x[784 + y * 28 + x];
            if (fabsf(got - want) > 1e-3f)
                fail_msg("resized pixel %u,%u: %g, wanted %g", x, y, (double)got, (double)want);
        }
    for (unsigned i = 0; i < 784; i++)
        if (fabsf(g_x[2 * 784 + i] - 100) > 1.0f)
            fail_msg("jpeg pixel %u: %g", i, (double)g_x[2 * 784 + i]);
    assert_true(g_y[0] == 0 && g_y[1] == 0 && g_y[2] == 1);
    assert_int_equal(read_ok(s, MAXS), 0);

    /* growth: a file renamed into place is read once, by the next read */
    write_png("img/dog/d.png.tmp", 28, 28, 1, flat);
    assert_int_equal(read_ok(s, MAXS), 0);
    path_of("img/dog/d.png.tmp", path, sizeof path);
    {
        char done[1024];
        path_of("img/dog/d.png", done, sizeof done);
        assert_int_equal(rename(path, done), 0);
    }
    make_dir("img/cow");
    write_png("img/cow/g.png", 28, 28, 1, grey);
    assert_int_equal(read_ok(s, 1), 1); /* one at a time, in name order */
    assert_true(g_y[0] == 2 && g_x[1] == 7);
    assert_int_equal(read_ok(s, 1), 1);
    assert_true(g_y[0] == 1 && g_x[0] == 100 && g_x[783] == 100);
    assert_int_equal(read_ok(s, MAXS), 0);

    /* a corrupt image is refused with its path; the source stays refused once it is gone */
    {
        size_t len;
        uint8_t *b;
        FILE *f;
        write_png("img/cat/h.png", 56, 56, 3, rgb);
        path_of("img/cat/h.png", path, sizeof path);
        f = fopen(path, "rb");
        assert_non_null(f);
        b = malloc(4096);
        assert_non_null(b);
        len = fread(b, 1, 4096, f);
        fclose(f);
        assert_true(len > 100);
        write_bytes("img/cat/h.png", "wb", b, len / 2);
        free(b);
        read_refused(s, SL_ETRUNCATED, "img/cat/h.png");
        assert_int_equal(unlink(path), 0);
        read_refused(s, SL_ETRUNCATED, "img/cat/h.png");
    }
    sl_source_close(s);
    /* opened anew: everything is read again (h.png is gone) */
    s = open_ok(uri_of("images:", "img", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 5);
    sl_source_close(s);

    /* a folder that is not one of the classes; no class folder; no folder */
    make_dir("img/bird");
    open_refused(uri_of("images:", "img", uri, sizeof uri), c, SL_ERANGE,
                 "folder \"bird\" is not one of the task's classes");
    make_dir("noclass");
    open_refused(uri_of("images:", "noclass", uri, sizeof uri), c, SL_ENOENT,
                 "no class folders (one subfolder per class)");
    open_refused(uri_of("images:", "absent", uri, sizeof uri), c, SL_ENOENT,
                 "cannot open the folder");
    sl_contract_free(c);

    /* a class that cannot be a folder's name: "..", "." or a path would read files outside the
     * class folders (here: the test's folder, beside "trav") */
    {
        uint8_t px[4] = {1, 2, 3, 4};
        make_dir("trav");
        make_dir("trav/x");
        write_png("trav/x/a.png", 2, 2, 1, px);
        write_png("outside.png", 2, 2, 1, px);
        c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"..\", "
                     "\"x\"]}, \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2}}}");
        open_refused(uri_of("images:", "trav", uri, sizeof uri), c, SL_EINVAL,
                     "class \"..\" cannot be a folder's name");
        sl_contract_free(c);
        c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"x\", "
                     "\"x/y\"]}, \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2}}}");
        open_refused(uri_of("images:", "trav", uri, sizeof uri), c, SL_EINVAL,
                     "class \"x/y\" cannot be a folder's name");
        sl_contract_free(c);
    }

    /* RGB: a colour image halved per channel, a grey one to three equal channels; a scale */
    {
        uint8_t small[8 * 8 * 3], g4[16];
        for (unsigned i = 0; i < sizeof small; i++)
            small[i] = (uint8_t)(i * 11 % 256);
        for (unsigned i = 0; i < 16; i++)
            g4[i] = (uint8_t)(i * 16);
        make_dir("rgb");
        make_dir("rgb/0");
        make_dir("rgb/1");
        write_png("rgb/0/colour.png", 8, 8, 3, small);
        write_png("rgb/1/grey.png", 4, 4, 1, g4);
        c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": 2}, "
                     "\"preprocess\": {\"image\": {\"width\": 4, \"height\": 4, \"channels\": 3}, "
                     "\"scale\": {\"factor\": 0.5}}}");
        assert_int_equal(c->sample_size, 48);
        s = open_ok(uri_of("images:", "rgb", uri, sizeof uri), c);
        assert_int_equal(read_ok(s, MAXS), 2);
        for (unsigned ch = 0; ch < 3; ch++)
            for (unsigned y = 0; y < 4; y++)
                for (unsigned x = 0; x < 4; x++) {
                    const uint8_t *p = small + ((size_t)(2 * y) * 8 + 2 * x) * 3 + ch;
                    float top = 0.5f * p[0] + 0.5f * p[3];
                    float bottom = 0.5f * p[24] + 0.5f * p[27];
                    float want = (0.5f * top + 0.5f * bottom) * 0.5f;
                    float got = g_x[(ch * 4 + y) * 4 + x];
                    if (fabsf(got - want) > 1e-4f)
                        fail_msg("rgb %u %u,%u: %g, wanted %g", ch, x, y, (double)got,
                                 (double)want);
                    assert_true(g_x[48 + (ch * 4 + y) * 4 + x] == g4[y * 4 + x] * 0.5f);
                }
        assert_true(g_y[0] == 0 && g_y[1] == 1);
        sl_source_close(s);
        /* a folder source needs an image contract, and classes */
        open_refused(uri_of("wav:", "rgb", uri, sizeof uri), c, SL_EINVAL,
                     "audio needs the contract's preprocess.audio");
        sl_contract_free(c);
        c = contract("{\"input\": {\"shape\": [48]}, \"label\": {\"kind\": \"class\", "
                     "\"classes\": 2}}");
        open_refused(uri_of("images:", "rgb", uri, sizeof uri), c, SL_EINVAL,
                     "images need the contract's preprocess.image");
        sl_contract_free(c);
        c = contract("{\"input\": {}, \"label\": {\"kind\": \"target\"}, \"preprocess\": "
                     "{\"image\": {\"width\": 4, \"height\": 4}}}");
        open_refused(uri_of("images:", "rgb", uri, sizeof uri), c, SL_EINVAL,
                     "a folder per class needs a class label");
        sl_contract_free(c);
    }
}

/* ---- WAV ------------------------------------------------------------------------------------- */

static void put_le(uint8_t *p, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A 16-bit mono PCM WAV of @n samples at @rate. */
static void write_wav(const char *rel, unsigned rate, const int16_t *pcm, size_t n)
{
    size_t len = 44 + 2 * n;
    uint8_t *b = malloc(len);
    assert_non_null(b);
    memcpy(b, "RIFF", 4);
    put_le(b + 4, (uint32_t)(len - 8), 4);
    memcpy(b + 8, "WAVEfmt ", 8);
    put_le(b + 16, 16, 4);
    put_le(b + 20, 1, 2);
    put_le(b + 22, 1, 2);
    put_le(b + 24, rate, 4);
    put_le(b + 28, rate * 2, 4);
    put_le(b + 32, 2, 2);
    put_le(b + 34, 16, 2);
    memcpy(b + 36, "data", 4);
    put_le(b + 40, (uint32_t)(2 * n), 4);
    for (size_t i = 0; i < n; i++)
        put_le(b + 44 + 2 * i, (uint16_t)pcm[i], 2);
    write_bytes(rel, "wb", b, len);
    free(b);
}

static void sine(int16_t *pcm, size_t n, double hz)
{
    for (size_t i = 0; i < n; i++)
        pcm[i] =
            (int16_t)lrint(12000.0 * sin(2 * 3.14159265358979323846 * hz * (double)i / 16000.0));
}

/* The features the source must give for @n samples of @pcm: log-mel, then * 0.5. */
static void expected_logmel(const sl_contract *c, const int16_t *pcm, size_t n, float *out)
{
    sl_logmel_config lc = {c->sample_rate, c->n_fft, c->hop, c->n_mels,
                           c->frames,      c->fmin,  c->fmax};
    float *f = malloc(c->raw_size * sizeof *f);
    size_t m = n < c->raw_size ? n : c->raw_size;
    assert_non_null(f);
    for (size_t i = 0; i < m; i++)
        f[i] = (float)pcm[i] / 32768.0f;
    assert_int_equal(sl_logmel(&lc, f, m, out), SL_OK);
    for (size_t i = 0; i < c->sample_size; i++)
        out[i] *= 0.5f;
    free(f);
}

/* The mel band with the most energy over the frames. */
static size_t loudest_band(const float *x, size_t mels, size_t frames)
{
    size_t best = 0;
    double best_sum = -INFINITY;
    for (size_t m = 0; m < mels; m++) {
        double sum = 0;
        for (size_t t = 0; t < frames; t++)
            sum += x[m * frames + t];
        if (sum > best_sum)
            best_sum = sum, best = m;
    }
    return best;
}

static void test_wav(void **state)
{
    static int16_t low[2112], high[3000], shortclip[1000];
    static float want[3 * 440];
    char uri[1400];
    sl_contract *c;
    sl_source *s;
    (void)state;
    c = contract("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"low\", "
                 "\"high\"]}, \"preprocess\": {\"audio\": {\"frames\": 11}, \"scale\": "
                 "{\"factor\": 0.5}}}");
    assert_int_equal(c->raw_size, 2112);
    assert_int_equal(c->sample_size, 440);
    sine(low, 2112, 1000);
    sine(high, 3000, 4000);      /* longer than a clip: its first 2112 samples */
    sine(shortclip, 1000, 4000); /* shorter: zero-padded */
    make_dir("wav");
    make_dir("wav/low");
    make_dir("wav/high");
    write_wav("wav/low/a.wav", 16000, low, 2112);
    write_wav("wav/high/b.wav", 16000, high, 3000);
    write_wav("wav/high/c.wav", 16000, shortclip, 1000);
    write_bytes("wav/high/d.wav.part", "wb", "RIFF", 4);
    s = open_ok(uri_of("wav:", "wav", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 3); /* high/b, high/c, low/a */
    expected_logmel(c, high, 3000, want);
    expected_logmel(c, shortclip, 1000, want + 440);
    expected_logmel(c, low, 2112, want + 880);
    expect_values(g_x, want, 3 * 440, 1e-5f, "log-mel");
    assert_true(g_y[0] == 1 && g_y[1] == 1 && g_y[2] == 0);
    /* a real spectrum: 1 kHz lands in a lower mel band than 4 kHz (bands of ~69 mel) */
    assert_in_range(loudest_band(g_x + 880, 40, 11), 10, 17);
    assert_in_range(loudest_band(g_x, 40, 11), 27, 34);
    assert_int_equal(read_ok(s, MAXS), 0);
    /* a clip at another rate is refused, saying so */
    write_wav("wav/low/e.wav", 22050, low, 2112);
    read_refused(s, SL_EUNSUPPORTED,
                 "wav/low/e.wav: 16-bit PCM, mono, 22050 Hz; the task wants 16000 Hz");
    sl_source_close(s);
    /* a clip cut short (its data chunk says more than the file holds) */
    make_dir("wavcut");
    make_dir("wavcut/high");
    write_wav("wavcut/high/a.wav", 16000, high, 3000);
    {
        char path[1024];
        path_of("wavcut/high/a.wav", path, sizeof path);
        assert_int_equal(truncate(path, 44 + 1000), 0);
    }
    s = open_ok(uri_of("wav:", "wavcut", uri, sizeof uri), c);
    read_refused(s, SL_ETRUNCATED, "wavcut/high/a.wav");
    sl_source_close(s);
    sl_contract_free(c);
}

/* ---- SQLite spool ---------------------------------------------------------------------------- */

static void exec_sql(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg);
}

static void test_sqlite(void **state)
{
    char uri[1400], path[1024];
    sqlite3 *db = NULL;
    sl_contract *c;
    sl_source *s;
    (void)state;
    path_of("spool.db", path, sizeof path);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_sql(db, "CREATE TABLE samples (id INTEGER PRIMARY KEY AUTOINCREMENT, label INTEGER NOT "
                 "NULL, hum REAL NOT NULL, temp REAL NOT NULL, cls INTEGER);"
                 "INSERT INTO samples (label, hum, temp, cls) VALUES (2, 0.25, 21.5, 0);"
                 "INSERT INTO samples (label, hum, temp, cls) VALUES (0, 0.5, 22.5, 1);"
                 "INSERT INTO samples (label, hum, temp, cls) VALUES (1, 0.75, 23.5, 2);");
    c = contract("{\"input\": {\"features\": [\"temp\", \"hum\"]}, \"label\": {\"kind\": "
                 "\"class\", \"classes\": 3}, \"preprocess\": {\"standardize\": {\"mean\": [20, "
                 "0], \"std\": [2, 0.25]}}}");
    s = open_ok(uri_of("sqlite:", "spool.db", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 3);
    {
        const float x[6] = {0.75f, 1, 1.25f, 2, 1.75f, 3}, y[3] = {2, 0, 1};
        expect_values(g_x, x, 6, 1e-6f, "spool x");
        expect_values(g_y, y, 3, 0, "spool y");
    }
    assert_int_equal(read_ok(s, MAXS), 0);
    /* growth: rows committed later come with the next read, each once */
    exec_sql(db, "INSERT INTO samples (label, hum, temp, cls) VALUES (1, 1, 30, 0);"
                 "INSERT INTO samples (label, hum, temp, cls) VALUES (2, 1.25, 32, 0);");
    assert_int_equal(read_ok(s, 1), 1);
    assert_true(g_x[0] == 5 && g_x[1] == 4 && g_y[0] == 1);
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_x[0] == 6 && g_x[1] == 5 && g_y[0] == 2);
    assert_int_equal(read_ok(s, MAXS), 0);
    /* a label outside the classes */
    exec_sql(db, "INSERT INTO samples (label, hum, temp, cls) VALUES (3, 1, 1, 0);");
    read_refused(s, SL_ERANGE, "label 3 is outside the task's 3 classes");
    sl_source_close(s);
    /* ?label= names another column */
    s = open_ok(uri_of("sqlite:", "spool.db?label=cls", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 6);
    assert_true(g_y[0] == 0 && g_y[1] == 1 && g_y[2] == 2 && g_y[5] == 0);
    sl_source_close(s);
    open_refused(uri_of("sqlite:", "spool.db?table=frames", uri, sizeof uri), c, SL_ENOENT,
                 "frames");
    sl_contract_free(c);

    /* the features in one blob of float32 values; regression targets */
    exec_sql(db, "CREATE TABLE frames (id INTEGER PRIMARY KEY AUTOINCREMENT, y REAL NOT NULL, "
                 "x BLOB NOT NULL);"
                 "INSERT INTO frames (y, x) VALUES (-0.5, x'0000803f000000c0');"  /* 1, -2 */
                 "INSERT INTO frames (y, x) VALUES (2.5, x'0000404000008040');"); /* 3, 4 */
    c = contract("{\"input\": {\"shape\": [2]}, \"label\": {\"kind\": \"target\", \"column\": "
                 "\"y\"}}");
    s = open_ok(uri_of("sqlite:", "spool.db?table=frames&blob=x", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {1, -2, 3, 4}, y[2] = {-0.5f, 2.5f};
        expect_values(g_x, x, 4, 0, "blob x");
        expect_values(g_y, y, 2, 0, "blob y");
    }
    exec_sql(db, "INSERT INTO frames (y, x) VALUES (7, x'0000a0400000c040');"); /* 5, 6 */
    assert_int_equal(read_ok(s, MAXS), 1);
    assert_true(g_x[0] == 5 && g_x[1] == 6 && g_y[0] == 7);
    sl_source_close(s);
    /* without a blob, the contract must name the feature columns */
    open_refused(uri_of("sqlite:", "spool.db?table=frames", uri, sizeof uri), c, SL_EINVAL,
                 "name the feature columns (input.features) or a blob column");
    sl_contract_free(c);

    /* a label of two columns: the targets in the contract's order */
    exec_sql(db, "CREATE TABLE multi (id INTEGER PRIMARY KEY AUTOINCREMENT, t2 REAL, a REAL, t1 "
                 "REAL, b REAL);"
                 "INSERT INTO multi (t2, a, t1, b) VALUES (20, 1, 10, 2);"
                 "INSERT INTO multi (t2, a, t1, b) VALUES (40, 3, 30, 4);");
    c = contract("{\"input\": {\"features\": [\"a\", \"b\"]}, \"label\": {\"kind\": \"target\", "
                 "\"columns\": [\"t1\", \"t2\"]}}");
    s = open_ok(uri_of("sqlite:", "spool.db?table=multi", uri, sizeof uri), c);
    assert_int_equal(read_ok(s, MAXS), 2);
    {
        const float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
        expect_values(g_x, x, 4, 0, "multi x");
        expect_values(g_y, y, 4, 0, "multi y");
    }
    sl_source_close(s);
    open_refused(uri_of("sqlite:", "spool.db?table=multi&blob=a", uri, sizeof uri), c, SL_EINVAL,
                 "a blob spool has one label column");
    sl_contract_free(c);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- URIs ------------------------------------------------------------------------------------ */

static void test_check_uri(void **state)
{
    static const char *const good[] = {
        "csv:data.csv",
        "csv:/var/lib/app/log.csv?label=y&delimiter=tab&skip=2&timestamp=t",
        "csv:d.csv?delimiter=;",
        "csv:d.csv?delimiter=space&kind=class&classes=3",
        "npy:x.npy?y=y.npy",
        "npz:d.npz",
        "npz:d.npz?x=feat&y=lab",
        "idx:/usr/share/datasets/fashion-mnist",
        "images:/data/photos",
        "wav:/data/clips",
        "sqlite:/data/app.db?table=t&label=l&blob=b",
    };
    static const struct {
        const char *uri, *words;
    } bad[] = {
        {"", "a data source is csv:, npy:, npz:, idx:, images:, wav: or sqlite:"},
        {"http://example.com/data.csv", "a data source is"},
        {"data.csv", "a data source is"},
        {"CSV:data.csv", "a data source is"},
        {"csv:", "a path, then ?options"},
        {"csv:?label=y", "a path, then ?options"},
        {"csv:d.csv?delimiter=|", "delimiter=|: one of , ; tab space"},
        {"csv:d.csv?skip=x", "skip=x: a number of lines"},
        {"csv:d.csv?skip=-1", "skip=-1"},
        {"csv:d.csv?labels=y", "unknown option \"labels\""},
        {"csv:d.csv?lab=y", "unknown option \"lab\""},
        {"csv:d.csv?label", "\"label\" is not key=value"},
        {"csv:d.csv?label=", "is not key=value"},
        {"csv:d.csv?=y", "is not key=value"},
        {"csv:d.csv?label=a&label=b", "option \"label\" given twice"},
        {"npy:x.npy", "?y=FILE names the labels' array"},
        {"npy:x.npy?x=a.npy&y=b.npy", "unknown option \"x\""},
        {"npz:d.npz?label=y", "unknown option \"label\""},
        {"idx:/d?x=1", "unknown option \"x\""},
        {"images:/d?classes=3", "unknown option \"classes\""},
        {"wav:/d?rate=8000", "unknown option \"rate\""},
        {"sqlite:/d.db?delimiter=,", "unknown option \"delimiter\""},
    };
    char err[512];
    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        err[0] = '\0';
        if (sl_source_check_uri(good[i], err, sizeof err) != SL_OK)
            fail_msg("%s refused: %s", good[i], err);
        assert_int_equal(sl_source_is_uri(good[i]), 1);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (sl_source_check_uri(bad[i].uri, err, sizeof err) != SL_EINVAL ||
            strstr(err, bad[i].words) == NULL)
            fail_msg("%s: \"%s\", wanted SL_EINVAL and \"%s\"", bad[i].uri, err, bad[i].words);
    }
    assert_int_equal(sl_source_check_uri(NULL, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_source_check_uri("csv:x?skip=1", NULL, 0), SL_OK);
    assert_int_equal(sl_source_is_uri(NULL), 0);
    assert_int_equal(sl_source_is_uri("data.csv"), 0);
    assert_int_equal(sl_source_is_uri("sqlite:"), 1);
    /* sources: NULL arguments; a NULL source closes */
    {
        sl_contract *c = contract("{\"input\": {\"shape\": [2]}, \"label\": {\"kind\": "
                                  "\"target\"}}");
        sl_source *s = NULL;
        size_t n;
        assert_int_equal(sl_source_open(NULL, c, &s, err, sizeof err), SL_EINVAL);
        assert_int_equal(sl_source_open("csv:x.csv", NULL, &s, err, sizeof err), SL_EINVAL);
        assert_int_equal(sl_source_open("csv:x.csv", c, NULL, err, sizeof err), SL_EINVAL);
        assert_int_equal(sl_source_read(NULL, g_x, g_y, 1, &n, err, sizeof err), SL_EINVAL);
        sl_source_close(NULL);
        sl_contract_free(c);
    }
}

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(g_dir, sizeof g_dir, "test_source");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(g_dir);
    return 0;
}

/* A finite raw value that the contract's scale or standardisation makes infinite: refused
 * like a raw non-finite value, with the sample and value that overflowed. */
static void test_overflow_after_preprocessing(void **state)
{
    char uri[600];
    sl_contract *c = contract("{\"input\":{\"features\":[\"a\",\"b\"]},"
                              "\"label\":{\"kind\":\"target\",\"column\":\"y\"},"
                              "\"preprocess\":{\"standardize\":{\"mean\":0,\"std\":1e-30}}}");
    sl_source *s;
    (void)state;
    put_text("big.csv", "a,b,y\n1e-31,0,1\n2e-31,1e10,2\n");
    s = open_ok(uri_of("csv:", "big.csv", uri, sizeof uri), c);
    read_refused(s, SL_ENONFINITE, "sample 2, value 1: not finite after the contract's scale");
    sl_source_close(s);
    sl_contract_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_columns_and_labels),
        cmocka_unit_test(test_csv_options),
        cmocka_unit_test(test_csv_multi_column_labels),
        cmocka_unit_test(test_csv_refusals),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_npz),
        cmocka_unit_test(test_idx),
        cmocka_unit_test(test_images),
        cmocka_unit_test(test_folder_file_changed_while_read),
        cmocka_unit_test(test_wav),
        cmocka_unit_test(test_sqlite),
        cmocka_unit_test(test_check_uri),
        cmocka_unit_test(test_overflow_after_preprocessing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
