/*
 * starling/optim.h - local optimisers of the training engine: SGD
 * (momentum, dampening, Nesterov, weight decay), Adam and AdamW with
 * PyTorch's semantics (torch.optim.SGD / Adam / AdamW of PyTorch 1.13,
 * single-tensor path), plus FedProx's proximal term, clipping by the global
 * L2 norm of the gradient (torch.nn.utils.clip_grad_norm_) and a mask of
 * the parameters that are trained (frozen tensors and buffers never move).
 *
 * One step, for every trained float i, in this order:
 *   g = grad[i] * clip                  clip = min(1, max_norm / (|grad| + 1e-6)),
 *                                       |grad| over the trained floats only
 *   g = g + mu * (w - global)           FedProx, when prox_mu > 0
 *   SGD:   g = g + wd * w
 *          buf = g (first step), else buf = momentum * buf + (1 - dampening) * g
 *          g = nesterov ? g + momentum * buf : buf            (when momentum > 0)
 *          w = w - lr * g
 *   Adam:  g = g + wd * w
 *   AdamW: w = w * (1 - lr * wd)
 *   both:  m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
 *          w = w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * t counts steps from 1 since sl_optim_create() or sl_optim_reset(). The
 * scalars (bias corrections, lr / (1 - beta1^t), 1 - lr * wd) are computed
 * in double and rounded to float once, as PyTorch does with Python floats;
 * the per-element arithmetic is float. Results match PyTorch's within a few
 * float roundings (PyTorch's CPU kernels fuse some multiply-adds).
 *
 * Memory: SGD with momentum holds 1 float per trained parameter, Adam and
 * AdamW 2; plain SGD none. Frozen floats take no state.
 *
 * Conventions: SL_OK or a negative sl_status; outputs untouched on error.
 * An optimiser object is used by one thread at a time.
 */
#ifndef STARLING_OPTIM_H
#define STARLING_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "starling/codec.h"
#include "starling/common.h"
#include "starling/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The update rule. */
typedef enum sl_optim_kind {
    SL_OPTIM_SGD = 0,  /* torch.optim.SGD */
    SL_OPTIM_ADAM = 1, /* torch.optim.Adam (weight decay as L2 in the gradient) */
    SL_OPTIM_ADAMW = 2 /* torch.optim.AdamW (decoupled weight decay) */
} sl_optim_kind;

/**
 * Settings of an optimiser. Fields that do not belong to @kind must be 0
 * (a momentum given to Adam is a mistake, not a no-op); start from
 * sl_optim_params_default().
 */
typedef struct sl_optim_params {
    sl_optim_kind kind;
    double lr;           /* base learning rate, finite, > 0 */
    double weight_decay; /* >= 0; SGD and Adam: g += wd * w; AdamW: w *= 1 - lr * wd */
    /* SGD only */
    double momentum;  /* [0, 1) */
    double dampening; /* [0, 1]; 0 with nesterov */
    int nesterov;     /* 0 or 1; needs momentum > 0 and dampening 0 */
    /* Adam and AdamW only */
    double beta1, beta2; /* [0, 1) each */
    double eps;          /* finite, > 0 */
    /* every kind */
    double prox_mu;       /* FedProx: g += mu * (w - global); 0 = off, else > 0 */
    double max_grad_norm; /* clip the gradient to this global L2 norm; 0 = off, else > 0 */
    /* Learning-rate schedule hook: the rate for @epoch / @step (both
     * 0-based; step counts sl_optim_step() calls since sl_optim_create() or
     * the last sl_optim_reset()) given the base rate; NULL keeps it
     * constant. A negative or non-finite rate makes the step fail with
     * SL_EINVAL (parameters untouched). As with a PyTorch scheduler, AdamW's
     * decay factor 1 - lr * wd uses the scheduled rate. */
    double (*schedule)(void *ctx, uint32_t epoch, uint64_t step, double base_lr);
    void *schedule_ctx;
} sl_optim_params;

/** An optimiser: settings, trained-float mask and state. Opaque. */
typedef struct sl_optim sl_optim;

/**
 * sl_optim_params_default - PyTorch's defaults for @kind into @p (all other
 * fields 0, no schedule): SGD lr 0.01 (PyTorch has no default rate; this is
 * sl_sgd's usual one), Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
 * decay 0; AdamW the same with weight decay 1e-2. Returns SL_OK or SL_EINVAL
 * (unknown kind, NULL @p). Thread-safe.
 */
int sl_optim_params_default(sl_optim_kind kind, sl_optim_params *p);

/**
 * sl_optim_check - whether @p is a valid setting: every value finite and in
 * the range given in sl_optim_params, fields of other kinds 0. Returns
 * SL_OK or SL_EINVAL. Thread-safe.
 */
int sl_optim_check(const sl_optim_params *p);

/**
 * sl_optim_state_estimate - the bytes of per-parameter state an optimiser
 * with settings @p would allocate for @trained trained floats (momentum,
 * Adam's two moments), for memory budgets before creating one. Does not
 * count the object itself nor its mask runs (sl_optim_state_bytes() does).
 * Returns SL_OK, SL_EINVAL (bad settings, NULL @bytes), SL_ETOOBIG (the
 * size overflows size_t). Thread-safe.
 */
int sl_optim_state_estimate(const sl_optim_params *p, size_t trained, size_t *bytes);

/**
 * sl_optim_create - an optimiser for a parameter vector of @n floats.
 * @p: the settings (copied; see sl_optim_check()).
 * @mask: @n bytes, nonzero = trained, 0 = never moves (frozen tensors,
 * buffers) and stays out of the clipping norm; copied (as runs), so it may
 * be freed after the call. NULL trains every float. Build one with
 * sl_optim_mask_spec() or sl_optim_mask_layout().
 * @out: receives the optimiser; free with sl_optim_free().
 * Returns SL_OK, SL_EINVAL (bad settings, @n of 0, NULL @out), SL_ENOMEM.
 * Thread-safe (the new object is not shared).
 */
int sl_optim_create(size_t n, const sl_optim_params *p, const uint8_t *mask, sl_optim **out);

/** sl_optim_free - NULL is a no-op. */
void sl_optim_free(sl_optim *opt);

/**
 * sl_optim_step - one update of @params (n floats) with gradient @grad (n
 * floats, not modified: clipping scales a copy), by the formula at the top
 * of this header. @global: the round's global weights (n floats) when
 * prox_mu > 0, else ignored (may be NULL). @epoch: passed to the schedule.
 * Floats outside the mask are neither read from @grad nor written.
 * Returns SL_OK; SL_EINVAL (NULL arguments, FedProx without @global, a bad
 * scheduled rate); SL_ENONFINITE when clipping is on and the gradient's
 * norm is NaN or infinite (PyTorch would write NaN into every parameter).
 * On error neither @params nor the state change.
 */
int sl_optim_step(sl_optim *opt, float *params, const float *grad, const float *global,
                  uint32_t epoch);

/**
 * sl_optim_reset - clear the state (momentum buffer, Adam's moments, the
 * step count of the bias corrections and of the schedule): the next step is
 * a first step again, as with a fresh torch.optim object. For a new round.
 * NULL is a no-op.
 */
void sl_optim_reset(sl_optim *opt);

/** sl_optim_size - the n of sl_optim_create() (0 for NULL). */
size_t sl_optim_size(const sl_optim *opt);

/** sl_optim_trained - how many of the n floats are trained (0 for NULL). */
size_t sl_optim_trained(const sl_optim *opt);

/** sl_optim_steps - steps taken since creation or the last reset (0 for NULL). */
uint64_t sl_optim_steps(const sl_optim *opt);

/**
 * sl_optim_state_bytes - heap bytes the optimiser holds: the object, its
 * mask runs and its per-parameter state (see the "Memory" note above).
 * 0 for NULL.
 */
size_t sl_optim_state_bytes(const sl_optim *opt);

/**
 * sl_optim_mask_layout - the trained-float mask of a parameter vector laid
 * out by @layout: 1 for every float of a tensor that is trained, 0 for
 * those of a frozen or fixed tensor.
 * @frozen, @nfrozen: names; an entry freezes the tensor of that name and
 * every tensor under it as a module path: "fc1" freezes "fc1.weight" and
 * "fc1.bias" (not "fc10.weight"); "fc1." does the same; "layer1.0" freezes
 * "layer1.0.conv.weight". @frozen may be NULL when @nfrozen is 0.
 * @fixed: NULL, or one byte per tensor of @layout, nonzero for a tensor the
 * gradient must not move (a buffer: BatchNorm's running statistics). The
 * public spec API has no per-parameter buffer accessor; sl_optim_mask_spec()
 * reads the spec's flags itself.
 * @mask: sl_layout_params() bytes, written only on success.
 * Returns SL_OK, SL_EINVAL (NULL arguments, an empty name), SL_ENOENT (an
 * entry of @frozen names no tensor: a typo must not train everything).
 * Thread-safe.
 */
int sl_optim_mask_layout(const sl_layout *layout, const char *const *frozen, size_t nfrozen,
                         const uint8_t *fixed, uint8_t *mask);

/**
 * sl_optim_mask_spec - sl_optim_mask_layout() for the layout of @spec,
 * with the spec's "buffer" parameters fixed (MODEL_SPEC.md). "local"
 * parameters (FedBN) are trained as usual. Returns as sl_optim_mask_layout().
 */
int sl_optim_mask_spec(const sl_spec *spec, const char *const *frozen, size_t nfrozen,
                       uint8_t *mask);

/**
 * sl_train_opt - sl_train() with a general optimiser: @opts->epochs epochs
 * of shuffled mini-batches of the samples @indices[0..n) (NULL: 0..n-1) of
 * the data set (@x: sl_model_input_size() floats per sample, @y: labels of a
 * cross-entropy spec), each step sl_model_loss_grad(), sl_optim_step() and
 * then sl_model_update_buffers() (BatchNorm's running statistics). The
 * sample order is sl_train()'s for the same seed. @global: the round's
 * global weights when prox_mu > 0 (else may be NULL). @mean_loss: mean loss
 * of the last epoch (may be NULL). The optimiser is not reset: call
 * sl_optim_reset() between rounds. Returns SL_OK, SL_EINVAL (NULL
 * arguments, n of 0, a batch of 0, an optimiser for another size),
 * SL_ENOMEM, or the first error of a step (the parameters then hold the
 * steps done before it). Deterministic for a seed.
 */
int sl_train_opt(sl_model *model, float *params, sl_optim *opt, const float *global, const float *x,
                 const int32_t *y, const uint32_t *indices, size_t n, const sl_train_opts *opts,
                 float *mean_loss);

/**
 * sl_train_opt_targets - sl_train_opt() for a spec whose loss takes targets
 * (bce_with_logits, mse, l1, huber): @t holds sl_model_classes() floats per
 * sample (regression targets, or multi-label targets in [0, 1]), indexed as
 * @x; each step is sl_model_loss_grad_targets(). The sample order is
 * sl_train()'s for the same seed. SL_EINVAL also for a cross-entropy spec
 * (it takes labels: sl_train_opt()).
 */
int sl_train_opt_targets(sl_model *model, float *params, sl_optim *opt, const float *global,
                         const float *x, const float *t, const uint32_t *indices, size_t n,
                         const sl_train_opts *opts, float *mean_loss);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_OPTIM_H */
