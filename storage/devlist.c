/*
 * devlist.c - the list of device ids a partial sum covers, as both backends
 * store it (backend.h): each id in 8 bytes, little-endian. At the bottom of
 * the storage layers, beside db.c (store_int.h).
 */
#include <stdint.h>
#include <stdlib.h>

#include "backend.h"

int sl__devices_encode(const int64_t *devices, size_t n, uint8_t **out, size_t *len)
{
    uint8_t *b = malloc(n ? n * 8 : 1);
    if (b == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            b[8 * i + (size_t)k] = (uint8_t)((uint64_t)devices[i] >> (8 * k));
    *out = b;
    *len = n * 8;
    return SL_OK;
}

int sl__devices_decode(const void *data, size_t len, int64_t **out, size_t *n)
{
    const uint8_t *b = data;
    int64_t *d;
    if (len % 8 != 0)
        return SL_ECORRUPT;
    d = malloc(len ? len : 1);
    if (d == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < len / 8; i++) {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v |= (uint64_t)b[8 * i + (size_t)k] << (8 * k);
        d[i] = (int64_t)v;
    }
    *out = d;
    *n = len / 8;
    return SL_OK;
}

void sl__dl_tally_init(sl__dl_tally *t)
{
    t->bytes = 0;
    t->ids = NULL;
    t->n = t->cap = 0;
}

int sl__dl_tally_add(sl__dl_tally *t, int64_t bytes, const void *devices, size_t len)
{
    const uint64_t most = (uint64_t)INT64_MAX;
    uint64_t b = bytes > 0 ? (uint64_t)bytes : 0;
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = sl__devices_decode(devices, len, &ids, &n);
    if (rc != SL_OK)
        return rc;
    if (n > t->cap - t->n) {
        size_t cap = t->cap ? t->cap : 64;
        int64_t *grown;
        while (cap - t->n < n)
            cap *= 2;
        if ((grown = realloc(t->ids, cap * sizeof *grown)) == NULL) {
            free(ids);
            return SL_ENOMEM;
        }
        t->ids = grown;
        t->cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        t->ids[t->n++] = ids[i];
    free(ids);
    t->bytes = b < most - t->bytes ? t->bytes + b : most; /* saturating, as the store keeps */
    return SL_OK;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

size_t sl__dl_tally_devices(sl__dl_tally *t)
{
    size_t distinct = 0;
    if (t->n > 1)
        qsort(t->ids, t->n, sizeof *t->ids, cmp_id);
    for (size_t i = 0; i < t->n; i++)
        if (i == 0 || t->ids[i] != t->ids[i - 1])
            distinct++;
    return distinct;
}

void sl__dl_tally_free(sl__dl_tally *t)
{
    free(t->ids);
    sl__dl_tally_init(t);
}
