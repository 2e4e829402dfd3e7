/*
 * cmd_report.c - `starling report --run DATA_DIR -o DIR [--task N]`: the
 * pictures of a run from a coordinator's data directory, without a running
 * coordinator: PNG charts drawn by gnuplot (tests/bench/plot.h) of test
 * accuracy against rounds and against cumulative upload bytes, per-round
 * participation (selected / reported / dropped / late / rejected) and bytes
 * up and down per round beside their dense fp32 equivalents, and
 * DIR/README.md: the task's configuration, totals, the images and a table
 * of every round with the store's exact numbers.
 *
 * The database is read from a private copy (tests/bench/fl_run.h), so the
 * data directory is never written, even with a coordinator running on it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli_int.h"
#include "fl_run.h"
#include "plot.h"
#include "starling/codec.h"
#include "starling/store.h"

static int report_usage(FILE *out)
{
    fprintf(out,
            "usage: starling report --run DATA_DIR -o DIR [options]\n"
            "Charts and a markdown summary of a task's rounds, read from a coordinator's data\n"
            "directory (the one holding starling.db; it is only read, through a copy):\n"
            "  DIR/accuracy_rounds.png   test accuracy (the evaluator's) per round\n"
            "  DIR/accuracy_bytes.png    test accuracy vs cumulative upload bytes (log x),\n"
            "                            beside what dense fp32 FedAvg would have sent\n"
            "  DIR/participation.png     selected / reported / dropped / late / rejected\n"
            "  DIR/bytes.png             bytes up and down per round, and the dense equivalents\n"
            "  DIR/README.md             configuration, totals, the images, every round\n"
            "Each chart's gnuplot script (.gp) and data (.dat) are kept beside it.\n"
            "  --run DATA_DIR      the coordinator's data directory (required)\n"
            "  -o, --output DIR    where to write (created when missing; required)\n"
            "  --task N            the task (default: the only one in the database)\n"
            "  --target-acc A      accuracy for \"rounds to\" in the totals (default 0.85)\n"
            "  --no-plots          README.md only (no gnuplot needed)\n"
            "  --help              this text\n"
            "Needs gnuplot (Debian: gnuplot-nox) unless --no-plots.\n"
            "exit status: 0 written, 1 error (no database, gnuplot missing, a write failed),\n"
            "2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static const char *state_name(int s)
{
    static const char *const names[] = {"selecting", "training", "aggregating", "closed",
                                        "abandoned"};
    return s >= 0 && s < 5 ? names[s] : "?";
}

typedef struct charts {
    size_t n;
    double *round, *acc, *cum_up, *cum_dense, *selected, *reported, *late, *dropped, *rejected;
    double *up, *down, *dense_up, *dense_down;
} charts;

static void charts_free(charts *c)
{
    double **all[] = {&c->round,    &c->acc,      &c->cum_up,    &c->cum_dense, &c->selected,
                      &c->reported, &c->late,     &c->dropped,   &c->rejected,  &c->up,
                      &c->down,     &c->dense_up, &c->dense_down};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

/* The series of every chart; index 0 is the initial model (round 0) when it was evaluated. */
static int charts_make(const sl_fl_run *r, charts *c)
{
    double **all[] = {&c->round,    &c->acc,      &c->cum_up,    &c->cum_dense, &c->selected,
                      &c->reported, &c->late,     &c->dropped,   &c->rejected,  &c->up,
                      &c->down,     &c->dense_up, &c->dense_down};
    size_t cap = r->nrounds + 1, k = 0;
    double up = 0, dense = 0;
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if ((*all[i] = calloc(cap, sizeof(double))) == NULL) {
            charts_free(c);
            return -1;
        }
    /* round 0: the initial model, before any byte moved (left out of the log-x chart) */
    c->round[k] = 0;
    c->acc[k] = 100.0 * r->initial_accuracy;
    c->cum_up[k] = c->cum_dense[k] = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i] != c->round && *all[i] != c->acc && *all[i] != c->cum_up &&
            *all[i] != c->cum_dense)
            (*all[i])[k] = NAN;
    k++;
    for (size_t i = 0; i < r->nrounds; i++, k++) {
        const sl_fl_round *x = &r->rounds[i];
        up += (double)x->bytes_up;
        dense += (double)x->reported * r->dense_bytes;
        c->round[k] = (double)x->round_no;
        c->acc[k] = 100.0 * x->accuracy;
        c->cum_up[k] = up;
        c->cum_dense[k] = dense;
        c->selected[k] = x->selected;
        /* stacked bars: each series is the top of its band */
        c->reported[k] = x->reported;
        c->late[k] = c->reported[k] + x->late;
        c->dropped[k] = c->late[k] + x->dropped;
        c->rejected[k] = c->dropped[k] + x->rejected;
        c->up[k] = (double)x->bytes_up;
        c->down[k] = (double)x->bytes_down;
        c->dense_up[k] = (double)x->reported * r->dense_bytes;
        c->dense_down[k] = (double)x->selected * r->dense_bytes;
    }
    c->n = k;
    return 0;
}

/* One chart into @dir/@file. @ymax > 0: the y range is [0, ymax]. x is the round number
 * unless @logx (bytes). */
static int render(const char *dir, const char *file, const char *title, const char *xlabel,
                  const char *ylabel, int logx, int logy, double ymax, const sl_plot_series *s,
                  size_t ns)
{
    char png[4200], err[512];
    sl_plot_chart c;
    snprintf(png, sizeof png, "%s/%s", dir, file);
    memset(&c, 0, sizeof c);
    c.png = png;
    c.title = title;
    c.xlabel = xlabel;
    c.ylabel = ylabel;
    c.logx = logx;
    c.logy = logy;
    c.ymax = ymax;
    c.integer_x = !logx;
    c.key = "bottom right";
    c.series = s;
    c.nseries = ns;
    if (sl_plot_render(&c, err, sizeof err) != 0) {
        fprintf(stderr, "starling report: %s\n", err);
        return -1;
    }
    return 0;
}

static int draw(const sl_fl_run *r, const char *dir)
{
    charts c;
    char title[256];
    double most = 0; /* the largest bar or selection */
    int rc = 0;
    if (charts_make(r, &c) != 0) {
        fprintf(stderr, "starling report: out of memory\n");
        return -1;
    }
    for (size_t i = 1; i < c.n; i++)
        most = fmax(most, fmax(c.selected[i], c.rejected[i]));
    snprintf(title, sizeof title, "task %lld (%s): ", (long long)r->task_id, r->name);
    {
        char t[320];
        sl_plot_series s[] = {{"test accuracy", c.round, c.acc, c.n, SL_PLOT_LINESPOINTS}};
        snprintf(t, sizeof t, "%stest accuracy per round", title);
        rc |= render(dir, "accuracy_rounds.png", t, "round (0: the initial model)",
                     "test accuracy (%)", 0, 0, 0, s, 1);
    }
    {
        char t[320];
        sl_plot_series s[] = {{"this run", c.cum_up, c.acc, c.n, SL_PLOT_LINESPOINTS},
                              {"the same rounds at dense fp32 update bytes", c.cum_dense, c.acc,
                               c.n, SL_PLOT_DASHED}};
        snprintf(t, sizeof t, "%stest accuracy vs bytes uploaded", title);
        rc |= render(dir, "accuracy_bytes.png", t, "cumulative bytes uploaded (log scale)",
                     "test accuracy (%)", 1, 0, 0, s, 2);
    }
    {
        char t[320];
        sl_plot_series s[] = {{"rejected", c.round, c.rejected, c.n, SL_PLOT_BOXES},
                              {"dropped", c.round, c.dropped, c.n, SL_PLOT_BOXES},
                              {"late", c.round, c.late, c.n, SL_PLOT_BOXES},
                              {"reported", c.round, c.reported, c.n, SL_PLOT_BOXES},
                              {"selected", c.round, c.selected, c.n, SL_PLOT_LINESPOINTS}};
        snprintf(t, sizeof t, "%sparticipation per round", title);
        rc |= render(dir, "participation.png", t, "round", "devices", 0, 0, 1.0 + 1.2 * most, s, 5);
    }
    {
        char t[320];
        sl_plot_series s[] = {
            {"bytes up", c.round, c.up, c.n, SL_PLOT_LINESPOINTS},
            {"bytes down", c.round, c.down, c.n, SL_PLOT_LINESPOINTS},
            {"dense up (fp32 updates)", c.round, c.dense_up, c.n, SL_PLOT_DASHED},
            {"dense down (full models)", c.round, c.dense_down, c.n, SL_PLOT_DASHED}};
        snprintf(t, sizeof t, "%sbytes per round", title);
        rc |= render(dir, "bytes.png", t, "round", "bytes (log scale)", 0, 1, 0, s, 4);
    }
    charts_free(&c);
    return rc != 0 ? -1 : 0;
}

static void pct(double v, char *out, size_t cap)
{
    if (isnan(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.2f%%", 100.0 * v);
}

static void write_totals(FILE *f, const sl_fl_run *r, const sl_fl_totals *t, double acc_target)
{
    char a[24], b[24], c[24];
    fputs("## Totals\n\n| | |\n|---|---|\n", f);
    fprintf(f, "| rounds | %u (%u closed, %u abandoned, %u open) |\n", t->rounds, t->closed,
            t->abandoned, t->rounds - t->closed - t->abandoned);
    fprintf(f, "| updates accepted | %llu of %llu selected |\n", (unsigned long long)t->reported,
            (unsigned long long)t->selected);
    fprintf(f, "| dropped / late / rejected | %llu / %llu / %llu |\n",
            (unsigned long long)t->dropped, (unsigned long long)t->late,
            (unsigned long long)t->rejected);
    sl_fl_human_bytes((double)t->bytes_up, a, sizeof a);
    sl_fl_human_bytes(t->dense_up, b, sizeof b);
    if (isnan(t->compression_up))
        snprintf(c, sizeof c, "-");
    else
        snprintf(c, sizeof c, "%.1fx", t->compression_up);
    fprintf(f, "| bytes up | %lld (%s); dense fp32 updates: %.0f (%s); %s fewer |\n",
            (long long)t->bytes_up, a, t->dense_up, b, c);
    sl_fl_human_bytes((double)t->bytes_down, a, sizeof a);
    sl_fl_human_bytes(t->dense_down, b, sizeof b);
    fprintf(f, "| bytes down | %lld (%s); full models to every selected device: %.0f (%s) |\n",
            (long long)t->bytes_down, a, t->dense_down, b);
    pct(t->down_fraction, a, sizeof a);
    fprintf(f, "| down per device and round | %s of the dense model |\n", a);
    pct(t->final_accuracy, a, sizeof a);
    if (t->final_version > 0)
        fprintf(f, "| final accuracy | %s (loss %.4f, model version %lld) |\n", a, t->final_loss,
                (long long)t->final_version);
    else
        fprintf(f, "| final accuracy | - (no evaluator reported) |\n");
    pct(t->best_accuracy, a, sizeof a);
    fprintf(f, "| best accuracy | %s |\n", a);
    pct(r->initial_accuracy, a, sizeof a);
    fprintf(f, "| initial model | %s |\n", a);
    if (t->rounds_to_target > 0)
        fprintf(f, "| rounds to %.0f%% | %lld |\n", 100.0 * acc_target,
                (long long)t->rounds_to_target);
    else
        fprintf(f, "| rounds to %.0f%% | not reached |\n", 100.0 * acc_target);
    {
        /* what reaching a useful accuracy cost: rounds and the fleet's cumulative bytes */
        static const double levels[] = {0.80, 0.85};
        for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
            sl_fl_reach h;
            char up[24], down[24];
            sl_fl_run_reach(r, levels[l], &h);
            sl_fl_human_bytes((double)h.bytes_up, up, sizeof up);
            sl_fl_human_bytes((double)h.bytes_down, down, sizeof down);
            if (h.round_no > 0)
                fprintf(f, "| to %.0f%% | round %lld: %s up, %s down in all rounds to it |\n",
                        100.0 * levels[l], (long long)h.round_no, up, down);
            else
                fprintf(f, "| to %.0f%% | not reached |\n", 100.0 * levels[l]);
        }
    }
    fprintf(f, "| wall time | %.0f s (first round opened to last round closed) |\n\n", t->wall_s);
}

static int write_readme(const sl_fl_run *r, const char *run_dir, const char *dir, int plots,
                        double acc_target)
{
    char path[4200], dense[24], when[32];
    const sl_task_config *cfg = &r->config;
    sl_fl_totals t;
    time_t now = time(NULL);
    struct tm tm;
    FILE *f;
    snprintf(path, sizeof path, "%s/README.md", dir);
    if ((f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "starling report: %s: %s\n", path, strerror(errno));
        return -1;
    }
    sl_fl_run_totals(r, acc_target, &t);
    sl_fl_human_bytes(r->dense_bytes, dense, sizeof dense);
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%SZ", &tm);
    fprintf(f, "# Run report: task %lld \"%s\"\n\n", (long long)r->task_id, r->name);
    fprintf(f, "Written by `starling report` on %s from the coordinator data directory `%s`.\n\n",
            when, run_dir);
    fprintf(f,
            "Model: %llu parameters (a dense fp32 update is %.0f bytes, %s). Updates: %s values, "
            "density %g%s. Rounds: target %u reports, "
            "quorum %u, over-selection %g, selection window %lld ms, report deadline %lld ms, "
            "%u rounds%s. Local training: %u epoch%s, batch %u, lr %g, momentum %g. "
            "Aggregator: %s.\n\n",
            (unsigned long long)r->params, r->dense_bytes, dense, sl_value_mode_name(cfg->values),
            cfg->density, cfg->density < 1 ? " (top-k with error feedback on the devices)" : "",
            cfg->target, cfg->quorum, cfg->over_selection, (long long)cfg->selection_window_ms,
            (long long)cfg->report_deadline_ms, cfg->rounds,
            cfg->rounds == 0 ? " (until stopped)" : "", cfg->local_epochs,
            cfg->local_epochs == 1 ? "" : "s", cfg->batch, cfg->local_lr, cfg->local_momentum,
            sl_aggregator_name(cfg->aggregator));
    write_totals(f, r, &t, acc_target);
    if (plots)
        fputs("## Charts\n\n"
              "![test accuracy per round](accuracy_rounds.png)\n\n"
              "![test accuracy vs cumulative upload bytes](accuracy_bytes.png)\n\n"
              "![participation per round](participation.png)\n\n"
              "![bytes up and down per round](bytes.png)\n\n",
              f);
    fputs("## Rounds\n\n"
          "Accuracy and loss: the evaluator's, for the model version the round made. Up vs "
          "dense: reported x dense update bytes / bytes up.\n\n"
          "| round | state | selected | reported | dropped | late | rejected | bytes up | "
          "bytes down | up vs dense | accuracy | loss |\n"
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
          f);
    for (size_t i = 0; i < r->nrounds; i++) {
        const sl_fl_round *x = &r->rounds[i];
        char ratio[24], acc[16], loss[16];
        if (x->bytes_up > 0)
            snprintf(ratio, sizeof ratio, "%.1fx",
                     (double)x->reported * r->dense_bytes / (double)x->bytes_up);
        else
            snprintf(ratio, sizeof ratio, "-");
        pct(x->accuracy, acc, sizeof acc);
        if (isnan(x->loss))
            snprintf(loss, sizeof loss, "-");
        else
            snprintf(loss, sizeof loss, "%.4f", x->loss);
        fprintf(f, "| %lld | %s | %u | %u | %u | %u | %u | %lld | %lld | %s | %s | %s |\n",
                (long long)x->round_no, state_name(x->state), x->selected, x->reported, x->dropped,
                x->late, x->rejected, (long long)x->bytes_up, (long long)x->bytes_down, ratio, acc,
                loss);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "starling report: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int sl__cli_report(int argc, char **argv)
{
    sl__cli c = {"report", NULL, NULL, NULL, 0, NULL};
    const char *run_dir = NULL, *out_dir = NULL, *v = NULL;
    int64_t task = 0;
    double acc_target = 0.85;
    int plots = 1, rc;
    sl_fl_run run;
    char err[512];
    for (int i = 1; i < argc; i++) {
        int o;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return report_usage(stdout);
        if (strcmp(argv[i], "--no-plots") == 0) {
            plots = 0;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--run", &run_dir)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "-o", &out_dir)) != 0 ||
                   (o = sl__cli_opt(argc, argv, &i, "--output", &out_dir)) != 0) {
            if (o < 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--task", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--task", v, 1, INT64_MAX, &task) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--target-acc", &v)) != 0) {
            char *end;
            if (o < 0)
                return SL__CLI_USAGE;
            acc_target = strtod(v, &end);
            if (end == v || *end != '\0' || !(acc_target >= 0 && acc_target <= 1))
                return sl__cli_usage_error(&c, "--target-acc: \"%s\" is not in 0..1", v);
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (run_dir == NULL || run_dir[0] == '\0')
        return sl__cli_usage_error(&c, "--run DATA_DIR is required");
    if (out_dir == NULL || out_dir[0] == '\0')
        return sl__cli_usage_error(&c, "-o DIR is required");
    if (plots && sl_plot_available(err, sizeof err) != 0)
        return sl__cli_error(&c, "%s; --no-plots writes README.md alone", err);
    if (sl_fl_run_load(run_dir, task, &run, err, sizeof err) != 0)
        return sl__cli_error(&c, "%s", err);
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        sl_fl_run_free(&run);
        return sl__cli_error(&c, "%s: %s", out_dir, strerror(errno));
    }
    rc = plots ? draw(&run, out_dir) : 0;
    if (write_readme(&run, run_dir, out_dir, plots, acc_target) != 0)
        rc = -1;
    if (rc == 0)
        printf("report of task %lld (%zu rounds) in %s/README.md\n", (long long)run.task_id,
               run.nrounds, out_dir);
    sl_fl_run_free(&run);
    return rc == 0 ? SL__CLI_OK : SL__CLI_ERROR;
}
