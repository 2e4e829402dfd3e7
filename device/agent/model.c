/*
 * model.c - the model the agent trains: a registry model found by its
 * layout (tasks without a model spec), or the task's spec (spec.c), and the
 * vectors and saved state that depend on its layout. Below the transport
 * (net.c takes its first model through here) and above the state directory.
 */
#include <inttypes.h>
#include <stdlib.h>

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
