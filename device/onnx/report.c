/*
 * report.c - what a spec costs per sample: its ops by first use, its
 * parameters, the floats its node outputs hold (the forward activations of
 * one sample) and the forward FLOPs. A multiply-add counts 2; element-wise
 * ops 1 per output (Gelu, Sigmoid and Tanh too: an estimate, not a
 * measurement); shape ops 0.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "onnx_int.h"

static uint64_t count_of(const sl_spec *spec, const char *name, uint32_t *shape, size_t *ndim)
{
    uint32_t local[6];
    size_t n = 0;
    uint64_t c = 1;
    if (shape == NULL)
        shape = local;
    if (name == NULL || sl_spec_tensor_shape(spec, name, shape, &n) != SL_OK)
        n = 0;
    for (size_t d = 0; d < n; d++)
        c *= shape[d];
    if (ndim)
        *ndim = n;
    return n ? c : 0;
}

static const char *str_at(const cJSON *arr, int k)
{
    const cJSON *v = cJSON_GetArrayItem(arr, k);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static uint64_t flops_of(const sl_spec *spec, const char *op, const cJSON *ins, const cJSON *outs,
                         const cJSON *attrs)
{
    uint32_t xs[6], ws[6];
    size_t xn = 0, wn = 0;
    uint64_t y = count_of(spec, str_at(outs, 0), NULL, NULL);
    uint64_t x = count_of(spec, str_at(ins, 0), xs, &xn);
    uint64_t w = strcmp(op, "Embedding") == 0 ? 0 : count_of(spec, str_at(ins, 1), ws, &wn);
    uint64_t bias = str_at(ins, 2) ? y : 0;
    if (strcmp(op, "Gemm") == 0) /* W holds K x N */
        return 2 * w + bias;
    if (strcmp(op, "MatMul") == 0)
        return wn == 2 ? 2 * y * ws[0] : 0;
    if (strcmp(op, "Conv") == 0) /* W [M, C/g, k...]: C/g x k... multiply-adds per output */
        return (wn > 0 && ws[0] ? 2 * y * (w / ws[0]) : 0) + bias;
    if (strcmp(op, "MaxPool") == 0 || strcmp(op, "AveragePool") == 0) {
        const cJSON *k, *ks = cJSON_GetObjectItemCaseSensitive(attrs, "kernel_shape");
        uint64_t window = 1;
        cJSON_ArrayForEach(k, ks)
        {
            if (cJSON_IsNumber(k) && k->valuedouble >= 1)
                window *= (uint64_t)k->valuedouble;
        }
        return y * window;
    }
    if (strcmp(op, "GlobalAveragePool") == 0 || strcmp(op, "ReduceMean") == 0)
        return x;
    if (strcmp(op, "BatchNormalization") == 0)
        return 2 * y;
    if (strcmp(op, "LayerNormalization") == 0)
        return 8 * y;
    if (strcmp(op, "GRU") == 0 || strcmp(op, "LSTM") == 0) {
        uint64_t hh = count_of(spec, str_at(ins, 2), NULL, NULL);
        uint64_t t = xn == 2 ? xs[0] : 0, gh = wn == 2 ? ws[0] : 0;
        return t * (2 * (w + hh) + 8 * gh);
    }
    if (strcmp(op, "Embedding") == 0 || strcmp(op, "Flatten") == 0 || strcmp(op, "Reshape") == 0 ||
        strcmp(op, "Transpose") == 0 || strcmp(op, "Squeeze") == 0 ||
        strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Concat") == 0 || strcmp(op, "Slice") == 0 ||
        strcmp(op, "Gather") == 0 || strcmp(op, "Identity") == 0 || strcmp(op, "Dropout") == 0)
        return 0;
    return y; /* element-wise */
}

int sl__onnx_report(const sl_spec *spec, sl_onnx_report *r)
{
    size_t len = 0;
    const char *text = sl_spec_text(spec, &len);
    cJSON *doc = cJSON_ParseWithLength(text, len), *nd;
    const sl_layout *layout = sl_spec_layout(spec);
    char seen[64][24];
    size_t counts[64], nops = 0, o = 0;
    if (doc == NULL)
        return SL_ENOMEM;
    memset(r, 0, sizeof *r);
    r->params = sl_layout_tensors(layout);
    r->param_floats = sl_layout_params(layout);
    r->nodes_out = sl_spec_nodes(spec);
    cJSON_ArrayForEach(nd, cJSON_GetObjectItemCaseSensitive(doc, "nodes"))
    {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(nd, "op");
        const cJSON *ins = cJSON_GetObjectItemCaseSensitive(nd, "inputs");
        const cJSON *outs = cJSON_GetObjectItemCaseSensitive(nd, "outputs");
        const cJSON *out;
        size_t k;
        if (!cJSON_IsString(op))
            continue;
        r->flops_per_sample += flops_of(spec, op->valuestring, ins, outs,
                                        cJSON_GetObjectItemCaseSensitive(nd, "attrs"));
        cJSON_ArrayForEach(out, outs)
        {
            if (cJSON_IsString(out) && out->valuestring[0])
                r->activation_floats_per_sample += count_of(spec, out->valuestring, NULL, NULL);
        }
        for (k = 0; k < nops && strcmp(seen[k], op->valuestring) != 0; k++)
            ;
        if (k == nops && nops < 64) {
            snprintf(seen[nops], sizeof seen[nops], "%s", op->valuestring);
            counts[nops++] = 0;
        }
        if (k < nops)
            counts[k]++;
    }
    for (size_t k = 0; k < nops && o + 1 < sizeof r->ops; k++) {
        char item[48];
        int n = counts[k] > 1 ? snprintf(item, sizeof item, "%s x%zu", seen[k], counts[k])
                              : snprintf(item, sizeof item, "%s", seen[k]);
        if (o + (size_t)n + 6 >= sizeof r->ops) {
            snprintf(r->ops + o, sizeof r->ops - o, "%s...", k ? ", " : "");
            break;
        }
        o += (size_t)snprintf(r->ops + o, sizeof r->ops - o, "%s%s", k ? ", " : "", item);
    }
    cJSON_Delete(doc);
    return SL_OK;
}
