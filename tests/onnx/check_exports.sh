#!/bin/sh
# onnx_checker (ctest): export every ONNX fixture's import with sl_onnx_export (the driver),
# then onnx.checker.check_model and a numpy run of each exported graph against PyTorch's
# output (run_onnx.py). Exit 77 (ctest: skipped) when /usr/bin/python3 has no onnx or numpy.
#   usage: check_exports.sh DRIVER OUT_DIR FIXTURE_DIR RUN_ONNX_PY
set -eu
driver=$1 out=$2 fixtures=$3 runner=$4
py=/usr/bin/python3
if ! [ -x "$py" ] || ! "$py" -c "import onnx, numpy" 2>/dev/null; then
    echo "skipped: $py cannot import onnx and numpy (apt-get install python3-onnx)"
    exit 77
fi
rm -rf "$out"
mkdir -p "$out"
files=$("$driver" "$out")
# shellcheck disable=SC2086 # one path a line, no spaces (the build folder's)
exec "$py" "$runner" "$fixtures" $files
