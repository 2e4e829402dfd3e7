/*
 * Fuzz target: a task's data contract (device/data/DATA_CONTRACT.md), as the
 * coordinator receives it from an operator and an agent from the coordinator
 * (untrusted JSON). Parsed; a refusal must leave a NUL-terminated reason. A
 * contract that parses must be consistent (the sizes contract.h promises:
 * sample_size the product of the shape, raw_size what the preprocessing
 * reads, tdim and the classes matching the label's kind, standardisation of
 * a length the shape allows), every class found at its index, and, when its
 * sample is small, finished (scaled, standardised) and split (held out or
 * not) on two samples. Nothing may crash, read out of bounds or leak.
 */
#include <math.h>
#include <string.h>

#include "fuzz_common.h"
#include "starling/contract.h"

#define MAX_FINISH ((size_t)1 << 16) /* values of a sample that is finished and split */

static void check(int ok)
{
    if (!ok)
        abort();
}

static void check_consistent(const sl_contract *c)
{
    size_t product = 1;
    check(c->ndim >= 1 && c->ndim <= 4);
    for (size_t i = 0; i < c->ndim; i++) {
        check(c->shape[i] >= 1 && c->shape[i] <= SL_CONTRACT_MAX_SAMPLE);
        product *= c->shape[i];
        check(product <= SL_CONTRACT_MAX_SAMPLE);
    }
    check(c->sample_size == product);
    check(c->nfeatures == 0 || c->features != NULL);
    switch (c->raw) {
    case SL_RAW_VALUES:
        check(c->raw_size == c->sample_size);
        check(c->nfeatures == 0 || c->nfeatures == c->sample_size);
        break;
    case SL_RAW_IMAGE:
        check(c->image_channels == 1 || c->image_channels == 3);
        check(c->raw_size == (size_t)c->image_channels * c->image_height * c->image_width);
        check(c->raw_size == c->sample_size && c->nfeatures == 0);
        break;
    case SL_RAW_AUDIO:
        check(c->n_fft >= 64 && (c->n_fft & (c->n_fft - 1)) == 0);
        check(c->n_mels >= 1 && c->n_mels <= c->n_fft / 2 + 1 && c->frames >= 1 && c->hop >= 1);
        check(c->fmin >= 0 && c->fmin < c->fmax && c->fmax <= c->sample_rate / 2.0f);
        check((size_t)c->n_mels * c->frames == c->sample_size);
        check(c->raw_size == (size_t)(c->frames - 1) * c->hop + c->n_fft);
        break;
    case SL_RAW_SERIES:
        check(c->nfeatures > 0 && c->raw_size == c->nfeatures);
        check(c->window >= 2 && c->stride >= 1);
        check(c->nfeatures * c->window == c->sample_size);
        check(c->window_rule != SL_WINDOW_MAJORITY || c->label_kind == SL_LABEL_CLASS);
        check(c->window_rule != SL_WINDOW_MEAN || c->label_kind == SL_LABEL_TARGET);
        break;
    default:
        check(0);
    }
    switch (c->label_kind) {
    case SL_LABEL_CLASS:
        check(c->nclasses >= 2 && c->tdim == 1 && c->nlabel_columns <= 1);
        break;
    case SL_LABEL_MULTILABEL:
        check(c->nclasses >= 1 && c->tdim == c->nclasses);
        check(c->nlabel_columns == 0 || c->nlabel_columns == c->nclasses);
        break;
    case SL_LABEL_TARGET:
        check(c->nclasses == 0 && c->classes == NULL && c->tdim >= 1);
        check(c->nlabel_columns == 0 || c->nlabel_columns == c->tdim);
        break;
    default:
        check(0);
    }
    for (size_t i = 0; i < c->nclasses; i++) /* the first and the last (a lookup is linear) */
        if (i < 16 || i + 16 >= c->nclasses)
            check(sl_contract_class(c, c->classes[i]) == (long)i);
    check((c->mean == NULL) == (c->std == NULL));
    if (c->mean != NULL) {
        check(c->nstats == 1 || c->nstats == c->shape[0] || c->nstats == c->sample_size);
        for (size_t i = 0; i < c->nstats; i++)
            check(isfinite(c->mean[i]) && isfinite(c->std[i]) && c->std[i] > 0);
    }
    check(isfinite(c->scale) && isfinite(c->offset));
    check(c->min_samples >= 1);
    check(c->eval_share >= 0 && c->eval_share <= 0.9);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_contract *c = NULL;
    char err[256];
    float *x, *y;
    memset(err, 'x', sizeof err);
    if (sl_contract_parse((const char *)data, size, &c, err, sizeof err) != SL_OK) {
        check(c == NULL && memchr(err, '\0', sizeof err) != NULL);
        return 0;
    }
    check_consistent(c);
    if (c->sample_size <= MAX_FINISH && c->tdim <= MAX_FINISH) {
        x = malloc(2 * c->sample_size * sizeof *x);
        y = calloc(2 * c->tdim, sizeof *y);
        if (x != NULL && y != NULL) {
            for (size_t i = 0; i < 2 * c->sample_size; i++)
                x[i] = (float)(i % 13) - 6.0f;
            sl_contract_finish(c, x, 2);
            y[c->tdim] = 1.0f;
            (void)sl_contract_heldout(c, x, y);
            (void)sl_contract_heldout(c, x + c->sample_size, y + c->tdim);
        }
        free(x);
        free(y);
    }
    sl_contract_free(c);
    return 0;
}
