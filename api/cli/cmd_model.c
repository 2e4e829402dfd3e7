/*
 * cmd_model.c - `starling model export`: save a model version as
 * safetensors (loads in PyTorch: safetensors.torch.load_file) or as the
 * codec's full-model frame (codecs/FORMAT.md), from
 * GET /v1/models/{version}?task=N[&format=safetensors]. The download goes
 * in byte ranges with a progress display (fetch.c) and is checked against
 * the strong ETag (SHA-256);
 * the file is replaced atomically, so an interrupted export leaves the old
 * file (or none), never a partial one.
 */
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/common.h"

static int model_usage(FILE *out)
{
    fprintf(out, "usage: starling model export [options] --format safetensors|frame -o FILE\n"
                 "Save a model version of a task (GET /v1/models/{version}).\n"
                 "  --format F       safetensors (fp32 tensors in layout order, for PyTorch) or\n"
                 "                   frame (the coordinator's full-model frame, codecs/FORMAT.md)\n"
                 "  -o, --output F   the file to write (replaced atomically; - for stdout)\n"
                 "  --task N         the task (default: the only one)\n"
                 "  --version V      a version number or latest (default latest)\n"
                 "  --chunk BYTES    download in ranges of this size (default 1048576); each is\n"
                 "                   retried alone, so a link that drops loses one range at "
                 "most\n" SL__CLI_CONN_HELP "  --help           this text\n"
                 "The frame format needs the admin token; safetensors too unless the coordinator\n"
                 "runs with --public-status. Progress goes to stderr: a bar on a terminal, else a\n"
                 "line at each quarter (\"model latest (frame): 25%% (1.0 MB of 4.0 MB)\").\n"
                 "exit status: 0 written, 1 error, 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static int export_model(sl__cli *c, int64_t task, const char *version, const char *format,
                        const char *output, size_t chunk)
{
    char path[160], label[96], sha[65];
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;
    snprintf(path, sizeof path, "/v1/models/%s?task=%lld%s", version, (long long)task,
             strcmp(format, "safetensors") == 0 ? "&format=safetensors" : "");
    snprintf(label, sizeof label, "model %s (%s)", version, format);
    if (sl__cli_fetch(c, path, label, chunk, (size_t)1 << 30, &data, &len, sha) != 0)
        return SL__CLI_ERROR;
    if (strcmp(output, "-") == 0) {
        rc = fwrite(data, 1, len, stdout) == len && fflush(stdout) == 0 ? SL_OK : SL_EIO;
    } else {
        rc = sl_fs_write_atomic(output, data, len, 0644);
    }
    if (rc != SL_OK) {
        sl__cli_error(c, "cannot write %s: %s", output, sl_strerror(rc));
    } else if (strcmp(output, "-") != 0) {
        char size[32];
        sl__cli_bytes((double)len, size, sizeof size);
        fprintf(stderr, "wrote %s: task %lld, version %s, %s, %zu bytes (%s)%s%s\n", output,
                (long long)task, version, format, len, size, sha[0] ? ", sha256 " : "", sha);
    }
    free(data);
    return rc == SL_OK ? SL__CLI_OK : SL__CLI_ERROR;
}

int sl__cli_model(int argc, char **argv)
{
    sl__cli c = {"model export", NULL, NULL, NULL, 5, NULL};
    const char *format = NULL, *output = NULL, *version = "latest";
    int64_t task = 0, number, chunk = SL__CLI_CHUNK;
    int rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return model_usage(argc < 2 ? stderr : stdout);
    if (strcmp(argv[1], "export") != 0) {
        c.cmd = "model";
        return sl__cli_usage_error(&c, "unknown subcommand \"%s\" (there is: export)", argv[1]);
    }
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return model_usage(stdout);
        if ((o = sl__cli_opt(argc, argv, &i, "--format", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            format = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "-o", &v)) != 0 ||
                   (o = sl__cli_opt(argc, argv, &i, "--output", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            output = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--task", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--task", v, 1, INT64_MAX, &task) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--chunk", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--chunk", v, 1024, 64 << 20, &chunk) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--version", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            if (strcmp(v, "latest") != 0 && sl__cli_int(&c, "--version", v, 1, INT64_MAX, &number))
                return SL__CLI_USAGE;
            version = v;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (format == NULL || (strcmp(format, "safetensors") != 0 && strcmp(format, "frame") != 0))
        return sl__cli_usage_error(&c, "--format safetensors or --format frame is required");
    if (output == NULL || output[0] == '\0')
        return sl__cli_usage_error(&c, "-o FILE is required");
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    rc = sl__cli_pick_task(&c, task, &task);
    if (rc == 0)
        rc = export_model(&c, task, version, format, output, (size_t)chunk);
    sl__cli_close(&c);
    return rc;
}
