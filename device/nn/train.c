/*
 * train.c - the training and evaluation loops: shuffled mini-batches
 * gathered into one contiguous batch, sl_model_loss_grad (or, with targets,
 * sl_model_loss_grad_targets), then sl_sgd_step (sl_train) or sl_optim_step
 * and sl_model_update_buffers (sl_train_opt, sl_train_opt_targets).
 * Buffers are allocated once per call, never per step.
 */
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "graph_int.h"
#include "nn_int.h"
#include "starling/optim.h"

/* The sample order of one epoch: @indices (or 0..n-1) shuffled by
 * Fisher-Yates with a generator seeded by (seed, epoch). */
static void epoch_order(uint32_t *order, const uint32_t *indices, size_t n, uint64_t seed,
                        uint32_t epoch)
{
    uint64_t rng = sl__nn_rng_state(seed, epoch);
    for (size_t i = 0; i < n; i++)
        order[i] = indices != NULL ? indices[i] : (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = sl__nn_rng_below(&rng, (uint32_t)i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

static void gather(const float *x, const int32_t *y, const uint32_t *idx, size_t count, size_t dim,
                   float *xb, int32_t *yb)
{
    for (size_t i = 0; i < count; i++) {
        memcpy(xb + i * dim, x + (size_t)idx[i] * dim, dim * sizeof *xb);
        yb[i] = y[idx[i]];
    }
}

/* The optimiser of one loop: sl_train's SGD or sl_train_opt's sl_optim; and, for a spec whose
 * loss takes targets (sl_train_opt_targets), @t: tdim floats per sample instead of labels. */
typedef struct stepper {
    sl_sgd *sgd;
    sl_optim *opt;
    const float *t;
    size_t tdim;
} stepper;

static int train_loop(sl_model *model, float *params, const stepper *st, const float *global,
                      const float *x, const int32_t *y, const uint32_t *indices, size_t n,
                      const sl_train_opts *opts, float *mean_loss)
{
    size_t dim, batch, np;
    uint32_t *order = NULL;
    float *xb = NULL, *grad = NULL;
    int32_t *yb = NULL;
    double epoch_loss = 0.0;
    int rc = SL_OK, out_of_steps = 0;
    uint64_t steps = 0;
    size_t reached = 0; /* samples the last epoch reached */

    float *tb = NULL;
    if (model == NULL || params == NULL || x == NULL || (y == NULL && st->t == NULL) ||
        opts == NULL || n == 0 || opts->batch == 0 || n > UINT32_MAX)
        return SL_EINVAL;
    np = sl_model_params(model);
    if ((st->sgd != NULL ? sl__nn_sgd_size(st->sgd) : sl_optim_size(st->opt)) != np)
        return SL_EINVAL;
    dim = sl_model_input_size(model);
    batch = opts->batch < n ? opts->batch : n;
    order = malloc(n * sizeof *order);
    xb = aligned_alloc(SL__NN_ALIGN,
                       (batch * dim * sizeof *xb + SL__NN_ALIGN - 1) / SL__NN_ALIGN * SL__NN_ALIGN);
    yb = malloc(batch * sizeof *yb);
    tb = st->t != NULL ? malloc(batch * st->tdim * sizeof *tb) : NULL;
    grad = aligned_alloc(SL__NN_ALIGN,
                         (np * sizeof *grad + SL__NN_ALIGN - 1) / SL__NN_ALIGN * SL__NN_ALIGN);
    if (order == NULL || xb == NULL || yb == NULL || grad == NULL ||
        (st->t != NULL && tb == NULL)) {
        rc = SL_ENOMEM;
        goto done;
    }
    for (uint32_t e = 0; rc == SL_OK && e < opts->epochs && !out_of_steps; e++) {
        epoch_loss = 0.0;
        epoch_order(order, indices, n, opts->seed, e);
        for (size_t done = 0; done < n && !out_of_steps;) {
            size_t count = n - done < batch ? n - done : batch;
            float loss;
            if (st->t != NULL) {
                for (size_t i = 0; i < count; i++) {
                    memcpy(xb + i * dim, x + (size_t)order[done + i] * dim, dim * sizeof *xb);
                    memcpy(tb + i * st->tdim, st->t + (size_t)order[done + i] * st->tdim,
                           st->tdim * sizeof *tb);
                }
                rc = sl_model_loss_grad_targets(model, params, xb, tb, count, &loss, grad, NULL);
            } else {
                gather(x, y, order + done, count, dim, xb, yb);
                rc = sl_model_loss_grad(model, params, xb, yb, count, &loss, grad, NULL);
            }
            if (rc == SL_OK && st->sgd != NULL) {
                rc = sl_sgd_step(st->sgd, params, grad, global, e);
            } else if (rc == SL_OK) {
                /* the running statistics of this batch's forward pass, after the update
                 * as nn.h asks (sl_train predates buffers and leaves them alone) */
                rc = sl_optim_step(st->opt, params, grad, global, e);
                if (rc == SL_OK)
                    sl_model_update_buffers(model, params);
            }
            if (rc != SL_OK)
                goto done;
            epoch_loss += (double)loss * (double)count;
            done += count;
            reached = done;
            out_of_steps = opts->max_steps > 0 && ++steps >= opts->max_steps;
            if (opts->progress != NULL)
                opts->progress(opts->progress_ctx, e, done, n, (float)(epoch_loss / (double)done));
        }
    }
    if (mean_loss != NULL && opts->epochs > 0 && reached > 0)
        *mean_loss = (float)(epoch_loss / (double)reached);
done:
    free(order);
    free(xb);
    free(yb);
    free(tb);
    free(grad);
    return rc;
}

int sl_train(sl_model *model, float *params, sl_sgd *sgd, const float *global, const float *x,
             const int32_t *y, const uint32_t *indices, size_t n, const sl_train_opts *opts,
             float *mean_loss)
{
    stepper st = {sgd, NULL, NULL, 0};
    if (sgd == NULL)
        return SL_EINVAL;
    return train_loop(model, params, &st, global, x, y, indices, n, opts, mean_loss);
}

int sl_train_opt(sl_model *model, float *params, sl_optim *opt, const float *global, const float *x,
                 const int32_t *y, const uint32_t *indices, size_t n, const sl_train_opts *opts,
                 float *mean_loss)
{
    stepper st = {NULL, opt, NULL, 0};
    if (opt == NULL)
        return SL_EINVAL;
    return train_loop(model, params, &st, global, x, y, indices, n, opts, mean_loss);
}

int sl_train_opt_targets(sl_model *model, float *params, sl_optim *opt, const float *global,
                         const float *x, const float *t, const uint32_t *indices, size_t n,
                         const sl_train_opts *opts, float *mean_loss)
{
    stepper st = {NULL, opt, t, model != NULL ? sl_model_classes(model) : 0};
    if (opt == NULL || t == NULL || model == NULL ||
        sl_spec_loss_kind(sl_model_spec(model)) == SL_SPEC_CROSS_ENTROPY)
        return SL_EINVAL;
    return train_loop(model, params, &st, global, x, NULL, indices, n, opts, mean_loss);
}

int sl_evaluate(sl_model *model, const float *params, const float *x, const int32_t *y,
                const uint32_t *indices, size_t n, size_t batch, double *accuracy, double *loss)
{
    size_t dim, correct = 0, classes;
    float *xb = NULL, *logits = NULL;
    int32_t *yb = NULL;
    double total = 0.0;
    int rc = SL_OK;

    if (model == NULL || params == NULL || x == NULL || y == NULL || n == 0 || batch == 0)
        return SL_EINVAL;
    dim = sl_model_input_size(model);
    classes = sl_model_classes(model);
    batch = batch < n ? batch : n;
    logits = malloc(batch * classes * sizeof *logits);
    yb = malloc(batch * sizeof *yb);
    xb = indices != NULL ? malloc(batch * dim * sizeof *xb) : NULL;
    if (logits == NULL || yb == NULL || (indices != NULL && xb == NULL)) {
        rc = SL_ENOMEM;
        goto done;
    }
    for (size_t start = 0; start < n; start += batch) {
        size_t count = n - start < batch ? n - start : batch;
        const float *in = x + start * dim;
        double mean;
        if (indices != NULL) {
            gather(x, y, indices + start, count, dim, xb, yb);
            in = xb;
        } else {
            memcpy(yb, y + start, count * sizeof *yb);
        }
        rc = sl_model_forward(model, params, in, count, logits);
        if (rc == SL_OK)
            rc = sl__nn_softmax_ce(logits, yb, count, classes, &mean, NULL, NULL);
        if (rc != SL_OK)
            goto done;
        total += mean * (double)count;
        for (size_t i = 0; i < count; i++) {
            const float *z = logits + i * classes;
            size_t best = 0;
            for (size_t j = 1; j < classes; j++)
                if (z[j] > z[best])
                    best = j;
            correct += (int32_t)best == yb[i];
        }
    }
    if (accuracy != NULL)
        *accuracy = (double)correct / (double)n;
    if (loss != NULL)
        *loss = total / (double)n;
done:
    free(xb);
    free(yb);
    free(logits);
    return rc;
}

int sl_model_metrics(sl_model *model, const float *params, const float *x, const int32_t *y,
                     const float *t, const uint32_t *indices, size_t n, size_t batch,
                     sl_metrics *out, double *recall)
{
    const sl_spec *s;
    sl_spec_loss kind;
    size_t dim, outs, *seen = NULL, *hit = NULL, correct = 0;
    float *xb = NULL, *z = NULL, *tb = NULL;
    int32_t *yb = NULL;
    double loss_sum = 0, abs_sum = 0, sq_sum = 0;
    int rc = SL_OK;

    if (model == NULL || params == NULL || x == NULL || out == NULL || n == 0 || batch == 0 ||
        n > UINT32_MAX)
        return SL_EINVAL;
    s = sl_model_spec(model);
    kind = sl_spec_loss_kind(s);
    if ((kind == SL_SPEC_CROSS_ENTROPY) != (y != NULL) || (kind != SL_SPEC_CROSS_ENTROPY && !t))
        return SL_EINVAL;
    dim = sl_model_input_size(model);
    outs = sl_model_classes(model);
    batch = batch < n ? batch : n;
    xb = malloc(batch * dim * sizeof *xb);
    z = malloc(batch * outs * sizeof *z);
    yb = y ? malloc(batch * sizeof *yb) : NULL;
    tb = t ? malloc(batch * outs * sizeof *tb) : NULL;
    seen = y ? calloc(outs, sizeof *seen) : NULL;
    hit = y ? calloc(outs, sizeof *hit) : NULL;
    if (xb == NULL || z == NULL || (y && (yb == NULL || seen == NULL || hit == NULL)) ||
        (t && tb == NULL)) {
        rc = SL_ENOMEM;
        goto done;
    }
    for (size_t start = 0; start < n && rc == SL_OK; start += batch) {
        size_t count = n - start < batch ? n - start : batch;
        double mean = 0;
        for (size_t i = 0; i < count; i++) {
            size_t k = indices ? indices[start + i] : start + i;
            memcpy(xb + i * dim, x + k * dim, dim * sizeof *xb);
            if (yb)
                yb[i] = y[k];
            if (tb)
                memcpy(tb + i * outs, t + k * outs, outs * sizeof *tb);
        }
        rc = sl_model_forward(model, params, xb, count, z);
        if (rc == SL_OK)
            rc = sl__loss(s, z, count, yb, tb, &mean, NULL);
        if (rc != SL_OK)
            break;
        loss_sum += mean * (double)count;
        for (size_t i = 0; i < count; i++) {
            const float *zi = z + i * outs;
            if (kind == SL_SPEC_CROSS_ENTROPY) {
                size_t best = 0;
                for (size_t j = 1; j < outs; j++)
                    best = zi[j] > zi[best] ? j : best;
                seen[yb[i]]++;
                hit[yb[i]] += (int32_t)best == yb[i];
                correct += (int32_t)best == yb[i];
            } else if (kind == SL_SPEC_BCE_WITH_LOGITS) {
                int all = 1;
                for (size_t j = 0; j < outs; j++)
                    all &= (zi[j] > 0) == (tb[i * outs + j] > 0.5f);
                correct += (size_t)all;
            } else {
                for (size_t j = 0; j < outs; j++) {
                    double d = (double)zi[j] - (double)tb[i * outs + j];
                    abs_sum += fabs(d);
                    sq_sum += d * d;
                }
            }
        }
    }
    if (rc != SL_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->n = n;
    out->loss = loss_sum / (double)n;
    out->accuracy = out->mae = out->rmse = NAN;
    if (kind == SL_SPEC_CROSS_ENTROPY || kind == SL_SPEC_BCE_WITH_LOGITS)
        out->accuracy = (double)correct / (double)n;
    else {
        out->mae = abs_sum / ((double)n * (double)outs);
        out->rmse = sqrt(sq_sum / ((double)n * (double)outs));
    }
    if (kind == SL_SPEC_CROSS_ENTROPY) {
        out->classes = outs;
        if (recall != NULL)
            for (size_t j = 0; j < outs; j++)
                recall[j] = seen[j] ? (double)hit[j] / (double)seen[j] : NAN;
    }
done:
    free(xb);
    free(z);
    free(yb);
    free(tb);
    free(seen);
    free(hit);
    return rc;
}
