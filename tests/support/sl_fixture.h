/*
 * sl_fixture.h - the PyTorch reference values in tests/fixtures (header-only).
 *
 * tests/fixtures/nn/make_reference.py writes them; its header and the README
 * beside it say what each file holds. The weights are not stored: both sides
 * make them from splitmix64 (sl_fixture_weights()), bit for bit.
 *
 * The folder is $SL_FIXTURES (ctest sets it), else the source tree's
 * tests/fixtures (SL_FIXTURES_DIR, set by tests/CMakeLists.txt).
 */
#ifndef SL_FIXTURE_H
#define SL_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "starling/codec.h"
#include "starling/common.h"

#ifndef SL_FIXTURES_DIR
#error "SL_FIXTURES_DIR must name the source tree's tests/fixtures"
#endif

#define SL_FIXTURE_SEED        1    /* the weights' stream (make_reference.py SEED) */
#define SL_FIXTURE_SAMPLE      4096 /* gradient values kept per tensor (SAMPLE) */
#define SL_FIXTURE_PROJECTIONS 4    /* +-1 projections per tensor (PROJECTIONS) */

/* The fixture folder. */
static inline const char *sl_fixture_dir(void)
{
    const char *dir = getenv("SL_FIXTURES");
    return dir != NULL && dir[0] != '\0' ? dir : SL_FIXTURES_DIR;
}

/* Read fixtures/@name (at most 64 MiB): malloc'd bytes, NULL (after a message) when absent. */
static inline void *sl_fixture_load(const char *name, size_t *len)
{
    char path[4096];
    void *data = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", sl_fixture_dir(), name);
    if (sl_fs_read_file(path, 64u << 20, &data, &n) != SL_OK) {
        fprintf(stderr, "cannot read fixture %s\n", path);
        return NULL;
    }
    if (len != NULL)
        *len = n;
    return data;
}

/* splitmix64: the next output of @state. */
static inline uint64_t sl_fixture_splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/*
 * The reference weights of @layout (sl_layout_params() floats into @out):
 * one splitmix64 stream from SL_FIXTURE_SEED over the tensors in order,
 * each value (float)m * (float)(b / 2^23), m = (z >> 40) - 2^23 and
 * b = 1/sqrt(fan_in), a bias taking the fan-in of the weight before it.
 */
static inline void sl_fixture_weights(const sl_layout *layout, float *out)
{
    uint64_t state = SL_FIXTURE_SEED, fan_in = 1;
    for (size_t t = 0; t < sl_layout_tensors(layout); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(layout, t);
        float scale;
        if (d->ndim > 1)
            fan_in = d->count / d->shape[0];
        scale = (float)(1.0 / sqrt((double)fan_in) / 8388608.0);
        for (uint64_t i = 0; i < d->count; i++) {
            int64_t m = (int64_t)(sl_fixture_splitmix(&state) >> 40) - (1 << 23);
            out[d->offset + i] = (float)m * scale;
        }
    }
}

/* Index @j of the sampled gradient values of a tensor of @count elements. */
static inline uint64_t sl_fixture_sample_index(uint64_t count, uint64_t j)
{
    return count <= SL_FIXTURE_SAMPLE ? j : j * count / SL_FIXTURE_SAMPLE;
}

/* How many gradient values a tensor of @count elements keeps. */
static inline uint64_t sl_fixture_sample_count(uint64_t count)
{
    return count < SL_FIXTURE_SAMPLE ? count : SL_FIXTURE_SAMPLE;
}

/*
 * The SL_FIXTURE_PROJECTIONS projections of @g (a tensor of @count values,
 * tensor @t of its layout) on the +-1 vectors of make_reference.py:
 * splitmix64 from 1000 + t, the top bit of each output -1, else +1.
 */
static inline void sl_fixture_project(size_t t, const float *g, uint64_t count, double *proj)
{
    uint64_t state = 1000 + (uint64_t)t;
    for (int p = 0; p < SL_FIXTURE_PROJECTIONS; p++) {
        double s = 0.0;
        for (uint64_t i = 0; i < count; i++)
            s += (sl_fixture_splitmix(&state) >> 63) ? -(double)g[i] : (double)g[i];
        proj[p] = s;
    }
}

#endif /* SL_FIXTURE_H */
