#!/usr/bin/env bash
# deploy/demo.sh BUILD_DIR - the README's `make demo`: a real federated job on
# loopback. It starts
#   - starling-coordinator with its own data directory and tokens,
#   - one evaluator (starling-agent --evaluator: the Fashion-MNIST test set,
#     accuracy of every model version),
#   - a simulated fleet of 50 devices (starling-agent --fleet 50: threads in
#     one process, each with its own key, state directory, residual and
#     dirichlet:0.5 share of Fashion-MNIST) with injected faults: 20% of the
#     selected devices drop out after downloading the model, 10% of transfers
#     are cut mid-way (the upload or download resumes), 20% of devices
#     straggle (train 3x slower),
# creates a lenet5 task, and prints one line per round (starling follow) and
# a summary against dense FedAvg. Ctrl-C stops everything cleanly.
#
# Plain HTTP on loopback, on purpose: the fleet's fault injection puts a TCP
# relay between each device and the coordinator that cuts connections at
# chosen byte offsets and recognises resumed requests by their bytes, which it
# cannot do inside TLS. Nothing leaves 127.0.0.1. HTTPS, certificates and pins
# are exercised by the test suite (tests/integration), and deploy/README.md
# shows the TLS setup.
#
# Knobs (environment): STARLING_DEMO_DEVICES (50), STARLING_DEMO_ROUNDS (45),
# STARLING_DEMO_REPORTS (20: reports that close a round),
# STARLING_DEMO_PORT (first free port from 8480), STARLING_DEMO_DIR
# (BUILD_DIR/demo), STARLING_DEMO_TARGET (0.85: the accuracy the demo must
# reach; exit status 1 when it does not).
set -euo pipefail

BUILD=${1:-build/default}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
COORD=$BUILD/coordinator/starling-coordinator
AGENT=$BUILD/device/starling-agent
CLI=$BUILD/api/starling
for b in "$COORD" "$AGENT" "$CLI"; do
    [ -x "$b" ] || { echo "demo: $b is missing; build first (make demo does)" >&2; exit 1; }
done
DATA=/usr/share/datasets/fashion-mnist
[ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
    { echo "demo: Fashion-MNIST is missing: apt-get install dataset-fashion-mnist" >&2; exit 1; }

DEVICES=${STARLING_DEMO_DEVICES:-50}
ROUNDS=${STARLING_DEMO_ROUNDS:-45}
REPORTS=${STARLING_DEMO_REPORTS:-20}
TARGET=${STARLING_DEMO_TARGET:-0.85}
DIR=${STARLING_DEMO_DIR:-$BUILD/demo}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORT=${STARLING_DEMO_PORT:-}
if [ -z "$PORT" ]; then
    for p in $(seq 8480 8580); do
        if port_free "$p"; then PORT=$p; break; fi
    done
fi
[ -n "$PORT" ] || { echo "demo: no free port in 8480-8580 (set STARLING_DEMO_PORT)" >&2; exit 1; }
URL=http://127.0.0.1:$PORT

rm -rf "$DIR"
mkdir -p "$DIR"
umask 077
head -c 24 /dev/urandom | base64 >"$DIR/admin.token"
head -c 24 /dev/urandom | base64 >"$DIR/enrol.token"

# The task: lenet5, ROUNDS rounds; 20 reports close a round (30 selected:
# over-selection covers the drop-outs), 60% quorum by the deadline; 4 local
# epochs; FedAvg. It sets nothing about compression: the devices use the
# coordinator's defaults (ternary values, top-k 1% over the whole model,
# the classic residual decayed by 0.9), which the summary prints as the
# coordinator reports them.
cat >"$DIR/task.json" <<EOF
{"config": {"name": "fashion-mnist-demo", "rounds": $ROUNDS, "target": $REPORTS,
            "over_selection": 1.5, "quorum": 0.6,
            "selection_window_ms": 1000, "report_deadline_ms": 15000,
            "local_epochs": 4, "batch": 32, "local_lr": 0.01, "local_momentum": 0.9,
            "aggregator": "fedavg", "seed": 7},
 "init": {"model": "lenet5", "seed": 1}}
EOF

PIDS=()
stop_all() {
    local pid
    # the fleet first (it prints its totals), then the evaluator, then the coordinator
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}
on_interrupt() {
    trap - INT TERM
    echo
    echo "demo: interrupted; stopping the fleet, the evaluator and the coordinator"
    stop_all
    echo "demo: logs in $DIR"
    exit 130
}
trap on_interrupt INT TERM
trap stop_all EXIT

"$COORD" --insecure-http --listen "127.0.0.1:$PORT" --data-dir "$DIR/data" \
    --admin-token-file "$DIR/admin.token" --enrolment-token-file "$DIR/enrol.token" \
    --public-status --log-level warn >"$DIR/coordinator.log" 2>&1 &
COORD_PID=$!
for _ in $(seq 100); do
    curl -fsS "$URL/healthz" >/dev/null 2>&1 && break
    kill -0 "$COORD_PID" 2>/dev/null ||
        { echo "demo: the coordinator did not start:" >&2; cat "$DIR/coordinator.log" >&2; exit 1; }
    sleep 0.1
done
"$CLI" task create --url "$URL" --token-file "$DIR/admin.token" "$DIR/task.json" >"$DIR/task.id"
TASK=$(awk '{print $2}' "$DIR/task.id")

"$AGENT" --coordinator "$URL" --task "$TASK" --evaluator --eval-interval 500ms \
    --admin-token-file "$DIR/admin.token" --enrolment-token-file "$DIR/enrol.token" \
    --state-dir "$DIR/evaluator" --data "$DATA" >"$DIR/evaluator.log" 2>&1 &
EVAL_PID=$!
"$AGENT" --coordinator "$URL" --task "$TASK" --fleet "$DEVICES" --of "$DEVICES" ${STARLING_DEMO_AGENT_FLAGS:-} \
    --partition dirichlet:0.5 --data "$DATA" --seed 7 --threads 1 \
    --dropout 0.2 --cut 0.1 --straggle 0.2:3 \
    --enrolment-token-file "$DIR/enrol.token" --state-dir "$DIR/fleet" \
    >"$DIR/fleet.out" 2>"$DIR/fleet.log" &
FLEET_PID=$!
PIDS=("$FLEET_PID" "$EVAL_PID" "$COORD_PID")

cat <<EOF
Starling demo: $DEVICES simulated devices (Fashion-MNIST, dirichlet:0.5 split), lenet5,
updates compressed as the coordinator does by default; faults: 20% of selected devices
drop out, 10% of transfers cut mid-way, 20% stragglers (3x slower).
  dashboard   $URL/
  logs        $DIR
  stop        Ctrl-C

EOF
START=$(date +%s)
status=0
"$CLI" follow --url "$URL" --task "$TASK" --metrics-wait 20 | tee "$DIR/rounds.txt" ||
    status=${PIPESTATUS[0]}
ELAPSED=$(($(date +%s) - START))
# Ctrl-C reaches `starling follow`, which prints the summary so far and exits 130
[ "$status" -ne 130 ] || on_interrupt
[ "$status" -eq 0 ] || { echo "demo: starling follow failed ($status); logs in $DIR" >&2; exit 1; }

kill -TERM "$FLEET_PID" 2>/dev/null || true
wait "$FLEET_PID" 2>/dev/null || true
FLEET=$(grep '^fleet of' "$DIR/fleet.out" || true)
num() { sed -n "s/.* \([0-9][0-9]*\) $1.*/\1/p" <<<"$FLEET" | head -n1; }
echo "  faults survived          $(num dropped) drop-outs, $(num cuts) transfers cut mid-way" \
    "(retried or resumed), $(num folded) late updates folded (not aggregated; their devices send that work again)"
echo "  dashboard                $URL/ (until the coordinator stops)"
echo "  wall time                ${ELAPSED} s"
stop_all
FINAL=$(sed -n 's/^  final accuracy *\([0-9.]*\)%.*/\1/p' "$DIR/rounds.txt")
if [ -n "$FINAL" ] && awk -v a="$FINAL" -v t="$TARGET" 'BEGIN { exit !(a / 100 >= t) }'; then
    echo "demo: final accuracy ${FINAL}% (target $(awk -v t="$TARGET" 'BEGIN{print t*100}')%): ok"
else
    echo "demo: final accuracy ${FINAL:-unknown}% is below the target" \
        "$(awk -v t="$TARGET" 'BEGIN{print t*100}')%" >&2
    exit 1
fi
