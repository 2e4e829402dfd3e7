#!/usr/bin/env bash
# prepare.sh OUTDIR - the breast-cancer example's device data, made from what Debian's
# python3-sklearn installs (nothing is downloaded; the same bytes every time):
#   OUTDIR/train.csv   the devices' source: csv:OUTDIR/train.csv
#   OUTDIR/test.csv    the evaluator's source: csv:OUTDIR/test.csv
#   OUTDIR/contract.json, train.uri, test.uri  (see ../tabular.py)
# Exit status 77 when a Debian package it needs is missing.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/../tabular.py" breast-cancer "$1"
