/*
 * graph.c - the general executor of a model spec: which tensors need a
 * gradient, the memory plan, and the forward and backward passes over the
 * nodes in order (graph_int.h says how memory is laid out).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

struct sl__graph {
    const sl_spec *s;
    const sl__op_impl **impl; /* per node */
    uint8_t *needs_grad;      /* per tensor */
    uint8_t *fresh, *written; /* per tensor, in the backward pass: see graph_int.h */
    /* the plan for cap samples: per tensor offsets of values and gradients, per node aux */
    size_t cap;
    size_t *val_off, *grad_off, *aux_off; /* SIZE_MAX: none */
    size_t work_off, arena_bytes;
    char *arena;
    /* per tensor pointers of the current pass */
    float **val, **grad;
    const int64_t **ival;
    /* the current pass */
    size_t batch;
    int training, forwarded;
    uint64_t seed;
    const float *params;
};

const sl__op_impl *sl__op_impl_of(sl__op op)
{
    const sl__op_impl *(*const families[])(sl__op) = {sl__ops_core, sl__ops_shape, sl__ops_conv,
                                                      sl__ops_act,  sl__ops_norm,  sl__ops_seq};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const sl__op_impl *impl = families[i](op);
        if (impl != NULL)
            return impl;
    }
    return NULL;
}

int sl__op_assigns(sl__op op)
{
    switch (op) {
    case SL__OP_CONV: /* ops_conv.c */
    case SL__OP_MAXPOOL:
    case SL__OP_AVGPOOL:
    case SL__OP_GLOBALAVGPOOL:
    case SL__OP_RELU: /* ops_act.c */
    case SL__OP_SIGMOID:
    case SL__OP_TANH:
    case SL__OP_LEAKYRELU:
    case SL__OP_GELU:
    case SL__OP_BATCHNORM: /* ops_norm.c */
        return 1;
    default:
        return 0;
    }
}

void sl__graph_free(sl__graph *g)
{
    if (g == NULL)
        return;
    free(g->impl);
    free(g->needs_grad);
    free(g->fresh);
    free(g->written);
    free(g->val_off);
    free(g->grad_off);
    free(g->aux_off);
    free(g->arena);
    free(g->val);
    free(g->grad);
    free(g->ival);
    free(g);
}

int sl__graph_create(const sl_spec *spec, sl__graph **out, char *err, size_t errcap)
{
    sl__graph *g;
    size_t nt, nn;
    if (spec == NULL || out == NULL)
        return SL_EINVAL;
    nt = spec->nt;
    nn = spec->nn;
    g = calloc(1, sizeof *g);
    if (g == NULL)
        return SL_ENOMEM;
    g->s = spec;
    g->impl = calloc(nn, sizeof *g->impl);
    g->needs_grad = calloc(nt, 1);
    g->fresh = calloc(nt, 1);
    g->written = calloc(nt, 1);
    g->val_off = calloc(nt, sizeof *g->val_off);
    g->grad_off = calloc(nt, sizeof *g->grad_off);
    g->aux_off = calloc(nn, sizeof *g->aux_off);
    g->val = calloc(nt, sizeof *g->val);
    g->grad = calloc(nt, sizeof *g->grad);
    g->ival = calloc(nt, sizeof *g->ival);
    if (!g->impl || !g->needs_grad || !g->fresh || !g->written || !g->val_off || !g->grad_off ||
        !g->aux_off || !g->val || !g->grad || !g->ival) {
        sl__graph_free(g);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < nn; i++) {
        g->impl[i] = sl__op_impl_of((sl__op)spec->n[i].op);
        if (g->impl[i] == NULL) {
            if (err != NULL && errcap > 0)
                snprintf(err, errcap, "nodes[%zu]: this build has no kernels for %s", i,
                         sl__op_name((sl__op)spec->n[i].op));
            sl__graph_free(g);
            return SL_EUNSUPPORTED;
        }
    }
    /* trainable parameters need gradients, and so does everything computed from them */
    for (size_t p = 0; p < spec->np; p++)
        g->needs_grad[spec->p[p].tensor] = !spec->p[p].buffer;
    for (size_t i = 0; i < nn; i++) {
        const sl__node *nd = &spec->n[i];
        int any = 0;
        for (int k = 0; k < nd->nin; k++)
            any |= nd->in[k] >= 0 && g->needs_grad[nd->in[k]];
        for (int k = 0; k < nd->nout; k++)
            if (nd->out[k] >= 0)
                g->needs_grad[nd->out[k]] = (uint8_t)any;
    }
    *out = g;
    return SL_OK;
}

#define ALIGN(x) (((x) + SL__NN_ALIGN - 1) / SL__NN_ALIGN * SL__NN_ALIGN)

/* The plan for @batch: offsets into the arena, its total in *@bytes. 0 or SL_ETOOBIG. */
static int plan(const sl__graph *g, size_t batch, size_t *val_off, size_t *grad_off,
                size_t *aux_off, size_t *work_off, size_t *bytes)
{
    const sl_spec *s = g->s;
    size_t used = 0, work = 0;
    /* every count is at most 2^28 and 4096 nodes write at most 4 outputs each: bound
     * the batch so that no sum below can wrap */
    if (batch == 0 || batch > ((size_t)1 << 20))
        return SL_ETOOBIG;
    for (size_t t = 0; t < s->nt; t++) {
        const sl__tensor *x = &s->t[t];
        val_off[t] = grad_off[t] = SIZE_MAX;
        if (x->kind != SL__T_ACT && !(x->kind == SL__T_INPUT && x->dtype == SL__F32))
            continue;
        if (x->kind == SL__T_ACT) {
            uint64_t b = (uint64_t)batch * x->count * sizeof(float);
            if (b > ((uint64_t)1 << 40))
                return SL_ETOOBIG;
            val_off[t] = used;
            used += ALIGN((size_t)b);
            if (g->needs_grad[t]) {
                grad_off[t] = used;
                used += ALIGN((size_t)b);
            }
        }
    }
    for (size_t i = 0; i < s->nn; i++) {
        const sl__op_impl *im = g->impl[i];
        size_t a = im->aux_bytes ? im->aux_bytes(s, &s->n[i], batch) : 0;
        size_t w = im->work_bytes ? im->work_bytes(s, &s->n[i], batch) : 0;
        if (a == SIZE_MAX || w == SIZE_MAX)
            return SL_ETOOBIG;
        aux_off[i] = used;
        used += ALIGN(a);
        work = w > work ? w : work;
    }
    *work_off = used;
    used += ALIGN(work);
#if SIZE_MAX > 0xffffffffu /* on 32-bit targets the overflow checks above bound it */
    if (used > ((size_t)1 << 40))
        return SL_ETOOBIG;
#endif
    *bytes = used;
    return SL_OK;
}

size_t sl__graph_arena_bytes(const sl__graph *g, size_t batch)
{
    size_t *a = calloc(g->s->nt * 2 + g->s->nn, sizeof *a), work, bytes = 0;
    if (a == NULL)
        return 0;
    if (plan(g, batch, a, a + g->s->nt, a + 2 * g->s->nt, &work, &bytes) != SL_OK)
        bytes = 0;
    free(a);
    return bytes;
}

int sl__graph_reserve(sl__graph *g, size_t batch)
{
    size_t bytes, work;
    char *arena;
    int rc;
    if (g == NULL)
        return SL_EINVAL;
    if (batch <= g->cap)
        return SL_OK;
    rc = plan(g, batch, g->val_off, g->grad_off, g->aux_off, &work, &bytes);
    if (rc != SL_OK)
        return rc;
    arena = aligned_alloc(SL__NN_ALIGN, bytes ? bytes : SL__NN_ALIGN);
    if (arena == NULL) {
        g->cap = 0; /* the offsets are for the new size: re-plan next time */
        return SL_ENOMEM;
    }
    free(g->arena);
    g->arena = arena;
    g->work_off = work;
    g->arena_bytes = bytes;
    g->cap = batch;
    g->forwarded = 0;
    return SL_OK;
}

static void set_ctx(const sl__graph *g, size_t i, sl__op_ctx *c)
{
    c->s = g->s;
    c->nd = &g->s->n[i];
    c->batch = g->batch;
    c->training = g->training;
    c->seed = g->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    c->val = g->val;
    c->ival = g->ival;
    c->grad = g->grad;
    c->fresh = g->fresh;
    c->aux = g->arena + g->aux_off[i];
    c->work = g->arena + g->work_off;
}

int sl__graph_forward(sl__graph *g, const float *params, const void *const *inputs, size_t batch,
                      int training, uint64_t seed)
{
    const sl_spec *s;
    int rc;
    if (g == NULL || params == NULL || inputs == NULL || batch == 0)
        return SL_EINVAL;
    s = g->s;
    if ((rc = sl__graph_reserve(g, batch)) != SL_OK)
        return rc;
    g->batch = batch;
    g->training = training;
    g->seed = seed;
    g->params = params;
    g->forwarded = 0;
    for (size_t t = 0; t < s->nt; t++) {
        const sl__tensor *x = &s->t[t];
        g->val[t] = NULL;
        g->ival[t] = NULL;
        g->grad[t] = NULL;
        if (x->kind == SL__T_PARAM)
            g->val[t] = (float *)(params + sl_layout_tensor(s->layout, (size_t)x->param)->offset);
        else if (x->kind == SL__T_ACT)
            g->val[t] = (float *)(void *)(g->arena + g->val_off[t]);
    }
    for (size_t i = 0; i < s->ninputs; i++) {
        int t = s->input[i];
        if (inputs[i] == NULL)
            return SL_EINVAL;
        if (s->t[t].dtype == SL__I64)
            g->ival[t] = inputs[i];
        else
            g->val[t] = (float *)inputs[i]; /* read only: no op writes a model input */
    }
    for (size_t i = 0; i < s->nn; i++) {
        sl__op_ctx c;
        set_ctx(g, i, &c);
        if ((rc = g->impl[i]->forward(&c)) != SL_OK)
            return rc;
    }
    g->forwarded = 1;
    return SL_OK;
}

const float *sl__graph_output(const sl__graph *g)
{
    return g->val[g->s->output];
}

/* Before a node's backward pass touches activation gradient @t: the first touch marks it
 * fresh (when the node may overwrite it) or zeroes it. */
static void claim(sl__graph *g, int32_t t, int may_assign)
{
    if (t < 0 || g->grad[t] == NULL || g->written[t] || g->s->t[t].kind != SL__T_ACT)
        return;
    if (may_assign)
        g->fresh[t] = 1;
    else
        memset(g->grad[t], 0, g->batch * g->s->t[t].count * sizeof(float));
    g->written[t] = 1;
}

int sl__graph_backward(sl__graph *g, const float *dout, float *grad)
{
    const sl_spec *s;
    int rc;
    if (g == NULL || dout == NULL || grad == NULL || !g->forwarded)
        return g != NULL && !g->forwarded ? SL_ESTATE : SL_EINVAL;
    s = g->s;
    memset(grad, 0, (size_t)sl_layout_params(s->layout) * sizeof *grad);
    /* activation gradients are not zeroed up front: the first node to write one overwrites
     * it (fresh) or zeroes it first, and one nothing wrote is zeroed before it is read */
    memset(g->fresh, 0, s->nt);
    memset(g->written, 0, s->nt);
    for (size_t t = 0; t < s->nt; t++) {
        const sl__tensor *x = &s->t[t];
        g->grad[t] = NULL;
        if (!g->needs_grad[t])
            continue;
        if (x->kind == SL__T_PARAM)
            g->grad[t] = grad + sl_layout_tensor(s->layout, (size_t)x->param)->offset;
        else if (x->kind == SL__T_ACT)
            g->grad[t] = (float *)(void *)(g->arena + g->grad_off[t]);
    }
    if (g->grad[s->output] != NULL) {
        memcpy(g->grad[s->output], dout, g->batch * s->t[s->output].count * sizeof(float));
        g->written[s->output] = 1;
    }
    for (size_t i = s->nn; i-- > 0;) {
        const sl__node *nd = &s->n[i];
        sl__op_ctx c;
        int any = 0;
        for (int k = 0; k < nd->nout; k++)
            any |= nd->out[k] >= 0 && g->grad[nd->out[k]] != NULL;
        if (!any)
            continue;
        for (int k = 0; k < nd->nout; k++)
            claim(g, nd->out[k], 0);
        for (int k = 0; k < nd->nin; k++) {
            int once = 1;
            for (int j = 0; j < nd->nin; j++)
                once &= j == k || nd->in[j] != nd->in[k];
            claim(g, nd->in[k], sl__op_assigns((sl__op)nd->op) && once);
        }
        set_ctx(g, i, &c);
        rc = g->impl[i]->backward(&c);
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k] >= 0)
                g->fresh[nd->in[k]] = 0;
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

void sl__graph_update_buffers(sl__graph *g, float *params)
{
    if (g == NULL || params == NULL || !g->forwarded || !g->training)
        return;
    for (size_t i = 0; i < g->s->nn; i++) {
        sl__op_ctx c;
        if (g->impl[i]->update_buffers == NULL)
            continue;
        set_ctx(g, i, &c);
        g->impl[i]->update_buffers(&c, params);
    }
}
