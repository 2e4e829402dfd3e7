/*
 * bench_fl.c - `starling bench fl`: test accuracy against bytes on the
 * wire, side by side in one run, for dense fp32 FedAvg and the compression
 * settings, through the real coordinator, evaluator and fleet on loopback.
 *
 * The setup is NIID-Bench's Fashion-MNIST one: lenet5, 10 clients with a
 * dirichlet:0.5 label split, 10 local epochs, batch 64, lr 0.01, momentum
 * 0.9, 50 rounds, every client in every round (target = quorum = clients,
 * over-selection 1), FedAvg. Every setting gets the same seeds (split,
 * shuffles, initial model) and a fresh coordinator data directory. The
 * figures are read from that database after the run (fl_run.h): nothing is
 * estimated. Per setting (bench_fl_proc.c runs one) the table gives the
 * evaluator's final and best test accuracy, the first round whose model
 * reached the target accuracy, bytes up and down, upload compression
 * against dense fp32 updates, download bytes per participating device and
 * round as a fraction of the dense model, and wall time.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench.h"
#include "bench_fl_int.h"
#include "plot.h"
#include "starling/codec.h"
#include "starling/data.h"

/* The settings by name. Top-k with error feedback (the devices keep what they did not send). */
static const fl_setting known[] = {
    /* designated: every field left out is 0 or "" (the task's default) */
    {.name = "dense", .values = "fp32", .density = 1.0},
    {.name = "k1-fp32", .values = "fp32", .density = 0.01},
    {.name = "k1-int8", .values = "int8", .density = 0.01},
    {.name = "k1-ternary", .values = "ternary", .density = 0.01},
    {.name = "k0.1-fp32", .values = "fp32", .density = 0.001},
    {.name = "k0.1-int8", .values = "int8", .density = 0.001},
    {.name = "k0.1-ternary", .values = "ternary", .density = 0.001},
    {.name = "default", .is_default = 1},
};
#define NKNOWN         (sizeof known / sizeof known[0])

#define FULL_SETTINGS  "dense,k1-fp32,k1-int8,k1-ternary,k0.1-fp32,k0.1-int8,k0.1-ternary,default"
#define QUICK_SETTINGS "dense,default,k1-int8,k0.1-ternary"
#define SMOKE_SETTINGS "dense,k1-ternary"

static int usage(FILE *out)
{
    fprintf(
        out,
        "usage: starling bench fl [--quick | --smoke] [options]\n"
        "Test accuracy against upload bytes: dense fp32 FedAvg and compressed updates, side\n"
        "by side, through starling-coordinator, an evaluator and a fleet (starling-agent)\n"
        "on loopback. NIID-Bench's Fashion-MNIST setup: lenet5, 10 clients, dirichlet:0.5,\n"
        "10 local epochs, batch 64, lr 0.01, momentum 0.9, 50 rounds, every client every\n"
        "round, FedAvg.\n"
        "  --quick            1 local epoch, 10 rounds, settings " QUICK_SETTINGS "\n"
        "  --smoke            logreg, 1 epoch, 2 rounds, settings " SMOKE_SETTINGS " (tests)\n"
        "  --settings LIST    comma-separated: dense, k1-fp32, k1-int8, k1-ternary,\n"
        "                     k0.1-fp32, k0.1-int8, k0.1-ternary (top-k 1%% / 0.1%% with error\n"
        "                     feedback), default (the task sets neither values nor\n"
        "                     density), or VALUES@DENSITY[@SCOPE][@FEEDBACK][@decayG] (fp16@0.05,\n"
        "                     ternary@0.01@tensor: top-k in every tensor instead of over\n"
        "                     the whole model, the task's default; ternary@0.01@residual:\n"
        "                     classic error feedback instead of tracking, the default;\n"
        "                     ternary@0.001@residual@decay0.9: the residual times 0.9\n"
        "                     each round; @fedavgm, @fedadam ...: the coordinator's\n"
        "                     aggregator instead of fedavg; @slr2: server_lr 2; @wu3:0.04:\n"
        "                     density warm-up from 4%% over 3 participations; @ramp4:2:\n"
        "                     the server learning rate twice server_lr at the first\n"
        "                     aggregate, back to server_lr by the fifth (@ramp0: none,\n"
        "                     the default); @sm6 or @sm6:0.5: each coordinate's mean\n"
        "                     over the updates that sent it (weight 1 or 0.5) at the\n"
        "                     first aggregate, back to the mean of all once the devices\n"
        "                     have sent 7 updates each on average (times the share of\n"
        "                     rounds they sent to; @byp: not times it); @sme60 or\n"
        "                     @sme60:0.5: the same back to the mean of all over 60\n"
        "                     local epochs in a device's updates (60 / --epochs of them)\n"
        "                     (@sm0: none; sparse FedAvg with the residual has @sme60 by\n"
        "                     default, unless the setting gives a ramp); @nofresh: the\n"
        "                     senders' mean without sender_mean_fresh (by default an\n"
        "                     aggregate taking a device the last one did not leaves what\n"
        "                     the last one carried out of it); @part0 or @part3: the\n"
        "                     fade by local epochs not shortened, or shortened by the\n"
        "                     share of rounds a device reports to cubed, where devices\n"
        "                     sit out rounds (by default its fifth power); @budget:\n"
        "                     time budgets; @fednova: FedNova's averaging, with\n"
        "                     @residual; @p50: deadline_percentile 50 (with @budget:\n"
        "                     of the selected devices' full windows, else of the\n"
        "                     last rounds' report delays); @nosplit: the devices send\n"
        "                     plain frames, not positions split by their last download\n"
        "                     (default: all of them)\n"
        "  --fleet full|partial|hetero  full (the default): NIID-Bench's, above. partial: the\n"
        "                     demo's fleet (deploy/demo.sh): 50 clients, 4 local epochs,\n"
        "                     batch 32; 20 reports close a round (40%% of --clients), 30\n"
        "                     selected, quorum 12 (60%% of the reports),\n"
        "                     15 s deadline; 20%% of the selected drop out after the\n"
        "                     download, 10%% of transfers cut, 20%% of devices 3x slower.\n"
        "                     hetero: 30 clients, 4 epochs, batch 32, 30 s deadline, 10%%\n"
        "                     drop out, 10%% of transfers cut, devices up to 10x slower\n"
        "                     and links of 256 kbit/s to 20 Mbit/s (log-uniform, seeded)\n"
        "  --rounds R  --epochs E  --clients N  --model M   change the setup\n"
        "  --report-share F   partial and hetero fleets: the share of --clients whose\n"
        "                     reports close a round (default 0.4; quorum 60%% of those)\n"
        "  --seed S           the split's, the fleet's and the task's seed (default 1): a run\n"
        "                     of every device every round repeats bit for bit; another seed\n"
        "                     samples another run\n"
        "  --target-acc A     accuracy for \"rounds to\" (default 0.85)\n"
        "  --at-wall S        each setting's accuracy after S seconds of wall clock (default:\n"
        "                     the shortest run's)\n"
        "  --deadline S       report deadline in seconds (default: 1800; quick 600)\n"
        "  --data DIR         Fashion-MNIST (default " SL_DATA_FASHION_MNIST_DIR ")\n"
        "  --dir DIR          keep the runs in DIR/<setting>/ (data/, logs); default: a\n"
        "                     temporary directory, removed afterwards\n"
        "  --json             JSON on stdout (progress goes to stderr)\n"
        "  --plot FILE.png    accuracy vs cumulative upload bytes (gnuplot, Debian\n"
        "                     gnuplot-nox); FILE.gp and FILE.dat are kept beside it\n"
        "  --md FILE.md       the table in markdown\n"
        "  --task FILE.json --data-dir DIR   instead: a task file's own model spec and data\n"
        "                     contract (deploy/examples/*) beside PyTorch FedAvg on the same\n"
        "                     split (below)\n"
        "Programs: starling-coordinator and starling-agent next to this program or in\n"
        "the build tree (../coordinator, ../device), or $STARLING_COORDINATOR and\n"
        "$STARLING_AGENT.\n"
        "exit status: 0 every setting ran, 1 a setting or an output failed, 2 usage\n");
    fputc('\n', out);
    sl__bench_fl_task_usage(out);
    return out == stdout ? 0 : 2;
}

static int bad(const char *fmt, const char *what)
{
    fputs("starling bench fl: ", stderr);
    fprintf(stderr, fmt, what);
    fputs(" (see --help)\n", stderr);
    return 2;
}

int sl__bench_fl_u32(const char *text, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    unsigned long long v;
    errno = 0;
    if (text == NULL || *text < '0' || *text > '9')
        return -1;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_double(const char *text, double lo, double hi, double *out)
{
    char *end;
    double v;
    if (text == NULL || *text == '\0')
        return -1;
    v = strtod(text, &end);
    if (*end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* "wuN:D" into @st's warm-up: N participations (1..1000) from density D (0, 1]. */
/* "rampN:B": the server learning rate from B times the task's back to it over N aggregates;
 * "ramp0": no ramp. */
static int parse_ramp(const char *word, fl_setting *st)
{
    char n[8];
    const char *colon = strchr(word, ':');
    uint32_t rounds;
    double boost;
    if (strcmp(word, "ramp0") == 0) {
        st->ramp_given = 1;
        st->server_lr_ramp = 0;
        return 0;
    }
    if (strncmp(word, "ramp", 4) != 0 || colon == NULL || (size_t)(colon - word - 4) >= sizeof n)
        return -1;
    snprintf(n, sizeof n, "%.*s", (int)(colon - word - 4), word + 4);
    if (sl__bench_fl_u32(n, 1, 10000, &rounds) != 0 ||
        parse_double(colon + 1, 1e-6, 100.0, &boost) != 0)
        return -1;
    st->ramp_given = 1;
    st->server_lr_ramp = rounds;
    st->server_lr_boost = boost;
    return 0;
}

/* "smN" or "smN:A": each coordinate's mean over its senders, weight A (default 1) at the first
 * aggregate, back to the mean of all over a device's first N updates; "sm0": the mean of all
 * throughout. "smeN" or "smeN:A": the same over the first N local epochs in a device's updates
 * (the task's sender_mean_epochs, N / local_epochs updates). */
static int parse_sender_mean(const char *word, fl_setting *st)
{
    char n[8];
    int epochs = strncmp(word, "sme", 3) == 0;
    size_t at = epochs ? 3 : 2;
    const char *colon = strchr(word, ':');
    size_t digits = colon != NULL ? (size_t)(colon - word) - at : strlen(word + at);
    uint32_t length;
    double weight = 1;
    if (strncmp(word, "sm", 2) != 0 || digits == 0 || digits >= sizeof n)
        return -1;
    snprintf(n, sizeof n, "%.*s", (int)digits, word + at);
    if (sl__bench_fl_u32(n, epochs ? 1 : 0, epochs ? 1000000 : 10000, &length) != 0 ||
        (colon != NULL && (length == 0 || parse_double(colon + 1, 1e-9, 1.0, &weight) != 0)))
        return -1;
    st->sm_given = 1;
    st->sender_mean_rounds = epochs ? 0 : length;
    st->sender_mean_epochs = epochs ? length : 0;
    st->sender_mean = weight;
    return 0;
}

static int parse_warmup(const char *word, fl_setting *st)
{
    char n[8];
    const char *colon = strchr(word, ':');
    uint32_t rounds;
    double density;
    if (strncmp(word, "wu", 2) != 0 || colon == NULL || (size_t)(colon - word - 2) >= sizeof n)
        return -1;
    snprintf(n, sizeof n, "%.*s", (int)(colon - word - 2), word + 2);
    if (sl__bench_fl_u32(n, 1, 1000, &rounds) != 0 ||
        parse_double(colon + 1, 1e-9, 1.0, &density) != 0)
        return -1;
    st->warmup_rounds = rounds;
    st->warmup_density = density;
    return 0;
}

/* 1 when @word names one of the coordinator's aggregators. */
static int is_aggregator(const char *word)
{
    for (int a = SL_AGG_FEDAVG; a <= SL_AGG_MEDIAN; a++)
        if (strcmp(word, sl_aggregator_name((sl_aggregator)a)) == 0)
            return 1;
    return 0;
}

/* One name of --settings into @st; -1 when unknown. */
static int parse_setting(const char *name, fl_setting *st)
{
    const char *at = strchr(name, '@');
    sl_value_mode mode;
    char values[16];
    for (size_t i = 0; i < NKNOWN; i++)
        if (strcmp(name, known[i].name) == 0) {
            *st = known[i];
            return 0;
        }
    char dens[32];
    const char *at2;
    if (at == NULL || at == name || (size_t)(at - name) >= sizeof values ||
        strlen(name) >= sizeof st->name)
        return -1;
    snprintf(values, sizeof values, "%.*s", (int)(at - name), name);
    if (sl_value_mode_parse(values, &mode) != SL_OK)
        return -1;
    memset(st, 0, sizeof *st);
    at2 = strchr(at + 1, '@'); /* VALUES@DENSITY[@SCOPE][@FEEDBACK], either order */
    if (at2 != NULL && (size_t)(at2 - at - 1) >= sizeof dens)
        return -1;
    for (const char *opt = at2; opt != NULL;) {
        const char *next = strchr(opt + 1, '@');
        char word[16];
        sl_topk_scope scope;
        sl_error_feedback fb;
        size_t len = next ? (size_t)(next - opt - 1) : strlen(opt + 1);
        if (len >= sizeof word)
            return -1;
        snprintf(word, sizeof word, "%.*s", (int)len, opt + 1);
        if (st->scope[0] == '\0' && sl_topk_scope_parse(word, &scope) == SL_OK)
            snprintf(st->scope, sizeof st->scope, "%s", sl_topk_scope_name(scope));
        else if (st->feedback[0] == '\0' && sl_error_feedback_parse(word, &fb) == SL_OK)
            snprintf(st->feedback, sizeof st->feedback, "%s", sl_error_feedback_name(fb));
        else if (st->decay == 0 && strncmp(word, "decay", 5) == 0 && word[5] != '\0' &&
                 parse_double(word + 5, 1e-9, 1.0, &st->decay) == 0)
            ; /* residual_decay */
        else if (st->aggregator[0] == '\0' && is_aggregator(word))
            snprintf(st->aggregator, sizeof st->aggregator, "%s", word);
        else if (st->server_lr == 0 && strncmp(word, "slr", 3) == 0 && word[3] != '\0' &&
                 parse_double(word + 3, 1e-6, 100.0, &st->server_lr) == 0)
            ; /* server_lr */
        else if (st->warmup_rounds == 0 && parse_warmup(word, st) == 0)
            ; /* wuN:D: density warm-up over N participations from D */
        else if (!st->ramp_given && parse_ramp(word, st) == 0)
            ; /* rampN:B: server learning rate boosted B times, back over N aggregates */
        else if (!st->sm_given && parse_sender_mean(word, st) == 0)
            ; /* smN[:A] / smeN[:A]: the senders' mean, weight A, faded over N updates or N
               * local epochs a device */
        else if (!st->sm_by_participations && strcmp(word, "byp") == 0)
            st->sm_by_participations = 1; /* the senders' mean faded by participations alone */
        else if (!st->sm_not_fresh && strcmp(word, "nofresh") == 0)
            st->sm_not_fresh = 1; /* the senders' mean without sender_mean_fresh */
        else if (!st->part_given && strncmp(word, "part", 4) == 0 && word[4] != '\0' &&
                 sl__bench_fl_u32(word + 4, 0, 16, &st->sender_mean_partial) == 0)
            st->part_given = 1; /* sender_mean_partial */
        else if (!st->no_split && strcmp(word, "nosplit") == 0)
            st->no_split = 1; /* the devices send plain frames (--split-positions=false) */
        else if (!st->budget && strcmp(word, "budget") == 0)
            st->budget = 1; /* time budgets */
        else if (!st->fednova && strcmp(word, "fednova") == 0)
            st->fednova = 1; /* FedNova */
        else if (st->percentile == 0 && word[0] == 'p' && word[1] != '\0' &&
                 sl__bench_fl_u32(word + 1, 1, 100, &st->percentile) == 0)
            ; /* deadline_percentile */
        else
            return -1; /* unknown, or given twice */
        opt = next;
    }
    /* FedNova moves the model by other than the mean of the updates sent: the classic
     * residual (the coordinator refuses tracking with it) */
    if (st->fednova && strcmp(st->feedback, "residual") != 0)
        return -1;
    /* a decay needs the classic residual (the coordinator would refuse the task) */
    if (st->decay > 0 && st->decay < 1 && strcmp(st->feedback, "residual") != 0)
        return -1;
    snprintf(dens, sizeof dens, "%.*s", at2 ? (int)(at2 - at - 1) : (int)strlen(at + 1), at + 1);
    if (parse_double(dens, 1e-9, 1.0, &st->density) != 0)
        return -1;
    snprintf(st->name, sizeof st->name, "%s", name);
    snprintf(st->values, sizeof st->values, "%s", sl_value_mode_name(mode));
    return 0;
}

int sl__bench_fl_settings(const char *list, int allow_task, fl_setting *out, size_t *n)
{
    char buf[512];
    size_t k = 0;
    if (strlen(list) >= sizeof buf)
        return bad("--settings: the list is too long%s", "");
    snprintf(buf, sizeof buf, "%s", list);
    for (char *p = buf; *p != '\0';) {
        size_t len = strcspn(p, ",");
        char name[64];
        if (len == 0 || len >= sizeof name)
            return bad("--settings: an empty or overlong name in \"%s\"", list);
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        if (k == MAX_SETTINGS)
            return bad("--settings: more than 16 settings in \"%s\"", list);
        if (allow_task && strcmp(name, "task") == 0) {
            memset(&out[k], 0, sizeof out[k]);
            snprintf(out[k].name, sizeof out[k].name, "task");
            out[k].as_task = 1;
        } else if (parse_setting(name, &out[k]) != 0) {
            return bad("--settings: unknown setting \"%s\"", name);
        }
        for (size_t j = 0; j < k; j++)
            if (strcmp(out[j].name, out[k].name) == 0)
                return bad("--settings: \"%s\" twice", name);
        k++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (k == 0)
        return bad("--settings: no setting in \"%s\"", list);
    *n = k;
    return 0;
}

/* The values and density a task without them is given: the coordinator's defaults. */
static void resolve_default(fl_setting *st)
{
    sl_task_config c;
    char err[128];
    static const char json[] = "{\"target\": 1}";
    if (sl_task_config_parse(json, sizeof json - 1, &c, err, sizeof err) == SL_OK) {
        snprintf(st->values, sizeof st->values, "%s", sl_value_mode_name(c.values));
        st->density = c.density;
    }
}

/* @name next to this program, or in the build tree (../@sub/@name); $@env wins. */
static int find_program(const char *self, const char *env, const char *sub, const char *name,
                        char *out, size_t cap)
{
    const char *given = getenv(env);
    char dir[FL_PATH_MAX];
    const char *slash = strrchr(self, '/');
    if (given != NULL && given[0] != '\0') {
        snprintf(out, cap, "%s", given);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - self) : 1, slash ? self : ".");
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) < cap && access(out, X_OK) == 0)
        return 0;
    if ((size_t)snprintf(out, cap, "%s/../%s/%s", dir, sub, name) >= cap)
        return -1;
    return access(out, X_OK) == 0 ? 0 : -1;
}

static void on_signal(int sig)
{
    (void)sig;
    sl__bench_fl_interrupted = 1;
}

void sl__bench_fl_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int sl__bench_fl_programs(fl_setup *su)
{
    ssize_t len = readlink("/proc/self/exe", su->self, sizeof su->self - 1);
    if (len <= 0) {
        fprintf(stderr, "starling bench fl: cannot find this program: %s\n", strerror(errno));
        return 1;
    }
    su->self[len] = '\0';
    if (find_program(su->self, "STARLING_COORDINATOR", "coordinator", "starling-coordinator",
                     su->coordinator, sizeof su->coordinator) != 0 ||
        find_program(su->self, "STARLING_AGENT", "device", "starling-agent", su->agent,
                     sizeof su->agent) != 0) {
        fprintf(stderr,
                "starling bench fl: starling-coordinator and starling-agent must be next to %s "
                "or in its build tree (or set STARLING_COORDINATOR and STARLING_AGENT)\n",
                su->self);
        return 1;
    }
    return 0;
}

/* ---- the command -------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path); /* best effort */
    return 0;
}

void sl__bench_fl_rmtree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int sl__bench_fl_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t len = strlen(name);
    if (strncmp(argv[*i], name, len) != 0)
        return 0;
    if (argv[*i][len] == '=') {
        *value = argv[*i] + len + 1;
        return 1;
    }
    if (argv[*i][len] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "starling bench fl: %s needs a value (see --help)\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

static int has_data(const char *dir)
{
    char path[FL_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    if (access(path, R_OK) == 0)
        return 1;
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    return access(path, R_OK) == 0;
}

int sl_bench_fl(int argc, char **argv)
{
    static fl_setup su; /* large: static, one bench per process */
    static fl_result res[MAX_SETTINGS];
    fl_setting settings[MAX_SETTINGS];
    const char *list = NULL, *plot_path = NULL, *md_path = NULL, *dir = NULL;
    const char *data = NULL, *v = NULL, *fleet = "full";
    uint32_t rounds = 0, epochs = 0, clients = 0, deadline_s = 0, seed = 1;
    double report_share = 0.4;
    const char *model = NULL;
    int quick = 0, smoke = 0, json = 0, status = 0, tmpdir = 0;
    double dense_bytes = 0;
    uint64_t params = 0;
    size_t n = 0;
    FILE *out;
    char err[512];

    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--task") == 0 || strncmp(argv[i], "--task=", 7) == 0)
            return sl__bench_fl_task(argc, argv);
    memset(&su, 0, sizeof su);
    su.acc_target = 0.85;
    for (int i = 0; i < argc; i++) {
        int o;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--smoke") == 0) {
            smoke = 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--settings", &list)) != 0) {
            if (o < 0)
                return 2;
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--plot", &plot_path)) != 0) {
            size_t l = o > 0 ? strlen(plot_path) : 0;
            if (o < 0)
                return 2;
            if (l < 5 || strcmp(plot_path + l - 4, ".png") != 0)
                return bad("--plot: \"%s\" is not a .png file name", plot_path);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--md", &md_path)) != 0) {
            if (o < 0)
                return 2;
            if (md_path[0] == '\0')
                return bad("--md: an empty file name%s", "");
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--dir", &dir)) != 0) {
            if (o < 0)
                return 2;
            if (dir[0] == '\0' || strlen(dir) > FL_PATH_MAX - 64)
                return bad("--dir: bad directory \"%s\"", dir);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--data", &data)) != 0) {
            if (o < 0)
                return 2;
            if (data[0] == '\0' || strlen(data) >= FL_PATH_MAX)
                return bad("--data: bad directory \"%s\"", data);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--fleet", &fleet)) != 0) {
            if (o < 0)
                return 2;
            if (strcmp(fleet, "full") != 0 && strcmp(fleet, "partial") != 0 &&
                strcmp(fleet, "hetero") != 0)
                return bad("--fleet: \"%s\" is not full, partial or hetero", fleet);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--model", &model)) != 0) {
            if (o < 0)
                return 2;
            if (strcmp(model, "lenet5") != 0 && strcmp(model, "logreg") != 0 &&
                strcmp(model, "mlp") != 0 && strcmp(model, "cnn") != 0)
                return bad("--model: \"%s\" is not logreg, mlp, lenet5 or cnn", model);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--rounds", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 10000, &rounds) != 0)
                return o < 0 ? 2 : bad("--rounds: \"%s\" is not in 1..10000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--epochs", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 1000, &epochs) != 0)
                return o < 0 ? 2 : bad("--epochs: \"%s\" is not in 1..1000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--clients", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 1000, &clients) != 0)
                return o < 0 ? 2 : bad("--clients: \"%s\" is not in 1..1000", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--deadline", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 1, 7 * 86400, &deadline_s) != 0)
                return o < 0 ? 2 : bad("--deadline: \"%s\" is not in 1..604800 seconds", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--seed", &v)) != 0) {
            if (o < 0 || sl__bench_fl_u32(v, 0, 4000000000u, &seed) != 0)
                return o < 0 ? 2 : bad("--seed: \"%s\" is not a whole number", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--at-wall", &v)) != 0) {
            if (o < 0 || parse_double(v, 1e-3, 1e7, &su.at_wall_s) != 0)
                return o < 0 ? 2 : bad("--at-wall: \"%s\" is not a number of seconds", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--report-share", &v)) != 0) {
            if (o < 0 || parse_double(v, 1e-6, 1.0, &report_share) != 0)
                return o < 0 ? 2 : bad("--report-share: \"%s\" is not in (0, 1]", v);
        } else if ((o = sl__bench_fl_opt(argc, argv, &i, "--target-acc", &v)) != 0) {
            if (o < 0 || parse_double(v, 0.0, 1.0, &su.acc_target) != 0)
                return o < 0 ? 2 : bad("--target-acc: \"%s\" is not in 0..1", v);
        } else {
            return bad("unknown argument \"%s\"", argv[i]);
        }
    }
    if (quick && smoke)
        return bad("--quick and --smoke exclude each other%s", "");

    /* the setup: NIID-Bench's, reduced by --quick / --smoke, then the overrides */
    su.model = "lenet5";
    su.clients = 10;
    su.partition = "dirichlet:0.5";
    su.epochs = 10;
    su.batch = 64;
    su.lr = 0.01;
    su.momentum = 0.9;
    su.rounds = 50;
    su.window_ms = 1000;
    su.deadline_ms = 1800000;
    su.seed = seed;
    su.fleet = fleet;
    su.over_selection = 1;
    su.straggle_factor = 1;
    if (strcmp(fleet, "partial") == 0) {
        /* the demo's fleet (deploy/demo.sh): each device in about one round in 2.5 */
        su.clients = 50; /* 20 reports close a round, quorum 12: below */
        su.over_selection = 1.5;
        su.epochs = 4;
        su.batch = 32;
        su.deadline_ms = 15000;
        su.dropout = 0.2;
        su.cut = 0.1;
        su.straggle = 0.2;
        su.straggle_factor = 3;
    }
    if (strcmp(fleet, "hetero") == 0) {
        /* unequal devices (#22): the partial fleet's faults on boards up to 10x slower and
         * links from 256 kbit/s to 20 Mbit/s (each drawn log-uniform from the seed) */
        su.clients = 30;
        su.over_selection = 1.5;
        su.epochs = 4;
        su.batch = 32;
        su.deadline_ms = 30000;
        su.dropout = 0.1;
        su.cut = 0.1;
        su.speeds = 10;
        snprintf(su.links, sizeof su.links, "256k:20M");
    }
    if (quick) {
        su.epochs = 1;
        su.rounds = 10;
        if (strcmp(fleet, "full") == 0)
            su.deadline_ms = 600000;
    }
    if (smoke) {
        su.model = "logreg";
        su.epochs = 1;
        su.rounds = 2;
        if (strcmp(fleet, "full") == 0)
            su.deadline_ms = 300000;
    }
    if (model != NULL)
        su.model = model;
    if (rounds)
        su.rounds = rounds;
    if (epochs)
        su.epochs = epochs;
    if (clients)
        su.clients = clients;
    if (strcmp(fleet, "full") == 0) {
        su.target = su.quorum = su.clients; /* every client every round */
    } else {
        /* 40% of the fleet's reports close a round (--report-share), 60% of those by the
         * deadline */
        su.target = (uint32_t)lround(report_share * su.clients);
        su.target = su.target < 1 ? 1 : su.target;
        su.quorum = (uint32_t)ceil(0.6 * su.target);
    }
    if (deadline_s)
        su.deadline_ms = (int64_t)deadline_s * 1000;
    if (list == NULL)
        list = smoke ? SMOKE_SETTINGS : quick ? QUICK_SETTINGS : FULL_SETTINGS;
    if (sl__bench_fl_settings(list, 0, settings, &n) != 0)
        return 2;

    /* what the run needs, before anything starts */
    if (plot_path != NULL && sl_plot_available(err, sizeof err) != 0) {
        fprintf(stderr, "starling bench fl: --plot: %s\n", err);
        return 1;
    }
    snprintf(su.data, sizeof su.data, "%s", data ? data : SL_DATA_FASHION_MNIST_DIR);
    if (!has_data(su.data)) {
        fprintf(stderr,
                "starling bench fl: no Fashion-MNIST in %s (Debian: apt-get install "
                "dataset-fashion-mnist, or --data DIR)\n",
                su.data);
        return 1;
    }
    if (sl__bench_fl_programs(&su) != 0)
        return 1;
    if (dir != NULL) {
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "starling bench fl: --dir %s: %s\n", dir, strerror(errno));
            return 1;
        }
        snprintf(su.workdir, sizeof su.workdir, "%s", dir);
    } else {
        const char *base = getenv("TMPDIR");
        snprintf(su.workdir, sizeof su.workdir, "%s/starling-bench-fl.XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        if (mkdtemp(su.workdir) == NULL) {
            fprintf(stderr, "starling bench fl: %s: %s\n", su.workdir, strerror(errno));
            return 1;
        }
        tmpdir = 1;
    }

    /* the default setting: run it only when no other setting has its configuration */
    for (size_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].alias_of = -1;
        if (settings[i].is_default)
            resolve_default(&settings[i]);
        res[i].setting = settings[i];
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n && settings[i].is_default; j++)
            if (j != i && !settings[j].is_default &&
                strcmp(settings[j].values, settings[i].values) == 0 &&
                settings[j].density == settings[i].density &&
                strcmp(settings[j].scope, settings[i].scope) == 0 &&
                strcmp(settings[j].feedback, settings[i].feedback) == 0 &&
                settings[j].decay == settings[i].decay &&
                strcmp(settings[j].aggregator, settings[i].aggregator) == 0 &&
                settings[j].warmup_rounds == settings[i].warmup_rounds &&
                settings[j].server_lr == settings[i].server_lr &&
                settings[j].ramp_given == settings[i].ramp_given &&
                settings[j].server_lr_ramp == settings[i].server_lr_ramp &&
                settings[j].sm_given == settings[i].sm_given &&
                settings[j].sender_mean_rounds == settings[i].sender_mean_rounds &&
                settings[j].sender_mean_epochs == settings[i].sender_mean_epochs &&
                settings[j].sender_mean == settings[i].sender_mean &&
                settings[j].sm_by_participations == settings[i].sm_by_participations &&
                settings[j].sm_not_fresh == settings[i].sm_not_fresh &&
                settings[j].part_given == settings[i].part_given &&
                settings[j].sender_mean_partial == settings[i].sender_mean_partial &&
                settings[j].no_split == settings[i].no_split && !settings[j].budget &&
                !settings[j].fednova && settings[j].percentile == 0)
                res[i].alias_of = (int)j;

    sl__bench_fl_signals();
    out = json ? stderr : stdout;
    su.progress = stderr;
    fprintf(out, "starling bench fl: %zu settings through %s and %s; runs in %s\n", n,
            su.coordinator, su.agent, su.workdir);
    for (size_t i = 0; i < n && !sl__bench_fl_interrupted; i++) {
        fl_result *r = &res[i];
        if (r->alias_of >= 0) {
            fprintf(su.progress, "%s: values %s, density %g: the same configuration as %s\n",
                    r->setting.name, r->setting.values, r->setting.density,
                    res[r->alias_of].setting.name);
            continue;
        }
        fprintf(su.progress, "%s: values %s, density %g\n", r->setting.name, r->setting.values,
                r->setting.density);
        if (sl__bench_fl_run_setting(&su, &r->setting, r) != 0) {
            fprintf(su.progress, "%s: failed: %s\n", r->setting.name, r->error);
            status = 1;
        } else if (dense_bytes == 0) {
            dense_bytes = r->run.dense_bytes;
            params = r->run.params;
        }
    }
    if (sl__bench_fl_interrupted) {
        fprintf(stderr, "starling bench fl: interrupted\n");
        status = 1;
    }
    for (size_t i = 0; i < n; i++)
        if (res[i].alias_of < 0 && !res[i].ok && res[i].error[0] == '\0')
            snprintf(res[i].error, sizeof res[i].error, "not run (interrupted)");

    fputc('\n', out);
    sl__bench_fl_describe(&su, dense_bytes, params, out, "");
    sl__bench_fl_table(&su, res, n, out);
    fflush(out);
    if (json)
        sl__bench_fl_json(&su, res, n, dense_bytes, params);
    if (md_path != NULL && sl__bench_fl_md(&su, res, n, md_path, dense_bytes, params) != 0)
        status = 1;
    if (plot_path != NULL && sl__bench_fl_plot(&su, res, n, plot_path) != 0)
        status = 1;
    if (plot_path != NULL && status == 0)
        fprintf(out, "plot: %s\n", plot_path);
    if (md_path != NULL && status == 0)
        fprintf(out, "markdown: %s\n", md_path);
    for (size_t i = 0; i < n; i++)
        sl_fl_run_free(&res[i].run);
    if (tmpdir)
        sl__bench_fl_rmtree(su.workdir);
    return status;
}
