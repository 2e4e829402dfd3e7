/*
 * test_gemm.c - sl_nn_sgemm against a double-precision reference, for every
 * variant this machine can run, and the variants against each other.
 *
 * Tolerance: any summation order of k products in fp32 (with or without
 * FMA) is within gamma_k * sum |a||b| of the exact dot product, gamma_k =
 * k u / (1 - k u), u = 2^-24; alpha * s + beta * c adds a few more u. So
 *   |c - exact| <= (k + 4) * 2^-23 * (|alpha| * sum_p |a_ip b_pj| + |beta c0|)
 * holds with a factor ~2 to spare, for every shape and blocking, and two
 * variants differ by at most twice that.
 */
#include <math.h>

#include "../../support/sl_test.h"

#include "../../../device/nn/gemm_int.h"
#include "starling/nn.h"

static uint64_t rng = 0x5eed0fa11u;

static float uniform_pm1(void)
{
    return (float)((double)(sl_test_rand(&rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static size_t rand_below(size_t n)
{
    return (size_t)(sl_test_rand(&rng) % n);
}

/* malloc that never asks for 0 bytes and fails the test instead of returning NULL */
static void *alloc_n(size_t n, size_t size)
{
    void *p = malloc((n + 1) * size);
    assert_non_null(p);
    return p;
}

static float *alloc_fill(size_t n)
{
    float *x = alloc_n(n, sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = uniform_pm1();
    return x;
}

/* One problem: storage and the reference result with its error bound. */
typedef struct problem {
    sl_nn_trans ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    float *a, *b, *c0; /* c0: C before the call */
    double *ref, *bound;
} problem;

static void problem_make(problem *p, sl_nn_trans ta, sl_nn_trans tb, size_t m, size_t n, size_t k,
                         size_t pad, float alpha, float beta)
{
    size_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
    p->ta = ta;
    p->tb = tb;
    p->m = m;
    p->n = n;
    p->k = k;
    p->lda = acols + (pad ? rand_below(pad) : 0);
    p->ldb = bcols + (pad ? rand_below(pad) : 0);
    p->ldc = n + (pad ? rand_below(pad) : 0);
    p->alpha = alpha;
    p->beta = beta;
    p->a = alloc_fill(arows * p->lda);
    p->b = alloc_fill(brows * p->ldb);
    p->c0 = alloc_fill(m * p->ldc);
    if (beta == 0.0f)
        for (size_t i = 0; i < m * p->ldc; i++)
            p->c0[i] = NAN;
    p->ref = alloc_n(m * n, sizeof *p->ref);
    p->bound = alloc_n(m * n, sizeof *p->bound);
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (size_t q = 0; q < k; q++) {
                double x = ta ? p->a[q * p->lda + i] : p->a[i * p->lda + q];
                double y = tb ? p->b[j * p->ldb + q] : p->b[q * p->ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            double c = beta == 0.0f ? 0.0 : (double)p->c0[i * p->ldc + j];
            p->ref[i * n + j] = alpha * s + beta * c;
            p->bound[i * n + j] =
                ((double)k + 4) * ldexp(1.0, -23) * (fabs(alpha) * mag + fabs(beta * c)) + 1e-30;
        }
    }
}

static void problem_free(problem *p)
{
    free(p->a);
    free(p->b);
    free(p->c0);
    free(p->ref);
    free(p->bound);
}

/* Run sl_nn_sgemm on a copy of C; the caller frees the result. */
static float *problem_run(const problem *p)
{
    float *c = alloc_n(p->m * p->ldc, sizeof *c);
    memcpy(c, p->c0, p->m * p->ldc * sizeof *c);
    assert_int_equal(sl_nn_sgemm(p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->lda, p->b,
                                 p->ldb, p->beta, c, p->ldc),
                     SL_OK);
    return c;
}

/* C agrees with the reference; the padding between rows is untouched. */
static void problem_check(const problem *p, const float *c)
{
    for (size_t i = 0; i < p->m; i++) {
        for (size_t j = 0; j < p->ldc; j++) {
            float got = c[i * p->ldc + j];
            if (j >= p->n) {
                assert_memory_equal(&got, &p->c0[i * p->ldc + j], sizeof got);
                continue;
            }
            double err = fabs((double)got - p->ref[i * p->n + j]);
            if (!(err <= p->bound[i * p->n + j])) {
                fail_msg("%s: ta=%d tb=%d m=%zu n=%zu k=%zu alpha=%g beta=%g: C[%zu][%zu] = "
                         "%.9g, want %.9g (bound %.3g)",
                         sl__gemm_variant(), p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->beta, i,
                         j, got, p->ref[i * p->n + j], p->bound[i * p->n + j]);
            }
        }
    }
}

static const unsigned variants[] = {0, SL_CPU_AVX2, SL_CPU_AVX512, SL_CPU_NEON};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static const float alphas[] = {1.0f, -0.5f, 2.0f, 1.0f};
static const float betas[] = {0.0f, 1.0f, 0.25f, -1.0f};

/* Random shapes 1..67 in every transpose combination, for every variant,
 * with operands packed and read in place. */
static void test_random_shapes(void **state)
{
    size_t old = sl__gemm_set_direct_max(0);
    (void)state;
    for (int t = 0; t < 96; t++) {
        if (t == 48)
            sl__gemm_set_direct_max(SIZE_MAX);
        problem p;
        size_t m = 1 + rand_below(67), n = 1 + rand_below(67), k = 1 + rand_below(67);
        if (t % 8 == 0)
            m = 1 + rand_below(4); /* the narrow shapes the models use */
        if (t % 8 == 1)
            n = 1 + rand_below(12);
        problem_make(&p, (sl_nn_trans)(t & 1), (sl_nn_trans)((t >> 1) & 1), m, n, k,
                     (t & 4) ? 9 : 0, alphas[(t >> 2) % 4], betas[(t >> 3) % 4]);
        for (size_t v = 0; v < N_VARIANTS; v++) {
            if (sl__gemm_use(variants[v]) != SL_OK)
                continue;
            float *c = problem_run(&p);
            problem_check(&p, c);
            free(c);
        }
        problem_free(&p);
    }
    sl__gemm_set_direct_max(old);
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
}

/* Shapes that span several KC/MC/NC blocks, against the reference and scalar. */
static void test_big_shapes(void **state)
{
    static const size_t shapes[][3] = {{300, 500, 200}, {37, 1100, 290}, {6, 2311, 25},
                                       {1100, 6, 150},  {13, 4200, 9},   {7, 4500, 20}};
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        problem p;
        problem_make(&p, (sl_nn_trans)(s & 1), (sl_nn_trans)((s >> 1) & 1), shapes[s][0],
                     shapes[s][1], shapes[s][2], 5, 1.0f, s == 2 ? 0.0f : 0.5f);
        float *scalar = NULL;
        for (size_t v = 0; v < N_VARIANTS; v++) {
            if (sl__gemm_use(variants[v]) != SL_OK)
                continue;
            float *c = problem_run(&p);
            problem_check(&p, c);
            if (scalar == NULL) {
                scalar = c;
                continue;
            }
            for (size_t i = 0; i < p.m; i++)
                for (size_t j = 0; j < p.n; j++)
                    assert_true(fabs((double)c[i * p.ldc + j] - scalar[i * p.ldc + j]) <=
                                2 * p.bound[i * p.n + j]);
            free(c);
        }
        free(scalar);
        problem_free(&p);
    }
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
}

/* Same inputs, same variant, same bits; and any thread count gives 1 thread's bits. */
static void test_deterministic_and_threads(void **state)
{
    static const size_t shapes[][3] = {
        {200, 150, 300}, {1000, 10, 84}, {5, 3000, 50}, {61, 67, 300}};
    double old = sl__gemm_set_thread_min_flops(1.0);
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        problem p;
        problem_make(&p, (sl_nn_trans)(s & 1), (sl_nn_trans)((s >> 1) & 1), shapes[s][0],
                     shapes[s][1], shapes[s][2], 3, 0.75f, 0.5f);
        for (size_t v = 0; v < N_VARIANTS; v++) {
            if (sl__gemm_use(variants[v]) != SL_OK)
                continue;
            sl_nn_set_threads(1);
            float *one = problem_run(&p);
            float *again = problem_run(&p);
            assert_memory_equal(one, again, p.m * p.ldc * sizeof *one);
            free(again);
            for (unsigned nt = 2; nt <= 3; nt++) {
                sl_nn_set_threads(nt);
                float *c = problem_run(&p);
                assert_memory_equal(one, c, p.m * p.ldc * sizeof *one);
                free(c);
            }
            free(one);
        }
        problem_free(&p);
    }
    sl_nn_set_threads(0); /* one per CPU: still a valid setting */
    sl_nn_set_threads(1);
    sl__gemm_set_thread_min_flops(old);
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
}

/* beta == 0 never reads C (NaN there is ignored); alpha == 0 or k == 0 scale C. */
static void test_alpha_beta_edges(void **state)
{
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    float c[4];
    (void)state;
    for (size_t v = 0; v < N_VARIANTS; v++) {
        if (sl__gemm_use(variants[v]) != SL_OK)
            continue;
        for (int i = 0; i < 4; i++)
            c[i] = NAN;
        /* [1 2 3; 4 5 6] * [1 0; 0 1; 1 1] = [4 5; 10 11] */
        assert_int_equal(
            sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2),
            SL_OK);
        assert_true(c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11);
        /* k == 0: C = beta * C; with beta == 0 NaN becomes 0. */
        assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 2, 0, 1.0f, NULL, 0, NULL,
                                     2, 0.5f, c, 2),
                         SL_OK);
        assert_true(c[0] == 2 && c[1] == 2.5f && c[2] == 5 && c[3] == 5.5f);
        c[3] = NAN;
        assert_int_equal(
            sl_nn_sgemm(SL_NN_TRANS, SL_NN_TRANS, 2, 2, 0, 1.0f, NULL, 2, NULL, 0, 0.0f, c, 2),
            SL_OK);
        assert_true(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0);
        /* alpha == 0: A and B are not used. */
        c[0] = 3;
        assert_int_equal(
            sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 1, 1, 3, 0.0f, a, 3, b, 2, 2.0f, c, 1),
            SL_OK);
        assert_true(c[0] == 6);
        /* Both transposed: A stored 3 x 2 gives op(A) = [1 3 5; 2 4 6], B stored
         * 2 x 3 = [1 0 0; 1 1 1] gives op(B) = [1 1; 0 1; 0 1]; 2 * op(A) op(B). */
        assert_int_equal(
            sl_nn_sgemm(SL_NN_TRANS, SL_NN_TRANS, 2, 2, 3, 2.0f, a, 2, b, 3, 0.0f, c, 2), SL_OK);
        assert_true(c[0] == 2 && c[1] == 18 && c[2] == 4 && c[3] == 24);
    }
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
}

/* Bad arguments give SL_EINVAL and leave C as it was. */
static void test_invalid_arguments(void **state)
{
    float a[12] = {0}, b[12] = {0}, c[12];
    (void)state;
    for (int i = 0; i < 12; i++)
        c[i] = (float)i;
    /* leading dimensions below the width */
    assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3),
                     SL_EINVAL);
    assert_int_equal(sl_nn_sgemm(SL_NN_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 1, b, 3, 0, c, 3),
                     SL_EINVAL);
    assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 2, 0, c, 3),
                     SL_EINVAL);
    assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3),
                     SL_EINVAL);
    assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 2),
                     SL_EINVAL);
    /* NULL with a non-empty operand */
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3), SL_EINVAL);
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3), SL_EINVAL);
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3), SL_EINVAL);
    /* a bad transpose value */
    assert_int_equal(sl_nn_sgemm((sl_nn_trans)2, SL_NN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3),
                     SL_EINVAL);
    assert_int_equal(sl_nn_sgemm(SL_NN_NO_TRANS, (sl_nn_trans)-1, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3),
                     SL_EINVAL);
    for (int i = 0; i < 12; i++)
        assert_true(c[i] == (float)i);
    /* empty products are fine, even with NULL operands */
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 0, 3, 4, 1, NULL, 4, b, 3, 0, NULL, 3), SL_OK);
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 2, 0, 4, 1, a, 4, NULL, 0, 0, NULL, 0), SL_OK);
    assert_int_equal(
        sl_nn_sgemm(SL_NN_NO_TRANS, SL_NN_NO_TRANS, 0, 0, 0, 1, NULL, 0, NULL, 0, 0, NULL, 0),
        SL_OK);
}

/* A failed allocation gives SL_ENOMEM and leaves C as it was. */
static void test_out_of_memory(void **state)
{
    problem p;
    (void)state;
    problem_make(&p, SL_NN_NO_TRANS, SL_NN_TRANS, 40, 50, 60, 0, 1.0f, 0.5f);
    float *c = alloc_n(p.m * p.ldc, sizeof *c);
    memcpy(c, p.c0, p.m * p.ldc * sizeof *c);
    sl__gemm_fail_allocs(1);
    assert_int_equal(
        sl_nn_sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc),
        SL_ENOMEM);
    assert_memory_equal(c, p.c0, p.m * p.ldc * sizeof *c);
    /* the next call allocates again */
    assert_int_equal(
        sl_nn_sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc),
        SL_OK);
    problem_check(&p, c);
    free(c);
    problem_free(&p);
}

/* The hooks: names, unsupported and invalid choices, automatic choice. */
static void test_variant_hooks(void **state)
{
    unsigned have = sl_cpu_features();
    (void)state;
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
    assert_string_equal(sl_nn_kernel_variant(), sl__gemm_variant());
    if (have == 0)
        assert_string_equal(sl_nn_kernel_variant(), "scalar");
    else
        assert_string_not_equal(sl_nn_kernel_variant(), "scalar");
    assert_int_equal(sl__gemm_use(0), SL_OK);
    assert_string_equal(sl_nn_kernel_variant(), "scalar");
    assert_int_equal(sl__gemm_use(3), SL_EINVAL);
    for (size_t v = 1; v < N_VARIANTS; v++) {
        int rc = sl__gemm_use(variants[v]);
        if (have & variants[v]) {
            assert_int_equal(rc, SL_OK);
            assert_string_equal(sl__gemm_variant(), sl_cpu_describe(variants[v]));
        } else {
            assert_int_equal(rc, SL_EUNSUPPORTED);
        }
    }
    for (size_t v = 0; v < N_VARIANTS; v++) {
        const sl__gemm_kernels *t = sl__gemm_kernels_for(variants[v]);
        if (t == NULL)
            continue;
        assert_true(t->nr <= SL__GEMM_NR_MAX && t->nc % t->nr == 0 && t->kc > 0);
        assert_true(t->tiles[0].mr > 0 && t->mc >= t->tiles[0].mr);
        for (int i = 0; i < SL__GEMM_TILES && t->tiles[i].mr > 0; i++) {
            assert_true(t->tiles[i].mr <= SL__GEMM_MR_MAX && t->tiles[i].ukernel != NULL);
            if (i > 0)
                assert_true(t->tiles[i].mr < t->tiles[i - 1].mr);
        }
    }
    assert_int_equal(sl__gemm_use(SL__GEMM_AUTO), SL_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_alpha_beta_edges),
        cmocka_unit_test(test_variant_hooks),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_big_shapes),
        cmocka_unit_test(test_deterministic_and_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
