/*
 * server_int.h - internals shared by the files of libstarling-api-server.
 *
 * A request travels as an sl__req (method, raw target, headers, body,
 * identity once checked) through the router (router.c) to one handler,
 * which fills an sl__resp. The libmicrohttpd glue (daemon.c) and the
 * in-process entry point sl_server_handle() build the same sl__req, so
 * tests and fuzzers exercise exactly the code the network path runs.
 *
 * Layers, bottom to top; a file calls only into the layers below it (never
 * up, never in a circle: .ci/check_layers.py fails the style gate if one
 * does): http.c (requests, responses, problems, text); views.c (records as
 * the API shows them); metrics.c (counters, /metrics; the router's labels
 * given at init); sessions.c (device sessions); auth.c (who may do what);
 * the handlers: backup.c, devices.c, models.c, uploads.c, operators.c,
 * dashboard.c; upload_create.c (creation with the bytes, over uploads.c);
 * router.c (routes to handlers); workers.c (uploads off the HTTP threads);
 * daemon.c (libmicrohttpd, the server's life).
 */
#ifndef STARLING_SERVER_INT_H
#define STARLING_SERVER_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "starling/api_server.h"
#include "starling/api_sign.h"

/* ------------------------------------------------------------------------ */
/* Buffers, requests, responses (http.c)                                    */
/* ------------------------------------------------------------------------ */

/* A growable byte buffer; after an allocation failure it stays failed and
 * every append is a no-op, so callers check once at the end. */
typedef struct sl__text {
    char *data;
    size_t len, cap;
    int failed;
} sl__text;

void sl__text_put(sl__text *b, const void *p, size_t n);
void sl__text_puts(sl__text *b, const char *s);
void sl__text_printf(sl__text *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void sl__text_html(sl__text *b, const char *s); /* HTML-escaped */
void sl__text_free(sl__text *b);

typedef struct sl__kv {
    char *name;
    char *value;
} sl__kv;

#define SL__MAX_HEADERS 100

typedef struct sl__req {
    char method[16];
    char *target;      /* raw request target: path and query as sent */
    char *path;        /* the target up to '?' (own copy) */
    const char *query; /* into target, after '?'; "" when none */
    sl__kv *headers;
    size_t nheaders, cap_headers;
    uint8_t *body;
    size_t body_len, body_cap;
    uint64_t discarded; /* body bytes beyond max_body, thrown away */
    int too_big;        /* the body exceeded max_body */
    int started;        /* daemon.c: the first access-handler call happened */
    char request_id[65];
    char client[64];         /* peer address, for the access log */
    int64_t device_id;       /* the authenticated device, 0 when none */
    uint8_t body_sha256[32]; /* SHA-256 of the body, once body_sha_known */
    int body_sha_known;      /* auth.c hashed the body for the signature */
    int admin;               /* the admin token was presented and matched */
    int via_session;         /* the device was authenticated by a session's MAC */
    int route;               /* index in the route table, -1 when none matched */
    int64_t start_ns;        /* monotonic */
    int status;              /* the answer's status, once queued */
    size_t bytes_out;
    struct sl__resp *answer; /* workers.c: the answer a worker made (NULL: none, or no memory) */
    int answer_ready;        /* workers.c: the worker is done with this request */
} sl__req;

#define SL__RESP_HEADERS 12

typedef struct sl__resp_hdr {
    char name[40];
    char value[256];
} sl__resp_hdr;

typedef struct sl__resp {
    int status;
    char *body; /* malloc'd, may be NULL */
    size_t len;
    /* A body served from a file instead (sl__resp_file): @fd_len bytes of @fd
     * from @fd_offset; owned by the response (closed by sl__resp_reset). -1: none. */
    int fd;
    uint64_t fd_offset, fd_len;
    char content_type[64];
    sl__resp_hdr headers[SL__RESP_HEADERS];
    size_t nheaders;
} sl__resp;

/* A request for @target (copied). NULL on ENOMEM or a target above 8 KiB. */
sl__req *sl__req_new(const char *target);
void sl__req_free(sl__req *rq);
int sl__req_add_header(sl__req *rq, const char *name, const char *value);
/* Append body bytes, keeping at most @max; beyond it too_big is set. */
int sl__req_add_body(sl__req *rq, const void *data, size_t len, uint64_t max);
/* Room for a body of @len bytes (its Content-Length, at most the limit), so that
 * sl__req_add_body() does not grow and copy it chunk by chunk. SL_ENOMEM, or SL_OK. */
int sl__req_reserve_body(sl__req *rq, size_t len);
/* The value of a request header (case-insensitive name), or NULL. */
const char *sl__req_header(const sl__req *rq, const char *name);
/* Adopt the client's X-Request-Id when it is 1..64 of [A-Za-z0-9._-], else make one. */
void sl__req_assign_id(sl_server *s, sl__req *rq);

void sl__resp_init(sl__resp *rs);
void sl__resp_reset(sl__resp *rs);
void sl__resp_header(sl__resp *rs, const char *name, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
const char *sl__resp_get_header(const sl__resp *rs, const char *name);
/* Serialise @doc (consumed) as the body. */
void sl__resp_json(sl__resp *rs, int status, cJSON *doc);
/* Take ownership of @bytes (malloc'd). */
void sl__resp_bytes(sl__resp *rs, int status, const char *ctype, void *bytes, size_t len);
/* Copy @len bytes of @text. */
void sl__resp_copy(sl__resp *rs, int status, const char *ctype, const void *text, size_t len);
/* Serve @len bytes of the open file @fd (taken over: closed with the response)
 * from @offset; libmicrohttpd sends it without reading it into memory. */
void sl__resp_file(sl__resp *rs, int status, const char *ctype, int fd, uint64_t offset,
                   uint64_t len);
/* Read a file body (sl__resp_file) into memory (the in-process path):
 * SL_OK, or SL_EIO / SL_ENOMEM with a problem written into @rs. */
int sl__resp_load_file(sl__resp *rs);
/* The length of the body, in memory or in a file. */
uint64_t sl__resp_length(const sl__resp *rs);
/*
 * sl__parse_range - a Range header of one range ("bytes=a-b", "bytes=a-" or
 * "bytes=-n") over a representation of @len bytes: 1 with [*first, *last]
 * set, 0 when there is no usable Range (serve it all), -1 when it cannot be
 * satisfied (416).
 */
int sl__parse_range(const char *h, uint64_t len, uint64_t *first, uint64_t *last);

/*
 * sl__problem - an application/problem+json answer with the stable type
 * "https://starling.dev/problems/<name>". @reason: an extra "reason"
 * member (NULL for none).
 */
void sl__problem(sl__resp *rs, const sl__req *rq, int status, const char *name, const char *reason,
                 const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* A storage or engine status as a problem: 503 for busy/timeouts, 507-ish
 * conditions as 503, everything else 500. */
void sl__problem_status(sl__resp *rs, const sl__req *rq, int rc, const char *what);

/* The value of @key in a query string (percent-decoded into @out): 1 found,
 * 0 absent, -1 malformed or longer than @cap - 1. */
int sl__query_get(const char *query, const char *key, char *out, size_t cap);
/* A strict decimal integer in [min, max]: SL_OK or SL_EINVAL. */
int sl__parse_i64(const char *text, int64_t min, int64_t max, int64_t *out);
/* An integral JSON number in [min, max]: SL_OK, SL_ENOENT (absent), SL_EINVAL. */
int sl__json_i64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out);
/* The body as a JSON object, or a 400 problem written into @rs (returns NULL). */
cJSON *sl__json_body(const sl__req *rq, sl__resp *rs);
/* Add the integer @v to @obj as @name, printed exactly ("%lld"): cJSON prints a number
 * beyond 2^31 through "%1.15g" and sscanf, which costs more than the rest of a small answer.
 * NULL on ENOMEM. */
cJSON *sl__json_add_i64(cJSON *obj, const char *name, int64_t v);
void sl__random(void *out, size_t len);
/* @nbytes random bytes as unpadded base64url into @out (cap >= 4 * nbytes / 3 + 2). */
void sl__random_id(char *out, size_t cap, size_t nbytes);
/* @n bytes (at most 48) of @raw as unpadded base64url into @out, as sl__random_id(). */
void sl__id_encode(const uint8_t *raw, size_t n, char *out, size_t cap);
int sl__ct_equal(const uint8_t *a, const uint8_t *b, size_t n);
int64_t sl__wall_ms(const sl_server *s);
int64_t sl__mono_ns(const sl_server *s);

/* ------------------------------------------------------------------------ */
/* Workers (workers.c)                                                      */
/* ------------------------------------------------------------------------ */

struct MHD_Connection;
typedef struct sl__pool sl__pool;

/* Start @nthreads workers with a queue of at most @cap requests. */
int sl__pool_start(sl_server *s, unsigned nthreads, size_t cap, sl__pool **out);
/*
 * Suspend @conn (call from its access handler, the body complete) and queue
 * @rq: a worker dispatches it into rq->answer, sets rq->answer_ready and
 * resumes @conn. SL_EBUSY (queue full, or stopping) or SL_ENOMEM: nothing
 * was done, answer inline.
 */
int sl__pool_submit(sl__pool *p, struct MHD_Connection *conn, sl__req *rq);
/* Refuse new requests (SL_EBUSY), finish every queued one (each resumes its
 * connection) and join the workers. Idempotent; NULL is a no-op. */
void sl__pool_stop(sl__pool *p);
/* sl__pool_stop(), then free; call once nothing can submit any more. NULL: no-op. */
void sl__pool_free(sl__pool *p);

/* ------------------------------------------------------------------------ */
/* Metrics (metrics.c)                                                      */
/* ------------------------------------------------------------------------ */

#define SL__HIST_BUCKETS 12
#define SL__MAX_ROUTES   32
#define SL__MAX_STATUSES 16

typedef struct sl__hist {
    uint64_t bucket[SL__HIST_BUCKETS]; /* cumulative at render time, per bucket here */
    uint64_t count;
    double sum;
} sl__hist;

typedef struct sl__route_stats {
    int status[SL__MAX_STATUSES];
    uint64_t count[SL__MAX_STATUSES];
    sl__hist latency;
} sl__route_stats;

typedef struct sl__metrics {
    pthread_mutex_t lock;
    sl__route_stats routes[SL__MAX_ROUTES + 1]; /* the last: unmatched */
    uint64_t bytes_in, bytes_out;
    uint64_t uploads_created, uploads_completed, upload_bytes;
    uint64_t uploads_split; /* accepted updates whose positions came split (codecs/FORMAT.md) */
    uint64_t rejected[16];  /* by sl_reject_reason; [15]: digest mismatch */
    uint64_t auth_failures, rate_limited;
    sl__hist store_write;
    atomic_long uploads_in_flight;
    const char *(*route_label)(int route); /* the router's labels (given at init) */
    int nroutes;
} sl__metrics;

/* @route_label and @nroutes: the router's routes, by which requests are counted. */
int sl__metrics_init(sl__metrics *m, const char *(*route_label)(int route), int nroutes);
void sl__metrics_free(sl__metrics *m);
void sl__metrics_request(sl__metrics *m, int route, int status, int64_t dur_ns, size_t in,
                         size_t out);
void sl__metrics_store_write(sl__metrics *m, int64_t dur_ns);
void sl__metrics_count(sl__metrics *m, uint64_t *counter, uint64_t by);

/* ------------------------------------------------------------------------ */
/* The server                                                               */
/* ------------------------------------------------------------------------ */

typedef struct sl__bucket {
    int64_t device;
    double tokens;
    int64_t last_ns;
} sl__bucket;

#define SL__BUCKETS       16384

#define SL__BACKUPS       4
#define SL__BACKUP_TTL_MS (15 * 60 * 1000LL)
typedef struct sl__backup {
    char id[24]; /* "" for a free slot */
    char path[600];
    char etag[67]; /* "\"<64 hex>\"" */
    uint64_t bytes;
    int64_t created_ms, expires_ms;
} sl__backup;

typedef struct sl__blob sl__blob; /* models.c */

#define SL__TOMBSTONES 1024

typedef struct sl__tombstone {
    char id[SL_STORE_UPLOAD_ID + 1];
    int status;
    char reason[32];
} sl__tombstone;

/* A daemon that a certificate reload replaced: quiesced, serving the connections it had until
 * they close; stopped by the ticker then, with the certificate and key it was started with. */
#define SL__RETIRED 4

typedef struct sl__retired {
    void *daemon; /* struct MHD_Daemon */
    char *cert_pem, *key_pem;
} sl__retired;

struct sl_server {
    sl_server_options opt; /* strings below are the server's own copies */
    char *listen;
    char *cert_pem, *key_pem;
    pthread_rwlock_t token_lock; /* admin_sha .. have_enrol: replaced by sl_server_set_tokens() */
    uint8_t admin_sha[32], enrol_sha[32];
    int have_admin, have_enrol;
    sl_store *store;
    sl_engine *engine;
    const sl_clock *clock;
    sl_nonce_cache *nonces;

    pthread_mutex_t rate_lock;
    sl__bucket *buckets;

    pthread_mutex_t cache_lock;
    sl__blob *cache;
    size_t cache_bytes, cache_entries;
    uint64_t cache_clock;

    pthread_mutex_t tomb_lock;
    sl__tombstone tombs[SL__TOMBSTONES];
    size_t tomb_next;
    char completing[64][SL_STORE_UPLOAD_ID + 1]; /* sessions being completed now */

    sl__metrics metrics;

    struct sockaddr_storage addr; /* the parsed listen address */
    int ipv6;
    void *daemon;   /* struct MHD_Daemon */
    sl__pool *pool; /* NULL: device requests run on the libmicrohttpd threads */
    uint16_t port;
    int quiesced;
    /* the listening socket a quiesce handed back, shut down but open until the daemon's
     * workers have stopped (daemon.c, sl_server_quiesce); -1: none */
    int quiesced_fd;
    atomic_long inflight;
    pthread_mutex_t retire_lock; /* retired, nretired (daemon.c) */
    sl__retired retired[SL__RETIRED];
    size_t nretired;
    uint64_t tls_reloads;   /* certificates reloaded (under retire_lock) */
    int64_t cert_not_after; /* the served certificate's notAfter, Unix seconds (0: unknown;
                               under retire_lock) */

    pthread_t ticker;
    int ticker_running, stopping;
    pthread_mutex_t tick_lock;
    pthread_cond_t tick_cond;

    pthread_mutex_t backup_lock; /* backup_dir and backups (backup.c) */
    char backup_dir[512];        /* "" until the first backup */
    sl__backup backups[SL__BACKUPS];

    /* device sessions (sessions.c): the secrets of the current and previous epochs, and the
     * revoked sessions' ids (sorted), under sess_lock */
    pthread_rwlock_t sess_lock;
    uint32_t sess_epoch;
    uint8_t sess_secret[SL_SESSION_SECRET_LEN], sess_prev_secret[SL_SESSION_SECRET_LEN];
    int sess_have_prev;
    char (*revoked)[33];
    size_t nrevoked, caprevoked;

    uint8_t session_secret[32]; /* keys the upload ids derived from what they upload */
    uint64_t rid_prefix;
    atomic_uint_fast64_t rid_counter;
    int64_t started_ms;
    int bench_unauthenticated; /* server_bench.h: `starling bench api` only */
};

/* ------------------------------------------------------------------------ */
/* Router (router.c) and authentication (auth.c)                            */
/* ------------------------------------------------------------------------ */

typedef struct sl__params {
    char seg[2][80];
    int n;
} sl__params;

typedef void (*sl__handler)(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* Route the request to its handler; every outcome is a response in @rs. */
void sl__dispatch(sl_server *s, sl__req *rq, sl__resp *rs);
/* The request ended: metrics and one access-log line. */
void sl__request_done(sl_server *s, const sl__req *rq);
/* The route's label for metrics ("unmatched" for -1). */
const char *sl__route_label(int route);
int sl__route_count(void);

/* Each returns 1 when the request may proceed, else 0 with a problem in @rs. */
int sl__auth_device(sl_server *s, sl__req *rq, sl__resp *rs);
int sl__auth_admin(sl_server *s, sl__req *rq, sl__resp *rs);
int sl__auth_read(sl_server *s, sl__req *rq, sl__resp *rs);
/* 1 when the request carries the matching admin bearer token (no answer written). */
int sl__has_admin(sl_server *s, sl__req *rq);
/* 1 when @given hashes to @digest (constant time). */
int sl__token_matches(const uint8_t digest[32], const char *given, size_t len);
/* Whether @given (@len bytes) is the admin token (@admin) or the enrolment token: 1 it is, 0
 * not, -1 no such token is configured. Reads the tokens under token_lock (a reload may
 * replace them at any time). */
int sl__token_check(sl_server *s, int admin, const char *given, size_t len);
/* A device's token bucket: 1 allowed, 0 limited (*retry_after_s set). */
int sl__rate_allow(sl_server *s, int64_t device, int64_t *retry_after_s);

/* sessions.c: the secrets and the revoked set from the store; freed with the server. */
int sl__sessions_init(sl_server *s, char *err, size_t errcap);
void sl__sessions_free(sl_server *s);
/* A request under a session (X-Starling-Session, X-Starling-Mac) of @device: 1 when its MAC
 * verifies under a live, unrevoked session of that device; else 0 with a 401 in @rs
 * (problem types session-invalid, session-expired, session-revoked, unauthorized). The
 * caller checks the timestamp window before and the nonce after. */
int sl__auth_session(sl_server *s, sl__req *rq, sl__resp *rs, int64_t device, int64_t stamp,
                     const char *nonce);
void sl__h_session_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_sessions_list(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_sessions_revoke(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_sessions_rotate(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_device_disable(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_device_enable(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* ------------------------------------------------------------------------ */
/* Handlers                                                                 */
/* ------------------------------------------------------------------------ */

/* devices.c */
void sl__h_enrol(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_checkin(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_device(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
/* GET /v1/devices: a page of devices with their participation counts */
void sl__h_devices(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_report_metrics(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* upload_create.c: POST /v1/rounds/{round}/uploads, optionally with the first bytes */
void sl__h_upload_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* uploads.c */
void sl__h_upload_patch(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_upload_head(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
/* Forget the tombstone of session @id (a new session is made under that id). */
void sl__tomb_clear(sl_server *s, const char *id);
/* The problem for an update the engine refuses for @why (409 not_selected, 410 late, ...),
 * counted in the metrics; its status into *@status. */
void sl__upload_refuse(sl_server *s, sl__req *rq, sl__resp *rs, sl_reject_reason why, int *status);
/* 200 with the receipt of a stored update (UploadAccepted) and Upload-Offset @length. */
void sl__upload_receipt(sl__resp *rs, int64_t round_id, uint64_t length,
                        const sl_store_receipt *receipt);

typedef enum sl__upload_outcome {
    SL__UPLOAD_ACCEPTED, /* stored durably and counted: the receipt is in @rs */
    SL__UPLOAD_MISMATCH, /* the digest is not the declared one: nothing in @rs */
    SL__UPLOAD_REJECTED, /* the engine refused it: the problem is in @rs */
    SL__UPLOAD_FAILED    /* storage failure, nothing acknowledged: the problem is in @rs */
} sl__upload_outcome;

/*
 * sl__upload_accept - the whole update @bytes (@len) of the calling device
 * for @round_id: its SHA-256 must be @sha256, then sl_engine_accept()
 * validates, stores durably and counts it (blocks on the store's writer).
 * For MISMATCH and REJECTED, *@status and *@reason say how to close a session.
 */
sl__upload_outcome sl__upload_accept(sl_server *s, sl__req *rq, int64_t round_id,
                                     const uint8_t *bytes, size_t len, const uint8_t sha256[32],
                                     uint32_t num_samples, uint32_t local_steps, sl__resp *rs,
                                     int *status, const char **reason);

/* models.c */
void sl__h_model(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_model_spec(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_data_contract(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__cache_free(sl_server *s);

/* operators.c */
void sl__h_status(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_rounds(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_round(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_create_task(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_abort_round(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_openapi(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
/* @ev as @parent's object @key: devices, samples, loss, accuracy, mae, rmse (null when none). */
int sl__eval_json(cJSON *parent, const char *key, const sl_store_eval_sum *ev);

/* views.c: records as the API shows them, shared by the handlers. */
/* JSON of a round record (shared by status, rounds and round). */
cJSON *sl__round_json(const sl_round_record *r);
/* The compression a task's devices use (check-in and status): a new object, NULL on ENOMEM. */
cJSON *sl__compression_json(const sl_task_config *cfg);
const char *sl__round_state_name(sl_round_state st);
/* Status of every task the engine runs, oldest first (*@out malloc'd, *@n of them). */
int sl__all_status(sl_server *s, sl_task_status **out, size_t *n);
/* The version a round made with its evaluator metrics ("model_version", "model_metrics" of
 * GET /v1/rounds/{id}) into @out. */
void sl__round_model(sl_server *s, const sl_round_record *r, cJSON *out);

/* dashboard.c: the page (GET /, public; the status tables in it only for readers), its
 * files (GET /dashboard/{file}), and the server-rendered status page (the tables). */
void sl__dash_index(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__dash_file(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_dashboard(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* backup.c: online backups of the database (admin): POST /v1/backups takes
 * one into a private temporary directory, GET /v1/backups/{id} serves it
 * (ETag = SHA-256, Range); each is kept SL__BACKUP_TTL_MS, at most
 * SL__BACKUPS at a time. */
void sl__h_backup_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_backup_get(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
/* Delete every backup file and the directory (sl_server_free). */
void sl__backups_free(sl_server *s);

/* metrics.c */
void sl__h_metrics(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_healthz(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);
void sl__h_readyz(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs);

/* openapi_yaml.c (generated from api/openapi.yaml at configure time) */
extern const unsigned char sl__openapi_yaml[];
extern const size_t sl__openapi_yaml_len;

#endif /* STARLING_SERVER_INT_H */
