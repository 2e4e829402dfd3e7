/*
 * positions_adaptive.c - the ADAPTIVE position coding: gaps binarised
 * Elias-gamma style and coded with an adaptive binary range coder
 * (FORMAT.md, "ADAPTIVE"). For clustered selections.
 */
#include <stdlib.h>

#include "positions_int.h"
/* ------------------------------------------------------------------------ */
/* ADAPTIVE: binary range coder                                             */
/* ------------------------------------------------------------------------ */

/*
 * The range coder of LZMA (32-bit range, carries resolved through a cached
 * byte and a count of pending 0xff bytes) with 15-bit probabilities whose
 * adaptation rate starts fast and slows down as a context sees more bits:
 * after c bits the estimate moves by 1/2^floor(log2(c + 2)) of the error,
 * about 1/(c + 2) like a counting estimator, until 1/2^RC_RATE_MAX.
 * The first byte LZMA writes is always zero; it is not stored. Integer
 * arithmetic only: the same bytes on every platform.
 */
#define RC_PROB_BITS 15
#define RC_PROB_ONE  (1u << RC_PROB_BITS)
#define RC_RATE_MAX  7
#define RC_SEEN_MAX  ((1u << RC_RATE_MAX) - 2)
#define RC_TOP       (1u << 24)

/* One adaptive bit: probability of a zero in [1, RC_PROB_ONE - 1]. */
typedef struct rc_prob {
    uint16_t p;
    uint16_t seen;
} rc_prob;

/* Branch-free: the decoder's bits are unpredictable by design. */
static inline void rc_adapt(rc_prob *m, unsigned bit)
{
    unsigned shift = 31u - (unsigned)__builtin_clz(m->seen + 2u);
    uint32_t one = 0u - (uint32_t)bit; /* all ones when the bit is 1 */
    uint32_t p = m->p;

    p += ((RC_PROB_ONE - p) >> shift) & ~one;
    p -= (p >> shift) & one;
    m->p = (uint16_t)p;
    m->seen = (uint16_t)(m->seen + (m->seen < RC_SEEN_MAX));
}

/*
 * The model. A gap g is coded as v = g + 1 = 2^k + m, 0 <= m < 2^k,
 * k = floor(log2 v) in [0, 31] (g < 2^32 - 1):
 *   1. "k != 0" (g > 0) with a context: after a run of r >= 1 zero gaps,
 *      32 + floor(log2 r); otherwise the bucket of the last nonzero gap
 *      (0 before the first one);
 *   2. if k != 0, k - 1 as a 5-bit binary tree, context: the bucket of the
 *      last nonzero gap;
 *   3. the top min(k, 2) bits of m as a binary tree, context: k;
 *   4. the remaining bits of m, most significant first, at probability 1/2.
 */
#define AD_ZERO_CTX  64
#define AD_BUCKETS   32
#define AD_MANT_BITS 2

typedef struct ad_model {
    rc_prob zero[AD_ZERO_CTX];
    rc_prob bucket[AD_BUCKETS][AD_BUCKETS];
    rc_prob mant[AD_BUCKETS][1u << AD_MANT_BITS];
} ad_model;

typedef struct ad_state {
    uint64_t zrun;    /* zero gaps since the last nonzero one */
    unsigned last_nz; /* bucket of the last nonzero gap */
} ad_state;

/* Q31 fixed point: the same integers on every platform. */
#define AD_Q31         (1ull << 31)

#define AD_PRIOR_SEEN  6                  /* the prior counts as this many bits seen */
#define AD_PRIOR_CLAMP (RC_PROB_ONE / 64) /* a surprise costs at most 6 bits */

/* P(bit = 0) = @w0 / @w as a clamped 15-bit probability with a prior weight. */
static rc_prob ad_prior(uint64_t w0, uint64_t w)
{
    rc_prob m = {RC_PROB_ONE / 2, AD_PRIOR_SEEN};
    if (w != 0) {
        uint64_t p = (w0 << RC_PROB_BITS) / w; /* w <= 2^32: no overflow */
        if (p < AD_PRIOR_CLAMP)
            p = AD_PRIOR_CLAMP;
        if (p > RC_PROB_ONE - AD_PRIOR_CLAMP)
            p = RC_PROB_ONE - AD_PRIOR_CLAMP;
        m.p = (uint16_t)p;
    }
    return m;
}

/*
 * Start every context from what uniformly random positions would give:
 * gaps geometric with P(g >= x) = q^x, q = 1 - n/d. Both sides know n and
 * d. Clustered selections move away from it within a few dozen gaps.
 */
static void ad_init(ad_model *m, ad_state *s, size_t n, uint64_t d)
{
    uint64_t q = ((d - n) << 31) / d;            /* 1 - n/d, Q31; n >= 1, d < 2^32 */
    uint64_t tail[AD_BUCKETS + 1];               /* tail[k] = q^(2^k - 1) = P(bucket >= k) */
    uint64_t pow2[AD_BUCKETS];                   /* pow2[j] = q^(2^j) */
    uint64_t weight[AD_BUCKETS];                 /* P(bucket == k) */
    rc_prob zero = ad_prior(AD_Q31 - q, AD_Q31); /* P(g == 0) = n/d */

    tail[0] = AD_Q31;
    pow2[0] = q;
    for (unsigned k = 0; k < AD_BUCKETS; k++) {
        tail[k + 1] = ((tail[k] * tail[k]) >> 31) * q >> 31;
        if (k + 1 < AD_BUCKETS)
            pow2[k + 1] = (pow2[k] * pow2[k]) >> 31;
    }
    for (unsigned k = 0; k < AD_BUCKETS; k++)
        weight[k] = tail[k] - tail[k + 1];
    for (unsigned i = 0; i < AD_ZERO_CTX; i++)
        m->zero[i] = zero;
    /* bucket tree over k - 1 in [0, 31]: node at depth j covers 2^(5 - j) leaves */
    for (unsigned node = 1; node < AD_BUCKETS; node++) {
        unsigned depth = ilog2_64(node);
        unsigned width = AD_BUCKETS >> depth;
        unsigned lo = (node - (1u << depth)) * width + 1; /* first bucket */
        uint64_t w0 = 0, w1 = 0;
        rc_prob prior;
        for (unsigned k = lo; k < lo + width && k < AD_BUCKETS; k++)
            *(k < lo + width / 2 ? &w0 : &w1) += weight[k];
        prior = ad_prior(w0, w0 + w1);
        for (unsigned c = 0; c < AD_BUCKETS; c++)
            m->bucket[c][node] = prior;
    }
    /* mantissa of bucket k: a node at depth j halves a range of 2^(k - j)
     * values; geometric gaps put 1 / (1 + q^(2^(k - j - 1))) in the lower half */
    for (unsigned k = 0; k < AD_BUCKETS; k++) {
        m->mant[k][0] = ad_prior(0, 0);
        for (unsigned node = 1; node < (1u << AD_MANT_BITS); node++) {
            unsigned depth = ilog2_64(node);
            m->mant[k][node] =
                depth < k ? ad_prior(AD_Q31, AD_Q31 + pow2[k - depth - 1]) : ad_prior(0, 0);
        }
    }
    s->zrun = 0;
    s->last_nz = 0;
}

static inline unsigned ad_zero_ctx(const ad_state *s)
{
    return s->zrun ? 32u + ilog2_64(s->zrun) : s->last_nz; /* zrun < 2^32 */
}

static inline void ad_update(ad_state *s, unsigned k)
{
    if (k == 0) {
        s->zrun++;
    } else {
        s->zrun = 0;
        s->last_nz = k;
    }
}

typedef struct rc_enc {
    uint64_t low; /* 33 bits: bit 32 is a carry into the cached byte */
    uint32_t range;
    uint8_t cache;
    uint64_t pending; /* the cached byte plus this many - 1 bytes of 0xff */
    uint64_t emitted; /* bytes produced, the unstored leading zero included */
    sl__buf *out;     /* NULL: only count */
    int err;
} rc_enc;

static void rc_emit(rc_enc *e, uint8_t byte)
{
    if (e->emitted++ == 0)
        return; /* always 0: the coded value is below 1 */
    if (e->out == NULL || e->err != SL_OK)
        return;
    if (e->out->len == e->out->cap) {
        int rc = sl__buf_reserve(e->out, 1); /* grows geometrically */
        if (rc != SL_OK) {
            e->err = rc;
            return;
        }
    }
    e->out->data[e->out->len++] = byte;
}

static void rc_shift_low(rc_enc *e)
{
    if ((uint32_t)e->low < 0xff000000u || (e->low >> 32) != 0) {
        uint8_t carry = (uint8_t)(e->low >> 32);
        uint8_t byte = e->cache;
        do {
            rc_emit(e, (uint8_t)(byte + carry));
            byte = 0xff;
        } while (--e->pending != 0);
        e->cache = (uint8_t)(e->low >> 24);
    }
    e->pending++;
    e->low = (e->low & 0x00ffffffu) << 8;
}

/*
 * Both sides of a split get at least range >> 15 >= 2^9, so at most two
 * normalisation steps bring the range back to >= 2^24.
 */
static inline void rc_bit(rc_enc *e, rc_prob *m, unsigned bit)
{
    uint32_t bound = (e->range >> RC_PROB_BITS) * m->p;
    uint32_t one = 0u - (uint32_t)bit;

    e->low += bound & one;
    e->range = ((e->range - bound) & one) | (bound & ~one);
    rc_adapt(m, bit);
    while (e->range < RC_TOP) {
        e->range <<= 8;
        rc_shift_low(e);
    }
}

static inline void rc_direct(rc_enc *e, unsigned bit)
{
    e->range >>= 1;
    e->low += e->range & (0u - (uint32_t)bit);
    if (e->range < RC_TOP) {
        e->range <<= 8;
        rc_shift_low(e);
    }
}

static void rc_tree(rc_enc *e, rc_prob *probs, unsigned nbits, unsigned sym)
{
    unsigned node = 1;
    while (nbits-- > 0) {
        unsigned bit = (sym >> nbits) & 1u;
        rc_bit(e, &probs[node], bit);
        node = (node << 1) | bit;
    }
}

/*
 * Code the gaps of @idx (already validated) into @out, or only count the
 * bytes when @out is NULL. The section of n == 0 is empty.
 */
int sl__pos_adaptive_encode(const uint32_t *idx, size_t n, uint64_t d, sl__buf *out, size_t *bytes)
{
    ad_model m;
    ad_state s;
    rc_enc e = {0, 0xffffffffu, 0, 1, 0, out, SL_OK};
    size_t start = out ? out->len : 0;
    uint32_t next = 0;

    if (n == 0) {
        *bytes = 0;
        return SL_OK;
    }
    ad_init(&m, &s, n, d);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)(idx[i] - next) + 1u; /* in [1, 2^32 - 1] */
        unsigned k = ilog2_64(v);

        next = idx[i] + 1u;
        rc_bit(&e, &m.zero[ad_zero_ctx(&s)], k != 0);
        if (k != 0) {
            unsigned top = k < AD_MANT_BITS ? k : AD_MANT_BITS;
            unsigned low = k - top;
            uint32_t mant = (uint32_t)(v - (1ull << k));

            rc_tree(&e, m.bucket[s.last_nz], 5, k - 1);
            rc_tree(&e, m.mant[k], top, mant >> low);
            while (low-- > 0)
                rc_direct(&e, (mant >> low) & 1u);
        }
        ad_update(&s, k);
    }
    for (int i = 0; i < 5; i++)
        rc_shift_low(&e);
    if (e.err == SL_OK && e.emitted - 1 > SIZE_MAX)
        e.err = SL_ETOOBIG;
    if (e.err != SL_OK) {
        if (out != NULL)
            out->len = start;
        return e.err;
    }
    *bytes = (size_t)(e.emitted - 1);
    return SL_OK;
}

typedef struct rc_dec {
    uint32_t range;
    uint32_t code; /* coded value minus the interval's low end; < range */
    const uint8_t *p;
    size_t pos, len;
    int truncated;
} rc_dec;

static inline void rc_dec_norm(rc_dec *r)
{
    while (r->range < RC_TOP) {
        r->range <<= 8;
        r->code <<= 8;
        if (r->pos < r->len)
            r->code |= r->p[r->pos++];
        else
            r->truncated = 1; /* noticed after the current gap */
    }
}

/* Branch-free like rc_adapt(): these bits are unpredictable. */
static inline unsigned rc_dec_bit(rc_dec *r, rc_prob *m)
{
    uint32_t bound = (r->range >> RC_PROB_BITS) * m->p;
    unsigned bit = r->code >= bound;
    uint32_t one = 0u - (uint32_t)bit;

    r->code -= bound & one;
    r->range = ((r->range - bound) & one) | (bound & ~one);
    rc_adapt(m, bit);
    rc_dec_norm(r);
    return bit;
}

static inline unsigned rc_dec_direct(rc_dec *r)
{
    unsigned bit;
    r->range >>= 1;
    bit = r->code >= r->range;
    r->code -= r->range & (0u - bit);
    rc_dec_norm(r);
    return bit;
}

static inline unsigned rc_dec_tree(rc_dec *r, rc_prob *probs, unsigned nbits)
{
    unsigned node = 1;
    for (unsigned i = 0; i < nbits; i++)
        node = (node << 1) | rc_dec_bit(r, &probs[node]);
    return node - (1u << nbits);
}

int sl__pos_adaptive_decode(const uint8_t *p, size_t len, size_t n, uint64_t d, uint32_t *idx)
{
    ad_model m;
    ad_state s;
    rc_dec r;
    uint64_t next = 0;

    if (n == 0)
        return len == 0 ? SL_OK : SL_ECORRUPT;
    if (len < 4)
        return SL_ETRUNCATED;
    r.range = 0xffffffffu;
    r.code = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    r.p = p;
    r.pos = 4;
    r.len = len;
    r.truncated = 0;
    if (r.code >= r.range)
        return SL_ECORRUPT; /* keeps code < range, so no bit is ever lost */
    ad_init(&m, &s, n, d);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 1;
        unsigned k = 0;

        if (rc_dec_bit(&r, &m.zero[ad_zero_ctx(&s)])) {
            unsigned top, low;
            uint64_t mant;

            k = 1 + rc_dec_tree(&r, m.bucket[s.last_nz], 5);
            if (k >= AD_BUCKETS) {
                /* gap >= 2^32 - 1: no index < d can follow */
                return r.truncated ? SL_ETRUNCATED : SL_ECOUNT;
            }
            top = k < AD_MANT_BITS ? k : AD_MANT_BITS;
            low = k - top;
            mant = rc_dec_tree(&r, m.mant[k], top);
            while (low-- > 0)
                mant = (mant << 1) | rc_dec_direct(&r);
            v = (1ull << k) + mant;
        }
        if (r.truncated)
            return SL_ETRUNCATED;
        next += v - 1; /* the index: below 2^33 + 2^32, no overflow */
        if (next >= d)
            return SL_ECOUNT;
        idx[i] = (uint32_t)next;
        next++;
        ad_update(&s, k);
    }
    if (r.pos != len)
        return SL_ECORRUPT; /* bytes after the end of the coded data */
    if (r.code != 0)
        return SL_ECORRUPT; /* the encoder's flush leaves exactly zero */
    return SL_OK;
}
