/*
 * select_neon.c - NEON kernels of top-k selection (see select_int.h), for
 * aarch64 and armv7 with -mfpu=neon; chosen at compile time (SL_NEON).
 */
#include "select_int.h"

#if defined(SL_NEON)
#include <arm_neon.h>
#include <string.h>

/* Byte shuffles that move the matching lanes of a 4 x u32 vector to the
 * front, indexed by the 4-bit match mask. */
static const uint8_t compress_lut[16][16] = {
    {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
    {4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 2, 3},
    {8, 9, 10, 11, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 0, 1, 2, 3},
    {4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3},
    {12, 13, 14, 15, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 12, 13, 14, 15, 0, 1, 2, 3, 0, 1, 2, 3},
    {4, 5, 6, 7, 12, 13, 14, 15, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15, 0, 1, 2, 3},
    {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 0, 1, 2, 3},
    {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3},
    {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
};

static const uint8_t popcount4[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

static inline uint32x4_t keys4(const float *p)
{
    return vandq_u32(vreinterpretq_u32_f32(vld1q_f32(p)), vdupq_n_u32(SL__KEY_MASK));
}

static inline uint32_t hmax4(uint32x4_t v)
{
#if defined(__aarch64__)
    return vmaxvq_u32(v);
#else
    uint32x2_t m = vpmax_u32(vget_low_u32(v), vget_high_u32(v));
    m = vpmax_u32(m, m);
    return vget_lane_u32(m, 0);
#endif
}

static inline unsigned movemask4(uint32x4_t m)
{
    static const uint32_t bit[4] = {1, 2, 4, 8};
    uint32x4_t t = vandq_u32(m, vld1q_u32(bit));
#if defined(__aarch64__)
    return vaddvq_u32(t);
#else
    uint32x2_t s = vadd_u32(vget_low_u32(t), vget_high_u32(t));
    s = vpadd_u32(s, s);
    return vget_lane_u32(s, 0);
#endif
}

static inline uint32x4_t compress4(uint32x4_t v, unsigned m)
{
    uint8x16_t b = vreinterpretq_u8_u32(v), ix = vld1q_u8(compress_lut[m]);
#if defined(__aarch64__)
    return vreinterpretq_u32_u8(vqtbl1q_u8(b, ix));
#else
    uint8x8x2_t t = {{vget_low_u8(b), vget_high_u8(b)}};
    return vreinterpretq_u32_u8(
        vcombine_u8(vtbl2_u8(t, vget_low_u8(ix)), vtbl2_u8(t, vget_high_u8(ix))));
#endif
}

static size_t count_ge_neon(const float *x, size_t n, uint32_t lo, uint32_t *max_key)
{
    const uint32x4_t vlo = vdupq_n_u32(lo);
    uint32x4_t c0 = vdupq_n_u32(0), c1 = c0, mx0 = c0, mx1 = c0;
    uint32_t lane[8], mx;
    size_t i = 0, c = 0;

    /* Per-lane counters hold at most n / 4 < 2^32 since n <= 2^32 - 1;
     * a match is all ones, so subtracting it adds one. */
    for (; n - i >= 8; i += 8) {
        uint32x4_t k0 = keys4(x + i), k1 = keys4(x + i + 4);
        c0 = vsubq_u32(c0, vcgeq_u32(k0, vlo));
        c1 = vsubq_u32(c1, vcgeq_u32(k1, vlo));
        mx0 = vmaxq_u32(mx0, k0);
        mx1 = vmaxq_u32(mx1, k1);
    }
    vst1q_u32(lane, c0);
    vst1q_u32(lane + 4, c1);
    for (int j = 0; j < 8; j++)
        c += lane[j];
    mx = hmax4(vmaxq_u32(mx0, mx1));
    if (i < n) {
        uint32_t tail_max;
        c += sl__select_count_ge_scalar(x + i, n - i, lo, &tail_max);
        mx = tail_max > mx ? tail_max : mx;
    }
    *max_key = mx;
    return c;
}

static inline size_t filter_body(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                                 uint32_t *keys, uint32_t *max_key, const int with_keys)
{
    static const uint32_t iota[4] = {0, 1, 2, 3};
    const uint32x4_t vlo = vdupq_n_u32(lo), step = vdupq_n_u32(4);
    uint32x4_t vi = vld1q_u32(iota), mxv = vdupq_n_u32(0);
    size_t i = 0, j = 0;
    uint32_t mx;

    /* Whole-vector stores; the lanes past the matches are overwritten by
     * the next store, so this needs 16 free slots for 4 vectors. */
    while (n - i >= 16 && cap - j >= 16) {
        for (int u = 0; u < 4; u++, i += 4) {
            uint32x4_t k = keys4(x + i);
            unsigned m = movemask4(vcgeq_u32(k, vlo));
            mxv = vmaxq_u32(mxv, k);
            vst1q_u32(idx + j, compress4(vi, m));
            if (with_keys)
                vst1q_u32(keys + j, compress4(k, m));
            j += popcount4[m];
            vi = vaddq_u32(vi, step);
        }
    }
    mx = hmax4(mxv);
    if (i < n) {
        uint32_t tail_max;
        size_t t = sl__select_filter_ge_scalar(x + i, n - i, lo, cap - j, idx + j,
                                               with_keys ? keys + j : NULL, &tail_max);
        mx = tail_max > mx ? tail_max : mx;
        if (t > cap - j) {
            *max_key = mx;
            return cap + 1;
        }
        for (size_t e = j + t; j < e; j++)
            idx[j] += (uint32_t)i;
    }
    *max_key = mx;
    return j;
}

static size_t filter_ge_neon(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                             uint32_t *keys, uint32_t *max_key)
{
    if (keys != NULL)
        return filter_body(x, n, lo, cap, idx, keys, max_key, 1);
    return filter_body(x, n, lo, cap, idx, NULL, max_key, 0);
}

#if defined(__aarch64__)
static void stats_neon(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES],
                       uint32_t *max_key, uint32_t *hist)
{
    /* acc[q] holds the canonical lanes 2q and 2q + 1. */
    float64x2_t acc[8];
    uint32x4_t mxv = vdupq_n_u32(0);
    uint32_t bins[16], mx;
    size_t i = 0;

    for (int q = 0; q < 8; q++)
        acc[q] = vld1q_f64(lanes + 2 * q);
    for (; n - i >= 16; i += 16) {
        for (int v = 0; v < 4; v++) {
            uint32x4_t k = keys4(x + i + 4 * (size_t)v);
            float32x4_t f = vreinterpretq_f32_u32(k);
            acc[2 * v] = vaddq_f64(acc[2 * v], vcvt_f64_f32(vget_low_f32(f)));
            acc[2 * v + 1] = vaddq_f64(acc[2 * v + 1], vcvt_high_f64_f32(f));
            mxv = vmaxq_u32(mxv, k);
            vst1q_u32(bins + 4 * v, vshrq_n_u32(k, SL__SELECT_HIST_SHIFT));
        }
        if (hist != NULL)
            for (int b = 0; b < 16; b++)
                hist[bins[b]]++;
    }
    for (int q = 0; q < 8; q++)
        vst1q_f64(lanes + 2 * q, acc[q]);
    mx = hmax4(mxv);
    if (i < n) {
        uint32_t tail_max;
        sl__select_stats_scalar(x + i, n - i, lanes, &tail_max, hist);
        mx = tail_max > mx ? tail_max : mx;
    }
    *max_key = mx;
}
#define STATS_NEON stats_neon
#else
/* armv7 NEON has no double lanes; the scalar pass is the canonical sum. */
#define STATS_NEON sl__select_stats_scalar
#endif

const sl__select_kernels sl__select_neon = {
    "neon", SL_CPU_NEON, count_ge_neon, filter_ge_neon, STATS_NEON,
};

#else
typedef int sl__select_neon_unused; /* ISO C wants a declaration in every file */
#endif
