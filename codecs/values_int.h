/*
 * values_int.h - internals of the value quantizers (values.c and the SIMD
 * variants values_{avx2,avx512,neon}.c).
 *
 * Every hot loop is a kernel in a table of function pointers. The scalar
 * table is the reference; a SIMD table gives bit-identical results for every
 * input (tests hold them to it) and may point an entry at the scalar kernel
 * where it has nothing better. Per-element helpers below are shared by the
 * scalar kernels and the SIMD tails so that both compute the same thing.
 */
#ifndef STARLING_VALUES_INT_H
#define STARLING_VALUES_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codec_int.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the value kernels assume a little-endian host"
#endif

/* partial sums of mean |v|: element i goes to sum i mod SL__LANES */
#define SL__LANES 32

typedef struct sl__values_kernels {
    const char *name;
    /* max over i of (bits(v[i]) & 0x7fffffff); >= 0x7f800000 means a NaN or Inf */
    uint32_t (*absmax_bits)(const float *v, size_t n);
    /* acc[j] += |v[i]| in double for i = j mod SL__LANES, i ascending (a fixed
     * order: every variant gives the same sums) */
    void (*abssum)(const float *v, size_t n, double acc[SL__LANES]);
    /* binary16, round to nearest even, finite values saturate at +-65504 */
    void (*to_f16)(const float *v, size_t n, uint16_t *h);
    /* from @n little-endian binary16 at @h (any alignment); returns 1 when
     * some h[i] is Inf or NaN (out is then unspecified) */
    int (*from_f16)(const uint8_t *h, size_t n, float *out);
    /* bfloat16, round to nearest even, saturating at the largest finite bf16 */
    void (*to_bf16)(const float *v, size_t n, uint16_t *h);
    int (*from_bf16)(const uint8_t *h, size_t n, float *out);
    /* q[i] = stochastic round(v[i] / scale) clamped to [-127, 127] (scale > 0) */
    void (*int8_quant)(const float *v, size_t n, float scale, uint32_t key, int8_t *q);
    /* out[i] = (float)q[i] * scale; returns bit 0 set when some q[i] is -128,
     * bit 1 set when some q[i] is not 0 */
    int (*int8_dequant)(const int8_t *q, size_t n, float scale, float *out);
    /* bit i of @bits (LSB-first) = sign bit of v[i]; ceil(n/8) bytes, padding 0 */
    void (*sign_pack)(const float *v, size_t n, uint8_t *bits);
    /* bit i = (v[i] == 0, +0 or -0); returns the number of zeros */
    size_t (*zero_pack)(const float *v, size_t n, uint8_t *bits);
    /* out[i] = zeros bit i ? +0 : (signs bit i ? -mag : +mag); @zeros may be NULL */
    void (*bits_to_floats)(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out);
    /* Append to @out the bits of @src whose @drop bit is 0, in order; @out has
     * room for ceil(n/8) + 8 bytes, the padding of its last byte is zero.
     * Returns the number of bits kept. */
    size_t (*bits_compact)(const uint8_t *src, const uint8_t *drop, size_t n, uint8_t *out);
    /* The inverse: bit i of @out = 0 where @drop is set, else the next bit of
     * @src. @src holds @src_bytes bytes; @out has room for ceil(n/8) rounded up
     * to 8 bytes. */
    void (*bits_expand)(const uint8_t *src, size_t src_bytes, const uint8_t *drop, size_t n,
                        uint8_t *out);
} sl__values_kernels;

/** The active kernel table (chosen once from sl_cpu_features()). */
const sl__values_kernels *sl__values_kernels_get(void);

/**
 * sl__values_use - for tests and benchmarks: make the variant named by the
 * highest bit of @features (SL_CPU_AVX512, SL_CPU_AVX2, SL_CPU_NEON; 0 for
 * the scalar reference) the active one for the whole process. Returns SL_OK,
 * or SL_EUNSUPPORTED when the variant is not built or the CPU lacks it. Not
 * thread-safe with concurrent encoding.
 */
int sl__values_use(unsigned features);

/** sl__values_variant - name of the active variant: "scalar", "avx2", ... */
const char *sl__values_variant(void);

/** sl__values_int8_key - the 32-bit rounding key of (seed, tensor_index). */
uint32_t sl__values_int8_key(uint64_t seed, uint32_t tensor_index);

/* The scalar reference kernels (values.c), also used by SIMD tables. */
extern const sl__values_kernels sl__values_scalar;
uint32_t sl__vs_absmax_bits(const float *v, size_t n);
void sl__vs_abssum(const float *v, size_t n, double acc[SL__LANES]);
void sl__vs_to_f16(const float *v, size_t n, uint16_t *h);
int sl__vs_from_f16(const uint8_t *h, size_t n, float *out);
void sl__vs_to_bf16(const float *v, size_t n, uint16_t *h);
int sl__vs_from_bf16(const uint8_t *h, size_t n, float *out);
void sl__vs_int8_quant(const float *v, size_t n, float scale, uint32_t key, int8_t *q);
int sl__vs_int8_dequant(const int8_t *q, size_t n, float scale, float *out);
void sl__vs_sign_pack(const float *v, size_t n, uint8_t *bits);
size_t sl__vs_zero_pack(const float *v, size_t n, uint8_t *bits);
void sl__vs_bits_to_floats(const uint8_t *signs, const uint8_t *zeros, size_t n, float mag,
                           float *out);
size_t sl__vs_bits_compact(const uint8_t *src, const uint8_t *drop, size_t n, uint8_t *out);
void sl__vs_bits_expand(const uint8_t *src, size_t src_bytes, const uint8_t *drop, size_t n,
                        uint8_t *out);

#if defined(SL_X86_SIMD)
extern const sl__values_kernels sl__values_avx2;
extern const sl__values_kernels sl__values_avx512;
/* BMI2 (pext/pdep) bit compaction, shared by the AVX2 and AVX-512 tables */
size_t sl__vx_bits_compact(const uint8_t *src, const uint8_t *drop, size_t n, uint8_t *out);
void sl__vx_bits_expand(const uint8_t *src, size_t src_bytes, const uint8_t *drop, size_t n,
                        uint8_t *out);
#endif
#if defined(SL_NEON)
extern const sl__values_kernels sl__values_neon;
#endif

/* ------------------------------------------------------------------------ */
/* Per-element helpers                                                      */
/* ------------------------------------------------------------------------ */

#define SL__F16_MAX_BITS  0x477fe000u /* 65504.0f, the largest finite binary16 */
#define SL__BF16_MAX_BITS 0x7f7fu     /* the largest finite bfloat16 */

static inline uint16_t sl__f32_to_f16(float f)
{
    uint32_t x = sl__f32_bits(f), a = x & 0x7fffffffu, e, m, r, rem, half;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);

    if (a > SL__F16_MAX_BITS) /* finite input: saturate instead of Inf */
        return (uint16_t)(sign | 0x7bffu);
    if (a >= 0x38800000u) { /* normal binary16: rebias, round 23 -> 10 mantissa bits */
        r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 itself ties to even 0) */
        return sign;
    /* subnormal binary16: units of 2^-24 */
    e = a >> 23;
    m = (a & 0x7fffffu) | 0x800000u;
    r = m >> (126u - e);
    rem = m & ((1u << (126u - e)) - 1u);
    half = 1u << (125u - e);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* binary16 -> float, exact; the caller has rejected exponent 31 */
static inline float sl__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* exact */
        return sl__bits_f32(sl__f32_bits(f) | sign);
    }
    return sl__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t sl__f32_to_bf16(float f)
{
    uint32_t x = sl__f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    if ((r & 0x7f80u) == 0x7f80u) /* rounded up to Inf */
        r = (r & 0x8000u) | SL__BF16_MAX_BITS;
    return (uint16_t)r;
}

/*
 * The counter-based generator of int8 stochastic rounding: element i of a
 * tensor draws lowbias32((uint32_t)i + key) (Wellons' 32-bit integer hash),
 * whose top 24 bits give u in [0, 1).
 */
static inline uint32_t sl__hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/*
 * One int8 draw: x = v / scale (|x| is at most about 127, the encoder makes
 * sure of it), q = floor(x) + (u < x - floor(x)), clamped to [-127, 127].
 * x - floor(x) is computed in float, as every SIMD variant does.
 */
static inline int8_t sl__int8_round(float v, float scale, uint32_t key, uint32_t i)
{
    float x = v / scale, fl, u;
    int t = (int)x; /* toward zero; exact, |x| < 2^31 */

    fl = (float)t;
    if (fl > x) {
        fl -= 1.0f;
        t--;
    }
    u = (float)(sl__hash32(i + key) >> 8) * 0x1p-24f;
    t += u < x - fl;
    t = t > 127 ? 127 : t;
    t = t < -127 ? -127 : t;
    return (int8_t)t;
}

static inline uint64_t sl__load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* bytes [0, nbytes) of @p (nbytes <= 8) as a little-endian word, rest zero */
static inline uint64_t sl__load64_partial(const uint8_t *p, size_t nbytes)
{
    uint64_t w = 0;
    memcpy(&w, p, nbytes);
    return w;
}

/* the 64-bit word of a bitmap of @n bits that starts at bit @bit (a multiple
 * of 64); the last one is partial and reads no byte past ceil(n/8) */
static inline uint64_t sl__bitmap_word(const uint8_t *bits, size_t n, size_t bit)
{
    size_t bytes = (n + 7) / 8, at = bit / 8;
    return bytes - at >= 8 ? sl__load64(bits + at) : sl__load64_partial(bits + at, bytes - at);
}

/* the bits of that word that are inside the bitmap */
static inline uint64_t sl__bitmap_valid(size_t n, size_t bit)
{
    return n - bit >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << (n - bit)) - 1;
}

/* @nbits bits of a bitmap starting at bit @pos; the map has @bytes bytes and
 * reads never pass its end (missing bits read as 0) */
static inline uint64_t sl__bits_at(const uint8_t *p, size_t bytes, size_t pos, unsigned nbits)
{
    size_t byte = pos >> 3;
    unsigned sh = (unsigned)(pos & 7);
    uint64_t lo, hi = 0;

    if (byte >= bytes)
        return 0;
    lo = bytes - byte >= 8 ? sl__load64(p + byte) : sl__load64_partial(p + byte, bytes - byte);
    if (sh && byte + 8 < bytes)
        hi = p[byte + 8];
    lo = sh ? (lo >> sh) | (hi << (64 - sh)) : lo;
    return nbits >= 64 ? lo : lo & ((UINT64_C(1) << nbits) - 1);
}

/* A little-endian bit writer for the compaction kernels. */
typedef struct sl__bitw {
    uint8_t *p;
    uint64_t acc;
    unsigned fill;
} sl__bitw;

static inline void sl__bitw_put(sl__bitw *w, uint64_t bits, unsigned nbits)
{
    if (nbits == 0)
        return;
    w->acc |= bits << w->fill;
    if (w->fill + nbits >= 64) {
        memcpy(w->p, &w->acc, 8);
        w->p += 8;
        w->acc = w->fill ? bits >> (64 - w->fill) : 0;
        w->fill = w->fill + nbits - 64;
    } else {
        w->fill += nbits;
    }
}

static inline void sl__bitw_flush(sl__bitw *w)
{
    memcpy(w->p, &w->acc, 8); /* the caller's buffer has 8 bytes of slack */
}

#endif /* STARLING_VALUES_INT_H */
