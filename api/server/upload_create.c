/*
 * upload_create.c - POST /v1/rounds/{round}/uploads: open a resumable
 * upload session, optionally carrying the first bytes (tus's
 * creation-with-upload, the IETF resumable-upload draft's upload creation).
 *
 * Two forms:
 *   - a JSON body {"length", "sha256", "num_samples", "local_steps"}: a session at
 *     offset 0 (local_steps, the optimiser steps the device ran, is optional);
 *   - Content-Type application/offset+octet-stream with the same three
 *     values in the query (?length=&sha256=&num_samples=; the query is part
 *     of the signed path, so they are as authentic as a JSON body) and the
 *     first bytes of the update as the body, appended at offset 0.
 * A body that brings all the declared bytes completes the upload in this
 * request, by the rules of a completing PATCH (uploads.c): the SHA-256 must
 * be the declared one, the engine validates the frame and stores the update
 * durably, and only then the answer (200 with the receipt) leaves. No
 * session is made at all, so a small update costs one signed request and
 * one durable write; whatever fails, nothing is stored and the device sends
 * the same request again (a second copy of a stored update gets its
 * original receipt, duplicate: true).
 *
 * Before any session: a declared length above what an update of the
 * round's task can take is 413, and a device the open round did not select
 * gets 409 not_selected (the completion would refuse its update: the
 * device folds it now instead of reserving space for nothing). A device
 * keeps one session a round (a new digest replaces its older session of
 * that round) and at most SL_STORE_UPLOADS_PER_DEVICE for other rounds
 * (429 too_many_uploads beyond, until one completes or expires).
 *
 * Creation is idempotent: the session id is derived (keyed by a secret of
 * this server process) from the device, round, digest and length, so a
 * create sent again because its answer was lost finds the session it made,
 * at the offset it reached, instead of leaving an orphan that holds its
 * reserved space until expiry. The first bytes of a repeated create are
 * appended only while the session is still at offset 0; otherwise the
 * answer's Upload-Offset tells the device where to continue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server_int.h"

#define MAX_UPLOAD    (256ull << 20) /* the store's limit for one session */
#define WRITE_TIMEOUT 30000
#define OCTETS        "application/offset+octet-stream"

/* What a create declares. */
typedef struct declared {
    int64_t round_id;
    uint64_t length;
    uint8_t sha256[32];
    uint32_t num_samples;
    uint32_t local_steps; /* optional: the optimiser steps the device ran (0: not said) */
} declared;

/* 1 when the request's Content-Type is application/offset+octet-stream. */
static int carries_bytes(const sl__req *rq)
{
    const char *ctype = sl__req_header(rq, "Content-Type");
    size_t n = sizeof OCTETS - 1;
    return ctype != NULL && strncasecmp(ctype, OCTETS, n) == 0 &&
           (ctype[n] == '\0' || ctype[n] == ';' || ctype[n] == ' ');
}

/* length, sha256 and num_samples from the JSON body or the query: 1, or 0
 * with a 400 in @rs. */
static int parse_declared(const sl__req *rq, int octets, declared *d, sl__resp *rs)
{
    char length[24], sha[80], samples[24], steps[24];
    int64_t len = 0, n = 0, st = 0;
    int ok;
    if (!octets) {
        const cJSON *hex;
        cJSON *doc = sl__json_body(rq, rs);
        if (doc == NULL)
            return 0;
        hex = cJSON_GetObjectItemCaseSensitive(doc, "sha256");
        ok = sl__json_i64(doc, "length", 1, INT64_MAX, &len) == SL_OK && cJSON_IsString(hex) &&
             strlen(hex->valuestring) == 64 && sl_unhex(hex->valuestring, d->sha256, 32) == SL_OK &&
             sl__json_i64(doc, "num_samples", 0, UINT32_MAX, &n) != SL_EINVAL &&
             sl__json_i64(doc, "local_steps", 0, UINT32_MAX, &st) != SL_EINVAL;
        cJSON_Delete(doc);
    } else {
        int has_samples = sl__query_get(rq->query, "num_samples", samples, sizeof samples);
        int has_steps = sl__query_get(rq->query, "local_steps", steps, sizeof steps);
        ok = sl__query_get(rq->query, "length", length, sizeof length) == 1 &&
             sl__parse_i64(length, 1, INT64_MAX, &len) == SL_OK &&
             sl__query_get(rq->query, "sha256", sha, sizeof sha) == 1 && strlen(sha) == 64 &&
             sl_unhex(sha, d->sha256, 32) == SL_OK && has_samples >= 0 &&
             (has_samples == 0 || sl__parse_i64(samples, 0, UINT32_MAX, &n) == SL_OK) &&
             has_steps >= 0 &&
             (has_steps == 0 || sl__parse_i64(steps, 0, UINT32_MAX, &st) == SL_OK);
    }
    if (!ok) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    octets ? "the query needs length (>= 1) and sha256 (64 hex digits); "
                             "num_samples and local_steps (integers >= 0) are optional"
                           : "length (>= 1), sha256 (64 hex digits) and num_samples are required; "
                             "local_steps (an integer >= 0) is optional");
        return 0;
    }
    d->length = (uint64_t)len;
    d->num_samples = (uint32_t)n;
    d->local_steps = (uint32_t)st;
    return 1;
}

/* The session id for @d by the calling device: 16 bytes of
 * SHA-256(secret | device | round | length | digest), base64url. */
static void derived_id(const sl_server *s, const sl__req *rq, const declared *d, char *id,
                       size_t cap)
{
    uint8_t msg[32 + 8 + 8 + 8 + 32], digest[32];
    uint64_t fields[3] = {(uint64_t)rq->device_id, (uint64_t)d->round_id, d->length};
    memcpy(msg, s->session_secret, 32);
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 8; i++)
            msg[32 + 8 * f + i] = (uint8_t)(fields[f] >> (56 - 8 * i));
    memcpy(msg + 56, d->sha256, 32);
    sl_sha256(msg, sizeof msg, digest);
    sl__id_encode(digest, 16, id, cap);
}

/* The session of @d: the one a previous create made (its offset in
 * @rec), or a new one. SL_OK, or a store status. */
static int open_session(sl_server *s, sl__req *rq, const declared *d, sl_upload_record *rec,
                        int *created)
{
    sl_upload_record old;
    int rc;
    memset(rec, 0, sizeof *rec);
    derived_id(s, rq, d, rec->id, sizeof rec->id);
    rec->device_id = rq->device_id;
    rec->round_id = d->round_id;
    rec->length = d->length;
    memcpy(rec->sha256, d->sha256, 32);
    rec->num_samples = d->num_samples;
    rec->local_steps = d->local_steps;
    rec->expires_at_ms = sl__wall_ms(s) + s->opt.upload_ttl_ms;
    sl__tomb_clear(s, rec->id); /* an earlier session of that id was closed: this is a new try */
    rc = sl_store_create_upload(s->store, rec);
    *created = rc == SL_OK;
    if (rc != SL_EEXIST)
        return rc;
    rc = sl_store_get_upload(s->store, rec->id, &old);
    if (rc == SL_OK && old.device_id == rec->device_id && old.round_id == rec->round_id &&
        old.length == rec->length && memcmp(old.sha256, rec->sha256, 32) == 0) {
        *rec = old;
        return SL_OK;
    }
    if (rc != SL_OK && rc != SL_ETIMEDOUT && rc != SL_ENOENT)
        return rc;
    /* that id is an expired session's, or (vanishingly unlikely) another's: a random one */
    do {
        sl__random_id(rec->id, sizeof rec->id, 16);
        rc = sl_store_create_upload(s->store, rec);
    } while (rc == SL_EEXIST);
    *created = rc == SL_OK;
    return rc;
}

/* Append the first bytes to a session still at offset 0. A failure is not
 * the request's: the session exists, and the answer's offset says what the
 * device must send (tus's creation-with-upload allows a partial take). */
static void append_first(sl_server *s, sl__req *rq, sl_upload_record *rec)
{
    uint64_t new_offset = 0;
    int64_t t0 = sl__mono_ns(s);
    int rc = sl_store_append_upload(s->store, rec->id, 0, rq->body, rq->body_len, WRITE_TIMEOUT,
                                    &new_offset);
    sl__metrics_store_write(&s->metrics, sl__mono_ns(s) - t0);
    if (rc == SL_OK) {
        sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, rq->body_len);
        rec->offset = new_offset;
        return;
    }
    if (rc == SL_ECONFLICT) { /* a concurrent copy of this create got there first */
        sl_upload_record now;
        if (sl_store_get_upload(s->store, rec->id, &now) == SL_OK)
            rec->offset = now.offset;
        return;
    }
    sl_log(SL_LOG_WARN, "http", "upload %s: the first %zu bytes were not kept: %s", rec->id,
           rq->body_len, sl_strerror(rc));
}

/* The round is over: the receipt of the update if the round counted it
 * before it ended (the device must commit it, not fold it back into its
 * residual), else 410 late. */
static void answer_ended(sl_server *s, sl__req *rq, const declared *d, sl__resp *rs)
{
    sl_store_receipt receipt;
    int rc = sl_store_get_receipt(s->store, d->round_id, rq->device_id, d->sha256, &receipt);
    if (rc == SL_OK) {
        sl__upload_receipt(rs, d->round_id, d->length, &receipt);
        return;
    }
    if (rc != SL_ENOENT && rc != SL_ECONFLICT) {
        sl__problem_status(rs, rq, rc, "reading the round's updates");
        return;
    }
    sl__problem(rs, rq, 410, "late", "late", "round %lld has ended", (long long)d->round_id);
}

/* Every declared byte came with the create: complete it without a session. */
static void complete_at_once(sl_server *s, sl__req *rq, const declared *d, sl__resp *rs)
{
    const char *reason = "";
    int status = 0;
    sl__upload_outcome how =
        sl__upload_accept(s, rq, d->round_id, rq->body, rq->body_len, d->sha256, d->num_samples,
                          d->local_steps, rs, &status, &reason);
    if (how == SL__UPLOAD_MISMATCH) {
        sl__problem(rs, rq, 422, "unprocessable", "digest_mismatch",
                    "the SHA-256 of the received bytes differs from the declared one; nothing "
                    "was stored");
        return;
    }
    if (how == SL__UPLOAD_ACCEPTED || how == SL__UPLOAD_REJECTED)
        sl__metrics_count(&s->metrics, &s->metrics.upload_bytes, rq->body_len);
}

void sl__h_upload_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    int octets = carries_bytes(rq), created = 0, rc;
    sl_round_record round;
    sl_upload_record rec;
    declared d;
    cJSON *out;

    memset(&d, 0, sizeof d);
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &d.round_id) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %s", p->seg[0]);
        return;
    }
    if (!parse_declared(rq, octets, &d, rs))
        return;
    if (d.length > MAX_UPLOAD) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL, "an upload is at most %llu bytes",
                    (unsigned long long)MAX_UPLOAD);
        return;
    }
    if (octets && rq->body_len > d.length) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL,
                    "%zu bytes exceed the declared length %llu", rq->body_len,
                    (unsigned long long)d.length);
        return;
    }
    rc = sl_store_get_round(s->store, d.round_id, &round);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %lld", (long long)d.round_id);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the round");
        return;
    }
    if (round.state == SL_ROUND_CLOSED || round.state == SL_ROUND_ABANDONED) {
        answer_ended(s, rq, &d, rs);
        return;
    }
    {
        /* a session reserves its declared length on disk: no more than the task's model can
         * need (a dense fp32 update), or a device could fill the disk with a few requests */
        uint64_t most = 0;
        if (sl_engine_update_limit(s->engine, d.round_id, &most) == SL_OK && d.length > most) {
            sl__problem(rs, rq, 413, "payload-too-large", NULL,
                        "an update for round %lld is at most %llu bytes (its model's dense "
                        "update); %llu declared",
                        (long long)d.round_id, (unsigned long long)most,
                        (unsigned long long)d.length);
            return;
        }
    }
    if (!(octets && rq->body_len == d.length)) {
        /* a session only for a device the round selected (it would be refused at the end) */
        sl_reject_reason why = SL_REJECT_NONE;
        int status = 0;
        if (sl_engine_upload_allowed(s->engine, d.round_id, rq->device_id, &why) == SL_OK &&
            why != SL_REJECT_NONE) {
            sl__upload_refuse(s, rq, rs, why, &status);
            return;
        }
    }
    atomic_fetch_add(&s->metrics.uploads_in_flight, 1);
    if (octets && rq->body_len == d.length) {
        complete_at_once(s, rq, &d, rs);
        atomic_fetch_sub(&s->metrics.uploads_in_flight, 1);
        return;
    }
    rc = open_session(s, rq, &d, &rec, &created);
    if (rc == SL_ETOOBIG) {
        sl__problem(rs, rq, 413, "payload-too-large", NULL, "the upload is too large");
        goto out;
    }
    if (rc == SL_ELIMIT) { /* each holds up to a dense update's space until it expires */
        sl__problem(rs, rq, 429, "too-many-requests", "too_many_uploads",
                    "this device already has %d open upload sessions for other rounds; "
                    "complete them or let them expire",
                    SL_STORE_UPLOADS_PER_DEVICE);
        sl__resp_header(
            rs, "Retry-After", "%lld",
            (long long)(s->opt.upload_ttl_ms / 1000 < 60 ? s->opt.upload_ttl_ms / 1000 : 60));
        goto out;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "creating the upload");
        goto out;
    }
    if (created)
        sl__metrics_count(&s->metrics, &s->metrics.uploads_created, 1);
    if (octets && rq->body_len > 0 && rec.offset == 0)
        append_first(s, rq, &rec);
    out = cJSON_CreateObject();
    if (out != NULL) {
        char location[64];
        snprintf(location, sizeof location, "/v1/uploads/%s", rec.id);
        cJSON_AddStringToObject(out, "upload_id", rec.id);
        cJSON_AddStringToObject(out, "location", location);
        cJSON_AddNumberToObject(out, "offset", (double)rec.offset);
        cJSON_AddNumberToObject(out, "length", (double)rec.length);
        cJSON_AddNumberToObject(out, "expires_at_ms", (double)rec.expires_at_ms);
    }
    sl__resp_json(rs, 201, out);
    sl__resp_header(rs, "Location", "/v1/uploads/%s", rec.id);
    sl__resp_header(rs, "Upload-Offset", "%llu", (unsigned long long)rec.offset);
    sl__resp_header(rs, "Upload-Length", "%llu", (unsigned long long)rec.length);
out:
    atomic_fetch_sub(&s->metrics.uploads_in_flight, 1);
}
