#!/usr/bin/python3
"""torch_compare.py - PyTorch's training throughput for `starling bench train`.

Builds the registry model with the same layers in the same order as
device/nn/models.c, trains it on one thread with SGD (lr 0.01, momentum 0.9)
on mini-batches of Fashion-MNIST (or synthetic data when the data set is
absent), and prints one JSON line: {"samples_per_s": ..., ...}.

Usage: torch_compare.py --model lenet5 --batch 64 --steps 200 [--repeats 3] [--data DIR]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
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
