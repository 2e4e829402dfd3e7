/*
 * optim.c - SGD, Adam and AdamW as torch.optim (1.13, single-tensor path)
 * computes them, with FedProx's term, clipping and a trained-float mask.
 *
 * Why it is shaped this way: PyTorch runs each optimiser as a sequence of
 * whole-tensor operations (d_p = d_p + wd * w, then buf = m * buf + d_p,
 * ...). The step here does the same operations in the same order, one
 * chunk of CHUNK floats at a time, each a plain loop the compiler
 * vectorises; so every intermediate is rounded to float where PyTorch
 * rounds it. Scalars PyTorch computes from Python floats (bias
 * corrections, step size, 1 - lr * wd) are computed in double and rounded
 * to float once. The mask is kept as runs of trained floats, and the state
 * is stored only for trained floats, packed in run order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "starling/optim.h"
#include "spec_int.h"

#define CHUNK 256 /* floats per pass of the update: the gradient copy stays in L1 */

typedef struct run {
    size_t start, len;
} run;

struct sl_optim {
    size_t n;       /* floats of the parameter vector */
    size_t trained; /* floats inside the runs */
    sl_optim_params p;
    uint64_t steps; /* since creation or the last reset */
    run *runs;
    size_t nruns;
    float *s1; /* SGD: momentum buffer; Adam/AdamW: exp_avg. NULL when not needed */
    float *s2; /* Adam/AdamW: exp_avg_sq */
};

/* The per-step scalars, rounded to float as PyTorch rounds them. */
typedef struct coeffs {
    float clip;           /* 1 when clipping is off */
    float mu, wd;         /* prox term; L2 decay (SGD, Adam) */
    float momentum, keep; /* SGD: momentum, 1 - dampening */
    float lr;             /* SGD: the rate */
    float decay;          /* AdamW: 1 - lr * wd */
    float b1, one_b1, b2, one_b2, bc2_sqrt, eps, step_size;
    int first; /* SGD: the momentum buffer is empty */
} coeffs;

static int finite_in(double v, double lo, double hi)
{
    return isfinite(v) && v >= lo && v <= hi;
}

int sl_optim_check(const sl_optim_params *p)
{
    int sgd, ok;
    if (p == NULL)
        return SL_EINVAL;
    if (p->kind != SL_OPTIM_SGD && p->kind != SL_OPTIM_ADAM && p->kind != SL_OPTIM_ADAMW)
        return SL_EINVAL;
    sgd = p->kind == SL_OPTIM_SGD;
    ok = isfinite(p->lr) && p->lr > 0.0 && finite_in(p->weight_decay, 0.0, HUGE_VAL) &&
         finite_in(p->prox_mu, 0.0, HUGE_VAL) && finite_in(p->max_grad_norm, 0.0, HUGE_VAL);
    if (sgd) {
        ok = ok && finite_in(p->momentum, 0.0, HUGE_VAL) && p->momentum < 1.0 &&
             finite_in(p->dampening, 0.0, 1.0) && (p->nesterov == 0 || p->nesterov == 1) &&
             (!p->nesterov || (p->momentum > 0.0 && p->dampening == 0.0)) && p->beta1 == 0.0 &&
             p->beta2 == 0.0 && p->eps == 0.0;
    } else {
        ok = ok && finite_in(p->beta1, 0.0, HUGE_VAL) && p->beta1 < 1.0 &&
             finite_in(p->beta2, 0.0, HUGE_VAL) && p->beta2 < 1.0 && isfinite(p->eps) &&
             p->eps > 0.0 && p->momentum == 0.0 && p->dampening == 0.0 && p->nesterov == 0;
    }
    return ok ? SL_OK : SL_EINVAL;
}

int sl_optim_params_default(sl_optim_kind kind, sl_optim_params *p)
{
    sl_optim_params d;
    if (p == NULL || (kind != SL_OPTIM_SGD && kind != SL_OPTIM_ADAM && kind != SL_OPTIM_ADAMW))
        return SL_EINVAL;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    if (kind == SL_OPTIM_SGD) {
        d.lr = 0.01;
    } else {
        d.lr = 1e-3;
        d.beta1 = 0.9;
        d.beta2 = 0.999;
        d.eps = 1e-8;
        d.weight_decay = kind == SL_OPTIM_ADAMW ? 1e-2 : 0.0;
    }
    *p = d;
    return SL_OK;
}

/* State vectors per trained float: 0, 1 (momentum) or 2 (Adam's moments). */
static size_t state_vectors(const sl_optim_params *p)
{
    if (p->kind != SL_OPTIM_SGD)
        return 2;
    return p->momentum != 0.0 ? 1 : 0;
}

int sl_optim_state_estimate(const sl_optim_params *p, size_t trained, size_t *bytes)
{
    size_t k;
    if (bytes == NULL || sl_optim_check(p) != SL_OK)
        return SL_EINVAL;
    k = state_vectors(p);
    if (k != 0 && trained > SIZE_MAX / sizeof(float) / k)
        return SL_ETOOBIG;
    *bytes = k * trained * sizeof(float);
    return SL_OK;
}

int sl_optim_create(size_t n, const sl_optim_params *p, const uint8_t *mask, sl_optim **out)
{
    sl_optim *o;
    size_t nruns = 0, k;
    if (out == NULL || n == 0 || sl_optim_check(p) != SL_OK)
        return SL_EINVAL;
    if (mask == NULL) {
        nruns = 1;
    } else {
        for (size_t i = 0; i < n; i++)
            nruns += mask[i] != 0 && (i == 0 || mask[i - 1] == 0);
    }
    o = calloc(1, sizeof *o);
    if (o == NULL)
        return SL_ENOMEM;
    o->n = n;
    o->p = *p;
    o->nruns = nruns;
    if (nruns > 0 && (o->runs = malloc(nruns * sizeof *o->runs)) == NULL)
        goto fail;
    if (mask == NULL) {
        o->runs[0].start = 0;
        o->runs[0].len = n;
        o->trained = n;
    } else {
        size_t r = 0;
        for (size_t i = 0; i < n;) {
            size_t j = i;
            if (mask[i] == 0) {
                i++;
                continue;
            }
            while (j < n && mask[j] != 0)
                j++;
            o->runs[r].start = i;
            o->runs[r].len = j - i;
            o->trained += j - i;
            r++;
            i = j;
        }
    }
    k = state_vectors(p);
    if (k > 0 && o->trained > 0) {
        /* calloc: Adam's moments start at zero, as torch.zeros_like */
        o->s1 = calloc(o->trained, sizeof *o->s1);
        if (o->s1 == NULL)
            goto fail;
        if (k > 1 && (o->s2 = calloc(o->trained, sizeof *o->s2)) == NULL)
            goto fail;
    }
    *out = o;
    return SL_OK;
fail:
    sl_optim_free(o);
    return SL_ENOMEM;
}

void sl_optim_free(sl_optim *opt)
{
    if (opt == NULL)
        return;
    free(opt->runs);
    free(opt->s1);
    free(opt->s2);
    free(opt);
}

void sl_optim_reset(sl_optim *opt)
{
    if (opt == NULL)
        return;
    opt->steps = 0;
    if (opt->s1 != NULL)
        memset(opt->s1, 0, opt->trained * sizeof *opt->s1);
    if (opt->s2 != NULL)
        memset(opt->s2, 0, opt->trained * sizeof *opt->s2);
}

size_t sl_optim_size(const sl_optim *opt)
{
    return opt != NULL ? opt->n : 0;
}

size_t sl_optim_trained(const sl_optim *opt)
{
    return opt != NULL ? opt->trained : 0;
}

uint64_t sl_optim_steps(const sl_optim *opt)
{
    return opt != NULL ? opt->steps : 0;
}

size_t sl_optim_state_bytes(const sl_optim *opt)
{
    if (opt == NULL)
        return 0;
    return sizeof *opt + opt->nruns * sizeof *opt->runs +
           state_vectors(&opt->p) * opt->trained * sizeof(float);
}

/* ---- one step --------------------------------------------------------------------------- */

/* One chunk of SGD: @g holds the clipped, proxed gradient. */
static void sgd_chunk(float *w, float *g, float *buf, size_t len, const coeffs *c,
                      const sl_optim_params *p)
{
    if (p->weight_decay != 0.0)
        for (size_t j = 0; j < len; j++)
            g[j] = g[j] + c->wd * w[j];
    if (buf != NULL) {
        if (c->first) {
            memcpy(buf, g, len * sizeof *g);
        } else {
            for (size_t j = 0; j < len; j++)
                buf[j] = buf[j] * c->momentum + c->keep * g[j];
        }
        if (p->nesterov) {
            for (size_t j = 0; j < len; j++)
                g[j] = g[j] + c->momentum * buf[j];
        } else {
            memcpy(g, buf, len * sizeof *g);
        }
    }
    for (size_t j = 0; j < len; j++)
        w[j] = w[j] - c->lr * g[j];
}

/* One chunk of Adam or AdamW. */
static void adam_chunk(float *w, float *g, float *m, float *v, size_t len, const coeffs *c,
                       const sl_optim_params *p)
{
    if (p->weight_decay != 0.0) {
        if (p->kind == SL_OPTIM_ADAMW) {
            for (size_t j = 0; j < len; j++)
                w[j] = w[j] * c->decay;
        } else {
            for (size_t j = 0; j < len; j++)
                g[j] = g[j] + c->wd * w[j];
        }
    }
    for (size_t j = 0; j < len; j++) {
        m[j] = m[j] * c->b1 + c->one_b1 * g[j];
        v[j] = v[j] * c->b2 + c->one_b2 * g[j] * g[j];
    }
    for (size_t j = 0; j < len; j++)
        w[j] = w[j] - c->step_size * (m[j] / (sqrtf(v[j]) / c->bc2_sqrt + c->eps));
}

/* The clipping factor (PyTorch: clamp(max_norm * (1 / (norm + 1e-6)), max=1) in float). */
static int clip_factor(const sl_optim *o, const float *grad, float *clip)
{
    double sum = 0.0;
    float norm, f;
    for (size_t r = 0; r < o->nruns; r++) {
        const float *g = grad + o->runs[r].start;
        for (size_t j = 0; j < o->runs[r].len; j++)
            sum += (double)g[j] * (double)g[j];
    }
    norm = (float)sqrt(sum);
    if (!isfinite(norm))
        return SL_ENONFINITE;
    f = (1.0f / (norm + 1e-6f)) * (float)o->p.max_grad_norm;
    *clip = f < 1.0f ? f : 1.0f;
    return SL_OK;
}

int sl_optim_step(sl_optim *opt, float *params, const float *grad, const float *global,
                  uint32_t epoch)
{
    const sl_optim_params *p;
    float g[CHUNK];
    coeffs c;
    double lr, t;
    size_t state = 0;
    int rc;

    if (opt == NULL || params == NULL || grad == NULL)
        return SL_EINVAL;
    p = &opt->p;
    if (p->prox_mu != 0.0 && global == NULL)
        return SL_EINVAL;
    lr = p->lr;
    if (p->schedule != NULL) {
        lr = p->schedule(p->schedule_ctx, epoch, opt->steps, p->lr);
        if (!isfinite(lr) || lr < 0.0)
            return SL_EINVAL;
    }
    memset(&c, 0, sizeof c);
    c.clip = 1.0f;
    if (p->max_grad_norm != 0.0 && (rc = clip_factor(opt, grad, &c.clip)) != SL_OK)
        return rc;
    c.mu = (float)p->prox_mu;
    c.wd = (float)p->weight_decay;
    c.lr = (float)lr;
    c.momentum = (float)p->momentum;
    c.keep = (float)(1.0 - p->dampening);
    c.first = opt->steps == 0;
    t = (double)(opt->steps + 1);
    c.decay = (float)(1.0 - lr * p->weight_decay);
    c.b1 = (float)p->beta1;
    c.one_b1 = (float)(1.0 - p->beta1);
    c.b2 = (float)p->beta2;
    c.one_b2 = (float)(1.0 - p->beta2);
    c.eps = (float)p->eps;
    if (p->kind != SL_OPTIM_SGD) {
        c.step_size = (float)(lr / (1.0 - pow(p->beta1, t)));
        c.bc2_sqrt = (float)sqrt(1.0 - pow(p->beta2, t));
    }

    for (size_t r = 0; r < opt->nruns; r++) {
        for (size_t done = 0; done < opt->runs[r].len; done += CHUNK) {
            size_t at = opt->runs[r].start + done;
            size_t len = opt->runs[r].len - done < CHUNK ? opt->runs[r].len - done : CHUNK;
            float *w = params + at;
            if (p->max_grad_norm != 0.0) {
                for (size_t j = 0; j < len; j++)
                    g[j] = grad[at + j] * c.clip;
            } else {
                memcpy(g, grad + at, len * sizeof *g);
            }
            if (p->prox_mu != 0.0)
                for (size_t j = 0; j < len; j++)
                    g[j] = g[j] + c.mu * (w[j] - global[at + j]);
            if (p->kind == SL_OPTIM_SGD)
                sgd_chunk(w, g, opt->s1 != NULL ? opt->s1 + state : NULL, len, &c, p);
            else
                adam_chunk(w, g, opt->s1 + state, opt->s2 + state, len, &c, p);
            state += len;
        }
    }
    opt->steps++;
    return SL_OK;
}

/* ---- masks ------------------------------------------------------------------------------ */

/* Whether @entry names the tensor @name or a module path above it. */
static int freezes(const char *entry, const char *name)
{
    size_t len = strlen(entry);
    if (strncmp(name, entry, len) != 0)
        return 0;
    return name[len] == '\0' || name[len] == '.' || entry[len - 1] == '.';
}

/* The mask of @layout; per-tensor fixed flags from @fixed or, when @spec is
 * not NULL, from its buffer flags. */
static int build_mask(const sl_layout *layout, const sl_spec *spec, const char *const *frozen,
                      size_t nfrozen, const uint8_t *fixed, uint8_t *mask)
{
    size_t nt;
    if (layout == NULL || mask == NULL || (frozen == NULL && nfrozen > 0))
        return SL_EINVAL;
    nt = sl_layout_tensors(layout);
    if (spec != NULL && spec->np != nt)
        return SL_EINVAL;
    /* every entry first, so that a refused call writes nothing */
    for (size_t f = 0; f < nfrozen; f++) {
        int hit = 0;
        if (frozen[f] == NULL || frozen[f][0] == '\0')
            return SL_EINVAL;
        for (size_t t = 0; t < nt && !hit; t++)
            hit = freezes(frozen[f], sl_layout_tensor(layout, t)->name);
        if (!hit)
            return SL_ENOENT;
    }
    for (size_t t = 0; t < nt; t++) {
        const sl_tensor_desc *d = sl_layout_tensor(layout, t);
        int trained = spec != NULL ? !spec->p[t].buffer : fixed == NULL || fixed[t] == 0;
        for (size_t f = 0; f < nfrozen && trained; f++)
            trained = !freezes(frozen[f], d->name);
        memset(mask + d->offset, trained ? 1 : 0, (size_t)d->count);
    }
    return SL_OK;
}

int sl_optim_mask_layout(const sl_layout *layout, const char *const *frozen, size_t nfrozen,
                         const uint8_t *fixed, uint8_t *mask)
{
    return build_mask(layout, NULL, frozen, nfrozen, fixed, mask);
}

int sl_optim_mask_spec(const sl_spec *spec, const char *const *frozen, size_t nfrozen,
                       uint8_t *mask)
{
    if (spec == NULL)
        return SL_EINVAL;
    return build_mask(sl_spec_layout(spec), spec, frozen, nfrozen, NULL, mask);
}
