#!/usr/bin/python3
"""prepare.py OUTDIR - the co2 example's data (see prepare.sh)."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import number, write_contract, write_uris  # noqa: E402

CSV = "/usr/lib/python3/dist-packages/statsmodels/datasets/co2/co2.csv"
WINDOW = 52       # weeks a sample sees
TRAIN_SHARE = 0.8  # the first 80% of the weeks train, the rest test


def main():
    try:
        import numpy as np
    except ImportError as e:
        print("co2: %s (Debian: apt-get install python3-numpy)" % e, file=sys.stderr)
        sys.exit(77)
    if not os.path.exists(CSV):
        print("co2: %s is missing (Debian: apt-get install python3-statsmodels)" % CSV,
              file=sys.stderr)
        sys.exit(77)
    out = sys.argv[1]
    dates, ppm = [], []
    with open(CSV) as f:
        if f.readline().strip() != "date,co2":
            raise SystemExit("co2: %s: unexpected header" % CSV)
        for line in f:
            d, v = line.strip().split(",")
            dates.append(d)
            ppm.append(float(v) if v else float("nan"))
    ppm = np.array(ppm)
    gap = np.isnan(ppm)
    at = np.arange(len(ppm))
    ppm[gap] = np.interp(at[gap], at[~gap], ppm[~gap])  # the 59 missing weeks
    ppm = np.round(ppm, 2)
    change = np.round(np.diff(ppm), 2)  # change[i]: week i+1 minus week i
    # row j (week j + 1): its reading, its change from the week before, and the next change
    rows = [(dates[j + 1], ppm[j + 1], change[j], change[j + 1]) for j in range(len(change) - 1)]
    cut = int(TRAIN_SHARE * len(rows))
    os.makedirs(out, exist_ok=True)

    def write(path, part):
        with open(path, "w") as f:
            f.write("date,co2,change,next_change\n")
            for d, v, c, n in part:
                f.write("%s,%.2f,%.2f,%.2f\n" % (d, v, c, n))

    write(os.path.join(out, "train.csv"), rows[:cut])
    # the test windows end in the test weeks; their first rows are the weeks before
    write(os.path.join(out, "test.csv"), rows[cut - WINDOW + 1:])
    x = np.array([r[2] for r in rows[:cut]])
    contract = {
        "contract": 1,
        "input": {"features": ["change"]},
        "label": {"kind": "target", "column": "next_change"},
        "preprocess": {
            "window": {"size": WINDOW, "stride": 1, "label": "last"},
            "standardize": {"mean": [number(x.mean())], "std": [number(x.std())]},
        },
        "min_samples": 1,
        "evaluation": {"share": 0.2},
    }
    write_contract(out, contract)
    out = os.path.abspath(out)
    write_uris(out, "csv:%s/train.csv" % out, "csv:%s/test.csv" % out)
    print("co2: %d weeks to train (%s .. %s), %d test windows (%s .. %s), in %s" %
          (cut, rows[0][0], rows[cut - 1][0], len(rows) - cut, rows[cut][0], rows[-1][0], out))


if __name__ == "__main__":
    main()
