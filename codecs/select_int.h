/*
 * select_int.h - kernels of top-k selection (select.c + select_{avx2,avx512,neon}.c).
 * Not part of the public API; only select*.c and their tests include it.
 *
 * Every kernel works on magnitude keys: key(x) = bits(x) & 0x7fffffff, so
 * keys compare like |x| and a key >= SL__KEY_NONFINITE is NaN or Inf. A
 * variant only changes speed: all variants return the same integers (and
 * the same canonical double sum), so sl_select() gives the same indices
 * whichever table is active.
 */
#ifndef STARLING_SELECT_INT_H
#define STARLING_SELECT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "codec_int.h"

#define SL__KEY_MASK      0x7fffffffu
#define SL__KEY_NONFINITE 0x7f800000u /* smallest key of Inf/NaN */

/* RedSync's histogram: one bin per key >> SL__SELECT_HIST_SHIFT. */
#define SL__SELECT_HIST_SHIFT 16
#define SL__SELECT_HIST_BINS  (1u << (31 - SL__SELECT_HIST_SHIFT))

/* The canonical sum has this many double lanes: element i is added to
 * lane i % 16 in increasing i, then the lanes are folded by
 * sl__select_fold_lanes(). Any SIMD width that divides 16 can follow it. */
#define SL__SELECT_SUM_LANES 16

typedef struct sl__select_kernels {
    const char *name;  /* "scalar", "avx2", "avx512", "neon" */
    unsigned features; /* SL_CPU_* bit the variant needs; 0 for scalar */

    /* Number of i < n with key(x[i]) >= lo; *max_key receives the largest
     * key (0 when n == 0). */
    size_t (*count_ge)(const float *x, size_t n, uint32_t lo, uint32_t *max_key);

    /* For each i < n in increasing order with key(x[i]) >= lo: idx[j] = i
     * and, when @keys is not NULL, keys[j] = key(x[i]). Never writes at or
     * past idx[cap] / keys[cap]. Returns the number of matches; when there
     * are more than @cap it stops and returns cap + 1 (then *max_key covers
     * only the part scanned). @cap < SIZE_MAX. */
    size_t (*filter_ge)(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                        uint32_t *keys, uint32_t *max_key);

    /* RedSync's statistics: lanes[] += |x[i]| in the canonical lane order
     * (lanes start as the caller set them), *max_key = largest key, and
     * unless @hist is NULL hist[key >> SL__SELECT_HIST_SHIFT] += 1
     * (SL__SELECT_HIST_BINS bins). */
    void (*stats)(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES], uint32_t *max_key,
                  uint32_t *hist);
} sl__select_kernels;

/* The scalar reference, always built. Its pieces may be reused by a SIMD
 * table for a kernel that variant does not speed up. */
extern const sl__select_kernels sl__select_scalar;
size_t sl__select_count_ge_scalar(const float *x, size_t n, uint32_t lo, uint32_t *max_key);
size_t sl__select_filter_ge_scalar(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                                   uint32_t *keys, uint32_t *max_key);
void sl__select_stats_scalar(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES],
                             uint32_t *max_key, uint32_t *hist);

#if defined(SL_X86_SIMD)
extern const sl__select_kernels sl__select_avx2;
extern const sl__select_kernels sl__select_avx512;
#endif
#if defined(SL_NEON)
extern const sl__select_kernels sl__select_neon;
#endif

/** Fold the 16 canonical lanes: j + j+8, then + j+4, + j+2, + j+1. */
static inline double sl__select_fold_lanes(const double lanes[SL__SELECT_SUM_LANES])
{
    double t[8];
    for (int j = 0; j < 8; j++)
        t[j] = lanes[j] + lanes[j + 8];
    for (int j = 0; j < 4; j++)
        t[j] = t[j] + t[j + 4];
    for (int j = 0; j < 2; j++)
        t[j] = t[j] + t[j + 2];
    return t[0] + t[1];
}

/* ------------------------------------------------------------------------ */
/* Test hooks                                                               */
/* ------------------------------------------------------------------------ */

/** Pass to sl__select_use() to return to the automatic choice. */
#define SL__SELECT_AUTO 0xffffffffu

/**
 * sl__select_use - force the kernel table sl_select() uses, process-wide:
 * 0 = scalar, SL_CPU_AVX2, SL_CPU_AVX512 or SL_CPU_NEON = that variant,
 * SL__SELECT_AUTO = the best one sl_cpu_features() allows. Returns SL_OK,
 * SL_EUNSUPPORTED (not built, or the CPU lacks it) or SL_EINVAL (another
 * value). For tests and benchmarks; not to be called while another thread
 * is inside sl_select() if results must come from one named variant.
 */
int sl__select_use(unsigned features);

/** sl__select_kernels_for - the table for one variant (as sl__select_use()), or NULL. */
const sl__select_kernels *sl__select_kernels_for(unsigned features);

/** sl__select_variant - name of the table sl_select() is using now. */
const char *sl__select_variant(void);

/** The magnitude key of a float: its bit pattern without the sign. */
static inline uint32_t sl__select_key(float f)
{
    return sl__f32_bits(f) & SL__KEY_MASK;
}

/** The kernel table in use (chosen once from sl_cpu_features()). */
const sl__select_kernels *sl__select_active(void);

#endif /* STARLING_SELECT_INT_H */
