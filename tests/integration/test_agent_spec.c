/*
 * Tasks that carry a model spec, through the real coordinator and the
 * starling-agent program: a fleet trains a model no registry knows (the
 * depthwise-separable CNN with BatchNorm of device/nn/models) from the spec
 * it fetched and cached; devices refuse a model over their limits (nodes,
 * parameters, memory budget) or that does not fit their data, the
 * coordinator records each reason per device (GET /v1/devices/{id}) and never
 * selects them, and a device whose limits allow the model again trains and
 * clears its refusal. The evaluator evaluates a spec task's versions.
 */
#include <sys/stat.h>

#include "../support/sl_test.h"
#include "agent_harness.h"
#include "starling/api_sign.h"

#define SPEC_TASK(name)                                                                      \
    "{\"name\":\"" name "\",\"target\":3,\"quorum\":1,\"over_selection\":1,"                 \
    "\"selection_window_ms\":400,\"report_deadline_ms\":20000,\"values\":\"fp16\","          \
    "\"density\":0.05,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05,\"local_momentum\":" \
    "0.9}"

static char *read_spec(const char *name)
{
    char path[600];
    void *text;
    size_t len;
    snprintf(path, sizeof path, "%s/device/nn/models/%s", SL_SOURCE_DIR, name);
    if (sl_fs_read_file(path, 1 << 24, &text, &len) != SL_OK)
        fail_msg("cannot read %s", path);
    return text;
}

static int run_agent(const ag_coord *c, int64_t task, const char *data, const char *state,
                     const char *log, const char *const *extra)
{
    const char *args[40];
    char task_s[32];
    size_t n = 0;
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    {
        const char *base[] = {"--coordinator", c->url,         "--task",
                              task_s,          "--data",       data,
                              "--state-dir",   state,          "--enrolment-token",
                              AG_ENROL,        "--retry-base", "20ms",
                              "--max-wait",    "1s",           "--log-level",
                              "warn"};
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            args[n++] = base[i];
    }
    for (size_t i = 0; extra[i] != NULL && n + 1 < sizeof args / sizeof args[0]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return ag_wait(ag_spawn_agent(args, log), 120000);
}

/* The refusals GET /v1/devices/{id} lists for @state's device (malloc'd JSON text). */
static char *device_json(ag_coord *c, const char *state)
{
    char path[64];
    sl_client_response r;
    char *body;
    snprintf(path, sizeof path, "/v1/devices/%lld", (long long)ag_device_id(state));
    ag_admin(c, "GET", path, NULL, &r);
    assert_int_equal(r.status, 200);
    body = strdup((const char *)r.body);
    sl_client_response_free(&r);
    return body;
}

static void expect_refusal(ag_coord *c, const char *state, int64_t task, const char *words)
{
    char *body = device_json(c, state), want[64];
    snprintf(want, sizeof want, "{\"task_id\":%lld,\"reason\":\"", (long long)task);
    if (strstr(body, want) == NULL || strstr(body, words) == NULL)
        fail_msg("device %s: no refusal of task %lld saying \"%s\": %s", state, (long long)task,
                 words, body);
    free(body);
}

static void test_fleet_trains_spec(void **state)
{
    char dir[512], data[600], fleet[600], log[600], path[700], hex[65];
    char *spec = read_spec("dwsep_cnn.json");
    ag_coord c;
    int64_t task;
    void *cached;
    size_t len;
    uint8_t sha[32];
    sl_client_response r;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_spec");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(fleet, sizeof fleet, "%s/fleet", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_make_data(data, 600, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_spec(&c, spec, SPEC_TASK("dwsep"));
    {
        const char *extra[] = {"--fleet", "3", "--rounds", "2", NULL};
        int code = run_agent(&c, task, data, fleet, log, extra);
        if (code != 0) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log);
            (void)!system(cmd);
            fail_msg("starling-agent --fleet 3 exited %d", code);
        }
    }
    assert_true(ag_model_version(&c, task) >= 3); /* two rounds closed */
    {
        /* the evaluator takes the task's spec too, and reports every version */
        char eval[600], task_s[32];
        sl_model_record mr;
        int64_t v = ag_model_version(&c, task);
        snprintf(eval, sizeof eval, "%s/eval", dir);
        snprintf(task_s, sizeof task_s, "%lld", (long long)task);
        const char *args[] = {"--coordinator", c.url,         "--task",
                              task_s,          "--data",      data,
                              "--state-dir",   eval,          "--admin-token-file",
                              c.admin_file,    "--evaluator", "--once",
                              "--log-level",   "warn",        NULL};
        assert_int_equal(ag_wait(ag_spawn_agent(args, log), 60000), 0);
        assert_int_equal(sl_store_get_model(c.store, task, v, &mr), SL_OK);
        assert_non_null(mr.metrics);
        assert_non_null(strstr(mr.metrics, "accuracy"));
        sl_store_model_free(&mr);
    }
    /* each device cached the spec the coordinator serves */
    snprintf(path, sizeof path, "/v1/tasks/%lld/model-spec", (long long)task);
    ag_admin(&c, "GET", path, NULL, &r);
    assert_int_equal(r.status, 200);
    sl_sha256(r.body, r.body_len, sha);
    sl_hex(sha, 32, hex);
    for (int i = 0; i < 3; i++) {
        char dev[800], got[65];
        uint8_t s2[32];
        snprintf(dev, sizeof dev, "%s/dev-%d/model_spec.json", fleet, i);
        assert_int_equal(sl_fs_read_file(dev, 1 << 24, &cached, &len), SL_OK);
        sl_sha256(cached, len, s2);
        sl_hex(s2, 32, got);
        assert_string_equal(got, hex);
        free(cached);
        snprintf(dev, sizeof dev, "%s/dev-%d", fleet, i);
        {
            char *body = device_json(&c, dev);
            assert_non_null(strstr(body, "\"refusals\":[]"));
            free(body);
        }
    }
    sl_client_response_free(&r);
    free(spec);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

static void test_refusals(void **state)
{
    char dir[512], data[600], dev[600], log[600];
    char *cnn = read_spec("cnn.json"), *reg = read_spec("mlp_reg.json");
    ag_coord c;
    int64_t task, reg_task;
    uint64_t updates, closed;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_refuse");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(dev, sizeof dev, "%s/dev", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_make_data(data, 300, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_spec(&c, cnn, SPEC_TASK("cnn"));
    reg_task = ag_create_task_spec(&c, reg, SPEC_TASK("reg"));
    {
        /* 1,663,370 parameters over a limit of 100,000 */
        const char *extra[] = {"--once", "--max-params", "100000", NULL};
        assert_int_equal(run_agent(&c, task, data, dev, log, extra), 5);
        expect_refusal(&c, dev, task, "1663370 parameters; this device allows 100000 (max_params)");
    }
    {
        /* the memory a step needs (activations of batch 32 and 6 copies of the parameters)
         * over a budget of 8 MiB: the reason replaces the first */
        const char *extra[] = {"--once", "--memory-budget", "8M", NULL};
        assert_int_equal(run_agent(&c, task, data, dev, log, extra), 5);
        expect_refusal(&c, dev, task, "a training step at batch 32 needs");
        expect_refusal(&c, dev, task, "this device allows 8.0 MiB (memory_budget)");
    }
    {
        const char *extra[] = {"--once", "--max-nodes", "4", NULL};
        assert_int_equal(run_agent(&c, task, data, dev, log, extra), 5);
        expect_refusal(&c, dev, task, "the model has 10 nodes; this device allows 4 (max_nodes)");
    }
    {
        /* a regression model over 8 features: not this device's images and labels */
        const char *extra[] = {"--once", NULL};
        assert_int_equal(run_agent(&c, reg_task, data, dev, log, extra), 5);
        expect_refusal(&c, dev, reg_task, "8 values per sample; this device's data has one of 784");
    }
    /* none of it trained or uploaded anything */
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 0);
    {
        /* the limits allow the model again: it trains, and its refusal of the task is gone */
        const char *extra[] = {"--once", NULL};
        char *body;
        assert_int_equal(run_agent(&c, task, data, dev, log, extra), 0);
        body = device_json(&c, dev);
        assert_null(strstr(body, "\"task_id\":1,"));
        assert_non_null(strstr(body, "\"task_id\":2,")); /* still refuses the regression */
        free(body);
    }
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    free(cnn);
    free(reg);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

/* A CSV source: a regression spec trains on it; a bad value refuses the file with its line and
 * column before anything is sent. */
static void test_csv_source(void **state)
{
    char dir[512], csv[600], src[700], dev[600], log[600], *text;
    char *reg = read_spec("mlp_reg.json");
    ag_coord c;
    int64_t task;
    uint64_t updates, closed;
    FILE *f;
    size_t len;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_csv");
    snprintf(csv, sizeof csv, "%s/readings.csv", dir);
    snprintf(dev, sizeof dev, "%s/dev", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    f = fopen(csv, "w");
    assert_non_null(f);
    fputs("time,a,b,c,d,e,f,g,h,y\n", f);
    for (int i = 0; i < 64; i++)
        fprintf(f, "%d,%g,%g,%g,%g,%g,%g,%g,%g,%g\n", i, i * 0.01, -i * 0.02, 0.5, i % 3 * 0.1, 1.0,
                0.25, i * 0.005, -0.5, i * 0.03 + 1);
    fclose(f);
    snprintf(src, sizeof src, "csv:%s?label=y&kind=target&timestamp=time", csv);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_spec(&c, reg, SPEC_TASK("csv"));
    {
        const char *extra[] = {"--once", NULL};
        int code = run_agent(&c, task, src, dev, log, extra);
        if (code != 0) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log);
            (void)!system(cmd);
            fail_msg("starling-agent on %s exited %d", src, code);
        }
    }
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    /* a value that is not a number: refused with the file, line and column; nothing sent */
    f = fopen(csv, "a");
    assert_non_null(f);
    fputs("64,0.1,0.2,oops,0,1,0.25,0.3,-0.5,2\n", f);
    fclose(f);
    remove(log);
    {
        char dev2[700];
        const char *extra[] = {"--once", NULL};
        snprintf(dev2, sizeof dev2, "%s2", dev);
        assert_true(run_agent(&c, task, src, dev2, log, extra) != 0);
    }
    assert_int_equal(sl_fs_read_file(log, 1 << 20, (void **)&text, &len), SL_OK);
    if (strstr(text, "no usable data") == NULL || strstr(text, "line 66, column 4 (c)") == NULL)
        fail_msg("the refusal does not say where: %s", text);
    free(text);
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    {
        /* a source that does not say enough, or says something unknown: a usage error (2) with
         * the reason, before enrolment */
        static const char *const bad[][2] = {
            {"?kind=target", "?label=COLUMN names the label column"},
            {"?label=y&kind=class", "class labels need &classes=N"},
            /* without kind= or classes=, a source read through the task's data contract:
             * its options are checked before enrolment too */
            {"?label=y&colour=red", "unknown option \"colour\""},
            {"?label=y&skip=-1", "skip=-1: a number of lines"},
            {"?label=y&kind=class&classes=0", "unknown or bad option \"classes=0\""},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char dev3[700], src3[800];
            const char *extra[] = {"--once", NULL};
            snprintf(dev3, sizeof dev3, "%s3", dev);
            snprintf(src3, sizeof src3, "csv:%s%s", csv, bad[i][0]);
            remove(log);
            assert_int_equal(run_agent(&c, task, src3, dev3, log, extra), 2);
            assert_int_equal(sl_fs_read_file(log, 1 << 20, (void **)&text, &len), SL_OK);
            if (strstr(text, bad[i][1]) == NULL)
                fail_msg("%s: the refusal does not say \"%s\": %s", bad[i][0], bad[i][1], text);
            free(text);
        }
    }
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    free(reg);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_trains_spec),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_csv_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
