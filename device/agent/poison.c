/*
 * poison.c - poisoned updates, a simulated fault (sl_agent_poison) that
 * tests the coordinator's defences:
 *   scale100, flip  the dense update is transformed before error feedback,
 *                   top-k and encoding (participate.c), so the frame is a
 *                   normal one;
 *   nan             the honest frame is encoded (the encoder refuses NaN),
 *                   then a copy gets a NaN written into one value and its
 *                   CRC-32 recomputed (codecs/FORMAT.md), so the frame is
 *                   intact in every respect but the value and the
 *                   coordinator's decoder has to be the one that refuses it.
 * Only this device's copy on the wire is poisoned: the pending upload and
 * the residual bookkeeping keep the honest frame (see agent.h).
 */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "agent_int.h"

static const char *const poison_names[] = {"none", "scale100", "flip", "nan"};
#define POISON_COUNT (sizeof poison_names / sizeof poison_names[0])

const char *sl_agent_poison_name(sl_agent_poison mode)
{
    return (unsigned)mode < POISON_COUNT ? poison_names[mode] : "?";
}

int sl_agent_poison_parse(const char *name, sl_agent_poison *out)
{
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    for (size_t i = 0; i < POISON_COUNT; i++)
        if (strcmp(name, poison_names[i]) == 0) {
            *out = (sl_agent_poison)i;
            return SL_OK;
        }
    return SL_EINVAL;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

sl_agent_poison sl__agent_poison_draw(const sl_agent_options *o)
{
    /* its own draw, not the fault generator's: poisoning a device does not
     * move its dropouts, cuts and crashes */
    double u = (double)(mix64(o->seed ^ mix64(0x504F49534F4EULL + o->client)) >> 11) * 0x1p-53;
    if (o->faults.poison_mode == SL_AGENT_POISON_NONE || !(u < o->faults.poison))
        return SL_AGENT_POISON_NONE;
    return o->faults.poison_mode;
}

void sl__agent_poison_update(sl_agent_poison mode, float *update, size_t n)
{
    float factor = mode == SL_AGENT_POISON_SCALE100 ? 100.0f
                   : mode == SL_AGENT_POISON_FLIP   ? -1.0f
                                                    : 1.0f;
    if (factor == 1.0f)
        return;
    for (size_t i = 0; i < n; i++)
        update[i] *= factor;
}

/* ---- the NaN frame ------------------------------------------------------------------------- */

static int varint(const uint8_t *p, size_t end, size_t *at, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && *at < end; shift += 7) {
        uint8_t b = p[(*at)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return SL_OK;
        }
    }
    return SL_ECORRUPT;
}

/* Write a NaN into the value section @v of @bytes in @mode (see patch_nan);
 * SL_ENOENT when the section has no raw field to hold one. */
static int patch_section(uint8_t *v, uint64_t bytes, uint8_t mode)
{
    static const uint8_t nan32[4] = {0x00, 0x00, 0xc0, 0x7f}; /* 0x7fc00000 */
    static const uint8_t nan16[2] = {0x00, 0x7e};             /* binary16 0x7e00 */
    static const uint8_t bnan16[2] = {0xc0, 0x7f};            /* bfloat16 0x7fc0 */
    switch ((sl_value_mode)mode) {
    case SL_VALUE_INT8:
    case SL_VALUE_TERNARY:
    case SL_VALUE_SIGN:
        if (bytes < 4)
            return SL_ENOENT;
        memcpy(v, nan32, 4);
        return SL_OK;
    case SL_VALUE_FP32:
        if (bytes < 5 || v[0] != 0)
            return SL_ENOENT;
        memcpy(v + 1, nan32, 4);
        return SL_OK;
    case SL_VALUE_FP16:
    case SL_VALUE_BF16:
        if (bytes < 3 || v[0] != 0)
            return SL_ENOENT;
        memcpy(v + 1, mode == SL_VALUE_FP16 ? nan16 : bnan16, 2);
        return SL_OK;
    }
    return SL_ECORRUPT;
}

/* patch_nan for a flat body (SL_FRAME_FLAG_FLAT) starting at @at: n, the
 * position coding, its parameter, the value mode, the position section's
 * size and the section, then per tensor with values its value section's
 * size and the section. */
static int patch_flat(uint8_t *f, size_t at, size_t end)
{
    uint64_t n, pos_bytes, val_bytes;
    uint8_t mode;
    int rc = SL_ENOENT;
    if (varint(f, end, &at, &n) != SL_OK)
        return SL_ECORRUPT;
    if (n == 0)
        return SL_ENOENT;
    if (end - at < 3)
        return SL_ECORRUPT;
    mode = f[at + 2];
    at += 3;
    if (varint(f, end, &at, &pos_bytes) != SL_OK || pos_bytes > end - at)
        return SL_ECORRUPT;
    at += (size_t)pos_bytes;
    while (rc == SL_ENOENT && at < end) {
        if (varint(f, end, &at, &val_bytes) != SL_OK || val_bytes > end - at)
            return SL_ECORRUPT;
        rc = patch_section(f + at, val_bytes, mode);
        at += (size_t)val_bytes;
    }
    return rc;
}

/* patch_nan for a per-tensor body starting at @at: the tensor table, then
 * each tensor's position and value sections. */
static int patch_table(uint8_t *f, size_t at, size_t end)
{
    uint64_t tensors;
    size_t sections;
    struct entry {
        uint64_t n, pos_bytes, val_bytes;
        uint8_t mode;
    } * table;
    int rc = SL_ENOENT;

    if (varint(f, end, &at, &tensors) != SL_OK || tensors > end - at)
        return SL_ECORRUPT; /* every tensor takes a byte of the table at least */
    table = calloc(tensors ? tensors : 1, sizeof *table);
    if (table == NULL)
        return SL_ENOMEM;
    for (uint64_t t = 0; t < tensors; t++) {
        struct entry *e = &table[t];
        if (varint(f, end, &at, &e->n) != SL_OK) {
            free(table);
            return SL_ECORRUPT;
        }
        if (e->n == 0)
            continue;
        if (end - at < 3) {
            free(table);
            return SL_ECORRUPT;
        }
        e->mode = f[at + 2];
        at += 3;
        if (varint(f, end, &at, &e->pos_bytes) != SL_OK ||
            varint(f, end, &at, &e->val_bytes) != SL_OK) {
            free(table);
            return SL_ECORRUPT;
        }
    }
    sections = at;
    for (uint64_t t = 0; t < tensors && rc == SL_ENOENT; t++) {
        const struct entry *e = &table[t];
        if (e->n == 0)
            continue;
        if (e->pos_bytes > end - sections || e->val_bytes > end - sections - e->pos_bytes) {
            rc = SL_ECORRUPT;
            break;
        }
        rc = patch_section(f + sections + e->pos_bytes, e->val_bytes, e->mode);
        sections += (size_t)(e->pos_bytes + e->val_bytes);
    }
    free(table);
    return rc;
}

/*
 * Write a NaN into the first value section that holds a raw f32 or u16
 * field: an int8 scale, a ternary or sign mu, or the first value of a
 * stored (tag 0) fp32 / fp16 / bf16 section, and fix the CRC. SL_ENOENT
 * when every value section is zstd-coded. Layouts: codecs/FORMAT.md.
 */
static int patch_nan(uint8_t *f, size_t len)
{
    uint64_t skip;
    size_t at = 16, end;
    int rc;

    if (len < 16 + 2 + 4 || memcmp(f, "SLFR", 4) != 0 || f[5] != SL_FRAME_UPDATE)
        return SL_ECORRUPT;
    end = len - 4;
    if (varint(f, end, &at, &skip) != SL_OK || varint(f, end, &at, &skip) != SL_OK)
        return SL_ECORRUPT;
    rc = ((f[6] | f[7] << 8) & SL_FRAME_FLAG_FLAT) ? patch_flat(f, at, end)
                                                   : patch_table(f, at, end);
    if (rc == SL_OK) {
        uLong crc = crc32(0L, Z_NULL, 0);
        crc = crc32(crc, f, (uInt)end); /* frames are far below 4 GiB (SL__AGENT_MAX_FRAME) */
        f[end] = (uint8_t)crc;
        f[end + 1] = (uint8_t)(crc >> 8);
        f[end + 2] = (uint8_t)(crc >> 16);
        f[end + 3] = (uint8_t)(crc >> 24);
    }
    return rc;
}

/* The frame again with its first non-empty tensor cut to one value: a
 * section of 1 value is below the encoder's zstd threshold, so it is stored. */
static int reencode_short(const sl_layout *layout, const void *frame, size_t len, void **out,
                          size_t *out_len)
{
    sl_update *u = NULL;
    sl_sparse_tensor *ts = NULL;
    sl_encode_params p;
    int rc = sl_frame_decode_update(layout, frame, len, NULL, &u), cut = 0;
    if (rc != SL_OK)
        return rc;
    ts = calloc(u->tensors ? u->tensors : 1, sizeof *ts);
    if (ts == NULL) {
        sl_update_free(u);
        return SL_ENOMEM;
    }
    sl_encode_params_default(&p);
    p.flat = (u->header.flags & SL_FRAME_FLAG_FLAT) != 0;
    for (size_t t = 0; t < u->tensors; t++) {
        ts[t].n = u->n[t];
        ts[t].idx = u->idx[t];
        ts[t].val = u->val[t];
        if (!cut && u->n[t] > 0) {
            ts[t].n = 1;
            p.values = u->modes[t];
            cut = 1;
        }
    }
    rc = cut ? sl_frame_encode_update(layout, &u->header, ts, &p, NULL, out, out_len) : SL_ENOENT;
    free(ts);
    sl_update_free(u);
    return rc;
}

int sl__agent_poison_frame(const sl_layout *layout, const void *frame, size_t len, void **out,
                           size_t *out_len)
{
    void *copy;
    size_t copy_len = len;
    int rc;
    if (frame == NULL || out == NULL || out_len == NULL)
        return SL_EINVAL;
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        return SL_ENOMEM;
    memcpy(copy, frame, len);
    rc = patch_nan(copy, copy_len);
    if (rc == SL_ENOENT && layout != NULL) {
        free(copy);
        copy = NULL;
        rc = reencode_short(layout, frame, len, &copy, &copy_len);
        if (rc == SL_OK)
            rc = patch_nan(copy, copy_len);
    }
    if (rc != SL_OK) {
        free(copy);
        return rc;
    }
    *out = copy;
    *out_len = copy_len;
    return SL_OK;
}
