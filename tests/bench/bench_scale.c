/*
 * bench_scale.c - `starling bench scale --simulate`: the coordinator's engine
 * and store with a simulated clock and simulated devices, no HTTP, at fleet
 * size: N enrolled devices (default 1,000,000), K reports a round (default
 * 10,000). Prints, per round, the coordinator's memory, the time the round's
 * close took (aggregation, the new model version and the round's record in
 * one transaction) and the store's size.
 *
 * Each round: a random 2K of the enrolled devices check in during the
 * selection window; at its end the engine selects 1.3K of them; the selected
 * check in again, and 80% upload (a sparse update of the model, top-k 1%
 * values), from 8 threads as the server's workers would, each upload durable
 * before its answer; the K-th report closes the round at the next tick.
 * The store lives under --dir (default: /dev/shm when writable, else
 * $TMPDIR): this measures memory and the round's cost, not a disk.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_fl_int.h"
#include "bench_scale_int.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/round.h"
#include "starling/store.h"

#define THREADS 8
#define T0_NS   (1764465820000LL * 1000000LL)

typedef struct scale_opts {
    size_t devices, per_round, params;
    int rounds, json;
    double density;
    sl_value_mode values;
    const char *dir;
} scale_opts;

typedef struct sim {
    const scale_opts *o;
    sl_clock_manual clock;
    sl_store *store;
    sl_engine *engine;
    sl_layout *layout;
    int64_t task;
    int64_t *devices;
} sim;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The process's resident set and its peak, in bytes (/proc/self/status). */
static void rss(uint64_t *now, uint64_t *peak)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *now = *peak = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            *now = kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            *peak = kb * 1024;
    }
    fclose(f);
}

static uint64_t file_size(const char *dir, const char *name)
{
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- enrolment, from THREADS threads (the store's group commit batches them) ----------- */

typedef struct enrol_job {
    sim *s;
    size_t from, to;
    int rc;
} enrol_job;

static void *enrol_thread(void *arg)
{
    enrol_job *j = arg;
    for (size_t i = j->from; i < j->to && j->rc == SL_OK; i++) {
        uint8_t key[8];
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)((i + 1) >> (8 * b));
        j->rc = sl_store_enrol_device(j->s->store, key, sizeof key, "{}", &j->s->devices[i]);
    }
    return NULL;
}

/* ---- uploads, from THREADS threads -------------------------------------------------------- */

typedef struct upload_job {
    sim *s;
    const size_t *who; /* indices into s->devices */
    size_t n;
    int64_t round_id, version;
    uint64_t seed;
    uint64_t accepted;
    double slowest_ms; /* the slowest answer: the one that closed the round waits for the close */
    int rc;
} upload_job;

static int make_update(const sim *s, size_t i, int64_t round_id, int64_t version, uint64_t seed,
                       void **frame, size_t *len)
{
    return sl__bench_sparse_update(s->layout, s->o->density, s->o->values, i, round_id, version,
                                   seed, frame, len);
}

int sl__bench_sparse_update(const sl_layout *layout, double density, sl_value_mode values, size_t i,
                            int64_t round_id, int64_t version, uint64_t seed, void **frame,
                            size_t *len)
{
    sl_frame_header h = {SL_FRAME_VERSION,  SL_FRAME_UPDATE,    0, 0,
                         (uint64_t)version, (uint64_t)round_id, 0};
    size_t nt = sl_layout_tensors(layout);
    sl_sparse_tensor *st = calloc(nt, sizeof *st);
    uint64_t r = seed ^ (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)round_id;
    int rc = st != NULL ? SL_OK : SL_ENOMEM;
    for (size_t t = 0; t < nt && rc == SL_OK; t++) {
        size_t d = (size_t)sl_layout_tensor(layout, t)->count;
        size_t k = (size_t)ceil(density * (double)d), n = 0;
        uint32_t *idx = malloc((k ? k : 1) * sizeof *idx), pos = 0;
        float *val = malloc((k ? k : 1) * sizeof *val);
        if (idx == NULL || val == NULL) {
            free(idx);
            free(val);
            rc = SL_ENOMEM;
            break;
        }
        while (n < k) { /* ascending positions, gaps averaging d / k */
            pos += 1 + (uint32_t)(next_rand(&r) % (2 * (d / (k ? k : 1)) + 1));
            if (pos >= d)
                break;
            idx[n] = pos;
            val[n++] = (float)((double)(next_rand(&r) >> 11) * 0x1p-53 - 0.5) * 0.01f;
        }
        st[t].n = n;
        st[t].idx = idx;
        st[t].val = val;
    }
    if (rc == SL_OK) {
        sl_encode_params p;
        sl_encode_params_default(&p);
        p.values = values;
        p.flat = 1; /* top-k over the whole model, as the product's default */
        rc = sl_frame_encode_update(layout, &h, st, &p, NULL, frame, len);
    }
    for (size_t t = 0; st != NULL && t < nt; t++) {
        free((void *)st[t].idx);
        free((void *)st[t].val);
    }
    free(st);
    return rc;
}

static void *upload_thread(void *arg)
{
    upload_job *j = arg;
    for (size_t k = 0; k < j->n && j->rc == SL_OK; k++) {
        size_t i = j->who[k];
        void *frame = NULL;
        size_t len = 0;
        uint8_t sha[32];
        sl_accept_result res;
        j->rc = make_update(j->s, i, j->round_id, j->version, j->seed, &frame, &len);
        if (j->rc != SL_OK)
            break;
        for (int b = 0; b < 32; b++) /* unique per (device, round): the engine's idempotency key */
            sha[b] =
                (uint8_t)(((uint64_t)i * 31 + (uint64_t)j->round_id * 7 + (uint64_t)b) >> (b % 8));
        {
            double t0 = now_s(), ms;
            j->rc = sl_engine_accept(j->s->engine, j->round_id, j->s->devices[i], frame, len,
                                     (uint32_t)(50 + i % 200), sha, &res);
            ms = (now_s() - t0) * 1e3;
            if (ms > j->slowest_ms)
                j->slowest_ms = ms;
        }
        j->accepted += j->rc == SL_OK && res.accepted;
        free(frame);
    }
    return NULL;
}

static void sim_at(sim *s, int64_t ms)
{
    int64_t now = s->clock.wall_ns / 1000000;
    if (ms > now)
        sl_clock_manual_advance(&s->clock, (ms - now) * 1000000);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: starling bench scale --simulate [--devices N] [--per-round K] [--rounds R]\n"
            "                            [--params P] [--density D] [--values V] [--dir DIR]\n"
            "                            [--json]\n"
            "  the engine and the store with a simulated clock and simulated devices, no HTTP:\n"
            "  N enrolled devices (default 1000000), K reports close a round (default 10000),\n"
            "  R rounds (default 5), a model of P parameters (default 44426, lenet5's) and\n"
            "  updates of density D (default 0.01) with V values (default ternary, the\n"
            "  coordinator's default; fp32, fp16, bf16, int8, sign); per round: the memory, the\n"
            "  round's close time and the store's size. --dir: where the store goes (default\n"
            "  /dev/shm when writable, else $TMPDIR; removed afterwards)\n"
            "       starling bench scale --replicas [--seconds S] [--threads T] [--devices N]\n"
            "                            [--lease MS] [--json]\n"
            "  durable uploads/s on SQLite and on PostgreSQL with 1, 2 and 3 replicas, side by\n"
            "  side, and the time the replicas take to replace a leader that stopped\n");
    return 2;
}

static int parse_size(const char *s, size_t lo, size_t hi, size_t *out)
{
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi || s[0] == '-')
        return -1;
    *out = (size_t)v;
    return 0;
}

/* A density in (0, 1], the whole argument a number. */
static int parse_density(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0 && v <= 1))
        return -1;
    *out = v;
    return 0;
}

int sl_bench_scale(int argc, char **argv)
{
    scale_opts o = {1000000, 10000, 44426, 5, 0, 0.01, SL_VALUE_TERNARY, NULL};
    int simulate = 0, rc = SL_OK, status = 0;
    char dir[1024], path[1200], err[256], layout[128];
    sim s;
    sl_store_options so;
    sl_engine_options eo;
    uint64_t rss0, peak0, rss1, peak1, db_prev = 0, db_enrolled = 0, rounds_done = 0;
    uint64_t rss_enrolled = 0, known_all = 0;
    double t;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t x;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 0;
        } else if (strcmp(a, "--replicas") == 0) {
            return sl__bench_replicas(argc, argv);
        } else if (strcmp(a, "--simulate") == 0) {
            simulate = 1;
        } else if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (v == NULL) {
            fprintf(stderr, "starling bench scale: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--devices") == 0 && parse_size(v, 10, 100000000, &o.devices) == 0) {
            i++;
        } else if (strcmp(a, "--per-round") == 0 && parse_size(v, 1, 10000000, &o.per_round) == 0) {
            i++;
        } else if (strcmp(a, "--rounds") == 0 && parse_size(v, 1, 100000, &x) == 0) {
            o.rounds = (int)x, i++;
        } else if (strcmp(a, "--params") == 0 && parse_size(v, 16, 100000000, &o.params) == 0) {
            i++;
        } else if (strcmp(a, "--density") == 0 && parse_density(v, &o.density) == 0) {
            i++;
        } else if (strcmp(a, "--values") == 0 && sl_value_mode_parse(v, &o.values) == SL_OK) {
            i++;
        } else if (strcmp(a, "--dir") == 0) {
            o.dir = v, i++;
        } else {
            fprintf(stderr, "starling bench scale: bad option or value: %s%s%s\n", a, v ? " " : "",
                    v ? v : "");
            return 2;
        }
    }
    if (!simulate) {
        fprintf(stderr, "starling bench scale: --simulate or --replicas\n");
        return usage();
    }
    if (o.per_round * 2 > o.devices) {
        fprintf(stderr, "starling bench scale: --per-round %zu needs at least %zu devices\n",
                o.per_round, o.per_round * 2);
        return 2;
    }
    if (o.dir == NULL)
        o.dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                              : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(dir, sizeof dir, "%s/starling-scale.XXXXXX", o.dir);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "starling bench scale: cannot make a folder under %s: %s\n", o.dir,
                strerror(errno));
        return 1;
    }
    memset(&s, 0, sizeof s);
    s.o = &o;
    sl_clock_manual_init(&s.clock, 0, T0_NS);
    snprintf(path, sizeof path, "%s/starling.db", dir);
    sl_store_options_default(&so);
    so.path = path;
    so.clock = &s.clock.clock;
    sl_engine_options_default(&eo);
    eo.clock = &s.clock.clock;
    rss(&rss0, &peak0);
    fprintf(stderr,
            "bench scale --simulate: %zu devices, %zu reports a round, %d rounds, %zu "
            "parameters, updates of density %g with %s values; store %s\n",
            o.devices, o.per_round, o.rounds, o.params, o.density, sl_value_mode_name(o.values),
            path);
    if ((rc = sl_store_open(&so, &s.store, err, sizeof err)) != SL_OK ||
        (rc = sl_engine_open(s.store, &eo, &s.engine, err, sizeof err)) != SL_OK) {
        fprintf(stderr, "starling bench scale: %s\n", err);
        status = 1;
        goto done;
    }
    snprintf(layout, sizeof layout, "w %zu\nb 10\n", o.params - 10);
    s.devices = malloc(o.devices * sizeof *s.devices);
    if (s.devices == NULL || sl_layout_parse(layout, strlen(layout), &s.layout) != SL_OK) {
        status = 1;
        goto done;
    }
    { /* the task: K reports, 1.3x over-selection, 80% quorum */
        char cfg[512];
        size_t n = (size_t)sl_layout_params(s.layout);
        float *w = calloc(n, sizeof *w);
        void *frame = NULL;
        size_t len = 0;
        snprintf(cfg, sizeof cfg,
                 "{\"name\":\"scale\",\"target\":%zu,\"quorum\":0.8,\"over_selection\":1.3,"
                 "\"selection_window_ms\":10000,\"report_deadline_ms\":600000,\"rounds\":%d}",
                 o.per_round, o.rounds);
        rc = w == NULL ? SL_ENOMEM : sl_frame_encode_model(s.layout, w, 1, 3, &frame, &len);
        if (rc == SL_OK)
            rc = sl_engine_create_task(s.engine, cfg, layout, frame, len, &s.task, err, sizeof err);
        free(frame);
        free(w);
        if (rc != SL_OK) {
            fprintf(stderr, "starling bench scale: the task: %s (%s)\n", err, sl_strerror(rc));
            status = 1;
            goto done;
        }
    }
    t = now_s();
    {
        pthread_t th[THREADS];
        enrol_job jobs[THREADS];
        for (int k = 0; k < THREADS; k++) {
            jobs[k].s = &s;
            jobs[k].from = o.devices * (size_t)k / THREADS;
            jobs[k].to = o.devices * (size_t)(k + 1) / THREADS;
            jobs[k].rc = SL_OK;
            pthread_create(&th[k], NULL, enrol_thread, &jobs[k]);
        }
        for (int k = 0; k < THREADS; k++) {
            pthread_join(th[k], NULL);
            if (jobs[k].rc != SL_OK)
                rc = jobs[k].rc;
        }
    }
    if (rc != SL_OK) {
        fprintf(stderr, "starling bench scale: enrolment: %s\n", sl_strerror(rc));
        status = 1;
        goto done;
    }
    rss(&rss1, &peak1);
    db_prev = db_enrolled = file_size(dir, "starling.db") + file_size(dir, "starling.db-wal");
    rss_enrolled = rss1;
    fprintf(stderr, "enrolled %zu devices in %.1f s; store %.1f MB; resident %.1f MB\n", o.devices,
            now_s() - t,
            (double)(file_size(dir, "starling.db") + file_size(dir, "starling.db-wal")) / 1e6,
            (double)rss1 / 1e6);
    if (o.json)
        printf("{\"devices\": %zu, \"per_round\": %zu, \"params\": %zu, \"density\": %g, "
               "\"rounds\": [",
               o.devices, o.per_round, o.params, o.density);
    else
        printf("%5s %9s %9s %9s %9s %11s %12s %11s %12s %12s\n", "round", "checkins", "known",
               "selected", "reports", "round s", "close ms", "RSS MB", "store MB", "store +MB");
    {
        uint64_t seed = 12345;
        size_t cap = o.per_round * 2;
        size_t *who = malloc(cap * 2 * sizeof *who), *sel = malloc(cap * sizeof *sel);
        size_t *carry = malloc(cap * sizeof *carry), ncarry = 0, known = 0;
        uint8_t *seen = calloc(o.devices, 1);
        sl_checkin_info info;
        memset(&info, 0, sizeof info);
        info.num_samples = 100;
        if (who == NULL || sel == NULL || seen == NULL || carry == NULL)
            rc = SL_ENOMEM;
        for (int round = 0; round < o.rounds && rc == SL_OK; round++) {
            sl_task_status st;
            sl_checkin_result r;
            size_t nwho = 0, nsel = 0, nup;
            uint64_t accepted = 0, db, rn, pk;
            int64_t next;
            double t0 = now_s(), close_ms = 0;
            sl_engine_tick(s.engine, &next); /* opens the round */
            sl_engine_task_status(s.engine, s.task, &st);
            /* 2K distinct devices check in during the selection window: those the last round
             * did not select (they wait for this one, and the engine has them in its pool
             * already), then random ones */
            for (size_t k = 0; k < ncarry && rc == SL_OK; k++) {
                seen[carry[k]] |= 1;
                who[nwho++] = carry[k];
                rc = sl_engine_checkin(s.engine, s.task, s.devices[carry[k]], &info, &r);
            }
            while (nwho < cap && rc == SL_OK) {
                size_t i = (size_t)(next_rand(&seed) % o.devices);
                if (seen[i] & 1)
                    continue;
                known += !(seen[i] & 2);
                seen[i] |= 3; /* this round; ever */
                who[nwho++] = i;
                if ((rc = sl_engine_checkin(s.engine, s.task, s.devices[i], &info, &r)) != SL_OK)
                    break;
            }
            for (size_t k = 0; k < nwho; k++)
                seen[who[k]] &= 2;
            sim_at(&s, st.round.select_deadline_ms);
            sl_engine_tick(s.engine, &next);
            ncarry = 0;
            for (size_t k = 0; k < nwho && rc == SL_OK; k++) { /* who was selected */
                rc = sl_engine_checkin(s.engine, s.task, s.devices[who[k]], &info, &r);
                if (rc == SL_OK && r.selected)
                    sel[nsel++] = who[k];
                else if (rc == SL_OK && ncarry < cap)
                    carry[ncarry++] = who[k];
            }
            sl_engine_task_status(s.engine, s.task, &st);
            /* 80% of the selected upload: at least K when 1.3K were selected */
            nup = 0;
            for (size_t k = 0; k < nsel; k++)
                if (next_rand(&seed) % 10 < 8)
                    sel[nup++] = sel[k];
            if (rc == SL_OK) {
                pthread_t th[THREADS];
                upload_job jobs[THREADS];
                for (int k = 0; k < THREADS; k++) {
                    size_t from = nup * (size_t)k / THREADS, to = nup * (size_t)(k + 1) / THREADS;
                    jobs[k] = (upload_job){&s,
                                           sel + from,
                                           to - from,
                                           st.round.id,
                                           st.model_version,
                                           seed + (uint64_t)k,
                                           0,
                                           0.0,
                                           SL_OK};
                    pthread_create(&th[k], NULL, upload_thread, &jobs[k]);
                }
                for (int k = 0; k < THREADS; k++) {
                    pthread_join(th[k], NULL);
                    accepted += jobs[k].accepted;
                    if (jobs[k].slowest_ms > close_ms)
                        close_ms = jobs[k].slowest_ms;
                    if (jobs[k].rc != SL_OK)
                        rc = jobs[k].rc;
                }
            }
            if (rc != SL_OK)
                break;
            /* the K-th report closed the round inside its accept (aggregation, the new version
             * and the round's record in one transaction): the slowest answer; a tick, should
             * the close have failed there, retries it (and is counted if slower) */
            {
                double c0, ms;
                sl_round_record now_r;
                /* fewer than K reported (the 20% who dropped were more than 0.3K): the round
                 * closes at its deadline, with its quorum */
                if (sl_store_get_round(s.store, st.round.id, &now_r) == SL_OK &&
                    now_r.state == SL_ROUND_TRAINING)
                    sim_at(&s, now_r.report_deadline_ms);
                c0 = now_s();
                rc = sl_engine_tick(s.engine, &next);
                ms = (now_s() - c0) * 1e3;
                if (ms > close_ms)
                    close_ms = ms;
            }
            {
                sl_round_record rec;
                if (sl_store_get_round(s.store, st.round.id, &rec) != SL_OK ||
                    rec.state != SL_ROUND_CLOSED) {
                    fprintf(stderr, "round %d did not close (%zu selected, %" PRIu64 " accepted)\n",
                            round + 1, nsel, accepted);
                    status = 1;
                    break;
                }
            }
            rss(&rn, &pk);
            db = file_size(dir, "starling.db") + file_size(dir, "starling.db-wal");
            if (o.json)
                printf("%s{\"round\": %d, \"checkins\": %zu, \"known\": %zu, \"selected\": %zu, "
                       "\"reports\": "
                       "%" PRIu64 ", \"round_s\": %.3f, \"close_ms\": %.1f, \"rss\": %" PRIu64
                       ", \"store_bytes\": %" PRIu64 "}",
                       round ? ", " : "", round + 1, nwho, known, nsel, accepted, now_s() - t0,
                       close_ms, rn, db);
            else
                printf("%5d %9zu %9zu %9zu %9" PRIu64 " %11.2f %12.1f %11.1f %12.1f %12.1f\n",
                       round + 1, nwho, known, nsel, accepted, now_s() - t0, close_ms,
                       (double)rn / 1e6, (double)db / 1e6,
                       (double)db / 1e6 - (double)db_prev / 1e6);
            fflush(stdout);
            db_prev = db;
            rounds_done++;
        }
        known_all = known;
        free(who);
        free(sel);
        free(seen);
        free(carry);
    }
    rss(&rss1, &peak1);
    if (o.json)
        printf("], \"rss_peak\": %" PRIu64 ", \"rss_start\": %" PRIu64 "}\n", peak1, rss0);
    else
        printf("peak resident %.1f MB (%.1f MB before the store opened); model %.1f MB; "
               "%zu device ids %.1f MB (the simulation's own); the store grew by %.1f MB a "
               "round (file and WAL)\n",
               (double)peak1 / 1e6, (double)rss0 / 1e6, (double)o.params * 4 / 1e6, o.devices,
               (double)o.devices * 8 / 1e6,
               rounds_done ? ((double)db_prev - (double)db_enrolled) / 1e6 / (double)rounds_done
                           : 0.0);
    if (!o.json && known_all > 0)
        printf("resident growth since the enrolment: %.1f MB for %" PRIu64
               " devices known to the engine (%.0f bytes a device, caches and allocator "
               "arenas included)\n",
               ((double)rss1 - (double)rss_enrolled) / 1e6, known_all,
               ((double)rss1 - (double)rss_enrolled) / (double)known_all);
    if (rc != SL_OK) {
        fprintf(stderr, "starling bench scale: %s\n", sl_strerror(rc));
        status = 1;
    }
done:
    sl_engine_close(s.engine);
    sl_store_close(s.store);
    sl_layout_free(s.layout);
    free(s.devices);
    sl__bench_fl_rmtree(dir);
    return status;
}
