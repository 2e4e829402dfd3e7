/*
 * select_scalar.c - the scalar reference kernels of top-k selection and the
 * run-time choice of the kernel table (select_int.h).
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

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static _Atomic(const sl__select_kernels *) active_kernels;

/* Best first; the scalar table needs nothing, so it always qualifies. */
static const sl__select_kernels *const all_kernels[] = {
#if defined(SL_X86_SIMD)
    &sl__select_avx512,
    &sl__select_avx2,
#endif
#if defined(SL_NEON)
    &sl__select_neon,
#endif
    &sl__select_scalar,
};

const sl__select_kernels *sl__select_kernels_for(unsigned features)
{
    unsigned have = sl_cpu_features();
    for (size_t i = 0; i < sizeof all_kernels / sizeof all_kernels[0]; i++) {
        const sl__select_kernels *t = all_kernels[i];
        if ((t->features & have) == t->features &&
            (features == SL__SELECT_AUTO || features == t->features))
            return t;
    }
    return NULL;
}

int sl__select_use(unsigned features)
{
    const sl__select_kernels *t;
    if (features != SL__SELECT_AUTO && features != 0 && features != SL_CPU_AVX2 &&
        features != SL_CPU_AVX512 && features != SL_CPU_NEON)
        return SL_EINVAL;
    t = sl__select_kernels_for(features);
    if (t == NULL)
        return SL_EUNSUPPORTED;
    atomic_store_explicit(&active_kernels, t, memory_order_release);
    return SL_OK;
}

const sl__select_kernels *sl__select_active(void)
{
    const sl__select_kernels *t = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (t == NULL) {
        const sl__select_kernels *none = NULL;
        t = sl__select_kernels_for(SL__SELECT_AUTO);
        /* A forced choice (sl__select_use) that raced with us wins. */
        if (!atomic_compare_exchange_strong(&active_kernels, &none, t))
            t = none;
    }
    return t;
}

const char *sl__select_variant(void)
{
    return sl__select_active()->name;
}
