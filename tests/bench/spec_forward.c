/*
 * spec_forward.c - what Starling computes for a model spec on a seeded batch,
 * written to files for tests/bench/test_spec_torch.py to hold PyTorch's
 * translation of the spec (spec_torch.py) to:
 *
 *   spec_forward SPEC.json OUTDIR [BATCH]
 *
 * OUTDIR receives (little-endian, raw):
 *   params.f32        the flat parameter vector: sl_model_init(seed 1), the
 *                     running statistics of BatchNormalization moved off 0 / 1
 *   input<i>.f32|i64  input i, batch x its size (int64 for an int64 input:
 *                     indices in [0, V) of the Embedding that reads it)
 *   labels.i32 or targets.f32   what the loss reads
 *   eval.f32          the output in inference mode
 *   train.f32         the output of a training forward pass
 *   grad.f32          the loss's gradient (buffers 0)
 *   after.f32         the parameters after sl__graph_update_buffers()
 *   loss.txt          the training pass's mean loss (%.9g)
 * It runs the general executor (graph.c), which takes any spec; the fused
 * stages are held to it by test_nn_models.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "starling/nn.h"
#include "../../device/nn/graph_int.h"
#include "../../device/nn/nn_int.h"

static int write_file(const char *dir, const char *name, const void *data, size_t bytes)
{
    char path[4096];
    FILE *f;
    size_t done;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    done = bytes > 0 ? fwrite(data, 1, bytes, f) : 0;
    return fclose(f) == 0 && done == bytes ? 0 : -1;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size + 1)) != NULL) {
        *len = fread(buf, 1, (size_t)size, f);
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

/* The vocabulary of the Embedding reading input tensor @t (the smallest, when several). */
static uint64_t vocab_of(const sl_spec *s, int t)
{
    uint64_t v = 0;
    for (size_t i = 0; i < s->nn; i++)
        if (s->n[i].op == SL__OP_EMBEDDING && s->n[i].in[0] == t) {
            uint64_t rows = s->t[s->n[i].in[1]].shape[0];
            v = v == 0 || rows < v ? rows : v;
        }
    return v ? v : 1;
}

int main(int argc, char **argv)
{
    char err[512] = "", name[32];
    sl_spec *spec = NULL;
    sl__graph *g = NULL;
    size_t len = 0, batch = 4, np, nout;
    char *text;
    float *params = NULL, *grad = NULL, *dout = NULL, *targets = NULL;
    int32_t *labels = NULL;
    void *inputs[SL__SPEC_MAX_INPUTS] = {NULL};
    uint64_t rng = sl__nn_rng_state(7, 1);
    double loss = 0.0;
    int rc;

    if (argc < 3 || argc > 4 || (argc == 4 && (batch = strtoul(argv[3], NULL, 10)) == 0)) {
        fprintf(stderr, "usage: spec_forward SPEC.json OUTDIR [BATCH]\n");
        return 2;
    }
    text = read_all(argv[1], &len);
    if (text == NULL) {
        fprintf(stderr, "spec_forward: cannot read %s\n", argv[1]);
        return 1;
    }
    rc = sl_spec_parse(text, len, &spec, err, sizeof err);
    free(text);
    if (rc != SL_OK) {
        fprintf(stderr, "spec_forward: %s: %s\n", argv[1], err);
        return 1;
    }
    if ((rc = sl__graph_create(spec, &g, err, sizeof err)) != SL_OK) {
        fprintf(stderr, "spec_forward: %s\n", err);
        sl_spec_free(spec);
        return 1;
    }
    np = (size_t)sl_layout_params(spec->layout);
    nout = batch * spec->t[spec->output].count;
    params = malloc(np * sizeof *params);
    grad = malloc(np * sizeof *grad);
    dout = malloc(nout * sizeof *dout);
    targets = malloc(nout * sizeof *targets);
    labels = malloc(batch * sizeof *labels);
    rc = params && grad && dout && targets && labels ? SL_OK : SL_ENOMEM;
    /* parameters: Starling's initialisation through a model of the spec */
    if (rc == SL_OK) {
        sl_model *m = NULL;
        rc = sl_model_create_spec(spec, &m, err, sizeof err);
        if (rc == SL_OK)
            rc = sl_model_init(m, params, 1);
        sl_model_free(m);
    }
    /* running statistics other than 0 and 1, so that inference mode tests them */
    for (size_t i = 0; rc == SL_OK && i < spec->nn; i++) {
        const sl__node *nd = &spec->n[i];
        if (nd->op != SL__OP_BATCHNORM)
            continue;
        for (int k = 3; k < 5; k++) {
            const sl__tensor *t = &spec->t[nd->in[k]];
            float *v = params + sl_layout_tensor(spec->layout, (size_t)t->param)->offset;
            for (uint64_t e = 0; e < t->count; e++)
                v[e] = k == 3 ? 0.2f * sl__nn_rng_unit(&rng) - 0.1f : 0.5f + sl__nn_rng_unit(&rng);
        }
    }
    for (size_t i = 0; rc == SL_OK && i < spec->ninputs; i++) {
        const sl__tensor *t = &spec->t[spec->input[i]];
        size_t n = batch * t->count;
        if (t->dtype == SL__I64) {
            int64_t *v = malloc(n * sizeof *v);
            uint64_t vocab = vocab_of(spec, spec->input[i]);
            for (size_t e = 0; v != NULL && e < n; e++)
                v[e] = (int64_t)(sl__nn_rng_next(&rng) % vocab);
            inputs[i] = v;
            snprintf(name, sizeof name, "input%zu.i64", i);
        } else {
            float *v = malloc(n * sizeof *v);
            for (size_t e = 0; v != NULL && e < n; e++)
                v[e] = 2.0f * sl__nn_rng_unit(&rng) - 1.0f;
            inputs[i] = v;
            snprintf(name, sizeof name, "input%zu.f32", i);
        }
        if (inputs[i] == NULL)
            rc = SL_ENOMEM;
        else if (write_file(argv[2], name, inputs[i], n * (t->dtype == SL__I64 ? 8 : 4)) != 0)
            rc = SL_EIO;
    }
    if (rc == SL_OK) {
        size_t classes = spec->t[spec->output].count;
        for (size_t n = 0; n < batch; n++)
            labels[n] = (int32_t)(sl__nn_rng_next(&rng) % classes);
        for (size_t e = 0; e < nout; e++) /* in [0, 1]: every loss takes them */
            targets[e] = sl__nn_rng_unit(&rng);
        if (write_file(argv[2], "params.f32", params, np * 4) != 0 ||
            (spec->loss == SL__LOSS_CROSS_ENTROPY
                 ? write_file(argv[2], "labels.i32", labels, batch * 4)
                 : write_file(argv[2], "targets.f32", targets, nout * 4)) != 0)
            rc = SL_EIO;
    }
    if (rc == SL_OK)
        rc = sl__graph_forward(g, params, (const void *const *)inputs, batch, 0, 0);
    if (rc == SL_OK && write_file(argv[2], "eval.f32", sl__graph_output(g), nout * 4) != 0)
        rc = SL_EIO;
    if (rc == SL_OK)
        rc = sl__graph_forward(g, params, (const void *const *)inputs, batch, 1, 1);
    if (rc == SL_OK && write_file(argv[2], "train.f32", sl__graph_output(g), nout * 4) != 0)
        rc = SL_EIO;
    if (rc == SL_OK)
        rc = sl__loss(spec, sl__graph_output(g), batch, labels, targets, &loss, dout);
    if (rc == SL_OK)
        rc = sl__graph_backward(g, dout, grad);
    if (rc == SL_OK && write_file(argv[2], "grad.f32", grad, np * 4) != 0)
        rc = SL_EIO;
    if (rc == SL_OK) {
        char line[64];
        int n = snprintf(line, sizeof line, "%.9g\n", loss);
        sl__graph_update_buffers(g, params);
        if (write_file(argv[2], "after.f32", params, np * 4) != 0 ||
            write_file(argv[2], "loss.txt", line, (size_t)n) != 0)
            rc = SL_EIO;
    }
    if (rc != SL_OK)
        fprintf(stderr, "spec_forward: %s %s\n", sl_strerror(rc), err);
    for (size_t i = 0; i < SL__SPEC_MAX_INPUTS; i++)
        free(inputs[i]);
    free(params), free(grad), free(dout), free(targets), free(labels);
    sl__graph_free(g);
    sl_spec_free(spec);
    return rc == SL_OK ? 0 : 1;
}
