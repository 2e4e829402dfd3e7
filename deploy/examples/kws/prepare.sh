#!/usr/bin/env bash
# prepare.sh OUTDIR [--small] - the kws (keyword spotting) example's device data:
# espeak-ng says yes, no, up, down, left, right, stop and go in 7 English voices
# (en, en-us, en-gb-scotland, en-gb-x-gbclan, en-gb-x-rp, en-gb-x-gbcwmd, en-029),
# 12 variants (+m1..+m7, +f1..+f5), 5 speeds and 4 pitches; each word gets its own
# seeded draw of 300 of those combinations, 240 for training and the other 60 for
# the test. Each clip: silence trimmed, resampled to 16 kHz (scipy.signal.
# resample_poly), placed at a seeded offset in 1 s of quiet noise, 16-bit mono WAV
# (python3-numpy, python3-scipy, espeak-ng; nothing downloaded, the same files every
# time):
#   OUTDIR/train/<word>/*.wav   the devices' source: wav:OUTDIR/train
#   OUTDIR/test/<word>/*.wav    the evaluator's source: wav:OUTDIR/test
#   OUTDIR/contract.json, train.uri, test.uri
# --small: 60 and 15 clips a word (the tests). About a minute on 2 cores (full).
# Exit status 77 when a Debian package it needs is missing.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [--small]" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/prepare.py" "$@"
