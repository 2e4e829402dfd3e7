/*
 * Real network faults (issue #9, section 2): the starling-coordinator
 * program in one network namespace ("C"), a fleet of simulated devices
 * (starling-agent --fleet) in another ("A"), joined by a veth pair. Every
 * agent connection crosses the veth into netfault_proxy (in C, in this
 * process), which relays it to the coordinator on C's loopback. Faults:
 *   proxy   latency +- jitter per chunk, stalls, resets at random byte
 *           offsets up (mid-upload) or down (mid-download);
 *   kernel  nftables loss (numgen random, both directions, on A's veth),
 *           loss bursts (the loss rules come and go), tbf rate limits on
 *           both veth ends, the link set down and up every few seconds.
 * Each cell is a fresh pair of namespaces, coordinator and fleet (4
 * devices, logreg, a small Fashion-MNIST split).
 *
 * Asserted in every cell:
 *   - the fault was really there: the proxy delayed / stalled / reset, the
 *     nft counter dropped packets, the tbf queue hit its limit, the link
 *     went down (each cell checks its own), and the traffic crossed the
 *     veth (wire bytes >= the frame bytes the fleet moved);
 *   - every update arrives intact or is folded: every acks.log line is an
 *     update the store holds once for its (round, device), with the same
 *     SHA-256 (ag_check_acks); every stored update is acknowledged or is
 *     the pending upload of the stopped device; per device, every update
 *     made (generation) is accepted, folded or still pending, none
 *     discarded; acks.log lines == accepted; the fleet's summary agrees;
 *   - rounds keep closing: at least the cell's minimum of CLOSED rounds
 *     within its time budget; closed iff quorum; every round's reported
 *     count equals its stored updates; stored models are their digests;
 *   - no hang: the fleet and the coordinator stop cleanly on SIGTERM.
 * Bytes on the wire (veth counters: headers, retransmissions) and relayed
 * by the proxy (TCP payload) are printed against frame bytes (the fleet's
 * summary: update and model frames moved; and the stored update frames).
 *
 * `test_net_faults` runs the CI cells, `--slow` the full matrix, `--cell
 * a,b` named cells, `--seed N` another seed, `--keep` keeps the logs. Exit 77 (SKIPPED) with the
 * reason when network namespaces cannot be made.
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../support/sl_test.h"
#include "fl_harness.h"
#include "netfault_proxy.h"
#include "netns_env.h"
#include "netns_fleet.h"

#define DEVICES 4

typedef struct cell {
    const char *name;
    int ci; /* in the short (CI) list */
    /* proxy */
    unsigned delay_ms, jitter_ms, stall_ms;
    double stall_p, reset_up_p, reset_down_p;
    /* kernel */
    unsigned loss_pct;                        /* nft, each direction */
    unsigned burst_pct, burst_ms, between_ms; /* loss bursts */
    unsigned rate_kbit;                       /* tbf, each veth end */
    unsigned flap_down_ms, flap_up_ms;        /* link down / up */
    /* run */
    const char *request_timeout;
    unsigned stall_timeout_s; /* the agent's --stall-timeout */
    unsigned rounds, min_closed, deadline_ms;
    double budget_s;
} cell;

/* clang-format off */
static const cell cells[] = {
    /* name        ci  delay jit stall  stall_p up_p dn_p  loss burst b_ms betw rate flap_d flap_u  timeout stall_to rounds min deadline budget */
    {"clean",      0,    0,  0,     0,  0,    0,   0,     0,   0,    0,    0,   0,    0,    0,   "10s", 30,  4,  4,  8000,  60},
    {"delay200",   1,  200, 50,     0,  0,    0,   0,     0,   0,    0,    0,   0,    0,    0,   "10s", 30,  5,  5, 10000,  60},
    {"loss5",      1,    0,  0,     0,  0,    0,   0,     5,   0,    0,    0,   0,    0,    0,   "10s", 30,  5,  4, 10000,  60},
    {"loss20",     0,    0,  0,     0,  0,    0,   0,    20,   0,    0,    0,   0,    0,    0,   "20s", 30,  6,  3, 15000, 180},
    {"burst",      0,    0,  0,     0,  0,    0,   0,     0,  80, 1500, 3500,   0,    0,    0,   "10s", 30,  6,  4, 10000, 120},
    {"rate256",    0,    0,  0,     0,  0,    0,   0,     0,   0,    0,    0, 256,    0,    0,   "20s", 30,  6,  6, 15000, 120},
    {"stall",      0,    0,  0, 45000,  0.3,  0,   0,     0,   0,    0,    0,   0,    0,    0,  "120s", 30,  8,  4, 12000, 240},
    {"stall5",     1,    0,  0, 15000,  0.5,  0,   0,     0,   0,    0,    0,   0,    0,    0,   "60s",  5,  5,  4, 12000, 120},
    {"reset",      1,    0,  0,     0,  0,  0.8, 0.8,     0,   0,    0,    0,   0,    0,    0,   "10s", 30,  5,  4, 10000,  60},
    {"reset-up",   0,    0,  0,     0,  0,  0.8,   0,     0,   0,    0,    0,   0,    0,    0,   "10s", 30,  6,  4, 10000, 100},
    {"reset-down", 0,    0,  0,     0,  0,    0, 0.8,     0,   0,    0,    0,   0,    0,    0,   "10s", 30,  6,  4, 10000, 100},
    {"flap",       1,    0,  0,     0,  0,    0,   0,     0,   0,    0,    0,   0, 1000, 2000,   "10s", 30,  5,  4, 10000,  60},
};
/* clang-format on */
#define NCELLS (sizeof cells / sizeof cells[0])

static int slow, keep;
static const char *only;
static uint64_t seed = 0x5eedfa17;
static char data_dir[600], top[512];

/* What a cell measured (for the table printed at the end). */
typedef struct result {
    const cell *c;
    int ran, passed;
    double seconds;
    size_t rounds;
    uint64_t closed, abandoned;
    size_t acked, pending;
    unsigned long long folded, duplicates, frame_up, frame_down;
    uint64_t stored_bytes, wire_up, wire_down;
    nf_stats proxy;
    unsigned long long faults; /* drops / overlimits / flaps, per the cell's kind */
} result;
static result results[NCELLS];

/* Everything a cell made, for the teardown when an assertion jumps out. */
typedef struct cell_run {
    const cell *c;
    result *res;
    nn_env env;
    fl_coord coord;
    int coord_made;
    nf_proxy *proxy;
    nn_driver *driver;
    pid_t fleet;
    char dir[700], state[800], log[800], url[64];
} cell_run;
static cell_run *current;

/* ---- pieces ----------------------------------------------------------------------------- */

/* fl_coord_start() with the child tied to this process (PR_SET_PDEATHSIG). */
static void coord_start(fl_coord *c, const char *connection_timeout)
{
    char *argv[] = {(char *)SL_COORDINATOR_BIN,
                    "--listen",
                    c->listen,
                    "--data-dir",
                    c->data_dir,
                    "--insecure-http",
                    "--admin-token-file",
                    c->admin_file,
                    "--enrolment-token-file",
                    c->enrol_file,
                    "--device-rate",
                    "0",
                    "--grace",
                    "2s",
                    "--connection-timeout",
                    (char *)connection_timeout,
                    NULL};
    double end = fl_now() + 20.0 * sl_test_time_scale();
    c->pid = nn_spawn(NULL, argv, c->log);
    assert_true(c->pid > 0);
    c->starts++;
    while (fl_now() < end) {
        sl_client_response r;
        int status;
        if (fl_request(c, "GET", "/healthz", NULL, &r) == SL_OK) {
            long code = r.status;
            sl_client_response_free(&r);
            if (code == 200)
                return;
        }
        if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
            c->pid = 0;
            fail_msg("the coordinator exited with status %d; see %s", status, c->log);
        }
        fl_sleep_ms(20);
    }
    fail_msg("the coordinator did not answer /healthz in 20 s; see %s", c->log);
}

static void start_fleet(cell_run *r, int64_t task, unsigned cell_seed)
{
    char task_s[32], devices[16], seed_s[32], stall_s[16];
    char *argv[] = {(char *)SL_AGENT_BIN,
                    "--coordinator",
                    r->url,
                    "--task",
                    task_s,
                    "--fleet",
                    devices,
                    "--of",
                    devices,
                    "--partition",
                    "iid",
                    "--data",
                    data_dir,
                    "--state-dir",
                    r->state,
                    "--enrolment-token-file",
                    r->coord.enrol_file,
                    "--seed",
                    seed_s,
                    "--retry-base",
                    "100ms",
                    "--max-wait",
                    "1s",
                    "--max-attempts",
                    "50",
                    "--request-timeout",
                    (char *)r->c->request_timeout,
                    "--stall-timeout",
                    stall_s,
                    "--chunk",
                    "8K",
                    "--download-chunk",
                    "8K",
                    "--log-level",
                    "debug",
                    NULL};
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    snprintf(devices, sizeof devices, "%d", DEVICES);
    snprintf(seed_s, sizeof seed_s, "%u", cell_seed);
    snprintf(stall_s, sizeof stall_s, "%us", r->c->stall_timeout_s);
    r->fleet = nn_spawn(r->env.ns_a, argv, r->log);
    assert_true(r->fleet > 0);
}

/* The kernel's part of the cell: nft loss rules, tbf, drivers. */
static void kernel_faults(cell_run *r)
{
    const cell *c = r->c;
    const nn_env *e = &r->env;
    char nft[900], cmd_on[1024], cmd_off[1024];
    if (c->loss_pct > 0 || c->burst_pct > 0) {
        FILE *f;
        /* a named counter survives the bursts' rule flushes */
        snprintf(nft, sizeof nft, "%s/loss.nft", r->dir);
        f = fopen(nft, "w");
        assert_non_null(f);
        fprintf(f, "table inet slnet {\n  counter drops { }\n"
                   "  chain in { type filter hook input priority 0; policy accept; }\n"
                   "  chain out { type filter hook output priority 0; policy accept; }\n}\n");
        fclose(f);
        assert_int_equal(nn_sh("ip netns exec %s nft -f %s", e->ns_a, nft), 0);
        snprintf(cmd_on, sizeof cmd_on,
                 "ip netns exec %s nft add rule inet slnet in iifname %s numgen random mod 100 "
                 "'<' %u counter name drops drop && "
                 "ip netns exec %s nft add rule inet slnet out oifname %s numgen random mod 100 "
                 "'<' %u counter name drops drop",
                 e->ns_a, e->veth_a, c->loss_pct ? c->loss_pct : c->burst_pct, e->ns_a, e->veth_a,
                 c->loss_pct ? c->loss_pct : c->burst_pct);
        snprintf(cmd_off, sizeof cmd_off,
                 "ip netns exec %s nft flush chain inet slnet in && "
                 "ip netns exec %s nft flush chain inet slnet out",
                 e->ns_a, e->ns_a);
        if (c->loss_pct > 0)
            assert_int_equal(nn_sh("%s", cmd_on), 0);
        else
            r->driver = nn_driver_start(cmd_on, c->burst_ms, cmd_off, c->between_ms);
    }
    if (c->rate_kbit > 0) {
        assert_int_equal(nn_sh("tc -n %s qdisc add dev %s root tbf rate %ukbit burst 32kbit "
                               "latency 400ms && tc -n %s qdisc add dev %s root tbf rate %ukbit "
                               "burst 32kbit latency 400ms",
                               e->ns_a, e->veth_a, c->rate_kbit, e->ns_c, e->veth_c, c->rate_kbit),
                         0);
    }
    if (c->flap_down_ms > 0) {
        snprintf(cmd_on, sizeof cmd_on, "ip -n %s link set dev %s down", e->ns_a, e->veth_a);
        snprintf(cmd_off, sizeof cmd_off, "ip -n %s link set dev %s up", e->ns_a, e->veth_a);
        r->driver = nn_driver_start(cmd_on, c->flap_down_ms, cmd_off, c->flap_up_ms);
    }
    if ((c->burst_pct > 0 || c->flap_down_ms > 0) && r->driver == NULL)
        fail_msg("%s: could not start the fault driver", c->name);
}

static int sum_frames(void *ctx, int64_t device_id, const void *frame, size_t len,
                      uint32_t num_samples, const uint8_t *sha256)
{
    (void)device_id;
    (void)frame;
    (void)num_samples;
    (void)sha256;
    *(uint64_t *)ctx += len;
    return 0;
}

/* ---- one cell --------------------------------------------------------------------------- */

static void stop_all(cell_run *r)
{
    if (r->driver != NULL) {
        nn_driver_stop(r->driver);
        r->driver = NULL;
    }
    if (r->fleet > 0) {
        kill(r->fleet, SIGKILL);
        waitpid(r->fleet, NULL, 0);
        r->fleet = 0;
    }
    if (r->coord_made) {
        fl_coord_free(&r->coord); /* SIGKILL if still running */
        r->coord_made = 0;
    }
    nf_proxy_stop(r->proxy);
    r->proxy = NULL;
    nn_teardown(&r->env);
}

static void run_cell(cell_run *r, unsigned index)
{
    const cell *c = r->c;
    result *res = r->res;
    char why[256], config[700], err[200], tag[8];
    nf_options po;
    nf_stats ps;
    nf_fleet_summary fs;
    uint64_t rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
    double t0, end, last_poll = 0;
    int finished = 0, code;
    int64_t task;
    sl_store *s;
    fl_run run;
    uint64_t stored = 0;
    unsigned cell_seed = (unsigned)(seed + index);

    snprintf(tag, sizeof tag, "%u", index);
    if (nn_setup(&r->env, tag, why, sizeof why) != 0)
        fail_msg("%s: %s", c->name, why);
    if (nn_enter_c(&r->env) != 0)
        fail_msg("%s: cannot enter %s", c->name, r->env.ns_c);
    snprintf(r->dir, sizeof r->dir, "%s/%s", top, c->name);
    assert_int_equal(mkdir(r->dir, 0700), 0);
    snprintf(r->state, sizeof r->state, "%s/fleet", r->dir);
    snprintf(r->log, sizeof r->log, "%s/fleet.log", r->dir);

    /* the coordinator on C's loopback; the proxy on C's veth address */
    fl_coord_init(&r->coord, r->dir, "coord");
    r->coord_made = 1;
    /* in the stall cells only the agent's stall timeout may end a
     * stall: the coordinator's idle timeout (default 30 s) waits longer */
    coord_start(&r->coord, c->stall_p > 0 ? "90s" : "30s");
    snprintf(config, sizeof config,
             "{\"name\":\"net-%s\",\"rounds\":%u,\"target\":%d,\"quorum\":2,"
             "\"over_selection\":1,\"selection_window_ms\":1500,\"report_deadline_ms\":%u,"
             "\"values\":\"fp32\",\"density\":0.5,\"local_epochs\":1,\"batch\":16,"
             "\"local_lr\":0.05,\"seed\":11}",
             c->name, c->rounds, DEVICES, c->deadline_ms);
    task = fl_create_task(&r->coord, "logreg", config);
    memset(&po, 0, sizeof po);
    po.listen_host = r->env.addr_c;
    po.target_host = "127.0.0.1";
    po.target_port = (unsigned)strtoul(strchr(r->coord.listen, ':') + 1, NULL, 10);
    po.delay_ms = c->delay_ms;
    po.jitter_ms = c->jitter_ms;
    po.stall_p = c->stall_p;
    po.stall_ms = c->stall_ms;
    po.stall_span = 48 * 1024;
    po.reset_up_p = c->reset_up_p;
    po.reset_down_p = c->reset_down_p;
    po.reset_span = 12 * 1024; /* below a logreg model (31 kB): a reset download fires */
    po.seed = seed * 31 + index;
    if (nf_proxy_start(&po, &r->proxy, err, sizeof err) != 0)
        fail_msg("%s: proxy: %s", c->name, err);
    snprintf(r->url, sizeof r->url, "http://%s:%u", r->env.addr_c, nf_proxy_port(r->proxy));
    kernel_faults(r);
    assert_int_equal(nn_if_bytes(r->env.veth_c, &rx0, &tx0), 0);

    t0 = fl_now();
    start_fleet(r, task, cell_seed);
    end = t0 + c->budget_s * sl_test_time_scale();
    while (fl_now() < end) {
        double now = fl_now();
        if (now - last_poll >= 0.2) {
            last_poll = now;
            if (fl_task_finished(&r->coord) == 1) {
                finished = 1;
                break;
            }
        }
        if (waitpid(r->fleet, &code, WNOHANG) == r->fleet) {
            r->fleet = 0;
            fail_msg("%s: the fleet exited (status %d) during the run; see %s", c->name, code,
                     r->log);
        }
        fl_sleep_ms(20);
    }
    res->seconds = fl_now() - t0;
    res->ran = 1;
    if (c->stall_p > 0) {
        /* let every stall end, by the client giving up or by running its course */
        double until = fl_now() + (c->stall_ms + 5000) / 1000.0 * sl_test_time_scale();
        nf_proxy_stats(r->proxy, &ps);
        while (ps.stall_aborts + ps.stalls_outlived < ps.stalls && fl_now() < until) {
            fl_sleep_ms(100);
            nf_proxy_stats(r->proxy, &ps);
        }
    }

    /* the faults' counters, then the link made whole so that stopping measures no fault */
    if (r->driver != NULL) {
        res->faults = nn_driver_stop(r->driver);
        r->driver = NULL;
    }
    if (c->loss_pct > 0 || c->burst_pct > 0) {
        res->faults = nn_nft_counter(r->env.ns_a, "slnet", "drops");
        nn_sh("ip netns exec %s nft delete table inet slnet", r->env.ns_a);
    }
    if (c->rate_kbit > 0)
        res->faults = nn_tbf_overlimits(r->env.ns_a, r->env.veth_a) +
                      nn_tbf_overlimits(r->env.ns_c, r->env.veth_c);
    kill(r->fleet, SIGTERM);
    code = ag_wait(r->fleet, 30000);
    r->fleet = 0;
    if (code != 0)
        fail_msg("%s: the fleet ended with %d after SIGTERM (-1: still running after 30 s); see "
                 "%s",
                 c->name, code, r->log);
    assert_int_equal(nn_if_bytes(r->env.veth_c, &rx1, &tx1), 0);
    res->wire_up = rx1 - rx0;
    res->wire_down = tx1 - tx0;
    nf_proxy_stats(r->proxy, &ps);
    res->proxy = ps;
    fl_coord_stop(&r->coord);

    /* ---- the run, read back ---- */
    nf_read_fleet_summary(r->log, &fs);
    s = fl_open_store(r->coord.data_dir);
    fl_read_run(s, task, &run);
    res->rounds = run.n;
    res->closed = run.closed;
    res->abandoned = run.abandoned;
    res->acked = fl_check_fleet_acks(s, r->state, DEVICES, &res->pending);
    for (size_t i = 0; i < run.n; i++) {
        stored += run.rounds[i].n;
        assert_int_equal(
            sl_store_foreach_update(s, run.rounds[i].rec.id, sum_frames, &res->stored_bytes), 0);
    }
    fl_check_quorum(&run);
    sl_store_close(s);
    res->folded = nf_check_devices(c->name, r->state, DEVICES, r->log);
    res->duplicates = fs.duplicates;
    res->frame_up = fs.up;
    res->frame_down = fs.down;
    fprintf(stderr,
            "%s: %.1f s, %s, %zu rounds (%" PRIu64 " closed, %" PRIu64 " abandoned), %zu "
            "acknowledged, %zu pending, %llu folded, %llu duplicates; proxy: %" PRIu64
            " connections, %" PRIu64 " delayed chunks, %" PRIu64 " stalls (%" PRIu64
            " given up after %" PRIu64 "..%" PRIu64 " ms), %" PRIu64 "/%" PRIu64
            " resets up/down, %" PRIu64 " passed on; kernel faults %llu\n",
            c->name, res->seconds, finished ? "finished" : "budget over", run.n, run.closed,
            run.abandoned, res->acked, res->pending, res->folded, res->duplicates, ps.connections,
            ps.chunks_delayed, ps.stalls, ps.stall_aborts, ps.stall_abort_min_ms,
            ps.stall_abort_max_ms, ps.resets_up, ps.resets_down, ps.peer_resets, res->faults);
    fprintf(stderr,
            "%s: bytes up: wire %" PRIu64 ", proxy %" PRIu64 ", frames sent %llu, stored %" PRIu64
            "; down: wire %" PRIu64 ", proxy %" PRIu64 ", frames %llu\n",
            c->name, res->wire_up, ps.bytes_up, fs.up, res->stored_bytes, res->wire_down,
            ps.bytes_down, fs.down);

    /* every stored update is acknowledged, or the pending upload of a stopped device */
    if (stored != res->acked + res->pending)
        fail_msg("%s: %" PRIu64 " updates stored, %zu acknowledged + %zu pending (a stored update "
                 "its device folded or lost?)",
                 c->name, stored, res->acked, res->pending);
    if (fs.devices != DEVICES || fs.failed != 0 || fs.discarded != 0)
        fail_msg("%s: fleet summary: %u devices, %u failed, %llu discarded", c->name, fs.devices,
                 fs.failed, fs.discarded);
    if (fs.accepted != res->acked || fs.folded != res->folded)
        fail_msg("%s: the fleet reports %llu accepted and %llu folded; its devices' files say %zu "
                 "and %llu",
                 c->name, fs.accepted, fs.folded, res->acked, res->folded);
    /* rounds keep closing */
    if (run.closed < c->min_closed)
        fail_msg("%s: %" PRIu64 " rounds closed in %.0f s (%zu ran), at least %u expected; see %s "
                 "and %s",
                 c->name, run.closed, c->budget_s, run.n, c->min_closed, r->coord.log, r->log);
    if (c->min_closed == c->rounds && !finished)
        fail_msg("%s: the task did not finish its %u rounds in %.0f s", c->name, c->rounds,
                 c->budget_s);
    /* the traffic crossed the faulty link and the fault was there */
    if (res->wire_up < fs.up || res->wire_down < fs.down || ps.bytes_up < fs.up ||
        ps.bytes_down < fs.down || res->acked == 0)
        fail_msg("%s: the frames (%llu up, %llu down) did not all cross the veth (%" PRIu64
                 ", %" PRIu64 ") and the proxy (%" PRIu64 ", %" PRIu64 "), or nothing arrived",
                 c->name, fs.up, fs.down, res->wire_up, res->wire_down, ps.bytes_up, ps.bytes_down);
    if (c->delay_ms > 0 && ps.chunks_delayed == 0)
        fail_msg("%s: nothing was delayed", c->name);
    if (c->stall_p > 0) {
        /* the agent's --stall-timeout (libcurl's low-speed timer: below 16 B/s for that
         * long, measured over curl's ~5 s speed window, so up to ~5 s more after the last
         * bytes) ends every stall, well before the stall would */
        uint64_t lo = (uint64_t)c->stall_timeout_s * 800;
        if (ps.stalls == 0)
            fail_msg("%s: no stall happened", c->name);
        if (ps.stall_aborts != ps.stalls || ps.stall_abort_min_ms < lo ||
            ps.stall_abort_max_ms >= c->stall_ms)
            fail_msg("%s: %" PRIu64 " stalls of %u ms: the client gave up on %" PRIu64
                     " (after %" PRIu64 "..%" PRIu64 " ms), %" PRIu64
                     " ran their course; expected every one given up after about %u s (the "
                     "agent's --stall-timeout); see %s",
                     c->name, ps.stalls, c->stall_ms, ps.stall_aborts, ps.stall_abort_min_ms,
                     ps.stall_abort_max_ms, ps.stalls_outlived, c->stall_timeout_s, r->log);
    }
    if (c->reset_up_p > 0 && ps.resets_up == 0)
        fail_msg("%s: no upload was reset", c->name);
    if (c->reset_down_p > 0 && ps.resets_down == 0)
        fail_msg("%s: no download was reset", c->name);
    if ((c->loss_pct > 0 || c->burst_pct > 0 || c->rate_kbit > 0 || c->flap_down_ms > 0) &&
        res->faults == 0)
        fail_msg("%s: the kernel fault never acted (no drop, overlimit or flap)", c->name);
    fl_run_free(&run);
    res->passed = 1;
}

static void test_cell(void **state)
{
    cell_run *r = calloc(1, sizeof *r);
    unsigned index = (unsigned)(uintptr_t)*state;
    assert_non_null(r);
    r->c = &cells[index];
    r->res = &results[index];
    r->res->c = r->c;
    current = r;
    run_cell(r, index);
    stop_all(r);
    current = NULL;
    free(r);
}

/* After a failed assertion too: nothing of the cell survives it. */
static int cell_teardown(void **state)
{
    (void)state;
    if (current != NULL) {
        stop_all(current);
        free(current);
        current = NULL;
    }
    return 0;
}

static int wanted(const cell *c)
{
    if (only != NULL) {
        size_t n = strlen(c->name);
        for (const char *p = only; (p = strstr(p, c->name)) != NULL; p += n)
            if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
                return 1;
        return 0;
    }
    return slow || c->ci;
}

static void print_table(void)
{
    fprintf(stderr, "\n%-11s %-4s %6s %6s %5s %5s %6s %8s %8s %8s %6s %8s %8s %6s\n", "cell", "ok",
            "secs", "closed", "acked", "fold", "conns", "frm-up", "wire-up", "prx-up", "w/f up",
            "frm-dn", "wire-dn", "w/f dn");
    for (size_t i = 0; i < NCELLS; i++) {
        const result *x = &results[i];
        if (!x->ran)
            continue;
        fprintf(stderr,
                "%-11s %-4s %6.1f %6" PRIu64 " %5zu %5llu %6" PRIu64 " %8llu %8" PRIu64 " %8" PRIu64
                " %6.2f %8llu %8" PRIu64 " %6.2f\n",
                x->c->name, x->passed ? "yes" : "NO", x->seconds, x->closed, x->acked, x->folded,
                x->proxy.connections, x->frame_up, x->wire_up, x->proxy.bytes_up,
                x->frame_up ? (double)x->wire_up / (double)x->frame_up : 0.0, x->frame_down,
                x->wire_down, x->frame_down ? (double)x->wire_down / (double)x->frame_down : 0.0);
    }
}

int main(int argc, char **argv)
{
    struct CMUnitTest tests[NCELLS];
    size_t n = 0;
    char why[256];
    int rc;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--slow") == 0)
            slow = 1;
        else if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else if (strcmp(argv[i], "--cell") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--slow] [--cell a,b] [--seed N] [--keep]\n", argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (!nn_available(why, sizeof why)) {
        printf("SKIPPED: real network faults need network namespaces: %s\n", why);
        return 77;
    }
    if (nn_sh("command -v nft >/dev/null 2>&1 && command -v tc >/dev/null 2>&1") != 0) {
        printf("SKIPPED: `nft` or `tc` is missing (packages nftables, iproute2: run "
               "deploy/install-deps.sh)\n");
        return 77;
    }
    for (size_t i = 0; i < NCELLS; i++) {
        if (!wanted(&cells[i]))
            continue;
        tests[n].name = cells[i].name;
        tests[n].test_func = test_cell;
        tests[n].setup_func = NULL;
        tests[n].teardown_func = cell_teardown;
        tests[n].initial_state = (void *)(uintptr_t)i;
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "no cell named %s\n", only);
        return 2;
    }
    sl_test_mkdtemp(top, sizeof top, "net_faults");
    snprintf(data_dir, sizeof data_dir, "%s/fmnist", top);
    ag_make_data(data_dir, DEVICES * 150, 50);
    fprintf(stderr, "seed %#llx, %s\n", (unsigned long long)seed,
            slow ? "full matrix" : "CI cells");
    rc = _cmocka_run_group_tests("net_faults", tests, n, NULL, NULL);
    print_table();
    if (rc == 0 && !keep)
        sl_test_rmtree(top);
    else
        fprintf(stderr, "logs kept in %s\n", top);
    return rc;
}
