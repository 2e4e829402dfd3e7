/* layout.c - named fp32 tensors in one flat vector, and their stable hash. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "codec_int.h"

struct sl_layout {
    sl_tensor_desc *tensors;
    size_t n;
    size_t cap;
    uint64_t params;
};

int sl_layout_create(sl_layout **out)
{
    sl_layout *l;
    if (out == NULL)
        return SL_EINVAL;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return SL_ENOMEM;
    *out = l;
    return SL_OK;
}

void sl_layout_free(sl_layout *layout)
{
    if (layout == NULL)
        return;
    free(layout->tensors);
    free(layout);
}

static int valid_name(const char *name, size_t len)
{
    if (len == 0 || len > SL_CODEC_MAX_NAME)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && c != '_' && c != '.' && c != ':' && c != '/' && c != '-')
            return 0;
    }
    return 1;
}

int sl_layout_add(sl_layout *layout, const char *name, const uint64_t *shape, uint32_t ndim)
{
    sl_tensor_desc *t;
    uint64_t count = 1;
    size_t len;

    if (layout == NULL || name == NULL || shape == NULL)
        return SL_EINVAL;
    len = strnlen(name, SL_CODEC_MAX_NAME + 1);
    if (!valid_name(name, len) || ndim == 0 || ndim > SL_CODEC_MAX_DIMS)
        return SL_EINVAL;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return SL_EINVAL;
        if (shape[i] > SL_CODEC_MAX_TENSOR || count > SL_CODEC_MAX_TENSOR / shape[i])
            return SL_ETOOBIG;
        count *= shape[i];
    }
    for (size_t i = 0; i < layout->n; i++)
        if (strcmp(layout->tensors[i].name, name) == 0)
            return SL_EINVAL;
    if (layout->n >= SL_CODEC_MAX_TENSORS || layout->params + count > SL_CODEC_MAX_PARAMS)
        return SL_ETOOBIG;
    if (layout->n == layout->cap) {
        size_t cap = layout->cap ? layout->cap * 2 : 8;
        sl_tensor_desc *grown = realloc(layout->tensors, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        layout->tensors = grown;
        layout->cap = cap;
    }
    t = &layout->tensors[layout->n];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len);
    t->ndim = ndim;
    for (uint32_t i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->offset = layout->params;
    t->count = count;
    layout->params += count;
    layout->n++;
    return SL_OK;
}

int sl_layout_parse(const char *text, size_t len, sl_layout **out)
{
    sl_layout *l;
    size_t pos = 0;
    int rc;

    if (out == NULL || (text == NULL && len > 0))
        return SL_EINVAL;
    rc = sl_layout_create(&l);
    if (rc != SL_OK)
        return rc;
    while (pos < len) {
        char name[SL_CODEC_MAX_NAME + 1];
        uint64_t shape[SL_CODEC_MAX_DIMS];
        uint32_t ndim = 0;
        size_t end = pos, p, nlen;

        while (end < len && text[end] != '\n')
            end++;
        p = pos;
        pos = end + 1;
        while (p < end && isspace((unsigned char)text[p]))
            p++;
        if (p == end || text[p] == '#')
            continue;
        nlen = 0;
        while (p < end && !isspace((unsigned char)text[p])) {
            if (nlen == SL_CODEC_MAX_NAME) {
                rc = SL_ESYNTAX;
                goto fail;
            }
            name[nlen++] = text[p++];
        }
        name[nlen] = '\0';
        for (;;) {
            uint64_t v = 0;
            size_t digits = 0;
            while (p < end && isspace((unsigned char)text[p]))
                p++;
            if (p == end)
                break;
            while (p < end && isdigit((unsigned char)text[p])) {
                if (v > (UINT64_MAX - 9) / 10) {
                    rc = SL_ETOOBIG;
                    goto fail;
                }
                v = v * 10 + (uint64_t)(text[p++] - '0');
                digits++;
            }
            if (digits == 0 || (p < end && !isspace((unsigned char)text[p])) ||
                ndim == SL_CODEC_MAX_DIMS) {
                rc = SL_ESYNTAX;
                goto fail;
            }
            shape[ndim++] = v;
        }
        if (ndim == 0) {
            rc = SL_ESYNTAX;
            goto fail;
        }
        rc = sl_layout_add(l, name, shape, ndim);
        if (rc != SL_OK)
            goto fail;
    }
    if (l->n == 0) {
        rc = SL_ESYNTAX;
        goto fail;
    }
    *out = l;
    return SL_OK;
fail:
    sl_layout_free(l);
    return rc;
}

size_t sl_layout_format(const sl_layout *layout, char *out, size_t cap)
{
    size_t need = 0;
    if (cap > 0)
        out[0] = '\0';
    if (layout == NULL)
        return 0;
    for (size_t i = 0; i < layout->n; i++) {
        const sl_tensor_desc *t = &layout->tensors[i];
        char line[SL_CODEC_MAX_NAME + SL_CODEC_MAX_DIMS * 22 + 4];
        int n = snprintf(line, sizeof line, "%s", t->name);
        for (uint32_t d = 0; d < t->ndim && n > 0; d++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %llu",
                          (unsigned long long)t->shape[d]);
        if (n < 0)
            continue;
        line[n++] = '\n';
        line[n] = '\0';
        if (need + (size_t)n < cap)
            memcpy(out + need, line, (size_t)n + 1);
        need += (size_t)n;
    }
    return need;
}

size_t sl_layout_tensors(const sl_layout *layout)
{
    return layout ? layout->n : 0;
}

const sl_tensor_desc *sl_layout_tensor(const sl_layout *layout, size_t i)
{
    if (layout == NULL || i >= layout->n)
        return NULL;
    return &layout->tensors[i];
}

uint64_t sl_layout_params(const sl_layout *layout)
{
    return layout ? layout->params : 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv1a_le(uint64_t h, uint64_t v, size_t bytes)
{
    uint8_t b[8];
    for (size_t i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv1a(h, b, bytes);
}

uint64_t sl_layout_hash(const sl_layout *layout)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (layout == NULL)
        return h;
    h = fnv1a_le(h, layout->n, 4);
    for (size_t i = 0; i < layout->n; i++) {
        const sl_tensor_desc *t = &layout->tensors[i];
        h = fnv1a(h, t->name, strlen(t->name) + 1); /* with its NUL */
        h = fnv1a_le(h, t->ndim, 4);
        for (uint32_t d = 0; d < t->ndim; d++)
            h = fnv1a_le(h, t->shape[d], 8);
    }
    return h;
}

int sl_layout_equal(const sl_layout *a, const sl_layout *b)
{
    if (a == NULL || b == NULL || a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const sl_tensor_desc *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) != 0 || x->ndim != y->ndim)
            return 0;
        for (uint32_t d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d])
                return 0;
    }
    return 1;
}
