/*
 * elementwise_avx512.c - AVX-512 (F/BW/DQ/VL) variant of the element-wise
 * kernels (nn_int.h). Used only when sl_cpu_features() reports
 * SL_CPU_AVX512. Partial vectors use mask registers, so there are no scalar
 * tails. Everything but the convolution sums is bit-identical to the scalar
 * reference: same operations, same order, no FMA.
 */
#include <stdint.h>
#include <string.h>

#include "nn_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 lanes(size_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* ------------------------------------------------------------------------ */
/* Bias, ReLU                                                               */
/* ------------------------------------------------------------------------ */

static void bias_act_avx512(float *y, size_t rows, size_t cols, const float *bias, int relu)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
        for (size_t c = 0; c < cols; c += 16) {
            __mmask16 m = lanes(cols - c);
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, row + c),
                                     _mm512_maskz_loadu_ps(m, bias + c));
            if (relu)
                v = _mm512_max_ps(v, zero); /* v > 0 ? v : 0, as the scalar code */
            _mm512_mask_storeu_ps(row + c, m, v);
        }
    }
}

static void bias_act_bwd_avx512(float *dy, const float *y, size_t rows, size_t cols, float *db)
{
    const __m512 zero = _mm512_setzero_ps();
    if (db != NULL)
        memset(db, 0, cols * sizeof *db);
    for (size_t r = 0; r < rows; r++) {
        float *row = dy + r * cols;
        for (size_t c = 0; c < cols; c += 16) {
            __mmask16 m = lanes(cols - c);
            __m512 g = _mm512_maskz_loadu_ps(m, row + c);
            if (y != NULL) {
                __mmask16 pos = _mm512_mask_cmp_ps_mask(
                    m, _mm512_maskz_loadu_ps(m, y + r * cols + c), zero, _CMP_GT_OQ);
                g = _mm512_maskz_mov_ps(pos, g);
                _mm512_mask_storeu_ps(row + c, m, g);
            }
            if (db != NULL)
                _mm512_mask_storeu_ps(db + c, m,
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(m, db + c), g));
        }
    }
}

static void relu_avx512(const float *x, float *y, size_t n)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_max_ps(_mm512_maskz_loadu_ps(m, x + i), zero));
    }
}

static void relu_bwd_avx512(const float *dy, const float *y, float *dx, size_t n)
{
    const __m512 zero = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        __mmask16 pos =
            _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, y + i), zero, _CMP_GT_OQ);
        _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_loadu_ps(pos, dy + i));
    }
}

/* ------------------------------------------------------------------------ */
/* SGD                                                                      */
/* ------------------------------------------------------------------------ */

static void sgd_avx512(float *w, const float *grad, float *buf, const float *global, size_t n,
                       const sl__nn_sgd_args *a)
{
    const float wd = a->weight_decay, mu = a->prox_mu, m = a->momentum;
    const int prox = mu != 0.0f && global != NULL, first = a->first;
    const __m512 vwd = _mm512_set1_ps(wd), vmu = _mm512_set1_ps(mu), vm = _mm512_set1_ps(m);
    const __m512 vlr = _mm512_set1_ps(a->lr);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes(n - i);
        __m512 wv = _mm512_maskz_loadu_ps(k, w + i), g = _mm512_maskz_loadu_ps(k, grad + i);
        if (wd != 0.0f)
            g = _mm512_add_ps(g, _mm512_mul_ps(vwd, wv));
        if (prox)
            g = _mm512_add_ps(
                g, _mm512_mul_ps(vmu, _mm512_sub_ps(wv, _mm512_maskz_loadu_ps(k, global + i))));
        if (m != 0.0f) {
            if (!first)
                g = _mm512_add_ps(_mm512_mul_ps(vm, _mm512_maskz_loadu_ps(k, buf + i)), g);
            _mm512_mask_storeu_ps(buf + i, k, g);
        }
        _mm512_mask_storeu_ps(w + i, k, _mm512_sub_ps(wv, _mm512_mul_ps(vlr, g)));
    }
}

/* ------------------------------------------------------------------------ */
/* Max-pool 2x2                                                             */
/* ------------------------------------------------------------------------ */

static void pool_fwd_avx512(const float *x, size_t ldx, size_t h, size_t w, float bias, int relu,
                            float *y, uint8_t *arg)
{
    size_t ho = h / 2, wo = w / 2;
    const __m512 vbias = _mm512_set1_ps(bias), zero = _mm512_setzero_ps();
    /* Gather even and odd columns of 32 inputs into 16 lanes. */
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (size_t i = 0; i < ho; i++) {
        const float *r0 = x + 2 * i * ldx, *r1 = r0 + ldx;
        for (size_t j = 0; j < wo; j += 16) {
            size_t nout = wo - j < 16 ? wo - j : 16;
            __mmask16 ma = lanes(2 * nout), mb = lanes(2 * nout > 16 ? 2 * nout - 16 : 0);
            __m512 a0 = _mm512_maskz_loadu_ps(ma, r0 + 2 * j);
            __m512 b0 = _mm512_maskz_loadu_ps(mb, r0 + 2 * j + 16);
            __m512 a1 = _mm512_maskz_loadu_ps(ma, r1 + 2 * j);
            __m512 b1 = _mm512_maskz_loadu_ps(mb, r1 + 2 * j + 16);
            __m512 c1 = _mm512_permutex2var_ps(a0, odd, b0);
            __m512 c2 = _mm512_permutex2var_ps(a1, even, b1);
            __m512 c3 = _mm512_permutex2var_ps(a1, odd, b1);
            __m512 m = _mm512_permutex2var_ps(a0, even, b0);
            __m512i at = _mm512_setzero_si512();
            __mmask16 k = _mm512_cmp_ps_mask(c1, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, k, c1);
            at = _mm512_mask_mov_epi32(at, k, _mm512_set1_epi32(1));
            k = _mm512_cmp_ps_mask(c2, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, k, c2);
            at = _mm512_mask_mov_epi32(at, k, _mm512_set1_epi32(2));
            k = _mm512_cmp_ps_mask(c3, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, k, c3);
            at = _mm512_mask_mov_epi32(at, k, _mm512_set1_epi32(3));
            m = _mm512_add_ps(m, vbias);
            if (relu) {
                k = _mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ);
                m = _mm512_maskz_mov_ps(k, m);
                at = _mm512_mask_mov_epi32(_mm512_set1_epi32(SL__NN_POOL_DEAD), k, at);
            }
            __mmask16 mo = lanes(nout);
            _mm512_mask_storeu_ps(y + i * wo + j, mo, m);
            _mm_mask_storeu_epi8(arg + i * wo + j, mo, _mm512_cvtepi32_epi8(at));
        }
    }
}

static float pool_bwd_avx512(const float *dy, const uint8_t *arg, size_t h, size_t w, float *dx,
                             size_t ldx)
{
    size_t ho = h / 2, wo = w / 2;
    __m512 sum = _mm512_setzero_ps();
    /* Interleave lanes 0..15 of p and q (p0 q0 p1 q1 ...) into 32 outputs. */
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (size_t i = 0; i < ho; i++) {
        float *rows[2] = {dx + 2 * i * ldx, dx + (2 * i + 1) * ldx};
        for (size_t j = 0; j < wo; j += 16) {
            size_t nout = wo - j < 16 ? wo - j : 16;
            __mmask16 mo = lanes(nout);
            __m512 g = _mm512_maskz_loadu_ps(mo, dy + i * wo + j);
            __m512i at = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mo, arg + i * wo + j));
            __mmask16 ma = lanes(2 * nout), mb = lanes(2 * nout > 16 ? 2 * nout - 16 : 0);
            sum = _mm512_add_ps(
                sum, _mm512_maskz_mov_ps(
                         _mm512_cmplt_epu32_mask(at, _mm512_set1_epi32(SL__NN_POOL_DEAD)), g));
            for (int r = 0; r < 2; r++) {
                __m512 p =
                    _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(2 * r)), g);
                __m512 q = _mm512_maskz_mov_ps(
                    _mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(2 * r + 1)), g);
                _mm512_mask_storeu_ps(rows[r] + 2 * j, ma, _mm512_permutex2var_ps(p, lo, q));
                _mm512_mask_storeu_ps(rows[r] + 2 * j + 16, mb, _mm512_permutex2var_ps(p, hi, q));
            }
        }
        if (w & 1) {
            rows[0][w - 1] = 0.0f;
            rows[1][w - 1] = 0.0f;
        }
    }
    if (h & 1)
        memset(dx + (h - 1) * ldx, 0, w * sizeof *dx);
    return _mm512_reduce_add_ps(sum);
}

/* ------------------------------------------------------------------------ */
/* Direct convolution, one input channel                                    */
/* ------------------------------------------------------------------------ */

/* CB output channels x one row of up to NV * 16 outputs; CB and NV are
 * compile-time constants at every call, so the accumulators are registers. */
INLINE void conv_block(const float *x, size_t ldx, size_t k, const float *w, float *y, size_t ys,
                       __mmask16 m0, __mmask16 m1, const int CB, const int NV)
{
    __m512 a0[8], a1[8];
#pragma GCC unroll 8
    for (int c = 0; c < CB; c++)
        a0[c] = a1[c] = _mm512_setzero_ps();
    for (size_t kh = 0; kh < k; kh++) {
        for (size_t kw = 0; kw < k; kw++) {
            const float *in = x + kh * ldx + kw, *wt = w + kh * k + kw;
            __m512 v0 = _mm512_maskz_loadu_ps(m0, in);
            __m512 v1 = NV == 2 ? _mm512_maskz_loadu_ps(m1, in + 16) : v0;
#pragma GCC unroll 8
            for (int c = 0; c < CB; c++) {
                __m512 t = _mm512_set1_ps(wt[(size_t)c * k * k]);
                a0[c] = _mm512_fmadd_ps(t, v0, a0[c]);
                if (NV == 2)
                    a1[c] = _mm512_fmadd_ps(t, v1, a1[c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < CB; c++) {
        _mm512_mask_storeu_ps(y + (size_t)c * ys, m0, a0[c]);
        if (NV == 2)
            _mm512_mask_storeu_ps(y + (size_t)c * ys + 16, m1, a1[c]);
    }
}

/* All output channels of one row chunk, in blocks of 8, 6, 4, 2, 1. */
INLINE void conv_chunk(const float *x, size_t ldx, size_t k, const float *w, size_t cout, float *y,
                       size_t ys, __mmask16 m0, __mmask16 m1, const int NV)
{
    size_t co = 0, kk = k * k;
    for (; co + 8 <= cout; co += 8)
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, m0, m1, 8, NV);
    if (cout - co >= 6) {
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, m0, m1, 6, NV);
        co += 6;
    }
    if (cout - co >= 4) {
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, m0, m1, 4, NV);
        co += 4;
    }
    if (cout - co >= 2) {
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, m0, m1, 2, NV);
        co += 2;
    }
    if (co < cout)
        conv_block(x, ldx, k, w + co * kk, y + co * ys, ys, m0, m1, 1, NV);
}

static void conv1_fwd_avx512(const float *x, size_t ldx, size_t ho, size_t wo, size_t k,
                             const float *w, size_t cout, float *y, size_t ys)
{
    for (size_t oh = 0; oh < ho; oh++) {
        for (size_t ow = 0; ow < wo; ow += 32) {
            size_t n = wo - ow < 32 ? wo - ow : 32;
            const float *in = x + oh * ldx + ow;
            float *out = y + oh * wo + ow;
            __mmask16 m0 = lanes(n), m1 = lanes(n > 16 ? n - 16 : 0);
            if (n > 16)
                conv_chunk(in, ldx, k, w, cout, out, ys, m0, m1, 2);
            else
                conv_chunk(in, ldx, k, w, cout, out, ys, m0, m1, 1);
        }
    }
}

/* Taps of NR kernel rows from kh0 (NR * K <= 15 accumulators), one output
 * channel, over the batch. */
INLINE void dw_rows(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho, size_t wo,
                    const float *dyc, const int K, size_t kh0, const int NR, float *dwc)
{
    __m512 acc[15];
#pragma GCC unroll 15
    for (int t = 0; t < NR * K; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t n = 0; n < batch; n++) {
        for (size_t oh = 0; oh < ho; oh++) {
            const float *g = dyc + (n * ho + oh) * wo;
            const float *in = x + n * xs + (oh + kh0) * ldx;
            for (size_t ow = 0; ow < wo; ow += 16) {
                __mmask16 m = lanes(wo - ow);
                __m512 d = _mm512_maskz_loadu_ps(m, g + ow);
#pragma GCC unroll 15
                for (int t = 0; t < NR * K; t++)
                    acc[t] = _mm512_fmadd_ps(
                        d,
                        _mm512_maskz_loadu_ps(m, in + (size_t)(t / K) * ldx + ow + (size_t)(t % K)),
                        acc[t]);
            }
        }
    }
#pragma GCC unroll 15
    for (int t = 0; t < NR * K; t++)
        dwc[kh0 * (size_t)K + (size_t)t] = _mm512_reduce_add_ps(acc[t]);
}

static void conv1_dw_avx512(const float *x, size_t xs, size_t ldx, size_t batch, size_t ho,
                            size_t wo, size_t k, const float *dy, size_t dys, size_t cout,
                            float *dw)
{
    if (k != 3 && k != 5) {
        sl__nn_conv1_dw_scalar(x, xs, ldx, batch, ho, wo, k, dy, dys, cout, dw);
        return;
    }
    for (size_t co = 0; co < cout; co++) {
        const float *dyc = dy + co * dys;
        if (k == 3) {
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 3, 0, 3, dw + co * 9);
        } else {
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 5, 0, 3, dw + co * 25);
            dw_rows(x, xs, ldx, batch, ho, wo, dyc, 5, 3, 2, dw + co * 25);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* im2col / col2im                                                          */
/* ------------------------------------------------------------------------ */

/* Lanes of the 16-column chunk at @ow0 whose columns lie in [lo, hi). */
INLINE __mmask16 span(size_t lo, size_t hi, size_t ow0)
{
    size_t a = lo > ow0 ? lo - ow0 : 0, b = hi > ow0 ? hi - ow0 : 0;
    return (__mmask16)(lanes(b) & ~lanes(a));
}

/* @row shifted by @off floats (off may be negative). Only masked loads and
 * stores whose active lanes lie inside the row use it, so the address is
 * formed as an integer: it may point before the row, never read there. */
INLINE uintptr_t shifted(const float *row, ptrdiff_t off)
{
    return (uintptr_t)row + (uintptr_t)(off * (ptrdiff_t)sizeof(float));
}

static void im2col_row_avx512(const float *x, size_t xs, size_t batch, size_t h, size_t w,
                              size_t ho, size_t wo, size_t kh, size_t kw, size_t pad, float *cols)
{
    const __m512 zero = _mm512_setzero_ps();
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
        for (size_t i = 0; i < oh0 * wo; i += 16)
            _mm512_mask_storeu_ps(dst + i, lanes(oh0 * wo - i), zero);
        for (size_t i = oh1 * wo; i < ho * wo; i += 16)
            _mm512_mask_storeu_ps(dst + i, lanes(ho * wo - i), zero);
        if (oh1 == oh0)
            continue;
        const float *row = x + n * xs + (oh0 + kh - pad) * w;
        if (wo <= 16) {
            const __mmask16 ml = span(lo, hi, 0), ms = lanes(wo);
            const float *src = (const float *)shifted(row, shift);
            for (size_t oh = oh0; oh < oh1; oh++, src += w)
                _mm512_mask_storeu_ps(dst + oh * wo, ms, _mm512_maskz_loadu_ps(ml, src));
            continue;
        }
        for (size_t oh = oh0; oh < oh1; oh++, row += w)
            for (size_t ow0 = 0; ow0 < wo; ow0 += 16)
                _mm512_mask_storeu_ps(
                    dst + oh * wo + ow0, lanes(wo - ow0),
                    _mm512_maskz_loadu_ps(span(lo, hi, ow0),
                                          (const float *)shifted(row, (ptrdiff_t)ow0 + shift)));
    }
}

/* Lanes of the 16-column input chunk at @iw0 that kernel column @kw
 * reaches from inside the output row (and that lie inside the input row). */
INLINE __mmask16 col2im_lanes(size_t iw0, size_t kw, size_t pad, size_t w, size_t wo)
{
    size_t lo = kw > iw0 + pad ? kw - iw0 - pad : 0;
    size_t hi = wo + kw > iw0 + pad ? wo + kw - iw0 - pad : 0;
    return (__mmask16)(lanes(hi) & ~lanes(lo) & lanes(w - iw0));
}

static void col2im_avx512(const float *cols, size_t rs, size_t batch, size_t h, size_t w, size_t ho,
                          size_t wo, size_t k, size_t pad, float *x, size_t xs)
{
    __mmask16 first[SL__NN_DIRECT_MAX_K * 2 + 1];
    const int hoist = w <= 16 && k <= sizeof first / sizeof first[0];
    for (size_t kw = 0; hoist && kw < k; kw++)
        first[kw] = col2im_lanes(0, kw, pad, w, wo);
    for (size_t n = 0; n < batch; n++) {
        for (size_t ih = 0; ih < h; ih++) {
            float *dst = x + n * xs + ih * w;
            /* kernel rows kh reaching this input row: oh = ih + pad - kh in [0, ho) */
            size_t kh0 = ih + pad >= ho ? ih + pad - ho + 1 : 0;
            size_t kh1 = ih + pad + 1 < k ? ih + pad + 1 : k;
            for (size_t iw0 = 0; iw0 < w; iw0 += 16) {
                __m512 acc = _mm512_setzero_ps();
                for (size_t kh = kh0; kh < kh1; kh++) {
                    const float *base = cols + kh * k * rs + (n * ho + ih + pad - kh) * wo;
                    for (size_t kw = 0; kw < k; kw++) {
                        /* lane i is input column iw0 + i, output column iw0 + i + pad - kw */
                        __mmask16 m = hoist ? first[kw] : col2im_lanes(iw0, kw, pad, w, wo);
                        ptrdiff_t off = (ptrdiff_t)iw0 + (ptrdiff_t)pad - (ptrdiff_t)kw;
                        acc = _mm512_add_ps(
                            acc,
                            _mm512_maskz_loadu_ps(m, (const float *)shifted(base + kw * rs, off)));
                    }
                }
                _mm512_mask_storeu_ps(dst + iw0, lanes(w - iw0), acc);
            }
        }
    }
}

const sl__nn_ew_kernels sl__nn_ew_avx512 = {
    "avx512",        SL_CPU_AVX512,     bias_act_avx512, bias_act_bwd_avx512, relu_avx512,
    relu_bwd_avx512, sgd_avx512,        pool_fwd_avx512, pool_bwd_avx512,     conv1_fwd_avx512,
    conv1_dw_avx512, im2col_row_avx512, col2im_avx512,
};

#endif /* SL_X86_SIMD */
