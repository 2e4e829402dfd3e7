/* bench_api_load.c - the clients of `starling bench api`: see bench_api_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "bench_api_int.h"

void sl__bench_api_samples_add(samples *s, int64_t ns)
{
    pthread_mutex_lock(&s->lock);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        int64_t *grown = realloc(s->ns, cap * sizeof *grown);
        if (grown == NULL)
            abort();
        s->ns = grown;
        s->cap = cap;
    }
    s->ns[s->n++] = ns;
    pthread_mutex_unlock(&s->lock);
}

/* ---- clients: one job per connection, driven by a multi handle --------------------- */

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    job *j = ctx;
    size_t add = size * n;
    if (j->resp_len + add <= BENCH_RESP_MAX) {
        memcpy(j->resp + j->resp_len, p, add);
        j->resp_len += add;
    }
    return add;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    job *j = ctx;
    size_t len = size * n;
    if (len > 10 && strncasecmp(p, "Location: ", 10) == 0) {
        size_t v = len - 10;
        while (v > 0 && (p[10 + v - 1] == '\r' || p[10 + v - 1] == '\n'))
            v--;
        if (v < sizeof j->location) {
            memcpy(j->location, p + 10, v);
            j->location[v] = '\0';
        }
    }
    return len;
}

/* The five session headers of a device request (its session's HMAC). */
static void session_mac(job *j, const char *method, const char *path, const uint8_t *body_sha)
{
    char nonce[48], mac[SL_SESSION_MAC_B64_MAX], line[300];
    int64_t ts = sl_clock_wall_ns(NULL) / 1000000;
    if (sl_nonce_new(nonce, sizeof nonce) != SL_OK ||
        sl_session_mac(j->b->skeys[j->dev], j->b->tokens[j->dev], method, path, ts, nonce, body_sha,
                       mac, sizeof mac) != SL_OK)
        abort();
    snprintf(line, sizeof line, SL_HDR_DEVICE ": %lld", (long long)j->b->ids[j->dev]);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_TIMESTAMP ": %lld", (long long)ts);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_NONCE ": %s", nonce);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_SESSION ": %s", j->b->tokens[j->dev]);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_MAC ": %s", mac);
    j->hdrs = curl_slist_append(j->hdrs, line);
}

/* The four signature headers of a device request (or, with sessions, the session's). */
static void sign(job *j, const char *method, const char *path, const uint8_t *body_sha)
{
    char nonce[48], sig[SL_SIGNATURE_B64_MAX], line[300];
    int64_t ts = sl_clock_wall_ns(NULL) / 1000000;
    if (j->b->auth == AUTH_SESSION) {
        session_mac(j, method, path, body_sha);
        return;
    }
    if (j->b->auth == AUTH_NONE) { /* the open server takes the device at its word */
        snprintf(line, sizeof line, SL_HDR_DEVICE ": %lld", (long long)j->b->ids[j->dev]);
        j->hdrs = curl_slist_append(j->hdrs, line);
        return;
    }
    if (sl_nonce_new(nonce, sizeof nonce) != SL_OK ||
        sl_sign_request(j->b->keys[j->dev], method, path, ts, nonce, body_sha, sig, sizeof sig) !=
            SL_OK)
        abort();
    snprintf(line, sizeof line, SL_HDR_DEVICE ": %lld", (long long)j->b->ids[j->dev]);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_TIMESTAMP ": %lld", (long long)ts);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_NONCE ": %s", nonce);
    j->hdrs = curl_slist_append(j->hdrs, line);
    snprintf(line, sizeof line, SL_HDR_SIGNATURE ": %s", sig);
    j->hdrs = curl_slist_append(j->hdrs, line);
}

/* Set up the job's next request; 0 when there is nothing left to do. An
 * upload is one signed create carrying the whole frame, or with --two-step
 * a JSON create and one PATCH (the protocol before creation with upload). */
static int job_next(job *j)
{
    bench *b = j->b;
    char path[160];
    uint8_t sha[32];
    curl_slist_free_all(j->hdrs);
    j->hdrs = curl_slist_append(NULL, "Expect:");
    j->resp_len = 0;
    curl_easy_setopt(j->h, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(j->h, CURLOPT_HTTPGET, 1L);
    if (j->kind == JOB_STATUS) {
        snprintf(j->url, sizeof j->url, "%s/v1/status",
                 b->auth == AUTH_NONE ? b->open_base : b->base);
        j->hdrs = curl_slist_append(j->hdrs, BENCH_AUTH_HEADER);
    } else if (j->stage == 0) {
        if (b->next_dev >= b->dev_limit)
            return 0; /* every device of the phase has uploaded */
        j->dev = b->next_dev++;
        j->upload_t0 = sl_bench_now_ns();
        j->location[0] = '\0';
        if (b->o.two_step) { /* a JSON create, then the bytes in a PATCH */
            snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)b->round);
            snprintf(j->body, sizeof j->body,
                     "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":100}", b->frame_len,
                     b->frame_hex);
            sl_sha256(j->body, strlen(j->body), sha);
            sign(j, "POST", path, sha);
            j->hdrs = curl_slist_append(j->hdrs, "Content-Type: application/json");
            curl_easy_setopt(j->h, CURLOPT_POSTFIELDS, j->body);
            curl_easy_setopt(j->h, CURLOPT_POSTFIELDSIZE, (long)strlen(j->body));
        } else { /* the whole frame with the create: one signed request */
            snprintf(path, sizeof path,
                     "/v1/rounds/%lld/uploads?length=%zu&sha256=%s&num_samples=100",
                     (long long)b->round, b->frame_len, b->frame_hex);
            sign(j, "POST", path, b->frame_sha);
            j->hdrs = curl_slist_append(j->hdrs, "Content-Type: application/offset+octet-stream");
            curl_easy_setopt(j->h, CURLOPT_POSTFIELDS, b->frame);
            curl_easy_setopt(j->h, CURLOPT_POSTFIELDSIZE, (long)b->frame_len);
        }
        snprintf(j->url, sizeof j->url, "%s%s", b->auth == AUTH_NONE ? b->open_base : b->base,
                 path);
    } else {
        snprintf(j->url, sizeof j->url, "%s%s", b->auth == AUTH_NONE ? b->open_base : b->base,
                 j->location);
        sign(j, "PATCH", j->location, b->frame_sha);
        j->hdrs = curl_slist_append(j->hdrs, "Content-Type: application/offset+octet-stream");
        j->hdrs = curl_slist_append(j->hdrs, "Upload-Offset: 0");
        curl_easy_setopt(j->h, CURLOPT_POSTFIELDS, b->frame);
        curl_easy_setopt(j->h, CURLOPT_POSTFIELDSIZE, (long)b->frame_len);
        curl_easy_setopt(j->h, CURLOPT_CUSTOMREQUEST, "PATCH");
    }
    curl_easy_setopt(j->h, CURLOPT_URL, j->url);
    curl_easy_setopt(j->h, CURLOPT_HTTPHEADER, j->hdrs);
    j->t0 = sl_bench_now_ns();
    return 1;
}

void sl__bench_api_job_init(job *j, bench *b, int kind)
{
    memset(j, 0, sizeof *j);
    j->b = b;
    j->kind = kind;
    j->resp = malloc(BENCH_RESP_MAX);
    j->h = curl_easy_init();
    if (j->h == NULL || j->resp == NULL)
        abort();
    curl_easy_setopt(j->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(j->h, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(j->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(j->h, CURLOPT_HEADERDATA, j);
    curl_easy_setopt(j->h, CURLOPT_PRIVATE, j);
    curl_easy_setopt(j->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(j->h, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(j->h, CURLOPT_TCP_NODELAY, 1L);
}

void sl__bench_api_job_free(job *j)
{
    curl_easy_cleanup(j->h);
    curl_slist_free_all(j->hdrs);
    free(j->resp);
}

/* A request ended: count it, and say whether the job goes on (1) or stops (0). */
static int job_done(job *j, CURLcode cc, int64_t end, int64_t deadline, tally *t)
{
    long code = 0;
    curl_easy_getinfo(j->h, CURLINFO_RESPONSE_CODE, &code);
    if (j->kind == JOB_STATUS) {
        if (cc == CURLE_OK && code == 200 && end <= deadline) {
            t->status_done++;
            sl__bench_api_samples_add(t->status_lat, end - j->t0);
        } else if (cc != CURLE_OK || code != 200) {
            t->errors++;
        }
        return 1;
    }
    if (j->stage == 0 && cc == CURLE_OK && code == 201 &&
        strncmp(j->location, "/v1/uploads/", 12) == 0) {
        j->stage = 1;
        return 1;
    }
    if ((j->stage == 1 || !j->b->o.two_step) && cc == CURLE_OK && code == 200 &&
        j->resp_len < BENCH_RESP_MAX &&
        memmem(j->resp, j->resp_len, "\"accepted\":true", 15) != NULL) {
        j->stage = 0;
        if (end <= deadline) {
            t->uploads_done++;
            sl__bench_api_samples_add(t->upload_lat, end - j->upload_t0);
        }
        return 1;
    }
    if (t->errors++ < 3)
        fprintf(stderr, "bench api: upload %s: curl %d, HTTP %ld %.*s\n",
                j->stage ? "PATCH" : "create", (int)cc, code, (int)j->resp_len, j->resp);
    j->stage = 0;
    return 1;
}

/* Run @jobs until @seconds passed (and what is in flight then has ended). */
void sl__bench_api_run(job *jobs, size_t njobs, double seconds, tally *t)
{
    CURLM *m = curl_multi_init();
    int64_t start = sl_bench_now_ns(), deadline = start + (int64_t)(seconds * 1e9), end = deadline;
    size_t active = 0;
    int running;
    for (size_t i = 0; i < njobs; i++)
        if (job_next(&jobs[i]) && curl_multi_add_handle(m, jobs[i].h) == CURLM_OK)
            active++;
    while (active > 0) {
        CURLMsg *msg;
        int left;
        curl_multi_perform(m, &running);
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            CURLcode cc = msg->data.result; /* msg dies with the handle's removal */
            CURL *h = msg->easy_handle;
            job *j;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&j);
            curl_multi_remove_handle(m, h);
            active--;
            if (job_done(j, cc, sl_bench_now_ns(), deadline, t) && sl_bench_now_ns() < deadline &&
                job_next(j) && curl_multi_add_handle(m, h) == CURLM_OK)
                active++;
        }
        if (active > 0)
            curl_multi_poll(m, NULL, 0, 20, NULL);
        else
            end = sl_bench_now_ns();
    }
    t->elapsed_s += (double)((end < deadline ? end : deadline) - start) * 1e-9;
    curl_multi_cleanup(m);
}
