/*
 * starling - the command-line tool for operators, training and benchmarks.
 * Subcommands: train, status, rounds, devices, follow, task create, model
 * export, backup, report, bench.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli_int.h"
#include "train_cmd.h"
#include "starling/common.h"

static int usage(FILE *out)
{
    fprintf(out,
            "usage: starling <command> [options]\n"
            "commands:\n"
            "  train --model M [--epochs E] [--batch B] [--lr R] [--momentum M]\n"
            "        [--partition SPEC --client C --of N] [--data DIR] [--seed S]\n"
            "      train a registry model on Fashion-MNIST and report test accuracy\n"
            "  bench codec [--json] [--quick] [--input F [--layout L]]\n"
            "      update-frame sizes vs the information bound, dense fp32 and zstd -19;\n"
            "      selection, encode and decode-accumulate throughput\n"
            "  bench store [--json] [--quick] [--dir DIR]\n"
            "      durable 40 KB update inserts/s: one commit per insert vs group commit\n"
            "  bench gemm [--json] [--quick]\n"
            "      SGEMM GFLOP/s beside OpenBLAS (one thread)\n"
            "  bench train [--model M | --spec F.json | --onnx F.onnx] [--batch B] [--json]\n"
            "        [--no-torch]\n"
            "      training samples/s of any model beside PyTorch (one thread)\n"
            "  bench api [--json] [--quick] [--clients N] [--seconds S] [--threads T]\n"
            "        [--workers W] [--phases status,signed,sessions,open]\n"
            "      REST server in process: status req/s and latency; durable uploads/s signed,\n"
            "      under sessions and unauthenticated; status latency while uploads run\n"
            "  bench fl [--quick|--smoke] [--json] [--plot F.png] [--md F.md] [--settings L]\n"
            "      test accuracy vs bytes up/down: dense FedAvg and compressed updates through\n"
            "      the coordinator, an evaluator and a fleet on loopback\n"
            "  bench scale --simulate [--devices N] [--per-round K] [--rounds R] [--json]\n"
            "      the engine and store at fleet size, simulated clock and devices, no HTTP\n"
            "  bench aggregate --store FILE\n"
            "      a store's rounds aggregated in fixed point and in doubles, side by side\n"
            "  bench positions --store FILE\n"
            "      what a store's sparse updates' positions cost, beside splits both ends know\n"
            "  status [--url U] [--token-file F] [--task N] [--watch]\n"
            "      each task's current round and its recent rounds\n"
            "  rounds [--task N] [--limit N] [--offset N] [--json]\n"
            "      a page of a task's rounds\n"
            "  devices [--limit N] [--offset N] [--json]\n"
            "      the enrolled devices: last seen, rounds, reports, rejections\n"
            "  follow [--task N] [--rounds R] [--metrics-wait S]\n"
            "      one line per round as it ends, then a summary against dense FedAvg\n"
            "  task create TASK.json\n"
            "      create a task (configuration, model spec or ONNX file, initial model)\n"
            "  model import MODEL.onnx [-o SPEC.json] [--params-out F] [--loss L]\n"
            "      an ONNX file exported from PyTorch as a model spec, with a report\n"
            "  model export --format safetensors|frame|onnx -o FILE [--version V]\n"
            "      save a model version\n"
            "  backup -o FILE\n"
            "      an online backup of the coordinator's database, checked before it is written\n"
            "  store migrate --from FILE --to URI\n"
            "      copy an SQLite store into an empty PostgreSQL database (replicas)\n"
            "  report --run DATA_DIR -o DIR [--task N]\n"
            "      PNG charts (gnuplot) and a markdown summary of a coordinator's rounds\n"
            "  (each command: --help; exit status 0 ok, 1 error, 2 usage)\n");
    return out == stdout ? 0 : 2;
}

typedef int (*bench_fn)(int argc, char **argv);

/*
 * `starling bench <name> --help`: the benchmarks (tests/bench/) print their
 * usage on stderr and return 2 for any argument they do not take, --help
 * included. The convention of every other command is the usage on stdout and
 * exit 0, so here the usage they print is moved to stdout. (Remove once the
 * benchmarks answer --help themselves.)
 */
static int bench_help(bench_fn fn)
{
    char *args[] = {"--help", NULL};
    int saved, rc;
    fflush(stdout);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    if (saved < 0 || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
        return fn(1, args);
    rc = fn(1, args);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    return rc == 2 || rc == 0 ? 0 : rc;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return usage(stdout);
    if (argc >= 3 && strcmp(argv[1], "bench") == 0) {
        static const struct {
            const char *name;
            bench_fn fn;
        } benches[] = {{"codec", sl_bench_codec},
                       {"store", sl_bench_store},
                       {"gemm", sl_bench_gemm},
                       {"train", sl_bench_train},
                       {"api", sl_bench_api},
                       {"fl", sl_bench_fl},
                       {"aggregate", sl_bench_aggregate},
                       {"scale", sl_bench_scale},
                       {"positions", sl_bench_positions}};
        for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
            if (strcmp(argv[2], benches[i].name) == 0 && wants_help(argc - 2, argv + 2))
                return bench_help(benches[i].fn);
        if (strcmp(argv[2], "codec") == 0)
            return sl_bench_codec(argc - 3, argv + 3);
        if (strcmp(argv[2], "store") == 0)
            return sl_bench_store(argc - 3, argv + 3);
        if (strcmp(argv[2], "gemm") == 0)
            return sl_bench_gemm(argc - 3, argv + 3);
        if (strcmp(argv[2], "train") == 0)
            return sl_bench_train(argc - 3, argv + 3);
        if (strcmp(argv[2], "api") == 0)
            return sl_bench_api(argc - 3, argv + 3);
        if (strcmp(argv[2], "fl") == 0)
            return sl_bench_fl(argc - 3, argv + 3);
        if (strcmp(argv[2], "aggregate") == 0)
            return sl_bench_aggregate(argc - 3, argv + 3);
        if (strcmp(argv[2], "scale") == 0)
            return sl_bench_scale(argc - 3, argv + 3);
        if (strcmp(argv[2], "positions") == 0)
            return sl_bench_positions(argc - 3, argv + 3);
        fprintf(stderr, "starling bench: unknown benchmark '%s'\n", argv[2]);
        return 2;
    }
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return sl_cmd_train(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "status") == 0)
        return sl__cli_status(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "rounds") == 0)
        return sl__cli_rounds(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "devices") == 0)
        return sl__cli_devices(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "backup") == 0)
        return sl__cli_backup(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "store") == 0)
        return sl__cli_store(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "follow") == 0)
        return sl__cli_follow(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "task") == 0)
        return sl__cli_task(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "model") == 0)
        return sl__cli_model(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return sl__cli_report(argc - 1, argv + 1);
    return usage(stderr);
}
