/*
 * positions_int.h - helpers shared by the position coders (positions.c,
 * positions_adaptive.c). Private to codecs/.
 */
#ifndef STARLING_POSITIONS_INT_H
#define STARLING_POSITIONS_INT_H

#include "codec_int.h"

/* ------------------------------------------------------------------------ */
/* Bit helpers                                                              */
/* ------------------------------------------------------------------------ */

static inline unsigned ctz64(uint64_t x)
{
    return (unsigned)__builtin_ctzll(x); /* x != 0 */
}

static inline unsigned ilog2_64(uint64_t x)
{
    return 63u - (unsigned)__builtin_clzll(x); /* x != 0 */
}

static inline unsigned popcount64(uint64_t x)
{
    /* SWAR: no libgcc call on targets built without a popcount instruction */
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

static inline uint64_t load64le(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
#endif
}

static inline void store32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* ADAPTIVE coding (positions_adaptive.c). With @out NULL only the size is
 * computed into *@bytes. The indices are already checked. */
int sl__pos_adaptive_encode(const uint32_t *idx, size_t n, uint64_t d, sl__buf *out, size_t *bytes);
/* Decode @n indices < @d from exactly @len bytes (FORMAT.md, ADAPTIVE). */
int sl__pos_adaptive_decode(const uint8_t *p, size_t len, size_t n, uint64_t d, uint32_t *idx);

#endif /* STARLING_POSITIONS_INT_H */
