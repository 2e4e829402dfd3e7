/* e2e_support.c - see e2e_support.h. */
#include <stdatomic.h>

#include "../support/sl_test.h"
#include "e2e_support.h"

/* ---- a wall clock the test can move forward (thread-safe) ------------------- */

static _Atomic int64_t skew_ns;

static int64_t skew_mono(void *ctx)
{
    (void)ctx;
    return sl_clock_monotonic_ns(NULL);
}

static int64_t skew_wall(void *ctx)
{
    (void)ctx;
    return sl_clock_wall_ns(NULL) + atomic_load(&skew_ns);
}

static const sl_clock e2e_clock = {skew_mono, skew_wall, NULL};

void e2e_clock_skip(int64_t ns)
{
    atomic_fetch_add(&skew_ns, ns);
}

/* ---- the server ------------------------------------------------------------- */

void e2e_fx_open(e2e_fx *f, const char *name, const mh_pki *pki)
{
    sl_store_options so;
    sl_server_options o;
    char path[700], cert[700], key[700], err[512];
    memset(f, 0, sizeof *f);
    atomic_store(&skew_ns, 0);
    sl_test_mkdtemp(f->dir, sizeof f->dir, name);
    snprintf(path, sizeof path, "%s/starling.db", f->dir);
    sl_store_options_default(&so);
    so.path = path;
    so.clock = &e2e_clock; /* upload expiry follows the server's clock */
    if (sl_store_open(&so, &f->store, err, sizeof err) != SL_OK)
        fail_msg("store: %s", err);
    if (sl_engine_open(f->store, NULL, &f->engine, err, sizeof err) != SL_OK)
        fail_msg("engine: %s", err);
    sl_server_options_default(&o);
    o.listen = "127.0.0.1:0";
    o.admin_token = E2E_ADMIN;
    o.enrolment_token = E2E_ENROL;
    o.device_rate = o.device_burst = 10000;
    o.tick_interval_ms = 20;
    o.clock = &e2e_clock;
    /* libmicrohttpd 0.9.75 (epoll) may miss a FIN that comes with the last
     * bytes of a cut request and hold it until this timeout (the drain in
     * e2e_fx_close waits for it) */
    o.connection_timeout_s = 2;
    if (pki == NULL) {
        o.insecure_http = 1;
    } else {
        FILE *fp;
        snprintf(cert, sizeof cert, "%s/cert.pem", f->dir);
        snprintf(key, sizeof key, "%s/key.pem", f->dir);
        snprintf(f->ca_file, sizeof f->ca_file, "%s/ca.pem", f->dir);
        const char *files[3][2] = {
            {cert, pki->cert_pem}, {key, pki->key_pem}, {f->ca_file, pki->ca_pem}};
        for (int i = 0; i < 3; i++) {
            fp = fopen(files[i][0], "w");
            assert_non_null(fp);
            fputs(files[i][1], fp);
            fclose(fp);
        }
        o.tls_cert_file = cert;
        o.tls_key_file = key;
    }
    if (sl_server_create(&o, f->store, f->engine, &f->server, err, sizeof err) != SL_OK)
        fail_msg("server: %s", err);
    if (sl_server_start(f->server, err, sizeof err) != SL_OK)
        fail_msg("start: %s", err);
    snprintf(f->base, sizeof f->base, "%s://127.0.0.1:%u", pki ? "https" : "http",
             (unsigned)sl_server_port(f->server));
    assert_int_equal(sl_layout_parse(E2E_LAYOUT, strlen(E2E_LAYOUT), &f->layout), SL_OK);
}

void e2e_fx_close(e2e_fx *f)
{
    sl_server_quiesce(f->server);
    assert_int_equal(sl_server_drain(f->server, 5000), SL_OK);
    sl_server_free(f->server);
    sl_engine_close(f->engine);
    sl_store_close(f->store);
    sl_layout_free(f->layout);
    free(f->model);
    sl_test_rmtree(f->dir);
}

/* ---- clients ------------------------------------------------------------------ */

/* A client of @base; a device when @d is given, the operator when @admin. */
sl_client *e2e_client(const e2e_fx *f, const char *base, const e2e_dev *d, int admin,
                      unsigned max_attempts)
{
    sl_client_options o;
    sl_client *c = NULL;
    memset(&o, 0, sizeof o);
    o.base_url = base;
    o.ca_file = f->ca_file[0] ? f->ca_file : NULL;
    o.connect_timeout_ms = 2000;
    o.request_timeout_ms = 10000;
    o.max_attempts = max_attempts;
    o.retry_base_ms = 5; /* real sleeps, kept short */
    o.retry_cap_ms = 20;
    o.upload_chunk_bytes = E2E_CHUNK;
    o.clock = &e2e_clock;
    if (d != NULL) {
        o.device_id = d->id;
        o.device_key = d->key;
    }
    if (admin)
        o.admin_token = E2E_ADMIN;
    assert_int_equal(sl_client_create(&o, &c), SL_OK);
    return c;
}

/* A request with a JSON body (or none); the answer in @r. */
void e2e_call(sl_client *c, const char *method, const char *path, const char *json,
              sl_client_response *r)
{
    int rc = sl_client_request(c, method, path, json, json ? strlen(json) : 0,
                               json ? "application/json" : NULL, NULL, r);
    if (rc != SL_OK)
        fail_msg("%s %s: %s", method, path, sl_strerror(rc));
}

cJSON *e2e_json_of(const sl_client_response *r)
{
    cJSON *doc = cJSON_ParseWithLength((const char *)r->body, r->body_len);
    if (doc == NULL)
        fail_msg("not JSON (status %ld): %.*s", r->status, (int)r->body_len, (const char *)r->body);
    return doc;
}

int64_t e2e_json_int(const sl_client_response *r, const char *key)
{
    cJSON *doc = e2e_json_of(r);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    int64_t out;
    if (!cJSON_IsNumber(v) && !cJSON_IsBool(v))
        fail_msg("no %s in %.*s", key, (int)r->body_len, (const char *)r->body);
    out = cJSON_IsBool(v) ? cJSON_IsTrue(v) : (int64_t)v->valuedouble;
    cJSON_Delete(doc);
    return out;
}

void e2e_expect_reason(const sl_client_response *r, long status, const char *type,
                       const char *reason)
{
    cJSON *doc = e2e_json_of(r);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "type");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(doc, "reason");
    char want[128];
    snprintf(want, sizeof want, "https://starling.dev/problems/%s", type);
    if (r->status != status || !cJSON_IsString(t) || strcmp(t->valuestring, want) != 0 ||
        (reason != NULL && (!cJSON_IsString(why) || strcmp(why->valuestring, reason) != 0)))
        fail_msg("expected %ld %s %s, got %ld %.*s", status, type, reason ? reason : "", r->status,
                 (int)r->body_len, (const char *)r->body);
    cJSON_Delete(doc);
}

/* Enrol a new key through POST /v1/devices (no identity yet: unsigned). */
void e2e_enrol(const e2e_fx *f, e2e_dev *d)
{
    uint8_t pub[SL_PUBKEY_LEN];
    char hex[2 * SL_PUBKEY_LEN + 1], body[300];
    sl_client *anon = e2e_client(f, f->base, NULL, 0, 3);
    sl_client_response r;
    memset(d, 0, sizeof *d);
    assert_int_equal(sl_device_key_generate(&d->key), SL_OK);
    assert_int_equal(sl_device_key_public(d->key, pub), SL_OK);
    sl_hex(pub, sizeof pub, hex);
    snprintf(body, sizeof body,
             "{\"enrolment_token\":\"" E2E_ENROL "\",\"public_key\":\"%s\",\"capabilities\":"
             "{\"arch\":\"x86_64\"}}",
             hex);
    e2e_call(anon, "POST", "/v1/devices", body, &r);
    assert_int_equal(r.status, 201);
    d->id = e2e_json_int(&r, "device_id");
    assert_true(d->id > 0);
    sl_client_response_free(&r);
    e2e_call(anon, "POST", "/v1/devices", body, &r); /* the same key again: the same id */
    assert_int_equal(r.status, 201);
    assert_int_equal(e2e_json_int(&r, "device_id"), d->id);
    sl_client_response_free(&r);
    sl_client_free(anon);
}

/* POST /v1/tasks: @config JSON, E2E_LAYOUT and a random initial model (kept in @f). */
int64_t e2e_create_task(e2e_fx *f, sl_client *op, const char *config)
{
    size_t n = (size_t)sl_layout_params(f->layout), cap;
    float *w = malloc(n * sizeof *w);
    uint64_t seed = 7;
    char *b64, *body;
    sl_client_response r;
    int64_t task;
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(sl_test_rand(&seed) >> 40) / 16777216.0f - 0.5f;
    assert_int_equal(sl_frame_encode_model(f->layout, w, 1, 3, &f->model, &f->model_len), SL_OK);
    cap = (f->model_len + 2) / 3 * 4 + 1;
    b64 = malloc(cap);
    body = malloc(cap + 1024);
    assert_int_equal(sl_base64_encode(f->model, f->model_len, b64, cap), SL_OK);
    snprintf(body, cap + 1024, "{\"config\":%s,\"layout\":\"w 64 256\\nb 64\\n\",\"model\":\"%s\"}",
             config, b64);
    e2e_call(op, "POST", "/v1/tasks", body, &r);
    if (r.status != 201)
        fail_msg("create task: %ld %.*s", r.status, (int)r.body_len, (const char *)r.body);
    task = e2e_json_int(&r, "task_id");
    sl_client_response_free(&r);
    free(body);
    free(b64);
    free(w);
    return task;
}

/* Signed check-ins until selected (the draw happens when the window closes). */
int64_t e2e_checkin_until_selected(sl_client *c, int64_t task, int64_t *version)
{
    char body[96];
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":120}", (long long)task);
    for (int i = 0; i < 200; i++) {
        sl_client_response r;
        e2e_call(c, "POST", "/v1/checkin", body, &r);
        assert_int_equal(r.status, 200);
        if (e2e_json_int(&r, "selected")) {
            int64_t round = e2e_json_int(&r, "round_id");
            *version = e2e_json_int(&r, "model_version");
            sl_client_response_free(&r);
            return round;
        }
        assert_true(e2e_json_int(&r, "retry_after_ms") > 0);
        sl_client_response_free(&r);
        usleep(20000); /* not retry_after_ms: the test knows the window is short */
    }
    fail_msg("never selected");
    return 0;
}

/* A real update for (round, version): every other weight and every bias, fp32 values. */
void e2e_make_update(const e2e_fx *f, int64_t round, int64_t version, float scale, void **frame,
                     size_t *len)
{
    sl_frame_header h = {SL_FRAME_VERSION,  SL_FRAME_UPDATE, 0, sl_layout_hash(f->layout),
                         (uint64_t)version, (uint64_t)round, 0};
    static uint32_t idx[2][8192];
    static float val[2][8192];
    uint64_t seed = (uint64_t)round * 1000 + (uint64_t)(scale * 100.0f) + 1;
    sl_sparse_tensor t[2];
    sl_encode_params p;
    for (uint32_t i = 0; i < 8192; i++) {
        idx[0][i] = 2 * i;
        val[0][i] = scale * ((float)(sl_test_rand(&seed) >> 40) / 16777216.0f - 0.5f) / 64.0f;
        idx[1][i] = i;
        val[1][i] = scale * 0.01f;
    }
    t[0] = (sl_sparse_tensor){8192, idx[0], val[0]};
    t[1] = (sl_sparse_tensor){64, idx[1], val[1]};
    sl_encode_params_default(&p);
    assert_int_equal(sl_frame_encode_update(f->layout, &h, t, &p, NULL, frame, len), SL_OK);
    assert_true(*len > 4 * E2E_CHUNK); /* several chunks */
}

/* Saves the upload state at a chosen point and arms a cut at another. */
typedef struct saver {
    e2e_proxy *proxy;
    uint64_t save_upto, cut_at;
    int armed;
    sl_client_upload_state saved;
} saver;

static void on_progress(void *ctx, const sl_client_upload_state *st, uint64_t length)
{
    saver *s = ctx;
    (void)length;
    if (st->upload_id[0] != '\0' && st->offset <= s->save_upto) {
        s->saved = *st; /* as an agent persists it in its state directory */
        s->saved.progress = NULL;
    }
    if (!s->armed && st->offset == s->cut_at) {
        e2e_proxy_cut_up(s->proxy, 1000, 2); /* the next PATCH dies in its middle */
        s->armed = 1;
    }
}

/* Upload through @via with one attempt, cut after @cut_at bytes are acknowledged;
 * returns the state saved at @save_upto (what a restarted agent would hold). */
sl_client_upload_state e2e_interrupted_upload(const e2e_fx *f, e2e_proxy *via, const e2e_dev *d,
                                              int64_t round, const void *frame, size_t len,
                                              uint64_t save_upto, uint64_t cut_at)
{
    char base[64];
    saver sv = {via, save_upto, cut_at, 0, {{0}, 0, NULL, NULL}};
    sl_client_upload_state st = {{0}, 0, on_progress, &sv};
    sl_client_response r;
    sl_client *c;
    int cuts = e2e_proxy_cuts(via), rc;
    snprintf(base, sizeof base, "http://127.0.0.1:%d", e2e_proxy_port(via));
    c = e2e_client(f, base, d, 0, 1);
    rc = sl_client_upload(c, round, frame, len, 120, &st, &r);
    if (rc == SL_OK)
        fail_msg("the upload was not cut: %ld", r.status);
    assert_int_equal(e2e_proxy_cuts(via), cuts + 2);
    assert_int_equal(st.offset, cut_at); /* what the server acknowledged */
    assert_string_equal(sv.saved.upload_id, st.upload_id);
    sl_client_free(c);
    return sv.saved;
}
