/*
 * bench_codec.c - `starling bench codec`: every compared thing runs in the
 * same process on the same data, and the report gives ratios (this machine
 * class is shared and noisy; absolute times are not stable).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bench.h"
#include "starling/codec.h"

int64_t sl_bench_now_ns(void)
{
    return sl_clock_monotonic_ns(NULL);
}

typedef struct options {
    int json;
    int quick;
    const char *input;
    const char *layout;
} options;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return ((double)((x * 0x2545F4914F6CDD1DULL) >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(void)
{
    return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* Student-t with 2 degrees of freedom: heavy tails like real gradients' outliers. */
static double heavy(void)
{
    double a = gauss(), b = gauss(), c = gauss();
    return a / sqrt((b * b + c * c) / 2.0);
}

static double log2_binom(double d, double k)
{
    return (lgamma(d + 1) - lgamma(k + 1) - lgamma(d - k + 1)) / log(2.0);
}

/* Baseline selector: copy magnitudes, quickselect (Hoare), then collect >= threshold. */
static uint32_t kth_largest_bits(uint32_t *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1, target = k - 1; /* k-th largest at index k-1, descending */
    while (lo < hi) {
        uint32_t pivot = a[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i <= j) {
                uint32_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            break;
    }
    return a[target];
}

static size_t quickselect_topk(const float *x, size_t d, size_t k, uint32_t *scratch, uint32_t *idx)
{
    uint32_t thr;
    size_t n = 0;
    for (size_t i = 0; i < d; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        scratch[i] = u & 0x7fffffffu;
    }
    thr = kth_largest_bits(scratch, d, k);
    for (size_t i = 0; i < d && n < k; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7fffffffu) >= thr)
            idx[n++] = (uint32_t)i;
    }
    return n;
}

typedef struct sel_result {
    double gps[4]; /* exact, redsync, dgc, quickselect: G elements/s */
} sel_result;

static double best_of(int reps, double (*fn)(void *), void *arg)
{
    double best = 1e300;
    for (int r = 0; r < reps; r++) {
        double t = fn(arg);
        if (t < best)
            best = t;
    }
    return best;
}

typedef struct sel_arg {
    const float *x;
    size_t d, k;
    sl_select_mode mode;
    uint32_t *idx, *scratch;
    size_t n;
    int baseline;
} sel_arg;

static double time_select(void *p)
{
    sel_arg *a = p;
    int64_t t0 = sl_bench_now_ns();
    if (a->baseline)
        a->n = quickselect_topk(a->x, a->d, a->k, a->scratch, a->idx);
    else if (sl_select(a->mode, NULL, a->x, a->d, a->k, a->idx, &a->n) != SL_OK)
        abort();
    return (double)(sl_bench_now_ns() - t0) * 1e-9;
}

typedef struct frame_row {
    size_t bytes, pos_bytes, val_bytes, k;
    double enc_s, dec_s;
    double bound_bits; /* sum over tensors of log2 C(count, n) */
} frame_row;

/* One (data, density, value mode): encode the exact selection, decode-accumulate it. */
static void run_frame(const sl_layout *l, const float *x, const uint32_t *idx, size_t k,
                      sl_value_mode vm, int reps, float *dst, frame_row *row)
{
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 1, 0};
    sl_encode_params p;
    float *val = malloc((k ? k : 1) * sizeof *val);
    sl_sparse_tensor st = {k, idx, val};
    sl_update *u = NULL;
    void *frame = NULL;
    size_t len = 0;

    for (size_t j = 0; j < k; j++)
        val[j] = x[idx[j]];
    sl_encode_params_default(&p);
    p.values = vm;
    row->enc_s = row->dec_s = 1e300;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = sl_bench_now_ns();
        free(frame);
        if (sl_frame_encode_update(l, &h, &st, &p, NULL, &frame, &len) != SL_OK)
            abort();
        double t = (double)(sl_bench_now_ns() - t0) * 1e-9;
        if (t < row->enc_s)
            row->enc_s = t;
    }
    for (int r = 0; r < reps; r++) {
        int64_t t0 = sl_bench_now_ns();
        if (sl_frame_accumulate_update(l, frame, len, NULL, 1.0f, dst) != SL_OK)
            abort();
        double t = (double)(sl_bench_now_ns() - t0) * 1e-9;
        if (t < row->dec_s)
            row->dec_s = t;
    }
    if (sl_frame_decode_update(l, frame, len, NULL, &u) != SL_OK)
        abort();
    row->bytes = len;
    row->k = k;
    row->bound_bits = log2_binom((double)sl_layout_params(l), (double)k);
    row->pos_bytes = row->val_bytes = 0;
    for (size_t t = 0; t < u->tensors; t++) {
        row->pos_bytes += u->pos_bytes[t];
        row->val_bytes += u->val_bytes[t];
    }
    sl_update_free(u);
    free(frame);
    free(val);
}

/* zstd -19 of the same selection stored as u32 gaps then f32 values. */
static void run_zstd19(const float *x, const uint32_t *idx, size_t k, size_t *bytes, double *secs)
{
    size_t raw = 8 * k, cap = ZSTD_compressBound(raw), n;
    uint8_t *src = malloc(raw ? raw : 1), *dst = malloc(cap);
    int64_t t0;
    for (size_t j = 0; j < k; j++) {
        uint32_t gap = j ? idx[j] - idx[j - 1] : idx[0];
        memcpy(src + 4 * j, &gap, 4);
        memcpy(src + 4 * k + 4 * j, &x[idx[j]], 4);
    }
    t0 = sl_bench_now_ns();
    n = ZSTD_compress(dst, cap, src, raw, 19);
    *secs = (double)(sl_bench_now_ns() - t0) * 1e-9;
    if (ZSTD_isError(n))
        abort();
    *bytes = n;
    free(src);
    free(dst);
}

static int first_row = 1;

static void bench_vector(const options *o, const char *dist, const float *x, size_t d,
                         const sl_layout *user_layout)
{
    static const double densities[] = {0.10, 0.01, 0.001};
    sl_layout *own = NULL;
    const sl_layout *l = user_layout;
    uint32_t *idx = malloc(d * sizeof *idx), *scratch = malloc(d * sizeof *scratch);
    float *dst = calloc(d, sizeof *dst);
    int reps = d >= 5000000 ? 3 : 5;

    if (l == NULL) {
        uint64_t shape[1] = {d};
        if (sl_layout_create(&own) != SL_OK || sl_layout_add(own, "x", shape, 1) != SL_OK)
            abort();
        l = own;
    }
    for (size_t di = 0; di < 3; di++) {
        size_t k = (size_t)ceil(densities[di] * (double)d), zbytes;
        double bound = log2_binom((double)d, (double)k) / (double)k, zsecs;
        sel_arg a = {x, d, k, SL_SELECT_EXACT, idx, scratch, 0, 0};
        sel_result s;
        static const char *const sel_names[] = {"exact", "redsync", "dgc", "quickselect"};

        if (k == 0 || k > d)
            continue;
        for (int m = 0; m < 4; m++) {
            a.mode = m < 3 ? (sl_select_mode)m : SL_SELECT_EXACT;
            a.baseline = m == 3;
            s.gps[m] = (double)d / best_of(reps, time_select, &a) * 1e-9;
        }
        /* the exact selection, for the frames */
        a.baseline = 0;
        a.mode = SL_SELECT_EXACT;
        time_select(&a);
        run_zstd19(x, idx, k, &zbytes, &zsecs);
        if (o->json) {
            printf("%s{\"kind\":\"select\",\"dist\":\"%s\",\"d\":%zu,\"density\":%g",
                   first_row ? "" : ",\n", dist, d, densities[di]);
            for (int m = 0; m < 4; m++)
                printf(",\"%s_gps\":%.4f", sel_names[m], s.gps[m]);
            printf("}");
            first_row = 0;
        } else {
            printf(
                "\nselect  %-6s d=%-9zu density=%-6g  G elem/s: exact %.2f  redsync %.2f  dgc %.2f"
                "  quickselect %.2f  (exact/quickselect %.1fx)\n",
                dist, d, densities[di], s.gps[0], s.gps[1], s.gps[2], s.gps[3],
                s.gps[0] / s.gps[3]);
            printf("  %-8s %10s %8s %8s %8s %8s %9s %8s %8s %8s %8s\n", "values", "bytes",
                   "pos b/nz", "bound", "pos/bnd", "val b/nz", "x dense", "x zstd19",
                   "zstd19 slower", "enc GB/s", "dacc GB/s");
        }
        for (int vm = SL_VALUE_FP32; vm <= SL_VALUE_SIGN; vm++) {
            frame_row r;
            double pos_bits, val_bits, tot_bits, enc_gbs, dec_gbs;
            if (!user_layout) {
                run_frame(l, x, idx, k, (sl_value_mode)vm, reps, dst, &r);
            } else {
                /* a user layout: select per tensor at the same density via the compressor */
                sl_compress_params cp;
                sl_compressor *c;
                sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 1, 0};
                sl_update *u;
                void *frame;
                size_t len;
                int64_t t0;
                sl_compress_params_default(&cp);
                cp.density = densities[di];
                cp.encode.values = (sl_value_mode)vm;
                if (sl_compressor_create(l, &cp, &c) != SL_OK)
                    abort();
                /* steady state: the compressor's buffers are warm, as on a device's
                 * second round; every prepare starts from the same zero residual */
                r.enc_s = r.dec_s = 1e300;
                frame = NULL;
                for (int rep = 0; rep <= reps; rep++) {
                    double t;
                    free(frame);
                    t0 = sl_bench_now_ns();
                    if (sl_compressor_prepare(c, x, &h, 0, &frame, &len) != SL_OK)
                        abort();
                    t = (double)(sl_bench_now_ns() - t0) * 1e-9;
                    if (rep > 0 && t < r.enc_s)
                        r.enc_s = t;
                    t0 = sl_bench_now_ns();
                    if (sl_frame_accumulate_update(l, frame, len, NULL, 1.0f, dst) != SL_OK)
                        abort();
                    t = (double)(sl_bench_now_ns() - t0) * 1e-9;
                    if (rep > 0 && t < r.dec_s)
                        r.dec_s = t;
                }
                if (sl_frame_decode_update(l, frame, len, NULL, &u) != SL_OK)
                    abort();
                r.bytes = len;
                r.k = r.pos_bytes = r.val_bytes = 0;
                r.bound_bits = 0;
                for (size_t t = 0; t < u->tensors; t++) {
                    r.bound_bits +=
                        log2_binom((double)sl_layout_tensor(l, t)->count, (double)u->n[t]);
                    r.k += u->n[t];
                    r.pos_bytes += u->pos_bytes[t];
                    r.val_bytes += u->val_bytes[t];
                }
                sl_update_free(u);
                free(frame);
                sl_compressor_free(c);
            }
            bound = r.bound_bits / (double)r.k;
            pos_bits = 8.0 * (double)r.pos_bytes / (double)r.k;
            val_bits = 8.0 * (double)r.val_bytes / (double)r.k;
            tot_bits = 8.0 * (double)r.bytes / (double)r.k;
            /* encode includes the exact selection it needs */
            enc_gbs = 4.0 * (double)d /
                      (r.enc_s + (user_layout ? 0.0 : (double)d / (s.gps[0] * 1e9))) * 1e-9;
            dec_gbs = 4.0 * (double)d / r.dec_s * 1e-9;
            if (o->json) {
                printf(
                    ",\n{\"kind\":\"frame\",\"dist\":\"%s\",\"d\":%zu,\"density\":%g,\"values\":\"%"
                    "s\","
                    "\"k\":%zu,\"bytes\":%zu,\"pos_bits_per_nz\":%.4f,\"bound_bits_per_nz\":%.4f,"
                    "\"val_bits_per_nz\":%.4f,\"total_bits_per_nz\":%.4f,\"x_dense\":%.2f,"
                    "\"zstd19_bytes\":%zu,\"x_zstd19\":%.3f,\"zstd19_time_ratio\":%.1f,"
                    "\"encode_gbs\":%.3f,\"decode_acc_gbs\":%.3f}",
                    dist, d, densities[di], sl_value_mode_name((sl_value_mode)vm), r.k, r.bytes,
                    pos_bits, bound, val_bits, tot_bits, 4.0 * (double)d / (double)r.bytes, zbytes,
                    (double)zbytes / (double)r.bytes, zsecs / r.enc_s, enc_gbs, dec_gbs);
            } else {
                printf("  %-8s %10zu %8.3f %8.3f %7.2f%% %8.3f %9.1f %8.3f %8.0fx %8.2f %8.2f\n",
                       sl_value_mode_name((sl_value_mode)vm), r.bytes, pos_bits, bound,
                       100.0 * (pos_bits / bound - 1.0), val_bits,
                       4.0 * (double)d / (double)r.bytes, (double)zbytes / (double)r.bytes,
                       zsecs / r.enc_s, enc_gbs, dec_gbs);
            }
        }
    }
    sl_layout_free(own);
    free(idx);
    free(scratch);
    free(dst);
}

static int usage(void)
{
    fprintf(stderr, "usage: starling bench codec [--json] [--quick] [--input update.f32 "
                    "[--layout layout.txt]]\n");
    return 2;
}

int sl_bench_codec(int argc, char **argv)
{
    options o = {0};
    static const size_t sizes[] = {100000, 1000000, 10000000};
    size_t nsizes = 3;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--quick") == 0)
            o.quick = 1;
        else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc)
            o.input = argv[++i];
        else if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc)
            o.layout = argv[++i];
        else
            return usage();
    }
    if (o.quick)
        nsizes = 1;
    if (o.json)
        printf("[\n");
    else
        printf("starling bench codec: SIMD variant %s; ratios are measured in this run\n",
               sl_cpu_describe(sl_cpu_features()));
    if (o.input != NULL) {
        void *data;
        size_t len;
        sl_layout *l = NULL;
        int rc = sl_fs_read_file(o.input, SIZE_MAX / 2, &data, &len);
        if (rc != SL_OK || len % 4 != 0 || len == 0) {
            fprintf(stderr, "bench codec: %s: %s\n", o.input,
                    rc != SL_OK ? sl_strerror(rc) : "not a whole number of fp32 values");
            return 1;
        }
#if SIZE_MAX > 0xffffffffu
        if (len / 4 > SL_CODEC_MAX_TENSOR) {
            fprintf(stderr, "bench codec: %s: too large\n", o.input);
            return 1;
        }
#endif
        if (o.layout != NULL) {
            void *text;
            size_t tlen;
            rc = sl_fs_read_file(o.layout, 1 << 20, &text, &tlen);
            if (rc == SL_OK) {
                rc = sl_layout_parse(text, tlen, &l);
                free(text);
            }
            if (rc == SL_OK && sl_layout_params(l) != len / 4)
                rc = SL_ELAYOUT;
            if (rc != SL_OK) {
                fprintf(stderr, "bench codec: %s: %s\n", o.layout, sl_strerror(rc));
                return 1;
            }
        }
        {
            const float *x = data;
            for (size_t i = 0; i < len / 4; i++)
                if (!isfinite(x[i])) {
                    fprintf(stderr, "bench codec: %s: value %zu is not finite\n", o.input, i);
                    return 1;
                }
        }
        bench_vector(&o, "input", data, len / 4, l);
        sl_layout_free(l);
        free(data);
    } else {
        for (size_t si = 0; si < nsizes; si++) {
            size_t d = sizes[si];
            float *x = malloc(d * sizeof *x);
            for (size_t i = 0; i < d; i++)
                x[i] = (float)(gauss() * 1e-3);
            bench_vector(&o, "gauss", x, d, NULL);
            for (size_t i = 0; i < d; i++)
                x[i] = (float)(heavy() * 1e-3);
            bench_vector(&o, "heavy", x, d, NULL);
            free(x);
        }
    }
    if (o.json)
        printf("\n]\n");
    return 0;
}
