/*
 * auth.c - who is asking: signed device requests (api_sign.h), the admin
 * bearer token, and the per-device token bucket.
 *
 * Order of the device checks: cheap and stateless first (headers, the
 * timestamp window), then the device's key from the store, then the
 * signature, and only then the nonce cache. A request that fails any check
 * changes nothing, not even the replay cache: a forged request cannot burn
 * a nonce the real device is about to use.
 */
#include <arpa/inet.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "server_bench.h"
#include "server_int.h"

static int deny_as(sl_server *s, sl__req *rq, sl__resp *rs, const char *type, const char *why)
{
    sl__metrics_count(&s->metrics, &s->metrics.auth_failures, 1);
    sl__problem(rs, rq, 401, type, NULL, "%s", why);
    return 0;
}

static int deny(sl_server *s, sl__req *rq, sl__resp *rs, const char *why)
{
    return deny_as(s, rq, rs, "unauthorized", why);
}

int sl__server_bench_unauthenticated(sl_server *s)
{
    int loopback;
    if (s == NULL || !s->opt.insecure_http || s->daemon != NULL)
        return SL_EINVAL;
    if (s->ipv6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)(const void *)&s->addr;
        loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)(const void *)&s->addr;
        loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    }
    if (!loopback)
        return SL_EINVAL;
    s->bench_unauthenticated = 1;
    sl_log(SL_LOG_WARN, "http", "BENCHMARK ONLY: device requests are not authenticated");
    return SL_OK;
}

/* The benchmark's unauthenticated device: whoever X-Starling-Device names. */
static int bench_admit(sl_server *s, sl__req *rq, sl__resp *rs)
{
    const char *dev = sl__req_header(rq, SL_HDR_DEVICE);
    int64_t device;
    if (dev == NULL || sl__parse_i64(dev, 1, INT64_MAX, &device) != SL_OK)
        return deny(s, rq, rs, "malformed device id");
    rq->device_id = device;
    return 1;
}

int sl__auth_device(sl_server *s, sl__req *rq, sl__resp *rs)
{
    const char *dev = sl__req_header(rq, SL_HDR_DEVICE);
    const char *ts = sl__req_header(rq, SL_HDR_TIMESTAMP);
    const char *nonce = sl__req_header(rq, SL_HDR_NONCE);
    const char *sig = sl__req_header(rq, SL_HDR_SIGNATURE);
    const char *session = sl__req_header(rq, SL_HDR_SESSION);
    sl_device_record rec;
    int64_t device, stamp, now, retry;
    uint8_t digest[32];
    int rc;

    if (s->bench_unauthenticated)
        return bench_admit(s, rq, rs);
    if (dev == NULL || ts == NULL || nonce == NULL || (sig == NULL && session == NULL))
        return deny(s, rq, rs,
                    "a device request needs the headers " SL_HDR_DEVICE ", " SL_HDR_TIMESTAMP
                    ", " SL_HDR_NONCE " and " SL_HDR_SIGNATURE " (or " SL_HDR_SESSION
                    " and " SL_HDR_MAC ")");
    if (sig != NULL && session != NULL)
        return deny(s, rq, rs,
                    "a request is signed or under a session, not both: drop " SL_HDR_SESSION
                    " or " SL_HDR_SIGNATURE);
    if (sl__parse_i64(dev, 1, INT64_MAX, &device) != SL_OK ||
        sl__parse_i64(ts, 0, INT64_MAX, &stamp) != SL_OK)
        return deny(s, rq, rs, "malformed device id or timestamp");
    now = sl__wall_ms(s);
    if (stamp < now - s->opt.timestamp_window_ms || stamp > now + s->opt.timestamp_window_ms)
        return deny(s, rq, rs, "the timestamp is outside the allowed window");
    if (session != NULL) {
        /* the session's MAC, with no storage read (sessions.c) */
        if (!sl__auth_session(s, rq, rs, device, stamp, nonce))
            return 0;
        goto admitted;
    }
    rc = sl_store_get_device(s->store, device, &rec);
    if (rc == SL_ENOENT)
        return deny(s, rq, rs, "unknown device");
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the device");
        return 0;
    }
    if (rec.disabled)
        return deny(s, rq, rs, "the device is disabled (an operator enables it again)");
    sl_sha256(rq->body_len ? (const void *)rq->body : "", rq->body_len, digest);
    /* kept: an upload's whole body is the update, whose digest is checked next */
    memcpy(rq->body_sha256, digest, sizeof digest);
    rq->body_sha_known = 1;
    rc = sl_verify_request(rec.public_key, rec.key_len, rq->method, rq->target, stamp, nonce,
                           digest, sig);
    if (rc != SL_OK)
        return deny(s, rq, rs, "the signature does not verify");
admitted:
    rc = sl_nonce_check(s->nonces, device, nonce, stamp, now);
    if (rc == SL_EDUPLICATE) /* its own type: a client signs a request resent as it was afresh */
        return deny_as(s, rq, rs, "replayed", "the nonce was used before (replay)");
    if (rc == SL_ETIMEDOUT)
        return deny(s, rq, rs, "the timestamp is outside the allowed window");
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "checking the nonce");
        return 0;
    }
    rq->device_id = device;
    if (!sl__rate_allow(s, device, &retry)) {
        sl__metrics_count(&s->metrics, &s->metrics.rate_limited, 1);
        sl__problem(rs, rq, 429, "rate-limited", NULL,
                    "device %lld sends more than %.3g requests per second", (long long)device,
                    s->opt.device_rate);
        sl__resp_header(rs, "Retry-After", "%lld", (long long)retry);
        return 0;
    }
    return 1;
}

int sl__token_matches(const uint8_t digest[32], const char *given, size_t len)
{
    uint8_t got[32];
    /* comparing digests makes the time independent of the secret's length too */
    sl_sha256(len ? (const void *)given : "", len, got);
    return sl__ct_equal(got, digest, 32);
}

int sl__token_check(sl_server *s, int admin, const char *given, size_t len)
{
    uint8_t digest[32];
    int have;
    pthread_rwlock_rdlock(&s->token_lock);
    have = admin ? s->have_admin : s->have_enrol;
    memcpy(digest, admin ? s->admin_sha : s->enrol_sha, sizeof digest);
    pthread_rwlock_unlock(&s->token_lock);
    if (!have)
        return -1;
    return sl__token_matches(digest, given, len);
}

/* 1 admin, 0 not, -1 no admin token configured. A request without a bearer token is
 * checked as an empty one, which never matches (an empty token is no token). */
static int admin_check(sl_server *s, sl__req *rq)
{
    const char *auth = sl__req_header(rq, "Authorization");
    const char *token = "";
    int rc;
    if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0)
        for (token = auth + 7; *token == ' '; token++)
            ;
    rc = sl__token_check(s, 1, token, strlen(token));
    if (rc == 1)
        rq->admin = 1;
    return rc;
}

int sl__has_admin(sl_server *s, sl__req *rq)
{
    return admin_check(s, rq) == 1;
}

int sl__auth_admin(sl_server *s, sl__req *rq, sl__resp *rs)
{
    int rc = admin_check(s, rq);
    if (rc == 1)
        return 1;
    return deny(s, rq, rs,
                rc == 0 ? "this operation needs the admin bearer token"
                        : "operator writes are disabled (no admin token configured)");
}

int sl__auth_read(sl_server *s, sl__req *rq, sl__resp *rs)
{
    if (s->opt.public_status || sl__has_admin(s, rq))
        return 1;
    return deny(s, rq, rs, "this endpoint needs the admin bearer token");
}

int sl__rate_allow(sl_server *s, int64_t device, int64_t *retry_after_s)
{
    /* Direct-mapped buckets: a bounded table that never allocates. Two
     * devices sharing a slot reset each other's bucket, which only ever
     * errs towards letting requests through. */
    uint64_t h = (uint64_t)device * 0x9e3779b97f4a7c15ull;
    sl__bucket *b = &s->buckets[(h >> 40) % SL__BUCKETS];
    int64_t now = sl__mono_ns(s);
    int allowed;
    if (s->opt.device_rate <= 0)
        return 1;
    pthread_mutex_lock(&s->rate_lock);
    if (b->device != device) {
        b->device = device;
        b->tokens = s->opt.device_burst;
        b->last_ns = now;
    }
    if (now > b->last_ns) {
        b->tokens += (double)(now - b->last_ns) / 1e9 * s->opt.device_rate;
        if (b->tokens > s->opt.device_burst)
            b->tokens = s->opt.device_burst;
        b->last_ns = now;
    }
    allowed = b->tokens >= 1.0;
    if (allowed)
        b->tokens -= 1.0;
    else
        *retry_after_s = (int64_t)ceil((1.0 - b->tokens) / s->opt.device_rate);
    pthread_mutex_unlock(&s->rate_lock);
    if (!allowed && *retry_after_s < 1)
        *retry_after_s = 1;
    return allowed;
}
