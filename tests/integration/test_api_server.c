/*
 * The coordinator's REST server over real sockets on 127.0.0.1: libcurl's
 * easy API (and the curl program when present), signed device requests,
 * a complete round with every upload rejection, model downloads (ETag,
 * 304, Range, deltas, safetensors), the 413 that comes before the body,
 * rate limits, TLS, SIGTERM, kill -9 in the middle of an upload, and the
 * OpenAPI schemas checked against every JSON answer the tests received.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <regex.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "../support/sl_test.h"
#include "api_harness.h"

/* ---- routing, problems, health ------------------------------------------------ */

void test_basics(void **state)
{
    ah_fx f;
    ah_resp r;
    char value[256], url[256];
    const char *rid[] = {"X-Request-Id: trace-42.a_b"};
    const char *bad_rid[] = {"X-Request-Id: no spaces allowed"};
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    const char *wrong[] = {"Authorization: Bearer nope"};
    uint64_t audits;
    (void)state;
    ah_fx_open(&f, "api_basics", NULL);
    audits = ah_audit_count(&f);

    ah_get(&f, "/healthz", rid, 1, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");
    assert_true(ah_header(&r, "X-Request-Id", value, sizeof value));
    assert_string_equal(value, "trace-42.a_b");
    ah_resp_free(&r);
    ah_get(&f, "/readyz", bad_rid, 1, &r);
    assert_int_equal(r.status, 200);
    assert_true(ah_header(&r, "X-Request-Id", value, sizeof value));
    assert_true(strlen(value) > 8 && strchr(value, ' ') == NULL);
    ah_resp_free(&r);

    ah_get(&f, "/v1/nothing-here", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/status", f.base);
    ah_http("DELETE", url, auth, 1, NULL, 0, &r);
    ah_expect_problem(&r, 405, "method-not-allowed");
    assert_true(ah_header(&r, "Allow", value, sizeof value));
    assert_non_null(strstr(value, "GET"));
    ah_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/devices", f.base);
    ah_http("PUT", url, NULL, 0, "{}", 2, &r);
    ah_expect_problem(&r, 405, "method-not-allowed");
    assert_true(ah_header(&r, "Allow", value, sizeof value));
    assert_string_equal(value, "POST, GET, HEAD"); /* enrolment, and the operators' list */
    ah_resp_free(&r);
    ah_http("POST", url, NULL, 0, "{\"enrolment_token\": ", 20, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    ah_admin(&f, "POST", "/v1/tasks", "[1, 2", 5, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);

    /* operator reads need the token unless --public-status */
    ah_get(&f, "/v1/status", NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    ah_get(&f, "/v1/status", wrong, 1, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    ah_get(&f, "/v1/status", auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"tasks\":[]")); /* nothing was created by the above */
    ah_resp_free(&r);
    assert_int_equal(ah_audit_count(&f), audits);

    ah_get(&f, "/v1/openapi.yaml", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    {
        void *file;
        size_t len;
        assert_int_equal(sl_fs_read_file(SL_SOURCE_DIR "/api/openapi.yaml", 1 << 20, &file, &len),
                         SL_OK);
        assert_int_equal(r.len, len);
        assert_memory_equal(r.body, file, len);
        free(file);
    }
    ah_resp_free(&r);
    ah_get(&f, "/", auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "<table"));
    assert_null(strstr(r.body, "http://")); /* no external resources */
    ah_resp_free(&r);
    ah_get(&f, "/metrics", auth, 1, &r);
    assert_int_equal(r.status, 200);
    ah_check_prometheus(r.body);
    assert_non_null(strstr(r.body, "starling_http_requests_total{route=\"unmatched\","
                                   "status=\"404\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_http_requests_total{route=\"/v1/devices\","
                                   "status=\"405\"} 1\n"));
    ah_resp_free(&r);
    ah_fx_close(&f);
}

/* ---- enrolment and signatures --------------------------------------------------- */

#define SLOW_TASK                                                                       \
    "{\"config\":{\"name\":\"slow\",\"target\":2,\"quorum\":1,\"selection_window_ms\":" \
    "60000,\"report_deadline_ms\":60000},\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%s\"}"

/* Send a check-in with explicit signing inputs. */
static void raw_checkin(ah_fx *f, const sl_device_key *key, int64_t id, int64_t ts,
                        const char *nonce, const char *signed_body, const char *sent_body,
                        ah_resp *r)
{
    char url[128];
    const char *hdrs[4];
    ah_sig sig;
    ah_sign(key, id, "POST", "/v1/checkin", ts, nonce, signed_body, strlen(signed_body), &sig);
    for (int i = 0; i < 4; i++)
        hdrs[i] = sig.lines[i];
    snprintf(url, sizeof url, "%s/v1/checkin", f->base);
    ah_http("POST", url, hdrs, 4, sent_body, strlen(sent_body), r);
}

void test_enrol_and_signatures(void **state)
{
    ah_fx f;
    ah_dev a, b, again;
    ah_resp r;
    char body[512], hex[2 * SL_PUBKEY_LEN + 1], url[128], path[64], value[300];
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    int64_t task, now;
    uint64_t audits;
    (void)state;
    ah_fx_open(&f, "api_sign", NULL);
    task = ah_create_task(&f, SLOW_TASK);
    ah_dev_enrol(&f, &a);
    ah_dev_enrol(&f, &b);
    assert_true(a.id > 0 && b.id > a.id);

    /* the same key again: the same device (idempotent) */
    memset(&again, 0, sizeof again);
    sl_hex(a.pub, SL_PUBKEY_LEN, hex);
    snprintf(url, sizeof url, "%s/v1/devices", f.base);
    snprintf(body, sizeof body, "{\"enrolment_token\":\"%s\",\"public_key\":\"%s\"}", AH_ENROL,
             hex);
    ah_http("POST", url, NULL, 0, body, strlen(body), &r);
    assert_int_equal(r.status, 201);
    assert_int_equal(ah_json_int(r.body, "device_id"), a.id);
    assert_true(ah_header(&r, "Location", value, sizeof value));
    ah_resp_free(&r);
    /* a wrong token, a broken key: refused, and no device appears */
    {
        ah_dev c;
        uint8_t pub[SL_PUBKEY_LEN];
        sl_device_key *k;
        assert_int_equal(sl_device_key_generate(&k), SL_OK);
        assert_int_equal(sl_device_key_public(k, pub), SL_OK);
        sl_hex(pub, SL_PUBKEY_LEN, hex);
        snprintf(body, sizeof body, "{\"enrolment_token\":\"%s-x\",\"public_key\":\"%s\"}",
                 AH_ENROL, hex);
        ah_http("POST", url, NULL, 0, body, strlen(body), &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
        hex[10] = hex[10] == '0' ? '1' : '0'; /* no longer a point on the curve */
        snprintf(body, sizeof body, "{\"enrolment_token\":\"%s\",\"public_key\":\"%s\"}", AH_ENROL,
                 hex);
        ah_http("POST", url, NULL, 0, body, strlen(body), &r);
        ah_expect_problem(&r, 400, "bad-request");
        ah_resp_free(&r);
        sl_device_key_free(k);
        snprintf(path, sizeof path, "/v1/devices/%lld", (long long)(b.id + 1));
        ah_get(&f, path, auth, 1, &r);
        ah_expect_problem(&r, 404, "not-found");
        ah_resp_free(&r);
        (void)c;
    }
    snprintf(path, sizeof path, "/v1/devices/%lld", (long long)a.id);
    ah_get(&f, path, auth, 1, &r);
    assert_int_equal(r.status, 200);
    sl_hex(a.pub, SL_PUBKEY_LEN, hex);
    assert_true(ah_json_str(r.body, "public_key", value, sizeof value));
    assert_string_equal(value, hex);
    ah_resp_free(&r);

    /* a good signed check-in */
    snprintf(body, sizeof body,
             "{\"task_id\":%lld,\"num_samples\":600,\"capabilities\":[\"avx2\"]}", (long long)task);
    ah_dev_call(&f, &a, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "selected"), 0);
    assert_true(ah_json_int(r.body, "retry_after_ms") > 0);
    ah_resp_free(&r);
    assert_int_equal(ah_checked_in(&f, task), 1);
    audits = ah_audit_count(&f);

    now = ah_now_ms();
    /* unsigned */
    snprintf(url, sizeof url, "%s/v1/checkin", f.base);
    ah_http("POST", url, NULL, 0, body, strlen(body), &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* bad signature: the body differs from the one signed; its nonce is not burnt */
    raw_checkin(&f, b.key, b.id, now, "nonce-tampered-0001", body, "{\"task_id\":1}", &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* wrong key: b's signature under a's id */
    raw_checkin(&f, b.key, a.id, now, "nonce-wrongkey-0001", body, body, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* stale and future timestamps */
    raw_checkin(&f, b.key, b.id, now - 10 * 60 * 1000, "nonce-stale-000001", body, body, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    raw_checkin(&f, b.key, b.id, now + 10 * 60 * 1000, "nonce-future-00001", body, body, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* unknown device */
    raw_checkin(&f, b.key, 999999, now, "nonce-unknown-0001", body, body, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    assert_int_equal(ah_checked_in(&f, task), 1); /* none of them reached the engine */

    /* the nonce of the tampered request still works: failures change nothing */
    raw_checkin(&f, b.key, b.id, now, "nonce-tampered-0001", body, body, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    assert_int_equal(ah_checked_in(&f, task), 2);
    /* ... and is now spent: the same request again is a replay */
    raw_checkin(&f, b.key, b.id, now, "nonce-tampered-0001", body, body, &r);
    ah_expect_problem(&r, 401, "replayed");
    ah_resp_free(&r);
    assert_int_equal(ah_checked_in(&f, task), 2);
    assert_int_equal(ah_audit_count(&f), audits);

    /* a check-in for a task that does not exist */
    snprintf(body, sizeof body, "{\"task_id\":%lld}", (long long)task + 100);
    ah_dev_call(&f, &a, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    ah_dev_call(&f, &a, "POST", "/v1/checkin", "{\"task_id\":\"x\"}", 14, NULL, 0, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);

    /* a pace that is not an object of finite numbers >= 0: 400, and the check-in does not
     * reach the engine; a good one does */
    {
        static const char *const bad_pace[] = {
            "[1,2,3]",
            "{\"step_ms\":\"fast\"}",
            "{\"step_ms\":-1}",
            "{\"upload_bytes_per_s\":1e999}",
            "{\"download_bytes_per_s\":-1e999}",
            "{\"step_ms\":5,\"download_bytes_per_s\":null}",
            "7",
        };
        int64_t before = ah_checked_in(&f, task);
        for (size_t i = 0; i < sizeof bad_pace / sizeof bad_pace[0]; i++) {
            snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":600,\"pace\":%s}",
                     (long long)task, bad_pace[i]);
            ah_dev_call(&f, &a, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
            ah_expect_problem(&r, 400, "bad-request");
            assert_non_null(strstr(r.body, "pace"));
            ah_resp_free(&r);
        }
        assert_int_equal(ah_checked_in(&f, task), before); /* none reached the engine */
        snprintf(body, sizeof body,
                 "{\"task_id\":%lld,\"num_samples\":600,\"pace\":{\"step_ms\":12.5,"
                 "\"upload_bytes_per_s\":20000,\"download_bytes_per_s\":1e6}}",
                 (long long)task);
        ah_dev_call(&f, &a, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
        assert_int_equal(ah_checked_in(&f, task), before + 1);
    }
    ah_dev_free(&a);
    ah_dev_free(&b);
    ah_fx_close(&f);
}

/* ---- rate limit and in-process requests ----------------------------------------- */

static void tight_limits(sl_server_options *o)
{
    o->device_rate = 0.5;
    o->device_burst = 2;
}

void test_rate_limit_in_process(void **state)
{
    ah_fx f;
    ah_dev a;
    sl_server_response *resp;
    sl_server_header h[5];
    char names[4][64], nonce[64], body[64];
    int64_t task;
    int statuses[3];
    (void)state;
    ah_fx_open(&f, "api_rate", tight_limits);
    task = ah_create_task(&f, SLOW_TASK);
    ah_dev_enrol(&f, &a);
    snprintf(body, sizeof body, "{\"task_id\":%lld}", (long long)task);
    for (int i = 0; i < 3; i++) {
        ah_sig sig;
        assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
        ah_sign(a.key, a.id, "POST", "/v1/checkin", ah_now_ms(), nonce, body, strlen(body), &sig);
        for (int k = 0; k < 4; k++) {
            char *colon = strchr(sig.lines[k], ':');
            size_t n = (size_t)(colon - sig.lines[k]);
            memcpy(names[k], sig.lines[k], n);
            names[k][n] = '\0';
            h[k].name = names[k];
            h[k].value = colon + 2;
        }
        h[4].name = "Content-Type";
        h[4].value = "application/json";
        assert_int_equal(
            sl_server_handle(f.server, "POST", "/v1/checkin", h, 5, body, strlen(body), &resp),
            SL_OK);
        statuses[i] = sl_server_response_status(resp);
        if (i == 2) {
            const char *retry = sl_server_response_header(resp, "Retry-After");
            size_t len;
            const char *text = sl_server_response_body(resp, &len);
            assert_non_null(retry);
            assert_true(strtol(retry, NULL, 10) >= 1);
            assert_non_null(strstr(text, "https://starling.dev/problems/rate-limited"));
            assert_string_equal(sl_server_response_header(resp, "Content-Type"),
                                "application/problem+json");
        }
        sl_server_response_free(resp);
    }
    assert_int_equal(statuses[0], 200);
    assert_int_equal(statuses[1], 200);
    assert_int_equal(statuses[2], 429);
    /* a body above max_body, in process: 413 without looking at it */
    {
        size_t big = (1 << 20) + 1;
        char *junk = calloc(1, big);
        assert_int_equal(sl_server_handle(f.server, "POST", "/v1/tasks", NULL, 0, junk, big, &resp),
                         SL_OK);
        assert_int_equal(sl_server_response_status(resp), 413);
        sl_server_response_free(resp);
        free(junk);
    }
    ah_dev_free(&a);
    ah_fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_enrol_and_signatures),
        cmocka_unit_test(test_rate_limit_in_process),
        cmocka_unit_test(test_complete_round),
        cmocka_unit_test(test_create_with_body),
        cmocka_unit_test(test_model_spec_api),
        cmocka_unit_test(test_413_before_body),
        cmocka_unit_test(test_curl_cli),
        cmocka_unit_test(test_tls_and_sigterm),
        cmocka_unit_test(test_quiesce_race),
        cmocka_unit_test(test_store_options),
        cmocka_unit_test(test_kill9_mid_upload),
        cmocka_unit_test(test_openapi_schemas),
    };
    const char *base = getenv("SL_TEST_TMPDIR");
    char records[600];
    int failed;
    snprintf(records, sizeof records, "%s/api_server_records.%d.jsonl",
             base && base[0] ? base : "/tmp", (int)getpid());
    ah_record_to(records);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    if (getenv("AH_KEEP_RECORDS") == NULL)
        unlink(records);
    else
        fprintf(stderr, "records kept in %s\n", records);
    return failed;
}
