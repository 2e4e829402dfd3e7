/*
 * http.c - the plumbing every handler shares: buffers, requests and
 * responses, problem documents, query strings, strict number parsing,
 * randomness and constant-time comparison.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "server_int.h"

#define MAX_TARGET 8192

/* ---- buffers ------------------------------------------------------------- */

void sl__text_put(sl__text *b, const void *p, size_t n)
{
    if (b->failed || n == 0)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *grown;
        while (cap < b->len + n + 1)
            cap *= 2;
        grown = realloc(b->data, cap);
        if (grown == NULL) {
            b->failed = 1;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sl__text_puts(sl__text *b, const char *s)
{
    sl__text_put(b, s, strlen(s));
}

void sl__text_printf(sl__text *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        sl__text_put(b, small, (size_t)n);
        return;
    }
    {
        char *big = malloc((size_t)n + 1);
        if (big == NULL) {
            b->failed = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sl__text_put(b, big, (size_t)n);
        free(big);
    }
}

void sl__text_html(sl__text *b, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<':
            sl__text_puts(b, "&lt;");
            break;
        case '>':
            sl__text_puts(b, "&gt;");
            break;
        case '&':
            sl__text_puts(b, "&amp;");
            break;
        case '"':
            sl__text_puts(b, "&quot;");
            break;
        case '\'':
            sl__text_puts(b, "&#39;");
            break;
        default:
            sl__text_put(b, s, 1);
        }
    }
}

void sl__text_free(sl__text *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- requests -------------------------------------------------------------- */

sl__req *sl__req_new(const char *target)
{
    sl__req *rq;
    size_t n, plen;
    const char *q;
    if (target == NULL)
        return NULL;
    n = strnlen(target, MAX_TARGET + 1);
    if (n > MAX_TARGET)
        return NULL;
    rq = calloc(1, sizeof *rq);
    if (rq == NULL)
        return NULL;
    q = memchr(target, '?', n);
    plen = q ? (size_t)(q - target) : n;
    rq->target = malloc(n + 1);
    rq->path = malloc(plen + 1);
    if (rq->target == NULL || rq->path == NULL) {
        sl__req_free(rq);
        return NULL;
    }
    memcpy(rq->target, target, n + 1);
    memcpy(rq->path, target, plen);
    rq->path[plen] = '\0';
    rq->query = q ? rq->target + plen + 1 : rq->target + n;
    rq->route = -1;
    return rq;
}

void sl__req_free(sl__req *rq)
{
    if (rq == NULL)
        return;
    for (size_t i = 0; i < rq->nheaders; i++) {
        free(rq->headers[i].name);
        free(rq->headers[i].value);
    }
    free(rq->headers);
    free(rq->body);
    if (rq->answer != NULL) {
        sl__resp_reset(rq->answer);
        free(rq->answer);
    }
    free(rq->target);
    free(rq->path);
    free(rq);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d != NULL)
        memcpy(d, s, n + 1);
    return d;
}

int sl__req_add_header(sl__req *rq, const char *name, const char *value)
{
    sl__kv *kv;
    if (name == NULL || value == NULL)
        return SL_EINVAL;
    if (rq->nheaders == SL__MAX_HEADERS)
        return SL_ETOOBIG;
    if (rq->nheaders == rq->cap_headers) {
        size_t cap = rq->cap_headers ? rq->cap_headers * 2 : 16;
        sl__kv *grown = realloc(rq->headers, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        rq->headers = grown;
        rq->cap_headers = cap;
    }
    kv = &rq->headers[rq->nheaders];
    kv->name = dup_str(name);
    kv->value = dup_str(value);
    if (kv->name == NULL || kv->value == NULL) {
        free(kv->name);
        free(kv->value);
        return SL_ENOMEM;
    }
    rq->nheaders++;
    return SL_OK;
}

int sl__req_add_body(sl__req *rq, const void *data, size_t len, uint64_t max)
{
    if (rq->too_big || (uint64_t)rq->body_len + len > max) {
        rq->too_big = 1;
        rq->discarded += len;
        return SL_ETOOBIG;
    }
    if (rq->body_len + len > rq->body_cap) {
        size_t cap = rq->body_cap ? rq->body_cap : 4096;
        uint8_t *grown;
        while (cap < rq->body_len + len)
            cap *= 2;
        if ((uint64_t)cap > max)
            cap = (size_t)max;
        grown = realloc(rq->body, cap);
        if (grown == NULL)
            return SL_ENOMEM;
        rq->body = grown;
        rq->body_cap = cap;
    }
    memcpy(rq->body + rq->body_len, data, len);
    rq->body_len += len;
    return SL_OK;
}

int sl__req_reserve_body(sl__req *rq, size_t len)
{
    uint8_t *grown;
    if (len <= rq->body_cap)
        return SL_OK;
    grown = realloc(rq->body, len);
    if (grown == NULL)
        return SL_ENOMEM;
    rq->body = grown;
    rq->body_cap = len;
    return SL_OK;
}

const char *sl__req_header(const sl__req *rq, const char *name)
{
    for (size_t i = 0; i < rq->nheaders; i++)
        if (strcasecmp(rq->headers[i].name, name) == 0)
            return rq->headers[i].value;
    return NULL;
}

static int id_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-';
}

void sl__req_assign_id(sl_server *s, sl__req *rq)
{
    const char *given = sl__req_header(rq, "X-Request-Id");
    if (given != NULL) {
        size_t n = strnlen(given, 65);
        int ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++)
            ok = id_char(given[i]);
        if (ok) {
            memcpy(rq->request_id, given, n + 1);
            return;
        }
    }
    snprintf(rq->request_id, sizeof rq->request_id, "%016" PRIx64 "-%08" PRIx64, s->rid_prefix,
             (uint64_t)atomic_fetch_add(&s->rid_counter, 1));
}

/* ---- responses ----------------------------------------------------------- */

void sl__resp_init(sl__resp *rs)
{
    memset(rs, 0, sizeof *rs);
    rs->status = 500;
    rs->fd = -1;
}

void sl__resp_reset(sl__resp *rs)
{
    free(rs->body);
    if (rs->fd >= 0)
        close(rs->fd);
    sl__resp_init(rs);
}

static void drop_file(sl__resp *rs)
{
    if (rs->fd >= 0)
        close(rs->fd);
    rs->fd = -1;
    rs->fd_offset = rs->fd_len = 0;
}

void sl__resp_file(sl__resp *rs, int status, const char *ctype, int fd, uint64_t offset,
                   uint64_t len)
{
    free(rs->body);
    rs->body = NULL;
    rs->len = 0;
    drop_file(rs);
    rs->fd = fd;
    rs->fd_offset = offset;
    rs->fd_len = len;
    rs->status = status;
    snprintf(rs->content_type, sizeof rs->content_type, "%s", ctype ? ctype : "");
}

uint64_t sl__resp_length(const sl__resp *rs)
{
    return rs->fd >= 0 ? rs->fd_len : rs->len;
}

int sl__resp_load_file(sl__resp *rs)
{
    char *data;
    size_t got = 0;
    if (rs->fd < 0)
        return SL_OK;
    data = rs->fd_len < SIZE_MAX ? malloc(rs->fd_len ? (size_t)rs->fd_len : 1) : NULL;
    if (data == NULL) {
        drop_file(rs);
        sl__resp_bytes(rs, 503, "text/plain", NULL, 0);
        return SL_ENOMEM;
    }
    while (got < rs->fd_len) {
        ssize_t n =
            pread(rs->fd, data + got, (size_t)rs->fd_len - got, (off_t)(rs->fd_offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(data);
            drop_file(rs);
            sl__resp_bytes(rs, 500, "text/plain", NULL, 0);
            return SL_EIO;
        }
        got += (size_t)n;
    }
    drop_file(rs);
    rs->body = data;
    rs->len = got;
    return SL_OK;
}

int sl__parse_range(const char *h, uint64_t len, uint64_t *first, uint64_t *last)
{
    unsigned long long a = 0, b = 0;
    const char *p;
    char *end;
    if (h == NULL || strncmp(h, "bytes=", 6) != 0 || strchr(h, ',') != NULL)
        return 0;
    p = h + 6;
    if (*p == '-') {
        if (p[1] < '0' || p[1] > '9')
            return 0;
        errno = 0;
        b = strtoull(p + 1, &end, 10);
        if (*end != '\0' || errno == ERANGE)
            return 0;
        if (b == 0 || len == 0)
            return -1;
        *first = b >= len ? 0 : len - b;
        *last = len - 1;
        return 1;
    }
    if (*p < '0' || *p > '9')
        return 0;
    errno = 0;
    a = strtoull(p, &end, 10);
    if (*end != '-' || errno == ERANGE)
        return 0;
    p = end + 1;
    if (*p == '\0') {
        b = len - 1;
    } else {
        if (*p < '0' || *p > '9')
            return 0;
        b = strtoull(p, &end, 10);
        if (*end != '\0' || b < a || errno == ERANGE)
            return 0;
    }
    if (len == 0 || a >= len)
        return -1;
    *first = a;
    *last = b >= len ? len - 1 : b;
    return 1;
}

void sl__resp_header(sl__resp *rs, const char *name, const char *fmt, ...)
{
    sl__resp_hdr *h = NULL;
    va_list ap;
    for (size_t i = 0; i < rs->nheaders; i++)
        if (strcasecmp(rs->headers[i].name, name) == 0)
            h = &rs->headers[i];
    if (h == NULL) {
        if (rs->nheaders == SL__RESP_HEADERS)
            return;
        h = &rs->headers[rs->nheaders++];
        snprintf(h->name, sizeof h->name, "%s", name);
    }
    va_start(ap, fmt);
    vsnprintf(h->value, sizeof h->value, fmt, ap);
    va_end(ap);
}

const char *sl__resp_get_header(const sl__resp *rs, const char *name)
{
    for (size_t i = 0; i < rs->nheaders; i++)
        if (strcasecmp(rs->headers[i].name, name) == 0)
            return rs->headers[i].value;
    return NULL;
}

void sl__resp_bytes(sl__resp *rs, int status, const char *ctype, void *bytes, size_t len)
{
    free(rs->body);
    drop_file(rs);
    rs->body = bytes;
    rs->len = bytes ? len : 0;
    rs->status = status;
    snprintf(rs->content_type, sizeof rs->content_type, "%s", ctype ? ctype : "");
}

void sl__resp_copy(sl__resp *rs, int status, const char *ctype, const void *text, size_t len)
{
    char *copy = malloc(len ? len : 1);
    if (copy == NULL) {
        sl__resp_bytes(rs, 503, "text/plain", NULL, 0);
        return;
    }
    if (len > 0)
        memcpy(copy, text, len);
    sl__resp_bytes(rs, status, ctype, copy, len);
}

void sl__resp_json(sl__resp *rs, int status, cJSON *doc)
{
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (text == NULL) {
        /* out of memory while answering: a bodiless 503 is all that is left */
        sl__resp_bytes(rs, 503, "text/plain", NULL, 0);
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    sl__resp_bytes(rs, status, "application/json", text, strlen(text));
}

static const char *status_title(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 416:
        return "Range Not Satisfiable";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

void sl__problem(sl__resp *rs, const sl__req *rq, int status, const char *name, const char *reason,
                 const char *fmt, ...)
{
    char type[96], detail[512];
    cJSON *doc = cJSON_CreateObject();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(type, sizeof type, "https://starling.dev/problems/%s", name);
    if (doc != NULL) {
        cJSON_AddStringToObject(doc, "type", type);
        cJSON_AddStringToObject(doc, "title", status_title(status));
        cJSON_AddNumberToObject(doc, "status", status);
        cJSON_AddStringToObject(doc, "detail", detail);
        cJSON_AddStringToObject(doc, "request_id", rq ? rq->request_id : "");
        if (reason != NULL)
            cJSON_AddStringToObject(doc, "reason", reason);
    }
    sl__resp_json(rs, status, doc);
    if (rs->status == status)
        snprintf(rs->content_type, sizeof rs->content_type, "application/problem+json");
}

void sl__problem_status(sl__resp *rs, const sl__req *rq, int rc, const char *what)
{
    if (rc == SL_EFENCED) { /* a replica that does not lead: another one (behind the same
                             * balancer) does it */
        sl__problem(rs, rq, 503, "unavailable", NULL,
                    "%s: this replica does not lead its replicas; retry (another replica will)",
                    what);
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    if (rc == SL_EBUSY || rc == SL_ETIMEDOUT || rc == SL_ENOSPC || rc == SL_ENOMEM) {
        sl__problem(rs, rq, 503, "unavailable", NULL, "%s: %s; retry later", what, sl_strerror(rc));
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    sl__problem(rs, rq, 500, "internal", NULL, "%s: %s", what, sl_strerror(rc));
}

/* ---- parsing ------------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sl__query_get(const char *query, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    const char *p = query;
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n >= klen && memcmp(p, key, klen) == 0 && (n == klen || p[klen] == '=')) {
            const char *v = n == klen ? p + n : p + klen + 1;
            size_t o = 0;
            for (; v < p + n; v++) {
                int c = (unsigned char)*v;
                if (c == '%') {
                    int hi = v + 2 < p + n ? hexval(v[1]) : -1;
                    int lo = hi >= 0 ? hexval(v[2]) : -1;
                    if (lo < 0)
                        return -1;
                    c = hi * 16 + lo;
                    v += 2;
                } else if (c == '+') {
                    c = ' ';
                }
                if (c == 0 || o + 1 >= cap)
                    return -1;
                out[o++] = (char)c;
            }
            out[o] = '\0';
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

int sl__parse_i64(const char *text, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    long long v;
    if (text == NULL || *text == '\0' || !(isdigit((unsigned char)text[0]) || text[0] == '-'))
        return SL_EINVAL;
    if (strlen(text) > 20)
        return SL_EINVAL;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return SL_EINVAL;
    *out = (int64_t)v;
    return SL_OK;
}

int sl__json_i64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    double d;
    if (v == NULL)
        return SL_ENOENT;
    if (!cJSON_IsNumber(v))
        return SL_EINVAL;
    d = v->valuedouble;
    /* exact integers only; 2^53 bounds what a double holds exactly */
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
        return SL_EINVAL;
    if ((int64_t)d < min || (int64_t)d > max)
        return SL_EINVAL;
    *out = (int64_t)d;
    return SL_OK;
}

cJSON *sl__json_add_i64(cJSON *obj, const char *name, int64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", (long long)v);
    return cJSON_AddRawToObject(obj, name, text);
}

cJSON *sl__json_body(const sl__req *rq, sl__resp *rs)
{
    const char *end = NULL;
    cJSON *doc;
    if (rq->body_len == 0) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "a JSON object body is required");
        return NULL;
    }
    doc = cJSON_ParseWithLengthOpts((const char *)rq->body, rq->body_len, &end, 0);
    if (doc != NULL) {
        /* nothing but whitespace may follow the document */
        const char *stop = (const char *)rq->body + rq->body_len;
        while (end < stop && isspace((unsigned char)*end))
            end++;
        if (end != stop || !cJSON_IsObject(doc)) {
            cJSON_Delete(doc);
            doc = NULL;
        }
    }
    if (doc == NULL)
        sl__problem(rs, rq, 400, "bad-request", NULL, "the body is not a JSON object");
    return doc;
}

/* ---- randomness, comparison, time ------------------------------------------------ */

void sl__random(void *out, size_t len)
{
    uint8_t *p = out;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            abort(); /* no entropy means no safe ids or nonces: refuse to go on */
        }
        p += n;
        len -= (size_t)n;
    }
}

void sl__id_encode(const uint8_t *raw, size_t nbytes, char *out, size_t cap)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < nbytes; i++) {
        acc = (acc << 8) | raw[i];
        bits += 8;
        while (bits >= 6 && o + 1 < cap) {
            bits -= 6;
            out[o++] = alphabet[(acc >> bits) & 63];
        }
    }
    if (bits > 0 && o + 1 < cap)
        out[o++] = alphabet[(acc << (6 - bits)) & 63];
    if (cap > 0)
        out[o] = '\0';
}

void sl__random_id(char *out, size_t cap, size_t nbytes)
{
    uint8_t raw[48];
    if (nbytes > sizeof raw)
        nbytes = sizeof raw;
    sl__random(raw, nbytes);
    sl__id_encode(raw, nbytes, out, cap);
}

int sl__ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

int64_t sl__wall_ms(const sl_server *s)
{
    return sl_clock_wall_ns(s->clock) / 1000000;
}

int64_t sl__mono_ns(const sl_server *s)
{
    return sl_clock_monotonic_ns(s->clock);
}
