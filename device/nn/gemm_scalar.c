/*
 * gemm_scalar.c - the scalar reference micro-kernel and the scalar packing
 * of sl_nn_sgemm() (gemm_int.h): the bottom of its layers, which the SIMD
 * kernels' tables use for packing and gemm.c chooses among.
 */
#include <stddef.h>

#include "gemm_int.h"

static size_t min_size(size_t x, size_t y)
{
    return x < y ? x : y;
}

/* ------------------------------------------------------------------------ */
/* Scalar reference micro-kernel                                            */
/* ------------------------------------------------------------------------ */

#define SCALAR_MR 4
#define SCALAR_NR 8

static void ukernel_scalar(size_t k, const float *a, size_t a_step, const float *b, size_t b_step,
                           float *c, size_t ldc, float alpha, float beta)
{
    float acc[SCALAR_MR][SCALAR_NR] = {{0}};
    for (size_t p = 0; p < k; p++) {
        for (int i = 0; i < SCALAR_MR; i++)
            for (int j = 0; j < SCALAR_NR; j++)
                acc[i][j] += a[i] * b[j];
        a += a_step;
        b += b_step;
    }
    for (int i = 0; i < SCALAR_MR; i++) {
        float *row = c + (size_t)i * ldc;
        for (int j = 0; j < SCALAR_NR; j++)
            row[j] = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * row[j];
    }
}

const sl__gemm_kernels sl__gemm_scalar = {
    .name = "scalar",
    .features = 0,
    .nr = SCALAR_NR,
    .mc = 128,
    .kc = 256,
    .nc = 2048,
    .tiles = {{SCALAR_MR, ukernel_scalar}},
    .pack_copy = sl__gemm_pack_copy_scalar,
    .pack_transpose = sl__gemm_pack_transpose_scalar,
};

void sl__gemm_pack_copy_scalar(float *dst, const float *src, size_t ld, size_t r, size_t w,
                               size_t kb)
{
    for (size_t s = 0; s < w; s += r, src += r) {
        size_t cols = min_size(r, w - s);
        for (size_t p = 0; p < kb; p++, dst += r) {
            const float *row = src + p * ld;
            size_t i = 0;
            for (; i < cols; i++)
                dst[i] = row[i];
            for (; i < r; i++)
                dst[i] = 0.0f;
        }
    }
}

void sl__gemm_pack_transpose_scalar(float *dst, const float *src, size_t ld, size_t r, size_t w,
                                    size_t kb)
{
    for (size_t s = 0; s < w; s += r, dst += r * kb) {
        size_t rows = min_size(r, w - s);
        for (size_t i = 0; i < r; i++) {
            const float *col = src + (s + i) * ld;
            if (i < rows)
                for (size_t p = 0; p < kb; p++)
                    dst[p * r + i] = col[p];
            else
                for (size_t p = 0; p < kb; p++)
                    dst[p * r + i] = 0.0f;
        }
    }
}
