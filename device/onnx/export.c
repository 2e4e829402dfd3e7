/*
 * export.c - sl_onnx_export(): a spec and its parameters as an ONNX
 * ModelProto (opset 17, inference), packed by protobuf-c.
 *
 * Every message is allocated from one list and freed at the end. Spec
 * tensors keep their names; helper tensors are named "<name>#<what><k>"
 * ('#' is not a spec name character, so they never collide). Where an ONNX
 * op produces a tensor in another layout than the spec's (GRU/LSTM give
 * [T, 1, N, H]), the node's output takes the spec name and the batch-first
 * tensor after the Squeeze/Transpose is what later nodes read: `alias`
 * maps the spec name to it. sl_onnx_import() sees those as views and gives
 * the same spec back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "onnx_int.h"

typedef struct ex {
    void **mem;
    size_t nmem, capmem;
    Onnx__NodeProto **nodes;
    size_t nn, capn;
    const char **alias_from, **alias_to;
    size_t nalias, capalias;
    const sl_spec *spec;
    unsigned tmp;
    int oom;
} ex;

static void *ex_alloc(ex *e, size_t n)
{
    void *p;
    if (e->oom)
        return NULL;
    if (e->nmem == e->capmem) {
        size_t cap = e->capmem ? e->capmem * 2 : 256;
        void **q = realloc(e->mem, cap * sizeof *q);
        if (q == NULL) {
            e->oom = 1;
            return NULL;
        }
        e->mem = q;
        e->capmem = cap;
    }
    p = calloc(1, n ? n : 1);
    if (p == NULL) {
        e->oom = 1;
        return NULL;
    }
    e->mem[e->nmem++] = p;
    return p;
}

static char *ex_str(ex *e, const char *s)
{
    size_t n = strlen(s);
    char *p = ex_alloc(e, n + 1);
    if (p != NULL)
        memcpy(p, s, n + 1);
    return p;
}

/* A helper tensor's name: "<base>#<what><k>". */
static char *ex_tmp(ex *e, const char *base, const char *what)
{
    char name[192];
    snprintf(name, sizeof name, "%.120s#%s%u", base, what, e->tmp++);
    return ex_str(e, name);
}

/* The ONNX tensor that holds spec tensor @name in batch-first layout. */
static const char *resolve(const ex *e, const char *name)
{
    for (size_t k = e->nalias; k-- > 0;)
        if (strcmp(e->alias_from[k], name) == 0)
            return e->alias_to[k];
    return name;
}

static void add_alias(ex *e, const char *from, const char *to)
{
    if (e->nalias == e->capalias) {
        size_t cap = e->capalias ? e->capalias * 2 : 16;
        const char **f = ex_alloc(e, cap * sizeof *f), **t = ex_alloc(e, cap * sizeof *t);
        if (f == NULL || t == NULL)
            return;
        if (e->nalias) {
            memcpy(f, e->alias_from, e->nalias * sizeof *f);
            memcpy(t, e->alias_to, e->nalias * sizeof *t);
        }
        e->alias_from = f;
        e->alias_to = t;
        e->capalias = cap;
    }
    e->alias_from[e->nalias] = from;
    e->alias_to[e->nalias++] = to;
}

static Onnx__NodeProto *ex_node(ex *e, const char *op, const char *name, const char *const *ins,
                                size_t nin, const char *const *outs, size_t nout)
{
    Onnx__NodeProto *nd = ex_alloc(e, sizeof *nd);
    if (nd == NULL)
        return NULL;
    onnx__node_proto__init(nd);
    nd->op_type = ex_str(e, op);
    if (name == NULL || name[0] == '\0') {
        /* every node is named (importers, ours too, refer to nodes by name): the op and its
         * place, unique in the graph */
        char made[64];
        snprintf(made, sizeof made, "/%s_%zu", op, e->nn);
        nd->name = ex_str(e, made);
    } else {
        nd->name = ex_str(e, name);
    }
    nd->input = ex_alloc(e, (nin ? nin : 1) * sizeof *nd->input);
    nd->output = ex_alloc(e, (nout ? nout : 1) * sizeof *nd->output);
    if (nd->input == NULL || nd->output == NULL)
        return NULL;
    for (size_t k = 0; k < nin; k++)
        nd->input[k] = ex_str(e, ins[k][0] ? resolve(e, ins[k]) : "");
    for (size_t k = 0; k < nout; k++)
        nd->output[k] = ex_str(e, outs[k]);
    nd->n_input = nin;
    nd->n_output = nout;
    if (e->nn == e->capn) {
        size_t cap = e->capn ? e->capn * 2 : 64;
        Onnx__NodeProto **q = ex_alloc(e, cap * sizeof *q);
        if (q == NULL)
            return NULL;
        if (e->nn)
            memcpy(q, e->nodes, e->nn * sizeof *q);
        e->nodes = q;
        e->capn = cap;
    }
    e->nodes[e->nn++] = nd;
    return nd;
}

static Onnx__AttributeProto *ex_attr(ex *e, Onnx__NodeProto *nd, const char *name,
                                     Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *a = ex_alloc(e, sizeof *a), **list;
    if (a == NULL || nd == NULL)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = ex_str(e, name);
    a->has_type = 1;
    a->type = type;
    list = ex_alloc(e, (nd->n_attribute + 1) * sizeof *list);
    if (list == NULL)
        return NULL;
    if (nd->n_attribute)
        if (nd->n_attribute > 0)
            memcpy(list, nd->attribute, nd->n_attribute * sizeof *list);
    list[nd->n_attribute++] = a;
    nd->attribute = list;
    return a;
}

static void attr_i(ex *e, Onnx__NodeProto *nd, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = ex_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a != NULL) {
        a->has_i = 1;
        a->i = v;
    }
}

static void attr_f(ex *e, Onnx__NodeProto *nd, const char *name, float v)
{
    Onnx__AttributeProto *a = ex_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a != NULL) {
        a->has_f = 1;
        a->f = v;
    }
}

static void attr_ints(ex *e, Onnx__NodeProto *nd, const char *name, const int64_t *v, size_t n)
{
    Onnx__AttributeProto *a = ex_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (a != NULL && (a->ints = ex_alloc(e, (n ? n : 1) * sizeof *a->ints)) != NULL) {
        if (n > 0)
            memcpy(a->ints, v, n * sizeof *v);
        a->n_ints = n;
    }
}

static Onnx__TensorProto *tensor(ex *e, const char *name, int32_t dtype, const int64_t *dims,
                                 size_t ndim, const void *data, size_t bytes)
{
    Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
    uint8_t *raw;
    if (t == NULL)
        return NULL;
    onnx__tensor_proto__init(t);
    t->name = name ? ex_str(e, name) : NULL;
    t->has_data_type = 1;
    t->data_type = dtype;
    t->dims = ex_alloc(e, (ndim ? ndim : 1) * sizeof *t->dims);
    raw = ex_alloc(e, bytes);
    if (t->dims == NULL || raw == NULL)
        return NULL;
    if (ndim > 0)
        memcpy(t->dims, dims, ndim * sizeof *dims);
    t->n_dims = ndim;
    /* raw_data is little-endian, whatever the host */
    for (size_t k = 0, w = dtype == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? 8 : 4; k + w <= bytes;
         k += w) {
        uint64_t u;
        if (w == 4) {
            uint32_t u32;
            memcpy(&u32, (const uint8_t *)data + k, 4);
            u = u32;
        } else {
            memcpy(&u, (const uint8_t *)data + k, 8);
        }
        for (size_t b = 0; b < w; b++)
            raw[k + b] = (uint8_t)(u >> (8 * b));
    }
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = bytes;
    return t;
}

/* A Constant node: int64 values (@scalar: rank 0); its output's name. */
static const char *const_i64(ex *e, const char *base, const int64_t *v, size_t n, int scalar)
{
    const char *out = ex_tmp(e, base, "c");
    int64_t dims[1] = {(int64_t)n};
    Onnx__NodeProto *nd = ex_node(e, "Constant", NULL, NULL, 0, &out, 1);
    Onnx__AttributeProto *a =
        ex_attr(e, nd, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    if (a != NULL)
        a->t = tensor(e, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, dims, scalar ? 0 : 1, v,
                      n * sizeof *v);
    return out;
}

static const char *const_f32(ex *e, const char *base, float v)
{
    const char *out = ex_tmp(e, base, "c");
    Onnx__NodeProto *nd = ex_node(e, "Constant", NULL, NULL, 0, &out, 1);
    Onnx__AttributeProto *a =
        ex_attr(e, nd, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    if (a != NULL)
        a->t = tensor(e, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, &v, sizeof v);
    return out;
}

/* ---- the spec's attributes ---------------------------------------------------------------- */

static const cJSON *jattr(const cJSON *attrs, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(attrs, name);
}

static double jnum(const cJSON *attrs, const char *name, double dflt)
{
    const cJSON *v = jattr(attrs, name);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static size_t jints(const cJSON *attrs, const char *name, int64_t *out, size_t cap)
{
    const cJSON *v = jattr(attrs, name), *it;
    size_t n = 0;
    if (cJSON_IsNumber(v)) {
        out[0] = (int64_t)v->valuedouble;
        return 1;
    }
    cJSON_ArrayForEach(it, v)
    {
        if (n < cap && cJSON_IsNumber(it))
            out[n++] = (int64_t)it->valuedouble;
    }
    return n;
}

/* Sample axes to ONNX axes: the batch comes first; negative ones count from the end as before. */
static void shift_axes(int64_t *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (v[k] >= 0)
            v[k] += 1;
}

/* ---- ops that need more than one ONNX node ------------------------------------------------ */

static void gelu(ex *e, const char *name, const char *x, const char *y, int tanh_approx)
{
    const char *in2[2], *t1, *t2, *t3;
    if (!tanh_approx) {
        const char *d = ex_tmp(e, y, "div"), *er = ex_tmp(e, y, "erf"), *ad = ex_tmp(e, y, "add"),
                   *mu = ex_tmp(e, y, "mul");
        in2[0] = x, in2[1] = const_f32(e, y, 1.41421356237f);
        ex_node(e, "Div", NULL, in2, 2, &d, 1);
        ex_node(e, "Erf", NULL, &d, 1, &er, 1);
        in2[0] = er, in2[1] = const_f32(e, y, 1.0f);
        ex_node(e, "Add", NULL, in2, 2, &ad, 1);
        in2[0] = x, in2[1] = ad;
        ex_node(e, "Mul", NULL, in2, 2, &mu, 1);
        in2[0] = mu, in2[1] = const_f32(e, y, 0.5f);
        ex_node(e, "Mul", name, in2, 2, &y, 1);
        return;
    }
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    t1 = ex_tmp(e, y, "sq"), t2 = ex_tmp(e, y, "cube"), t3 = ex_tmp(e, y, "k");
    in2[0] = x, in2[1] = x;
    ex_node(e, "Mul", NULL, in2, 2, &t1, 1);
    in2[0] = t1, in2[1] = x;
    ex_node(e, "Mul", NULL, in2, 2, &t2, 1);
    in2[0] = t2, in2[1] = const_f32(e, y, 0.044715f);
    ex_node(e, "Mul", NULL, in2, 2, &t3, 1);
    t1 = ex_tmp(e, y, "in");
    in2[0] = x, in2[1] = t3;
    ex_node(e, "Add", NULL, in2, 2, &t1, 1);
    t2 = ex_tmp(e, y, "sc");
    in2[0] = t1, in2[1] = const_f32(e, y, 0.7978845608f);
    ex_node(e, "Mul", NULL, in2, 2, &t2, 1);
    t3 = ex_tmp(e, y, "tanh");
    ex_node(e, "Tanh", NULL, &t2, 1, &t3, 1);
    t1 = ex_tmp(e, y, "p1");
    in2[0] = t3, in2[1] = const_f32(e, y, 1.0f);
    ex_node(e, "Add", NULL, in2, 2, &t1, 1);
    t2 = ex_tmp(e, y, "xm");
    in2[0] = x, in2[1] = t1;
    ex_node(e, "Mul", NULL, in2, 2, &t2, 1);
    in2[0] = t2, in2[1] = const_f32(e, y, 0.5f);
    ex_node(e, "Mul", name, in2, 2, &y, 1);
}

/* PyTorch's [gates x H, cols] rows in ONNX's gate order with the direction axis: [1, G H, cols]. */
static const char *repack(ex *e, const char *w, size_t gates, size_t h, int unsqueeze)
{
    static const int gru_order[3] = {1, 0, 2}, lstm_order[4] = {0, 3, 1, 2};
    const int *order = gates == 3 ? gru_order : lstm_order;
    const char *parts[4], *cat = ex_tmp(e, w, "onnx_order"), *out, *in2[2];
    int64_t zero = 0;
    for (size_t j = 0; j < gates; j++) {
        int64_t s = (int64_t)((size_t)order[j] * h), en = s + (int64_t)h;
        const char *ins[4];
        ins[0] = w;
        ins[1] = const_i64(e, w, &s, 1, 0);
        ins[2] = const_i64(e, w, &en, 1, 0);
        ins[3] = const_i64(e, w, &zero, 1, 0);
        parts[j] = ex_tmp(e, w, "gate");
        ex_node(e, "Slice", NULL, ins, 4, &parts[j], 1);
    }
    attr_i(e, ex_node(e, "Concat", NULL, parts, gates, &cat, 1), "axis", 0);
    if (!unsqueeze)
        return cat;
    out = ex_tmp(e, w, "dir");
    in2[0] = cat;
    in2[1] = const_i64(e, w, &zero, 1, 0);
    ex_node(e, "Unsqueeze", NULL, in2, 2, &out, 1);
    return out;
}

static void rnn(ex *e, const char *op, const char *name, const char *const *in,
                const char *const *out, size_t nout, const cJSON *attrs)
{
    size_t gates = strcmp(op, "GRU") == 0 ? 3 : 4, h = (size_t)jnum(attrs, "hidden_size", 1);
    int64_t perm[3] = {1, 0, 2}, zero = 0, one = 1;
    const char *xt = ex_tmp(e, in[0], "time_major"), *ins[4], *outs[3], *bcat, *b, *in2[2];
    Onnx__NodeProto *nd;
    attr_ints(e, ex_node(e, "Transpose", NULL, &in[0], 1, &xt, 1), "perm", perm, 3);
    ins[0] = xt;
    ins[1] = repack(e, in[1], gates, h, 1);
    ins[2] = repack(e, in[2], gates, h, 1);
    in2[0] = repack(e, in[3], gates, h, 0);
    in2[1] = repack(e, in[4], gates, h, 0);
    bcat = ex_tmp(e, in[3], "both");
    attr_i(e, ex_node(e, "Concat", NULL, in2, 2, &bcat, 1), "axis", 0);
    b = ex_tmp(e, in[3], "dir");
    in2[0] = bcat;
    in2[1] = const_i64(e, in[3], &zero, 1, 0);
    ex_node(e, "Unsqueeze", NULL, in2, 2, &b, 1);
    ins[3] = b;
    for (size_t k = 0; k < 3; k++)
        outs[k] = k < nout && out[k][0] ? out[k] : "";
    nd = ex_node(e, op, name, ins, 4, outs, nout);
    attr_i(e, nd, "hidden_size", (int64_t)h);
    if (gates == 3)
        attr_i(e, nd, "linear_before_reset", 1);
    /* Y [T, 1, N, H] -> [N, T, H]; Y_h, Y_c [1, N, H] -> [N, H] */
    for (size_t k = 0; k < nout; k++) {
        const char *sq, *bf;
        if (!out[k][0])
            continue;
        sq = ex_tmp(e, out[k], k == 0 ? "squeezed" : "batch_first");
        in2[0] = out[k];
        in2[1] = const_i64(e, out[k], k == 0 ? &one : &zero, 1, 0);
        ex_node(e, "Squeeze", NULL, in2, 2, &sq, 1);
        bf = sq;
        if (k == 0) {
            bf = ex_tmp(e, out[k], "batch_first");
            attr_ints(e, ex_node(e, "Transpose", NULL, &sq, 1, &bf, 1), "perm", perm, 3);
        }
        add_alias(e, out[k], bf);
    }
}

/* ---- one spec node ------------------------------------------------------------------------ */

static int node(ex *e, const cJSON *nd, char *err, size_t errcap)
{
    const cJSON *jop = cJSON_GetObjectItemCaseSensitive(nd, "op"),
                *jname = cJSON_GetObjectItemCaseSensitive(nd, "name"),
                *attrs = cJSON_GetObjectItemCaseSensitive(nd, "attrs"), *it;
    const char *op = cJSON_IsString(jop) ? jop->valuestring : "",
               *name = cJSON_IsString(jname) ? jname->valuestring : NULL, *in[16], *out[4];
    size_t nin = 0, nout = 0;
    int64_t v[16], w[16];
    size_t n;
    Onnx__NodeProto *o;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(nd, "inputs"))
    {
        if (nin < 16 && cJSON_IsString(it))
            in[nin++] = it->valuestring;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(nd, "outputs"))
    {
        if (nout < 4 && cJSON_IsString(it))
            out[nout++] = it->valuestring;
    }
    if (nin == 0 || nout == 0)
        goto bad;
    if (strcmp(op, "Gemm") == 0) {
        o = ex_node(e, op, name, in, nin, out, 1);
        attr_i(e, o, "transB", (int64_t)jnum(attrs, "transB", 1));
        if (jattr(attrs, "alpha"))
            attr_f(e, o, "alpha", (float)jnum(attrs, "alpha", 1));
        if (jattr(attrs, "beta"))
            attr_f(e, o, "beta", (float)jnum(attrs, "beta", 1));
    } else if (strcmp(op, "MatMul") == 0 || strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 ||
               strcmp(op, "Mul") == 0 || strcmp(op, "Div") == 0 || strcmp(op, "Relu") == 0 ||
               strcmp(op, "Sigmoid") == 0 || strcmp(op, "Tanh") == 0 ||
               strcmp(op, "Identity") == 0 || strcmp(op, "GlobalAveragePool") == 0) {
        ex_node(e, op, name, in, nin, out, 1);
    } else if (strcmp(op, "LeakyRelu") == 0) {
        attr_f(e, ex_node(e, op, name, in, 1, out, 1), "alpha", (float)jnum(attrs, "alpha", 0.01));
    } else if (strcmp(op, "Conv") == 0 || strcmp(op, "MaxPool") == 0 ||
               strcmp(op, "AveragePool") == 0) {
        static const char *const keys[] = {"kernel_shape", "strides", "pads", "dilations"};
        o = ex_node(e, op, name, in, nin, out, 1);
        for (size_t k = 0; k < 4; k++)
            if ((n = jints(attrs, keys[k], v, 16)) > 0)
                attr_ints(e, o, keys[k], v, n);
        if (jattr(attrs, "kernel_shape") == NULL) { /* Conv: the weights' */
            uint32_t shape[6];
            size_t r = 0;
            if (sl_spec_tensor_shape(e->spec, in[1], shape, &r) != SL_OK || r < 3)
                goto bad;
            for (size_t k = 2; k < r; k++)
                v[k - 2] = shape[k];
            attr_ints(e, o, "kernel_shape", v, r - 2);
        }
        if (strcmp(op, "Conv") == 0)
            attr_i(e, o, "group", (int64_t)jnum(attrs, "group", 1));
        else if (strcmp(op, "AveragePool") == 0)
            attr_i(e, o, "count_include_pad", (int64_t)jnum(attrs, "count_include_pad", 0));
    } else if (strcmp(op, "ReduceMean") == 0) {
        n = jints(attrs, "axes", v, 16);
        shift_axes(v, n);
        o = ex_node(e, op, name, in, 1, out, 1);
        attr_ints(e, o, "axes", v, n);
        attr_i(e, o, "keepdims", (int64_t)jnum(attrs, "keepdims", 1));
    } else if (strcmp(op, "Flatten") == 0 && jnum(attrs, "axis", 0) == 0) {
        attr_i(e, ex_node(e, op, name, in, 1, out, 1), "axis", 1);
    } else if (strcmp(op, "Flatten") == 0 || strcmp(op, "Reshape") == 0) {
        const char *ins[2];
        uint32_t shape[6];
        size_t r = 0;
        v[0] = 0; /* copy the batch */
        if (strcmp(op, "Reshape") == 0) {
            n = jints(attrs, "shape", v + 1, 15);
        } else {
            if (sl_spec_tensor_shape(e->spec, out[0], shape, &r) != SL_OK)
                goto bad;
            for (n = 0; n < r; n++)
                v[1 + n] = shape[n];
        }
        ins[0] = in[0];
        ins[1] = const_i64(e, out[0], v, n + 1, 0);
        attr_i(e, ex_node(e, "Reshape", name, ins, 2, out, 1), "allowzero", 0);
    } else if (strcmp(op, "Transpose") == 0) {
        n = jints(attrs, "perm", v, 15);
        w[0] = 0;
        for (size_t k = 0; k < n; k++)
            w[k + 1] = v[k] + 1;
        attr_ints(e, ex_node(e, op, name, in, 1, out, 1), "perm", w, n + 1);
    } else if (strcmp(op, "Squeeze") == 0 || strcmp(op, "Unsqueeze") == 0) {
        const char *ins[2];
        n = jints(attrs, "axes", v, 16);
        shift_axes(v, n);
        ins[0] = in[0];
        ins[1] = const_i64(e, out[0], v, n, 0);
        ex_node(e, op, name, ins, 2, out, 1);
    } else if (strcmp(op, "Concat") == 0) {
        int64_t axis = (int64_t)jnum(attrs, "axis", 0);
        attr_i(e, ex_node(e, op, name, in, nin, out, 1), "axis", axis >= 0 ? axis + 1 : axis);
    } else if (strcmp(op, "Slice") == 0) {
        const char *ins[5];
        size_t ns = jints(attrs, "starts", v, 16), ne;
        int64_t ends[16], axes[16], steps[16];
        ne = jints(attrs, "ends", ends, 16);
        if (jints(attrs, "axes", axes, 16) != ns)
            for (size_t k = 0; k < ns; k++)
                axes[k] = (int64_t)k;
        if (jints(attrs, "steps", steps, 16) != ns)
            for (size_t k = 0; k < ns; k++)
                steps[k] = 1;
        if (ne != ns)
            goto bad;
        shift_axes(axes, ns);
        ins[0] = in[0];
        ins[1] = const_i64(e, out[0], v, ns, 0);
        ins[2] = const_i64(e, out[0], ends, ns, 0);
        ins[3] = const_i64(e, out[0], axes, ns, 0);
        ins[4] = const_i64(e, out[0], steps, ns, 0);
        ex_node(e, op, name, ins, 5, out, 1);
    } else if (strcmp(op, "Gather") == 0) {
        const char *ins[2];
        int64_t axis = (int64_t)jnum(attrs, "axis", 0);
        n = jints(attrs, "indices", v, 16);
        ins[0] = in[0];
        ins[1] = const_i64(e, out[0], v, n, cJSON_IsNumber(jattr(attrs, "indices")));
        attr_i(e, ex_node(e, op, name, ins, 2, out, 1), "axis", axis >= 0 ? axis + 1 : axis);
    } else if (strcmp(op, "Embedding") == 0) {
        const char *ins[2] = {in[1], in[0]};
        attr_i(e, ex_node(e, "Gather", name, ins, 2, out, 1), "axis", 0);
    } else if (strcmp(op, "Gelu") == 0) {
        const cJSON *ap = jattr(attrs, "approximate");
        gelu(e, name, resolve(e, in[0]), out[0],
             cJSON_IsString(ap) && strcmp(ap->valuestring, "tanh") == 0);
    } else if (strcmp(op, "Dropout") == 0) {
        const char *ins[2];
        ins[0] = in[0];
        ins[1] = const_f32(e, out[0], (float)jnum(attrs, "ratio", 0.5));
        ex_node(e, op, name, ins, 2, out, 1);
    } else if (strcmp(op, "BatchNormalization") == 0) {
        o = ex_node(e, op, name, in, nin, out, 1);
        attr_f(e, o, "epsilon", (float)jnum(attrs, "epsilon", 1e-5));
        attr_f(e, o, "momentum", (float)(1.0 - jnum(attrs, "momentum", 0.1)));
    } else if (strcmp(op, "LayerNormalization") == 0) {
        int64_t axis = (int64_t)jnum(attrs, "axis", -1);
        o = ex_node(e, op, name, in, nin > 2 && in[2][0] ? 3 : 2, out, 1);
        attr_i(e, o, "axis", axis >= 0 ? axis + 1 : axis);
        attr_f(e, o, "epsilon", (float)jnum(attrs, "epsilon", 1e-5));
    } else if ((strcmp(op, "GRU") == 0 || strcmp(op, "LSTM") == 0) && nin == 5) {
        rnn(e, op, name, in, out, nout, attrs);
    } else {
        goto bad;
    }
    return e->oom ? SL_ENOMEM : SL_OK;
bad:
    if (err != NULL && errcap > 0)
        snprintf(err, errcap, "cannot export node %.64s (%.32s)", name ? name : "?", op);
    return SL_EUNSUPPORTED;
}

static Onnx__ValueInfoProto *value_info(ex *e, const char *name, int32_t dtype,
                                        const uint32_t *shape, size_t ndim)
{
    Onnx__ValueInfoProto *vi = ex_alloc(e, sizeof *vi);
    Onnx__TypeProto *tp = ex_alloc(e, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof *tt);
    Onnx__TensorShapeProto *sp = ex_alloc(e, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims = ex_alloc(e, (ndim + 1) * sizeof *dims);
    if (vi == NULL || tp == NULL || tt == NULL || sp == NULL || dims == NULL)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (size_t k = 0; k <= ndim; k++) {
        dims[k] = ex_alloc(e, sizeof *dims[k]);
        if (dims[k] == NULL)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(dims[k]);
        if (k == 0) {
            dims[k]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dims[k]->dim_param = ex_str(e, "N");
        } else {
            dims[k]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dims[k]->dim_value = shape[k - 1];
        }
    }
    sp->n_dim = ndim + 1;
    sp->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = dtype;
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = ex_str(e, name);
    vi->type = tp;
    return vi;
}

int sl_onnx_export(const sl_spec *spec, const float *params, void **onnx, size_t *len, char *err,
                   size_t errcap)
{
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    Onnx__ValueInfoProto *inputs[8], *outputs[1];
    const sl_layout *layout;
    ex e;
    cJSON *doc = NULL, *it;
    size_t tlen = 0, ni = 0, packed;
    const char *text;
    uint8_t *buf = NULL;
    int rc = SL_OK;
    if (spec == NULL || params == NULL || onnx == NULL || len == NULL) {
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "NULL argument");
        return SL_EINVAL;
    }
    memset(&e, 0, sizeof e);
    e.spec = spec;
    text = sl_spec_text(spec, &tlen);
    doc = cJSON_ParseWithLength(text, tlen);
    layout = sl_spec_layout(spec);
    if (doc == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    /* inputs */
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "inputs"))
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"),
                    *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        uint32_t shape[6];
        size_t r = 0;
        if (ni == 8 || !cJSON_IsString(nm) ||
            sl_spec_tensor_shape(spec, nm->valuestring, shape, &r) != SL_OK) {
            rc = SL_EINVAL;
            goto done;
        }
        inputs[ni++] = value_info(&e, nm->valuestring,
                                  cJSON_IsString(dt) && strcmp(dt->valuestring, "int64") == 0
                                      ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64
                                      : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
                                  shape, r);
    }
    /* initializers: the parameters in layout order */
    graph.n_initializer = sl_layout_tensors(layout);
    graph.initializer = ex_alloc(&e, (graph.n_initializer + 1) * sizeof *graph.initializer);
    for (size_t k = 0; graph.initializer != NULL && k < graph.n_initializer; k++) {
        const sl_tensor_desc *t = sl_layout_tensor(layout, k);
        int64_t dims[SL_CODEC_MAX_DIMS];
        for (uint32_t d = 0; d < t->ndim; d++)
            dims[d] = (int64_t)t->shape[d];
        graph.initializer[k] = tensor(&e, t->name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, dims,
                                      t->ndim, params + t->offset, (size_t)t->count * 4);
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "nodes"))
    {
        if ((rc = node(&e, it, err, errcap)) != SL_OK)
            goto done;
    }
    {
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(doc, "output");
        uint32_t shape[6];
        size_t r = 0;
        if (!cJSON_IsString(out) ||
            sl_spec_tensor_shape(spec, out->valuestring, shape, &r) != SL_OK) {
            rc = SL_EINVAL;
            goto done;
        }
        outputs[0] = value_info(&e, resolve(&e, out->valuestring),
                                ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, shape, r);
    }
    if (e.oom) {
        rc = SL_ENOMEM;
        goto done;
    }
    graph.name = (char *)sl_spec_name(spec);
    graph.n_node = e.nn;
    graph.node = e.nodes;
    graph.n_input = ni;
    graph.input = inputs;
    graph.n_output = 1;
    graph.output = outputs;
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 17;
    model.has_ir_version = 1;
    model.ir_version = 8;
    model.producer_name = "starling";
    model.producer_version = "1";
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.graph = &graph;
    packed = onnx__model_proto__get_packed_size(&model);
    buf = malloc(packed ? packed : 1);
    if (buf == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    if (onnx__model_proto__pack(&model, buf) != packed) {
        rc = SL_EIO;
        goto done;
    }
    *onnx = buf;
    *len = packed;
    buf = NULL;
done:
    if (rc != SL_OK && rc != SL_EUNSUPPORTED && err != NULL && errcap > 0)
        snprintf(err, errcap, "cannot export the spec: %s", sl_strerror(rc));
    free(buf);
    cJSON_Delete(doc);
    for (size_t k = 0; k < e.nmem; k++)
        free(e.mem[k]);
    free(e.mem);
    return rc;
}
