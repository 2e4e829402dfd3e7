/*
 * onnx_fixture.h - the ONNX fixtures of tests/fixtures/onnx (make_onnx.py
 * writes them): the list, and one fixture's files (header-only, shared by
 * test_onnx.c and the exporter driver of the onnx_checker test).
 */
#ifndef SL_ONNX_FIXTURE_H
#define SL_ONNX_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sl_fixture.h"

#define SL_ONNX_FIXTURES_MAX 64

/* The fixtures' base names ("mlp_train_op13"), from fixtures.txt: the count, or -1. */
static inline int sl_onnx_fixture_list(char names[][64], int cap)
{
    size_t len = 0, at = 0;
    char *text = sl_fixture_load("onnx/fixtures.txt", &len);
    int n = 0;
    if (text == NULL)
        return -1;
    while (at < len && n < cap) {
        size_t end = at;
        while (end < len && text[end] != '\n')
            end++;
        if (end > at && end - at < 64 && text[at] != '#') {
            memcpy(names[n], text + at, end - at);
            names[n++][end - at] = '\0';
        }
        at = end + 1;
    }
    free(text);
    return n;
}

/* One fixture: the ONNX bytes and the JSON beside it. */
typedef struct sl_onnx_fixture {
    void *onnx;
    size_t onnx_len;
    cJSON *doc; /* input_shape, input, output_shape, output, state_dict, loss, mode, opset */
} sl_onnx_fixture;

static inline int sl_onnx_fixture_load(const char *base, sl_onnx_fixture *f)
{
    char path[128];
    size_t len = 0;
    char *json;
    memset(f, 0, sizeof *f);
    if (snprintf(path, sizeof path, "onnx/%s.onnx", base) >= (int)sizeof path)
        return -1;
    f->onnx = sl_fixture_load(path, &f->onnx_len);
    if (snprintf(path, sizeof path, "onnx/%s.json", base) >= (int)sizeof path)
        return -1;
    json = sl_fixture_load(path, &len);
    if (f->onnx == NULL || json == NULL) {
        free(json);
        free(f->onnx);
        return -1;
    }
    f->doc = cJSON_ParseWithLength(json, len);
    free(json);
    return f->doc != NULL ? 0 : -1;
}

static inline void sl_onnx_fixture_free(sl_onnx_fixture *f)
{
    free(f->onnx);
    cJSON_Delete(f->doc);
    memset(f, 0, sizeof *f);
}

/* A float array member of the fixture (malloc'd), its length in *n. */
static inline float *sl_onnx_fixture_floats(const sl_onnx_fixture *f, const char *key, size_t *n)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(f->doc, key), *it;
    size_t k = 0, count = (size_t)cJSON_GetArraySize(arr);
    float *out = malloc((count ? count : 1) * sizeof *out);
    if (out == NULL)
        return NULL;
    cJSON_ArrayForEach(it, arr) out[k++] = (float)it->valuedouble;
    *n = count;
    return out;
}

#endif /* SL_ONNX_FIXTURE_H */
