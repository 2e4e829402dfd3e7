/*
 * Fuzz target: a model spec, as an agent receives it from the coordinator
 * (untrusted): parsed and checked; when it parses and is small, built (fused
 * stages or the general executor), its memory sized, and run: a forward pass
 * and a training step of two samples on fixed inputs, then a buffer update.
 * Anything may be refused; nothing may crash, read out of bounds or leak.
 */
#include <string.h>

#include "fuzz_common.h"
#include "starling/nn.h"

#define MAX_PARAMS   (1u << 18)
#define MAX_ARENA    ((size_t)64 << 20)
#define BATCH        2
#define MAX_IN_FLOAT (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_spec *s = NULL;
    sl_model *m = NULL;
    char err[256];
    float *params = NULL, *grad = NULL, *x = NULL, *out = NULL, *targets = NULL, loss;
    int32_t labels[BATCH] = {0, 1};
    size_t np, in, classes;

    if (sl_spec_parse((const char *)data, size, &s, err, sizeof err) != SL_OK)
        return 0;
    if (err[0] != '\0' && memchr(err, '\0', sizeof err) == NULL)
        abort();
    np = (size_t)sl_layout_params(sl_spec_layout(s));
    if (np > MAX_PARAMS || sl_model_create_spec(s, &m, err, sizeof err) != SL_OK)
        goto done;
    in = sl_model_input_size(m);
    classes = sl_model_classes(m);
    if (in == 0 || in > MAX_IN_FLOAT || classes == 0 || classes > MAX_IN_FLOAT ||
        sl_model_activation_bytes(m, BATCH) == 0 || sl_model_activation_bytes(m, BATCH) > MAX_ARENA)
        goto done;
    params = calloc(np ? np : 1, sizeof *params);
    grad = calloc(np ? np : 1, sizeof *grad);
    x = calloc(BATCH * in, sizeof *x);
    out = calloc(BATCH * classes, sizeof *out);
    targets = calloc(BATCH * classes, sizeof *targets);
    if (params == NULL || grad == NULL || x == NULL || out == NULL || targets == NULL)
        goto done;
    if (sl_model_init(m, params, 7) != SL_OK)
        goto done;
    for (size_t i = 0; i < BATCH * in; i++)
        x[i] = (float)((int)(i % 7) - 3) * 0.25f; /* small integers: valid Embedding indices */
    (void)sl_model_forward(m, params, x, BATCH, out);
    if (sl_spec_loss_kind(s) == SL_SPEC_CROSS_ENTROPY) {
        labels[1] = classes > 1 ? 1 : 0;
        (void)sl_model_loss_grad(m, params, x, labels, BATCH, &loss, grad, out);
    } else {
        (void)sl_model_loss_grad_targets(m, params, x, targets, BATCH, &loss, grad, out);
    }
    sl_model_update_buffers(m, params);
done:
    free(params);
    free(grad);
    free(x);
    free(out);
    free(targets);
    sl_model_free(m);
    sl_spec_free(s);
    return 0;
}
