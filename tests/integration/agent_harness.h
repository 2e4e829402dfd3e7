/*
 * agent_harness.h - helpers of the agent's tests (tests/integration/
 * test_agent.c and tests/faults/test_agent_kill.c): an in-process
 * coordinator (store, engine and REST server on a free loopback port), a
 * task made through POST /v1/tasks with a registry model, a small
 * Fashion-MNIST directory, the agent program as a child process, and the
 * check of agents' acks.log files against the coordinator's store.
 */
#ifndef AGENT_HARNESS_H
#define AGENT_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "starling/agent.h"
#include "starling/api_client.h"
#include "starling/api_server.h"
#include "starling/round.h"
#include "starling/store.h"

#define AG_ADMIN "agent-admin-token"
#define AG_ENROL "agent-enrol-token"

typedef struct ag_coord {
    char dir[512];
    char url[128]; /* "http://127.0.0.1:<port>" or https */
    char admin_file[600], enrol_file[600];
    sl_store *store;
    sl_engine *engine;
    sl_server *server;
    sl_client *admin; /* the operator's client */
} ag_coord;

/* Open a coordinator in @dir/coord. @tls_cert, @tls_key: NULL for plain HTTP. */
void ag_coord_open(ag_coord *c, const char *dir, const char *tls_cert, const char *tls_key,
                   const char *ca_for_admin);
/* Stop the server (sockets, ticker), keep the store and engine open. */
void ag_coord_stop_server(ag_coord *c);
void ag_coord_close(ag_coord *c);

/* POST /v1/tasks: @config_json (an object), the layout and an initial
 * model of registry model @model (seeded init). Returns the task id. */
int64_t ag_create_task(ag_coord *c, const char *model, const char *config_json);
/* The same with a model spec (JSON text): the task carries it ("model_spec"), its layout
 * and a seeded initial model come from it. */
int64_t ag_create_task_spec(ag_coord *c, const char *spec_text, const char *config_json);
/* The same with @params (the spec's layout order, sl_layout_params() floats) as the initial
 * model instead of the seeded init (NULL: the seeded init). */
int64_t ag_create_task_params(ag_coord *c, const char *spec_text, const float *params,
                              const char *config_json);
/* ag_create_task_params() with the task's data contract too (JSON text; NULL for none). */
int64_t ag_create_task_docs(ag_coord *c, const char *spec_text, const float *params,
                            const char *contract_text, const char *config_json);
/* An operator request; the answer in @r (free it). Asserts an HTTP answer. */
void ag_admin(ag_coord *c, const char *method, const char *path, const char *body,
              sl_client_response *r);
/* The task's latest model version (engine status). */
int64_t ag_model_version(ag_coord *c, int64_t task);

/* A Fashion-MNIST directory with the first @train and @test samples (of
 * the real data when installed, else a synthetic look-alike). */
void ag_make_data(const char *dir, size_t train, size_t test);

/* One line of acks.log. */
typedef struct ag_ack {
    uint64_t gen;
    int64_t round, update, device;
    uint8_t sha[32];
    int dup;
} ag_ack;

/* Parse @state_dir/acks.log (every line must be whole); *@out malloc'd. */
size_t ag_read_acks(const char *state_dir, ag_ack **out);

/* The pending upload of @state_dir (pending/meta): 1 and its round and
 * frame digest, or 0 when there is none. */
int ag_pending(const char *state_dir, int64_t *round, uint8_t sha[32]);
/* The device id in @state_dir/device.id. */
int64_t ag_device_id(const char *state_dir);
/* 1 when the store holds (round, device, sha). */
int ag_stored(ag_coord *c, int64_t round, int64_t device, const uint8_t sha[32]);

/* Check acks against the store: every ack names an update stored exactly
 * once for its (round, device), with its update id; no (round, device) is
 * acknowledged twice. Returns the number of acks checked. */
size_t ag_check_acks(ag_coord *c, const ag_ack *acks, size_t n);

/* Updates stored for the task's rounds, and rounds in state CLOSED; every
 * round's reported count must equal its stored updates (asserted). */
void ag_count_task(ag_coord *c, int64_t task, uint64_t *updates, uint64_t *closed);

/* The agent program (SL_AGENT_BIN) as a child with @args (NULL-terminated,
 * without argv[0]); stdout and stderr appended to @log (NULL: /dev/null). */
pid_t ag_spawn_agent(const char *const *args, const char *log);
/* Wait for @pid at most @ms (times sl_test_time_scale()); its exit status,
 * or -1 (then killed). */
int ag_wait(pid_t pid, int ms);

/* 1 when @program is on PATH. */
int ag_have(const char *program);

/* ---- test_agent ---------------------------------------------------------------------------- */

/* Options of an agent of @c's task @task in @dir, with the tests' short
 * waits and small chunks (test_agent.c). */
void ag_base_options(sl_agent_options *o, const ag_coord *c, int64_t task, const char *dir,
                     const sl_agent_data *data);
/* The task configuration of the mlp tests (test_agent.c). */
#define AG_MLP_TASK(name, target, quorum)                                               \
    "{\"name\":\"" name "\",\"target\":" #target ",\"quorum\":" #quorum                 \
    ",\"over_selection\":1.25,\"selection_window_ms\":400,\"report_deadline_ms\":4000," \
    "\"values\":\"fp16\",\"density\":0.05,\"warmup_rounds\":2,\"warmup_density\":0.2,"  \
    "\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05,\"local_momentum\":0.9}"
/* test_agent_prog.c */
void test_tls_ca_and_pin(void **state);
void test_program(void **state);
/* test_agent_eval.c: the evaluator against answers without its headers */
void test_evaluator_half_answers(void **state);

#endif /* AGENT_HARNESS_H */
