/*
 * The operator commands of `starling` (api/cli/cmd_*.c) as a child process
 * against an in-process coordinator that ran a short simulated job
 * (test_dashboard_job.c), token-protected: --help and exit codes (0 ok,
 * 1 error, 2 usage) of every command, `status` (plain, coloured, --watch),
 * `rounds` (table and --json, equal to the API's), `model export` (bytes
 * equal to the API's, both formats), `task create` (files beside the
 * task file, inline base64, idempotent, refusals), `devices` (equal to the
 * API's, counts of the job), and `backup` (while uploads go on: the file
 * opens, passes integrity_check and holds what was acknowledged before it
 * began; its progress lines off a terminal; a wrong token refused).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "../support/sl_test.h"
#include "starling/common.h"
#include "starling/store.h"
#include "test_dashboard.h"

static td_job job;
static char dir[512], token_file[600];
static char *out, *err;

static const char *const plain_env[] = {
    "NO_COLOR=", "CLICOLOR_FORCE=", "STARLING_URL=", "STARLING_TOKEN_FILE=", NULL};

/* Run `starling` with the words of @args (NULL-terminated) after the command. */
static int cli(const char *const *env, const char *const *args)
{
    char *argv[40];
    int n = 0;
    free(out);
    free(err);
    out = err = NULL;
    argv[n++] = SL_STARLING_BIN;
    for (; *args != NULL && n < 39; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    return td_run(argv, env ? env : plain_env, 60, &out, &err);
}

#define CLI(...) cli(NULL, (const char *const[]){__VA_ARGS__, NULL})

static int setup(void **state)
{
    (void)state;
    td_job_run(&job, "cli_ops", 0);
    sl_test_mkdtemp(dir, sizeof dir, "cli_ops_files");
    snprintf(token_file, sizeof token_file, "%s/admin.token", dir);
    ah_write_file(token_file, "  " AH_ADMIN "\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    td_job_close(&job);
    sl_test_rmtree(dir);
    free(out);
    free(err);
    return 0;
}

/* Every command: --help (exit 0, on stdout, naming its options) and a bad option (exit 2). */
static void test_help_and_usage(void **state)
{
    static const struct {
        const char *words[3];
        const char *option; /* one option its --help must mention */
    } cmds[] = {
        {{"status"}, "--watch"},         {{"rounds"}, "--offset"},
        {{"devices"}, "--limit"},        {{"follow"}, "--rounds"},
        {{"task", "create"}, "--url"},   {{"model", "export"}, "--format"},
        {{"backup"}, "--output"},        {{"report"}, "--run"},
        {{"train"}, "--epochs"},         {{"bench", "codec"}, "--quick"},
        {{"bench", "store"}, "--dir"},   {{"bench", "gemm"}, "--json"},
        {{"bench", "train"}, "--model"}, {{"bench", "api"}, "--clients"},
        {{"bench", "fl"}, "--plot"},     {{"store", "migrate"}, "--to"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const char *args[5] = {NULL};
        char want[64];
        int n = 0;
        for (int w = 0; w < 3 && cmds[i].words[w] != NULL; w++)
            args[n++] = cmds[i].words[w];
        snprintf(want, sizeof want, "usage: starling %s%s%s", cmds[i].words[0],
                 cmds[i].words[1] ? " " : "", cmds[i].words[1] ? cmds[i].words[1] : "");
        args[n] = "--help";
        if (cli(NULL, args) != 0 || strstr(out, want) == NULL ||
            strstr(out, cmds[i].option) == NULL)
            fail_msg("%s --help: exit not 0, or no \"%s\" / %s in:\n%s%s", want + 16, want,
                     cmds[i].option, out, err);
        args[n] = "--no-such-option";
        if (cli(NULL, args) != 2)
            fail_msg("%s --no-such-option: exit not 2\n%s", want + 16, err);
        if (err[0] == '\0')
            fail_msg("%s --no-such-option: nothing on stderr", want + 16);
    }
    /* the operator commands also state their exit codes */
    for (size_t i = 0; i < 8; i++) {
        const char *args[4] = {cmds[i].words[0], cmds[i].words[1] ? cmds[i].words[1] : "--help",
                               cmds[i].words[1] ? "--help" : NULL, NULL};
        assert_int_equal(cli(NULL, args), 0);
        if (i != 7 && strstr(out, "exit status") == NULL) /* report: see its own text */
            fail_msg("%s --help does not give the exit status:\n%s", cmds[i].words[0], out);
    }
    assert_int_equal(CLI("--help"), 0);
    assert_non_null(strstr(out, "model export"));
    assert_non_null(strstr(out, "devices"));
    assert_non_null(strstr(out, "backup -o FILE"));
    assert_int_equal(CLI("nonsense"), 2);
    assert_int_equal(CLI("bench", "nonsense"), 2);
    /* usage errors: 2, with a message on stderr */
    assert_int_equal(CLI("status", "--bogus"), 2);
    assert_non_null(strstr(err, "unknown argument \"--bogus\""));
    assert_int_equal(CLI("status", "--count", "2"), 2);
    assert_int_equal(CLI("status", "--limit"), 2);
    assert_int_equal(CLI("rounds", "--limit", "0"), 2);
    assert_int_equal(CLI("rounds", "--task", "x1"), 2);
    assert_int_equal(CLI("devices", "--limit", "1001"), 2);
    assert_int_equal(CLI("devices", "--offset", "-1"), 2);
    assert_int_equal(CLI("devices", "--after", "-1"), 2);
    assert_int_equal(CLI("devices", "--after", "2", "--offset", "1"), 2);
    assert_non_null(strstr(err, "cannot be combined"));
    assert_int_equal(CLI("devices", "--all", "--offset", "1"), 2);
    assert_non_null(strstr(err, "--offset does not apply"));
    assert_int_equal(CLI("task"), 2);
    assert_int_equal(CLI("task", "delete"), 2);
    assert_int_equal(CLI("task", "create"), 2);
    assert_int_equal(CLI("task", "create", "a.json", "b.json"), 2);
    assert_int_equal(CLI("model", "export", "--format", "png", "-o", "x"), 2);
    assert_int_equal(CLI("model", "export", "--format", "frame"), 2);
    assert_int_equal(CLI("model", "export", "--format", "frame", "-o", "x", "--version", "v2"), 2);
    assert_int_equal(CLI("model", "export", "--format", "frame", "-o", "x", "--chunk", "10"), 2);
    assert_int_equal(CLI("backup"), 2);
    assert_non_null(strstr(err, "-o FILE is required"));
    assert_int_equal(CLI("backup", "-o"), 2);
    assert_int_equal(CLI("backup", "-o", "x", "--chunk", "x"), 2);
    /* store migrate: both ends required, an SQLite file to a postgresql:// URI */
    assert_int_equal(CLI("store"), 2);
    assert_int_equal(CLI("store", "copy"), 2);
    assert_non_null(strstr(err, "unknown subcommand \"copy\""));
    assert_int_equal(CLI("store", "migrate"), 2);
    assert_non_null(strstr(err, "--from FILE and --to URI are required"));
    assert_int_equal(CLI("store", "migrate", "--from", "a.db"), 2);
    assert_int_equal(CLI("store", "migrate", "--to", "postgresql://u@h/db"), 2);
    assert_int_equal(CLI("store", "migrate", "--from", "a.db", "--to", "b.db"), 2);
    assert_non_null(strstr(err, "--to a postgresql:// URI"));
    assert_int_equal(
        CLI("store", "migrate", "--from", "postgresql://u@h/a", "--to", "postgresql://u@h/b"), 2);
    assert_int_equal(CLI("store", "migrate", "--from"), 2);
}

static void test_errors(void **state)
{
    char url[64];
    (void)state;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ah_free_port());
    assert_int_equal(CLI("status", "--url", url), 1);
    assert_non_null(strstr(err, "cannot reach"));
    /* the status is token-protected here */
    assert_int_equal(CLI("status", "--url", job.f.base), 1);
    assert_non_null(strstr(err, "HTTP 401"));
    assert_non_null(strstr(err, "--token-file"));
    {
        char wrong[700];
        snprintf(wrong, sizeof wrong, "%s/wrong.token", dir);
        ah_write_file(wrong, "nope\n");
        assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", wrong), 1);
        assert_non_null(strstr(err, "is the token right?"));
    }
    assert_int_equal(CLI("status", "--url", job.f.base, "--token-file", "/nonexistent/token"), 1);
    assert_non_null(strstr(err, "cannot read the token file"));
    assert_int_equal(CLI("status", "--url", "ftp://x", "--token-file", token_file), 1);
    {
        /* store migrate from a file that is not there: 1, and no store made at that path; a
         * database that cannot be reached: 1, "nothing was copied" */
        char missing[700], to[80];
        struct stat st;
        snprintf(missing, sizeof missing, "%s/no-such.db", dir);
        snprintf(to, sizeof to, "postgresql://starling@127.0.0.1:%d/starling", ah_free_port());
        assert_int_equal(CLI("store", "migrate", "--from", missing, "--to", to), 1);
        assert_non_null(strstr(err, "no SQLite store at"));
        assert_int_equal(stat(missing, &st), -1);
        assert_int_equal(CLI("store", "migrate", "--from", job.f.dir, "--to", to), 1);
        assert_non_null(strstr(err, "not a file"));
        snprintf(missing, sizeof missing, "%s/starling.db", job.f.dir);
        assert_int_equal(CLI("store", "migrate", "--from", missing, "--to", to), 1);
        if (strstr(err, "nothing was copied") == NULL)
            fail_msg("store migrate to an unreachable database: %s", err);
    }
}

static void test_status(void **state)
{
    char line[64];
    (void)state;
    assert_int_equal(CLI("status", "--url", job.f.base, "--token-file", token_file), 0);
    assert_non_null(strstr(
        out, "Task 1 \"dash-demo\"  fedavg  model v5  running  keeps the last 2 versions\n"));
    assert_non_null(strstr(out, "round 6  training   selected 3  checked in 3  reported 1/2"));
    assert_non_null(strstr(out, "report deadline in"));
    assert_non_null(strstr(out, "TEST ACC"));
    assert_null(strstr(out, "\033[")); /* no colour into a file */
    /* each round of the job is a row; test accuracy where the evaluator reported */
    for (int no = 1; no <= 6; no++) {
        snprintf(line, sizeof line, "\n  %5d  %s", no,
                 no <= TD_CLOSED ? "closed"
                 : no == 5       ? "abandoned"
                                 : "training");
        if (strstr(out, line) == NULL)
            fail_msg("no row for round %d:\n%s", no, out);
    }
    assert_non_null(strstr(out, "v1>v2"));
    assert_non_null(strstr(out, "52.0%")); /* version 2's, retired: its metrics stay */
    assert_non_null(strstr(out, "62.0%"));
    assert_non_null(strstr(out, "82.0%"));
    {
        const char *env[] = {"CLICOLOR_FORCE=1", "STARLING_URL=", NULL};
        char url_env[128], tok_env[700];
        const char *env2[] = {url_env, tok_env, "NO_COLOR=", "CLICOLOR_FORCE=", NULL};
        assert_int_equal(cli(env, (const char *const[]){"status", "--url", job.f.base,
                                                        "--token-file", token_file, NULL}),
                         0);
        assert_non_null(strstr(out, "\033[32m"));
        /* the connection from the environment */
        snprintf(url_env, sizeof url_env, "STARLING_URL=%s", job.f.base);
        snprintf(tok_env, sizeof tok_env, "STARLING_TOKEN_FILE=%s", token_file);
        assert_int_equal(cli(env2, (const char *const[]){"status", "--limit", "0", NULL}), 0);
        assert_non_null(strstr(out, "dash-demo"));
        assert_null(strstr(out, "ROUND"));
    }
    assert_int_equal(CLI("status", "--url", job.f.base, "--token-file", token_file, "--task", "9"),
                     1);
    assert_non_null(strstr(err, "no task 9"));
    /* --watch redraws; --count ends it */
    assert_int_equal(CLI("status", "--url", job.f.base, "--token-file", token_file, "--watch",
                         "--interval", "1", "--count", "2", "--limit", "2"),
                     0);
    {
        const char *second = strstr(out, "Starling coordinator");
        assert_non_null(second);
        assert_non_null(strstr(second + 1, "Starling coordinator"));
    }
}

static void test_rounds(void **state)
{
    char *api;
    cJSON *a, *b;
    (void)state;
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file, "--json"), 0);
    api = td_get(&job, "/v1/rounds?task=1&limit=20&offset=0");
    a = cJSON_Parse(out);
    b = cJSON_Parse(api);
    assert_non_null(a);
    assert_true(cJSON_Compare(a, b, 1));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a, "rounds")), 6);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(api);
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file, "--limit", "2",
                         "--offset", "1"),
                     0);
    assert_non_null(strstr(out, "ROUND"));
    assert_non_null(strstr(out, "\n    5  abandoned"));
    assert_non_null(strstr(out, "aborted by the operator"));
    assert_non_null(strstr(out, "\n    4  closed"));
    assert_null(strstr(out, "\n    6  "));
    assert_null(strstr(out, "\n    3  "));
    /* the open round with its live counters (the list holds the stored record) */
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file, "--limit", "1"),
                     0);
    assert_non_null(strstr(out, "\n    6  training       5    3      1/2"));
}

static void expect_same_file(const char *file, const char *path)
{
    ah_resp r;
    void *data;
    size_t len;
    ah_admin(&job.f, "GET", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(sl_fs_read_file(file, 1 << 24, &data, &len), SL_OK);
    assert_int_equal(len, r.len);
    assert_memory_equal(data, r.body, len);
    free(data);
    ah_resp_free(&r);
}

static void test_model_export(void **state)
{
    char st_file[700], frame_file[700];
    (void)state;
    snprintf(st_file, sizeof st_file, "%s/latest.safetensors", dir);
    snprintf(frame_file, sizeof frame_file, "%s/v4.frame", dir);
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format", "safetensors", "-o", st_file),
                     0);
    expect_same_file(st_file, "/v1/models/latest?task=1&format=safetensors");
    assert_non_null(strstr(err, "wrote"));
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format=frame", "--version", "4", "--task", "1", "--output", frame_file),
                     0);
    expect_same_file(frame_file, "/v1/models/4?task=1");
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format", "frame", "--version", "99", "-o", frame_file),
                     1);
    assert_non_null(strstr(err, "HTTP 404"));
    expect_same_file(frame_file, "/v1/models/4?task=1"); /* the old file stays */
    /* version 2's bytes were retired (the job's task keeps its last 2 versions) */
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format", "frame", "--version", "2", "-o", frame_file),
                     1);
    assert_non_null(strstr(err, "HTTP 404"));
    expect_same_file(frame_file, "/v1/models/4?task=1");
    assert_int_equal(
        CLI("model", "export", "--url", job.f.base, "--format", "safetensors", "-o", st_file), 1);
}

static void test_task_create(void **state)
{
    void *frame;
    size_t len;
    char *b64, task_file[700], path[700], text[4096];
    (void)state;
    ah_initial_model(&frame, &len, &b64);
    snprintf(path, sizeof path, "%s/model.frame", dir);
    assert_int_equal(sl_fs_write_atomic(path, frame, len, 0644), SL_OK);
    snprintf(path, sizeof path, "%s/model.layout", dir);
    ah_write_file(path, AH_LAYOUT);
    snprintf(task_file, sizeof task_file, "%s/task.json", dir);
    ah_write_file(task_file, "{\"config\":{\"name\":\"from-cli\",\"target\":3,\"rounds\":5},"
                             "\"layout_file\":\"model.layout\",\"model_file\":\"model.frame\"}");
    assert_int_equal(
        CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 0);
    assert_string_equal(out, "task 2\n");
    /* the same again: the same task */
    assert_int_equal(
        CLI("task", "create", task_file, "--url", job.f.base, "--token-file", token_file, "--json"),
        0);
    assert_non_null(strstr(out, "{\"task_id\":2}"));
    /* the same name with another configuration: refused */
    ah_write_file(task_file, "{\"config\":{\"name\":\"from-cli\",\"target\":4},"
                             "\"layout_file\":\"model.layout\",\"model_file\":\"model.frame\"}");
    assert_int_equal(
        CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 1);
    assert_non_null(strstr(err, "HTTP 409"));
    /* inline layout and base64 model */
    snprintf(text, sizeof text,
             "{\"config\":{\"name\":\"inline\",\"target\":2},\"layout\":\"w 4 8\\nb 4\\n\","
             "\"model\":\"%s\"}",
             b64);
    ah_write_file(task_file, text);
    assert_int_equal(
        CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 0);
    assert_string_equal(out, "task 3\n");
    /* refusals: a bad key (422 from the coordinator), a bad file, both model forms */
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\",\"target\":2,\"bogus\":1},"
                             "\"layout_file\":\"model.layout\",\"model_file\":\"model.frame\"}");
    assert_int_equal(
        CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 1);
    assert_non_null(strstr(err, "HTTP 422"));
    assert_non_null(strstr(err, "bogus"));
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"layout\":\"w 2\","
                             "\"model_file\":\"missing.frame\"}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "missing.frame"));
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"layout\":\"w 2\","
                             "\"model\":\"AAAA\",\"model_file\":\"model.frame\"}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "exactly one of"));
    ah_write_file(task_file, "[1, 2]");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    /* "init" (a fresh registry model): refused before any request when it is malformed */
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"init\":{\"model\":\"resnet\"}}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "unknown model \"resnet\""));
    assert_non_null(strstr(err, "lenet5"));
    ah_write_file(task_file,
                  "{\"config\":{\"name\":\"bad\"},\"init\":{\"model\":\"logreg\",\"seed\":-1}}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "non-negative integer"));
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"init\":{\"model\":\"logreg\"},"
                             "\"layout\":\"w 2\"}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "drop \"layout\""));
    ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"init\":\"lenet5\"}");
    assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
    assert_non_null(strstr(err, "must be an object"));
    /* a model spec: "init" from a spec file, or beside layout and model; the task carries it */
    {
#define LIN_SPEC                                                                                  \
    "{\"starling_model\": 1, \"name\": \"lin\", \"inputs\": [{\"name\": \"x\", \"shape\": [8]}]," \
    " \"params\": [{\"name\": \"w\", \"shape\": [4, 8]}, {\"name\": \"b\", \"shape\": [4]}],"     \
    " \"nodes\": [{\"op\": \"Gemm\", \"inputs\": [\"x\", \"w\", \"b\"], \"outputs\": [\"y\"]}],"  \
    " \"output\": \"y\", \"loss\": {\"op\": \"cross_entropy\"}, \"metrics\": [\"accuracy\"]}"
        ah_resp r;
        snprintf(path, sizeof path, "%s/lin.json", dir);
        ah_write_file(path, LIN_SPEC);
        ah_write_file(task_file, "{\"config\":{\"name\":\"spec\",\"target\":2},"
                                 "\"init\":{\"spec_file\":\"lin.json\",\"seed\":3}}");
        assert_int_equal(
            CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 0);
        assert_string_equal(out, "task 4\n");
        ah_admin(&job.f, "GET", "/v1/tasks/4/model-spec", NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "\"name\":\"lin\""));
        ah_resp_free(&r);
        snprintf(text, sizeof text,
                 "{\"config\":{\"name\":\"spec2\",\"target\":2},\"layout\":\"w 4 8\\nb 4\\n\","
                 "\"model\":\"%s\",\"model_spec_file\":\"lin.json\"}",
                 b64);
        ah_write_file(task_file, text);
        assert_int_equal(
            CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 0);
        assert_string_equal(out, "task 5\n");
        ah_admin(&job.f, "GET", "/v1/tasks/5/model-spec", NULL, 0, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
        /* a spec that does not parse is refused before any request, with its JSON path */
        ah_write_file(path, "{\"starling_model\": 1, \"name\": \"lin\"}");
        assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
        assert_non_null(strstr(err, "the model spec: "));
        ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"init\":{\"spec_file\":"
                                 "\"lin.json\"},\"loss\":\"mse\"}");
        assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
        assert_non_null(strstr(err, "\"loss\" goes with \"onnx_file\""));
#undef LIN_SPEC
    }
#ifdef SL_TEST_ONNX
    {
        /* an ONNX file exported from PyTorch: its graph is the task's spec, its initializers
         * the initial model; a file that is not ONNX is refused before any request */
        ah_resp r;
        snprintf(text, sizeof text,
                 "{\"config\":{\"name\":\"onnx\",\"target\":2},\"onnx_file\":\"%s/tests/"
                 "fixtures/onnx/lenet_train_op17.onnx\"}",
                 SL_SOURCE_DIR);
        ah_write_file(task_file, text);
        assert_int_equal(
            CLI("task", "create", "--url", job.f.base, "--token-file", token_file, task_file), 0);
        assert_string_equal(out, "task 6\n");
        assert_non_null(strstr(err, "imported "));
        ah_admin(&job.f, "GET", "/v1/tasks/6/model-spec", NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "\"name\":\"lenet_train_op17\""));
        assert_non_null(strstr(r.body, "\"op\":\"Conv\""));
        ah_resp_free(&r);
        ah_write_file(task_file, "{\"config\":{\"name\":\"bad\"},\"onnx_file\":\"task.json\"}");
        assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
        assert_non_null(strstr(err, "task.json"));
        snprintf(text, sizeof text,
                 "{\"config\":{\"name\":\"bad\"},\"onnx_file\":\"x.onnx\",\"layout\":\"w 2\"}");
        ah_write_file(task_file, text);
        assert_int_equal(CLI("task", "create", "--url", job.f.base, task_file), 1);
        assert_non_null(strstr(err, "drop \"layout\""));
    }
#endif
    /* with several tasks, the commands that need one ask which */
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file), 2);
    assert_non_null(strstr(err, "pick one with --task"));
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file, "--task", "3"),
                     0);
    free(frame);
    free(b64);
}

/* The last table printed lists the job's devices @first..@last and no other. */
static void expect_rows(int first, int last)
{
    for (int id = 1; id <= TD_DEVICES; id++) {
        char row[32];
        snprintf(row, sizeof row, "\n%8d  ", id);
        if (id >= first && id <= last)
            assert_non_null(strstr(out, row));
        else
            assert_null(strstr(out, row));
    }
}

static void test_devices(void **state)
{
    char *api;
    cJSON *a, *b;
    const cJSON *d;
    (void)state;
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file, "--json"), 0);
    api = td_get(&job, "/v1/devices?limit=50&offset=0");
    a = cJSON_Parse(out);
    b = cJSON_Parse(api);
    assert_non_null(a);
    assert_true(cJSON_Compare(a, b, 1));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(a, "devices")), TD_DEVICES);
    assert_int_equal((int)cJSON_GetObjectItem(a, "total")->valuedouble, TD_DEVICES);
    /* what the job did: devices 0-2 were selected in all 6 rounds; device 0 reported in
     * each, device 1 in the 4 closed ones, device 2 never (late in round 2); device 3 idle */
    d = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "devices"), 0);
    assert_int_equal((int)cJSON_GetObjectItem(d, "participations")->valuedouble, TD_CLOSED + 2);
    assert_int_equal((int)cJSON_GetObjectItem(d, "reported")->valuedouble, TD_CLOSED + 2);
    d = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "devices"), 1);
    assert_int_equal((int)cJSON_GetObjectItem(d, "reported")->valuedouble, TD_CLOSED);
    d = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "devices"), 2);
    assert_int_equal((int)cJSON_GetObjectItem(d, "reported")->valuedouble, 0);
    assert_int_equal((int)cJSON_GetObjectItem(d, "late")->valuedouble, 1);
    d = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "devices"), 3);
    assert_int_equal((int)cJSON_GetObjectItem(d, "participations")->valuedouble, 0);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(api);
    /* the table, and a page of it */
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file), 0);
    assert_non_null(strstr(out, "DEVICE"));
    assert_non_null(strstr(out, "REJECTED"));
    assert_non_null(strstr(out, "\n       1  "));
    assert_non_null(strstr(out, "4 of 4 devices (from 1); the last page"));
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file, "--limit", "2",
                         "--offset", "1"),
                     0);
    expect_rows(2, 3);
    assert_non_null(strstr(out, "2 of 4 devices (from 2); next page: --after 3"));
    /* keyset pages: after a device id, to the last page */
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file, "--limit", "2",
                         "--after", "1"),
                     0);
    expect_rows(2, 3);
    assert_non_null(strstr(out, "2 devices after device 1; next page: --after 3"));
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file, "--limit", "2",
                         "--after", "3"),
                     0);
    expect_rows(4, 4);
    assert_non_null(strstr(out, "1 device after device 3; the last page"));
    /* --all: every page, as a table or JSON Lines, from an id on */
    assert_int_equal(
        CLI("devices", "--url", job.f.base, "--token-file", token_file, "--all", "--limit", "3"),
        0);
    expect_rows(1, TD_DEVICES);
    assert_non_null(strstr(out, "\n4 devices\n"));
    assert_int_equal(CLI("devices", "--url", job.f.base, "--token-file", token_file, "--all",
                         "--json", "--limit", "1", "--after", "1"),
                     0);
    {
        int lines = 0;
        char *save = NULL;
        for (char *line = strtok_r(out, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            cJSON *dev = cJSON_Parse(line);
            assert_non_null(dev);
            assert_int_equal((int)cJSON_GetObjectItem(dev, "device_id")->valuedouble, 2 + lines);
            cJSON_Delete(dev);
            lines++;
        }
        assert_int_equal(lines, TD_DEVICES - 1);
    }
    assert_int_equal(CLI("devices", "--url", job.f.base), 1);
    assert_non_null(strstr(err, "HTTP 401"));
}

/* Device 2's upload to the open round, one byte per PATCH: durable writes while the backup runs. */
typedef struct patcher {
    char id[64];
    void *frame;
    size_t len;
    atomic_ullong acked; /* bytes the coordinator acknowledged */
    atomic_int stop;
} patcher;

static void *patch_bytes(void *arg)
{
    patcher *p = arg;
    for (size_t off = atomic_load(&p->acked); off + 1 < p->len && !atomic_load(&p->stop); off++) {
        ah_resp r;
        ah_upload_patch(&job.f, &job.dev[2], p->id, off, (char *)p->frame + off, 1, &r);
        if (r.status != 204) {
            ah_resp_free(&r);
            break;
        }
        atomic_store(&p->acked, off + 1);
        ah_resp_free(&r);
    }
    return NULL;
}

static void test_backup(void **state)
{
    char file[700], wrong[700], err_text[256];
    int64_t round = job.round_ids[job.nrounds - 1], version;
    sl_layout *layout;
    sl_upload_record up;
    sl_store_options o;
    sl_store *copy;
    uint64_t before, updates = 0;
    pthread_t th;
    patcher p;
    ah_resp r;
    (void)state;
    snprintf(file, sizeof file, "%s/coordinator.db", dir);
    /* the open round's update of device 2, sent slowly */
    memset(&p, 0, sizeof p);
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    {
        char *st = td_get(&job, "/v1/status");
        const char *cur = strstr(st, "\"round\":{");
        assert_non_null(cur);
        version = ah_json_int(cur + 8, "base_version");
        free(st);
    }
    ah_update(layout, round, version, 0.125f, &p.frame, &p.len);
    assert_true(p.len > 16);
    ah_upload_create(&job.f, &job.dev[2], round, p.frame, p.len, NULL, p.id, sizeof p.id);
    ah_upload_patch(&job.f, &job.dev[2], p.id, 0, p.frame, 1, &r);
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);
    atomic_store(&p.acked, 1);
    assert_int_equal(pthread_create(&th, NULL, patch_bytes, &p), 0);
    while (atomic_load(&p.acked) < 3)
        usleep(1000);
    before = atomic_load(&p.acked);
    /* stderr is a file here: plain progress lines, no carriage returns */
    assert_int_equal(CLI("backup", "--url", job.f.base, "--token-file", token_file, "-o", file,
                         "--chunk", "4096", "--json"),
                     0);
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    if (strstr(err, "downloading backup: 25% (") == NULL ||
        strstr(err, "downloading backup: 50% (") == NULL ||
        strstr(err, "downloading backup: 75% (") == NULL || strchr(err, '\r') != NULL)
        fail_msg("progress lines:\n%s", err);
    assert_non_null(strstr(err, "integrity_check ok"));
    assert_non_null(strstr(out, "\"sha256\""));
    {
        /* the file is the coordinator's answer: its size and SHA-256 */
        void *data;
        size_t len;
        uint8_t sha[32];
        char hex[65], want[80];
        assert_int_equal(sl_fs_read_file(file, 1 << 28, &data, &len), SL_OK);
        assert_int_equal(len, (size_t)ah_json_int(out, "bytes"));
        sl_sha256(data, len, sha);
        sl_hex(sha, 32, hex);
        snprintf(want, sizeof want, "\"sha256\":\"%s\"", hex);
        assert_non_null(strstr(out, want));
        assert_memory_equal(data, "SQLite format 3", 16);
        free(data);
    }
    /* it opens, passes the full check, and holds what was acknowledged before it began */
    sl_store_options_default(&o);
    o.path = file;
    o.check = SL_STORE_CHECK_FULL;
    assert_int_equal(sl_store_open(&o, &copy, err_text, sizeof err_text), SL_OK);
    assert_int_equal(sl_store_count_updates(copy, round, &updates), SL_OK);
    assert_int_equal(updates, 1); /* device 0's report of the open round */
    assert_int_equal(sl_store_count_updates(copy, job.round_ids[0], &updates), SL_OK);
    assert_int_equal(updates, 2);
    assert_int_equal(sl_store_get_upload(copy, p.id, &up), SL_OK);
    print_message("backup: upload offset %llu (acknowledged %llu before, %llu after)\n",
                  (unsigned long long)up.offset, (unsigned long long)before,
                  (unsigned long long)atomic_load(&p.acked));
    assert_true(up.offset >= before);
    assert_true(up.offset <= atomic_load(&p.acked));
    sl_store_close(copy);
    /* a wrong token: 401, and the old file stays */
    snprintf(wrong, sizeof wrong, "%s/wrong-backup.token", dir);
    ah_write_file(wrong, "nope\n");
    assert_int_equal(CLI("backup", "--url", job.f.base, "--token-file", wrong, "-o", file), 1);
    assert_non_null(strstr(err, "HTTP 401"));
    assert_int_equal(CLI("backup", "--url", job.f.base, "-o", file), 1);
    assert_non_null(strstr(err, "HTTP 401"));
    assert_int_equal(sl_store_open(&o, &copy, err_text, sizeof err_text), SL_OK);
    sl_store_close(copy);
    {
        const char *bearer[] = {"Authorization: Bearer nope"};
        char url[128];
        snprintf(url, sizeof url, "%s/v1/backups", job.f.base);
        ah_http("POST", url, bearer, 1, "", 0, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
    }
    free(p.frame);
    sl_layout_free(layout);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_status),         cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_model_export),   cmocka_unit_test(test_task_create),
        cmocka_unit_test(test_devices),        cmocka_unit_test(test_backup),
    };
    int failed;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    failed = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return failed;
}
