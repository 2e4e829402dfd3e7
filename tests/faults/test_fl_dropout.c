/*
 * Dropout matrix (issue #9, section 2): a fleet of simulated devices
 * (starling-agent --fleet --dropout P: a device drops out after the
 * download, never training nor reporting) against the starling-coordinator
 * program, one run per dropout rate, the runs side by side.
 *
 * Asserted for every rate:
 *   - the run completes: the task finishes all its rounds in time, the
 *     fleet and the coordinator stop cleanly on SIGTERM;
 *   - every finished round closed iff it met quorum (closed => reported >=
 *     quorum; abandoned => reported < quorum, which covers too few devices);
 *   - every round's reported count equals its stored updates; every
 *     acknowledged update (the devices' acks.log) is stored exactly once;
 *   - at 0%, every round closed with its target met (uploads already in
 *     flight when the target is reached are accepted too: reported may
 *     exceed it); the fleet's summary counts dropouts iff the rate > 0.
 * CI (no argument): logreg on a small split, 0/30/50/100%, structural
 * checks (at 100% every round is abandoned and the task still ends after
 * its configured rounds: invariant 2, no round hangs when every device is
 * gone).
 * `--slow`: lenet5 on the real Fashion-MNIST (skipped when it is missing),
 * 0/10/30/50%, and the test accuracy of the model after C closed rounds at
 * 30% is within 1 point of 0%'s after the same C (C = the smaller number of
 * closed rounds of the two runs), evaluated here on the 10,000 test images.
 */
#include <math.h>
#include <signal.h>
#include <sys/wait.h>

#include "../support/sl_test.h"
#include "fl_harness.h"
#include "starling/codec.h"
#include "starling/data.h"
#include "starling/nn.h"

static int slow;

typedef struct setting {
    double dropout;
    char name[32], state[700], log[700], rate[16];
    fl_coord c;
    int64_t task;
    pid_t fleet;
    int finished;
    double seconds;
    fl_run run;
    size_t acked, pending;
    unsigned long long dropped;
} setting;

/* The parameters of one run. */
typedef struct plan {
    const char *model;
    const char *data;
    unsigned devices, of, rounds;
    const char *config_fmt; /* %s name, %u rounds */
} plan;

static const plan ci_plan = {
    "logreg",
    NULL,
    10,
    10,
    6,
    "{\"name\":\"%s\",\"rounds\":%u,\"target\":5,\"quorum\":4,\"over_selection\":1.4,"
    "\"selection_window_ms\":500,\"report_deadline_ms\":2500,\"values\":\"fp16\","
    "\"density\":0.1,\"local_epochs\":1,\"batch\":16,\"local_lr\":0.05,\"seed\":5}",
};

static const plan slow_plan = {
    "lenet5",
    NULL,
    10,
    40,
    20,
    "{\"name\":\"%s\",\"rounds\":%u,\"target\":7,\"quorum\":4,\"over_selection\":1.43,"
    "\"selection_window_ms\":1000,\"report_deadline_ms\":20000,\"values\":\"fp16\","
    "\"density\":0.1,\"warmup_rounds\":2,\"warmup_density\":0.3,\"local_epochs\":1,"
    "\"batch\":32,\"local_lr\":0.05,\"local_momentum\":0.9,\"seed\":5}",
};

static void start(setting *st, const plan *p, const char *root, const char *data)
{
    char config[1024], devices[16], of[16], task[32];
    snprintf(st->name, sizeof st->name, "dropout-%02d", (int)lround(st->dropout * 100));
    fl_coord_init(&st->c, root, st->name);
    fl_coord_start(&st->c);
    snprintf(config, sizeof config, p->config_fmt, st->name, p->rounds);
    st->task = fl_create_task(&st->c, p->model, config);
    snprintf(st->state, sizeof st->state, "%s/%s-fleet", root, st->name);
    snprintf(st->log, sizeof st->log, "%s/%s-fleet.log", root, st->name);
    snprintf(st->rate, sizeof st->rate, "%.2f", st->dropout);
    snprintf(devices, sizeof devices, "%u", p->devices);
    snprintf(of, sizeof of, "%u", p->of);
    snprintf(task, sizeof task, "%lld", (long long)st->task);
    {
        const char *a[] = {"--coordinator",
                           st->c.url,
                           "--task",
                           task,
                           "--fleet",
                           devices,
                           "--of",
                           of,
                           "--partition",
                           "iid",
                           "--data",
                           data,
                           "--state-dir",
                           st->state,
                           "--enrolment-token-file",
                           st->c.enrol_file,
                           "--dropout",
                           st->rate,
                           "--seed",
                           "9",
                           "--retry-base",
                           "50ms",
                           "--max-wait",
                           "500ms",
                           "--request-timeout",
                           "20s",
                           "--log-level",
                           "debug",
                           NULL};
        st->fleet = fl_spawn_agent(a, st->log);
    }
}

/* The "dropped" count of the fleet's summary line (printed when it stops). */
static unsigned long long fleet_dropped(const char *log)
{
    void *text = NULL;
    size_t len = 0;
    char *line, *p;
    unsigned long long dropped;
    if (sl_fs_read_file(log, 64 << 20, &text, &len) != SL_OK)
        fail_msg("%s: cannot read the fleet's log", log);
    line = strstr(text, "fleet of ");
    if (line == NULL || (p = strstr(line, " dropped,")) == NULL)
        fail_msg("%s: no summary line", log);
    while (p > line && p[-1] >= '0' && p[-1] <= '9')
        p--;
    dropped = strtoull(p, NULL, 10);
    free(text);
    return dropped;
}

static void finish(setting *st, const plan *p)
{
    int code;
    sl_store *s;
    uint64_t stored = 0, missing = 0;
    kill(st->fleet, SIGTERM);
    code = ag_wait(st->fleet, 30000);
    fl_coord_stop(&st->c);
    if (!st->finished)
        fail_msg("%s: the task did not finish in time; see %s and %s", st->name, st->c.log,
                 st->log);
    if (code != 0)
        fail_msg("%s: the fleet ended with %d after SIGTERM; see %s", st->name, code, st->log);
    s = fl_open_store(st->c.data_dir);
    fl_read_run(s, st->task, &st->run);
    fl_check_round_count(&st->run, p->rounds, st->name);
    st->acked = fl_check_fleet_acks(s, st->state, p->devices, &st->pending);
    assert_int_equal(fl_check_quorum(&st->run), p->rounds);
    for (size_t i = 0; i < st->run.n; i++) {
        const sl_round_record *r = &st->run.rounds[i].rec;
        stored += st->run.rounds[i].n;
        missing += r->selected - (r->reported < r->selected ? r->reported : r->selected);
        if (st->dropout == 0 && (r->state != SL_ROUND_CLOSED || r->reported < r->target))
            fail_msg("%s: round no %lld ended in state %d with %u of %u reports, without dropout",
                     st->name, (long long)r->round_no, r->state, r->reported, r->target);
    }
    /* every device gone: every round abandoned, and the task still ends after its rounds */
    if (st->dropout >= 1 && st->run.closed != 0)
        fail_msg("%s: %llu rounds closed without a report", st->name,
                 (unsigned long long)st->run.closed);
    if (stored != st->acked + st->pending)
        fail_msg("%s: %llu updates stored, %zu acknowledged + %zu pending", st->name,
                 (unsigned long long)stored, st->acked, st->pending);
    /* the fault is really injected, and only when asked for */
    st->dropped = fleet_dropped(st->log);
    if ((st->dropout > 0) != (st->dropped > 0))
        fail_msg("%s: the fleet dropped out %llu times", st->name, st->dropped);
    sl_store_close(s);
    fprintf(stderr,
            "%s: %.1f s, %zu rounds: %llu closed, %llu abandoned; %llu dropouts, %llu selected "
            "devices did not report; %zu acknowledged\n",
            st->name, st->seconds, st->run.n, (unsigned long long)st->run.closed,
            (unsigned long long)st->run.abandoned, st->dropped, (unsigned long long)missing,
            st->acked);
}

/* Wait for every task to finish (or the deadline); runs side by side. */
static void wait_all(setting *sts, size_t n, double seconds)
{
    double t0 = fl_now(), end = t0 + seconds * sl_test_time_scale();
    size_t done = 0;
    while (done < n && fl_now() < end) {
        for (size_t i = 0; i < n; i++)
            if (!sts[i].finished && fl_task_finished(&sts[i].c) == 1) {
                sts[i].finished = 1;
                sts[i].seconds = fl_now() - t0;
                done++;
            }
        fl_sleep_ms(100);
    }
}

/* Test accuracy of version @version of @st's task. */
static double accuracy(setting *st, const plan *p, const sl_dataset *test, int64_t version)
{
    sl_store *s = fl_open_store(st->c.data_dir);
    sl_model_record m;
    sl_model *model = NULL;
    float *params;
    double acc = 0, loss = 0;
    assert_int_equal(sl_store_get_model(s, st->task, version, &m), SL_OK);
    assert_int_equal(sl_model_create(p->model, &model), SL_OK);
    params = malloc(sl_model_params(model) * sizeof *params);
    assert_non_null(params);
    assert_int_equal(
        sl_frame_decode_model(sl_model_layout(model), m.frame, m.frame_len, NULL, 0, params),
        SL_OK);
    assert_int_equal(sl_evaluate(model, params, test->x, test->y, NULL, test->n, 256, &acc, &loss),
                     SL_OK);
    free(params);
    sl_model_free(model);
    sl_store_model_free(&m);
    sl_store_close(s);
    return acc;
}

static void test_dropout_matrix(void **state)
{
    static const double ci_rates[] = {0, 0.3, 0.5, 1}, slow_rates[] = {0, 0.1, 0.3, 0.5};
    const plan *p = slow ? &slow_plan : &ci_plan;
    const double *rates = slow ? slow_rates : ci_rates;
    size_t n = 4;
    setting *sts = calloc(n, sizeof *sts);
    char root[512], data[600];
    (void)state;
    assert_non_null(sts);
    sl_test_mkdtemp(root, sizeof root, "fl_dropout");
    if (slow) {
        FILE *f;
        snprintf(data, sizeof data, "%s/train-images-idx3-ubyte.gz", SL_DATA_FASHION_MNIST_DIR);
        f = fopen(data, "rb");
        if (f == NULL) {
            sl_test_rmtree(root);
            free(sts);
            fprintf(stderr,
                    "skipped: the real Fashion-MNIST (%s, Debian dataset-fashion-mnist) "
                    "is not installed\n",
                    SL_DATA_FASHION_MNIST_DIR);
            skip();
        }
        fclose(f);
        snprintf(data, sizeof data, "%s", SL_DATA_FASHION_MNIST_DIR);
    } else {
        snprintf(data, sizeof data, "%s/fmnist", root);
        ag_make_data(data, p->of * 60, 50);
    }
    for (size_t i = 0; i < n; i++)
        sts[i].dropout = rates[i];
    if (slow) {
        /* one at a time: lenet5 keeps both cores busy */
        for (size_t i = 0; i < n; i++) {
            start(&sts[i], p, root, data);
            wait_all(&sts[i], 1, 900);
            finish(&sts[i], p);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            start(&sts[i], p, root, data);
        wait_all(sts, n, 60);
        for (size_t i = 0; i < n; i++)
            finish(&sts[i], p);
    }
    if (slow) {
        sl_dataset *test = NULL;
        char err[256];
        setting *zero = &sts[0], *thirty = &sts[2];
        uint64_t closed =
            zero->run.closed < thirty->run.closed ? zero->run.closed : thirty->run.closed;
        double a0, a30;
        if (sl_data_load_fashion_mnist(data, 0, &test, err, sizeof err) != SL_OK)
            fail_msg("test split: %s", err);
        assert_true(closed >= 1);
        a0 = accuracy(zero, p, test, 1 + (int64_t)closed);
        a30 = accuracy(thirty, p, test, 1 + (int64_t)closed);
        fprintf(stderr, "after %llu closed rounds: accuracy %.4f at 0%% dropout, %.4f at 30%%",
                (unsigned long long)closed, a0, a30);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "; %s final (%llu closed) %.4f", sts[i].name,
                    (unsigned long long)sts[i].run.closed,
                    accuracy(&sts[i], p, test, sts[i].run.final_version));
        fprintf(stderr, "\n");
        if (fabs(a30 - a0) > 0.01)
            fail_msg("accuracy at 30%% dropout %.4f is not within 1 point of 0%%'s %.4f", a30, a0);
        sl_dataset_free(test);
    }
    for (size_t i = 0; i < n; i++) {
        fl_run_free(&sts[i].run);
        fl_coord_free(&sts[i].c);
    }
    free(sts);
    sl_test_rmtree(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_matrix),
    };
    slow = argc > 1 && strcmp(argv[1], "--slow") == 0;
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
