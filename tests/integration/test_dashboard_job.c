/* test_dashboard_job.c - the simulated job and a child-process runner; see test_dashboard.h. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "../support/sl_test.h"
#include "starling/common.h"
#include "test_dashboard.h"

#define TD_TASK                                                                             \
    "{\"config\":{\"name\":\"dash-demo\",\"target\":2,\"quorum\":2,\"over_selection\":1.5," \
    "\"selection_window_ms\":%d,\"report_deadline_ms\":60000,\"values\":\"fp16\","          \
    "\"density\":0.25,\"retain_last\":2},\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%%s\"}"

static int g_public;

static void tweak(sl_server_options *o)
{
    o->public_status = g_public;
}

char *td_get(td_job *j, const char *path)
{
    ah_resp r;
    char *body;
    ah_admin(&j->f, "GET", path, NULL, 0, &r);
    if (r.status != 200)
        fail_msg("GET %s: %ld %s", path, r.status, r.body);
    body = r.body;
    r.body = NULL;
    ah_resp_free(&r);
    return body;
}

/* Devices 0..2 join the pool, and are selected once the window closed (500 ms: three
 * signed check-ins fit in it on a loaded machine; 150 ms did not always). */
static int64_t select_three(td_job *j, int64_t *version)
{
    ah_resp r;
    int64_t round = 0;
    for (int i = 0; i < 3; i++) {
        ah_checkin(&j->f, &j->dev[i], j->task, &r);
        ah_resp_free(&r);
    }
    usleep((useconds_t)(800000 * sl_test_time_scale()));
    for (int i = 0; i < 3; i++) {
        ah_checkin(&j->f, &j->dev[i], j->task, &r);
        if (ah_json_int(r.body, "selected") != 1)
            fail_msg("device %d not selected: %s", i, r.body);
        round = ah_json_int(r.body, "round_id");
        *version = ah_json_int(r.body, "model_version");
        ah_resp_free(&r);
    }
    return round;
}

static void upload(td_job *j, const sl_layout *layout, int dev, int64_t round, int64_t version,
                   float v)
{
    void *frame;
    size_t len;
    ah_resp r;
    ah_update(layout, round, version, v, &frame, &len);
    ah_upload_all(&j->f, &j->dev[dev], round, frame, len, NULL, &r);
    if (r.status != 200)
        fail_msg("upload of device %d: %ld %s", dev, r.status, r.body);
    ah_resp_free(&r);
    free(frame);
}

static void evaluate(td_job *j, int64_t version, double accuracy)
{
    char path[96], body[160];
    ah_resp r;
    snprintf(path, sizeof path, "/v1/models/%lld/metrics", (long long)version);
    snprintf(body, sizeof body,
             "{\"task_id\":%lld,\"loss\":%.4f,\"accuracy\":%.4f,\"samples\":1000}",
             (long long)j->task, 2.0 * (1.0 - accuracy), accuracy);
    ah_admin(&j->f, "POST", path, body, strlen(body), &r);
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);
}

void td_job_run(td_job *j, const char *name, int public_status)
{
    sl_layout *layout;
    int64_t round, version;
    ah_resp r;
    memset(j, 0, sizeof *j);
    g_public = public_status;
    ah_fx_open(&j->f, name, tweak);
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    {
        char fmt[512];
        snprintf(fmt, sizeof fmt, TD_TASK, 500 * sl_test_time_scale());
        j->task = ah_create_task(&j->f, fmt);
    }
    for (int i = 0; i < TD_DEVICES; i++)
        ah_dev_enrol(&j->f, &j->dev[i]);

    for (int n = 1; n <= TD_CLOSED; n++) {
        char late_id[40];
        void *late = NULL;
        size_t late_len = 0;
        round = select_three(j, &version);
        if (n == 2) { /* device 2 starts an upload the round will not wait for */
            ah_update(layout, round, version, 0.375f, &late, &late_len);
            ah_upload_create(&j->f, &j->dev[2], round, late, late_len, NULL, late_id,
                             sizeof late_id);
            ah_upload_patch(&j->f, &j->dev[2], late_id, 0, late, 10, &r);
            assert_int_equal(r.status, 204);
            ah_resp_free(&r);
        }
        upload(j, layout, 0, round, version, 0.25f * (float)n);
        upload(j, layout, 1, round, version, -0.125f * (float)n); /* the target: it closes */
        if (late != NULL) {
            ah_upload_patch(&j->f, &j->dev[2], late_id, 10, (char *)late + 10, late_len - 10, &r);
            ah_expect_reason(&r, 410, "late", "late");
            ah_resp_free(&r);
            free(late);
        }
        j->round_ids[j->nrounds++] = round;
        if (n != 3) { /* version n + 1 has no evaluator metrics */
            evaluate(j, version + 1, 0.42 + 0.1 * n);
            j->evaluated++;
        }
    }
    /* a round the operator aborts after one report */
    round = select_three(j, &version);
    upload(j, layout, 0, round, version, 0.5f);
    {
        char path[96];
        snprintf(path, sizeof path, "/v1/rounds/%lld/abort", (long long)round);
        ah_admin(&j->f, "POST", path, "", 0, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
    }
    j->round_ids[j->nrounds++] = round;
    /* the round in progress: one report, device 1 fetched the model (training),
     * device 2 did not (downloading), and device 1's own metrics on its base version */
    round = select_three(j, &version);
    upload(j, layout, 0, round, version, 0.75f);
    {
        char path[96];
        snprintf(path, sizeof path, "/v1/models/%lld?task=%lld", (long long)version,
                 (long long)j->task);
        ah_dev_call(&j->f, &j->dev[1], "GET", path, NULL, 0, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
    }
    {
        char path[96], body[128];
        snprintf(path, sizeof path, "/v1/models/%lld/metrics", (long long)version);
        snprintf(body, sizeof body,
                 "{\"task_id\":%lld,\"loss\":0.9,\"accuracy\":0.66,\"samples\":100}",
                 (long long)j->task);
        ah_dev_call(&j->f, &j->dev[1], "POST", path, body, strlen(body), NULL, 0, &r);
        assert_int_equal(r.status, 204);
        ah_resp_free(&r);
    }
    j->round_ids[j->nrounds++] = round;
    sl_layout_free(layout);
}

void td_job_close(td_job *j)
{
    for (int i = 0; i < TD_DEVICES; i++)
        ah_dev_free(&j->dev[i]);
    ah_fx_close(&j->f);
}

/* ---- child processes ------------------------------------------------------------- */

static char *slurp(const char *path)
{
    void *data = NULL;
    size_t len = 0;
    if (sl_fs_read_file(path, 64u << 20, &data, &len) != SL_OK) {
        data = calloc(1, 1);
        assert_non_null(data);
    }
    return data;
}

int td_run(char *const *argv, const char *const *env, int timeout_s, char **out, char **err)
{
    char dir[512], out_path[600], err_path[600];
    int status, code = -1;
    pid_t pid;
    sl_test_mkdtemp(dir, sizeof dir, "td_run");
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fi = open("/dev/null", O_RDONLY);
        setpgid(0, 0); /* so a timeout can end the program and every child it started */
        if (fo < 0 || fe < 0 || fi < 0)
            _exit(126);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        for (size_t i = 0; env != NULL && env[i] != NULL; i++)
            putenv((char *)env[i]);
        if (strchr(argv[0], '/') != NULL && access(argv[0], X_OK) == 0 &&
            strncmp(argv[0], "/usr/", 5) != 0)
            sl_test_execv(argv[0], argv); /* a program of this build (emulated when cross) */
        else
            execvp(argv[0], argv);
        _exit(127);
    }
    for (int waited = 0; waited <= timeout_s * 100; waited++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        usleep(10000);
    }
    if (code == -1) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
    } else {
        kill(-pid, SIGKILL); /* helpers a browser may have left behind */
    }
    if (out != NULL)
        *out = slurp(out_path);
    if (err != NULL)
        *err = slurp(err_path);
    sl_test_rmtree(dir);
    return code;
}
