/* bench.h - the benchmark programs behind `starling bench ...`. */
#ifndef STARLING_BENCH_H
#define STARLING_BENCH_H

#include <stdint.h>

/**
 * sl_bench_codec - `starling bench codec [--json] [--quick] [--input F [--layout L]]`:
 * frame sizes against the information bound, dense fp32 and zstd -19, and
 * selection / encode / decode-accumulate throughput, side by side in one run.
 * Returns a process exit code; prints to stdout.
 */
int sl_bench_codec(int argc, char **argv);

/**
 * sl_bench_gemm - `starling bench gemm [--json] [--quick]`: GFLOP/s of
 * sl_nn_sgemm for the models' shapes and 256..2048 squares, beside OpenBLAS's
 * cblas_sgemm (loaded at run time, one thread) in the same run.
 */
int sl_bench_gemm(int argc, char **argv);

/**
 * sl_bench_train - `starling bench train --model M --batch B [--json]
 * [--no-torch]`: training samples/s on one thread, beside PyTorch
 * (tests/bench/torch_compare.py with Debian's python3-torch) on the same
 * model, batch and data in the same invocation.
 */
int sl_bench_train(int argc, char **argv);

/**
 * sl_bench_store - `starling bench store [--json] [--quick] [--dir DIR]`:
 * durable 40 KB update inserts/s, one commit per insert against group
 * commit with 1, 8 and 64 writers.
 */
int sl_bench_store(int argc, char **argv);

/**
 * sl_bench_aggregate - `starling bench aggregate --store FILE`: every round
 * of a coordinator's store that made a model version, aggregated by the
 * coordinator's fixed-point sums and by summing in doubles, side by side;
 * prints the largest difference of the pseudo-gradients and how many
 * parameters of the two new models differ (tests/bench/bench_aggregate.c).
 */
int sl_bench_aggregate(int argc, char **argv);

/**
 * sl_bench_positions - `starling bench positions --store FILE`: the positions of a
 * coordinator's stored sparse updates, bits a position as the frames sent them beside the
 * ideal costs of coding them as subsets of splits that both ends know (the tensors, the
 * last aggregate's support, the device's previous update; tests/bench/bench_positions.c).
 */
int sl_bench_positions(int argc, char **argv);

/**
 * sl_bench_scale - `starling bench scale --simulate [--devices N]
 * [--per-round K] [--rounds R] [--params P] [--density D] [--dir DIR]
 * [--json]`: the engine and store with a simulated clock and simulated
 * devices, no HTTP (default one million enrolled, 10,000 reports a round);
 * per round the coordinator's memory, the round's close time and the
 * store's size (tests/bench/bench_scale.c).
 */
int sl_bench_scale(int argc, char **argv);

/**
 * sl_bench_api - `starling bench api [--json] [--quick] [--clients N]
 * [--seconds S] [--threads T] [--devices D] [--dir DIR]`: the coordinator's
 * REST server in process on loopback (plain HTTP, the store on disk) with N
 * concurrent clients on libcurl multi handles: GET /v1/status requests/s
 * and p50/p99 latency, complete durable 40 KB uploads/s (signed create +
 * one PATCH), status latency while uploads run, and `wrk -t2 -c64 -d5s` on
 * /v1/status when wrk is installed. Returns 0, 1 when a request failed, 2
 * for bad options.
 */
int sl_bench_api(int argc, char **argv);

/**
 * sl_bench_fl - `starling bench fl [--quick | --smoke] [--json] [--plot F.png]
 * [--md F.md] [--settings LIST] ...`: test accuracy against bytes on the wire
 * for dense fp32 FedAvg and top-k/quantised settings, side by side, through
 * starling-coordinator, an evaluator and a fleet of starling-agent on
 * loopback (bench_fl.c describes the setup). Blocks for the whole run
 * (hours for the full setup). Returns 0, 1 when a setting or an output
 * failed, 2 for bad options.
 */
int sl_bench_fl(int argc, char **argv);

/** Monotonic nanoseconds (for the benchmarks' timers). */
int64_t sl_bench_now_ns(void);

#endif /* STARLING_BENCH_H */
