/*
 * cmd_model.c - `starling model export`: save a model version as
 * safetensors (loads in PyTorch: safetensors.torch.load_file) or as the
 * codec's full-model frame (codecs/FORMAT.md), from
 * GET /v1/models/{version}?task=N[&format=safetensors]. The download is
 * resumable and checked against the strong ETag (SHA-256) by the client;
 * the file is replaced atomically, so an interrupted export leaves the old
 * file (or none), never a partial one.
 */
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/common.h"

static int model_usage(FILE *out)
{
    fprintf(out,
            "usage: starling model export [options] --format safetensors|frame -o FILE\n"
            "Save a model version of a task (GET /v1/models/{version}).\n"
            "  --format F       safetensors (fp32 tensors in layout order, for PyTorch) or\n"
            "                   frame (the coordinator's full-model frame, codecs/FORMAT.md)\n"
            "  -o, --output F   the file to write (replaced atomically; - for stdout)\n"
            "  --task N         the task (default: the only one)\n"
            "  --version V      a version number or latest (default latest)\n" SL__CLI_CONN_HELP
            "  --help           this text\n"
            "The frame format needs the admin token; safetensors too unless the coordinator\n"
            "runs with --public-status.\n"
            "exit status: 0 written, 1 error, 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static int export_model(sl__cli *c, int64_t task, const char *version, const char *format,
                        const char *output)
{
    char path[160];
    sl_client_download_state d;
    sl_client_response r;
    int rc;
    snprintf(path, sizeof path, "/v1/models/%s?task=%lld%s", version, (long long)task,
             strcmp(format, "safetensors") == 0 ? "&format=safetensors" : "");
    sl_client_download_state_init(&d);
    memset(&r, 0, sizeof r);
    rc = sl_client_download(c->client, path, NULL, &d, &r);
    if (rc != SL_OK) {
        sl_client_download_state_reset(&d);
        return sl__cli_error(c, "GET %s: %s", path, sl_strerror(rc));
    }
    if (r.status != 200 || !d.complete) {
        cJSON *doc = r.body ? cJSON_ParseWithLength((const char *)r.body, r.body_len) : NULL;
        const cJSON *detail = cJSON_GetObjectItemCaseSensitive(doc, "detail");
        sl__cli_error(c, "GET %s: HTTP %ld%s%s%s", path, r.status,
                      cJSON_IsString(detail) ? ": " : "",
                      cJSON_IsString(detail) ? detail->valuestring : "",
                      r.status == 401
                          ? (c->token_file ? " (is the token right?)" : " (pass --token-file FILE)")
                          : "");
        cJSON_Delete(doc);
        sl_client_response_free(&r);
        sl_client_download_state_reset(&d);
        return SL__CLI_ERROR;
    }
    if (strcmp(output, "-") == 0) {
        rc = fwrite(d.data, 1, d.len, stdout) == d.len && fflush(stdout) == 0 ? SL_OK : SL_EIO;
    } else {
        rc = sl_fs_write_atomic(output, d.data, d.len, 0644);
    }
    if (rc != SL_OK) {
        sl__cli_error(c, "cannot write %s: %s", output, sl_strerror(rc));
    } else if (strcmp(output, "-") != 0) {
        char size[32];
        sl__cli_bytes((double)d.len, size, sizeof size);
        fprintf(stderr, "wrote %s: task %lld, version %s, %s, %zu bytes (%s)\n", output,
                (long long)task, version, format, d.len, size);
    }
    sl_client_response_free(&r);
    sl_client_download_state_reset(&d);
    return rc == SL_OK ? SL__CLI_OK : SL__CLI_ERROR;
}

int sl__cli_model(int argc, char **argv)
{
    sl__cli c = {"model export", NULL, NULL, NULL, 5, NULL};
    const char *format = NULL, *output = NULL, *version = "latest";
    int64_t task = 0, number;
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
        rc = export_model(&c, task, version, format, output);
    sl__cli_close(&c);
    return rc;
}
