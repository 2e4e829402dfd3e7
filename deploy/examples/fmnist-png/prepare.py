#!/usr/bin/python3
"""prepare.py OUTDIR [--small] - the fmnist-png example's data (see prepare.sh)."""
import gzip
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import number, write_contract, write_uris  # noqa: E402

DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ["tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle_boot"]
TRAIN, TEST = 6000, 1000          # the first samples of each split
SMALL_TRAIN, SMALL_TEST = 1000, 300


def idx(name):
    with gzip.open(os.path.join(DIR, name), "rb") as f:
        return f.read()


def main():
    try:
        import numpy as np
        from PIL import Image
    except ImportError as e:
        print("fmnist-png: %s (Debian: apt-get install python3-numpy python3-pil)" % e,
              file=sys.stderr)
        sys.exit(77)
    if not os.path.exists(os.path.join(DIR, "train-images-idx3-ubyte.gz")):
        print("fmnist-png: no Fashion-MNIST in %s (Debian: apt-get install "
              "dataset-fashion-mnist)" % DIR, file=sys.stderr)
        sys.exit(77)
    out = os.path.abspath(sys.argv[1])
    small = "--small" in sys.argv[2:]
    counts = {"train": SMALL_TRAIN if small else TRAIN, "t10k": SMALL_TEST if small else TEST}
    stats = None
    for split, part in (("train", "train"), ("t10k", "test")):
        raw = idx("%s-images-idx3-ubyte.gz" % split)
        images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 28, 28)
        labels = np.frombuffer(idx("%s-labels-idx1-ubyte.gz" % split), dtype=np.uint8, offset=8)
        n = counts[split]
        for c in CLASSES:
            os.makedirs(os.path.join(out, part, c), exist_ok=True)
        for i in range(n):
            Image.fromarray(images[i], mode="L").save(
                os.path.join(out, part, CLASSES[labels[i]], "%05d.png" % i))
        if part == "train":
            # the statistics of the full subset (TRAIN samples), also with --small
            x = images[:TRAIN].astype(np.float64) / 255.0
            stats = (x.mean(), x.std())
    contract = {
        "contract": 1,
        "input": {"shape": [1, 28, 28]},
        "label": {"kind": "class", "classes": CLASSES},
        "preprocess": {
            "image": {"width": 28, "height": 28, "channels": 1},
            "scale": {"factor": 1.0 / 255.0},
            "standardize": {"mean": number(stats[0]), "std": number(stats[1])},
        },
        "min_samples": 1,
        "evaluation": {"share": 0.1},
    }
    write_contract(out, contract)
    write_uris(out, "images:%s/train" % out, "images:%s/test" % out)
    print("fmnist-png: %d train and %d test PNG files in %s/{train,test}/<class>/" %
          (counts["train"], counts["t10k"], out))


if __name__ == "__main__":
    main()
