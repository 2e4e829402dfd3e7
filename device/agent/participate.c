/*
 * participate.c - one participation after the model is held: train, make
 * the update (local - global), compress it with error feedback, persist it
 * as the pending upload, deliver it, and resolve the outcome.
 *
 * The compressor is rebuilt from the persisted vectors for every step
 * (sl_compressor_restore), so the path after a restart is the same code as
 * the path without one: prepare -> persist -> (kill?) -> restore -> commit
 * or fold. Outcomes:
 *   accepted (200, duplicate or not)  commit: residual = acc - sent
 *   late / stale / unknown round /
 *   not selected (410, 404, 409)      fold: residual = acc (nothing lost)
 *   invalid (422, 413, conflict)      discard: residual unchanged
 *   transient (transport, 5xx, 429)   keep the pending upload, retry later
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_int.h"

#define EWMA_ALPHA     0.3
#define MIN_MEASURED   4096 /* bytes: smaller uploads measure latency, not bandwidth */
#define DIGEST_RETRIES 3

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* Selected elements per tensor for @density, as the compressor counts them. */
static double selected_count(const sl_layout *layout, double density, sl_topk_scope scope)
{
    double k = 0;
    if (scope == SL_TOPK_MODEL) {
        double d = (double)sl_layout_params(layout);
        k = ceil(density * d);
        return k < 1 ? 1 : (k > d ? d : k);
    }
    for (size_t t = 0; t < sl_layout_tensors(layout); t++) {
        double c = (double)sl_layout_tensor(layout, t)->count, kt = ceil(density * c);
        k += kt < 1 ? 1 : (kt > c ? c : kt);
    }
    return k;
}

/*
 * The density for this participation (warm-up, then bandwidth).
 *
 * Bandwidth-aware density. The coordinator hands out a density schedule
 * (density, warmup_rounds, warmup_density); sl_compress_density() of it at
 * this device's participation count is the scheduled density d_s, which is
 * never exceeded. The agent measures its upload throughput B (bytes/s, an
 * EWMA over uploads of at least 4 KiB, persisted in counters) and the
 * frame bytes per selected value b (an EWMA; before the first frame a
 * guess from the value mode). With T seconds left before the round's
 * report deadline, a frame of density d takes about b * k(d) / B seconds,
 * k(d) the values selected at d. The agent sends
 *     d = clamp(B * T / 2 / (b * n), d_s * f, d_s)
 * n the parameters, f = min_density_fraction (default 0.1): half the time
 * left is kept for retries of a lossy link; the floor keeps every update
 * meaningful, and what is not sent stays in the residual (error feedback),
 * so a smaller density delays information rather than losing it. Without
 * a measurement yet (or with bandwidth_aware off) d = d_s.
 */
static double choose_density(const sl_agent *a, const sl__agent_assignment *asg)
{
    sl_compress_params p;
    double scheduled, floor_d, fit, bpnz, left_s;
    sl_compress_params_default(&p);
    p.density = asg->density;
    p.warmup_rounds = asg->warmup_rounds;
    p.warmup_density = asg->warmup_density;
    scheduled = sl_compress_density(&p, asg->participation);
    if (!a->o.bandwidth_aware || a->counters.bw_ewma <= 0 || asg->deadline_ms <= 0)
        return scheduled;
    floor_d = scheduled * a->o.min_density_fraction;
    left_s = (double)(asg->deadline_ms - sl__agent_now_ms()) / 1000.0;
    if (left_s <= 0)
        return floor_d;
    bpnz = a->counters.bpnz_ewma;
    if (bpnz <= 0) {
        static const double value_bytes[] = {4, 2, 2, 1, 0.25, 0.125};
        bpnz = 1.5 + value_bytes[(unsigned)asg->values < 6 ? asg->values : 0];
    }
    fit = a->counters.bw_ewma * left_s * 0.5 / (bpnz * (double)a->n);
    if (fit < scheduled)
        sl_log(SL_LOG_INFO, "agent",
               "density %.4g instead of %.4g: %.0f B/s with %.1f s left (floor %.4g)", fit,
               scheduled, a->counters.bw_ewma, left_s, floor_d);
    return fit >= scheduled ? scheduled : (fit <= floor_d ? floor_d : fit);
}

/* ---- training -------------------------------------------------------------------------- */

/* 1 when @frame's positions are split (SL_FRAME_FLAG_SPLIT). */
static int split_frame(const void *frame, size_t len)
{
    sl_frame_header h;
    return sl_frame_peek_header(frame, len, &h) == SL_OK && (h.flags & SL_FRAME_FLAG_SPLIT);
}

static int prepare(sl_agent *a, const sl__agent_assignment *asg, const float *delta,
                   uint32_t samples, uint32_t steps)
{
    sl_frame_header hdr = {
        SL_FRAME_VERSION,     SL_FRAME_UPDATE,         0, sl_layout_hash(a->layout),
        (uint64_t)a->version, (uint64_t)asg->round_id, 0};
    sl__agent_pending *p = &a->pending;
    sl_compressor *c = NULL;
    const float *acc, *acc_mu;
    double density = choose_density(a, asg);
    uint64_t gen = a->counters.next_gen;
    int rc;

    if (gen <= a->resolved.gen)
        gen = a->resolved.gen + 1;
    rc = sl__agent_compressor(a, asg->values, density, asg->topk_scope, asg->feedback,
                              asg->residual_decay, gen, &c);
    if (rc == SL_OK)
        rc = sl_compressor_restore(c, a->residual, a->momentum, NULL, NULL, NULL, 0);
    sl__agent_pending_free(p);
    /* positions against what the held version's delta changed (a fault-injecting poisoner
     * patches plain frames only) */
    if (rc == SL_OK && a->split != NULL && a->o.split_positions &&
        a->poison == SL_AGENT_POISON_NONE)
        rc = sl_compressor_set_split(c, a->split, (uint64_t)a->split_ref);
    if (rc == SL_OK)
        rc = sl_compressor_prepare(c, delta, &hdr, 0, &p->frame, &p->frame_len);
    if (rc == SL_OK && split_frame(p->frame, p->frame_len)) {
        size_t blen;
        const uint8_t *bits = sl_support_bits(a->split, &blen);
        rc = sl_support_load(a->layout, bits, blen, &p->support);
        p->support_ref = a->split_ref;
    }
    if (rc == SL_OK)
        rc = sl_compressor_pending(c, &acc, &acc_mu);
    if (rc == SL_OK) {
        p->acc = malloc(a->n * sizeof(float));
        p->acc_mu = acc_mu ? malloc(a->n * sizeof(float)) : NULL;
        if (p->acc == NULL || (acc_mu && p->acc_mu == NULL))
            rc = SL_ENOMEM;
    }
    if (rc != SL_OK) {
        sl_compressor_free(c);
        sl__agent_pending_free(p);
        sl_log(SL_LOG_ERROR, "agent", "compressing the update: %s", sl_strerror(rc));
        return rc;
    }
    memcpy(p->acc, acc, a->n * sizeof(float));
    if (acc_mu)
        memcpy(p->acc_mu, acc_mu, a->n * sizeof(float));
    sl_compressor_free(c);
    p->gen = gen;
    p->task_id = a->o.task_id;
    p->round_id = asg->round_id;
    p->base_version = a->version;
    p->deadline_ms = asg->deadline_ms;
    p->num_samples = samples;
    p->local_steps = steps;
    p->participation = asg->participation;
    p->density = density;
    p->topk_scope = asg->topk_scope;
    p->feedback = asg->feedback;
    p->layout_hash = sl_layout_hash(a->layout);
    sl_sha256(p->frame, p->frame_len, p->frame_sha);
    p->upload_id[0] = '\0';
    p->offset = 0;
    /* the audit (tests) counts this update before it can be committed */
    rc = a->o.audit ? sl__agent_audit(a, gen, delta) : SL_OK;
    /* the pending upload is durable before a byte is sent */
    if (rc == SL_OK)
        rc = sl__agent_save_pending(a);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "agent", "persisting the pending upload: %s", sl_strerror(rc));
        sl__agent_clear_pending(a);
        return rc;
    }
    p->present = 1;
    a->counters.next_gen = gen + 1;
    sl__agent_save_counters(a);
    a->stats.last_density = density;
    {
        double k = selected_count(a->layout, density, asg->topk_scope);
        sl_agent_event ev = {.kind = SL_AGENT_EV_PREPARED,
                             .round_id = p->round_id,
                             .model_version = a->version,
                             .gen = gen,
                             .bytes = p->frame_len,
                             .value = density,
                             .delta = delta,
                             .residual = a->residual,
                             .accumulated = p->acc};
        sl_log(SL_LOG_INFO, "agent",
               "round %" PRId64 ": update of %zu bytes (density %.4g, %.0f of %zu values, "
               "%.2f bytes each)",
               p->round_id, p->frame_len, density, k, a->n, (double)p->frame_len / k);
        sl__agent_emit(a, &ev);
    }
    /* a simulated crash of this participation, drawn now (fleet faults) */
    if (sl__agent_uniform(a) < a->o.faults.crash) {
        a->crash_point = 1 + (int)(sl__agent_uniform(a) * 3.0);
        if (a->crash_point > 3)
            a->crash_point = 3;
        if (a->crash_point == 2 && !sl__agent_link_faults(a))
            a->crash_point = 3;
        a->crash_offset = (uint64_t)(sl__agent_uniform(a) * (double)p->frame_len);
    }
    return SL_OK;
}

/* ---- the local optimiser, frozen and local tensors ------------------------------------------ */

int sl__agent_uses_optim(const sl__agent_assignment *asg)
{
    return asg->optimizer != SL_OPTIM_SGD || asg->nesterov || asg->weight_decay > 0 ||
           asg->clip_norm > 0 || asg->frozen[0] != '\0' || asg->local_norm;
}

/* What a round trained with sl_optim needs besides the optimiser. */
typedef struct optim_round {
    sl_optim *opt;
    uint8_t *kept;   /* n bytes: 1 for a float that must not move (frozen or local) */
    uint8_t *frozen; /* n bytes: 1 for a float of a frozen tensor */
    uint8_t *local;  /* n bytes: 1 for a float of a local tensor */
    size_t nlocal;   /* local floats */
    uint64_t hash;   /* which tensors are local (the "local" file is for this set) */
    float *start;    /* n: the global model with the device's local values */
} optim_round;

static void optim_round_free(optim_round *r)
{
    sl_optim_free(r->opt);
    free(r->kept);
    free(r->frozen);
    free(r->local);
    free(r->start);
    memset(r, 0, sizeof *r);
}

static size_t tensor_index(const sl_layout *layout, const char *name)
{
    size_t nt = sl_layout_tensors(layout), t = 0;
    while (t < nt && strcmp(sl_layout_tensor(layout, t)->name, name) != 0)
        t++;
    return t;
}

/* Per-tensor flags of the tensors that stay on the device: the spec's "local"
 * parameters and, with @norm (FedBN), every input after X of a
 * BatchNormalization or LayerNormalization node (scale, bias, running
 * statistics). The public spec API has no accessor for either: they are read
 * from the spec's text, which sl_spec_parse() checked. */
static int local_tensors(const sl_spec *spec, int norm, uint8_t *flags)
{
    size_t len = 0, nt;
    const char *text = sl_spec_text(spec, &len);
    const sl_layout *layout = sl_spec_layout(spec);
    cJSON *doc = cJSON_ParseWithLength(text, len);
    const cJSON *e, *params = cJSON_GetObjectItemCaseSensitive(doc, "params");
    const cJSON *nodes = norm ? cJSON_GetObjectItemCaseSensitive(doc, "nodes") : NULL;
    size_t i = 0;
    nt = sl_layout_tensors(layout);
    memset(flags, 0, nt);
    if (doc == NULL)
        return SL_ESPEC;
    cJSON_ArrayForEach(e, params)
    {
        if (i < nt && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "local")))
            flags[i] = 1;
        i++;
    }
    cJSON_ArrayForEach(e, nodes)
    {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op"), *in;
        size_t k = 0;
        if (!cJSON_IsString(op) || (strcmp(op->valuestring, "BatchNormalization") != 0 &&
                                    strcmp(op->valuestring, "LayerNormalization") != 0))
            continue;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(e, "inputs"))
        {
            size_t t = cJSON_IsString(in) && k > 0 ? tensor_index(layout, in->valuestring) : nt;
            if (t < nt)
                flags[t] = 1;
            k++;
        }
    }
    cJSON_Delete(doc);
    return SL_OK;
}

/* Whether the model's spec marks a parameter "local" (FedBN by the spec). */
static int model_has_local(const sl_agent *a)
{
    const sl_spec *spec = a->spec != NULL ? a->spec : sl_model_spec(a->model);
    size_t nt = sl_layout_tensors(sl_spec_layout(spec));
    uint8_t *flags = malloc(nt > 0 ? nt : 1);
    int any = 0;
    if (flags != NULL && local_tensors(spec, 0, flags) == SL_OK)
        for (size_t t = 0; t < nt && !any; t++)
            any = flags[t];
    free(flags);
    return any;
}

/* The optimiser, masks and starting point of a round that trains with sl_optim;
 * the starting point takes the device's own local values ("local" file), or the
 * held global model's the first time. */
static int optim_begin(sl_agent *a, const sl__agent_assignment *asg, double lr, optim_round *r)
{
    const sl_spec *spec = a->spec != NULL ? a->spec : sl_model_spec(a->model);
    const sl_layout *layout = a->layout;
    size_t nt = sl_layout_tensors(layout), nfrozen = 0;
    char names_buf[SL__AGENT_FROZEN];
    const char *names[SL__AGENT_FROZEN / 2 + 1];
    uint8_t *trained = NULL, *flags = NULL;
    float *saved = NULL;
    size_t nsaved = 0;
    sl_optim_params p;
    int rc;

    memset(r, 0, sizeof *r);
    memcpy(names_buf, asg->frozen, sizeof names_buf);
    for (char *q = names_buf; *q != '\0';) {
        size_t len = strcspn(q, ",");
        names[nfrozen++] = q;
        if (q[len] == '\0')
            break;
        q[len] = '\0';
        q += len + 1;
    }
    trained = malloc(a->n);
    flags = malloc(nt > 0 ? nt : 1);
    r->kept = calloc(a->n, 1);
    r->frozen = malloc(a->n);
    r->local = calloc(a->n, 1);
    r->start = malloc(a->n * sizeof *r->start);
    if (trained == NULL || flags == NULL || r->kept == NULL || r->frozen == NULL ||
        r->local == NULL || r->start == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    /* trained: neither a buffer nor frozen; frozen: by name only (the running
     * statistics of a frozen module are frozen too, though no gradient moves them) */
    rc = sl_optim_mask_spec(spec, names, nfrozen, trained);
    if (rc == SL_OK)
        rc = sl_optim_mask_layout(layout, names, nfrozen, NULL, r->frozen);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "agent", "frozen parameters \"%s\": %s", asg->frozen,
               rc == SL_ENOENT ? "an entry names no parameter of the model" : sl_strerror(rc));
        goto done;
    }
    for (size_t i = 0; i < a->n; i++)
        r->frozen[i] = !r->frozen[i];
    rc = local_tensors(spec, asg->local_norm, flags);
    if (rc != SL_OK)
        goto done;
    r->hash = 0xcbf29ce484222325ULL; /* FNV-1a over the local tensors' indices */
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *d = sl_layout_tensor(layout, t);
        if (!flags[t])
            continue;
        memset(r->local + d->offset, 1, (size_t)d->count);
        r->nlocal += (size_t)d->count;
        r->hash = (r->hash ^ (uint64_t)t) * 0x100000001b3ULL;
    }
    for (size_t i = 0; i < a->n; i++)
        r->kept[i] = r->frozen[i] | r->local[i];
    memcpy(r->start, a->global, a->n * sizeof *r->start);
    if (r->nlocal > 0) {
        rc = sl__agent_load_local(a, r->hash, &saved, &nsaved);
        if (rc == SL_OK && nsaved == r->nlocal) {
            for (size_t i = 0, j = 0; i < a->n; i++)
                if (r->local[i])
                    r->start[i] = saved[j++];
        } else if (rc != SL_ENOENT) {
            sl_log(SL_LOG_WARN, "agent",
                   "the local tensors saved in %s/local are unusable (%s): they start again "
                   "from the global model",
                   a->dir, rc == SL_OK ? "another size" : sl_strerror(rc));
        }
        free(saved);
    }
    rc = sl_optim_params_default(asg->optimizer, &p);
    if (rc == SL_OK) {
        p.lr = lr;
        p.weight_decay = asg->weight_decay;
        p.prox_mu = asg->prox_mu;
        p.max_grad_norm = asg->clip_norm;
        if (asg->optimizer == SL_OPTIM_SGD) {
            p.momentum = asg->momentum;
            p.nesterov = asg->nesterov;
        } else {
            p.beta1 = asg->beta1;
            p.beta2 = asg->beta2;
            p.eps = asg->eps;
        }
        rc = sl_optim_create(a->n, &p, trained, &r->opt);
    }
    if (rc != SL_OK)
        sl_log(SL_LOG_ERROR, "agent", "the local optimiser (%s): %s",
               asg->optimizer == SL_OPTIM_SGD    ? "sgd"
               : asg->optimizer == SL_OPTIM_ADAM ? "adam"
                                                 : "adamw",
               sl_strerror(rc));
done:
    free(trained);
    free(flags);
    if (rc != SL_OK)
        optim_round_free(r);
    return rc;
}

/* After training: frozen floats back to where they started, the local values
 * saved (before the pending upload that follows from them), and neither sent
 * (their update entries are zero) nor kept in the error feedback. */
static int optim_end(sl_agent *a, optim_round *r, float *params)
{
    int rc = SL_OK;
    for (size_t i = 0; i < a->n; i++)
        if (r->frozen[i])
            params[i] = r->start[i];
    if (r->nlocal > 0) {
        float *values = malloc(r->nlocal * sizeof *values);
        if (values == NULL)
            return SL_ENOMEM;
        for (size_t i = 0, j = 0; i < a->n; i++)
            if (r->local[i])
                values[j++] = params[i];
        rc = sl__agent_save_local(a, r->hash, values, r->nlocal);
        free(values);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "agent", "saving the local tensors: %s", sl_strerror(rc));
            return rc;
        }
    }
    for (size_t i = 0; i < a->n; i++) {
        if (!r->kept[i])
            continue;
        params[i] = a->global[i]; /* the update's entry: exactly 0 */
        a->residual[i] = 0;
        if (a->momentum != NULL)
            a->momentum[i] = 0;
    }
    return SL_OK;
}

/* Federated evaluation: the round's base model (the new global one) on this device's
 * held-out samples, reported with their count before training. A failed report is logged
 * and costs nothing else: the update matters more than its measurement. */
static void evaluate_base(sl_agent *a, const sl__agent_assignment *asg, const sl_agent_data *d)
{
    size_t k = a->o.client - d->first, n = d->eval_n != NULL ? d->eval_n[k] : 0;
    size_t batch = a->o.batch ? a->o.batch : asg->batch;
    sl_metrics m;
    int rc;
    if (n == 0)
        return;
    rc = sl_model_metrics(a->model, a->global, d->x, d->t != NULL ? NULL : d->y, d->t,
                          d->eval_ix[k], n, batch < 256 ? 256 : batch, &m, NULL);
    if (rc == SL_OK)
        rc = sl__agent_post_eval(a, asg->model_version, &m);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, "agent", "round %" PRId64 ": federated evaluation not reported: %s",
               asg->round_id, sl_strerror(rc));
    else
        sl_log(SL_LOG_INFO, "agent",
               "round %" PRId64 ": model %" PRId64 " on %zu held-out samples: loss %.4f%s%.4f",
               asg->round_id, asg->model_version, n, m.loss,
               isnan(m.accuracy) ? " rmse " : " accuracy ",
               isnan(m.accuracy) ? m.rmse : m.accuracy);
}

int sl__agent_train_round(sl_agent *a, const sl__agent_assignment *asg)
{
    const sl_agent_data *data = a->o.data;
    uint32_t epochs = a->o.epochs ? a->o.epochs : asg->epochs;
    size_t batch = a->o.batch ? a->o.batch : asg->batch;
    double lr = a->o.lr > 0 ? a->o.lr : asg->lr, factor = 1.0;
    size_t n = sl_agent_data_samples(data, a->o.client);
    const uint32_t *idx;
    sl_sgd_params sp = {(float)lr, (float)asg->momentum, 0.0f, (float)asg->prox_mu, NULL, NULL};
    sl_sgd *sgd = NULL;
    optim_round orr;
    float *params = NULL, loss = 0;
    uint64_t who = a->o.seed_alone ? 0 : (uint64_t)a->device_id; /* sl_agent_options.seed_alone */
    uint64_t seed = mix(a->o.seed ^ mix(who) ^ (uint64_t)asg->round_id);
    int64_t t0 = sl_clock_monotonic_ns(NULL);
    uint32_t done = 0;
    uint64_t steps = 0, per_epoch; /* optimiser steps run; each epoch takes ceil(n / batch) */
    double trained_s = 0;          /* the epochs' time, slowdowns included: the pace */
    int rc;

    if (n == 0) {
        sl_log(SL_LOG_ERROR, "agent", "client %u holds no samples", a->o.client);
        return SL_EINVAL;
    }
    per_epoch = (n + (batch < n ? batch : n) - 1) / (batch < n ? batch : n);
    idx = data->client_ix[a->o.client - data->first];
    evaluate_base(a, asg, data);
    if (sl__agent_uniform(a) < a->o.faults.straggle)
        factor = a->o.faults.straggle_factor > 1 ? a->o.faults.straggle_factor : 1.0;
    if (a->o.faults.slowdown > 1) /* a slow board (heterogeneous fleets): every round */
        factor *= a->o.faults.slowdown;
    memset(&orr, 0, sizeof orr);
    params = malloc(a->n * sizeof *params);
    if (params == NULL)
        rc = SL_ENOMEM;
    else if (sl__agent_uses_optim(asg) || model_has_local(a) || data->t != NULL)
        rc = optim_begin(a, asg, lr, &orr);
    else /* the path of tasks without these options, unchanged */
        rc = sl_sgd_create(a->n, &sp, &sgd);
    if (rc != SL_OK)
        goto done;
    memcpy(params, orr.start != NULL ? orr.start : a->global, a->n * sizeof *params);
    if (asg->max_steps > 0) /* a time budget: epochs enough for its steps, the last one cut */
        epochs = (uint32_t)((asg->max_steps + per_epoch - 1) / per_epoch);
    while (done < epochs) {
        uint64_t left = asg->max_steps > 0 ? asg->max_steps - steps : 0;
        sl_train_opts opts = {batch, 1, mix(seed + done), NULL, NULL, left};
        int64_t e0 = sl_clock_monotonic_ns(NULL);
        double epoch_s, elapsed_s, next_s;
        uint64_t ran, next;
        if (orr.opt != NULL && data->t != NULL) /* regression targets */
            rc =
                sl_train_opt_targets(a->model, params, orr.opt, asg->prox_mu > 0 ? orr.start : NULL,
                                     data->x, data->t, idx, n, &opts, &loss);
        else if (orr.opt != NULL)
            rc = sl_train_opt(a->model, params, orr.opt, asg->prox_mu > 0 ? orr.start : NULL,
                              data->x, data->y, idx, n, &opts, &loss);
        else
            rc = sl_train(a->model, params, sgd, asg->prox_mu > 0 ? a->global : NULL, data->x,
                          data->y, idx, n, &opts, &loss);
        if (rc != SL_OK)
            goto done;
        done++;
        ran = left > 0 && left < per_epoch ? left : per_epoch;
        steps += ran;
        epoch_s = (double)(sl_clock_monotonic_ns(NULL) - e0) * 1e-9;
        if (factor > 1 && sl__agent_sleep(a, (int64_t)((factor - 1) * epoch_s * 1000)))
            break;
        epoch_s *= factor;
        trained_s += epoch_s;
        elapsed_s = (double)(sl_clock_monotonic_ns(NULL) - t0) * 1e-9;
        sl_log(SL_LOG_INFO, "agent",
               "round %" PRId64 " epoch %u/%u loss %.4f %.2f s %.0f samples/s%s", asg->round_id,
               done, epochs, (double)loss, epoch_s, epoch_s > 0 ? (double)n / epoch_s : 0.0,
               factor > 1 ? " (straggling)" : "");
        {
            sl_agent_event ev = {.kind = SL_AGENT_EV_EPOCH,
                                 .round_id = asg->round_id,
                                 .model_version = a->version,
                                 .bytes = done,
                                 .total = epochs,
                                 .value = loss};
            sl__agent_emit(a, &ev);
        }
        if (sl__agent_stopping(a))
            break;
        if (done == epochs)
            break;
        /* budgets: the operator's, and the round's deadline (the next epoch, whole or the
         * rest of a time budget's steps at this one's pace, must leave time for the upload
         * at the measured speed) */
        next = asg->max_steps > 0 && asg->max_steps - steps < per_epoch ? asg->max_steps - steps
                                                                        : per_epoch;
        next_s = epoch_s * (double)next / (double)ran;
        if (a->o.max_train_seconds > 0 && elapsed_s + next_s > a->o.max_train_seconds)
            break;
        if (asg->deadline_ms > 0) {
            double bpnz = a->counters.bpnz_ewma > 0 ? a->counters.bpnz_ewma : 6.0;
            double upload_s = a->counters.bw_ewma > 0
                                  ? selected_count(a->layout, asg->density, asg->topk_scope) *
                                        bpnz / a->counters.bw_ewma
                                  : 1.0;
            if ((double)sl__agent_now_ms() + (next_s + upload_s) * 1000.0 >
                (double)asg->deadline_ms)
                break;
        }
    }
    if (sl__agent_stopping(a)) {
        rc = SL_ETIMEDOUT;
        goto done;
    }
    if (done < epochs)
        sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": stopped after %u of %u epochs",
               asg->round_id, done, epochs);
    if (orr.opt != NULL && (rc = optim_end(a, &orr, params)) != SL_OK)
        goto done;
    for (size_t i = 0; i < a->n; i++)
        params[i] -= a->global[i]; /* the update: local - global */
    if (asg->fednova) {
        /* FedNova: the fresh update per effective step, before compression, so the residual
         * keeps normalised mass too (codecs' sl_effective_steps) */
        double m = asg->optimizer == SL_OPTIM_SGD ? asg->momentum : 0.0;
        float inv =
            (float)(1.0 / sl_effective_steps(steps > UINT32_MAX ? UINT32_MAX : (uint32_t)steps, m));
        for (size_t i = 0; i < a->n; i++)
            params[i] *= inv;
    }
    if (a->poison == SL_AGENT_POISON_SCALE100 || a->poison == SL_AGENT_POISON_FLIP) {
        /* a poisoner (fault): error feedback, the audit and the PREPARED
         * event all see the poisoned update, as a real attacker's would */
        sl__agent_poison_update(a->poison, params, a->n);
        sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": poisoned update (%s)", asg->round_id,
               sl_agent_poison_name(a->poison));
    }
    a->counters.steps_trained += steps; /* computed, whether it reaches a model or not */
    if (steps > 0) { /* this device's pace, told at its next check-in (time budgets): the
                      * training alone (not the held-out evaluation before it) */
        double ms = trained_s * 1e3 / (double)steps;
        a->counters.step_ms_ewma =
            a->counters.step_ms_ewma > 0 ? 0.7 * a->counters.step_ms_ewma + 0.3 * ms : ms;
    }
    {
        /* the samples it used, by which FedAvg weighs the update: its client's (epochs of
         * the task's, whole); under a time budget the samples it processed, each epoch
         * counted (n a whole epoch, a batch a step of a cut one), so an update cut short
         * weighs its share of the work and does not dilute the mean of whole ones */
        uint64_t b = batch < n ? batch : n, used = n;
        if (asg->max_steps > 0)
            used = (steps / per_epoch) * n + (steps % per_epoch) * b;
        rc = prepare(a, asg, params, used > UINT32_MAX ? UINT32_MAX : (uint32_t)used,
                     steps > UINT32_MAX ? UINT32_MAX : (uint32_t)steps);
    }
done:
    if (rc != SL_OK && rc != SL_ETIMEDOUT)
        sl_log(SL_LOG_ERROR, "agent", "training: %s", sl_strerror(rc));
    sl_sgd_free(sgd);
    optim_round_free(&orr);
    free(params);
    return rc;
}

/* ---- resolving ---------------------------------------------------------------------------- */

int sl__agent_finish_resolved(sl_agent *a)
{
    const sl__agent_resolved *tag = &a->resolved;
    sl__agent_counters *c = &a->counters;
    sl_agent_event ev = {.round_id = tag->round_id,
                         .model_version = a->pending.base_version,
                         .update_id = tag->update_id,
                         .gen = tag->gen};
    int found = 0, rc;
    if (tag->outcome == SL__OUT_ACCEPTED) {
        rc = sl__agent_ack_logged(a, tag->gen, &found);
        if (rc == SL_OK && !found)
            rc = sl__agent_ack_append(a, tag);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "agent", "acks.log: %s", sl_strerror(rc));
            return rc;
        }
    }
    if (c->resolved_gen < tag->gen) {
        c->participations++;
        c->accepted += tag->outcome == SL__OUT_ACCEPTED;
        c->duplicates += tag->outcome == SL__OUT_ACCEPTED && tag->duplicate;
        c->folded += tag->outcome == SL__OUT_FOLDED;
        c->discarded += tag->outcome == SL__OUT_DISCARDED;
        c->resolved_gen = tag->gen;
    }
    if (c->last_round < tag->round_id)
        c->last_round = tag->round_id;
    if (c->next_gen <= tag->gen)
        c->next_gen = tag->gen + 1;
    rc = sl__agent_save_counters(a);
    if (rc != SL_OK)
        return rc;
    sl__agent_clear_pending(a);
    a->stats.last_round = c->last_round;
    ev.kind = tag->outcome == SL__OUT_ACCEPTED ? SL_AGENT_EV_ACCEPTED
              : tag->outcome == SL__OUT_FOLDED ? SL_AGENT_EV_FOLDED
                                               : SL_AGENT_EV_DISCARDED;
    if (ev.kind != SL_AGENT_EV_ACCEPTED)
        ev.reason = a->refusal;
    sl__agent_emit(a, &ev);
    a->refusal[0] = '\0';
    return SL_OK;
}

/* Apply @outcome to the residual and record it (the commit point). */
static int resolve(sl_agent *a, int outcome, int64_t update_id, int duplicate)
{
    sl__agent_pending *p = &a->pending;
    sl__agent_resolved tag = {p->gen, outcome, duplicate, p->round_id, update_id, {0}};
    sl_compressor *c = NULL;
    const float *res, *mu;
    int rc = sl__agent_compressor(a, SL_VALUE_FP32, p->density, p->topk_scope, p->feedback, 1.0,
                                  p->gen, &c);
    int absorb = a->absorb;
    if (rc == SL_OK && p->support != NULL)
        rc = sl_compressor_set_split(c, p->support, (uint64_t)p->support_ref);
    if (rc == SL_OK)
        rc = sl_compressor_restore(c, a->residual, a->momentum, p->acc, p->acc_mu, p->frame,
                                   p->frame_len);
    if (rc == SL_OK && outcome == SL__OUT_ACCEPTED)
        rc = sl_compressor_commit(c);
    else if (rc == SL_OK && outcome == SL__OUT_FOLDED)
        rc = sl_compressor_fold(c);
    if (rc == SL_OK)
        rc = sl_compressor_state(c, &res, &mu);
    if (rc != SL_OK) {
        sl_compressor_free(c);
        sl_log(SL_LOG_ERROR, "agent", "residual update: %s", sl_strerror(rc));
        return rc;
    }
    memcpy(a->residual, res, a->n * sizeof(float));
    if (a->momentum != NULL && mu != NULL)
        memcpy(a->momentum, mu, a->n * sizeof(float));
    sl_compressor_free(c);
    memcpy(tag.frame_sha, p->frame_sha, 32);
    /* TRACKING: the round this update goes into moves the global model; the
     * next model to arrive brings that move into the residual */
    if (outcome == SL__OUT_ACCEPTED && p->feedback == SL_EF_TRACKING)
        a->absorb = 1;
    rc = sl__agent_save_residual(a, &tag);
    if (rc != SL_OK) {
        a->absorb = absorb;
        /* the file still holds the old residual: reload it, retry later */
        sl_log(SL_LOG_ERROR, "agent", "writing the residual: %s", sl_strerror(rc));
        sl__agent_load_residual(a);
        return rc;
    }
    return sl__agent_finish_resolved(a);
}

/* ---- delivering ------------------------------------------------------------------------------ */

static void on_progress(void *ctx, const sl_client_upload_state *st, uint64_t length)
{
    sl_agent *a = ctx;
    sl__agent_pending *p = &a->pending;
    sl_agent_event ev = {.kind = SL_AGENT_EV_PROGRESS, .round_id = p->round_id, .gen = p->gen};
    if (a->crash_now)
        return; /* "crashed": nothing more reaches the disk */
    memcpy(p->upload_id, st->upload_id, sizeof p->upload_id);
    p->offset = st->offset;
    if (sl__agent_save_upload(a) != SL_OK)
        sl_log(SL_LOG_WARN, "agent", "could not persist the upload offset");
    ev.bytes = st->offset;
    ev.total = length;
    sl__agent_emit(a, &ev);
    if (a->crash_point == 2 && st->offset >= a->crash_offset && sl__agent_link_faults(a)) {
        a->crash_now = 1; /* the link goes dark mid-upload, then the process "dies" */
        sl__agent_link_dark(a, 1);
    }
}

static int crash(sl_agent *a, const char *where)
{
    sl_agent_event ev = {.kind = SL_AGENT_EV_CRASHED,
                         .round_id = a->pending.round_id,
                         .gen = a->pending.gen,
                         .reason = where};
    sl__agent_link_dark(a, 0);
    a->crash_point = 0;
    a->crash_now = 0;
    a->stats.crashes++;
    sl__agent_emit(a, &ev);
    return SL_ESTATE;
}

static void measure(sl_agent *a, uint64_t bytes, int64_t ns)
{
    sl__agent_counters *c = &a->counters;
    double k = selected_count(a->layout, a->pending.density, a->pending.topk_scope), bps;
    if (k > 0) {
        double b = (double)a->pending.frame_len / k;
        c->bpnz_ewma = c->bpnz_ewma > 0 ? EWMA_ALPHA * b + (1 - EWMA_ALPHA) * c->bpnz_ewma : b;
    }
    if (bytes < MIN_MEASURED || ns <= 0)
        return;
    bps = (double)bytes / ((double)ns * 1e-9);
    c->bw_ewma = c->bw_ewma > 0 ? EWMA_ALPHA * bps + (1 - EWMA_ALPHA) * c->bw_ewma : bps;
    a->stats.upload_bytes_per_s = c->bw_ewma;
}

/* An answer that refuses the update: fold, discard, or retry (SL_EBUSY). */
static int refused(sl_agent *a, const sl_client_response *r)
{
    char type[64], reason[64];
    sl__agent_problem(r, type, sizeof type, reason, sizeof reason);
    sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": upload refused: HTTP %ld %s %s (%s)",
           a->pending.round_id, r->status, type, reason,
           r->content_type[0] ? r->content_type : "no content type");
    snprintf(a->refusal, sizeof a->refusal, "%s", reason[0] ? reason : type);
    if (strcmp(reason, "digest_mismatch") == 0 || r->status == 403) {
        /* bytes damaged on the way (or a session that is not ours): anew */
        a->pending.upload_id[0] = '\0';
        a->pending.offset = 0;
        sl__agent_save_upload(a);
        if (++a->pending.digest_retries < DIGEST_RETRIES)
            return SL_EBUSY;
        return resolve(a, SL__OUT_DISCARDED, 0, 0);
    }
    if (strcmp(reason, "reference") == 0) /* the version it held is gone there: plain next */
        sl__agent_drop_support(a);
    if (r->status == 404 || strcmp(type, "late") == 0 || strcmp(reason, "late") == 0 ||
        strcmp(reason, "stale") == 0 || strcmp(reason, "unknown_round") == 0 ||
        strcmp(reason, "not_selected") == 0 || strcmp(reason, "reference") == 0)
        return resolve(a, SL__OUT_FOLDED, 0, 0);
    return resolve(a, SL__OUT_DISCARDED, 0, 0);
}

int sl__agent_deliver(sl_agent *a)
{
    sl__agent_pending *p = &a->pending;
    sl_client_upload_state st;
    sl_client_response r;
    const void *wire = p->frame;
    void *poisoned = NULL;
    size_t wire_len = p->frame_len;
    uint64_t start;
    int64_t t0;
    char why[160];
    int rc;

    if (a->crash_point == 1)
        return crash(a, "before the upload");
    if (a->poison == SL_AGENT_POISON_NAN) {
        /* a poisoner (fault): only the bytes on the wire carry the NaN; the
         * same bytes at every attempt, so a cut upload resumes */
        rc = sl__agent_poison_frame(a->layout, p->frame, p->frame_len, &poisoned, &wire_len);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "agent", "round %" PRId64 ": poisoning the frame: %s", p->round_id,
                   sl_strerror(rc));
            return rc;
        }
        wire = poisoned;
        sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": poisoned frame (nan), %zu bytes",
               p->round_id, wire_len);
    }
    memset(&st, 0, sizeof st);
    memcpy(st.upload_id, p->upload_id, sizeof st.upload_id);
    st.offset = p->offset;
    st.progress = on_progress;
    st.progress_ctx = a;
    start = p->offset;
    /* headers of a PATCH and its answer are about 700 bytes */
    sl__agent_maybe_cut(a, wire_len - (p->offset < wire_len ? p->offset : 0) + 700);
    t0 = sl_clock_monotonic_ns(NULL);
    rc = sl_client_upload_steps(a->client, p->round_id, wire, wire_len, p->num_samples,
                                p->local_steps, &st, &r);
    free(poisoned);
    sl__agent_disarm(a);
    if (a->crash_now) {
        if (rc == SL_OK)
            sl_client_response_free(&r);
        return crash(a, "mid-upload");
    }
    if (rc == SL_OK && a->crash_point == 3) {
        sl_client_response_free(&r);
        return crash(a, "after the answer");
    }
    if (rc != SL_OK) {
        sl_log(SL_LOG_WARN, "agent", "round %" PRId64 ": upload at %" PRIu64 "/%zu: %s",
               p->round_id, p->offset, p->frame_len, sl_strerror(rc));
        if (rc == SL_EINVAL && p->upload_id[0] != '\0') {
            /* a damaged upload id: start a new upload of the same frame */
            p->upload_id[0] = '\0';
            p->offset = 0;
            sl__agent_save_upload(a);
            return SL_EBUSY;
        }
        return rc;
    }
    if (r.status == 200 || r.status == 201) {
        cJSON *doc = cJSON_ParseWithLength((const char *)r.body, r.body_len);
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(doc, "accepted");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "update_id");
        const cJSON *dup = cJSON_GetObjectItemCaseSensitive(doc, "duplicate");
        int64_t update_id = cJSON_IsNumber(id) ? (int64_t)id->valuedouble : 0;
        int duplicate = cJSON_IsTrue(dup);
        int accepted = cJSON_IsTrue(ok) && update_id > 0;
        cJSON_Delete(doc);
        sl_client_response_free(&r);
        if (!accepted) {
            sl_log(SL_LOG_WARN, "agent", "round %" PRId64 ": a 200 without a receipt", p->round_id);
            return SL_EBUSY;
        }
        a->stats.bytes_up += p->frame_len - start;
        measure(a, p->frame_len - start, sl_clock_monotonic_ns(NULL) - t0);
        sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": accepted as update %" PRId64 "%s",
               p->round_id, update_id, duplicate ? " (a retry: duplicate)" : "");
        return resolve(a, SL__OUT_ACCEPTED, update_id, duplicate);
    }
    if (r.status == 404 || r.status == 409 || r.status == 410 || r.status == 413 ||
        r.status == 422 || r.status == 403 || r.status == 400) {
        rc = refused(a, &r);
        sl_client_response_free(&r);
        return rc;
    }
    sl_log(SL_LOG_WARN, "agent", "round %" PRId64 ": upload: %s", p->round_id,
           sl__agent_failure(SL_OK, &r, why, sizeof why));
    sl_client_response_free(&r);
    return SL_EBUSY;
}
