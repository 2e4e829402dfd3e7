/*
 * test_dashboard.h - a short simulated federated job on an in-process
 * coordinator (real sockets, real HTTP), shared by the dashboard's browser
 * test (test_dashboard.c) and the operator CLI's test (test_cli_ops.c).
 */
#ifndef TEST_DASHBOARD_H
#define TEST_DASHBOARD_H

#include <stdint.h>
#include <sys/types.h>

#include "api_harness.h"

#define TD_DEVICES 4
#define TD_CLOSED  4 /* rounds that close with a new model version */

typedef struct td_job {
    ah_fx f;
    ah_dev dev[TD_DEVICES];
    int64_t task;
    int64_t round_ids[TD_CLOSED + 2]; /* closed..., abandoned, open */
    int nrounds;
    int evaluated; /* versions the evaluator reported metrics for */
} td_job;

/*
 * td_job_run - open a coordinator (@public_status: 1 for --public-status)
 * and run: TD_CLOSED rounds that close at their target (3 selected, 2
 * report, one late upload in round 2), the evaluator's metrics for every
 * new version but the one of round 3, a round the operator aborts (one
 * report, so dropped and bytes are not zero), and a round left open in
 * training with one report (device 0), one device that fetched the model
 * (device 1: training) and one that did not (device 2: downloading), and
 * device 1's own metrics. Asserts each step.
 */
void td_job_run(td_job *j, const char *name, int public_status);
void td_job_close(td_job *j);

/* GET @path as the operator; the body (malloc'd), asserting 200. */
char *td_get(td_job *j, const char *path);

/*
 * td_run - run @argv (argv[0] the program path) with stdout and stderr into
 * files and wait at most @timeout_s (then kill it). Returns the exit status
 * (128 + signal when killed, -1 on a timeout); *out and *err (may be NULL)
 * receive the outputs (malloc'd, NUL-terminated).
 */
int td_run(char *const *argv, const char *const *env, int timeout_s, char **out, char **err);

#endif /* TEST_DASHBOARD_H */
