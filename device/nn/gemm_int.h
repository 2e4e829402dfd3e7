/*
 * gemm_int.h - SGEMM micro-kernels (gemm.c + gemm_kernel_{avx2,avx512,neon}.c).
 * Not part of the public API; only gemm*.c and their tests include it.
 *
 * sl_nn_sgemm() is a GotoBLAS/BLIS-style driver: it blocks C over NC
 * columns, K over KC and M over MC rows, packs op(A) into MR-row slivers
 * (a[p * MR + i]) and op(B) into NR-column slivers (b[p * NR + j]), both
 * zero-padded to whole slivers, and calls a micro-kernel per MR x NR tile.
 * Small operands whose layout already matches (op(A) transposed, op(B) as
 * stored) are read in place instead, whole slivers at least. A variant is
 * its micro-kernels, blocking and packing routines; edges, the choice of
 * layout and threads are shared. Each element of C is
 *   alpha * (products summed in increasing p within each KC block) + beta * C
 * with the KC blocks added in order, so for one variant and shape the
 * result does not depend on the thread count or on what was packed.
 */
#ifndef STARLING_GEMM_INT_H
#define STARLING_GEMM_INT_H

#include <stddef.h>

#include "starling/common.h"

/* Bounds of every variant's tile (edge tiles go through a stack tile of this size). */
#define SL__GEMM_MR_MAX 16
#define SL__GEMM_NR_MAX 32

/**
 * A micro-kernel: for the MR x NR tile,
 *   acc[i][j] = sum_{p < k} a[p * a_step + i] * b[p * b_step + j]   (p increasing)
 *   c[i * ldc + j] = alpha * acc[i][j] + beta * c[i * ldc + j]
 * and with beta == 0 the tile of C is written without being read.
 * @a: a packed sliver (a_step == MR, 64-byte aligned) or op(A)^T used in
 * place (a_step == lda). @b: a packed sliver (b_step == NR, 64-byte
 * aligned) or rows of B used in place (b_step == ldb). In place, only the
 * alignment of a float is guaranteed. @k >= 1.
 */
typedef void (*sl__gemm_ukernel_fn)(size_t k, const float *a, size_t a_step, const float *b,
                                    size_t b_step, float *c, size_t ldc, float alpha, float beta);

/**
 * A packing routine: @w elements wide (w >= 1), @kb deep, into slivers of
 * @r (w rounded up to whole slivers, the padding zero): sliver s holds
 *   dst[s * r * kb + p * r + i] = X(s * r + i, p)      p < kb, i < r
 * where X(i, p) = src[p * ld + i] for pack_copy (rows of the source are
 * already along the sliver: op(A) transposed, op(B) as stored) and
 * X(i, p) = src[i * ld + p] for pack_transpose (A as stored, B transposed).
 * @dst: 64-byte aligned.
 */
typedef void (*sl__gemm_pack_fn)(float *dst, const float *src, size_t ld, size_t r, size_t w,
                                 size_t kb);

/** A micro-kernel with its number of rows (0 marks an unused entry). */
typedef struct sl__gemm_tile {
    unsigned mr;
    sl__gemm_ukernel_fn ukernel;
} sl__gemm_tile;

#define SL__GEMM_TILES 3

/*
 * A variant: micro-kernels of one width NR and several heights, the main
 * one first; the driver picks for each call the height that wastes least
 * of the tiles on the rows of C (so M = 6 or 16 are not padded to 8 or
 * 12), the same for any thread count.
 */
typedef struct sl__gemm_kernels {
    const char *name;  /* "scalar", "avx2", "avx512", "neon" */
    unsigned features; /* SL_CPU_* bit the variant needs; 0 for scalar */
    unsigned nr;       /* tile width, <= SL__GEMM_NR_MAX */
    size_t mc, kc,
        nc; /* cache blocking: mc is rounded down to the tile height, nc a multiple of nr */
    sl__gemm_tile tiles[SL__GEMM_TILES]; /* heights <= SL__GEMM_MR_MAX, decreasing */
    sl__gemm_pack_fn pack_copy, pack_transpose;
} sl__gemm_kernels;

/* The scalar reference, always built (gemm.c), and its packing routines. */
extern const sl__gemm_kernels sl__gemm_scalar;
void sl__gemm_pack_copy_scalar(float *dst, const float *src, size_t ld, size_t r, size_t w,
                               size_t kb);
void sl__gemm_pack_transpose_scalar(float *dst, const float *src, size_t ld, size_t r, size_t w,
                                    size_t kb);
#if defined(SL_X86_SIMD)
extern const sl__gemm_kernels sl__gemm_avx2;
extern const sl__gemm_kernels sl__gemm_avx512;
/* AVX2 packing (gemm_kernel_avx2.c), shared by both x86 tables. */
void sl__gemm_pack_copy_avx2(float *dst, const float *src, size_t ld, size_t r, size_t w,
                             size_t kb);
void sl__gemm_pack_transpose_avx2(float *dst, const float *src, size_t ld, size_t r, size_t w,
                                  size_t kb);
#endif
#if defined(SL_NEON)
extern const sl__gemm_kernels sl__gemm_neon;
#endif

/* ------------------------------------------------------------------------ */
/* Test hooks                                                               */
/* ------------------------------------------------------------------------ */

/** Pass to sl__gemm_use() to return to the automatic choice. */
#define SL__GEMM_AUTO 0xffffffffu

/**
 * sl__gemm_use - force the variant sl_nn_sgemm() uses, process-wide:
 * 0 = scalar, SL_CPU_AVX2, SL_CPU_AVX512 or SL_CPU_NEON = that variant,
 * SL__GEMM_AUTO = the automatic choice. Returns SL_OK, SL_EUNSUPPORTED (not
 * built, or the CPU lacks it) or SL_EINVAL (another value). For tests and
 * benchmarks; not while another thread is inside sl_nn_sgemm().
 */
int sl__gemm_use(unsigned features);

/** sl__gemm_kernels_for - the table of one variant (as sl__gemm_use()), or NULL. */
const sl__gemm_kernels *sl__gemm_kernels_for(unsigned features);

/** sl__gemm_variant - name of the variant sl_nn_sgemm() is using now. */
const char *sl__gemm_variant(void);

/** The kernel table in use (chosen once from sl_cpu_features()). */
const sl__gemm_kernels *sl__gemm_active(void);

/**
 * sl__gemm_set_thread_min_flops - smallest 2*m*n*k for which sl_nn_sgemm()
 * starts threads (so that thread start-up never dominates); returns the
 * previous value. Tests lower it to exercise threads on small shapes.
 */
double sl__gemm_set_thread_min_flops(double flops);

/**
 * sl__gemm_set_direct_max - operands of at most this many floats are read
 * in place rather than packed (when their layout allows it); returns the
 * previous value. 0 packs all but the cases where packing cannot pay,
 * SIZE_MAX uses every operand in place that can be. Results do not change.
 */
size_t sl__gemm_set_direct_max(size_t floats);

/**
 * sl__gemm_fail_allocs - fault injection: the next @count allocations of
 * packing buffers fail (sl_nn_sgemm() returns SL_ENOMEM); 0 stops it.
 */
void sl__gemm_fail_allocs(unsigned count);

#endif /* STARLING_GEMM_INT_H */
