/*
 * net.c - the agent's side of the REST protocol (api/openapi.yaml):
 * enrolment, check-in, model downloads (delta from the held version, in
 * ranges of download_chunk_bytes kept in model.partial as they arrive, so
 * that a restart continues with Range + If-Range; SHA-256 checked against
 * the ETag at the end) and metrics reports. Requests go through the
 * api/client library, which signs and retries (a range cut mid-way is
 * asked again whole; uploads resume at the server's offset).
 *
 * Statuses returned: SL_EPERM only when going on is pointless (TLS refused
 * by CA or pin, enrolment token refused); SL_EBUSY for answers worth
 * retrying later (5xx, 429, 401 of a signed request: clock skew); the
 * client's transport errors as they are.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_int.h"

#define PROBLEM_PREFIX    "https://starling.dev/problems/"
#define MIN_RANGE         4096 /* smallest range a breaking link is asked for */
#define MAX_SHRINKS       8    /* halvings in a row without a range coming whole */
#define DOWN_MIN_MEASURED 4096 /* bytes: a smaller download measures latency, not bandwidth */

int sl__agent_connect(sl_agent *a)
{
    sl_client_options co;
    int rc;
    if (a->client != NULL)
        return SL_OK;
    memset(&co, 0, sizeof co);
    co.base_url = a->url;
    co.ca_file = a->o.ca_file;
    co.pinned_pubkey = a->o.pin;
    co.user_agent = "starling-agent/0.1";
    co.connect_timeout_ms = 10000;
    co.request_timeout_ms = a->o.request_timeout_ms;
    /* libcurl counts the stall in whole seconds: round up, at least 1 */
    co.low_speed_time_s =
        a->o.stall_timeout_ms > 0 ? (long)((a->o.stall_timeout_ms + 999) / 1000) : 0;
    co.max_attempts = a->o.max_attempts;
    co.retry_base_ms = a->o.retry_base_ms;
    co.retry_cap_ms = a->o.max_wait_ms < 30000 ? a->o.max_wait_ms : 30000;
    co.retry_after_cap_ms = a->o.max_wait_ms;
    co.upload_chunk_bytes = a->o.chunk_bytes;
    co.max_download_bytes = SL__AGENT_MAX_MODEL;
    co.random_seed = a->rng | 1;
    if (a->admin) {
        co.admin_token = a->o.admin_token;
    } else if (a->device_id > 0 && a->key != NULL) {
        co.device_id = a->device_id;
        co.device_key = a->key;
        co.use_sessions = a->o.sessions;
    }
    rc = sl_client_create(&co, &a->client);
    if (rc != SL_OK)
        sl_log(SL_LOG_ERROR, "agent", "client for %s: %s", a->url, sl_strerror(rc));
    return rc;
}

void sl__agent_problem(const sl_client_response *r, char *type, size_t tcap, char *reason,
                       size_t rcap)
{
    cJSON *doc = r->body ? cJSON_ParseWithLength((const char *)r->body, r->body_len) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "type");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(doc, "reason");
    type[0] = '\0';
    reason[0] = '\0';
    if (cJSON_IsString(t)) {
        const char *s = t->valuestring;
        if (strncmp(s, PROBLEM_PREFIX, strlen(PROBLEM_PREFIX)) == 0)
            s += strlen(PROBLEM_PREFIX);
        snprintf(type, tcap, "%s", s);
    }
    if (cJSON_IsString(why))
        snprintf(reason, rcap, "%s", why->valuestring);
    cJSON_Delete(doc);
}

const char *sl__agent_failure(int rc, const sl_client_response *r, char *buf, size_t cap)
{
    char type[64], reason[64];
    if (rc != SL_OK) {
        snprintf(buf, cap, "%s", sl_strerror(rc));
        return buf;
    }
    sl__agent_problem(r, type, sizeof type, reason, sizeof reason);
    snprintf(buf, cap, "HTTP %ld%s%s%s%s", r->status, type[0] ? " " : "", type,
             reason[0] ? " " : "", reason);
    return buf;
}

/* An HTTP answer that is not what was hoped for, as a status. */
static int answer_status(const char *what, const sl_client_response *r)
{
    char why[160];
    sl_log(r->status >= 500 || r->status == 429 ? SL_LOG_WARN : SL_LOG_ERROR, "agent", "%s: %s",
           what, sl__agent_failure(SL_OK, r, why, sizeof why));
    if (r->status == 404)
        return SL_ENOENT;
    return SL_EBUSY;
}

static int json_i64(const cJSON *o, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < -9.0e15 || v->valuedouble > 9.0e15)
        return SL_ESYNTAX;
    *out = (int64_t)v->valuedouble;
    return SL_OK;
}

static int json_f64(const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != v->valuedouble)
        return SL_ESYNTAX;
    *out = v->valuedouble;
    return SL_OK;
}

/* ---- enrolment ----------------------------------------------------------------------- */

int sl__agent_enrol(sl_agent *a)
{
    char path[SL__AGENT_PATH_MAX], hex[2 * SL_PUBKEY_LEN + 1], body[512], text[32], why[160];
    uint8_t pub[SL_PUBKEY_LEN];
    sl_client_response r;
    cJSON *doc;
    int64_t id = 0;
    int rc;

    if (a->key == NULL) {
        sl__agent_path(a, "device.key", path, sizeof path);
        rc = sl_device_key_load(path, &a->key);
        if (rc == SL_ENOENT) {
            /* a new key is a new identity: an id given to another key goes */
            sl__agent_remove(a, "device.id");
            sl__agent_sync_dir(a, ".");
            a->device_id = 0;
            rc = sl_device_key_generate(&a->key);
            if (rc == SL_OK)
                rc = sl_device_key_save(a->key, path);
            if (rc == SL_OK)
                sl_log(SL_LOG_INFO, "agent", "new device key in %s", path);
        }
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "agent", "device key %s: %s", path, sl_strerror(rc));
            return rc;
        }
    }
    if (a->device_id > 0 || sl__agent_read_i64(a, "device.id", &a->device_id) == SL_OK)
        goto enrolled;
    if (a->o.enrolment_token == NULL || a->o.enrolment_token[0] == '\0') {
        sl_log(SL_LOG_ERROR, "agent", "not enrolled yet and no enrolment token given");
        return SL_EINVAL;
    }
    sl_device_key_public(a->key, pub);
    sl_hex(pub, sizeof pub, hex);
    {
        cJSON *req = cJSON_CreateObject(), *caps = cJSON_CreateObject();
        char *json;
        if (req == NULL || caps == NULL) {
            cJSON_Delete(req);
            cJSON_Delete(caps);
            return SL_ENOMEM;
        }
        cJSON_AddStringToObject(req, "enrolment_token", a->o.enrolment_token);
        cJSON_AddStringToObject(req, "public_key", hex);
        cJSON_AddStringToObject(caps, "kernel", sl_nn_kernel_variant());
        cJSON_AddStringToObject(caps, "agent", "starling-agent/0.1");
        cJSON_AddItemToObject(req, "capabilities", caps);
        json = cJSON_PrintUnformatted(req);
        cJSON_Delete(req);
        if (json == NULL || strlen(json) >= sizeof body) {
            free(json);
            return SL_ENOMEM;
        }
        snprintf(body, sizeof body, "%s", json);
        free(json);
    }
    rc = sl__agent_connect(a);
    if (rc != SL_OK)
        return rc;
    rc = sl_client_request(a->client, "POST", "/v1/devices", body, strlen(body), "application/json",
                           NULL, &r);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "agent", "enrolment: %s", sl_strerror(rc));
        return rc;
    }
    if (r.status == 401 || r.status == 403) {
        sl_log(SL_LOG_ERROR, "agent", "enrolment refused: %s",
               sl__agent_failure(SL_OK, &r, why, sizeof why));
        sl_client_response_free(&r);
        return SL_EPERM;
    }
    if (r.status != 201 && r.status != 200) {
        rc = answer_status("enrolment", &r);
        sl_client_response_free(&r);
        return rc;
    }
    doc = cJSON_ParseWithLength((const char *)r.body, r.body_len);
    rc = json_i64(doc, "device_id", &id) == SL_OK && id > 0 ? SL_OK : SL_ESYNTAX;
    cJSON_Delete(doc);
    sl_client_response_free(&r);
    if (rc != SL_OK)
        return rc;
    snprintf(text, sizeof text, "%" PRId64 "\n", id);
    rc = sl__agent_write_text(a, "device.id", text);
    if (rc != SL_OK)
        return rc;
    a->device_id = id;
    sl_log(SL_LOG_INFO, "agent", "enrolled as device %" PRId64, id);
enrolled:
    a->stats.device_id = a->device_id;
    /* the enrolment client was unsigned: sign from now on */
    sl_client_free(a->client);
    a->client = NULL;
    rc = sl__agent_connect(a);
    if (rc == SL_OK) {
        sl_agent_event ev = {.kind = SL_AGENT_EV_ENROLLED};
        sl__agent_emit(a, &ev);
    }
    return rc;
}

/* ---- check-in -------------------------------------------------------------------------- */

/* An optional finite number of "training" at least @min (at most @max_open, excluded,
 * when that is above @min); @out keeps its default when the key is absent. */
static int opt_f64(const cJSON *train, const char *key, double min, double max_open, double *out)
{
    double v;
    if (cJSON_GetObjectItemCaseSensitive(train, key) == NULL)
        return SL_OK;
    if (json_f64(train, key, &v) != SL_OK || !isfinite(v) || v < min ||
        (max_open > min && v >= max_open))
        return SL_ESYNTAX;
    *out = v;
    return SL_OK;
}

static int opt_bool(const cJSON *train, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(train, key);
    if (v == NULL)
        return SL_OK;
    if (!cJSON_IsBool(v))
        return SL_ESYNTAX;
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return SL_OK;
}

/* "frozen": names of 1..127 bytes of a layout's characters (codecs/FORMAT.md),
 * joined by commas into @out. */
static int parse_frozen(const cJSON *list, char *out)
{
    const cJSON *e;
    size_t used = 0;
    if (list == NULL)
        return SL_OK;
    if (!cJSON_IsArray(list))
        return SL_ESYNTAX;
    cJSON_ArrayForEach(e, list)
    {
        size_t len = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
        if (len == 0 || len > 127 ||
            strspn(e->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789_.:/-") != len ||
            used + (used > 0) + len >= SL__AGENT_FROZEN)
            return SL_ESYNTAX;
        if (used > 0)
            out[used++] = ',';
        memcpy(out + used, e->valuestring, len);
        used += len;
        out[used] = '\0';
    }
    return SL_OK;
}

/* The local optimiser of "training" (optimizer, nesterov, weight_decay, betas,
 * eps, clip_norm, frozen, local_norm): each absent key keeps plain SGD's
 * meaning, for coordinators that predate them. Settings of another optimiser
 * than the one named are refused, except betas and eps with SGD (unused). */
static int parse_local_optimizer(const cJSON *train, sl__agent_assignment *s)
{
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(train, "optimizer");
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(train, "betas");
    s->optimizer = SL_OPTIM_SGD;
    s->beta1 = 0.9;
    s->beta2 = 0.999;
    s->eps = 1e-8;
    if (opt != NULL) {
        if (!cJSON_IsString(opt))
            return SL_ESYNTAX;
        if (strcmp(opt->valuestring, "adam") == 0)
            s->optimizer = SL_OPTIM_ADAM;
        else if (strcmp(opt->valuestring, "adamw") == 0)
            s->optimizer = SL_OPTIM_ADAMW;
        else if (strcmp(opt->valuestring, "sgd") != 0)
            return SL_ESYNTAX;
    }
    if (betas != NULL) {
        const cJSON *b1 = cJSON_GetArrayItem(betas, 0), *b2 = cJSON_GetArrayItem(betas, 1);
        if (!cJSON_IsArray(betas) || cJSON_GetArraySize(betas) != 2 || !cJSON_IsNumber(b1) ||
            !cJSON_IsNumber(b2) || !(b1->valuedouble >= 0 && b1->valuedouble < 1) ||
            !(b2->valuedouble >= 0 && b2->valuedouble < 1))
            return SL_ESYNTAX;
        s->beta1 = b1->valuedouble;
        s->beta2 = b2->valuedouble;
    }
    if (opt_bool(train, "nesterov", &s->nesterov) != SL_OK ||
        opt_bool(train, "local_norm", &s->local_norm) != SL_OK ||
        opt_f64(train, "weight_decay", 0, 0, &s->weight_decay) != SL_OK ||
        opt_f64(train, "clip_norm", 0, 0, &s->clip_norm) != SL_OK ||
        opt_f64(train, "eps", 0, 0, &s->eps) != SL_OK || !(s->eps > 0) ||
        parse_frozen(cJSON_GetObjectItemCaseSensitive(train, "frozen"), s->frozen) != SL_OK)
        return SL_ESYNTAX;
    if (s->nesterov && (s->optimizer != SL_OPTIM_SGD || !(s->momentum > 0)))
        return SL_ESYNTAX; /* Nesterov is SGD's, and needs momentum */
    if (s->optimizer != SL_OPTIM_SGD && s->momentum != 0)
        return SL_ESYNTAX; /* Adam's momentum is its betas */
    return SL_OK;
}

/* An optional member @key of 64 lower-case hex digits into @out ("" when absent). */
static int hex_sha_of(const cJSON *doc, const char *key, char out[65])
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    out[0] = '\0';
    if (v == NULL)
        return SL_OK;
    if (n != 64 || strspn(v->valuestring, "0123456789abcdef") != 64)
        return SL_ESYNTAX;
    memcpy(out, v->valuestring, 65);
    return SL_OK;
}

static int parse_assignment(const cJSON *doc, sl__agent_assignment *out)
{
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(doc, "selected");
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(doc, "compression");
    const cJSON *train = cJSON_GetObjectItemCaseSensitive(doc, "training");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(comp, "values");
    const cJSON *scope;
    sl__agent_assignment s;
    int64_t part = 0, warm = 0, epochs = 0, batch = 0;
    memset(&s, 0, sizeof s);
    if (!cJSON_IsBool(sel) || !cJSON_IsString(values) ||
        sl_value_mode_parse(values->valuestring, &s.values) != SL_OK ||
        json_i64(doc, "round_id", &s.round_id) != SL_OK ||
        json_i64(doc, "round_no", &s.round_no) != SL_OK ||
        json_i64(doc, "model_version", &s.model_version) != SL_OK ||
        json_i64(doc, "report_deadline_ms", &s.deadline_ms) != SL_OK ||
        json_i64(doc, "retry_after_ms", &s.retry_after_ms) != SL_OK ||
        json_i64(doc, "participation", &part) != SL_OK ||
        json_f64(comp, "density", &s.density) != SL_OK ||
        json_i64(comp, "warmup_rounds", &warm) != SL_OK ||
        json_f64(comp, "warmup_density", &s.warmup_density) != SL_OK ||
        json_i64(train, "epochs", &epochs) != SL_OK || json_i64(train, "batch", &batch) != SL_OK ||
        json_f64(train, "lr", &s.lr) != SL_OK ||
        json_f64(train, "momentum", &s.momentum) != SL_OK ||
        json_f64(train, "prox_mu", &s.prox_mu) != SL_OK)
        return SL_ESYNTAX;
    s.selected = cJSON_IsTrue(sel);
    if (hex_sha_of(doc, "model_spec_sha256", s.model_spec_sha256) != SL_OK ||
        hex_sha_of(doc, "data_contract_sha256", s.data_contract_sha256) != SL_OK)
        return SL_ESYNTAX;
    /* absent from coordinators that predate it: they meant per tensor */
    scope = cJSON_GetObjectItemCaseSensitive(comp, "topk_scope");
    s.topk_scope = SL_TOPK_TENSOR;
    if (scope != NULL &&
        (!cJSON_IsString(scope) || sl_topk_scope_parse(scope->valuestring, &s.topk_scope) != SL_OK))
        return SL_ESYNTAX;
    /* absent from coordinators that predate it: they meant the classic residual */
    scope = cJSON_GetObjectItemCaseSensitive(comp, "error_feedback");
    s.feedback = SL_EF_RESIDUAL;
    if (scope != NULL && (!cJSON_IsString(scope) ||
                          sl_error_feedback_parse(scope->valuestring, &s.feedback) != SL_OK))
        return SL_ESYNTAX;
    s.residual_decay = 1.0;
    if (cJSON_GetObjectItemCaseSensitive(comp, "residual_decay") != NULL &&
        (json_f64(comp, "residual_decay", &s.residual_decay) != SL_OK ||
         !(s.residual_decay > 0 && s.residual_decay <= 1) ||
         (s.residual_decay < 1 && s.feedback != SL_EF_RESIDUAL)))
        return SL_ESYNTAX;
    if (part < 0 || warm < 0 || epochs < 1 || batch < 1 || epochs > 100000 || batch > 1 << 20 ||
        !(s.density > 0 && s.density <= 1) || !(s.lr > 0) || s.momentum < 0 || s.momentum >= 1 ||
        s.prox_mu < 0 || (s.selected && (s.round_id < 1 || s.model_version < 1)))
        return SL_ESYNTAX;
    if (parse_local_optimizer(train, &s) != SL_OK)
        return SL_ESYNTAX;
    s.participation = part > UINT32_MAX ? UINT32_MAX : (uint32_t)part;
    s.warmup_rounds = warm > UINT32_MAX ? UINT32_MAX : (uint32_t)warm;
    s.epochs = (uint32_t)epochs;
    s.batch = (uint32_t)batch;
    {
        const cJSON *nova = cJSON_GetObjectItemCaseSensitive(train, "fednova");
        if (nova != NULL && !cJSON_IsBool(nova))
            return SL_ESYNTAX;
        s.fednova = cJSON_IsTrue(nova);
    }
    /* absent from coordinators that predate it, and from tasks without time budgets */
    if (cJSON_GetObjectItemCaseSensitive(train, "max_steps") != NULL) {
        int64_t steps = 0;
        if (json_i64(train, "max_steps", &steps) != SL_OK || steps < 1 || steps > UINT32_MAX)
            return SL_ESYNTAX;
        s.max_steps = (uint32_t)steps;
    }
    *out = s;
    return SL_OK;
}

/* What this device measured of itself (time budgets): its step time, upload and download
 * speeds (each when measured; the coordinator assumes a speed it is not told). None: nothing
 * added. */
static int add_pace(cJSON *doc, const sl__agent_counters *c)
{
    cJSON *pace;
    if (!(c->step_ms_ewma > 0))
        return SL_OK;
    pace = cJSON_AddObjectToObject(doc, "pace");
    if (pace == NULL || cJSON_AddNumberToObject(pace, "step_ms", c->step_ms_ewma) == NULL ||
        (c->bw_ewma > 0 &&
         cJSON_AddNumberToObject(pace, "upload_bytes_per_s", c->bw_ewma) == NULL) ||
        (c->down_bw_ewma > 0 &&
         cJSON_AddNumberToObject(pace, "download_bytes_per_s", c->down_bw_ewma) == NULL))
        return SL_ENOMEM;
    return SL_OK;
}

int sl__agent_checkin(sl_agent *a, sl__agent_assignment *out)
{
    sl_client_response r;
    char *body;
    int rc;
    size_t samples = sl_agent_data_samples(a->o.data, a->o.client);
    /* the model first: a device that cannot train it need not say what its data lacks */
    const char *refusal = a->spec_refusal[0] != '\0' ? a->spec_refusal : a->data_refusal;
    cJSON *doc = cJSON_CreateObject(), *caps = cJSON_AddArrayToObject(doc, "capabilities");
    if (caps == NULL || cJSON_AddNumberToObject(doc, "task_id", (double)a->o.task_id) == NULL ||
        cJSON_AddNumberToObject(doc, "num_samples", (double)samples) == NULL ||
        !cJSON_AddItemToArray(caps, cJSON_CreateString(sl_nn_kernel_variant())) ||
        (refusal[0] != '\0' && cJSON_AddStringToObject(doc, "refusal", refusal) == NULL) ||
        add_pace(doc, &a->counters) != SL_OK || (body = cJSON_PrintUnformatted(doc)) == NULL) {
        cJSON_Delete(doc);
        return SL_ENOMEM;
    }
    cJSON_Delete(doc);
    rc = sl_client_request(a->client, "POST", "/v1/checkin", body, strlen(body), "application/json",
                           NULL, &r);
    free(body);
    if (rc == SL_OK && r.status == 200 && a->spec_refusal[0] != '\0')
        a->spec_refusal_sent = 1;
    else if (rc == SL_OK && r.status == 200 && a->data_refusal[0] != '\0')
        a->data_refusal_sent = 1;
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "agent", "check-in: %s", sl_strerror(rc));
        return rc;
    }
    if (r.status != 200) {
        rc = answer_status("check-in", &r);
        sl_client_response_free(&r);
        return rc;
    }
    rc = sl__agent_parse_assignment((const char *)r.body, r.body_len, out);
    sl_client_response_free(&r);
    if (rc != SL_OK)
        sl_log(SL_LOG_ERROR, "agent", "check-in: the answer does not parse");
    return rc;
}

int sl__agent_fetch_spec(sl_agent *a, void **text, size_t *len)
{
    return sl__agent_fetch_task_doc(a, "model-spec", text, len);
}

int sl__agent_fetch_task_doc(sl_agent *a, const char *doc, void **text, size_t *len)
{
    char path[96];
    sl_client_response r;
    int rc;
    snprintf(path, sizeof path, "/v1/tasks/%" PRId64 "/%s", a->o.task_id, doc);
    rc = sl_client_request(a->client, "GET", path, NULL, 0, NULL, NULL, &r);
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "agent", "%s: %s", doc, sl_strerror(rc));
        return rc;
    }
    if (r.status != 200) {
        /* 404: the task has none (the caller knows whether that is news); 401/403: not ours */
        rc = r.status == 404                      ? SL_ENOENT
             : r.status == 401 || r.status == 403 ? SL_EPERM
                                                  : answer_status(doc, &r);
        sl_client_response_free(&r);
        return rc;
    }
    *text = r.body;
    *len = r.body_len;
    r.body = NULL;
    sl_client_response_free(&r);
    return SL_OK;
}

int sl__agent_parse_assignment(const char *json, size_t len, sl__agent_assignment *out)
{
    cJSON *doc = cJSON_ParseWithLength(json, len);
    int rc = parse_assignment(doc, out);
    cJSON_Delete(doc);
    return rc;
}

/* ---- models ----------------------------------------------------------------------------- */

/* Decode @frame (a full model of @version or a delta from the held one). */
static int take_model(sl_agent *a, const uint8_t *frame, size_t len, int64_t version)
{
    sl_frame_header h;
    float *params = NULL;
    void *full = NULL;
    size_t full_len = 0;
    sl_support *support = NULL;
    int64_t held;
    int src, rc = sl_frame_peek_header(frame, len, &h);
    if (rc != SL_OK)
        return rc;
    if (a->model == NULL) {
        sl_model *m = NULL;
        rc = sl__agent_registry_model(h.layout_hash, &m);
        if (rc == SL_OK)
            rc = sl__agent_set_model(a, m);
        if (rc != SL_OK)
            return rc == SL_ENOENT ? SL_ELAYOUT : rc;
    }
    if (h.layout_hash != sl_layout_hash(a->layout)) {
        sl_log(SL_LOG_ERROR, "agent",
               "the task's model (layout %016" PRIx64 ") is not model %s (layout %016" PRIx64 ")",
               h.layout_hash, sl_model_name(a->model), sl_layout_hash(a->layout));
        return SL_ELAYOUT;
    }
    if (!(h.kind == SL_FRAME_MODEL && h.base_version == (uint64_t)version) &&
        !(h.kind == SL_FRAME_MODEL_DELTA && a->version > 0 &&
          h.base_version == (uint64_t)a->version))
        return SL_ECORRUPT;
    params = malloc(a->n * sizeof *params);
    if (params == NULL)
        return SL_ENOMEM;
    rc = sl_frame_decode_model(a->layout, frame, len,
                               h.kind == SL_FRAME_MODEL_DELTA ? a->global : NULL,
                               h.kind == SL_FRAME_MODEL_DELTA ? (uint64_t)a->version : 0, params);
    /* what the delta changed: the next update's positions are coded against it */
    if (rc == SL_OK && h.kind == SL_FRAME_MODEL_DELTA &&
        sl_support_diff(a->layout, a->global, params, &support) != SL_OK)
        support = NULL; /* out of memory: the update goes unsplit */
    /* the residual first: a kill between the two loses the move (the residual
     * is an estimate), never counts it twice */
    if (rc == SL_OK)
        rc = sl__agent_absorb(a, params, version);
    if (rc == SL_OK && h.kind == SL_FRAME_MODEL_DELTA)
        rc = sl_frame_encode_model(a->layout, params, (uint64_t)version, 1, &full, &full_len);
    if (rc == SL_OK) {
        sl__agent_drop_support(a); /* the old version's, before the model it vouches for goes */
        rc = full ? sl__agent_save_model(a, full, full_len, version)
                  : sl__agent_save_model(a, frame, len, version);
    }
    free(full);
    if (rc != SL_OK) {
        sl_support_free(support);
        free(params);
        return rc;
    }
    held = a->version;
    free(a->global);
    a->global = params;
    a->version = version;
    a->stats.model_version = version;
    /* after the model: a kill between the two leaves no support, and the update unsplit */
    if (support != NULL && (src = sl__agent_save_support(a, support, held)) != SL_OK)
        sl_log(SL_LOG_WARN, "agent", "keeping the support of model %" PRId64 ": %s", version,
               sl_strerror(src));
    return SL_OK;
}

/* "bytes <first>-<last>/<total>" into its numbers. */
static int parse_content_range(const char *h, uint64_t *first, uint64_t *last, uint64_t *total)
{
    unsigned long long f, l, t;
    char tail;
    if (sscanf(h, "bytes %llu-%llu/%llu%c", &f, &l, &t, &tail) != 3 || f > l || l >= t)
        return SL_ESYNTAX;
    *first = f;
    *last = l;
    *total = t;
    return SL_OK;
}

/* 1 when @etag is "<64 hex>" (quoted) and names the SHA-256 of @data. */
static int etag_verifies(const char *etag, const void *data, size_t len)
{
    uint8_t want[32], got[32];
    char hex[65];
    if (strlen(etag) != 66 || etag[0] != '"' || etag[65] != '"')
        return 0;
    memcpy(hex, etag + 1, 64);
    hex[64] = '\0';
    if (sl_unhex(hex, want, 32) != SL_OK)
        return 0;
    sl_sha256(data, len, got);
    return memcmp(want, got, 32) == 0;
}

typedef struct download {
    uint8_t *data;
    size_t len, cap;
    size_t kept;    /* bytes an earlier attempt left on disk, taken at the start */
    uint64_t total; /* 0: not known yet */
    char etag[SL_CLIENT_HEADER_MAX];
} download;

static int download_append(download *d, const void *bytes, size_t n)
{
    if (n > SL__AGENT_MAX_MODEL - d->len)
        return SL_ETOOBIG;
    if (d->len + n > d->cap) {
        size_t cap = d->cap ? d->cap : 65536;
        uint8_t *grown;
        while (cap < d->len + n)
            cap *= 2;
        grown = realloc(d->data, cap);
        if (grown == NULL)
            return SL_ENOMEM;
        d->data = grown;
        d->cap = cap;
    }
    memcpy(d->data + d->len, bytes, n);
    d->len += n;
    return SL_OK;
}

/*
 * GET @path into @d in ranges of download_chunk_bytes, each one appended to
 * model.partial as it arrives, so that a killed agent continues from what
 * its disk holds ("Range: bytes=<have>-..." with "If-Range: <ETag>"). A
 * range the link cuts (after the client's retries) is asked again at half
 * the size, down to 4 KiB, so a link that breaks every few kilobytes still
 * moves the model; ranges that come whole double back to the size set. A
 * range of another ETag (the representation changed), a 200 where a range
 * was asked for, or a 416 starts over; the whole body is checked against
 * the ETag's SHA-256 at the end (a mismatch drops the partial: SL_ECHECKSUM).
 * SL_OK with *@status 200 when @d holds the verified body; SL_OK with
 * another status and the answer in @err_answer (caller frees); else a
 * transport error (model.partial keeps the bytes received).
 */
static int download_ranged(sl_agent *a, const char *path, download *d, long *status,
                           sl_client_response *err_answer)
{
    size_t chunk = a->o.download_chunk_bytes, range;
    unsigned restarts = 0, shrinks = 0;
    int resuming = 0;
    void *kept = NULL;
    size_t kept_len = 0;
    int rc;
    if (chunk < 1024)
        chunk = 1024;
    if (chunk > ((size_t)4 << 20))
        chunk = (size_t)4 << 20; /* below the client's response limit */
    range = a->download_range > 0 && a->download_range < chunk ? a->download_range : chunk;
    *status = 0;
    if (sl__agent_partial_load(a, path, d->etag, sizeof d->etag, &kept, &kept_len) == SL_OK &&
        kept_len > 0 && d->etag[0] == '"') {
        sl_log(SL_LOG_INFO, "agent", "resuming the download of %s at byte %zu", path, kept_len);
        d->data = kept;
        d->len = d->cap = d->kept = kept_len;
        a->stats.download_resumes++;
        resuming = 1;
    } else {
        free(kept);
        d->etag[0] = '\0';
    }
    for (;;) {
        char range_h[96], if_range[SL_CLIENT_HEADER_MAX + 16];
        const char *headers[3] = {range_h, NULL, NULL};
        sl_client_response r;
        uint64_t first = 0, last = 0, total = 0;
        snprintf(range_h, sizeof range_h, "Range: bytes=%zu-%zu", d->len, d->len + range - 1);
        if (d->len > 0 && resuming) {
            /* continuing bytes of an earlier attempt: only if the body is
             * the same (the ETag of every range is compared anyway) */
            resuming = 0;
            snprintf(if_range, sizeof if_range, "If-Range: %s", d->etag);
            headers[1] = if_range;
        }
        rc = sl_client_request(a->client, "GET", path, NULL, 0, NULL, headers, &r);
        if (rc == SL_EIO || rc == SL_ETIMEDOUT) {
            /* a range the link could not carry whole (the client retried
             * it already): ask for half as much, continuing from what is
             * kept (If-Range), until halving does not help any more */
            resuming = d->len > 0;
            if (range > MIN_RANGE && shrinks++ < MAX_SHRINKS && !sl__agent_stopping(a)) {
                range = range / 2 < MIN_RANGE ? MIN_RANGE : range / 2;
                a->download_range = range;
                sl_log(SL_LOG_INFO, "agent", "download %s: %s at byte %zu; ranges of %zu bytes",
                       path, sl_strerror(rc), d->len, range);
                continue;
            }
        }
        if (rc != SL_OK)
            return rc;
        if (r.status == 206 &&
            parse_content_range(r.content_range, &first, &last, &total) == SL_OK &&
            first == d->len && last - first + 1 == r.body_len && total <= SL__AGENT_MAX_MODEL &&
            r.etag[0] == '"' && (d->len == 0 || strcmp(r.etag, d->etag) == 0)) {
            int fresh = d->len == 0;
            if (fresh)
                snprintf(d->etag, sizeof d->etag, "%s", r.etag);
            d->total = total;
            rc = download_append(d, r.body, r.body_len);
            if (rc == SL_OK) {
                int prc = fresh ? sl__agent_partial_start(a, path, d->etag, d->data, d->len)
                                : sl__agent_partial_append(a, r.body, r.body_len);
                if (prc != SL_OK)
                    sl_log(SL_LOG_WARN, "agent", "model.partial: %s", sl_strerror(prc));
            }
            sl_client_response_free(&r);
            if (rc != SL_OK)
                return rc;
            /* a range came whole: grow back towards the configured size */
            shrinks = 0;
            range = range * 2 > chunk ? chunk : range * 2;
            a->download_range = range;
            {
                sl_agent_event ev = {
                    .kind = SL_AGENT_EV_DOWNLOAD, .bytes = d->len, .total = d->total};
                sl__agent_emit(a, &ev);
            }
            if (d->len < d->total) {
                if (sl__agent_stopping(a))
                    return SL_ETIMEDOUT;
                continue;
            }
            break;
        }
        if (r.status == 200 && r.etag[0] == '"') {
            /* the server sent the whole representation (If-Range did not
             * match: it changed): take it */
            free(d->data);
            d->data = r.body;
            d->len = d->cap = r.body_len;
            d->total = r.body_len;
            snprintf(d->etag, sizeof d->etag, "%s", r.etag);
            r.body = NULL;
            sl_client_response_free(&r);
            {
                sl_agent_event ev = {
                    .kind = SL_AGENT_EV_DOWNLOAD, .bytes = d->len, .total = d->total};
                sl__agent_emit(a, &ev);
            }
            break;
        }
        if ((r.status == 206 || r.status == 416) && d->len > 0 && restarts++ < 2) {
            /* what the disk holds does not continue this body: anew */
            sl_log(SL_LOG_INFO, "agent", "download %s: the %zu bytes kept are of another body (%s)",
                   path, d->len, r.status == 416 ? "416" : r.etag);
            sl_client_response_free(&r);
            sl__agent_drop_partial(a);
            d->len = 0;
            d->etag[0] = '\0';
            continue;
        }
        if (r.status == 206 || r.status == 200) {
            sl_log(SL_LOG_WARN, "agent",
                   "download %s: a %ld that does not fit the range asked (at byte %zu, "
                   "Content-Range \"%s\", %zu bytes, ETag %s)",
                   path, r.status, d->len, r.content_range, r.body_len,
                   r.etag[0] != '\0' ? r.etag : "none");
            sl_client_response_free(&r);
            sl__agent_drop_partial(a);
            return SL_ESYNTAX;
        }
        *status = r.status;
        *err_answer = r;
        return SL_OK;
    }
    sl__agent_drop_partial(a);
    if (!etag_verifies(d->etag, d->data, d->len)) {
        sl_log(SL_LOG_WARN, "agent", "download %s: %zu bytes do not match the ETag's SHA-256", path,
               d->len);
        return SL_ECHECKSUM;
    }
    *status = 200;
    return SL_OK;
}

/* The download speed, for the pace a device tells at check-in (time budgets): @bytes received
 * in @ns, when enough to measure bandwidth rather than latency. */
static void measure_down(sl__agent_counters *c, uint64_t bytes, int64_t ns)
{
    double bps;
    if (bytes < DOWN_MIN_MEASURED || ns <= 0)
        return;
    bps = (double)bytes / ((double)ns * 1e-9);
    c->down_bw_ewma = c->down_bw_ewma > 0 ? 0.3 * bps + 0.7 * c->down_bw_ewma : bps;
}

/* Download model @version (a delta from the held one where there is one) and take it. */
static int fetch_one(sl_agent *a, int64_t version, uint64_t *downloaded)
{
    char path[256], why[160];
    sl_client_response r;
    int use_base = a->version > 0 && a->version < version && a->global != NULL;
    long status = 0;
    int rc;
    *downloaded = 0;
again:
    if (use_base)
        snprintf(path, sizeof path,
                 "/v1/models/%" PRId64 "?task=%" PRId64 "&base=%" PRId64 "&sparse=1", version,
                 a->o.task_id, a->version);
    else
        snprintf(path, sizeof path, "/v1/models/%" PRId64 "?task=%" PRId64, version, a->o.task_id);
    {
        download d;
        memset(&d, 0, sizeof d);
        memset(&r, 0, sizeof r);
        /* a full frame is about 4 bytes per parameter; a delta like the last one */
        int64_t t0 = sl_clock_monotonic_ns(NULL);
        sl__agent_maybe_cut(a, use_base && a->last_delta_bytes ? a->last_delta_bytes
                                                               : (uint64_t)a->n * 4);
        rc = download_ranged(a, path, &d, &status, &r);
        sl__agent_disarm(a);
        if (rc == SL_OK && status == 200)
            measure_down(&a->counters, d.len - d.kept, sl_clock_monotonic_ns(NULL) - t0);
        if (rc != SL_OK) {
            sl_log(SL_LOG_WARN, "agent", "download %s: %s (%zu bytes kept)", path, sl_strerror(rc),
                   rc == SL_ECHECKSUM ? (size_t)0 : d.len);
            free(d.data);
            return rc;
        }
        if (status != 200) {
            free(d.data);
            /* a refusal makes the bytes kept useless; a 5xx or 429 does not */
            if (status < 500 && status != 429 && status != 408)
                sl__agent_drop_partial(a);
            if (status == 404 && use_base) {
                /* the base version was retired: take the full model */
                sl_client_response_free(&r);
                use_base = 0;
                goto again;
            }
            sl_log(SL_LOG_WARN, "agent", "download %s: %s", path,
                   sl__agent_failure(SL_OK, &r, why, sizeof why));
            rc = status == 404 ? SL_ENOENT : SL_EBUSY;
            sl_client_response_free(&r);
            return rc;
        }
        rc = take_model(a, d.data, d.len, version);
        if (rc == SL_OK && use_base)
            a->last_delta_bytes = d.len;
        if (rc == SL_OK) {
            *downloaded = d.len;
            a->stats.bytes_down += d.len;
        } else {
            sl_log(SL_LOG_ERROR, "agent", "model %" PRId64 " from %s: %s", version, path,
                   sl_strerror(rc));
        }
        free(d.data);
    }
    return rc;
}

int sl__agent_fetch_model(sl_agent *a, int64_t version, uint64_t *downloaded)
{
    uint64_t first = 0;
    int rc;
    *downloaded = 0;
    if (a->version == version && a->global != NULL)
        return SL_OK;
    /* TRACKING: an acknowledged update went into the version after the one it
     * was trained from (the held one; an update carried past an abandoned
     * round goes into the next round on the same version, so still that
     * one). The residual takes that version's own move: a device that missed
     * versions takes it first, then the rest as a second delta. The average
     * move over the versions missed stood in for it before; it is not the
     * same: the device's own update is in its round's move and in none of
     * the others. */
    if (a->absorb && a->global != NULL && a->version > 0 && version > a->version + 1) {
        rc = fetch_one(a, a->version + 1, &first);
        if (rc == SL_ENOENT)
            sl_log(SL_LOG_WARN, "agent",
                   "model %" PRId64 " is gone: the residual takes the average move of the %" PRId64
                   " versions to %" PRId64,
                   a->version + 1, version - a->version, version);
        else if (rc != SL_OK)
            return rc;
    }
    rc = fetch_one(a, version, downloaded);
    if (rc == SL_OK)
        *downloaded += first;
    return rc;
}

/* ---- metrics --------------------------------------------------------------------------- */

int sl__agent_post_metrics(sl_agent *a, int64_t version, double loss, double accuracy,
                           size_t samples)
{
    sl_metrics m = {samples, loss, accuracy, NAN, NAN, 0};
    return sl__agent_post_eval(a, version, &m);
}

/* @v as a JSON number, or null when NaN. */
static void json_metric(char *out, size_t cap, double v)
{
    if (isnan(v))
        snprintf(out, cap, "null");
    else
        snprintf(out, cap, "%.9g", v);
}

int sl__agent_post_eval(sl_agent *a, int64_t version, const sl_metrics *m)
{
    char path[96], body[320], acc[32], mae[32], rmse[32];
    sl_client_response r;
    int rc;
    snprintf(path, sizeof path, "/v1/models/%" PRId64 "/metrics", version);
    json_metric(acc, sizeof acc, m->accuracy);
    json_metric(mae, sizeof mae, m->mae);
    json_metric(rmse, sizeof rmse, m->rmse);
    snprintf(body, sizeof body,
             "{\"task_id\":%" PRId64 ",\"loss\":%.9g,\"accuracy\":%s,\"mae\":%s,\"rmse\":%s,"
             "\"samples\":%zu}",
             a->o.task_id, m->loss, acc, mae, rmse, m->n);
    rc = sl_client_request(a->client, "POST", path, body, strlen(body), "application/json", NULL,
                           &r);
    if (rc != SL_OK)
        return rc;
    rc = r.status == 204 || r.status == 200 ? SL_OK : answer_status("metrics", &r);
    sl_client_response_free(&r);
    return rc;
}
