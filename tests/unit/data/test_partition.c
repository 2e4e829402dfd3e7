/* Partitioners: invariants of every scheme, their statistics, spec parsing. */
#include <math.h>

#include "../../support/sl_test.h"
#include "starling/data.h"

#define CLASSES       10
#define IID_DIGEST    0x2d3bf3d7daa05a0eull
#define SHARDS_DIGEST 0x4e0f2fc2852f4ee4ull

/* n labels, balanced (i % classes), in an order shuffled by @seed; seed 0: sorted by label */
static int32_t *make_labels(size_t n, uint32_t classes, uint64_t seed)
{
    int32_t *y = malloc((n ? n : 1) * sizeof *y);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++)
        y[i] = seed == 0 ? (int32_t)(i * classes / n) : (int32_t)(i % classes);
    for (size_t i = n; seed != 0 && i > 1; i--) {
        size_t j = (size_t)(sl_test_rand(&seed) % i);
        int32_t t = y[i - 1];
        y[i - 1] = y[j];
        y[j] = t;
    }
    return y;
}

static sl_partition *make(const int32_t *y, size_t n, const char *spec, uint32_t clients,
                          uint64_t seed)
{
    sl_partition *p = NULL;
    char err[256] = "";
    int rc = sl_partition_create(y, n, CLASSES, spec, clients, seed, &p, err, sizeof err);
    if (rc != SL_OK)
        fprintf(stderr, "%s n=%zu clients=%u: %s (%s)\n", spec, n, clients, sl_errname(rc), err);
    assert_int_equal(rc, SL_OK);
    assert_non_null(p);
    return p;
}

/* every sample exactly once, lists ascending, no client empty; returns owner[n] */
static uint32_t *check_invariants(const sl_partition *p, size_t n, uint32_t clients)
{
    uint32_t *owner = malloc((n ? n : 1) * sizeof *owner);
    size_t total = 0;
    assert_non_null(owner);
    for (size_t i = 0; i < n; i++)
        owner[i] = UINT32_MAX;
    assert_int_equal(p->clients, clients);
    for (uint32_t c = 0; c < clients; c++) {
        assert_true(p->count[c] >= 1);
        for (size_t j = 0; j < p->count[c]; j++) {
            uint32_t i = p->idx[c][j];
            assert_true(i < n);
            assert_int_equal(owner[i], UINT32_MAX);
            owner[i] = c;
            if (j > 0)
                assert_true(p->idx[c][j - 1] < i);
        }
        total += p->count[c];
    }
    assert_int_equal(total, n);
    return owner;
}

static int same_split(const sl_partition *a, const sl_partition *b)
{
    if (a->clients != b->clients)
        return 0;
    for (uint32_t c = 0; c < a->clients; c++)
        if (a->count[c] != b->count[c] ||
            memcmp(a->idx[c], b->idx[c], a->count[c] * sizeof(uint32_t)) != 0)
            return 0;
    return 1;
}

static void test_invariants_every_scheme(void **state)
{
    static const char *specs[] = {"iid",           "dirichlet:0.1", "dirichlet:1",
                                  "dirichlet:100", "shards:1",      "shards:2",
                                  "quantity:0.3",  "quantity:10",   "dirichlet:1e-9"};
    static const struct {
        size_t n;
        uint32_t clients;
    } shapes[] = {{1, 1}, {2, 2}, {7, 3}, {10, 10}, {11, 10}, {100, 7}, {1000, 30}, {5000, 100}};
    static const uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00dull};
    (void)state;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        size_t n = shapes[k].n;
        uint32_t clients = shapes[k].clients;
        int32_t *y = make_labels(n, CLASSES, 99 + k);
        for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
            if (strcmp(specs[s], "shards:2") == 0 && 2 * (size_t)clients > n) {
                sl_partition *p = (sl_partition *)0x1;
                assert_int_equal(
                    sl_partition_create(y, n, CLASSES, specs[s], clients, 1, &p, NULL, 0),
                    SL_EINVAL);
                assert_ptr_equal(p, (sl_partition *)0x1);
                continue;
            }
            for (size_t d = 0; d < sizeof seeds / sizeof seeds[0]; d++) {
                sl_partition *a = make(y, n, specs[s], clients, seeds[d]);
                sl_partition *b = make(y, n, specs[s], clients, seeds[d]);
                sl_partition *other = make(y, n, specs[s], clients, seeds[d] + 1);
                free(check_invariants(a, n, clients));
                free(check_invariants(other, n, clients));
                assert_true(same_split(a, b));
                if (n >= 100)
                    assert_false(same_split(a, other));
                sl_partition_free(a);
                sl_partition_free(b);
                sl_partition_free(other);
            }
        }
        free(y);
    }
    sl_partition_free(NULL);
}

/* per-client label fractions; returns the mean over clients of the largest fraction */
static double label_skew(const sl_partition *p, const int32_t *y, double *max_dev)
{
    double sum_max = 0.0;
    *max_dev = 0.0;
    for (uint32_t c = 0; c < p->clients; c++) {
        size_t hist[CLASSES] = {0}, top = 0;
        for (size_t j = 0; j < p->count[c]; j++)
            hist[y[p->idx[c][j]]]++;
        for (int k = 0; k < CLASSES; k++) {
            double frac = (double)hist[k] / (double)p->count[c];
            if (hist[k] > top)
                top = hist[k];
            if (fabs(frac - 1.0 / CLASSES) > *max_dev)
                *max_dev = fabs(frac - 1.0 / CLASSES);
        }
        sum_max += (double)top / (double)p->count[c];
    }
    return sum_max / p->clients;
}

static void test_iid(void **state)
{
    size_t n = 60000;
    int32_t *y = make_labels(n, CLASSES, 7);
    static const uint32_t client_counts[] = {10, 7, 13};
    (void)state;
    for (size_t k = 0; k < 3; k++) {
        uint32_t clients = client_counts[k];
        sl_partition *p = make(y, n, "iid", clients, 5);
        size_t lo = SIZE_MAX, hi = 0;
        double dev;
        free(check_invariants(p, n, clients));
        for (uint32_t c = 0; c < clients; c++) {
            lo = p->count[c] < lo ? p->count[c] : lo;
            hi = p->count[c] > hi ? p->count[c] : hi;
        }
        assert_true(hi - lo <= 1);
        label_skew(p, y, &dev);
        assert_true(dev < 0.03); /* about 4.5 sigma at ~5000 samples a client */
        sl_partition_free(p);
    }
    free(y);
}

static void test_dirichlet_skew(void **state)
{
    size_t n = 60000;
    int32_t *y = make_labels(n, CLASSES, 11);
    double dev, skew;
    sl_partition *p;
    (void)state;
    /* alpha 0.1: most of a client's data is one or two classes */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        p = make(y, n, "dirichlet:0.1", 20, seed);
        free(check_invariants(p, n, 20));
        skew = label_skew(p, y, &dev);
        print_message("dirichlet:0.1 seed %u: mean max-class fraction %.3f\n", (unsigned)seed,
                      skew);
        assert_true(skew > 0.5);
        sl_partition_free(p);
    }
    /* alpha 100: close to iid */
    p = make(y, n, "dirichlet:100", 10, 1);
    skew = label_skew(p, y, &dev);
    print_message("dirichlet:100: mean max-class fraction %.3f, largest deviation %.3f\n", skew,
                  dev);
    assert_true(skew < 0.14);
    assert_true(dev < 0.05);
    sl_partition_free(p);
    /* more clients than classes, and tiny alpha: every client still gets data */
    p = make(y, 2000, "dirichlet:0.01", 300, 3);
    free(check_invariants(p, 2000, 300));
    skew = label_skew(p, y, &dev);
    assert_true(skew > 0.9);
    sl_partition_free(p);
    p = make(y, 500, "dirichlet:1e-300", 40, 3);
    free(check_invariants(p, 500, 40));
    sl_partition_free(p);
    p = make(y, 500, "dirichlet:1e300", 40, 3);
    free(check_invariants(p, 500, 40));
    sl_partition_free(p);
    free(y);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* the documented layout: stable sort by label, S = clients*s shards, shard j has
 * n/S + (j < n%S) samples; each client holds exactly s whole shards */
static void check_shards(const int32_t *y, size_t n, uint32_t clients, size_t s,
                         const sl_partition *p)
{
    size_t shards = clients * s, base = n / shards, extra = n % shards, pos;
    size_t *pos_of = malloc(n * sizeof *pos_of), *filled = calloc(shards, sizeof *filled);
    uint32_t *shard_owner = malloc(shards * sizeof *shard_owner);
    assert_non_null(pos_of);
    assert_non_null(filled);
    assert_non_null(shard_owner);
    uint64_t *key = malloc(n * sizeof *key);
    assert_non_null(key);
    for (size_t i = 0; i < n; i++)
        key[i] = (uint64_t)y[i] << 32 | i;
    qsort(key, n, sizeof *key, cmp_u64);
    for (pos = 0; pos < n; pos++)
        pos_of[(uint32_t)key[pos]] = pos;
    free(key);
    for (size_t j = 0; j < shards; j++)
        shard_owner[j] = UINT32_MAX;
    for (uint32_t c = 0; c < clients; c++) {
        size_t mine = 0;
        for (size_t t = 0; t < p->count[c]; t++) {
            size_t at = pos_of[p->idx[c][t]], j;
            j = at < extra * (base + 1) ? at / (base + 1)
                                        : extra + (at - extra * (base + 1)) / base;
            if (shard_owner[j] == UINT32_MAX) {
                shard_owner[j] = c;
                mine++;
            }
            assert_int_equal(shard_owner[j], c);
            filled[j]++;
        }
        assert_int_equal(mine, s);
    }
    for (size_t j = 0; j < shards; j++)
        assert_int_equal(filled[j], base + (j < extra));
    free(pos_of);
    free(filled);
    free(shard_owner);
}

static void test_shards(void **state)
{
    size_t n = 6000;
    int32_t *sorted = make_labels(n, CLASSES, 0), *shuffled = make_labels(n, CLASSES, 3);
    int32_t *odd = make_labels(6007, CLASSES, 4);
    sl_partition *p;
    int at_most_two = 0;
    (void)state;
    /* FedAvg's pathological split: 600 per class, 200 shards of 30, 2 per client */
    p = make(sorted, n, "shards:2", 100, 1);
    free(check_invariants(p, n, 100));
    check_shards(sorted, n, 100, 2, p);
    for (uint32_t c = 0; c < 100; c++) {
        int seen[CLASSES] = {0}, distinct = 0;
        assert_int_equal(p->count[c], 60);
        for (size_t t = 0; t < p->count[c]; t++)
            distinct += seen[sorted[p->idx[c][t]]]++ == 0;
        at_most_two += distinct <= 2;
    }
    assert_int_equal(at_most_two, 100);
    sl_partition_free(p);
    /* labels in any order: the shards follow the label sort, not the sample order */
    p = make(shuffled, n, "shards:2", 100, 2);
    check_shards(shuffled, n, 100, 2, p);
    sl_partition_free(p);
    /* a remainder: 6007 = 30 shards of 200, the first 7 of 201 */
    p = make(odd, 6007, "shards:3", 10, 3);
    free(check_invariants(p, 6007, 10));
    check_shards(odd, 6007, 10, 3, p);
    sl_partition_free(p);
    /* as many shards as samples */
    p = make(odd, 12, "shards:3", 4, 3);
    check_shards(odd, 12, 4, 3, p);
    sl_partition_free(p);
    free(sorted);
    free(shuffled);
    free(odd);
}

static void test_quantity(void **state)
{
    size_t n = 20000;
    int32_t *y = make_labels(n, CLASSES, 21);
    sl_partition *p;
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        size_t lo = SIZE_MAX, hi = 0, big = 0;
        double dev;
        p = make(y, n, "quantity:0.1", 50, seed);
        free(check_invariants(p, n, 50));
        for (uint32_t c = 0; c < 50; c++) {
            lo = p->count[c] < lo ? p->count[c] : lo;
            if (p->count[c] > hi) {
                hi = p->count[c];
                big = c;
            }
        }
        assert_true(lo >= 1);
        assert_true(hi >= 50 * lo);
        assert_true(hi > 2 * n / 50);
        /* labels stay iid: the largest client looks like the whole set */
        {
            sl_partition one = {1, &p->count[big], &p->idx[big]};
            label_skew(&one, y, &dev);
            assert_true(dev < 0.05);
        }
        sl_partition_free(p);
    }
    p = make(y, n, "quantity:1000", 20, 1);
    for (uint32_t c = 0; c < 20; c++)
        assert_true(p->count[c] > 800 && p->count[c] < 1200);
    sl_partition_free(p);
    /* labels are not needed */
    p = NULL;
    assert_int_equal(sl_partition_create(NULL, 50, 0, "quantity:0.5", 5, 1, &p, NULL, 0), SL_OK);
    free(check_invariants(p, 50, 5));
    sl_partition_free(p);
    assert_int_equal(sl_partition_create(NULL, 50, 0, "iid", 5, 1, &p, NULL, 0), SL_OK);
    free(check_invariants(p, 50, 5));
    sl_partition_free(p);
    free(y);
}

static void expect_rejected(const int32_t *y, size_t n, uint32_t classes, const char *spec,
                            uint32_t clients)
{
    sl_partition *p = (sl_partition *)0x1;
    char err[256] = "";
    int rc = sl_partition_create(y, n, classes, spec, clients, 1, &p, err, sizeof err);
    if (rc != SL_EINVAL)
        fprintf(stderr, "spec \"%s\" clients %u: %s\n", spec ? spec : "(null)", clients,
                sl_errname(rc));
    assert_int_equal(rc, SL_EINVAL);
    assert_ptr_equal(p, (sl_partition *)0x1);
    assert_true(strlen(err) > 0);
}

static void test_rejections(void **state)
{
    static const char *bad[] = {"dirichlet:0",
                                "dirichlet:-1",
                                "dirichlet:nan",
                                "dirichlet:inf",
                                "dirichlet:",
                                "dirichlet",
                                "dirichlet: 1",
                                "dirichlet:1 ",
                                "dirichlet:1e999",
                                "shards:0",
                                "shards:2x",
                                "shards:",
                                "shards:-1",
                                "shards:+2",
                                "shards:1.5",
                                "shards",
                                "iid:3",
                                "iid:",
                                "foo",
                                "",
                                "IID",
                                "quantity:0",
                                "quantity:",
                                "quantity:x",
                                "dirichlet:0.1:2",
                                ":1",
                                "shards:99999999999999999999999"};
    int32_t *y = make_labels(100, CLASSES, 1);
    char err[256] = "";
    sl_partition *p = NULL;
    (void)state;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        expect_rejected(y, 100, CLASSES, bad[k], 4);
    assert_int_equal(sl_partition_create(y, 100, CLASSES, "foo", 4, 1, &p, err, sizeof err),
                     SL_EINVAL);
    assert_non_null(strstr(err, "foo"));
    expect_rejected(y, 100, CLASSES, NULL, 4);
    expect_rejected(y, 100, CLASSES, "iid", 0);
    expect_rejected(y, 100, CLASSES, "iid", 101);
    expect_rejected(y, 0, CLASSES, "iid", 1);
    expect_rejected(y, 100, CLASSES, "shards:26", 4); /* 104 shards of 100 samples */
    expect_rejected(NULL, 100, CLASSES, "dirichlet:1", 4);
    expect_rejected(NULL, 100, CLASSES, "shards:2", 4);
    expect_rejected(y, 100, 5, "dirichlet:1", 4); /* labels up to 9 but 5 classes */
    y[17] = -1;
    expect_rejected(y, 100, CLASSES, "shards:2", 4);
    assert_int_equal(sl_partition_create(y, 100, CLASSES, "iid", 4, 1, NULL, NULL, 0), SL_EINVAL);
    /* accepted edge cases */
    y[17] = 3;
    p = make(y, 100, "shards:25", 4, 1);
    sl_partition_free(p);
    p = make(y, 100, "dirichlet:2.5e-1", 4, 1);
    sl_partition_free(p);
    p = make(y, 100, "quantity:1E2", 100, 1);
    free(check_invariants(p, 100, 100));
    sl_partition_free(p);
    free(y);
}

/* labels far apart (not a dense range) take the sorting fallback */
static void test_sparse_labels(void **state)
{
    int32_t y[12] = {5000001, 3, 5000000, 3, 7, 5000001, 0, 5000000, 7, 3, 0, 5000001};
    sl_partition *p = NULL;
    (void)state;
    assert_int_equal(sl_partition_create(y, 12, 5000002, "shards:1", 6, 9, &p, NULL, 0), SL_OK);
    free(check_invariants(p, 12, 6));
    check_shards(y, 12, 6, 1, p);
    sl_partition_free(p);
    assert_int_equal(sl_partition_create(y, 12, 5000002, "dirichlet:0.5", 5, 9, &p, NULL, 0),
                     SL_OK);
    free(check_invariants(p, 12, 5));
    sl_partition_free(p);
}

static uint64_t digest(const sl_partition *p)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t c = 0; c < p->clients; c++)
        for (size_t j = 0; j < p->count[c]; j++)
            h = (h ^ (p->idx[c][j] * 2654435761u + c)) * 1099511628211ull;
    return h;
}

/* integer-only schemes give the same split on every platform (x86-64, aarch64, armhf) */
static void test_same_split_everywhere(void **state)
{
    int32_t *y = make_labels(1000, CLASSES, 5);
    sl_partition *p;
    (void)state;
    p = make(y, 1000, "iid", 7, 42);
    print_message("iid digest %016llx\n", (unsigned long long)digest(p));
    assert_true(digest(p) == IID_DIGEST);
    sl_partition_free(p);
    p = make(y, 1000, "shards:3", 7, 42);
    print_message("shards digest %016llx\n", (unsigned long long)digest(p));
    assert_true(digest(p) == SHARDS_DIGEST);
    sl_partition_free(p);
    p = make(y, 1000, "dirichlet:0.5", 7, 42);
    print_message("dirichlet digest %016llx (not pinned)\n", (unsigned long long)digest(p));
    sl_partition_free(p);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariants_every_scheme),
        cmocka_unit_test(test_iid),
        cmocka_unit_test(test_dirichlet_skew),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_quantity),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_sparse_labels),
        cmocka_unit_test(test_same_split_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
