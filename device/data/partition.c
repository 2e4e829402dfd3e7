/*
 * partition.c - deterministic splits of a data set among simulated clients.
 *
 * Every scheme first decides an owner for each sample, then builds each
 * client's list by scanning the samples in order, so lists come out
 * ascending. All randomness comes from one xoshiro256** stream seeded by
 * splitmix64(seed): the same (labels, n, classes, spec, clients, seed) give
 * the same split. Integer-only schemes (iid, shards) are identical on every
 * platform; dirichlet and quantity go through log/exp/sqrt and may differ
 * where libm does.
 *
 *   iid          a random permutation cut into clients chunks; the first
 *                n % clients clients get one sample more.
 *   dirichlet:a  for every class present, its samples in random order are
 *                cut among the clients by proportions ~ Dir(a) (cut points
 *                rounded to nearest). An empty client then takes one random
 *                sample from the largest client (lowest id on ties), in
 *                client order.
 *   shards:s     samples sorted by (label, index) are cut into S = clients*s
 *                contiguous shards; with base = n / S and r = n % S, shard j
 *                has base + (j < r) samples. A random permutation of the
 *                shards gives client c shards perm[c*s .. c*s+s-1].
 *   quantity:b   sizes ~ Dir(b) * n (rounded cut points; an empty client
 *                takes one from the largest), then a random permutation is
 *                cut into chunks of those sizes.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data_int.h"
#include "starling/data.h"

typedef enum { SCHEME_IID, SCHEME_DIRICHLET, SCHEME_SHARDS, SCHEME_QUANTITY } scheme;

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna) */
static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* uniform in (0, 1]: never 0, so log() of it is finite */
static double rng_unit(rng *r)
{
    return (double)((rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* uniform in [0, bound), bound >= 1, without modulo bias */
static uint64_t rng_below(rng *r, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound, x;
    do {
        x = rng_next(r);
    } while (x < threshold);
    return x % bound;
}

/* standard normal, Marsaglia's polar method (the second variate is dropped) */
static double rng_normal(rng *r)
{
    double u, v, s;
    do {
        u = 2.0 * rng_unit(r) - 1.0;
        v = 2.0 * rng_unit(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

/*
 * log of a Gamma(a, 1) variate, a > 0 (Marsaglia and Tsang 2000). Logs keep
 * tiny a usable: Gamma(a) = Gamma(a + 1) * U^(1/a) underflows to 0 for
 * a around 0.01 but its log does not. Clamped to finite values.
 */
static double rng_log_gamma(rng *r, double a)
{
    double boost = 0.0, d, c, x, v, u, lg;
    if (a < 1.0) {
        boost = log(rng_unit(r)) / a;
        a += 1.0;
    }
    d = a - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        u = rng_unit(r);
        if (u < 1.0 - 0.0331 * (x * x) * (x * x))
            break;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            break;
    }
    lg = log(d) + log(v) + boost;
    if (!(lg >= -DBL_MAX))
        lg = -DBL_MAX;
    return lg;
}

/* @p[0..k) ~ Dir(a, ..., a) */
static void rng_dirichlet(rng *r, double a, uint32_t k, double *p)
{
    double top = -DBL_MAX, sum = 0.0;
    for (uint32_t j = 0; j < k; j++) {
        p[j] = rng_log_gamma(r, a);
        if (p[j] > top)
            top = p[j];
    }
    for (uint32_t j = 0; j < k; j++) {
        p[j] = exp(p[j] - top);
        sum += p[j]; /* >= 1: the largest term is exp(0) */
    }
    for (uint32_t j = 0; j < k; j++)
        p[j] /= sum;
}

/* Split @m items by proportions @p[0..k): item counts into @sizes[0..k), summing to @m. */
static void cut_by_proportions(const double *p, uint32_t k, size_t m, size_t *sizes)
{
    double cum = 0.0;
    size_t prev = 0;
    for (uint32_t j = 0; j < k; j++) {
        size_t cut = m;
        cum += p[j];
        if (j + 1 < k) {
            double at = floor(cum * (double)m + 0.5);
            cut = at <= (double)prev ? prev : at >= (double)m ? m : (size_t)at;
        }
        sizes[j] = cut - prev;
        prev = cut;
    }
}

/* the client with the most samples, lowest id on ties */
static uint32_t largest(const size_t *count, uint32_t clients)
{
    uint32_t best = 0;
    for (uint32_t c = 1; c < clients; c++)
        if (count[c] > count[best])
            best = c;
    return best;
}

static void shuffle(rng *r, uint32_t *v, size_t m)
{
    for (size_t i = m; i > 1; i--) {
        size_t j = (size_t)rng_below(r, i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/*
 * @order[0..n) = sample indices sorted by (label, index). Counting sort when
 * the label range is small next to n, else a sort of (label << 32 | index).
 */
static int sort_by_label(const int32_t *labels, size_t n, uint32_t *order)
{
    size_t range = 0;
    for (size_t i = 0; i < n; i++)
        if ((size_t)labels[i] + 1 > range)
            range = (size_t)labels[i] + 1;
    if (range <= 2 * n + 1024) {
        size_t *start = calloc(range + 1, sizeof *start);
        if (start == NULL)
            return SL_ENOMEM;
        for (size_t i = 0; i < n; i++)
            start[(size_t)labels[i] + 1]++;
        for (size_t k = 0; k < range; k++)
            start[k + 1] += start[k];
        for (size_t i = 0; i < n; i++)
            order[start[labels[i]]++] = (uint32_t)i;
        free(start);
        return SL_OK;
    }
    uint64_t *key = malloc(n * sizeof *key);
    if (key == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        key[i] = (uint64_t)(uint32_t)labels[i] << 32 | (uint64_t)i;
    qsort(key, n, sizeof *key, cmp_u64);
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)key[i];
    free(key);
    return SL_OK;
}

static void split_iid(rng *r, size_t n, uint32_t clients, uint32_t *perm, uint32_t *owner)
{
    size_t base = n / clients, extra = n % clients, pos = 0;
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    shuffle(r, perm, n);
    for (uint32_t c = 0; c < clients; c++) {
        size_t size = base + (c < extra);
        for (size_t j = 0; j < size; j++)
            owner[perm[pos++]] = c;
    }
}

static int split_quantity(rng *r, size_t n, uint32_t clients, double beta, uint32_t *perm,
                          uint32_t *owner)
{
    double *p = malloc(clients * sizeof *p);
    size_t *size = malloc(clients * sizeof *size), pos = 0;
    if (p == NULL || size == NULL) {
        free(p);
        free(size);
        return SL_ENOMEM;
    }
    rng_dirichlet(r, beta, clients, p);
    cut_by_proportions(p, clients, n, size);
    for (uint32_t c = 0; c < clients; c++) {
        if (size[c] == 0) { /* clients <= n, so the largest has >= 2 */
            size[largest(size, clients)]--;
            size[c] = 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    shuffle(r, perm, n);
    for (uint32_t c = 0; c < clients; c++)
        for (size_t j = 0; j < size[c]; j++)
            owner[perm[pos++]] = c;
    free(p);
    free(size);
    return SL_OK;
}

static int split_dirichlet(rng *r, const int32_t *labels, size_t n, uint32_t clients, double alpha,
                           uint32_t *order, uint32_t *owner)
{
    double *p = malloc(clients * sizeof *p);
    size_t *size = malloc(clients * sizeof *size);
    size_t *count = calloc(clients, sizeof *count);
    int rc = SL_ENOMEM;
    if (p == NULL || size == NULL || count == NULL || sort_by_label(labels, n, order) != SL_OK)
        goto done;
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        size_t pos = lo;
        for (hi = lo + 1; hi < n && labels[order[hi]] == labels[order[lo]]; hi++)
            ;
        shuffle(r, order + lo, hi - lo);
        rng_dirichlet(r, alpha, clients, p);
        cut_by_proportions(p, clients, hi - lo, size);
        for (uint32_t c = 0; c < clients; c++) {
            for (size_t j = 0; j < size[c]; j++)
                owner[order[pos++]] = c;
            count[c] += size[c];
        }
    }
    for (uint32_t c = 0; c < clients; c++) {
        if (count[c] != 0)
            continue;
        uint32_t from = largest(count, clients); /* has >= 2 since clients <= n */
        uint64_t skip = rng_below(r, count[from]);
        for (size_t i = 0; i < n; i++) {
            if (owner[i] == from && skip-- == 0) {
                owner[i] = c;
                break;
            }
        }
        count[from]--;
        count[c] = 1;
    }
    rc = SL_OK;
done:
    free(p);
    free(size);
    free(count);
    return rc;
}

static int split_shards(rng *r, const int32_t *labels, size_t n, uint32_t clients, size_t s,
                        uint32_t *order, uint32_t *owner)
{
    size_t shards = (size_t)clients * s, base = n / shards, extra = n % shards;
    uint32_t *perm = malloc(shards * sizeof *perm);
    if (perm == NULL || sort_by_label(labels, n, order) != SL_OK) {
        free(perm);
        return SL_ENOMEM;
    }
    for (size_t j = 0; j < shards; j++)
        perm[j] = (uint32_t)j;
    shuffle(r, perm, shards);
    for (size_t k = 0; k < shards; k++) {
        size_t j = perm[k], first = j * base + (j < extra ? j : extra);
        size_t size = base + (j < extra);
        for (size_t t = 0; t < size; t++)
            owner[order[first + t]] = (uint32_t)(k / s);
    }
    free(perm);
    return SL_OK;
}

/* a finite number > 0, the whole of @text */
static int parse_positive(const char *text, double *out)
{
    char *end;
    double v;
    if (text[0] == '\0' || isspace((unsigned char)text[0]))
        return SL_EINVAL;
    errno = 0;
    v = strtod(text, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(v) || !(v > 0.0))
        return SL_EINVAL;
    *out = v;
    return SL_OK;
}

/* a decimal count >= 1, digits only */
static int parse_count(const char *text, size_t *out)
{
    char *end;
    unsigned long long v;
    for (const char *c = text; *c != '\0'; c++)
        if (!isdigit((unsigned char)*c))
            return SL_EINVAL;
    if (text[0] == '\0')
        return SL_EINVAL;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (*end != '\0' || errno == ERANGE || v == 0 || v > SIZE_MAX)
        return SL_EINVAL;
    *out = (size_t)v;
    return SL_OK;
}

static int parse_spec(const char *spec, scheme *kind, double *param, size_t *shards, char *err,
                      size_t errcap)
{
    const char *colon = strchr(spec, ':'), *arg = colon != NULL ? colon + 1 : NULL;
    size_t name = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    if (name == 3 && memcmp(spec, "iid", 3) == 0) {
        if (arg != NULL)
            return sl__data_errf(err, errcap, SL_EINVAL,
                                 "partition '%.64s': iid takes no "
                                 "parameter",
                                 spec);
        *kind = SCHEME_IID;
        return SL_OK;
    }
    if ((name == 9 && memcmp(spec, "dirichlet", 9) == 0) ||
        (name == 8 && memcmp(spec, "quantity", 8) == 0)) {
        if (arg == NULL || parse_positive(arg, param) != SL_OK)
            return sl__data_errf(err, errcap, SL_EINVAL,
                                 "partition '%.64s': the parameter must be a finite number > 0",
                                 spec);
        *kind = spec[0] == 'd' ? SCHEME_DIRICHLET : SCHEME_QUANTITY;
        return SL_OK;
    }
    if (name == 6 && memcmp(spec, "shards", 6) == 0) {
        if (arg == NULL || parse_count(arg, shards) != SL_OK)
            return sl__data_errf(err, errcap, SL_EINVAL,
                                 "partition '%.64s': shards per client must be an integer >= 1",
                                 spec);
        *kind = SCHEME_SHARDS;
        return SL_OK;
    }
    return sl__data_errf(err, errcap, SL_EINVAL,
                         "unknown partition '%.64s' (expected iid, dirichlet:<alpha>, "
                         "shards:<s> or quantity:<beta>)",
                         spec);
}

/* indices are uint32_t, and sorting needs n 64-bit keys */
static int too_many_samples(size_t n)
{
#if SIZE_MAX > UINT32_MAX
    if ((uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return 1;
#endif
    return n > SIZE_MAX / sizeof(uint64_t);
}

/* the lists, from the owner of every sample */
static int build(const uint32_t *owner, size_t n, uint32_t clients, sl_partition **out)
{
    sl_partition *p = calloc(1, sizeof *p);
    size_t *fill = NULL;
    if (p == NULL)
        return SL_ENOMEM;
    p->clients = clients;
    p->count = calloc(clients, sizeof *p->count);
    p->idx = calloc(clients, sizeof *p->idx);
    fill = calloc(clients, sizeof *fill);
    if (p->count == NULL || p->idx == NULL || fill == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++)
        p->count[owner[i]]++;
    for (uint32_t c = 0; c < clients; c++)
        if ((p->idx[c] = malloc((p->count[c] ? p->count[c] : 1) * sizeof **p->idx)) == NULL)
            goto fail;
    for (size_t i = 0; i < n; i++)
        p->idx[owner[i]][fill[owner[i]]++] = (uint32_t)i;
    free(fill);
    *out = p;
    return SL_OK;
fail:
    free(fill);
    sl_partition_free(p);
    return SL_ENOMEM;
}

int sl_partition_create(const int32_t *labels, size_t n, uint32_t classes, const char *spec,
                        uint32_t clients, uint64_t seed, sl_partition **out, char *err,
                        size_t errcap)
{
    scheme kind = SCHEME_IID;
    double param = 0.0;
    size_t shards = 0;
    uint32_t *owner = NULL, *scratch = NULL;
    rng r;
    int rc;

    if (spec == NULL || out == NULL)
        return sl__data_errf(err, errcap, SL_EINVAL, "partition: NULL argument");
    if ((rc = parse_spec(spec, &kind, &param, &shards, err, errcap)) != SL_OK)
        return rc;
    if (clients == 0)
        return sl__data_errf(err, errcap, SL_EINVAL, "partition: clients must be >= 1");
    if (too_many_samples(n))
        return sl__data_errf(err, errcap, SL_EINVAL, "partition: %zu samples is too many", n);
    if (clients > n)
        return sl__data_errf(err, errcap, SL_EINVAL, "partition: %u clients but only %zu samples",
                             (unsigned)clients, n);
    if (kind == SCHEME_SHARDS && shards > n / clients)
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "partition '%.64s': %u clients x %zu shards exceed %zu samples", spec,
                             (unsigned)clients, shards, n);
    if (kind == SCHEME_DIRICHLET || kind == SCHEME_SHARDS) {
        if (labels == NULL)
            return sl__data_errf(err, errcap, SL_EINVAL, "partition '%.64s' needs labels", spec);
        for (size_t i = 0; i < n; i++)
            if (labels[i] < 0 || (uint32_t)labels[i] >= classes)
                return sl__data_errf(err, errcap, SL_EINVAL,
                                     "partition: label %ld of sample %zu is not in [0, %lu)",
                                     (long)labels[i], i, (unsigned long)classes);
    }

    owner = malloc(n * sizeof *owner);
    scratch = malloc(n * sizeof *scratch);
    if (owner == NULL || scratch == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    rng_seed(&r, seed);
    switch (kind) {
    case SCHEME_IID:
        split_iid(&r, n, clients, scratch, owner);
        break;
    case SCHEME_QUANTITY:
        rc = split_quantity(&r, n, clients, param, scratch, owner);
        break;
    case SCHEME_DIRICHLET:
        rc = split_dirichlet(&r, labels, n, clients, param, scratch, owner);
        break;
    case SCHEME_SHARDS:
        rc = split_shards(&r, labels, n, clients, shards, scratch, owner);
        break;
    }
    if (rc == SL_OK)
        rc = build(owner, n, clients, out);
done:
    if (rc == SL_ENOMEM)
        sl__data_errf(err, errcap, rc, "partition: out of memory for %zu samples", n);
    free(owner);
    free(scratch);
    return rc;
}

void sl_partition_free(sl_partition *p)
{
    if (p == NULL)
        return;
    if (p->idx != NULL)
        for (uint32_t c = 0; c < p->clients; c++)
            free(p->idx[c]);
    free(p->idx);
    free(p->count);
    free(p);
}
