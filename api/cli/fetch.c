/*
 * fetch.c - a download in byte ranges with a progress display, for
 * `starling model export` and `starling backup`. Each range is one request
 * with the client's retries, so a link that drops loses one range at most;
 * If-Range with the strong ETag keeps the pieces from one representation,
 * and the whole is checked against the ETag's SHA-256.
 */
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "progress.h"
#include "starling/common.h"

/* "bytes a-b/total" of a 206. */
static int content_range(const char *h, uint64_t *a, uint64_t *b, uint64_t *total)
{
    unsigned long long x, y, t;
    char tail;
    if (sscanf(h, "bytes %llu-%llu/%llu%c", &x, &y, &t, &tail) != 3 || y < x || y >= t)
        return 0;
    *a = x;
    *b = y;
    *total = t;
    return 1;
}

static int sha_etag(const char *etag, char hex[65])
{
    if (strlen(etag) != 66 || etag[0] != '"' || etag[65] != '"')
        return 0;
    for (int i = 1; i < 65; i++)
        if (!((etag[i] >= '0' && etag[i] <= '9') || (etag[i] >= 'a' && etag[i] <= 'f')))
            return 0;
    memcpy(hex, etag + 1, 64);
    hex[64] = '\0';
    return 1;
}

static void fetch_error(sl__cli *c, const char *path, const sl_client_response *r)
{
    cJSON *doc = r->body ? cJSON_ParseWithLength((const char *)r->body, r->body_len) : NULL;
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(doc, "detail");
    sl__cli_error(c, "GET %s: HTTP %ld%s%s%s", path, r->status, cJSON_IsString(detail) ? ": " : "",
                  cJSON_IsString(detail) ? detail->valuestring : "",
                  r->status == 401
                      ? (c->token_file ? " (is the token right?)" : " (pass --token-file FILE)")
                      : "");
    cJSON_Delete(doc);
}

int sl__cli_fetch(sl__cli *c, const char *path, const char *label, size_t chunk, size_t max,
                  uint8_t **data, size_t *len, char sha_hex[65])
{
    sl_progress bar;
    uint8_t *buf = NULL;
    uint64_t have = 0, total = 0;
    char etag[SL_CLIENT_HEADER_MAX] = "", range[64], if_range[SL_CLIENT_HEADER_MAX + 16];
    int restarts = 0, rc = SL__CLI_ERROR;
    if (chunk == 0)
        chunk = SL__CLI_CHUNK;
    sl_progress_start(&bar, stderr, label, 0, 1, -1);
    for (;;) {
        const char *headers[3] = {range, NULL, NULL};
        sl_client_response r;
        uint64_t a = 0, b = 0, t = 0;
        int st;
        snprintf(range, sizeof range, "Range: bytes=%llu-%llu", (unsigned long long)have,
                 (unsigned long long)(have + chunk - 1));
        if (etag[0] != '\0') {
            snprintf(if_range, sizeof if_range, "If-Range: %s", etag);
            headers[1] = if_range;
        }
        memset(&r, 0, sizeof r);
        st = sl_client_request(c->client, "GET", path, NULL, 0, NULL, headers, &r);
        if (st != SL_OK) {
            sl_progress_end(&bar);
            sl__cli_error(c, "GET %s: cannot reach %s: %s", path, c->url, sl_strerror(st));
            break;
        }
        if (r.status == 200) { /* the whole body: no ranges here, or it changed */
            if (r.body_len > max) {
                sl_progress_end(&bar);
                sl__cli_error(c, "GET %s: %zu bytes, more than the %zu allowed", path, r.body_len,
                              max);
                sl_client_response_free(&r);
                break;
            }
            free(buf);
            buf = r.body;
            have = total = r.body_len;
            r.body = NULL;
            snprintf(etag, sizeof etag, "%s", r.etag);
            sl_client_response_free(&r);
            rc = 0;
            break;
        }
        if (r.status != 206) {
            sl_progress_end(&bar);
            fetch_error(c, path, &r);
            sl_client_response_free(&r);
            break;
        }
        if (!content_range(r.content_range, &a, &b, &t) || a != have || b - a + 1 != r.body_len ||
            (total != 0 && t != total) || t > max) {
            sl_progress_end(&bar);
            sl__cli_error(c, "GET %s: a range the request did not ask for (%s)%s", path,
                          r.content_range, t > max ? ", or too large" : "");
            sl_client_response_free(&r);
            break;
        }
        if (etag[0] != '\0' && strcmp(etag, r.etag) != 0) {
            /* another representation now: start over, a few times at most */
            sl_client_response_free(&r);
            if (++restarts > 3) {
                sl_progress_end(&bar);
                sl__cli_error(c, "GET %s: the file keeps changing", path);
                break;
            }
            have = total = 0;
            etag[0] = '\0';
            continue;
        }
        if (total == 0) {
            uint8_t *grown = malloc(t ? (size_t)t : 1);
            if (grown == NULL) {
                sl_client_response_free(&r);
                sl_progress_end(&bar);
                sl__cli_error(c, "out of memory for %llu bytes", (unsigned long long)t);
                break;
            }
            free(buf);
            buf = grown;
            total = t;
            bar.total = t;
            snprintf(etag, sizeof etag, "%s", r.etag);
        }
        memcpy(buf + have, r.body, r.body_len);
        have += r.body_len;
        sl_client_response_free(&r);
        sl_progress_update(&bar, have, NULL);
        if (have == total) {
            rc = 0;
            break;
        }
    }
    if (rc == 0) {
        sl_progress_end(&bar);
        sha_hex[0] = '\0';
        if (sha_etag(etag, sha_hex)) {
            uint8_t got[32];
            char got_hex[65];
            sl_sha256(buf, (size_t)have, got);
            sl_hex(got, 32, got_hex);
            if (strcmp(got_hex, sha_hex) != 0) {
                free(buf);
                return sl__cli_error(c, "GET %s: the bytes do not match their SHA-256 (ETag %s)",
                                     path, etag);
            }
        }
        *data = buf;
        *len = (size_t)have;
        return 0;
    }
    free(buf);
    return SL__CLI_ERROR;
}
