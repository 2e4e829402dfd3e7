/*
 * uploads.c - resumable uploads (tus-like): append at Upload-Offset, ask
 * for the offset, and complete through the engine. Creating a session,
 * optionally with the first bytes, is upload_create.c.
 *
 * Sessions live in the store, so an upload resumes across restarts of the
 * coordinator. Each PATCH is verified (its signature covers the body); one
 * that does not reach the declared length is appended in one durable write
 * and answered 204: bytes of a PATCH that did not arrive completely are not
 * kept, so devices on poor links send small chunks.
 *
 * The PATCH that brings the last bytes completes the upload without
 * appending them to the session first:
 *   1. the update is the session's durable prefix followed by this body
 *      (no store read at all when one PATCH carries everything); its
 *      SHA-256 must be the declared one (else 422 "digest_mismatch");
 *   2. sl_engine_accept() validates the frame, stores the update durably and
 *      counts it; the answer waits for it;
 *   3. the session is deleted (sl_store_delete_upload()).
 * Until 2 succeeded the session is unchanged, so whatever fails (a storage
 * error, a crash, a cut) the device resumes from the offset it had, re-sends
 * the last chunk and the engine's idempotence answers the original receipt
 * (duplicate: true) if the update had been stored. A crash between 2 and 3
 * is the same case. A zero-byte PATCH at the final offset completes a
 * session whose bytes all arrived (sessions of earlier versions).
 *
 * A session that will never complete (digest mismatch, update rejected) is
 * deleted from the store at once, giving back its reserved space; a bounded
 * list of tombstones here answers 410 with the reason for a while after.
 * Creating a session for a round that ended is 410 "late", unless the
 * device's update with the declared digest was stored before it ended: then
 * the answer is its receipt (200, duplicate: true), so a device whose last
 * answer was lost commits its update instead of folding it back.
 * An expired session is 410 "gone" with reason "expired" (the store keeps
 * expired sessions known for SL_STORE_UPLOAD_TOMBSTONE_MS); an unknown one
 * is 404.
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

void sl__tomb_clear(sl_server *s, const char *id)
{
    pthread_mutex_lock(&s->tomb_lock);
    for (size_t i = 0; i < SL__TOMBSTONES; i++)
        if (s->tombs[i].id[0] != '\0' && strcmp(s->tombs[i].id, id) == 0)
            s->tombs[i].id[0] = '\0';
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

static void answer_expired(sl__req *rq, const char *id, sl__resp *rs)
{
    sl__problem(rs, rq, 410, "gone", "expired",
                "upload %s expired; start a new upload for the same update", id);
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
        sl__problem(rs, rq, 404, "not-found", NULL, "no upload %s", id);
        return 0;
    }
    if (rc == SL_ETIMEDOUT) {
        answer_expired(rq, id, rs);
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

/* A session that will never complete gives its space back now, not at expiry. */
static void discard(sl_server *s, const char *id)
{
    int rc = sl_store_delete_upload(s->store, id);
    if (rc != SL_OK && rc != SL_ENOENT)
        sl_log(SL_LOG_WARN, "http", "closed upload %s stays until it expires: %s", id,
               sl_strerror(rc));
}

void sl__upload_receipt(sl__resp *rs, int64_t round_id, uint64_t length,
                        const sl_store_receipt *receipt)
{
    cJSON *out = cJSON_CreateObject();
    if (out != NULL) {
        cJSON_AddBoolToObject(out, "accepted", 1);
        sl__json_add_i64(out, "update_id", receipt->update_id);
        cJSON_AddBoolToObject(out, "duplicate", receipt->duplicate);
        sl__json_add_i64(out, "round_id", round_id);
        sl__json_add_i64(out, "received_at_ms", receipt->received_at_ms);
    }
    sl__resp_json(rs, 200, out);
    sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)length);
}

void sl__upload_refuse(sl_server *s, sl__req *rq, sl__resp *rs, sl_reject_reason why, int *status)
{
    const char *name = sl_reject_reason_name(why);
    const char *type;
    switch (why) {
    case SL_REJECT_LATE:
    case SL_REJECT_STALE:
        *status = 410, type = "late";
        break;
    case SL_REJECT_UNKNOWN_ROUND:
        *status = 404, type = "not-found";
        break;
    case SL_REJECT_NOT_SELECTED:
    case SL_REJECT_DUPLICATE_CONFLICT:
        *status = 409, type = "conflict";
        break;
    default:
        *status = 422, type = "unprocessable";
    }
    sl__metrics_count(&s->metrics, &s->metrics.rejected[(unsigned)why & 15u], 1);
    sl__problem(rs, rq, *status, type, name, "the update was not accepted: %s", name);
}

sl__upload_outcome sl__upload_accept(sl_server *s, sl__req *rq, int64_t round_id,
                                     const uint8_t *bytes, size_t len, const uint8_t sha256[32],
                                     uint32_t num_samples, uint32_t local_steps, sl__resp *rs,
                                     int *status, const char **reason)
{
    sl_accept_result res;
    uint8_t digest[32];
    int64_t t0;
    int rc;
    /* a 40 KB update costs about 0.2 ms to hash: never twice */
    if (rq->body_sha_known && bytes == rq->body && len == rq->body_len)
        memcpy(digest, rq->body_sha256, sizeof digest);
    else
        sl_sha256(bytes, len, digest);
    if (!sl__ct_equal(digest, sha256, 32)) {
        sl__metrics_count(&s->metrics, &s->metrics.rejected[DIGEST_MISMATCH], 1);
        *status = 422;
        *reason = "digest_mismatch";
        return SL__UPLOAD_MISMATCH;
    }
    t0 = sl__mono_ns(s);
    rc = sl_engine_accept_steps(s->engine, round_id, rq->device_id, bytes, len, num_samples,
                                local_steps, digest, &res);
    sl__metrics_store_write(&s->metrics, sl__mono_ns(s) - t0);
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "accepting the update");
        return SL__UPLOAD_FAILED;
    }
    if (!res.accepted) {
        sl__upload_refuse(s, rq, rs, res.reason, status);
        *reason = sl_reject_reason_name(res.reason);
        return SL__UPLOAD_REJECTED;
    }
    sl__metrics_count(&s->metrics, &s->metrics.uploads_completed, 1);
    {
        sl_frame_header h; /* accepted: the header is sound */
        if (sl_frame_peek_header(bytes, len, &h) == SL_OK && (h.flags & SL_FRAME_FLAG_SPLIT))
            sl__metrics_count(&s->metrics, &s->metrics.uploads_split, 1);
    }
    sl__upload_receipt(rs, round_id, len, &res.receipt);
    return SL__UPLOAD_ACCEPTED;
}

/*
 * The update is the session's durable prefix (@rec->offset bytes) and @tail:
 * into *@bytes (borrowed from the request when there is no prefix, else
 * malloc'd into *@owned). 1 on success, else 0 with a problem in @rs.
 */
static int assemble(sl_server *s, sl__req *rq, const sl_upload_record *rec, const uint8_t *tail,
                    size_t tail_len, const uint8_t **bytes, void **owned, sl__resp *rs)
{
    void *prefix = NULL;
    uint8_t *whole;
    size_t len = 0;
    int rc;
    if (rec->offset == 0) {
        *bytes = tail;
        return 1;
    }
    rc = sl_store_read_upload(s->store, rec->id, &prefix, &len);
    if (rc == SL_OK && len != rec->offset) {
        free(prefix);
        sl__problem(rs, rq, 409, "conflict", NULL, "the session moved on concurrently");
        sl__resp_header(rs, "Upload-Offset", "%zu", len);
        return 0;
    }
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "upload %s is gone", rec->id);
        return 0;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the upload");
        return 0;
    }
    whole = tail_len > 0 ? realloc(prefix, len + tail_len) : prefix;
    if (whole == NULL) {
        free(prefix);
        sl__problem_status(rs, rq, SL_ENOMEM, "reading the upload");
        return 0;
    }
    if (tail_len > 0)
        memcpy(whole + len, tail, tail_len);
    *bytes = whole;
    *owned = whole;
    return 1;
}

/* @tail completes @rec: verify, hand to the engine, drop the session. */
static void complete(sl_server *s, sl__req *rq, const sl_upload_record *rec, const uint8_t *tail,
                     size_t tail_len, sl__resp *rs)
{
    const uint8_t *bytes = NULL;
    void *owned = NULL;
    const char *reason = "";
    int slot = claim(s, rec->id), rc, status = 0;

    if (slot == -1) {
        /* another request completes this session right now (a device that restarted while
         * its earlier request was still here): not a conflict, a moment's wait. A 409 made the
         * agent discard an update the other request then stored (test_agent_kill, once);
         * retried, it gets the receipt */
        sl__problem(rs, rq, 503, "unavailable", NULL,
                    "upload %s is being completed by another request; retry", rec->id);
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    if (slot < 0) {
        sl__problem(rs, rq, 503, "unavailable", NULL, "too many uploads completing; retry");
        sl__resp_header(rs, "Retry-After", "1");
        return;
    }
    if (!assemble(s, rq, rec, tail, tail_len, &bytes, &owned, rs))
        goto done;
    switch (sl__upload_accept(s, rq, rec->round_id, bytes, (size_t)rec->length, rec->sha256,
                              rec->num_samples, rec->local_steps, rs, &status, &reason)) {
    case SL__UPLOAD_FAILED:
        break; /* nothing acknowledged; the session stays as it was for a retry */
    case SL__UPLOAD_MISMATCH:
        tomb_add(s, rec->id, status, reason);
        discard(s, rec->id);
        sl__problem(rs, rq, 422, "unprocessable", "digest_mismatch",
                    "the SHA-256 of the received bytes differs from the declared one; the "
                    "session is discarded");
        break;
    case SL__UPLOAD_REJECTED:
        if (tail_len > 0)
            sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, tail_len);
        tomb_add(s, rec->id, status, reason);
        discard(s, rec->id);
        break;
    case SL__UPLOAD_ACCEPTED:
        if (tail_len > 0)
            sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, tail_len);
        rc = sl_store_delete_upload(s->store, rec->id);
        if (rc != SL_OK && rc != SL_ENOENT)
            sl_log(SL_LOG_WARN, "http", "upload %s accepted but its session stays until expiry: %s",
                   rec->id, sl_strerror(rc));
        break;
    }
done:
    free(owned);
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
    if (rq->body_len == rec.length - rec.offset) {
        complete(s, rq, &rec, rq->body, rq->body_len, rs);
        goto out;
    }
    if (rq->body_len == 0) { /* nothing to write: where the session is */
        sl__resp_bytes(rs, 204, "", NULL, 0);
        sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)rec.offset);
        goto out;
    }
    t0 = sl__mono_ns(s);
    rc = sl_store_append_upload(s->store, rec.id, rec.offset, rq->body, rq->body_len, WRITE_TIMEOUT,
                                &new_offset);
    sl__metrics_store_write(&s->metrics, sl__mono_ns(s) - t0);
    if (rc == SL_ECONFLICT) {
        sl__problem(rs, rq, 409, "conflict", NULL, "the session moved on concurrently");
        goto out;
    }
    if (rc == SL_ENOENT) {
        /* it expired (or was completed) since it was read */
        sl_upload_record now;
        if (sl_store_get_upload(s->store, rec.id, &now) == SL_ETIMEDOUT)
            answer_expired(rq, p->seg[0], rs);
        else
            sl__problem(rs, rq, 404, "not-found", NULL, "no upload %s", p->seg[0]);
        goto out;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "appending to the upload");
        goto out;
    }
    sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, rq->body_len);
    sl__resp_bytes(rs, 204, "", NULL, 0);
    sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)new_offset);
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
