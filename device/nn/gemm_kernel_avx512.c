/*
 * gemm_kernel_avx512.c - the AVX-512F SGEMM micro-kernels: tiles of ROWS x
 * 32 in 2 * ROWS zmm accumulators (two loads of B and ROWS broadcasts of A
 * per step of k), for 8, 6 and 4 rows; packing is the AVX2 file's.
 *
 * Why 8 x 32: on Zen 4 (double-pumped 512-bit FMAs) 6, 8, 12 and 14 rows
 * all ran 2048^2 within noise of each other (0.88-0.95 of OpenBLAS in the
 * same runs), and 8 rows divide the models' M = 16, 32, 64 exactly (cnn
 * conv2, M = 64: 0.92 with 8 rows, 0.84 with 12). Blocking MC = 144,
 * KC = 512, NC = 1024 measured best of six tried (KC 256-512, NC
 * 1024-4096), mostly through the cnn conv2 shapes (0.87 -> 0.98).
 */
#include "gemm_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

#define NR 32

#define ROW_FMA(i)                                        \
    do {                                                  \
        if ((i) < rows) {                                 \
            __m512 ai = _mm512_set1_ps(a[i]);             \
            c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0); \
            c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1); \
        }                                                 \
    } while (0)

#define ROW_STORE(i)                                                                   \
    do {                                                                               \
        if ((i) < rows) {                                                              \
            float *ci = c + (i)*ldc;                                                   \
            __m512 r0 = _mm512_mul_ps(va, c##i##_0), r1 = _mm512_mul_ps(va, c##i##_1); \
            if (beta != 0.0f) {                                                        \
                r0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), r0);                     \
                r1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), r1);                \
            }                                                                          \
            _mm512_storeu_ps(ci, r0);                                                  \
            _mm512_storeu_ps(ci + 16, r1);                                             \
        }                                                                              \
    } while (0)

#define ROWS_0_7(X) \
    X(0);           \
    X(1);           \
    X(2);           \
    X(3);           \
    X(4);           \
    X(5);           \
    X(6);           \
    X(7)

/* The kernel for @rows (a constant once inlined) rows: unused rows vanish. */
static inline __attribute__((always_inline)) void
ukernel_rows(const int rows, size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
             float *c, size_t ldc, float alpha, float beta)
{
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0;
    __m512 c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0;
    __m512 c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0;
    for (size_t p = 0; p < k; p++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        ROWS_0_7(ROW_FMA);
        a += a_step;
        b += b_step;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    ROWS_0_7(ROW_STORE);
}

static void ukernel_8x32(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(8, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

static void ukernel_6x32(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(6, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

static void ukernel_4x32(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                         float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(4, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

const sl__gemm_kernels sl__gemm_avx512 = {
    .name = "avx512",
    .features = SL_CPU_AVX512,
    .nr = NR,
    .mc = 144,
    .kc = 512,
    .nc = 1024,
    .tiles = {{8, ukernel_8x32}, {6, ukernel_6x32}, {4, ukernel_4x32}},
    .pack_copy = sl__gemm_pack_copy_avx2,
    .pack_transpose = sl__gemm_pack_transpose_avx2,
};
#else
/* Not an x86-64 SIMD build: nothing here (ISO C wants a declaration per file). */
typedef int sl__gemm_avx512_unused;
#endif
