/*
 * The .npy reader: every dtype, versions 1.0 and 2.0, 1-d to 4-d shapes,
 * rows read in ranges across its chunk size, and each refusal with its
 * message: not .npy, another version, a header that does not parse or has
 * another key, Fortran order, another dtype, a file cut short or too long, a
 * non-finite value, a value float32 cannot hold, a file changed after open.
 * Files are written here byte by byte as numpy.save writes them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../support/sl_test.h"
#include "starling/npy.h"

static char g_dir[512];

/* numpy.save's layout: magic, version, header length, the dict padded to 64 bytes. */
static void write_npy(const char *name, int major, const char *dict, const void *data, size_t len,
                      char *path, size_t cap)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), total = pre + dl + 1, pad;
    FILE *f;
    pad = (64 - total % 64) % 64;
    snprintf(path, cap, "%s/%s", g_dir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(major, f);
    fputc(0, f);
    {
        uint32_t hl = (uint32_t)(dl + pad + 1);
        uint8_t b[4] = {(uint8_t)hl, (uint8_t)(hl >> 8), (uint8_t)(hl >> 16), (uint8_t)(hl >> 24)};
        fwrite(b, 1, major == 1 ? 2 : 4, f);
    }
    fwrite(dict, 1, dl, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (len)
        fwrite(data, 1, len, f);
    assert_int_equal(fclose(f), 0);
}

static void test_dtypes_and_shapes(void **state)
{
    char path[700], err[256];
    sl_npy *a;
    float f4[6] = {1.5f, -2, 3, 4, 5, 6}, out[1024];
    double f8[4] = {0.25, -1e30, 7, 8};
    uint8_t u1[6] = {0, 1, 2, 253, 254, 255};
    int64_t i8[3] = {-3, 0, 16777216};
    uint64_t shape[8];
    size_t ndim;
    (void)state;
    write_npy("f4.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4,
              sizeof f4, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_rows(a), 3);
    assert_int_equal(sl_npy_row_size(a), 2);
    assert_int_equal(sl_npy_type(a), SL_NPY_F4);
    sl_npy_shape(a, shape, &ndim);
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[1], 2);
    assert_int_equal(sl_npy_read(a, 1, 2, out, err, sizeof err), SL_OK);
    assert_memory_equal(out, f4 + 2, 4 * sizeof *out);
    assert_int_equal(sl_npy_read(a, 2, 2, out, err, sizeof err), SL_EINVAL); /* past the end */
    assert_int_equal(sl_npy_read(a, 3, 0, out, err, sizeof err), SL_OK);
    sl_npy_close(a);

    write_npy("f8.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1, 2), }", f8,
              sizeof f8, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_row_size(a), 2);
    assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_OK);
    assert_true(out[0] == 0.25f && out[1] == -1e30f && out[2] == 7 && out[3] == 8);
    sl_npy_close(a);

    write_npy("u1.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", u1,
              sizeof u1, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_rows(a), 6);
    assert_int_equal(sl_npy_row_size(a), 1);
    assert_int_equal(sl_npy_read(a, 0, 6, out, err, sizeof err), SL_OK);
    assert_true(out[0] == 0 && out[5] == 255);
    sl_npy_close(a);

    write_npy("i8.npy", 1, "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (3,)}", i8,
              sizeof i8, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 3, out, err, sizeof err), SL_OK);
    assert_true(out[0] == -3 && out[2] == 16777216);
    sl_npy_close(a);

    {
        /* many rows: reads cross the 64 KiB chunks, each value where it belongs */
        static float big[40000 * 4];
        for (size_t i = 0; i < 40000 * 4; i++)
            big[i] = (float)i;
        write_npy("big.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (40000, 4), }",
                  big, sizeof big, path, sizeof path);
        assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
        for (uint64_t r = 0; r < 40000; r += 4093) {
            size_t n = r + 200 <= 40000 ? 200 : 40000 - r;
            assert_int_equal(sl_npy_read(a, r, n, out, err, sizeof err), SL_OK);
            for (size_t i = 0; i < n * 4; i++)
                if (out[i] != (float)(r * 4 + i))
                    fail_msg("row %llu + %zu", (unsigned long long)r, i / 4);
        }
        {
            float *all = malloc(sizeof big);
            assert_int_equal(sl_npy_read(a, 0, 40000, all, err, sizeof err), SL_OK);
            assert_memory_equal(all, big, sizeof big);
            free(all);
        }
        sl_npy_close(a);
    }
}

static void expect_refused(const char *name, int major, const char *dict, const void *data,
                           size_t len, int status, const char *words)
{
    char path[700], err[256] = "";
    sl_npy *a = (sl_npy *)0x1;
    write_npy(name, major, dict, data, len, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), status);
    assert_true(a == (sl_npy *)0x1); /* untouched */
    if (strstr(err, words) == NULL || strstr(err, name) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", name, err, words);
}

static void test_refusals(void **state)
{
    float f4[4] = {1, 2, 3, 4};
    char path[700], err[256];
    sl_npy *a;
    FILE *f;
    (void)state;
    expect_refused("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                   f4, sizeof f4, SL_EUNSUPPORTED, "Fortran order");
    expect_refused("big_endian.npy", 1,
                   "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", f4, sizeof f4,
                   SL_EUNSUPPORTED, "dtype '>f4'");
    expect_refused("int32.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", f4,
                   sizeof f4, SL_EUNSUPPORTED, "dtype '<i4'");
    expect_refused("extra_key.npy", 1,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", f4, sizeof f4,
                   SL_ECORRUPT, "unknown header key 'x'");
    expect_refused("twice.npy", 1,
                   "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", f4,
                   sizeof f4, SL_ECORRUPT, "does not parse");
    expect_refused("no_shape.npy", 1, "{'descr': '<f4', 'fortran_order': False}", f4, sizeof f4,
                   SL_ECORRUPT, "does not parse");
    expect_refused("not_dict.npy", 1, "[1, 2]", f4, sizeof f4, SL_ECORRUPT, "not a dictionary");
    expect_refused("short.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
                   f4, sizeof f4 - 1, SL_ETRUNCATED, "bytes where the header says");
    expect_refused("long.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4,
                   sizeof f4, SL_ECORRUPT, "bytes where the header says");
    expect_refused("huge.npy", 1,
                   "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, "
                   "4294967296, 16), }",
                   f4, sizeof f4, SL_ETOOBIG, "too large");
    expect_refused("v4.npy", 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f4,
                   sizeof f4, SL_EVERSION, "version 4.0");
    /* not .npy at all, and a missing file */
    snprintf(path, sizeof path, "%s/text.npy", g_dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("x,y\n1,2\n", f);
    fclose(f);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_EMAGIC);
    assert_non_null(strstr(err, "not a .npy file"));
    snprintf(path, sizeof path, "%s/missing.npy", g_dir);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_ENOENT);
}

static void test_bad_values_and_changes(void **state)
{
    char path[700], err[256];
    float f4[6] = {1, 2, 3, 4, NAN, 6}, out[6];
    double f8[2] = {1, 1e300};
    int64_t i8[2] = {1, (int64_t)1 << 40};
    sl_npy *a;
    FILE *f;
    (void)state;
    write_npy("nan.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4,
              sizeof f4, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_OK); /* rows 0-1 are fine */
    assert_int_equal(sl_npy_read(a, 0, 3, out, err, sizeof err), SL_ENONFINITE);
    assert_non_null(strstr(err, "row 2, column 0: not a finite number"));
    sl_npy_close(a);
    write_npy("range.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f8,
              sizeof f8, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_ERANGE);
    assert_non_null(strstr(err, "row 1, column 0"));
    sl_npy_close(a);
    write_npy("i8big.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", i8,
              sizeof i8, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_ERANGE);
    sl_npy_close(a);
    /* the application rewrites the file after the agent opened it */
    f4[4] = 5;
    write_npy("moving.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4,
              sizeof f4, path, sizeof path);
    assert_int_equal(sl_npy_open(path, &a, err, sizeof err), SL_OK);
    f = fopen(path, "ab");
    assert_non_null(f);
    fwrite(f4, 1, 8, f);
    fclose(f);
    assert_int_equal(sl_npy_read(a, 0, 1, out, err, sizeof err), SL_ESTATE);
    assert_non_null(strstr(err, "changed since it was opened"));
    sl_npy_close(a);
}

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(g_dir, sizeof g_dir, "test_npy");
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
        cmocka_unit_test(test_dtypes_and_shapes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_values_and_changes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
