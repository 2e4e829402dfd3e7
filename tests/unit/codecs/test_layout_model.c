/* Layouts (fixtures' models, hash, rejections) and lossless model / delta frames. */
#include <math.h>

#include "../../support/sl_codec_test.h"
#include "../../support/sl_fixture.h"
#include "starling/codec.h"

static sl_layout *load_fixture_layout(const char *model)
{
    char name[256];
    void *text;
    size_t len = 0;
    sl_layout *l = NULL;
    snprintf(name, sizeof name, "nn/%s.layout", model);
    text = sl_fixture_load(name, &len);
    assert_non_null(text);
    assert_int_equal(sl_layout_parse(text, len, &l), SL_OK);
    free(text);
    return l;
}

static void test_fixture_layouts(void **state)
{
    static const struct {
        const char *name;
        uint64_t params;
        size_t tensors;
    } models[] = {
        {"logreg", 7850, 2}, {"mlp", 199210, 6}, {"lenet5", 44426, 10}, {"cnn", 1663370, 8}};
    (void)state;
    for (size_t m = 0; m < 4; m++) {
        sl_layout *l = load_fixture_layout(models[m].name);
        char text[4096];
        sl_layout *again = NULL;
        assert_int_equal(sl_layout_params(l), models[m].params);
        assert_int_equal(sl_layout_tensors(l), models[m].tensors);
        /* format -> parse is the identity, with the same hash */
        assert_true(sl_layout_format(l, text, sizeof text) < sizeof text);
        assert_int_equal(sl_layout_parse(text, strlen(text), &again), SL_OK);
        assert_true(sl_layout_equal(l, again));
        assert_true(sl_layout_hash(l) == sl_layout_hash(again));
        sl_layout_free(again);
        sl_layout_free(l);
    }
}

/* The hash is part of the wire format: pinned to the value an independent
 * implementation of FORMAT.md (FNV-1a 64 in Python) gives for lenet5. */
static void test_hash_is_stable(void **state)
{
    sl_layout *l = load_fixture_layout("lenet5");
    const sl_tensor_desc *t = sl_layout_tensor(l, 2);
    (void)state;
    assert_string_equal(t->name, "c2.weight");
    assert_int_equal(t->offset, 156);
    assert_int_equal(t->count, 2400);
    assert_int_equal(t->ndim, 4);
    assert_true(sl_layout_hash(l) == 0x21657dd962e1e67bull);
    sl_layout_free(l);
}

static void test_hash_distinguishes(void **state)
{
    sl_layout *a = NULL, *b = NULL, *c = NULL;
    (void)state;
    assert_int_equal(sl_layout_parse("w 4 6\nb 4\n", 10, &a), SL_OK);
    assert_int_equal(sl_layout_parse("w 6 4\nb 4\n", 10, &b), SL_OK);
    assert_int_equal(sl_layout_parse("w 4 6\nc 4\n", 10, &c), SL_OK);
    assert_true(sl_layout_hash(a) != sl_layout_hash(b));
    assert_true(sl_layout_hash(a) != sl_layout_hash(c));
    assert_false(sl_layout_equal(a, b));
    sl_layout_free(a);
    sl_layout_free(b);
    sl_layout_free(c);
}

static void test_layout_rejections(void **state)
{
    sl_layout *l = NULL;
    uint64_t shape[7] = {2, 3, 1, 1, 1, 1, 1};
    uint64_t zero[1] = {0}, huge[2] = {1ull << 32, 2};
    (void)state;
    assert_int_equal(sl_layout_parse("w 2 x\n", 6, &l), SL_ESYNTAX);
    assert_int_equal(sl_layout_parse("w\n", 2, &l), SL_ESYNTAX);
    assert_int_equal(sl_layout_parse("", 0, &l), SL_ESYNTAX);
    assert_int_equal(sl_layout_parse("w 2\nw 3\n", 8, &l), SL_EINVAL);
    assert_int_equal(sl_layout_parse("w 0\n", 4, &l), SL_EINVAL);
    assert_int_equal(sl_layout_parse("w 1 1 1 1 1 1 1\n", 16, &l), SL_ESYNTAX);
    assert_int_equal(sl_layout_parse("w 99999999999999999999999\n", 26, &l), SL_ETOOBIG);
    assert_null(l);
    assert_int_equal(sl_layout_create(&l), SL_OK);
    assert_int_equal(sl_layout_add(l, "bad name", shape, 2), SL_EINVAL);
    assert_int_equal(sl_layout_add(l, "", shape, 2), SL_EINVAL);
    assert_int_equal(sl_layout_add(l, "w", shape, 7), SL_EINVAL);
    assert_int_equal(sl_layout_add(l, "w", shape, 0), SL_EINVAL);
    assert_int_equal(sl_layout_add(l, "w", zero, 1), SL_EINVAL);
    assert_int_equal(sl_layout_add(l, "w", huge, 2), SL_ETOOBIG);
    assert_int_equal(sl_layout_tensors(l), 0); /* nothing changed */
    assert_int_equal(sl_layout_add(l, "w", shape, 2), SL_OK);
    assert_int_equal(sl_layout_params(l), 6);
    sl_layout_free(l);
}

static float *random_params(size_t n, uint64_t seed, float scale)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(sl_test_rand(&seed) >> 11) / 9007199254740992.0;
        p[i] = (float)((u - 0.5) * scale);
    }
    return p;
}

static void test_model_roundtrip(void **state)
{
    sl_layout *l = load_fixture_layout("lenet5");
    size_t n = (size_t)sl_layout_params(l);
    float *w = random_params(n, 7, 0.2f), *out = malloc(n * sizeof *out);
    void *frame;
    size_t len;
    sl_frame_header h;
    (void)state;
    w[0] = -0.0f;
    w[1] = 1e-40f; /* denormal */
    w[2] = -3.4e38f;
    assert_int_equal(sl_frame_encode_model(l, w, 42, 3, &frame, &len), SL_OK);
    assert_true(len <= n * 4 + 64);
    assert_int_equal(sl_frame_peek_header(frame, len, &h), SL_OK);
    assert_int_equal(h.kind, SL_FRAME_MODEL);
    assert_int_equal(h.base_version, 42);
    assert_true(h.layout_hash == sl_layout_hash(l));
    assert_int_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_OK);
    assert_memory_equal(w, out, n * sizeof *out);
    free(frame);
    w[5] = NAN;
    assert_int_equal(sl_frame_encode_model(l, w, 42, 3, &frame, &len), SL_ENONFINITE);
    free(w);
    free(out);
    sl_layout_free(l);
}

/* Incompressible bits and the reference weights (sl_fixture_weights): never > 64 bytes over raw. */
static void test_model_overhead_bound(void **state)
{
    static const char *const models[] = {"logreg", "mlp", "lenet5", "cnn"};
    (void)state;
    for (size_t m = 0; m < 4; m++) {
        sl_layout *l = load_fixture_layout(models[m]);
        size_t n = (size_t)sl_layout_params(l), len;
        void *frame;
        float *out = malloc(n * sizeof *out), *weights = malloc(n * sizeof *weights);
        uint32_t *noise = malloc(n * sizeof *noise);
        uint64_t seed = 99;

        assert_non_null(weights);
        sl_fixture_weights(l, weights);
        assert_int_equal(sl_frame_encode_model(l, weights, 1, 3, &frame, &len), SL_OK);
        assert_true(len <= n * 4 + 64);
        assert_int_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_OK);
        assert_memory_equal(out, weights, n * 4);
        free(frame);
        /* random finite bit patterns do not compress: stored, still within bound */
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)sl_test_rand(&seed);
            if ((u & 0x7f800000u) == 0x7f800000u)
                u &= 0xbfffffffu;
            noise[i] = u;
        }
        assert_int_equal(sl_frame_encode_model(l, (float *)noise, 1, 3, &frame, &len), SL_OK);
        assert_true(len <= n * 4 + 64);
        assert_int_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_OK);
        assert_memory_equal(out, noise, n * 4);
        free(frame);
        free(noise);
        free(out);
        free(weights);
        sl_layout_free(l);
    }
}

static void test_model_delta(void **state)
{
    sl_layout *l = load_fixture_layout("mlp");
    size_t n = (size_t)sl_layout_params(l), flen, dlen;
    float *base = random_params(n, 3, 0.1f), *next = malloc(n * sizeof *next);
    float *out = malloc(n * sizeof *out);
    uint64_t seed = 5;
    void *full, *delta;
    (void)state;
    /* one round of sparse change: 1% of the weights move */
    memcpy(next, base, n * sizeof *next);
    for (size_t j = 0; j < n / 100; j++)
        next[sl_test_rand(&seed) % n] += 0.001f;
    assert_int_equal(sl_frame_encode_model(l, next, 8, 3, &full, &flen), SL_OK);
    assert_int_equal(sl_frame_encode_model_delta(l, next, base, 7, 3, &delta, &dlen), SL_OK);
    assert_true(dlen * 5 < flen); /* a delta of a sparse change is far smaller */
    assert_int_equal(sl_frame_decode_model(l, delta, dlen, base, 7, out), SL_OK);
    assert_memory_equal(out, next, n * sizeof *out);
    /* the wrong base version, or no base: refused, output untouched */
    memset(out, 0, n * sizeof *out);
    assert_int_equal(sl_frame_decode_model(l, delta, dlen, base, 6, out), SL_ELAYOUT);
    assert_int_equal(sl_frame_decode_model(l, delta, dlen, NULL, 7, out), SL_ELAYOUT);
    assert_true(out[0] == 0.0f && out[n - 1] == 0.0f);
    free(full);
    free(delta);
    free(base);
    free(next);
    free(out);
    sl_layout_free(l);
}

/* The sparse delta body (coding 2): the same model as the dense delta in fewer bytes when a
 * few per cent of the parameters change; the dense body, byte for byte, when it is smaller;
 * no change at all; and its own rejections, output untouched. */
static void test_model_delta_sparse(void **state)
{
    sl_layout *l = load_fixture_layout("lenet5");
    size_t n = (size_t)sl_layout_params(l), dlen, slen, hdr, vn, at;
    float *base = random_params(n, 21, 0.1f), *next = malloc(n * sizeof *next);
    float *out = malloc(n * sizeof *out);
    uint64_t seed = 17;
    uint8_t *dense, *sparse, *edit;
    (void)state;
    /* 5% of the weights move, as an aggregate of sparse updates moves them */
    memcpy(next, base, n * sizeof *next);
    for (size_t j = 0; j < n / 20; j++)
        next[sl_test_rand(&seed) % n] += 0.001f * (float)(1 + (int)(sl_test_rand(&seed) % 7));
    assert_int_equal(sl_frame_encode_model_delta(l, next, base, 7, 3, (void **)&dense, &dlen),
                     SL_OK);
    assert_int_equal(
        sl_frame_encode_model_delta_sparse(l, next, base, 7, 3, (void **)&sparse, &slen), SL_OK);
    assert_true(slen * 4 < dlen * 3); /* at least a quarter smaller */
    assert_int_equal(sl_frame_decode_model(l, sparse, slen, base, 7, out), SL_OK);
    assert_memory_equal(out, next, n * sizeof *out);
    hdr = 16 + 1 + 1; /* envelope to the body: magic .. layout hash, base 7, round 0 */
    vn = n < 128 ? 1 : n < 16384 ? 2 : 3; /* the varint of n */
    assert_true(n < 2097152);
    assert_int_equal(sparse[5], SL_FRAME_MODEL_DELTA);
    assert_int_equal(sparse[hdr + vn], 2); /* varint n, then coding 2 */
    /* the wrong base version: refused, output untouched */
    memset(out, 0, n * sizeof *out);
    assert_int_equal(sl_frame_decode_model(l, sparse, slen, base, 6, out), SL_ELAYOUT);
    /* every truncation and every flipped bit (the CRC's or the body's checks) */
    for (size_t cut = 0; cut < slen; cut++)
        assert_int_not_equal(sl_frame_decode_model(l, sparse, cut, base, 7, out), SL_OK);
    for (size_t i = 0; i < slen; i += 7) {
        sparse[i] ^= 0x10;
        assert_int_not_equal(sl_frame_decode_model(l, sparse, slen, base, 7, out), SL_OK);
        sparse[i] ^= 0x10;
    }
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 0.0f); /* never written */
    free(dense);
    free(sparse);

    /* every weight moves: the dense body is smaller, and the frame is the dense delta's */
    for (size_t i = 0; i < n; i++)
        next[i] = base[i] * 1.5f + 0.01f;
    assert_int_equal(sl_frame_encode_model_delta(l, next, base, 7, 3, (void **)&dense, &dlen),
                     SL_OK);
    assert_int_equal(
        sl_frame_encode_model_delta_sparse(l, next, base, 7, 3, (void **)&sparse, &slen), SL_OK);
    assert_int_equal(slen, dlen);
    assert_memory_equal(sparse, dense, dlen);
    free(dense);
    free(sparse);

    /* no change: the count 0 alone, decoding to the base */
    assert_int_equal(
        sl_frame_encode_model_delta_sparse(l, base, base, 7, 3, (void **)&sparse, &slen), SL_OK);
    assert_int_equal(slen, hdr + vn + 1 + 1 + 4); /* varint n, coding, m = 0, CRC */
    assert_int_equal(sl_frame_decode_model(l, sparse, slen, base, 7, out), SL_OK);
    assert_memory_equal(out, base, n * sizeof *out);
    /* a byte after m = 0 */
    edit = malloc(slen + 1);
    memcpy(edit, sparse, slen - 4);
    edit[slen - 4] = 0;
    sl_test_fix_crc(edit, slen + 1);
    memset(out, 0, n * sizeof *out);
    assert_int_equal(sl_frame_decode_model(l, edit, slen + 1, base, 7, out), SL_ECORRUPT);
    free(edit);
    free(sparse);

    /* one changed word: m above n, a zero word, coding 2 in a full model */
    memcpy(next, base, n * sizeof *next);
    next[5] = base[5] + 1.0f;
    assert_int_equal(
        sl_frame_encode_model_delta_sparse(l, next, base, 7, 3, (void **)&sparse, &slen), SL_OK);
    /* body: n, coding 2, m 1, a position coding, its parameter, the section's size, the
     * section, then the coded part (tag 0, the word) and the CRC */
    at = hdr + vn + 2; /* the position coding */
    assert_int_equal(sparse[hdr + vn + 1], 1);
    assert_int_equal(slen, at + 3 + sparse[at + 2] + 1 + 4 + 4);
    assert_int_equal(sl_frame_decode_model(l, sparse, slen, base, 7, out), SL_OK);
    assert_memory_equal(out, next, n * sizeof *out);
    edit = malloc(slen);
    memset(out, 0, n * sizeof *out);
    memcpy(edit, sparse, slen);
    memset(edit + slen - 8, 0, 4); /* the word: zero */
    sl_test_fix_crc(edit, slen);
    assert_int_equal(sl_frame_decode_model(l, edit, slen, base, 7, out), SL_ECORRUPT);
    memcpy(edit, sparse, slen);
    edit[5] = SL_FRAME_MODEL; /* coding 2 in a model frame */
    sl_test_fix_crc(edit, slen);
    assert_int_equal(sl_frame_decode_model(l, edit, slen, NULL, 0, out), SL_ECORRUPT);
    memcpy(edit, sparse, slen);
    edit[at + 2] = 0x7f; /* position section bytes: past the body */
    sl_test_fix_crc(edit, slen);
    assert_int_equal(sl_frame_decode_model(l, edit, slen, base, 7, out), SL_ETRUNCATED);
    memcpy(edit, sparse, slen);
    edit[at] = 9; /* an unknown position coding */
    sl_test_fix_crc(edit, slen);
    assert_int_equal(sl_frame_decode_model(l, edit, slen, base, 7, out), SL_ECORRUPT);
    memcpy(edit, sparse, slen);
    edit[slen - 9] = 1; /* the coded part's tag: 1 (Zstandard), but no zstd frame follows */
    sl_test_fix_crc(edit, slen);
    assert_int_not_equal(sl_frame_decode_model(l, edit, slen, base, 7, out), SL_OK);
    /* m above n: n + 1, a 3-byte varint, and the CRC */
    memcpy(edit, sparse, hdr + vn + 1);
    edit[hdr + vn + 1] = (uint8_t)(((n + 1) & 0x7f) | 0x80);
    edit[hdr + vn + 2] = (uint8_t)((((n + 1) >> 7) & 0x7f) | 0x80);
    edit[hdr + vn + 3] = (uint8_t)((n + 1) >> 14);
    sl_test_fix_crc(edit, hdr + vn + 8);
    assert_int_equal(sl_frame_decode_model(l, edit, hdr + vn + 8, base, 7, out), SL_ECOUNT);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 0.0f); /* never written */
    free(edit);
    free(sparse);
    free(base);
    free(next);
    free(out);
    sl_layout_free(l);
}

static void test_model_rejections(void **state)
{
    sl_layout *l = load_fixture_layout("logreg"), *other = load_fixture_layout("lenet5");
    size_t n = (size_t)sl_layout_params(l), len;
    float *w = random_params(n, 11, 1.0f), *out = calloc(n, sizeof *out);
    uint8_t *frame;
    (void)state;
    assert_int_equal(sl_frame_encode_model(l, w, 1, 3, (void **)&frame, &len), SL_OK);
    /* every truncation */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(sl_frame_decode_model(l, frame, cut, NULL, 0, out), SL_OK);
    /* every single-bit flip */
    for (size_t i = 0; i < len; i++) {
        for (int b = 0; b < 8; b++) {
            frame[i] ^= (uint8_t)(1u << b);
            assert_int_not_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_OK);
            frame[i] ^= (uint8_t)(1u << b);
        }
    }
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 0.0f); /* never written */
    assert_int_equal(sl_frame_decode_model(other, frame, len, NULL, 0, out), SL_ELAYOUT);
    frame[0] = 'X';
    assert_int_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_EMAGIC);
    frame[0] = 'S';
    frame[4] = 9;
    assert_int_equal(sl_frame_decode_model(l, frame, len, NULL, 0, out), SL_EVERSION);
    free(frame);
    free(w);
    free(out);
    sl_layout_free(l);
    sl_layout_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_layouts),    cmocka_unit_test(test_hash_is_stable),
        cmocka_unit_test(test_hash_distinguishes), cmocka_unit_test(test_layout_rejections),
        cmocka_unit_test(test_model_roundtrip),    cmocka_unit_test(test_model_overhead_bound),
        cmocka_unit_test(test_model_delta),        cmocka_unit_test(test_model_delta_sparse),
        cmocka_unit_test(test_model_rejections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
