/* shuffle.c - byte-plane transposition so that Zstandard sees like bytes together. */
#include "codec_int.h"

void sl__shuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst)
{
    if (size == 4) { /* the common case: fp32; four planes in one pass */
        uint8_t *p0 = dst, *p1 = dst + n, *p2 = dst + 2 * n, *p3 = dst + 3 * n;
        for (size_t i = 0; i < n; i++) {
            p0[i] = src[4 * i];
            p1[i] = src[4 * i + 1];
            p2[i] = src[4 * i + 2];
            p3[i] = src[4 * i + 3];
        }
        return;
    }
    for (size_t b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++)
            dst[b * n + i] = src[i * size + b];
}

void sl__unshuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst)
{
    if (size == 4) {
        const uint8_t *p0 = src, *p1 = src + n, *p2 = src + 2 * n, *p3 = src + 3 * n;
        for (size_t i = 0; i < n; i++) {
            dst[4 * i] = p0[i];
            dst[4 * i + 1] = p1[i];
            dst[4 * i + 2] = p2[i];
            dst[4 * i + 3] = p3[i];
        }
        return;
    }
    for (size_t b = 0; b < size; b++)
        for (size_t i = 0; i < n; i++)
            dst[i * size + b] = src[b * n + i];
}
