/*
 * bench_api_int.h - internals of `starling bench api` shared by
 * bench_api.c (the coordinator, the phases, the report) and
 * bench_api_load.c (the clients: one job per connection on a libcurl
 * multi handle, signed device requests).
 */
#ifndef STARLING_BENCH_API_INT_H
#define STARLING_BENCH_API_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "starling/api_server.h"
#include "starling/api_sign.h"

#define BENCH_ADMIN       "bench-admin-token"
#define BENCH_AUTH_HEADER "Authorization: Bearer " BENCH_ADMIN
#define BENCH_RESP_MAX    (64u << 10) /* response bytes kept per request */

/* The phases (--phases): each its own set of devices. */
enum {
    PHASE_STATUS = 1,   /* GET /v1/status alone */
    PHASE_SIGNED = 2,   /* uploads, each request ECDSA-signed; then with status beside */
    PHASE_SESSIONS = 4, /* uploads under sessions (HMAC); then with status beside */
    PHASE_OPEN = 8      /* uploads with authentication off (server_bench.h); then with status */
};

/* How a device request proves who sends it. */
enum { AUTH_SIGNED, AUTH_SESSION, AUTH_NONE };

typedef struct options {
    int json, quick, two_step;
    unsigned phases;
    unsigned clients, threads, workers, devices;
    double seconds;
    const char *dir;
} options;

/* Latency samples (ns) of one kind of request. */
typedef struct samples {
    int64_t *ns;
    size_t n, cap;
    pthread_mutex_t lock;
} samples;

void sl__bench_api_samples_add(samples *s, int64_t ns);

/* The coordinator under test, its devices and the update they all send. */
typedef struct bench {
    options o;
    char dir[600];
    sl_store *store;
    sl_engine *engine;
    sl_server *server;
    sl_server *open_server; /* the same store and engine, authentication off (PHASE_OPEN) */
    char base[64], open_base[64];
    int64_t task, round;
    sl_device_key **keys;
    int64_t *ids;
    size_t ndev, nsigned;       /* devices; the first nsigned have keys (the signed phases') */
    size_t next_dev, dev_limit; /* the next device to upload, and the end of the phase's range */
    void *frame;
    size_t frame_len;
    uint8_t frame_sha[32];
    char frame_hex[65];
    unsigned long failures;
    /* how uploads authenticate (AUTH_*): signed; under sessions, each device's token and key
     * made after the server loaded the secret; or not at all, to open_server */
    int auth;
    char (*tokens)[SL_SESSION_TOKEN_MAX];
    uint8_t (*skeys)[SL_SESSION_KEY_LEN];
} bench;

/* One connection: a status poller, or a device uploading (a create with
 * the whole frame; with --two-step a create, then a PATCH). */
enum { JOB_STATUS, JOB_UPLOAD };

typedef struct job {
    bench *b;
    CURL *h;
    struct curl_slist *hdrs;
    int kind, stage; /* uploads: 0 create, 1 PATCH (--two-step) */
    size_t dev;
    int64_t t0, upload_t0;
    char url[256], body[256], location[128];
    char *resp;
    size_t resp_len;
} job;

/* What one run of a set of jobs measured. */
typedef struct tally {
    samples *status_lat, *upload_lat;
    unsigned long status_done, uploads_done, errors;
    double elapsed_s; /* the phases' length (added up), shorter when the devices ran out */
} tally;

/* A job of @kind over a new easy handle (kept alive across its requests). */
void sl__bench_api_job_init(job *j, bench *b, int kind);
void sl__bench_api_job_free(job *j);
/* Run @jobs on one multi handle until @seconds passed and what was in flight
 * then has ended; uploads take the next device until none is left. */
void sl__bench_api_run(job *jobs, size_t njobs, double seconds, tally *t);

#endif /* STARLING_BENCH_API_INT_H */
