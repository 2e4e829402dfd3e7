/*
 * select_dispatch.c - the run-time choice of top-k selection's kernel table
 * (select_int.h), above the scalar and SIMD kernels it chooses among.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"
#include "select_int.h"

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
