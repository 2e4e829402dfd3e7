/* Aggregation and server optimisers against straightforward references;
 * robustness, determinism, DP noise, state encoding and rejections. */
#include <float.h>
#include <math.h>
#include <zlib.h>

#include "../../support/sl_test.h"
#include "coord_int.h"

#define MAXK 24

static sl_layout *make_layout(const char *text)
{
    sl_layout *l = NULL;
    if (sl_layout_parse(text, strlen(text), &l) != SL_OK)
        abort();
    return l;
}

static sl_layout *small_layout(void)
{
    return make_layout("w1 8 16\nb1 8\nw2 4 8\nb2 4\n"); /* 172 parameters */
}

static double uniform(uint64_t *s)
{
    return (double)(sl_test_rand(s) >> 11) / 9007199254740992.0;
}

/* One update as a frame, and the dense vector it means. */
typedef struct upd {
    void *frame;
    size_t len;
    double *dense;
} upd;

/* Encodes @x where @keep[i] (all when NULL) with fp32 values (lossless). */
static void encode(const sl_layout *l, const float *x, const unsigned char *keep, upd *u)
{
    size_t nt = sl_layout_tensors(l), P = (size_t)sl_layout_params(l);
    sl_sparse_tensor *st = calloc(nt, sizeof *st);
    uint32_t *idx = malloc(P * sizeof *idx);
    float *val = malloc(P * sizeof *val);
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, sl_layout_hash(l), 1, 1, 0};
    sl_encode_params p;
    size_t at = 0;

    u->dense = calloc(P, sizeof *u->dense);
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(l, t);
        st[t].idx = idx + at;
        st[t].val = val + at;
        for (size_t i = 0; i < td->count; i++) {
            size_t flat = (size_t)td->offset + i;
            if (keep == NULL || keep[flat]) {
                idx[at] = (uint32_t)i;
                val[at] = x[flat];
                u->dense[flat] = x[flat];
                at++;
                st[t].n++;
            }
        }
    }
    sl_encode_params_default(&p);
    assert_int_equal(sl_frame_encode_update(l, &h, st, &p, NULL, &u->frame, &u->len), SL_OK);
    free(st);
    free(idx);
    free(val);
}

/* A random sparse update: elements kept with probability @density. */
static void random_update(const sl_layout *l, double density, double scale, uint64_t seed, upd *u)
{
    size_t P = (size_t)sl_layout_params(l);
    float *x = malloc(P * sizeof *x);
    unsigned char *keep = malloc(P);
    seed = seed * 2654435761u + 1;
    for (size_t i = 0; i < P; i++) {
        x[i] = (float)((uniform(&seed) * 2 - 1) * scale);
        keep[i] = uniform(&seed) < density;
    }
    encode(l, x, keep, u);
    free(x);
    free(keep);
}

static void free_upd(upd *u)
{
    free(u->frame);
    free(u->dense);
}

static double dense_norm(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

static double clip_factor(const double *x, size_t n, double clip)
{
    double norm = dense_norm(x, n);
    return clip > 0 && norm > clip ? clip / norm : 1.0;
}

static sl_task_config agg_config(sl_aggregator a, double clip, double trim, double dp)
{
    sl_task_config c;
    char err[128];
    assert_int_equal(sl_task_config_parse("{\"target\":1}", 12, &c, err, sizeof err), SL_OK);
    c.aggregator = a;
    c.clip_norm = clip;
    c.trim_fraction = trim;
    c.dp_noise = dp;
    c.sender_mean_rounds = 0; /* the plain mean (test_sender_mean has the senders') */
    c.sender_mean_epochs = 0;
    return c;
}

/* Runs one aggregation over @u[0..K) and returns the malloc'd delta. */
static double *aggregate(const sl_layout *l, const sl_task_config *c, const upd *u,
                         const uint32_t *w, size_t K, uint64_t seed)
{
    sl__agg *a = NULL;
    double *delta = malloc((size_t)sl_layout_params(l) * sizeof *delta);
    uint32_t count = 0;
    assert_int_equal(sl__agg_begin(c, l, &a), SL_OK);
    for (size_t i = 0; i < K; i++)
        assert_int_equal(sl__agg_add(a, u[i].frame, u[i].len, w ? w[i] : 1), SL_OK);
    assert_int_equal(sl__agg_finish(a, seed, delta, &count), SL_OK);
    assert_int_equal(count, K);
    sl__agg_free(a);
    return delta;
}

static void assert_close(const double *got, const double *want, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("element %zu: got %.17g, want %.17g", i, got[i], want[i]);
}

/* A weight as the fixed-point aggregation takes it: rounded to 2^-@g (0: sample counts, which
 * are integers; 8 under FedBuff), at least one quantum. */
static double fixed_weight(double w, int g)
{
    long long q = llround(ldexp(w, g));
    return ldexp((double)(q > 0 ? q : 1), -g);
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static void test_fedavg_reference(void **state)
{
    (void)state;
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l), K = 9;
    upd u[MAXK];
    uint32_t w[MAXK];
    uint64_t s = 7;

    for (size_t i = 0; i < K; i++) {
        random_update(l, 0.3, 1.0 + (double)i, 100 + i, &u[i]);
        w[i] = 1 + (uint32_t)(sl_test_rand(&s) % 500);
    }
    for (int clipped = 0; clipped < 2; clipped++) {
        double clip = clipped ? 3.0 : 0.0, W = 0, *want = calloc(P, sizeof *want);
        int any_clipped = 0;
        for (size_t i = 0; i < K; i++) {
            double f = clip_factor(u[i].dense, P, clip);
            any_clipped |= f < 1;
            for (size_t j = 0; j < P; j++)
                want[j] += (double)w[i] * f * u[i].dense[j];
            W += w[i];
        }
        for (size_t j = 0; j < P; j++)
            want[j] /= W;
        assert_int_equal(any_clipped, clipped);
        /* the whole FedAvg family aggregates the same way */
        for (sl_aggregator a = SL_AGG_FEDAVG; a <= SL_AGG_FEDADAGRAD; a++) {
            sl_task_config c = agg_config(a, clip, 0, 0);
            double *got = aggregate(l, &c, u, w, K, 0);
            assert_close(got, want, P, 1e-12);
            free(got);
        }
        free(want);
    }
    for (size_t i = 0; i < K; i++) {
        double norm = -1;
        assert_int_equal(sl__update_norm(l, u[i].frame, u[i].len, NULL, NULL, &norm, NULL), SL_OK);
        assert_true(fabs(norm - dense_norm(u[i].dense, P)) <= 1e-12 * norm);
        free_upd(&u[i]);
    }
    sl_layout_free(l);
}

/* Runs one aggregation over @u[order[0..K)] with real-valued weights; the malloc'd delta. */
static double *aggregate_order(const sl_layout *l, const sl_task_config *c, const upd *u,
                               const double *w, const size_t *order, size_t K)
{
    sl__agg *a = NULL;
    double *delta = malloc((size_t)sl_layout_params(l) * sizeof *delta);
    assert_int_equal(sl__agg_begin(c, l, &a), SL_OK);
    for (size_t i = 0; i < K; i++)
        assert_int_equal(sl__agg_add_weighted(a, u[order[i]].frame, u[order[i]].len, w[order[i]]),
                         SL_OK);
    assert_int_equal(sl__agg_finish(a, 0, delta, NULL), SL_OK);
    sl__agg_free(a);
    return delta;
}

static void shuffle(size_t *x, size_t n, uint64_t *s)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(sl_test_rand(s) % i), t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
}

/* The FedAvg family sums in fixed point: any order of the adds, and any split of them into
 * partial sums (one per replica) merged in any order, gives the same bits; within 2^-F of the
 * sum in doubles. Summing in doubles, as before, is order-dependent on the same updates. */
static void test_fixed_point_any_order(void **state)
{
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l), K = 20, order[MAXK];
    upd u[MAXK];
    double w[MAXK];
    uint64_t s = 99;
    int float_differs = 0;
    (void)state;
    for (size_t i = 0; i < K; i++) {
        random_update(l, 0.4, 0.001 + (double)i * 0.5, 500 + i, &u[i]);
        /* sample counts, and FedBuff's discounted ones */
        w[i] = i % 3 ? (double)(1 + sl_test_rand(&s) % 900) : 300.0 / sqrt(1.0 + (double)i);
        order[i] = i;
    }
    for (int clipped = 0; clipped < 2; clipped++) {
        sl_task_config c = agg_config(SL_AGG_FEDAVG, clipped ? 4.0 : 0.0, 0, 0);
        double *ref;
        c.fedbuff = 1; /* FedBuff's weights: 2^-8 */
        ref = aggregate_order(l, &c, u, w, order, K);
        long double *want = calloc(P, sizeof *want), *mass = calloc(P, sizeof *mass), W = 0;
        double quantum = ldexp(1.0, -sl__agg_frac_bits(c.clip_norm));
        /* the reference in long double; the fixed-point result is within 2^-F of the exact
         * mean, plus a rounding of each clipped value s * v to double before it is made an
         * integer, the two roundings to double at its end, and the reference's own error */
        for (size_t i = 0; i < K; i++) {
            long double f = clip_factor(u[i].dense, P, c.clip_norm), wr = fixed_weight(w[i], 8);
            for (size_t j = 0; j < P; j++) {
                want[j] += wr * f * u[i].dense[j];
                mass[j] += wr * fabsl(f * u[i].dense[j]);
            }
            W += wr;
        }
        for (size_t j = 0; j < P; j++) {
            long double x = want[j] / W;
            double tol =
                quantum + 4 * DBL_EPSILON * fabs((double)x) +
                (double)((DBL_EPSILON + (long double)(2 * K) * LDBL_EPSILON) * (mass[j] / W));
            if (!(fabs(ref[j] - (double)x) <= tol))
                fail_msg("coordinate %zu: fixed point %.17g, exact %.17Lg (tolerance %g)", j,
                         ref[j], x, tol);
        }
        free(mass);
        for (int trial = 0; trial < 12; trial++) {
            size_t perm[MAXK], parts = 1 + (size_t)trial % 5, cut[6] = {0};
            double *got, *f_got = calloc(P, sizeof *f_got), *f_ref = calloc(P, sizeof *f_ref);
            memcpy(perm, order, K * sizeof *perm);
            shuffle(perm, K, &s);
            got = aggregate_order(l, &c, u, w, perm, K);
            assert_memory_equal(got, ref, P * sizeof *ref);
            free(got);
            /* doubles summed in this order and in the original one */
            for (size_t i = 0; i < K; i++)
                for (size_t j = 0; j < P; j++) {
                    f_got[j] += w[perm[i]] * u[perm[i]].dense[j];
                    f_ref[j] += w[i] * u[i].dense[j];
                }
            float_differs |= memcmp(f_got, f_ref, P * sizeof *f_got) != 0;
            free(f_got);
            free(f_ref);
            /* @parts replicas each sum a slice of the shuffled updates; the leader merges their
             * partials in a shuffled order */
            {
                sl__agg *rep[6], *leader;
                void *bytes[6];
                size_t blen[6], morder[6];
                double *merged = malloc(P * sizeof *merged);
                uint32_t count = 0;
                for (size_t p = 1; p < parts; p++)
                    cut[p] = (size_t)(sl_test_rand(&s) % (K + 1));
                cut[parts] = K;
                qsort(cut, parts + 1, sizeof cut[0], cmp_size);
                for (size_t p = 0; p < parts; p++) {
                    assert_int_equal(sl__agg_begin(&c, l, &rep[p]), SL_OK);
                    for (size_t i = cut[p]; i < cut[p + 1]; i++)
                        assert_int_equal(sl__agg_add_weighted(rep[p], u[perm[i]].frame,
                                                              u[perm[i]].len, w[perm[i]]),
                                         SL_OK);
                    assert_int_equal(sl__agg_export(rep[p], &bytes[p], &blen[p]), SL_OK);
                    sl__agg_free(rep[p]);
                    morder[p] = p;
                }
                shuffle(morder, parts, &s);
                assert_int_equal(sl__agg_begin(&c, l, &leader), SL_OK);
                for (size_t p = 0; p < parts; p++)
                    assert_int_equal(sl__agg_merge(leader, bytes[morder[p]], blen[morder[p]]),
                                     SL_OK);
                assert_int_equal(sl__agg_finish(leader, 0, merged, &count), SL_OK);
                assert_int_equal(count, K);
                assert_memory_equal(merged, ref, P * sizeof *ref);
                sl__agg_free(leader);
                for (size_t p = 0; p < parts; p++)
                    free(bytes[p]);
                free(merged);
            }
        }
        free(ref);
        free(want);
    }
    /* the same updates summed in doubles: at least one order gave other bits */
    assert_true(float_differs);
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    sl_layout_free(l);
}

/* The bound: a task that does not clip refuses values at or above SL_AGG_VALUE_BOUND (and the
 * aggregation is unchanged); under clipping nothing is refused. Bad partials change nothing. */
static void test_fixed_point_bound(void **state)
{
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l);
    sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
    sl_task_config clipped = agg_config(SL_AGG_FEDAVG, 3.0, 0, 0);
    sl_task_config median = agg_config(SL_AGG_MEDIAN, 0, 0, 0);
    upd ok, big;
    sl__agg *a, *b;
    double *before = malloc(P * sizeof *before), *after = malloc(P * sizeof *after);
    void *part;
    size_t plen;
    uint8_t *bad;
    (void)state;
    random_update(l, 0.5, 1.0, 11, &ok);
    random_update(l, 0.5, 1.0, 12, &big);
    free_upd(&big);
    {
        float *x = calloc(P, sizeof *x);
        x[3] = 65536.0f;
        x[7] = -1.0f;
        encode(l, x, NULL, &big);
        free(x);
    }
    assert_int_equal(sl__agg_frac_bits(0), 46);
    assert_int_equal(sl__agg_frac_bits(3.0), 60); /* 3 < 2^2 */
    assert_int_equal(sl__agg_frac_bits(1e9), 46); /* beyond the bound: the bound */
    assert_true(sl__agg_value_ok(&c, 1e5, 65535.99));
    assert_false(sl__agg_value_ok(&c, 1e5, 65536.0));
    assert_true(sl__agg_value_ok(&clipped, 1e5, 65536.0)); /* clipped to norm 3 */
    assert_true(sl__agg_value_ok(&median, 1e5, 1e30));     /* sorted doubles */

    assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
    assert_int_equal(sl__agg_add(a, ok.frame, ok.len, 10), SL_OK);
    assert_int_equal(sl__agg_finish(a, 0, before, NULL), SL_OK);
    assert_int_equal(sl__agg_add(a, big.frame, big.len, 10), SL_ERANGE);
    assert_int_equal(sl__agg_add_weighted(a, ok.frame, ok.len, 0x1p32), SL_EINVAL);
    assert_int_equal(sl__agg_export(a, &part, &plen), SL_OK);

    /* partials that do not fit: refused, nothing changes */
    bad = malloc(plen);
    memcpy(bad, part, plen);
    bad[0] ^= 1;
    assert_int_equal(sl__agg_merge(a, bad, plen), SL_ECORRUPT);
    memcpy(bad, part, plen);
    assert_int_equal(sl__agg_merge(a, bad, plen - 1), SL_ECORRUPT);
    assert_int_equal(sl__agg_merge(a, bad, 20), SL_ECORRUPT);
    bad[8] ^= 1; /* another model size */
    assert_int_equal(sl__agg_merge(a, bad, plen), SL_ELAYOUT);
    memcpy(bad, part, plen);
    bad[16] ^= 1; /* another bound */
    assert_int_equal(sl__agg_merge(a, bad, plen), SL_ELAYOUT);
    memcpy(bad, part, plen);
    if (plen >= 72 + 2 * 24) { /* the second index not above the first */
        memcpy(bad + 72 + 24, bad + 72, 8);
        assert_int_equal(sl__agg_merge(a, bad, plen), SL_ECORRUPT);
    }
    memcpy(bad, part, plen);
    memset(bad + 32, 0xff, 8); /* weights that would pass 2^64 */
    assert_int_equal(sl__agg_merge(a, bad, plen), SL_ETOOBIG);
    free(bad);
    assert_int_equal(sl__agg_finish(a, 0, after, NULL), SL_OK);
    assert_memory_equal(after, before, P * sizeof *after);
    /* a partial of a clipped task: another bound */
    assert_int_equal(sl__agg_begin(&clipped, l, &b), SL_OK);
    assert_int_equal(sl__agg_merge(b, part, plen), SL_ELAYOUT);
    assert_int_equal(sl__agg_add(b, big.frame, big.len, 10), SL_OK); /* clipped: accepted */
    sl__agg_free(b);
    assert_int_equal(sl__agg_begin(&median, l, &b), SL_OK);
    assert_int_equal(sl__agg_merge(b, part, plen), SL_ESTATE);
    sl__agg_free(b);
    free(part);
    sl__agg_free(a);
    free_upd(&ok);
    free_upd(&big);
    free(before);
    free(after);
    sl_layout_free(l);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Brute force: K dense vectors, every coordinate sorted with its zeros. */
static void ref_robust(sl_aggregator a, double trim, double clip, const upd *u, size_t K, size_t P,
                       double *out)
{
    double col[MAXK], f[MAXK];
    size_t m = (size_t)floor(trim * (double)K + 1e-9);
    for (size_t i = 0; i < K; i++)
        f[i] = clip_factor(u[i].dense, P, clip);
    for (size_t j = 0; j < P; j++) {
        for (size_t i = 0; i < K; i++)
            col[i] = u[i].dense[j] * f[i];
        qsort(col, K, sizeof col[0], cmp_d);
        if (a == SL_AGG_MEDIAN) {
            out[j] = K % 2 ? col[K / 2] : (col[K / 2 - 1] + col[K / 2]) / 2;
        } else {
            double s = 0;
            for (size_t i = m; i < K - m; i++)
                s += col[i];
            out[j] = s / (double)(K - 2 * m);
        }
    }
}

/* FedBuff's real-valued weights (sample count x staleness discount). */
/* sl__agg_add_weighted: real weights, rounded to integers (a task without FedBuff: sample
 * counts) or to 2^-8 (FedBuff's discounted counts), at least one quantum. */
static void test_weighted_add(void **state)
{
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l);
    static const double weights[4] = {10.0, 10.0 / 1.4142135623730951, 5.0 / 2.0, 0.3};
    upd u[4];
    (void)state;
    for (size_t i = 0; i < 4; i++)
        random_update(l, 0.5, 1.0, 300 + i, &u[i]);
    for (int fedbuff = 0; fedbuff < 2; fedbuff++) {
        sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
        sl__agg *a;
        double *got = calloc(P, sizeof *got), *want = calloc(P, sizeof *want), W = 0;
        uint32_t count;
        c.fedbuff = fedbuff;
        for (size_t i = 0; i < 4; i++) {
            double wr = fixed_weight(weights[i], fedbuff ? 8 : 0);
            for (size_t j = 0; j < P; j++)
                want[j] += wr * u[i].dense[j];
            W += wr;
        }
        for (size_t j = 0; j < P; j++)
            want[j] /= W;
        assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(sl__agg_add_weighted(a, u[i].frame, u[i].len, weights[i]), SL_OK);
        assert_int_equal(sl__agg_add_weighted(a, u[0].frame, u[0].len, 0.0), SL_EINVAL);
        assert_int_equal(sl__agg_add_weighted(a, u[0].frame, u[0].len, NAN), SL_EINVAL);
        assert_int_equal(sl__agg_add_weighted(a, u[0].frame, u[0].len, 0x1p32), SL_EINVAL);
        assert_int_equal(sl__agg_finish(a, 0, got, &count), SL_OK);
        assert_int_equal(count, 4);
        assert_close(got, want, P, 1e-12);
        sl__agg_free(a);
        free(got);
        free(want);
    }
    for (size_t i = 0; i < 4; i++) {
        free(u[i].frame);
        free(u[i].dense);
    }
    sl_layout_free(l);
}

/* What devices report cannot make a sum refuse an update the engine acknowledged: the largest
 * sample count (2^32 - 1) many times over (earlier builds took weights at 2^-30 and refused
 * the fifth such update, holding the round's close back), and under FedNova as many local
 * steps as the engine lets through (sl__agg_steps_ok(): effective steps below 2^30; earlier
 * builds refused 2^20). */
static void test_weight_and_steps_bounds(void **state)
{
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l);
    upd u;
    double *one, *got = calloc(P, sizeof *got);
    uint32_t count, big = UINT32_MAX;
    sl__agg *a;
    (void)state;
    random_update(l, 0.5, 1.0, 77, &u);
    for (int fedbuff = 0; fedbuff < 2; fedbuff++) {
        sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
        c.fedbuff = fedbuff;
        one = aggregate(l, &c, &u, NULL, 1, 0);
        assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
        for (int k = 0; k < 64; k++)
            assert_int_equal(fedbuff ? sl__agg_add_weighted(a, u.frame, u.len, (double)big)
                                     : sl__agg_add(a, u.frame, u.len, big),
                             SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, got, &count), SL_OK);
        assert_int_equal(count, 64);
        assert_close(got, one, P, 1e-12); /* the mean of one update, 64 times */
        sl__agg_free(a);
        free(one);
    }
    {
        /* FedNova at SGD momentum 0.9999 (a task stored before the configuration refused it) */
        sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
        uint32_t ok_steps = 100000, too_many = 1000000;
        c.fednova = 1;
        c.local_momentum = 0.9999;
        assert_true(sl__fednova_steps(ok_steps, 0.9999) > 0x1p20);
        assert_true(sl__fednova_steps(ok_steps, 0.9999) < SL_AGG_NOVA_STEPS_BOUND);
        assert_true(sl__fednova_steps(too_many, 0.9999) >= SL_AGG_NOVA_STEPS_BOUND);
        assert_true(sl__agg_steps_ok(&c, ok_steps));
        assert_false(sl__agg_steps_ok(&c, too_many));
        assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
        assert_int_equal(sl__agg_add_steps(a, u.frame, u.len, 10, too_many), SL_ERANGE);
        assert_int_equal(sl__agg_add_steps(a, u.frame, u.len, 10, ok_steps), SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, got, &count), SL_OK);
        assert_int_equal(count, 1); /* the refused add changed nothing */
        sl__agg_free(a);
        c.fednova = 0; /* without FedNova any count of steps is the engine's to bound */
        assert_true(sl__agg_steps_ok(&c, UINT32_MAX));
    }
    free(got);
    free_upd(&u);
    sl_layout_free(l);
}

static void test_robust_reference(void **state)
{
    (void)state;
    static const size_t ks[] = {1, 2, 3, 4, 5, 8, 11, 20};
    static const double trims[] = {0, 0.1, 0.2, 0.34, 0.49};
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l);
    double *want = malloc(P * sizeof *want);
    upd u[MAXK];

    for (size_t i = 0; i < 20; i++) /* densities from sparse to dense */
        random_update(l, 0.1 + 0.045 * (double)i, 1.0 + 0.3 * (double)i, 300 + i, &u[i]);
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        size_t K = ks[ki];
        for (int clipped = 0; clipped < 2; clipped++) {
            double clip = clipped ? 4.0 : 0;
            sl_task_config c = agg_config(SL_AGG_MEDIAN, clip, 0, 0);
            double *got = aggregate(l, &c, u, NULL, K, 0);
            ref_robust(SL_AGG_MEDIAN, 0, clip, u, K, P, want);
            assert_close(got, want, P, 1e-12);
            free(got);
            for (size_t ti = 0; ti < sizeof trims / sizeof trims[0]; ti++) {
                c = agg_config(SL_AGG_TRIMMED_MEAN, clip, trims[ti], 0);
                got = aggregate(l, &c, u, NULL, K, 0);
                ref_robust(SL_AGG_TRIMMED_MEAN, trims[ti], clip, u, K, P, want);
                assert_close(got, want, P, 1e-12);
                free(got);
            }
        }
    }
    for (size_t i = 0; i < 20; i++)
        free_upd(&u[i]);
    free(want);
    sl_layout_free(l);
}

static double rel_error(const double *x, const double *ref, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += (x[i] - ref[i]) * (x[i] - ref[i]);
        r += ref[i] * ref[i];
    }
    return sqrt(d / r);
}

/* 20% of the updates are scaled x100 and sign-flipped: median and trimmed
 * mean barely move, FedAvg is pulled far away. */
static void test_robustness(void **state)
{
    (void)state;
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l), K = 20, bad = 4;
    float *base = malloc(P * sizeof *base), *x = malloc(P * sizeof *x);
    upd u[MAXK];
    uint64_t s = 99;

    for (size_t j = 0; j < P; j++)
        base[j] = (float)(uniform(&s) * 2 - 1);
    for (size_t i = 0; i < K; i++) {
        for (size_t j = 0; j < P; j++) {
            x[j] = base[j] + (float)((uniform(&s) * 2 - 1) * 0.1);
            if (i < bad)
                x[j] *= -100.0f;
        }
        encode(l, x, NULL, &u[i]);
    }
    sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
    double *clean = aggregate(l, &c, u + bad, NULL, K - bad, 0);
    double *avg = aggregate(l, &c, u, NULL, K, 0);
    c = agg_config(SL_AGG_MEDIAN, 0, 0, 0);
    double *med = aggregate(l, &c, u, NULL, K, 0);
    c = agg_config(SL_AGG_TRIMMED_MEAN, 0, 0.2, 0);
    double *trm = aggregate(l, &c, u, NULL, K, 0);

    double e_avg = rel_error(avg, clean, P), e_med = rel_error(med, clean, P),
           e_trm = rel_error(trm, clean, P);
    if (!(e_med < 0.1 && e_trm < 0.1 && e_avg > 10))
        fail_msg("relative errors: median %g, trimmed %g, fedavg %g", e_med, e_trm, e_avg);
    free(clean);
    free(avg);
    free(med);
    free(trm);
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    free(base);
    free(x);
    sl_layout_free(l);
}

static void test_determinism(void **state)
{
    (void)state;
    static const sl_aggregator aggs[] = {SL_AGG_FEDAVG, SL_AGG_TRIMMED_MEAN, SL_AGG_MEDIAN};
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l), K = 12;
    upd u[MAXK];
    uint32_t w[MAXK];

    for (size_t i = 0; i < K; i++) {
        random_update(l, 0.4, 2.0, 500 + i, &u[i]);
        w[i] = 10 + (uint32_t)i * 7;
    }
    for (size_t ai = 0; ai < 3; ai++) {
        sl_task_config c = agg_config(aggs[ai], 2.0, 0.25, 0.5);
        double *a = aggregate(l, &c, u, w, K, 42);
        double *b = aggregate(l, &c, u, w, K, 42);
        double *other = aggregate(l, &c, u, w, K, 43);
        assert_memory_equal(a, b, P * sizeof *a);
        assert_memory_not_equal(a, other, P * sizeof *a);

        /* adding after a finish gives what adding everything first gives */
        sl__agg *g = NULL;
        double *c2 = malloc(P * sizeof *c2);
        assert_int_equal(sl__agg_begin(&c, l, &g), SL_OK);
        for (size_t i = 0; i < K; i++) {
            assert_int_equal(sl__agg_add(g, u[i].frame, u[i].len, w[i]), SL_OK);
            if (i == K / 2)
                assert_int_equal(sl__agg_finish(g, 1, c2, NULL), SL_OK);
        }
        assert_int_equal(sl__agg_finish(g, 42, c2, NULL), SL_OK);
        assert_memory_equal(a, c2, P * sizeof *a);
        sl__agg_free(g);
        free(c2);
        free(a);
        free(b);
        free(other);
    }
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    sl_layout_free(l);
}

/* The noise: sigma = dp_noise * clip / K, zero mean, on a large vector. */
static void test_dp_noise(void **state)
{
    (void)state;
    sl_layout *l = make_layout("big 200001\n");
    size_t P = (size_t)sl_layout_params(l), K = 4;
    upd u[4];

    for (size_t i = 0; i < K; i++)
        random_update(l, 0.01, 0.1, 900 + i, &u[i]);
    sl_task_config quiet = agg_config(SL_AGG_FEDAVG, 1.0, 0, 0);
    sl_task_config noisy = agg_config(SL_AGG_FEDAVG, 1.0, 0, 2.0);
    double *base = aggregate(l, &quiet, u, NULL, K, 5);
    double *x = aggregate(l, &noisy, u, NULL, K, 5);
    double sum = 0, sq = 0, sigma = 2.0 * 1.0 / (double)K;
    for (size_t i = 0; i < P; i++) {
        double n = x[i] - base[i];
        sum += n;
        sq += n * n;
    }
    double mean = sum / (double)P, sd = sqrt(sq / (double)P - mean * mean);
    if (!(fabs(sd - sigma) < 0.01 * sigma && fabs(mean) < 0.01 * sigma))
        fail_msg("noise mean %g sd %g, want 0 and %g", mean, sd, sigma);
    free(base);
    free(x);
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    sl_layout_free(l);
}

static void test_agg_rejections(void **state)
{
    (void)state;
    sl_layout *l = small_layout(), *other = make_layout("w1 8 16\nb1 9\n");
    size_t P = (size_t)sl_layout_params(l);
    sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
    double *delta = malloc(P * sizeof *delta), *clean;
    sl__agg *a = NULL;
    upd u[2], alien;
    uint32_t count;

    random_update(l, 0.5, 1.0, 1, &u[0]);
    random_update(l, 0.5, 1.0, 2, &u[1]);
    random_update(other, 0.5, 1.0, 3, &alien);
    clean = aggregate(l, &c, u, NULL, 2, 0);

    for (int robust = 0; robust < 2; robust++) {
        c = agg_config(robust ? SL_AGG_MEDIAN : SL_AGG_FEDAVG, 0, 0, 0);
        assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
        memset(delta, 0xcd, P * sizeof *delta);
        count = 77;
        assert_int_equal(sl__agg_finish(a, 0, delta, &count), SL_ESTATE);
        assert_int_equal(count, 77);
        for (size_t i = 0; i < P * sizeof *delta; i++) /* nothing written */
            assert_true(((unsigned char *)delta)[i] == 0xcd);
        assert_int_equal(sl__agg_add(a, u[0].frame, u[0].len, 1), SL_OK);
        /* malformed frames: truncated, a flipped byte, another layout, nothing */
        assert_int_not_equal(sl__agg_add(a, u[1].frame, u[1].len - 1, 1), SL_OK);
        unsigned char *bytes = u[1].frame;
        bytes[u[1].len / 2] ^= 0x40;
        assert_int_not_equal(sl__agg_add(a, u[1].frame, u[1].len, 1), SL_OK);
        bytes[u[1].len / 2] ^= 0x40;
        assert_int_equal(sl__agg_add(a, alien.frame, alien.len, 1), SL_ELAYOUT);
        assert_int_equal(sl__agg_add(a, u[1].frame, 0, 1), SL_ETRUNCATED);
        assert_int_equal(sl__agg_add(a, u[1].frame, u[1].len, 0), SL_EINVAL);
        assert_int_equal(sl__agg_add(a, NULL, 10, 1), SL_EINVAL);
        assert_int_equal(sl__agg_add(a, u[1].frame, u[1].len, 1), SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, delta, &count), SL_OK);
        assert_int_equal(count, 2); /* the rejected ones added nothing */
        if (!robust)
            assert_memory_equal(delta, clean, P * sizeof *delta);
        else /* median of two = their mean */
            assert_close(delta, clean, P, 1e-12);
        sl__agg_free(a);
        a = NULL;
    }
    c.dp_noise = 1; /* without clip_norm */
    assert_int_equal(sl__agg_begin(&c, l, &a), SL_EINVAL);
    c = agg_config(SL_AGG_FEDAVG, 0, 0.5, 0);
    assert_int_equal(sl__agg_begin(&c, l, &a), SL_EINVAL);
    assert_null(a);
    double norm;
    assert_int_equal(sl__update_norm(l, alien.frame, alien.len, NULL, NULL, &norm, NULL),
                     SL_ELAYOUT);
    sl__agg_free(NULL);

    free_upd(&u[0]);
    free_upd(&u[1]);
    free_upd(&alien);
    free(delta);
    free(clean);
    sl_layout_free(l);
    sl_layout_free(other);
}

/* Reference optimisers, written out from the paper's equations. */
typedef struct ref_state {
    double m[64], v[64];
    int started;
} ref_state;

static void ref_apply(const sl_task_config *c, const double *d, size_t n, float *w, ref_state *r)
{
    if (!r->started) {
        for (size_t i = 0; i < n; i++) {
            r->m[i] = 0;
            r->v[i] = c->tau * c->tau;
        }
        r->started = 1;
    }
    for (size_t i = 0; i < n; i++) {
        double step = d[i], d2 = d[i] * d[i];
        switch (c->aggregator) {
        case SL_AGG_FEDAVGM:
            r->m[i] = c->server_momentum * r->m[i] + d[i];
            step = r->m[i];
            break;
        case SL_AGG_FEDADAM:
            r->m[i] = c->beta1 * r->m[i] + (1 - c->beta1) * d[i];
            r->v[i] = c->beta2 * r->v[i] + (1 - c->beta2) * d2;
            step = r->m[i] / (sqrt(r->v[i]) + c->tau);
            break;
        case SL_AGG_FEDYOGI: {
            double sg = r->v[i] > d2 ? 1 : r->v[i] < d2 ? -1 : 0;
            r->m[i] = c->beta1 * r->m[i] + (1 - c->beta1) * d[i];
            r->v[i] = r->v[i] - (1 - c->beta2) * d2 * sg;
            step = r->m[i] / (sqrt(r->v[i]) + c->tau);
            break;
        }
        case SL_AGG_FEDADAGRAD:
            r->v[i] = r->v[i] + d2;
            step = d[i] / (sqrt(r->v[i]) + c->tau);
            break;
        default:
            break;
        }
        w[i] = (float)((double)w[i] + c->server_lr * step);
    }
}

static void reencode(sl_server_state *st, size_t n)
{
    void *bytes = NULL;
    size_t len = 0;
    sl_server_state back = {0};
    assert_int_equal(sl_server_state_encode(st, &bytes, &len), SL_OK);
    assert_int_equal(sl_server_state_decode(bytes, len, n, &back), SL_OK);
    sl_server_state_free(st);
    *st = back;
    free(bytes);
}

static void test_server_optimisers(void **state)
{
    (void)state;
    enum { N = 37, STEPS = 6 };
    for (sl_aggregator a = SL_AGG_FEDAVG; a <= SL_AGG_MEDIAN; a++) {
        sl_task_config c = agg_config(a, 0, 0, 0);
        sl_server_state st = {0}, st2 = {0};
        ref_state r = {{0}, {0}, 0};
        float w[N], w_ref[N], w2[N];
        double d[N];
        uint64_t s = 1234 + (uint64_t)a;

        c.server_lr = a >= SL_AGG_FEDADAM && a <= SL_AGG_FEDADAGRAD ? 0.01 : 0.7;
        /* distinct values, so a rule reading the wrong parameter shows */
        c.server_momentum = 0.8;
        c.beta1 = 0.85;
        c.beta2 = 0.97;
        c.tau = 1e-2;
        for (size_t i = 0; i < N; i++)
            w[i] = w_ref[i] = w2[i] = (float)(uniform(&s) - 0.5);
        for (int t = 0; t < STEPS; t++) {
            for (size_t i = 0; i < N; i++) /* some steps make v cross delta^2 both ways */
                d[i] = (uniform(&s) - 0.5) * (t % 3 == 2 ? 0.001 : 0.2);
            assert_int_equal(sl_server_apply(&c, d, N, w, &st), SL_OK);
            ref_apply(&c, d, N, w_ref, &r);
            for (size_t i = 0; i < N; i++)
                if (fabsf(w[i] - w_ref[i]) > 1e-6f * (1 + fabsf(w_ref[i])))
                    fail_msg("%s step %d element %zu: %.9g vs %.9g", sl_aggregator_name(a), t, i,
                             (double)w[i], (double)w_ref[i]);
            /* the same steps through encode -> decode of the state */
            assert_int_equal(sl_server_apply(&c, d, N, w2, &st2), SL_OK);
            reencode(&st2, N);
            assert_memory_equal(w, w2, sizeof w);
        }
        assert_true(st.steps == STEPS && st2.steps == STEPS);
        assert_true((st.m != NULL) ==
                    (a == SL_AGG_FEDAVGM || a == SL_AGG_FEDADAM || a == SL_AGG_FEDYOGI));
        assert_true((st.v != NULL) == (a >= SL_AGG_FEDADAM && a <= SL_AGG_FEDADAGRAD));
        if (st.m != NULL)
            assert_memory_equal(st.m, st2.m, N * sizeof(double));
        if (st.v != NULL)
            assert_memory_equal(st.v, st2.v, N * sizeof(double));
        sl_server_state_free(&st);
        sl_server_state_free(&st2);
    }
}

/* The server learning rate ramp: server_lr times server_lr_boost at the first aggregate
 * (version 1's), the factor moving linearly to 1, reached at aggregate ramp + 1; off,
 * server_lr throughout. */
static void test_server_lr_ramp(void **state)
{
    sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
    (void)state;
    c.server_lr_ramp = 0;
    assert_float_equal(sl_server_lr_at(&c, 1), 1.0, 0); /* ramp 0: server_lr */
    c.server_lr = 0.5;
    c.server_lr_boost = 2.5;
    c.server_lr_ramp = 4;
    assert_float_equal(sl_server_lr_at(&c, 1), 1.25, 1e-15);
    assert_float_equal(sl_server_lr_at(&c, 2), 1.0625, 1e-15);
    assert_float_equal(sl_server_lr_at(&c, 3), 0.875, 1e-15);
    assert_float_equal(sl_server_lr_at(&c, 4), 0.6875, 1e-15);
    assert_float_equal(sl_server_lr_at(&c, 5), 0.5, 0);
    assert_float_equal(sl_server_lr_at(&c, 1000), 0.5, 0);
    assert_float_equal(sl_server_lr_at(&c, 0), 0.5, 0); /* no aggregate makes version 1 */
    c.server_lr_boost = 0.5; /* a warm-up from below works the same way */
    assert_float_equal(sl_server_lr_at(&c, 1), 0.25, 1e-15);
    assert_float_equal(sl_server_lr_at(&c, 3), 0.375, 1e-15);
    c.server_lr_ramp = 0;
    assert_float_equal(sl_server_lr_at(&c, 1), 0.5, 0);
}

/* Updates @u (weights @w) 0, 2, 4, ... and 1, 3, 5, ... of @k as two exported partial sums. */
static void two_partials(const sl_task_config *c, const sl_layout *l, const upd *u,
                         const uint32_t *w, size_t k, void **part, size_t *plen)
{
    for (int p = 0; p < 2; p++) {
        sl__agg *a;
        assert_int_equal(sl__agg_begin(c, l, &a), SL_OK);
        for (size_t i = (size_t)p; i < k; i += 2)
            assert_int_equal(sl__agg_add(a, u[i].frame, u[i].len, w[i]), SL_OK);
        assert_int_equal(sl__agg_export(a, &part[p], &plen[p]), SL_OK);
        sl__agg_free(a);
    }
}

/* The senders' mean (#23): each coordinate divided by (1 - a) W + a S_j, S_j the weights of
 * the updates that sent it, against a reference in doubles; a = 0 is the plain mean bit for
 * bit; any order and any split into partials give the same bits; partials of the two kinds
 * do not mix; the weight's schedule by participations (sl_sender_mean_at). */
static void test_sender_mean(void **state)
{
    enum { K = 5 };
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l);
    sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0), plain = c;
    static const uint32_t w[K] = {7, 30, 1, 12, 50};
    static const double weights[] = {1.0, 0.75, 0.3};
    upd u[K];
    sl__agg *a, *b;
    double *got = malloc(P * sizeof *got), *base = malloc(P * sizeof *base);
    double *again = malloc(P * sizeof *again);
    void *part[2];
    size_t plen[2];
    size_t one_sender = 0;
    (void)state;
    c.sender_mean_rounds = 4;
    c.sender_mean = 1;
    assert_true(sl_sender_mean_length(&c) == 4.0); /* the helper set epochs 0 */
    for (size_t i = 0; i < K; i++)
        random_update(l, 0.3, 1.0, 900 + i, &u[i]);

    /* a = 0 (the default weight, or set): the plain mean, bit for bit */
    assert_int_equal(sl__agg_begin(&plain, l, &b), SL_OK);
    assert_int_equal(sl__agg_sender_mean(b, 0.5), SL_ESTATE); /* begun without the sums */
    assert_int_equal(sl__agg_sender_mean(b, 0), SL_OK);
    for (size_t i = 0; i < K; i++)
        assert_int_equal(sl__agg_add(b, u[i].frame, u[i].len, w[i]), SL_OK);
    assert_int_equal(sl__agg_finish(b, 0, base, NULL), SL_OK);
    sl__agg_free(b);
    assert_int_equal(sl__agg_begin(&c, l, &a), SL_OK);
    for (size_t i = 0; i < K; i++)
        assert_int_equal(sl__agg_add(a, u[i].frame, u[i].len, w[i]), SL_OK);
    assert_int_equal(sl__agg_finish(a, 0, got, NULL), SL_OK);
    assert_memory_equal(got, base, P * sizeof *got);
    assert_int_equal(sl__agg_sender_mean(a, 1.5), SL_EINVAL);
    assert_int_equal(sl__agg_sender_mean(a, -0.25), SL_EINVAL);
    assert_int_equal(sl__agg_sender_mean(a, NAN), SL_EINVAL);

    for (size_t wi = 0; wi < sizeof weights / sizeof weights[0]; wi++) {
        double al = weights[wi], W = 0;
        for (size_t i = 0; i < K; i++)
            W += w[i];
        assert_int_equal(sl__agg_sender_mean(a, al), SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, got, NULL), SL_OK);
        for (size_t j = 0; j < P; j++) {
            double num = 0, S = 0, want;
            size_t senders = 0;
            for (size_t i = 0; i < K; i++)
                if (u[i].dense[j] != 0) {
                    num += w[i] * u[i].dense[j];
                    S += w[i];
                    senders++;
                }
            want = S > 0 ? num / ((1 - al) * W + al * S) : 0;
            if (fabs(got[j] - want) > 1e-12 * (1 + fabs(want)))
                fail_msg("a %g, coordinate %zu: %.17g, want %.17g", al, j, got[j], want);
            if (al == 1.0 && senders == 1) { /* a lone sender's value, whole */
                for (size_t i = 0; i < K; i++)
                    if (u[i].dense[j] != 0)
                        assert_float_equal(got[j], u[i].dense[j], 1e-12);
                one_sender++;
            }
        }
        /* the reverse order and a split into two partials: the same bits */
        assert_int_equal(sl__agg_begin(&c, l, &b), SL_OK);
        for (size_t i = K; i-- > 0;)
            assert_int_equal(sl__agg_add(b, u[i].frame, u[i].len, w[i]), SL_OK);
        assert_int_equal(sl__agg_sender_mean(b, al), SL_OK);
        assert_int_equal(sl__agg_finish(b, 0, again, NULL), SL_OK);
        assert_memory_equal(again, got, P * sizeof *got);
        sl__agg_free(b);
        two_partials(&c, l, u, w, K, part, plen);
        assert_int_equal(sl__agg_begin(&c, l, &b), SL_OK);
        for (int p = 0; p < 2; p++)
            assert_int_equal(sl__agg_merge(b, part[p], plen[p]), SL_OK);
        assert_int_equal(sl__agg_sender_mean(b, al), SL_OK);
        assert_int_equal(sl__agg_finish(b, 0, again, NULL), SL_OK);
        assert_memory_equal(again, got, P * sizeof *got);
        sl__agg_free(b);
        if (wi == 0) {
            uint8_t *bad = malloc(plen[0]);
            /* a plain partial and one with the senders' sums do not mix */
            assert_int_equal(sl__agg_begin(&plain, l, &b), SL_OK);
            assert_int_equal(sl__agg_merge(b, part[0], plen[0]), SL_ELAYOUT);
            assert_int_equal(sl__agg_add(b, u[0].frame, u[0].len, w[0]), SL_OK);
            free(part[1]);
            assert_int_equal(sl__agg_export(b, &part[1], &plen[1]), SL_OK);
            sl__agg_free(b);
            assert_int_equal(sl__agg_merge(a, part[1], plen[1]), SL_ELAYOUT);
            /* a sender's sum above the partial's weights: corrupt, nothing changes */
            memcpy(bad, part[0], plen[0]);
            memset(bad + 72 + 24, 0xff, 8);
            assert_int_equal(sl__agg_merge(a, bad, plen[0]), SL_ECORRUPT);
            memcpy(bad, part[0], plen[0]);
            assert_int_equal(sl__agg_merge(a, bad, plen[0] - 8), SL_ECORRUPT);
            free(bad);
            assert_int_equal(sl__agg_finish(a, 0, again, NULL), SL_OK);
            assert_memory_equal(again, got, P * sizeof *got);
        }
        free(part[0]);
        free(part[1]);
    }
    assert_true(one_sender > 10); /* the density makes lone senders common */

    { /* sender_mean_fresh: the coordinates a skip set names are divided by W, the rest as
         before; what the updates sent is the carried set; the same bits from partials */
        uint8_t *skip = calloc((P + 7) / 8, 1), *carried = malloc((P + 7) / 8 + 1);
        double W = 0, al = 0.75;
        size_t skipped = 0, kept = 0;
        for (size_t i = 0; i < K; i++)
            W += w[i];
        for (size_t j = 0; j < P; j += 3)
            skip[j / 8] |= (uint8_t)(1u << (j % 8));
        assert_int_equal(sl__agg_carried(a, carried), SL_OK);
        for (size_t j = 0; j < P; j++) {
            int sent = 0;
            for (size_t i = 0; i < K; i++)
                sent |= u[i].dense[j] != 0;
            if (((carried[j / 8] >> (j % 8)) & 1) != sent)
                fail_msg("carried bit %zu: %d, sent %d", j, (carried[j / 8] >> (j % 8)) & 1, sent);
        }
        if (P % 8 != 0)
            assert_int_equal(carried[P / 8] >> (P % 8), 0); /* no bits past P */
        assert_int_equal(sl__agg_sender_mean(a, al), SL_OK);
        assert_int_equal(sl__agg_sender_mean_skip(a, skip), SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, got, NULL), SL_OK);
        for (size_t j = 0; j < P; j++) {
            double num = 0, S = 0, want;
            for (size_t i = 0; i < K; i++)
                if (u[i].dense[j] != 0) {
                    num += w[i] * u[i].dense[j];
                    S += w[i];
                }
            if ((skip[j / 8] >> (j % 8)) & 1) {
                want = num / W; /* the mean of all */
                skipped += S > 0 && S < W;
            } else {
                want = S > 0 ? num / ((1 - al) * W + al * S) : 0;
                kept += S > 0 && S < W;
            }
            if (fabs(got[j] - want) > 1e-12 * (1 + fabs(want)))
                fail_msg("skip, coordinate %zu: %.17g, want %.17g", j, got[j], want);
        }
        assert_true(skipped > 5 && kept > 5); /* both kinds were there to tell apart */
        two_partials(&c, l, u, w, K, part, plen);
        assert_int_equal(sl__agg_begin(&c, l, &b), SL_OK);
        for (int p = 0; p < 2; p++) {
            assert_int_equal(sl__agg_merge(b, part[p], plen[p]), SL_OK);
            free(part[p]);
        }
        assert_int_equal(sl__agg_sender_mean(b, al), SL_OK);
        assert_int_equal(sl__agg_sender_mean_skip(b, skip), SL_OK);
        assert_int_equal(sl__agg_finish(b, 0, again, NULL), SL_OK);
        assert_memory_equal(again, got, P * sizeof *got);
        sl__agg_free(b);
        /* no skip set: the senders' mean as before */
        assert_int_equal(sl__agg_sender_mean_skip(a, NULL), SL_OK);
        assert_int_equal(sl__agg_finish(a, 0, again, NULL), SL_OK);
        assert_memory_not_equal(again, got, P * sizeof *got);
        /* an aggregation without the senders' sums has neither */
        assert_int_equal(sl__agg_begin(&plain, l, &b), SL_OK);
        assert_int_equal(sl__agg_sender_mean_skip(b, skip), SL_ESTATE);
        assert_int_equal(sl__agg_sender_mean_skip(b, NULL), SL_OK);
        assert_int_equal(sl__agg_carried(b, carried), SL_ESTATE);
        sl__agg_free(b);
        free(skip);
        free(carried);
    }
    sl__agg_free(a);

    /* the schedule: sender_mean while the devices have sent one update each, 0 from rounds + 1
     * updates each on; fractional participations in between; none yet counts as one */
    c.sender_mean = 0.8;
    assert_float_equal(sl_sender_mean_at(&c, 1), 0.8, 0);
    assert_float_equal(sl_sender_mean_at(&c, 2), 0.6, 1e-15);
    assert_float_equal(sl_sender_mean_at(&c, 2.5), 0.5, 1e-15);
    assert_float_equal(sl_sender_mean_at(&c, 4), 0.2, 1e-15);
    assert_float_equal(sl_sender_mean_at(&c, 4.75), 0.05, 1e-15);
    assert_float_equal(sl_sender_mean_at(&c, 5), 0.0, 0);
    assert_float_equal(sl_sender_mean_at(&c, 40), 0.0, 0);
    assert_float_equal(sl_sender_mean_at(&c, 0), 0.8, 0);
    assert_float_equal(sl_sender_mean_at(&c, 0.5), 0.8, 0);
    assert_float_equal(sl_sender_mean_at(&c, NAN), 0.8, 0);
    /* its progress: participations alone, or times their share of the task's rounds; when
     * every device reported to every round, the same either way, exactly */
    c.sender_mean_share = 0;
    c.sender_mean_partial = 0;
    assert_float_equal(sl_sender_mean_progress(&c, 2, 5), 2.0, 0);
    c.sender_mean_partial = 5; /* sender_mean_partial counts the share too */
    assert_float_equal(sl_sender_mean_progress(&c, 2, 5), 0.8, 1e-15);
    c.sender_mean_partial = 0;
    c.sender_mean_share = 1;
    assert_float_equal(sl_sender_mean_progress(&c, 2, 5), 0.8, 1e-15);    /* 2 x 2/5 */
    assert_float_equal(sl_sender_mean_progress(&c, 5, 5), 5.0, 0);        /* share 1 */
    assert_float_equal(sl_sender_mean_progress(&c, 3, 0), 3.0, 0);        /* round 1 */
    assert_float_equal(sl_sender_mean_progress(&c, NAN, 4), 0.25, 1e-15); /* 1 x 1/4 */
    assert_float_equal(sl_sender_mean_progress(&c, 6, 10), 3.6, 1e-15);
    assert_float_equal(sl_sender_mean_at(&c, sl_sender_mean_progress(&c, 6, 10)), 0.28, 1e-15);
    for (int k = 1; k <= 40; k++)
        assert_true(sl_sender_mean_progress(&c, (double)k, k) == (double)k);
    c.sender_mean_rounds = 0;
    assert_float_equal(sl_sender_mean_at(&c, 1), 0.0, 0);
    /* by local epochs: sender_mean_epochs / local_epochs participations, the same rule */
    c.sender_mean_epochs = 8;
    c.local_epochs = 2;
    c.sender_mean = 1;
    assert_float_equal(sl_sender_mean_length(&c), 4.0, 0);
    assert_float_equal(sl_sender_mean_at(&c, 2), 0.75, 0);
    assert_float_equal(sl_sender_mean_at(&c, 5), 0.0, 0);
    c.local_epochs = 3;
    assert_float_equal(sl_sender_mean_at(&c, 2), 1.0 - 3.0 / 8.0, 1e-15);
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    free(got);
    free(base);
    free(again);
    sl_layout_free(l);
}

static void test_server_rejections(void **state)
{
    (void)state;
    sl_task_config c = agg_config(SL_AGG_FEDADAM, 0, 0, 0);
    sl_server_state st = {0};
    float w[4] = {1, 2, 3, 4}, w0[4];
    double d[4] = {0.1, 0.2, 0.3, 0.4}, bad[4] = {0.1, NAN, 0.3, 0.4};

    assert_int_equal(sl_server_apply(&c, d, 4, w, NULL), SL_EINVAL);
    assert_int_equal(sl_server_apply(&c, d, 4, w, &st), SL_OK);
    memcpy(w0, w, sizeof w);
    double m1 = st.m[1], v1 = st.v[1];
    assert_int_equal(sl_server_apply(&c, bad, 4, w, &st), SL_ENONFINITE);
    assert_memory_equal(w, w0, sizeof w); /* nothing changed */
    assert_true(st.m[1] == m1 && st.v[1] == v1 && st.steps == 1);
    bad[1] = 1e300; /* overflows the float model */
    c.aggregator = SL_AGG_FEDAVG;
    assert_int_equal(sl_server_apply(&c, bad, 4, w, &st), SL_ENONFINITE);
    assert_memory_equal(w, w0, sizeof w);
    assert_int_equal(sl_server_apply(&c, d, 3, w, &st), SL_EINVAL); /* another size */
    sl_server_state_free(&st);
    sl_server_state_free(NULL);
}

static void fix_crc(unsigned char *b, size_t len)
{
    uLong crc = crc32(crc32(0L, Z_NULL, 0), b, (uInt)(len - 4));
    for (int i = 0; i < 4; i++)
        b[len - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
}

static int decode_copy(const unsigned char *b, size_t len, size_t n)
{
    /* an exact-size copy, so ASan sees any over-read */
    unsigned char *copy = malloc(len ? len : 1);
    sl_server_state out = {0};
    memcpy(copy, b, len);
    int rc = sl_server_state_decode(copy, len, n, &out);
    free(copy);
    if (rc == SL_OK)
        sl_server_state_free(&out);
    return rc;
}

/* The carried section (sender_mean_fresh): a state with it round-trips as version 2, one
 * without it is written as version 1 as before; its bits past n, its devices out of order, a
 * wrong device count and every flipped bit are refused. */
static void test_state_carried(void **state)
{
    enum { N = 13 };
    sl_task_config c = agg_config(SL_AGG_FEDAVGM, 0, 0, 0);
    sl_server_state st = {0}, back = {0};
    float w[N] = {0};
    double d[N];
    unsigned char *b = NULL, *v1 = NULL;
    size_t len = 0, len1 = 0;
    int64_t devices[3] = {4, 9, 1000000000000LL};
    (void)state;
    for (size_t i = 0; i < N; i++)
        d[i] = (double)i - 6.5;
    assert_int_equal(sl_server_apply(&c, d, N, w, &st), SL_OK);
    assert_int_equal(sl_server_state_encode(&st, (void **)&v1, &len1), SL_OK);
    assert_int_equal(v1[4], 1); /* without the section: version 1, as before */
    assert_int_equal(len1, 24 + 8 * N + 4);
    st.carried = calloc(2, 1);
    st.carried[0] = 0xa5;
    st.carried[1] = 0x1f | 0xe0; /* bits 13-15 are past n: not written */
    st.devices = malloc(sizeof devices);
    memcpy(st.devices, devices, sizeof devices);
    st.ndevices = 3;
    assert_int_equal(sl_server_state_encode(&st, (void **)&b, &len), SL_OK);
    assert_int_equal(b[4], 2);
    assert_int_equal(b[5], 0x1 | 0x4);
    assert_int_equal(len, 24 + 8 * N + 2 + 8 + 3 * 8 + 4);
    assert_int_equal(sl_server_state_decode(b, len, N, &back), SL_OK);
    assert_non_null(back.m);
    assert_memory_equal(back.m, st.m, N * sizeof(double));
    assert_int_equal(back.carried[0], 0xa5);
    assert_int_equal(back.carried[1], 0x1f);
    assert_int_equal(back.ndevices, 3);
    assert_memory_equal(back.devices, devices, sizeof devices);
    sl_server_state_free(&back);
    assert_int_equal(decode_copy(b, len, N), SL_OK);
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(decode_copy(b, cut, N), SL_OK);
    for (size_t i = 0; i < len; i++) { /* every single flipped bit is caught */
        b[i] ^= (unsigned char)(1u << (i % 8));
        assert_int_not_equal(decode_copy(b, len, N), SL_OK);
        b[i] ^= (unsigned char)(1u << (i % 8));
    }
    {
        size_t at = 24 + 8 * N; /* the bits */
        b[at + 1] |= 0x80;      /* a bit past n */
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
        b[at + 1] &= 0x7f;
        memcpy(b + at + 2 + 8 + 8, &devices[0], 8); /* devices 4, 4: not ascending */
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
        memcpy(b + at + 2 + 8 + 8, &devices[1], 8);
        b[at + 2] = 4; /* one device more than there are */
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_ETRUNCATED);
        b[at + 2] = 2; /* one fewer: bytes left over */
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
        b[at + 2] = 3;
        b[5] = 0x1; /* version 2 without the section's flag */
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
        b[5] = 0x5;
        fix_crc(b, len);
        assert_int_equal(decode_copy(b, len, N), SL_OK);
        v1[5] |= 0x4; /* version 1 with it */
        fix_crc(v1, len1);
        assert_int_equal(decode_copy(v1, len1, N), SL_ECORRUPT);
    }
    /* the section alone (FedAvg keeps no vectors), and refused encodes */
    free(st.m);
    st.m = NULL;
    free(b);
    assert_int_equal(sl_server_state_encode(&st, (void **)&b, &len), SL_OK);
    assert_int_equal(len, 24 + 2 + 8 + 3 * 8 + 4);
    assert_int_equal(sl_server_state_decode(b, len, N, &back), SL_OK);
    assert_null(back.m);
    assert_int_equal(back.ndevices, 3);
    sl_server_state_free(&back);
    st.devices[2] = 9; /* not ascending */
    assert_int_equal(sl_server_state_encode(&st, (void **)&v1, &len1), SL_EINVAL);
    st.n = 0;
    assert_int_equal(sl_server_state_encode(&st, (void **)&v1, &len1), SL_EINVAL);
    free(b);
    free(v1);
    sl_server_state_free(&st);
}

static void test_state_decode_rejections(void **state)
{
    (void)state;
    enum { N = 5 };
    sl_task_config c = agg_config(SL_AGG_FEDYOGI, 0, 0, 0);
    sl_server_state st = {0};
    float w[N] = {0};
    double d[N] = {1, -2, 3, -4, 5};
    unsigned char *b = NULL;
    size_t len = 0;
    uint64_t s = 3;

    assert_int_equal(sl_server_apply(&c, d, N, w, &st), SL_OK);
    assert_int_equal(sl_server_state_encode(&st, (void **)&b, &len), SL_OK);
    assert_int_equal(len, 24 + 2 * 8 * N + 4);
    assert_int_equal(decode_copy(b, len, N), SL_OK);
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(decode_copy(b, cut, N), SL_OK);
    assert_int_equal(decode_copy(b, len, N + 1), SL_ELAYOUT);
    for (size_t i = 0; i < len; i++) { /* every single flipped bit is caught */
        b[i] ^= (unsigned char)(1u << (i % 8));
        assert_int_not_equal(decode_copy(b, len, N), SL_OK);
        b[i] ^= (unsigned char)(1u << (i % 8));
    }
    for (int t = 0; t < 200; t++) { /* garbage, with and without a valid header */
        unsigned char junk[128];
        size_t jl = (size_t)(sl_test_rand(&s) % sizeof junk);
        for (size_t i = 0; i < jl; i++)
            junk[i] = (unsigned char)sl_test_rand(&s);
        if (t % 2 && jl >= 24)
            memcpy(junk, b, 24);
        assert_int_not_equal(decode_copy(junk, jl, N), SL_OK);
    }
    unsigned char *bigger = malloc(len + 1);
    memcpy(bigger, b, len);
    bigger[len] = 0;
    assert_int_equal(decode_copy(bigger, len + 1, N), SL_ECORRUPT);
    free(bigger);

    double nan = NAN, neg = -1;
    memcpy(b + 24 + 8, &nan, 8); /* m[1] (little-endian host) */
    fix_crc(b, len);
    assert_int_equal(decode_copy(b, len, N), SL_ENONFINITE);
    memcpy(b + 24 + 8, &neg, 8);
    memcpy(b + 24 + 8 * N, &neg, 8); /* v[0] */
    fix_crc(b, len);
    assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
    b[4] = 2; /* the carried section's version, without its flag */
    fix_crc(b, len);
    assert_int_equal(decode_copy(b, len, N), SL_ECORRUPT);
    b[4] = 3;
    fix_crc(b, len);
    assert_int_equal(decode_copy(b, len, N), SL_EVERSION);
    b[0] = 'X';
    assert_int_equal(decode_copy(b, len, N), SL_EMAGIC);
    free(b);
    sl_server_state_free(&st);
}

/* FedNova with @steps[i] local steps per update, in @order, split into @parts partials. */
static double *nova_order(const sl_layout *l, const sl_task_config *c, const upd *u,
                          const uint32_t *n, const uint32_t *steps, const size_t *order, size_t K,
                          size_t parts)
{
    size_t P = (size_t)sl_layout_params(l);
    double *out = calloc(P, sizeof *out);
    sl__agg *lead = NULL;
    assert_int_equal(sl__agg_begin(c, l, &lead), SL_OK);
    for (size_t p = 0; p < parts; p++) {
        sl__agg *a = NULL;
        void *part = NULL;
        size_t plen = 0;
        assert_int_equal(sl__agg_begin(c, l, &a), SL_OK);
        for (size_t k = p; k < K; k += parts) {
            size_t i = order[k];
            assert_int_equal(sl__agg_add_steps(a, u[i].frame, u[i].len, n[i], steps[i]), SL_OK);
        }
        if (parts == 1) {
            sl__agg_free(lead);
            lead = a;
            break;
        }
        assert_int_equal(sl__agg_export(a, &part, &plen), SL_OK);
        assert_int_equal(sl__agg_merge(lead, part, plen), SL_OK);
        free(part);
        sl__agg_free(a);
    }
    assert_int_equal(sl__agg_finish(lead, 0, out, NULL), SL_OK);
    sl__agg_free(lead);
    return out;
}

/* FedNova (Wang et al. 2020): the devices send u_i / a_i (a_i their effective steps); the
 * coordinator takes tau_eff * sum_i p_i (u_i / a_i), tau_eff = sum_i p_i a_i: against a
 * long-double reference, the same bits in any order and any split into partials; with equal
 * steps, FedAvg's mean times the steps; the median of what was sent, scaled by tau_eff. */
static void test_fednova(void **state)
{
    sl_layout *l = small_layout();
    size_t P = (size_t)sl_layout_params(l), K = 12, order[MAXK];
    upd u[MAXK];
    uint32_t n[MAXK], steps[MAXK], same[MAXK];
    double w[MAXK];
    uint64_t s = 7;
    (void)state;
    for (size_t i = 0; i < K; i++) {
        random_update(l, 0.5, 0.05 + 0.1 * (double)i, 900 + i, &u[i]);
        n[i] = 50 + (uint32_t)(sl_test_rand(&s) % 500);
        steps[i] = 1 + (uint32_t)(sl_test_rand(&s) % 80); /* unequal local work */
        same[i] = 20;
        w[i] = n[i];
        order[i] = i;
    }
    for (int momentum = 0; momentum < 2; momentum++) {
        sl_task_config c = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
        double rho = momentum ? 0.9 : 0, *ref, *avg, *eq;
        long double want_tau = 0, N = 0;
        long double *want = calloc(P, sizeof *want);
        c.fednova = 1;
        c.local_momentum = rho;
        /* the effective steps: tau without momentum; with it, FedNova's closed form */
        assert_true(sl__fednova_steps(7, 0) == 7.0);
        assert_true(fabs(sl__fednova_steps(7, 0.9) - (7 - 0.9 * (1 - pow(0.9, 7)) / 0.1) / 0.1) <
                    1e-9);
        assert_true(sl__fednova_steps(0, 0) == 1.0);
        ref = nova_order(l, &c, u, n, steps, order, K, 1);
        for (size_t i = 0; i < K; i++) {
            long double a = sl__fednova_steps(steps[i], rho);
            N += n[i];
            want_tau += (long double)n[i] * a;
            for (size_t j = 0; j < P; j++) /* the devices sent u_i / a_i already */
                want[j] += (long double)n[i] * u[i].dense[j];
        }
        want_tau /= N;
        for (size_t j = 0; j < P; j++) {
            long double x = want_tau * want[j] / N;
            /* within the quanta: each a_i at 2^-32, the sums' 2^-F */
            if (!(fabsl((long double)ref[j] - x) <= 1e-9L * (1 + fabsl(x))))
                fail_msg("coordinate %zu: FedNova %.17g, reference %.17Lg", j, ref[j], x);
        }
        free(want);
        for (int trial = 0; trial < 6; trial++) {
            size_t perm[MAXK];
            double *got;
            memcpy(perm, order, K * sizeof *perm);
            shuffle(perm, K, &s);
            got = nova_order(l, &c, u, n, steps, perm, K, 1 + (size_t)trial % 4);
            assert_memory_equal(got, ref, P * sizeof *ref); /* any order, any split */
            free(got);
        }
        /* equal steps (no momentum): FedAvg's sample-weighted mean of what was sent, times
         * the steps (tau_eff) */
        if (!momentum) {
            sl_task_config f = agg_config(SL_AGG_FEDAVG, 0, 0, 0);
            eq = nova_order(l, &c, u, n, same, order, K, 1);
            avg = aggregate_order(l, &f, u, w, order, K);
            for (size_t j = 0; j < P; j++)
                assert_true(fabs(eq[j] - 20.0 * avg[j]) <= 1e-12 * (1 + fabs(20.0 * avg[j])));
            free(eq);
            free(avg);
        }
        free(ref);
    }
    {
        /* the median of the normalised updates, times tau_eff */
        sl_task_config c = agg_config(SL_AGG_MEDIAN, 0, 0, 0);
        double *got, tau = 0, N = 0;
        c.fednova = 1;
        c.local_momentum = 0;
        got = nova_order(l, &c, u, n, steps, order, K, 1);
        for (size_t i = 0; i < K; i++) {
            tau += (double)n[i] * steps[i];
            N += n[i];
        }
        tau /= N;
        for (size_t j = 0; j < P; j++) {
            double v[MAXK], med;
            for (size_t i = 0; i < K; i++)
                v[i] = u[i].dense[j];
            for (size_t a = 1; a < K; a++) /* insertion sort: K is small */
                for (size_t b = a; b > 0 && v[b - 1] > v[b]; b--) {
                    double t = v[b];
                    v[b] = v[b - 1];
                    v[b - 1] = t;
                }
            med = (v[K / 2 - 1] + v[K / 2]) / 2;
            assert_true(fabs(got[j] - med * tau) <= 1e-12 * (1 + fabs(med * tau)));
        }
        free(got);
    }
    for (size_t i = 0; i < K; i++)
        free_upd(&u[i]);
    sl_layout_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fedavg_reference),
        cmocka_unit_test(test_weighted_add),
        cmocka_unit_test(test_weight_and_steps_bounds),
        cmocka_unit_test(test_fixed_point_any_order),
        cmocka_unit_test(test_fixed_point_bound),
        cmocka_unit_test(test_fednova),
        cmocka_unit_test(test_robust_reference),
        cmocka_unit_test(test_robustness),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_dp_noise),
        cmocka_unit_test(test_agg_rejections),
        cmocka_unit_test(test_server_optimisers),
        cmocka_unit_test(test_server_lr_ramp),
        cmocka_unit_test(test_sender_mean),
        cmocka_unit_test(test_server_rejections),
        cmocka_unit_test(test_state_decode_rejections),
        cmocka_unit_test(test_state_carried),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
