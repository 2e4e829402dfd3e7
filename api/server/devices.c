/*
 * devices.c - enrolment, check-in, a device's record, and metrics reports.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/ecp.h>

#include "server_int.h"

/* An uncompressed P-256 point that lies on the curve: anything else could
 * never verify a signature, so it is refused at the door. */
static int valid_public_key(const uint8_t *key, size_t len)
{
    mbedtls_ecp_group grp;
    mbedtls_ecp_point pt;
    int ok;
    if (len != SL_PUBKEY_LEN || key[0] != 0x04)
        return 0;
    mbedtls_ecp_group_init(&grp);
    mbedtls_ecp_point_init(&pt);
    ok = mbedtls_ecp_group_load(&grp, MBEDTLS_ECP_DP_SECP256R1) == 0 &&
         mbedtls_ecp_point_read_binary(&grp, &pt, key, len) == 0 &&
         mbedtls_ecp_check_pubkey(&grp, &pt) == 0;
    mbedtls_ecp_point_free(&pt);
    mbedtls_ecp_group_free(&grp);
    return ok;
}

void sl__h_enrol(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    cJSON *doc = sl__json_body(rq, rs), *out;
    const cJSON *token, *key, *caps;
    uint8_t pub[SL_PUBKEY_LEN];
    char *caps_text = NULL, detail[64];
    int64_t id;
    int rc;
    (void)p;
    if (doc == NULL)
        return;
    token = cJSON_GetObjectItemCaseSensitive(doc, "enrolment_token");
    key = cJSON_GetObjectItemCaseSensitive(doc, "public_key");
    caps = cJSON_GetObjectItemCaseSensitive(doc, "capabilities");
    if (!cJSON_IsString(token) || !cJSON_IsString(key)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "enrolment_token and public_key (strings) are required");
        goto done;
    }
    if (sl__token_check(s, 0, token->valuestring, strlen(token->valuestring)) != 1) {
        sl__metrics_count(&s->metrics, &s->metrics.auth_failures, 1);
        sl__problem(rs, rq, 401, "unauthorized", NULL, "the enrolment token is not valid");
        goto done;
    }
    if (strlen(key->valuestring) != 2 * SL_PUBKEY_LEN ||
        sl_unhex(key->valuestring, pub, SL_PUBKEY_LEN) != SL_OK ||
        !valid_public_key(pub, SL_PUBKEY_LEN)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "public_key must be the hex of an uncompressed P-256 point (65 bytes)");
        goto done;
    }
    if (caps != NULL && !cJSON_IsNull(caps)) {
        if (!cJSON_IsObject(caps) && !cJSON_IsArray(caps) && !cJSON_IsString(caps)) {
            sl__problem(rs, rq, 400, "bad-request", NULL,
                        "capabilities must be an object, an array or a string");
            goto done;
        }
        caps_text = cJSON_PrintUnformatted(caps);
        if (caps_text == NULL) {
            sl__problem_status(rs, rq, SL_ENOMEM, "enrolment");
            goto done;
        }
        if (strlen(caps_text) >= SL_STORE_MAX_TEXT) {
            sl__problem(rs, rq, 400, "bad-request", NULL, "capabilities exceed %d bytes",
                        SL_STORE_MAX_TEXT - 1);
            goto done;
        }
    }
    rc = sl_store_enrol_device(s->store, pub, SL_PUBKEY_LEN, caps_text ? caps_text : "{}", &id);
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "storing the device");
        goto done;
    }
    snprintf(detail, sizeof detail, "{\"device_id\":%lld}", (long long)id);
    rc = sl_store_audit(s->store, "enrolment", "enrol_device", detail);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, "http", "audit of enrolment %lld failed: %s", (long long)id,
               sl_strerror(rc));
    out = cJSON_CreateObject();
    if (out != NULL)
        cJSON_AddNumberToObject(out, "device_id", (double)id);
    sl__resp_json(rs, 201, out);
    sl__resp_header(rs, "Location", "/v1/devices/%lld", (long long)id);
done:
    free(caps_text);
    cJSON_Delete(doc);
}

/* Capabilities as one comma-separated list (the engine's form). */
static int caps_list(const cJSON *caps, char *out, size_t cap)
{
    size_t o = 0;
    const cJSON *it;
    out[0] = '\0';
    if (caps == NULL || cJSON_IsNull(caps))
        return SL_OK;
    if (cJSON_IsString(caps)) {
        size_t n = strlen(caps->valuestring);
        if (n >= cap)
            return SL_ETOOBIG;
        memcpy(out, caps->valuestring, n + 1);
        return SL_OK;
    }
    if (!cJSON_IsArray(caps))
        return SL_EINVAL;
    cJSON_ArrayForEach(it, caps)
    {
        size_t n;
        if (!cJSON_IsString(it) || strchr(it->valuestring, ',') != NULL)
            return SL_EINVAL;
        n = strlen(it->valuestring);
        if (o + n + 2 > cap)
            return SL_ETOOBIG;
        if (o > 0)
            out[o++] = ',';
        memcpy(out + o, it->valuestring, n);
        o += n;
        out[o] = '\0';
    }
    return SL_OK;
}

/* The local optimiser of the check-in's "training" object (api/openapi.yaml,
 * CheckinResponse.training): every key, so an agent need not know the
 * defaults; betas and eps only for the optimisers that use them. */
static int add_local_optimizer(cJSON *train, const sl_task_config *cfg)
{
    cJSON *frozen = NULL, *betas = NULL;
    int ok = cJSON_AddStringToObject(train, "optimizer",
                                     sl_local_optimizer_name(cfg->local_optimizer)) != NULL &&
             cJSON_AddBoolToObject(train, "nesterov", cfg->local_nesterov) != NULL &&
             cJSON_AddNumberToObject(train, "weight_decay", cfg->local_weight_decay) != NULL &&
             cJSON_AddNumberToObject(train, "clip_norm", cfg->local_clip_norm) != NULL &&
             cJSON_AddBoolToObject(train, "local_norm", cfg->local_norm) != NULL &&
             (frozen = cJSON_AddArrayToObject(train, "frozen")) != NULL;
    /* the names are joined by commas, which no layout name holds (round.h) */
    for (const char *p = cfg->frozen; ok && *p != '\0';) {
        size_t len = strcspn(p, ",");
        char name[SL_TASK_FROZEN_MAX];
        memcpy(name, p, len);
        name[len] = '\0';
        ok = cJSON_AddItemToArray(frozen, cJSON_CreateString(name));
        p += len + (p[len] == ',');
    }
    if (ok && cfg->local_optimizer != SL_LOCAL_SGD) {
        double b[2] = {cfg->local_betas[0], cfg->local_betas[1]};
        betas = cJSON_CreateDoubleArray(b, 2);
        ok = betas != NULL && cJSON_AddItemToObject(train, "betas", betas);
        if (!ok)
            cJSON_Delete(betas);
        ok = ok && cJSON_AddNumberToObject(train, "eps", cfg->local_eps) != NULL;
    }
    return ok ? SL_OK : SL_ENOMEM;
}

/* A pace value: 0 when absent; 1 (an error) when not a finite number >= 0. */
static int pace_of(const cJSON *pace, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pace, key);
    if (v == NULL)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return 1;
    *out = v->valuedouble;
    return 0;
}

void sl__h_checkin(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    cJSON *doc = sl__json_body(rq, rs), *out, *comp, *train;
    sl_checkin_info info;
    sl_checkin_result res;
    sl_task_status *st = NULL;
    int64_t task, samples = 0;
    int rc;
    (void)p;
    if (doc == NULL)
        return;
    memset(&info, 0, sizeof info);
    if (sl__json_i64(doc, "task_id", 1, INT64_MAX, &task) != SL_OK) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "task_id (a positive integer) is required");
        goto done;
    }
    rc = sl__json_i64(doc, "num_samples", 0, UINT32_MAX, &samples);
    if (rc == SL_EINVAL || caps_list(cJSON_GetObjectItemCaseSensitive(doc, "capabilities"),
                                     info.capabilities, sizeof info.capabilities) != SL_OK) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "num_samples must be an integer in [0, 2^32) and capabilities a string or "
                    "an array of names (at most %zu bytes)",
                    sizeof info.capabilities - 1);
        goto done;
    }
    info.num_samples = (uint32_t)samples;
    {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(doc, "refusal");
        if (why != NULL &&
            (!cJSON_IsString(why) || strlen(why->valuestring) >= sizeof info.refusal)) {
            sl__problem(rs, rq, 400, "bad-request", NULL,
                        "refusal must be a string of at most %zu bytes", sizeof info.refusal - 1);
            goto done;
        }
        if (why != NULL)
            snprintf(info.refusal, sizeof info.refusal, "%s", why->valuestring);
    }
    { /* its pace, as it measured it (time budgets): optional, each a number >= 0 */
        const cJSON *pace = cJSON_GetObjectItemCaseSensitive(doc, "pace");
        if (pace != NULL && (!cJSON_IsObject(pace) || pace_of(pace, "step_ms", &info.step_ms) ||
                             pace_of(pace, "upload_bytes_per_s", &info.up_bps) ||
                             pace_of(pace, "download_bytes_per_s", &info.down_bps))) {
            sl__problem(rs, rq, 400, "bad-request", NULL,
                        "pace must be an object of step_ms, upload_bytes_per_s and "
                        "download_bytes_per_s, each a finite number >= 0 (or absent)");
            goto done;
        }
    }
    st = malloc(sizeof *st);
    if (st == NULL) {
        sl__problem_status(rs, rq, SL_ENOMEM, "check-in");
        goto done;
    }
    rc = sl_engine_checkin(s->engine, task, rq->device_id, &info, &res);
    if (rc == SL_OK)
        rc = sl_engine_task_status(s->engine, task, st);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no task %lld", (long long)task);
        goto done;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "check-in");
        goto done;
    }
    rc = sl_store_touch_device(s->store, rq->device_id);
    if (rc != SL_OK)
        sl_log(SL_LOG_DEBUG, "http", "last_seen of device %lld not updated: %s",
               (long long)rq->device_id, sl_strerror(rc));
    if (res.refusal_changed) {
        /* a device that cannot train the model (or can again): operators see why */
        rc = sl_store_set_refusal(s->store, task, rq->device_id, info.refusal);
        if (rc != SL_OK) {
            sl__problem_status(rs, rq, rc, "recording the refusal");
            goto done;
        }
        if (info.refusal[0] != '\0')
            sl_log(SL_LOG_WARN, "http", "device %lld refuses the model of task %lld: %s",
                   (long long)rq->device_id, (long long)task, info.refusal);
    }
    out = cJSON_CreateObject();
    comp = sl__compression_json(&st->cfg);
    train = cJSON_CreateObject();
    if (out == NULL || comp == NULL || train == NULL) {
        cJSON_Delete(out);
        cJSON_Delete(comp);
        cJSON_Delete(train);
        sl__problem_status(rs, rq, SL_ENOMEM, "check-in");
        goto done;
    }
    cJSON_AddBoolToObject(out, "selected", res.selected);
    cJSON_AddNumberToObject(out, "task_id", (double)res.task_id);
    cJSON_AddNumberToObject(out, "round_id", (double)res.round_id);
    cJSON_AddNumberToObject(out, "round_no", (double)res.round_no);
    cJSON_AddNumberToObject(out, "model_version", (double)res.model_version);
    sl__json_add_i64(out, "report_deadline_ms", res.report_deadline_ms);
    sl__json_add_i64(out, "retry_after_ms", res.retry_after_ms);
    cJSON_AddNumberToObject(out, "participation", (double)res.participation);
    if (res.model_spec_sha256[0] != '\0')
        cJSON_AddStringToObject(out, "model_spec_sha256", res.model_spec_sha256);
    if (res.data_contract_sha256[0] != '\0')
        cJSON_AddStringToObject(out, "data_contract_sha256", res.data_contract_sha256);
    cJSON_AddItemToObject(out, "compression", comp);
    cJSON_AddNumberToObject(train, "epochs", st->cfg.local_epochs);
    cJSON_AddNumberToObject(train, "batch", st->cfg.batch);
    cJSON_AddNumberToObject(train, "lr", st->cfg.local_lr);
    cJSON_AddNumberToObject(train, "momentum", st->cfg.local_momentum);
    cJSON_AddNumberToObject(train, "prox_mu", st->cfg.prox_mu);
    if (res.max_steps > 0) /* time budgets: the steps that fit before the deadline */
        cJSON_AddNumberToObject(train, "max_steps", res.max_steps);
    if (st->cfg.fednova) /* the device sends its update divided by its effective steps */
        cJSON_AddBoolToObject(train, "fednova", 1);
    if (add_local_optimizer(train, &st->cfg) != SL_OK) {
        cJSON_Delete(out);
        cJSON_Delete(train);
        sl__problem_status(rs, rq, SL_ENOMEM, "check-in");
        goto done;
    }
    cJSON_AddItemToObject(out, "training", train);
    sl__resp_json(rs, 200, out);
done:
    free(st);
    cJSON_Delete(doc);
}

static int add_refusal(void *ctx, int64_t task_id, int64_t device_id, const char *reason,
                       int64_t at_ms)
{
    cJSON *one = cJSON_CreateObject();
    (void)device_id;
    if (one == NULL || !cJSON_AddItemToArray(ctx, one))
        return SL_ENOMEM;
    if (cJSON_AddNumberToObject(one, "task_id", (double)task_id) == NULL ||
        cJSON_AddStringToObject(one, "reason", reason) == NULL ||
        sl__json_add_i64(one, "at_ms", at_ms) == NULL)
        return SL_ENOMEM;
    return 0;
}

void sl__h_device(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl_device_record *rec = malloc(sizeof *rec);
    char hex[2 * SL_STORE_MAX_KEY + 1];
    cJSON *out = NULL, *caps;
    int64_t id;
    int rc;
    if (rec == NULL) {
        sl__problem_status(rs, rq, SL_ENOMEM, "reading the device");
        return;
    }
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &id) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no device %s", p->seg[0]);
        goto done;
    }
    rc = sl_store_get_device(s->store, id, rec);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no device %lld", (long long)id);
        goto done;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the device");
        goto done;
    }
    sl_hex(rec->public_key, rec->key_len, hex);
    out = cJSON_CreateObject();
    caps = cJSON_Parse(rec->capabilities);
    if (caps == NULL)
        caps = cJSON_CreateString(rec->capabilities);
    if (out == NULL || caps == NULL) {
        cJSON_Delete(caps);
        cJSON_Delete(out);
        sl__problem_status(rs, rq, SL_ENOMEM, "reading the device");
        goto done;
    }
    cJSON_AddNumberToObject(out, "device_id", (double)rec->id);
    cJSON_AddStringToObject(out, "public_key", hex);
    sl__json_add_i64(out, "enrolled_at_ms", rec->enrolled_at_ms);
    sl__json_add_i64(out, "last_seen_ms", rec->last_seen_ms);
    cJSON_AddItemToObject(out, "capabilities", caps);
    {
        /* the tasks whose model this device refuses, and why (its agent's limits) */
        cJSON *refusals = cJSON_AddArrayToObject(out, "refusals");
        rc = refusals ? sl_store_list_refusals(s->store, 0, id, add_refusal, refusals) : SL_ENOMEM;
        if (rc != SL_OK) {
            cJSON_Delete(out);
            out = NULL;
            sl__problem_status(rs, rq, rc, "reading the device's refusals");
            goto done;
        }
    }
    sl__resp_json(rs, 200, out);
done:
    free(rec);
}

/* An optional metric @key of @doc into *@out (NaN when absent): a finite number in [0, hi]. */
static int metric(const cJSON *doc, const char *key, double hi, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    *out = NAN;
    if (v == NULL || cJSON_IsNull(v))
        return SL_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > hi)
        return SL_EINVAL;
    *out = v->valuedouble;
    return SL_OK;
}

void sl__h_report_metrics(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    cJSON *doc;
    sl_store_eval ev = {0, NAN, NAN, NAN, NAN};
    int64_t version, task, samples;
    int64_t reporter = 0;
    int rc;
    /* an operator (the evaluator) reports with the admin token: its metrics
     * become the version's; a device's go to its round's statistics */
    if (!sl__has_admin(s, rq)) {
        if (!sl__auth_device(s, rq, rs))
            return;
        reporter = rq->device_id;
    }
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &version) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no model version %s", p->seg[0]);
        return;
    }
    doc = sl__json_body(rq, rs);
    if (doc == NULL)
        return;
    if (sl__json_i64(doc, "task_id", 1, INT64_MAX, &task) != SL_OK ||
        sl__json_i64(doc, "samples", 1, UINT32_MAX, &samples) != SL_OK ||
        metric(doc, "loss", HUGE_VAL, &ev.loss) != SL_OK || isnan(ev.loss) ||
        metric(doc, "accuracy", 1, &ev.accuracy) != SL_OK ||
        metric(doc, "mae", HUGE_VAL, &ev.mae) != SL_OK ||
        metric(doc, "rmse", HUGE_VAL, &ev.rmse) != SL_OK ||
        (isnan(ev.accuracy) && isnan(ev.mae) && isnan(ev.rmse))) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "task_id, samples (>= 1), loss (finite, >= 0) and accuracy (in [0, 1]) or mae "
                    "and rmse (finite, >= 0) are required");
        cJSON_Delete(doc);
        return;
    }
    ev.samples = (uint32_t)samples;
    rc = sl_engine_report_eval(s->engine, task, version, reporter, &ev);
    cJSON_Delete(doc);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no task %lld or version %lld", (long long)task,
                    (long long)version);
        return;
    }
    if (rc == SL_ESTATE) {
        sl__problem(rs, rq, 409, "conflict", NULL,
                    "version %lld is not the base model of an open round of task %lld this "
                    "device takes part in",
                    (long long)version, (long long)task);
        return;
    }
    if (rc == SL_ECONFLICT) {
        sl__problem(rs, rq, 409, "conflict", NULL,
                    "this device reported other metrics for this round");
        return;
    }
    if (rc == SL_EINVAL) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "the metrics were refused");
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "storing the metrics");
        return;
    }
    sl__resp_bytes(rs, 204, "", NULL, 0);
}

/* ---- the device list (operators) ------------------------------------------ */

#define DEVICES_MAX_LIMIT 1000

typedef struct devices_ctx {
    sl_server *s;
    cJSON *array;
    uint32_t want; /* the page's size: the row past it only says there is more */
    uint32_t n;
    int64_t last; /* the page's last id */
    int more;
    int failed;
} devices_ctx;

static int add_device(void *ctx, const sl_device_summary *d)
{
    devices_ctx *c = ctx;
    cJSON *o;
    if (c->n == c->want) {
        c->more = 1;
        return 1;
    }
    c->n++;
    c->last = d->id;
    o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddItemToArray(c->array, o)) {
        cJSON_Delete(o);
        c->failed = 1;
        return 1;
    }
    cJSON_AddNumberToObject(o, "device_id", (double)d->id);
    sl__json_add_i64(o, "enrolled_at_ms", d->enrolled_at_ms);
    sl__json_add_i64(o, "last_seen_ms", d->last_seen_ms);
    cJSON_AddStringToObject(o, "state", d->state);
    cJSON_AddNumberToObject(o, "participations", d->participations);
    cJSON_AddNumberToObject(o, "reported", d->reported);
    cJSON_AddNumberToObject(o, "rejected", d->rejected);
    cJSON_AddNumberToObject(o, "late", d->late);
    {
        /* what the device refuses, and why: its model limits, or no usable data */
        cJSON *refusals = cJSON_AddArrayToObject(o, "refusals");
        if (refusals == NULL ||
            sl_store_list_refusals(c->s->store, 0, d->id, add_refusal, refusals) != SL_OK) {
            c->failed = 1;
            return 1;
        }
    }
    return 0;
}

/* GET /v1/devices: a page by offset (with the fleet's total), or a keyset
 * page after a device id (without it: counting a million devices costs more
 * than the page). Either says next_after when devices follow the page. */
void sl__h_devices(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    char text[32];
    int64_t offset = 0, limit = 100, after = 0;
    uint64_t total = 0;
    devices_ctx ctx = {s, NULL, 0, 0, 0, 0, 0};
    int keyset, rc;
    cJSON *out;
    (void)p;
    if ((rc = sl__query_get(rq->query, "offset", text, sizeof text)) != 0 &&
        (rc < 0 || sl__parse_i64(text, 0, UINT32_MAX, &offset) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "offset must be an integer >= 0");
        return;
    }
    if ((keyset = sl__query_get(rq->query, "after", text, sizeof text)) != 0 &&
        (keyset < 0 || sl__parse_i64(text, 0, INT64_MAX, &after) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "after must be a device id (an integer >= 0)");
        return;
    }
    if (keyset && offset != 0) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "after and offset cannot be combined: a page starts after a device id or at "
                    "an offset");
        return;
    }
    if ((rc = sl__query_get(rq->query, "limit", text, sizeof text)) != 0 &&
        (rc < 0 || sl__parse_i64(text, 1, DEVICES_MAX_LIMIT, &limit) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "limit must be in [1, %d]",
                    DEVICES_MAX_LIMIT);
        return;
    }
    rc = keyset ? SL_OK : sl_store_count_devices(s->store, &total);
    out = cJSON_CreateObject();
    ctx.array = cJSON_CreateArray();
    ctx.want = (uint32_t)limit;
    if (rc == SL_OK && (out == NULL || ctx.array == NULL))
        rc = SL_ENOMEM;
    if (rc == SL_OK) {
        /* one row past the page says whether another follows */
        rc = sl_store_list_devices(s->store, after, (uint32_t)offset, (uint32_t)limit + 1,
                                   add_device, &ctx);
        if (rc == 1 && ctx.more && !ctx.failed)
            rc = SL_OK;
    }
    if (rc != SL_OK || ctx.failed) {
        cJSON_Delete(out);
        cJSON_Delete(ctx.array);
        sl__problem_status(rs, rq, ctx.failed ? SL_ENOMEM : rc, "listing devices");
        return;
    }
    if (keyset)
        cJSON_AddNumberToObject(out, "after", (double)after);
    else
        cJSON_AddNumberToObject(out, "offset", (double)offset);
    cJSON_AddNumberToObject(out, "limit", (double)limit);
    if (!keyset)
        cJSON_AddNumberToObject(out, "total", (double)total);
    if (ctx.more)
        cJSON_AddNumberToObject(out, "next_after", (double)ctx.last);
    cJSON_AddItemToObject(out, "devices", ctx.array);
    sl__resp_json(rs, 200, out);
}
