/*
 * onnx_int.h - internals shared by the files of device/onnx: the importer's
 * state (import*.c), text building and names (util.c), the report
 * (report.c). Not part of the public API.
 *
 * Layers, bottom to top (a file calls only into the layers below it:
 * .ci/check_layers.py): util.c, report.c, export.c; import_base.c (errors,
 * attributes, freeing constants); import_graph.c (values and views);
 * import_const.c (constants and folding); import_rnn.c (GRU, LSTM);
 * import_ops.c (every other op); import.c (sl_onnx_import()).
 *
 * The importer walks the ONNX nodes in order. Every ONNX tensor becomes a
 * value: a constant (initializers, Constant nodes and what folds from them,
 * int64 shape vectors where SL__BATCH stands for the batch size), or an
 * activation: a view of one spec tensor, which says for each ONNX axis
 * whether it is the batch, a size-1 axis the spec tensor lacks, or one of
 * the sample's axes. Transposes that move only the batch, and Squeeze or
 * Unsqueeze of size-1 axes, change the view and emit nothing; an op that
 * needs the plain batch-first layout materialises the view first.
 */
#ifndef STARLING_ONNX_INT_H
#define STARLING_ONNX_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"
#include "starling/onnx.h"

#define SL__ONNX_RANK    8                   /* axes of any tensor the importer handles */
#define SL__ONNX_NAME    127                 /* bytes of a spec name */
#define SL__ONNX_MAX_LEN ((size_t)1 << 30)   /* bytes of a model */
#define SL__ONNX_MAX_EL  ((uint64_t)1 << 28) /* elements of one constant */
/* Constants folded from the graph (shape arithmetic, ConstantOfShape, slices of weights) take
 * at most SL__ONNX_FOLD_TIMES the file's bytes, SL__ONNX_FOLD_MIN at least: a model's folded
 * constants are small or parts of its weights, and a small hostile file must not make the
 * importer allocate gigabytes. */
#define SL__ONNX_FOLD_MIN   ((uint64_t)64 << 20)
#define SL__ONNX_FOLD_TIMES 4
#define SL__BATCH           INT64_MIN /* the batch size in a folded shape vector */

enum { SL__AX_BATCH = -1, SL__AX_UNIT = -2 };
enum { SL__V_NONE, SL__V_CONST, SL__V_ACT, SL__V_POISON };
enum { SL__DT_FLOAT = 1, SL__DT_INT64 = 7 };

/* ---- text (util.c) ------------------------------------------------------------------------ */

/* A growing NUL-terminated string; a failed allocation sets oom and stops appending. */
typedef struct sl__sb {
    char *p;
    size_t len, cap;
    int oom;
} sl__sb;

void sl__sb_printf(sl__sb *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void sl__sb_free(sl__sb *sb);
/* @v as the shortest decimal that reads back as the same float ("0.1", "1e-05"). */
void sl__fmt_float(float v, char *out, size_t cap);
/* Copy @in into @out (cap > SL__ONNX_NAME) with characters outside [A-Za-z0-9_.:/-] as '_'. */
void sl__sanitize(const char *in, char *out, size_t cap);

/* An open-addressing map from strings (not copied: they outlive it) to indices. */
typedef struct sl__map {
    const char **key;
    int32_t *val;
    size_t cap, n;
} sl__map;

int sl__map_put(sl__map *m, const char *key, int32_t val); /* SL_OK, SL_ENOMEM */
int32_t sl__map_get(const sl__map *m, const char *key);    /* -1 when absent */
void sl__map_free(sl__map *m);

/* ---- the importer's state ----------------------------------------------------------------- */

/* A constant tensor. */
typedef struct sl__cval {
    int32_t dtype; /* SL__DT_FLOAT or SL__DT_INT64 (BOOL and INT32 widen to INT64) */
    uint8_t ndim;
    int64_t dims[SL__ONNX_RANK];
    size_t count;
    float *f;   /* FLOAT values, owned */
    int64_t *i; /* INT64 values, owned; SL__BATCH for the batch size */
    int fill;   /* ConstantOfShape of a shape with the batch: no values, every one fillv */
    double fillv;
    int32_t init;   /* the initializer it is, as stored; -1 when computed */
    int32_t src[4]; /* the initializers it was computed from */
    int nsrc;       /* entries of src; -1 when more than 4 */
} sl__cval;

/* An activation: a view of spec tensor t. */
typedef struct sl__view {
    int32_t t;
    uint8_t rank;              /* ONNX rank */
    int8_t map[SL__ONNX_RANK]; /* per ONNX axis: SL__AX_BATCH, SL__AX_UNIT, or a sample axis */
} sl__view;

typedef struct sl__value {
    const char *name; /* the ONNX name (in the unpacked model) */
    uint8_t kind;     /* SL__V_* */
    uint8_t needed;   /* reaches a graph output */
    uint8_t graph_output;
    sl__cval c;
    sl__view a;
    uint32_t nuse;    /* nodes reading it */
    int32_t use[4];   /* the first four of them */
    int32_t producer; /* node index, -1 for inputs and initializers */
} sl__value;

/* A tensor of the spec: an input, a parameter or a node output. */
typedef struct sl__stensor {
    char *name; /* owned */
    uint8_t ndim, int64;
    uint32_t shape[6];
} sl__stensor;

typedef struct sl__sparam {
    int32_t t;
    float *data; /* owned */
    uint64_t count;
    double key;       /* layout order */
    const char *init; /* the spec's "init" object, NULL for the default */
    uint64_t fan_in;  /* 0: the spec's default */
    uint8_t buffer;
    int32_t onnx_init; /* the initializer it came from unchanged, else -1 */
} sl__sparam;

typedef struct sl__imp {
    Onnx__GraphProto *g;
    int64_t opset;
    sl__value *v;
    size_t nv;
    sl__map vmap; /* ONNX name -> value */
    sl__stensor *t;
    size_t nt, capt;
    sl__map tmap; /* spec name -> tensor */
    sl__sparam *p;
    size_t np, capp;
    uint8_t *skip; /* per ONNX node: folded into a fused op */
    sl__sb nodes;  /* the spec's nodes, JSON */
    size_t nnodes;
    sl__sb inputs;      /* the spec's inputs, JSON */
    sl__sb unsupported; /* "node /a (Op), ..." */
    size_t nunsupported;
    int64_t fixed_batch; /* batch size when graph inputs fix it, else 0 */
    uint64_t fold_bytes; /* bytes of the constants folded from the graph so far */
    uint64_t fold_cap;   /* ... and the most they may take (SL__ONNX_FOLD_MIN, or more) */
    int rc;              /* first fatal error (not "unsupported"), with err */
    char err[320];
} sl__imp;

/* import_base.c: a fatal error (the first one sticks). Returns its status. */
int sl__imp_fail(sl__imp *m, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Note an unsupported node: "node <name> (<op><: why>)". Returns SL_EUNSUPPORTED. */
int sl__imp_unsupported(sl__imp *m, const Onnx__NodeProto *nd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- constants (import_const.c) ------------------------------------------------------------ */

/* Load an ONNX tensor (initializer or Constant value) into @c; @init its index or -1. */
int sl__const_load(sl__imp *m, const Onnx__TensorProto *tp, int32_t init, sl__cval *c);
/* import_base.c: free @c's arrays. */
void sl__const_free(sl__cval *c);
/* Fold node @nd when it can be (every input constant, or Shape of an activation): 1 folded
 * (outputs set), 0 not foldable, <0 an error (reported). */
int sl__const_fold(sl__imp *m, const Onnx__NodeProto *nd);
/* The value of a scalar (one element) constant as a double; SL_EINVAL when not one. */
int sl__const_scalar(const sl__cval *c, double *out);
/* The int64 entries of a constant (at most @cap); SL_EINVAL when not int64 or too many. */
int sl__const_ints(const sl__cval *c, int64_t *out, size_t cap, size_t *n);

/* ---- graph building (import_graph.c) ------------------------------------------------------- */

/* The value named @name (NULL for "" or unknown). */
sl__value *sl__val(sl__imp *m, const char *name);
/* A new spec tensor named after @onnx_name (sanitised, made unique). */
int sl__tensor_new(sl__imp *m, const char *onnx_name, const uint32_t *shape, size_t ndim,
                   int32_t *out);
/* Make @v's view plain (batch first, sample axes in order), emitting Transpose/Unsqueeze. */
int sl__materialize(sl__imp *m, const Onnx__NodeProto *nd, sl__value *v, int32_t *t);
/* Set value @name to a plain view of spec tensor @t. */
void sl__set_act(sl__imp *m, const char *name, int32_t t);
/* The parameter for constant @v (float): its initializer's name when unchanged; @shape/@ndim
 * override its dims when not NULL (same count). Returns the spec tensor in *t. */
int sl__param(sl__imp *m, const Onnx__NodeProto *nd, sl__value *v, const uint32_t *shape,
              size_t ndim, const char *init, uint8_t buffer, int32_t *t);
/* A parameter from values computed here (a GRU's un-permuted weights): @data is taken. */
int sl__param_data(sl__imp *m, const char *name, float *data, const uint32_t *shape, size_t ndim,
                   double key, int32_t onnx_init, uint64_t fan_in, int32_t *t);
/* Append a node to the spec: op, ONNX node (for its name), inputs (spec tensors, -1: ""),
 * outputs (spec tensors) and the attributes' JSON members ("" for none). */
int sl__emit(sl__imp *m, const char *op, const Onnx__NodeProto *nd, const int32_t *in, size_t nin,
             const int32_t *out, size_t nout, const char *attrs);

/* ---- ops (import_ops.c) -------------------------------------------------------------------- */

/* Translate node @k (not foldable). SL_OK, SL_EUNSUPPORTED (noted), or fatal. */
int sl__translate(sl__imp *m, size_t k);
/* 1 when the importer handles ONNX op @op in some form (Erf, Pow, Sqrt: in decompositions). */
int sl__op_known(const char *op);
/* import_base.c: an ONNX attribute of @nd, NULL when absent. */
const Onnx__AttributeProto *sl__attr(const Onnx__NodeProto *nd, const char *name);
int64_t sl__attr_i(const Onnx__NodeProto *nd, const char *name, int64_t dflt);
float sl__attr_f(const Onnx__NodeProto *nd, const char *name, float dflt);

/* GRU or LSTM node @nd (import_rnn.c). */
int sl__rnn(sl__imp *m, const Onnx__NodeProto *nd);

/* ---- the report (report.c) ----------------------------------------------------------------- */

/* Fill @r (but nodes_in) from a parsed spec. SL_OK or SL_ENOMEM. */
int sl__onnx_report(const sl_spec *spec, sl_onnx_report *r);

#endif /* STARLING_ONNX_INT_H */
