/*
 * import_graph.c - building the spec: its tensors (unique, sanitised
 * names), its parameters (named after the initializers they are, or were
 * computed from), its nodes (JSON text), and activation views made plain.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

sl__value *sl__val(sl__imp *m, const char *name)
{
    int32_t k;
    if (name == NULL || name[0] == '\0')
        return NULL;
    k = sl__map_get(&m->vmap, name);
    return k < 0 ? NULL : &m->v[k];
}

int sl__tensor_new(sl__imp *m, const char *onnx_name, const uint32_t *shape, size_t ndim,
                   int32_t *out)
{
    char base[SL__ONNX_NAME + 1], name[SL__ONNX_NAME + 1];
    sl__stensor *t;
    if (ndim > 6)
        return sl__imp_fail(m, SL_EUNSUPPORTED, "a tensor of %zu axes per sample (%.64s)", ndim,
                            onnx_name);
    sl__sanitize(onnx_name[0] ? onnx_name : "t", base, sizeof base);
    snprintf(name, sizeof name, "%s", base);
    for (unsigned k = 1; sl__map_get(&m->tmap, name) >= 0; k++) {
        char suffix[16];
        int n = snprintf(suffix, sizeof suffix, "_%u", k);
        snprintf(name, sizeof name, "%.*s%s", SL__ONNX_NAME - n, base, suffix);
    }
    if (m->nt == m->capt) {
        size_t cap = m->capt ? m->capt * 2 : 64;
        sl__stensor *p = realloc(m->t, cap * sizeof *p);
        if (p == NULL)
            return sl__imp_fail(m, SL_ENOMEM, "out of memory");
        m->t = p;
        m->capt = cap;
    }
    t = &m->t[m->nt];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (t->name == NULL)
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    t->ndim = (uint8_t)ndim;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    if (sl__map_put(&m->tmap, t->name, (int32_t)m->nt) != SL_OK) {
        free(t->name);
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    }
    *out = (int32_t)m->nt++;
    return SL_OK;
}

void sl__set_act(sl__imp *m, const char *name, int32_t t)
{
    sl__value *v = sl__val(m, name);
    if (v == NULL)
        return;
    sl__const_free(&v->c);
    v->kind = SL__V_ACT;
    v->a.t = t;
    v->a.rank = (uint8_t)(m->t[t].ndim + 1);
    v->a.map[0] = SL__AX_BATCH;
    for (int k = 0; k < m->t[t].ndim; k++)
        v->a.map[k + 1] = (int8_t)k;
}

int sl__materialize(sl__imp *m, const Onnx__NodeProto *nd, sl__value *v, int32_t *out)
{
    const sl__view *a = &v->a;
    const sl__stensor *src = &m->t[a->t];
    int32_t order[SL__ONNX_RANK], units[SL__ONNX_RANK], t = a->t;
    size_t norder = 0, nunits = 0, transposed = 0;
    char attrs[160];
    int rc;
    if (a->map[0] != SL__AX_BATCH) {
        int at = 0;
        while (at < a->rank && a->map[at] != SL__AX_BATCH)
            at++;
        return sl__imp_unsupported(m, nd, "%.64s has the batch on axis %d, not 0", v->name, at);
    }
    for (size_t d = 1; d < a->rank; d++) {
        if (a->map[d] >= 0)
            order[norder++] = a->map[d];
        else if (a->map[d] == SL__AX_UNIT)
            units[nunits++] = (int32_t)(d - 1);
        else
            return sl__imp_unsupported(m, nd, "input %.64s has two batch axes", v->name);
    }
    for (size_t k = 0; k < norder; k++)
        transposed |= order[k] != (int32_t)k;
    if (transposed) {
        uint32_t shape[6];
        size_t o = 0;
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"perm\": [");
        for (size_t k = 0; k < norder; k++) {
            shape[k] = src->shape[order[k]];
            o += (size_t)snprintf(attrs + o, sizeof attrs - o, "%s%d", k ? ", " : "", order[k]);
        }
        snprintf(attrs + o, sizeof attrs - o, "]");
        if ((rc = sl__tensor_new(m, v->name, shape, norder, &t)) != SL_OK ||
            (rc = sl__emit(m, "Transpose", nd, &a->t, 1, &t, 1, attrs)) != SL_OK)
            return rc;
    }
    if (nunits > 0) {
        uint32_t shape[6];
        const sl__stensor *x = &m->t[t];
        int32_t in = t;
        size_t o = 0, j = 0;
        if (a->rank - 1 > 6)
            return sl__imp_unsupported(m, nd, "more than 6 axes per sample");
        o += (size_t)snprintf(attrs + o, sizeof attrs - o, "\"axes\": [");
        for (size_t k = 0; k < nunits; k++)
            o += (size_t)snprintf(attrs + o, sizeof attrs - o, "%s%d", k ? ", " : "", units[k]);
        snprintf(attrs + o, sizeof attrs - o, "]");
        for (size_t d = 0, u = 0; d + 1 < a->rank; d++) {
            if (u < nunits && units[u] == (int32_t)d) {
                shape[d] = 1;
                u++;
            } else {
                shape[d] = x->shape[j++];
            }
        }
        if ((rc = sl__tensor_new(m, v->name, shape, a->rank - 1, &t)) != SL_OK ||
            (rc = sl__emit(m, "Unsqueeze", nd, &in, 1, &t, 1, attrs)) != SL_OK)
            return rc;
    }
    if (t != a->t && sl__val(m, v->name) == v) /* not for a caller's temporary view */
        sl__set_act(m, v->name, t);
    *out = t;
    return SL_OK;
}

/* The value of initializer @k. */
static const sl__value *init_value(sl__imp *m, int32_t k)
{
    if (k < 0 || (size_t)k >= m->g->n_initializer)
        return NULL;
    return sl__val(m, m->g->initializer[k]->name);
}

static int add_param(sl__imp *m, const char *name, float *data, const uint32_t *shape, size_t ndim,
                     double key, int32_t onnx_init, uint64_t fan_in, const char *init,
                     uint8_t buffer, int32_t *t)
{
    sl__sparam *p;
    int rc;
    if (ndim == 0 || ndim > 6) {
        free(data);
        return sl__imp_fail(m, SL_EUNSUPPORTED, "parameter %.64s has %zu axes (1 to 6)", name,
                            ndim);
    }
    for (size_t d = 0; d < ndim; d++)
        if (shape[d] == 0) {
            free(data);
            return sl__imp_fail(m, SL_EUNSUPPORTED, "parameter %.64s is empty", name);
        }
    if (m->np == m->capp) {
        size_t cap = m->capp ? m->capp * 2 : 32;
        sl__sparam *q = realloc(m->p, cap * sizeof *q);
        if (q == NULL) {
            free(data);
            return sl__imp_fail(m, SL_ENOMEM, "out of memory");
        }
        m->p = q;
        m->capp = cap;
    }
    if ((rc = sl__tensor_new(m, name, shape, ndim, t)) != SL_OK) {
        free(data);
        return rc;
    }
    p = &m->p[m->np++];
    memset(p, 0, sizeof *p);
    p->t = *t;
    p->data = data;
    p->count = 1;
    for (size_t d = 0; d < ndim; d++)
        p->count *= shape[d];
    p->key = key;
    p->onnx_init = onnx_init;
    p->fan_in = fan_in;
    p->init = init;
    p->buffer = buffer;
    return SL_OK;
}

int sl__param_data(sl__imp *m, const char *name, float *data, const uint32_t *shape, size_t ndim,
                   double key, int32_t onnx_init, uint64_t fan_in, int32_t *t)
{
    return add_param(m, name, data, shape, ndim, key, onnx_init, fan_in, NULL, 0, t);
}

int sl__param(sl__imp *m, const Onnx__NodeProto *nd, sl__value *v, const uint32_t *shape,
              size_t ndim, const char *init, uint8_t buffer, int32_t *t)
{
    const sl__cval *c = &v->c;
    const char *name = v->name;
    uint32_t dims[6];
    int32_t onnx_init = -1, existing;
    double key = 1e12;
    float *data;
    if (v->kind != SL__V_CONST || c->fill || c->dtype != SL__DT_FLOAT)
        return sl__imp_unsupported(m, nd, "%.64s is not a float32 tensor of the model", v->name);
    if (c->nsrc == 0)
        return sl__imp_unsupported(m, nd,
                                   "%.64s is a constant, not a parameter (the spec has no "
                                   "constants: fold it into the weights)",
                                   v->name);
    if (shape == NULL) {
        if (c->ndim > 6)
            return sl__imp_unsupported(m, nd, "%.64s has %u axes", v->name, c->ndim);
        ndim = c->ndim ? c->ndim : 1;
        dims[0] = 1;
        for (size_t d = 0; d < c->ndim; d++)
            dims[d] = (uint32_t)c->dims[d];
        shape = dims;
    }
    if (c->init >= 0) {
        onnx_init = c->init;
    } else if (c->nsrc == 1) {
        const sl__value *s = init_value(m, c->src[0]);
        if (s != NULL && s->c.count == c->count && s->c.ndim == c->ndim &&
            memcmp(s->c.dims, c->dims, c->ndim * sizeof *c->dims) == 0 &&
            memcmp(s->c.f, c->f, c->count * sizeof *c->f) == 0)
            onnx_init = c->src[0];
    }
    if (onnx_init >= 0) {
        name = m->g->initializer[onnx_init]->name;
        key = onnx_init;
    } else if (c->nsrc > 0) {
        key = c->src[0] + 0.5;
        for (int k = 1; k < c->nsrc; k++)
            if (c->src[k] + 0.5 < key)
                key = c->src[k] + 0.5;
    }
    /* the same tensor read twice (shared weights): one parameter */
    {
        char clean[SL__ONNX_NAME + 1];
        sl__sanitize(name, clean, sizeof clean);
        existing = sl__map_get(&m->tmap, clean);
    }
    if (existing >= 0) {
        for (size_t k = 0; k < m->np; k++) {
            const sl__stensor *e = &m->t[m->p[k].t];
            if (m->p[k].t == existing && m->p[k].count == c->count && e->ndim == ndim &&
                memcmp(e->shape, shape, ndim * sizeof *shape) == 0 &&
                memcmp(m->p[k].data, c->f, c->count * sizeof *c->f) == 0) {
                *t = existing;
                return SL_OK;
            }
        }
    }
    data = malloc((c->count ? c->count : 1) * sizeof *data);
    if (data == NULL)
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    memcpy(data, c->f, c->count * sizeof *data);
    return add_param(m, name, data, shape, ndim, key, onnx_init, 0, init, buffer, t);
}

int sl__emit(sl__imp *m, const char *op, const Onnx__NodeProto *nd, const int32_t *in, size_t nin,
             const int32_t *out, size_t nout, const char *attrs)
{
    char name[SL__ONNX_NAME + 1];
    sl__sb *sb = &m->nodes;
    sl__sanitize(nd->name ? nd->name : "", name, sizeof name);
    sl__sb_printf(sb, "%s\n  {\"op\": \"%s\"", m->nnodes ? "," : "", op);
    if (name[0])
        sl__sb_printf(sb, ", \"name\": \"%s\"", name);
    sl__sb_printf(sb, ", \"inputs\": [");
    for (size_t k = 0; k < nin; k++)
        sl__sb_printf(sb, "%s\"%s\"", k ? ", " : "", in[k] >= 0 ? m->t[in[k]].name : "");
    sl__sb_printf(sb, "], \"outputs\": [");
    for (size_t k = 0; k < nout; k++)
        sl__sb_printf(sb, "%s\"%s\"", k ? ", " : "", out[k] >= 0 ? m->t[out[k]].name : "");
    sl__sb_printf(sb, "]");
    if (attrs != NULL && attrs[0] != '\0')
        sl__sb_printf(sb, ", \"attrs\": {%s}", attrs);
    sl__sb_printf(sb, "}");
    m->nnodes++;
    if (sb->oom)
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    return SL_OK;
}
