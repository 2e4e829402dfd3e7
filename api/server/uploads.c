/*
 * uploads.c - resumable uploads (tus-like): create a session, append at
 * Upload-Offset, ask for the offset, and complete through the engine.
 *
 * Sessions live in the store, so an upload resumes across restarts of the
 * coordinator. Each PATCH is verified (its signature covers the body) and
 * then appended in one durable write: bytes of a PATCH that did not arrive
 * completely are not kept, so devices on poor links send small chunks.
 *
 * Completion, when the last byte is durable:
 *   1. read the session's bytes back and check their SHA-256 against the
 *      declared digest (a mismatch: 422 "digest_mismatch", session dropped);
 *   2. sl_engine_accept() validates the frame, stores the update durably and
 *      counts it; the answer waits for it;
 *   3. sl_store_finish_upload() deletes the session. Its own update insert
 *      is the same (round, device, digest) the engine just stored, so the
 *      store's idempotence makes it a no-op: acceptance and counting happen
 *      only in the engine; the store merely removes the session. (FedBuff:
 *      when the buffer moved on between the session's creation and its
 *      completion, the engine stored the update in the current buffer and
 *      this insert lands in the session's closed one, where nothing reads
 *      it again; the store has no plain "delete session" call.)
 * A crash between 2 and 3 leaves a complete session: the device's retry (a
 * zero-byte PATCH at the final offset) runs 2 again, which answers with the
 * original receipt (duplicate: true), then 3.
 *
 * The store has no call to delete a session that is not accepted, so a
 * rejected or mismatched session is remembered here (a bounded list of
 * tombstones, answered 410 with the reason) until it expires in the store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server_int.h"

#define MAX_UPLOAD      (256ull << 20) /* the store's limit for one session */
#define WRITE_TIMEOUT   30000
#define DIGEST_MISMATCH 15 /* index in metrics.rejected beyond the engine's reasons */

static const sl__tombstone *tomb_find(sl_server *s, const char *id, sl__tombstone *copy)
{
    const sl__tombstone *found = NULL;
    pthread_mutex_lock(&s->tomb_lock);
    for (size_t i = 0; i < SL__TOMBSTONES; i++)
        if (s->tombs[i].id[0] != '\0' && strcmp(s->tombs[i].id, id) == 0) {
            *copy = s->tombs[i];
            found = copy;
            break;
        }
    pthread_mutex_unlock(&s->tomb_lock);
    return found;
}

static void tomb_add(sl_server *s, const char *id, int status, const char *reason)
{
    sl__tombstone *t;
    pthread_mutex_lock(&s->tomb_lock);
    t = &s->tombs[s->tomb_next];
    s->tomb_next = (s->tomb_next + 1) % SL__TOMBSTONES;
    snprintf(t->id, sizeof t->id, "%s", id);
    t->status = status;
    snprintf(t->reason, sizeof t->reason, "%s", reason);
    pthread_mutex_unlock(&s->tomb_lock);
}

/* One completion per session at a time: the slot, -1 when this session is
 * being completed by another request, -2 when every slot is busy. */
static int claim(sl_server *s, const char *id)
{
    int slot = -2;
    size_t n = sizeof s->completing / sizeof s->completing[0];
    pthread_mutex_lock(&s->tomb_lock);
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->completing[i], id) == 0) {
            pthread_mutex_unlock(&s->tomb_lock);
            return -1;
        }
    for (size_t i = 0; i < n && slot < 0; i++)
        if (s->completing[i][0] == '\0') {
            slot = (int)i;
            snprintf(s->completing[i], sizeof s->completing[i], "%s", id);
        }
    pthread_mutex_unlock(&s->tomb_lock);
    return slot;
}

static void release(sl_server *s, int slot)
{
    pthread_mutex_lock(&s->tomb_lock);
    s->completing[slot][0] = '\0';
    pthread_mutex_unlock(&s->tomb_lock);
}

static int gone(sl_server *s, sl__req *rq, const char *id, sl__resp *rs)
{
    sl__tombstone t;
    if (tomb_find(s, id, &t) == NULL)
        return 0;
    sl__problem(rs, rq, 410, t.status == 410 ? "late" : "gone", t.reason,
                "upload %s was closed: %s", id, t.reason);
    return 1;
}

/* The session @id of the calling device, or a problem in @rs. */
static int load_session(sl_server *s, sl__req *rq, const char *id, sl_upload_record *rec,
                        sl__resp *rs)
{
    int rc;
    if (gone(s, rq, id, rs))
        return 0;
    rc = sl_store_get_upload(s->store, id, rec);
    if (rc == SL_ENOENT || rc == SL_EINVAL) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no upload %s (unknown or expired)", id);
        return 0;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the upload");
        return 0;
    }
    if (rec->device_id != rq->device_id) {
        sl__problem(rs, rq, 403, "forbidden", NULL, "upload %s belongs to another device", id);
        return 0;
    }
    return 1;
}

void sl__h_upload_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    cJSON *doc = NULL, *out;
    const cJSON *sha;
    sl_upload_record rec;
    sl_round_record round;
    int64_t round_id, length, samples = 0;
    int rc;

    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &round_id) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %s", p->seg[0]);
        return;
    }
    doc = sl__json_body(rq, rs);
    if (doc == NULL)
        return;
    memset(&rec, 0, sizeof rec);
    sha = cJSON_GetObjectItemCaseSensitive(doc, "sha256");
    rc = sl__json_i64(doc, "length", 1, INT64_MAX, &length);
    if (rc != SL_OK || !cJSON_IsString(sha) || strlen(sha->valuestring) != 64 ||
        sl_unhex(sha->valuestring, rec.sha256, 32) != SL_OK ||
        sl__json_i64(doc, "num_samples", 0, UINT32_MAX, &samples) == SL_EINVAL) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "length (>= 1), sha256 (64 hex digits) and num_samples are required");
        goto done;
    }
    if ((uint64_t)length > MAX_UPLOAD) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL, "an upload is at most %llu bytes",
                    (unsigned long long)MAX_UPLOAD);
        goto done;
    }
    rc = sl_store_get_round(s->store, round_id, &round);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %lld", (long long)round_id);
        goto done;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the round");
        goto done;
    }
    if (round.state == SL_ROUND_CLOSED || round.state == SL_ROUND_ABANDONED) {
        sl__problem(rs, rq, 410, "late", "late", "round %lld has ended", (long long)round_id);
        goto done;
    }
    rec.device_id = rq->device_id;
    rec.round_id = round_id;
    rec.length = (uint64_t)length;
    rec.num_samples = (uint32_t)samples;
    rec.expires_at_ms = sl__wall_ms(s) + s->opt.upload_ttl_ms;
    do {
        sl__random_id(rec.id, sizeof rec.id, 16);
        rc = sl_store_create_upload(s->store, &rec);
    } while (rc == SL_EEXIST);
    if (rc == SL_ETOOBIG) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL, "the upload is too large");
        goto done;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "creating the upload");
        goto done;
    }
    sl__metrics_count(&s->metrics, &s->metrics.uploads_created, 1);
    out = cJSON_CreateObject();
    if (out != NULL) {
        char location[64];
        snprintf(location, sizeof location, "/v1/uploads/%s", rec.id);
        cJSON_AddStringToObject(out, "upload_id", rec.id);
        cJSON_AddStringToObject(out, "location", location);
        cJSON_AddNumberToObject(out, "offset", 0);
        cJSON_AddNumberToObject(out, "length", (double)rec.length);
        cJSON_AddNumberToObject(out, "expires_at_ms", (double)rec.expires_at_ms);
    }
    sl__resp_json(rs, 201, out);
    sl__resp_header(rs, "Location", "/v1/uploads/%s", rec.id);
    sl__resp_header(rs, "Upload-Offset", "0");
    sl__resp_header(rs, "Upload-Length", "%llu", (unsigned long long)rec.length);
done:
    cJSON_Delete(doc);
}

static void answer_reject(sl_server *s, sl__req *rq, sl__resp *rs, const char *id,
                          sl_reject_reason why)
{
    const char *name = sl_reject_reason_name(why);
    int status;
    const char *type;
    switch (why) {
    case SL_REJECT_LATE:
    case SL_REJECT_STALE:
        status = 410, type = "late";
        break;
    case SL_REJECT_UNKNOWN_ROUND:
        status = 404, type = "not-found";
        break;
    case SL_REJECT_NOT_SELECTED:
    case SL_REJECT_DUPLICATE_CONFLICT:
        status = 409, type = "conflict";
        break;
    default:
        status = 422, type = "unprocessable";
    }
    tomb_add(s, id, status, name);
    sl__metrics_count(&s->metrics, &s->metrics.rejected[(unsigned)why & 15u], 1);
    sl__problem(rs, rq, status, type, name, "the update was not accepted: %s", name);
}

/* Every byte of @rec is durable: verify, hand to the engine, drop the session. */
static void complete(sl_server *s, sl__req *rq, const sl_upload_record *rec, sl__resp *rs)
{
    sl_accept_result res;
    sl_store_receipt receipt;
    uint8_t digest[32];
    void *bytes = NULL;
    size_t len = 0;
    int64_t t0;
    int slot = claim(s, rec->id), rc;
    cJSON *out;

    if (slot == -1) {
        sl__problem(rs, rq, 409, "conflict", NULL, "upload %s is being completed", rec->id);
        return;
    }
    if (slot < 0) {
        sl__problem(rs, rq, 503, "unavailable", NULL, "too many uploads completing; retry");
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    rc = sl_store_read_upload(s->store, rec->id, &bytes, &len);
    if (rc != SL_OK || len != rec->length) {
        sl__problem_status(rs, rq, rc != SL_OK ? rc : SL_ECORRUPT, "reading the upload");
        goto done;
    }
    sl_sha256(bytes, len, digest);
    if (!sl__ct_equal(digest, rec->sha256, 32)) {
        tomb_add(s, rec->id, 422, "digest_mismatch");
        sl__metrics_count(&s->metrics, &s->metrics.rejected[DIGEST_MISMATCH], 1);
        sl__problem(rs, rq, 422, "unprocessable", "digest_mismatch",
                    "the SHA-256 of the received bytes differs from the declared one; the "
                    "session is discarded");
        goto done;
    }
    t0 = sl__mono_ns(s);
    rc = sl_engine_accept(s->engine, rec->round_id, rec->device_id, bytes, len, rec->num_samples,
                          digest, &res);
    sl__metrics_store_write(&s->metrics, sl__mono_ns(s) - t0);
    if (rc != SL_OK) {
        /* nothing acknowledged; the session stays for a retry */
        sl__problem_status(rs, rq, rc, "accepting the update");
        goto done;
    }
    if (!res.accepted) {
        answer_reject(s, rq, rs, rec->id, res.reason);
        goto done;
    }
    rc = sl_store_finish_upload(s->store, rec->id, WRITE_TIMEOUT, &receipt);
    if (rc != SL_OK && rc != SL_ENOENT)
        sl_log(SL_LOG_WARN, "http", "upload %s accepted but its session stays until expiry: %s",
               rec->id, sl_strerror(rc));
    sl__metrics_count(&s->metrics, &s->metrics.uploads_completed, 1);
    out = cJSON_CreateObject();
    if (out != NULL) {
        cJSON_AddBoolToObject(out, "accepted", 1);
        cJSON_AddNumberToObject(out, "update_id", (double)res.receipt.update_id);
        cJSON_AddBoolToObject(out, "duplicate", res.receipt.duplicate);
        cJSON_AddNumberToObject(out, "round_id", (double)rec->round_id);
        cJSON_AddNumberToObject(out, "received_at_ms", (double)res.receipt.received_at_ms);
    }
    sl__resp_json(rs, 200, out);
    sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)rec->length);
done:
    free(bytes);
    release(s, slot);
}

void sl__h_upload_patch(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    const char *ctype = sl__req_header(rq, "Content-Type");
    const char *offset_text = sl__req_header(rq, "Upload-Offset");
    sl_upload_record rec;
    uint64_t new_offset;
    int64_t offset, t0;
    int rc;

    atomic_fetch_add(&s->metrics.uploads_in_flight, 1);
    if (ctype == NULL || strncasecmp(ctype, "application/offset+octet-stream", 31) != 0 ||
        (ctype[31] != '\0' && ctype[31] != ';' && ctype[31] != ' ')) {
        sl__problem(rs, rq, 415, "unsupported-media-type", NULL,
                    "PATCH needs Content-Type: application/offset+octet-stream");
        goto out;
    }
    if (sl__parse_i64(offset_text, 0, INT64_MAX, &offset) != SL_OK) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "Upload-Offset (bytes) is required");
        goto out;
    }
    if (!load_session(s, rq, p->seg[0], &rec, rs))
        goto out;
    if ((uint64_t)offset != rec.offset) {
        sl__problem(rs, rq, 409, "conflict", NULL,
                    "Upload-Offset %lld does not match the session's offset %llu",
                    (long long)offset, (unsigned long long)rec.offset);
        sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)rec.offset);
        goto out;
    }
    if (rq->body_len > rec.length - rec.offset) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL,
                    "%zu bytes at offset %llu exceed the declared length %llu", rq->body_len,
                    (unsigned long long)rec.offset, (unsigned long long)rec.length);
        goto out;
    }
    new_offset = rec.offset;
    if (rq->body_len > 0) {
        t0 = sl__mono_ns(s);
        rc = sl_store_append_upload(s->store, rec.id, rec.offset, rq->body, rq->body_len,
                                    WRITE_TIMEOUT, &new_offset);
        sl__metrics_store_write(&s->metrics, sl__mono_ns(s) - t0);
        if (rc == SL_ECONFLICT) {
            sl__problem(rs, rq, 409, "conflict", NULL, "the session moved on concurrently");
            goto out;
        }
        if (rc == SL_ENOENT) {
            sl__problem(rs, rq, 404, "not-found", NULL, "upload %s expired", rec.id);
            goto out;
        }
        if (rc != SL_OK) {
            sl__problem_status(rs, rq, rc, "appending to the upload");
            goto out;
        }
        sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, rq->body_len);
    }
    if (new_offset < rec.length) {
        sl__resp_bytes(rs, 204, "", NULL, 0);
        sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)new_offset);
        goto out;
    }
    rec.offset = new_offset;
    complete(s, rq, &rec, rs);
out:
    atomic_fetch_sub(&s->metrics.uploads_in_flight, 1);
}

void sl__h_upload_head(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl_upload_record rec;
    if (!load_session(s, rq, p->seg[0], &rec, rs))
        return;
    sl__resp_bytes(rs, 200, "", NULL, 0);
    sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)rec.offset);
    sl__resp_header(rs, "Upload-Length", "%llu", (unsigned long long)rec.length);
    sl__resp_header(rs, "Upload-Expires-Ms", "%lld", (long long)rec.expires_at_ms);
    sl__resp_header(rs, "Cache-Control", "no-store");
}
