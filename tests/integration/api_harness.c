/* api_harness.c - see api_harness.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <zlib.h>

#include "../support/sl_test.h"
#include "api_harness.h"

/* ---- HTTP ------------------------------------------------------------------ */

/* Every JSON answer a test receives is recorded for check_openapi.py. */

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    ah_resp *r = ctx;
    size_t add = size * n;
    char *grown = realloc(r->body, r->len + add + 1);
    if (grown == NULL)
        return 0;
    r->body = grown;
    memcpy(r->body + r->len, p, add);
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    ah_resp *r = ctx;
    size_t add = size * n;
    /* a new status line (after 100 Continue) starts the headers again */
    if (add > 5 && memcmp(p, "HTTP/", 5) == 0)
        r->hlen = 0;
    if (r->hlen + add + 1 < sizeof r->headers) {
        memcpy(r->headers + r->hlen, p, add);
        r->hlen += add;
        r->headers[r->hlen] = '\0';
    }
    return add;
}

static void transfer(const char *method, const char *url, const char *cafile,
                     const char *const *hdrs, size_t nh, const void *body, size_t len, ah_resp *out)
{
    CURL *c = curl_easy_init();
    struct curl_slist *list = NULL;
    int has_ctype = 0;
    memset(out, 0, sizeof *out);
    assert_non_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (cafile != NULL)
        curl_easy_setopt(c, CURLOPT_CAINFO, cafile);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    for (size_t i = 0; i < nh; i++) {
        list = curl_slist_append(list, hdrs[i]);
        if (strncasecmp(hdrs[i], "Content-Type:", 13) == 0)
            has_ctype = 1;
    }
    if (body != NULL) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        if (!has_ctype)
            list = curl_slist_append(list, "Content-Type: application/json");
        list = curl_slist_append(list, "Expect:");
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    if (out->body == NULL) {
        out->body = calloc(1, 1);
        assert_non_null(out->body);
    }
    curl_slist_free_all(list);
    curl_easy_cleanup(c);
    if (out->status != 0)
        ah_record(method, url, out);
}

void ah_http(const char *method, const char *url, const char *const *hdrs, size_t nh,
             const void *body, size_t len, ah_resp *out)
{
    transfer(method, url, NULL, hdrs, nh, body, len, out);
}

void ah_https(const char *method, const char *url, const char *cafile, ah_resp *out)
{
    transfer(method, url, cafile, NULL, 0, NULL, 0, out);
}

void ah_https_bearer(const char *method, const char *url, const char *cafile, const char *token,
                     ah_resp *out)
{
    char auth[300];
    const char *hdrs[1] = {auth};
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    transfer(method, url, cafile, hdrs, 1, NULL, 0, out);
}

void ah_resp_free(ah_resp *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

int ah_header(const ah_resp *r, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    const char *p = r->headers;
    out[0] = '\0';
    while (p != NULL && *p != '\0') {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1, *end;
            size_t len;
            while (*v == ' ')
                v++;
            end = strpbrk(v, "\r\n");
            len = end ? (size_t)(end - v) : strlen(v);
            if (len >= cap)
                len = cap - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return 1;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return 0;
}

/* ---- fixture ---------------------------------------------------------------------- */

void ah_fx_open(ah_fx *f, const char *name, void (*tweak)(sl_server_options *))
{
    sl_store_options so;
    sl_engine_options eo;
    sl_server_options o;
    char path[700], err[512];
    memset(f, 0, sizeof *f);
    sl_test_mkdtemp(f->dir, sizeof f->dir, name);
    snprintf(path, sizeof path, "%s/starling.db", f->dir);
    sl_store_options_default(&so);
    so.path = path;
    if (sl_store_open(&so, &f->store, err, sizeof err) != SL_OK)
        fail_msg("store: %s", err);
    sl_engine_options_default(&eo);
    if (sl_engine_open(f->store, &eo, &f->engine, err, sizeof err) != SL_OK)
        fail_msg("engine: %s", err);
    sl_server_options_default(&o);
    o.listen = "127.0.0.1:0";
    o.insecure_http = 1;
    o.admin_token = AH_ADMIN;
    o.enrolment_token = AH_ENROL;
    o.device_burst = 10000;
    o.device_rate = 10000;
    o.max_body = 1 << 20;
    o.tick_interval_ms = 20;
    if (tweak != NULL)
        tweak(&o);
    if (sl_server_create(&o, f->store, f->engine, &f->server, err, sizeof err) != SL_OK)
        fail_msg("server: %s", err);
    if (sl_server_start(f->server, err, sizeof err) != SL_OK)
        fail_msg("start: %s", err);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%u", (unsigned)sl_server_port(f->server));
}

/* A connection to 127.0.0.1:@port is refused (nothing listens, or a shut-down socket). */
static void assert_refused(uint16_t port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), rc, e;
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    e = errno;
    close(fd);
    if (rc == 0 || e != ECONNREFUSED)
        fail_msg("a connection to port %u after the quiesce: %s", (unsigned)port,
                 rc == 0 ? "accepted" : strerror(e));
}

void ah_fx_close(ah_fx *f)
{
    uint16_t port = sl_server_port(f->server);
    sl_server_quiesce(f->server);
    /* the listening socket is shut down at once (kept open until the daemon's workers stop,
     * api/server/daemon.c keep_shut): new connections are refused */
    if (port != 0)
        assert_refused(port);
    assert_int_equal(sl_server_drain(f->server, 5000), SL_OK);
    sl_server_free(f->server);
    sl_engine_close(f->engine);
    sl_store_close(f->store);
    sl_test_rmtree(f->dir);
}

void ah_admin(ah_fx *f, const char *method, const char *path, const void *body, size_t len,
              ah_resp *out)
{
    char url[4096];
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    snprintf(url, sizeof url, "%s%s", f->base, path);
    ah_http(method, url, auth, 1, body, len, out);
}

/* ---- devices ------------------------------------------------------------------------ */

int64_t ah_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ah_dev_enrol(ah_fx *f, ah_dev *d)
{
    char hex[2 * SL_PUBKEY_LEN + 1], body[512], url[128];
    ah_resp r;
    memset(d, 0, sizeof *d);
    assert_int_equal(sl_device_key_generate(&d->key), SL_OK);
    assert_int_equal(sl_device_key_public(d->key, d->pub), SL_OK);
    sl_hex(d->pub, SL_PUBKEY_LEN, hex);
    snprintf(body, sizeof body,
             "{\"enrolment_token\":\"" AH_ENROL "\",\"public_key\":\"%s\","
             "\"capabilities\":{\"arch\":\"x86_64\",\"simd\":[\"avx2\"]}}",
             hex);
    snprintf(url, sizeof url, "%s/v1/devices", f->base);
    ah_http("POST", url, NULL, 0, body, strlen(body), &r);
    assert_int_equal(r.status, 201);
    d->id = ah_json_int(r.body, "device_id");
    ah_resp_free(&r);
}

void ah_dev_free(ah_dev *d)
{
    sl_device_key_free(d->key);
    d->key = NULL;
}

void ah_sign(const sl_device_key *key, int64_t device, const char *method, const char *path,
             int64_t ts_ms, const char *nonce, const void *body, size_t len, ah_sig *out)
{
    uint8_t digest[32];
    char sig[SL_SIGNATURE_B64_MAX];
    sl_sha256(len ? body : "", len, digest);
    assert_int_equal(sl_sign_request(key, method, path, ts_ms, nonce, digest, sig, sizeof sig),
                     SL_OK);
    snprintf(out->lines[0], sizeof out->lines[0], SL_HDR_DEVICE ": %lld", (long long)device);
    snprintf(out->lines[1], sizeof out->lines[1], SL_HDR_TIMESTAMP ": %lld", (long long)ts_ms);
    snprintf(out->lines[2], sizeof out->lines[2], SL_HDR_NONCE ": %s", nonce);
    snprintf(out->lines[3], sizeof out->lines[3], SL_HDR_SIGNATURE ": %s", sig);
}

void ah_dev_call(ah_fx *f, const ah_dev *d, const char *method, const char *path, const void *body,
                 size_t len, const char *const *extra, size_t nextra, ah_resp *out)
{
    char nonce[64], url[4096];
    const char *hdrs[16];
    ah_sig sig;
    size_t nh = 0;
    assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
    ah_sign(d->key, d->id, method, path, ah_now_ms(), nonce, body, len, &sig);
    for (int i = 0; i < 4; i++)
        hdrs[nh++] = sig.lines[i];
    for (size_t i = 0; i < nextra && nh < 16; i++)
        hdrs[nh++] = extra[i];
    snprintf(url, sizeof url, "%s%s", f->base, path);
    ah_http(method, url, hdrs, nh, body, len, out);
}

/* ---- JSON ------------------------------------------------------------------------------ */

static char record_file[600];

void ah_record_to(const char *file)
{
    snprintf(record_file, sizeof record_file, "%s", file);
}

const char *ah_records_file(void)
{
    return record_file;
}

void ah_record(const char *method, const char *url, const ah_resp *r)
{
    char ctype[128], path[2048];
    const char *p = strstr(url, "://");
    cJSON *line, *body;
    char *text;
    FILE *fp;
    if (record_file[0] == '\0' || strcmp(method, "HEAD") == 0 || r->len == 0 ||
        !ah_header(r, "Content-Type", ctype, sizeof ctype))
        return;
    if (strncmp(ctype, "application/json", 16) != 0 &&
        strncmp(ctype, "application/problem+json", 24) != 0)
        return;
    /* the path without scheme, host and query: the checker finds its template */
    p = p ? strchr(p + 3, '/') : url;
    snprintf(path, sizeof path, "%s", p ? p : "/");
    path[strcspn(path, "?")] = '\0';
    line = cJSON_CreateObject();
    cJSON_AddStringToObject(line, "method", method);
    cJSON_AddStringToObject(line, "path", path);
    cJSON_AddNumberToObject(line, "status", (double)r->status);
    cJSON_AddStringToObject(line, "content_type", ctype);
    body = cJSON_Parse(r->body);
    if (body != NULL)
        cJSON_AddItemToObject(line, "body", body);
    else
        cJSON_AddStringToObject(line, "body_unparsed", r->body);
    text = cJSON_PrintUnformatted(line);
    fp = fopen(record_file, "a");
    assert_non_null(fp);
    fprintf(fp, "%s\n", text);
    fclose(fp);
    free(text);
    cJSON_Delete(line);
}

int64_t ah_json_int(const char *body, const char *key)
{
    cJSON *doc = cJSON_Parse(body);
    const cJSON *v;
    int64_t out;
    if (doc == NULL)
        fail_msg("not JSON: %s", body);
    v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (!cJSON_IsNumber(v) && !cJSON_IsBool(v))
        fail_msg("no number %s in %s", key, body);
    out = cJSON_IsBool(v) ? cJSON_IsTrue(v) : (int64_t)v->valuedouble;
    cJSON_Delete(doc);
    return out;
}

int ah_json_str(const char *body, const char *key, char *out, size_t cap)
{
    cJSON *doc = cJSON_Parse(body);
    const cJSON *v = doc ? cJSON_GetObjectItemCaseSensitive(doc, key) : NULL;
    int found = cJSON_IsString(v);
    out[0] = '\0';
    if (found)
        snprintf(out, cap, "%s", v->valuestring);
    cJSON_Delete(doc);
    return found;
}

void ah_problem_type(const ah_resp *r, char *out, size_t cap)
{
    char type[200], ctype[128];
    out[0] = '\0';
    if (!ah_header(r, "Content-Type", ctype, sizeof ctype) ||
        strcmp(ctype, "application/problem+json") != 0 ||
        !ah_json_str(r->body, "type", type, sizeof type) ||
        strncmp(type, "https://starling.dev/problems/", 30) != 0)
        return;
    snprintf(out, cap, "%s", type + 30);
    /* every problem says which request it answers */
    {
        char rid[80], hdr[80];
        assert_true(ah_json_str(r->body, "request_id", rid, sizeof rid));
        assert_true(ah_header(r, "X-Request-Id", hdr, sizeof hdr));
        assert_string_equal(rid, hdr);
        assert_int_equal(ah_json_int(r->body, "status"), r->status);
    }
}

/* ---- frames ------------------------------------------------------------------------------ */

void ah_update(const sl_layout *layout, int64_t round, int64_t version, float v, void **frame,
               size_t *len)
{
    sl_frame_header h = {SL_FRAME_VERSION,  SL_FRAME_UPDATE, 0, 0,
                         (uint64_t)version, (uint64_t)round, 0};
    sl_sparse_tensor t[8];
    uint32_t idx[3] = {0, 1, 2};
    float val[3] = {v, v * 0.5f, -v};
    sl_encode_params p;
    size_t n = sl_layout_tensors(layout);
    assert_true(n <= 8);
    h.layout_hash = sl_layout_hash(layout);
    for (size_t i = 0; i < n; i++) {
        t[i].n = 3;
        t[i].idx = idx;
        t[i].val = val;
    }
    sl_encode_params_default(&p);
    assert_int_equal(sl_frame_encode_update(layout, &h, t, &p, NULL, frame, len), SL_OK);
}

int ah_poison(void *frame, size_t len, float v)
{
    uint8_t *b = frame, pat[4], nan[4] = {0x00, 0x00, 0xc0, 0x7f};
    uint32_t bits;
    uLong crc;
    memcpy(&bits, &v, 4);
    for (int i = 0; i < 4; i++)
        pat[i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i + 4 <= len - 4; i++)
        if (memcmp(b + i, pat, 4) == 0) {
            memcpy(b + i, nan, 4);
            crc = crc32(crc32(0L, Z_NULL, 0), b, (uInt)(len - 4));
            for (int k = 0; k < 4; k++)
                b[len - 4 + (size_t)k] = (uint8_t)(crc >> (8 * k));
            return 1;
        }
    return 0;
}

void ah_initial_model(void **frame, size_t *len, char **b64)
{
    sl_layout *layout;
    float *w;
    size_t n, cap;
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    n = (size_t)sl_layout_params(layout);
    w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((int)(i % 7) - 3) * 0.1f;
    assert_int_equal(sl_frame_encode_model(layout, w, 1, 3, frame, len), SL_OK);
    cap = (*len + 2) / 3 * 4 + 1;
    *b64 = malloc(cap);
    assert_int_equal(sl_base64_encode(*frame, *len, *b64, cap), SL_OK);
    free(w);
    sl_layout_free(layout);
}

/* ---- the coordinator program ----------------------------------------------------------- */

int ah_free_port(void)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

pid_t ah_spawn(const char *const *args, int port, const char *scheme, const char *cafile)
{
    char url[128];
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *log = getenv("AH_CHILD_LOG");
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        sl_test_execv(SL_COORDINATOR_BIN, (char *const *)args);
        _exit(127);
    }
    snprintf(url, sizeof url, "%s://127.0.0.1:%d/healthz", scheme, port);
    for (int i = 0; i < 500; i++) {
        ah_resp r;
        int status;
        ah_https("GET", url, cafile, &r);
        if (r.status == 200) {
            ah_resp_free(&r);
            return pid;
        }
        ah_resp_free(&r);
        if (waitpid(pid, &status, WNOHANG) == pid)
            fail_msg("the coordinator exited early (status %d)", status);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    fail_msg("the coordinator did not answer /healthz");
    return -1;
}

int ah_wait_exit(pid_t pid, int ms)
{
    int status;
    for (int waited = 0; waited <= ms; waited += 10) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}
