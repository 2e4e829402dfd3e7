/*
 * values_avx2.c - AVX2 (+FMA, BMI2, F16C) value kernels. Every kernel gives
 * the bytes of its scalar reference in values.c; tails go through the same
 * per-element helpers. FMA is never used: it would change float results.
 */
#include "values_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

static uint32_t absmax_bits(const float *v, size_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    uint32_t lanes[8], m = 0;
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const void *)(v + i)), abs));
        m1 = _mm256_max_epu32(m1,
                              _mm256_and_si256(_mm256_loadu_si256((const void *)(v + i + 8)), abs));
    }
    _mm256_storeu_si256((void *)lanes, _mm256_max_epu32(m0, m1));
    for (unsigned j = 0; j < 8; j++)
        m = lanes[j] > m ? lanes[j] : m;
    for (; i < n; i++) {
        uint32_t a = sl__f32_bits(v[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

static void abssum(const float *v, size_t n, double acc[SL__LANES])
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256d a[SL__LANES / 4];
    size_t i = 0;

    for (unsigned j = 0; j < SL__LANES / 4; j++)
        a[j] = _mm256_loadu_pd(acc + 4 * j);
    for (; i + SL__LANES <= n; i += SL__LANES) {
        for (unsigned j = 0; j < SL__LANES / 8; j++) {
            __m256 x = _mm256_and_ps(_mm256_loadu_ps(v + i + 8 * j), abs);
            a[2 * j] = _mm256_add_pd(a[2 * j], _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
            a[2 * j + 1] =
                _mm256_add_pd(a[2 * j + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
        }
    }
    for (unsigned j = 0; j < SL__LANES / 4; j++)
        _mm256_storeu_pd(acc + 4 * j, a[j]);
    for (; i < n; i++)
        acc[i % SL__LANES] += (double)sl__bits_f32(sl__f32_bits(v[i]) & 0x7fffffffu);
}

static void to_f16(const float *v, size_t n, uint16_t *h)
{
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(v + i), lo), hi);
        _mm_storeu_si128((void *)(h + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        h[i] = sl__f32_to_f16(v[i]);
}

/* 1 in a 16-bit lane whose exponent field (@expo) is all ones */
static inline __m128i special16(__m128i x, __m128i expo)
{
    return _mm_cmpeq_epi16(_mm_and_si128(x, expo), expo);
}

static int from_f16(const uint8_t *h, size_t n, float *out)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    int flag;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i x = _mm_loadu_si128((const void *)(h + 2 * i));
        bad = _mm_or_si128(bad, special16(x, expo));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(x));
    }
    flag = _mm_movemask_epi8(bad) != 0;
    return flag | sl__vs_from_f16(h + 2 * i, n - i, out + i);
}

/* bf16 of 8 floats in 32-bit lanes: round to nearest even, saturate */
static inline __m256i bf16_round(__m256i x)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i expo = _mm256_set1_epi32(0x7f80), sign = _mm256_set1_epi32(0x8000);
    const __m256i fmax = _mm256_set1_epi32(SL__BF16_MAX_BITS);
    __m256i r = _mm256_add_epi32(
        x, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(x, 16), one)));
    __m256i inf;
    r = _mm256_srli_epi32(r, 16);
    inf = _mm256_cmpeq_epi32(_mm256_and_si256(r, expo), expo);
    return _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_and_si256(r, sign), fmax), inf);
}

static void to_bf16(const float *v, size_t n, uint16_t *h)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round(_mm256_loadu_si256((const void *)(v + i)));
        __m256i b = bf16_round(_mm256_loadu_si256((const void *)(v + i + 8)));
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((void *)(h + i), p);
    }
    for (; i < n; i++)
        h[i] = sl__f32_to_bf16(v[i]);
}

static int from_bf16(const uint8_t *h, size_t n, float *out)
{
    const __m128i expo = _mm_set1_epi16(0x7f80);
    __m128i bad = _mm_setzero_si128();
    int flag;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i x = _mm_loadu_si128((const void *)(h + 2 * i));
        bad = _mm_or_si128(bad, special16(x, expo));
        _mm256_storeu_si256((void *)(out + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
    }
    flag = _mm_movemask_epi8(bad) != 0;
    return flag | sl__vs_from_bf16(h + 2 * i, n - i, out + i);
}

static inline __m256i hash32x8(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* sl__int8_round of 8 lanes, as int32 in [-127, 127] */
static inline __m256i int8_round8(__m256 v, __m256 scale, __m256i ctr)
{
    __m256 x = _mm256_div_ps(v, scale);
    __m256 fl = _mm256_floor_ps(x);
    __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(hash32x8(ctr), 8)),
                             _mm256_set1_ps(0x1p-24f));
    __m256i up = _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_sub_ps(x, fl), _CMP_LT_OQ));
    __m256i t = _mm256_sub_epi32(_mm256_cvtps_epi32(fl), up);
    t = _mm256_min_epi32(t, _mm256_set1_epi32(127));
    return _mm256_max_epi32(t, _mm256_set1_epi32(-127));
}

static void int8_quant(const float *v, size_t n, float scale, uint32_t key, int8_t *q)
{
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i step = _mm256_set1_epi32(8), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i ctr =
        _mm256_add_epi32(_mm256_set1_epi32((int)key), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = int8_round8(_mm256_loadu_ps(v + i), s, ctr);
        __m256i b, c, d;
        ctr = _mm256_add_epi32(ctr, step);
        b = int8_round8(_mm256_loadu_ps(v + i + 8), s, ctr);
        ctr = _mm256_add_epi32(ctr, step);
        c = int8_round8(_mm256_loadu_ps(v + i + 16), s, ctr);
        ctr = _mm256_add_epi32(ctr, step);
        d = int8_round8(_mm256_loadu_ps(v + i + 24), s, ctr);
        ctr = _mm256_add_epi32(ctr, step);
        /* packs interleave 128-bit lanes: bytes come out as dwords a0 b0 c0 d0 a1 b1 c1 d1 */
        a = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        _mm256_storeu_si256((void *)(q + i), _mm256_permutevar8x32_epi32(a, perm));
    }
    for (; i < n; i++)
        q[i] = sl__int8_round(v[i], scale, key, (uint32_t)i);
}

static int int8_dequant(const int8_t *q, size_t n, float scale, float *out)
{
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i m128 = _mm256_set1_epi8(-128);
    __m256i any = _mm256_setzero_si256(), bad = any;
    int flags;
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i b = _mm256_loadu_si256((const void *)(q + i));
        any = _mm256_or_si256(any, b);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(b, m128));
        for (unsigned j = 0; j < 4; j++) {
            __m128i x = _mm_loadl_epi64((const void *)(q + i + 8 * j));
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
            _mm256_storeu_ps(out + i + 8 * j, _mm256_mul_ps(f, s));
        }
    }
    flags = (_mm256_movemask_epi8(bad) != 0) | (!_mm256_testz_si256(any, any) << 1);
    return flags | sl__vs_int8_dequant(q + i, n - i, scale, out + i);
}

static void sign_pack(const float *v, size_t n, uint8_t *bits)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t w = (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + i)) |
                     (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + i + 8)) << 8 |
                     (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + i + 16)) << 16 |
                     (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + i + 24)) << 24;
        memcpy(bits + i / 8, &w, 4);
    }
    sl__vs_sign_pack(v + i, n - i, bits + i / 8);
}

static size_t zero_pack(const float *v, size_t n, uint8_t *bits)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), zero = _mm256_setzero_si256();
    size_t zeros = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t w = 0;
        for (unsigned j = 0; j < 4; j++) {
            __m256i x = _mm256_and_si256(_mm256_loadu_si256((const void *)(v + i + 8 * j)), abs);
            w |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x, zero)))
                 << (8 * j);
        }
        memcpy(bits + i / 8, &w, 4);
        zeros += (size_t)_mm_popcnt_u32(w);
    }
    return zeros + sl__vs_zero_pack(v + i, n - i, bits + i / 8);
}

/* lanes j of the result are all ones where bit j of @byte is set */
static inline __m256i bits8(unsigned byte)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)byte), sel), sel);
}

static void bits_to_floats(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out)
{
    const __m256i m = _mm256_set1_epi32((int)sl__f32_bits(mag));
    const __m256i sbit = _mm256_set1_epi32((int)0x80000000u);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i r = _mm256_or_si256(m, _mm256_and_si256(bits8(signs[i / 8]), sbit));
        if (zeros != NULL)
            r = _mm256_andnot_si256(bits8(zeros[i / 8]), r);
        _mm256_storeu_si256((void *)(out + i), r);
    }
    if (i < n) /* the tail starts at a byte boundary */
        sl__vs_bits_to_floats(signs + i / 8, zeros ? zeros + i / 8 : NULL, n - i, mag, out + i);
}

size_t sl__vx_bits_compact(const uint8_t *src, const uint8_t *drop, size_t n, uint8_t *out)
{
    sl__bitw w = {out, 0, 0};
    size_t kept = 0;
    for (size_t bit = 0; bit < n; bit += 64) {
        uint64_t valid = sl__bitmap_valid(n, bit), keep = ~sl__bitmap_word(drop, n, bit) & valid;
        uint64_t s = sl__bitmap_word(src, n, bit);
        unsigned c = (unsigned)_mm_popcnt_u64(keep);
        /* pext is microcoded (slow) on AMD before Zen 3: skip it for words without drops */
        sl__bitw_put(&w, keep == valid ? s & valid : _pext_u64(s, keep), c);
        kept += c;
    }
    sl__bitw_flush(&w);
    return kept;
}

void sl__vx_bits_expand(const uint8_t *src, size_t src_bytes, const uint8_t *drop, size_t n,
                        uint8_t *out)
{
    size_t pos = 0;
    for (size_t bit = 0; bit < n; bit += 64) {
        uint64_t valid = sl__bitmap_valid(n, bit), keep = ~sl__bitmap_word(drop, n, bit) & valid;
        unsigned c = (unsigned)_mm_popcnt_u64(keep);
        uint64_t s = sl__bits_at(src, src_bytes, pos, c);
        uint64_t r = keep == valid ? s : _pdep_u64(s, keep);
        memcpy(out + bit / 8, &r, 8);
        pos += c;
    }
}

/* clang-format off */
const sl__values_kernels sl__values_avx2 = {
    "avx2", absmax_bits, abssum, to_f16, from_f16, to_bf16, from_bf16, int8_quant, int8_dequant,
    sign_pack, zero_pack, bits_to_floats, sl__vx_bits_compact, sl__vx_bits_expand,
};
/* clang-format on */

#endif /* SL_X86_SIMD */
