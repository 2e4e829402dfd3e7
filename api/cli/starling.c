/*
 * starling - the command-line tool: `starling bench <what> [options]`.
 * Further subcommands (train, status, ...) arrive with their components.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "starling/common.h"

static int usage(FILE *out)
{
    fprintf(out, "usage: starling <command> [options]\n"
                 "commands:\n"
                 "  bench codec [--json] [--quick] [--input F [--layout L]]\n"
                 "      update-frame sizes vs the information bound, dense fp32 and zstd -19;\n"
                 "      selection, encode and decode-accumulate throughput\n");
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return usage(stdout);
    if (argc >= 3 && strcmp(argv[1], "bench") == 0) {
        if (strcmp(argv[2], "codec") == 0)
            return sl_bench_codec(argc - 3, argv + 3);
        fprintf(stderr, "starling bench: unknown benchmark '%s'\n", argv[2]);
        return 2;
    }
    return usage(stderr);
}
