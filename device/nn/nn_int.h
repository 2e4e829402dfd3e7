/*
 * nn_int.h - internals shared by the files of device/nn (layers, conv,
 * models, sgd, train and the element-wise kernels). Not part of the public
 * API; only the .c files of device/nn and the nn unit tests include it.
 *
 * Activation layouts. Dense activations are batch-major (batch x features).
 * Convolution stages keep their activations channel-major over the batch,
 * "CNHW": plane (c, n) of h x w floats starts at (c * batch + n) * h * w.
 * Then a convolution over the whole batch is one GEMM, W (Cout x Cin*k*k)
 * times cols (Cin*k*k x batch*ho*wo), and its weight gradient is one GEMM,
 * dY (Cout x batch*ho*wo) times cols^T, with no transposes. With one input
 * channel (the models' first layer) CNHW and NCHW are the same bytes; the
 * last pooling of a model writes NCHW, which is the flatten order.
 */
#ifndef STARLING_NN_INT_H
#define STARLING_NN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/nn.h"

/* Alignment of every scratch buffer (a cache line, one AVX-512 vector). */
#define SL__NN_ALIGN 64

/* ------------------------------------------------------------------------ */
/* Pseudo-random numbers (initialisation, shuffles)                         */
/* ------------------------------------------------------------------------ */

/* SplitMix64: tiny, fast and good enough for weights and sample orders;
 * the exact sequence is part of what "deterministic by seed" means. */
static inline uint64_t sl__nn_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/** A generator state for (seed, stream): distinct streams are unrelated. */
static inline uint64_t sl__nn_rng_state(uint64_t seed, uint64_t stream)
{
    uint64_t s = seed;
    uint64_t a = sl__nn_rng_next(&s);
    s = a ^ (stream * 0xD1B54A32D192ED03ull);
    (void)sl__nn_rng_next(&s);
    return s;
}

/** Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float sl__nn_rng_unit(uint64_t *state)
{
    return (float)(sl__nn_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/** Uniform integer in [0, range), range >= 1, unbiased (Lemire's method). */
static inline uint32_t sl__nn_rng_below(uint64_t *state, uint32_t range)
{
    uint64_t m = (uint64_t)(uint32_t)(sl__nn_rng_next(state) >> 32) * range;
    uint32_t low = (uint32_t)m;
    if (low < range) {
        uint32_t t = (uint32_t)(0u - range) % range;
        while (low < t) {
            m = (uint64_t)(uint32_t)(sl__nn_rng_next(state) >> 32) * range;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* ------------------------------------------------------------------------ */
/* Element-wise kernels (elementwise*.c)                                    */
/* ------------------------------------------------------------------------ */

/* Pooling "argmax" byte: 0..3 is the window position (row-major) of the
 * first maximum; SL__NN_POOL_DEAD means the fused ReLU clamped the output
 * to zero, so no gradient flows back. */
#define SL__NN_POOL_DEAD 4

/* Target size of the im2col buffer of one chunk of the batch, and the
 * largest whole-batch buffer taken in one chunk (conv.c). */
#define SL__NN_COLS_BYTES     (1536u * 1024u)
#define SL__NN_COLS_ONE_BYTES (4096u * 1024u)

/* Largest kernel the direct single-input-channel convolution handles. */
#define SL__NN_DIRECT_MAX_K 5

/* Settings of one SGD update (see sl_sgd_step in nn.h). */
typedef struct sl__nn_sgd_args {
    float lr, momentum, weight_decay, prox_mu;
    int first; /* the momentum buffer is empty: buf = g */
} sl__nn_sgd_args;

/*
 * One variant of the kernels. Unless a comment says "within rounding", a
 * SIMD variant returns bit-identical results to the scalar reference (the
 * same operations on the same values in the same order, no FMA).
 */
typedef struct sl__nn_ew_kernels {
    const char *name;  /* "scalar", "avx2", "avx512", "neon" */
    unsigned features; /* SL_CPU_* bits the variant needs; 0 for scalar */

    /* y[r][c] = y[r][c] + bias[c], then max(0, .) when @relu; rows x cols. */
    void (*bias_act)(float *y, size_t rows, size_t cols, const float *bias, int relu);

    /* Backward of bias_act: when @y is not NULL, dy[i] = y[i] > 0 ? dy[i] : 0
     * (y is the layer's output); when @db is not NULL, db[c] = sum over r of
     * the resulting dy[r][c], in increasing r (overwritten). */
    void (*bias_act_bwd)(float *dy, const float *y, size_t rows, size_t cols, float *db);

    /* y[i] = max(0, x[i]) (y may be x). */
    void (*relu)(const float *x, float *y, size_t n);

    /* dx[i] = y[i] > 0 ? dy[i] : 0 (dx may be dy). */
    void (*relu_bwd)(const float *dy, const float *y, float *dx, size_t n);

    /* One SGD step over n parameters (sl_sgd_step's formula). @buf is not
     * read when a->first; @global is read only when a->prox_mu != 0. */
    void (*sgd)(float *w, const float *grad, float *buf, const float *global, size_t n,
                const sl__nn_sgd_args *a);

    /* Max-pool 2x2 stride 2 of one plane (h x w, row stride ldx) into
     * y (h/2 x w/2, contiguous): y = max of the window + @bias, then
     * max(0, .) when @relu; arg = first maximum's window position, or
     * SL__NN_POOL_DEAD when @relu and y <= 0 (or NaN). */
    void (*pool_fwd)(const float *x, size_t ldx, size_t h, size_t w, float bias, int relu, float *y,
                     uint8_t *arg);

    /* Backward of pool_fwd: dx (h x w, row stride ldx) = 0 except
     * dx at each window's arg = dy. Rows and columns beyond the last whole
     * window (odd h or w) are zeroed too. Returns the sum of the dy that
     * got through (the bias gradient; within rounding). */
    float (*pool_bwd)(const float *dy, const uint8_t *arg, size_t h, size_t w, float *dx,
                      size_t ldx);

    /* Direct convolution of one single-channel plane, k x k, stride 1,
     * k <= SL__NN_DIRECT_MAX_K (within rounding):
     *   y[co * ys + oh * wo + ow] = sum_{kh,kw} w[(co * k + kh) * k + kw] *
     *                               x[(oh + kh) * ldx + ow + kw]
     * for co < cout, oh < ho, ow < wo (x already padded: ldx >= wo + k - 1). */
    void (*conv1_fwd)(const float *x, size_t ldx, size_t ho, size_t wo, size_t k, const float *w,
                      size_t cout, float *y, size_t ys);

    /* Weight gradient of conv1_fwd summed over @batch planes (within
     * rounding): dw[(co * k + kh) * k + kw] = sum_n sum_{oh,ow}
     *   dy[co * dys + n * ho * wo + oh * wo + ow] * x[n * xs + (oh + kh) * ldx + ow + kw]
     * (overwritten). */
    void (*conv1_dw)(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho, size_t wo,
                     size_t k, const float *dy, size_t dys, size_t cout, float *dw);

    /* One row of im2col, kernel position (kh, kw), over @batch planes of
     * h x w (plane n at x + n * xs): for n, oh < ho, ow < wo
     *   cols[(n * ho + oh) * wo + ow] = x[n * xs + (oh + kh - pad) * w + ow + kw - pad]
     * or 0 where that falls outside the plane (zero padding). */
    void (*im2col_row)(const float *x, size_t xs, size_t batch, size_t h, size_t w, size_t ho,
                       size_t wo, size_t kh, size_t kw, size_t pad, float *cols);

    /* The adjoint of im2col_row over all k x k kernel positions of one
     * input channel: for n < batch, ih < h, iw < w
     *   x[n * xs + ih * w + iw] = sum over kh, then kw, increasing, of
     *       cols[(kh * k + kw) * rs + (n * ho + oh) * wo + ow]
     * with oh = ih + pad - kh, ow = iw + pad - kw, terms outside [0, ho) x
     * [0, wo) skipped; the sum starts from 0 (x is overwritten). */
    void (*col2im)(const float *cols, size_t rs, size_t batch, size_t h, size_t w, size_t ho,
                   size_t wo, size_t k, size_t pad, float *x, size_t xs);
} sl__nn_ew_kernels;

/** Output columns [*lo, *hi) whose input column ow + kw - pad lies in [0, w). */
static inline void sl__nn_conv_cols(size_t w, size_t wo, size_t kw, size_t pad, size_t *lo,
                                    size_t *hi)
{
    size_t a = pad > kw ? pad - kw : 0, b = w + pad > kw ? w + pad - kw : 0;
    *lo = a < wo ? a : wo;
    *hi = b < wo ? b : wo;
    if (*hi < *lo)
        *hi = *lo;
}

extern const sl__nn_ew_kernels sl__nn_ew_scalar;
#if defined(SL_X86_SIMD)
extern const sl__nn_ew_kernels sl__nn_ew_avx2;
extern const sl__nn_ew_kernels sl__nn_ew_avx512;
#endif
#if defined(SL_NEON)
extern const sl__nn_ew_kernels sl__nn_ew_neon;
#endif

/* Scalar pieces a SIMD table may reuse for kernels it does not speed up. */
void sl__nn_pool_fwd_scalar(const float *x, size_t ldx, size_t h, size_t w, float bias, int relu,
                            float *y, uint8_t *arg);
float sl__nn_pool_bwd_scalar(const float *dy, const uint8_t *arg, size_t h, size_t w, float *dx,
                             size_t ldx);
void sl__nn_conv1_fwd_scalar(const float *x, size_t ldx, size_t ho, size_t wo, size_t k,
                             const float *w, size_t cout, float *y, size_t ys);
void sl__nn_conv1_dw_scalar(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho,
                            size_t wo, size_t k, const float *dy, size_t dys, size_t cout,
                            float *dw);
void sl__nn_im2col_row_scalar(const float *x, size_t xs, size_t batch, size_t h, size_t w,
                              size_t ho, size_t wo, size_t kh, size_t kw, size_t pad, float *cols);
void sl__nn_col2im_scalar(const float *cols, size_t rs, size_t batch, size_t h, size_t w, size_t ho,
                          size_t wo, size_t k, size_t pad, float *x, size_t xs);

/** Pass to sl__nn_elementwise_use() to return to the automatic choice. */
#define SL__NN_EW_AUTO 0xffffffffu

/**
 * sl__nn_elementwise_use - force the element-wise table, process-wide:
 * 0 = scalar, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON, or SL__NN_EW_AUTO.
 * Returns SL_OK, SL_EUNSUPPORTED (not built or not on this CPU), SL_EINVAL.
 * For tests and benchmarks.
 */
int sl__nn_elementwise_use(unsigned features);

/** sl__nn_ew_kernels_for - the table of one variant (as above), or NULL. */
const sl__nn_ew_kernels *sl__nn_ew_kernels_for(unsigned features);

/** sl__nn_ew - the table in use (chosen once from sl_cpu_features()). */
const sl__nn_ew_kernels *sl__nn_ew(void);

/* ------------------------------------------------------------------------ */
/* Layers (layers.c)                                                        */
/* ------------------------------------------------------------------------ */

/**
 * Dense layer: y (batch x out) = x (batch x in) W^T + b, W [out, in];
 * ReLU applied when @relu. Returns SL_OK or the GEMM's error.
 */
int sl__nn_dense_forward(const float *x, size_t batch, size_t in, size_t out, const float *w,
                         const float *b, int relu, float *y);

/**
 * Backward of sl__nn_dense_forward. @dy: dL/dy on entry (batch x out); with
 * @relu it is masked in place by the output @y. Writes dw (out x in), db
 * (out) and, unless NULL, dx (batch x in).
 */
int sl__nn_dense_backward(const float *x, const float *y, int relu, float *dy, size_t batch,
                          size_t in, size_t out, const float *w, float *dw, float *db, float *dx);

/** ReLU on n floats and its backward (dx = dy where y > 0). */
void sl__nn_relu_forward(const float *x, float *y, size_t n);
void sl__nn_relu_backward(const float *dy, const float *y, float *dx, size_t n);

/**
 * Max-pool 2x2, stride 2 (floor), over @channels x @batch planes of h x w
 * stored CNHW in @x (row stride w). Per channel: @bias (NULL: none) is added
 * after the max and, with @relu, the result clamped at 0 (so conv + bias +
 * ReLU + pool is one pass). @y (h/2 x w/2 planes) and @arg (one byte per
 * output) are CNHW, or NCHW (the flatten order) when @nchw.
 */
void sl__nn_pool_forward(const float *x, size_t channels, size_t batch, size_t h, size_t w,
                         const float *bias, int relu, int nchw, float *y, uint8_t *arg);

/**
 * Backward of sl__nn_pool_forward: @dx (CNHW, h x w planes) = dL/dx from
 * @dy (laid out like y); @dbias (NULL: skip) = per channel sum of the
 * gradient that reached the bias (overwritten).
 */
void sl__nn_pool_backward(const float *dy, const uint8_t *arg, size_t channels, size_t batch,
                          size_t h, size_t w, int nchw, float *dx, float *dbias);

/** CNHW <-> NCHW for @channels x @batch planes of @hw floats (flatten). */
void sl__nn_flatten_forward(const float *x_cnhw, size_t channels, size_t batch, size_t hw,
                            float *y_nchw);
void sl__nn_flatten_backward(const float *dy_nchw, size_t channels, size_t batch, size_t hw,
                             float *dx_cnhw);

/**
 * Mean softmax cross-entropy over the batch, computed with log-sum-exp.
 * @loss: the mean (may be NULL); @sample_loss: per-sample losses (NULL:
 * skip); @dlogits: (softmax - onehot) / batch (NULL: skip). Labels outside
 * [0, classes) give SL_EINVAL before anything is written.
 */
int sl__nn_softmax_ce(const float *logits, const int32_t *labels, size_t batch, size_t classes,
                      double *loss, double *sample_loss, float *dlogits);

/* ------------------------------------------------------------------------ */
/* Convolution (conv.c)                                                     */
/* ------------------------------------------------------------------------ */

typedef enum sl__nn_conv_algo {
    SL__NN_CONV_IM2COL = 0, /* im2col + one GEMM over the batch */
    SL__NN_CONV_DIRECT = 1  /* direct kernel; only for cin == 1, k <= SL__NN_DIRECT_MAX_K */
} sl__nn_conv_algo;

/** A 2-D convolution, stride 1, zero padding @pad, odd square kernel. */
typedef struct sl__nn_conv {
    size_t cin, cout, k, pad;
    size_t h, w;   /* input plane */
    size_t ho, wo; /* output plane: h + 2 pad - k + 1 */
    sl__nn_conv_algo algo;
} sl__nn_conv;

/**
 * sl__nn_conv_init - describe a convolution and choose its algorithm for
 * the element-wise variant in use (see conv.c for the measurements behind
 * the choice). SL_EINVAL for an even or zero kernel, zero channels, or an
 * output smaller than 1 x 1.
 */
int sl__nn_conv_init(sl__nn_conv *c, size_t cin, size_t cout, size_t h, size_t w, size_t k,
                     size_t pad);

/** sl__nn_conv_set_algo - force an algorithm (tests, benchmarks); SL_EINVAL if it cannot apply. */
int sl__nn_conv_set_algo(sl__nn_conv *c, sl__nn_conv_algo algo);

/** sl__nn_conv_workspace - floats of workspace for @batch samples. */
size_t sl__nn_conv_workspace(const sl__nn_conv *c, size_t batch);

/**
 * sl__nn_conv_forward - y (CNHW, cout x batch planes of ho x wo) from x
 * (CNHW, cin x batch planes of h x w) and W [cout, cin, k, k]; @b per output
 * channel, or NULL to leave the bias to a fused pooling. @ws: workspace; it
 * keeps what the backward pass needs (cols or the padded input).
 */
int sl__nn_conv_forward(const sl__nn_conv *c, size_t batch, const float *x, const float *w,
                        const float *b, float *y, float *ws);

/**
 * sl__nn_conv_backward - from dy (like y) write dw [cout, cin, k, k], db
 * (NULL: skip) and dx (like x; NULL: skip). @ws must be as the forward pass
 * on the same @x left it; it is clobbered.
 */
int sl__nn_conv_backward(const sl__nn_conv *c, size_t batch, const float *x, const float *w,
                         const float *dy, float *dw, float *db, float *dx, float *ws);

/* ------------------------------------------------------------------------ */
/* Models (models.c): hooks for tests and benchmarks                        */
/* ------------------------------------------------------------------------ */

/** sl__nn_builtin_spec - the registry's spec named @name (its JSON text), or NULL. */
const char *sl__nn_builtin_spec(const char *name);

/** sl__nn_builtin_names - the registry's names, NULL-terminated. */
const char *const *sl__nn_builtin_names(void);

/** sl__nn_model_convs - number of convolution stages of @m. */
size_t sl__nn_model_convs(const sl_model *m);

/** sl__nn_model_conv - the geometry of conv stage @i (NULL when out of range). */
const sl__nn_conv *sl__nn_model_conv(const sl_model *m, size_t i);

/**
 * sl__nn_model_set_conv_algo - force the algorithm of conv stage @i (for
 * measurements). Frees the scratch (it is re-sized at the next pass).
 * SL_EINVAL when out of range or the algorithm cannot apply.
 */
int sl__nn_model_set_conv_algo(sl_model *m, size_t i, sl__nn_conv_algo algo);

/* ------------------------------------------------------------------------ */
/* Optimiser (sgd.c)                                                        */
/* ------------------------------------------------------------------------ */

/** sl__nn_sgd_size - the number of parameters @sgd was created for. */
size_t sl__nn_sgd_size(const sl_sgd *sgd);

#endif /* STARLING_NN_INT_H */
