/*
 * bench_fl_torch.c - the PyTorch side of `starling bench fl --task`: the
 * devices' own split, loaded in this process exactly as the fleet loads it
 * (sl_agent_data_load_contract() with the same contract, partition, clients
 * and seed; held-out samples left out), the test source as the evaluator
 * loads it (every sample), and the task's initial model as `starling task
 * create` makes it (sl_model_init() of init.spec_file with init.seed), are
 * written into a directory for torch_fedavg.py, which trains FedAvg on them
 * with the task's local optimiser and reports every round's test figures.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_fl_task_int.h"
#include "starling/agent.h"
#include "starling/nn.h"

#define PYTHON "/usr/bin/python3"

static int write_floats(const char *dir, const char *name, const float *v, size_t n)
{
    char path[FL_FILE_MAX];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    ok = fwrite(v, sizeof *v, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Client @k's samples (or the test set's, @d holding one client) as @stem.x.f32 / .y.f32. */
static int write_client(const char *dir, const char *stem, const sl_agent_data *d, uint32_t k,
                        size_t ss, size_t td)
{
    size_t n = sl_agent_data_samples(d, k);
    float *x = malloc((n ? n : 1) * ss * sizeof *x), *y = malloc((n ? n : 1) * td * sizeof *y);
    char name[64];
    int rc = x != NULL && y != NULL ? 0 : -1;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const float *xi;
        if (sl_agent_data_sample(d, k, i, &xi, y + i * td, td) != SL_OK)
            rc = -1;
        else
            memcpy(x + i * ss, xi, ss * sizeof *x);
    }
    snprintf(name, sizeof name, "%s.x.f32", stem);
    if (rc == 0)
        rc = write_floats(dir, name, x, n * ss);
    snprintf(name, sizeof name, "%s.y.f32", stem);
    if (rc == 0)
        rc = write_floats(dir, name, y, n * td);
    free(x);
    free(y);
    return rc;
}

int sl__bench_fl_split_load(fl_task *t, char *err, size_t cap)
{
    void *text = NULL;
    size_t len = 0;
    char why[512];
    int rc = sl_fs_read_file(t->su.contract_file, SL_CONTRACT_MAX_BYTES, &text, &len);
    if (rc != SL_OK) {
        snprintf(err, cap, "%s: %s", t->su.contract_file, sl_strerror(rc));
        return -1;
    }
    rc = sl_contract_parse(text, len, &t->contract, why, sizeof why);
    if (rc == SL_OK)
        rc = sl_contract_parse(text, len, &t->test_contract, why, sizeof why);
    free(text);
    if (rc != SL_OK) {
        snprintf(err, cap, "%s: %s", t->su.contract_file, why);
        return -1;
    }
    t->test_contract->eval_share = 0; /* the evaluator's view: every sample */
    rc = sl_agent_data_load_contract(t->su.data, t->contract, t->su.partition, t->su.clients, 0,
                                     t->su.clients, t->su.seed, &t->train, why, sizeof why);
    if (rc != SL_OK) {
        snprintf(err, cap, "the train source %s: %s", t->su.data, why);
        return -1;
    }
    rc = sl_agent_data_load_contract(t->su.eval_data, t->test_contract, NULL, 1, 0, 1, t->su.seed,
                                     &t->test, why, sizeof why);
    if (rc != SL_OK) {
        snprintf(err, cap, "the test source %s: %s", t->su.eval_data, why);
        return -1;
    }
    return 0;
}

void sl__bench_fl_split_free(fl_task *t)
{
    sl_agent_data_free(t->train);
    sl_agent_data_free(t->test);
    sl_contract_free(t->contract);
    sl_contract_free(t->test_contract);
    t->train = t->test = NULL;
    t->contract = t->test_contract = NULL;
}

/* Why PyTorch FedAvg would not be the same training as the task's, or NULL. */
static const char *not_comparable(const sl_task_config *c)
{
    if (c->aggregator != SL_AGG_FEDAVG || c->server_lr != 1.0)
        return "the task aggregates with something other than FedAvg at server_lr 1";
    if (c->prox_mu > 0)
        return "the task trains with FedProx (prox_mu)";
    if (c->frozen[0] != '\0' || c->local_norm)
        return "the task freezes tensors or keeps some on the devices (frozen, local_norm)";
    return NULL;
}

/* fedavg.json: what torch_fedavg.py trains. */
static int write_config(const fl_task *t, const char *dir, size_t test_n)
{
    const sl_task_config *c = &t->config;
    const char *opt = c->local_optimizer == SL_LOCAL_ADAM    ? "adam"
                      : c->local_optimizer == SL_LOCAL_ADAMW ? "adamw"
                                                             : "sgd";
    cJSON *doc = cJSON_CreateObject(), *clients, *betas;
    char path[FL_FILE_MAX], *text = NULL;
    int rc = -1;
    if (doc == NULL)
        return -1;
    cJSON_AddStringToObject(doc, "spec", t->su.spec_file);
    cJSON_AddNumberToObject(doc, "rounds", t->su.rounds);
    cJSON_AddNumberToObject(doc, "epochs", t->su.epochs);
    cJSON_AddNumberToObject(doc, "batch", c->batch);
    cJSON_AddNumberToObject(doc, "lr", c->local_lr);
    cJSON_AddNumberToObject(doc, "momentum", c->local_momentum);
    cJSON_AddStringToObject(doc, "optimizer", opt);
    cJSON_AddBoolToObject(doc, "nesterov", c->local_nesterov);
    cJSON_AddNumberToObject(doc, "weight_decay", c->local_weight_decay);
    betas = cJSON_AddArrayToObject(doc, "betas");
    if (betas != NULL) {
        cJSON_AddItemToArray(betas, cJSON_CreateNumber(c->local_betas[0]));
        cJSON_AddItemToArray(betas, cJSON_CreateNumber(c->local_betas[1]));
    }
    cJSON_AddNumberToObject(doc, "eps", c->local_eps);
    cJSON_AddNumberToObject(doc, "clip_norm", c->local_clip_norm);
    cJSON_AddNumberToObject(doc, "seed", (double)t->su.seed);
    clients = cJSON_AddArrayToObject(doc, "clients");
    for (uint32_t k = 0; clients != NULL && k < t->su.clients; k++)
        cJSON_AddItemToArray(clients,
                             cJSON_CreateNumber((double)sl_agent_data_samples(t->train, k)));
    cJSON_AddNumberToObject(doc, "test", (double)test_n);
    cJSON_AddNumberToObject(doc, "tdim", (double)t->contract->tdim);
    cJSON_AddStringToObject(doc, "kind", t->regression ? "target" : "class");
    text = cJSON_Print(doc);
    snprintf(path, sizeof path, "%s/fedavg.json", dir);
    if (text != NULL && sl_fs_write_atomic(path, text, strlen(text), 0600) == SL_OK)
        rc = 0;
    free(text);
    cJSON_Delete(doc);
    return rc;
}

/* The task's initial model, as `starling task create` makes it from init.spec_file. */
static int write_params(const fl_task *t, const char *dir, char *err, size_t cap)
{
    void *text = NULL;
    size_t len = 0;
    char why[256];
    sl_spec *spec = NULL;
    sl_model *m = NULL;
    float *params = NULL;
    int rc = sl_fs_read_file(t->su.spec_file, 16u << 20, &text, &len);
    if (rc == SL_OK)
        rc = sl_spec_parse(text, len, &spec, why, sizeof why);
    free(text);
    if (rc == SL_OK)
        rc = sl_model_create_spec(spec, &m, why, sizeof why);
    if (rc == SL_OK && (params = malloc(sl_model_params(m) * sizeof *params)) == NULL)
        rc = SL_ENOMEM;
    if (rc == SL_OK)
        rc = sl_model_init(m, params, t->su.init_seed);
    if (rc == SL_OK && write_floats(dir, "params.f32", params, sl_model_params(m)) != 0)
        rc = SL_EIO;
    if (rc != SL_OK)
        snprintf(err, cap, "%s: %s", t->su.spec_file, sl_strerror(rc));
    free(params);
    sl_model_free(m);
    sl_spec_free(spec);
    return rc == SL_OK ? 0 : -1;
}

/* Run torch_fedavg.py on @dir, its stdout into @dir/torch.out; 0 ran, 3 no torch, else -1. */
static int run_script(const char *dir)
{
    const char *script = getenv("STARLING_TORCH_FEDAVG");
    char out[FL_FILE_MAX];
    pid_t pid;
    int status;
    if (script == NULL || script[0] == '\0')
        script = SL_SOURCE_DIR "/tests/bench/torch_fedavg.py";
    if (access(PYTHON, X_OK) != 0)
        return 3;
    snprintf(out, sizeof out, "%s/torch.out", dir);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        FILE *f = freopen(out, "w", stdout);
        if (f == NULL)
            _exit(126);
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        setenv("MKL_NUM_THREADS", "1", 1);
        execl(PYTHON, PYTHON, script, dir, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return 3;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Every round's figure (accuracy or RMSE) from torch.out into @r. */
static int read_rounds(const fl_task *t, const char *dir, fl_torch *r)
{
    char path[FL_FILE_MAX];
    void *text = NULL;
    size_t len = 0;
    const char *key = t->regression ? "rmse" : "accuracy";
    snprintf(path, sizeof path, "%s/torch.out", dir);
    if (sl_fs_read_file(path, 16u << 20, &text, &len) != SL_OK)
        return -1;
    r->metric = calloc(t->su.rounds + 1, sizeof *r->metric);
    if (r->metric == NULL) {
        free(text);
        return -1;
    }
    for (char *line = text; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');
        cJSON *j;
        if (end != NULL)
            *end = '\0';
        j = cJSON_Parse(line);
        if (j != NULL) {
            const cJSON *round = cJSON_GetObjectItemCaseSensitive(j, "round");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
            const cJSON *secs = cJSON_GetObjectItemCaseSensitive(j, "seconds");
            const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "torch");
            if (cJSON_IsNumber(round) && cJSON_IsNumber(v) && round->valuedouble >= 0 &&
                round->valuedouble <= t->su.rounds) {
                size_t k = (size_t)round->valuedouble;
                r->metric[k] = v->valuedouble;
                if (k + 1 > r->n)
                    r->n = k + 1;
            }
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "done")) && cJSON_IsNumber(secs))
                r->seconds = secs->valuedouble;
            if (cJSON_IsString(ver))
                snprintf(r->version, sizeof r->version, "%s", ver->valuestring);
        }
        cJSON_Delete(j);
        line = end ? end + 1 : NULL;
    }
    free(text);
    return r->n == (size_t)t->su.rounds + 1 ? 0 : -1;
}

int sl__bench_fl_torch(const fl_task *t, fl_torch *r)
{
    char dir[FL_DIR_MAX], err[FL_FILE_MAX + 256];
    const char *why = not_comparable(&t->config);
    size_t test_n = sl_agent_data_samples(t->test, 0);
    int rc;
    memset(r, 0, sizeof *r);
    if (why != NULL) {
        snprintf(r->note, sizeof r->note, "not run: %s", why);
        return -1;
    }
    snprintf(dir, sizeof dir, "%s/torch", t->su.workdir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(r->note, sizeof r->note, "cannot make %s", dir);
        return -1;
    }
    for (uint32_t k = 0; k < t->su.clients; k++) {
        char stem[32];
        snprintf(stem, sizeof stem, "client%u", k);
        if (write_client(dir, stem, t->train, k, t->contract->sample_size, t->contract->tdim)) {
            snprintf(r->note, sizeof r->note, "cannot write client %u's samples into %s", k, dir);
            return -1;
        }
    }
    if (write_client(dir, "test", t->test, 0, t->contract->sample_size, t->contract->tdim) != 0 ||
        write_config(t, dir, test_n) != 0) {
        snprintf(r->note, sizeof r->note, "cannot write into %s", dir);
        return -1;
    }
    if (write_params(t, dir, err, sizeof err) != 0) {
        snprintf(r->note, sizeof r->note, "the initial model: %.200s", err);
        return -1;
    }
    fprintf(t->su.progress, "PyTorch FedAvg: %u rounds on the same split (%s)\n", t->su.rounds,
            dir);
    rc = run_script(dir);
    if (rc == 3) {
        snprintf(r->note, sizeof r->note,
                 "PyTorch not available (apt-get install python3-torch): skipped");
        return -1;
    }
    if (rc != 0 || read_rounds(t, dir, r) != 0) {
        snprintf(r->note, sizeof r->note, "torch_fedavg.py failed: see %.200s/torch.out", dir);
        return -1;
    }
    r->ran = 1;
    return 0;
}

void sl__bench_fl_torch_free(fl_torch *r)
{
    free(r->metric);
    r->metric = NULL;
    r->n = 0;
}
