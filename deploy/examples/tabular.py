#!/usr/bin/python3
"""tabular.py - the CSV examples' data (deploy/examples/{digits,wine,breast-cancer,diabetes}).

    tabular.py NAME OUTDIR

Reads the CSVs that Debian's python3-sklearn installs in
/usr/lib/python3/dist-packages/sklearn/datasets/data (digits.csv.gz, wine_data.csv,
breast_cancer.csv, diabetes_data_raw.csv.gz + diabetes_target.csv.gz) through
sklearn.datasets' loaders, splits the samples into train and test (stratified by
class for classification; seeded, so the same every time), and writes:

    OUTDIR/train.csv, OUTDIR/test.csv   a header of feature names, then one sample a
                                        row, the label in the last column ("target":
                                        the class name, or the regression target)
    OUTDIR/contract.json                the example's data contract: the features,
                                        the label, and the train set's mean and std of
                                        every feature (a std of 0 written as 1)
    OUTDIR/train.uri, OUTDIR/test.uri   the sources, csv:OUTDIR/train.csv ...

The committed deploy/examples/NAME/contract.json is this contract.json; the
examples test checks that a fresh run gives the same numbers. Exit status 77 when
a Debian package is missing (the message names it).
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import number, write_contract, write_uris  # noqa: E402

try:
    import numpy as np
    from sklearn import datasets
except ImportError as e:  # pragma: no cover - depends on the machine
    print("tabular.py: %s (Debian: apt-get install python3-numpy python3-sklearn)" % e,
          file=sys.stderr)
    sys.exit(77)

SEED = 20261203
TEST_SHARE = 0.25


def load(name):
    """(features, names, labels, class names or None for regression)"""
    if name == "digits":
        d = datasets.load_digits()
        return d.data, list(d.feature_names), d.target, [str(c) for c in d.target_names]
    if name == "wine":
        d = datasets.load_wine()
        names = [n.replace("/", "_") for n in d.feature_names]
        return d.data, names, d.target, [str(c) for c in d.target_names]
    if name == "breast-cancer":
        d = datasets.load_breast_cancer()
        names = [n.replace(" ", "_") for n in d.feature_names]
        return d.data, names, d.target, [str(c) for c in d.target_names]
    if name == "diabetes":
        d = datasets.load_diabetes(scaled=False)
        return d.data, list(d.feature_names), d.target, None
    raise SystemExit("tabular.py: unknown example " + name)


def split(labels, classes):
    """Indices of the train and test samples: TEST_SHARE of every class in the test set
    (of all samples for regression), drawn with a fixed seed; each set in file order."""
    rng = np.random.default_rng(SEED)
    groups = [np.flatnonzero(labels == c) for c in range(len(classes))] if classes else \
        [np.arange(len(labels))]
    test = []
    for g in groups:
        g = rng.permutation(g)
        test.extend(g[:int(round(TEST_SHARE * len(g)))].tolist())
    test = np.array(sorted(test))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test


def fmt(v):
    """A number as the CSV and the contract write it: shortest exact for whole
    numbers, else 7 significant digits."""
    v = float(v)
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else "%.7g" % v


def write_csv(path, x, y, names, classes):
    with open(path, "w") as f:
        f.write(",".join(names + ["target"]) + "\n")
        for row, label in zip(x, y):
            lab = classes[int(label)] if classes else fmt(label)
            f.write(",".join(fmt(v) for v in row) + "," + lab + "\n")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: tabular.py NAME OUTDIR")
    name, out = sys.argv[1], sys.argv[2]
    x, names, y, classes = load(name)
    train, test = split(y, classes)
    os.makedirs(out, exist_ok=True)
    write_csv(os.path.join(out, "train.csv"), x[train], y[train], names, classes)
    write_csv(os.path.join(out, "test.csv"), x[test], y[test], names, classes)
    # the statistics of the values as written (what a device reads), in float64
    xt = np.array([[float(fmt(v)) for v in row] for row in x[train]])
    mean = xt.mean(axis=0)
    std = xt.std(axis=0)
    std[std == 0] = 1.0
    contract = {
        "contract": 1,
        "input": {"features": names},
        "label": ({"kind": "class", "column": "target", "classes": classes} if classes else
                  {"kind": "target", "column": "target"}),
        "preprocess": {"standardize": {"mean": [number(m) for m in mean],
                                       "std": [number(s) for s in std]}},
        "min_samples": 1,
        "evaluation": {"share": 0.2},
    }
    write_contract(out, contract)
    out = os.path.abspath(out)
    write_uris(out, "csv:%s/train.csv" % out, "csv:%s/test.csv" % out)
    print("%s: %d train and %d test samples, %d features%s in %s" %
          (name, len(train), len(test), len(names),
           ", classes " + " ".join(classes) if classes else ", a regression target", out))


if __name__ == "__main__":
    main()
