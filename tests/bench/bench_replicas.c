/*
 * bench_replicas.c - `starling bench scale --replicas`: durable uploads/s
 * through the coordinator's engine (validation, the durable write, the
 * counts; no HTTP) on its SQLite store and on PostgreSQL with 1, 2 and 3
 * replicas, side by side in one run, and the time replicas take to replace
 * a leader that stopped.
 *
 * Every setting starts from the same devices (enrolled once into an SQLite
 * template, copied, or moved to a fresh PostgreSQL database with
 * sl_store_migrate()) and runs a FedBuff task (no selection: every device
 * may upload once per buffer), T threads uploading a sparse update each
 * (density 1%, ternary values, lenet5's 44,426 parameters) for S seconds,
 * spread over the replicas as a balancer would; each upload is durable
 * before its answer. PostgreSQL is a throwaway cluster of Debian's package
 * on this machine (tests/support/sl_pg.c), on the same disk as the SQLite
 * file. Replicas are engines in this process, each with its own store and
 * connections: on 2 cores, the uploaders, the replicas and the database
 * server share the same two cores, so the figures show the cost of the
 * shared database and of coordination, not what more machines would add.
 *
 * Failover: three replicas on PostgreSQL tick every 100 ms (as the
 * server's ticker); the leader stops (its engine and store are closed
 * without resigning, as a kill -9 would leave them); the time until
 * another replica leads is printed, against the lease.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_scale_int.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/round.h"
#include "starling/store.h"
#ifdef SL_HAVE_PG
#include <libpq-fe.h>

#include "../support/sl_pg.h"
#endif

#define PARAMS   "44426"
#define MAX_REPS 3

typedef struct rep_opts {
    double seconds;
    size_t threads, devices;
    int64_t lease_ms;
    int json;
} rep_opts;

typedef struct setting {
    const char *name;
    int pg;
    size_t replicas;
    double uploads_s, seconds;
    uint64_t accepted, refused;
    int ran;
} setting;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the engines of one setting ----------------------------------------------------------- */

typedef struct cluster {
    char path[1200];
    sl_store *store[MAX_REPS];
    sl_engine *engine[MAX_REPS];
    size_t n;
    sl_layout *layout;
    int64_t task, round_id, version;
} cluster;

static int open_cluster(cluster *c, const rep_opts *o, int replicas_named, char *err, size_t cap)
{
    static const char *const names[MAX_REPS] = {"r0", "r1", "r2"};
    for (size_t i = 0; i < c->n; i++) {
        sl_store_options so;
        sl_engine_options eo;
        int rc;
        sl_store_options_default(&so);
        so.path = c->path;
        so.readers = 8;
        rc = sl_store_open(&so, &c->store[i], err, cap);
        if (rc != SL_OK)
            return rc;
        sl_engine_options_default(&eo);
        eo.replica = replicas_named ? names[i] : NULL;
        eo.lease_ms = o->lease_ms;
        rc = sl_engine_open(c->store[i], &eo, &c->engine[i], err, cap);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

static void close_cluster(cluster *c)
{
    for (size_t i = 0; i < c->n; i++) {
        sl_engine_close(c->engine[i]);
        sl_store_close(c->store[i]);
        c->engine[i] = NULL;
        c->store[i] = NULL;
    }
}

/* Tick every engine for @ms (every 100 ms, as the server's ticker). */
static void tick_for(cluster *c, int64_t ms)
{
    for (int64_t t = 0; t <= ms; t += 100) {
        for (size_t i = 0; i < c->n; i++)
            if (c->engine[i] != NULL)
                (void)sl_engine_tick(c->engine[i], NULL);
        usleep(100000);
    }
}

/* A FedBuff task (uploads without selection) at engine 0; every replica sees its round. */
static int start_task(cluster *c, char *err, size_t cap)
{
    static const char config[] = "{\"name\":\"bench-replicas\",\"fedbuff\":true,\"target\":100000,"
                                 "\"buffer_size\":100000,\"quorum\":1,\"max_staleness\":10,"
                                 "\"report_deadline_ms\":3600000,\"values\":\"ternary\","
                                 "\"density\":0.01}";
    static const char layout[] = "w " PARAMS "\n";
    size_t np;
    float *w;
    void *frame = NULL;
    size_t len = 0;
    sl_task_status st;
    int rc = sl_layout_parse(layout, strlen(layout), &c->layout);
    if (rc != SL_OK)
        return rc;
    np = (size_t)sl_layout_params(c->layout);
    w = calloc(np, sizeof *w);
    rc = w ? sl_frame_encode_model(c->layout, w, 1, 3, &frame, &len) : SL_ENOMEM;
    free(w);
    if (rc == SL_OK)
        rc = sl_engine_create_task(c->engine[0], config, layout, frame, len, &c->task, err, cap);
    free(frame);
    tick_for(c, 600); /* the leader opens the round; the others read it */
    for (size_t i = 0; rc == SL_OK && i < c->n; i++) {
        rc = sl_engine_task_status(c->engine[i], c->task, &st);
        if (rc == SL_OK && !st.round_open) {
            snprintf(err, cap, "replica %zu does not see the task's round", i);
            rc = SL_ESTATE;
        }
    }
    if (rc == SL_OK) {
        c->round_id = st.round.id;
        c->version = st.model_version;
    }
    return rc;
}

typedef struct uploader {
    cluster *c;
    const int64_t *devices;
    size_t from, step, ndevices;
    double until;
    uint64_t accepted, refused;
    int rc;
} uploader;

static void *upload_loop(void *arg)
{
    uploader *u = arg;
    for (size_t i = u->from; i < u->ndevices && now_s() < u->until && u->rc == SL_OK;
         i += u->step) {
        sl_accept_result res;
        uint8_t sha[32];
        void *frame = NULL;
        size_t len = 0;
        sl_engine *e = u->c->engine[i % u->c->n]; /* spread over the replicas */
        u->rc = sl__bench_sparse_update(u->c->layout, 0.01, SL_VALUE_TERNARY, i, u->c->round_id,
                                        u->c->version, 7, &frame, &len);
        for (int b = 0; b < 32; b++)
            sha[b] = (uint8_t)((i * 131 + (size_t)b * 7) >> (b % 8));
        if (u->rc == SL_OK)
            u->rc = sl_engine_accept(e, u->c->round_id, u->devices[i], frame, len, 60, sha, &res);
        free(frame);
        if (u->rc == SL_OK && res.accepted)
            u->accepted++;
        else if (u->rc == SL_OK)
            u->refused++;
    }
    return NULL;
}

/* T threads upload for S seconds; the setting's uploads/s. */
static int run_uploads(cluster *c, const rep_opts *o, const int64_t *devices, setting *st)
{
    uploader u[64];
    pthread_t th[64];
    size_t t = o->threads;
    double t0 = now_s();
    int rc = SL_OK;
    for (size_t k = 0; k < t; k++) {
        u[k] = (uploader){c, devices, k, t, o->devices, t0 + o->seconds, 0, 0, SL_OK};
        pthread_create(&th[k], NULL, upload_loop, &u[k]);
    }
    for (size_t k = 0; k < t; k++) {
        pthread_join(th[k], NULL);
        st->accepted += u[k].accepted;
        st->refused += u[k].refused;
        if (u[k].rc != SL_OK && rc == SL_OK)
            rc = u[k].rc;
    }
    st->seconds = now_s() - t0;
    st->uploads_s = (double)st->accepted / st->seconds;
    return rc;
}

/* ---- the template: devices enrolled once -------------------------------------------------- */

typedef struct enrol_job {
    sl_store *s;
    int64_t *ids;
    size_t from, to;
    int rc;
} enrol_job;

static void *enrol_loop(void *arg)
{
    enrol_job *j = arg;
    for (size_t i = j->from; i < j->to && j->rc == SL_OK; i++) {
        uint8_t key[8];
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)((i + 1) >> (8 * b));
        j->rc = sl_store_enrol_device(j->s, key, sizeof key, "{}", &j->ids[i]);
    }
    return NULL;
}

static int make_template(const char *path, size_t n, int64_t *ids, char *err, size_t cap)
{
    sl_store_options so;
    sl_store *s = NULL;
    enrol_job j[8];
    pthread_t th[8];
    int rc;
    sl_store_options_default(&so);
    so.path = path;
    rc = sl_store_open(&so, &s, err, cap);
    for (int k = 0; rc == SL_OK && k < 8; k++) {
        j[k] = (enrol_job){s, ids, n * (size_t)k / 8, n * (size_t)(k + 1) / 8, SL_OK};
        pthread_create(&th[k], NULL, enrol_loop, &j[k]);
    }
    for (int k = 0; rc == SL_OK && k < 8; k++) {
        pthread_join(th[k], NULL);
        if (j[k].rc != SL_OK)
            rc = j[k].rc;
    }
    sl_store_close(s);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int rc = in && out ? SL_OK : SL_EIO;
    while (rc == SL_OK && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = SL_EIO;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = SL_EIO;
    return rc;
}

/* ---- PostgreSQL --------------------------------------------------------------------------- */

#ifdef SL_HAVE_PG
/* A fresh database @name of the cluster, holding the template's rows; its URI in @uri. */
static int pg_database(sl_test_pg *pg, const char *name, const char *tmpl, char *uri, size_t cap,
                       char *err, size_t errcap)
{
    char ci[300], sql[96];
    PGconn *c;
    PGresult *r;
    int ok;
    snprintf(ci, sizeof ci, "host=%s user=starling dbname=postgres", pg->dir);
    c = PQconnectdb(ci);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    r = PQexec(c, sql);
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        snprintf(err, errcap, "%s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    if (!ok)
        return SL_EIO;
    snprintf(uri, cap, "postgresql://starling@/%s?host=%s", name, pg->dir);
    return sl_store_migrate(tmpl, uri, NULL, err, errcap);
}

/* Three replicas; the leader stops; seconds until another leads. */
static int failover(sl_test_pg *pg, const char *tmpl, const rep_opts *o, double *seconds, char *err,
                    size_t cap)
{
    cluster c;
    double t0;
    int rc;
    memset(&c, 0, sizeof c);
    c.n = 3;
    rc = pg_database(pg, "bench_failover", tmpl, c.path, sizeof c.path, err, cap);
    if (rc == SL_OK)
        rc = open_cluster(&c, o, 1, err, cap);
    if (rc == SL_OK)
        tick_for(&c, 300);
    if (rc == SL_OK) {
        int leader = 0;
        (void)sl_engine_role(c.engine[0], &leader, NULL, NULL);
        if (!leader) {
            snprintf(err, cap, "the first replica does not lead");
            rc = SL_ESTATE;
        }
    }
    if (rc != SL_OK) {
        close_cluster(&c);
        return rc;
    }
    /* the leader stops without a word: its lease runs out */
    sl_engine_close(c.engine[0]);
    sl_store_close(c.store[0]);
    c.engine[0] = NULL;
    c.store[0] = NULL;
    t0 = now_s();
    *seconds = -1;
    while (now_s() - t0 < 60.0 && *seconds < 0) {
        for (size_t i = 1; i < c.n; i++) {
            int leader = 0;
            (void)sl_engine_tick(c.engine[i], NULL);
            (void)sl_engine_role(c.engine[i], &leader, NULL, NULL);
            if (leader)
                *seconds = now_s() - t0;
        }
        usleep(100000);
    }
    close_cluster(&c);
    if (*seconds < 0) {
        snprintf(err, cap, "no replica took over within 60 s");
        return SL_ETIMEDOUT;
    }
    return SL_OK;
}
#endif

/* ---- the benchmark ------------------------------------------------------------------------ */

static int usage(void)
{
    fprintf(stderr,
            "usage: starling bench scale --replicas [--seconds S] [--threads T] [--devices N]\n"
            "                            [--lease MS] [--json]\n"
            "  durable uploads/s through the engine on SQLite and on PostgreSQL with 1, 2 and 3\n"
            "  replicas (a throwaway cluster of Debian's postgresql), T threads (default 16) for\n"
            "  S seconds each (default 5), N devices enrolled (default 60000); then the time\n"
            "  three replicas take to replace a leader that stopped, with a lease of MS ms\n"
            "  (default 5000, the coordinator's)\n");
    return 2;
}

static int parse_opts(int argc, char **argv, rep_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        double x = v ? strtod(v, &end) : 0;
        int good = v != NULL && end != v && *end == '\0';
        if (strcmp(a, "--replicas") == 0)
            continue;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return 1;
        } else if (strcmp(a, "--seconds") == 0 && good && x >= 0.5 && x <= 3600) {
            o->seconds = x, i++;
        } else if (strcmp(a, "--threads") == 0 && good && x >= 1 && x <= 64 && x == (size_t)x) {
            o->threads = (size_t)x, i++;
        } else if (strcmp(a, "--devices") == 0 && good && x >= 100 && x <= 1e7 && x == (size_t)x) {
            o->devices = (size_t)x, i++;
        } else if (strcmp(a, "--lease") == 0 && good && x >= 100 && x <= 600000) {
            o->lease_ms = (int64_t)x, i++;
        } else {
            fprintf(stderr, "starling bench scale: bad option or value: %s%s%s\n", a, v ? " " : "",
                    v ? v : "");
            return -1;
        }
    }
    return 0;
}

static void print_table(const setting *s, size_t n, const rep_opts *o, double failover_s,
                        const char *pg_note)
{
    const setting *base = &s[0];
    if (o->json) {
        printf("{\"threads\":%zu,\"seconds\":%.1f,\"settings\":[", o->threads, o->seconds);
        for (size_t i = 0; i < n; i++)
            printf("%s{\"name\":\"%s\",\"replicas\":%zu,\"ran\":%s,\"accepted\":%llu,"
                   "\"uploads_per_s\":%.1f}",
                   i ? "," : "", s[i].name, s[i].replicas, s[i].ran ? "true" : "false",
                   (unsigned long long)s[i].accepted, s[i].uploads_s);
        printf("],\"lease_ms\":%lld,\"failover_s\":%.2f}\n", (long long)o->lease_ms, failover_s);
        return;
    }
    printf("durable uploads through the engine: %zu threads, %.0f s a setting, sparse updates "
           "of " PARAMS " parameters (1%%, ternary)\n",
           o->threads, o->seconds);
    printf("  %-16s %9s %10s %11s %9s\n", "store", "replicas", "accepted", "uploads/s",
           "vs sqlite");
    for (size_t i = 0; i < n; i++) {
        if (!s[i].ran) {
            printf("  %-16s %9zu %10s %11s %9s\n", s[i].name, s[i].replicas, "-", "-", "-");
            continue;
        }
        printf("  %-16s %9zu %10llu %11.0f %8.2fx\n", s[i].name, s[i].replicas,
               (unsigned long long)s[i].accepted, s[i].uploads_s,
               base->uploads_s > 0 ? s[i].uploads_s / base->uploads_s : 0);
    }
    if (pg_note[0] != '\0')
        printf("PostgreSQL: %s\n", pg_note);
    else
        printf("failover: another replica led %.2f s after the leader stopped (lease %lld ms)\n",
               failover_s, (long long)o->lease_ms);
}

int sl__bench_replicas(int argc, char **argv)
{
    rep_opts o = {5.0, 16, 60000, 5000, 0};
    setting s[4] = {{"sqlite", 0, 1, 0, 0, 0, 0, 0},
                    {"postgresql", 1, 1, 0, 0, 0, 0, 0},
                    {"postgresql", 1, 2, 0, 0, 0, 0, 0},
                    {"postgresql", 1, 3, 0, 0, 0, 0, 0}};
    char dir[600], tmpl[700], err[600] = "", pg_note[320] = "";
    const char *tmp = getenv("TMPDIR");
    int64_t *ids;
    double failover_s = -1;
    int rc, p = parse_opts(argc, argv, &o);
#ifdef SL_HAVE_PG
    sl_test_pg pg;
    int have_pg = 0;
#endif
    if (p != 0)
        return p > 0 ? (usage(), 0) : usage();
    snprintf(dir, sizeof dir, "%s/starling-bench-replicas-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "starling bench scale: cannot make a folder in %s\n", dir);
        return 1;
    }
    snprintf(tmpl, sizeof tmpl, "%s/template.db", dir);
    ids = calloc(o.devices, sizeof *ids);
    fprintf(stderr, "enrolling %zu devices...\n", o.devices);
    rc = ids ? make_template(tmpl, o.devices, ids, err, sizeof err) : SL_ENOMEM;
#ifdef SL_HAVE_PG
    if (rc == SL_OK) {
        have_pg = sl_test_pg_start(&pg, pg_note, sizeof pg_note) == 0;
        if (have_pg)
            pg_note[0] = '\0';
    }
#else
    snprintf(pg_note, sizeof pg_note, "this build has no PostgreSQL store");
#endif
    for (size_t k = 0; rc == SL_OK && k < 4; k++) {
        cluster c;
        memset(&c, 0, sizeof c);
        c.n = s[k].replicas;
        if (!s[k].pg) {
            snprintf(c.path, sizeof c.path, "%s/sqlite.db", dir);
            rc = copy_file(tmpl, c.path);
        } else {
#ifdef SL_HAVE_PG
            char name[32];
            if (!have_pg)
                continue;
            snprintf(name, sizeof name, "bench_%zu", k);
            rc = pg_database(&pg, name, tmpl, c.path, sizeof c.path, err, sizeof err);
#else
            continue;
#endif
        }
        fprintf(stderr, "%s, %zu replica%s...\n", s[k].name, c.n, c.n > 1 ? "s" : "");
        if (rc == SL_OK)
            rc = open_cluster(&c, &o, s[k].pg, err, sizeof err);
        if (rc == SL_OK)
            rc = start_task(&c, err, sizeof err);
        if (rc == SL_OK)
            rc = run_uploads(&c, &o, ids, &s[k]);
        s[k].ran = rc == SL_OK;
        close_cluster(&c);
        sl_layout_free(c.layout);
    }
#ifdef SL_HAVE_PG
    if (rc == SL_OK && have_pg)
        rc = failover(&pg, tmpl, &o, &failover_s, err, sizeof err);
    if (have_pg)
        sl_test_pg_stop(&pg);
#endif
    {
        static const char *const suffix[] = {"", "-wal", "-shm"};
        for (int k = 0; k < 3; k++) {
            char f[720];
            snprintf(f, sizeof f, "%s/sqlite.db%s", dir, suffix[k]);
            unlink(f);
            snprintf(f, sizeof f, "%s%s", tmpl, suffix[k]);
            unlink(f);
        }
        rmdir(dir);
    }
    free(ids);
    if (rc != SL_OK) {
        fprintf(stderr, "starling bench scale: %s%s%s\n", sl_strerror(rc), err[0] ? ": " : "", err);
        return 1;
    }
    print_table(s, 4, &o, failover_s, pg_note);
    return 0;
}
