/* update.c - sparse update frames: per tensor positions and quantized values. */
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"

/* Bytes of @v as a varint. */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 128) {
        v >>= 7;
        n++;
    }
    return n;
}

void sl_encode_params_default(sl_encode_params *p)
{
    p->values = SL_VALUE_FP32;
    p->positions = SL_POS_AUTO;
    p->zstd_level = 3;
    p->seed = 0;
    p->flat = 0;
    p->split = NULL;
    p->ref_version = 0;
}

/* Per-tensor entry of the frame's tensor table. */
typedef struct tensor_entry {
    uint64_t n;
    uint8_t pos_mode, pos_param, value_mode;
    uint64_t pos_bytes, val_bytes;
} tensor_entry;

/* One part of a split body: for n > 0 its coding and Rice parameter in one byte (coding in
 * the low 3 bits, the parameter in the high 5), its section's size and the section. */
static int put_part(sl__buf *b, sl_pos_mode want, const uint32_t *idx, size_t n, uint64_t d)
{
    sl__buf sec = {0};
    sl_pos_mode chosen = SL_POS_RICE;
    uint8_t param = 0;
    int rc;
    if (n == 0)
        return SL_OK;
    rc = sl__pos_write(want, idx, n, d, &chosen, &param, &sec);
    if (rc == SL_OK &&
        (rc = sl__buf_put_u8(b, (uint8_t)((unsigned)chosen | param << 3))) == SL_OK &&
        (rc = sl__buf_put_varint(b, sec.len)) == SL_OK)
        rc = sl__buf_append(b, sec.data, sec.len);
    sl__buf_free(&sec);
    return rc;
}

/*
 * The split frame of the flat body's @total positions @flat: the support's
 * CRC, n, then for n > 0 the value mode, n_in and the two parts
 * (inside the support, ranks < count; outside, ranks < d - count), then the
 * value sections @vals as in the flat body.
 */
static int split_frame(const sl_layout *layout, const sl_frame_header *h, const sl_encode_params *p,
                       const uint32_t *flat, size_t total, const sl__buf *vals, sl__buf *frame)
{
    const sl_support *sup = p->split;
    uint64_t d = sl_layout_params(layout);
    uint32_t *in = malloc((total ? total : 1) * sizeof *in);
    uint32_t *out = malloc((total ? total : 1) * sizeof *out);
    size_t nin = 0, nout = 0;
    int rc = in && out ? SL_OK : SL_ENOMEM;

    if (rc == SL_OK)
        sl__split_ranks(sup, flat, total, in, &nin, out, &nout);
    if (rc == SL_OK)
        rc = sl__frame_begin(frame, h);
    if (rc == SL_OK && (rc = sl__buf_put_u32(frame, sup->crc)) == SL_OK)
        rc = sl__buf_put_varint(frame, total);
    if (rc == SL_OK && total > 0) {
        if ((rc = sl__buf_put_u8(frame, (uint8_t)p->values)) == SL_OK &&
            (rc = sl__buf_put_varint(frame, nin)) == SL_OK &&
            (rc = put_part(frame, p->positions, in, nin, sup->count)) == SL_OK &&
            (rc = put_part(frame, p->positions, out, nout, d - sup->count)) == SL_OK)
            rc = sl__buf_append(frame, vals->data, vals->len);
    }
    if (rc == SL_OK)
        rc = sl__frame_finish(frame);
    free(in);
    free(out);
    return rc;
}

/*
 * The flat body (SL_FRAME_FLAG_FLAT): n, then for n > 0 the position coding,
 * its parameter, the value mode and the position section's size, the
 * section of the n flat indices, and per tensor with values, in layout
 * order, its value section's size and the section (the same bytes as in a
 * per-tensor body). With a support (p->split) the split frame is written
 * instead when it is smaller.
 */
static int encode_flat(const sl_layout *layout, const sl_frame_header *hdr,
                       const sl_sparse_tensor *tensors, const sl_encode_params *p,
                       float *const *recon, void **out, size_t *out_len)
{
    size_t nt = sl_layout_tensors(layout), total = 0, k = 0;
    uint64_t d = sl_layout_params(layout);
    uint32_t *flat = NULL;
    sl_frame_header h;
    sl__buf frame = {0}, split = {0}, pos = {0}, vals = {0};
    sl_pos_mode chosen = SL_POS_RICE;
    uint8_t param = 0;
    int rc = SL_OK;

    if (p->split != NULL &&
        (p->split->d != d || p->ref_version == 0 || p->ref_version >= hdr->base_version))
        return SL_EINVAL;
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(layout, t);
        const sl_sparse_tensor *st = &tensors[t];
        if (st->n > td->count || (st->n > 0 && (st->idx == NULL || st->val == NULL)))
            return SL_EINVAL;
        /* an index past its tensor would land in the next one in the flat order */
        if (st->n > 0 && st->idx[st->n - 1] >= td->count)
            return SL_EINVAL;
        total += st->n;
    }
    flat = malloc((total ? total : 1) * sizeof *flat);
    if (flat == NULL)
        return SL_ENOMEM;
    for (size_t t = 0; t < nt; t++) {
        uint64_t off = sl_layout_tensor(layout, t)->offset;
        for (size_t j = 0; j < tensors[t].n; j++)
            flat[k++] = (uint32_t)(off + tensors[t].idx[j]);
    }
    /* this validates the indices: ascending and unique within each tensor (and so across) */
    if (total > 0)
        rc = sl__pos_write(p->positions, flat, total, d, &chosen, &param, &pos);
    for (size_t t = 0; t < nt && rc == SL_OK && total > 0; t++) {
        sl__buf one = {0}; /* the size goes in front of the section: encode it aside first */
        if (tensors[t].n == 0)
            continue;
        rc = sl__values_encode(p->values, tensors[t].val, tensors[t].n, p->zstd_level, p->seed,
                               (uint32_t)t, &one, recon ? recon[t] : NULL);
        if (rc == SL_OK)
            rc = sl__buf_put_varint(&vals, one.len);
        if (rc == SL_OK)
            rc = sl__buf_append(&vals, one.data, one.len);
        sl__buf_free(&one);
    }
    h = *hdr;
    h.kind = SL_FRAME_UPDATE;
    h.flags = SL_FRAME_FLAG_FLAT;
    h.layout_hash = sl_layout_hash(layout);
    h.ref_version = 0;
    if (rc == SL_OK)
        rc = sl__frame_begin(&frame, &h);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(&frame, total);
    if (rc == SL_OK && total > 0) {
        if ((rc = sl__buf_put_u8(&frame, (uint8_t)chosen)) == SL_OK &&
            (rc = sl__buf_put_u8(&frame, param)) == SL_OK &&
            (rc = sl__buf_put_u8(&frame, (uint8_t)p->values)) == SL_OK &&
            (rc = sl__buf_put_varint(&frame, pos.len)) == SL_OK &&
            (rc = sl__buf_append(&frame, pos.data, pos.len)) == SL_OK)
            rc = sl__buf_append(&frame, vals.data, vals.len);
    }
    if (rc == SL_OK)
        rc = sl__frame_finish(&frame);
    if (rc == SL_OK && p->split != NULL) {
        h.flags = SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT;
        h.ref_version = p->ref_version;
        rc = split_frame(layout, &h, p, flat, total, &vals, &split);
        if (rc == SL_OK && split.len < frame.len) { /* a tie keeps the plain frame */
            sl__buf keep = frame;
            frame = split;
            split = keep;
        }
    }
    free(flat);
    sl__buf_free(&pos);
    sl__buf_free(&vals);
    sl__buf_free(&split);
    if (rc != SL_OK) {
        sl__buf_free(&frame);
        return rc;
    }
    *out = frame.data;
    *out_len = frame.len;
    return SL_OK;
}

int sl_frame_encode_update(const sl_layout *layout, const sl_frame_header *hdr,
                           const sl_sparse_tensor *tensors, const sl_encode_params *p,
                           float *const *recon, void **out, size_t *out_len)
{
    size_t nt = sl_layout_tensors(layout);
    sl_encode_params defaults;
    sl_frame_header h;
    tensor_entry *e = NULL;
    sl__buf frame = {0}, sections = {0};
    int rc = SL_OK;

    if (layout == NULL || hdr == NULL || (tensors == NULL && nt > 0) || out == NULL ||
        out_len == NULL)
        return SL_EINVAL;
    if (p == NULL) {
        sl_encode_params_default(&defaults);
        p = &defaults;
    }
    if ((unsigned)p->values > SL_VALUE_SIGN || (unsigned)p->positions > SL_POS_ADAPTIVE)
        return SL_EINVAL;
    if (p->flat)
        return encode_flat(layout, hdr, tensors, p, recon, out, out_len);
    e = calloc(nt ? nt : 1, sizeof *e);
    if (e == NULL)
        return SL_ENOMEM;
    for (size_t t = 0; t < nt && rc == SL_OK; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(layout, t);
        const sl_sparse_tensor *st = &tensors[t];
        sl_pos_mode chosen;
        size_t before;

        if (st->n > td->count || (st->n > 0 && (st->idx == NULL || st->val == NULL))) {
            rc = SL_EINVAL;
            break;
        }
        e[t].n = st->n;
        if (st->n == 0)
            continue;
        /* this validates the indices too: ascending, unique, < count */
        before = sections.len;
        rc = sl__pos_write(p->positions, st->idx, st->n, td->count, &chosen, &e[t].pos_param,
                           &sections);
        if (rc != SL_OK)
            break;
        e[t].pos_mode = (uint8_t)chosen;
        e[t].value_mode = (uint8_t)p->values;
        e[t].pos_bytes = sections.len - before;
        before = sections.len;
        rc = sl__values_encode(p->values, st->val, st->n, p->zstd_level, p->seed, (uint32_t)t,
                               &sections, recon ? recon[t] : NULL);
        e[t].val_bytes = sections.len - before;
    }
    h = *hdr;
    h.kind = SL_FRAME_UPDATE;
    h.flags = 0;
    h.layout_hash = sl_layout_hash(layout);
    if (rc == SL_OK)
        rc = sl__frame_begin(&frame, &h);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(&frame, nt);
    for (size_t t = 0; t < nt && rc == SL_OK; t++) {
        rc = sl__buf_put_varint(&frame, e[t].n);
        if (rc != SL_OK || e[t].n == 0)
            continue;
        if ((rc = sl__buf_put_u8(&frame, e[t].pos_mode)) == SL_OK &&
            (rc = sl__buf_put_u8(&frame, e[t].pos_param)) == SL_OK &&
            (rc = sl__buf_put_u8(&frame, e[t].value_mode)) == SL_OK &&
            (rc = sl__buf_put_varint(&frame, e[t].pos_bytes)) == SL_OK)
            rc = sl__buf_put_varint(&frame, e[t].val_bytes);
    }
    if (rc == SL_OK)
        rc = sl__buf_append(&frame, sections.data, sections.len);
    if (rc == SL_OK)
        rc = sl__frame_finish(&frame);
    free(e);
    sl__buf_free(&sections);
    if (rc != SL_OK) {
        sl__buf_free(&frame);
        return rc;
    }
    *out = frame.data;
    *out_len = frame.len;
    return SL_OK;
}

void sl_update_free(sl_update *u)
{
    if (u == NULL)
        return;
    for (size_t t = 0; t < u->tensors; t++) {
        free(u->idx ? u->idx[t] : NULL);
        free(u->val ? u->val[t] : NULL);
    }
    free(u->n);
    free(u->idx);
    free(u->val);
    free(u->modes);
    free(u->pos_modes);
    free(u->pos_bytes);
    free(u->val_bytes);
    free(u);
}

/*
 * Parse and check the tensor table against the layout and the body size,
 * before anything is allocated per tensor: counts within tensor sizes,
 * known modes, section sizes that add up to the body exactly, and the
 * decoded size within the limits.
 */
static int read_table(const sl_layout *layout, sl__reader *body, const sl_decode_limits *lim,
                      tensor_entry **out)
{
    size_t nt = sl_layout_tensors(layout);
    uint64_t count, total = 0, out_bytes = 0;
    tensor_entry *e;
    int rc;

    if ((rc = sl__rd_varint(body, &count)) != SL_OK)
        return rc;
    if (count != nt)
        return SL_ELAYOUT;
    e = calloc(nt ? nt : 1, sizeof *e);
    if (e == NULL)
        return SL_ENOMEM;
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(layout, t);
        if ((rc = sl__rd_varint(body, &e[t].n)) != SL_OK)
            goto fail;
        if (e[t].n > td->count) {
            rc = SL_ECOUNT;
            goto fail;
        }
        if (e[t].n == 0)
            continue;
        if ((rc = sl__rd_u8(body, &e[t].pos_mode)) != SL_OK ||
            (rc = sl__rd_u8(body, &e[t].pos_param)) != SL_OK ||
            (rc = sl__rd_u8(body, &e[t].value_mode)) != SL_OK ||
            (rc = sl__rd_varint(body, &e[t].pos_bytes)) != SL_OK ||
            (rc = sl__rd_varint(body, &e[t].val_bytes)) != SL_OK)
            goto fail;
        if (e[t].pos_mode < SL_POS_RICE || e[t].pos_mode > SL_POS_ADAPTIVE ||
            e[t].value_mode > SL_VALUE_SIGN) {
            rc = SL_ECORRUPT;
            goto fail;
        }
        if (e[t].pos_bytes > body->len || e[t].val_bytes > body->len) {
            rc = SL_ETRUNCATED; /* sections larger than the whole body */
            goto fail;
        }
        total += e[t].pos_bytes + e[t].val_bytes;
        out_bytes += e[t].n * 8;
        if (total > body->len) {
            rc = SL_ETRUNCATED;
            goto fail;
        }
    }
    if (total != body->len - body->pos) {
        rc = total > body->len - body->pos ? SL_ETRUNCATED : SL_ECORRUPT;
        goto fail;
    }
    if (out_bytes > lim->max_output_bytes) {
        rc = SL_ETOOBIG;
        goto fail;
    }
    *out = e;
    return SL_OK;
fail:
    free(e);
    return rc;
}

static sl_update *alloc_update(const sl_frame_header *h, size_t nt)
{
    sl_update *u = calloc(1, sizeof *u);
    if (u == NULL)
        return NULL;
    u->header = *h;
    u->tensors = nt;
    u->n = calloc(nt ? nt : 1, sizeof *u->n);
    u->idx = calloc(nt ? nt : 1, sizeof *u->idx);
    u->val = calloc(nt ? nt : 1, sizeof *u->val);
    u->modes = calloc(nt ? nt : 1, sizeof *u->modes);
    u->pos_modes = calloc(nt ? nt : 1, sizeof *u->pos_modes);
    u->pos_bytes = calloc(nt ? nt : 1, sizeof *u->pos_bytes);
    u->val_bytes = calloc(nt ? nt : 1, sizeof *u->val_bytes);
    if (!u->n || !u->idx || !u->val || !u->modes || !u->pos_modes || !u->pos_bytes ||
        !u->val_bytes) {
        sl_update_free(u);
        return NULL;
    }
    return u;
}

/* One part of a split body: coding and parameter (one byte) and section size (n > 0),
 * checked. */
static int read_part(sl__reader *body, size_t n, uint8_t *mode, uint8_t *param, uint64_t *bytes)
{
    uint8_t both;
    int rc;
    if (n == 0)
        return SL_OK;
    if ((rc = sl__rd_u8(body, &both)) != SL_OK || (rc = sl__rd_varint(body, bytes)) != SL_OK)
        return rc;
    *mode = both & 7;
    *param = both >> 3;
    if (*mode < SL_POS_RICE || *mode > SL_POS_ADAPTIVE)
        return SL_ECORRUPT;
    return *bytes > body->len - body->pos ? SL_ETRUNCATED : SL_OK;
}

/*
 * A split body's positions (after its count n and value mode), into @flat
 * (room for n): the support's digest was checked; n_in, then each part's
 * header and section, decoded within its part, then merged into flat indices.
 */
static int read_split_positions(sl__reader *body, const sl_support *sup, uint64_t n, uint32_t *flat,
                                uint8_t *pos_mode, size_t *pos_bytes)
{
    uint64_t nin, in_bytes = 0, out_bytes = 0;
    uint8_t in_mode = 0, in_param = 0, out_mode = 0, out_param = 0;
    const uint8_t *in_sec = NULL, *out_sec = NULL;
    uint32_t *in = NULL, *out = NULL;
    size_t nout;
    int rc;

    if ((rc = sl__rd_varint(body, &nin)) != SL_OK)
        return rc;
    if (nin > n || nin > sup->count || n - nin > sup->d - sup->count)
        return SL_ECOUNT;
    nout = (size_t)(n - nin);
    if ((rc = read_part(body, (size_t)nin, &in_mode, &in_param, &in_bytes)) != SL_OK ||
        (nin > 0 && (rc = sl__rd_bytes(body, (size_t)in_bytes, &in_sec)) != SL_OK) ||
        (rc = read_part(body, nout, &out_mode, &out_param, &out_bytes)) != SL_OK ||
        (nout > 0 && (rc = sl__rd_bytes(body, (size_t)out_bytes, &out_sec)) != SL_OK))
        return rc;
    in = malloc((nin ? (size_t)nin : 1) * sizeof *in);
    out = malloc((nout ? nout : 1) * sizeof *out);
    if (in == NULL || out == NULL)
        rc = SL_ENOMEM;
    if (rc == SL_OK && nin > 0)
        rc = sl__pos_decode((sl_pos_mode)in_mode, in_param, in_sec, (size_t)in_bytes, (size_t)nin,
                            sup->count, in);
    if (rc == SL_OK && nout > 0)
        rc = sl__pos_decode((sl_pos_mode)out_mode, out_param, out_sec, (size_t)out_bytes, nout,
                            sup->d - sup->count, out);
    if (rc == SL_OK)
        rc = sl__split_merge(sup, in, (size_t)nin, out, nout, flat);
    free(out);
    free(in);
    *pos_mode = nin > 0 ? in_mode : out_mode;
    *pos_bytes = (size_t)(in_bytes + out_bytes);
    return rc;
}

/* The flat body (see encode_flat), checked as it is read: n within the
 * layout and the limits before the indices are allocated, the positions
 * before the values, every value section within the body, and no byte left
 * over. A split body (SL_FRAME_FLAG_SPLIT) checks @sup's CRC first. */
static int decode_flat(const sl_layout *layout, const sl_frame_header *h, sl__reader *body,
                       const sl_decode_limits *lim, const sl_support *sup, sl_update **out)
{
    size_t nt = sl_layout_tensors(layout);
    uint64_t d = sl_layout_params(layout), n, pos_bytes = 0;
    uint8_t pos_mode = 0, param = 0, value_mode = 0;
    uint32_t *flat = NULL;
    const uint8_t *pos;
    sl_update *u;
    size_t k = 0, first = nt, split_bytes = 0;
    int split = (h->flags & SL_FRAME_FLAG_SPLIT) != 0;
    int rc;

    if (split) {
        uint32_t crc;
        if (sup == NULL || sup->d != d)
            return SL_ESUPPORT;
        if ((rc = sl__rd_u32(body, &crc)) != SL_OK)
            return rc;
        if (crc != sup->crc)
            return SL_ESUPPORT;
    }
    if ((rc = sl__rd_varint(body, &n)) != SL_OK)
        return rc;
    if (n > d)
        return SL_ECOUNT;
    if (n > 0 && split) {
        if ((rc = sl__rd_u8(body, &value_mode)) != SL_OK)
            return rc;
        if (value_mode > SL_VALUE_SIGN)
            return SL_ECORRUPT;
        if (n * 8 > lim->max_output_bytes)
            return SL_ETOOBIG;
    } else if (n > 0) {
        if ((rc = sl__rd_u8(body, &pos_mode)) != SL_OK || (rc = sl__rd_u8(body, &param)) != SL_OK ||
            (rc = sl__rd_u8(body, &value_mode)) != SL_OK ||
            (rc = sl__rd_varint(body, &pos_bytes)) != SL_OK)
            return rc;
        if (pos_mode < SL_POS_RICE || pos_mode > SL_POS_ADAPTIVE || value_mode > SL_VALUE_SIGN)
            return SL_ECORRUPT;
        if (pos_bytes > body->len - body->pos)
            return SL_ETRUNCATED;
        if (n * 8 > lim->max_output_bytes)
            return SL_ETOOBIG;
    }
    u = alloc_update(h, nt);
    if (u == NULL)
        return SL_ENOMEM;
    if (n == 0) {
        rc = body->pos == body->len ? SL_OK : SL_ECORRUPT;
        goto done;
    }
    flat = malloc((size_t)n * sizeof *flat);
    if (flat == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    if (split) {
        rc = read_split_positions(body, sup, n, flat, &pos_mode, &split_bytes);
        pos_bytes = split_bytes;
    } else if ((rc = sl__rd_bytes(body, (size_t)pos_bytes, &pos)) == SL_OK) {
        rc = sl__pos_decode((sl_pos_mode)pos_mode, param, pos, (size_t)pos_bytes, (size_t)n, d,
                            flat);
    }
    if (rc != SL_OK)
        goto done;
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(layout, t);
        size_t start = k;
        uint64_t vbytes;
        const uint8_t *val;
        while (k < n && flat[k] < td->offset + td->count)
            k++;
        u->n[t] = k - start;
        u->modes[t] = (sl_value_mode)value_mode;
        u->pos_modes[t] = (sl_pos_mode)pos_mode;
        if (u->n[t] == 0)
            continue;
        if (first == nt) {
            first = t;
            u->pos_bytes[t] = (size_t)pos_bytes;
        }
        u->idx[t] = malloc(u->n[t] * sizeof(uint32_t));
        u->val[t] = malloc(u->n[t] * sizeof(float));
        if (u->idx[t] == NULL || u->val[t] == NULL) {
            rc = SL_ENOMEM;
            goto done;
        }
        for (size_t j = 0; j < u->n[t]; j++)
            u->idx[t][j] = (uint32_t)(flat[start + j] - td->offset);
        if ((rc = sl__rd_varint(body, &vbytes)) != SL_OK)
            goto done;
        if (vbytes > body->len - body->pos) {
            rc = SL_ETRUNCATED;
            goto done;
        }
        u->val_bytes[t] = (size_t)vbytes;
        if ((rc = sl__rd_bytes(body, (size_t)vbytes, &val)) != SL_OK)
            goto done;
        rc = sl__values_decode((sl_value_mode)value_mode, val, (size_t)vbytes, u->n[t], u->val[t]);
        if (rc != SL_OK)
            goto done;
    }
    rc = body->pos == body->len ? SL_OK : SL_ECORRUPT;
done:
    free(flat);
    if (rc != SL_OK) {
        sl_update_free(u);
        return rc;
    }
    *out = u;
    return SL_OK;
}

/* Decode the frame's sections into freshly allocated per-tensor arrays. */
static int decode_all(const sl_layout *layout, const void *frame, size_t len,
                      const sl_decode_limits *limits, const sl_support *sup, sl_update **out)
{
    sl_decode_limits lim;
    sl_frame_header h;
    sl__reader body;
    tensor_entry *e = NULL;
    sl_update *u;
    size_t nt = sl_layout_tensors(layout);
    int rc;

    sl__limits(limits, &lim);
    if ((rc = sl__frame_open(frame, len, &lim, &h, &body)) != SL_OK)
        return rc;
    if (h.kind != SL_FRAME_UPDATE || h.layout_hash != sl_layout_hash(layout))
        return SL_ELAYOUT;
    if (h.flags & SL_FRAME_FLAG_FLAT)
        return decode_flat(layout, &h, &body, &lim, sup, out);
    if ((rc = read_table(layout, &body, &lim, &e)) != SL_OK)
        return rc;
    u = alloc_update(&h, nt);
    if (u == NULL) {
        free(e);
        return SL_ENOMEM;
    }
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(layout, t);
        const uint8_t *pos, *val;
        size_t n = (size_t)e[t].n;

        u->n[t] = n;
        u->modes[t] = (sl_value_mode)e[t].value_mode;
        u->pos_modes[t] = (sl_pos_mode)e[t].pos_mode;
        u->pos_bytes[t] = (size_t)e[t].pos_bytes;
        u->val_bytes[t] = (size_t)e[t].val_bytes;
        if (n == 0)
            continue;
        u->idx[t] = malloc(n * sizeof(uint32_t));
        u->val[t] = malloc(n * sizeof(float));
        if (u->idx[t] == NULL || u->val[t] == NULL) {
            rc = SL_ENOMEM;
            goto fail;
        }
        if ((rc = sl__rd_bytes(&body, (size_t)e[t].pos_bytes, &pos)) != SL_OK ||
            (rc = sl__rd_bytes(&body, (size_t)e[t].val_bytes, &val)) != SL_OK)
            goto fail;
        rc = sl__pos_decode((sl_pos_mode)e[t].pos_mode, e[t].pos_param, pos, (size_t)e[t].pos_bytes,
                            n, td->count, u->idx[t]);
        if (rc != SL_OK)
            goto fail;
        rc = sl__values_decode((sl_value_mode)e[t].value_mode, val, (size_t)e[t].val_bytes, n,
                               u->val[t]);
        if (rc != SL_OK)
            goto fail;
    }
    free(e);
    *out = u;
    return SL_OK;
fail:
    free(e);
    sl_update_free(u);
    return rc;
}

int sl_frame_decode_update(const sl_layout *layout, const void *frame, size_t len,
                           const sl_decode_limits *limits, sl_update **out)
{
    if (layout == NULL || out == NULL)
        return SL_EINVAL;
    return decode_all(layout, frame, len, limits, NULL, out);
}

int sl_frame_decode_update_split(const sl_layout *layout, const void *frame, size_t len,
                                 const sl_decode_limits *limits, const sl_support *support,
                                 sl_update **out)
{
    if (layout == NULL || out == NULL)
        return SL_EINVAL;
    return decode_all(layout, frame, len, limits, support, out);
}

int sl_frame_unsplit(const sl_layout *layout, const void *frame, size_t len,
                     const sl_decode_limits *limits, const sl_support *support, void **out,
                     size_t *out_len)
{
    sl_update *u = NULL;
    sl_frame_header h;
    sl__reader body;
    sl__buf b = {0}, pos = {0};
    sl_pos_mode chosen = SL_POS_RICE;
    uint8_t param = 0;
    uint32_t *flat = NULL;
    size_t n = 0, k = 0;
    int rc;

    if (layout == NULL || out == NULL || out_len == NULL)
        return SL_EINVAL;
    if ((rc = sl_frame_peek_header(frame, len, &h)) != SL_OK)
        return rc;
    if (!(h.flags & SL_FRAME_FLAG_SPLIT))
        return SL_EINVAL;
    /* everything checked: the positions, the values, the sizes */
    if ((rc = decode_all(layout, frame, len, limits, support, &u)) != SL_OK)
        return rc;
    for (size_t t = 0; t < u->tensors; t++)
        n += u->n[t];
    flat = malloc((n ? n : 1) * sizeof *flat);
    if (flat == NULL) {
        sl_update_free(u);
        return SL_ENOMEM;
    }
    for (size_t t = 0; t < u->tensors; t++) {
        uint64_t off = sl_layout_tensor(layout, t)->offset;
        for (size_t j = 0; j < u->n[t]; j++)
            flat[k++] = (uint32_t)(off + u->idx[t][j]);
    }
    /* the value sections are the body's last bytes, the same in both bodies: their sizes */
    size_t vbytes = 0;
    for (size_t t = 0; t < u->tensors; t++)
        if (u->n[t] > 0)
            vbytes += u->val_bytes[t] + varint_len(u->val_bytes[t]);
    sl__frame_open(frame, len, limits, &h, &body); /* checked by decode_all */
    h.flags = SL_FRAME_FLAG_FLAT;
    h.ref_version = 0;
    rc = sl__frame_begin(&b, &h);
    if (rc == SL_OK)
        rc = sl__buf_put_varint(&b, n);
    if (rc == SL_OK && n > 0)
        rc = sl__pos_write(SL_POS_AUTO, flat, n, sl_layout_params(layout), &chosen, &param, &pos);
    if (rc == SL_OK && n > 0) {
        sl_value_mode vm = SL_VALUE_FP32;
        for (size_t t = 0; t < u->tensors; t++)
            if (u->n[t] > 0) {
                vm = u->modes[t];
                break;
            }
        if ((rc = sl__buf_put_u8(&b, (uint8_t)chosen)) == SL_OK &&
            (rc = sl__buf_put_u8(&b, param)) == SL_OK &&
            (rc = sl__buf_put_u8(&b, (uint8_t)vm)) == SL_OK &&
            (rc = sl__buf_put_varint(&b, pos.len)) == SL_OK &&
            (rc = sl__buf_append(&b, pos.data, pos.len)) == SL_OK)
            rc = sl__buf_append(&b, body.p + body.len - vbytes, vbytes);
    }
    if (rc == SL_OK)
        rc = sl__frame_finish(&b);
    free(flat);
    sl__buf_free(&pos);
    sl_update_free(u);
    if (rc != SL_OK) {
        sl__buf_free(&b);
        return rc;
    }
    *out = b.data;
    *out_len = b.len;
    return SL_OK;
}

int sl_frame_accumulate_update(const sl_layout *layout, const void *frame, size_t len,
                               const sl_decode_limits *limits, float weight, float *dst)
{
    sl_update *u;
    int rc;

    if (layout == NULL || dst == NULL)
        return SL_EINVAL;
    if (!sl__all_finite(&weight, 1))
        return SL_ENONFINITE;
    /* everything is decoded and checked before the first write to dst */
    rc = decode_all(layout, frame, len, limits, NULL, &u);
    if (rc != SL_OK)
        return rc;
    for (size_t t = 0; t < u->tensors; t++)
        if (u->n[t] > 0)
            sl__scatter_add(dst + sl_layout_tensor(layout, t)->offset, u->idx[t], u->val[t],
                            u->n[t], weight);
    sl_update_free(u);
    return SL_OK;
}

int sl_frame_accumulate_update_f64(const sl_layout *layout, const void *frame, size_t len,
                                   const sl_decode_limits *limits, double weight, double *dst)
{
    sl_update *u;
    int rc;

    if (layout == NULL || dst == NULL)
        return SL_EINVAL;
    if (weight != weight || weight - weight != 0) /* NaN or infinite */
        return SL_ENONFINITE;
    rc = decode_all(layout, frame, len, limits, NULL, &u);
    if (rc != SL_OK)
        return rc;
    for (size_t t = 0; t < u->tensors; t++) {
        double *base = dst + sl_layout_tensor(layout, t)->offset;
        for (size_t j = 0; j < u->n[t]; j++)
            base[u->idx[t][j]] += weight * (double)u->val[t][j];
    }
    sl_update_free(u);
    return SL_OK;
}
