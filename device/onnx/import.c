/*
 * import.c - sl_onnx_import(): unpack the ModelProto (protobuf-c), check
 * the opset, read the graph inputs (batch first) and initializers, keep
 * only the nodes that reach the output, fold or translate each in order,
 * and write the spec: inputs, parameters in initializer order (a TRAINING
 * export's is the state_dict's), nodes, output, loss. The spec is parsed
 * before it is returned, so a caller never sees one sl_spec_parse() refuses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

static void set_err(char *err, size_t errcap, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errcap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
}

static int new_value(sl__imp *m, const char *name, int32_t producer)
{
    sl__value *v;
    if (name == NULL || name[0] == '\0')
        return SL_OK;
    if (sl__map_get(&m->vmap, name) >= 0)
        return sl__imp_fail(m, SL_ECORRUPT, "tensor %.64s is produced twice", name);
    v = &m->v[m->nv];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->producer = producer;
    v->c.init = -1;
    if (sl__map_put(&m->vmap, name, (int32_t)m->nv) != SL_OK)
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    m->nv++;
    return SL_OK;
}

/* protobuf-c leaves an absent optional string NULL: the importer reads names, op types and
 * tensor references everywhere, so a graph without them is refused here, once (PyTorch's
 * exports always have them). The reason names the first one missing. */
static int well_formed(const Onnx__GraphProto *g, char *why, size_t cap)
{
    for (size_t k = 0; k < g->n_node; k++) {
        const Onnx__NodeProto *nd = g->node[k];
        if (nd->op_type == NULL || nd->name == NULL) {
            snprintf(why, cap, "node %zu has no %s", k, nd->op_type == NULL ? "op_type" : "name");
            return 0;
        }
        for (size_t i = 0; i < nd->n_input; i++)
            if (nd->input[i] == NULL) {
                snprintf(why, cap, "node %.64s: input %zu has no name", nd->name, i);
                return 0;
            }
        for (size_t i = 0; i < nd->n_output; i++)
            if (nd->output[i] == NULL) {
                snprintf(why, cap, "node %.64s: output %zu has no name", nd->name, i);
                return 0;
            }
        for (size_t i = 0; i < nd->n_attribute; i++)
            if (nd->attribute[i]->name == NULL) {
                snprintf(why, cap, "node %.64s: attribute %zu has no name", nd->name, i);
                return 0;
            }
    }
    for (size_t k = 0; k < g->n_initializer; k++)
        if (g->initializer[k]->name == NULL) {
            snprintf(why, cap, "initializer %zu has no name", k);
            return 0;
        }
    for (size_t k = 0; k < g->n_input; k++)
        if (g->input[k]->name == NULL) {
            snprintf(why, cap, "graph input %zu has no name", k);
            return 0;
        }
    for (size_t k = 0; k < g->n_output; k++)
        if (g->output[k]->name == NULL) {
            snprintf(why, cap, "graph output %zu has no name", k);
            return 0;
        }
    for (size_t k = 0; k < g->n_value_info; k++)
        if (g->value_info[k]->name == NULL) {
            snprintf(why, cap, "value_info %zu has no name", k);
            return 0;
        }
    return 1;
}

static int64_t default_opset(const Onnx__ModelProto *model)
{
    for (size_t k = 0; k < model->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = model->opset_import[k];
        if (o->domain == NULL || o->domain[0] == '\0' || strcmp(o->domain, "ai.onnx") == 0)
            return o->has_version ? o->version : 0;
    }
    return 0;
}

/* Graph input @vi (not an initializer): a spec input, its first axis the batch. */
static int add_input(sl__imp *m, const Onnx__ValueInfoProto *vi)
{
    const Onnx__TypeProto *tp = vi->type;
    const Onnx__TypeProto__Tensor *tt;
    uint32_t shape[6];
    size_t r;
    int32_t t;
    int rc;
    if (tp == NULL || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        (tt = tp->tensor_type) == NULL || tt->shape == NULL)
        return sl__imp_fail(m, SL_EUNSUPPORTED, "input %.64s is not a tensor of known rank",
                            vi->name);
    if (tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
        tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT64)
        return sl__imp_fail(m, SL_EUNSUPPORTED, "input %.64s is of type %d (float32 or int64)",
                            vi->name, (int)tt->elem_type);
    r = tt->shape->n_dim;
    if (r < 2 || r > 5)
        return sl__imp_fail(m, SL_EUNSUPPORTED,
                            "input %.64s has %zu axes (the batch and 1 to 4 more)", vi->name, r);
    if (tt->shape->dim[0]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
        m->fixed_batch = tt->shape->dim[0]->dim_value;
    for (size_t d = 1; d < r; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
            dim->dim_value < 1 || dim->dim_value > (1 << 24))
            return sl__imp_fail(m, SL_EUNSUPPORTED,
                                "input %.64s: axis %zu must have a fixed size (only the batch "
                                "may be dynamic)",
                                vi->name, d);
        shape[d - 1] = (uint32_t)dim->dim_value;
    }
    if ((rc = sl__tensor_new(m, vi->name, shape, r - 1, &t)) != SL_OK)
        return rc;
    m->t[t].int64 = tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    sl__set_act(m, vi->name, t);
    sl__sb_printf(&m->inputs, "%s{\"name\": \"%s\", \"shape\": [", m->inputs.len ? ", " : "",
                  m->t[t].name);
    for (size_t d = 0; d + 1 < r; d++)
        sl__sb_printf(&m->inputs, "%s%u", d ? ", " : "", shape[d]);
    sl__sb_printf(&m->inputs, "]%s}", m->t[t].int64 ? ", \"dtype\": \"int64\"" : "");
    return SL_OK;
}

/* Which nodes reach a graph output; their inputs are "needed". */
static void mark_live(sl__imp *m, uint8_t *live)
{
    const Onnx__GraphProto *g = m->g;
    for (size_t k = 0; k < g->n_output; k++) {
        sl__value *v = sl__val(m, g->output[k]->name);
        if (v != NULL)
            v->needed = v->graph_output = 1;
    }
    for (size_t k = g->n_node; k-- > 0;) {
        const Onnx__NodeProto *nd = g->node[k];
        for (size_t o = 0; o < nd->n_output && !live[k]; o++) {
            const sl__value *v = sl__val(m, nd->output[o]);
            live[k] = v != NULL && v->needed;
        }
        if (!live[k])
            continue;
        for (size_t i = 0; i < nd->n_input; i++) {
            sl__value *v = sl__val(m, nd->input[i]);
            if (v != NULL)
                v->needed = 1;
        }
    }
}

/* Layout order: by key, ties in creation order (a stable insertion sort). */
static void sort_params(const sl__imp *m, size_t *order)
{
    for (size_t k = 0; k < m->np; k++)
        order[k] = k;
    for (size_t k = 1; k < m->np; k++) {
        size_t x = order[k], j = k;
        while (j > 0 && m->p[order[j - 1]].key > m->p[x].key) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
}

/* The whole document. @order: the parameters in layout order. */
static int write_spec(sl__imp *m, const char *name, int32_t out, const size_t *order, sl__sb *doc)
{
    const sl__stensor *y = &m->t[out];
    int classify = y->ndim == 1 && y->shape[0] >= 2;
    sl__sb_printf(doc,
                  "{\"starling_model\": 1, \"name\": \"%s\",\n \"inputs\": [%s],\n \"params\": [",
                  name, m->inputs.p ? m->inputs.p : "");
    for (size_t k = 0; k < m->np; k++) {
        const sl__sparam *p = &m->p[order[k]];
        const sl__stensor *t = &m->t[p->t];
        sl__sb_printf(doc, "%s\n  {\"name\": \"%s\", \"shape\": [", k ? "," : "", t->name);
        for (size_t d = 0; d < t->ndim; d++)
            sl__sb_printf(doc, "%s%u", d ? ", " : "", t->shape[d]);
        sl__sb_printf(doc, "]");
        if (p->init != NULL)
            sl__sb_printf(doc, ", \"init\": %s", p->init);
        else if (p->fan_in != 0)
            sl__sb_printf(doc, ", \"init\": {\"kind\": \"uniform_fan_in\", \"fan_in\": %llu}",
                          (unsigned long long)p->fan_in);
        if (p->buffer)
            sl__sb_printf(doc, ", \"buffer\": true");
        sl__sb_printf(doc, "}");
    }
    sl__sb_printf(doc, "],\n \"nodes\": [%s],\n \"output\": \"%s\",\n", m->nodes.p, y->name);
    if (classify)
        sl__sb_printf(doc,
                      " \"loss\": {\"op\": \"cross_entropy\"},\n \"metrics\": [\"accuracy\"]}\n");
    else
        sl__sb_printf(doc, " \"loss\": {\"op\": \"mse\"},\n \"metrics\": [\"mae\", \"rmse\"]}\n");
    return doc->oom ? SL_ENOMEM : SL_OK;
}

/* Walk the graph. */
static int convert(sl__imp *m)
{
    const Onnx__GraphProto *g = m->g;
    uint8_t *live = NULL;
    size_t nvals = g->n_initializer + g->n_input;
    int rc;
    for (size_t k = 0; k < g->n_node; k++)
        nvals += g->node[k]->n_output;
    m->v = calloc(nvals ? nvals : 1, sizeof *m->v);
    live = calloc(g->n_node ? g->n_node : 1, 1);
    m->skip = calloc(g->n_node ? g->n_node : 1, 1);
    if (m->v == NULL || live == NULL || m->skip == NULL) {
        free(live);
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    }
    for (size_t k = 0; k < g->n_initializer && m->rc == SL_OK; k++) {
        sl__value *v;
        if (g->initializer[k]->name == NULL || g->initializer[k]->name[0] == '\0')
            return free(live), sl__imp_fail(m, SL_ECORRUPT, "an initializer without a name");
        if (new_value(m, g->initializer[k]->name, -1) != SL_OK)
            break;
        v = sl__val(m, g->initializer[k]->name);
        if (sl__const_load(m, g->initializer[k], (int32_t)k, &v->c) == SL_OK)
            v->kind = SL__V_CONST;
    }
    for (size_t k = 0; k < g->n_input && m->rc == SL_OK; k++)
        if (sl__map_get(&m->vmap, g->input[k]->name) < 0 &&
            new_value(m, g->input[k]->name, -1) == SL_OK)
            add_input(m, g->input[k]);
    for (size_t k = 0; k < g->n_node && m->rc == SL_OK; k++)
        for (size_t o = 0; o < g->node[k]->n_output; o++)
            new_value(m, g->node[k]->output[o], (int32_t)k);
    if (m->rc != SL_OK) {
        free(live);
        return m->rc;
    }
    if (m->inputs.len == 0) {
        free(live);
        return sl__imp_fail(m, SL_EUNSUPPORTED, "the graph has no input");
    }
    for (size_t k = 0; k < g->n_node; k++) {
        const Onnx__NodeProto *nd = g->node[k];
        for (size_t i = 0; i < nd->n_input; i++) {
            sl__value *v = sl__val(m, nd->input[i]);
            if (nd->input[i][0] != '\0' && v == NULL) {
                free(live);
                return sl__imp_fail(m, SL_ECORRUPT,
                                    "node %.64s reads %.64s, which nothing "
                                    "produces",
                                    nd->name, nd->input[i]);
            }
            if (v != NULL) {
                if (v->nuse < 4)
                    v->use[v->nuse] = (int32_t)k;
                v->nuse++;
            }
        }
    }
    mark_live(m, live);
    /* Constant nodes first: the decompositions look ahead at their values */
    for (size_t k = 0; k < g->n_node && m->rc == SL_OK; k++)
        if (live[k] && strcmp(g->node[k]->op_type, "Constant") == 0 &&
            sl__const_fold(m, g->node[k]) == 1)
            m->skip[k] = 1;
    for (size_t k = 0; k < g->n_node && m->rc == SL_OK; k++) {
        const Onnx__NodeProto *nd = g->node[k];
        int poisoned = 0;
        if (!live[k] || m->skip[k])
            continue;
        for (size_t i = 0; i < nd->n_input; i++) {
            const sl__value *v = sl__val(m, nd->input[i]);
            if (v == NULL)
                continue;
            if (v->producer >= (int32_t)k)
                return free(live), sl__imp_fail(m, SL_ECORRUPT,
                                                "node %.64s reads %.64s before "
                                                "it is produced (not in topological order)",
                                                nd->name, nd->input[i]);
            poisoned |= v->kind == SL__V_POISON || v->kind == SL__V_NONE;
        }
        if (!poisoned) {
            rc = sl__const_fold(m, nd);
            if (rc == 0)
                rc = sl__translate(m, k);
            else if (rc == 1)
                rc = SL_OK;
        } else if (!sl__op_known(nd->op_type) ||
                   (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") != 0)) {
            rc = sl__imp_unsupported(m, nd, "%s", ""); /* listed even after another one */
        } else {
            rc = SL_EUNSUPPORTED;
        }
        if (rc == SL_EUNSUPPORTED) /* noted; what reads its outputs is skipped */
            for (size_t o = 0; o < nd->n_output; o++) {
                sl__value *v = sl__val(m, nd->output[o]);
                if (v != NULL)
                    v->kind = SL__V_POISON;
            }
    }
    free(live);
    return m->rc;
}

static void imp_free(sl__imp *m)
{
    for (size_t k = 0; k < m->nv; k++)
        sl__const_free(&m->v[k].c);
    free(m->v);
    for (size_t k = 0; k < m->nt; k++)
        free(m->t[k].name);
    free(m->t);
    for (size_t k = 0; k < m->np; k++)
        free(m->p[k].data);
    free(m->p);
    free(m->skip);
    sl__map_free(&m->vmap);
    sl__map_free(&m->tmap);
    sl__sb_free(&m->nodes);
    sl__sb_free(&m->inputs);
    sl__sb_free(&m->unsupported);
}

int sl_onnx_import(const void *onnx, size_t len, const char *name, char **spec_json,
                   size_t *spec_len, float **params, size_t *nparams, sl_onnx_report *report,
                   char *err, size_t errcap)
{
    Onnx__ModelProto *model = NULL;
    sl__imp m;
    sl__sb doc = {0};
    sl_spec *spec = NULL;
    size_t *order = NULL;
    float *flat = NULL;
    char spec_name[64], perr[256];
    int32_t out = -1;
    int rc;
    if (onnx == NULL || spec_json == NULL || spec_len == NULL || params == NULL ||
        nparams == NULL) {
        set_err(err, errcap, "NULL argument");
        return SL_EINVAL;
    }
    if (len > SL__ONNX_MAX_LEN) {
        set_err(err, errcap, "the model is larger than 1 GiB");
        return SL_ETOOBIG;
    }
    if (name == NULL || name[0] == '\0')
        name = "imported";
    if (strlen(name) > 63 || strpbrk(name, "\"\\") != NULL) {
        set_err(err, errcap, "the name must be 1-63 bytes without '\"' or '\\'");
        return SL_EINVAL;
    }
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) {
            set_err(err, errcap, "the name must be printable ASCII");
            return SL_EINVAL;
        }
    snprintf(spec_name, sizeof spec_name, "%s", name);
    memset(&m, 0, sizeof m);
    model = onnx__model_proto__unpack(NULL, len, onnx);
    if (model == NULL || model->graph == NULL) {
        onnx__model_proto__free_unpacked(model, NULL);
        set_err(err, errcap,
                "not an ONNX model (the protobuf does not parse as a ModelProto "
                "with a graph)");
        return SL_ECORRUPT;
    }
    {
        char why[160];
        if (!well_formed(model->graph, why, sizeof why)) {
            onnx__model_proto__free_unpacked(model, NULL);
            set_err(err, errcap, "not a usable ONNX graph: %s", why);
            return SL_ECORRUPT;
        }
    }
    m.g = model->graph;
    m.fold_cap = (uint64_t)len > SL__ONNX_FOLD_MIN / SL__ONNX_FOLD_TIMES
                     ? (uint64_t)len * SL__ONNX_FOLD_TIMES
                     : SL__ONNX_FOLD_MIN;
    m.opset = default_opset(model);
    if (m.opset < 13 || m.opset > 17) {
        rc = sl__imp_fail(&m, SL_EUNSUPPORTED, "opset %lld: export with opset_version 13 to 17",
                          (long long)m.opset);
        goto done;
    }
    rc = convert(&m);
    if (m.nunsupported > 0) {
        rc = SL_EUNSUPPORTED;
        goto done;
    }
    if (rc != SL_OK)
        goto done;
    if (m.g->n_output != 1) {
        rc = sl__imp_fail(&m, SL_EUNSUPPORTED, "the graph has %zu outputs (a spec has one)",
                          m.g->n_output);
        goto done;
    }
    {
        sl__value *y = sl__val(&m, m.g->output[0]->name);
        Onnx__NodeProto fake = ONNX__NODE_PROTO__INIT;
        fake.name = "output";
        fake.op_type = "Output";
        if (y == NULL || y->kind != SL__V_ACT || y->producer < 0) {
            rc = sl__imp_fail(&m, SL_EUNSUPPORTED, "the output %.64s is not computed by a node",
                              m.g->output[0]->name);
            goto done;
        }
        if ((rc = sl__materialize(&m, &fake, y, &out)) != SL_OK)
            goto done;
    }
    if (m.nnodes == 0 || m.np == 0) {
        rc = sl__imp_fail(&m, SL_EUNSUPPORTED, "the graph has no %s",
                          m.nnodes == 0 ? "computing node" : "parameter");
        goto done;
    }
    order = malloc(m.np * sizeof *order);
    if (order == NULL) {
        rc = sl__imp_fail(&m, SL_ENOMEM, "out of memory");
        goto done;
    }
    sort_params(&m, order);
    if ((rc = write_spec(&m, spec_name, out, order, &doc)) != SL_OK || m.nodes.oom ||
        m.inputs.oom) {
        rc = sl__imp_fail(&m, SL_ENOMEM, "out of memory");
        goto done;
    }
    rc = sl_spec_parse(doc.p, doc.len, &spec, perr, sizeof perr);
    if (rc != SL_OK) {
        rc = sl__imp_fail(&m, rc == SL_ENOMEM ? SL_ENOMEM : SL_ESPEC,
                          "the spec made from the graph is refused: %s", perr);
        goto done;
    }
    {
        uint64_t total = sl_layout_params(sl_spec_layout(spec)), at = 0;
        flat = malloc((size_t)(total ? total : 1) * sizeof *flat);
        if (flat == NULL) {
            rc = sl__imp_fail(&m, SL_ENOMEM, "out of memory");
            goto done;
        }
        for (size_t k = 0; k < m.np; k++) {
            const sl__sparam *p = &m.p[order[k]];
            memcpy(flat + at, p->data, (size_t)p->count * sizeof *flat);
            at += p->count;
        }
        if (at != total) {
            rc = sl__imp_fail(&m, SL_ESPEC, "the layout holds %llu values, the parameters %llu",
                              (unsigned long long)total, (unsigned long long)at);
            goto done;
        }
        if (report != NULL) {
            sl_onnx_report r;
            if ((rc = sl__onnx_report(spec, &r)) != SL_OK) {
                rc = sl__imp_fail(&m, rc, "out of memory");
                goto done;
            }
            r.nodes_in = m.g->n_node;
            *report = r;
        }
        *nparams = (size_t)total;
    }
    *spec_json = doc.p;
    *spec_len = doc.len;
    *params = flat;
    doc.p = NULL;
    flat = NULL;
    rc = SL_OK;
done:
    if (rc != SL_OK && m.nunsupported > 0 && m.unsupported.p != NULL && !m.unsupported.oom) {
        rc = SL_EUNSUPPORTED; /* every node the spec cannot say, in one message */
        set_err(err, errcap, "unsupported: %s", m.unsupported.p);
    } else if (rc != SL_OK) {
        set_err(err, errcap, "%s", m.err[0] ? m.err : sl_strerror(rc));
    }
    sl_spec_free(spec);
    free(flat);
    free(order);
    sl__sb_free(&doc);
    imp_free(&m);
    onnx__model_proto__free_unpacked(model, NULL);
    return rc;
}
