/*
 * Log-mel features: the FFT against a naive DFT; the features of a
 * synthetic clip against NumPy's (tests/fixtures/data/logmel_ref.json,
 * written by tests/unit/data/logmel_ref.py from the definition in
 * starling/logmel.h) in four configurations, to 1e-3 in log space;
 * properties (silence, zero padding, a tone in its band, scaling,
 * determinism); every configuration refused with its reason; and the time
 * of a 1 s clip.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../../support/sl_test.h"
#include "../../../device/data/logmel_int.h"
#include "starling/logmel.h"

#ifndef SL_FIXTURES_DIR
#error "SL_FIXTURES_DIR must name the source tree's tests/fixtures"
#endif

#define PI 3.14159265358979323846

static void test_fft_against_dft(void **state)
{
    static const size_t sizes[] = {2, 4, 8, 64, 512, 4096};
    uint64_t seed = 7;
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        double *x = malloc(n * sizeof *x), *re = malloc((n / 2 + 1) * sizeof *re),
               *im = malloc((n / 2 + 1) * sizeof *im), worst = 0;
        assert_true(x && re && im);
        for (size_t i = 0; i < n; i++)
            x[i] = (double)(int64_t)(sl_test_rand(&seed) >> 40) / (double)(1 << 23) - 1.0;
        assert_int_equal(sl__rfft(x, n, re, im), SL_OK);
        for (size_t k = 0; k <= n / 2; k++) {
            double dr = 0, di = 0;
            for (size_t i = 0; i < n; i++) {
                double a = -2.0 * PI * (double)((i * k) % n) / (double)n;
                dr += x[i] * cos(a);
                di += x[i] * sin(a);
            }
            worst = fmax(worst, fmax(fabs(re[k] - dr), fabs(im[k] - di)));
        }
        if (worst > 1e-10 * (double)n)
            fail_msg("n = %zu: the FFT is off the DFT by %g", n, worst);
        free(x);
        free(re);
        free(im);
    }
    {
        double x[4] = {0}, re[3], im[3];
        assert_int_equal(sl__rfft(x, 3, re, im), SL_EINVAL);
        assert_int_equal(sl__rfft(x, 0, re, im), SL_EINVAL);
        /* a cosine at bin 1 of 4: X_1 = 2, the rest 0 */
        x[0] = 1, x[1] = 0, x[2] = -1, x[3] = 0;
        assert_int_equal(sl__rfft(x, 4, re, im), SL_OK);
        assert_true(fabs(re[0]) < 1e-15 && fabs(re[1] - 2) < 1e-15 && fabs(re[2]) < 1e-15);
    }
}

/* The clip of logmel_ref.py. */
static float *make_clip(size_t n, unsigned rate)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    double total = (double)n / rate;
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / rate;
        x[i] = (float)(0.5 * sin(2 * PI * 440 * t) + 0.25 * sin(2 * PI * 1250 * t + 0.3) +
                       0.2 * sin(2 * PI * (200 * t + 2800 * t * t / (2 * total))));
    }
    return x;
}

static char *read_fixture(const char *name)
{
    const char *dir = getenv("SL_FIXTURES");
    char path[4096];
    char *text;
    long len;
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir != NULL && dir[0] != '\0' ? dir : SL_FIXTURES_DIR,
             name);
    f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    text = malloc((size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

static unsigned field(const cJSON *c, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, name);
    assert_true(cJSON_IsNumber(v));
    return (unsigned)v->valuedouble;
}

static void test_against_numpy(void **state)
{
    char *text = read_fixture("data/logmel_ref.json");
    cJSON *doc = cJSON_Parse(text), *cases, *c;
    int count = 0;
    (void)state;
    assert_non_null(doc);
    cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    assert_true(cJSON_IsArray(cases));
    cJSON_ArrayForEach(c, cases)
    {
        sl_logmel_config cfg = {0};
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(c, "logmel"), *v;
        size_t n = field(c, "n"), i = 0;
        float *clip, *out;
        double worst = 0;
        char err[200];
        cfg.sample_rate = field(c, "sample_rate"), cfg.n_fft = field(c, "n_fft");
        cfg.hop = field(c, "hop"), cfg.n_mels = field(c, "n_mels"), cfg.frames = field(c, "frames");
        cfg.fmin = (float)cJSON_GetObjectItemCaseSensitive(c, "fmin")->valuedouble;
        cfg.fmax = (float)cJSON_GetObjectItemCaseSensitive(c, "fmax")->valuedouble;
        assert_int_equal(sl_logmel_check(&cfg, err, sizeof err), SL_OK);
        assert_int_equal(cJSON_GetArraySize(ref), (int)(cfg.n_mels * cfg.frames));
        clip = make_clip(n, cfg.sample_rate);
        out = malloc(cfg.n_mels * cfg.frames * sizeof *out);
        assert_non_null(out);
        assert_int_equal(sl_logmel(&cfg, clip, n, out), SL_OK);
        cJSON_ArrayForEach(v, ref)
        {
            double d = fabs(out[i] - v->valuedouble);
            if (d > worst)
                worst = d;
            if (d > 1e-3)
                fail_msg("case %d (n_fft %u, %u mels): mel %zu, frame %zu: %.6f, NumPy %.6f", count,
                         cfg.n_fft, cfg.n_mels, i / cfg.frames, i % cfg.frames, (double)out[i],
                         v->valuedouble);
            i++;
        }
        fprintf(stderr, "case %d: n_fft %u, %u mels, %u frames: worst %.2g\n", count, cfg.n_fft,
                cfg.n_mels, cfg.frames, worst);
        free(clip);
        free(out);
        count++;
    }
    assert_int_equal(count, 4);
    cJSON_Delete(doc);
    free(text);
}

static const sl_logmel_config g_kws = {16000, 512, 160, 40, 101, 20.0f, 8000.0f};

static void test_properties(void **state)
{
    sl_logmel_config c = g_kws;
    size_t span = (size_t)(c.frames - 1) * c.hop + c.n_fft, cells = (size_t)c.n_mels * c.frames;
    float *clip = make_clip(16000, 16000), *padded = calloc(span, sizeof *padded);
    float *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
    float floor_value = (float)log(1e-6);
    (void)state;
    assert_true(padded && a && b);
    /* silence, with or without samples */
    assert_int_equal(sl_logmel(&c, NULL, 0, a), SL_OK);
    for (size_t i = 0; i < cells; i++)
        assert_true(a[i] == floor_value);
    assert_int_equal(sl_logmel(&c, padded, span, b), SL_OK);
    assert_memory_equal(a, b, cells * sizeof *a);
    /* a short clip is zero-padded: the same as padding it by hand; samples past the span unused */
    memcpy(padded, clip, 5000 * sizeof *clip);
    assert_int_equal(sl_logmel(&c, clip, 5000, a), SL_OK);
    assert_int_equal(sl_logmel(&c, padded, span, b), SL_OK);
    assert_memory_equal(a, b, cells * sizeof *a);
    c.frames = 50;
    span = (size_t)(c.frames - 1) * c.hop + c.n_fft;
    assert_int_equal(sl_logmel(&c, clip, span, a), SL_OK);
    assert_int_equal(sl_logmel(&c, clip, 16000, b), SL_OK);
    assert_memory_equal(a, b, (size_t)c.n_mels * c.frames * sizeof *a);
    /* deterministic */
    assert_int_equal(sl_logmel(&c, clip, 16000, a), SL_OK);
    assert_memory_equal(a, b, (size_t)c.n_mels * c.frames * sizeof *a);
    c = g_kws;
    /* a 2 kHz tone: loudest in the band whose centre is nearest 2 kHz, in every frame */
    {
        double lo = 2595.0 * log10(1 + 20.0 / 700), hi = 2595.0 * log10(1 + 8000.0 / 700);
        unsigned best = 0;
        double gap = 1e9;
        for (unsigned m = 0; m < c.n_mels; m++) {
            double centre = 700 * (pow(10, (lo + (hi - lo) * (m + 1) / (c.n_mels + 1)) / 2595) - 1);
            if (fabs(centre - 2000) < gap)
                gap = fabs(centre - 2000), best = m;
        }
        for (size_t i = 0; i < 16000; i++)
            clip[i] = (float)(0.5 * sin(2 * PI * 2000 * (double)i / 16000));
        assert_int_equal(sl_logmel(&c, clip, 16000, a), SL_OK);
        for (unsigned t = 0; t < c.frames - 4; t++) /* the last frames reach into the padding */
            for (unsigned m = 0; m < c.n_mels; m++)
                if (m != best && a[m * c.frames + t] >= a[best * c.frames + t])
                    fail_msg("frame %u: band %u >= band %u", t, m, best);
        /* twice the amplitude: + ln 4 where the energy is far above the floor */
        for (size_t i = 0; i < 16000; i++)
            clip[i] *= 2;
        assert_int_equal(sl_logmel(&c, clip, 16000, b), SL_OK);
        for (unsigned t = 0; t < 90; t++)
            assert_true(fabs(b[best * c.frames + t] - a[best * c.frames + t] - log(4.0)) < 1e-4);
    }
    free(clip);
    free(padded);
    free(a);
    free(b);
}

static void expect_bad(sl_logmel_config c, const char *words)
{
    char err[256] = "";
    float out[4] = {-7, -7, -7, -7};
    assert_int_equal(sl_logmel_check(&c, err, sizeof err), SL_EINVAL);
    if (strstr(err, words) == NULL)
        fail_msg("\"%s\" does not say \"%s\"", err, words);
    assert_int_equal(sl_logmel(&c, NULL, 0, out), SL_EINVAL);
    assert_true(out[0] == -7 && out[3] == -7);
}

static void test_check(void **state)
{
    sl_logmel_config c = g_kws;
    (void)state;
    assert_int_equal(sl_logmel_check(&c, NULL, 0), SL_OK);
    c.n_fft = 500, expect_bad(c, "n_fft 500 is not a power of two from 64 to 4096");
    c.n_fft = 32, expect_bad(c, "n_fft 32");
    c.n_fft = 8192, expect_bad(c, "n_fft 8192");
    c = g_kws, c.n_mels = 0, expect_bad(c, "n_mels 0");
    c.n_mels = 258, expect_bad(c, "n_mels 258 (read: 1 .. n_fft / 2 + 1 = 257)");
    c.n_mels = 257;
    assert_int_equal(sl_logmel_check(&c, NULL, 0), SL_OK);
    c = g_kws, c.fmin = -1, expect_bad(c, "fmin -1 Hz");
    c.fmin = 8000, expect_bad(c, "fmin 8000 Hz, fmax 8000 Hz");
    c.fmin = 0, c.fmax = 8001, expect_bad(c, "sample_rate / 2 = 8000 Hz");
    c.fmax = NAN, expect_bad(c, "fmax nan Hz");
    c = g_kws, c.frames = 0, expect_bad(c, "frames 0");
    c = g_kws, c.hop = 0, expect_bad(c, "hop 0");
    c = g_kws, c.sample_rate = 0, expect_bad(c, "sample_rate 0 Hz");
    assert_int_equal(sl_logmel_check(NULL, NULL, 0), SL_EINVAL);
    {
        float out[4];
        c = g_kws;
        assert_int_equal(sl_logmel(NULL, NULL, 0, out), SL_EINVAL);
        assert_int_equal(sl_logmel(&c, NULL, 5, out), SL_EINVAL);
        assert_int_equal(sl_logmel(&c, NULL, 0, NULL), SL_EINVAL);
    }
}

static void test_speed(void **state)
{
    const sl_logmel_config c = g_kws;
    float *clip = make_clip(16000, 16000), *out = malloc(40 * 101 * sizeof *out);
    struct timespec t0, t1;
    double per_call;
    (void)state;
    assert_non_null(out);
    assert_int_equal(sl_logmel(&c, clip, 16000, out), SL_OK); /* warm */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 50; i++)
        assert_int_equal(sl_logmel(&c, clip, 16000, out), SL_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    per_call = ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9) / 50;
    fprintf(stderr, "1 s clip, n_fft 512, hop 160, 40 mels, 101 frames: %.3f ms\n", per_call * 1e3);
    /* well under 2 ms natively; the bound leaves room for sanitizers and emulators */
    assert_true(per_call < 0.02 * sl_test_time_scale());
    free(clip);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fft_against_dft), cmocka_unit_test(test_against_numpy),
        cmocka_unit_test(test_properties),      cmocka_unit_test(test_check),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
