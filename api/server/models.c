/*
 * models.c - model downloads: the full-model frame or a lossless delta
 * from a base version, with a strong ETag (SHA-256 of the bytes served),
 * If-None-Match, single byte ranges (with If-Range), and the safetensors
 * export. Bytes sent to devices count in their round's bytes_down.
 *
 * With ?sparse=1 a delta may take the sparse body (codecs/FORMAT.md, coding 2: the positions
 * of the changed words, then those words), about 1.6 times smaller for a round's change;
 * clients that do not ask get the dense body, which every decoder reads.
 *
 * Encoded bytes are kept in a small cache keyed by (task, version, base, sparse),
 * bounded in bytes, least recently used out first: a fleet downloading the
 * same version costs one store read (or one delta encoding), not one per
 * device. Entries are immutable and reference-counted, so a response is
 * copied out of an entry without holding the cache lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/sha256.h>

#include "server_int.h"

#define ZSTD_LEVEL 3

struct sl__blob {
    int64_t task, version, base;
    int sparse; /* a delta that may take the sparse body (?sparse=1) */
    uint8_t *bytes;
    size_t len;
    char etag[2 * 32 + 3];
    unsigned refs;
    int detached; /* out of the cache list; freed by the last reference */
    uint64_t used;
    sl__blob *next;
};

static void blob_free(sl__blob *b)
{
    if (b != NULL) {
        free(b->bytes);
        free(b);
    }
}

static void blob_release(sl_server *s, sl__blob *b)
{
    int last;
    pthread_mutex_lock(&s->cache_lock);
    last = --b->refs == 0 && b->detached;
    pthread_mutex_unlock(&s->cache_lock);
    if (last)
        blob_free(b);
}

void sl__cache_free(sl_server *s)
{
    sl__blob *b = s->cache;
    while (b != NULL) {
        sl__blob *next = b->next;
        blob_free(b);
        b = next;
    }
    s->cache = NULL;
}

static sl__blob *cache_lookup_locked(sl_server *s, int64_t task, int64_t version, int64_t base,
                                     int sparse)
{
    for (sl__blob *b = s->cache; b != NULL; b = b->next)
        if (b->task == task && b->version == version && b->base == base && b->sparse == sparse) {
            b->refs++;
            b->used = ++s->cache_clock;
            return b;
        }
    return NULL;
}

/* Insert @b (holding one reference for the caller) or return the entry a
 * concurrent request inserted first. */
static sl__blob *cache_insert(sl_server *s, sl__blob *b)
{
    sl__blob *have;
    pthread_mutex_lock(&s->cache_lock);
    have = cache_lookup_locked(s, b->task, b->version, b->base, b->sparse);
    if (have != NULL) {
        pthread_mutex_unlock(&s->cache_lock);
        blob_free(b);
        return have;
    }
    b->refs = 1;
    b->used = ++s->cache_clock;
    if (b->len > s->opt.model_cache_bytes) {
        b->detached = 1; /* too big to keep: served once, then freed */
        pthread_mutex_unlock(&s->cache_lock);
        return b;
    }
    while (s->cache != NULL && s->cache_bytes + b->len > s->opt.model_cache_bytes) {
        sl__blob **victim = &s->cache, *v;
        for (sl__blob **pp = &s->cache; *pp != NULL; pp = &(*pp)->next)
            if ((*pp)->used < (*victim)->used)
                victim = pp;
        v = *victim;
        *victim = v->next;
        s->cache_bytes -= v->len;
        s->cache_entries--;
        if (v->refs == 0)
            blob_free(v);
        else
            v->detached = 1;
    }
    b->next = s->cache;
    s->cache = b;
    s->cache_bytes += b->len;
    s->cache_entries++;
    pthread_mutex_unlock(&s->cache_lock);
    return b;
}

/* Decode version @version of @task into a new float vector. */
static int decode_version(sl_server *s, const sl_layout *layout, int64_t task, int64_t version,
                          float **out)
{
    sl_model_record m;
    size_t n = (size_t)sl_layout_params(layout);
    float *params = malloc((n ? n : 1) * sizeof *params);
    int rc = params ? sl_store_get_model(s->store, task, version, &m) : SL_ENOMEM;
    if (rc != SL_OK) {
        free(params);
        return rc;
    }
    rc = sl_frame_decode_model(layout, m.frame, m.frame_len, NULL, 0, params);
    sl_store_model_free(&m);
    if (rc != SL_OK) {
        free(params);
        return rc;
    }
    *out = params;
    return SL_OK;
}

static int task_layout(sl_server *s, int64_t task, sl_layout **out)
{
    sl_task_record t;
    int rc = sl_store_get_task(s->store, task, &t);
    if (rc != SL_OK)
        return rc;
    rc = sl_layout_parse(t.layout_text, strlen(t.layout_text), out);
    sl_store_task_free(&t);
    return rc;
}

/* The bytes for (task, version, base, sparse): from the cache, or made now. @sparse: a delta
 * may take the sparse body (0 without a base). */
static int get_blob(sl_server *s, int64_t task, int64_t version, int64_t base, int sparse,
                    sl__blob **out)
{
    sl__blob *b;
    uint8_t sha[32];
    int rc;
    pthread_mutex_lock(&s->cache_lock);
    b = cache_lookup_locked(s, task, version, base, sparse);
    pthread_mutex_unlock(&s->cache_lock);
    if (b != NULL) {
        *out = b;
        return SL_OK;
    }
    b = calloc(1, sizeof *b);
    if (b == NULL)
        return SL_ENOMEM;
    b->task = task;
    b->version = version;
    b->base = base;
    b->sparse = sparse;
    if (base == 0) {
        sl_model_record m;
        rc = sl_store_get_model(s->store, task, version, &m);
        if (rc == SL_OK) {
            b->bytes = m.frame;
            b->len = m.frame_len;
            memcpy(sha, m.sha256, 32);
            m.frame = NULL;
            sl_store_model_free(&m);
        }
    } else {
        sl_layout *layout = NULL;
        float *params = NULL, *base_params = NULL;
        void *frame = NULL;
        rc = task_layout(s, task, &layout);
        if (rc == SL_OK)
            rc = decode_version(s, layout, task, version, &params);
        if (rc == SL_OK)
            rc = decode_version(s, layout, task, base, &base_params);
        if (rc == SL_OK)
            rc = sparse ? sl_frame_encode_model_delta_sparse(layout, params, base_params,
                                                             (uint64_t)base, ZSTD_LEVEL, &frame,
                                                             &b->len)
                        : sl_frame_encode_model_delta(layout, params, base_params, (uint64_t)base,
                                                      ZSTD_LEVEL, &frame, &b->len);
        if (rc == SL_OK) {
            b->bytes = frame;
            sl_sha256(frame, b->len, sha);
        }
        free(params);
        free(base_params);
        sl_layout_free(layout);
    }
    if (rc != SL_OK) {
        blob_free(b);
        return rc;
    }
    b->etag[0] = '"';
    sl_hex(sha, 32, b->etag + 1);
    b->etag[65] = '"';
    b->etag[66] = '\0';
    *out = cache_insert(s, b);
    return SL_OK;
}

/* If-None-Match: "*" or a list of entity tags (weak comparison). */
static int etag_matches(const char *header, const char *etag)
{
    const char *p = header;
    while (*p != '\0') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (strncmp(p, etag, strlen(etag)) == 0)
            return 1;
        while (*p != '\0' && *p != ',')
            p++;
    }
    return 0;
}

static void serve(sl_server *s, sl__req *rq, sl__resp *rs, const sl__blob *b, int latest)
{
    const char *inm = sl__req_header(rq, "If-None-Match");
    uint64_t first = 0, last = b->len ? b->len - 1 : 0;
    const char *if_range = sl__req_header(rq, "If-Range");
    int range = sl__parse_range(sl__req_header(rq, "Range"), b->len, &first, &last);
    if (range != 0 && if_range != NULL && strcmp(if_range, b->etag) != 0) {
        /* the client's bytes belong to another representation (RFC 9110
         * 13.1.5, strong comparison; we give no dates): send it all */
        range = 0;
        first = 0;
        last = b->len ? b->len - 1 : 0;
    }
    sl__resp_header(rs, "ETag", "%s", b->etag);
    sl__resp_header(rs, "Accept-Ranges", "bytes");
    sl__resp_header(rs, "X-Starling-Model-Version", "%lld", (long long)b->version);
    if (b->base > 0)
        sl__resp_header(rs, "X-Starling-Base-Version", "%lld", (long long)b->base);
    sl__resp_header(rs, "Cache-Control", "%s",
                    latest ? "no-cache" : "private, max-age=31536000, immutable");
    if (inm != NULL && etag_matches(inm, b->etag)) {
        sl__resp_bytes(rs, 304, "", NULL, 0);
        return;
    }
    if (range < 0) {
        sl__problem(rs, rq, 416, "range-not-satisfiable", NULL, "the representation has %zu bytes",
                    b->len);
        sl__resp_header(rs, "Content-Range", "bytes */%zu", b->len);
        return;
    }
    sl__resp_copy(rs, range ? 206 : 200, "application/octet-stream", b->bytes + first,
                  b->len ? (size_t)(last - first + 1) : 0);
    if (range && rs->status == 206)
        sl__resp_header(rs, "Content-Range", "bytes %llu-%llu/%zu", (unsigned long long)first,
                        (unsigned long long)last, b->len);
    /* a device's download is part of the round (operators' reads are not);
     * counted when the bytes are queued, as HTTP servers log bytes_sent */
    if ((rs->status == 200 || rs->status == 206) && rq->device_id > 0 &&
        strcmp(rq->method, "HEAD") != 0)
        (void)sl_engine_count_download(s->engine, b->task, rq->device_id, (uint64_t)rs->len);
}

/* safetensors: u64 LE header length, JSON header, raw LE fp32 data. */
static int export_safetensors(sl_server *s, int64_t task, int64_t version, sl__resp *rs)
{
    sl_layout *layout = NULL;
    float *params = NULL;
    cJSON *hdr = NULL, *meta;
    char *text = NULL, num[32];
    uint8_t *out = NULL;
    size_t n, hlen, padded, total;
    int rc = task_layout(s, task, &layout);
    if (rc == SL_OK)
        rc = decode_version(s, layout, task, version, &params);
    if (rc != SL_OK)
        goto done;
    n = (size_t)sl_layout_params(layout);
    hdr = cJSON_CreateObject();
    meta = cJSON_AddObjectToObject(hdr, "__metadata__");
    rc = SL_ENOMEM;
    if (hdr == NULL || meta == NULL)
        goto done;
    cJSON_AddStringToObject(meta, "format", "pt");
    snprintf(num, sizeof num, "%lld", (long long)task);
    cJSON_AddStringToObject(meta, "starling_task", num);
    snprintf(num, sizeof num, "%lld", (long long)version);
    cJSON_AddStringToObject(meta, "starling_version", num);
    for (size_t i = 0; i < sl_layout_tensors(layout); i++) {
        const sl_tensor_desc *t = sl_layout_tensor(layout, i);
        cJSON *entry = cJSON_AddObjectToObject(hdr, t->name), *shape, *offs;
        if (entry == NULL)
            goto done;
        cJSON_AddStringToObject(entry, "dtype", "F32");
        shape = cJSON_AddArrayToObject(entry, "shape");
        offs = cJSON_AddArrayToObject(entry, "data_offsets");
        if (shape == NULL || offs == NULL)
            goto done;
        for (uint32_t d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(t->offset * 4)));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)((t->offset + t->count) * 4)));
    }
    text = cJSON_PrintUnformatted(hdr);
    if (text == NULL)
        goto done;
    hlen = strlen(text);
    padded = (hlen + 7) & ~(size_t)7; /* the data starts 8-byte aligned */
    total = 8 + padded + n * 4;
    out = malloc(total);
    if (out == NULL)
        goto done;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, text, hlen);
    memset(out + 8 + hlen, ' ', padded - hlen);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        uint8_t *dst = out + 8 + padded + 4 * i;
        memcpy(&bits, &params[i], 4);
        dst[0] = (uint8_t)bits;
        dst[1] = (uint8_t)(bits >> 8);
        dst[2] = (uint8_t)(bits >> 16);
        dst[3] = (uint8_t)(bits >> 24);
    }
    sl__resp_bytes(rs, 200, "application/octet-stream", out, total);
    out = NULL;
    sl__resp_header(rs, "Content-Disposition",
                    "attachment; filename=\"task-%lld-v%lld.safetensors\"", (long long)task,
                    (long long)version);
    rc = SL_OK;
done:
    free(out);
    free(text);
    cJSON_Delete(hdr);
    free(params);
    sl_layout_free(layout);
    return rc;
}

void sl__h_model(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    char format[32], task_text[32], base_text[32], sparse_text[8];
    int64_t task, version, base = 0;
    int latest = strcmp(p->seg[0], "latest") == 0, safetensors = 0, sparse = 0, rc;
    sl__blob *b = NULL;

    rc = sl__query_get(rq->query, "format", format, sizeof format);
    if (rc < 0 || (rc == 1 && strcmp(format, "safetensors") != 0 && strcmp(format, "frame"))) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "format is \"frame\" or \"safetensors\"");
        return;
    }
    safetensors = rc == 1 && strcmp(format, "safetensors") == 0;
    /* devices sign; the safetensors export is an operator's read */
    if (safetensors ? !sl__auth_read(s, rq, rs)
                    : !sl__has_admin(s, rq) && !sl__auth_device(s, rq, rs))
        return;
    if (sl__query_get(rq->query, "task", task_text, sizeof task_text) != 1 ||
        sl__parse_i64(task_text, 1, INT64_MAX, &task) != SL_OK) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "?task=<task id> is required");
        return;
    }
    rc = sl__query_get(rq->query, "base", base_text, sizeof base_text);
    if (rc < 0 || (rc == 1 && sl__parse_i64(base_text, 1, INT64_MAX, &base) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "base must be a model version");
        return;
    }
    rc = sl__query_get(rq->query, "sparse", sparse_text, sizeof sparse_text);
    if (rc < 0 || (rc == 1 && strcmp(sparse_text, "0") != 0 && strcmp(sparse_text, "1") != 0)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "sparse is 0 or 1");
        return;
    }
    sparse = rc == 1 && base > 0 && strcmp(sparse_text, "1") == 0;
    if (latest) {
        sl_task_status *st = malloc(sizeof *st);
        rc = st ? sl_engine_task_status(s->engine, task, st) : SL_ENOMEM;
        version = rc == SL_OK ? st->model_version : 0;
        free(st);
    } else {
        rc = sl__parse_i64(p->seg[0], 1, INT64_MAX, &version) == SL_OK ? SL_OK : SL_ENOENT;
    }
    if (rc == SL_OK)
        rc = safetensors ? export_safetensors(s, task, version, rs)
                         : get_blob(s, task, version, base, sparse, &b);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no model %s%s%s of task %lld", p->seg[0],
                    base ? " or base " : "", base ? base_text : "", (long long)task);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the model");
        return;
    }
    if (b != NULL) {
        serve(s, rq, rs, b, latest);
        blob_release(s, b);
    }
}

/* One of a task's documents as stored, with its SHA-256 as a strong ETag (the agent checks
 * it against the check-in's model_spec_sha256 / data_contract_sha256). Devices sign;
 * operators read with their token. */
static void task_doc(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs, int contract)
{
    const char *what = contract ? "data contract" : "model spec";
    sl_task_record t;
    uint8_t sha[32];
    char hex[65], **doc;
    int64_t task;
    size_t len;
    int rc;
    if (!sl__has_admin(s, rq) && !s->opt.public_status && !sl__auth_device(s, rq, rs))
        return;
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &task) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no task %s", p->seg[0]);
        return;
    }
    memset(&t, 0, sizeof t);
    rc = sl_store_get_task(s->store, task, &t);
    doc = contract ? &t.data_contract : &t.model_spec;
    if (rc == SL_OK && *doc == NULL)
        rc = SL_ENOENT;
    if (rc == SL_ENOENT) {
        sl_store_task_free(&t);
        sl__problem(rs, rq, 404, "not-found", NULL, "task %lld has no %s", (long long)task, what);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc,
                           contract ? "reading the data contract" : "reading the model spec");
        return;
    }
    len = strlen(*doc);
    if (mbedtls_sha256_ret((const unsigned char *)*doc, len, sha, 0) != 0) {
        sl_store_task_free(&t);
        sl__problem_status(rs, rq, SL_EIO, "hashing a task document");
        return;
    }
    sl_hex(sha, 32, hex);
    sl__resp_header(rs, "ETag", "\"%s\"", hex);
    sl__resp_bytes(rs, 200, "application/json", *doc, len);
    *doc = NULL; /* the response owns it */
    sl_store_task_free(&t);
}

/* GET /v1/tasks/{id}/model-spec (device/nn/MODEL_SPEC.md). */
void sl__h_model_spec(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    task_doc(s, rq, p, rs, 0);
}

/* GET /v1/tasks/{id}/data-contract (device/data/DATA_CONTRACT.md). */
void sl__h_data_contract(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    task_doc(s, rq, p, rs, 1);
}
