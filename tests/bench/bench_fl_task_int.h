/*
 * bench_fl_task_int.h - `starling bench fl --task`, shared by bench_fl_task.c
 * (options, the runs, the table) and bench_fl_torch.c (the same split for
 * PyTorch FedAvg).
 */
#ifndef STARLING_BENCH_FL_TASK_INT_H
#define STARLING_BENCH_FL_TASK_INT_H

#include "bench_fl_int.h"
#include "starling/agent.h"
#include "starling/contract.h"
#include "starling/round.h"

/** PyTorch FedAvg's run. */
typedef struct fl_torch {
    int ran;         /* 1: every round was read */
    char note[1200]; /* why not */
    double *metric;  /* [rounds + 1]: the test accuracy or RMSE after each round (0: initial) */
    size_t n;
    double seconds;
    char version[32];
} fl_torch;

/** A task file's benchmark. */
typedef struct fl_task {
    fl_setup su;
    const char *task_path; /* as given */
    char model[64];        /* the spec's name */
    uint64_t params;
    sl_task_config config;      /* the task file's, as the coordinator parses it */
    int regression;             /* the contract's label is a target: RMSE, lower is better */
    sl_contract *contract;      /* the task's contract (the devices' view) */
    sl_contract *test_contract; /* the evaluator's: evaluation.share 0 */
    sl_agent_data *train;       /* the fleet's split, loaded as the fleet loads it */
    sl_agent_data *test;        /* every sample of the test source */
} fl_task;

/* Load the contract, the train source split as the fleet splits it, and the test source:
 * 0, or -1 with @err. */
int sl__bench_fl_split_load(fl_task *t, char *err, size_t cap);
void sl__bench_fl_split_free(fl_task *t);

/* Write the split, the test set and the initial model under su.workdir/torch, run
 * torch_fedavg.py and read its rounds into @r: 0, or -1 with r->note saying why. */
int sl__bench_fl_torch(const fl_task *t, fl_torch *r);
void sl__bench_fl_torch_free(fl_torch *r);

#endif /* STARLING_BENCH_FL_TASK_INT_H */
