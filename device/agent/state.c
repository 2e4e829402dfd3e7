/*
 * state.c - the agent's state directory (see starling/agent.h for the list).
 *
 * Every file is replaced with sl_fs_write_atomic(): a kill at any instant
 * leaves the old or the new content. Where a change spans several files,
 * one of them is the commit point, written last:
 *   - a pending upload: pending/frame and pending/accumulated (and, for a
 *     split frame, pending/support) first, then pending/meta, which carries
 *     their SHA-256s. It is removed first when
 *     the upload is resolved, so meta present <=> a complete pending upload.
 *   - resolving it: the residual (tagged with the generation and outcome)
 *     is the commit point; acks.log and counters follow and are redone on
 *     restart when the residual says the generation is resolved but they do
 *     not (an ack line is looked up by its generation before appending).
 *   - the model cache: model.version is removed, model.frame (which carries
 *     its version in its header) written, then model.version ("version=",
 *     "task=") written; the cache is used only when model.version names the
 *     frame's version and the agent's task. model.support is removed before
 *     and written after them: it is used only when it names the held version
 *     (a kill between the two leaves none: the next update goes unsplit).
 *
 * Formats (native byte order: the files never leave the device):
 *   residual     "SLRS" u32 1, u64 layout hash, u64 n, u64 gen, u32 outcome,
 *                u32 flags (1: momentum follows; 2: tracking error feedback has
 *                a round to absorb from the next model), i64 round, i64 update id,
 *                u32 duplicate, u32 0, 32-byte frame SHA-256, 32-byte SHA-256
 *                of the payload; payload n floats (+ n momentum floats)
 *   pending/accumulated  "SLAC" u32 1, u64 layout hash, u64 n, u32 flags,
 *                u32 0; n floats (+ n pending momentum floats)
 *   model.partial "SLDL" u32 path length, path, u32 ETag length, ETag, bytes;
 *                started with the first range (atomically), then appended
 *                range by range without fsync: it is a cache whose bytes are
 *                checked against the ETag's SHA-256 before use
 *   local        "SLLO" u32 1, u64 layout hash, u64 local-set hash, u64 count,
 *                32-byte SHA-256 of the payload; payload: the device's own values
 *                of its local tensors (FedBN), count floats in layout order.
 *                Written once per participation, before its pending upload: a
 *                kill leaves the old values or the new ones, never a mix
 *   model.support "SLSP" u32 1, u64 layout hash, i64 ref, i64 base, u64 bytes;
 *                the bitmap of the coordinates the delta from version ref to the
 *                held version base changed (sl_support), what split update
 *                frames code their positions against (codecs/FORMAT.md)
 *   pending/support  the bitmap of a split pending frame's support (its
 *                version, support_ref, and SHA-256 in pending/meta)
 *   audit/trained.<gen>  (tests) n doubles
 *   pending/meta, pending/upload: "key=value" lines
 * counters and acks.log are in ledger.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_int.h"

#define RES_MAGIC  "SLRS"
#define ACC_MAGIC  "SLAC"
#define PART_MAGIC "SLDL"
#define LOC_MAGIC  "SLLO"
#define LOC_HEADER (4 + 4 + 8 + 8 + 8 + 32)
#define RES_HEADER (4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 4 + 4 + 32 + 32)
#define ACC_HEADER (4 + 4 + 8 + 8 + 4 + 4)
#define TEXT_MAX   65536

int sl__agent_path(const sl_agent *a, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", a->dir, name);
    return n > 0 && (size_t)n < cap ? SL_OK : SL_ETOOBIG;
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0700) == 0 || errno == EEXIST)
        return SL_OK;
    return sl_status_from_errno(errno);
}

int sl__agent_state_open(sl_agent *a, char *err, size_t errcap)
{
    char path[SL__AGENT_PATH_MAX];
    int rc = make_dir(a->dir);
    if (rc == SL_OK && (rc = sl__agent_path(a, "pending", path, sizeof path)) == SL_OK)
        rc = make_dir(path);
    if (rc == SL_OK && a->o.audit && (rc = sl__agent_path(a, "audit", path, sizeof path)) == SL_OK)
        rc = make_dir(path);
    if (rc == SL_OK) {
        sl__agent_remove_tmp(a, ".");
        sl__agent_remove_tmp(a, "pending");
        sl__agent_remove_tmp(a, "audit");
    }
    if (rc != SL_OK && err != NULL)
        snprintf(err, errcap, "state directory %s: %s", a->dir, sl_strerror(rc));
    return rc;
}

/* 1 for "<name>.tmp.<pid>.<n>": what sl_fs_write_atomic() leaves when killed. */
static int is_tmp_name(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    size_t dots = 0;
    if (t == NULL || t == name)
        return 0;
    for (const char *p = t + 5; *p != '\0'; p++) {
        if (*p == '.')
            dots++;
        else if (!isdigit((unsigned char)*p))
            return 0;
    }
    return dots == 1 && isdigit((unsigned char)t[5]);
}

void sl__agent_remove_tmp(const sl_agent *a, const char *sub)
{
    char path[SL__AGENT_PATH_MAX], file[SL__AGENT_PATH_MAX];
    struct dirent *e;
    DIR *d;
    if (sl__agent_path(a, sub, path, sizeof path) != SL_OK || (d = opendir(path)) == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (!is_tmp_name(e->d_name))
            continue;
        if (snprintf(file, sizeof file, "%s/%s", path, e->d_name) < (int)sizeof file &&
            unlink(file) == 0)
            sl_log(SL_LOG_DEBUG, "agent", "removed %s (a write a kill interrupted)", file);
    }
    closedir(d);
}

int sl__agent_write_file(const sl_agent *a, const char *name, const void *data, size_t len)
{
    char path[SL__AGENT_PATH_MAX];
    int rc = sl__agent_path(a, name, path, sizeof path);
    return rc == SL_OK ? sl_fs_write_atomic(path, data, len, 0600) : rc;
}

int sl__agent_read_file(const sl_agent *a, const char *name, size_t max, void **out, size_t *len)
{
    char path[SL__AGENT_PATH_MAX];
    int rc = sl__agent_path(a, name, path, sizeof path);
    return rc == SL_OK ? sl_fs_read_file(path, max, out, len) : rc;
}

void sl__agent_remove(const sl_agent *a, const char *name)
{
    char path[SL__AGENT_PATH_MAX];
    if (sl__agent_path(a, name, path, sizeof path) == SL_OK)
        unlink(path);
}

/* fsync a directory so an unlink is durable. */
void sl__agent_sync_dir(const sl_agent *a, const char *name)
{
    char path[SL__AGENT_PATH_MAX];
    int fd;
    if (sl__agent_path(a, name, path, sizeof path) != SL_OK)
        return;
    fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int sl__agent_write_text(const sl_agent *a, const char *name, const char *text)
{
    return sl__agent_write_file(a, name, text, strlen(text));
}

int sl__agent_read_i64(const sl_agent *a, const char *name, int64_t *out)
{
    void *buf;
    size_t len;
    char *end;
    long long v;
    int rc = sl__agent_read_file(a, name, 64, &buf, &len);
    if (rc != SL_OK)
        return rc;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || end == (char *)buf || (*end != '\0' && *end != '\n'))
        rc = SL_ECORRUPT;
    free(buf);
    if (rc == SL_OK)
        *out = (int64_t)v;
    return rc;
}

/* ---- key=value text ------------------------------------------------------------ */

int sl__agent_kv(const char *text, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    const char *p = text;
    while (p != NULL && *p != '\0') {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t vlen = len - klen - 1;
            if (vlen >= cap)
                return SL_ETOOBIG;
            memcpy(out, p + klen + 1, vlen);
            out[vlen] = '\0';
            return SL_OK;
        }
        p = eol ? eol + 1 : NULL;
    }
    return SL_ENOENT;
}

int sl__agent_kv_i64(const char *text, const char *key, int64_t *out)
{
    char v[32], *end;
    long long x;
    int rc = sl__agent_kv(text, key, v, sizeof v);
    if (rc != SL_OK)
        return rc;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0')
        return SL_ECORRUPT;
    *out = (int64_t)x;
    return SL_OK;
}

int sl__agent_kv_u64(const char *text, const char *key, uint64_t *out)
{
    char v[32], *end;
    unsigned long long x;
    int rc = sl__agent_kv(text, key, v, sizeof v);
    if (rc != SL_OK)
        return rc;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-')
        return SL_ECORRUPT;
    *out = (uint64_t)x;
    return SL_OK;
}

int sl__agent_kv_f64(const char *text, const char *key, double *out)
{
    char v[64], *end;
    double x;
    int rc = sl__agent_kv(text, key, v, sizeof v);
    if (rc != SL_OK)
        return rc;
    x = strtod(v, &end);
    if (end == v || *end != '\0' || x != x)
        return SL_ECORRUPT;
    *out = x;
    return SL_OK;
}

/* ---- the model cache --------------------------------------------------------------- */

static uint8_t *put(uint8_t *p, const void *src, size_t n)
{
    memcpy(p, src, n);
    return p + n;
}

int sl__agent_save_model(sl_agent *a, const void *frame, size_t len, int64_t version)
{
    char text[96];
    int rc;
    /* no moment where model.version vouches for a frame it was not written for */
    sl__agent_remove(a, "model.version");
    sl__agent_sync_dir(a, ".");
    rc = sl__agent_write_file(a, "model.frame", frame, len);
    if (rc != SL_OK)
        return rc;
    snprintf(text, sizeof text, "version=%" PRId64 "\ntask=%" PRId64 "\n", version, a->o.task_id);
    return sl__agent_write_text(a, "model.version", text);
}

#define SUPPORT_MAGIC  "SLSP"
#define SUPPORT_HEADER 40 /* magic, u32 1, u64 layout hash, ref, base, bitmap bytes */

int sl__agent_save_support(sl_agent *a, sl_support *s, int64_t ref)
{
    size_t blen;
    const uint8_t *bits = sl_support_bits(s, &blen);
    uint8_t *buf = malloc(SUPPORT_HEADER + blen), *q;
    uint32_t version = 1;
    uint64_t hash = sl_layout_hash(a->layout), len = blen;
    int64_t base = a->version;
    int rc;
    sl__agent_drop_support(a);
    if (buf == NULL) {
        sl_support_free(s);
        return SL_ENOMEM;
    }
    q = put(buf, SUPPORT_MAGIC, 4);
    q = put(q, &version, 4);
    q = put(q, &hash, 8);
    q = put(q, &ref, 8);
    q = put(q, &base, 8);
    q = put(q, &len, 8);
    put(q, bits, blen);
    rc = sl__agent_write_file(a, "model.support", buf, SUPPORT_HEADER + blen);
    free(buf);
    if (rc != SL_OK) { /* the next update goes unsplit */
        sl_support_free(s);
        sl__agent_remove(a, "model.support");
        return rc;
    }
    a->split = s;
    a->split_ref = ref;
    return SL_OK;
}

void sl__agent_drop_support(sl_agent *a)
{
    sl_support_free(a->split);
    a->split = NULL;
    a->split_ref = 0;
    sl__agent_remove(a, "model.support");
}

/* model.support into a->split when it is the held version's (quietly none otherwise: a
 * kill between the model and its support, or a model that came whole). */
static void load_support(sl_agent *a)
{
    void *raw = NULL;
    size_t len = 0;
    uint64_t hash, blen;
    int64_t ref, base;
    const uint8_t *b;
    sl_support_free(a->split);
    a->split = NULL;
    a->split_ref = 0;
    if (sl__agent_read_file(a, "model.support", SL__AGENT_MAX_MODEL, &raw, &len) != SL_OK)
        return;
    b = raw;
    if (len >= SUPPORT_HEADER && memcmp(b, SUPPORT_MAGIC, 4) == 0) {
        memcpy(&hash, b + 8, 8);
        memcpy(&ref, b + 16, 8);
        memcpy(&base, b + 24, 8);
        memcpy(&blen, b + 32, 8);
        if (hash == sl_layout_hash(a->layout) && base == a->version && ref >= 1 && ref < base &&
            blen == len - SUPPORT_HEADER &&
            sl_support_load(a->layout, b + SUPPORT_HEADER, (size_t)blen, &a->split) == SL_OK)
            a->split_ref = ref;
    }
    free(raw);
}

int sl__agent_cached_layout(const sl_agent *a, uint64_t *hash)
{
    sl_frame_header h;
    void *frame = NULL;
    size_t len = 0;
    int rc = sl__agent_read_file(a, "model.frame", SL__AGENT_MAX_MODEL, &frame, &len);
    if (rc != SL_OK)
        return rc;
    rc = sl_frame_peek_header(frame, len, &h);
    free(frame);
    if (rc == SL_OK)
        *hash = h.layout_hash;
    return rc;
}

/* The cached frame, decoded into a->global; SL_ENOENT when there is none
 * (or it is another task's, or model.version does not vouch for it, or no
 * model is held yet), SL_ELAYOUT when it is not the held model's. */
int sl__agent_load_model(sl_agent *a)
{
    sl_frame_header h;
    void *frame = NULL, *meta = NULL;
    size_t len = 0, meta_len = 0;
    int64_t version = 0, task = 0;
    float *params;
    int rc = sl__agent_read_file(a, "model.frame", SL__AGENT_MAX_MODEL, &frame, &len);
    if (rc != SL_OK)
        return rc;
    rc = sl_frame_peek_header(frame, len, &h);
    if (rc == SL_OK && h.kind != SL_FRAME_MODEL)
        rc = SL_ECORRUPT;
    if (rc == SL_OK && a->model == NULL)
        rc = SL_ENOENT; /* no model to decode it for (sl__agent_cached_layout names one) */
    if (rc == SL_OK && h.layout_hash != sl_layout_hash(a->layout))
        rc = SL_ELAYOUT;
    if (rc == SL_OK && (sl__agent_read_file(a, "model.version", 256, &meta, &meta_len) != SL_OK ||
                        sl__agent_kv_i64(meta, "version", &version) != SL_OK ||
                        sl__agent_kv_i64(meta, "task", &task) != SL_OK ||
                        version != (int64_t)h.base_version || task != a->o.task_id))
        rc = SL_ENOENT; /* a kill between the two writes, or another task's model */
    free(meta);
    if (rc != SL_OK) {
        free(frame);
        if (rc != SL_ENOENT)
            sl_log(SL_LOG_WARN, "agent", "model cache unusable (%s): ignored", sl_strerror(rc));
        return rc == SL_ELAYOUT ? rc : SL_ENOENT;
    }
    params = malloc(a->n * sizeof *params);
    rc = params ? sl_frame_decode_model(a->layout, frame, len, NULL, 0, params) : SL_ENOMEM;
    free(frame);
    if (rc != SL_OK) {
        free(params);
        sl_log(SL_LOG_WARN, "agent", "model cache does not decode (%s): ignored", sl_strerror(rc));
        return SL_ENOENT;
    }
    free(a->global);
    a->global = params;
    a->version = (int64_t)h.base_version;
    a->stats.model_version = a->version;
    load_support(a);
    return SL_OK;
}

int sl__agent_partial_start(const sl_agent *a, const char *path, const char *etag, const void *data,
                            size_t len)
{
    size_t plen = strlen(path), elen = strlen(etag), total = 12 + plen + elen + len;
    uint8_t *buf = malloc(total);
    uint32_t v;
    int rc;
    if (buf == NULL)
        return SL_ENOMEM;
    memcpy(buf, PART_MAGIC, 4);
    v = (uint32_t)plen;
    memcpy(buf + 4, &v, 4);
    memcpy(buf + 8, path, plen);
    v = (uint32_t)elen;
    memcpy(buf + 8 + plen, &v, 4);
    memcpy(buf + 12 + plen, etag, elen);
    if (len > 0)
        memcpy(buf + 12 + plen + elen, data, len);
    rc = sl__agent_write_file(a, "model.partial", buf, total);
    free(buf);
    return rc;
}

int sl__agent_partial_append(const sl_agent *a, const void *data, size_t len)
{
    char path[SL__AGENT_PATH_MAX];
    const uint8_t *p = data;
    int fd, rc = sl__agent_path(a, "model.partial", path, sizeof path);
    if (rc != SL_OK)
        return rc;
    /* not fsync'd: the bytes are a cache, checked against the ETag's
     * SHA-256 before use; after a power loss a torn tail fails that check
     * and the download starts over */
    fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return sl_status_from_errno(errno);
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = w < 0 ? sl_status_from_errno(errno) : SL_EIO;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    close(fd);
    return rc;
}

int sl__agent_partial_load(const sl_agent *a, const char *path, char *etag, size_t ecap,
                           void **data, size_t *len)
{
    void *raw;
    size_t rlen;
    uint32_t plen, elen;
    const uint8_t *b;
    int rc = sl__agent_read_file(a, "model.partial", SL__AGENT_MAX_MODEL, &raw, &rlen);
    if (rc != SL_OK)
        return rc;
    b = raw;
    rc = SL_ECORRUPT;
    if (rlen >= 12 && memcmp(b, PART_MAGIC, 4) == 0) {
        memcpy(&plen, b + 4, 4);
        if (plen <= rlen - 12) {
            memcpy(&elen, b + 8 + plen, 4);
            if (elen < ecap && elen <= rlen - 12 - plen) {
                rc = plen == strlen(path) && memcmp(b + 8, path, plen) == 0 ? SL_OK : SL_ENOENT;
                if (rc == SL_OK) {
                    memcpy(etag, b + 12 + plen, elen);
                    etag[elen] = '\0';
                }
            }
        }
    }
    if (rc == SL_OK) {
        size_t have = rlen - 12 - plen - elen;
        /* the bytes move to the front of the buffer the caller gets */
        memmove(raw, b + 12 + plen + elen, have);
        *data = raw;
        *len = have;
        return SL_OK;
    }
    free(raw);
    return rc;
}

void sl__agent_drop_partial(const sl_agent *a)
{
    sl__agent_remove(a, "model.partial");
}

/* ---- audit (tests) ------------------------------------------------------------------ */

int sl__agent_audit(const sl_agent *a, uint64_t gen, const float *delta)
{
    char name[64];
    void *prev = NULL;
    size_t len = 0, bytes = a->n * sizeof(double);
    double *sum;
    int rc;
    snprintf(name, sizeof name, "audit/trained.%" PRIu64, gen - 1);
    rc = gen > 1 ? sl__agent_read_file(a, name, bytes, &prev, &len) : SL_ENOENT;
    if (rc == SL_OK && len != bytes)
        rc = SL_ECORRUPT;
    if (rc != SL_OK && gen > 1)
        sl_log(SL_LOG_WARN, "agent", "%s: %s (the audit starts again from zero)", name,
               sl_strerror(rc));
    sum = rc == SL_OK ? prev : calloc(a->n, sizeof(double));
    if (rc != SL_OK)
        free(prev);
    if (sum == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < a->n; i++)
        sum[i] += (double)delta[i];
    snprintf(name, sizeof name, "audit/trained.%" PRIu64, gen);
    rc = sl__agent_write_file(a, name, sum, bytes);
    free(sum);
    if (rc == SL_OK && gen > 3) {
        snprintf(name, sizeof name, "audit/trained.%" PRIu64, gen - 3);
        sl__agent_remove(a, name);
    }
    return rc;
}

/* ---- residual ----------------------------------------------------------------------- */

int sl__agent_save_residual(sl_agent *a, const sl__agent_resolved *tag)
{
    size_t vecs = a->momentum ? 2 : 1, payload = vecs * a->n * sizeof(float);
    uint8_t *buf = malloc(RES_HEADER + payload), *p = buf;
    uint32_t version = 1, outcome = (uint32_t)tag->outcome;
    uint32_t flags = (a->momentum ? 1u : 0u) | (a->absorb ? 2u : 0u);
    uint32_t dup = (uint32_t)tag->duplicate, pad = 0;
    uint64_t hash = sl_layout_hash(a->layout), n = a->n;
    int rc;
    if (buf == NULL)
        return SL_ENOMEM;
    p = put(p, RES_MAGIC, 4);
    p = put(p, &version, 4);
    p = put(p, &hash, 8);
    p = put(p, &n, 8);
    p = put(p, &tag->gen, 8);
    p = put(p, &outcome, 4);
    p = put(p, &flags, 4);
    p = put(p, &tag->round_id, 8);
    p = put(p, &tag->update_id, 8);
    p = put(p, &dup, 4);
    p = put(p, &pad, 4);
    p = put(p, tag->frame_sha, 32);
    /* p: the payload's digest, then the payload */
    memcpy(p + 32, a->residual, a->n * sizeof(float));
    if (a->momentum)
        memcpy(p + 32 + a->n * sizeof(float), a->momentum, a->n * sizeof(float));
    sl_sha256(p + 32, payload, p);
    rc = sl__agent_write_file(a, "residual", buf, RES_HEADER + payload);
    free(buf);
    if (rc == SL_OK)
        a->resolved = *tag;
    return rc;
}

/* Load the residual for the current layout (zeros when there is none). */
int sl__agent_load_residual(sl_agent *a)
{
    void *raw = NULL;
    size_t len = 0;
    const uint8_t *p;
    uint32_t version, outcome, flags, dup;
    uint64_t hash, n;
    sl__agent_resolved tag;
    uint8_t sum[32];
    int rc = sl__agent_read_file(a, "residual", SL__AGENT_MAX_MODEL, &raw, &len);
    memset(a->residual, 0, a->n * sizeof(float));
    if (a->momentum)
        memset(a->momentum, 0, a->n * sizeof(float));
    memset(&a->resolved, 0, sizeof a->resolved);
    a->absorb = 0;
    if (rc == SL_ENOENT)
        return SL_OK;
    if (rc != SL_OK)
        return rc;
    p = raw;
    rc = SL_ECORRUPT;
    if (len < RES_HEADER || memcmp(p, RES_MAGIC, 4) != 0)
        goto done;
    memset(&tag, 0, sizeof tag);
    memcpy(&version, p + 4, 4);
    memcpy(&hash, p + 8, 8);
    memcpy(&n, p + 16, 8);
    memcpy(&tag.gen, p + 24, 8);
    memcpy(&outcome, p + 32, 4);
    memcpy(&flags, p + 36, 4);
    memcpy(&tag.round_id, p + 40, 8);
    memcpy(&tag.update_id, p + 48, 8);
    memcpy(&dup, p + 56, 4);
    memcpy(tag.frame_sha, p + 64, 32);
    tag.outcome = (int)outcome;
    tag.duplicate = (int)dup;
    if (version != 1 || hash != sl_layout_hash(a->layout) || n != a->n) {
        rc = SL_ELAYOUT;
        goto done;
    }
    if (len != RES_HEADER + ((flags & 1) ? 2 : 1) * n * sizeof(float))
        goto done;
    sl_sha256(p + RES_HEADER, len - RES_HEADER, sum);
    if (memcmp(sum, p + 96, 32) != 0)
        goto done;
    memcpy(a->residual, p + RES_HEADER, n * sizeof(float));
    if ((flags & 1) && a->momentum)
        memcpy(a->momentum, p + RES_HEADER + n * sizeof(float), n * sizeof(float));
    a->resolved = tag;
    a->absorb = (flags & 2) != 0;
    rc = SL_OK;
done:
    free(raw);
    return rc;
}

/* ---- local tensors (FedBN) ------------------------------------------------------------ */

int sl__agent_save_local(const sl_agent *a, uint64_t local_hash, const float *values, size_t count)
{
    size_t payload = count * sizeof(float);
    uint8_t *buf = malloc(LOC_HEADER + payload), *p = buf;
    uint32_t version = 1;
    uint64_t hash = sl_layout_hash(a->layout), n = count;
    int rc;
    if (buf == NULL)
        return SL_ENOMEM;
    p = put(p, LOC_MAGIC, 4);
    p = put(p, &version, 4);
    p = put(p, &hash, 8);
    p = put(p, &local_hash, 8);
    p = put(p, &n, 8);
    memcpy(p + 32, values, payload);
    sl_sha256(p + 32, payload, p);
    rc = sl__agent_write_file(a, "local", buf, LOC_HEADER + payload);
    free(buf);
    return rc;
}

int sl__agent_load_local(const sl_agent *a, uint64_t local_hash, float **values, size_t *count)
{
    void *raw = NULL;
    size_t len = 0;
    const uint8_t *p;
    uint32_t version;
    uint64_t hash, set, n;
    uint8_t sum[32];
    float *v;
    int rc = sl__agent_read_file(a, "local", SL__AGENT_MAX_MODEL, &raw, &len);
    if (rc != SL_OK)
        return rc;
    p = raw;
    rc = SL_ECORRUPT;
    if (len < LOC_HEADER || memcmp(p, LOC_MAGIC, 4) != 0)
        goto done;
    memcpy(&version, p + 4, 4);
    memcpy(&hash, p + 8, 8);
    memcpy(&set, p + 16, 8);
    memcpy(&n, p + 24, 8);
    if (version != 1 || n > (len - LOC_HEADER) / sizeof(float) ||
        len != LOC_HEADER + n * sizeof(float))
        goto done;
    sl_sha256(p + LOC_HEADER, len - LOC_HEADER, sum);
    if (memcmp(sum, p + 32, 32) != 0)
        goto done;
    rc = SL_ENOENT; /* another model's, or another set of local tensors */
    if (hash != sl_layout_hash(a->layout) || set != local_hash)
        goto done;
    rc = SL_ENOMEM;
    v = malloc(n > 0 ? n * sizeof(float) : 1);
    if (v == NULL)
        goto done;
    memcpy(v, p + LOC_HEADER, n * sizeof(float));
    *values = v;
    *count = (size_t)n;
    rc = SL_OK;
done:
    free(raw);
    return rc;
}

/* ---- the pending upload ------------------------------------------------------------- */

void sl__agent_pending_free(sl__agent_pending *p)
{
    sl_support_free(p->support);
    free(p->frame);
    free(p->acc);
    free(p->acc_mu);
    memset(p, 0, sizeof *p);
}

int sl__agent_save_upload(const sl_agent *a)
{
    char text[256];
    snprintf(text, sizeof text, "id=%s\noffset=%" PRIu64 "\n", a->pending.upload_id,
             a->pending.offset);
    return sl__agent_write_text(a, "pending/upload", text);
}

int sl__agent_save_pending(sl_agent *a)
{
    const sl__agent_pending *p = &a->pending;
    size_t vecs = p->acc_mu ? 2 : 1, len = ACC_HEADER + vecs * a->n * sizeof(float);
    uint8_t *buf = malloc(len), acc_sha[32];
    char text[1280], fhex[65], ahex[65], split[128];
    int rc;
    if (buf == NULL)
        return SL_ENOMEM;
    {
        uint8_t *q = buf;
        uint32_t version = 1, flags = p->acc_mu ? 1 : 0, pad = 0;
        uint64_t n = a->n;
        q = put(q, ACC_MAGIC, 4);
        q = put(q, &version, 4);
        q = put(q, &p->layout_hash, 8);
        q = put(q, &n, 8);
        q = put(q, &flags, 4);
        q = put(q, &pad, 4);
        q = put(q, p->acc, a->n * sizeof(float));
        if (p->acc_mu)
            put(q, p->acc_mu, a->n * sizeof(float));
    }
    sl_sha256(buf, len, acc_sha);
    rc = sl__agent_write_file(a, "pending/frame", p->frame, p->frame_len);
    if (rc == SL_OK)
        rc = sl__agent_write_file(a, "pending/accumulated", buf, len);
    free(buf);
    split[0] = '\0';
    if (rc == SL_OK && p->support != NULL) { /* a split frame's support, vouched for by meta */
        size_t blen;
        const uint8_t *bits = sl_support_bits(p->support, &blen);
        uint8_t sha[32];
        char hex[65];
        sl_sha256(bits, blen, sha);
        sl_hex(sha, 32, hex);
        snprintf(split, sizeof split, "support_ref=%" PRId64 "\nsupport_sha256=%s\n",
                 p->support_ref, hex);
        rc = sl__agent_write_file(a, "pending/support", bits, blen);
    }
    if (rc == SL_OK)
        rc = sl__agent_save_upload(a);
    if (rc != SL_OK)
        return rc;
    sl_hex(p->frame_sha, 32, fhex);
    sl_hex(acc_sha, 32, ahex);
    snprintf(text, sizeof text,
             "gen=%" PRIu64 "\ntask=%" PRId64 "\nround=%" PRId64 "\nbase_version=%" PRId64
             "\ndeadline_ms=%" PRId64 "\nnum_samples=%u\nparticipation=%u\ndensity=%.17g\n"
             "topk_scope=%s\nerror_feedback=%s\nlayout=%" PRIu64
             "\nframe_len=%zu\nframe_sha256=%s\nacc_sha256=%s\nlocal_steps=%u\n%s",
             p->gen, p->task_id, p->round_id, p->base_version, p->deadline_ms, p->num_samples,
             p->participation, p->density, sl_topk_scope_name(p->topk_scope),
             sl_error_feedback_name(p->feedback), p->layout_hash, p->frame_len, fhex, ahex,
             p->local_steps, split);
    return sl__agent_write_text(a, "pending/meta", text);
}

static int load_vectors(sl_agent *a, const char *sha_hex, sl__agent_pending *p)
{
    void *raw;
    size_t len;
    uint8_t sum[32], want[32];
    uint32_t flags;
    uint64_t hash, n;
    const uint8_t *b;
    int rc = sl__agent_read_file(a, "pending/accumulated", SL__AGENT_MAX_MODEL, &raw, &len);
    if (rc != SL_OK)
        return rc;
    b = raw;
    sl_sha256(raw, len, sum);
    rc = SL_ECORRUPT;
    if (sl_unhex(sha_hex, want, 32) != SL_OK || memcmp(sum, want, 32) != 0 || len < ACC_HEADER ||
        memcmp(b, ACC_MAGIC, 4) != 0)
        goto done;
    memcpy(&hash, b + 8, 8);
    memcpy(&n, b + 16, 8);
    memcpy(&flags, b + 24, 4);
    if (hash != sl_layout_hash(a->layout) || n != a->n || (flags & 1) != (a->momentum != NULL) ||
        len != ACC_HEADER + ((flags & 1) ? 2 : 1) * n * sizeof(float))
        goto done;
    rc = SL_ENOMEM;
    p->acc = malloc(n * sizeof(float));
    p->acc_mu = (flags & 1) ? malloc(n * sizeof(float)) : NULL;
    if (p->acc == NULL || ((flags & 1) && p->acc_mu == NULL))
        goto done;
    memcpy(p->acc, b + ACC_HEADER, n * sizeof(float));
    if (flags & 1)
        memcpy(p->acc_mu, b + ACC_HEADER + n * sizeof(float), n * sizeof(float));
    rc = SL_OK;
done:
    free(raw);
    return rc;
}

/* A split pending frame's support (meta names it and its digest), checked against the frame:
 * a split frame without one, or with one it does not decode against, is damage. */
static int load_pending_support(sl_agent *a, const char *meta, sl__agent_pending *p)
{
    char hex[80];
    uint8_t sum[32], want[32];
    void *bits = NULL;
    size_t len = 0;
    sl_frame_header h;
    sl_update *u = NULL;
    int rc = sl__agent_kv(meta, "support_sha256", hex, sizeof hex);
    if (rc == SL_ENOENT) /* a plain frame (or one written before split frames) */
        return sl_frame_peek_header(p->frame, p->frame_len, &h) == SL_OK &&
                       !(h.flags & SL_FRAME_FLAG_SPLIT)
                   ? SL_OK
                   : SL_ECORRUPT;
    if (rc != SL_OK || sl__agent_kv_i64(meta, "support_ref", &p->support_ref) != SL_OK ||
        sl_unhex(hex, want, 32) != SL_OK)
        return SL_ECORRUPT;
    rc = sl__agent_read_file(a, "pending/support", SL__AGENT_MAX_MODEL, &bits, &len);
    if (rc != SL_OK)
        return rc;
    sl_sha256(bits, len, sum);
    rc = memcmp(sum, want, 32) == 0 ? sl_support_load(a->layout, bits, len, &p->support)
                                    : SL_ECORRUPT;
    free(bits);
    if (rc == SL_OK)
        rc = sl_frame_decode_update_split(a->layout, p->frame, p->frame_len, NULL, p->support, &u);
    sl_update_free(u);
    return rc;
}

/* The pending upload into a->pending (present = 0 when there is none). */
int sl__agent_load_pending(sl_agent *a)
{
    sl__agent_pending p;
    void *meta = NULL, *up = NULL;
    size_t len;
    char fhex[80], ahex[80], scope[16];
    int64_t i64;
    uint64_t flen;
    uint8_t sum[32];
    int rc;
    memset(&p, 0, sizeof p);
    sl__agent_pending_free(&a->pending);
    rc = sl__agent_read_file(a, "pending/meta", TEXT_MAX, &meta, &len);
    if (rc == SL_ENOENT)
        return SL_OK;
    if (rc != SL_OK)
        return rc;
    rc = SL_ECORRUPT;
    if (sl__agent_kv_u64(meta, "gen", &p.gen) != SL_OK ||
        sl__agent_kv_i64(meta, "task", &p.task_id) != SL_OK ||
        sl__agent_kv_i64(meta, "round", &p.round_id) != SL_OK ||
        sl__agent_kv_i64(meta, "base_version", &p.base_version) != SL_OK ||
        sl__agent_kv_i64(meta, "deadline_ms", &p.deadline_ms) != SL_OK ||
        sl__agent_kv_u64(meta, "layout", &p.layout_hash) != SL_OK ||
        sl__agent_kv_u64(meta, "frame_len", &flen) != SL_OK ||
        sl__agent_kv_f64(meta, "density", &p.density) != SL_OK ||
        sl__agent_kv(meta, "frame_sha256", fhex, sizeof fhex) != SL_OK ||
        sl__agent_kv(meta, "acc_sha256", ahex, sizeof ahex) != SL_OK ||
        sl__agent_kv_i64(meta, "num_samples", &i64) != SL_OK || i64 < 0 || i64 > UINT32_MAX)
        goto bad;
    p.num_samples = (uint32_t)i64;
    if (sl__agent_kv_i64(meta, "participation", &i64) != SL_OK || i64 < 0 || i64 > UINT32_MAX)
        goto bad;
    p.participation = (uint32_t)i64;
    /* written since local steps are reported; a pending upload from before says none */
    rc = sl__agent_kv_i64(meta, "local_steps", &i64);
    if (rc == SL_OK && (i64 < 0 || i64 > UINT32_MAX)) {
        rc = SL_ECORRUPT;
        goto bad;
    }
    p.local_steps = rc == SL_OK ? (uint32_t)i64 : 0;
    /* written since top-k scopes exist; a pending upload from before was per tensor */
    p.topk_scope = SL_TOPK_TENSOR;
    rc = sl__agent_kv(meta, "topk_scope", scope, sizeof scope);
    if (rc == SL_OK)
        rc = sl_topk_scope_parse(scope, &p.topk_scope);
    if (rc != SL_OK && rc != SL_ENOENT) {
        rc = SL_ECORRUPT;
        goto bad;
    }
    /* written since tracking error feedback exists; before, the residual was classic */
    p.feedback = SL_EF_RESIDUAL;
    rc = sl__agent_kv(meta, "error_feedback", scope, sizeof scope);
    if (rc == SL_OK)
        rc = sl_error_feedback_parse(scope, &p.feedback);
    if (rc != SL_OK && rc != SL_ENOENT) {
        rc = SL_ECORRUPT;
        goto bad;
    }
    if (a->model == NULL || p.layout_hash != sl_layout_hash(a->layout)) {
        rc = SL_ELAYOUT;
        goto bad;
    }
    rc = sl__agent_read_file(a, "pending/frame", SL__AGENT_MAX_FRAME, &p.frame, &p.frame_len);
    if (rc != SL_OK)
        goto bad;
    sl_sha256(p.frame, p.frame_len, sum);
    rc = SL_ECORRUPT;
    if (p.frame_len != flen || sl_unhex(fhex, p.frame_sha, 32) != SL_OK ||
        memcmp(sum, p.frame_sha, 32) != 0)
        goto bad;
    rc = load_vectors(a, ahex, &p);
    if (rc != SL_OK)
        goto bad;
    rc = load_pending_support(a, meta, &p);
    if (rc != SL_OK)
        goto bad;
    if (sl__agent_read_file(a, "pending/upload", TEXT_MAX, &up, &len) == SL_OK) {
        if (sl__agent_kv(up, "id", p.upload_id, sizeof p.upload_id) != SL_OK ||
            sl__agent_kv_u64(up, "offset", &p.offset) != SL_OK) {
            p.upload_id[0] = '\0';
            p.offset = 0;
        }
        free(up);
    }
    free(meta);
    p.present = 1;
    a->pending = p;
    return SL_OK;
bad:
    /* meta is written last, so this is damage, not a kill: drop it loudly */
    sl_log(SL_LOG_ERROR, "agent", "pending upload in %s/pending is unusable (%s): dropped", a->dir,
           sl_strerror(rc));
    free(meta);
    sl__agent_pending_free(&p);
    sl__agent_clear_pending(a);
    return SL_OK;
}

int sl__agent_clear_pending(sl_agent *a)
{
    sl__agent_remove(a, "pending/meta");
    sl__agent_sync_dir(a, "pending");
    sl__agent_remove(a, "pending/upload");
    sl__agent_remove(a, "pending/frame");
    sl__agent_remove(a, "pending/accumulated");
    sl__agent_remove(a, "pending/support");
    sl__agent_sync_dir(a, "pending");
    sl__agent_pending_free(&a->pending);
    return SL_OK;
}
