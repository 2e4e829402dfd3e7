/*
 * elementwise_avx2.c - AVX2 + FMA variant of the element-wise kernels
 * (nn_int.h). Compiled with -mavx2 -mfma; used only when sl_cpu_features()
 * reports SL_CPU_AVX2. Everything but the convolution sums is bit-identical
 * to the scalar reference: same operations, same order, no FMA.
 */
#include <stdint.h>
#include <string.h>

#include "nn_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* Lane masks for a partial vector of n < 8 (maskload / maskstore). */
static const int32_t tail_bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

INLINE __m256i tail_mask(size_t n)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(tail_bits + 8 - n));
}

INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ------------------------------------------------------------------------ */
/* Bias, ReLU                                                               */
/* ------------------------------------------------------------------------ */

static void bias_act_avx2(float *y, size_t rows, size_t cols, const float *bias, int relu)
{
    const __m256 zero = _mm256_setzero_ps();
    for (size_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
        size_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(bias + c));
            if (relu)
                v = _mm256_max_ps(v, zero); /* v > 0 ? v : 0, as the scalar code */
            _mm256_storeu_ps(row + c, v);
        }
        for (; c < cols; c++) {
            float v = row[c] + bias[c];
            row[c] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    }
}

static void bias_act_bwd_avx2(float *dy, const float *y, size_t rows, size_t cols, float *db)
{
    const __m256 zero = _mm256_setzero_ps();
    if (db != NULL)
        memset(db, 0, cols * sizeof *db);
    for (size_t r = 0; r < rows; r++) {
        float *row = dy + r * cols;
        const float *out = y != NULL ? y + r * cols : NULL;
        size_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            __m256 g = _mm256_loadu_ps(row + c);
            if (out != NULL) {
                g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_loadu_ps(out + c), zero, _CMP_GT_OQ));
                _mm256_storeu_ps(row + c, g);
            }
            if (db != NULL)
                _mm256_storeu_ps(db + c, _mm256_add_ps(_mm256_loadu_ps(db + c), g));
        }
        for (; c < cols; c++) {
            if (out != NULL)
                row[c] = out[c] > 0.0f ? row[c] : 0.0f;
            if (db != NULL)
                db[c] = db[c] + row[c];
        }
    }
}

static void relu_avx2(const float *x, float *y, size_t n)
{
    const __m256 zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), zero));
    for (; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_bwd_avx2(const float *dy, const float *y, float *dx, size_t n)
{
    const __m256 zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 m = _mm256_cmp_ps(_mm256_loadu_ps(y + i), zero, _CMP_GT_OQ);
        _mm256_storeu_ps(dx + i, _mm256_and_ps(_mm256_loadu_ps(dy + i), m));
    }
    for (; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* ------------------------------------------------------------------------ */
/* SGD                                                                      */
/* ------------------------------------------------------------------------ */

static void sgd_avx2(float *w, const float *grad, float *buf, const float *global, size_t n,
                     const sl__nn_sgd_args *a)
{
    const float wd = a->weight_decay, mu = a->prox_mu, m = a->momentum, lr = a->lr;
    const int prox = mu != 0.0f && global != NULL, first = a->first;
    const __m256 vwd = _mm256_set1_ps(wd), vmu = _mm256_set1_ps(mu), vm = _mm256_set1_ps(m);
    const __m256 vlr = _mm256_set1_ps(lr);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_loadu_ps(w + i), g = _mm256_loadu_ps(grad + i);
        if (wd != 0.0f)
            g = _mm256_add_ps(g, _mm256_mul_ps(vwd, wv));
        if (prox)
            g = _mm256_add_ps(g,
                              _mm256_mul_ps(vmu, _mm256_sub_ps(wv, _mm256_loadu_ps(global + i))));
        if (m != 0.0f) {
            if (!first)
                g = _mm256_add_ps(_mm256_mul_ps(vm, _mm256_loadu_ps(buf + i)), g);
            _mm256_storeu_ps(buf + i, g);
        }
        _mm256_storeu_ps(w + i, _mm256_sub_ps(wv, _mm256_mul_ps(vlr, g)));
    }
    if (i < n) {
        sl__nn_sgd_args rest = *a;
        sl__nn_ew_scalar.sgd(w + i, grad + i, buf != NULL ? buf + i : NULL,
                             global != NULL ? global + i : NULL, n - i, &rest);
    }
}

/* ------------------------------------------------------------------------ */
/* Max-pool 2x2                                                             */
/* ------------------------------------------------------------------------ */

/* Eight outputs of one window row pair; @nout < 8 for a partial vector. */
INLINE void pool8(const float *r0, const float *r1, size_t nout, __m256 vbias, int relu, float *y,
                  uint8_t *arg)
{
    __m256 a0, b0, a1, b1;
    if (nout == 8) {
        a0 = _mm256_loadu_ps(r0), b0 = _mm256_loadu_ps(r0 + 8);
        a1 = _mm256_loadu_ps(r1), b1 = _mm256_loadu_ps(r1 + 8);
    } else {
        __m256i ma = tail_mask(2 * nout < 8 ? 2 * nout : 8);
        __m256i mb = tail_mask(2 * nout > 8 ? 2 * nout - 8 : 0);
        a0 = _mm256_maskload_ps(r0, ma), b0 = _mm256_maskload_ps(r0 + 8, mb);
        a1 = _mm256_maskload_ps(r1, ma), b1 = _mm256_maskload_ps(r1 + 8, mb);
    }
    /* Even / odd columns, in the lane order (0 2 8 10 4 6 12 14) / 2 fixed below. */
    __m256 c0 = _mm256_shuffle_ps(a0, b0, 0x88), c1 = _mm256_shuffle_ps(a0, b0, 0xdd);
    __m256 c2 = _mm256_shuffle_ps(a1, b1, 0x88), c3 = _mm256_shuffle_ps(a1, b1, 0xdd);
    __m256 m = c0, k;
    __m256i at = _mm256_setzero_si256();
    k = _mm256_cmp_ps(c1, m, _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, c1, k);
    at = _mm256_blendv_epi8(at, _mm256_set1_epi32(1), _mm256_castps_si256(k));
    k = _mm256_cmp_ps(c2, m, _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, c2, k);
    at = _mm256_blendv_epi8(at, _mm256_set1_epi32(2), _mm256_castps_si256(k));
    k = _mm256_cmp_ps(c3, m, _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, c3, k);
    at = _mm256_blendv_epi8(at, _mm256_set1_epi32(3), _mm256_castps_si256(k));
    m = _mm256_add_ps(m, vbias);
    if (relu) {
        k = _mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ);
        m = _mm256_and_ps(m, k);
        at = _mm256_blendv_epi8(_mm256_set1_epi32(SL__NN_POOL_DEAD), at, _mm256_castps_si256(k));
    }
    m = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), 0xd8));
    at = _mm256_permute4x64_epi64(at, 0xd8);
    __m256i p = _mm256_packs_epi32(at, at);
    p = _mm256_packus_epi16(p, p);
    int32_t lo = _mm_cvtsi128_si32(_mm256_castsi256_si128(p));
    int32_t hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(p, 1));
    if (nout == 8) {
        _mm256_storeu_ps(y, m);
        memcpy(arg, &lo, 4);
        memcpy(arg + 4, &hi, 4);
    } else {
        uint8_t bytes[8];
        _mm256_maskstore_ps(y, tail_mask(nout), m);
        memcpy(bytes, &lo, 4);
        memcpy(bytes + 4, &hi, 4);
        memcpy(arg, bytes, nout);
    }
}

static void pool_fwd_avx2(const float *x, size_t ldx, size_t h, size_t w, float bias, int relu,
                          float *y, uint8_t *arg)
{
    size_t ho = h / 2, wo = w / 2;
    const __m256 vbias = _mm256_set1_ps(bias);
    for (size_t i = 0; i < ho; i++) {
        const float *r0 = x + 2 * i * ldx, *r1 = r0 + ldx;
        size_t j = 0;
        for (; j + 8 <= wo; j += 8)
            pool8(r0 + 2 * j, r1 + 2 * j, 8, vbias, relu, y + i * wo + j, arg + i * wo + j);
        if (j < wo)
            pool8(r0 + 2 * j, r1 + 2 * j, wo - j, vbias, relu, y + i * wo + j, arg + i * wo + j);
    }
}

/* Returns the eight gradients that got through (0 where none). */
INLINE __m256 unpool8(const float *dy, const uint8_t *arg, size_t nout, float *r0, float *r1)
{
    __m256 g;
    __m128i a8;
    if (nout == 8) {
        g = _mm256_loadu_ps(dy);
        a8 = _mm_loadl_epi64((const __m128i *)(const void *)arg);
    } else {
        uint8_t bytes[8] = {SL__NN_POOL_DEAD, SL__NN_POOL_DEAD, SL__NN_POOL_DEAD, SL__NN_POOL_DEAD,
                            SL__NN_POOL_DEAD, SL__NN_POOL_DEAD, SL__NN_POOL_DEAD, SL__NN_POOL_DEAD};
        memcpy(bytes, arg, nout);
        g = _mm256_maskload_ps(dy, tail_mask(nout));
        a8 = _mm_loadl_epi64((const __m128i *)(const void *)bytes);
    }
    __m256i at = _mm256_cvtepu8_epi32(a8);
    __m256 v[4];
    for (int p = 0; p < 4; p++)
        v[p] = _mm256_and_ps(g, _mm256_castsi256_ps(_mm256_cmpeq_epi32(at, _mm256_set1_epi32(p))));
    for (int r = 0; r < 2; r++) {
        __m256 lo = _mm256_unpacklo_ps(v[2 * r], v[2 * r + 1]);
        __m256 hi = _mm256_unpackhi_ps(v[2 * r], v[2 * r + 1]);
        __m256 o0 = _mm256_permute2f128_ps(lo, hi, 0x20), o1 = _mm256_permute2f128_ps(lo, hi, 0x31);
        float *dst = r == 0 ? r0 : r1;
        if (nout == 8) {
            _mm256_storeu_ps(dst, o0);
            _mm256_storeu_ps(dst + 8, o1);
        } else {
            _mm256_maskstore_ps(dst, tail_mask(2 * nout < 8 ? 2 * nout : 8), o0);
            _mm256_maskstore_ps(dst + 8, tail_mask(2 * nout > 8 ? 2 * nout - 8 : 0), o1);
        }
    }
    return _mm256_or_ps(_mm256_or_ps(v[0], v[1]), _mm256_or_ps(v[2], v[3]));
}

static float pool_bwd_avx2(const float *dy, const uint8_t *arg, size_t h, size_t w, float *dx,
                           size_t ldx)
{
    size_t ho = h / 2, wo = w / 2;
    __m256 sum = _mm256_setzero_ps();
    for (size_t i = 0; i < ho; i++) {
        float *r0 = dx + 2 * i * ldx, *r1 = r0 + ldx;
        size_t j = 0;
        for (; j + 8 <= wo; j += 8)
            sum = _mm256_add_ps(
                sum, unpool8(dy + i * wo + j, arg + i * wo + j, 8, r0 + 2 * j, r1 + 2 * j));
        if (j < wo)
            sum = _mm256_add_ps(
                sum, unpool8(dy + i * wo + j, arg + i * wo + j, wo - j, r0 + 2 * j, r1 + 2 * j));
        if (w & 1) {
            r0[w - 1] = 0.0f;
            r1[w - 1] = 0.0f;
        }
    }
    if (h & 1)
        memset(dx + (h - 1) * ldx, 0, w * sizeof *dx);
    return hsum(sum);
}

/* ------------------------------------------------------------------------ */
/* Direct convolution, one input channel                                    */
/* ------------------------------------------------------------------------ */

/* CB output channels x one row of up to NV * 8 outputs; CB and NV are
 * compile-time constants at every call, so the accumulators are registers. */
INLINE void conv_block(const float *x, size_t ldx, size_t k, const float *w, float *y, size_t ys,
                       size_t n, const int CB, const int NV)
{
    __m256 a0[6], a1[6];
    const __m256i m0 = tail_mask(n < 8 ? n : 8), m1 = tail_mask(n > 8 ? n - 8 : 0);
#pragma GCC unroll 6
    for (int c = 0; c < CB; c++)
        a0[c] = a1[c] = _mm256_setzero_ps();
    for (size_t kh = 0; kh < k; kh++) {
        for (size_t kw = 0; kw < k; kw++) {
            const float *in = x + kh * ldx + kw, *wt = w + kh * k + kw;
            __m256 v0 = _mm256_maskload_ps(in, m0);
            __m256 v1 = NV == 2 ? _mm256_maskload_ps(in + 8, m1) : v0;
#pragma GCC unroll 6
            for (int c = 0; c < CB; c++) {
                __m256 t = _mm256_broadcast_ss(wt + (size_t)c * k * k);
                a0[c] = _mm256_fmadd_ps(t, v0, a0[c]);
                if (NV == 2)
                    a1[c] = _mm256_fmadd_ps(t, v1, a1[c]);
            }
        }
    }
#pragma GCC unroll 6
    for (int c = 0; c < CB; c++) {
        _mm256_maskstore_ps(y + (size_t)c * ys, m0, a0[c]);
        if (NV == 2)
            _mm256_maskstore_ps(y + (size_t)c * ys + 8, m1, a1[c]);
    }
}

/* All output channels of one row chunk, in blocks of 6, 4, 2, 1. */
INLINE void conv_chunk(const float *x, size_t ldx, size_t k, const float *w, size_t cout, float *y,
                       size_t ys, size_t n, const int NV)
{
    size_t co = 0, kk = k * k;
    for (; co + 6 <= cout; co += 6)
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, n, 6, NV);
    if (cout - co >= 4) {
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, n, 4, NV);
        co += 4;
    }
    if (cout - co >= 2) {
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, n, 2, NV);
        co += 2;
    }
    if (co < cout)
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, n, 1, NV);
}

static void conv1_fwd_avx2(const float *x, size_t ldx, size_t ho, size_t wo, size_t k,
                           const float *w, size_t cout, float *y, size_t ys)
{
    for (size_t oh = 0; oh < ho; oh++) {
        for (size_t ow = 0; ow < wo; ow += 16) {
            size_t n = wo - ow < 16 ? wo - ow : 16;
            const float *in = x + oh * ldx + ow;
            float *out = y + oh * wo + ow;
            if (n > 8)
                conv_chunk(in, ldx, k, w, cout, out, ys, n, 2);
            else
                conv_chunk(in, ldx, k, w, cout, out, ys, n, 1);
        }
    }
}

/* Taps of NR kernel rows from kh0, for one output channel, over the batch. */
INLINE void dw_rows(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho, size_t wo,
                    const float *dyc, const int K, size_t kh0, const int NR, float *dwc)
{
    __m256 acc[10];
    const __m256i mt = tail_mask(wo % 8);
    for (int t = 0; t < NR * K; t++)
        acc[t] = _mm256_setzero_ps();
    for (size_t n = 0; n < batch; n++) {
        for (size_t oh = 0; oh < ho; oh++) {
            const float *g = dyc + (n * ho + oh) * wo;
            const float *in = x + n * xs + (oh + kh0) * ldx;
            size_t ow = 0;
            for (; ow + 8 <= wo; ow += 8) {
                __m256 d = _mm256_loadu_ps(g + ow);
#pragma GCC unroll 10
                for (int t = 0; t < NR * K; t++)
                    acc[t] = _mm256_fmadd_ps(
                        d, _mm256_loadu_ps(in + (size_t)(t / K) * ldx + ow + (size_t)(t % K)),
                        acc[t]);
            }
            if (ow < wo) {
                __m256 d = _mm256_maskload_ps(g + ow, mt);
#pragma GCC unroll 10
                for (int t = 0; t < NR * K; t++)
                    acc[t] = _mm256_fmadd_ps(
                        d,
                        _mm256_maskload_ps(in + (size_t)(t / K) * ldx + ow + (size_t)(t % K), mt),
                        acc[t]);
            }
        }
    }
    for (int t = 0; t < NR * K; t++)
        dwc[kh0 * (size_t)K + (size_t)t] = hsum(acc[t]);
}

static void conv1_dw_avx2(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho, size_t wo,
                          size_t k, const float *dy, size_t dys, size_t cout, float *dw)
{
    if (k != 3 && k != 5) {
        sl__nn_conv1_dw_scalar(x, xs, ldx, batch, ho, wo, k, dy, dys, cout, dw);
        return;
    }
    for (size_t co = 0; co < cout; co++) {
        const float *dyc = dy + co * dys;
        float *dwc = dw + co * k * k;
        if (k == 3) {
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 3, 0, 3, dwc);
        } else {
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 5, 0, 2, dwc);
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 5, 2, 2, dwc);
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 5, 4, 1, dwc);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* im2col / col2im                                                          */
/* ------------------------------------------------------------------------ */

/* Lanes of the 8-column chunk at @ow0 whose columns lie in [lo, hi). */
INLINE __m256i span(size_t lo, size_t hi, size_t ow0)
{
    size_t a = lo > ow0 ? lo - ow0 : 0, b = hi > ow0 ? hi - ow0 : 0;
    return _mm256_andnot_si256(tail_mask(a < 8 ? a : 8), tail_mask(b < 8 ? b : 8));
}

/* @row shifted by @off floats (off may be negative); see the AVX-512 file. */
INLINE uintptr_t shifted(const float *row, ptrdiff_t off)
{
    return (uintptr_t)row + (uintptr_t)(off * (ptrdiff_t)sizeof(float));
}

static void im2col_row_avx2(const float *x, size_t xs, size_t batch, size_t h, size_t w, size_t ho,
                            size_t wo, size_t kh, size_t kw, size_t pad, float *cols)
{
    const ptrdiff_t shift = (ptrdiff_t)kw - (ptrdiff_t)pad;
    /* rows oh in [oh0, oh1) read input row oh + kh - pad; the others are padding */
    size_t oh0 = kh < pad ? pad - kh : 0, oh1 = h + pad > kh ? h + pad - kh : 0;
    size_t lo, hi;
    sl__nn_conv_cols(w, wo, kw, pad, &lo, &hi);
    oh0 = oh0 < ho ? oh0 : ho;
    oh1 = oh1 < ho ? oh1 : ho;
    oh1 = oh1 > oh0 ? oh1 : oh0;
    for (size_t n = 0; n < batch; n++) {
        float *dst = cols + n * ho * wo;
        memset(dst, 0, oh0 * wo * sizeof *dst);
        memset(dst + oh1 * wo, 0, (ho - oh1) * wo * sizeof *dst);
        const float *row = x + n * xs + (oh0 + kh - pad) * w;
        for (size_t oh = oh0; oh < oh1; oh++, row += w) {
            for (size_t ow0 = 0; ow0 < wo; ow0 += 8) {
                __m256 v = _mm256_maskload_ps((const float *)shifted(row, (ptrdiff_t)ow0 + shift),
                                              span(lo, hi, ow0));
                if (wo - ow0 >= 8)
                    _mm256_storeu_ps(dst + oh * wo + ow0, v);
                else
                    _mm256_maskstore_ps(dst + oh * wo + ow0, tail_mask(wo - ow0), v);
            }
        }
    }
}

static void col2im_avx2(const float *cols, size_t rs, size_t batch, size_t h, size_t w, size_t ho,
                        size_t wo, size_t k, size_t pad, float *x, size_t xs)
{
    for (size_t n = 0; n < batch; n++) {
        for (size_t ih = 0; ih < h; ih++) {
            float *dst = x + n * xs + ih * w;
            for (size_t iw0 = 0; iw0 < w; iw0 += 8) {
                __m256 acc = _mm256_setzero_ps();
                size_t valid = w - iw0 < 8 ? w - iw0 : 8;
                /* kernel rows reaching this input row: oh = ih + pad - kh in [0, ho) */
                size_t kh0 = ih + pad >= ho ? ih + pad - ho + 1 : 0;
                size_t kh1 = ih + pad + 1 < k ? ih + pad + 1 : k;
                for (size_t kh = kh0; kh < kh1; kh++) {
                    const float *base = cols + kh * k * rs + (n * ho + ih + pad - kh) * wo;
                    for (size_t kw = 0; kw < k; kw++) {
                        /* lane i is input column iw0 + i, output column iw0 + i + pad - kw */
                        ptrdiff_t off = (ptrdiff_t)iw0 + (ptrdiff_t)pad - (ptrdiff_t)kw;
                        size_t lo = kw > iw0 + pad ? kw - iw0 - pad : 0;
                        size_t hi = wo + kw > iw0 + pad ? wo + kw - iw0 - pad : 0;
                        hi = hi < valid ? hi : valid;
                        lo = lo < hi ? lo : hi;
                        __m256i m = _mm256_andnot_si256(tail_mask(lo), tail_mask(hi));
                        acc = _mm256_add_ps(
                            acc,
                            _mm256_maskload_ps((const float *)shifted(base + kw * rs, off), m));
                    }
                }
                if (valid == 8)
                    _mm256_storeu_ps(dst + iw0, acc);
                else
                    _mm256_maskstore_ps(dst + iw0, tail_mask(valid), acc);
            }
        }
    }
}

const sl__nn_ew_kernels sl__nn_ew_avx2 = {
    "avx2",        SL_CPU_AVX2,     bias_act_avx2, bias_act_bwd_avx2, relu_avx2,
    relu_bwd_avx2, sgd_avx2,        pool_fwd_avx2, pool_bwd_avx2,     conv1_fwd_avx2,
    conv1_dw_avx2, im2col_row_avx2, col2im_avx2,
};

#endif /* SL_X86_SIMD */
