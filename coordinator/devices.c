/*
 * devices.c - the engine's small containers: sorted device-id sets (pools,
 * participants) and the table of what it remembers per device.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

static size_t idset_lower(const sl__idset *s, int64_t id)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int sl__idset_add(sl__idset *s, int64_t id)
{
    size_t at = idset_lower(s, id);
    if (at < s->n && s->ids[at] == id)
        return SL_EEXIST;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        int64_t *grown = realloc(s->ids, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        s->ids = grown;
        s->cap = cap;
    }
    memmove(s->ids + at + 1, s->ids + at, (s->n - at) * sizeof *s->ids);
    s->ids[at] = id;
    s->n++;
    return SL_OK;
}

int sl__idset_has(const sl__idset *s, int64_t id)
{
    size_t at = idset_lower(s, id);
    return at < s->n && s->ids[at] == id;
}

int sl__idset_del(sl__idset *s, int64_t id)
{
    size_t at = idset_lower(s, id);
    if (at >= s->n || s->ids[at] != id)
        return SL_ENOENT;
    memmove(s->ids + at, s->ids + at + 1, (s->n - at - 1) * sizeof *s->ids);
    s->n--;
    return SL_OK;
}

int sl__idset_collect(void *ctx, int64_t id)
{
    int rc = sl__idset_add(ctx, id);
    return rc == SL_EEXIST ? SL_OK : rc;
}

int sl__idset_merge(sl__idset *s, const sl__idset *add)
{
    size_t both = 0, size, i, j, k;
    for (size_t a = 0; a < add->n; a++)
        both += sl__idset_has(s, add->ids[a]);
    size = s->n + add->n - both;
    if (size > s->cap) { /* grown by doubling, so a set merged into each round reallocates rarely */
        size_t cap = s->cap ? s->cap : 64;
        int64_t *grown;
        while (cap < size)
            cap *= 2;
        grown = realloc(s->ids, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        s->ids = grown;
        s->cap = cap;
    }
    /* from the back, in place: a write never passes the read ahead of it */
    i = s->n, j = add->n, k = size;
    while (j > 0) {
        if (i > 0 && s->ids[i - 1] > add->ids[j - 1])
            s->ids[--k] = s->ids[--i];
        else if (i > 0 && s->ids[i - 1] == add->ids[j - 1])
            s->ids[--k] = s->ids[--i], j--; /* in both: once */
        else
            s->ids[--k] = add->ids[--j];
    }
    s->n = size;
    return SL_OK;
}

void sl__idset_clear(sl__idset *s)
{
    s->n = 0;
}

void sl__idset_free(sl__idset *s)
{
    free(s->ids);
    s->ids = NULL;
    s->n = s->cap = 0;
}

static uint64_t hash_id(int64_t id)
{
    uint64_t z = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return z ^ (z >> 29);
}

void sl__engine_clear_busy(sl_engine *e)
{
    for (size_t i = 0; i < e->devcap; i++)
        if (e->devices[i].id != 0 && e->devices[i].cooldown_until_ms == INT64_MAX)
            e->devices[i].cooldown_until_ms = 0;
}

sl__device *sl__engine_device(sl_engine *e, int64_t id)
{
    size_t mask;
    uint64_t h;
    if (e->ndevices * 2 >= e->devcap) { /* grow at half full */
        size_t cap = e->devcap ? e->devcap * 2 : 1024;
        sl__device *table = calloc(cap, sizeof *table);
        if (table == NULL)
            return NULL;
        for (size_t i = 0; i < e->devcap; i++) {
            if (e->devices[i].id == 0)
                continue;
            for (h = hash_id(e->devices[i].id) & (cap - 1); table[h].id != 0;
                 h = (h + 1) & (cap - 1))
                ;
            table[h] = e->devices[i];
        }
        free(e->devices);
        e->devices = table;
        e->devcap = cap;
    }
    mask = e->devcap - 1;
    for (h = hash_id(id) & mask; e->devices[h].id != 0; h = (h + 1) & mask)
        if (e->devices[h].id == id)
            return &e->devices[h];
    e->devices[h].id = id; /* device ids are SQLite rowids: never 0 */
    e->ndevices++;
    return &e->devices[h];
}
