/*
 * The agent's edges: TLS (a wrong CA or pin is refused before anything is
 * sent; the right ones enrol) and the starling-agent program as a child
 * process (a fleet, the evaluator whose metrics become the version's, a
 * model that does not match the task, a usage error). Part of test_agent.
 */
#include <signal.h>
#include <sys/stat.h>

#include "../support/sl_test.h"
#include "agent_harness.h"

/* ---- TLS: CA and pin --------------------------------------------------------------------- */

static volatile sig_atomic_t tls_stop;

static void stop_when_enrolled(void *ctx, const sl_agent_event *ev)
{
    (void)ctx;
    if (ev->kind == SL_AGENT_EV_ENROLLED)
        tls_stop = 1;
}

static int tls_run(const ag_coord *c, const char *dir, const char *ca, const char *pin,
                   const sl_agent_data *data)
{
    sl_agent_options o;
    sl_agent *a = NULL;
    char err[256];
    int rc;
    ag_base_options(&o, c, 1, dir, data);
    o.ca_file = ca;
    o.pin = pin;
    o.max_attempts = 2;
    o.on_event = stop_when_enrolled;
    o.stop = &tls_stop;
    tls_stop = 0;
    assert_int_equal(sl_agent_create(&o, &a, err, sizeof err), SL_OK);
    rc = sl_agent_run(a);
    sl_agent_free(a);
    return rc;
}

void test_tls_ca_and_pin(void **state)
{
    char dir[512], cert[600], key[600], other[600], other_key[600], pinfile[600], cmd[3000];
    char data_dir[600], sub[700], pin[200],
        wrong_pin[] = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    ag_coord c;
    sl_agent_data *data = NULL;
    void *text = NULL;
    size_t len = 0;
    struct stat sb;
    (void)state;
    if (!ag_have("openssl")) {
        fprintf(stderr, "test_tls_ca_and_pin: no openssl program; skipped\n");
        skip();
    }
    sl_test_mkdtemp(dir, sizeof dir, "agent_tls");
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(other, sizeof other, "%s/other.pem", dir);
    snprintf(other_key, sizeof other_key, "%s/other-key.pem", dir);
    snprintf(pinfile, sizeof pinfile, "%s/pin", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                 "-keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
                 "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
                 i ? other_key : key, i ? other : cert);
        assert_int_equal(system(cmd), 0);
    }
    snprintf(cmd, sizeof cmd,
             "openssl x509 -in %s -pubkey -noout | openssl pkey -pubin -outform der | "
             "openssl dgst -sha256 -binary | openssl base64 -A > %s",
             cert, pinfile);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sl_fs_read_file(pinfile, 1024, &text, &len), SL_OK);
    snprintf(pin, sizeof pin, "sha256//%s", (char *)text);
    free(text);
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ag_make_data(data_dir, 50, 10);
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, NULL, 0), SL_OK);
    ag_coord_open(&c, dir, cert, key, cert);

    /* a CA that did not sign the coordinator: refused, nothing enrolled */
    snprintf(sub, sizeof sub, "%s/a", dir);
    assert_int_equal(tls_run(&c, sub, other, NULL, data), SL_EPERM);
    snprintf(sub, sizeof sub, "%s/a/device.id", dir);
    assert_int_not_equal(stat(sub, &sb), 0);
    /* the right CA but another key's pin: refused */
    snprintf(sub, sizeof sub, "%s/b", dir);
    assert_int_equal(tls_run(&c, sub, cert, wrong_pin, data), SL_EPERM);
    /* the right CA and pin: enrolled */
    snprintf(sub, sizeof sub, "%s/c", dir);
    assert_int_equal(tls_run(&c, sub, cert, pin, data), SL_OK);
    snprintf(sub, sizeof sub, "%s/c/device.id", dir);
    assert_int_equal(stat(sub, &sb), 0);
    snprintf(sub, sizeof sub, "%s/c/device.key", dir);
    assert_int_equal(stat(sub, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    ag_coord_close(&c);
    sl_agent_data_free(data);
    sl_test_rmtree(dir);
}

/* ---- the program ------------------------------------------------------------------------- */

/* The coordinator's starling_http_sent_bytes_total (GET /metrics); @len: the size of that
 * answer's own body, which the next reading counts. */
static uint64_t sent_bytes(ag_coord *c, size_t *len)
{
    sl_client_response r;
    const char *at;
    uint64_t v;
    memset(&r, 0, sizeof r);
    ag_admin(c, "GET", "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    at = strstr((const char *)r.body, "\nstarling_http_sent_bytes_total ");
    assert_non_null(at);
    v = strtoull(at + strlen("\nstarling_http_sent_bytes_total "), NULL, 10);
    *len = r.body_len;
    sl_client_response_free(&r);
    return v;
}

/* The size of GET @path (a model frame or delta, as the operator reads it). */
static uint64_t model_bytes(ag_coord *c, const char *path)
{
    sl_client_response r;
    uint64_t n;
    memset(&r, 0, sizeof r);
    ag_admin(c, "GET", path, NULL, &r);
    assert_int_equal(r.status, 200);
    n = r.body_len;
    sl_client_response_free(&r);
    return n;
}

void test_program(void **state)
{
    char dir[512], data_dir[600], fleet_dir[600], eval_dir[600], bad_dir[600], task_s[32];
    char bad_task_s[32], log[600];
    ag_coord c;
    sl_model_record mr;
    int64_t task, bad_task, version;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_prog");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(fleet_dir, sizeof fleet_dir, "%s/fleet", dir);
    snprintf(eval_dir, sizeof eval_dir, "%s/eval", dir);
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_make_data(data_dir, 600, 200);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp", AG_MLP_TASK("prog", 3, 1));
    bad_task = ag_create_task(&c, "mlp",
                              "{\"name\":\"bad\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
                              "\"selection_window_ms\":100,\"report_deadline_ms\":5000}");
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    snprintf(bad_task_s, sizeof bad_task_s, "%lld", (long long)bad_task);
    {
        const char *args[] = {"--coordinator",
                              c.url,
                              "--task",
                              task_s,
                              "--data",
                              data_dir,
                              "--state-dir",
                              fleet_dir,
                              "--enrolment-token-file",
                              c.enrol_file,
                              "--fleet",
                              "3",
                              "--rounds",
                              "2",
                              "--retry-base",
                              "20ms",
                              "--max-wait",
                              "1s",
                              "--chunk",
                              "16K",
                              "--cut",
                              "0.2",
                              "--log-level",
                              "warn",
                              NULL};
        int code = ag_wait(ag_spawn_agent(args, log), 60000);
        if (code != 0) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log);
            (void)!system(cmd);
            fail_msg("starling-agent --fleet 3 exited %d", code);
        }
    }
    version = ag_model_version(&c, task);
    assert_true(version >= 2);
    {
        const char *args[] = {"--coordinator", c.url,         "--task",
                              task_s,          "--data",      data_dir,
                              "--state-dir",   eval_dir,      "--admin-token-file",
                              c.admin_file,    "--evaluator", "--once",
                              "--log-level",   "warn",        NULL};
        size_t first_len, second_len;
        uint64_t before = sent_bytes(&c, &first_len), after, models, full;
        char path[160];
        assert_int_equal(ag_wait(ag_spawn_agent(args, log), 30000), 0);
        after = sent_bytes(&c, &second_len);
        /* what it had to download: version 1 whole, then each version as the sparse delta
         * from the one before (the devices' path) */
        snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)task);
        full = models = model_bytes(&c, path);
        for (int64_t v = 2; v <= version; v++) {
            snprintf(path, sizeof path, "/v1/models/%lld?task=%lld&base=%lld&sparse=1",
                     (long long)v, (long long)task, (long long)(v - 1));
            models += model_bytes(&c, path);
        }
        /* and no more than a little JSON beside them (the task's documents, the metrics'
         * answers): learning that a version is new costs no model bytes (HEAD, not a GET of
         * the latest model) */
        assert_true(after - before - first_len >= models);
        assert_true(after - before - first_len - models < full / 2);
    }
    /* the evaluator's metrics are the version's */
    assert_int_equal(sl_store_get_model(c.store, task, version, &mr), SL_OK);
    assert_non_null(mr.metrics);
    assert_non_null(strstr(mr.metrics, "accuracy"));
    sl_store_model_free(&mr);
    {
        /* a model that does not match the task's layout: exit 4 */
        const char *args[] = {"--coordinator",
                              c.url,
                              "--task",
                              bad_task_s,
                              "--data",
                              data_dir,
                              "--state-dir",
                              bad_dir,
                              "--enrolment-token",
                              AG_ENROL,
                              "--model",
                              "logreg",
                              "--once",
                              "--retry-base",
                              "20ms",
                              "--max-wait",
                              "1s",
                              "--log-level",
                              "error",
                              NULL};
        assert_int_equal(ag_wait(ag_spawn_agent(args, log), 30000), 4);
    }
    {
        /* usage errors: exit 2 */
        const char *args[] = {"--coordinator", c.url, NULL};
        assert_int_equal(ag_wait(ag_spawn_agent(args, NULL), 10000), 2);
    }
    {
        /* a stall timeout below a second (libcurl counts whole seconds), or not a duration */
        const char *short_args[] = {"--coordinator",   c.url,   "--task", "1",
                                    "--stall-timeout", "500ms", NULL};
        const char *bad_args[] = {"--coordinator",   c.url,  "--task", "1",
                                  "--stall-timeout", "soon", NULL};
        assert_int_equal(ag_wait(ag_spawn_agent(short_args, NULL), 10000), 2);
        assert_int_equal(ag_wait(ag_spawn_agent(bad_args, NULL), 10000), 2);
    }
    {
        /* the heterogeneous fleet's options: --links MIN:MAX bits per second (MIN <= MAX, each
         * a finite number > 0, k or M), --speeds in [1, 1000], both only for a fleet; exit 2
         * and the option named on stderr, nothing enrolled */
        static const struct {
            const char *opt, *value, *fleet, *said;
        } bad[] = {
            {"--links", "64k", "4", "--links wants MIN:MAX"},
            {"--links", "20M:64k", "4", "--links wants MIN:MAX"},
            {"--links", "0:1M", "4", "--links wants MIN:MAX"},
            {"--links", "x:1M", "4", "--links wants MIN:MAX"},
            {"--links", "64k:1M:2M", "4", "--links wants MIN:MAX"},
            {"--links", "nan:1M", "4", "--links wants MIN:MAX"},
            {"--links", "64k:inf", "4", "--links wants MIN:MAX"},
            {"--links", "-64k:1M", "4", "--links wants MIN:MAX"},
            {"--speeds", "0.5", "4", "speeds"},
            {"--speeds", "1001", "4", "speeds"},
            {"--speeds", "fast", "4", "speeds"},
            {"--links", "64k:1M", "0", "are fleet faults (--fleet N)"},
            {"--speeds", "4", "0", "are fleet faults (--fleet N)"},
        };
        char opt_log[700];
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            const char *args[] = {"--coordinator",
                                  c.url,
                                  "--task",
                                  "1",
                                  "--state-dir",
                                  bad_dir,
                                  "--enrolment-token",
                                  AG_ENROL,
                                  "--fleet",
                                  bad[i].fleet,
                                  bad[i].opt,
                                  bad[i].value,
                                  NULL};
            char *text = NULL;
            size_t len = 0;
            snprintf(opt_log, sizeof opt_log, "%s/opt-%zu.log", dir, i);
            assert_int_equal(ag_wait(ag_spawn_agent(args, opt_log), 10000), 2);
            assert_int_equal(sl_fs_read_file(opt_log, 1 << 20, (void **)&text, &len), SL_OK);
            if (text == NULL || memmem(text, len, bad[i].said, strlen(bad[i].said)) == NULL)
                fail_msg("%s %s: no \"%s\" in its stderr: %.*s", bad[i].opt, bad[i].value,
                         bad[i].said, (int)len, text ? text : "");
            free(text);
        }
    }
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}
