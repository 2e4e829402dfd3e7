/*
 * splits.c - the supports split updates are coded against (codecs/FORMAT.md, "Update body,
 * flat and split"): the coordinates whose bits differ between two stored model versions of
 * a task, the version a device held and the one it trained from. Read from the store and
 * kept for the pairs used last (a round's devices held a few versions between them), so an
 * accept, or the close that aggregates the stored split frames, reads the models once per
 * pair, not once per update. Below the engine: it calls the store and the codecs only.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

/* A stored version's parameters. */
static int read_version(sl_store *store, int64_t task_id, const sl_layout *layout, int64_t version,
                        float *out)
{
    sl_model_record m;
    int rc = sl_store_get_model(store, task_id, version, &m);
    if (rc != SL_OK)
        return rc;
    if (m.version != version) /* version 0 would be the latest: never asked for */
        rc = SL_ENOENT;
    if (rc == SL_OK)
        rc = sl_frame_decode_model(layout, m.frame, m.frame_len, NULL, 0, out);
    sl_store_model_free(&m);
    return rc;
}

/* A copy of @s the caller owns. */
static int copy_support(const sl_layout *layout, const sl_support *s, sl_support **out)
{
    size_t len;
    const uint8_t *bits = sl_support_bits(s, &len);
    return sl_support_load(layout, bits, len, out);
}

/* SL_OK when the store still holds the bytes of versions @ref and @base, SL_ENOENT when
 * either was retired or never made, else the store's error: a record, not the bytes. */
static int versions_kept(sl_store *store, int64_t task_id, uint64_t ref, uint64_t base)
{
    uint64_t v[2] = {ref, base};
    for (int i = 0; i < 2; i++) {
        sl_model_record m;
        int rc = sl_store_get_model_info(store, task_id, (int64_t)v[i], &m);
        if (rc != SL_OK)
            return rc;
        rc = m.retired || m.version != (int64_t)v[i] ? SL_ENOENT : SL_OK;
        sl_store_model_free(&m);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

int sl__splits_support(sl__splits *c, sl_store *store, int64_t task_id, const sl_layout *layout,
                       uint64_t ref, uint64_t base, int check_kept, sl_support **out)
{
    sl_support *made = NULL;
    float *a = NULL, *b = NULL;
    size_t n = (size_t)sl_layout_params(layout), slot;
    int rc;

    if (ref == 0 || ref >= base || base > INT64_MAX)
        return SL_EINVAL;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < SL__SPLITS_KEPT; i++) {
        sl__split_entry *s = &c->kept[i];
        if (s->support != NULL && s->task_id == task_id && s->ref == ref && s->base == base) {
            rc = copy_support(layout, s->support, out);
            s->used = ++c->clock;
            c->hits++;
            pthread_mutex_unlock(&c->lock);
            if (rc == SL_OK && check_kept &&
                (rc = versions_kept(store, task_id, ref, base)) != SL_OK) {
                sl_support_free(*out);
                *out = NULL;
            }
            return rc;
        }
    }
    pthread_mutex_unlock(&c->lock);
    /* outside the lock: two model reads and decodes */
    a = malloc((n ? n : 1) * sizeof *a);
    b = malloc((n ? n : 1) * sizeof *b);
    rc = a && b ? SL_OK : SL_ENOMEM;
    if (rc == SL_OK)
        rc = read_version(store, task_id, layout, (int64_t)ref, a);
    if (rc == SL_OK)
        rc = read_version(store, task_id, layout, (int64_t)base, b);
    if (rc == SL_OK)
        rc = sl_support_diff(layout, a, b, &made);
    free(a);
    free(b);
    if (rc == SL_OK)
        rc = copy_support(layout, made, out);
    if (rc != SL_OK) {
        sl_support_free(made);
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    c->reads++;
    slot = 0; /* an empty slot, else the pair used least recently */
    for (size_t i = 1; i < SL__SPLITS_KEPT && c->kept[slot].support != NULL; i++)
        if (c->kept[i].support == NULL || c->kept[i].used < c->kept[slot].used)
            slot = i;
    sl_support_free(c->kept[slot].support);
    c->kept[slot].used = ++c->clock;
    c->kept[slot].task_id = task_id;
    c->kept[slot].ref = ref;
    c->kept[slot].base = base;
    c->kept[slot].support = made;
    pthread_mutex_unlock(&c->lock);
    return SL_OK;
}

int sl__splits_unsplit(sl__splits *c, sl_store *store, int64_t task_id, const sl_layout *layout,
                       const sl_decode_limits *limits, const void *frame, size_t len, void **out,
                       size_t *out_len)
{
    sl_frame_header h;
    sl_support *s = NULL;
    int rc = sl_frame_peek_header(frame, len, &h);
    if (rc != SL_OK)
        return rc;
    if (!(h.flags & SL_FRAME_FLAG_SPLIT))
        return SL_EINVAL;
    rc = sl__splits_support(c, store, task_id, layout, h.ref_version, h.base_version, 0, &s);
    if (rc == SL_ENOENT)
        return SL_ESUPPORT; /* a version this coordinator does not keep */
    if (rc == SL_OK)
        rc = sl_frame_unsplit(layout, frame, len, limits, s, out, out_len);
    sl_support_free(s);
    return rc;
}

void sl__splits_init(sl__splits *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

void sl__splits_free(sl__splits *c)
{
    for (size_t i = 0; i < SL__SPLITS_KEPT; i++)
        sl_support_free(c->kept[i].support);
    pthread_mutex_destroy(&c->lock);
}
