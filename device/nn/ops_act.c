/*
 * ops_act.c - element-wise activations and Dropout: Relu, Sigmoid, Tanh,
 * LeakyRelu, Gelu (erf, or PyTorch's tanh approximation), Dropout (inverted:
 * kept values scaled by 1 / (1 - ratio); the mask is a function of the
 * step's seed and the element's position, so a step can be replayed).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

static size_t n_of(const sl__op_ctx *c)
{
    return c->batch * c->s->t[c->nd->out[0]].count;
}

static int act_fwd(const sl__op_ctx *c)
{
    const float *x = c->val[c->nd->in[0]];
    float *y = c->val[c->nd->out[0]];
    size_t n = n_of(c);
    float alpha = c->nd->a.alpha;
    switch ((sl__op)c->nd->op) {
    case SL__OP_RELU:
        sl__nn_relu_forward(x, y, n);
        break;
    case SL__OP_SIGMOID:
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case SL__OP_TANH:
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(x[i]);
        break;
    case SL__OP_LEAKYRELU:
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
        break;
    case SL__OP_GELU:
        if (c->nd->a.tanh_approx) {
            const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
            for (size_t i = 0; i < n; i++) {
                float v = x[i];
                y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
            }
        } else {
            for (size_t i = 0; i < n; i++)
                y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.7071067811865476f));
        }
        break;
    default:
        return SL_EUNSUPPORTED;
    }
    return SL_OK;
}

/* dx += y > 0 ? dy : 0. The buffers are distinct tensors' (restrict): the compiler makes it
 * a vector select, where it would otherwise branch on the sign, at random (ten times
 * slower on ReLU's outputs). */
static void relu_bwd_add(float *restrict dx, const float *restrict y, const float *restrict dy,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits, keep = 0u - (uint32_t)(y[i] > 0.0f);
        float d;
        memcpy(&bits, &dy[i], sizeof bits);
        bits &= keep; /* dy, or +0 */
        memcpy(&d, &bits, sizeof d);
        dx[i] += d;
    }
}

/* act_bwd for a fresh dx: ReLU writes it with the element-wise table's kernel; the others
 * zero it and add. */
static int act_bwd_add(const sl__op_ctx *c, const float *x, const float *y, const float *dy,
                       float *dx, size_t n);

static int act_bwd_assign(const sl__op_ctx *c, const float *x, const float *y, const float *dy,
                          float *dx, size_t n)
{
    if ((sl__op)c->nd->op == SL__OP_RELU) {
        sl__nn_ew()->relu_bwd(dy, y, dx, n);
        return SL_OK;
    }
    memset(dx, 0, n * sizeof *dx);
    return act_bwd_add(c, x, y, dy, dx, n);
}

static int act_bwd(const sl__op_ctx *c)
{
    const float *x = c->val[c->nd->in[0]], *y = c->val[c->nd->out[0]];
    const float *dy = c->grad[c->nd->out[0]];
    float *dx = c->grad[c->nd->in[0]];
    size_t n = n_of(c);
    if (dx == NULL)
        return SL_OK;
    if (sl__op_fresh(c, c->nd->in[0]))
        return act_bwd_assign(c, x, y, dy, dx, n);
    return act_bwd_add(c, x, y, dy, dx, n);
}

static int act_bwd_add(const sl__op_ctx *c, const float *x, const float *y, const float *dy,
                       float *dx, size_t n)
{
    float alpha = c->nd->a.alpha;
    switch ((sl__op)c->nd->op) {
    case SL__OP_RELU:
        relu_bwd_add(dx, y, dy, n);
        break;
    case SL__OP_SIGMOID:
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i] * y[i] * (1.0f - y[i]);
        break;
    case SL__OP_TANH:
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i] * (1.0f - y[i] * y[i]);
        break;
    case SL__OP_LEAKYRELU:
        for (size_t i = 0; i < n; i++)
            dx[i] += x[i] > 0.0f ? dy[i] : alpha * dy[i];
        break;
    case SL__OP_GELU:
        if (c->nd->a.tanh_approx) {
            const float k = 0.7978845608028654f;
            for (size_t i = 0; i < n; i++) {
                float v = x[i], u = k * (v + 0.044715f * v * v * v), t = tanhf(u);
                float du = k * (1.0f + 3.0f * 0.044715f * v * v);
                dx[i] += dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
            }
        } else {
            const float inv_sqrt_2pi = 0.3989422804014327f;
            for (size_t i = 0; i < n; i++) {
                float v = x[i];
                float cdf = 0.5f * (1.0f + erff(v * 0.7071067811865476f));
                dx[i] += dy[i] * (cdf + v * inv_sqrt_2pi * expf(-0.5f * v * v));
            }
        }
        break;
    default:
        return SL_EUNSUPPORTED;
    }
    return SL_OK;
}

/* ---- Dropout ----------------------------------------------------------------------------- */

static size_t dropout_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    return batch * s->t[nd->out[0]].count; /* one byte per element: kept or not */
}

static int dropout_fwd(const sl__op_ctx *c)
{
    const float *x = c->val[c->nd->in[0]];
    float *y = c->val[c->nd->out[0]];
    uint8_t *keep = c->aux;
    size_t n = n_of(c);
    float ratio = c->nd->a.ratio, scale;
    uint64_t rng = c->seed;
    if (!c->training || ratio <= 0.0f) {
        memcpy(y, x, n * sizeof *y);
        memset(keep, 1, n);
        return SL_OK;
    }
    scale = 1.0f / (1.0f - ratio);
    for (size_t i = 0; i < n; i++) {
        keep[i] = sl__nn_rng_unit(&rng) >= ratio;
        y[i] = keep[i] ? x[i] * scale : 0.0f;
    }
    return SL_OK;
}

static int dropout_bwd(const sl__op_ctx *c)
{
    const float *dy = c->grad[c->nd->out[0]];
    float *dx = c->grad[c->nd->in[0]];
    const uint8_t *keep = c->aux;
    size_t n = n_of(c);
    float scale = c->training && c->nd->a.ratio > 0.0f ? 1.0f / (1.0f - c->nd->a.ratio) : 1.0f;
    if (dx == NULL)
        return SL_OK;
    for (size_t i = 0; i < n; i++)
        dx[i] += keep[i] ? dy[i] * scale : 0.0f;
    return SL_OK;
}

static const sl__op_impl act = {NULL, NULL, act_fwd, act_bwd, NULL};
static const sl__op_impl dropout = {dropout_aux, NULL, dropout_fwd, dropout_bwd, NULL};

const sl__op_impl *sl__ops_act(sl__op op)
{
    switch (op) {
    case SL__OP_RELU:
    case SL__OP_SIGMOID:
    case SL__OP_TANH:
    case SL__OP_LEAKYRELU:
    case SL__OP_GELU:
        return &act;
    case SL__OP_DROPOUT:
        return &dropout;
    default:
        return NULL;
    }
}
