/*
 * Top-k selection: every mode and every SIMD variant built for this CPU
 * against a reference made by sorting (key, index) pairs; the variants
 * must also agree with each other index for index.
 */
#include <float.h>
#include <math.h>

#include "../../support/sl_test.h"
#include "starling/codec.h"
#include "../../../codecs/select_int.h"

static unsigned variants[4];
static size_t n_variants;

static uint32_t key_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u & 0x7fffffffu;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double uniform(uint64_t *s)
{
    return (double)(sl_test_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------------ */
/* Reference                                                                */
/* ------------------------------------------------------------------------ */

typedef struct pair {
    uint32_t key;
    uint32_t index;
} pair;

static int cmp_pair(const void *a, const void *b)
{
    const pair *p = a, *q = b;
    if (p->key != q->key)
        return p->key > q->key ? -1 : 1;
    return p->index < q->index ? -1 : p->index > q->index;
}

/* rank[i]: position of element i in (key descending, index ascending) order. */
static uint32_t *ranks(const float *x, size_t d)
{
    pair *pairs = malloc((d + 1) * sizeof *pairs);
    uint32_t *rank = malloc((d + 1) * sizeof *rank);
    assert_non_null(pairs);
    assert_non_null(rank);
    for (size_t i = 0; i < d; i++) {
        pairs[i].key = key_of(x[i]);
        pairs[i].index = (uint32_t)i;
    }
    qsort(pairs, d, sizeof *pairs, cmp_pair);
    for (size_t i = 0; i < d; i++)
        rank[pairs[i].index] = (uint32_t)i;
    free(pairs);
    return rank;
}

/* Selected indices must be ascending, and every selected key above every
 * key left out: {i : |x_i| >= t} for some t. */
static void assert_threshold_property(const float *x, size_t d, const uint32_t *idx, size_t n)
{
    uint32_t min_in = 0xffffffffu, max_out = 0;
    size_t j = 0;
    for (size_t i = 0; i < d; i++) {
        if (j < n && idx[j] == i) {
            if (key_of(x[i]) < min_in)
                min_in = key_of(x[i]);
            j++;
        } else if (key_of(x[i]) > max_out) {
            max_out = key_of(x[i]);
        }
    }
    assert_int_equal(j, n); /* all indices found, so ascending and < d */
    if (n > 0 && n < d)
        assert_true(min_in > max_out);
}

/*
 * RedSync as specified, with a full count at every step: the canonical
 * 16-lane double sum of magnitudes (select_int.h), bisection of r in
 * mean + r * (max - mean). Returns 1 and the threshold key when a step
 * lands in [k, band], 0 when the selector must fall back to exact.
 */
static int redsync_reference(const float *x, size_t d, size_t k, const sl_select_params *p,
                             uint32_t *thr)
{
    sl_select_params def;
    double lanes[16] = {0}, t8[8], mean, maxv, r_lo = 0.0, r_hi = 1.0;
    uint32_t mx = 0;
    size_t band = sl_select_capacity(SL_SELECT_REDSYNC, p, d, k);
    if (p == NULL) {
        sl_select_params_default(&def);
        p = &def;
    }
    uint32_t *keys = malloc((d + 1) * sizeof *keys);
    assert_non_null(keys);
    for (size_t i = 0; i < d; i++) {
        keys[i] = key_of(x[i]);
        lanes[i % 16] += (double)from_bits(keys[i]);
        mx = keys[i] > mx ? keys[i] : mx;
    }
    for (int j = 0; j < 8; j++)
        t8[j] = lanes[j] + lanes[j + 8];
    for (int j = 0; j < 4; j++)
        t8[j] = t8[j] + t8[j + 4];
    for (int j = 0; j < 2; j++)
        t8[j] = t8[j] + t8[j + 2];
    maxv = (double)from_bits(mx);
    mean = (t8[0] + t8[1]) / (double)d;
    mean = mean > maxv ? maxv : mean;
    for (uint32_t it = 0; it < p->max_iters; it++) {
        double r = 0.5 * (r_lo + r_hi);
        uint32_t t = key_of((float)(mean + r * (maxv - mean)));
        size_t c = 0;
        for (size_t i = 0; i < d; i++)
            c += keys[i] >= t;
        if (c < k) {
            r_hi = r;
        } else if (c > band) {
            r_lo = r;
        } else {
            free(keys);
            *thr = t;
            return 1;
        }
    }
    free(keys);
    return 0;
}

/* Run @mode on every variant and check it against the reference. */
static void check_mode(sl_select_mode mode, const sl_select_params *p, const float *x, size_t d,
                       size_t k, const uint32_t *rank)
{
    size_t cap = sl_select_capacity(mode, p, d, k), first_n = 0, j = 0, ref_n = k;
    uint32_t *ref = malloc((k + 1) * sizeof *ref), *first = NULL;
    assert_non_null(ref);
    for (size_t i = 0; i < d; i++)
        if (rank[i] < k)
            ref[j++] = (uint32_t)i;
    assert_int_equal(j, k);
    if (mode == SL_SELECT_REDSYNC && k > 0 && k < d) {
        /* RedSync's result is fully specified: check it exactly. */
        uint32_t t;
        if (redsync_reference(x, d, k, p, &t)) {
            free(ref);
            ref = malloc((cap + 1) * sizeof *ref);
            assert_non_null(ref);
            j = 0;
            for (size_t i = 0; i < d; i++)
                if (key_of(x[i]) >= t)
                    ref[j++] = (uint32_t)i;
            ref_n = j;
        }
    }

    for (size_t v = 0; v < n_variants; v++) {
        uint32_t *idx = malloc((cap + 1) * sizeof *idx);
        size_t n = (size_t)-1;
        assert_non_null(idx);
        idx[cap] = 0xa5a5a5a5u;
        assert_int_equal(sl__select_use(variants[v]), SL_OK);
        assert_int_equal(sl_select(mode, p, x, d, k, idx, &n), SL_OK);
        assert_int_equal(idx[cap], 0xa5a5a5a5u); /* never past the capacity */
        assert_true(n >= k && n <= cap);
        if (mode != SL_SELECT_DGC)
            assert_int_equal(n, ref_n);
        if (n == ref_n)
            assert_memory_equal(idx, ref, n * sizeof *idx);
        else
            assert_threshold_property(x, d, idx, n);
        if (first == NULL) {
            first = idx;
            first_n = n;
        } else {
            assert_int_equal(n, first_n);
            assert_memory_equal(idx, first, n * sizeof *idx);
            free(idx);
        }
    }
    assert_int_equal(sl__select_use(SL__SELECT_AUTO), SL_OK);
    free(first);
    free(ref);
}

static void check_all_modes(const float *x, size_t d, size_t k, const uint32_t *rank)
{
    check_mode(SL_SELECT_EXACT, NULL, x, d, k, rank);
    check_mode(SL_SELECT_REDSYNC, NULL, x, d, k, rank);
    check_mode(SL_SELECT_DGC, NULL, x, d, k, rank);
}

/* k = 0, 1, 1%, 10%, 50%, d - 1, d (duplicates are harmless). */
static void check_ks(const float *x, size_t d)
{
    const size_t ks[] = {0, 1, d / 100, d / 10, d / 2, d > 0 ? d - 1 : 0, d};
    uint32_t *rank = ranks(x, d);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        check_all_modes(x, d, ks[i], rank);
    free(rank);
}

/* ------------------------------------------------------------------------ */
/* Data                                                                     */
/* ------------------------------------------------------------------------ */

enum kind {
    GAUSS,        /* sum of four uniforms: bell-shaped */
    HEAVY,        /* random sign, exponent in [-40, 40], random mantissa */
    EQUAL,        /* every element 1.5 */
    FEW_VALUES,   /* five values with both signs: ties at every threshold */
    ZEROS,        /* all +0 */
    SIGNED_ZEROS, /* +0 and -0, one in ten +-1 */
    DENORMAL,     /* denormals of both signs, some zeros, some FLT_MIN */
    NEAR_MAX,     /* the largest finite floats */
    ALTERNATING,  /* +-(1 + i % 7) with alternating signs */
    RAMP_DOWN,    /* descending magnitudes */
    SPARSE,       /* one in fifty nonzero, the rest +-0 */
    KINDS
};

static void fill(float *x, size_t d, int kind, uint64_t seed)
{
    static const float few[5] = {0.5f, 1.0f, 2.0f, -2.0f, -1.0f};
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < d; i++) {
        uint64_t r = sl_test_rand(&s);
        switch (kind) {
        case GAUSS:
            x[i] = (float)(uniform(&s) + uniform(&s) + uniform(&s) + uniform(&s) - 2.0);
            break;
        case HEAVY:
            x[i] = from_bits(
                (uint32_t)((r >> 63) << 31 | (87 + (r >> 8) % 81) << 23 | (r & 0x7fffffu)));
            break;
        case EQUAL:
            x[i] = 1.5f;
            break;
        case FEW_VALUES:
            x[i] = few[r % 5];
            break;
        case ZEROS:
            x[i] = 0.0f;
            break;
        case SIGNED_ZEROS:
            x[i] = r % 10 == 0 ? (r & 16 ? 1.0f : -1.0f) : (r & 32 ? 0.0f : -0.0f);
            break;
        case DENORMAL:
            x[i] = r % 17 == 0   ? 0.0f
                   : r % 13 == 0 ? (r & 64 ? FLT_MIN : -FLT_MIN)
                                 : from_bits((uint32_t)((r >> 63) << 31 | (r & 0x7fffffu)));
            break;
        case NEAR_MAX:
            x[i] = from_bits((uint32_t)((r >> 63) << 31 | (0x7f7fffffu - (r >> 8) % 64)));
            break;
        case ALTERNATING:
            x[i] = (float)(1 + i % 7) * (i % 2 ? -1.0f : 1.0f);
            break;
        case RAMP_DOWN:
            x[i] = (float)(d - i);
            break;
        default:
            x[i] = r % 50 == 0 ? (float)(uniform(&s) - 0.5) : (r & 64 ? 0.0f : -0.0f);
            break;
        }
    }
}

static float *make(size_t d, int kind, uint64_t seed)
{
    float *x = malloc((d + 1) * sizeof *x);
    assert_non_null(x);
    fill(x, d, kind, seed);
    return x;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_params_and_capacity(void **state)
{
    sl_select_params p;
    (void)state;
    sl_select_params_default(&p);
    assert_true(p.band_hi == 2.0 && p.max_iters == 20);
    assert_true(p.sample_fraction == 0.01 && p.overshoot == 1.3);

    assert_int_equal(sl_select_capacity(SL_SELECT_EXACT, NULL, 1000, 10), 10);
    assert_int_equal(sl_select_capacity(SL_SELECT_REDSYNC, NULL, 1000, 10), 20);
    assert_int_equal(sl_select_capacity(SL_SELECT_DGC, NULL, 1000, 10), 13);
    assert_int_equal(sl_select_capacity(SL_SELECT_REDSYNC, NULL, 1000, 700), 1000);
    assert_int_equal(sl_select_capacity(SL_SELECT_DGC, NULL, 1000, 0), 0);
    assert_int_equal(sl_select_capacity(SL_SELECT_DGC, NULL, 1000, 7), 9); /* floor(9.1) */
    p.band_hi = 1e300;
    assert_int_equal(sl_select_capacity(SL_SELECT_REDSYNC, &p, 1000, 3), 1000);
    p.band_hi = 1.0;
    assert_int_equal(sl_select_capacity(SL_SELECT_REDSYNC, &p, 1000, 3), 3);
}

static void test_bad_arguments(void **state)
{
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint32_t idx[16] = {0};
    size_t n = 77;
    sl_select_params p;
    (void)state;
    assert_int_equal(sl_select(SL_SELECT_EXACT, NULL, x, 8, 9, idx, &n), SL_EINVAL);
    assert_int_equal(sl_select(SL_SELECT_DGC, NULL, x, 8, 9, idx, &n), SL_EINVAL);
    assert_int_equal(sl_select(SL_SELECT_EXACT, NULL, NULL, 8, 1, idx, &n), SL_EINVAL);
    assert_int_equal(sl_select(SL_SELECT_EXACT, NULL, x, 8, 1, NULL, &n), SL_EINVAL);
    assert_int_equal(sl_select(SL_SELECT_EXACT, NULL, x, 8, 1, idx, NULL), SL_EINVAL);
    assert_int_equal(sl_select((sl_select_mode)3, NULL, x, 8, 1, idx, &n), SL_EINVAL);
#if SIZE_MAX > 0xffffffffu
    /* Rejected before x is read. */
    assert_int_equal(
        sl_select(SL_SELECT_EXACT, NULL, x, (size_t)SL_CODEC_MAX_TENSOR + 1, 1, idx, &n),
        SL_ETOOBIG);
#endif
    sl_select_params_default(&p);
    p.band_hi = 0.5;
    assert_int_equal(sl_select(SL_SELECT_REDSYNC, &p, x, 8, 1, idx, &n), SL_EINVAL);
    p.band_hi = NAN;
    assert_int_equal(sl_select(SL_SELECT_REDSYNC, &p, x, 8, 1, idx, &n), SL_EINVAL);
    sl_select_params_default(&p);
    p.sample_fraction = 0.0;
    assert_int_equal(sl_select(SL_SELECT_DGC, &p, x, 8, 1, idx, &n), SL_EINVAL);
    p.sample_fraction = 1.5;
    assert_int_equal(sl_select(SL_SELECT_DGC, &p, x, 8, 1, idx, &n), SL_EINVAL);
    sl_select_params_default(&p);
    p.overshoot = 0.99;
    assert_int_equal(sl_select(SL_SELECT_DGC, &p, x, 8, 1, idx, &n), SL_EINVAL);
    assert_int_equal(n, 77);
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(idx[i], 0);
}

static void test_nonfinite(void **state)
{
    const size_t sizes[] = {1, 7, 1000, 65537, 65537};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    (void)state;
    for (size_t si = 0; si < 5; si++) {
        size_t d = sizes[si];
        float *x = make(d, si == 4 ? ZEROS : GAUSS, d); /* zeros: sampled guesses fail */
        uint32_t *idx = malloc(2 * d * sizeof *idx);
        const size_t where[3] = {0, d / 2, d - 1};
        const size_t ks[4] = {0, 1, d / 2, d};
        assert_non_null(idx);
        for (size_t b = 0; b < 3; b++) {
            for (size_t w = 0; w < 3; w++) {
                float saved = x[where[w]];
                x[where[w]] = bad[b];
                for (size_t v = 0; v < n_variants; v++) {
                    assert_int_equal(sl__select_use(variants[v]), SL_OK);
                    for (int mode = 0; mode < 3; mode++) {
                        for (size_t ki = 0; ki < 4; ki++) {
                            size_t n = 12345;
                            memset(idx, 0xee, 2 * d * sizeof *idx);
                            assert_int_equal(
                                sl_select((sl_select_mode)mode, NULL, x, d, ks[ki], idx, &n),
                                SL_ENONFINITE);
                            assert_int_equal(n, 12345);
                            for (size_t i = 0; i < 2 * d; i++)
                                assert_int_equal(idx[i], 0xeeeeeeeeu);
                        }
                    }
                }
                x[where[w]] = saved;
            }
        }
        free(idx);
        free(x);
    }
    assert_int_equal(sl__select_use(SL__SELECT_AUTO), SL_OK);
}

static void test_random_small(void **state)
{
    const size_t sizes[] = {1, 2, 7, 1000, 65537};
    (void)state;
    for (size_t si = 0; si < 5; si++) {
        for (int kind = GAUSS; kind <= HEAVY; kind++) {
            float *x = make(sizes[si], kind, 11 * sizes[si] + (size_t)kind);
            check_ks(x, sizes[si]);
            free(x);
        }
    }
}

static void test_random_large(void **state)
{
    const size_t d = 1000000;
    const int kinds[] = {GAUSS, HEAVY, SPARSE};
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        float *x = make(d, kinds[i], 99 + i);
        check_ks(x, d);
        free(x);
    }
}

/* The first call picks the variant by itself (nothing forced it yet). */
static void test_default_dispatch(void **state)
{
    float x[5] = {1.0f, -4.0f, 2.0f, 0.5f, -3.0f};
    uint32_t idx[2];
    size_t n = 0;
    (void)state;
    assert_int_equal(sl_select(SL_SELECT_EXACT, NULL, x, 5, 2, idx, &n), SL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 4);
    assert_string_equal(sl__select_variant(), sl_cpu_describe(sl_cpu_features()));
}

static void test_adversarial(void **state)
{
    const size_t sizes[] = {1, 2, 7, 1000, 65537};
    (void)state;
    for (int kind = EQUAL; kind < KINDS; kind++) {
        for (size_t si = 0; si < 5; si++) {
            float *x = make(sizes[si], kind, 7 + (uint64_t)kind);
            check_ks(x, sizes[si]);
            free(x);
        }
    }
}

/*
 * Data built against a strided sample (positions i * d / s, the pattern the
 * selectors sample with): the sample sees only large or only small values,
 * so the sampled guesses are wrong and the fallbacks must be right.
 */
static void test_sampling_adversary(void **state)
{
    const size_t d = 262144, strides[] = {16, 61, 256};
    (void)state;
    for (size_t si = 0; si < 3; si++) {
        for (int big_on_sample = 0; big_on_sample < 2; big_on_sample++) {
            float *x = make(d, GAUSS, 5 + si);
            uint32_t *rank;
            for (size_t i = 0; i < d; i++) {
                int on_sample = i % strides[si] == 0;
                x[i] = (on_sample == big_on_sample ? 100.0f : 0.01f) * (1.0f + x[i]);
            }
            rank = ranks(x, d);
            check_all_modes(x, d, d / 100, rank);
            check_all_modes(x, d, d / 8, rank);
            check_all_modes(x, d, d / 4, rank);
            free(rank);
            free(x);
        }
    }
}

static void test_approx_params(void **state)
{
    const size_t d = 65537;
    float *x = make(d, GAUSS, 3);
    uint32_t *rank = ranks(x, d);
    sl_select_params p;
    (void)state;

    sl_select_params_default(&p);
    p.max_iters = 0; /* straight to the exact fallback */
    check_mode(SL_SELECT_REDSYNC, &p, x, d, 655, rank);
    p.max_iters = 1;
    check_mode(SL_SELECT_REDSYNC, &p, x, d, 655, rank);
    p.max_iters = 60;
    p.band_hi = 1.0; /* only exactly k fits */
    check_mode(SL_SELECT_REDSYNC, &p, x, d, 655, rank);
    p.band_hi = 1.05;
    check_mode(SL_SELECT_REDSYNC, &p, x, d, 6553, rank);
    p.band_hi = 1e9;
    check_mode(SL_SELECT_REDSYNC, &p, x, d, 3, rank);

    sl_select_params_default(&p);
    p.sample_fraction = 1.0;
    check_mode(SL_SELECT_DGC, &p, x, d, 655, rank);
    p.sample_fraction = 1e-9; /* at least 1024 samples */
    check_mode(SL_SELECT_DGC, &p, x, d, 655, rank);
    p.overshoot = 1.0;
    check_mode(SL_SELECT_DGC, &p, x, d, 6553, rank);
    p.overshoot = 50.0;
    check_mode(SL_SELECT_DGC, &p, x, d, 10, rank);
    free(rank);
    free(x);
}

/* The kernels themselves, each variant against the scalar reference. */
static void test_kernels(void **state)
{
    const size_t sizes[] = {0, 1, 5, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129, 1000, 4099};
    const uint32_t los[] = {0, 0x3f000000u, 0x3f800000u, 0x40000000u, 0x7f800000u, 0x7fffffffu};
    const sl__select_kernels *ref = sl__select_kernels_for(0);
    float *x = make(4099, GAUSS, 17);
    uint32_t *hist_a = calloc(SL__SELECT_HIST_BINS, sizeof *hist_a);
    uint32_t *hist_b = calloc(SL__SELECT_HIST_BINS, sizeof *hist_b);
    (void)state;
    assert_non_null(ref);
    assert_non_null(hist_a);
    assert_non_null(hist_b);
    x[77] = -x[77] * 3.0f;
    x[4000] = -0.0f;
    for (size_t v = 0; v < n_variants; v++) {
        const sl__select_kernels *kt = sl__select_kernels_for(variants[v]);
        assert_non_null(kt);
        assert_int_equal(kt->features, variants[v]);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            double la[16], lb[16];
            uint32_t ma = 1, mb = 2;
            for (size_t li = 0; li < sizeof los / sizeof los[0]; li++) {
                uint32_t lo = los[li];
                size_t full = ref->count_ge(x, n, lo, &ma);
                assert_int_equal(kt->count_ge(x, n, lo, &mb), full);
                assert_int_equal(ma, mb);
                /* Every capacity from 0 to past the count: overflow is
                 * reported as cap + 1 and nothing is written past cap. */
                for (size_t cap = 0; cap <= full + 2; cap += 1 + cap / 8) {
                    uint32_t ia[4104], ka[4104], ib[4104], kb[4104];
                    size_t ra = ref->filter_ge(x, n, lo, cap, ia, ka, &ma);
                    size_t rb;
                    ib[cap] = kb[cap] = 0x5a5a5a5au;
                    rb = kt->filter_ge(x, n, lo, cap, ib, kb, &mb);
                    assert_int_equal(ra, rb);
                    assert_int_equal(ra, full > cap ? cap + 1 : full);
                    assert_int_equal(ib[cap], 0x5a5a5a5au);
                    assert_int_equal(kb[cap], 0x5a5a5a5au);
                    if (ra <= cap) {
                        assert_int_equal(ma, mb);
                        assert_memory_equal(ia, ib, ra * sizeof ia[0]);
                        assert_memory_equal(ka, kb, ra * sizeof ka[0]);
                        rb = kt->filter_ge(x, n, lo, cap, ib, NULL, &mb);
                        assert_int_equal(ra, rb);
                        assert_memory_equal(ia, ib, ra * sizeof ia[0]);
                    } /* on overflow the stored prefix is unspecified */
                }
            }
            for (int j = 0; j < 16; j++)
                la[j] = lb[j] = 0.25 * j;
            memset(hist_a, 0, SL__SELECT_HIST_BINS * sizeof *hist_a);
            memset(hist_b, 0, SL__SELECT_HIST_BINS * sizeof *hist_b);
            ref->stats(x, n, la, &ma, hist_a);
            kt->stats(x, n, lb, &mb, hist_b);
            assert_int_equal(ma, mb);
            assert_memory_equal(la, lb, sizeof la); /* same bits, not just close */
            assert_memory_equal(hist_a, hist_b, SL__SELECT_HIST_BINS * sizeof *hist_a);
            for (int j = 0; j < 16; j++)
                lb[j] = 0.25 * j;
            mb = 3;
            kt->stats(x, n, lb, &mb, NULL); /* without the histogram */
            assert_int_equal(ma, mb);
            assert_memory_equal(la, lb, sizeof la);
        }
    }
    free(hist_a);
    free(hist_b);
    free(x);
}

static void test_hooks(void **state)
{
    (void)state;
    assert_int_equal(sl__select_use(0), SL_OK);
    assert_string_equal(sl__select_variant(), "scalar");
    assert_int_equal(sl__select_use(SL_CPU_AVX2 | SL_CPU_AVX512), SL_EINVAL);
    assert_int_equal(sl__select_use(8), SL_EINVAL);
#if !defined(SL_X86_SIMD)
    assert_int_equal(sl__select_use(SL_CPU_AVX2), SL_EUNSUPPORTED);
    assert_int_equal(sl__select_use(SL_CPU_AVX512), SL_EUNSUPPORTED);
#endif
#if !defined(SL_NEON)
    assert_int_equal(sl__select_use(SL_CPU_NEON), SL_EUNSUPPORTED);
#endif
    assert_int_equal(sl__select_use(SL__SELECT_AUTO), SL_OK);
    assert_string_equal(sl__select_variant(), sl_cpu_describe(sl_cpu_features()));
}

int main(void)
{
    const unsigned all[4] = {0, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_dispatch),
        cmocka_unit_test(test_params_and_capacity),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_random_small),
        cmocka_unit_test(test_adversarial),
        cmocka_unit_test(test_sampling_adversary),
        cmocka_unit_test(test_approx_params),
        cmocka_unit_test(test_random_large),
    };
    for (size_t i = 0; i < 4; i++)
        if (sl__select_kernels_for(all[i]) != NULL)
            variants[n_variants++] = all[i];
    fprintf(stderr, "select variants:");
    for (size_t i = 0; i < n_variants; i++)
        fprintf(stderr, " %s", sl__select_kernels_for(variants[i])->name);
    fprintf(stderr, "\n");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
