/*
 * bench_fl_run.c - a task's run read from a coordinator's data directory
 * (see fl_run.h): a private copy of the database, opened through
 * starling/store.h, its rounds and the evaluator's metrics.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fl_run.h"
#include "starling/codec.h"
#include "starling/store.h"

#define ROUND_PAGE 1000u

static int fail(char *err, size_t errcap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t errcap, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && errcap > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Copy @from to @to; a missing @from is fine when @optional. 0 or -1 (errno set). */
static int copy_file(const char *from, const char *to, int optional)
{
    char buf[1 << 16];
    FILE *in = fopen(from, "rb"), *out;
    size_t n;
    int rc = 0;
    if (in == NULL)
        return optional && errno == ENOENT ? 0 : -1;
    out = fopen(to, "wb");
    if (out == NULL) {
        fclose(in);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = -1;
            break;
        }
    if (ferror(in))
        rc = -1;
    fclose(in);
    if (fclose(out) != 0)
        rc = -1;
    return rc;
}

typedef struct task_list {
    int64_t ids[8];
    size_t n;
} task_list;

static int add_task(void *ctx, int64_t id)
{
    task_list *l = ctx;
    if (l->n < sizeof l->ids / sizeof l->ids[0])
        l->ids[l->n] = id;
    l->n++;
    return 0;
}

typedef struct round_list {
    sl_fl_round *v;
    size_t n, cap;
    int oom;
} round_list;

static int add_steps(void *ctx, int64_t device_id, uint32_t local_steps)
{
    (void)device_id;
    *(uint64_t *)ctx += local_steps;
    return 0;
}

static int add_round(void *ctx, const sl_round_record *r)
{
    round_list *l = ctx;
    sl_fl_round *x;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        sl_fl_round *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) {
            l->oom = 1;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    x = &l->v[l->n++];
    memset(x, 0, sizeof *x);
    x->round_id = r->id;
    x->round_no = r->round_no;
    x->state = (int)r->state;
    /* only a closed round made a version: the one after its base (as GET /v1/rounds/{id}) */
    x->model_version = r->state == SL_ROUND_CLOSED ? r->base_version + 1 : 0;
    x->target = r->target;
    x->quorum = r->quorum;
    x->selected = r->selected;
    x->reported = r->reported;
    x->dropped = r->dropped;
    x->late = r->late;
    x->rejected = r->rejected;
    x->bytes_up = r->bytes_up;
    x->bytes_down = r->bytes_down;
    x->opened_at_ms = r->opened_at_ms;
    x->closed_at_ms = r->closed_at_ms;
    x->accuracy = x->loss = x->mae = x->rmse = NAN;
    x->fed_loss = x->fed_accuracy = x->fed_rmse = NAN;
    snprintf(x->error, sizeof x->error, "%s", r->error);
    return 0;
}

/* The evaluator's metrics of @version when it was made from @parent (-1: any parent):
 * accuracy, loss, mae, rmse (NaN each when absent). */
static void version_metrics(sl_store *s, int64_t task, int64_t version, int64_t parent,
                            double out[4])
{
    static const char *const keys[4] = {"accuracy", "loss", "mae", "rmse"};
    sl_model_record m;
    out[0] = out[1] = out[2] = out[3] = NAN;
    if (version <= 0 || sl_store_get_model(s, task, version, &m) != SL_OK)
        return;
    if ((parent < 0 || m.parent == parent) && m.metrics != NULL) {
        cJSON *j = cJSON_Parse(m.metrics);
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
            if (cJSON_IsNumber(v))
                out[k] = v->valuedouble;
        }
        cJSON_Delete(j);
    }
    sl_store_model_free(&m);
}

static int read_run(sl_store *s, int64_t task_id, sl_fl_run *out, char *err, size_t errcap)
{
    task_list tasks = {{0}, 0};
    round_list rounds = {NULL, 0, 0, 0};
    sl_task_record t;
    sl_layout *layout = NULL;
    char cerr[256];
    int rc;

    if (task_id <= 0) {
        rc = sl_store_list_tasks(s, add_task, &tasks);
        if (rc != SL_OK)
            return fail(err, errcap, "listing tasks: %s", sl_strerror(rc));
        if (tasks.n == 0)
            return fail(err, errcap, "the database holds no task");
        if (tasks.n > 1)
            return fail(err, errcap,
                        "the database holds %zu tasks (ids %lld..%lld): choose one "
                        "with --task N",
                        tasks.n, (long long)tasks.ids[0],
                        (long long)tasks.ids[tasks.n < 8 ? tasks.n - 1 : 7]);
        task_id = tasks.ids[0];
    }
    memset(&t, 0, sizeof t);
    rc = sl_store_get_task(s, task_id, &t);
    if (rc == SL_ENOENT)
        return fail(err, errcap, "no task %lld in the database", (long long)task_id);
    if (rc != SL_OK)
        return fail(err, errcap, "reading task %lld: %s", (long long)task_id, sl_strerror(rc));
    memset(out, 0, sizeof *out);
    out->task_id = task_id;
    snprintf(out->name, sizeof out->name, "%s", t.name ? t.name : "");
    rc = sl_task_config_parse_stored(t.config_json, strlen(t.config_json), &out->config, cerr,
                                     sizeof cerr);
    if (rc == SL_OK)
        rc = sl_layout_parse(t.layout_text, strlen(t.layout_text), &layout);
    sl_store_task_free(&t);
    if (rc != SL_OK)
        return fail(err, errcap, "task %lld: unreadable configuration or layout: %s",
                    (long long)task_id, sl_strerror(rc));
    out->params = sl_layout_params(layout);
    out->dense_bytes = 4.0 * (double)out->params;
    sl_layout_free(layout);
    {
        double v[4];
        version_metrics(s, task_id, 1, -1, v);
        out->initial_accuracy = v[0];
        out->initial_loss = v[1];
        out->initial_rmse = v[3];
    }

    for (uint32_t offset = 0;; offset += ROUND_PAGE) {
        size_t before = rounds.n;
        rc = sl_store_list_rounds(s, task_id, offset, ROUND_PAGE, add_round, &rounds);
        if (rc != SL_OK || rounds.oom) {
            free(rounds.v);
            return fail(err, errcap, "listing rounds: %s",
                        sl_strerror(rounds.oom ? SL_ENOMEM : rc));
        }
        if (rounds.n - before < ROUND_PAGE)
            break;
    }
    /* newest first from the store: ascend */
    for (size_t i = 0; i < rounds.n / 2; i++) {
        sl_fl_round tmp = rounds.v[i];
        rounds.v[i] = rounds.v[rounds.n - 1 - i];
        rounds.v[rounds.n - 1 - i] = tmp;
    }
    for (size_t i = 0; i < rounds.n; i++) {
        sl_fl_round *r = &rounds.v[i];
        sl_store_eval_sum fed;
        (void)sl_store_list_steps(s, r->round_id, add_steps, &r->steps);
        if (r->model_version > 0) {
            double v[4];
            version_metrics(s, task_id, r->model_version, r->model_version - 1, v);
            r->accuracy = v[0];
            r->loss = v[1];
            r->mae = v[2];
            r->rmse = v[3];
        }
        if (sl_store_round_eval(s, r->round_id, &fed) == SL_OK && fed.devices > 0) {
            r->fed_devices = fed.devices;
            r->fed_samples = fed.samples;
            r->fed_loss = fed.loss;
            r->fed_accuracy = fed.accuracy;
            r->fed_rmse = fed.rmse;
        }
    }
    out->rounds = rounds.v;
    out->nrounds = rounds.n;
    return 0;
}

int sl_fl_run_load(const char *data_dir, int64_t task_id, sl_fl_run *out, char *err, size_t errcap)
{
    char src[4096], tmp[4096], db[4200], from[4300], to[4300], serr[256];
    const char *base = getenv("TMPDIR");
    sl_store_options o;
    sl_store *s = NULL;
    struct stat st;
    int rc;

    if (data_dir == NULL || out == NULL)
        return fail(err, errcap, "no data directory");
    snprintf(src, sizeof src, "%s/starling.db", data_dir);
    if (stat(src, &st) != 0 || !S_ISREG(st.st_mode))
        return fail(err, errcap, "%s: no coordinator database here (%s)", data_dir,
                    stat(src, &st) != 0 ? strerror(errno) : "not a file");
    snprintf(tmp, sizeof tmp, "%s/starling-report.XXXXXX",
             base != NULL && base[0] != '\0' ? base : "/tmp");
    if (mkdtemp(tmp) == NULL)
        return fail(err, errcap, "a temporary directory in %s: %s", tmp, strerror(errno));
    snprintf(db, sizeof db, "%s/starling.db", tmp);
    snprintf(from, sizeof from, "%s-wal", src);
    snprintf(to, sizeof to, "%s-wal", db);
    if (copy_file(src, db, 0) != 0 || copy_file(from, to, 1) != 0) {
        rc = fail(err, errcap, "copying %s: %s", src, strerror(errno));
        goto out;
    }
    sl_store_options_default(&o);
    o.path = db;
    o.readers = 1;
    rc = sl_store_open(&o, &s, serr, sizeof serr);
    if (rc != SL_OK) {
        rc = fail(err, errcap, "%s: %s", src, serr[0] ? serr : sl_strerror(rc));
        goto out;
    }
    rc = read_run(s, task_id, out, err, errcap);
out:
    sl_store_close(s);
    remove(db);
    remove(to);
    snprintf(from, sizeof from, "%s-shm", db);
    remove(from);
    rmdir(tmp);
    return rc;
}

void sl_fl_run_free(sl_fl_run *r)
{
    if (r == NULL)
        return;
    free(r->rounds);
    r->rounds = NULL;
    r->nrounds = 0;
}

double sl_fl_run_accuracy_at(const sl_fl_run *r, double seconds)
{
    double acc = NAN;
    int64_t last = 0;
    if (r == NULL || r->nrounds == 0 || !(seconds >= 0))
        return NAN;
    for (size_t i = 0; i < r->nrounds; i++) {
        const sl_fl_round *x = &r->rounds[i];
        if (x->closed_at_ms > 0 && !isnan(x->accuracy) && x->closed_at_ms >= last &&
            (double)(x->closed_at_ms - r->rounds[0].opened_at_ms) <= seconds * 1000.0) {
            last = x->closed_at_ms;
            acc = x->accuracy;
        }
    }
    return acc;
}

/* The first round whose accuracy is at least @level (@rmse 0), or whose RMSE is at most @level
 * (@rmse 1). */
static void reach(const sl_fl_run *r, double level, int rmse, sl_fl_reach *out)
{
    memset(out, 0, sizeof *out);
    out->level = level;
    out->seconds = NAN;
    for (size_t i = 0; r != NULL && i < r->nrounds; i++) {
        const sl_fl_round *x = &r->rounds[i];
        double v = rmse ? x->rmse : x->accuracy;
        out->bytes_up += x->bytes_up;
        out->bytes_down += x->bytes_down;
        if (!isnan(v) && (rmse ? v <= level : v >= level)) {
            out->round_no = x->round_no;
            if (x->closed_at_ms > 0 && r->rounds[0].opened_at_ms > 0)
                out->seconds = (double)(x->closed_at_ms - r->rounds[0].opened_at_ms) / 1000.0;
            return;
        }
    }
}

void sl_fl_run_reach(const sl_fl_run *r, double accuracy, sl_fl_reach *out)
{
    reach(r, accuracy, 0, out);
}

void sl_fl_run_reach_rmse(const sl_fl_run *r, double rmse, sl_fl_reach *out)
{
    reach(r, rmse, 1, out);
}

void sl_fl_run_totals(const sl_fl_run *r, double acc_target, sl_fl_totals *t)
{
    int64_t first = 0, last = 0;
    memset(t, 0, sizeof *t);
    t->final_accuracy = t->final_loss = t->best_accuracy = NAN;
    t->final_rmse = t->best_rmse = NAN;
    t->compression_up = t->down_fraction = NAN;
    t->seconds_to_target = NAN;
    for (size_t i = 0; i < r->nrounds; i++) {
        const sl_fl_round *x = &r->rounds[i];
        t->rounds++;
        t->closed += x->state == SL_ROUND_CLOSED;
        t->abandoned += x->state == SL_ROUND_ABANDONED;
        if (x->state == SL_ROUND_CLOSED)
            t->aggregated_steps += x->steps;
        t->selected += x->selected;
        t->reported += x->reported;
        t->dropped += x->dropped;
        t->late += x->late;
        t->rejected += x->rejected;
        t->bytes_up += x->bytes_up;
        t->bytes_down += x->bytes_down;
        if (first == 0 || (x->opened_at_ms > 0 && x->opened_at_ms < first))
            first = x->opened_at_ms;
        if (x->closed_at_ms > last)
            last = x->closed_at_ms;
        if (!isnan(x->rmse)) {
            t->final_rmse = x->rmse;
            if (isnan(t->best_rmse) || x->rmse < t->best_rmse)
                t->best_rmse = x->rmse;
        }
        if (!isnan(x->accuracy)) {
            t->final_accuracy = x->accuracy;
            t->final_loss = x->loss;
            t->final_version = x->model_version;
            if (isnan(t->best_accuracy) || x->accuracy > t->best_accuracy)
                t->best_accuracy = x->accuracy;
            if (t->rounds_to_target == 0 && x->accuracy >= acc_target) {
                t->rounds_to_target = x->round_no;
                if (r->nrounds > 0 && x->closed_at_ms > 0)
                    t->seconds_to_target =
                        (double)(x->closed_at_ms - r->rounds[0].opened_at_ms) / 1000.0;
            }
        }
    }
    /* single rounds move by a few tenths: the mean of the last rounds says more */
    t->mean_accuracy = NAN;
    if (!isnan(t->final_accuracy)) {
        double sum = 0;
        size_t k = 0;
        int64_t last_no = 0;
        for (size_t i = 0; i < r->nrounds; i++)
            if (!isnan(r->rounds[i].accuracy) && r->rounds[i].round_no > last_no)
                last_no = r->rounds[i].round_no;
        t->mean_to = last_no;
        t->mean_from = last_no > SL_FL_MEAN_ROUNDS ? last_no - SL_FL_MEAN_ROUNDS + 1 : 1;
        for (size_t i = 0; i < r->nrounds; i++) {
            const sl_fl_round *x = &r->rounds[i];
            if (!isnan(x->accuracy) && x->round_no >= t->mean_from && x->round_no <= last_no)
                sum += x->accuracy, k++;
        }
        t->mean_accuracy = k ? sum / (double)k : NAN;
    }
    t->dense_up = (double)t->reported * r->dense_bytes;
    t->dense_down = (double)t->selected * r->dense_bytes;
    if (t->bytes_up > 0)
        t->compression_up = t->dense_up / (double)t->bytes_up;
    if (t->dense_down > 0)
        t->down_fraction = (double)t->bytes_down / t->dense_down;
    t->wall_s = last > first && first > 0 ? (double)(last - first) / 1000.0 : 0.0;
}

void sl_fl_human_bytes(double n, char *out, size_t cap)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    size_t u = 0;
    if (!isfinite(n) || n < 0) {
        snprintf(out, cap, "-");
        return;
    }
    while (n >= 1000.0 && u + 1 < sizeof unit / sizeof unit[0]) {
        n /= 1000.0;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%.0f B", n);
    else
        snprintf(out, cap, "%.*f %s", n < 10 ? 2 : n < 100 ? 1 : 0, n, unit[u]);
}
