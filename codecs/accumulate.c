/* accumulate.c - sparse scatter-add into a dense accumulator. */
#include "codec_int.h"

/*
 * The indices are strictly ascending and unique (the decoder checked), so
 * the stores never alias and the accesses move forward through memory.
 * Built with ISO C's -ffp-contract=off: w * v + d is rounded twice on every
 * platform, so the coordinator's aggregate has the same bits everywhere.
 */
void sl__scatter_add(float *dst, const uint32_t *idx, const float *val, size_t n, float w)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        dst[idx[i]] += w * val[i];
        dst[idx[i + 1]] += w * val[i + 1];
        dst[idx[i + 2]] += w * val[i + 2];
        dst[idx[i + 3]] += w * val[i + 3];
    }
    for (; i < n; i++)
        dst[idx[i]] += w * val[i];
}
