/*
 * models.c - a model built from a spec: its layout, initialisation, forward
 * pass, loss and gradient, and the scratch memory behind them; and the
 * registry of built-in specs (the spec files of device/nn/models, compiled in).
 *
 * Two ways to run a spec. The general executor (graph.c) runs any spec.
 * A spec whose graph is [Conv -> Relu -> MaxPool 2x2]* -> Flatten ->
 * [Gemm -> Relu]* -> Gemm with the cross-entropy loss (the registry's,
 * and any that has that shape) is lowered to fused stages instead, which
 * train several times faster: a conv stage runs the convolution without
 * bias into `out`, then one fused pass bias + ReLU + pool (bias after the
 * max is the same value, so the bias is a per-plane constant). The pool
 * keeps the first maximum's position and whether the ReLU let it through,
 * which is all its backward pass needs, so `out` is free again after the
 * forward pass and holds the conv's output gradient in the backward pass.
 * The last pool writes NCHW, the flatten order of the dense layer. Both
 * ways give the same values (test_nn_models: within rounding).
 *
 * Scratch is one 64-byte aligned block sized for the largest batch seen;
 * steady-state training allocates nothing here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

#define MAX_CONV  8
#define MAX_DENSE 8

/* A spec lowered to fused stages. */
typedef struct conv_spec {
    uint32_t cin, cout, k, pad;
} conv_spec;

typedef struct dense_spec {
    uint32_t in, out;
} dense_spec;

typedef struct staged_spec {
    uint32_t nconv, ndense;
    uint32_t c, h, w; /* input sample */
    conv_spec conv[MAX_CONV];
    dense_spec dense[MAX_DENSE];
} staged_spec;

typedef struct conv_stage {
    sl__nn_conv geom;
    size_t ph, pw;       /* pooled plane */
    size_t w_off, b_off; /* in the flat parameter vector */
    float *ws;           /* conv workspace (cols or padded input) */
    float *out;          /* conv output, then its gradient (CNHW) */
    float *pool;         /* pooled output: CNHW, or NCHW for the last stage */
    uint8_t *arg;        /* pooling positions, like pool */
    float *dpool;        /* gradient of pool (not for the last stage: dflat) */
} conv_stage;

typedef struct dense_stage {
    size_t in, out, w_off, b_off;
    float *y; /* batch x out */
} dense_stage;

struct sl_model {
    sl_spec *owned; /* the spec, when the model made it (sl_model_create) */
    const sl_spec *s;
    const sl_layout *layout;
    size_t nparams, input_size, classes;
    int staged; /* 1: fused stages; 0: the general executor */
    sl__graph *graph;
    float *dout; /* graph: the output's gradient, batch x classes */
    size_t dout_cap;
    uint64_t steps; /* training steps: Dropout's seed */
    /* fused stages */
    staged_spec spec;
    conv_stage conv[MAX_CONV];
    dense_stage dense[MAX_DENSE];
    size_t cap;    /* batch the scratch is sized for */
    void *scratch; /* one block for every buffer below and in the stages */
    float *dflat;  /* gradient of the dense input (only with conv stages) */
    float *grad_a; /* dense output gradients, ping-pong */
    float *grad_b;
};

/* ------------------------------------------------------------------------ */
/* Lowering                                                                 */
/* ------------------------------------------------------------------------ */

/* 1 when node @i of @s is @op reading tensor @in (and, for Gemm and Conv, the params
 * @w and @b in order); *@out receives its output. */
static int node_is(const sl_spec *s, size_t i, sl__op op, int in, int *out)
{
    const sl__node *nd;
    if (i >= s->nn)
        return 0;
    nd = &s->n[i];
    if (nd->op != op || nd->in[0] != in || nd->nout != 1)
        return 0;
    *out = nd->out[0];
    return 1;
}

/* The fused stages of @s, when its graph has their shape. */
static int lower(const sl_spec *s, staged_spec *st)
{
    const sl__tensor *x = &s->t[s->input[0]];
    size_t i = 0, np = 0;
    int cur = s->input[0], t;
    memset(st, 0, sizeof *st);
    if (s->ninputs != 1 || x->dtype != SL__F32 || s->loss != SL__LOSS_CROSS_ENTROPY ||
        s->label_smoothing != 0.0f)
        return 0;
    for (size_t p = 0; p < s->np; p++)
        if (s->p[p].buffer || s->p[p].local)
            return 0;
    if (x->ndim == 3) {
        st->c = x->shape[0], st->h = x->shape[1], st->w = x->shape[2];
    }
    while (i < s->nn && s->n[i].op == SL__OP_CONV) {
        const sl__node *cv = &s->n[i];
        const sl__attrs *a = &cv->a;
        const sl__tensor *w;
        conv_spec *c;
        int r, p;
        if (st->nconv == MAX_CONV || x->ndim != 3 || cv->in[0] != cur || cv->nin != 3 ||
            cv->in[2] < 0 || cv->in[1] != s->p[np].tensor || cv->in[2] != s->p[np + 1].tensor ||
            a->nspatial != 2 || a->group != 1 || a->kernel[0] != a->kernel[1] ||
            a->stride[0] != 1 || a->stride[1] != 1 || a->dilation[0] != 1 || a->dilation[1] != 1 ||
            a->pad[0] != a->pad[1] || a->pad[0] != a->pad[2] || a->pad[0] != a->pad[3])
            return 0;
        /* the first stage reads the input as CNHW: one channel only */
        if (st->nconv == 0 && st->c != 1)
            return 0;
        if (!node_is(s, i + 1, SL__OP_RELU, cv->out[0], &r) ||
            !node_is(s, i + 2, SL__OP_MAXPOOL, r, &p))
            return 0;
        {
            const sl__attrs *pa = &s->n[i + 2].a;
            if (pa->kernel[0] != 2 || pa->kernel[1] != 2 || pa->stride[0] != 2 ||
                pa->stride[1] != 2 || pa->pad[0] || pa->pad[1] || pa->pad[2] || pa->pad[3])
                return 0;
        }
        w = &s->t[cv->in[1]];
        c = &st->conv[st->nconv++];
        c->cin = w->shape[1];
        c->cout = w->shape[0];
        c->k = (uint32_t)a->kernel[0];
        c->pad = (uint32_t)a->pad[0];
        cur = p;
        np += 2;
        i += 3;
    }
    if (!node_is(s, i, SL__OP_FLATTEN, cur, &t) || s->n[i].a.axis != 0)
        return 0;
    cur = t;
    i++;
    while (i < s->nn) {
        const sl__node *g = &s->n[i];
        const sl__tensor *w;
        if (st->ndense == MAX_DENSE || g->op != SL__OP_GEMM || g->in[0] != cur || g->nin != 3 ||
            g->in[2] < 0 || np + 1 >= s->np || g->in[1] != s->p[np].tensor ||
            g->in[2] != s->p[np + 1].tensor || !g->a.trans_b || g->a.alpha != 1.0f ||
            g->a.beta != 1.0f)
            return 0;
        w = &s->t[g->in[1]];
        st->dense[st->ndense].in = w->shape[1];
        st->dense[st->ndense].out = w->shape[0];
        st->ndense++;
        np += 2;
        cur = g->out[0];
        i++;
        if (i < s->nn) { /* a hidden layer: Relu, then the next Gemm */
            if (!node_is(s, i, SL__OP_RELU, cur, &t))
                return 0;
            cur = t;
            i++;
        }
    }
    return st->ndense > 0 && cur == s->output && np == s->np;
}

/* Stage geometry and offsets from the lowered spec. */
static int build_stages(sl_model *m)
{
    const staged_spec *sp = &m->spec;
    size_t c = sp->c, h = sp->h, w = sp->w, idx = 0;
    for (uint32_t i = 0; i < sp->nconv; i++) {
        const conv_spec *cs = &sp->conv[i];
        conv_stage *st = &m->conv[i];
        int rc = sl__nn_conv_init(&st->geom, cs->cin, cs->cout, h, w, cs->k, cs->pad);
        if (rc != SL_OK)
            return rc;
        st->w_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->b_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->ph = st->geom.ho / 2;
        st->pw = st->geom.wo / 2;
        c = cs->cout, h = st->ph, w = st->pw;
    }
    (void)c;
    for (uint32_t j = 0; j < sp->ndense; j++) {
        dense_stage *st = &m->dense[j];
        st->in = sp->dense[j].in, st->out = sp->dense[j].out;
        st->w_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->b_off = sl_layout_tensor(m->layout, idx++)->offset;
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

int sl_model_create_spec(const sl_spec *spec, sl_model **out, char *err, size_t errcap)
{
    sl_model *m;
    int rc = SL_OK;
    if (spec == NULL || out == NULL)
        return SL_EINVAL;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return SL_ENOMEM;
    m->s = spec;
    m->layout = spec->layout;
    m->nparams = (size_t)sl_layout_params(spec->layout);
    m->input_size = (size_t)spec->t[spec->input[0]].count;
    m->classes = (size_t)spec->t[spec->output].count;
    if (getenv("SL_NN_GENERAL") == NULL && lower(spec, &m->spec)) {
        m->staged = 1;
        rc = build_stages(m);
    } else {
        rc = sl__graph_create(spec, &m->graph, err, errcap);
    }
    if (rc != SL_OK) {
        sl_model_free(m);
        return rc;
    }
    *out = m;
    return SL_OK;
}

int sl_model_create(const char *name, sl_model **out)
{
    const char *text;
    sl_spec *spec = NULL;
    int rc;
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    text = sl__nn_builtin_spec(name);
    if (text == NULL)
        return SL_ENOENT;
    rc = sl_spec_parse(text, strlen(text), &spec, NULL, 0);
    if (rc == SL_OK)
        rc = sl_model_create_spec(spec, out, NULL, 0);
    if (rc != SL_OK) {
        sl_spec_free(spec);
        return rc;
    }
    (*out)->owned = spec;
    return SL_OK;
}

void sl_model_free(sl_model *model)
{
    if (model == NULL)
        return;
    sl__graph_free(model->graph);
    free(model->dout);
    free(model->scratch);
    sl_spec_free(model->owned);
    free(model);
}

const char *const *sl_model_names(void)
{
    return sl__nn_builtin_names();
}

const sl_spec *sl_model_spec(const sl_model *model)
{
    return model->s;
}

const char *sl_model_name(const sl_model *model)
{
    return sl_spec_name(model->s);
}

const sl_layout *sl_model_layout(const sl_model *model)
{
    return model->layout;
}

size_t sl_model_params(const sl_model *model)
{
    return model->nparams;
}

size_t sl_model_input_size(const sl_model *model)
{
    return model->input_size;
}

size_t sl_model_classes(const sl_model *model)
{
    return model->classes;
}

int sl_model_fused(const sl_model *model)
{
    return model->staged;
}

size_t sl__nn_model_convs(const sl_model *m)
{
    return m->staged ? m->spec.nconv : 0;
}

const sl__nn_conv *sl__nn_model_conv(const sl_model *m, size_t i)
{
    return m->staged && i < m->spec.nconv ? &m->conv[i].geom : NULL;
}

int sl__nn_model_set_conv_algo(sl_model *m, size_t i, sl__nn_conv_algo algo)
{
    int rc;
    if (!m->staged || i >= m->spec.nconv)
        return SL_EINVAL;
    rc = sl__nn_conv_set_algo(&m->conv[i].geom, algo);
    if (rc == SL_OK) { /* the workspace size depends on the algorithm */
        free(m->scratch);
        m->scratch = NULL;
        m->cap = 0;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Initialisation                                                           */
/* ------------------------------------------------------------------------ */

/* A standard normal draw (Box-Muller on two uniforms). */
static double normal_draw(uint64_t *rng)
{
    double u1 = ((double)(sl__nn_rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(sl__nn_rng_next(rng) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int sl_model_init(const sl_model *model, float *params, uint64_t seed)
{
    uint64_t rng = sl__nn_rng_state(seed, 0x696e6974u /* "init" */);
    const sl_spec *s;
    size_t nt;
    float bound = 0.0f;
    if (model == NULL || params == NULL)
        return SL_EINVAL;
    s = model->s;
    nt = sl_layout_tensors(model->layout);
    for (size_t i = 0; i < nt; i++) {
        const sl_tensor_desc *t = sl_layout_tensor(model->layout, i);
        const sl__param_info *pi = &s->p[i];
        float *w = params + t->offset;
        switch ((sl__init_kind)pi->init) {
        case SL__INIT_UNIFORM_FAN_IN:
            /* A weight's fan-in is everything but its first dimension; the
             * bias that follows shares it (nn.Linear / nn.Conv2d). */
            if (pi->fan_in > 0)
                bound = (float)(1.0 / sqrt((double)pi->fan_in));
            else if (t->ndim >= 2)
                bound = (float)(1.0 / sqrt((double)(t->count / t->shape[0])));
            else if (bound == 0.0f)
                bound = (float)(1.0 / sqrt((double)t->count));
            for (uint64_t e = 0; e < t->count; e++)
                w[e] = (2.0f * sl__nn_rng_unit(&rng) - 1.0f) * bound;
            break;
        case SL__INIT_UNIFORM:
            for (uint64_t e = 0; e < t->count; e++)
                w[e] = (float)(pi->a + (pi->b - pi->a) * sl__nn_rng_unit(&rng));
            break;
        case SL__INIT_NORMAL:
            for (uint64_t e = 0; e < t->count; e++)
                w[e] = (float)(pi->a + pi->b * normal_draw(&rng));
            break;
        case SL__INIT_CONSTANT:
            for (uint64_t e = 0; e < t->count; e++)
                w[e] = (float)pi->a;
            break;
        }
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Scratch                                                                  */
/* ------------------------------------------------------------------------ */

/* Hand out 64-byte aligned pieces of one block; with base NULL only count. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static void *carve(carver *cv, size_t bytes)
{
    void *p = cv->base != NULL ? cv->base + cv->used : NULL;
    cv->used += (bytes + SL__NN_ALIGN - 1) / SL__NN_ALIGN * SL__NN_ALIGN;
    return p;
}

static void layout_scratch(sl_model *m, carver *cv, size_t b)
{
    size_t widest = m->classes;
    for (uint32_t i = 0; i < m->spec.nconv; i++) {
        conv_stage *st = &m->conv[i];
        const sl__nn_conv *g = &st->geom;
        size_t pooled = g->cout * b * st->ph * st->pw;
        st->ws = carve(cv, sl__nn_conv_workspace(g, b) * sizeof(float));
        st->out = carve(cv, g->cout * b * g->ho * g->wo * sizeof(float));
        st->pool = carve(cv, pooled * sizeof(float));
        st->arg = carve(cv, pooled);
        st->dpool = i + 1 < m->spec.nconv ? carve(cv, pooled * sizeof(float)) : NULL;
    }
    for (uint32_t j = 0; j < m->spec.ndense; j++) {
        m->dense[j].y = carve(cv, b * m->dense[j].out * sizeof(float));
        widest = m->dense[j].out > widest ? m->dense[j].out : widest;
    }
    m->dflat = m->spec.nconv > 0 ? carve(cv, b * m->dense[0].in * sizeof(float)) : NULL;
    m->grad_a = carve(cv, b * widest * sizeof(float));
    m->grad_b = carve(cv, b * widest * sizeof(float));
}

static int reserve(sl_model *m, size_t batch)
{
    carver cv = {NULL, 0};
    void *block;
    if (batch <= m->cap)
        return SL_OK;
    /* Every buffer grows linearly with the batch: bound the products by
     * the one-sample size so that none of them can overflow (32-bit). */
    layout_scratch(m, &cv, 1);
    if (batch > (SIZE_MAX / 2) / cv.used)
        return SL_ENOMEM;
    cv.used = 0;
    layout_scratch(m, &cv, batch);
    block = aligned_alloc(SL__NN_ALIGN, cv.used);
    if (block == NULL)
        return SL_ENOMEM;
    free(m->scratch);
    m->scratch = block;
    m->cap = batch;
    cv.base = block;
    cv.used = 0;
    layout_scratch(m, &cv, batch);
    return SL_OK;
}

size_t sl_model_activation_bytes(sl_model *model, size_t batch)
{
    carver cv = {NULL, 0};
    size_t one, out;
    if (model == NULL || batch == 0)
        return 0;
    out = batch * model->classes * sizeof(float); /* the output's gradient */
    if (!model->staged) {
        size_t arena = sl__graph_arena_bytes(model->graph, batch);
        return arena == 0 ? 0 : arena + out;
    }
    /* sizes only (cv.base is NULL: the stages' pointers are carved again below) */
    layout_scratch(model, &cv, 1);
    one = cv.used;
    if (batch <= (SIZE_MAX / 2) / one) {
        cv.used = 0;
        layout_scratch(model, &cv, batch);
        out = cv.used;
    } else {
        out = 0;
    }
    if (model->scratch != NULL) {
        carver live = {model->scratch, 0};
        layout_scratch(model, &live, model->cap);
    }
    return out;
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */
/* ------------------------------------------------------------------------ */

/* The forward pass into scratch; the logits end in the last dense y. */
static int forward(sl_model *m, const float *params, const float *x, size_t batch)
{
    const float *act = x; /* one input channel: NCHW is CNHW */
    uint32_t nconv = m->spec.nconv, ndense = m->spec.ndense;
    int rc = reserve(m, batch);
    for (uint32_t i = 0; rc == SL_OK && i < nconv; i++) {
        conv_stage *st = &m->conv[i];
        const sl__nn_conv *g = &st->geom;
        rc = sl__nn_conv_forward(g, batch, act, params + st->w_off, NULL, st->out, st->ws);
        if (rc == SL_OK)
            sl__nn_pool_forward(st->out, g->cout, batch, g->ho, g->wo, params + st->b_off, 1,
                                i + 1 == nconv, st->pool, st->arg);
        act = st->pool;
    }
    for (uint32_t j = 0; rc == SL_OK && j < ndense; j++) {
        dense_stage *st = &m->dense[j];
        rc = sl__nn_dense_forward(act, batch, st->in, st->out, params + st->w_off,
                                  params + st->b_off, j + 1 < ndense, st->y);
        act = st->y;
    }
    return rc;
}

static int backward(sl_model *m, const float *params, const float *x, size_t batch, float *dlogits,
                    float *grad)
{
    uint32_t nconv = m->spec.nconv, ndense = m->spec.ndense;
    float *dy = dlogits;
    int rc = SL_OK;
    for (uint32_t j = ndense; rc == SL_OK && j-- > 0;) {
        dense_stage *st = &m->dense[j];
        const float *in = j > 0 ? m->dense[j - 1].y : nconv > 0 ? m->conv[nconv - 1].pool : x;
        float *dx = j > 0 ? (dy == m->grad_a ? m->grad_b : m->grad_a) : m->dflat;
        rc = sl__nn_dense_backward(in, st->y, j + 1 < ndense, dy, batch, st->in, st->out,
                                   params + st->w_off, grad + st->w_off, grad + st->b_off, dx);
        dy = dx;
    }
    for (uint32_t i = nconv; rc == SL_OK && i-- > 0;) {
        conv_stage *st = &m->conv[i];
        const sl__nn_conv *g = &st->geom;
        const float *dpooled = i + 1 == nconv ? m->dflat : st->dpool;
        sl__nn_pool_backward(dpooled, st->arg, g->cout, batch, g->ho, g->wo, i + 1 == nconv,
                             st->out, grad + st->b_off);
        rc = sl__nn_conv_backward(g, batch, i > 0 ? m->conv[i - 1].pool : x, params + st->w_off,
                                  st->out, grad + st->w_off, NULL,
                                  i > 0 ? m->conv[i - 1].dpool : NULL, st->ws);
    }
    return rc;
}

int sl_model_forward(sl_model *model, const float *params, const float *x, size_t batch,
                     float *logits)
{
    int rc;
    if (model == NULL || params == NULL || x == NULL || logits == NULL)
        return SL_EINVAL;
    if (batch == 0)
        return SL_OK;
    if (!model->staged) {
        const void *in[1] = {x};
        if (model->s->ninputs != 1)
            return SL_EINVAL;
        rc = sl__graph_forward(model->graph, params, in, batch, 0, 0);
        if (rc == SL_OK)
            memcpy(logits, sl__graph_output(model->graph), batch * model->classes * sizeof *logits);
        return rc;
    }
    rc = forward(model, params, x, batch);
    if (rc == SL_OK)
        memcpy(logits, model->dense[model->spec.ndense - 1].y,
               batch * model->classes * sizeof *logits);
    return rc;
}

/* The general executor's training step: forward, the spec's loss, backward. */
static int graph_step(sl_model *m, const float *params, const float *x, const int32_t *labels,
                      const float *targets, size_t batch, float *loss, float *grad, float *out)
{
    const void *in[1] = {x};
    double mean;
    int rc;
    if (m->s->ninputs != 1)
        return SL_EINVAL;
    if (batch > m->dout_cap) {
        float *d;
        if (batch > SIZE_MAX / sizeof(float) / (m->classes ? m->classes : 1))
            return SL_ENOMEM;
        d = realloc(m->dout, batch * m->classes * sizeof *d);
        if (d == NULL)
            return SL_ENOMEM;
        m->dout = d;
        m->dout_cap = batch;
    }
    rc = sl__graph_forward(m->graph, params, in, batch, 1, m->steps++);
    if (rc == SL_OK)
        rc = sl__loss(m->s, sl__graph_output(m->graph), batch, labels, targets, &mean, m->dout);
    if (rc == SL_OK && out != NULL)
        memcpy(out, sl__graph_output(m->graph), batch * m->classes * sizeof *out);
    if (rc == SL_OK)
        rc = sl__graph_backward(m->graph, m->dout, grad);
    if (rc == SL_OK && loss != NULL)
        *loss = (float)mean;
    return rc;
}

int sl_model_loss_grad(sl_model *model, const float *params, const float *x, const int32_t *labels,
                       size_t batch, float *loss, float *grad, float *logits)
{
    const float *z;
    double mean;
    int rc;
    if (model == NULL || params == NULL || x == NULL || labels == NULL || grad == NULL ||
        batch == 0)
        return SL_EINVAL;
    if (model->s->loss != SL__LOSS_CROSS_ENTROPY)
        return SL_EINVAL; /* its labels are targets: sl_model_loss_grad_targets() */
    for (size_t n = 0; n < batch; n++)
        if (labels[n] < 0 || (size_t)labels[n] >= model->classes)
            return SL_EINVAL;
    if (!model->staged)
        return graph_step(model, params, x, labels, NULL, batch, loss, grad, logits);
    rc = forward(model, params, x, batch);
    if (rc != SL_OK)
        return rc;
    z = model->dense[model->spec.ndense - 1].y;
    rc = sl__nn_softmax_ce(z, labels, batch, model->classes, &mean, NULL, model->grad_a);
    if (rc == SL_OK && logits != NULL)
        memcpy(logits, z, batch * model->classes * sizeof *logits);
    if (rc == SL_OK)
        rc = backward(model, params, x, batch, model->grad_a, grad);
    if (rc == SL_OK && loss != NULL)
        *loss = (float)mean;
    return rc;
}

int sl_model_loss_grad_targets(sl_model *model, const float *params, const float *x,
                               const float *targets, size_t batch, float *loss, float *grad,
                               float *outputs)
{
    if (model == NULL || params == NULL || x == NULL || targets == NULL || grad == NULL ||
        batch == 0 || model->s->loss == SL__LOSS_CROSS_ENTROPY)
        return SL_EINVAL;
    /* a lowered spec trains with cross-entropy only: this one runs on the general executor */
    return graph_step(model, params, x, NULL, targets, batch, loss, grad, outputs);
}

void sl_model_update_buffers(sl_model *model, float *params)
{
    if (model != NULL && !model->staged)
        sl__graph_update_buffers(model->graph, params);
}
