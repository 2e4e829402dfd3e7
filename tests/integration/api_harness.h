/*
 * api_harness.h - helpers of the REST server's integration tests: HTTP
 * through libcurl's easy API, signed device requests, a recorder of JSON
 * responses for the OpenAPI check, update frames, and the coordinator
 * program as a child process.
 */
#ifndef API_HARNESS_H
#define API_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "starling/api_server.h"
#include "starling/api_sign.h"
#include "starling/codec.h"

/* ---- HTTP ---------------------------------------------------------------- */

typedef struct ah_resp {
    long status;
    char *body; /* NUL-terminated (not counted in len) */
    size_t len;
    char headers[16384];
    size_t hlen;
} ah_resp;

/* A request to @url; @hdrs: @nh "Name: value" lines. HEAD uses NOBODY.
 * Failures of the transport give status 0. */
void ah_http(const char *method, const char *url, const char *const *hdrs, size_t nh,
             const void *body, size_t len, ah_resp *out);
/* The same over HTTPS verified against @cafile. */
void ah_https(const char *method, const char *url, const char *cafile, ah_resp *out);
/* The same with "Authorization: Bearer @token". */
void ah_https_bearer(const char *method, const char *url, const char *cafile, const char *token,
                     ah_resp *out);
void ah_resp_free(ah_resp *r);
/* A response header's value into @out ("" when absent): 1 found, 0 not. */
int ah_header(const ah_resp *r, const char *name, char *out, size_t cap);

/* ---- the server under test ----------------------------------------------- */

#define AH_ADMIN "admin-secret-token"
#define AH_ENROL "enrol-secret-token"

typedef struct ah_fx {
    char dir[512];
    sl_store *store;
    sl_engine *engine;
    sl_server *server;
    char base[64]; /* "http://127.0.0.1:<port>" */
} ah_fx;

/* Open store, engine and server (plain HTTP on 127.0.0.1, a free port);
 * @tweak may change the options before the server is made. */
void ah_fx_open(ah_fx *f, const char *name, void (*tweak)(sl_server_options *));
void ah_fx_close(ah_fx *f);
/* GET/POST as the operator (admin bearer token). */
void ah_admin(ah_fx *f, const char *method, const char *path, const void *body, size_t len,
              ah_resp *out);

/* ---- devices --------------------------------------------------------------- */

typedef struct ah_dev {
    sl_device_key *key;
    uint8_t pub[SL_PUBKEY_LEN];
    int64_t id;
} ah_dev;

/* A new key pair, enrolled through POST /v1/devices (asserts 201). */
void ah_dev_enrol(ah_fx *f, ah_dev *d);
void ah_dev_free(ah_dev *d);

/* The four X-Starling-* header lines for a request. */
typedef struct ah_sig {
    char lines[4][256];
} ah_sig;

void ah_sign(const sl_device_key *key, int64_t device, const char *method, const char *path,
             int64_t ts_ms, const char *nonce, const void *body, size_t len, ah_sig *out);
/* A signed request by @d now with a fresh nonce; @extra: more header lines. */
void ah_dev_call(ah_fx *f, const ah_dev *d, const char *method, const char *path, const void *body,
                 size_t len, const char *const *extra, size_t nextra, ah_resp *out);
int64_t ah_now_ms(void);

/* ---- JSON ------------------------------------------------------------------ */

/* Record a JSON response for the OpenAPI check (ah_http and ah_https do it
 * for every answer; @url: the URL requested). */
void ah_record(const char *method, const char *url, const ah_resp *r);
/* Where records go (set once by the test program), and that file. */
void ah_record_to(const char *file);
const char *ah_records_file(void);
/* An integer member of a JSON object body (asserts it exists). */
int64_t ah_json_int(const char *body, const char *key);
/* A string member into @out; 1 when present. */
int ah_json_str(const char *body, const char *key, char *out, size_t cap);
/* "problem type name" of a problem body ("" when not a problem). */
void ah_problem_type(const ah_resp *r, char *out, size_t cap);

/* ---- frames ------------------------------------------------------------------ */

#define AH_LAYOUT "w 4 8\nb 4\n"

/* An update for (round, version) with values around @v (n < 16 per tensor,
 * so the fp32 values are stored raw). */
void ah_update(const sl_layout *layout, int64_t round, int64_t version, float v, void **frame,
               size_t *len);
/* Replace the first occurrence of float @v in @frame by NaN and fix the CRC. */
int ah_poison(void *frame, size_t len, float v);
/* The initial model of AH_LAYOUT as a frame, base64 in @b64 (malloc'd). */
void ah_initial_model(void **frame, size_t *len, char **b64);

/* ---- the coordinator program ----------------------------------------------- */

/* A free TCP port on 127.0.0.1 (bound and released). */
int ah_free_port(void);
/* Start starling-coordinator with @args (NULL-terminated); waits until
 * /healthz answers over @scheme ("http" or "https" with @cafile). */
pid_t ah_spawn(const char *const *args, int port, const char *scheme, const char *cafile);
/* Wait for @pid, at most @ms; returns its exit status, or -1 (then killed). */
int ah_wait_exit(pid_t pid, int ms);

/* ---- protocol steps (api_steps.c) ------------------------------------------- */

/* The answer is a problem document of @status with type .../problems/@type
 * (and a "reason" member @reason); fails the test otherwise. */
void ah_expect_problem(const ah_resp *r, long status, const char *type);
void ah_expect_reason(const ah_resp *r, long status, const char *type, const char *reason);
/* GET @path of the fixture's server. */
void ah_get(ah_fx *f, const char *path, const char *const *hdrs, size_t nh, ah_resp *r);
uint64_t ah_audit_count(ah_fx *f);
/* Fails unless every line is Prometheus text (comments, samples). */
void ah_check_prometheus(const char *text);
/* POST /v1/tasks with @fmt (one %s: the base64 initial model); the task id. */
int64_t ah_create_task(ah_fx *f, const char *fmt);
int64_t ah_checked_in(ah_fx *f, int64_t task);
/* A signed check-in (asserts 200; the answer in @r). */
void ah_checkin(ah_fx *f, const ah_dev *d, int64_t task, ah_resp *r);
/* Resumable uploads: a session (declared digest @sha, NULL: the real one),
 * one PATCH, HEAD (the offset; the status in @status), all in one go. */
void ah_upload_create(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                      const uint8_t *sha, char *id, size_t cap);
void ah_upload_patch(ah_fx *f, const ah_dev *d, const char *id, uint64_t offset, const void *bytes,
                     size_t n, ah_resp *r);
uint64_t ah_upload_head(ah_fx *f, const ah_dev *d, const char *id, long *status);
void ah_upload_all(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                   const uint8_t *sha, ah_resp *r);
/* POST /v1/rounds/{round}/uploads carrying the first @n bytes of @frame
 * (creation with upload; @len declared, digest @sha or NULL: the real one). */
void ah_upload_create_with(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                           size_t n, const uint8_t *sha, ah_resp *r);
/* The same create (real digest) over a raw socket, cut after @sent of its @n body bytes. */
void ah_upload_create_cut(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                          size_t n, size_t sent);
/* GET @path as @d and decode the model (against @base); the ETag in @etag. */
void ah_download(ah_fx *f, const ah_dev *d, const sl_layout *layout, const char *path,
                 const float *base, uint64_t base_version, float *params, char *etag, size_t cap);
/* Raw sockets to 127.0.0.1:@port (5 s receive timeout). */
int ah_raw_connect(int port);
void ah_raw_send(int fd, const void *data, size_t len);
size_t ah_raw_read(int fd, char *buf, size_t cap);
/* 1 when @program is on PATH. */
int ah_have(const char *program);
/* Run the curl program with @args; its output into @out. */
void ah_curl_cli(const char *args, char *out, size_t cap);
void ah_write_file(const char *path, const char *text);

/* ---- the test cases (test_api_*.c) -------------------------------------------- */

void test_basics(void **state);
void test_enrol_and_signatures(void **state);
void test_rate_limit_in_process(void **state);
void test_complete_round(void **state);
void test_create_with_body(void **state);
void test_model_spec_api(void **state);
void test_413_before_body(void **state);
void test_curl_cli(void **state);
void test_tls_and_sigterm(void **state);
void test_quiesce_race(void **state);
void test_store_options(void **state);
void test_kill9_mid_upload(void **state);
void test_openapi_schemas(void **state);

#endif /* API_HARNESS_H */
