#!/usr/bin/python3
"""test_spec_torch.py - spec_torch.py's PyTorch modules against Starling, spec by spec.

    test_spec_torch.py SPEC_FORWARD_BIN SPEC.json|FIXTURE.json ...

For every spec (a spec file, or each {"what", "spec"} entry of a test fixture
list such as tests/fixtures/nn/fd_specs*.json), spec_forward (spec_forward.c)
writes Starling's initialised parameters, a seeded batch and what Starling
computes from them; the translated module loads the same parameters and must
give, in float32:
  - the inference-mode output within 1e-5 (relative to the output's largest value),
  - the training-mode output, the loss within 1e-5 relative, each parameter's
    gradient within 1e-4 (norm of the difference over the larger norm and 1e-3),
    and the running statistics after the step within 1e-5,
unless the spec has Dropout (PyTorch draws another mask): inference only.
Exit 0 when all match, 1 on a mismatch (each printed), 77 when /usr/bin/python3
lacks torch or numpy (ctest SKIP_RETURN_CODE).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_torch import SpecModule, loss_fn  # noqa: E402

torch.set_num_threads(1)


def rel_inf(got, want):
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-6)
    return float(np.abs(got - want).max()) / scale if want.size else 0.0


def check_one(binary, label, spec, failures):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        run = subprocess.run([binary, path, d], capture_output=True, text=True)
        if run.returncode != 0:
            failures.append("%s: spec_forward failed: %s" % (label, run.stderr.strip()))
            return

        def load(name, dtype):
            return np.fromfile(os.path.join(d, name), dtype=dtype)

        model = SpecModule(spec)
        params = load("params.f32", np.float32)
        model.load_flat(params)
        xs = []
        for i, inp in enumerate(spec["inputs"]):
            if inp.get("dtype", "float32") == "int64":
                xs.append(torch.from_numpy(load("input%d.i64" % i, np.int64)))
            else:
                xs.append(torch.from_numpy(load("input%d.f32" % i, np.float32)))
        per_sample = [int(np.prod(inp["shape"])) for inp in spec["inputs"]]
        batch = xs[0].numel() // per_sample[0]
        xs = [x.reshape([batch] + list(inp["shape"])) for x, inp in zip(xs, spec["inputs"])]
        has_dropout = any(nd["op"] == "Dropout" for nd in spec["nodes"])
        problems = []

        model.eval()
        with torch.no_grad():
            out = model(*xs).reshape(batch, -1).numpy()
        e = rel_inf(out, load("eval.f32", np.float32).reshape(batch, -1))
        if not e <= 1e-5:
            problems.append("inference output off by %.3g" % e)

        if not has_dropout:
            model.train()
            out = model(*xs)
            flat_out = out.reshape(batch, -1)
            e = rel_inf(flat_out.detach().numpy(), load("train.f32", np.float32).reshape(batch, -1))
            if not e <= 1e-5:
                problems.append("training output off by %.3g" % e)
            if spec["loss"]["op"] == "cross_entropy":
                y = torch.from_numpy(load("labels.i32", np.int32).astype(np.int64))
            else:
                y = torch.from_numpy(load("targets.f32", np.float32)).reshape(flat_out.shape)
            loss = loss_fn(spec)(flat_out, y)
            loss.backward()
            with open(os.path.join(d, "loss.txt")) as f:
                want_loss = float(f.read())
            if not abs(float(loss) - want_loss) <= 1e-5 * max(abs(want_loss), 1e-3):
                problems.append("loss %.9g, Starling %.9g" % (float(loss), want_loss))
            grad = model.flat_grad().numpy()
            want = load("grad.f32", np.float32)
            after = model.flat().numpy()
            want_after = load("after.f32", np.float32)
            at = 0
            for p in spec["params"]:
                n = int(np.prod(p["shape"]))
                g, w = grad[at:at + n], want[at:at + n]
                e = float(np.linalg.norm(g - w)) / max(float(np.linalg.norm(w)),
                                                       float(np.linalg.norm(g)), 1e-3)
                if not e <= 1e-4:
                    problems.append("gradient of %s off by %.3g" % (p["name"], e))
                if p.get("buffer", False):
                    e = rel_inf(after[at:at + n], want_after[at:at + n])
                    if not e <= 1e-5:
                        problems.append("running statistic %s off by %.3g" % (p["name"], e))
                at += n
        status = "ok" if not problems else "FAIL"
        print("%-4s %s%s" % (status, label, " (inference only: Dropout)" if has_dropout else ""))
        for p in problems:
            failures.append("%s: %s" % (label, p))
            print("     " + p)


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: test_spec_torch.py SPEC_FORWARD_BIN SPEC.json ...")
    binary, failures, count = sys.argv[1], [], 0
    for path in sys.argv[2:]:
        with open(path) as f:
            doc = json.load(f)
        entries = [(os.path.basename(path), doc)] if isinstance(doc, dict) else [
            ("%s[%d] %s" % (os.path.basename(path), i, e.get("what", "")), e["spec"])
            for i, e in enumerate(doc)]
        for label, spec in entries:
            check_one(binary, label, spec, failures)
            count += 1
    print("%d specs, %d problems" % (count, len(failures)))
    return 1 if failures or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
