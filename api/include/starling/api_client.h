/*
 * starling/api_client.h - the libcurl client of the REST protocol, for
 * device agents and operator tools.
 *
 * One sl_client talks to one coordinator (a base URL). It signs device
 * requests (api_sign.h), adds the operator's bearer token, retries what is
 * worth retrying with capped exponential backoff and full jitter, and moves
 * large bodies resumably: uploads in chunks at an Upload-Offset (tus-like),
 * downloads with Range and a SHA-256 check against the strong ETag.
 *
 * What is retried (each attempt re-signed with a new nonce and timestamp):
 *   timeouts (connect, total, low-speed), refused/reset/cut connections,
 *   HTTP 408, 429 and 5xx except 501. A Retry-After in seconds replaces the
 *   computed delay (capped by retry_after_cap_ms).
 * What is never retried: other 4xx, TLS failures (certificate, pin,
 * handshake: SL_EPERM), a response over the size limit (SL_ETOOBIG).
 *
 * Thread safety: an sl_client is not thread-safe. Use one per thread (each
 * owns a curl easy handle and its connection cache). sl_client_create() and
 * sl_client_free() may be called from any thread at any time; the process-
 * wide curl_global_init() runs once, under pthread_once.
 *
 * Signals: libcurl runs with CURLOPT_NOSIGNAL (threads); a program using
 * the client should ignore SIGPIPE.
 *
 * Blocking: every call that talks to the server blocks. request_timeout_ms
 * bounds one attempt; sl_client_request() makes at most max_attempts. The
 * resumable helpers keep going while bytes move (each attempt continues from
 * the bytes already moved) and stop after max_attempts failures in a row
 * without progress.
 *
 * Statuses: a call returns SL_OK when the server gave an HTTP answer, whatever
 * its status code (the caller reads sl_client_response.status), and a
 * negative status when no answer came (the retries exhausted, the failure of
 * the last attempt is returned):
 *   SL_ETIMEDOUT  timed out (connect, total, or stalled below the speed limit)
 *   SL_EIO        refused, reset or cut connection, or another transport error
 *   SL_EPERM      TLS failure: unknown CA, bad certificate, pin mismatch
 *   SL_ETOOBIG    the response body exceeds the configured limit
 *   SL_ESYNTAX    the server broke the protocol (a missing or malformed header)
 *   SL_ECHECKSUM  a downloaded body does not match its ETag's SHA-256
 *   SL_EINVAL     bad arguments;  SL_ENOMEM  out of memory
 * A failed call leaves its outputs untouched unless its comment says
 * otherwise (the resumable helpers update their caller-kept state as bytes
 * move, which is the point of them).
 */
#ifndef STARLING_API_CLIENT_H
#define STARLING_API_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/api_sign.h"
#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Room for one kept response header value (longer values count as absent). */
#define SL_CLIENT_HEADER_MAX 256

/**
 * A sleep function for the retry delays. @ms >= 0. Tests inject one that
 * records the delays instead of sleeping.
 */
typedef void (*sl_client_sleep_fn)(void *ctx, int64_t ms);

/**
 * Options of sl_client_create(). Zero-initialise and set what you need: a
 * zero (or NULL) field takes the default given in its comment. Strings are
 * copied; @device_key, @clock and @sleep_ctx are borrowed and must outlive
 * the client.
 */
typedef struct sl_client_options {
    const char *base_url;       /* required: "https://host[:port][/prefix]" or "http://..." */
    const char *ca_file;        /* PEM CA bundle for https (CURLOPT_CAINFO); NULL: system store */
    const char *pinned_pubkey;  /* "sha256//<base64>[;sha256//...]" or NULL: no pinning */
    const char *user_agent;     /* NULL: "starling-client/<version>" */
    int64_t connect_timeout_ms; /* per attempt; default 10000 */
    int64_t request_timeout_ms; /* whole attempt, connect included; default 120000 */
    long low_speed_limit;       /* bytes/s below which a transfer is stalled; default 16 */
    long low_speed_time_s;      /* ...for this long, then abort (retryable); default 30 */
    unsigned max_attempts;      /* attempts per request, first included; default 5 */
    int64_t retry_base_ms;      /* backoff base (first delay up to this); default 500 */
    int64_t retry_cap_ms;       /* backoff ceiling; default 30000 */
    int64_t retry_after_cap_ms; /* ceiling for a server's Retry-After; default 300000 */
    size_t max_response_bytes;  /* body limit of sl_client_request(); default 16 MiB */
    size_t max_download_bytes;  /* body limit of sl_client_download(); default 1 GiB */
    size_t upload_chunk_bytes;  /* PATCH body size of sl_client_upload(); default 256 KiB */
    /* Device identity: when @device_key is set, every request is signed as
     * @device_id (> 0, the id given at enrolment). */
    int64_t device_id;
    const sl_device_key *device_key;
    /* With a device key: open a session (one signed POST /v1/sessions) and sign later requests
     * with its HMAC key instead of ECDSA; renewed a minute before it expires and after a 401
     * that says it ended. A session that cannot be opened leaves requests signed. */
    int use_sessions;
    /* Operator identity: when set, "Authorization: Bearer <token>" is sent. */
    const char *admin_token;
    /* Test hooks. */
    sl_client_sleep_fn sleep; /* NULL: nanosleep */
    void *sleep_ctx;
    uint64_t random_seed;  /* seed of the jitter generator; 0: from the system */
    const sl_clock *clock; /* wall clock of X-Starling-Timestamp; NULL: system */
} sl_client_options;

/** A client. Opaque; one per thread. */
typedef struct sl_client sl_client;

/** sl_client_drop_session - forget the held session (the next request opens a new one). */
void sl_client_drop_session(sl_client *c);

/** sl_client_sessions_opened - sessions this client opened so far (tests, statistics). */
uint64_t sl_client_sessions_opened(const sl_client *c);

/**
 * An HTTP answer. Fill it with sl_client_request() and friends, release it
 * with sl_client_response_free(). Absent headers are "" (strings) or -1
 * (numbers).
 */
typedef struct sl_client_response {
    long status;            /* HTTP status code */
    unsigned attempts;      /* attempts made, the successful one included */
    int64_t upload_offset;  /* Upload-Offset */
    int64_t retry_after_s;  /* Retry-After, when given in seconds */
    int64_t content_length; /* Content-Length */
    int64_t model_version;  /* X-Starling-Model-Version (GET or HEAD /v1/models/...) */
    char etag[SL_CLIENT_HEADER_MAX];
    char location[SL_CLIENT_HEADER_MAX];
    char content_range[SL_CLIENT_HEADER_MAX];
    char content_type[SL_CLIENT_HEADER_MAX];
    char request_id[SL_CLIENT_HEADER_MAX]; /* X-Request-Id */
    /* The body, malloc'd and owned by the response, followed by one NUL byte
     * (not counted) so JSON can be parsed as a string. NULL when empty. */
    uint8_t *body;
    size_t body_len;
} sl_client_response;

/**
 * sl_client_create - make a client for one coordinator.
 * @o: options (see sl_client_options); copied, may be freed after the call.
 * @out: receives the client; free it with sl_client_free().
 * Returns SL_OK, SL_EINVAL (no or malformed base URL, a string with a line
 * break, inconsistent limits), SL_ENOMEM, or SL_EIO (libcurl failed to
 * initialise). Does not connect.
 */
int sl_client_create(const sl_client_options *o, sl_client **out);

/** sl_client_free - close connections and free @c; NULL is a no-op. The token is zeroed. */
void sl_client_free(sl_client *c);

/**
 * sl_client_request - one HTTP request, with retries.
 * @method: "GET", "HEAD", "POST", "PUT", "PATCH" or "DELETE".
 * @path: absolute path with the query string, such as "/v1/rounds?limit=5";
 *   appended to the base URL and signed as it goes on the wire (the base
 *   URL's own path prefix included). No spaces or control characters.
 * @body, @len: request body (borrowed for the call; NULL/0 for none; GET
 *   and HEAD take none).
 * @content_type: Content-Type of the body; NULL: none (or
 *   "application/octet-stream" when there is a body).
 * @headers: NULL or a NULL-terminated array of extra "Name: value" lines.
 *   They may not contain line breaks or replace the signing headers.
 * @out: receives the final answer on SL_OK (its previous content is not
 *   freed: pass a fresh or freed response). After the last retryable
 *   failure the last answer is returned as is (for example a 503).
 * Returns SL_OK when an HTTP answer came; see the file comment for errors.
 * Blocks. Not thread-safe for one @c.
 */
int sl_client_request(sl_client *c, const char *method, const char *path, const void *body,
                      size_t len, const char *content_type, const char *const *headers,
                      sl_client_response *out);

/** sl_client_response_free - free @r's body and reset it to empty; NULL is a no-op. */
void sl_client_response_free(sl_client_response *r);

/* ------------------------------------------------------------------------ */
/* Resumable upload                                                         */
/* ------------------------------------------------------------------------ */

/** Longest upload id the client accepts from a server (characters). */
#define SL_CLIENT_UPLOAD_ID_MAX 127

/**
 * Caller-kept state of one resumable upload. Persist it (for example in the
 * agent's state directory) whenever @progress reports a change, and hand it
 * back after a restart to continue where the server is.
 */
typedef struct sl_client_upload_state {
    /* In/out: the server's upload id ("" to create a new upload). */
    char upload_id[SL_CLIENT_UPLOAD_ID_MAX + 1];
    /* In/out: bytes the server has acknowledged (a hint; the server's
     * Upload-Offset wins after a 409). */
    uint64_t offset;
    /* Optional: called after each change of @upload_id or @offset, from the
     * calling thread. */
    void (*progress)(void *ctx, const struct sl_client_upload_state *state, uint64_t length);
    void *progress_ctx;
} sl_client_upload_state;

/**
 * sl_client_upload - upload an update for a round, resumably
 * (api/openapi.yaml, /v1/rounds/{round}/uploads and /v1/uploads/{id}).
 * Protocol: POST /v1/rounds/{round}/uploads?length=n&sha256=<hex>&num_samples=k
 * with Content-Type application/offset+octet-stream carrying the first
 * chunk (creation with upload). An update that fits in one chunk
 * (upload_chunk_bytes) is done in that one signed request: 200 + the JSON
 * receipt. Otherwise -> 201 + Location "/v1/uploads/{id}" + the Upload-Offset
 * the server took; then PATCH /v1/uploads/{id} with Upload-Offset and
 * Content-Type application/offset+octet-stream, one chunk at a time -> 204 +
 * the new Upload-Offset, or 200 (201 accepted too) + the JSON receipt on the
 * last chunk. A server that answers that create 400 or 415 (one that knows
 * only the JSON form) is asked once more with {"length", "sha256",
 * "num_samples"} and no bytes.
 *   - A cut or a retryable answer during the create: the same create is sent
 *     again (the server makes it idempotent: the same session, or the
 *     original receipt of a stored update with "duplicate": true).
 *   - A cut, a timeout, 408/429/5xx: wait (backoff, Retry-After), ask
 *     HEAD /v1/uploads/{id} for the server's offset, continue from there.
 *   - 409 (offset mismatch): continue from the Upload-Offset of the 409, or
 *     from HEAD's when the 409 has none.
 *   - The server has every byte but its answer was lost: a zero-byte PATCH
 *     at the final offset fetches the receipt (the server answers it again,
 *     with "duplicate": true).
 *   - 404 (unknown session) or 410 with the problem reason "expired": one
 *     new upload is started (once per call). Other 410s (closed: rejected,
 *     digest mismatch, late) and other 4xx are returned; a 410 to HEAD is
 *     followed by the PATCH, whose 410 carries the reason in its body.
 * Retry budget: max_attempts consecutive failures without progress; any
 * acknowledged byte resets it, so a slow link that drops often still ends.
 * @round: the round number (>= 0).
 * @data, @len: the whole update (@len > 0); borrowed for the call.
 * @num_samples: samples trained on, reported to the server.
 * @state: in/out resumable state (see sl_client_upload_state); updated as the
 *   server acknowledges bytes, also when the call fails. A caller may pass
 *   an id with offset 0 and let the server's 409 say where to continue.
 * @out: on SL_OK the final answer: 200/201 with the JSON receipt, or the
 *   error answer (4xx, or 5xx after the retries), body included.
 * Returns SL_OK or an error of the file comment (SL_ESYNTAX: no Location or
 * an Upload-Offset outside [0, @len]). Blocks.
 */
int sl_client_upload(sl_client *c, int64_t round, const void *data, size_t len,
                     uint64_t num_samples, sl_client_upload_state *state, sl_client_response *out);

/**
 * sl_client_upload_steps - sl_client_upload() that also says how many
 * optimiser steps the device ran for the update (@local_steps; 0: not
 * said), as the upload's local_steps (api/openapi.yaml).
 */
int sl_client_upload_steps(sl_client *c, int64_t round, const void *data, size_t len,
                           uint64_t num_samples, uint32_t local_steps, sl_client_upload_state *st,
                           sl_client_response *out);

/* ------------------------------------------------------------------------ */
/* Resumable download                                                       */
/* ------------------------------------------------------------------------ */

/**
 * Caller-kept state of one download: the bytes received so far and the
 * ETag they belong to. Initialise with sl_client_download_state_init(), release
 * with sl_client_download_state_reset(). To resume across a restart, give the
 * saved bytes and ETag to sl_client_download_state_preload().
 */
typedef struct sl_client_download_state {
    uint8_t *data; /* malloc'd, owned by the state; bytes [0, len) received */
    size_t len;
    size_t cap;
    uint64_t total;                  /* full length once known, else 0 */
    int complete;                    /* 1 when data holds the whole, verified body */
    char etag[SL_CLIENT_HEADER_MAX]; /* ETag of the bytes ("" before any) */
} sl_client_download_state;

/** sl_client_download_state_init - an empty state. */
void sl_client_download_state_init(sl_client_download_state *d);

/** sl_client_download_state_reset - free the bytes and return to the empty state; NULL is a no-op.
 */
void sl_client_download_state_reset(sl_client_download_state *d);

/**
 * sl_client_download_state_preload - set @d to @len bytes already received (copied)
 * that belong to @etag (a strong ETag, required to resume). Returns SL_OK,
 * SL_EINVAL (no or overlong ETag) or SL_ENOMEM; @d is untouched on failure.
 */
int sl_client_download_state_preload(sl_client_download_state *d, const void *data, size_t len,
                                     const char *etag);

/**
 * sl_client_download - GET @path into @d, resuming with
 * "Range: bytes=<have>-" and "If-Range: <etag>" when @d holds a prefix of
 * the body and its ETag. Cuts and timeouts are retried from the bytes
 * received (budget as for uploads: max_attempts failures without progress).
 * A 200 where a 206 was asked for, or a 206 with another ETag (the body
 * changed), starts over.
 * Resuming needs a strong ETag (If-Range); without one a cut restarts from
 * zero. On completion, when the ETag has the form "\"<64 hex>\"", the
 * SHA-256 of the whole body is checked against it; other ETags are not
 * checked. A state already complete on entry is started over.
 * @if_none_match: NULL, or an ETag the caller already holds: a 304 answer
 *   leaves @d untouched.
 * @out: on SL_OK the final answer. Status 200: @d->complete is 1 and
 *   @d->data holds the body (out->body is NULL); status 304: not modified;
 *   other statuses: the error answer with its body in out->body.
 * Returns SL_OK, SL_ECHECKSUM (digest mismatch: @d is reset to empty),
 * SL_ETOOBIG (over max_download_bytes), SL_ETRUNCATED (fewer bytes than the
 * announced length: @d is reset), SL_EIO (the server kept answering ranges
 * that do not continue @d), or another error of the file
 * comment (@d keeps the bytes received, to resume later). Blocks.
 */
int sl_client_download(sl_client *c, const char *path, const char *if_none_match,
                       sl_client_download_state *d, sl_client_response *out);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_API_CLIENT_H */
