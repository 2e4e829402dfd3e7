/*
 * The image reader: PNGs of every colour type (gray 1- and 8-bit, RGB, RGBA,
 * gray+alpha, palette with tRNS, 16-bit, interlaced) decoded exactly; JPEGs
 * (RGB, grayscale, progressive) decoded close; the format told by the
 * signature, not the name; channel conversion; bilinear resizing against
 * hand-computed values; and each refusal with its status and message: a
 * truncated PNG or JPEG, a PNG whose IDAT fails its CRC, a JPEG with a
 * premature EOI, a text file, an empty file, zero and too large sizes in a
 * header, a CMYK JPEG, bad arguments. Every image is written here with
 * libpng or libjpeg.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <jpeglib.h>
#include <png.h>

#include "../../support/sl_test.h"
#include "starling/image.h"

static char g_dir[512];

static void path_of(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", g_dir, name);
}

/* A PNG of @w x @h: @data holds the rows as libpng takes them (packed, big-endian). */
static void write_png(const char *name, unsigned w, unsigned h, int ctype, int depth, int interlace,
                      const void *data, const png_color *palette, int npalette,
                      const png_byte *trans, int ntrans)
{
    char path[700];
    png_structp png;
    png_infop info;
    size_t rowbytes;
    FILE *f;
    path_of(name, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    assert_non_null(png);
    info = png_create_info_struct(png);
    assert_non_null(info);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng could not write %s", name);
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, depth, ctype, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (palette != NULL)
        png_set_PLTE(png, info, palette, npalette);
    if (trans != NULL)
        png_set_tRNS(png, info, trans, ntrans, NULL);
    png_write_info(png, info);
    rowbytes = png_get_rowbytes(png, info);
    {
        png_bytep *rows = malloc(h * sizeof *rows);
        assert_non_null(rows);
        for (unsigned y = 0; y < h; y++)
            rows[y] = (png_bytep)data + y * rowbytes;
        png_write_image(png, rows);
        free(rows);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    assert_int_equal(fclose(f), 0);
}

/* A JPEG of @w x @h from @pixels (@comps a pixel, in @space). */
static void write_jpeg(const char *name, unsigned w, unsigned h, int comps, J_COLOR_SPACE space,
                       const unsigned char *pixels, int progressive)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    char path[700];
    FILE *f;
    path_of(name, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w, c.image_height = h, c.input_components = comps, c.in_color_space = space;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    for (int i = 0; i < c.num_components; i++) /* 4:4:4, so values stay within a few units */
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c.next_scanline * w * comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_all(const char *name, size_t *len)
{
    char path[700];
    unsigned char *b;
    long n;
    FILE *f;
    path_of(name, path, sizeof path);
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    rewind(f);
    b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_bytes(const char *name, const void *data, size_t len)
{
    char path[700];
    FILE *f;
    path_of(name, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Load @name; fail with the message unless it gives @status. */
static int load(const char *name, unsigned ch, unsigned w, unsigned h, float *out, char *err,
                size_t errcap)
{
    char path[700];
    path_of(name, path, sizeof path);
    return sl_image_load(path, ch, w, h, out, err, errcap);
}

static void expect_load(const char *name, unsigned ch, unsigned w, unsigned h, float *out)
{
    char err[256] = "";
    int rc = load(name, ch, w, h, out, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: %s (%s)", name, sl_errname(rc), err);
}

static void expect_values(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: value %zu is %.9g, not %.9g", what, i, (double)got[i], (double)want[i]);
}

static float luma(double r, double g, double b)
{
    return (float)(0.299 * r + 0.587 * g + 0.114 * b);
}

static void test_png_colour_types(void **state)
{
    static const unsigned char gray[6] = {0, 17, 255, 128, 64, 1};
    static const unsigned char rgb[2 * 2 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
    static const unsigned char rgba[2 * 2 * 4] = {255, 0, 0,   0,   0,  255, 0,  9,
                                                  0,   0, 255, 128, 10, 20,  30, 255};
    static const unsigned char gray_alpha[3 * 2] = {7, 0, 99, 255, 250, 3};
    float out[64], want[64];
    char path[700], err[256];
    unsigned w, h, ch;
    (void)state;
    /* gray 8-bit: exact; as RGB, each value three times */
    write_png("gray8.png", 3, 2, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, gray, NULL, 0, NULL,
              0);
    expect_load("gray8.png", 1, 3, 2, out);
    for (int i = 0; i < 6; i++)
        want[i] = gray[i];
    expect_values(out, want, 6, "gray8");
    expect_load("gray8.png", 3, 3, 2, out);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 6; i++)
            want[c * 6 + i] = gray[i];
    expect_values(out, want, 18, "gray8 as RGB");

    /* RGB and RGBA (alpha dropped): channel-major; as gray, ITU-R 601 luma */
    write_png("rgb.png", 2, 2, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, rgb, NULL, 0, NULL, 0);
    write_png("rgba.png", 2, 2, PNG_COLOR_TYPE_RGB_ALPHA, 8, PNG_INTERLACE_NONE, rgba, NULL, 0,
              NULL, 0);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 4; i++)
            want[c * 4 + i] = rgb[i * 3 + c];
    expect_load("rgb.png", 3, 2, 2, out);
    expect_values(out, want, 12, "rgb");
    expect_load("rgba.png", 3, 2, 2, out);
    expect_values(out, want, 12, "rgba");
    for (int i = 0; i < 4; i++)
        want[i] = luma(rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2]);
    expect_load("rgb.png", 1, 2, 2, out);
    expect_values(out, want, 4, "rgb as gray");
    assert_true(fabsf(out[0] - 76.245f) < 1e-3f && fabsf(out[3] - 18.15f) < 1e-3f);
    expect_load("rgba.png", 1, 2, 2, out);
    expect_values(out, want, 4, "rgba as gray");

    /* gray + alpha: the gray */
    write_png("ga.png", 3, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE, gray_alpha, NULL, 0,
              NULL, 0);
    expect_load("ga.png", 1, 3, 1, out);
    want[0] = 7, want[1] = 99, want[2] = 250;
    expect_values(out, want, 3, "gray+alpha");

    /* probes: the header's size and colour, alpha not counted */
    path_of("ga.png", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_OK);
    assert_true(w == 3 && h == 1 && ch == 1);
    path_of("rgba.png", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_OK);
    assert_true(w == 2 && h == 2 && ch == 3);
}

static void test_png_palette_bits_interlace(void **state)
{
    static const png_color palette[3] = {{200, 100, 50}, {0, 0, 0}, {1, 2, 3}};
    static const png_byte trans[3] = {0, 128, 255};
    /* 4-bit indices, 5 pixels a row (3 bytes), 2 rows: 0 1 2 0 1 / 2 2 0 0 1 */
    static const unsigned char idx4[6] = {0x01, 0x20, 0x10, 0x22, 0x00, 0x10};
    static const unsigned idx[10] = {0, 1, 2, 0, 1, 2, 2, 0, 0, 1};
    /* 1-bit gray, 10 pixels: 1011001110 */
    static const unsigned char bits1[2] = {0xb3, 0x80};
    static const char bits_want[] = "1011001110";
    float out[128], want[128];
    unsigned char big[9 * 7 * 3];
    char path[700], err[256];
    unsigned w, h, ch;
    (void)state;
    write_png("palette.png", 5, 2, PNG_COLOR_TYPE_PALETTE, 4, PNG_INTERLACE_NONE, idx4, palette, 3,
              trans, 3);
    expect_load("palette.png", 3, 5, 2, out);
    for (int i = 0; i < 10; i++) {
        want[i] = palette[idx[i]].red;
        want[10 + i] = palette[idx[i]].green;
        want[20 + i] = palette[idx[i]].blue;
    }
    expect_values(out, want, 30, "palette + tRNS");
    path_of("palette.png", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_OK);
    assert_true(w == 5 && h == 2 && ch == 3);

    write_png("bits1.png", 10, 1, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, bits1, NULL, 0, NULL,
              0);
    expect_load("bits1.png", 1, 10, 1, out);
    for (int i = 0; i < 10; i++)
        want[i] = bits_want[i] == '1' ? 255.0f : 0.0f;
    expect_values(out, want, 10, "1-bit gray");

    /* 16-bit gray and RGB: v / 257, not rounded to 8 bits */
    {
        static const unsigned short g16[4] = {0, 65535, 25700, 1000};
        unsigned char be[4 * 2 * 3];
        for (int i = 0; i < 4; i++)
            be[2 * i] = (unsigned char)(g16[i] >> 8), be[2 * i + 1] = (unsigned char)g16[i];
        write_png("gray16.png", 2, 2, PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE, be, NULL, 0,
                  NULL, 0);
        expect_load("gray16.png", 1, 2, 2, out);
        for (int i = 0; i < 4; i++)
            want[i] = (float)g16[i] / 257.0f;
        expect_values(out, want, 4, "gray16");
        assert_true(out[1] == 255.0f && out[2] == 100.0f);
        for (int i = 0; i < 12; i++) {
            unsigned v = (unsigned)i * 5000u + 7u;
            be[2 * i] = (unsigned char)(v >> 8), be[2 * i + 1] = (unsigned char)v;
        }
        write_png("rgb16.png", 2, 2, PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, be, NULL, 0, NULL,
                  0);
        expect_load("rgb16.png", 3, 2, 2, out);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 4; i++)
                want[c * 4 + i] = (float)((i * 3 + c) * 5000 + 7) / 257.0f;
        expect_values(out, want, 12, "rgb16");
    }

    /* Adam7: the same pixels as the plain file */
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i * 37 + 11);
    write_png("plain.png", 9, 7, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, big, NULL, 0, NULL, 0);
    write_png("adam7.png", 9, 7, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7, big, NULL, 0, NULL, 0);
    {
        float plain[9 * 7 * 3], adam7[9 * 7 * 3];
        expect_load("plain.png", 3, 9, 7, plain);
        expect_load("adam7.png", 3, 9, 7, adam7);
        expect_values(adam7, plain, 9 * 7 * 3, "interlaced");
        assert_true(plain[9 * 7 + 1] == big[1 * 3 + 1]); /* G of pixel (0, 1) */
        /* resized too: the same result */
        expect_load("plain.png", 1, 4, 3, plain);
        expect_load("adam7.png", 1, 4, 3, adam7);
        expect_values(adam7, plain, 12, "interlaced, resized");
    }

    /* the signature decides, not the name */
    write_png("really_a_png.jpg", 3, 2, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE,
              (const unsigned char *)"\x01\x02\x03\x04\x05\x06", NULL, 0, NULL, 0);
    assert_int_equal(load("really_a_png.jpg", 1, 3, 2, out, err, sizeof err), SL_OK);
    assert_true(out[5] == 6.0f);
}

static void test_resize(void **state)
{
    float src4[16], out[64], want[64];
    unsigned char px[64];
    (void)state;
    /* 4x4 -> 2x2: samples at 0.5 and 2.5, each the mean of a 2x2 block */
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            px[y * 4 + x] = (unsigned char)(10 * y + x), src4[y * 4 + x] = (float)(10 * y + x);
    write_png("ramp4.png", 4, 4, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, px, NULL, 0, NULL, 0);
    expect_load("ramp4.png", 1, 2, 2, out);
    want[0] = 5.5f, want[1] = 7.5f, want[2] = 25.5f, want[3] = 27.5f;
    expect_values(out, want, 4, "4x4 -> 2x2");
    /* the same size: a copy */
    expect_load("ramp4.png", 1, 4, 4, out);
    expect_values(out, src4, 16, "4x4 -> 4x4");
    /* 4x4 -> 4x1: x unchanged, y samples at 1.5 */
    expect_load("ramp4.png", 1, 4, 1, out);
    want[0] = 15, want[1] = 16, want[2] = 17, want[3] = 18;
    expect_values(out, want, 4, "4x4 -> 4x1");

    /* 2x2 -> 4x4: s = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (x1 clamped) */
    px[0] = 0, px[1] = 100, px[2] = 200, px[3] = 40;
    write_png("two.png", 2, 2, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, px, NULL, 0, NULL, 0);
    expect_load("two.png", 1, 4, 4, out);
    {
        static const float up[16] = {0,   25,      75,     100, 50,  58.75f, 76.25f, 85,
                                     150, 126.25f, 78.75f, 55,  200, 160,    80,     40};
        expect_values(out, up, 16, "2x2 -> 4x4");
    }

    /* 3x1 -> 2x1: s = 0.25 and 1.75 */
    px[0] = 0, px[1] = 40, px[2] = 100;
    write_png("three.png", 3, 1, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, px, NULL, 0, NULL, 0);
    expect_load("three.png", 1, 2, 1, out);
    want[0] = 10, want[1] = 85;
    expect_values(out, want, 2, "3x1 -> 2x1");

    /* 8x1 -> 2x1: s = 1.5 and 5.5; no antialiasing, pixels 0, 3, 4 and 7 are not seen */
    for (int i = 0; i < 8; i++)
        px[i] = (unsigned char)(10 * i);
    px[0] = 255, px[7] = 255;
    write_png("eight.png", 8, 1, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, px, NULL, 0, NULL, 0);
    expect_load("eight.png", 1, 2, 1, out);
    want[0] = 15, want[1] = 55;
    expect_values(out, want, 2, "8x1 -> 2x1");

    /* RGB 2x1 -> 3x2, channel-major: s_x = -1/6 -> 0, 0.5, 7/6 -> 1; y copies the row */
    {
        static const unsigned char rgb[6] = {10, 20, 30, 50, 60, 70};
        write_png("rgb2.png", 2, 1, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, rgb, NULL, 0, NULL,
                  0);
        expect_load("rgb2.png", 3, 3, 2, out);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 2; y++) {
                float *o = want + (c * 2 + y) * 3;
                o[0] = rgb[c], o[1] = (rgb[c] + rgb[3 + c]) / 2.0f, o[2] = rgb[3 + c];
            }
        expect_values(out, want, 18, "RGB 2x1 -> 3x2");
    }
}

static void test_jpeg(void **state)
{
    unsigned char rgb[16 * 16 * 3], gray[16 * 8];
    float out[16 * 16 * 3];
    unsigned w, h, ch;
    char path[700], err[256];
    float worst = 0;
    (void)state;
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) {
            unsigned char *p = rgb + (y * 16 + x) * 3;
            p[0] = (unsigned char)(40 + 8 * x), p[1] = (unsigned char)(40 + 8 * y), p[2] = 128;
        }
    for (int i = 0; i < 16 * 8; i++)
        gray[i] = (unsigned char)(100 + (i % 16) * 4);
    write_jpeg("rgb.jpg", 16, 16, 3, JCS_RGB, rgb, 0);
    write_jpeg("progressive.jpg", 16, 16, 3, JCS_RGB, rgb, 1);
    write_jpeg("gray.jpg", 16, 8, 1, JCS_GRAYSCALE, gray, 0);
    write_jpeg("really_a_jpeg.png", 16, 8, 1, JCS_GRAYSCALE, gray, 0);

    expect_load("rgb.jpg", 3, 16, 16, out);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 256; i++)
            worst = fmaxf(worst, fabsf(out[c * 256 + i] - rgb[i * 3 + c]));
    if (worst > 4)
        fail_msg("rgb.jpg: off by %g", (double)worst);
    expect_load("progressive.jpg", 3, 16, 16, out);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 256; i++)
            assert_true(fabsf(out[c * 256 + i] - rgb[i * 3 + c]) <= 4);
    expect_load("rgb.jpg", 1, 16, 16, out);
    for (int i = 0; i < 256; i++)
        assert_true(fabsf(out[i] - luma(rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2])) <= 4);
    expect_load("gray.jpg", 1, 16, 8, out);
    for (int i = 0; i < 16 * 8; i++)
        assert_true(fabsf(out[i] - gray[i]) <= 2);
    expect_load("gray.jpg", 3, 8, 4, out); /* 2x down: the mean of 2x2 blocks, three times */
    for (int c = 0; c < 3; c++)
        for (int x = 0; x < 8; x++)
            assert_true(fabsf(out[c * 32 + x] - (100 + 8 * x + 2)) <= 2);
    expect_load("really_a_jpeg.png", 1, 16, 8, out);

    /* probes: the header only */
    path_of("rgb.jpg", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_OK);
    assert_true(w == 16 && h == 16 && ch == 3);
    path_of("gray.jpg", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_OK);
    assert_true(w == 16 && h == 8 && ch == 1);
}

/* @name must be refused with @status, a message naming it and saying @words, @out untouched. */
static void expect_refused(const char *name, unsigned ch, unsigned w, unsigned h, int status,
                           const char *words)
{
    char err[256] = "";
    float out[64];
    int rc;
    for (int i = 0; i < 64; i++)
        out[i] = -7.0f;
    rc = load(name, ch, w, h, out, err, sizeof err);
    if (rc != status)
        fail_msg("%s: %s, not %s (%s)", name, sl_errname(rc), sl_errname(status), err);
    for (int i = 0; i < 64; i++)
        assert_true(out[i] == -7.0f);
    if (strstr(err, words) == NULL || strstr(err, name) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", name, err, words);
}

/* The offset of the first chunk @type of the PNG in @b (its length field). */
static size_t png_chunk(const unsigned char *b, size_t len, const char *type)
{
    size_t at = 8;
    while (at + 12 <= len) {
        size_t n =
            (size_t)b[at] << 24 | (size_t)b[at + 1] << 16 | (size_t)b[at + 2] << 8 | b[at + 3];
        if (memcmp(b + at + 4, type, 4) == 0)
            return at;
        at += 12 + n;
    }
    fail_msg("no %s chunk", type);
    return 0;
}

/* @b's IHDR with another size, its CRC recomputed. */
static void png_resize_header(unsigned char *b, uint32_t w, uint32_t h)
{
    uLong crc;
    for (int i = 0; i < 4; i++) {
        b[16 + i] = (unsigned char)(w >> (24 - 8 * i));
        b[20 + i] = (unsigned char)(h >> (24 - 8 * i));
    }
    crc = crc32(0, b + 12, 17);
    for (int i = 0; i < 4; i++)
        b[29 + i] = (unsigned char)(crc >> (24 - 8 * i));
}

static void test_refusals(void **state)
{
    unsigned char noise[64 * 64], rgb[16 * 16 * 3], *b;
    uint64_t seed = 42;
    size_t len, at, n;
    uLong crc;
    char path[700], err[256];
    unsigned w = 9, h = 9, ch = 9;
    float out[4];
    (void)state;
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (unsigned char)sl_test_rand(&seed);
    write_png("noise.png", 64, 64, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, noise, NULL, 0, NULL,
              0);
    b = read_all("noise.png", &len);
    write_bytes("cut.png", b, len / 2);
    expect_refused("cut.png", 1, 8, 8, SL_ETRUNCATED, "the PNG is cut short");
    write_bytes("no_iend.png", b, len - 12);
    expect_refused("no_iend.png", 1, 8, 8, SL_ETRUNCATED, "cut short");
    write_bytes("sig_only.png", b, 5);
    expect_refused("sig_only.png", 1, 8, 8, SL_ETRUNCATED, "cut short");
    write_bytes("header_only.png", b, 40);
    expect_refused("header_only.png", 1, 8, 8, SL_ETRUNCATED, "cut short");
    at = png_chunk(b, len, "IDAT");
    n = (size_t)b[at] << 24 | (size_t)b[at + 1] << 16 | (size_t)b[at + 2] << 8 | b[at + 3];
    b[at + 8 + n + 3] ^= 0x01; /* the IDAT's CRC */
    write_bytes("idat_crc.png", b, len);
    expect_refused("idat_crc.png", 1, 8, 8, SL_ECORRUPT, "IDAT: CRC error");
    b[at + 8 + n + 3] ^= 0x01;
    /* a bit of the compressed pixels, the CRC made to match: zlib sees it */
    b[at + 8 + 100] ^= 0x20;
    crc = crc32(0, b + at + 4, (uInt)(n + 4));
    for (int i = 0; i < 4; i++)
        b[at + 8 + n + i] = (unsigned char)(crc >> (24 - 8 * i));
    write_bytes("idat_zlib.png", b, len);
    expect_refused("idat_zlib.png", 1, 8, 8, SL_ECORRUPT, "corrupt PNG");
    free(b);
    /* the image data of half the rows, in a well-formed file */
    write_png("half.png", 64, 32, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, noise, NULL, 0, NULL,
              0);
    b = read_all("half.png", &len);
    png_resize_header(b, 64, 64);
    write_bytes("short_idat.png", b, len);
    expect_refused("short_idat.png", 1, 8, 8, SL_ECORRUPT, "Not enough image data");
    free(b);
    b = read_all("noise.png", &len);
    png_resize_header(b, 0, 64);
    write_bytes("zero.png", b, len);
    expect_refused("zero.png", 1, 8, 8, SL_ECORRUPT, "0x64 pixels");
    png_resize_header(b, 100000, 64);
    write_bytes("wide.png", b, len);
    expect_refused("wide.png", 1, 8, 8, SL_ETOOBIG, "100000x64 pixels");
    png_resize_header(b, 16000, 16000); /* each side allowed, the area is not */
    write_bytes("huge.png", b, len);
    expect_refused("huge.png", 1, 8, 8, SL_ETOOBIG, "16000x16000 pixels");
    path_of("huge.png", path, sizeof path);
    assert_int_equal(sl_image_probe(path, &w, &h, &ch, err, sizeof err), SL_ETOOBIG);
    assert_true(w == 9 && h == 9 && ch == 9);
    png_resize_header(b, 64, 64);
    write_bytes("fine.png", b, len);
    assert_int_equal(load("fine.png", 1, 2, 2, out, err, sizeof err), SL_OK);
    free(b);

    /* JPEG: cut short, a premature EOI, header sizes */
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (unsigned char)sl_test_rand(&seed);
    write_jpeg("noise.jpg", 16, 16, 3, JCS_RGB, rgb, 0);
    b = read_all("noise.jpg", &len);
    write_bytes("cut.jpg", b, len * 2 / 3);
    expect_refused("cut.jpg", 3, 8, 8, SL_ETRUNCATED, "the JPEG is cut short");
    write_bytes("no_eoi.jpg", b, len - 2);
    expect_refused("no_eoi.jpg", 3, 8, 8, SL_ETRUNCATED, "cut short");
    write_bytes("sof_cut.jpg", b, 30);
    expect_refused("sof_cut.jpg", 3, 8, 8, SL_ETRUNCATED, "cut short");
    write_bytes("two_bytes.jpg", b, 2);
    expect_refused("two_bytes.jpg", 3, 8, 8, SL_ETRUNCATED, "cut short");
    b[len - 300] = 0xff, b[len - 299] = 0xd9; /* an EOI in the middle of the scan */
    write_bytes("early_eoi.jpg", b, len);
    expect_refused("early_eoi.jpg", 3, 8, 8, SL_ECORRUPT, "corrupt JPEG");
    free(b);
    b = read_all("noise.jpg", &len);
    for (at = 2; at + 9 < len && !(b[at] == 0xff && b[at + 1] == 0xc0); at++)
        ;
    assert_true(at + 9 < len);
    b[at + 5] = 0xea, b[at + 6] = 0x60, b[at + 7] = 0xea, b[at + 8] = 0x60; /* 60000 x 60000 */
    write_bytes("huge.jpg", b, len);
    expect_refused("huge.jpg", 3, 8, 8, SL_ETOOBIG, "60000x60000 pixels");
    b[at + 5] = 0, b[at + 6] = 0, b[at + 7] = 0, b[at + 8] = 16; /* height 0 */
    write_bytes("zero.jpg", b, len);
    expect_refused("zero.jpg", 3, 8, 8, SL_ECORRUPT, "corrupt JPEG");
    free(b);
    {
        unsigned char cmyk[8 * 8 * 4];
        memset(cmyk, 90, sizeof cmyk);
        write_jpeg("cmyk.jpg", 8, 8, 4, JCS_CMYK, cmyk, 0);
        expect_refused("cmyk.jpg", 3, 8, 8, SL_EUNSUPPORTED, "CMYK");
    }

    /* not images */
    write_bytes("notes.png", "label,x\n1,2\n", 12);
    expect_refused("notes.png", 1, 8, 8, SL_EMAGIC, "not a PNG or JPEG image");
    write_bytes("empty.jpg", "", 0);
    expect_refused("empty.jpg", 1, 8, 8, SL_EMAGIC, "empty");
    expect_refused("missing.png", 1, 8, 8, SL_ENOENT, "missing.png");
    assert_int_equal(sl_image_load(g_dir, 1, 8, 8, out, err, sizeof err), SL_EIO);
    /* arguments */
    assert_int_equal(load("fine.png", 2, 2, 2, out, err, sizeof err), SL_EINVAL);
    assert_int_equal(load("fine.png", 1, 0, 2, out, err, sizeof err), SL_EINVAL);
    assert_int_equal(load("fine.png", 1, 2, 20000, out, err, sizeof err), SL_EINVAL);
    assert_int_equal(load("fine.png", 1, 2, 2, NULL, err, sizeof err), SL_EINVAL);
    assert_int_equal(load("fine.png", 1, 2, 2, out, NULL, 0), SL_OK); /* @err may be NULL */
}

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(g_dir, sizeof g_dir, "test_image");
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
        cmocka_unit_test(test_png_colour_types), cmocka_unit_test(test_png_palette_bits_interlace),
        cmocka_unit_test(test_resize),           cmocka_unit_test(test_jpeg),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
