/*
 * gemm_kernel_avx2.c - the AVX2+FMA SGEMM micro-kernels, 6 x 16 and for
 * short M 4 x 16 and 2 x 16: two loads of B and a broadcast of A per row
 * feed two FMAs per row and step of k; 6 x 16 uses twelve ymm accumulators
 * (15 of the 16 registers), the most that fit. Also the packing routines
 * of both x86 variants.
 *
 * Blocking MC = 144, KC = 512, NC = 1024: against the textbook 144/256/
 * 4080 it took 2048^2 from 0.81-0.85 to 0.96-1.00 of OpenBLAS and cnn
 * conv2 from 0.76-0.79 to 0.90-0.94 (Zen 4, 1 MiB L2).
 */
#include "gemm_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

#define NR 16

/* One row of the tile: its two accumulators take a[i] * b[0..16). */
#define ROW_FMA(i)                                        \
    do {                                                  \
        if ((i) < rows) {                                 \
            __m256 ai = _mm256_broadcast_ss(a + (i));     \
            c##i##_0 = _mm256_fmadd_ps(ai, b0, c##i##_0); \
            c##i##_1 = _mm256_fmadd_ps(ai, b1, c##i##_1); \
        }                                                 \
    } while (0)

#define ROW_STORE(i)                                                                   \
    do {                                                                               \
        if ((i) < rows) {                                                              \
            float *ci = c + (i)*ldc;                                                   \
            __m256 r0 = _mm256_mul_ps(va, c##i##_0), r1 = _mm256_mul_ps(va, c##i##_1); \
            if (beta != 0.0f) {                                                        \
                r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), r0);                     \
                r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), r1);                 \
            }                                                                          \
            _mm256_storeu_ps(ci, r0);                                                  \
            _mm256_storeu_ps(ci + 8, r1);                                              \
        }                                                                              \
    } while (0)

#define ROWS_0_5(X) \
    X(0);           \
    X(1);           \
    X(2);           \
    X(3);           \
    X(4);           \
    X(5)

/* The kernel for @rows (a constant once inlined) rows: unused rows vanish. */
static inline __attribute__((always_inline)) void
ukernel_rows(const int rows, size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
             float *c, size_t ldc, float alpha, float beta)
{
    __m256 c0_0 = _mm256_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0;
    __m256 c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0;
    __m256 c5_1 = c0_0;
    for (size_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        ROWS_0_5(ROW_FMA);
        a += a_step;
        b += b_step;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    ROWS_0_5(ROW_STORE);
}

static void ukernel_6x16(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(6, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

static void ukernel_4x16(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(4, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

static void ukernel_2x16(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(2, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

/* ------------------------------------------------------------------------ */
/* Packing (gemm_int.h: sl__gemm_pack_fn), also used by the AVX-512 table   */
/* ------------------------------------------------------------------------ */

/* The first @n (0..8) lanes set. */
static __m256i lanes(size_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void sl__gemm_pack_copy_avx2(float *dst, const float *src, size_t ld, size_t r, size_t w, size_t kb)
{
    for (size_t s = 0; s < w; s += r, src += r) {
        size_t cols = w - s < r ? w - s : r;
        if (cols == r && r % 8 == 0) {
            for (size_t p = 0; p < kb; p++, dst += r)
                for (size_t i = 0; i < r; i += 8)
                    _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + p * ld + i));
            continue;
        }
        for (size_t p = 0; p < kb; p++, dst += r) {
            const float *row = src + p * ld;
            for (size_t i = 0; i < r; i += 8) {
                size_t valid = cols > i ? (cols - i < 8 ? cols - i : 8) : 0;
                __m256 v = _mm256_maskload_ps(row + i, lanes(valid));
                if (r - i >= 8)
                    _mm256_storeu_ps(dst + i, v);
                else
                    _mm256_maskstore_ps(dst + i, lanes(r - i), v);
            }
        }
    }
}

/* Four rows of eight into eight columns of four: column q to out + q * step;
 * only the first @width (1..4) floats of each column are stored. */
static void transpose_4x8(__m256 x0, __m256 x1, __m256 x2, __m256 x3, float *out, size_t step,
                          size_t width)
{
    __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1);
    __m256 t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3);
    __m256 u[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                   _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};
    if (width == 4) {
        for (int q = 0; q < 4; q++) {
            _mm_storeu_ps(out + q * step, _mm256_castps256_ps128(u[q]));
            _mm_storeu_ps(out + (q + 4) * step, _mm256_extractf128_ps(u[q], 1));
        }
    } else {
        __m128i m = _mm256_castsi256_si128(lanes(width));
        for (int q = 0; q < 4; q++) {
            _mm_maskstore_ps(out + q * step, m, _mm256_castps256_ps128(u[q]));
            _mm_maskstore_ps(out + (q + 4) * step, m, _mm256_extractf128_ps(u[q], 1));
        }
    }
}

/* Eight rows of eight (x[q] = row q at @src + q * ld) into eight columns of
 * eight: column c to out + c * step. */
static inline __attribute__((always_inline)) void transpose_8x8(const float *src, size_t ld,
                                                                float *out, size_t step)
{
    __m256 t[8], u[8];
    for (int q = 0; q < 8; q += 2) {
        __m256 x0 = _mm256_loadu_ps(src + q * ld), x1 = _mm256_loadu_ps(src + (q + 1) * ld);
        t[q] = _mm256_unpacklo_ps(x0, x1);
        t[q + 1] = _mm256_unpackhi_ps(x0, x1);
    }
    for (int q = 0; q < 8; q += 4) {
        u[q] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(out + c * step, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
        _mm256_storeu_ps(out + (c + 4) * step, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
    }
}

void sl__gemm_pack_transpose_avx2(float *dst, const float *src, size_t ld, size_t r, size_t w,
                                  size_t kb)
{
    const __m256 zero = _mm256_setzero_ps();
    for (size_t s = 0; s < w; s += r, dst += r * kb) {
        size_t rows = w - s < r ? w - s : r;
        size_t i = 0;
        /* Whole groups of eight rows of the source, then groups of four
         * where rows past its end read as zeros. */
        for (; i + 8 <= rows && i + 8 <= r; i += 8) {
            const float *x = src + (s + i) * ld;
            size_t p = 0;
            for (; p + 8 <= kb; p += 8)
                transpose_8x8(x + p, ld, dst + p * r + i, r);
            for (; p < kb; p++)
                for (size_t q = 0; q < 8; q++)
                    dst[p * r + i + q] = x[q * ld + p];
        }
        for (; i < r; i += 4) {
            size_t live = rows > i ? (rows - i < 4 ? rows - i : 4) : 0;
            size_t width = r - i < 4 ? r - i : 4, p = 0;
            const float *x = live > 0 ? src + (s + i) * ld : src;
            for (; p + 8 <= kb; p += 8) {
                __m256 x0 = live > 0 ? _mm256_loadu_ps(x + p) : zero;
                __m256 x1 = live > 1 ? _mm256_loadu_ps(x + ld + p) : zero;
                __m256 x2 = live > 2 ? _mm256_loadu_ps(x + 2 * ld + p) : zero;
                __m256 x3 = live > 3 ? _mm256_loadu_ps(x + 3 * ld + p) : zero;
                transpose_4x8(x0, x1, x2, x3, dst + p * r + i, r, width);
            }
            for (; p < kb; p++)
                for (size_t q = 0; q < width; q++)
                    dst[p * r + i + q] = q < live ? x[q * ld + p] : 0.0f;
        }
    }
}

const sl__gemm_kernels sl__gemm_avx2 = {
    .name = "avx2",
    .features = SL_CPU_AVX2,
    .nr = NR,
    .mc = 144,
    .kc = 512,
    .nc = 1024,
    .tiles = {{6, ukernel_6x16}, {4, ukernel_4x16}, {2, ukernel_2x16}},
    .pack_copy = sl__gemm_pack_copy_avx2,
    .pack_transpose = sl__gemm_pack_transpose_avx2,
};
#else
/* Not an x86-64 SIMD build: nothing here (ISO C wants a declaration per file). */
typedef int sl__gemm_avx2_unused;
#endif
