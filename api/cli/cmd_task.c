/*
 * cmd_task.c - `starling task create task.json`: make a task from one file
 * (POST /v1/tasks).
 *
 * The task file is a JSON object:
 *   "config"       object, required: the task configuration, keys of
 *                  sl_task_config (coordinator/include/starling/round.h),
 *                  e.g. {"name": "fmnist", "rounds": 50, "target": 20,
 *                  "quorum": 0.8, "values": "int8", "density": 0.01}
 *   "layout"       string: the tensor layout, lines of "name d0 d1 ..."
 *                  (codecs/FORMAT.md), or
 *   "layout_file"  string: a file holding that text
 *   "model"        string: the initial full-model frame (codecs), base64, or
 *   "model_file"   string: a file holding the frame's bytes, or
 *   "init"         object {"model": "lenet5", "seed": 1}: a fresh model of the
 *                  registry (device/nn: logreg, mlp, lenet5, cnn), or
 *                  {"spec_file": "model.json", "seed": 1}: of a model spec
 *                  (device/nn/MODEL_SPEC.md), initialised as its spec says
 *                  (PyTorch's defaults), deterministically by seed (default
 *                  1); gives the layout, the initial model and the task's
 *                  model spec
 *   "onnx_file"    string: an ONNX file exported from PyTorch (opsets 13-17):
 *                  its graph becomes the task's model spec and its
 *                  initializers the initial model (as `starling model
 *                  import`); "loss" (optional) names the spec's loss
 *                  (cross_entropy, the default for a vector output;
 *                  bce_with_logits, mse, l1, huber)
 *   "model_spec"   object, or "model_spec_file": the task's model spec beside
 *                  layout and model (its params must be the layout's)
 *   "data_contract" object, or "data_contract_file": what a sample is, for
 *                  every device and evaluator (device/data/DATA_CONTRACT.md);
 *                  goes with any of the forms above
 * Exactly one of layout / layout_file and one of model / model_file (with an
 * optional model spec), or init alone, or onnx_file alone. Agents train the
 * task's model spec; a task without one trains the registry model its layout
 * names.
 * Relative file names are taken from the task file's directory. The
 * coordinator answers with the task id (the same id again when a task with
 * this name and configuration exists; 409 when the name has another one).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/contract.h"
#include "starling/nn.h"
#ifdef SL_HAVE_ONNX
#include "starling/onnx.h"
#endif

#define TASK_FILE_MAX  (1u << 20)
#define LAYOUT_MAX     (4u << 20)
#define MODEL_FILE_MAX (192u << 20) /* base64 of it stays under the body limits we know of */

static int task_usage(FILE *out)
{
    fprintf(out,
            "usage: starling task create [options] TASK.json\n"
            "Create a task on the coordinator from one JSON file (POST /v1/tasks):\n"
            "  {\"config\": {...},                 the configuration (keys of sl_task_config,\n"
            "                                    coordinator/include/starling/round.h)\n"
            "   \"layout\": \"w 4 8\\nb 4\\n\",      the tensor layout text, or\n"
            "   \"layout_file\": \"model.layout\",   a file with it\n"
            "   \"model\": \"<base64>\",             the initial model frame in base64, or\n"
            "   \"model_file\": \"model.frame\"}     a file with the frame's bytes\n"
            "   \"model_spec\": {...}               optional: the model spec agents train\n"
            "                                    (device/nn/MODEL_SPEC.md), or model_spec_file\n"
            "or, instead of layout and model, a fresh registry model (logreg, mlp, lenet5,\n"
            "cnn) or model spec, initialised as PyTorch does, deterministically by seed:\n"
            "   \"init\": {\"model\": \"lenet5\", \"seed\": 1}\n"
            "   \"init\": {\"spec_file\": \"model.json\", \"seed\": 1}\n"
            "or an ONNX file exported from PyTorch (its graph and initial weights):\n"
            "   \"onnx_file\": \"model.onnx\", \"loss\": \"cross_entropy\"\n"
            "and, with any of them, optionally, what a sample is for every device:\n"
            "   \"data_contract\": {...}            (device/data/DATA_CONTRACT.md), or\n"
            "   \"data_contract_file\": \"data.json\"\n"
            "Relative file names are from TASK.json's directory. Prints the task id.\n"
            "  --json           print the API's answer (TaskCreated) as is\n" SL__CLI_CONN_HELP
            "  --help           this text\n"
            "exit status: 0 created (or the same task existed), 1 error (refused: the\n"
            "coordinator's reason is printed), 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

/* @name relative to the directory of @base (a path of the task file). */
static char *beside(const char *base, const char *name)
{
    const char *slash = strrchr(base, '/');
    size_t dir = slash && name[0] != '/' ? (size_t)(slash - base) + 1 : 0;
    size_t n = strlen(name);
    char *path = malloc(dir + n + 1);
    if (path == NULL)
        return NULL;
    memcpy(path, base, dir);
    memcpy(path + dir, name, n + 1);
    return path;
}

static int read_beside(sl__cli *c, const char *task_file, const char *name, size_t max, void **data,
                       size_t *len)
{
    char *path = beside(task_file, name);
    int rc;
    if (path == NULL)
        return sl__cli_error(c, "out of memory");
    rc = sl_fs_read_file(path, max, data, len);
    if (rc != SL_OK)
        sl__cli_error(c, "cannot read %s: %s", path, sl_strerror(rc));
    free(path);
    return rc == SL_OK ? 0 : SL__CLI_ERROR;
}

/* The one of @inline_key / @file_key that is set: 1 inline, 2 file; else an error. */
static int which(sl__cli *c, const cJSON *doc, const char *inline_key, const char *file_key)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, inline_key);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(doc, file_key);
    if ((a != NULL) == (b != NULL)) {
        sl__cli_error(c, "the task file needs exactly one of \"%s\" and \"%s\"", inline_key,
                      file_key);
        return 0;
    }
    if (!cJSON_IsString(a ? a : b)) {
        sl__cli_error(c, "\"%s\" must be a string", a ? inline_key : file_key);
        return 0;
    }
    return a ? 1 : 2;
}

/* "init": {"model", "seed"}: the layout and the base64 initial frame of a fresh model. */
/* The layout, the base64 frame of @params and the model spec of @spec into @req. */
static int add_model(sl__cli *c, const sl_spec *spec, const float *params, cJSON *req)
{
    const sl_layout *lay = sl_spec_layout(spec);
    void *frame = NULL;
    size_t len = 0, need, cap, tlen;
    char *layout = NULL, *b64 = NULL;
    const char *text = sl_spec_text(spec, &tlen);
    cJSON *doc = cJSON_ParseWithLength(text, tlen);
    int rc = SL__CLI_ERROR, st = sl_frame_encode_model(lay, params, 1, 3, &frame, &len);
    if (st != SL_OK) {
        sl__cli_error(c, "model %s: %s", sl_spec_name(spec), sl_strerror(st));
        goto done;
    }
    need = sl_layout_format(lay, NULL, 0);
    layout = malloc(need + 1);
    cap = (len + 2) / 3 * 4 + 1;
    b64 = malloc(cap);
    if (doc == NULL || layout == NULL || b64 == NULL ||
        sl_base64_encode(frame, len, b64, cap) != SL_OK)
        goto oom;
    sl_layout_format(lay, layout, need + 1);
    if (cJSON_AddStringToObject(req, "layout", layout) == NULL ||
        cJSON_AddStringToObject(req, "model", b64) == NULL ||
        !cJSON_AddItemToObject(req, "model_spec", doc))
        goto oom;
    doc = NULL;
    rc = 0;
    goto done;
oom:
    sl__cli_error(c, "out of memory");
done:
    cJSON_Delete(doc);
    free(b64);
    free(layout);
    free(frame);
    return rc;
}

/* "<key>" (an object) or "<key>_file" (a JSON file): the document's text into *@text, *@len
 * (malloc'd); 0 with *@text NULL when the task file has neither. */
static int doc_text(sl__cli *c, const char *task_file, const cJSON *doc, const char *key,
                    char **text, size_t *len)
{
    char file_key[64];
    const cJSON *inl = cJSON_GetObjectItemCaseSensitive(doc, key), *file;
    void *bytes = NULL;
    snprintf(file_key, sizeof file_key, "%s_file", key);
    file = cJSON_GetObjectItemCaseSensitive(doc, file_key);
    *text = NULL;
    if (inl == NULL && file == NULL)
        return 0;
    if (inl != NULL && file != NULL)
        return sl__cli_error(c, "the task file has \"%s\" and \"%s\": keep one", key, file_key);
    if (inl != NULL && !cJSON_IsObject(inl))
        return sl__cli_error(c, "\"%s\" must be an object", key);
    if (file != NULL && !cJSON_IsString(file))
        return sl__cli_error(c, "\"%s\" must be a string", file_key);
    if (file != NULL) {
        if (read_beside(c, task_file, file->valuestring, 16u << 20, &bytes, len) != 0)
            return SL__CLI_ERROR;
        *text = bytes;
        return 0;
    }
    if ((*text = cJSON_PrintUnformatted(inl)) == NULL)
        return sl__cli_error(c, "out of memory");
    *len = strlen(*text);
    return 0;
}

/* The checked document @text as the request's object @key (takes @text). */
static int put_doc(sl__cli *c, char *text, size_t len, const char *key, cJSON *req)
{
    cJSON *obj = cJSON_ParseWithLength(text, len);
    free(text);
    if (obj == NULL || !cJSON_AddItemToObject(req, key, obj)) {
        cJSON_Delete(obj);
        return sl__cli_error(c, "out of memory");
    }
    return 0;
}

/* "model_spec" / "model_spec_file" beside layout and model: checked here (the coordinator
 * checks only its params against the layout), sent as an object. */
static int add_spec(sl__cli *c, const char *task_file, const cJSON *doc, cJSON *req)
{
    size_t len = 0;
    char *text, err[256];
    sl_spec *spec = NULL;
    int st;
    if (doc_text(c, task_file, doc, "model_spec", &text, &len) != 0)
        return SL__CLI_ERROR;
    if (text == NULL)
        return 0;
    st = sl_spec_parse(text, len, &spec, err, sizeof err);
    if (st != SL_OK) {
        sl__cli_error(c, "the model spec: %s", err[0] ? err : sl_strerror(st));
        free(text);
        return SL__CLI_ERROR;
    }
    sl_spec_free(spec);
    return put_doc(c, text, len, "model_spec", req);
}

/* "data_contract" / "data_contract_file": what a sample is (device/data/DATA_CONTRACT.md);
 * checked here as the coordinator checks it, sent as an object. */
static int add_contract(sl__cli *c, const char *task_file, const cJSON *doc, cJSON *req)
{
    size_t len = 0;
    char *text, err[400];
    sl_contract *dc = NULL;
    int st;
    if (doc_text(c, task_file, doc, "data_contract", &text, &len) != 0)
        return SL__CLI_ERROR;
    if (text == NULL)
        return 0;
    st = sl_contract_parse(text, len, &dc, err, sizeof err);
    sl_contract_free(dc);
    if (st != SL_OK) {
        sl__cli_error(c, "the data contract: %s", err[0] ? err : sl_strerror(st));
        free(text);
        return SL__CLI_ERROR;
    }
    return put_doc(c, text, len, "data_contract", req);
}

/* "onnx_file" (and "loss"): the spec and initial model of a PyTorch export. */
static int add_onnx(sl__cli *c, const char *task_file, const cJSON *doc, cJSON *req)
{
#ifdef SL_HAVE_ONNX
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(doc, "onnx_file");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(doc, "loss");
    void *bytes = NULL;
    size_t len = 0, slen = 0, np = 0;
    char *text = NULL, err[1024], *path, name[64];
    float *params = NULL;
    sl_spec *spec = NULL;
    sl_onnx_report rep;
    int rc = SL__CLI_ERROR, st;
    if (!cJSON_IsString(file))
        return sl__cli_error(c, "\"onnx_file\" must be a string");
    if (loss != NULL && !cJSON_IsString(loss))
        return sl__cli_error(c, "\"loss\" must be a string");
    if (read_beside(c, task_file, file->valuestring, 1u << 30, &bytes, &len) != 0)
        return SL__CLI_ERROR;
    path = beside(task_file, file->valuestring);
    {
        /* the spec's name: the file's, without directory and extension */
        const char *base = strrchr(file->valuestring, '/');
        size_t k = 0;
        base = base ? base + 1 : file->valuestring;
        for (; base[k] != '\0' && k < sizeof name - 1 && strcmp(base + k, ".onnx") != 0; k++)
            name[k] = (isalnum((unsigned char)base[k]) || base[k] == '-' || base[k] == '.')
                          ? base[k]
                          : '_';
        name[k] = '\0';
    }
    st = sl_onnx_import(bytes, len, name, &text, &slen, &params, &np, &rep, err, sizeof err);
    if (st != SL_OK) {
        sl__cli_error(c, "%s: %s", path ? path : file->valuestring, err[0] ? err : sl_strerror(st));
        goto done;
    }
    if (loss != NULL) {
        /* the importer's default loss replaced: the spec is re-read and checked */
        cJSON *sd = cJSON_ParseWithLength(text, slen), *lo = cJSON_CreateObject();
        char *again;
        if (sd == NULL || lo == NULL ||
            cJSON_AddStringToObject(lo, "op", loss->valuestring) == NULL ||
            !cJSON_ReplaceItemInObjectCaseSensitive(sd, "loss", lo)) {
            cJSON_Delete(sd);
            cJSON_Delete(lo);
            sl__cli_error(c, "out of memory");
            goto done;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(sd, "metrics");
        {
            const char *m = strcmp(loss->valuestring, "cross_entropy") == 0 ||
                                    strcmp(loss->valuestring, "bce_with_logits") == 0
                                ? "accuracy"
                                : "mae";
            cJSON *ms = cJSON_AddArrayToObject(sd, "metrics");
            if (ms != NULL)
                cJSON_AddItemToArray(ms, cJSON_CreateString(m));
        }
        again = cJSON_PrintUnformatted(sd);
        cJSON_Delete(sd);
        if (again == NULL) {
            sl__cli_error(c, "out of memory");
            goto done;
        }
        free(text);
        text = again;
        slen = strlen(text);
    }
    st = sl_spec_parse(text, slen, &spec, err, sizeof err);
    if (st != SL_OK) {
        sl__cli_error(c, "%s: the imported model spec: %s", path ? path : file->valuestring, err);
        goto done;
    }
    if (np != (size_t)sl_layout_params(sl_spec_layout(spec))) {
        sl__cli_error(c, "%s: %zu initial values for %llu parameters", file->valuestring, np,
                      (unsigned long long)sl_layout_params(sl_spec_layout(spec)));
        goto done;
    }
    fprintf(stderr, "imported %s: %s, %zu parameters in %zu tensors, %zu nodes\n",
            path ? path : file->valuestring, rep.ops, (size_t)rep.param_floats, rep.params,
            rep.nodes_out);
    rc = add_model(c, spec, params, req);
done:
    sl_spec_free(spec);
    free(path);
    free(params);
    free(text);
    free(bytes);
    return rc;
#else
    (void)task_file, (void)doc, (void)req;
    return sl__cli_error(c, "this build of starling has no ONNX import (protobuf-c)");
#endif
}

static int add_init(sl__cli *c, const char *task_file, const cJSON *init, cJSON *req)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(init, "model");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(init, "spec_file");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(init, "seed");
    sl_model *m = NULL;
    sl_spec *spec = NULL;
    float *params = NULL;
    int rc = SL__CLI_ERROR, st;
    if (!cJSON_IsObject(init) || (cJSON_IsString(name) == cJSON_IsString(file)) ||
        (name != NULL && !cJSON_IsString(name)) || (file != NULL && !cJSON_IsString(file)))
        return sl__cli_error(c, "\"init\" must be an object with a registry \"model\" name or "
                                "a \"spec_file\"");
    if (seed != NULL &&
        (!cJSON_IsNumber(seed) || seed->valuedouble < 0 || seed->valuedouble > 9007199254740991.0 ||
         seed->valuedouble != (double)(int64_t)seed->valuedouble))
        return sl__cli_error(c, "\"init\": \"seed\" must be a non-negative integer");
    if (file != NULL) {
        void *text = NULL;
        size_t len = 0;
        char err[256];
        if (read_beside(c, task_file, file->valuestring, 16u << 20, &text, &len) != 0)
            return SL__CLI_ERROR;
        st = sl_spec_parse(text, len, &spec, err, sizeof err);
        free(text);
        if (st != SL_OK)
            return sl__cli_error(c, "%s: %s", file->valuestring, err[0] ? err : sl_strerror(st));
        st = sl_model_create_spec(spec, &m, err, sizeof err);
        if (st != SL_OK) {
            sl_spec_free(spec);
            return sl__cli_error(c, "%s: %s", file->valuestring, err[0] ? err : sl_strerror(st));
        }
        goto init;
    }
    st = sl_model_create(name->valuestring, &m);
    if (st == SL_ENOENT) {
        const char *const *names = sl_model_names();
        fprintf(stderr, "starling %s: unknown model \"%s\"; the registry has:", c->cmd,
                name->valuestring);
        for (size_t i = 0; names[i] != NULL; i++)
            fprintf(stderr, " %s", names[i]);
        fputc('\n', stderr);
        return SL__CLI_ERROR;
    }
    if (st != SL_OK)
        return sl__cli_error(c, "model %s: %s", name->valuestring, sl_strerror(st));
init:
    params = malloc(sl_model_params(m) * sizeof *params);
    if (params == NULL) {
        sl__cli_error(c, "out of memory");
        goto done;
    }
    st = sl_model_init(m, params, seed ? (uint64_t)seed->valuedouble : 1);
    if (st != SL_OK) {
        sl__cli_error(c, "model %s: %s", sl_model_name(m), sl_strerror(st));
        goto done;
    }
    rc = add_model(c, sl_model_spec(m), params, req);
done:
    free(params);
    sl_model_free(m);
    sl_spec_free(spec);
    return rc;
}

/* The request body: {"config", "layout", "model"} from the task file. */
static int build_request(sl__cli *c, const char *task_file, char **body)
{
    void *text = NULL, *bytes = NULL;
    size_t len = 0;
    char *b64 = NULL;
    cJSON *doc = NULL, *req = NULL;
    const cJSON *cfg;
    int rc = SL__CLI_ERROR, w;
    if (read_beside(c, "", task_file, TASK_FILE_MAX, &text, &len) != 0)
        return SL__CLI_ERROR;
    doc = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(doc)) {
        sl__cli_error(c, "%s is not a JSON object", task_file);
        goto done;
    }
    cfg = cJSON_GetObjectItemCaseSensitive(doc, "config");
    if (!cJSON_IsObject(cfg)) {
        sl__cli_error(c, "%s: \"config\" (an object) is required", task_file);
        goto done;
    }
    req = cJSON_CreateObject();
    if (req == NULL || !cJSON_AddItemToObject(req, "config", cJSON_Duplicate(cfg, 1)))
        goto oom;
    if (cJSON_GetObjectItemCaseSensitive(doc, "init") != NULL ||
        cJSON_GetObjectItemCaseSensitive(doc, "onnx_file") != NULL) {
        static const char *const other[] = {"layout",     "layout_file",     "model", "model_file",
                                            "model_spec", "model_spec_file", "init",  "onnx_file"};
        const char *src = cJSON_GetObjectItemCaseSensitive(doc, "init") ? "init" : "onnx_file";
        const size_t self = src[0] == 'i' ? 6 : 7; /* its own entry of @other */
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
            if (i != self && cJSON_GetObjectItemCaseSensitive(doc, other[i]) != NULL) {
                sl__cli_error(c, "%s: \"%s\" gives the layout, the model and its spec; drop \"%s\"",
                              task_file, src, other[i]);
                goto done;
            }
        }
        if (strcmp(src, "init") == 0 && cJSON_GetObjectItemCaseSensitive(doc, "loss") != NULL) {
            sl__cli_error(c, "%s: \"loss\" goes with \"onnx_file\" (a spec file names its own)",
                          task_file);
            goto done;
        }
        if (strcmp(src, "init") == 0
                ? add_init(c, task_file, cJSON_GetObjectItemCaseSensitive(doc, "init"), req) != 0
                : add_onnx(c, task_file, doc, req) != 0)
            goto done;
        goto print;
    }
    if (add_spec(c, task_file, doc, req) != 0)
        goto done;
    if ((w = which(c, doc, "layout", "layout_file")) == 0)
        goto done;
    if (w == 1) {
        if (cJSON_AddStringToObject(req, "layout", sl__cli_str(doc, "layout")) == NULL)
            goto oom;
    } else {
        if (read_beside(c, task_file, sl__cli_str(doc, "layout_file"), LAYOUT_MAX, &bytes, &len))
            goto done;
        if (memchr(bytes, '\0', len) != NULL) {
            sl__cli_error(c, "%s is not text", sl__cli_str(doc, "layout_file"));
            goto done;
        }
        if (cJSON_AddStringToObject(req, "layout", bytes) == NULL)
            goto oom;
        free(bytes);
        bytes = NULL;
    }
    if ((w = which(c, doc, "model", "model_file")) == 0)
        goto done;
    if (w == 1) {
        if (cJSON_AddStringToObject(req, "model", sl__cli_str(doc, "model")) == NULL)
            goto oom;
    } else {
        size_t cap;
        if (read_beside(c, task_file, sl__cli_str(doc, "model_file"), MODEL_FILE_MAX, &bytes, &len))
            goto done;
        if (len == 0) {
            sl__cli_error(c, "%s is empty", sl__cli_str(doc, "model_file"));
            goto done;
        }
        cap = (len + 2) / 3 * 4 + 1;
        b64 = malloc(cap);
        if (b64 == NULL || sl_base64_encode(bytes, len, b64, cap) != SL_OK)
            goto oom;
        if (cJSON_AddStringToObject(req, "model", b64) == NULL)
            goto oom;
    }
print:
    if (add_contract(c, task_file, doc, req) != 0)
        goto done;
    *body = cJSON_PrintUnformatted(req);
    if (*body == NULL)
        goto oom;
    rc = 0;
    goto done;
oom:
    sl__cli_error(c, "out of memory");
done:
    free(text);
    free(bytes);
    free(b64);
    cJSON_Delete(doc);
    cJSON_Delete(req);
    return rc;
}

int sl__cli_task(int argc, char **argv)
{
    sl__cli c = {"task create", NULL, NULL, NULL, 0, NULL};
    const char *file = NULL;
    char *body = NULL;
    int json = 0, rc;
    sl_client_response raw;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return task_usage(argc < 2 ? stderr : stdout);
    if (strcmp(argv[1], "create") != 0) {
        c.cmd = "task";
        return sl__cli_usage_error(&c, "unknown subcommand \"%s\" (there is: create)", argv[1]);
    }
    for (int i = 2; i < argc; i++) {
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return task_usage(stdout);
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return sl__cli_usage_error(&c, "unknown option \"%s\"", argv[i]);
        else if (file != NULL)
            return sl__cli_usage_error(&c, "one task file at a time");
        else
            file = argv[i];
    }
    if (file == NULL)
        return sl__cli_usage_error(&c, "the task file is missing");
    if (build_request(&c, file, &body) != 0)
        return SL__CLI_ERROR;
    if (sl__cli_connect(&c) != 0) {
        free(body);
        return SL__CLI_ERROR;
    }
    rc = sl__cli_call(&c, "POST", "/v1/tasks", body, NULL, &raw);
    if (rc == 0) {
        cJSON *doc = cJSON_ParseWithLength((const char *)raw.body, raw.body_len);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "task_id");
        if (json) {
            fwrite(raw.body, 1, raw.body_len, stdout);
            fputc('\n', stdout);
        } else if (cJSON_IsNumber(id)) {
            printf("task %.0f\n", id->valuedouble);
        } else {
            rc = sl__cli_error(&c, "the answer has no task_id");
        }
        cJSON_Delete(doc);
        sl_client_response_free(&raw);
    }
    free(body);
    sl__cli_close(&c);
    return rc;
}
