/*
 * agent.c - an agent's life: options, opening the state directory and
 * finishing what a killed run left, and the device loop (the program, at the
 * top of the agent's layers: agent_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_int.h"

static const char *const event_names[] = {
    "enrolled", "checkin",   "model",   "epoch",   "prepared",  "progress", "accepted",
    "folded",   "discarded", "dropped", "crashed", "evaluated", "download"};

const char *sl_agent_event_name(sl_agent_event_kind kind)
{
    return (unsigned)kind < sizeof event_names / sizeof event_names[0] ? event_names[kind] : "?";
}

void sl_agent_options_default(sl_agent_options *o)
{
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->sessions = 1;
    o->chunk_bytes = 64 * 1024;
    o->download_chunk_bytes = 256 * 1024;
    o->max_attempts = 5;
    o->retry_base_ms = 500;
    o->request_timeout_ms = 120000;
    o->stall_timeout_ms = 30000;
    o->max_wait_ms = 60000;
    o->max_nodes = 4096;
    o->max_params = (uint64_t)1 << 24;
    o->memory_budget = (uint64_t)512 << 20;
    o->bandwidth_aware = 1;
    o->split_positions = 1;
    o->min_density_fraction = 0.1;
    o->eval_interval_ms = 2000;
    o->faults.cut_span = 64 * 1024;
    o->faults.straggle_factor = 1.0;
    o->faults.slowdown = 1.0;
    o->speed_max = 1.0;
    o->seed = 1;
    o->data_memory = (uint64_t)256 << 20;
    o->data_refresh_ms = 5000;
}

/* At start, without a spec: the registry model named by the options, else the one the cached
 * model's layout names (none yet: the first model downloaded names it). */
static int registry_model(sl_agent *a)
{
    sl_model *m = NULL;
    uint64_t hash;
    int rc;
    if (a->o.model != NULL && a->o.model[0] != '\0') {
        rc = sl_model_create(a->o.model, &m);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "agent", "model %s: %s", a->o.model, sl_strerror(rc));
            return rc == SL_ENOENT ? SL_EINVAL : rc;
        }
        return sl__agent_set_model(a, m);
    }
    if (sl__agent_cached_layout(a, &hash) != SL_OK || sl__agent_registry_model(hash, &m) != SL_OK)
        return SL_OK;
    return sl__agent_set_model(a, m);
}

/* Killed after a pending upload's outcome was recorded: finish it (log, counters). */
static int finish_resolved(sl_agent *a)
{
    if (!a->pending.present || a->resolved.gen != a->pending.gen)
        return SL_OK;
    sl_log(SL_LOG_INFO, "agent", "finishing the resolved upload of round %" PRId64,
           a->pending.round_id);
    return sl__agent_finish_resolved(a);
}

int sl__agent_use_relay(sl_agent *a, sl__agent_relay *relay)
{
    const char *after = strstr(a->o.coordinator, "://"), *path;
    if (relay == NULL || after == NULL || strncmp(a->o.coordinator, "http://", 7) != 0)
        return SL_EINVAL;
    path = strchr(after + 3, '/');
    snprintf(a->url_buf, sizeof a->url_buf, "http://127.0.0.1:%d%s", sl__agent_relay_port(relay),
             path ? path : "");
    a->url = a->url_buf;
    a->link = relay; /* its faults come through the hooks (runtime.c) */
    a->link_hooks = &sl__agent_relay_hooks;
    sl_client_free(a->client);
    a->client = NULL;
    return SL_OK;
}

/* ---- create / free -------------------------------------------------------------------- */

int sl_agent_create(const sl_agent_options *o, sl_agent **out, char *err, size_t errcap)
{
    sl_agent *a;
    int rc;
    if (o == NULL || out == NULL || o->coordinator == NULL || o->state_dir == NULL ||
        o->task_id <= 0) {
        if (err != NULL)
            snprintf(err, errcap, "the coordinator URL, a task and a state directory are needed");
        return SL_EINVAL;
    }
    a = calloc(1, sizeof *a);
    if (a == NULL)
        return SL_ENOMEM;
    a->o = *o;
    a->url = o->coordinator;
    a->rng = (o->seed ^ 0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL + o->client;
    if (a->rng == 0)
        a->rng = 1;
    a->poison = sl__agent_poison_draw(o);
    if (snprintf(a->dir, sizeof a->dir, "%s", o->state_dir) >= (int)sizeof a->dir) {
        free(a);
        return SL_ETOOBIG;
    }
    rc = sl__agent_state_open(a, err, errcap);
    if (rc == SL_OK)
        rc = sl__agent_repair_log(a);
    if (rc == SL_OK)
        rc = sl__agent_load_counters(a);
    if (rc == SL_OK)
        sl__agent_read_i64(a, "device.id", &a->device_id);
    if (rc == SL_OK)
        rc = sl__agent_restore_spec(a); /* the task's model spec, as cached */
    if (rc == SL_OK)
        rc = sl__agent_restore_contract(a); /* the device's own data, as the task wants it */
    if (rc == SL_OK && a->model == NULL)
        rc = registry_model(a);
    if (rc == SL_OK && a->model != NULL) {
        int mrc = sl__agent_load_model(a);
        if (mrc == SL_ELAYOUT)
            rc = mrc;
    }
    if (rc == SL_OK)
        rc = finish_resolved(a);
    if (rc != SL_OK) {
        if (err != NULL && (err[0] == '\0' || rc != SL_EIO))
            snprintf(err, errcap, "state directory %s: %s", a->dir, sl_strerror(rc));
        sl_agent_free(a);
        return rc;
    }
    a->stats.device_id = a->device_id;
    a->stats.model_version = a->version;
    a->stats.last_round = a->counters.last_round;
    a->stats.upload_bytes_per_s = a->counters.bw_ewma;
    *out = a;
    return SL_OK;
}

void sl_agent_free(sl_agent *a)
{
    if (a == NULL)
        return;
    sl_client_free(a->client);
    sl_device_key_free(a->key);
    sl_model_free(a->model);
    sl_spec_free(a->spec);
    sl__agent_live_free(a->live);
    free(a->global);
    sl_support_free(a->split);
    free(a->residual);
    free(a->momentum);
    sl__agent_pending_free(&a->pending);
    free(a);
}

void sl_agent_stop(sl_agent *a)
{
    if (a != NULL)
        a->stopped = 1;
}

int sl_agent_get_stats(const sl_agent *a, sl_agent_stats *out)
{
    if (a == NULL || out == NULL)
        return SL_EINVAL;
    *out = a->stats;
    out->device_id = a->device_id;
    out->participations = a->counters.participations;
    out->accepted = a->counters.accepted;
    out->duplicates = a->counters.duplicates;
    out->folded = a->counters.folded;
    out->discarded = a->counters.discarded;
    out->dropped = a->counters.dropped;
    out->last_round = a->counters.last_round;
    out->upload_bytes_per_s = a->counters.bw_ewma;
    out->poison = a->poison;
    return SL_OK;
}

const float *sl_agent_residual(const sl_agent *a, size_t *n)
{
    if (a == NULL || a->residual == NULL) {
        if (n != NULL)
            *n = 0;
        return NULL;
    }
    if (n != NULL)
        *n = a->n;
    return a->residual;
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* Wait after @failures failures in a row: base * 2^failures, capped, jittered. */
static int backoff(sl_agent *a, unsigned *failures)
{
    double ms = (double)a->o.retry_base_ms * pow(2.0, *failures < 16 ? *failures : 16);
    if (ms > (double)a->o.max_wait_ms)
        ms = (double)a->o.max_wait_ms;
    ms *= 0.5 + 0.5 * sl__agent_uniform(a);
    (*failures)++;
    return sl__agent_sleep(a, (int64_t)ms);
}

/* A pointless-to-retry status ends the loop. */
static int fatal(int rc)
{
    return rc == SL_EPERM || rc == SL_ELAYOUT || rc == SL_EINVAL || rc == SL_ESTATE ||
           rc == SL_ENOMEM;
}

/* Sit round @asg out for good (@why: "fault", "nonfinite"): counted as dropped. */
static int drop_out(sl_agent *a, const sl__agent_assignment *asg, const char *why)
{
    sl_agent_event ev = {.kind = SL_AGENT_EV_DROPPED,
                         .round_id = asg->round_id,
                         .model_version = asg->model_version,
                         .reason = why};
    a->counters.dropped++;
    a->counters.participations++;
    if (a->counters.last_round < asg->round_id)
        a->counters.last_round = asg->round_id;
    sl_log(SL_LOG_INFO, "agent", "round %" PRId64 ": dropping out (%s)", asg->round_id, why);
    sl__agent_emit(a, &ev);
    return sl__agent_save_counters(a);
}

int sl_agent_run(sl_agent *a)
{
    uint64_t start;
    uint32_t rounds;
    unsigned failures = 0;
    int rc;
    if (a == NULL)
        return SL_EINVAL;
    start = a->counters.participations;
    rounds = a->o.rounds == 0 && a->o.once ? 1 : a->o.rounds;
    if (a->o.threads > 0)
        sl_nn_set_threads(a->o.threads);
    while ((rc = sl__agent_enrol(a)) != SL_OK) {
        if (fatal(rc) || backoff(a, &failures))
            return fatal(rc) ? rc : SL_OK;
    }
    failures = 0;
    while (!sl__agent_stopping(a)) {
        sl__agent_assignment asg;
        sl_agent_event ev = {.kind = SL_AGENT_EV_CHECKIN};
        uint64_t bytes = 0;
        if (rounds > 0 && a->counters.participations - start >= rounds)
            break;
        if (a->pending.present) {
            rc = sl__agent_deliver(a);
            if (rc == SL_OK)
                failures = 0;
            else if (fatal(rc))
                return rc;
            else if (backoff(a, &failures))
                break;
            continue;
        }
        rc = sl__agent_refresh_data(a, 0); /* the samples that arrived: their count goes */
        if (rc != SL_OK)
            return rc;
        rc = sl__agent_checkin(a, &asg);
        if (rc != SL_OK) {
            if (fatal(rc) && rc != SL_EINVAL)
                return rc;
            if (backoff(a, &failures))
                break;
            continue;
        }
        failures = 0;
        if (asg.model_spec_sha256[0] != '\0') {
            rc = sl__agent_take_spec(a, asg.model_spec_sha256, asg.batch);
            if (rc != SL_OK) {
                if (fatal(rc))
                    return rc;
                if (backoff(a, &failures))
                    break;
                continue;
            }
            if (a->spec_refusal[0] != '\0') {
                int64_t wait = asg.retry_after_ms < 1000 ? 1000 : asg.retry_after_ms;
                if (!a->spec_refusal_sent)
                    continue; /* check in again at once, saying why */
                if (a->o.once || a->o.rounds > 0) {
                    sl_log(SL_LOG_ERROR, "agent", "task %" PRId64 ": %s", a->o.task_id,
                           a->spec_refusal);
                    return SL_EUNSUPPORTED;
                }
                /* the coordinator does not select a device that refuses: it asks it back
                 * rarely (a new configuration of the device takes a restart) */
                sl__agent_sleep(a, wait < a->o.max_wait_ms ? wait : a->o.max_wait_ms);
                continue;
            }
        }
        rc = sl__agent_take_contract(a, asg.data_contract_sha256);
        if (rc != SL_OK) {
            if (fatal(rc))
                return rc;
            if (backoff(a, &failures))
                break;
            continue;
        }
        if (a->spec_refusal[0] == '\0' && a->data_refusal[0] != '\0') {
            int64_t wait = asg.retry_after_ms < 1000 ? 1000 : asg.retry_after_ms;
            if (!a->data_refusal_sent)
                continue; /* check in again at once, saying why */
            if (a->o.once || a->o.rounds > 0)
                return SL_EUNSUPPORTED;
            /* not selected while it lasts; the data is read again before the next check-in */
            sl__agent_sleep(a, wait < a->o.max_wait_ms ? wait : a->o.max_wait_ms);
            continue;
        }
        ev.round_id = asg.round_id;
        ev.model_version = asg.model_version;
        ev.value = asg.selected;
        ev.wait_ms = asg.retry_after_ms;
        sl__agent_emit(a, &ev);
        if (!asg.selected) {
            int64_t wait = asg.retry_after_ms < 50 ? 50 : asg.retry_after_ms;
            sl_log(SL_LOG_DEBUG, "agent", "not selected; next check-in in %" PRId64 " ms", wait);
            sl__agent_sleep(a, wait < a->o.max_wait_ms ? wait : a->o.max_wait_ms);
            continue;
        }
        if (asg.round_id <= a->counters.last_round) {
            /* done with this round already (a retry of check-in is idempotent) */
            int64_t wait = asg.deadline_ms - sl__agent_now_ms();
            /* the coordinator's guess of when the round closes: rounds end early at target */
            if (asg.retry_after_ms > 0 && asg.retry_after_ms < wait)
                wait = asg.retry_after_ms;
            wait = wait < 200 ? 200 : wait;
            sl__agent_sleep(a, wait < a->o.max_wait_ms ? wait : a->o.max_wait_ms);
            continue;
        }
        rc = sl__agent_fetch_model(a, asg.model_version, &bytes);
        if (rc != SL_OK) {
            if (fatal(rc))
                return rc;
            if (backoff(a, &failures))
                break;
            continue;
        }
        rc = finish_resolved(a); /* a pending upload found with the first model */
        if (rc != SL_OK)
            return rc;
        {
            sl_agent_event mev = {.kind = SL_AGENT_EV_MODEL,
                                  .round_id = asg.round_id,
                                  .model_version = asg.model_version,
                                  .bytes = bytes};
            sl__agent_emit(a, &mev);
        }
        if (sl__agent_uniform(a) < a->o.faults.dropout) {
            drop_out(a, &asg, "fault");
            continue;
        }
        if ((rc = sl__agent_refresh_data(a, 1)) != SL_OK) /* train on every sample there is */
            return rc;
        if (a->data_refusal[0] != '\0' && strncmp(a->data_refusal, "too few", 7) != 0) {
            drop_out(a, &asg, "no usable data");
            continue;
        }
        rc = sl__agent_train_round(a, &asg);
        if (rc == SL_ETIMEDOUT)
            break; /* stopped while training: nothing was persisted */
        if (rc == SL_ENONFINITE) {
            /* the model diverged (NaN/Inf loss or update): training this
             * version again gives the same, so sit the round out instead of
             * retraining it until its deadline; nothing was persisted and
             * the residual is untouched */
            sl_log(SL_LOG_WARN, "agent",
                   "round %" PRId64 ": the update of model version %" PRId64
                   " is not finite (a diverged model?)",
                   asg.round_id, asg.model_version);
            drop_out(a, &asg, "nonfinite");
            continue;
        }
        if (rc != SL_OK) {
            if (fatal(rc))
                return rc;
            if (backoff(a, &failures))
                break;
        }
    }
    return SL_OK;
}
