/*
 * bench_fl_int.h - internals of `starling bench fl` shared by bench_fl.c
 * (options, settings, the table, JSON, markdown and plot) and
 * bench_fl_proc.c (one setting through the real programs on loopback).
 */
#ifndef STARLING_BENCH_FL_INT_H
#define STARLING_BENCH_FL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fl_run.h"

#define FL_PATH_MAX  1024
#define FL_DIR_MAX   (FL_PATH_MAX + 64) /* a setting's run directory */
#define FL_FILE_MAX  (FL_DIR_MAX + 64)  /* a file in it */
#define MAX_SETTINGS 16                 /* in one run */

/** One compression setting: the values and density handed to the devices. */
typedef struct fl_setting {
    char name[64];          /* "dense", "k1-int8", "default", "fp16@0.05" ... */
    char values[16];        /* sl_value_mode_name(); for "default" the resolved default */
    double density;         /* (0, 1] */
    int is_default;         /* the task sets neither values nor density */
    char scope[8];          /* topk_scope given to the task ("model", "tensor"); "" = its default */
    char feedback[12];      /* error_feedback given to the task ("tracking", "residual"); "" = its
                               default */
    double decay;           /* residual_decay given to the task; 0 = its default */
    char aggregator[16];    /* the task's aggregator ("fedavgm", ...); "" = its default (fedavg) */
    double server_lr;       /* the task's server_lr; 0 = its default */
    uint32_t warmup_rounds; /* the task's density warm-up (participations); 0 = none */
    double warmup_density;  /* its first participation's density */
    int as_task;            /* "task": the task file's own configuration, unchanged */
    int budget;             /* @budget: time budgets (the task's time_budget, #22) */
    int fednova;            /* @fednova: FedNova's normalised averaging */
    uint32_t percentile;    /* @pN: deadline_percentile N (budgets: of the full windows) */
    int ramp_given;         /* @rampN:B or @ramp0: the task sets server_lr_ramp (else the
                               coordinator's default) */
    uint32_t server_lr_ramp;      /* @rampN:B: the task's server_lr_ramp N; @ramp0: off */
    double server_lr_boost;       /* and server_lr_boost B */
    int sm_given;                 /* @smN[:A] or @sm0: the task sets sender_mean_rounds (else the
                                     coordinator's default) */
    uint32_t sender_mean_rounds;  /* @smN[:A]: the task's sender_mean_rounds N; @sm0: off */
    double sender_mean;           /* and sender_mean A (1 when not given) */
    uint32_t sender_mean_epochs;  /* @smeN[:A]: the task's sender_mean_epochs N (sm_given too,
                                     sender_mean_rounds 0) */
    int sm_by_participations;     /* @byp: the fade by participations alone (the task's
                                     sender_mean_share false; else the coordinator's default) */
    int sm_not_fresh;             /* @nofresh: the task's sender_mean_fresh false (else the
                                     coordinator's default: true with a senders' mean) */
    int part_given;               /* @partK: the task sets sender_mean_partial (else the
                                     coordinator's default: 5 with sender_mean_epochs) */
    uint32_t sender_mean_partial; /* @partK: K; @part0: off */
    int no_split;                 /* @nosplit: the devices send plain frames, never split ones
                                     (starling-agent --split-positions=false) */
} fl_setting;

/** What every setting shares. */
typedef struct fl_setup {
    const char *fleet;     /* "full" (every client every round) or "partial" (the demo's) */
    const char *model;     /* registry model of the task: lenet5, logreg, ... */
    uint32_t clients;      /* devices in the fleet */
    uint32_t target;       /* reports that close a round (full: clients) */
    double over_selection; /* selected = ceil(target x this) (full: 1) */
    uint32_t quorum;       /* reports a round needs by its deadline (full: clients) */
    double dropout, cut;   /* fleet faults: drop out after the download, cut a transfer */
    double straggle, straggle_factor; /* this share of devices trains this many times slower */
    double speeds;                    /* hetero: devices train up to this many times slower */
    char links[32];                   /* hetero: the devices' links, MIN:MAX bits/s; "" none */
    const char *partition;            /* "dirichlet:0.5" */
    uint32_t epochs, batch, rounds;
    double lr, momentum;
    int64_t window_ms, deadline_ms; /* selection window, report deadline */
    uint64_t seed;                  /* partition, selection and shuffles: the same everywhere */
    double acc_target;              /* for "rounds to" (0..1) */
    double at_wall_s; /* --at-wall: each setting's accuracy after this long (0: the shortest run) */
    char data[FL_PATH_MAX]; /* Fashion-MNIST directory, or the fleet's source URI */
    /* --task mode (bench_fl_task.c); task_config NULL otherwise */
    const char *task_config;         /* the task file's configuration, canonical JSON */
    char spec_file[FL_PATH_MAX];     /* its init.spec_file, absolute */
    uint64_t init_seed;              /* its init.seed */
    char contract_file[FL_PATH_MAX]; /* its data_contract_file, absolute */
    char eval_data[FL_PATH_MAX];     /* the evaluator's source URI ("": data) */
    char coordinator[FL_PATH_MAX], agent[FL_PATH_MAX], self[FL_PATH_MAX]; /* programs */
    char workdir[FL_PATH_MAX]; /* one subdirectory per setting */
    FILE *progress;            /* per-round lines (stderr) */
} fl_setup;

/** One setting's outcome. */
typedef struct fl_result {
    fl_setting setting;
    int ok;       /* 1: ran to the end and was read back */
    int alias_of; /* >= 0: the same configuration as that result (not run twice) */
    char error[3 * FL_FILE_MAX];
    char dir[FL_DIR_MAX];   /* its run directory (data/, logs) */
    double wall_s;          /* the bench's clock: programs started to task finished */
    uint64_t trained_steps; /* the fleet's devices' optimiser steps (their counters) */
    sl_fl_run run;
    sl_fl_totals totals;
} fl_result;

/* Set by SIGINT/SIGTERM while the bench runs; the runner stops its programs. */
extern volatile int sl__bench_fl_interrupted;

/* ---- shared by bench_fl.c and bench_fl_task.c ---------------------------------------- */

/* --settings LIST into @out (MAX_SETTINGS); "task" is accepted when @allow_task. Prints the
 * problem and returns 2 on a bad list, else 0. */
int sl__bench_fl_settings(const char *list, int allow_task, fl_setting *out, size_t *n);
/* This program, starling-coordinator and starling-agent into @su: 0, or 1 after a message. */
int sl__bench_fl_programs(fl_setup *su);
/* "--name V" or "--name=V": 1 with *value set, 0 not this option, -1 value missing. */
int sl__bench_fl_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* "--name" whole numbers and decimals in [lo, hi]: 0, or -1. */
int sl__bench_fl_u32(const char *text, uint32_t lo, uint32_t hi, uint32_t *out);
/* Remove the directory tree @dir (best effort). */
void sl__bench_fl_rmtree(const char *dir);
/* SIGINT and SIGTERM set sl__bench_fl_interrupted; SIGPIPE ignored. */
void sl__bench_fl_signals(void);

/**
 * sl__bench_fl_task - `starling bench fl --task TASK.json ...` (bench_fl_task.c): a task
 * file's model and data contract through the real programs, beside PyTorch FedAvg on the
 * same split. Returns a process exit code.
 */
int sl__bench_fl_task(int argc, char **argv);
/* Its options, for `starling bench fl --help`. */
void sl__bench_fl_task_usage(FILE *out);

/**
 * sl__bench_fl_run_setting - start a coordinator (its own data directory
 * under @su->workdir/<name>), create the task, start the evaluator and the
 * fleet, follow the rounds until the task finished and the evaluator
 * reported the last version, stop the programs, and read the run back from
 * the data directory. Fills @out (ok = 0 and error on failure). Returns 0 or -1.
 */
int sl__bench_fl_run_setting(const fl_setup *su, const fl_setting *st, fl_result *out);

/* ---- output (bench_fl_out.c); a result with alias_of >= 0 shows that result's figures --- */

/* One line describing the setup (model, parameters, clients, split, epochs...), after @prefix. */
void sl__bench_fl_describe(const fl_setup *su, double dense_bytes, uint64_t params, FILE *f,
                           const char *prefix);
/* The table of results, then the failures' reasons. */
void sl__bench_fl_table(const fl_setup *su, const fl_result *res, size_t n, FILE *f);
/* The table in markdown into @path: 0, or -1 after a message on stderr. */
int sl__bench_fl_md(const fl_setup *su, const fl_result *res, size_t n, const char *path,
                    double dense_bytes, uint64_t params);
/* Setup, per-setting totals and per-round curves as one JSON document on stdout. */
void sl__bench_fl_json(const fl_setup *su, const fl_result *res, size_t n, double dense_bytes,
                       uint64_t params);
/* Accuracy vs cumulative upload bytes (log x), one line per setting that ran: 0 or -1. */
int sl__bench_fl_plot(const fl_setup *su, const fl_result *res, size_t n, const char *png);

#endif /* STARLING_BENCH_FL_INT_H */
