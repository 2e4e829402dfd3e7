/*
 * values_scalar.c - the scalar reference kernels of the value sections
 * (values_int.h): the bottom of their layers, which the SIMD kernels fall
 * back on and values.c chooses among.
 */
#include <float.h>
#include <stdlib.h>

#include "values_int.h"

/* ------------------------------------------------------------------------ */
/* Scalar reference kernels                                                 */
/* ------------------------------------------------------------------------ */

uint32_t sl__vs_absmax_bits(const float *v, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = sl__f32_bits(v[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

void sl__vs_abssum(const float *v, size_t n, double acc[SL__LANES])
{
    size_t i = 0;
    for (; i + SL__LANES <= n; i += SL__LANES) /* each sum still adds in order of i */
        for (size_t j = 0; j < SL__LANES; j++)
            acc[j] += (double)sl__bits_f32(sl__f32_bits(v[i + j]) & 0x7fffffffu);
    for (; i < n; i++)
        acc[i % SL__LANES] += (double)sl__bits_f32(sl__f32_bits(v[i]) & 0x7fffffffu);
}

void sl__vs_to_f16(const float *v, size_t n, uint16_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = sl__f32_to_f16(v[i]);
}

int sl__vs_from_f16(const uint8_t *h, size_t n, float *out)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t x = (uint16_t)(h[2 * i] | (h[2 * i + 1] << 8));
        bad |= (x & 0x7c00u) == 0x7c00u;
        out[i] = sl__f16_to_f32(x);
    }
    return bad;
}

void sl__vs_to_bf16(const float *v, size_t n, uint16_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = sl__f32_to_bf16(v[i]);
}

int sl__vs_from_bf16(const uint8_t *h, size_t n, float *out)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)h[2 * i] | ((uint32_t)h[2 * i + 1] << 8);
        bad |= (x & 0x7f80u) == 0x7f80u;
        out[i] = sl__bits_f32(x << 16);
    }
    return bad;
}

void sl__vs_int8_quant(const float *v, size_t n, float scale, uint32_t key, int8_t *q)
{
    for (size_t i = 0; i < n; i++)
        q[i] = sl__int8_round(v[i], scale, key, (uint32_t)i);
}

int sl__vs_int8_dequant(const int8_t *q, size_t n, float scale, float *out)
{
    int flags = 0;
    for (size_t i = 0; i < n; i++) {
        flags |= (q[i] == -128) | ((q[i] != 0) << 1);
        out[i] = (float)q[i] * scale;
    }
    return flags;
}

void sl__vs_sign_pack(const float *v, size_t n, uint8_t *bits)
{
    for (size_t i = 0; i < n; i += 8) {
        unsigned b = 0;
        for (size_t j = 0; j < 8 && i + j < n; j++)
            b |= (sl__f32_bits(v[i + j]) >> 31) << j;
        bits[i >> 3] = (uint8_t)b;
    }
}

size_t sl__vs_zero_pack(const float *v, size_t n, uint8_t *bits)
{
    size_t zeros = 0;
    for (size_t i = 0; i < n; i += 8) {
        unsigned b = 0;
        for (size_t j = 0; j < 8 && i + j < n; j++) {
            unsigned z = (sl__f32_bits(v[i + j]) & 0x7fffffffu) == 0;
            b |= z << j;
            zeros += z;
        }
        bits[i >> 3] = (uint8_t)b;
    }
    return zeros;
}

void sl__vs_bits_to_floats(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out)
{
    uint32_t m = sl__f32_bits(mag);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = (signs[i >> 3] >> (i & 7)) & 1u;
        uint32_t z = zeros ? (zeros[i >> 3] >> (i & 7)) & 1u : 0;
        out[i] = sl__bits_f32(z ? 0 : m | (s << 31));
    }
}

size_t sl__vs_bits_compact(const uint8_t *src, const uint8_t *drop, size_t n, uint8_t *out)
{
    sl__bitw w = {out, 0, 0};
    size_t kept = 0;
    for (size_t bit = 0; bit < n; bit += 64) {
        uint64_t valid = sl__bitmap_valid(n, bit), keep = ~sl__bitmap_word(drop, n, bit) & valid;
        uint64_t s = sl__bitmap_word(src, n, bit), r = 0;
        unsigned c = (unsigned)__builtin_popcountll(keep), k = 0;
        if (keep == valid) {
            r = s & valid;
        } else {
            for (; keep; keep &= keep - 1, k++) /* software pext */
                r |= ((s & keep & (0 - keep)) != 0 ? UINT64_C(1) : 0) << k;
        }
        sl__bitw_put(&w, r, c);
        kept += c;
    }
    sl__bitw_flush(&w);
    return kept;
}

void sl__vs_bits_expand(const uint8_t *src, size_t src_bytes, const uint8_t *drop, size_t n,
                        uint8_t *out)
{
    size_t pos = 0;
    for (size_t bit = 0; bit < n; bit += 64) {
        uint64_t keep = ~sl__bitmap_word(drop, n, bit) & sl__bitmap_valid(n, bit), r = 0;
        unsigned c = (unsigned)__builtin_popcountll(keep);
        uint64_t s = sl__bits_at(src, src_bytes, pos, c);
        for (; keep; keep &= keep - 1, s >>= 1) /* software pdep */
            r |= (s & 1) ? keep & (0 - keep) : 0;
        memcpy(out + bit / 8, &r, 8);
        pos += c;
    }
}

/* clang-format off */
const sl__values_kernels sl__values_scalar = {
    "scalar", sl__vs_absmax_bits, sl__vs_abssum, sl__vs_to_f16, sl__vs_from_f16, sl__vs_to_bf16,
    sl__vs_from_bf16, sl__vs_int8_quant, sl__vs_int8_dequant, sl__vs_sign_pack, sl__vs_zero_pack,
    sl__vs_bits_to_floats, sl__vs_bits_compact, sl__vs_bits_expand,
};
/* clang-format on */
