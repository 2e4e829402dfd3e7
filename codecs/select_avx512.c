/*
 * select_avx512.c - AVX-512 kernels of top-k selection (see select_int.h).
 * Compiled with AVX-512 F/BW/DQ/VL; used only when sl_cpu_features()
 * reports SL_CPU_AVX512.
 */
#include "select_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

static inline __m512i keys16(const float *p)
{
    return _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(p)),
                            _mm512_set1_epi32((int)SL__KEY_MASK));
}

/* The last n % 16 elements: masked lanes load as 0 and never match. */
static inline __mmask16 tail_mask(size_t rem)
{
    return rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1u);
}

static inline __m512i keys16_masked(const float *p, __mmask16 tm)
{
    return _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(tm, p)),
                            _mm512_set1_epi32((int)SL__KEY_MASK));
}

static size_t count_ge_avx512(const float *x, size_t n, uint32_t lo, uint32_t *max_key)
{
    const __m512i vlo = _mm512_set1_epi32((int)lo);
    __m512i mx0 = _mm512_setzero_si512(), mx1 = mx0;
    size_t i = 0, c = 0;

    for (; n - i >= 32; i += 32) {
        __m512i k0 = keys16(x + i), k1 = keys16(x + i + 16);
        c += (size_t)_mm_popcnt_u32(_mm512_cmpge_epu32_mask(k0, vlo));
        c += (size_t)_mm_popcnt_u32(_mm512_cmpge_epu32_mask(k1, vlo));
        mx0 = _mm512_max_epu32(mx0, k0);
        mx1 = _mm512_max_epu32(mx1, k1);
    }
    for (; i < n; i += 16) {
        __mmask16 tm = tail_mask(n - i);
        __m512i k = keys16_masked(x + i, tm);
        c += (size_t)_mm_popcnt_u32(_mm512_mask_cmpge_epu32_mask(tm, k, vlo));
        mx0 = _mm512_max_epu32(mx0, k);
    }
    *max_key = _mm512_reduce_max_epu32(_mm512_max_epu32(mx0, mx1));
    return c;
}

/*
 * Compress into a register and store the whole vector: on some cores
 * (AMD Zen 4) vpcompressd with a memory operand is microcoded and far
 * slower than the register form plus a plain store.
 */
static inline size_t filter_body(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                                 uint32_t *keys, uint32_t *max_key, const int with_keys)
{
    const __m512i vlo = _mm512_set1_epi32((int)lo), step = _mm512_set1_epi32(16);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i vi = iota, mxv = _mm512_setzero_si512();
    size_t i = 0, j = 0;

    while (n - i >= 64 && cap - j >= 64) {
        for (int u = 0; u < 4; u++, i += 16) {
            __m512i k = keys16(x + i);
            __mmask16 m = _mm512_cmpge_epu32_mask(k, vlo);
            mxv = _mm512_max_epu32(mxv, k);
            if (with_keys) {
                /* One compress of the lane numbers serves both outputs. */
                __m512i lane = _mm512_maskz_compress_epi32(m, iota);
                __m512i base = _mm512_set1_epi32((int)(uint32_t)i);
                _mm512_storeu_si512((void *)(idx + j), _mm512_add_epi32(lane, base));
                _mm512_storeu_si512((void *)(keys + j), _mm512_permutexvar_epi32(lane, k));
            } else {
                _mm512_storeu_si512((void *)(idx + j), _mm512_maskz_compress_epi32(m, vi));
            }
            j += (size_t)_mm_popcnt_u32(m);
            vi = _mm512_add_epi32(vi, step);
        }
    }
    /* Near the end of the room or of x: masked stores write exactly the matches. */
    for (; i < n; i += 16) {
        __mmask16 tm = tail_mask(n - i);
        __m512i k = keys16_masked(x + i, tm);
        __mmask16 m = _mm512_mask_cmpge_epu32_mask(tm, k, vlo);
        size_t pc = (size_t)_mm_popcnt_u32(m);
        mxv = _mm512_max_epu32(mxv, k);
        if (pc != 0) {
            __mmask16 sm = (__mmask16)((1u << pc) - 1u);
            if (pc > cap - j) {
                *max_key = _mm512_reduce_max_epu32(mxv);
                return cap + 1;
            }
            _mm512_mask_storeu_epi32((void *)(idx + j), sm, _mm512_maskz_compress_epi32(m, vi));
            if (with_keys)
                _mm512_mask_storeu_epi32((void *)(keys + j), sm, _mm512_maskz_compress_epi32(m, k));
            j += pc;
        }
        vi = _mm512_add_epi32(vi, step);
    }
    *max_key = _mm512_reduce_max_epu32(mxv);
    return j;
}

static size_t filter_ge_avx512(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                               uint32_t *keys, uint32_t *max_key)
{
    if (keys != NULL)
        return filter_body(x, n, lo, cap, idx, keys, max_key, 1);
    return filter_body(x, n, lo, cap, idx, NULL, max_key, 0);
}

static void stats_avx512(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES],
                         uint32_t *max_key, uint32_t *hist)
{
    /* acc0 holds the canonical lanes 0-7, acc1 lanes 8-15. */
    __m512d acc0 = _mm512_loadu_pd(lanes), acc1 = _mm512_loadu_pd(lanes + 8);
    __m512i mxv = _mm512_setzero_si512();
    uint32_t bins[16], mx;
    size_t i = 0;

    for (; n - i >= 16; i += 16) {
        __m512i k = keys16(x + i);
        __m512 f = _mm512_castsi512_ps(k);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
        mxv = _mm512_max_epu32(mxv, k);
        if (hist != NULL) {
            _mm512_storeu_si512((void *)bins, _mm512_srli_epi32(k, SL__SELECT_HIST_SHIFT));
            for (int b = 0; b < 16; b++)
                hist[bins[b]]++;
        }
    }
    _mm512_storeu_pd(lanes, acc0);
    _mm512_storeu_pd(lanes + 8, acc1);
    mx = _mm512_reduce_max_epu32(mxv);
    if (i < n) {
        /* i is a multiple of 16, so the tail keeps the canonical lanes. */
        uint32_t tail_max;
        sl__select_stats_scalar(x + i, n - i, lanes, &tail_max, hist);
        mx = tail_max > mx ? tail_max : mx;
    }
    *max_key = mx;
}

const sl__select_kernels sl__select_avx512 = {
    "avx512", SL_CPU_AVX512, count_ge_avx512, filter_ge_avx512, stats_avx512,
};

#else
typedef int sl__select_avx512_unused; /* ISO C wants a declaration in every file */
#endif
