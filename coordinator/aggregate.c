/*
 * aggregate.c - one round's updates into one pseudo-gradient.
 *
 * FedAvg family: sum_i w_i * s_i * u_i (w_i = num_samples, s_i = the
 * clipping factor), divided by sum_i w_i at the end, in fixed point so that
 * the sum is exact: integer addition is associative, so any order of the
 * adds and any split of them into partial sums (one per coordinator
 * replica, merged by the leader) gives the same bits.
 *   - Each value s_i * u_ij becomes q = round(s_i * u_ij * 2^F), an int64
 *     with |q| < 2^62: F = 62 - e, where 2^e is the bound of a value: the
 *     clipping bound when the task clips (a clipped update has no value
 *     above its norm, so nothing is refused), else SL_AGG_VALUE_BOUND, and
 *     an update with a value at or above it is refused (SL_ERANGE; the
 *     engine refuses it at upload already, reason "range").
 *   - Each weight becomes the integer wq = round(w_i * 2^G), at least 1:
 *     G = 0, the sample count itself (below 2^32), so that at most 2^32 - 1
 *     adds (count) keep sum wq below 2^64 whatever counts the devices report,
 *     and no acknowledged update can make a round's sum refuse it; under
 *     FedBuff, whose discounted weights n / sqrt(1 + staleness) are not
 *     integers, G = 8 (2^-8 of a sample), so a buffer would need 2^24 updates
 *     of 2^32 samples to reach 2^64 (an add that would pass it is refused,
 *     SL_ETOOBIG).
 *   - The accumulator is 128-bit per coordinate: |sum q * wq| < 2^62 *
 *     sum wq < 2^126, so it cannot overflow.
 *   - The result is (double)sum / (double)sum wq * 2^-F, a fixed function
 *     of the integers. Sample counts give the same bits as under any power
 *     of two of scale: earlier builds took every weight at 2^-30, where five
 *     reports of 2^32 - 1 samples passed 2^64 and held a round's close back
 *     for good. Against summation in doubles the difference is at
 *     most 2^-(F+1) per coordinate (7e-15 unclipped): far below a float32
 *     model's precision.
 * Memory O(model) whatever the number of updates (16 bytes a parameter).
 *
 * FedNova (Wang et al., NeurIPS 2020; the task's "fednova"): devices that
 * ran more local steps moved further, and FedAvg's weighting by samples then
 * tilts the model toward them (objective inconsistency). Each device divides
 * its fresh update by its effective steps a_i (tau_i local steps; with SGD
 * momentum rho, (tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho)) before
 * compression, so its error-feedback residual holds normalised mass too (a
 * server dividing what was sent would divide residual mass from other rounds
 * by this round's a_i: it diverged). Here the normalised updates are averaged
 * by samples, as FedAvg's, and the mean is scaled by tau_eff = sum_i p_i a_i,
 * p_i = n_i / N, kept as two integer sums, N = sum n_i and NA = sum n_i *
 * round(a_i * 2^32): the same bits in any order and any split. The robust
 * aggregators' statistic of the normalised updates is scaled the same way.
 * n_i is the samples the update reports: under a time budget those its device
 * processed, so a cut update weighs its share of the work. FedNova's paper
 * takes the shares of the data instead; on the heterogeneous fleet those made
 * the start unstable (a device that ran a few steps counts its large first
 * steps' direction fully, extrapolated to tau_eff) and ended lower, measured
 * (README, "Fleets of unequal devices"), so the shares of the work stay.
 *
 * The senders' mean (the task's "sender_mean_epochs" or "sender_mean_rounds", #23): a sparse update
 * sends its own few coordinates, so in the mean over all K updates a
 * coordinate that one of ten sent moves by a tenth of its value, most of all
 * at the start, where the updates are large and error feedback has sent
 * little yet. With a weight a in [0, 1] (sl_sender_mean_at, by how many
 * updates the task's devices have sent on average), coordinate j is divided by (1 - a) W + a S_j
 * instead of W, S_j the sum of the weights of the updates that sent j: a = 1 is each coordinate's
 * mean over its senders. S_j is a third integer sum (uint64, below W), so the result is the same
 * bits in any order and any split.
 *
 * Trimmed mean and median: unweighted and coordinate-wise over all K
 * updates, where a coordinate an update did not send counts as 0 (that is
 * what the device's sparse update means). Only the sparse (index, value)
 * pairs are kept, never K dense vectors; at the end they are sorted by flat
 * index (LSD radix sort) and each coordinate's statistic is computed from
 * its explicit values plus K - c implicit zeros.
 *
 * Determinism: the result is a pure function of the set of adds (FedAvg
 * family: exact integer sums) or of their sequence (robust: a fixed
 * sequence of IEEE-754 double operations); the radix sort is stable and the values of
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

#if !defined(__SIZEOF_INT128__)
#error "the fixed-point aggregation needs a 128-bit integer type (GCC or clang, 64-bit target)"
#endif
__extension__ typedef __int128 i128;

#define STEPS_FRAC          32 /* fractional bits of FedNova's effective steps */
#define FEDBUFF_WEIGHT_FRAC 8  /* fractional bits of FedBuff's discounted weights */
/* integer weights (SLAGGP2 and SLAGGP3, earlier builds' partials, hold weights at 2^-30: not
 * accepted, so an older replica's partial is read update by update) */
#define PARTIAL_MAGIC  "SLAGGP4\n"
#define PARTIAL_MAGIC3 "SLAGGP5\n" /* with the senders' weights */

struct sl__agg {
    const sl_layout *layout; /* borrowed: must outlive the aggregation */
    sl_aggregator kind;
    double clip_norm, trim_fraction, dp_noise;
    size_t params;
    uint32_t count;
    int sorted; /* robust: the pairs are in index order (a finish sorted them) */
    /* FedAvg family: fixed point */
    i128 *sum; /* per coordinate: sum of q * wq */
    /* the senders' mean: per coordinate the sum of wq of the updates that sent it, and
     * the weight a of their mean at the finish (NULL, 0: the task has none) */
    uint64_t *senders;
    double sender_w;
    const uint8_t *skip; /* sender_mean_fresh: coordinates left out of it (borrowed), or NULL */
    uint64_t wsum;       /* sum of wq */
    int wfrac;           /* G: a weight w is round(w * 2^G) */
    int frac;            /* F: a value v is round(v * 2^F) */
    double bound;        /* 2^(62 - F): a value's magnitude must stay below it */
    /* FedNova: sum n_i and sum n_i * round(a_i * 2^STEPS_FRAC); the local momentum */
    int nova;
    double momentum;
    uint64_t nsum;
    unsigned __int128 nasum;
    /* trimmed mean / median: every update's pairs, flat index and value */
    uint32_t *idx;
    double *val;
    size_t pairs, cap;
};

static int is_robust(sl_aggregator a)
{
    return a == SL_AGG_TRIMMED_MEAN || a == SL_AGG_MEDIAN;
}

int sl__agg_frac_bits(double clip_norm)
{
    int e = 0;
    if (clip_norm > 0 && clip_norm < SL_AGG_VALUE_BOUND) {
        (void)frexp(clip_norm, &e); /* clip_norm < 2^e */
        if (e < -900)
            e = -900;
    } else {
        (void)frexp(SL_AGG_VALUE_BOUND, &e);
        e--; /* the bound is a power of two: values below 2^e */
    }
    return 62 - e;
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
    a->frac = sl__agg_frac_bits(cfg->clip_norm);
    a->nova = cfg->fednova;
    a->momentum = cfg->local_optimizer == SL_LOCAL_SGD ? cfg->local_momentum : 0;
    a->bound = ldexp(1.0, 62 - a->frac);
    a->wfrac = cfg->fedbuff ? FEDBUFF_WEIGHT_FRAC : 0;
    if (!is_robust(a->kind)) {
        a->sum = calloc(a->params, sizeof *a->sum);
        if (sl_sender_mean_length(cfg) > 0)
            a->senders = calloc(a->params, sizeof *a->senders);
        if (a->sum == NULL || (sl_sender_mean_length(cfg) > 0 && a->senders == NULL)) {
            free(a->sum);
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
    free(a->senders);
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

double sl__fednova_steps(uint32_t steps, double momentum)
{
    return sl_effective_steps(steps, momentum);
}

/* Add an update weighted @num_samples, its values times @inv (1: as sent). */
static int add_scaled(sl__agg *a, const void *frame, size_t len, double num_samples, double inv);

int sl__agg_add_weighted(sl__agg *a, const void *frame, size_t len, double num_samples)
{
    return add_scaled(a, frame, len, num_samples, 1.0);
}

int sl__agg_add_steps(sl__agg *a, const void *frame, size_t len, uint32_t num_samples,
                      uint32_t steps)
{
    double eff, aq_d;
    uint64_t aq;
    int rc;
    if (a == NULL || num_samples == 0)
        return SL_EINVAL;
    if (!a->nova)
        return sl__agg_add(a, frame, len, num_samples);
    eff = sl__fednova_steps(steps, a->momentum);
    aq_d = ldexp(eff, STEPS_FRAC);
    if (!(eff > 0) || !(aq_d >= 1) || !(eff < SL_AGG_NOVA_STEPS_BOUND) ||
        a->nsum > UINT64_MAX - num_samples)
        return SL_ERANGE;
    aq = (uint64_t)llround(aq_d);
    /* the device sent its update divided by a_i already (its residual holds normalised mass
     * too): weighed by samples as FedAvg's; only tau_eff needs the steps */
    rc = sl__agg_add(a, frame, len, num_samples);
    if (rc != SL_OK)
        return rc;
    a->nsum += num_samples;
    a->nasum += (unsigned __int128)num_samples * aq;
    return SL_OK;
}

static int add_scaled(sl__agg *a, const void *frame, size_t len, double num_samples, double inv)
{
    sl_update *u = NULL;
    double scale = 1, norm;
    int rc;

    if (a == NULL || frame == NULL || !(num_samples > 0) || !(num_samples < 0x1p32))
        return SL_EINVAL;
    if (a->count == UINT32_MAX)
        return SL_ETOOBIG;
    /* everything is decoded and checked before the aggregation changes */
    if ((rc = sl_frame_decode_update(a->layout, frame, len, NULL, &u)) != SL_OK)
        return rc;
    norm = update_norm(u);
    if (a->clip_norm > 0 && norm > a->clip_norm)
        scale = a->clip_norm / norm;
    if (inv != 1.0) /* FedNova, robust: the normalised update, clipped first */
        scale = scale * inv;

    if (!is_robust(a->kind)) {
        /* below 2^32 (checked above) times 2^G, at least 1: without FedBuff (G = 0) 2^32 - 1
         * adds stay below 2^64, so the check below never refuses one */
        uint64_t wq = (uint64_t)llround(ldexp(num_samples, a->wfrac));
        if (wq == 0)
            wq = 1;
        if (wq > UINT64_MAX - a->wsum) {
            sl_update_free(u);
            return SL_ETOOBIG;
        }
        /* every value is checked before any is added */
        for (size_t t = 0; t < u->tensors; t++)
            for (size_t j = 0; j < u->n[t]; j++) {
                double v = scale * (double)u->val[t][j];
                if (!(fabs(v) < a->bound)) {
                    sl_update_free(u);
                    return SL_ERANGE;
                }
            }
        for (size_t t = 0; t < u->tensors; t++) {
            size_t offset = sl_layout_tensor(a->layout, t)->offset;
            i128 *base = a->sum + offset;
            for (size_t j = 0; j < u->n[t]; j++) {
                double v = scale * (double)u->val[t][j];
                int64_t q = (int64_t)llround(ldexp(v, a->frac));
                base[u->idx[t][j]] += (i128)q * (i128)wq;
            }
            /* the indices are unique (the decoder checked): each S_j stays <= wsum */
            if (a->senders != NULL)
                for (size_t j = 0; j < u->n[t]; j++)
                    a->senders[offset + u->idx[t][j]] += wq;
        }
        a->wsum += wq;
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
    if (a->count == 0 || (a->nova && a->nsum == 0))
        return SL_ESTATE; /* FedNova: every add went through sl__agg_add_steps */
    if (is_robust(a->kind)) {
        if ((rc = finish_robust(a, delta)) != SL_OK)
            return rc;
    } else {
        double w = (double)a->wsum, sw = a->senders != NULL ? a->sender_w : 0;
        for (size_t i = 0; i < a->params; i++) {
            double d = w, x;
            /* (1 - a) W + a S_j: separate roundings */
            if (sw > 0 && a->senders[i] > 0 &&
                (a->skip == NULL || !(a->skip[i / 8] >> (i % 8) & 1))) {
                double own = sw * (double)a->senders[i];
                d = (1.0 - sw) * w;
                d = d + own;
            }
            x = (double)a->sum[i] / d;
            delta[i] = ldexp(x, -a->frac);
        }
    }
    if (a->nova) {
        double tau_eff = ldexp((double)a->nasum, -STEPS_FRAC) / (double)a->nsum;
        for (size_t i = 0; i < a->params; i++)
            delta[i] = delta[i] * tau_eff;
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

int sl__agg_sender_mean(sl__agg *a, double weight)
{
    if (a == NULL || !(weight >= 0 && weight <= 1))
        return SL_EINVAL;
    if (weight > 0 && a->senders == NULL)
        return SL_ESTATE; /* begun for a task without the senders' mean */
    a->sender_w = weight;
    return SL_OK;
}

int sl__agg_sender_mean_skip(sl__agg *a, const uint8_t *bits)
{
    if (a == NULL)
        return SL_EINVAL;
    if (bits != NULL && a->senders == NULL)
        return SL_ESTATE;
    a->skip = bits;
    return SL_OK;
}

int sl__agg_carried(const sl__agg *a, uint8_t *bits)
{
    if (a == NULL || bits == NULL)
        return SL_EINVAL;
    if (a->senders == NULL)
        return SL_ESTATE;
    memset(bits, 0, (a->params + 7) / 8);
    for (size_t i = 0; i < a->params; i++)
        if (a->senders[i] > 0)
            bits[i / 8] |= (uint8_t)(1u << (i % 8));
    return SL_OK;
}

int sl__update_norm(const sl_layout *layout, const void *frame, size_t len,
                    const sl_decode_limits *limits, const sl_support *support, double *norm,
                    double *max_abs)
{
    sl_update *u = NULL;
    int rc;

    if (layout == NULL || frame == NULL || norm == NULL)
        return SL_EINVAL;
    if ((rc = sl_frame_decode_update_split(layout, frame, len, limits, support, &u)) != SL_OK)
        return rc;
    *norm = update_norm(u);
    if (max_abs != NULL) {
        double m = 0;
        for (size_t t = 0; t < u->tensors; t++)
            for (size_t j = 0; j < u->n[t]; j++)
                if (fabs((double)u->val[t][j]) > m)
                    m = fabs((double)u->val[t][j]);
        *max_abs = m;
    }
    sl_update_free(u);
    return SL_OK;
}

int sl__agg_value_ok(const sl_task_config *cfg, double norm, double max_abs)
{
    double scale = 1;
    if (is_robust(cfg->aggregator))
        return 1; /* sorted doubles: no fixed point, no bound */
    if (cfg->clip_norm > 0 && norm > cfg->clip_norm)
        scale = cfg->clip_norm / norm;
    return scale * max_abs < ldexp(1.0, 62 - sl__agg_frac_bits(cfg->clip_norm));
}

int sl__agg_steps_ok(const sl_task_config *cfg, uint32_t steps)
{
    double m = cfg->local_optimizer == SL_LOCAL_SGD ? cfg->local_momentum : 0; /* as begin's */
    return !cfg->fednova || sl__fednova_steps(steps, m) < SL_AGG_NOVA_STEPS_BOUND;
}

/* ---- partial sums ------------------------------------------------------------------------ */

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Header: magic (8), params, frac (as u64, two's complement), count, wsum, entries, then
 * FedNova's N and NA (low, high 64 bits): 72 bytes. An entry: flat index (u64), then the
 * sum's low and high 64 bits; under the senders' mean (magic SLAGGP5) then S_j (u64). */
#define PARTIAL_HEAD  72
#define PARTIAL_ENTRY 24

int sl__agg_export(const sl__agg *a, void **out, size_t *len)
{
    size_t nz = 0, n;
    uint8_t *b, *p;

    if (a == NULL || out == NULL || len == NULL)
        return SL_EINVAL;
    if (is_robust(a->kind))
        return SL_ESTATE;
    for (size_t i = 0; i < a->params; i++)
        nz += a->sum[i] != 0 || (a->senders != NULL && a->senders[i] != 0);
    if (nz > (SIZE_MAX - PARTIAL_HEAD) / (PARTIAL_ENTRY + 8))
        return SL_ETOOBIG;
    n = PARTIAL_HEAD + nz * (PARTIAL_ENTRY + (a->senders != NULL ? 8 : 0));
    if ((b = malloc(n)) == NULL)
        return SL_ENOMEM;
    memcpy(b, a->senders != NULL ? PARTIAL_MAGIC3 : PARTIAL_MAGIC, 8);
    put_u64(b + 8, (uint64_t)a->params);
    put_u64(b + 16, (uint64_t)(int64_t)a->frac);
    put_u64(b + 24, a->count);
    put_u64(b + 32, a->wsum);
    put_u64(b + 40, (uint64_t)nz);
    put_u64(b + 48, a->nsum);
    put_u64(b + 56, (uint64_t)a->nasum);
    put_u64(b + 64, (uint64_t)(a->nasum >> 64));
    p = b + PARTIAL_HEAD;
    for (size_t i = 0; i < a->params; i++) {
        unsigned __int128 v = (unsigned __int128)a->sum[i];
        if (a->sum[i] == 0 && (a->senders == NULL || a->senders[i] == 0))
            continue;
        put_u64(p, (uint64_t)i);
        put_u64(p + 8, (uint64_t)v);
        put_u64(p + 16, (uint64_t)(v >> 64));
        p += PARTIAL_ENTRY;
        if (a->senders != NULL) {
            put_u64(p, a->senders[i]);
            p += 8;
        }
    }
    *out = b;
    *len = n;
    return SL_OK;
}

int sl__agg_merge(sl__agg *a, const void *partial, size_t len)
{
    const uint8_t *b = partial, *p;
    uint64_t params, count, wsum, nz, nsum, prev = 0;
    unsigned __int128 nasum;
    size_t entry;
    int with_senders;

    if (a == NULL || partial == NULL)
        return SL_EINVAL;
    if (is_robust(a->kind))
        return SL_ESTATE;
    if (len < PARTIAL_HEAD ||
        (memcmp(b, PARTIAL_MAGIC, 8) != 0 && memcmp(b, PARTIAL_MAGIC3, 8) != 0))
        return SL_ECORRUPT;
    with_senders = memcmp(b, PARTIAL_MAGIC3, 8) == 0;
    entry = PARTIAL_ENTRY + (with_senders ? 8 : 0);
    params = get_u64(b + 8);
    count = get_u64(b + 24);
    wsum = get_u64(b + 32);
    nz = get_u64(b + 40);
    nsum = get_u64(b + 48);
    nasum = ((unsigned __int128)get_u64(b + 64) << 64) | get_u64(b + 56);
    if (params != (uint64_t)a->params || (int64_t)get_u64(b + 16) != (int64_t)a->frac)
        return SL_ELAYOUT; /* another model, or another task's bound */
    if (with_senders != (a->senders != NULL))
        return SL_ELAYOUT; /* the senders' weights in one and not the other: another task */
    if (nz > params || (len - PARTIAL_HEAD) / entry != nz || (len - PARTIAL_HEAD) % entry != 0 ||
        (count == 0) != (wsum == 0))
        return SL_ECORRUPT;
    /* everything is checked before the aggregation changes */
    p = b + PARTIAL_HEAD;
    for (uint64_t k = 0; k < nz; k++, p += entry) {
        uint64_t i = get_u64(p);
        if (i >= params || (k > 0 && i <= prev))
            return SL_ECORRUPT; /* indices ascending, each once */
        if (with_senders && get_u64(p + PARTIAL_ENTRY) > wsum)
            return SL_ECORRUPT; /* S_j is a part of the partial's wsum */
        prev = i;
    }
    if ((nsum != 0) != (a->nova && count > 0))
        return SL_ELAYOUT; /* FedNova's sums in one and not the other: another task */
    if (count > UINT32_MAX - a->count || wsum > UINT64_MAX - a->wsum || nsum > UINT64_MAX - a->nsum)
        return SL_ETOOBIG;
    p = b + PARTIAL_HEAD;
    for (uint64_t k = 0; k < nz; k++, p += entry) {
        unsigned __int128 v = ((unsigned __int128)get_u64(p + 16) << 64) | get_u64(p + 8);
        /* each partial's |sum| < 2^62 * its wsum, and the wsums add below 2^64: the sum of
         * the partials stays below 2^126, as one aggregation's would (and each S_j below
         * the total wsum) */
        a->sum[get_u64(p)] += (i128)v;
        if (with_senders)
            a->senders[get_u64(p)] += get_u64(p + PARTIAL_ENTRY);
    }
    a->count += (uint32_t)count;
    a->wsum += wsum;
    a->nsum += nsum;
    a->nasum += nasum;
    return SL_OK;
}
