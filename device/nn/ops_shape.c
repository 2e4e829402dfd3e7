/*
 * ops_shape.c - the ops that move a sample's values without arithmetic, or
 * only average them: Transpose, Concat, Slice (steps >= 1), Gather (constant
 * indices from the attribute; a scalar index drops the axis) and ReduceMean
 * (any set of axes, keepdims 0 or 1).
 *
 * Every one of them is a strided walk: an odometer over a box of
 * [batch, d1, ..., dk] positions that keeps two element offsets, one into
 * the op's input (strides sx, start x0) and one into its output (sy, y0).
 * Transpose walks the output with the input's strides permuted; Slice walks
 * the output with the input's strides times the steps from the starts;
 * Concat walks each input into its window of the output; Gather walks, per
 * index, the input with its axis pinned to that index into the output's
 * row (or the output without that axis); ReduceMean walks the input with
 * stride 0 on the output's reduced axes, so every input value lands on its
 * mean. The batch axis is the walk's first axis, with each side's sample
 * size as its stride: sample n only ever reads and writes sample n.
 *
 * The forward pass copies (y = x at the walked offsets); the backward pass
 * is the same walk the other way, adding (dx += dy), so that a value read
 * twice (Gather's repeated indices, a tensor concatenated with itself) gets
 * both gradients. ReduceMean sums in double in the work space, then scales.
 * Before a walk, axes of one entry are dropped and neighbouring axes that
 * are contiguous on both sides are merged, so the inner loop runs as long
 * as it can (a Concat on axis 1 copies whole rows). Nothing is allocated.
 */
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

#define WALK_MAX (SL__SPEC_MAX_DIMS + 1) /* the batch, then the sample's axes */

typedef struct walk {
    size_t nd;
    size_t dim[WALK_MAX];
    size_t sx[WALK_MAX], sy[WALK_MAX]; /* element strides into input and output */
    size_t x0, y0;                     /* element offsets of the box's first position */
} walk;

static const sl__tensor *tin(const sl__op_ctx *c, int i)
{
    return &c->s->t[c->nd->in[i]];
}

static const sl__tensor *tout(const sl__op_ctx *c)
{
    return &c->s->t[c->nd->out[0]];
}

/* Row-major strides of @t's sample axes into @st. */
static void strides_of(const sl__tensor *t, size_t *st)
{
    size_t s = 1;
    for (size_t i = t->ndim; i-- > 0;) {
        st[i] = s;
        s *= t->shape[i];
    }
}

/* A walk over the batch alone; the caller appends the sample's axes with walk_axis(). */
static void walk_begin(walk *w, size_t batch, size_t xcount, size_t ycount)
{
    w->nd = 1;
    w->dim[0] = batch;
    w->sx[0] = xcount;
    w->sy[0] = ycount;
    w->x0 = w->y0 = 0;
}

static void walk_axis(walk *w, size_t dim, size_t sx, size_t sy)
{
    w->dim[w->nd] = dim;
    w->sx[w->nd] = sx;
    w->sy[w->nd] = sy;
    w->nd++;
}

/* Drop axes of one entry and merge neighbours that are contiguous on both sides. */
static void walk_simplify(walk *w)
{
    size_t k = 0;
    for (size_t d = 0; d < w->nd; d++) {
        if (w->dim[d] == 1)
            continue;
        if (k > 0 && w->sx[k - 1] == w->sx[d] * w->dim[d] && w->sy[k - 1] == w->sy[d] * w->dim[d]) {
            w->dim[k - 1] *= w->dim[d];
            w->sx[k - 1] = w->sx[d];
            w->sy[k - 1] = w->sy[d];
            continue;
        }
        w->dim[k] = w->dim[d];
        w->sx[k] = w->sx[d];
        w->sy[k] = w->sy[d];
        k++;
    }
    if (k == 0) { /* every axis had one entry */
        w->dim[0] = 1;
        w->sx[0] = w->sy[0] = 0;
        k = 1;
    }
    w->nd = k;
}

/* Advance the odometer over every axis but the last; 0 when it has gone round. */
static int walk_next(const walk *w, size_t *idx, size_t *ox, size_t *oy)
{
    for (size_t d = w->nd - 1; d-- > 0;) {
        *ox += w->sx[d];
        *oy += w->sy[d];
        if (++idx[d] < w->dim[d])
            return 1;
        *ox -= w->sx[d] * w->dim[d];
        *oy -= w->sy[d] * w->dim[d];
        idx[d] = 0;
    }
    return 0;
}

/* y[oy] = x[ox] over the walk. */
static void walk_copy(const walk *w, const float *x, float *y)
{
    size_t idx[WALK_MAX] = {0}, ox = w->x0, oy = w->y0;
    size_t n = w->dim[w->nd - 1], sx = w->sx[w->nd - 1], sy = w->sy[w->nd - 1];
    do {
        if (sx == 1 && sy == 1) {
            memcpy(y + oy, x + ox, n * sizeof *y);
        } else {
            for (size_t i = 0; i < n; i++)
                y[oy + i * sy] = x[ox + i * sx];
        }
    } while (walk_next(w, idx, &ox, &oy));
}

/* dx[ox] += k dy[oy] over the walk. */
static void walk_add_back(const walk *w, const float *dy, float *dx, float k)
{
    size_t idx[WALK_MAX] = {0}, ox = w->x0, oy = w->y0;
    size_t n = w->dim[w->nd - 1], sx = w->sx[w->nd - 1], sy = w->sy[w->nd - 1];
    do {
        for (size_t i = 0; i < n; i++)
            dx[ox + i * sx] += k * dy[oy + i * sy];
    } while (walk_next(w, idx, &ox, &oy));
}

/* acc[oy] += x[ox] over the walk. */
static void walk_sum(const walk *w, const float *x, double *acc)
{
    size_t idx[WALK_MAX] = {0}, ox = w->x0, oy = w->y0;
    size_t n = w->dim[w->nd - 1], sx = w->sx[w->nd - 1], sy = w->sy[w->nd - 1];
    do {
        for (size_t i = 0; i < n; i++)
            acc[oy + i * sy] += x[ox + i * sx];
    } while (walk_next(w, idx, &ox, &oy));
}

/* ---- Transpose: y[i0, ..., ik] = x at axis perm[j] = i_j --------------------------------- */

static void transpose_walk(const sl__op_ctx *c, walk *w)
{
    const sl__tensor *x = tin(c, 0), *y = tout(c);
    size_t xs[SL__SPEC_MAX_DIMS], ys[SL__SPEC_MAX_DIMS];
    strides_of(x, xs);
    strides_of(y, ys);
    walk_begin(w, c->batch, x->count, y->count);
    for (size_t i = 0; i < y->ndim; i++)
        walk_axis(w, y->shape[i], xs[c->nd->a.ints[i]], ys[i]);
    walk_simplify(w);
}

/* ---- Slice: y[i] = x[start + i step] on each sliced axis --------------------------------- */

static void slice_walk(const sl__op_ctx *c, walk *w)
{
    const sl__attrs *a = &c->nd->a;
    const sl__tensor *x = tin(c, 0), *y = tout(c);
    size_t xs[SL__SPEC_MAX_DIMS], ys[SL__SPEC_MAX_DIMS], step[SL__SPEC_MAX_DIMS], x0 = 0;
    strides_of(x, xs);
    strides_of(y, ys);
    for (size_t i = 0; i < x->ndim; i++)
        step[i] = 1;
    for (size_t i = 0; i < a->nints; i++) {
        size_t ax = (size_t)a->axes[i];
        step[ax] = (size_t)a->steps[i];
        x0 += (size_t)a->ints[i] * xs[ax];
    }
    walk_begin(w, c->batch, x->count, y->count);
    for (size_t i = 0; i < y->ndim; i++)
        walk_axis(w, y->shape[i], xs[i] * step[i], ys[i]);
    walk_simplify(w);
    w->x0 = x0;
}

/* The walk of Transpose or Slice: one box, the output's. */
static void view_walk(const sl__op_ctx *c, walk *w)
{
    if (c->nd->op == SL__OP_TRANSPOSE)
        transpose_walk(c, w);
    else
        slice_walk(c, w);
}

static int view_fwd(const sl__op_ctx *c)
{
    walk w;
    view_walk(c, &w);
    walk_copy(&w, c->val[c->nd->in[0]], c->val[c->nd->out[0]]);
    return SL_OK;
}

static int view_bwd(const sl__op_ctx *c)
{
    float *dx = c->grad[c->nd->in[0]];
    walk w;
    if (dx == NULL)
        return SL_OK;
    view_walk(c, &w);
    walk_add_back(&w, c->grad[c->nd->out[0]], dx, 1.0f);
    return SL_OK;
}

/* ---- Concat: input i fills its window of the output along the axis ---------------------- */

/* The walk of input @i (the whole input, into the output at @off along the axis). */
static void concat_walk(const sl__op_ctx *c, int i, size_t off, walk *w)
{
    const sl__tensor *x = tin(c, i), *y = tout(c);
    size_t xs[SL__SPEC_MAX_DIMS], ys[SL__SPEC_MAX_DIMS];
    strides_of(x, xs);
    strides_of(y, ys);
    walk_begin(w, c->batch, x->count, y->count);
    for (size_t d = 0; d < x->ndim; d++)
        walk_axis(w, x->shape[d], xs[d], ys[d]);
    walk_simplify(w);
    w->y0 = off * ys[c->nd->a.axis];
}

static int concat_fwd(const sl__op_ctx *c)
{
    size_t ax = (size_t)c->nd->a.axis, off = 0;
    for (int i = 0; i < c->nd->nin; i++) {
        walk w;
        concat_walk(c, i, off, &w);
        walk_copy(&w, c->val[c->nd->in[i]], c->val[c->nd->out[0]]);
        off += tin(c, i)->shape[ax];
    }
    return SL_OK;
}

static int concat_bwd(const sl__op_ctx *c)
{
    size_t ax = (size_t)c->nd->a.axis, off = 0;
    for (int i = 0; i < c->nd->nin; i++) {
        float *dx = c->grad[c->nd->in[i]];
        if (dx != NULL) {
            walk w;
            concat_walk(c, i, off, &w);
            walk_add_back(&w, c->grad[c->nd->out[0]], dx, 1.0f);
        }
        off += tin(c, i)->shape[ax];
    }
    return SL_OK;
}

/* ---- Gather: y[..., j, ...] = x[..., indices[j], ...] (no j axis for a scalar index) ----- */

/* The walk of index @j: the input without its axis, pinned at indices[j]. */
static void gather_walk(const sl__op_ctx *c, size_t j, walk *w)
{
    const sl__attrs *a = &c->nd->a;
    const sl__tensor *x = tin(c, 0), *y = tout(c);
    size_t xs[SL__SPEC_MAX_DIMS], ys[SL__SPEC_MAX_DIMS], ax = (size_t)a->axis, k = 0;
    strides_of(x, xs);
    strides_of(y, ys);
    walk_begin(w, c->batch, x->count, y->count);
    for (size_t d = 0; d < x->ndim; d++) {
        if (d == ax) {
            if (!a->scalar_index)
                k++; /* the output's axis of the indices: fixed at j */
            continue;
        }
        walk_axis(w, x->shape[d], xs[d], ys[k++]);
    }
    walk_simplify(w);
    w->x0 = (size_t)a->ints[j] * xs[ax];
    w->y0 = a->scalar_index ? 0 : j * ys[ax];
}

static int gather_fwd(const sl__op_ctx *c)
{
    const float *x = c->val[c->nd->in[0]];
    if (x == NULL)
        return SL_EUNSUPPORTED; /* int64 data: only Embedding reads it */
    for (size_t j = 0; j < c->nd->a.nints; j++) {
        walk w;
        gather_walk(c, j, &w);
        walk_copy(&w, x, c->val[c->nd->out[0]]);
    }
    return SL_OK;
}

static int gather_bwd(const sl__op_ctx *c)
{
    float *dx = c->grad[c->nd->in[0]];
    if (dx == NULL)
        return SL_OK;
    for (size_t j = 0; j < c->nd->a.nints; j++) { /* a repeated index adds each time */
        walk w;
        gather_walk(c, j, &w);
        walk_add_back(&w, c->grad[c->nd->out[0]], dx, 1.0f);
    }
    return SL_OK;
}

/* ---- ReduceMean: the input walked onto the output with stride 0 on the reduced axes ----- */

static void reduce_walk(const sl_spec *s, const sl__node *nd, size_t batch, walk *w)
{
    const sl__tensor *x = &s->t[nd->in[0]], *y = &s->t[nd->out[0]];
    size_t xs[SL__SPEC_MAX_DIMS], sy[SL__SPEC_MAX_DIMS], st = 1;
    uint8_t reduced[SL__SPEC_MAX_DIMS] = {0};
    for (size_t i = 0; i < nd->a.nints; i++)
        reduced[nd->a.ints[i]] = 1;
    strides_of(x, xs);
    /* the output's strides over the input's axes: with keepdims a reduced axis has one
     * entry, without it is absent; either way the kept axes are row-major in order */
    for (size_t i = x->ndim; i-- > 0;) {
        sy[i] = reduced[i] ? 0 : st;
        st *= reduced[i] ? 1 : x->shape[i];
    }
    walk_begin(w, batch, x->count, y->count);
    for (size_t i = 0; i < x->ndim; i++)
        walk_axis(w, x->shape[i], xs[i], sy[i]);
    walk_simplify(w);
}

static size_t reduce_work(const sl_spec *s, const sl__node *nd, size_t batch)
{
    return batch * s->t[nd->out[0]].count * sizeof(double);
}

static int reduce_fwd(const sl__op_ctx *c)
{
    const sl__tensor *x = tin(c, 0), *y = tout(c);
    size_t n = c->batch * y->count;
    double *acc = c->work, inv = (double)y->count / (double)x->count;
    float *yv = c->val[c->nd->out[0]];
    walk w;
    reduce_walk(c->s, c->nd, c->batch, &w);
    memset(acc, 0, n * sizeof *acc);
    walk_sum(&w, c->val[c->nd->in[0]], acc);
    for (size_t i = 0; i < n; i++)
        yv[i] = (float)(acc[i] * inv);
    return SL_OK;
}

static int reduce_bwd(const sl__op_ctx *c)
{
    const sl__tensor *x = tin(c, 0), *y = tout(c);
    float *dx = c->grad[c->nd->in[0]];
    walk w;
    if (dx == NULL)
        return SL_OK;
    reduce_walk(c->s, c->nd, c->batch, &w);
    walk_add_back(&w, c->grad[c->nd->out[0]], dx, (float)((double)y->count / (double)x->count));
    return SL_OK;
}

static const sl__op_impl view = {NULL, NULL, view_fwd, view_bwd, NULL};
static const sl__op_impl concat = {NULL, NULL, concat_fwd, concat_bwd, NULL};
static const sl__op_impl gather = {NULL, NULL, gather_fwd, gather_bwd, NULL};
static const sl__op_impl reduce = {NULL, reduce_work, reduce_fwd, reduce_bwd, NULL};

const sl__op_impl *sl__ops_shape(sl__op op)
{
    switch (op) {
    case SL__OP_TRANSPOSE:
    case SL__OP_SLICE:
        return &view;
    case SL__OP_CONCAT:
        return &concat;
    case SL__OP_GATHER:
        return &gather;
    case SL__OP_REDUCEMEAN:
        return &reduce;
    default:
        return NULL;
    }
}
