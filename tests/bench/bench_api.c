/*
 * bench_api.c - `starling bench api`: the coordinator's REST server under
 * load, in one process on loopback (plain HTTP; the store on the real disk
 * in a temporary directory, synchronous=FULL, so an acknowledged upload is
 * durable). A task, a round in TRAINING with every enrolled device
 * selected, then N concurrent clients on libcurl multi handles:
 *   (a) GET /v1/status (operator token): requests/s, p50/p99 latency;
 *   (b) complete 40 KB update uploads (one signed create carrying the
 *       whole frame, which the engine validates and stores durably before
 *       the answer; with --two-step a signed JSON create and one signed
 *       PATCH, the protocol before creation with upload): uploads/s;
 *   (c) status p50/p99 from a second set of connections (its own thread
 *       and multi handle) while (b) runs again;
 *   (d) (b) and (c) under device sessions: each request carries the
 *       session's HMAC-SHA256 instead of an ECDSA signature;
 *   (e) (b) and (c) with authentication switched off: a second server on
 *       the same store and engine, made open by the benchmark-only switch
 *       of server_bench.h (no flag or setting of the product reaches it).
 * The upload kinds take turns in four slices each (alone: signed,
 * sessions, open, signed, ...; then the same with status beside), so that a
 * drift of the shared machine or of the growing store reaches each alike.
 * Each phase has devices of its own (one update per device and round):
 * the signed phases' devices have ECDSA keys; the others are enrolled with
 * placeholder keys, as they never sign (a session is minted for each with
 * the server's secret, as an earlier round would have opened it).
 * With `wrk` on PATH it also runs `wrk -t2 -c64 -d5s` on /v1/status.
 * Clients and server share the machine's cores: the figures are the
 * system's, not the server's alone; the cost of one request signature and
 * one verification is printed beside them because it bounds (b).
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../../api/server/server_bench.h"
#include "bench.h"
#include "bench_api_int.h"
#include "starling/api_server.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/round.h"
#include "starling/store.h"

#include <mbedtls/ecdsa.h>

#define LAYOUT   "w 400 110\nb 10\n"
#define NONZEROS 10600 /* fp32 values of random bits: about 40 KB per update */

/* ---- latency samples ------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The @p quantile in milliseconds (sorts the samples). */
static double samples_ms(samples *s, double p)
{
    size_t i;
    if (s->n == 0)
        return 0;
    qsort(s->ns, s->n, sizeof *s->ns, cmp_i64);
    i = (size_t)(p * (double)(s->n - 1) + 0.5);
    return (double)s->ns[i] / 1e6;
}

/* ---- the coordinator under test --------------------------------------------------- */

typedef struct keygen_job {
    bench *b;
    size_t first, count;
} keygen_job;

#define ENROLLERS 8 /* threads: their enrolments share group commits */
#define SLICES    4 /* turns of each upload kind per phase (see run_slice) */

/* Devices enrolled from ENROLLERS threads: a real key (mbedTLS keygen costs
 * ~1 ms) for the signed phases' devices, a placeholder for the others. */
static void *keygen(void *arg)
{
    keygen_job *j = arg;
    for (size_t i = j->first; i < j->first + j->count; i++) {
        uint8_t pub[SL_PUBKEY_LEN] = {0x04};
        if (i < j->b->nsigned) {
            if (sl_device_key_generate(&j->b->keys[i]) != SL_OK ||
                sl_device_key_public(j->b->keys[i], pub) != SL_OK)
                abort();
        } else {
            memcpy(pub + 1, &i, sizeof i); /* unique, never verified */
        }
        if (sl_store_enrol_device(j->b->store, pub, sizeof pub, "{}", &j->b->ids[i]) != SL_OK)
            abort();
    }
    return NULL;
}

static void make_update(bench *b, const sl_layout *layout)
{
    sl_frame_header h = {
        SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, sl_layout_hash(layout), 1, (uint64_t)b->round, 0};
    static uint32_t idx[NONZEROS];
    static float val[NONZEROS];
    uint32_t bidx[1] = {0};
    float bval[1] = {0.01f};
    sl_sparse_tensor t[2] = {{NONZEROS, idx, val}, {1, bidx, bval}};
    sl_encode_params p;
    uint64_t x = 88172645463325252ull;
    /* NONZEROS of the 44000 weights uniformly at random (selection sampling),
     * as top-k of a noisy gradient; random fp32 values: ~3.9 bytes each */
    for (uint32_t i = 0, pos = 0; i < NONZEROS; pos++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (x % (44000u - pos) >= NONZEROS - i)
            continue;
        idx[i] = pos;
        val[i++] = ((float)(x >> 40) / 16777216.0f - 0.5f) * 1e-2f;
    }
    sl_encode_params_default(&p);
    if (sl_frame_encode_update(layout, &h, t, &p, NULL, &b->frame, &b->frame_len) != SL_OK)
        abort();
    sl_sha256(b->frame, b->frame_len, b->frame_sha);
    sl_hex(b->frame_sha, 32, b->frame_hex);
}

static int setup(bench *b)
{
    char path[700], err[512], config[512];
    sl_store_options so;
    sl_server_options o;
    sl_layout *layout;
    sl_task_status st;
    pthread_t th[ENROLLERS];
    keygen_job jobs[ENROLLERS];
    float *model;
    void *frame;
    size_t frame_len, n;

    snprintf(b->dir, sizeof b->dir, "%s/starling-bench-api.XXXXXX", b->o.dir);
    if (mkdtemp(b->dir) == NULL) {
        fprintf(stderr, "bench api: cannot make a directory in %s\n", b->o.dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/starling.db", b->dir);
    sl_store_options_default(&so);
    so.path = path;
    if (sl_store_open(&so, &b->store, err, sizeof err) != SL_OK ||
        sl_engine_open(b->store, NULL, &b->engine, err, sizeof err) != SL_OK) {
        fprintf(stderr, "bench api: %s\n", err);
        return -1;
    }
    b->keys = calloc(b->ndev, sizeof *b->keys);
    b->ids = calloc(b->ndev, sizeof *b->ids);
    if (b->keys == NULL || b->ids == NULL)
        abort();
    for (size_t k = 0; k < ENROLLERS; k++) {
        size_t first = k * b->ndev / ENROLLERS, end = (k + 1) * b->ndev / ENROLLERS;
        jobs[k] = (keygen_job){b, first, end - first};
        pthread_create(&th[k], NULL, keygen, &jobs[k]);
    }
    for (size_t k = 0; k < ENROLLERS; k++)
        pthread_join(th[k], NULL);

    /* one round that never fills: every device selected, nobody waits for it */
    if (sl_layout_parse(LAYOUT, strlen(LAYOUT), &layout) != SL_OK)
        abort();
    n = (size_t)sl_layout_params(layout);
    model = calloc(n, sizeof *model);
    if (sl_frame_encode_model(layout, model, 1, 3, &frame, &frame_len) != SL_OK)
        abort();
    snprintf(config, sizeof config,
             "{\"name\":\"bench\",\"target\":%zu,\"quorum\":1,\"over_selection\":1.0,"
             "\"selection_window_ms\":1000,\"report_deadline_ms\":3600000}",
             b->ndev + 1);
    if (sl_engine_create_task(b->engine, config, LAYOUT, frame, frame_len, &b->task, err,
                              sizeof err) != SL_OK) {
        fprintf(stderr, "bench api: task: %s\n", err);
        return -1;
    }
    for (size_t i = 0; i < b->ndev; i++) {
        sl_checkin_info info = {100, "", "", 0, 0, 0};
        sl_checkin_result r;
        if (sl_engine_checkin(b->engine, b->task, b->ids[i], &info, &r) != SL_OK)
            abort();
    }
    do {
        usleep(50000);
        if (sl_engine_tick(b->engine, NULL) != SL_OK ||
            sl_engine_task_status(b->engine, b->task, &st) != SL_OK)
            abort();
    } while (st.round.state == SL_ROUND_SELECTING);
    if (st.round.state != SL_ROUND_TRAINING || st.round.selected != b->ndev) {
        fprintf(stderr, "bench api: the round did not select every device\n");
        return -1;
    }
    b->round = st.round.id;
    make_update(b, layout);
    free(model);
    free(frame);
    sl_layout_free(layout);

    sl_server_options_default(&o);
    o.listen = "127.0.0.1:0";
    o.insecure_http = 1;
    o.admin_token = BENCH_ADMIN;
    o.threads = b->o.threads;
    o.workers = b->o.workers;
    o.connection_limit = 4096;
    o.per_ip_connection_limit = 4096;
    o.device_rate = o.device_burst = 1e6;
    o.max_body = 1u << 20;
    if (sl_server_create(&o, b->store, b->engine, &b->server, err, sizeof err) != SL_OK ||
        sl_server_start(b->server, err, sizeof err) != SL_OK) {
        fprintf(stderr, "bench api: server: %s\n", err);
        return -1;
    }
    snprintf(b->base, sizeof b->base, "http://127.0.0.1:%u", (unsigned)sl_server_port(b->server));
    if (b->o.phases & PHASE_OPEN) {
        if (sl_server_create(&o, b->store, b->engine, &b->open_server, err, sizeof err) != SL_OK ||
            sl__server_bench_unauthenticated(b->open_server) != SL_OK ||
            sl_server_start(b->open_server, err, sizeof err) != SL_OK) {
            fprintf(stderr, "bench api: the open server: %s\n", err);
            return -1;
        }
        snprintf(b->open_base, sizeof b->open_base, "http://127.0.0.1:%u",
                 (unsigned)sl_server_port(b->open_server));
    }
    {
        /* every device holds a session, as it would from an earlier round (a session lasts an
         * hour; opening one is one signed request, measured apart): tokens minted with the
         * secret the server loaded, so the server derives the same keys */
        uint8_t secret[SL_STORE_SECRET_LEN];
        uint32_t epoch;
        int64_t expires = sl_clock_wall_ns(NULL) / 1000000 + 3600 * 1000;
        if (sl_store_session_secret(b->store, 0, &epoch, secret) != SL_OK)
            abort();
        b->tokens = calloc(b->ndev, sizeof *b->tokens);
        b->skeys = calloc(b->ndev, sizeof *b->skeys);
        if (b->tokens == NULL || b->skeys == NULL)
            abort();
        for (size_t i = b->nsigned; i < b->ndev; i++) {
            sl_session t = {epoch, b->ids[i], expires, {0}};
            memcpy(t.id, &i, sizeof i);
            if (sl_session_token(&t, b->tokens[i], sizeof b->tokens[i]) != SL_OK ||
                sl_session_key(secret, b->tokens[i], b->skeys[i]) != SL_OK)
                abort();
        }
    }
    return 0;
}

static void teardown(bench *b)
{
    char cmd[700];
    sl_server_free(b->server);
    sl_server_free(b->open_server);
    sl_engine_close(b->engine);
    sl_store_close(b->store);
    for (size_t i = 0; i < b->ndev; i++)
        sl_device_key_free(b->keys[i]);
    free(b->keys);
    free(b->ids);
    free(b->frame);
    free(b->tokens);
    free(b->skeys);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench api: could not remove %s\n", b->dir);
}

/* ---- the phases ------------------------------------------------------------------- */

typedef struct status_thread {
    job *jobs;
    size_t njobs;
    double seconds;
    tally t;
} status_thread;

static void *status_main(void *arg)
{
    status_thread *st = arg;
    sl__bench_api_run(st->jobs, st->njobs, st->seconds, &st->t);
    return NULL;
}

/* Closed-loop status requests on @n connections for @seconds. */
static void phase_status(bench *b, unsigned n, double seconds, tally *t)
{
    job *jobs = calloc(n, sizeof *jobs);
    for (unsigned i = 0; i < n; i++)
        sl__bench_api_job_init(&jobs[i], b, JOB_STATUS);
    sl__bench_api_run(jobs, n, seconds, t);
    for (unsigned i = 0; i < n; i++)
        sl__bench_api_job_free(&jobs[i]);
    free(jobs);
}

/* Uploads on @n connections for @seconds; with @status_conns > 0, status
 * requests from another thread at the same time. */
static void phase_uploads(bench *b, unsigned n, unsigned status_conns, double seconds, tally *t,
                          tally *status)
{
    job *jobs = calloc(n + status_conns, sizeof *jobs);
    status_thread st;
    pthread_t th;
    for (unsigned i = 0; i < n + status_conns; i++)
        sl__bench_api_job_init(&jobs[i], b, i < n ? JOB_UPLOAD : JOB_STATUS);
    if (status_conns > 0) {
        st = (status_thread){jobs + n, status_conns, seconds, *status};
        pthread_create(&th, NULL, status_main, &st);
    }
    sl__bench_api_run(jobs, n, seconds, t);
    if (status_conns > 0) {
        pthread_join(th, NULL);
        *status = st.t;
    }
    for (unsigned i = 0; i < n + status_conns; i++)
        sl__bench_api_job_free(&jobs[i]);
    free(jobs);
}

/*
 * What sl_verify_request() did before it kept its P-256 group: a fresh
 * ECDSA context per call, so mbedTLS recomputes its table of multiples of G
 * every time. Beside the real one, it shows what the pooled group saves.
 */
static int verify_fresh_group(const uint8_t *pub, const uint8_t digest[32], const char *sig)
{
    uint8_t der[SL_SIGNATURE_B64_MAX];
    size_t der_len = 0;
    mbedtls_ecdsa_context ecdsa;
    int ok;
    if (sl_base64_decode(sig, der, sizeof der, &der_len) != SL_OK)
        return 0;
    mbedtls_ecdsa_init(&ecdsa);
    ok = mbedtls_ecp_group_load(&ecdsa.grp, MBEDTLS_ECP_DP_SECP256R1) == 0 &&
         mbedtls_ecp_point_read_binary(&ecdsa.grp, &ecdsa.Q, pub, SL_PUBKEY_LEN) == 0 &&
         mbedtls_ecp_check_pubkey(&ecdsa.grp, &ecdsa.Q) == 0 &&
         mbedtls_ecdsa_read_signature(&ecdsa, digest, 32, der, der_len) == 0;
    mbedtls_ecdsa_free(&ecdsa);
    return ok;
}

/* The cost of signing and verifying one request here (bounds the uploads):
 * each signature by another key, as in the upload phases. */
static void signature_cost(bench *b, double *sign_us, double *verify_us, double *fresh_us)
{
    const int n = b->o.quick ? 5 : 40;
    uint8_t(*pub)[SL_PUBKEY_LEN] = calloc((size_t)n, sizeof *pub);
    char(*sig)[SL_SIGNATURE_B64_MAX] = calloc((size_t)n, sizeof *sig);
    uint8_t digest[32] = {1}, canonical[32];
    char text[160], hex[65];
    int64_t t0, t1, t2, t3;
    if (pub == NULL || sig == NULL || b->ndev < (size_t)n)
        abort();
    for (int i = 0; i < n; i++)
        sl_device_key_public(b->keys[i], pub[i]);
    t0 = sl_bench_now_ns();
    for (int i = 0; i < n; i++)
        sl_sign_request(b->keys[i], "PATCH", "/v1/uploads/x", 1, "0123456789abcdef", digest, sig[i],
                        sizeof sig[i]);
    t1 = sl_bench_now_ns();
    for (int i = 0; i < n; i++)
        if (sl_verify_request(pub[i], SL_PUBKEY_LEN, "PATCH", "/v1/uploads/x", 1,
                              "0123456789abcdef", digest, sig[i]) != SL_OK)
            abort();
    t2 = sl_bench_now_ns();
    /* the canonical string of api_sign.h, hashed: what the signature covers */
    sl_hex(digest, 32, hex);
    snprintf(text, sizeof text, "STARLING-V1\nPATCH\n/v1/uploads/x\n1\n0123456789abcdef\n%s", hex);
    sl_sha256(text, strlen(text), canonical);
    for (int i = 0; i < n; i++)
        if (!verify_fresh_group(pub[i], canonical, sig[i]))
            abort();
    t3 = sl_bench_now_ns();
    *sign_us = (double)(t1 - t0) / n / 1e3;
    *verify_us = (double)(t2 - t1) / n / 1e3;
    *fresh_us = (double)(t3 - t2) / n / 1e3;
    free(pub);
    free(sig);
}

static int have_program(const char *name)
{
    const char *path = getenv("PATH");
    char dir[1024], file[1100];
    while (path != NULL && *path != '\0') {
        size_t n = strcspn(path, ":");
        if (n > 0 && n < sizeof dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
            snprintf(file, sizeof file, "%s/%s", dir, name);
            if (access(file, X_OK) == 0)
                return 1;
        }
        path += n + (path[n] == ':');
    }
    return 0;
}

/* `wrk -t2 -c64 -d<secs>s` on /v1/status: its requests/s, or -1. */
static double run_wrk(const bench *b, int secs, double *p99_ms)
{
    char cmd[512], line[512];
    double rps = -1;
    FILE *fp;
    *p99_ms = -1;
    snprintf(cmd, sizeof cmd,
             "wrk -t2 -c64 -d%ds --latency -H '" BENCH_AUTH_HEADER "' %s/v1/status 2>&1", secs,
             b->base);
    fp = popen(cmd, "r");
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof line, fp) != NULL) {
        char unit[8] = "";
        double v;
        if (strncmp(line, "Requests/sec:", 13) == 0)
            rps = strtod(line + 13, NULL);
        else if (sscanf(line, " 99%% %lf%7s", &v, unit) == 2)
            *p99_ms = strcmp(unit, "us") == 0 ? v / 1e3 : strcmp(unit, "s") == 0 ? v * 1e3 : v;
    }
    pclose(fp);
    return rps;
}

/* What was wrong with @arg, then the usage; 2. */
static int usage(const char *arg)
{
    fprintf(stderr, "starling bench api: unknown or malformed argument \"%s\"\n", arg);
    fprintf(stderr, "usage: starling bench api [--json] [--quick] [--clients N] [--seconds S]\n"
                    "                          [--threads T] [--workers W] [--devices D]\n"
                    "                          [--two-step] [--phases LIST] [--dir DIR]\n"
                    "  LIST: some of status,signed,sessions,open (default all of them)\n"
                    "  D: devices for each upload phase (default: enough for its highest rate)\n");
    return 2;
}

/* "status,signed,..." into PHASE_ bits: 0 for anything else. */
static unsigned parse_phases(const char *v)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"status", PHASE_STATUS},
                 {"signed", PHASE_SIGNED},
                 {"sessions", PHASE_SESSIONS},
                 {"open", PHASE_OPEN}};
    unsigned bits = 0;
    while (*v != '\0') {
        size_t n = strcspn(v, ","), k;
        for (k = 0; k < sizeof names / sizeof names[0]; k++)
            if (strlen(names[k].name) == n && strncmp(v, names[k].name, n) == 0)
                break;
        if (k == sizeof names / sizeof names[0])
            return 0;
        bits |= names[k].bit;
        v += n + (v[n] == ',');
    }
    return bits;
}

/* Options into @o: 0, or 2 (usage) for anything malformed. */
static int parse_options(options *o, int argc, char **argv)
{
    o->clients = 64;
    o->seconds = 5;
    o->threads = 4;
    o->workers = 32; /* the server's default */
    o->phases = PHASE_STATUS | PHASE_SIGNED | PHASE_SESSIONS | PHASE_OPEN;
    o->dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        char *end = NULL;
        unsigned long n = strtoul(v, &end, 10);
        int numeric = *v >= '0' && *v <= '9' && *end == '\0' && n <= 1000000;
        if (strcmp(argv[i], "--json") == 0)
            o->json = 1;
        else if (strcmp(argv[i], "--quick") == 0)
            o->quick = 1;
        else if (strcmp(argv[i], "--two-step") == 0)
            o->two_step = 1;
        else if (strcmp(argv[i], "--workers") == 0 && numeric && n <= 256)
            o->workers = (unsigned)n, i++;
        else if (strcmp(argv[i], "--clients") == 0 && numeric && n >= 1 && n <= 1024)
            o->clients = (unsigned)n, i++;
        else if (strcmp(argv[i], "--threads") == 0 && numeric && n >= 1 && n <= 256)
            o->threads = (unsigned)n, i++;
        else if (strcmp(argv[i], "--devices") == 0 && numeric && n >= 1)
            o->devices = (unsigned)n, i++;
        else if (strcmp(argv[i], "--seconds") == 0 && (o->seconds = strtod(v, &end)) >= 0.1 &&
                 o->seconds <= 3600 && *end == '\0')
            i++;
        else if (strcmp(argv[i], "--phases") == 0 && i + 1 < argc &&
                 (o->phases = parse_phases(v)) != 0)
            i++;
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            o->dir = argv[++i];
        else
            return usage(argv[i]);
    }
    if (o->quick) {
        o->seconds = o->seconds < 0.5 ? o->seconds : 0.5;
        o->clients = o->clients < 8 ? o->clients : 8;
    }
    return 0;
}

/*
 * Devices for one upload phase of @kind: --devices, or what its highest
 * plausible rate takes (signed 1,200/s, sessions and open 5,000/s on these
 * machines); a phase that runs out of devices ends early (its rate counts
 * the time it ran).
 */
static size_t phase_devices(const options *o, unsigned kind)
{
    double rate = kind == PHASE_SIGNED ? 1200 : 5000;
    if (o->devices > 0)
        return o->devices;
    return (size_t)(rate * o->seconds + 0.5);
}

/* One kind of upload phase: alone, then with status requests beside. */
typedef struct upload_runs {
    int ran;
    size_t first, count; /* its devices: [first, first + count) alone, the next count mixed */
    size_t next_alone, next_mixed; /* the next device of each half */
    samples lat, mixed_status_lat, mixed_lat;
    tally alone, mixed, mixed_status;
} upload_runs;

/* Everything one run measured. */
typedef struct results {
    samples status_lat;
    tally status;
    upload_runs signed_, sess, open;
    double mac_us;
    double sign_us, verify_us, verify_fresh_us, wrk_rps, wrk_p99;
    unsigned status_conns;
} results;

static void runs_init(upload_runs *u)
{
    pthread_mutex_init(&u->lat.lock, NULL);
    pthread_mutex_init(&u->mixed_status_lat.lock, NULL);
    pthread_mutex_init(&u->mixed_lat.lock, NULL);
    u->alone = (tally){&u->mixed_status_lat, &u->lat, 0, 0, 0, 0};
    u->mixed = (tally){&u->mixed_status_lat, &u->mixed_lat, 0, 0, 0, 0};
    u->mixed_status = u->mixed;
}

static void runs_free(upload_runs *u)
{
    free(u->lat.ns);
    free(u->mixed_status_lat.ns);
    free(u->mixed_lat.ns);
}

/*
 * One slice of the upload phases of one kind, authenticated by @auth, on its
 * own devices: alone, or (@mixed) with status requests beside. The kinds
 * take turns in slices (see sl_bench_api), so that a drift of the shared
 * machine or of the growing database reaches every kind alike.
 */
static void run_slice(bench *b, const results *r, int auth, upload_runs *u, int mixed,
                      double seconds)
{
    b->auth = auth;
    b->next_dev = mixed ? u->next_mixed : u->next_alone;
    b->dev_limit = u->first + (mixed ? 2 : 1) * u->count;
    if (mixed)
        phase_uploads(b, b->o.clients, r->status_conns, seconds, &u->mixed, &u->mixed_status);
    else
        phase_uploads(b, b->o.clients, 0, seconds, &u->alone, NULL);
    *(mixed ? &u->next_mixed : &u->next_alone) = b->next_dev;
    u->ran = 1;
}

static double rate(const tally *t)
{
    return t->elapsed_s > 0 ? t->uploads_done / t->elapsed_s : 0;
}

/* A number, or null when @ran is 0. */
static void json_num(const char *key, int ran, double v, int last)
{
    if (ran)
        printf("\"%s\":%.3f%s", key, v, last ? "" : ",");
    else
        printf("\"%s\":null%s", key, last ? "" : ",");
}

static void json_runs(const char *name, upload_runs *u)
{
    /* each key is head + name + tail */
    const struct {
        const char *head, *tail;
        double v;
    } keys[] = {
        {"uploads_per_s_", "", rate(&u->alone)},
        {"upload_p50_ms_", "", samples_ms(&u->lat, 0.50)},
        {"upload_p99_ms_", "", samples_ms(&u->lat, 0.99)},
        {"uploads_per_s_", "_mixed", rate(&u->mixed)},
        {"status_p50_ms_during_", "_uploads", samples_ms(&u->mixed_status_lat, 0.50)},
        {"status_p99_ms_during_", "_uploads", samples_ms(&u->mixed_status_lat, 0.99)},
    };
    char key[96];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(key, sizeof key, "%s%s%s", keys[i].head, name, keys[i].tail);
        json_num(key, u->ran, keys[i].v, 0);
    }
}

static void report_runs(const bench *b, const char *what, upload_runs *u, const results *r)
{
    if (!u->ran) {
        printf("  %-18s not run (--phases)\n", what);
        return;
    }
    printf("  %-18s %7.1f /s  p50 %7.2f ms  p99 %7.2f ms;  with status on %u more "
           "connections %7.1f /s, status p50 %.2f ms  p99 %.2f ms (target < 20 ms)\n",
           what, rate(&u->alone), samples_ms(&u->lat, 0.50), samples_ms(&u->lat, 0.99),
           r->status_conns, rate(&u->mixed), samples_ms(&u->mixed_status_lat, 0.50),
           samples_ms(&u->mixed_status_lat, 0.99));
    (void)b;
}

static void report(const bench *b, results *r)
{
    int st = (b->o.phases & PHASE_STATUS) != 0;
    double st_p50 = samples_ms(&r->status_lat, 0.50), st_p99 = samples_ms(&r->status_lat, 0.99);
    double status_rps = r->status.elapsed_s > 0 ? r->status.status_done / r->status.elapsed_s : 0;
    double signed_ = rate(&r->signed_.alone), sess = rate(&r->sess.alone),
           open = rate(&r->open.alone);
    int vs_signed = r->signed_.ran && r->sess.ran && signed_ > 0,
        vs_open = r->open.ran && r->sess.ran && open > 0;
    if (b->o.json) {
        printf("{\"server_threads\":%u,\"workers\":%u,\"upload_requests\":%d,"
               "\"clients\":%u,\"seconds\":%.2f,\"update_bytes\":%zu,\"errors\":%lu,",
               b->o.threads, b->o.workers, b->o.two_step ? 2 : 1, b->o.clients, b->o.seconds,
               b->frame_len, b->failures);
        json_num("status_rps", st, status_rps, 0);
        json_num("status_p50_ms", st, st_p50, 0);
        json_num("status_p99_ms", st, st_p99, 0);
        json_num("wrk_status_rps", r->wrk_rps >= 0, r->wrk_rps, 0);
        json_num("wrk_status_p99_ms", r->wrk_rps >= 0, r->wrk_p99, 0);
        json_num("sign_us", r->signed_.ran, r->sign_us, 0);
        json_num("verify_us", r->signed_.ran, r->verify_us, 0);
        json_num("verify_fresh_group_us", r->signed_.ran, r->verify_fresh_us, 0);
        json_num("session_mac_us", r->sess.ran, r->mac_us, 0);
        json_runs("signed", &r->signed_);
        json_runs("sessions", &r->sess);
        json_runs("open", &r->open);
        json_num("sessions_vs_signed", vs_signed, vs_signed ? sess / signed_ : 0, 0);
        json_num("sessions_vs_open", vs_open, vs_open ? sess / open : 0, 1);
        printf("}\n");
        return;
    }
    printf("starling bench api: REST server on 127.0.0.1 (plain HTTP, %u server threads, %u "
           "workers), %u clients on libcurl multi, %.1f s per phase, store on disk in %s\n",
           b->o.threads, b->o.workers, b->o.clients, b->o.seconds, b->o.dir);
    if (st)
        printf("  status      %9.0f req/s   p50 %7.2f ms  p99 %7.2f ms   (target >= 20000 "
               "req/s)\n",
               status_rps, st_p50, st_p99);
    else
        printf("  status      not run (--phases)\n");
    if (r->wrk_rps >= 0)
        printf("  status/wrk  %9.0f req/s   p99 %7.2f ms  (wrk -t2 -c64 -d%ds)\n", r->wrk_rps,
               r->wrk_p99, b->o.quick ? 1 : 5);
    else if (st)
        printf("  status/wrk  not run (no wrk on PATH)\n");
    printf("  durable uploads of %zu B (%s):\n", b->frame_len,
           b->o.two_step ? "a create, then a PATCH with the bytes"
                         : "one create carrying the bytes");
    report_runs(b, "signed (ECDSA)", &r->signed_, r);
    report_runs(b, "sessions (HMAC)", &r->sess, r);
    report_runs(b, "no authentication", &r->open, r);
    if (r->signed_.ran)
        printf("  signatures  sign %.0f us, verify %.0f us per request (ECDSA P-256, mbedTLS; "
               "%.0f us with a freshly loaded group, %.2fx); %d verify per upload: at most %.0f "
               "uploads/s per core\n",
               r->sign_us, r->verify_us, r->verify_fresh_us, r->verify_fresh_us / r->verify_us,
               b->o.two_step ? 2 : 1, 1e6 / (r->verify_us * (b->o.two_step ? 2 : 1)));
    if (r->sess.ran)
        printf("  sessions    HMAC-SHA256 check %.1f us a request (key derivation included)\n",
               r->mac_us);
    if (vs_signed || vs_open) {
        printf("  ratios     ");
        if (vs_signed)
            printf(" sessions / signed %.2fx (target >= 3x);", sess / signed_);
        if (vs_open)
            printf(" sessions / no authentication %.2f (target >= 0.80);", sess / open);
        printf(" sessions %.0f /s (target >= 2000/s)\n", sess);
    }
    if (b->failures > 0)
        printf("  errors      %lu failed requests\n", b->failures);
}

/* The cost of one session MAC check (key derivation included, as the server does it). */
static double mac_cost(const bench *b)
{
    uint8_t secret[SL_SESSION_SECRET_LEN] = {1}, key[SL_SESSION_KEY_LEN];
    char mac[SL_SESSION_MAC_B64_MAX];
    int64_t t0;
    const int n = 2000;
    size_t first = b->nsigned, count = b->ndev - b->nsigned; /* the devices with sessions */
    sl_session_mac(b->skeys[first], b->tokens[first], "PATCH", "/v1/uploads/x", 1,
                   "0123456789abcdef", b->frame_sha, mac, sizeof mac);
    t0 = sl_bench_now_ns();
    for (int i = 0; i < n; i++)
        if (sl_session_key(secret, b->tokens[first + (size_t)i % count], key) != SL_OK ||
            sl_session_verify(b->skeys[first], b->tokens[first], "PATCH", "/v1/uploads/x", 1,
                              "0123456789abcdef", b->frame_sha, mac) != SL_OK)
            abort();
    return (double)(sl_bench_now_ns() - t0) / n / 1e3;
}

int sl_bench_api(int argc, char **argv)
{
    static results r; /* zero: empty samples, no counts */
    bench b;
    size_t nsigned, nsess, nopen;
    int rc;
    memset(&b, 0, sizeof b);
    if ((rc = parse_options(&b.o, argc, argv)) != 0)
        return rc;
    r.status_conns = b.o.clients < 4 ? b.o.clients : 4;
    r.wrk_rps = r.wrk_p99 = -1;
    pthread_mutex_init(&r.status_lat.lock, NULL);
    r.status = (tally){&r.status_lat, &r.status_lat, 0, 0, 0, 0};
    runs_init(&r.signed_);
    runs_init(&r.sess);
    runs_init(&r.open);
    /* each upload phase its devices; the signed ones (and 40 for the signature costs) with keys */
    nsigned = b.o.phases & PHASE_SIGNED ? 2 * phase_devices(&b.o, PHASE_SIGNED) : 0;
    nsigned = nsigned < 40 ? 40 : nsigned;
    nsess = b.o.phases & PHASE_SESSIONS ? 2 * phase_devices(&b.o, PHASE_SESSIONS) : 0;
    nopen = b.o.phases & PHASE_OPEN ? 2 * phase_devices(&b.o, PHASE_OPEN) : 0;
    b.nsigned = nsigned;
    b.ndev = nsigned + nsess + nopen;
    r.signed_.first = 0;
    r.signed_.count = nsigned / 2;
    r.sess.first = nsigned;
    r.sess.count = nsess / 2;
    r.open.first = nsigned + nsess;
    r.open.count = nopen / 2;
    for (upload_runs *u = &r.signed_; u != NULL; u = u == &r.signed_ ? &r.sess
                                                     : u == &r.sess  ? &r.open
                                                                     : NULL) {
        u->next_alone = u->first;
        u->next_mixed = u->first + u->count;
    }
    sl_log_set_level(SL_LOG_ERROR); /* no access-log line per request, nor the open server's */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (setup(&b) != 0)
        return 1;
    if (b.o.phases & PHASE_STATUS) {
        phase_status(&b, b.o.clients, b.o.seconds, &r.status);
        if (have_program("wrk"))
            r.wrk_rps = run_wrk(&b, b.o.quick ? 1 : 5, &r.wrk_p99);
    }
    if (b.o.phases & PHASE_SIGNED)
        signature_cost(&b, &r.sign_us, &r.verify_us, &r.verify_fresh_us);
    if (b.o.phases & PHASE_SESSIONS)
        r.mac_us = mac_cost(&b);
    /* the upload kinds take turns, SLICES slices each, alone and then with status beside */
    for (int mixed = 0; mixed < 2; mixed++)
        for (int k = 0; k < SLICES; k++) {
            if (b.o.phases & PHASE_SIGNED)
                run_slice(&b, &r, AUTH_SIGNED, &r.signed_, mixed, b.o.seconds / SLICES);
            if (b.o.phases & PHASE_SESSIONS)
                run_slice(&b, &r, AUTH_SESSION, &r.sess, mixed, b.o.seconds / SLICES);
            if (b.o.phases & PHASE_OPEN)
                run_slice(&b, &r, AUTH_NONE, &r.open, mixed, b.o.seconds / SLICES);
        }
    b.failures = r.status.errors;
    for (upload_runs *u = &r.signed_; u != NULL; u = u == &r.signed_ ? &r.sess
                                                     : u == &r.sess  ? &r.open
                                                                     : NULL)
        b.failures += u->alone.errors + u->mixed.errors + u->mixed_status.errors;
    report(&b, &r);
    teardown(&b);
    curl_global_cleanup();
    free(r.status_lat.ns);
    runs_free(&r.signed_);
    runs_free(&r.sess);
    runs_free(&r.open);
    return b.failures > 0 ? 1 : 0;
}
