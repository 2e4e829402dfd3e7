/*
 * bench_fl_proc.c - one setting of `starling bench fl` through the real
 * programs on loopback: starling-coordinator (plain HTTP on 127.0.0.1, a
 * port of the kernel's choosing, its own data directory), `starling task
 * create`, one evaluator (starling-agent --evaluator) and a fleet
 * (starling-agent --fleet N). The rounds are followed through the REST API
 * (GET /v1/status, /v1/rounds, /v1/rounds/{id}) with one plain line per
 * round; the figures come from the coordinator's database once it stopped.
 *
 * The fleet checks in at least every 2 s (--max-wait 2s): with a generous
 * report deadline the coordinator otherwise paces devices that finished
 * early to come back near the deadline, and on loopback the benchmark
 * would measure that waiting instead of the protocol.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench.h"
#include "bench_fl_int.h"
#include "starling/api_client.h"
#include "starling/common.h"

extern char **environ;

volatile int sl__bench_fl_interrupted;

#define STOP_GRACE_MS 20000
#define PORT_WAIT_MS  15000

typedef struct fl_procs {
    pid_t coordinator, evaluator, fleet;
} fl_procs;

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !sl__bench_fl_interrupted)
        ;
}

static int64_t now_ms(void)
{
    return sl_bench_now_ns() / 1000000;
}

/* Start @argv[0] with stdout to @out_path and stderr to @err_path (the same file when equal). */
static int spawn(char *const argv[], const char *out_path, const char *err_path, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    int rc;
    if (posix_spawn_file_actions_init(&fa) != 0)
        return ENOMEM;
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (strcmp(out_path, err_path) == 0)
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    else
        posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    rc = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* 1 when @pid has exited (its status in *status), 0 while it runs. */
static int exited(pid_t pid, int *status)
{
    return pid > 0 && waitpid(pid, status, WNOHANG) == pid;
}

/* SIGTERM, then SIGKILL after STOP_GRACE_MS. */
static void stop(pid_t *pid)
{
    int status;
    if (*pid <= 0)
        return;
    kill(*pid, SIGTERM);
    for (int64_t waited = 0; waited < STOP_GRACE_MS; waited += 50) {
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = 0;
            return;
        }
        sleep_ms(50);
    }
    kill(*pid, SIGKILL);
    waitpid(*pid, &status, 0);
    *pid = 0;
}

static void stop_all(fl_procs *p)
{
    /* the fleet first (it prints its totals), then the evaluator, then the coordinator */
    stop(&p->fleet);
    stop(&p->evaluator);
    stop(&p->coordinator);
}

static int write_text(const char *path, const char *text)
{
    return sl_fs_write_atomic(path, text, strlen(text), 0600) == SL_OK ? 0 : -1;
}

/* A random token (hex) for this run's admin and enrolment token files. */
static void make_token(char *out, size_t cap)
{
    uint8_t raw[18];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f != NULL ? fread(raw, 1, sizeof raw, f) : 0;
    if (f != NULL)
        fclose(f);
    for (size_t i = got; i < sizeof raw; i++)
        raw[i] = (uint8_t)(now_ms() >> (i % 8));
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < cap; i++)
        snprintf(out + 2 * i, cap - 2 * i, "%02x", raw[i]);
}

/* The port from the coordinator's "coordinator ready: ... (port N)" log line. */
static int wait_port(const char *log, pid_t coordinator, unsigned *port, char *err, size_t cap)
{
    int status;
    for (int64_t waited = 0; waited < PORT_WAIT_MS && !sl__bench_fl_interrupted; waited += 50) {
        void *text = NULL;
        size_t len = 0;
        if (sl_fs_read_file(log, 1 << 20, &text, &len) == SL_OK) {
            const char *ready = strstr(text, "coordinator ready:");
            const char *p = ready ? strstr(ready, "(port ") : NULL;
            unsigned long v = p ? strtoul(p + 6, NULL, 10) : 0;
            free(text);
            if (v > 0 && v < 65536) {
                *port = (unsigned)v;
                return 0;
            }
        }
        if (exited(coordinator, &status)) {
            snprintf(err, cap, "the coordinator exited at start (status %d): see %s",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, log);
            return -1;
        }
        sleep_ms(50);
    }
    snprintf(err, cap, "the coordinator did not report its port within %d s: see %s",
             PORT_WAIT_MS / 1000, log);
    return -1;
}

/* --task mode: the task file's configuration with the bench's fleet (every client every
 * round), rounds, seed and the setting's compression, its model spec and data contract. */
static int write_file_task(const fl_setup *su, const fl_setting *st, const char *path)
{
    cJSON *cfg = cJSON_Parse(su->task_config), *doc = cJSON_CreateObject(), *init;
    char name[96], *text = NULL;
    int rc = -1;
    snprintf(name, sizeof name, "bench-fl-%s", st->name);
#define SET_NUM(key, v)                                 \
    (cJSON_DeleteItemFromObjectCaseSensitive(cfg, key), \
     cJSON_AddNumberToObject(cfg, key, v) != NULL)
#define SET_STR(key, v)                                 \
    (cJSON_DeleteItemFromObjectCaseSensitive(cfg, key), \
     cJSON_AddStringToObject(cfg, key, v) != NULL)
#define SET_BOOL(key, v) \
    (cJSON_DeleteItemFromObjectCaseSensitive(cfg, key), cJSON_AddBoolToObject(cfg, key, v) != NULL)
    if (cfg == NULL || doc == NULL || !SET_STR("name", name) || !SET_NUM("rounds", su->rounds) ||
        !SET_NUM("target", su->target) || !SET_NUM("over_selection", su->over_selection) ||
        !SET_NUM("quorum", su->quorum) || !SET_NUM("selection_window_ms", (double)su->window_ms) ||
        !SET_NUM("report_deadline_ms", (double)su->deadline_ms) ||
        !SET_NUM("local_epochs", su->epochs) || !SET_NUM("seed", (double)su->seed))
        goto done;
    if (!st->as_task) {
        if (!st->is_default && (!SET_STR("values", st->values) || !SET_NUM("density", st->density)))
            goto done;
        if (st->scope[0] != '\0' && !SET_STR("topk_scope", st->scope))
            goto done;
        if (st->feedback[0] != '\0' && !SET_STR("error_feedback", st->feedback))
            goto done;
        if (st->decay > 0 && !SET_NUM("residual_decay", st->decay))
            goto done;
        if (st->aggregator[0] != '\0' && !SET_STR("aggregator", st->aggregator))
            goto done;
        if (st->server_lr > 0 && !SET_NUM("server_lr", st->server_lr))
            goto done;
        if (st->ramp_given && !SET_NUM("server_lr_ramp", st->server_lr_ramp))
            goto done;
        if (st->server_lr_ramp > 0 && !SET_NUM("server_lr_boost", st->server_lr_boost))
            goto done;
        /* the task file's configuration is canonical (every key named, the fade's length in
         * one of the two keys): a setting's fade names both lengths and the share, as a new
         * task naming sender_mean_rounds gets it (times the share unless @byp) */
        if (st->sm_given && (!SET_NUM("sender_mean_rounds", st->sender_mean_rounds) ||
                             !SET_NUM("sender_mean_epochs", st->sender_mean_epochs) ||
                             !SET_BOOL("sender_mean_share",
                                       st->sender_mean_rounds > 0 && !st->sm_by_participations)))
            goto done;
        if ((st->sender_mean_rounds > 0 || st->sender_mean_epochs > 0) &&
            !SET_NUM("sender_mean", st->sender_mean))
            goto done;
        if (st->sm_by_participations && !SET_BOOL("sender_mean_share", 0))
            goto done;
        /* sender_mean_fresh: the coordinator's default for a new task with a senders' mean */
        if ((st->sm_given || st->sm_not_fresh) &&
            !SET_BOOL(
                "sender_mean_fresh",
                !st->sm_not_fresh &&
                    (st->sm_given ? st->sender_mean_rounds > 0 || st->sender_mean_epochs > 0 : 1)))
            goto done;
        /* sender_mean_partial: the coordinator's default for a new task with sender_mean_epochs
         * (a setting's fade by participations has none) */
        if ((st->part_given || st->sm_given) &&
            !SET_NUM("sender_mean_partial", st->part_given ? st->sender_mean_partial
                                            : st->sender_mean_epochs > 0
                                                ? SL_SENDER_MEAN_PARTIAL_DEFAULT
                                                : 0))
            goto done;
        if (st->warmup_rounds > 0 && (!SET_NUM("warmup_rounds", st->warmup_rounds) ||
                                      !SET_NUM("warmup_density", st->warmup_density)))
            goto done;
    }
#undef SET_NUM
#undef SET_STR
#undef SET_BOOL
    if (!cJSON_AddItemToObject(doc, "config", cfg)) /* the document owns it from here */
        goto done;
    cfg = NULL;
    init = cJSON_AddObjectToObject(doc, "init");
    if (init == NULL || cJSON_AddStringToObject(init, "spec_file", su->spec_file) == NULL ||
        cJSON_AddNumberToObject(init, "seed", (double)su->init_seed) == NULL ||
        cJSON_AddStringToObject(doc, "data_contract_file", su->contract_file) == NULL)
        goto done;
    text = cJSON_Print(doc);
    if (text != NULL)
        rc = write_text(path, text);
done:
    free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(doc);
    return rc;
}

static int write_task(const fl_setup *su, const fl_setting *st, const char *path)
{
    char text[2048], vd[256] = "", decay[64] = "", agg[64] = "fedavg", slr[512] = "";
    if (st->decay > 0)
        snprintf(decay, sizeof decay, "\"residual_decay\": %.17g, ", st->decay);
    if (st->aggregator[0] != '\0')
        snprintf(agg, sizeof agg, "%s", st->aggregator);
    if (st->server_lr > 0)
        snprintf(slr, sizeof slr, "\"server_lr\": %.17g, ", st->server_lr);
    if (st->warmup_rounds > 0)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr),
                 "\"warmup_rounds\": %u, \"warmup_density\": %.17g, ", st->warmup_rounds,
                 st->warmup_density);
    if (st->server_lr_ramp > 0)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr),
                 "\"server_lr_ramp\": %u, \"server_lr_boost\": %.17g, ", st->server_lr_ramp,
                 st->server_lr_boost);
    else if (st->ramp_given)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"server_lr_ramp\": 0, ");
    if (st->sender_mean_rounds > 0)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr),
                 "\"sender_mean_rounds\": %u, \"sender_mean\": %.17g, ", st->sender_mean_rounds,
                 st->sender_mean);
    else if (st->sm_given)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"sender_mean_rounds\": 0, ");
    if (st->sender_mean_epochs > 0)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr),
                 "\"sender_mean_epochs\": %u, \"sender_mean\": %.17g, ", st->sender_mean_epochs,
                 st->sender_mean);
    if (st->sm_by_participations)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"sender_mean_share\": false, ");
    if (st->sm_not_fresh)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"sender_mean_fresh\": false, ");
    if (st->part_given)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"sender_mean_partial\": %u, ",
                 st->sender_mean_partial);
    if (st->budget) { /* as many steps as fit, between a quarter of and the epochs' worth of an
                       * average client (a floor keeps FedNova's extrapolation of short runs
                       * bounded: 1 step against 252 diverged) */
        unsigned most = su->epochs * ((60000u / (su->clients ? su->clients : 1) + su->batch - 1) /
                                      (su->batch ? su->batch : 1));
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr),
                 "\"time_budget\": true, \"min_local_steps\": %u, \"max_local_steps\": %u, ",
                 most / 4 > 0 ? most / 4 : 1, most);
    }
    if (st->fednova)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"fednova\": true, ");
    if (st->percentile > 0)
        snprintf(slr + strlen(slr), sizeof slr - strlen(slr), "\"deadline_percentile\": %u, ",
                 st->percentile);
    if (su->task_config != NULL)
        return write_file_task(su, st, path);
    if (!st->is_default)
        snprintf(vd, sizeof vd, "\"values\": \"%s\", \"density\": %.17g, %s%s%s%s%s%s%s",
                 st->values, st->density, st->scope[0] ? "\"topk_scope\": \"" : "", st->scope,
                 st->scope[0] ? "\", " : "", st->feedback[0] ? "\"error_feedback\": \"" : "",
                 st->feedback, st->feedback[0] ? "\", " : "", decay);
    snprintf(text, sizeof text,
             "{\"config\": {\"name\": \"bench-fl-%s\", \"rounds\": %u, \"target\": %u, "
             "\"over_selection\": %.17g, \"quorum\": %u, \"selection_window_ms\": %lld, "
             "\"report_deadline_ms\": %lld, %s\"local_epochs\": %u, \"batch\": %u, "
             "\"local_lr\": %.17g, \"local_momentum\": %.17g, %s\"aggregator\": \"%s\", "
             "\"seed\": %llu},\n \"init\": {\"model\": \"%s\", \"seed\": 1}}\n",
             st->name, su->rounds, su->target, su->over_selection, su->quorum,
             (long long)su->window_ms, (long long)su->deadline_ms, vd, su->epochs, su->batch,
             su->lr, su->momentum, slr, agg, (unsigned long long)su->seed, su->model);
    return write_text(path, text);
}

/* `starling task create`: the task id, or 0 (reason in @err). */
static int64_t create_task(const fl_setup *su, const char *dir, const char *url, char *err,
                           size_t cap)
{
    char task[FL_FILE_MAX], admin[FL_FILE_MAX], out[FL_FILE_MAX];
    char *argv[] = {(char *)su->self, "task", "create", "--url", (char *)url,
                    "--token-file",   admin,  task,     NULL};
    void *text = NULL;
    size_t len = 0;
    long long id = 0;
    pid_t pid;
    int status = -1;
    snprintf(task, sizeof task, "%s/task.json", dir);
    snprintf(admin, sizeof admin, "%s/admin.token", dir);
    snprintf(out, sizeof out, "%s/task.out", dir);
    if (spawn(argv, out, out, &pid) != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0 || sl_fs_read_file(out, 1 << 16, &text, &len) != SL_OK ||
        sscanf((const char *)text, "task %lld", &id) != 1 || id <= 0) {
        snprintf(err, cap, "starling task create failed: see %s", out);
        free(text);
        return 0;
    }
    free(text);
    return (int64_t)id;
}

static int start_agents(const fl_setup *su, const fl_setting *st, const char *dir, const char *url,
                        int64_t task, fl_procs *p, char *err, size_t cap)
{
    char tid[32], of[32], seed[32], ev_state[FL_FILE_MAX], fl_state[FL_FILE_MAX];
    char dropout[32], cut[32], straggle[64], speeds[32];
    char admin[FL_FILE_MAX], enrol[FL_FILE_MAX], log1[FL_FILE_MAX];
    char out2[FL_FILE_MAX], log2[FL_FILE_MAX];
    snprintf(tid, sizeof tid, "%lld", (long long)task);
    snprintf(of, sizeof of, "%u", su->clients);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)su->seed);
    snprintf(ev_state, sizeof ev_state, "%s/evaluator", dir);
    snprintf(fl_state, sizeof fl_state, "%s/fleet", dir);
    snprintf(admin, sizeof admin, "%s/admin.token", dir);
    snprintf(enrol, sizeof enrol, "%s/enrol.token", dir);
    snprintf(log1, sizeof log1, "%s/evaluator.log", dir);
    snprintf(out2, sizeof out2, "%s/fleet.out", dir);
    snprintf(log2, sizeof log2, "%s/fleet.log", dir);
    snprintf(dropout, sizeof dropout, "%.17g", su->dropout);
    snprintf(cut, sizeof cut, "%.17g", su->cut);
    snprintf(straggle, sizeof straggle, "%.17g:%.17g", su->straggle,
             su->straggle_factor < 1 ? 1.0 : su->straggle_factor);
    snprintf(speeds, sizeof speeds, "%.17g", su->speeds);
    {
        char *argv[] = {(char *)su->agent,
                        "--coordinator",
                        (char *)url,
                        "--task",
                        tid,
                        "--evaluator",
                        "--eval-interval",
                        "500ms",
                        "--admin-token-file",
                        admin,
                        "--enrolment-token-file",
                        enrol,
                        "--state-dir",
                        ev_state,
                        "--data",
                        (char *)(su->eval_data[0] != '\0' ? su->eval_data : su->data),
                        "--log-level",
                        "warn",
                        NULL};
        if (spawn(argv, log1, log1, &p->evaluator) != 0) {
            snprintf(err, cap, "cannot start %s: %s", su->agent, strerror(errno));
            return -1;
        }
    }
    {
        char *argv[] = {(char *)su->agent,
                        "--coordinator",
                        (char *)url,
                        "--task",
                        tid,
                        "--fleet",
                        of,
                        "--of",
                        of,
                        "--partition",
                        (char *)su->partition,
                        "--data",
                        (char *)su->data,
                        "--seed",
                        seed,
                        "--threads",
                        "1",
                        "--max-wait",
                        "2s",
                        "--dropout",
                        dropout,
                        "--cut",
                        cut,
                        "--straggle",
                        straggle,
                        "--enrolment-token-file",
                        enrol,
                        "--state-dir",
                        fl_state,
                        "--log-level",
                        "warn",
                        NULL, /* --data_contract FILE in --task mode */
                        NULL,
                        NULL, /* a heterogeneous fleet: --speeds MAX --links MIN:MAX */
                        NULL,
                        NULL,
                        NULL,
                        NULL, /* @nosplit: --split-positions=false */
                        NULL};
        size_t k = sizeof argv / sizeof argv[0] - 8;
        if (su->contract_file[0] != '\0') {
            argv[k++] = "--data_contract";
            argv[k++] = (char *)su->contract_file;
        }
        if (su->speeds > 1) {
            argv[k++] = "--speeds";
            argv[k++] = speeds;
        }
        if (su->links[0] != '\0') {
            argv[k++] = "--links";
            argv[k++] = (char *)su->links;
        }
        if (st->no_split)
            argv[k++] = "--split-positions=false";
        if (spawn(argv, out2, log2, &p->fleet) != 0) {
            snprintf(err, cap, "cannot start %s: %s", su->agent, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* GET @path: the parsed JSON of a 200 answer, else NULL. */
static cJSON *get_json(sl_client *c, const char *path)
{
    sl_client_response r;
    cJSON *j = NULL;
    memset(&r, 0, sizeof r);
    if (sl_client_request(c, "GET", path, NULL, 0, NULL, NULL, &r) == SL_OK && r.status == 200 &&
        r.body != NULL)
        j = cJSON_Parse((const char *)r.body);
    sl_client_response_free(&r);
    return j;
}

static double num(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Follow state between polls. */
typedef struct follow {
    int64_t next_no;       /* the next round number to print */
    int64_t pending_since; /* when round next_no closed without metrics (0: not yet) */
    int64_t last_progress; /* when a round last ended */
    double cum_up;
} follow;

/* Print the ended rounds from next_no on, in order. 1: the task is done. -1: error. */
static int poll_rounds(const fl_setup *su, const fl_setting *st, sl_client *c, int64_t task,
                       follow *f, int64_t start)
{
    char path[128];
    cJSON *status, *list, *t, *r;
    int finished = 0, open_left = 0, waiting = 0;
    if ((status = get_json(c, "/v1/status")) == NULL)
        return -1;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(status, "tasks"))
    {
        if ((int64_t)num(t, "task_id", 0) == task)
            finished = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "finished"));
    }
    cJSON_Delete(status);
    snprintf(path, sizeof path, "/v1/rounds?task=%lld&limit=1000", (long long)task);
    if ((list = get_json(c, path)) == NULL)
        return -1;
    for (;;) { /* the rounds come newest first: find next_no */
        const cJSON *hit = NULL;
        cJSON *detail;
        const char *state;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(list, "rounds"))
        {
            if ((int64_t)num(r, "round_no", 0) == f->next_no)
                hit = r;
        }
        if (hit == NULL)
            break;
        state = str(hit, "state");
        if (strcmp(state, "closed") != 0 && strcmp(state, "abandoned") != 0) {
            open_left = 1;
            break;
        }
        snprintf(path, sizeof path, "/v1/rounds/%.0f", num(hit, "round_id", 0));
        if ((detail = get_json(c, path)) == NULL)
            break;
        if (strcmp(state, "closed") == 0 &&
            !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(detail, "model_metrics"))) {
            /* in order: give the evaluator up to a minute for the new version */
            if (f->pending_since == 0)
                f->pending_since = now_ms();
            if (now_ms() - f->pending_since < 60000) {
                cJSON_Delete(detail);
                waiting = 1;
                break;
            }
        }
        {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(detail, "model_metrics");
            const cJSON *fe = cJSON_GetObjectItemCaseSensitive(detail, "evaluation");
            char up[24], acc[32], fed[48] = "";
            double bytes_up = num(detail, "bytes_up", 0);
            f->cum_up += bytes_up;
            sl_fl_human_bytes(f->cum_up, up, sizeof up);
            if (cJSON_IsObject(m) && !isnan(num(m, "accuracy", NAN)))
                snprintf(acc, sizeof acc, "%.2f%%", 100.0 * num(m, "accuracy", NAN));
            else if (cJSON_IsObject(m) && !isnan(num(m, "rmse", NAN)))
                snprintf(acc, sizeof acc, "rmse %.4g", num(m, "rmse", NAN));
            else
                snprintf(acc, sizeof acc, "-");
            if (cJSON_IsObject(fe) && num(fe, "devices", 0) > 0)
                snprintf(fed, sizeof fed, "  fed. eval %.0f devices %s %.4g", num(fe, "devices", 0),
                         isnan(num(fe, "accuracy", NAN)) ? "rmse" : "acc",
                         isnan(num(fe, "accuracy", NAN)) ? num(fe, "rmse", NAN)
                                                         : num(fe, "accuracy", NAN));
            fprintf(su->progress,
                    "  %-14s round %3lld/%u  %-9s  reported %2.0f/%-2.0f  acc %7s  "
                    "up %9s total  %5.0f s%s\n",
                    st->name, (long long)f->next_no, su->rounds, state, num(detail, "reported", 0),
                    num(detail, "selected", 0), acc, up, (double)(now_ms() - start) / 1000.0, fed);
            fflush(su->progress);
        }
        cJSON_Delete(detail);
        f->next_no++;
        f->pending_since = 0;
        f->last_progress = now_ms();
    }
    cJSON_Delete(list);
    return finished && !open_left && !waiting && f->next_no > 1 ? 1 : 0;
}

static int run_programs(const fl_setup *su, const fl_setting *st, fl_result *out, fl_procs *p,
                        int64_t *task_out)
{
    char dir[FL_DIR_MAX], path[FL_FILE_MAX], log[FL_FILE_MAX], data[FL_FILE_MAX];
    char admin[FL_FILE_MAX], enrol[FL_FILE_MAX], url[64], token[64];
    sl_client_options co;
    sl_client *c = NULL;
    unsigned port = 0;
    int64_t task, start = now_ms();
    follow f = {1, 0, 0, 0};
    int rc = -1, status;

    snprintf(dir, sizeof dir, "%s", out->dir);
    snprintf(log, sizeof log, "%s/coordinator.log", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(admin, sizeof admin, "%s/admin.token", dir);
    snprintf(enrol, sizeof enrol, "%s/enrol.token", dir);
    snprintf(path, sizeof path, "%s/task.json", dir);
    make_token(token, sizeof token);
    if (write_text(admin, token) != 0 || write_task(su, st, path) != 0) {
        snprintf(out->error, sizeof out->error, "cannot write into %s", dir);
        return -1;
    }
    make_token(url, sizeof url); /* the enrolment token: another random value */
    if (write_text(enrol, url) != 0) {
        snprintf(out->error, sizeof out->error, "cannot write into %s", dir);
        return -1;
    }
    {
        char *argv[] = {(char *)su->coordinator,
                        "--insecure-http",
                        "--listen",
                        "127.0.0.1:0",
                        "--data-dir",
                        data,
                        "--admin-token-file",
                        admin,
                        "--enrolment-token-file",
                        enrol,
                        "--public-status",
                        "--log-level",
                        "info",
                        NULL};
        if (spawn(argv, log, log, &p->coordinator) != 0) {
            snprintf(out->error, sizeof out->error, "cannot start %s: %s", su->coordinator,
                     strerror(errno));
            return -1;
        }
    }
    if (wait_port(log, p->coordinator, &port, out->error, sizeof out->error) != 0)
        return -1;
    snprintf(url, sizeof url, "http://127.0.0.1:%u", port);
    if ((task = create_task(su, dir, url, out->error, sizeof out->error)) == 0 ||
        start_agents(su, st, dir, url, task, p, out->error, sizeof out->error) != 0)
        return -1;
    *task_out = task;
    memset(&co, 0, sizeof co);
    co.base_url = url;
    co.admin_token = token;
    co.max_attempts = 3;
    co.request_timeout_ms = 30000;
    if (sl_client_create(&co, &c) != SL_OK) {
        snprintf(out->error, sizeof out->error, "cannot make a client of %s", url);
        return -1;
    }
    f.last_progress = now_ms();
    for (;;) {
        int done;
        if (sl__bench_fl_interrupted) {
            snprintf(out->error, sizeof out->error, "interrupted");
            break;
        }
        {
            pid_t *who[3] = {&p->coordinator, &p->fleet, &p->evaluator};
            static const char *const names[3] = {"coordinator", "fleet", "evaluator"};
            int dead = 0;
            for (int k = 0; k < 3 && !dead; k++)
                if (exited(*who[k], &status)) {
                    *who[k] = 0; /* reaped */
                    snprintf(out->error, sizeof out->error,
                             "the %s exited during the run (status %d): see the logs in %s",
                             names[k], WIFEXITED(status) ? WEXITSTATUS(status) : -1, dir);
                    dead = 1;
                }
            if (dead)
                break;
        }
        done = poll_rounds(su, st, c, task, &f, start);
        if (done < 0) {
            snprintf(out->error, sizeof out->error, "the coordinator at %s stopped answering", url);
            break;
        }
        if (done) {
            rc = 0;
            break;
        }
        /* no wait without a deadline: a round must end within its window and deadline */
        if (now_ms() - f.last_progress > su->window_ms + su->deadline_ms + 180000) {
            snprintf(out->error, sizeof out->error,
                     "no round ended for %lld s (round %lld): see the logs in %s",
                     (long long)((now_ms() - f.last_progress) / 1000), (long long)f.next_no, dir);
            break;
        }
        sleep_ms(500);
    }
    out->wall_s = (double)(now_ms() - start) / 1000.0;
    sl_client_free(c);
    return rc;
}

/* The optimiser steps the fleet's devices ran (each one's counters file): 0 when unknown. */
static uint64_t fleet_steps(const char *dir, uint32_t devices)
{
    uint64_t sum = 0;
    for (uint32_t k = 0; k < devices; k++) {
        char path[FL_FILE_MAX + 32], line[256];
        FILE *f;
        snprintf(path, sizeof path, "%s/fleet/dev-%u/counters", dir, k);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL)
            if (strncmp(line, "steps_trained=", 14) == 0)
                sum += strtoull(line + 14, NULL, 10);
        fclose(f);
    }
    return sum;
}

int sl__bench_fl_run_setting(const fl_setup *su, const fl_setting *st, fl_result *out)
{
    char data[FL_FILE_MAX];
    fl_procs p = {0, 0, 0};
    int64_t task = 0;
    int rc;

    out->ok = 0;
    out->error[0] = '\0';
    snprintf(out->dir, sizeof out->dir, "%s/%s", su->workdir, st->name);
    if (mkdir(out->dir, 0700) != 0) {
        snprintf(out->error, sizeof out->error, "%s: %s%s", out->dir, strerror(errno),
                 errno == EEXIST ? " (choose a new --dir)" : "");
        return -1;
    }
    rc = run_programs(su, st, out, &p, &task);
    stop_all(&p);
    if (rc != 0)
        return -1;
    out->trained_steps = fleet_steps(out->dir, su->clients);
    snprintf(data, sizeof data, "%s/data", out->dir);
    if (sl_fl_run_load(data, task, &out->run, out->error, sizeof out->error) != 0)
        return -1;
    sl_fl_run_totals(&out->run, su->acc_target, &out->totals);
    out->ok = 1;
    return 0;
}
