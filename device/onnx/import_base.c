/*
 * import_base.c - what every file of the importer uses (onnx_int.h): its
 * error reporting (the first failure, and the nodes it cannot translate),
 * a node's attributes, and freeing a constant. Above util.c, below the
 * graph, the constants, the recurrent and the other ops and the import.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

int sl__imp_fail(sl__imp *m, int rc, const char *fmt, ...)
{
    va_list ap;
    if (m->rc == SL_OK) {
        m->rc = rc;
        va_start(ap, fmt);
        vsnprintf(m->err, sizeof m->err, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int sl__imp_unsupported(sl__imp *m, const Onnx__NodeProto *nd, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sl__sb_printf(&m->unsupported, "%snode %.96s (%.48s%s%s)", m->nunsupported ? ", " : "",
                  nd->name && nd->name[0] ? nd->name : "?", nd->op_type ? nd->op_type : "?",
                  why[0] ? ": " : "", why);
    m->nunsupported++;
    return SL_EUNSUPPORTED;
}

const Onnx__AttributeProto *sl__attr(const Onnx__NodeProto *nd, const char *name)
{
    for (size_t k = 0; k < nd->n_attribute; k++)
        if (nd->attribute[k]->name && strcmp(nd->attribute[k]->name, name) == 0)
            return nd->attribute[k];
    return NULL;
}

int64_t sl__attr_i(const Onnx__NodeProto *nd, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = sl__attr(nd, name);
    return a && a->has_i ? a->i : dflt;
}

float sl__attr_f(const Onnx__NodeProto *nd, const char *name, float dflt)
{
    const Onnx__AttributeProto *a = sl__attr(nd, name);
    return a && a->has_f ? a->f : dflt;
}

void sl__const_free(sl__cval *c)
{
    free(c->f);
    free(c->i);
    c->f = NULL;
    c->i = NULL;
}
