/*
 * Coordinator replicas on PostgreSQL under faults (issue #21): three
 * starling-coordinator programs share one database of a throwaway cluster
 * (tests/support/sl_pg.h) behind a test-owned TCP balancer
 * (tcp_balancer.h); a fleet of simulated devices (starling-agent --fleet)
 * trains logreg through the balancer. The leader (read from the store) is
 * killed with SIGKILL again and again and restarted; once, the database
 * server itself restarts (fast stop: every connection drops).
 *
 * Two runs from one template (devices enrolled once into an SQLite store,
 * then `starling store migrate`d into PostgreSQL for the replicas): a
 * reference run of one coordinator on SQLite, left alone, and the replicas.
 *
 * Asserted:
 *   - every kill handed leadership to another replica within the bound
 *     (10 s, the default lease 5 s plus a tick; here a 2 s lease), each
 *     failover time printed;
 *   - the task finished all its rounds; rounds close iff they met quorum;
 *   - zero acknowledged updates lost or double-counted: every line of every
 *     device's acks.log is an update the store holds, once; every stored
 *     update was acknowledged or is a stopped device's pending upload;
 *   - every round whose base and accepted set equal the reference run's
 *     (one coordinator, SQLite) ended the same, with the same model bits.
 * The task keeps the bytes of its last 2 model versions (retain_last): the leader retires
 * the others after each close, on either store; the fleet's devices then download whole
 * models instead of deltas from a retired version, and the records of retired versions
 * still give their digests; the updates of the rounds over but the last 2 lose their bytes
 * (their records stay, so every acknowledged update is still found).
 * `test_fl_replicas <kills> <rounds> [seed]` (default 4 kills, 16 rounds);
 * the slow label runs 30 kills.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <libpq-fe.h>

#include "../support/sl_pg.h"
#include "../support/sl_test.h"
#include "fl_harness.h"
#include "tcp_balancer.h"

#define DEVICES  4
#define REPLICAS 3
#define LEASE_S  2
#define BOUND_S  10.0

static int kills_wanted = 4;
static unsigned rounds_wanted = 16;
static uint64_t seed = 0x5eedc0de;

static const char *task_config(char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"name\":\"replicas\",\"rounds\":%u,\"target\":%d,\"quorum\":%d,"
             "\"over_selection\":1,\"selection_window_ms\":700,\"report_deadline_ms\":12000,"
             "\"values\":\"fp32\",\"density\":0.3,\"local_epochs\":1,\"batch\":16,"
             "\"local_lr\":0.05,\"seed\":11,\"retain_last\":2}",
             rounds_wanted, DEVICES, DEVICES - 1);
    return buf;
}

typedef struct run_result {
    fl_run run;
    int64_t task;
    int kills;
    size_t acked, pending;
    double seconds, failover_max, failover_sum;
} run_result;

/* Wait for the task to finish, asking @c (a coordinator or the balancer). */
static int wait_finished(fl_coord *c, double end)
{
    while (fl_now() < end) {
        if (fl_task_finished(c) == 1)
            return 1;
        fl_sleep_ms(100);
    }
    return 0;
}

/* The checks of every run (as in test_fl_coord_kill), read from the store at @where. */
static void check_run(const char *where, const char *state, const char *name, run_result *out)
{
    sl_store *s = fl_open_store(where);
    uint64_t stored = 0;
    fl_read_run(s, out->task, &out->run);
    out->acked = fl_check_fleet_acks(s, state, DEVICES, &out->pending);
    for (size_t i = 0; i < out->run.n; i++)
        stored += out->run.rounds[i].n;
    if (stored != out->acked + out->pending)
        fail_msg("%s: %llu updates stored, %zu acknowledged + %zu pending", name,
                 (unsigned long long)stored, out->acked, out->pending);
    fl_check_quorum(&out->run);
    fl_check_round_count(&out->run, rounds_wanted, name);
    { /* retention (retain_last 2): the bytes of versions 2 to the last but two went, the
       * records stay; the last two and version 1 keep theirs */
        sl_model_record m;
        for (int64_t v = 1; v <= out->run.final_version; v++) {
            int kept = v == 1 || v >= out->run.final_version - 1;
            assert_int_equal(sl_store_get_model_info(s, out->task, v, &m), SL_OK);
            if (m.retired == kept)
                fail_msg("%s: version %lld %s", name, (long long)v,
                         kept ? "retired" : "not retired");
            sl_store_model_free(&m);
        }
    }
    { /* and the bytes of the updates of the rounds over but the last 2 as of the last close
       * (the rounds follow each other: all before the last closed one are over) */
        int64_t last = 0;
        for (size_t i = 0; i < out->run.n; i++)
            if (out->run.rounds[i].rec.state == SL_ROUND_CLOSED)
                last = out->run.rounds[i].rec.round_no;
        for (size_t i = 0; i < out->run.n; i++) {
            const fl_round *fr = &out->run.rounds[i];
            int gone = fr->rec.round_no <= last - 2;
            if (fr->n > 0 && (fr->retired > 0) != gone)
                fail_msg("%s: round %lld's updates %s", name, (long long)fr->rec.round_no,
                         gone ? "not retired" : "retired");
        }
    }
    sl_store_close(s);
    fprintf(stderr,
            "%s: %d kills, %.1f s, %zu rounds (%llu closed, %llu abandoned), %zu acknowledged, "
            "%zu pending, model version %lld\n",
            name, out->kills, out->seconds, out->run.n, (unsigned long long)out->run.closed,
            (unsigned long long)out->run.abandoned, out->acked, out->pending,
            (long long)out->run.final_version);
}

/* The reference: one coordinator on a copy of the template's SQLite store. */
static void reference_run(const char *root, const fl_coord *tmpl, const char *data, run_result *out)
{
    char state[600], log[600], from[700], config[512];
    fl_coord c;
    fl_fleet f;
    pid_t fleet;
    double t0 = fl_now();
    int finished, code;
    memset(out, 0, sizeof *out);
    fl_coord_init(&c, root, "ref");
    fl_copy_tree(tmpl->data_dir, c.data_dir);
    snprintf(from, sizeof from, "%s/tmpl-fleet", root);
    snprintf(state, sizeof state, "%s/ref-fleet", root);
    snprintf(log, sizeof log, "%s/ref-fleet.log", root);
    fl_copy_tree(from, state);
    fl_coord_start(&c);
    out->task = fl_create_task(&c, "logreg", task_config(config, sizeof config));
    fl_fleet_argv(&f, &c, out->task, DEVICES, data, state, log);
    fleet = fl_spawn_agent(f.argv, log);
    finished = wait_finished(&c, fl_now() + (60.0 + 3.0 * rounds_wanted) * sl_test_time_scale());
    out->seconds = fl_now() - t0;
    kill(fleet, SIGTERM);
    code = ag_wait(fleet, 20000);
    fl_coord_stop(&c);
    fl_coord_free(&c);
    if (!finished || code != 0)
        fail_msg("ref: the task did not finish (%d) or the fleet ended with %d; see %s", finished,
                 code, log);
    check_run(c.data_dir, state, "ref", out);
}

/* The balancer, as a coordinator the harness can talk to (its admin client). */
static void balancer_coord(fl_coord *lb, const char *root, int port)
{
    sl_client_options co;
    fl_coord_init(lb, root, "balancer");
    sl_client_free(lb->admin);
    snprintf(lb->listen, sizeof lb->listen, "127.0.0.1:%d", port);
    snprintf(lb->url, sizeof lb->url, "http://%s", lb->listen);
    memset(&co, 0, sizeof co);
    co.base_url = lb->url;
    co.admin_token = AG_ADMIN;
    co.max_attempts = 1;
    co.connect_timeout_ms = 2000;
    co.request_timeout_ms = 10000;
    assert_int_equal(sl_client_create(&co, &lb->admin), SL_OK);
}

/* Which replica the store says leads, with its epoch; -1 when none is named. */
static int leader_of(sl_store *watch, fl_coord *c, uint64_t *epoch)
{
    char owner[SL_STORE_MAX_OWNER];
    int64_t left = 0;
    if (sl_store_leader(watch, owner, sizeof owner, epoch, &left) != SL_OK)
        return -1;
    for (int i = 0; i < REPLICAS; i++)
        if (strcmp(owner, c[i].replica) == 0)
            return i;
    return -1;
}

/* Kill the leader; the time until another replica holds a newer epoch. */
static double kill_leader(sl_store *watch, fl_coord *c, int *killed)
{
    uint64_t epoch = 0, now_epoch = 0;
    double t0, end;
    int i = leader_of(watch, c, &epoch);
    if (i < 0 || c[i].pid == 0)
        fail_msg("no running replica leads (store says %d)", i);
    fl_coord_kill(&c[i]);
    *killed = i;
    t0 = fl_now();
    end = t0 + 3 * BOUND_S * sl_test_time_scale();
    while (fl_now() < end) {
        int j = leader_of(watch, c, &now_epoch);
        if (j >= 0 && j != i && now_epoch > epoch)
            return fl_now() - t0;
        fl_sleep_ms(20);
    }
    fail_msg("no replica took over within %.0f s of killing %s", 3 * BOUND_S, c[i].replica);
    return 0;
}

static void replica_run(const char *root, const fl_coord *tmpl, const char *data, sl_test_pg *pg,
                        run_result *out)
{
    char state[600], log[600], from[700], config[512], uri[400], db[700], err[600];
    fl_coord c[REPLICAS], lb;
    fl_fleet f;
    tcp_balancer *bal;
    sl_store *watch;
    int ports[REPLICAS], port, finished = 0, code;
    uint64_t rng = seed, rows = 0;
    double t0 = fl_now(), end, next_kill;
    memset(out, 0, sizeof *out);

    /* the template's devices, moved to PostgreSQL as an operator would */
    snprintf(uri, sizeof uri, "postgresql://starling@/fleet?host=%s", pg->dir);
    {
        char ci[300];
        PGconn *pc;
        PGresult *r;
        snprintf(ci, sizeof ci, "host=%s user=starling dbname=postgres", pg->dir);
        pc = PQconnectdb(ci);
        r = PQexec(pc, "CREATE DATABASE fleet");
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fail_msg("CREATE DATABASE: %s", PQerrorMessage(pc));
        PQclear(r);
        PQfinish(pc);
    }
    snprintf(db, sizeof db, "%s/starling.db", tmpl->data_dir);
    if (sl_store_migrate(db, uri, &rows, err, sizeof err) != SL_OK)
        fail_msg("migrate: %s", err);
    for (int i = 0; i < REPLICAS; i++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", i);
        fl_coord_init(&c[i], root, name);
        snprintf(c[i].store, sizeof c[i].store, "%s", uri);
        snprintf(c[i].replica, sizeof c[i].replica, "%s", name);
        snprintf(c[i].lease, sizeof c[i].lease, "%ds", LEASE_S);
        fl_coord_start(&c[i]);
        ports[i] = (int)strtol(strrchr(c[i].listen, ':') + 1, NULL, 10);
    }
    bal = tb_start(ports, REPLICAS, &port);
    assert_non_null(bal);
    balancer_coord(&lb, root, port);
    watch = fl_open_store(uri);

    snprintf(from, sizeof from, "%s/tmpl-fleet", root);
    snprintf(state, sizeof state, "%s/replicas-fleet", root);
    snprintf(log, sizeof log, "%s/replicas-fleet.log", root);
    fl_copy_tree(from, state);
    out->task = fl_create_task(&lb, "logreg", task_config(config, sizeof config));
    fl_fleet_argv(&f, &lb, out->task, DEVICES, data, state, log);
    {
        pid_t fleet = fl_spawn_agent(f.argv, log);
        next_kill = fl_now() + 2.0 + (double)(sl_test_rand(&rng) % 2000) / 1e3;
        end = fl_now() + (90.0 + 4.0 * rounds_wanted + 6.0 * kills_wanted) * sl_test_time_scale();
        while (fl_now() < end) {
            if (out->kills < kills_wanted && fl_now() >= next_kill) {
                int killed = -1;
                double t = kill_leader(watch, c, &killed);
                out->kills++;
                out->failover_sum += t;
                if (t > out->failover_max)
                    out->failover_max = t;
                fprintf(stderr, "kill %d: %s was the leader; another led %.2f s later\n",
                        out->kills, c[killed].replica, t);
                fl_coord_start(&c[killed]);
                if (out->kills == 2) { /* the database's primary restarts once */
                    assert_int_equal(sl_test_pg_restart(pg, 0), 0);
                    fprintf(stderr, "the PostgreSQL server restarted\n");
                }
                next_kill = fl_now() + 2.0 + (double)(sl_test_rand(&rng) % 3000) / 1e3;
                continue;
            }
            if (fl_task_finished(&lb) == 1) {
                finished = 1;
                break;
            }
            fl_sleep_ms(100);
        }
        out->seconds = fl_now() - t0;
        kill(fleet, SIGTERM);
        code = ag_wait(fleet, 20000);
    }
    sl_store_close(watch);
    /* their readiness says their roles: one leads, the others follow (a restarted replica
     * may take a lease-length to hear who leads) */
    for (double until = fl_now() + 3.0 * LEASE_S;;) {
        int leaders = 0, followers = 0;
        for (int i = 0; i < REPLICAS; i++) {
            sl_client_response r;
            memset(&r, 0, sizeof r);
            if (fl_request(&c[i], "GET", "/readyz", NULL, &r) == SL_OK && r.status == 200) {
                leaders += r.body_len >= 13 && memcmp(r.body, "ready: leader", 13) == 0;
                followers += r.body_len >= 15 && memcmp(r.body, "ready: follower", 15) == 0;
            }
            sl_client_response_free(&r);
        }
        if (leaders == 1 && followers == REPLICAS - 1)
            break;
        if (fl_now() > until)
            fail_msg("/readyz: %d leaders and %d followers among %d replicas", leaders, followers,
                     REPLICAS);
        fl_sleep_ms(200);
    }
    {
        /* a backup of a PostgreSQL store is the database's own tools' work: 409, naming them */
        sl_client_response r;
        assert_int_equal(fl_request(&c[0], "POST", "/v1/backups", NULL, &r), SL_OK);
        if (r.status != 409 || r.body == NULL || memmem(r.body, r.body_len, "pg_dump", 7) == NULL)
            fail_msg("POST /v1/backups on a PostgreSQL store: %d %.*s", r.status, (int)r.body_len,
                     r.body ? (const char *)r.body : "");
        sl_client_response_free(&r);
    }
    for (int i = 0; i < REPLICAS; i++) {
        fl_coord_stop(&c[i]);
        fl_coord_free(&c[i]);
    }
    tb_stop(bal);
    fl_coord_free(&lb);
    if (!finished)
        fail_msg("replicas: the task did not finish in time (%d kills); see %s and %s/r*/",
                 out->kills, log, root);
    if (code != 0)
        fail_msg("replicas: the fleet ended with %d after SIGTERM; see %s", code, log);
    assert_int_equal(out->kills, kills_wanted);
    check_run(uri, state, "replicas", out);
}

static void test_replicas_leader_killed(void **state)
{
    char root[512], data[600], why[300];
    fl_coord tmpl;
    sl_test_pg pg;
    run_result ref, rep;
    size_t matched;
    (void)state;
    if (sl_test_pg_start(&pg, why, sizeof why) != 0) {
        print_message("PostgreSQL: %s: skipped\n", why);
        skip();
    }
    sl_test_mkdtemp(root, sizeof root, "fl_replicas");
    snprintf(data, sizeof data, "%s/fmnist", root);
    ag_make_data(data, DEVICES * 150, 50);
    fl_make_template(root, data, DEVICES, &tmpl);
    fprintf(stderr, "seed %#llx, %d leader kills, %u rounds, %d replicas, lease %d s\n",
            (unsigned long long)seed, kills_wanted, rounds_wanted, REPLICAS, LEASE_S);
    reference_run(root, &tmpl, data, &ref);
    replica_run(root, &tmpl, data, &pg, &rep);
    assert_int_equal(ref.task, rep.task);
    fprintf(stderr, "failover: %d kills, %.2f s at most, %.2f s on average (bound %.0f s)\n",
            rep.kills, rep.failover_max, rep.kills ? rep.failover_sum / rep.kills : 0.0, BOUND_S);
    assert_true(rep.failover_max <= BOUND_S * sl_test_time_scale());
    for (size_t i = 0; i < ref.run.n; i++)
        if (ref.run.rounds[i].rec.state != SL_ROUND_CLOSED || ref.run.rounds[i].n != DEVICES)
            fail_msg("reference round no %lld: state %d with %zu updates",
                     (long long)ref.run.rounds[i].rec.round_no, ref.run.rounds[i].rec.state,
                     ref.run.rounds[i].n);
    matched = fl_compare_runs(&ref.run, &rep.run);
    assert_true(matched >= 1);
    fl_run_free(&ref.run);
    fl_run_free(&rep.run);
    fl_coord_free(&tmpl);
    sl_test_pg_stop(&pg);
    sl_test_rmtree(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_leader_killed),
    };
    if (argc > 1)
        kills_wanted = (int)strtol(argv[1], NULL, 10);
    if (argc > 2)
        rounds_wanted = (unsigned)strtoul(argv[2], NULL, 10);
    if (argc > 3)
        seed = strtoull(argv[3], NULL, 0);
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
