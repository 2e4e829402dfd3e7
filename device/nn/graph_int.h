/*
 * graph_int.h - the general executor of a model spec: the op interface and
 * the compiled graph. Not part of the public API.
 *
 * Memory. Every activation of a batch of B samples is B x count floats,
 * sample-major (NCHW for images, [T, F] per sample for sequences); a
 * tensor that needs a gradient has a second buffer of that size; every node
 * may keep scratch from its forward pass to its backward pass (aux: pooling
 * positions, masks, saved statistics) and use temporary space (work, shared
 * by all nodes). All of it is planned when the graph is sized for a batch
 * (sl__graph_reserve()): one arena whose size is known before the first
 * step (sl__graph_arena_bytes()), and nothing is allocated while a step
 * runs.
 *
 * Parameters are not batched: a parameter's value pointer is its slice of
 * the flat parameter vector, its gradient pointer its slice of the flat
 * gradient.
 *
 * An op's backward pass ADDS its inputs' gradients (+=), because a tensor
 * may feed several nodes. The first node to run backward into an
 * activation's gradient need not add to zeros: when its op assigns
 * (sl__op_assigns()) and the tensor is one of its inputs only once, the
 * graph marks it fresh and the op overwrites it; otherwise the graph zeroes
 * it just before (and zeroes any gradient that nothing wrote before it is
 * read). Parameter gradients are always added to. Gradient pointers of
 * inputs that need none are NULL.
 */
#ifndef STARLING_GRAPH_INT_H
#define STARLING_GRAPH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "spec_int.h"

/** What one op's kernels see of one node. */
typedef struct sl__op_ctx {
    const sl_spec *s;
    const sl__node *nd;
    size_t batch;               /* samples in this pass, >= 1 */
    int training;               /* BatchNormalization uses the batch, Dropout drops */
    uint64_t seed;              /* this step and node: Dropout's mask */
    float *const *val;          /* per tensor: values (NULL for int64 tensors) */
    const int64_t *const *ival; /* per tensor: int64 values of int64 inputs, else NULL */
    float *const *grad;         /* per tensor: gradient, or NULL when none is needed */
    const uint8_t *fresh;       /* per tensor: 1 when this backward pass may overwrite the
                                   gradient (see below); NULL: none may */
    void *aux;                  /* this node's scratch, kept from forward to backward */
    void *work;                 /* temporary space, shared by every node */
} sl__op_ctx;

/** The kernels of one op. */
typedef struct sl__op_impl {
    /* bytes this node keeps from forward to backward, and temporary bytes it needs, for a
     * batch of @batch (NULL: none) */
    size_t (*aux_bytes)(const sl_spec *s, const sl__node *nd, size_t batch);
    size_t (*work_bytes)(const sl_spec *s, const sl__node *nd, size_t batch);
    int (*forward)(const sl__op_ctx *c);
    int (*backward)(const sl__op_ctx *c);
    /* after a training step: fold what the forward pass measured into the node's buffer
     * parameters in @params (BatchNormalization's running statistics); NULL: none */
    void (*update_buffers)(const sl__op_ctx *c, float *params);
} sl__op_impl;

/** sl__op_fresh - 1 when @c's backward pass overwrites gradient @t instead of adding to it. */
static inline int sl__op_fresh(const sl__op_ctx *c, int32_t t)
{
    return c->fresh != NULL && t >= 0 && c->fresh[t];
}

/** sl__op_impl_of - the kernels of @op, NULL when this build has none. */
const sl__op_impl *sl__op_impl_of(sl__op op);

/**
 * sl__op_assigns - 1 when @op's backward pass honours fresh: it overwrites
 * every element of an input's gradient marked fresh instead of adding to
 * it (graph.c keeps the list; a kernel on it must check sl__op_fresh()).
 */
int sl__op_assigns(sl__op op);

/* The op families (ops_*.c) each fill their entries. */
const sl__op_impl *sl__ops_core(sl__op op);  /* ops_core.c: Gemm, MatMul, arithmetic, views */
const sl__op_impl *sl__ops_shape(sl__op op); /* ops_shape.c: Transpose, Concat, Slice, Gather,
                                                ReduceMean */
const sl__op_impl *sl__ops_conv(sl__op op);  /* ops_conv.c: Conv, pools */
const sl__op_impl *sl__ops_act(sl__op op);   /* ops_act.c: activations, Dropout */
const sl__op_impl *sl__ops_norm(sl__op op); /* ops_norm.c: BatchNormalization, LayerNormalization */
const sl__op_impl *sl__ops_seq(sl__op op);  /* ops_seq.c: GRU, LSTM, Embedding */

/* ---- the compiled graph ----------------------------------------------------------------- */

typedef struct sl__graph sl__graph;

/**
 * sl__graph_create - compile @spec (which must outlive the graph). Refuses
 * a spec with an op this build has no kernels for (SL_EUNSUPPORTED, the op's
 * name in @err).
 */
int sl__graph_create(const sl_spec *spec, sl__graph **out, char *err, size_t errcap);
void sl__graph_free(sl__graph *g);

/** sl__graph_reserve - size the arena for batches of up to @batch (grows only). */
int sl__graph_reserve(sl__graph *g, size_t batch);

/** sl__graph_arena_bytes - the arena a batch of @batch needs (0 when it cannot be sized). */
size_t sl__graph_arena_bytes(const sl__graph *g, size_t batch);

/**
 * sl__graph_forward - run the nodes on a batch. @params: the flat parameter
 * vector; @inputs: per model input, batch x input size values (float, or
 * int64 for an int64 input). The output is then at sl__graph_output().
 */
int sl__graph_forward(sl__graph *g, const float *params, const void *const *inputs, size_t batch,
                      int training, uint64_t seed);

/** sl__graph_output - the output values of the last forward pass (batch x output size). */
const float *sl__graph_output(const sl__graph *g);

/**
 * sl__graph_backward - after a forward pass with the same arguments: set the
 * output's gradient to @dout (batch x output size) and run the nodes back,
 * writing dL/dparams into @grad (overwritten; buffers get 0).
 */
int sl__graph_backward(sl__graph *g, const float *dout, float *grad);

/**
 * sl__graph_update_buffers - after a training forward pass: fold what it
 * measured into the buffer parameters of @params (running statistics).
 */
void sl__graph_update_buffers(sl__graph *g, float *params);

/**
 * sl__loss - the spec's loss over a batch of outputs @out (batch x output
 * size) and, unless @dout is NULL, its gradient with respect to @out.
 * @labels: a class index per sample (cross_entropy); @targets: output-size
 * values per sample (the other losses). SL_EINVAL for a label outside the
 * classes, a non-finite target or a BCE target outside [0, 1] (nothing
 * written).
 */
int sl__loss(const sl_spec *s, const float *out, size_t batch, const int32_t *labels,
             const float *targets, double *loss, float *dout);

#endif /* STARLING_GRAPH_INT_H */
