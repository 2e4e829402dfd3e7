/* compressor.c - error feedback around selection and quantization, with a two-phase commit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"

struct sl_compressor {
    const sl_layout *layout;
    sl_compress_params p;
    size_t d;          /* parameters */
    float *residual;   /* committed residual */
    float *momentum;   /* committed momentum (DGC), NULL when off */
    float *acc;        /* pending: residual + (momentum-corrected) delta */
    float *pending_mu; /* pending momentum */
    int pending;
    /* what the pending frame sends: per tensor, indices and reconstructed values */
    size_t *sent_n;
    uint32_t **sent_idx;
    float **sent_val;
};

void sl_compress_params_default(sl_compress_params *p)
{
    p->select = SL_SELECT_EXACT;
    sl_select_params_default(&p->select_params);
    sl_encode_params_default(&p->encode);
    p->scope = SL_TOPK_MODEL;
    p->density = 0.01;
    p->min_k = 1;
    p->warmup_rounds = 0;
    p->warmup_density = 0.25;
    p->momentum = 0.0;
    p->feedback = SL_EF_RESIDUAL;
    p->residual_decay = SL_RESIDUAL_DECAY_DEFAULT;
}

const char *sl_error_feedback_name(sl_error_feedback f)
{
    switch (f) {
    case SL_EF_RESIDUAL:
        return "residual";
    case SL_EF_TRACKING:
        return "tracking";
    }
    return NULL;
}

int sl_error_feedback_parse(const char *name, sl_error_feedback *out)
{
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    if (strcmp(name, "residual") == 0)
        *out = SL_EF_RESIDUAL;
    else if (strcmp(name, "tracking") == 0)
        *out = SL_EF_TRACKING;
    else
        return SL_EINVAL;
    return SL_OK;
}

const char *sl_topk_scope_name(sl_topk_scope s)
{
    switch (s) {
    case SL_TOPK_MODEL:
        return "model";
    case SL_TOPK_TENSOR:
        return "tensor";
    }
    return NULL;
}

int sl_topk_scope_parse(const char *name, sl_topk_scope *out)
{
    if (name == NULL || out == NULL)
        return SL_EINVAL;
    if (strcmp(name, "model") == 0)
        *out = SL_TOPK_MODEL;
    else if (strcmp(name, "tensor") == 0)
        *out = SL_TOPK_TENSOR;
    else
        return SL_EINVAL;
    return SL_OK;
}

double sl_compress_density(const sl_compress_params *p, uint32_t step)
{
    if (p->warmup_rounds == 0 || step >= p->warmup_rounds || p->warmup_density <= p->density)
        return p->density;
    return p->warmup_density *
           pow(p->density / p->warmup_density, (double)step / (double)p->warmup_rounds);
}

static int valid_params(const sl_compress_params *p)
{
    return (unsigned)p->select <= SL_SELECT_DGC && (unsigned)p->scope <= SL_TOPK_TENSOR &&
           (unsigned)p->feedback <= SL_EF_TRACKING && p->residual_decay > 0 &&
           p->residual_decay <= 1 && (p->feedback == SL_EF_RESIDUAL || p->residual_decay == 1) &&
           p->density > 0 && p->density <= 1 && p->momentum >= 0 && p->momentum < 1 &&
           isfinite(p->warmup_density) &&
           (p->warmup_rounds == 0 || (p->warmup_density > 0 && p->warmup_density <= 1)) &&
           (unsigned)p->encode.values <= SL_VALUE_SIGN &&
           (unsigned)p->encode.positions <= SL_POS_ADAPTIVE && p->select_params.band_hi >= 1 &&
           p->select_params.overshoot >= 1 && p->select_params.sample_fraction > 0 &&
           p->select_params.sample_fraction <= 1;
}

static void clear_sent(sl_compressor *c)
{
    size_t nt = sl_layout_tensors(c->layout);
    for (size_t t = 0; t < nt; t++) {
        free(c->sent_idx[t]);
        free(c->sent_val[t]);
        c->sent_idx[t] = NULL;
        c->sent_val[t] = NULL;
        c->sent_n[t] = 0;
    }
    c->pending = 0;
}

void sl_compressor_free(sl_compressor *c)
{
    if (c == NULL)
        return;
    if (c->sent_n != NULL)
        clear_sent(c);
    free(c->residual);
    free(c->momentum);
    free(c->acc);
    free(c->pending_mu);
    free(c->sent_n);
    free(c->sent_idx);
    free(c->sent_val);
    free(c);
}

int sl_compressor_create(const sl_layout *layout, const sl_compress_params *p, sl_compressor **out)
{
    sl_compressor *c;
    size_t nt;

    if (layout == NULL || out == NULL)
        return SL_EINVAL;
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return SL_ENOMEM;
    if (p == NULL)
        sl_compress_params_default(&c->p);
    else
        c->p = *p;
    if (!valid_params(&c->p)) {
        free(c);
        return SL_EINVAL;
    }
    c->layout = layout;
    c->d = (size_t)sl_layout_params(layout);
    nt = sl_layout_tensors(layout);
    c->residual = calloc(c->d ? c->d : 1, sizeof(float));
    c->acc = malloc((c->d ? c->d : 1) * sizeof(float));
    c->sent_n = calloc(nt ? nt : 1, sizeof *c->sent_n);
    c->sent_idx = calloc(nt ? nt : 1, sizeof *c->sent_idx);
    c->sent_val = calloc(nt ? nt : 1, sizeof *c->sent_val);
    if (c->p.momentum > 0) {
        c->momentum = calloc(c->d ? c->d : 1, sizeof(float));
        c->pending_mu = malloc((c->d ? c->d : 1) * sizeof(float));
    }
    if (!c->residual || !c->acc || !c->sent_n || !c->sent_idx || !c->sent_val ||
        (c->p.momentum > 0 && (!c->momentum || !c->pending_mu))) {
        sl_compressor_free(c);
        return SL_ENOMEM;
    }
    *out = c;
    return SL_OK;
}

static size_t tensor_k(const sl_compressor *c, double density, uint64_t count)
{
    double want = ceil(density * (double)count);
    uint64_t k = want >= (double)count ? count : (uint64_t)want;
    if (k < c->p.min_k)
        k = c->p.min_k;
    return (size_t)(k > count ? count : k);
}

/* Record the selected elements of tensor @t (its @n indices in @sel,
 * relative to the tensor) as what the pending frame sends. Exact zeros
 * carry nothing: not sent, the residual keeps them (as zero). */
static int take(sl_compressor *c, size_t t, const uint32_t *sel, size_t n, sl_sparse_tensor *st,
                float **recon)
{
    const float *x = c->acc + sl_layout_tensor(c->layout, t)->offset;
    size_t kept = 0;
    float *vals;

    c->sent_idx[t] = malloc((n ? n : 1) * sizeof(uint32_t));
    vals = malloc((n ? n : 1) * sizeof(float));
    c->sent_val[t] = malloc((n ? n : 1) * sizeof(float));
    if (c->sent_idx[t] == NULL || vals == NULL || c->sent_val[t] == NULL) {
        free(vals);
        return SL_ENOMEM;
    }
    for (size_t j = 0; j < n; j++) {
        if (x[sel[j]] != 0.0f) {
            c->sent_idx[t][kept] = sel[j];
            vals[kept++] = x[sel[j]];
        }
    }
    c->sent_n[t] = kept;
    st[t].n = kept;
    st[t].idx = c->sent_idx[t];
    st[t].val = vals;
    recon[t] = c->sent_val[t];
    return SL_OK;
}

/* TENSOR scope: a selection in every tensor. */
static int select_tensors(sl_compressor *c, double density, sl_sparse_tensor *st, float **recon)
{
    size_t nt = sl_layout_tensors(c->layout), cap_max = 0;
    uint32_t *sel;
    int rc = SL_OK;

    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(c->layout, t);
        size_t cap = sl_select_capacity(c->p.select, &c->p.select_params, (size_t)td->count,
                                        tensor_k(c, density, td->count));
        if (cap > cap_max)
            cap_max = cap;
    }
    sel = malloc((cap_max ? cap_max : 1) * sizeof *sel);
    if (sel == NULL)
        return SL_ENOMEM;
    for (size_t t = 0; t < nt && rc == SL_OK; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(c->layout, t);
        size_t n = 0;
        rc = sl_select(c->p.select, &c->p.select_params, c->acc + td->offset, (size_t)td->count,
                       tensor_k(c, density, td->count), sel, &n);
        if (rc == SL_OK)
            rc = take(c, t, sel, n, st, recon);
    }
    free(sel);
    return rc;
}

/* MODEL scope: one selection over the whole vector (tensors are laid out
 * one after another in layout order), split at the tensors' offsets. */
static int select_model(sl_compressor *c, double density, sl_sparse_tensor *st, float **recon)
{
    size_t nt = sl_layout_tensors(c->layout), k = tensor_k(c, density, c->d), n = 0, j = 0;
    uint32_t *sel;
    int rc;

#if SIZE_MAX > 0xffffffffu /* on 32-bit targets a size_t always fits */
    if (c->d > SL_CODEC_MAX_TENSOR)
        return SL_ETOOBIG; /* indices into the vector are u32 */
#endif
    sel = malloc((sl_select_capacity(c->p.select, &c->p.select_params, c->d, k) + 1) * sizeof *sel);
    if (sel == NULL)
        return SL_ENOMEM;
    rc = sl_select(c->p.select, &c->p.select_params, c->acc, c->d, k, sel, &n);
    for (size_t t = 0; t < nt && rc == SL_OK; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(c->layout, t);
        size_t first = j;
        while (j < n && sel[j] < td->offset + td->count)
            sel[j++] -= (uint32_t)td->offset; /* ascending: this tensor's run */
        rc = take(c, t, sel + first, j - first, st, recon);
    }
    free(sel);
    return rc;
}

int sl_compressor_prepare(sl_compressor *c, const float *delta, const sl_frame_header *hdr,
                          uint32_t step, void **out, size_t *out_len)
{
    size_t nt;
    double density;
    sl_sparse_tensor *st = NULL;
    float **recon = NULL;
    int rc = SL_OK;

    if (c == NULL || delta == NULL || hdr == NULL || out == NULL || out_len == NULL)
        return SL_EINVAL;
    if (!sl__all_finite(delta, c->d))
        return SL_ENONFINITE;
    clear_sent(c);
    nt = sl_layout_tensors(c->layout);
    density = sl_compress_density(&c->p, step);

    /* acc = g * residual + u, with u = m * momentum + delta (DGC momentum
     * correction) and g the residual decay (g * r == r exactly for g = 1) */
    if (c->momentum != NULL) {
        float m = (float)c->p.momentum, g = (float)c->p.residual_decay;
        for (size_t i = 0; i < c->d; i++) {
            c->pending_mu[i] = m * c->momentum[i] + delta[i];
            c->acc[i] = g * c->residual[i] + c->pending_mu[i];
        }
    } else {
        float g = (float)c->p.residual_decay;
        for (size_t i = 0; i < c->d; i++)
            c->acc[i] = g * c->residual[i] + delta[i];
    }
    if (!sl__all_finite(c->acc, c->d))
        return SL_ENONFINITE;

    st = calloc(nt ? nt : 1, sizeof *st);
    recon = calloc(nt ? nt : 1, sizeof *recon);
    if (st == NULL || recon == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    rc = c->p.scope == SL_TOPK_MODEL ? select_model(c, density, st, recon)
                                     : select_tensors(c, density, st, recon);
    if (rc == SL_OK) {
        /* top-k over the whole model: one position section over the whole vector */
        sl_encode_params enc = c->p.encode;
        enc.flat = c->p.scope == SL_TOPK_MODEL;
        rc = sl_frame_encode_update(c->layout, hdr, st, &enc, recon, out, out_len);
    }
    if (rc == SL_OK)
        c->pending = 1;
done:
    if (st != NULL)
        for (size_t t = 0; t < nt; t++)
            free((void *)st[t].val);
    free(st);
    free(recon);
    if (rc != SL_OK)
        clear_sent(c);
    return rc;
}

int sl_compressor_commit(sl_compressor *c)
{
    size_t nt;
    if (c == NULL)
        return SL_EINVAL;
    if (!c->pending)
        return SL_ESTATE;
    nt = sl_layout_tensors(c->layout);
    if (c->p.feedback == SL_EF_RESIDUAL)
        memcpy(c->residual, c->acc, c->d * sizeof(float));
    if (c->momentum != NULL)
        memcpy(c->momentum, c->pending_mu, c->d * sizeof(float));
    for (size_t t = 0; t < nt; t++) {
        size_t off = (size_t)sl_layout_tensor(c->layout, t)->offset;
        for (size_t j = 0; j < c->sent_n[t]; j++) {
            size_t i = off + c->sent_idx[t][j];
            c->residual[i] =
                (c->p.feedback == SL_EF_RESIDUAL ? c->acc[i] : c->residual[i]) - c->sent_val[t][j];
            if (c->momentum != NULL) /* DGC momentum factor masking */
                c->momentum[i] = 0.0f;
        }
    }
    clear_sent(c);
    return SL_OK;
}

int sl_compressor_fold(sl_compressor *c)
{
    if (c == NULL)
        return SL_EINVAL;
    if (!c->pending)
        return SL_ESTATE;
    if (c->p.feedback == SL_EF_RESIDUAL)
        memcpy(c->residual, c->acc, c->d * sizeof(float));
    if (c->momentum != NULL)
        memcpy(c->momentum, c->pending_mu, c->d * sizeof(float));
    clear_sent(c);
    return SL_OK;
}

int sl_compressor_absorb(sl_compressor *c, const float *from, const float *to, double rounds)
{
    float *next;
    if (c == NULL || from == NULL || to == NULL || !(rounds > 0) || !isfinite(rounds))
        return SL_EINVAL;
    if (c->p.feedback != SL_EF_TRACKING)
        return SL_ESTATE;
    next = malloc(c->d * sizeof *next);
    if (next == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < c->d; i++)
        next[i] = c->residual[i] + (float)(((double)to[i] - (double)from[i]) / rounds);
    if (!sl__all_finite(next, c->d)) {
        free(next);
        return SL_ENONFINITE;
    }
    memcpy(c->residual, next, c->d * sizeof(float));
    free(next);
    return SL_OK;
}

int sl_compressor_state(const sl_compressor *c, const float **residual, const float **momentum)
{
    if (c == NULL || residual == NULL)
        return SL_EINVAL;
    *residual = c->residual;
    if (momentum != NULL)
        *momentum = c->momentum;
    return SL_OK;
}

int sl_compressor_pending(const sl_compressor *c, const float **accumulated, const float **momentum)
{
    if (c == NULL || accumulated == NULL)
        return SL_EINVAL;
    if (!c->pending)
        return SL_ESTATE;
    *accumulated = c->acc;
    if (momentum != NULL)
        *momentum = c->pending_mu;
    return SL_OK;
}

int sl_compressor_set_split(sl_compressor *c, const sl_support *support, uint64_t ref_version)
{
    if (c == NULL || (support != NULL && (support->d != c->d || ref_version == 0)))
        return SL_EINVAL;
    c->p.encode.split = support;
    c->p.encode.ref_version = support != NULL ? ref_version : 0;
    return SL_OK;
}

int sl_compressor_restore(sl_compressor *c, const float *residual, const float *momentum,
                          const float *accumulated, const float *pending_momentum,
                          const void *frame, size_t frame_len)
{
    sl_update *u = NULL;
    size_t nt;
    int rc;

    if (c == NULL || residual == NULL || (c->momentum != NULL) != (momentum != NULL))
        return SL_EINVAL;
    if (accumulated != NULL &&
        (frame == NULL || (c->momentum != NULL) != (pending_momentum != NULL)))
        return SL_EINVAL;
    if (!sl__all_finite(residual, c->d) || (momentum && !sl__all_finite(momentum, c->d)) ||
        (accumulated && !sl__all_finite(accumulated, c->d)) ||
        (pending_momentum && !sl__all_finite(pending_momentum, c->d)))
        return SL_ENONFINITE;
    if (accumulated != NULL) {
        rc = sl_frame_decode_update_split(c->layout, frame, frame_len, NULL, c->p.encode.split, &u);
        if (rc != SL_OK)
            return rc;
    }
    clear_sent(c);
    memcpy(c->residual, residual, c->d * sizeof(float));
    if (momentum != NULL)
        memcpy(c->momentum, momentum, c->d * sizeof(float));
    if (u == NULL)
        return SL_OK;
    nt = sl_layout_tensors(c->layout);
    memcpy(c->acc, accumulated, c->d * sizeof(float));
    if (pending_momentum != NULL)
        memcpy(c->pending_mu, pending_momentum, c->d * sizeof(float));
    /* take over the decoded arrays: exactly what the receiver reconstructs */
    for (size_t t = 0; t < nt; t++) {
        c->sent_n[t] = u->n[t];
        c->sent_idx[t] = u->idx[t];
        c->sent_val[t] = u->val[t];
        u->idx[t] = NULL;
        u->val[t] = NULL;
    }
    sl_update_free(u);
    c->pending = 1;
    return SL_OK;
}

double sl_effective_steps(uint32_t steps, double momentum)
{
    double tau = steps ? (double)steps : 1.0, rho = momentum;
    if (!(rho > 0) || !(rho < 1))
        return tau;
    return (tau - rho * (1.0 - pow(rho, tau)) / (1.0 - rho)) / (1.0 - rho);
}
