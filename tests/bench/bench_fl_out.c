/*
 * bench_fl_out.c - what `starling bench fl` writes: the table, the JSON,
 * the markdown table and the plot of accuracy against upload bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench_fl_int.h"
#include "plot.h"

static const fl_result *shown(const fl_result *res, size_t i)
{
    return res[i].alias_of >= 0 ? &res[res[i].alias_of] : &res[i];
}

static void label_of(const fl_result *res, size_t i, char *out, size_t cap)
{
    if (res[i].alias_of >= 0)
        snprintf(out, cap, "%s (= %s)", res[i].setting.name, res[res[i].alias_of].setting.name);
    else
        snprintf(out, cap, "%s", res[i].setting.name);
}

static void pct(double v, char *out, size_t cap)
{
    if (isnan(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.2f%%", 100.0 * v);
}

/* Bytes and rounds to a useful accuracy (#23): these levels, for every setting. */
static const double reach_levels[] = {0.80, 0.85};
#define NREACH (sizeof reach_levels / sizeof reach_levels[0])

/* The dense FedAvg run of the same invocation, the reference of "up vs dense" to a level:
 * the first setting that ran with fp32 values at density 1 and no error feedback or other
 * option; NULL when none ran. */
static const fl_result *dense_of(const fl_result *res, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = &res[i];
        const fl_setting *st = &r->setting;
        if (r->alias_of < 0 && r->ok && !st->is_default && strcmp(st->values, "fp32") == 0 &&
            st->density >= 1.0 && st->feedback[0] == '\0' && st->aggregator[0] == '\0' &&
            st->server_lr == 0 && st->warmup_rounds == 0 && !st->budget && !st->fednova)
            return r;
    }
    return NULL;
}

/* One level's cells: the round, the cumulative bytes up and down, and dense's bytes up to the
 * same level over these ("-" when either never reached it). */
typedef struct reach_cells {
    char round[16], up[24], down[24], vs_dense[24];
} reach_cells;

static void make_reach(const fl_result *res, size_t n, size_t i, double level, reach_cells *c)
{
    const fl_result *r = shown(res, i), *d = dense_of(res, n);
    sl_fl_reach a, b;
    snprintf(c->round, sizeof c->round, "-");
    snprintf(c->up, sizeof c->up, "-");
    snprintf(c->down, sizeof c->down, "-");
    snprintf(c->vs_dense, sizeof c->vs_dense, "-");
    if (!r->ok)
        return;
    sl_fl_run_reach(&r->run, level, &a);
    if (a.round_no == 0) {
        snprintf(c->round, sizeof c->round, "never");
        return;
    }
    snprintf(c->round, sizeof c->round, "%lld", (long long)a.round_no);
    sl_fl_human_bytes((double)a.bytes_up, c->up, sizeof c->up);
    sl_fl_human_bytes((double)a.bytes_down, c->down, sizeof c->down);
    if (d == NULL)
        return;
    sl_fl_run_reach(&d->run, level, &b);
    if (b.round_no > 0 && a.bytes_up > 0)
        snprintf(c->vs_dense, sizeof c->vs_dense, "%.1fx", (double)b.bytes_up / (double)a.bytes_up);
}

void sl__bench_fl_describe(const fl_setup *su, double dense_bytes, uint64_t params, FILE *f,
                           const char *prefix)
{
    char dense[24], fleet[400];
    sl_fl_human_bytes(dense_bytes, dense, sizeof dense);
    if (strcmp(su->fleet, "full") == 0)
        snprintf(fleet, sizeof fleet, "every client every round");
    else if (su->speeds > 1 || su->links[0] != '\0')
        snprintf(fleet, sizeof fleet,
                 "%s participation: %u reports close a round (under time budgets: every "
                 "selected device, or the planned deadline), %.0f selected, quorum %u; "
                 "%.0f%% of the selected drop out after the download, %.0f%% of transfers cut, "
                 "devices 1x to %gx slower, links of %s bit/s (log-uniform, seeded)",
                 su->fleet, su->target, ceil(su->target * su->over_selection), su->quorum,
                 100 * su->dropout, 100 * su->cut, su->speeds > 1 ? su->speeds : 1,
                 su->links[0] ? su->links : "unlimited");
    else
        snprintf(fleet, sizeof fleet,
                 "%s participation: %u reports close a round, %.0f selected, quorum %u; "
                 "%.0f%% of the selected drop out after the download, %.0f%% of transfers cut, "
                 "%.0f%% of devices %gx slower",
                 su->fleet, su->target, ceil(su->target * su->over_selection), su->quorum,
                 100 * su->dropout, 100 * su->cut, 100 * su->straggle, su->straggle_factor);
    fprintf(f,
            "%sFashion-MNIST, %s (%llu parameters: a dense fp32 update is %s), %u clients "
            "%s, %s; %u local epoch%s, batch %u, lr %g, momentum %g; "
            "%u rounds; FedAvg; top-k settings with error feedback on the devices, over the whole "
            "model "
            "(per tensor where a setting says @tensor)\n",
            prefix, su->model, (unsigned long long)params, dense, su->clients, su->partition, fleet,
            su->epochs, su->epochs == 1 ? "" : "s", su->batch, su->lr, su->momentum, su->rounds);
}

/* One row's cells (shared by the table and the markdown). */
typedef struct row {
    char label[136], values[16], density[24], final_acc[16], best_acc[16], mean_acc[16];
    char rounds_to[24];
    char up[24], down[24], ratio[24], down_frac[16], wall[16];
} row;

static void make_row(const fl_result *res, size_t i, row *w)
{
    const fl_result *r = shown(res, i);
    const sl_fl_totals *t = &r->totals;
    label_of(res, i, w->label, sizeof w->label);
    snprintf(w->values, sizeof w->values, "%s", r->setting.values);
    snprintf(w->density, sizeof w->density, "%g", r->setting.density);
    if (!r->ok) {
        snprintf(w->final_acc, sizeof w->final_acc, "failed");
        snprintf(w->best_acc, sizeof w->best_acc, "-");
        snprintf(w->mean_acc, sizeof w->mean_acc, "-");
        snprintf(w->rounds_to, sizeof w->rounds_to, "-");
        snprintf(w->up, sizeof w->up, "-");
        snprintf(w->down, sizeof w->down, "-");
        snprintf(w->ratio, sizeof w->ratio, "-");
        snprintf(w->down_frac, sizeof w->down_frac, "-");
        snprintf(w->wall, sizeof w->wall, "-");
        return;
    }
    pct(t->final_accuracy, w->final_acc, sizeof w->final_acc);
    pct(t->best_accuracy, w->best_acc, sizeof w->best_acc);
    pct(t->mean_accuracy, w->mean_acc, sizeof w->mean_acc);
    if (t->rounds_to_target > 0)
        snprintf(w->rounds_to, sizeof w->rounds_to, "%lld", (long long)t->rounds_to_target);
    else
        snprintf(w->rounds_to, sizeof w->rounds_to, "never");
    sl_fl_human_bytes((double)t->bytes_up, w->up, sizeof w->up);
    sl_fl_human_bytes((double)t->bytes_down, w->down, sizeof w->down);
    if (isnan(t->compression_up))
        snprintf(w->ratio, sizeof w->ratio, "-");
    else
        snprintf(w->ratio, sizeof w->ratio, "%.1fx", t->compression_up);
    pct(t->down_fraction, w->down_frac, sizeof w->down_frac);
    snprintf(w->wall, sizeof w->wall, "%.0f s", r->wall_s);
}

/* Every setting compared at the same wall clock: the shortest run's (first round opened to
 * last closed); 0 when none ran. */
static double shortest_wall(const fl_result *res, size_t n)
{
    double wall = 0;
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = shown(res, i);
        if (r->ok && r->totals.wall_s > 0 && (wall == 0 || r->totals.wall_s < wall))
            wall = r->totals.wall_s;
    }
    return wall;
}

void sl__bench_fl_table(const fl_setup *su, const fl_result *res, size_t n, FILE *f)
{
    char target[16];
    snprintf(target, sizeof target, "to %.0f%%", 100.0 * su->acc_target);
    fprintf(f, "\n%-24s %-8s %-8s %8s %8s %8s %6s %10s %10s %11s %10s %8s\n", "setting", "values",
            "density", "final", "best", "mean", target, "bytes up", "bytes down", "up vs dense",
            "down/dev/r", "wall");
    for (size_t i = 0; i < n; i++) {
        row w;
        make_row(res, i, &w);
        fprintf(f, "%-24s %-8s %-8s %8s %8s %8s %6s %10s %10s %11s %10s %8s\n", w.label, w.values,
                w.density, w.final_acc, w.best_acc, w.mean_acc, w.rounds_to, w.up, w.down, w.ratio,
                w.down_frac, w.wall);
    }
    fprintf(f,
            "final/best: the evaluator's test accuracy (10,000 images) of the round's model; "
            "mean: over the last %d rounds (30-50 of 50); %s: first round whose model reached "
            "it;\nup vs dense: dense fp32 update bytes / "
            "bytes up; down/dev/r: bytes down per participating device and round / dense "
            "model bytes\n",
            SL_FL_MEAN_ROUNDS, target);
    fprintf(f, "\n%-24s", "to a level (#23)");
    for (size_t l = 0; l < NREACH; l++)
        fprintf(f, "  %3.0f%%: %5s %10s %10s %9s", 100.0 * reach_levels[l], "round", "bytes up",
                "bytes down", "vs dense");
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        row w;
        make_row(res, i, &w);
        fprintf(f, "%-24s", w.label);
        for (size_t l = 0; l < NREACH; l++) {
            reach_cells c;
            make_reach(res, n, i, reach_levels[l], &c);
            fprintf(f, "        %5s %10s %10s %9s", c.round, c.up, c.down, c.vs_dense);
        }
        fputc('\n', f);
    }
    fprintf(f, "round: the first whose model reached the level; bytes: every round's up to it, "
               "all devices; vs dense: the dense run's bytes up to the level / these\n");
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = shown(res, i);
        if (r->ok && !isnan(r->totals.seconds_to_target))
            fprintf(f, "%s: %s reached after %.0f s of wall clock (round %lld)\n",
                    res[i].setting.name, target + 3, r->totals.seconds_to_target,
                    (long long)r->totals.rounds_to_target);
        else if (r->ok)
            fprintf(f, "%s: %s never reached\n", res[i].setting.name, target + 3);
    }
    {
        double wall = su->at_wall_s > 0 ? su->at_wall_s : shortest_wall(res, n);
        for (size_t i = 0; i < n && (n > 1 || su->at_wall_s > 0) && wall > 0; i++) {
            const fl_result *r = shown(res, i);
            double acc = r->ok ? sl_fl_run_accuracy_at(&r->run, wall) : NAN;
            if (r->ok)
                fprintf(f, "%s: %s%.2f%% after %.0f s of wall clock%s\n", res[i].setting.name,
                        isnan(acc) ? "no model evaluated, " : "", isnan(acc) ? 0.0 : 100.0 * acc,
                        wall, su->at_wall_s > 0 ? "" : " (the shortest run)");
        }
    }
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = shown(res, i);
        if (r->ok && r->trained_steps > 0)
            fprintf(f,
                    "%s: %llu local steps computed, %llu in updates of closed rounds: %.1f%% "
                    "wasted\n",
                    res[i].setting.name, (unsigned long long)r->trained_steps,
                    (unsigned long long)r->totals.aggregated_steps,
                    100.0 * (1.0 - (double)r->totals.aggregated_steps / (double)r->trained_steps));
    }
    for (size_t i = 0; i < n; i++)
        if (res[i].alias_of < 0 && !res[i].ok)
            fprintf(f, "%s failed: %s\n", res[i].setting.name, res[i].error);
}

int sl__bench_fl_md(const fl_setup *su, const fl_result *res, size_t n, const char *path,
                    double dense_bytes, uint64_t params)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "starling bench fl: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("<!-- written by `starling bench fl` -->\n", f);
    sl__bench_fl_describe(su, dense_bytes, params, f, "");
    fprintf(
        f,
        "\n| setting | values | density | final acc. | best acc. | mean of the last %d rounds | "
        "rounds to %.0f%% | bytes up | bytes down | up vs dense | down per device-round | "
        "wall |",
        SL_FL_MEAN_ROUNDS, 100.0 * su->acc_target);
    for (size_t l = 0; l < NREACH; l++)
        fprintf(f, " to %.0f%%: round / up / down | up to %.0f%% vs dense |",
                100.0 * reach_levels[l], 100.0 * reach_levels[l]);
    fputs("\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", f);
    for (size_t l = 0; l < NREACH; l++)
        fputs("---:|---:|", f);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        row w;
        make_row(res, i, &w);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", w.label,
                w.values, w.density, w.final_acc, w.best_acc, w.mean_acc, w.rounds_to, w.up, w.down,
                w.ratio, w.down_frac, w.wall);
        for (size_t l = 0; l < NREACH; l++) {
            reach_cells c;
            make_reach(res, n, i, reach_levels[l], &c);
            if (strcmp(c.up, "-") == 0)
                fprintf(f, " %s | %s |", c.round, c.vs_dense);
            else
                fprintf(f, " %s / %s / %s | %s |", c.round, c.up, c.down, c.vs_dense);
        }
        fputc('\n', f);
    }
    fputs("\nAccuracy: the evaluator's, on the 10,000 test images, of the model each round "
          "made. Down per device-round: bytes down / (selected devices x dense model bytes). To a "
          "level: the first round whose model reached it, and the bytes every device sent and "
          "received in all rounds up to it; vs dense: the dense run's bytes up to the level / "
          "these.\n",
          f);
    if (fclose(f) != 0) {
        fprintf(stderr, "starling bench fl: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static cJSON *json_num_or_null(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

void sl__bench_fl_json(const fl_setup *su, const fl_result *res, size_t n, double dense_bytes,
                       uint64_t params)
{
    cJSON *root = cJSON_CreateObject(), *setup, *arr;
    char *text;
    cJSON_AddStringToObject(root, "benchmark", "fl");
    setup = cJSON_AddObjectToObject(root, "setup");
    cJSON_AddStringToObject(setup, "dataset", "fashion-mnist");
    cJSON_AddStringToObject(setup, "model", su->model);
    cJSON_AddNumberToObject(setup, "params", (double)params);
    cJSON_AddNumberToObject(setup, "dense_model_bytes", dense_bytes);
    cJSON_AddStringToObject(setup, "fleet", su->fleet);
    cJSON_AddNumberToObject(setup, "clients", su->clients);
    cJSON_AddNumberToObject(setup, "target_reports", su->target);
    cJSON_AddNumberToObject(setup, "over_selection", su->over_selection);
    cJSON_AddNumberToObject(setup, "quorum", su->quorum);
    cJSON_AddNumberToObject(setup, "dropout", su->dropout);
    cJSON_AddNumberToObject(setup, "cut", su->cut);
    cJSON_AddNumberToObject(setup, "straggle", su->straggle);
    cJSON_AddNumberToObject(setup, "straggle_factor", su->straggle_factor);
    cJSON_AddStringToObject(setup, "partition", su->partition);
    cJSON_AddNumberToObject(setup, "local_epochs", su->epochs);
    cJSON_AddNumberToObject(setup, "batch", su->batch);
    cJSON_AddNumberToObject(setup, "lr", su->lr);
    cJSON_AddNumberToObject(setup, "momentum", su->momentum);
    cJSON_AddNumberToObject(setup, "rounds", su->rounds);
    cJSON_AddStringToObject(setup, "aggregator", "fedavg");
    cJSON_AddNumberToObject(setup, "target_accuracy", su->acc_target);
    arr = cJSON_AddArrayToObject(root, "settings");
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = shown(res, i);
        const sl_fl_totals *t = &r->totals;
        cJSON *o = cJSON_CreateObject(), *curve;
        double cum = 0;
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "name", res[i].setting.name);
        if (res[i].alias_of >= 0)
            cJSON_AddStringToObject(o, "same_as", r->setting.name);
        cJSON_AddStringToObject(o, "values", r->setting.values);
        cJSON_AddNumberToObject(o, "density", r->setting.density);
        if (r->ok) { /* what the task ran with: given, or the coordinator's default */
            const char *scope = sl_topk_scope_name(r->run.config.topk_scope);
            const char *ef = sl_error_feedback_name(r->run.config.error_feedback);
            cJSON_AddStringToObject(o, "topk_scope", scope ? scope : "?");
            cJSON_AddStringToObject(o, "error_feedback", ef ? ef : "?");
            cJSON_AddNumberToObject(o, "residual_decay", r->run.config.residual_decay);
        } else { /* what the setting gave; "default" where it left it to the coordinator */
            cJSON_AddStringToObject(o, "topk_scope",
                                    r->setting.scope[0] ? r->setting.scope : "default");
            cJSON_AddStringToObject(o, "error_feedback",
                                    r->setting.feedback[0] ? r->setting.feedback : "default");
            if (r->setting.decay > 0)
                cJSON_AddNumberToObject(o, "residual_decay", r->setting.decay);
        }
        cJSON_AddStringToObject(o, "aggregator",
                                r->setting.aggregator[0] ? r->setting.aggregator : "fedavg");
        if (r->setting.server_lr > 0)
            cJSON_AddNumberToObject(o, "server_lr", r->setting.server_lr);
        if (r->setting.warmup_rounds > 0) {
            cJSON_AddNumberToObject(o, "warmup_rounds", r->setting.warmup_rounds);
            cJSON_AddNumberToObject(o, "warmup_density", r->setting.warmup_density);
        }
        cJSON_AddBoolToObject(o, "ok", r->ok);
        if (!r->ok) {
            cJSON_AddStringToObject(o, "error", r->error);
            continue;
        }
        /* the server rate ramp the task ran with (given, or the coordinator's default) */
        cJSON_AddNumberToObject(o, "server_lr_ramp", r->run.config.server_lr_ramp);
        if (r->run.config.server_lr_ramp > 0)
            cJSON_AddNumberToObject(o, "server_lr_boost", r->run.config.server_lr_boost);
        /* and the senders' mean */
        cJSON_AddNumberToObject(o, "sender_mean_rounds", r->run.config.sender_mean_rounds);
        cJSON_AddNumberToObject(o, "sender_mean_epochs", r->run.config.sender_mean_epochs);
        if (sl_sender_mean_length(&r->run.config) > 0) {
            cJSON_AddNumberToObject(o, "sender_mean", r->run.config.sender_mean);
            cJSON_AddBoolToObject(o, "sender_mean_share", r->run.config.sender_mean_share);
        }
        cJSON_AddBoolToObject(o, "sender_mean_fresh", r->run.config.sender_mean_fresh);
        cJSON_AddNumberToObject(o, "sender_mean_partial", r->run.config.sender_mean_partial);
        cJSON_AddNumberToObject(o, "rounds", t->rounds);
        cJSON_AddNumberToObject(o, "rounds_closed", t->closed);
        cJSON_AddItemToObject(o, "final_accuracy", json_num_or_null(t->final_accuracy));
        cJSON_AddItemToObject(o, "best_accuracy", json_num_or_null(t->best_accuracy));
        cJSON_AddItemToObject(o, "mean_accuracy", json_num_or_null(t->mean_accuracy));
        cJSON_AddNumberToObject(o, "mean_from_round", (double)t->mean_from);
        cJSON_AddNumberToObject(o, "mean_to_round", (double)t->mean_to);
        if (t->rounds_to_target > 0)
            cJSON_AddNumberToObject(o, "rounds_to_target", (double)t->rounds_to_target);
        else
            cJSON_AddNullToObject(o, "rounds_to_target");
        if (!isnan(t->seconds_to_target))
            cJSON_AddNumberToObject(o, "seconds_to_target", t->seconds_to_target);
        else
            cJSON_AddNullToObject(o, "seconds_to_target");
        cJSON_AddNumberToObject(o, "bytes_up", (double)t->bytes_up);
        cJSON_AddNumberToObject(o, "bytes_down", (double)t->bytes_down);
        cJSON_AddNumberToObject(o, "dense_bytes_up", t->dense_up);
        cJSON_AddNumberToObject(o, "dense_bytes_down", t->dense_down);
        cJSON_AddItemToObject(o, "compression_vs_dense_up", json_num_or_null(t->compression_up));
        cJSON_AddItemToObject(o, "down_fraction_per_device_round",
                              json_num_or_null(t->down_fraction));
        cJSON_AddNumberToObject(o, "wall_s", r->wall_s);
        /* heterogeneous fleets (#22): the model after the shortest run's wall clock, and the
         * local steps the devices computed against those closed rounds aggregated */
        cJSON_AddNumberToObject(o, "at_wall_s",
                                su->at_wall_s > 0 ? su->at_wall_s : shortest_wall(res, n));
        cJSON_AddItemToObject(
            o, "accuracy_at_wall",
            json_num_or_null(sl_fl_run_accuracy_at(
                &r->run, su->at_wall_s > 0 ? su->at_wall_s : shortest_wall(res, n))));
        {
            /* bytes and rounds to useful accuracies (#23), and dense's up to them */
            cJSON *reach = cJSON_AddArrayToObject(o, "reach");
            const fl_result *d = dense_of(res, n);
            for (size_t l = 0; l < NREACH; l++) {
                cJSON *p = cJSON_CreateObject();
                sl_fl_reach a, b;
                sl_fl_run_reach(&r->run, reach_levels[l], &a);
                cJSON_AddNumberToObject(p, "accuracy", reach_levels[l]);
                if (a.round_no > 0) {
                    cJSON_AddNumberToObject(p, "round", (double)a.round_no);
                    cJSON_AddItemToObject(p, "seconds", json_num_or_null(a.seconds));
                    cJSON_AddNumberToObject(p, "bytes_up", (double)a.bytes_up);
                    cJSON_AddNumberToObject(p, "bytes_down", (double)a.bytes_down);
                } else {
                    cJSON_AddNullToObject(p, "round");
                }
                if (d != NULL)
                    sl_fl_run_reach(&d->run, reach_levels[l], &b);
                cJSON_AddItemToObject(
                    p, "up_vs_dense",
                    json_num_or_null(d != NULL && a.round_no > 0 && b.round_no > 0 && a.bytes_up > 0
                                         ? (double)b.bytes_up / (double)a.bytes_up
                                         : NAN));
                cJSON_AddItemToArray(reach, p);
            }
        }
        cJSON_AddNumberToObject(o, "trained_steps", (double)r->trained_steps);
        cJSON_AddNumberToObject(o, "aggregated_steps", (double)t->aggregated_steps);
        cJSON_AddStringToObject(o, "run_dir", r->dir);
        curve = cJSON_AddArrayToObject(o, "rounds_detail");
        for (size_t k = 0; k < r->run.nrounds; k++) {
            const sl_fl_round *x = &r->run.rounds[k];
            cJSON *p = cJSON_CreateObject();
            cum += (double)x->bytes_up;
            cJSON_AddNumberToObject(p, "round", (double)x->round_no);
            cJSON_AddNumberToObject(p, "reported", x->reported);
            cJSON_AddNumberToObject(p, "bytes_up", (double)x->bytes_up);
            cJSON_AddNumberToObject(p, "bytes_down", (double)x->bytes_down);
            cJSON_AddNumberToObject(p, "cumulative_bytes_up", cum);
            cJSON_AddItemToObject(p, "accuracy", json_num_or_null(x->accuracy));
            cJSON_AddItemToObject(p, "loss", json_num_or_null(x->loss));
            cJSON_AddItemToArray(curve, p);
        }
    }
    text = cJSON_Print(root);
    if (text != NULL)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

int sl__bench_fl_plot(const fl_setup *su, const fl_result *res, size_t n, const char *png)
{
    sl_plot_series series[MAX_SETTINGS];
    double *xs[MAX_SETTINGS] = {0}, *ys[MAX_SETTINGS] = {0};
    char title[256], err[512];
    size_t ns = 0;
    int rc = 0;
    sl_plot_chart c;
    for (size_t i = 0; i < n; i++) {
        const fl_result *r = &res[i];
        double cum = 0;
        if (r->alias_of >= 0 || !r->ok)
            continue;
        xs[ns] = malloc((r->run.nrounds + 1) * sizeof(double));
        ys[ns] = malloc((r->run.nrounds + 1) * sizeof(double));
        if (xs[ns] == NULL || ys[ns] == NULL) {
            rc = -1;
            break;
        }
        for (size_t k = 0; k < r->run.nrounds; k++) {
            cum += (double)r->run.rounds[k].bytes_up;
            xs[ns][k] = cum;
            ys[ns][k] = 100.0 * r->run.rounds[k].accuracy;
        }
        series[ns] =
            (sl_plot_series){r->setting.name, xs[ns], ys[ns], r->run.nrounds, SL_PLOT_LINESPOINTS};
        ns++;
    }
    snprintf(title, sizeof title, "Fashion-MNIST, %s, %u clients %s, %u local epoch%s: %s",
             su->model, su->clients, su->partition, su->epochs, su->epochs == 1 ? "" : "s",
             "test accuracy vs upload bytes");
    memset(&c, 0, sizeof c);
    c.png = png;
    c.title = title;
    c.xlabel = "cumulative bytes uploaded by all devices (log scale)";
    c.ylabel = "test accuracy (%)";
    c.logx = 1;
    c.key = "bottom right";
    c.series = series;
    c.nseries = ns;
    if (rc == 0 && (rc = sl_plot_render(&c, err, sizeof err)) != 0)
        fprintf(stderr, "starling bench fl: %s\n", err);
    for (size_t i = 0; i < MAX_SETTINGS; i++) { /* NULL where nothing was allocated */
        free(xs[i]);
        free(ys[i]);
    }
    return rc;
}
