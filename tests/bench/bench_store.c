/*
 * bench_store.c - `starling bench store`: durable 40 KB update inserts per
 * second with synchronous=FULL: one commit per insert against group commit
 * with 1, 8 and 64 concurrent writers, in one run on the same disk; and
 * upload sessions created per second (8 writers, group commit) in a store
 * that holds no live session against one that holds many (a create counts
 * and replaces the device's own sessions: by index, so about as fast); and
 * the operators' device list at the end of a large fleet: a page by offset
 * (with the fleet's count, as GET /v1/devices?offset= answers) against a
 * page after a device id (GET /v1/devices?after=).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "starling/store.h"

#define FRAME (40 * 1024)

typedef struct run_cfg {
    const char *name;
    uint32_t writers;
    uint32_t max_batch; /* 1: every insert is its own transaction and fsync */
} run_cfg;

typedef struct worker {
    sl_store *s;
    int64_t round_id;
    int64_t *devices;
    uint32_t first, count;
    int failures;
} worker;

static void make_digest(uint32_t i, uint8_t *sha)
{
    for (int j = 0; j < 32; j++)
        sha[j] = (uint8_t)(i >> (8 * (j % 4))) ^ (uint8_t)(j * 37);
}

static void *work(void *arg)
{
    worker *w = arg;
    uint8_t *frame = malloc(FRAME), sha[32];
    for (uint32_t i = 0; i < FRAME; i++)
        frame[i] = (uint8_t)(i * 131 + w->first);
    for (uint32_t i = w->first; i < w->first + w->count; i++) {
        sl_store_receipt r;
        sl_update_put u;
        make_digest(i, sha);
        frame[0] = (uint8_t)i;
        u = (sl_update_put){w->round_id, w->devices[i], frame, FRAME, 1, sha, 0};
        if (sl_store_put_update(w->s, &u, 60000, &r) != SL_OK || r.duplicate)
            w->failures++;
    }
    free(frame);
    return NULL;
}

/* Enrol @n devices from @threads writers so set-up itself is group-committed. */
typedef struct enrol_job {
    sl_store *s;
    int64_t *devices;
    uint32_t first, count;
} enrol_job;

static void *enrol(void *arg)
{
    enrol_job *j = arg;
    for (uint32_t i = j->first; i < j->first + j->count; i++) {
        uint8_t key[8];
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)(((uint64_t)i + 1) >> (8 * b));
        if (sl_store_enrol_device(j->s, key, sizeof key, "{}", &j->devices[i]) != SL_OK)
            abort();
    }
    return NULL;
}

/* A new store at @path (group commits of up to @max_batch) with a task, its round 1 training,
 * and @n devices enrolled from 16 threads into @devices; its round's id in *@round_id. */
static sl_store *bench_store(const char *path, uint32_t max_batch, int64_t *devices, uint32_t n,
                             int64_t *round_id)
{
    char err[256];
    sl_store_options o;
    sl_store *s;
    sl_round_record r;
    pthread_t th[16];
    enrol_job jobs[16];
    uint32_t per = n / 16;
    int64_t task;

    unlink(path);
    sl_store_options_default(&o);
    o.path = path;
    o.max_batch = max_batch;
    if (devices == NULL || sl_store_open(&o, &s, err, sizeof err) != SL_OK) {
        fprintf(stderr, "bench store: %s\n", devices ? err : "out of memory");
        exit(1);
    }
    if (sl_store_create_task(s, "bench", "{}", "w 10240\n", &task) != SL_OK)
        abort();
    memset(&r, 0, sizeof r);
    r.task_id = task;
    r.round_no = 1;
    r.base_version = 1;
    r.state = SL_ROUND_TRAINING;
    if (sl_store_create_round(s, &r) != SL_OK)
        abort();
    for (uint32_t k = 0; k < 16; k++) {
        jobs[k] = (enrol_job){s, devices, k * per, k == 15 ? n - 15 * per : per};
        pthread_create(&th[k], NULL, enrol, &jobs[k]);
    }
    for (uint32_t k = 0; k < 16; k++)
        pthread_join(th[k], NULL);
    *round_id = r.id;
    return s;
}

static double run(const char *dir, const run_cfg *cfg, uint32_t inserts, uint64_t *commits_out)
{
    char path[1024];
    sl_store *s;
    int64_t *devices = malloc(inserts * sizeof *devices), round_id;
    pthread_t th[64];
    worker w[64];
    int64_t t0, t1;
    uint32_t per;

    snprintf(path, sizeof path, "%s/bench-%s-%u.db", dir, cfg->name, cfg->writers);
    s = bench_store(path, cfg->max_batch, devices, inserts, &round_id);
    per = inserts / cfg->writers;
    t0 = sl_bench_now_ns();
    for (uint32_t k = 0; k < cfg->writers; k++) {
        w[k] = (worker){s, round_id, devices, k * per, per, 0};
        pthread_create(&th[k], NULL, work, &w[k]);
    }
    for (uint32_t k = 0; k < cfg->writers; k++) {
        pthread_join(th[k], NULL);
        if (w[k].failures)
            fprintf(stderr, "bench store: %d failed inserts\n", w[k].failures);
    }
    t1 = sl_bench_now_ns();
    *commits_out = 0;
    {
        uint64_t n = 0;
        sl_store_count_updates(s, round_id, &n);
        if (n != (uint64_t)per * cfg->writers)
            fprintf(stderr, "bench store: %llu rows, expected %u\n", (unsigned long long)n,
                    per * cfg->writers);
    }
    sl_store_close(s);
    unlink(path);
    free(devices);
    return (double)per * cfg->writers / ((double)(t1 - t0) * 1e-9);
}

/* ---- upload sessions: creates/s beside many live sessions ------------------ */

typedef struct creator {
    sl_store *s;
    int64_t round_id;
    const int64_t *devices;
    uint32_t first, count;
    int failures;
} creator;

static void *create_sessions(void *arg)
{
    creator *c = arg;
    for (uint32_t i = c->first; i < c->first + c->count; i++) {
        sl_upload_record u;
        memset(&u, 0, sizeof u);
        snprintf(u.id, sizeof u.id, "bench-%u", i);
        u.device_id = c->devices[i];
        u.round_id = c->round_id;
        u.length = FRAME;
        make_digest(i, u.sha256);
        u.num_samples = 1;
        u.expires_at_ms = INT64_MAX / 2;
        if (sl_store_create_upload(c->s, &u) != SL_OK)
            c->failures++;
    }
    return NULL;
}

/* @n sessions of @FRAME bytes from 8 writers, for devices[first ..]: creates per second. */
static double create_phase(sl_store *s, int64_t round_id, const int64_t *devices, uint32_t first,
                           uint32_t n)
{
    pthread_t th[8];
    creator c[8];
    uint32_t per = n / 8;
    int64_t t0 = sl_bench_now_ns(), t1;
    for (uint32_t k = 0; k < 8; k++) {
        c[k] = (creator){s, round_id, devices, first + k * per, k == 7 ? n - 7 * per : per, 0};
        pthread_create(&th[k], NULL, create_sessions, &c[k]);
    }
    for (uint32_t k = 0; k < 8; k++) {
        pthread_join(th[k], NULL);
        if (c[k].failures) {
            fprintf(stderr, "bench store: %d failed upload creates\n", c[k].failures);
            exit(1);
        }
    }
    t1 = sl_bench_now_ns();
    return (double)n / ((double)(t1 - t0) * 1e-9);
}

/* Creates/s in an empty store (@rates[0]) and, in the same store, after @live sessions of
 * other devices are open (@rates[1]). */
static void run_uploads(const char *dir, uint32_t creates, uint32_t live, double rates[2])
{
    char path[1024];
    uint32_t total = 2 * creates + live;
    int64_t *devices = malloc(total * sizeof *devices), round_id;
    sl_store *s;

    snprintf(path, sizeof path, "%s/bench-uploads.db", dir);
    s = bench_store(path, 512, devices, total, &round_id);
    rates[0] = create_phase(s, round_id, devices, 0, creates);
    (void)create_phase(s, round_id, devices, creates, live); /* the fleet's open sessions */
    rates[1] = create_phase(s, round_id, devices, creates + live, creates);
    sl_store_close(s);
    unlink(path);
    free(devices);
}

/* ---- the device list: the last page of a large fleet ------------------------ */

static int count_page(void *ctx, const sl_device_summary *d)
{
    (void)d;
    ++*(uint32_t *)ctx;
    return 0;
}

/* Milliseconds for one page of @limit devices, the median of 9: by offset (with the count,
 * @ms[0]) and after an id (@ms[1]), both at the end of a fleet of @n; and at its start, by
 * offset (@ms[2]). Each page's devices are checked. */
static void run_device_pages(const char *dir, uint32_t n, uint32_t limit, double ms[3])
{
    char path[1024];
    int64_t *devices = malloc(n * sizeof *devices), round_id;
    sl_store *s;

    snprintf(path, sizeof path, "%s/bench-devices.db", dir);
    s = bench_store(path, 512, devices, n, &round_id);
    for (int m = 0; m < 3; m++) {
        double t[9];
        for (int k = 0; k < 9; k++) {
            uint32_t got = 0;
            uint64_t total = 0;
            int64_t t0 = sl_bench_now_ns();
            int rc =
                m == 1 ? sl_store_list_devices(s, (int64_t)(n - limit), 0, limit, count_page, &got)
                       : sl_store_count_devices(s, &total);
            if (rc == SL_OK && m != 1)
                rc = sl_store_list_devices(s, 0, m == 0 ? n - limit : 0, limit, count_page, &got);
            t[k] = (double)(sl_bench_now_ns() - t0) * 1e-6;
            if (rc != SL_OK || got != limit || (m != 1 && total != n)) {
                fprintf(stderr, "bench store: a page of %u devices read %u\n", limit, got);
                exit(1);
            }
        }
        for (int a = 1; a < 9; a++) /* insertion sort: the median */
            for (int b = a; b > 0 && t[b] < t[b - 1]; b--) {
                double x = t[b];
                t[b] = t[b - 1];
                t[b - 1] = x;
            }
        ms[m] = t[4];
    }
    sl_store_close(s);
    unlink(path);
    free(devices);
}

int sl_bench_store(int argc, char **argv)
{
    static const run_cfg cfgs[] = {
        {"one-commit-per-insert", 1, 1}, {"one-commit-per-insert", 64, 1}, {"group-commit", 1, 512},
        {"group-commit", 8, 512},        {"group-commit", 64, 512},
    };
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int json = 0;
    uint32_t inserts = 4096, creates = 2048, live = 8192, fleet = 1000000;
    double rate[5], base, up[2], pages[3];

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            inserts = 512, creates = 256, live = 1024, fleet = 20000;
        else {
            fprintf(stderr, "usage: starling bench store [--json] [--quick] [--dir DIR]\n");
            return 2;
        }
    }
    for (size_t c = 0; c < 5; c++) {
        uint64_t commits;
        /* the per-insert baseline is slow: fewer inserts, same rate */
        uint32_t n = cfgs[c].max_batch == 1 ? inserts / 4 : inserts;
        rate[c] = run(dir, &cfgs[c], n, &commits);
    }
    run_uploads(dir, creates, live, up);
    run_device_pages(dir, fleet, 100, pages);
    base = rate[1];
    if (json)
        printf("[\n");
    else
        printf("starling bench store: durable %d KB updates/s (synchronous=FULL, WAL) in %s\n",
               FRAME / 1024, dir);
    for (size_t c = 0; c < 5; c++) {
        if (json)
            printf("%s{\"mode\":\"%s\",\"writers\":%u,\"updates_per_s\":%.1f,"
                   "\"vs_one_commit_per_insert\":%.2f}",
                   c ? ",\n" : "", cfgs[c].name, cfgs[c].writers, rate[c], rate[c] / base);
        else
            printf("  %-22s writers %3u  %9.1f updates/s  %6.1fx one-commit-per-insert\n",
                   cfgs[c].name, cfgs[c].writers, rate[c], rate[c] / base);
    }
    if (json)
        printf(",\n{\"mode\":\"upload-creates\",\"writers\":8,\"live_sessions\":0,"
               "\"creates_per_s\":%.1f},\n{\"mode\":\"upload-creates\",\"writers\":8,"
               "\"live_sessions\":%u,\"creates_per_s\":%.1f,\"vs_no_live_sessions\":%.2f}"
               ",\n{\"mode\":\"device-pages\",\"devices\":%u,\"limit\":100,"
               "\"first_by_offset_ms\":%.3f,\"last_by_offset_ms\":%.3f,\"last_after_id_ms\":%.3f,"
               "\"offset_vs_after\":%.1f}\n]\n",
               up[0], live, up[1], up[1] / up[0], fleet, pages[2], pages[0], pages[1],
               pages[0] / pages[1]);
    else
        printf("upload sessions of %d KB created/s (8 writers, group commit):\n"
               "  beside no live session   %9.1f creates/s\n"
               "  beside %5u live ones   %9.1f creates/s  %6.2fx\n",
               FRAME / 1024, up[0], live, up[1], up[1] / up[0]);
    if (!json)
        printf("a page of 100 devices in a fleet of %u (median of 9):\n"
               "  the first, by offset (and the fleet's count) %9.3f ms\n"
               "  the last, by offset (and the fleet's count)  %9.3f ms\n"
               "  the last, after a device id                 %9.3f ms  %6.1fx faster\n",
               fleet, pages[2], pages[0], pages[1], pages[0] / pages[1]);
    return 0;
}
