/*
 * bench_train.c - `starling bench train`: training samples/s of our engine
 * on one thread, beside PyTorch on the same model, batch and data, in the
 * same invocation (tests/bench/torch_compare.py run by Debian's
 * /usr/bin/python3 with python3-torch).
 *
 * Our figure is the best of a few timed sl_train() runs over steps x batch
 * real Fashion-MNIST samples (synthetic when the data set is absent), so
 * it includes the shuffle, the gather into a contiguous batch and the SGD
 * step; torch_compare.py times the same model and optimiser the same way
 * (best of its repeats, after a warm-up). --layers adds per-conv-layer
 * timings of both convolution algorithms (the measurement behind
 * sl__nn_conv_init's choice).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "starling/data.h"
#include "starling/nn.h"
#include "../../device/nn/nn_int.h"

#define PYTHON  "/usr/bin/python3"
#define REPEATS 3

typedef struct options {
    const char *model;
    size_t batch, steps;
    int json, no_torch, layers;
} options;

static int usage(void)
{
    fprintf(stderr, "usage: starling bench train [--model M] [--batch B] [--steps N] [--json] "
                    "[--no-torch] [--layers]\n");
    return 2;
}

static int parse_size(const char *text, size_t lo, size_t hi, size_t *out)
{
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < lo || v > hi)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Our engine                                                               */
/* ------------------------------------------------------------------------ */

typedef struct data {
    float *x;
    int32_t *y;
    size_t n;
    int synthetic;
    sl_dataset *ds;
} data;

static int load_data(size_t want, data *d)
{
    char err[256];
    memset(d, 0, sizeof *d);
    if (sl_data_load_fashion_mnist(NULL, 1, &d->ds, err, sizeof err) == SL_OK) {
        d->x = d->ds->x, d->y = d->ds->y, d->n = d->ds->n;
        return 0;
    }
    fprintf(stderr, "bench train: %s; using synthetic data\n", err);
    uint64_t s = 1;
    d->synthetic = 1;
    d->n = want;
    d->x = malloc(want * 784 * sizeof *d->x);
    d->y = malloc(want * sizeof *d->y);
    if (d->x == NULL || d->y == NULL)
        return -1;
    for (size_t i = 0; i < want; i++) {
        d->y[i] = (int32_t)(sl__nn_rng_next(&s) % 10);
        for (size_t j = 0; j < 784; j++)
            d->x[i * 784 + j] = 2.0f * sl__nn_rng_unit(&s) - 1.0f;
    }
    return 0;
}

static void free_data(data *d)
{
    if (d->ds != NULL)
        sl_dataset_free(d->ds);
    else
        free(d->x), free(d->y);
}

/* Best samples/s of REPEATS timed runs of @steps steps. */
static int measure(sl_model *m, const data *d, size_t batch, size_t steps, double *best)
{
    size_t np = sl_model_params(m), n = batch * steps < d->n ? batch * steps : d->n;
    sl_sgd_params sp = {0.01f, 0.9f, 0.0f, 0.0f, NULL, NULL};
    sl_train_opts warm = {batch, 1, 7, NULL, NULL}, run = {batch, 1, 1, NULL, NULL};
    float *params = malloc(np * sizeof *params);
    sl_sgd *sgd = NULL;
    int rc;
    *best = 0.0;
    if (params == NULL)
        return SL_ENOMEM;
    rc = sl_model_init(m, params, 1);
    if (rc == SL_OK)
        rc = sl_sgd_create(np, &sp, &sgd);
    /* warm-up: scratch, caches, page faults */
    if (rc == SL_OK)
        rc = sl_train(m, params, sgd, NULL, d->x, d->y, NULL, 2 * batch < n ? 2 * batch : n, &warm,
                      NULL);
    run.epochs = (uint32_t)((batch * steps + n - 1) / n);
    for (int r = 0; rc == SL_OK && r < REPEATS; r++) {
        int64_t t0 = sl_bench_now_ns();
        rc = sl_train(m, params, sgd, NULL, d->x, d->y, NULL, n, &run, NULL);
        double secs = (double)(sl_bench_now_ns() - t0) * 1e-9;
        double sps = (double)n * run.epochs / secs;
        *best = sps > *best ? sps : *best;
    }
    sl_sgd_free(sgd);
    free(params);
    return rc;
}

/* Forward + backward of one conv layer, per algorithm, in ms per batch. */
static void measure_layers(sl_model *m, size_t batch)
{
    for (size_t i = 0; i < sl__nn_model_convs(m); i++) {
        sl__nn_conv c = *sl__nn_model_conv(m, i);
        printf("  conv %zu: %zu->%zu %zux%zu pad %zu, %zux%zu -> %zux%zu (in use: %s)\n", i + 1,
               c.cin, c.cout, c.k, c.k, c.pad, c.h, c.w, c.ho, c.wo,
               c.algo == SL__NN_CONV_DIRECT ? "direct" : "im2col");
        for (int a = 0; a < 2; a++) {
            size_t nx = c.cin * batch * c.h * c.w, ny = c.cout * batch * c.ho * c.wo;
            size_t nw = c.cout * c.cin * c.k * c.k, nws;
            float *x, *y, *w, *dw, *dx, *ws;
            double fwd = 1e30, bwd = 1e30;
            uint64_t s = 5;
            if (sl__nn_conv_set_algo(&c, (sl__nn_conv_algo)a) != SL_OK)
                continue;
            nws = sl__nn_conv_workspace(&c, batch);
            x = malloc(nx * 4), y = malloc(ny * 4), w = malloc(nw * 4), dw = malloc(nw * 4);
            dx = malloc(nx * 4), ws = malloc((nws + 1) * 4);
            if (x && y && w && dw && dx && ws) {
                for (size_t j = 0; j < nx; j++)
                    x[j] = sl__nn_rng_unit(&s) - 0.5f;
                for (size_t j = 0; j < nw; j++)
                    w[j] = sl__nn_rng_unit(&s) - 0.5f;
                for (int r = 0; r < 5; r++) {
                    int64_t t0 = sl_bench_now_ns();
                    sl__nn_conv_forward(&c, batch, x, w, NULL, y, ws);
                    int64_t t1 = sl_bench_now_ns();
                    sl__nn_conv_backward(&c, batch, x, w, y, dw, NULL, i > 0 ? dx : NULL, ws);
                    int64_t t2 = sl_bench_now_ns();
                    fwd = fmin(fwd, (double)(t1 - t0) * 1e-6);
                    bwd = fmin(bwd, (double)(t2 - t1) * 1e-6);
                }
                printf("    %-6s forward %7.3f ms  backward %7.3f ms%s\n",
                       a == SL__NN_CONV_DIRECT ? "direct" : "im2col", fwd, bwd,
                       i > 0 ? " (with dx)" : " (dw only)");
            }
            free(x), free(y), free(w), free(dw), free(dx), free(ws);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* PyTorch                                                                  */
/* ------------------------------------------------------------------------ */

/* Run torch_compare.py; 1 = measured, 0 = PyTorch not available, -1 = error. */
static int run_torch(const options *o, double *sps, char *line, size_t cap)
{
    const char *script = getenv("STARLING_TORCH_COMPARE");
    char batch[32], steps[32];
    int fd[2], status;
    size_t len = 0;
    pid_t pid;
    if (script == NULL || script[0] == '\0')
        script = SL_SOURCE_DIR "/tests/bench/torch_compare.py";
    if (access(PYTHON, X_OK) != 0)
        return 0;
    snprintf(batch, sizeof batch, "%zu", o->batch);
    snprintf(steps, sizeof steps, "%zu", o->steps);
    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        char *argv[] = {(char *)PYTHON,
                        (char *)script,
                        (char *)"--model",
                        (char *)o->model,
                        (char *)"--batch",
                        batch,
                        (char *)"--steps",
                        steps,
                        NULL};
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]), close(fd[1]);
        execv(PYTHON, argv);
        _exit(127);
    }
    close(fd[1]);
    for (;;) {
        ssize_t r = read(fd[0], line + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap - 1) { /* keep reading to let the child finish */
            char sink[256];
            while (read(fd[0], sink, sizeof sink) > 0) {
            }
            break;
        }
    }
    line[len] = '\0';
    close(fd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return 0; /* torch or numpy missing */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    const char *key = strstr(line, "\"samples_per_s\":");
    if (key == NULL)
        return -1;
    *sps = strtod(key + strlen("\"samples_per_s\":"), NULL);
    return *sps > 0.0 ? 1 : -1;
}

int sl_bench_train(int argc, char **argv)
{
    options o = {"lenet5", 64, 0, 0, 0, 0};
    sl_model *m = NULL;
    data d;
    double ours = 0.0, torch = 0.0;
    char line[1024];
    int rc, t = 2; /* 2: not run (--no-torch), then run_torch()'s result */

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--no-torch") == 0)
            o.no_torch = 1;
        else if (strcmp(argv[i], "--layers") == 0)
            o.layers = 1;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            o.model = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], 1, 65536, &o.batch) != 0)
                return usage();
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], 1, 1000000, &o.steps) != 0)
                return usage();
        } else
            return usage();
    }
    rc = sl_model_create(o.model, &m);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: model '%s': %s\n", o.model, sl_strerror(rc));
        return 2;
    }
    if (o.steps == 0) /* about a second of our engine per repeat */
        o.steps = sl_model_params(m) > 1000000 ? 20 : 200;
    sl_nn_set_threads(1);
    if (load_data(o.batch * o.steps, &d) != 0) {
        sl_model_free(m);
        fprintf(stderr, "bench train: out of memory\n");
        return 1;
    }
    rc = measure(m, &d, o.batch, o.steps, &ours);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: %s\n", sl_strerror(rc));
        free_data(&d);
        sl_model_free(m);
        return 1;
    }
    if (!o.json) {
        printf("starling bench train: model %s, batch %zu, %zu steps, 1 thread, %s data\n", o.model,
               o.batch, o.steps, d.synthetic ? "synthetic" : "Fashion-MNIST");
        printf("  starling  %10.0f samples/s  (best of %d; gemm %s, element-wise %s)\n", ours,
               REPEATS, sl_nn_kernel_variant(), sl__nn_ew()->name);
    }
    if (o.layers && !o.json)
        measure_layers(m, o.batch);
    if (!o.no_torch) {
        fflush(stdout);
        t = run_torch(&o, &torch, line, sizeof line);
        if (t == 0 && !o.json)
            printf("  PyTorch not available (apt-get install python3-torch): skipped\n");
        else if (t < 0)
            fprintf(stderr, "bench train: torch_compare.py failed: %s\n", line);
    }
    if (o.json) {
        printf("{\"model\": \"%s\", \"batch\": %zu, \"steps\": %zu, \"data\": \"%s\", "
               "\"samples_per_s\": %.1f, \"gemm\": \"%s\", \"elementwise\": \"%s\"",
               o.model, o.batch, o.steps, d.synthetic ? "synthetic" : "fashion-mnist", ours,
               sl_nn_kernel_variant(), sl__nn_ew()->name);
        if (t == 1)
            printf(", \"torch_samples_per_s\": %.1f, \"ratio\": %.3f", torch, ours / torch);
        if (t == 0)
            printf(", \"torch\": \"not available (apt-get install python3-torch)\"");
        printf("}\n");
    } else if (t == 1) {
        printf("  PyTorch   %10.0f samples/s  (torch_compare.py, torch.set_num_threads(1))\n",
               torch);
        printf("  ratio     %10.2fx\n", ours / torch);
    }
    free_data(&d);
    sl_model_free(m);
    return t < 0 ? 1 : 0;
}
