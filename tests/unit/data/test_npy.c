/*
 * The .npy reader: every dtype, versions 1.0 and 2.0, 1-d to 4-d shapes,
 * rows read in ranges across its chunk size, and each refusal with its
 * message: not .npy, another version, a header that does not parse or has
 * another key, Fortran order, another dtype, a file cut short or too long, a
 * non-finite value, a value float32 cannot hold, a file changed after open.
 * Files are written here byte by byte as numpy.save writes them.
 *
 * The .npz reader: archives written here with minizip (members stored, as
 * numpy.savez writes them, and deflated, as numpy.savez_compressed does) and
 * the two NumPy wrote (tests/fixtures/data, make_npz.py), read back exactly,
 * in order and out of order; and the refusals: a missing member (the reason
 * lists the others), corrupt compressed bytes, a CRC mismatch, an archive cut
 * short, a member whose .npy header or zip entry lies about its size,
 * encryption, another compression method, not a zip, an empty file.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <minizip/zip.h>

#include "../../support/sl_test.h"
#include "starling/npy.h"

#ifndef SL_FIXTURES_DIR
#error "SL_FIXTURES_DIR must name the source tree's tests/fixtures"
#endif

static char g_dir[512];

/* numpy.save's bytes (malloc'd, *@n of them): magic, version, header length, the dict padded to
 * 64 bytes, @len bytes of data. */
static uint8_t *npy_bytes(int major, const char *dict, const void *data, size_t len, size_t *n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), total = pre + dl + 1, pad, at = 0;
    uint8_t *b;
    uint32_t hl;
    pad = (64 - total % 64) % 64;
    hl = (uint32_t)(dl + pad + 1);
    b = malloc(total + pad + len);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    at = 8;
    for (size_t i = 0; i < pre - 8; i++)
        b[at++] = (uint8_t)(hl >> (8 * i));
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

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_npy(const char *name, int major, const char *dict, const void *data, size_t len,
                      char *path, size_t cap)
{
    size_t n;
    uint8_t *b = npy_bytes(major, dict, data, len, &n);
    snprintf(path, cap, "%s/%s", g_dir, name);
    write_file(path, b, n);
    free(b);
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

/* ---- .npz ---------------------------------------------------------------------------------- */

typedef struct member {
    const char *name; /* in the archive, ".npy" included */
    int method;       /* 0 (stored) or Z_DEFLATED */
    const uint8_t *bytes;
    size_t len;
} member;

/* A zip archive of @n members, written by minizip as numpy's zipfile would. */
static void write_npz(const char *name, const member *m, size_t n, char *path, size_t cap)
{
    zipFile zf;
    snprintf(path, cap, "%s/%s", g_dir, name);
    zf = zipOpen64(path, APPEND_STATUS_CREATE);
    assert_non_null(zf);
    for (size_t i = 0; i < n; i++) {
        zip_fileinfo zi;
        memset(&zi, 0, sizeof zi);
        assert_int_equal(zipOpenNewFileInZip(zf, m[i].name, &zi, NULL, 0, NULL, 0, NULL,
                                             m[i].method, m[i].method ? Z_DEFAULT_COMPRESSION : 0),
                         ZIP_OK);
        assert_int_equal(zipWriteInFileInZip(zf, m[i].bytes, (unsigned)m[i].len), ZIP_OK);
        assert_int_equal(zipCloseFileInZip(zf), ZIP_OK);
    }
    assert_int_equal(zipClose(zf, NULL), ZIP_OK);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long n;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Where @name's bytes start in the zip at @z (its local header, read the zip way). */
static size_t data_offset(const uint8_t *z, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t at = 0; at + 30 + nl <= len; at++)
        if (memcmp(z + at, "PK\x03\x04", 4) == 0 && (z[at + 26] | z[at + 27] << 8) == (int)nl &&
            memcmp(z + at + 30, name, nl) == 0)
            return at + 30 + nl + (size_t)(z[at + 28] | z[at + 29] << 8);
    fail_msg("no local header for %s", name);
    return 0;
}

/* Set a field of @name's local header (at @local) and central directory entry (at @central),
 * @width bytes little endian: the uncompressed size is at 22 and 24, the method at 8 and 10. */
static void patch_entry(uint8_t *z, size_t len, const char *name, size_t local, size_t central,
                        uint32_t value, int width)
{
    size_t nl = strlen(name);
    int patched = 0;
    for (size_t at = 0; at + 46 + nl <= len; at++) {
        size_t off = 0;
        if (memcmp(z + at, "PK\x03\x04", 4) == 0 && memcmp(z + at + 30, name, nl) == 0)
            off = at + local;
        else if (memcmp(z + at, "PK\x01\x02", 4) == 0 && memcmp(z + at + 46, name, nl) == 0)
            off = at + central;
        if (off) {
            for (int i = 0; i < width; i++)
                z[off + (size_t)i] = (uint8_t)(value >> (8 * i));
            patched++;
        }
    }
    assert_int_equal(patched, 2);
}

static void expect_npz_refused(const char *path, const char *array, int status, const char *words)
{
    char err[512] = "";
    sl_npy *a = (sl_npy *)0x1;
    int rc = sl_npz_open(path, array, &a, err, sizeof err);
    if (rc != status || strstr(err, words) == NULL)
        fail_msg("%s[%s]: status %d (want %d), \"%s\" (want \"%s\")", path, array, rc, status, err,
                 words);
    assert_true(a == (sl_npy *)0x1); /* untouched */
}

#define BIG_ROWS 40000
#define BIG_COLS 4

/* Rows @first.. of the big array, as its writer made them. */
static void check_big(const float *out, uint64_t first, size_t n)
{
    for (size_t i = 0; i < n * BIG_COLS; i++)
        if (out[i] != (float)(first * BIG_COLS + i) * 0.25f)
            fail_msg("row %llu + %zu: %g", (unsigned long long)first, i / BIG_COLS, out[i]);
}

static void test_npz_written_here(void **state)
{
    static float big[BIG_ROWS * BIG_COLS];
    uint8_t u1[2 * 2 * 3];
    char path[700], err[256] = "";
    float *out = malloc(sizeof big);
    uint8_t *xb, *yb;
    size_t xl, yl, ndim;
    uint64_t shape[8];
    sl_npy *a;
    (void)state;
    assert_non_null(out);
    for (size_t i = 0; i < BIG_ROWS * BIG_COLS; i++)
        big[i] = (float)i * 0.25f;
    for (size_t i = 0; i < sizeof u1; i++)
        u1[i] = (uint8_t)(i * 20);
    xb = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (40000, 4), }", big,
                   sizeof big, &xl);
    yb = npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 3), }", u1,
                   sizeof u1, &yl);
    for (int method = 0; method <= Z_DEFLATED; method += Z_DEFLATED) {
        member m[3] = {{"notes.txt", method, (const uint8_t *)"hello", 5},
                       {"x.npy", method, xb, xl},
                       {"y.npy", method, yb, yl}};
        write_npz(method ? "deflated.npz" : "stored.npz", m, 3, path, sizeof path);
        assert_int_equal(sl_npz_open(path, "x", &a, err, sizeof err), SL_OK);
        assert_int_equal(sl_npy_rows(a), BIG_ROWS);
        assert_int_equal(sl_npy_row_size(a), BIG_COLS);
        assert_int_equal(sl_npy_type(a), SL_NPY_F4);
        /* the whole array, then in order in ranges that cross the chunks, then out of order:
         * backwards (a deflated member starts over), forwards past a gap, the last row */
        assert_int_equal(sl_npy_read(a, 0, BIG_ROWS, out, err, sizeof err), SL_OK);
        assert_memory_equal(out, big, sizeof big);
        for (uint64_t r = 0; r < BIG_ROWS; r += 4093) {
            size_t n = r + 200 <= BIG_ROWS ? 200 : BIG_ROWS - (size_t)r;
            assert_int_equal(sl_npy_read(a, r, n, out, err, sizeof err), SL_OK);
            check_big(out, r, n);
        }
        {
            const uint64_t at[] = {39000, 10, 10, 20000, 19999, 39999, 0, 30000};
            for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
                assert_int_equal(sl_npy_read(a, at[i], 1, out, err, sizeof err), SL_OK);
                check_big(out, at[i], 1);
            }
        }
        assert_int_equal(sl_npy_read(a, BIG_ROWS - 1, 2, out, err, sizeof err), SL_EINVAL);
        sl_npy_close(a);

        assert_int_equal(sl_npz_open(path, "y", &a, err, sizeof err), SL_OK);
        assert_int_equal(sl_npy_type(a), SL_NPY_U1);
        sl_npy_shape(a, shape, &ndim);
        assert_int_equal(ndim, 3);
        assert_int_equal(shape[0], 2);
        assert_int_equal(sl_npy_row_size(a), 6);
        assert_int_equal(sl_npy_read(a, 1, 1, out, err, sizeof err), SL_OK);
        for (size_t i = 0; i < 6; i++)
            assert_true(out[i] == (float)u1[6 + i]);
        assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_OK);
        for (size_t i = 0; i < 12; i++)
            assert_true(out[i] == (float)u1[i]);
        sl_npy_close(a);
        sl_npy_close(NULL);

        /* the application rewrites the archive after the agent opened it */
        assert_int_equal(sl_npz_open(path, "y", &a, err, sizeof err), SL_OK);
        write_npz(method ? "deflated.npz" : "stored.npz", m + 2, 1, path, sizeof path);
        assert_int_equal(sl_npy_read(a, 0, 1, out, err, sizeof err), SL_ESTATE);
        assert_non_null(strstr(err, "changed since it was opened"));
        sl_npy_close(a);
    }
    free(xb);
    free(yb);
    free(out);
}

/* numpy.savez and numpy.savez_compressed themselves (tests/fixtures/data/make_npz.py). */
static void test_npz_from_numpy(void **state)
{
    const char *dir = getenv("SL_FIXTURES"), *files[2] = {"savez.npz", "savez_compressed.npz"};
    (void)state;
    if (dir == NULL || dir[0] == '\0')
        dir = SL_FIXTURES_DIR;
    for (size_t f = 0; f < 2; f++) {
        char path[4200], err[256] = "";
        float out[12];
        uint64_t shape[8];
        size_t ndim;
        sl_npy *a;
        snprintf(path, sizeof path, "%s/data/%s", dir, files[f]);
        if (sl_npz_open(path, "x", &a, err, sizeof err) != SL_OK)
            fail_msg("%s", err);
        assert_int_equal(sl_npy_type(a), SL_NPY_F4);
        sl_npy_shape(a, shape, &ndim);
        assert_int_equal(ndim, 2);
        assert_true(shape[0] == 4 && shape[1] == 3);
        assert_int_equal(sl_npy_read(a, 0, 4, out, err, sizeof err), SL_OK);
        for (size_t i = 0; i < 12; i++)
            assert_true(out[i] == 0.5f * (float)i - 1);
        assert_int_equal(sl_npy_read(a, 2, 1, out, err, sizeof err), SL_OK);
        assert_true(out[0] == 2 && out[1] == 2.5f && out[2] == 3);
        sl_npy_close(a);
        assert_int_equal(sl_npz_open(path, "y", &a, err, sizeof err), SL_OK);
        assert_int_equal(sl_npy_type(a), SL_NPY_I8);
        assert_int_equal(sl_npy_rows(a), 4);
        assert_int_equal(sl_npy_read(a, 0, 4, out, err, sizeof err), SL_OK);
        assert_true(out[0] == 0 && out[1] == 1 && out[2] == 2 && out[3] == 1);
        sl_npy_close(a);
        expect_npz_refused(path, "z", SL_ENOENT, "no array 'z' (the archive holds: 'x', 'y')");
    }
}

static void test_npz_refusals(void **state)
{
    float f4[64];
    char path[700], bad[700];
    uint8_t *xb, *z;
    size_t xl, zl, at;
    (void)state;
    for (size_t i = 0; i < 64; i++)
        f4[i] = (float)(i % 7) - 3.5f;
    xb = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (16, 4), }", f4, sizeof f4,
                   &xl);
    {
        member m[2] = {{"x.npy", 0, xb, xl}, {"labels.npy", Z_DEFLATED, xb, xl}};
        write_npz("two.npz", m, 2, path, sizeof path);
    }
    expect_npz_refused(path, "y", SL_ENOENT, "no array 'y' (the archive holds: 'x', 'labels')");
    expect_npz_refused(path, "x.npy", SL_ENOENT, "no array 'x.npy'");
    write_npz("empty.npz", NULL, 0, bad, sizeof bad);
    expect_npz_refused(bad, "x", SL_ENOENT, "holds: nothing");

    /* truncated archives: the central directory is at the end */
    z = read_all(path, &zl);
    snprintf(bad, sizeof bad, "%s/cut.npz", g_dir);
    write_file(bad, z, zl / 2);
    expect_npz_refused(bad, "x", SL_ETRUNCATED, "cut short");
    write_file(bad, z, zl - 1);
    expect_npz_refused(bad, "x", SL_ETRUNCATED, "cut short");
    write_file(bad, z, 0);
    expect_npz_refused(bad, "x", SL_ETRUNCATED, "empty file");
    /* a stored member with one byte changed: its CRC-32 */
    at = data_offset(z, zl, "x.npy");
    z[at + xl - 3] ^= 0x40;
    snprintf(bad, sizeof bad, "%s/crc.npz", g_dir);
    write_file(bad, z, zl);
    expect_npz_refused(bad, "x", SL_ECORRUPT, "x.npy: CRC-32 mismatch");
    z[at + xl - 3] ^= 0x40;
    /* a deflated member with bytes overwritten */
    at = data_offset(z, zl, "labels.npy");
    memset(z + at + 10, 0xff, 12);
    write_file(bad, z, zl);
    expect_npz_refused(bad, "labels", SL_ECORRUPT, "labels.npy: corrupt compressed data");
    free(z);

    /* a .npy header that says more rows than the member holds, and fewer */
    {
        uint8_t *lie = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (17, 4), }",
                                 f4, sizeof f4, &zl);
        uint8_t *less = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (15, 4), }",
                                  f4, sizeof f4, &xl);
        member m[2] = {{"more.npy", Z_DEFLATED, lie, zl}, {"less.npy", 0, less, xl}};
        write_npz("lies.npz", m, 2, path, sizeof path);
        expect_npz_refused(path, "more", SL_ETRUNCATED,
                           "lies.npz:more.npy: 384 bytes where the header says 400");
        expect_npz_refused(path, "less", SL_ECORRUPT, "384 bytes where the header says 368");
        /* ... and a zip entry that lists more bytes than its deflate stream holds (the .npy
         * header agreeing with the list) */
        z = read_all(path, &zl);
        patch_entry(z, zl, "more.npy", 22, 24, 400, 4);
        write_file(bad, z, zl);
        expect_npz_refused(bad, "more", SL_ETRUNCATED,
                           "more.npy: cut short: 384 bytes of the 400 the archive lists");
        /* a stored entry whose sizes disagree */
        patch_entry(z, zl, "less.npy", 22, 24, 300, 4);
        write_file(bad, z, zl);
        expect_npz_refused(bad, "less", SL_ECORRUPT, "stored, but 384 bytes");
        free(z);
        free(lie);
        free(less);
    }

    /* encrypted, another method */
    {
        zipFile zf;
        zip_fileinfo zi;
        memset(&zi, 0, sizeof zi);
        snprintf(path, sizeof path, "%s/other.npz", g_dir);
        zf = zipOpen64(path, APPEND_STATUS_CREATE);
        assert_non_null(zf);
        assert_int_equal(zipOpenNewFileInZip3(zf, "secret.npy", &zi, NULL, 0, NULL, 0, NULL,
                                              Z_DEFLATED, 6, 0, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY,
                                              "password", crc32(0, xb, (uInt)xl)),
                         ZIP_OK);
        assert_int_equal(zipWriteInFileInZip(zf, xb, (unsigned)xl), ZIP_OK);
        assert_int_equal(zipCloseFileInZip(zf), ZIP_OK);
        assert_int_equal(zipClose(zf, NULL), ZIP_OK);
        expect_npz_refused(path, "secret", SL_EUNSUPPORTED, "secret.npy: encrypted");
        /* bzip2 (12), which minizip would not write: a stored entry relabelled */
        {
            member m[1] = {{"bz.npy", 0, xb, xl}};
            write_npz("bzip2.npz", m, 1, path, sizeof path);
        }
        z = read_all(path, &zl);
        patch_entry(z, zl, "bz.npy", 8, 10, 12, 2);
        write_file(path, z, zl);
        free(z);
        expect_npz_refused(path, "bz", SL_EUNSUPPORTED, "compression method 12");
    }

    /* not an archive at all */
    write_npy("plain.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (16, 4), }", f4,
              sizeof f4, path, sizeof path);
    expect_npz_refused(path, "x", SL_EMAGIC, "a .npy file, not an .npz archive");
    snprintf(path, sizeof path, "%s/text.npz", g_dir);
    write_file(path, "x,y\n1,2\n", 8);
    expect_npz_refused(path, "x", SL_EMAGIC, "not an .npz archive");
    snprintf(path, sizeof path, "%s/missing.npz", g_dir);
    expect_npz_refused(path, "x", SL_ENOENT, "missing.npz");
    expect_npz_refused(g_dir, "x", SL_EIO, "not a regular file");
    expect_npz_refused(path, "", SL_EINVAL, "an array name of 0 bytes");
    free(xb);
}

/* A value that is not finite, inside a deflated member: the row and column, as for .npy. */
static void test_npz_bad_values(void **state)
{
    float f4[6] = {1, 2, 3, 4, 5, INFINITY}, out[6];
    char path[700], err[256] = "";
    uint8_t *b;
    size_t n;
    sl_npy *a;
    (void)state;
    b = npy_bytes(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4, sizeof f4,
                  &n);
    {
        member m[1] = {{"x.npy", Z_DEFLATED, b, n}};
        write_npz("inf.npz", m, 1, path, sizeof path);
    }
    assert_int_equal(sl_npz_open(path, "x", &a, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 2, out, err, sizeof err), SL_OK);
    assert_int_equal(sl_npy_read(a, 0, 3, out, err, sizeof err), SL_ENONFINITE);
    assert_non_null(strstr(err, "inf.npz:x.npy: row 2, column 1: not a finite number"));
    sl_npy_close(a);
    free(b);
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
        cmocka_unit_test(test_dtypes_and_shapes),      cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_values_and_changes), cmocka_unit_test(test_npz_written_here),
        cmocka_unit_test(test_npz_from_numpy),         cmocka_unit_test(test_npz_refusals),
        cmocka_unit_test(test_npz_bad_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
