/*
 * values_neon.c - NEON value kernels, bit-identical to the scalar reference
 * in values.c.
 *
 * armv7 NEON flushes denormals to zero in every float operation, unlike the
 * VFP that scalar code uses, so there only the integer kernels (bf16, bit
 * packing, max |v|) are vectorized; float arithmetic stays scalar. aarch64
 * NEON is IEEE (FPCR.FZ is off on Linux) and runs everything.
 */
#include "values_int.h"

#if defined(SL_NEON)
#include <arm_neon.h>

static uint32_t hmax_u32(uint32x4_t x)
{
#if defined(__aarch64__)
    return vmaxvq_u32(x);
#else
    uint32x2_t m = vpmax_u32(vget_low_u32(x), vget_high_u32(x));
    m = vpmax_u32(m, m);
    return vget_lane_u32(m, 0);
#endif
}

static uint32_t hadd_u32(uint32x4_t x)
{
#if defined(__aarch64__)
    return vaddvq_u32(x);
#else
    uint32x2_t s = vpadd_u32(vget_low_u32(x), vget_high_u32(x));
    s = vpadd_u32(s, s);
    return vget_lane_u32(s, 0);
#endif
}

static uint32_t absmax_bits(const float *v, size_t n)
{
    const uint32x4_t abs = vdupq_n_u32(0x7fffffffu);
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0;
    uint32_t m;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        m0 = vmaxq_u32(m0, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(v + i)), abs));
        m1 = vmaxq_u32(m1, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(v + i + 4)), abs));
    }
    m = hmax_u32(vmaxq_u32(m0, m1));
    for (; i < n; i++) {
        uint32_t a = sl__f32_bits(v[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* 16 bits: bit j = lane j's low bit, from four vectors of 0/1 lanes */
static uint32_t gather16(uint32x4_t a, uint32x4_t b, uint32x4_t c, uint32x4_t d)
{
    const int32_t sh[4] = {0, 1, 2, 3};
    int32x4_t s = vld1q_s32(sh);
    uint32x4_t r = vshlq_u32(a, s);
    r = vorrq_u32(r, vshlq_u32(b, vaddq_s32(s, vdupq_n_s32(4))));
    r = vorrq_u32(r, vshlq_u32(c, vaddq_s32(s, vdupq_n_s32(8))));
    r = vorrq_u32(r, vshlq_u32(d, vaddq_s32(s, vdupq_n_s32(12))));
    return hadd_u32(r);
}

static void sign_pack(const float *v, size_t n, uint8_t *bits)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t w =
            (uint16_t)gather16(vshrq_n_u32(vreinterpretq_u32_f32(vld1q_f32(v + i)), 31),
                               vshrq_n_u32(vreinterpretq_u32_f32(vld1q_f32(v + i + 4)), 31),
                               vshrq_n_u32(vreinterpretq_u32_f32(vld1q_f32(v + i + 8)), 31),
                               vshrq_n_u32(vreinterpretq_u32_f32(vld1q_f32(v + i + 12)), 31));
        memcpy(bits + i / 8, &w, 2);
    }
    sl__vs_sign_pack(v + i, n - i, bits + i / 8);
}

static uint32x4_t zero01(const float *v)
{
    uint32x4_t a = vandq_u32(vreinterpretq_u32_f32(vld1q_f32(v)), vdupq_n_u32(0x7fffffffu));
    return vshrq_n_u32(vceqq_u32(a, vdupq_n_u32(0)), 31);
}

static size_t zero_pack(const float *v, size_t n, uint8_t *bits)
{
    size_t zeros = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t w = (uint16_t)gather16(zero01(v + i), zero01(v + i + 4), zero01(v + i + 8),
                                        zero01(v + i + 12));
        memcpy(bits + i / 8, &w, 2);
        zeros += (size_t)__builtin_popcount(w);
    }
    return zeros + sl__vs_zero_pack(v + i, n - i, bits + i / 8);
}

/* all ones in lane j where bit (j + @first) of @byte is set */
static uint32x4_t bits4(unsigned byte, unsigned first)
{
    const uint32_t sel[4] = {1, 2, 4, 8};
    return vtstq_u32(vdupq_n_u32(byte >> first), vld1q_u32(sel));
}

static void bits_to_floats(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out)
{
    const uint32x4_t m = vdupq_n_u32(sl__f32_bits(mag)), sbit = vdupq_n_u32(0x80000000u);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (unsigned h = 0; h < 2; h++) {
            uint32x4_t r = vorrq_u32(m, vandq_u32(bits4(signs[i / 8], 4 * h), sbit));
            if (zeros != NULL)
                r = vbicq_u32(r, bits4(zeros[i / 8], 4 * h));
            vst1q_f32(out + i + 4 * h, vreinterpretq_f32_u32(r));
        }
    }
    if (i < n)
        sl__vs_bits_to_floats(signs + i / 8, zeros ? zeros + i / 8 : NULL, n - i, mag, out + i);
}

static uint16x4_t bf16_round(const float *v)
{
    uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(v));
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(x, vaddq_u32(vdupq_n_u32(0x7fffu), lsb)), 16);
    uint32x4_t expo = vdupq_n_u32(0x7f80u);
    uint32x4_t inf = vceqq_u32(vandq_u32(r, expo), expo);
    uint32x4_t sat = vorrq_u32(vandq_u32(r, vdupq_n_u32(0x8000u)), vdupq_n_u32(SL__BF16_MAX_BITS));
    return vmovn_u32(vbslq_u32(inf, sat, r));
}

static void to_bf16(const float *v, size_t n, uint16_t *h)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        vst1q_u16(h + i, vcombine_u16(bf16_round(v + i), bf16_round(v + i + 4)));
    for (; i < n; i++)
        h[i] = sl__f32_to_bf16(v[i]);
}

/* 8 little-endian 16-bit values at any alignment */
static uint16x8_t load8x16(const uint8_t *p)
{
    return vreinterpretq_u16_u8(vld1q_u8(p));
}

static uint16x8_t special16(uint16x8_t x, uint16_t expo)
{
    uint16x8_t e = vdupq_n_u16(expo);
    return vceqq_u16(vandq_u16(x, e), e);
}

static int any16(uint16x8_t m)
{
    uint32x4_t w = vreinterpretq_u32_u16(m);
    return hmax_u32(w) != 0;
}

static int from_bf16(const uint8_t *h, size_t n, float *out)
{
    uint16x8_t bad = vdupq_n_u16(0);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t x = load8x16(h + 2 * i);
        bad = vorrq_u16(bad, special16(x, 0x7f80u));
        vst1q_f32(out + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(x), 16)));
        vst1q_f32(out + i + 4, vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(x), 16)));
    }
    return any16(bad) | sl__vs_from_bf16(h + 2 * i, n - i, out + i);
}

#if defined(__aarch64__)
static void abssum(const float *v, size_t n, double acc[SL__LANES])
{
    float64x2_t a[SL__LANES / 2];
    size_t i = 0;

    for (unsigned j = 0; j < SL__LANES / 2; j++)
        a[j] = vld1q_f64(acc + 2 * j);
    for (; i + SL__LANES <= n; i += SL__LANES) {
        for (unsigned j = 0; j < SL__LANES / 4; j++) {
            float32x4_t x = vabsq_f32(vld1q_f32(v + i + 4 * j));
            a[2 * j] = vaddq_f64(a[2 * j], vcvt_f64_f32(vget_low_f32(x)));
            a[2 * j + 1] = vaddq_f64(a[2 * j + 1], vcvt_high_f64_f32(x));
        }
    }
    for (unsigned j = 0; j < SL__LANES / 2; j++)
        vst1q_f64(acc + 2 * j, a[j]);
    for (; i < n; i++)
        acc[i % SL__LANES] += (double)sl__bits_f32(sl__f32_bits(v[i]) & 0x7fffffffu);
}

static void to_f16(const float *v, size_t n, uint16_t *h)
{
    const float32x4_t hi = vdupq_n_f32(65504.0f), lo = vdupq_n_f32(-65504.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t x = vminq_f32(vmaxq_f32(vld1q_f32(v + i), lo), hi);
        vst1_u16(h + i, vreinterpret_u16_f16(vcvt_f16_f32(x)));
    }
    for (; i < n; i++)
        h[i] = sl__f32_to_f16(v[i]);
}

static int from_f16(const uint8_t *h, size_t n, float *out)
{
    uint16x8_t bad = vdupq_n_u16(0);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t x = load8x16(h + 2 * i);
        bad = vorrq_u16(bad, special16(x, 0x7c00u));
        vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(x))));
        vst1q_f32(out + i + 4, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(x))));
    }
    return any16(bad) | sl__vs_from_f16(h + 2 * i, n - i, out + i);
}

static uint32x4_t hash32x4(uint32x4_t x)
{
    x = veorq_u32(x, vshrq_n_u32(x, 16));
    x = vmulq_u32(x, vdupq_n_u32(0x7feb352du));
    x = veorq_u32(x, vshrq_n_u32(x, 15));
    x = vmulq_u32(x, vdupq_n_u32(0x846ca68bu));
    return veorq_u32(x, vshrq_n_u32(x, 16));
}

static int32x4_t int8_round4(float32x4_t v, float32x4_t scale, uint32x4_t ctr)
{
    float32x4_t x = vdivq_f32(v, scale), fl = vrndmq_f32(x);
    float32x4_t u = vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(hash32x4(ctr), 8)), vdupq_n_f32(0x1p-24f));
    uint32x4_t up = vcltq_f32(u, vsubq_f32(x, fl));
    int32x4_t t = vsubq_s32(vcvtq_s32_f32(fl), vreinterpretq_s32_u32(up));
    return vmaxq_s32(vminq_s32(t, vdupq_n_s32(127)), vdupq_n_s32(-127));
}

static void int8_quant(const float *v, size_t n, float scale, uint32_t key, int8_t *q)
{
    const float32x4_t s = vdupq_n_f32(scale);
    const uint32_t first[4] = {0, 1, 2, 3};
    uint32x4_t ctr = vaddq_u32(vdupq_n_u32(key), vld1q_u32(first)), step = vdupq_n_u32(4);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int32x4_t a = int8_round4(vld1q_f32(v + i), s, ctr);
        int32x4_t b = int8_round4(vld1q_f32(v + i + 4), s, vaddq_u32(ctr, step));
        ctr = vaddq_u32(ctr, vaddq_u32(step, step));
        vst1_s8(q + i, vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))));
    }
    for (; i < n; i++)
        q[i] = sl__int8_round(v[i], scale, key, (uint32_t)i);
}

static int int8_dequant(const int8_t *q, size_t n, float scale, float *out)
{
    const float32x4_t s = vdupq_n_f32(scale);
    int8x16_t any = vdupq_n_s8(0);
    uint8x16_t bad = vdupq_n_u8(0);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        int8x16_t b = vld1q_s8(q + i);
        int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_s8(vget_high_s8(b));
        any = vorrq_s8(any, b);
        bad = vorrq_u8(bad, vceqq_s8(b, vdupq_n_s8(-128)));
        vst1q_f32(out + i, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s));
        vst1q_f32(out + i + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), s));
        vst1q_f32(out + i + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s));
        vst1q_f32(out + i + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), s));
    }
    return ((vmaxvq_u8(bad) != 0) | ((vmaxvq_u8(vreinterpretq_u8_s8(any)) != 0) << 1)) |
           sl__vs_int8_dequant(q + i, n - i, scale, out + i);
}
#else /* armv7: float arithmetic stays on the VFP */
#define abssum       sl__vs_abssum
#define to_f16       sl__vs_to_f16
#define from_f16     sl__vs_from_f16
#define int8_quant   sl__vs_int8_quant
#define int8_dequant sl__vs_int8_dequant
#endif

/* clang-format off */
const sl__values_kernels sl__values_neon = {
    "neon", absmax_bits, abssum, to_f16, from_f16, to_bf16, from_bf16, int8_quant, int8_dequant,
    sign_pack, zero_pack, bits_to_floats, sl__vs_bits_compact, sl__vs_bits_expand,
};
/* clang-format on */

#endif /* SL_NEON */
