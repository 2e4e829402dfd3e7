/*
 * ops_core.c - Gemm and MatMul (the GEMM kernels), Add / Sub / Mul / Div
 * with broadcasting, and the ops that only re-label a sample's values
 * (Identity, Flatten, Reshape, Squeeze, Unsqueeze: the same values in the
 * same order, copied).
 */
#include <string.h>

#include "graph_int.h"
#include "nn_int.h"

static const sl__tensor *tin(const sl__op_ctx *c, int i)
{
    return &c->s->t[c->nd->in[i]];
}

static const sl__tensor *tout(const sl__op_ctx *c, int i)
{
    return &c->s->t[c->nd->out[i]];
}

/* ---- Gemm: Y = alpha X op(W) + beta b --------------------------------------------------- */

static int gemm_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const sl__tensor *w = tin(c, 1);
    size_t b = c->batch, k = tin(c, 0)->count, n = tout(c, 0)->count;
    const float *x = c->val[nd->in[0]], *wv = c->val[nd->in[1]];
    float *y = c->val[nd->out[0]];
    int rc;
    (void)w;
    rc = sl_nn_sgemm(SL_NN_NO_TRANS, nd->a.trans_b ? SL_NN_TRANS : SL_NN_NO_TRANS, b, n, k,
                     nd->a.alpha, x, k, wv, nd->a.trans_b ? k : n, 0.0f, y, n);
    if (rc != SL_OK)
        return rc;
    if (nd->nin == 3 && nd->in[2] >= 0) {
        const float *bias = c->val[nd->in[2]];
        float beta = nd->a.beta;
        for (size_t r = 0; r < b; r++)
            for (size_t j = 0; j < n; j++)
                y[r * n + j] += beta * bias[j];
    }
    return SL_OK;
}

static int gemm_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    size_t b = c->batch, k = tin(c, 0)->count, n = tout(c, 0)->count;
    const float *x = c->val[nd->in[0]], *wv = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *dx = c->grad[nd->in[0]], *dw = c->grad[nd->in[1]];
    float alpha = nd->a.alpha;
    int rc = SL_OK;
    if (dx != NULL) /* dX += alpha dY op(W)^T */
        rc = nd->a.trans_b ? sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, b, k, n, alpha, dy, n, wv,
                                         k, 1.0f, dx, k)
                           : sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, b, k, n, alpha, dy, n, wv, n,
                                         1.0f, dx, k);
    if (rc == SL_OK && dw != NULL) /* dW += alpha dY^T X (transB) or alpha X^T dY */
        rc = nd->a.trans_b ? sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, n, k, b, alpha, dy, n, x, k,
                                         1.0f, dw, k)
                           : sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, n, b, alpha, x, k, dy, n,
                                         1.0f, dw, n);
    if (rc == SL_OK && nd->nin == 3 && nd->in[2] >= 0 && c->grad[nd->in[2]] != NULL) {
        float *db = c->grad[nd->in[2]];
        for (size_t r = 0; r < b; r++)
            for (size_t j = 0; j < n; j++)
                db[j] += nd->a.beta * dy[r * n + j];
    }
    return rc;
}

/* ---- MatMul: Y [..., M, N] = A [..., M, K] B [K, N] over every row of the batch --------- */

static int matmul_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const sl__tensor *w = tin(c, 1);
    size_t k = w->shape[0], n = w->shape[1], rows = c->batch * tin(c, 0)->count / k;
    return sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, rows, n, k, 1.0f, c->val[nd->in[0]], k,
                       c->val[nd->in[1]], n, 0.0f, c->val[nd->out[0]], n);
}

static int matmul_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const sl__tensor *w = tin(c, 1);
    size_t k = w->shape[0], n = w->shape[1], rows = c->batch * tin(c, 0)->count / k;
    const float *a = c->val[nd->in[0]], *bv = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    int rc = SL_OK;
    if (c->grad[nd->in[0]] != NULL)
        rc = sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, rows, k, n, 1.0f, dy, n, bv, n, 1.0f,
                         c->grad[nd->in[0]], k);
    if (rc == SL_OK && c->grad[nd->in[1]] != NULL)
        rc = sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, k, n, rows, 1.0f, a, k, dy, n, 1.0f,
                         c->grad[nd->in[1]], n);
    return rc;
}

/* ---- Add, Sub, Mul, Div with broadcasting ------------------------------------------------ */

/* Strides of an operand over the output's axes (batch first): 0 where it broadcasts. A
 * parameter has no batch axis; an activation or input has one. */
static void operand_strides(const sl__tensor *x, const sl__tensor *y, size_t *stride)
{
    size_t n = y->ndim, off = n - x->ndim, s = 1;
    for (size_t i = n; i-- > 0;) {
        uint32_t d = i < off ? 1 : x->shape[i - off];
        stride[1 + i] = d == 1 ? 0 : s;
        s *= d;
    }
    stride[0] = x->kind == SL__T_PARAM ? 0 : s;
}

/* Call @fn for every output element with the element offsets of both operands. */
typedef struct bin_iter {
    size_t dims[SL__SPEC_MAX_DIMS + 1], sa[SL__SPEC_MAX_DIMS + 1], sb[SL__SPEC_MAX_DIMS + 1];
    size_t nd;
} bin_iter;

static void bin_setup(const sl__op_ctx *c, bin_iter *it)
{
    const sl__tensor *y = tout(c, 0);
    it->nd = (size_t)y->ndim + 1;
    it->dims[0] = c->batch;
    for (size_t i = 0; i < y->ndim; i++)
        it->dims[1 + i] = y->shape[i];
    operand_strides(tin(c, 0), y, it->sa);
    operand_strides(tin(c, 1), y, it->sb);
}

#define BIN_LOOP(it, body)                                                              \
    do {                                                                                \
        size_t idx_[SL__SPEC_MAX_DIMS + 1] = {0}, ia_ = 0, ib_ = 0, o_ = 0, total_ = 1; \
        for (size_t d_ = 0; d_ < (it)->nd; d_++)                                        \
            total_ *= (it)->dims[d_];                                                   \
        for (o_ = 0; o_ < total_; o_++) {                                               \
            size_t ia = ia_, ib = ib_, o = o_;                                          \
            body;                                                                       \
            for (size_t d_ = (it)->nd; d_-- > 0;) {                                     \
                ia_ += (it)->sa[d_];                                                    \
                ib_ += (it)->sb[d_];                                                    \
                if (++idx_[d_] < (it)->dims[d_])                                        \
                    break;                                                              \
                ia_ -= (it)->sa[d_] * (it)->dims[d_];                                   \
                ib_ -= (it)->sb[d_] * (it)->dims[d_];                                   \
                idx_[d_] = 0;                                                           \
            }                                                                           \
        }                                                                               \
    } while (0)

static int binary_fwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const float *a = c->val[nd->in[0]], *b = c->val[nd->in[1]];
    float *y = c->val[nd->out[0]];
    bin_iter it;
    bin_setup(c, &it);
    switch ((sl__op)nd->op) {
    case SL__OP_ADD:
        BIN_LOOP(&it, y[o] = a[ia] + b[ib]);
        break;
    case SL__OP_SUB:
        BIN_LOOP(&it, y[o] = a[ia] - b[ib]);
        break;
    case SL__OP_MUL:
        BIN_LOOP(&it, y[o] = a[ia] * b[ib]);
        break;
    default:
        BIN_LOOP(&it, y[o] = a[ia] / b[ib]);
        break;
    }
    return SL_OK;
}

static int binary_bwd(const sl__op_ctx *c)
{
    const sl__node *nd = c->nd;
    const float *a = c->val[nd->in[0]], *b = c->val[nd->in[1]], *dy = c->grad[nd->out[0]];
    float *da = c->grad[nd->in[0]], *db = c->grad[nd->in[1]];
    bin_iter it;
    bin_setup(c, &it);
    switch ((sl__op)nd->op) {
    case SL__OP_ADD:
    case SL__OP_SUB: {
        float sign = nd->op == SL__OP_SUB ? -1.0f : 1.0f;
        if (da != NULL)
            BIN_LOOP(&it, (void)ib; da[ia] += dy[o]);
        if (db != NULL)
            BIN_LOOP(&it, (void)ia; db[ib] += sign * dy[o]);
        break;
    }
    case SL__OP_MUL:
        if (da != NULL)
            BIN_LOOP(&it, da[ia] += dy[o] * b[ib]);
        if (db != NULL)
            BIN_LOOP(&it, db[ib] += dy[o] * a[ia]);
        break;
    default:
        if (da != NULL)
            BIN_LOOP(&it, da[ia] += dy[o] / b[ib]);
        if (db != NULL)
            BIN_LOOP(&it, db[ib] -= dy[o] * a[ia] / (b[ib] * b[ib]));
        break;
    }
    return SL_OK;
}

/* ---- the same values, re-labelled -------------------------------------------------------- */

static int copy_fwd(const sl__op_ctx *c)
{
    size_t n = c->batch * tout(c, 0)->count;
    memcpy(c->val[c->nd->out[0]], c->val[c->nd->in[0]], n * sizeof(float));
    return SL_OK;
}

static int copy_bwd(const sl__op_ctx *c)
{
    size_t n = c->batch * tout(c, 0)->count;
    float *dx = c->grad[c->nd->in[0]];
    const float *dy = c->grad[c->nd->out[0]];
    if (dx != NULL)
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i];
    return SL_OK;
}

static const sl__op_impl gemm = {NULL, NULL, gemm_fwd, gemm_bwd, NULL};
static const sl__op_impl matmul = {NULL, NULL, matmul_fwd, matmul_bwd, NULL};
static const sl__op_impl binary = {NULL, NULL, binary_fwd, binary_bwd, NULL};
static const sl__op_impl copy = {NULL, NULL, copy_fwd, copy_bwd, NULL};

const sl__op_impl *sl__ops_core(sl__op op)
{
    switch (op) {
    case SL__OP_GEMM:
        return &gemm;
    case SL__OP_MATMUL:
        return &matmul;
    case SL__OP_ADD:
    case SL__OP_SUB:
    case SL__OP_MUL:
    case SL__OP_DIV:
        return &binary;
    case SL__OP_IDENTITY:
    case SL__OP_FLATTEN:
    case SL__OP_RESHAPE:
    case SL__OP_SQUEEZE:
    case SL__OP_UNSQUEEZE:
        return &copy;
    default:
        return NULL;
    }
}
