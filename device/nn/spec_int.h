/*
 * spec_int.h - a parsed model spec (MODEL_SPEC.md): the tensor table, the
 * nodes with their attributes, the loss and metrics. Shared by spec.c
 * (parsing, checking, shape inference) and the graph executor. Not part of
 * the public API.
 *
 * Tensors are numbered: the inputs first, then the parameters in layout
 * order, then each node's outputs in node order; so a node only reads
 * tensors with smaller numbers than those it writes. Every shape is per
 * sample (the batch axis is implicit).
 */
#ifndef STARLING_SPEC_INT_H
#define STARLING_SPEC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/nn.h"

#define SL__SPEC_MAX_DIMS   6    /* of any tensor (parameters; activations have at most 5) */
#define SL__SPEC_MAX_IN     16   /* inputs of one node */
#define SL__SPEC_MAX_OUT    4    /* outputs of one node */
#define SL__SPEC_MAX_INTS   16   /* entries of one integer-list attribute */
#define SL__SPEC_MAX_INPUTS 8    /* model inputs */
#define SL__SPEC_MAX_PARAMS 4096 /* = SL_CODEC_MAX_TENSORS */
#define SL__SPEC_MAX_NODES  4096
#define SL__SPEC_MAX_NAME   127

/* Ops, in MODEL_SPEC.md's order. */
#define SL__OP_LIST(X)                    \
    X(GEMM, "Gemm")                       \
    X(MATMUL, "MatMul")                   \
    X(ADD, "Add")                         \
    X(SUB, "Sub")                         \
    X(MUL, "Mul")                         \
    X(DIV, "Div")                         \
    X(CONV, "Conv")                       \
    X(MAXPOOL, "MaxPool")                 \
    X(AVGPOOL, "AveragePool")             \
    X(GLOBALAVGPOOL, "GlobalAveragePool") \
    X(REDUCEMEAN, "ReduceMean")           \
    X(FLATTEN, "Flatten")                 \
    X(RESHAPE, "Reshape")                 \
    X(TRANSPOSE, "Transpose")             \
    X(SQUEEZE, "Squeeze")                 \
    X(UNSQUEEZE, "Unsqueeze")             \
    X(CONCAT, "Concat")                   \
    X(SLICE, "Slice")                     \
    X(GATHER, "Gather")                   \
    X(IDENTITY, "Identity")               \
    X(RELU, "Relu")                       \
    X(SIGMOID, "Sigmoid")                 \
    X(TANH, "Tanh")                       \
    X(LEAKYRELU, "LeakyRelu")             \
    X(GELU, "Gelu")                       \
    X(DROPOUT, "Dropout")                 \
    X(BATCHNORM, "BatchNormalization")    \
    X(LAYERNORM, "LayerNormalization")    \
    X(EMBEDDING, "Embedding")             \
    X(GRU, "GRU")                         \
    X(LSTM, "LSTM")

typedef enum sl__op {
#define SL__OP_ENUM(id, name) SL__OP_##id,
    SL__OP_LIST(SL__OP_ENUM)
#undef SL__OP_ENUM
        SL__OP_COUNT
} sl__op;

/** sl__op_name - the spec's name of @op ("Conv"), "?" for a bad value. */
const char *sl__op_name(sl__op op);

typedef enum sl__tensor_kind { SL__T_INPUT, SL__T_PARAM, SL__T_ACT } sl__tensor_kind;
typedef enum sl__dtype { SL__F32 = 0, SL__I64 = 1 } sl__dtype;

typedef struct sl__tensor {
    char name[SL__SPEC_MAX_NAME + 1];
    uint8_t kind;  /* sl__tensor_kind */
    uint8_t dtype; /* sl__dtype */
    uint8_t ndim;
    uint32_t shape[SL__SPEC_MAX_DIMS]; /* per sample (parameters: as stored) */
    uint64_t count;                    /* product of the shape */
    int32_t param;                     /* layout index of a parameter, else -1 */
    int32_t producer;                  /* node index of an activation, else -1 */
    uint32_t readers;                  /* nodes that read it */
} sl__tensor;

/* How a fresh model draws a parameter. */
typedef enum sl__init_kind {
    SL__INIT_UNIFORM_FAN_IN,
    SL__INIT_UNIFORM,
    SL__INIT_NORMAL,
    SL__INIT_CONSTANT
} sl__init_kind;

typedef struct sl__param_info {
    uint8_t init;    /* sl__init_kind */
    uint8_t buffer;  /* state updated by its node, not by the gradient */
    uint8_t local;   /* stays on the device (FedBN) */
    uint64_t fan_in; /* UNIFORM_FAN_IN: 0 = from the shape */
    double a, b;     /* UNIFORM: low, high; NORMAL: mean, std; CONSTANT: value */
    int32_t tensor;  /* its tensor number */
} sl__param_info;

/* The attributes of a node, parsed; which ones an op takes is in spec.c. */
typedef struct sl__attrs {
    uint8_t nspatial; /* Conv / pools: spatial dimensions (1 or 2) */
    int32_t kernel[2], stride[2], dilation[2];
    int32_t pad[4]; /* begin..., end... */
    int32_t group, trans_b, axis, keepdims, ceil_mode, count_include_pad, hidden;
    int32_t ints[SL__SPEC_MAX_INTS]; /* perm, axes, shape, starts, or indices */
    uint8_t nints;
    int32_t ends[SL__SPEC_MAX_INTS], axes[SL__SPEC_MAX_INTS], steps[SL__SPEC_MAX_INTS];
    uint8_t nends, naxes, nsteps;
    uint8_t scalar_index; /* Gather: "indices" was one integer (drops the axis) */
    float alpha, beta, epsilon, momentum, ratio;
    uint8_t tanh_approx; /* Gelu approximate "tanh" */
} sl__attrs;

typedef struct sl__node {
    uint8_t op; /* sl__op */
    char name[SL__SPEC_MAX_NAME + 1];
    uint8_t nin, nout;
    int32_t in[SL__SPEC_MAX_IN];   /* tensor numbers; -1: an optional input left out */
    int32_t out[SL__SPEC_MAX_OUT]; /* tensor numbers; -1: an optional output left out */
    sl__attrs a;
} sl__node;

typedef enum sl__loss_kind {
    SL__LOSS_CROSS_ENTROPY,
    SL__LOSS_BCE_WITH_LOGITS,
    SL__LOSS_MSE,
    SL__LOSS_L1,
    SL__LOSS_HUBER
} sl__loss_kind;

enum {
    SL__METRIC_ACCURACY = 1u << 0,
    SL__METRIC_RECALL_PER_CLASS = 1u << 1,
    SL__METRIC_MAE = 1u << 2,
    SL__METRIC_RMSE = 1u << 3
};

struct sl_spec {
    char name[64];
    sl__tensor *t;
    size_t nt;
    sl__node *n;
    size_t nn;
    sl__param_info *p; /* layout order */
    size_t np;
    int32_t input[SL__SPEC_MAX_INPUTS];
    size_t ninputs;
    int32_t output;
    uint8_t loss; /* sl__loss_kind */
    float label_smoothing, huber_delta;
    uint32_t metrics; /* SL__METRIC_* */
    sl_layout *layout;
    char *text; /* the document as given, NUL-terminated */
    size_t text_len;
};

#endif /* STARLING_SPEC_INT_H */
