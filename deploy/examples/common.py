"""common.py - what the examples' preparation scripts share (deploy/examples/*/prepare.sh)."""
import json
import os


def number(v):
    """A float as the contracts write it: 7 significant digits."""
    return float("%.7g" % float(v))


def write_contract(out, doc):
    """OUTDIR/contract.json: one member of each object a line, lists on one line."""
    def dump(v, indent):
        if isinstance(v, dict):
            pad = " " * (indent + 1)
            items = [pad + json.dumps(k) + ": " + dump(x, indent + 1) for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "}"
        return json.dumps(v)
    with open(os.path.join(out, "contract.json"), "w") as f:
        f.write(dump(doc, 0) + "\n")


def write_uris(out, train, test):
    """OUTDIR/train.uri and OUTDIR/test.uri: the sources `starling bench fl --data-dir` reads."""
    for name, uri in (("train", train), ("test", test)):
        with open(os.path.join(out, name + ".uri"), "w") as f:
            f.write(uri + "\n")
