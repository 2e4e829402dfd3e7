/*
 * values_avx512.c - AVX-512 (F/BW/DQ/VL) value kernels, bit-identical to
 * the scalar reference in values.c. Bit compaction uses the BMI2 kernels of
 * values_avx2.c.
 */
#include "values_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

static uint32_t absmax_bits(const float *v, size_t n)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    uint32_t m;
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(v + i), abs));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(v + i + 16), abs));
    }
    m = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
    for (; i < n; i++) {
        uint32_t a = sl__f32_bits(v[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

static void abssum(const float *v, size_t n, double acc[SL__LANES])
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512d a[SL__LANES / 8];
    size_t i = 0;

    for (unsigned j = 0; j < SL__LANES / 8; j++)
        a[j] = _mm512_loadu_pd(acc + 8 * j);
    for (; i + SL__LANES <= n; i += SL__LANES) {
        for (unsigned j = 0; j < SL__LANES / 16; j++) {
            __m512 x =
                _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(v + i + 16 * j), abs));
            __m256 lo = _mm512_castps512_ps256(x);
            __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
            a[2 * j] = _mm512_add_pd(a[2 * j], _mm512_cvtps_pd(lo));
            a[2 * j + 1] = _mm512_add_pd(a[2 * j + 1], _mm512_cvtps_pd(hi));
        }
    }
    for (unsigned j = 0; j < SL__LANES / 8; j++)
        _mm512_storeu_pd(acc + 8 * j, a[j]);
    for (; i < n; i++)
        acc[i % SL__LANES] += (double)sl__bits_f32(sl__f32_bits(v[i]) & 0x7fffffffu);
}

static void to_f16(const float *v, size_t n, uint16_t *h)
{
    const __m512 hi = _mm512_set1_ps(65504.0f), lo = _mm512_set1_ps(-65504.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(v + i), lo), hi);
        _mm256_storeu_si256((void *)(h + i),
                            _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        h[i] = sl__f32_to_f16(v[i]);
}

static int from_f16(const uint8_t *h, size_t n, float *out)
{
    const __m256i expo = _mm256_set1_epi16(0x7c00);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_loadu_si256((const void *)(h + 2 * i));
        bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(x, expo), expo);
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(x));
    }
    return (bad != 0) | sl__vs_from_f16(h + 2 * i, n - i, out + i);
}

static void to_bf16(const float *v, size_t n, uint16_t *h)
{
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i expo = _mm512_set1_epi32(0x7f80), sign = _mm512_set1_epi32(0x8000);
    const __m512i fmax = _mm512_set1_epi32(SL__BF16_MAX_BITS);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(v + i), r;
        __mmask16 inf;
        r = _mm512_add_epi32(
            x, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(x, 16), one)));
        r = _mm512_srli_epi32(r, 16);
        inf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, expo), expo);
        r = _mm512_mask_or_epi32(r, inf, _mm512_and_si512(r, sign), fmax);
        _mm256_storeu_si256((void *)(h + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++)
        h[i] = sl__f32_to_bf16(v[i]);
}

static int from_bf16(const uint8_t *h, size_t n, float *out)
{
    const __m256i expo = _mm256_set1_epi16(0x7f80);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_loadu_si256((const void *)(h + 2 * i));
        bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(x, expo), expo);
        _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    }
    return (bad != 0) | sl__vs_from_bf16(h + 2 * i, n - i, out + i);
}

static inline __m512i hash32x16(__m512i x)
{
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

static void int8_quant(const float *v, size_t n, float scale, uint32_t key, int8_t *q)
{
    const __m512 s = _mm512_set1_ps(scale), ulp = _mm512_set1_ps(0x1p-24f);
    const __m512i one = _mm512_set1_epi32(1), step = _mm512_set1_epi32(16);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    __m512i ctr =
        _mm512_add_epi32(_mm512_set1_epi32((int)key),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_div_ps(_mm512_loadu_ps(v + i), s);
        __m512 fl = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(hash32x16(ctr), 8)), ulp);
        __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_sub_ps(x, fl), _CMP_LT_OQ);
        __m512i t = _mm512_cvtps_epi32(fl);
        t = _mm512_mask_add_epi32(t, up, t, one);
        t = _mm512_max_epi32(_mm512_min_epi32(t, hi), lo);
        _mm_storeu_si128((void *)(q + i), _mm512_cvtepi32_epi8(t));
        ctr = _mm512_add_epi32(ctr, step);
    }
    for (; i < n; i++)
        q[i] = sl__int8_round(v[i], scale, key, (uint32_t)i);
}

static int int8_dequant(const int8_t *q, size_t n, float scale, float *out)
{
    const __m512 s = _mm512_set1_ps(scale);
    const __m128i m128 = _mm_set1_epi8(-128);
    __m128i any = _mm_setzero_si128();
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const void *)(q + i));
        any = _mm_or_si128(any, b);
        bad |= _mm_cmpeq_epi8_mask(b, m128);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s));
    }
    return ((bad != 0) | (!_mm_testz_si128(any, any) << 1)) |
           sl__vs_int8_dequant(q + i, n - i, scale, out + i);
}

static void sign_pack(const float *v, size_t n, uint8_t *bits)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t w = _mm512_movepi32_mask(_mm512_loadu_si512(v + i));
        memcpy(bits + i / 8, &w, 2);
    }
    sl__vs_sign_pack(v + i, n - i, bits + i / 8);
}

static size_t zero_pack(const float *v, size_t n, uint8_t *bits)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    size_t zeros = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t w = _mm512_testn_epi32_mask(_mm512_loadu_si512(v + i), abs);
        memcpy(bits + i / 8, &w, 2);
        zeros += (size_t)_mm_popcnt_u32(w);
    }
    return zeros + sl__vs_zero_pack(v + i, n - i, bits + i / 8);
}

static void bits_to_floats(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out)
{
    const __m512i m = _mm512_set1_epi32((int)sl__f32_bits(mag));
    const __m512i sbit = _mm512_set1_epi32((int)0x80000000u);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t s, z = 0;
        __m512i r;
        memcpy(&s, signs + i / 8, 2);
        if (zeros != NULL)
            memcpy(&z, zeros + i / 8, 2);
        r = _mm512_mask_or_epi32(m, s, m, sbit);
        _mm512_storeu_si512(out + i, _mm512_maskz_mov_epi32((__mmask16)~z, r));
    }
    if (i < n)
        sl__vs_bits_to_floats(signs + i / 8, zeros ? zeros + i / 8 : NULL, n - i, mag, out + i);
}

/* clang-format off */
const sl__values_kernels sl__values_avx512 = {
    "avx512", absmax_bits, abssum, to_f16, from_f16, to_bf16, from_bf16, int8_quant, int8_dequant,
    sign_pack, zero_pack, bits_to_floats, sl__vx_bits_compact, sl__vx_bits_expand,
};
/* clang-format on */

#endif /* SL_X86_SIMD */
