/*
 * layers.c - dense, ReLU, 2x2 max-pooling, flatten and softmax
 * cross-entropy, forward and backward (nn_int.h).
 *
 * Dense layers are GEMMs with the operands as stored, no transposes:
 *   forward  Y  = X W^T          (NO_TRANS, TRANS)   M = batch, N = out, K = in
 *   dW          = dY^T X         (TRANS, NO_TRANS)   M = out,   N = in,  K = batch
 *   dX          = dY W           (NO_TRANS, NO_TRANS) M = batch, N = in,  K = out
 * The bias and the ReLU are one pass over Y (and its mask and the bias
 * gradient one pass over dY), done by the element-wise kernels.
 */
#include <math.h>
#include <string.h>

#include "nn_int.h"

/* ------------------------------------------------------------------------ */
/* Dense                                                                    */
/* ------------------------------------------------------------------------ */

int sl__nn_dense_forward(const float *x, size_t batch, size_t in, size_t out, const float *w,
                         const float *b, int relu, float *y)
{
    int rc =
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, batch, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    if (rc != SL_OK)
        return rc;
    sl__nn_ew()->bias_act(y, batch, out, b, relu);
    return SL_OK;
}

int sl__nn_dense_backward(const float *x, const float *y, int relu, float *dy, size_t batch,
                          size_t in, size_t out, const float *w, float *dw, float *db, float *dx)
{
    int rc;
    sl__nn_ew()->bias_act_bwd(dy, relu ? y : NULL, batch, out, db);
    rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, out, in, batch, 1.0f, dy, out, x, in, 0.0f, dw,
                     in);
    if (rc == SL_OK && dx != NULL)
        rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, batch, in, out, 1.0f, dy, out, w, in, 0.0f,
                         dx, in);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* ReLU                                                                     */
/* ------------------------------------------------------------------------ */

void sl__nn_relu_forward(const float *x, float *y, size_t n)
{
    sl__nn_ew()->relu(x, y, n);
}

void sl__nn_relu_backward(const float *dy, const float *y, float *dx, size_t n)
{
    sl__nn_ew()->relu_bwd(dy, y, dx, n);
}

/* ------------------------------------------------------------------------ */
/* Max-pool 2x2 and flatten                                                 */
/* ------------------------------------------------------------------------ */

/* Offset of output plane (c, n) in CNHW or NCHW order, in planes. */
static size_t plane_index(size_t c, size_t n, size_t channels, size_t batch, int nchw)
{
    return nchw ? n * channels + c : c * batch + n;
}

void sl__nn_pool_forward(const float *x, size_t channels, size_t batch, size_t h, size_t w,
                         const float *bias, int relu, int nchw, float *y, uint8_t *arg)
{
    const sl__nn_ew_kernels *k = sl__nn_ew();
    size_t hw = h * w, phw = (h / 2) * (w / 2);
    for (size_t c = 0; c < channels; c++) {
        float b = bias != NULL ? bias[c] : 0.0f;
        for (size_t n = 0; n < batch; n++) {
            size_t p = plane_index(c, n, channels, batch, nchw);
            k->pool_fwd(x + (c * batch + n) * hw, w, h, w, b, relu, y + p * phw, arg + p * phw);
        }
    }
}

void sl__nn_pool_backward(const float *dy, const uint8_t *arg, size_t channels, size_t batch,
                          size_t h, size_t w, int nchw, float *dx, float *dbias)
{
    const sl__nn_ew_kernels *k = sl__nn_ew();
    size_t hw = h * w, phw = (h / 2) * (w / 2);
    for (size_t c = 0; c < channels; c++) {
        float sum = 0.0f;
        for (size_t n = 0; n < batch; n++) {
            size_t p = plane_index(c, n, channels, batch, nchw);
            /* The bias was added after the max: its gradient is the sum
             * of what got through. */
            sum += k->pool_bwd(dy + p * phw, arg + p * phw, h, w, dx + (c * batch + n) * hw, w);
        }
        if (dbias != NULL)
            dbias[c] = sum;
    }
}

void sl__nn_flatten_forward(const float *x_cnhw, size_t channels, size_t batch, size_t hw,
                            float *y_nchw)
{
    for (size_t c = 0; c < channels; c++)
        for (size_t n = 0; n < batch; n++)
            memcpy(y_nchw + (n * channels + c) * hw, x_cnhw + (c * batch + n) * hw,
                   hw * sizeof *y_nchw);
}

void sl__nn_flatten_backward(const float *dy_nchw, size_t channels, size_t batch, size_t hw,
                             float *dx_cnhw)
{
    for (size_t c = 0; c < channels; c++)
        for (size_t n = 0; n < batch; n++)
            memcpy(dx_cnhw + (c * batch + n) * hw, dy_nchw + (n * channels + c) * hw,
                   hw * sizeof *dx_cnhw);
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                    */
/* ------------------------------------------------------------------------ */

int sl__nn_softmax_ce(const float *logits, const int32_t *labels, size_t batch, size_t classes,
                      double *loss, double *sample_loss, float *dlogits)
{
    double total = 0.0;
    if (classes == 0)
        return SL_EINVAL;
    for (size_t n = 0; n < batch; n++)
        if (labels[n] < 0 || (size_t)labels[n] >= classes)
            return SL_EINVAL;
    for (size_t n = 0; n < batch; n++) {
        const float *z = logits + n * classes;
        double mx = z[0], sum = 0.0, lse, l;
        for (size_t j = 1; j < classes; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (size_t j = 0; j < classes; j++)
            sum += exp((double)z[j] - mx);
        lse = mx + log(sum);
        l = lse - (double)z[labels[n]];
        total += l;
        if (sample_loss != NULL)
            sample_loss[n] = l;
        if (dlogits != NULL) {
            float *d = dlogits + n * classes;
            for (size_t j = 0; j < classes; j++) {
                double p = exp((double)z[j] - lse);
                d[j] = (float)((p - ((size_t)labels[n] == j ? 1.0 : 0.0)) / (double)batch);
            }
        }
    }
    if (loss != NULL)
        *loss = batch > 0 ? total / (double)batch : 0.0;
    return SL_OK;
}
