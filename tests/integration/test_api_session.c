/*
 * Device sessions (#20) through the real server: one signed POST
 * /v1/sessions, then requests carrying an HMAC under the session's key.
 * Each security property has a check here that fails if the server's check
 * is removed: a replay, another device's session, an expired session, a
 * revoked session (refused at its next request), a tampered method, path,
 * query, timestamp or body, a session used to open another, a retired
 * epoch after two rotations; and the client library opens, uses and renews
 * sessions by itself.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "../../api/server/server_bench.h"
#include "../support/sl_test.h"
#include "api_harness.h"
#include "starling/api_client.h"

#define TASK                                                                   \
    "{\"config\":{\"name\":\"s\",\"target\":1},\"layout\":\"w 4 8\\nb 4\\n\"," \
    "\"model\":\"%s\"}"

typedef struct sess {
    char token[SL_SESSION_TOKEN_MAX];
    uint8_t key[SL_SESSION_KEY_LEN];
    int64_t expires;
} sess;

static void open_session(ah_fx *f, const ah_dev *d, sess *out)
{
    ah_resp r;
    char key_b64[64];
    size_t len = 0;
    ah_dev_call(f, d, "POST", "/v1/sessions", NULL, 0, NULL, 0, &r);
    if (r.status != 201)
        fail_msg("POST /v1/sessions: %ld %s", r.status, r.body);
    assert_true(ah_json_str(r.body, "token", out->token, sizeof out->token));
    assert_true(ah_json_str(r.body, "key", key_b64, sizeof key_b64));
    assert_int_equal(sl_base64_decode(key_b64, out->key, sizeof out->key, &len), SL_OK);
    assert_int_equal(len, SL_SESSION_KEY_LEN);
    out->expires = ah_json_int(r.body, "expires_at_ms");
    ah_resp_free(&r);
}

/* The five session header lines of a request, MAC'd over what @mac_* say (which a tampering
 * test makes differ from what is sent). */
typedef struct mac_lines {
    char l[5][256];
} mac_lines;

static void mac_for(const sess *s, int64_t device, const char *method, const char *path, int64_t ts,
                    const char *nonce, const void *body, size_t len, mac_lines *out)
{
    uint8_t digest[32];
    char mac[SL_SESSION_MAC_B64_MAX];
    sl_sha256(len ? body : "", len, digest);
    assert_int_equal(
        sl_session_mac(s->key, s->token, method, path, ts, nonce, digest, mac, sizeof mac), SL_OK);
    snprintf(out->l[0], sizeof out->l[0], "%s: %lld", SL_HDR_DEVICE, (long long)device);
    snprintf(out->l[1], sizeof out->l[1], "%s: %lld", SL_HDR_TIMESTAMP, (long long)ts);
    snprintf(out->l[2], sizeof out->l[2], "%s: %s", SL_HDR_NONCE, nonce);
    snprintf(out->l[3], sizeof out->l[3], "%s: %s", SL_HDR_SESSION, s->token);
    snprintf(out->l[4], sizeof out->l[4], "%s: %s", SL_HDR_MAC, mac);
}

static void send_lines(ah_fx *f, const char *method, const char *path, const mac_lines *m,
                       const void *body, size_t len, ah_resp *r)
{
    char url[1024];
    const char *hdrs[5] = {m->l[0], m->l[1], m->l[2], m->l[3], m->l[4]};
    snprintf(url, sizeof url, "%s%s", f->base, path);
    ah_http(method, url, hdrs, 5, body, len, r);
}

/* A check-in under session @s as @device: the answer's status (and type into @type). */
static long checkin(ah_fx *f, const sess *s, int64_t device, int64_t task, char *type, size_t tcap)
{
    char body[64], nonce[40];
    mac_lines m;
    ah_resp r;
    long status;
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":10}", (long long)task);
    assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
    mac_for(s, device, "POST", "/v1/checkin", ah_now_ms(), nonce, body, strlen(body), &m);
    send_lines(f, "POST", "/v1/checkin", &m, body, strlen(body), &r);
    status = r.status;
    if (type != NULL)
        ah_problem_type(&r, type, tcap);
    ah_resp_free(&r);
    return status;
}

static void short_sessions(sl_server_options *o)
{
    o->session_ttl_ms = 1500;
}

static void test_session_properties(void **state)
{
    ah_fx f;
    ah_dev a, b;
    sess s, t;
    int64_t task;
    char type[96], nonce[40], body[64];
    mac_lines m;
    ah_resp r;
    (void)state;
    ah_fx_open(&f, "session", NULL);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    ah_dev_enrol(&f, &b);
    open_session(&f, &a, &s);
    assert_true(s.expires > ah_now_ms() + 3000 * 1000);
    /* the session works */
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    /* a replay of the same request (same nonce, same MAC) is refused */
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":10}", (long long)task);
    assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
    mac_for(&s, a.id, "POST", "/v1/checkin", ah_now_ms(), nonce, body, strlen(body), &m);
    send_lines(&f, "POST", "/v1/checkin", &m, body, strlen(body), &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    send_lines(&f, "POST", "/v1/checkin", &m, body, strlen(body), &r);
    ah_expect_problem(&r, 401, "replayed");
    assert_non_null(strstr(r.body, "replay"));
    ah_resp_free(&r);
    /* device a's session presented as device b: refused */
    assert_int_equal(checkin(&f, &s, b.id, task, type, sizeof type), 401);
    assert_non_null(strstr(type, "session-invalid"));
    /* tampering: the MAC covers method, path, query, timestamp and body */
    {
        static const struct {
            const char *method, *path, *body;
            int64_t dt;
        } sent[] = {{"PUT", "/v1/checkin", NULL, 0},
                    {"POST", "/v1/checkin?x=1", NULL, 0},
                    {"POST", "/v1/checkin", "{\"task_id\":1,\"num_samples\":99}", 0},
                    {"POST", "/v1/checkin", NULL, 1}};
        for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++) {
            const char *b2 = sent[i].body ? sent[i].body : body;
            int64_t ts = ah_now_ms();
            assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
            mac_for(&s, a.id, "POST", "/v1/checkin", ts, nonce, body, strlen(body), &m);
            if (sent[i].dt)
                snprintf(m.l[1], sizeof m.l[1], "%s: %lld", SL_HDR_TIMESTAMP,
                         (long long)(ts + sent[i].dt));
            send_lines(&f, sent[i].method, sent[i].path, &m, b2, strlen(b2), &r);
            if (r.status != 401 && r.status != 405)
                fail_msg("tampered request %zu answered %ld", i, r.status);
            if (r.status == 401)
                assert_non_null(strstr(r.body, "MAC does not verify"));
            ah_resp_free(&r);
        }
    }
    /* a session does not open another: only the device's key does */
    assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
    mac_for(&s, a.id, "POST", "/v1/sessions", ah_now_ms(), nonce, NULL, 0, &m);
    send_lines(&f, "POST", "/v1/sessions", &m, NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* signed and under a session at once: refused as ambiguous */
    {
        ah_sig sig;
        char url[256];
        const char *hdrs[6];
        assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
        ah_sign(a.key, a.id, "POST", "/v1/checkin", ah_now_ms(), nonce, body, strlen(body), &sig);
        for (int i = 0; i < 4; i++)
            hdrs[i] = sig.lines[i];
        snprintf(m.l[3], sizeof m.l[3], "%s: %s", SL_HDR_SESSION, s.token);
        hdrs[4] = m.l[3];
        snprintf(url, sizeof url, "%s/v1/checkin", f.base);
        ah_http("POST", url, hdrs, 5, body, strlen(body), &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
    }
    /* the operator lists a's sessions and revokes them: refused at the next request */
    {
        char path[96];
        snprintf(path, sizeof path, "/v1/devices/%lld/sessions", (long long)a.id);
        ah_get(&f, path, (const char *[]){"Authorization: Bearer " AH_ADMIN}, 1, &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "\"revoked_at_ms\":null"));
        ah_resp_free(&r);
        open_session(&f, &b, &t); /* b's session is not a's: it survives a's revocation */
        ah_admin(&f, "DELETE", path, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(ah_json_int(r.body, "revoked"), 1);
        ah_resp_free(&r);
        assert_int_equal(checkin(&f, &s, a.id, task, type, sizeof type), 401);
        assert_non_null(strstr(type, "session-revoked"));
        assert_int_equal(checkin(&f, &t, b.id, task, NULL, 0), 200);
        /* a fresh session of a works again (a revoked session, not a disabled device) */
        open_session(&f, &a, &s);
        assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    }
    /* rotation: the previous epoch's sessions stay valid; after a second rotation they end */
    ah_admin(&f, "POST", "/v1/sessions/rotate", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    ah_admin(&f, "POST", "/v1/sessions/rotate", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    assert_int_equal(checkin(&f, &s, a.id, task, type, sizeof type), 401);
    assert_non_null(strstr(type, "session-expired"));
    /* a forged token (a later expiry) derives another key: the MAC does not verify */
    open_session(&f, &a, &s);
    {
        sl_session parsed;
        sess forged = s;
        assert_int_equal(sl_session_parse(s.token, &parsed), SL_OK);
        parsed.expires_ms += 86400000;
        assert_int_equal(sl_session_token(&parsed, forged.token, sizeof forged.token), SL_OK);
        assert_int_equal(checkin(&f, &forged, a.id, task, type, sizeof type), 401);
    }
    ah_dev_free(&a);
    ah_dev_free(&b);
    ah_fx_close(&f);
}

/* Hostile or malformed input to the session endpoints: a clear problem, nothing changed. */
static void test_session_bad_input(void **state)
{
    ah_fx f;
    ah_dev a;
    sess s;
    int64_t task;
    uint64_t audits;
    char type[96], path[160];
    ah_resp r;
    (void)state;
    ah_fx_open(&f, "session_bad", NULL);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    open_session(&f, &a, &s);
    audits = ah_audit_count(&f);
    /* a malformed token: session-invalid */
    {
        sess bad = s;
        snprintf(bad.token, sizeof bad.token, "s1.1.%lld.99999999999999.nothex", (long long)a.id);
        assert_int_equal(checkin(&f, &bad, a.id, task, type, sizeof type), 401);
        assert_non_null(strstr(type, "session-invalid"));
    }
    /* operators: a bad session id, unknown devices */
    snprintf(path, sizeof path, "/v1/devices/%lld/sessions?session=xyz", (long long)a.id);
    ah_admin(&f, "DELETE", path, NULL, 0, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    ah_admin(&f, "DELETE", "/v1/devices/999/sessions", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    ah_admin(&f, "POST", "/v1/devices/999/disable", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    ah_get(&f, "/v1/devices/abc/sessions", (const char *[]){"Authorization: Bearer " AH_ADMIN}, 1,
           &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    /* without the operator's token */
    snprintf(path, sizeof path, "%s/v1/sessions/rotate", f.base);
    ah_http("POST", path, NULL, 0, NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    /* nothing was revoked, disabled or rotated: the session works, no audit entry */
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    assert_int_equal(ah_audit_count(&f), audits);
    ah_dev_free(&a);
    ah_fx_close(&f);
}

static void test_session_expires(void **state)
{
    ah_fx f;
    ah_dev a;
    sess s;
    int64_t task;
    char type[96];
    (void)state;
    ah_fx_open(&f, "session_ttl", short_sessions);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    open_session(&f, &a, &s);
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    while (ah_now_ms() <= s.expires)
        usleep(50 * 1000);
    assert_int_equal(checkin(&f, &s, a.id, task, type, sizeof type), 401);
    assert_non_null(strstr(type, "session-expired"));
    ah_dev_free(&a);
    ah_fx_close(&f);
}

/* The client library: a session opened by itself, used for every request, renewed after a
 * revocation without the caller seeing it. */
static void test_client_sessions(void **state)
{
    ah_fx f;
    ah_dev a;
    sl_client_options o;
    sl_client *c = NULL;
    sl_client_response r;
    char body[64], path[96];
    int64_t task;
    ah_resp ar;
    (void)state;
    ah_fx_open(&f, "session_client", NULL);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    memset(&o, 0, sizeof o);
    o.base_url = f.base;
    o.device_id = a.id;
    o.device_key = a.key;
    o.use_sessions = 1;
    o.retry_base_ms = 10;
    assert_int_equal(sl_client_create(&o, &c), SL_OK);
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":10}", (long long)task);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sl_client_request(c, "POST", "/v1/checkin", body, strlen(body),
                                           "application/json", NULL, &r),
                         SL_OK);
        assert_int_equal(r.status, 200);
        sl_client_response_free(&r);
    }
    assert_int_equal(sl_client_sessions_opened(c), 1);
    snprintf(path, sizeof path, "/v1/devices/%lld/sessions", (long long)a.id);
    ah_admin(&f, "DELETE", path, NULL, 0, &ar);
    assert_int_equal(ar.status, 200);
    ah_resp_free(&ar);
    assert_int_equal(sl_client_request(c, "POST", "/v1/checkin", body, strlen(body),
                                       "application/json", NULL, &r),
                     SL_OK);
    assert_int_equal(r.status, 200); /* a new session, and the request again */
    sl_client_response_free(&r);
    assert_int_equal(sl_client_sessions_opened(c), 2);
    sl_client_free(c);
    ah_dev_free(&a);
    ah_fx_close(&f);
}

/* A disabled device: its session is refused at its next request, its signed requests too
 * (a new session included); enabled, it works again. */
static void test_disabled_device(void **state)
{
    ah_fx f;
    ah_dev a;
    sess s;
    int64_t task;
    char type[96], path[96], body[64];
    ah_resp r;
    (void)state;
    ah_fx_open(&f, "session_disable", NULL);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    open_session(&f, &a, &s);
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    snprintf(path, sizeof path, "/v1/devices/%lld/disable", (long long)a.id);
    ah_admin(&f, "POST", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"state\":\"disabled\""));
    ah_resp_free(&r);
    assert_int_equal(checkin(&f, &s, a.id, task, type, sizeof type), 401);
    assert_non_null(strstr(type, "session-revoked"));
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":10}", (long long)task);
    ah_dev_call(&f, &a, "POST", "/v1/checkin", body, strlen(body), NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    assert_non_null(strstr(r.body, "disabled"));
    ah_resp_free(&r);
    ah_dev_call(&f, &a, "POST", "/v1/sessions", NULL, 0, NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    snprintf(path, sizeof path, "/v1/devices/%lld/enable", (long long)a.id);
    ah_admin(&f, "POST", path, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    open_session(&f, &a, &s);
    assert_int_equal(checkin(&f, &s, a.id, task, NULL, 0), 200);
    ah_dev_free(&a);
    ah_fx_close(&f);
}

/* `starling devices sessions ID` lists them; `starling devices revoke ID` revokes them. */
static void test_cli_sessions(void **state)
{
    ah_fx f;
    ah_dev a;
    sess s;
    int64_t task;
    char tok[700], out[700], cmd[6000], line[512], type[96];
    FILE *fp;
    int listed = 0, revoked = 0;
    (void)state;
    ah_fx_open(&f, "session_cli", NULL);
    task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    open_session(&f, &a, &s);
    snprintf(tok, sizeof tok, "%s/admin.token", f.dir);
    snprintf(out, sizeof out, "%s/cli.txt", f.dir);
    fp = fopen(tok, "w");
    assert_non_null(fp);
    fputs(AH_ADMIN "\n", fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd,
             "%s devices sessions %lld --url %s --token-file %s > %s 2>&1 && "
             "%s devices revoke %lld --url %s --token-file %s >> %s 2>&1",
             SL_STARLING_BIN, (long long)a.id, f.base, tok, out, SL_STARLING_BIN, (long long)a.id,
             f.base, tok, out);
    assert_int_equal(system(cmd), 0);
    fp = fopen(out, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof line, fp) != NULL) {
        listed += strstr(line, "1 live session of device") != NULL;
        revoked += strstr(line, ": 1 session revoked") != NULL;
    }
    fclose(fp);
    assert_int_equal(listed, 1);
    assert_int_equal(revoked, 1);
    assert_int_equal(checkin(&f, &s, a.id, task, type, sizeof type), 401);
    assert_non_null(strstr(type, "session-revoked"));
    ah_dev_free(&a);
    ah_fx_close(&f);
}

/* ---- a device request is worked off the HTTP threads ---------------------------------- */

extern void (*sl__store_commit_hook)(void); /* storage/store_int.h: after each commit */

static atomic_int stall_armed, stall_entered;

/* Holds the store's writer (and so the request whose write it just committed) for 2 s. */
static void stall_hook(void)
{
    if (atomic_exchange(&stall_armed, 0)) {
        atomic_store(&stall_entered, 1);
        usleep(2000 * 1000);
    }
}

typedef struct slow_checkin {
    ah_fx *f;
    const sess *s;
    int64_t device, task;
    long status;
} slow_checkin;

static void *slow_checkin_main(void *arg)
{
    slow_checkin *c = arg;
    c->status = checkin(c->f, c->s, c->device, c->task, NULL, 0);
    return NULL;
}

static void one_http_thread(sl_server_options *o)
{
    o->threads = 1;
    o->workers = 2;
}

/*
 * With one libmicrohttpd thread, a check-in under a session whose durable
 * write is held for 2 s does not hold up GET /v1/status: the device request
 * waits on a worker, not on the thread that serves status. (Session requests
 * once ran on the HTTP threads; this fails when they do.)
 */
static void test_device_requests_off_http_threads(void **state)
{
    ah_fx f;
    ah_dev a;
    sess s;
    slow_checkin c;
    pthread_t th;
    ah_resp r;
    int64_t t0, waited;
    (void)state;
    ah_fx_open(&f, "session_workers", one_http_thread);
    c.task = ah_create_task(&f, TASK);
    ah_dev_enrol(&f, &a);
    open_session(&f, &a, &s);
    c = (slow_checkin){&f, &s, a.id, c.task, 0};
    sl__store_commit_hook = stall_hook;
    atomic_store(&stall_entered, 0);
    atomic_store(&stall_armed, 1);
    assert_int_equal(pthread_create(&th, NULL, slow_checkin_main, &c), 0);
    for (int i = 0; i < 500 && !atomic_load(&stall_entered); i++)
        usleep(10 * 1000);
    if (!atomic_load(&stall_entered))
        fail_msg("the check-in never committed a write (the test needs one to hold)");
    t0 = ah_now_ms();
    ah_admin(&f, "GET", "/v1/status", NULL, 0, &r);
    waited = ah_now_ms() - t0;
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    assert_int_equal(pthread_join(th, NULL), 0);
    sl__store_commit_hook = NULL;
    assert_int_equal(c.status, 200);
    print_message("status answered in %lld ms while a check-in's write was held for 2 s\n",
                  (long long)waited);
    assert_true(waited < 1000);
    ah_dev_free(&a);
    ah_fx_close(&f);
}

/*
 * The benchmark's switch (server_bench.h): refused on a started server and
 * on one any other machine can reach; on a loopback server before its start
 * it admits a request that only names a device, which a normal server
 * refuses (401).
 */
static void test_bench_switch(void **state)
{
    static const char *const hdrs[] = {"X-Starling-Device: 1", "Content-Type: application/json"};
    static const char body[] = "{\"length\":1,\"sha256\":\"00\",\"num_samples\":1}";
    ah_fx f;
    sl_server_options o;
    sl_server *srv;
    char url[256], err[256];
    ah_resp r;
    (void)state;
    ah_fx_open(&f, "api_bench_switch", NULL);
    assert_int_equal(sl__server_bench_unauthenticated(f.server), SL_EINVAL); /* started */
    snprintf(url, sizeof url, "%s/v1/rounds/999/uploads", f.base);
    ah_http("POST", url, hdrs, 2, body, strlen(body), &r);
    assert_int_equal(r.status, 401);
    ah_resp_free(&r);

    sl_server_options_default(&o);
    o.insecure_http = 1;
    o.listen = "0.0.0.0:0";
    assert_int_equal(sl_server_create(&o, f.store, f.engine, &srv, err, sizeof err), SL_OK);
    assert_int_equal(sl__server_bench_unauthenticated(srv), SL_EINVAL); /* reachable */
    sl_server_free(srv);
    o.listen = "127.0.0.1:0";
    assert_int_equal(sl_server_create(&o, f.store, f.engine, &srv, err, sizeof err), SL_OK);
    assert_int_equal(sl__server_bench_unauthenticated(srv), SL_OK);
    assert_int_equal(sl_server_start(srv, err, sizeof err), SL_OK);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/rounds/999/uploads",
             (unsigned)sl_server_port(srv));
    ah_http("POST", url, hdrs, 2, body, strlen(body), &r);
    assert_int_not_equal(r.status, 401); /* past authentication: the body's own problem */
    assert_int_equal(r.status, 400);
    ah_resp_free(&r);
    sl_server_free(srv);
    ah_fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_properties),
        cmocka_unit_test(test_session_expires),
        cmocka_unit_test(test_session_bad_input),
        cmocka_unit_test(test_client_sessions),
        cmocka_unit_test(test_cli_sessions),
        cmocka_unit_test(test_disabled_device),
        cmocka_unit_test(test_bench_switch),
        cmocka_unit_test(test_device_requests_off_http_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
