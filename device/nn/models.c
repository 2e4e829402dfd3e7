/*
 * models.c - the model registry: layouts, initialisation, forward pass,
 * loss and gradient, and the scratch memory behind them.
 *
 * Every registry model is [conv -> ReLU -> max-pool 2x2]* -> flatten ->
 * [dense -> ReLU]* -> dense. A conv stage runs as: convolution without
 * bias into `out`, then one fused pass bias + ReLU + pool (bias after the
 * max is the same value, so the bias is a per-plane constant). The pool
 * keeps the first maximum's position and whether the ReLU let it through,
 * which is all its backward pass needs, so `out` is free again after the
 * forward pass and holds the conv's output gradient in the backward pass.
 * The last pool writes NCHW, the flatten order of the dense layer.
 *
 * Scratch is one 64-byte aligned block sized for the largest batch seen;
 * steady-state training allocates nothing here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_int.h"

#define MAX_CONV  2
#define MAX_DENSE 3
#define INPUT_H   28
#define INPUT_W   28
#define CLASSES   10

typedef struct conv_spec {
    const char *name;
    uint32_t cin, cout, k, pad;
} conv_spec;

typedef struct dense_spec {
    const char *name;
    uint32_t in, out;
} dense_spec;

typedef struct model_spec {
    const char *name;
    uint32_t nconv, ndense;
    conv_spec conv[MAX_CONV];
    dense_spec dense[MAX_DENSE];
} model_spec;

static const model_spec registry[] = {
    {"logreg", 0, 1, {{NULL, 0, 0, 0, 0}}, {{"fc", 784, 10}}},
    {"mlp", 0, 3, {{NULL, 0, 0, 0, 0}}, {{"f1", 784, 200}, {"f2", 200, 200}, {"f3", 200, 10}}},
    {"lenet5",
     2,
     3,
     {{"c1", 1, 6, 5, 0}, {"c2", 6, 16, 5, 0}},
     {{"f1", 256, 120}, {"f2", 120, 84}, {"f3", 84, 10}}},
    {"cnn",
     2,
     2,
     {{"c1", 1, 32, 5, 2}, {"c2", 32, 64, 5, 2}},
     {{"f1", 3136, 512}, {"f2", 512, 10}}},
};

static const char *const registry_names[] = {"logreg", "mlp", "lenet5", "cnn", NULL};

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
    const model_spec *spec;
    sl_layout *layout;
    size_t nparams;
    conv_stage conv[MAX_CONV];
    dense_stage dense[MAX_DENSE];
    size_t cap;    /* batch the scratch is sized for */
    void *scratch; /* one block for every buffer below and in the stages */
    float *dflat;  /* gradient of the dense input (only with conv stages) */
    float *grad_a; /* dense output gradients, ping-pong */
    float *grad_b;
};

const char *const *sl_model_names(void)
{
    return registry_names;
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

static int add_tensor(sl_layout *l, const char *layer, const char *what, const uint64_t *shape,
                      uint32_t ndim)
{
    char name[SL_CODEC_MAX_NAME + 1];
    int len = snprintf(name, sizeof name, "%s.%s", layer, what);
    if (len < 0 || (size_t)len >= sizeof name)
        return SL_EINVAL;
    return sl_layout_add(l, name, shape, ndim);
}

/* Layout in PyTorch's order, and the stage geometry; checks that the
 * registry entry chains (each stage's output feeds the next). */
static int build(sl_model *m)
{
    const model_spec *s = m->spec;
    size_t c = 1, h = INPUT_H, w = INPUT_W, idx = 0;
    int rc = sl_layout_create(&m->layout);
    for (uint32_t i = 0; rc == SL_OK && i < s->nconv; i++) {
        const conv_spec *cs = &s->conv[i];
        conv_stage *st = &m->conv[i];
        uint64_t wshape[4] = {cs->cout, cs->cin, cs->k, cs->k}, bshape[1] = {cs->cout};
        if (cs->cin != c)
            return SL_EINVAL;
        rc = sl__nn_conv_init(&st->geom, cs->cin, cs->cout, h, w, cs->k, cs->pad);
        if (rc == SL_OK)
            rc = add_tensor(m->layout, cs->name, "weight", wshape, 4);
        if (rc == SL_OK)
            rc = add_tensor(m->layout, cs->name, "bias", bshape, 1);
        if (rc != SL_OK)
            return rc;
        st->w_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->b_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->ph = st->geom.ho / 2;
        st->pw = st->geom.wo / 2;
        c = cs->cout, h = st->ph, w = st->pw;
    }
    for (uint32_t j = 0; rc == SL_OK && j < s->ndense; j++) {
        const dense_spec *ds = &s->dense[j];
        dense_stage *st = &m->dense[j];
        uint64_t wshape[2] = {ds->out, ds->in}, bshape[1] = {ds->out};
        if (ds->in != c * h * w)
            return SL_EINVAL;
        rc = add_tensor(m->layout, ds->name, "weight", wshape, 2);
        if (rc == SL_OK)
            rc = add_tensor(m->layout, ds->name, "bias", bshape, 1);
        if (rc != SL_OK)
            return rc;
        st->in = ds->in, st->out = ds->out;
        st->w_off = sl_layout_tensor(m->layout, idx++)->offset;
        st->b_off = sl_layout_tensor(m->layout, idx++)->offset;
        c = ds->out, h = 1, w = 1;
    }
    if (rc == SL_OK && c != CLASSES)
        rc = SL_EINVAL;
    if (rc == SL_OK)
        m->nparams = (size_t)sl_layout_params(m->layout);
    return rc;
}

int sl_model_create(const char *name, sl_model **out)
{
    const model_spec *spec = NULL;
    sl_model *m;
    int rc;
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i].name, name) == 0)
            spec = &registry[i];
    if (spec == NULL)
        return SL_ENOENT;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return SL_ENOMEM;
    m->spec = spec;
    rc = build(m);
    if (rc != SL_OK) {
        sl_model_free(m);
        return rc;
    }
    *out = m;
    return SL_OK;
}

void sl_model_free(sl_model *model)
{
    if (model == NULL)
        return;
    sl_layout_free(model->layout);
    free(model->scratch);
    free(model);
}

const char *sl_model_name(const sl_model *model)
{
    return model->spec->name;
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
    (void)model;
    return INPUT_H * INPUT_W;
}

size_t sl_model_classes(const sl_model *model)
{
    (void)model;
    return CLASSES;
}

size_t sl__nn_model_convs(const sl_model *m)
{
    return m->spec->nconv;
}

const sl__nn_conv *sl__nn_model_conv(const sl_model *m, size_t i)
{
    return i < m->spec->nconv ? &m->conv[i].geom : NULL;
}

int sl__nn_model_set_conv_algo(sl_model *m, size_t i, sl__nn_conv_algo algo)
{
    int rc;
    if (i >= m->spec->nconv)
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

int sl_model_init(const sl_model *model, float *params, uint64_t seed)
{
    uint64_t rng = sl__nn_rng_state(seed, 0x696e6974u /* "init" */);
    size_t nt;
    float bound = 0.0f;
    if (model == NULL || params == NULL)
        return SL_EINVAL;
    nt = sl_layout_tensors(model->layout);
    for (size_t i = 0; i < nt; i++) {
        const sl_tensor_desc *t = sl_layout_tensor(model->layout, i);
        /* A weight's fan-in is everything but its first dimension; the
         * bias that follows shares it (nn.Linear / nn.Conv2d). */
        if (t->ndim >= 2) {
            uint64_t fan_in = t->count / t->shape[0];
            bound = (float)(1.0 / sqrt((double)fan_in));
        }
        for (uint64_t e = 0; e < t->count; e++)
            params[t->offset + e] = (2.0f * sl__nn_rng_unit(&rng) - 1.0f) * bound;
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
    size_t widest = CLASSES;
    for (uint32_t i = 0; i < m->spec->nconv; i++) {
        conv_stage *st = &m->conv[i];
        const sl__nn_conv *g = &st->geom;
        size_t pooled = g->cout * b * st->ph * st->pw;
        st->ws = carve(cv, sl__nn_conv_workspace(g, b) * sizeof(float));
        st->out = carve(cv, g->cout * b * g->ho * g->wo * sizeof(float));
        st->pool = carve(cv, pooled * sizeof(float));
        st->arg = carve(cv, pooled);
        st->dpool = i + 1 < m->spec->nconv ? carve(cv, pooled * sizeof(float)) : NULL;
    }
    for (uint32_t j = 0; j < m->spec->ndense; j++) {
        m->dense[j].y = carve(cv, b * m->dense[j].out * sizeof(float));
        widest = m->dense[j].out > widest ? m->dense[j].out : widest;
    }
    m->dflat = m->spec->nconv > 0 ? carve(cv, b * m->dense[0].in * sizeof(float)) : NULL;
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

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */
/* ------------------------------------------------------------------------ */

/* The forward pass into scratch; the logits end in the last dense y. */
static int forward(sl_model *m, const float *params, const float *x, size_t batch)
{
    const float *act = x; /* one input channel: NCHW is CNHW */
    uint32_t nconv = m->spec->nconv, ndense = m->spec->ndense;
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
    uint32_t nconv = m->spec->nconv, ndense = m->spec->ndense;
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
    rc = forward(model, params, x, batch);
    if (rc == SL_OK)
        memcpy(logits, model->dense[model->spec->ndense - 1].y, batch * CLASSES * sizeof *logits);
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
    for (size_t n = 0; n < batch; n++)
        if (labels[n] < 0 || labels[n] >= CLASSES)
            return SL_EINVAL;
    rc = forward(model, params, x, batch);
    if (rc != SL_OK)
        return rc;
    z = model->dense[model->spec->ndense - 1].y;
    rc = sl__nn_softmax_ce(z, labels, batch, CLASSES, &mean, NULL, model->grad_a);
    if (rc == SL_OK && logits != NULL)
        memcpy(logits, z, batch * CLASSES * sizeof *logits);
    if (rc == SL_OK)
        rc = backward(model, params, x, batch, model->grad_a, grad);
    if (rc == SL_OK && loss != NULL)
        *loss = (float)mean;
    return rc;
}
