/* Position sections: round trips of every mode, exact sizes, AUTO's choice, compression against
 * the information bound, and rejection of malformed sections. */
#include <math.h>

#include "../../support/sl_test.h"
#include "../../../codecs/codec_int.h"

static const sl_pos_mode coded_modes[] = {SL_POS_RICE, SL_POS_BITMAP, SL_POS_ADAPTIVE};
#define N_CODED (sizeof coded_modes / sizeof coded_modes[0])

static double unit_rand(uint64_t *rng)
{
    return (double)(sl_test_rand(rng) >> 11) / 9007199254740992.0;
}

/* A uniformly random k-subset of [0, d), ascending (selection sampling). */
static size_t make_uniform(uint64_t *rng, uint64_t d, size_t k, uint32_t *idx)
{
    size_t n = 0;
    for (uint64_t i = 0; i < d && n < k; i++)
        if (unit_rand(rng) * (double)(d - i) < (double)(k - n))
            idx[n++] = (uint32_t)i;
    return n;
}

/* Runs of mean length ~@run separated by gaps of mean ~@gap, as top-k of real gradients selects
 * (integers only, so that golden outputs are the same on every platform). */
static size_t make_blocks(uint64_t *rng, uint64_t d, uint64_t run, uint64_t gap, uint32_t *idx)
{
    size_t n = 0;
    uint64_t i = 0;
    for (;;) {
        uint64_t len = 1 + sl_test_rand(rng) % (2 * run);
        i += sl_test_rand(rng) % (2 * gap + 1);
        for (uint64_t j = 0; j < len && i < d; j++)
            idx[n++] = (uint32_t)i++;
        if (i >= d)
            return n;
    }
}

/* A rows x cols matrix: active rows select each element w.p. @p_in, others w.p. @p_out. */
static size_t make_rows(uint64_t *rng, uint64_t rows, uint64_t cols, double p_row, double p_in,
                        double p_out, uint32_t *idx)
{
    size_t n = 0;
    for (uint64_t r = 0; r < rows; r++) {
        double p = unit_rand(rng) < p_row ? p_in : p_out;
        for (uint64_t c = 0; c < cols; c++)
            if (unit_rand(rng) < p)
                idx[n++] = (uint32_t)(r * cols + c);
    }
    return n;
}

static double log2_binomial(uint64_t d, size_t k)
{
    return (lgamma((double)d + 1) - lgamma((double)k + 1) - lgamma((double)(d - k) + 1)) / log(2);
}

/* Plan and encode (after a 3-byte prefix, to check appending); returns the section. */
static sl__buf encode(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d,
                      sl_pos_mode *chosen, uint8_t *param)
{
    sl__buf b = {0};
    size_t bytes = 12345;
    assert_int_equal(sl__pos_plan(mode, idx, n, d, chosen, param, &bytes), SL_OK);
    if (mode != SL_POS_AUTO)
        assert_int_equal(*chosen, mode);
    assert_int_equal(sl__buf_append(&b, "pre", 3), SL_OK);
    assert_int_equal(sl__pos_encode(*chosen, *param, idx, n, d, &b), SL_OK);
    assert_int_equal(b.len, 3 + bytes);
    assert_memory_equal(b.data, "pre", 3);
    memmove(b.data, b.data + 3, bytes);
    b.len = bytes;
    return b;
}

/* Round trip: returns the section size. */
static size_t roundtrip(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d)
{
    sl_pos_mode chosen;
    uint8_t param;
    sl__buf b = encode(mode, idx, n, d, &chosen, &param);
    uint32_t *out = malloc((n + 1) * sizeof *out);
    size_t bytes = b.len;

    out[n] = 0xdeadbeef;
    assert_int_equal(sl__pos_decode(chosen, param, b.data, b.len, n, d, out), SL_OK);
    if (n > 0)
        assert_memory_equal(out, idx, n * sizeof *out);
    assert_int_equal(out[n], 0xdeadbeef);
    free(out);
    sl__buf_free(&b);
    return bytes;
}

static size_t plan_bytes(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d)
{
    sl_pos_mode chosen;
    uint8_t param;
    size_t bytes;
    assert_int_equal(sl__pos_plan(mode, idx, n, d, &chosen, &param, &bytes), SL_OK);
    return bytes;
}

static void roundtrip_all(const uint32_t *idx, size_t n, uint64_t d)
{
    for (size_t m = 0; m < N_CODED; m++)
        roundtrip(coded_modes[m], idx, n, d);
    roundtrip(SL_POS_AUTO, idx, n, d);
    if (n == d)
        assert_int_equal(roundtrip(SL_POS_DENSE, idx, n, d), 0);
}

/* ------------------------------------------------------------------------ */

static void test_worked_examples(void **state)
{
    /* the examples of FORMAT.md, "Position sections": d = 20, {2, 3, 7, 15} */
    static const uint32_t idx[] = {2, 3, 7, 15};
    static const uint8_t rice[] = {0xca, 0x18};
    static const uint8_t bitmap[] = {0x8c, 0x80, 0x00};
    static const uint8_t adaptive[] = {0x5d, 0xbf, 0x6b, 0xdb, 0xed};
    sl_pos_mode chosen;
    uint8_t param;
    sl__buf b;
    (void)state;

    b = encode(SL_POS_AUTO, idx, 4, 20, &chosen, &param);
    assert_int_equal(chosen, SL_POS_RICE);
    assert_int_equal(param, 1);
    assert_int_equal(b.len, sizeof rice);
    assert_memory_equal(b.data, rice, sizeof rice);
    sl__buf_free(&b);

    b = encode(SL_POS_BITMAP, idx, 4, 20, &chosen, &param);
    assert_int_equal(b.len, sizeof bitmap);
    assert_memory_equal(b.data, bitmap, sizeof bitmap);
    sl__buf_free(&b);

    /* also pins the coder and model down bit for bit across platforms */
    b = encode(SL_POS_ADAPTIVE, idx, 4, 20, &chosen, &param);
    assert_int_equal(param, 0);
    assert_int_equal(b.len, sizeof adaptive);
    assert_memory_equal(b.data, adaptive, sizeof adaptive);
    sl__buf_free(&b);
}

static void test_adaptive_golden_large(void **state)
{
    /* a longer ADAPTIVE stream (carries, long zero runs, raw bits), pinned by a checksum */
    uint64_t rng = 7;
    uint32_t *idx = malloc(200000 * sizeof *idx);
    size_t n = make_blocks(&rng, 200000, 20, 400, idx);
    sl_pos_mode chosen;
    uint8_t param;
    sl__buf b = encode(SL_POS_ADAPTIVE, idx, n, 200000, &chosen, &param);
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    (void)state;

    for (size_t i = 0; i < b.len; i++)
        h = (h ^ b.data[i]) * 1099511628211ull;
    print_message("adaptive golden: n=%zu bytes=%zu fnv=%016llx\n", n, b.len,
                  (unsigned long long)h);
    assert_int_equal(n, 9334);
    assert_int_equal(b.len, 956);
    assert_int_equal(h, 0x8679067929483f48ull);
    sl__buf_free(&b);
    free(idx);
}

static void test_roundtrip_random(void **state)
{
    uint64_t rng = 1;
    uint32_t *idx = malloc(200000 * sizeof *idx);
    (void)state;

    for (int iter = 0; iter < 400; iter++) {
        uint64_t d = 1 + sl_test_rand(&rng) % (iter < 300 ? 3000 : 200000);
        size_t n, k;
        switch (sl_test_rand(&rng) % 6) {
        case 0:
            k = 0;
            break;
        case 1:
            k = 1;
            break;
        case 2:
            k = (size_t)d;
            break;
        case 3:
            k = (size_t)d - (size_t)(sl_test_rand(&rng) % (d < 3 ? d : 3));
            break;
        default:
            k = (size_t)(sl_test_rand(&rng) % (d + 1)) / (1 + sl_test_rand(&rng) % 64);
            break;
        }
        if (iter % 5 == 4 && d > 10)
            n = make_blocks(&rng, d, 1 + sl_test_rand(&rng) % 40, 1 + sl_test_rand(&rng) % 500,
                            idx);
        else
            n = make_uniform(&rng, d, k, idx);
        roundtrip_all(idx, n, d);
    }
    free(idx);
}

static void test_edges(void **state)
{
    static const uint32_t zero[] = {0};
    const uint64_t dmax = SL_CODEC_MAX_TENSOR;
    uint32_t idx[8];
    (void)state;

    roundtrip_all(NULL, 0, 1);
    roundtrip_all(zero, 1, 1);
    roundtrip_all(zero, 1, 1000);
    roundtrip_all(NULL, 0, 0);
    idx[0] = 999;
    roundtrip_all(idx, 1, 1000);
    idx[0] = 0;
    idx[1] = 999;
    roundtrip_all(idx, 2, 1000);

    /* d = 2^32 - 1: huge first gap, huge gaps, the last index (BITMAP would be 512 MiB) */
    idx[0] = (uint32_t)(dmax - 1);
    for (size_t m = 0; m < N_CODED; m++)
        if (coded_modes[m] != SL_POS_BITMAP)
            roundtrip(coded_modes[m], idx, 1, dmax);
    roundtrip(SL_POS_AUTO, idx, 1, dmax);
    idx[0] = 0;
    idx[1] = 1;
    idx[2] = 0x80000000u;
    idx[3] = 0xfffffff0u;
    idx[4] = (uint32_t)(dmax - 1);
    roundtrip(SL_POS_RICE, idx, 5, dmax);
    roundtrip(SL_POS_ADAPTIVE, idx, 5, dmax);
    roundtrip(SL_POS_AUTO, idx, 5, dmax);
    idx[0] = 0x7fffffffu;
    roundtrip(SL_POS_RICE, idx, 1, dmax);
    roundtrip(SL_POS_ADAPTIVE, idx, 1, dmax);

    /* every Rice parameter, including long unary runs (b = 0 over a gap of 150000) */
    idx[0] = 3;
    idx[1] = 150004;
    idx[2] = 150005;
    idx[3] = 199999;
    for (unsigned b = 0; b <= 31; b++) {
        sl__buf buf = {0};
        uint32_t out[4];
        assert_int_equal(sl__pos_encode(SL_POS_RICE, (uint8_t)b, idx, 4, 200000, &buf), SL_OK);
        assert_int_equal(sl__pos_decode(SL_POS_RICE, (uint8_t)b, buf.data, buf.len, 4, 200000, out),
                         SL_OK);
        assert_memory_equal(out, idx, sizeof out);
        sl__buf_free(&buf);
    }
}

static void test_auto_is_smallest(void **state)
{
    uint64_t rng = 2;
    uint32_t *idx = malloc(100000 * sizeof *idx);
    (void)state;

    for (int iter = 0; iter < 200; iter++) {
        uint64_t d = 1 + sl_test_rand(&rng) % (iter % 10 == 0 ? 100000 : 2000);
        size_t k = (size_t)(sl_test_rand(&rng) % (d + 1));
        size_t n, best, auto_bytes, rice;
        sl_pos_mode chosen;
        uint8_t param;

        if (iter % 3 == 0)
            k /= 1 + sl_test_rand(&rng) % 100;
        n = make_uniform(&rng, d, k, idx);
        rice = plan_bytes(SL_POS_RICE, idx, n, d);
        best = rice;
        if (plan_bytes(SL_POS_BITMAP, idx, n, d) < best)
            best = plan_bytes(SL_POS_BITMAP, idx, n, d);
        if (n == d)
            best = 0;
        assert_int_equal(sl__pos_plan(SL_POS_AUTO, idx, n, d, &chosen, &param, &auto_bytes), SL_OK);
        assert_int_equal(plan_bytes(chosen, idx, n, d), auto_bytes);
        if (chosen == SL_POS_ADAPTIVE) /* only when strictly smaller than the others */
            assert_true(auto_bytes < best);
        else
            assert_int_equal(auto_bytes, best);

        /* the Rice parameter is the true optimum over all 32 */
        for (unsigned b = 0; b <= 31 && n > 0; b++) {
            sl__buf buf = {0};
            assert_int_equal(sl__pos_encode(SL_POS_RICE, (uint8_t)b, idx, n, d, &buf), SL_OK);
            assert_true(buf.len >= rice);
            sl__buf_free(&buf);
        }
    }
    free(idx);
}

static void test_rice_near_bound(void **state)
{
    static const size_t ks[] = {10000, 1000};
    const uint64_t d = 1000000;
    uint32_t *idx = malloc(d * sizeof *idx);
    (void)state;

    for (size_t t = 0; t < 2; t++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            uint64_t rng = seed * 1000 + t;
            size_t n = make_uniform(&rng, d, ks[t], idx);
            double bound = log2_binomial(d, n);
            size_t bytes = roundtrip(SL_POS_RICE, idx, n, d);
            double ratio = (double)bytes * 8 / bound;
            if (seed == 1)
                print_message("rice d=%llu n=%zu: %.4f bits/nz, bound %.4f, ratio %.4f\n",
                              (unsigned long long)d, n, bytes * 8.0 / (double)n, bound / (double)n,
                              ratio);
            assert_true(ratio >= 1.0);
            assert_true(ratio < 1.01);
            assert_int_equal(plan_bytes(SL_POS_AUTO, idx, n, d), bytes);
        }
    }
    free(idx);
}

static void test_adaptive_vs_rice(void **state)
{
    const uint64_t d = 1000000;
    uint32_t *idx = malloc(d * sizeof *idx);
    uint64_t rng = 3;
    size_t n, rice, adaptive;
    (void)state;

    /* clustered: runs of ~32 with gaps of ~3000; rows of a 1000 x 1000 matrix */
    n = make_blocks(&rng, d, 32, 3000, idx);
    rice = roundtrip(SL_POS_RICE, idx, n, d);
    adaptive = roundtrip(SL_POS_ADAPTIVE, idx, n, d);
    print_message("blocks n=%zu: rice %.3f, adaptive %.3f bits/nz (%.3f)\n", n,
                  rice * 8.0 / (double)n, adaptive * 8.0 / (double)n, (double)adaptive / rice);
    assert_true(adaptive * 4 < rice);
    {
        /* AUTO notices the clustering and takes the adaptive coder */
        sl_pos_mode chosen;
        uint8_t param;
        size_t auto_bytes;
        assert_int_equal(sl__pos_plan(SL_POS_AUTO, idx, n, d, &chosen, &param, &auto_bytes), SL_OK);
        assert_int_equal(chosen, SL_POS_ADAPTIVE);
        assert_int_equal(auto_bytes, adaptive);
    }

    n = make_rows(&rng, 1000, 1000, 0.05, 0.2, 0.0005, idx);
    rice = roundtrip(SL_POS_RICE, idx, n, d);
    adaptive = roundtrip(SL_POS_ADAPTIVE, idx, n, d);
    print_message("rows n=%zu: rice %.3f, adaptive %.3f bits/nz (%.3f)\n", n,
                  rice * 8.0 / (double)n, adaptive * 8.0 / (double)n, (double)adaptive / rice);
    assert_true(adaptive * 10 < rice * 7);

    /* uniform: within a few percent of Rice */
    for (size_t k = 10000; k >= 1000; k /= 10) {
        n = make_uniform(&rng, d, k, idx);
        rice = roundtrip(SL_POS_RICE, idx, n, d);
        adaptive = roundtrip(SL_POS_ADAPTIVE, idx, n, d);
        print_message("uniform n=%zu: rice %.3f, adaptive %.3f bits/nz (%.3f)\n", n,
                      rice * 8.0 / (double)n, adaptive * 8.0 / (double)n, (double)adaptive / rice);
        assert_true(adaptive * 100 < rice * 103);
    }
    free(idx);
}

/* ------------------------------------------------------------------------ */
/* Rejections                                                               */
/* ------------------------------------------------------------------------ */

static int decode_into(sl_pos_mode mode, uint8_t param, const uint8_t *p, size_t len, size_t n,
                       uint64_t d)
{
    uint32_t *out = malloc((n + 1) * sizeof *out);
    int rc = sl__pos_decode(mode, param, p, len, n, d, out);
    if (rc == SL_OK) /* whatever a decoder accepts is a valid set */
        for (size_t i = 0; i < n; i++)
            assert_true(out[i] < d && (i == 0 || out[i] > out[i - 1]));
    free(out);
    return rc;
}

static void test_reject_truncation_and_trailing(void **state)
{
    uint64_t rng = 4;
    uint32_t idx[3000];
    (void)state;

    for (int iter = 0; iter < 12; iter++) {
        uint64_t d = 100 + sl_test_rand(&rng) % 2900;
        size_t n = iter % 3 == 0
                       ? make_blocks(&rng, d, 10, 60, idx)
                       : make_uniform(&rng, d, 1 + (size_t)(sl_test_rand(&rng) % 100), idx);
        for (size_t m = 0; m < N_CODED; m++) {
            sl_pos_mode chosen;
            uint8_t param;
            sl__buf b = encode(coded_modes[m], idx, n, d, &chosen, &param);
            uint8_t *copy = malloc(b.len + 1);

            for (size_t len = 0; len < b.len; len++) {
                memcpy(copy, b.data, len); /* exact-size copy: ASan sees any over-read */
                assert_int_equal(decode_into(chosen, param, copy, len, n, d), SL_ETRUNCATED);
            }
            memcpy(copy, b.data, b.len);
            copy[b.len] = 0;
            assert_int_equal(decode_into(chosen, param, copy, b.len + 1, n, d), SL_ECORRUPT);
            copy[b.len] = 0x5a;
            assert_int_equal(decode_into(chosen, param, copy, b.len + 1, n, d), SL_ECORRUPT);
            free(copy);
            sl__buf_free(&b);
        }
    }
    /* empty sets and DENSE take no bytes at all */
    assert_int_equal(decode_into(SL_POS_RICE, 0, (const uint8_t *)"", 1, 0, 10), SL_ECORRUPT);
    assert_int_equal(decode_into(SL_POS_ADAPTIVE, 0, (const uint8_t *)"", 1, 0, 10), SL_ECORRUPT);
    assert_int_equal(decode_into(SL_POS_DENSE, 0, (const uint8_t *)"", 1, 10, 10), SL_ECORRUPT);
    assert_int_equal(decode_into(SL_POS_DENSE, 0, NULL, 0, 9, 10), SL_ECOUNT);
}

static void test_reject_padding(void **state)
{
    static const uint32_t idx[] = {2, 3, 7, 15};
    uint8_t rice[] = {0xca, 0x18}; /* 13 bits: 3 of padding */
    uint8_t bitmap[] = {0x8c, 0x80, 0x00};
    (void)state;

    assert_int_equal(decode_into(SL_POS_RICE, 1, rice, 2, 4, 20), SL_OK);
    for (unsigned bit = 5; bit < 8; bit++) {
        rice[1] ^= (uint8_t)(1u << bit);
        assert_int_equal(decode_into(SL_POS_RICE, 1, rice, 2, 4, 20), SL_ECORRUPT);
        rice[1] ^= (uint8_t)(1u << bit);
    }
    /* bitmap bits past d: d = 20 leaves bits 4..7 of the last byte */
    for (unsigned bit = 4; bit < 8; bit++) {
        bitmap[2] ^= (uint8_t)(1u << bit);
        assert_int_equal(decode_into(SL_POS_BITMAP, 0, bitmap, 3, 4, 20), SL_ECORRUPT);
        assert_int_equal(decode_into(SL_POS_BITMAP, 0, bitmap, 3, 5, 20), SL_ECORRUPT);
        bitmap[2] ^= (uint8_t)(1u << bit);
    }
    (void)idx;
}

/* Flip every bit of a section: a flip is rejected, or decodes to a set whose encoding is exactly
 * the flipped bytes (one canonical encoding per set). Returns how many flips were rejected with
 * @want (or any error when @want is SL_OK). */
static size_t flip_all(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d, int want,
                       size_t *rejected)
{
    sl_pos_mode chosen;
    uint8_t param;
    sl__buf b = encode(mode, idx, n, d, &chosen, &param);
    uint32_t *out = malloc((n + 1) * sizeof *out);
    size_t hits = 0;

    *rejected = 0;
    for (size_t bit = 0; bit < b.len * 8; bit++) {
        int rc;
        b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        rc = sl__pos_decode(chosen, param, b.data, b.len, n, d, out);
        if (rc == SL_OK) {
            sl__buf again = {0};
            assert_int_equal(sl__pos_encode(chosen, param, out, n, d, &again), SL_OK);
            assert_int_equal(again.len, b.len);
            assert_memory_equal(again.data, b.data, b.len);
            sl__buf_free(&again);
        } else {
            ++*rejected;
            hits += want == SL_OK || rc == want;
        }
        b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    free(out);
    sl__buf_free(&b);
    return hits;
}

static void test_reject_flips(void **state)
{
    uint64_t rng = 5;
    uint32_t idx[4000];
    size_t n, rejected, hits;
    (void)state;

    /* BITMAP: every flip changes the popcount or sets a bit past d */
    n = make_uniform(&rng, 203, 40, idx);
    flip_all(SL_POS_BITMAP, idx, n, 203, SL_OK, &rejected);
    assert_int_equal(rejected, ((203 + 7) / 8) * 8);

    /* RICE: indices end near d, so that flips push them to >= d */
    for (size_t i = 0; i < 30; i++)
        idx[i] = (uint32_t)(3970 + i);
    hits = flip_all(SL_POS_RICE, idx, 30, 4000, SL_ECOUNT, &rejected);
    assert_true(hits > 0);
    n = make_uniform(&rng, 4000, 300, idx);
    flip_all(SL_POS_RICE, idx, n, 4000, SL_OK, &rejected);
    assert_true(rejected > 0);

    /* ADAPTIVE: nearly every flip is caught (end state, length or range checks) */
    n = make_blocks(&rng, 4000, 8, 100, idx);
    flip_all(SL_POS_ADAPTIVE, idx, n, 4000, SL_OK, &rejected);
    n = make_uniform(&rng, 4000, 200, idx);
    hits = flip_all(SL_POS_ADAPTIVE, idx, n, 4000, SL_OK, &rejected);
    print_message("adaptive: %zu of %zu single-bit flips rejected\n", rejected,
                  plan_bytes(SL_POS_ADAPTIVE, idx, n, 4000) * 8);
    assert_true(rejected * 10 > plan_bytes(SL_POS_ADAPTIVE, idx, n, 4000) * 8 * 9);
    (void)hits;
}

static void test_reject_params_and_counts(void **state)
{
    static const uint32_t idx[] = {2, 3, 7, 15};
    static const uint8_t rice[] = {0xca, 0x18};
    static const uint8_t bitmap[] = {0x8c, 0x80, 0x00};
    uint32_t out[32];
    sl__buf b = {0};
    sl_pos_mode chosen = SL_POS_AUTO;
    uint8_t param = 77;
    size_t bytes = 77;
    (void)state;

    for (unsigned p = 32; p <= 255; p++)
        assert_int_equal(sl__pos_decode(SL_POS_RICE, (uint8_t)p, rice, 2, 4, 20, out), SL_ECORRUPT);
    for (unsigned p = 1; p <= 255; p++) {
        assert_int_equal(sl__pos_decode(SL_POS_BITMAP, (uint8_t)p, bitmap, 3, 4, 20, out),
                         SL_ECORRUPT);
        assert_int_equal(sl__pos_decode(SL_POS_DENSE, (uint8_t)p, NULL, 0, 4, 4, out), SL_ECORRUPT);
    }
    /* modes a section never has */
    assert_int_equal(sl__pos_decode(SL_POS_AUTO, 0, rice, 2, 4, 20, out), SL_ECORRUPT);
    assert_int_equal(sl__pos_decode((sl_pos_mode)9, 0, rice, 2, 4, 20, out), SL_ECORRUPT);
    /* n larger than d, d beyond the u32 index space */
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 1, rice, 2, 21, 20, out), SL_ECOUNT);
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 1, rice, 2, 4, 1ull << 32, out), SL_ECOUNT);
    /* the right bytes with a d that the last index does not fit */
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 1, rice, 2, 4, 15, out), SL_ECOUNT);
    assert_int_equal(sl__pos_decode(SL_POS_BITMAP, 0, bitmap, 3, 3, 20, out), SL_ECOUNT);
    assert_int_equal(sl__pos_decode(SL_POS_BITMAP, 0, bitmap, 3, 5, 20, out), SL_ECOUNT);

    /* encoder side: SL_EINVAL, outputs untouched */
    assert_int_equal(sl__buf_append(&b, "x", 1), SL_OK);
    for (unsigned p = 32; p <= 255; p++)
        assert_int_equal(sl__pos_encode(SL_POS_RICE, (uint8_t)p, idx, 4, 20, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_BITMAP, 1, idx, 4, 20, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_AUTO, 0, idx, 4, 20, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_DENSE, 0, idx, 4, 20, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_RICE, 0, idx, 4, 3, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_RICE, 0, idx, 4, 15, &b), SL_EINVAL);
    assert_int_equal(sl__pos_encode(SL_POS_RICE, 0, idx, 4, 1ull << 32, &b), SL_EINVAL);
    assert_int_equal(sl__pos_plan(SL_POS_DENSE, idx, 4, 20, &chosen, &param, &bytes), SL_EINVAL);
    assert_int_equal(sl__pos_plan(SL_POS_AUTO, idx, 4, 3, &chosen, &param, &bytes), SL_EINVAL);
    assert_int_equal(sl__pos_plan((sl_pos_mode)9, idx, 4, 20, &chosen, &param, &bytes), SL_EINVAL);
    for (size_t m = 0; m < N_CODED; m++) {
        static const uint32_t unsorted[] = {2, 7, 3, 15};
        static const uint32_t duplicate[] = {2, 3, 3, 15};
        static const uint32_t equal_d[] = {2, 3, 7, 20};
        sl_pos_mode mode = coded_modes[m];
        assert_int_equal(sl__pos_encode(mode, 0, unsorted, 4, 20, &b), SL_EINVAL);
        assert_int_equal(sl__pos_encode(mode, 0, duplicate, 4, 20, &b), SL_EINVAL);
        assert_int_equal(sl__pos_encode(mode, 0, equal_d, 4, 20, &b), SL_EINVAL);
        assert_int_equal(sl__pos_plan(mode, unsorted, 4, 20, &chosen, &param, &bytes), SL_EINVAL);
        assert_int_equal(sl__pos_plan(mode, duplicate, 4, 20, &chosen, &param, &bytes), SL_EINVAL);
        assert_int_equal(sl__pos_plan(mode, equal_d, 4, 20, &chosen, &param, &bytes), SL_EINVAL);
    }
    assert_int_equal(b.len, 1);
    assert_int_equal(chosen, SL_POS_AUTO);
    assert_int_equal(param, 77);
    assert_int_equal(bytes, 77);
    sl__buf_free(&b);
}

static void test_hostile_input(void **state)
{
    uint64_t rng = 6;
    size_t big = 1 << 20;
    uint8_t *zeros = calloc(big, 1);
    uint8_t *garbage = malloc(4096);
    uint32_t *out = malloc(4096 * sizeof *out);
    (void)state;

    /* a unary run over the whole buffer: bounded by len, then by d */
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 0, zeros, big, 1, SL_CODEC_MAX_TENSOR, out),
                     SL_ETRUNCATED);
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 0, zeros, big, 1, 1000, out), SL_ECOUNT);
    assert_int_equal(sl__pos_decode(SL_POS_RICE, 31, zeros, big, 1, 1000, out), SL_ECOUNT);
    assert_int_equal(sl__pos_decode(SL_POS_ADAPTIVE, 0, zeros, big, 1, 1000, out), SL_ECORRUPT);
    /* the range decoder's first word must be below its range */
    memset(garbage, 0xff, 8);
    assert_int_equal(sl__pos_decode(SL_POS_ADAPTIVE, 0, garbage, 8, 1, 1000, out), SL_ECORRUPT);

    /* random bytes in every mode: an error or a valid set, never a crash or an over-read */
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = (size_t)(sl_test_rand(&rng) % 64);
        uint64_t d = 1 + sl_test_rand(&rng) % (iter % 2 ? 600 : SL_CODEC_MAX_TENSOR);
        size_t n = (size_t)(sl_test_rand(&rng) % (d < 4096 ? d + 1 : 4096));
        uint8_t param = (uint8_t)(sl_test_rand(&rng) % 34);
        uint8_t *p = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
            p[i] = (uint8_t)(iter % 3 ? sl_test_rand(&rng) : sl_test_rand(&rng) & 0x11);
        if (n > 64 && iter % 4)
            n = (size_t)(sl_test_rand(&rng) % 64);
        decode_into(SL_POS_RICE, param, p, len, n, d);
        decode_into(SL_POS_ADAPTIVE, 0, p, len, n, d);
        if (d <= 600)
            decode_into(SL_POS_BITMAP, 0, p, len, n, d);
        free(p);
    }
    free(zeros);
    free(garbage);
    free(out);
}

/* sl__pos_write == sl__pos_plan + sl__pos_encode, byte for byte, for every mode. */
static void test_write_matches_plan_encode(void **state)
{
    static const sl_pos_mode modes[] = {SL_POS_AUTO, SL_POS_RICE, SL_POS_BITMAP, SL_POS_ADAPTIVE};
    uint64_t rng = 11;
    uint32_t *idx = malloc(200000 * sizeof *idx);
    (void)state;
    for (int iter = 0; iter < 60; iter++) {
        uint64_t d = 1 + sl_test_rand(&rng) % 200000;
        size_t n = iter % 2
                       ? make_uniform(&rng, d, (size_t)(sl_test_rand(&rng) % (d / 20 + 2)), idx)
                       : make_blocks(&rng, d, 1 + iter % 40, 50 + iter * 30, idx);
        for (size_t m = 0; m < 4; m++) {
            sl__buf planned = {0}, written = {0};
            sl_pos_mode chosen, wchosen;
            uint8_t param, wparam;
            size_t bytes;
            assert_int_equal(sl__pos_plan(modes[m], idx, n, d, &chosen, &param, &bytes), SL_OK);
            assert_int_equal(sl__pos_encode(chosen, param, idx, n, d, &planned), SL_OK);
            assert_int_equal(planned.len, bytes);
            assert_int_equal(sl__buf_put_u8(&written, 0xee), SL_OK); /* appends after this */
            assert_int_equal(sl__pos_write(modes[m], idx, n, d, &wchosen, &wparam, &written),
                             SL_OK);
            assert_int_equal(wchosen, chosen);
            assert_int_equal(wparam, param);
            assert_int_equal(written.len, planned.len + 1);
            if (planned.len > 0)
                assert_memory_equal(written.data + 1, planned.data, planned.len);
            sl__buf_free(&planned);
            sl__buf_free(&written);
        }
    }
    /* an invalid set is refused and the buffer keeps its length */
    {
        sl__buf b = {0};
        sl_pos_mode chosen;
        uint8_t param;
        uint32_t bad[2] = {5, 5};
        assert_int_equal(sl__pos_write(SL_POS_AUTO, bad, 2, 10, &chosen, &param, &b), SL_EINVAL);
        assert_int_equal(b.len, 0);
        sl__buf_free(&b);
    }
    free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_examples),
        cmocka_unit_test(test_adaptive_golden_large),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_auto_is_smallest),
        cmocka_unit_test(test_rice_near_bound),
        cmocka_unit_test(test_adaptive_vs_rice),
        cmocka_unit_test(test_reject_truncation_and_trailing),
        cmocka_unit_test(test_reject_padding),
        cmocka_unit_test(test_reject_flips),
        cmocka_unit_test(test_reject_params_and_counts),
        cmocka_unit_test(test_hostile_input),
        cmocka_unit_test(test_write_matches_plan_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
