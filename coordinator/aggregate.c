/*
 * aggregate.c - one round's updates into one pseudo-gradient.
 *
 * FedAvg family: a dense double accumulator of sum_i w_i * s_i * u_i
 * (w_i = num_samples, s_i = the clipping factor), divided by sum_i w_i at
 * the end. Memory O(model) whatever the number of updates.
 *
 * Trimmed mean and median: unweighted and coordinate-wise over all K
 * updates, where a coordinate an update did not send counts as 0 (that is
 * what the device's sparse update means). Only the sparse (index, value)
 * pairs are kept, never K dense vectors; at the end they are sorted by flat
 * index (LSD radix sort) and each coordinate's statistic is computed from
 * its explicit values plus K - c implicit zeros.
 *
 * Determinism: the result is a pure function of the sequence of adds. Every
 * step is a fixed sequence of IEEE-754 double operations: per coordinate the
 * accumulator sums in add order; the radix sort is stable and the values of
 * one coordinate are then sorted by a total order on their bits (so -0.0
 * and +0.0 never swap places between runs); there are no threads, no
 * reassociation (no -ffast-math), and no fused multiply-add: products and
 * sums are separate statements, GCC in ISO C mode (the project builds with
 * -std=c11) does not contract, and clang is told not to with the pragma
 * below. The DP noise comes from our own seeded generator; its Box-Muller
 * transform uses libm's log, cos and sin, so noise bits are identical on
 * one platform and libm, not necessarily across them.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

struct sl__agg {
    const sl_layout *layout; /* borrowed: must outlive the aggregation */
    sl_aggregator kind;
    double clip_norm, trim_fraction, dp_noise;
    size_t params;
    uint32_t count;
    int sorted; /* robust: the pairs are in index order (a finish sorted them) */
    /* FedAvg family */
    double *sum;
    double weight;
    /* trimmed mean / median: every update's pairs, flat index and value */
    uint32_t *idx;
    double *val;
    size_t pairs, cap;
};

static int is_robust(sl_aggregator a)
{
    return a == SL_AGG_TRIMMED_MEAN || a == SL_AGG_MEDIAN;
}

int sl__agg_begin(const sl_task_config *cfg, const sl_layout *layout, sl__agg **out)
{
    sl__agg *a;
    uint64_t params;

    if (cfg == NULL || layout == NULL || out == NULL)
        return SL_EINVAL;
    if ((unsigned)cfg->aggregator > SL_AGG_MEDIAN || !(cfg->clip_norm >= 0) ||
        !isfinite(cfg->clip_norm) || !(cfg->trim_fraction >= 0 && cfg->trim_fraction < 0.5) ||
        !(cfg->dp_noise >= 0) || !isfinite(cfg->dp_noise) ||
        (cfg->dp_noise > 0 && cfg->clip_norm <= 0))
        return SL_EINVAL;
    params = sl_layout_params(layout);
    if (params == 0)
        return SL_EINVAL;
    if (params > SIZE_MAX / sizeof(double))
        return SL_ETOOBIG;
    a = calloc(1, sizeof *a);
    if (a == NULL)
        return SL_ENOMEM;
    a->layout = layout;
    a->kind = cfg->aggregator;
    a->clip_norm = cfg->clip_norm;
    a->trim_fraction = cfg->trim_fraction;
    a->dp_noise = cfg->dp_noise;
    a->params = (size_t)params;
    if (!is_robust(a->kind)) {
        a->sum = calloc(a->params, sizeof *a->sum);
        if (a->sum == NULL) {
            free(a);
            return SL_ENOMEM;
        }
    }
    *out = a;
    return SL_OK;
}

void sl__agg_free(sl__agg *a)
{
    if (a == NULL)
        return;
    free(a->sum);
    free(a->idx);
    free(a->val);
    free(a);
}

/* The sum of squares in tensor and index order, so the norm (and the
 * clipping factor derived from it) is the same on every run. */
static double update_norm(const sl_update *u)
{
    double ss = 0;
    for (size_t t = 0; t < u->tensors; t++) {
        for (size_t j = 0; j < u->n[t]; j++) {
            double v = (double)u->val[t][j];
            double sq = v * v;
            ss += sq;
        }
    }
    return sqrt(ss);
}

static size_t update_pairs(const sl_update *u)
{
    size_t k = 0;
    for (size_t t = 0; t < u->tensors; t++)
        k += u->n[t];
    return k;
}

static int reserve_pairs(sl__agg *a, size_t more)
{
    size_t need, cap;
    uint32_t *idx;
    double *val;

    if (more > SIZE_MAX / sizeof(double) - a->pairs)
        return SL_ETOOBIG;
    need = a->pairs + more;
    if (need <= a->cap)
        return SL_OK;
    cap = a->cap < 1024 ? 1024 : a->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / sizeof(double) / 2 ? need : cap * 2;
    /* each array is replaced only once both grew, so a failure keeps the
     * pairs already stored */
    idx = realloc(a->idx, cap * sizeof *idx);
    if (idx == NULL)
        return SL_ENOMEM;
    a->idx = idx;
    val = realloc(a->val, cap * sizeof *val);
    if (val == NULL)
        return SL_ENOMEM;
    a->val = val;
    a->cap = cap;
    return SL_OK;
}

int sl__agg_add(sl__agg *a, const void *frame, size_t len, uint32_t num_samples)
{
    if (num_samples == 0)
        return SL_EINVAL;
    return sl__agg_add_weighted(a, frame, len, (double)num_samples);
}

int sl__agg_add_weighted(sl__agg *a, const void *frame, size_t len, double num_samples)
{
    sl_update *u = NULL;
    double scale = 1, norm;
    int rc;

    if (a == NULL || frame == NULL || !(num_samples > 0) || num_samples > 1e18)
        return SL_EINVAL;
    if (a->count == UINT32_MAX)
        return SL_ETOOBIG;
    /* everything is decoded and checked before the aggregation changes */
    if ((rc = sl_frame_decode_update(a->layout, frame, len, NULL, &u)) != SL_OK)
        return rc;
    norm = update_norm(u);
    if (a->clip_norm > 0 && norm > a->clip_norm)
        scale = a->clip_norm / norm;

    if (!is_robust(a->kind)) {
        double coef = num_samples * scale;
        for (size_t t = 0; t < u->tensors; t++) {
            double *base = a->sum + sl_layout_tensor(a->layout, t)->offset;
            for (size_t j = 0; j < u->n[t]; j++) {
                double term = coef * (double)u->val[t][j];
                base[u->idx[t][j]] += term;
            }
        }
        a->weight += num_samples;
    } else {
        if ((rc = reserve_pairs(a, update_pairs(u))) != SL_OK) {
            sl_update_free(u);
            return rc;
        }
        for (size_t t = 0; t < u->tensors; t++) {
            /* flat indices fit in 32 bits: a layout has at most 2^31 params */
            uint32_t offset = (uint32_t)sl_layout_tensor(a->layout, t)->offset;
            for (size_t j = 0; j < u->n[t]; j++) {
                a->idx[a->pairs] = offset + u->idx[t][j];
                a->val[a->pairs] = (double)u->val[t][j] * scale;
                a->pairs++;
            }
        }
        /* an add after a finish is allowed: the next finish sorts again, and
         * as the sort is stable and each coordinate's values are then
         * ordered by value, the result is the same as without the finish */
        a->sorted = 0;
    }
    a->count++;
    sl_update_free(u);
    return SL_OK;
}

/* Stable LSD radix sort of the pairs by flat index, 11 bits per pass;
 * passes where every key has the same digit are skipped. */
static int sort_pairs(sl__agg *a)
{
    enum { BITS = 11, RADIX = 1 << BITS };
    uint32_t *idx2;
    double *val2;
    size_t *count;
    size_t n = a->pairs;
    int swapped = 0;

    if (n < 2)
        return SL_OK;
    idx2 = malloc(n * sizeof *idx2);
    val2 = malloc(n * sizeof *val2);
    count = malloc(RADIX * sizeof *count);
    if (idx2 == NULL || val2 == NULL || count == NULL) {
        free(idx2);
        free(val2);
        free(count);
        return SL_ENOMEM;
    }
    for (unsigned shift = 0; shift < 32; shift += BITS) {
        size_t pos = 0;
        memset(count, 0, RADIX * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(a->idx[i] >> shift) & (RADIX - 1)]++;
        if (count[(a->idx[0] >> shift) & (RADIX - 1)] == n)
            continue;
        for (size_t d = 0; d < RADIX; d++) {
            size_t c = count[d];
            count[d] = pos;
            pos += c;
        }
        for (size_t i = 0; i < n; i++) {
            size_t to = count[(a->idx[i] >> shift) & (RADIX - 1)]++;
            idx2[to] = a->idx[i];
            val2[to] = a->val[i];
        }
        uint32_t *ti = a->idx;
        double *tv = a->val;
        a->idx = idx2;
        a->val = val2;
        idx2 = ti;
        val2 = tv;
        swapped ^= 1;
    }
    if (swapped) /* the pairs now live in the exact-size scratch arrays */
        a->cap = n;
    free(idx2);
    free(val2);
    free(count);
    return SL_OK;
}

/* A total order on doubles by their bits: negatives (larger magnitude
 * first), -0.0, +0.0, positives. Equal keys are identical values, so any
 * sort gives the same sequence. */
static uint64_t order_key(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return (b >> 63) ? ~b : b | (UINT64_C(1) << 63);
}

static int cmp_double(const void *pa, const void *pb)
{
    uint64_t a = order_key(*(const double *)pa), b = order_key(*(const double *)pb);
    return (a > b) - (a < b);
}

static void sort_values(double *v, size_t c)
{
    if (c > 24) {
        qsort(v, c, sizeof *v, cmp_double);
        return;
    }
    for (size_t i = 1; i < c; i++) {
        double x = v[i];
        uint64_t kx = order_key(x);
        size_t j = i;
        for (; j > 0 && order_key(v[j - 1]) > kx; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* The p-th smallest of K values: the c sorted explicit ones, with K - c
 * zeros placed after those whose sign bit is set (@low of them). */
static double nth_value(const double *v, size_t c, size_t low, size_t K, size_t p)
{
    size_t zeros = K - c;
    if (p < low)
        return v[p];
    if (p < low + zeros)
        return 0.0;
    return v[p - zeros];
}

/* One coordinate's statistic over K values (c explicit, sorted). */
static double robust_stat(const sl__agg *a, const double *v, size_t c, size_t K, size_t trim)
{
    size_t low = 0;
    while (low < c && signbit(v[low]))
        low++;
    if (a->kind == SL_AGG_MEDIAN) {
        if (K % 2 == 1)
            return nth_value(v, c, low, K, K / 2);
        double s = nth_value(v, c, low, K, K / 2 - 1) + nth_value(v, c, low, K, K / 2);
        return s * 0.5;
    }
    /* trimmed mean: the zeros add nothing, so sum the explicit values whose
     * position in the full order is kept, in ascending order */
    double sum = 0;
    for (size_t j = 0; j < c; j++) {
        size_t pos = j < low ? j : j + (K - c);
        if (pos >= trim && pos < K - trim)
            sum += v[j];
    }
    return sum / (double)(K - 2 * trim);
}

/* xoshiro256** seeded through splitmix64: small, fast, and ours, so the
 * noise depends on nothing but the seed. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Adds N(0, sigma^2) to each of @n values, two normals per Box-Muller pair. */
static void add_noise(double *x, size_t n, double sigma, uint64_t seed)
{
    const double two_pi = 6.283185307179586476925286766559;
    rng r;
    uint64_t sm = seed;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix64(&sm);
    for (size_t i = 0; i < n; i += 2) {
        /* u1 in (0, 1] keeps log() finite; u2 in [0, 1) */
        double u1 = (double)((rng_next(&r) >> 11) + 1) * 0x1p-53;
        double u2 = (double)(rng_next(&r) >> 11) * 0x1p-53;
        double radius = sqrt(-2.0 * log(u1));
        double angle = two_pi * u2;
        double z0 = radius * cos(angle), z1 = radius * sin(angle);
        double n0 = sigma * z0, n1 = sigma * z1;
        x[i] += n0;
        if (i + 1 < n)
            x[i + 1] += n1;
    }
}

static int finish_robust(sl__agg *a, double *delta)
{
    size_t K = a->count, maxc = 0, trim = 0;
    double *scratch;
    int rc;

    if (!a->sorted) {
        if ((rc = sort_pairs(a)) != SL_OK)
            return rc;
        a->sorted = 1;
    }
    for (size_t i = 0; i < a->pairs;) {
        size_t j = i;
        while (j < a->pairs && a->idx[j] == a->idx[i])
            j++;
        if (j - i > maxc)
            maxc = j - i;
        i = j;
    }
    scratch = malloc((maxc ? maxc : 1) * sizeof *scratch);
    if (scratch == NULL)
        return SL_ENOMEM;
    if (a->kind == SL_AGG_TRIMMED_MEAN) {
        /* floor(t * K), where a product within 1e-9 below an integer counts
         * as that integer (0.29 * 100 is 28.999999999999996) */
        trim = (size_t)floor(a->trim_fraction * (double)K + 1e-9);
        if (2 * trim >= K) /* t < 0.5 makes this impossible; keep one value regardless */
            trim = (K - 1) / 2;
    }
    memset(delta, 0, a->params * sizeof *delta);
    for (size_t i = 0; i < a->pairs;) {
        size_t j = i, c;
        while (j < a->pairs && a->idx[j] == a->idx[i])
            j++;
        c = j - i;
        /* one device sends a coordinate at most once, so c <= K */
        memcpy(scratch, a->val + i, c * sizeof *scratch);
        sort_values(scratch, c);
        delta[a->idx[i]] = robust_stat(a, scratch, c, K, trim);
        i = j;
    }
    free(scratch);
    return SL_OK;
}

int sl__agg_finish(sl__agg *a, uint64_t noise_seed, double *delta, uint32_t *count)
{
    int rc;

    if (a == NULL || delta == NULL)
        return SL_EINVAL;
    if (a->count == 0)
        return SL_ESTATE;
    if (is_robust(a->kind)) {
        if ((rc = finish_robust(a, delta)) != SL_OK)
            return rc;
    } else {
        for (size_t i = 0; i < a->params; i++)
            delta[i] = a->sum[i] / a->weight;
    }
    if (a->dp_noise > 0) {
        /* DP-FedAvg (McMahan et al. 2018): sensitivity of the mean of K
         * clipped updates is clip / K */
        double sigma = a->dp_noise * a->clip_norm / (double)a->count;
        add_noise(delta, a->params, sigma, noise_seed);
    }
    if (count != NULL)
        *count = a->count;
    return SL_OK;
}

int sl__update_norm(const sl_layout *layout, const void *frame, size_t len,
                    const sl_decode_limits *limits, double *norm)
{
    sl_update *u = NULL;
    int rc;

    if (layout == NULL || frame == NULL || norm == NULL)
        return SL_EINVAL;
    if ((rc = sl_frame_decode_update(layout, frame, len, limits, &u)) != SL_OK)
        return rc;
    *norm = update_norm(u);
    sl_update_free(u);
    return SL_OK;
}
