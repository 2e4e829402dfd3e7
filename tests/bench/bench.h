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

/** Monotonic nanoseconds (for the benchmarks' timers). */
int64_t sl_bench_now_ns(void);

#endif /* STARLING_BENCH_H */
