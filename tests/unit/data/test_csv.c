/* CSV reader: layouts, growth, changed files, every refusal, the real wine data set. */
#include <math.h>
#include <sys/stat.h>

#include "../../support/sl_test.h"
#include "starling/csv.h"

#ifndef WINE_CSV /* Debian python3-sklearn */
#define WINE_CSV "/usr/lib/python3/dist-packages/sklearn/datasets/data/wine_data.csv"
#endif

static char dir[512];
static char path[600];

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "data_csv");
    snprintf(path, sizeof path, "%s/data.csv", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(dir);
    return 0;
}

static void write_bytes(const char *p, const char *mode, const void *data, size_t len)
{
    FILE *f = fopen(p, mode);
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void put(const char *text)
{
    write_bytes(path, "wb", text, strlen(text));
}

static void append(const char *text)
{
    write_bytes(path, "ab", text, strlen(text));
}

static void check_err(int rc, int want, const char *err, const char *needle)
{
    if (rc != want || strstr(err, needle) == NULL)
        print_error("status %d (want %d), message \"%s\" (want \"%s\")\n", rc, want, err, needle);
    assert_int_equal(rc, want);
    assert_non_null(strstr(err, needle));
}

static sl_csv *open_ok(const sl_csv_options *o)
{
    char err[512] = "";
    sl_csv *c = NULL;
    int rc = sl_csv_open(path, o, &c, err, sizeof err);
    if (rc != SL_OK)
        print_error("open: %s\n", err);
    assert_int_equal(rc, SL_OK);
    assert_non_null(c);
    return c;
}

/* Open must refuse with @want and a message holding each of @needle, @needle2. */
static void open_refused(const sl_csv_options *o, int want, const char *needle, const char *needle2)
{
    char err[512] = "";
    sl_csv *c = (sl_csv *)&c; /* must stay untouched */
    int rc = sl_csv_open(path, o, &c, err, sizeof err);
    check_err(rc, want, err, needle);
    if (needle2 != NULL)
        check_err(rc, want, err, needle2);
    assert_ptr_equal(c, (sl_csv *)&c);
}

static size_t read_ok(sl_csv *c, float *x, float *y, size_t max)
{
    char err[512] = "";
    size_t n = 12345;
    int rc = sl_csv_read(c, x, y, max, &n, err, sizeof err);
    if (rc != SL_OK)
        print_error("read: %s\n", err);
    assert_int_equal(rc, SL_OK);
    assert_true(n <= max);
    return n;
}

static void read_refused(sl_csv *c, int want, const char *needle)
{
    char err[512] = "";
    float x[64], y[8];
    size_t n = 12345;
    uint64_t before = sl_csv_rows_read(c);
    int rc = sl_csv_read(c, x, y, 8, &n, err, sizeof err);
    check_err(rc, want, err, needle);
    assert_int_equal(n, 12345);
    assert_int_equal(sl_csv_rows_read(c), before);
}

static sl_csv_options class_options(const char *label, size_t classes)
{
    sl_csv_options o;
    sl_csv_options_init(&o);
    o.label = label;
    o.classes = classes;
    return o;
}

static void test_header_label_features_timestamp(void **state)
{
    sl_csv_options o = class_options("label", 3);
    const char *order[] = {"c", "a"};
    float x[16], y[4];
    sl_csv *c;
    (void)state;
    put("time,a,b,label,c\n"
        "2024-01-01T00:00,1.5,-2,2,3e2\n"
        "\n"
        "2024-01-01T00:01, 4 ,5,0,6\n");
    o.timestamp = "time";
    c = open_ok(&o);
    assert_int_equal(sl_csv_features(c), 3);
    assert_string_equal(sl_csv_feature_name(c, 0), "a");
    assert_string_equal(sl_csv_feature_name(c, 1), "b");
    assert_string_equal(sl_csv_feature_name(c, 2), "c");
    assert_null(sl_csv_feature_name(c, 3));
    assert_int_equal(read_ok(c, x, y, 4), 2);
    assert_true(x[0] == 1.5f && x[1] == -2.0f && x[2] == 300.0f && y[0] == 2.0f);
    assert_true(x[3] == 4.0f && x[4] == 5.0f && x[5] == 6.0f && y[1] == 0.0f);
    assert_int_equal(sl_csv_rows_read(c), 2);
    assert_int_equal(read_ok(c, x, y, 4), 0);
    sl_csv_close(c);

    /* the given features, in the given order; unread columns may hold anything */
    o.timestamp = NULL;
    o.features = order;
    o.nfeatures = 2;
    c = open_ok(&o);
    assert_int_equal(sl_csv_features(c), 2);
    assert_string_equal(sl_csv_feature_name(c, 0), "c");
    assert_string_equal(sl_csv_feature_name(c, 1), "a");
    assert_int_equal(read_ok(c, x, y, 4), 2);
    assert_true(x[0] == 300.0f && x[1] == 1.5f && x[2] == 6.0f && x[3] == 4.0f);
    sl_csv_close(c);

    /* a header and no rows: 0 samples, not an error */
    put("a,label\n");
    o = class_options("label", 3);
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 4), 0);
    assert_int_equal(sl_csv_rows_read(c), 0);
    sl_csv_close(c);
}

static void test_delimiters(void **state)
{
    const char *files[] = {"a\tlabel\tb\n1\t1\t2\n", "a;label;b\n1;1;2\n", "a label b\n1 1 2\n"};
    const char delims[] = {'\t', ';', ' '};
    float x[4], y[2];
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        sl_csv_options o = class_options("label", 2);
        sl_csv *c;
        put(files[i]);
        o.delimiter = delims[i];
        c = open_ok(&o);
        assert_int_equal(sl_csv_features(c), 2);
        assert_int_equal(read_ok(c, x, y, 2), 1);
        assert_true(x[0] == 1.0f && x[1] == 2.0f && y[0] == 1.0f);
        sl_csv_close(c);
        /* read with the default ',' the line is one column: no label column */
        o.delimiter = 0;
        open_refused(&o, SL_ENOENT, "no label column 'label'", "the file has:");
    }
}

static void test_quoted_fields(void **state)
{
    sl_csv_options o = class_options("label", 2);
    const char *order[] = {"a,1", "b\"q"};
    float x[8], y[4];
    sl_csv *c;
    (void)state;
    /* names with a delimiter and a quote; values quoted; a note spanning two lines */
    put("\"a,1\",\"b\"\"q\",note,label\n"
        "\"1.5\",2,\"hello, \"\"world\"\"\nsecond line\",\"1\"\n"
        "3,\"4\",\"\",0\n"
        "5,6,x,\"2\"\n");
    o.features = order;
    o.nfeatures = 2;
    c = open_ok(&o);
    assert_string_equal(sl_csv_feature_name(c, 0), "a,1");
    assert_string_equal(sl_csv_feature_name(c, 1), "b\"q");
    assert_int_equal(read_ok(c, x, y, 2), 2); /* a call meeting the bad row returns none */
    assert_true(x[0] == 1.5f && x[1] == 2.0f && y[0] == 1.0f);
    assert_true(x[2] == 3.0f && x[3] == 4.0f && y[1] == 0.0f);
    /* the line count went through the quoted newline: the bad row is line 5 */
    read_refused(c, SL_ERANGE, "line 5, column 4 (label): not a class in [0, 2): '2'");
    sl_csv_close(c);
}

static void test_crlf_and_bom(void **state)
{
    sl_csv_options o = class_options("label", 2);
    float x[4], y[4];
    sl_csv *c;
    (void)state;
    put("\xef\xbb\xbf"
        "a,label\r\n1,1\r\n\"2\",0\r\n3,1\r");
    c = open_ok(&o);
    assert_string_equal(sl_csv_feature_name(c, 0), "a"); /* not "\xef\xbb\xbf" "a" */
    /* the last line's CR may be the start of a CRLF: not read yet */
    assert_int_equal(read_ok(c, x, y, 4), 2);
    assert_true(x[0] == 1.0f && y[0] == 1.0f && x[1] == 2.0f && y[1] == 0.0f);
    append("\n");
    assert_int_equal(read_ok(c, x, y, 4), 1);
    assert_true(x[0] == 3.0f && y[0] == 1.0f);
    sl_csv_close(c);
}

static void test_class_names(void **state)
{
    sl_csv_options o = class_options("species", 3);
    const char *names[] = {"setosa", "versicolor", "virginica"};
    float x[8], y[4];
    sl_csv *c;
    (void)state;
    put("len,species\n1,virginica\n2, setosa\n3,\"versicolor\"\n4,1\n5,3\n");
    o.class_names = names;
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 4), 4);
    /* a name, or (no name matching) an index in [0, classes) */
    assert_true(y[0] == 2.0f && y[1] == 0.0f && y[2] == 1.0f && y[3] == 1.0f);
    read_refused(c, SL_ERANGE,
                 "line 6, column 2 (species): unknown class name (the classes are: "
                 "setosa, versicolor, virginica): '3'");
    sl_csv_close(c);
}

static void test_regression_targets(void **state)
{
    sl_csv_options o;
    float x[8], y[4];
    sl_csv *c;
    (void)state;
    sl_csv_options_init(&o);
    o.label = "target";
    o.label_kind = SL_CSV_TARGET;
    put("target,a\n-1.25,0\n3e-2,1\n151,2\n");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 4), 3);
    assert_true(y[0] == -1.25f && y[1] == 0.03f && y[2] == 151.0f);
    assert_true(x[0] == 0.0f && x[1] == 1.0f && x[2] == 2.0f);
    sl_csv_close(c);
    put("target,a\ninf,0\n");
    c = open_ok(&o);
    read_refused(c, SL_ENONFINITE, "line 2, column 1 (target): not a finite number: 'inf'");
    sl_csv_close(c);
}

static void test_growth(void **state)
{
    sl_csv_options o = class_options("label", 10);
    float x[16], y[8];
    sl_csv *c;
    (void)state;
    put("a,b,label\n1,1,1\n2,2,2\n3,3,3\n");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 8), 3);
    assert_true(y[0] == 1.0f && y[1] == 2.0f && y[2] == 3.0f);
    assert_int_equal(read_ok(c, x, y, 8), 0);
    append("4,4,4\n5,5,5\n6,6");
    assert_int_equal(read_ok(c, x, y, 8), 2);
    assert_true(x[0] == 4.0f && y[0] == 4.0f && x[2] == 5.0f && y[1] == 5.0f);
    assert_int_equal(read_ok(c, x, y, 8), 0); /* "6,6" is half written */
    append(",6"); /* still no newline: "6,6,6" could go on as "6,6,61" */
    assert_int_equal(read_ok(c, x, y, 8), 0);
    append("\n");
    assert_int_equal(read_ok(c, x, y, 8), 1);
    assert_true(x[0] == 6.0f && x[1] == 6.0f && y[0] == 6.0f);
    assert_int_equal(sl_csv_rows_read(c), 6);
    sl_csv_close(c);
}

static void test_replaced_and_truncated(void **state)
{
    sl_csv_options o = class_options("label", 10);
    char other[700];
    float x[16], y[8];
    sl_csv *c;
    (void)state;
    snprintf(other, sizeof other, "%s/other.csv", dir);

    /* replaced by another file (the rename an application does to write atomically) */
    put("a,label\n1,1\n2,2\n");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 1), 1);
    write_bytes(other, "wb", "a,label\n1,1\n2,2\n3,3\n", 20);
    assert_int_equal(rename(other, path), 0);
    read_refused(c, SL_ESTATE, "the file changed while it was read");
    read_refused(c, SL_ESTATE, "the file changed while it was read"); /* and stays so */
    sl_csv_close(c);

    /* removed */
    c = open_ok(&o);
    assert_int_equal(unlink(path), 0);
    read_refused(c, SL_ESTATE, "the file changed while it was read");
    sl_csv_close(c);

    /* truncated below the position read */
    put("a,label\n1,1\n2,2\n3,3\n");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 8), 3);
    assert_int_equal(truncate(path, 14), 0);
    read_refused(c, SL_ESTATE, "the file changed while it was read (truncated");
    sl_csv_close(c);

    /* truncated and written again past the position: the row end moved */
    put("a,label\n1,1\n2,2\n");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 8), 2);
    put("a,label\n11,1\n2,2\n3,3\n");
    read_refused(c, SL_ESTATE, "the file changed while it was read");
    sl_csv_close(c);

    /* truncated within the unread part only: nothing read was lost */
    put("a,label\n1,1\n2,2");
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 8), 1);
    assert_int_equal(truncate(path, 12), 0);
    assert_int_equal(read_ok(c, x, y, 8), 0);
    sl_csv_close(c);
}

static void test_open_refusals(void **state)
{
    sl_csv_options o = class_options("label", 3);
    const char *given[] = {"a", "b"};
    const char *cols[] = {"a", "label"};
    (void)state;
    open_refused(&o, SL_ENOENT, "data.csv: no such file", NULL);
    put("");
    open_refused(&o, SL_ETRUNCATED, "data.csv: the file is empty", NULL);
    put("a,label");
    open_refused(&o, SL_ETRUNCATED, "line 1: the header line has no newline", NULL);
    put("\n");
    open_refused(&o, SL_ESYNTAX, "line 1: a blank header", NULL);
    put("a,label,a\n1,2,3\n");
    open_refused(&o, SL_EDUPLICATE, "column 'a' is named twice (columns 1 and 3)", NULL);
    put("a,,label\n");
    open_refused(&o, SL_ESYNTAX, "line 1, column 2: an empty column name", NULL);
    put("x,y,z\n1,2,3\n");
    open_refused(&o, SL_ENOENT, "data.csv: no label column 'label' (the file has: x, y, z)", NULL);
    put("a,b,label\n1,2,0\n");
    o.timestamp = "when";
    open_refused(&o, SL_ENOENT, "no timestamp column 'when' (the file has: a, b, label)", NULL);
    o.timestamp = NULL;
    given[1] = "c";
    o.features = given;
    o.nfeatures = 2;
    open_refused(&o, SL_ENOENT, "no feature column 'c' (the file has: a, b, label)", NULL);
    given[1] = "a";
    open_refused(&o, SL_EDUPLICATE, "feature 'a' is given twice", NULL);
    given[1] = "label";
    open_refused(&o, SL_EINVAL, "feature 'label' is the label column", NULL);
    o.features = NULL;
    put("label\n1\n");
    open_refused(&o, SL_EINVAL, "no feature column (the file has: label)", NULL);
    put("skipped\n");
    o.skip_lines = 2;
    open_refused(&o, SL_ETRUNCATED, "line 2: the file ends within the 2 lines to skip", NULL);
    o.skip_lines = 1;
    open_refused(&o, SL_ETRUNCATED, "line 2: no header line", NULL);
    o.skip_lines = 0;

    /* options */
    put("a,label\n1,1\n");
    o.label = NULL;
    open_refused(&o, SL_EINVAL, "the label column is not named", NULL);
    o.label = "label";
    o.delimiter = '|';
    open_refused(&o, SL_EINVAL, "delimiter", NULL);
    o.delimiter = ',';
    o.classes = 0;
    open_refused(&o, SL_EINVAL, "0 classes", NULL);
    o.classes = 2;
    o.header = 0;
    open_refused(&o, SL_EINVAL, "the column names must be given", NULL);
    o.columns = cols;
    o.ncolumns = 2;
    cols[1] = "a";
    open_refused(&o, SL_EDUPLICATE, "column 'a' is named twice", NULL);
    {
        const char *names[] = {"x", "x"};
        cols[1] = "label";
        o.class_names = names;
        open_refused(&o, SL_EDUPLICATE, "class name 'x' is given twice", NULL);
    }
}

/* Each bad row is refused with its reason, on every call, and rows before it
 * in the same call are not returned. */
static void test_row_refusals(void **state)
{
    static const struct {
        const char *row;
        int status;
        const char *needle;
    } bad[] = {
        {"1,2\n", SL_ECOUNT, "line 3: 2 fields where the file has 3 columns"},
        {"1,2,0,4\n", SL_ECOUNT, "line 3: more than the 3 fields of a row"},
        {"1,,0\n", SL_ESYNTAX, "line 3, column 2 (b): an empty field"},
        {"1,\"\",0\n", SL_ESYNTAX, "line 3, column 2 (b): an empty field"},
        {"1,  ,0\n", SL_ESYNTAX, "line 3, column 2 (b): an empty field"},
        {"1,abc,0\n", SL_ESYNTAX, "line 3, column 2 (b): not a number: 'abc'"},
        {"1,2x,0\n", SL_ESYNTAX, "line 3, column 2 (b): not a number: '2x'"},
        {"nan,2,0\n", SL_ENONFINITE, "line 3, column 1 (a): not a finite number: 'nan'"},
        {"1e999,2,0\n", SL_ENONFINITE, "line 3, column 1 (a): not a finite number: '1e999'"},
        {"-inf,2,0\n", SL_ENONFINITE, "not a finite number: '-inf'"},
        {"1,2,3\n", SL_ERANGE, "line 3, column 3 (label): not a class in [0, 3): '3'"},
        {"1,2,-1\n", SL_ERANGE, "line 3, column 3 (label): not a class in [0, 3): '-1'"},
        {"1,2,1.5\n", SL_ERANGE, "not a class in [0, 3): '1.5'"},
        {"1,2,one\n", SL_ESYNTAX, "line 3, column 3 (label): not a number: 'one'"},
        {"1,2\"x\",0\n", SL_ESYNTAX, "line 3, column 2: a quote inside an unquoted field"},
        {"1,\"2\"x,0\n", SL_ESYNTAX, "line 3, column 2: text after a closing quote"},
        {"1,2\r3,0\n", SL_ESYNTAX, "not a number: '2?3'"},
    };
    sl_csv_options o = class_options("label", 3);
    float x[16], y[8];
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        sl_csv *c;
        snprintf(text, sizeof text, "a,b,label\n1,1,1\n%s2,2,2\n", bad[i].row);
        put(text);
        c = open_ok(&o);
        read_refused(c, bad[i].status, bad[i].needle);
        read_refused(c, bad[i].status, bad[i].needle); /* the position stayed before it */
        assert_int_equal(sl_csv_rows_read(c), 0);
        assert_int_equal(read_ok(c, x, y, 1), 1); /* the row before it, in a call of its own */
        assert_true(x[0] == 1.0f && y[0] == 1.0f);
        read_refused(c, bad[i].status, bad[i].needle);
        assert_int_equal(sl_csv_rows_read(c), 1);
        sl_csv_close(c);
    }
    /* a NUL byte */
    {
        static const char nul[] = "a,b,label\n1,\0,0\n";
        sl_csv *c;
        write_bytes(path, "wb", nul, sizeof nul - 1);
        c = open_ok(&o);
        read_refused(c, SL_ESYNTAX, "line 2, column 2: a NUL byte");
        sl_csv_close(c);
    }
}

static void test_max_rows_per_call(void **state)
{
    sl_csv_options o = class_options("label", 10);
    float x[8] = {0}, y[4] = {0};
    size_t n = 7;
    sl_csv *c;
    (void)state;
    put("a,label\n0,0\n1,1\n2,2\n3,3\n4,4\n");
    c = open_ok(&o);
    assert_int_equal(sl_csv_read(c, NULL, NULL, 0, &n, NULL, 0), SL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(read_ok(c, x, y, 2), 2);
    assert_true(y[0] == 0.0f && y[1] == 1.0f);
    y[2] = -7.0f;
    assert_int_equal(read_ok(c, x, y, 2), 2);
    assert_true(y[0] == 2.0f && y[1] == 3.0f && y[2] == -7.0f); /* nothing past max */
    assert_int_equal(read_ok(c, x, y, 2), 1);
    assert_true(x[0] == 4.0f && y[0] == 4.0f);
    assert_int_equal(read_ok(c, x, y, 2), 0);
    assert_int_equal(sl_csv_rows_read(c), 5);
    assert_int_equal(sl_csv_read(c, NULL, y, 1, &n, NULL, 0), SL_EINVAL);
    sl_csv_close(c);
    sl_csv_close(NULL);
}

static void test_long_rows(void **state)
{
    sl_csv_options o = class_options("label", 2);
    size_t pad = SL_CSV_MAX_ROW - 16;
    char *row = malloc(SL_CSV_MAX_ROW + 64);
    float x[2], y[2];
    sl_csv *c;
    (void)state;
    assert_non_null(row);
    /* just under the cap: "1" padded with spaces, which are not part of the value */
    put("a,label\n");
    row[0] = '1';
    memset(row + 1, ' ', pad);
    memcpy(row + 1 + pad, ",1\n", 3);
    write_bytes(path, "ab", row, pad + 4);
    c = open_ok(&o);
    assert_int_equal(read_ok(c, x, y, 2), 1);
    assert_true(x[0] == 1.0f && y[0] == 1.0f);
    sl_csv_close(c);
    /* over it, even before its newline is written */
    put("a,label\n");
    memset(row + 1, ' ', SL_CSV_MAX_ROW + 8);
    write_bytes(path, "ab", row, SL_CSV_MAX_ROW + 9);
    c = open_ok(&o);
    read_refused(c, SL_ETOOBIG, "line 2: a row longer than 1048576 bytes");
    sl_csv_close(c);
    free(row);
}

static void test_real_wine(void **state)
{
    static const char *cols[] = {"alcohol",
                                 "malic_acid",
                                 "ash",
                                 "alcalinity_of_ash",
                                 "magnesium",
                                 "total_phenols",
                                 "flavanoids",
                                 "nonflavanoid_phenols",
                                 "proanthocyanins",
                                 "color_intensity",
                                 "hue",
                                 "od280/od315_of_diluted_wines",
                                 "proline",
                                 "class"};
    sl_csv_options o = class_options("class", 3);
    char err[512];
    size_t n, total = 0, count[3] = {0};
    float x[16 * 13], y[16];
    struct stat st;
    sl_csv *c;
    (void)state;
    if (stat(WINE_CSV, &st) != 0) {
        print_message("skipped: %s is absent (apt-get install python3-sklearn)\n", WINE_CSV);
        skip();
    }
    o.skip_lines = 1;
    o.header = 0;
    o.columns = cols;
    o.ncolumns = 14;
    assert_int_equal(sl_csv_open(WINE_CSV, &o, &c, err, sizeof err), SL_OK);
    assert_int_equal(sl_csv_features(c), 13);
    assert_string_equal(sl_csv_feature_name(c, 12), "proline");
    do {
        assert_int_equal(sl_csv_read(c, x, y, 16, &n, err, sizeof err), SL_OK);
        for (size_t i = 0; i < n; i++) {
            assert_true(x[i * 13] > 10.0f && x[i * 13] < 16.0f); /* alcohol, % */
            count[(size_t)y[i]]++;
        }
        total += n;
    } while (n > 0);
    assert_int_equal(total, 178);
    assert_int_equal(sl_csv_rows_read(c), 178);
    assert_int_equal(count[0], 59);
    assert_int_equal(count[1], 71);
    assert_int_equal(count[2], 48);
    sl_csv_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_header_label_features_timestamp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delimiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quoted_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crlf_and_bom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_class_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regression_targets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_and_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_row_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_rows_per_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_rows, setup, teardown),
        cmocka_unit_test(test_real_wine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
