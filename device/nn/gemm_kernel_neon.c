/*
 * gemm_kernel_neon.c - the NEON SGEMM micro-kernels, tiles of ROWS x 8 in
 * 2 * ROWS q-register accumulators: per step of k two loads of B, the
 * rows' values of A in q registers, and a multiply-add by lane per row and
 * half. aarch64 (32 registers) runs 8 x 8 and 4 x 8, armv7 (16) 4 x 8.
 * armv7's -mfpu=neon has no fused multiply-add: vmlaq there, vfmaq on
 * aarch64. Packing uses the scalar routines (it is a small share of the
 * time and the compiler vectorises them).
 */
#include "gemm_int.h"

#if defined(SL_NEON)
#include <arm_neon.h>

#define NR 8

#if defined(__aarch64__)
#define ROWS_MAX             8
#define FMA_LANE(c, b, v, l) vfmaq_laneq_f32(c, b, v, l)
#else
#define ROWS_MAX 4
#define FMA_LANE(c, b, v, l) \
    vmlaq_lane_f32(c, b, (l) < 2 ? vget_low_f32(v) : vget_high_f32(v), (l)&1)
#endif

#define ROW_FMA(i, v, l)                             \
    do {                                             \
        if ((i) < rows) {                            \
            c##i##_0 = FMA_LANE(c##i##_0, b0, v, l); \
            c##i##_1 = FMA_LANE(c##i##_1, b1, v, l); \
        }                                            \
    } while (0)

#define ROW_STORE(i)                                                                          \
    do {                                                                                      \
        if ((i) < rows) {                                                                     \
            float *ci = c + (i)*ldc;                                                          \
            float32x4_t r0 = vmulq_n_f32(c##i##_0, alpha), r1 = vmulq_n_f32(c##i##_1, alpha); \
            if (beta != 0.0f) {                                                               \
                r0 = vmlaq_n_f32(r0, vld1q_f32(ci), beta);                                    \
                r1 = vmlaq_n_f32(r1, vld1q_f32(ci + 4), beta);                                \
            }                                                                                 \
            vst1q_f32(ci, r0);                                                                \
            vst1q_f32(ci + 4, r1);                                                            \
        }                                                                                     \
    } while (0)

/* The kernel for @rows (a constant once inlined, <= ROWS_MAX) rows. */
static inline __attribute__((always_inline)) void
ukernel_rows(const int rows, size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
             float *c, size_t ldc, float alpha, float beta)
{
    float32x4_t c0_0 = vdupq_n_f32(0.0f), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0;
    float32x4_t c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0;
#if ROWS_MAX > 4
    float32x4_t c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0, c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0;
    float32x4_t c7_0 = c0_0, c7_1 = c0_0;
#endif
    for (size_t p = 0; p < k; p++) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        float32x4_t a0 = vld1q_f32(a);
        ROW_FMA(0, a0, 0);
        ROW_FMA(1, a0, 1);
        ROW_FMA(2, a0, 2);
        ROW_FMA(3, a0, 3);
#if ROWS_MAX > 4
        if (rows > 4) {
            float32x4_t a1 = vld1q_f32(a + 4);
            ROW_FMA(4, a1, 0);
            ROW_FMA(5, a1, 1);
            ROW_FMA(6, a1, 2);
            ROW_FMA(7, a1, 3);
        }
#endif
        a += a_step;
        b += b_step;
    }
    ROW_STORE(0);
    ROW_STORE(1);
    ROW_STORE(2);
    ROW_STORE(3);
#if ROWS_MAX > 4
    ROW_STORE(4);
    ROW_STORE(5);
    ROW_STORE(6);
    ROW_STORE(7);
#endif
}

static void ukernel_4x8(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                        float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(4, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}

#if ROWS_MAX > 4
static void ukernel_8x8(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                        float *c, size_t ldc, float alpha, float beta)
{
    ukernel_rows(8, k, a, a_step, b, b_step, c, ldc, alpha, beta);
}
#define NEON_TILES         \
    {                      \
        {8, ukernel_8x8},  \
        {                  \
            4, ukernel_4x8 \
        }                  \
    }
#else
#define NEON_TILES         \
    {                      \
        {                  \
            4, ukernel_4x8 \
        }                  \
    }
#endif

const sl__gemm_kernels sl__gemm_neon = {
    .name = "neon",
    .features = SL_CPU_NEON,
    .nr = NR,
    .mc = 128,
    .kc = 256,
    .nc = 2048,
    .tiles = NEON_TILES,
    .pack_copy = sl__gemm_pack_copy_scalar,
    .pack_transpose = sl__gemm_pack_transpose_scalar,
};
#else
/* Not an arm build: nothing here (ISO C wants a declaration in every file). */
typedef int sl__gemm_neon_unused;
#endif
