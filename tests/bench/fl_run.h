/*
 * fl_run.h - one federated task's history as a coordinator's data directory
 * holds it (rounds, the evaluator's metrics of the versions they made,
 * bytes), and the figures derived from it. Shared by `starling bench fl`
 * (which reads each setting's run after its coordinator stopped) and
 * `starling report`.
 *
 * Reading is read-only for the data directory: the database (starling.db
 * and its -wal) is copied into a private temporary directory and the copy is
 * opened through starling/store.h, so neither a migration nor a checkpoint
 * ever touches the original. A coordinator may be running; the copy is then
 * a snapshot (a commit that lands while it is taken may be left out).
 */
#ifndef STARLING_BENCH_FL_RUN_H
#define STARLING_BENCH_FL_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "starling/round.h"

/** One round (any state). */
typedef struct sl_fl_round {
    int64_t round_id, round_no;
    int state;             /* sl_round_state */
    int64_t model_version; /* the version a closed round made; 0 otherwise */
    uint32_t target, quorum, selected, reported, dropped, late, rejected;
    int64_t bytes_up, bytes_down;
    int64_t opened_at_ms, closed_at_ms; /* closed_at_ms 0 while open */
    double accuracy, loss;              /* the evaluator's, for model_version; NaN if none */
    double mae, rmse;                   /* the evaluator's, regression; NaN if none */
    /* federated evaluation of the round's base model: the devices' reports on their
     * held-out samples, weighted by samples (devices 0: none; metrics NaN if none) */
    uint32_t fed_devices;
    uint64_t fed_samples;
    double fed_loss, fed_accuracy, fed_rmse;
    char error[256]; /* why an abandoned round ended */
    uint64_t steps;  /* the local steps its stored updates report */
} sl_fl_round;

/** A task's run. */
typedef struct sl_fl_run {
    int64_t task_id;
    char name[64];
    sl_task_config config;                 /* as stored (canonical) */
    uint64_t params;                       /* fp32 parameters of the layout */
    double dense_bytes;                    /* params * 4: one dense fp32 update or model */
    double initial_accuracy, initial_loss; /* version 1 (NaN when not evaluated) */
    double initial_rmse;                   /* version 1, regression (NaN: none) */
    sl_fl_round *rounds;                   /* ascending round_no; malloc'd */
    size_t nrounds;
} sl_fl_run;

/** Rounds in the "mean of the last rounds" figure: rounds 30-50 of a 50-round run. */
#define SL_FL_MEAN_ROUNDS 21

/** Totals of a run, with dense FedAvg equivalents for the same rounds. */
typedef struct sl_fl_totals {
    uint32_t rounds, closed, abandoned;
    uint64_t selected, reported, dropped, late, rejected;
    int64_t bytes_up, bytes_down;
    double dense_up;       /* reported * dense_bytes: every update a full fp32 model */
    double dense_down;     /* selected * dense_bytes: every selected device a full model */
    double compression_up; /* dense_up / bytes_up (NaN when nothing went up) */
    double down_fraction;  /* bytes_down / dense_down: per participating device and
                              round, as a fraction of the dense model (NaN: none) */
    double final_accuracy; /* of the last closed round with metrics (NaN: none) */
    double final_loss;
    int64_t final_version;
    double best_accuracy;         /* NaN when no round has metrics */
    double final_rmse, best_rmse; /* regression: of the last closed round with an RMSE, and
                                     the lowest (NaN: none) */
    double mean_accuracy;         /* mean over rounds mean_from..mean_to (NaN: none) */
    int64_t mean_from, mean_to;   /* the last SL_FL_MEAN_ROUNDS rounds with metrics: 30..50 of 50 */
    int64_t rounds_to_target;     /* first round_no whose version reached the target; 0: never */
    double seconds_to_target;     /* wall clock from the first round's opening to that round's
                                     close (NaN: never) */
    uint64_t aggregated_steps;    /* local steps of the updates of closed rounds */
    double wall_s;                /* first round opened to last round closed */
} sl_fl_totals;

/**
 * sl_fl_run_load - read task @task_id (0: the data directory's only task)
 * from the coordinator data directory @data_dir (which holds starling.db).
 * Returns 0 with @out filled (free with sl_fl_run_free()), or -1 with a
 * one-line reason in @err (no database, several tasks and none chosen, an
 * unknown task, a storage error). Blocks on disk.
 */
int sl_fl_run_load(const char *data_dir, int64_t task_id, sl_fl_run *out, char *err, size_t errcap);

/** sl_fl_run_free - release what sl_fl_run_load() allocated; NULL is a no-op. */
void sl_fl_run_free(sl_fl_run *r);

/**
 * sl_fl_run_totals - sum @r's rounds into @t. @acc_target: the accuracy
 * (0..1) for rounds_to_target.
 */
void sl_fl_run_totals(const sl_fl_run *r, double acc_target, sl_fl_totals *t);

/**
 * sl_fl_run_accuracy_at - the accuracy of the model of the last round of @r
 * that closed within @seconds of wall clock from the first round's opening
 * (the model a user had after that long); NaN when none had closed with a
 * measured accuracy by then.
 */
double sl_fl_run_accuracy_at(const sl_fl_run *r, double seconds);

/** What a run spent until its model first reached an accuracy (sl_fl_run_reach). */
typedef struct sl_fl_reach {
    double level;                 /* the level asked for: an accuracy (0..1), or an RMSE */
    int64_t round_no;             /* the first round whose model reached it; 0: never */
    double seconds;               /* first round opened to that round's close (NaN: never) */
    int64_t bytes_up, bytes_down; /* every round up to and including it, abandoned ones too
                                     (what the fleet had sent and received by then; when never
                                     reached, the whole run's) */
} sl_fl_reach;

/**
 * sl_fl_run_reach - the rounds, wall clock and cumulative bytes up and down
 * @r took until the model of one of its rounds first had an accuracy of at
 * least @accuracy (0..1), into @out. Rounds count in round_no order; a round
 * without a measured accuracy reaches nothing but its bytes count.
 */
void sl_fl_run_reach(const sl_fl_run *r, double accuracy, sl_fl_reach *out);

/**
 * sl_fl_run_reach_rmse - the same for a regression: until the RMSE of one of
 * @r's round models was first at most @rmse.
 */
void sl_fl_run_reach_rmse(const sl_fl_run *r, double rmse, sl_fl_reach *out);

/**
 * sl_fl_human_bytes - "1.23 MB" (decimal units) into @out; "-" for a
 * negative or non-finite @n.
 */
void sl_fl_human_bytes(double n, char *out, size_t cap);

#endif /* STARLING_BENCH_FL_RUN_H */
