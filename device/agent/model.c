/*
 * model.c - the model the agent trains: a registry model found by its
 * layout (tasks without a model spec), or the task's spec (spec.c), and the
 * vectors and saved state that depend on its layout, with error feedback's
 * compressor over them (built afresh from the persisted vectors at every
 * step) and tracking's absorption of the model's move. Below the transport
 * (net.c takes its first model and absorbs each new one through here) and
 * above the state directory.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"

int sl__agent_registry_model(uint64_t hash, sl_model **out)
{
    for (const char *const *nm = sl_model_names(); *nm != NULL; nm++) {
        sl_model *m = NULL;
        if (sl_model_create(*nm, &m) != SL_OK)
            continue;
        if (sl_layout_hash(sl_model_layout(m)) == hash) {
            *out = m;
            return SL_OK;
        }
        sl_model_free(m);
    }
    sl_log(SL_LOG_ERROR, "agent", "no registry model has layout %016" PRIx64, hash);
    return SL_ENOENT;
}

int sl__agent_set_model(sl_agent *a, sl_model *m)
{
    int rc;
    if (a->model != NULL) {
        /* the same layout (a spec that arrived for the registry model that served so far) */
        if (!sl_layout_equal(sl_model_layout(m), a->layout)) {
            sl_model_free(m);
            return SL_ELAYOUT;
        }
        sl_model_free(a->model);
        a->model = m;
        a->layout = sl_model_layout(m);
        return SL_OK;
    }
    a->model = m;
    a->layout = sl_model_layout(m);
    a->n = sl_model_params(m);
    a->residual = malloc(a->n * sizeof(float));
    a->momentum = a->o.dgc_momentum > 0 ? malloc(a->n * sizeof(float)) : NULL;
    if (a->residual == NULL || (a->o.dgc_momentum > 0 && a->momentum == NULL))
        return SL_ENOMEM;
    rc = sl__agent_load_residual(a);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "agent", "residual in %s: %s", a->dir, sl_strerror(rc));
        return rc;
    }
    return sl__agent_load_pending(a);
}

/* ---- error feedback's vectors ------------------------------------------------------------ */

int sl__agent_compressor(const sl_agent *a, sl_value_mode values, double density,
                         sl_topk_scope scope, sl_error_feedback feedback, double decay,
                         uint64_t seed, sl_compressor **out)
{
    sl_compress_params p;
    sl_compress_params_default(&p);
    p.encode.values = values;
    p.scope = scope;
    p.feedback = feedback;
    p.residual_decay = decay;
    p.encode.seed = seed;
    p.density = density > 0 && density <= 1 ? density : 1.0;
    p.warmup_rounds = 0; /* the warm-up is applied in the density handed over */
    p.momentum = a->momentum ? a->o.dgc_momentum : 0.0;
    return sl_compressor_create(a->layout, &p, out);
}

int sl__agent_absorb(sl_agent *a, const float *next, int64_t version)
{
    sl_compressor *c = NULL;
    const float *res, *mu;
    int rc;
    if (!a->absorb || a->global == NULL || a->version < 1 || version <= a->version)
        return SL_OK;
    rc = sl__agent_compressor(a, SL_VALUE_FP32, 1.0, SL_TOPK_MODEL, SL_EF_TRACKING, 1.0, 0, &c);
    if (rc == SL_OK)
        rc = sl_compressor_restore(c, a->residual, a->momentum, NULL, NULL, NULL, 0);
    if (rc == SL_OK)
        rc = sl_compressor_absorb(c, a->global, next, (double)(version - a->version));
    if (rc == SL_OK)
        rc = sl_compressor_state(c, &res, &mu);
    if (rc == SL_OK) {
        float *keep = malloc(a->n * sizeof *keep);
        if (keep == NULL) {
            rc = SL_ENOMEM;
        } else {
            memcpy(keep, a->residual, a->n * sizeof *keep);
            memcpy(a->residual, res, a->n * sizeof(float));
            a->absorb = 0;
            rc = sl__agent_save_residual(a, &a->resolved);
            if (rc != SL_OK) { /* the file holds the old state: so does memory */
                memcpy(a->residual, keep, a->n * sizeof *keep);
                a->absorb = 1;
            }
            free(keep);
        }
    }
    sl_compressor_free(c);
    if (rc != SL_OK)
        sl_log(SL_LOG_ERROR, "agent", "absorbing model %" PRId64 " into the residual: %s", version,
               sl_strerror(rc));
    return rc;
}
