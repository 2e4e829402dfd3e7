/*
 * spec_check.c - what the coordinator checks of a task's model spec: only the
 * layout it implies. The coordinator stays model-agnostic: it stores the spec
 * beside the layout and serves it to agents (GET /v1/tasks/{id}/model-spec),
 * which check everything else (device/nn/MODEL_SPEC.md) against their limits.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "coord_int.h"

#define SPEC_MAX_BYTES ((size_t)16 << 20)

static int bad(char *err, size_t errcap, const char *what)
{
    if (errcap > 0)
        snprintf(err, errcap, "model_spec: %s", what);
    return SL_ESPEC;
}

/* "params[i]" of the spec against tensor @d of the layout */
static int check_param(const cJSON *p, size_t i, const sl_tensor_desc *d, char *err, size_t errcap)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(p, "shape");
    const cJSON *dim;
    uint32_t k = 0;
    char why[256 + 2 * SL_CODEC_MAX_NAME];
    if (!cJSON_IsObject(p) || !cJSON_IsString(name) || !cJSON_IsArray(shape)) {
        snprintf(why, sizeof why, "params[%zu] needs a name (string) and a shape (array)", i);
        return bad(err, errcap, why);
    }
    if (strcmp(name->valuestring, d->name) != 0) {
        snprintf(why, sizeof why, "params[%zu] is \"%.100s\" where the layout has \"%s\"", i,
                 name->valuestring, d->name);
        return bad(err, errcap, why);
    }
    cJSON_ArrayForEach(dim, shape)
    {
        if (!cJSON_IsNumber(dim) || k >= d->ndim || dim->valuedouble != (double)d->shape[k]) {
            k = UINT32_MAX;
            break;
        }
        k++;
    }
    if (k != d->ndim) {
        snprintf(why, sizeof why, "params[%zu] (%s) has another shape than the layout's", i,
                 d->name);
        return bad(err, errcap, why);
    }
    return SL_OK;
}

int sl__spec_check_layout(const char *spec, const sl_layout *layout, char *err, size_t errcap)
{
    cJSON *doc;
    const cJSON *version, *params, *p;
    size_t i = 0, n = sl_layout_tensors(layout);
    char why[128];
    int rc = SL_OK;
    if (spec == NULL || layout == NULL)
        return SL_EINVAL;
    if (strlen(spec) > SPEC_MAX_BYTES)
        return bad(err, errcap, "larger than 16 MiB");
    doc = cJSON_Parse(spec);
    if (doc == NULL)
        return bad(err, errcap, "not JSON");
    version = cJSON_GetObjectItemCaseSensitive(doc, "starling_model");
    params = cJSON_GetObjectItemCaseSensitive(doc, "params");
    if (!cJSON_IsObject(doc) || !cJSON_IsNumber(version) || version->valuedouble != 1.0)
        rc = bad(err, errcap, "not a model spec of format version 1 (\"starling_model\": 1)");
    else if (!cJSON_IsArray(params))
        rc = bad(err, errcap, "params (an array) is required");
    else if ((size_t)cJSON_GetArraySize(params) != n) {
        snprintf(why, sizeof why, "%d params where the layout has %zu tensors",
                 cJSON_GetArraySize(params), n);
        rc = bad(err, errcap, why);
    } else {
        cJSON_ArrayForEach(p, params)
        {
            rc = check_param(p, i, sl_layout_tensor(layout, i), err, errcap);
            if (rc != SL_OK)
                break;
            i++;
        }
    }
    cJSON_Delete(doc);
    return rc;
}
