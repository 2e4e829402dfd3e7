/*
 * conv.c - 2-D convolution, stride 1, zero padding, odd square kernels,
 * over CNHW activations (nn_int.h), by two algorithms:
 *
 * im2col + GEMM. cols (Cin*k*k x batch*ho*wo) gathers every input patch;
 *   forward  Y     = W cols          (NO_TRANS, NO_TRANS) M = Cout,     N = B*ho*wo, K = Cin*k*k
 *   dW             = dY cols^T       (NO_TRANS, TRANS)    M = Cout,     N = Cin*k*k, K = B*ho*wo
 *   dcols          = W^T dY          (TRANS, NO_TRANS)    M = Cin*k*k,  N = B*ho*wo, K = Cout
 * then col2im adds dcols back into dX. One GEMM per pass over the whole
 * batch, or over chunks of it when cols would not fit in cache (see
 * chunk_samples); dcols reuses the cols buffer once dW is done.
 *
 * direct. With one input channel there is nothing for a GEMM to reduce
 *   over but the k*k taps: M = Cout and K = k*k are tiny, and building cols
 *   (k*k copies of the input) and packing it costs more than the
 *   arithmetic. The direct kernels (element-wise table) keep one row of
 *   outputs of several channels in registers, and the weight gradient keeps
 *   all k*k tap sums in registers over the batch.
 *
 * The choice (choose_algo) was measured on the registry's layers, see the
 * comment there.
 */
#include <string.h>

#include "nn_int.h"

/* Short copies and fills without a library call per row (rows are 8..32
 * floats here; a memcpy call would cost more than the copy). */
static inline void copy_row(float *dst, const float *src, size_t n)
{
    for (; n >= 8; n -= 8, dst += 8, src += 8)
        memcpy(dst, src, 8 * sizeof *dst);
    if (n >= 4) {
        memcpy(dst, src, 4 * sizeof *dst);
        dst += 4, src += 4, n -= 4;
    }
    for (; n > 0; n--)
        *dst++ = *src++;
}

static inline void zero_row(float *dst, size_t n)
{
    static const float zeros[8];
    for (; n >= 8; n -= 8, dst += 8)
        memcpy(dst, zeros, sizeof zeros);
    for (; n > 0; n--)
        *dst++ = 0.0f;
}

static size_t chunk_samples(const sl__nn_conv *c, size_t batch);

/*
 * Measured on this project's x86-64 runner (AMD EPYC Zen 4), batch 64,
 * forward + weight gradient in ms, im2col+GEMM / direct:
 *   AVX-512: lenet5 c1 (6 maps)  0.25+0.39 / 0.15+0.22   cnn c1 (32 maps) 1.07+1.63 / 0.98+1.39
 *   AVX2:    lenet5 c1           0.32+0.45 / 0.22+0.23   cnn c1           1.47+1.88 / 1.86+2.47
 *   scalar:  lenet5 c1           0.68+0.39 / 3.09+1.97   cnn c1           1.78+2.34 / 23.8+15.9
 * So direct with AVX-512, and with AVX2 for few output maps; im2col with
 * the scalar kernels. NEON has not been measured on hardware (qemu timings
 * say nothing): it takes im2col and the NEON GEMM. Layers with more than
 * one input channel have no direct kernel.
 */
static sl__nn_conv_algo choose_algo(const sl__nn_conv *c)
{
    unsigned f = sl__nn_ew()->features;
    if (c->cin != 1 || c->k > SL__NN_DIRECT_MAX_K)
        return SL__NN_CONV_IM2COL;
    if (f & SL_CPU_AVX512)
        return SL__NN_CONV_DIRECT;
    if (f & SL_CPU_AVX2)
        return c->cout <= 16 ? SL__NN_CONV_DIRECT : SL__NN_CONV_IM2COL;
    return SL__NN_CONV_IM2COL;
}

int sl__nn_conv_init(sl__nn_conv *c, size_t cin, size_t cout, size_t h, size_t w, size_t k,
                     size_t pad)
{
    if (cin == 0 || cout == 0 || k == 0 || (k & 1) == 0 || h == 0 || w == 0 || h + 2 * pad < k ||
        w + 2 * pad < k)
        return SL_EINVAL;
    c->cin = cin, c->cout = cout, c->k = k, c->pad = pad;
    c->h = h, c->w = w;
    c->ho = h + 2 * pad - k + 1;
    c->wo = w + 2 * pad - k + 1;
    c->algo = choose_algo(c);
    return SL_OK;
}

int sl__nn_conv_set_algo(sl__nn_conv *c, sl__nn_conv_algo algo)
{
    if (algo == SL__NN_CONV_DIRECT && (c->cin != 1 || c->k > SL__NN_DIRECT_MAX_K))
        return SL_EINVAL;
    if (algo != SL__NN_CONV_DIRECT && algo != SL__NN_CONV_IM2COL)
        return SL_EINVAL;
    c->algo = algo;
    return SL_OK;
}

size_t sl__nn_conv_workspace(const sl__nn_conv *c, size_t batch)
{
    size_t per, whole, chunk;
    if (c->algo == SL__NN_CONV_DIRECT)
        return c->pad > 0 ? batch * (c->h + 2 * c->pad) * (c->w + 2 * c->pad) : 0;
    /* room for any batch up to @batch: a smaller one may be taken whole (chunk_samples) where
     * this one is cut into smaller chunks, as the last batch of an epoch is */
    per = c->cin * c->k * c->k * c->ho * c->wo;
    whole = SL__NN_COLS_ONE_BYTES / (per * sizeof(float));
    whole = whole < batch ? whole : batch;
    chunk = chunk_samples(c, batch);
    return per * (chunk > whole ? chunk : whole);
}

/* ------------------------------------------------------------------------ */
/* im2col / col2im over a chunk of the batch                                */
/* ------------------------------------------------------------------------ */

/* Samples per im2col chunk. The whole batch when its cols is small (then
 * the backward pass reuses the forward's cols), else about
 * SL__NN_COLS_BYTES, so that im2col writes it to L2 and the GEMMs read it
 * from there: with the whole batch at once cnn's c2 cols is 40 MB and
 * every pass over it goes to memory. Measured: lenet5 c2 (2.4 MB at batch
 * 64) is fastest as one chunk, cnn c2 (627 KB per sample) with 2 to 4
 * samples per chunk (about 25% faster than the whole batch). */
static size_t chunk_samples(const sl__nn_conv *c, size_t batch)
{
    size_t per = c->cin * c->k * c->k * c->ho * c->wo * sizeof(float);
    size_t s = SL__NN_COLS_BYTES / per;
    if (per * batch <= SL__NN_COLS_ONE_BYTES)
        return batch;
    s = s < 1 ? 1 : s;
    return s < batch ? s : batch;
}

/* cols (Cin*k*k x cnt*ho*wo) of samples [s0, s0 + cnt) of the batch. */
static void im2col(const sl__nn_conv *c, size_t batch, const float *x, size_t s0, size_t cnt,
                   float *cols)
{
    const sl__nn_ew_kernels *kern = sl__nn_ew();
    size_t k = c->k, hw = c->h * c->w, n_cols = cnt * c->ho * c->wo;
    for (size_t ci = 0; ci < c->cin; ci++)
        for (size_t kh = 0; kh < k; kh++)
            for (size_t kw = 0; kw < k; kw++)
                kern->im2col_row(x + (ci * batch + s0) * hw, hw, cnt, c->h, c->w, c->ho, c->wo, kh,
                                 kw, c->pad, cols + ((ci * k + kh) * k + kw) * n_cols);
}

/* dx of samples [s0, s0 + cnt) = the patches of dcols put back (col2im),
 * one input channel at a time from its k*k rows of dcols. */
static void col2im(const sl__nn_conv *c, size_t batch, const float *dcols, size_t s0, size_t cnt,
                   float *dx)
{
    const sl__nn_ew_kernels *kern = sl__nn_ew();
    size_t k = c->k, hw = c->h * c->w, n_cols = cnt * c->ho * c->wo;
    for (size_t ci = 0; ci < c->cin; ci++)
        kern->col2im(dcols + ci * k * k * n_cols, n_cols, cnt, c->h, c->w, c->ho, c->wo, k, c->pad,
                     dx + (ci * batch + s0) * hw, hw);
}

/* ------------------------------------------------------------------------ */
/* Direct (one input channel)                                               */
/* ------------------------------------------------------------------------ */

/* The input as the direct kernels read it: padded planes in @ws, or @x. */
static const float *direct_input(const sl__nn_conv *c, const float *x, float *ws, size_t *ldx,
                                 size_t *plane)
{
    size_t hp = c->h + 2 * c->pad, wp = c->w + 2 * c->pad;
    *ldx = wp;
    *plane = hp * wp;
    if (c->pad == 0)
        return x;
    return ws;
}

static void pad_input(const sl__nn_conv *c, size_t batch, const float *x, float *ws)
{
    size_t p = c->pad, hp = c->h + 2 * p, wp = c->w + 2 * p;
    for (size_t n = 0; n < batch; n++) {
        float *dst = ws + n * hp * wp;
        const float *src = x + n * c->h * c->w;
        zero_row(dst, p * wp);
        for (size_t i = 0; i < c->h; i++) {
            float *row = dst + (p + i) * wp;
            zero_row(row, p);
            copy_row(row + p, src + i * c->w, c->w);
            zero_row(row + p + c->w, p);
        }
        zero_row(dst + (p + c->h) * wp, p * wp);
    }
}

/* dx (one channel) = full correlation of dy with the flipped kernels. Not
 * on any registry model's path (their direct layer is the first one), so
 * plain loops. */
static void direct_dx(const sl__nn_conv *c, size_t batch, const float *w, const float *dy,
                      float *dx)
{
    size_t k = c->k, ohw = c->ho * c->wo, n_cols = batch * ohw;
    memset(dx, 0, batch * c->h * c->w * sizeof *dx);
    for (size_t co = 0; co < c->cout; co++) {
        for (size_t n = 0; n < batch; n++) {
            const float *g = dy + co * n_cols + n * ohw;
            float *plane = dx + n * c->h * c->w;
            for (size_t kh = 0; kh < k; kh++) {
                for (size_t kw = 0; kw < k; kw++) {
                    float t = w[(co * k + kh) * k + kw];
                    size_t lo, hi;
                    sl__nn_conv_cols(c->w, c->wo, kw, c->pad, &lo, &hi);
                    if (hi == lo)
                        continue;
                    for (size_t oh = 0; oh < c->ho; oh++) {
                        size_t ih = oh + kh;
                        if (ih < c->pad || ih - c->pad >= c->h)
                            continue;
                        float *dst = plane + (ih - c->pad) * c->w + (lo + kw - c->pad);
                        const float *src = g + oh * c->wo + lo;
                        for (size_t i = 0; i < hi - lo; i++)
                            dst[i] += t * src[i];
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                     */
/* ------------------------------------------------------------------------ */

static void add_bias(const sl__nn_conv *c, size_t batch, const float *b, float *y)
{
    size_t plane = batch * c->ho * c->wo;
    for (size_t co = 0; co < c->cout; co++)
        for (size_t i = 0; i < plane; i++)
            y[co * plane + i] += b[co];
}

int sl__nn_conv_forward(const sl__nn_conv *c, size_t batch, const float *x, const float *w,
                        const float *b, float *y, float *ws)
{
    size_t ohw = c->ho * c->wo, kk = c->cin * c->k * c->k;
    if (batch == 0)
        return SL_OK;
    if (c->algo == SL__NN_CONV_DIRECT) {
        const sl__nn_ew_kernels *kern = sl__nn_ew();
        size_t ldx, plane;
        const float *in = direct_input(c, x, ws, &ldx, &plane);
        if (c->pad > 0)
            pad_input(c, batch, x, ws);
        for (size_t n = 0; n < batch; n++)
            kern->conv1_fwd(in + n * plane, ldx, c->ho, c->wo, c->k, w, c->cout, y + n * ohw,
                            batch * ohw);
    } else {
        size_t step = chunk_samples(c, batch);
        for (size_t s0 = 0; s0 < batch; s0 += step) {
            size_t cnt = batch - s0 < step ? batch - s0 : step;
            int rc;
            im2col(c, batch, x, s0, cnt, ws);
            rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, c->cout, cnt * ohw, kk, 1.0f, w, kk,
                             ws, cnt * ohw, 0.0f, y + s0 * ohw, batch * ohw);
            if (rc != SL_OK)
                return rc;
        }
    }
    if (b != NULL)
        add_bias(c, batch, b, y);
    return SL_OK;
}

int sl__nn_conv_backward(const sl__nn_conv *c, size_t batch, const float *x, const float *w,
                         const float *dy, float *dw, float *db, float *dx, float *ws)
{
    size_t ohw = c->ho * c->wo, kk = c->cin * c->k * c->k, n_cols = batch * ohw;
    if (db != NULL) {
        for (size_t co = 0; co < c->cout; co++) {
            float s = 0.0f;
            for (size_t i = 0; i < n_cols; i++)
                s += dy[co * n_cols + i];
            db[co] = s;
        }
    }
    if (batch == 0) {
        memset(dw, 0, c->cout * kk * sizeof *dw);
        return SL_OK;
    }
    if (c->algo == SL__NN_CONV_DIRECT) {
        size_t ldx, plane;
        const float *in = direct_input(c, x, ws, &ldx, &plane);
        sl__nn_ew()->conv1_dw(in, plane, ldx, batch, c->ho, c->wo, c->k, dy, n_cols, c->cout, dw);
        if (dx != NULL)
            direct_dx(c, batch, w, dy, dx);
        return SL_OK;
    }
    size_t step = chunk_samples(c, batch);
    for (size_t s0 = 0; s0 < batch; s0 += step) {
        size_t cnt = batch - s0 < step ? batch - s0 : step, nc = cnt * ohw;
        int rc;
        /* One chunk: ws still holds the forward pass's cols. */
        if (step < batch)
            im2col(c, batch, x, s0, cnt, ws);
        rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, c->cout, kk, nc, 1.0f, dy + s0 * ohw, n_cols,
                         ws, nc, s0 == 0 ? 0.0f : 1.0f, dw, kk);
        if (rc == SL_OK && dx != NULL)
            rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, kk, nc, c->cout, 1.0f, w, kk,
                             dy + s0 * ohw, n_cols, 0.0f, ws, nc);
        if (rc != SL_OK)
            return rc;
        if (dx != NULL)
            col2im(c, batch, ws, s0, cnt, dx);
    }
    return SL_OK;
}
