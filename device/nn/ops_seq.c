/*
 * ops_seq.c - the sequence ops: GRU and LSTM (one layer, one direction,
 * PyTorch's parameters, gate order and equations, zero initial state, each
 * sample its own sequence of T steps) and Embedding (a row of W per int64
 * index).
 *
 * A recurrent node runs over the whole batch step by step: the input
 * projections of all B x T rows are one GEMM up front, then each step is
 * one GEMM of the previous hidden states of the batch ([B, H], read in
 * place from Y with a row stride of T x H) against W_hh, and one fused
 * element-wise pass (gates, new state). What the backward pass needs is kept
 * in aux per sample and step: GRU r, z, n and W_hn h + b_hn; LSTM i, f, g,
 * o, c and tanh(c); the previous hidden state is Y's previous row.
 *
 * Backward through time walks the steps back with the running gradient of
 * the hidden state (and the LSTM's cell) over the batch: one element-wise
 * pass writes the gradients of the gate pre-activations of that step into
 * work ([B, T, gates x H], batch-major) and one GEMM sends them back through
 * W_hh to the previous step. At the end, dX, dW_ih and dW_hh are one GEMM
 * each over all B x T rows (dW_hh pairs row t of the gate gradients with
 * row t - 1 of Y: the rows of step 0, which have no previous state, are
 * zeroed first, so one GEMM over the rows shifted by one is exact) and the
 * biases are column sums.
 *
 * The sigmoid and tanh are inline (a Cephes-style expf with the same
 * accuracy as libm's, about 1 ulp): a step's element-wise pass is as long
 * as its GEMM, and a libm call per element would double it.
 */
#include <stdint.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "graph_int.h"
#include "nn_int.h"

/* ---- vectors of four floats ------------------------------------------------------------ */

/*
 * The element-wise passes work on four floats at a time with the
 * compiler's generic vectors (SSE on x86-64, NEON on ARM, scalar code
 * elsewhere): the build compiles this file for the baseline ISA, and GCC
 * at -O2 does not vectorise loops of unknown length. A row's last, partial
 * vector is loaded into zeros and stored back partially, so every element
 * takes the same arithmetic; the bodies are forced inline so that the
 * whole vectors of a row run without the partial case's branches.
 */
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));

#define VW     4
#define INLINE static inline __attribute__((always_inline))

/* @cnt (1..4) floats from @p; the other lanes 0. */
INLINE vf4 vld(const float *p, size_t cnt)
{
    vf4 v = {0.0f, 0.0f, 0.0f, 0.0f};
    if (cnt == VW)
        memcpy(&v, p, sizeof v);
    else
        memcpy(&v, p, cnt * sizeof *p);
    return v;
}

INLINE void vst(float *p, vf4 v, size_t cnt)
{
    if (cnt == VW)
        memcpy(p, &v, sizeof v);
    else
        memcpy(p, &v, cnt * sizeof *p);
}

/* max(lo, min(x, hi)) lane by lane; a NaN stays NaN. */
INLINE vf4 vclamp(vf4 x, float lo, float hi)
{
#if defined(__SSE__)
    return (vf4)_mm_min_ps(_mm_set1_ps(hi), _mm_max_ps(_mm_set1_ps(lo), (__m128)x));
#else
    vf4 l = {lo, lo, lo, lo}, h = {hi, hi, hi, hi};
    vi4 below = x<l, above = x> h;
    vi4 v = ((vi4)l & below) | ((vi4)x & ~below);
    return (vf4)(((vi4)h & above) | (v & ~above));
#endif
}

/* @x in all four lanes: a constant from memory, where x * scalar would broadcast it again
 * at every use. */
#define V(x) ((vf4){(x), (x), (x), (x)})

/*
 * e^x = 2^n e^r with n = round(x / ln 2) and e^r = 1 + q, q = r + r^2 P(r) (Cephes' expf,
 * within about 2 ulp; P evaluated by Estrin's scheme, a short dependency chain), x clamped
 * to [-87.3, 88.3]: *@s = 2^n, the result q.
 */
INLINE vf4 vexp_parts(vf4 x, vf4 *s)
{
    const vi4 bias = {0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127, 0x4B400000 - 127};
    vf4 t, n, r, r2, p01, p23, p45;
    x = vclamp(x, -87.3f, 88.3f);
    t = x * V(1.44269504088896341f) + V(12582912.0f); /* 1.5 x 2^23: rounds to an integer */
    n = t - V(12582912.0f);
    *s = (vf4)(((vi4)t - bias) << 23); /* n sits in t's low mantissa bits */
    r = x - n * V(0.693359375f);
    r = r - n * V(-2.12194440e-4f);
    r2 = r * r;
    p01 = r * V(1.6666665459e-1f) + V(5.0000001201e-1f);
    p23 = r * V(8.3334519073e-3f) + V(4.1665795894e-2f);
    p45 = r * V(1.9875691500e-4f) + V(1.3981999507e-3f);
    return ((p45 * r2 + p23) * r2 + p01) * r2 + r;
}

INLINE vf4 vsigmoid(vf4 x)
{
    vf4 s, q = vexp_parts(-x, &s);
    return V(1.0f) / (V(1.0f) + (q * s + s));
}

/* tanh |x| = u / (u + 2) with u = e^2|x| - 1 = 2^n q + (2^n - 1), which has no cancellation
 * near 0 (n = 0 there); the sign put back. */
INLINE vf4 vtanh(vf4 x)
{
    const vi4 sign = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
    vf4 a = (vf4)((vi4)x & ~sign), s, q = vexp_parts(a + a, &s), u = q * s + (s - V(1.0f));
    return (vf4)((vi4)(u / (u + V(2.0f))) | ((vi4)x & sign));
}

/* ---- shared ----------------------------------------------------------------------------- */

/* Floats rounded up to whole cache lines, so that every buffer carved from work is aligned. */
static uint64_t lines(uint64_t floats)
{
    return (floats + 15) / 16 * 16;
}

/* @floats floats as bytes, SIZE_MAX when that does not fit a size_t. */
static size_t bytes_of(uint64_t floats)
{
    return floats > SIZE_MAX / sizeof(float) ? SIZE_MAX : (size_t)floats * sizeof(float);
}

/* The dimensions of a GRU or LSTM node. */
typedef struct rnn_dims {
    size_t b, t, i, h;
} rnn_dims;

static rnn_dims dims_of(const sl_spec *s, const sl__node *nd, size_t batch)
{
    const sl__tensor *x = &s->t[nd->in[0]];
    rnn_dims d = {batch, x->shape[0], x->shape[1], (size_t)nd->a.hidden};
    return d;
}

/* Output @k of the node in @tab (values or gradients), NULL when it was left out. */
static float *opt_out(const sl__op_ctx *c, int k, float *const *tab)
{
    return c->nd->nout > k && c->nd->out[k] >= 0 ? tab[c->nd->out[k]] : NULL;
}

/* wt [H, G] = W_hh^T, so that each step's GEMM reads it in place rather than packing it. */
static void transpose(const float *w, size_t g, size_t h, float *wt)
{
    for (size_t r = 0; r < g; r++)
        for (size_t k = 0; k < h; k++)
            wt[k * g + r] = w[r * h + k];
}

/* sums[j] += the sum over @rows rows of m[r][j] (rows of @cols). */
static void add_col_sums(float *sums, const float *m, size_t rows, size_t cols)
{
    for (size_t j = 0; j < cols; j += VW) {
        size_t k = cols - j < VW ? cols - j : VW;
        vf4 acc = vld(sums + j, k);
        for (size_t r = 0; r < rows; r++)
            acc += vld(m + r * cols + j, k);
        vst(sums + j, acc, k);
    }
}

/*
 * The end of backward through time, shared by GRU and LSTM. @dgx: the
 * gradients of the input-side pre-activations [B, T, G] (G = gates x H);
 * @dgh: those of the hidden side (the same buffer for the LSTM), whose
 * step-0 rows this zeroes.
 */
static int rnn_param_grads(const sl__op_ctx *c, const rnn_dims *d, size_t gates, const float *dgx,
                           float *dgh)
{
    const sl__node *nd = c->nd;
    size_t g = gates * d->h, rows = d->b * d->t;
    const float *x = c->val[nd->in[0]], *w_ih = c->val[nd->in[1]], *y = c->val[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dw_ih = c->grad[nd->in[1]], *dw_hh = c->grad[nd->in[2]];
    float *db_ih = c->grad[nd->in[3]], *db_hh = c->grad[nd->in[4]];
    int rc = SL_OK;
    if (dx != NULL)
        rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, rows, d->i, g, 1.0f, dgx, g, w_ih, d->i,
                         1.0f, dx, d->i);
    if (rc == SL_OK && dw_ih != NULL)
        rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, g, d->i, rows, 1.0f, dgx, g, x, d->i, 1.0f,
                         dw_ih, d->i);
    if (rc != SL_OK)
        return rc;
    if (db_ih != NULL)
        add_col_sums(db_ih, dgx, rows, g);
    if (db_hh != NULL)
        add_col_sums(db_hh, dgh, rows, g);
    /* dW_hh += sum over steps t >= 1 of dgh[t]^T h[t - 1]: row r of dgh against row r - 1 of
     * Y, over all rows but the first, with the rows of step 0 (which would meet the previous
     * sample's last state) zeroed */
    if (dw_hh != NULL && d->t > 1) {
        for (size_t n = 0; n < d->b; n++)
            memset(dgh + n * d->t * g, 0, g * sizeof *dgh);
        rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, g, d->h, rows - 1, 1.0f, dgh + g, g, y, d->h,
                         1.0f, dw_hh, d->h);
    }
    return rc;
}

/* ---- GRU -------------------------------------------------------------------------------- */

/* aux: per sample and step, r, z, n and W_hn h + b_hn (4H). */
static size_t gru_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    rnn_dims d = dims_of(s, nd, batch);
    return bytes_of((uint64_t)d.b * d.t * 4 * d.h);
}

/* work: forward, W_hh^T [H, 3H] and W_hh h [B, 3H]; backward, the input- and hidden-side
 * gate gradients [B, T, 3H] each and the running dh [B, H]. */
static size_t gru_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    rnn_dims d = dims_of(s, nd, batch);
    uint64_t g = 3 * (uint64_t)d.h;
    uint64_t fwd = lines(d.h * g) + lines(d.b * g);
    uint64_t bwd = 2 * lines((uint64_t)d.b * d.t * g) + lines((uint64_t)d.b * d.h);
    return bytes_of(fwd > bwd ? fwd : bwd);
}

/* One step of one sample: @a holds the input projections (r, z, n) and gets r, z, n, hn; @gh
 * is W_hh h_prev; @hp is h_prev (NULL: zeros); @hy gets h. */
static void gru_cell(float *a, const float *gh, const float *b_ih, const float *b_hh,
                     const float *hp, float *hy, size_t h)
{
    const vf4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t j = 0; j < h; j += VW) {
        size_t k = h - j < VW ? h - j : VW, jz = h + j, jn = 2 * h + j;
        vf4 r = vsigmoid((vld(a + j, k) + vld(b_ih + j, k)) + (vld(gh + j, k) + vld(b_hh + j, k)));
        vf4 z =
            vsigmoid((vld(a + jz, k) + vld(b_ih + jz, k)) + (vld(gh + jz, k) + vld(b_hh + jz, k)));
        vf4 hn = vld(gh + jn, k) + vld(b_hh + jn, k);
        vf4 nv = vtanh(vld(a + jn, k) + vld(b_ih + jn, k) + r * hn);
        vf4 prev = hp != NULL ? vld(hp + j, k) : zero;
        vst(hy + j, (1.0f - z) * nv + z * prev, k);
        vst(a + j, r, k);
        vst(a + jz, z, k);
        vst(a + jn, nv, k);
        vst(a + 3 * h + j, hn, k);
    }
}

static int gru_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    rnn_dims d = dims_of(c->s, nd, c->batch);
    size_t h = d.h, t_len = d.t, g3 = 3 * h, a4 = 4 * h;
    const float *x = c->val[nd->in[0]], *w_ih = c->val[nd->in[1]], *w_hh = c->val[nd->in[2]];
    const float *b_ih = c->val[nd->in[3]], *b_hh = c->val[nd->in[4]];
    float *y = c->val[nd->out[0]], *h_last = opt_out(c, 1, c->val);
    float *aux = c->aux, *wt = c->work, *hh = wt + lines((uint64_t)h * g3);
    int rc;
    /* the input projections of every step, into the first 3H of each aux row */
    rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, d.b * t_len, g3, d.i, 1.0f, x, d.i, w_ih, d.i,
                     0.0f, aux, a4);
    if (rc != SL_OK)
        return rc;
    transpose(w_hh, g3, h, wt);
    memset(hh, 0, d.b * g3 * sizeof *hh);
    for (size_t t = 0; t < t_len; t++) {
        /* W_hh h_{t-1} of the batch, the states read in place from Y (h_0 = 0: hh stays 0) */
        if (t > 0 && (rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, d.b, g3, h, 1.0f,
                                       y + (t - 1) * h, t_len * h, wt, g3, 0.0f, hh, g3)) != SL_OK)
            return rc;
        for (size_t n = 0; n < d.b; n++) {
            size_t row = n * t_len + t;
            gru_cell(aux + row * a4, hh + n * g3, b_ih, b_hh, t > 0 ? y + (row - 1) * h : NULL,
                     y + row * h, h);
        }
    }
    if (h_last != NULL)
        for (size_t n = 0; n < d.b; n++)
            memcpy(h_last + n * h, y + (n * t_len + t_len - 1) * h, h * sizeof *h_last);
    return SL_OK;
}

/* The backward pass of gru_cell: @dh holds dL/dh (without this step's dY, @dy, NULL: none)
 * and gets its part that flows straight to h_prev (dh z); @gx and @gh get the gradients of
 * the input- and hidden-side pre-activations. */
static void gru_cell_bwd(const float *a, const float *dy, const float *hp, float *dh, float *gx,
                         float *gh, size_t h)
{
    const vf4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t j = 0; j < h; j += VW) {
        size_t k = h - j < VW ? h - j : VW, jz = h + j, jn = 2 * h + j;
        vf4 r = vld(a + j, k), z = vld(a + jz, k), nv = vld(a + jn, k), hn = vld(a + 3 * h + j, k);
        vf4 g = vld(dh + j, k) + (dy != NULL ? vld(dy + j, k) : zero);
        vf4 prev = hp != NULL ? vld(hp + j, k) : zero;
        vf4 dn = g * (1.0f - z) * (1.0f - nv * nv);
        vf4 dz = g * (prev - nv) * z * (1.0f - z);
        vf4 dr = dn * hn * r * (1.0f - r);
        vst(gx + j, dr, k);
        vst(gx + jz, dz, k);
        vst(gx + jn, dn, k);
        vst(gh + j, dr, k);
        vst(gh + jz, dz, k);
        vst(gh + jn, dn * r, k);
        vst(dh + j, g * z, k);
    }
}

static int gru_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    rnn_dims d = dims_of(c->s, nd, c->batch);
    size_t h = d.h, t_len = d.t, g3 = 3 * h, a4 = 4 * h;
    const float *w_hh = c->val[nd->in[2]], *y = c->val[nd->out[0]], *aux = c->aux;
    const float *dy = c->grad[nd->out[0]], *dh_last = opt_out(c, 1, c->grad);
    float *dgx = c->work, *dgh = dgx + lines((uint64_t)d.b * t_len * g3);
    float *dh = dgh + lines((uint64_t)d.b * t_len * g3);
    int rc;
    if (dh_last != NULL)
        memcpy(dh, dh_last, d.b * h * sizeof *dh);
    else
        memset(dh, 0, d.b * h * sizeof *dh);
    for (size_t t = t_len; t-- > 0;) {
        for (size_t n = 0; n < d.b; n++) {
            size_t row = n * t_len + t;
            gru_cell_bwd(aux + row * a4, dy != NULL ? dy + row * h : NULL,
                         t > 0 ? y + (row - 1) * h : NULL, dh + n * h, dgx + row * g3,
                         dgh + row * g3, h);
        }
        /* dh_{t-1} += the hidden-side gate gradients through W_hh */
        if (t > 0 && (rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, d.b, h, g3, 1.0f,
                                       dgh + t * g3, t_len * g3, w_hh, h, 1.0f, dh, h)) != SL_OK)
            return rc;
    }
    return rnn_param_grads(c, &d, 3, dgx, dgh);
}

/* ---- LSTM ------------------------------------------------------------------------------- */

/* aux: per sample and step, i, f, g, o (first their pre-activations), c and tanh(c) (6H). */
static size_t lstm_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    rnn_dims d = dims_of(s, nd, batch);
    return bytes_of((uint64_t)d.b * d.t * 6 * d.h);
}

/* work: forward, W_hh^T [H, 4H]; backward, the gate gradients [B, T, 4H] and the running dh
 * and dc [B, H]. */
static size_t lstm_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    rnn_dims d = dims_of(s, nd, batch);
    uint64_t fwd = lines(4 * (uint64_t)d.h * d.h);
    uint64_t bwd = lines((uint64_t)d.b * d.t * 4 * d.h) + 2 * lines((uint64_t)d.b * d.h);
    return bytes_of(fwd > bwd ? fwd : bwd);
}

/* One step of one sample: @a holds the gates' pre-activations (without the biases) and gets
 * i, f, g, o, c, tanh(c); @cp is c_prev (NULL: zeros); @hy gets h. */
static void lstm_cell(float *a, const float *b_ih, const float *b_hh, const float *cp, float *hy,
                      size_t h)
{
    const vf4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t j = 0; j < h; j += VW) {
        size_t k = h - j < VW ? h - j : VW, jf = h + j, jg = 2 * h + j, jo = 3 * h + j;
        vf4 ig = vsigmoid(vld(a + j, k) + (vld(b_ih + j, k) + vld(b_hh + j, k)));
        vf4 fg = vsigmoid(vld(a + jf, k) + (vld(b_ih + jf, k) + vld(b_hh + jf, k)));
        vf4 gg = vtanh(vld(a + jg, k) + (vld(b_ih + jg, k) + vld(b_hh + jg, k)));
        vf4 og = vsigmoid(vld(a + jo, k) + (vld(b_ih + jo, k) + vld(b_hh + jo, k)));
        vf4 cv = fg * (cp != NULL ? vld(cp + j, k) : zero) + ig * gg, tc = vtanh(cv);
        vst(hy + j, og * tc, k);
        vst(a + j, ig, k);
        vst(a + jf, fg, k);
        vst(a + jg, gg, k);
        vst(a + jo, og, k);
        vst(a + 4 * h + j, cv, k);
        vst(a + 5 * h + j, tc, k);
    }
}

static int lstm_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    rnn_dims d = dims_of(c->s, nd, c->batch);
    size_t h = d.h, t_len = d.t, g4 = 4 * h, a6 = 6 * h;
    const float *x = c->val[nd->in[0]], *w_ih = c->val[nd->in[1]], *w_hh = c->val[nd->in[2]];
    const float *b_ih = c->val[nd->in[3]], *b_hh = c->val[nd->in[4]];
    float *y = c->val[nd->out[0]], *h_last = opt_out(c, 1, c->val), *c_last = opt_out(c, 2, c->val);
    float *aux = c->aux, *wt = c->work;
    int rc;
    rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, d.b * t_len, g4, d.i, 1.0f, x, d.i, w_ih, d.i,
                     0.0f, aux, a6);
    if (rc != SL_OK)
        return rc;
    transpose(w_hh, g4, h, wt);
    for (size_t t = 0; t < t_len; t++) {
        /* the recurrent term adds straight into this step's pre-activations */
        if (t > 0 &&
            (rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, d.b, g4, h, 1.0f, y + (t - 1) * h,
                              t_len * h, wt, g4, 1.0f, aux + t * a6, t_len * a6)) != SL_OK)
            return rc;
        for (size_t n = 0; n < d.b; n++) {
            size_t row = n * t_len + t;
            lstm_cell(aux + row * a6, b_ih, b_hh, t > 0 ? aux + (row - 1) * a6 + 4 * h : NULL,
                      y + row * h, h);
        }
    }
    for (size_t n = 0; n < d.b; n++) {
        size_t row = n * t_len + t_len - 1;
        if (h_last != NULL)
            memcpy(h_last + n * h, y + row * h, h * sizeof *h_last);
        if (c_last != NULL)
            memcpy(c_last + n * h, aux + row * a6 + 4 * h, h * sizeof *c_last);
    }
    return SL_OK;
}

/* The backward pass of lstm_cell: @dh holds dL/dh (without this step's dY, @dy, NULL: none),
 * @dc dL/dc and gets its part for c_prev; @gd gets the gates' pre-activation gradients. */
static void lstm_cell_bwd(const float *a, const float *dy, const float *cp, const float *dh,
                          float *dc, float *gd, size_t h)
{
    const vf4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t j = 0; j < h; j += VW) {
        size_t k = h - j < VW ? h - j : VW, jf = h + j, jg = 2 * h + j, jo = 3 * h + j;
        vf4 ig = vld(a + j, k), fg = vld(a + jf, k), gg = vld(a + jg, k), og = vld(a + jo, k);
        vf4 tc = vld(a + 5 * h + j, k);
        vf4 gh = vld(dh + j, k) + (dy != NULL ? vld(dy + j, k) : zero);
        vf4 gc = vld(dc + j, k) + gh * og * (1.0f - tc * tc);
        vf4 prev = cp != NULL ? vld(cp + j, k) : zero;
        vst(gd + j, gc * gg * ig * (1.0f - ig), k);
        vst(gd + jf, gc * prev * fg * (1.0f - fg), k);
        vst(gd + jg, gc * ig * (1.0f - gg * gg), k);
        vst(gd + jo, gh * tc * og * (1.0f - og), k);
        vst(dc + j, gc * fg, k);
    }
}

static int lstm_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    rnn_dims d = dims_of(c->s, nd, c->batch);
    size_t h = d.h, t_len = d.t, g4 = 4 * h, a6 = 6 * h;
    const float *w_hh = c->val[nd->in[2]], *aux = c->aux, *dy = c->grad[nd->out[0]];
    const float *dh_last = opt_out(c, 1, c->grad), *dc_last = opt_out(c, 2, c->grad);
    float *dg = c->work, *dh = dg + lines((uint64_t)d.b * t_len * g4);
    float *dc = dh + lines((uint64_t)d.b * h);
    int rc;
    if (dh_last != NULL)
        memcpy(dh, dh_last, d.b * h * sizeof *dh);
    else
        memset(dh, 0, d.b * h * sizeof *dh);
    if (dc_last != NULL)
        memcpy(dc, dc_last, d.b * h * sizeof *dc);
    else
        memset(dc, 0, d.b * h * sizeof *dc);
    for (size_t t = t_len; t-- > 0;) {
        for (size_t n = 0; n < d.b; n++) {
            size_t row = n * t_len + t;
            lstm_cell_bwd(aux + row * a6, dy != NULL ? dy + row * h : NULL,
                          t > 0 ? aux + (row - 1) * a6 + 4 * h : NULL, dh + n * h, dc + n * h,
                          dg + row * g4, h);
        }
        /* dh_{t-1} = the gate gradients through W_hh (dh_t is consumed) */
        if (t > 0 && (rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, d.b, h, g4, 1.0f,
                                       dg + t * g4, t_len * g4, w_hh, h, 0.0f, dh, h)) != SL_OK)
            return rc;
    }
    return rnn_param_grads(c, &d, 4, dg, dg);
}

/* ---- Embedding -------------------------------------------------------------------------- */

static int embedding_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const sl__tensor *w = &c->s->t[nd->in[1]];
    size_t count = c->batch * c->s->t[nd->in[0]].count, dim = w->shape[1];
    int64_t vocab = (int64_t)w->shape[0];
    const int64_t *idx = c->ival[nd->in[0]];
    const float *wv = c->val[nd->in[1]];
    float *y = c->val[nd->out[0]];
    if (idx == NULL)
        return SL_EINVAL;
    for (size_t k = 0; k < count; k++)
        if (idx[k] < 0 || idx[k] >= vocab)
            return SL_EINVAL;
    for (size_t k = 0; k < count; k++)
        memcpy(y + k * dim, wv + (size_t)idx[k] * dim, dim * sizeof *y);
    return SL_OK;
}

static int embedding_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    size_t count = c->batch * c->s->t[nd->in[0]].count, dim = c->s->t[nd->in[1]].shape[1];
    const int64_t *idx = c->ival[nd->in[0]];
    const float *dy = c->grad[nd->out[0]];
    float *dw = c->grad[nd->in[1]];
    if (dw == NULL || dy == NULL)
        return SL_OK;
    for (size_t k = 0; k < count; k++) {
        float *row = dw + (size_t)idx[k] * dim;
        const float *src = dy + k * dim;
        for (size_t j = 0; j < dim; j++)
            row[j] += src[j];
    }
    return SL_OK;
}

static const sl__op_impl gru = {gru_aux, gru_work, gru_fwd, gru_bwd, NULL};
static const sl__op_impl lstm = {lstm_aux, lstm_work, lstm_fwd, lstm_bwd, NULL};
static const sl__op_impl embedding = {NULL, NULL, embedding_fwd, embedding_bwd, NULL};

const sl__op_impl *sl__ops_seq(sl__op op)
{
    switch (op) {
    case SL__OP_GRU:
        return &gru;
    case SL__OP_LSTM:
        return &lstm;
    case SL__OP_EMBEDDING:
        return &embedding;
    default:
        return NULL;
    }
}
