/* support.c - sets of coordinates both ends of a split update know (SL_FRAME_FLAG_SPLIT). */
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"

static sl_support *support_new(uint64_t d)
{
    sl_support *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->d = d;
    s->len = (size_t)((d + 7) / 8);
    s->bits = calloc(s->len ? s->len : 1, 1);
    if (s->bits == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

static void support_seal(sl_support *s)
{
    uint64_t count = 0;
    for (size_t i = 0; i < s->len; i++)
        count += (uint64_t)__builtin_popcount(s->bits[i]);
    s->count = count;
    s->crc = sl__crc32(s->bits, s->len);
}

int sl_support_diff(const sl_layout *layout, const float *from, const float *to, sl_support **out)
{
    sl_support *s;
    uint64_t d;
    if (layout == NULL || from == NULL || to == NULL || out == NULL)
        return SL_EINVAL;
    d = sl_layout_params(layout);
    if ((s = support_new(d)) == NULL)
        return SL_ENOMEM;
    for (uint64_t j = 0; j < d; j++) {
        uint32_t a, b;
        memcpy(&a, &from[j], sizeof a); /* bits, not values: -0 against 0 is a change */
        memcpy(&b, &to[j], sizeof b);
        if (a != b)
            s->bits[j >> 3] |= (uint8_t)(1u << (j & 7));
    }
    support_seal(s);
    *out = s;
    return SL_OK;
}

int sl_support_load(const sl_layout *layout, const void *bits, size_t len, sl_support **out)
{
    sl_support *s;
    uint64_t d;
    if (layout == NULL || (bits == NULL && len > 0) || out == NULL)
        return SL_EINVAL;
    d = sl_layout_params(layout);
    if (len != (size_t)((d + 7) / 8))
        return SL_ECORRUPT;
    if ((d & 7) != 0 && (((const uint8_t *)bits)[len - 1] >> (d & 7)) != 0)
        return SL_ECORRUPT; /* padding bits past the last coordinate */
    if ((s = support_new(d)) == NULL)
        return SL_ENOMEM;
    if (len > 0)
        memcpy(s->bits, bits, len);
    support_seal(s);
    *out = s;
    return SL_OK;
}

const uint8_t *sl_support_bits(const sl_support *s, size_t *len)
{
    if (len != NULL)
        *len = s != NULL ? s->len : 0;
    return s != NULL ? s->bits : NULL;
}

uint64_t sl_support_count(const sl_support *s)
{
    return s != NULL ? s->count : 0;
}

uint32_t sl_support_crc(const sl_support *s)
{
    return s != NULL ? s->crc : 0;
}

void sl_support_free(sl_support *s)
{
    if (s == NULL)
        return;
    free(s->bits);
    free(s);
}

static int has(const sl_support *s, uint64_t j)
{
    return (s->bits[j >> 3] >> (j & 7)) & 1;
}

void sl__split_ranks(const sl_support *s, const uint32_t *flat, size_t n, uint32_t *in, size_t *nin,
                     uint32_t *out, size_t *nout)
{
    uint64_t rin = 0, rout = 0, j = 0;
    size_t a = 0, b = 0;
    for (size_t i = 0; i < n; i++) {
        /* count the part sizes up to flat[i], a byte at a time where possible */
        while (j < flat[i]) {
            if ((j & 7) == 0 && j + 8 <= flat[i]) {
                unsigned c = (unsigned)__builtin_popcount(s->bits[j >> 3]);
                rin += c;
                rout += 8 - c;
                j += 8;
            } else {
                if (has(s, j))
                    rin++;
                else
                    rout++;
                j++;
            }
        }
        if (has(s, j))
            in[a++] = (uint32_t)rin++;
        else
            out[b++] = (uint32_t)rout++;
        j++;
    }
    *nin = a;
    *nout = b;
}

int sl__split_merge(const sl_support *s, const uint32_t *in, size_t nin, const uint32_t *out,
                    size_t nout, uint32_t *flat)
{
    uint64_t rin = 0, rout = 0;
    size_t a = 0, b = 0, k = 0;
    /* the ranks are ascending and within their parts (the position decoder checked them
     * against the part's size), so one walk over the coordinates finds them all */
    for (uint64_t j = 0; j < s->d && (a < nin || b < nout); j++) {
        if (has(s, j)) {
            if (a < nin && in[a] == rin) {
                flat[k++] = (uint32_t)j;
                a++;
            }
            rin++;
        } else {
            if (b < nout && out[b] == rout) {
                flat[k++] = (uint32_t)j;
                b++;
            }
            rout++;
        }
    }
    return a == nin && b == nout ? SL_OK : SL_ECOUNT;
}
