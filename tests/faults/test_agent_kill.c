/*
 * The device agent killed with SIGKILL at random instants of its life
 * (enrolment, check-in, download, training, persisting, mid-upload, after
 * an answer), restarted from its state directory each time, against a
 * coordinator that keeps running (in this process). Three agent processes
 * work on one task; a killer picks one and a phase of its life to hit
 * (right after its start, or shortly after a given event in its log).
 *
 * Afterwards (invariants of DESIGN.md: an acknowledged update is never lost
 * and never counted twice; an agent resumes from its directory):
 *   - every line of every acks.log is an update the store holds, with that
 *     update id, exactly once for its (round, device); no (round, device)
 *     is acknowledged twice;
 *   - every finished round's reported count equals the updates stored;
 *   - every stored update is acknowledged in an acks.log, or is the
 *     pending upload of an agent stopped before it heard the receipt;
 *   - every state directory opens again (key, model, residual, pending);
 *   - the agents made progress despite the kills.
 * `test_agent_kill <seconds> <max kills>` changes the run (default 35 s, 100).
 */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "../integration/agent_harness.h"
#include "../support/sl_test.h"

#define AGENTS 3

static const char *const phases[] = {"start",  "enrolled",  "checkin",  "model",
                                     "epoch",  "prepared",  "progress", "accepted",
                                     "folded", "discarded", "other"};
#define NPHASES (sizeof phases / sizeof phases[0])

static double seconds = 35;
static int max_kills = 100;

/* The last event an agent logged since byte @from (its current life):
 * where in its life the kill hit. */
static size_t last_phase(const char *log, long from)
{
    char tail[4097], *p, *last = NULL;
    size_t n = 0;
    FILE *f = fopen(log, "rb");
    if (f == NULL)
        return 0;
    if (fseek(f, -4096, SEEK_END) != 0 || ftell(f) < from)
        fseek(f, from, SEEK_SET);
    n = fread(tail, 1, 4096, f);
    fclose(f);
    tail[n] = '\0';
    for (p = tail; (p = strstr(p, "event=")) != NULL; p += 6)
        last = p + 6;
    if (last == NULL)
        return 0;
    for (size_t i = 1; i + 1 < NPHASES; i++)
        if (strncmp(last, phases[i], strlen(phases[i])) == 0 && last[strlen(phases[i])] == ' ')
            return i;
    return NPHASES - 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n = 0;
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fclose(f);
    }
    return n;
}

/* Wait until the log shows "event=<phase> " after byte @from (at most @ms). */
static int wait_event(const char *log, long from, const char *phase, int ms)
{
    char needle[64];
    snprintf(needle, sizeof needle, "event=%s ", phase);
    for (int waited = 0; waited < ms; waited += 5) {
        FILE *f = fopen(log, "rb");
        char buf[65536];
        size_t n = 0;
        if (f != NULL) {
            if (fseek(f, from, SEEK_SET) == 0)
                n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
        }
        buf[n] = '\0';
        if (strstr(buf, needle) != NULL)
            return 1;
        sleep_ms(5);
    }
    return 0;
}

static void test_kill_agents(void **state)
{
    char dir[512], data_dir[600], task_s[32], client_s[AGENTS][8], states[AGENTS][600];
    char logs[AGENTS][600];
    const char *args[AGENTS][40];
    pid_t pids[AGENTS];
    long offsets[AGENTS] = {0};
    unsigned hist[NPHASES] = {0};
    uint64_t rng = 0x5eed, updates, closed;
    size_t acked = 0, in_flight = 0;
    ag_coord c;
    int64_t task;
    int kills = 0;
    double end;
    (void)state;

    sl_test_mkdtemp(dir, sizeof dir, "agent_kill");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ag_make_data(data_dir, AGENTS * 150, 50);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          "{\"name\":\"kill\",\"target\":3,\"quorum\":1,\"over_selection\":1,"
                          "\"selection_window_ms\":300,\"report_deadline_ms\":4000,"
                          "\"values\":\"fp16\",\"density\":0.05,\"local_epochs\":1,"
                          "\"batch\":32,\"local_lr\":0.05}");
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    for (int k = 0; k < AGENTS; k++) {
        const char *a[] = {"--coordinator",
                           c.url,
                           "--task",
                           task_s,
                           "--data",
                           data_dir,
                           "--partition",
                           "iid",
                           "--of",
                           "3",
                           "--client",
                           client_s[k],
                           "--state-dir",
                           states[k],
                           "--enrolment-token-file",
                           c.enrol_file,
                           "--retry-base",
                           "20ms",
                           "--max-wait",
                           "1s",
                           "--chunk",
                           "4K",
                           "--request-timeout",
                           "5s",
                           "--log-level",
                           "debug",
                           NULL};
        snprintf(client_s[k], sizeof client_s[k], "%d", k);
        snprintf(states[k], sizeof states[k], "%s/agent-%d", dir, k);
        snprintf(logs[k], sizeof logs[k], "%s/agent-%d.log", dir, k);
        memcpy(args[k], a, sizeof a);
        pids[k] = ag_spawn_agent(args[k], logs[k]);
    }
    /* each kill aims at a phase of the agent's life: right after a start
     * (data, key, enrolment), or a little after an event (check-in, model,
     * epoch, prepared, upload progress, accepted), plus a random delay */
    end = now_s() + seconds;
    while (now_s() < end && kills < max_kills) {
        static const char *const targets[] = {"start",    "checkin",  "model",   "epoch",
                                              "prepared", "progress", "accepted"};
        int k = (int)(sl_test_rand(&rng) % AGENTS);
        size_t t = (size_t)(sl_test_rand(&rng) % (sizeof targets / sizeof targets[0]));
        if (t == 0)
            sleep_ms((long)(sl_test_rand(&rng) % 60));
        else if (wait_event(logs[k], offsets[k], targets[t], 1000))
            sleep_ms((long)(sl_test_rand(&rng) % 40));
        hist[last_phase(logs[k], offsets[k])]++;
        kill(pids[k], SIGKILL);
        waitpid(pids[k], NULL, 0);
        kills++;
        offsets[k] = file_size(logs[k]);
        pids[k] = ag_spawn_agent(args[k], logs[k]);
    }
    sleep_ms(300); /* the last ones restarted have their SIGTERM handler */
    for (int k = 0; k < AGENTS; k++)
        kill(pids[k], SIGTERM);
    for (int k = 0; k < AGENTS; k++) {
        int code = ag_wait(pids[k], 15000);
        if (code != 0)
            fail_msg("agent %d ended with %d after SIGTERM", k, code);
    }
    fprintf(stderr, "%d kills; the last event before each:", kills);
    for (size_t i = 0; i < NPHASES; i++)
        if (hist[i] > 0)
            fprintf(stderr, " %s %u", phases[i], hist[i]);
    fprintf(stderr, "\n");

    ag_coord_stop_server(&c);
    for (int k = 0; k < AGENTS; k++) {
        ag_ack *acks;
        size_t n = ag_read_acks(states[k], &acks);
        sl_agent_options o;
        sl_agent *a = NULL;
        char err[256];
        uint8_t sha[32];
        int64_t round;
        acked += ag_check_acks(&c, acks, n);
        if (ag_pending(states[k], &round, sha) &&
            ag_stored(&c, round, ag_device_id(states[k]), sha))
            in_flight++;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++)
                assert_true(acks[i].gen != acks[j].gen);
        free(acks);
        /* the directory opens again, whatever instant the last kill hit */
        sl_agent_options_default(&o);
        o.coordinator = c.url;
        o.task_id = task;
        o.state_dir = states[k];
        if (sl_agent_create(&o, &a, err, sizeof err) != SL_OK)
            fail_msg("agent %d's state does not open: %s", k, err);
        sl_agent_free(a);
    }
    ag_count_task(&c, task, &updates, &closed);
    fprintf(stderr,
            "%zu acknowledged updates, %zu stored and pending, %llu stored, %llu rounds closed, "
            "version %lld\n",
            acked, in_flight, (unsigned long long)updates, (unsigned long long)closed,
            (long long)ag_model_version(&c, task));
    assert_true(kills >= 20 || kills >= max_kills);
    /* every stored update is acknowledged, or pending in a stopped agent
     * (its next run gets the receipt): nothing stored is unaccounted for */
    assert_int_equal(updates, acked + in_flight);
    assert_true(acked >= 3);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_agents),
    };
    if (argc > 1)
        seconds = strtod(argv[1], NULL);
    if (argc > 2)
        max_kills = (int)strtol(argv[2], NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
