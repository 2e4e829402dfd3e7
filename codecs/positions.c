/*
 * positions.c - position sections: which elements of a tensor an update
 * carries (FORMAT.md, "Position sections").
 *
 *   RICE      gaps between sorted indices, Golomb-Rice, LSB-first bits
 *   BITMAP    one bit per element, LSB-first
 *   DENSE     every element (n == d): no bytes at all
 *   ADAPTIVE  gaps, Elias-gamma-like binarisation coded with an adaptive
 *             binary range coder (LZMA's rc), for clustered selections
 *             (AUTO tries it when the gap histogram says they are clustered)
 *
 * Every decoder treats its input as hostile: it never reads past @len,
 * accepts only the one canonical encoding of a set (exact size, zero
 * padding), checks every index against @d in 64-bit arithmetic, and runs in
 * time bounded by O(len * 8 + n).
 */
#include <math.h>
#include <stdlib.h>

#include "positions_int.h"

#define RICE_MAX_PARAM 31

/* SL_OK when @idx[0..n) is strictly ascending and below @d. */
static int check_indices(const uint32_t *idx, size_t n, uint64_t d)
{
    uint32_t unsorted = 0;

    if (d > SL_CODEC_MAX_TENSOR || n > d)
        return SL_EINVAL;
    if (n == 0)
        return SL_OK;
    if (idx == NULL)
        return SL_EINVAL;
    for (size_t i = 1; i < n; i++) /* branch-free so that it vectorises */
        unsorted |= (uint32_t)(idx[i] <= idx[i - 1]);
    if (unsorted || idx[n - 1] >= d)
        return SL_EINVAL;
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* RICE                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * Exact size in bits of the Rice coding with parameter @b: each gap costs
 * (g >> b) + 1 + b bits. Gaps are g_0 = idx_0, g_i = idx_i - idx_{i-1} - 1.
 */
static uint64_t rice_bits(const uint32_t *idx, size_t n, unsigned b)
{
    uint64_t quotients;

    if (n == 0)
        return 0;
    quotients = idx[0] >> b;
    for (size_t i = 1; i < n; i++)
        quotients += (uint32_t)(idx[i] - idx[i - 1] - 1u) >> b;
    return quotients + (uint64_t)n * (1u + b);
}

/*
 * The parameter with the fewest bits (the smallest such b on ties).
 * f(b) = n (1 + b) + sum (g >> b) is convex in b: f(b+1) - f(b) =
 * n - sum ceil((g >> b) / 2) never decreases. So a walk downhill from
 * b0 = floor(log2(mean gap)) finds the exact optimum in a few passes.
 */
static unsigned rice_best(const uint32_t *idx, size_t n, uint64_t *bits)
{
    uint64_t mean, cur, next;
    unsigned b;

    if (n == 0) {
        *bits = 0;
        return 0;
    }
    mean = ((uint64_t)idx[n - 1] + 1u - n) / n; /* sum of the gaps / n */
    b = mean ? ilog2_64(mean) : 0;
    if (b > RICE_MAX_PARAM)
        b = RICE_MAX_PARAM;
    cur = rice_bits(idx, n, b);
    if (b < RICE_MAX_PARAM && (next = rice_bits(idx, n, b + 1)) < cur) {
        do {
            b++;
            cur = next;
        } while (b < RICE_MAX_PARAM && (next = rice_bits(idx, n, b + 1)) < cur);
    } else {
        while (b > 0 && (next = rice_bits(idx, n, b - 1)) <= cur) {
            b--;
            cur = next;
        }
    }
    *bits = cur;
    return b;
}

static int bits_to_bytes(uint64_t bits, size_t *bytes)
{
    uint64_t b = bits / 8 + (bits % 8 != 0);
    if (b > SIZE_MAX)
        return SL_ETOOBIG;
    *bytes = (size_t)b;
    return SL_OK;
}

static int rice_encode(unsigned b, const uint32_t *idx, size_t n, size_t bytes, sl__buf *out)
{
    const uint32_t mask = (uint32_t)((1ull << b) - 1);
    uint8_t *dst, *end;
    uint64_t acc = 0; /* pending bits, LSB first; fewer than 32 between gaps */
    unsigned fill = 0;
    uint32_t next = 0; /* smallest value the next index can take */
    int rc = sl__buf_reserve(out, bytes);

    if (rc != SL_OK)
        return rc;
    dst = out->data + out->len;
    end = dst + bytes;
    for (size_t i = 0; i < n; i++) {
        uint32_t g = idx[i] - next;
        uint64_t q = g >> b;
        uint64_t code = ((uint64_t)(g & mask) << 1) | 1u; /* stop bit, then the b low bits */

        next = idx[i] + 1u; /* idx < d <= 2^32 - 1: no wrap */
        if (q + 1 + b <= 32) {
            acc |= (code << q) << fill;
            fill += (unsigned)q + 1 + b;
        } else {
            /* a long unary run: zeros are just a fill count */
            for (; q >= 32; q -= 32) {
                store32le(dst, (uint32_t)acc);
                dst += 4;
                acc >>= 32; /* fill stays: 32 zero bits went out */
            }
            fill += (unsigned)q;
            if (fill >= 32) {
                store32le(dst, (uint32_t)acc);
                dst += 4;
                acc >>= 32;
                fill -= 32;
            }
            acc |= code << fill;
            fill += 1 + b;
        }
        if (fill >= 32) {
            store32le(dst, (uint32_t)acc);
            dst += 4;
            acc >>= 32;
            fill -= 32;
        }
    }
    for (; fill > 0; fill = fill > 8 ? fill - 8 : 0) {
        *dst++ = (uint8_t)acc;
        acc >>= 8;
    }
    if (dst != end) /* cannot happen: rice_bits() and this loop agree */
        return SL_ECORRUPT;
    out->len += bytes;
    return SL_OK;
}

/* @nb (<= 32) bits at bit @pos, LSB first; the caller checked pos + nb <= len * 8. */
static uint64_t get_bits_slow(const uint8_t *p, uint64_t pos, unsigned nb)
{
    size_t at = (size_t)(pos >> 3);
    unsigned shift = (unsigned)(pos & 7);
    unsigned need = (shift + nb + 7) >> 3;
    uint64_t v = 0;

    for (unsigned j = 0; j < need; j++)
        v |= (uint64_t)p[at + j] << (8 * j);
    return (v >> shift) & ((1ull << nb) - 1);
}

/*
 * One gap with every read bounds-checked: a unary run of zeros ended by a
 * one, then @b bits. @qmax is the largest quotient that keeps the index
 * below d; a longer run is rejected as soon as it is seen.
 */
static int rice_gap_slow(const uint8_t *p, size_t len, unsigned b, uint64_t qmax, uint64_t *pos,
                         uint64_t *gap)
{
    uint64_t at = *pos, q;
    size_t byte = (size_t)(at >> 3);
    unsigned cur;

    if (byte >= len)
        return SL_ETRUNCATED;
    cur = p[byte] >> (at & 7);
    if (cur != 0) {
        q = ctz64(cur);
    } else {
        q = 8 - (at & 7);
        for (byte++;; byte++) {
            if (q > qmax)
                return SL_ECOUNT;
            if (byte >= len)
                return SL_ETRUNCATED;
            if (p[byte] != 0)
                break;
            q += 8;
        }
        q += ctz64(p[byte]);
    }
    if (q > qmax)
        return SL_ECOUNT;
    at += q + 1;
    if (b > (uint64_t)len * 8 - at)
        return SL_ETRUNCATED;
    *gap = (q << b) | get_bits_slow(p, at, b);
    *pos = at + b;
    return SL_OK;
}

/* Bits from @pos to the end of the section: fewer than 8, all zero. */
static int check_padding(const uint8_t *p, size_t len, uint64_t pos)
{
    uint64_t nbits = (uint64_t)len * 8;

    if (nbits - pos >= 8)
        return SL_ECORRUPT; /* a whole byte more than the data needs */
    if ((pos & 7) != 0 && (p[len - 1] >> (pos & 7)) != 0)
        return SL_ECORRUPT;
    return SL_OK;
}

static int rice_decode(unsigned b, const uint8_t *p, size_t len, size_t n, uint64_t d,
                       uint32_t *idx)
{
    const uint64_t mask = (1ull << b) - 1;
    /* a 64-bit load at byte pos >> 3 stays in bounds while pos < fast_limit */
    const uint64_t fast_limit = len >= 8 ? (uint64_t)(len - 8) * 8 + 1 : 0;
    uint64_t pos = 0, next = 0;

    if (n == 0)
        return len == 0 ? SL_OK : SL_ECORRUPT;
    for (size_t i = 0; i < n; i++) {
        uint64_t gap, v;

        if (pos < fast_limit) {
            /* at least 57 valid bits; zeros shifted in at the top never
             * look like a stop bit */
            uint64_t w = load64le(p + (size_t)(pos >> 3)) >> (pos & 7);
            unsigned q = w ? ctz64(w) : 64;
            if (q + 1 + b <= 57) {
                gap = ((uint64_t)q << b) | ((w >> (q + 1)) & mask);
                pos += q + 1 + b;
                goto have_gap;
            }
        }
        {
            int rc;
            if (next >= d)
                return SL_ECOUNT;
            rc = rice_gap_slow(p, len, b, (d - 1 - next) >> b, &pos, &gap);
            if (rc != SL_OK)
                return rc;
        }
    have_gap:
        v = next + gap;
        if (v >= d)
            return SL_ECOUNT;
        idx[i] = (uint32_t)v;
        next = v + 1;
    }
    return check_padding(p, len, pos);
}

/* ------------------------------------------------------------------------ */
/* BITMAP and DENSE                                                         */
/* ------------------------------------------------------------------------ */

static int bitmap_encode(const uint32_t *idx, size_t n, uint64_t d, sl__buf *out)
{
    size_t bytes = (size_t)((d + 7) / 8); /* d <= 2^32 - 1: fits a 32-bit size_t */
    uint8_t *dst;
    int rc = sl__buf_reserve(out, bytes);

    if (rc != SL_OK)
        return rc;
    dst = out->data + out->len;
    memset(dst, 0, bytes);
    for (size_t i = 0; i < n; i++)
        dst[idx[i] >> 3] |= (uint8_t)(1u << (idx[i] & 7));
    out->len += bytes;
    return SL_OK;
}

static int bitmap_decode(const uint8_t *p, size_t len, size_t n, uint64_t d, uint32_t *idx)
{
    uint64_t bytes = (d + 7) / 8;
    size_t count = 0, at = 0;

    if (len < bytes)
        return SL_ETRUNCATED;
    if (len > bytes)
        return SL_ECORRUPT;
    if ((d & 7) != 0 && (p[len - 1] >> (d & 7)) != 0)
        return SL_ECORRUPT; /* bits past d */
    /* popcount before extracting: never write more than n indices */
    for (; at + 8 <= len; at += 8) {
        uint64_t w = load64le(p + at);
        unsigned c = popcount64(w);
        if (c > n - count)
            return SL_ECOUNT;
        for (; w != 0; w &= w - 1)
            idx[count++] = (uint32_t)(at * 8 + ctz64(w));
    }
    for (; at < len; at++) {
        unsigned w = p[at];
        if ((unsigned)popcount64(w) > n - count)
            return SL_ECOUNT;
        for (; w != 0; w &= w - 1)
            idx[count++] = (uint32_t)(at * 8 + ctz64(w));
    }
    return count == n ? SL_OK : SL_ECOUNT;
}

static int dense_decode(size_t len, size_t n, uint64_t d, uint32_t *idx)
{
    if (n != d)
        return SL_ECOUNT;
    if (len != 0)
        return SL_ECORRUPT;
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

/*
 * An estimate of what an order-0 model of the gaps' Elias-gamma buckets
 * would cost: n * H(bucket) plus the raw mantissa bits. On uniform
 * (geometric) gaps it lies above Rice's size; well below it, the gaps are
 * clustered and the ADAPTIVE coder, which also models runs, usually wins.
 * One pass and a 33-entry histogram: cheap next to coding.
 */
static double gamma_entropy_bits(const uint32_t *idx, size_t n)
{
    uint64_t hist[33] = {0}, mant = 0;
    double bits = 0;
    uint32_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)idx[i] - (i ? (uint64_t)prev + 1 : 0) + 1; /* gap + 1 >= 1 */
        unsigned k = ilog2_64(v);
        hist[k]++;
        mant += k;
        prev = idx[i];
    }
    for (unsigned k = 0; k < 33; k++)
        if (hist[k] > 0)
            bits += (double)hist[k] * log2((double)n / (double)hist[k]);
    return bits + (double)mant;
}

int sl__pos_plan(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d, sl_pos_mode *chosen,
                 uint8_t *param, size_t *bytes)
{
    sl_pos_mode best_mode;
    uint8_t best_param = 0;
    size_t best_bytes, size;
    uint64_t bits;
    unsigned b;
    int rc;

    if (chosen == NULL || param == NULL || bytes == NULL)
        return SL_EINVAL;
    rc = check_indices(idx, n, d);
    if (rc != SL_OK)
        return rc;
    switch (mode) {
    case SL_POS_AUTO:
        /* ties go to the first in the order DENSE, RICE, BITMAP */
        b = rice_best(idx, n, &bits);
        rc = bits_to_bytes(bits, &size);
        if (rc != SL_OK)
            return rc;
        best_mode = SL_POS_RICE;
        best_param = (uint8_t)b;
        best_bytes = size;
        if ((d + 7) / 8 < best_bytes) {
            best_mode = SL_POS_BITMAP;
            best_param = 0;
            best_bytes = (size_t)((d + 7) / 8);
        }
        if (n == d) {
            best_mode = SL_POS_DENSE;
            best_param = 0;
            best_bytes = 0;
        } else if (n > 0 && gamma_entropy_bits(idx, n) < (double)best_bytes * 8.0 * 0.97) {
            /* clustered gaps: the adaptive coder is worth its cost; keep it if smaller */
            size_t ad;
            rc = sl__pos_adaptive_encode(idx, n, d, NULL, &ad);
            if (rc != SL_OK)
                return rc;
            if (ad < best_bytes) {
                best_mode = SL_POS_ADAPTIVE;
                best_param = 0;
                best_bytes = ad;
            }
        }
        break;
    case SL_POS_RICE:
        b = rice_best(idx, n, &bits);
        rc = bits_to_bytes(bits, &best_bytes);
        if (rc != SL_OK)
            return rc;
        best_mode = mode;
        best_param = (uint8_t)b;
        break;
    case SL_POS_BITMAP:
        best_mode = mode;
        best_bytes = (size_t)((d + 7) / 8);
        break;
    case SL_POS_DENSE:
        if (n != d)
            return SL_EINVAL;
        best_mode = mode;
        best_bytes = 0;
        break;
    case SL_POS_ADAPTIVE:
        rc = sl__pos_adaptive_encode(idx, n, d, NULL, &best_bytes);
        if (rc != SL_OK)
            return rc;
        best_mode = mode;
        break;
    default:
        return SL_EINVAL;
    }
    *chosen = best_mode;
    *param = best_param;
    *bytes = best_bytes;
    return SL_OK;
}

int sl__pos_encode(sl_pos_mode mode, uint8_t param, const uint32_t *idx, size_t n, uint64_t d,
                   sl__buf *out)
{
    size_t bytes;
    int rc;

    if (out == NULL)
        return SL_EINVAL;
    if (param != 0 && (mode != SL_POS_RICE || param > RICE_MAX_PARAM))
        return SL_EINVAL;
    rc = check_indices(idx, n, d);
    if (rc != SL_OK)
        return rc;
    switch (mode) {
    case SL_POS_RICE:
        rc = bits_to_bytes(rice_bits(idx, n, param), &bytes);
        if (rc != SL_OK)
            return rc;
        return rice_encode(param, idx, n, bytes, out);
    case SL_POS_BITMAP:
        return bitmap_encode(idx, n, d, out);
    case SL_POS_DENSE:
        return n == d ? SL_OK : SL_EINVAL;
    case SL_POS_ADAPTIVE:
        return sl__pos_adaptive_encode(idx, n, d, out, &bytes);
    default:
        return SL_EINVAL;
    }
}

int sl__pos_write(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d, sl_pos_mode *chosen,
                  uint8_t *param, sl__buf *out)
{
    sl_pos_mode m = SL_POS_RICE;
    uint8_t b = 0;
    size_t bytes = 0, ad_bytes, mark;
    int rc;

    if (out == NULL || chosen == NULL || param == NULL)
        return SL_EINVAL;
    if (mode == SL_POS_ADAPTIVE || (mode == SL_POS_AUTO && n > 0 && n < d)) {
        /* ADAPTIVE's size is only known by running it: run it once, into @out */
        rc = check_indices(idx, n, d);
        if (rc != SL_OK)
            return rc;
        if (mode == SL_POS_AUTO) {
            uint64_t bits;
            size_t rice;
            unsigned rb = rice_best(idx, n, &bits);
            rc = bits_to_bytes(bits, &rice);
            if (rc != SL_OK)
                return rc;
            m = SL_POS_RICE;
            b = (uint8_t)rb;
            bytes = rice;
            if ((d + 7) / 8 < bytes) {
                m = SL_POS_BITMAP;
                b = 0;
                bytes = (size_t)((d + 7) / 8);
            }
            if (!(gamma_entropy_bits(idx, n) < (double)bytes * 8.0 * 0.97))
                goto write_plain;
        }
        mark = out->len;
        rc = sl__pos_adaptive_encode(idx, n, d, out, &ad_bytes);
        if (rc != SL_OK) {
            out->len = mark;
            return rc;
        }
        if (mode == SL_POS_ADAPTIVE || ad_bytes < bytes) {
            *chosen = SL_POS_ADAPTIVE;
            *param = 0;
            return SL_OK;
        }
        out->len = mark; /* not smaller after all: drop it */
        goto write_plain;
    }
    rc = sl__pos_plan(mode, idx, n, d, &m, &b, &bytes);
    if (rc != SL_OK)
        return rc;
write_plain:
    rc = sl__pos_encode(m, b, idx, n, d, out);
    if (rc != SL_OK)
        return rc;
    *chosen = m;
    *param = b;
    return SL_OK;
}

int sl__pos_decode(sl_pos_mode mode, uint8_t param, const uint8_t *p, size_t len, size_t n,
                   uint64_t d, uint32_t *idx)
{
    if ((p == NULL && len > 0) || (idx == NULL && n > 0))
        return SL_EINVAL;
    if (param > RICE_MAX_PARAM || (param != 0 && mode != SL_POS_RICE))
        return SL_ECORRUPT;
    if (d > SL_CODEC_MAX_TENSOR || n > d)
        return SL_ECOUNT;
    switch (mode) {
    case SL_POS_RICE:
        return rice_decode(param, p, len, n, d, idx);
    case SL_POS_BITMAP:
        return bitmap_decode(p, len, n, d, idx);
    case SL_POS_DENSE:
        return dense_decode(len, n, d, idx);
    case SL_POS_ADAPTIVE:
        return sl__pos_adaptive_decode(p, len, n, d, idx);
    default:
        return SL_ECORRUPT;
    }
}
