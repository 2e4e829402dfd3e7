#!/usr/bin/python3
"""The onnx_checker test's second half (check_exports.sh runs it): each ONNX file given is
checked with onnx.checker.check_model(full_check=True), then run by a small numpy interpreter
of the ops sl_onnx_export() writes, on the batch of the fixture JSON beside the original
(FIXTURE_DIR/<name>.json), and compared with PyTorch's output there (1e-5 relative, 1e-4
absolute). Needs python3-onnx and python3-numpy, not torch.
    usage: run_onnx.py FIXTURE_DIR FILE.onnx...
"""
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

ERF = np.vectorize(math.erf, otypes=[np.float32])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def window(x, k, s, p, d):
    """[N, C, *spatial] padded -> [N, C, *out, *k] windows (1-D or 2-D)."""
    ns = len(k)
    pad = [(0, 0), (0, 0)] + [(p[i], p[ns + i]) for i in range(ns)]
    x = np.pad(x, pad, constant_values=np.nan)
    out = [(x.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(ns)]
    if ns == 1:
        return x[:, :, np.arange(out[0])[:, None] * s[0] + np.arange(k[0])[None, :] * d[0]]
    w = x[:, :, (np.arange(out[0])[:, None] * s[0] + np.arange(k[0]) * d[0])[:, None, :, None],
          (np.arange(out[1])[:, None] * s[1] + np.arange(k[1]) * d[1])[None, :, None, :]]
    return w


def rnn(op, x, w, r, b, a):
    h = a["hidden_size"]
    t, n, _ = x.shape
    g = 3 if op == "GRU" else 4
    wb, rb = (b[0, :g * h], b[0, g * h:]) if b is not None else (0, 0)
    hs, cs, ys = np.zeros((n, h), np.float32), np.zeros((n, h), np.float32), []
    for step in range(t):
        gx = x[step] @ w[0].T + wb
        gh = hs @ r[0].T + rb
        if op == "GRU":  # z, r, h with linear_before_reset=1
            z = sigmoid(gx[:, :h] + gh[:, :h])
            rr = sigmoid(gx[:, h:2 * h] + gh[:, h:2 * h])
            hh = np.tanh(gx[:, 2 * h:] + rr * gh[:, 2 * h:])
            hs = (1 - z) * hh + z * hs
        else:  # i, o, f, c
            s = gx + gh
            i, o, f, c = (sigmoid(s[:, :h]), sigmoid(s[:, h:2 * h]), sigmoid(s[:, 2 * h:3 * h]),
                          np.tanh(s[:, 3 * h:]))
            cs = f * cs + i * c
            hs = o * np.tanh(cs)
        ys.append(hs)
    return [np.stack(ys)[:, None], hs[None], cs[None]]


def run(model, feeds):
    env = dict(feeds)
    for t in model.graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for nd in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in nd.attribute}
        i = [env[n] if n else None for n in nd.input]
        op = nd.op_type
        if op == "Constant":
            y = numpy_helper.to_array(a["value"])
        elif op in ("Add", "Sub", "Mul", "Div"):
            y = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](
                i[0], i[1])
        elif op == "Gemm":
            w = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (i[0] @ w) + (a.get("beta", 1.0) * i[2] if len(i) > 2 else 0)
        elif op == "MatMul":
            y = i[0] @ i[1]
        elif op == "Conv":
            k, g = a["kernel_shape"], a.get("group", 1)
            ns = len(k)
            xw = window(i[0], k, a.get("strides", [1] * ns), a.get("pads", [0] * 2 * ns),
                        a.get("dilations", [1] * ns))
            xw = np.nan_to_num(xw)
            n, c = xw.shape[:2]
            m = i[1].shape[0]
            xg = xw.reshape((n, g, c // g) + xw.shape[2:])
            wg = i[1].reshape((g, m // g) + i[1].shape[1:])
            sub = "nhcxyij,hmcij->nhmxy" if ns == 2 else "nhcxi,hmci->nhmx"
            y = np.einsum(sub, xg, wg).reshape((n, m) + xw.shape[2:2 + ns])
            if len(i) > 2:
                y = y + i[2].reshape((1, m) + (1,) * ns)
        elif op in ("MaxPool", "AveragePool"):
            k = a["kernel_shape"]
            ns = len(k)
            xw = window(i[0], k, a.get("strides", [1] * ns), a.get("pads", [0] * 2 * ns),
                        [1] * ns)
            ax = tuple(range(2 + ns, 2 + 2 * ns))
            if op == "MaxPool":
                y = np.nanmax(xw, axis=ax)
            elif a.get("count_include_pad", 0):
                y = np.nan_to_num(xw).mean(axis=ax)
            else:
                y = np.nanmean(xw, axis=ax)
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=tuple(range(2, i[0].ndim)), keepdims=True)
        elif op == "ReduceMean":
            y = i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "Reshape":
            y = i[0].reshape([i[0].shape[d] if s == 0 else s for d, s in enumerate(i[1])])
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Squeeze":
            y = np.squeeze(i[0], tuple(int(v) for v in i[1]))
        elif op == "Unsqueeze":
            y = np.expand_dims(i[0], tuple(int(v) for v in i[1]))
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Slice":
            sl = [slice(None)] * i[0].ndim
            steps = i[4] if len(i) > 4 else [1] * len(i[1])
            for s, e, ax, st in zip(i[1], i[2], i[3], steps):
                sl[int(ax)] = slice(int(s), int(e), int(st))
            y = i[0][tuple(sl)]
        elif op == "Gather":
            y = np.take(i[0], i[1], axis=a.get("axis", 0))
        elif op in ("Identity", "Dropout"):
            y = i[0]
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Sigmoid":
            y = sigmoid(i[0])
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Erf":
            y = ERF(i[0])
        elif op == "LeakyRelu":
            y = np.where(i[0] > 0, i[0], a.get("alpha", 0.01) * i[0])
        elif op == "BatchNormalization":
            sh = (1, -1) + (1,) * (i[0].ndim - 2)
            y = ((i[0] - i[3].reshape(sh)) / np.sqrt(i[4].reshape(sh) + a.get("epsilon", 1e-5))
                 * i[1].reshape(sh) + i[2].reshape(sh))
        elif op == "LayerNormalization":
            ax = a.get("axis", -1) % i[0].ndim
            axes = tuple(range(ax, i[0].ndim))
            mu = i[0].mean(axis=axes, keepdims=True)
            var = ((i[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1]
            y = y + i[2] if len(i) > 2 and i[2] is not None else y
        elif op in ("GRU", "LSTM"):
            outs = rnn(op, i[0], i[1], i[2], i[3] if len(i) > 3 else None, a)
            for name, v in zip(nd.output, outs):
                if name:
                    env[name] = v.astype(np.float32)
            continue
        else:
            raise ValueError("no interpreter for " + op)
        env[nd.output[0]] = np.asarray(y).astype(np.float32 if np.asarray(y).dtype.kind == "f"
                                                 else np.asarray(y).dtype)
    return env[model.graph.output[0].name]


def main():
    fixtures, files, bad = sys.argv[1], sys.argv[2:], 0
    for path in files:
        name = os.path.basename(path)[:-len(".onnx")]
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        with open(os.path.join(fixtures, name + ".json")) as f:
            ref = json.load(f)
        x = np.array(ref["input"], np.float32).reshape(ref["input_shape"])
        want = np.array(ref["output"], np.float32).reshape(ref["output_shape"])
        got = run(model, {model.graph.input[0].name: x}).reshape(want.shape)
        err = np.abs(got - want)
        ok = bool(np.all((err <= 1e-4) | (err <= 1e-5 * np.abs(want))))
        print("%s: checker ok, max |diff| %.3g%s" % (name, float(err.max()), "" if ok else " FAIL"))
        bad += not ok
    return 1 if bad or not files else 0


if __name__ == "__main__":
    sys.exit(main())
