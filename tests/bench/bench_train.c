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
 *
 * --spec FILE trains any model spec instead: a pool of synthetic batches
 * drawn from a seed (floats in [-1, 1), the indices of an Embedding's int64
 * input in its vocabulary, class labels for cross_entropy, targets for the
 * other losses), batch 32 unless --batch says otherwise. A step is what a
 * device does: the forward and backward pass, the SGD step (lr 0.01,
 * momentum 0.9) and the running statistics' update. PyTorch trains
 * spec_torch.py's translation of the same spec from the same initial
 * parameters on the same batches (handed over in a temporary directory) in
 * the same run, and both report the loss of their first step on the same
 * batch: a check that both train the same model. The run also reports our
 * peak RSS beside what a training step should need: parameters, gradient
 * and momentum, the general executor's planned arena for the batch, the
 * batch pool, and 16 MB for the program itself.
 *
 * --onnx FILE imports an ONNX model (sl_onnx_import(), as `starling model
 * import` does) and runs the --spec benchmark on the spec it gives, the
 * ONNX's initializers being the initial parameters of both sides (PyTorch
 * gets the imported spec and those parameters). Builds without the ONNX
 * import (no SL_HAVE_ONNX) refuse the option.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "starling/data.h"
#include "starling/nn.h"
#ifdef SL_HAVE_ONNX
#include "starling/onnx.h"
#endif
#include "../../device/nn/graph_int.h"
#include "../../device/nn/nn_int.h"

#define PYTHON  "/usr/bin/python3"
#define REPEATS 3

typedef struct options {
    const char *model, *spec, *onnx;
    size_t batch, steps;
    int json, no_torch, layers, batch_set;
    /* --onnx: the imported spec's text and its initial parameters (NULL: sl_model_init()) */
    const char *spec_text;
    size_t spec_len;
    const float *init;
    size_t ninit;
} options;

static int usage(void)
{
    fprintf(stderr, "usage: starling bench train [--model M | --spec FILE | --onnx FILE] "
                    "[--batch B] [--steps N] [--json] [--no-torch] [--layers]\n");
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
    sl_train_opts warm = {batch, 1, 7, NULL, NULL, 0}, run = {batch, 1, 1, NULL, NULL, 0};
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

/* The number after "@key": in a JSON line; 0, or -1 when absent. */
static int json_number(const char *line, const char *key, double *out)
{
    char quoted[64];
    const char *at;
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    at = strstr(line, quoted);
    if (at == NULL)
        return -1;
    *out = strtod(at + strlen(quoted), NULL);
    return 0;
}

/* Run torch_compare.py with @args (NULL-terminated) and read its JSON line into @line;
 * 1 = measured (*@sps), 0 = PyTorch not available, -1 = error. */
static int run_torch(char *const *args, double *sps, char *line, size_t cap)
{
    const char *script = getenv("STARLING_TORCH_COMPARE");
    char *argv[24];
    int fd[2], status;
    size_t len = 0, n = 0;
    pid_t pid;
    if (script == NULL || script[0] == '\0')
        script = SL_SOURCE_DIR "/tests/bench/torch_compare.py";
    if (access(PYTHON, X_OK) != 0)
        return 0;
    argv[n++] = (char *)PYTHON;
    argv[n++] = (char *)script;
    while (args[n - 2] != NULL && n + 1 < sizeof argv / sizeof argv[0]) {
        argv[n] = args[n - 2];
        n++;
    }
    argv[n] = NULL;
    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return -1;
    }
    if (pid == 0) {
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
    return json_number(line, "samples_per_s", sps) == 0 && *sps > 0.0 ? 1 : -1;
}

/* ------------------------------------------------------------------------ */
/* Any spec (--spec)                                                        */
/* ------------------------------------------------------------------------ */

#define POOL_BATCHES 16 /* distinct batches the steps cycle through */
#define DATA_SEED    42

typedef struct spec_run {
    const sl_spec *s;
    sl_model *m;  /* one input: the model (fused stages when the spec has their shape) */
    sl__graph *g; /* several inputs: the general executor itself */
    float *dout;  /* with g: the output's gradient */
    size_t batch, pool, np, nout;
    void *x[SL__SPEC_MAX_INPUTS];       /* pool x batch samples per input, float or int64 */
    size_t xbytes[SL__SPEC_MAX_INPUTS]; /* bytes per sample */
    int32_t *labels;                    /* cross_entropy: one per sample */
    float *targets;                     /* the other losses: nout per sample */
    float *params, *grad;
    sl_sgd *sgd;
} spec_run;

static void spec_run_free(spec_run *r)
{
    for (size_t k = 0; k < SL__SPEC_MAX_INPUTS; k++)
        free(r->x[k]);
    free(r->labels), free(r->targets), free(r->params), free(r->grad), free(r->dout);
    sl_sgd_free(r->sgd);
    sl__graph_free(r->g);
    sl_model_free(r->m);
}

/* The vocabulary of the Embedding that reads input tensor @t (the smallest of several). */
static uint64_t embedding_vocab(const sl_spec *s, int t)
{
    uint64_t v = 0;
    for (size_t i = 0; i < s->nn; i++)
        if (s->n[i].op == SL__OP_EMBEDDING && s->n[i].in[0] == t) {
            uint64_t rows = s->t[s->n[i].in[1]].shape[0];
            v = v == 0 || rows < v ? rows : v;
        }
    return v ? v : 1;
}

/* Model, parameters, optimiser and the seeded pool of batches. */
static int spec_run_init(spec_run *r, const sl_spec *s, size_t batch, const float *init,
                         size_t ninit, char *err, size_t errcap)
{
    sl_sgd_params sp = {0.01f, 0.9f, 0.0f, 0.0f, NULL, NULL};
    size_t samples;
    int rc;
    memset(r, 0, sizeof *r);
    r->s = s;
    r->batch = batch;
    r->pool = POOL_BATCHES;
    r->np = (size_t)sl_layout_params(s->layout);
    r->nout = s->t[s->output].count;
    samples = r->pool * batch;
    if (s->ninputs == 1)
        rc = sl_model_create_spec(s, &r->m, err, errcap);
    else
        rc = sl__graph_create(s, &r->g, err, errcap);
    if (rc != SL_OK)
        return rc;
    r->params = malloc(r->np * sizeof *r->params);
    r->grad = malloc(r->np * sizeof *r->grad);
    if (r->g != NULL)
        r->dout = malloc(batch * r->nout * sizeof *r->dout);
    if (s->loss == SL__LOSS_CROSS_ENTROPY)
        r->labels = malloc(samples * sizeof *r->labels);
    else
        r->targets = malloc(samples * r->nout * sizeof *r->targets);
    if (r->params == NULL || r->grad == NULL || (r->g != NULL && r->dout == NULL) ||
        (r->labels == NULL && r->targets == NULL))
        return SL_ENOMEM;
    if (init != NULL) { /* the ONNX's initializers */
        if (ninit != r->np) {
            snprintf(err, errcap, "%zu initial parameters for a layout of %zu", ninit, r->np);
            return SL_EINVAL;
        }
        memcpy(r->params, init, r->np * sizeof *r->params);
    } else if (r->m != NULL) {
        rc = sl_model_init(r->m, r->params, 1);
    } else { /* the same initialisation through a model of the spec made for it */
        sl_model *m = NULL;
        rc = sl_model_create_spec(s, &m, err, errcap);
        if (rc == SL_OK)
            rc = sl_model_init(m, r->params, 1);
        sl_model_free(m);
    }
    if (rc == SL_OK)
        rc = sl_sgd_create(r->np, &sp, &r->sgd);
    for (size_t k = 0; rc == SL_OK && k < s->ninputs; k++) {
        const sl__tensor *t = &s->t[s->input[k]];
        uint64_t rng = sl__nn_rng_state(DATA_SEED, k);
        size_t n = samples * t->count;
        r->xbytes[k] = t->count * (t->dtype == SL__I64 ? sizeof(int64_t) : sizeof(float));
        r->x[k] = malloc(samples * r->xbytes[k]);
        if (r->x[k] == NULL)
            return SL_ENOMEM;
        if (t->dtype == SL__I64) {
            uint64_t vocab = embedding_vocab(s, s->input[k]);
            for (size_t e = 0; e < n; e++)
                ((int64_t *)r->x[k])[e] = (int64_t)(sl__nn_rng_next(&rng) % vocab);
        } else {
            for (size_t e = 0; e < n; e++)
                ((float *)r->x[k])[e] = 2.0f * sl__nn_rng_unit(&rng) - 1.0f;
        }
    }
    if (rc == SL_OK) {
        uint64_t rng = sl__nn_rng_state(DATA_SEED, 1000);
        for (size_t e = 0; r->labels != NULL && e < samples; e++)
            r->labels[e] = (int32_t)(sl__nn_rng_next(&rng) % r->nout);
        for (size_t e = 0; r->targets != NULL && e < samples * r->nout; e++)
            r->targets[e] = s->loss == SL__LOSS_BCE_WITH_LOGITS
                                ? (float)(sl__nn_rng_next(&rng) >> 63)
                                : 2.0f * sl__nn_rng_unit(&rng) - 1.0f;
    }
    return rc;
}

/* Training step @i on batch i mod pool: forward, loss, backward, SGD, running statistics. */
static int spec_step(spec_run *r, size_t i, float *loss)
{
    size_t b = i % r->pool;
    const int32_t *labels = r->labels != NULL ? r->labels + b * r->batch : NULL;
    const float *targets = r->targets != NULL ? r->targets + b * r->batch * r->nout : NULL;
    int rc;
    if (r->m != NULL) {
        /* an int64 input goes through as its bytes: the general executor reads it as int64 */
        const float *x = (const float *)((const char *)r->x[0] + b * r->batch * r->xbytes[0]);
        rc = labels != NULL
                 ? sl_model_loss_grad(r->m, r->params, x, labels, r->batch, loss, r->grad, NULL)
                 : sl_model_loss_grad_targets(r->m, r->params, x, targets, r->batch, loss, r->grad,
                                              NULL);
    } else {
        const void *in[SL__SPEC_MAX_INPUTS];
        double mean = 0.0;
        for (size_t k = 0; k < r->s->ninputs; k++)
            in[k] = (const char *)r->x[k] + b * r->batch * r->xbytes[k];
        rc = sl__graph_forward(r->g, r->params, in, r->batch, 1, i);
        if (rc == SL_OK)
            rc = sl__loss(r->s, sl__graph_output(r->g), r->batch, labels, targets, &mean, r->dout);
        if (rc == SL_OK)
            rc = sl__graph_backward(r->g, r->dout, r->grad);
        if (rc == SL_OK && loss != NULL)
            *loss = (float)mean;
    }
    if (rc == SL_OK)
        rc = sl_sgd_step(r->sgd, r->params, r->grad, NULL, 0);
    if (rc == SL_OK) {
        if (r->m != NULL)
            sl_model_update_buffers(r->m, r->params);
        else
            sl__graph_update_buffers(r->g, r->params);
    }
    return rc;
}

static int write_blob(const char *dir, const char *name, const void *blob, size_t bytes)
{
    char path[4096];
    FILE *f;
    size_t done;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    done = fwrite(blob, 1, bytes, f);
    return fclose(f) == 0 && done == bytes ? 0 : -1;
}

/* The initial parameters and the pool for torch_compare.py, in @dir; the names written go
 * to @names (for removal). 0 or -1. */
static int write_torch_inputs(const spec_run *r, const char *dir, char names[][32], size_t *count)
{
    size_t samples = r->pool * r->batch;
    *count = 0;
    snprintf(names[(*count)++], 32, "params.f32");
    if (write_blob(dir, "params.f32", r->params, r->np * sizeof(float)) != 0)
        return -1;
    for (size_t k = 0; k < r->s->ninputs; k++) {
        int i64 = r->s->t[r->s->input[k]].dtype == SL__I64;
        snprintf(names[*count], 32, "input%zu.%s", k, i64 ? "i64" : "f32");
        if (write_blob(dir, names[(*count)++], r->x[k], samples * r->xbytes[k]) != 0)
            return -1;
    }
    if (r->labels != NULL) {
        snprintf(names[(*count)++], 32, "labels.i32");
        return write_blob(dir, "labels.i32", r->labels, samples * sizeof(int32_t));
    }
    snprintf(names[(*count)++], 32, "targets.f32");
    return write_blob(dir, "targets.f32", r->targets, samples * r->nout * sizeof(float));
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && size <= (16l << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) != NULL) {
        *len = fread(buf, 1, (size_t)size, f);
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

static double mb(double bytes)
{
    return bytes / (1024.0 * 1024.0);
}

static int bench_spec(options *o)
{
    char err[512] = "", line[2048] = "", dir[600] = "";
    char names[SL__SPEC_MAX_INPUTS + 4][32];
    size_t len = 0, nnames = 0, arena = 0;
    char *text = o->spec_text != NULL ? NULL : read_text(o->spec, &len);
    const char *source = o->onnx != NULL ? o->onnx : o->spec; /* what the user named */
    char spec_path[4096];
    sl_spec *spec = NULL;
    spec_run r;
    double ours = 0.0, torch = 0.0, torch_loss = NAN, data_bytes = 0.0, budget;
    float first_loss = NAN;
    struct rusage ru;
    int rc, t = 2, have_dir = 0;

    if (text == NULL && o->spec_text == NULL) {
        fprintf(stderr, "bench train: cannot read %s\n", o->spec);
        return 2;
    }
    if (o->spec_text != NULL)
        rc = sl_spec_parse(o->spec_text, o->spec_len, &spec, err, sizeof err);
    else
        rc = sl_spec_parse(text, len, &spec, err, sizeof err);
    free(text);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: %s: %s\n", source, err);
        return 2;
    }
    sl_nn_set_threads(1);
    rc = spec_run_init(&r, spec, o->batch, o->init, o->ninit, err, sizeof err);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: %s: %s %s\n", source, sl_strerror(rc), err);
        spec_run_free(&r);
        sl_spec_free(spec);
        return 1;
    }
    if (!o->no_torch && access(PYTHON, X_OK) == 0) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/starling-bench-train-XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        have_dir = mkdtemp(dir) != NULL;
        if (!have_dir || write_torch_inputs(&r, dir, names, &nnames) != 0) {
            fprintf(stderr, "bench train: cannot write the batches for PyTorch in %s\n", dir);
            rc = SL_EIO;
        }
        /* an imported spec exists only in memory: PyTorch reads it from the folder */
        if (rc == SL_OK && o->spec_text != NULL) {
            snprintf(names[nnames++], 32, "spec.json");
            if (write_blob(dir, "spec.json", o->spec_text, o->spec_len) != 0) {
                fprintf(stderr, "bench train: cannot write the spec for PyTorch in %s\n", dir);
                rc = SL_EIO;
            }
        }
    }
    snprintf(spec_path, sizeof spec_path, "%s/spec.json", dir);
    /* the first step (on the initial parameters: its loss is compared), a warm-up step,
     * then, unless --steps says, as many steps as take about half a second */
    if (rc == SL_OK)
        rc = spec_step(&r, 0, &first_loss);
    if (rc == SL_OK)
        rc = spec_step(&r, 1, NULL);
    if (rc == SL_OK && o->steps == 0) {
        int64_t t0 = sl_bench_now_ns();
        for (size_t i = 2; rc == SL_OK && i < 7; i++)
            rc = spec_step(&r, i, NULL);
        double per = (double)(sl_bench_now_ns() - t0) * 1e-9 / 5.0;
        o->steps = per > 0.0 ? (size_t)(0.5 / per) : 1000;
        o->steps = o->steps < 10 ? 10 : o->steps > 100000 ? 100000 : o->steps;
    }
    for (int rep = 0; rc == SL_OK && rep < REPEATS; rep++) {
        int64_t t0 = sl_bench_now_ns();
        for (size_t i = 0; rc == SL_OK && i < o->steps; i++)
            rc = spec_step(&r, i, NULL);
        double sps = (double)(o->steps * o->batch) / ((double)(sl_bench_now_ns() - t0) * 1e-9);
        ours = sps > ours ? sps : ours;
    }
    getrusage(RUSAGE_SELF, &ru);
    if (rc == SL_OK) { /* the general executor's plan for the batch: the activation memory */
        sl__graph *g = r.g;
        if (g != NULL || sl__graph_create(spec, &g, NULL, 0) == SL_OK)
            arena = sl__graph_arena_bytes(g, o->batch);
        if (g != r.g)
            sl__graph_free(g);
        for (size_t k = 0; k < spec->ninputs; k++)
            data_bytes += (double)(r.pool * r.batch * r.xbytes[k]);
        data_bytes += r.labels != NULL ? (double)(r.pool * r.batch * sizeof(int32_t))
                                       : (double)(r.pool * r.batch * r.nout * sizeof(float));
    }
    if (rc == SL_OK && have_dir) {
        char batch[32], steps[32], pool[32];
        char *args[] = {(char *)"--spec",
                        o->spec_text != NULL ? spec_path : (char *)o->spec,
                        (char *)"--dir",
                        dir,
                        (char *)"--batch",
                        batch,
                        (char *)"--steps",
                        steps,
                        (char *)"--pool",
                        pool,
                        NULL};
        snprintf(batch, sizeof batch, "%zu", o->batch);
        snprintf(steps, sizeof steps, "%zu", o->steps);
        snprintf(pool, sizeof pool, "%zu", r.pool);
        t = run_torch(args, &torch, line, sizeof line);
        if (t == 1 && json_number(line, "first_loss", &torch_loss) != 0)
            torch_loss = NAN;
        if (t < 0)
            fprintf(stderr, "bench train: torch_compare.py failed: %s\n", line);
    } else if (rc == SL_OK && !o->no_torch) {
        t = 0;
    }
    if (have_dir) {
        char path[4096];
        for (size_t i = 0; i < nnames; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            unlink(path);
        }
        rmdir(dir);
    }
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: %s: %s\n", source, sl_strerror(rc));
        spec_run_free(&r);
        sl_spec_free(spec);
        return 1;
    }
    budget = 3.0 * (double)r.np * sizeof(float) + (double)arena + data_bytes + 16.0 * 1048576.0;
    if (o->json) {
        printf("{\"%s\": \"%s\", \"name\": \"%s\", \"params\": %zu, \"batch\": %zu, "
               "\"steps\": %zu, \"fused\": %d, \"samples_per_s\": %.1f, \"first_loss\": %.6f, "
               "\"peak_rss_bytes\": %.0f, \"budget_bytes\": %.0f, \"arena_bytes\": %zu",
               o->onnx != NULL ? "onnx" : "spec", source, sl_spec_name(spec), r.np, o->batch,
               o->steps, r.m != NULL && sl_model_fused(r.m), ours, (double)first_loss,
               (double)ru.ru_maxrss * 1024.0, budget, arena);
        if (t == 1)
            printf(", \"torch_samples_per_s\": %.1f, \"ratio\": %.3f, \"torch_first_loss\": %.6f",
                   torch, ours / torch, torch_loss);
        if (t == 0)
            printf(", \"torch\": \"not available (apt-get install python3-torch)\"");
        printf("}\n");
    } else {
        printf("starling bench train: spec %s (%s%s), %zu parameters, batch %zu, %zu steps, "
               "1 thread, synthetic data (seed %d), %s\n",
               sl_spec_name(spec), source,
               o->onnx != NULL ? ", imported; its initializers as the initial parameters" : "",
               r.np, o->batch, o->steps, DATA_SEED,
               r.m != NULL && sl_model_fused(r.m) ? "fused stages" : "general executor");
        printf("  starling  %10.0f samples/s  (best of %d; gemm %s, element-wise %s)\n", ours,
               REPEATS, sl_nn_kernel_variant(), sl__nn_ew()->name);
        if (t == 1) {
            printf("  PyTorch   %10.0f samples/s  (spec_torch.py, torch.set_num_threads(1))\n",
                   torch);
            printf("  ratio     %10.2fx\n", ours / torch);
            printf("  first-step loss: starling %.6f, PyTorch %.6f\n", (double)first_loss,
                   torch_loss);
        } else if (t == 0) {
            printf("  PyTorch not available (apt-get install python3-torch): skipped\n");
        }
        printf("  peak RSS  %.1f MB %s budget %.1f MB = parameters, gradient, momentum %.2f + "
               "activations %.2f (planned arena) + batches %.2f + 16\n",
               mb((double)ru.ru_maxrss * 1024.0),
               (double)ru.ru_maxrss * 1024.0 <= budget ? "<=" : ">", mb(budget),
               mb(3.0 * (double)r.np * sizeof(float)), mb((double)arena), mb(data_bytes));
    }
    spec_run_free(&r);
    sl_spec_free(spec);
    return t < 0 ? 1 : 0;
}

#ifdef SL_HAVE_ONNX
/* The spec's name as `starling model import` gives it: the file's, without .onnx (1-63
 * printable characters but '"' and '\\'), else "imported". */
static void name_from_path(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    size_t n;
    base = base != NULL ? base + 1 : path;
    n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".onnx") == 0)
        n -= 5;
    if (n == 0 || n >= cap || n > 63)
        n = 0;
    for (size_t k = 0; k < n; k++)
        if (base[k] < 0x20 || base[k] > 0x7e || base[k] == '"' || base[k] == '\\')
            n = 0;
    snprintf(out, cap, "%.*s", (int)(n ? n : 8), n ? base : "imported");
}
#endif

/* --onnx: import the file, then the --spec benchmark on what it gives. */
static int bench_onnx(options *o)
{
#ifdef SL_HAVE_ONNX
    char err[512] = "", name[64], *spec_json = NULL;
    void *onnx = NULL;
    size_t len = 0, spec_len = 0, nparams = 0;
    float *params = NULL;
    int rc = sl_fs_read_file(o->onnx, 1u << 30, &onnx, &len);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: cannot read %s: %s\n", o->onnx, sl_strerror(rc));
        return 2;
    }
    name_from_path(o->onnx, name, sizeof name);
    rc = sl_onnx_import(onnx, len, name, &spec_json, &spec_len, &params, &nparams, NULL, err,
                        sizeof err);
    free(onnx);
    if (rc != SL_OK) {
        fprintf(stderr, "bench train: %s: %s (%s)\n", o->onnx, err, sl_errname(rc));
        return 2;
    }
    o->spec_text = spec_json, o->spec_len = spec_len;
    o->init = params, o->ninit = nparams;
    rc = bench_spec(o);
    free(spec_json);
    free(params);
    return rc;
#else
    fprintf(stderr,
            "bench train: --onnx %s: this build has no ONNX import (it needs protobuf-c-compiler, "
            "libprotobuf-c-dev and libonnx-dev at configure time); import the model elsewhere "
            "with `starling model import` and use --spec\n",
            o->onnx);
    return 2;
#endif
}

int sl_bench_train(int argc, char **argv)
{
    options o = {"lenet5", NULL, NULL, 64, 0, 0, 0, 0, 0, NULL, 0, NULL, 0};
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
        else if (strcmp(argv[i], "--spec") == 0 && i + 1 < argc)
            o.spec = argv[++i];
        else if (strcmp(argv[i], "--onnx") == 0 && i + 1 < argc)
            o.onnx = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], 1, 65536, &o.batch) != 0)
                return usage();
            o.batch_set = 1;
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], 1, 1000000, &o.steps) != 0)
                return usage();
        } else
            return usage();
    }
    if (o.onnx != NULL && o.spec != NULL) {
        fprintf(stderr, "bench train: --spec and --onnx: one model at a time\n");
        return usage();
    }
    if (o.onnx != NULL) {
        if (!o.batch_set)
            o.batch = 32;
        return bench_onnx(&o);
    }
    if (o.spec != NULL) {
        if (!o.batch_set)
            o.batch = 32;
        return bench_spec(&o);
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
        char batch[32], steps[32];
        char *args[] = {(char *)"--model",
                        (char *)o.model,
                        (char *)"--batch",
                        batch,
                        (char *)"--steps",
                        steps,
                        NULL};
        snprintf(batch, sizeof batch, "%zu", o.batch);
        snprintf(steps, sizeof steps, "%zu", o.steps);
        t = run_torch(args, &torch, line, sizeof line);
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
