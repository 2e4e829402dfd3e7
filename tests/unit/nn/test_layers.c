/*
 * Layers: every forward pass against a double-precision reference, every
 * backward pass against central finite differences of that reference
 * (loss = sum(r * y) for a random r, so dL/dy = r), on small and odd
 * shapes; conv 3x3 and 5x5 with and without padding by both algorithms,
 * including a batch split into im2col chunks; max-pooling with ties and
 * odd sizes; softmax cross-entropy with huge logits. Then every
 * element-wise SIMD variant against the scalar reference: bit for bit
 * where the operation is exact, within rounding for the convolution sums.
 */
#include <math.h>

#include "../../support/sl_test.h"
#include "starling/nn.h"
#include "../../../device/nn/nn_int.h"

/* Step of the central differences, in double. The layers are linear or
 * piecewise linear in each input (exact differences away from kinks, and a
 * small step rarely straddles one); for softmax the truncation error is
 * about h^2. */
#define FD_H 1e-6

static uint64_t rng = 0x1234567;

static float urand(void) /* [-1, 1) */
{
    return (float)(sl_test_rand(&rng) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *frand(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = urand();
    return p;
}

static double *dcopy(const float *f, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

/* ||a - ref|| / ||ref|| (absolute when ref is 0). */
static double rel_err(const float *a, const double *ref, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += (a[i] - ref[i]) * (a[i] - ref[i]);
        r += ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Finite differences of @loss with respect to the n doubles at @p. */
static void fd(double (*loss)(void *), void *ctx, double *p, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++) {
        double keep = p[i], lp, lm;
        p[i] = keep + FD_H;
        lp = loss(ctx);
        p[i] = keep - FD_H;
        lm = loss(ctx);
        p[i] = keep;
        out[i] = (lp - lm) / (2 * FD_H);
    }
}

static void check_grad(const char *what, double (*loss)(void *), void *ctx, double *p,
                       const float *ours, size_t n, double tol)
{
    double *num = malloc((n ? n : 1) * sizeof *num);
    assert_non_null(num);
    fd(loss, ctx, p, n, num);
    double e = rel_err(ours, num, n);
    if (e > tol)
        printf("  %s: relative error %.3e > %.1e\n", what, e, tol);
    assert_true(e <= tol);
    free(num);
}

/* ------------------------------------------------------------------------ */
/* Dense                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct dense_ref {
    size_t b, in, out;
    int relu;
    double *x, *w, *bias, *r;
} dense_ref;

static double dense_ref_y(const dense_ref *d, size_t n, size_t o)
{
    double s = d->bias[o];
    for (size_t i = 0; i < d->in; i++)
        s += d->x[n * d->in + i] * d->w[o * d->in + i];
    return d->relu && s < 0 ? 0 : s;
}

static double dense_loss(void *ctx)
{
    const dense_ref *d = ctx;
    double l = 0;
    for (size_t n = 0; n < d->b; n++)
        for (size_t o = 0; o < d->out; o++)
            l += d->r[n * d->out + o] * dense_ref_y(d, n, o);
    return l;
}

/* Run @body once with each element-wise variant built for this CPU. */
static void each_variant(void (*body)(void))
{
    static const unsigned all[] = {0, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (sl__nn_elementwise_use(all[i]) == SL_OK)
            body();
    assert_int_equal(sl__nn_elementwise_use(SL__NN_EW_AUTO), SL_OK);
}

static void dense_all(void)
{
    static const size_t shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {4, 17, 9}, {2, 33, 20}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int relu = 0; relu < 2; relu++) {
            size_t b = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            float *x = frand(b * in), *w = frand(out * in), *bias = frand(out), *r = frand(b * out);
            float *y = frand(b * out), *dy = malloc(b * out * 4), *dw = frand(out * in);
            float *db = frand(out), *dx = frand(b * in);
            dense_ref d = {b,
                           in,
                           out,
                           relu,
                           dcopy(x, b * in),
                           dcopy(w, out * in),
                           dcopy(bias, out),
                           dcopy(r, b * out)};
            assert_int_equal(sl__nn_dense_forward(x, b, in, out, w, bias, relu, y), SL_OK);
            for (size_t n = 0; n < b; n++)
                for (size_t o = 0; o < out; o++)
                    assert_true(fabs(y[n * out + o] - dense_ref_y(&d, n, o)) <= 1e-5);
            memcpy(dy, r, b * out * 4);
            assert_int_equal(sl__nn_dense_backward(x, y, relu, dy, b, in, out, w, dw, db, dx),
                             SL_OK);
            check_grad("dense dw", dense_loss, &d, d.w, dw, out * in, 1e-5);
            check_grad("dense db", dense_loss, &d, d.bias, db, out, 1e-5);
            check_grad("dense dx", dense_loss, &d, d.x, dx, b * in, 1e-5);
            free(x), free(w), free(bias), free(r), free(y), free(dy), free(dw), free(db), free(dx);
            free(d.x), free(d.w), free(d.bias), free(d.r);
        }
    }
}

static void test_dense(void **state)
{
    (void)state;
    each_variant(dense_all);
}

/* ------------------------------------------------------------------------ */
/* Convolution                                                              */
/* ------------------------------------------------------------------------ */

typedef struct conv_ref {
    sl__nn_conv c;
    size_t b;
    double *x, *w, *bias, *r; /* x, y CNHW; w [cout, cin, k, k] */
} conv_ref;

static double conv_ref_y(const conv_ref *d, size_t co, size_t n, size_t oh, size_t ow)
{
    const sl__nn_conv *c = &d->c;
    double s = d->bias[co];
    for (size_t ci = 0; ci < c->cin; ci++)
        for (size_t kh = 0; kh < c->k; kh++)
            for (size_t kw = 0; kw < c->k; kw++) {
                long ih = (long)(oh + kh) - (long)c->pad, iw = (long)(ow + kw) - (long)c->pad;
                if (ih < 0 || iw < 0 || ih >= (long)c->h || iw >= (long)c->w)
                    continue;
                s += d->w[((co * c->cin + ci) * c->k + kh) * c->k + kw] *
                     d->x[((ci * d->b + n) * c->h + (size_t)ih) * c->w + (size_t)iw];
            }
    return s;
}

static double conv_loss(void *ctx)
{
    const conv_ref *d = ctx;
    const sl__nn_conv *c = &d->c;
    double l = 0;
    size_t i = 0;
    for (size_t co = 0; co < c->cout; co++)
        for (size_t n = 0; n < d->b; n++)
            for (size_t oh = 0; oh < c->ho; oh++)
                for (size_t ow = 0; ow < c->wo; ow++)
                    l += d->r[i++] * conv_ref_y(d, co, n, oh, ow);
    return l;
}

/* The reference's own backward pass (for shapes too large for differences). */
static void conv_ref_grads(const conv_ref *d, double *dw, double *db, double *dx)
{
    const sl__nn_conv *c = &d->c;
    size_t i = 0;
    memset(dw, 0, c->cout * c->cin * c->k * c->k * sizeof *dw);
    memset(dx, 0, c->cin * d->b * c->h * c->w * sizeof *dx);
    for (size_t co = 0; co < c->cout; co++) {
        db[co] = 0;
        for (size_t n = 0; n < d->b; n++)
            for (size_t oh = 0; oh < c->ho; oh++)
                for (size_t ow = 0; ow < c->wo; ow++, i++) {
                    double g = d->r[i];
                    db[co] += g;
                    for (size_t ci = 0; ci < c->cin; ci++)
                        for (size_t kh = 0; kh < c->k; kh++)
                            for (size_t kw = 0; kw < c->k; kw++) {
                                long ih = (long)(oh + kh) - (long)c->pad;
                                long iw = (long)(ow + kw) - (long)c->pad;
                                if (ih < 0 || iw < 0 || ih >= (long)c->h || iw >= (long)c->w)
                                    continue;
                                size_t wi = ((co * c->cin + ci) * c->k + kh) * c->k + kw;
                                size_t xi =
                                    ((ci * d->b + n) * c->h + (size_t)ih) * c->w + (size_t)iw;
                                dw[wi] += g * d->x[xi];
                                dx[xi] += g * d->w[wi];
                            }
                }
    }
}

/* One shape by one algorithm: forward vs the reference; backward vs finite
 * differences (@fd_check) or vs the reference's backward (large shapes). */
static void conv_case(size_t b, size_t cin, size_t cout, size_t h, size_t w, size_t k, size_t pad,
                      sl__nn_conv_algo algo, int fd_check)
{
    conv_ref d = {{0}, b, NULL, NULL, NULL, NULL};
    sl__nn_conv *c = &d.c;
    assert_int_equal(sl__nn_conv_init(c, cin, cout, h, w, k, pad), SL_OK);
    if (sl__nn_conv_set_algo(c, algo) != SL_OK) {
        assert_true(algo == SL__NN_CONV_DIRECT && (cin != 1 || k > SL__NN_DIRECT_MAX_K));
        return;
    }
    size_t nx = cin * b * h * w, ny = cout * b * c->ho * c->wo, nw = cout * cin * k * k;
    float *x = frand(nx), *wt = frand(nw), *bias = frand(cout), *r = frand(ny), *y = frand(ny);
    float *dw = frand(nw), *db = frand(cout), *dx = frand(nx);
    float *ws = frand(sl__nn_conv_workspace(c, b));
    d.x = dcopy(x, nx), d.w = dcopy(wt, nw), d.bias = dcopy(bias, cout), d.r = dcopy(r, ny);
    assert_int_equal(sl__nn_conv_forward(c, b, x, wt, bias, y, ws), SL_OK);
    size_t i = 0;
    for (size_t co = 0; co < cout; co++)
        for (size_t n = 0; n < b; n++)
            for (size_t oh = 0; oh < c->ho; oh++)
                for (size_t ow = 0; ow < c->wo; ow++, i++)
                    assert_true(fabs(y[i] - conv_ref_y(&d, co, n, oh, ow)) <= 1e-4);
    assert_int_equal(sl__nn_conv_backward(c, b, x, wt, r, dw, db, dx, ws), SL_OK);
    if (fd_check) {
        check_grad("conv dw", conv_loss, &d, d.w, dw, nw, 1e-5);
        check_grad("conv db", conv_loss, &d, d.bias, db, cout, 1e-5);
        check_grad("conv dx", conv_loss, &d, d.x, dx, nx, 1e-5);
    } else {
        double *rdw = malloc(nw * sizeof *rdw), *rdb = malloc(cout * sizeof *rdb);
        double *rdx = malloc(nx * sizeof *rdx);
        assert_non_null(rdw), assert_non_null(rdb), assert_non_null(rdx);
        conv_ref_grads(&d, rdw, rdb, rdx);
        assert_true(rel_err(dw, rdw, nw) <= 1e-5);
        assert_true(rel_err(db, rdb, cout) <= 1e-5);
        assert_true(rel_err(dx, rdx, nx) <= 1e-5);
        free(rdw), free(rdb), free(rdx);
    }
    free(x), free(wt), free(bias), free(r), free(y), free(dw), free(db), free(dx), free(ws);
    free(d.x), free(d.w), free(d.bias), free(d.r);
}

static void conv_all(void);

static void test_conv(void **state)
{
    (void)state;
    /* the reference backward itself against differences */
    conv_ref d = {{0}, 2, NULL, NULL, NULL, NULL};
    assert_int_equal(sl__nn_conv_init(&d.c, 2, 3, 6, 7, 3, 1), SL_OK);
    size_t nx = 2 * 2 * 42, nw = 3 * 2 * 9, ny = 3 * 2 * 42;
    float *fx = frand(nx), *fw = frand(nw), *fb = frand(3), *fr = frand(ny), *f_dw = malloc(nw * 4);
    double rdw[54], rdb[3], rdx[168];
    d.x = dcopy(fx, nx), d.w = dcopy(fw, nw), d.bias = dcopy(fb, 3), d.r = dcopy(fr, ny);
    conv_ref_grads(&d, rdw, rdb, rdx);
    for (size_t i = 0; i < nw; i++)
        f_dw[i] = (float)rdw[i];
    check_grad("reference conv dw", conv_loss, &d, d.w, f_dw, nw, 1e-6);
    free(fx), free(fw), free(fb), free(fr), free(f_dw), free(d.x), free(d.w), free(d.bias),
        free(d.r);
    each_variant(conv_all);
}

static void conv_all(void)
{

    /* b, cin, cout, h, w, k, pad */
    static const size_t shapes[][7] = {
        {2, 2, 3, 7, 6, 3, 0},  {2, 2, 3, 7, 9, 3, 1},  {3, 3, 2, 9, 8, 5, 0},
        {2, 2, 4, 8, 7, 5, 2},  {2, 1, 5, 9, 11, 5, 2}, {3, 1, 3, 6, 5, 3, 1},
        {2, 1, 7, 5, 40, 3, 0}, {1, 1, 9, 4, 21, 5, 2}, {2, 1, 2, 3, 3, 3, 1},
        {2, 2, 2, 5, 5, 5, 0},  {1, 1, 1, 1, 1, 1, 0},  {1, 1, 3, 5, 37, 5, 1},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 2; a++)
            conv_case(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
                      shapes[s][5], shapes[s][6], (sl__nn_conv_algo)a, 1);
}

/* cnn's c2 at batch 7: cols goes over SL__NN_COLS_ONE_BYTES, so the batch
 * is split into im2col chunks (the backward pass recomputes cols and
 * accumulates dW over the chunks). Checked against the reference's
 * backward pass, which the small shapes check against differences. */
static void test_conv_chunked(void **state)
{
    (void)state;
    conv_case(7, 32, 2, 14, 14, 5, 2, SL__NN_CONV_IM2COL, 0);
    sl__nn_conv c;
    assert_int_equal(sl__nn_conv_init(&c, 32, 2, 14, 14, 5, 2), SL_OK);
    assert_true(sl__nn_conv_workspace(&c, 7) < 32 * 25 * 196 * 7);
}

static void test_conv_rejects(void **state)
{
    sl__nn_conv c;
    (void)state;
    assert_int_equal(sl__nn_conv_init(&c, 1, 1, 8, 8, 4, 0), SL_EINVAL);
    assert_int_equal(sl__nn_conv_init(&c, 1, 1, 2, 8, 5, 0), SL_EINVAL);
    assert_int_equal(sl__nn_conv_init(&c, 0, 1, 8, 8, 3, 0), SL_EINVAL);
    assert_int_equal(sl__nn_conv_init(&c, 2, 1, 8, 8, 3, 1), SL_OK);
    assert_int_equal(c.algo, SL__NN_CONV_IM2COL);
    assert_int_equal(sl__nn_conv_set_algo(&c, SL__NN_CONV_DIRECT), SL_EINVAL);
    assert_int_equal(sl__nn_conv_init(&c, 1, 6, 28, 28, 5, 0), SL_OK);
    assert_int_equal(c.algo, sl__nn_ew()->features & (SL_CPU_AVX512 | SL_CPU_AVX2)
                                 ? SL__NN_CONV_DIRECT
                                 : SL__NN_CONV_IM2COL);
    assert_int_equal(sl__nn_conv_init(&c, 1, 32, 28, 28, 5, 2), SL_OK);
    assert_int_equal(c.algo, sl__nn_ew()->features & SL_CPU_AVX512 ? SL__NN_CONV_DIRECT
                                                                   : SL__NN_CONV_IM2COL);
}

/* ------------------------------------------------------------------------ */
/* Pooling, ReLU, flatten                                                   */
/* ------------------------------------------------------------------------ */

typedef struct pool_ref {
    size_t ch, b, h, w;
    int relu;
    double *x, *bias, *r; /* r laid out like y (CNHW) */
} pool_ref;

/* The reference: first maximum of the window, row-major. */
static double pool_ref_y(const pool_ref *d, size_t c, size_t n, size_t i, size_t j, int *at)
{
    const double *p = d->x + (c * d->b + n) * d->h * d->w;
    double m = p[2 * i * d->w + 2 * j];
    *at = 0;
    for (int q = 1; q < 4; q++) {
        double v = p[(2 * i + (size_t)(q >> 1)) * d->w + 2 * j + (size_t)(q & 1)];
        if (v > m)
            m = v, *at = q;
    }
    m += d->bias != NULL ? d->bias[c] : 0;
    if (d->relu && !(m > 0))
        m = 0, *at = SL__NN_POOL_DEAD;
    return m;
}

static double pool_loss(void *ctx)
{
    const pool_ref *d = ctx;
    size_t ho = d->h / 2, wo = d->w / 2, k = 0;
    double l = 0;
    int at;
    for (size_t c = 0; c < d->ch; c++)
        for (size_t n = 0; n < d->b; n++)
            for (size_t i = 0; i < ho; i++)
                for (size_t j = 0; j < wo; j++)
                    l += d->r[k++] * pool_ref_y(d, c, n, i, j, &at);
    return l;
}

static void pool_case(size_t ch, size_t b, size_t h, size_t w, int relu, int with_bias, int nchw,
                      int ties)
{
    size_t nx = ch * b * h * w, ny = ch * b * (h / 2) * (w / 2), hw = (h / 2) * (w / 2);
    float *x = frand(nx), *bias = with_bias ? frand(ch) : NULL, *r = frand(ny), *y = frand(ny);
    float *dy = malloc(ny * 4), *dx = frand(nx), dbias[16];
    uint8_t *arg = malloc(ny);
    if (ties) /* few distinct values: many windows with several maxima */
        for (size_t i = 0; i < nx; i++)
            x[i] = (float)(int)(x[i] * 2.0f) * 0.5f;
    pool_ref d = {ch,          b, h, w, relu, dcopy(x, nx), with_bias ? dcopy(bias, ch) : NULL,
                  dcopy(r, ny)};
    sl__nn_pool_forward(x, ch, b, h, w, bias, relu, nchw, y, arg);
    /* dy in y's layout: the reference's r is CNHW */
    for (size_t c = 0; c < ch; c++)
        for (size_t n = 0; n < b; n++)
            for (size_t i = 0; i < hw; i++) {
                size_t o = (nchw ? n * ch + c : c * b + n) * hw + i;
                int at;
                double ref = pool_ref_y(&d, c, n, i / (w / 2), i % (w / 2), &at);
                assert_true(fabs(y[o] - ref) <= 1e-6);
                assert_int_equal(arg[o], at);
                dy[o] = r[(c * b + n) * hw + i];
            }
    sl__nn_pool_backward(dy, arg, ch, b, h, w, nchw, dx, with_bias ? dbias : NULL);
    if (!ties) {
        check_grad("pool dx", pool_loss, &d, d.x, dx, nx, 1e-6);
        if (with_bias)
            check_grad("pool dbias", pool_loss, &d, d.bias, dbias, ch, 1e-5);
    } else { /* the gradient goes to the first maximum, and only there */
        for (size_t c = 0; c < ch; c++)
            for (size_t n = 0; n < b; n++)
                for (size_t i = 0; i < h; i++)
                    for (size_t j = 0; j < w; j++) {
                        size_t oi = i / 2, oj = j / 2, q = (i & 1) * 2 + (j & 1);
                        float want = 0.0f;
                        int at;
                        if (oi < h / 2 && oj < w / 2) {
                            size_t o = (nchw ? n * ch + c : c * b + n) * hw + oi * (w / 2) + oj;
                            pool_ref_y(&d, c, n, oi, oj, &at);
                            want = at == (int)q ? dy[o] : 0.0f;
                        }
                        assert_true(dx[((c * b + n) * h + i) * w + j] == want);
                    }
    }
    free(x), free(bias), free(r), free(y), free(dy), free(dx), free(arg);
    free(d.x), free(d.bias), free(d.r);
}

static void pool_all(void)
{
    for (int ties = 0; ties < 2; ties++)
        for (int relu = 0; relu < 2; relu++)
            for (int nchw = 0; nchw < 2; nchw++) {
                pool_case(3, 2, 6, 8, relu, relu, nchw, ties);
                pool_case(2, 3, 7, 5, relu, 1, nchw, ties);  /* odd: floor */
                pool_case(1, 2, 4, 70, relu, 0, nchw, ties); /* several vectors per row */
                pool_case(2, 1, 24, 24, relu, 1, nchw, ties);
                pool_case(1, 1, 2, 2, relu, 1, nchw, ties);
            }
}

static void test_pool(void **state)
{
    (void)state;
    each_variant(pool_all);
}

typedef struct relu_ref {
    size_t n;
    double *x, *r;
} relu_ref;

static double relu_loss(void *ctx)
{
    const relu_ref *d = ctx;
    double l = 0;
    for (size_t i = 0; i < d->n; i++)
        l += d->r[i] * (d->x[i] > 0 ? d->x[i] : 0);
    return l;
}

static void relu_all(void)
{
    size_t n = 77;
    float *x = frand(n), *y = frand(n), *r = frand(n), *dx = frand(n);
    relu_ref d = {n, dcopy(x, n), dcopy(r, n)};
    sl__nn_relu_forward(x, y, n);
    for (size_t i = 0; i < n; i++)
        assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    sl__nn_relu_backward(r, y, dx, n);
    check_grad("relu dx", relu_loss, &d, d.x, dx, n, 1e-6);
    free(x), free(y), free(r), free(dx), free(d.x), free(d.r);
}

static void test_relu_flatten(void **state)
{
    (void)state;
    each_variant(relu_all);

    /* flatten: CNHW plane (c, n) goes to sample n's block c, and back */
    size_t ch = 3, b = 4, hw = 5;
    float *cnhw = frand(ch * b * hw), *nchw = frand(ch * b * hw), *back = frand(ch * b * hw);
    sl__nn_flatten_forward(cnhw, ch, b, hw, nchw);
    for (size_t c = 0; c < ch; c++)
        for (size_t s = 0; s < b; s++)
            assert_memory_equal(nchw + (s * ch + c) * hw, cnhw + (c * b + s) * hw, hw * 4);
    sl__nn_flatten_backward(nchw, ch, b, hw, back);
    assert_memory_equal(back, cnhw, ch * b * hw * 4);
    free(cnhw), free(nchw), free(back);
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */
/* ------------------------------------------------------------------------ */

typedef struct ce_ref {
    size_t b, k;
    double *z;
    const int32_t *y;
} ce_ref;

static double ce_loss(void *ctx)
{
    const ce_ref *d = ctx;
    double l = 0;
    for (size_t n = 0; n < d->b; n++) {
        const double *z = d->z + n * d->k;
        double m = z[0], s = 0;
        for (size_t j = 1; j < d->k; j++)
            m = z[j] > m ? z[j] : m;
        for (size_t j = 0; j < d->k; j++)
            s += exp(z[j] - m);
        l += m + log(s) - z[d->y[n]];
    }
    return l / (double)d->b;
}

static void test_softmax_ce(void **state)
{
    size_t b = 5, k = 10;
    int32_t y[5] = {3, 0, 9, 7, 3};
    float *z = frand(b * k), dz[50];
    double loss, per[5];
    (void)state;
    for (size_t i = 0; i < b * k; i++)
        z[i] *= 4.0f;
    ce_ref d = {b, k, dcopy(z, b * k), y};
    assert_int_equal(sl__nn_softmax_ce(z, y, b, k, &loss, per, dz), SL_OK);
    assert_true(fabs(loss - ce_loss(&d)) <= 1e-9);
    assert_true(fabs((per[0] + per[1] + per[2] + per[3] + per[4]) / 5 - loss) <= 1e-12);
    check_grad("softmax-ce dlogits", ce_loss, &d, d.z, dz, b * k, 1e-6);

    /* huge logits: log-sum-exp keeps everything finite */
    float big[10] = {1000, -1000, 999, 0, 0, 0, 0, 0, 0, 88};
    int32_t lab[1] = {2};
    assert_int_equal(sl__nn_softmax_ce(big, lab, 1, 10, &loss, NULL, dz), SL_OK);
    assert_true(fabs(loss - (1.0 + log1p(exp(-1.0)))) <= 1e-9);
    for (int j = 0; j < 10; j++)
        assert_true(isfinite(dz[j]));
    lab[0] = 1; /* the loss of a -1000 logit is about 2000, not inf */
    assert_int_equal(sl__nn_softmax_ce(big, lab, 1, 10, &loss, NULL, NULL), SL_OK);
    assert_true(fabs(loss - 2000.3132616875) <= 1e-6);

    lab[0] = 10;
    dz[0] = 42.0f;
    assert_int_equal(sl__nn_softmax_ce(big, lab, 1, 10, &loss, NULL, dz), SL_EINVAL);
    lab[0] = -1;
    assert_int_equal(sl__nn_softmax_ce(big, lab, 1, 10, &loss, NULL, dz), SL_EINVAL);
    assert_true(dz[0] == 42.0f);
    free(z), free(d.z);
}

/* ------------------------------------------------------------------------ */
/* SIMD variants against the scalar reference                               */
/* ------------------------------------------------------------------------ */

static void fill_special(float *p, size_t n)
{
    static const float special[] = {0.0f, -0.0f, 1e-38f, -1e-38f, 3.0f, -3.0f};
    for (size_t i = 0; i < n; i++)
        p[i] = (i % 7 == 0) ? special[(i / 7) % 6] : urand();
}

static void variant_elementwise(const sl__nn_ew_kernels *v)
{
    const sl__nn_ew_kernels *s = &sl__nn_ew_scalar;
    for (size_t rows = 1; rows <= 5; rows += 2) {
        for (size_t cols = 1; cols <= 41; cols += 4) {
            size_t n = rows * cols;
            float *a = frand(n), *b = frand(n), *y = frand(n), *bias = frand(cols);
            float *da = frand(cols), *db = frand(cols);
            fill_special(a, n);
            memcpy(b, a, n * 4);
            for (int relu = 0; relu < 2; relu++) {
                s->bias_act(a, rows, cols, bias, relu);
                v->bias_act(b, rows, cols, bias, relu);
                assert_memory_equal(a, b, n * 4);
            }
            fill_special(y, n);
            s->bias_act_bwd(a, y, rows, cols, da);
            v->bias_act_bwd(b, y, rows, cols, db);
            assert_memory_equal(a, b, n * 4);
            assert_memory_equal(da, db, cols * 4);
            s->bias_act_bwd(a, NULL, rows, cols, da);
            v->bias_act_bwd(b, NULL, rows, cols, db);
            assert_memory_equal(da, db, cols * 4);
            fill_special(a, n);
            s->relu(a, y, n);
            v->relu(a, b, n);
            assert_memory_equal(y, b, n * 4);
            s->relu_bwd(bias, a, y, cols);
            v->relu_bwd(bias, a, b, cols);
            assert_memory_equal(y, b, cols * 4);
            free(a), free(b), free(y), free(bias), free(da), free(db);
        }
    }
    /* SGD: every combination of momentum, weight decay, FedProx, first step */
    for (size_t n = 1; n <= 70; n += 23) {
        for (int mode = 0; mode < 16; mode++) {
            sl__nn_sgd_args a = {0.05f, (mode & 1) ? 0.9f : 0.0f, (mode & 2) ? 1e-3f : 0.0f,
                                 (mode & 4) ? 0.01f : 0.0f, (mode & 8) != 0};
            float *w1 = frand(n), *w2 = malloc(n * 4), *g = frand(n), *glob = frand(n);
            float *b1 = frand(n), *b2 = malloc(n * 4);
            memcpy(w2, w1, n * 4);
            memcpy(b2, b1, n * 4);
            s->sgd(w1, g, b1, glob, n, &a);
            v->sgd(w2, g, b2, glob, n, &a);
            assert_memory_equal(w1, w2, n * 4);
            assert_memory_equal(b1, b2, n * 4);
            free(w1), free(w2), free(g), free(glob), free(b1), free(b2);
        }
    }
}

static void variant_pool(const sl__nn_ew_kernels *v)
{
    const sl__nn_ew_kernels *s = &sl__nn_ew_scalar;
    static const size_t sizes[][3] = {{2, 2, 2},    {6, 8, 9},   {7, 5, 5},  {24, 24, 24},
                                      {28, 28, 31}, {4, 70, 70}, {3, 35, 40}};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t h = sizes[t][0], w = sizes[t][1], ldx = sizes[t][2], no = (h / 2) * (w / 2);
        float *x = frand(h * ldx), *y1 = frand(no), *y2 = frand(no), *dx1 = frand(h * ldx);
        float *dx2 = malloc(h * ldx * 4), *dy = frand(no);
        uint8_t *a1 = malloc(no), *a2 = malloc(no);
        for (size_t i = 0; i < h * ldx; i++) /* many ties, within windows too */
            x[i] = (float)(int)(x[i] * 2.0f) * 0.5f;
        for (int relu = 0; relu < 2; relu++) {
            s->pool_fwd(x, ldx, h, w, 0.25f, relu, y1, a1);
            v->pool_fwd(x, ldx, h, w, 0.25f, relu, y2, a2);
            assert_memory_equal(y1, y2, no * 4);
            assert_memory_equal(a1, a2, no);
            memcpy(dx2, dx1, h * ldx * 4);
            float s1 = s->pool_bwd(dy, a1, h, w, dx1, ldx);
            float s2 = v->pool_bwd(dy, a1, h, w, dx2, ldx);
            for (size_t r = 0; r < h; r++) /* columns past w (ldx > w) are not touched */
                assert_memory_equal(dx1 + r * ldx, dx2 + r * ldx, ldx * 4);
            assert_true(fabsf(s1 - s2) <= 1e-5f * (1.0f + fabsf(s1)));
        }
        free(x), free(y1), free(y2), free(dx1), free(dx2), free(dy), free(a1), free(a2);
    }
}

static void variant_conv(const sl__nn_ew_kernels *v)
{
    const sl__nn_ew_kernels *s = &sl__nn_ew_scalar;
    /* k, pad, h, w, cout */
    static const size_t shapes[][5] = {{5, 0, 28, 28, 6}, {5, 2, 28, 28, 32}, {3, 1, 9, 40, 7},
                                       {3, 0, 5, 3, 9},   {5, 2, 6, 50, 3},   {1, 0, 3, 17, 2}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t k = shapes[t][0], pad = shapes[t][1], h = shapes[t][2], w = shapes[t][3];
        size_t cout = shapes[t][4], b = 3, hp = h + 2 * pad, wp = w + 2 * pad;
        size_t ho = hp - k + 1, wo = wp - k + 1, ny = cout * b * ho * wo;
        float *xp = frand(b * hp * wp), *wt = frand(cout * k * k), *y1 = frand(ny);
        float *y2 = frand(ny), *dw1 = frand(cout * k * k), *dw2 = frand(cout * k * k);
        double *yd = malloc(ny * sizeof *yd), *dwd = malloc(cout * k * k * sizeof *dwd);
        for (size_t n = 0; n < b; n++) {
            s->conv1_fwd(xp + n * hp * wp, wp, ho, wo, k, wt, cout, y1 + n * ho * wo, b * ho * wo);
            v->conv1_fwd(xp + n * hp * wp, wp, ho, wo, k, wt, cout, y2 + n * ho * wo, b * ho * wo);
        }
        for (size_t i = 0; i < ny; i++)
            yd[i] = y1[i];
        assert_true(rel_err(y2, yd, ny) <= 1e-6);
        s->conv1_dw(xp, hp * wp, wp, b, ho, wo, k, y1, b * ho * wo, cout, dw1);
        v->conv1_dw(xp, hp * wp, wp, b, ho, wo, k, y1, b * ho * wo, cout, dw2);
        for (size_t i = 0; i < cout * k * k; i++)
            dwd[i] = dw1[i];
        assert_true(rel_err(dw2, dwd, cout * k * k) <= 1e-5);

        /* im2col and col2im move values: bit for bit */
        size_t rows = k * k, n_cols = b * ho * wo;
        float *x = frand(b * h * w), *c1 = frand(rows * n_cols), *c2 = frand(rows * n_cols);
        float *g1 = frand(b * h * w), *g2 = frand(b * h * w);
        for (size_t kh = 0; kh < k; kh++)
            for (size_t kw = 0; kw < k; kw++) {
                s->im2col_row(x, h * w, b, h, w, ho, wo, kh, kw, pad, c1 + (kh * k + kw) * n_cols);
                v->im2col_row(x, h * w, b, h, w, ho, wo, kh, kw, pad, c2 + (kh * k + kw) * n_cols);
            }
        assert_memory_equal(c1, c2, rows * n_cols * 4);
        s->col2im(c1, n_cols, b, h, w, ho, wo, k, pad, g1, h * w);
        v->col2im(c1, n_cols, b, h, w, ho, wo, k, pad, g2, h * w);
        assert_memory_equal(g1, g2, b * h * w * 4);
        free(xp), free(wt), free(y1), free(y2), free(dw1), free(dw2), free(yd), free(dwd);
        free(x), free(c1), free(c2), free(g1), free(g2);
    }
}

static void test_variants(void **state)
{
    static const unsigned all[] = {SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
    (void)state;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const sl__nn_ew_kernels *v = sl__nn_ew_kernels_for(all[i]);
        if (v == NULL)
            continue;
        printf("  variant %s against scalar\n", v->name);
        variant_elementwise(v);
        variant_pool(v);
        variant_conv(v);
    }
    assert_non_null(sl__nn_ew_kernels_for(0));
    assert_int_equal(sl__nn_elementwise_use(3), SL_EINVAL);
    assert_int_equal(sl__nn_elementwise_use(0), SL_OK);
    assert_string_equal(sl__nn_ew()->name, "scalar");
    assert_int_equal(sl__nn_elementwise_use(SL__NN_EW_AUTO), SL_OK);
}

/* The workspace reserved for a batch holds any smaller batch too: a smaller batch (an epoch's
 * last) may be taken as one chunk where the reserved one is cut into small chunks. */
static void test_conv_workspace_smaller_batch(void **state)
{
    static const size_t shapes[][5] = {
        {1, 64, 64, 3, 64}, /* 138 KB of cols a sample: 64 are chunked, 29 fit whole */
        {3, 32, 32, 5, 128},
        {16, 14, 14, 5, 256},
    };
    (void)state;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        sl__nn_conv c;
        size_t batch = shapes[i][4], reserved;
        assert_int_equal(
            sl__nn_conv_init(&c, shapes[i][0], 4, shapes[i][1], shapes[i][2], shapes[i][3], 0),
            SL_OK);
        if (sl__nn_conv_set_algo(&c, SL__NN_CONV_IM2COL) != SL_OK)
            continue;
        reserved = sl__nn_conv_workspace(&c, batch);
        for (size_t b = 1; b <= batch; b++)
            if (sl__nn_conv_workspace(&c, b) > reserved)
                fail_msg(
                    "conv %zu: batch %zu needs %zu floats of workspace, batch %zu reserved %zu", i,
                    b, sl__nn_conv_workspace(&c, b), batch, reserved);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_chunked),
        cmocka_unit_test(test_conv_rejects),
        cmocka_unit_test(test_conv_workspace_smaller_batch),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_relu_flatten),
        cmocka_unit_test(test_softmax_ce),
        cmocka_unit_test(test_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
