/*
 * test_api_e2e.c - both halves of the REST protocol together: the real
 * server (sl_server_*, in process, on 127.0.0.1) driven only through the
 * client library (sl_client_*). Enrolment with a fresh device key, signed
 * check-ins, model downloads (ETag and SHA-256, 304, a Range resume after a
 * cut link and after a restart, If-Range), resumable uploads of real update
 * frames in small chunks (a cut in the middle, a fresh client resuming from
 * a saved (upload id, offset)), the round closing and the new version in
 * GET /v1/status; then expired and refused sessions, HTTPS with a test
 * CA and a pinned key, and a certificate reloaded while connections stay
 * open.
 *
 * A TCP relay (e2e_proxy.c) between client and server cuts connections in
 * the middle of transfers, as a flaky link does.
 */
#include <signal.h>

#include <curl/curl.h>

#include "../support/sl_test.h"
#include "e2e_support.h"

/* ---- a round, end to end ------------------------------------------------------ */

#define TASK                                                                        \
    "{\"name\":\"e2e\",\"target\":2,\"quorum\":2,\"over_selection\":1.0,"           \
    "\"selection_window_ms\":300,\"report_deadline_ms\":60000,\"values\":\"fp32\"," \
    "\"density\":0.25}"

/* One device is enough: the first accepted update closes the round. */
#define TASK1                                                                   \
    "{\"name\":\"e2e1\",\"target\":1,\"quorum\":1,\"selection_window_ms\":300," \
    "\"report_deadline_ms\":60000}"

static void test_round_over_http(void **state)
{
    e2e_fx f;
    e2e_dev a, b;
    e2e_proxy *proxy;
    sl_client *op, *ca, *cb;
    sl_client_download_state d;
    sl_client_response r;
    char path[300], via[64], etag[80], hex[65];
    uint8_t sha[32];
    void *fa, *fb;
    size_t la, lb;
    int64_t task, round, round_b, version;
    (void)state;
    e2e_fx_open(&f, "e2e_http", NULL);
    proxy = e2e_proxy_start((int)sl_server_port(f.server));
    snprintf(via, sizeof via, "http://127.0.0.1:%d", e2e_proxy_port(proxy));
    op = e2e_client(&f, f.base, NULL, 1, 3);
    task = e2e_create_task(&f, op, TASK);
    e2e_enrol(&f, &a);
    e2e_enrol(&f, &b);
    assert_true(a.id != b.id);
    ca = e2e_client(&f, f.base, &a, 0, 5); /* a talks directly, b through the flaky link */
    cb = e2e_client(&f, via, &b, 0, 5);
    /* both join the pool in the selection window, then learn the draw */
    for (int i = 0; i < 2; i++) {
        char body[96];
        snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":120}", (long long)task);
        e2e_call(i == 0 ? ca : cb, "POST", "/v1/checkin", body, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(e2e_json_int(&r, "selected"), 0);
        sl_client_response_free(&r);
    }
    round = e2e_checkin_until_selected(ca, task, &version);
    round_b = e2e_checkin_until_selected(cb, task, &version);
    assert_int_equal(round, round_b);
    assert_int_equal(version, 1);

    /* download: the link dies after 20000 bytes; the client resumes with a Range */
    snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)task);
    sl_client_download_state_init(&d);
    e2e_proxy_cut_down(proxy, 20000, 1);
    assert_int_equal(sl_client_download(cb, path, NULL, &d, &r), SL_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.attempts, 2);
    assert_int_equal(e2e_proxy_cuts(proxy), 1);
    assert_int_equal(e2e_proxy_count(proxy, "\r\nRange: bytes="), 1);
    assert_true(d.complete);
    assert_int_equal(d.len, f.model_len);
    assert_memory_equal(d.data, f.model, f.model_len);
    sl_sha256(f.model, f.model_len, sha);
    sl_hex(sha, 32, hex);
    snprintf(etag, sizeof etag, "\"%s\"", hex);
    assert_string_equal(d.etag, etag); /* the ETag is the SHA-256, and it was checked */
    sl_client_response_free(&r);
    /* the version it holds: 304, the state untouched */
    assert_int_equal(sl_client_download(ca, path, etag, &d, &r), SL_OK);
    assert_int_equal(r.status, 304);
    sl_client_response_free(&r);
    /* an agent restarted with 1000 bytes on disk: one 206 for the rest */
    sl_client_download_state_reset(&d);
    assert_int_equal(sl_client_download_state_preload(&d, f.model, 1000, etag), SL_OK);
    assert_int_equal(sl_client_download(cb, path, NULL, &d, &r), SL_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(e2e_proxy_count(proxy, "\r\nRange: bytes=1000-"), 1);
    assert_memory_equal(d.data, f.model, f.model_len);
    sl_client_response_free(&r);
    /* bytes of another representation: If-Range fails, the whole body comes */
    {
        char junk[1000];
        memset(junk, 0x77, sizeof junk);
        sl_client_download_state_reset(&d);
        assert_int_equal(sl_client_download_state_preload(&d, junk, sizeof junk,
                                                          "\"00000000000000000000000000000000"
                                                          "00000000000000000000000000000000\""),
                         SL_OK);
        assert_int_equal(sl_client_download(ca, path, NULL, &d, &r), SL_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.attempts, 1);
        assert_memory_equal(d.data, f.model, f.model_len);
        sl_client_response_free(&r);
    }

    /* a's upload: cut after 3 chunks; a fresh client resumes from a state saved
     * after 2 (stale: the server's 409 says where it really is) */
    e2e_make_update(&f, round, 1, 1.0f, &fa, &la);
    {
        sl_client_upload_state saved =
            e2e_interrupted_upload(&f, proxy, &a, round, fa, la, 2 * E2E_CHUNK, 3 * E2E_CHUNK);
        char id[SL_CLIENT_UPLOAD_ID_MAX + 1];
        sl_client *fresh = e2e_client(&f, f.base, &a, 0, 5);
        assert_int_equal(saved.offset, 2 * E2E_CHUNK);
        memcpy(id, saved.upload_id, sizeof id);
        assert_int_equal(sl_client_upload(fresh, round, fa, la, 120, &saved, &r), SL_OK);
        if (r.status != 200)
            fail_msg("resumed upload: %ld %.*s", r.status, (int)r.body_len, (char *)r.body);
        assert_string_equal(saved.upload_id, id); /* the same session, not a new one */
        assert_int_equal(saved.offset, la);
        assert_int_equal(e2e_json_int(&r, "accepted"), 1);
        assert_int_equal(e2e_json_int(&r, "duplicate"), 0);
        assert_int_equal(e2e_json_int(&r, "round_id"), round);
        sl_client_response_free(&r);
        snprintf(path, sizeof path, "/v1/uploads/%s", id);
        e2e_call(fresh, "HEAD", path, NULL, &r);
        assert_int_equal(r.status, 404); /* stored: the session is gone */
        sl_client_response_free(&r);
        sl_client_free(fresh);
        /* the stale offset was corrected by exactly one 409 */
        e2e_call(op, "GET", "/metrics", NULL, &r);
        assert_non_null(strstr((char *)r.body, "starling_http_requests_total{route=\"/v1/uploads/"
                                               "{id}\",status=\"409\"} 1\n"));
        sl_client_response_free(&r);
    }
    /* the round waits for b */
    e2e_call(op, "GET", "/v1/status", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr((char *)r.body, "\"model_version\":1"));
    sl_client_response_free(&r);

    /* b's upload: the link dies in the second PATCH; the same call resumes (HEAD) */
    e2e_make_update(&f, round, 1, -0.5f, &fb, &lb);
    {
        sl_client_upload_state st;
        int heads = e2e_proxy_count(proxy, "HEAD /v1/uploads/");
        memset(&st, 0, sizeof st);
        e2e_proxy_cut_up(proxy, 6000, 2);
        assert_int_equal(sl_client_upload(cb, round, fb, lb, 80, &st, &r), SL_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(e2e_json_int(&r, "accepted"), 1);
        assert_int_equal(e2e_proxy_cuts(proxy), 5);
        assert_int_equal(e2e_proxy_count(proxy, "HEAD /v1/uploads/"), heads + 1);
        sl_client_response_free(&r);
        /* the answer was lost and the agent sends it again, though the round closed
         * with it: the receipt (commit), not "late" (fold) */
        memset(&st, 0, sizeof st);
        assert_int_equal(sl_client_upload(cb, round, fb, lb, 80, &st, &r), SL_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(e2e_json_int(&r, "accepted"), 1);
        assert_int_equal(e2e_json_int(&r, "duplicate"), 1);
        sl_client_response_free(&r);
        /* another update from b for the closed round is late */
        memset(&st, 0, sizeof st);
        assert_int_equal(sl_client_upload(cb, round, fa, la, 80, &st, &r), SL_OK);
        e2e_expect_reason(&r, 410, "late", "late");
        sl_client_response_free(&r);
    }

    /* the target is met: the round closed and version 2 is visible */
    e2e_call(op, "GET", "/v1/status", NULL, &r);
    assert_int_equal(r.status, 200);
    {
        cJSON *doc = e2e_json_of(&r), *t = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "tasks"), 0);
        assert_int_equal(cJSON_GetObjectItem(t, "task_id")->valuedouble, task);
        assert_int_equal(cJSON_GetObjectItem(t, "model_version")->valuedouble, 2);
        cJSON_Delete(doc);
    }
    sl_client_response_free(&r);
    snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)round);
    e2e_call(op, "GET", path, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr((char *)r.body, "\"state\":\"closed\""));
    assert_int_equal(e2e_json_int(&r, "reported"), 2);
    assert_int_equal(e2e_json_int(&r, "bytes_up"), (int64_t)(la + lb));
    /* three full bodies went out (one cut, counted when sent), one rest after 1000 bytes,
     * the 304 sent nothing */
    assert_true(e2e_json_int(&r, "bytes_down") >= (int64_t)(3 * f.model_len - 1000));
    sl_client_response_free(&r);
    /* the new version, through the client, decodes and differs from the first */
    snprintf(path, sizeof path, "/v1/models/latest?task=%lld", (long long)task);
    sl_client_download_state_reset(&d);
    assert_int_equal(sl_client_download(ca, path, etag, &d, &r), SL_OK);
    assert_int_equal(r.status, 200); /* not the ETag of version 1 any more */
    sl_client_response_free(&r);
    {
        size_t n = (size_t)sl_layout_params(f.layout);
        float *v1 = malloc(n * sizeof *v1), *v2 = malloc(n * sizeof *v2);
        assert_int_equal(sl_frame_decode_model(f.layout, f.model, f.model_len, NULL, 0, v1), SL_OK);
        assert_int_equal(sl_frame_decode_model(f.layout, d.data, d.len, NULL, 0, v2), SL_OK);
        assert_memory_not_equal(v1, v2, n * sizeof *v1);
        free(v1);
        free(v2);
    }
    sl_client_download_state_reset(&d);
    free(fa);
    free(fb);
    sl_client_free(ca);
    sl_client_free(cb);
    sl_client_free(op);
    sl_device_key_free(a.key);
    sl_device_key_free(b.key);
    e2e_proxy_stop(proxy);
    e2e_fx_close(&f);
}

/* ---- expired and refused sessions ------------------------------------------------ */

static void test_expired_and_refused(void **state)
{
    e2e_fx f;
    e2e_dev a;
    e2e_proxy *proxy;
    sl_client *op, *ca;
    sl_client_response r;
    sl_upload_record rec;
    char path[300], body[256], hex[65];
    void *frame;
    size_t len;
    int64_t task, round, version;
    (void)state;
    e2e_fx_open(&f, "e2e_expiry", NULL);
    proxy = e2e_proxy_start((int)sl_server_port(f.server));
    op = e2e_client(&f, f.base, NULL, 1, 3);
    task = e2e_create_task(&f, op, TASK1);
    e2e_enrol(&f, &a);
    ca = e2e_client(&f, f.base, &a, 0, 5);
    round = e2e_checkin_until_selected(ca, task, &version);

    /* refused for its layout: 422, and the session is deleted at once */
    {
        sl_layout *other;
        sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, (uint64_t)round, 0};
        uint32_t idx[1] = {0};
        float val[1] = {0.5f};
        sl_sparse_tensor t = {1, idx, val};
        sl_client_upload_state st;
        assert_int_equal(sl_layout_parse("w 3\n", 4, &other), SL_OK);
        h.layout_hash = sl_layout_hash(other);
        assert_int_equal(sl_frame_encode_update(other, &h, &t, NULL, NULL, &frame, &len), SL_OK);
        /* the client sends a frame this small with the create: no session at all */
        memset(&st, 0, sizeof st);
        assert_int_equal(sl_client_upload(ca, round, frame, len, 1, &st, &r), SL_OK);
        e2e_expect_reason(&r, 422, "unprocessable", "layout");
        sl_client_response_free(&r);
        assert_string_equal(st.upload_id, "");
        /* through a session (JSON create, then PATCH): 422, deleted, remembered */
        {
            char id[SL_CLIENT_HEADER_MAX];
            const char *hdrs[] = {"Upload-Offset: 0", NULL};
            uint8_t digest[32];
            sl_sha256(frame, len, digest);
            sl_hex(digest, 32, hex);
            snprintf(body, sizeof body, "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":1}", len,
                     hex);
            snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
            e2e_call(ca, "POST", path, body, &r);
            assert_int_equal(r.status, 201);
            snprintf(id, sizeof id, "%.200s", r.location + 12);
            sl_client_response_free(&r);
            snprintf(path, sizeof path, "/v1/uploads/%s", id);
            assert_int_equal(sl_client_request(ca, "PATCH", path, frame, len,
                                               "application/offset+octet-stream", hdrs, &r),
                             SL_OK);
            e2e_expect_reason(&r, 422, "unprocessable", "layout");
            sl_client_response_free(&r);
            assert_int_equal(sl_store_get_upload(f.store, id, &rec), SL_ENOENT);
            e2e_call(ca, "HEAD", path, NULL, &r);
            assert_int_equal(r.status, 410); /* remembered as refused, not unknown */
            sl_client_response_free(&r);
        }
        free(frame);
        sl_layout_free(other);
    }
    /* a digest that does not match the bytes: 422 digest_mismatch, deleted */
    e2e_make_update(&f, round, version, 1.0f, &frame, &len);
    {
        char id[SL_CLIENT_HEADER_MAX], offset[64];
        const char *hdrs[] = {offset, NULL};
        memset(hex, '0', 64);
        hex[64] = '\0';
        snprintf(body, sizeof body, "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":5}", len,
                 hex);
        snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
        e2e_call(ca, "POST", path, body, &r);
        assert_int_equal(r.status, 201);
        assert_true(strncmp(r.location, "/v1/uploads/", 12) == 0);
        snprintf(id, sizeof id, "%.200s", r.location + 12);
        sl_client_response_free(&r);
        snprintf(offset, sizeof offset, "Upload-Offset: 0");
        snprintf(path, sizeof path, "/v1/uploads/%s", id);
        assert_int_equal(sl_client_request(ca, "PATCH", path, frame, len,
                                           "application/offset+octet-stream", hdrs, &r),
                         SL_OK);
        e2e_expect_reason(&r, 422, "unprocessable", "digest_mismatch");
        sl_client_response_free(&r);
        assert_int_equal(sl_store_get_upload(f.store, id, &rec), SL_ENOENT);
    }

    /* expiry: an agent comes back after more than the 24 h the session lived */
    {
        sl_client_upload_state saved =
            e2e_interrupted_upload(&f, proxy, &a, round, frame, len, 2 * E2E_CHUNK, 2 * E2E_CHUNK);
        char old_id[SL_CLIENT_UPLOAD_ID_MAX + 1];
        sl_client *fresh;
        memcpy(old_id, saved.upload_id, sizeof old_id);
        e2e_clock_skip((24 * 3600 + 60) * 1000000000LL);
        snprintf(path, sizeof path, "/v1/uploads/%s", old_id);
        e2e_call(ca, "HEAD", path, NULL, &r);
        assert_int_equal(r.status, 410);
        sl_client_response_free(&r);
        {
            char offset[64];
            const char *hdrs[] = {offset, NULL};
            snprintf(offset, sizeof offset, "Upload-Offset: %d", 2 * E2E_CHUNK);
            assert_int_equal(sl_client_request(ca, "PATCH", path, frame, 10,
                                               "application/offset+octet-stream", hdrs, &r),
                             SL_OK);
            e2e_expect_reason(&r, 410, "gone", "expired");
            sl_client_response_free(&r);
        }
        /* the sweep gives the bytes back but the session stays known as expired */
        assert_int_equal(sl_store_expire_uploads(f.store, NULL), SL_OK);
        assert_int_equal(sl_store_get_upload(f.store, old_id, &rec), SL_ETIMEDOUT);
        /* a fresh client with the saved state starts a new session by itself */
        fresh = e2e_client(&f, f.base, &a, 0, 5);
        assert_int_equal(sl_client_upload(fresh, round, frame, len, 120, &saved, &r), SL_OK);
        if (r.status != 200)
            fail_msg("after expiry: %ld %.*s", r.status, (int)r.body_len, (char *)r.body);
        assert_string_not_equal(saved.upload_id, old_id);
        assert_int_equal(e2e_json_int(&r, "accepted"), 1);
        sl_client_response_free(&r);
        sl_client_free(fresh);
    }
    free(frame);
    sl_client_free(ca);
    sl_client_free(op);
    sl_device_key_free(a.key);
    e2e_proxy_stop(proxy);
    e2e_fx_close(&f);
}

/* ---- HTTPS with a test CA -------------------------------------------------------- */

static void test_https(void **state)
{
    static mh_pki pki;
    e2e_fx f;
    e2e_dev a;
    sl_client *op, *ca, *other;
    sl_client_download_state d;
    sl_client_response r;
    sl_client_options o;
    char path[300];
    int64_t task, round, version;
    void *frame;
    size_t len;
    (void)state;
    mh_pki_make(&pki);
    e2e_fx_open(&f, "e2e_https", &pki);
    op = e2e_client(&f, f.base, NULL, 1, 3);
    task = e2e_create_task(&f, op, TASK1);
    e2e_enrol(&f, &a);
    ca = e2e_client(&f, f.base, &a, 0, 3);
    round = e2e_checkin_until_selected(ca, task, &version);
    snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)task);
    sl_client_download_state_init(&d);
    assert_int_equal(sl_client_download(ca, path, NULL, &d, &r), SL_OK);
    assert_int_equal(r.status, 200);
    assert_memory_equal(d.data, f.model, f.model_len);
    sl_client_response_free(&r);
    sl_client_download_state_reset(&d);
    e2e_make_update(&f, round, version, 1.0f, &frame, &len);
    {
        sl_client_upload_state st;
        memset(&st, 0, sizeof st);
        assert_int_equal(sl_client_upload(ca, round, frame, len, 120, &st, &r), SL_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(e2e_json_int(&r, "accepted"), 1);
        sl_client_response_free(&r);
    }
    free(frame);
    e2e_call(op, "GET", "/v1/status", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr((char *)r.body, "\"model_version\":2")); /* target 1: closed */
    sl_client_response_free(&r);
    /* the server's key pinned: fine; another pin, or no trust in the CA: SL_EPERM */
    memset(&o, 0, sizeof o);
    o.base_url = f.base;
    o.ca_file = f.ca_file;
    o.pinned_pubkey = pki.pin;
    o.max_attempts = 2;
    o.retry_base_ms = 5;
    assert_int_equal(sl_client_create(&o, &other), SL_OK);
    e2e_call(other, "GET", "/healthz", NULL, &r);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    sl_client_free(other);
    o.pinned_pubkey = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    assert_int_equal(sl_client_create(&o, &other), SL_OK);
    assert_int_equal(sl_client_request(other, "GET", "/healthz", NULL, 0, NULL, NULL, &r),
                     SL_EPERM);
    sl_client_free(other);
    o.pinned_pubkey = NULL;
    o.ca_file = NULL; /* the system's CAs do not know the test CA */
    assert_int_equal(sl_client_create(&o, &other), SL_OK);
    assert_int_equal(sl_client_request(other, "GET", "/healthz", NULL, 0, NULL, NULL, &r),
                     SL_EPERM);
    sl_client_free(other);
    sl_client_free(ca);
    sl_client_free(op);
    sl_device_key_free(a.key);
    e2e_fx_close(&f);
}

/* ---- a certificate reloaded while connections stay open ------------------------- */

static size_t discard(void *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    (void)ctx;
    return size * n;
}

/* GET /healthz of @f on @h (a handle kept between calls keeps its connection open) trusting
 * @ca: the curl code (an answer must be 200); *@fresh: the connections the call opened. */
static CURLcode healthz(const e2e_fx *f, CURL *h, const char *ca, long *fresh)
{
    char url[128];
    long code = 0, opened = -1;
    CURLcode rc;
    snprintf(url, sizeof url, "%s/healthz", f->base);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        assert_int_equal(code, 200);
    }
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &opened);
    if (fresh != NULL)
        *fresh = opened;
    return rc;
}

/* A new connection trusting @ca: the curl code. */
static CURLcode healthz_once(const e2e_fx *f, const char *ca)
{
    CURL *h = curl_easy_init();
    CURLcode rc;
    assert_non_null(h);
    rc = healthz(f, h, ca, NULL);
    curl_easy_cleanup(h);
    return rc;
}

/* The value of the sample @name in /metrics (admin client @op); -1 when absent. */
static long metric(sl_client *op, const char *name)
{
    sl_client_response r;
    char needle[128];
    const char *at;
    long v = -1;
    snprintf(needle, sizeof needle, "\n%s ", name);
    e2e_call(op, "GET", "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    at = strstr((const char *)r.body, needle);
    if (at != NULL)
        v = strtol(at + strlen(needle), NULL, 10);
    sl_client_response_free(&r);
    return v;
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_tls_reload(void **state)
{
    static mh_pki a, b;
    e2e_fx f, plain;
    char cert_b[600], key_b[600], key_a[600], ca_a[600], ca_b[600], missing[600], err[512];
    CURL *old, *h[4];
    sl_client *op;
    long fresh = -1;
    (void)state;
    mh_pki_make(&a);
    mh_pki_make(&b);
    e2e_fx_open(&f, "e2e_tls_reload", &a);
    snprintf(ca_a, sizeof ca_a, "%s", f.ca_file);
    snprintf(cert_b, sizeof cert_b, "%s/b-cert.pem", f.dir);
    snprintf(key_b, sizeof key_b, "%s/b-key.pem", f.dir);
    snprintf(key_a, sizeof key_a, "%s/key.pem", f.dir); /* the fixture's */
    snprintf(ca_b, sizeof ca_b, "%s/b-ca.pem", f.dir);
    snprintf(missing, sizeof missing, "%s/none.pem", f.dir);
    write_text(cert_b, b.cert_pem);
    write_text(key_b, b.key_pem);
    write_text(ca_b, b.ca_pem);

    /* a connection opened under certificate A, kept */
    old = curl_easy_init();
    assert_non_null(old);
    assert_int_equal(healthz(&f, old, ca_a, &fresh), CURLE_OK);
    assert_int_equal(fresh, 1);

    /* files that cannot be used change nothing: missing, over 1 MiB, not PEM, or B's
     * certificate with A's key; nor do missing arguments */
    assert_int_equal(sl_server_reload_tls(f.server, missing, key_b, err, sizeof err), SL_ENOENT);
    assert_non_null(strstr(err, "tls_cert"));
    {
        FILE *fp = fopen(missing, "w");
        assert_non_null(fp);
        for (int i = 0; i < (1 << 21) / 64; i++)
            fputs("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n", fp);
        fclose(fp);
    }
    assert_int_equal(sl_server_reload_tls(f.server, cert_b, missing, err, sizeof err), SL_ETOOBIG);
    assert_non_null(strstr(err, "tls_key"));
    write_text(missing, "not a certificate\n");
    assert_int_equal(sl_server_reload_tls(f.server, missing, key_b, err, sizeof err), SL_EINVAL);
    assert_non_null(strstr(err, "the certificate in use stays"));
    assert_int_equal(sl_server_reload_tls(f.server, NULL, key_b, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_server_reload_tls(NULL, cert_b, key_b, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_server_reload_tls(f.server, cert_b, key_a, err, sizeof err), SL_EINVAL);
    assert_non_null(strstr(err, "refused"));
    assert_non_null(strstr(err, "the certificate in use stays"));
    assert_int_equal(healthz_once(&f, ca_a), CURLE_OK);
    assert_int_not_equal(healthz_once(&f, ca_b), CURLE_OK);

    /* B: new connections get it, the kept one goes on with A on the same connection */
    assert_int_equal(sl_server_reload_tls(f.server, cert_b, key_b, err, sizeof err), SL_OK);
    assert_int_equal(healthz_once(&f, ca_b), CURLE_OK);
    assert_int_not_equal(healthz_once(&f, ca_a), CURLE_OK);
    assert_int_equal(healthz(&f, old, ca_a, &fresh), CURLE_OK);
    assert_int_equal(fresh, 0);                        /* no new connection: served by A's daemon */
    snprintf(f.ca_file, sizeof f.ca_file, "%s", ca_b); /* the operator's client trusts B now */
    op = e2e_client(&f, f.base, NULL, 1, 3);
    assert_int_equal(metric(op, "starling_tls_reloads_total"), 1);
    assert_int_equal(metric(op, "starling_tls_previous_certificates"), 1);
    /* mh_pki's certificates are valid until 2099-12-31T23:59:59Z */
    assert_int_equal(metric(op, "starling_tls_certificate_expiry_timestamp_seconds"), 4102444799L);
    /* once its connection closes, A's daemon is stopped */
    curl_easy_cleanup(old);
    for (int i = 0; i < 250 && metric(op, "starling_tls_previous_certificates") != 0; i++)
        usleep(20000);
    assert_int_equal(metric(op, "starling_tls_previous_certificates"), 0);

    /* four replaced certificates still serving a connection each: a fifth reload waits */
    for (int i = 0; i < 4; i++) {
        const char *ca = i % 2 ? ca_a : ca_b, *cert = i % 2 ? cert_b : NULL;
        char cert_a[600];
        snprintf(cert_a, sizeof cert_a, "%s/cert.pem", f.dir);
        h[i] = curl_easy_init();
        assert_non_null(h[i]);
        assert_int_equal(healthz(&f, h[i], ca, NULL), CURLE_OK);
        assert_int_equal(sl_server_reload_tls(f.server, cert ? cert : cert_a, cert ? key_b : key_a,
                                              err, sizeof err),
                         SL_OK);
    }
    assert_int_equal(sl_server_reload_tls(f.server, cert_b, key_b, err, sizeof err), SL_EBUSY);
    assert_non_null(strstr(err, "earlier reloads"));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(healthz(&f, h[i], i % 2 ? ca_a : ca_b, &fresh), CURLE_OK);
        assert_int_equal(fresh, 0);
        curl_easy_cleanup(h[i]);
    }
    for (int i = 0; i < 250 && metric(op, "starling_tls_previous_certificates") != 0; i++)
        usleep(20000);
    assert_int_equal(sl_server_reload_tls(f.server, cert_b, key_b, err, sizeof err), SL_OK);
    assert_int_equal(healthz_once(&f, ca_b), CURLE_OK);
    assert_int_equal(metric(op, "starling_tls_reloads_total"), 6);
    sl_client_free(op);
    e2e_fx_close(&f);

    /* plain HTTP has no certificate to reload */
    e2e_fx_open(&plain, "e2e_tls_plain", NULL);
    assert_int_equal(sl_server_reload_tls(plain.server, cert_b, key_b, err, sizeof err), SL_ESTATE);
    assert_non_null(strstr(err, "plain HTTP"));
    e2e_fx_close(&plain);
}

/* ---- tokens replaced while serving -------------------------------------------------- */

/* GET /v1/status with the bearer @token (NULL: none): the status. */
static long status_as(const e2e_fx *f, const char *token)
{
    sl_client_options o;
    sl_client *c = NULL;
    sl_client_response r;
    long status;
    memset(&o, 0, sizeof o);
    o.base_url = f->base;
    o.max_attempts = 1;
    o.admin_token = token;
    assert_int_equal(sl_client_create(&o, &c), SL_OK);
    e2e_call(c, "GET", "/v1/status", NULL, &r);
    status = r.status;
    sl_client_response_free(&r);
    sl_client_free(c);
    return status;
}

/* POST /v1/devices with a fresh key and the enrolment token @token: the status. */
static long enrol_with(const e2e_fx *f, const char *token)
{
    uint8_t pub[SL_PUBKEY_LEN];
    char hex[2 * SL_PUBKEY_LEN + 1], body[400];
    sl_device_key *key = NULL;
    sl_client *anon = e2e_client(f, f->base, NULL, 0, 1);
    sl_client_response r;
    long status;
    assert_int_equal(sl_device_key_generate(&key), SL_OK);
    assert_int_equal(sl_device_key_public(key, pub), SL_OK);
    sl_hex(pub, sizeof pub, hex);
    snprintf(body, sizeof body, "{\"enrolment_token\":\"%s\",\"public_key\":\"%s\"}", token, hex);
    e2e_call(anon, "POST", "/v1/devices", body, &r);
    status = r.status;
    sl_client_response_free(&r);
    sl_client_free(anon);
    sl_device_key_free(key);
    return status;
}

static void test_tokens_replaced(void **state)
{
    e2e_fx f;
    (void)state;
    e2e_fx_open(&f, "e2e_tokens", NULL);
    assert_int_equal(status_as(&f, E2E_ADMIN), 200);
    assert_int_equal(enrol_with(&f, E2E_ENROL), 201);
    /* both replaced: the old ones refused at once, the new ones taken */
    assert_int_equal(sl_server_set_tokens(f.server, "admin-2", "enrol-2"), SL_OK);
    assert_int_equal(status_as(&f, E2E_ADMIN), 401);
    assert_int_equal(status_as(&f, "admin-2"), 200);
    assert_int_equal(enrol_with(&f, E2E_ENROL), 401);
    assert_int_equal(enrol_with(&f, "enrol-2"), 201);
    /* NULL keeps a token; "" turns it off */
    assert_int_equal(sl_server_set_tokens(f.server, NULL, ""), SL_OK);
    assert_int_equal(status_as(&f, "admin-2"), 200);
    assert_int_equal(enrol_with(&f, "enrol-2"), 401);
    assert_int_equal(enrol_with(&f, ""), 401);
    assert_int_equal(sl_server_set_tokens(f.server, "", "enrol-3"), SL_OK);
    assert_int_equal(status_as(&f, "admin-2"), 401);
    assert_int_equal(status_as(&f, ""), 401);
    assert_int_equal(enrol_with(&f, "enrol-3"), 201);
    assert_int_equal(sl_server_set_tokens(NULL, "x", "y"), SL_EINVAL);
    e2e_fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_over_http), cmocka_unit_test(test_expired_and_refused),
        cmocka_unit_test(test_https),           cmocka_unit_test(test_tls_reload),
        cmocka_unit_test(test_tokens_replaced),
    };
    signal(SIGPIPE, SIG_IGN);
    if (getenv("E2E_LOG") != NULL) {
        sl_log_set_sink(sl_log_sink_stderr, NULL);
        sl_log_set_level(SL_LOG_INFO);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
