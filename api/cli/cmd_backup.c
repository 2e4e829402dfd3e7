/*
 * cmd_backup.c - `starling backup -o FILE`: an online backup of a running
 * coordinator's database. POST /v1/backups makes the copy on the
 * coordinator (SQLite's VACUUM INTO: a consistent snapshot while rounds go
 * on); GET /v1/backups/{id} brings it here in byte ranges, checked against
 * its SHA-256 (fetch.c). Before FILE is replaced (atomically: an old FILE
 * stays until the new one is complete and durable), a scratch copy is
 * opened through the store with PRAGMA integrity_check, so a backup that
 * would not open never replaces anything.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_int.h"
#include "starling/common.h"
#include "starling/store.h"

static int backup_usage(FILE *out)
{
    fprintf(out, "usage: starling backup [options] -o FILE\n"
                 "Back up the coordinator's database while it runs (POST /v1/backups, then\n"
                 "GET /v1/backups/{id}); the admin token is required.\n"
                 "  -o, --output F   the file to write (replaced atomically, only once the copy\n"
                 "                   passed its SHA-256 and PRAGMA integrity_check)\n"
                 "  --chunk BYTES    download in ranges of this size (default 1048576)\n"
                 "  --json           print the coordinator's Backup record (api/openapi.yaml)\n"
                 "  --no-check       skip the integrity check (the SHA-256 is always "
                 "checked)\n" SL__CLI_CONN_HELP "  --help           this text\n"
                 "Progress goes to stderr: a bar on a terminal, else a line at each quarter\n"
                 "(\"downloading backup: 25%% (1.0 MB of 4.0 MB)\").\n"
                 "exit status: 0 written, 1 error, 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

/* Open a scratch copy of @data through the store (full integrity check). */
static int check_copy(sl__cli *c, const uint8_t *data, size_t len, int *schema, uint64_t *devices)
{
    char dir[512], path[600], err[256] = "";
    const char *tmp = getenv("TMPDIR");
    sl_store_options o;
    sl_store *s = NULL;
    int rc;
    snprintf(dir, sizeof dir, "%s/starling-check-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        return sl__cli_error(c, "cannot make a scratch directory in %s", tmp ? tmp : "/tmp");
    snprintf(path, sizeof path, "%s/check.db", dir);
    rc = sl_fs_write_atomic(path, data, len, 0600);
    if (rc == SL_OK) {
        sl_store_options_default(&o);
        o.path = path;
        o.check = SL_STORE_CHECK_FULL;
        o.readers = 1;
        rc = sl_store_open(&o, &s, err, sizeof err);
    }
    if (rc == SL_OK)
        rc = sl_store_schema_version(s, schema);
    if (rc == SL_OK)
        rc = sl_store_count_devices(s, devices);
    sl_store_close(s);
    /* the store leaves its -wal and -shm beside the copy */
    {
        static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
        for (int i = 0; i < 4; i++) {
            char f[640];
            snprintf(f, sizeof f, "%s%s", path, suffix[i]);
            unlink(f);
        }
        rmdir(dir);
    }
    if (rc != SL_OK)
        return sl__cli_error(c, "the backup does not open: %s%s%s", sl_strerror(rc),
                             err[0] ? ": " : "", err);
    return 0;
}

int sl__cli_backup(int argc, char **argv)
{
    sl__cli c = {"backup", NULL, NULL, NULL, 2, NULL};
    const char *output = NULL;
    int64_t chunk = SL__CLI_CHUNK;
    int json = 0, check = 1, rc, schema = 0;
    uint64_t devices = 0;
    cJSON *made = NULL;
    sl_client_response raw;
    uint8_t *data = NULL;
    size_t len = 0;
    char sha[65], href[160];
    const char *want_sha;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return backup_usage(stdout);
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--no-check") == 0) {
            check = 0;
        } else if ((o = sl__cli_opt(argc, argv, &i, "-o", &v)) != 0 ||
                   (o = sl__cli_opt(argc, argv, &i, "--output", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            output = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--chunk", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--chunk", v, 1024, 64 << 20, &chunk) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (output == NULL || output[0] == '\0')
        return sl__cli_usage_error(&c, "-o FILE is required");
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    /* a retried POST makes one more backup, which expires on the coordinator unused */
    fprintf(stderr, "backing up the database of %s...\n", c.url);
    rc = sl__cli_call(&c, "POST", "/v1/backups", "{}", &made, &raw);
    if (rc != 0)
        goto done;
    want_sha = sl__cli_str(made, "sha256");
    snprintf(href, sizeof href, "%s", sl__cli_str(made, "href"));
    if (strlen(want_sha) != 64 || strncmp(href, "/v1/backups/", 12) != 0) {
        rc = sl__cli_error(&c, "POST /v1/backups: the answer has no sha256 or href");
        goto done;
    }
    rc = sl__cli_fetch(&c, href, "downloading backup", (size_t)chunk, (size_t)4 << 30, &data, &len,
                       sha);
    if (rc != 0)
        goto done;
    /* the digest the coordinator announced, not only the ETag the download carried */
    if (strcmp(sha, want_sha) != 0 || (double)len != sl__cli_num(made, "bytes", -1)) {
        rc = sl__cli_error(&c, "the download does not match the backup (sha256 %s, %zu bytes)",
                           want_sha, len);
        goto done;
    }
    if (check && (rc = check_copy(&c, data, len, &schema, &devices)) != 0)
        goto done;
    if ((rc = sl_fs_write_atomic(output, data, len, 0600)) != SL_OK) {
        rc = sl__cli_error(&c, "cannot write %s: %s", output, sl_strerror(rc));
        goto done;
    }
    if (json) {
        fwrite(raw.body, 1, raw.body_len, stdout);
        fputc('\n', stdout);
    }
    {
        char size[32];
        sl__cli_bytes((double)len, size, sizeof size);
        if (check)
            fprintf(stderr,
                    "wrote %s: %zu bytes (%s), sha256 %s; integrity_check ok, schema %d, "
                    "%llu devices\n",
                    output, len, size, sha, schema, (unsigned long long)devices);
        else
            fprintf(stderr, "wrote %s: %zu bytes (%s), sha256 %s (not opened: --no-check)\n",
                    output, len, size, sha);
    }
    rc = SL__CLI_OK;
done:
    if (made != NULL)
        sl_client_response_free(&raw);
    cJSON_Delete(made);
    free(data);
    sl__cli_close(&c);
    return rc;
}
