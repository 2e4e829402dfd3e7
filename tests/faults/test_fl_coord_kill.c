/*
 * The coordinator killed with SIGKILL at random instants of a federated
 * run, N times, and restarted each time on the same data directory (issue
 * #9, section 2). The starling-coordinator program runs as a child on a
 * loopback port; a fleet of simulated devices (starling-agent --fleet)
 * trains logreg on a small Fashion-MNIST split against it.
 *
 * Two runs with the same seeds: a reference run left alone, and a run whose
 * coordinator is killed at random instants (uniform in [0, 2 * mean] after
 * round 1 closed, then after each restart answered /healthz). Both start from one template (devices
 * enrolled once, their keys and ids copied), so device ids, keys, data and
 * every seed are the same in both.
 *
 * Asserted:
 *   - the killed run took every kill, its rounds resumed, and the task
 *     finished all its rounds;
 *   - zero acknowledged updates lost or double-counted: every line of every
 *     device's acks.log is an update the store holds, with that update id,
 *     once for its (round, device); no (round, device) acknowledged twice;
 *     every round's reported count equals its stored updates; every stored
 *     update is acknowledged or is the pending upload of a stopped device;
 *   - every stored update and model version is the bytes of its digest;
 *     each closed round made one version from its base;
 *   - rounds close iff they met quorum;
 *   - invariant 3 across runs: for every round number whose base model and
 *     accepted set (device, update digest) are the same in both runs, the
 *     state is the same and, when closed, the model version it made has the
 *     same SHA-256; the number of such rounds is printed, and the first
 *     round (the first kill waits until it has closed) must match;
 *   - the reference run closed every round with every device.
 * `test_fl_coord_kill <kills> <rounds> [seed]` (default 10 kills, 14
 * rounds); the slow label runs 100 kills.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../support/sl_test.h"
#include "fl_harness.h"
#include "starling/api_sign.h"

#define DEVICES 4

static int kills_wanted = 10;
static unsigned rounds_wanted = 14;
static uint64_t seed = 0x5eedc0de;
static long mean_gap_ms = 700;

static const char *task_config(char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"name\":\"coord-kill\",\"rounds\":%u,\"target\":%d,\"quorum\":%d,"
             "\"over_selection\":1,\"selection_window_ms\":700,\"report_deadline_ms\":8000,"
             "\"values\":\"fp32\",\"density\":0.3,\"local_epochs\":1,\"batch\":16,"
             "\"local_lr\":0.05,\"seed\":11}",
             rounds_wanted, DEVICES, DEVICES - 1);
    return buf;
}

typedef struct run_result {
    fl_run run;
    int64_t task;
    int kills;
    size_t acked, pending;
    double seconds;
} run_result;

static void one_run(const char *root, const char *name, const fl_coord *tmpl, const char *data,
                    int kills, run_result *out)
{
    char state[600], log[600], from[700];
    char config[512];
    fl_coord c;
    fl_fleet f;
    pid_t fleet;
    uint64_t rng = seed;
    double t0 = fl_now(), next_kill, end, last_poll = 0, last_version_poll = 0;
    int64_t first_version;
    int finished = 0, code;
    sl_store *s;
    uint64_t stored = 0;

    memset(out, 0, sizeof *out);
    fl_coord_init(&c, root, name);
    fl_copy_tree(tmpl->data_dir, c.data_dir);
    snprintf(from, sizeof from, "%s/tmpl-fleet", root);
    snprintf(state, sizeof state, "%s/%s-fleet", root, name);
    snprintf(log, sizeof log, "%s/%s-fleet.log", root, name);
    fl_copy_tree(from, state);
    fl_coord_start(&c);
    out->task = fl_create_task(&c, "logreg", task_config(config, sizeof config));
    fl_fleet_argv(&f, &c, out->task, DEVICES, data, state, log);
    fleet = fl_spawn_agent(f.argv, log);

    /* the first kill comes once round 1 has closed: its accepted set (every device) is then
     * the reference's, so the comparison below always has a round to stand on */
    first_version = fl_model_version(&c);
    assert_true(first_version >= 0);
    next_kill = -1;
    end = fl_now() + (60.0 + 3.0 * rounds_wanted + 1.5 * kills) * sl_test_time_scale();
    while (fl_now() < end) {
        double now = fl_now();
        if (next_kill < 0 && kills > 0 && now - last_version_poll >= 0.05 &&
            (last_version_poll = now, fl_model_version(&c) > first_version))
            next_kill =
                fl_now() + (double)(sl_test_rand(&rng) % (uint64_t)(2 * mean_gap_ms + 1)) / 1e3;
        if (out->kills < kills && next_kill >= 0 && now >= next_kill) {
            fl_coord_kill(&c);
            out->kills++;
            fl_coord_start(&c);
            next_kill =
                fl_now() + (double)(sl_test_rand(&rng) % (uint64_t)(2 * mean_gap_ms + 1)) / 1e3;
            continue;
        }
        if (now - last_poll >= 0.1) {
            last_poll = now;
            if (fl_task_finished(&c) == 1) {
                finished = 1;
                break;
            }
        }
        fl_sleep_ms(5);
    }
    out->seconds = fl_now() - t0;
    kill(fleet, SIGTERM);
    code = ag_wait(fleet, 20000);
    fl_coord_stop(&c);
    fl_coord_free(&c);
    if (!finished)
        fail_msg("%s: the task did not finish in time (%d kills); see %s and %s", name, out->kills,
                 c.log, log);
    if (code != 0)
        fail_msg("%s: the fleet ended with %d after SIGTERM; see %s", name, code, log);
    assert_int_equal(out->kills, kills);

    s = fl_open_store(c.data_dir);
    fl_read_run(s, out->task, &out->run);
    out->acked = fl_check_fleet_acks(s, state, DEVICES, &out->pending);
    for (size_t i = 0; i < out->run.n; i++)
        stored += out->run.rounds[i].n;
    /* every stored update was acknowledged, or is pending in a stopped device */
    if (stored != out->acked + out->pending)
        fail_msg("%s: %llu updates stored, %zu acknowledged + %zu pending", name,
                 (unsigned long long)stored, out->acked, out->pending);
    fl_check_quorum(&out->run);
    fl_check_round_count(&out->run, rounds_wanted, name);
    sl_store_close(s);
    fprintf(stderr,
            "%s: %d kills, %.1f s, %zu rounds (%llu closed, %llu abandoned), %zu acknowledged, "
            "%zu pending, model version %lld\n",
            name, out->kills, out->seconds, out->run.n, (unsigned long long)out->run.closed,
            (unsigned long long)out->run.abandoned, out->acked, out->pending,
            (long long)out->run.final_version);
}

static void test_coordinator_killed(void **state)
{
    char root[512], data[600];
    fl_coord tmpl;
    run_result ref, killed;
    size_t matched;
    (void)state;

    sl_test_mkdtemp(root, sizeof root, "fl_coord_kill");
    snprintf(data, sizeof data, "%s/fmnist", root);
    ag_make_data(data, DEVICES * 150, 50);
    fl_make_template(root, data, DEVICES, &tmpl);
    fprintf(stderr, "seed %#llx, %d kills (mean gap %ld ms), %u rounds\n", (unsigned long long)seed,
            kills_wanted, mean_gap_ms, rounds_wanted);

    one_run(root, "ref", &tmpl, data, 0, &ref);
    one_run(root, "killed", &tmpl, data, kills_wanted, &killed);
    assert_int_equal(ref.task, killed.task);

    /* the reference is what the comparison stands on: every round closed with every device */
    for (size_t i = 0; i < ref.run.n; i++) {
        if (ref.run.rounds[i].rec.state != SL_ROUND_CLOSED || ref.run.rounds[i].n != DEVICES)
            fail_msg("reference round no %lld: state %d with %zu updates",
                     (long long)ref.run.rounds[i].rec.round_no, ref.run.rounds[i].rec.state,
                     ref.run.rounds[i].n);
    }

    matched = fl_compare_runs(&ref.run, &killed.run);
    /* no kill comes before round 1 closed: it matches (every device, the same base), so the
     * comparison is never empty; later rounds match where the kills left the same base and
     * accepted set, and the final model must when every round matched */
    assert_true(ref.run.n >= 1 && killed.run.n >= 1);
    if (memcmp(ref.run.rounds[0].base_sha, killed.run.rounds[0].base_sha, 32) != 0 ||
        !fl_same_accepted(&ref.run.rounds[0], &killed.run.rounds[0]))
        fail_msg("round 1 differs from the reference's, though no kill came before it closed");
    assert_true(matched >= 1);
    fl_run_free(&ref.run);
    fl_run_free(&killed.run);
    fl_coord_free(&tmpl);
    sl_test_rmtree(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coordinator_killed),
    };
    if (argc > 1)
        kills_wanted = (int)strtol(argv[1], NULL, 10);
    if (argc > 2)
        rounds_wanted = (unsigned)strtoul(argv[2], NULL, 10);
    if (argc > 3)
        seed = strtoull(argv[3], NULL, 0);
    if (kills_wanted > 20)
        mean_gap_ms = 400;
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
