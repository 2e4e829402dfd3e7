/* sl_codec_test.h - shared helpers for the codec tests (header-only). */
#ifndef SL_CODEC_TEST_H
#define SL_CODEC_TEST_H

#include <math.h>
#include <zlib.h>

#include "sl_test.h"
#include "starling/codec.h"

/* A layout of the fixtures' lenet5 plus one large tensor. */
static inline sl_layout *sl_test_layout(void)
{
    static const char text[] = "c1.weight 6 1 5 5\nc1.bias 6\nc2.weight 16 6 5 5\nc2.bias 16\n"
                               "f1.weight 120 256\nf1.bias 120\nf2.weight 84 120\nf2.bias 84\n"
                               "f3.weight 10 84\nf3.bias 10\nbig 100000\n";
    sl_layout *l = NULL;
    if (sl_layout_parse(text, sizeof text - 1, &l) != SL_OK)
        abort();
    return l;
}

/* Standard normal-ish floats (sum of uniforms), scaled. */
static inline void sl_test_gauss(float *x, size_t n, uint64_t seed, float scale)
{
    seed |= 1;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < 4; j++)
            s += (double)(sl_test_rand(&seed) >> 11) / 9007199254740992.0;
        x[i] = (float)((s - 2.0) * 1.7320508 * scale);
    }
}

/* Recompute a frame's trailing CRC-32 after a test edited its bytes. */
static inline void sl_test_fix_crc(uint8_t *frame, size_t len)
{
    uLong crc = crc32(crc32(0L, Z_NULL, 0), frame, (uInt)(len - 4));
    for (int i = 0; i < 4; i++)
        frame[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
}

#endif /* SL_CODEC_TEST_H */
