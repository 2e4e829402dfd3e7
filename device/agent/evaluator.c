/*
 * evaluator.c - the evaluator: an agent that holds the test split and
 * reports loss and accuracy for every model version of a task.
 *
 * It speaks as the operator (admin bearer token), as the server expects
 * for metrics that become the version's own (api/server/devices.c: a
 * signed device's metrics go to its round's statistics instead). It polls
 * HEAD /v1/models/latest?task=T with If-None-Match, then walks every
 * version after the last one it reported (state_dir/evaluated), fetching
 * each as a delta from the one before when it can (the same download path
 * and model cache as a device), evaluates, and POSTs
 * /v1/models/{v}/metrics. A version retired by retention (404) is skipped.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"

#define EVAL_BATCH 500

/*
 * The version number of the task's latest model: HEAD /v1/models/latest with If-None-Match
 * (@etag, the last one seen; SL_EEXIST on 304: nothing new), the version from the
 * X-Starling-Model-Version header (every coordinator's models endpoint sends it, and its
 * ETag). The model itself is fetched by version after, as a delta from the one before, so
 * finding out that there is a new one costs no model bytes. An answer without them is
 * SL_ECORRUPT: nothing is kept, the loop retries later.
 */
static int latest_version(sl_agent *a, char *etag, size_t cap, int64_t *out)
{
    char path[96], inm[SL_CLIENT_HEADER_MAX + 32];
    const char *headers[2] = {NULL, NULL};
    sl_client_response r;
    int rc;
    snprintf(path, sizeof path, "/v1/models/latest?task=%" PRId64, a->o.task_id);
    if (etag[0] != '\0') {
        snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
        headers[0] = inm;
    }
    memset(&r, 0, sizeof r);
    rc = sl_client_request(a->client, "HEAD", path, NULL, 0, NULL, headers, &r);
    if (rc != SL_OK)
        return rc;
    if (r.status == 304) {
        rc = SL_EEXIST; /* nothing new */
    } else if (r.status != 200) {
        /* a HEAD answer has no body to explain itself: a bare status */
        sl_log(SL_LOG_WARN, "evaluator", "latest model: HTTP %ld", r.status);
        rc = r.status == 401 || r.status == 403 ? SL_EPERM : SL_EBUSY;
    } else if (r.model_version < 1 || r.etag[0] == '\0') {
        sl_log(SL_LOG_WARN, "evaluator", "latest model: no X-Starling-Model-Version or ETag");
        rc = SL_ECORRUPT;
    } else {
        snprintf(etag, cap, "%s", r.etag);
        *out = r.model_version;
    }
    sl_client_response_free(&r);
    return rc;
}

static int evaluate_version(sl_agent *a, int64_t v)
{
    const sl_agent_data *data = a->o.data;
    uint64_t bytes = 0;
    sl_metrics m;
    size_t n = sl_agent_data_samples(data, 0);
    int rc = sl__agent_fetch_model(a, v, &bytes);
    if (rc != SL_OK)
        return rc;
    /* every metric the model's loss defines: accuracy for classes, MAE and RMSE for targets */
    rc = sl_model_metrics(a->model, a->global, data->x, data->t != NULL ? NULL : data->y, data->t,
                          data->client_ix[0], n, EVAL_BATCH, &m, NULL);
    if (rc != SL_OK)
        return rc;
    if (isnan(m.accuracy))
        sl_log(SL_LOG_INFO, "evaluator",
               "task %" PRId64 " version %" PRId64 ": rmse %.4f mae %.4f loss %.4f on %zu samples",
               a->o.task_id, v, m.rmse, m.mae, m.loss, n);
    else
        sl_log(SL_LOG_INFO, "evaluator",
               "task %" PRId64 " version %" PRId64 ": accuracy %.4f loss %.4f on %zu samples",
               a->o.task_id, v, m.accuracy, m.loss, n);
    rc = sl__agent_post_eval(a, v, &m);
    if (rc == SL_OK) {
        sl_agent_event ev = {.kind = SL_AGENT_EV_EVALUATED,
                             .model_version = v,
                             .bytes = bytes,
                             .value = isnan(m.accuracy) ? m.rmse : m.accuracy,
                             .loss = m.loss};
        char text[32];
        snprintf(text, sizeof text, "%" PRId64 "\n", v);
        rc = sl__agent_write_text(a, "evaluated", text);
        sl__agent_emit(a, &ev);
    }
    return rc;
}

/* The test data of o.data_source, read through the task's data contract (every sample: the
 * contract's held-out share is the devices'). SL_EBUSY: try again. */
static int load_test(sl_agent *a, const char *source, sl_contract **contract, sl_agent_data **data)
{
    void *text = NULL;
    size_t len = 0;
    char why[512];
    int rc = sl__agent_fetch_task_doc(a, "data-contract", &text, &len);
    if (rc == SL_ENOENT) {
        sl_log(SL_LOG_ERROR, "evaluator", "task %" PRId64 " has no data contract to read %s",
               a->o.task_id, source);
        return SL_EUNSUPPORTED;
    }
    if (rc != SL_OK)
        return rc == SL_EPERM ? rc : SL_EBUSY;
    rc = sl_contract_parse(text, len, contract, why, sizeof why);
    free(text);
    if (rc == SL_OK) {
        (*contract)->eval_share = 0;
        rc = sl_agent_data_load_contract(source, *contract, NULL, 1, 0, 1, a->o.seed, data, why,
                                         sizeof why);
    }
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "evaluator", "task %" PRId64 ": %s", a->o.task_id, why);
        return rc == SL_ENOMEM ? rc : SL_EUNSUPPORTED;
    }
    a->o.data = *data;
    a->o.client = 0;
    return SL_OK;
}

int sl_agent_evaluate(const sl_agent_options *o, char *err, size_t errcap)
{
    sl_agent *a = NULL;
    sl_agent_options eo;
    sl_contract *contract = NULL;
    sl_agent_data *test = NULL;
    char etag[SL_CLIENT_HEADER_MAX] = "";
    int64_t done = 0, latest = 0;
    uint64_t reported = 0;
    unsigned failures = 0;
    int rc;
    if (o == NULL || o->admin_token == NULL ||
        (o->data_source == NULL && (o->data == NULL || sl_agent_data_samples(o->data, 0) == 0))) {
        if (err != NULL)
            snprintf(err, errcap, "the evaluator needs the admin token and the test split");
        return SL_EINVAL;
    }
    eo = *o;
    eo.data_source = NULL; /* read once, whole, below: not a device's growing source */
    rc = sl_agent_create(&eo, &a, err, errcap);
    if (rc != SL_OK)
        return rc;
    a->admin = 1;
    if (o->threads > 0)
        sl_nn_set_threads(o->threads);
    rc = sl__agent_connect(a);
    while (rc == SL_OK && o->data == NULL && test == NULL && !sl__agent_stopping(a)) {
        int step = load_test(a, o->data_source, &contract, &test);
        if (step == SL_EBUSY) {
            sl_contract_free(contract);
            contract = NULL;
            if (sl__agent_sleep(a, o->retry_base_ms << (failures < 6 ? failures++ : 6)))
                break;
            continue;
        }
        rc = step;
    }
    failures = 0;
    while (rc == SL_OK && !sl__agent_stopping(a)) {
        /* the task's model spec, when it has one: evaluated as devices train it */
        int step = sl__agent_take_task_spec(a, EVAL_BATCH);
        if (step == SL_OK && a->spec_refusal[0] != '\0') {
            sl_log(SL_LOG_ERROR, "evaluator", "task %" PRId64 ": %s", a->o.task_id,
                   a->spec_refusal);
            rc = SL_EUNSUPPORTED;
        } else if (step == SL_EPERM || step == SL_ENOMEM) {
            rc = step;
        } else if (step != SL_OK) {
            if (sl__agent_sleep(a, o->retry_base_ms << (failures < 6 ? failures++ : 6)))
                break;
            continue;
        }
        break;
    }
    failures = 0;
    if (rc == SL_OK && sl__agent_read_i64(a, "evaluated", &done) != SL_OK)
        done = 0;
    while (rc == SL_OK && !sl__agent_stopping(a)) {
        int step = latest_version(a, etag, sizeof etag, &latest);
        if (step == SL_EEXIST || (step == SL_OK && latest <= done)) {
            failures = 0;
            if (o->once || (o->rounds > 0 && reported >= o->rounds))
                break;
            sl__agent_sleep(a, o->eval_interval_ms);
            continue;
        }
        if (step == SL_OK) {
            for (int64_t v = done + 1; v <= latest && !sl__agent_stopping(a); v++) {
                step = evaluate_version(a, v);
                if (step == SL_ENOENT) {
                    sl_log(SL_LOG_INFO, "evaluator", "version %" PRId64 " is gone: skipped", v);
                    step = SL_OK;
                }
                if (step != SL_OK)
                    break;
                done = v;
                reported++;
            }
        }
        if (step == SL_EPERM || step == SL_ELAYOUT || step == SL_ENOMEM) {
            rc = step;
            break;
        }
        if (step != SL_OK) {
            etag[0] = '\0';
            if (sl__agent_sleep(a, o->retry_base_ms << (failures < 6 ? failures : 6)))
                break;
            failures++;
            continue;
        }
        failures = 0;
        if (o->once || (o->rounds > 0 && reported >= o->rounds))
            break;
    }
    if (rc != SL_OK && err != NULL)
        snprintf(err, errcap, "evaluator: %s", sl_strerror(rc));
    sl_agent_free(a);
    sl_agent_data_free(test);
    sl_contract_free(contract);
    return rc;
}
