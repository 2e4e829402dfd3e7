/* test_values.c - value sections: round trips, references, SIMD == scalar, rejections. */
#include <float.h>
#include <zstd.h>

#include "../../support/sl_test.h"
#include "../../../codecs/values_int.h"

static const size_t sizes[] = {0, 1, 7, 1000, 100000};
static const unsigned variants[] = {SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
#define NSIZES    (sizeof sizes / sizeof sizes[0])
#define NVARIANTS (sizeof variants / sizeof variants[0])
#define ALL_MODES 6

static uint32_t bits(float f)
{
    return sl__f32_bits(f);
}

static float from_bits(uint32_t u)
{
    return sl__bits_f32(u);
}

/* roughly normal: Irwin-Hall of 4 uniforms, sd 1 */
static float gauss(uint64_t *st)
{
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += (double)(sl_test_rand(st) >> 11) * 0x1p-53;
    return (float)((s - 2.0) * 1.7320508);
}

/* random sign and mantissa, biased exponent in [lo, hi] */
static float rand_exp(uint64_t *st, unsigned lo, unsigned hi)
{
    uint64_t r = sl_test_rand(st);
    uint32_t e = lo + (uint32_t)(r % (hi - lo + 1));
    return from_bits((uint32_t)(r >> 32) & 0x807fffffu) == 0
               ? 0.0f
               : from_bits(((uint32_t)(r >> 32) & 0x807fffffu) | (e << 23));
}

/* finite floats with every kind of exponent, and some specials */
static void fill_wild(float *v, size_t n, uint64_t seed)
{
    static const float special[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -1e-45f,
                                    65504.0f, 65519.0f, 65520.0f, -65536.0f, 0x1p-24f, 0x1p-25f,
                                    0x1.8p-25f, 0x1p-14f, 3.3895314e38f, 1.0f, -1.0f,
                                    /* ties of binary16 and bfloat16 rounding */
                                    0x1.8p-24f, 0x1.4p-23f, 0x1.002p0f, -0x1.006p0f, 0x1.01p0f,
                                    -0x1.03p0f, 0x1.ffep-15f, 0x1.ffdp-15f, 0x1.ff8p-16f};
    uint64_t st = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)sl_test_rand(&st);
        if ((u & 0x7f800000u) == 0x7f800000u)
            u &= 0xbfffffffu;
        v[i] = i % 5 == 0 ? special[(u >> 8) % (sizeof special / sizeof special[0])] : from_bits(u);
    }
}

static void fill_gauss(float *v, size_t n, uint64_t seed)
{
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + 7;
    for (size_t i = 0; i < n; i++)
        v[i] = gauss(&st) * 0.01f;
}

/* run a test body with the scalar reference and with every SIMD variant present */
static void restore_variant(void)
{
    assert_int_equal(sl__values_use(sl_cpu_features()), SL_OK);
}

static void each_variant(void (*body)(void **), void **state)
{
    static const unsigned all[] = {0, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (sl__values_use(all[k]) == SL_OK)
            body(state);
    restore_variant();
}

#define EACH_VARIANT(test, body)   \
    static void test(void **state) \
    {                              \
        each_variant(body, state); \
    }

static int encode(sl_value_mode mode, const float *v, size_t n, uint64_t seed, sl__buf *out,
                  float *recon)
{
    return sl__values_encode(mode, v, n, 3, seed, 5, out, recon);
}

/* encode with recon, decode, check recon == decode bit for bit; returns the decode */
static float *roundtrip(sl_value_mode mode, const float *v, size_t n, uint64_t seed, sl__buf *out)
{
    float *recon = malloc(n * 4 + 4), *dec = malloc(n * 4 + 4);
    assert_non_null(recon);
    assert_non_null(dec);
    out->len = 0;
    assert_int_equal(encode(mode, v, n, seed, out, recon), SL_OK);
    assert_int_equal(sl__values_decode(mode, out->data, out->len, n, dec), SL_OK);
    assert_memory_equal(recon, dec, n * 4);
    free(recon);
    return dec;
}

static void test_mode_names(void **state)
{
    sl_value_mode m;
    (void)state;
    for (int i = 0; i < ALL_MODES; i++) {
        assert_int_equal(sl_value_mode_parse(sl_value_mode_name((sl_value_mode)i), &m), SL_OK);
        assert_int_equal(m, i);
    }
    assert_string_equal(sl_value_mode_name(SL_VALUE_TERNARY), "ternary");
    assert_string_equal(sl_value_mode_name((sl_value_mode)6), "?");
    assert_int_equal(sl_value_mode_parse("FP32", &m), SL_EINVAL);
    assert_int_equal(sl_value_mode_parse("", &m), SL_EINVAL);
    assert_int_equal(sl_value_mode_parse(NULL, &m), SL_EINVAL);
}

static void fp32_body(void **state)
{
    sl__buf b = {0};
    (void)state;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        float *v = malloc(n * 4 + 4), *dec;
        uint64_t st = n;
        fill_wild(v, n, n + 1);
        dec = roundtrip(SL_VALUE_FP32, v, n, 0, &b);
        assert_memory_equal(v, dec, n * 4);
        free(dec);
        for (size_t i = 0; i < n; i++) /* random bits do not compress: stored */
            v[i] = rand_exp(&st, 0, 254);
        dec = roundtrip(SL_VALUE_FP32, v, n, 0, &b);
        assert_memory_equal(v, dec, n * 4);
        if (n > 0)
            assert_true(b.data[0] == 0 && b.len == 1 + 4 * n);
        free(dec);
        for (size_t i = 0; i < n; i++) /* compressible: zstd */
            v[i] = (float)(i % 17) * 0.25f;
        dec = roundtrip(SL_VALUE_FP32, v, n, 0, &b);
        assert_memory_equal(v, dec, n * 4);
        if (n >= 1000) {
            assert_int_equal(b.data[0], 1);
            assert_true(b.len < n);
        }
        free(dec);
        free(v);
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_fp32, fp32_body)

static double pow2(int k)
{
    double p = 1.0;
    for (; k > 0; k--)
        p *= 2.0;
    for (; k < 0; k++)
        p *= 0.5;
    return p;
}

static double half_value(unsigned h, int mbits, int bias)
{
    unsigned e = (h >> mbits) & ((1u << (15 - mbits)) - 1), m = h & ((1u << mbits) - 1);
    if (e == 0)
        return m * pow2(1 - bias - mbits);
    return (double)((1u << mbits) + m) * pow2((int)e - bias - mbits);
}

/* nearest code in [0, maxcode] by binary search, ties to the even code; saturating */
static uint16_t ref_half(float f, int mbits, int bias, unsigned maxcode)
{
    double a = f < 0 ? -(double)f : (double)f, d0, d1;
    unsigned lo = 0, hi = maxcode, c;
    uint16_t sign = (bits(f) >> 31) ? 0x8000 : 0;
    if (a >= half_value(maxcode, mbits, bias))
        return (uint16_t)(sign | maxcode);
    while (lo < hi) { /* largest c with value(c) <= a */
        unsigned mid = (lo + hi + 1) / 2;
        if (half_value(mid, mbits, bias) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    c = lo;
    d0 = a - half_value(c, mbits, bias);
    d1 = half_value(c + 1, mbits, bias) - a;
    if (d1 < d0 || (d1 == d0 && (c & 1)))
        c++;
    return (uint16_t)(sign | c);
}

static void check_half(sl_value_mode mode, const float *v, size_t n, const float *dec)
{
    int fp16 = mode == SL_VALUE_FP16, mbits = fp16 ? 10 : 7, bias = fp16 ? 15 : 127;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = ref_half(v[i], mbits, bias, fp16 ? 0x7bffu : 0x7f7fu);
        double want = half_value(h & 0x7fffu, mbits, bias);
        float w = (float)(h & 0x8000u ? -want : want);
        if (bits(w) != bits(dec[i]))
            fail_msg("%s v[%zu] = %a (%08x): got %a, want %a", sl_value_mode_name(mode), i,
                     (double)v[i], bits(v[i]), (double)dec[i], (double)w);
    }
}

static void half_body(void **state)
{
    sl__buf b = {0};
    (void)state;
    for (int mode = SL_VALUE_FP16; mode <= SL_VALUE_BF16; mode++) {
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = sizes[s];
            float *v = malloc(n * 4 + 4), *dec;
            uint64_t st = n + 99;
            fill_wild(v, n, n + 3);
            for (size_t i = 1; i < n; i += 3) /* plenty in the binary16 range */
                v[i] = rand_exp(&st, 100, 145);
            dec = roundtrip((sl_value_mode)mode, v, n, 0, &b);
            check_half((sl_value_mode)mode, v, n, dec);
            free(dec);
            fill_gauss(v, n, 1);
            dec = roundtrip((sl_value_mode)mode, v, n, 0, &b);
            check_half((sl_value_mode)mode, v, n, dec);
            if (n >= 1000)
                assert_int_equal(b.data[0], 1); /* Gaussian halves compress */
            free(dec);
            free(v);
        }
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_half, half_body)

static void half_edges_body(void **state)
{
    static const struct {
        float in;
        uint32_t f16, bf16; /* decoded bits */
    } cases[] = {
        {65504.0f, 0x477fe000u, 0x47800000u},
        {65519.996f, 0x477fe000u, 0x47800000u}, /* 0x477fefff */
        {65520.0f, 0x477fe000u, 0x47800000u},   /* fp16 tie rounds to Inf: saturate */
        {-1e30f, 0xc77fe000u, 0xf14a0000u},
        {FLT_MAX, 0x477fe000u, 0x7f7f0000u},     /* bf16 would round to Inf: saturate */
        {0x1.ffp127f, 0x477fe000u, 0x7f7f0000u}, /* 0x7f7f8000: tie, to even Inf: saturate */
        {0x1p-24f, 0x33800000u, 0x33800000u},    /* the smallest fp16 subnormal */
        {0x1p-25f, 0x0u, 0x33000000u},           /* tie between 0 and 2^-24: even 0 */
        {0x1.000002p-25f, 0x33800000u, 0x33000000u},
        {-0x1.8p-24f, 0xb4000000u, 0xb3c00000u}, /* tie 1.5 ulp: to even 2 */
        {-0.0f, 0x80000000u, 0x80000000u},
        {1e-45f, 0x0u, 0x0u},
        {0x1.ffep-15f, 0x38800000u, 0x38800000u}, /* subnormal rounds up to the smallest normal */
        {1.00390625f, 0x3f808000u, 0x3f800000u},
        {1.01171875f, 0x3f818000u, 0x3f820000u},
        {0x1.fep-127f, 0x0u, 0x00800000u}, /* float subnormal, bf16 rounds to normal */
        {0x1.7fp-130f, 0x0u, 0x000c0000u},
        {0.1f, 0x3dccc000u, 0x3dcd0000u},
        {-3.0e-6f, 0xb6480000u, 0xb6490000u},
    };
    size_t n = sizeof cases / sizeof cases[0];
    float v[sizeof cases / sizeof cases[0]], *dec;
    sl__buf b = {0};
    (void)state;
    for (size_t i = 0; i < n; i++)
        v[i] = cases[i].in;
    dec = roundtrip(SL_VALUE_FP16, v, n, 0, &b);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bits(dec[i]), cases[i].f16);
    free(dec);
    dec = roundtrip(SL_VALUE_BF16, v, n, 0, &b);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bits(dec[i]), cases[i].bf16);
    check_half(SL_VALUE_BF16, v, n, dec); /* and the reference agrees with the table */
    free(dec);
    sl__buf_free(&b);
}
EACH_VARIANT(test_half_edges, half_edges_body)

static float scale_of(const sl__buf *b)
{
    float f;
    memcpy(&f, b->data, 4);
    return f;
}

static uint32_t my_hash(uint32_t x) /* lowbias32, as FORMAT.md gives it */
{
    x = (x ^ (x >> 16)) * 0x7feb352du;
    x = (x ^ (x >> 15)) * 0x846ca68bu;
    return x ^ (x >> 16);
}

static void int8_body(void **state)
{
    sl__buf b = {0}, b2 = {0};
    (void)state;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        float *v = malloc(n * 4 + 4), *dec, scale, amax = 0;
        uint32_t key = sl__values_int8_key(42, 5);
        fill_gauss(v, n, n);
        for (size_t i = 0; i < n; i += 11)
            v[i] = (i & 1) ? -0.0f : 0.0f;
        dec = roundtrip(SL_VALUE_INT8, v, n, 42, &b);
        if (n == 0) {
            assert_int_equal(b.len, 0);
            free(dec);
            free(v);
            continue;
        }
        scale = scale_of(&b);
        if (scale == 0.0f) { /* all zero */
            for (size_t i = 0; i < n; i++)
                assert_int_equal(bits(dec[i]), 0);
            b.len = 0;
            free(dec);
            free(v);
            continue;
        }
        for (size_t i = 0; i < n; i++)
            amax = v[i] > amax ? v[i] : -v[i] > amax ? -v[i] : amax;
        assert_true(scale * 127.0f >= amax && scale <= amax / 127.0f * 1.000001f);
        for (size_t i = 0; i < n; i++) {
            float d = v[i] - dec[i], x = v[i] / scale, fl;
            int q = (int)x, want;
            assert_true(d <= scale * 1.000001f && -d <= scale * 1.000001f);
            /* the q of FORMAT.md, computed here from the spec */
            fl = (float)q;
            if (fl > x) {
                fl -= 1.0f;
                q--;
            }
            want = q + ((float)(my_hash((uint32_t)i + key) >> 8) * 0x1p-24f < x - fl);
            want = want > 127 ? 127 : want < -127 ? -127 : want;
            assert_int_equal(bits(dec[i]), bits((float)want * scale));
        }
        /* deterministic per seed; another seed or tensor rounds differently */
        assert_int_equal(encode(SL_VALUE_INT8, v, n, 42, &b2, NULL), SL_OK);
        assert_int_equal(b2.len, b.len);
        assert_memory_equal(b2.data, b.data, b.len);
        if (n >= 1000) {
            b2.len = 0;
            assert_int_equal(encode(SL_VALUE_INT8, v, n, 43, &b2, NULL), SL_OK);
            assert_true(b2.len != b.len || memcmp(b2.data, b.data, b.len) != 0);
            b2.len = 0;
            assert_int_equal(sl__values_encode(SL_VALUE_INT8, v, n, 3, 42, 6, &b2, NULL), SL_OK);
            assert_true(b2.len != b.len || memcmp(b2.data, b.data, b.len) != 0);
        }
        b2.len = 0;
        free(dec);
        free(v);
    }
    sl__buf_free(&b);
    sl__buf_free(&b2);
}
EACH_VARIANT(test_int8, int8_body)

static void int8_edges_body(void **state)
{
    static const float huge[] = {FLT_MAX, -FLT_MAX, 1.0f, 0x1.fffffcp127f};
    static const float tiny[] = {1e-45f, -3e-45f, 0.0f, 2.7e-43f};
    float zeros[40] = {0}, *dec;
    sl__buf b = {0};
    (void)state;
    zeros[3] = -0.0f;
    dec = roundtrip(SL_VALUE_INT8, zeros, 40, 1, &b);
    assert_int_equal(bits(scale_of(&b)), 0);
    for (int i = 0; i < 40; i++)
        assert_int_equal(bits(dec[i]), 0);
    free(dec);
    dec = roundtrip(SL_VALUE_INT8, huge, 4, 1, &b);
    for (int i = 0; i < 4; i++) {
        assert_true(bits(dec[i]) != 0x7f800000u && bits(dec[i]) != 0xff800000u);
        assert_true((double)huge[i] - dec[i] <= (double)scale_of(&b) * 1.000001);
        assert_true((double)dec[i] - huge[i] <= (double)scale_of(&b) * 1.000001);
    }
    free(dec);
    dec = roundtrip(SL_VALUE_INT8, tiny, 4, 1, &b);
    assert_true(scale_of(&b) > 0.0f);
    for (int i = 0; i < 4; i++) {
        float d = tiny[i] - dec[i];
        assert_true(d <= scale_of(&b) && -d <= scale_of(&b));
    }
    free(dec);
    sl__buf_free(&b);
}
EACH_VARIANT(test_int8_edges, int8_edges_body)

/* E[recon] = v: average over many seeds */
static void int8_unbiased_body(void **state)
{
    enum { N = 60, SEEDS = 2500 };
    float v[N], recon[N], scale = 0;
    double sum[N] = {0}, total = 0;
    int saw[2] = {0, 0};
    sl__buf b = {0};
    (void)state;
    fill_gauss(v, N, 77);
    for (int s = 0; s < SEEDS; s++) {
        b.len = 0;
        assert_int_equal(encode(SL_VALUE_INT8, v, N, (uint64_t)s * 7919, &b, recon), SL_OK);
        scale = scale_of(&b);
        for (int i = 0; i < N; i++)
            sum[i] += recon[i];
    }
    for (int i = 0; i < N; i++) {
        double err = sum[i] / SEEDS - v[i];
        assert_true(err < 0.05 * scale && err > -0.05 * scale); /* 5 sd */
        total += err;
    }
    assert_true(total / N < 0.01 * scale && total / N > -0.01 * scale);
    /* both neighbours occur for a value between two steps */
    for (int s = 0; s < 64; s++) {
        float one[2] = {1.0f, 0.3f};
        b.len = 0;
        assert_int_equal(encode(SL_VALUE_INT8, one, 2, (uint64_t)s, &b, recon), SL_OK);
        saw[recon[1] > 0.3f] = 1;
    }
    assert_true(saw[0] && saw[1]);
    sl__buf_free(&b);
}
EACH_VARIANT(test_int8_unbiased, int8_unbiased_body)

static void fill_with_zeros(float *v, size_t n, uint64_t seed)
{
    fill_gauss(v, n, seed);
    for (size_t i = 0; i < n; i += 10)
        v[i] = (i & 2) ? -0.0f : 0.0f;
}

static void check_bits_mode(sl_value_mode mode, const float *v, size_t n, const sl__buf *b,
                            const float *dec)
{
    double sum = 0;
    float mag = scale_of(b);
    size_t zeros = 0, bytes = (n + 7) / 8;
    for (size_t i = 0; i < n; i++) {
        sum += v[i] < 0 ? -(double)v[i] : (double)v[i];
        zeros += v[i] == 0.0f;
    }
    assert_true((double)mag <= sum / n * (1 + 1e-6) && (double)mag >= sum / n * (1 - 1e-6));
    for (size_t i = 0; i < n; i++) {
        uint32_t want = bits(mag) | (bits(v[i]) & 0x80000000u);
        if (mode == SL_VALUE_TERNARY && v[i] == 0.0f)
            want = 0;
        assert_int_equal(bits(dec[i]), want);
    }
    if (mode == SL_VALUE_SIGN)
        assert_int_equal(b->len, 4 + bytes);
    else if (zeros == 0)
        assert_true(b->len == 5 + bytes && b->data[4] == 0);
    else
        assert_true(b->len == 5 + bytes + (n - zeros + 7) / 8 && b->data[4] == 1);
}

static void ternary_sign_body(void **state)
{
    sl__buf b = {0};
    (void)state;
    for (int mode = SL_VALUE_TERNARY; mode <= SL_VALUE_SIGN; mode++) {
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = sizes[s];
            float *v = malloc(n * 4 + 4), *dec;
            if (n == 0) {
                dec = roundtrip((sl_value_mode)mode, v, 0, 0, &b);
                assert_int_equal(b.len, 0);
                free(dec);
                free(v);
                continue;
            }
            for (int kind = 0; kind < 3; kind++) {
                if (kind == 0)
                    fill_gauss(v, n, n + 5);
                else if (kind == 1)
                    fill_with_zeros(v, n, n);
                else
                    memset(v, 0, n * 4);
                dec = roundtrip((sl_value_mode)mode, v, n, 0, &b);
                check_bits_mode((sl_value_mode)mode, v, n, &b, dec);
                free(dec);
            }
            free(v);
        }
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_ternary_sign, ternary_sign_body)

/* ------------------------------------------------------------------------ */
/* Every SIMD variant gives the scalar reference's bytes                    */
/* ------------------------------------------------------------------------ */

static int variants_run;

static void test_variants_sections(void **state)
{
    static const size_t ns[] = {1, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 1000, 4099, 100000};
    sl__buf ref = {0}, got = {0};
    (void)state;
    assert_int_equal(sl__values_use(0), SL_OK);
    assert_string_equal(sl__values_variant(), "scalar");
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        size_t n = ns[s];
        float *v = malloc(n * 4), *r0 = malloc(n * 4), *r1 = malloc(n * 4), *d0 = malloc(n * 4);
        float *d1 = malloc(n * 4);
        for (int kind = 0; kind < 3; kind++) {
            if (kind == 0)
                fill_wild(v, n, n);
            else if (kind == 1)
                fill_gauss(v, n, n);
            else
                fill_with_zeros(v, n, n);
            for (int mode = 0; mode < ALL_MODES; mode++) {
                assert_int_equal(sl__values_use(0), SL_OK);
                ref.len = 0;
                assert_int_equal(encode((sl_value_mode)mode, v, n, n, &ref, r0), SL_OK);
                assert_int_equal(sl__values_decode((sl_value_mode)mode, ref.data, ref.len, n, d0),
                                 SL_OK);
                for (size_t k = 0; k < NVARIANTS; k++) {
                    if (sl__values_use(variants[k]) != SL_OK)
                        continue;
                    variants_run |= 1 << k;
                    got.len = 0;
                    assert_int_equal(encode((sl_value_mode)mode, v, n, n, &got, r1), SL_OK);
                    if (got.len != ref.len || memcmp(got.data, ref.data, ref.len) != 0)
                        fail_msg("%s: %s section differs at n=%zu kind %d", sl__values_variant(),
                                 sl_value_mode_name((sl_value_mode)mode), n, kind);
                    assert_memory_equal(r0, r1, n * 4);
                    assert_int_equal(
                        sl__values_decode((sl_value_mode)mode, ref.data, ref.len, n, d1), SL_OK);
                    assert_memory_equal(d0, d1, n * 4);
                }
            }
        }
        free(v);
        free(r0);
        free(r1);
        free(d0);
        free(d1);
    }
    restore_variant();
    print_message("variants checked against scalar: %s%s%s\n", variants_run & 1 ? "avx2 " : "",
                  variants_run & 2 ? "avx512 " : "", variants_run & 4 ? "neon" : "");
    sl__buf_free(&ref);
    sl__buf_free(&got);
}

/* kernels on inputs the section tests do not reach: specials, any bit masks */
static void test_variants_kernels(void **state)
{
    enum { N = 1037 };
    const sl__values_kernels *sc = &sl__values_scalar;
    uint8_t h[2 * N], src[N / 8 + 16], drop[N / 8 + 16], c0[N / 8 + 16], c1[N / 8 + 16];
    uint8_t e0[N / 8 + 16], e1[N / 8 + 16];
    float o0[N], o1[N];
    uint64_t st = 12345;
    (void)state;
    for (size_t k = 0; k < NVARIANTS; k++) {
        const sl__values_kernels *vk;
        if (sl__values_use(variants[k]) != SL_OK)
            continue;
        vk = sl__values_kernels_get();
        for (int round = 0; round < 40; round++) {
            size_t n = round == 0 ? N : (size_t)(sl_test_rand(&st) % N);
            unsigned density = (unsigned)(sl_test_rand(&st) % 9);
            for (size_t i = 0; i < 2 * N; i++)
                h[i] = (uint8_t)sl_test_rand(&st);
            for (int half = 0; half < 2; half++) { /* specials: flags agree */
                int (*f0)(const uint8_t *, size_t, float *) = half ? sc->from_bf16 : sc->from_f16;
                int (*f1)(const uint8_t *, size_t, float *) = half ? vk->from_bf16 : vk->from_f16;
                assert_int_equal(f0(h, n, o0), f1(h, n, o1));
            }
            for (size_t i = 0; i < n; i++)
                h[2 * i + 1] &= 0x3f; /* finite in both formats */
            assert_int_equal(sc->from_f16(h, n, o0), 0);
            assert_int_equal(vk->from_f16(h, n, o1), 0);
            assert_memory_equal(o0, o1, n * 4);
            assert_int_equal(sc->from_bf16(h, n, o0), vk->from_bf16(h, n, o1));
            assert_memory_equal(o0, o1, n * 4);
            assert_int_equal(sc->int8_dequant((const int8_t *)h, n, 0.37f, o0),
                             vk->int8_dequant((const int8_t *)h, n, 0.37f, o1));
            assert_memory_equal(o0, o1, n * 4);
            /* compaction with drop masks of every density */
            for (size_t i = 0; i < sizeof src; i++) {
                uint8_t d = 0;
                for (int j = 0; j < 8; j++)
                    d |= (uint8_t)(((sl_test_rand(&st) % 8) < density) << j);
                src[i] = (uint8_t)sl_test_rand(&st);
                drop[i] = d;
            }
            if (n % 8) {
                src[n / 8] &= (uint8_t)((1u << (n % 8)) - 1);
                drop[n / 8] &= (uint8_t)((1u << (n % 8)) - 1);
            }
            memset(c0, 0xee, sizeof c0);
            memset(c1, 0xee, sizeof c1);
            size_t kept = sc->bits_compact(src, drop, n, c0);
            assert_int_equal(vk->bits_compact(src, drop, n, c1), kept);
            assert_memory_equal(c0, c1, (kept + 7) / 8);
            if (kept % 8)
                assert_int_equal(c0[kept / 8] >> (kept % 8), 0);
            sc->bits_expand(c0, (kept + 7) / 8, drop, n, e0);
            vk->bits_expand(c0, (kept + 7) / 8, drop, n, e1);
            assert_memory_equal(e0, e1, (n + 7) / 8);
            for (size_t i = 0; i < n; i++) { /* expand(compact(x)) = x outside the drops */
                unsigned dr = (drop[i / 8] >> (i % 8)) & 1, a = (src[i / 8] >> (i % 8)) & 1;
                assert_int_equal((e0[i / 8] >> (i % 8)) & 1, dr ? 0 : a);
            }
        }
    }
    restore_variant();
}

static void test_variant_hook(void **state)
{
    (void)state;
    assert_int_equal(sl__values_use(0), SL_OK);
    assert_string_equal(sl__values_variant(), "scalar");
#if !defined(SL_NEON)
    assert_int_equal(sl__values_use(SL_CPU_NEON), SL_EUNSUPPORTED);
#endif
#if !defined(SL_X86_SIMD)
    assert_int_equal(sl__values_use(SL_CPU_AVX2), SL_EUNSUPPORTED);
    assert_int_equal(sl__values_use(SL_CPU_AVX512), SL_EUNSUPPORTED);
#endif
    if (sl_cpu_features() & SL_CPU_AVX2) {
        assert_int_equal(sl__values_use(SL_CPU_AVX2), SL_OK);
        assert_string_equal(sl__values_variant(), "avx2");
    }
    restore_variant();
    assert_string_equal(sl__values_variant(), sl_cpu_describe(sl_cpu_features()));
}

/* ------------------------------------------------------------------------ */
/* Rejections                                                               */
/* ------------------------------------------------------------------------ */

static int decode(sl_value_mode mode, const uint8_t *p, size_t len, size_t n)
{
    float *out = malloc(n * 4 + 4);
    int rc;
    assert_non_null(out);
    rc = sl__values_decode(mode, p, len, n, out);
    free(out);
    return rc;
}

static void reject_input_body(void **state)
{
    static const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu, 0x7f800001u};
    float v[300];
    sl__buf b = {0};
    (void)state;
    fill_gauss(v, 300, 3);
    for (int mode = 0; mode < ALL_MODES; mode++) {
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            float keep = v[k * 37 + 100];
            v[k * 37 + 100] = from_bits(bad[k]);
            b.len = 3;
            assert_int_equal(encode((sl_value_mode)mode, v, 300, 1, &b, NULL), SL_ENONFINITE);
            assert_int_equal(b.len, 3); /* nothing appended */
            v[k * 37 + 100] = keep;
        }
    }
    assert_int_equal(encode((sl_value_mode)6, v, 3, 1, &b, NULL), SL_EINVAL);
    assert_int_equal(encode((sl_value_mode)-1, v, 3, 1, &b, NULL), SL_EINVAL);
    assert_int_equal(decode((sl_value_mode)6, b.data, 0, 0), SL_ECORRUPT);
    for (int mode = 0; mode < ALL_MODES; mode++) { /* n == 0: the empty section only */
        uint8_t one = 0;
        assert_int_equal(sl__values_decode((sl_value_mode)mode, &one, 0, 0, NULL), SL_OK);
        assert_int_equal(sl__values_decode((sl_value_mode)mode, &one, 1, 0, NULL), SL_ECORRUPT);
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_reject_input, reject_input_body)

/* every strict prefix fails, a trailing byte fails, random damage never crashes */
static void reject_truncated_body(void **state)
{
    static const size_t ns[] = {1, 37, 3000};
    sl__buf b = {0};
    uint64_t st = 99;
    (void)state;
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        size_t n = ns[s];
        float *v = malloc(n * 4);
        fill_with_zeros(v, n, 17);
        for (int mode = 0; mode < ALL_MODES; mode++) {
            uint8_t *copy;
            b.len = 0;
            assert_int_equal(encode((sl_value_mode)mode, v, n, 9, &b, NULL), SL_OK);
            for (size_t len = 0; len < b.len; len++) {
                int rc = decode((sl_value_mode)mode, b.data, len, n);
                if (rc == SL_OK)
                    fail_msg("%s n=%zu: prefix %zu of %zu accepted",
                             sl_value_mode_name((sl_value_mode)mode), n, len, b.len);
            }
            assert_int_equal(decode((sl_value_mode)mode, b.data, 0, n), SL_ETRUNCATED);
            assert_int_equal(sl__buf_put_u8(&b, 0), SL_OK);
            assert_int_not_equal(decode((sl_value_mode)mode, b.data, b.len, n), SL_OK);
            b.len--;
            copy = malloc(b.len);
            for (int round = 0; round < 200; round++) {
                memcpy(copy, b.data, b.len);
                copy[sl_test_rand(&st) % b.len] ^= (uint8_t)(1u << (sl_test_rand(&st) % 8));
                (void)decode((sl_value_mode)mode, copy, b.len, n); /* ASan watches */
            }
            free(copy);
        }
        free(v);
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_reject_truncated, reject_truncated_body)

static void reject_fields_body(void **state)
{
    float v[37], out[37];
    sl__buf b = {0};
    uint8_t s[64];
    (void)state;
    fill_gauss(v, 37, 5);
    /* coding tags */
    for (int mode = SL_VALUE_FP32; mode <= SL_VALUE_INT8; mode++) {
        size_t tag_at = mode == SL_VALUE_INT8 ? 4 : 0;
        b.len = 0;
        assert_int_equal(encode((sl_value_mode)mode, v, 37, 1, &b, NULL), SL_OK);
        assert_int_equal(b.data[tag_at], 0); /* small: stored */
        for (unsigned tag = 2; tag < 256; tag++) {
            b.data[tag_at] = (uint8_t)tag;
            assert_int_equal(decode((sl_value_mode)mode, b.data, b.len, 37), SL_ECORRUPT);
        }
        b.data[tag_at] = 1; /* stored bytes are no zstd frame */
        assert_int_equal(decode((sl_value_mode)mode, b.data, b.len, 37), SL_ECOMPRESS);
    }
    /* non-finite stored values */
    memcpy(s, "\0\0\0\x80\x7f", 5);
    assert_int_equal(sl__values_decode(SL_VALUE_FP32, s, 5, 1, out), SL_ENONFINITE);
    memcpy(s, "\0\0\x7c", 3);
    assert_int_equal(sl__values_decode(SL_VALUE_FP16, s, 3, 1, out), SL_ENONFINITE);
    memcpy(s, "\0\x81\xff", 3);
    assert_int_equal(sl__values_decode(SL_VALUE_BF16, s, 3, 1, out), SL_ENONFINITE);
    memcpy(s, "\0\x01\x7c", 3);
    assert_int_equal(sl__values_decode(SL_VALUE_BF16, s, 3, 1, out), SL_OK);
    /* scales: NaN, Inf, negative, -0, too large, q = -128, q != 0 with scale 0 */
    {
        static const struct {
            uint8_t bytes[7];
            int rc;
        } t[] = {
            {{0x00, 0x00, 0xc0, 0x7f, 0, 1, 2}, SL_ENONFINITE},
            {{0x00, 0x00, 0x80, 0x7f, 0, 1, 2}, SL_ENONFINITE},
            {{0x00, 0x00, 0x80, 0xbf, 0, 1, 2}, SL_ECORRUPT},
            {{0x00, 0x00, 0x00, 0x80, 0, 0, 0}, SL_ECORRUPT},
            {{0xff, 0xff, 0x7f, 0x7f, 0, 0, 0}, SL_ENONFINITE},
            {{0x00, 0x00, 0x80, 0x3f, 0, 1, 0x80}, SL_ECORRUPT},
            {{0x00, 0x00, 0x00, 0x00, 0, 0, 1}, SL_ECORRUPT},
            {{0x00, 0x00, 0x00, 0x00, 0, 0, 0}, SL_OK},
            {{0x00, 0x00, 0x80, 0x3f, 0, 0x81, 0x7f}, SL_OK},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            assert_int_equal(sl__values_decode(SL_VALUE_INT8, t[i].bytes, 7, 2, out), t[i].rc);
        assert_int_equal(bits(out[0]), 0xc2fe0000u); /* -127 */
        for (size_t i = 0; i < 4; i++) {             /* sign: same scale checks */
            memcpy(s, t[i].bytes, 4);
            s[4] = 1;
            assert_int_equal(sl__values_decode(SL_VALUE_SIGN, s, 5, 2, out), t[i].rc);
            s[4] = 0;
            s[5] = 1;
            assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 6, 2, out), t[i].rc);
        }
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_reject_fields, reject_fields_body)

static void reject_bits_body(void **state)
{
    float v[13], out[13];
    uint8_t s[16];
    (void)state;
    /* sign, n = 13: padding bits 13..15 */
    memcpy(s, "\x00\x00\x80\x3f\xff\x1f", 6);
    assert_int_equal(sl__values_decode(SL_VALUE_SIGN, s, 6, 13, out), SL_OK);
    assert_int_equal(bits(out[12]), 0xbf800000u);
    s[5] = 0x3f;
    assert_int_equal(sl__values_decode(SL_VALUE_SIGN, s, 6, 13, out), SL_ECORRUPT);
    /* ternary without zeros */
    memcpy(s, "\x00\x00\x80\x3f\x00\x01\x00", 7);
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 7, 13, out), SL_OK);
    s[6] = 0x20;
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 7, 13, out), SL_ECORRUPT);
    for (unsigned flag = 2; flag < 256; flag++) {
        s[4] = (uint8_t)flag;
        assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 7, 13, out), SL_ECORRUPT);
    }
    /* ternary with zeros at 0 and 12: mask, then 11 signs in 2 bytes */
    memcpy(s, "\x00\x00\x80\x3f\x01\x01\x10\xff\x07", 9);
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 9, 13, out), SL_OK);
    assert_true(bits(out[0]) == 0 && bits(out[12]) == 0 && bits(out[1]) == 0xbf800000u);
    assert_true(bits(out[11]) == 0xbf800000u);
    s[8] = 0x0f; /* sign padding */
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 9, 13, out), SL_ECORRUPT);
    s[8] = 0x07;
    s[6] = 0x30; /* mask padding */
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 9, 13, out), SL_ECORRUPT);
    s[6] = 0x00;
    s[5] = 0x00; /* flag 1 but an empty mask: never written */
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 7, 13, out), SL_ECORRUPT);
    /* all zeros: mask only */
    memset(v, 0, sizeof v);
    memcpy(s, "\x00\x00\x00\x00\x01\xff\x1f", 7);
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 7, 13, out), SL_OK);
    assert_memory_equal(out, v, sizeof v);
    assert_int_equal(sl__values_decode(SL_VALUE_TERNARY, s, 8, 13, out), SL_ECORRUPT);
}
EACH_VARIANT(test_reject_bits, reject_bits_body)

/* a zstd part must declare exactly the size of the values */
static void reject_zstd_size_body(void **state)
{
    enum { N = 500 };
    uint8_t raw[4 * N + 1], sec[4 * N + 64];
    float out[N];
    (void)state;
    memset(raw, 0, sizeof raw);
    for (int mode = SL_VALUE_FP32; mode <= SL_VALUE_INT8; mode++) {
        size_t size = mode == SL_VALUE_FP32 ? 4 : mode == SL_VALUE_INT8 ? 1 : 2;
        size_t head = mode == SL_VALUE_INT8 ? 5 : 1;
        for (int delta = -1; delta <= 1; delta++) {
            size_t z;
            memset(sec, 0, head);
            if (mode == SL_VALUE_INT8)
                memcpy(sec, "\x00\x00\x80\x3f", 4);
            sec[head - 1] = 1;
            z = ZSTD_compress(sec + head, sizeof sec - head, raw, N * size + delta, 3);
            assert_false(ZSTD_isError(z));
            assert_int_equal(sl__values_decode((sl_value_mode)mode, sec, head + z, N, out),
                             delta == 0 ? SL_OK : SL_ECOMPRESS);
        }
    }
    /* a valid frame of Inf halves */
    for (size_t i = 0; i < 2 * N; i += 2) {
        raw[i] = 0;
        raw[i + 1] = 0x7c;
    }
    sec[0] = 1;
    {
        size_t z = ZSTD_compress(sec + 1, sizeof sec - 1, raw, 2 * N, 3);
        assert_int_equal(sl__values_decode(SL_VALUE_FP16, sec, 1 + z, N, out), SL_ENONFINITE);
    }
}
EACH_VARIANT(test_reject_zstd_size, reject_zstd_size_body)

/* sl__shuffle's vector paths move the bytes a plain transposition does */
static void test_shuffle(void **state)
{
    static const size_t ns[] = {0, 1, 15, 16, 17, 33, 100, 1001};
    uint8_t src[8 * 1001], got[8 * 1001], back[8 * 1001];
    uint64_t st = 5;
    (void)state;
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)sl_test_rand(&st);
    for (size_t size = 1; size <= 8; size++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            size_t n = ns[k];
            sl__shuffle(src, n, size, got);
            for (size_t b = 0; b < size; b++)
                for (size_t i = 0; i < n; i++)
                    assert_int_equal(got[b * n + i], src[i * size + b]);
            sl__unshuffle(got, n, size, back);
            assert_memory_equal(back, src, n * size);
        }
    }
}

/* the worked examples of FORMAT.md, byte for byte */
static void golden_body(void **state)
{
    static const float v[5] = {0.5f, -1.25f, 0.0f, 2.0f, -0.0f};
    static const struct {
        sl_value_mode mode;
        const char *hex;
    } g[] = {
        {SL_VALUE_FP32, "000000003f0000a0bf000000000000004000000080"},
        {SL_VALUE_FP16, "00003800bd000000400080"},
        {SL_VALUE_BF16, "00003fa0bf000000400080"},
        {SL_VALUE_INT8, "0402813c0020b1007f00"}, /* seed 0, tensor 5 */
        {SL_VALUE_TERNARY, "0000403f011402"},
        {SL_VALUE_SIGN, "0000403f12"},
    };
    sl__buf b = {0};
    char hex[64];
    (void)state;
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        b.len = 0;
        assert_int_equal(encode(g[i].mode, v, 5, 0, &b, NULL), SL_OK);
        for (size_t j = 0; j < b.len && j < 31; j++)
            snprintf(hex + 2 * j, 3, "%02x", b.data[j]);
        hex[2 * (b.len < 31 ? b.len : 31)] = '\0';
        assert_string_equal(hex, g[i].hex);
    }
    sl__buf_free(&b);
}
EACH_VARIANT(test_golden, golden_body)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_half_edges),
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_int8_edges),
        cmocka_unit_test(test_int8_unbiased),
        cmocka_unit_test(test_ternary_sign),
        cmocka_unit_test(test_variants_sections),
        cmocka_unit_test(test_variants_kernels),
        cmocka_unit_test(test_variant_hook),
        cmocka_unit_test(test_reject_input),
        cmocka_unit_test(test_reject_truncated),
        cmocka_unit_test(test_reject_fields),
        cmocka_unit_test(test_reject_bits),
        cmocka_unit_test(test_reject_zstd_size),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_shuffle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
