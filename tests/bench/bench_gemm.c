/*
 * bench_gemm.c - `starling bench gemm`: GFLOP/s of sl_nn_sgemm beside
 * OpenBLAS's cblas_sgemm on the same operands in the same process. OpenBLAS
 * is loaded with dlopen() so the build does not depend on it; it is held to
 * one thread, as sl_nn_sgemm is by default. The machine class is shared
 * and noisy: each side reports its best of several repetitions,
 * interleaved, and the ratio is what to read.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "starling/nn.h"
#include "../../device/nn/gemm_int.h"

/* cblas_sgemm with CBLAS_ORDER / CBLAS_TRANSPOSE as ints (cblas.h values). */
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS  111
#define CBLAS_TRANS     112

typedef struct shape {
    const char *name;
    int ta, tb;
    size_t m, n, k;
} shape;

/* The models' GEMMs at batch 64 (im2col convolutions, both layouts of the
 * narrow ones, and the backward products), then squares. */
static const shape shapes[] = {
    {"lenet5.conv1.fwd", 0, 0, 6, 64 * 576, 25},
    {"lenet5.conv1.fwd.rows", 0, 1, 64 * 576, 6, 25},
    {"lenet5.conv1.dw", 0, 1, 6, 25, 64 * 576},
    {"lenet5.conv2.fwd", 0, 0, 16, 64 * 64, 150},
    {"lenet5.conv2.fwd.rows", 0, 1, 64 * 64, 16, 150},
    {"lenet5.conv2.dw", 0, 1, 16, 150, 64 * 64},
    {"lenet5.conv2.dcols", 1, 0, 150, 64 * 64, 16},
    {"lenet5.fc1.fwd", 0, 1, 64, 120, 256},
    {"lenet5.fc1.dw", 1, 0, 120, 256, 64},
    {"lenet5.fc1.dx", 0, 0, 64, 256, 120},
    {"lenet5.fc2.fwd", 0, 1, 64, 84, 120},
    {"lenet5.fc2.dw", 1, 0, 84, 120, 64},
    {"lenet5.fc2.dx", 0, 0, 64, 120, 84},
    {"lenet5.fc3.fwd", 0, 1, 64, 10, 84},
    {"lenet5.fc3.dw", 1, 0, 10, 84, 64},
    {"lenet5.fc3.dx", 0, 0, 64, 84, 10},
    {"cnn.conv1.fwd", 0, 0, 32, 64 * 784, 25},
    {"cnn.conv1.dw", 0, 1, 32, 25, 64 * 784},
    {"cnn.conv2.fwd", 0, 0, 64, 64 * 196, 800},
    {"cnn.conv2.dw", 0, 1, 64, 800, 64 * 196},
    {"cnn.conv2.dcols", 1, 0, 800, 64 * 196, 64},
    {"cnn.fc1.fwd", 0, 1, 64, 512, 3136},
    {"cnn.fc1.dw", 1, 0, 512, 3136, 64},
    {"cnn.fc1.dx", 0, 0, 64, 3136, 512},
    {"cnn.fc2.fwd", 0, 1, 64, 10, 512},
    {"cnn.fc2.dw", 1, 0, 10, 512, 64},
    {"cnn.fc2.dx", 0, 0, 64, 512, 10},
    {"square.256", 0, 0, 256, 256, 256},
    {"square.512", 0, 0, 512, 512, 512},
    {"square.1024", 0, 0, 1024, 1024, 1024},
    {"square.2048", 0, 0, 2048, 2048, 2048},
};
static const char *const quick_shapes[] = {"lenet5.conv2.fwd", "lenet5.fc1.fwd", "cnn.fc1.fwd",
                                           "square.256"};

typedef struct options {
    int json, quick;
    const char *only; /* one shape by name, or NULL */
} options;

typedef struct openblas {
    void *lib;
    cblas_sgemm_fn sgemm;
} openblas;

static void openblas_load(openblas *ob)
{
    void (*set_threads)(int);
    ob->sgemm = NULL;
    ob->lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (ob->lib == NULL)
        return;
    /* POSIX: a data pointer from dlsym converts to a function pointer. */
    *(void **)&ob->sgemm = dlsym(ob->lib, "cblas_sgemm");
    *(void **)&set_threads = dlsym(ob->lib, "openblas_set_num_threads");
    if (set_threads != NULL)
        set_threads(1);
    if (ob->sgemm == NULL || set_threads == NULL) {
        dlclose(ob->lib);
        ob->lib = NULL;
        ob->sgemm = NULL;
    }
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static float uniform_pm1(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return (float)((double)((x * 0x2545F4914F6CDD1DULL) >> 40) / 8388608.0 - 1.0);
}

typedef struct operands {
    const shape *s;
    float *a, *b, *c;
    size_t lda, ldb;
} operands;

static int run_ours(const operands *o)
{
    const shape *s = o->s;
    return sl_nn_sgemm((sl_nn_trans)s->ta, (sl_nn_trans)s->tb, s->m, s->n, s->k, 1.0f, o->a, o->lda,
                       o->b, o->ldb, 0.0f, o->c, s->n);
}

static void run_blas(const openblas *ob, const operands *o)
{
    const shape *s = o->s;
    ob->sgemm(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS,
              s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)s->m, (int)s->n, (int)s->k, 1.0f, o->a,
              (int)o->lda, o->b, (int)o->ldb, 0.0f, o->c, (int)s->n);
}

/* Repetitions so one side takes ~0.15 s per round, at least 2. */
static int reps_for(const shape *s, int quick)
{
    double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    double r = (quick ? 0.5e9 : 4e9) / flops;
    return r < 2 ? 2 : r > 2000 ? 2000 : (int)r;
}

static int bench_shape(const options *opt, const openblas *ob, const shape *s, int first)
{
    operands o = {s, NULL, NULL, NULL, s->ta ? s->m : s->k, s->tb ? s->k : s->n};
    size_t na = s->m * s->k, nb = s->k * s->n, nc = s->m * s->n;
    float *c_blas = malloc(nc * sizeof(float));
    double best_ours = 1e30, best_blas = 1e30, flops = 2.0 * (double)s->m * s->n * s->k;
    double max_diff = 0, max_ref = 0;
    int reps = reps_for(s, opt->quick), rounds = opt->quick ? 2 : 5;

    o.a = malloc(na * sizeof(float));
    o.b = malloc(nb * sizeof(float));
    o.c = malloc(nc * sizeof(float));
    if (o.a == NULL || o.b == NULL || o.c == NULL || c_blas == NULL) {
        fprintf(stderr, "bench gemm: out of memory\n");
        free(o.a);
        free(o.b);
        free(o.c);
        free(c_blas);
        return 1;
    }
    for (size_t i = 0; i < na; i++)
        o.a[i] = uniform_pm1();
    for (size_t i = 0; i < nb; i++)
        o.b[i] = uniform_pm1();
    /* warm-up, and both results for the comparison */
    if (run_ours(&o) != SL_OK) {
        fprintf(stderr, "bench gemm: sl_nn_sgemm failed\n");
        free(o.a);
        free(o.b);
        free(o.c);
        free(c_blas);
        return 1;
    }
    if (ob->sgemm != NULL) {
        float *ours = o.c;
        o.c = c_blas;
        run_blas(ob, &o);
        o.c = ours;
        for (size_t i = 0; i < nc; i++) {
            max_diff = fmax(max_diff, fabs((double)o.c[i] - c_blas[i]));
            max_ref = fmax(max_ref, fabs((double)c_blas[i]));
        }
    }
    for (int r = 0; r < rounds; r++) {
        int64_t t0 = sl_bench_now_ns();
        for (int i = 0; i < reps; i++)
            (void)run_ours(&o);
        int64_t t1 = sl_bench_now_ns();
        best_ours = fmin(best_ours, (double)(t1 - t0) / reps);
        if (ob->sgemm == NULL)
            continue;
        for (int i = 0; i < reps; i++)
            run_blas(ob, &o);
        best_blas = fmin(best_blas, (double)(sl_bench_now_ns() - t1) / reps);
    }
    double g_ours = flops / best_ours, g_blas = ob->sgemm ? flops / best_blas : 0;
    double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
    if (opt->json) {
        printf("%s{\"shape\":\"%s\",\"ta\":%d,\"tb\":%d,\"m\":%zu,\"n\":%zu,\"k\":%zu,"
               "\"variant\":\"%s\",\"ours_gflops\":%.3f",
               first ? "" : ",\n", s->name, s->ta, s->tb, s->m, s->n, s->k, sl_nn_kernel_variant(),
               g_ours);
        if (ob->sgemm != NULL)
            printf(",\"openblas_gflops\":%.3f,\"ratio\":%.3f,\"max_rel_err\":%.3g", g_blas,
                   g_ours / g_blas, rel);
        printf("}");
    } else if (ob->sgemm != NULL) {
        printf("%-22s %c%c %6zu %6zu %6zu %9.2f %9.2f %7.2f %10.2e\n", s->name, s->ta ? 'T' : 'N',
               s->tb ? 'T' : 'N', s->m, s->n, s->k, g_ours, g_blas, g_ours / g_blas, rel);
    } else {
        printf("%-22s %c%c %6zu %6zu %6zu %9.2f\n", s->name, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N',
               s->m, s->n, s->k, g_ours);
    }
    fflush(stdout);
    free(o.a);
    free(o.b);
    free(o.c);
    free(c_blas);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: starling bench gemm [--json] [--quick] [--shape NAME] "
                    "[--variant scalar|avx2|avx512|neon] [--threads N]\n");
    return 2;
}

static int wanted(const options *opt, const shape *s)
{
    if (opt->only != NULL)
        return strcmp(opt->only, s->name) == 0;
    if (!opt->quick)
        return 1;
    for (size_t i = 0; i < sizeof quick_shapes / sizeof quick_shapes[0]; i++)
        if (strcmp(quick_shapes[i], s->name) == 0)
            return 1;
    return 0;
}

int sl_bench_gemm(int argc, char **argv)
{
    static const struct {
        const char *name;
        unsigned features;
    } variants[] = {
        {"scalar", 0}, {"avx2", SL_CPU_AVX2}, {"avx512", SL_CPU_AVX512}, {"neon", SL_CPU_NEON}};
    options opt = {0};
    openblas ob;
    int first = 1, rc = 0;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = 1;
        } else if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = 1;
        } else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            opt.only = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *end;
            unsigned long t = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || t > 1024)
                return usage();
            sl_nn_set_threads((unsigned)t);
        } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            size_t v = 0, nv = sizeof variants / sizeof variants[0];
            const char *name = argv[++i];
            while (v < nv && strcmp(variants[v].name, name) != 0)
                v++;
            if (v == nv)
                return usage();
            if (sl__gemm_use(variants[v].features) != SL_OK) {
                fprintf(stderr, "bench gemm: variant %s is not available here\n", name);
                return 1;
            }
        } else {
            return usage();
        }
    }
    openblas_load(&ob);
    if (opt.json) {
        printf("[\n");
    } else {
        printf("starling bench gemm: sl_nn_sgemm variant %s, GFLOP/s, best of repetitions\n",
               sl_nn_kernel_variant());
        if (ob.sgemm == NULL)
            printf("OpenBLAS not found (dlopen libopenblas.so.0: %s): reporting ours only\n",
                   dlerror());
        printf("%-22s %-2s %6s %6s %6s %9s %9s %7s %10s\n", "shape", "op", "m", "n", "k", "ours",
               ob.sgemm ? "openblas" : "", ob.sgemm ? "ratio" : "", ob.sgemm ? "max rel err" : "");
    }
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && rc == 0; i++) {
        if (!wanted(&opt, &shapes[i]))
            continue;
        rc = bench_shape(&opt, &ob, &shapes[i], first);
        first = 0;
    }
    if (opt.json)
        printf("\n]\n");
    if (ob.lib != NULL)
        dlclose(ob.lib);
    return rc;
}
