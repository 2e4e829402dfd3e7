/*
 * client_int.h - internals shared by the files of api/client.
 *
 * Layers, bottom to top (a file calls only into the layers below it:
 * .ci/check_layers.py): http.c (one exchange on the wire, small helpers);
 * client.c (creation, options, sessions, the retry policy); transfer.c (the
 * resumable uploads and downloads).
 */
#ifndef STARLING_API_CLIENT_INT_H
#define STARLING_API_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "starling/api_client.h"

#define SL__URL_MAX  2048
#define SL__PATH_MAX 8192

struct sl_client {
    CURL *curl;
    char *base_url;     /* without a trailing '/' */
    const char *prefix; /* the base URL's path ("" or "/prefix"), inside base_url */
    char *ca_file;
    char *pinned_pubkey;
    char *user_agent;
    char *admin_token;
    int64_t device_id;
    const sl_device_key *device_key;
    const sl_clock *clock;
    sl_client_sleep_fn sleep;
    void *sleep_ctx;
    uint64_t rng; /* xorshift64* state for the jitter */
    long connect_timeout_ms;
    long request_timeout_ms;
    long low_speed_limit;
    long low_speed_time_s;
    unsigned max_attempts;
    int64_t retry_base_ms;
    int64_t retry_cap_ms;
    int64_t retry_after_cap_ms;
    size_t max_response_bytes;
    size_t max_download_bytes;
    size_t upload_chunk_bytes;
    /* device sessions (api_sign.h): opened with one signed POST /v1/sessions, then requests
     * carry an HMAC under the session's key; renewed before expiry and after a 401 that says
     * the session ended */
    int use_sessions;
    int have_session;
    char sess_token[SL_SESSION_TOKEN_MAX];
    uint8_t sess_key[SL_SESSION_KEY_LEN];
    int64_t sess_expires_ms;
    uint64_t sessions_opened;
};

/* sl__text_ok - 1 when @s has no control characters (a header value must not break lines). */
int sl__text_ok(const char *s);

/*
 * Where a response body goes when it does not go into the response: the
 * download helper routes 200/206 bodies straight into its state, so a cut
 * keeps what arrived.
 * @headers: called once the final response's headers are in; sets
 *   *@to_sink (1: the body goes to @write, 0: into the response) and returns
 *   SL_OK, or an error that aborts the transfer (returned by the attempt).
 * @write: appends body bytes; an error aborts the transfer likewise.
 */
typedef struct sl__sink {
    int (*headers)(void *ctx, const sl_client_response *resp, int *to_sink);
    int (*write)(void *ctx, const void *data, size_t len);
    void *ctx;
} sl__sink;

/* One request, as the helpers describe it. */
typedef struct sl__request {
    const char *method;
    const char *path; /* relative to the base URL, with the query */
    const void *body;
    size_t len;
    const char *content_type;
    const char *const *headers; /* NULL-terminated "Name: value", or NULL */
    sl__sink *sink;             /* NULL: body into the response */
    size_t max_body;            /* 0: the client's max_response_bytes */
    int force_signature;        /* signed with the device key even when a session is held */
} sl__request;

/*
 * sl__client_attempt - one exchange, no retries. Returns SL_OK with @resp
 * filled (the caller frees it), or an error. *@retryable tells whether the
 * failure or the answer's status is worth another attempt.
 */
int sl__client_attempt(sl_client *c, const sl__request *rq, sl_client_response *resp,
                       int *retryable);

/*
 * sl__client_send - sl__client_attempt() with the retry policy of the
 * client (max_attempts, backoff, Retry-After). Fills @out on SL_OK.
 */
int sl__client_send(sl_client *c, const sl__request *rq, sl_client_response *out);

/* sl__client_backoff - sleep before retry number @failures (1 = first retry). */
void sl__client_backoff(sl_client *c, unsigned failures, int64_t retry_after_s);

/* sl__client_max_attempts, _chunk, _max_download - option values after defaults. */
unsigned sl__client_max_attempts(const sl_client *c);
size_t sl__client_chunk(const sl_client *c);
size_t sl__client_max_download(const sl_client *c);

/* sl__parse_u64 - strict decimal of @n bytes (no sign, no spaces); 0 or -1. */
int sl__parse_u64(const char *s, size_t n, uint64_t *out);

#endif /* STARLING_API_CLIENT_INT_H */
