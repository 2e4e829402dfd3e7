#!/usr/bin/python3
"""torch_compare.py - PyTorch's training throughput for `starling bench train`.

Builds the registry model with the same layers in the same order as
device/nn/models.c, trains it on one thread with SGD (lr 0.01, momentum 0.9)
on mini-batches of Fashion-MNIST (or synthetic data when the data set is
absent), and prints one JSON line: {"samples_per_s": ..., ...}.

With --spec FILE --dir DIR it trains spec_torch.py's translation of any model
spec instead, from the initial parameters and on the pool of batches that
`starling bench train --spec` left in DIR (params.f32, input<i>.f32|i64,
labels.i32 or targets.f32: --pool batches of --batch samples), step i on
batch i mod pool, and reports the loss of its first step (batch 0, the
initial parameters) beside the throughput.

Usage: torch_compare.py --model lenet5 --batch 64 --steps 200 [--repeats 3] [--data DIR]
       torch_compare.py --spec FILE --dir DIR --batch 32 --steps 200 --pool 16
Exit status 3 (and {"error": ...}) when numpy or torch cannot be imported.
"""
import argparse
import gzip
import json
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # the caller reports "PyTorch not available"
    print(json.dumps({"error": str(e)}))
    sys.exit(3)

MEAN, STD = 0.2860, 0.3530
DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def build(name):
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(),
                             nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))
    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(256, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    raise SystemExit("torch_compare.py: unknown model " + name)


def load(data_dir, count):
    """The first @count training images and labels, normalised, or None."""
    img_path = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    lab_path = os.path.join(data_dir, "train-labels-idx1-ubyte.gz")
    if not (os.path.exists(img_path) and os.path.exists(lab_path)):
        return None
    with gzip.open(img_path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[4:8], "big")
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, 28, 28)
    with gzip.open(lab_path, "rb") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    count = min(count, n)
    x = (images[:count].astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x), torch.from_numpy(labels[:count].astype(np.int64))


def run_spec(args):
    """Train the translated spec on the batches in args.dir; the JSON line."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from spec_torch import SpecModule, loss_fn
    with open(args.spec) as f:
        spec = json.load(f)
    model = SpecModule(spec)
    model.load_flat(np.fromfile(os.path.join(args.dir, "params.f32"), dtype=np.float32))
    model.train()
    criterion = loss_fn(spec)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    b, pool = args.batch, args.pool
    inputs = []
    for i, inp in enumerate(spec["inputs"]):
        shape = [pool, b] + list(inp["shape"])
        if inp.get("dtype", "float32") == "int64":
            v = np.fromfile(os.path.join(args.dir, "input%d.i64" % i), dtype=np.int64)
        else:
            v = np.fromfile(os.path.join(args.dir, "input%d.f32" % i), dtype=np.float32)
        inputs.append(torch.from_numpy(v.reshape(shape)))
    if spec["loss"]["op"] == "cross_entropy":
        y = np.fromfile(os.path.join(args.dir, "labels.i32"), dtype=np.int32).astype(np.int64)
        labels = torch.from_numpy(y.reshape(pool, b))
    else:
        y = np.fromfile(os.path.join(args.dir, "targets.f32"), dtype=np.float32)
        labels = torch.from_numpy(y.reshape(pool, b, -1))
    batches = [([x[j].contiguous() for x in inputs], labels[j].contiguous())
               for j in range(pool)]

    def step(i):
        xs, yb = batches[i % pool]
        opt.zero_grad(set_to_none=True)
        out = model(*xs)
        loss = criterion(out.reshape(out.shape[0], -1), yb)
        loss.backward()
        opt.step()
        return loss

    first = float(step(0))
    for i in range(1, args.warmup):
        step(i)
    secs = None
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        for i in range(args.steps):
            loss = step(i)
        t = time.perf_counter() - t0
        secs = t if secs is None else min(secs, t)
    return {
        "spec": args.spec,
        "batch": b,
        "steps": args.steps,
        "repeats": max(1, args.repeats),
        "seconds": secs,
        "samples_per_s": b * args.steps / secs,
        "first_loss": first,
        "loss": float(loss),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--spec")
    ap.add_argument("--dir")
    ap.add_argument("--pool", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", default=os.environ.get("STARLING_FASHION_MNIST_DIR", DEFAULT_DIR))
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1:
        raise SystemExit("torch_compare.py: --batch and --steps must be positive")

    torch.set_num_threads(1)
    torch.manual_seed(1)
    if args.spec is not None:
        if args.dir is None or args.pool < 1:
            raise SystemExit("torch_compare.py: --spec needs --dir and a positive --pool")
        print(json.dumps(run_spec(args)))
        sys.stdout.flush()
        return
    model = build(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    pool = max(args.batch * 16, 4096)
    data = load(args.data, pool)
    synthetic = data is None
    if synthetic:
        gen = torch.Generator().manual_seed(1)
        x_all = torch.randn(pool, 1, 28, 28, generator=gen)
        y_all = torch.randint(0, 10, (pool,), generator=gen)
    else:
        x_all, y_all = data
    n = x_all.shape[0]
    # Pre-cut the batches (contiguous), as the C engine gathers into scratch.
    batches = []
    for i in range(0, n - args.batch + 1, args.batch):
        batches.append((x_all[i:i + args.batch].contiguous(), y_all[i:i + args.batch].contiguous()))

    def step(i):
        xb, yb = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    secs = None
    for _ in range(max(1, args.repeats)):  # best of: the machine may be shared
        t0 = time.perf_counter()
        for i in range(args.steps):
            loss = step(i)
        t = time.perf_counter() - t0
        secs = t if secs is None else min(secs, t)
    print(json.dumps({
        "model": args.model,
        "batch": args.batch,
        "steps": args.steps,
        "repeats": max(1, args.repeats),
        "seconds": secs,
        "samples_per_s": args.batch * args.steps / secs,
        "loss": float(loss),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "data": "synthetic" if synthetic else "fashion-mnist",
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
