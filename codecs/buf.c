/* buf.c - growable output buffer and bounds-checked reader. */
#include <math.h>
#include <stdlib.h>

#include "codec_int.h"

int sl__buf_reserve(sl__buf *b, size_t extra)
{
    size_t need, cap;
    uint8_t *grown;

    if (extra > SIZE_MAX - b->len)
        return SL_ETOOBIG;
    need = b->len + extra;
    if (need <= b->cap)
        return SL_OK;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    grown = realloc(b->data, cap);
    if (grown == NULL)
        return SL_ENOMEM;
    b->data = grown;
    b->cap = cap;
    return SL_OK;
}

int sl__buf_append(sl__buf *b, const void *p, size_t n)
{
    int rc = sl__buf_reserve(b, n);
    if (rc != SL_OK)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return SL_OK;
}

int sl__buf_put_varint(sl__buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        uint8_t byte = (uint8_t)(v & 0x7f);
        v >>= 7;
        tmp[n++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v);
    return sl__buf_append(b, tmp, n);
}

static int put_le(sl__buf *b, uint64_t v, size_t n)
{
    uint8_t tmp[8];
    for (size_t i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    return sl__buf_append(b, tmp, n);
}

int sl__buf_put_u8(sl__buf *b, uint8_t v)
{
    return sl__buf_append(b, &v, 1);
}

int sl__buf_put_u16(sl__buf *b, uint16_t v)
{
    return put_le(b, v, 2);
}

int sl__buf_put_u32(sl__buf *b, uint32_t v)
{
    return put_le(b, v, 4);
}

int sl__buf_put_u64(sl__buf *b, uint64_t v)
{
    return put_le(b, v, 8);
}

int sl__buf_put_f32(sl__buf *b, float v)
{
    return put_le(b, sl__f32_bits(v), 4);
}

void sl__buf_free(sl__buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int get_le(sl__reader *r, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (r->len - r->pos < n)
        return SL_ETRUNCATED;
    for (size_t i = 0; i < n; i++)
        x |= (uint64_t)r->p[r->pos + i] << (8 * i);
    r->pos += n;
    *v = x;
    return SL_OK;
}

int sl__rd_u8(sl__reader *r, uint8_t *v)
{
    uint64_t x;
    int rc = get_le(r, 1, &x);
    if (rc == SL_OK)
        *v = (uint8_t)x;
    return rc;
}

int sl__rd_u16(sl__reader *r, uint16_t *v)
{
    uint64_t x;
    int rc = get_le(r, 2, &x);
    if (rc == SL_OK)
        *v = (uint16_t)x;
    return rc;
}

int sl__rd_u32(sl__reader *r, uint32_t *v)
{
    uint64_t x;
    int rc = get_le(r, 4, &x);
    if (rc == SL_OK)
        *v = (uint32_t)x;
    return rc;
}

int sl__rd_u64(sl__reader *r, uint64_t *v)
{
    return get_le(r, 8, v);
}

int sl__rd_f32(sl__reader *r, float *v)
{
    uint64_t x;
    int rc = get_le(r, 4, &x);
    if (rc == SL_OK)
        *v = sl__bits_f32((uint32_t)x);
    return rc;
}

int sl__rd_varint(sl__reader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < 10; i++) {
        uint8_t byte;
        if (r->pos >= r->len)
            return SL_ETRUNCATED;
        byte = r->p[r->pos++];
        if (i == 9 && byte > 1) /* bits beyond 64 */
            return SL_ECORRUPT;
        x |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            if (i > 0 && byte == 0) /* not minimal: one canonical encoding per value */
                return SL_ECORRUPT;
            *v = x;
            return SL_OK;
        }
    }
    return SL_ECORRUPT;
}

int sl__rd_bytes(sl__reader *r, size_t n, const uint8_t **p)
{
    if (r->len - r->pos < n)
        return SL_ETRUNCATED;
    *p = r->p + r->pos;
    r->pos += n;
    return SL_OK;
}

int sl__all_finite(const float *x, size_t n)
{
    /* exponent all ones means Inf or NaN; OR-reduce without branches */
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = sl__f32_bits(x[i]);
        bad |= ((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}
