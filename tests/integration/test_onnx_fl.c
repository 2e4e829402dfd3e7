/*
 * test_onnx_fl.c - the example architectures from PyTorch to a federated run
 * and back. For each fl_* fixture of tests/fixtures/onnx (torch.onnx.export
 * in TRAINING mode of a Fashion-MNIST-shaped model; make_onnx.py):
 *   - sl_onnx_import() gives a spec whose forward pass on the imported
 *     parameters is PyTorch's output for the fixture's batch;
 *   - a task carrying that spec, with the imported parameters as its initial
 *     model, goes through POST /v1/tasks of an in-process coordinator; a
 *     fleet of 3 starling-agent devices trains it for 2 rounds;
 *   - the final model of the store moved away from the initial one, exports
 *     to ONNX (sl_onnx_export()) and imports again to the same spec text and
 *     the same parameters, bit for bit.
 * The MLP regressor (mlpreg: 13 features, LayerNorm, Dropout, GELU, MSE) trains
 * the same way on real tabular data: the Boston house prices CSV that Debian's
 * python3-sklearn installs, through the agents' csv: source (MEDV the
 * regression target), with Adam; skipped where that package is missing.
 */
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "../support/sl_test.h"
#include "agent_harness.h"
#include "onnx_fixture.h"
#include "starling/codec.h"
#include "starling/nn.h"
#include "starling/onnx.h"

/* test_agent_spec.c's task: every device of the fleet in each round, short windows */
#define FL_TASK(name)                                                                        \
    "{\"name\":\"" name "\",\"target\":3,\"quorum\":1,\"over_selection\":1,"                 \
    "\"selection_window_ms\":400,\"report_deadline_ms\":20000,\"values\":\"fp16\","          \
    "\"density\":0.05,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05,\"local_momentum\":" \
    "0.9}"

/* The regressor: Adam (its momentum is its own), a small rate for raw-scale features */
#define FL_REG_TASK(name)                                                            \
    "{\"name\":\"" name "\",\"target\":3,\"quorum\":1,\"over_selection\":1,"         \
    "\"selection_window_ms\":400,\"report_deadline_ms\":20000,\"values\":\"fp16\","  \
    "\"density\":0.05,\"local_epochs\":1,\"batch\":32,\"local_optimizer\":\"adam\"," \
    "\"local_lr\":0.001}"

#define SKLEARN_DATA "/usr/lib/python3/dist-packages/sklearn/datasets/data"

typedef struct fl_case {
    const char *base;   /* the fixture's files */
    const char *model;  /* the spec's name */
    const char *source; /* the agents' --data (NULL: a Fashion-MNIST share) */
    const char *needs;  /* a file the source reads (skipped when it is missing) */
} fl_case;

static const fl_case cases[] = {
    {"fl_mlp_train_op17", "fl_mlp", NULL, NULL},
    {"fl_lenet_train_op17", "fl_lenet", NULL, NULL},
    {"fl_dwsep_train_op13", "fl_dwsep", NULL, NULL},
    {"fl_dwsep_train_op17", "fl_dwsep", NULL, NULL},
    {"fl_resnet_train_op17", "fl_resnet", NULL, NULL},
    {"fl_cnn1d_train_op17", "fl_cnn1d", NULL, NULL},
    {"fl_gru_train_op17", "fl_gru", NULL, NULL},
    {"mlpreg_train_op17", "mlpreg",
     "csv:" SKLEARN_DATA "/boston_house_prices.csv?skip=1&label=MEDV&kind=target",
     SKLEARN_DATA "/boston_house_prices.csv"},
};

typedef struct imported {
    char *json;
    size_t json_len;
    float *params;
    size_t nparams;
    sl_spec *spec;
    int regression;
} imported;

/* @loss (NULL: the importer's cross_entropy) as the spec's loss, as `starling task create` with
 * "loss" sets it (ONNX has no loss) */
static void set_loss(imported *m, const char *loss)
{
    cJSON *doc = cJSON_Parse(m->json), *lo = cJSON_CreateObject(), *metrics = cJSON_CreateArray();
    assert_non_null(doc);
    cJSON_AddStringToObject(lo, "op", loss);
    cJSON_AddItemToArray(metrics, cJSON_CreateString("rmse"));
    assert_true(cJSON_ReplaceItemInObjectCaseSensitive(doc, "loss", lo));
    assert_true(cJSON_ReplaceItemInObjectCaseSensitive(doc, "metrics", metrics));
    free(m->json);
    m->json = cJSON_PrintUnformatted(doc);
    m->json_len = strlen(m->json);
    cJSON_Delete(doc);
}

static void import_ok(const void *onnx, size_t len, const char *name, const char *loss,
                      const char *what, imported *out)
{
    char err[1024] = "";
    int rc;
    memset(out, 0, sizeof *out);
    rc = sl_onnx_import(onnx, len, name, &out->json, &out->json_len, &out->params, &out->nparams,
                        NULL, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: import: %s: %s", what, sl_errname(rc), err);
    if (loss != NULL)
        set_loss(out, loss);
    rc = sl_spec_parse(out->json, out->json_len, &out->spec, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: the spec does not parse: %s\n%s", what, err, out->json);
    assert_int_equal(out->nparams, sl_layout_params(sl_spec_layout(out->spec)));
}

static void imported_free(imported *m)
{
    free(m->json);
    free(m->params);
    sl_spec_free(m->spec);
}

/* 1e-5 relative, with 1e-5 absolute for values under 1 */
static int close_enough(float got, float want)
{
    float diff = fabsf(got - want), mag = fabsf(want);
    return diff <= 1e-5f * (mag > 1.0f ? mag : 1.0f);
}

/* The forward pass of @m on the fixture's batch: PyTorch's output. */
static void check_forward(const sl_onnx_fixture *f, const imported *m, const char *what)
{
    float *x, *want, *got;
    size_t nx = 0, nwant = 0, batch;
    sl_model *model = NULL;
    char err[512];
    int rc;
    x = sl_onnx_fixture_floats(f, "input", &nx);
    want = sl_onnx_fixture_floats(f, "output", &nwant);
    assert_non_null(x);
    assert_non_null(want);
    batch = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f->doc, "input_shape"), 0)
                ->valuedouble;
    if (m->regression) { /* 13 features, one target */
        assert_int_equal(sl_spec_input_size(m->spec, 0), 13);
        assert_int_equal(sl_spec_output_size(m->spec), 1);
        assert_int_equal(sl_spec_loss_kind(m->spec), SL_SPEC_MSE);
    } else { /* a Fashion-MNIST sample, ten classes */
        assert_int_equal(sl_spec_input_size(m->spec, 0), 784);
        assert_int_equal(sl_spec_output_size(m->spec), 10);
        assert_int_equal(sl_spec_loss_kind(m->spec), SL_SPEC_CROSS_ENTROPY);
    }
    assert_int_equal(nx, batch * sl_spec_input_size(m->spec, 0));
    assert_int_equal(nwant, batch * sl_spec_output_size(m->spec));
    rc = sl_model_create_spec(m->spec, &model, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: sl_model_create_spec: %s: %s", what, sl_errname(rc), err);
    got = calloc(nwant, sizeof *got);
    assert_non_null(got);
    assert_int_equal(sl_model_forward(model, m->params, x, batch, got), SL_OK);
    for (size_t i = 0; i < nwant; i++)
        if (!close_enough(got[i], want[i]))
            fail_msg("%s: output %zu is %.9g, PyTorch's %.9g", what, i, (double)got[i],
                     (double)want[i]);
    sl_model_free(model);
    free(got);
    free(want);
    free(x);
}

static int run_fleet(const ag_coord *c, int64_t task, const char *data, const char *fleet,
                     const char *log)
{
    char task_s[32];
    const char *args[] = {"--coordinator",
                          c->url,
                          "--task",
                          task_s,
                          "--data",
                          data,
                          "--state-dir",
                          fleet,
                          "--enrolment-token",
                          AG_ENROL,
                          "--retry-base",
                          "20ms",
                          "--max-wait",
                          "1s",
                          "--log-level",
                          "warn",
                          "--fleet",
                          "3",
                          "--rounds",
                          "2",
                          NULL};
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    return ag_wait(ag_spawn_agent(args, log), 120000);
}

/* Model @version (0: the latest) of @task in the store, decoded with @layout (malloc'd); its
 * version in *@stored. */
static float *stored_model(ag_coord *c, int64_t task, int64_t version, const sl_layout *layout,
                           int64_t *stored)
{
    sl_model_record mr;
    float *w = malloc((size_t)sl_layout_params(layout) * sizeof *w);
    assert_non_null(w);
    assert_int_equal(sl_store_get_model(c->store, task, version, &mr), SL_OK);
    assert_int_equal(sl_frame_decode_model(layout, mr.frame, mr.frame_len, NULL, 0, w), SL_OK);
    *stored = mr.version;
    sl_store_model_free(&mr);
    return w;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_fl_case(void **state)
{
    const fl_case *k = *state;
    char dir[512], data[700], fleet[600], log[600], config[512], err[512];
    sl_onnx_fixture f;
    imported a, b;
    ag_coord c;
    int64_t task, v0, v1, stored;
    float *initial, *trained;
    size_t moved = 0, n;
    void *onnx2 = NULL;
    size_t len2 = 0;
    sl_task_record rec;
    struct timespec t0;
    int rc, code;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (k->needs != NULL && access(k->needs, R_OK) != 0) {
        printf("# %s: skipped: %s is missing (Debian's python3-sklearn)\n", k->base, k->needs);
        skip();
    }

    /* PyTorch -> spec: the forward pass is PyTorch's */
    assert_int_equal(sl_onnx_fixture_load(k->base, &f), 0);
    import_ok(f.onnx, f.onnx_len, k->model, k->source ? "mse" : NULL, k->base, &a);
    a.regression = k->source != NULL;
    check_forward(&f, &a, k->base);
    n = a.nparams;

    /* a federated run of the imported model */
    sl_test_mkdtemp(dir, sizeof dir, k->base);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(fleet, sizeof fleet, "%s/fleet", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    if (k->source == NULL)
        ag_make_data(data, 600, 100);
    else
        snprintf(data, sizeof data, "%s", k->source);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    snprintf(config, sizeof config, k->source ? FL_REG_TASK("%s") : FL_TASK("%s"), k->base);
    task = ag_create_task_params(&c, a.json, a.params, config);
    /* the task carries the imported spec (the coordinator stores it compacted) */
    assert_int_equal(sl_store_get_task(c.store, task, &rec), SL_OK);
    assert_non_null(rec.model_spec);
    {
        cJSON *posted = cJSON_Parse(a.json), *kept = cJSON_Parse(rec.model_spec);
        if (!cJSON_Compare(posted, kept, 1))
            fail_msg("%s: the task's spec is not the imported one\n%s", k->base, rec.model_spec);
        cJSON_Delete(posted);
        cJSON_Delete(kept);
    }
    sl_store_task_free(&rec);
    v0 = ag_model_version(&c, task);
    /* the initial model is the imported parameters, bit for bit */
    initial = stored_model(&c, task, 0, sl_spec_layout(a.spec), &stored);
    assert_int_equal(stored, v0);
    assert_memory_equal(initial, a.params, n * sizeof *initial);
    free(initial);
    code = run_fleet(&c, task, data, fleet, log);
    if (code != 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log);
        (void)!system(cmd);
        fail_msg("%s: starling-agent --fleet 3 --rounds 2 exited %d", k->base, code);
    }
    v1 = ag_model_version(&c, task);
    if (v1 < v0 + 2)
        fail_msg("%s: the model went from version %lld to %lld in two rounds", k->base,
                 (long long)v0, (long long)v1);

    /* the final model: moved by training, finite */
    trained = stored_model(&c, task, 0, sl_spec_layout(a.spec), &stored);
    assert_int_equal(stored, v1);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(trained[i]))
            fail_msg("%s: parameter %zu of the trained model is %g", k->base, i,
                     (double)trained[i]);
        moved += memcmp(&trained[i], &a.params[i], sizeof *trained) != 0;
    }
    if (moved == 0)
        fail_msg("%s: the trained model (version %lld) is the initial one", k->base, (long long)v1);

    /* spec -> ONNX -> spec: the same spec text, the trained parameters bit for bit */
    rc = sl_onnx_export(a.spec, trained, &onnx2, &len2, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: export: %s: %s", k->base, sl_errname(rc), err);
    import_ok(onnx2, len2, k->model, k->source ? "mse" : NULL, k->base, &b);
    if (strcmp(a.json, b.json) != 0)
        fail_msg("%s: the re-imported spec differs\n--- first\n%s--- again\n%s", k->base, a.json,
                 b.json);
    assert_int_equal(b.nparams, n);
    assert_memory_equal(b.params, trained, n * sizeof *trained);

    printf("# %s: %zu parameters, version %lld -> %lld, %zu moved, %.1f s\n", k->base, n,
           (long long)v0, (long long)v1, moved, seconds_since(&t0));
    imported_free(&b);
    free(onnx2);
    free(trained);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
    imported_free(&a);
    sl_onnx_fixture_free(&f);
}

int main(void)
{
    struct CMUnitTest tests[sizeof cases / sizeof cases[0]];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        tests[i] = (struct CMUnitTest){
            .name = cases[i].base, .test_func = test_fl_case, .initial_state = (void *)&cases[i]};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
