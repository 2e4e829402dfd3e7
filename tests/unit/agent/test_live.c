/*
 * live.c: a device's own data through the task's data contract, kept under
 * its memory cap with a data set ten times larger (the newest, or a uniform
 * reservoir sample), taken up again as it grows, refused and then read anew
 * once fixed.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../support/sl_test.h"
#include "agent_int.h"

/* 4 features, 3 classes by index; no held-out share unless asked */
static const char CONTRACT[] = "{\"input\":{\"features\":[\"i\",\"a\",\"b\",\"c\"]},"
                               "\"label\":{\"kind\":\"class\",\"classes\":3}%s}";

typedef struct fx {
    char dir[512], csv[600], uri[700];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    sl_test_mkdtemp(f->dir, sizeof f->dir, "live");
    snprintf(f->csv, sizeof f->csv, "%s/samples.csv", f->dir);
    snprintf(f->uri, sizeof f->uri, "csv:%s", f->csv);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sl_test_rmtree(f->dir);
    free(f);
    return 0;
}

/* Rows @from .. @to - 1: feature i is the row's number. */
static void rows(const char *path, int from, int to, int header)
{
    FILE *fp = fopen(path, header ? "w" : "a");
    assert_non_null(fp);
    if (header)
        fputs("i,a,b,c,label\n", fp);
    for (int i = from; i < to; i++)
        fprintf(fp, "%d,%g,%g,%g,%d\n", i, i * 0.5, -1.0, 2.0, i % 3);
    fclose(fp);
}

static sl__agent_live *live_for(const fx *f, uint64_t cap, int reservoir, const char *extra)
{
    sl__agent_live *l = NULL;
    char text[512], why[256], sha[65];
    snprintf(text, sizeof text, CONTRACT, extra);
    memset(sha, 'a', 64);
    sha[64] = '\0';
    assert_int_equal(sl__agent_live_create(f->uri, cap, reservoir, 7, &l), SL_OK);
    assert_int_equal(sl__agent_live_set_contract(l, text, strlen(text), sha, why, sizeof why),
                     SL_OK);
    assert_string_equal(why, "");
    return l;
}

/* The row numbers the store holds (feature 0 of every sample), sorted. */
static size_t held_rows(const sl_agent_data *d, int *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < d->client_n[0] && n < cap; i++)
        out[n++] = (int)d->x[(size_t)d->client_ix[0][i] * d->features];
    return n;
}

/* The store stays under the cap with ten times more data: the newest are kept. */
static void test_newest_under_cap(void **state)
{
    fx *f = *state;
    const uint64_t cap = 64 * 1024;
    sl__agent_live *l;
    const sl_agent_data *d;
    char why[256];
    int *got;
    size_t n, kept;
    struct mallinfo2 before, after;
    /* a slot: 4 features + 1 label (floats), an int32 class, a flag, an index: 29 bytes */
    kept = (cap - 64 * 5 * sizeof(float)) / 29;
    rows(f->csv, 0, (int)(10 * kept), 1);
    l = live_for(f, cap, 0, "");
    before = mallinfo2();
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    after = mallinfo2();
    assert_string_equal(why, "");
    assert_true(sl__agent_live_bytes(l) <= cap);
    /* what the heap grew by while ten caps of data streamed through: the source's reader
     * (a 64 KiB buffer and one row) besides the store, allocated at the contract */
    if (after.uordblks > before.uordblks + 96 * 1024)
        fail_msg("the heap grew by %zu bytes reading %zu rows under a %llu-byte cap",
                 after.uordblks - before.uordblks, 10 * kept, (unsigned long long)cap);
    assert_int_equal(sl__agent_live_seen(l), 10 * kept);
    d = sl__agent_live_data(l);
    assert_non_null(d);
    assert_int_equal(d->client_n[0], kept);
    got = malloc(kept * sizeof *got);
    n = held_rows(d, got, kept);
    for (size_t i = 0; i < n; i++)
        if (got[i] < (int)(9 * kept))
            fail_msg("row %d is kept; only the newest %zu of %zu should be", got[i], kept,
                     10 * kept);
    /* growth: the next rows replace the oldest kept */
    rows(f->csv, (int)(10 * kept), (int)(10 * kept + 100), 0);
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    d = sl__agent_live_data(l);
    assert_int_equal(d->client_n[0], kept);
    n = held_rows(d, got, kept);
    {
        int newest = 0, oldest = 1 << 30;
        for (size_t i = 0; i < n; i++) {
            newest = got[i] > newest ? got[i] : newest;
            oldest = got[i] < oldest ? got[i] : oldest;
        }
        assert_int_equal(newest, (int)(10 * kept + 99));
        assert_int_equal(oldest, (int)(9 * kept + 100));
    }
    free(got);
    sl__agent_live_free(l);
}

/* A reservoir keeps a uniform sample of all seen, not the newest. */
static void test_reservoir(void **state)
{
    fx *f = *state;
    sl__agent_live *l;
    const sl_agent_data *d;
    char why[256];
    int *got;
    size_t n, total;
    double mean = 0;
    int lo = 1 << 30, hi = 0;
    rows(f->csv, 0, 20000, 1);
    l = live_for(f, 32 * 1024, 1, "");
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    d = sl__agent_live_data(l);
    assert_non_null(d);
    total = d->client_n[0];
    assert_true(total > 500 && total < 2000);
    got = malloc(total * sizeof *got);
    n = held_rows(d, got, total);
    for (size_t i = 0; i < n; i++) {
        mean += got[i];
        lo = got[i] < lo ? got[i] : lo;
        hi = got[i] > hi ? got[i] : hi;
    }
    mean /= (double)n;
    /* uniform over 0..19999: mean 10000 (sd of the mean about 5773 / sqrt(n) < 260) */
    if (fabs(mean - 9999.5) > 1200 || lo > 1000 || hi < 19000)
        fail_msg("the reservoir is not uniform: mean %.0f, rows %d .. %d", mean, lo, hi);
    free(got);
    sl__agent_live_free(l);
}

/* The held-out share goes to the eval list; the two lists cover the store. */
static void test_held_out(void **state)
{
    fx *f = *state;
    sl__agent_live *l;
    const sl_agent_data *d;
    char why[256];
    rows(f->csv, 0, 1000, 1);
    l = live_for(f, 1 << 20, 0, ",\"evaluation\":{\"share\":0.3}");
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    d = sl__agent_live_data(l);
    assert_non_null(d);
    assert_int_equal(d->client_n[0] + d->eval_n[0], 1000);
    assert_true(d->eval_n[0] > 240 && d->eval_n[0] < 360);
    for (size_t i = 0; i < d->eval_n[0]; i++)
        for (size_t j = 0; j < d->client_n[0]; j += 97)
            assert_true(d->eval_ix[0][i] != d->client_ix[0][j]);
    sl__agent_live_free(l);
}

/* Bad data: no usable data with the reason; fixed, read anew from an empty store. */
static void test_refused_then_fixed(void **state)
{
    fx *f = *state;
    sl__agent_live *l;
    char why[256];
    FILE *fp;
    rows(f->csv, 0, 50, 1);
    l = live_for(f, 1 << 20, 0, ",\"min_samples\":5");
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    assert_int_equal(sl__agent_live_data(l)->client_n[0], 50);
    fp = fopen(f->csv, "a");
    assert_non_null(fp);
    fputs("50,1,2,3,7\n", fp); /* class 7 of 3 */
    fclose(fp);
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    if (strncmp(why, "no usable data: ", 16) != 0 || strstr(why, "line 52") == NULL)
        fail_msg("the refusal does not say where: %s", why);
    assert_null(sl__agent_live_data(l));
    /* still bad: still refused */
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    assert_non_null(strstr(why, "no usable data: "));
    /* the application rewrites its file: everything is read again, once */
    rows(f->csv, 0, 3, 1);
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    assert_non_null(strstr(why, "too few samples: 3"));
    rows(f->csv, 3, 30, 0);
    assert_int_equal(sl__agent_live_refresh(l, why, sizeof why), SL_OK);
    assert_string_equal(why, "");
    assert_int_equal(sl__agent_live_data(l)->client_n[0], 30);
    assert_int_equal(sl__agent_live_seen(l), 30);
    sl__agent_live_free(l);
}

/* A contract that is not valid, or a cap too small for one sample: said, not crashed. */
static void test_unusable_contract(void **state)
{
    fx *f = *state;
    sl__agent_live *l = NULL;
    char why[256], sha[65];
    const char *bad = "{\"input\":{\"features\":[\"i\"]},\"label\":{\"kind\":\"colour\"}}";
    memset(sha, 'b', 64);
    sha[64] = '\0';
    rows(f->csv, 0, 10, 1);
    assert_int_equal(sl__agent_live_create(f->uri, 1 << 20, 0, 1, &l), SL_OK);
    assert_int_equal(sl__agent_live_set_contract(l, bad, strlen(bad), sha, why, sizeof why), SL_OK);
    assert_non_null(strstr(why, "label.kind"));
    assert_null(sl__agent_live_data(l));
    sl__agent_live_free(l);
    assert_int_equal(sl__agent_live_create(f->uri, 100, 0, 1, &l), SL_OK);
    {
        char text[512];
        snprintf(text, sizeof text, CONTRACT, "");
        assert_int_equal(sl__agent_live_set_contract(l, text, strlen(text), sha, why, sizeof why),
                         SL_OK);
        assert_non_null(strstr(why, "holds no sample"));
    }
    sl__agent_live_free(l);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_newest_under_cap),   T(test_reservoir),         T(test_held_out),
        T(test_refused_then_fixed), T(test_unusable_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
