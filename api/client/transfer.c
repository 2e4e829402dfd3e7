/*
 * transfer.c - resumable uploads (POST, PATCH at an offset, HEAD) and
 * downloads (Range, If-Range, SHA-256 against the ETag).
 *
 * Both helpers count failures without progress rather than attempts: on a
 * link that drops every few seconds each attempt moves some bytes, and the
 * transfer must get through however many attempts that takes, while a server
 * that accepts nothing still ends the call after max_attempts.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client_int.h"

#define UPLOAD_PREFIX "/v1/uploads/"

/* ------------------------------------------------------------------------ */
/* Upload                                                                   */
/* ------------------------------------------------------------------------ */

static void report(sl_client_upload_state *st, uint64_t len)
{
    if (st->progress != NULL)
        st->progress(st->progress_ctx, st, len);
}

static int id_char_ok(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.' || ch == '~';
}

/* The upload id at the end of a Location such as "/v1/uploads/{id}" (or a full URL). */
static int id_from_location(const char *location, char *id, size_t cap)
{
    const char *p = strstr(location, UPLOAD_PREFIX);
    if (p == NULL)
        return SL_ESYNTAX;
    p += strlen(UPLOAD_PREFIX);
    size_t n = 0;
    while (p[n] != '\0' && p[n] != '?')
        n++;
    if (n == 0 || n >= cap)
        return SL_ESYNTAX;
    for (size_t i = 0; i < n; i++) {
        if (!id_char_ok(p[i]))
            return SL_ESYNTAX;
    }
    memcpy(id, p, n);
    id[n] = '\0';
    return SL_OK;
}

static int id_ok(const char *id)
{
    size_t n = strnlen(id, SL_CLIENT_UPLOAD_ID_MAX + 1);
    if (n == 0 || n > SL_CLIENT_UPLOAD_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!id_char_ok(id[i]))
            return 0;
    }
    return 1;
}

/*
 * POST /v1/rounds/{round}/uploads carrying the first chunk of @data
 * (creation with upload: the declared length, digest and samples in the
 * signed query). A frame that fits in one chunk is done in this one request
 * (200 and the receipt). A server that knows only the JSON create (400 or
 * 415 to this form) is asked again with a JSON body and no bytes.
 * On SL_OK either the session exists (*@final = 0, @st updated: its id and
 * the offset the server took) or @out holds a final answer (*@final = 1).
 */
static int upload_create(sl_client *c, int64_t round, const uint8_t *data, size_t len,
                         const char *sha_hex, uint64_t num_samples, uint32_t local_steps,
                         sl_client_upload_state *st, sl_client_response *out, int *final)
{
    char path[224], steps[32] = "";
    char body[224];
    size_t chunk = sl__client_chunk(c);
    if (local_steps > 0) /* said only when known: servers before it ignore the key anyway */
        snprintf(steps, sizeof steps, "&local_steps=%" PRIu32, local_steps);
    snprintf(path, sizeof path,
             "/v1/rounds/%" PRId64 "/uploads?length=%" PRIu64 "&sha256=%s&num_samples=%" PRIu64
             "%s",
             round, (uint64_t)len, sha_hex, num_samples, steps);
    sl__request rq = {.method = "POST",
                      .path = path,
                      .body = data,
                      .len = len < chunk ? len : chunk,
                      .content_type = "application/offset+octet-stream"};
    sl_client_response r;
    int rc = sl__client_send(c, &rq, &r);
    if (rc == SL_OK && (r.status == 400 || r.status == 415)) {
        int n = snprintf(body, sizeof body,
                         "{\"length\": %" PRIu64 ", \"sha256\": \"%s\", \"num_samples\": %" PRIu64
                         ", \"local_steps\": %" PRIu32 "}",
                         (uint64_t)len, sha_hex, num_samples, local_steps);
        sl_client_response_free(&r);
        snprintf(path, sizeof path, "/v1/rounds/%" PRId64 "/uploads", round);
        rq = (sl__request){.method = "POST",
                           .path = path,
                           .body = body,
                           .len = (size_t)n,
                           .content_type = "application/json"};
        rc = sl__client_send(c, &rq, &r);
    }
    if (rc != SL_OK)
        return rc;
    if (r.status != 201) {
        if (r.status == 200) { /* every byte went with the create */
            st->offset = len;
            report(st, len);
        }
        *final = 1;
        *out = r;
        return SL_OK;
    }
    char id[SL_CLIENT_UPLOAD_ID_MAX + 1];
    rc = id_from_location(r.location, id, sizeof id);
    if (rc == SL_OK && r.upload_offset > (int64_t)len)
        rc = SL_ESYNTAX;
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "client", "upload create: bad Location or Upload-Offset");
        sl_client_response_free(&r);
        return rc;
    }
    memcpy(st->upload_id, id, sizeof id);
    st->offset = r.upload_offset > 0 ? (uint64_t)r.upload_offset : 0;
    sl_client_response_free(&r);
    report(st, len);
    *final = 0;
    return SL_OK;
}

static int upload_patch(sl_client *c, const sl_client_upload_state *st, const uint8_t *data,
                        size_t len, sl_client_response *r, int *retryable)
{
    char path[sizeof UPLOAD_PREFIX + SL_CLIENT_UPLOAD_ID_MAX];
    char offset_hdr[48];
    snprintf(path, sizeof path, UPLOAD_PREFIX "%s", st->upload_id);
    snprintf(offset_hdr, sizeof offset_hdr, "Upload-Offset: %" PRIu64, st->offset);
    const char *const headers[] = {offset_hdr, NULL};
    size_t chunk = sl__client_chunk(c);
    size_t remaining = len - (size_t)st->offset;
    sl__request rq = {.method = "PATCH",
                      .path = path,
                      .body = data + st->offset,
                      .len = remaining < chunk ? remaining : chunk,
                      .content_type = "application/offset+octet-stream",
                      .headers = headers};
    return sl__client_attempt(c, &rq, r, retryable);
}

static int upload_head(sl_client *c, const sl_client_upload_state *st, sl_client_response *r)
{
    char path[sizeof UPLOAD_PREFIX + SL_CLIENT_UPLOAD_ID_MAX];
    snprintf(path, sizeof path, UPLOAD_PREFIX "%s", st->upload_id);
    sl__request rq = {.method = "HEAD", .path = path};
    return sl__client_send(c, &rq, r);
}

/* 1 when @r is a problem document whose "reason" is @reason. */
static int problem_reason_is(const sl_client_response *r, const char *reason)
{
    cJSON *doc;
    const cJSON *v;
    int same;
    if (r->body == NULL || r->body_len == 0)
        return 0;
    doc = cJSON_ParseWithLength((const char *)r->body, r->body_len);
    v = doc != NULL ? cJSON_GetObjectItemCaseSensitive(doc, "reason") : NULL;
    same = cJSON_IsString(v) && strcmp(v->valuestring, reason) == 0;
    cJSON_Delete(doc);
    return same;
}

/* Forget a session the server no longer knows (404, or 410 "expired"). */
static void upload_forget(sl_client_upload_state *st, uint64_t len)
{
    sl_log(SL_LOG_INFO, "client", "upload %s is gone; starting a new one", st->upload_id);
    st->upload_id[0] = '\0';
    st->offset = 0;
    report(st, len);
}

/* Take the server's offset; a move forward is progress and resets @failures. */
static void upload_move(sl_client_upload_state *st, uint64_t offset, uint64_t len,
                        unsigned *failures)
{
    if (offset > st->offset)
        *failures = 0;
    if (offset != st->offset) {
        st->offset = offset;
        report(st, len);
    }
}

int sl_client_upload(sl_client *c, int64_t round, const void *data, size_t len,
                     uint64_t num_samples, sl_client_upload_state *st, sl_client_response *out)
{
    return sl_client_upload_steps(c, round, data, len, num_samples, 0, st, out);
}

int sl_client_upload_steps(sl_client *c, int64_t round, const void *data, size_t len,
                           uint64_t num_samples, uint32_t local_steps, sl_client_upload_state *st,
                           sl_client_response *out)
{
    if (c == NULL || round < 0 || data == NULL || len == 0 || st == NULL || out == NULL)
        return SL_EINVAL;
    if (st->upload_id[0] != '\0' && !id_ok(st->upload_id))
        return SL_EINVAL;
    uint8_t digest[32];
    char sha_hex[65];
    sl_sha256(data, len, digest);
    sl_hex(digest, sizeof digest, sha_hex);

    const unsigned max = sl__client_max_attempts(c);
    unsigned failures = 0;
    int restarted = 0;
    int need_head = st->offset > len; /* a caller's hint past the end: ask */
    int rc;
    sl_client_response r;
    for (;;) {
        if (st->upload_id[0] == '\0') {
            int final = 0;
            rc = upload_create(c, round, data, len, sha_hex, num_samples, local_steps, st, out,
                               &final);
            if (rc != SL_OK || final)
                return rc;
            need_head = 0;
        }
        if (need_head) {
            rc = upload_head(c, st, &r);
            if (rc != SL_OK)
                return rc;
            if (r.status == 404 && !restarted) {
                sl_client_response_free(&r);
                restarted = 1;
                upload_forget(st, len);
                continue;
            }
            if (r.status != 410 && (r.status < 200 || r.status > 299)) {
                *out = r; /* a refusal */
                return SL_OK;
            }
            /* 410, closed: HEAD has no body to say why (expired, or rejected);
             * the PATCH below hears the same 410 with its reason */
            int64_t at = r.status != 410     ? r.upload_offset
                         : st->offset <= len ? (int64_t)st->offset
                                             : 0;
            sl_client_response_free(&r);
            if (at < 0 || (uint64_t)at > len)
                return SL_ESYNTAX;
            upload_move(st, (uint64_t)at, len, &failures);
            need_head = 0;
        }

        /* At the final offset this is the zero-byte PATCH that completes a
         * session whose bytes all arrived (the answer to the last one was lost). */
        int retryable = 0;
        rc = upload_patch(c, st, data, len, &r, &retryable);
        if (rc != SL_OK) {
            if (!retryable || ++failures >= max)
                return rc;
            sl__client_backoff(c, failures, -1);
            need_head = 1;
            continue;
        }
        r.attempts = failures + 1;
        if (r.status == 200 || r.status == 201) {
            upload_move(st, len, len, &failures);
            *out = r;
            return SL_OK;
        }
        if (r.status == 204 || r.status == 409) {
            /* 204: appended. 409: our offset is not the server's; it says which is. */
            int64_t at = r.upload_offset;
            int moved = at >= 0 && (uint64_t)at <= len && (uint64_t)at > st->offset;
            if (!moved && ++failures >= max) {
                if (r.status == 409) {
                    *out = r;
                    return SL_OK;
                }
                sl_client_response_free(&r);
                return SL_EIO; /* 204s that never move the offset */
            }
            sl_client_response_free(&r);
            if (at >= 0 && (uint64_t)at <= len)
                upload_move(st, (uint64_t)at, len, &failures);
            else
                need_head = 1;
            continue;
        }
        if ((r.status == 404 || (r.status == 410 && problem_reason_is(&r, "expired"))) &&
            !restarted) {
            sl_client_response_free(&r);
            restarted = 1;
            upload_forget(st, len);
            continue;
        }
        if (retryable && ++failures < max) {
            sl__client_backoff(c, failures, r.retry_after_s);
            sl_client_response_free(&r);
            need_head = 1;
            continue;
        }
        *out = r;
        return SL_OK;
    }
}

/* ------------------------------------------------------------------------ */
/* Download                                                                 */
/* ------------------------------------------------------------------------ */

void sl_client_download_state_init(sl_client_download_state *d)
{
    if (d != NULL)
        memset(d, 0, sizeof *d);
}

void sl_client_download_state_reset(sl_client_download_state *d)
{
    if (d == NULL)
        return;
    free(d->data);
    memset(d, 0, sizeof *d);
}

/* Keeps the allocation, forgets the bytes. */
static void download_restart(sl_client_download_state *d)
{
    d->len = 0;
    d->total = 0;
    d->complete = 0;
    d->etag[0] = '\0';
}

/* 1 and the digest when @etag is "\"<64 hex>\"". */
static int strong_sha_etag(const char *etag, uint8_t digest[32])
{
    if (strlen(etag) != 66 || etag[0] != '"' || etag[65] != '"')
        return 0;
    return sl_unhex(etag + 1, digest, 32) == SL_OK;
}

static int grow(sl_client_download_state *d, size_t need)
{
    if (need <= d->cap)
        return SL_OK;
    size_t cap = d->cap < 65536 ? 65536 : d->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *bigger = realloc(d->data, cap);
    if (bigger == NULL)
        return SL_ENOMEM;
    d->data = bigger;
    d->cap = cap;
    return SL_OK;
}

int sl_client_download_state_preload(sl_client_download_state *d, const void *data, size_t len,
                                     const char *etag)
{
    if (d == NULL || (data == NULL && len > 0) || etag == NULL || etag[0] == '\0' ||
        strlen(etag) >= SL_CLIENT_HEADER_MAX)
        return SL_EINVAL;
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return SL_ENOMEM;
    if (len > 0)
        memcpy(copy, data, len);
    free(d->data);
    memset(d, 0, sizeof *d);
    d->data = copy;
    d->len = len;
    d->cap = len > 0 ? len : 1;
    memcpy(d->etag, etag, strlen(etag) + 1);
    return SL_OK;
}

typedef struct dl_ctx {
    sl_client_download_state *d;
    size_t max;
} dl_ctx;

/* "bytes <first>-<last>/<total>" */
static int parse_content_range(const char *s, uint64_t *first, uint64_t *last, uint64_t *total)
{
    if (strncmp(s, "bytes ", 6) != 0)
        return -1;
    s += 6;
    const char *dash = strchr(s, '-');
    const char *slash = dash != NULL ? strchr(dash, '/') : NULL;
    if (dash == NULL || slash == NULL)
        return -1;
    if (sl__parse_u64(s, (size_t)(dash - s), first) != 0 ||
        sl__parse_u64(dash + 1, (size_t)(slash - dash - 1), last) != 0 ||
        sl__parse_u64(slash + 1, strlen(slash + 1), total) != 0)
        return -1;
    return *first <= *last && *last < *total ? 0 : -1;
}

static int dl_headers(void *ctx, const sl_client_response *r, int *to_sink)
{
    dl_ctx *k = ctx;
    sl_client_download_state *d = k->d;
    *to_sink = 0;
    if (r->status == 200) {
        /* The whole body (a first request, or the resource changed). */
        if (r->content_length > 0 && (uint64_t)r->content_length > k->max)
            return SL_ETOOBIG;
        download_restart(d);
        d->total = r->content_length > 0 ? (uint64_t)r->content_length : 0;
        memcpy(d->etag, r->etag, sizeof d->etag);
        *to_sink = 1;
    } else if (r->status == 206) {
        uint64_t first, last, total;
        if (parse_content_range(r->content_range, &first, &last, &total) != 0 || first != d->len ||
            last + 1 != total)
            return SL_ECONFLICT;
        if (r->etag[0] != '\0' && strcmp(r->etag, d->etag) != 0)
            return SL_ECONFLICT;
        if (total > k->max)
            return SL_ETOOBIG;
        d->total = total;
        *to_sink = 1;
    }
    return SL_OK;
}

static int dl_write(void *ctx, const void *data, size_t n)
{
    dl_ctx *k = ctx;
    sl_client_download_state *d = k->d;
    if (n > k->max - d->len || (d->total > 0 && d->len + n > d->total))
        return SL_ETOOBIG;
    int rc = grow(d, d->len + n);
    if (rc != SL_OK)
        return rc;
    memcpy(d->data + d->len, data, n);
    d->len += n;
    return SL_OK;
}

int sl_client_download(sl_client *c, const char *path, const char *if_none_match,
                       sl_client_download_state *d, sl_client_response *out)
{
    if (c == NULL || path == NULL || d == NULL || out == NULL)
        return SL_EINVAL;
    if (if_none_match != NULL && strlen(if_none_match) >= SL_CLIENT_HEADER_MAX)
        return SL_EINVAL;
    if (d->complete)
        download_restart(d);
    dl_ctx k = {.d = d, .max = sl__client_max_download(c)};
    sl__sink sink = {.headers = dl_headers, .write = dl_write, .ctx = &k};
    unsigned max = sl__client_max_attempts(c);
    unsigned failures = 0;
    unsigned restarts = 0;
    uint8_t digest[32];
    for (;;) {
        /* Resume only bytes a strong ETag vouches for. */
        if (d->len > 0 && !strong_sha_etag(d->etag, digest) &&
            (d->etag[0] == '\0' || strncmp(d->etag, "W/", 2) == 0))
            download_restart(d);
        char inm[SL_CLIENT_HEADER_MAX + 32];
        char range[64];
        char if_range[SL_CLIENT_HEADER_MAX + 32];
        const char *headers[4] = {NULL, NULL, NULL, NULL};
        size_t nh = 0;
        if (if_none_match != NULL) {
            snprintf(inm, sizeof inm, "If-None-Match: %s", if_none_match);
            headers[nh++] = inm;
        }
        if (d->len > 0) {
            snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-", (uint64_t)d->len);
            snprintf(if_range, sizeof if_range, "If-Range: %s", d->etag);
            headers[nh++] = range;
            headers[nh++] = if_range;
        }
        sl__request rq = {.method = "GET", .path = path, .headers = headers, .sink = &sink};
        size_t before = d->len;
        sl_client_response r;
        int retryable = 0;
        int rc = sl__client_attempt(c, &rq, &r, &retryable);
        if (rc == SL_ECONFLICT) {
            /* A 206 that does not continue our bytes: start over, once or twice. */
            download_restart(d);
            if (++restarts > 2)
                return SL_EIO;
            continue;
        }
        if (rc != SL_OK) {
            if (!retryable)
                return rc;
            if (d->len > before)
                failures = 0;
            if (++failures >= max)
                return rc;
            sl__client_backoff(c, failures, -1);
            continue;
        }
        r.attempts = failures + 1;
        if (r.status == 200 || r.status == 206) {
            if (d->total > 0 && d->len != d->total) {
                sl_client_response_free(&r);
                download_restart(d);
                return SL_ETRUNCATED;
            }
            if (strong_sha_etag(d->etag, digest)) {
                uint8_t got[32];
                sl_sha256(d->data, d->len, got);
                if (memcmp(got, digest, sizeof got) != 0) {
                    sl_log(SL_LOG_WARN, "client", "GET %s: body does not match its ETag", path);
                    sl_client_response_free(&r);
                    download_restart(d);
                    return SL_ECHECKSUM;
                }
            }
            d->total = d->len;
            d->complete = 1;
            r.status = 200;
            *out = r;
            return SL_OK;
        }
        if (r.status == 416 && d->len > 0 && restarts++ < 2) {
            sl_client_response_free(&r);
            download_restart(d);
            continue;
        }
        if (retryable && ++failures < max) {
            sl__client_backoff(c, failures, r.retry_after_s);
            sl_client_response_free(&r);
            continue;
        }
        *out = r;
        return SL_OK;
    }
}
