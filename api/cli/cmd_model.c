/*
 * cmd_model.c - `starling model export`: save a model version as
 * safetensors (loads in PyTorch: safetensors.torch.load_file), as the
 * codec's full-model frame (codecs/FORMAT.md), or as ONNX (the version's
 * safetensors and the task's model spec, GET /v1/tasks/{id}/model-spec or
 * --spec FILE, through sl_onnx_export), from
 * GET /v1/models/{version}?task=N[&format=safetensors]. The download goes
 * in byte ranges with a progress display (fetch.c) and is checked against
 * the strong ETag (SHA-256);
 * the file is replaced atomically, so an interrupted export leaves the old
 * file (or none), never a partial one.
 * `starling model import`: an ONNX file (torch.onnx.export) to a model spec
 * and its initial parameters, offline (sl_onnx_import). Both ONNX commands
 * exist when the build has device/onnx (protobuf-c; SL_HAVE_ONNX).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/nn.h"
#ifdef SL_HAVE_ONNX
#include "starling/onnx.h"
#endif

#define ONNX_MAX ((size_t)1 << 30)  /* bytes of a model file */
#define SPEC_MAX ((size_t)16 << 20) /* bytes of a spec (sl_spec_parse's limit) */

static int model_usage(FILE *out)
{
    fprintf(out, "usage: starling model export [options] --format safetensors|frame|onnx -o FILE\n"
                 "       starling model import MODEL.onnx [-o SPEC.json] [--params-out FILE]\n"
                 "                             [--name N] [--loss L]\n"
                 "export: save a model version of a task (GET /v1/models/{version}).\n"
                 "  --format F       safetensors (fp32 tensors in layout order, for PyTorch),\n"
                 "                   frame (the coordinator's full-model frame, codecs/FORMAT.md)\n"
                 "                   or onnx (an inference graph, opset 17: the version's weights\n"
                 "                   in the task's model spec)\n"
                 "  -o, --output F   the file to write (replaced atomically; - for stdout)\n"
                 "  --spec F         onnx: the model spec (default: the task's,\n"
                 "                   GET /v1/tasks/{id}/model-spec)\n"
                 "  --task N         the task (default: the only one)\n"
                 "  --version V      a version number or latest (default latest)\n"
                 "  --chunk BYTES    download in ranges of this size (default 1048576); each is\n"
                 "                   retried alone, so a link that drops loses one range at "
                 "most\n" SL__CLI_CONN_HELP "  --help           this text\n"
                 "The frame format needs the admin token; safetensors too unless the coordinator\n"
                 "runs with --public-status. Progress goes to stderr: a bar on a terminal, else a\n"
                 "line at each quarter (\"model latest (frame): 25%% (1.0 MB of 4.0 MB)\").\n"
                 "import: turn an ONNX model (torch.onnx.export, opsets 13-17, TRAINING mode\n"
                 "keeps the state_dict's names) into a model spec (device/nn/MODEL_SPEC.md) and\n"
                 "print what it holds: ops, parameters, activation memory and FLOPs per sample.\n"
                 "Offline: no coordinator.\n"
                 "  -o, --output F   the spec to write (replaced atomically; default -: stdout,\n"
                 "                   the report then goes to stderr)\n"
                 "  --params-out F   the initial parameters: F.safetensors, else the full-model\n"
                 "                   frame (codecs/FORMAT.md)\n"
                 "  --name N         the spec's name (default: the file's, without .onnx)\n"
                 "  --loss L         cross_entropy, bce_with_logits, mse, l1 or huber (default:\n"
                 "                   cross_entropy for a vector of 2+ outputs, else mse)\n"
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

#ifdef SL_HAVE_ONNX
/* ---- safetensors (u64 LE header length, JSON header, raw LE fp32) ------------------------ */

static int write_safetensors(const sl_layout *layout, const float *params, const char *path)
{
    cJSON *hdr = cJSON_CreateObject(), *meta;
    char *text = NULL;
    uint8_t *out = NULL;
    size_t hlen, padded, total, n = (size_t)sl_layout_params(layout);
    int rc = SL_ENOMEM;
    if (hdr == NULL || (meta = cJSON_AddObjectToObject(hdr, "__metadata__")) == NULL)
        goto done;
    cJSON_AddStringToObject(meta, "format", "pt");
    for (size_t i = 0; i < sl_layout_tensors(layout); i++) {
        const sl_tensor_desc *t = sl_layout_tensor(layout, i);
        cJSON *entry = cJSON_AddObjectToObject(hdr, t->name), *shape, *offs;
        if (entry == NULL)
            goto done;
        cJSON_AddStringToObject(entry, "dtype", "F32");
        shape = cJSON_AddArrayToObject(entry, "shape");
        offs = cJSON_AddArrayToObject(entry, "data_offsets");
        if (shape == NULL || offs == NULL)
            goto done;
        for (uint32_t d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(t->offset * 4)));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)((t->offset + t->count) * 4)));
    }
    if ((text = cJSON_PrintUnformatted(hdr)) == NULL)
        goto done;
    hlen = strlen(text);
    padded = (hlen + 7) & ~(size_t)7;
    total = 8 + padded + n * 4;
    if ((out = malloc(total)) == NULL)
        goto done;
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    memcpy(out + 8, text, hlen);
    memset(out + 8 + hlen, ' ', padded - hlen);
    for (size_t k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &params[k], 4);
        for (int b = 0; b < 4; b++)
            out[8 + padded + 4 * k + (size_t)b] = (uint8_t)(u >> (8 * b));
    }
    rc = sl_fs_write_atomic(path, out, total, 0644);
done:
    free(out);
    free(text);
    cJSON_Delete(hdr);
    return rc;
}

/* The tensors of a safetensors file, by the layout's names, into @params. */
static int read_safetensors(const uint8_t *data, size_t len, const sl_layout *layout, float *params,
                            char *why, size_t cap)
{
    uint64_t hlen = 0;
    cJSON *hdr;
    int rc = SL_OK;
    for (int b = 7; b >= 0 && len >= 8; b--)
        hlen = hlen << 8 | data[b];
    if (len < 8 || hlen > len - 8 ||
        (hdr = cJSON_ParseWithLength((const char *)data + 8, (size_t)hlen)) == NULL) {
        snprintf(why, cap, "not a safetensors file");
        return SL_ECORRUPT;
    }
    for (size_t i = 0; i < sl_layout_tensors(layout) && rc == SL_OK; i++) {
        const sl_tensor_desc *t = sl_layout_tensor(layout, i);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, t->name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        double a = cJSON_GetNumberValue(cJSON_GetArrayItem(offs, 0));
        double b = cJSON_GetNumberValue(cJSON_GetArrayItem(offs, 1));
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0 || !(a >= 0) ||
            b - a != (double)t->count * 4 || b > (double)(len - 8 - hlen)) {
            snprintf(why, cap,
                     "the model has no fp32 tensor %s of %llu values that the spec "
                     "names",
                     t->name, (unsigned long long)t->count);
            rc = SL_ELAYOUT;
            break;
        }
        for (uint64_t k = 0; k < t->count; k++) {
            const uint8_t *p = data + 8 + hlen + (size_t)a + 4 * k;
            uint32_t u =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&params[t->offset + k], &u, 4);
        }
    }
    cJSON_Delete(hdr);
    return rc;
}

/* The task's model spec: --spec FILE, else GET /v1/tasks/{id}/model-spec. */
static int fetch_spec(sl__cli *c, int64_t task, const char *spec_file, sl_spec **spec)
{
    char path[96], err[320];
    void *text = NULL;
    size_t len = 0;
    int rc;
    if (spec_file != NULL) {
        rc = sl_fs_read_file(spec_file, SPEC_MAX, &text, &len);
        if (rc != SL_OK)
            return sl__cli_error(c, "cannot read %s: %s", spec_file, sl_strerror(rc));
    } else {
        sl_client_response r;
        memset(&r, 0, sizeof r);
        snprintf(path, sizeof path, "/v1/tasks/%lld/model-spec", (long long)task);
        rc = sl_client_request(c->client, "GET", path, NULL, 0, NULL, NULL, &r);
        if (rc != SL_OK)
            return sl__cli_error(c, "cannot reach %s: %s", c->url, sl_strerror(rc));
        if (r.status == 404 || r.status < 200 || r.status > 299) {
            long status = r.status;
            sl_client_response_free(&r);
            if (status == 404)
                return sl__cli_error(c,
                                     "task %lld has no model spec (GET %s: 404); pass "
                                     "--spec FILE",
                                     (long long)task, path);
            return sl__cli_error(c, "GET %s: HTTP %ld", path, status);
        }
        text = malloc(r.body_len + 1);
        if (text != NULL) {
            memcpy(text, r.body, r.body_len);
            len = r.body_len;
        }
        sl_client_response_free(&r);
        if (text == NULL)
            return sl__cli_error(c, "out of memory");
    }
    rc = sl_spec_parse(text, len, spec, err, sizeof err);
    free(text);
    if (rc != SL_OK)
        return sl__cli_error(c, "the model spec%s%s is refused: %s", spec_file ? " " : "",
                             spec_file ? spec_file : "", err);
    return 0;
}

static int export_onnx(sl__cli *c, int64_t task, const char *version, const char *spec_file,
                       const char *output, size_t chunk)
{
    char path[160], label[96], sha[65], why[320] = "";
    uint8_t *data = NULL;
    size_t len = 0, olen = 0;
    sl_spec *spec = NULL;
    float *params = NULL;
    void *onnx = NULL;
    int rc = SL__CLI_ERROR, st;
    if (fetch_spec(c, task, spec_file, &spec) != 0)
        return SL__CLI_ERROR;
    snprintf(path, sizeof path, "/v1/models/%s?task=%lld&format=safetensors", version,
             (long long)task);
    snprintf(label, sizeof label, "model %s (safetensors)", version);
    if (sl__cli_fetch(c, path, label, chunk, (size_t)1 << 30, &data, &len, sha) != 0)
        goto done;
    params = malloc((size_t)sl_layout_params(sl_spec_layout(spec)) * sizeof *params + 1);
    if (params == NULL) {
        sl__cli_error(c, "out of memory");
        goto done;
    }
    if (read_safetensors(data, len, sl_spec_layout(spec), params, why, sizeof why) != SL_OK) {
        sl__cli_error(c, "version %s does not fit the spec: %s", version, why);
        goto done;
    }
    st = sl_onnx_export(spec, params, &onnx, &olen, why, sizeof why);
    if (st != SL_OK) {
        sl__cli_error(c, "%s", why);
        goto done;
    }
    if (strcmp(output, "-") == 0)
        st = fwrite(onnx, 1, olen, stdout) == olen && fflush(stdout) == 0 ? SL_OK : SL_EIO;
    else
        st = sl_fs_write_atomic(output, onnx, olen, 0644);
    if (st != SL_OK) {
        sl__cli_error(c, "cannot write %s: %s", output, sl_strerror(st));
        goto done;
    }
    if (strcmp(output, "-") != 0)
        fprintf(stderr, "wrote %s: task %lld, version %s, onnx (opset 17), %zu bytes\n", output,
                (long long)task, version, olen);
    rc = SL__CLI_OK;
done:
    free(onnx);
    free(params);
    free(data);
    sl_spec_free(spec);
    return rc;
}

/* The spec's name from the file's: "models/lenet.onnx" -> "lenet" (else "imported"). */
static void name_from_path(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    size_t n;
    base = base ? base + 1 : path;
    n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".onnx") == 0)
        n -= 5;
    if (n == 0 || n >= cap || n > 63)
        n = 0;
    for (size_t k = 0; k < n; k++)
        if (!isprint((unsigned char)base[k]) || base[k] == '"' || base[k] == '\\')
            n = 0;
    snprintf(out, cap, "%.*s", (int)(n ? n : 8), n ? base : "imported");
}

/* Replace the spec's loss (the importer writes "loss" and "metrics" last). */
static int set_loss(char **json, size_t *len, const char *loss)
{
    const char *metrics = strcmp(loss, "cross_entropy") == 0 || strcmp(loss, "bce_with_logits") == 0
                              ? "[\"accuracy\"]"
                              : "[\"mae\", \"rmse\"]";
    char *at = NULL, *p = *json, *out;
    size_t n;
    while ((p = strstr(p, "\n \"loss\": ")) != NULL)
        at = p++;
    if (at == NULL)
        return SL_ESPEC;
    n = (size_t)(at - *json);
    out = malloc(n + 128);
    if (out == NULL)
        return SL_ENOMEM;
    memcpy(out, *json, n);
    *len = n + (size_t)snprintf(out + n, 128, "\n \"loss\": {\"op\": \"%s\"},\n \"metrics\": %s}\n",
                                loss, metrics);
    free(*json);
    *json = out;
    return SL_OK;
}

static void print_report(FILE *f, const char *file, const char *json, size_t len,
                         const sl_spec *spec, const sl_onnx_report *r)
{
    char size[32];
    cJSON *doc = cJSON_ParseWithLength(json, len), *p, *nd;
    int renamed = 0;
    fprintf(f, "%s: %zu ONNX nodes -> %zu spec nodes\n", file, r->nodes_in, r->nodes_out);
    fprintf(f, "  ops:          %s\n", r->ops);
    sl__cli_bytes((double)r->param_floats * 4, size, sizeof size);
    fprintf(f, "  parameters:   %zu tensors, %llu floats (%s)\n", r->params,
            (unsigned long long)r->param_floats, size);
    sl__cli_bytes((double)r->activation_floats_per_sample * 4, size, sizeof size);
    fprintf(f, "  activations:  %llu floats per sample (%s)\n",
            (unsigned long long)r->activation_floats_per_sample, size);
    fprintf(f, "  FLOPs:        %llu per sample (forward)\n",
            (unsigned long long)r->flops_per_sample);
    fprintf(f, "  loss:         %s\n",
            sl_spec_loss_kind(spec) == SL_SPEC_CROSS_ENTROPY     ? "cross_entropy"
            : sl_spec_loss_kind(spec) == SL_SPEC_BCE_WITH_LOGITS ? "bce_with_logits"
            : sl_spec_loss_kind(spec) == SL_SPEC_MSE             ? "mse"
            : sl_spec_loss_kind(spec) == SL_SPEC_L1              ? "l1"
                                                                 : "huber");
    /* tensors the exporter renamed (EVAL exports: BatchNorm folded into Conv) */
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "params"))
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
        if (name == NULL || strncmp(name, "onnx::", 6) != 0)
            continue;
        cJSON_ArrayForEach(nd, cJSON_GetObjectItemCaseSensitive(doc, "nodes"))
        {
            const cJSON *in;
            int k = 0;
            cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(nd, "inputs"))
            {
                const char *node =
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(nd, "name"));
                if (cJSON_IsString(in) && strcmp(in->valuestring, name) == 0)
                    fprintf(f, "%s%s = input %d of %s (%s)\n",
                            renamed++ ? "                " : "  renamed:      ", name, k,
                            node ? node : "?",
                            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(nd, "op")));
                k++;
            }
        }
    }
    if (renamed)
        fprintf(f, "  (an EVAL export: folded and renamed tensors; export in TRAINING mode to keep "
                   "the state_dict)\n");
    cJSON_Delete(doc);
}

static int import_model(int argc, char **argv)
{
    sl__cli c = {"model import", NULL, NULL, NULL, 0, NULL};
    const char *input = NULL, *output = "-", *params_out = NULL, *name = NULL, *loss = NULL;
    static const char *const losses[] = {"cross_entropy", "bce_with_logits", "mse", "l1", "huber"};
    char spec_name[64], err[1024] = "";
    void *onnx = NULL;
    char *json = NULL;
    float *params = NULL;
    size_t len = 0, jlen = 0, np = 0;
    sl_onnx_report report;
    sl_spec *spec = NULL;
    FILE *info;
    int rc = SL__CLI_ERROR, st;
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        int o;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return model_usage(stdout);
        if ((o = sl__cli_opt(argc, argv, &i, "-o", &v)) != 0 ||
            (o = sl__cli_opt(argc, argv, &i, "--output", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            output = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--params-out", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            params_out = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--name", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            name = v;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--loss", &v)) != 0) {
            int known = 0;
            if (o < 0)
                return SL__CLI_USAGE;
            for (size_t k = 0; k < 5; k++)
                known |= strcmp(v, losses[k]) == 0;
            if (!known)
                return sl__cli_usage_error(&c,
                                           "--loss: \"%s\" is not one of cross_entropy, "
                                           "bce_with_logits, mse, l1, huber",
                                           v);
            loss = v;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        } else if (input == NULL) {
            input = argv[i];
        } else {
            return sl__cli_usage_error(&c, "one model file (got \"%s\" too)", argv[i]);
        }
    }
    if (input == NULL)
        return sl__cli_usage_error(&c, "MODEL.onnx is required");
    if (output[0] == '\0' || (params_out != NULL && params_out[0] == '\0'))
        return sl__cli_usage_error(&c, "an empty file name");
    if (name != NULL)
        snprintf(spec_name, sizeof spec_name, "%s", name);
    else
        name_from_path(input, spec_name, sizeof spec_name);
    st = sl_fs_read_file(input, ONNX_MAX, &onnx, &len);
    if (st != SL_OK)
        return sl__cli_error(&c, "cannot read %s: %s", input, sl_strerror(st));
    st = sl_onnx_import(onnx, len, spec_name, &json, &jlen, &params, &np, &report, err, sizeof err);
    if (st != SL_OK) {
        sl__cli_error(&c, "%s: %s", input, err);
        goto done;
    }
    if (loss != NULL && (st = set_loss(&json, &jlen, loss)) != SL_OK) {
        sl__cli_error(&c, "%s", sl_strerror(st));
        goto done;
    }
    st = sl_spec_parse(json, jlen, &spec, err, sizeof err);
    if (st != SL_OK) {
        sl__cli_error(&c, "%s: the spec is refused%s: %s", input, loss ? " with --loss" : "", err);
        goto done;
    }
    info = strcmp(output, "-") == 0 ? stderr : stdout;
    print_report(info, input, json, jlen, spec, &report);
    if (strcmp(output, "-") == 0)
        st = fwrite(json, 1, jlen, stdout) == jlen && fflush(stdout) == 0 ? SL_OK : SL_EIO;
    else
        st = sl_fs_write_atomic(output, json, jlen, 0644);
    if (st != SL_OK) {
        sl__cli_error(&c, "cannot write %s: %s", output, sl_strerror(st));
        goto done;
    }
    if (strcmp(output, "-") != 0)
        fprintf(info, "wrote %s (%zu bytes)\n", output, jlen);
    if (params_out != NULL) {
        size_t n = strlen(params_out);
        if (n > 12 && strcmp(params_out + n - 12, ".safetensors") == 0) {
            st = write_safetensors(sl_spec_layout(spec), params, params_out);
        } else {
            void *frame = NULL;
            size_t flen = 0;
            st = sl_frame_encode_model(sl_spec_layout(spec), params, 0, 3, &frame, &flen);
            if (st == SL_OK)
                st = sl_fs_write_atomic(params_out, frame, flen, 0644);
            free(frame);
        }
        if (st != SL_OK) {
            sl__cli_error(&c, "cannot write %s: %s", params_out, sl_strerror(st));
            goto done;
        }
        fprintf(info, "wrote %s (%zu parameters)\n", params_out, np);
    }
    rc = SL__CLI_OK;
done:
    sl_spec_free(spec);
    free(json);
    free(params);
    free(onnx);
    return rc;
}
#endif /* SL_HAVE_ONNX */

int sl__cli_model(int argc, char **argv)
{
    sl__cli c = {"model export", NULL, NULL, NULL, 5, NULL};
    const char *format = NULL, *output = NULL, *version = "latest", *spec_file = NULL;
    int64_t task = 0, number, chunk = SL__CLI_CHUNK;
    int rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return model_usage(argc < 2 ? stderr : stdout);
    if (strcmp(argv[1], "import") == 0) {
#ifdef SL_HAVE_ONNX
        return import_model(argc, argv);
#else
        c.cmd = "model import";
        return sl__cli_error(&c, "this build has no ONNX support (it needs protobuf-c: "
                                 "apt-get install libprotobuf-c-dev protobuf-c-compiler "
                                 "libonnx-dev, then rebuild)");
#endif
    }
    if (strcmp(argv[1], "export") != 0) {
        c.cmd = "model";
        return sl__cli_usage_error(&c, "unknown subcommand \"%s\" (there are: export, import)",
                                   argv[1]);
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
        } else if ((o = sl__cli_opt(argc, argv, &i, "--spec", &v)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
            spec_file = v;
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
    if (format == NULL || (strcmp(format, "safetensors") != 0 && strcmp(format, "frame") != 0 &&
                           strcmp(format, "onnx") != 0))
        return sl__cli_usage_error(&c, "--format safetensors, frame or onnx is required");
#ifndef SL_HAVE_ONNX
    if (strcmp(format, "onnx") == 0)
        return sl__cli_error(&c, "this build has no ONNX support (it needs protobuf-c)");
#endif
    if (spec_file != NULL && strcmp(format, "onnx") != 0)
        return sl__cli_usage_error(&c, "--spec goes with --format onnx");
    if (output == NULL || output[0] == '\0')
        return sl__cli_usage_error(&c, "-o FILE is required");
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    rc = sl__cli_pick_task(&c, task, &task);
    if (rc == 0 && strcmp(format, "onnx") == 0) {
#ifdef SL_HAVE_ONNX
        rc = export_onnx(&c, task, version, spec_file, output, (size_t)chunk);
#endif
    } else if (rc == 0) {
        rc = export_model(&c, task, version, format, output, (size_t)chunk);
    }
    sl__cli_close(&c);
    return rc;
}
