/*
 * import_ops.c - one ONNX node (that did not fold) into spec nodes: the
 * element-wise, dense, convolution, pooling, normalisation and shape ops;
 * the views (Transpose, Squeeze, Unsqueeze, Identity, a no-op Pad);
 * GELU's and LayerNormalization's decompositions, matched where they
 * start; GRU and LSTM, with ONNX's gate order undone (import_rnn.c).
 * Axes in ONNX count the batch; the spec's do not: an ONNX axis a of a
 * plain activation is the spec's a - 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

#define ATTRS 512

/* A string attribute equals @want (absent: @absent_ok). */
static int attr_s_is(const Onnx__NodeProto *nd, const char *name, const char *want, int absent_ok)
{
    const Onnx__AttributeProto *a = sl__attr(nd, name);
    if (a == NULL || !a->has_s)
        return absent_ok;
    return a->s.len == strlen(want) && memcmp(a->s.data, want, a->s.len) == 0;
}

static int is(const Onnx__NodeProto *nd, const char *op)
{
    return strcmp(nd->op_type, op) == 0;
}

/* 1 when node @nd is op @op with exactly @in inputs (0: any number, at least one) and at
 * least one output: what a pattern reads of a node it matches (a hostile file's node may
 * have none). */
static int is_n(const Onnx__NodeProto *nd, const char *op, size_t in)
{
    return is(nd, op) && (in == 0 ? nd->n_input >= 1 : nd->n_input == in) && nd->n_output >= 1;
}

static sl__value *in_val(sl__imp *m, const Onnx__NodeProto *nd, size_t k)
{
    return k < nd->n_input ? sl__val(m, nd->input[k]) : NULL;
}

/* Input @k as a plain activation. */
static int act(sl__imp *m, const Onnx__NodeProto *nd, size_t k, int32_t *t)
{
    sl__value *v = in_val(m, nd, k);
    if (v == NULL || v->kind != SL__V_ACT)
        return sl__imp_unsupported(m, nd,
                                   "input %zu (%.64s) must be computed from the model's "
                                   "input",
                                   k, k < nd->n_input ? nd->input[k] : "");
    return sl__materialize(m, nd, v, t);
}

/* Input @k as a float constant (NULL after a note when it is not one). */
static sl__value *cst(sl__imp *m, const Onnx__NodeProto *nd, size_t k)
{
    sl__value *v = in_val(m, nd, k);
    if (v == NULL || v->kind != SL__V_CONST || v->c.fill || v->c.dtype != SL__DT_FLOAT) {
        sl__imp_unsupported(m, nd, "input %zu must be a float32 initializer", k);
        return NULL;
    }
    return v;
}

/* Output @k of @nd: a new spec tensor of @shape. */
static int out_t(sl__imp *m, const Onnx__NodeProto *nd, size_t k, const uint32_t *shape,
                 size_t ndim, int32_t *t)
{
    const char *name = k < nd->n_output && nd->output[k][0] ? nd->output[k] : nd->name;
    int rc = sl__tensor_new(m, name ? name : "t", shape, ndim, t);
    if (rc == SL_OK && k < nd->n_output)
        sl__set_act(m, nd->output[k], *t);
    return rc;
}

/* Outputs from @first on are not read by anything that reaches a graph output. */
static int unused_from(sl__imp *m, const Onnx__NodeProto *nd, size_t first)
{
    for (size_t k = first; k < nd->n_output; k++) {
        const sl__value *v = sl__val(m, nd->output[k]);
        if (v != NULL && v->needed)
            return 0;
    }
    return 1;
}

static size_t ints_json(char *out, size_t cap, const char *name, const int64_t *v, size_t n)
{
    size_t o = (size_t)snprintf(out, cap, "\"%s\": [", name);
    for (size_t k = 0; k < n && o < cap; k++)
        o += (size_t)snprintf(out + o, cap - o, "%s%lld", k ? ", " : "", (long long)v[k]);
    if (o < cap)
        o += (size_t)snprintf(out + o, cap - o, "]");
    return o < cap ? o : cap - 1;
}

/* Append ", " between members. */
static size_t sep(char *out, size_t cap, size_t o)
{
    if (o > 0 && o + 2 < cap) {
        out[o++] = ',';
        out[o++] = ' ';
        out[o] = '\0';
    }
    return o;
}

static int norm_axis(int64_t axis, size_t rank, size_t *out)
{
    if (axis < 0)
        axis += (int64_t)rank;
    if (axis < 0 || (size_t)axis >= rank)
        return SL_EINVAL;
    *out = (size_t)axis;
    return SL_OK;
}

/* The axes of ReduceMean/Squeeze/Unsqueeze: the attribute or (opset 13+/18) the input. */
static int axes_of(sl__imp *m, const Onnx__NodeProto *nd, int64_t *axes, size_t *n)
{
    const Onnx__AttributeProto *a = sl__attr(nd, "axes");
    *n = 0;
    if (a != NULL) {
        if (a->n_ints > SL__ONNX_RANK)
            return SL_EINVAL;
        if (a->n_ints > 0)
            memcpy(axes, a->ints, a->n_ints * sizeof *axes);
        *n = a->n_ints;
        return SL_OK;
    }
    if (nd->n_input > 1 && nd->input[1][0] != '\0') {
        sl__value *v = sl__val(m, nd->input[1]);
        if (v == NULL || v->kind != SL__V_CONST)
            return SL_EINVAL;
        return sl__const_ints(&v->c, axes, SL__ONNX_RANK, n);
    }
    return SL_OK;
}

/* ---- element-wise ------------------------------------------------------------------------- */

static int broadcast(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *out,
                     size_t *nout)
{
    size_t n = na > nb ? na : nb;
    for (size_t k = 0; k < n; k++) {
        uint32_t x = k < n - na ? 1 : a[k - (n - na)], y = k < n - nb ? 1 : b[k - (n - nb)];
        if (x != y && x != 1 && y != 1)
            return SL_EINVAL;
        out[k] = x > y ? x : y;
    }
    *nout = n;
    return SL_OK;
}

static int binary(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t in[2], t;
    uint32_t shape[6];
    size_t n = 0, rank = 0;
    const uint32_t *s[2];
    size_t ns[2];
    int rc;
    for (size_t k = 0; k < 2; k++) {
        sl__value *v = in_val(m, nd, k);
        if (v != NULL && v->kind == SL__V_ACT && rank < v->a.rank)
            rank = v->a.rank;
    }
    for (size_t k = 0; k < 2; k++) {
        sl__value *v = in_val(m, nd, k);
        if (v == NULL)
            return sl__imp_unsupported(m, nd, "input %zu missing", k);
        if (v->kind == SL__V_ACT) {
            if (v->a.rank != rank)
                return sl__imp_unsupported(m, nd,
                                           "operands of ranks %u and %zu (the batch "
                                           "axes would not line up)",
                                           v->a.rank, rank);
            if ((rc = sl__materialize(m, nd, v, &in[k])) != SL_OK)
                return rc;
        } else {
            uint32_t dims[6];
            size_t nd_ = 0, first = 0;
            if (cst(m, nd, k) == NULL)
                return SL_EUNSUPPORTED;
            if (v->c.ndim > rank || v->c.ndim > 6)
                return sl__imp_unsupported(m, nd, "a constant with more axes than the data");
            if (v->c.ndim == rank) { /* it spans the batch axis: that must be 1 */
                if (v->c.dims[0] != 1)
                    return sl__imp_unsupported(m, nd, "a constant that varies along the batch");
                first = 1;
            }
            for (size_t d = first; d < v->c.ndim; d++)
                dims[nd_++] = (uint32_t)v->c.dims[d];
            if (nd_ == 0)
                dims[nd_++] = 1;
            if ((rc = sl__param(m, nd, v, dims, nd_, NULL, 0, &in[k])) != SL_OK)
                return rc;
        }
    }
    for (size_t k = 0; k < 2; k++) {
        s[k] = m->t[in[k]].shape;
        ns[k] = m->t[in[k]].ndim;
    }
    if (broadcast(s[0], ns[0], s[1], ns[1], shape, &n) != SL_OK)
        return sl__imp_unsupported(m, nd, "shapes do not broadcast");
    if ((rc = out_t(m, nd, 0, shape, n, &t)) != SL_OK)
        return rc;
    return sl__emit(m, nd->op_type, nd, in, 2, &t, 1, "");
}

/* Relu, Sigmoid, Tanh, LeakyRelu, Dropout, Gelu: the output has the input's shape. */
static int unary(sl__imp *m, const Onnx__NodeProto *nd, const char *op, const char *attrs)
{
    int32_t x, t;
    int rc;
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    if ((rc = out_t(m, nd, 0, m->t[x].shape, m->t[x].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, op, nd, &x, 1, &t, 1, attrs);
}

/* Identity, Dropout at inference, no-op Pad: the output is the input. */
static int alias(sl__imp *m, const Onnx__NodeProto *nd)
{
    sl__value *x = in_val(m, nd, 0), *y = nd->n_output ? sl__val(m, nd->output[0]) : NULL;
    if (x == NULL || x->kind != SL__V_ACT)
        return sl__imp_unsupported(m, nd, "input 0 must be computed from the model's input");
    if (y != NULL) {
        sl__const_free(&y->c);
        y->kind = SL__V_ACT;
        y->a = x->a;
    }
    return SL_OK;
}

/* ---- dense, convolution, pooling ---------------------------------------------------------- */

static int gemm(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t in[3] = {-1, -1, -1}, t;
    sl__value *w, *b = in_val(m, nd, 2);
    int64_t trans_b = sl__attr_i(nd, "transB", 0);
    float alpha = sl__attr_f(nd, "alpha", 1.0f), beta = sl__attr_f(nd, "beta", 1.0f);
    char attrs[ATTRS] = "", num[32];
    size_t o = 0;
    uint32_t n;
    int rc;
    if (sl__attr_i(nd, "transA", 0) != 0)
        return sl__imp_unsupported(m, nd, "transA=1");
    if ((rc = act(m, nd, 0, &in[0])) != SL_OK)
        return rc;
    if (m->t[in[0]].ndim != 1)
        return sl__imp_unsupported(m, nd, "input 0 must be [N, K]");
    if ((w = cst(m, nd, 1)) == NULL)
        return SL_EUNSUPPORTED;
    if (w->c.ndim != 2)
        return sl__imp_unsupported(m, nd, "B must be a matrix");
    if ((rc = sl__param(m, nd, w, NULL, 0, NULL, 0, &in[1])) != SL_OK)
        return rc;
    n = m->t[in[1]].shape[trans_b ? 0 : 1];
    if (b != NULL) {
        uint32_t bshape[1] = {n};
        if (b->kind != SL__V_CONST || b->c.count != n)
            return sl__imp_unsupported(m, nd, "C must be a bias of %u values", n);
        if ((rc = sl__param(m, nd, b, bshape, 1, NULL, 0, &in[2])) != SL_OK)
            return rc;
    }
    if (trans_b == 0)
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"transB\": 0");
    if (alpha != 1.0f) {
        sl__fmt_float(alpha, num, sizeof num);
        o = sep(attrs, sizeof attrs, o);
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"alpha\": %s", num);
    }
    if (beta != 1.0f && b != NULL) {
        sl__fmt_float(beta, num, sizeof num);
        o = sep(attrs, sizeof attrs, o);
        snprintf(attrs + o, sizeof attrs - o, "\"beta\": %s", num);
    }
    if ((rc = out_t(m, nd, 0, &n, 1, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Gemm", nd, in, b != NULL ? 3 : 2, &t, 1, attrs);
}

static int matmul(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t in[2], t;
    sl__value *w;
    uint32_t shape[6];
    size_t r;
    int rc;
    if ((rc = act(m, nd, 0, &in[0])) != SL_OK)
        return rc;
    if ((w = cst(m, nd, 1)) == NULL)
        return SL_EUNSUPPORTED;
    r = m->t[in[0]].ndim;
    if (w->c.ndim != 2 || r < 1 || (uint64_t)w->c.dims[0] != m->t[in[0]].shape[r - 1])
        return sl__imp_unsupported(m, nd, "B must be a [K, N] matrix");
    if ((rc = sl__param(m, nd, w, NULL, 0, NULL, 0, &in[1])) != SL_OK)
        return rc;
    m->p[m->np - 1].fan_in = m->p[m->np - 1].t == in[1] ? (uint64_t)w->c.dims[0] : 0;
    memcpy(shape, m->t[in[0]].shape, r * sizeof *shape);
    shape[r - 1] = (uint32_t)w->c.dims[1];
    if ((rc = out_t(m, nd, 0, shape, r, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "MatMul", nd, in, 2, &t, 1, "");
}

/* kernel_shape, strides, pads, dilations of Conv and the pools; output lengths. */
static int window(sl__imp *m, const Onnx__NodeProto *nd, const sl__stensor *x, const int64_t *wk,
                  int conv, char *attrs, size_t cap, uint32_t *shape)
{
    const Onnx__AttributeProto *ka = sl__attr(nd, "kernel_shape"), *sa = sl__attr(nd, "strides"),
                               *pa = sl__attr(nd, "pads"), *da = sl__attr(nd, "dilations");
    size_t ns = (size_t)x->ndim - 1, o = 0;
    int64_t k[2], s[2] = {1, 1}, p[4] = {0, 0, 0, 0}, d[2] = {1, 1};
    int any_s = 0, any_p = 0, any_d = 0;
    if (ns < 1 || ns > 2)
        return sl__imp_unsupported(m, nd, "only 1-D and 2-D windows");
    if (!attr_s_is(nd, "auto_pad", "NOTSET", 1) && !attr_s_is(nd, "auto_pad", "VALID", 0))
        return sl__imp_unsupported(m, nd, "auto_pad SAME (give explicit pads)");
    if ((ka && ka->n_ints != ns) || (sa && sa->n_ints != ns) || (pa && pa->n_ints != 2 * ns) ||
        (da && da->n_ints != ns) || (!ka && !wk))
        return sl__imp_unsupported(m, nd, "window attributes do not fit a %zu-D input", ns);
    for (size_t i = 0; i < ns; i++) {
        k[i] = ka ? ka->ints[i] : wk[i];
        if (sa)
            s[i] = sa->ints[i];
        if (da)
            d[i] = da->ints[i];
        if (pa) {
            p[i] = pa->ints[i];
            p[ns + i] = pa->ints[ns + i];
        }
        if (k[i] < 1 || s[i] < 1 || d[i] < 1 || p[i] < 0 || p[ns + i] < 0 || k[i] > 65536 ||
            s[i] > 65536 || d[i] > 65536 || p[i] > 65536 || p[ns + i] > 65536)
            return sl__imp_unsupported(m, nd, "window attributes out of range");
        if (wk != NULL && wk[i] != k[i])
            return sl__imp_unsupported(m, nd, "kernel_shape differs from the weights");
        any_s |= s[i] != 1;
        any_d |= d[i] != 1;
        any_p |= p[i] != 0 || p[ns + i] != 0;
        {
            int64_t len = (int64_t)x->shape[1 + i] + p[i] + p[ns + i] - d[i] * (k[i] - 1) - 1;
            if (len < 0)
                return sl__imp_unsupported(m, nd, "the window is larger than the input");
            shape[1 + i] = (uint32_t)(len / s[i] + 1);
        }
    }
    if (!conv && any_d)
        return sl__imp_unsupported(m, nd, "pooling with dilations");
    o += ints_json(attrs + o, cap - o, "kernel_shape", k, ns);
    if (any_s) {
        o = sep(attrs, cap, o);
        o += ints_json(attrs + o, cap - o, "strides", s, ns);
    }
    if (any_p) {
        o = sep(attrs, cap, o);
        o += ints_json(attrs + o, cap - o, "pads", p, 2 * ns);
    }
    if (any_d) {
        o = sep(attrs, cap, o);
        ints_json(attrs + o, cap - o, "dilations", d, ns);
    }
    return SL_OK;
}

static int conv(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t in[3] = {-1, -1, -1}, t;
    sl__value *w, *b = in_val(m, nd, 2);
    int64_t group = sl__attr_i(nd, "group", 1), wk[2];
    uint32_t shape[3];
    char attrs[ATTRS];
    size_t o;
    int rc;
    if ((rc = act(m, nd, 0, &in[0])) != SL_OK)
        return rc;
    if ((w = cst(m, nd, 1)) == NULL)
        return SL_EUNSUPPORTED;
    if (w->c.ndim != (size_t)m->t[in[0]].ndim + 1 || w->c.ndim < 3)
        return sl__imp_unsupported(m, nd, "weights of %u axes for a %u-axis sample", w->c.ndim,
                                   m->t[in[0]].ndim);
    wk[0] = w->c.dims[2];
    wk[1] = w->c.ndim > 3 ? w->c.dims[3] : 1;
    if ((rc = window(m, nd, &m->t[in[0]], wk, 1, attrs, sizeof attrs, shape)) != SL_OK)
        return rc;
    if (group < 1 || group > 65536)
        return sl__imp_unsupported(m, nd, "group %lld", (long long)group);
    if (group != 1) {
        o = strlen(attrs);
        snprintf(attrs + o, sizeof attrs - o, ", \"group\": %lld", (long long)group);
    }
    if ((rc = sl__param(m, nd, w, NULL, 0, NULL, 0, &in[1])) != SL_OK)
        return rc;
    shape[0] = (uint32_t)w->c.dims[0];
    if (b != NULL) {
        if (b->kind != SL__V_CONST || b->c.count != shape[0])
            return sl__imp_unsupported(m, nd, "B must be a bias of %u values", shape[0]);
        if ((rc = sl__param(m, nd, b, shape, 1, NULL, 0, &in[2])) != SL_OK)
            return rc;
    }
    if ((rc = out_t(m, nd, 0, shape, m->t[in[0]].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Conv", nd, in, b != NULL ? 3 : 2, &t, 1, attrs);
}

static int pool(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t x, t;
    uint32_t shape[3];
    char attrs[ATTRS];
    int avg = is(nd, "AveragePool"), rc;
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    if (sl__attr_i(nd, "ceil_mode", 0) != 0)
        return sl__imp_unsupported(m, nd, "ceil_mode=1");
    if (sl__attr_i(nd, "storage_order", 0) != 0 || !unused_from(m, nd, 1))
        return sl__imp_unsupported(m, nd, "the indices output");
    if ((rc = window(m, nd, &m->t[x], NULL, 0, attrs, sizeof attrs, shape)) != SL_OK)
        return rc;
    if (avg && sl__attr_i(nd, "count_include_pad", 0) != 0) {
        size_t o = strlen(attrs);
        snprintf(attrs + o, sizeof attrs - o, ", \"count_include_pad\": 1");
    }
    shape[0] = m->t[x].shape[0];
    if ((rc = out_t(m, nd, 0, shape, m->t[x].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, nd->op_type, nd, &x, 1, &t, 1, attrs);
}

static int global_avg(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t x, t;
    uint32_t shape[6];
    int rc;
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    if (m->t[x].ndim < 2)
        return sl__imp_unsupported(m, nd, "input must be [N, C, ...]");
    shape[0] = m->t[x].shape[0];
    for (size_t d = 1; d < m->t[x].ndim; d++)
        shape[d] = 1;
    if ((rc = out_t(m, nd, 0, shape, m->t[x].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "GlobalAveragePool", nd, &x, 1, &t, 1, "");
}

static int reduce_mean(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t x, t;
    int64_t axes[SL__ONNX_RANK], keep = sl__attr_i(nd, "keepdims", 1);
    uint8_t mark[SL__ONNX_RANK] = {0};
    uint32_t shape[6];
    size_t na = 0, r, k = 0;
    char attrs[ATTRS];
    int rc;
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    r = m->t[x].ndim;
    if (axes_of(m, nd, axes, &na) != SL_OK || na == 0)
        return sl__imp_unsupported(m, nd, "axes must be given");
    for (size_t i = 0; i < na; i++) {
        size_t ax;
        if (norm_axis(axes[i], r + 1, &ax) != SL_OK || ax == 0 || mark[ax - 1]++)
            return sl__imp_unsupported(m, nd, "axes %lld (the batch, or out of range)",
                                       (long long)axes[i]);
        axes[i] = (int64_t)ax - 1;
    }
    for (size_t d = 0; d < r; d++)
        if (!mark[d] || keep)
            shape[k++] = mark[d] ? 1 : m->t[x].shape[d];
    if (k == 0)
        shape[k++] = 1;
    k = ints_json(attrs, sizeof attrs, "axes", axes, na);
    if (!keep)
        snprintf(attrs + k, sizeof attrs - k, ", \"keepdims\": 0");
    {
        size_t n = 0;
        for (size_t d = 0; d < r; d++)
            if (!mark[d] || keep)
                n++;
        if ((rc = out_t(m, nd, 0, shape, n ? n : 1, &t)) != SL_OK)
            return rc;
    }
    return sl__emit(m, "ReduceMean", nd, &x, 1, &t, 1, attrs);
}

/* ---- shapes ------------------------------------------------------------------------------- */

static int flatten(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t x, t;
    uint32_t n = 1;
    int64_t axis = sl__attr_i(nd, "axis", 1);
    int rc;
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    if (axis != 1 && axis != -(int64_t)m->t[x].ndim)
        return sl__imp_unsupported(m, nd, "axis %lld mixes the batch with other axes",
                                   (long long)axis);
    for (size_t d = 0; d < m->t[x].ndim; d++)
        n *= m->t[x].shape[d];
    if ((rc = out_t(m, nd, 0, &n, 1, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Flatten", nd, &x, 1, &t, 1, "");
}

static int reshape(sl__imp *m, const Onnx__NodeProto *nd)
{
    sl__value *sv = in_val(m, nd, 1);
    int64_t s[SL__ONNX_RANK];
    uint32_t shape[6];
    uint64_t count = 1, known = 1;
    size_t n = 0;
    int32_t x, t;
    int free_at = -1, rc, allowzero = (int)sl__attr_i(nd, "allowzero", 0);
    char attrs[ATTRS];
    if (sv == NULL || sv->kind != SL__V_CONST ||
        sl__const_ints(&sv->c, s, SL__ONNX_RANK, &n) != SL_OK || n < 2 || n > 6)
        return sl__imp_unsupported(m, nd, "the target shape must be constant, 2 to 6 axes");
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    for (size_t d = 0; d < m->t[x].ndim; d++)
        count *= m->t[x].shape[d];
    if (!(s[0] == SL__BATCH || (s[0] == 0 && !allowzero) ||
          (m->fixed_batch > 0 && s[0] == m->fixed_batch) || s[0] == -1))
        return sl__imp_unsupported(m, nd, "the first axis of the new shape is not the batch");
    for (size_t d = 1; d < n; d++) {
        int64_t v = s[d];
        if (v == 0 && !allowzero) {
            if (d - 1 >= m->t[x].ndim)
                return sl__imp_unsupported(m, nd, "0 copies an axis the input lacks");
            v = m->t[x].shape[d - 1];
        }
        if (v == -1 && free_at < 0 && s[0] != -1) {
            free_at = (int)d - 1;
            continue;
        }
        if (v <= 0 || v > (1 << 24))
            return sl__imp_unsupported(m, nd, "target axis %zu is %lld", d, (long long)s[d]);
        shape[d - 1] = (uint32_t)v;
        known *= (uint64_t)v;
    }
    if (known == 0 || count % known != 0 || (free_at < 0 && known != count))
        return sl__imp_unsupported(m, nd, "%llu values per sample do not make the new shape",
                                   (unsigned long long)count);
    if (free_at >= 0)
        shape[free_at] = (uint32_t)(count / known);
    if (n == 2 && free_at == 0) { /* x.view(N, -1) */
        if ((rc = out_t(m, nd, 0, shape, 1, &t)) != SL_OK)
            return rc;
        return sl__emit(m, "Flatten", nd, &x, 1, &t, 1, "");
    }
    for (size_t d = 1; d < n; d++)
        s[d - 1] = s[d] == SL__BATCH ? -1 : s[d];
    ints_json(attrs, sizeof attrs, "shape", s, n - 1);
    if ((rc = out_t(m, nd, 0, shape, n - 1, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Reshape", nd, &x, 1, &t, 1, attrs);
}

static int transpose(sl__imp *m, const Onnx__NodeProto *nd)
{
    const Onnx__AttributeProto *pa = sl__attr(nd, "perm");
    sl__value *x = in_val(m, nd, 0), *y = sl__val(m, nd->output[0]);
    sl__view v;
    uint8_t seen[SL__ONNX_RANK] = {0};
    if (x == NULL || x->kind != SL__V_ACT)
        return sl__imp_unsupported(m, nd, "input 0 must be computed from the model's input");
    v = x->a;
    for (size_t j = 0; j < x->a.rank; j++) {
        int64_t p = pa ? (j < pa->n_ints ? pa->ints[j] : -1) : (int64_t)(x->a.rank - 1 - j);
        if (pa && pa->n_ints != x->a.rank)
            p = -1;
        if (p < 0 || p >= x->a.rank || seen[p]++)
            return sl__imp_unsupported(m, nd, "perm is not a permutation of the %u axes",
                                       x->a.rank);
        v.map[j] = x->a.map[p];
    }
    if (y != NULL) {
        sl__const_free(&y->c);
        y->kind = SL__V_ACT;
        y->a = v;
    }
    return SL_OK;
}

static int squeeze(sl__imp *m, const Onnx__NodeProto *nd)
{
    sl__value *x = in_val(m, nd, 0), *y = sl__val(m, nd->output[0]);
    int64_t axes[SL__ONNX_RANK];
    uint8_t mark[SL__ONNX_RANK] = {0};
    size_t na = 0, all_units = 1;
    int unsq = is(nd, "Unsqueeze");
    sl__view v;
    if (x == NULL || x->kind != SL__V_ACT)
        return sl__imp_unsupported(m, nd, "input 0 must be computed from the model's input");
    if (axes_of(m, nd, axes, &na) != SL_OK || na == 0)
        return sl__imp_unsupported(m, nd, "axes must be given");
    if (unsq) {
        size_t r = x->a.rank + na, j = 0;
        if (r > SL__ONNX_RANK)
            return sl__imp_unsupported(m, nd, "more than %d axes", SL__ONNX_RANK);
        for (size_t i = 0; i < na; i++) {
            size_t ax;
            if (norm_axis(axes[i], r, &ax) != SL_OK || mark[ax]++)
                return sl__imp_unsupported(m, nd, "bad axes");
        }
        v.t = x->a.t;
        v.rank = (uint8_t)r;
        for (size_t d = 0; d < r; d++)
            v.map[d] = mark[d] ? SL__AX_UNIT : x->a.map[j++];
    } else {
        size_t j = 0;
        for (size_t i = 0; i < na; i++) {
            size_t ax;
            if (norm_axis(axes[i], x->a.rank, &ax) != SL_OK || mark[ax]++ ||
                x->a.map[ax] == SL__AX_BATCH)
                return sl__imp_unsupported(m, nd, "bad axes (or the batch)");
            all_units &= x->a.map[ax] == SL__AX_UNIT;
        }
        if (!all_units) { /* a real axis of size 1: the spec's Squeeze */
            int32_t in, t;
            uint32_t shape[6];
            char attrs[ATTRS];
            int64_t sa[SL__ONNX_RANK];
            size_t k = 0;
            int rc;
            if ((rc = sl__materialize(m, nd, x, &in)) != SL_OK)
                return rc;
            for (size_t d = 1; d < x->a.rank; d++) {
                if (mark[d]) {
                    if (m->t[in].shape[d - 1] != 1)
                        return sl__imp_unsupported(m, nd, "axis %zu is not 1 long", d);
                    sa[j++] = (int64_t)d - 1;
                } else {
                    shape[k++] = m->t[in].shape[d - 1];
                }
            }
            if (k == 0)
                return sl__imp_unsupported(m, nd, "squeezing every axis of the sample");
            ints_json(attrs, sizeof attrs, "axes", sa, j);
            if ((rc = out_t(m, nd, 0, shape, k, &t)) != SL_OK)
                return rc;
            return sl__emit(m, "Squeeze", nd, &in, 1, &t, 1, attrs);
        }
        v.t = x->a.t;
        for (size_t d = 0; d < x->a.rank; d++)
            if (!mark[d])
                v.map[j++] = x->a.map[d];
        v.rank = (uint8_t)j;
    }
    if (y != NULL) {
        sl__const_free(&y->c);
        y->kind = SL__V_ACT;
        y->a = v;
    }
    return SL_OK;
}

static int concat(sl__imp *m, const Onnx__NodeProto *nd)
{
    int32_t in[16], t;
    uint32_t shape[6];
    size_t ax;
    int rc;
    if (nd->n_input < 2 || nd->n_input > 16)
        return sl__imp_unsupported(m, nd, "2 to 16 inputs");
    for (size_t k = 0; k < nd->n_input; k++)
        if ((rc = act(m, nd, k, &in[k])) != SL_OK)
            return rc;
    if (norm_axis(sl__attr_i(nd, "axis", 0), (size_t)m->t[in[0]].ndim + 1, &ax) != SL_OK || ax == 0)
        return sl__imp_unsupported(m, nd, "axis is the batch or out of range");
    memcpy(shape, m->t[in[0]].shape, m->t[in[0]].ndim * sizeof *shape);
    shape[ax - 1] = 0;
    for (size_t k = 0; k < nd->n_input; k++) {
        const sl__stensor *x = &m->t[in[k]];
        if (x->ndim != m->t[in[0]].ndim)
            return sl__imp_unsupported(m, nd, "inputs of different ranks");
        shape[ax - 1] += x->shape[ax - 1];
    }
    {
        char attrs[64];
        snprintf(attrs, sizeof attrs, "\"axis\": %zu", ax - 1);
        if ((rc = out_t(m, nd, 0, shape, m->t[in[0]].ndim, &t)) != SL_OK)
            return rc;
        return sl__emit(m, "Concat", nd, in, nd->n_input, &t, 1, attrs);
    }
}

static int64_t clamp32(int64_t v)
{
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v;
}

static int slice(sl__imp *m, const Onnx__NodeProto *nd)
{
    int64_t st[SL__ONNX_RANK], en[SL__ONNX_RANK], ax[SL__ONNX_RANK], sp[SL__ONNX_RANK];
    int64_t os[SL__ONNX_RANK], oe[SL__ONNX_RANK], oa[SL__ONNX_RANK], osp[SL__ONNX_RANK];
    size_t n = 0, ne = 0, na = 0, nsp = 0, k = 0, o;
    sl__value *vs[4];
    int32_t x, t;
    uint32_t shape[6];
    int any_step = 0, rc;
    char attrs[ATTRS];
    for (size_t i = 0; i < 4; i++)
        vs[i] = in_val(m, nd, i + 1);
    if (vs[0] == NULL || vs[1] == NULL || sl__const_ints(&vs[0]->c, st, 8, &n) != SL_OK ||
        sl__const_ints(&vs[1]->c, en, 8, &ne) != SL_OK || n != ne ||
        (vs[2] && (sl__const_ints(&vs[2]->c, ax, 8, &na) != SL_OK || na != n)) ||
        (vs[3] && (sl__const_ints(&vs[3]->c, sp, 8, &nsp) != SL_OK || nsp != n)))
        return sl__imp_unsupported(m, nd, "starts, ends, axes and steps must be constant");
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    memcpy(shape, m->t[x].shape, m->t[x].ndim * sizeof *shape);
    for (size_t i = 0; i < n; i++) {
        size_t a;
        int64_t step = vs[3] ? sp[i] : 1, d, b, e;
        if (norm_axis(vs[2] ? ax[i] : (int64_t)i, (size_t)m->t[x].ndim + 1, &a) != SL_OK)
            return sl__imp_unsupported(m, nd, "axes out of range");
        if (a == 0) { /* the batch: only x[:] */
            if (st[i] != 0 || en[i] < INT32_MAX || step != 1)
                return sl__imp_unsupported(m, nd, "slicing the batch");
            continue;
        }
        if (step < 1 || step > (1 << 20))
            return sl__imp_unsupported(m, nd, "step %lld", (long long)step);
        d = m->t[x].shape[a - 1];
        b = st[i] < 0 ? st[i] + d : st[i];
        e = en[i] < 0 ? en[i] + d : en[i];
        b = b < 0 ? 0 : b > d ? d : b;
        e = e < 0 ? 0 : e > d ? d : e;
        if (e <= b)
            return sl__imp_unsupported(m, nd, "an empty slice");
        shape[a - 1] = (uint32_t)((e - b + step - 1) / step);
        os[k] = clamp32(st[i]);
        oe[k] = clamp32(en[i]);
        oa[k] = (int64_t)a - 1;
        osp[k] = step;
        any_step |= step != 1;
        k++;
    }
    if (k == 0)
        return alias(m, nd);
    o = ints_json(attrs, sizeof attrs, "starts", os, k);
    o = sep(attrs, sizeof attrs, o);
    o += ints_json(attrs + o, sizeof attrs - o, "ends", oe, k);
    o = sep(attrs, sizeof attrs, o);
    o += ints_json(attrs + o, sizeof attrs - o, "axes", oa, k);
    if (any_step) {
        o = sep(attrs, sizeof attrs, o);
        ints_json(attrs + o, sizeof attrs - o, "steps", osp, k);
    }
    if ((rc = out_t(m, nd, 0, shape, m->t[x].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Slice", nd, &x, 1, &t, 1, attrs);
}

static int gather(sl__imp *m, const Onnx__NodeProto *nd)
{
    sl__value *data = in_val(m, nd, 0), *ix = in_val(m, nd, 1);
    int32_t in[2], t;
    uint32_t shape[6];
    size_t ax, k = 0, r;
    char attrs[ATTRS];
    int rc;
    if (data != NULL && data->kind == SL__V_CONST && ix != NULL && ix->kind == SL__V_ACT) {
        /* an embedding: weights [V, D] indexed by an int64 input */
        if (sl__attr_i(nd, "axis", 0) != 0 || data->c.ndim != 2 || cst(m, nd, 0) == NULL)
            return sl__imp_unsupported(m, nd, "only an embedding table [V, D] on axis 0");
        if ((rc = sl__materialize(m, nd, ix, &in[0])) != SL_OK ||
            (rc = sl__param(m, nd, data, NULL, 0, "{\"kind\": \"normal\", \"mean\": 0, \"std\": 1}",
                            0, &in[1])) != SL_OK)
            return rc;
        r = m->t[in[0]].ndim;
        if (r + 1 > 5)
            return sl__imp_unsupported(m, nd, "more than 5 axes");
        memcpy(shape, m->t[in[0]].shape, r * sizeof *shape);
        shape[r] = (uint32_t)data->c.dims[1];
        if ((rc = out_t(m, nd, 0, shape, r + 1, &t)) != SL_OK)
            return rc;
        return sl__emit(m, "Embedding", nd, in, 2, &t, 1, "");
    }
    if (ix == NULL || ix->kind != SL__V_CONST || ix->c.dtype != SL__DT_INT64 || ix->c.ndim > 1 ||
        ix->c.count < 1 || ix->c.count > 16)
        return sl__imp_unsupported(m, nd, "indices must be 1 to 16 constant integers");
    if ((rc = act(m, nd, 0, &in[0])) != SL_OK)
        return rc;
    r = m->t[in[0]].ndim;
    if (norm_axis(sl__attr_i(nd, "axis", 0), r + 1, &ax) != SL_OK || ax == 0)
        return sl__imp_unsupported(m, nd, "axis is the batch or out of range");
    for (size_t i = 0; i < ix->c.count; i++)
        if (ix->c.i[i] < -(int64_t)m->t[in[0]].shape[ax - 1] ||
            ix->c.i[i] >= (int64_t)m->t[in[0]].shape[ax - 1])
            return sl__imp_unsupported(m, nd, "index %lld out of range", (long long)ix->c.i[i]);
    for (size_t d = 0; d < r; d++) {
        if (d != ax - 1)
            shape[k++] = m->t[in[0]].shape[d];
        else if (ix->c.ndim == 1)
            shape[k++] = (uint32_t)ix->c.count;
    }
    if (k == 0)
        return sl__imp_unsupported(m, nd, "one index of a one-axis sample");
    if (ix->c.ndim == 0) {
        snprintf(attrs, sizeof attrs, "\"axis\": %zu, \"indices\": %lld", ax - 1,
                 (long long)ix->c.i[0]);
    } else {
        size_t o = (size_t)snprintf(attrs, sizeof attrs, "\"axis\": %zu, ", ax - 1);
        ints_json(attrs + o, sizeof attrs - o, "indices", ix->c.i, ix->c.count);
    }
    if ((rc = out_t(m, nd, 0, shape, k, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "Gather", nd, in, 1, &t, 1, attrs);
}

static int pad(sl__imp *m, const Onnx__NodeProto *nd)
{
    const Onnx__AttributeProto *pa = sl__attr(nd, "pads");
    sl__value *pv = in_val(m, nd, 1), *cv = in_val(m, nd, 2);
    int64_t p[16];
    size_t n = 0;
    double value = 0;
    if (!attr_s_is(nd, "mode", "constant", 1))
        return sl__imp_unsupported(m, nd, "a mode other than constant");
    if (pa != NULL && pa->n_ints <= 16) {
        if (pa->n_ints > 0)
            memcpy(p, pa->ints, pa->n_ints * sizeof *p);
        n = pa->n_ints;
    } else if (pv == NULL || pv->kind != SL__V_CONST || sl__const_ints(&pv->c, p, 16, &n)) {
        return sl__imp_unsupported(m, nd, "pads must be constant");
    }
    if (cv != NULL && (cv->kind != SL__V_CONST || sl__const_scalar(&cv->c, &value) != SL_OK))
        return sl__imp_unsupported(m, nd, "constant_value must be constant");
    for (size_t k = 0; k < n; k++)
        if (p[k] != 0)
            return sl__imp_unsupported(m, nd, "non-zero pads (pad inside Conv or the pool)");
    return alias(m, nd);
}

/* ---- normalisation ------------------------------------------------------------------------ */

static int batchnorm(sl__imp *m, const Onnx__NodeProto *nd)
{
    static const char *const init[4] = {
        "{\"kind\": \"constant\", \"value\": 1}", "{\"kind\": \"constant\", \"value\": 0}",
        "{\"kind\": \"constant\", \"value\": 0}", "{\"kind\": \"constant\", \"value\": 1}"};
    int32_t in[5], t;
    float eps = sl__attr_f(nd, "epsilon", 1e-5f), mom = sl__attr_f(nd, "momentum", 0.9f);
    char attrs[ATTRS] = "", num[32];
    size_t o = 0;
    int rc;
    if (nd->n_input != 5)
        return sl__imp_unsupported(m, nd, "5 inputs wanted");
    if (!unused_from(m, nd, 1))
        return sl__imp_unsupported(m, nd, "the running statistics are read as outputs");
    if ((rc = act(m, nd, 0, &in[0])) != SL_OK)
        return rc;
    if (m->t[in[0]].ndim < 1)
        return sl__imp_unsupported(m, nd, "input must be [N, C, ...]");
    for (size_t k = 1; k < 5; k++) {
        sl__value *v = cst(m, nd, k);
        uint32_t c = m->t[in[0]].shape[0];
        if (v == NULL)
            return SL_EUNSUPPORTED;
        if (v->c.count != c)
            return sl__imp_unsupported(m, nd, "input %zu does not hold %u channels", k, c);
        if ((rc = sl__param(m, nd, v, &c, 1, init[k - 1], k >= 3, &in[k])) != SL_OK)
            return rc;
    }
    if (eps != 1e-5f) {
        sl__fmt_float(eps, num, sizeof num);
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"epsilon\": %s", num);
    }
    {
        /* PyTorch's momentum; 1 - m in float carries noise ("0.100000024"): 6 digits */
        char six[32];
        snprintf(six, sizeof six, "%.6g", 1.0 - (double)mom);
        if (strtof(six, NULL) != 0.1f) {
            o = sep(attrs, sizeof attrs, o);
            snprintf(attrs + o, sizeof attrs - o, "\"momentum\": %s", six);
        }
    }
    if ((rc = out_t(m, nd, 0, m->t[in[0]].shape, m->t[in[0]].ndim, &t)) != SL_OK)
        return rc;
    return sl__emit(m, "BatchNormalization", nd, in, 5, &t, 1, attrs);
}

/* Spec LayerNormalization of @x over the axes from @axis (a sample axis, or negative). */
static int emit_ln(sl__imp *m, const Onnx__NodeProto *nd, int32_t x, int64_t axis, float eps,
                   sl__value *scale, sl__value *bias, const char *out_name)
{
    int32_t in[3] = {x, -1, -1}, t;
    uint32_t norm[6];
    size_t first, nn = 0;
    char attrs[ATTRS] = "", num[32];
    size_t o = 0;
    int rc;
    if (norm_axis(axis, m->t[x].ndim, &first) != SL_OK)
        return sl__imp_unsupported(m, nd, "axis out of range");
    for (size_t d = first; d < m->t[x].ndim; d++)
        norm[nn++] = m->t[x].shape[d];
    {
        uint64_t count = 1;
        for (size_t d = 0; d < nn; d++)
            count *= norm[d];
        if (scale->c.count != count || (bias && bias->c.count != count))
            return sl__imp_unsupported(m, nd, "scale and bias must hold %llu values",
                                       (unsigned long long)count);
    }
    if ((rc = sl__param(m, nd, scale, norm, nn, "{\"kind\": \"constant\", \"value\": 1}", 0,
                        &in[1])) != SL_OK)
        return rc;
    if (bias && (rc = sl__param(m, nd, bias, norm, nn, "{\"kind\": \"constant\", \"value\": 0}", 0,
                                &in[2])) != SL_OK)
        return rc;
    if (axis != -1) {
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"axis\": %lld", (long long)axis);
    }
    if (eps != 1e-5f) {
        sl__fmt_float(eps, num, sizeof num);
        o = sep(attrs, sizeof attrs, o);
        snprintf(attrs + o, sizeof attrs - o, "\"epsilon\": %s", num);
    }
    if ((rc = sl__tensor_new(m, out_name, m->t[x].shape, m->t[x].ndim, &t)) != SL_OK)
        return rc;
    sl__set_act(m, out_name, t);
    return sl__emit(m, "LayerNormalization", nd, in, bias ? 3 : 2, &t, 1, attrs);
}

static int layernorm(sl__imp *m, const Onnx__NodeProto *nd)
{
    sl__value *scale, *bias = in_val(m, nd, 2);
    int64_t axis = sl__attr_i(nd, "axis", -1);
    int32_t x;
    int rc;
    if (!unused_from(m, nd, 1))
        return sl__imp_unsupported(m, nd, "Mean or InvStdDev is read");
    if ((rc = act(m, nd, 0, &x)) != SL_OK)
        return rc;
    if ((scale = cst(m, nd, 1)) == NULL || (bias != NULL && cst(m, nd, 2) == NULL))
        return SL_EUNSUPPORTED;
    if (axis == 0 || axis < -(int64_t)m->t[x].ndim)
        return sl__imp_unsupported(m, nd, "normalising over the batch");
    return emit_ln(m, nd, x, axis > 0 ? axis - 1 : axis, sl__attr_f(nd, "epsilon", 1e-5f), scale,
                   bias, nd->output[0]);
}

/* ---- decompositions ----------------------------------------------------------------------- */

/* The only node reading @name, when exactly one does; -1 otherwise. */
static int32_t sole_user(sl__imp *m, const char *name)
{
    const sl__value *v = sl__val(m, name);
    if (v == NULL || v->nuse != 1 || v->graph_output)
        return -1;
    return v->use[0];
}

/* Node @k is op @op with one input @x (by name) and the other a scalar near @c: its index. */
static int32_t binop_with(sl__imp *m, int32_t k, const char *op, const char *x, double c,
                          int *x_first)
{
    const Onnx__NodeProto *nd;
    if (k < 0)
        return -1;
    nd = m->g->node[k];
    if (!is(nd, op) || nd->n_input != 2 || nd->n_output < 1)
        return -1;
    for (int side = 0; side < 2; side++) {
        sl__value *other = sl__val(m, nd->input[1 - side]);
        double v;
        if (strcmp(nd->input[side], x) != 0 || other == NULL || other->kind != SL__V_CONST ||
            sl__const_scalar(&other->c, &v) != SL_OK)
            continue;
        if (isnan(c) || fabs(v - c) <= 1e-4 * fabs(c)) {
            if (x_first)
                *x_first = side == 0;
            return k;
        }
    }
    return -1;
}

/* GELU, as torch writes it: y = (x * (erf(x / sqrt 2) + 1)) * 0.5, matched at the Div. */
static int try_gelu(sl__imp *m, size_t k)
{
    const Onnx__NodeProto *div = m->g->node[k], *erf, *add, *mul1, *mul2;
    int32_t e, a, m1, m2, x;
    const char *xn = div->input[0];
    int rc;
    if (binop_with(m, (int32_t)k, "Div", xn, sqrt(2.0), NULL) < 0)
        return 0;
    e = sole_user(m, div->output[0]);
    if (e < 0 || !is_n(m->g->node[e], "Erf", 1))
        return 0;
    erf = m->g->node[e];
    a = binop_with(m, sole_user(m, erf->output[0]), "Add", erf->output[0], 1.0, NULL);
    if (a < 0)
        return 0;
    add = m->g->node[a];
    m1 = sole_user(m, add->output[0]);
    if (m1 < 0 || !is_n(m->g->node[m1], "Mul", 2))
        return 0;
    mul1 = m->g->node[m1];
    if (!((strcmp(mul1->input[0], xn) == 0 && strcmp(mul1->input[1], add->output[0]) == 0) ||
          (strcmp(mul1->input[1], xn) == 0 && strcmp(mul1->input[0], add->output[0]) == 0)))
        return 0;
    m2 = binop_with(m, sole_user(m, mul1->output[0]), "Mul", mul1->output[0], 0.5, NULL);
    if (m2 < 0)
        return 0;
    mul2 = m->g->node[m2];
    if ((rc = act(m, div, 0, &x)) != SL_OK)
        return rc;
    m->skip[e] = m->skip[a] = m->skip[m1] = m->skip[m2] = 1;
    {
        int32_t t;
        if ((rc = sl__tensor_new(m, mul2->output[0], m->t[x].shape, m->t[x].ndim, &t)) != SL_OK)
            return rc;
        sl__set_act(m, mul2->output[0], t);
        if ((rc = sl__emit(m, "Gelu", mul2, &x, 1, &t, 1, "")) != SL_OK)
            return rc;
    }
    return 1;
}

/* LayerNormalization at opset 13: ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div,
 * Mul scale, Add bias; matched at the first ReduceMean. */
static int try_layernorm(sl__imp *m, size_t k)
{
    const Onnx__NodeProto *rm = m->g->node[k], *sub, *pw, *rm2, *add, *sq, *dv, *mul, *ad2 = NULL;
    const sl__value *xv = in_val(m, rm, 0);
    int64_t axes[SL__ONNX_RANK], axes2[SL__ONNX_RANK];
    size_t na = 0, na2 = 0;
    int32_t i, x;
    sl__value *scale = NULL, *bias = NULL;
    double eps;
    int rc;
    if (xv == NULL || xv->kind != SL__V_ACT || rm->n_output < 1 ||
        axes_of(m, rm, axes, &na) != SL_OK || na == 0)
        return 0;
    i = sole_user(m, rm->output[0]);
    if (i < 0 || !is_n(m->g->node[i], "Sub", 2) ||
        strcmp(m->g->node[i]->input[0], rm->input[0]) != 0)
        return 0;
    sub = m->g->node[i];
    {
        const sl__value *d = sl__val(m, sub->output[0]);
        int32_t u0, u1;
        if (d == NULL || d->nuse != 2 || d->graph_output)
            return 0;
        u0 = d->use[0];
        u1 = d->use[1];
        if (is(m->g->node[u0], "Div")) {
            int32_t tmp = u0;
            u0 = u1;
            u1 = tmp;
        }
        if (binop_with(m, u0, "Pow", sub->output[0], 2.0, NULL) < 0 ||
            !is_n(m->g->node[u1], "Div", 2))
            return 0;
        pw = m->g->node[u0];
        dv = m->g->node[u1];
    }
    i = sole_user(m, pw->output[0]);
    if (i < 0 || !is_n(m->g->node[i], "ReduceMean", 0))
        return 0;
    rm2 = m->g->node[i];
    if (axes_of(m, rm2, axes2, &na2) != SL_OK || na2 != na ||
        memcmp(axes, axes2, na * sizeof *axes) != 0)
        return 0;
    i = sole_user(m, rm2->output[0]);
    if (binop_with(m, i, "Add", rm2->output[0], NAN, NULL) < 0)
        return 0;
    add = m->g->node[i];
    {
        sl__value *ev = sl__val(m, add->input[strcmp(add->input[0], rm2->output[0]) == 0 ? 1 : 0]);
        if (sl__const_scalar(&ev->c, &eps) != SL_OK || !(eps > 0) || eps > 1)
            return 0;
    }
    i = sole_user(m, add->output[0]);
    if (i < 0 || !is_n(m->g->node[i], "Sqrt", 1))
        return 0;
    sq = m->g->node[i];
    i = sole_user(m, sq->output[0]);
    if (i < 0 || m->g->node[i] != dv)
        return 0;
    if (strcmp(dv->input[0], sub->output[0]) != 0 || strcmp(dv->input[1], sq->output[0]) != 0)
        return 0;
    i = sole_user(m, dv->output[0]);
    if (i < 0 || !is_n(m->g->node[i], "Mul", 2))
        return 0;
    mul = m->g->node[i];
    scale = sl__val(m, mul->input[strcmp(mul->input[0], dv->output[0]) == 0 ? 1 : 0]);
    if (scale == NULL || scale->kind != SL__V_CONST || scale->c.dtype != SL__DT_FLOAT ||
        scale->c.nsrc == 0)
        return 0;
    i = sole_user(m, mul->output[0]);
    if (i >= 0 && is_n(m->g->node[i], "Add", 2)) {
        const Onnx__NodeProto *cand = m->g->node[i];
        sl__value *b = sl__val(m, cand->input[strcmp(cand->input[0], mul->output[0]) == 0 ? 1 : 0]);
        if (b != NULL && b->kind == SL__V_CONST && b->c.dtype == SL__DT_FLOAT && b->c.nsrc > 0) {
            ad2 = cand;
            bias = b;
        }
    }
    /* the axes: the trailing ones of x */
    {
        uint8_t mark[SL__ONNX_RANK] = {0};
        size_t r = xv->a.rank, first = r - na;
        for (size_t j = 0; j < na; j++) {
            size_t ax;
            if (norm_axis(axes[j], r, &ax) != SL_OK || mark[ax]++)
                return 0;
        }
        for (size_t j = first; j < r; j++)
            if (!mark[j] || j == 0)
                return 0;
    }
    if ((rc = act(m, rm, 0, &x)) != SL_OK)
        return rc;
    for (size_t j = 0; j < m->g->n_node; j++) {
        const Onnx__NodeProto *p = m->g->node[j];
        if (p == sub || p == pw || p == rm2 || p == add || p == sq || p == dv || p == mul ||
            p == ad2)
            m->skip[j] = 1;
    }
    rc = emit_ln(m, ad2 ? ad2 : mul, x, -(int64_t)na, (float)eps, scale, bias,
                 (ad2 ? ad2 : mul)->output[0]);
    return rc == SL_OK ? 1 : rc;
}

int sl__op_known(const char *op)
{
    static const char *const ops[] = {"Gemm",
                                      "MatMul",
                                      "Add",
                                      "Sub",
                                      "Mul",
                                      "Div",
                                      "Conv",
                                      "MaxPool",
                                      "AveragePool",
                                      "GlobalAveragePool",
                                      "ReduceMean",
                                      "Flatten",
                                      "Reshape",
                                      "Transpose",
                                      "Squeeze",
                                      "Unsqueeze",
                                      "Concat",
                                      "Slice",
                                      "Gather",
                                      "Identity",
                                      "Pad",
                                      "Relu",
                                      "Sigmoid",
                                      "Tanh",
                                      "LeakyRelu",
                                      "Gelu",
                                      "Dropout",
                                      "BatchNormalization",
                                      "LayerNormalization",
                                      "GRU",
                                      "LSTM",
                                      "Constant",
                                      "ConstantOfShape",
                                      "Shape",
                                      "Cast",
                                      "Erf",
                                      "Pow",
                                      "Sqrt",
                                      NULL};
    for (size_t k = 0; ops[k] != NULL; k++)
        if (strcmp(op, ops[k]) == 0)
            return 1;
    return 0;
}

/* ---- the dispatcher ----------------------------------------------------------------------- */

int sl__translate(sl__imp *m, size_t k)
{
    const Onnx__NodeProto *nd = m->g->node[k];
    const char *op = nd->op_type;
    int rc;
    if (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") != 0)
        return sl__imp_unsupported(m, nd, "domain %.32s", nd->domain);
    if (is(nd, "Div") && (rc = try_gelu(m, k)) != 0)
        return rc < 0 ? rc : SL_OK;
    if (is(nd, "ReduceMean") && (rc = try_layernorm(m, k)) != 0)
        return rc < 0 ? rc : SL_OK;
    if (is(nd, "Gemm"))
        return gemm(m, nd);
    if (is(nd, "MatMul"))
        return matmul(m, nd);
    if (is(nd, "Add") || is(nd, "Sub") || is(nd, "Mul") || is(nd, "Div"))
        return binary(m, nd);
    if (is(nd, "Conv"))
        return conv(m, nd);
    if (is(nd, "MaxPool") || is(nd, "AveragePool"))
        return pool(m, nd);
    if (is(nd, "GlobalAveragePool"))
        return global_avg(m, nd);
    if (is(nd, "ReduceMean"))
        return reduce_mean(m, nd);
    if (is(nd, "Flatten"))
        return flatten(m, nd);
    if (is(nd, "Reshape"))
        return reshape(m, nd);
    if (is(nd, "Transpose"))
        return transpose(m, nd);
    if (is(nd, "Squeeze") || is(nd, "Unsqueeze"))
        return squeeze(m, nd);
    if (is(nd, "Concat"))
        return concat(m, nd);
    if (is(nd, "Slice"))
        return slice(m, nd);
    if (is(nd, "Gather"))
        return gather(m, nd);
    if (is(nd, "Identity"))
        return alias(m, nd);
    if (is(nd, "Pad"))
        return pad(m, nd);
    if (is(nd, "Relu") || is(nd, "Sigmoid") || is(nd, "Tanh"))
        return unary(m, nd, op, "");
    if (is(nd, "LeakyRelu")) {
        float alpha = sl__attr_f(nd, "alpha", 0.01f);
        char attrs[64] = "", num[32];
        if (alpha != 0.01f) {
            sl__fmt_float(alpha, num, sizeof num);
            snprintf(attrs, sizeof attrs, "\"alpha\": %s", num);
        }
        return unary(m, nd, "LeakyRelu", attrs);
    }
    if (is(nd, "Gelu")) {
        if (attr_s_is(nd, "approximate", "tanh", 0))
            return unary(m, nd, "Gelu", "\"approximate\": \"tanh\"");
        return unary(m, nd, "Gelu", "");
    }
    if (is(nd, "Dropout")) {
        sl__value *rv = in_val(m, nd, 1);
        double ratio = sl__attr_f(nd, "ratio", 0.5f);
        char attrs[64], num[32];
        if (!unused_from(m, nd, 1))
            return sl__imp_unsupported(m, nd, "the mask is read");
        if (rv != NULL && (rv->kind != SL__V_CONST || sl__const_scalar(&rv->c, &ratio) != SL_OK))
            return sl__imp_unsupported(m, nd, "ratio must be constant");
        if (!(ratio >= 0 && ratio <= 0.99))
            return sl__imp_unsupported(m, nd, "ratio %g", ratio);
        sl__fmt_float((float)ratio, num, sizeof num);
        snprintf(attrs, sizeof attrs, "\"ratio\": %s", num);
        return unary(m, nd, "Dropout", attrs);
    }
    if (is(nd, "BatchNormalization"))
        return batchnorm(m, nd);
    if (is(nd, "LayerNormalization"))
        return layernorm(m, nd);
    if (is(nd, "GRU") || is(nd, "LSTM"))
        return sl__rnn(m, nd);
    return sl__imp_unsupported(m, nd, "%s", "");
}
