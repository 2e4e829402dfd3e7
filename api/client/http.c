/*
 * http.c - one signed HTTP exchange through libcurl, and the small helpers
 * the client's other files share: the bottom of its layers (client.c, then
 * transfer.c, call down into it).
 *
 * Each attempt resets the easy handle and sets every option again, so no
 * option of one request leaks into the next, while the handle keeps its
 * connection cache (keep-alive and TLS session reuse on slow links).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client_int.h"

/* ---- small helpers shared with client.c and transfer.c (below them) ------------------------ */

int sl__text_ok(const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x20 || ch == 0x7f)
            return 0;
    }
    return 1;
}

void sl_client_response_free(sl_client_response *r)
{
    if (r == NULL)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
    r->upload_offset = -1;
    r->retry_after_s = -1;
    r->content_length = -1;
    r->model_version = -1;
}

int sl__parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* One exchange                                                             */
/* ------------------------------------------------------------------------ */

typedef struct xfer {
    sl_client_response *resp;
    size_t body_cap; /* allocated bytes of resp->body */
    size_t max_body;
    sl__sink *sink;
    int to_sink;  /* the current final response's body goes to the sink */
    int abort_rc; /* why a callback aborted the transfer */
} xfer;

static void keep_header(char *dst, const char *v, size_t n)
{
    if (n < SL_CLIENT_HEADER_MAX) {
        memcpy(dst, v, n);
        dst[n] = '\0';
    } else {
        dst[0] = '\0'; /* too long to be one of ours: treat as absent */
    }
}

static int name_is(const char *line, size_t name_len, const char *name)
{
    return strlen(name) == name_len && strncasecmp(line, name, name_len) == 0;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
    xfer *x = userdata;
    sl_client_response *r = x->resp;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
        /* A new response (an interim 1xx or the final one): start afresh. */
        uint8_t *body = r->body;
        memset(r, 0, sizeof *r);
        r->body = body;
        r->body_len = 0;
        r->upload_offset = -1;
        r->retry_after_s = -1;
        r->content_length = -1;
        r->model_version = -1;
        x->to_sink = 0;
        const char *sp = memchr(buf, ' ', n);
        if (sp != NULL && (size_t)(buf + n - sp) > 3) {
            uint64_t code = 0;
            if (sl__parse_u64(sp + 1, 3, &code) == 0)
                r->status = (long)code;
        }
        return n;
    }
    if ((n == 2 && buf[0] == '\r') || (n == 1 && buf[0] == '\n')) {
        if (r->status >= 200 && x->sink != NULL) {
            int rc = x->sink->headers(x->sink->ctx, r, &x->to_sink);
            if (rc != SL_OK) {
                x->abort_rc = rc;
                return 0;
            }
        }
        return n;
    }
    const char *colon = memchr(buf, ':', n);
    if (colon == NULL)
        return n;
    size_t name_len = (size_t)(colon - buf);
    const char *v = colon + 1;
    const char *end = buf + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t vlen = (size_t)(end - v);
    uint64_t num = 0;
    if (name_is(buf, name_len, "ETag"))
        keep_header(r->etag, v, vlen);
    else if (name_is(buf, name_len, "Location"))
        keep_header(r->location, v, vlen);
    else if (name_is(buf, name_len, "Content-Range"))
        keep_header(r->content_range, v, vlen);
    else if (name_is(buf, name_len, "Content-Type"))
        keep_header(r->content_type, v, vlen);
    else if (name_is(buf, name_len, "X-Request-Id"))
        keep_header(r->request_id, v, vlen);
    else if (name_is(buf, name_len, "Upload-Offset"))
        r->upload_offset =
            sl__parse_u64(v, vlen, &num) == 0 && num <= INT64_MAX ? (int64_t)num : -1;
    else if (name_is(buf, name_len, "Content-Length"))
        r->content_length =
            sl__parse_u64(v, vlen, &num) == 0 && num <= INT64_MAX ? (int64_t)num : -1;
    else if (name_is(buf, name_len, "X-Starling-Model-Version"))
        r->model_version =
            sl__parse_u64(v, vlen, &num) == 0 && num <= INT64_MAX ? (int64_t)num : -1;
    else if (name_is(buf, name_len, "Retry-After")) /* an HTTP-date is ignored */
        r->retry_after_s =
            sl__parse_u64(v, vlen, &num) == 0 && num <= INT64_MAX ? (int64_t)num : -1;
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    xfer *x = userdata;
    size_t n = size * nmemb;
    if (x->to_sink) {
        int rc = x->sink->write(x->sink->ctx, data, n);
        if (rc != SL_OK) {
            x->abort_rc = rc;
            return 0;
        }
        return n;
    }
    sl_client_response *r = x->resp;
    if (n > x->max_body - r->body_len) {
        x->abort_rc = SL_ETOOBIG;
        return 0;
    }
    if (r->body_len + n + 1 > x->body_cap) {
        size_t cap = x->body_cap < 4096 ? 4096 : x->body_cap;
        while (cap < r->body_len + n + 1)
            cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
        if (cap > x->max_body + 1)
            cap = x->max_body + 1;
        uint8_t *grown = realloc(r->body, cap);
        if (grown == NULL) {
            x->abort_rc = SL_ENOMEM;
            return 0;
        }
        r->body = grown;
        x->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return n;
}

static int status_retryable(long status)
{
    return status == 408 || status == 429 || (status >= 500 && status <= 599 && status != 501);
}

/* Maps a transfer failure; *@retryable says whether another attempt may help. */
static int map_curl_error(CURLcode cc, int *retryable)
{
    *retryable = 0;
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        *retryable = 1;
        return SL_ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        *retryable = 1;
        return SL_EIO;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED:
        return SL_EPERM;
    case CURLE_FILESIZE_EXCEEDED:
        return SL_ETOOBIG;
    case CURLE_OUT_OF_MEMORY:
        return SL_ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return SL_EINVAL;
    default:
        return SL_EIO;
    }
}

static int method_ok(const char *m)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(m, known[i]) == 0)
            return 1;
    }
    return 0;
}

static int path_ok(const char *p)
{
    if (p == NULL || p[0] != '/' || strlen(p) > SL__PATH_MAX)
        return 0;
    for (; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '#')
            return 0;
    }
    return 1;
}

/* Extra headers may not break lines or speak for the client's identity. */
static int extra_header_ok(const char *h)
{
    static const char *const reserved[] = {SL_HDR_DEVICE,    SL_HDR_TIMESTAMP, SL_HDR_NONCE,
                                           SL_HDR_SIGNATURE, SL_HDR_SESSION,   SL_HDR_MAC,
                                           "Authorization"};
    const char *colon = strchr(h, ':');
    if (colon == NULL || colon == h || !sl__text_ok(h))
        return 0;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        if (name_is(h, (size_t)(colon - h), reserved[i]))
            return 0;
    }
    return 1;
}

static int add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *next = curl_slist_append(*list, line);
    if (next == NULL)
        return SL_ENOMEM;
    *list = next;
    return SL_OK;
}

/* The signing headers of api_sign.h for this attempt (fresh nonce and time). */
static int add_signature(sl_client *c, const sl__request *rq, const uint8_t body_sha[32],
                         struct curl_slist **list)
{
    char signed_path[SL__URL_MAX + SL__PATH_MAX + 1];
    int n = snprintf(signed_path, sizeof signed_path, "%s%s", c->prefix, rq->path);
    if (n < 0 || (size_t)n >= sizeof signed_path)
        return SL_EINVAL;
    char nonce[33];
    int rc = sl_nonce_new(nonce, sizeof nonce);
    if (rc != SL_OK)
        return rc;
    int64_t ts = sl_clock_wall_ns(c->clock) / 1000000;
    char sig[SL_SIGNATURE_B64_MAX];
    rc = sl_sign_request(c->device_key, rq->method, signed_path, ts, nonce, body_sha, sig,
                         sizeof sig);
    if (rc != SL_OK)
        return rc;
    char line[SL_SIGNATURE_B64_MAX + 64];
    snprintf(line, sizeof line, "%s: %" PRId64, SL_HDR_DEVICE, c->device_id);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %" PRId64, SL_HDR_TIMESTAMP, ts);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %s", SL_HDR_NONCE, nonce);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %s", SL_HDR_SIGNATURE, sig);
    return add_header(list, line);
}

/* The session headers of api_sign.h for this attempt: the token and the HMAC. */
static int add_session_mac(sl_client *c, const sl__request *rq, const uint8_t body_sha[32],
                           struct curl_slist **list)
{
    char path[SL__URL_MAX + SL__PATH_MAX + 1], nonce[33], mac[SL_SESSION_MAC_B64_MAX];
    char line[SL_SESSION_TOKEN_MAX + 64];
    int n = snprintf(path, sizeof path, "%s%s", c->prefix, rq->path);
    int64_t ts = sl_clock_wall_ns(c->clock) / 1000000;
    int rc;
    if (n < 0 || (size_t)n >= sizeof path)
        return SL_EINVAL;
    if ((rc = sl_nonce_new(nonce, sizeof nonce)) != SL_OK ||
        (rc = sl_session_mac(c->sess_key, c->sess_token, rq->method, path, ts, nonce, body_sha, mac,
                             sizeof mac)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %" PRId64, SL_HDR_DEVICE, c->device_id);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %" PRId64, SL_HDR_TIMESTAMP, ts);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %s", SL_HDR_NONCE, nonce);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %s", SL_HDR_SESSION, c->sess_token);
    if ((rc = add_header(list, line)) != SL_OK)
        return rc;
    snprintf(line, sizeof line, "%s: %s", SL_HDR_MAC, mac);
    return add_header(list, line);
}

static int build_headers(sl_client *c, const sl__request *rq, const uint8_t body_sha[32],
                         struct curl_slist **out)
{
    struct curl_slist *list = NULL;
    int rc = add_header(&list, "Expect:"); /* no 100-continue round trip */
    char line[SL_CLIENT_HEADER_MAX + 32];
    int has_body = strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0;
    if (rc == SL_OK && rq->content_type != NULL) {
        snprintf(line, sizeof line, "Content-Type: %s", rq->content_type);
        rc = add_header(&list, line);
    } else if (rc == SL_OK && has_body) {
        /* libcurl would call a POST body a form otherwise. */
        rc = add_header(&list,
                        rq->len > 0 ? "Content-Type: application/octet-stream" : "Content-Type:");
    }
    for (size_t i = 0; rc == SL_OK && rq->headers != NULL && rq->headers[i] != NULL; i++)
        rc = add_header(&list, rq->headers[i]);
    if (rc == SL_OK && c->admin_token != NULL) {
        size_t need = strlen(c->admin_token) + 32;
        char *auth = malloc(need);
        if (auth == NULL) {
            rc = SL_ENOMEM;
        } else {
            snprintf(auth, need, "Authorization: Bearer %s", c->admin_token);
            rc = add_header(&list, auth);
            memset(auth, 0, need);
            free(auth);
        }
    }
    if (rc == SL_OK && c->device_key != NULL)
        rc = c->have_session && !rq->force_signature ? add_session_mac(c, rq, body_sha, &list)
                                                     : add_signature(c, rq, body_sha, &list);
    if (rc != SL_OK) {
        curl_slist_free_all(list);
        return rc;
    }
    *out = list;
    return SL_OK;
}

#define SETOPT(opt, val)                        \
    do {                                        \
        if (cc == CURLE_OK)                     \
            cc = curl_easy_setopt(h, opt, val); \
    } while (0)

static int attempt_once(sl_client *c, const sl__request *rq, sl_client_response *resp,
                        int *retryable)
{
    *retryable = 0;
    int bodiless = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0;
    if (!method_ok(rq->method) || !path_ok(rq->path) || (rq->body == NULL && rq->len > 0) ||
        (bodiless && rq->len > 0) || (rq->content_type != NULL && !sl__text_ok(rq->content_type)) ||
        (rq->content_type != NULL && strlen(rq->content_type) > SL_CLIENT_HEADER_MAX))
        return SL_EINVAL;
    for (size_t i = 0; rq->headers != NULL && rq->headers[i] != NULL; i++) {
        if (!extra_header_ok(rq->headers[i]))
            return SL_EINVAL;
    }
    char url[SL__URL_MAX + SL__PATH_MAX + 1];
    int n = snprintf(url, sizeof url, "%s%s", c->base_url, rq->path);
    if (n < 0 || (size_t)n >= sizeof url)
        return SL_EINVAL;
    uint8_t body_sha[32];
    sl_sha256(rq->body, rq->len, body_sha);
    struct curl_slist *headers = NULL;
    int rc = build_headers(c, rq, body_sha, &headers);
    if (rc != SL_OK)
        return rc;

    sl_client_response r;
    memset(&r, 0, sizeof r);
    r.upload_offset = -1;
    r.retry_after_s = -1;
    r.content_length = -1;
    r.model_version = -1;
    xfer x = {.resp = &r,
              .max_body = rq->max_body > 0 ? rq->max_body : c->max_response_bytes,
              .sink = rq->sink};
    int is_head = strcmp(rq->method, "HEAD") == 0;
    CURL *h = c->curl;
    CURLcode cc = CURLE_OK;
    curl_easy_reset(h);
    SETOPT(CURLOPT_URL, url);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    SETOPT(CURLOPT_TIMEOUT_MS, c->request_timeout_ms);
    SETOPT(CURLOPT_LOW_SPEED_LIMIT, c->low_speed_limit);
    SETOPT(CURLOPT_LOW_SPEED_TIME, c->low_speed_time_s);
    SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(CURLOPT_USERAGENT, c->user_agent);
    if (c->ca_file != NULL)
        SETOPT(CURLOPT_CAINFO, c->ca_file);
    if (c->pinned_pubkey != NULL)
        SETOPT(CURLOPT_PINNEDPUBLICKEY, c->pinned_pubkey);
    SETOPT(CURLOPT_HTTPHEADER, headers);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, &x);
    SETOPT(CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(CURLOPT_WRITEDATA, &x);
    /* The path goes on the wire as signed: no removal of dot segments. */
    SETOPT(CURLOPT_PATH_AS_IS, 1L);
    size_t max_file = rq->sink != NULL ? c->max_download_bytes : x.max_body;
    if (!is_head)
        SETOPT(CURLOPT_MAXFILESIZE_LARGE,
               (curl_off_t)(max_file < (size_t)INT64_MAX ? max_file : (size_t)INT64_MAX));
    if (is_head) {
        SETOPT(CURLOPT_NOBODY, 1L);
    } else if (strcmp(rq->method, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(rq->method, "DELETE") == 0 && rq->len == 0) {
        SETOPT(CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
        SETOPT(CURLOPT_POST, 1L);
        SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
        SETOPT(CURLOPT_POSTFIELDS, rq->len > 0 ? (const char *)rq->body : "");
        if (strcmp(rq->method, "POST") != 0)
            SETOPT(CURLOPT_CUSTOMREQUEST, rq->method);
    }
    if (cc != CURLE_OK) {
        curl_slist_free_all(headers);
        return cc == CURLE_OUT_OF_MEMORY ? SL_ENOMEM : SL_EINVAL;
    }
    cc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    if (cc != CURLE_OK) {
        rc = x.abort_rc != SL_OK ? x.abort_rc : map_curl_error(cc, retryable);
        if (x.abort_rc != SL_OK)
            *retryable = 0;
        sl_log(SL_LOG_DEBUG, "client", "%s %s: %s (%s)", rq->method, rq->path,
               curl_easy_strerror(cc), sl_errname(rc));
        free(r.body);
        return rc;
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (r.status == 0 ||
        (!is_head && !x.to_sink && code != 204 && code != 304 && r.content_length >= 0 &&
         (uint64_t)r.content_length != (uint64_t)r.body_len)) {
        /* no status line seen, or a body other than the one announced, yet libcurl said
         * done (seen under a link cut at random: HTTP 206 with an empty body; curl issue
         * 2801 reports such an OK after a kept-alive connection died): a transport failure,
         * tried again like one, never an answer */
        sl_log(SL_LOG_WARN, "client", "%s %s: HTTP %ld with %zu of %lld body bytes%s", rq->method,
               rq->path, code, r.body_len, (long long)r.content_length,
               r.status == 0 ? " and no status line" : "");
        free(r.body);
        *retryable = 1;
        return SL_EIO;
    }
    r.status = code;
    *retryable = status_retryable(code);
    *resp = r;
    return SL_OK;
}

/* A 401 whose problem type is "replayed": the coordinator had this nonce already. */
static int replayed(const sl_client_response *r)
{
    return r->status == 401 && r->body != NULL &&
           memmem(r->body, r->body_len, "/problems/replayed\"", 19) != NULL;
}

int sl__client_attempt(sl_client *c, const sl__request *rq, sl_client_response *resp,
                       int *retryable)
{
    int rc = attempt_once(c, rq, resp, retryable);
    if (rc == SL_OK && replayed(resp) && rq->sink == NULL) {
        /* libcurl resends a request as it was when a kept-alive connection dies before an
         * answer; if the first copy had arrived, the resent one is a replay to the
         * coordinator. Signed afresh (a new nonce and time), it goes once more: what the
         * first copy did the coordinator answers idempotently (a receipt, the same
         * assignment, the same bytes). */
        sl_log(SL_LOG_INFO, "client",
               "%s %s: the coordinator had this request's nonce (resent "
               "on a dead connection?); signing it afresh",
               rq->method, rq->path);
        sl_client_response_free(resp);
        rc = attempt_once(c, rq, resp, retryable);
    }
    return rc;
}
