/*
 * sgd.c - SGD with momentum, weight decay and FedProx (torch.optim.SGD
 * semantics: no dampening, no Nesterov). The update itself is an
 * element-wise kernel (one pass over w, grad, buf and global).
 */
#include <math.h>
#include <stdlib.h>

#include "nn_int.h"

struct sl_sgd {
    size_t n;
    sl_sgd_params p;
    uint64_t steps; /* since creation or the last reset */
    int have_buf;   /* the momentum buffer holds a previous step */
    float *buf;     /* n floats; NULL when momentum is 0 */
};

static int valid(const sl_sgd_params *p)
{
    return p != NULL && isfinite(p->lr) && p->lr > 0.0f && isfinite(p->momentum) &&
           p->momentum >= 0.0f && p->momentum < 1.0f && isfinite(p->weight_decay) &&
           p->weight_decay >= 0.0f && isfinite(p->prox_mu) && p->prox_mu >= 0.0f;
}

int sl_sgd_create(size_t n, const sl_sgd_params *p, sl_sgd **out)
{
    sl_sgd *s;
    if (out == NULL || n == 0 || !valid(p))
        return SL_EINVAL;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return SL_ENOMEM;
    s->n = n;
    s->p = *p;
    if (p->momentum != 0.0f) {
        s->buf = malloc(n * sizeof *s->buf);
        if (s->buf == NULL) {
            free(s);
            return SL_ENOMEM;
        }
    }
    *out = s;
    return SL_OK;
}

void sl_sgd_free(sl_sgd *sgd)
{
    if (sgd == NULL)
        return;
    free(sgd->buf);
    free(sgd);
}

int sl_sgd_step(sl_sgd *sgd, float *params, const float *grad, const float *global, uint32_t epoch)
{
    sl__nn_sgd_args a;
    if (sgd == NULL || params == NULL || grad == NULL)
        return SL_EINVAL;
    if (sgd->p.prox_mu != 0.0f && global == NULL)
        return SL_EINVAL;
    a.lr = sgd->p.lr;
    if (sgd->p.schedule != NULL) {
        a.lr = sgd->p.schedule(sgd->p.schedule_ctx, epoch, sgd->steps, sgd->p.lr);
        if (!isfinite(a.lr) || a.lr < 0.0f)
            return SL_EINVAL;
    }
    a.momentum = sgd->p.momentum;
    a.weight_decay = sgd->p.weight_decay;
    a.prox_mu = sgd->p.prox_mu;
    a.first = !sgd->have_buf;
    sl__nn_ew()->sgd(params, grad, sgd->buf, global, sgd->n, &a);
    sgd->have_buf = 1;
    sgd->steps++;
    return SL_OK;
}

size_t sl__nn_sgd_size(const sl_sgd *sgd)
{
    return sgd->n;
}

void sl_sgd_reset(sl_sgd *sgd)
{
    if (sgd == NULL)
        return;
    sgd->have_buf = 0;
    sgd->steps = 0;
}
