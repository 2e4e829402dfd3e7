/*
 * task_data.c - the task's data contract on a device: fetched (GET
 * /v1/tasks/{id}/data-contract, checked against the check-in's SHA-256),
 * cached in the state directory, applied to the device's own source
 * (live.c), taken up again as the data grows, and checked against the model.
 *
 * What the device cannot use is said, not hidden: "no usable data: REASON"
 * (a source that refuses, a contract the model does not fit) or "too few
 * samples: ..." goes with the next check-ins as the device's refusal; the
 * coordinator records it (GET /v1/devices/{id}) and does not select the
 * device, and the device uploads nothing until its data is usable again.
 *
 * Layering: above net.c (fetch) and state.c (cache) and live.c (data),
 * below the program loop (agent.c), which calls it before check-ins.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"

#define CONTRACT_FILE "data_contract.json"

static void hex_sha(const void *data, size_t len, char hex[65])
{
    uint8_t sha[32];
    sl_sha256(data, len, sha);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", sha[i]);
}

/* Why the contract does not fit the model ("" when it does). */
static void check_fit(const sl_agent *a, char *why, size_t cap)
{
    const sl_contract *c = sl__agent_live_contract(a->live);
    sl_spec_loss loss = a->spec != NULL ? sl_spec_loss_kind(a->spec) : SL_SPEC_CROSS_ENTROPY;
    size_t outputs;
    why[0] = '\0';
    if (c == NULL || a->model == NULL)
        return;
    outputs = sl_model_classes(a->model);
    if (sl_model_input_size(a->model) != c->sample_size) {
        snprintf(why, cap,
                 "no usable data: the model takes %zu values per sample; the task's data "
                 "contract makes %zu",
                 sl_model_input_size(a->model), c->sample_size);
    } else if (c->label_kind == SL_LABEL_CLASS &&
               (loss != SL_SPEC_CROSS_ENTROPY || outputs != c->nclasses)) {
        snprintf(why, cap,
                 "no usable data: %zu classes need a cross_entropy model of %zu outputs; the "
                 "model has %zu",
                 c->nclasses, c->nclasses, outputs);
    } else if (c->label_kind == SL_LABEL_MULTILABEL &&
               (loss != SL_SPEC_BCE_WITH_LOGITS || outputs != c->nclasses)) {
        snprintf(why, cap,
                 "no usable data: %zu labels per sample need a bce_with_logits model of %zu "
                 "outputs",
                 c->nclasses, c->nclasses);
    } else if (c->label_kind == SL_LABEL_TARGET &&
               (loss == SL_SPEC_CROSS_ENTROPY || loss == SL_SPEC_BCE_WITH_LOGITS ||
                outputs != c->tdim)) {
        snprintf(why, cap,
                 "no usable data: %zu regression target(s) need an mse, l1 or huber model of as "
                 "many outputs; the model has %zu",
                 c->tdim, outputs);
    }
}

/* Take @why as the device's data refusal (logged when it changes). */
static void set_refusal(sl_agent *a, const char *why)
{
    if (strcmp(why, a->data_refusal) == 0)
        return;
    if (why[0] != '\0')
        sl_log(SL_LOG_ERROR, "agent", "task %" PRId64 ": %s", a->o.task_id, why);
    else if (a->data_refusal[0] != '\0')
        sl_log(SL_LOG_INFO, "agent", "task %" PRId64 ": the data is usable again", a->o.task_id);
    snprintf(a->data_refusal, sizeof a->data_refusal, "%s", why);
    a->data_refusal_sent = 0;
}

int sl__agent_refresh_data(sl_agent *a, int force)
{
    char why[sizeof a->data_refusal];
    int64_t now = sl__agent_now_ms();
    const sl_agent_data *d;
    int rc;
    if (a->live == NULL || sl__agent_live_sha(a->live)[0] == '\0')
        return SL_OK;
    if (!force && a->data_refreshed_ms != 0 && now - a->data_refreshed_ms < a->o.data_refresh_ms)
        return SL_OK;
    a->data_refreshed_ms = now;
    rc = sl__agent_live_refresh(a->live, why, sizeof why);
    if (rc != SL_OK)
        return rc;
    d = sl__agent_live_data(a->live);
    a->o.data = d;
    a->o.client = 0;
    if (why[0] == '\0' || strncmp(why, "too few", 7) == 0) {
        char fit[sizeof why];
        check_fit(a, fit, sizeof fit);
        if (fit[0] != '\0') {
            snprintf(why, sizeof why, "%s", fit);
            a->o.data = NULL;
        }
    }
    set_refusal(a, why);
    return SL_OK;
}

/* Apply contract @text (hex SHA-256 @sha) and read the data through it. */
static int apply(sl_agent *a, const char *text, size_t len, const char *sha)
{
    char why[sizeof a->data_refusal];
    int rc = sl__agent_live_set_contract(a->live, text, len, sha, why, sizeof why);
    if (rc != SL_OK)
        return rc;
    a->o.data = NULL;
    if (why[0] != '\0') {
        set_refusal(a, why);
        return SL_OK;
    }
    sl_log(SL_LOG_INFO, "agent", "task %" PRId64 ": data contract %.12s applied to %s",
           a->o.task_id, sha, a->o.data_source);
    return sl__agent_refresh_data(a, 1);
}

int sl__agent_take_contract(sl_agent *a, const char *sha256)
{
    void *text = NULL;
    size_t len = 0;
    char got[65];
    int rc;
    if (sha256[0] == '\0') {
        /* a task without a contract: the data given at start (o.data) trains, if any */
        if (a->o.data == NULL && a->live != NULL)
            set_refusal(a, "no usable data: this source needs the task's data contract, and the "
                           "task has none");
        return SL_OK;
    }
    if (a->live == NULL) {
        /* a fleet's device: its client of the split the fleet read through --data_contract */
        if (a->o.data != NULL && a->o.data->contract != NULL)
            return SL_OK;
        set_refusal(a, "no usable data: the task has a data contract and this device names no "
                       "data source (--data)");
        return SL_OK;
    }
    if (strcmp(sha256, sl__agent_live_sha(a->live)) == 0)
        return SL_OK;
    /* the cache first: a restarted agent does not fetch what it holds */
    if (sl__agent_read_file(a, CONTRACT_FILE, SL_CONTRACT_MAX_BYTES, &text, &len) == SL_OK) {
        hex_sha(text, len, got);
        if (strcmp(got, sha256) != 0) {
            free(text);
            text = NULL;
        }
    }
    if (text == NULL) {
        rc = sl__agent_fetch_task_doc(a, "data-contract", &text, &len);
        if (rc != SL_OK)
            return rc == SL_ENOENT ? SL_EBUSY : rc; /* the check-in said there is one */
        hex_sha(text, len, got);
        if (strcmp(got, sha256) != 0) {
            sl_log(SL_LOG_WARN, "agent", "data contract: its SHA-256 is not the check-in's");
            free(text);
            return SL_ECORRUPT;
        }
        rc = sl__agent_write_file(a, CONTRACT_FILE, text, len);
        if (rc != SL_OK)
            sl_log(SL_LOG_WARN, "agent", "data contract not cached: %s", sl_strerror(rc));
    }
    rc = apply(a, text, len, sha256);
    free(text);
    return rc;
}

int sl__agent_restore_contract(sl_agent *a)
{
    void *text = NULL;
    size_t len = 0;
    char sha[65];
    int rc;
    if (a->o.data_source == NULL)
        return SL_OK;
    rc = sl__agent_live_create(a->o.data_source, a->o.data_memory, a->o.data_reservoir,
                               a->o.seed ^ (uint64_t)a->o.client, &a->live);
    if (rc != SL_OK)
        return rc;
    if (sl__agent_read_file(a, CONTRACT_FILE, SL_CONTRACT_MAX_BYTES, &text, &len) != SL_OK)
        return SL_OK; /* none cached: the first check-in names it */
    hex_sha(text, len, sha);
    rc = apply(a, text, len, sha);
    free(text);
    return rc;
}
