/*
 * values.c - value sections: fp32, fp16, bf16, int8, ternary and sign
 * quantizers (byte format in FORMAT.md, "Value sections") and the choice of
 * SIMD variant (the scalar reference kernels: values_scalar.c).
 *
 * The encoder computes @recon by running the decoder's own kernel on the
 * bytes it is about to write, so the error-feedback residual subtracts
 * exactly what the receiver adds. Reductions whose result is stored (mean
 * |v|) run in one fixed order in every variant; max |v| is order-free.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "values_int.h"

/* Below this many raw bytes the encoder stores without trying Zstandard: a
 * zstd frame costs at least 13 bytes of headers and checksum. */
#define ZSTD_MIN_BYTES 64

#define TAG_RAW        0
#define TAG_ZSTD       1

/* ------------------------------------------------------------------------ */
/* Variant choice                                                           */
/* ------------------------------------------------------------------------ */

static _Atomic(const sl__values_kernels *) active_kernels;

static const sl__values_kernels *variant_for(unsigned features)
{
#if defined(SL_X86_SIMD)
    if (features & SL_CPU_AVX512)
        return &sl__values_avx512;
    if (features & SL_CPU_AVX2)
        return &sl__values_avx2;
#endif
#if defined(SL_NEON)
    if (features & SL_CPU_NEON)
        return &sl__values_neon;
#endif
    (void)features;
    return &sl__values_scalar;
}

const sl__values_kernels *sl__values_kernels_get(void)
{
    const sl__values_kernels *k = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (k == NULL) { /* racing first calls all store the same table */
        k = variant_for(sl_cpu_features());
        atomic_store_explicit(&active_kernels, k, memory_order_release);
    }
    return k;
}

int sl__values_use(unsigned features)
{
    unsigned want = features & SL_CPU_AVX512 ? SL_CPU_AVX512
                    : features & SL_CPU_AVX2 ? SL_CPU_AVX2
                    : features & SL_CPU_NEON ? SL_CPU_NEON
                                             : 0;
    const sl__values_kernels *k = variant_for(want);

    if (want != 0 && (!(sl_cpu_features() & want) || k == &sl__values_scalar))
        return SL_EUNSUPPORTED;
    atomic_store_explicit(&active_kernels, k, memory_order_release);
    return SL_OK;
}

const char *sl__values_variant(void)
{
    return sl__values_kernels_get()->name;
}

/* ------------------------------------------------------------------------ */
/* Modes                                                                    */
/* ------------------------------------------------------------------------ */

static const char *const mode_names[] = {"fp32", "fp16", "bf16", "int8", "ternary", "sign"};
#define MODE_COUNT (sizeof mode_names / sizeof mode_names[0])

const char *sl_value_mode_name(sl_value_mode mode)
{
    return (unsigned)mode < MODE_COUNT ? mode_names[mode] : "?";
}

int sl_value_mode_parse(const char *name, sl_value_mode *out)
{
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    for (unsigned i = 0; i < MODE_COUNT; i++) {
        if (strcmp(name, mode_names[i]) == 0) {
            *out = (sl_value_mode)i;
            return SL_OK;
        }
    }
    return SL_EINVAL;
}

static uint64_t mix64(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15); /* splitmix64 */
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint32_t sl__values_int8_key(uint64_t seed, uint32_t tensor_index)
{
    return (uint32_t)(mix64(mix64(seed) ^ tensor_index) >> 32);
}

/* ------------------------------------------------------------------------ */
/* Encoder                                                                  */
/* ------------------------------------------------------------------------ */

static int is_finite_f32(float f)
{
    return (sl__f32_bits(f) & 0x7f800000u) != 0x7f800000u;
}

/* mean |v| in double, summed in the fixed order of abssum then a pairwise
 * tree; SL_ENONFINITE when some v is NaN or Inf (a sum of finite floats
 * cannot overflow a double) */
static int mean_abs(const sl__values_kernels *k, const float *v, size_t n, float *mean)
{
    double acc[SL__LANES] = {0}, sum, m;
    k->abssum(v, n, acc);
    for (unsigned w = SL__LANES / 2; w > 0; w /= 2)
        for (unsigned j = 0; j < w; j++)
            acc[j] += acc[j + w];
    sum = acc[0];
    if (!(sum <= DBL_MAX))
        return SL_ENONFINITE;
    m = sum / (double)n;
    *mean = m > FLT_MAX ? FLT_MAX : (float)m;
    return SL_OK;
}

/* tag, then @raw stored or its byte planes through Zstandard, whichever is smaller */
int sl__coded_put(const void *raw, size_t len, size_t size, int level, sl__buf *out)
{
    size_t tag_at = out->len;
    int rc;

    if (len >= ZSTD_MIN_BYTES) {
        uint8_t *planes = NULL;
        const void *src = raw;
        if (size > 1) {
            planes = malloc(len);
            if (planes == NULL)
                return SL_ENOMEM;
            sl__shuffle(raw, len / size, size, planes);
            src = planes;
        }
        rc = sl__buf_put_u8(out, TAG_ZSTD);
        if (rc == SL_OK)
            rc = sl__zstd_append(src, len, level, out);
        free(planes);
        if (rc != SL_OK || out->len - tag_at - 1 < len)
            return rc;
        out->len = tag_at; /* not smaller: store */
    }
    rc = sl__buf_put_u8(out, TAG_RAW);
    return rc != SL_OK ? rc : sl__buf_append(out, raw, len);
}

static int encode_fp32(const sl__values_kernels *k, const float *v, size_t n, int level,
                       sl__buf *out, float *recon)
{
    int rc;
    if (k->absmax_bits(v, n) >= 0x7f800000u)
        return SL_ENONFINITE;
    rc = sl__coded_put(v, n * 4, 4, level, out);
    if (rc == SL_OK && recon != NULL && recon != v)
        memcpy(recon, v, n * 4);
    return rc;
}

static int encode_half(const sl__values_kernels *k, sl_value_mode mode, const float *v, size_t n,
                       int level, sl__buf *out, float *recon)
{
    uint16_t *h;
    int rc;

    if (k->absmax_bits(v, n) >= 0x7f800000u)
        return SL_ENONFINITE;
    h = malloc(n * 2);
    if (h == NULL)
        return SL_ENOMEM;
    (mode == SL_VALUE_FP16 ? k->to_f16 : k->to_bf16)(v, n, h);
    rc = sl__coded_put(h, n * 2, 2, level, out);
    if (rc == SL_OK && recon != NULL)
        (void)(mode == SL_VALUE_FP16 ? k->from_f16 : k->from_bf16)((const uint8_t *)h, n, recon);
    free(h);
    return rc;
}

/*
 * scale = max|v| / 127, nudged by an ulp so that 127 * scale >= max|v| (no
 * clamping error beyond one step) yet finite (no decoded value overflows).
 */
static float int8_scale(float amax)
{
    float scale = amax / 127.0f;
    if (amax == 0.0f)
        return 0.0f;
    if (scale * 127.0f < amax)
        scale = sl__bits_f32(sl__f32_bits(scale) + 1);
    while (!is_finite_f32(scale * 127.0f))
        scale = sl__bits_f32(sl__f32_bits(scale) - 1);
    return scale;
}

static int encode_int8(const sl__values_kernels *k, const float *v, size_t n, int level,
                       uint64_t seed, uint32_t tensor_index, sl__buf *out, float *recon)
{
    uint32_t amax = k->absmax_bits(v, n);
    float scale;
    int8_t *q;
    int rc;

    if (amax >= 0x7f800000u)
        return SL_ENONFINITE;
    scale = int8_scale(sl__bits_f32(amax));
    q = malloc(n);
    if (q == NULL)
        return SL_ENOMEM;
    if (scale == 0.0f)
        memset(q, 0, n);
    else
        k->int8_quant(v, n, scale, sl__values_int8_key(seed, tensor_index), q);
    rc = sl__buf_put_f32(out, scale);
    if (rc == SL_OK)
        rc = sl__coded_put(q, n, 1, level, out);
    if (rc == SL_OK && recon != NULL)
        (void)k->int8_dequant(q, n, scale, recon);
    free(q);
    return rc;
}

static int encode_bits(const sl__values_kernels *k, sl_value_mode mode, const float *v, size_t n,
                       sl__buf *out, float *recon)
{
    size_t bytes = (n + 7) / 8, at, zeros = 0;
    uint8_t *signs = NULL;
    float mag;
    int rc = mean_abs(k, v, n, &mag);

    if (rc == SL_OK)
        rc = sl__buf_reserve(out, 5 + 2 * bytes + 8);
    if (rc == SL_OK)
        rc = sl__buf_put_f32(out, mag);
    if (rc != SL_OK)
        return rc;
    if (mode == SL_VALUE_TERNARY) {
        out->data[out->len++] = 0; /* the zeros flag, set below */
        zeros = k->zero_pack(v, n, out->data + out->len);
    }
    at = out->len;
    if (zeros == 0) {
        k->sign_pack(v, n, out->data + at);
        out->len = at + bytes;
        if (recon != NULL)
            k->bits_to_floats(out->data + at, NULL, n, mag, recon);
        return SL_OK;
    }
    signs = malloc(bytes);
    if (signs == NULL)
        return SL_ENOMEM;
    k->sign_pack(v, n, signs);
    out->data[at - 1] = 1;
    out->len =
        at + bytes + (k->bits_compact(signs, out->data + at, n, out->data + at + bytes) + 7) / 8;
    if (recon != NULL)
        k->bits_to_floats(signs, out->data + at, n, mag, recon);
    free(signs);
    return SL_OK;
}

int sl__values_encode(sl_value_mode mode, const float *v, size_t n, int zstd_level, uint64_t seed,
                      uint32_t tensor_index, sl__buf *out, float *recon)
{
    const sl__values_kernels *k = sl__values_kernels_get();
    size_t start;
    int rc;

    if ((unsigned)mode >= MODE_COUNT || out == NULL || (n > 0 && v == NULL))
        return SL_EINVAL;
    start = out->len;
    if (n == 0) /* an empty section in every mode */
        return SL_OK;
    if (n > SIZE_MAX / 8)
        return SL_ETOOBIG;
    switch (mode) {
    case SL_VALUE_FP32:
        rc = encode_fp32(k, v, n, zstd_level, out, recon);
        break;
    case SL_VALUE_FP16:
    case SL_VALUE_BF16:
        rc = encode_half(k, mode, v, n, zstd_level, out, recon);
        break;
    case SL_VALUE_INT8:
        rc = encode_int8(k, v, n, zstd_level, seed, tensor_index, out, recon);
        break;
    default:
        rc = encode_bits(k, mode, v, n, out, recon);
        break;
    }
    if (rc != SL_OK)
        out->len = start;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Decoder                                                                  */
/* ------------------------------------------------------------------------ */

/* the rest of the section must be exactly @need bytes */
static int take_rest(sl__reader *r, size_t need, const uint8_t **p)
{
    size_t rest = r->len - r->pos;
    if (rest < need)
        return SL_ETRUNCATED;
    if (rest > need)
        return SL_ECORRUPT;
    *p = r->p + r->pos;
    r->pos = r->len;
    return SL_OK;
}

/* a scale or mu: finite (else SL_ENONFINITE) and not negative, -0 included */
static int check_magnitude(float f)
{
    if (!is_finite_f32(f))
        return SL_ENONFINITE;
    return (sl__f32_bits(f) >> 31) ? SL_ECORRUPT : SL_OK;
}

/* (codec_int.h) Scratch is at most 2 * @len bytes without @dst, @len with it: never above
 * 4n. */
int sl__coded_get(sl__reader *r, size_t len, size_t size, uint8_t *dst, const uint8_t **raw,
                  uint8_t **scratch)
{
    uint8_t tag, *buf, *planes;
    int rc = sl__rd_u8(r, &tag);

    if (rc != SL_OK)
        return rc;
    if (tag == TAG_RAW)
        return take_rest(r, len, raw);
    if (tag != TAG_ZSTD)
        return SL_ECORRUPT;
    if (r->pos == r->len)
        return SL_ETRUNCATED;
    buf = malloc(size > 1 && dst == NULL ? 2 * len : len);
    if (buf == NULL)
        return SL_ENOMEM;
    rc = sl__zstd_decode_exact(r->p + r->pos, r->len - r->pos, buf, len);
    if (rc != SL_OK) {
        free(buf);
        return rc;
    }
    r->pos = r->len;
    planes = buf;
    if (size > 1) {
        planes = dst != NULL ? dst : buf + len;
        sl__unshuffle(buf, len / size, size, planes);
    }
    *raw = planes;
    *scratch = buf;
    return SL_OK;
}

static int check_padding(const uint8_t *bits, size_t n)
{
    return (n & 7) && (bits[n / 8] >> (n & 7)) ? SL_ECORRUPT : SL_OK;
}

static size_t popcount_bits(const uint8_t *bits, size_t n)
{
    size_t c = 0;
    for (size_t bit = 0; bit < n; bit += 64)
        c += (size_t)__builtin_popcountll(sl__bitmap_word(bits, n, bit));
    return c;
}

static int decode_bits(const sl__values_kernels *k, sl_value_mode mode, sl__reader *r, size_t n,
                       float *out)
{
    size_t bytes = (n + 7) / 8, zeros, kept;
    const uint8_t *zmap = NULL, *signs;
    uint8_t flag = 0, *expanded;
    float mag;
    int rc = sl__rd_f32(r, &mag);

    if (rc == SL_OK)
        rc = check_magnitude(mag);
    if (rc == SL_OK && mode == SL_VALUE_TERNARY)
        rc = sl__rd_u8(r, &flag);
    if (rc == SL_OK && flag > 1)
        rc = SL_ECORRUPT;
    if (rc != SL_OK)
        return rc;
    if (flag == 0) {
        rc = take_rest(r, bytes, &signs);
        if (rc == SL_OK)
            rc = check_padding(signs, n);
        if (rc == SL_OK)
            k->bits_to_floats(signs, NULL, n, mag, out);
        return rc;
    }
    rc = sl__rd_bytes(r, bytes, &zmap);
    if (rc == SL_OK)
        rc = check_padding(zmap, n);
    if (rc != SL_OK)
        return rc;
    zeros = popcount_bits(zmap, n);
    if (zeros == 0) /* the flag says there are zeros: the encoder never writes this */
        return SL_ECORRUPT;
    kept = n - zeros;
    rc = take_rest(r, (kept + 7) / 8, &signs);
    if (rc == SL_OK)
        rc = kept ? check_padding(signs, kept) : SL_OK;
    if (rc != SL_OK)
        return rc;
    expanded = malloc((n + 63) / 64 * 8);
    if (expanded == NULL)
        return SL_ENOMEM;
    k->bits_expand(signs, (kept + 7) / 8, zmap, n, expanded);
    k->bits_to_floats(expanded, zmap, n, mag, out);
    free(expanded);
    return SL_OK;
}

/* On failure @out may hold part of the values: callers decode into memory of their own
 * (sl_update arrays, a scratch buffer before accumulating) and drop it on error. */
int sl__values_decode(sl_value_mode mode, const uint8_t *p, size_t len, size_t n, float *out)
{
    const sl__values_kernels *k = sl__values_kernels_get();
    sl__reader r = {p, len, 0};
    const uint8_t *raw = NULL;
    uint8_t *scratch = NULL;
    float scale = 0.0f;
    int rc = SL_OK, flags;

    if ((unsigned)mode >= MODE_COUNT)
        return SL_ECORRUPT;
    if (n == 0)
        return len == 0 ? SL_OK : SL_ECORRUPT;
    if (out == NULL || (p == NULL && len > 0))
        return SL_EINVAL;
    if (n > SIZE_MAX / 8)
        return SL_ETOOBIG;
    switch (mode) {
    case SL_VALUE_FP32:
        rc = sl__coded_get(&r, n * 4, 4, (uint8_t *)out, &raw, &scratch);
        if (rc == SL_OK) {
            if (raw != (const uint8_t *)out)
                memcpy(out, raw, n * 4);
            rc = k->absmax_bits(out, n) >= 0x7f800000u ? SL_ENONFINITE : SL_OK;
        }
        break;
    case SL_VALUE_FP16:
    case SL_VALUE_BF16:
        rc = sl__coded_get(&r, n * 2, 2, NULL, &raw, &scratch);
        if (rc == SL_OK && (mode == SL_VALUE_FP16 ? k->from_f16 : k->from_bf16)(raw, n, out))
            rc = SL_ENONFINITE;
        break;
    case SL_VALUE_INT8:
        rc = sl__rd_f32(&r, &scale);
        if (rc == SL_OK)
            rc = check_magnitude(scale);
        if (rc == SL_OK && !is_finite_f32(scale * 127.0f))
            rc = SL_ENONFINITE; /* +-127 would decode to Inf; never written */
        if (rc == SL_OK)
            rc = sl__coded_get(&r, n, 1, NULL, &raw, &scratch);
        if (rc == SL_OK) {
            flags = k->int8_dequant((const int8_t *)raw, n, scale, out);
            if ((flags & 1) || (scale == 0.0f && (flags & 2)))
                rc = SL_ECORRUPT;
        }
        break;
    default:
        rc = decode_bits(k, mode, &r, n, out);
        break;
    }
    free(scratch);
    return rc;
}
