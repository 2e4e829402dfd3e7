#!/usr/bin/env bash
# test_demo.sh ROOT BUILD - deploy/demo.sh (the README's `make demo`) at a small
# scale: 8 devices, 3 rounds of 4 reports, with the demo's faults.
#   1. A run to the end: exit status 0, one line per round in order, the
#      summary (accuracy, the product's default compression, bytes against
#      dense FedAvg, faults survived), and
#      the accuracy target check (here 20%: three small rounds).
#   2. The same target at 100%: the demo says it is not met and exits 1.
#   3. Ctrl-C (SIGINT to the demo's process group) mid-run: exit status 130
#      and no coordinator, agent or fleet process left behind.
set -euo pipefail
ROOT=$1
BUILD=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sl-demo.XXXXXX")
cleanup() {
    pkill -KILL -f "$tmp" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

export STARLING_DEMO_DEVICES=8 STARLING_DEMO_ROUNDS=3 STARLING_DEMO_REPORTS=4

# 1. to the end
STARLING_DEMO_DIR=$tmp/run1 STARLING_DEMO_TARGET=0.2 \
    bash "$ROOT/deploy/demo.sh" "$BUILD" >"$tmp/run1.out" 2>&1 || {
    cat "$tmp/run1.out"
    fail "the demo exited $?"
}
out=$tmp/run1.out
# with 8 devices, drop-outs can leave a round short of quorum: closed or abandoned, both
# are lines of the right form; at least one round closed (the final accuracy needs one)
for n in 1 2 3; do
    grep -Eq "^round +$n +(closed +reported +[0-9]+/[0-9]+ +dropped +[0-9]+ +acc +[0-9.]+% +loss +[0-9.]+ +up|abandoned +reported +[0-9]+/[0-9]+ +dropped +[0-9]+ +acc +- +loss +- +up .* (quorum not met|too few))" \
        "$out" || { cat "$out"; fail "no line for round $n"; }
done
[ "$(grep -Ec '^round ' "$out")" -eq 3 ] || { cat "$out"; fail "not exactly 3 round lines"; }
closed=$(grep -Ec '^round +[0-9]+ +closed ' "$out")
[ "$closed" -ge 1 ] || { cat "$out"; fail "no round closed"; }
grep -Eq "^summary of 3 rounds \($closed closed, $((3 - closed)) abandoned\)" "$out" ||
    { cat "$out"; fail "summary"; }
grep -Eq "^  final accuracy +[0-9.]+% \\(loss [0-9.]+, model version $((closed + 1));" "$out" ||
    { cat "$out"; fail "final accuracy line"; }
grep -Eq '^  bytes up .*dense FedAvg: .*\([0-9]+x fewer\)' "$out" || { cat "$out"; fail "bytes up"; }
# the demo runs the product's default compression (its task sets none of it)
grep -Eq '^  compression +ternary values, top-k 1% over the whole model, residual error feedback \(decay 0\.9\)$' \
    "$out" || { cat "$out"; fail "compression line (the coordinator's defaults)"; }
grep -Eq "^  aggregation +fedavg, server rate 1, each coordinate's mean over its senders at the first aggregate, back to the mean of all over a device's first 60 local epochs in its updates; what the last aggregate carried is left out after one a device missed; shorter where devices sit out rounds \(share\^5, at least 6 updates; at 6 nothing is left out\)$" \
    "$out" || { cat "$out"; fail "aggregation line (the coordinator's default senders' mean)"; }
grep -Eq '^  bytes down .*dense FedAvg: ' "$out" || { cat "$out"; fail "bytes down"; }
grep -Eq '^  faults survived +[0-9]+ drop-outs, [0-9]+ transfers cut mid-way' "$out" ||
    { cat "$out"; fail "faults line"; }
grep -Eq '^demo: final accuracy [0-9.]+% \(target 20%\): ok' "$out" || { cat "$out"; fail "target"; }
pgrep -f "$tmp/run1" >/dev/null && fail "processes of run 1 are left"
echo "ok: a run to the end"

# 2. a target the run cannot reach
if STARLING_DEMO_DIR=$tmp/run2 STARLING_DEMO_ROUNDS=1 STARLING_DEMO_TARGET=1.0 \
    bash "$ROOT/deploy/demo.sh" "$BUILD" >"$tmp/run2.out" 2>&1; then
    cat "$tmp/run2.out"
    fail "the demo passed an unreachable target"
fi
grep -q 'is below the target 100%' "$tmp/run2.out" || { cat "$tmp/run2.out"; fail "no target message"; }
echo "ok: an unmet target fails"

# 3. Ctrl-C: SIGINT to the whole process group, as a terminal sends it
STARLING_DEMO_DIR=$tmp/run3 STARLING_DEMO_ROUNDS=50 STARLING_DEMO_TARGET=0 \
    setsid bash "$ROOT/deploy/demo.sh" "$BUILD" >"$tmp/run3.out" 2>&1 &
pid=$!
for _ in $(seq 1800); do
    grep -Eq '^round +1 ' "$tmp/run3.out" && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/run3.out"; fail "the demo ended early"; }
    sleep 0.1
done
grep -Eq '^round +1 ' "$tmp/run3.out" || { cat "$tmp/run3.out"; fail "no round in 180 s"; }
kill -INT -- "-$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 130 ] || { cat "$tmp/run3.out"; fail "exit status $status after Ctrl-C, not 130"; }
grep -q 'demo: interrupted' "$tmp/run3.out" || { cat "$tmp/run3.out"; fail "no interrupt message"; }
for _ in $(seq 50); do
    pgrep -f "$tmp/run3" >/dev/null || break
    sleep 0.1
done
if pgrep -af "$tmp/run3"; then fail "processes left after Ctrl-C"; fi
echo "ok: Ctrl-C stops everything"
