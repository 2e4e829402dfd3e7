/*
 * elementwise.c - the run-time choice of the element-wise kernels' table
 * (bias and ReLU, pooling, SGD, direct single-channel convolution; nn_int.h),
 * above the scalar reference (elementwise_scalar.c) and the SIMD variants.
 *
 * The scalar code fixes the order of every floating-point operation; the
 * SIMD variants follow it so that results are bit-identical except where
 * nn_int.h says "within rounding" (the convolution sums, which use FMA).
 */
#include <stdatomic.h>
#include <string.h>

#include "nn_int.h"

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static _Atomic(const sl__nn_ew_kernels *) active_kernels;

/* Best first; the scalar table needs nothing, so it always qualifies. */
static const sl__nn_ew_kernels *const all_kernels[] = {
#if defined(SL_X86_SIMD)
    &sl__nn_ew_avx512,
    &sl__nn_ew_avx2,
#endif
#if defined(SL_NEON)
    &sl__nn_ew_neon,
#endif
    &sl__nn_ew_scalar,
};

const sl__nn_ew_kernels *sl__nn_ew_kernels_for(unsigned features)
{
    unsigned have = sl_cpu_features();
    for (size_t i = 0; i < sizeof all_kernels / sizeof all_kernels[0]; i++) {
        const sl__nn_ew_kernels *t = all_kernels[i];
        if ((t->features & have) == t->features &&
            (features == SL__NN_EW_AUTO || features == t->features))
            return t;
    }
    return NULL;
}

int sl__nn_elementwise_use(unsigned features)
{
    const sl__nn_ew_kernels *t;
    if (features != SL__NN_EW_AUTO && features != 0 && features != SL_CPU_AVX2 &&
        features != SL_CPU_AVX512 && features != SL_CPU_NEON)
        return SL_EINVAL;
    t = sl__nn_ew_kernels_for(features);
    if (t == NULL)
        return SL_EUNSUPPORTED;
    atomic_store_explicit(&active_kernels, t, memory_order_release);
    return SL_OK;
}

const sl__nn_ew_kernels *sl__nn_ew(void)
{
    const sl__nn_ew_kernels *t = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (t == NULL) {
        const sl__nn_ew_kernels *none = NULL;
        t = sl__nn_ew_kernels_for(SL__NN_EW_AUTO);
        /* A forced choice (sl__nn_elementwise_use) that raced with us wins. */
        if (!atomic_compare_exchange_strong(&active_kernels, &none, t))
            t = none;
    }
    return t;
}
