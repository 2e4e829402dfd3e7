/*
 * fl_harness.h - helpers of the federated-run fault tests (tests/faults/
 * test_fl_*.c): the starling-coordinator program as a child process on a
 * loopback port (plain HTTP, token files, its own data directory), killed
 * and restarted at will; a fleet of simulated devices (starling-agent
 * --fleet) as another child; and, after a run, the rounds, accepted sets
 * and model digests read back from the coordinator's store.
 */
#ifndef FL_HARNESS_H
#define FL_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../integration/agent_harness.h"
#include "starling/api_client.h"
#include "starling/store.h"

/* A coordinator program and its directory. */
typedef struct fl_coord {
    char dir[512];      /* holds the data directory, token files and the log */
    char data_dir[600]; /* --data-dir */
    char log[600];
    char admin_file[600], enrol_file[600];
    char listen[32]; /* "127.0.0.1:<port>" */
    char url[64];    /* "http://127.0.0.1:<port>" */
    pid_t pid;       /* 0 when not running */
    unsigned starts;
    sl_client *admin; /* operator client: one attempt per request, short timeouts */
    /* replicas (set before fl_coord_start(); "" for the defaults): --store, --replica,
     * --leader-lease */
    char store[400], replica[32], lease[16];
} fl_coord;

/* Make @root/@name (data directory, token files) and pick a free port. */
void fl_coord_init(fl_coord *c, const char *root, const char *name);
/* Start the program and wait (at most 20 s) until /healthz answers 200. */
void fl_coord_start(fl_coord *c);
/* SIGKILL it and reap it. */
void fl_coord_kill(fl_coord *c);
/* SIGTERM it and assert a clean exit (status 0) within 20 s. */
void fl_coord_stop(fl_coord *c);
/* Free the client (after the coordinator stopped). */
void fl_coord_free(fl_coord *c);

/* An operator request: SL_OK and the answer in @r (free it), or the
 * client's error when no answer came. */
int fl_request(fl_coord *c, const char *method, const char *path, const char *body,
               sl_client_response *r);
/* POST /v1/tasks with registry model @model (seeded init, as
 * ag_create_task()) and @config_json. Returns the task id. */
int64_t fl_create_task(fl_coord *c, const char *model, const char *config_json);
/* GET /v1/status: 1 when the task finished all its rounds, 0 when not,
 * -1 when the coordinator did not answer. */
int fl_task_finished(fl_coord *c);
/* GET /v1/status: the model version of the (only) task, or -1 when the
 * coordinator did not answer. */
int64_t fl_model_version(fl_coord *c);

/* starling-agent with @args (NULL-terminated) as a child, output to @log. */
pid_t fl_spawn_agent(const char *const *args, const char *log);

/* Copy a directory tree (cp -a). */
void fl_copy_tree(const char *from, const char *to);

/* Open the store of a stopped coordinator's data directory, or the store a postgresql://
 * URI names. */
sl_store *fl_open_store(const char *data_dir);

/* ---- a run, read back from the store ------------------------------------------------------ */

#define FL_MAX_ACCEPTED 64

typedef struct fl_accepted {
    int64_t device;
    uint8_t sha[32];
} fl_accepted;

typedef struct fl_round {
    sl_round_record rec;
    size_t n;       /* accepted updates, in device-id order */
    size_t retired; /* of those, updates whose bytes retention retired (all or none) */
    fl_accepted acc[FL_MAX_ACCEPTED];
    uint8_t base_sha[32];  /* digest of the base version's frame */
    uint8_t model_sha[32]; /* CLOSED: digest of the version it made */
    int64_t model_version; /* CLOSED: that version; else 0 */
} fl_round;

typedef struct fl_run {
    fl_round *rounds; /* oldest first */
    size_t n;
    int64_t final_version;
    uint8_t final_sha[32];
    uint64_t closed, abandoned;
} fl_run;

/* Read task @task's rounds, accepted sets and model digests. Asserts every
 * stored model's digest is the SHA-256 of its frame, every round's reported
 * count equals its stored updates, and every CLOSED round made exactly one
 * version from its base. */
void fl_read_run(sl_store *s, int64_t task, fl_run *out);
void fl_run_free(fl_run *r);
/* 1 when two rounds accepted the same (device, digest) set. */
int fl_same_accepted(const fl_round *a, const fl_round *b);

/* Check the acks.log of every device of a fleet (@fleet_dir/dev-K, K <
 * @devices) against @s (ag_check_acks()): every acknowledged update is
 * stored exactly once. Returns the number of acks; *@pending (may be NULL)
 * receives how many stored updates are pending uploads not yet
 * acknowledged (an agent stopped before it heard the receipt). */
size_t fl_check_fleet_acks(sl_store *s, const char *fleet_dir, unsigned devices, size_t *pending);

/* The task ran exactly @rounds rounds (its "rounds" setting); otherwise a
 * failure that names how the last configured round ended. */
void fl_check_round_count(const fl_run *r, unsigned rounds, const char *name);

/* Every finished round: CLOSED => reported >= quorum; ABANDONED =>
 * reported < quorum. Returns the number of rounds checked. */
size_t fl_check_quorum(const fl_run *r);

/* ---- fleets ------------------------------------------------------------------------------ */

/* The argv of a fleet (starling-agent --fleet) of @devices devices for @task at @c's URL. */
typedef struct fl_fleet {
    char task[32], devices[16], state[700], log[700];
    const char *argv[48];
} fl_fleet;
void fl_fleet_argv(fl_fleet *f, const fl_coord *c, int64_t task, unsigned devices, const char *data,
                   const char *state, const char *log);

/* Enrol a fleet's @devices devices once: coordinator @t at @root/tmpl (SQLite) with no task,
 * a fleet (@root/tmpl-fleet) that enrols and then finds task 999 missing; both stopped once
 * every device.id is written. Runs copy @t's data directory and the fleet's state, so their
 * device ids, keys, data and seeds are the same. */
void fl_make_template(const char *root, const char *data, unsigned devices, fl_coord *t);

/* Invariant 3 across two runs of one fleet: every round whose base model and accepted set
 * (device, update digest) are the same in both ended in the same state and, closed, made the
 * same model bits (asserted; differing rounds are printed). Returns how many matched; when
 * all did, the final models are asserted equal. */
size_t fl_compare_runs(const fl_run *ref, const fl_run *other);

/* Monotonic seconds; sleep in milliseconds. */
double fl_now(void);
void fl_sleep_ms(long ms);

#endif /* FL_HARNESS_H */
