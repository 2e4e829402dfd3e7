/*
 * e2e_support.h - the end-to-end tests' fixture and steps: the real server
 * in process on 127.0.0.1 (plain HTTP or HTTPS with a test CA), clients of
 * the client library for devices and the operator, enrolment, tasks,
 * check-ins, update frames, and an upload interrupted by a cut link.
 * Everything that talks to the server goes through sl_client_*.
 */
#ifndef E2E_SUPPORT_H
#define E2E_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "e2e_proxy.h"
#include "mini_http.h"
#include "starling/api_client.h"
#include "starling/api_server.h"

#define E2E_ADMIN  "e2e-admin-token"
#define E2E_ENROL  "e2e-enrol-token"
#define E2E_LAYOUT "w 64 256\nb 64\n"
#define E2E_CHUNK  4096 /* the clients' PATCH size */

/* The server under test with its store and engine. */
typedef struct e2e_fx {
    char dir[512];
    sl_store *store;
    sl_engine *engine;
    sl_server *server;
    char base[64];
    char ca_file[600]; /* "" for plain HTTP */
    sl_layout *layout;
    void *model; /* version 1, as created */
    size_t model_len;
} e2e_fx;

/* Open store, engine and server in a fresh directory: plain HTTP when @pki
 * is NULL, else HTTPS with its certificate (the CA written to ca_file).
 * The wall clock of server, store and clients starts at the real time. */
void e2e_fx_open(e2e_fx *f, const char *name, const mh_pki *pki);
/* Quiesce, drain (asserting nothing stays in flight), free, remove the directory. */
void e2e_fx_close(e2e_fx *f);
/* Move the shared wall clock forward by @ns (thread-safe). */
void e2e_clock_skip(int64_t ns);

/* An enrolled device: its key and id. */
typedef struct e2e_dev {
    sl_device_key *key;
    int64_t id;
} e2e_dev;

/* A client of @base (the server's, or a relay's): signing as @d when given,
 * with the admin token when @admin; @max_attempts per request; short real
 * backoff; E2E_CHUNK-byte PATCHes. */
sl_client *e2e_client(const e2e_fx *f, const char *base, const e2e_dev *d, int admin,
                      unsigned max_attempts);
/* A request with a JSON body (or none); fails the test when no answer came. */
void e2e_call(sl_client *c, const char *method, const char *path, const char *json,
              sl_client_response *r);
/* The body as JSON (fails the test otherwise; the caller deletes it). */
cJSON *e2e_json_of(const sl_client_response *r);
/* A number (or boolean) member of the JSON body. */
int64_t e2e_json_int(const sl_client_response *r, const char *key);
/* Fails unless @r is a problem of @status, type .../problems/@type and (unless NULL) @reason. */
void e2e_expect_reason(const sl_client_response *r, long status, const char *type,
                       const char *reason);
/* Make a key and enrol it (twice: the same id comes back). */
void e2e_enrol(const e2e_fx *f, e2e_dev *d);
/* POST /v1/tasks with @config, E2E_LAYOUT and a random initial model (kept in @f). */
int64_t e2e_create_task(e2e_fx *f, sl_client *op, const char *config);
/* Signed check-ins until selected: the round id; the model version in @version. */
int64_t e2e_checkin_until_selected(sl_client *c, int64_t task, int64_t *version);
/* A real update frame for (round, version) of E2E_LAYOUT, several chunks long. */
void e2e_make_update(const e2e_fx *f, int64_t round, int64_t version, float scale, void **frame,
                     size_t *len);
/* Upload through the relay @via with one attempt per request; the link dies
 * in the PATCH after @cut_at acknowledged bytes. Returns the state as saved
 * at the last progress at or below @save_upto (what a restarted agent holds). */
sl_client_upload_state e2e_interrupted_upload(const e2e_fx *f, e2e_proxy *via, const e2e_dev *d,
                                              int64_t round, const void *frame, size_t len,
                                              uint64_t save_upto, uint64_t cut_at);

#endif /* E2E_SUPPORT_H */
