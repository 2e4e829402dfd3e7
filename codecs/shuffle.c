/* shuffle.c - byte-plane transposition so that Zstandard sees like bytes together. */
#include "codec_int.h"

/*
 * Element sizes 2 and 4 (halves and floats) have vector paths: SSE2, which
 * every x86-64 has, so no run-time choice is needed, and NEON's
 * de-interleaving loads. They move the same bytes as the scalar loops, which
 * handle the other sizes and the tails.
 */
#if defined(SL_X86_SIMD)
#include <emmintrin.h>

/* the low half of each 32-bit (16-bit) lane, sign-extended so that packs keeps it exactly */
#define LO32(v) _mm_srai_epi32(_mm_slli_epi32((v), 16), 16)
#define LO16(v) _mm_srai_epi16(_mm_slli_epi16((v), 8), 8)

static size_t shuffle4_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8_t *s = src + 4 * i;
        __m128i v0 = _mm_loadu_si128((const void *)s), v1 = _mm_loadu_si128((const void *)(s + 16));
        __m128i v2 = _mm_loadu_si128((const void *)(s + 32)),
                v3 = _mm_loadu_si128((const void *)(s + 48));
        /* 16-bit halves of the 16 elements (sign-extended, so packs is exact) */
        __m128i l0 = _mm_packs_epi32(LO32(v0), LO32(v1)), l1 = _mm_packs_epi32(LO32(v2), LO32(v3));
        __m128i h0 = _mm_packs_epi32(_mm_srai_epi32(v0, 16), _mm_srai_epi32(v1, 16));
        __m128i h1 = _mm_packs_epi32(_mm_srai_epi32(v2, 16), _mm_srai_epi32(v3, 16));
        _mm_storeu_si128((void *)(dst + i), _mm_packs_epi16(LO16(l0), LO16(l1)));
        _mm_storeu_si128((void *)(dst + n + i),
                         _mm_packs_epi16(_mm_srai_epi16(l0, 8), _mm_srai_epi16(l1, 8)));
        _mm_storeu_si128((void *)(dst + 2 * n + i), _mm_packs_epi16(LO16(h0), LO16(h1)));
        _mm_storeu_si128((void *)(dst + 3 * n + i),
                         _mm_packs_epi16(_mm_srai_epi16(h0, 8), _mm_srai_epi16(h1, 8)));
    }
    return i;
}

static size_t unshuffle4_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const void *)(src + i));
        __m128i b = _mm_loadu_si128((const void *)(src + n + i));
        __m128i c = _mm_loadu_si128((const void *)(src + 2 * n + i));
        __m128i d = _mm_loadu_si128((const void *)(src + 3 * n + i));
        __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
        uint8_t *o = dst + 4 * i;
        _mm_storeu_si128((void *)o, _mm_unpacklo_epi16(ab0, cd0));
        _mm_storeu_si128((void *)(o + 16), _mm_unpackhi_epi16(ab0, cd0));
        _mm_storeu_si128((void *)(o + 32), _mm_unpacklo_epi16(ab1, cd1));
        _mm_storeu_si128((void *)(o + 48), _mm_unpackhi_epi16(ab1, cd1));
    }
    return i;
}

static size_t shuffle2_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i w0 = _mm_loadu_si128((const void *)(src + 2 * i));
        __m128i w1 = _mm_loadu_si128((const void *)(src + 2 * i + 16));
        _mm_storeu_si128((void *)(dst + i), _mm_packs_epi16(LO16(w0), LO16(w1)));
        _mm_storeu_si128((void *)(dst + n + i),
                         _mm_packs_epi16(_mm_srai_epi16(w0, 8), _mm_srai_epi16(w1, 8)));
    }
    return i;
}

static size_t unshuffle2_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const void *)(src + i));
        __m128i b = _mm_loadu_si128((const void *)(src + n + i));
        _mm_storeu_si128((void *)(dst + 2 * i), _mm_unpacklo_epi8(a, b));
        _mm_storeu_si128((void *)(dst + 2 * i + 16), _mm_unpackhi_epi8(a, b));
    }
    return i;
}
#elif defined(SL_NEON)
#include <arm_neon.h>

static size_t shuffle4_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16x4_t v = vld4q_u8(src + 4 * i);
        vst1q_u8(dst + i, v.val[0]);
        vst1q_u8(dst + n + i, v.val[1]);
        vst1q_u8(dst + 2 * n + i, v.val[2]);
        vst1q_u8(dst + 3 * n + i, v.val[3]);
    }
    return i;
}

static size_t unshuffle4_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16x4_t v;
        v.val[0] = vld1q_u8(src + i);
        v.val[1] = vld1q_u8(src + n + i);
        v.val[2] = vld1q_u8(src + 2 * n + i);
        v.val[3] = vld1q_u8(src + 3 * n + i);
        vst4q_u8(dst + 4 * i, v);
    }
    return i;
}

static size_t shuffle2_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16x2_t v = vld2q_u8(src + 2 * i);
        vst1q_u8(dst + i, v.val[0]);
        vst1q_u8(dst + n + i, v.val[1]);
    }
    return i;
}

static size_t unshuffle2_simd(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16x2_t v;
        v.val[0] = vld1q_u8(src + i);
        v.val[1] = vld1q_u8(src + n + i);
        vst2q_u8(dst + 2 * i, v);
    }
    return i;
}
#else
#define shuffle4_simd(src, n, dst)   ((void)(src), (void)(dst), (size_t)0)
#define unshuffle4_simd(src, n, dst) ((void)(src), (void)(dst), (size_t)0)
#define shuffle2_simd(src, n, dst)   ((void)(src), (void)(dst), (size_t)0)
#define unshuffle2_simd(src, n, dst) ((void)(src), (void)(dst), (size_t)0)
#endif

void sl__shuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst)
{
    if (size == 4) { /* the common case: fp32; four planes in one pass */
        uint8_t *p0 = dst, *p1 = dst + n, *p2 = dst + 2 * n, *p3 = dst + 3 * n;
        for (size_t i = shuffle4_simd(src, n, dst); i < n; i++) {
            p0[i] = src[4 * i];
            p1[i] = src[4 * i + 1];
            p2[i] = src[4 * i + 2];
            p3[i] = src[4 * i + 3];
        }
        return;
    }
    if (size == 2) {
        for (size_t i = shuffle2_simd(src, n, dst); i < n; i++) {
            dst[i] = src[2 * i];
            dst[n + i] = src[2 * i + 1];
        }
        return;
    }
    for (size_t b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++)
            dst[b * n + i] = src[i * size + b];
}

void sl__unshuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst)
{
    if (size == 4) {
        const uint8_t *p0 = src, *p1 = src + n, *p2 = src + 2 * n, *p3 = src + 3 * n;
        for (size_t i = unshuffle4_simd(src, n, dst); i < n; i++) {
            dst[4 * i] = p0[i];
            dst[4 * i + 1] = p1[i];
            dst[4 * i + 2] = p2[i];
            dst[4 * i + 3] = p3[i];
        }
        return;
    }
    if (size == 2) {
        for (size_t i = unshuffle2_simd(src, n, dst); i < n; i++) {
            dst[2 * i] = src[i];
            dst[2 * i + 1] = src[n + i];
        }
        return;
    }
    for (size_t b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++)
            dst[i * size + b] = src[b * n + i];
}
