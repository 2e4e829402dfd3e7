/* IDX reader: plain and gzip files, every rejection path, the real Fashion-MNIST. */
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include <zlib.h>

#include "../../support/sl_test.h"
#include "starling/data.h"

#define MEAN 0.5f
#define STD  0.25f

static char dir[512];
static char img_path[600], lbl_path[600];

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "data_idx");
    snprintf(img_path, sizeof img_path, "%s/images", dir);
    snprintf(lbl_path, sizeof lbl_path, "%s/labels", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(dir);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* write @len bytes as they are (@gz NULL) or gzipped with gzopen mode @gz ("wb", "wb1") */
static void write_file(const char *path, const void *data, size_t len, const char *gz)
{
    if (gz == NULL) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    } else {
        gzFile g = gzopen(path, gz);
        assert_non_null(g);
        if (len > 0)
            assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(g), Z_OK);
    }
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long size;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    assert_true(size >= 0);
    rewind(f);
    buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

/* An IDX3 image file: header then @body bytes of pixels (need not match the dims). */
static unsigned char *make_images(uint32_t n, uint32_t rows, uint32_t cols, const unsigned char *px,
                                  size_t body, size_t *len)
{
    unsigned char *buf = malloc(16 + body);
    assert_non_null(buf);
    put32(buf, 0x00000803u);
    put32(buf + 4, n);
    put32(buf + 8, rows);
    put32(buf + 12, cols);
    if (body > 0)
        memcpy(buf + 16, px, body);
    *len = 16 + body;
    return buf;
}

static unsigned char *make_labels(uint32_t n, const unsigned char *tags, size_t body, size_t *len)
{
    unsigned char *buf = malloc(8 + body);
    assert_non_null(buf);
    put32(buf, 0x00000801u);
    put32(buf + 4, n);
    if (body > 0)
        memcpy(buf + 8, tags, body);
    *len = 8 + body;
    return buf;
}

/* the small valid pair used by most tests: 3 samples of 2 x 3 */
static const unsigned char PX[18] = {0,   255, 128, 1, 2, 3, 254, 17, 99,
                                     200, 100, 50,  7, 8, 9, 10,  11, 12};
static const unsigned char TAGS[3] = {2, 0, 5};

static void write_pair(int gz_images, int gz_labels)
{
    size_t il, ll;
    unsigned char *img = make_images(3, 2, 3, PX, sizeof PX, &il);
    unsigned char *lbl = make_labels(3, TAGS, sizeof TAGS, &ll);
    write_file(img_path, img, il, gz_images ? "wb" : NULL);
    write_file(lbl_path, lbl, ll, gz_labels ? "wb" : NULL);
    free(img);
    free(lbl);
}

/* load the pair and expect @want; a failure must leave *out untouched and say why */
static void expect_status(int want, const char *in_message)
{
    sl_dataset *ds = (sl_dataset *)0x1;
    char err[256] = "";
    int rc = sl_data_load_idx(img_path, lbl_path, MEAN, STD, &ds, err, sizeof err);
    if (rc != want)
        fprintf(stderr, "got %s (%s), want %s\n", sl_errname(rc), err, sl_errname(want));
    assert_int_equal(rc, want);
    if (want == SL_OK) {
        sl_dataset_free(ds);
        return;
    }
    assert_ptr_equal(ds, (sl_dataset *)0x1);
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
    if (in_message != NULL && strstr(err, in_message) == NULL) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, in_message);
        fail();
    }
}

static void check_small(const sl_dataset *ds)
{
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->rows, 2);
    assert_int_equal(ds->cols, 3);
    assert_int_equal(ds->classes, 6);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(ds->y[i], TAGS[i]);
    for (size_t i = 0; i < sizeof PX; i++) {
        double want = ((double)PX[i] / 255.0 - MEAN) / STD;
        assert_true(fabs(ds->x[i] - want) < 1e-5);
    }
    assert_true(fabs(ds->x[0] - -2.0) < 1e-6); /* pixel 0 */
    assert_true(fabs(ds->x[1] - 2.0) < 1e-6);  /* pixel 255 */
}

static void test_load_plain_and_gzip(void **state)
{
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        sl_dataset *ds = NULL;
        char err[256] = "";
        write_pair(mode & 1, mode >> 1);
        assert_int_equal(sl_data_load_idx(img_path, lbl_path, MEAN, STD, &ds, err, sizeof err),
                         SL_OK);
        check_small(ds);
        sl_dataset_free(ds);
    }
    sl_dataset_free(NULL);
}

/* `cat a.gz b.gz` is a valid gzip file (gzip -d reads every member) */
static void test_load_concatenated_gzip_members(void **state)
{
    size_t il, first_len, second_len;
    unsigned char *img = make_images(3, 2, 3, PX, sizeof PX, &il), *first, *second, *joined;
    sl_dataset *ds = NULL;
    (void)state;
    write_pair(0, 1);
    write_file(img_path, img, 5, "wb");
    first = read_all(img_path, &first_len);
    write_file(img_path, img + 5, il - 5, "wb9");
    second = read_all(img_path, &second_len);
    joined = malloc(first_len + second_len);
    assert_non_null(joined);
    memcpy(joined, first, first_len);
    memcpy(joined + first_len, second, second_len);
    write_file(img_path, joined, first_len + second_len, NULL);
    assert_int_equal(sl_data_load_idx(img_path, lbl_path, MEAN, STD, &ds, NULL, 0), SL_OK);
    check_small(ds);
    sl_dataset_free(ds);
    /* garbage after the last member is not another member */
    memcpy(joined + first_len, "garbage", 7);
    write_file(img_path, joined, first_len + 7, NULL);
    expect_status(SL_ECORRUPT, "gzip");
    free(img);
    free(first);
    free(second);
    free(joined);
}

/* every strict prefix of either file, plain or gzipped, and every cut of the gzip file */
static void test_every_truncation(void **state)
{
    size_t il, ll, gl;
    unsigned char *img = make_images(3, 2, 3, PX, sizeof PX, &il);
    unsigned char *lbl = make_labels(3, TAGS, sizeof TAGS, &ll), *gzbytes;
    (void)state;
    write_pair(0, 0);
    for (size_t len = 0; len < il; len++) {
        write_file(img_path, img, len, NULL);
        expect_status(SL_ETRUNCATED, "truncated");
        write_file(img_path, img, len, "wb");
        expect_status(SL_ETRUNCATED, "truncated");
    }
    write_file(img_path, img, il, NULL);
    for (size_t len = 0; len < ll; len++) {
        write_file(lbl_path, lbl, len, NULL);
        expect_status(SL_ETRUNCATED, "truncated");
        write_file(lbl_path, lbl, len, "wb");
        expect_status(SL_ETRUNCATED, "truncated");
    }
    write_file(lbl_path, lbl, ll, NULL);
    expect_status(SL_OK, NULL);
    /* the compressed file itself cut short, including inside its 8-byte trailer */
    write_file(img_path, img, il, "wb");
    gzbytes = read_all(img_path, &gl);
    for (size_t len = 0; len < gl; len++) {
        write_file(img_path, gzbytes, len, NULL);
        expect_status(SL_ETRUNCATED, "truncated");
    }
    free(gzbytes);
    free(img);
    free(lbl);
}

/* an image header and @body zero bytes (plain or gzipped, as write_file) */
static void write_header_only(uint32_t n, uint32_t rows, uint32_t cols, size_t body, const char *gz)
{
    unsigned char *px = calloc(body + 1, 1), *img;
    size_t il;
    assert_non_null(px);
    img = make_images(n, rows, cols, px, body, &il);
    write_file(img_path, img, il, gz);
    free(img);
    free(px);
}

/* a label header and @body zero bytes */
static void write_labels_n(uint32_t n, size_t body)
{
    unsigned char *tags = calloc(body + 1, 1), *lbl;
    size_t ll;
    assert_non_null(tags);
    lbl = make_labels(n, tags, body, &ll);
    write_file(lbl_path, lbl, ll, NULL);
    free(lbl);
    free(tags);
}

static void test_trailing_byte(void **state)
{
    (void)state;
    write_labels_n(3, 3);
    write_header_only(3, 2, 3, sizeof PX + 1, NULL);
    expect_status(SL_ECORRUPT, "trailing data after 34 bytes");
    write_header_only(3, 2, 3, sizeof PX + 1, "wb");
    expect_status(SL_ECORRUPT, "trailing");
    write_header_only(3, 2, 3, sizeof PX, "wb");
    expect_status(SL_OK, NULL);
    write_labels_n(3, 4);
    expect_status(SL_ECORRUPT, "trailing data after 11 bytes");
}

/* bodies past the first 1 MiB buffer: the buffer grows, and still stops at the declared size */
static void test_large_body_exact_short_and_long(void **state)
{
    size_t body = 3u * 1000u * 1000u, il, ll;
    unsigned char *px = malloc(body + 1), *img;
    unsigned char *lbl = make_labels(3, TAGS, sizeof TAGS, &ll);
    sl_dataset *ds = NULL;
    (void)state;
    assert_non_null(px);
    for (size_t i = 0; i <= body; i++)
        px[i] = (unsigned char)(i * 7 + i / 1000);
    write_file(lbl_path, lbl, ll, NULL);
    img = make_images(3, 1000, 1000, px, body + 1, &il);
    for (int gz = 0; gz < 2; gz++) {
        write_file(img_path, img, il, gz ? "wb1" : NULL);
        expect_status(SL_ECORRUPT, "trailing data after 3000016 bytes");
        write_file(img_path, img, il - 2, gz ? "wb1" : NULL);
        expect_status(SL_ETRUNCATED, "expected 3000016 bytes, got 3000015");
        write_file(img_path, img, il - 1, gz ? "wb1" : NULL);
        assert_int_equal(sl_data_load_idx(img_path, lbl_path, 0.0f, 1.0f, &ds, NULL, 0), SL_OK);
        for (size_t i = 0; i < body; i += 4999)
            assert_true(fabs(ds->x[i] - px[i] / 255.0) < 1e-6);
        assert_true(fabs(ds->x[body - 1] - px[body - 1] / 255.0) < 1e-6);
        sl_dataset_free(ds);
    }
    free(img);
    free(lbl);
    free(px);
}

/* rewrite one byte of the valid image (or label) header */
static void patch(int labels, size_t at, unsigned char value)
{
    size_t len;
    unsigned char *buf = labels ? make_labels(3, TAGS, sizeof TAGS, &len)
                                : make_images(3, 2, 3, PX, sizeof PX, &len);
    buf[at] = value;
    write_file(labels ? lbl_path : img_path, buf, len, NULL);
    free(buf);
}

static void test_bad_magic_type_and_dims(void **state)
{
    (void)state;
    write_pair(0, 0);
    patch(0, 0, 0x01);
    expect_status(SL_EMAGIC, "not an IDX file");
    patch(0, 1, 0x08);
    expect_status(SL_EMAGIC, "not an IDX file");
    patch(0, 2, 0x09); /* signed byte */
    expect_status(SL_EMAGIC, "element type 0x09");
    patch(0, 2, 0x0d); /* float */
    expect_status(SL_EMAGIC, "element type");
    patch(0, 3, 2);
    expect_status(SL_EMAGIC, "2 dimensions, expected 3");
    patch(0, 3, 4);
    expect_status(SL_EMAGIC, "dimensions");
    write_pair(0, 0);
    patch(1, 3, 3);
    expect_status(SL_EMAGIC, "dimensions");
    patch(1, 2, 0x0c);
    expect_status(SL_EMAGIC, "element type");
    /* the two files swapped */
    write_file(img_path, "\0\0\x08\x01\0\0\0\x03\x02\0\x05", 11, NULL);
    write_file(lbl_path, "\0\0\x08\x03\0\0\0\x03", 8, NULL);
    expect_status(SL_EMAGIC, "1 dimensions, expected 3");
    /* a gzip file whose content is not IDX */
    write_file(img_path, "hello, world, this is text", 26, "wb");
    expect_status(SL_EMAGIC, "not an IDX file");
}

static void test_count_mismatch(void **state)
{
    (void)state;
    write_header_only(3, 2, 3, sizeof PX, NULL);
    write_labels_n(2, 2);
    expect_status(SL_ECORRUPT, "3 images but");
}

static void test_dimension_limits(void **state)
{
    (void)state;
    write_labels_n(3, 3);
    write_header_only(3, 0, 3, 0, NULL);
    expect_status(SL_ECORRUPT, "dimension 1 is zero");
    write_header_only(3, 2, 0, 0, NULL);
    expect_status(SL_ECORRUPT, "dimension 2 is zero");
    write_header_only(0, 2, 3, 0, NULL);
    expect_status(SL_ECORRUPT, "no samples");
    write_header_only(3, 4097, 3, 0, NULL);
    expect_status(SL_ETOOBIG, "4097");
    write_header_only(3, 3, 4097, 0, NULL);
    expect_status(SL_ETOOBIG, "4097");
    write_header_only((1u << 28) + 1, 1, 1, 0, NULL);
    expect_status(SL_ETOOBIG, "2^28");
    write_header_only(0xffffffffu, 28, 28, 0, NULL);
    expect_status(SL_ETOOBIG, NULL);
    /* the largest legal sides are accepted */
    write_header_only(1, 4096, 4096, 4096u * 4096u, NULL);
    write_labels_n(1, 1);
    expect_status(SL_OK, NULL);
    write_header_only(3, 2, 3, sizeof PX, NULL);
    write_labels_n(0, 0);
    expect_status(SL_ECORRUPT, "no samples");
}

/* 2^28 x 4096 x 4096 declared in front of 100 bytes: no 2^54-byte allocation, no wait */
static void test_huge_declared_size_fails_fast(void **state)
{
    double t0 = now_s();
    int want = SIZE_MAX / 4 >= ((uint64_t)1 << 52) ? SL_ETRUNCATED : SL_ETOOBIG;
    (void)state;
    write_header_only(1u << 28, 4096, 4096, 100, NULL);
    write_labels_n(1u << 28, 100);
    expect_status(want, want == SL_ETRUNCATED ? "expected 4503599627370512 bytes, got 116" : NULL);
    write_header_only(1u << 20, 28, 28, 100, NULL); /* 822 MB: fits a 32-bit size_t */
    write_labels_n(1u << 20, 100);
    expect_status(SL_ETRUNCATED, "got 116");
    write_header_only(1u << 20, 28, 28, 100, "wb");
    expect_status(SL_ETRUNCATED, "got 116");
    assert_true(now_s() - t0 < 2.0);
}

/*
 * A gzip bomb: 10 declared samples of 28 x 28, then 16 MiB of zeros, and the
 * compressed stream cut off at the end. A reader that stops one byte past the
 * declared size reports trailing data; one that inflated everything would
 * have reached the cut and reported a truncation instead.
 */
static void test_gzip_bomb_stops_after_declared_size(void **state)
{
    size_t body = 16u << 20, il, gl;
    unsigned char *px = calloc(body, 1), *img, *gzbytes;
    double t0;
    (void)state;
    assert_non_null(px);
    write_labels_n(10, 10);
    img = make_images(10, 28, 28, px, body, &il);
    write_file(img_path, img, il, "wb1");
    gzbytes = read_all(img_path, &gl);
    write_file(img_path, gzbytes, gl - 100, NULL);
    t0 = now_s();
    expect_status(SL_ECORRUPT, "trailing data after 7856 bytes");
    assert_true(now_s() - t0 < 2.0);
    free(gzbytes);
    free(img);
    free(px);
}

/* xor byte @at of the image file with @mask, in place (a second call undoes it) */
static void flip(size_t at, unsigned char mask)
{
    FILE *f = fopen(img_path, "r+b");
    int c;
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    assert_int_equal(fputc(c ^ mask, f), c ^ mask);
    assert_int_equal(fclose(f), 0);
}

/* load with byte @at flipped (expecting @want unless it is SL_OK), restore it, return the status */
static int load_flipped(size_t at, unsigned char mask, int want, const char *in_message)
{
    sl_dataset *ds = NULL;
    int rc;
    flip(at, mask);
    if (want != SL_OK)
        expect_status(want, in_message);
    rc = sl_data_load_idx(img_path, lbl_path, MEAN, STD, &ds, NULL, 0);
    sl_dataset_free(ds);
    flip(at, mask);
    return rc;
}

static void test_corrupt_gzip(void **state)
{
    size_t n = 200, rows = 8, cols = 8, body = n * rows * cols, il, gl;
    unsigned char *px = malloc(body), *img, *gzbytes;
    uint64_t seed = 42;
    int failures = 0, tries = 0;
    (void)state;
    assert_non_null(px);
    for (size_t i = 0; i < body; i++)
        px[i] = (unsigned char)(sl_test_rand(&seed) % 16); /* Huffman-coded, not stored */
    write_labels_n((uint32_t)n, n);
    img = make_images((uint32_t)n, (uint32_t)rows, (uint32_t)cols, px, body, &il);
    write_file(img_path, img, il, "wb");
    gzbytes = read_all(img_path, &gl);
    assert_true(gl > 200);
    expect_status(SL_OK, NULL);
    /* a byte in the middle of the deflate stream, the CRC-32 and the length in the
     * trailer, reserved header flags, an unknown compression method */
    load_flipped(gl / 2, 0x55, SL_ECORRUPT, "corrupt gzip data");
    load_flipped(gl - 8, 0x01, SL_ECORRUPT, "incorrect data check");
    load_flipped(gl - 1, 0x01, SL_ECORRUPT, "incorrect length check");
    load_flipped(3, 0xe0, SL_ECORRUPT, "corrupt gzip data");
    load_flipped(2, 0x0f, SL_ECORRUPT, "unknown compression method");
    expect_status(SL_OK, NULL);
    /* any flipped byte of the deflate stream or trailer is caught, one way or another */
    for (size_t at = 10; at < gl; at += 5) {
        int rc = load_flipped(at, 0xff, SL_OK, NULL);
        assert_int_not_equal(rc, SL_OK);
        failures += rc != SL_ECORRUPT;
        tries++;
    }
    print_message("%d of %d flips were not reported as SL_ECORRUPT\n", failures, tries);
    assert_true(failures * 10 < tries);
    free(gzbytes);
    free(img);
    free(px);
}

static void test_missing_and_bad_arguments(void **state)
{
    sl_dataset *ds = (sl_dataset *)0x1;
    char err[256] = "", tiny[8];
    (void)state;
    write_pair(0, 0);
    assert_int_equal(remove(lbl_path), 0);
    expect_status(SL_ENOENT, "no such file");
    assert_int_equal(remove(img_path), 0);
    expect_status(SL_ENOENT, "/images: no such file");
    write_pair(1, 1);
    assert_int_equal(
        sl_data_load_idx(img_path, "/nonexistent/dir/labels", MEAN, STD, &ds, err, sizeof err),
        SL_ENOENT);
    assert_ptr_equal(ds, (sl_dataset *)0x1);
    /* a directory is not a file */
    assert_int_equal(sl_data_load_idx(dir, lbl_path, MEAN, STD, &ds, err, sizeof err), SL_EIO);
    assert_int_equal(sl_data_load_idx(NULL, lbl_path, MEAN, STD, &ds, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_data_load_idx(img_path, lbl_path, MEAN, STD, NULL, err, sizeof err),
                     SL_EINVAL);
    assert_int_equal(sl_data_load_idx(img_path, lbl_path, MEAN, 0.0f, &ds, err, sizeof err),
                     SL_EINVAL);
    assert_int_equal(sl_data_load_idx(img_path, lbl_path, MEAN, -1.0f, &ds, err, sizeof err),
                     SL_EINVAL);
    assert_int_equal(sl_data_load_idx(img_path, lbl_path, NAN, STD, &ds, err, sizeof err),
                     SL_EINVAL);
    assert_ptr_equal(ds, (sl_dataset *)0x1);
    /* the message is cut to the buffer and terminated */
    memset(tiny, 'x', sizeof tiny);
    assert_int_equal(sl_data_load_idx("/nonexistent", lbl_path, MEAN, STD, &ds, tiny, sizeof tiny),
                     SL_ENOENT);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_fashion_missing_names_the_package(void **state)
{
    char path[700], err[512] = "";
    sl_dataset *ds = (sl_dataset *)0x1;
    (void)state;
    snprintf(path, sizeof path, "%s/no-such-dir", dir);
    assert_int_equal(sl_data_load_fashion_mnist(path, 1, &ds, err, sizeof err), SL_ENOENT);
    assert_non_null(strstr(err, "dataset-fashion-mnist"));
    assert_non_null(strstr(err, "no-such-dir"));
    assert_ptr_equal(ds, (sl_dataset *)0x1);
    /* the directory exists but the files do not */
    err[0] = '\0';
    assert_int_equal(sl_data_load_fashion_mnist(dir, 0, &ds, err, sizeof err), SL_ENOENT);
    assert_non_null(strstr(err, "apt-get install dataset-fashion-mnist"));
    assert_non_null(strstr(err, "t10k-images-idx3-ubyte.gz"));
    assert_ptr_equal(ds, (sl_dataset *)0x1);
}

/* STARLING_FASHION_MNIST_DIR picks the directory when none is given */
static void test_fashion_env_directory(void **state)
{
    char path[700];
    const char *old = getenv("STARLING_FASHION_MNIST_DIR");
    char *saved = old != NULL ? strdup(old) : NULL;
    sl_dataset *ds = NULL;
    (void)state;
    write_pair(1, 1);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    assert_int_equal(rename(img_path, path), 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    assert_int_equal(rename(lbl_path, path), 0);
    assert_int_equal(setenv("STARLING_FASHION_MNIST_DIR", dir, 1), 0);
    assert_int_equal(sl_data_load_fashion_mnist(NULL, 1, &ds, NULL, 0), SL_OK);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->classes, 6);
    assert_true(fabs(ds->x[1] - (1.0 - SL_DATA_FASHION_MEAN) / SL_DATA_FASHION_STD) < 1e-5);
    sl_dataset_free(ds);
    assert_int_equal(sl_data_load_fashion_mnist(NULL, 0, &ds, NULL, 0), SL_ENOENT);
    if (saved != NULL)
        setenv("STARLING_FASHION_MNIST_DIR", saved, 1);
    else
        unsetenv("STARLING_FASHION_MNIST_DIR");
    free(saved);
}

static void check_real_split(int train)
{
    size_t want_n = train ? 60000 : 10000, per_class[10] = {0}, total;
    sl_dataset *ds = NULL;
    char err[512] = "";
    double sum = 0.0, sum2 = 0.0, t0 = now_s(), mean, var;
    int rc = sl_data_load_fashion_mnist(SL_DATA_FASHION_MNIST_DIR, train, &ds, err, sizeof err);
    if (rc != SL_OK)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, SL_OK);
    print_message("Fashion-MNIST %s split loaded in %.3f s\n", train ? "training" : "test",
                  now_s() - t0);
    assert_int_equal(ds->n, want_n);
    assert_int_equal(ds->rows, 28);
    assert_int_equal(ds->cols, 28);
    assert_int_equal(ds->classes, 10);
    for (size_t i = 0; i < ds->n; i++) {
        assert_true(ds->y[i] >= 0 && ds->y[i] < 10);
        per_class[ds->y[i]]++;
    }
    for (int k = 0; k < 10; k++)
        assert_int_equal(per_class[k], want_n / 10);
    total = ds->n * ds->rows * ds->cols;
    for (size_t i = 0; i < total; i++) {
        sum += ds->x[i];
        sum2 += (double)ds->x[i] * ds->x[i];
    }
    mean = sum / (double)total;
    var = sum2 / (double)total - mean * mean;
    print_message("normalised mean %.4f std %.4f\n", mean, sqrt(var));
    assert_true(fabs(mean) < 0.01);
    assert_true(fabs(sqrt(var) - 1.0) < 0.01);
    sl_dataset_free(ds);
}

static void test_real_fashion_mnist(void **state)
{
    struct stat st;
    (void)state;
    if (stat(SL_DATA_FASHION_MNIST_DIR, &st) != 0) {
        print_message("skipped: %s is absent (apt-get install dataset-fashion-mnist)\n",
                      SL_DATA_FASHION_MNIST_DIR);
        skip();
    }
    check_real_split(1);
    check_real_split(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_plain_and_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_concatenated_gzip_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trailing_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_body_exact_short_and_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic_type_and_dims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dimension_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_declared_size_fails_fast, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gzip_bomb_stops_after_declared_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fashion_missing_names_the_package, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fashion_env_directory, setup, teardown),
        cmocka_unit_test(test_real_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
