/*
 * train_cmd.c - `starling train`: train a registry model on Fashion-MNIST
 * (optionally on one simulated client's partition) and report the test
 * accuracy after every epoch and at the end.
 *
 * One sl_train() call runs all epochs, so epoch e's sample order is the
 * shuffle seeded by (seed, e) and the momentum buffer carries over; the
 * progress callback draws the bar and, when an epoch ends, evaluates the
 * test set with a second model object (the training one's scratch belongs
 * to sl_train).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "train_cmd.h"
#include "starling/common.h"
#include "starling/data.h"
#include "starling/nn.h"

#define EVAL_BATCH 1000

static const sl_config_spec specs[] = {
    {"model", SL_CONFIG_STRING, "lenet5", 0, 0, "logreg, mlp, lenet5 or cnn"},
    {"epochs", SL_CONFIG_INT, "10", 1, 100000, "passes over the training samples"},
    {"batch", SL_CONFIG_INT, "64", 1, 65536, "samples per SGD step"},
    {"lr", SL_CONFIG_DOUBLE, "0.01", 1e-9, 100, "learning rate"},
    {"momentum", SL_CONFIG_DOUBLE, "0.9", 0, 0.999, "SGD momentum"},
    {"weight_decay", SL_CONFIG_DOUBLE, "0", 0, 1, "L2 weight decay"},
    {"partition", SL_CONFIG_STRING, NULL, 0, 0,
     "split among --of clients: iid, dirichlet:<a>, shards:<s>, quantity:<b>"},
    {"client", SL_CONFIG_INT, "0", 0, 1000000, "the client to train (with --partition)"},
    {"of", SL_CONFIG_INT, "1", 1, 1000000, "number of clients (with --partition)"},
    {"data", SL_CONFIG_STRING, NULL, 0, 0,
     "Fashion-MNIST directory (default " SL_DATA_FASHION_MNIST_DIR ")"},
    {"seed", SL_CONFIG_INT, "1", 0, 9.2e18, "initialisation, shuffles and partition"},
    {"threads", SL_CONFIG_INT, "1", 0, 1024, "GEMM threads (0: one per CPU)"},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

typedef struct run {
    sl_model *eval_model;
    const float *params;
    const sl_dataset *test;
    uint32_t epochs;
    sl_progress bar; /* the epoch's; bar.out NULL between epochs */
    int64_t epoch_start;
    double last_accuracy;
    int failed;
} run;

static void usage(FILE *out, const sl_config *cfg)
{
    char text[4096];
    sl_config_usage(cfg, text, sizeof text);
    fprintf(out, "usage: starling train [options]\n%s", text);
}

static void progress(void *ctx, uint32_t epoch, size_t done, size_t total, float loss)
{
    run *r = ctx;
    char note[32];
    double secs;
    if (r->failed)
        return;
    if (r->bar.out == NULL) { /* the epoch's first batch */
        char label[48];
        snprintf(label, sizeof label, "epoch %u/%u", epoch + 1, r->epochs);
        sl_progress_start(&r->bar, stderr, label, total, 0, -1);
    }
    snprintf(note, sizeof note, "loss %.4f", loss);
    if (done < total) {
        sl_progress_update(&r->bar, done, note);
        return;
    }
    sl_progress_end(&r->bar);
    r->bar.out = NULL;
    secs = (double)(sl_clock_monotonic_ns(NULL) - r->epoch_start) * 1e-9;
    printf("epoch %u/%u loss %.4f %.1f s %.0f samples/s", epoch + 1, r->epochs, loss, secs,
           secs > 0 ? (double)total / secs : 0.0);
    int rc = sl_evaluate(r->eval_model, r->params, r->test->x, r->test->y, NULL, r->test->n,
                         EVAL_BATCH, &r->last_accuracy, NULL);
    if (rc != SL_OK) {
        printf("\n");
        fprintf(stderr, "starling train: evaluation failed: %s\n", sl_strerror(rc));
        r->failed = 1;
        return;
    }
    printf(" test accuracy %.4f\n", r->last_accuracy);
    fflush(stdout);
    r->epoch_start = sl_clock_monotonic_ns(NULL);
}

/* The typed options, or an exit code (2: usage error). */
static int read_options(int argc, char **argv, sl_config **out)
{
    sl_config *cfg = NULL;
    int first = argc, rc = sl_config_create(specs, N_SPECS, &cfg);
    if (rc != SL_OK) {
        fprintf(stderr, "starling train: %s\n", sl_strerror(rc));
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout, cfg);
            sl_config_free(cfg);
            return 0;
        }
    }
    rc = sl_config_load_args(cfg, argc, argv, &first);
    if (rc != SL_OK || first < argc) {
        if (rc != SL_OK)
            fprintf(stderr, "starling train: %s\n", sl_config_error(cfg));
        else
            fprintf(stderr, "starling train: unexpected argument '%s'\n", argv[first]);
        fprintf(stderr, "(starling train --help lists the options)\n");
        sl_config_free(cfg);
        return 2;
    }
    *out = cfg;
    return -1;
}

int sl_cmd_train(int argc, char **argv)
{
    sl_config *cfg = NULL;
    const char *model_name, *spec, *dir;
    int64_t epochs, batch, client, of, seed, threads;
    double lr, momentum, wd, accuracy = 0.0;
    sl_dataset *train = NULL, *test = NULL;
    sl_partition *part = NULL;
    sl_model *model = NULL;
    run r = {0};
    sl_sgd *sgd = NULL;
    float *params = NULL;
    const uint32_t *idx = NULL;
    sl_sgd_params sp = {0.01f, 0.0f, 0.0f, 0.0f, NULL, NULL};
    sl_train_opts opts = {64, 1, 1, progress, NULL, 0};
    int64_t t0;
    size_t n;
    char err[512];
    int rc, code = 1;

    rc = read_options(argc, argv, &cfg);
    if (rc >= 0)
        return rc;
    sl_config_get_string(cfg, "model", &model_name);
    sl_config_get_string(cfg, "partition", &spec);
    sl_config_get_string(cfg, "data", &dir);
    sl_config_get_int(cfg, "epochs", &epochs);
    sl_config_get_int(cfg, "batch", &batch);
    sl_config_get_int(cfg, "client", &client);
    sl_config_get_int(cfg, "of", &of);
    sl_config_get_int(cfg, "seed", &seed);
    sl_config_get_int(cfg, "threads", &threads);
    sl_config_get_double(cfg, "lr", &lr);
    sl_config_get_double(cfg, "momentum", &momentum);
    sl_config_get_double(cfg, "weight_decay", &wd);
    if (spec == NULL && (client != 0 || of != 1)) {
        fprintf(stderr, "starling train: --client and --of need --partition\n");
        code = 2;
        goto done;
    }
    if (client >= of) {
        fprintf(stderr, "starling train: --client %lld is not below --of %lld\n", (long long)client,
                (long long)of);
        code = 2;
        goto done;
    }
    rc = sl_model_create(model_name, &model);
    if (rc == SL_OK)
        rc = sl_model_create(model_name, &r.eval_model);
    if (rc != SL_OK) {
        if (rc == SL_ENOENT)
            fprintf(stderr, "starling train: unknown model '%s' (models:", model_name);
        else
            fprintf(stderr, "starling train: model '%s': %s (models:", model_name, sl_strerror(rc));
        for (const char *const *nm = sl_model_names(); *nm != NULL; nm++)
            fprintf(stderr, " %s", *nm);
        fprintf(stderr, ")\n");
        code = 2;
        goto done;
    }
    rc = sl_data_load_fashion_mnist(dir, 1, &train, err, sizeof err);
    if (rc == SL_OK)
        rc = sl_data_load_fashion_mnist(dir, 0, &test, err, sizeof err);
    if (rc != SL_OK) {
        fprintf(stderr, "starling train: %s\n", err);
        goto done;
    }
    n = train->n;
    if (spec != NULL) {
        rc = sl_partition_create(train->y, train->n, (uint32_t)train->classes, spec, (uint32_t)of,
                                 (uint64_t)seed, &part, err, sizeof err);
        if (rc != SL_OK) {
            fprintf(stderr, "starling train: --partition %s: %s\n", spec, err);
            code = 2;
            goto done;
        }
        idx = part->idx[client];
        n = part->count[client];
    }
    sl_nn_set_threads((unsigned)threads);
    params = malloc(sl_model_params(model) * sizeof *params);
    if (params == NULL) {
        fprintf(stderr, "starling train: out of memory\n");
        goto done;
    }
    sl_model_init(model, params, (uint64_t)seed);
    sp.lr = (float)lr;
    sp.momentum = (float)momentum;
    sp.weight_decay = (float)wd;
    rc = sl_sgd_create(sl_model_params(model), &sp, &sgd);
    if (rc != SL_OK) {
        fprintf(stderr, "starling train: optimiser: %s\n", sl_strerror(rc));
        goto done;
    }
    printf("model %s (%zu parameters), %zu training samples%s, batch %lld, lr %g, momentum %g, "
           "gemm %s\n",
           model_name, sl_model_params(model), n, spec != NULL ? " (one client)" : "",
           (long long)batch, lr, momentum, sl_nn_kernel_variant());
    r.params = params;
    r.test = test;
    r.epochs = (uint32_t)epochs;
    r.epoch_start = sl_clock_monotonic_ns(NULL);
    opts.batch = (size_t)batch;
    opts.epochs = (uint32_t)epochs;
    opts.seed = (uint64_t)seed;
    opts.progress_ctx = &r;
    t0 = sl_clock_monotonic_ns(NULL);
    rc = sl_train(model, params, sgd, NULL, train->x, train->y, idx, n, &opts, NULL);
    if (rc != SL_OK || r.failed) {
        fprintf(stderr, "starling train: %s\n", sl_strerror(rc != SL_OK ? rc : SL_EIO));
        goto done;
    }
    accuracy = r.last_accuracy;
    printf("test accuracy %.4f (%u epochs in %.1f s)\n", accuracy, (unsigned)epochs,
           (double)(sl_clock_monotonic_ns(NULL) - t0) * 1e-9);
    code = 0;
done:
    free(params);
    sl_sgd_free(sgd);
    sl_partition_free(part);
    sl_dataset_free(test);
    sl_dataset_free(train);
    sl_model_free(r.eval_model);
    sl_model_free(model);
    sl_config_free(cfg);
    return code;
}
