/*
 * Every spec of the registry (device/nn/models) against PyTorch: the values
 * of tests/fixtures/nn/models_ref.json (make_models_ref.py beside it, the
 * model being tests/bench/spec_torch.py's), from parameters and a batch of
 * four that both sides make from seeds (the script's header says how):
 *   - the outputs in inference mode (BatchNorm on its running statistics)
 *     within 1e-5 relative (norm of the difference);
 *   - the loss of a training step (BatchNorm on the batch) within 1e-4
 *     relative and, per tensor, its gradient: sampled values, L2 norm and
 *     four +-1 projections within 1e-4 (sl_nn_ref.h's rule); a buffer's 0;
 *   - two training steps (loss_grad, the optimiser, update_buffers) with
 *     sl_optim's SGD (lr 0.1, momentum 0.9, weight decay 1e-4) and Adam
 *     (lr 1e-3, default betas), and with the older sl_sgd for the specs
 *     without buffers (it has no mask: its weight decay would move them):
 *     sampled parameters within 1e-5 relative + 1e-6 absolute after each
 *     step, and the change of every tensor since the start (norm and
 *     projections) within 1e-4, BatchNorm's running statistics included.
 *     The second step is the one that sees SGD's momentum;
 *   - the specs that run as fused stages, again on the general executor;
 *   - that the comparisons can fail: one tensor's gradient 1% off, SGD
 *     without momentum, Adam's rate 1% off each miss;
 *   - a reference for every spec file, a spec file for every reference;
 *   - every op: each small spec of tests/fixtures/nn/fd_specs*.json against
 *     tests/fixtures/nn/ops_ref.json (written by the same script), on the
 *     general executor: inference-mode outputs (1e-5), the training pass's
 *     loss and gradients (1e-4, as above) and the running statistics after
 *     it (1e-5); a spec with Dropout in inference mode only (PyTorch draws
 *     its own mask). A fd spec without a reference fails, and so does an op
 *     of MODEL_SPEC.md that no spec there uses.
 * Regenerate the fixtures with /usr/bin/python3 tests/fixtures/nn/make_models_ref.py.
 */
#include <cjson/cJSON.h>
#include <dirent.h>

#include "../../support/sl_nn_ref.h"
#include "starling/nn.h"
#include "starling/optim.h"
#include "../../../device/nn/graph_int.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

#define FORWARD_REL 1e-5
#define GRAD_REL    1e-4 /* loss, gradient, and the change of a tensor over the steps */
#define PROJ_REL    5e-4 /* a projection, of the tensor's norm (sl_nn_check_grad()) */
#define STEP_REL    1e-5 /* sampled parameters after a step */
#define STEP_ABS    1e-6
#define MAX_STEPS   4
#define MAX_SAMPLE  64

/* The comparisons, each with the worst of its differences in tolerance units (> 1 fails). */
enum { C_FORWARD, C_LOSS_GRAD, C_SGD, C_ADAM, C_SGD_OLD, C_COUNT };
static const char *const check_names[C_COUNT] = {"forward", "loss+grad", "sl_optim sgd",
                                                 "sl_optim adam", "sl_sgd"};

typedef struct verdict {
    double worst[C_COUNT];
    char where[C_COUNT][320];
    int ran[C_COUNT];
} verdict;

/* A deliberate mistake, for the tests that the comparisons can fail. */
typedef struct twist {
    double grad_scale;  /* of the first tensor's gradient (1: none) */
    int no_momentum;    /* SGD with momentum 0 */
    double adam_lr_mul; /* Adam's rate times this (1: none) */
} twist;

static const twist no_twist = {1.0, 0, 1.0};

static char *g_text;
static cJSON *g_root;
static size_t g_batch, g_sample, g_steps;
static double g_noise;

/* ---- the fixture --------------------------------------------------------------------------- */

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL)
        fail_msg("models_ref.json: no \"%s\"", key);
    return v;
}

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = item(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* @n floats of the array @arr (the shortest text of a float32 reads back exactly). */
static void floats(const cJSON *arr, float *out, size_t n)
{
    const cJSON *it;
    size_t i = 0;
    assert_true(cJSON_IsArray(arr));
    assert_int_equal((size_t)cJSON_GetArraySize(arr), n);
    cJSON_ArrayForEach(it, arr)
    {
        assert_true(cJSON_IsNumber(it));
        out[i++] = (float)it->valuedouble;
    }
}

/* A number of the fixture's top level, -1 when absent. */
static double top(const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g_root, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static int setup(void **state)
{
    size_t len = 0;
    (void)state;
    g_text = sl_fixture_load("nn/models_ref.json", &len);
    if (g_text == NULL || (g_root = cJSON_ParseWithLength(g_text, len)) == NULL)
        return -1;
    g_batch = (size_t)top("batch");
    g_sample = (size_t)top("sample");
    g_steps = (size_t)top("steps");
    g_noise = top("noise");
    return g_batch >= 1 && g_batch <= 4 && g_sample >= 1 && g_sample <= MAX_SAMPLE &&
                   g_steps >= 1 && g_steps <= MAX_STEPS && g_noise > 0.0 &&
                   top("projections") == SL_FIXTURE_PROJECTIONS
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    cJSON_Delete(g_root);
    free(g_text);
    return 0;
}

static const cJSON *reference_of(const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(g_root, "models"))
    {
        if (strcmp(item(m, "name")->valuestring, name) == 0)
            return m;
    }
    return NULL;
}

/* The optimiser settings of the fixture for SL_OPTIM_SGD or SL_OPTIM_ADAM. */
static void settings(sl_optim_kind kind, const twist *tw, sl_optim_params *p)
{
    const cJSON *o = item(g_root, kind == SL_OPTIM_SGD ? "sgd" : "adam");
    assert_int_equal(sl_optim_params_default(kind, p), SL_OK);
    p->lr = number(o, "lr");
    if (kind == SL_OPTIM_SGD) {
        p->momentum = tw->no_momentum ? 0.0 : number(o, "momentum");
        p->weight_decay = number(o, "weight_decay");
    } else {
        p->lr *= tw->adam_lr_mul;
        p->beta1 = number(o, "beta1");
        p->beta2 = number(o, "beta2");
        p->eps = number(o, "eps");
    }
}

/* ---- the seeded parameters and batch (make_models_ref.py) -------------------------------- */

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* make_reference.py's weights, a running variance 1 + 0.5 w (positive). */
static void initial_params(const sl_layout *l, float *w)
{
    sl_fixture_weights(l, w);
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        if (ends_with(d->name, "running_var"))
            for (uint64_t i = 0; i < d->count; i++)
                w[d->offset + i] = 1.0f + 0.5f * w[d->offset + i];
    }
}

/* @n values (float)m * 2^-23 in [-1, 1) from splitmix64 seeded @seed. */
static void unit_floats(uint64_t seed, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t m = (int64_t)(sl_fixture_splitmix(&seed) >> 40) - (1 << 23);
        out[i] = (float)m * (float)(1.0 / 8388608.0);
    }
}

/* One spec's model, batch and reference. */
typedef struct run {
    const char *name;
    const cJSON *ref;
    sl_spec *spec;
    sl_model *model;
    const sl_layout *layout;
    size_t n, classes, batch;
    int mse, buffers;
    float *w0, *x, *targets, *grad, *out;
    int32_t labels[4];
} run;

static sl_spec *load_spec(const char *name)
{
    char path[1024], err[512];
    void *text = NULL;
    size_t len = 0;
    sl_spec *s = NULL;
    snprintf(path, sizeof path, "%s/device/nn/models/%s.json", SL_SOURCE_DIR, name);
    assert_int_equal(sl_fs_read_file(path, 16u << 20, &text, &len), SL_OK);
    if (sl_spec_parse(text, len, &s, err, sizeof err) != SL_OK)
        fail_msg("%s: %s", path, err);
    free(text);
    return s;
}

/* @general: on the general executor even where the spec lowers to fused stages. Returns 0
 * (nothing set up) when @general is asked of a spec that runs there anyway. */
static int run_open(run *r, const char *name, int general)
{
    char err[256];
    const char *inputs;
    memset(r, 0, sizeof *r);
    r->name = name;
    r->ref = reference_of(name);
    if (r->ref == NULL)
        fail_msg("no reference for %s in models_ref.json: re-run make_models_ref.py", name);
    r->spec = load_spec(name);
    assert_int_equal(sl_model_create_spec(r->spec, &r->model, err, sizeof err), SL_OK);
    if (general) {
        int fused = sl_model_fused(r->model);
        sl_model_free(r->model);
        r->model = NULL;
        if (!fused) { /* the default run was on the general executor already */
            sl_spec_free(r->spec);
            return 0;
        }
        setenv("SL_NN_GENERAL", "1", 1);
        assert_int_equal(sl_model_create_spec(r->spec, &r->model, err, sizeof err), SL_OK);
        unsetenv("SL_NN_GENERAL");
        assert_false(sl_model_fused(r->model));
    }
    r->layout = sl_model_layout(r->model);
    r->n = sl_model_params(r->model);
    r->classes = sl_model_classes(r->model);
    r->batch = g_batch;
    r->mse = sl_spec_loss_kind(r->spec) == SL_SPEC_MSE;
    assert_true(r->mse || sl_spec_loss_kind(r->spec) == SL_SPEC_CROSS_ENTROPY);
    r->w0 = malloc(r->n * sizeof *r->w0);
    r->grad = malloc(r->n * sizeof *r->grad);
    r->x = malloc(r->batch * sl_model_input_size(r->model) * sizeof *r->x);
    r->out = malloc(r->batch * r->classes * sizeof *r->out);
    r->targets = malloc(r->batch * r->classes * sizeof *r->targets);
    assert_true(r->w0 && r->grad && r->x && r->out && r->targets);
    initial_params(r->layout, r->w0);
    {
        uint8_t *mask = malloc(r->n);
        assert_non_null(mask);
        assert_int_equal(sl_optim_mask_spec(r->spec, NULL, 0, mask), SL_OK);
        for (size_t i = 0; i < r->n; i++)
            r->buffers |= mask[i] == 0;
        free(mask);
    }
    inputs = item(r->ref, "inputs")->valuestring;
    if (strcmp(inputs, "fashion-mnist") == 0) {
        size_t len;
        float *img = sl_nn_ref_f32("input_4x1x28x28", "f32", 4 * 784);
        int32_t *lab = sl_fixture_load("nn/labels_4.i32", &len);
        assert_int_equal(sl_model_input_size(r->model), 784);
        assert_non_null(lab);
        memcpy(r->x, img, r->batch * 784 * sizeof *r->x);
        memcpy(r->labels, lab, r->batch * sizeof *r->labels);
        free(img);
        free(lab);
    } else {
        uint64_t state = 3;
        assert_string_equal(inputs, "splitmix");
        unit_floats(2, r->x, r->batch * sl_model_input_size(r->model));
        if (r->mse) {
            unit_floats(3, r->targets, r->batch * r->classes);
        } else {
            for (size_t i = 0; i < r->batch; i++)
                r->labels[i] = (int32_t)((sl_fixture_splitmix(&state) >> 32) % r->classes);
        }
    }
    return 1;
}

static void run_close(run *r)
{
    free(r->w0);
    free(r->grad);
    free(r->x);
    free(r->out);
    free(r->targets);
    sl_model_free(r->model);
    sl_spec_free(r->spec);
}

/* A training step's loss and gradient at @w into r->grad. */
static double train_grad(run *r, const float *w, const twist *tw)
{
    const sl_tensor_desc *first = sl_layout_tensor(r->layout, 0);
    float loss = NAN;
    if (r->mse)
        assert_int_equal(sl_model_loss_grad_targets(r->model, w, r->x, r->targets, r->batch, &loss,
                                                    r->grad, NULL),
                         SL_OK);
    else
        assert_int_equal(
            sl_model_loss_grad(r->model, w, r->x, r->labels, r->batch, &loss, r->grad, NULL),
            SL_OK);
    for (uint64_t i = 0; i < first->count; i++)
        r->grad[first->offset + i] *= (float)tw->grad_scale;
    return loss;
}

/* ---- the comparisons ---------------------------------------------------------------------- */

static void note(verdict *v, int c, double ratio, const char *model, const char *what,
                 const char *tensor)
{
    v->ran[c] = 1;
    if (!(ratio <= v->worst[c])) { /* NaN is the worst */
        v->worst[c] = isnan(ratio) ? INFINITY : ratio;
        snprintf(v->where[c], sizeof v->where[c], "%s %s %s", model, what, tensor);
    }
}

static uint64_t sample_count(uint64_t count)
{
    return count < g_sample ? count : g_sample;
}

static uint64_t sample_index(uint64_t count, uint64_t j)
{
    return count <= g_sample ? j : j * count / g_sample;
}

/* @v (a tensor @t of @count values) against {"norm", "proj"}: the norm within @rel
 * relative, each projection within PROJ_REL of the norm (in tolerance units into @v). */
static void check_summary(verdict *v, int c, const cJSON *ref, size_t t, const double *values,
                          uint64_t count, const char *model, const char *what, const char *tensor)
{
    double norm = 0.0, ref_norm = number(ref, "norm"), proj[SL_FIXTURE_PROJECTIONS];
    const cJSON *rp = item(ref, "proj");
    uint64_t state = 1000 + (uint64_t)t;
    for (uint64_t i = 0; i < count; i++)
        norm += values[i] * values[i];
    norm = sqrt(norm);
    note(v, c, fabs(norm - ref_norm) / (GRAD_REL * ref_norm + 1e-30), model, what, tensor);
    /* sl_fixture_project() on doubles: the change of a parameter is not a float */
    for (int p = 0; p < SL_FIXTURE_PROJECTIONS; p++) {
        double s = 0.0;
        for (uint64_t i = 0; i < count; i++)
            s += (sl_fixture_splitmix(&state) >> 63) ? -values[i] : values[i];
        proj[p] = s;
    }
    assert_int_equal(cJSON_GetArraySize(rp), SL_FIXTURE_PROJECTIONS);
    for (int p = 0; p < SL_FIXTURE_PROJECTIONS; p++)
        note(v, c,
             fabs(proj[p] - cJSON_GetArrayItem(rp, p)->valuedouble) / (PROJ_REL * ref_norm + 1e-30),
             model, what, tensor);
}

static double *as_doubles(const float *f, const float *minus, uint64_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (uint64_t i = 0; i < n; i++)
        d[i] = (double)f[i] - (minus != NULL ? (double)minus[i] : 0.0);
    return d;
}

/* Inference-mode outputs, the training step's loss and gradient. */
static void check_forward_grad(run *r, const twist *tw, verdict *v)
{
    const cJSON *tensors = item(r->ref, "tensors");
    float *ref_out = malloc(r->batch * r->classes * sizeof *ref_out);
    float sample[MAX_SAMPLE], ref_sample[MAX_SAMPLE];
    double loss, ref_loss = number(r->ref, "loss");
    assert_non_null(ref_out);
    floats(item(r->ref, "logits"), ref_out, r->batch * r->classes);
    assert_int_equal(sl_model_forward(r->model, r->w0, r->x, r->batch, r->out), SL_OK);
    note(v, C_FORWARD, sl_nn_rel_diff(r->out, ref_out, r->batch * r->classes) / FORWARD_REL,
         r->name, "outputs", "");
    free(ref_out);

    loss = train_grad(r, r->w0, tw);
    note(v, C_LOSS_GRAD, fabs(loss - ref_loss) / (GRAD_REL * fabs(ref_loss)), r->name, "loss", "");
    assert_int_equal((size_t)cJSON_GetArraySize(tensors), sl_layout_tensors(r->layout));
    for (size_t t = 0; t < sl_layout_tensors(r->layout); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(r->layout, t);
        const cJSON *rt = cJSON_GetArrayItem(tensors, (int)t), *rg;
        const float *g = r->grad + d->offset;
        uint64_t ns = sample_count(d->count);
        double *gd;
        assert_string_equal(item(rt, "name")->valuestring, d->name);
        assert_int_equal((uint64_t)number(rt, "count"), d->count);
        if (cJSON_IsTrue(item(rt, "buffer"))) {
            for (uint64_t i = 0; i < d->count; i++)
                assert_true(g[i] == 0.0f); /* a buffer has no gradient */
            continue;
        }
        rg = item(rt, "grad");
        for (uint64_t j = 0; j < ns; j++)
            sample[j] = g[sample_index(d->count, j)];
        floats(item(rg, "sample"), ref_sample, (size_t)ns);
        note(v, C_LOSS_GRAD, sl_nn_rel_diff(sample, ref_sample, (size_t)ns) / GRAD_REL, r->name,
             "grad sample", d->name);
        gd = as_doubles(g, NULL, d->count);
        check_summary(v, C_LOSS_GRAD, rg, t, gd, d->count, r->name, "grad", d->name);
        free(gd);
    }
}

/*
 * Which gradient values of tensor @d are rounding noise (make_models_ref.py's "noise"):
 * |g| <= g_noise x the tensor's gradient norm, 0 in @determined; their number.
 */
static uint64_t noise_of(const sl_tensor_desc *d, const float *grad, uint8_t *determined,
                         int *wobbly)
{
    double norm = 0.0;
    uint64_t noise = 0;
    for (uint64_t i = 0; i < d->count; i++)
        norm += (double)grad[d->offset + i] * grad[d->offset + i];
    norm = sqrt(norm);
    for (uint64_t i = 0; i < d->count; i++) {
        determined[d->offset + i] = fabs((double)grad[d->offset + i]) > g_noise * norm;
        noise += !determined[d->offset + i];
        *wobbly |= !determined[d->offset + i] && grad[d->offset + i] != 0.0f;
    }
    return noise;
}

/*
 * g_steps training steps from w0 with optimiser @c (C_SGD, C_ADAM, C_SGD_OLD), each step's
 * parameters against the reference. Adam moves a value whose gradient is rounding noise by
 * anything up to its rate a step (it divides by |g| + eps): such values, found from the
 * first step's gradient, must be as many as PyTorch's, stay within lr a step of its
 * values, and are left out of the change's norm and projections (as in the reference).
 * When some are not 0 (the shift of a channel that the next BatchNorm cancels), that next
 * BatchNorm's running mean sees their move from the second step on: after Adam's first step
 * the buffers are not compared then.
 */
static void check_steps(run *r, int c, const twist *tw, verdict *v)
{
    const char *key = c == C_ADAM ? "adam" : "sgd";
    const cJSON *tensors = item(r->ref, "tensors");
    float *w = malloc(r->n * sizeof *w), ref_sample[MAX_SAMPLE];
    uint8_t *mask = malloc(r->n), *determined = malloc(r->n);
    sl_optim *opt = NULL;
    sl_sgd *sgd = NULL;
    sl_optim_params p;
    int wobbly = 0;
    assert_true(w != NULL && mask != NULL && determined != NULL);
    memset(determined, 1, r->n);
    settings(c == C_ADAM ? SL_OPTIM_ADAM : SL_OPTIM_SGD, tw, &p);
    if (c == C_SGD_OLD) {
        sl_sgd_params sp = {(float)p.lr, (float)p.momentum, (float)p.weight_decay, 0.0f, NULL,
                            NULL};
        assert_int_equal(sl_sgd_create(r->n, &sp, &sgd), SL_OK);
    } else {
        assert_int_equal(sl_optim_mask_spec(r->spec, NULL, 0, mask), SL_OK);
        assert_int_equal(sl_optim_create(r->n, &p, mask, &opt), SL_OK);
    }
    memcpy(w, r->w0, r->n * sizeof *w);
    for (size_t s = 0; s < g_steps; s++) {
        char what[64];
        (void)train_grad(r, w, tw);
        for (size_t t = 0; c == C_ADAM && s == 0 && t < sl_layout_tensors(r->layout); t++) {
            const sl_tensor_desc *d = sl_layout_tensor(r->layout, t);
            const cJSON *rt = cJSON_GetArrayItem(tensors, (int)t);
            uint64_t noise;
            if (cJSON_IsTrue(item(rt, "buffer")))
                continue;
            noise = noise_of(d, r->grad, determined, &wobbly);
            if (noise != (uint64_t)number(rt, "noise"))
                fail_msg("%s %s: %llu gradient values of rounding noise, PyTorch %llu", r->name,
                         d->name, (unsigned long long)noise,
                         (unsigned long long)number(rt, "noise"));
        }
        if (c == C_SGD_OLD)
            assert_int_equal(sl_sgd_step(sgd, w, r->grad, NULL, 0), SL_OK);
        else
            assert_int_equal(sl_optim_step(opt, w, r->grad, NULL, 0), SL_OK);
        sl_model_update_buffers(r->model, w);
        snprintf(what, sizeof what, "step %zu", s + 1);
        for (size_t t = 0; t < sl_layout_tensors(r->layout); t++) {
            const sl_tensor_desc *d = sl_layout_tensor(r->layout, t);
            const cJSON *rs =
                cJSON_GetArrayItem(item(cJSON_GetArrayItem(tensors, (int)t), key), (int)s);
            uint64_t ns = sample_count(d->count);
            double *delta;
            assert_non_null(rs);
            if (wobbly && s > 0 &&
                cJSON_IsTrue(item(cJSON_GetArrayItem(tensors, (int)t), "buffer")))
                continue;
            floats(item(rs, "sample"), ref_sample, (size_t)ns);
            for (uint64_t j = 0; j < ns; j++) {
                uint64_t i = d->offset + sample_index(d->count, j);
                double a = w[i], ref = ref_sample[j];
                double tol = determined[i] ? STEP_ABS + STEP_REL * fabs(ref)
                                           : STEP_ABS + 1.1 * (double)(s + 1) * p.lr;
                note(v, c, fabs(a - ref) / tol, r->name, what, d->name);
            }
            delta = as_doubles(w + d->offset, r->w0 + d->offset, d->count);
            for (uint64_t i = 0; i < d->count; i++)
                if (!determined[d->offset + i])
                    delta[i] = 0.0;
            check_summary(v, c, item(rs, "delta"), t, delta, d->count, r->name, what, d->name);
            free(delta);
        }
    }
    sl_sgd_free(sgd);
    sl_optim_free(opt);
    free(determined);
    free(mask);
    free(w);
}

/* Every comparison for spec @name into @v; 0 when @general has nothing to add. */
static int check_model(const char *name, int general, const twist *tw, verdict *v)
{
    run r;
    memset(v, 0, sizeof *v);
    if (!run_open(&r, name, general))
        return 0;
    check_forward_grad(&r, tw, v);
    check_steps(&r, C_SGD, tw, v);
    check_steps(&r, C_ADAM, tw, v);
    if (!r.buffers)
        check_steps(&r, C_SGD_OLD, tw, v);
    run_close(&r);
    return 1;
}

static void expect_match(const char *name, int general)
{
    verdict v;
    if (!check_model(name, general, &no_twist, &v))
        return;
    for (int c = 0; c < C_COUNT; c++) {
        if (!v.ran[c])
            continue;
        printf("  %-13s %-8s %-13s worst %.3f of the tolerance (%s)\n", name,
               general ? "general" : "default", check_names[c], v.worst[c], v.where[c]);
        if (!(v.worst[c] <= 1.0))
            fail_msg("%s: %s %.3g times the tolerance at %s", name, check_names[c], v.worst[c],
                     v.where[c]);
    }
}

#define MODEL_TEST(m)                  \
    static void test_##m(void **state) \
    {                                  \
        (void)state;                   \
        expect_match(#m, 0);           \
        expect_match(#m, 1);           \
    }
MODEL_TEST(logreg)
MODEL_TEST(mlp)
MODEL_TEST(lenet5)
MODEL_TEST(cnn)
MODEL_TEST(cnn1d)
MODEL_TEST(dwsep_cnn)
MODEL_TEST(resnet_block)
MODEL_TEST(gru)
MODEL_TEST(mlp_reg)

/* ---- the comparisons can fail --------------------------------------------------------------- */

static void test_can_fail(void **state)
{
    static const char *const models[] = {"lenet5", "dwsep_cnn", "mlp_reg"};
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        verdict v;
        twist tw = no_twist;
        tw.grad_scale = 1.01;
        assert_true(check_model(models[i], 0, &tw, &v));
        printf("  %-10s gradient of tensor 0 +1%%: grad %.1f, sgd %.1f, adam %.1f\n", models[i],
               v.worst[C_LOSS_GRAD], v.worst[C_SGD], v.worst[C_ADAM]);
        assert_true(v.worst[C_FORWARD] <= 1.0); /* the forward pass is not touched */
        assert_true(v.worst[C_LOSS_GRAD] > 1.0 && v.worst[C_SGD] > 1.0);
        tw = no_twist;
        tw.no_momentum = 1;
        assert_true(check_model(models[i], 0, &tw, &v));
        printf("  %-10s SGD without momentum: sgd %.1f\n", models[i], v.worst[C_SGD]);
        assert_true(v.worst[C_SGD] > 1.0 && v.worst[C_ADAM] <= 1.0);
        tw = no_twist;
        tw.adam_lr_mul = 1.01;
        assert_true(check_model(models[i], 0, &tw, &v));
        printf("  %-10s Adam's rate +1%%: adam %.1f\n", models[i], v.worst[C_ADAM]);
        assert_true(v.worst[C_ADAM] > 1.0 && v.worst[C_SGD] <= 1.0);
    }
}

/* ---- coverage ---------------------------------------------------------------------------------
 */

static void test_every_spec(void **state)
{
    char dir[1024];
    DIR *d;
    struct dirent *e;
    size_t files = 0, refs = 0;
    const cJSON *m;
    (void)state;
    snprintf(dir, sizeof dir, "%s/device/nn/models", SL_SOURCE_DIR);
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        char name[256];
        size_t n = strlen(e->d_name);
        if (n <= 5 || n >= sizeof name || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        memcpy(name, e->d_name, n - 5);
        name[n - 5] = '\0';
        if (reference_of(name) == NULL)
            fail_msg("%s.json has no reference: re-run make_models_ref.py", name);
        files++;
    }
    closedir(d);
    cJSON_ArrayForEach(m, item(g_root, "models"))
    {
        sl_spec *s = load_spec(item(m, "name")->valuestring); /* fails when the file is gone */
        sl_spec_free(s);
        refs++;
    }
    printf("  %zu spec files, %zu references\n", files, refs);
    assert_int_equal(files, refs);
    assert_int_equal(files, 9); /* the MODEL_TEST list above */
}

/* ---- every op: fd_specs*.json against ops_ref.json ------------------------------------------ */

/* The vocabulary of the Embedding reading input tensor @t (the smallest, when several). */
static uint64_t vocab_of(const sl_spec *s, int32_t t)
{
    uint64_t v = 0;
    for (size_t i = 0; i < s->nn; i++)
        if (s->n[i].op == SL__OP_EMBEDDING && s->n[i].in[0] == t) {
            uint64_t rows = s->t[s->n[i].in[1]].shape[0];
            v = v == 0 || rows < v ? rows : v;
        }
    assert_true(v > 0);
    return v;
}

/* The reference of entry @index of fd file @file, NULL when there is none. */
static const cJSON *op_reference_of(const cJSON *ops, const char *file, int index)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, item(ops, "specs"))
    {
        if (strcmp(item(r, "file")->valuestring, file) == 0 && (int)number(r, "index") == index)
            return r;
    }
    return NULL;
}

/*
 * One fd spec against its reference (make_models_ref.py's op_reference()): the
 * splitmix64 weights (a BatchNorm's running variance 1 + 0.5 w), inputs from one stream
 * seeded 2 (floats m * 2^-23; int64 indices (z >> 32) % the Embedding's rows), labels
 * (z >> 32) % outputs or targets (z >> 40) * 2^-24 from 3. A tensor whose reference
 * gradient is 0 (an LSTM's recurrent weights over one step) is held to the whole
 * gradient's norm instead. @seen[op] is set for the spec's ops; the worst comparison,
 * in tolerance units, into @v.
 */
static void check_op(const char *label, const cJSON *spec_json, const cJSON *ref, size_t batch,
                     int *seen, verdict *v)
{
    char err[512];
    char *json = cJSON_PrintUnformatted(spec_json);
    sl_spec *s = NULL;
    sl__graph *g = NULL;
    const sl_layout *l;
    size_t np, nout, total = 0;
    float *w, *grad, *dout, *targets, *ref_out, sample[MAX_SAMPLE], ref_sample[MAX_SAMPLE];
    void *inputs[SL__SPEC_MAX_INPUTS] = {NULL};
    int32_t labels[4];
    uint64_t state = 2;
    double loss = 0.0, ref_loss, total_norm = 0.0;
    const cJSON *tensors, *rt;

    assert_non_null(json);
    if (sl_spec_parse(json, strlen(json), &s, err, sizeof err) != SL_OK)
        fail_msg("%s: %s", label, err);
    cJSON_free(json);
    for (size_t i = 0; i < s->nn; i++)
        seen[s->n[i].op] = 1;
    if (sl__graph_create(s, &g, err, sizeof err) != SL_OK)
        fail_msg("%s: %s", label, err);
    l = sl_spec_layout(s);
    np = (size_t)sl_layout_params(l);
    nout = sl_spec_output_size(s);
    w = malloc(np * sizeof *w);
    grad = malloc(np * sizeof *grad);
    dout = malloc(batch * nout * sizeof *dout);
    targets = malloc(batch * nout * sizeof *targets);
    ref_out = malloc(batch * nout * sizeof *ref_out);
    assert_true(w && grad && dout && targets && ref_out);
    sl_fixture_weights(l, w);
    for (size_t i = 0; i < s->nn; i++) {
        if (s->n[i].op == SL__OP_BATCHNORM) {
            const sl_tensor_desc *d = sl_layout_tensor(l, (size_t)s->t[s->n[i].in[4]].param);
            for (uint64_t e = 0; e < d->count; e++)
                w[d->offset + e] = 1.0f + 0.5f * w[d->offset + e];
        }
    }
    for (size_t i = 0; i < sl_spec_inputs(s); i++) {
        const sl__tensor *x = &s->t[s->input[i]];
        size_t n = batch * (size_t)x->count;
        if (x->dtype == SL__I64) {
            int64_t *iv = malloc(n * sizeof *iv);
            uint64_t vocab = vocab_of(s, s->input[i]);
            assert_non_null(iv);
            for (size_t k = 0; k < n; k++)
                iv[k] = (int64_t)((sl_fixture_splitmix(&state) >> 32) % vocab);
            inputs[i] = iv;
        } else {
            float *fv = malloc(n * sizeof *fv);
            assert_non_null(fv);
            for (size_t k = 0; k < n; k++) {
                int64_t m = (int64_t)(sl_fixture_splitmix(&state) >> 40) - (1 << 23);
                fv[k] = (float)m * (float)(1.0 / 8388608.0);
            }
            inputs[i] = fv;
        }
    }

    /* inference mode */
    floats(item(ref, "outputs"), ref_out, batch * nout);
    assert_int_equal(sl__graph_forward(g, w, (const void *const *)inputs, batch, 0, 0), SL_OK);
    note(v, C_FORWARD, sl_nn_rel_diff(sl__graph_output(g), ref_out, batch * nout) / FORWARD_REL,
         label, "outputs", "");

    /* a training pass: loss, gradient, running statistics */
    if (cJSON_IsTrue(item(ref, "training"))) {
        state = 3;
        for (size_t n = 0; n < batch; n++)
            labels[n] = (int32_t)((sl_fixture_splitmix(&state) >> 32) % nout);
        state = 3;
        for (size_t k = 0; k < batch * nout; k++)
            targets[k] = (float)(sl_fixture_splitmix(&state) >> 40) * (float)(1.0 / 16777216.0);
        assert_int_equal(sl__graph_forward(g, w, (const void *const *)inputs, batch, 1, 0), SL_OK);
        assert_int_equal(sl__loss(s, sl__graph_output(g), batch, labels, targets, &loss, dout),
                         SL_OK);
        assert_int_equal(sl__graph_backward(g, dout, grad), SL_OK);
        sl__graph_update_buffers(g, w);
        ref_loss = number(ref, "loss");
        note(v, C_LOSS_GRAD, fabs(loss - ref_loss) / (GRAD_REL * fabs(ref_loss)), label, "loss",
             "");
        tensors = item(ref, "tensors");
        assert_int_equal((size_t)cJSON_GetArraySize(tensors), sl_layout_tensors(l));
        cJSON_ArrayForEach(rt, tensors)
        {
            if (!cJSON_IsTrue(item(rt, "buffer"))) {
                double n = number(item(rt, "grad"), "norm");
                total_norm += n * n;
            }
        }
        total_norm = sqrt(total_norm);
        for (size_t t = 0; t < sl_layout_tensors(l); t++) {
            const sl_tensor_desc *d = sl_layout_tensor(l, t);
            const cJSON *rg;
            uint64_t ns = sample_count(d->count);
            double *gd, ref_norm, scale;
            rt = cJSON_GetArrayItem(tensors, (int)t);
            assert_string_equal(item(rt, "name")->valuestring, d->name);
            assert_int_equal((uint64_t)number(rt, "count"), d->count);
            if (cJSON_IsTrue(item(rt, "buffer"))) {
                for (uint64_t i = 0; i < d->count; i++)
                    assert_true(grad[d->offset + i] == 0.0f); /* a buffer has no gradient */
                for (uint64_t j = 0; j < ns; j++)
                    sample[j] = w[d->offset + sample_index(d->count, j)];
                floats(item(rt, "after"), ref_sample, (size_t)ns);
                note(v, C_FORWARD, sl_nn_rel_diff(sample, ref_sample, (size_t)ns) / FORWARD_REL,
                     label, "running statistic", d->name);
                continue;
            }
            rg = item(rt, "grad");
            ref_norm = number(rg, "norm");
            scale = ref_norm > 0.0 ? 1.0 : 1.0 / (total_norm + 1e-30);
            for (uint64_t j = 0; j < ns; j++)
                sample[j] = grad[d->offset + sample_index(d->count, j)];
            floats(item(rg, "sample"), ref_sample, (size_t)ns);
            note(v, C_LOSS_GRAD, sl_nn_rel_diff(sample, ref_sample, (size_t)ns) * scale / GRAD_REL,
                 label, "grad sample", d->name);
            gd = as_doubles(grad + d->offset, NULL, d->count);
            if (ref_norm > 0.0) {
                check_summary(v, C_LOSS_GRAD, rg, t, gd, d->count, label, "grad", d->name);
            } else {
                double n2 = 0.0;
                for (uint64_t i = 0; i < d->count; i++)
                    n2 += gd[i] * gd[i];
                note(v, C_LOSS_GRAD, sqrt(n2) * scale / GRAD_REL, label, "grad (0)", d->name);
            }
            free(gd);
            total++;
        }
        assert_true(total > 0);
    }
    printf("  %-52.52s %s forward %.3f, loss+grad %.3f of the tolerance\n", label,
           cJSON_IsTrue(item(ref, "training")) ? "         " : "(no train)", v->worst[C_FORWARD],
           v->worst[C_LOSS_GRAD]);
    for (size_t i = 0; i < SL__SPEC_MAX_INPUTS; i++)
        free(inputs[i]);
    free(w), free(grad), free(dout), free(targets), free(ref_out);
    sl__graph_free(g);
    sl_spec_free(s);
}

static int is_fd_file(const char *name)
{
    size_t n = strlen(name);
    return strncmp(name, "fd_specs", 8) == 0 && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

static void test_every_op(void **state)
{
    char rel[300];
    size_t len = 0, checked = 0, refs;
    char *text = sl_fixture_load("nn/ops_ref.json", &len);
    cJSON *ops;
    DIR *d;
    struct dirent *e;
    int seen[SL__OP_COUNT] = {0}, files = 0;
    size_t batch;
    (void)state;
    assert_non_null(text);
    ops = cJSON_ParseWithLength(text, len);
    assert_non_null(ops);
    batch = (size_t)number(ops, "batch");
    assert_true(batch >= 1 && batch <= 4);
    assert_true((size_t)number(ops, "sample") == g_sample);
    assert_true(number(ops, "projections") == SL_FIXTURE_PROJECTIONS);
    snprintf(rel, sizeof rel, "%s/nn", sl_fixture_dir());
    d = opendir(rel);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t flen = 0;
        char *ftext;
        cJSON *root, *it;
        int index = 0;
        if (!is_fd_file(e->d_name))
            continue;
        snprintf(rel, sizeof rel, "nn/%s", e->d_name);
        ftext = sl_fixture_load(rel, &flen);
        assert_non_null(ftext);
        root = cJSON_ParseWithLength(ftext, flen);
        assert_non_null(root);
        cJSON_ArrayForEach(it, root)
        {
            const cJSON *ref = op_reference_of(ops, e->d_name, index);
            const char *what = item(it, "what")->valuestring;
            char label[128];
            verdict v;
            if (ref == NULL)
                fail_msg("%s[%d] (%s) has no reference in ops_ref.json: re-run "
                         "make_models_ref.py",
                         e->d_name, index, what);
            if (strcmp(item(ref, "what")->valuestring, what) != 0)
                fail_msg("%s[%d] is \"%s\", its reference \"%s\": re-run make_models_ref.py",
                         e->d_name, index, what, item(ref, "what")->valuestring);
            snprintf(label, sizeof label, "%.80s[%d] %.32s", e->d_name, index, what);
            memset(&v, 0, sizeof v);
            check_op(label, item(it, "spec"), ref, batch, seen, &v);
            for (int c = 0; c < C_COUNT; c++)
                if (v.ran[c] && !(v.worst[c] <= 1.0))
                    fail_msg("%s: %s %.3g times the tolerance at %s", label, check_names[c],
                             v.worst[c], v.where[c]);
            index++;
            checked++;
        }
        cJSON_Delete(root);
        free(ftext);
        files++;
    }
    closedir(d);
    refs = (size_t)cJSON_GetArraySize(item(ops, "specs"));
    printf("  %d fd files, %zu specs, %zu references\n", files, checked, refs);
    assert_true(files > 0);
    assert_int_equal(checked, refs); /* no reference without its spec */
    for (int op = 0; op < SL__OP_COUNT; op++)
        if (!seen[op])
            fail_msg("no fd spec uses %s", sl__op_name((sl__op)op));
    cJSON_Delete(ops);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_spec), cmocka_unit_test(test_logreg),
        cmocka_unit_test(test_mlp),        cmocka_unit_test(test_lenet5),
        cmocka_unit_test(test_cnn),        cmocka_unit_test(test_cnn1d),
        cmocka_unit_test(test_dwsep_cnn),  cmocka_unit_test(test_resnet_block),
        cmocka_unit_test(test_gru),        cmocka_unit_test(test_mlp_reg),
        cmocka_unit_test(test_can_fail),   cmocka_unit_test(test_every_op),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
