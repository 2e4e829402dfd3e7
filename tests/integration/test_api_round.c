/*
 * A complete round over HTTP: a task made by the operator, devices that
 * check in and are selected after the window, model downloads (ETag, 304,
 * ranges, deltas from a base version, safetensors), every way an upload is
 * refused (digest, malformed, layout, NaN, not selected, conflict, late,
 * wrong offset, too many bytes, wrong media type, another device's session)
 * and the resumable upload that ends in the engine; then the new version,
 * rounds, metrics reports, abort and the audit log.
 */
#include <cjson/cJSON.h>

#include "../support/sl_test.h"
#include "api_harness.h"

/* ---- a complete round ------------------------------------------------------------ */

/* starling_uploads_created_total: the upload sessions the server made. */
static uint64_t uploads_created(ah_fx *f)
{
    static const char key[] = "starling_uploads_created_total ";
    ah_resp r;
    const char *at;
    uint64_t n;
    ah_get(f, "/metrics", (const char *[]){"Authorization: Bearer " AH_ADMIN}, 1, &r);
    assert_int_equal(r.status, 200);
    at = strstr(r.body, key);
    assert_non_null(at);
    n = strtoull(at + sizeof key - 1, NULL, 10);
    ah_resp_free(&r);
    return n;
}

#define ROUND_TASK                                                                      \
    "{\"config\":{\"name\":\"round\",\"target\":2,\"quorum\":2,\"over_selection\":1.5," \
    "\"selection_window_ms\":%d,\"report_deadline_ms\":30000,\"values\":\"fp16\","      \
    "\"density\":0.1},\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%%s\"}"

void test_complete_round(void **state)
{
    ah_fx f;
    ah_dev dev[4]; /* a, b, c selected; d checks in too late */
    ah_resp r;
    sl_layout *layout, *other;
    char path[160], etag[80], value[200], id[40], late_id[40], body[160];
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    float *v1, *v2, *v2_delta;
    void *good, *frame;
    size_t good_len, len, n;
    int64_t task, round, round2;
    uint64_t audits;
    uint8_t wrong_sha[32] = {1};
    long status;
    (void)state;
    ah_fx_open(&f, "api_round", NULL);
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    assert_int_equal(sl_layout_parse("w 4 8\nb 5\n", 10, &other), SL_OK);
    n = (size_t)sl_layout_params(layout);
    v1 = calloc(n, sizeof *v1);
    v2 = calloc(n, sizeof *v2);
    v2_delta = calloc(n, sizeof *v2_delta);

    /* creating a task needs the token; bad input changes nothing */
    {
        char url[128];
        snprintf(url, sizeof url, "%s/v1/tasks", f.base);
        ah_http("POST", url, NULL, 0, "{}", 2, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
        const char *bogus = "{\"config\":{\"name\":\"x\",\"target\":1,\"bogus\":1},"
                            "\"layout\":\"w 2\",\"model\":\"AAAA\"}";
        const char *bad64 = "{\"config\":{\"name\":\"x\",\"target\":1},\"layout\":\"w 2\","
                            "\"model\":\"!!\"}";
        ah_admin(&f, "POST", "/v1/tasks", bogus, strlen(bogus), &r);
        ah_expect_reason(&r, 422, "unprocessable", "config");
        ah_resp_free(&r);
        ah_admin(&f, "POST", "/v1/tasks", bad64, strlen(bad64), &r);
        ah_expect_problem(&r, 400, "bad-request");
        ah_resp_free(&r);
        assert_int_equal(ah_audit_count(&f), 0);
    }
    {
        char fmt[512];
        snprintf(fmt, sizeof fmt, ROUND_TASK, 300 * sl_test_time_scale());
        task = ah_create_task(&f, fmt);
    }
    assert_int_equal(ah_audit_count(&f), 1);
    for (int i = 0; i < 4; i++)
        ah_dev_enrol(&f, &dev[i]);

    /* selection: a, b, c join the pool; after the window they are selected */
    for (int i = 0; i < 3; i++) {
        ah_checkin(&f, &dev[i], task, &r);
        assert_int_equal(ah_json_int(r.body, "selected"), 0);
        ah_resp_free(&r);
    }
    usleep((useconds_t)(450000 * sl_test_time_scale()));
    for (int i = 0; i < 3; i++) {
        ah_checkin(&f, &dev[i], task, &r);
        assert_int_equal(ah_json_int(r.body, "selected"), 1);
        round = ah_json_int(r.body, "round_id");
        assert_int_equal(ah_json_int(r.body, "model_version"), 1);
        assert_non_null(strstr(r.body, "\"values\":\"fp16\""));
        assert_non_null(strstr(r.body, "\"training\":{\"epochs\":1"));
        ah_resp_free(&r);
    }
    ah_checkin(&f, &dev[3], task, &r);
    assert_int_equal(ah_json_int(r.body, "selected"), 0);
    ah_resp_free(&r);

    /* download: ETag, 304, ranges, 416, latest, unsigned */
    snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)task);
    ah_download(&f, &dev[0], layout, path, NULL, 0, v1, etag, sizeof etag);
    {
        char inm[120], rng[64];
        const char *h1[] = {inm};
        const char *h2[] = {rng};
        ah_resp full;
        snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, h1, 1, &r);
        assert_int_equal(r.status, 304);
        assert_int_equal(r.len, 0);
        ah_resp_free(&r);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, NULL, 0, &full);
        snprintf(rng, sizeof rng, "Range: bytes=3-12");
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, h2, 1, &r);
        assert_int_equal(r.status, 206);
        assert_int_equal(r.len, 10);
        assert_memory_equal(r.body, full.body + 3, 10);
        assert_true(ah_header(&r, "Content-Range", value, sizeof value));
        snprintf(rng, sizeof rng, "bytes 3-12/%zu", full.len);
        assert_string_equal(value, rng);
        ah_resp_free(&r);
        snprintf(rng, sizeof rng, "Range: bytes=%zu-", full.len - 5);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, h2, 1, &r);
        assert_int_equal(r.status, 206);
        assert_int_equal(r.len, 5);
        assert_memory_equal(r.body, full.body + full.len - 5, 5);
        ah_resp_free(&r);
        snprintf(rng, sizeof rng, "Range: bytes=%zu-", full.len);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, h2, 1, &r);
        ah_expect_problem(&r, 416, "range-not-satisfiable");
        assert_true(ah_header(&r, "Content-Range", value, sizeof value));
        ah_resp_free(&r);
        ah_resp_free(&full);
        snprintf(path, sizeof path, "/v1/models/latest?task=%lld", (long long)task);
        ah_dev_call(&f, &dev[1], "GET", path, NULL, 0, h1, 1, &r);
        assert_int_equal(r.status, 304);
        ah_resp_free(&r);
        ah_get(&f, path, NULL, 0, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
        ah_get(&f, path, auth, 1, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
        snprintf(path, sizeof path, "/v1/models/7?task=%lld", (long long)task);
        ah_dev_call(&f, &dev[1], "GET", path, NULL, 0, NULL, 0, &r);
        ah_expect_problem(&r, 404, "not-found");
        ah_resp_free(&r);
    }

    /* device a: every way an upload can be refused, then a good one in chunks */
    ah_update(layout, round, 1, 0.25f, &good, &good_len);
    ah_upload_create(&f, &dev[0], round, good, good_len, wrong_sha, id, sizeof id);
    ah_upload_patch(&f, &dev[0], id, 0, good, good_len, &r);
    ah_expect_reason(&r, 422, "unprocessable", "digest_mismatch");
    ah_resp_free(&r);
    ah_upload_head(&f, &dev[0], id, &status);
    assert_int_equal(status, 410); /* the session was discarded */
    frame = malloc(64);
    memset(frame, 0x5a, 64);
    ah_upload_all(&f, &dev[0], round, frame, 64, NULL, &r);
    ah_expect_reason(&r, 422, "unprocessable", "malformed");
    ah_resp_free(&r);
    free(frame);
    ah_update(other, round, 1, 0.25f, &frame, &len);
    ah_upload_all(&f, &dev[0], round, frame, len, NULL, &r);
    ah_expect_reason(&r, 422, "unprocessable", "layout");
    ah_resp_free(&r);
    free(frame);
    ah_update(layout, round, 1, 1234.5f, &frame, &len);
    assert_true(ah_poison(frame, len, 1234.5f));
    ah_upload_all(&f, &dev[0], round, frame, len, NULL, &r);
    ah_expect_reason(&r, 422, "unprocessable", "nonfinite");
    ah_resp_free(&r);
    free(frame);

    ah_upload_create(&f, &dev[0], round, good, good_len, NULL, id, sizeof id);
    ah_upload_patch(&f, &dev[0], id, 0, good, 20, &r);
    assert_int_equal(r.status, 204);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "20");
    ah_resp_free(&r);
    ah_upload_patch(&f, &dev[0], id, 0, good, 20, &r); /* stale offset */
    ah_expect_problem(&r, 409, "conflict");
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "20");
    ah_resp_free(&r);
    ah_upload_patch(&f, &dev[0], id, 20, good, good_len, &r); /* more than declared */
    ah_expect_problem(&r, 413, "payload-too-large");
    ah_resp_free(&r);
    {
        char off[32];
        const char *wrong_type[] = {"Content-Type: application/json", off};
        snprintf(off, sizeof off, "Upload-Offset: 20");
        snprintf(path, sizeof path, "/v1/uploads/%s", id);
        ah_dev_call(&f, &dev[0], "PATCH", path, good, 5, wrong_type, 2, &r);
        ah_expect_problem(&r, 415, "unsupported-media-type");
        ah_resp_free(&r);
    }
    ah_upload_patch(&f, &dev[1], id, 20, (char *)good + 20, 5, &r); /* another device's session */
    ah_expect_problem(&r, 403, "forbidden");
    ah_resp_free(&r);
    assert_int_equal(ah_upload_head(&f, &dev[0], id, &status), 20); /* nothing changed */
    assert_int_equal(status, 200);
    ah_upload_patch(&f, &dev[0], id, 20, (char *)good + 20, 10, &r);
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);
    assert_int_equal(ah_upload_head(&f, &dev[0], id, &status), 30); /* resume from here */
    ah_upload_patch(&f, &dev[0], id, 30, (char *)good + 30, good_len - 30, &r);
    if (r.status != 200)
        fail_msg("final PATCH: %ld %s", r.status, r.body);
    assert_int_equal(ah_json_int(r.body, "accepted"), 1);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 0);
    ah_resp_free(&r);
    ah_upload_head(&f, &dev[0], id, &status);
    assert_int_equal(status, 404); /* the session is gone once the update is stored */
    /* the same update again: acknowledged as a duplicate, not counted twice */
    ah_upload_all(&f, &dev[0], round, good, good_len, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 1);
    ah_resp_free(&r);
    /* a different update from a: conflict */
    ah_update(layout, round, 1, 0.5f, &frame, &len);
    ah_upload_all(&f, &dev[0], round, frame, len, NULL, &r);
    ah_expect_reason(&r, 409, "conflict", "duplicate_conflict");
    ah_resp_free(&r);
    free(frame);

    /* d was not selected: refused before any session (which would reserve the update's
     * length on disk for a day), in the JSON form, with some of the bytes and with all */
    ah_update(layout, round, 1, 0.125f, &frame, &len);
    {
        uint64_t created = uploads_created(&f);
        char hex[65];
        uint8_t sha[32];
        sl_sha256(frame, len, sha);
        sl_hex(sha, 32, hex);
        snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
        snprintf(body, sizeof body, "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":4}", len,
                 hex);
        ah_dev_call(&f, &dev[3], "POST", path, body, strlen(body), NULL, 0, &r);
        ah_expect_reason(&r, 409, "conflict", "not_selected");
        assert_false(ah_header(&r, "Location", value, sizeof value));
        ah_resp_free(&r);
        ah_upload_create_with(&f, &dev[3], round, frame, len, 10, NULL, &r);
        ah_expect_reason(&r, 409, "conflict", "not_selected");
        assert_false(ah_header(&r, "Location", value, sizeof value));
        ah_resp_free(&r);
        ah_upload_create_with(&f, &dev[3], round, frame, len, len, NULL, &r);
        ah_expect_reason(&r, 409, "conflict", "not_selected");
        ah_resp_free(&r);
        assert_int_equal(uploads_created(&f), created);
    }
    free(frame);
    /* c starts an upload the round will not wait for */
    ah_update(layout, round, 1, 0.375f, &frame, &len);
    ah_upload_create(&f, &dev[2], round, frame, len, NULL, late_id, sizeof late_id);
    ah_upload_patch(&f, &dev[2], late_id, 0, frame, 10, &r);
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);
    {
        sl_round_stats st;
        assert_int_equal(sl_engine_round_stats(f.engine, round, &st), SL_OK);
        assert_int_equal(st.round.reported, 1);
        assert_int_equal(st.round.state, SL_ROUND_TRAINING);
    }
    /* b's update meets the target: the round closes before b hears 200 */
    {
        void *b_frame;
        size_t b_len;
        ah_update(layout, round, 1, -0.5f, &b_frame, &b_len);
        ah_upload_all(&f, &dev[1], round, b_frame, b_len, NULL, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
        free(b_frame);
    }
    ah_upload_patch(&f, &dev[2], late_id, 10, (char *)frame + 10, len - 10, &r);
    ah_expect_reason(&r, 410, "late", "late");
    ah_resp_free(&r);
    free(frame);
    snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
    snprintf(body, sizeof body, "{\"length\":10,\"sha256\":\"%064d\"}", 0);
    ah_dev_call(&f, &dev[2], "POST", path, body, strlen(body), NULL, 0, &r);
    ah_expect_problem(&r, 410, "late");
    ah_resp_free(&r);

    /* the new version: status, full download, delta from version 1 */
    ah_get(&f, "/v1/status", auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"model_version\":2"));
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/models/2?task=%lld", (long long)task);
    ah_download(&f, &dev[0], layout, path, NULL, 0, v2, etag, sizeof etag);
    assert_memory_not_equal(v1, v2, n * sizeof *v1);
    /* HEAD of the latest: its version and ETag without the bytes (how the evaluator learns
     * of a new version), 304 with If-None-Match */
    {
        char got[80], inm[120];
        const char *extra[1];
        snprintf(path, sizeof path, "/v1/models/latest?task=%lld", (long long)task);
        ah_dev_call(&f, &dev[0], "HEAD", path, NULL, 0, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, 0);
        assert_int_equal(ah_header(&r, "X-Starling-Model-Version", got, sizeof got), 1);
        assert_string_equal(got, "2");
        assert_int_equal(ah_header(&r, "ETag", got, sizeof got), 1);
        assert_string_equal(got, etag);
        ah_resp_free(&r);
        snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
        extra[0] = inm;
        ah_dev_call(&f, &dev[0], "HEAD", path, NULL, 0, extra, 1, &r);
        assert_int_equal(r.status, 304);
        ah_resp_free(&r);
    }
    snprintf(path, sizeof path, "/v1/models/2?task=%lld&base=1", (long long)task);
    ah_download(&f, &dev[0], layout, path, v1, 1, v2_delta, value, sizeof value);
    assert_memory_equal(v2, v2_delta, n * sizeof *v2);
    assert_string_not_equal(etag, value);
    {
        char again[80];
        ah_download(&f, &dev[1], layout, path, v1, 1, v2_delta, again, sizeof again);
        assert_string_equal(again, value); /* served from the cache, same bytes */
    }
    /* ?sparse=1: the same model from a smaller delta (the sparse body, coding 2: the frame's
     * byte after the envelope's 18 and the 1-byte count of 36 parameters); ?sparse=0 the
     * dense body; anything else refused */
    {
        char sparse_etag[80];
        size_t dense_len;
        snprintf(path, sizeof path, "/v1/models/2?task=%lld&base=1&sparse=0", (long long)task);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal((uint8_t)r.body[19], 1); /* Zstandard */
        dense_len = r.len;
        ah_resp_free(&r);
        snprintf(path, sizeof path, "/v1/models/2?task=%lld&base=1&sparse=1", (long long)task);
        ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal((uint8_t)r.body[19], 2); /* sparse */
        assert_true(r.len < dense_len);
        ah_resp_free(&r);
        memset(v2_delta, 0, n * sizeof *v2_delta);
        ah_download(&f, &dev[0], layout, path, v1, 1, v2_delta, sparse_etag, sizeof sparse_etag);
        assert_memory_equal(v2, v2_delta, n * sizeof *v2);
        assert_string_not_equal(sparse_etag, value);
        /* refused whatever the value's length, and before a body is made: a value too long
         * for the parser's buffer, an empty one */
        {
            static const char *const bad[] = {"yes", "11111111111111111111111111111111", "", "2"};
            for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                snprintf(path, sizeof path, "/v1/models/2?task=%lld&base=1&sparse=%s",
                         (long long)task, bad[i]);
                ah_dev_call(&f, &dev[0], "GET", path, NULL, 0, NULL, 0, &r);
                ah_expect_problem(&r, 400, "bad-request");
                ah_resp_free(&r);
            }
        }
        /* without a base there is no delta: ?sparse=1 gets the full model, the same bytes and
         * ETag as without it */
        {
            char full_etag[80];
            snprintf(path, sizeof path, "/v1/models/2?task=%lld&sparse=1", (long long)task);
            memset(v2_delta, 0, n * sizeof *v2_delta);
            ah_download(&f, &dev[0], layout, path, NULL, 0, v2_delta, full_etag, sizeof full_etag);
            assert_memory_equal(v2, v2_delta, n * sizeof *v2);
            assert_string_equal(full_etag, etag);
        }
    }
    /* safetensors: the header describes the layout, the data is v2 */
    snprintf(path, sizeof path, "/v1/models/latest?task=%lld&format=safetensors", (long long)task);
    ah_get(&f, path, NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    ah_get(&f, path, auth, 1, &r);
    assert_int_equal(r.status, 200);
    {
        uint64_t hlen = 0;
        cJSON *hdr, *w;
        for (int i = 0; i < 8; i++)
            hlen |= (uint64_t)(uint8_t)r.body[i] << (8 * i);
        assert_true(8 + hlen + n * 4 == r.len);
        hdr = cJSON_ParseWithLength(r.body + 8, (size_t)hlen);
        assert_non_null(hdr);
        w = cJSON_GetObjectItem(hdr, "w");
        assert_string_equal(cJSON_GetObjectItem(w, "dtype")->valuestring, "F32");
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(w, "shape")), 2);
        assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(w, "data_offsets"), 1)->valueint,
                         128);
        assert_int_equal(cJSON_GetArrayItem(
                             cJSON_GetObjectItem(cJSON_GetObjectItem(hdr, "b"), "data_offsets"), 0)
                             ->valueint,
                         128);
        assert_memory_equal(r.body + 8 + hlen, v2, n * 4); /* little-endian host */
        cJSON_Delete(hdr);
    }
    ah_resp_free(&r);

    /* operators: rounds, a round, metrics reports, abort */
    snprintf(path, sizeof path, "/v1/rounds?task=%lld&limit=10", (long long)task);
    ah_get(&f, path, auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"state\":\"closed\""));
    assert_non_null(strstr(r.body, "\"state\":\"selecting\""));
    ah_resp_free(&r);
    ah_get(&f, "/v1/rounds?task=abc", auth, 1, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)round);
    ah_get(&f, path, auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "reported"), 2);
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/models/2/metrics");
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"loss\":0.5,\"accuracy\":0.8,\"samples\":100}",
             (long long)task);
    /* a device's metrics are its federated evaluation of the base model of the open round it
     * takes part in: version 2 is not that (its round closed): refused, not silently dropped */
    ah_dev_call(&f, &dev[0], "POST", path, body, strlen(body), NULL, 0, &r);
    ah_expect_problem(&r, 409, "conflict");
    ah_resp_free(&r);
    ah_admin(&f, "POST", path, body, strlen(body), &r); /* the evaluator */
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);
    ah_dev_call(&f, &dev[0], "POST", path, "{\"task_id\":1,\"loss\":-1}", 23, NULL, 0, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    {
        /* a negative or non-numeric regression metric, or no metric beside the loss */
        static const char *const bad[] = {
            "{\"task_id\":1,\"loss\":0.5,\"mae\":-1,\"samples\":10}",
            "{\"task_id\":1,\"loss\":0.5,\"rmse\":\"x\",\"samples\":10}",
            "{\"task_id\":1,\"loss\":0.5,\"samples\":10}",
            "{\"task_id\":1,\"loss\":0.5,\"accuracy\":1.5,\"samples\":10}"};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            ah_admin(&f, "POST", path, bad[i], strlen(bad[i]), &r);
            ah_expect_problem(&r, 400, "bad-request");
            ah_resp_free(&r);
        }
    }
    {
        sl_model_record m;
        assert_int_equal(sl_store_get_model(f.store, task, 2, &m), SL_OK);
        assert_non_null(m.metrics);
        assert_non_null(strstr(m.metrics, "\"accuracy\":0.8"));
        sl_store_model_free(&m);
    }
    {
        sl_task_status st;
        assert_int_equal(sl_engine_task_status(f.engine, task, &st), SL_OK);
        round2 = st.round.id;
        assert_true(round2 != round);
    }
    audits = ah_audit_count(&f);
    snprintf(path, sizeof path, "/v1/rounds/%lld/abort", (long long)round2);
    {
        char url[256];
        snprintf(url, sizeof url, "%s%s", f.base, path);
        ah_http("POST", url, NULL, 0, NULL, 0, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
    }
    assert_int_equal(ah_audit_count(&f), audits);
    ah_admin(&f, "POST", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    assert_int_equal(ah_audit_count(&f), audits + 1);
    ah_admin(&f, "POST", path, NULL, 0, &r);
    ah_expect_problem(&r, 409, "conflict");
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)round2);
    ah_get(&f, path, auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"state\":\"abandoned\""));
    ah_resp_free(&r);

    ah_get(&f, "/metrics", auth, 1, &r);
    ah_check_prometheus(r.body);
    assert_non_null(strstr(r.body, "starling_updates_rejected_total{reason=\"malformed\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_updates_rejected_total{reason=\"nonfinite\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_updates_rejected_total{reason=\"layout\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_updates_rejected_total{reason=\"late\"} 1\n"));
    assert_non_null(
        strstr(r.body, "starling_updates_rejected_total{reason=\"digest_mismatch\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_uploads_completed_total 3\n"));
    assert_non_null(strstr(r.body, "starling_rounds{task=\"1\",state=\"closed\"} 1\n"));
    assert_non_null(strstr(r.body, "starling_model_version{task=\"1\"} 2\n"));
    ah_resp_free(&r);
    ah_get(&f, "/", auth, 1, &r);
    assert_non_null(strstr(r.body, "<td>round</td>"));
    assert_non_null(strstr(r.body, "abandoned"));
    ah_resp_free(&r);

    free(good);
    free(v1);
    free(v2);
    free(v2_delta);
    for (int i = 0; i < 4; i++)
        ah_dev_free(&dev[i]);
    sl_layout_free(layout);
    sl_layout_free(other);
    ah_fx_close(&f);
}

/* ---- creation with upload ---------------------------------------------------------- */

#define BODY_TASK                                                                     \
    "{\"config\":{\"name\":\"cwb\",\"target\":3,\"quorum\":1,\"over_selection\":1.0," \
    "\"selection_window_ms\":%d,\"report_deadline_ms\":30000,\"values\":\"fp16\","    \
    "\"density\":0.1},\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%%s\"}"

/* A connection cut mid-body is closed by libmicrohttpd at its idle timeout
 * when the cut arrives with the last bytes (it then waits for more): short
 * here, so the fixture drains in time. */
static void short_idle_timeout(sl_server_options *o)
{
    o->connection_timeout_s = 1;
}

/* No update of @d is stored for @round with the digest of @frame. */
static void expect_nothing_stored(ah_fx *f, const ah_dev *d, int64_t round, const void *frame,
                                  size_t len)
{
    sl_store_receipt receipt;
    uint8_t sha[32];
    sl_sha256(frame, len, sha);
    assert_int_equal(sl_store_get_receipt(f->store, round, d->id, sha, &receipt), SL_ENOENT);
}

/*
 * POST /v1/rounds/{round}/uploads with the first bytes: all of them
 * complete the upload in that request (durable before the answer, a copy
 * is a duplicate); some of them open a session at that offset, and a create
 * sent again finds it (idempotent); a create cut mid-body leaves nothing; a
 * wrong digest is refused with nothing stored; a body beyond the declared
 * length is 413, and so is a declared length beyond the model's dense update;
 * a query without the declared values is 400; a device holding too many
 * sessions for other rounds is 429 without a new one.
 */
void test_create_with_body(void **state)
{
    ah_fx f;
    ah_dev dev[3]; /* a: whole frame; b: refusals, then in parts; c: cut, then whole */
    ah_resp r;
    sl_layout *layout;
    char value[200], location[200], path[300];
    void *frame[3];
    size_t len[3];
    int64_t task, round = 0;
    uint8_t wrong_sha[32] = {7};
    long status;
    (void)state;
    ah_fx_open(&f, "api_create_body", short_idle_timeout);
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    {
        char fmt[512];
        snprintf(fmt, sizeof fmt, BODY_TASK, 300 * sl_test_time_scale());
        task = ah_create_task(&f, fmt);
    }
    for (int i = 0; i < 3; i++) {
        ah_dev_enrol(&f, &dev[i]);
        ah_checkin(&f, &dev[i], task, &r);
        ah_resp_free(&r);
    }
    usleep((useconds_t)(450000 * sl_test_time_scale()));
    for (int i = 0; i < 3; i++) {
        ah_checkin(&f, &dev[i], task, &r);
        assert_int_equal(ah_json_int(r.body, "selected"), 1);
        round = ah_json_int(r.body, "round_id");
        ah_resp_free(&r);
        ah_update(layout, round, 1, 0.25f * (float)(i + 1), &frame[i], &len[i]);
        assert_true(len[i] > 40);
    }

    /* a: the whole frame with the create: stored durably, answered 200, no session */
    ah_upload_create_with(&f, &dev[0], round, frame[0], len[0], len[0], NULL, &r);
    if (r.status != 200)
        fail_msg("create with the whole frame: %ld %s", r.status, r.body);
    assert_int_equal(ah_json_int(r.body, "accepted"), 1);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 0);
    assert_int_equal(ah_json_int(r.body, "round_id"), round);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_int_equal(strtoull(value, NULL, 10), len[0]);
    assert_false(ah_header(&r, "Location", value, sizeof value));
    ah_resp_free(&r);
    {
        sl_round_stats st;
        assert_int_equal(sl_engine_round_stats(f.engine, round, &st), SL_OK);
        assert_int_equal(st.round.reported, 1);
    }
    /* sent again (its answer lost): the original receipt, not counted twice */
    ah_upload_create_with(&f, &dev[0], round, frame[0], len[0], len[0], NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 1);
    ah_resp_free(&r);

    /* b: a digest that is not the bytes': 422, nothing stored, no session */
    ah_upload_create_with(&f, &dev[1], round, frame[1], len[1], len[1], wrong_sha, &r);
    ah_expect_reason(&r, 422, "unprocessable", "digest_mismatch");
    assert_false(ah_header(&r, "Location", value, sizeof value));
    ah_resp_free(&r);
    expect_nothing_stored(&f, &dev[1], round, frame[1], len[1]);
    /* a declared length beyond what the task's model can need (a dense fp32 update): 413
     * before any session, which would reserve that much disk; a few such requests used to
     * reserve 256 MiB each */
    ah_upload_create_with(&f, &dev[1], round, frame[1], (size_t)64 << 20, 10, wrong_sha, &r);
    ah_expect_problem(&r, 413, "payload-too-large");
    assert_non_null(strstr(r.body, "dense"));
    assert_false(ah_header(&r, "Location", value, sizeof value));
    ah_resp_free(&r);
    /* more bytes than declared: 413; no declared values: 400; nothing stored */
    {
        uint8_t *longer = malloc(len[1] + 1);
        memcpy(longer, frame[1], len[1]);
        longer[len[1]] = 0;
        ah_upload_create_with(&f, &dev[1], round, longer, len[1], len[1] + 1, NULL, &r);
        ah_expect_problem(&r, 413, "payload-too-large");
        ah_resp_free(&r);
        free(longer);
        const char *octets[] = {"Content-Type: application/offset+octet-stream"};
        snprintf(path, sizeof path, "/v1/rounds/%lld/uploads?length=%zu", (long long)round, len[1]);
        ah_dev_call(&f, &dev[1], "POST", path, frame[1], len[1], octets, 1, &r);
        ah_expect_problem(&r, 400, "bad-request");
        ah_resp_free(&r);
    }
    expect_nothing_stored(&f, &dev[1], round, frame[1], len[1]);
    /* local_steps that is not an integer in [0, 2^32): 400, in the query (bytes) form and in
     * the JSON form; above what any task allows (1,000,000): 422 "steps"; nothing stored */
    {
        static const char *const bad_steps[] = {"-1", "4294967296", "1.5", "x", "", "1e3"};
        const char *octets[] = {"Content-Type: application/offset+octet-stream"};
        char hex[65], body[256];
        uint8_t sha[32];
        sl_sha256(frame[1], len[1], sha);
        sl_hex(sha, 32, hex);
        for (size_t i = 0; i < sizeof bad_steps / sizeof bad_steps[0]; i++) {
            snprintf(path, sizeof path,
                     "/v1/rounds/%lld/uploads?length=%zu&sha256=%s&num_samples=4&local_steps=%s",
                     (long long)round, len[1], hex, bad_steps[i]);
            ah_dev_call(&f, &dev[1], "POST", path, frame[1], len[1], octets, 1, &r);
            ah_expect_problem(&r, 400, "bad-request");
            assert_non_null(strstr(r.body, "local_steps"));
            ah_resp_free(&r);
            if (bad_steps[i][0] == '\0' || strcmp(bad_steps[i], "x") == 0)
                continue; /* JSON: a string or nothing is not a number either (below) */
            snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
            snprintf(body, sizeof body,
                     "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":4,\"local_steps\":%s}",
                     len[1], hex, strcmp(bad_steps[i], "1e3") == 0 ? "\"1000\"" : bad_steps[i]);
            ah_dev_call(&f, &dev[1], "POST", path, body, strlen(body), NULL, 0, &r);
            ah_expect_problem(&r, 400, "bad-request");
            assert_non_null(strstr(r.body, "local_steps"));
            ah_resp_free(&r);
        }
        snprintf(path, sizeof path,
                 "/v1/rounds/%lld/uploads?length=%zu&sha256=%s&num_samples=4&local_steps=1000001",
                 (long long)round, len[1], hex);
        ah_dev_call(&f, &dev[1], "POST", path, frame[1], len[1], octets, 1, &r);
        ah_expect_reason(&r, 422, "unprocessable", "steps");
        ah_resp_free(&r);
    }
    expect_nothing_stored(&f, &dev[1], round, frame[1], len[1]);

    /* a device holding SL_STORE_UPLOADS_PER_DEVICE live sessions for other rounds (here of
     * another task, made in the store) gets 429 too_many_uploads and no session; once one is
     * gone it gets its session */
    {
        sl_upload_record other = {0};
        sl_round_record rr = {0};
        int64_t t2;
        uint64_t created = uploads_created(&f);
        assert_int_equal(sl_store_create_task(f.store, "other", "{}", "w 10\n", &t2), SL_OK);
        other.device_id = dev[1].id;
        other.length = 100;
        other.expires_at_ms = sl_clock_wall_ns(NULL) / 1000000 + 3600000;
        for (int i = 0; i < SL_STORE_UPLOADS_PER_DEVICE; i++) {
            rr.id = 0;
            rr.task_id = t2;
            rr.round_no = i + 1;
            rr.base_version = 1;
            rr.state = SL_ROUND_TRAINING;
            rr.target = 1;
            assert_int_equal(sl_store_create_round(f.store, &rr), SL_OK);
            snprintf(other.id, sizeof other.id, "held-%d", i);
            other.round_id = rr.id;
            assert_int_equal(sl_store_create_upload(f.store, &other), SL_OK);
        }
        ah_upload_create_with(&f, &dev[1], round, frame[1], len[1], 10, NULL, &r);
        ah_expect_reason(&r, 429, "too-many-requests", "too_many_uploads");
        assert_true(ah_header(&r, "Retry-After", value, sizeof value));
        assert_false(ah_header(&r, "Location", value, sizeof value));
        ah_resp_free(&r);
        assert_int_equal(uploads_created(&f), created);
        for (int i = 0; i < SL_STORE_UPLOADS_PER_DEVICE; i++) {
            snprintf(other.id, sizeof other.id, "held-%d", i);
            assert_int_equal(sl_store_delete_upload(f.store, other.id), SL_OK);
        }
    }

    /* b in parts: 10 bytes with the create, the rest by PATCH */
    ah_upload_create_with(&f, &dev[1], round, frame[1], len[1], 10, NULL, &r);
    if (r.status != 201)
        fail_msg("create with 10 bytes: %ld %s", r.status, r.body);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "10");
    assert_int_equal(ah_json_int(r.body, "offset"), 10);
    assert_true(ah_header(&r, "Location", location, sizeof location));
    ah_resp_free(&r);
    /* the same create again (its answer lost): the same session, still at 10 */
    ah_upload_create_with(&f, &dev[1], round, frame[1], len[1], 10, NULL, &r);
    assert_int_equal(r.status, 201);
    assert_true(ah_header(&r, "Location", value, sizeof value));
    assert_string_equal(value, location);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "10");
    ah_resp_free(&r);
    assert_int_equal(ah_upload_head(&f, &dev[1], location + 12, &status), 10);
    assert_int_equal(status, 200);
    expect_nothing_stored(&f, &dev[1], round, frame[1], len[1]);
    ah_upload_patch(&f, &dev[1], location + 12, 10, (char *)frame[1] + 10, len[1] - 10, &r);
    if (r.status != 200)
        fail_msg("PATCH after a create with bytes: %ld %s", r.status, r.body);
    assert_int_equal(ah_json_int(r.body, "accepted"), 1);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 0);
    ah_resp_free(&r);
    ah_upload_head(&f, &dev[1], location + 12, &status);
    assert_int_equal(status, 404); /* completed: the session is gone */

    /* c: a create with the whole frame cut mid-body leaves nothing behind */
    ah_upload_create_cut(&f, &dev[2], round, frame[2], len[2], len[2], len[2] / 2);
    /* a create with some bytes cut mid-body leaves no session either: sent
     * again, it opens one at offset 0 and takes its bytes */
    ah_upload_create_cut(&f, &dev[2], round, frame[2], len[2], 20, 10);
    usleep(100000);
    expect_nothing_stored(&f, &dev[2], round, frame[2], len[2]);
    ah_upload_create_with(&f, &dev[2], round, frame[2], len[2], 20, NULL, &r);
    assert_int_equal(r.status, 201);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "20");
    assert_true(ah_header(&r, "Location", location, sizeof location));
    ah_resp_free(&r);
    /* a whole-frame create for a session already open completes at once; the
     * session stays until it expires (the engine has the update) */
    ah_upload_create_with(&f, &dev[2], round, frame[2], len[2], len[2], NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "accepted"), 1);
    ah_resp_free(&r);
    ah_upload_patch(&f, &dev[2], location + 12, 20, (char *)frame[2] + 20, len[2] - 20, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "duplicate"), 1);
    ah_resp_free(&r);

    ah_get(&f, "/metrics", (const char *[]){"Authorization: Bearer " AH_ADMIN}, 1, &r);
    assert_non_null(
        strstr(r.body, "starling_updates_rejected_total{reason=\"digest_mismatch\"} 1\n"));
    ah_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        free(frame[i]);
        ah_dev_free(&dev[i]);
    }
    sl_layout_free(layout);
    ah_fx_close(&f);
}

/*
 * A task's model spec over REST: created with the task (422 with field model_spec when its
 * params are not the layout's, nothing stored), served as stored with its SHA-256 as ETag (to
 * operators and signed devices; 404 for a task without one), named in check-ins; a device's
 * refusal is recorded, shown in GET /v1/devices/{id}, and cleared by a check-in without one.
 */
void test_model_spec_api(void **state)
{
#define SPEC_PARAMS "\"params\":[{\"name\":\"w\",\"shape\":[4,8]},{\"name\":\"b\",\"shape\":[4]}]"
#define SPEC_TASK(name, params)                                                       \
    "{\"config\":{\"name\":\"" name "\",\"target\":2},\"layout\":\"w 4 8\\nb 4\\n\"," \
    "\"model\":\"%s\",\"model_spec\":{\"starling_model\":1,\"name\":\"lin\"," params "}}"
    ah_fx f;
    ah_dev dev;
    ah_resp r;
    void *frame;
    size_t len;
    char *b64, body[2048], path[96], value[128], hex[65], etag[70];
    uint8_t sha[32];
    int64_t task, plain;
    (void)state;
    ah_fx_open(&f, "api_model_spec", NULL);
    ah_initial_model(&frame, &len, &b64);
    /* params that are not the layout's: 422, nothing stored */
    snprintf(body, sizeof body,
             SPEC_TASK("bad", "\"params\":[{\"name\":\"w\",\"shape\":[8,4]},"
                              "{\"name\":\"b\",\"shape\":[4]}]"),
             b64);
    ah_admin(&f, "POST", "/v1/tasks", body, strlen(body), &r);
    ah_expect_reason(&r, 422, "unprocessable", "model_spec");
    assert_non_null(strstr(r.body, "another shape than the layout"));
    ah_resp_free(&r);
    snprintf(body, sizeof body,
             "{\"config\":{\"name\":\"bad2\"},\"layout\":\"w 4 8\\nb 4\\n\","
             "\"model\":\"%s\",\"model_spec\":[1]}",
             b64);
    ah_admin(&f, "POST", "/v1/tasks", body, strlen(body), &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    snprintf(body, sizeof body, SPEC_TASK("spec", SPEC_PARAMS), b64);
    free(b64);
    free(frame);
    task = ah_create_task(&f, body);
    assert_int_equal(task, 1); /* the refused ones left nothing */
    plain = ah_create_task(
        &f, "{\"config\":{\"name\":\"plain\",\"target\":2},\"layout\":\"w 4 8\\nb 4\\n\","
            "\"model\":\"%s\"}");
    /* served as stored, ETag its SHA-256 */
    snprintf(path, sizeof path, "/v1/tasks/%lld/model-spec", (long long)task);
    ah_admin(&f, "GET", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"starling_model\":1,\"name\":\"lin\"," SPEC_PARAMS "}");
    sl_sha256(r.body, strlen(r.body), sha);
    sl_hex(sha, 32, hex);
    snprintf(etag, sizeof etag, "\"%s\"", hex);
    assert_true(ah_header(&r, "ETag", value, sizeof value));
    assert_string_equal(value, etag);
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/tasks/%lld/model-spec", (long long)plain);
    ah_admin(&f, "GET", path, NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    /* a device: unsigned is refused, signed reads it; check-ins name its hash */
    ah_dev_enrol(&f, &dev);
    snprintf(path, sizeof path, "/v1/tasks/%lld/model-spec", (long long)task);
    ah_get(&f, path, NULL, 0, &r);
    assert_int_equal(r.status, 401);
    ah_resp_free(&r);
    ah_dev_call(&f, &dev, "GET", path, NULL, 0, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    ah_checkin(&f, &dev, task, &r);
    assert_true(ah_json_str(r.body, "model_spec_sha256", value, sizeof value));
    assert_string_equal(value, hex);
    ah_resp_free(&r);
    ah_checkin(&f, &dev, plain, &r);
    assert_false(ah_json_str(r.body, "model_spec_sha256", value, sizeof value));
    ah_resp_free(&r);
    /* a refusal: recorded and shown; a bad one is 400 and changes nothing */
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"refusal\":7}", (long long)task);
    ah_dev_call(&f, &dev, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    snprintf(body, sizeof body,
             "{\"task_id\":%lld,\"num_samples\":100,\"refusal\":\"needs 300 MB of activations at "
             "batch 32; the device allows 64 MB\"}",
             (long long)task);
    ah_dev_call(&f, &dev, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "selected"), 0);
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/devices/%lld", (long long)dev.id);
    ah_admin(&f, "GET", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"refusals\":[{\"task_id\":1,\"reason\":\"needs 300 MB"));
    ah_resp_free(&r);
    ah_checkin(&f, &dev, task, &r); /* it can again */
    ah_resp_free(&r);
    ah_admin(&f, "GET", path, NULL, 0, &r);
    assert_non_null(strstr(r.body, "\"refusals\":[]"));
    ah_resp_free(&r);
    ah_dev_free(&dev);
    ah_fx_close(&f);
#undef SPEC_TASK
#undef SPEC_PARAMS
}
