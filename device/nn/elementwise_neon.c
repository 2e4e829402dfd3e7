/*
 * elementwise_neon.c - NEON variant of the element-wise kernels (nn_int.h),
 * chosen at compile time on aarch64 and on armv7 built with NEON. Bias,
 * ReLU and SGD are bit-identical to the scalar reference (no fused
 * multiply-add there); the convolution sums use FMA on aarch64 (within
 * rounding). Pooling reuses the scalar code.
 */
#include <string.h>

#include "nn_int.h"

#if defined(SL_NEON)
#include <arm_neon.h>

#if defined(__aarch64__)
#define FMA(acc, a, b) vfmaq_f32(acc, a, b)
static inline float hsum(float32x4_t v)
{
    return vaddvq_f32(v);
}
#else
#define FMA(acc, a, b) vmlaq_f32(acc, a, b)
static inline float hsum(float32x4_t v)
{
    float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(vpadd_f32(s, s), 0);
}
#endif

static void bias_act_neon(float *y, size_t rows, size_t cols, const float *bias, int relu)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    for (size_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
        size_t c = 0;
        for (; c + 4 <= cols; c += 4) {
            float32x4_t v = vaddq_f32(vld1q_f32(row + c), vld1q_f32(bias + c));
            if (relu) /* v > 0 ? v : 0, as the scalar code (also for NaN and -0) */
                v = vbslq_f32(vcgtq_f32(v, zero), v, zero);
            vst1q_f32(row + c, v);
        }
        for (; c < cols; c++) {
            float v = row[c] + bias[c];
            row[c] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    }
}

static void bias_act_bwd_neon(float *dy, const float *y, size_t rows, size_t cols, float *db)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    if (db != NULL)
        memset(db, 0, cols * sizeof *db);
    for (size_t r = 0; r < rows; r++) {
        float *row = dy + r * cols;
        const float *out = y != NULL ? y + r * cols : NULL;
        size_t c = 0;
        for (; c + 4 <= cols; c += 4) {
            float32x4_t g = vld1q_f32(row + c);
            if (out != NULL) {
                g = vbslq_f32(vcgtq_f32(vld1q_f32(out + c), zero), g, zero);
                vst1q_f32(row + c, g);
            }
            if (db != NULL)
                vst1q_f32(db + c, vaddq_f32(vld1q_f32(db + c), g));
        }
        for (; c < cols; c++) {
            if (out != NULL)
                row[c] = out[c] > 0.0f ? row[c] : 0.0f;
            if (db != NULL)
                db[c] = db[c] + row[c];
        }
    }
}

static void relu_neon(const float *x, float *y, size_t n)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        vst1q_f32(y + i, vbslq_f32(vcgtq_f32(v, zero), v, zero));
    }
    for (; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_bwd_neon(const float *dy, const float *y, float *dx, size_t n)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dx + i, vbslq_f32(vcgtq_f32(vld1q_f32(y + i), zero), vld1q_f32(dy + i), zero));
    for (; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void sgd_neon(float *w, const float *grad, float *buf, const float *global, size_t n,
                     const sl__nn_sgd_args *a)
{
    const float wd = a->weight_decay, mu = a->prox_mu, m = a->momentum;
    const int prox = mu != 0.0f && global != NULL, first = a->first;
    const float32x4_t vwd = vdupq_n_f32(wd), vmu = vdupq_n_f32(mu), vm = vdupq_n_f32(m);
    const float32x4_t vlr = vdupq_n_f32(a->lr);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t wv = vld1q_f32(w + i), g = vld1q_f32(grad + i);
        if (wd != 0.0f)
            g = vaddq_f32(g, vmulq_f32(vwd, wv));
        if (prox)
            g = vaddq_f32(g, vmulq_f32(vmu, vsubq_f32(wv, vld1q_f32(global + i))));
        if (m != 0.0f) {
            if (!first)
                g = vaddq_f32(vmulq_f32(vm, vld1q_f32(buf + i)), g);
            vst1q_f32(buf + i, g);
        }
        vst1q_f32(w + i, vsubq_f32(wv, vmulq_f32(vlr, g)));
    }
    if (i < n)
        sl__nn_ew_scalar.sgd(w + i, grad + i, buf != NULL ? buf + i : NULL,
                             global != NULL ? global + i : NULL, n - i, a);
}

static void conv1_fwd_neon(const float *x, size_t ldx, size_t ho, size_t wo, size_t k,
                           const float *w, size_t cout, float *y, size_t ys)
{
    for (size_t co = 0; co < cout; co++) {
        const float *wc = w + co * k * k;
        for (size_t oh = 0; oh < ho; oh++) {
            float *row = y + co * ys + oh * wo;
            size_t ow = 0;
            for (; ow + 8 <= wo; ow += 8) {
                float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
                for (size_t kh = 0; kh < k; kh++) {
                    const float *in = x + (oh + kh) * ldx + ow;
                    for (size_t kw = 0; kw < k; kw++) {
                        float32x4_t t = vdupq_n_f32(wc[kh * k + kw]);
                        a0 = FMA(a0, t, vld1q_f32(in + kw));
                        a1 = FMA(a1, t, vld1q_f32(in + kw + 4));
                    }
                }
                vst1q_f32(row + ow, a0);
                vst1q_f32(row + ow + 4, a1);
            }
            for (; ow < wo; ow++) {
                float s = 0.0f;
                for (size_t kh = 0; kh < k; kh++)
                    for (size_t kw = 0; kw < k; kw++)
                        s = s + wc[kh * k + kw] * x[(oh + kh) * ldx + ow + kw];
                row[ow] = s;
            }
        }
    }
}

static void conv1_dw_neon(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho, size_t wo,
                          size_t k, const float *dy, size_t dys, size_t cout, float *dw)
{
    if (k > SL__NN_DIRECT_MAX_K) {
        sl__nn_conv1_dw_scalar(x, xs, ldx, batch, ho, wo, k, dy, dys, cout, dw);
        return;
    }
    for (size_t co = 0; co < cout; co++) {
        for (size_t kh = 0; kh < k; kh++) {
            float32x4_t acc[SL__NN_DIRECT_MAX_K];
            float tail[SL__NN_DIRECT_MAX_K] = {0};
            for (size_t kw = 0; kw < k; kw++)
                acc[kw] = vdupq_n_f32(0.0f);
            for (size_t n = 0; n < batch; n++) {
                for (size_t oh = 0; oh < ho; oh++) {
                    const float *g = dy + co * dys + (n * ho + oh) * wo;
                    const float *in = x + n * xs + (oh + kh) * ldx;
                    size_t ow = 0;
                    for (; ow + 4 <= wo; ow += 4) {
                        float32x4_t d = vld1q_f32(g + ow);
                        for (size_t kw = 0; kw < k; kw++)
                            acc[kw] = FMA(acc[kw], d, vld1q_f32(in + ow + kw));
                    }
                    for (; ow < wo; ow++)
                        for (size_t kw = 0; kw < k; kw++)
                            tail[kw] = tail[kw] + g[ow] * in[ow + kw];
                }
            }
            for (size_t kw = 0; kw < k; kw++)
                dw[(co * k + kh) * k + kw] = hsum(acc[kw]) + tail[kw];
        }
    }
}

const sl__nn_ew_kernels sl__nn_ew_neon = {
    "neon",
    SL_CPU_NEON,
    bias_act_neon,
    bias_act_bwd_neon,
    relu_neon,
    relu_bwd_neon,
    sgd_neon,
    sl__nn_pool_fwd_scalar,
    sl__nn_pool_bwd_scalar,
    conv1_fwd_neon,
    conv1_dw_neon,
    sl__nn_im2col_row_scalar,
    sl__nn_col2im_scalar,
};

#else
/* Nothing to build without NEON; keep the translation unit non-empty. */
typedef int sl__nn_neon_unused;
#endif /* SL_NEON */
