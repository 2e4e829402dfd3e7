/*
 * The operator commands of `starling` (api/cli/cmd_*.c) as a child process
 * against an in-process coordinator that ran a short simulated job
 * (test_dashboard_job.c), token-protected: --help and exit codes (0 ok,
 * 1 error, 2 usage) of every command, `status` (plain, coloured, --watch),
 * `rounds` (table and --json, equal to the API's), `model export` (bytes
 * equal to the API's, both formats) and `task create` (files beside the
 * task file, inline base64, idempotent, refusals).
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "../support/sl_test.h"
#include "starling/common.h"
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

static void test_help_and_usage(void **state)
{
    static const char *const cmds[][3] = {{"status", NULL, NULL},
                                          {"rounds", NULL, NULL},
                                          {"task", "create", NULL},
                                          {"model", "export", NULL}};
    (void)state;
    for (int i = 0; i < 4; i++) {
        const char *args[4] = {cmds[i][0], cmds[i][1] ? cmds[i][1] : "--help",
                               cmds[i][1] ? "--help" : NULL, NULL};
        char want[64];
        assert_int_equal(cli(NULL, args), 0);
        snprintf(want, sizeof want, "usage: starling %s", cmds[i][0]);
        if (strstr(out, want) == NULL)
            fail_msg("%s --help: %s", cmds[i][0], out);
        assert_non_null(strstr(out, "exit status"));
    }
    assert_int_equal(CLI("--help"), 0);
    assert_non_null(strstr(out, "model export"));
    /* usage errors: 2, with a message on stderr */
    assert_int_equal(CLI("status", "--bogus"), 2);
    assert_non_null(strstr(err, "unknown argument \"--bogus\""));
    assert_int_equal(CLI("status", "--count", "2"), 2);
    assert_int_equal(CLI("status", "--limit"), 2);
    assert_int_equal(CLI("rounds", "--limit", "0"), 2);
    assert_int_equal(CLI("rounds", "--task", "x1"), 2);
    assert_int_equal(CLI("task"), 2);
    assert_int_equal(CLI("task", "delete"), 2);
    assert_int_equal(CLI("task", "create"), 2);
    assert_int_equal(CLI("task", "create", "a.json", "b.json"), 2);
    assert_int_equal(CLI("model", "export", "--format", "png", "-o", "x"), 2);
    assert_int_equal(CLI("model", "export", "--format", "frame"), 2);
    assert_int_equal(CLI("model", "export", "--format", "frame", "-o", "x", "--version", "v2"), 2);
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
}

static void test_status(void **state)
{
    char line[64];
    (void)state;
    assert_int_equal(CLI("status", "--url", job.f.base, "--token-file", token_file), 0);
    assert_non_null(strstr(out, "Task 1 \"dash-demo\"  fedavg  model v5  running"));
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
    assert_non_null(strstr(out, "52.0%"));
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
    snprintf(frame_file, sizeof frame_file, "%s/v2.frame", dir);
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format", "safetensors", "-o", st_file),
                     0);
    expect_same_file(st_file, "/v1/models/latest?task=1&format=safetensors");
    assert_non_null(strstr(err, "wrote"));
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format=frame", "--version", "2", "--task", "1", "--output", frame_file),
                     0);
    expect_same_file(frame_file, "/v1/models/2?task=1");
    assert_int_equal(CLI("model", "export", "--url", job.f.base, "--token-file", token_file,
                         "--format", "frame", "--version", "99", "-o", frame_file),
                     1);
    assert_non_null(strstr(err, "HTTP 404"));
    expect_same_file(frame_file, "/v1/models/2?task=1"); /* the old file stays */
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
    /* with several tasks, the commands that need one ask which */
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file), 2);
    assert_non_null(strstr(err, "pick one with --task"));
    assert_int_equal(CLI("rounds", "--url", job.f.base, "--token-file", token_file, "--task", "3"),
                     0);
    free(frame);
    free(b64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_status),         cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_model_export),   cmocka_unit_test(test_task_create),
    };
    int failed;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    failed = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return failed;
}
