/*
 * test_transfer.c - the resumable helpers of sl_client against a scripted
 * server that keeps tus-like upload state and serves a blob with ETag and
 * Range, and that misbehaves on purpose (409s, cuts, corrupt bytes).
 */
#include <cjson/cJSON.h>

#include "client_tests.h"

/* ---------------------------------------------------------------- uploads */

typedef struct tus {
    uint8_t data[65536];
    size_t length;
    size_t offset;
    char sha[65];
    uint64_t num_samples;
    char id[32];
    int sessions;
    int creates, patches, heads;
    int completed;
    int conflict_at;        /* this PATCH (1-based) gets a 409 whatever its offset */
    int conflict_no_offset; /* ...without the Upload-Offset header */
    int drop_every;         /* every n-th PATCH is cut after a random part of its body */
    int keep_partial;       /* keep the bytes of a cut PATCH (the real server does not) */
    int drops;
    int lose_answer; /* the completing PATCH is stored, then the link dies */
    int bad_type;    /* a PATCH arrived without application/offset+octet-stream */
    int with_bytes;  /* creates may carry the first bytes (else only the JSON form, 400) */
    int byte_creates, json_creates;
    int cut_creates; /* this many creates with bytes are cut after half their body */
    uint64_t rng;
} tus;

static void tus_complete(tus *t, mh_conn *conn);

/* A numeric or hex query value of @path into @out; 1 when present. */
static int query_value(const char *path, const char *key, char *out, size_t cap)
{
    const char *q = strchr(path, '?');
    size_t klen = strlen(key);
    while (q != NULL) {
        q++;
        if (strncmp(q, key, klen) == 0 && q[klen] == '=') {
            size_t n = strcspn(q + klen + 1, "&");
            if (n >= cap)
                return 0;
            memcpy(out, q + klen + 1, n);
            out[n] = '\0';
            return 1;
        }
        q = strchr(q, '&');
    }
    return 0;
}

/* Creation with upload: the declared values in the query, the first bytes in the body. */
static void tus_create_with_bytes(tus *t, mh_conn *conn, const mh_request *rq)
{
    char length[24], sha[80], samples[24], headers[128];
    if (strncmp(rq->path, "/v1/rounds/7/uploads?", 21) != 0 ||
        !query_value(rq->path, "length", length, sizeof length) ||
        !query_value(rq->path, "sha256", sha, sizeof sha) || strlen(sha) != 64 ||
        !query_value(rq->path, "num_samples", samples, sizeof samples) ||
        strtoull(length, NULL, 10) > sizeof t->data ||
        rq->content_length > strtoull(length, NULL, 10)) {
        mh_respond(conn, 400, NULL, "bad create", 10);
        return;
    }
    if (t->cut_creates > 0) {
        t->cut_creates--;
        t->drops++;
        mh_read_body(conn, t->data, rq->content_length / 2);
        return; /* the link dies mid-body; nothing is kept */
    }
    t->creates++;
    t->byte_creates++;
    t->length = (size_t)strtoull(length, NULL, 10);
    t->num_samples = strtoull(samples, NULL, 10);
    memcpy(t->sha, sha, sizeof t->sha); /* 64 hex digits and the NUL, checked above */
    t->offset = mh_read_body(conn, t->data, rq->content_length);
    if (t->offset == t->length) {
        tus_complete(t, conn);
        return;
    }
    snprintf(t->id, sizeof t->id, "up%d", ++t->sessions);
    snprintf(headers, sizeof headers, "Location: /v1/uploads/%s\r\nUpload-Offset: %zu\r\n", t->id,
             t->offset);
    mh_respond(conn, 201, headers, "{}", 2);
}

static void tus_create(tus *t, mh_conn *conn, const mh_request *rq)
{
    const char *type = mh_header(rq, "Content-Type");
    if (t->with_bytes && type != NULL && strcmp(type, "application/offset+octet-stream") == 0) {
        tus_create_with_bytes(t, conn, rq);
        return;
    }
    char body[512] = {0};
    size_t n = mh_read_body(conn, body, sizeof body - 1);
    cJSON *json = cJSON_ParseWithLength(body, n);
    const cJSON *len = cJSON_GetObjectItem(json, "length");
    const cJSON *sha = cJSON_GetObjectItem(json, "sha256");
    const cJSON *samples = cJSON_GetObjectItem(json, "num_samples");
    if (strcmp(rq->path, "/v1/rounds/7/uploads") != 0 || !cJSON_IsNumber(len) ||
        !cJSON_IsString(sha) || strlen(sha->valuestring) != 64 || !cJSON_IsNumber(samples) ||
        len->valuedouble > (double)sizeof t->data) {
        cJSON_Delete(json);
        mh_respond(conn, 400, NULL, "bad create", 10);
        return;
    }
    t->creates++;
    t->json_creates++;
    t->length = (size_t)len->valuedouble;
    t->num_samples = (uint64_t)samples->valuedouble;
    snprintf(t->sha, sizeof t->sha, "%s", sha->valuestring);
    cJSON_Delete(json);
    t->offset = 0;
    snprintf(t->id, sizeof t->id, "up%d", ++t->sessions);
    char headers[128];
    snprintf(headers, sizeof headers, "Location: /v1/uploads/%s\r\nUpload-Offset: 0\r\n", t->id);
    mh_respond(conn, 201, headers, "{}", 2);
}

static void tus_handler(void *ctx, mh_conn *conn, const mh_request *rq)
{
    tus *t = ctx;
    if (strcmp(rq->method, "POST") == 0) {
        tus_create(t, conn, rq);
        return;
    }
    const char *prefix = "/v1/uploads/";
    if (strncmp(rq->path, prefix, strlen(prefix)) != 0 ||
        strcmp(rq->path + strlen(prefix), t->id) != 0) {
        mh_respond(conn, 404, NULL, "no such upload", 14);
        return;
    }
    char headers[64];
    snprintf(headers, sizeof headers, "Upload-Offset: %zu\r\n", t->offset);
    if (strcmp(rq->method, "HEAD") == 0) {
        t->heads++;
        mh_respond(conn, 200, headers, NULL, 0);
        return;
    }
    t->patches++;
    const char *type = mh_header(rq, "Content-Type");
    const char *off = mh_header(rq, "Upload-Offset");
    if (type == NULL || strcmp(type, "application/offset+octet-stream") != 0)
        t->bad_type = 1;
    if (off == NULL || strtoull(off, NULL, 10) != t->offset || t->patches == t->conflict_at ||
        t->offset + rq->content_length > t->length) {
        mh_respond(conn, 409, t->conflict_no_offset ? NULL : headers, "offset mismatch", 15);
        return;
    }
    if (t->drop_every > 0 && t->patches % t->drop_every == 0) {
        /* The link dies mid-body: answer nothing; keep what arrived, or not. */
        size_t keep = (size_t)(sl_test_rand(&t->rng) % rq->content_length);
        size_t got = mh_read_body(conn, t->data + t->offset, keep);
        if (t->keep_partial)
            t->offset += got;
        t->drops++;
        return;
    }
    t->offset += mh_read_body(conn, t->data + t->offset, rq->content_length);
    if (t->offset < t->length) {
        snprintf(headers, sizeof headers, "Upload-Offset: %zu\r\n", t->offset);
        mh_respond(conn, 204, headers, NULL, 0);
        return;
    }
    tus_complete(t, conn);
}

/* Every byte is in: check the digest, answer the receipt (a duplicate after the first). */
static void tus_complete(tus *t, mh_conn *conn)
{
    int duplicate = t->completed;
    if (!t->completed) {
        uint8_t digest[32];
        char hex[65];
        sl_sha256(t->data, t->length, digest);
        sl_hex(digest, 32, hex);
        if (strcmp(hex, t->sha) != 0) {
            mh_respond(conn, 422, NULL, "{\"type\":\"digest\"}", 17);
            return;
        }
        t->completed = 1;
        if (t->lose_answer)
            return; /* durable, but the answer never leaves */
    }
    char receipt[96];
    int n =
        snprintf(receipt, sizeof receipt, "{\"accepted\":true,\"update_id\":9,\"duplicate\":%s}",
                 duplicate ? "true" : "false");
    mh_respond(conn, 200, "Content-Type: application/json\r\n", receipt, (size_t)n);
}

typedef struct progress_log {
    int calls;
    uint64_t last_offset;
    char last_id[SL_CLIENT_UPLOAD_ID_MAX + 1];
} progress_log;

static void on_progress(void *ctx, const sl_client_upload_state *st, uint64_t length)
{
    progress_log *p = ctx;
    assert_true(st->offset <= length);
    p->calls++;
    p->last_offset = st->offset;
    snprintf(p->last_id, sizeof p->last_id, "%s", st->upload_id);
}

static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)sl_test_rand(&seed);
}

/* Runs one upload of @len bytes against @t; returns the client's status. */
static int run_upload(tus *t, size_t len, sl_client_upload_state *st, sleeps *sl,
                      sl_client_response *r, const uint8_t *data)
{
    mh_server *srv = mh_start(tus_handler, t, NULL);
    char url[64];
    sl_client_options o;
    test_options(&o, url, sizeof url, "http", mh_port(srv), sl);
    o.upload_chunk_bytes = 1000;
    sl_client *c = make_client(&o);
    int rc = sl_client_upload(c, 7, data, len, 640, st, r);
    sl_client_free(c);
    mh_stop(srv);
    return rc;
}

void test_upload_plain(void **state)
{
    (void)state;
    static tus t;
    memset(&t, 0, sizeof t);
    uint8_t data[4500];
    fill(data, sizeof data, 1);
    progress_log p = {0};
    sl_client_upload_state st = {.progress = on_progress, .progress_ctx = &p};
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal((const char *)r.body,
                        "{\"accepted\":true,\"update_id\":9,\"duplicate\":false}");
    sl_client_response_free(&r);
    assert_int_equal(t.creates, 1);
    assert_int_equal(t.patches, 5); /* 1000-byte chunks */
    assert_int_equal(t.heads, 0);
    assert_false(t.bad_type);
    assert_int_equal(t.num_samples, 640);
    assert_memory_equal(t.data, data, sizeof data);
    assert_string_equal(st.upload_id, "up1");
    assert_int_equal(st.offset, sizeof data);
    assert_int_equal(p.calls, 6); /* created, then each chunk */
    assert_int_equal(p.last_offset, sizeof data);
    assert_int_equal(sl.n, 0);
}

/*
 * Against a server that takes bytes with the create: an update that fits in
 * one chunk is one request (200 and the receipt, no session, no PATCH); a
 * larger one sends its first chunk with the create and the rest by PATCH;
 * against one that knows only the JSON create (the other tests' server) the
 * client falls back to it.
 */
void test_upload_create_with_bytes(void **state)
{
    (void)state;
    static tus t;
    uint8_t data[4500];
    fill(data, sizeof data, 3);
    sleeps sl = {0};
    sl_client_response r;

    memset(&t, 0, sizeof t);
    t.with_bytes = 1;
    progress_log p = {0};
    sl_client_upload_state st = {.progress = on_progress, .progress_ctx = &p};
    assert_int_equal(run_upload(&t, 800, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal((const char *)r.body,
                        "{\"accepted\":true,\"update_id\":9,\"duplicate\":false}");
    sl_client_response_free(&r);
    assert_int_equal(t.byte_creates, 1);
    assert_int_equal(t.json_creates, 0);
    assert_int_equal(t.patches + t.heads, 0);
    assert_int_equal(t.num_samples, 640);
    assert_memory_equal(t.data, data, 800);
    assert_string_equal(st.upload_id, ""); /* there never was a session */
    assert_int_equal(st.offset, 800);
    assert_int_equal(p.last_offset, 800);

    memset(&t, 0, sizeof t);
    t.with_bytes = 1;
    memset(&st, 0, sizeof st);
    assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.byte_creates, 1);
    assert_int_equal(t.json_creates, 0);
    assert_int_equal(t.patches, 4); /* the first of five 1000-byte chunks went with the create */
    assert_int_equal(t.heads, 0);
    assert_false(t.bad_type);
    assert_memory_equal(t.data, data, sizeof data);
    assert_string_equal(st.upload_id, "up1");
    assert_int_equal(st.offset, sizeof data);

    memset(&t, 0, sizeof t); /* JSON only: answered 400, asked again in JSON */
    memset(&st, 0, sizeof st);
    assert_int_equal(run_upload(&t, 800, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.json_creates, 1);
    assert_int_equal(t.patches, 1);
    assert_memory_equal(t.data, data, 800);
    assert_int_equal(sl.n, 0);
}

/* A create carrying bytes cut mid-body is sent again, whole, after a backoff. */
void test_upload_create_with_bytes_cut(void **state)
{
    (void)state;
    static tus t;
    uint8_t data[2500];
    fill(data, sizeof data, 4);
    sleeps sl = {0};
    sl_client_response r;
    sl_client_upload_state st = {0};
    memset(&t, 0, sizeof t);
    t.with_bytes = 1;
    t.cut_creates = 2;
    assert_int_equal(run_upload(&t, 900, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal((const char *)r.body,
                        "{\"accepted\":true,\"update_id\":9,\"duplicate\":false}");
    sl_client_response_free(&r);
    assert_int_equal(t.drops, 2);
    assert_int_equal(t.byte_creates, 1);
    assert_int_equal(sl.n, 2); /* a backoff before each retry */
    assert_memory_equal(t.data, data, 900);
    assert_int_equal(st.offset, 900);

    /* larger than a chunk: the retried create opens the session with its chunk */
    memset(&t, 0, sizeof t);
    memset(&st, 0, sizeof st);
    t.with_bytes = 1;
    t.cut_creates = 1;
    assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.byte_creates, 1);
    assert_int_equal(t.patches, 2);
    assert_memory_equal(t.data, data, sizeof data);
}

void test_upload_conflict_and_resume(void **state)
{
    (void)state;
    static tus t;
    uint8_t data[7000];
    fill(data, sizeof data, 2);
    for (int with_offset = 1; with_offset >= 0; with_offset--) {
        /* A fresh upload whose third PATCH gets a 409; the 409 says where the
         * server is, or (without the header) HEAD does. */
        memset(&t, 0, sizeof t);
        t.conflict_at = 3;
        t.conflict_no_offset = !with_offset;
        sl_client_upload_state st = {0};
        sleeps sl = {0};
        sl_client_response r;
        assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
        assert_int_equal(r.status, 200);
        sl_client_response_free(&r);
        assert_int_equal(t.heads, with_offset ? 0 : 1);
        assert_int_equal(t.patches, 8);
        assert_memory_equal(t.data, data, sizeof data);
        assert_int_equal(sl.n, 0); /* a 409 needs no backoff */
    }

    /* Resume from caller state whose offset hint is ahead of the server. */
    memset(&t, 0, sizeof t);
    t.length = sizeof data;
    t.offset = 3000;
    memcpy(t.data, data, 3000);
    uint8_t digest[32];
    sl_sha256(data, sizeof data, digest);
    sl_hex(digest, 32, t.sha);
    snprintf(t.id, sizeof t.id, "resumed-1");
    sl_client_upload_state resumed = {.upload_id = "resumed-1", .offset = 5000};
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_upload(&t, sizeof data, &resumed, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.creates, 0);
    assert_int_equal(t.patches, 1 + 4); /* the 409, then 3000..7000 */
    assert_memory_equal(t.data, data, sizeof data);
    assert_int_equal(resumed.offset, sizeof data);

    /* A hint past the end is not trusted: HEAD first. */
    memset(&t, 0, sizeof t);
    t.length = sizeof data;
    t.offset = 6000;
    memcpy(t.data, data, 6000);
    sl_hex(digest, 32, t.sha);
    snprintf(t.id, sizeof t.id, "resumed-2");
    sl_client_upload_state past = {.upload_id = "resumed-2", .offset = 99999};
    assert_int_equal(run_upload(&t, sizeof data, &past, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.heads, 1);
    assert_int_equal(t.patches, 1);
    assert_memory_equal(t.data, data, sizeof data);
}

void test_upload_drops_at_random_offsets(void **state)
{
    (void)state;
    static tus t;
    static uint8_t data[20000];
    fill(data, sizeof data, 3);
    for (int keep = 0; keep < 2; keep++) {
        memset(&t, 0, sizeof t);
        t.drop_every = 2;
        t.keep_partial = keep;
        t.rng = 0x5eed + (uint64_t)keep;
        progress_log p = {0};
        sl_client_upload_state st = {.progress = on_progress, .progress_ctx = &p};
        sleeps sl = {0};
        sl_client_response r;
        assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
        assert_int_equal(r.status, 200);
        sl_client_response_free(&r);
        assert_true(t.drops >= 5);
        assert_int_equal(t.heads, t.drops); /* each cut resolved by asking the server */
        assert_int_equal(sl.n, t.drops);    /* ...after a backoff */
        assert_int_equal(t.creates, 1);
        assert_memory_equal(t.data, data, sizeof data);
        assert_int_equal(p.last_offset, sizeof data);
        assert_int_equal(st.offset, sizeof data);
    }
}

void test_upload_lost_final_answer(void **state)
{
    (void)state;
    static tus t;
    uint8_t data[3000];
    fill(data, sizeof data, 10);
    memset(&t, 0, sizeof t);
    t.lose_answer = 1;
    sl_client_upload_state st = {0};
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
    /* HEAD says every byte is there; a zero-byte PATCH fetches the receipt. */
    assert_int_equal(r.status, 200);
    assert_string_equal((const char *)r.body,
                        "{\"accepted\":true,\"update_id\":9,\"duplicate\":true}");
    sl_client_response_free(&r);
    assert_int_equal(t.heads, 1);
    assert_int_equal(t.patches, 3 + 1);
    assert_int_equal(sl.n, 1);
    assert_int_equal(st.offset, sizeof data);
}

void test_upload_expired_session(void **state)
{
    (void)state;
    static tus t;
    uint8_t data[2500];
    fill(data, sizeof data, 4);
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "current");
    sl_client_upload_state st = {.upload_id = "expired-9", .offset = 1000};
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_upload(&t, sizeof data, &st, &sl, &r, data), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(t.creates, 1);
    assert_string_equal(st.upload_id, "up1");
    assert_memory_equal(t.data, data, sizeof data);

    /* A round that refuses the upload: the 4xx answer comes back as is. */
    memset(&t, 0, sizeof t);
    sl_client_upload_state fresh = {0};
    mh_server *srv = mh_start(tus_handler, &t, NULL);
    char url[64];
    sl_client_options o;
    test_options(&o, url, sizeof url, "http", mh_port(srv), &sl);
    sl_client *c = make_client(&o);
    assert_int_equal(sl_client_upload(c, 8, data, sizeof data, 1, &fresh, &r), SL_OK);
    assert_int_equal(r.status, 400);
    sl_client_response_free(&r);
    assert_int_equal(sl_client_upload(c, 7, data, 0, 1, &fresh, &r), SL_EINVAL);
    sl_client_free(c);
    mh_stop(srv);
}

/* ---------------------------------------------------------------- downloads */

typedef struct blob {
    const uint8_t *data;
    size_t len;
    char etag[80];
    int gets;
    size_t cut_first_at; /* > 0: the first GET stops after this many body bytes */
    int corrupt;         /* flip one byte of what is sent */
    char range[4][64];
    char if_range[4][80];
} blob;

static void blob_handler(void *ctx, mh_conn *conn, const mh_request *rq)
{
    blob *b = ctx;
    int n = b->gets++;
    const char *range = mh_header(rq, "Range");
    const char *if_range = mh_header(rq, "If-Range");
    const char *inm = mh_header(rq, "If-None-Match");
    if (n < 4) {
        snprintf(b->range[n], sizeof b->range[n], "%s", range != NULL ? range : "");
        snprintf(b->if_range[n], sizeof b->if_range[n], "%s", if_range != NULL ? if_range : "");
    }
    char headers[256];
    snprintf(headers, sizeof headers, "ETag: %s\r\n", b->etag);
    if (inm != NULL && strcmp(inm, b->etag) == 0) {
        mh_respond(conn, 304, headers, NULL, 0);
        return;
    }
    size_t from = 0;
    int status = 200;
    if (range != NULL && (if_range == NULL || strcmp(if_range, b->etag) == 0)) {
        from = (size_t)strtoull(range + strlen("bytes="), NULL, 10);
        if (from >= b->len) {
            mh_respond(conn, 416, headers, NULL, 0);
            return;
        }
        status = 206;
        snprintf(headers, sizeof headers, "ETag: %s\r\nContent-Range: bytes %zu-%zu/%zu\r\n",
                 b->etag, from, b->len - 1, b->len);
    }
    uint8_t *copy = malloc(b->len);
    memcpy(copy, b->data, b->len);
    if (b->corrupt)
        copy[b->len / 2] ^= 0x40;
    if (n == 0 && b->cut_first_at > 0) {
        char head[256];
        int h = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\n%sContent-Length: %zu\r\n\r\n",
                         headers, b->len);
        mh_write(conn, head, (size_t)h);
        mh_write(conn, copy, b->cut_first_at);
    } else {
        mh_respond(conn, status, headers, copy + from, b->len - from);
    }
    free(copy);
}

static void blob_init(blob *b, const uint8_t *data, size_t len)
{
    memset(b, 0, sizeof *b);
    b->data = data;
    b->len = len;
    uint8_t digest[32];
    char hex[65];
    sl_sha256(data, len, digest);
    sl_hex(digest, 32, hex);
    snprintf(b->etag, sizeof b->etag, "\"%s\"", hex);
}

static int run_download(blob *b, sl_client_download_state *d, const char *inm, sleeps *sl,
                        size_t max_download, sl_client_response *r)
{
    mh_server *srv = mh_start(blob_handler, b, NULL);
    char url[64];
    sl_client_options o;
    test_options(&o, url, sizeof url, "http", mh_port(srv), sl);
    o.max_download_bytes = max_download;
    sl_client *c = make_client(&o);
    int rc = sl_client_download(c, "/v1/models/3", inm, d, r);
    sl_client_free(c);
    mh_stop(srv);
    return rc;
}

void test_download_resume(void **state)
{
    (void)state;
    static uint8_t data[50000];
    fill(data, sizeof data, 5);
    blob b;
    blob_init(&b, data, sizeof data);
    b.cut_first_at = 12345;
    sl_client_download_state d;
    sl_client_download_state_init(&d);
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_download(&b, &d, NULL, &sl, 0, &r), SL_OK);
    assert_int_equal(r.status, 200);
    assert_null(r.body);
    assert_string_equal(r.etag, b.etag);
    sl_client_response_free(&r);
    assert_int_equal(b.gets, 2);
    assert_string_equal(b.range[0], "");
    assert_string_equal(b.range[1], "bytes=12345-");
    assert_string_equal(b.if_range[1], b.etag);
    assert_true(d.complete);
    assert_int_equal(d.len, sizeof data);
    assert_memory_equal(d.data, data, sizeof data);
    assert_int_equal(sl.n, 1);
    sl_client_download_state_reset(&d);
    sl_client_download_state_reset(NULL);
}

void test_download_corrupt_body(void **state)
{
    (void)state;
    static uint8_t data[30000];
    fill(data, sizeof data, 6);
    blob b;
    blob_init(&b, data, sizeof data);
    b.corrupt = 1;
    b.cut_first_at = 20000; /* corruption across a resumed transfer too */
    sl_client_download_state d;
    sl_client_download_state_init(&d);
    sleeps sl = {0};
    sl_client_response r = {.status = -7};
    assert_int_equal(run_download(&b, &d, NULL, &sl, 0, &r), SL_ECHECKSUM);
    assert_int_equal(r.status, -7);
    assert_false(d.complete);
    assert_int_equal(d.len, 0); /* nothing to resume from */
    sl_client_download_state_reset(&d);
}

void test_download_not_modified(void **state)
{
    (void)state;
    static const uint8_t data[] = "model bytes";
    blob b;
    blob_init(&b, data, sizeof data);
    sl_client_download_state d;
    sl_client_download_state_init(&d);
    sleeps sl = {0};
    sl_client_response r;
    char inm[80];
    snprintf(inm, sizeof inm, "%s", b.etag);
    assert_int_equal(run_download(&b, &d, inm, &sl, 0, &r), SL_OK);
    assert_int_equal(r.status, 304);
    assert_false(d.complete);
    assert_int_equal(d.len, 0);
    sl_client_response_free(&r);
    /* A different ETag: the whole body. */
    assert_int_equal(run_download(&b, &d, "\"old\"", &sl, 0, &r), SL_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(d.len, sizeof data);
    sl_client_response_free(&r);
    sl_client_download_state_reset(&d);
}

void test_download_changed_resource(void **state)
{
    (void)state;
    static uint8_t old_data[8000], new_data[9000];
    fill(old_data, sizeof old_data, 7);
    fill(new_data, sizeof new_data, 8);
    blob old_blob;
    blob_init(&old_blob, old_data, sizeof old_data);
    blob b;
    blob_init(&b, new_data, sizeof new_data);
    /* Bytes saved by an earlier run, of the old version. */
    sl_client_download_state d;
    sl_client_download_state_init(&d);
    assert_int_equal(sl_client_download_state_preload(&d, old_data, 3000, old_blob.etag), SL_OK);
    assert_int_equal(sl_client_download_state_preload(&d, old_data, 10, ""), SL_EINVAL);
    assert_int_equal(d.len, 3000);
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_download(&b, &d, NULL, &sl, 0, &r), SL_OK);
    assert_int_equal(r.status, 200);
    sl_client_response_free(&r);
    assert_int_equal(b.gets, 1);
    assert_string_equal(b.range[0], "bytes=3000-");
    assert_string_equal(b.if_range[0], old_blob.etag);
    assert_int_equal(d.len, sizeof new_data);
    assert_memory_equal(d.data, new_data, sizeof new_data);
    assert_string_equal(d.etag, b.etag);
    sl_client_download_state_reset(&d);
}

void test_download_too_big(void **state)
{
    (void)state;
    static uint8_t data[5000];
    fill(data, sizeof data, 9);
    blob b;
    blob_init(&b, data, sizeof data);
    sl_client_download_state d;
    sl_client_download_state_init(&d);
    sleeps sl = {0};
    sl_client_response r;
    assert_int_equal(run_download(&b, &d, NULL, &sl, 1000, &r), SL_ETOOBIG);
    assert_int_equal(b.gets, 1);
    assert_int_equal(sl.n, 0);
    sl_client_download_state_reset(&d);
}
