/*
 * loss.c - the losses of a model spec over a batch, and their gradient with
 * respect to the output: cross-entropy over logits with integer labels
 * (optionally label-smoothed), binary cross-entropy with logits (multi-label),
 * mean squared error, L1 and Huber. Every loss is a mean over the batch (and
 * over the outputs, but for cross-entropy), as PyTorch's default reduction.
 */
#include <math.h>

#include "graph_int.h"
#include "nn_int.h"

int sl__loss(const sl_spec *s, const float *out, size_t batch, const int32_t *labels,
             const float *targets, double *loss, float *dout)
{
    size_t d = (size_t)s->t[s->output].count;
    double total = 0.0;
    if (out == NULL || batch == 0 || loss == NULL)
        return SL_EINVAL;
    if (s->loss == SL__LOSS_CROSS_ENTROPY) {
        double eps = s->label_smoothing;
        if (labels == NULL)
            return SL_EINVAL;
        for (size_t n = 0; n < batch; n++)
            if (labels[n] < 0 || (size_t)labels[n] >= d)
                return SL_EINVAL;
        for (size_t n = 0; n < batch; n++) {
            const float *z = out + n * d;
            double mx = z[0], sum = 0.0, lse;
            for (size_t j = 1; j < d; j++)
                mx = z[j] > mx ? z[j] : mx;
            for (size_t j = 0; j < d; j++)
                sum += exp((double)z[j] - mx);
            lse = mx + log(sum);
            /* -(1 - eps) log p_y - eps / d * sum_j log p_j */
            total += (1.0 - eps) * (lse - z[labels[n]]);
            if (eps > 0)
                for (size_t j = 0; j < d; j++)
                    total += eps / (double)d * (lse - z[j]);
            if (dout != NULL)
                for (size_t j = 0; j < d; j++) {
                    double p = exp((double)z[j] - lse);
                    double t = (1.0 - eps) * ((size_t)labels[n] == j) + eps / (double)d;
                    dout[n * d + j] = (float)((p - t) / (double)batch);
                }
        }
        *loss = total / (double)batch;
        return SL_OK;
    }
    if (targets == NULL)
        return SL_EINVAL;
    for (size_t i = 0; i < batch * d; i++) /* checked first: a refusal writes nothing */
        if (!isfinite(targets[i]) ||
            (s->loss == SL__LOSS_BCE_WITH_LOGITS && (targets[i] < 0 || targets[i] > 1)))
            return SL_EINVAL;
    for (size_t i = 0; i < batch * d; i++) {
        double z = out[i], t = targets[i], g;
        switch ((sl__loss_kind)s->loss) {
        case SL__LOSS_BCE_WITH_LOGITS:
            /* max(z, 0) - z t + log(1 + e^-|z|), stable for any z */
            total += (z > 0 ? z : 0) - z * t + log1p(exp(-fabs(z)));
            g = 1.0 / (1.0 + exp(-z)) - t;
            break;
        case SL__LOSS_MSE:
            total += (z - t) * (z - t);
            g = 2.0 * (z - t);
            break;
        case SL__LOSS_L1:
            total += fabs(z - t);
            g = z > t ? 1.0 : z < t ? -1.0 : 0.0;
            break;
        default: { /* Huber */
            double r = z - t, delta = s->huber_delta;
            if (fabs(r) <= delta) {
                total += 0.5 * r * r;
                g = r;
            } else {
                total += delta * (fabs(r) - 0.5 * delta);
                g = r > 0 ? delta : -delta;
            }
            break;
        }
        }
        if (dout != NULL)
            dout[i] = (float)(g / (double)(batch * d));
    }
    *loss = total / (double)(batch * d);
    return SL_OK;
}
