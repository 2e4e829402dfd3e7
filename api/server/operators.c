/*
 * operators.c - the operator endpoints: status, rounds, a round's
 * statistics, creating tasks, aborting rounds (both audited) and the OpenAPI
 * document.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

#define ROUNDS_MAX_LIMIT 1000

void sl__h_status(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl_task_status *st = NULL;
    cJSON *out = cJSON_CreateObject(), *tasks, *server;
    size_t n = 0;
    int rc = sl__all_status(s, &st, &n);
    (void)p;
    if (rc != SL_OK || out == NULL) {
        cJSON_Delete(out);
        sl__problem_status(rs, rq, rc != SL_OK ? rc : SL_ENOMEM, "listing tasks");
        free(st);
        return;
    }
    tasks = cJSON_AddArrayToObject(out, "tasks");
    for (size_t i = 0; tasks != NULL && i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        if (t == NULL)
            break;
        cJSON_AddNumberToObject(t, "task_id", (double)st[i].task_id);
        cJSON_AddStringToObject(t, "name", st[i].cfg.name);
        cJSON_AddNumberToObject(t, "model_version", (double)st[i].model_version);
        cJSON_AddBoolToObject(t, "round_open", st[i].round_open);
        cJSON_AddBoolToObject(t, "finished", st[i].finished);
        cJSON_AddNumberToObject(t, "checked_in", st[i].checked_in);
        cJSON_AddStringToObject(t, "aggregator", sl_aggregator_name(st[i].cfg.aggregator));
        cJSON_AddNumberToObject(t, "server_lr", st[i].cfg.server_lr);
        cJSON_AddNumberToObject(t, "server_lr_ramp", st[i].cfg.server_lr_ramp);
        cJSON_AddNumberToObject(t, "server_lr_boost", st[i].cfg.server_lr_boost);
        cJSON_AddNumberToObject(t, "sender_mean", st[i].cfg.sender_mean);
        cJSON_AddNumberToObject(t, "sender_mean_rounds", st[i].cfg.sender_mean_rounds);
        cJSON_AddBoolToObject(t, "sender_mean_share", st[i].cfg.sender_mean_share);
        cJSON_AddNumberToObject(t, "sender_mean_epochs", st[i].cfg.sender_mean_epochs);
        cJSON_AddBoolToObject(t, "sender_mean_fresh", st[i].cfg.sender_mean_fresh);
        cJSON_AddNumberToObject(t, "sender_mean_partial", st[i].cfg.sender_mean_partial);
        cJSON_AddNumberToObject(t, "retain_last", st[i].cfg.retain_last);
        cJSON_AddNumberToObject(t, "retain_every", st[i].cfg.retain_every);
        cJSON_AddItemToObject(t, "compression", sl__compression_json(&st[i].cfg));
        if (st[i].round.id > 0)
            cJSON_AddItemToObject(t, "round", sl__round_json(&st[i].round));
        else
            cJSON_AddNullToObject(t, "round");
        {
            /* the newest federated evaluation: the devices' figures of a round's base model */
            sl_store_eval_sum ev;
            int64_t round_id = 0;
            cJSON *e;
            if (sl_store_last_eval(s->store, st[i].task_id, &round_id, &ev) == SL_OK &&
                round_id > 0 && sl__eval_json(t, "evaluation", &ev) == SL_OK &&
                (e = cJSON_GetObjectItemCaseSensitive(t, "evaluation")) != NULL)
                cJSON_AddNumberToObject(e, "round_id", (double)round_id);
            else if (!cJSON_HasObjectItem(t, "evaluation"))
                cJSON_AddNullToObject(t, "evaluation");
        }
        cJSON_AddItemToArray(tasks, t);
    }
    server = cJSON_AddObjectToObject(out, "server");
    if (server != NULL) {
        sl__json_add_i64(server, "time_ms", sl__wall_ms(s));
        sl__json_add_i64(server, "started_at_ms", s->started_ms);
    }
    free(st);
    sl__resp_json(rs, 200, out);
}

typedef struct rounds_ctx {
    cJSON *array;
    int failed;
} rounds_ctx;

static int add_round(void *ctx, const sl_round_record *r)
{
    rounds_ctx *c = ctx;
    cJSON *o = sl__round_json(r);
    if (o == NULL) {
        c->failed = 1;
        return 1;
    }
    cJSON_AddItemToArray(c->array, o);
    return 0;
}

void sl__h_rounds(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    char text[32];
    int64_t task, offset = 0, limit = 50;
    sl_task_record t;
    rounds_ctx ctx = {NULL, 0};
    cJSON *out;
    int rc;
    (void)p;
    if (sl__query_get(rq->query, "task", text, sizeof text) != 1 ||
        sl__parse_i64(text, 1, INT64_MAX, &task) != SL_OK) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "?task=<task id> is required");
        return;
    }
    if ((rc = sl__query_get(rq->query, "offset", text, sizeof text)) != 0 &&
        (rc < 0 || sl__parse_i64(text, 0, UINT32_MAX, &offset) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "offset must be an integer >= 0");
        return;
    }
    if ((rc = sl__query_get(rq->query, "limit", text, sizeof text)) != 0 &&
        (rc < 0 || sl__parse_i64(text, 1, ROUNDS_MAX_LIMIT, &limit) != SL_OK)) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "limit must be in [1, %d]", ROUNDS_MAX_LIMIT);
        return;
    }
    rc = sl_store_get_task(s->store, task, &t);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no task %lld", (long long)task);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the task");
        return;
    }
    sl_store_task_free(&t);
    out = cJSON_CreateObject();
    ctx.array = cJSON_AddArrayToObject(out, "rounds");
    if (ctx.array == NULL) {
        cJSON_Delete(out);
        sl__problem_status(rs, rq, SL_ENOMEM, "listing rounds");
        return;
    }
    cJSON_AddNumberToObject(out, "task_id", (double)task);
    cJSON_AddNumberToObject(out, "offset", (double)offset);
    cJSON_AddNumberToObject(out, "limit", (double)limit);
    rc = sl_store_list_rounds(s->store, task, (uint32_t)offset, (uint32_t)limit, add_round, &ctx);
    if (rc != SL_OK || ctx.failed) {
        cJSON_Delete(out);
        sl__problem_status(rs, rq, ctx.failed ? SL_ENOMEM : rc, "listing rounds");
        return;
    }
    sl__resp_json(rs, 200, out);
}

static void add_finite(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

int sl__eval_json(cJSON *parent, const char *key, const sl_store_eval_sum *ev)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    if (o == NULL)
        return SL_ENOMEM;
    cJSON_AddNumberToObject(o, "devices", ev->devices);
    cJSON_AddNumberToObject(o, "samples", (double)ev->samples);
    add_finite(o, "loss", ev->loss);
    add_finite(o, "accuracy", ev->accuracy);
    add_finite(o, "mae", ev->mae);
    add_finite(o, "rmse", ev->rmse);
    return SL_OK;
}

void sl__h_round(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl_round_stats st;
    int64_t id;
    cJSON *out, *rej;
    int rc;
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &id) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %s", p->seg[0]);
        return;
    }
    rc = sl_engine_round_stats(s->engine, id, &st);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %lld", (long long)id);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "reading the round");
        return;
    }
    out = sl__round_json(&st.round);
    rej = cJSON_CreateObject();
    if (out == NULL || rej == NULL) {
        cJSON_Delete(out);
        cJSON_Delete(rej);
        sl__problem_status(rs, rq, SL_ENOMEM, "reading the round");
        return;
    }
    cJSON_AddNumberToObject(out, "checked_in", st.checked_in);
    cJSON_AddNumberToObject(out, "downloaded", st.downloaded);
    cJSON_AddNumberToObject(out, "training", st.training);
    cJSON_AddNumberToObject(out, "downloading", st.downloading);
    for (int r = 1; r < SL_REJECT_REASONS; r++)
        cJSON_AddNumberToObject(rej, sl_reject_reason_name((sl_reject_reason)r),
                                st.rejected_by_reason[r]);
    cJSON_AddItemToObject(out, "rejected_by_reason", rej);
    add_finite(out, "compression_vs_dense", st.compression_vs_dense);
    sl__json_add_i64(out, "time_to_quorum_ms", st.time_to_quorum_ms);
    add_finite(out, "mean_loss", st.mean_loss);
    add_finite(out, "mean_accuracy", st.mean_accuracy);
    if (sl__eval_json(out, "evaluation", &st.eval) != SL_OK) {
        cJSON_Delete(out);
        sl__problem_status(rs, rq, SL_ENOMEM, "reading the round");
        return;
    }
    sl__round_model(s, &st.round, out);
    sl__resp_json(rs, 200, out);
}

/* ---- writes ---------------------------------------------------------------- */

static void audit(sl_server *s, const char *action, const char *detail)
{
    int rc = sl_store_audit(s->store, "admin", action, detail);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, "http", "audit of %s (%s) failed: %s", action, detail, sl_strerror(rc));
}

void sl__h_create_task(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    cJSON *doc = sl__json_body(rq, rs), *out;
    const cJSON *cfg, *layout, *model, *spec, *contract;
    char *cfg_text = NULL, *spec_text = NULL, *contract_text = NULL, err[480] = "", detail[160];
    uint8_t *frame = NULL;
    size_t cap, len = 0;
    int64_t id;
    int rc;
    (void)p;
    if (doc == NULL)
        return;
    cfg = cJSON_GetObjectItemCaseSensitive(doc, "config");
    layout = cJSON_GetObjectItemCaseSensitive(doc, "layout");
    model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    spec = cJSON_GetObjectItemCaseSensitive(doc, "model_spec");
    contract = cJSON_GetObjectItemCaseSensitive(doc, "data_contract");
    if (!cJSON_IsObject(cfg) || !cJSON_IsString(layout) || !cJSON_IsString(model)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "config (object), layout (text) and model (base64 frame) are required");
        goto done;
    }
    if (spec != NULL && !cJSON_IsObject(spec)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "model_spec, when given, is an object (device/nn/MODEL_SPEC.md)");
        goto done;
    }
    if (contract != NULL && !cJSON_IsObject(contract)) {
        sl__problem(rs, rq, 400, "bad-request", NULL,
                    "data_contract, when given, is an object (device/data/DATA_CONTRACT.md)");
        goto done;
    }
    if ((spec != NULL && (spec_text = cJSON_PrintUnformatted(spec)) == NULL) ||
        (contract != NULL && (contract_text = cJSON_PrintUnformatted(contract)) == NULL)) {
        sl__problem_status(rs, rq, SL_ENOMEM, "creating the task");
        goto done;
    }
    cap = strlen(model->valuestring) / 4 * 3 + 3;
    frame = malloc(cap);
    cfg_text = cJSON_PrintUnformatted(cfg);
    if (frame == NULL || cfg_text == NULL) {
        sl__problem_status(rs, rq, SL_ENOMEM, "creating the task");
        goto done;
    }
    if (sl_base64_decode(model->valuestring, frame, cap, &len) != SL_OK || len == 0) {
        sl__problem(rs, rq, 400, "bad-request", NULL, "model is not valid base64");
        goto done;
    }
    rc = sl_engine_create_task_docs(s->engine, cfg_text, layout->valuestring, spec_text,
                                    contract_text, frame, len, &id, err, sizeof err);
    if (rc == SL_ECONFLICT) {
        sl__problem(rs, rq, 409, "conflict", NULL, "%s",
                    err[0] ? err : "a task with this name and another configuration exists");
        goto done;
    }
    if (rc == SL_ECONFIG_KEY || rc == SL_ECONFIG_VALUE) {
        sl__problem(rs, rq, 422, "unprocessable", "config", "%s", err);
        goto done;
    }
    if (rc == SL_ESPEC) {
        sl__problem(rs, rq, 422, "unprocessable",
                    strncmp(err, "data_contract", 13) == 0 ? "data_contract" : "model_spec", "%s",
                    err);
        goto done;
    }
    if (strncmp(err, "layout", 6) == 0 || strncmp(err, "initial model", 13) == 0) {
        sl__problem(rs, rq, 422, "unprocessable", err[0] == 'l' ? "layout" : "model", "%s", err);
        goto done;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "creating the task");
        goto done;
    }
    snprintf(detail, sizeof detail, "{\"task_id\":%lld}", (long long)id);
    audit(s, "create_task", detail);
    out = cJSON_CreateObject();
    if (out != NULL)
        cJSON_AddNumberToObject(out, "task_id", (double)id);
    sl__resp_json(rs, 201, out);
done:
    free(frame);
    free(cfg_text);
    free(spec_text);
    free(contract_text);
    cJSON_Delete(doc);
}

void sl__h_abort_round(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    char detail[64];
    int64_t id;
    cJSON *out;
    int rc;
    if (sl__parse_i64(p->seg[0], 1, INT64_MAX, &id) != SL_OK) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %s", p->seg[0]);
        return;
    }
    rc = sl_engine_abort_round(s->engine, id);
    if (rc == SL_ENOENT) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no round %lld", (long long)id);
        return;
    }
    if (rc == SL_ESTATE) {
        sl__problem(rs, rq, 409, "conflict", NULL, "round %lld has already ended", (long long)id);
        return;
    }
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "aborting the round");
        return;
    }
    snprintf(detail, sizeof detail, "{\"round_id\":%lld}", (long long)id);
    audit(s, "abort_round", detail);
    out = cJSON_CreateObject();
    if (out != NULL) {
        cJSON_AddNumberToObject(out, "round_id", (double)id);
        cJSON_AddStringToObject(out, "state", "abandoned");
    }
    sl__resp_json(rs, 200, out);
}

void sl__h_openapi(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    (void)s;
    (void)rq;
    (void)p;
    sl__resp_copy(rs, 200, "application/yaml", sl__openapi_yaml, sl__openapi_yaml_len);
}
