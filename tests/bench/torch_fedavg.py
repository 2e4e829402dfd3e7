#!/usr/bin/python3
"""torch_fedavg.py - PyTorch FedAvg on the split `starling bench fl --task` trains.

    torch_fedavg.py DIR

DIR holds what the benchmark wrote after loading the task's train source through
its data contract and partition (the devices' own split, held-out samples left out)
and its test source (every sample):

    fedavg.json          {"spec": FILE, "rounds", "epochs", "batch", "lr", "momentum",
                          "optimizer": "sgd"|"adam"|"adamw", "nesterov", "weight_decay",
                          "betas", "eps", "clip_norm", "seed", "clients": [n0, n1, ...],
                          "test": n, "tdim", "kind": "class"|"target"}
    params.f32           the task's initial model (the layout's floats)
    client<k>.x.f32      client k's training inputs (n_k x the spec's input size)
    client<k>.y.f32      their labels (a class index as a float) or targets (n_k x tdim)
    test.x.f32, test.y.f32

Every round every client starts from the global model, trains `epochs` passes of
shuffled mini-batches (the last one smaller) with a fresh optimiser as the task
says (SGD with momentum, Nesterov, weight decay; Adam or AdamW; gradient clipping),
and the new global model is the mean of the clients' models weighted by their
training samples (FedAvg, server learning rate 1). Prints one JSON line per round
(round 0: the initial model) with the test set's loss and accuracy (classification)
or MAE and RMSE (regression), then {"done": true, ...}. One thread.
Exit status 3 (and {"error": ...}) when numpy or torch cannot be imported.
"""
import json
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # the caller reports "PyTorch not available"
    print(json.dumps({"error": str(e)}))
    sys.exit(3)

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_torch import SpecModule, loss_fn  # noqa: E402


def load(path, rows, cols):
    v = np.fromfile(path, dtype=np.float32)
    if v.size != rows * cols:
        raise SystemExit("torch_fedavg.py: %s holds %d floats, not %d x %d" %
                         (path, v.size, rows, cols))
    return torch.from_numpy(v.reshape(rows, cols))


def optimiser(cfg, params):
    name = cfg.get("optimizer", "sgd")
    wd = cfg.get("weight_decay", 0.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg.get("momentum", 0.0),
                               nesterov=bool(cfg.get("nesterov", False)), weight_decay=wd)
    betas = tuple(cfg.get("betas", (0.9, 0.999)))
    eps = cfg.get("eps", 1e-8)
    if name == "adam":
        return torch.optim.Adam(params, lr=cfg["lr"], betas=betas, eps=eps, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=cfg["lr"], betas=betas, eps=eps, weight_decay=wd)
    raise SystemExit("torch_fedavg.py: unknown optimizer " + name)


def evaluate(model, criterion, x, y, kind):
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(x[i:i + 256]) for i in range(0, x.shape[0], 256)])
        out = out.reshape(out.shape[0], -1)
        if kind == "class":
            labels = y[:, 0].long()
            loss = float(criterion(out, labels))
            acc = float((out.argmax(dim=1) == labels).float().mean())
            return {"loss": loss, "accuracy": acc}
        err = out - y
        return {"loss": float(criterion(out, y)), "mae": float(err.abs().mean()),
                "rmse": math.sqrt(float((err * err).mean()))}


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: torch_fedavg.py DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "fedavg.json")) as f:
        cfg = json.load(f)
    with open(cfg["spec"]) as f:
        spec = json.load(f)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.get("seed", 1))
    model = SpecModule(spec)
    criterion = loss_fn(spec)
    kind, tdim = cfg["kind"], cfg["tdim"]
    size = 1
    for s in spec["inputs"][0]["shape"]:
        size *= s
    clients = []
    for k, n in enumerate(cfg["clients"]):
        if n > 0:
            clients.append((n, load(os.path.join(d, "client%d.x.f32" % k), n, size),
                            load(os.path.join(d, "client%d.y.f32" % k), n, tdim)))
    tx = load(os.path.join(d, "test.x.f32"), cfg["test"], size)
    ty = load(os.path.join(d, "test.y.f32"), cfg["test"], tdim)
    flat = np.fromfile(os.path.join(d, "params.f32"), dtype=np.float32)
    model.load_flat(flat)
    glob = model.flat().clone()
    total = float(sum(n for n, _, _ in clients))
    t0 = time.perf_counter()
    print(json.dumps(dict(round=0, **evaluate(model, criterion, tx, ty, kind))))
    sys.stdout.flush()
    gen = torch.Generator()
    for r in range(1, cfg["rounds"] + 1):
        acc = torch.zeros_like(glob, dtype=torch.float64)
        for k, (n, x, y) in enumerate(clients):
            model.load_flat(glob)
            model.train()
            opt = optimiser(cfg, [p for p in model.parameters() if p.requires_grad])
            labels = y[:, 0].long() if kind == "class" else y
            for e in range(cfg["epochs"]):
                gen.manual_seed((cfg.get("seed", 1) * 1000003 + r) * 1009 + k * 101 + e)
                order = torch.randperm(n, generator=gen)
                for b in range(0, n, cfg["batch"]):
                    ix = order[b:b + cfg["batch"]]
                    opt.zero_grad(set_to_none=True)
                    out = model(x[ix])
                    loss = criterion(out.reshape(out.shape[0], -1), labels[ix])
                    loss.backward()
                    if cfg.get("clip_norm", 0) > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip_norm"])
                    opt.step()
            acc += model.flat().double() * (n / total)
        glob = acc.float()
        model.load_flat(glob)
        line = dict(round=r, **evaluate(model, criterion, tx, ty, kind))
        line["seconds"] = time.perf_counter() - t0
        print(json.dumps(line))
        sys.stdout.flush()
    print(json.dumps({"done": True, "seconds": time.perf_counter() - t0,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
