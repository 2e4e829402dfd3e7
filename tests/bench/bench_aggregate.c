/*
 * bench_aggregate.c - `starling bench aggregate --store FILE`: what the
 * fixed-point aggregation costs against summing in doubles, on a real run's
 * stored updates.
 *
 * For every round of the store that made a model version, the round's own
 * accepted updates are aggregated twice, side by side: by the coordinator's
 * aggregation (fixed point: coordinator/aggregate.c) and by the sum it
 * replaced (sum_i w_i * s_i * u_i in doubles, in device-id order, divided by
 * sum_i w_i), each applied to the round's base model with the task's server
 * optimiser. It prints the largest difference of the two pseudo-gradients,
 * against 2^-F, and how many parameters of the two new models differ in
 * their float32 bits (and by how many units in the last place).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "bench.h"
#include "coord_int.h"
#include "starling/codec.h"
#include "starling/round.h"

typedef struct agg_totals {
    uint64_t rounds, updates, params, differ, max_ulp;
    uint64_t retired; /* rounds skipped: retention took their base's or updates' bytes */
    double max_delta_diff, max_delta;
} agg_totals;

/* The distance of two floats in units in the last place (same sign; else a large number). */
static uint64_t ulp_distance(float a, float b)
{
    int32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    if ((x < 0) != (y < 0))
        return a == b ? 0 : UINT32_MAX;
    return (uint64_t)(x > y ? (int64_t)x - y : (int64_t)y - x);
}

/* The sum the fixed point replaced: doubles in device-id order. */
static int double_add(const sl_layout *l, const sl_task_config *cfg, const void *frame, size_t len,
                      double w, double *sum, double *wsum)
{
    sl_update *u = NULL;
    double ss = 0, scale = 1;
    int rc = sl_frame_decode_update(l, frame, len, NULL, &u);
    if (rc != SL_OK)
        return rc;
    for (size_t t = 0; t < u->tensors; t++)
        for (size_t j = 0; j < u->n[t]; j++) {
            double v = (double)u->val[t][j], sq = v * v;
            ss += sq;
        }
    if (cfg->clip_norm > 0 && sqrt(ss) > cfg->clip_norm)
        scale = cfg->clip_norm / sqrt(ss);
    for (size_t t = 0; t < u->tensors; t++) {
        double *base = sum + sl_layout_tensor(l, t)->offset, coef = w * scale;
        for (size_t j = 0; j < u->n[t]; j++) {
            double term = coef * (double)u->val[t][j];
            base[u->idx[t][j]] += term;
        }
    }
    *wsum += w;
    sl_update_free(u);
    return SL_OK;
}

static int one_round(sqlite3 *db, const sl_layout *l, const sl_task_config *cfg, int64_t task,
                     int64_t round_id, int64_t base_version, agg_totals *tot)
{
    size_t n = (size_t)sl_layout_params(l);
    double *sum = calloc(n, sizeof *sum), *dd = malloc(n * sizeof *dd),
           *df = malloc(n * sizeof *df), wsum = 0;
    float *base = malloc(n * sizeof *base), *mf = malloc(n * sizeof *mf),
          *md = malloc(n * sizeof *md);
    sl__agg *agg = NULL;
    sqlite3_stmt *st = NULL;
    uint64_t added = 0;
    int retired = 0; /* the task's retain_last took bytes this round needs */
    int rc = sum && dd && df && base && mf && md ? SL_OK : SL_ENOMEM;

    if (rc == SL_OK)
        rc = sqlite3_prepare_v2(db,
                                "SELECT frame FROM model_versions WHERE task_id = ?1 AND "
                                "version = ?2",
                                -1, &st, NULL) == SQLITE_OK
                 ? SL_OK
                 : SL_EIO;
    if (rc == SL_OK) {
        sqlite3_bind_int64(st, 1, task);
        sqlite3_bind_int64(st, 2, base_version);
        rc = sqlite3_step(st) == SQLITE_ROW ? SL_OK : SL_ENOENT;
        if (rc == SL_OK && sqlite3_column_bytes(st, 0) == 0)
            retired = 1;
        else if (rc == SL_OK)
            rc = sl_frame_decode_model(l, sqlite3_column_blob(st, 0),
                                       (size_t)sqlite3_column_bytes(st, 0), NULL, 0, base);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == SL_OK && !retired)
        rc = sl__agg_begin(cfg, l, &agg);
    if (rc == SL_OK)
        rc = sqlite3_prepare_v2(db,
                                "SELECT frame, num_samples FROM updates WHERE round_id = ?1 "
                                "ORDER BY device_id",
                                -1, &st, NULL) == SQLITE_OK
                 ? SL_OK
                 : SL_EIO;
    if (rc == SL_OK)
        sqlite3_bind_int64(st, 1, round_id);
    while (rc == SL_OK && !retired && sqlite3_step(st) == SQLITE_ROW) {
        const void *frame = sqlite3_column_blob(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        uint32_t w = (uint32_t)sqlite3_column_int64(st, 1);
        if (len == 0) {
            retired = 1;
            break;
        }
        if (w == 0)
            w = 1; /* as the engine counts a device that reports no count */
        rc = sl__agg_add(agg, frame, len, w);
        if (rc == SL_OK)
            rc = double_add(l, cfg, frame, len, (double)w, sum, &wsum);
        added++;
    }
    sqlite3_finalize(st);
    if (rc == SL_OK && retired)
        tot->retired++;
    if (rc == SL_OK && !retired && added > 0) {
        rc = sl__agg_finish(agg, 0, df, NULL);
        for (size_t i = 0; i < n; i++)
            dd[i] = sum[i] / wsum;
        memcpy(mf, base, n * sizeof *mf);
        memcpy(md, base, n * sizeof *md);
        if (rc == SL_OK)
            rc = sl_server_apply(cfg, df, n, mf, NULL);
        if (rc == SL_OK)
            rc = sl_server_apply(cfg, dd, n, md, NULL);
        for (size_t i = 0; rc == SL_OK && i < n; i++) {
            double d = fabs(df[i] - dd[i]);
            uint64_t u = ulp_distance(mf[i], md[i]);
            if (d > tot->max_delta_diff)
                tot->max_delta_diff = d;
            if (fabs(dd[i]) > tot->max_delta)
                tot->max_delta = fabs(dd[i]);
            tot->differ += u != 0;
            if (u > tot->max_ulp)
                tot->max_ulp = u;
        }
        tot->rounds++;
        tot->updates += added;
        tot->params += n;
    }
    sl__agg_free(agg);
    free(sum);
    free(dd);
    free(df);
    free(base);
    free(mf);
    free(md);
    return rc;
}

int sl_bench_aggregate(int argc, char **argv)
{
    const char *path = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *tasks = NULL, *rounds = NULL;
    int rc = SL_OK, status = 0;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fprintf(stderr, "usage: starling bench aggregate --store FILE\n"
                            "  every round of a coordinator's store that made a model version:\n"
                            "  its updates aggregated in fixed point (the coordinator's) and in\n"
                            "  doubles, side by side; the largest difference of the two, and the\n"
                            "  parameters of the new models that differ in their float32 bits\n");
            return 0;
        }
        if (strcmp(argv[i], "--store") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else {
            fprintf(stderr, "starling bench aggregate: unknown or incomplete option '%s'\n",
                    argv[i]);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "usage: starling bench aggregate --store FILE (a coordinator's store: "
                        "its rounds aggregated in fixed point and in doubles, side by side)\n");
        return 2;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT id, name, config, layout FROM tasks ORDER BY id", -1, &tasks,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT r.id, r.base_version FROM rounds r WHERE r.task_id = ?1 AND "
                           "EXISTS (SELECT 1 FROM model_versions m WHERE m.task_id = r.task_id "
                           "AND m.version = r.base_version + 1) ORDER BY r.round_no",
                           -1, &rounds, NULL) != SQLITE_OK) {
        fprintf(stderr, "starling bench aggregate: %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_finalize(tasks);
        sqlite3_close(db);
        return 1;
    }
    while (sqlite3_step(tasks) == SQLITE_ROW) {
        int64_t task = sqlite3_column_int64(tasks, 0);
        const char *name = (const char *)sqlite3_column_text(tasks, 1);
        const char *cjson = (const char *)sqlite3_column_text(tasks, 2);
        const char *ltext = (const char *)sqlite3_column_text(tasks, 3);
        sl_task_config cfg;
        sl_layout *l = NULL;
        agg_totals tot;
        char err[256];
        memset(&tot, 0, sizeof tot);
        if (sl_task_config_parse(cjson, strlen(cjson), &cfg, err, sizeof err) != SL_OK ||
            sl_layout_parse(ltext, strlen(ltext), &l) != SL_OK) {
            fprintf(stderr, "task %" PRId64 ": its configuration or layout does not parse: %s\n",
                    task, err);
            status = 1;
            continue;
        }
        if (cfg.aggregator == SL_AGG_TRIMMED_MEAN || cfg.aggregator == SL_AGG_MEDIAN) {
            printf("task %" PRId64 " (%s): %s sorts doubles, no fixed point: skipped\n", task, name,
                   sl_aggregator_name(cfg.aggregator));
            sl_layout_free(l);
            continue;
        }
        sqlite3_reset(rounds);
        sqlite3_bind_int64(rounds, 1, task);
        while (rc == SL_OK && sqlite3_step(rounds) == SQLITE_ROW)
            rc = one_round(db, l, &cfg, task, sqlite3_column_int64(rounds, 0),
                           sqlite3_column_int64(rounds, 1), &tot);
        if (rc != SL_OK) {
            fprintf(stderr, "task %" PRId64 ": %s\n", task, sl_strerror(rc));
            status = 1;
        }
        if (tot.retired > 0)
            printf("task %" PRId64 ": %" PRIu64 " rounds skipped, their base's or updates' bytes "
                   "retired (the task's retain_last)\n",
                   task, tot.retired);
        printf("task %" PRId64 " (%s, %s, clip_norm %g): %" PRIu64 " rounds, %" PRIu64
               " updates, %" PRIu64 " parameters\n"
               "  pseudo-gradient: largest |fixed - doubles| %.3g (2^-F = %.3g; largest "
               "|value| %.3g)\n"
               "  new models: %" PRIu64 " of %" PRIu64 " parameters differ in their float32 "
               "bits (%.2g%%), by at most %" PRIu64 " ulp\n",
               task, name, sl_aggregator_name(cfg.aggregator), cfg.clip_norm, tot.rounds,
               tot.updates, tot.params / (tot.rounds ? tot.rounds : 1), tot.max_delta_diff,
               ldexp(1.0, -sl__agg_frac_bits(cfg.clip_norm)), tot.max_delta, tot.differ, tot.params,
               tot.params ? 100.0 * (double)tot.differ / (double)tot.params : 0.0, tot.max_ulp);
        sl_layout_free(l);
        rc = SL_OK;
    }
    sqlite3_finalize(tasks);
    sqlite3_finalize(rounds);
    sqlite3_close(db);
    return status;
}
