/*
 * test_report.c - `starling report` and `starling bench fl`, as a user runs
 * them (the starling program as a child process):
 *   - report on a data directory whose store holds a known history (closed,
 *     abandoned and not-yet-evaluated rounds): four valid PNGs of the
 *     expected size, README.md's numbers equal to the store's, and the data
 *     directory left byte for byte as it was (read-only);
 *   - report's, bench fl's and bench api's option errors (exit 2) and a missing gnuplot
 *     (exit 1, naming the Debian package);
 *   - `bench fl --smoke` end to end (the coordinator, an evaluator and a
 *     fleet of 10 on loopback, 2 rounds of 2 settings), then report on one
 *     of its runs. Skipped when Fashion-MNIST is not installed.
 */
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "../support/sl_test.h"
#include "fl_run.h"
#include "starling/common.h"
#include "starling/round.h"
#include "starling/store.h"

#ifndef SL_STARLING_BIN
#error "SL_STARLING_BIN: the starling program under test"
#endif

static char g_dir[512];

/* Run starling with @args (NULL-terminated) and @env_set ("NAME=value" or NULL) with stderr
 * and stdout into two files (so nothing the child's children leave behind lands in the middle
 * of stdout); returns the exit status and the output, stderr's then stdout's (caller frees). */
static int run(const char *env_set, char **output, const char *const *args)
{
    char out_path[600], err_path[600], *argv[32];
    size_t n = 0;
    pid_t pid;
    int status = -1;
    snprintf(out_path, sizeof out_path, "%s/out.txt", g_dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", g_dir);
    argv[n++] = (char *)SL_STARLING_BIN;
    for (size_t i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int efd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || efd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(efd, 2);
        if (env_set != NULL)
            putenv((char *)env_set);
        sl_test_execv(SL_STARLING_BIN, argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (output != NULL) {
        void *out = NULL, *err = NULL;
        size_t len = 0, elen = 0;
        char *both;
        assert_int_equal(sl_fs_read_file(out_path, 1 << 24, &out, &len), SL_OK);
        assert_int_equal(sl_fs_read_file(err_path, 1 << 24, &err, &elen), SL_OK);
        both = malloc(elen + len + 1);
        assert_non_null(both);
        memcpy(both, err, elen);
        memcpy(both + elen, out, len);
        both[elen + len] = '\0';
        free(out);
        free(err);
        *output = both;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define RUN(env, out, ...) run(env, out, (const char *const[]){__VA_ARGS__, NULL})

/* A PNG file: signature, IHDR of @w x @h, and a plausible size. */
static void check_png(const char *dir, const char *name, uint32_t w, uint32_t h)
{
    char path[700];
    void *data = NULL;
    size_t len = 0;
    const uint8_t *p;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (sl_fs_read_file(path, 16 << 20, &data, &len) != SL_OK)
        fail_msg("%s is missing", path);
    p = data;
    if (len < 4096 || len > (8u << 20))
        fail_msg("%s: implausible size %zu bytes", path, len);
    assert_memory_equal(p, sig, 8);
    assert_memory_equal(p + 12, "IHDR", 4);
    assert_int_equal(
        ((uint32_t)p[16] << 24) | ((uint32_t)p[17] << 16) | ((uint32_t)p[18] << 8) | p[19], w);
    assert_int_equal(
        ((uint32_t)p[20] << 24) | ((uint32_t)p[21] << 16) | ((uint32_t)p[22] << 8) | p[23], h);
    assert_memory_equal(p + len - 8, "IEND", 4);
    free(data);
}

/* ---- a store with a known history ------------------------------------------------------ */

static void put_version(sl_store *s, int64_t task, int64_t version, const char *metrics,
                        sl_round_record *closing)
{
    uint8_t frame[64], sha[32];
    sl_model_put m;
    memset(frame, (int)version, sizeof frame);
    memset(sha, (int)version * 7, sizeof sha);
    memset(&m, 0, sizeof m);
    m.task_id = task;
    m.version = version;
    m.parent = version - 1;
    m.frame = frame;
    m.frame_len = sizeof frame;
    m.sha256 = sha;
    m.metrics = metrics;
    if (closing != NULL)
        assert_int_equal(sl_store_close_round(s, closing, &m), SL_OK);
    else
        assert_int_equal(sl_store_put_model(s, &m), SL_OK);
}

static void add_round(sl_store *s, int64_t task, int64_t no, sl_round_state state,
                      uint32_t selected, uint32_t reported, uint32_t dropped, uint32_t late,
                      uint32_t rejected, int64_t up, int64_t down, const char *metrics)
{
    sl_round_record r;
    memset(&r, 0, sizeof r);
    r.task_id = task;
    r.round_no = no;
    r.base_version = no; /* the rounds before it each made a version */
    r.state = SL_ROUND_TRAINING;
    r.target = 3;
    r.quorum = 2;
    r.opened_at_ms = 1700000000000LL + no * 10000;
    assert_int_equal(sl_store_create_round(s, &r), SL_OK);
    r.state = state;
    r.selected = selected;
    r.reported = reported;
    r.dropped = dropped;
    r.late = late;
    r.rejected = rejected;
    r.bytes_up = up;
    r.bytes_down = down;
    r.closed_at_ms = r.opened_at_ms + 7000;
    assert_int_equal(state, SL_ROUND_CLOSED);
    put_version(s, task, no + 1, metrics, &r);
}

/* Task 1: logreg's layout (7850 parameters), four rounds. */
static void make_store(const char *data_dir)
{
    static const char config[] = "{\"name\": \"report-test\", \"rounds\": 4, \"target\": 3, "
                                 "\"quorum\": 2, \"values\": \"int8\", \"density\": 0.05}";
    char path[700], err[256], *canonical = NULL;
    sl_task_config cfg;
    sl_store_options o;
    sl_store *s = NULL;
    int64_t task = 0;
    mkdir(data_dir, 0700);
    snprintf(path, sizeof path, "%s/starling.db", data_dir);
    sl_store_options_default(&o);
    o.path = path;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_OK);
    assert_int_equal(sl_task_config_parse(config, sizeof config - 1, &cfg, err, sizeof err), SL_OK);
    assert_int_equal(sl_task_config_to_json(&cfg, &canonical), SL_OK);
    assert_int_equal(sl_store_create_task(s, "report-test", canonical, "w 10 784\nb 10\n", &task),
                     SL_OK);
    free(canonical);
    put_version(s, task, 1, "{\"accuracy\": 0.1012, \"loss\": 2.3026}", NULL);
    /* round 1 closed (v2), 2 closed (v3), 3 abandoned (base 3 stays), 4 closed (v4, no metrics) */
    add_round(s, task, 1, SL_ROUND_CLOSED, 4, 3, 1, 0, 0, 4711, 90001,
              "{\"accuracy\": 0.61234, \"loss\": 1.25}");
    add_round(s, task, 2, SL_ROUND_CLOSED, 4, 3, 0, 1, 0, 4802, 88123,
              "{\"accuracy\": 0.7345, \"loss\": 0.9}");
    {
        sl_round_record r;
        memset(&r, 0, sizeof r);
        r.task_id = task;
        r.round_no = 3;
        r.base_version = 3;
        r.state = SL_ROUND_TRAINING;
        r.target = 3;
        r.quorum = 2;
        r.opened_at_ms = 1700000040000LL;
        assert_int_equal(sl_store_create_round(s, &r), SL_OK);
        r.state = SL_ROUND_ABANDONED;
        r.selected = 4;
        r.reported = 1;
        r.dropped = 2;
        r.rejected = 1;
        r.bytes_up = 1601;
        r.bytes_down = 60000;
        r.closed_at_ms = r.opened_at_ms + 9000;
        snprintf(r.error, sizeof r.error, "quorum not met");
        assert_int_equal(sl_store_close_round(s, &r, NULL), SL_OK);
    }
    {
        sl_round_record r;
        memset(&r, 0, sizeof r);
        r.task_id = task;
        r.round_no = 4;
        r.base_version = 3;
        r.state = SL_ROUND_TRAINING;
        r.target = 3;
        r.quorum = 2;
        r.opened_at_ms = 1700000050000LL;
        assert_int_equal(sl_store_create_round(s, &r), SL_OK);
        r.state = SL_ROUND_CLOSED;
        r.selected = 3;
        r.reported = 3;
        r.bytes_up = 4900;
        r.bytes_down = 70000;
        r.closed_at_ms = r.opened_at_ms + 6000;
        put_version(s, task, 4, NULL, &r);
    }
    sl_store_close(s);
}

typedef struct expect {
    sl_round_record r[8];
    size_t n;
} expect;

static int collect(void *ctx, const sl_round_record *r)
{
    expect *e = ctx;
    if (e->n < 8)
        e->r[e->n++] = *r;
    return 0;
}

static void check_readme(const char *report_dir, const char *data_dir)
{
    char path[700], err[256], *text = NULL;
    size_t len = 0, rows = 0;
    long long up_total = 0;
    sl_store_options o;
    sl_store *s = NULL;
    expect e;
    memset(&e, 0, sizeof e);
    snprintf(path, sizeof path, "%s/README.md", report_dir);
    assert_int_equal(sl_fs_read_file(path, 1 << 20, (void **)&text, &len), SL_OK);
    /* the store's own rounds (newest first) */
    snprintf(path, sizeof path, "%s/starling.db", data_dir);
    sl_store_options_default(&o);
    o.path = path;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_OK);
    assert_int_equal(sl_store_list_rounds(s, 1, 0, 100, collect, &e), SL_OK);
    sl_store_close(s);
    assert_int_equal(e.n, 4);
    for (char *line = text; line != NULL && *line != '\0';) {
        char *eol = strchr(line, '\n');
        long long no, bup, bdown;
        unsigned sel, rep, drop, late, rej;
        char state[16], ratio[16], acc[16];
        if (eol != NULL)
            *eol = '\0';
        if (sscanf(line, "| %lld | %15[a-z] | %u | %u | %u | %u | %u | %lld | %lld | %15s | %15s",
                   &no, state, &sel, &rep, &drop, &late, &rej, &bup, &bdown, ratio, acc) == 11) {
            const sl_round_record *r = &e.r[e.n - (size_t)no]; /* newest first */
            assert_int_equal(r->round_no, no);
            assert_int_equal(sel, r->selected);
            assert_int_equal(rep, r->reported);
            assert_int_equal(drop, r->dropped);
            assert_int_equal(late, r->late);
            assert_int_equal(rej, r->rejected);
            assert_int_equal(bup, r->bytes_up);
            assert_int_equal(bdown, r->bytes_down);
            assert_string_equal(state, r->state == SL_ROUND_CLOSED ? "closed" : "abandoned");
            up_total += bup;
            if (no == 1)
                assert_string_equal(acc, "61.23%");
            else if (no == 2)
                assert_string_equal(acc, "73.45%");
            else /* abandoned: no version; round 4: not evaluated */
                assert_string_equal(acc, "-");
            rows++;
        }
        line = eol ? eol + 1 : NULL;
        if (eol != NULL)
            *eol = '\n';
    }
    assert_int_equal(rows, 4);
    {
        char want[128];
        snprintf(want, sizeof want, "| bytes up | %lld (", up_total);
        if (strstr(text, want) == NULL)
            fail_msg("README.md lacks \"%s\"", want);
    }
    /* dense: 10 reports x 7850 x 4 bytes */
    assert_non_null(strstr(text, "dense fp32 updates: 314000 ("));
    assert_non_null(strstr(text, "| final accuracy | 73.45% (loss 0.9000, model version 3) |"));
    assert_non_null(strstr(text, "| rounds | 4 (3 closed, 1 abandoned, 0 open) |"));
    assert_non_null(strstr(text, "| updates accepted | 10 of 15 selected |"));
    assert_non_null(strstr(text, "| initial model | 10.12% |"));
    assert_non_null(strstr(text, "| to 80% | not reached |\n| to 85% | not reached |"));
    assert_non_null(strstr(text, "![test accuracy per round](accuracy_rounds.png)"));
    free(text);
}

static void test_report_known_store(void **state)
{
    char data[600], report[600], db[700], *out = NULL;
    void *before = NULL, *after = NULL;
    size_t blen = 0, alen = 0;
    char wal[720];
    struct stat st;
    int had_wal;
    (void)state;
    snprintf(data, sizeof data, "%s/data", g_dir);
    snprintf(report, sizeof report, "%s/report", g_dir);
    snprintf(db, sizeof db, "%s/starling.db", data);
    snprintf(wal, sizeof wal, "%s-wal", db);
    make_store(data);
    assert_int_equal(sl_fs_read_file(db, 64 << 20, &before, &blen), SL_OK);
    had_wal = stat(wal, &st) == 0;
    if (RUN(NULL, &out, "report", "--run", data, "-o", report) != 0)
        fail_msg("starling report failed: %s", out);
    assert_non_null(strstr(out, "report of task 1 (4 rounds)"));
    free(out);
    check_png(report, "accuracy_rounds.png", 960, 600);
    check_png(report, "accuracy_bytes.png", 960, 600);
    check_png(report, "participation.png", 960, 600);
    check_png(report, "bytes.png", 960, 600);
    check_readme(report, data);
    /* read-only: the database is as it was, and no WAL appeared beside it */
    assert_int_equal(sl_fs_read_file(db, 64 << 20, &after, &alen), SL_OK);
    assert_int_equal(alen, blen);
    assert_memory_equal(after, before, blen);
    assert_int_equal(stat(wal, &st) == 0, had_wal);
    free(before);
    free(after);
}

static void test_report_errors(void **state)
{
    char data[600], report[600], *out = NULL;
    (void)state;
    snprintf(data, sizeof data, "%s/data", g_dir);
    snprintf(report, sizeof report, "%s/report2", g_dir);
    make_store(data);
    assert_int_equal(RUN(NULL, NULL, "report", "--run", data), 2); /* no -o */
    assert_int_equal(RUN(NULL, NULL, "report", "-o", report), 2);  /* no --run */
    assert_int_equal(RUN(NULL, NULL, "report", "--run", data, "-o", report, "--bogus"), 2);
    assert_int_equal(RUN(NULL, NULL, "report", "--run", data, "-o", report, "--task", "x"), 2);
    assert_int_equal(RUN(NULL, &out, "report", "--run", g_dir, "-o", report), 1);
    assert_non_null(strstr(out, "no coordinator database"));
    free(out);
    assert_int_equal(RUN(NULL, &out, "report", "--run", data, "-o", report, "--task", "9"), 1);
    assert_non_null(strstr(out, "no task 9"));
    free(out);
    assert_int_equal(
        RUN("STARLING_GNUPLOT=/nonexistent/gnuplot", &out, "report", "--run", data, "-o", report),
        1);
    assert_non_null(strstr(out, "gnuplot-nox"));
    free(out);
    /* without gnuplot, --no-plots still writes the summary */
    assert_int_equal(RUN("STARLING_GNUPLOT=/nonexistent/gnuplot", NULL, "report", "--run", data,
                         "-o", report, "--no-plots"),
                     0);
    {
        char path[700], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/README.md", report);
        assert_int_equal(sl_fs_read_file(path, 1 << 20, (void **)&text, &len), SL_OK);
        assert_null(strstr(text, "!["));
        assert_non_null(strstr(text, "| 4 | closed | 3 | 3 | 0 | 0 | 0 | 4900 | 70000 |"));
        free(text);
    }
}

/* bench api's option errors: exit 2, naming the argument, before anything runs. */
static void test_bench_api_options(void **state)
{
    static const char *const bad[][3] = {
        {"--bogus", NULL, NULL},   {"--phases", "bogus", NULL}, {"--phases", "status,,open", NULL},
        {"--phases", NULL, NULL},  {"--seconds", "0", NULL},    {"--seconds", "nan", NULL},
        {"--clients", "0", NULL},  {"--workers", "300", NULL},  {"--devices", "0", NULL},
        {"--threads", "-1", NULL},
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL, want[64];
        int rc = bad[i][1] == NULL ? RUN(NULL, &out, "bench", "api", bad[i][0])
                                   : RUN(NULL, &out, "bench", "api", bad[i][0], bad[i][1]);
        if (rc != 2)
            fail_msg("bench api %s %s: exit %d, not 2", bad[i][0], bad[i][1] ? bad[i][1] : "", rc);
        snprintf(want, sizeof want, "malformed argument \"%s\"", bad[i][0]);
        if (strstr(out, want) == NULL || strstr(out, "usage: starling bench api") == NULL)
            fail_msg("bench api %s: %s", bad[i][0], out);
        assert_null(strstr(out, "REST server on")); /* nothing ran */
        free(out);
    }
}

static void test_bench_fl_options(void **state)
{
    char *out = NULL;
    (void)state;
    assert_int_equal(RUN(NULL, &out, "bench", "fl", "--help"), 0);
    assert_non_null(strstr(out, "usage: starling bench fl"));
    free(out);
    assert_int_equal(RUN(NULL, &out, "bench", "fl", "--bogus"), 2);
    assert_non_null(strstr(out, "unknown argument \"--bogus\""));
    free(out);
    assert_int_equal(RUN(NULL, &out, "bench", "fl", "--settings", "dense,nope"), 2);
    assert_non_null(strstr(out, "unknown setting \"nope\""));
    free(out);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "dense,dense"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int9@0.1"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@global"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@@tensor"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@tensor@model"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@none"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@tracking"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@decay0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@decay1.5"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@decay0.9"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@decay"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", ""), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--plot", "out.jpg"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--plot"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--rounds", "0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--seed", "x"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--seed", "-1"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--rounds", "12x"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--epochs", "-1"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--target-acc", "1.5"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--model", "resnet"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--quick", "--smoke"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--fleet", "some"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--fleet"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@wu0:0.5"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@wu3"), 2);
    /* @byp (the fade by participations alone) once, and as a word, not a prefix */
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@byp@byp"), 2);
    /* @smeN: N at least 1, and one length only */
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@sme0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@sm6@sme60"),
                     2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@sme"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@bypx"), 2);
    /* @nofresh once, and as a word */
    assert_int_equal(
        RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@nofresh@nofresh"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@residual@nofreshx"), 2);
    /* @partK: K in 0..16, once */
    {
        static const char *const bad_part[] = {
            "int8@0.1@residual@part17", "int8@0.1@residual@part", "int8@0.1@residual@partx",
            "int8@0.1@residual@part-1", "int8@0.1@residual@part3@part4"};
        for (size_t i = 0; i < sizeof bad_part / sizeof bad_part[0]; i++) {
            assert_int_equal(RUN(NULL, &out, "bench", "fl", "--settings", bad_part[i]), 2);
            assert_non_null(strstr(out, "unknown setting"));
            free(out);
        }
    }
    /* --report-share: in (0, 1] */
    {
        static const char *const bad_share[] = {"0", "1.5", "-0.4", "nan", "x", "0.4x"};
        for (size_t i = 0; i < sizeof bad_share / sizeof bad_share[0]; i++) {
            assert_int_equal(RUN(NULL, &out, "bench", "fl", "--report-share", bad_share[i]), 2);
            assert_non_null(strstr(out, "--report-share"));
            free(out);
        }
        assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--report-share"), 2);
    }
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@wu3:1.5"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@fedsgd"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@slr0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@p0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@p101"), 2);
    /* the server rate ramp: N in 1..10000 and a boost in (0, 100], or ramp0; once */
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp0:2"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp4"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp4:"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp4:0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp4:nan"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp10001:2"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--settings", "int8@0.1@ramp4:2@ramp0"), 2);
    /* the senders' mean: N in 0..10000 and a weight in (0, 1] for N above 0; once */
    static const char *const bad_sm[] = {"sm",      "sm3:",    "sm0:0.5", "sm3:0",  "sm3:1.5",
                                         "sm3:nan", "sm10001", "smx",     "sm3@sm4"};
    for (size_t i = 0; i < sizeof bad_sm / sizeof bad_sm[0]; i++) {
        char setting[32];
        snprintf(setting, sizeof setting, "int8@0.1@%s", bad_sm[i]);
        if (RUN(NULL, NULL, "bench", "fl", "--settings", setting) != 2)
            fail_msg("bench fl took --settings %s", setting);
    }
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--at-wall", "soon"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "fl", "--at-wall", "0"), 2);
    /* a missing gnuplot is found before anything runs */
    assert_int_equal(RUN("STARLING_GNUPLOT=/nonexistent/gnuplot", &out, "bench", "fl", "--smoke",
                         "--plot", "x.png"),
                     1);
    assert_non_null(strstr(out, "gnuplot-nox"));
    free(out);
}

/* What the markdown (@report 0: dense's own cell, 1.0x) or the report (@report 1: its line)
 * must say of @fl reaching level @l (0: 80%, 1: 85%), computed from the store. */
static void reach_cell(const sl_fl_run *fl, int l, int report, char *want, size_t cap)
{
    sl_fl_reach r;
    char up[24], down[24];
    int pctl = l == 0 ? 80 : 85;
    sl_fl_run_reach(fl, pctl / 100.0, &r);
    sl_fl_human_bytes((double)r.bytes_up, up, sizeof up);
    sl_fl_human_bytes((double)r.bytes_down, down, sizeof down);
    if (report && r.round_no > 0)
        snprintf(want, cap, "| to %d%% | round %lld: %s up, %s down in all rounds to it |", pctl,
                 (long long)r.round_no, up, down);
    else if (report)
        snprintf(want, cap, "| to %d%% | not reached |", pctl);
    else if (r.round_no > 0)
        snprintf(want, cap, " %lld / %s / %s | 1.0x |", (long long)r.round_no, up, down);
    else
        snprintf(want, cap, " never | - |");
}

/* The SHA-256 of every model version of the only task in the store of data directory @data,
 * in order (at most @cap): how many. */
static size_t model_digests(const char *data, uint8_t (*sha)[32], size_t cap)
{
    char path[800], err[256];
    sl_store_options o;
    sl_store *s = NULL;
    sl_fl_run fl;
    size_t n = 0;
    assert_int_equal(sl_fl_run_load(data, 0, &fl, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/starling.db", data);
    sl_store_options_default(&o);
    o.path = path;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_OK);
    for (int64_t v = 1; n < cap; v++) {
        sl_model_record m;
        if (sl_store_get_model(s, fl.task_id, v, &m) != SL_OK)
            break;
        memcpy(sha[n++], m.sha256, 32);
        sl_store_model_free(&m);
    }
    sl_store_close(s);
    sl_fl_run_free(&fl);
    return n;
}

static void test_bench_fl_smoke(void **state)
{
    char runs[600], png[600], md[600], data[700], report[600], *out = NULL, *text = NULL;
    char err[256], data_dense[700];
    size_t len = 0;
    struct stat st;
    sl_fl_run fl;
    sl_fl_totals tot;
    (void)state;
    if (stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", &st) != 0) {
        print_message("Fashion-MNIST is not installed (dataset-fashion-mnist): skipped\n");
        skip();
    }
    snprintf(runs, sizeof runs, "%s/runs", g_dir);
    snprintf(png, sizeof png, "%s/fl.png", g_dir);
    snprintf(md, sizeof md, "%s/fl.md", g_dir);
    if (RUN(NULL, &out, "bench", "fl", "--smoke", "--settings",
            "dense,k1-ternary,ternary@0.01@residual@tensor@decay0.9@ramp4:2@sm3:0.5,"
            "ternary@0.01@residual@sme20:0.5@nofresh@part3",
            "--dir", runs, "--plot", png, "--md", md, "--json") != 0)
        fail_msg("starling bench fl --smoke failed:\n%s", out);
    assert_non_null(strstr(out, "round   2/2  closed"));
    { /* --json (stdout, after the progress): the scope, error feedback and decay each task ran
       * with, the coordinator's defaults where the setting left them out */
        const char *at = strstr(out, "{\n\t\"benchmark\":");
        cJSON *root = at != NULL ? cJSON_ParseWithOpts(at, NULL, 0) : NULL, *o;
        int seen = 0;
        if (root == NULL)
            fail_msg("no JSON in:\n%s", out);
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(root, "settings"))
        {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
            const char *ef =
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "error_feedback"));
            const char *scope =
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "topk_scope"));
            double decay =
                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "residual_decay"));
            assert_non_null(name);
            assert_non_null(ef);
            assert_non_null(scope);
            assert_string_equal(ef, "residual");
            assert_true(decay == SL_RESIDUAL_DECAY_DEFAULT);
            assert_string_equal(scope, strstr(name, "@tensor") != NULL ? "tensor" : "model");
            /* the fade by local epochs: the setting's, the default's where the setting gives
             * none (none for dense, or a fade by rounds), and sender_mean_fresh with it */
            {
                int dense = strcmp(name, "dense") == 0, by_rounds = strstr(name, "@sm3") != NULL;
                assert_true(cJSON_GetNumberValue(
                                cJSON_GetObjectItemCaseSensitive(o, "sender_mean_epochs")) ==
                            (strstr(name, "@sme20") ? 20
                             : dense || by_rounds   ? 0
                                                    : SL_SENDER_MEAN_EPOCHS_DEFAULT));
                assert_int_equal(
                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "sender_mean_fresh")),
                    !dense && strstr(name, "@nofresh") == NULL);
                /* sender_mean_partial: the setting's, else the default with a fade by epochs */
                assert_true(cJSON_GetNumberValue(
                                cJSON_GetObjectItemCaseSensitive(o, "sender_mean_partial")) ==
                            (strstr(name, "@part3") ? 3
                             : dense || by_rounds   ? 0
                                                    : SL_SENDER_MEAN_PARTIAL_DEFAULT));
            }
            seen++;
        }
        assert_int_equal(seen, 4);
        cJSON_Delete(root);
    }
    /* each setting's model at the shortest run's wall clock */
    assert_non_null(strstr(out, "dense: "));
    assert_non_null(strstr(out, "of wall clock (the shortest run)"));
    free(out);
    check_png(g_dir, "fl.png", 960, 600);
    assert_int_equal(sl_fs_read_file(md, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "| dense | fp32 | 1 | "));
    assert_non_null(strstr(text, "| k1-ternary | ternary | 0.01 | "));
    assert_non_null(strstr(
        text, "| ternary@0.01@residual@tensor@decay0.9@ramp4:2@sm3:0.5 | ternary | 0.01 | "));
    assert_null(strstr(text, "failed"));
    /* bytes and rounds to 80% and 85%: the cells say what the dense run's store holds, and
     * dense is its own reference (1.0x) */
    assert_non_null(strstr(text, "| to 80%: round / up / down | up to 80% vs dense | to 85%: "));
    snprintf(data, sizeof data, "%s/dense/data", runs);
    assert_int_equal(sl_fl_run_load(data, 0, &fl, err, sizeof err), 0);
    for (int l = 0; l < 2; l++) {
        char want[160];
        reach_cell(&fl, l, 0, want, sizeof want);
        if (strstr(text, want) == NULL)
            fail_msg("fl.md lacks \"%s\":\n%s", want, text);
    }
    sl_fl_run_free(&fl);
    free(text);
    /* the scope and error feedback reach the task only where the setting gives them */
    snprintf(data, sizeof data,
             "%s/ternary@0.01@residual@tensor@decay0.9@ramp4:2@sm3:0.5/task.json", runs);
    assert_int_equal(sl_fs_read_file(data, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "\"server_lr_ramp\": 4, \"server_lr_boost\": 2"));
    assert_non_null(strstr(text, "\"sender_mean_rounds\": 3, \"sender_mean\": 0.5"));
    assert_non_null(strstr(text, "\"topk_scope\": \"tensor\""));
    assert_non_null(strstr(text, "\"error_feedback\": \"residual\""));
    assert_non_null(strstr(text, "\"residual_decay\": 0.90000000000000002"));
    free(text);
    snprintf(data, sizeof data, "%s/ternary@0.01@residual@sme20:0.5@nofresh@part3/task.json", runs);
    assert_int_equal(sl_fs_read_file(data, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "\"sender_mean_rounds\": 0, \"sender_mean_epochs\": 20, "
                                 "\"sender_mean\": 0.5, \"sender_mean_fresh\": false, "
                                 "\"sender_mean_partial\": 3"));
    free(text);
    snprintf(data, sizeof data, "%s/k1-ternary/task.json", runs);
    assert_int_equal(sl_fs_read_file(data, 1 << 20, (void **)&text, &len), SL_OK);
    assert_null(strstr(text, "server_lr_ramp"));
    assert_null(strstr(text, "sender_mean"));
    assert_null(strstr(text, "topk_scope"));
    assert_null(strstr(text, "error_feedback"));
    assert_null(strstr(text, "residual_decay"));
    free(text);
    /* the ramp and the senders' mean the tasks ran with: the ones given, the coordinator's
     * default for sparse FedAvg with the residual (the senders' mean), none for dense */
    {
        static const struct {
            const char *setting;
            uint32_t ramp, sm, sme;
            double weight;
            int share;     /* the fade times the share of rounds: a task naming its rounds */
            int fresh;     /* sender_mean_fresh: a new task's default with a senders' mean */
            uint32_t part; /* sender_mean_partial: a new task's default with sender_mean_epochs */
        } want[] = {
            {"dense", 0, 0, 0, 1, 0, 0, 0},
            {"k1-ternary", 0, 0, SL_SENDER_MEAN_EPOCHS_DEFAULT, 1, 0, 1,
             SL_SENDER_MEAN_PARTIAL_DEFAULT},
            {"ternary@0.01@residual@tensor@decay0.9@ramp4:2@sm3:0.5", 4, 3, 0, 0.5, 1, 1, 0},
            {"ternary@0.01@residual@sme20:0.5@nofresh@part3", 0, 0, 20, 0.5, 0, 0, 3}};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            snprintf(data, sizeof data, "%s/%s/data", runs, want[k].setting);
            assert_int_equal(sl_fl_run_load(data, 0, &fl, err, sizeof err), 0);
            if (fl.config.server_lr_ramp != want[k].ramp ||
                fl.config.sender_mean_rounds != want[k].sm ||
                fl.config.sender_mean_epochs != want[k].sme ||
                fl.config.sender_mean != want[k].weight ||
                fl.config.sender_mean_share != want[k].share ||
                fl.config.sender_mean_fresh != want[k].fresh ||
                fl.config.sender_mean_partial != want[k].part)
                fail_msg("%s ran with server_lr_ramp %u, sender_mean_rounds %u, "
                         "sender_mean_epochs %u, sender_mean %g, sender_mean_share %d, "
                         "sender_mean_fresh %d, sender_mean_partial %u",
                         want[k].setting, fl.config.server_lr_ramp, fl.config.sender_mean_rounds,
                         fl.config.sender_mean_epochs, fl.config.sender_mean,
                         fl.config.sender_mean_share, fl.config.sender_mean_fresh,
                         fl.config.sender_mean_partial);
            sl_fl_run_free(&fl);
        }
    }
    /* a simulated fleet's run repeats: the same setting again gives every model version's
     * bits (each device's training draws from its place in the fleet, not the id its
     * enrolment got, which follows the devices' race to enrol) */
    {
        char runs2[700], a[800], b[800];
        uint8_t first[8][32], again[8][32];
        size_t n1, n2;
        snprintf(runs2, sizeof runs2, "%s/runs-again", g_dir);
        if (RUN(NULL, &out, "bench", "fl", "--smoke", "--settings", "k1-ternary", "--dir", runs2) !=
            0)
            fail_msg("starling bench fl --smoke, again, failed:\n%s", out);
        free(out);
        snprintf(a, sizeof a, "%s/k1-ternary/data", runs);
        snprintf(b, sizeof b, "%s/k1-ternary/data", runs2);
        n1 = model_digests(a, first, 8);
        n2 = model_digests(b, again, 8);
        assert_int_equal(n1, 3); /* the initial model and two rounds' */
        assert_int_equal(n2, n1);
        for (size_t v = 0; v < n1; v++)
            if (memcmp(first[v], again[v], 32) != 0)
                fail_msg("model version %zu differs between two runs of one setting", v + 1);
    }
    /* the report of one of its runs: two closed rounds of 10 devices */
    snprintf(data, sizeof data, "%s/dense/data", runs);
    snprintf(data_dense, sizeof data_dense, "%s", data);
    snprintf(report, sizeof report, "%s/report-dense", g_dir);
    if (RUN(NULL, &out, "report", "--run", data, "-o", report) != 0)
        fail_msg("starling report failed: %s", out);
    free(out);
    check_png(report, "accuracy_bytes.png", 960, 600);
    snprintf(data, sizeof data, "%s/README.md", report);
    assert_int_equal(sl_fs_read_file(data, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "| 1 | closed | 10 | 10 | 0 | 0 | 0 | "));
    assert_non_null(strstr(text, "| 2 | closed | 10 | 10 | 0 | 0 | 0 | "));
    assert_non_null(strstr(text, "| updates accepted | 20 of 20 selected |"));
    assert_int_equal(sl_fl_run_load(data_dense, 0, &fl, err, sizeof err), 0);
    for (int l = 0; l < 2; l++) { /* what reaching 80% and 85% cost, as the store says */
        char want[160];
        reach_cell(&fl, l, 1, want, sizeof want);
        if (strstr(text, want) == NULL)
            fail_msg("the report lacks \"%s\"", want);
    }
    sl_fl_run_free(&fl);
    free(text);
    /* bench aggregate on the same store: both rounds, 20 updates, the two sums side by side */
    snprintf(data, sizeof data, "%s/dense/data/starling.db", runs);
    if (RUN(NULL, &out, "bench", "aggregate", "--store", data) != 0)
        fail_msg("starling bench aggregate failed: %s", out);
    assert_non_null(strstr(out, "2 rounds, 20 updates"));
    assert_non_null(strstr(out, "largest |fixed - doubles| "));
    assert_non_null(strstr(out, "parameters differ in their float32 bits"));
    free(out);
    assert_int_equal(RUN(NULL, &out, "bench", "aggregate", "--store", g_dir), 1); /* not a store */
    free(out);
    assert_int_equal(RUN(NULL, NULL, "bench", "aggregate"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "aggregate", "--store"), 2);
    /* bench positions on the sparse run's store: round 2's 10 updates (round 1 has no
     * aggregate before it); a split costs at most the uniform subset plus its counts */
    snprintf(data, sizeof data, "%s/k1-ternary/data/starling.db", runs);
    if (RUN(NULL, &out, "bench", "positions", "--store", data) != 0)
        fail_msg("starling bench positions failed: %s", out);
    if (strstr(out, ": 1 rounds after the first aggregate, 10 updates, ") == NULL)
        fail_msg("bench positions: not round 2's 10 updates:\n%s", out);
    {
        static const char *const rows[] = {"the plain frames (adaptive coder)",
                                           "uniform: log2 C(d, k)",
                                           "split by tensor",
                                           "split by the last aggregate's support",
                                           "split by tensor and the last aggregate's support",
                                           "split by the support of the delta it downloaded",
                                           "  the same, each part by the frames' coders",
                                           "split by the device's previous update",
                                           "  the same, flat: two sets over the model",
                                           "  flat two sets, from its last selection's base"};
        double bits[10], k = 0;
        const char *p = strstr(out, "updates, ");
        assert_non_null(p);
        assert_int_equal(sscanf(p, "updates, %lf positions", &k), 1);
        assert_true(k >= 1);
        for (int i = 0; i < 10; i++) {
            const char *row = strstr(out, rows[i]);
            if (row == NULL || sscanf(row + strlen(rows[i]), "%lf", &bits[i]) != 1)
                fail_msg("bench positions: no \"%s\" row:\n%s", rows[i], out);
            assert_true(bits[i] > 0 && bits[i] < 32);
        }
        /* Vandermonde: a split into two parts costs at most log2 C(d, k) plus one count
         * (log2(k + 1) bits over k positions); the device's previous update is round 1's */
        assert_true(bits[3] <= bits[1] + log2(k + 1) / k + 1e-9);
        assert_true(bits[7] <= bits[1] + log2(k + 1) / k + 1e-9);
        /* the coded split is the frames' coding where that is smaller, plus a bit a tensor
         * (logreg's two) */
        assert_true(bits[6] <= bits[0] + 2.0 / k + 1e-9);
        /* every device of the smoke run took part in round 1: what it downloaded for round
         * 2 is the delta from version 1, the last aggregate's support */
        assert_true(fabs(bits[5] - bits[3]) < 1e-9);
        /* the flat split (what split frames send) is the flat frame's coding where that is
         * smaller, plus a bit; and what each device last downloaded is that same delta */
        assert_true(bits[8] <= bits[0] + 1.0 / k + 1e-9);
        assert_true(fabs(bits[9] - bits[8]) < 1e-9);
    }
    free(out);
    assert_int_equal(RUN(NULL, &out, "bench", "positions", "--store", g_dir), 1); /* not a store */
    free(out);
    {
        /* a copy of the store whose first update is not a frame: the round and the device
         * named, exit 1; the store itself is read only, never written */
        char copy[800], sql[1000];
        sqlite3 *db = NULL;
        struct stat before, after;
        snprintf(copy, sizeof copy, "%s/positions-bad.db", g_dir);
        snprintf(sql, sizeof sql, "VACUUM INTO '%s'", copy);
        assert_int_equal(sqlite3_open(data, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        assert_int_equal(sqlite3_open(copy, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db,
                                      "UPDATE updates SET frame = x'00' WHERE id = "
                                      "(SELECT MIN(id) FROM updates)",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_changes(db), 1);
        sqlite3_close(db);
        assert_int_equal(stat(copy, &before), 0);
        assert_int_equal(RUN(NULL, &out, "bench", "positions", "--store", copy), 1);
        if (strstr(out, ": the update does not decode: ") == NULL)
            fail_msg("bench positions on a bad update: %s", out);
        free(out);
        assert_int_equal(stat(copy, &after), 0);
        assert_int_equal(after.st_mtime, before.st_mtime);
        assert_int_equal(after.st_size, before.st_size);
    }
    assert_int_equal(RUN(NULL, NULL, "bench", "positions"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "positions", "--store"), 2);
    /* bench scale: malformed options are refused (exit 2) before anything runs */
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--devices", "100"), 2); /* no --simulate */
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--density", "0.5x"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--density", "0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--devices", "-5"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--rounds", "0"), 2);
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--values", "int3"), 2);
    assert_int_equal(
        RUN(NULL, NULL, "bench", "scale", "--simulate", "--devices", "100", "--per-round", "60"),
        2); /* fewer than twice the reports */
    assert_int_equal(RUN(NULL, NULL, "bench", "scale", "--simulate", "--bogus"), 2);

    /* the partial fleet: 8 of 20 reports close a round (12 selected, quorum 5), with faults */
    snprintf(runs, sizeof runs, "%s/runs-partial", g_dir);
    snprintf(md, sizeof md, "%s/fl-partial.md", g_dir);
    if (RUN(NULL, &out, "bench", "fl", "--smoke", "--fleet", "partial", "--clients", "20",
            "--settings", "ternary@0.01@wu2:0.05@residual@fedavgm@slr0.5", "--dir", runs, "--md",
            md) != 0)
        fail_msg("starling bench fl --smoke --fleet partial failed:\n%s", out);
    assert_non_null(strstr(out, "round   2/2  closed"));
    free(out);
    assert_int_equal(sl_fs_read_file(md, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "partial participation: 8 reports close a round, 12 selected, "
                                 "quorum 5; 20% of the selected drop out"));
    assert_non_null(
        strstr(text, "| ternary@0.01@wu2:0.05@residual@fedavgm@slr0.5 | ternary | 0.01 | "));
    free(text);
    snprintf(data, sizeof data, "%s/ternary@0.01@wu2:0.05@residual@fedavgm@slr0.5/task.json", runs);
    assert_int_equal(sl_fs_read_file(data, 1 << 20, (void **)&text, &len), SL_OK);
    assert_non_null(strstr(text, "\"target\": 8, \"over_selection\": 1.5, \"quorum\": 5"));
    assert_non_null(strstr(text, "\"report_deadline_ms\": 15000"));
    assert_non_null(strstr(text, "\"warmup_rounds\": 2, \"warmup_density\": 0.050000000000000003"));
    assert_non_null(strstr(text, "\"server_lr\": 0.5"));
    assert_non_null(strstr(text, "\"aggregator\": \"fedavgm\""));
    free(text);
    snprintf(data, sizeof data, "%s/ternary@0.01@wu2:0.05@residual@fedavgm@slr0.5/data", runs);
    assert_int_equal(sl_fl_run_load(data, 0, &fl, err, sizeof err), 0);
    sl_fl_run_totals(&fl, 0.85, &tot);
    assert_int_equal(tot.rounds, 2);
    /* each round: at most 12 selected (fewer when the window closes on a busy machine before
     * every device checked in) and never more reports than it selected; a closed round met its
     * quorum of 5, a round abandoned (its report deadline passed on a loaded machine) did not,
     * and the last round closed */
    assert_int_equal(fl.rounds[1].state, SL_ROUND_CLOSED);
    for (size_t i = 0; i < fl.nrounds; i++) {
        const sl_fl_round *x = &fl.rounds[i];
        int closed_ok = x->state == SL_ROUND_CLOSED && x->reported >= 5;
        int abandoned_ok = x->state == SL_ROUND_ABANDONED && x->reported < 5;
        if (x->selected > 12 || x->reported > x->selected || !(closed_ok || abandoned_ok))
            fail_msg("round %lld (state %d): %u selected, %u reported, %u dropped, %u late",
                     (long long)x->round_no, (int)x->state, x->selected, x->reported, x->dropped,
                     x->late);
    }
    sl_fl_run_free(&fl);
}

/* The model a user had after so many seconds: the last round closed by then with an accuracy. */
static void test_accuracy_at(void **state)
{
    sl_fl_round rounds[4];
    sl_fl_run run;
    (void)state;
    memset(rounds, 0, sizeof rounds);
    memset(&run, 0, sizeof run);
    for (int i = 0; i < 4; i++) {
        rounds[i].round_no = i + 1;
        rounds[i].opened_at_ms = 10000 + 4000 * i;
        rounds[i].closed_at_ms = 14000 + 4000 * i; /* 4, 8, 12, 16 s after the first opened */
        rounds[i].accuracy = 0.5 + 0.1 * i;
        rounds[i].loss = rounds[i].mae = rounds[i].rmse = NAN;
    }
    rounds[2].accuracy = NAN; /* round 3 not evaluated */
    run.rounds = rounds;
    run.nrounds = 4;
    assert_true(isnan(sl_fl_run_accuracy_at(&run, 3.9)));
    assert_float_equal(sl_fl_run_accuracy_at(&run, 4.0), 0.5, 1e-12);
    assert_float_equal(sl_fl_run_accuracy_at(&run, 11.9), 0.6, 1e-12);
    assert_float_equal(sl_fl_run_accuracy_at(&run, 12.0), 0.6, 1e-12); /* round 3: no metric */
    assert_float_equal(sl_fl_run_accuracy_at(&run, 100), 0.8, 1e-12);
    assert_true(isnan(sl_fl_run_accuracy_at(&run, -1)));
}

/* Rounds, seconds and cumulative bytes to an accuracy: every round up to the first that
 * reached it, an abandoned or unevaluated one's bytes included. */
static void test_reach(void **state)
{
    sl_fl_round rounds[4];
    sl_fl_run run;
    sl_fl_reach r;
    (void)state;
    memset(rounds, 0, sizeof rounds);
    memset(&run, 0, sizeof run);
    for (int i = 0; i < 4; i++) {
        rounds[i].round_no = i + 1;
        rounds[i].state = SL_ROUND_CLOSED;
        rounds[i].opened_at_ms = 10000 + 4000 * i;
        rounds[i].closed_at_ms = 14000 + 4000 * i;
        rounds[i].bytes_up = 100 << i;   /* 100, 200, 400, 800 */
        rounds[i].bytes_down = 1000 + i; /* 1000 ... 1003 */
        rounds[i].loss = rounds[i].mae = rounds[i].rmse = NAN;
    }
    rounds[0].accuracy = 0.70;
    rounds[1].accuracy = NAN; /* abandoned: no model, its bytes spent all the same */
    rounds[1].state = SL_ROUND_ABANDONED;
    rounds[1].closed_at_ms = 0;
    rounds[2].accuracy = 0.81;
    rounds[3].accuracy = 0.86;
    run.rounds = rounds;
    run.nrounds = 4;

    sl_fl_run_reach(&run, 0.70, &r); /* the first round */
    assert_int_equal(r.round_no, 1);
    assert_int_equal(r.bytes_up, 100);
    assert_int_equal(r.bytes_down, 1000);
    assert_float_equal(r.seconds, 4.0, 1e-12);
    sl_fl_run_reach(&run, 0.80, &r);
    assert_int_equal(r.round_no, 3);
    assert_int_equal(r.bytes_up, 700);
    assert_int_equal(r.bytes_down, 3003);
    assert_float_equal(r.seconds, 12.0, 1e-12);
    assert_float_equal(r.level, 0.80, 1e-12);
    sl_fl_run_reach(&run, 0.86, &r); /* exactly the level counts */
    assert_int_equal(r.round_no, 4);
    assert_int_equal(r.bytes_up, 1500);
    assert_int_equal(r.bytes_down, 4006);
    sl_fl_run_reach(&run, 0.90, &r); /* never: the whole run's bytes */
    assert_int_equal(r.round_no, 0);
    assert_true(isnan(r.seconds));
    assert_int_equal(r.bytes_up, 1500);
    sl_fl_run_reach(NULL, 0.5, &r);
    assert_int_equal(r.round_no, 0);
    assert_int_equal(r.bytes_up, 0);
    /* a regression: the first round whose RMSE is at most the level */
    rounds[0].rmse = 9.0;
    rounds[2].rmse = 5.0;
    rounds[3].rmse = 4.0;
    sl_fl_run_reach_rmse(&run, 5.0, &r); /* exactly the level counts */
    assert_int_equal(r.round_no, 3);
    assert_int_equal(r.bytes_up, 700);
    assert_int_equal(r.bytes_down, 3003);
    assert_float_equal(r.seconds, 12.0, 1e-12);
    assert_float_equal(r.level, 5.0, 1e-12);
    sl_fl_run_reach_rmse(&run, 9.5, &r);
    assert_int_equal(r.round_no, 1);
    sl_fl_run_reach_rmse(&run, 3.0, &r); /* never */
    assert_int_equal(r.round_no, 0);
    assert_int_equal(r.bytes_up, 1500);
}

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(g_dir, sizeof g_dir, "test_report");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_report_known_store, setup, teardown),
        cmocka_unit_test(test_accuracy_at),
        cmocka_unit_test(test_reach),
        cmocka_unit_test_setup_teardown(test_report_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_fl_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_api_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_fl_smoke, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
