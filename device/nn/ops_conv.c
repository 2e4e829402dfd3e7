/*
 * ops_conv.c - Conv (1-D and 2-D: strides, pads, dilations, groups,
 * depthwise), MaxPool, AveragePool and GlobalAveragePool, on NCHW samples
 * (a 1-D sample [C, L] is a 2-D one of height 1).
 *
 * A convolution runs as im2col + GEMM over chunks of samples (as many as
 * keep the chunk's columns and output about cache-sized): cols [C/g * kh *
 * kw, nb * Ho * Wo] (sample j at column j Ho Wo) from the padded input, one
 * GEMM per group Y_g = W_g cols, copied to the samples' NCHW planes; its
 * backward pass gathers dY_g the same way, dW_g += dY_g cols^T and dX +=
 * col2im(W_g^T dY_g). Two shapes skip the columns: a 1x1 convolution of
 * stride 1 without padding, whose columns are the input itself (one GEMM
 * per sample, and col2im an addition, so the GEMM accumulates into dX), and
 * a depthwise one (one input and one output channel per group), where each
 * group's GEMM would be a single row and runs as a direct loop over the
 * kernel's taps instead: one multiply-add per tap over each output row,
 * vectorisable (stride 2 has its own loop with a constant stride).
 *
 * Backward passes honour sl__op_fresh() (graph_int.h): a fresh dX is
 * overwritten, not added to.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

/* The geometry of a Conv or pooling node, as 2-D (1-D: height 1). */
typedef struct geom {
    size_t c, h, w;   /* input channels and plane */
    size_t m, ho, wo; /* output channels and plane */
    size_t kh, kw, sh, sw, dh, dw, ph, pw;
    size_t groups;
} geom;

static void get_geom(const sl__op_ctx *c, geom *g)
{
    const sl__node *nd = c->nd;
    const sl__tensor *x = &c->s->t[nd->in[0]], *y = &c->s->t[nd->out[0]];
    const sl__attrs *a = &nd->a;
    int two = x->ndim == 3;
    g->c = x->shape[0];
    g->h = two ? x->shape[1] : 1;
    g->w = x->shape[two ? 2 : 1];
    g->m = y->shape[0];
    g->ho = two ? y->shape[1] : 1;
    g->wo = y->shape[two ? 2 : 1];
    g->kh = two ? (size_t)a->kernel[0] : 1;
    g->kw = (size_t)a->kernel[two ? 1 : 0];
    g->sh = two ? (size_t)a->stride[0] : 1;
    g->sw = (size_t)a->stride[two ? 1 : 0];
    g->dh = two ? (size_t)a->dilation[0] : 1;
    g->dw = (size_t)a->dilation[two ? 1 : 0];
    g->ph = two ? (size_t)a->pad[0] : 0;
    g->pw = (size_t)a->pad[two ? 1 : 0];
    g->groups = nd->op == SL__OP_CONV ? (size_t)a->group : 1;
}

/* ---- Conv -------------------------------------------------------------------------------- */

/* The output positions [*lo, *hi) of tap @b whose input position o s + b d - p lies in [0, w)
 * (columns: (w, wo, sw, dw, pw); rows: (h, ho, sh, dh, ph)). */
static void tap_range(size_t w, size_t wo, size_t sw, size_t b, size_t dw, size_t pw, size_t *lo,
                      size_t *hi)
{
    long off = (long)(b * dw) - (long)pw, first = 0, last;
    if (off < 0)
        first = (-off + (long)sw - 1) / (long)sw;
    last = (long)w - 1 - off < 0 ? -1 : ((long)w - 1 - off) / (long)sw;
    *lo = (size_t)first < wo ? (size_t)first : wo;
    *hi = last + 1 < first ? *lo : ((size_t)(last + 1) < wo ? (size_t)(last + 1) : wo);
}

/* cols rows [cg * kh * kw] (row stride @ld, ho * wo used) of channels [c0, c0 + cg) of one
 * sample @x. Each tap's valid rectangle comes from tap_range(), so the inner loops are
 * copies (memcpy at stride 1) with the padding zeroed around them. */
static void im2col(const geom *g, const float *x, size_t c0, size_t cg, float *cols, size_t ld)
{
    for (size_t ci = 0; ci < cg; ci++)
        for (size_t a = 0; a < g->kh; a++) {
            size_t rh0, rh1;
            const float *xp = x + (c0 + ci) * g->h * g->w;
            tap_range(g->h, g->ho, g->sh, a, g->dh, g->ph, &rh0, &rh1);
            for (size_t b = 0; b < g->kw; b++) {
                size_t ow0, ow1, oh0 = rh0, oh1 = rh1;
                float *row = cols + ((ci * g->kh + a) * g->kw + b) * ld;
                tap_range(g->w, g->wo, g->sw, b, g->dw, g->pw, &ow0, &ow1);
                if (ow0 == ow1) /* the tap reads padding only */
                    oh0 = oh1 = g->ho;
                memset(row, 0, oh0 * g->wo * sizeof *row);
                for (size_t oh = oh0; oh < oh1; oh++) {
                    float *r = row + oh * g->wo;
                    const float *xr = xp + (oh * g->sh + a * g->dh - g->ph) * g->w +
                                      (ow0 * g->sw + b * g->dw - g->pw);
                    memset(r, 0, ow0 * sizeof *r);
                    if (g->sw == 1)
                        memcpy(r + ow0, xr, (ow1 - ow0) * sizeof *r);
                    else
                        for (size_t j = 0; j < ow1 - ow0; j++)
                            r[ow0 + j] = xr[j * g->sw];
                    memset(r + ow1, 0, (g->wo - ow1) * sizeof *r);
                }
                memset(row + oh1 * g->wo, 0, (g->ho - oh1) * g->wo * sizeof *row);
            }
        }
}

/* The adjoint of im2col: dx += the columns' gradient, scattered back. */
static void col2im_add(const geom *g, const float *cols, size_t ld, size_t c0, size_t cg, float *dx)
{
    for (size_t ci = 0; ci < cg; ci++)
        for (size_t a = 0; a < g->kh; a++) {
            size_t oh0, oh1;
            float *xp = dx + (c0 + ci) * g->h * g->w;
            tap_range(g->h, g->ho, g->sh, a, g->dh, g->ph, &oh0, &oh1);
            for (size_t b = 0; b < g->kw; b++) {
                size_t ow0, ow1;
                const float *row = cols + ((ci * g->kh + a) * g->kw + b) * ld;
                tap_range(g->w, g->wo, g->sw, b, g->dw, g->pw, &ow0, &ow1);
                for (size_t oh = oh0; oh < oh1 && ow0 < ow1; oh++) {
                    const float *r = row + oh * g->wo + ow0;
                    float *xr = xp + (oh * g->sh + a * g->dh - g->ph) * g->w +
                                (ow0 * g->sw + b * g->dw - g->pw);
                    if (g->sw == 1)
                        for (size_t j = 0; j < ow1 - ow0; j++)
                            xr[j] += r[j];
                    else
                        for (size_t j = 0; j < ow1 - ow0; j++)
                            xr[j * g->sw] += r[j];
                }
            }
        }
}

/* 1 when the convolution is depthwise: one input and one output channel per group. */
static int is_depthwise(const geom *g)
{
    return g->groups > 1 && g->groups == g->c && g->groups == g->m;
}

/* 1 when the columns are the input itself: 1x1, stride 1, no padding. */
static int is_pointwise(const geom *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Depthwise forward of one plane: y (ho x wo) = sum over taps of w[a][b] x shifted. Stride
 * 2 has its own loop: a constant stride vectorises. */
static void dw_plane_fwd(const geom *g, const float *x, const float *w, float bias, float *y)
{
    for (size_t i = 0; i < g->ho * g->wo; i++)
        y[i] = bias;
    for (size_t a = 0; a < g->kh; a++) {
        size_t oh0, oh1;
        tap_range(g->h, g->ho, g->sh, a, g->dh, g->ph, &oh0, &oh1);
        for (size_t b = 0; b < g->kw; b++) {
            size_t ow0, ow1;
            float wv = w[a * g->kw + b];
            tap_range(g->w, g->wo, g->sw, b, g->dw, g->pw, &ow0, &ow1);
            for (size_t oh = oh0; oh < oh1 && ow0 < ow1; oh++) {
                const float *xr =
                    x + (oh * g->sh + a * g->dh - g->ph) * g->w + (ow0 * g->sw + b * g->dw - g->pw);
                float *yr = y + oh * g->wo + ow0;
                size_t n = ow1 - ow0;
                if (g->sw == 1)
                    for (size_t j = 0; j < n; j++)
                        yr[j] += wv * xr[j];
                else if (g->sw == 2)
                    for (size_t j = 0; j < n; j++)
                        yr[j] += wv * xr[2 * j];
                else
                    for (size_t j = 0; j < n; j++)
                        yr[j] += wv * xr[j * g->sw];
            }
        }
    }
}

/* Depthwise backward of one plane: dw[a][b] += sum dy x shifted, dx (NULL: skip) += w dy. */
static void dw_plane_bwd(const geom *g, const float *x, const float *w, const float *dy, float *dwt,
                         float *dx, float *colsum)
{
    for (size_t a = 0; a < g->kh; a++) {
        size_t oh0, oh1;
        tap_range(g->h, g->ho, g->sh, a, g->dh, g->ph, &oh0, &oh1);
        for (size_t b = 0; b < g->kw; b++) {
            size_t ow0, ow1;
            float wv = w[a * g->kw + b], acc = 0.0f;
            tap_range(g->w, g->wo, g->sw, b, g->dw, g->pw, &ow0, &ow1);
            /* the weight's gradient summed per column first (a vector of sums, not one
             * long dependency chain), then over the columns */
            memset(colsum, 0, g->wo * sizeof *colsum);
            for (size_t oh = oh0; oh < oh1 && ow0 < ow1; oh++) {
                size_t at =
                    (oh * g->sh + a * g->dh - g->ph) * g->w + (ow0 * g->sw + b * g->dw - g->pw);
                const float *xr = x + at, *dyr = dy + oh * g->wo + ow0;
                float *dxr = dx != NULL ? dx + at : NULL, *cs = colsum + ow0;
                size_t n = ow1 - ow0;
                if (g->sw == 1) {
                    for (size_t j = 0; j < n; j++)
                        cs[j] += dyr[j] * xr[j];
                    if (dxr != NULL)
                        for (size_t j = 0; j < n; j++)
                            dxr[j] += wv * dyr[j];
                } else if (g->sw == 2) {
                    for (size_t j = 0; j < n; j++)
                        cs[j] += dyr[j] * xr[2 * j];
                    if (dxr != NULL)
                        for (size_t j = 0; j < n; j++)
                            dxr[2 * j] += wv * dyr[j];
                } else {
                    for (size_t j = 0; j < n; j++)
                        cs[j] += dyr[j] * xr[j * g->sw];
                    if (dxr != NULL)
                        for (size_t j = 0; j < n; j++)
                            dxr[j * g->sw] += wv * dyr[j];
                }
            }
            for (size_t ow = ow0; ow < ow1; ow++)
                acc += colsum[ow];
            if (dwt != NULL)
                dwt[a * g->kw + b] += acc;
        }
    }
}

/* Samples per GEMM of a (non-depthwise) convolution: its columns and output for the chunk
 * stay within about CONV_CHUNK_BYTES (cache-sized), at least one sample. */
#define CONV_CHUNK_BYTES ((size_t)512 * 1024)

static size_t conv_chunk(const geom *g, size_t batch)
{
    size_t k = g->c / g->groups * g->kh * g->kw, mg = g->m / g->groups;
    size_t per = (k + mg) * g->ho * g->wo * sizeof(float), nb;
    nb = per > 0 ? CONV_CHUNK_BYTES / per : batch;
    return nb < 1 ? 1 : (nb > batch ? batch : nb);
}

static size_t conv_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    sl__op_ctx c = {0};
    geom g;
    c.s = s;
    c.nd = nd;
    get_geom(&c, &g);
    if (is_depthwise(&g))
        return g.wo * sizeof(float); /* a row of column sums */
    if (is_pointwise(&g))
        return 0;
    /* per chunk: the columns (or their gradient) and the output (or its gradient) */
    return (g.c / g.groups * g.kh * g.kw + g.m / g.groups) * conv_chunk(&g, batch) * g.ho * g.wo *
           sizeof(float);
}

static int conv_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    geom g;
    size_t cg, mg, k, plane, nb;
    const float *x = c->val[nd->in[0]], *w = c->val[nd->in[1]];
    const float *bias = nd->nin == 3 && nd->in[2] >= 0 ? c->val[nd->in[2]] : NULL;
    float *y = c->val[nd->out[0]], *cols = c->work, *out;
    get_geom(c, &g);
    cg = g.c / g.groups;
    mg = g.m / g.groups;
    k = cg * g.kh * g.kw;
    plane = g.ho * g.wo;
    if (is_depthwise(&g)) {
        for (size_t pl = 0; pl < c->batch * g.c; pl++)
            dw_plane_fwd(&g, x + pl * g.h * g.w, w + (pl % g.c) * g.kh * g.kw,
                         bias != NULL ? bias[pl % g.c] : 0.0f, y + pl * plane);
        return SL_OK;
    }
    if (is_pointwise(&g)) { /* the columns are the input: one GEMM per sample and group */
        for (size_t n = 0; n < c->batch; n++)
            for (size_t gi = 0; gi < g.groups; gi++) {
                float *yg = y + (n * g.m + gi * mg) * plane;
                int rc =
                    sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, mg, plane, k, 1.0f, w + gi * mg * k,
                                k, x + (n * g.c + gi * cg) * plane, plane, 0.0f, yg, plane);
                if (rc != SL_OK)
                    return rc;
                for (size_t m = 0; bias != NULL && m < mg; m++)
                    for (size_t p = 0; p < plane; p++)
                        yg[m * plane + p] += bias[gi * mg + m];
            }
        return SL_OK;
    }
    /* a chunk of nb samples at once: cols [k, nb plane] (sample j at column j plane), one
     * GEMM per group into out [mg, nb plane], then copied to the samples' NCHW planes */
    nb = conv_chunk(&g, c->batch);
    out = cols + k * nb * plane;
    for (size_t n0 = 0; n0 < c->batch; n0 += nb) {
        size_t cnt = c->batch - n0 < nb ? c->batch - n0 : nb, ld = cnt * plane;
        for (size_t gi = 0; gi < g.groups; gi++) {
            int rc;
            for (size_t j = 0; j < cnt; j++)
                im2col(&g, x + (n0 + j) * g.c * g.h * g.w, gi * cg, cg, cols + j * plane, ld);
            rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, mg, ld, k, 1.0f, w + gi * mg * k, k,
                             cols, ld, 0.0f, out, ld);
            if (rc != SL_OK)
                return rc;
            for (size_t j = 0; j < cnt; j++)
                for (size_t m = 0; m < mg; m++) {
                    const float *src = out + m * ld + j * plane;
                    float *dst = y + ((n0 + j) * g.m + gi * mg + m) * plane;
                    float bv = bias != NULL ? bias[gi * mg + m] : 0.0f;
                    for (size_t p = 0; p < plane; p++)
                        dst[p] = src[p] + bv;
                }
        }
    }
    return SL_OK;
}

static int conv_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    geom g;
    size_t cg, mg, k, plane, nb;
    const float *x = c->val[nd->in[0]], *w = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dw = c->grad[nd->in[1]];
    float *db = nd->nin == 3 && nd->in[2] >= 0 ? c->grad[nd->in[2]] : NULL;
    float *cols = c->work, *dyc;
    int assign = dx != NULL && sl__op_fresh(c, nd->in[0]);
    get_geom(c, &g);
    cg = g.c / g.groups;
    mg = g.m / g.groups;
    k = cg * g.kh * g.kw;
    plane = g.ho * g.wo;
    for (size_t pl = 0; db != NULL && pl < c->batch * g.m; pl++) {
        float s = 0.0f;
        for (size_t p = 0; p < plane; p++)
            s += dy[pl * plane + p];
        db[pl % g.m] += s;
    }
    if (is_depthwise(&g)) {
        if (assign)
            memset(dx, 0, c->batch * g.c * g.h * g.w * sizeof *dx);
        for (size_t pl = 0; pl < c->batch * g.c; pl++)
            dw_plane_bwd(&g, x + pl * g.h * g.w, w + (pl % g.c) * g.kh * g.kw, dy + pl * plane,
                         dw != NULL ? dw + (pl % g.c) * g.kh * g.kw : NULL,
                         dx != NULL ? dx + pl * g.h * g.w : NULL, c->work);
        return SL_OK;
    }
    if (is_pointwise(&g)) { /* the columns are the input; col2im adds (or assigns) */
        for (size_t n = 0; n < c->batch; n++)
            for (size_t gi = 0; gi < g.groups; gi++) {
                const float *dyg = dy + (n * g.m + gi * mg) * plane;
                const float *xg = x + (n * g.c + gi * cg) * plane;
                int rc = SL_OK;
                if (dw != NULL)
                    rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, mg, k, plane, 1.0f, dyg, plane,
                                     xg, plane, 1.0f, dw + gi * mg * k, k);
                if (rc == SL_OK && dx != NULL)
                    rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, plane, mg, 1.0f,
                                     w + gi * mg * k, k, dyg, plane, assign ? 0.0f : 1.0f,
                                     dx + (n * g.c + gi * cg) * plane, plane);
                if (rc != SL_OK)
                    return rc;
            }
        return SL_OK;
    }
    /* per chunk and group: dyc [mg, nb plane] gathered from dY; dW_g += dyc cols^T; the
     * columns' gradient W_g^T dyc (into the columns' space, done with) goes back by col2im */
    nb = conv_chunk(&g, c->batch);
    dyc = cols + k * nb * plane;
    if (assign)
        memset(dx, 0, c->batch * g.c * g.h * g.w * sizeof *dx);
    for (size_t n0 = 0; n0 < c->batch; n0 += nb) {
        size_t cnt = c->batch - n0 < nb ? c->batch - n0 : nb, ld = cnt * plane;
        for (size_t gi = 0; gi < g.groups; gi++) {
            int rc = SL_OK;
            for (size_t j = 0; j < cnt; j++)
                for (size_t m = 0; m < mg; m++)
                    memcpy(dyc + m * ld + j * plane, dy + ((n0 + j) * g.m + gi * mg + m) * plane,
                           plane * sizeof *dyc);
            if (dw != NULL) {
                for (size_t j = 0; j < cnt; j++)
                    im2col(&g, x + (n0 + j) * g.c * g.h * g.w, gi * cg, cg, cols + j * plane, ld);
                rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, mg, k, ld, 1.0f, dyc, ld, cols, ld,
                                 1.0f, dw + gi * mg * k, k);
            }
            if (rc == SL_OK && dx != NULL) {
                rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, ld, mg, 1.0f, w + gi * mg * k, k,
                                 dyc, ld, 0.0f, cols, ld);
                for (size_t j = 0; rc == SL_OK && j < cnt; j++)
                    col2im_add(&g, cols + j * plane, ld, gi * cg, cg,
                               dx + (n0 + j) * g.c * g.h * g.w);
            }
            if (rc != SL_OK)
                return rc;
        }
    }
    return SL_OK;
}

/* ---- MaxPool: keeps the position of each window's first maximum -------------------------- */

static size_t pool_aux(const sl_spec *s, const sl__node *nd, size_t batch)
{
    return batch * s->t[nd->out[0]].count * sizeof(int32_t);
}

static int maxpool_fwd(const sl__op_ctx *c)
{
    geom g;
    const float *x = c->val[c->nd->in[0]];
    float *y = c->val[c->nd->out[0]];
    int32_t *arg = c->aux;
    get_geom(c, &g);
    for (size_t pl = 0; pl < c->batch * g.c; pl++) {
        const float *xp = x + pl * g.h * g.w;
        for (size_t oh = 0; oh < g.ho; oh++)
            for (size_t ow = 0; ow < g.wo; ow++) {
                float best = -FLT_MAX;
                int32_t at = -1;
                for (size_t a = 0; a < g.kh; a++) {
                    long ih = (long)(oh * g.sh + a) - (long)g.ph;
                    if (ih < 0 || ih >= (long)g.h)
                        continue;
                    for (size_t b = 0; b < g.kw; b++) {
                        long iw = (long)(ow * g.sw + b) - (long)g.pw;
                        float v;
                        if (iw < 0 || iw >= (long)g.w)
                            continue;
                        v = xp[(size_t)ih * g.w + (size_t)iw];
                        if (at < 0 || v > best || isnan(v)) {
                            best = v;
                            at = (int32_t)((size_t)ih * g.w + (size_t)iw);
                            if (isnan(v))
                                goto done; /* NaN propagates, as in PyTorch */
                        }
                    }
                }
            done:
                y[(pl * g.ho + oh) * g.wo + ow] = best;
                arg[(pl * g.ho + oh) * g.wo + ow] = at;
            }
    }
    return SL_OK;
}

static int maxpool_bwd(const sl__op_ctx *c)
{
    geom g;
    const float *dy = c->grad[c->nd->out[0]];
    float *dx = c->grad[c->nd->in[0]];
    const int32_t *arg = c->aux;
    if (dx == NULL)
        return SL_OK;
    get_geom(c, &g);
    if (sl__op_fresh(c, c->nd->in[0]))
        memset(dx, 0, c->batch * g.c * g.h * g.w * sizeof *dx);
    for (size_t pl = 0; pl < c->batch * g.c; pl++)
        for (size_t o = 0; o < g.ho * g.wo; o++)
            if (arg[pl * g.ho * g.wo + o] >= 0)
                dx[pl * g.h * g.w + (size_t)arg[pl * g.ho * g.wo + o]] += dy[pl * g.ho * g.wo + o];
    return SL_OK;
}

/* ---- AveragePool ------------------------------------------------------------------------- */

/* The window of output (oh, ow) clipped to the plane, and the divisor. */
static void avg_window(const geom *g, int include_pad, size_t oh, size_t ow, long *h0, long *h1,
                       long *w0, long *w1, float *div)
{
    long a = (long)(oh * g->sh) - (long)g->ph, b = (long)(ow * g->sw) - (long)g->pw;
    *h0 = a < 0 ? 0 : a;
    *h1 = a + (long)g->kh > (long)g->h ? (long)g->h : a + (long)g->kh;
    *w0 = b < 0 ? 0 : b;
    *w1 = b + (long)g->kw > (long)g->w ? (long)g->w : b + (long)g->kw;
    if (include_pad) {
        /* PyTorch counts the padding but not what lies beyond it */
        long he = a + (long)g->kh > (long)(g->h + g->ph) ? (long)(g->h + g->ph) : a + (long)g->kh;
        long we = b + (long)g->kw > (long)(g->w + g->pw) ? (long)(g->w + g->pw) : b + (long)g->kw;
        *div = (float)((he - a) * (we - b));
    } else {
        *div = (float)((*h1 - *h0) * (*w1 - *w0));
    }
}

static int avgpool_fwd(const sl__op_ctx *c)
{
    geom g;
    const float *x = c->val[c->nd->in[0]];
    float *y = c->val[c->nd->out[0]];
    int inc = c->nd->a.count_include_pad;
    get_geom(c, &g);
    for (size_t pl = 0; pl < c->batch * g.c; pl++)
        for (size_t oh = 0; oh < g.ho; oh++)
            for (size_t ow = 0; ow < g.wo; ow++) {
                long h0, h1, w0, w1;
                float div, s = 0.0f;
                avg_window(&g, inc, oh, ow, &h0, &h1, &w0, &w1, &div);
                for (long ih = h0; ih < h1; ih++)
                    for (long iw = w0; iw < w1; iw++)
                        s += x[pl * g.h * g.w + (size_t)ih * g.w + (size_t)iw];
                y[(pl * g.ho + oh) * g.wo + ow] = s / div;
            }
    return SL_OK;
}

static int avgpool_bwd(const sl__op_ctx *c)
{
    geom g;
    const float *dy = c->grad[c->nd->out[0]];
    float *dx = c->grad[c->nd->in[0]];
    int inc = c->nd->a.count_include_pad;
    if (dx == NULL)
        return SL_OK;
    get_geom(c, &g);
    if (sl__op_fresh(c, c->nd->in[0]))
        memset(dx, 0, c->batch * g.c * g.h * g.w * sizeof *dx);
    for (size_t pl = 0; pl < c->batch * g.c; pl++)
        for (size_t oh = 0; oh < g.ho; oh++)
            for (size_t ow = 0; ow < g.wo; ow++) {
                long h0, h1, w0, w1;
                float div, d;
                avg_window(&g, inc, oh, ow, &h0, &h1, &w0, &w1, &div);
                d = dy[(pl * g.ho + oh) * g.wo + ow] / div;
                for (long ih = h0; ih < h1; ih++)
                    for (long iw = w0; iw < w1; iw++)
                        dx[pl * g.h * g.w + (size_t)ih * g.w + (size_t)iw] += d;
            }
    return SL_OK;
}

/* ---- GlobalAveragePool: the mean of each channel's plane --------------------------------- */

static int gap_fwd(const sl__op_ctx *c)
{
    const sl__tensor *x = &c->s->t[c->nd->in[0]];
    size_t ch = x->shape[0], plane = x->count / ch;
    const float *xv = c->val[c->nd->in[0]];
    float *y = c->val[c->nd->out[0]];
    for (size_t pl = 0; pl < c->batch * ch; pl++) {
        double s = 0.0;
        for (size_t i = 0; i < plane; i++)
            s += xv[pl * plane + i];
        y[pl] = (float)(s / (double)plane);
    }
    return SL_OK;
}

static int gap_bwd(const sl__op_ctx *c)
{
    const sl__tensor *x = &c->s->t[c->nd->in[0]];
    size_t ch = x->shape[0], plane = x->count / ch;
    const float *dy = c->grad[c->nd->out[0]];
    float *dx = c->grad[c->nd->in[0]];
    if (dx == NULL)
        return SL_OK;
    for (size_t pl = 0; pl < c->batch * ch; pl++) {
        float d = dy[pl] / (float)plane;
        if (sl__op_fresh(c, c->nd->in[0]))
            for (size_t i = 0; i < plane; i++)
                dx[pl * plane + i] = d;
        else
            for (size_t i = 0; i < plane; i++)
                dx[pl * plane + i] += d;
    }
    return SL_OK;
}

static const sl__op_impl conv = {NULL, conv_work, conv_fwd, conv_bwd, NULL};
static const sl__op_impl maxpool = {pool_aux, NULL, maxpool_fwd, maxpool_bwd, NULL};
static const sl__op_impl avgpool = {NULL, NULL, avgpool_fwd, avgpool_bwd, NULL};
static const sl__op_impl gap = {NULL, NULL, gap_fwd, gap_bwd, NULL};

const sl__op_impl *sl__ops_conv(sl__op op)
{
    switch (op) {
    case SL__OP_CONV:
        return &conv;
    case SL__OP_MAXPOOL:
        return &maxpool;
    case SL__OP_AVGPOOL:
        return &avgpool;
    case SL__OP_GLOBALAVGPOOL:
        return &gap;
    default:
        return NULL;
    }
}
