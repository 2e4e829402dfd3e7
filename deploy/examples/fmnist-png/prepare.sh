#!/usr/bin/env bash
# prepare.sh OUTDIR [--small] - the fmnist-png example's device data: the first 6,000
# training and 1,000 test images of Fashion-MNIST (Debian's dataset-fashion-mnist,
# /usr/share/datasets/fashion-mnist) written as PNG files, one folder per class
# (python3-numpy, python3-pil; nothing is downloaded, the same bytes every time):
#   OUTDIR/train/<class>/NNNNN.png   the devices' source: images:OUTDIR/train
#   OUTDIR/test/<class>/NNNNN.png    the evaluator's source: images:OUTDIR/test
#   OUTDIR/contract.json, train.uri, test.uri
# --small: 1,000 and 300 images (the tests). Exit status 77 when a Debian package
# it needs is missing.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [--small]" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/prepare.py" "$@"
