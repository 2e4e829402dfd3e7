/*
 * ops_conv.c - Conv (1-D and 2-D: strides, pads, dilations, groups,
 * depthwise), MaxPool, AveragePool and GlobalAveragePool, on NCHW samples
 * (a 1-D sample [C, L] is a 2-D one of height 1).
 *
 * A convolution runs per sample and group as im2col + GEMM: cols
 * [C/g * kh * kw, Ho * Wo] from the padded input, Y_g = W_g cols; its
 * backward pass is dW_g += dY_g cols^T and dX += col2im(W_g^T dY_g).
 * Two shapes skip the columns: a 1x1 convolution of stride 1 without
 * padding, whose columns are the input itself (and col2im an addition, so
 * the GEMM accumulates into dX), and a depthwise one (one input and one
 * output channel per group), where each group's GEMM would be a single row
 * and runs as a direct loop over the kernel's taps instead: one
 * multiply-add per tap over each output row, vectorisable.
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

/* cols [cg * kh * kw, ho * wo] of channels [c0, c0 + cg) of one sample plane set @x. */
static void im2col(const geom *g, const float *x, size_t c0, size_t cg, float *cols)
{
    size_t plane = g->ho * g->wo;
    for (size_t ci = 0; ci < cg; ci++)
        for (size_t a = 0; a < g->kh; a++)
            for (size_t b = 0; b < g->kw; b++) {
                float *row = cols + ((ci * g->kh + a) * g->kw + b) * plane;
                const float *xp = x + (c0 + ci) * g->h * g->w;
                for (size_t oh = 0; oh < g->ho; oh++) {
                    long ih = (long)(oh * g->sh + a * g->dh) - (long)g->ph;
                    for (size_t ow = 0; ow < g->wo; ow++) {
                        long iw = (long)(ow * g->sw + b * g->dw) - (long)g->pw;
                        row[oh * g->wo + ow] =
                            ih >= 0 && ih < (long)g->h && iw >= 0 && iw < (long)g->w
                                ? xp[(size_t)ih * g->w + (size_t)iw]
                                : 0.0f;
                    }
                }
            }
}

/* The adjoint of im2col: dx += the columns' gradient, scattered back. */
static void col2im_add(const geom *g, const float *cols, size_t c0, size_t cg, float *dx)
{
    size_t plane = g->ho * g->wo;
    for (size_t ci = 0; ci < cg; ci++)
        for (size_t a = 0; a < g->kh; a++)
            for (size_t b = 0; b < g->kw; b++) {
                const float *row = cols + ((ci * g->kh + a) * g->kw + b) * plane;
                float *xp = dx + (c0 + ci) * g->h * g->w;
                for (size_t oh = 0; oh < g->ho; oh++) {
                    long ih = (long)(oh * g->sh + a * g->dh) - (long)g->ph;
                    if (ih < 0 || ih >= (long)g->h)
                        continue;
                    for (size_t ow = 0; ow < g->wo; ow++) {
                        long iw = (long)(ow * g->sw + b * g->dw) - (long)g->pw;
                        if (iw >= 0 && iw < (long)g->w)
                            xp[(size_t)ih * g->w + (size_t)iw] += row[oh * g->wo + ow];
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

/* The output columns [*lo, *hi) of tap @b whose input column ow sw + b dw - pw lies in
 * [0, w); the same for rows with (h, sh, dh, ph). */
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

/* Depthwise forward of one plane: y (ho x wo) = sum over taps of w[a][b] x shifted. */
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
            for (size_t oh = oh0; oh < oh1; oh++) {
                const float *xr = x + (oh * g->sh + a * g->dh - g->ph) * g->w + b * g->dw - g->pw;
                float *yr = y + oh * g->wo;
                if (g->sw == 1)
                    for (size_t ow = ow0; ow < ow1; ow++)
                        yr[ow] += wv * xr[ow];
                else
                    for (size_t ow = ow0; ow < ow1; ow++)
                        yr[ow] += wv * xr[ow * g->sw];
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
            for (size_t oh = oh0; oh < oh1; oh++) {
                size_t at = (oh * g->sh + a * g->dh - g->ph) * g->w + b * g->dw - g->pw;
                const float *xr = x + at, *dyr = dy + oh * g->wo;
                float *dxr = dx != NULL ? dx + at : NULL;
                if (g->sw == 1) {
                    for (size_t ow = ow0; ow < ow1; ow++)
                        colsum[ow] += dyr[ow] * xr[ow];
                    if (dxr != NULL)
                        for (size_t ow = ow0; ow < ow1; ow++)
                            dxr[ow] += wv * dyr[ow];
                } else {
                    for (size_t ow = ow0; ow < ow1; ow++)
                        colsum[ow] += dyr[ow] * xr[ow * g->sw];
                    if (dxr != NULL)
                        for (size_t ow = ow0; ow < ow1; ow++)
                            dxr[ow * g->sw] += wv * dyr[ow];
                }
            }
            for (size_t ow = ow0; ow < ow1; ow++)
                acc += colsum[ow];
            if (dwt != NULL)
                dwt[a * g->kw + b] += acc;
        }
    }
}

static size_t conv_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    sl__op_ctx c = {0};
    geom g;
    (void)batch;
    c.s = s;
    c.nd = nd;
    get_geom(&c, &g);
    if (is_depthwise(&g))
        return g.wo * sizeof(float); /* a row of column sums */
    if (is_pointwise(&g))
        return 0;
    /* the columns of one group of one sample, and their gradient */
    return 2 * (g.c / g.groups) * g.kh * g.kw * g.ho * g.wo * sizeof(float);
}

static int conv_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    geom g;
    size_t cg, mg, k, plane;
    const float *x = c->val[nd->in[0]], *w = c->val[nd->in[1]];
    const float *bias = nd->nin == 3 && nd->in[2] >= 0 ? c->val[nd->in[2]] : NULL;
    float *y = c->val[nd->out[0]], *cols = c->work;
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
    for (size_t n = 0; n < c->batch; n++) {
        const float *xn = x + n * g.c * g.h * g.w;
        float *yn = y + n * g.m * plane;
        for (size_t gi = 0; gi < g.groups; gi++) {
            int rc;
            if (is_pointwise(&g))
                cols = (float *)(xn + gi * cg * plane); /* read only */
            else
                im2col(&g, xn, gi * cg, cg, cols);
            rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, mg, plane, k, 1.0f, w + gi * mg * k, k,
                             cols, plane, 0.0f, yn + gi * mg * plane, plane);
            if (rc != SL_OK)
                return rc;
        }
        if (bias != NULL)
            for (size_t m = 0; m < g.m; m++)
                for (size_t p = 0; p < plane; p++)
                    yn[m * plane + p] += bias[m];
    }
    return SL_OK;
}

static int conv_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    geom g;
    size_t cg, mg, k, plane;
    const float *x = c->val[nd->in[0]], *w = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dw = c->grad[nd->in[1]];
    float *db = nd->nin == 3 && nd->in[2] >= 0 ? c->grad[nd->in[2]] : NULL;
    float *cols, *dcols;
    get_geom(c, &g);
    cg = g.c / g.groups;
    mg = g.m / g.groups;
    k = cg * g.kh * g.kw;
    plane = g.ho * g.wo;
    cols = c->work;
    dcols = cols + k * plane;
    if (is_depthwise(&g)) {
        for (size_t pl = 0; pl < c->batch * g.c; pl++)
            dw_plane_bwd(&g, x + pl * g.h * g.w, w + (pl % g.c) * g.kh * g.kw, dy + pl * plane,
                         dw != NULL ? dw + (pl % g.c) * g.kh * g.kw : NULL,
                         dx != NULL ? dx + pl * g.h * g.w : NULL, c->work);
        for (size_t pl = 0; db != NULL && pl < c->batch * g.c; pl++) {
            float s = 0.0f;
            for (size_t p = 0; p < plane; p++)
                s += dy[pl * plane + p];
            db[pl % g.c] += s;
        }
        return SL_OK;
    }
    for (size_t n = 0; n < c->batch; n++) {
        const float *xn = x + n * g.c * g.h * g.w, *dyn = dy + n * g.m * plane;
        for (size_t gi = 0; gi < g.groups; gi++) {
            const float *dyg = dyn + gi * mg * plane;
            int rc = SL_OK;
            if (is_pointwise(&g)) { /* the columns are the input; col2im adds */
                if (dw != NULL)
                    rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, mg, k, plane, 1.0f, dyg, plane,
                                     xn + gi * cg * plane, plane, 1.0f, dw + gi * mg * k, k);
                if (rc == SL_OK && dx != NULL)
                    rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, plane, mg, 1.0f,
                                     w + gi * mg * k, k, dyg, plane, 1.0f,
                                     dx + n * g.c * plane + gi * cg * plane, plane);
                if (rc != SL_OK)
                    return rc;
                continue;
            }
            if (dw != NULL) {
                im2col(&g, xn, gi * cg, cg, cols);
                rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, mg, k, plane, 1.0f, dyg, plane, cols,
                                 plane, 1.0f, dw + gi * mg * k, k);
            }
            if (rc == SL_OK && dx != NULL) {
                rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, plane, mg, 1.0f, w + gi * mg * k,
                                 k, dyg, plane, 0.0f, dcols, plane);
                if (rc == SL_OK)
                    col2im_add(&g, dcols, gi * cg, cg, dx + n * g.c * g.h * g.w);
            }
            if (rc != SL_OK)
                return rc;
        }
        if (db != NULL)
            for (size_t m = 0; m < g.m; m++) {
                float s = 0.0f;
                for (size_t p = 0; p < plane; p++)
                    s += dyn[m * plane + p];
                db[m] += s;
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
