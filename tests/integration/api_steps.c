/* api_steps.c - protocol steps shared by the server's integration tests:
 * problem checks, tasks, check-ins, resumable uploads, downloads, raw
 * sockets, the curl program. See api_harness.h. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <regex.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "../support/sl_test.h"
#include "api_harness.h"

void ah_expect_problem(const ah_resp *r, long status, const char *type)
{
    char got[64];
    if (r->status != status)
        fail_msg("status %ld, expected %ld: %s", r->status, status, r->body);
    ah_problem_type(r, got, sizeof got);
    if (strcmp(got, type) != 0)
        fail_msg("problem type \"%s\", expected \"%s\": %s", got, type, r->body);
}

void ah_expect_reason(const ah_resp *r, long status, const char *type, const char *reason)
{
    char got[64];
    ah_expect_problem(r, status, type);
    assert_true(ah_json_str(r->body, "reason", got, sizeof got));
    assert_string_equal(got, reason);
}

void ah_get(ah_fx *f, const char *path, const char *const *hdrs, size_t nh, ah_resp *r)
{
    char url[4096];
    snprintf(url, sizeof url, "%s%s", f->base, path);
    ah_http("GET", url, hdrs, nh, NULL, 0, r);
}

uint64_t ah_audit_count(ah_fx *f)
{
    uint64_t n = 0;
    assert_int_equal(sl_store_count_audit(f->store, &n), SL_OK);
    return n;
}

/* Every line of a Prometheus text exposition is a comment or a sample. */
void ah_check_prometheus(const char *text)
{
    regex_t sample, comment;
    char line[1024];
    size_t samples = 0;
    assert_int_equal(regcomp(&sample,
                             "^[a-zA-Z_:][a-zA-Z0-9_:]*"
                             "(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\""
                             "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\")*\\})?"
                             " (-?[0-9.eE+-]+|\\+Inf|-Inf|NaN)$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    assert_int_equal(regcomp(&comment,
                             "^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* "
                             "(counter|gauge|histogram|summary|untyped))$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    for (const char *p = text; *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        assert_true(n < sizeof line);
        memcpy(line, p, n);
        line[n] = '\0';
        if (regexec(line[0] == '#' ? &comment : &sample, line, 0, NULL, 0) != 0)
            fail_msg("not Prometheus text: \"%s\"", line);
        samples += line[0] != '#';
        p = end ? end + 1 : p + n;
    }
    assert_true(samples > 10);
    regfree(&sample);
    regfree(&comment);
}

int64_t ah_create_task(ah_fx *f, const char *fmt)
{
    void *frame;
    size_t len;
    char *b64, *body;
    size_t cap;
    ah_resp r;
    int64_t id;
    ah_initial_model(&frame, &len, &b64);
    cap = strlen(fmt) + strlen(b64) + 1;
    body = malloc(cap);
    snprintf(body, cap, fmt, b64);
    ah_admin(f, "POST", "/v1/tasks", body, strlen(body), &r);
    if (r.status != 201)
        fail_msg("create task: %ld %s", r.status, r.body);
    id = ah_json_int(r.body, "task_id");
    ah_resp_free(&r);
    free(body);
    free(b64);
    free(frame);
    return id;
}

int64_t ah_checked_in(ah_fx *f, int64_t task)
{
    sl_task_status st;
    assert_int_equal(sl_engine_task_status(f->engine, task, &st), SL_OK);
    return st.checked_in;
}

static const char *const octets[] = {"Content-Type: application/offset+octet-stream"};

/* A session for @len bytes declared with digest @sha (NULL: the real one). */
void ah_upload_create(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                      const uint8_t *sha, char *id, size_t cap)
{
    uint8_t digest[32];
    char hex[65], body[256], path[96], value[128];
    ah_resp r;
    if (sha == NULL) {
        sl_sha256(frame, len, digest);
        sha = digest;
    }
    sl_hex(sha, 32, hex);
    snprintf(body, sizeof body, "{\"length\":%zu,\"sha256\":\"%s\",\"num_samples\":100}", len, hex);
    snprintf(path, sizeof path, "/v1/rounds/%lld/uploads", (long long)round);
    ah_dev_call(f, d, "POST", path, body, strlen(body), NULL, 0, &r);
    if (r.status != 201)
        fail_msg("create upload: %ld %s", r.status, r.body);
    assert_true(ah_json_str(r.body, "upload_id", id, cap));
    assert_true(ah_header(&r, "Location", value, sizeof value));
    snprintf(path, sizeof path, "/v1/uploads/%s", id);
    assert_string_equal(value, path);
    assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
    assert_string_equal(value, "0");
    ah_resp_free(&r);
}

void ah_upload_patch(ah_fx *f, const ah_dev *d, const char *id, uint64_t offset, const void *bytes,
                     size_t n, ah_resp *r)
{
    char path[96], off[64];
    const char *extra[2] = {octets[0], off};
    snprintf(path, sizeof path, "/v1/uploads/%s", id);
    snprintf(off, sizeof off, "Upload-Offset: %llu", (unsigned long long)offset);
    ah_dev_call(f, d, "PATCH", path, bytes ? bytes : "", n, extra, 2, r);
}

uint64_t ah_upload_head(ah_fx *f, const ah_dev *d, const char *id, long *status)
{
    char path[96], value[64];
    ah_resp r;
    uint64_t offset = 0;
    snprintf(path, sizeof path, "/v1/uploads/%s", id);
    ah_dev_call(f, d, "HEAD", path, NULL, 0, NULL, 0, &r);
    *status = r.status;
    if (r.status == 200) {
        assert_true(ah_header(&r, "Upload-Offset", value, sizeof value));
        offset = strtoull(value, NULL, 10);
        assert_true(ah_header(&r, "Upload-Length", value, sizeof value));
    }
    ah_resp_free(&r);
    return offset;
}

/* The signed path of a create carrying bytes: the declared values in the query. */
static void create_path(int64_t round, size_t len, const uint8_t *sha, char *path, size_t cap)
{
    char hex[65];
    sl_hex(sha, 32, hex);
    snprintf(path, cap, "/v1/rounds/%lld/uploads?length=%zu&sha256=%s&num_samples=100",
             (long long)round, len, hex);
}

void ah_upload_create_with(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                           size_t n, const uint8_t *sha, ah_resp *r)
{
    uint8_t digest[32];
    char path[256];
    if (sha == NULL) {
        sl_sha256(frame, len, digest);
        sha = digest;
    }
    create_path(round, len, sha, path, sizeof path);
    ah_dev_call(f, d, "POST", path, n ? frame : "", n, octets, 1, r);
}

void ah_upload_create_cut(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                          size_t n, size_t sent)
{
    uint8_t digest[32];
    char path[256], nonce[64], head[2048];
    ah_sig sig;
    int fd;
    sl_sha256(frame, len, digest);
    create_path(round, len, digest, path, sizeof path);
    assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
    ah_sign(d->key, d->id, "POST", path, ah_now_ms(), nonce, frame, n, &sig);
    snprintf(head, sizeof head,
             "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n%s\r\n%s\r\n%s\r\n%s\r\n"
             "Content-Length: %zu\r\n\r\n",
             path, sig.lines[0], sig.lines[1], sig.lines[2], sig.lines[3], octets[0], n);
    fd = ah_raw_connect((int)sl_server_port(f->server));
    ah_raw_send(fd, head, strlen(head));
    ah_raw_send(fd, frame, sent);
    close(fd);
}

/* Upload @frame whole in one PATCH; the final answer in @r. */
void ah_upload_all(ah_fx *f, const ah_dev *d, int64_t round, const void *frame, size_t len,
                   const uint8_t *sha, ah_resp *r)
{
    char id[40];
    ah_upload_create(f, d, round, frame, len, sha, id, sizeof id);
    ah_upload_patch(f, d, id, 0, frame, len, r);
}

void ah_checkin(ah_fx *f, const ah_dev *d, int64_t task, ah_resp *r)
{
    char body[96];
    snprintf(body, sizeof body, "{\"task_id\":%lld,\"num_samples\":100}", (long long)task);
    ah_dev_call(f, d, "POST", "/v1/checkin", body, strlen(body), NULL, 0, r);
    assert_int_equal(r->status, 200);
}

/* The model version @version of @task decoded (asserting the ETag). */
void ah_download(ah_fx *f, const ah_dev *d, const sl_layout *layout, const char *path,
                 const float *base, uint64_t base_version, float *params, char *etag, size_t cap)
{
    ah_resp r;
    uint8_t sha[32];
    char hex[65], expect[70];
    ah_dev_call(f, d, "GET", path, NULL, 0, NULL, 0, &r);
    if (r.status != 200)
        fail_msg("GET %s: %ld %s", path, r.status, r.body);
    sl_sha256(r.body, r.len, sha);
    sl_hex(sha, 32, hex);
    snprintf(expect, sizeof expect, "\"%s\"", hex);
    assert_true(ah_header(&r, "ETag", etag, cap));
    assert_string_equal(etag, expect);
    assert_int_equal(sl_frame_decode_model(layout, r.body, r.len, base, base_version, params),
                     SL_OK);
    ah_resp_free(&r);
}

/* ---- limits on the wire ------------------------------------------------------------ */

int ah_raw_connect(int port)
{
    struct sockaddr_in a;
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

void ah_raw_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Read what the server sends until it closes or goes quiet. */
size_t ah_raw_read(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL && strstr(buf, "}") != NULL)
            break;
    }
    buf[got] = '\0';
    return got;
}

int ah_have(const char *program)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", program);
    return system(cmd) == 0;
}

/* Run curl with @args; the -w output into @out. */
void ah_curl_cli(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    FILE *p;
    size_t n;
    snprintf(cmd, sizeof cmd, "curl -s --max-time 20 %s", args);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    pclose(p);
}

void ah_write_file(const char *path, const char *text)
{
    assert_int_equal(sl_fs_write_atomic(path, text, strlen(text), 0600), SL_OK);
}
