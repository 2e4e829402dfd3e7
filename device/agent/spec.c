/*
 * spec.c - the task's model spec on the device: fetched when a check-in names
 * one the agent does not hold (GET /v1/tasks/{id}/model-spec, checked against
 * the check-in's SHA-256), cached in the state directory (model_spec.json),
 * and checked before anything is trained: the spec itself (sl_spec_parse), the
 * device's limits (max_nodes, max_params, memory_budget: parameters,
 * optimiser state and the activations of a training step at the task's batch
 * size, planned before the first step), that this build runs every op, and
 * that the device's data fits the model's input and loss. A spec that fails is
 * refused with one sentence that says why; the next check-in carries it and
 * the coordinator records it (GET /v1/devices/{id}, "refusals") and stops
 * selecting the device for the task.
 *
 * Above net.c (the fetch) and model.c (the model it builds).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"

#define SPEC_FILE "model_spec.json"
#define SPEC_MAX  ((size_t)16 << 20) /* sl_spec_parse's own limit */

/* Floats per parameter the agent keeps while it trains: the held global model, the working
 * copy, the gradient, the SGD momentum, the residual and the dense update (+ DGC momentum). */
#define PARAM_COPIES 6

static void hex_sha(const void *data, size_t len, char hex[65])
{
    uint8_t sha[32];
    sl_sha256(data, len, sha);
    sl_hex(sha, 32, hex);
}

static void mib(uint64_t bytes, char *out, size_t cap)
{
    snprintf(out, cap, "%.1f MiB", (double)bytes / 1048576.0);
}

static const char *loss_name(sl_spec_loss l)
{
    static const char *const names[] = {"cross_entropy", "bce_with_logits", "mse", "l1", "huber"};
    return (unsigned)l < sizeof names / sizeof names[0] ? names[l] : "?";
}

/* The largest label of the device's data (-1 without data). */
static int32_t max_label(const sl_agent_data *d)
{
    int32_t m = -1;
    if (d == NULL || d->y == NULL)
        return -1;
    for (size_t i = 0; i < d->n; i++)
        m = d->y[i] > m ? d->y[i] : m;
    return m;
}

/*
 * Check @text against this device: SL_OK with *@spec and *@model built, or SL_OK with the
 * reason in @why (nothing built) when the device cannot train it; other errors only for
 * memory.
 */
static int check(sl_agent *a, const char *text, size_t len, uint32_t batch, sl_spec **spec,
                 sl_model **model, char *why, size_t cap)
{
    char err[200], need[32], act[32], par[32], budget[32];
    sl_spec *s = NULL;
    sl_model *m = NULL;
    size_t nodes, params, features = a->o.data != NULL ? a->o.data->features : 0;
    uint64_t act_bytes, total;
    int rc;

    why[0] = '\0';
    rc = sl_spec_parse(text, len, &s, err, sizeof err);
    if (rc == SL_ENOMEM)
        return rc;
    if (rc != SL_OK) {
        snprintf(why, cap, "the model spec is not valid: %s", err[0] ? err : sl_strerror(rc));
        return SL_OK;
    }
    nodes = sl_spec_nodes(s);
    params = (size_t)sl_layout_params(sl_spec_layout(s));
    if (nodes > a->o.max_nodes) {
        snprintf(why, cap, "the model has %zu nodes; this device allows %u (max_nodes)", nodes,
                 a->o.max_nodes);
        goto refuse;
    }
    if (params > a->o.max_params) {
        snprintf(why, cap,
                 "the model has %zu parameters; this device allows %" PRIu64 " (max_params)",
                 params, a->o.max_params);
        goto refuse;
    }
    rc = sl_model_create_spec(s, &m, err, sizeof err);
    if (rc == SL_ENOMEM)
        goto fail;
    if (rc != SL_OK) {
        snprintf(why, cap, "this agent cannot run the model: %s", err[0] ? err : sl_strerror(rc));
        goto refuse;
    }
    /* the device's data: class labels (cross_entropy) or regression targets (the other losses
     * but bce), as many features as the model's input (until the task's data contract) */
    if (a->o.data != NULL && a->o.data->contract != NULL) {
        /* the task's data contract says what a sample is: task_data.c checks the fit */
    } else if (a->o.data != NULL && a->o.data->t != NULL) {
        sl_spec_loss l = sl_spec_loss_kind(s);
        if (sl_spec_inputs(s) != 1 || sl_model_input_size(m) != features) {
            snprintf(why, cap,
                     "the model takes %zu input(s) of %zu values per sample; this device's data "
                     "has one of %zu",
                     sl_spec_inputs(s), sl_model_input_size(m), features);
            goto refuse;
        }
        if (l == SL_SPEC_CROSS_ENTROPY || l == SL_SPEC_BCE_WITH_LOGITS ||
            sl_model_classes(m) != a->o.data->tdim) {
            snprintf(why, cap,
                     "the model's loss is %s over %zu outputs; this device's data has %zu "
                     "regression target(s) per sample (mse, l1, huber)",
                     loss_name(l), sl_model_classes(m), a->o.data->tdim);
            goto refuse;
        }
    } else if (a->o.data != NULL) {
        int32_t top = max_label(a->o.data);
        if (sl_spec_inputs(s) != 1 || sl_model_input_size(m) != features) {
            snprintf(why, cap,
                     "the model takes %zu input(s) of %zu values per sample; this device's data "
                     "has one of %zu",
                     sl_spec_inputs(s), sl_model_input_size(m), features);
            goto refuse;
        }
        if (sl_spec_loss_kind(s) != SL_SPEC_CROSS_ENTROPY) {
            snprintf(why, cap,
                     "the model's loss is %s; this device's data has class labels "
                     "(cross_entropy)",
                     loss_name(sl_spec_loss_kind(s)));
            goto refuse;
        }
        if (top >= 0 && (size_t)top >= sl_model_classes(m)) {
            snprintf(why, cap, "the model has %zu classes; this device's data has labels up to %d",
                     sl_model_classes(m), (int)top);
            goto refuse;
        }
    }
    act_bytes = sl_model_activation_bytes(m, batch ? batch : 1);
    total = act_bytes +
            (uint64_t)params * sizeof(float) * (PARAM_COPIES + (a->o.dgc_momentum > 0 ? 1 : 0)) +
            (uint64_t)(batch ? batch : 1) * features * sizeof(float);
    if (act_bytes == 0 || total > a->o.memory_budget) {
        mib(total, need, sizeof need);
        mib(act_bytes, act, sizeof act);
        mib(total - act_bytes, par, sizeof par);
        mib(a->o.memory_budget, budget, sizeof budget);
        snprintf(why, cap,
                 "a training step at batch %u needs %s (activations %s, parameters, optimiser "
                 "state and batch %s); this device allows %s (memory_budget)",
                 batch, act_bytes ? need : "more than can be counted", act, par, budget);
        goto refuse;
    }
    *spec = s;
    *model = m;
    return SL_OK;
refuse:
    rc = SL_OK;
fail:
    sl_model_free(m);
    sl_spec_free(s);
    return rc;
}

/* Hold @s / @m (taken over): the model trains from now on. */
static int adopt(sl_agent *a, sl_spec *s, sl_model *m)
{
    sl_spec *old = a->spec;
    int rc = sl__agent_set_model(a, m); /* frees the old model (it reads the old spec) */
    if (rc != SL_OK) {
        if (a->model != m)
            sl_spec_free(s);
        return rc;
    }
    a->spec = s;
    sl_spec_free(old);
    return SL_OK;
}

static int evaluate(sl_agent *a, const char *text, size_t len, const char *sha, uint32_t batch)
{
    sl_spec *s = NULL;
    sl_model *m = NULL;
    char why[sizeof a->spec_refusal];
    int rc = check(a, text, len, batch, &s, &m, why, sizeof why);
    if (rc != SL_OK)
        return rc;
    if (why[0] != '\0') {
        if (strcmp(why, a->spec_refusal) != 0) {
            sl_log(SL_LOG_ERROR, "agent", "task %" PRId64 ": refusing its model: %s", a->o.task_id,
                   why);
            snprintf(a->spec_refusal, sizeof a->spec_refusal, "%s", why);
            a->spec_refusal_sent = 0;
        }
    } else {
        rc = adopt(a, s, m);
        if (rc != SL_OK)
            return rc;
        if (a->spec_refusal[0] != '\0')
            sl_log(SL_LOG_INFO, "agent", "task %" PRId64 ": the model fits now", a->o.task_id);
        a->spec_refusal[0] = '\0';
        a->spec_refusal_sent = 0;
        sl_log(SL_LOG_INFO, "agent", "model %s: %zu parameters, %zu nodes, %s executor",
               sl_spec_name(s), sl_model_params(m), sl_spec_nodes(s),
               sl_model_fused(m) ? "fused" : "general");
    }
    memcpy(a->spec_sha256, sha, 65);
    return SL_OK;
}

int sl__agent_take_spec(sl_agent *a, const char *sha256, uint32_t batch)
{
    void *text = NULL;
    size_t len = 0;
    char got[65];
    int rc;
    if (strcmp(sha256, a->spec_sha256) == 0)
        return SL_OK;
    /* the cache first: a restarted agent does not fetch what it holds */
    if (sl__agent_read_file(a, SPEC_FILE, SPEC_MAX, &text, &len) == SL_OK) {
        hex_sha(text, len, got);
        if (strcmp(got, sha256) != 0) {
            free(text);
            text = NULL;
        }
    }
    if (text == NULL) {
        rc = sl__agent_fetch_spec(a, &text, &len);
        if (rc != SL_OK)
            return rc == SL_ENOENT ? SL_EBUSY : rc; /* the check-in said there is one */
        hex_sha(text, len, got);
        if (strcmp(got, sha256) != 0) {
            sl_log(SL_LOG_WARN, "agent", "model spec: its SHA-256 is not the check-in's");
            free(text);
            return SL_ECORRUPT;
        }
        rc = sl__agent_write_file(a, SPEC_FILE, text, len);
        if (rc != SL_OK)
            sl_log(SL_LOG_WARN, "agent", "model spec not cached: %s", sl_strerror(rc));
    }
    rc = evaluate(a, text, len, sha256, batch);
    free(text);
    return rc;
}

int sl__agent_take_task_spec(sl_agent *a, uint32_t batch)
{
    void *text = NULL;
    size_t len = 0;
    char sha[65];
    int rc = sl__agent_fetch_spec(a, &text, &len);
    if (rc == SL_ENOENT)
        return SL_OK; /* a task without a spec: its layout names a registry model */
    if (rc != SL_OK)
        return rc;
    hex_sha(text, len, sha);
    if (strcmp(sha, a->spec_sha256) != 0) {
        rc = sl__agent_write_file(a, SPEC_FILE, text, len);
        if (rc != SL_OK)
            sl_log(SL_LOG_WARN, "agent", "model spec not cached: %s", sl_strerror(rc));
        rc = evaluate(a, text, len, sha, batch);
    }
    free(text);
    return rc;
}

int sl__agent_restore_spec(sl_agent *a)
{
    void *text = NULL;
    size_t len = 0;
    sl_spec *s = NULL;
    sl_model *m = NULL;
    char why[sizeof a->spec_refusal];
    int rc = sl__agent_read_file(a, SPEC_FILE, SPEC_MAX, &text, &len);
    if (rc != SL_OK)
        return SL_OK; /* none cached (a task without one, or not fetched yet) */
    /* the batch is the task's: the next check-in checks the memory again at it */
    rc = check(a, text, len, a->o.batch ? a->o.batch : 1, &s, &m, why, sizeof why);
    free(text);
    if (rc != SL_OK || why[0] != '\0')
        return rc; /* refused: the next check-in refuses again, and says why */
    return adopt(a, s, m);
}
