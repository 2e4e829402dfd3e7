#!/usr/bin/python3
"""spec_torch.py - a Starling model spec (device/nn/MODEL_SPEC.md) as a torch.nn.Module.

    from spec_torch import SpecModule
    model = SpecModule(json.load(open("device/nn/models/lenet5.json")))
    model.load_flat(params)          # Starling's flat parameter vector (numpy float32)
    logits = model(x)                # x: [batch, *input shape]; several inputs: model(x0, x1)

The module's state_dict has the spec's parameters with their names, shapes and
order (buffers are registered as buffers: BatchNormalization's running
statistics), so a flat parameter vector or a safetensors export loads as it is.
forward() runs the spec's nodes in order with PyTorch's functions and
semantics; every axis of the spec counts from the first axis after the batch.
Dropout draws PyTorch's own mask (not Starling's), so a training pass with
Dropout compares in distribution only.

Also a command: `spec_torch.py SPEC.json` prints the module and its
state_dict layout (name, shape), one line each.
"""
import collections
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import _VF


def _sample_axis(axis, rank):
    """A spec axis (of a sample of @rank axes, negative from the end) as a batched axis."""
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise ValueError("axis %d out of range for %d sample axes" % (axis, rank))
    return axis + 1


class _Holder(nn.Module):
    """An empty module: the parents of dotted parameter names ("features.0.weight")."""


class SpecModule(nn.Module):
    """The model of a parsed spec document (a dict)."""

    def __init__(self, spec):
        super().__init__()
        if spec.get("starling_model") != 1:
            raise ValueError("not a version-1 model spec")
        self.spec = spec
        self.inputs = [(i["name"], list(i["shape"]), i.get("dtype", "float32"))
                       for i in spec["inputs"]]
        self.nodes = spec["nodes"]
        self.output = spec["output"]
        self.param_names = []
        self._paths = {}
        for p in spec["params"]:
            name, shape = p["name"], tuple(p["shape"])
            *parents, leaf = name.split(".")
            owner = self
            for part in parents:
                if not hasattr(owner, part) or not isinstance(getattr(owner, part), nn.Module):
                    owner.add_module(part, _Holder())
                owner = getattr(owner, part)
            if p.get("buffer", False):
                owner.register_buffer(leaf, torch.zeros(shape))
            else:
                owner.register_parameter(leaf, nn.Parameter(torch.zeros(shape)))
            self.param_names.append(name)
            self._paths[name] = (owner, leaf)
        got = sorted((k, tuple(v.shape)) for k, v in super().state_dict().items())
        want = sorted((p["name"], tuple(p["shape"])) for p in spec["params"])
        if got != want:
            raise ValueError("parameter names clash: %s" % [k for k, _ in got])

    def state_dict(self, *args, **kwargs):
        """PyTorch's state_dict in the spec's parameter order (a module tree alone cannot
        always give it: a module lists its own tensors before its children's)."""
        sd = super().state_dict(*args, **kwargs)
        prefix = kwargs.get("prefix", args[1] if len(args) > 1 else "")
        ordered = collections.OrderedDict((prefix + n, sd[prefix + n]) for n in self.param_names)
        ordered._metadata = getattr(sd, "_metadata", None)
        return ordered

    # ---- parameters --------------------------------------------------------------------------

    def tensor(self, name):
        owner, leaf = self._paths[name]
        return getattr(owner, leaf)

    def load_flat(self, flat):
        """Copy a flat float32 vector (numpy array or tensor) in layout order into the module."""
        flat = torch.as_tensor(flat, dtype=torch.float32).reshape(-1)
        total = sum(self.tensor(n).numel() for n in self.param_names)
        if flat.numel() != total:
            raise ValueError("%d values for %d parameters" % (flat.numel(), total))
        at = 0
        with torch.no_grad():
            for n in self.param_names:
                t = self.tensor(n)
                t.copy_(flat[at:at + t.numel()].reshape(t.shape))
                at += t.numel()

    def flat(self):
        """The parameters (and buffers) as one flat vector in layout order."""
        return torch.cat([self.tensor(n).detach().reshape(-1) for n in self.param_names])

    def flat_grad(self):
        """The gradients in layout order (zeros for buffers and untouched parameters)."""
        out = []
        for n in self.param_names:
            t = self.tensor(n)
            g = t.grad if isinstance(t, nn.Parameter) else None
            out.append(torch.zeros(t.numel()) if g is None else g.detach().reshape(-1))
        return torch.cat(out)

    # ---- forward -----------------------------------------------------------------------------

    def forward(self, *xs):
        if len(xs) != len(self.inputs):
            raise ValueError("%d inputs for a spec of %d" % (len(xs), len(self.inputs)))
        env = {}
        for (name, shape, _), x in zip(self.inputs, xs):
            env[name] = x.reshape([x.shape[0]] + shape)
        for p in self.param_names:
            env[p] = self.tensor(p)
        params = set(self.param_names)
        for nd in self.nodes:
            ins = [env[i] if i != "" else None for i in nd["inputs"]]
            outs = _OPS[nd["op"]](self, ins, nd.get("attrs", {}), nd["inputs"], params)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, value in zip(nd["outputs"], outs):
                if name != "":
                    env[name] = value
        return env[self.output]


# ---- the ops: f(module, inputs, attrs, input names, parameter names) -> output(s) ------------


def _rank(t, name, params):
    """Axes of a sample of @t (a parameter has no batch axis)."""
    return t.dim() if name in params else t.dim() - 1


def _gemm(m, ins, a, names, params):
    x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transB", 1) == 1 and alpha == 1.0 and beta == 1.0:
        return F.linear(x, w, b)
    y = x @ (w.t() if a.get("transB", 1) == 1 else w)
    if alpha != 1.0:
        y = alpha * y
    if b is not None:
        y = y + (beta * b if beta != 1.0 else b)
    return y


def _binary(fn):
    def run(m, ins, a, names, params):
        ra, rb = (_rank(t, n, params) for t, n in zip(ins, names))
        r = max(ra, rb)
        ops = []
        for t, n, rt in zip(ins, names, (ra, rb)):
            if n not in params and rt < r:  # align the sample's axes right, after the batch
                t = t.reshape([t.shape[0]] + [1] * (r - rt) + list(t.shape[1:]))
            ops.append(t)
        return fn(ops[0], ops[1])
    return run


def _pads(a, ns):
    pads = list(a.get("pads", [0] * (2 * ns)))
    return pads[:ns], pads[ns:]


def _pad_input(x, begin, end, value):
    """F.pad for asymmetric pads (the last spatial axis first, as F.pad wants)."""
    spec = []
    for b, e in reversed(list(zip(begin, end))):
        spec += [b, e]
    return F.pad(x, spec, value=value)


def _conv(m, ins, a, names, params):
    x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    ns = x.dim() - 2
    begin, end = _pads(a, ns)
    stride = a.get("strides", [1] * ns)
    dil = a.get("dilations", [1] * ns)
    group = a.get("group", 1)
    pad = begin
    if begin != end:
        x, pad = _pad_input(x, begin, end, 0.0), [0] * ns
    fn = F.conv1d if ns == 1 else F.conv2d
    return fn(x, w, b, stride=stride, padding=pad, dilation=dil, groups=group)


def _maxpool(m, ins, a, names, params):
    x = ins[0]
    ns = x.dim() - 2
    k = a["kernel_shape"]
    begin, end = _pads(a, ns)
    stride = a.get("strides", [1] * ns)
    pad = begin
    if begin != end:
        x, pad = _pad_input(x, begin, end, -math.inf), [0] * ns
    fn = F.max_pool1d if ns == 1 else F.max_pool2d
    return fn(x, k, stride=stride, padding=pad)


def _avgpool(m, ins, a, names, params):
    x = ins[0]
    ns = x.dim() - 2
    k = a["kernel_shape"]
    begin, end = _pads(a, ns)
    if begin != end:
        raise ValueError("AveragePool with asymmetric pads has no PyTorch equivalent")
    stride = a.get("strides", [1] * ns)
    inc = bool(a.get("count_include_pad", 0))
    fn = F.avg_pool1d if ns == 1 else F.avg_pool2d
    return fn(x, k, stride=stride, padding=begin, count_include_pad=inc)


def _gap(m, ins, a, names, params):
    x = ins[0]
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


def _reducemean(m, ins, a, names, params):
    x = ins[0]
    r = x.dim() - 1
    dims = tuple(sorted(_sample_axis(ax, r) for ax in a["axes"]))
    keep = bool(a.get("keepdims", 1))
    y = x.mean(dim=dims, keepdim=keep)
    if y.dim() == 1:  # every axis reduced away: the spec keeps one
        y = y.reshape(-1, 1)
    return y


def _flatten(m, ins, a, names, params):
    x = ins[0]
    axis = a.get("axis", 0)
    if axis == 0:
        return x.reshape(x.shape[0], -1)
    head = 1
    for d in x.shape[1:1 + axis]:
        head *= d
    return x.reshape(x.shape[0], head, -1)


def _reshape(m, ins, a, names, params):
    x = ins[0]
    shape = [x.shape[1 + i] if d == 0 else d for i, d in enumerate(a["shape"])]
    return x.reshape([x.shape[0]] + shape)


def _transpose(m, ins, a, names, params):
    return ins[0].permute([0] + [p + 1 for p in a["perm"]])


def _squeeze(m, ins, a, names, params):
    x = ins[0]
    r = x.dim() - 1
    for d in sorted((_sample_axis(ax, r) for ax in a["axes"]), reverse=True):
        x = x.squeeze(d)
    return x


def _unsqueeze(m, ins, a, names, params):
    x = ins[0]
    out_r = x.dim() - 1 + len(a["axes"])
    for d in sorted(_sample_axis(ax, out_r) for ax in a["axes"]):
        x = x.unsqueeze(d)
    return x


def _concat(m, ins, a, names, params):
    return torch.cat(ins, dim=_sample_axis(a.get("axis", 0), ins[0].dim() - 1))


def _slice(m, ins, a, names, params):
    x = ins[0]
    r = x.dim() - 1
    starts, ends = a["starts"], a["ends"]
    axes = a.get("axes", list(range(len(starts))))
    steps = a.get("steps", [1] * len(starts))
    index = [slice(None)] * x.dim()
    for s, e, ax, st in zip(starts, ends, axes, steps):
        d = _sample_axis(ax, r)
        index[d] = slice(*slice(s, e, st).indices(x.shape[d]))
    return x[tuple(index)]


def _gather(m, ins, a, names, params):
    x = ins[0]
    d = _sample_axis(a.get("axis", 0), x.dim() - 1)
    ix = a["indices"]
    if isinstance(ix, int):
        return x.select(d, ix)
    return x.index_select(d, torch.tensor([i % x.shape[d] for i in ix], dtype=torch.long))


def _dropout(m, ins, a, names, params):
    return F.dropout(ins[0], p=a.get("ratio", 0.5), training=m.training)


def _gelu(m, ins, a, names, params):
    return F.gelu(ins[0], approximate=a.get("approximate", "none"))


def _batchnorm(m, ins, a, names, params):
    x, scale, bias, mean, var = ins
    return F.batch_norm(x, mean, var, scale, bias, training=m.training,
                        momentum=a.get("momentum", 0.1), eps=a.get("epsilon", 1e-5))


def _layernorm(m, ins, a, names, params):
    x, scale, bias = ins[0], ins[1], ins[2] if len(ins) > 2 else None
    d = _sample_axis(a.get("axis", -1), x.dim() - 1)
    shape = tuple(x.shape[d:])
    return F.layer_norm(x, shape, scale.reshape(shape),
                        None if bias is None else bias.reshape(shape), eps=a.get("epsilon", 1e-5))


def _embedding(m, ins, a, names, params):
    return F.embedding(ins[0].long(), ins[1])


def _gru(m, ins, a, names, params):
    x, w_ih, w_hh, b_ih, b_hh = ins
    h0 = torch.zeros(1, x.shape[0], a["hidden_size"], dtype=x.dtype)
    y, h = _VF.gru(x, h0, [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, m.training, False, True)
    return y, h[0]


def _lstm(m, ins, a, names, params):
    x, w_ih, w_hh, b_ih, b_hh = ins
    z = torch.zeros(1, x.shape[0], a["hidden_size"], dtype=x.dtype)
    y, h, c = _VF.lstm(x, (z, z), [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, m.training, False,
                       True)
    return y, h[0], c[0]


def _simple(fn):
    return lambda m, ins, a, names, params: fn(ins[0])


_OPS = {
    "Gemm": _gemm,
    "MatMul": lambda m, ins, a, names, params: torch.matmul(ins[0], ins[1]),
    "Add": _binary(torch.add),
    "Sub": _binary(torch.sub),
    "Mul": _binary(torch.mul),
    "Div": _binary(torch.div),
    "Conv": _conv,
    "MaxPool": _maxpool,
    "AveragePool": _avgpool,
    "GlobalAveragePool": _gap,
    "ReduceMean": _reducemean,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Slice": _slice,
    "Gather": _gather,
    "Identity": _simple(lambda x: x),
    "Relu": _simple(F.relu),
    "Sigmoid": _simple(torch.sigmoid),
    "Tanh": _simple(torch.tanh),
    "LeakyRelu": lambda m, ins, a, names, params: F.leaky_relu(ins[0], a.get("alpha", 0.01)),
    "Gelu": _gelu,
    "Dropout": _dropout,
    "BatchNormalization": _batchnorm,
    "LayerNormalization": _layernorm,
    "Embedding": _embedding,
    "GRU": _gru,
    "LSTM": _lstm,
}


def loss_fn(spec):
    """The spec's loss as a function (output, labels or targets) -> mean loss."""
    loss = spec["loss"]
    op = loss["op"]
    if op == "cross_entropy":
        ls = loss.get("label_smoothing", 0.0)
        return lambda out, y: F.cross_entropy(out, y, label_smoothing=ls)
    if op == "bce_with_logits":
        return F.binary_cross_entropy_with_logits
    if op == "mse":
        return F.mse_loss
    if op == "l1":
        return F.l1_loss
    if op == "huber":
        delta = loss.get("delta", 1.0)
        return lambda out, y: F.huber_loss(out, y, delta=delta)
    raise ValueError("unknown loss " + op)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: spec_torch.py SPEC.json")
    with open(sys.argv[1]) as f:
        model = SpecModule(json.load(f))
    for k, v in model.state_dict().items():
        print(k, list(v.shape))


if __name__ == "__main__":
    main()
