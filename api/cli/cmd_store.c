/*
 * cmd_store.c - `starling store migrate --from FILE --to URI`: copy a
 * coordinator's SQLite store into an empty PostgreSQL database, for a fleet
 * that moves to replicas (deploy/README.md). Run it with the coordinator
 * stopped; the copy is one transaction (all or nothing) and the SQLite file
 * is only read (once brought to this build's schema, as this build's
 * coordinator would on start), so going back is starting this build's
 * coordinator on it again.
 */
#include <string.h>

#include "cli_int.h"
#include "starling/common.h"
#include "starling/store.h"

static int store_usage(FILE *out)
{
    fprintf(out, "usage: starling store migrate --from FILE --to URI\n"
                 "Copy a coordinator's SQLite store (FILE, e.g. starling-data/starling.db)\n"
                 "into an empty PostgreSQL database (URI: postgresql://user@host/db) for\n"
                 "replicas: every task, model version, round, device, update, upload session\n"
                 "and audit row with its id, in one transaction. Stop the coordinator first.\n"
                 "The SQLite file is only read (an older schema is first upgraded to this\n"
                 "build's, as its coordinator would on start).\n"
                 "  --from FILE   the SQLite store\n"
                 "  --to URI      the PostgreSQL database (created tables: schema of this build)\n"
                 "  --help        this text\n"
                 "exit status: 0 copied, 1 error (nothing copied), 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

int sl__cli_store(int argc, char **argv)
{
    sl__cli c = {"store migrate", NULL, NULL, NULL, 0, NULL};
    const char *from = NULL, *to = NULL;
    char err[600] = "";
    uint64_t rows = 0;
    int rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return store_usage(argc < 2 ? stderr : stdout);
    if (strcmp(argv[1], "migrate") != 0)
        return sl__cli_usage_error(&c, "unknown subcommand \"%s\" (only: migrate)", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        int o;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return store_usage(stdout);
        if ((o = sl__cli_opt(argc, argv, &i, "--from", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            from = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--to", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            to = v;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (from == NULL || to == NULL)
        return sl__cli_usage_error(&c, "--from FILE and --to URI are required");
    if (sl_store_is_url(from) || !sl_store_is_url(to))
        return sl__cli_usage_error(&c, "--from is an SQLite file, --to a postgresql:// URI");
    rc = sl_store_migrate(from, to, &rows, err, sizeof err);
    if (rc != SL_OK)
        return sl__cli_error(&c, "%s%s%s (nothing was copied)", sl_strerror(rc), err[0] ? ": " : "",
                             err);
    printf("copied %llu rows from %s into PostgreSQL\n", (unsigned long long)rows, from);
    return SL__CLI_OK;
}
