/*
 * import_const.c - constants: initializers and Constant tensors read from
 * the file (every length checked against the dims), and the folding of the
 * nodes torch.onnx.export adds around shapes and recurrent weights
 * (Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Reshape, Transpose,
 * Cast, ConstantOfShape, Identity, scalar arithmetic). A folded float
 * tensor remembers the initializers it was computed from, so a GRU's
 * re-packed weights can be traced back to the state_dict's tensors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

static float le_f32(const uint8_t *b)
{
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t le_u64(const uint8_t *b)
{
    uint64_t u = 0;
    for (int k = 7; k >= 0; k--)
        u = u << 8 | b[k];
    return u;
}

/* dims -> count, refusing negative dims and sizes past the cap. */
static int count_of(sl__imp *m, const int64_t *dims, size_t ndim, size_t *count)
{
    uint64_t n = 1;
    if (ndim > SL__ONNX_RANK)
        return sl__imp_fail(m, SL_EUNSUPPORTED, "a tensor of %zu axes (at most %d)", ndim,
                            SL__ONNX_RANK);
    for (size_t d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (uint64_t)dims[d] > SL__ONNX_MAX_EL)
            return sl__imp_fail(m, SL_ECORRUPT, "a tensor dimension of %lld", (long long)dims[d]);
        n *= (uint64_t)dims[d];
        if (n > SL__ONNX_MAX_EL)
            return sl__imp_fail(m, SL_ETOOBIG, "a tensor of more than %llu elements",
                                (unsigned long long)SL__ONNX_MAX_EL);
    }
    *count = (size_t)n;
    return SL_OK;
}

static int alloc_vals(sl__imp *m, sl__cval *c)
{
    size_t n = c->count ? c->count : 1;
    if (c->dtype == SL__DT_FLOAT)
        c->f = malloc(n * sizeof *c->f);
    else
        c->i = malloc(n * sizeof *c->i);
    if (c->f == NULL && c->i == NULL)
        return sl__imp_fail(m, SL_ENOMEM, "out of memory");
    return SL_OK;
}

int sl__const_load(sl__imp *m, const Onnx__TensorProto *tp, int32_t init, sl__cval *c)
{
    const char *what = tp->name && tp->name[0] ? tp->name : "a constant";
    int32_t dt = tp->has_data_type ? tp->data_type : 0;
    const uint8_t *raw = tp->has_raw_data ? tp->raw_data.data : NULL;
    size_t rawlen = tp->has_raw_data ? tp->raw_data.len : 0, width;
    int rc;
    memset(c, 0, sizeof *c);
    c->init = init;
    c->nsrc = 0;
    if (init >= 0) {
        c->src[0] = init;
        c->nsrc = 1;
    }
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return sl__imp_fail(m, SL_EUNSUPPORTED,
                            "tensor %.64s keeps its data in an external file (save the model "
                            "with its weights inside)",
                            what);
    if ((rc = count_of(m, tp->dims, tp->n_dims, &c->count)) != SL_OK)
        return rc;
    c->ndim = (uint8_t)tp->n_dims;
    if (tp->n_dims > 0)
        memcpy(c->dims, tp->dims, tp->n_dims * sizeof *tp->dims);
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        c->dtype = SL__DT_FLOAT;
        width = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? 4 : 8;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        c->dtype = SL__DT_INT64;
        width = 8;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        c->dtype = SL__DT_INT64;
        width = 4;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        c->dtype = SL__DT_INT64;
        width = 1;
        break;
    default:
        return sl__imp_fail(m, SL_EUNSUPPORTED, "tensor %.64s has data type %d (float32 wanted)",
                            what, (int)dt);
    }
    /* the values it holds against its dims, before any allocation: a few bytes that declare
     * 2^28 values are refused, not allocated for */
    if (raw != NULL && rawlen != c->count * width)
        return sl__imp_fail(m, SL_ECORRUPT, "tensor %.64s holds %zu bytes for %zu values", what,
                            rawlen, c->count);
    if (raw == NULL) {
        size_t have = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT    ? tp->n_float_data
                      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? tp->n_double_data
                      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64  ? tp->n_int64_data
                                                                    : tp->n_int32_data;
        if (have != c->count)
            return sl__imp_fail(m, SL_ECORRUPT,
                                "tensor %.64s holds %zu values where its dims "
                                "say %zu",
                                what, have, c->count);
    }
    if ((rc = alloc_vals(m, c)) != SL_OK)
        return rc;
    if (raw != NULL) {
        for (size_t k = 0; k < c->count; k++) {
            const uint8_t *b = raw + k * width;
            if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
                c->f[k] = le_f32(b);
            } else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
                uint64_t u = le_u64(b);
                double d;
                memcpy(&d, &u, 8);
                c->f[k] = (float)d;
            } else if (width == 8) {
                c->i[k] = (int64_t)le_u64(b);
            } else if (width == 4) {
                c->i[k] = (int32_t)(uint32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 |
                                              (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
            } else {
                c->i[k] = b[0] != 0;
            }
        }
        return SL_OK;
    }
    {
        for (size_t k = 0; k < c->count; k++) {
            if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
                c->f[k] = tp->float_data[k];
            else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
                c->f[k] = (float)tp->double_data[k];
            else if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64)
                c->i[k] = tp->int64_data[k];
            else
                c->i[k] = dt == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? tp->int32_data[k] != 0
                                                                    : tp->int32_data[k];
        }
    }
    return SL_OK;
}

int sl__const_scalar(const sl__cval *c, double *out)
{
    if (c->fill || c->count != 1)
        return SL_EINVAL;
    if (c->dtype == SL__DT_FLOAT)
        *out = c->f[0];
    else if (c->i[0] == SL__BATCH)
        return SL_EINVAL;
    else
        *out = (double)c->i[0];
    return SL_OK;
}

int sl__const_ints(const sl__cval *c, int64_t *out, size_t cap, size_t *n)
{
    if (c->fill || c->dtype != SL__DT_INT64 || c->count > cap || c->ndim > 1)
        return SL_EINVAL;
    memcpy(out, c->i, c->count * sizeof *out);
    *n = c->count;
    return SL_OK;
}

/* Provenance: @dst was computed from @a (and @b). */
static void merge_src(sl__cval *dst, const sl__cval *a)
{
    if (a == NULL || dst->nsrc < 0)
        return;
    if (a->nsrc < 0) {
        dst->nsrc = -1;
        return;
    }
    for (int k = 0; k < a->nsrc; k++) {
        int seen = 0;
        for (int j = 0; j < dst->nsrc; j++)
            seen |= dst->src[j] == a->src[k];
        if (seen)
            continue;
        if (dst->nsrc == 4) {
            dst->nsrc = -1;
            return;
        }
        dst->src[dst->nsrc++] = a->src[k];
    }
}

/* A new constant of @dtype and @dims with values to be written. */
static int make(sl__imp *m, sl__cval *c, int32_t dtype, const int64_t *dims, size_t ndim)
{
    int rc;
    memset(c, 0, sizeof *c);
    c->init = -1;
    c->dtype = dtype;
    if ((rc = count_of(m, dims, ndim, &c->count)) != SL_OK)
        return rc;
    m->fold_bytes += (uint64_t)c->count * (dtype == SL__DT_FLOAT ? sizeof *c->f : sizeof *c->i);
    if (m->fold_bytes > m->fold_cap)
        return sl__imp_fail(m, SL_ETOOBIG,
                            "the constants folded from the graph take more than %llu MiB (%d "
                            "times the file's size, %llu MiB at least)",
                            (unsigned long long)(m->fold_cap >> 20), SL__ONNX_FOLD_TIMES,
                            (unsigned long long)(SL__ONNX_FOLD_MIN >> 20));
    c->ndim = (uint8_t)ndim;
    memcpy(c->dims, dims, ndim * sizeof *dims);
    return alloc_vals(m, c);
}

/* Copy element @from of @a into element @to of @c (same dtype). */
static void put(sl__cval *c, size_t to, const sl__cval *a, size_t from)
{
    if (c->dtype == SL__DT_FLOAT)
        c->f[to] = a->f[from];
    else
        c->i[to] = a->i[from];
}

static int norm_axis(int64_t axis, size_t rank, size_t *out)
{
    if (axis < 0)
        axis += (int64_t)rank;
    if (axis < 0 || (size_t)axis >= rank)
        return SL_EINVAL;
    *out = (size_t)axis;
    return SL_OK;
}

/* The axes of Squeeze/Unsqueeze/ReduceMean: the second input (opset 13+) or the attribute. */
static int axes_of(sl__imp *m, const Onnx__NodeProto *nd, int64_t *axes, size_t *n)
{
    const Onnx__AttributeProto *a = sl__attr(nd, "axes");
    *n = 0;
    if (nd->n_input > 1 && nd->input[1][0] != '\0') {
        sl__value *v = sl__val(m, nd->input[1]);
        if (v == NULL || v->kind != SL__V_CONST)
            return SL_EINVAL;
        return sl__const_ints(&v->c, axes, SL__ONNX_RANK, n);
    }
    if (a != NULL) {
        if (a->n_ints > SL__ONNX_RANK)
            return SL_EINVAL;
        if (a->n_ints > 0)
            memcpy(axes, a->ints, a->n_ints * sizeof *axes);
        *n = a->n_ints;
    }
    return SL_OK;
}

static int set_out(sl__imp *m, const Onnx__NodeProto *nd, size_t k, sl__cval *c)
{
    sl__value *v = nd->n_output > k ? sl__val(m, nd->output[k]) : NULL;
    if (v == NULL) {
        sl__const_free(c);
        return SL_OK;
    }
    sl__const_free(&v->c);
    v->c = *c;
    v->kind = SL__V_CONST;
    memset(c, 0, sizeof *c);
    return SL_OK;
}

static int fold_slice(sl__imp *m, const Onnx__NodeProto *nd, const sl__cval *x, sl__cval *out)
{
    int64_t starts[SL__ONNX_RANK], ends[SL__ONNX_RANK], axes[SL__ONNX_RANK], steps[SL__ONNX_RANK];
    int64_t b[SL__ONNX_RANK], st[SL__ONNX_RANK], dims[SL__ONNX_RANK], idx[SL__ONNX_RANK];
    size_t ns = 0, ne = 0, na = 0, nst = 0;
    sl__value *vs[4] = {NULL};
    int rc;
    for (size_t k = 1; k < nd->n_input && k < 5; k++)
        vs[k - 1] = nd->input[k][0] ? sl__val(m, nd->input[k]) : NULL;
    if (vs[0] == NULL || vs[1] == NULL ||
        sl__const_ints(&vs[0]->c, starts, SL__ONNX_RANK, &ns) != SL_OK ||
        sl__const_ints(&vs[1]->c, ends, SL__ONNX_RANK, &ne) != SL_OK || ns != ne)
        return 0;
    if (vs[2] != NULL && (sl__const_ints(&vs[2]->c, axes, SL__ONNX_RANK, &na) != SL_OK || na != ns))
        return 0;
    if (vs[3] != NULL &&
        (sl__const_ints(&vs[3]->c, steps, SL__ONNX_RANK, &nst) != SL_OK || nst != ns))
        return 0;
    for (size_t d = 0; d < x->ndim; d++) {
        b[d] = 0;
        st[d] = 1;
        dims[d] = x->dims[d];
    }
    for (size_t k = 0; k < ns; k++) {
        size_t ax;
        int64_t d, s = vs[3] ? steps[k] : 1, lo, hi;
        if (norm_axis(vs[2] ? axes[k] : (int64_t)k, x->ndim, &ax) != SL_OK || s == 0)
            return 0;
        d = x->dims[ax];
        lo = starts[k] < 0 ? starts[k] + d : starts[k];
        hi = ends[k] < 0 ? ends[k] + d : ends[k];
        if (s > 0) {
            lo = lo < 0 ? 0 : lo > d ? d : lo;
            hi = hi < 0 ? 0 : hi > d ? d : hi;
            dims[ax] = hi > lo ? (hi - lo + s - 1) / s : 0;
        } else {
            lo = lo < 0 ? 0 : lo > d - 1 ? d - 1 : lo;
            hi = hi < -1 ? -1 : hi > d - 1 ? d - 1 : hi;
            dims[ax] = lo > hi ? (lo - hi + (-s) - 1) / (-s) : 0;
        }
        b[ax] = lo;
        st[ax] = s;
    }
    if ((rc = make(m, out, x->dtype, dims, x->ndim)) != SL_OK)
        return rc;
    memset(idx, 0, sizeof idx);
    for (size_t o = 0; o < out->count; o++) {
        size_t from = 0;
        for (size_t d = 0; d < x->ndim; d++)
            from = from * (size_t)x->dims[d] + (size_t)(b[d] + idx[d] * st[d]);
        put(out, o, x, from);
        for (size_t d = x->ndim; d-- > 0;) {
            if (++idx[d] < dims[d])
                break;
            idx[d] = 0;
        }
    }
    merge_src(out, x);
    return 1;
}

static int fold_gather(sl__imp *m, const Onnx__NodeProto *nd, const sl__cval *x, const sl__cval *ix,
                       sl__cval *out)
{
    int64_t dims[SL__ONNX_RANK];
    size_t ax, outer = 1, inner = 1, nd_out = 0;
    int rc;
    if (ix->dtype != SL__DT_INT64 || ix->fill ||
        norm_axis(sl__attr_i(nd, "axis", 0), x->ndim, &ax) != SL_OK ||
        x->ndim - 1 + ix->ndim > SL__ONNX_RANK)
        return 0;
    for (size_t d = 0; d < ax; d++) {
        dims[nd_out++] = x->dims[d];
        outer *= (size_t)x->dims[d];
    }
    for (size_t d = 0; d < ix->ndim; d++)
        dims[nd_out++] = ix->dims[d];
    for (size_t d = ax + 1; d < x->ndim; d++) {
        dims[nd_out++] = x->dims[d];
        inner *= (size_t)x->dims[d];
    }
    for (size_t k = 0; k < ix->count; k++)
        if (ix->i[k] < -x->dims[ax] || ix->i[k] >= x->dims[ax])
            return 0;
    if ((rc = make(m, out, x->dtype, dims, nd_out)) != SL_OK)
        return rc;
    for (size_t o = 0, w = 0; o < outer; o++)
        for (size_t k = 0; k < ix->count; k++) {
            int64_t j = ix->i[k] < 0 ? ix->i[k] + x->dims[ax] : ix->i[k];
            for (size_t in = 0; in < inner; in++)
                put(out, w++, x, (o * (size_t)x->dims[ax] + (size_t)j) * inner + in);
        }
    merge_src(out, x);
    return 1;
}

static int fold_transpose(sl__imp *m, const Onnx__NodeProto *nd, const sl__cval *x, sl__cval *out)
{
    const Onnx__AttributeProto *pa = sl__attr(nd, "perm");
    int64_t perm[SL__ONNX_RANK], dims[SL__ONNX_RANK], idx[SL__ONNX_RANK] = {0};
    size_t stride[SL__ONNX_RANK];
    int rc;
    for (size_t d = 0; d < x->ndim; d++)
        perm[d] = pa ? 0 : (int64_t)(x->ndim - 1 - d);
    if (pa != NULL) {
        if (pa->n_ints != x->ndim)
            return 0;
        for (size_t d = 0; d < x->ndim; d++) {
            if (pa->ints[d] < 0 || pa->ints[d] >= x->ndim)
                return 0;
            perm[d] = pa->ints[d];
        }
    }
    for (size_t d = x->ndim, s = 1; d-- > 0;) {
        stride[d] = s;
        s *= (size_t)x->dims[d];
    }
    for (size_t d = 0; d < x->ndim; d++)
        dims[d] = x->dims[perm[d]];
    if ((rc = make(m, out, x->dtype, dims, x->ndim)) != SL_OK)
        return rc;
    for (size_t o = 0; o < out->count; o++) {
        size_t from = 0;
        for (size_t d = 0; d < x->ndim; d++)
            from += (size_t)idx[d] * stride[perm[d]];
        put(out, o, x, from);
        for (size_t d = x->ndim; d-- > 0;) {
            if (++idx[d] < dims[d])
                break;
            idx[d] = 0;
        }
    }
    merge_src(out, x);
    return 1;
}

/* Element-wise arithmetic of two constants of one shape, or one of them a scalar. */
static int fold_arith(sl__imp *m, const Onnx__NodeProto *nd, const sl__cval *a, const sl__cval *b,
                      sl__cval *out)
{
    const sl__cval *big = a->count >= b->count ? a : b;
    char op = nd->op_type[0];
    int rc;
    if (a->dtype != b->dtype || (a->count != b->count && a->count != 1 && b->count != 1))
        return 0;
    if (a->count != b->count && a->ndim > 0 && b->ndim > 0 && a->ndim != b->ndim)
        return 0;
    if ((rc = make(m, out, big->dtype, big->dims, big->ndim)) != SL_OK)
        return rc;
    for (size_t k = 0; k < out->count; k++) {
        size_t ka = a->count == 1 ? 0 : k, kb = b->count == 1 ? 0 : k;
        if (out->dtype == SL__DT_FLOAT) {
            float x = a->f[ka], y = b->f[kb];
            out->f[k] = op == 'A' ? x + y : op == 'S' ? x - y : op == 'M' ? x * y : x / y;
        } else {
            int64_t x = a->i[ka], y = b->i[kb];
            if (x == SL__BATCH || y == SL__BATCH || (op == 'D' && y == 0)) {
                sl__const_free(out);
                return 0;
            }
            out->i[k] = op == 'A' ? x + y : op == 'S' ? x - y : op == 'M' ? x * y : x / y;
        }
    }
    merge_src(out, a);
    merge_src(out, b);
    return 1;
}

static int fold_reshape(sl__imp *m, const sl__cval *x, const sl__cval *shape, sl__cval *out)
{
    int64_t dims[SL__ONNX_RANK];
    size_t n = 0, known = 1;
    int free_at = -1, rc;
    if (sl__const_ints(shape, dims, SL__ONNX_RANK, &n) != SL_OK)
        return 0;
    for (size_t d = 0; d < n; d++) {
        if (dims[d] == 0 && d < x->ndim)
            dims[d] = x->dims[d];
        if (dims[d] == -1 && free_at < 0) {
            free_at = (int)d;
            continue;
        }
        if (dims[d] <= 0)
            return 0;
        known *= (size_t)dims[d];
    }
    if (known == 0 || x->count % known != 0)
        return 0;
    if (free_at >= 0)
        dims[free_at] = (int64_t)(x->count / known);
    else if (known != x->count)
        return 0;
    if ((rc = make(m, out, x->dtype, dims, n)) != SL_OK)
        return rc;
    for (size_t k = 0; k < x->count; k++)
        put(out, k, x, k);
    merge_src(out, x);
    return 1;
}

/* Deep copy with new dims (same count). */
static int copy_as(sl__imp *m, const sl__cval *x, const int64_t *dims, size_t ndim, sl__cval *out)
{
    int rc = make(m, out, x->dtype, dims, ndim);
    if (rc != SL_OK)
        return rc;
    for (size_t k = 0; k < x->count; k++)
        put(out, k, x, k);
    merge_src(out, x);
    return 1;
}

static int fold_constant_of_shape(sl__imp *m, const Onnx__NodeProto *nd, const sl__cval *shape,
                                  sl__cval *out)
{
    const Onnx__AttributeProto *va = sl__attr(nd, "value");
    int64_t dims[SL__ONNX_RANK];
    size_t n = 0;
    double value = 0;
    int sym = 0, rc;
    sl__cval vc;
    if (sl__const_ints(shape, dims, SL__ONNX_RANK, &n) != SL_OK)
        return 0;
    if (va != NULL && va->t != NULL) {
        if ((rc = sl__const_load(m, va->t, -1, &vc)) != SL_OK)
            return rc;
        rc = sl__const_scalar(&vc, &value);
        sl__const_free(&vc);
        if (rc != SL_OK)
            return 0;
    }
    for (size_t d = 0; d < n; d++)
        sym |= dims[d] == SL__BATCH;
    if (sym) {
        memset(out, 0, sizeof *out);
        out->init = -1;
        out->dtype = SL__DT_FLOAT;
        out->ndim = (uint8_t)n;
        memcpy(out->dims, dims, n * sizeof *dims);
        out->fill = 1;
        out->fillv = value;
        return 1;
    }
    if ((rc = make(m, out, SL__DT_FLOAT, dims, n)) != SL_OK)
        return rc;
    for (size_t k = 0; k < out->count; k++)
        out->f[k] = (float)value;
    return 1;
}

static int fold_shape(sl__imp *m, const Onnx__NodeProto *nd, const sl__value *x, sl__cval *out)
{
    int64_t dims[SL__ONNX_RANK], one = 0, start, end;
    size_t rank = x->kind == SL__V_ACT ? x->a.rank : x->c.ndim;
    int rc;
    for (size_t d = 0; d < rank; d++) {
        if (x->kind == SL__V_CONST) {
            dims[d] = x->c.dims[d];
        } else {
            int8_t k = x->a.map[d];
            dims[d] = k == SL__AX_BATCH  ? SL__BATCH
                      : k == SL__AX_UNIT ? 1
                                         : (int64_t)m->t[x->a.t].shape[k];
        }
    }
    start = sl__attr_i(nd, "start", 0);
    end = sl__attr_i(nd, "end", (int64_t)rank);
    start = start < 0 ? start + (int64_t)rank : start;
    end = end < 0 ? end + (int64_t)rank : end;
    start = start < 0 ? 0 : start > (int64_t)rank ? (int64_t)rank : start;
    end = end < start ? start : end > (int64_t)rank ? (int64_t)rank : end;
    one = end - start;
    if ((rc = make(m, out, SL__DT_INT64, &one, 1)) != SL_OK)
        return rc;
    for (int64_t d = start; d < end; d++)
        out->i[d - start] = dims[d];
    return 1;
}

int sl__const_fold(sl__imp *m, const Onnx__NodeProto *nd)
{
    static const char *const foldable[] = {"Constant",  "ConstantOfShape",
                                           "Shape",     "Gather",
                                           "Unsqueeze", "Squeeze",
                                           "Concat",    "Slice",
                                           "Reshape",   "Transpose",
                                           "Identity",  "Cast",
                                           "Add",       "Sub",
                                           "Mul",       "Div",
                                           NULL};
    const char *op = nd->op_type;
    sl__value *in[SL__ONNX_RANK] = {NULL};
    sl__cval out;
    size_t k;
    int rc = 0, is = 0;
    for (k = 0; foldable[k] != NULL && !is; k++)
        is = strcmp(op, foldable[k]) == 0;
    if (!is)
        return 0;
    if (strcmp(op, "Constant") == 0) {
        const Onnx__AttributeProto *a = sl__attr(nd, "value");
        if (a == NULL || a->t == NULL)
            return 0; /* value_float & co.: not written by torch; refused as unsupported */
        if ((rc = sl__const_load(m, a->t, -1, &out)) != SL_OK)
            return rc;
        return set_out(m, nd, 0, &out) == SL_OK ? 1 : SL_ENOMEM;
    }
    if (nd->n_input == 0 || nd->n_input > SL__ONNX_RANK)
        return 0;
    for (k = 0; k < nd->n_input; k++) {
        if (nd->input[k][0] == '\0')
            continue;
        in[k] = sl__val(m, nd->input[k]);
        if (in[k] == NULL)
            return 0;
        if (in[k]->kind != SL__V_CONST &&
            !(k == 0 && strcmp(op, "Shape") == 0 && in[k]->kind == SL__V_ACT))
            return 0;
        if (in[k]->kind == SL__V_CONST && in[k]->c.fill)
            return 0;
    }
    if (in[0] == NULL)
        return 0;
    memset(&out, 0, sizeof out);
    if (strcmp(op, "Shape") == 0) {
        rc = fold_shape(m, nd, in[0], &out);
    } else if (strcmp(op, "ConstantOfShape") == 0) {
        rc = fold_constant_of_shape(m, nd, &in[0]->c, &out);
    } else if (strcmp(op, "Identity") == 0) {
        rc = copy_as(m, &in[0]->c, in[0]->c.dims, in[0]->c.ndim, &out);
        if (rc == 1)
            out.init = in[0]->c.init;
    } else if (strcmp(op, "Gather") == 0) {
        rc = in[1] ? fold_gather(m, nd, &in[0]->c, &in[1]->c, &out) : 0;
    } else if (strcmp(op, "Slice") == 0) {
        rc = fold_slice(m, nd, &in[0]->c, &out);
    } else if (strcmp(op, "Transpose") == 0) {
        rc = fold_transpose(m, nd, &in[0]->c, &out);
    } else if (strcmp(op, "Reshape") == 0) {
        rc = in[1] ? fold_reshape(m, &in[0]->c, &in[1]->c, &out) : 0;
    } else if (strcmp(op, "Cast") == 0) {
        int64_t to = sl__attr_i(nd, "to", 0);
        const sl__cval *x = &in[0]->c;
        int32_t dt = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? SL__DT_FLOAT
                     : to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                             to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32
                         ? SL__DT_INT64
                         : 0;
        if (dt == 0)
            return 0;
        if ((rc = make(m, &out, dt, x->dims, x->ndim)) != SL_OK)
            return rc;
        for (k = 0; k < x->count; k++) {
            if (dt == SL__DT_FLOAT)
                out.f[k] = x->dtype == SL__DT_FLOAT ? x->f[k] : (float)x->i[k];
            else
                out.i[k] = x->dtype == SL__DT_INT64 ? x->i[k] : (int64_t)x->f[k];
        }
        merge_src(&out, x);
        rc = 1;
    } else if (strcmp(op, "Unsqueeze") == 0 || strcmp(op, "Squeeze") == 0) {
        int64_t axes[SL__ONNX_RANK], dims[SL__ONNX_RANK];
        uint8_t mark[SL__ONNX_RANK] = {0};
        size_t na = 0, r = in[0]->c.ndim, outr, j = 0;
        int unsq = op[0] == 'U';
        if (axes_of(m, nd, axes, &na) != SL_OK || (unsq && na == 0))
            return 0;
        outr = unsq ? r + na : r;
        if (outr > SL__ONNX_RANK)
            return 0;
        for (k = 0; k < na; k++) {
            size_t ax;
            if (norm_axis(axes[k], unsq ? outr : r, &ax) != SL_OK || mark[ax]++)
                return 0;
        }
        if (!unsq && na == 0)
            for (k = 0; k < r; k++)
                mark[k] = in[0]->c.dims[k] == 1;
        for (k = 0; k < outr; k++) {
            if (unsq) {
                dims[k] = mark[k] ? 1 : in[0]->c.dims[j++];
            } else if (!mark[k]) {
                dims[j++] = in[0]->c.dims[k];
            } else if (in[0]->c.dims[k] != 1) {
                return 0;
            }
        }
        rc = copy_as(m, &in[0]->c, dims, unsq ? outr : j, &out);
    } else if (strcmp(op, "Concat") == 0) {
        const sl__cval *x0 = &in[0]->c;
        int64_t dims[SL__ONNX_RANK];
        size_t ax, outer = 1, w = 0;
        if (norm_axis(sl__attr_i(nd, "axis", 0), x0->ndim, &ax) != SL_OK)
            return 0;
        memcpy(dims, x0->dims, x0->ndim * sizeof *dims);
        dims[ax] = 0;
        for (k = 0; k < nd->n_input; k++) {
            const sl__cval *x = in[k] ? &in[k]->c : NULL;
            if (x == NULL || x->dtype != x0->dtype || x->ndim != x0->ndim)
                return 0;
            for (size_t d = 0; d < x->ndim; d++)
                if (d != ax && x->dims[d] != x0->dims[d])
                    return 0;
            dims[ax] += x->dims[ax];
        }
        for (size_t d = 0; d < ax; d++)
            outer *= (size_t)x0->dims[d];
        if ((rc = make(m, &out, x0->dtype, dims, x0->ndim)) != SL_OK)
            return rc;
        for (size_t o = 0; o < outer; o++)
            for (k = 0; k < nd->n_input; k++) {
                const sl__cval *x = &in[k]->c;
                size_t block = outer ? x->count / outer : 0;
                for (size_t e = 0; e < block; e++)
                    put(&out, w++, x, o * block + e);
            }
        for (k = 0; k < nd->n_input; k++)
            merge_src(&out, &in[k]->c);
        rc = 1;
    } else { /* Add, Sub, Mul, Div */
        if (nd->n_input != 2 || in[1] == NULL)
            return 0;
        rc = fold_arith(m, nd, &in[0]->c, &in[1]->c, &out);
    }
    if (rc != 1)
        return rc;
    return set_out(m, nd, 0, &out) == SL_OK ? 1 : SL_ENOMEM;
}
