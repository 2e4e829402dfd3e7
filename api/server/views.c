/*
 * views.c - the engine's and the store's records as the API shows them,
 * shared by the handlers: a round's JSON and state name, a task's
 * compression, every task's status, and the version a round made with the
 * evaluator's metrics of it. Above http.c, below every handler (server_int.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

static const char *const state_names[] = {"selecting", "training", "aggregating", "closed",
                                          "abandoned"};

const char *sl__round_state_name(sl_round_state st)
{
    return (unsigned)st < 5 ? state_names[st] : "unknown";
}

cJSON *sl__round_json(const sl_round_record *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddNumberToObject(o, "round_id", (double)r->id);
    cJSON_AddNumberToObject(o, "task_id", (double)r->task_id);
    cJSON_AddNumberToObject(o, "round_no", (double)r->round_no);
    cJSON_AddNumberToObject(o, "base_version", (double)r->base_version);
    cJSON_AddStringToObject(o, "state", sl__round_state_name(r->state));
    cJSON_AddNumberToObject(o, "target", r->target);
    cJSON_AddNumberToObject(o, "quorum", r->quorum);
    sl__json_add_i64(o, "opened_at_ms", r->opened_at_ms);
    sl__json_add_i64(o, "select_deadline_ms", r->select_deadline_ms);
    sl__json_add_i64(o, "report_deadline_ms", r->report_deadline_ms);
    sl__json_add_i64(o, "closed_at_ms", r->closed_at_ms);
    cJSON_AddNumberToObject(o, "selected", r->selected);
    cJSON_AddNumberToObject(o, "reported", r->reported);
    cJSON_AddNumberToObject(o, "dropped", r->dropped);
    cJSON_AddNumberToObject(o, "late", r->late);
    cJSON_AddNumberToObject(o, "rejected", r->rejected);
    sl__json_add_i64(o, "bytes_up", r->bytes_up);
    sl__json_add_i64(o, "bytes_down", r->bytes_down);
    cJSON_AddStringToObject(o, "error", r->error);
    return o;
}

typedef struct id_list {
    int64_t *ids;
    size_t n, cap;
} id_list;

static int collect_id(void *ctx, int64_t id)
{
    id_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        int64_t *grown = realloc(l->ids, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        l->ids = grown;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return 0;
}

int sl__all_status(sl_server *s, sl_task_status **out, size_t *n)
{
    id_list l = {NULL, 0, 0};
    sl_task_status *st;
    size_t k = 0;
    int rc = sl_store_list_tasks(s->store, collect_id, &l);
    if (rc != SL_OK) {
        free(l.ids);
        return rc;
    }
    st = malloc((l.n ? l.n : 1) * sizeof *st);
    if (st == NULL) {
        free(l.ids);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < l.n; i++)
        if (sl_engine_task_status(s->engine, l.ids[i], &st[k]) == SL_OK)
            k++; /* a task whose initial model never landed is not running: skip it */
    free(l.ids);
    *out = st;
    *n = k;
    return SL_OK;
}

cJSON *sl__compression_json(const sl_task_config *cfg)
{
    cJSON *comp = cJSON_CreateObject();
    if (comp == NULL)
        return NULL;
    cJSON_AddStringToObject(comp, "values", sl_value_mode_name(cfg->values));
    cJSON_AddNumberToObject(comp, "density", cfg->density);
    cJSON_AddStringToObject(comp, "topk_scope", sl_topk_scope_name(cfg->topk_scope));
    cJSON_AddStringToObject(comp, "error_feedback", sl_error_feedback_name(cfg->error_feedback));
    cJSON_AddNumberToObject(comp, "residual_decay", cfg->residual_decay);
    cJSON_AddNumberToObject(comp, "warmup_rounds", cfg->warmup_rounds);
    cJSON_AddNumberToObject(comp, "warmup_density", cfg->warmup_density);
    return comp;
}

void sl__round_model(sl_server *s, const sl_round_record *r, cJSON *out)
{
    sl_model_record m;
    cJSON *metrics = NULL;
    int64_t version = r->base_version + 1;
    if (r->state != SL_ROUND_CLOSED) {
        /* only a closed round made a version (an abandoned one left the model as it was) */
        cJSON_AddNullToObject(out, "model_version");
        cJSON_AddNullToObject(out, "model_metrics");
        return;
    }
    cJSON_AddNumberToObject(out, "model_version", (double)version);
    /* its record without the bytes (retention may have retired them: the metrics stay); a
     * version not evaluated yet has no metrics */
    if (sl_store_get_model_info(s->store, r->task_id, version, &m) == SL_OK) {
        if (m.parent == r->base_version && m.metrics != NULL) {
            metrics = cJSON_Parse(m.metrics);
            /* a classifier's accuracy, or a regression's RMSE (its accuracy is null) */
            if (!cJSON_IsObject(metrics) ||
                (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "accuracy")) &&
                 !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "rmse")))) {
                cJSON_Delete(metrics);
                metrics = NULL;
            }
        }
        sl_store_model_free(&m);
    }
    if (metrics != NULL)
        cJSON_AddItemToObject(out, "model_metrics", metrics);
    else
        cJSON_AddNullToObject(out, "model_metrics");
}
