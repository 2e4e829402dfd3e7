/*
 * The general executor of a model spec (device/nn/graph.c and the ops):
 *   - the registry's specs against PyTorch's reference values (logits, loss,
 *     gradient: tests/fixtures/nn), through the general kernels;
 *   - finite differences for every op that has kernels: a small spec per op
 *     (tests/fixtures/nn/fd_specs*.json),
 *     random parameters and inputs, the analytic gradient of a loss against
 *     central differences of it, parameter by parameter (the ops' input
 *     gradients are exercised by putting a parameterised op before them);
 *   - the memory plan (the arena is sized before the first step and only
 *     grows) and the losses' refusals.
 */
#include <cjson/cJSON.h>

#include "../../support/sl_nn_ref.h"
#include "starling/nn.h"
#include "../../../device/nn/graph_int.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

#define BATCH 4

static sl_spec *load_spec(const char *rel)
{
    char path[1024], err[512];
    void *text = NULL;
    size_t len = 0;
    sl_spec *s = NULL;
    snprintf(path, sizeof path, "%s/%s", SL_SOURCE_DIR, rel);
    assert_int_equal(sl_fs_read_file(path, 16u << 20, &text, &len), SL_OK);
    if (sl_spec_parse(text, len, &s, err, sizeof err) != SL_OK)
        fail_msg("%s: %s", rel, err);
    free(text);
    return s;
}

static sl_spec *spec_of(const char *json)
{
    char err[512];
    sl_spec *s = NULL;
    if (sl_spec_parse(json, strlen(json), &s, err, sizeof err) != SL_OK)
        fail_msg("%s", err);
    return s;
}

/* ---- the registry's specs against PyTorch ------------------------------------------------ */

static void check_reference(const char *model)
{
    char rel[128];
    sl_spec *s;
    sl__graph *g = NULL;
    size_t np, len;
    float *w, *input, *ref_logits, *grad, dout[BATCH * 10];
    int32_t labels[BATCH];
    char *loss_text, err[256];
    double loss, d;
    const void *inputs[1];
    void *lab;

    snprintf(rel, sizeof rel, "device/nn/models/%s.json", model);
    s = load_spec(rel);
    assert_int_equal(sl__graph_create(s, &g, err, sizeof err), SL_OK);
    np = (size_t)sl_layout_params(sl_spec_layout(s));
    w = malloc(np * sizeof *w);
    grad = malloc(np * sizeof *grad);
    assert_non_null(w);
    assert_non_null(grad);
    sl_fixture_weights(sl_spec_layout(s), w);
    input = sl_nn_ref_f32("input_4x1x28x28", "f32", BATCH * 784);
    lab = sl_fixture_load("nn/labels_4.i32", &len);
    assert_non_null(lab);
    memcpy(labels, lab, sizeof labels);
    free(lab);
    ref_logits = sl_nn_ref_f32(model, "logits_4x10.f32", BATCH * 10);
    inputs[0] = input;

    assert_int_equal(sl__graph_forward(g, w, inputs, BATCH, 1, 1), SL_OK);
    d = sl_nn_rel_diff(sl__graph_output(g), ref_logits, BATCH * 10);
    assert_int_equal(sl__loss(s, sl__graph_output(g), BATCH, labels, NULL, &loss, dout), SL_OK);
    snprintf(rel, sizeof rel, "nn/%s.loss", model);
    loss_text = sl_fixture_load(rel, &len);
    assert_non_null(loss_text);
    printf("  %-7s general kernels: logits rel diff %.2e, loss %.7f (ref %.7f)\n", model, d, loss,
           strtod(loss_text, NULL));
    assert_true(d <= 1e-5);
    assert_true(fabs(loss - strtod(loss_text, NULL)) <= 1e-5 * loss);
    assert_int_equal(sl__graph_backward(g, dout, grad), SL_OK);
    sl_nn_check_grad(model, sl_spec_layout(s), grad);
    printf("\n");
    free(loss_text);
    free(ref_logits);
    free(input);
    free(grad);
    free(w);
    sl__graph_free(g);
    sl_spec_free(s);
}

static void test_reference_logreg(void **state)
{
    (void)state;
    check_reference("logreg");
}

static void test_reference_mlp(void **state)
{
    (void)state;
    check_reference("mlp");
}

static void test_reference_lenet5(void **state)
{
    (void)state;
    check_reference("lenet5");
}

static void test_reference_cnn(void **state)
{
    (void)state;
    check_reference("cnn");
}

/* ---- finite differences ------------------------------------------------------------------ */

static uint64_t rng = 12345;

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(sl_test_rand(&rng) >> 40) / 16777216.0f;
}

/* The loss of @s at @params on @inputs (MSE/L1/... to @targets, or CE to @labels). */
static double loss_at(sl__graph *g, const sl_spec *s, const float *params, const void *const *in,
                      const int32_t *labels, const float *targets)
{
    double loss;
    assert_int_equal(sl__graph_forward(g, params, in, BATCH, 1, 77), SL_OK);
    assert_int_equal(sl__loss(s, sl__graph_output(g), BATCH, labels, targets, &loss, NULL), SL_OK);
    return loss;
}

/*
 * Central differences in float32 (h = 1e-3 on values of order 1): every parameter of a
 * small spec, or 400 drawn at random from a larger one. Agreement: |num - ana| <= 2e-3 +
 * 3e-2 max(|num|, |ana|). A kernel that is wrong misses by far more; float32 rounding of
 * the loss (about 1e-7 relative, divided by 2h) stays below it.
 */
static void check_fd(const char *json, const char *what)
{
    sl_spec *s = spec_of(json);
    sl__graph *g = NULL;
    const sl_layout *l = sl_spec_layout(s);
    size_t np = (size_t)sl_layout_params(l), nout = sl_spec_output_size(s);
    float *p = malloc(np * sizeof *p), *grad = malloc(np * sizeof *grad);
    float *dout = malloc(BATCH * nout * sizeof *dout), *targets = malloc(BATCH * nout * 4);
    void *inputs[8] = {0};
    int32_t labels[BATCH];
    double loss, worst = 0.0;
    size_t checked = 0;
    char err[256];

    assert_non_null(p), assert_non_null(grad), assert_non_null(dout), assert_non_null(targets);
    assert_int_equal(sl__graph_create(s, &g, err, sizeof err), SL_OK);
    for (size_t i = 0; i < np; i++)
        p[i] = uniform(-0.8f, 0.8f);
    /* BatchNormalization's running variance must stay positive */
    for (size_t t = 0; t < s->np; t++)
        if (s->p[t].buffer)
            for (uint64_t e = 0; e < sl_layout_tensor(l, t)->count; e++)
                p[sl_layout_tensor(l, t)->offset + e] = uniform(0.5f, 1.5f);
    for (size_t i = 0; i < sl_spec_inputs(s); i++) {
        const sl__tensor *x = &s->t[s->input[i]];
        size_t n = BATCH * (size_t)x->count;
        if (x->dtype == SL__I64) {
            int64_t *v = malloc(n * sizeof *v);
            assert_non_null(v);
            for (size_t k = 0; k < n; k++)
                v[k] = (int64_t)(sl_test_rand(&rng) % 7);
            inputs[i] = v;
        } else {
            float *v = malloc(n * sizeof *v);
            assert_non_null(v);
            for (size_t k = 0; k < n; k++)
                v[k] = uniform(-1.0f, 1.0f);
            inputs[i] = v;
        }
    }
    for (size_t k = 0; k < BATCH * nout; k++)
        targets[k] = s->loss == SL__LOSS_BCE_WITH_LOGITS ? (float)(sl_test_rand(&rng) % 2)
                                                         : uniform(-1.0f, 1.0f);
    for (size_t n = 0; n < BATCH; n++)
        labels[n] = (int32_t)(sl_test_rand(&rng) % nout);

    loss = loss_at(g, s, p, (const void *const *)inputs, labels, targets);
    assert_int_equal(sl__loss(s, sl__graph_output(g), BATCH, labels, targets, &loss, dout), SL_OK);
    assert_int_equal(sl__graph_backward(g, dout, grad), SL_OK);
    for (size_t k = 0; k < (np < 400 ? np : 400); k++) {
        size_t i = np < 400 ? k : (size_t)(sl_test_rand(&rng) % np);
        size_t t = 0;
        float keep = p[i];
        double num = 0, ana = grad[i], tol = 0;
        while (t + 1 < sl_layout_tensors(l) && sl_layout_tensor(l, t + 1)->offset <= i)
            t++;
        if (s->p[t].buffer) { /* not trained: its gradient is 0 */
            assert_true(grad[i] == 0.0f);
            continue;
        }
        /* a step that crosses a kink (ReLU at 0, a pooling window's maximum changing
         * hands) disagrees at that step and agrees at a smaller one; a wrong backward
         * pass disagrees at both */
        for (float h = 1e-3f; h >= 2e-4f; h /= 4) {
            double lp, lm;
            p[i] = keep + h;
            lp = loss_at(g, s, p, (const void *const *)inputs, labels, targets);
            p[i] = keep - h;
            lm = loss_at(g, s, p, (const void *const *)inputs, labels, targets);
            p[i] = keep;
            num = (lp - lm) / (2.0 * (double)h);
            tol = 2e-3 + 3e-2 * fmax(fabs(num), fabs(ana));
            if (fabs(num - ana) <= tol)
                break;
        }
        if (fabs(num - ana) > tol)
            fail_msg("%s: d loss / d %s[%llu]: finite differences %.6g, backward %.6g", what,
                     sl_layout_tensor(l, t)->name,
                     (unsigned long long)(i - sl_layout_tensor(l, t)->offset), num, ana);
        worst = fmax(worst, fabs(num - ana) / fmax(1e-6, fmax(fabs(num), fabs(ana))));
        checked++;
    }
    printf("  %-34s %4zu parameters checked, worst relative difference %.1e\n", what, checked,
           worst);
    assert_true(checked > 0);
    for (size_t i = 0; i < 8; i++)
        free(inputs[i]);
    free(p), free(grad), free(dout), free(targets);
    sl__graph_free(g);
    sl_spec_free(s);
}

/* Every case of tests/fixtures/nn/@file: {"what", "spec"} objects. */
static void check_fd_file(const char *file)
{
    char name[256];
    size_t len;
    char *text;
    cJSON *root, *it;
    int n = 0;
    snprintf(name, sizeof name, "nn/%s", file);
    text = sl_fixture_load(name, &len);
    assert_non_null(text);
    root = cJSON_ParseWithLength(text, len);
    assert_non_null(root);
    cJSON_ArrayForEach(it, root)
    {
        cJSON *what = cJSON_GetObjectItemCaseSensitive(it, "what");
        char *json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "spec"));
        assert_true(cJSON_IsString(what));
        assert_non_null(json);
        check_fd(json, what->valuestring);
        cJSON_free(json);
        n++;
    }
    assert_true(n > 0);
    cJSON_Delete(root);
    free(text);
}

static void test_fd_core(void **state)
{
    (void)state;
    check_fd_file("fd_specs.json");
}

static void test_fd_shape(void **state)
{
    (void)state;
    check_fd_file("fd_specs_shape.json");
}

static void test_fd_norm(void **state)
{
    (void)state;
    check_fd_file("fd_specs_norm.json");
}

static void test_fd_seq(void **state)
{
    (void)state;
    check_fd_file("fd_specs_seq.json");
}

/* ---- memory plan, losses' refusals ------------------------------------------------------- */

static void test_plan_and_refusals(void **state)
{
    sl_spec *s = load_spec("device/nn/models/lenet5.json");
    sl__graph *g = NULL;
    size_t b1, b32, b64;
    float out[2 * 10] = {0}, d[2 * 10];
    int32_t bad[2] = {3, 10};
    double loss = -1;
    char err[256];
    (void)state;
    assert_int_equal(sl__graph_create(s, &g, err, sizeof err), SL_OK);
    b1 = sl__graph_arena_bytes(g, 1);
    b32 = sl__graph_arena_bytes(g, 32);
    b64 = sl__graph_arena_bytes(g, 64);
    printf("  lenet5 arena: %zu bytes at batch 1, %zu at 32, %zu at 64\n", b1, b32, b64);
    assert_true(b1 > 0 && b32 > b1 && b64 > b32);
    /* activations dominate: twice the batch, about twice the arena */
    assert_true(b64 < 2 * b32 + 4096 && b64 > 2 * b32 - 4 * b1);
    assert_int_equal(sl__graph_arena_bytes(g, 0), 0);
    assert_int_equal(sl__graph_reserve(g, 16), SL_OK);
    assert_int_equal(sl__graph_reserve(g, 8), SL_OK); /* grows only */
    assert_int_equal(sl__graph_backward(g, d, out), SL_ESTATE);
    /* a label outside the classes, a NaN target, a BCE target outside [0, 1]: refused */
    memset(d, 0x5a, sizeof d);
    assert_int_equal(sl__loss(s, out, 2, bad, NULL, &loss, d), SL_EINVAL);
    assert_true(loss == -1);
    {
        uint32_t u;
        memcpy(&u, d, 4);
        assert_int_equal(u, 0x5a5a5a5au);
    }
    sl__graph_free(g);
    sl_spec_free(s);
    s = spec_of("{\"starling_model\": 1, \"name\": \"bce\", \"inputs\": [{\"name\": \"x\", "
                "\"shape\": [5]}], \"params\": [{\"name\": \"w\", \"shape\": [4, 5]}], \"nodes\": "
                "[{\"op\": \"Gemm\", \"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}], "
                "\"output\": \"y\", \"loss\": {\"op\": \"bce_with_logits\"}}");
    {
        float t[8] = {0, 1, 0, 1, 1, 0, 2, 0};
        assert_int_equal(sl__loss(s, out, 2, NULL, t, &loss, d), SL_EINVAL);
        t[6] = NAN;
        assert_int_equal(sl__loss(s, out, 2, NULL, t, &loss, d), SL_EINVAL);
        t[6] = 1;
        assert_int_equal(sl__loss(s, out, 2, NULL, t, &loss, d), SL_OK);
        assert_true(fabs(loss - log(2.0)) < 1e-6); /* logits 0: log 2 each */
    }
    sl_spec_free(s);
}

/* With an argument (a file under tests/fixtures/nn), only that file's finite-difference
 * cases run: for whoever writes the next op family's cases before they join the suite. */
int main(int argc, char **argv)
{
    if (argc == 2) {
        check_fd_file(argv[1]);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_logreg),  cmocka_unit_test(test_reference_mlp),
        cmocka_unit_test(test_reference_lenet5),  cmocka_unit_test(test_reference_cnn),
        cmocka_unit_test(test_fd_core),           cmocka_unit_test(test_fd_shape),
        cmocka_unit_test(test_fd_norm),           cmocka_unit_test(test_fd_seq),
        cmocka_unit_test(test_plan_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
