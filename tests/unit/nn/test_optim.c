/*
 * The local optimisers (starling/optim.h):
 *   - parity with torch.optim: every case of tests/fixtures/nn/optim_ref.json
 *     (make_optim.py: SGD plain, momentum + weight decay, Nesterov,
 *     dampening; Adam, Adam + L2, AdamW; clipping; frozen tensors; FedProx;
 *     a schedule) after three steps, within 1e-6 relative (1e-7 absolute);
 *     floats outside the mask bit-identical to where they started;
 *   - that the comparison can fail: a wrong beta, Nesterov off, Adam for
 *     AdamW, clipping off, and (through a double-precision model of Adam
 *     here) a missing bias correction all miss the reference;
 *   - reset (a fresh optimiser's bits again), refusals of bad settings and
 *     arguments (nothing written), the masks' name rule, the state size,
 *     chunked runs against per-run optimisers, and sl_train_opt (sl_train's
 *     result with SGD; BatchNorm buffers moved by their statistics only).
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "../../support/sl_fixture.h"
#include "../../support/sl_test.h"
#include "starling/nn.h"
#include "starling/optim.h"

#define REL   1e-6
#define ABS   1e-7
#define STEPS 3
#define MAXT  16

typedef struct fixture {
    char *text;
    cJSON *root;
    sl_layout *layout;
    uint8_t buffer[MAXT]; /* per tensor */
    size_t n;
    float *w0, *global, *grads[STEPS];
    cJSON *cases;
} fixture;

static float *floats(const cJSON *arr, size_t n)
{
    const cJSON *it;
    float *f = malloc(n * sizeof *f);
    size_t i = 0;
    assert_non_null(f);
    assert_true(cJSON_IsArray(arr));
    assert_int_equal((size_t)cJSON_GetArraySize(arr), n);
    cJSON_ArrayForEach(it, arr)
    {
        assert_true(cJSON_IsNumber(it));
        f[i++] = (float)it->valuedouble; /* the shortest text of a float32 reads back exactly */
    }
    return f;
}

static void fixture_load(fixture *fx)
{
    size_t len, t = 0;
    const cJSON *it, *grads;
    memset(fx, 0, sizeof *fx);
    fx->text = sl_fixture_load("nn/optim_ref.json", &len);
    assert_non_null(fx->text);
    fx->root = cJSON_ParseWithLength(fx->text, len);
    assert_non_null(fx->root);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(fx->root, "steps")->valueint, STEPS);
    assert_int_equal(sl_layout_create(&fx->layout), SL_OK);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(fx->root, "layout"))
    {
        const cJSON *d, *shape = cJSON_GetObjectItemCaseSensitive(it, "shape");
        uint64_t dims[SL_CODEC_MAX_DIMS];
        uint32_t nd = 0;
        cJSON_ArrayForEach(d, shape) dims[nd++] = (uint64_t)d->valuedouble;
        assert_true(t < MAXT);
        assert_int_equal(sl_layout_add(fx->layout,
                                       cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring,
                                       dims, nd),
                         SL_OK);
        fx->buffer[t++] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "buffer"));
    }
    fx->n = (size_t)sl_layout_params(fx->layout);
    fx->w0 = floats(cJSON_GetObjectItemCaseSensitive(fx->root, "w0"), fx->n);
    fx->global = floats(cJSON_GetObjectItemCaseSensitive(fx->root, "global"), fx->n);
    grads = cJSON_GetObjectItemCaseSensitive(fx->root, "grads");
    assert_int_equal(cJSON_GetArraySize(grads), STEPS);
    for (int s = 0; s < STEPS; s++)
        fx->grads[s] = floats(cJSON_GetArrayItem(grads, s), fx->n);
    fx->cases = cJSON_GetObjectItemCaseSensitive(fx->root, "cases");
    assert_true(cJSON_GetArraySize(fx->cases) >= 13);
}

static void fixture_free(fixture *fx)
{
    for (int s = 0; s < STEPS; s++)
        free(fx->grads[s]);
    free(fx->w0);
    free(fx->global);
    sl_layout_free(fx->layout);
    cJSON_Delete(fx->root);
    free(fx->text);
}

static double num(const cJSON *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static double inverse_step(void *ctx, uint32_t epoch, uint64_t step, double base)
{
    (void)ctx;
    (void)epoch;
    return base / (double)(1 + step);
}

static const cJSON *find_case(const fixture *fx, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, fx->cases)
    {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring, name) == 0)
            return c;
    }
    fail_msg("no case %s in optim_ref.json", name);
    return NULL;
}

/* A case's settings and mask (@mask: fx->n bytes; NULL returned when every float trains). */
static void case_settings(const fixture *fx, const cJSON *c, sl_optim_params *p, uint8_t *mask,
                          const uint8_t **mask_out)
{
    const char *kind = cJSON_GetObjectItemCaseSensitive(c, "kind")->valuestring;
    const char *frozen[8];
    const cJSON *it;
    size_t nfrozen = 0;
    memset(p, 0, sizeof *p);
    p->kind = strcmp(kind, "sgd") == 0    ? SL_OPTIM_SGD
              : strcmp(kind, "adam") == 0 ? SL_OPTIM_ADAM
                                          : SL_OPTIM_ADAMW;
    p->lr = num(c, "lr");
    p->momentum = num(c, "momentum");
    p->dampening = num(c, "dampening");
    p->nesterov = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "nesterov"));
    p->weight_decay = num(c, "weight_decay");
    p->beta1 = num(c, "beta1");
    p->beta2 = num(c, "beta2");
    p->eps = num(c, "eps");
    p->prox_mu = num(c, "prox_mu");
    p->max_grad_norm = num(c, "max_grad_norm");
    if (strcmp(cJSON_GetObjectItemCaseSensitive(c, "schedule")->valuestring, "inverse_step") == 0)
        p->schedule = inverse_step;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(c, "frozen"))
    {
        assert_true(nfrozen < 8);
        frozen[nfrozen++] = it->valuestring;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "train_buffers")) && nfrozen == 0) {
        *mask_out = NULL;
        return;
    }
    assert_int_equal(
        sl_optim_mask_layout(
            fx->layout, frozen, nfrozen,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "train_buffers")) ? NULL : fx->buffer,
            mask),
        SL_OK);
    *mask_out = mask;
}

/* Three steps of @p from w0 into @w. */
static void run_steps(const fixture *fx, const sl_optim_params *p, const uint8_t *mask, float *w)
{
    sl_optim *o = NULL;
    assert_int_equal(sl_optim_create(fx->n, p, mask, &o), SL_OK);
    memcpy(w, fx->w0, fx->n * sizeof *w);
    for (int s = 0; s < STEPS; s++)
        assert_int_equal(sl_optim_step(o, w, fx->grads[s], fx->global, 0), SL_OK);
    assert_int_equal(sl_optim_steps(o), STEPS);
    sl_optim_free(o);
}

/* The worst |a - ref| in units of the tolerance max(REL |ref|, ABS): <= 1 passes. */
static double worst(const float *a, const float *ref, size_t n)
{
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double tol = fmax(REL * fabs((double)ref[i]), ABS);
        double e = fabs((double)a[i] - (double)ref[i]) / tol;
        if (!(e <= w)) /* NaN counts as the worst */
            w = isnan(e) ? INFINITY : e;
    }
    return w;
}

/* ---- parity with torch.optim ----------------------------------------------------------- */

static void test_parity(void **state)
{
    fixture fx;
    const cJSON *c;
    (void)state;
    fixture_load(&fx);
    cJSON_ArrayForEach(c, fx.cases)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        float *ref = floats(cJSON_GetObjectItemCaseSensitive(c, "after"), fx.n);
        float *w = malloc(fx.n * sizeof *w);
        uint8_t *mask = malloc(fx.n);
        const uint8_t *m;
        sl_optim_params p;
        size_t moved = 0, fixed = 0;
        double e;
        assert_non_null(w);
        assert_non_null(mask);
        case_settings(&fx, c, &p, mask, &m);
        run_steps(&fx, &p, m, w);
        e = worst(w, ref, fx.n);
        printf("  %-24s worst error %.3f of the tolerance\n", name, e);
        if (!(e <= 1.0))
            fail_msg("%s: %.3g times the tolerance", name, e);
        for (size_t i = 0; i < fx.n; i++) {
            if (m != NULL && m[i] == 0) {
                /* outside the mask: the very bits of w0 */
                assert_memory_equal(&w[i], &fx.w0[i], sizeof(float));
                fixed++;
            } else {
                moved += w[i] != fx.w0[i];
            }
        }
        /* every trained float moved: a case that trains nothing proves nothing */
        assert_int_equal(moved + fixed, fx.n);
        if (strstr(name, "frozen") != NULL)
            assert_true(fixed > 12); /* more than the buffers */
        free(mask);
        free(w);
        free(ref);
    }
    fixture_free(&fx);
}

/* How far @p lands from the reference of @case (in tolerance units). */
static double miss(const fixture *fx, const char *name, void (*mutate)(sl_optim_params *))
{
    const cJSON *c = find_case(fx, name);
    float *ref = floats(cJSON_GetObjectItemCaseSensitive(c, "after"), fx->n);
    float *w = malloc(fx->n * sizeof *w);
    uint8_t *mask = malloc(fx->n);
    const uint8_t *m;
    sl_optim_params p;
    double e;
    assert_non_null(w);
    assert_non_null(mask);
    case_settings(fx, c, &p, mask, &m);
    if (mutate != NULL)
        mutate(&p);
    run_steps(fx, &p, m, w);
    e = worst(w, ref, fx->n);
    free(mask);
    free(w);
    free(ref);
    return e;
}

static void beta1_off(sl_optim_params *p)
{
    p->beta1 += 0.01;
}
static void beta2_off(sl_optim_params *p)
{
    p->beta2 = 0.99;
}
static void eps_off(sl_optim_params *p)
{
    p->eps = 1e-3;
}
static void no_nesterov(sl_optim_params *p)
{
    p->nesterov = 0;
}
static void coupled(sl_optim_params *p)
{
    p->kind = SL_OPTIM_ADAM;
}
static void no_clip(sl_optim_params *p)
{
    p->max_grad_norm = 0.0;
}
static void no_schedule(sl_optim_params *p)
{
    p->schedule = NULL;
}
static void no_dampening(sl_optim_params *p)
{
    p->dampening = 0.0;
}

/*
 * Adam in double on the trained floats of a case without a mask, with or
 * without the bias corrections: the reference must tell the two apart.
 */
static void adam_model(const fixture *fx, const sl_optim_params *p, int corrected, float *out)
{
    for (size_t i = 0; i < fx->n; i++) {
        double w = fx->w0[i], m = 0.0, v = 0.0;
        for (int s = 0; s < STEPS; s++) {
            double g = (double)fx->grads[s][i] + p->weight_decay * w, t = s + 1;
            double mh, vh;
            m = p->beta1 * m + (1.0 - p->beta1) * g;
            v = p->beta2 * v + (1.0 - p->beta2) * g * g;
            mh = corrected ? m / (1.0 - pow(p->beta1, t)) : m;
            vh = corrected ? v / (1.0 - pow(p->beta2, t)) : v;
            w -= p->lr * mh / (sqrt(vh) + p->eps);
        }
        out[i] = (float)w;
    }
}

static void test_reference_discriminates(void **state)
{
    fixture fx;
    const cJSON *c;
    sl_optim_params p;
    float *ref, *model;
    uint8_t *mask;
    const uint8_t *m;
    (void)state;
    fixture_load(&fx);
    /* each mutation lands at least 10 tolerances away */
    assert_true(miss(&fx, "adam", beta1_off) > 10.0);
    assert_true(miss(&fx, "adam", beta2_off) > 10.0);
    assert_true(miss(&fx, "adamw", beta2_off) > 10.0);
    assert_true(miss(&fx, "adamw", eps_off) > 10.0);
    assert_true(miss(&fx, "adamw", coupled) > 10.0);
    assert_true(miss(&fx, "sgd_nesterov", no_nesterov) > 10.0);
    assert_true(miss(&fx, "sgd_dampening", no_dampening) > 10.0);
    assert_true(miss(&fx, "clip_sgd", no_clip) > 10.0);
    assert_true(miss(&fx, "clip_prox_adamw_frozen", no_clip) > 10.0);
    assert_true(miss(&fx, "adamw_schedule", no_schedule) > 10.0);
    assert_true(miss(&fx, "sgd_schedule", no_schedule) > 10.0);

    /* the bias corrections: a double model with them meets the reference on
     * the trained floats (the buffers only need w0), one without them misses */
    c = find_case(&fx, "adam");
    mask = malloc(fx.n);
    model = malloc(fx.n * sizeof *model);
    assert_non_null(mask);
    assert_non_null(model);
    ref = floats(cJSON_GetObjectItemCaseSensitive(c, "after"), fx.n);
    case_settings(&fx, c, &p, mask, &m);
    assert_non_null(m);
    adam_model(&fx, &p, 1, model);
    for (size_t i = 0; i < fx.n; i++)
        if (m[i] == 0)
            model[i] = fx.w0[i];
    assert_true(worst(model, ref, fx.n) <= 1.0);
    adam_model(&fx, &p, 0, model);
    for (size_t i = 0; i < fx.n; i++)
        if (m[i] == 0)
            model[i] = fx.w0[i];
    assert_true(worst(model, ref, fx.n) > 10.0);
    free(ref);
    free(model);
    free(mask);
    fixture_free(&fx);
}

/* ---- reset ------------------------------------------------------------------------------ */

static void test_reset(void **state)
{
    static const char *const names[] = {"sgd_momentum_wd", "adam", "adamw", "adamw_schedule"};
    fixture fx;
    (void)state;
    fixture_load(&fx);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const cJSON *c = find_case(&fx, names[k]);
        float *fresh = malloc(fx.n * sizeof(float)), *w = malloc(fx.n * sizeof(float));
        uint8_t *mask = malloc(fx.n);
        const uint8_t *m;
        sl_optim_params p;
        sl_optim *o = NULL;
        assert_non_null(fresh);
        assert_non_null(w);
        assert_non_null(mask);
        case_settings(&fx, c, &p, mask, &m);
        run_steps(&fx, &p, m, fresh);
        /* a round of other steps, a reset, then the case's steps: the fresh bits */
        assert_int_equal(sl_optim_create(fx.n, &p, m, &o), SL_OK);
        memcpy(w, fx.global, fx.n * sizeof *w);
        for (int s = STEPS - 1; s >= 0; s--)
            assert_int_equal(sl_optim_step(o, w, fx.grads[s], fx.global, 5), SL_OK);
        sl_optim_reset(o);
        assert_int_equal(sl_optim_steps(o), 0);
        memcpy(w, fx.w0, fx.n * sizeof *w);
        for (int s = 0; s < STEPS; s++)
            assert_int_equal(sl_optim_step(o, w, fx.grads[s], fx.global, 0), SL_OK);
        assert_memory_equal(w, fresh, fx.n * sizeof *w);
        sl_optim_free(o);
        free(mask);
        free(w);
        free(fresh);
    }
    sl_optim_reset(NULL);
    fixture_free(&fx);
}

/* ---- refusals --------------------------------------------------------------------------- */

static double bad_rate(void *ctx, uint32_t epoch, uint64_t step, double base)
{
    (void)epoch;
    (void)base;
    return step == 1 ? *(const double *)ctx : 0.1;
}

static void test_refusals(void **state)
{
    sl_optim_params sgd, adam, p;
    sl_optim *o = NULL;
    float w[4] = {1, 2, 3, 4}, g[4] = {0.5f, -0.5f, 0.25f, 1}, keep[4], glob[4] = {0};
    double rate;
    size_t bytes = 7;
    (void)state;
    assert_int_equal(sl_optim_params_default(SL_OPTIM_SGD, &sgd), SL_OK);
    assert_int_equal(sl_optim_params_default(SL_OPTIM_ADAM, &adam), SL_OK);
    assert_int_equal(sl_optim_check(&sgd), SL_OK);
    assert_int_equal(sl_optim_check(&adam), SL_OK);
    assert_int_equal(sl_optim_params_default((sl_optim_kind)7, &p), SL_EINVAL);
    assert_int_equal(sl_optim_params_default(SL_OPTIM_SGD, NULL), SL_EINVAL);
    assert_int_equal(sl_optim_check(NULL), SL_EINVAL);
    p = adam;
    assert_int_equal(sl_optim_params_default(SL_OPTIM_ADAMW, &p), SL_OK);
    assert_true(p.weight_decay == 1e-2 && p.beta2 == 0.999 && p.eps == 1e-8 && p.lr == 1e-3);

#define REFUSE(base, field, value)                                            \
    do {                                                                      \
        p = (base);                                                           \
        p.field = (value);                                                    \
        assert_int_equal(sl_optim_check(&p), SL_EINVAL);                      \
        o = NULL;                                                             \
        assert_int_equal(sl_optim_create(4, &p, NULL, &o), SL_EINVAL);        \
        assert_null(o);                                                       \
        assert_int_equal(sl_optim_state_estimate(&p, 10, &bytes), SL_EINVAL); \
    } while (0)
    REFUSE(sgd, kind, (sl_optim_kind)3);
    REFUSE(sgd, lr, 0.0);
    REFUSE(sgd, lr, -0.1);
    REFUSE(sgd, lr, NAN);
    REFUSE(sgd, lr, INFINITY);
    REFUSE(sgd, weight_decay, -1e-4);
    REFUSE(sgd, weight_decay, INFINITY);
    REFUSE(sgd, momentum, 1.0);
    REFUSE(sgd, momentum, -0.1);
    REFUSE(sgd, momentum, NAN);
    REFUSE(sgd, dampening, 1.5);
    REFUSE(sgd, dampening, -0.5);
    REFUSE(sgd, nesterov, 1); /* without momentum */
    REFUSE(sgd, nesterov, 2);
    REFUSE(sgd, prox_mu, -1.0);
    REFUSE(sgd, prox_mu, NAN);
    REFUSE(sgd, max_grad_norm, -1.0);
    REFUSE(sgd, max_grad_norm, INFINITY);
    REFUSE(sgd, beta1, 0.9); /* another kind's field */
    REFUSE(sgd, eps, 1e-8);
    REFUSE(adam, beta1, 1.0);
    REFUSE(adam, beta1, -0.1);
    REFUSE(adam, beta2, 1.0);
    REFUSE(adam, beta2, NAN);
    REFUSE(adam, eps, 0.0);
    REFUSE(adam, eps, -1e-8);
    REFUSE(adam, eps, INFINITY);
    REFUSE(adam, momentum, 0.9);
    REFUSE(adam, nesterov, 1);
    REFUSE(adam, lr, 0.0);
#undef REFUSE
    p = sgd;
    p.momentum = 0.9;
    p.dampening = 0.1;
    p.nesterov = 1; /* Nesterov needs dampening 0 */
    assert_int_equal(sl_optim_check(&p), SL_EINVAL);
    p.dampening = 0.0;
    assert_int_equal(sl_optim_check(&p), SL_OK);
    assert_int_equal(bytes, 7); /* refused estimates wrote nothing */

    o = NULL;
    assert_int_equal(sl_optim_create(0, &sgd, NULL, &o), SL_EINVAL);
    assert_int_equal(sl_optim_create(4, NULL, NULL, &o), SL_EINVAL);
    assert_int_equal(sl_optim_create(4, &sgd, NULL, NULL), SL_EINVAL);
    assert_null(o);

    /* step refusals leave parameters and state alone */
    p = sgd;
    p.momentum = 0.9;
    p.prox_mu = 0.5;
    assert_int_equal(sl_optim_create(4, &p, NULL, &o), SL_OK);
    memcpy(keep, w, sizeof w);
    assert_int_equal(sl_optim_step(NULL, w, g, glob, 0), SL_EINVAL);
    assert_int_equal(sl_optim_step(o, NULL, g, glob, 0), SL_EINVAL);
    assert_int_equal(sl_optim_step(o, w, NULL, glob, 0), SL_EINVAL);
    assert_int_equal(sl_optim_step(o, w, g, NULL, 0), SL_EINVAL); /* FedProx without global */
    assert_memory_equal(w, keep, sizeof w);
    assert_int_equal(sl_optim_steps(o), 0);
    sl_optim_free(o);

    /* a bad scheduled rate at the second step */
    for (int k = 0; k < 3; k++) {
        p = adam;
        p.schedule = bad_rate;
        p.schedule_ctx = &rate;
        rate = k == 0 ? -0.1 : k == 1 ? NAN : INFINITY;
        assert_int_equal(sl_optim_create(4, &p, NULL, &o), SL_OK);
        assert_int_equal(sl_optim_step(o, w, g, NULL, 0), SL_OK);
        memcpy(keep, w, sizeof w);
        assert_int_equal(sl_optim_step(o, w, g, NULL, 1), SL_EINVAL);
        assert_memory_equal(w, keep, sizeof w);
        assert_int_equal(sl_optim_steps(o), 1);
        sl_optim_free(o);
    }

    /* clipping a gradient with no finite norm: refused, nothing changes, and
     * the next valid step is the first step's */
    {
        float bad[4] = {1, NAN, 0, 0}, inf[4] = {INFINITY, 0, 0, 0}, a[4], b[4];
        sl_optim *fresh = NULL;
        p = adam;
        p.max_grad_norm = 0.5;
        assert_int_equal(sl_optim_create(4, &p, NULL, &o), SL_OK);
        assert_int_equal(sl_optim_create(4, &p, NULL, &fresh), SL_OK);
        memcpy(a, w, sizeof w);
        memcpy(b, w, sizeof w);
        assert_int_equal(sl_optim_step(o, a, bad, NULL, 0), SL_ENONFINITE);
        assert_int_equal(sl_optim_step(o, a, inf, NULL, 0), SL_ENONFINITE);
        assert_memory_equal(a, w, sizeof w);
        assert_int_equal(sl_optim_steps(o), 0);
        assert_int_equal(sl_optim_step(o, a, g, NULL, 0), SL_OK);
        assert_int_equal(sl_optim_step(fresh, b, g, NULL, 0), SL_OK);
        assert_memory_equal(a, b, sizeof a);
        sl_optim_free(o);
        sl_optim_free(fresh);
    }
    sl_optim_free(NULL);
    assert_int_equal(sl_optim_size(NULL), 0);
    assert_int_equal(sl_optim_trained(NULL), 0);
    assert_int_equal(sl_optim_state_bytes(NULL), 0);
}

/* ---- clipping that does not bite -------------------------------------------------------- */

static void test_clip_loose(void **state)
{
    fixture fx;
    sl_optim_params p;
    float *a, *b;
    uint8_t *mask;
    const uint8_t *m;
    (void)state;
    fixture_load(&fx);
    a = malloc(fx.n * sizeof *a);
    b = malloc(fx.n * sizeof *b);
    mask = malloc(fx.n);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(mask);
    case_settings(&fx, find_case(&fx, "clip_sgd"), &p, mask, &m);
    p.max_grad_norm = 1e6; /* PyTorch multiplies by 1.0: the unclipped bits */
    run_steps(&fx, &p, m, a);
    p.max_grad_norm = 0.0;
    run_steps(&fx, &p, m, b);
    assert_memory_equal(a, b, fx.n * sizeof *a);
    free(mask);
    free(a);
    free(b);
    fixture_free(&fx);
}

/* ---- masks ------------------------------------------------------------------------------ */

static void test_masks(void **state)
{
    static const char *const names[] = {"fc1.weight",           "fc1.bias",
                                        "fc10.weight",          "layer1.0.conv.weight",
                                        "layer1.1.conv.weight", "bn.running_mean"};
    const uint64_t two = 2;
    const uint8_t fixed[6] = {0, 0, 0, 0, 0, 1};
    sl_layout *l = NULL;
    uint8_t mask[12], keep[12];
    (void)state;
    assert_int_equal(sl_layout_create(&l), SL_OK);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(sl_layout_add(l, names[i], &two, 1), SL_OK);

#define EXPECT(...)                                     \
    do {                                                \
        const uint8_t want[6] = {__VA_ARGS__};          \
        for (size_t t = 0; t < 6; t++) {                \
            assert_int_equal(mask[2 * t], want[t]);     \
            assert_int_equal(mask[2 * t + 1], want[t]); \
        }                                               \
    } while (0)
    assert_int_equal(sl_optim_mask_layout(l, NULL, 0, NULL, mask), SL_OK);
    EXPECT(1, 1, 1, 1, 1, 1);
    assert_int_equal(sl_optim_mask_layout(l, NULL, 0, fixed, mask), SL_OK);
    EXPECT(1, 1, 1, 1, 1, 0);
    {
        const char *f[] = {"fc1"}; /* a module: not fc10 */
        assert_int_equal(sl_optim_mask_layout(l, f, 1, fixed, mask), SL_OK);
        EXPECT(0, 0, 1, 1, 1, 0);
    }
    {
        const char *f[] = {"fc1."};
        assert_int_equal(sl_optim_mask_layout(l, f, 1, NULL, mask), SL_OK);
        EXPECT(0, 0, 1, 1, 1, 1);
    }
    {
        const char *f[] = {"fc1.bias", "layer1.0"}; /* an exact name; a deeper module */
        assert_int_equal(sl_optim_mask_layout(l, f, 2, NULL, mask), SL_OK);
        EXPECT(1, 0, 1, 0, 1, 1);
    }
    {
        const char *f[] = {"layer1"};
        assert_int_equal(sl_optim_mask_layout(l, f, 1, fixed, mask), SL_OK);
        EXPECT(1, 1, 1, 0, 0, 0);
    }
    /* refusals write nothing */
    memset(mask, 0xAA, sizeof mask);
    memcpy(keep, mask, sizeof mask);
    {
        const char *typo[] = {"fc1", "fc3"}, *part[] = {"fc"}, *empty[] = {""}, *null[] = {NULL};
        assert_int_equal(sl_optim_mask_layout(l, typo, 2, NULL, mask), SL_ENOENT);
        assert_int_equal(sl_optim_mask_layout(l, part, 1, NULL, mask), SL_ENOENT);
        assert_int_equal(sl_optim_mask_layout(l, empty, 1, NULL, mask), SL_EINVAL);
        assert_int_equal(sl_optim_mask_layout(l, null, 1, NULL, mask), SL_EINVAL);
        assert_int_equal(sl_optim_mask_layout(l, NULL, 1, NULL, mask), SL_EINVAL);
        assert_int_equal(sl_optim_mask_layout(NULL, NULL, 0, NULL, mask), SL_EINVAL);
        assert_int_equal(sl_optim_mask_layout(l, NULL, 0, NULL, NULL), SL_EINVAL);
        assert_int_equal(sl_optim_mask_spec(NULL, NULL, 0, mask), SL_EINVAL);
    }
    assert_memory_equal(mask, keep, sizeof mask);
#undef EXPECT
    sl_layout_free(l);
}

/* A cross-entropy spec with BatchNorm buffers (tests/fixtures/nn/fd_specs_norm.json's). */
static const char bn_spec[] =
    "{\"starling_model\": 1, \"name\": \"bn\", \"inputs\": [{\"name\": \"x\", \"shape\": [6]}],"
    " \"params\": [{\"name\": \"fc.weight\", \"shape\": [5, 6]},"
    " {\"name\": \"bn.weight\", \"shape\": [5]}, {\"name\": \"bn.bias\", \"shape\": [5]},"
    " {\"name\": \"bn.running_mean\", \"shape\": [5], \"buffer\": true},"
    " {\"name\": \"bn.running_var\", \"shape\": [5], \"buffer\": true},"
    " {\"name\": \"out.weight\", \"shape\": [3, 5]}],"
    " \"nodes\": [{\"op\": \"Gemm\", \"inputs\": [\"x\", \"fc.weight\"], \"outputs\": [\"h\"]},"
    " {\"op\": \"BatchNormalization\", \"inputs\": [\"h\", \"bn.weight\", \"bn.bias\","
    " \"bn.running_mean\", \"bn.running_var\"], \"outputs\": [\"n\"]},"
    " {\"op\": \"Tanh\", \"inputs\": [\"n\"], \"outputs\": [\"t\"]},"
    " {\"op\": \"Gemm\", \"inputs\": [\"t\", \"out.weight\"], \"outputs\": [\"y\"]}],"
    " \"output\": \"y\", \"loss\": {\"op\": \"cross_entropy\"}}";

static sl_spec *parse_bn_spec(void)
{
    sl_spec *s = NULL;
    char err[256];
    if (sl_spec_parse(bn_spec, strlen(bn_spec), &s, err, sizeof err) != SL_OK)
        fail_msg("%s", err);
    return s;
}

static void test_mask_spec(void **state)
{
    sl_spec *s = parse_bn_spec();
    const sl_layout *l = sl_spec_layout(s);
    size_t n = (size_t)sl_layout_params(l);
    uint8_t *mask = malloc(n);
    const char *f[] = {"out"};
    (void)state;
    assert_non_null(mask);
    assert_int_equal(sl_optim_mask_spec(s, NULL, 0, mask), SL_OK);
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        int buffer = strstr(d->name, "running") != NULL;
        for (uint64_t i = 0; i < d->count; i++)
            assert_int_equal(mask[d->offset + i], buffer ? 0 : 1);
    }
    assert_int_equal(sl_optim_mask_spec(s, f, 1, mask), SL_OK);
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        int off = strstr(d->name, "running") != NULL || strcmp(d->name, "out.weight") == 0;
        assert_int_equal(mask[d->offset], off ? 0 : 1);
    }
    free(mask);
    sl_spec_free(s);
}

/* ---- state size ------------------------------------------------------------------------- */

static void test_state_bytes(void **state)
{
    const size_t n = 1000;
    uint8_t *mask = malloc(n);
    sl_optim_params p;
    sl_optim *o = NULL;
    size_t est = 0, base;
    (void)state;
    assert_non_null(mask);
    for (size_t i = 0; i < n; i++)
        mask[i] = i < 600; /* one run of 600 trained floats */

    assert_int_equal(sl_optim_params_default(SL_OPTIM_SGD, &p), SL_OK);
    assert_int_equal(sl_optim_state_estimate(&p, 600, &est), SL_OK);
    assert_int_equal(est, 0);
    assert_int_equal(sl_optim_create(n, &p, mask, &o), SL_OK);
    assert_int_equal(sl_optim_size(o), n);
    assert_int_equal(sl_optim_trained(o), 600);
    base = sl_optim_state_bytes(o);
    assert_true(base > 0 && base < 256); /* the object and one run */
    sl_optim_free(o);

    p.momentum = 0.9;
    assert_int_equal(sl_optim_state_estimate(&p, 600, &est), SL_OK);
    assert_int_equal(est, 600 * sizeof(float));
    assert_int_equal(sl_optim_create(n, &p, mask, &o), SL_OK);
    assert_int_equal(sl_optim_state_bytes(o), base + 600 * sizeof(float));
    sl_optim_free(o);

    assert_int_equal(sl_optim_params_default(SL_OPTIM_ADAMW, &p), SL_OK);
    assert_int_equal(sl_optim_state_estimate(&p, 600, &est), SL_OK);
    assert_int_equal(est, 2 * 600 * sizeof(float));
    assert_int_equal(sl_optim_create(n, &p, mask, &o), SL_OK);
    assert_int_equal(sl_optim_state_bytes(o), base + 2 * 600 * sizeof(float));
    sl_optim_free(o);
    assert_int_equal(sl_optim_create(n, &p, NULL, &o), SL_OK); /* no mask: every float */
    assert_int_equal(sl_optim_trained(o), n);
    assert_int_equal(sl_optim_state_bytes(o), base + 2 * n * sizeof(float));
    sl_optim_free(o);
    assert_int_equal(sl_optim_state_estimate(&p, SIZE_MAX / 4, &est), SL_ETOOBIG);
    assert_int_equal(sl_optim_state_estimate(&p, 1, NULL), SL_EINVAL);

    /* nothing trained: no state, steps leave everything alone */
    memset(mask, 0, n);
    assert_int_equal(sl_optim_create(n, &p, mask, &o), SL_OK);
    assert_int_equal(sl_optim_trained(o), 0);
    assert_true(sl_optim_state_bytes(o) < base); /* not even a run */
    sl_optim_free(o);
    free(mask);
}

/* ---- runs longer than a chunk, state packing -------------------------------------------- */

static void test_runs(void **state)
{
    /* runs of 700 (crossing chunks), 1, 300, and 57 up to the end */
    static const size_t starts[] = {3, 710, 800, 1143}, lens[] = {700, 1, 300, 57};
    const size_t n = 1200;
    uint8_t *mask = calloc(n, 1);
    float *w = malloc(n * sizeof *w), *sep = malloc(n * sizeof *sep), *g = malloc(n * sizeof *g);
    float *w0 = malloc(n * sizeof *w0);
    uint64_t rng = 99;
    (void)state;
    assert_non_null(mask);
    assert_non_null(w);
    assert_non_null(sep);
    assert_non_null(g);
    assert_non_null(w0);
    for (size_t r = 0; r < 4; r++)
        memset(mask + starts[r], 1, lens[r]);
    for (size_t i = 0; i < n; i++)
        w0[i] = (float)((double)(sl_test_rand(&rng) >> 40) / 16777216.0 - 0.5);
    for (int kind = 0; kind < 3; kind++) {
        sl_optim_params p;
        sl_optim *whole = NULL, *part[4] = {NULL};
        assert_int_equal(sl_optim_params_default((sl_optim_kind)kind, &p), SL_OK);
        p.weight_decay = 0.01;
        p.prox_mu = 0.1;
        if (kind == SL_OPTIM_SGD) {
            p.momentum = 0.9;
            p.nesterov = 1;
        }
        memcpy(w, w0, n * sizeof *w);
        memcpy(sep, w0, n * sizeof *sep);
        assert_int_equal(sl_optim_create(n, &p, mask, &whole), SL_OK);
        for (size_t r = 0; r < 4; r++)
            assert_int_equal(sl_optim_create(lens[r], &p, NULL, &part[r]), SL_OK);
        for (int s = 0; s < 4; s++) {
            for (size_t i = 0; i < n; i++)
                g[i] = (float)((double)(sl_test_rand(&rng) >> 40) / 8388608.0 - 1.0);
            assert_int_equal(sl_optim_step(whole, w, g, w0, 0), SL_OK);
            for (size_t r = 0; r < 4; r++)
                assert_int_equal(
                    sl_optim_step(part[r], sep + starts[r], g + starts[r], w0 + starts[r], 0),
                    SL_OK);
        }
        /* element-wise rules: the same bits, and nothing outside the runs moved */
        assert_memory_equal(w, sep, n * sizeof *w);
        for (size_t i = 0; i < n; i++)
            if (!mask[i])
                assert_memory_equal(&w[i], &w0[i], sizeof(float));
        sl_optim_free(whole);
        for (size_t r = 0; r < 4; r++)
            sl_optim_free(part[r]);
    }
    free(mask);
    free(w);
    free(sep);
    free(g);
    free(w0);
}

/* ---- sl_train_opt ----------------------------------------------------------------------- */

static void synthetic(size_t n, size_t dim, size_t classes, float *x, int32_t *y)
{
    uint64_t rng = 7;
    for (size_t i = 0; i < n; i++) {
        y[i] = (int32_t)(i % classes);
        for (size_t j = 0; j < dim; j++)
            x[i * dim + j] = (float)((double)(sl_test_rand(&rng) >> 40) / 16777216.0) +
                             (j % classes == (size_t)y[i] ? 0.5f : 0.0f);
    }
}

static void test_train_opt_matches_sgd(void **state)
{
    const size_t n = 64;
    sl_model *m = NULL;
    sl_sgd *s = NULL;
    sl_optim *o = NULL;
    sl_sgd_params sp = {0.1f, 0.9f, 0.01f, 0.0f, NULL, NULL};
    sl_optim_params op;
    sl_train_opts opts = {16, 2, 5, NULL, NULL, 0};
    float *x = malloc(n * 784 * sizeof *x), *a, *b, la = 0, lb = 0;
    int32_t y[64];
    size_t np;
    (void)state;
    assert_non_null(x);
    synthetic(n, 784, 10, x, y);
    assert_int_equal(sl_model_create("logreg", &m), SL_OK);
    np = sl_model_params(m);
    a = malloc(np * sizeof *a);
    b = malloc(np * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(sl_model_init(m, a, 3), SL_OK);
    memcpy(b, a, np * sizeof *a);
    assert_int_equal(sl_sgd_create(np, &sp, &s), SL_OK);
    assert_int_equal(sl_optim_params_default(SL_OPTIM_SGD, &op), SL_OK);
    op.lr = 0.1;
    op.momentum = 0.9;
    op.weight_decay = 0.01;
    assert_int_equal(sl_optim_create(np, &op, NULL, &o), SL_OK);
    assert_int_equal(sl_train(m, a, s, NULL, x, y, NULL, n, &opts, &la), SL_OK);
    assert_int_equal(sl_train_opt(m, b, o, NULL, x, y, NULL, n, &opts, &lb), SL_OK);
    assert_int_equal(sl_optim_steps(o), 8);
    /* the same formula: equal within a few roundings (sl_sgd's kernels may group differently) */
    assert_true(worst(b, a, np) <= 1.0);
    assert_true(fabsf(la - lb) <= 1e-5f * fabsf(la));
    assert_true(isfinite(lb) && lb > 0.0f);
    assert_int_equal(sl_model_init(m, a, 3), SL_OK); /* it trained: away from the start */
    assert_true(worst(b, a, np) > 10.0);

    /* refusals */
    assert_int_equal(sl_train_opt(m, b, NULL, NULL, x, y, NULL, n, &opts, NULL), SL_EINVAL);
    assert_int_equal(sl_train_opt(m, b, o, NULL, x, y, NULL, 0, &opts, NULL), SL_EINVAL);
    sl_optim_free(o);
    assert_int_equal(sl_optim_create(np + 1, &op, NULL, &o), SL_OK); /* another size */
    assert_int_equal(sl_train_opt(m, b, o, NULL, x, y, NULL, n, &opts, NULL), SL_EINVAL);
    sl_optim_free(o);
    sl_sgd_free(s);
    sl_model_free(m);
    free(a);
    free(b);
    free(x);
}

static void test_train_opt_buffers(void **state)
{
    const size_t n = 48;
    sl_spec *spec = parse_bn_spec();
    sl_model *m = NULL;
    sl_optim *o = NULL;
    sl_optim_params p;
    sl_train_opts opts = {8, 1, 1, NULL, NULL, 0};
    const sl_layout *l = sl_spec_layout(spec);
    const char *frozen[] = {"fc"};
    float x[48 * 6], *w, *w0, loss = 0;
    int32_t y[48];
    uint8_t *mask;
    size_t np;
    char err[256];
    (void)state;
    synthetic(n, 6, 3, x, y);
    assert_int_equal(sl_model_create_spec(spec, &m, err, sizeof err), SL_OK);
    np = sl_model_params(m);
    w = malloc(np * sizeof *w);
    w0 = malloc(np * sizeof *w0);
    mask = malloc(np);
    assert_non_null(w);
    assert_non_null(w0);
    assert_non_null(mask);
    assert_int_equal(sl_model_init(m, w0, 4), SL_OK);
    memcpy(w, w0, np * sizeof *w);
    assert_int_equal(sl_optim_mask_spec(spec, frozen, 1, mask), SL_OK);
    assert_int_equal(sl_optim_params_default(SL_OPTIM_ADAM, &p), SL_OK);
    p.lr = 0.01;
    assert_int_equal(sl_optim_create(np, &p, mask, &o), SL_OK);
    assert_int_equal(sl_train_opt(m, w, o, NULL, x, y, NULL, n, &opts, &loss), SL_OK);
    assert_true(isfinite(loss) && loss > 0.0f);
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        size_t moved = 0;
        for (uint64_t i = 0; i < d->count; i++)
            moved += w[d->offset + i] != w0[d->offset + i];
        if (strcmp(d->name, "fc.weight") == 0)
            assert_int_equal(moved, 0); /* frozen */
        else
            assert_int_equal(moved, d->count); /* trained, or running statistics folded in */
    }
    sl_optim_free(o);
    sl_model_free(m);
    sl_spec_free(spec);
    free(mask);
    free(w0);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_reference_discriminates),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_clip_loose),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_mask_spec),
        cmocka_unit_test(test_state_bytes),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_train_opt_matches_sgd),
        cmocka_unit_test(test_train_opt_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
