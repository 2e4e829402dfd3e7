/*
 * starling/nn.h - the on-device training engine: SGEMM and element-wise
 * kernels, layers, the model registry, SGD/FedProx and a training loop.
 *
 * Parameters of a model are one flat fp32 vector described by a codecs
 * layout (PyTorch's parameter order and shapes), so updates and models map
 * one to one onto frames, and an exported model loads into PyTorch as is.
 * Activations are batch-major, images NCHW.
 *
 * Kernels: a scalar reference is always built; on x86-64 AVX2+FMA and
 * AVX-512 variants are chosen at run time (sl_cpu_features()), on arm NEON
 * at compile time; SL_FORCE_SCALAR=1 forces the reference. Single-threaded
 * unless sl_nn_set_threads() says otherwise.
 *
 * Conventions: SL_OK or a negative sl_status; outputs untouched on error.
 * A model object holds scratch memory: one model per thread.
 */
#ifndef STARLING_NN_H
#define STARLING_NN_H

#include <stddef.h>
#include <stdint.h>

#include "starling/codec.h"
#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Kernels                                                                  */
/* ------------------------------------------------------------------------ */

/** Whether a GEMM operand is used as stored or transposed. */
typedef enum sl_nn_trans { SL_NN_NO_TRANS = 0, SL_NN_TRANS = 1 } sl_nn_trans;

/**
 * sl_nn_sgemm - C = alpha * op(A) * op(B) + beta * C, row-major (as
 * cblas_sgemm with CblasRowMajor).
 * @m, @n, @k: op(A) is m x k, op(B) is k x n, C is m x n; any may be 0.
 * @a, @lda: A is stored m x k (lda >= k) or, transposed, k x m (lda >= m).
 * @b, @ldb: B is stored k x n (ldb >= n) or, transposed, n x k (ldb >= k).
 * @c, @ldc: ldc >= n. With beta == 0, C is not read (NaN in C is ignored).
 * Returns SL_OK, SL_EINVAL (a leading dimension too small, NULL with a
 * non-empty operand), SL_ENOMEM (packing buffers). Thread-safe.
 */
int sl_nn_sgemm(sl_nn_trans trans_a, sl_nn_trans trans_b, size_t m, size_t n, size_t k, float alpha,
                const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                size_t ldc);

/**
 * sl_nn_set_threads - threads sl_nn_sgemm() may use (1 = single-threaded,
 * the default; 0 = one per online CPU). Process-wide.
 */
void sl_nn_set_threads(unsigned threads);

/** sl_nn_kernel_variant - "avx512", "avx2", "neon" or "scalar": the GEMM in use. */
const char *sl_nn_kernel_variant(void);

/* ------------------------------------------------------------------------ */
/* Model specs (device/nn/MODEL_SPEC.md)                                    */
/* ------------------------------------------------------------------------ */

/** A parsed, checked model spec: inputs, parameters, graph, loss. Opaque. */
typedef struct sl_spec sl_spec;

/** The loss a spec trains with. */
typedef enum sl_spec_loss {
    SL_SPEC_CROSS_ENTROPY = 0,   /* logits [C], a class index per sample */
    SL_SPEC_BCE_WITH_LOGITS = 1, /* logits [C], C targets in [0, 1] per sample */
    SL_SPEC_MSE = 2,             /* predictions [D], D targets per sample */
    SL_SPEC_L1 = 3,
    SL_SPEC_HUBER = 4
} sl_spec_loss;

/**
 * sl_spec_parse - parse and check a model spec (JSON, @len bytes; at most
 * 16 MiB): every key, name, attribute and shape (MODEL_SPEC.md, "What is
 * checked"). The document is untrusted.
 * @out: receives the spec; free with sl_spec_free().
 * @err, @errcap: on failure a one-line reason that starts with the JSON path
 * of the first problem ("nodes[3] (conv1).attrs: ..."); may be NULL.
 * Returns SL_OK, SL_ESYNTAX (not JSON), SL_EVERSION (another format
 * version), SL_ESPEC (not a valid spec), SL_ENOMEM, SL_EINVAL. Nothing is
 * allocated on failure. Thread-safe.
 */
int sl_spec_parse(const char *json, size_t len, sl_spec **out, char *err, size_t errcap);

/** sl_spec_free - NULL is a no-op. */
void sl_spec_free(sl_spec *spec);

/** sl_spec_name - the spec's "name". */
const char *sl_spec_name(const sl_spec *spec);

/** sl_spec_layout - its parameters in layout order (owned by the spec). */
const sl_layout *sl_spec_layout(const sl_spec *spec);

/** sl_spec_text - the document as parsed (owned by the spec); *@len its bytes. */
const char *sl_spec_text(const sl_spec *spec, size_t *len);

/** sl_spec_inputs - the number of model inputs (1..8). */
size_t sl_spec_inputs(const sl_spec *spec);

/** sl_spec_input_size - elements per sample of input @i (0 when out of range). */
size_t sl_spec_input_size(const sl_spec *spec, size_t i);

/** sl_spec_output_size - elements per sample of the output (classes, targets). */
size_t sl_spec_output_size(const sl_spec *spec);

/** sl_spec_nodes - the number of nodes. */
size_t sl_spec_nodes(const sl_spec *spec);

/** sl_spec_loss_kind - the spec's loss. */
sl_spec_loss sl_spec_loss_kind(const sl_spec *spec);

/**
 * sl_spec_tensor_shape - the inferred per-sample shape of the tensor
 * @name (an input, a parameter or a node output) into @shape (room for 6)
 * and *@ndim. Returns SL_OK, SL_ENOENT, SL_EINVAL.
 */
int sl_spec_tensor_shape(const sl_spec *spec, const char *name, uint32_t *shape, size_t *ndim);

/* ------------------------------------------------------------------------ */
/* Models                                                                   */
/* ------------------------------------------------------------------------ */

/** A model built from a spec, with its scratch space. Opaque. */
typedef struct sl_model sl_model;

/**
 * sl_model_create_spec - a model that runs @spec (which must outlive it):
 * lowered to fused stages when its graph has their shape ([Conv -> Relu ->
 * MaxPool 2x2]* -> Flatten -> [Gemm -> Relu]* -> Gemm, cross-entropy,
 * one input channel), else the general executor; both give the same values
 * within rounding. SL_NN_GENERAL set in the environment forces the general
 * executor (for tests and comparisons). Returns SL_OK, SL_EUNSUPPORTED (an op this build has no
 * kernels for; the reason in @err, which may be NULL), SL_ENOMEM, SL_EINVAL.
 */
int sl_model_create_spec(const sl_spec *spec, sl_model **out, char *err, size_t errcap);

/**
 * sl_model_create - a model of the registry: the spec files of
 * device/nn/models, compiled in:
 *   "logreg"  784 -> 10                                            (7,850)
 *   "mlp"     784-200-200-10, ReLU                                 (199,210)
 *   "lenet5"  conv 6@5x5 valid, pool, conv 16@5x5 valid, pool,
 *             FC 120, 84, 10, ReLU                                 (44,426)
 *   "cnn"     conv 32@5x5 same, pool, conv 64@5x5 same, pool,
 *             FC 512, 10, ReLU                                     (1,663,370)
 * (each takes a 1x28x28 image and gives 10 logits: Fashion-MNIST's). The
 * model owns its spec. Returns SL_OK, SL_ENOENT (unknown name), SL_ENOMEM.
 */
int sl_model_create(const char *name, sl_model **out);

/** sl_model_free - NULL is a no-op. */
void sl_model_free(sl_model *model);

/** sl_model_names - NULL-terminated list of the registry's names. */
const char *const *sl_model_names(void);

/** sl_model_spec - the spec the model runs. */
const sl_spec *sl_model_spec(const sl_model *model);

/** sl_model_name - the spec's name. */
const char *sl_model_name(const sl_model *model);

/** sl_model_layout - the parameter layout (owned by the spec). */
const sl_layout *sl_model_layout(const sl_model *model);

/** sl_model_params - number of fp32 parameters. */
size_t sl_model_params(const sl_model *model);

/** sl_model_input_size - floats per sample of the (first) input. */
size_t sl_model_input_size(const sl_model *model);

/** sl_model_classes - outputs per sample (classes, or regression targets). */
size_t sl_model_classes(const sl_model *model);

/** sl_model_fused - 1 when the spec runs as fused stages, 0 on the general executor. */
int sl_model_fused(const sl_model *model);

/**
 * sl_model_activation_bytes - the scratch memory a training step of @batch
 * samples needs (activations, their gradients, workspaces: the one arena
 * planned before the first step), not counting the parameters, the gradient
 * vector and the optimiser's state. 0 when it cannot be sized (overflow).
 * Does not allocate.
 */
size_t sl_model_activation_bytes(sl_model *model, size_t batch);

/**
 * sl_model_init - each parameter as its spec's "init" says, deterministic by
 * @seed; the default is PyTorch's: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
 * (kaiming_uniform with a = sqrt(5) for weights, as nn.Linear / nn.Conv2d
 * reset_parameters), a bias sharing its weight's fan-in.
 */
int sl_model_init(const sl_model *model, float *params, uint64_t seed);

/**
 * sl_model_forward - outputs (logits) for a batch, inference mode (Dropout
 * off, BatchNormalization on its running statistics). @x: @batch x
 * sl_model_input_size() floats; @logits: @batch x sl_model_classes(). A
 * batch of 0 does nothing. Returns SL_OK, SL_EINVAL, SL_ENOMEM.
 */
int sl_model_forward(sl_model *model, const float *params, const float *x, size_t batch,
                     float *logits);

/**
 * sl_model_loss_grad - a training step's forward and backward pass for a
 * spec with the cross-entropy loss: the mean loss over the batch and its
 * gradient with respect to every parameter (a buffer's is 0). @labels:
 * @batch ints in [0, classes) (SL_EINVAL otherwise, and for a batch of 0 or
 * another loss). @grad: sl_model_params() floats, overwritten. @loss: may be
 * NULL. @logits: optional (@batch x classes), the forward result.
 */
int sl_model_loss_grad(sl_model *model, const float *params, const float *x, const int32_t *labels,
                       size_t batch, float *loss, float *grad, float *logits);

/**
 * sl_model_loss_grad_targets - the same for a spec whose loss takes targets
 * (bce_with_logits, mse, l1, huber): @targets @batch x classes floats
 * (finite; in [0, 1] for bce_with_logits: SL_EINVAL otherwise).
 */
int sl_model_loss_grad_targets(sl_model *model, const float *params, const float *x,
                               const float *targets, size_t batch, float *loss, float *grad,
                               float *outputs);

/**
 * sl_model_update_buffers - after a training step (and the optimiser's
 * update): fold the step's batch statistics into the buffer parameters of
 * @params (BatchNormalization's running mean and variance). A no-op for a
 * spec without buffers.
 */
void sl_model_update_buffers(sl_model *model, float *params);

/* ------------------------------------------------------------------------ */
/* Optimiser                                                                */
/* ------------------------------------------------------------------------ */

/** SGD settings (PyTorch's torch.optim.SGD semantics, plus FedProx). */
typedef struct sl_sgd_params {
    float lr;           /* base learning rate, > 0 */
    float momentum;     /* [0, 1) */
    float weight_decay; /* L2, added to the gradient: g += wd * w */
    float prox_mu;      /* FedProx: g += mu * (w - w_global); 0 = off */
    /* Learning-rate schedule hook: the rate for @epoch / @step (both
     * 0-based; step counts sl_sgd_step() calls since sl_sgd_create() or the
     * last sl_sgd_reset()) given the base rate; NULL keeps it constant. A
     * negative or non-finite rate makes the step fail with SL_EINVAL. */
    float (*schedule)(void *ctx, uint32_t epoch, uint64_t step, float base_lr);
    void *schedule_ctx;
} sl_sgd_params;

/** An optimiser's state (momentum buffer). Opaque. */
typedef struct sl_sgd sl_sgd;

/** sl_sgd_create - state for @n parameters; SL_EINVAL for bad settings. */
int sl_sgd_create(size_t n, const sl_sgd_params *p, sl_sgd **out);

/** sl_sgd_free - NULL is a no-op. */
void sl_sgd_free(sl_sgd *sgd);

/**
 * sl_sgd_step - one update of @params (n floats) with gradient @grad:
 *   g = grad + wd * w + mu * (w - global)      (global: NULL unless FedProx)
 *   buf = momentum * buf + g   (buf = g on the first step)
 *   w -= lr(epoch, step) * buf
 * SL_EINVAL when FedProx is on (prox_mu > 0) and @global is NULL.
 */
int sl_sgd_step(sl_sgd *sgd, float *params, const float *grad, const float *global, uint32_t epoch);

/** sl_sgd_reset - forget the momentum buffer and the step count (a new round starts). */
void sl_sgd_reset(sl_sgd *sgd);

/* ------------------------------------------------------------------------ */
/* Training and evaluation loops                                            */
/* ------------------------------------------------------------------------ */

/** Settings of sl_train(). */
typedef struct sl_train_opts {
    size_t batch;    /* samples per step (the last batch of an epoch may be smaller) */
    uint32_t epochs; /* passes over the samples */
    uint64_t seed;   /* the sample order of epoch e is a Fisher-Yates shuffle seeded by (seed, e) */
    /* Called after every step (may be NULL): epoch, samples done in this
     * epoch, samples per epoch, running mean loss of the epoch. */
    void (*progress)(void *ctx, uint32_t epoch, size_t done, size_t total, float loss);
    void *progress_ctx;
    /* At most this many steps in all (0: no limit): the epoch in progress stops early, and
     * the mean loss is over the samples it reached (a device's time budget, #22). */
    uint64_t max_steps;
} sl_train_opts;

/**
 * sl_train - train @params in place on the samples @indices[0..n) of the
 * data set (@x: sl_model_input_size() floats per sample, @y: class labels),
 * @opts->epochs epochs of
 * shuffled mini-batches with @sgd. @global: the round's global weights for
 * FedProx (NULL when prox_mu is 0). @mean_loss: mean loss of the last epoch
 * (may be NULL). @indices NULL means 0..n-1. Deterministic for a seed.
 */
int sl_train(sl_model *model, float *params, sl_sgd *sgd, const float *global, const float *x,
             const int32_t *y, const uint32_t *indices, size_t n, const sl_train_opts *opts,
             float *mean_loss);

/** What sl_model_metrics() measures (NAN where the loss has no such metric). */
typedef struct sl_metrics {
    size_t n;        /* samples */
    double loss;     /* the spec's loss, mean over the samples (inference mode) */
    double accuracy; /* cross_entropy: argmax == label; bce_with_logits: every output on the
                        label's side of 0.5 */
    double mae;      /* mse, l1, huber: mean absolute error over every output */
    double rmse;     /* root mean squared error over every output */
    size_t classes;  /* cross_entropy: the entries of the recall sl_model_metrics() wrote */
} sl_metrics;

/**
 * sl_model_metrics - every metric of MODEL_SPEC.md ("accuracy",
 * "recall_per_class", "mae", "rmse") that the spec's loss defines, and the
 * loss, of @params on the samples @indices[0..n) (NULL: 0..n-1) in inference
 * mode, in batches of @batch. @y: class labels (cross_entropy; NULL
 * otherwise); @t: sl_model_classes() targets per sample (the other losses;
 * NULL for cross_entropy). @recall: sl_model_classes() doubles (may be NULL):
 * per class, the share of its samples predicted as it (NAN for a class
 * without samples). Returns SL_OK, SL_EINVAL (labels for a target loss or the
 * reverse, a label outside the classes, a non-finite target), SL_ENOMEM.
 */
int sl_model_metrics(sl_model *model, const float *params, const float *x, const int32_t *y,
                     const float *t, const uint32_t *indices, size_t n, size_t batch,
                     sl_metrics *out, double *recall);

/**
 * sl_evaluate - accuracy (fraction correct) and mean loss of @params on the
 * samples @indices[0..n) (NULL: 0..n-1), in batches of @batch.
 */
int sl_evaluate(sl_model *model, const float *params, const float *x, const int32_t *y,
                const uint32_t *indices, size_t n, size_t batch, double *accuracy, double *loss);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_NN_H */
