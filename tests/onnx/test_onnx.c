/*
 * test_onnx.c - sl_onnx_import() and sl_onnx_export() against the fixtures
 * of tests/fixtures/onnx (torch.onnx.export of seven small models and an
 * LSTM, opsets 13 and 17, TRAINING and EVAL; make_onnx.py):
 *   - the import parses, its layout is the state_dict (TRAINING exports),
 *     its loss what the model trains with, its report adds up;
 *   - sl_model_forward() on the imported parameters gives PyTorch's
 *     eval-mode output (1e-5 relative, 1e-4 absolute floor);
 *   - export then import gives the same spec text and parameters;
 *   - a graph with CumSum and Mod is refused naming both; garbage and
 *     truncated files are refused; a small graph that folds into a huge
 *     constant is refused before it allocates it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "onnx_fixture.h"
#include "starling/nn.h"
#include "starling/onnx.h"

static char names[SL_ONNX_FIXTURES_MAX][64];
static int nnames;

typedef struct imported {
    char *json;
    size_t json_len;
    float *params;
    size_t nparams;
    sl_onnx_report report;
    sl_spec *spec;
} imported;

static void import_ok(const void *onnx, size_t len, const char *what, imported *out)
{
    char err[1024] = "";
    int rc;
    memset(out, 0, sizeof *out);
    rc = sl_onnx_import(onnx, len, "fixture", &out->json, &out->json_len, &out->params,
                        &out->nparams, &out->report, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: import: %s: %s", what, sl_errname(rc), err);
    rc = sl_spec_parse(out->json, out->json_len, &out->spec, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: the spec does not parse: %s\n%s", what, err, out->json);
}

static void imported_free(imported *m)
{
    free(m->json);
    free(m->params);
    sl_spec_free(m->spec);
}

static int close_enough(float got, float want)
{
    float diff = got > want ? got - want : want - got;
    float mag = want < 0 ? -want : want;
    return diff <= 1e-4f || diff <= 1e-5f * mag;
}

static void check_fixture(const char *base)
{
    sl_onnx_fixture f;
    imported a, b;
    const sl_layout *layout;
    const cJSON *sd, *it;
    float *x, *want, *got;
    size_t nx = 0, nwant = 0, batch, k = 0;
    sl_model *model = NULL;
    char err[512];
    void *onnx2 = NULL;
    size_t len2 = 0;
    int rc;

    assert_int_equal(sl_onnx_fixture_load(base, &f), 0);
    import_ok(f.onnx, f.onnx_len, base, &a);
    layout = sl_spec_layout(a.spec);

    /* layout: the state_dict, in order (TRAINING keeps the names) */
    sd = cJSON_GetObjectItemCaseSensitive(f.doc, "state_dict");
    if (strcmp(cJSON_GetObjectItemCaseSensitive(f.doc, "mode")->valuestring, "train") == 0) {
        if ((size_t)cJSON_GetArraySize(sd) != sl_layout_tensors(layout))
            fail_msg("%s: %zu parameters, the state_dict has %d\n%s", base,
                     sl_layout_tensors(layout), cJSON_GetArraySize(sd), a.json);
        cJSON_ArrayForEach(it, sd)
        {
            const sl_tensor_desc *t = sl_layout_tensor(layout, k++);
            if (strcmp(t->name, it->valuestring) != 0)
                fail_msg("%s: parameter %zu is %s, the state_dict's %s", base, k - 1, t->name,
                         it->valuestring);
        }
    }
    assert_int_equal(a.nparams, sl_layout_params(layout));
    assert_int_equal(a.report.params, sl_layout_tensors(layout));
    assert_int_equal(a.report.param_floats, a.nparams);
    assert_int_equal(a.report.nodes_out, sl_spec_nodes(a.spec));
    assert_true(a.report.nodes_in >= a.report.nodes_out);
    assert_true(a.report.flops_per_sample > 0);
    assert_true(a.report.activation_floats_per_sample > 0);
    assert_true(strlen(a.report.ops) > 0);

    /* the loss: cross-entropy for the classifiers, MSE for the regressor */
    if (strcmp(cJSON_GetObjectItemCaseSensitive(f.doc, "loss")->valuestring, "mse") == 0)
        assert_int_equal(sl_spec_loss_kind(a.spec), SL_SPEC_MSE);
    else
        assert_int_equal(sl_spec_loss_kind(a.spec), SL_SPEC_CROSS_ENTROPY);

    /* the forward pass against PyTorch */
    x = sl_onnx_fixture_floats(&f, "input", &nx);
    want = sl_onnx_fixture_floats(&f, "output", &nwant);
    assert_non_null(x);
    assert_non_null(want);
    batch = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f.doc, "input_shape"), 0)
                ->valuedouble;
    assert_int_equal(nx, batch * sl_spec_input_size(a.spec, 0));
    assert_int_equal(nwant, batch * sl_spec_output_size(a.spec));
    rc = sl_model_create_spec(a.spec, &model, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: sl_model_create_spec: %s: %s", base, sl_errname(rc), err);
    got = calloc(nwant, sizeof *got);
    assert_non_null(got);
    assert_int_equal(sl_model_forward(model, a.params, x, batch, got), SL_OK);
    for (size_t i = 0; i < nwant; i++)
        if (!close_enough(got[i], want[i]))
            fail_msg("%s: output %zu is %.9g, PyTorch's %.9g", base, i, (double)got[i],
                     (double)want[i]);

    /* round trip: export, import again, the same spec and parameters */
    rc = sl_onnx_export(a.spec, a.params, &onnx2, &len2, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: export: %s: %s", base, sl_errname(rc), err);
    import_ok(onnx2, len2, base, &b);
    if (strcmp(a.json, b.json) != 0)
        fail_msg("%s: the re-imported spec differs\n--- first\n%s--- again\n%s", base, a.json,
                 b.json);
    assert_int_equal(a.nparams, b.nparams);
    assert_memory_equal(a.params, b.params, a.nparams * sizeof *a.params);

    sl_model_free(model);
    free(onnx2);
    free(got);
    free(x);
    free(want);
    imported_free(&a);
    imported_free(&b);
    sl_onnx_fixture_free(&f);
}

static void test_fixtures(void **state)
{
    (void)state;
    assert_true(nnames >= 16); /* 8 models x 2 opsets, plus EVAL exports */
    for (int k = 0; k < nnames; k++) {
        check_fixture(names[k]);
        printf("# %s: ok\n", names[k]);
    }
}

/* EVAL exports fold BatchNorm into Conv (renamed weights) and GRU weights (renamed): the
 * importer keeps the exporter's names for the first, PyTorch's for the second. */
static void test_eval_names(void **state)
{
    sl_onnx_fixture f;
    imported a;
    const sl_layout *layout;
    int renamed = 0;
    (void)state;
    assert_int_equal(sl_onnx_fixture_load("dwsep_eval_op17", &f), 0);
    import_ok(f.onnx, f.onnx_len, "dwsep_eval_op17", &a);
    layout = sl_spec_layout(a.spec);
    for (size_t k = 0; k < sl_layout_tensors(layout); k++)
        renamed += strncmp(sl_layout_tensor(layout, k)->name, "onnx::Conv_", 11) == 0;
    assert_int_equal(renamed, 6); /* weight and bias of the three convolutions */
    assert_non_null(strstr(a.json, "\"name\": \"/conv0/Conv\""));
    assert_null(strstr(a.json, "BatchNormalization"));
    imported_free(&a);
    sl_onnx_fixture_free(&f);

    assert_int_equal(sl_onnx_fixture_load("gru_eval_op17", &f), 0);
    import_ok(f.onnx, f.onnx_len, "gru_eval_op17", &a);
    layout = sl_spec_layout(a.spec);
    {
        static const char *const want[] = {"rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                                           "rnn.bias_hh_l0"};
        for (size_t k = 0; k < 4; k++) {
            int found = 0;
            for (size_t j = 0; j < sl_layout_tensors(layout); j++)
                found |= strcmp(sl_layout_tensor(layout, j)->name, want[k]) == 0;
            if (!found)
                fail_msg("gru_eval_op17: no parameter %s\n%s", want[k], a.json);
        }
    }
    imported_free(&a);
    sl_onnx_fixture_free(&f);
}

/* BatchNormalization in training mode: buffers, PyTorch's momentum; Gelu and LayerNorm fused. */
static void test_fused_ops(void **state)
{
    static const char *const bases[] = {"dwsep_train_op13", "dwsep_train_op17", "mlpreg_train_op13",
                                        "mlpreg_train_op17"};
    (void)state;
    for (size_t k = 0; k < 4; k++) {
        sl_onnx_fixture f;
        imported a;
        assert_int_equal(sl_onnx_fixture_load(bases[k], &f), 0);
        import_ok(f.onnx, f.onnx_len, bases[k], &a);
        if (k < 2) {
            assert_non_null(strstr(a.json, "\"name\": \"bn0.running_mean\", \"shape\": [8], "
                                           "\"init\": {\"kind\": \"constant\", \"value\": 0}, "
                                           "\"buffer\": true"));
            assert_non_null(strstr(a.json, "\"op\": \"BatchNormalization\""));
            assert_null(strstr(a.json, "momentum")); /* ONNX 0.9 is PyTorch's default 0.1 */
        } else {
            assert_non_null(strstr(a.json, "\"op\": \"Gelu\""));
            assert_non_null(strstr(a.json, "\"op\": \"LayerNormalization\""));
            assert_non_null(strstr(a.json, "\"op\": \"Dropout\""));
            assert_null(strstr(a.json, "Erf"));
            assert_null(strstr(a.json, "ReduceMean"));
            /* Gemm LayerNormalization Tanh Dropout Gemm Gelu LeakyRelu Gemm */
            assert_int_equal(sl_spec_nodes(a.spec), 8);
        }
        imported_free(&a);
        sl_onnx_fixture_free(&f);
    }
}

static void test_unsupported(void **state)
{
    size_t len = 0;
    void *onnx = sl_fixture_load("onnx/unsupported_op17.onnx", &len);
    char *json = NULL, err[512] = "";
    float *params = NULL;
    size_t jlen = 0, np = 0;
    int rc;
    (void)state;
    assert_non_null(onnx);
    rc = sl_onnx_import(onnx, len, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err);
    assert_int_equal(rc, SL_EUNSUPPORTED);
    assert_null(json);
    assert_null(params);
    if (strstr(err, "node /CumSum (CumSum)") == NULL || strstr(err, "node /Mod (Mod)") == NULL ||
        strncmp(err, "unsupported: ", 13) != 0 || strstr(err, "Gemm") != NULL)
        fail_msg("the message does not list both nodes: %s", err);
    free(onnx);
}

static void test_corrupt(void **state)
{
    sl_onnx_fixture f;
    char *json = NULL, err[256];
    float *params = NULL;
    size_t jlen = 0, np = 0, refused = 0, tried = 0;
    uint8_t garbage[512];
    uint64_t seed = 7;
    (void)state;
    for (size_t k = 0; k < sizeof garbage; k++)
        garbage[k] = (uint8_t)sl_fixture_splitmix(&seed);
    assert_int_not_equal(sl_onnx_import(garbage, sizeof garbage, NULL, &json, &jlen, &params, &np,
                                        NULL, err, sizeof err),
                         SL_OK);
    assert_int_equal(sl_onnx_import("", 0, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err),
                     SL_ECORRUPT);
    assert_int_equal(
        sl_onnx_import(NULL, 0, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err),
        SL_EINVAL);
    assert_int_equal(
        sl_onnx_import("x", 1, "bad\"name", &json, &jlen, &params, &np, NULL, err, sizeof err),
        SL_EINVAL);
    /* every truncation of a model, and flipped bytes: refused or imported, never a crash */
    assert_int_equal(sl_onnx_fixture_load("gru_train_op13", &f), 0);
    for (size_t cut = 1; cut < f.onnx_len; cut += 97) {
        int rc =
            sl_onnx_import(f.onnx, cut, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err);
        tried++;
        refused += rc != SL_OK;
        if (rc == SL_OK) {
            free(json);
            free(params);
            json = NULL;
            params = NULL;
        }
    }
    assert_int_equal(refused, tried);
    for (size_t at = 0; at < f.onnx_len; at += 13) {
        uint8_t *copy = malloc(f.onnx_len);
        int rc;
        assert_non_null(copy);
        memcpy(copy, f.onnx, f.onnx_len);
        copy[at] ^= 0x5a;
        rc = sl_onnx_import(copy, f.onnx_len, NULL, &json, &jlen, &params, &np, NULL, err,
                            sizeof err);
        if (rc == SL_OK) {
            free(json);
            free(params);
            json = NULL;
            params = NULL;
        }
        free(copy);
    }
    sl_onnx_fixture_free(&f);
}

/* A 12 KB graph (found by fuzz_onnx) whose shape arithmetic folds into a ConstantOfShape of
 * 2^28 values: refused by the bound on folded constants (4 times the file, 64 MiB at least)
 * instead of 1 GiB allocated and 4 s spent (it imported before the bound). */
static void test_folding_bound(void **state)
{
    size_t len = 0, jlen = 0, np = 0;
    void *onnx = sl_fixture_load("../fuzz/corpus/fuzz_onnx/fold-1gib-constant-of-shape", &len);
    char *json = NULL, err[512] = "";
    float *params = NULL;
    (void)state;
    assert_non_null(onnx);
    assert_true(len < 64 * 1024);
    assert_int_equal(
        sl_onnx_import(onnx, len, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err),
        SL_ETOOBIG);
    assert_null(json);
    assert_null(params);
    if (strstr(err, "constants folded from the graph") == NULL)
        fail_msg("the message does not say why: %s", err);
    free(onnx);
}

/* A 99-byte file whose weight declares 2^28 values and holds 4 bytes: refused as corrupt
 * before anything is allocated for it. Run in a child limited to 512 MiB of address space
 * beyond what it holds now, where an allocation of the declared 1 GiB fails (an importer that
 * allocated first answered "out of memory"). */
static void test_declared_size_checked_first(void **state)
{
    size_t len = 0;
    void *onnx =
        sl_fixture_load("../fuzz/corpus/fuzz_onnx/declares-2e28-values-holds-4-bytes", &len);
    pid_t pid;
    int status = 0;
    (void)state;
    assert_non_null(onnx);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *json = NULL, err[512] = "";
        float *params = NULL;
        size_t jlen = 0, np = 0;
        struct rlimit lim;
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long pages = 0;
        if (f == NULL || fscanf(f, "%lu", &pages) != 1)
            _exit(3);
        fclose(f);
        lim.rlim_cur = lim.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (512u << 20);
        if (setrlimit(RLIMIT_AS, &lim) != 0)
            _exit(3);
        int rc = sl_onnx_import(onnx, len, NULL, &json, &jlen, &params, &np, NULL, err, sizeof err);
        if (rc != SL_ECORRUPT || strstr(err, "holds 4 bytes for 268435456 values") == NULL) {
            fprintf(stderr, "import: %s: %s\n", sl_errname(rc), err);
            _exit(1);
        }
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(onnx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_eval_names),
        cmocka_unit_test(test_fused_ops),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_folding_bound),
        cmocka_unit_test(test_declared_size_checked_first),
    };
    nnames = sl_onnx_fixture_list(names, SL_ONNX_FIXTURES_MAX);
    if (nnames < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
