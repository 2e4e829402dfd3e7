/* frame.c - frame envelope (header, CRC) and lossless model / model-delta frames. */
#include <stdlib.h>
#include <zlib.h>

#include "codec_int.h"

#define DEFAULT_MAX_FRAME  (256ull << 20)
#define DEFAULT_MAX_OUTPUT (4ull << 30)

enum { MODEL_RAW = 0, MODEL_ZSTD = 1, MODEL_SPARSE = 2 };

void sl__limits(const sl_decode_limits *limits, sl_decode_limits *out)
{
    out->max_frame_bytes = DEFAULT_MAX_FRAME;
    out->max_output_bytes = DEFAULT_MAX_OUTPUT;
    if (limits != NULL) {
        if (limits->max_frame_bytes != 0)
            out->max_frame_bytes = limits->max_frame_bytes;
        if (limits->max_output_bytes != 0)
            out->max_output_bytes = limits->max_output_bytes;
    }
}

uint32_t sl__crc32(const uint8_t *p, size_t len)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (len > 0) { /* zlib takes uInt lengths */
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = crc32(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)crc;
}

int sl__frame_begin(sl__buf *b, const sl_frame_header *h)
{
    int rc = sl__buf_append(b, SL__FRAME_MAGIC, 4);
    if (rc == SL_OK)
        rc = sl__buf_put_u8(b, SL_FRAME_VERSION);
    if (rc == SL_OK)
        rc = sl__buf_put_u8(b, h->kind);
    if (rc == SL_OK)
        rc = sl__buf_put_u16(b, h->flags);
    if (rc == SL_OK)
        rc = sl__buf_put_u64(b, h->layout_hash);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(b, h->base_version);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(b, h->round);
    if (rc == SL_OK && (h->flags & SL_FRAME_FLAG_SPLIT))
        rc = sl__buf_put_varint(b, h->ref_version);
    return rc;
}

int sl__frame_finish(sl__buf *b)
{
    return sl__buf_put_u32(b, sl__crc32(b->data, b->len));
}

static int parse_header(sl__reader *r, sl_frame_header *h)
{
    const uint8_t *magic;
    int rc;
    if ((rc = sl__rd_bytes(r, 4, &magic)) != SL_OK)
        return rc;
    if (memcmp(magic, SL__FRAME_MAGIC, 4) != 0)
        return SL_EMAGIC;
    if ((rc = sl__rd_u8(r, &h->version)) != SL_OK)
        return rc;
    if (h->version != SL_FRAME_VERSION)
        return SL_EVERSION;
    if ((rc = sl__rd_u8(r, &h->kind)) != SL_OK || (rc = sl__rd_u16(r, &h->flags)) != SL_OK ||
        (rc = sl__rd_u64(r, &h->layout_hash)) != SL_OK ||
        (rc = sl__rd_varint(r, &h->base_version)) != SL_OK ||
        (rc = sl__rd_varint(r, &h->round)) != SL_OK)
        return rc;
    if (h->kind < SL_FRAME_UPDATE || h->kind > SL_FRAME_MODEL_DELTA ||
        (h->flags & ~(unsigned)(SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT)) != 0 ||
        (h->flags != 0 && h->kind != SL_FRAME_UPDATE) ||
        ((h->flags & SL_FRAME_FLAG_SPLIT) && !(h->flags & SL_FRAME_FLAG_FLAT)))
        return SL_ECORRUPT;
    h->ref_version = 0;
    if (h->flags & SL_FRAME_FLAG_SPLIT) {
        if ((rc = sl__rd_varint(r, &h->ref_version)) != SL_OK)
            return rc;
        /* a version the device held before the one it trained from */
        if (h->ref_version == 0 || h->ref_version >= h->base_version)
            return SL_ECORRUPT;
    }
    return SL_OK;
}

int sl__frame_open(const void *frame, size_t len, const sl_decode_limits *limits,
                   sl_frame_header *h, sl__reader *body)
{
    sl_decode_limits lim;
    sl_frame_header hdr;
    sl__reader r;
    uint32_t stored;
    const uint8_t *p = frame;
    int rc;

    if (frame == NULL && len > 0)
        return SL_EINVAL;
    sl__limits(limits, &lim);
    if (len > lim.max_frame_bytes)
        return SL_ETOOBIG;
    /* the header first, so a foreign or future file gets SL_EMAGIC/SL_EVERSION */
    r.p = p;
    r.len = len;
    r.pos = 0;
    if ((rc = parse_header(&r, &hdr)) != SL_OK)
        return rc;
    if (len - r.pos < SL__FRAME_CRC_BYTES)
        return SL_ETRUNCATED;
    stored = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 | (uint32_t)p[len - 2] << 16 |
             (uint32_t)p[len - 1] << 24;
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    if (sl__crc32(p, len - 4) != stored)
        return SL_ECHECKSUM;
#else
    (void)stored; /* fuzzers mutate past the CRC, so that they reach the body decoders */
#endif
    body->p = p + r.pos;
    body->len = len - 4 - r.pos;
    body->pos = 0;
    *h = hdr;
    return SL_OK;
}

int sl_frame_peek_header(const void *frame, size_t len, sl_frame_header *out)
{
    sl__reader body;
    sl_frame_header h;
    sl_decode_limits lim = {UINT64_MAX, UINT64_MAX};
    int rc;
    if (out == NULL)
        return SL_EINVAL;
    rc = sl__frame_open(frame, len, &lim, &h, &body);
    if (rc == SL_OK)
        *out = h;
    return rc;
}

/* Model body: varint params, u8 coding, then raw LE floats or one zstd frame of the shuffle. */
static int encode_model_body(const uint32_t *bits, uint64_t n, int level, sl__buf *out)
{
    size_t bytes = (size_t)n * 4;
    size_t mark;
    uint8_t *planes;
    int rc;

    if ((rc = sl__buf_put_varint(out, n)) != SL_OK)
        return rc;
    mark = out->len;
    if ((rc = sl__buf_put_u8(out, MODEL_ZSTD)) != SL_OK)
        return rc;
    planes = malloc(bytes ? bytes : 1);
    if (planes == NULL)
        return SL_ENOMEM;
    {
        /* serialise little-endian whatever the host order, then shuffle */
        uint8_t *le = malloc(bytes ? bytes : 1);
        if (le == NULL) {
            free(planes);
            return SL_ENOMEM;
        }
        for (size_t i = 0; i < (size_t)n; i++) {
            le[4 * i] = (uint8_t)bits[i];
            le[4 * i + 1] = (uint8_t)(bits[i] >> 8);
            le[4 * i + 2] = (uint8_t)(bits[i] >> 16);
            le[4 * i + 3] = (uint8_t)(bits[i] >> 24);
        }
        sl__shuffle(le, (size_t)n, 4, planes);
        rc = sl__zstd_append(planes, bytes, level, out);
        if (rc == SL_OK && out->len - mark - 1 >= bytes) {
            /* incompressible: store the raw little-endian bytes instead */
            out->len = mark;
            rc = sl__buf_put_u8(out, MODEL_RAW);
            if (rc == SL_OK)
                rc = sl__buf_append(out, le, bytes);
        }
        free(le);
    }
    free(planes);
    return rc;
}

/* A delta's sparse body (coding 2): varint params, u8 coding, varint m (the words that differ),
 * then when m > 0 their positions (position coding, Rice parameter, varint section bytes, the
 * section) and their XOR words, little-endian u32s in a coded part. SL_ETOOBIG when the
 * parameters are more than a position section can index. */
static int encode_sparse_body(const uint32_t *bits, uint64_t n, int level, sl__buf *out)
{
    size_t m = 0, k = 0;
    uint32_t *idx = NULL;
    uint8_t *le = NULL;
    sl__buf pos = {0};
    sl_pos_mode chosen;
    uint8_t param;
    int rc;

    if (n > SL_CODEC_MAX_TENSOR)
        return SL_ETOOBIG;
    for (size_t i = 0; i < (size_t)n; i++)
        m += bits[i] != 0;
    if ((rc = sl__buf_put_varint(out, n)) != SL_OK ||
        (rc = sl__buf_put_u8(out, MODEL_SPARSE)) != SL_OK ||
        (rc = sl__buf_put_varint(out, m)) != SL_OK || m == 0)
        return rc;
    idx = malloc(m * sizeof *idx);
    le = malloc(m * 4);
    if (idx == NULL || le == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < (size_t)n; i++)
        if (bits[i] != 0) {
            idx[k] = (uint32_t)i;
            le[4 * k] = (uint8_t)bits[i];
            le[4 * k + 1] = (uint8_t)(bits[i] >> 8);
            le[4 * k + 2] = (uint8_t)(bits[i] >> 16);
            le[4 * k + 3] = (uint8_t)(bits[i] >> 24);
            k++;
        }
    rc = sl__pos_write(SL_POS_AUTO, idx, m, n, &chosen, &param, &pos);
    if (rc == SL_OK)
        rc = sl__buf_put_u8(out, (uint8_t)chosen);
    if (rc == SL_OK)
        rc = sl__buf_put_u8(out, param);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(out, pos.len);
    if (rc == SL_OK)
        rc = sl__buf_append(out, pos.data, pos.len);
    if (rc == SL_OK)
        rc = sl__coded_put(le, m * 4, 4, level, out);
done:
    sl__buf_free(&pos);
    free(idx);
    free(le);
    return rc;
}

/* A model frame, or with @base a delta frame; with @sparse the delta takes the sparse body
 * when that is smaller than the dense one. */
static int encode_model(const sl_layout *layout, const float *params, const float *base,
                        uint64_t version, int level, int sparse, void **out, size_t *out_len)
{
    sl_frame_header h = {SL_FRAME_VERSION,
                         base ? SL_FRAME_MODEL_DELTA : SL_FRAME_MODEL,
                         0,
                         sl_layout_hash(layout),
                         version,
                         0,
                         0};
    uint64_t n;
    uint32_t *bits;
    sl__buf b = {0};
    int rc;

    if (layout == NULL || params == NULL || out == NULL || out_len == NULL)
        return SL_EINVAL;
    n = sl_layout_params(layout);
    if (!sl__all_finite(params, (size_t)n) || (base && !sl__all_finite(base, (size_t)n)))
        return SL_ENONFINITE;
    bits = malloc((size_t)n * 4 + 4);
    if (bits == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < (size_t)n; i++)
        bits[i] = sl__f32_bits(params[i]) ^ (base ? sl__f32_bits(base[i]) : 0);
    rc = sl__frame_begin(&b, &h);
    if (rc == SL_OK) {
        size_t mark = b.len;
        rc = encode_model_body(bits, n, level, &b);
        if (rc == SL_OK && base != NULL && sparse) {
            sl__buf sb = {0};
            rc = encode_sparse_body(bits, n, level, &sb);
            if (rc == SL_OK && sb.len < b.len - mark) {
                b.len = mark;
                rc = sl__buf_append(&b, sb.data, sb.len);
            } else if (rc == SL_ETOOBIG) {
                rc = SL_OK; /* the dense body, as it is */
            }
            sl__buf_free(&sb);
        }
    }
    if (rc == SL_OK)
        rc = sl__frame_finish(&b);
    free(bits);
    if (rc != SL_OK) {
        sl__buf_free(&b);
        return rc;
    }
    *out = b.data;
    *out_len = b.len;
    return SL_OK;
}

int sl_frame_encode_model(const sl_layout *layout, const float *params, uint64_t version,
                          int zstd_level, void **out, size_t *out_len)
{
    return encode_model(layout, params, NULL, version, zstd_level, 0, out, out_len);
}

int sl_frame_encode_model_delta(const sl_layout *layout, const float *params, const float *base,
                                uint64_t base_version, int zstd_level, void **out, size_t *out_len)
{
    if (base == NULL)
        return SL_EINVAL;
    return encode_model(layout, params, base, base_version, zstd_level, 0, out, out_len);
}

int sl_frame_encode_model_delta_sparse(const sl_layout *layout, const float *params,
                                       const float *base, uint64_t base_version, int zstd_level,
                                       void **out, size_t *out_len)
{
    if (base == NULL)
        return SL_EINVAL;
    return encode_model(layout, params, base, base_version, zstd_level, 1, out, out_len);
}

/* The sparse body after its coding byte (@body at the count m), applied to @words: the
 * base's @n bit patterns (host order) on entry, the model's on success. */
static int decode_sparse_body(sl__reader *body, uint64_t n, uint32_t *words)
{
    uint64_t m, plen;
    uint8_t pmode, param;
    uint32_t *idx = NULL;
    const uint8_t *raw = NULL;
    uint8_t *scratch = NULL;
    int rc;

    if ((rc = sl__rd_varint(body, &m)) != SL_OK)
        return rc;
    if (m > n)
        return SL_ECOUNT;
    if (m == 0)
        return body->pos == body->len ? SL_OK : SL_ECORRUPT;
    if ((rc = sl__rd_u8(body, &pmode)) != SL_OK || (rc = sl__rd_u8(body, &param)) != SL_OK ||
        (rc = sl__rd_varint(body, &plen)) != SL_OK)
        return rc;
    if (plen > body->len - body->pos)
        return SL_ETRUNCATED;
    idx = malloc((size_t)m * sizeof *idx);
    if (idx == NULL)
        return SL_ENOMEM;
    rc = sl__pos_decode((sl_pos_mode)pmode, param, body->p + body->pos, (size_t)plen, (size_t)m, n,
                        idx);
    if (rc == SL_OK) {
        body->pos += (size_t)plen;
        if (body->pos == body->len)
            rc = SL_ETRUNCATED; /* the words' coded part is missing */
    }
    if (rc == SL_OK)
        rc = sl__coded_get(body, (size_t)m * 4, 4, NULL, &raw, &scratch);
    for (size_t k = 0; rc == SL_OK && k < (size_t)m; k++) {
        const uint8_t *q = raw + 4 * k;
        uint32_t u =
            (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        if (u == 0)
            rc = SL_ECORRUPT; /* a word listed as changed must change */
        else
            words[idx[k]] ^= u;
    }
    free(scratch);
    free(idx);
    return rc;
}

int sl_frame_decode_model(const sl_layout *layout, const void *frame, size_t len, const float *base,
                          uint64_t base_version, float *params)
{
    sl_frame_header h;
    sl__reader body;
    uint64_t n;
    uint8_t coding;
    const uint8_t *rest;
    uint8_t *le = NULL;
    float *scratch = NULL;
    size_t bytes;
    int rc;

    if (layout == NULL || params == NULL)
        return SL_EINVAL;
    if ((rc = sl__frame_open(frame, len, NULL, &h, &body)) != SL_OK)
        return rc;
    if (h.kind == SL_FRAME_UPDATE || h.layout_hash != sl_layout_hash(layout))
        return SL_ELAYOUT;
    if (h.kind == SL_FRAME_MODEL_DELTA && (base == NULL || h.base_version != base_version))
        return SL_ELAYOUT;
    if ((rc = sl__rd_varint(&body, &n)) != SL_OK || (rc = sl__rd_u8(&body, &coding)) != SL_OK)
        return rc;
    if (n != sl_layout_params(layout))
        return SL_ECOUNT;
    bytes = (size_t)n * 4;
    if (coding == MODEL_SPARSE) {
        uint32_t *words;
        if (h.kind != SL_FRAME_MODEL_DELTA)
            return SL_ECORRUPT;
        words = malloc(bytes ? bytes : 1);
        if (words == NULL)
            return SL_ENOMEM;
        for (size_t i = 0; i < (size_t)n; i++)
            words[i] = sl__f32_bits(base[i]);
        rc = decode_sparse_body(&body, n, words);
        for (size_t i = 0; rc == SL_OK && i < (size_t)n; i++)
            if ((words[i] & 0x7f800000u) == 0x7f800000u)
                rc = SL_ENONFINITE; /* NaN or Inf */
        for (size_t i = 0; rc == SL_OK && i < (size_t)n; i++)
            params[i] = sl__bits_f32(words[i]); /* written only on success */
        free(words);
        return rc;
    }
    rest = body.p + body.pos;
    le = malloc(bytes ? bytes : 1);
    scratch = malloc(bytes ? bytes : 1);
    if (le == NULL || scratch == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    if (coding == MODEL_RAW) {
        if (body.len - body.pos != bytes) {
            rc = body.len - body.pos < bytes ? SL_ETRUNCATED : SL_ECORRUPT;
            goto done;
        }
        memcpy(le, rest, bytes);
    } else if (coding == MODEL_ZSTD) {
        uint8_t *planes = (uint8_t *)scratch; /* reuse: same size */
        rc = sl__zstd_decode_exact(rest, body.len - body.pos, planes, bytes);
        if (rc != SL_OK)
            goto done;
        sl__unshuffle(planes, (size_t)n, 4, le);
    } else {
        rc = SL_ECORRUPT;
        goto done;
    }
    for (size_t i = 0; i < (size_t)n; i++) {
        uint32_t u = (uint32_t)le[4 * i] | (uint32_t)le[4 * i + 1] << 8 |
                     (uint32_t)le[4 * i + 2] << 16 | (uint32_t)le[4 * i + 3] << 24;
        if (h.kind == SL_FRAME_MODEL_DELTA)
            u ^= sl__f32_bits(base[i]);
        scratch[i] = sl__bits_f32(u);
    }
    if (!sl__all_finite(scratch, (size_t)n)) {
        rc = SL_ENONFINITE;
        goto done;
    }
    memcpy(params, scratch, bytes);
    rc = SL_OK;
done:
    free(le);
    free(scratch);
    return rc;
}
