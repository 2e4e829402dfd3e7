/*
 * sessions.c - device sessions (issue #20): a device proves its identity
 * with its enrolled ECDSA key once (a signed POST /v1/sessions) and receives
 * a session token and key; its later requests carry an HMAC-SHA256 under
 * that key (api_sign.h). The key is derived from the coordinator's secret
 * of the token's epoch (HKDF), so checking a request needs no storage read:
 * the token, the secret, the MAC, the expiry, the revoked set, the replay
 * cache.
 *
 * Threat model (also in api/openapi.yaml): an attacker on the network sees
 * tokens and MACs but not keys (TLS; the key travels once, in the answer to
 * the signed session request); a MAC binds the method, path and query,
 * timestamp, nonce and body digest, so a captured request cannot be altered,
 * and the nonce cache refuses its replay within the timestamp window; a
 * token altered in any field (device, expiry, epoch, id) derives another
 * key; a session names its device, and a request under it for another
 * device is refused; an operator who revokes a session, or all of a
 * device's, is obeyed at the next request; rotating the secret keeps the
 * previous epoch's sessions valid until they expire, and no older ones.
 * Not covered: a device whose key file is stolen (revoke it), a coordinator
 * whose database is stolen (the secrets are in it: rotate twice).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <mbedtls/platform_util.h>

#include "server_int.h"

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, 33);
}

/* Add @id to the sorted revoked set (under sess_lock, written). */
static int revoked_add(sl_server *s, const char *id)
{
    size_t lo = 0, hi = s->nrevoked;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = memcmp(s->revoked[mid], id, 33);
        if (c == 0)
            return SL_OK;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (s->nrevoked == s->caprevoked) {
        size_t nc = s->caprevoked ? s->caprevoked * 2 : 64;
        char(*grown)[33] = realloc(s->revoked, nc * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        s->revoked = grown;
        s->caprevoked = nc;
    }
    memmove(s->revoked + lo + 1, s->revoked + lo, (s->nrevoked - lo) * sizeof *s->revoked);
    memset(s->revoked[lo], 0, 33);
    memcpy(s->revoked[lo], id, 32);
    s->nrevoked++;
    return SL_OK;
}

static int load_revoked(void *ctx, const sl_store_session *r)
{
    sl_server *s = ctx;
    return r->revoked_at_ms > 0 ? revoked_add(s, r->id) : 0;
}

int sl__sessions_init(sl_server *s, char *err, size_t errcap)
{
    int rc = sl_store_session_secret(s->store, 0, &s->sess_epoch, s->sess_secret);
    if (rc == SL_OK && s->sess_epoch > 1) {
        rc = sl_store_session_secret_of(s->store, s->sess_epoch - 1, s->sess_prev_secret);
        s->sess_have_prev = rc == SL_OK;
        rc = rc == SL_ENOENT ? SL_OK : rc;
    }
    if (rc == SL_OK)
        rc = sl_store_list_sessions(s->store, 0, sl__wall_ms(s), load_revoked, s);
    if (rc != SL_OK)
        snprintf(err, errcap, "device sessions: %s", sl_strerror(rc));
    return rc;
}

void sl__sessions_free(sl_server *s)
{
    mbedtls_platform_zeroize(s->sess_secret, sizeof s->sess_secret);
    mbedtls_platform_zeroize(s->sess_prev_secret, sizeof s->sess_prev_secret);
    free(s->revoked);
    s->revoked = NULL;
    s->nrevoked = s->caprevoked = 0;
}

/* The key of @token (its epoch, the current or the previous one); SL_ENOENT otherwise. */
static int key_of(sl_server *s, const char *token, uint32_t epoch, uint8_t key[32])
{
    uint8_t secret[SL_SESSION_SECRET_LEN];
    int rc = SL_ENOENT;
    pthread_rwlock_rdlock(&s->sess_lock);
    if (epoch == s->sess_epoch) {
        memcpy(secret, s->sess_secret, sizeof secret);
        rc = SL_OK;
    } else if (s->sess_have_prev && epoch + 1 == s->sess_epoch) {
        memcpy(secret, s->sess_prev_secret, sizeof secret);
        rc = SL_OK;
    }
    pthread_rwlock_unlock(&s->sess_lock);
    if (rc == SL_OK)
        rc = sl_session_key(secret, token, key);
    mbedtls_platform_zeroize(secret, sizeof secret);
    return rc;
}

static int is_revoked(sl_server *s, const sl_session *t)
{
    char id[33];
    int hit;
    sl_hex(t->id, SL_SESSION_ID_LEN, id);
    pthread_rwlock_rdlock(&s->sess_lock);
    hit = s->nrevoked > 0 && bsearch(id, s->revoked, s->nrevoked, 33, cmp_id) != NULL;
    pthread_rwlock_unlock(&s->sess_lock);
    return hit;
}

/* 401 with a problem type the agent acts on: it opens a new session. */
static int deny_session(sl_server *s, sl__req *rq, sl__resp *rs, const char *type, const char *why)
{
    sl__metrics_count(&s->metrics, &s->metrics.auth_failures, 1);
    sl__problem(rs, rq, 401, type, NULL, "%s", why);
    return 0;
}

int sl__auth_session(sl_server *s, sl__req *rq, sl__resp *rs, int64_t device, int64_t stamp,
                     const char *nonce)
{
    const char *token = sl__req_header(rq, SL_HDR_SESSION);
    const char *mac = sl__req_header(rq, SL_HDR_MAC);
    sl_session t;
    uint8_t key[SL_SESSION_KEY_LEN], digest[32];
    int64_t now = sl__wall_ms(s);
    int rc;
    if (mac == NULL)
        return deny_session(s, rq, rs, "unauthorized",
                            "a request under a session carries " SL_HDR_MAC);
    if (sl_session_parse(token, &t) != SL_OK)
        return deny_session(s, rq, rs, "session-invalid", "malformed session token");
    if (t.device_id != device)
        return deny_session(s, rq, rs, "session-invalid", "the session belongs to another device");
    if (t.expires_ms <= now)
        return deny_session(s, rq, rs, "session-expired", "the session expired");
    if (key_of(s, token, t.epoch, key) != SL_OK)
        return deny_session(s, rq, rs, "session-expired",
                            "the session's epoch is no longer accepted (the secret rotated)");
    sl_sha256(rq->body_len ? (const void *)rq->body : "", rq->body_len, digest);
    memcpy(rq->body_sha256, digest, sizeof digest);
    rq->body_sha_known = 1;
    rc = sl_session_verify(key, token, rq->method, rq->target, stamp, nonce, digest, mac);
    mbedtls_platform_zeroize(key, sizeof key);
    if (rc != SL_OK)
        return deny_session(s, rq, rs, "unauthorized", "the session MAC does not verify");
    if (is_revoked(s, &t))
        return deny_session(s, rq, rs, "session-revoked", "the session was revoked");
    rq->via_session = 1;
    return 1;
}

/* ---- POST /v1/sessions ------------------------------------------------------------------ */

void sl__h_session_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl_session t;
    sl_store_session rec;
    char token[SL_SESSION_TOKEN_MAX], key_b64[64];
    uint8_t key[SL_SESSION_KEY_LEN];
    int64_t now = sl__wall_ms(s);
    cJSON *out;
    int rc;
    (void)p;
    if (rq->via_session) {
        /* a session opens with the device's own key, never with another session */
        sl__problem(rs, rq, 401, "unauthorized", NULL,
                    "a session is opened with a request signed by the device's key");
        return;
    }
    memset(&t, 0, sizeof t);
    t.device_id = rq->device_id;
    t.expires_ms = now + s->opt.session_ttl_ms;
    if (getrandom(t.id, sizeof t.id, 0) != (ssize_t)sizeof t.id) {
        sl__problem_status(rs, rq, SL_EIO, "opening a session");
        return;
    }
    pthread_rwlock_rdlock(&s->sess_lock);
    t.epoch = s->sess_epoch;
    pthread_rwlock_unlock(&s->sess_lock);
    rc = sl_session_token(&t, token, sizeof token);
    if (rc == SL_OK)
        rc = key_of(s, token, t.epoch, key);
    if (rc == SL_OK) {
        memset(&rec, 0, sizeof rec);
        sl_hex(t.id, SL_SESSION_ID_LEN, rec.id);
        rec.device_id = t.device_id;
        rec.epoch = t.epoch;
        rec.issued_at_ms = now;
        rec.expires_at_ms = t.expires_ms;
        rc = sl_store_put_session(s->store, &rec);
    }
    if (rc == SL_OK)
        rc = sl_base64_encode(key, sizeof key, key_b64, sizeof key_b64);
    mbedtls_platform_zeroize(key, sizeof key);
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "opening a session");
        return;
    }
    out = cJSON_CreateObject();
    if (out == NULL || cJSON_AddStringToObject(out, "token", token) == NULL ||
        cJSON_AddStringToObject(out, "key", key_b64) == NULL ||
        cJSON_AddNumberToObject(out, "expires_at_ms", (double)t.expires_ms) == NULL ||
        cJSON_AddNumberToObject(out, "epoch", t.epoch) == NULL) {
        cJSON_Delete(out);
        mbedtls_platform_zeroize(key_b64, sizeof key_b64);
        sl__problem_status(rs, rq, SL_ENOMEM, "opening a session");
        return;
    }
    mbedtls_platform_zeroize(key_b64, sizeof key_b64);
    sl__resp_header(rs, "Cache-Control", "no-store");
    sl__resp_json(rs, 201, out);
}

/* ---- operators: list, revoke, rotate ------------------------------------------------------ */

static int add_session(void *ctx, const sl_store_session *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddItemToArray(ctx, o))
        return SL_ENOMEM;
    if (cJSON_AddStringToObject(o, "session_id", r->id) == NULL ||
        cJSON_AddNumberToObject(o, "epoch", r->epoch) == NULL ||
        cJSON_AddNumberToObject(o, "issued_at_ms", (double)r->issued_at_ms) == NULL ||
        cJSON_AddNumberToObject(o, "expires_at_ms", (double)r->expires_at_ms) == NULL ||
        (r->revoked_at_ms > 0
             ? cJSON_AddNumberToObject(o, "revoked_at_ms", (double)r->revoked_at_ms) == NULL
             : cJSON_AddNullToObject(o, "revoked_at_ms") == NULL))
        return SL_ENOMEM;
    return 0;
}

static int device_of(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs, int64_t *id)
{
    sl_device_record *rec = malloc(sizeof *rec);
    int rc;
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, id) != SL_OK) {
        free(rec);
        sl__problem(rs, rq, 404, "not-found", NULL, "no device %s", p->seg[0]);
        return 0;
    }
    rc = rec != NULL ? sl_store_get_device(s->store, *id, rec) : SL_ENOMEM;
    free(rec);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no device %lld", (long long)*id);
        return 0;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the device");
        return 0;
    }
    return 1;
}

/* GET /v1/devices/{id}/sessions: its live sessions (revoked ones too, until they expire). */
void sl__h_sessions_list(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    int64_t id;
    cJSON *out, *list;
    int rc;
    if (!device_of(s, rq, p, rs, &id))
        return;
    out = cJSON_CreateObject();
    list = out != NULL ? cJSON_AddArrayToObject(out, "sessions") : NULL;
    rc = list != NULL ? sl_store_list_sessions(s->store, id, sl__wall_ms(s), add_session, list)
                      : SL_ENOMEM;
    if (rc != SL_OK) {
        cJSON_Delete(out);
        sl__problem_status(rs, rq, rc, "listing the sessions");
        return;
    }
    cJSON_AddNumberToObject(out, "device_id", (double)id);
    sl__resp_json(rs, 200, out);
}

typedef struct revoke_ctx {
    sl_server *s;
    const char *only;
    int failed;
} revoke_ctx;

static int mark_revoked(void *ctx, const sl_store_session *r)
{
    revoke_ctx *c = ctx;
    if (c->only != NULL && strcmp(c->only, r->id) != 0)
        return 0;
    if (revoked_add(c->s, r->id) != SL_OK)
        c->failed = 1;
    return 0;
}

/* DELETE /v1/devices/{id}/sessions[?session=ID]: revoked now; its next request is refused. */
void sl__h_sessions_revoke(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    char only[40], detail[96];
    uint64_t count = 0;
    int64_t id;
    revoke_ctx ctx = {s, NULL, 0};
    cJSON *out;
    int rc, q;
    if (!device_of(s, rq, p, rs, &id))
        return;
    q = sl__query_get(rq->query, "session", only, sizeof only);
    if (q < 0 || (q == 1 && strlen(only) != 32)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "?session= names one session id");
        return;
    }
    ctx.only = q == 1 ? only : NULL;
    rc = sl_store_revoke_sessions(s->store, id, ctx.only, &count);
    if (rc == SL_OK) {
        /* durable first, then obeyed: the in-memory set takes every revoked live session */
        pthread_rwlock_wrlock(&s->sess_lock);
        rc = sl_store_list_sessions(s->store, id, sl__wall_ms(s), mark_revoked, &ctx);
        pthread_rwlock_unlock(&s->sess_lock);
        if (rc == SL_OK && ctx.failed)
            rc = SL_ENOMEM;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "revoking sessions");
        return;
    }
    snprintf(detail, sizeof detail, "device %lld: %llu session(s)%s%s", (long long)id,
             (unsigned long long)count, ctx.only ? " " : "", ctx.only ? ctx.only : "");
    sl_store_audit(s->store, "admin", "revoke-sessions", detail);
    out = cJSON_CreateObject();
    if (out != NULL) {
        cJSON_AddNumberToObject(out, "device_id", (double)id);
        cJSON_AddNumberToObject(out, "revoked", (double)count);
    }
    sl__resp_json(rs, 200, out);
}

/* POST /v1/devices/{id}/disable and /enable: a disabled device's sessions are revoked (its next
 * request under one is refused) and its signed requests are refused, a new session included,
 * until it is enabled. */
static void set_disabled(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs, int disabled)
{
    char detail[64];
    int64_t id;
    uint64_t count = 0;
    revoke_ctx ctx = {s, NULL, 0};
    cJSON *out;
    int rc;
    if (!device_of(s, rq, p, rs, &id))
        return;
    rc = sl_store_set_device_disabled(s->store, id, disabled);
    if (rc == SL_OK && disabled)
        rc = sl_store_revoke_sessions(s->store, id, NULL, &count);
    if (rc == SL_OK && disabled) {
        pthread_rwlock_wrlock(&s->sess_lock);
        rc = sl_store_list_sessions(s->store, id, sl__wall_ms(s), mark_revoked, &ctx);
        pthread_rwlock_unlock(&s->sess_lock);
        if (rc == SL_OK && ctx.failed)
            rc = SL_ENOMEM;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, disabled ? "disabling the device" : "enabling the device");
        return;
    }
    snprintf(detail, sizeof detail, "device %lld", (long long)id);
    sl_store_audit(s->store, "admin", disabled ? "disable-device" : "enable-device", detail);
    out = cJSON_CreateObject();
    if (out != NULL) {
        cJSON_AddNumberToObject(out, "device_id", (double)id);
        cJSON_AddStringToObject(out, "state", disabled ? "disabled" : "active");
        cJSON_AddNumberToObject(out, "sessions_revoked", (double)count);
    }
    sl__resp_json(rs, 200, out);
}

void sl__h_device_disable(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    set_disabled(s, rq, p, rs, 1);
}

void sl__h_device_enable(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    set_disabled(s, rq, p, rs, 0);
}

/* POST /v1/sessions/rotate: a new secret; the previous epoch's sessions stay valid, older
 * ones end. */
void sl__h_sessions_rotate(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    uint8_t secret[SL_SESSION_SECRET_LEN];
    uint32_t epoch;
    cJSON *out;
    int rc;
    (void)p;
    rc = sl_store_session_secret(s->store, 1, &epoch, secret);
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "rotating the session secret");
        return;
    }
    pthread_rwlock_wrlock(&s->sess_lock);
    memcpy(s->sess_prev_secret, s->sess_secret, sizeof secret);
    s->sess_have_prev = s->sess_epoch + 1 == epoch;
    memcpy(s->sess_secret, secret, sizeof secret);
    s->sess_epoch = epoch;
    pthread_rwlock_unlock(&s->sess_lock);
    mbedtls_platform_zeroize(secret, sizeof secret);
    sl_store_audit(s->store, "admin", "rotate-session-secret", "");
    out = cJSON_CreateObject();
    if (out != NULL)
        cJSON_AddNumberToObject(out, "epoch", epoch);
    sl__resp_json(rs, 200, out);
}
