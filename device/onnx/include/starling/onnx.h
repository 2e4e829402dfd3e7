/*
 * starling/onnx.h - ONNX models to model specs and back, for operators
 * (`starling model import`, `starling model export --format onnx`).
 *
 * Import reads what torch.onnx.export writes (opsets 13 to 17, TRAINING or
 * EVAL mode) and gives a model spec (device/nn/MODEL_SPEC.md) and its
 * initial parameters; export writes a spec and its parameters as an ONNX
 * inference graph (opset 17) that onnx.checker accepts. The ONNX messages
 * are parsed and packed by protobuf-c code generated from onnx.proto; the
 * file is untrusted.
 *
 * Conventions: SL_OK or a negative sl_status; outputs untouched on error.
 * Thread-safe: no global state. Neither call blocks on anything but memory.
 */
#ifndef STARLING_ONNX_H
#define STARLING_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "starling/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What an import found, for people (`starling model import` prints it). */
typedef struct sl_onnx_report {
    size_t nodes_in;       /* nodes of the ONNX graph (Constant and shape plumbing included) */
    size_t nodes_out;      /* nodes of the spec */
    size_t params;         /* parameter tensors of the spec (buffers included) */
    uint64_t param_floats; /* their fp32 values */
    uint64_t activation_floats_per_sample; /* sum of every node output's size, one sample */
    uint64_t flops_per_sample;             /* forward pass, one sample: a multiply-add counts 2 */
    char ops[512]; /* the spec's ops by first use: "Conv x2, Relu x3, Gemm" */
} sl_onnx_report;

/**
 * sl_onnx_import - turn an ONNX model into a model spec and its parameters.
 * @onnx, @len: the serialised ModelProto (at most 1 GiB). Untrusted.
 * @name: the spec's "name" (1-63 bytes of printable ASCII but '"' and '\');
 *   NULL or "" takes "imported".
 * @spec_json, @spec_len: receive the spec, NUL-terminated JSON text that
 *   sl_spec_parse() accepts (the importer checks it before returning);
 *   malloc'd, the caller frees it.
 * @params, @nparams: receive the initial parameters in the spec's layout
 *   order (sl_spec_layout()), from the graph's initializers (float32,
 *   raw_data or float_data): malloc'd, the caller frees it; *@nparams floats.
 * @report: may be NULL; filled on success.
 * @err, @errcap: on failure one line saying why; may be NULL.
 *
 * What it does: the first axis of every graph input is the batch (dynamic
 * or fixed); per-sample shapes drop it. Constant nodes and initializers fold
 * (Shape/Gather/Unsqueeze/Concat chains of x.view(N, -1) become Flatten or
 * Reshape; the Slice/Concat/Unsqueeze re-packing of GRU and LSTM weights is
 * undone into PyTorch's gate order and the weight_ih_l0/weight_hh_l0/
 * bias_ih_l0/bias_hh_l0 tensors); Identity, a no-op Pad, the Transposes
 * and Squeezes around a batch-first GRU/LSTM vanish; GELU's and (opset 13)
 * LayerNormalization's decompositions become Gelu and LayerNormalization;
 * BatchNormalization in training mode (5 outputs at opset 13, 3 with
 * training_mode at 17) or inference mode becomes the spec's, with PyTorch's
 * momentum (1 - ONNX's) and the running statistics as buffers.
 * Names: parameters keep the initializers' names (a TRAINING export: the
 * state_dict's, in its order). Where the exporter renamed tensors (EVAL:
 * "onnx::Conv_12", BatchNormalization folded in), the name stays and the
 * spec node's name ("/conv0/Conv") says which module it belongs to; GRU and
 * LSTM weights folded by an EVAL export take PyTorch's names from the
 * node's ("/rnn/GRU" -> "rnn.weight_ih_l0"). Spec node names are the ONNX
 * node names, tensor names the ONNX tensor names (characters outside
 * [A-Za-z0-9_.:/-] become '_').
 * Loss: cross_entropy with metrics ["accuracy"] when the output is a vector
 * of 2 or more values per sample, else mse with ["mae", "rmse"].
 *
 * Returns SL_OK; SL_ECORRUPT (not a ModelProto, or a malformed graph: a
 * tensor whose data does not fit its dims, a name used before produced);
 * SL_EUNSUPPORTED (ops or forms the spec cannot say: @err lists every such
 * node in one message, "unsupported: node /foo/Einsum (Einsum), node /bar/Mod
 * (Mod)"; also another opset than 13-17, external data); SL_ESPEC (the
 * result is not a valid spec: a bug or an exotic graph, the parser's reason
 * in @err); SL_ETOOBIG; SL_ENOMEM; SL_EINVAL (NULL arguments).
 */
int sl_onnx_import(const void *onnx, size_t len, const char *name, char **spec_json,
                   size_t *spec_len, float **params, size_t *nparams, sl_onnx_report *report,
                   char *err, size_t errcap);

/**
 * sl_onnx_export - write a spec and its parameters as an ONNX model.
 * @spec: a parsed spec (sl_spec_parse()).
 * @params: sl_layout_params(sl_spec_layout(@spec)) floats in layout order.
 * @onnx, @len: receive the serialised ModelProto, malloc'd; the caller frees
 *   it.
 * @err, @errcap: on failure one line saying why; may be NULL.
 *
 * The graph: opset 17 (default domain only), ir_version 8, producer
 * "starling"; each spec input a graph input with a dynamic batch axis "N"
 * first; the spec's output the one graph output; every parameter an
 * initializer of the same name, shape and values (raw_data, little-endian),
 * in layout order; the nodes in inference mode: Dropout without
 * training_mode, BatchNormalization with one output and ONNX's momentum,
 * Gelu decomposed (Div, Erf, Add, Mul, Mul; tanh's approximation with Tanh),
 * GRU (linear_before_reset=1) and LSTM with their weights re-packed to
 * ONNX's gate order by Slice/Concat/Unsqueeze nodes (as a TRAINING export
 * of PyTorch does), Transposes around them for the batch axis. Node and
 * tensor names are the spec's, so sl_onnx_import() gives the spec back.
 *
 * Returns SL_OK, SL_EINVAL (NULL arguments), SL_EUNSUPPORTED (an op export
 * does not handle; none in model spec version 1 today), SL_ENOMEM.
 */
int sl_onnx_export(const sl_spec *spec, const float *params, void **onnx, size_t *len, char *err,
                   size_t errcap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_ONNX_H */
