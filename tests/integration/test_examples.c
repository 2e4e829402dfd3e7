/*
 * test_examples.c - the examples of deploy/examples, end to end: `test_examples NAME`
 * runs deploy/examples/NAME/prepare.sh into a temporary directory (--small where the
 * example has it), checks that the data contract it computes is the committed one
 * (the standardisation statistics included, except where --small changes them), and
 * trains the example's task (dense updates) for a few rounds through the real programs with
 * `starling bench fl --task ... --json` (coordinator, evaluator on the test source,
 * a fleet of 10 on the train source): every run must finish, the evaluator's figure
 * of the last version must beat the initial model's (accuracy up, or RMSE down), and
 * the rounds must carry the devices' federated evaluation.
 *
 * Exit status 77 (ctest: skipped) when prepare.sh says a Debian package is missing
 * (it exits 77 and names it); deploy/install-deps.sh installs them all.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

extern char **environ;

#define EXAMPLES SL_SOURCE_DIR "/deploy/examples"

static const char *example; /* argv[1] */
static int skipped;

/* Run @argv with stdout and stderr into @log; the exit status, or -1. */
static int run(char *const argv[], const char *log)
{
    posix_spawn_file_actions_t fa;
    pid_t pid;
    int status, rc;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)) != NULL) {
        size_t got = fread(text, 1, (size_t)n, f);
        text[got] = '\0';
    }
    fclose(f);
    return text;
}

static void show(const char *path)
{
    char *text = slurp(path);
    fprintf(stderr, "---- %s\n%s\n----\n", path, text ? text : "(unreadable)");
    free(text);
}

static cJSON *parse_file(const char *path)
{
    char *text = slurp(path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    return doc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* @a and @b the same JSON, numbers within a relative 1e-6; members named in @skip (JSON
 * paths, "preprocess.standardize") not compared. @path: where we are. */
static int same_json(const cJSON *a, const cJSON *b, const char *path, const char *skip)
{
    char sub[256];
    if (skip != NULL && strcmp(path, skip) == 0)
        return 1;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
        double x = a->valuedouble, y = b->valuedouble;
        if (fabs(x - y) <= 1e-6 * fmax(fabs(x), fabs(y)) + 1e-12)
            return 1;
        fprintf(stderr, "%s: %.9g here, %.9g in the committed contract\n", path, x, y);
        return 0;
    }
    if (cJSON_IsString(a) && cJSON_IsString(b)) {
        if (strcmp(a->valuestring, b->valuestring) == 0)
            return 1;
        fprintf(stderr, "%s: \"%s\" here, \"%s\" committed\n", path, a->valuestring,
                b->valuestring);
        return 0;
    }
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        int n = cJSON_GetArraySize(a);
        if (n != cJSON_GetArraySize(b)) {
            fprintf(stderr, "%s: %d entries here, %d committed\n", path, n, cJSON_GetArraySize(b));
            return 0;
        }
        for (int i = 0; i < n; i++) {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            if (!same_json(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i), sub, skip))
                return 0;
        }
        return 1;
    }
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *m;
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) {
            fprintf(stderr, "%s: members differ\n", path[0] ? path : "(top)");
            return 0;
        }
        cJSON_ArrayForEach(m, a)
        {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", m->string);
            if (!same_json(m, cJSON_GetObjectItemCaseSensitive(b, m->string), sub, skip))
                return 0;
        }
        return 1;
    }
    if ((cJSON_IsBool(a) && cJSON_IsBool(b) && cJSON_IsTrue(a) == cJSON_IsTrue(b)) ||
        (cJSON_IsNull(a) && cJSON_IsNull(b)))
        return 1;
    fprintf(stderr, "%s: of another type here than committed\n", path[0] ? path : "(top)");
    return 0;
}

/* The examples with a --small preparation, and whether --small changes their statistics. */
static int has_small(const char *name, int *stats_change)
{
    *stats_change = strcmp(name, "kws") == 0; /* fmnist-png's come from the full subset */
    return strcmp(name, "kws") == 0 || strcmp(name, "fmnist-png") == 0;
}

static void test_example(void **state)
{
    char dir[1024], out[1100], log[1300], prep[1200], runs[1200], contract[1200], task[1200];
    const char *base = getenv("SL_TEST_TMPDIR");
    int stats_change = 0, small = has_small(example, &stats_change), rc;
    cJSON *got, *want, *doc;
    const cJSON *runs_j, *run0, *rounds, *last;
    int regression;
    double initial, final;
    (void)state;

    snprintf(dir, sizeof dir, "%s/example-%s.XXXXXX", base && base[0] ? base : "/tmp", example);
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/data", dir);
    snprintf(log, sizeof log, "%s/prepare.log", dir);
    snprintf(prep, sizeof prep, "%s/%s/prepare.sh", EXAMPLES, example);
    {
        char *argv[] = {"bash", prep, out, small ? "--small" : NULL, NULL};
        rc = run(argv, log);
    }
    if (rc == 77) {
        show(log);
        skipped = 1;
        skip();
    }
    if (rc != 0)
        show(log);
    assert_int_equal(rc, 0);

    /* the contract it computed is the committed one */
    snprintf(contract, sizeof contract, "%s/%s/contract.json", EXAMPLES, example);
    snprintf(log, sizeof log, "%s/contract.json", out);
    got = parse_file(log);
    want = parse_file(contract);
    assert_non_null(got);
    assert_non_null(want);
    assert_true(same_json(got, want, "", small && stats_change ? "preprocess.standardize" : NULL));
    cJSON_Delete(got);
    cJSON_Delete(want);

    /* a few rounds through the real programs */
    snprintf(task, sizeof task, "%s/%s/task.json", EXAMPLES, example);
    snprintf(runs, sizeof runs, "%s/runs", dir);
    snprintf(log, sizeof log, "%s/bench.json", dir);
    {
        /* the PyTorch side once (wine: the smallest), where python3-torch is installed; the
         * task's own updates where the task sets its compression (the tabular examples: dense;
         * fmnist-png: ternary at 10%), dense updates where it leaves it to the coordinator
         * (co2, kws): top-k of 1% needs more than 3 rounds on the small sets to move surely
         * (README: the benchmark runs both); kws's small set (480 clips) takes more local epochs
         * to leave chance in 3 rounds */
        char *argv[20];
        size_t n = 0;
        argv[n++] = SL_STARLING_BIN;
        argv[n++] = "bench";
        argv[n++] = "fl";
        argv[n++] = "--task";
        argv[n++] = task;
        argv[n++] = "--data-dir";
        argv[n++] = out;
        argv[n++] = "--rounds";
        argv[n++] = "3";
        argv[n++] = "--settings";
        /* co2 also runs a setting that names the senders' mean's fade (the task file's
         * configuration names the default one: the setting's replaces it) */
        argv[n++] = strcmp(example, "co2") == 0   ? "dense,ternary@0.01@residual@sm6:0.5"
                    : strcmp(example, "kws") == 0 ? "dense"
                                                  : "task";
        argv[n++] = "--dir";
        argv[n++] = runs;
        argv[n++] = "--json";
        if (strcmp(example, "wine") != 0)
            argv[n++] = "--no-torch";
        if (strcmp(example, "kws") == 0) {
            argv[n++] = "--epochs";
            argv[n++] = "6";
        }
        argv[n] = NULL;
        posix_spawn_file_actions_t fa;
        char err[1200];
        pid_t pid;
        int status;
        snprintf(err, sizeof err, "%s/bench.log", dir);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            show(err);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        show(err); /* the rounds and the table, for the log */
    }
    doc = parse_file(log);
    assert_non_null(doc);
    regression = strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "metric")), "rmse") == 0;
    runs_j = cJSON_GetObjectItem(doc, "starling");
    assert_int_equal(cJSON_GetArraySize(runs_j), strcmp(example, "co2") == 0 ? 2 : 1);
    run0 = cJSON_GetArrayItem(runs_j, 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(run0, "ok")));
    if (strcmp(example, "co2") == 0) { /* the task ran with the setting's fade */
        char path[1300];
        cJSON *t, *c;
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(runs_j, 1), "ok")));
        snprintf(path, sizeof path, "%s/ternary@0.01@residual@sm6:0.5/task.json", runs);
        t = parse_file(path);
        assert_non_null(t);
        c = cJSON_GetObjectItem(t, "config");
        assert_true(cJSON_GetObjectItem(c, "sender_mean_rounds")->valuedouble == 6);
        assert_true(cJSON_GetObjectItem(c, "sender_mean_epochs")->valuedouble == 0);
        assert_true(cJSON_GetObjectItem(c, "sender_mean")->valuedouble == 0.5);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(c, "sender_mean_share")));
        cJSON_Delete(t);
    }
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(run0, "initial")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(run0, "final")));
    initial = cJSON_GetObjectItem(run0, "initial")->valuedouble;
    final = cJSON_GetObjectItem(run0, "final")->valuedouble;
    fprintf(stderr, "%s: %s %.4f initially, %.4f after 3 rounds\n", example,
            regression ? "RMSE" : "accuracy", initial, final);
    if (regression)
        assert_true(final < initial);
    else
        assert_true(final > initial);
    rounds = cJSON_GetObjectItem(run0, "rounds");
    assert_int_equal(cJSON_GetArraySize(rounds), 3);
    last = cJSON_GetArrayItem(rounds, 2);
    /* the devices evaluated the round's base model on their held-out samples */
    assert_true(cJSON_GetObjectItem(last, "fed_devices")->valuedouble >= 1);
    assert_true(cJSON_GetObjectItem(last, "fed_samples")->valuedouble >= 1);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(last, "fed_value")));
    if (strcmp(example, "wine") == 0) {
        /* PyTorch, where it is installed, ran on the same split from the same model */
        const cJSON *t = cJSON_GetObjectItem(doc, "torch");
        if (cJSON_IsTrue(cJSON_GetObjectItem(t, "ran"))) {
            /* the example's own target: 1 point below PyTorch's final accuracy; the run's
             * round to it is the first whose accuracy reached it */
            const cJSON *target = cJSON_GetObjectItem(doc, "target");
            const cJSON *to = cJSON_GetObjectItem(run0, "to_target");
            double level = cJSON_GetObjectItem(t, "final")->valuedouble - 0.01;
            int first = 0;
            assert_true(fabs(cJSON_GetObjectItem(t, "initial")->valuedouble - initial) < 1e-6);
            assert_true(cJSON_IsNumber(target) && fabs(target->valuedouble - level) < 1e-9);
            for (int k = 0; k < 3 && first == 0; k++) {
                const cJSON *rk = cJSON_GetArrayItem(rounds, k);
                const cJSON *v = cJSON_GetObjectItem(rk, "value");
                if (cJSON_IsNumber(v) && v->valuedouble >= level)
                    first = (int)cJSON_GetObjectItem(rk, "round")->valuedouble;
            }
            assert_non_null(to);
            if (first > 0) {
                assert_int_equal((int)cJSON_GetObjectItem(to, "round")->valuedouble, first);
                assert_true(cJSON_GetObjectItem(to, "bytes_up")->valuedouble > 0);
            } else {
                assert_true(cJSON_IsNull(cJSON_GetObjectItem(to, "round")));
            }
        } else {
            assert_true(cJSON_IsNull(cJSON_GetObjectItem(doc, "target")));
        }
        if (!cJSON_IsTrue(cJSON_GetObjectItem(t, "ran")))
            fprintf(stderr, "PyTorch side: %s\n",
                    cJSON_GetStringValue(cJSON_GetObjectItem(t, "note")));
    } else { /* no PyTorch run (--no-torch): no target to reach */
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(doc, "target")));
        assert_null(cJSON_GetObjectItem(run0, "to_target"));
    }
    cJSON_Delete(doc);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* kept when a check failed */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    int failed;
    if (argc != 2) {
        fprintf(stderr, "usage: test_examples NAME (a folder of deploy/examples)\n");
        return 2;
    }
    example = argv[1];
    failed = cmocka_run_group_tests_name(example, tests, NULL, NULL);
    return failed ? 1 : skipped ? 77 : 0;
}
