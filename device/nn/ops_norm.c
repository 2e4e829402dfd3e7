/*
 * ops_norm.c - BatchNormalization and LayerNormalization, with PyTorch's
 * semantics (nn.BatchNorm1d/2d, nn.LayerNorm).
 *
 * BatchNormalization normalises each channel of X [C, ...] over the batch
 * and the spatial axes: n = batch x spatial values per channel. In training
 * it uses the batch's mean and biased variance, and keeps them in aux with
 * the inverse standard deviation: the backward pass needs them (the full
 * gradient through the batch statistics, dX = k / n (n dY - sum dY -
 * xhat sum(dY xhat)), k = scale / std), and update_buffers folds them into
 * the running statistics after the step, as PyTorch does: running =
 * (1 - momentum) running + momentum batch, the variance unbiased (n / (n -
 * 1)). The forward pass never writes the parameters: a step can be
 * replayed (finite differences, retries) and the buffers move once. Not
 * training, it normalises with the running statistics, which are then
 * constants (dX = k dY). The running mean and variance are buffers: the
 * graph gives them no gradient pointer (NULL) and nothing here writes one.
 *
 * LayerNormalization normalises each sample over its axes axis..end (D
 * values; the rows are batch x the product of the leading axes), with the
 * biased variance, then applies the element-wise scale and optional bias of
 * the normalised part's shape. Its backward pass per row is BatchNorm's
 * training formula with the roles of rows and columns swapped; the scale
 * and bias gradients sum over rows into double accumulators in work.
 *
 * Statistics and long sums are accumulated in double (two passes: mean,
 * then the squared deviations), so large planes and batches do not lose
 * the variance to cancellation.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

/* ---- BatchNormalization ------------------------------------------------------------------ */

/*
 * Sums over one sample's plane of a channel run in eight float lanes (the compiler vectorises
 * them; one double accumulator is a chain of dependent adds, several times slower), and
 * the planes of the batch add up in double. The element-wise passes run in float on
 * (x - mean), which stays exact where x is near the mean: the results move within rounding.
 */
#define BN_LANES 8

/* sum of x[i] over n values; *@sq (unless NULL) gets the sum of (x[i] - m)^2 instead */
static double bn_plane_sums(const float *x, size_t n, float m, double *sq)
{
    float acc[BN_LANES] = {0}, acc2[BN_LANES] = {0};
    double s = 0.0, s2 = 0.0;
    size_t i = 0;
    if (sq != NULL) {
        for (; i + BN_LANES <= n; i += BN_LANES)
            for (size_t j = 0; j < BN_LANES; j++) {
                float d = x[i + j] - m;
                acc2[j] += d * d;
            }
        for (; i < n; i++) {
            double d = (double)(x[i] - m);
            s2 += d * d;
        }
    } else {
        for (; i + BN_LANES <= n; i += BN_LANES)
            for (size_t j = 0; j < BN_LANES; j++)
                acc[j] += x[i + j];
        for (; i < n; i++)
            s += x[i];
    }
    for (size_t j = 0; j < BN_LANES; j++) {
        s += acc[j];
        s2 += acc2[j];
    }
    if (sq != NULL)
        *sq = s2;
    return s;
}

/* One pass over a plane for the backward pass: the sum of dy[i] (x[i] - m), and of dy[i] in
 * *@sdy, in BN_LANES float lanes each. */
static double bn_plane_dsums(const float *x, const float *dy, size_t n, float m, double *sdy)
{
    float acc[BN_LANES] = {0}, accd[BN_LANES] = {0};
    double s = 0.0, sd = 0.0;
    size_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (size_t j = 0; j < BN_LANES; j++) {
            acc[j] += dy[i + j] * (x[i + j] - m);
            accd[j] += dy[i + j];
        }
    for (; i < n; i++) {
        s += (double)dy[i] * (double)(x[i] - m);
        sd += dy[i];
    }
    for (size_t j = 0; j < BN_LANES; j++) {
        s += acc[j];
        sd += accd[j];
    }
    *sdy = sd;
    return s;
}

typedef struct bn_geom {
    size_t ch, spatial, n; /* channels; values per channel and sample; per channel in the batch */
} bn_geom;

static void bn_get_geom(const sl_spec *s, const sl__node *nd, size_t batch, bn_geom *g)
{
    const sl__tensor *x = &s->t[nd->in[0]];
    g->ch = x->shape[0];
    g->spatial = (size_t)(x->count / x->shape[0]);
    g->n = batch * g->spatial;
}

/* aux: per channel the mean, the inverse std and the (biased) variance the forward pass used */
static size_t bn_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    (void)batch;
    return 3 * (size_t)s->t[nd->in[0]].shape[0] * sizeof(double);
}

static int bn_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    bn_geom g;
    const float *x = c->val[nd->in[0]], *scale = c->val[nd->in[1]], *bias = c->val[nd->in[2]];
    const float *rmean = c->val[nd->in[3]], *rvar = c->val[nd->in[4]];
    float *y = c->val[nd->out[0]];
    double *mean, *invstd, *var;
    double eps = (double)nd->a.epsilon;
    bn_get_geom(c->s, nd, c->batch, &g);
    mean = c->aux;
    invstd = mean + g.ch;
    var = invstd + g.ch;
    for (size_t ch = 0; ch < g.ch; ch++) {
        double m, v, k, b;
        if (c->training) {
            double sum = 0.0, sq = 0.0, part;
            for (size_t n = 0; n < c->batch; n++)
                sum += bn_plane_sums(x + (n * g.ch + ch) * g.spatial, g.spatial, 0.0f, NULL);
            m = sum / (double)g.n;
            for (size_t n = 0; n < c->batch; n++) {
                /* the deviations from the mean rounded to float: sum (x - m)^2 moves within
                 * rounding, plus the mean's own rounding, (m - mf)^2 n, added back */
                (void)bn_plane_sums(x + (n * g.ch + ch) * g.spatial, g.spatial, (float)m, &part);
                sq += part;
            }
            sq -= (double)g.n * (m - (double)(float)m) * (m - (double)(float)m);
            v = sq / (double)g.n;
        } else {
            m = rmean[ch];
            v = rvar[ch];
        }
        mean[ch] = m;
        var[ch] = v;
        invstd[ch] = 1.0 / sqrt(v + eps);
        k = scale[ch] * invstd[ch];
        b = bias[ch];
        {
            float mf = (float)m, kf = (float)k, bf = (float)b;
            for (size_t n = 0; n < c->batch; n++) {
                const float *xp = x + (n * g.ch + ch) * g.spatial;
                float *yp = y + (n * g.ch + ch) * g.spatial;
                for (size_t i = 0; i < g.spatial; i++)
                    yp[i] = (xp[i] - mf) * kf + bf;
            }
        }
    }
    return SL_OK;
}

static int bn_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    bn_geom g;
    const float *x = c->val[nd->in[0]], *scale = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dscale = c->grad[nd->in[1]], *dbias = c->grad[nd->in[2]];
    const double *mean, *invstd;
    int assign = sl__op_fresh(c, nd->in[0]);
    bn_get_geom(c->s, nd, c->batch, &g);
    mean = c->aux;
    invstd = mean + g.ch;
    /* the running statistics (inputs 3 and 4) are buffers: no gradient to give */
    for (size_t ch = 0; ch < g.ch; ch++) {
        double m = mean[ch], is = invstd[ch], sum_dy = 0.0, sum_dyxh = 0.0, k, a, b;
        float mf = (float)m;
        for (size_t n = 0; n < c->batch; n++) {
            size_t at = (n * g.ch + ch) * g.spatial;
            double sd;
            sum_dyxh += bn_plane_dsums(x + at, dy + at, g.spatial, mf, &sd);
            sum_dy += sd;
        }
        /* sum dy (x - m) from sum dy (x - mf), then scaled: sum dy xhat */
        sum_dyxh = (sum_dyxh - (m - (double)mf) * sum_dy) * is;
        if (dbias != NULL)
            dbias[ch] += (float)sum_dy;
        if (dscale != NULL)
            dscale[ch] += (float)sum_dyxh;
        if (dx == NULL)
            continue;
        k = scale[ch] * is;
        /* dx = k (dy - a - xhat b): a, b the batch statistics' share (0 when they are the
         * running statistics, constants) */
        a = c->training ? sum_dy / (double)g.n : 0.0;
        b = c->training ? sum_dyxh / (double)g.n : 0.0;
        {
            float kf = (float)k, af = (float)a, sf = (float)(is * b);
            for (size_t n = 0; n < c->batch; n++) {
                const float *xp = x + (n * g.ch + ch) * g.spatial;
                const float *dyp = dy + (n * g.ch + ch) * g.spatial;
                float *dxp = dx + (n * g.ch + ch) * g.spatial;
                if (assign)
                    for (size_t i = 0; i < g.spatial; i++)
                        dxp[i] = kf * (dyp[i] - af - (xp[i] - mf) * sf);
                else
                    for (size_t i = 0; i < g.spatial; i++)
                        dxp[i] += kf * (dyp[i] - af - (xp[i] - mf) * sf);
            }
        }
    }
    return SL_OK;
}

/* The slice of parameter tensor @t in the flat vector @params. */
static float *param_slice(const sl_spec *s, int32_t t, float *params)
{
    return params + sl_layout_tensor(s->layout, (size_t)s->t[t].param)->offset;
}

static void bn_update(const sl__op_ctx *c, float *params)
{
    const sl__node *nd = c->nd;
    bn_geom g;
    const double *mean, *var;
    float *rmean = param_slice(c->s, nd->in[3], params);
    float *rvar = param_slice(c->s, nd->in[4], params);
    double mom = (double)nd->a.momentum;
    bn_get_geom(c->s, nd, c->batch, &g);
    mean = c->aux;
    var = mean + 2 * g.ch;
    for (size_t ch = 0; ch < g.ch; ch++) {
        rmean[ch] = (float)((1.0 - mom) * rmean[ch] + mom * mean[ch]);
        /* one value per channel has no unbiased variance (PyTorch refuses such a batch in
         * training): the running variance keeps its value */
        if (g.n > 1)
            rvar[ch] =
                (float)((1.0 - mom) * rvar[ch] + mom * var[ch] * (double)g.n / (double)(g.n - 1));
    }
}

/* ---- LayerNormalization ------------------------------------------------------------------ */

/* The rows (batch x leading axes) and the normalised values per row. */
static void ln_get_geom(const sl_spec *s, const sl__node *nd, size_t batch, size_t *rows, size_t *d)
{
    const sl__tensor *x = &s->t[nd->in[0]];
    size_t lead = 1, norm = 1;
    for (size_t i = 0; i < x->ndim; i++) {
        if (i < (size_t)nd->a.axis)
            lead *= x->shape[i];
        else
            norm *= x->shape[i];
    }
    *rows = batch * lead;
    *d = norm;
}

/* aux: per row the mean and inverse std */
static size_t ln_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    size_t rows, d;
    ln_get_geom(s, nd, batch, &rows, &d);
#if SIZE_MAX > 0xffffffffu
    if (rows > ((size_t)1 << 36))
        return SIZE_MAX;
#else
    if (rows > SIZE_MAX / (4 * sizeof(double))) /* 32-bit targets: half of what fits */
        return SIZE_MAX;
#endif
    return 2 * rows * sizeof(double);
}

/* work: the scale's and bias' gradients, summed over the rows in double */
static size_t ln_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    size_t rows, d;
    ln_get_geom(s, nd, batch, &rows, &d);
    return 2 * d * sizeof(double);
}

/* The optional bias: input 2, or -1 when left out. */
static int32_t ln_bias(const sl__node *nd)
{
    return nd->nin >= 3 ? nd->in[2] : -1;
}

static int ln_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const float *x = c->val[nd->in[0]], *scale = c->val[nd->in[1]];
    const float *bias = ln_bias(nd) >= 0 ? c->val[ln_bias(nd)] : NULL;
    float *y = c->val[nd->out[0]];
    double *mean = c->aux, *invstd;
    double eps = (double)nd->a.epsilon;
    size_t rows, d;
    ln_get_geom(c->s, nd, c->batch, &rows, &d);
    invstd = mean + rows;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        double sum = 0.0, sq = 0.0, m, is;
        for (size_t j = 0; j < d; j++)
            sum += xr[j];
        m = sum / (double)d;
        for (size_t j = 0; j < d; j++) {
            double dev = xr[j] - m;
            sq += dev * dev;
        }
        is = 1.0 / sqrt(sq / (double)d + eps);
        mean[r] = m;
        invstd[r] = is;
        for (size_t j = 0; j < d; j++) {
            double v = (xr[j] - m) * is * scale[j];
            yr[j] = (float)(bias != NULL ? v + bias[j] : v);
        }
    }
    return SL_OK;
}

static int ln_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const float *x = c->val[nd->in[0]], *scale = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dscale = c->grad[nd->in[1]];
    float *dbias = ln_bias(nd) >= 0 ? c->grad[ln_bias(nd)] : NULL;
    const double *mean = c->aux, *invstd;
    double *acc_scale = c->work, *acc_bias;
    size_t rows, d;
    ln_get_geom(c->s, nd, c->batch, &rows, &d);
    invstd = mean + rows;
    acc_bias = acc_scale + d;
    memset(acc_scale, 0, 2 * d * sizeof *acc_scale);
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *dyr = dy + r * d;
        double m = mean[r], is = invstd[r], sum_g = 0.0, sum_gxh = 0.0, a, b;
        for (size_t j = 0; j < d; j++) {
            double xh = (xr[j] - m) * is, gj = (double)dyr[j] * scale[j];
            acc_scale[j] += dyr[j] * xh;
            acc_bias[j] += dyr[j];
            sum_g += gj;
            sum_gxh += gj * xh;
        }
        if (dx == NULL)
            continue;
        a = sum_g / (double)d;
        b = sum_gxh / (double)d;
        for (size_t j = 0; j < d; j++) {
            double xh = (xr[j] - m) * is;
            dx[r * d + j] += (float)(is * ((double)dyr[j] * scale[j] - a - xh * b));
        }
    }
    for (size_t j = 0; j < d; j++) {
        if (dscale != NULL)
            dscale[j] += (float)acc_scale[j];
        if (dbias != NULL)
            dbias[j] += (float)acc_bias[j];
    }
    return SL_OK;
}

static const sl__op_impl batchnorm = {bn_aux, NULL, bn_fwd, bn_bwd, bn_update};
static const sl__op_impl layernorm = {ln_aux, ln_work, ln_fwd, ln_bwd, NULL};

const sl__op_impl *sl__ops_norm(sl__op op)
{
    switch (op) {
    case SL__OP_BATCHNORM:
        return &batchnorm;
    case SL__OP_LAYERNORM:
        return &layernorm;
    default:
        return NULL;
    }
}
