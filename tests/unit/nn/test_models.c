/*
 * The model registry against PyTorch: parameter counts, layouts, logits,
 * loss and gradient of every model on the fixture batch (tests/fixtures/nn:
 * its README and make_reference.py), initialisation, and agreement of
 * every element-wise variant and the scalar GEMM with each other.
 */
#include <math.h>

#include "../../support/sl_test.h"
#include "../../support/sl_fixture.h"
#include "../../support/sl_nn_ref.h"
#include "starling/nn.h"
#include "../../../device/nn/nn_int.h"
#include "../../../device/nn/gemm_int.h"

#define BATCH 4

static const char *const models[] = {"logreg", "mlp", "lenet5", "cnn"};
static const size_t counts[] = {7850, 199210, 44426, 1663370};
#define N_MODELS 4

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

static void *load_fixture(const char *name, size_t *len)
{
    char path[300];
    snprintf(path, sizeof path, "nn/%s", name);
    return sl_fixture_load(path, len);
}

static float *load_f32(const char *model, const char *what, size_t expect)
{
    char name[256];
    size_t len;
    float *f;
    snprintf(name, sizeof name, "%s.%s", model, what);
    f = load_fixture(name, &len);
    assert_non_null(f);
    assert_int_equal(len, expect * sizeof(float));
    return f;
}

/* The reference weights of @m (made, not stored: sl_fixture_weights()). */
static float *ref_weights(const sl_model *m)
{
    float *w = malloc(sl_model_params(m) * sizeof *w);
    assert_non_null(w);
    sl_fixture_weights(sl_model_layout(m), w);
    return w;
}

static float *input;
static int32_t labels[BATCH];

static int group_setup(void **state)
{
    size_t len;
    void *lab;
    (void)state;
    input = load_fixture("input_4x1x28x28.f32", &len);
    if (input == NULL || len != BATCH * 784 * sizeof(float))
        return -1;
    lab = load_fixture("labels_4.i32", &len);
    if (lab == NULL || len != sizeof labels)
        return -1;
    memcpy(labels, lab, sizeof labels);
    free(lab);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    free(input);
    return 0;
}

static double rel_diff(const float *a, const float *ref, size_t n)
{
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

/* Per-tensor relative difference, the largest over the layout. */
static double worst_tensor_diff(const sl_layout *l, const float *a, const float *ref,
                                const char **which)
{
    double worst = 0.0;
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        double r = rel_diff(a + d->offset, ref + d->offset, (size_t)d->count);
        if (r >= worst) {
            worst = r;
            *which = d->name;
        }
    }
    return worst;
}

/* ------------------------------------------------------------------------ */
/* Registry                                                                 */
/* ------------------------------------------------------------------------ */

static void test_registry(void **state)
{
    const char *const *names = sl_model_names();
    sl_model *m = NULL;
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        assert_non_null(names[i]);
        assert_string_equal(names[i], models[i]);
        assert_int_equal(sl_model_create(models[i], &m), SL_OK);
        assert_string_equal(sl_model_name(m), models[i]);
        assert_int_equal(sl_model_params(m), counts[i]);
        assert_int_equal(sl_layout_params(sl_model_layout(m)), counts[i]);
        assert_int_equal(sl_model_input_size(m), 784);
        assert_int_equal(sl_model_classes(m), 10);
        sl_model_free(m);
    }
    assert_null(names[N_MODELS]);
    m = NULL;
    assert_int_equal(sl_model_create("resnet50", &m), SL_ENOENT);
    assert_null(m);
    assert_int_equal(sl_model_create(NULL, &m), SL_EINVAL);
    sl_model_free(NULL);
}

static void test_layouts_match_fixtures(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        char name[64];
        size_t len;
        sl_layout *ref = NULL;
        sl_model *m;
        char *text;
        snprintf(name, sizeof name, "%s.layout", models[i]);
        text = load_fixture(name, &len);
        assert_non_null(text);
        assert_int_equal(sl_layout_parse(text, len, &ref), SL_OK);
        assert_int_equal(sl_model_create(models[i], &m), SL_OK);
        assert_true(sl_layout_equal(sl_model_layout(m), ref));
        assert_int_equal(sl_layout_hash(sl_model_layout(m)), sl_layout_hash(ref));
        sl_layout_free(ref);
        sl_model_free(m);
        free(text);
    }
}

/* ------------------------------------------------------------------------ */
/* Against PyTorch                                                          */
/* ------------------------------------------------------------------------ */

static void check_model(const char *name)
{
    sl_model *m;
    size_t np;
    float *w, *ref_logits, *grad, logits[BATCH * 10], logits2[BATCH * 10], loss;
    char *loss_text;
    char file[64];
    double ref_loss, d;

    assert_int_equal(sl_model_create(name, &m), SL_OK);
    np = sl_model_params(m);
    w = ref_weights(m);
    ref_logits = load_f32(name, "logits_4x10.f32", BATCH * 10);
    snprintf(file, sizeof file, "%s.loss", name);
    loss_text = load_fixture(file, NULL);
    assert_non_null(loss_text);
    ref_loss = strtod(loss_text, NULL);
    grad = malloc(np * sizeof *grad);
    assert_non_null(grad);

    assert_int_equal(sl_model_forward(m, w, input, BATCH, logits), SL_OK);
    d = rel_diff(logits, ref_logits, BATCH * 10);
    printf("  %-7s logits rel diff %.2e", name, d);
    assert_true(d <= 1e-5);

    assert_int_equal(sl_model_loss_grad(m, w, input, labels, BATCH, &loss, grad, logits2), SL_OK);
    assert_memory_equal(logits, logits2, sizeof logits);
    printf("  loss %.7f (ref %.7f)", loss, ref_loss);
    assert_true(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss));
    sl_nn_check_grad(name, sl_model_layout(m), grad);
    printf("\n");

    free(grad);
    free(loss_text);
    free(ref_logits);
    free(w);
    sl_model_free(m);
}

/* lenet5's whole gradient is kept too: every element, per tensor. */
static void test_lenet5_full_gradient(void **state)
{
    sl_model *m;
    float *w, *grad, *ref, loss;
    const char *which = "";
    double d;
    (void)state;
    assert_int_equal(sl_model_create("lenet5", &m), SL_OK);
    w = ref_weights(m);
    ref = load_f32("lenet5", "grad.f32", sl_model_params(m));
    grad = malloc(sl_model_params(m) * sizeof *grad);
    assert_non_null(grad);
    assert_int_equal(sl_model_loss_grad(m, w, input, labels, BATCH, &loss, grad, NULL), SL_OK);
    d = worst_tensor_diff(sl_model_layout(m), grad, ref, &which);
    printf("  lenet5 worst grad rel diff %.2e (%s)\n", d, which);
    assert_true(d <= 1e-4);
    free(grad);
    free(ref);
    free(w);
    sl_model_free(m);
}

static void test_logreg(void **state)
{
    (void)state;
    check_model("logreg");
}

static void test_mlp(void **state)
{
    (void)state;
    check_model("mlp");
}

static void test_lenet5(void **state)
{
    (void)state;
    check_model("lenet5");
}

static void test_cnn(void **state)
{
    (void)state;
    check_model("cnn");
}

/* A batch run sample by sample gives the batch's logits (scratch reuse,
 * smaller batches after a larger one). */
static void test_batch_consistency(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        sl_model *m;
        float *w, all[BATCH * 10], one[10];
        assert_int_equal(sl_model_create(models[i], &m), SL_OK);
        w = ref_weights(m);
        assert_int_equal(sl_model_forward(m, w, input, BATCH, all), SL_OK);
        for (size_t n = 0; n < BATCH; n++) {
            assert_int_equal(sl_model_forward(m, w, input + n * 784, 1, one), SL_OK);
            assert_true(rel_diff(one, all + n * 10, 10) <= 1e-6);
        }
        free(w);
        sl_model_free(m);
    }
}

static void test_bad_arguments(void **state)
{
    sl_model *m;
    float *w, *grad, loss = -1.0f;
    int32_t bad[BATCH] = {3, 0, 10, 7};
    (void)state;
    assert_int_equal(sl_model_create("lenet5", &m), SL_OK);
    w = ref_weights(m);
    grad = malloc(sl_model_params(m) * sizeof *grad);
    assert_non_null(grad);
    memset(grad, 0x5a, sl_model_params(m) * sizeof *grad);
    assert_int_equal(sl_model_loss_grad(m, w, input, bad, BATCH, &loss, grad, NULL), SL_EINVAL);
    bad[2] = -1;
    assert_int_equal(sl_model_loss_grad(m, w, input, bad, BATCH, &loss, grad, NULL), SL_EINVAL);
    assert_int_equal(sl_model_loss_grad(m, w, input, labels, 0, &loss, grad, NULL), SL_EINVAL);
    assert_int_equal(sl_model_loss_grad(m, w, input, labels, BATCH, &loss, NULL, NULL), SL_EINVAL);
    assert_true(loss == -1.0f);
    for (size_t i = 0; i < sl_model_params(m); i++) {
        uint32_t u;
        memcpy(&u, grad + i, 4);
        assert_int_equal(u, 0x5a5a5a5au);
    }
    assert_int_equal(sl_model_forward(m, NULL, input, 1, grad), SL_EINVAL);
    /* a batch whose scratch cannot be sized fails before anything is read */
    assert_int_equal(sl_model_forward(m, w, input, SIZE_MAX / 2, grad), SL_ENOMEM);
    assert_int_equal(sl_model_init(m, NULL, 1), SL_EINVAL);
    free(grad);
    free(w);
    sl_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* Initialisation                                                           */
/* ------------------------------------------------------------------------ */

static void test_init(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        sl_model *m;
        size_t np;
        float *a, *b, *c;
        const sl_layout *l;
        assert_int_equal(sl_model_create(models[i], &m), SL_OK);
        np = sl_model_params(m);
        l = sl_model_layout(m);
        a = malloc(np * sizeof *a), b = malloc(np * sizeof *b), c = malloc(np * sizeof *c);
        assert_non_null(a), assert_non_null(b), assert_non_null(c);
        assert_int_equal(sl_model_init(m, a, 42), SL_OK);
        assert_int_equal(sl_model_init(m, b, 42), SL_OK);
        assert_int_equal(sl_model_init(m, c, 43), SL_OK);
        assert_memory_equal(a, b, np * sizeof *a);
        assert_memory_not_equal(a, c, np * sizeof *a);
        for (size_t t = 0; t < sl_layout_tensors(l); t++) {
            const sl_tensor_desc *d = sl_layout_tensor(l, t);
            /* the bias shares the fan-in of the weight before it */
            const sl_tensor_desc *wd = d->ndim >= 2 ? d : sl_layout_tensor(l, t - 1);
            double bound = 1.0 / sqrt((double)(wd->count / wd->shape[0]));
            double mx = 0.0, sum = 0.0;
            for (uint64_t e = 0; e < d->count; e++) {
                double v = a[d->offset + e];
                assert_true(fabs(v) <= bound * (1.0 + 1e-6));
                mx = fabs(v) > mx ? fabs(v) : mx;
                sum += v;
            }
            /* uniform over the whole range: the extreme is near the bound
             * and the mean within 6 standard deviations of zero */
            if (d->count >= 64) {
                assert_true(mx >= 0.9 * bound);
                assert_true(fabs(sum / (double)d->count) <=
                            6.0 * bound / sqrt(3.0 * (double)d->count));
            }
        }
        free(a), free(b), free(c);
        sl_model_free(m);
    }
}

/* ------------------------------------------------------------------------ */
/* Variants                                                                 */
/* ------------------------------------------------------------------------ */

/* Every element-wise variant built for this CPU, with the GEMM automatic
 * and forced scalar, against the all-scalar result. */
static void test_variants_agree(void **state)
{
    static const unsigned ew[] = {0, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        sl_model *m;
        size_t np;
        float *w, *ref, *grad, ref_logits[BATCH * 10], logits[BATCH * 10], ref_loss, loss;
        assert_int_equal(sl_model_create(models[i], &m), SL_OK);
        np = sl_model_params(m);
        w = ref_weights(m);
        ref = malloc(np * sizeof *ref), grad = malloc(np * sizeof *grad);
        assert_non_null(ref), assert_non_null(grad);
        assert_int_equal(sl__nn_elementwise_use(0), SL_OK);
        assert_int_equal(sl__gemm_use(0), SL_OK);
        assert_int_equal(sl_model_loss_grad(m, w, input, labels, BATCH, &ref_loss, ref, ref_logits),
                         SL_OK);
        for (size_t v = 0; v < sizeof ew / sizeof ew[0]; v++) {
            for (int g = 0; g < 2; g++) {
                const char *which = "";
                double d;
                if (sl__nn_elementwise_use(ew[v]) != SL_OK)
                    continue;
                assert_int_equal(sl__gemm_use(g == 0 ? 0 : SL__GEMM_AUTO), SL_OK);
                assert_int_equal(
                    sl_model_loss_grad(m, w, input, labels, BATCH, &loss, grad, logits), SL_OK);
                d = worst_tensor_diff(sl_model_layout(m), grad, ref, &which);
                printf("  %-7s ew %-6s gemm %-6s logits %.1e grad %.1e (%s)\n", models[i],
                       sl__nn_ew()->name, sl__gemm_variant(), rel_diff(logits, ref_logits, 40), d,
                       which);
                assert_true(rel_diff(logits, ref_logits, BATCH * 10) <= 1e-5);
                assert_true(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss));
                assert_true(d <= 1e-4);
            }
        }
        assert_int_equal(sl__nn_elementwise_use(SL__NN_EW_AUTO), SL_OK);
        assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
        free(ref), free(grad), free(w);
        sl_model_free(m);
    }
}

/* Every registry spec lowers to fused stages, and the general executor (SL_NN_GENERAL)
 * gives the same logits, loss and gradient within rounding. */
static void test_fused_equals_general(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_MODELS; i++) {
        sl_model *fused, *general;
        size_t np;
        float *w, *g1, *g2, z1[BATCH * 10], z2[BATCH * 10], l1, l2;
        const char *which = "";
        double d;
        assert_int_equal(sl_model_create(models[i], &fused), SL_OK);
        assert_int_equal(sl_model_fused(fused), 1);
        assert_int_equal(setenv("SL_NN_GENERAL", "1", 1), 0);
        assert_int_equal(sl_model_create_spec(sl_model_spec(fused), &general, NULL, 0), SL_OK);
        assert_int_equal(unsetenv("SL_NN_GENERAL"), 0);
        assert_int_equal(sl_model_fused(general), 0);
        np = sl_model_params(fused);
        w = ref_weights(fused);
        g1 = malloc(np * sizeof *g1), g2 = malloc(np * sizeof *g2);
        assert_non_null(g1), assert_non_null(g2);
        assert_int_equal(sl_model_loss_grad(fused, w, input, labels, BATCH, &l1, g1, z1), SL_OK);
        assert_int_equal(sl_model_loss_grad(general, w, input, labels, BATCH, &l2, g2, z2), SL_OK);
        d = worst_tensor_diff(sl_model_layout(fused), g2, g1, &which);
        printf("  %-7s fused vs general: logits %.1e, loss %.1e, grad %.1e (%s)\n", models[i],
               rel_diff(z2, z1, BATCH * 10), fabs(l1 - l2), d, which);
        assert_true(rel_diff(z2, z1, BATCH * 10) <= 1e-5);
        assert_true(fabs(l1 - l2) <= 1e-5 * l1);
        assert_true(d <= 1e-4);
        assert_int_equal(sl_model_forward(general, w, input, BATCH, z2), SL_OK);
        assert_true(rel_diff(z2, z1, BATCH * 10) <= 1e-5);
        {
            /* the memory of a step, known before it: at least the logits, more for a larger
             * batch (not in proportion: convolution workspaces depend on the algorithm the
             * batch size picks); asking does not disturb a model that already ran a step */
            size_t fa = sl_model_activation_bytes(fused, BATCH);
            size_t ga = sl_model_activation_bytes(general, BATCH);
            size_t f2 = sl_model_activation_bytes(fused, 16 * BATCH);
            size_t g2b = sl_model_activation_bytes(general, 16 * BATCH);
            printf("  %-7s activation bytes at %d: fused %zu, general %zu; x16: %zu, %zu\n",
                   models[i], BATCH, fa, ga, f2, g2b);
            assert_true(fa >= BATCH * 10 * sizeof(float) && ga >= BATCH * 10 * sizeof(float));
            assert_true(f2 > fa && g2b > ga);
            assert_int_equal(sl_model_activation_bytes(fused, 0), 0);
            assert_int_equal(sl_model_activation_bytes(fused, SIZE_MAX / 4), 0);
            assert_int_equal(sl_model_loss_grad(fused, w, input, labels, BATCH, &l2, g2, z2),
                             SL_OK);
            assert_memory_equal(g2, g1, np * sizeof *g1);
        }
        free(w), free(g1), free(g2);
        sl_model_free(general);
        sl_model_free(fused);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_layouts_match_fixtures),
        cmocka_unit_test(test_logreg),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_lenet5),
        cmocka_unit_test(test_cnn),
        cmocka_unit_test(test_lenet5_full_gradient),
        cmocka_unit_test(test_batch_consistency),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_variants_agree),
        cmocka_unit_test(test_fused_equals_general),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
