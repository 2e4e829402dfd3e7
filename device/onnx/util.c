/*
 * util.c - text building, float formatting, names and a string map for
 * the importer and the report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

void sl__sb_printf(sl__sb *sb, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (sb->oom)
        return;
    for (;;) {
        size_t room = sb->cap - sb->len;
        va_start(ap, fmt);
        n = vsnprintf(sb->p ? sb->p + sb->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            sb->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            sb->len += (size_t)n;
            return;
        }
        {
            size_t cap = sb->cap ? sb->cap : 256;
            char *p;
            while (cap - sb->len <= (size_t)n)
                cap *= 2;
            p = realloc(sb->p, cap);
            if (p == NULL) {
                sb->oom = 1;
                return;
            }
            sb->p = p;
            sb->cap = cap;
        }
    }
}

void sl__sb_free(sl__sb *sb)
{
    free(sb->p);
    memset(sb, 0, sizeof *sb);
}

void sl__fmt_float(float v, char *out, size_t cap)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, cap, "%.*g", digits, (double)v);
        if (strtof(out, NULL) == v)
            break;
    }
    /* JSON has no bare "inf"/"nan": callers only format finite values, but be safe */
    if (strchr(out, 'n') != NULL || strchr(out, 'i') != NULL)
        snprintf(out, cap, "0");
}

void sl__sanitize(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; in[n] != '\0' && n + 1 < cap && n < SL__ONNX_NAME; n++) {
        char ch = in[n];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '.' || ch == ':' || ch == '/' || ch == '-';
        out[n] = ok ? ch : '_';
    }
    out[n] = '\0';
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int map_grow(sl__map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    const char **key = calloc(cap, sizeof *key);
    int32_t *val = calloc(cap, sizeof *val);
    if (key == NULL || val == NULL) {
        free(key);
        free(val);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->key[i] == NULL)
            continue;
        size_t j = (size_t)hash_str(m->key[i]) & (cap - 1);
        while (key[j] != NULL)
            j = (j + 1) & (cap - 1);
        key[j] = m->key[i];
        val[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
    return SL_OK;
}

int sl__map_put(sl__map *m, const char *key, int32_t val)
{
    size_t j;
    if ((m->n + 1) * 2 > m->cap && map_grow(m) != SL_OK)
        return SL_ENOMEM;
    j = (size_t)hash_str(key) & (m->cap - 1);
    while (m->key[j] != NULL && strcmp(m->key[j], key) != 0)
        j = (j + 1) & (m->cap - 1);
    if (m->key[j] == NULL)
        m->n++;
    m->key[j] = key;
    m->val[j] = val;
    return SL_OK;
}

int32_t sl__map_get(const sl__map *m, const char *key)
{
    size_t j;
    if (m->cap == 0)
        return -1;
    j = (size_t)hash_str(key) & (m->cap - 1);
    while (m->key[j] != NULL) {
        if (strcmp(m->key[j], key) == 0)
            return m->val[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void sl__map_free(sl__map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}
