/*
 * elementwise_scalar.c - the scalar reference of the element-wise kernels
 * (nn_int.h): the bottom of their layers, which the SIMD variants fall back
 * on and elementwise.c chooses among.
 *
 * The scalar code fixes the order of every floating-point operation; the
 * SIMD variants follow it so that results are bit-identical except where
 * nn_int.h says "within rounding" (the convolution sums, which use FMA).
 */
#include <string.h>

#include "nn_int.h"

/* ------------------------------------------------------------------------ */
/* Scalar reference kernels                                                 */
/* ------------------------------------------------------------------------ */

static void bias_act_scalar(float *y, size_t rows, size_t cols, const float *bias, int relu)
{
    for (size_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
        if (relu) {
            for (size_t c = 0; c < cols; c++) {
                float v = row[c] + bias[c];
                row[c] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (size_t c = 0; c < cols; c++)
                row[c] = row[c] + bias[c];
        }
    }
}

static void bias_act_bwd_scalar(float *dy, const float *y, size_t rows, size_t cols, float *db)
{
    if (db != NULL)
        memset(db, 0, cols * sizeof *db);
    for (size_t r = 0; r < rows; r++) {
        float *row = dy + r * cols;
        if (y != NULL) {
            const float *out = y + r * cols;
            for (size_t c = 0; c < cols; c++)
                row[c] = out[c] > 0.0f ? row[c] : 0.0f;
        }
        if (db != NULL)
            for (size_t c = 0; c < cols; c++)
                db[c] = db[c] + row[c];
    }
}

static void relu_scalar(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_bwd_scalar(const float *dy, const float *y, float *dx, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* The order of operations here is the contract the SIMD variants copy. */
static void sgd_scalar(float *w, const float *grad, float *buf, const float *global, size_t n,
                       const sl__nn_sgd_args *a)
{
    const float wd = a->weight_decay, mu = a->prox_mu, m = a->momentum, lr = a->lr;
    const int prox = mu != 0.0f && global != NULL;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        if (wd != 0.0f)
            g = g + wd * w[i];
        if (prox)
            g = g + mu * (w[i] - global[i]);
        if (m != 0.0f) {
            float v = a->first ? g : m * buf[i] + g;
            buf[i] = v;
            g = v;
        }
        w[i] = w[i] - lr * g;
    }
}

void sl__nn_pool_fwd_scalar(const float *x, size_t ldx, size_t h, size_t w, float bias, int relu,
                            float *y, uint8_t *arg)
{
    size_t ho = h / 2, wo = w / 2;
    for (size_t i = 0; i < ho; i++) {
        const float *r0 = x + 2 * i * ldx, *r1 = r0 + ldx;
        for (size_t j = 0; j < wo; j++) {
            float m = r0[2 * j];
            uint8_t at = 0;
            if (r0[2 * j + 1] > m) {
                m = r0[2 * j + 1];
                at = 1;
            }
            if (r1[2 * j] > m) {
                m = r1[2 * j];
                at = 2;
            }
            if (r1[2 * j + 1] > m) {
                m = r1[2 * j + 1];
                at = 3;
            }
            m = m + bias;
            if (relu && !(m > 0.0f)) {
                m = 0.0f;
                at = SL__NN_POOL_DEAD;
            }
            y[i * wo + j] = m;
            arg[i * wo + j] = at;
        }
    }
}

float sl__nn_pool_bwd_scalar(const float *dy, const uint8_t *arg, size_t h, size_t w, float *dx,
                             size_t ldx)
{
    size_t ho = h / 2, wo = w / 2;
    float sum = 0.0f;
    for (size_t r = 0; r < h; r++)
        memset(dx + r * ldx, 0, w * sizeof *dx);
    for (size_t i = 0; i < ho; i++) {
        float *r0 = dx + 2 * i * ldx;
        for (size_t j = 0; j < wo; j++) {
            uint8_t at = arg[i * wo + j];
            if (at < SL__NN_POOL_DEAD) {
                r0[(at >> 1) * ldx + 2 * j + (at & 1)] = dy[i * wo + j];
                sum = sum + dy[i * wo + j];
            }
        }
    }
    return sum;
}

void sl__nn_conv1_fwd_scalar(const float *x, size_t ldx, size_t ho, size_t wo, size_t k,
                             const float *w, size_t cout, float *y, size_t ys)
{
    for (size_t co = 0; co < cout; co++) {
        const float *wc = w + co * k * k;
        for (size_t oh = 0; oh < ho; oh++) {
            float *row = y + co * ys + oh * wo;
            for (size_t ow = 0; ow < wo; ow++)
                row[ow] = 0.0f;
            for (size_t kh = 0; kh < k; kh++) {
                const float *in = x + (oh + kh) * ldx;
                for (size_t kw = 0; kw < k; kw++) {
                    float t = wc[kh * k + kw];
                    for (size_t ow = 0; ow < wo; ow++)
                        row[ow] = row[ow] + t * in[ow + kw];
                }
            }
        }
    }
}

void sl__nn_conv1_dw_scalar(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho,
                            size_t wo, size_t k, const float *dy, size_t dys, size_t cout,
                            float *dw)
{
    for (size_t co = 0; co < cout; co++) {
        for (size_t tap = 0; tap < k * k; tap++) {
            size_t kh = tap / k, kw = tap % k;
            float acc = 0.0f;
            for (size_t n = 0; n < batch; n++) {
                for (size_t oh = 0; oh < ho; oh++) {
                    const float *g = dy + co * dys + (n * ho + oh) * wo;
                    const float *in = x + n * xs + (oh + kh) * ldx + kw;
                    float row = 0.0f;
                    for (size_t ow = 0; ow < wo; ow++)
                        row = row + g[ow] * in[ow];
                    acc = acc + row;
                }
            }
            dw[co * k * k + tap] = acc;
        }
    }
}

void sl__nn_im2col_row_scalar(const float *x, size_t xs, size_t batch, size_t h, size_t w,
                              size_t ho, size_t wo, size_t kh, size_t kw, size_t pad, float *cols)
{
    size_t lo, hi;
    sl__nn_conv_cols(w, wo, kw, pad, &lo, &hi);
    for (size_t n = 0; n < batch; n++) {
        for (size_t oh = 0; oh < ho; oh++) {
            float *dst = cols + (n * ho + oh) * wo;
            size_t ih = oh + kh; /* in padded coordinates */
            if (ih < pad || ih - pad >= h || lo == hi) {
                memset(dst, 0, wo * sizeof *dst);
                continue;
            }
            const float *src = x + n * xs + (ih - pad) * w + (lo + kw - pad);
            for (size_t ow = 0; ow < lo; ow++)
                dst[ow] = 0.0f;
            for (size_t ow = lo; ow < hi; ow++)
                dst[ow] = src[ow - lo];
            for (size_t ow = hi; ow < wo; ow++)
                dst[ow] = 0.0f;
        }
    }
}

void sl__nn_col2im_scalar(const float *cols, size_t rs, size_t batch, size_t h, size_t w, size_t ho,
                          size_t wo, size_t k, size_t pad, float *x, size_t xs)
{
    for (size_t n = 0; n < batch; n++) {
        for (size_t ih = 0; ih < h; ih++) {
            float *dst = x + n * xs + ih * w;
            for (size_t iw = 0; iw < w; iw++)
                dst[iw] = 0.0f;
            for (size_t kh = 0; kh < k; kh++) {
                size_t oh = ih + pad - kh; /* wraps when negative: caught by < ho */
                if (ih + pad < kh || oh >= ho)
                    continue;
                for (size_t kw = 0; kw < k; kw++) {
                    const float *src = cols + (kh * k + kw) * rs + (n * ho + oh) * wo;
                    for (size_t iw = 0; iw < w; iw++) {
                        size_t ow = iw + pad - kw;
                        if (iw + pad >= kw && ow < wo)
                            dst[iw] = dst[iw] + src[ow];
                    }
                }
            }
        }
    }
}

const sl__nn_ew_kernels sl__nn_ew_scalar = {
    "scalar",
    0,
    bias_act_scalar,
    bias_act_bwd_scalar,
    relu_scalar,
    relu_bwd_scalar,
    sgd_scalar,
    sl__nn_pool_fwd_scalar,
    sl__nn_pool_bwd_scalar,
    sl__nn_conv1_fwd_scalar,
    sl__nn_conv1_dw_scalar,
    sl__nn_im2col_row_scalar,
    sl__nn_col2im_scalar,
};
