/*
 * select_scalar.c - the scalar reference kernels of top-k selection
 * (select_int.h): the bottom of the selection's layers, which the SIMD
 * kernels fall back on and select_dispatch.c chooses among.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"
#include "select_int.h"

/* ------------------------------------------------------------------------ */
/* Scalar reference kernels                                                 */
/* ------------------------------------------------------------------------ */

size_t sl__select_count_ge_scalar(const float *x, size_t n, uint32_t lo, uint32_t *max_key)
{
    size_t c = 0;
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = sl__select_key(x[i]);
        mx = key > mx ? key : mx;
        c += key >= lo;
    }
    *max_key = mx;
    return c;
}

size_t sl__select_filter_ge_scalar(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                                   uint32_t *keys, uint32_t *max_key)
{
    size_t i = 0, j = 0;
    uint32_t mx = 0;
    /* Branch-free while a whole block fits: the store at idx[j] is always
     * in bounds and is simply overwritten when the element is rejected. */
    while (n - i >= 64 && cap - j >= 64) {
        for (size_t e = i + 64; i < e; i++) {
            uint32_t key = sl__select_key(x[i]);
            mx = key > mx ? key : mx;
            idx[j] = (uint32_t)i;
            if (keys != NULL)
                keys[j] = key;
            j += key >= lo;
        }
    }
    for (; i < n; i++) {
        uint32_t key = sl__select_key(x[i]);
        mx = key > mx ? key : mx;
        if (key >= lo) {
            if (j == cap) {
                *max_key = mx;
                return cap + 1;
            }
            idx[j] = (uint32_t)i;
            if (keys != NULL)
                keys[j] = key;
            j++;
        }
    }
    *max_key = mx;
    return j;
}

void sl__select_stats_scalar(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES],
                             uint32_t *max_key, uint32_t *hist)
{
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = sl__select_key(x[i]);
        mx = key > mx ? key : mx;
        lanes[i % SL__SELECT_SUM_LANES] += (double)sl__bits_f32(key);
        if (hist != NULL)
            hist[key >> SL__SELECT_HIST_SHIFT]++;
    }
    *max_key = mx;
}

const sl__select_kernels sl__select_scalar = {
    "scalar", 0, sl__select_count_ge_scalar, sl__select_filter_ge_scalar, sl__select_stats_scalar,
};
