/* update.c - sparse update frames: per tensor positions and quantized values. */
#include <stdlib.h>

#include "codec_int.h"

void sl_encode_params_default(sl_encode_params *p)
{
    p->values = SL_VALUE_FP32;
    p->positions = SL_POS_AUTO;
    p->zstd_level = 3;
    p->seed = 0;
}

/* Per-tensor entry of the frame's tensor table. */
typedef struct tensor_entry {
    uint64_t n;
    uint8_t pos_mode, pos_param, value_mode;
    uint64_t pos_bytes, val_bytes;
} tensor_entry;

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

/* Decode the frame's sections into freshly allocated per-tensor arrays. */
static int decode_all(const sl_layout *layout, const void *frame, size_t len,
                      const sl_decode_limits *limits, sl_update **out)
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
    if ((rc = read_table(layout, &body, &lim, &e)) != SL_OK)
        return rc;
    u = calloc(1, sizeof *u);
    if (u == NULL) {
        free(e);
        return SL_ENOMEM;
    }
    u->header = h;
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
        rc = SL_ENOMEM;
        goto fail;
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
    return decode_all(layout, frame, len, limits, out);
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
    rc = decode_all(layout, frame, len, limits, &u);
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
    rc = decode_all(layout, frame, len, limits, &u);
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
