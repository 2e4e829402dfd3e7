/*
 * Holds the code to codecs/FORMAT.md: the worked example's hex bytes, read
 * from the document itself, must decode to the values the document states,
 * and encoding those values must give the same bytes.
 */
#include <ctype.h>

#include "../../support/sl_codec_test.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

/* The example in FORMAT.md: layout "w 2 5", "b 3"; base 1, round 2. */
static const uint32_t example_idx[3] = {1, 4, 9};
static const float example_val[3] = {0.5f, -0.25f, 1.0f};

/* Parse the first ```hex block after the heading @title into @out. */
static size_t read_block(const char *title, uint8_t *out, size_t cap)
{
    void *doc;
    size_t len, n = 0;
    const char *p, *end;
    assert_int_equal(sl_fs_read_file(SL_SOURCE_DIR "/codecs/FORMAT.md", 1 << 20, &doc, &len),
                     SL_OK);
    p = strstr(doc, title);
    assert_non_null(p);
    p = strstr(p, "```hex\n");
    assert_non_null(p);
    p += 7;
    end = strstr(p, "```");
    assert_non_null(end);
    while (p < end) {
        if (isxdigit((unsigned char)p[0]) && isxdigit((unsigned char)p[1])) {
            unsigned v;
            assert_int_equal(sscanf(p, "%2x", &v), 1);
            assert_true(n < cap);
            out[n++] = (uint8_t)v;
            p += 2;
        } else if (*p == '#') { /* comment to end of line */
            while (p < end && *p != '\n')
                p++;
        } else {
            p++;
        }
    }
    free(doc);
    return n;
}

static void test_worked_example(void **state)
{
    uint8_t bytes[512];
    size_t n = read_block("\n## Worked example\n", bytes, sizeof bytes), len;
    sl_layout *l = NULL;
    sl_update *u = NULL;
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 2, 0};
    sl_sparse_tensor st[2] = {{3, example_idx, example_val}, {0, NULL, NULL}};
    void *frame;
    (void)state;
    assert_int_equal(sl_layout_parse("w 2 5\nb 3\n", 10, &l), SL_OK);
    assert_true(n > 20);
    assert_int_equal(sl_frame_decode_update(l, bytes, n, NULL, &u), SL_OK);
    assert_int_equal(u->header.base_version, 1);
    assert_int_equal(u->header.round, 2);
    assert_int_equal(u->n[0], 3);
    assert_int_equal(u->n[1], 0);
    assert_memory_equal(u->idx[0], example_idx, sizeof example_idx);
    assert_memory_equal(u->val[0], example_val, sizeof example_val);
    sl_update_free(u);
    /* the encoder writes exactly the documented bytes */
    assert_int_equal(sl_frame_encode_update(l, &h, st, NULL, NULL, &frame, &len), SL_OK);
    assert_int_equal(len, n);
    assert_memory_equal(frame, bytes, n);
    free(frame);
    sl_layout_free(l);
}

/* @u is the flat example's update (w as above, b[2] = 0.125); frees it. */
static void check_flat_example(sl_update *u)
{
    assert_int_equal(u->n[0], 3);
    assert_int_equal(u->n[1], 1);
    assert_memory_equal(u->idx[0], example_idx, sizeof example_idx);
    assert_memory_equal(u->val[0], example_val, sizeof example_val);
    assert_int_equal(u->idx[1][0], 2);
    assert_true(u->val[1][0] == 0.125f);
    sl_update_free(u);
}

/* The flat body of the same update, with b[2] = 0.125 as well. */
static void test_worked_example_flat(void **state)
{
    static const uint32_t bias_idx[1] = {2};
    static const float bias_val[1] = {0.125f};
    uint8_t bytes[512];
    size_t n = read_block("\n## Worked example, flat\n", bytes, sizeof bytes), len;
    sl_layout *l = NULL;
    sl_update *u = NULL;
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 2, 0};
    sl_sparse_tensor st[2] = {{3, example_idx, example_val}, {1, bias_idx, bias_val}};
    sl_encode_params p;
    void *frame;
    (void)state;
    assert_int_equal(sl_layout_parse("w 2 5\nb 3\n", 10, &l), SL_OK);
    assert_true(n > 20);
    assert_int_equal(sl_frame_decode_update(l, bytes, n, NULL, &u), SL_OK);
    assert_int_equal(u->header.flags, SL_FRAME_FLAG_FLAT);
    check_flat_example(u);
    sl_encode_params_default(&p);
    p.flat = 1;
    assert_int_equal(sl_frame_encode_update(l, &h, st, &p, NULL, &frame, &len), SL_OK);
    assert_int_equal(len, n);
    assert_memory_equal(frame, bytes, n);
    free(frame);
    sl_layout_free(l);
}

/* The flat update split by the support {0, 1, 4, 5, 12} (version 2 to 3). */
static void test_worked_example_split(void **state)
{
    static const uint32_t bias_idx[1] = {2};
    static const float bias_val[1] = {0.125f};
    static const uint8_t bits[2] = {0x33, 0x10}, other_bits[2] = {0x33, 0x00};
    uint8_t bytes[512];
    size_t n = read_block("\n## Worked example, flat and split\n", bytes, sizeof bytes), len;
    sl_layout *l = NULL;
    sl_update *u = NULL;
    sl_support *sup = NULL, *other = NULL;
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 3, 2, 0};
    sl_sparse_tensor st[2] = {{3, example_idx, example_val}, {1, bias_idx, bias_val}};
    sl_encode_params p;
    void *frame, *flat;
    size_t flat_len;
    (void)state;
    assert_int_equal(sl_layout_parse("w 2 5\nb 3\n", 10, &l), SL_OK);
    assert_int_equal(sl_support_load(l, bits, 2, &sup), SL_OK);
    assert_int_equal(sl_support_count(sup), 5);
    assert_int_equal(sl_support_crc(sup), 0xa80567abu);
    assert_int_equal(sl_support_load(l, other_bits, 2, &other), SL_OK);
    assert_true(n > 20);
    assert_int_equal(sl_frame_decode_update_split(l, bytes, n, NULL, sup, &u), SL_OK);
    assert_int_equal(u->header.flags, SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
    assert_int_equal(u->header.ref_version, 2);
    assert_int_equal(u->header.base_version, 3);
    check_flat_example(u);
    u = NULL;
    assert_int_equal(sl_frame_decode_update(l, bytes, n, NULL, &u), SL_ESUPPORT);
    assert_int_equal(sl_frame_decode_update_split(l, bytes, n, NULL, other, &u), SL_ESUPPORT);
    assert_null(u);
    /* unsplit: the flat frame an encoder writes for the same update and header */
    sl_encode_params_default(&p);
    p.flat = 1;
    assert_int_equal(sl_frame_encode_update(l, &h, st, &p, NULL, &frame, &len), SL_OK);
    assert_int_equal(sl_frame_unsplit(l, bytes, n, NULL, sup, &flat, &flat_len), SL_OK);
    assert_int_equal(flat_len, len);
    assert_memory_equal(flat, frame, len);
    free(flat);
    free(frame);
    /* an encoder given the support keeps the smaller flat frame here */
    p.split = sup;
    p.ref_version = 2;
    assert_int_equal(sl_frame_encode_update(l, &h, st, &p, NULL, &frame, &len), SL_OK);
    assert_int_equal(((uint8_t *)frame)[6], SL_FRAME_FLAG_FLAT);
    assert_true(len < n);
    free(frame);
    sl_support_free(sup);
    sl_support_free(other);
    sl_layout_free(l);
}

/* The sparse model delta: base all +0.0, w[1] = 0.5, w[4] = -0.25, b[2] = 0.125. */
static void test_worked_example_sparse_delta(void **state)
{
    uint8_t bytes[512];
    size_t n = read_block("\n## Worked example, sparse delta\n", bytes, sizeof bytes), len;
    float base[13] = {0}, next[13] = {0}, out[13];
    sl_layout *l = NULL;
    sl_frame_header h;
    void *frame;
    (void)state;
    next[1] = 0.5f;
    next[4] = -0.25f;
    next[12] = 0.125f;
    assert_int_equal(sl_layout_parse("w 2 5\nb 3\n", 10, &l), SL_OK);
    assert_true(n > 20);
    assert_int_equal(sl_frame_peek_header(bytes, n, &h), SL_OK);
    assert_int_equal(h.kind, SL_FRAME_MODEL_DELTA);
    assert_int_equal(sl_frame_decode_model(l, bytes, n, base, 1, out), SL_OK);
    assert_memory_equal(out, next, sizeof next);
    /* the encoder writes exactly the documented bytes */
    assert_int_equal(sl_frame_encode_model_delta_sparse(l, next, base, 1, 3, &frame, &len), SL_OK);
    assert_int_equal(len, n);
    assert_memory_equal(frame, bytes, n);
    free(frame);
    sl_layout_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_worked_example_flat),
        cmocka_unit_test(test_worked_example_split),
        cmocka_unit_test(test_worked_example_sparse_delta),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
