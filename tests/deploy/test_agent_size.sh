#!/bin/bash
# test_agent_size.sh AGENT - the device agent stays small: its stripped binary is at most
# 1 MiB (ONNX parsing and everything else of the operator's side live in `starling`, never
# in the agent; the agent receives model specs). Strips a copy; prints the size.
set -euo pipefail
agent=$1
limit=$((1024 * 1024))
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cp "$agent" "$tmp"
strip "$tmp"
size=$(stat -c %s "$tmp")
echo "starling-agent stripped: $size bytes (limit $limit)"
# the ONNX importer must not be linked into the agent
if grep -q "onnx.ModelProto\|onnx__model_proto" "$tmp"; then
    echo "FAIL: the agent links the ONNX importer" >&2
    exit 1
fi
if [ "$size" -gt "$limit" ]; then
    echo "FAIL: the agent is over 1 MiB stripped" >&2
    exit 1
fi
