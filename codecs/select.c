/*
 * select.c - top-k selection by magnitude: exact radix select, RedSync's
 * threshold bisection, DGC's sampled threshold. The scalar kernels and
 * the dispatch are in select_scalar.c.
 *
 * Every mode works on integer magnitude keys (see select_int.h). The SIMD
 * kernels only do the passes over the whole tensor (count, filter, RedSync
 * statistics); everything that decides *which* indices come out runs here
 * on exact integers, which is why every variant gives the same result.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"
#include "select_int.h"

/* Radix digits: 11 bits, so a 31-bit key needs at most 3 histogram passes
 * and the histogram (8 KiB) lives on the stack and in L1. */
#define RADIX_BINS 2048u

/* Below this size the selectors skip sampling (exact mode keeps every
 * element as a candidate: 8 bytes each is cheap, nothing to gain). */
#define SAMPLE_MIN_D 32768
#define SAMPLE_MAX   16384

/* Elements per chunk of the ordered take from x: 16 KiB, read twice from L1. */
#define TAKE_CHUNK 4096

/* Internal: the sampled guess did not hold; take the always-correct path. */
#define RETRY 1

void sl_select_params_default(sl_select_params *p)
{
    if (p == NULL)
        return;
    p->band_hi = 2.0;
    p->max_iters = 20;
    p->sample_fraction = 0.01;
    p->overshoot = 1.3;
}

/* floor(factor * k) capped at d; also the bound sl_select() enforces, so
 * both round the product the same way. */
static size_t band_limit(double factor, size_t k, size_t d)
{
    double v;
    size_t b;
    if (k == 0)
        return 0;
    if (!(factor >= 1.0))
        return k;
    v = factor * (double)k;
    if (v >= (double)d)
        return d;
    b = (size_t)v;
    return b < k ? k : b;
}

size_t sl_select_capacity(sl_select_mode mode, const sl_select_params *p, size_t d, size_t k)
{
    sl_select_params def;
    if (p == NULL) {
        sl_select_params_default(&def);
        p = &def;
    }
    if (k > d)
        k = d;
    switch (mode) {
    case SL_SELECT_REDSYNC:
        return band_limit(p->band_hi, k, d);
    case SL_SELECT_DGC:
        return band_limit(p->overshoot, k, d);
    default:
        return k;
    }
}

/* ------------------------------------------------------------------------ */
/* Radix select on keys                                                     */
/* ------------------------------------------------------------------------ */

/*
 * The r-th largest (1-based) of @m keys that all lie in [lo, hi]; *n_gt and
 * *n_eq receive how many keys are larger than it and equal to it. Each
 * round histograms the current range with up to RADIX_BINS bins and keeps
 * one bin; from the second round on it works on a compacted copy of that
 * bin, so only the first round reads all @m keys.
 */
static int kth_largest(const uint32_t *keys, size_t m, size_t r, uint32_t lo, uint32_t hi,
                       uint32_t *thr, size_t *n_gt, size_t *n_eq)
{
    uint32_t hist[RADIX_BINS];
    const uint32_t *cur = keys;
    uint32_t *own = NULL;
    size_t cur_m = m, above = 0;

    for (;;) {
        uint32_t width = hi - lo, b;
        unsigned shift = 0;
        while ((width >> shift) >= RADIX_BINS)
            shift++;
        b = width >> shift;
        memset(hist, 0, ((size_t)b + 1) * sizeof hist[0]);
        for (size_t i = 0; i < cur_m; i++)
            hist[(cur[i] - lo) >> shift]++;
        while (above + hist[b] < r)
            above += hist[b--];
        lo += b << shift;
        if (shift == 0) {
            *n_eq = hist[b];
            break;
        }
        if (width - (b << shift) >= (1u << shift))
            hi = lo + ((1u << shift) - 1);
        /* Branch-free compaction writes one slot past the last kept key. */
        if (own == NULL) {
            own = malloc(((size_t)hist[b] + 1) * sizeof *own);
            if (own == NULL)
                return SL_ENOMEM;
        }
        {
            size_t j = 0;
            uint32_t span = hi - lo;
            for (size_t i = 0; i < cur_m; i++) {
                uint32_t key = cur[i];
                own[j] = key;
                j += key - lo <= span;
            }
            cur = own;
            cur_m = j;
        }
    }
    free(own);
    *thr = lo;
    *n_gt = above;
    return SL_OK;
}

/*
 * The exact answer from candidates (every index whose key >= the k-th
 * largest, in index order): keys above the threshold all go, keys equal to
 * it go for the lowest indices until there are k. Both loops are
 * branch-free; a rejected candidate's store is overwritten by the next.
 */
static int select_candidates(const uint32_t *cidx, const uint32_t *ckey, size_t m, size_t k,
                             uint32_t lo, uint32_t hi, uint32_t *idx)
{
    uint32_t thr;
    size_t n_gt, n_eq, ties, i = 0, j = 0;
    int rc = kth_largest(ckey, m, k, lo, hi, &thr, &n_gt, &n_eq);
    if (rc != SL_OK)
        return rc;
    ties = k - n_gt; /* >= 1 */
    if (ties < n_eq) {
        /* Up to the last tie that still goes, then strictly above only. */
        for (; ties != 0; i++) {
            idx[j] = cidx[i];
            j += ckey[i] >= thr;
            ties -= ckey[i] == thr;
        }
        thr++;
    }
    for (; j < k; i++) {
        idx[j] = cidx[i];
        j += ckey[i] >= thr;
    }
    return SL_OK;
}

/* key(x[i * d / s]) for i < s: a strided sample, cheap and deterministic. */
static void sample_keys(const float *x, size_t d, size_t s, uint32_t *out)
{
    for (size_t i = 0; i < s; i++)
        out[i] = sl__select_key(x[(size_t)((uint64_t)i * d / s)]);
}

static size_t isqrt_ceil(size_t v)
{
    size_t r = 0, bit = (size_t)1 << (sizeof(size_t) * 4 - 1);
    while (bit != 0) {
        if ((r + bit) * (r + bit) <= v)
            r += bit;
        bit >>= 1;
    }
    return r * r < v ? r + 1 : r;
}

/*
 * Guess a key @lo with at least @want keys >= it, from a strided sample:
 * the sample's rank e + 4 sqrt(e) + 8 (e = the sample count expected above
 * the true bound) errs low unless the sample is far off; @cap, the room for
 * the keys >= @lo, has the same margin above. @lo = 0 when the sample is too
 * small to say anything.
 */
static int guess_bound(const float *x, size_t d, size_t want, uint32_t *lo, size_t *cap)
{
    size_t s = d / 16 < SAMPLE_MAX ? d / 16 : SAMPLE_MAX;
    size_t e = (size_t)((double)want * (double)s / (double)d) + 1;
    size_t r = e + 4 * isqrt_ceil(e) + 8, n_gt, n_eq;
    double room;
    uint32_t *keys;
    int rc;

    if (r >= s) {
        *lo = 0;
        *cap = d;
        return SL_OK;
    }
    keys = malloc(s * sizeof *keys);
    if (keys == NULL)
        return SL_ENOMEM;
    sample_keys(x, d, s, keys);
    rc = kth_largest(keys, s, r, 0, SL__KEY_MASK, lo, &n_gt, &n_eq);
    free(keys);
    room = (double)(r + 4 * isqrt_ceil(r) + 8) * ((double)d / (double)s) + 256.0;
    *cap = room >= (double)d ? d : (size_t)room;
    return rc;
}

/* Candidate buffers: indices, then keys, @cap each. */
static uint32_t *candidates_alloc(size_t cap)
{
    if (cap > SIZE_MAX / (2 * sizeof(uint32_t)) - 1)
        return NULL;
    return malloc((2 * cap + 1) * sizeof(uint32_t));
}

/* ------------------------------------------------------------------------ */
/* Exact                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * One pass keeps every index with key >= @lo (at most @cap of them), then
 * the exact answer comes from those alone. RETRY when @lo was a guess that
 * did not hold: too many candidates, or fewer than k.
 */
static int exact_from_bound(const sl__select_kernels *kt, const float *x, size_t d, size_t k,
                            uint32_t lo, size_t cap, uint32_t *idx)
{
    uint32_t *cidx = candidates_alloc(cap), mx;
    size_t m;
    int rc;

    if (cidx == NULL)
        return SL_ENOMEM;
    m = kt->filter_ge(x, d, lo, cap, cidx, cidx + cap, &mx);
    if (m > cap)
        rc = RETRY;
    else if (mx >= SL__KEY_NONFINITE)
        rc = SL_ENONFINITE;
    else if (m < k)
        rc = RETRY;
    else
        rc = select_candidates(cidx, cidx + cap, m, k, lo, mx, idx);
    free(cidx);
    return rc;
}

/*
 * Ordered take straight from x when the threshold @thr has a great many
 * ties (all zeros, say): every key > thr goes, and keys == thr go for the
 * lowest indices until @ties of them went. Chunks small enough to stay in
 * L1 are counted twice (>= thr, > thr); a chunk whose ties all go is
 * filtered whole, the chunk where they run out is walked element by
 * element, and the rest only needs keys > thr.
 */
static void take_from_x(const sl__select_kernels *kt, const float *x, size_t d, uint32_t thr,
                        size_t ties, size_t k, uint32_t *idx)
{
    size_t i = 0, j = 0, c_ge, c_gt, len;
    uint32_t mx;

    while (ties != 0) {
        len = d - i < TAKE_CHUNK ? d - i : TAKE_CHUNK;
        c_ge = kt->count_ge(x + i, len, thr, &mx);
        c_gt = kt->count_ge(x + i, len, thr + 1, &mx);
        if (c_ge - c_gt > ties)
            break;
        kt->filter_ge(x + i, len, thr, c_ge, idx + j, NULL, &mx);
        for (size_t e = j + c_ge; j < e; j++)
            idx[j] += (uint32_t)i;
        ties -= c_ge - c_gt;
        i += len;
    }
    for (; ties != 0; i++) {
        uint32_t key = sl__select_key(x[i]);
        if (key >= thr) {
            idx[j++] = (uint32_t)i;
            ties -= key == thr;
        }
    }
    if (j < k) {
        size_t start = j;
        kt->filter_ge(x + i, d - i, thr + 1, k - j, idx + j, NULL, &mx);
        for (j = start; j < k; j++)
            idx[j] += (uint32_t)i;
    }
}

/*
 * The exact top k when exactly @c >= k keys are >= @lo. Usually the c
 * candidates are few and exact_from_bound() does it. When they are many,
 * the cause is nearly always one value repeated (zeros, a constant) sitting
 * at @lo: then a count of keys > lo either shows lo is the threshold (take
 * straight from x) or leaves few candidates above it.
 */
static int exact_known(const sl__select_kernels *kt, const float *x, size_t d, size_t k,
                       uint32_t lo, size_t c, uint32_t *idx)
{
    size_t c_gt;
    uint32_t mx;
    int rc;

    if (c / 4 > k && c > TAKE_CHUNK) {
        c_gt = kt->count_ge(x, d, lo + 1, &mx);
        if (c_gt < k) {
            take_from_x(kt, x, d, lo, k - c_gt, k, idx);
            return SL_OK;
        }
        lo++;
        c = c_gt;
    }
    rc = exact_from_bound(kt, x, d, k, lo, c, idx);
    return rc == RETRY ? SL_ECORRUPT : rc; /* cannot happen: the count is exact */
}

/*
 * The path that is always right: a histogram of the top 15 key bits over
 * all of x gives a bin edge with an exactly known count >= k above it.
 */
static int exact_full(const sl__select_kernels *kt, const float *x, size_t d, size_t k,
                      uint32_t *idx)
{
    double lanes[SL__SELECT_SUM_LANES] = {0};
    uint32_t *hist = calloc(SL__SELECT_HIST_BINS, sizeof *hist), b = SL__SELECT_HIST_BINS - 1, mx;
    size_t above = 0, c;

    if (hist == NULL)
        return SL_ENOMEM;
    kt->stats(x, d, lanes, &mx, hist);
    if (mx >= SL__KEY_NONFINITE) {
        free(hist);
        return SL_ENONFINITE;
    }
    while (above + hist[b] < k)
        above += hist[b--];
    c = above + hist[b];
    free(hist);
    return exact_known(kt, x, d, k, b << SL__SELECT_HIST_SHIFT, c, idx);
}

static int exact_select(const sl__select_kernels *kt, const float *x, size_t d, size_t k,
                        uint32_t *idx)
{
    uint32_t lo = 0;
    size_t cap = d;
    int rc;

    if (d >= SAMPLE_MIN_D) {
        rc = guess_bound(x, d, k, &lo, &cap);
        if (rc != SL_OK)
            return rc;
    }
    rc = exact_from_bound(kt, x, d, k, lo, cap, idx);
    if (rc == RETRY)
        rc = exact_full(kt, x, d, k, idx);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* RedSync                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * RedSync bisects r in thr = mean + r * (max - mean) until the count of
 * keys >= thr lies in [k, band]. Counting over x at every step would cost
 * a pass per step; instead a suffix histogram bounds the count, and only a
 * step the bounds cannot decide is counted exactly. The decisions, and so
 * the result, are those of plain bisection with exact counts.
 */
typedef struct redsync {
    const sl__select_kernels *kt;
    const float *x;
    size_t d, k, band;
    uint32_t iters;
    double mean, maxv;
} redsync;

/* above[b]: keys with (key - base) >> shift >= b; every key >= base. */
typedef struct suffix_hist {
    const uint32_t *above;
    uint32_t base;
    unsigned shift;
} suffix_hist;

/*
 * Bisect with counts from @h; @ckey (m candidate keys, all those >= the
 * histogram's base) or else x counts an undecided step. A step below the
 * base has at least above[0] keys, which the caller made more than band.
 * Returns 1 and the threshold when a step lands, 0 when none does.
 */
static int redsync_bisect(const redsync *rs, const suffix_hist *h, const uint32_t *ckey, size_t m,
                          uint32_t *thr)
{
    double r_lo = 0.0, r_hi = 1.0;
    uint32_t mx;

    for (uint32_t it = 0; it < rs->iters; it++) {
        double r = 0.5 * (r_lo + r_hi);
        uint32_t t = sl__select_key((float)(rs->mean + r * (rs->maxv - rs->mean)));
        uint32_t off = t < h->base ? 0 : t - h->base;
        size_t c_hi = h->above[off >> h->shift], c_lo = c_hi;
        if ((off & ((1u << h->shift) - 1)) != 0)
            c_lo = h->above[(off >> h->shift) + 1];
        if (!(c_hi < rs->k || c_lo > rs->band || (c_lo >= rs->k && c_hi <= rs->band))) {
            if (ckey != NULL) {
                c_lo = 0;
                for (size_t i = 0; i < m; i++)
                    c_lo += ckey[i] >= t;
            } else {
                c_lo = rs->kt->count_ge(rs->x, rs->d, t, &mx);
            }
            c_hi = c_lo;
        }
        if (c_hi < rs->k) {
            r_hi = r;
        } else if (c_lo > rs->band) {
            r_lo = r;
        } else {
            *thr = t;
            return 1;
        }
    }
    return 0;
}

/*
 * Fast path: one pass keeps the candidates with key >= a sampled bound lo
 * with more than band keys above it, so x is read only once more and the
 * answer comes from the candidates. RETRY when the sampled bound was wrong.
 */
static int redsync_candidates(const redsync *rs, uint32_t *idx, size_t *n)
{
    uint32_t above[RADIX_BINS + 1], *cidx, *ckey, lo, mx, t;
    size_t cap, m, j = 0;
    suffix_hist h;
    int rc = guess_bound(rs->x, rs->d, rs->band + 1, &lo, &cap);

    if (rc != SL_OK)
        return rc;
    cidx = candidates_alloc(cap);
    if (cidx == NULL)
        return SL_ENOMEM;
    ckey = cidx + cap;
    m = rs->kt->filter_ge(rs->x, rs->d, lo, cap, cidx, ckey, &mx);
    if (m > cap || m <= rs->band) {
        free(cidx);
        return RETRY;
    }
    h.above = above;
    h.base = lo;
    h.shift = 0;
    while (((mx - lo) >> h.shift) >= RADIX_BINS)
        h.shift++;
    memset(above, 0, sizeof above);
    for (size_t i = 0; i < m; i++)
        above[(ckey[i] - lo) >> h.shift]++;
    for (size_t b = RADIX_BINS; b-- > 0;)
        above[b] += above[b + 1];

    if (redsync_bisect(rs, &h, ckey, m, &t)) {
        /* At most band keys are >= t, so the last match ends the loop. */
        for (size_t i = 0; i < m && j < rs->band; i++) {
            idx[j] = cidx[i];
            j += ckey[i] >= t;
        }
        *n = j;
    } else {
        /* No step landed: the exact top k is among the candidates too. */
        rc = select_candidates(cidx, ckey, m, rs->k, lo, mx, idx);
        if (rc == SL_OK)
            *n = rs->k;
    }
    free(cidx);
    return rc;
}

/* Always-right path: the histogram covers the top 15 key bits of all x. */
static int redsync_histogram(const redsync *rs, uint32_t *idx, size_t *n)
{
    double lanes[SL__SELECT_SUM_LANES] = {0};
    uint32_t *above = calloc(SL__SELECT_HIST_BINS + 1, sizeof *above), mx, t;
    suffix_hist h;
    int rc = SL_OK;

    if (above == NULL)
        return SL_ENOMEM;
    rs->kt->stats(rs->x, rs->d, lanes, &mx, above);
    for (size_t b = SL__SELECT_HIST_BINS; b-- > 0;)
        above[b] += above[b + 1];
    h.above = above;
    h.base = 0;
    h.shift = SL__SELECT_HIST_SHIFT;
    if (redsync_bisect(rs, &h, NULL, 0, &t)) {
        *n = rs->kt->filter_ge(rs->x, rs->d, t, rs->band, idx, NULL, &mx);
    } else {
        rc = exact_select(rs->kt, rs->x, rs->d, rs->k, idx);
        if (rc == SL_OK)
            *n = rs->k;
    }
    free(above);
    return rc;
}

static int redsync_select(const sl__select_kernels *kt, const sl_select_params *p, const float *x,
                          size_t d, size_t k, uint32_t *idx, size_t *n)
{
    double lanes[SL__SELECT_SUM_LANES] = {0};
    uint32_t mx;
    redsync rs;
    int rc = RETRY;

    kt->stats(x, d, lanes, &mx, NULL);
    if (mx >= SL__KEY_NONFINITE)
        return SL_ENONFINITE;
    rs.kt = kt;
    rs.x = x;
    rs.d = d;
    rs.k = k;
    rs.band = band_limit(p->band_hi, k, d);
    rs.iters = p->max_iters;
    rs.maxv = (double)sl__bits_f32(mx);
    rs.mean = sl__select_fold_lanes(lanes) / (double)d;
    if (rs.mean > rs.maxv)
        rs.mean = rs.maxv;
    /* Candidates pay off while they are a small part of x. */
    if (d >= SAMPLE_MIN_D && rs.band <= d / 4)
        rc = redsync_candidates(&rs, idx, n);
    if (rc == RETRY)
        rc = redsync_histogram(&rs, idx, n);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* DGC                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * DGC takes the threshold from an exact select on a strided sample. The
 * sample rank aims at the middle of [k, overshoot * k] rather than at k, so
 * that sampling noise lands inside the accepted band more often than not.
 * One pass then collects the keys >= threshold into scratch (not into @idx,
 * which must stay untouched if x turns out not to be finite).
 */
static int dgc_select(const sl__select_kernels *kt, const sl_select_params *p, const float *x,
                      size_t d, size_t k, uint32_t *idx, size_t *n)
{
    const size_t band = band_limit(p->overshoot, k, d);
    size_t s = (size_t)(p->sample_fraction * (double)d), target, m, n_gt, n_eq;
    uint32_t *keys, *picked, t, mx;
    double want;
    int rc;

    if (s < 1024)
        s = 1024;
    if (s > d)
        s = d;
    want = 0.5 * ((double)k + (double)band) * (double)s / (double)d;
    target = (size_t)want;
    target += (double)target < want;
    target = target < 1 ? 1 : target > s ? s : target;

    keys = malloc(s * sizeof *keys);
    if (keys == NULL)
        return SL_ENOMEM;
    sample_keys(x, d, s, keys);
    rc = kth_largest(keys, s, target, 0, SL__KEY_MASK, &t, &n_gt, &n_eq);
    free(keys);
    if (rc != SL_OK)
        return rc;

    picked = malloc(band * sizeof *picked);
    if (picked == NULL)
        return SL_ENOMEM;
    m = kt->filter_ge(x, d, t, band, picked, NULL, &mx);
    if (m <= band && m >= k && mx < SL__KEY_NONFINITE) {
        memcpy(idx, picked, m * sizeof *idx);
        free(picked);
        *n = m;
        return SL_OK;
    }
    free(picked);
    if (m > band) {
        /* Overshoot: the exact top k is among the keys >= t. */
        size_t c = kt->count_ge(x, d, t, &mx);
        rc = mx >= SL__KEY_NONFINITE ? SL_ENONFINITE : exact_known(kt, x, d, k, t, c, idx);
    } else {
        rc = mx >= SL__KEY_NONFINITE ? SL_ENONFINITE : exact_select(kt, x, d, k, idx);
    }
    if (rc == SL_OK)
        *n = k;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */

int sl_select(sl_select_mode mode, const sl_select_params *p, const float *x, size_t d, size_t k,
              uint32_t *idx, size_t *n)
{
    const sl__select_kernels *kt;
    sl_select_params def;
    uint32_t mx;
    int rc;

    if (x == NULL || idx == NULL || n == NULL)
        return SL_EINVAL;
#if SIZE_MAX > 0xffffffffu /* a 32-bit size_t cannot exceed it */
    if ((uint64_t)d > SL_CODEC_MAX_TENSOR)
        return SL_ETOOBIG;
#endif
    if (k > d)
        return SL_EINVAL;
    if (p == NULL) {
        sl_select_params_default(&def);
        p = &def;
    }
    switch (mode) {
    case SL_SELECT_EXACT:
        break;
    case SL_SELECT_REDSYNC:
        if (!(p->band_hi >= 1.0))
            return SL_EINVAL;
        break;
    case SL_SELECT_DGC:
        if (!(p->sample_fraction > 0.0 && p->sample_fraction <= 1.0) || !(p->overshoot >= 1.0))
            return SL_EINVAL;
        break;
    default:
        return SL_EINVAL;
    }

    kt = sl__select_active();
    /* Nothing to choose: every mode returns none or all of the indices. */
    if (k == 0 || k == d) {
        if (kt->count_ge(x, d, SL__KEY_NONFINITE, &mx) != 0)
            return SL_ENONFINITE;
        for (size_t i = 0; i < k; i++)
            idx[i] = (uint32_t)i;
        *n = k;
        return SL_OK;
    }
    switch (mode) {
    case SL_SELECT_REDSYNC:
        return redsync_select(kt, p, x, d, k, idx, n);
    case SL_SELECT_DGC:
        return dgc_select(kt, p, x, d, k, idx, n);
    default:
        rc = exact_select(kt, x, d, k, idx);
        if (rc == SL_OK)
            *n = k;
        return rc;
    }
}
