/*
 * gemm.c - sl_nn_sgemm(): argument checks, the GotoBLAS/BLIS blocking and
 * packing driver shared by every variant, threads and the run-time choice
 * of the variant (gemm_int.h), above the kernels (gemm_scalar.c, the
 * scalar reference, and gemm_kernel_*.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemm_int.h"
#include "starling/nn.h"

static size_t min_size(size_t x, size_t y)
{
    return x < y ? x : y;
}

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static _Atomic(const sl__gemm_kernels *) active_kernels;

/*
 * Automatic choice, best first. AVX-512 before AVX2 also on AMD Zen 4,
 * where 512-bit FMAs are double-pumped and both peak at 32 flop/cycle: by
 * measurement (bench gemm, EPYC Zen 4, one thread, 3 interleaved runs,
 * ratio to OpenBLAS 0.3.21) the 8x32 AVX-512 kernels beat the 6x16 AVX2
 * ones on squares (1.01-1.07 vs 0.98-1.02) and on the short-M model
 * shapes (lenet5 conv1 3.2 vs 2.0, conv2 1.19 vs 1.07, fc1 1.01 vs 0.90,
 * cnn conv1 1.44 vs 1.26, conv2 0.96 vs 0.91), and tie on the rest.
 */
static const sl__gemm_kernels *const all_kernels[] = {
#if defined(SL_X86_SIMD)
    &sl__gemm_avx512,
    &sl__gemm_avx2,
#endif
#if defined(SL_NEON)
    &sl__gemm_neon,
#endif
    &sl__gemm_scalar,
};

const sl__gemm_kernels *sl__gemm_kernels_for(unsigned features)
{
    unsigned have = sl_cpu_features();
    for (size_t i = 0; i < sizeof all_kernels / sizeof all_kernels[0]; i++) {
        const sl__gemm_kernels *t = all_kernels[i];
        if ((t->features & have) == t->features &&
            (features == SL__GEMM_AUTO || features == t->features))
            return t;
    }
    return NULL;
}

int sl__gemm_use(unsigned features)
{
    const sl__gemm_kernels *t;
    if (features != SL__GEMM_AUTO && features != 0 && features != SL_CPU_AVX2 &&
        features != SL_CPU_AVX512 && features != SL_CPU_NEON)
        return SL_EINVAL;
    t = sl__gemm_kernels_for(features);
    if (t == NULL)
        return SL_EUNSUPPORTED;
    atomic_store_explicit(&active_kernels, t, memory_order_release);
    return SL_OK;
}

const sl__gemm_kernels *sl__gemm_active(void)
{
    const sl__gemm_kernels *t = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (t == NULL) {
        const sl__gemm_kernels *none = NULL;
        t = sl__gemm_kernels_for(SL__GEMM_AUTO);
        /* A forced choice (sl__gemm_use) that raced with us wins. */
        if (!atomic_compare_exchange_strong(&active_kernels, &none, t))
            t = none;
    }
    return t;
}

const char *sl__gemm_variant(void)
{
    return sl__gemm_active()->name;
}

const char *sl_nn_kernel_variant(void)
{
    return sl__gemm_variant();
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */
/* ------------------------------------------------------------------------ */

#define MAX_THREADS 64

static atomic_uint thread_count = 1;
/* Starting a thread costs tens of microseconds: below a few MFLOP per
 * thread one thread finishes first. */
static _Atomic double thread_min_flops = 8e6;

void sl_nn_set_threads(unsigned threads)
{
    if (threads == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online > 0 ? (unsigned)online : 1;
    }
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    atomic_store(&thread_count, threads);
}

double sl__gemm_set_thread_min_flops(double flops)
{
    return atomic_exchange(&thread_min_flops, flops);
}

/* Operands up to 128 KiB are read in place: measured on the models' FC
 * shapes (lenet5 fc2/fc3, cnn fc2 backward), 0.7x -> 0.9x of OpenBLAS. */
static _Atomic size_t direct_max_floats = 32768;

size_t sl__gemm_set_direct_max(size_t floats)
{
    return atomic_exchange(&direct_max_floats, floats);
}

static atomic_uint failing_allocs;

void sl__gemm_fail_allocs(unsigned count)
{
    atomic_store(&failing_allocs, count);
}

/* aligned_alloc, or NULL while a test asks for failures. */
static void *alloc_buffers(size_t bytes)
{
    unsigned left = atomic_load(&failing_allocs);
    while (left > 0)
        if (atomic_compare_exchange_weak(&failing_allocs, &left, left - 1))
            return NULL;
    return aligned_alloc(64, bytes);
}

/* ------------------------------------------------------------------------ */
/* The problem and packing                                                  */
/* ------------------------------------------------------------------------ */

/*
 * One multiplication after argument checks and the optional swap: C is
 * addressed as c[i * rs_c + j * cs_c], so C^T = op(B)^T op(A)^T is the same
 * problem with the operands exchanged and the strides of C swapped.
 */
typedef struct gemm_problem {
    const sl__gemm_kernels *kt;
    size_t mr, mc;               /* the chosen tile height, and MC rounded down to it */
    sl__gemm_ukernel_fn ukernel; /* its micro-kernel */
    int ta, tb;                  /* 1 = transposed */
    size_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    size_t lda, ldb;
    float *c;
    size_t rs_c, cs_c;
    int direct_a; /* use whole slivers of A in place (ta == 1) instead of packing them */
    int direct_b; /* use whole slivers of B in place (tb == 0) */
} gemm_problem;

/* Rows [i0, i0 + mb) and columns [p0, p0 + kb) of op(A) into MR-row slivers. */
static void pack_a(const gemm_problem *pb, float *dst, size_t i0, size_t mb, size_t p0, size_t kb)
{
    const sl__gemm_kernels *kt = pb->kt;
    if (pb->ta)
        kt->pack_copy(dst, pb->a + p0 * pb->lda + i0, pb->lda, pb->mr, mb, kb);
    else
        kt->pack_transpose(dst, pb->a + i0 * pb->lda + p0, pb->lda, pb->mr, mb, kb);
}

/* Rows [p0, p0 + kb) and columns [j0, j0 + nb) of op(B) into NR-column slivers. */
static void pack_b(const gemm_problem *pb, float *dst, size_t p0, size_t kb, size_t j0, size_t nb)
{
    const sl__gemm_kernels *kt = pb->kt;
    if (pb->tb)
        kt->pack_transpose(dst, pb->b + j0 * pb->ldb + p0, pb->ldb, kt->nr, nb, kb);
    else
        kt->pack_copy(dst, pb->b + p0 * pb->ldb + j0, pb->ldb, kt->nr, nb, kb);
}

/* ------------------------------------------------------------------------ */
/* Blocked driver                                                           */
/* ------------------------------------------------------------------------ */

/*
 * A tile that is not a whole MR x NR tile of a unit-stride C goes through a
 * stack tile with the same kernel, so it gets exactly the arithmetic an
 * interior tile would.
 */
static void edge_tile(const gemm_problem *pb, size_t kb, const float *as, size_t a_step,
                      const float *bs, size_t b_step, float *c, size_t rows, size_t cols,
                      float beta)
{
    _Alignas(64) float tile[SL__GEMM_MR_MAX * SL__GEMM_NR_MAX];
    size_t nr = pb->kt->nr, mr = pb->mr;
    if (beta != 0.0f) {
        if (rows < mr || cols < nr)
            memset(tile, 0, sizeof tile);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++)
                tile[i * nr + j] = c[i * pb->rs_c + j * pb->cs_c];
    }
    pb->ukernel(kb, as, a_step, bs, b_step, tile, nr, pb->alpha, beta);
    if (pb->cs_c == 1) {
        for (size_t i = 0; i < rows; i++)
            memcpy(c + i * pb->rs_c, tile + i * nr, cols * sizeof *c);
    } else {
        /* C^T of a swapped problem: walk C's rows (here, the tile's columns). */
        for (size_t j = 0; j < cols; j++)
            for (size_t i = 0; i < rows; i++)
                c[j * pb->cs_c + i] = tile[i * nr + j];
    }
}

/*
 * All tiles of one (MC x KC) block of A against one (KC x NC) block of B.
 * Operands used in place: whole slivers come from the source, a partial
 * one from the packing buffer (A's was packed by gemm_block, B's is here).
 */
static void macro_kernel(const gemm_problem *pb, const float *apack, float *bpack, size_t i0,
                         size_t mb, size_t j0, size_t nb, size_t p0, size_t kb, float beta)
{
    size_t mr = pb->mr, nr = pb->kt->nr;
    for (size_t jr = 0; jr < nb; jr += nr) {
        size_t cols = min_size(nr, nb - jr);
        const float *bs = bpack + jr * kb;
        size_t b_step = nr;
        if (pb->direct_b && cols == nr) {
            bs = pb->b + p0 * pb->ldb + j0 + jr;
            b_step = pb->ldb;
        } else if (pb->direct_b) {
            pack_b(pb, bpack, p0, kb, j0 + jr, cols);
            bs = bpack;
        }
        for (size_t ir = 0; ir < mb; ir += mr) {
            size_t rows = min_size(mr, mb - ir);
            float *c = pb->c + (i0 + ir) * pb->rs_c + (j0 + jr) * pb->cs_c;
            const float *as = apack + (pb->direct_a ? 0 : ir * kb);
            size_t a_step = mr;
            if (pb->direct_a && rows == mr) {
                as = pb->a + p0 * pb->lda + i0 + ir;
                a_step = pb->lda;
            }
            if (rows == mr && cols == nr && pb->cs_c == 1)
                pb->ukernel(kb, as, a_step, bs, b_step, c, pb->rs_c, pb->alpha, beta);
            else
                edge_tile(pb, kb, as, a_step, bs, b_step, c, rows, cols, beta);
        }
    }
}

/* Packing-buffer floats one worker needs for @rows x @cols of C. */
static void buffer_sizes(const gemm_problem *pb, size_t rows, size_t cols, size_t *a_floats,
                         size_t *b_floats)
{
    const sl__gemm_kernels *kt = pb->kt;
    size_t kb = min_size(kt->kc, pb->k);
    size_t mb = pb->direct_a ? pb->mr : min_size(pb->mc, round_up(rows, pb->mr));
    size_t nb = pb->direct_b ? kt->nr : min_size(kt->nc, round_up(cols, kt->nr));
    /* Whole cache lines, so that workers' buffers never share one. */
    *a_floats = round_up(mb * kb, 16);
    *b_floats = round_up(nb * kb, 16);
}

/* C rows [m0, m1) x columns [n0, n1); m0 and n0 are multiples of MR and NR. */
static void gemm_block(const gemm_problem *pb, float *apack, float *bpack, size_t m0, size_t m1,
                       size_t n0, size_t n1)
{
    const sl__gemm_kernels *kt = pb->kt;
    for (size_t jc = n0; jc < n1; jc += kt->nc) {
        size_t nb = min_size(kt->nc, n1 - jc);
        for (size_t pc = 0; pc < pb->k; pc += kt->kc) {
            size_t kb = min_size(kt->kc, pb->k - pc);
            float beta = pc == 0 ? pb->beta : 1.0f;
            if (!pb->direct_b)
                pack_b(pb, bpack, pc, kb, jc, nb);
            for (size_t ic = m0; ic < m1; ic += pb->mc) {
                size_t mb = min_size(pb->mc, m1 - ic), whole = mb / pb->mr * pb->mr;
                if (!pb->direct_a)
                    pack_a(pb, apack, ic, mb, pc, kb);
                else if (whole < mb)
                    pack_a(pb, apack, ic + whole, mb - whole, pc, kb);
                macro_kernel(pb, apack, bpack, ic, mb, jc, nb, pc, kb, beta);
            }
        }
    }
}

typedef struct gemm_worker {
    const gemm_problem *pb;
    float *apack, *bpack;
    size_t m0, m1, n0, n1;
} gemm_worker;

static void *worker_main(void *arg)
{
    const gemm_worker *w = arg;
    gemm_block(w->pb, w->apack, w->bpack, w->m0, w->m1, w->n0, w->n1);
    return NULL;
}

/*
 * Split C into @nt bands of whole tiles along the dimension with more
 * tiles; each band is one worker's, computed exactly as one thread would
 * (same tiles, same KC blocks), so the result does not depend on @nt.
 */
static int gemm_parallel(const gemm_problem *pb, unsigned nt)
{
    const sl__gemm_kernels *kt = pb->kt;
    size_t tiles_m = (pb->m + pb->mr - 1) / pb->mr, tiles_n = (pb->n + kt->nr - 1) / kt->nr;
    int by_n = tiles_n >= tiles_m;
    size_t tiles = by_n ? tiles_n : tiles_m, step = by_n ? kt->nr : pb->mr;
    size_t a_floats, b_floats;
    gemm_worker workers[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    float *mem;

    if (nt > tiles)
        nt = (unsigned)tiles;
    size_t band = (tiles + nt - 1) / nt * step;
    buffer_sizes(pb, by_n ? pb->m : band, by_n ? band : pb->n, &a_floats, &b_floats);
    /* All buffers before any thread starts: a failure leaves C untouched. */
    mem = alloc_buffers((a_floats + b_floats) * nt * sizeof(float));
    if (mem == NULL)
        return SL_ENOMEM;
    for (unsigned t = 0; t < nt; t++) {
        size_t lo = (size_t)t * (tiles / nt) + min_size(t, tiles % nt);
        size_t hi = lo + tiles / nt + (t < tiles % nt);
        gemm_worker *w = &workers[t];
        w->pb = pb;
        w->apack = mem + (size_t)t * (a_floats + b_floats);
        w->bpack = w->apack + a_floats;
        w->m0 = by_n ? 0 : lo * step;
        w->m1 = by_n ? pb->m : min_size(hi * step, pb->m);
        w->n0 = by_n ? lo * step : 0;
        w->n1 = by_n ? min_size(hi * step, pb->n) : pb->n;
    }
    for (unsigned t = 1; t < nt; t++)
        started[t] = pthread_create(&ids[t], NULL, worker_main, &workers[t]) == 0;
    worker_main(&workers[0]);
    for (unsigned t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            worker_main(&workers[t]); /* could not start: do its band here */
    }
    free(mem);
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */

static int check_args(sl_nn_trans ta, sl_nn_trans tb, size_t m, size_t n, size_t k, const float *a,
                      size_t lda, const float *b, size_t ldb, const float *c, size_t ldc)
{
    if ((ta != SL_NN_NO_TRANS && ta != SL_NN_TRANS) || (tb != SL_NN_NO_TRANS && tb != SL_NN_TRANS))
        return SL_EINVAL;
    if (ldc < n || (m > 0 && n > 0 && c == NULL))
        return SL_EINVAL;
    if (lda < (ta == SL_NN_NO_TRANS ? k : m) || (m > 0 && k > 0 && a == NULL))
        return SL_EINVAL;
    if (ldb < (tb == SL_NN_NO_TRANS ? n : k) || (k > 0 && n > 0 && b == NULL))
        return SL_EINVAL;
    return SL_OK;
}

/* C = beta * C, without reading C when beta == 0. */
static void scale_c(size_t m, size_t n, float beta, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++, c += ldc) {
        if (beta == 0.0f)
            memset(c, 0, n * sizeof *c);
        else if (beta != 1.0f)
            for (size_t j = 0; j < n; j++)
                c[j] *= beta;
    }
}

/*
 * Relative cost of the tiles covering m x n with the best height for m:
 * each tile costs its lanes plus about one row's worth of loads of B.
 */
static double tile_cost(const sl__gemm_kernels *kt, size_t m, size_t n, const sl__gemm_tile **best)
{
    double cost = 0;
    for (int t = 0; t < SL__GEMM_TILES && kt->tiles[t].mr > 0; t++) {
        size_t mr = kt->tiles[t].mr;
        double c = (double)((m + mr - 1) / mr) * (double)(mr + 1);
        if (t == 0 || c < cost) {
            cost = c;
            *best = &kt->tiles[t];
        }
    }
    return cost * (double)round_up(n, kt->nr);
}

int sl_nn_sgemm(sl_nn_trans trans_a, sl_nn_trans trans_b, size_t m, size_t n, size_t k, float alpha,
                const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                size_t ldc)
{
    int rc = check_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    if (rc != SL_OK || m == 0 || n == 0)
        return rc;
    if (k == 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return SL_OK;
    }

    gemm_problem pb = {.kt = sl__gemm_active(),
                       .ta = trans_a == SL_NN_TRANS,
                       .tb = trans_b == SL_NN_TRANS,
                       .m = m,
                       .n = n,
                       .k = k,
                       .alpha = alpha,
                       .beta = beta,
                       .a = a,
                       .b = b,
                       .lda = lda,
                       .ldb = ldb,
                       .c = c,
                       .rs_c = ldc,
                       .cs_c = 1};
    const sl__gemm_kernels *kt = pb.kt;
    const sl__gemm_tile *tile = NULL, *swapped_tile = NULL;
    double cost = tile_cost(kt, m, n, &tile), swapped_cost = tile_cost(kt, n, m, &swapped_tile);
    /* Narrow C (the models' N = 6 or 10 outputs against thousands of rows):
     * C^T = op(B)^T op(A)^T fills the tiles far better. Its C goes through
     * the edge-tile path, so it has to win clearly. */
    if (swapped_cost < 0.8 * cost) {
        tile = swapped_tile;
        pb.m = n;
        pb.n = m;
        pb.a = b;
        pb.lda = ldb;
        pb.ta = !pb.tb;
        pb.b = a;
        pb.ldb = lda;
        pb.tb = trans_a != SL_NN_TRANS;
        pb.rs_c = 1;
        pb.cs_c = ldc;
    }
    pb.mr = tile->mr;
    pb.mc = kt->mc / tile->mr * tile->mr;
    pb.ukernel = tile->ukernel;
    /* Packing pays for itself by reuse: with one sliver of A every element
     * of B is used once, with one or two of B A's are used once or twice;
     * and operands that fit in L2 are cheap to read in place anyway. */
    size_t direct_max = atomic_load(&direct_max_floats);
    pb.direct_a = pb.ta && (pb.n <= 2 * kt->nr || pb.m * pb.k <= direct_max);
    pb.direct_b = !pb.tb && (pb.m <= pb.mr || pb.k * pb.n <= direct_max);

    unsigned nt = atomic_load(&thread_count);
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double per_thread = atomic_load(&thread_min_flops);
    if (nt > 1 && flops < per_thread * nt)
        nt = flops >= 2 * per_thread ? (unsigned)(flops / per_thread) : 1;
    return gemm_parallel(&pb, nt);
}
