/*
 * client.c - the libcurl client: creation, options, the retry policy.
 * One exchange on the wire is in http.c, the resumable helpers in transfer.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "client_int.h"

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void sleep_real(void *ctx, int64_t ms)
{
    (void)ctx;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int copy_opt(const char *in, char **out)
{
    *out = NULL;
    if (in == NULL)
        return SL_OK;
    if (!sl__text_ok(in))
        return SL_EINVAL;
    *out = strdup(in);
    return *out == NULL ? SL_ENOMEM : SL_OK;
}

/* Checks the base URL and finds its path prefix. */
static int parse_base_url(const char *url, const char **prefix)
{
    size_t scheme;
    if (strncmp(url, "https://", 8) == 0)
        scheme = 8;
    else if (strncmp(url, "http://", 7) == 0)
        scheme = 7;
    else
        return SL_EINVAL;
    if (url[scheme] == '\0' || url[scheme] == '/' || strlen(url) > SL__URL_MAX)
        return SL_EINVAL;
    for (const char *p = url; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#')
            return SL_EINVAL;
    }
    const char *slash = strchr(url + scheme, '/');
    *prefix = slash != NULL ? slash : url + strlen(url);
    return SL_OK;
}

static uint64_t seed_from_system(void)
{
    uint64_t seed = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
    return seed;
}

#define DEFAULT(v, d) ((v) > 0 ? (v) : (d))

int sl_client_create(const sl_client_options *o, sl_client **out)
{
    if (o == NULL || out == NULL || o->base_url == NULL)
        return SL_EINVAL;
    if (o->connect_timeout_ms < 0 || o->request_timeout_ms < 0 || o->low_speed_limit < 0 ||
        o->low_speed_time_s < 0 || o->retry_base_ms < 0 || o->retry_cap_ms < 0 ||
        o->retry_after_cap_ms < 0 || (o->device_key != NULL && o->device_id <= 0))
        return SL_EINVAL;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return SL_EIO;

    sl_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return SL_ENOMEM;
    int rc = SL_ENOMEM;
    c->base_url = strdup(o->base_url);
    if (c->base_url == NULL)
        goto fail;
    size_t n = strlen(c->base_url);
    while (n > 0 && c->base_url[n - 1] == '/')
        c->base_url[--n] = '\0';
    rc = parse_base_url(c->base_url, &c->prefix);
    if (rc != SL_OK)
        goto fail;
    if ((rc = copy_opt(o->ca_file, &c->ca_file)) != SL_OK ||
        (rc = copy_opt(o->pinned_pubkey, &c->pinned_pubkey)) != SL_OK ||
        (rc = copy_opt(o->admin_token, &c->admin_token)) != SL_OK ||
        (rc = copy_opt(o->user_agent != NULL ? o->user_agent : "starling-client/0.1",
                       &c->user_agent)) != SL_OK)
        goto fail;
    c->curl = curl_easy_init();
    if (c->curl == NULL) {
        rc = SL_EIO;
        goto fail;
    }
    c->device_id = o->device_id;
    c->device_key = o->device_key;
    c->use_sessions = o->use_sessions && o->device_key != NULL;
    c->clock = o->clock;
    c->sleep = o->sleep != NULL ? o->sleep : sleep_real;
    c->sleep_ctx = o->sleep_ctx;
    c->rng = o->random_seed != 0 ? o->random_seed : seed_from_system();
    if (c->rng == 0)
        c->rng = 0x2545F4914F6CDD1DULL;
    c->connect_timeout_ms = (long)DEFAULT(o->connect_timeout_ms, 10000);
    c->request_timeout_ms = (long)DEFAULT(o->request_timeout_ms, 120000);
    c->low_speed_limit = DEFAULT(o->low_speed_limit, 16);
    c->low_speed_time_s = DEFAULT(o->low_speed_time_s, 30);
    c->max_attempts = DEFAULT(o->max_attempts, 5u);
    c->retry_base_ms = DEFAULT(o->retry_base_ms, 500);
    c->retry_cap_ms = DEFAULT(o->retry_cap_ms, 30000);
    c->retry_after_cap_ms = DEFAULT(o->retry_after_cap_ms, 300000);
    c->max_response_bytes = DEFAULT(o->max_response_bytes, (size_t)16 << 20);
    c->max_download_bytes = DEFAULT(o->max_download_bytes, (size_t)1 << 30);
    c->upload_chunk_bytes = DEFAULT(o->upload_chunk_bytes, (size_t)256 << 10);
    *out = c;
    return SL_OK;
fail:
    sl_client_free(c);
    return rc;
}

void sl_client_free(sl_client *c)
{
    if (c == NULL)
        return;
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    if (c->admin_token != NULL) {
        volatile char *t = c->admin_token;
        while (*t != '\0')
            *t++ = '\0';
    }
    free(c->base_url);
    free(c->ca_file);
    free(c->pinned_pubkey);
    free(c->user_agent);
    free(c->admin_token);
    free(c);
}

unsigned sl__client_max_attempts(const sl_client *c)
{
    return c->max_attempts;
}

size_t sl__client_chunk(const sl_client *c)
{
    return c->upload_chunk_bytes;
}

size_t sl__client_max_download(const sl_client *c)
{
    return c->max_download_bytes;
}

/* ------------------------------------------------------------------------ */
/* Retries                                                                  */
/* ------------------------------------------------------------------------ */

static uint64_t next_random(sl_client *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void sl__client_backoff(sl_client *c, unsigned failures, int64_t retry_after_s)
{
    int64_t delay;
    if (retry_after_s >= 0) {
        delay = retry_after_s > c->retry_after_cap_ms / 1000 ? c->retry_after_cap_ms
                                                             : retry_after_s * 1000;
    } else {
        /* Full jitter: uniform in [0, min(cap, base * 2^(failures-1))]. */
        int64_t ceiling = c->retry_base_ms;
        for (unsigned i = 1; i < failures && ceiling < c->retry_cap_ms; i++)
            ceiling *= 2;
        if (ceiling > c->retry_cap_ms)
            ceiling = c->retry_cap_ms;
        delay = (int64_t)(next_random(c) % ((uint64_t)ceiling + 1));
    }
    c->sleep(c->sleep_ctx, delay);
}

/* ---- device sessions ------------------------------------------------------------------ */

#define SESSION_MARGIN_MS 60000 /* renew this long before the session expires */

/* Open a session with one signed POST /v1/sessions; on any failure, requests stay signed. */
static void open_session(sl_client *c)
{
    sl__request rq = {.method = "POST", .path = "/v1/sessions", .force_signature = 1};
    sl_client_response r;
    cJSON *doc = NULL;
    const cJSON *token, *key, *exp;
    size_t len = 0;
    int retryable = 0;
    c->have_session = 0;
    if (sl__client_attempt(c, &rq, &r, &retryable) != SL_OK)
        return;
    if (r.status == 201)
        doc = cJSON_ParseWithLength((const char *)r.body, r.body_len);
    token = cJSON_GetObjectItemCaseSensitive(doc, "token");
    key = cJSON_GetObjectItemCaseSensitive(doc, "key");
    exp = cJSON_GetObjectItemCaseSensitive(doc, "expires_at_ms");
    if (cJSON_IsString(token) && cJSON_IsString(key) && cJSON_IsNumber(exp) &&
        strlen(token->valuestring) < sizeof c->sess_token &&
        sl_base64_decode(key->valuestring, c->sess_key, sizeof c->sess_key, &len) == SL_OK &&
        len == sizeof c->sess_key) {
        snprintf(c->sess_token, sizeof c->sess_token, "%s", token->valuestring);
        c->sess_expires_ms = (int64_t)exp->valuedouble;
        c->have_session = 1;
        c->sessions_opened++;
    } else {
        sl_log(SL_LOG_INFO, "client", "no session (HTTP %ld): requests stay signed", r.status);
    }
    if (key != NULL && cJSON_IsString(key))
        memset(key->valuestring, 0, strlen(key->valuestring));
    cJSON_Delete(doc);
    if (r.body != NULL)
        memset(r.body, 0, r.body_len);
    sl_client_response_free(&r);
}

/* A session fresh enough for the next request, opened or renewed when it is not. */
static void ensure_session(sl_client *c, const sl__request *rq)
{
    int64_t now = sl_clock_wall_ns(c->clock) / 1000000;
    if (!c->use_sessions || rq->force_signature)
        return;
    if (!c->have_session || now >= c->sess_expires_ms - SESSION_MARGIN_MS)
        open_session(c);
}

/* A 401 whose problem type says the session ended (expired, revoked, an epoch retired). */
static int session_ended(const sl_client_response *r)
{
    return r->status == 401 && r->body != NULL &&
           (memmem(r->body, r->body_len, "session-expired", 15) != NULL ||
            memmem(r->body, r->body_len, "session-revoked", 15) != NULL ||
            memmem(r->body, r->body_len, "session-invalid", 15) != NULL);
}

void sl_client_drop_session(sl_client *c)
{
    if (c == NULL)
        return;
    c->have_session = 0;
    memset(c->sess_key, 0, sizeof c->sess_key);
}

uint64_t sl_client_sessions_opened(const sl_client *c)
{
    return c != NULL ? c->sessions_opened : 0;
}

int sl__client_send(sl_client *c, const sl__request *rq, sl_client_response *out)
{
    int renewed = 0;
    for (unsigned attempt = 1;; attempt++) {
        sl_client_response r;
        int retryable = 0, rc, last;
        ensure_session(c, rq);
        rc = sl__client_attempt(c, rq, &r, &retryable);
        if (rc == SL_OK && c->have_session && !renewed && session_ended(&r)) {
            /* once per request: a new session, and the same request again at once */
            sl_log(SL_LOG_INFO, "client", "%s %s: the session ended; opening a new one", rq->method,
                   rq->path);
            sl_client_response_free(&r);
            sl_client_drop_session(c);
            renewed = 1;
            attempt--;
            continue;
        }
        last = attempt >= c->max_attempts;
        if (!retryable || last) {
            if (rc == SL_OK) {
                r.attempts = attempt;
                *out = r;
            }
            return rc;
        }
        int64_t retry_after = rc == SL_OK ? r.retry_after_s : -1;
        if (rc == SL_OK) {
            sl_log(SL_LOG_INFO, "client", "%s %s: HTTP %ld, retry %u of %u", rq->method, rq->path,
                   r.status, attempt, c->max_attempts - 1);
            sl_client_response_free(&r);
        } else {
            sl_log(SL_LOG_INFO, "client", "%s %s: %s, retry %u of %u", rq->method, rq->path,
                   sl_strerror(rc), attempt, c->max_attempts - 1);
        }
        sl__client_backoff(c, attempt, retry_after);
    }
}

int sl_client_request(sl_client *c, const char *method, const char *path, const void *body,
                      size_t len, const char *content_type, const char *const *headers,
                      sl_client_response *out)
{
    if (c == NULL || method == NULL || path == NULL || out == NULL)
        return SL_EINVAL;
    sl__request rq = {.method = method,
                      .path = path,
                      .body = body,
                      .len = len,
                      .content_type = content_type,
                      .headers = headers};
    return sl__client_send(c, &rq, out);
}
