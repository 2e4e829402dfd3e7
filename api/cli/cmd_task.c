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
 *                  registry (device/nn: logreg, mlp, lenet5, cnn) initialised
 *                  as PyTorch does, deterministically by seed (default 1);
 *                  gives both the layout and the initial model
 * Exactly one of layout / layout_file and one of model / model_file, or init
 * alone.
 * Relative file names are taken from the task file's directory. The
 * coordinator answers with the task id (the same id again when a task with
 * this name and configuration exists; 409 when the name has another one).
 */
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/nn.h"

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
            "or, instead of layout and model, a fresh registry model (logreg, mlp, lenet5,\n"
            "cnn) initialised as PyTorch does, deterministically by seed:\n"
            "   \"init\": {\"model\": \"lenet5\", \"seed\": 1}\n"
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
static int add_init(sl__cli *c, const cJSON *init, cJSON *req)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(init, "model");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(init, "seed");
    sl_model *m = NULL;
    float *params = NULL;
    void *frame = NULL;
    size_t len = 0, need, cap;
    char *layout = NULL, *b64 = NULL;
    int rc = SL__CLI_ERROR, st;
    if (!cJSON_IsObject(init) || !cJSON_IsString(name))
        return sl__cli_error(c, "\"init\" must be an object with a \"model\" name");
    if (seed != NULL &&
        (!cJSON_IsNumber(seed) || seed->valuedouble < 0 || seed->valuedouble > 9007199254740991.0 ||
         seed->valuedouble != (double)(int64_t)seed->valuedouble))
        return sl__cli_error(c, "\"init\": \"seed\" must be a non-negative integer");
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
    params = malloc(sl_model_params(m) * sizeof *params);
    if (params == NULL)
        goto oom;
    st = sl_model_init(m, params, seed ? (uint64_t)seed->valuedouble : 1);
    if (st == SL_OK)
        st = sl_frame_encode_model(sl_model_layout(m), params, 1, 3, &frame, &len);
    if (st != SL_OK) {
        sl__cli_error(c, "model %s: %s", name->valuestring, sl_strerror(st));
        goto done;
    }
    need = sl_layout_format(sl_model_layout(m), NULL, 0);
    layout = malloc(need + 1);
    cap = (len + 2) / 3 * 4 + 1;
    b64 = malloc(cap);
    if (layout == NULL || b64 == NULL || sl_base64_encode(frame, len, b64, cap) != SL_OK)
        goto oom;
    sl_layout_format(sl_model_layout(m), layout, need + 1);
    if (cJSON_AddStringToObject(req, "layout", layout) == NULL ||
        cJSON_AddStringToObject(req, "model", b64) == NULL)
        goto oom;
    rc = 0;
    goto done;
oom:
    sl__cli_error(c, "out of memory");
done:
    free(b64);
    free(layout);
    free(frame);
    free(params);
    sl_model_free(m);
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
    if (cJSON_GetObjectItemCaseSensitive(doc, "init") != NULL) {
        static const char *const other[] = {"layout", "layout_file", "model", "model_file"};
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
            if (cJSON_GetObjectItemCaseSensitive(doc, other[i]) != NULL) {
                sl__cli_error(c, "%s: \"init\" gives the layout and the model; drop \"%s\"",
                              task_file, other[i]);
                goto done;
            }
        }
        if (add_init(c, cJSON_GetObjectItemCaseSensitive(doc, "init"), req) != 0)
            goto done;
        goto print;
    }
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
