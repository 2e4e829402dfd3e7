/*
 * import_rnn.c - GRU and LSTM nodes. torch.onnx.export re-packs PyTorch's
 * weights into ONNX's gate order (GRU z, r, h for PyTorch's r, z, n; LSTM
 * i, o, f, c for i, f, g, o), adds the direction axis and joins the two
 * biases: TRAINING exports with Slice/Concat/Unsqueeze nodes (folded by
 * import_const.c), EVAL exports as new initializers. Here the order is
 * undone, B split into b_ih and b_hh, and each tensor named after the
 * initializer holding exactly those values (the state_dict's) or, failing
 * that, after the module ("/rnn/GRU" -> "rnn.weight_ih_l0").
 * batch_first: the exporter transposes X to [T, N, I] and Y back; the
 * spec's GRU reads [T, I] per sample, so those Transposes are views.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

static const int gru_perm[3] = {1, 0, 2}; /* PyTorch block j = ONNX block perm[j] */
static const int lstm_perm[4] = {0, 2, 3, 1};

static int is_zero(const sl__value *v)
{
    if (v == NULL)
        return 1;
    if (v->kind != SL__V_CONST)
        return 0;
    if (v->c.fill)
        return v->c.fillv == 0;
    for (size_t k = 0; k < v->c.count; k++)
        if (v->c.dtype == SL__DT_FLOAT ? v->c.f[k] != 0 : v->c.i[k] != 0)
            return 0;
    return 1;
}

static sl__value *opt_in(sl__imp *m, const Onnx__NodeProto *nd, size_t k)
{
    return k < nd->n_input ? sl__val(m, nd->input[k]) : NULL;
}

/* The initializer among @v's sources holding exactly @data, or -1. */
static int32_t source_of(sl__imp *m, const sl__value *v, const float *data, size_t count)
{
    for (int k = 0; v != NULL && k < v->c.nsrc; k++) {
        const sl__value *s = sl__val(m, m->g->initializer[v->c.src[k]]->name);
        if (s != NULL && s->c.dtype == SL__DT_FLOAT && s->c.count == count &&
            memcmp(s->c.f, data, count * sizeof *data) == 0)
            return v->c.src[k];
    }
    return -1;
}

static void unpermute(const float *src, float *dst, size_t gates, size_t h, size_t cols,
                      const int *perm)
{
    for (size_t j = 0; j < gates; j++)
        memcpy(dst + j * h * cols, src + (size_t)perm[j] * h * cols, h * cols * sizeof *dst);
}

/* "rnn." from "/rnn/GRU"; "" when the node has no module path. */
static void module_prefix(const char *node, char *out, size_t cap)
{
    const char *s = node ? node : "", *last;
    size_t n;
    while (*s == '/')
        s++;
    last = strrchr(s, '/');
    n = last ? (size_t)(last - s) : 0;
    if (n + 2 > cap)
        n = cap - 2;
    for (size_t k = 0; k < n; k++)
        out[k] = s[k] == '/' ? '.' : s[k];
    if (n > 0)
        out[n++] = '.';
    out[n] = '\0';
}

int sl__rnn(sl__imp *m, const Onnx__NodeProto *nd)
{
    int lstm = strcmp(nd->op_type, "LSTM") == 0, rc;
    size_t gates = lstm ? 4 : 3, h, in_size, t_len;
    const int *perm = lstm ? lstm_perm : gru_perm;
    int64_t hidden = sl__attr_i(nd, "hidden_size", 0);
    const Onnx__AttributeProto *dir = sl__attr(nd, "direction"),
                               *acts = sl__attr(nd, "activations");
    sl__value *x = opt_in(m, nd, 0), *w = opt_in(m, nd, 1), *r = opt_in(m, nd, 2),
              *b = opt_in(m, nd, 3);
    static const char *const names[4] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                         "bias_hh_l0"};
    int32_t in[5], out[3] = {-1, -1, -1};
    char prefix[SL__ONNX_NAME + 1];
    double base_key;
    if (hidden < 1 || hidden > 65536)
        return sl__imp_unsupported(m, nd, "hidden_size %lld", (long long)hidden);
    h = (size_t)hidden;
    if (dir != NULL && dir->has_s && !(dir->s.len == 7 && memcmp(dir->s.data, "forward", 7) == 0))
        return sl__imp_unsupported(m, nd, "only direction=forward (one layer, one direction)");
    if (acts != NULL) {
        static const char *const want[3] = {"Sigmoid", "Tanh", "Tanh"};
        int ok = acts->n_strings == (lstm ? 3u : 2u);
        for (size_t k = 0; ok && k < acts->n_strings; k++)
            ok = acts->strings[k].len == strlen(want[k]) &&
                 memcmp(acts->strings[k].data, want[k], acts->strings[k].len) == 0;
        if (!ok)
            return sl__imp_unsupported(m, nd, "activations other than the defaults");
    }
    if (sl__attr(nd, "clip") != NULL || sl__attr_i(nd, "layout", 0) != 0 ||
        sl__attr_i(nd, "input_forget", 0) != 0)
        return sl__imp_unsupported(m, nd, "clip, layout=1 or input_forget");
    if (!lstm && sl__attr_i(nd, "linear_before_reset", 0) != 1)
        return sl__imp_unsupported(m, nd, "linear_before_reset=0 (PyTorch's GRU has 1)");
    if (opt_in(m, nd, 4) != NULL)
        return sl__imp_unsupported(m, nd, "sequence_lens");
    if (!is_zero(opt_in(m, nd, 5)) || (lstm && !is_zero(opt_in(m, nd, 6))))
        return sl__imp_unsupported(m, nd, "a non-zero initial state");
    if (lstm && opt_in(m, nd, 7) != NULL)
        return sl__imp_unsupported(m, nd, "peepholes");
    if (x == NULL || x->kind != SL__V_ACT || x->a.rank != 3 || x->a.map[1] != SL__AX_BATCH)
        return sl__imp_unsupported(m, nd,
                                   "X must be [T, N, I] with the batch on axis 1 "
                                   "(PyTorch: batch_first=True)");
    {
        sl__value tmp = *x; /* the view with the batch first: [N, T, I] */
        tmp.a.map[0] = SL__AX_BATCH;
        tmp.a.map[1] = x->a.map[0];
        if ((rc = sl__materialize(m, nd, &tmp, &in[0])) != SL_OK)
            return rc;
    }
    t_len = m->t[in[0]].shape[0];
    in_size = m->t[in[0]].shape[1];
    if (w == NULL || w->kind != SL__V_CONST || w->c.fill || w->c.dtype != SL__DT_FLOAT ||
        w->c.ndim != 3 || w->c.dims[0] != 1 || (size_t)w->c.dims[1] != gates * h ||
        (size_t)w->c.dims[2] != in_size)
        return sl__imp_unsupported(m, nd, "W must be a float32 [1, %zu, %zu] constant", gates * h,
                                   in_size);
    if (r == NULL || r->kind != SL__V_CONST || r->c.fill || r->c.dtype != SL__DT_FLOAT ||
        r->c.ndim != 3 || r->c.dims[0] != 1 || (size_t)r->c.dims[1] != gates * h ||
        (size_t)r->c.dims[2] != h)
        return sl__imp_unsupported(m, nd, "R must be a float32 [1, %zu, %zu] constant", gates * h,
                                   h);
    if (b != NULL && (b->kind != SL__V_CONST || b->c.fill || b->c.dtype != SL__DT_FLOAT ||
                      b->c.count != 2 * gates * h))
        return sl__imp_unsupported(m, nd, "B must be a float32 [1, %zu] constant", 2 * gates * h);
    module_prefix(nd->name, prefix, sizeof prefix);
    base_key = w->c.init >= 0 ? w->c.init : w->c.nsrc > 0 ? w->c.src[0] : 1e9;
    for (size_t k = 0; k < 4; k++) {
        size_t cols = k == 0 ? in_size : k == 1 ? h : 1, count = gates * h * cols;
        const sl__value *from = k == 0 ? w : k == 1 ? r : b;
        float *data = malloc(count * sizeof *data);
        uint32_t shape[2] = {(uint32_t)(gates * h), (uint32_t)cols};
        char name[SL__ONNX_NAME + 1];
        int32_t src;
        if (data == NULL)
            return sl__imp_fail(m, SL_ENOMEM, "out of memory");
        if (from == NULL)
            memset(data, 0, count * sizeof *data);
        else
            unpermute(from->c.f + (k == 3 ? gates * h : 0), data, gates, h, cols, perm);
        src = from ? source_of(m, from, data, count) : -1;
        if (src >= 0)
            snprintf(name, sizeof name, "%s", m->g->initializer[src]->name);
        else
            snprintf(name, sizeof name, "%.100s%s", prefix, names[k]);
        if ((rc = sl__param_data(m, name, data, shape, k < 2 ? 2 : 1,
                                 src >= 0 ? src : base_key + 0.1 * (double)k, src, h,
                                 &in[1 + k])) != SL_OK)
            return rc;
    }
    {
        uint32_t yshape[2] = {(uint32_t)t_len, (uint32_t)h}, hshape[1] = {(uint32_t)h};
        const char *yname = nd->n_output > 0 && nd->output[0][0] ? nd->output[0] : nd->name;
        sl__value *yv;
        char attrs[64];
        if ((rc = sl__tensor_new(m, yname ? yname : "Y", yshape, 2, &out[0])) != SL_OK)
            return rc;
        if ((yv = nd->n_output > 0 ? sl__val(m, nd->output[0]) : NULL) != NULL) {
            sl__const_free(&yv->c);
            yv->kind = SL__V_ACT;
            yv->a.t = out[0];
            yv->a.rank = 4; /* [T, num_directions, N, H] */
            yv->a.map[0] = 0;
            yv->a.map[1] = SL__AX_UNIT;
            yv->a.map[2] = SL__AX_BATCH;
            yv->a.map[3] = 1;
        }
        for (size_t k = 1; k < nd->n_output && k < 3; k++) {
            sl__value *hv = sl__val(m, nd->output[k]);
            if (hv == NULL || !hv->needed)
                continue;
            if ((rc = sl__tensor_new(m, nd->output[k], hshape, 1, &out[k])) != SL_OK)
                return rc;
            sl__const_free(&hv->c);
            hv->kind = SL__V_ACT;
            hv->a.t = out[k];
            hv->a.rank = 3; /* [num_directions, N, H] */
            hv->a.map[0] = SL__AX_UNIT;
            hv->a.map[1] = SL__AX_BATCH;
            hv->a.map[2] = 0;
        }
        snprintf(attrs, sizeof attrs, "\"hidden_size\": %zu", h);
        return sl__emit(m, nd->op_type, nd, in, 5, out,
                        out[2] >= 0   ? 3
                        : out[1] >= 0 ? 2
                                      : 1,
                        attrs);
    }
}
