#!/usr/bin/env bash
# prepare.sh OUTDIR - the co2 example's device data: the weekly CO2 readings of
# Mauna Loa, March 1958 - December 2001 (Scripps; the co2 data set that Debian's
# python3-statsmodels installs; public domain), the 59 missing weeks filled by
# linear interpolation, as CSV rows "date,co2,change,next_change" (ppm; change:
# from the week before; next_change: to the week after, the forecast's target).
# The first 80% of the weeks train, the rest test (nothing is downloaded, the same
# bytes every time):
#   OUTDIR/train.csv   the devices' source: csv:OUTDIR/train.csv
#   OUTDIR/test.csv    the evaluator's source: csv:OUTDIR/test.csv (its first 51
#                      rows are the weeks before the test period: the first window)
#   OUTDIR/contract.json, train.uri, test.uri
# Exit status 77 when a Debian package it needs is missing.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/prepare.py" "$@"
