/*
 * sl_nn_ref.h - comparisons against the PyTorch reference values of
 * tests/fixtures/nn (header-only; the tests of the training engine share it).
 */
#ifndef SL_NN_REF_H
#define SL_NN_REF_H

#include <math.h>

#include "sl_fixture.h"
#include "sl_test.h"

/* sqrt(sum (a - ref)^2 / sum ref^2) (or the absolute norm when ref is 0). */
static inline double sl_nn_rel_diff(const float *a, const float *ref, size_t n)
{
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

/* fixtures/nn/@model.@what, @expect floats. */
static inline float *sl_nn_ref_f32(const char *model, const char *what, size_t expect)
{
    char name[256];
    size_t len;
    float *f;
    snprintf(name, sizeof name, "nn/%s.%s", model, what);
    f = sl_fixture_load(name, &len);
    assert_non_null(f);
    assert_int_equal(len, expect * sizeof(float));
    return f;
}

/*
 * The gradient against make_reference.py's summary of PyTorch's: per tensor,
 * the sampled values (relative difference <= 1e-4), the L2 norm (1e-4
 * relative) and the projections on +-1 vectors (within 5e-4 of the norm:
 * a difference of relative size 1e-4 moves a projection by about 1e-4 of
 * the norm, at most a few times that).
 */
static inline void sl_nn_check_grad(const char *name, const sl_layout *l, const float *grad)
{
    size_t ns = 0, len, at = 0;
    char file[80];
    char *check, *line, *next;
    float *sample, *ref_sample;
    double worst = 0.0;
    const char *which = "";

    for (size_t t = 0; t < sl_layout_tensors(l); t++)
        ns += (size_t)sl_fixture_sample_count(sl_layout_tensor(l, t)->count);
    ref_sample = sl_nn_ref_f32(name, "grad_sample.f32", ns);
    sample = malloc(ns * sizeof *sample);
    assert_non_null(sample);
    snprintf(file, sizeof file, "nn/%s.grad_check", name);
    check = sl_fixture_load(file, &len);
    assert_non_null(check);
    check = realloc(check, len + 1);
    assert_non_null(check);
    check[len] = '\0';
    line = check;
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        uint64_t n = sl_fixture_sample_count(d->count);
        double norm = 0.0, ref_norm, proj[SL_FIXTURE_PROJECTIONS], r;
        char tname[SL_CODEC_MAX_NAME + 2];
        int used = 0;

        for (uint64_t j = 0; j < n; j++)
            sample[at + j] = grad[d->offset + sl_fixture_sample_index(d->count, j)];
        r = sl_nn_rel_diff(sample + at, ref_sample + at, (size_t)n);
        if (r >= worst)
            worst = r, which = d->name;
        assert_true(r <= 1e-4);
        at += (size_t)n;

        while (*line == '#') /* comment lines */
            line = strchr(line, '\n') + 1;
        next = strchr(line, '\n');
        assert_non_null(next);
        *next = '\0';
        assert_int_equal(sscanf(line, "%65s %lf%n", tname, &ref_norm, &used), 2);
        assert_string_equal(tname, d->name);
        for (uint64_t i = 0; i < d->count; i++)
            norm += (double)grad[d->offset + i] * grad[d->offset + i];
        norm = sqrt(norm);
        assert_true(fabs(norm - ref_norm) <= 1e-4 * ref_norm);
        sl_fixture_project(t, grad + d->offset, d->count, proj);
        line += used;
        for (int p = 0; p < SL_FIXTURE_PROJECTIONS; p++) {
            char *end;
            double ref = strtod(line, &end);
            assert_true(end != line);
            line = end;
            assert_true(fabs(proj[p] - ref) <= 5e-4 * ref_norm);
        }
        line = next + 1;
    }
    assert_int_equal(at, ns);
    printf("  worst sampled grad rel diff %.2e (%s)", worst, which);
    free(check);
    free(sample);
    free(ref_sample);
}

#endif /* SL_NN_REF_H */
