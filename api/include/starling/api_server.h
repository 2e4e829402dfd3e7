/*
 * starling/api_server.h - the coordinator's HTTPS REST server.
 *
 * The server speaks the protocol of api/openapi.yaml over libmicrohttpd
 * (epoll, an internal thread pool, TLS through GnuTLS): device enrolment
 * and signed check-ins, model downloads (ETag, Range, deltas), resumable
 * uploads that end in the round engine's accept, operator endpoints behind
 * an admin bearer token, Prometheus metrics, health checks and a status
 * page. It owns a ticker thread that drives sl_engine_tick().
 *
 * It holds no state of its own that matters for correctness: upload
 * sessions, devices, rounds and models live in the store; what the server
 * keeps in memory (nonce cache, rate-limit buckets, the delta cache,
 * counters) may be lost at any instant.
 *
 * Life cycle:
 *   sl_server_create()   state only, no socket (tests and fuzzers stop here
 *                        and call sl_server_handle())
 *   sl_server_start()    listen, serve, tick
 *   sl_server_reload_tls()  serve new connections with a new certificate
 *                        (SIGHUP), any number of times while serving
 *   sl_server_quiesce()  stop accepting connections (SIGTERM)
 *   sl_server_drain()    wait for requests in flight, up to a grace period
 *   sl_server_free()     stop the daemon and the ticker, release everything
 *
 * Thread safety: sl_server_handle() and the accessors may be called from
 * any thread at any time between create and free; the life-cycle calls
 * must come from one thread, in the order above.
 */
#ifndef STARLING_API_SERVER_H
#define STARLING_API_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"
#include "starling/round.h"
#include "starling/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Settings of a server; sl_server_options_default() fills every field. */
typedef struct sl_server_options {
    /* "host:port", host an IPv4 or bracketed IPv6 literal ("[::1]:8443");
     * port 0 picks a free port (see sl_server_port()). Default "127.0.0.1:8443". */
    const char *listen;
    const char *tls_cert_file; /* PEM; required unless insecure_http */
    const char *tls_key_file;  /* PEM; required unless insecure_http */
    int insecure_http;         /* 1: plain HTTP (loopback demos, behind a TLS ingress) */
    /* Secrets, compared in constant time (through their SHA-256). NULL or
     * "": the endpoints they guard answer 401 to everyone. */
    const char *admin_token;     /* Authorization: Bearer <token> for operator writes */
    const char *enrolment_token; /* POST /v1/devices */
    int public_status;           /* 1: read-only operator endpoints need no token */
    uint64_t max_body;           /* bytes of one request body (default 16 MiB); more: 413 */
    unsigned threads;            /* libmicrohttpd thread pool (default 4) */
    /* Threads that run device requests (authentication, decoding,
     * validation, durable waits) off the libmicrohttpd threads, so reads
     * such as /v1/status never queue behind them. A worker mostly waits for
     * the store's group commit, which takes every write queued: more workers
     * make bigger commits (default 32; 0: run them on the libmicrohttpd
     * threads). */
    unsigned workers;
    unsigned connection_limit;        /* concurrent connections (default 1024) */
    unsigned per_ip_connection_limit; /* concurrent connections per client IP (default 64) */
    unsigned connection_timeout_s;    /* an idle or too slow connection is closed (default 30) */
    double device_rate;               /* requests per second a device may sustain (default 10) */
    double device_burst;              /* token-bucket size (default 50); beyond: 429 */
    int64_t timestamp_window_ms;      /* signed requests: allowed clock skew (default 300000) */
    size_t nonce_capacity;            /* replay cache entries (default 262144) */
    int64_t upload_ttl_ms;            /* an upload session expires after this (default 24 h) */
    int64_t session_ttl_ms;           /* a device session lasts this long (default 1 h) */
    size_t model_cache_bytes;         /* encoded deltas kept in memory (default 64 MiB) */
    int64_t tick_interval_ms;         /* longest wait between engine ticks (default 100) */
    const sl_clock *clock;            /* NULL: the system clock */
} sl_server_options;

/**
 * sl_server_options_default - fill @o with the defaults documented above
 * (no TLS files, no tokens, insecure_http 0, public_status 0).
 */
void sl_server_options_default(sl_server_options *o);

/** A server. Opaque. */
typedef struct sl_server sl_server;

/**
 * sl_server_create - a server over @store and @engine (both borrowed: they
 * must outlive the server). Copies every string of @o and reads the TLS
 * files (unless insecure_http), so @o may go away after the call. Opens no
 * socket and starts no thread.
 * @err: receives a one-line reason on failure (may be NULL).
 * Returns SL_OK, SL_EINVAL (bad listen address, missing TLS files or
 * bounds), SL_ENOENT / SL_EIO (unreadable TLS file), SL_ENOMEM.
 */
int sl_server_create(const sl_server_options *o, sl_store *store, sl_engine *engine,
                     sl_server **out, char *err, size_t errcap);

/**
 * sl_server_start - bind the listen address, start the daemon (thread pool
 * over epoll, TLS unless insecure_http) and the ticker thread.
 * Returns SL_OK, SL_EIO (bind failed: address in use, permission),
 * SL_EUNSUPPORTED (libmicrohttpd without TLS or epoll), SL_ESTATE (started
 * before). @err receives a reason.
 */
int sl_server_start(sl_server *s, char *err, size_t errcap);

/** sl_server_port - the bound port (after start; 0 before). Thread-safe. */
uint16_t sl_server_port(const sl_server *s);

/**
 * sl_server_reload_tls - read the certificate chain and private key (PEM)
 * from @cert_file and @key_file again and serve every new connection with
 * them, without closing the listening socket or any connection: a new
 * daemon takes the socket over (connections that arrive meanwhile wait in
 * its backlog), the old one serves the connections it has, with the old
 * certificate, until they close (at most the connection timeout after
 * their last request), and is then stopped by the ticker.
 * The files are checked first by libmicrohttpd itself (GnuTLS parses both
 * and checks that the key is the certificate's): files that cannot be
 * read or are refused change nothing, and @err says why.
 * Returns SL_OK; SL_EINVAL (refused files, or NULL arguments), an error of
 * reading a file (SL_ENOENT, ...), SL_ESTATE (plain HTTP, not started, or
 * quiesced), SL_EBUSY (four earlier reloads still serve connections),
 * SL_ENOMEM, SL_EIO (libmicrohttpd refused to start on the socket: the old
 * certificate serves again, or, when even that failed, no new connection
 * is accepted and @err says so). Call it from the life-cycle thread.
 */
int sl_server_reload_tls(sl_server *s, const char *cert_file, const char *key_file, char *err,
                         size_t errcap);

/**
 * sl_server_set_tokens - replace the operators' admin token and the devices'
 * enrolment token (only their SHA-256 digests are kept, as at create): every
 * request checked after the call sees the new ones, the old ones are refused
 * (401). NULL keeps that token as it is; "" disables it (operator writes, or
 * enrolment, refused). Enrolled devices never use the enrolment token again,
 * so replacing it affects only devices not yet enrolled. Thread-safe.
 * Returns SL_OK, or SL_EINVAL for a NULL @s.
 */
int sl_server_set_tokens(sl_server *s, const char *admin_token, const char *enrolment_token);

/**
 * sl_server_quiesce - stop accepting new connections; requests on
 * connections already open are still served. Idempotent. Does not block.
 */
void sl_server_quiesce(sl_server *s);

/**
 * sl_server_drain - wait until no request is in flight, at most @grace_ms.
 * Returns SL_OK, or SL_ETIMEDOUT when requests were still running. Blocks.
 */
int sl_server_drain(sl_server *s, int64_t grace_ms);

/**
 * sl_server_free - stop the daemon (connections still open are closed),
 * stop and join the ticker, release everything. Does not close the store
 * or the engine. NULL is a no-op. Blocks until the threads ended.
 */
void sl_server_free(sl_server *s);

/* ------------------------------------------------------------------------ */
/* In-process requests (tests, fuzzers)                                     */
/* ------------------------------------------------------------------------ */

/** One request header (borrowed strings). */
typedef struct sl_server_header {
    const char *name;
    const char *value;
} sl_server_header;

/** A response. Opaque; read it with the accessors below. */
typedef struct sl_server_response sl_server_response;

/**
 * sl_server_handle - run one request through the same router, checks,
 * limits, metrics and access log as the network path, without a socket.
 * @method: "GET", "POST", ...; @target: the request target as sent (path
 * and query, not decoded); @headers: @nheaders borrowed pairs; @body: may be
 * NULL when @body_len is 0. A body above max_body is answered 413 without
 * being looked at. @out receives a response the caller frees with
 * sl_server_response_free().
 * Returns SL_OK (every HTTP answer, errors included) or SL_ENOMEM / SL_EINVAL.
 * Thread-safe; blocks like the handler it runs (storage writes).
 */
int sl_server_handle(sl_server *s, const char *method, const char *target,
                     const sl_server_header *headers, size_t nheaders, const void *body,
                     size_t body_len, sl_server_response **out);

/** sl_server_response_status - the HTTP status code. */
int sl_server_response_status(const sl_server_response *r);

/** sl_server_response_body - the body (owned by @r, not NUL-terminated) and its length. */
const void *sl_server_response_body(const sl_server_response *r, size_t *len);

/** sl_server_response_header - a response header's value (owned by @r), or NULL. Case-insensitive.
 */
const char *sl_server_response_header(const sl_server_response *r, const char *name);

/** sl_server_response_free - NULL is a no-op. */
void sl_server_response_free(sl_server_response *r);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_API_SERVER_H */
