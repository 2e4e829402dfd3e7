/*
 * bench_fl_task.c - `starling bench fl --task TASK.json --data-dir DIR`: a
 * task file's own model spec, data contract and configuration (the examples
 * of deploy/examples) through the real programs on loopback, beside PyTorch
 * FedAvg on the same split.
 *
 * Starling: a coordinator, `starling task create` of the task file (its
 * configuration with this benchmark's fleet: every client every round,
 * target = quorum = clients; its rounds, seed and, per setting, compression),
 * an evaluator on the test source and a fleet of --clients devices on the
 * train source (--partition, --of clients, --seed, --data_contract the task's),
 * exactly as bench_fl_proc.c runs the Fashion-MNIST settings. The evaluator's
 * figures (accuracy, or RMSE for a regression contract) are read from the
 * coordinator's database afterwards.
 *
 * PyTorch (bench_fl_torch.c, torch_fedavg.py): the same clients' samples,
 * loaded in this process through the same contract and partition, the same
 * test samples and initial model, FedAvg with the task's local optimiser,
 * epochs, batch and rounds. The table gives both side by side and the
 * difference: points of accuracy, or percent of PyTorch's RMSE.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_fl_task_int.h"
#include "starling/common.h"
#include "starling/codec.h"
#include "starling/nn.h"

#define TASK_SETTINGS "task"

void sl__bench_fl_task_usage(FILE *out)
{
    fprintf(out,
            "usage: starling bench fl --task TASK.json --data-dir DIR [options]\n"
            "A task file's model spec, data contract and configuration (deploy/examples/*)\n"
            "through starling-coordinator, an evaluator on the test source and a fleet on\n"
            "the train source, on loopback, every client every round; and PyTorch FedAvg\n"
            "(Debian's python3-torch) on the same split, test set and initial model, with\n"
            "the task's local optimiser, epochs, batch and rounds. Prints the final and best\n"
            "test accuracy (RMSE for a regression task) of both and their difference.\n"
            "  --task FILE        the task file: \"config\", \"init\": {\"spec_file\", \"seed\"},\n"
            "                     \"data_contract_file\"\n"
            "  --data-dir DIR     the example's prepared data: DIR/train.uri and DIR/test.uri\n"
            "                     name the sources (what the example's prepare.sh writes)\n"
            "  --train URI --test URI   the sources instead (starling/source.h)\n"
            "  --rounds R         default: the task's \"rounds\" (20 when it has none)\n"
            "  --epochs E         local epochs (default: the task's)\n"
            "  --clients N        devices in the fleet, all in every round (default 10)\n"
            "  --partition SPEC   how the train source is split (default dirichlet:0.5)\n"
            "  --seed S           partition, shuffles and selection (default 1)\n"
            "  --settings LIST    task (the task file's compression, the default), dense, or\n"
            "                     any setting of `starling bench fl --help`\n"
            "  --no-torch         Starling only\n"
            "  --deadline S       report deadline in seconds (default 1800)\n"
            "  --dir DIR          keep the runs in DIR (default: a temporary directory)\n"
            "  --json             one JSON document on stdout (progress on stderr)\n"
            "exit status: 0 every run finished, 1 a run failed, 2 usage\n");
}

static int usage_error(const char *fmt, const char *what)
{
    fputs("starling bench fl: ", stderr);
    fprintf(stderr, fmt, what);
    fputs(" (see --task --help)\n", stderr);
    return 2;
}

/* @name relative to the directory of @base, absolute, into @out: 0 or -1. */
static int beside(const char *base, const char *name, char *out, size_t cap)
{
    const char *slash = strrchr(base, '/');
    char joined[FL_PATH_MAX * 2];
    if (name[0] == '/')
        snprintf(joined, sizeof joined, "%s", name);
    else
        snprintf(joined, sizeof joined, "%.*s%s", slash ? (int)(slash - base + 1) : 0, base, name);
    if (realpath(joined, out) == NULL || strlen(out) >= cap)
        return -1;
    return 0;
}

/* The first line of DIR/@name (a source URI written by an example's prepare.sh). */
static int read_uri(const char *dir, const char *name, char *out, size_t cap)
{
    char path[FL_FILE_MAX];
    void *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (sl_fs_read_file(path, FL_PATH_MAX, &text, &len) != SL_OK)
        return -1;
    len = strcspn(text, "\r\n");
    if (len == 0 || len >= cap) {
        free(text);
        return -1;
    }
    snprintf(out, cap, "%.*s", (int)len, (const char *)text);
    free(text);
    return 0;
}

/* The task file: its canonical configuration, spec file, init seed and contract file. */
static int read_task(fl_task *t, char **config, char *err, size_t cap)
{
    void *text = NULL;
    size_t len = 0;
    cJSON *doc = NULL;
    const cJSON *cfg, *init, *spec, *seed, *contract;
    char *cfg_text = NULL, why[256];
    int rc = -1;
    if (sl_fs_read_file(t->task_path, 1u << 20, &text, &len) != SL_OK) {
        snprintf(err, cap, "cannot read %s", t->task_path);
        return -1;
    }
    doc = cJSON_ParseWithLength(text, len);
    cfg = cJSON_GetObjectItemCaseSensitive(doc, "config");
    init = cJSON_GetObjectItemCaseSensitive(doc, "init");
    spec = cJSON_GetObjectItemCaseSensitive(init, "spec_file");
    seed = cJSON_GetObjectItemCaseSensitive(init, "seed");
    contract = cJSON_GetObjectItemCaseSensitive(doc, "data_contract_file");
    if (!cJSON_IsObject(cfg) || !cJSON_IsString(spec) || !cJSON_IsString(contract) ||
        (seed != NULL && (!cJSON_IsNumber(seed) || seed->valuedouble < 0))) {
        snprintf(err, cap,
                 "%s: --task needs \"config\", \"init\": {\"spec_file\", \"seed\"} and "
                 "\"data_contract_file\"",
                 t->task_path);
        goto done;
    }
    t->su.init_seed = seed ? (uint64_t)seed->valuedouble : 1;
    if (beside(t->task_path, spec->valuestring, t->su.spec_file, sizeof t->su.spec_file) != 0 ||
        beside(t->task_path, contract->valuestring, t->su.contract_file,
               sizeof t->su.contract_file) != 0) {
        snprintf(err, cap, "%s: its spec_file or data_contract_file cannot be found", t->task_path);
        goto done;
    }
    cfg_text = cJSON_PrintUnformatted(cfg);
    if (cfg_text == NULL ||
        sl_task_config_parse(cfg_text, strlen(cfg_text), &t->config, why, sizeof why) != SL_OK) {
        snprintf(err, cap, "%s: config: %s", t->task_path, cfg_text ? why : "out of memory");
        goto done;
    }
    if (sl_task_config_to_json(&t->config, config) != SL_OK) {
        snprintf(err, cap, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(cfg_text);
    cJSON_Delete(doc);
    free(text);
    return rc;
}

/* The spec's name and parameters. */
static int read_spec(fl_task *t, char *err, size_t cap)
{
    void *text = NULL;
    size_t len = 0;
    char why[256];
    sl_spec *spec = NULL;
    int rc = sl_fs_read_file(t->su.spec_file, 16u << 20, &text, &len);
    if (rc == SL_OK)
        rc = sl_spec_parse(text, len, &spec, why, sizeof why);
    else
        snprintf(why, sizeof why, "%s", sl_strerror(rc));
    free(text);
    if (rc != SL_OK) {
        snprintf(err, cap, "%s: %s", t->su.spec_file, why);
        return -1;
    }
    snprintf(t->model, sizeof t->model, "%s", sl_spec_name(spec));
    t->params = sl_layout_params(sl_spec_layout(spec));
    sl_spec_free(spec);
    return 0;
}

/* ---- figures ------------------------------------------------------------------------ */

static double round_metric(const fl_task *t, const sl_fl_round *r)
{
    return t->regression ? r->rmse : r->accuracy;
}

static double initial_metric(const fl_task *t, const fl_result *r)
{
    return t->regression ? r->run.initial_rmse : r->run.initial_accuracy;
}

static double final_metric(const fl_task *t, const fl_result *r)
{
    return t->regression ? r->totals.final_rmse : r->totals.final_accuracy;
}

static double best_metric(const fl_task *t, const fl_result *r)
{
    return t->regression ? r->totals.best_rmse : r->totals.best_accuracy;
}

static double torch_best(const fl_task *t, const fl_torch *p)
{
    double best = NAN;
    for (size_t k = 1; k < p->n; k++)
        if (isnan(best) || (t->regression ? p->metric[k] < best : p->metric[k] > best))
            best = p->metric[k];
    return best;
}

/* The example's own target, as its issue (#19) set it: within 1 point of PyTorch FedAvg's final
 * accuracy on the same split, or within 5% of its final RMSE. NaN when PyTorch did not run. */
static double own_target(const fl_task *t, const fl_torch *p)
{
    double f = p->ran && p->n > 0 ? p->metric[p->n - 1] : NAN;
    return isnan(f) ? NAN : t->regression ? 1.05 * f : f - 0.01;
}

/* What run @r spent until it first reached @target (the rounds, the wall clock, the bytes). */
static void to_target(const fl_task *t, const fl_result *r, double target, sl_fl_reach *h)
{
    if (t->regression)
        sl_fl_run_reach_rmse(&r->run, target, h);
    else
        sl_fl_run_reach(&r->run, target, h);
}

/* The newest round with a federated evaluation, or NULL. */
static const sl_fl_round *last_fed(const fl_result *r)
{
    for (size_t i = r->run.nrounds; i > 0; i--)
        if (r->run.rounds[i - 1].fed_devices > 0)
            return &r->run.rounds[i - 1];
    return NULL;
}

/* A figure as the table shows it: "97.78%" or "RMSE 53.21". */
static void show(const fl_task *t, double v, char *out, size_t cap)
{
    if (isnan(v))
        snprintf(out, cap, "-");
    else if (t->regression)
        snprintf(out, cap, "%.4g", v);
    else
        snprintf(out, cap, "%.2f%%", 100.0 * v);
}

/* Ours against PyTorch's: "+0.42 points" or "-1.3% RMSE". */
static void versus(const fl_task *t, double ours, double theirs, char *out, size_t cap)
{
    if (isnan(ours) || isnan(theirs))
        snprintf(out, cap, "-");
    else if (t->regression)
        snprintf(out, cap, "%+.1f%%", 100.0 * (ours - theirs) / theirs);
    else
        snprintf(out, cap, "%+.2f pts", fabs(ours - theirs) < 5e-5 ? 0.0 : 100.0 * (ours - theirs));
}

static void describe(const fl_task *t, FILE *f)
{
    const sl_task_config *c = &t->config;
    size_t lo = SIZE_MAX, hi = 0, trained = 0;
    const char *opt = c->local_optimizer == SL_LOCAL_ADAM    ? "adam"
                      : c->local_optimizer == SL_LOCAL_ADAMW ? "adamw"
                                                             : "sgd";
    for (uint32_t k = 0; k < t->su.clients; k++) {
        size_t n = sl_agent_data_samples(t->train, k);
        trained += n;
        lo = n < lo ? n : lo;
        hi = n > hi ? n : hi;
    }
    fprintf(f,
            "task %s: %s (%llu parameters), %u clients %s, every client every round, %u local "
            "epochs, batch %u, %s lr %g momentum %g, %u rounds, seed %llu\n",
            t->task_path, t->model, (unsigned long long)t->params, t->su.clients, t->su.partition,
            t->su.epochs, c->batch, opt, c->local_lr, c->local_momentum, t->su.rounds,
            (unsigned long long)t->su.seed);
    fprintf(f,
            "train %s: %zu samples trained on (%zu..%zu a client), evaluation.share %g held out\n"
            "test %s: %zu samples; figure: %s\n",
            t->su.data, trained, lo, hi, t->contract->eval_share, t->su.eval_data,
            sl_agent_data_samples(t->test, 0),
            t->regression ? "RMSE (lower is better; difference in % of PyTorch's)"
                          : "accuracy (difference in points)");
}

/* Each run's rounds and bytes to the example's own target; "vs dense": the dense run's bytes up
 * to it over this run's. */
static void target_table(const fl_task *t, const fl_result *res, size_t n, const fl_torch *p,
                         FILE *f)
{
    double target = own_target(t, p), dense_up = NAN;
    char v[32];
    if (isnan(target)) {
        fprintf(f, "\nto the example's own target: no PyTorch run to set it\n");
        return;
    }
    show(t, target, v, sizeof v);
    fprintf(f, "\nto the example's own target, %s %s (%s):\n", t->regression ? "RMSE" : "accuracy",
            v,
            t->regression ? "within 5% of PyTorch FedAvg's final RMSE"
                          : "within 1 point of PyTorch FedAvg's final accuracy");
    for (size_t i = 0; i < n; i++) {
        sl_fl_reach h;
        if (!res[i].ok || strcmp(res[i].setting.name, "dense") != 0)
            continue;
        to_target(t, &res[i], target, &h);
        if (h.round_no > 0 && h.bytes_up > 0)
            dense_up = (double)h.bytes_up;
    }
    fprintf(f, "%-22s %7s %9s %10s %10s %9s\n", "run", "round", "seconds", "bytes up", "bytes down",
            "vs dense");
    for (size_t i = 0; i < n; i++) {
        sl_fl_reach h;
        char name[64], up[24], down[24], ratio[24], secs[24];
        if (!res[i].ok)
            continue;
        snprintf(name, sizeof name, "Starling (%.48s)", res[i].setting.name);
        to_target(t, &res[i], target, &h);
        if (h.round_no == 0) {
            fprintf(f, "%-22s   never\n", name);
            continue;
        }
        sl_fl_human_bytes((double)h.bytes_up, up, sizeof up);
        sl_fl_human_bytes((double)h.bytes_down, down, sizeof down);
        if (!isnan(dense_up) && h.bytes_up > 0)
            snprintf(ratio, sizeof ratio, "%.1fx", dense_up / (double)h.bytes_up);
        else
            snprintf(ratio, sizeof ratio, "-");
        if (isnan(h.seconds))
            snprintf(secs, sizeof secs, "-");
        else
            snprintf(secs, sizeof secs, "%.1f", h.seconds);
        fprintf(f, "%-22s %7lld %9s %10s %10s %9s\n", name, (long long)h.round_no, secs, up, down,
                ratio);
    }
}

static void table(const fl_task *t, const fl_result *res, size_t n, const fl_torch *p, FILE *f)
{
    double tf = p->ran ? p->metric[p->n - 1] : NAN, tb = p->ran ? torch_best(t, p) : NAN;
    char a[32], b[32], c[32], d[32], e[32], up[24], ratio[24], fed[64];
    fprintf(f, "\n%-22s %9s %9s %9s %13s %13s %10s %8s %22s %7s\n", "run", "initial", "final",
            "best", "final vs torch", "best vs torch", "bytes up", "vs dense", "fed. eval (last)",
            "wall");
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = &res[i];
        const sl_fl_round *fr;
        char name[64];
        snprintf(name, sizeof name, "Starling (%.48s)", r->setting.name);
        if (!r->ok) {
            fprintf(f, "%-22s failed: %s\n", name, r->error);
            continue;
        }
        show(t, initial_metric(t, r), a, sizeof a);
        show(t, final_metric(t, r), b, sizeof b);
        show(t, best_metric(t, r), c, sizeof c);
        versus(t, final_metric(t, r), tf, d, sizeof d);
        versus(t, best_metric(t, r), tb, e, sizeof e);
        sl_fl_human_bytes((double)r->totals.bytes_up, up, sizeof up);
        snprintf(ratio, sizeof ratio, "%.1fx", r->totals.compression_up);
        fr = last_fed(r);
        if (fr != NULL) {
            char v[24];
            show(t, t->regression ? fr->fed_rmse : fr->fed_accuracy, v, sizeof v);
            snprintf(fed, sizeof fed, "%s (%u dev.)", v, fr->fed_devices);
        } else {
            snprintf(fed, sizeof fed, "-");
        }
        fprintf(f, "%-22s %9s %9s %9s %13s %13s %10s %8s %22s %5.0f s\n", name, a, b, c, d, e, up,
                ratio, fed, r->wall_s);
    }
    if (p->ran) {
        show(t, p->metric[0], a, sizeof a);
        show(t, tf, b, sizeof b);
        show(t, tb, c, sizeof c);
        fprintf(f, "%-22s %9s %9s %9s %13s %13s %10s %8s %22s %5.0f s\n", "PyTorch FedAvg", a, b, c,
                "-", "-", "-", "-", "-", p->seconds);
    } else {
        fprintf(f, "%-22s %s\n", "PyTorch FedAvg", p->note);
    }
    target_table(t, res, n, p, f);
}

static void json_number(cJSON *o, const char *key, double v)
{
    if (isnan(v))
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, v);
}

static void json_out(const fl_task *t, const fl_result *res, size_t n, const fl_torch *p)
{
    cJSON *doc = cJSON_CreateObject(), *runs, *tj, *clients;
    double target = own_target(t, p);
    char *text;
    if (doc == NULL)
        return;
    cJSON_AddStringToObject(doc, "task", t->task_path);
    cJSON_AddStringToObject(doc, "model", t->model);
    cJSON_AddNumberToObject(doc, "params", (double)t->params);
    cJSON_AddStringToObject(doc, "metric", t->regression ? "rmse" : "accuracy");
    cJSON_AddNumberToObject(doc, "rounds", t->su.rounds);
    clients = cJSON_AddArrayToObject(doc, "client_samples");
    for (uint32_t k = 0; clients != NULL && k < t->su.clients; k++)
        cJSON_AddItemToArray(clients,
                             cJSON_CreateNumber((double)sl_agent_data_samples(t->train, k)));
    cJSON_AddNumberToObject(doc, "test_samples", (double)sl_agent_data_samples(t->test, 0));
    json_number(doc, "target", target); /* the example's own (own_target); null without PyTorch */
    runs = cJSON_AddArrayToObject(doc, "starling");
    for (size_t i = 0; runs != NULL && i < n; i++) {
        const fl_result *r = &res[i];
        cJSON *o = cJSON_CreateObject(), *rounds;
        if (o == NULL)
            break;
        cJSON_AddItemToArray(runs, o);
        cJSON_AddStringToObject(o, "setting", r->setting.name);
        cJSON_AddBoolToObject(o, "ok", r->ok);
        cJSON_AddStringToObject(o, "error", r->error);
        if (!r->ok)
            continue;
        json_number(o, "initial", initial_metric(t, r));
        json_number(o, "final", final_metric(t, r));
        json_number(o, "best", best_metric(t, r));
        cJSON_AddNumberToObject(o, "bytes_up", (double)r->totals.bytes_up);
        cJSON_AddNumberToObject(o, "wall_s", r->wall_s);
        if (!isnan(target)) { /* what it spent to the example's own target (null: never) */
            sl_fl_reach h;
            cJSON *to = cJSON_AddObjectToObject(o, "to_target");
            to_target(t, r, target, &h);
            if (to != NULL && h.round_no > 0) {
                cJSON_AddNumberToObject(to, "round", (double)h.round_no);
                json_number(to, "seconds", h.seconds);
                cJSON_AddNumberToObject(to, "bytes_up", (double)h.bytes_up);
                cJSON_AddNumberToObject(to, "bytes_down", (double)h.bytes_down);
            } else if (to != NULL) {
                cJSON_AddNullToObject(to, "round");
            }
        }
        rounds = cJSON_AddArrayToObject(o, "rounds");
        for (size_t k = 0; rounds != NULL && k < r->run.nrounds; k++) {
            const sl_fl_round *x = &r->run.rounds[k];
            cJSON *ro = cJSON_CreateObject();
            if (ro == NULL)
                break;
            cJSON_AddItemToArray(rounds, ro);
            cJSON_AddNumberToObject(ro, "round", (double)x->round_no);
            json_number(ro, "value", round_metric(t, x));
            cJSON_AddNumberToObject(ro, "fed_devices", x->fed_devices);
            cJSON_AddNumberToObject(ro, "fed_samples", (double)x->fed_samples);
            json_number(ro, "fed_value", t->regression ? x->fed_rmse : x->fed_accuracy);
        }
    }
    tj = cJSON_AddObjectToObject(doc, "torch");
    if (tj != NULL) {
        cJSON_AddBoolToObject(tj, "ran", p->ran);
        cJSON_AddStringToObject(tj, "note", p->note);
        if (p->ran) {
            cJSON *rounds = cJSON_AddArrayToObject(tj, "rounds");
            json_number(tj, "initial", p->metric[0]);
            json_number(tj, "final", p->metric[p->n - 1]);
            json_number(tj, "best", torch_best(t, p));
            for (size_t k = 1; rounds != NULL && k < p->n; k++)
                cJSON_AddItemToArray(rounds, cJSON_CreateNumber(p->metric[k]));
        }
    }
    text = cJSON_Print(doc);
    if (text != NULL)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(doc);
}

/* ---- the command -------------------------------------------------------------------- */

int sl__bench_fl_task(int argc, char **argv)
{
    static fl_task t; /* large: one bench per process */
    static fl_result res[MAX_SETTINGS];
    fl_setting settings[MAX_SETTINGS];
    fl_torch torch;
    const char *data_dir = NULL, *train = NULL, *test = NULL, *list = TASK_SETTINGS, *dir = NULL;
    const char *v = NULL, *partition = "dirichlet:0.5";
    uint32_t rounds = 0, epochs = 0, clients = 10, deadline_s = 1800, seed = 1;
    int json = 0, no_torch = 0, status = 0, tmpdir = 0;
    char *config = NULL, err[FL_FILE_MAX + 512];
    size_t n = 0;
    FILE *out;

    memset(&t, 0, sizeof t);
    memset(&torch, 0, sizeof torch);
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return sl__bench_fl_task_usage(stdout), 0;
    for (int i = 0; i < argc; i++) {
        int o;
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--no-torch") == 0) {
            no_torch = 1;
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--task", &t.task_path)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--data-dir", &data_dir)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--train", &train)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--test", &test)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--settings", &list)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--partition", &partition)) != 0 ||
                   (o = sl__bench_fl_opt(argc, argv, &i, "--dir", &dir)) != 0) {
            if (o < 0)
                return 2;
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--rounds", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 10000, &rounds) != 0)
                return o < 0 ? 2 : usage_error("--rounds: \"%s\" is not in 1..10000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--epochs", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 1000, &epochs) != 0)
                return o < 0 ? 2 : usage_error("--epochs: \"%s\" is not in 1..1000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--clients", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 1000, &clients) != 0)
                return o < 0 ? 2 : usage_error("--clients: \"%s\" is not in 1..1000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--seed", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 0, 4000000000u, &seed) != 0)
                return o < 0 ? 2 : usage_error("--seed: \"%s\" is not a whole number", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--deadline", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 7 * 86400, &deadline_s) != 0)
                return o < 0 ? 2 : usage_error("--deadline: \"%s\" is not in 1..604800", v);
        } else {
            return usage_error("unknown argument \"%s\" with --task", argv[i]);
        }
    }
    if (t.task_path == NULL || t.task_path[0] == '\0')
        return usage_error("--task needs a task file%s", "");
    if ((train == NULL) != (test == NULL))
        return usage_error("--train and --test go together%s", "");
    if (train == NULL && data_dir == NULL)
        return usage_error("--task needs --data-dir DIR (or --train and --test)%s", "");
    if (dir != NULL && (dir[0] == '\0' || strlen(dir) > FL_PATH_MAX - 64))
        return usage_error("--dir: bad directory \"%s\"", dir);
    if (sl__bench_fl_settings(list, 1, settings, &n) != 0)
        return 2;
    for (size_t i = 0; i < n; i++)
        if (settings[i].is_default)
            return usage_error("--settings: \"default\" means the registry task's; use \"task\"%s",
                               "");

    /* the task file, its sources, its model */
    if (read_task(&t, &config, err, sizeof err) != 0 || read_spec(&t, err, sizeof err) != 0) {
        fprintf(stderr, "starling bench fl: %s\n", err);
        free(config);
        return 1;
    }
    if (train != NULL) {
        snprintf(t.su.data, sizeof t.su.data, "%s", train);
        snprintf(t.su.eval_data, sizeof t.su.eval_data, "%s", test);
    } else if (read_uri(data_dir, "train.uri", t.su.data, sizeof t.su.data) != 0 ||
               read_uri(data_dir, "test.uri", t.su.eval_data, sizeof t.su.eval_data) != 0) {
        fprintf(stderr,
                "starling bench fl: %s has no train.uri and test.uri: run the example's "
                "prepare.sh %s first\n",
                data_dir, data_dir);
        free(config);
        return 1;
    }
    t.su.task_config = config;
    t.su.fleet = "full";
    t.su.model = t.model;
    t.su.clients = clients;
    t.su.target = t.su.quorum = clients;
    t.su.over_selection = 1;
    t.su.straggle_factor = 1;
    t.su.partition = partition;
    t.su.epochs = epochs ? epochs : t.config.local_epochs;
    t.su.batch = t.config.batch;
    t.su.lr = t.config.local_lr;
    t.su.momentum = t.config.local_momentum;
    t.su.rounds = rounds ? rounds : t.config.rounds ? t.config.rounds : 20;
    t.su.window_ms = 1000;
    t.su.deadline_ms = (int64_t)deadline_s * 1000;
    t.su.seed = seed;
    t.su.acc_target = 1.0;
    t.su.progress = stderr;
    out = json ? stderr : stdout;
    if (sl__bench_fl_programs(&t.su) != 0) {
        free(config);
        return 1;
    }
    if (dir != NULL) {
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "starling bench fl: --dir %s: %s\n", dir, strerror(errno));
            free(config);
            return 1;
        }
        snprintf(t.su.workdir, sizeof t.su.workdir, "%s", dir);
    } else {
        const char *base = getenv("TMPDIR");
        snprintf(t.su.workdir, sizeof t.su.workdir, "%s/starling-bench-fl.XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        if (mkdtemp(t.su.workdir) == NULL) {
            fprintf(stderr, "starling bench fl: %s: %s\n", t.su.workdir, strerror(errno));
            free(config);
            return 1;
        }
        tmpdir = 1;
    }

    /* the devices' split, as the fleet will load it: the PyTorch side trains on it */
    if (sl__bench_fl_split_load(&t, err, sizeof err) != 0) {
        fprintf(stderr, "starling bench fl: %s\n", err);
        status = 1;
        goto done;
    }
    t.regression = t.contract->label_kind == SL_LABEL_TARGET;
    if (t.contract->label_kind == SL_LABEL_MULTILABEL) {
        fprintf(stderr, "starling bench fl: --task takes class or target labels, not multilabel\n");
        status = 1;
        goto done;
    }
    for (uint32_t k = 0; k < t.su.clients; k++)
        if (sl_agent_data_samples(t.train, k) == 0) {
            fprintf(stderr,
                    "starling bench fl: client %u of %s holds no training sample (too many "
                    "clients for the data, or too skewed a partition)\n",
                    k, t.su.data);
            status = 1;
            goto done;
        }
    fprintf(out, "starling bench fl: %s through %s and %s; runs in %s\n", t.task_path,
            t.su.coordinator, t.su.agent, t.su.workdir);
    describe(&t, out);
    fflush(out);

    sl__bench_fl_signals();
    for (size_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].alias_of = -1;
        res[i].setting = settings[i];
    }
    for (size_t i = 0; i < n && !sl__bench_fl_interrupted; i++) {
        fprintf(t.su.progress, "Starling (%s)\n", res[i].setting.name);
        if (sl__bench_fl_run_setting(&t.su, &res[i].setting, &res[i]) != 0) {
            fprintf(t.su.progress, "%s: failed: %s\n", res[i].setting.name, res[i].error);
            status = 1;
        }
    }
    if (no_torch)
        snprintf(torch.note, sizeof torch.note, "not run (--no-torch)");
    else if (!sl__bench_fl_interrupted)
        sl__bench_fl_torch(&t, &torch);
    if (sl__bench_fl_interrupted) {
        fprintf(stderr, "starling bench fl: interrupted\n");
        status = 1;
    }
    for (size_t i = 0; i < n; i++)
        if (!res[i].ok && res[i].error[0] == '\0')
            snprintf(res[i].error, sizeof res[i].error, "not run (interrupted)");
    table(&t, res, n, &torch, out);
    fflush(out);
    if (json)
        json_out(&t, res, n, &torch);
    for (size_t i = 0; i < n; i++)
        sl_fl_run_free(&res[i].run);
done:
    sl__bench_fl_torch_free(&torch);
    sl__bench_fl_split_free(&t);
    if (tmpdir)
        sl__bench_fl_rmtree(t.su.workdir);
    free(config);
    return status;
}
