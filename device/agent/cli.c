/*
 * cli.c - the starling-agent program: configuration (defaults < --config file <
 * STARLING_* environment < flags), the data, and one of three modes:
 *   a device        sl_agent_run()            (default)
 *   a fleet         sl_agent_fleet_run()      (--fleet N)
 *   the evaluator   sl_agent_evaluate()       (--evaluator)
 * SIGINT/SIGTERM stop the run at its next step; the state directory is
 * always current, so a kill -9 loses nothing either.
 * Exit status: 0 done, 1 error, 2 usage or configuration, 3 refused by the
 * coordinator (enrolment), 4 the model named by --model is not the task's,
 * 5 the device refuses the task's model (its limits or data; the reason is
 * logged and sent to the coordinator) and was asked for bounded work
 * (--once, --rounds).
 */
#include <ctype.h>
#include <inttypes.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"
#include "starling/data.h"
#include "starling/source.h"

extern char **environ;

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* One debug line per event of a lone device (the fleet logs its own). */
static void log_event(void *ctx, const sl_agent_event *ev)
{
    (void)ctx;
    sl_log(SL_LOG_DEBUG, "agent",
           "device=%" PRId64 " event=%s round=%" PRId64 " version=%" PRId64 " bytes=%" PRIu64
           " value=%.4g%s%s",
           ev->device_id, sl_agent_event_name(ev->kind), ev->round_id, ev->model_version, ev->bytes,
           ev->value, ev->reason[0] ? " reason=" : "", ev->reason);
}

static const sl_config_spec specs[] = {
    {"config", SL_CONFIG_STRING, NULL, 0, 0, "a file of key = value lines (read first)"},
    {"coordinator", SL_CONFIG_STRING, NULL, 0, 0, "base URL, https://host:port (required)"},
    {"ca_file", SL_CONFIG_STRING, NULL, 0, 0, "PEM CA bundle that signs the coordinator"},
    {"pin", SL_CONFIG_STRING, NULL, 0, 0, "public key pin: sha256//<base64>[;sha256//...]"},
    {"enrolment_token", SL_CONFIG_STRING, NULL, 0, 0, "enrolment token (first run only)"},
    {"enrolment_token_file", SL_CONFIG_STRING, NULL, 0, 0, "file holding the enrolment token"},
    {"admin_token_file", SL_CONFIG_STRING, NULL, 0, 0,
     "file holding the operators' token (--evaluator)"},
    {"state_dir", SL_CONFIG_STRING, "./starling-agent", 0, 0,
     "state directory (key, model, residual, pending upload)"},
    {"task", SL_CONFIG_INT, NULL, 1, 9.0e15, "task id (required)"},
    {"data", SL_CONFIG_STRING, NULL, 0, 0,
     "the local data, read through the task's data contract (device/data/DATA_CONTRACT.md): "
     "csv:FILE, npy:X.npy?y=Y.npy, npz:FILE, idx:DIR, images:DIR, wav:DIR or sqlite:FILE "
     "(starling/source.h); for a task without a contract, a Fashion-MNIST directory "
     "(idx:DIR; default " SL_DATA_FASHION_MNIST_DIR
     ") or csv:FILE?label=COLUMN then options joined by &: kind=class with "
     "classes=N, or kind=target; skip=N; timestamp=COLUMN; delimiter=, ; tab or space"},
    {"data_contract", SL_CONFIG_STRING, NULL, 0, 0,
     "fleets: a data contract file to read --data through, split among the fleet's clients "
     "(a device, and the evaluator, get the task's from the coordinator)"},
    {"data_memory", SL_CONFIG_SIZE, "256M", 4096, 1.0e13,
     "memory the kept samples may use; beyond it the newest are kept (or a reservoir)"},
    {"data_keep", SL_CONFIG_STRING, "newest", 0, 0,
     "newest, or reservoir (a uniform sample of every sample seen)"},
    {"data_refresh", SL_CONFIG_DURATION, "5s", 0, 86400000,
     "take up new samples at most this often between check-ins (always before training)"},
    {"partition", SL_CONFIG_STRING, NULL, 0, 0,
     "split among --of clients: iid, dirichlet:<a>, shards:<s>, quantity:<b>"},
    {"client", SL_CONFIG_INT, "0", 0, 1000000, "this device's client of the partition"},
    {"of", SL_CONFIG_INT, "1", 1, 1000000, "clients in the partition"},
    {"seed", SL_CONFIG_INT, "1", 0, 9.0e15, "partition, shuffles and simulated faults"},
    {"model", SL_CONFIG_STRING, NULL, 0, 0,
     "logreg, mlp, lenet5 or cnn; must match the task (default: found by the layout)"},
    {"epochs", SL_CONFIG_INT, "0", 0, 100000, "local epochs (0: the coordinator's)"},
    {"batch", SL_CONFIG_INT, "0", 0, 65536, "batch size (0: the coordinator's)"},
    {"lr", SL_CONFIG_DOUBLE, "0", 0, 100, "learning rate (0: the coordinator's)"},
    {"threads", SL_CONFIG_INT, "1", 0, 1024, "GEMM threads (0: one per CPU)"},
    {"max_train_seconds", SL_CONFIG_DOUBLE, "0", 0, 1e9, "stop training after this (0: off)"},
    {"max_nodes", SL_CONFIG_INT, "4096", 1, 1e6, "refuse a task's model with more graph nodes"},
    {"max_params", SL_CONFIG_INT, "16777216", 1, 4.0e9,
     "refuse a task's model with more parameters"},
    {"memory_budget", SL_CONFIG_SIZE, "512M", 1048576, 1.0e12,
     "refuse a task's model whose training step needs more memory (parameters, optimiser "
     "state, activations at the task's batch)"},
    {"log_level", SL_CONFIG_STRING, "info", 0, 0, "error, warn, info, debug or trace"},
    {"once", SL_CONFIG_BOOL, "false", 0, 0, "one participation (evaluator: one pass), then exit"},
    {"rounds", SL_CONFIG_INT, "0", 0, 1e9, "participations to complete, then exit (0: forever)"},
    {"evaluator", SL_CONFIG_BOOL, "false", 0, 0,
     "evaluate every model version on the test split and report it"},
    {"eval_interval", SL_CONFIG_DURATION, "2s", 10, 3600000, "evaluator: polling interval"},
    {"fleet", SL_CONFIG_INT, "0", 0, 100000, "simulate this many devices in one process"},
    {"dropout", SL_CONFIG_DOUBLE, "0", 0, 1, "fault: drop out after the download"},
    {"cut", SL_CONFIG_DOUBLE, "0", 0, 1, "fault: cut a connection at a random byte"},
    {"cut_span", SL_CONFIG_SIZE, "64K", 1, 1073741824.0, "fault: cuts fall in [1, cut_span]"},
    {"straggle", SL_CONFIG_STRING, "0:1", 0, 0, "fault P:F: with probability P train F x slower"},
    {"crash", SL_CONFIG_DOUBLE, "0", 0, 1, "fault: crash around an upload, restart from disk"},
    {"speeds", SL_CONFIG_DOUBLE, "1", 1, 1000,
     "a heterogeneous fleet: each device trains up to this many times slower (log-uniform "
     "from 1x, seeded)"},
    {"links", SL_CONFIG_STRING, NULL, 0, 0,
     "a heterogeneous fleet MIN:MAX bits/s (k, M: 64k:20M): each device's link, log-uniform "
     "between them (seeded; needs an http:// coordinator)"},
    {"poison", SL_CONFIG_STRING, NULL, 0, 0,
     "fault P:MODE: this fraction of the devices poison every update; MODE scale100 (x100), "
     "flip (negated) or nan (a NaN in the frame)"},
    {"sessions", SL_CONFIG_BOOL, "true", 0, 0,
     "one signed session request, then HMAC-signed requests (false: sign every request)"},
    {"chunk", SL_CONFIG_SIZE, "64K", 256, 268435456.0, "upload chunk (one PATCH)"},
    {"download_chunk", SL_CONFIG_SIZE, "256K", 1024, 4194304.0,
     "model download range (one GET; kept on disk as it arrives)"},
    {"audit", SL_CONFIG_BOOL, "false", 0, 0,
     "tests: keep the sum of trained updates in <state>/audit (residual mass checks)"},
    {"retry_base", SL_CONFIG_DURATION, "500ms", 1, 3600000, "backoff base"},
    {"max_attempts", SL_CONFIG_INT, "5", 1, 1000, "attempts per request"},
    {"request_timeout", SL_CONFIG_DURATION, "120s", 100, 86400000, "one attempt, at most"},
    {"stall_timeout", SL_CONFIG_DURATION, "30s", 1000, 3600000,
     "a transfer slower than 16 bytes/s for this long is cut and retried (resuming)"},
    {"max_wait", SL_CONFIG_DURATION, "60s", 10, 86400000, "longest wait between check-ins"},
    {"bandwidth_aware", SL_CONFIG_BOOL, "true", 0, 0,
     "lower the density so the update fits the time left (see agent.h)"},
    {"min_density_fraction", SL_CONFIG_DOUBLE, "0.1", 0.001, 1,
     "bandwidth-aware floor, as a fraction of the scheduled density"},
    {"dgc_momentum", SL_CONFIG_DOUBLE, "0", 0, 0.999, "DGC momentum correction (0: off)"},
    {"split_positions", SL_CONFIG_BOOL, "true", 0, 0,
     "code an update's positions against what the last delta downloaded changed, when smaller"},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static const char *str(const sl_config *cfg, const char *key)
{
    const char *v = NULL;
    sl_config_get_string(cfg, key, &v);
    return v;
}

static int64_t num(const sl_config *cfg, const char *key)
{
    int64_t v = 0;
    sl_config_get_int(cfg, key, &v);
    return v;
}

static double dbl(const sl_config *cfg, const char *key)
{
    double v = 0;
    sl_config_get_double(cfg, key, &v);
    return v;
}

static int64_t ms(const sl_config *cfg, const char *key)
{
    int64_t v = 0;
    sl_config_get_duration_ms(cfg, key, &v);
    return v;
}

static int flag(const sl_config *cfg, const char *key)
{
    int v = 0;
    sl_config_get_bool(cfg, key, &v);
    return v;
}

/* defaults < --config file < environment < flags */
static int load_config(int argc, char **argv, sl_config **out)
{
    sl_config *cfg = NULL;
    const char *file = NULL;
    int first = argc, rc = sl_config_create(specs, NSPECS, &cfg);
    if (rc == SL_OK)
        rc = sl_config_load_env(cfg, "STARLING_", environ, 0);
    if (rc == SL_OK)
        rc = sl_config_load_args(cfg, argc, argv, &first);
    if (rc == SL_OK && (file = str(cfg, "config")) != NULL) {
        sl_config *full = NULL;
        char path[SL__AGENT_PATH_MAX];
        snprintf(path, sizeof path, "%s", file);
        rc = sl_config_create(specs, NSPECS, &full);
        if (rc == SL_OK)
            rc = sl_config_load_file(full, path);
        if (rc == SL_OK)
            rc = sl_config_load_env(full, "STARLING_", environ, 0);
        if (rc == SL_OK)
            rc = sl_config_load_args(full, argc, argv, &first);
        if (full != NULL) {
            sl_config_free(cfg);
            cfg = full;
        }
    }
    if (rc == SL_OK && first < argc) {
        fprintf(stderr, "starling-agent: unexpected argument '%s'\n", argv[first]);
        rc = SL_EINVAL;
    } else if (rc != SL_OK) {
        fprintf(stderr, "starling-agent: %s\n", cfg ? sl_config_error(cfg) : sl_strerror(rc));
    }
    if (rc != SL_OK) {
        sl_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return SL_OK;
}

static int exit_code(int rc)
{
    switch (rc) {
    case SL_OK:
        return 0;
    case SL_EINVAL:
        return 2;
    case SL_EPERM:
        return 3;
    case SL_ELAYOUT:
        return 4;
    case SL_EUNSUPPORTED:
        return 5;
    default:
        return 1;
    }
}

static int parse_straggle(const char *text, double *p, double *f)
{
    char *end;
    *p = strtod(text, &end);
    if (end == text || *end != ':' || !(*p >= 0 && *p <= 1))
        return SL_EINVAL;
    text = end + 1;
    *f = strtod(text, &end);
    return end != text && *end == '\0' && *f >= 1 && *f <= 1000 ? SL_OK : SL_EINVAL;
}

/* A rate in bits per second with an optional k or M: bytes per second into *@out. */
static int parse_bits(const char *text, const char **end_out, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v))
        return SL_EINVAL;
    if (*end == 'k' || *end == 'K')
        v *= 1e3, end++;
    else if (*end == 'M')
        v *= 1e6, end++;
    *out = v / 8.0;
    *end_out = end;
    return SL_OK;
}

/* "MIN:MAX" bits per second, MIN <= MAX, each > 0: bytes per second */
static int parse_links(const char *text, double *lo, double *hi)
{
    const char *end;
    if (parse_bits(text, &end, lo) != SL_OK || *end != ':' ||
        parse_bits(end + 1, &end, hi) != SL_OK || *end != '\0' || *hi < *lo)
        return SL_EINVAL;
    return SL_OK;
}

/* "P:MODE": P in [0, 1], MODE an sl_agent_poison other than none */
static int parse_poison(const char *text, double *p, sl_agent_poison *mode)
{
    char *end;
    *p = strtod(text, &end);
    if (end == text || *end != ':' || !(*p >= 0 && *p <= 1))
        return SL_EINVAL;
    if (sl_agent_poison_parse(end + 1, mode) != SL_OK || *mode == SL_AGENT_POISON_NONE)
        return SL_EINVAL;
    return SL_OK;
}

static void print_stats(const sl_agent_stats *s)
{
    printf("device %" PRId64 ": %" PRIu64 " participations (%" PRIu64 " accepted, %" PRIu64
           " duplicates, %" PRIu64 " folded, %" PRIu64 " discarded, %" PRIu64
           " dropped), model version %" PRId64 ", %" PRIu64 " bytes up, %" PRIu64
           " down, upload %.0f B/s%s%s\n",
           s->device_id, s->participations, s->accepted, s->duplicates, s->folded, s->discarded,
           s->dropped, s->model_version, s->bytes_up, s->bytes_down, s->upload_bytes_per_s,
           s->poison != SL_AGENT_POISON_NONE ? ", poisoned " : "",
           s->poison != SL_AGENT_POISON_NONE ? sl_agent_poison_name(s->poison) : "");
}

/* 1 when @uri can only be read through a task's data contract: every source but a
 * Fashion-MNIST directory and a CSV file whose URI names its label's kind or classes. */
static int contract_only(const char *uri)
{
    size_t q;
    if (uri == NULL || !sl_source_is_uri(uri) || strncmp(uri, "idx:", 4) == 0)
        return 0;
    if (strncmp(uri, "csv:", 4) != 0)
        return 1;
    q = strcspn(uri, "?");
    return uri[q] == '\0' ||
           (strstr(uri + q, "kind=") == NULL && strstr(uri + q, "classes=") == NULL);
}

/* A fleet's data: --data read through the --data_contract file, split among its clients. */
static int load_fleet_contract(const sl_config *cfg, const char *spec, uint32_t of, uint32_t fleet,
                               uint64_t seed, sl_contract **contract, sl_agent_data **data,
                               char *err, size_t errcap)
{
    const char *file = str(cfg, "data_contract");
    void *text = NULL;
    size_t len = 0;
    char why[400];
    int rc;
    if (file == NULL) {
        snprintf(err, errcap, "--fleet with %s needs --data_contract FILE (what a sample is)",
                 str(cfg, "data"));
        return SL_EINVAL;
    }
    if ((rc = sl_fs_read_file(file, SL_CONTRACT_MAX_BYTES, &text, &len)) != SL_OK) {
        snprintf(err, errcap, "--data_contract %s: %s", file, sl_strerror(rc));
        return rc;
    }
    rc = sl_contract_parse(text, len, contract, why, sizeof why);
    free(text);
    if (rc != SL_OK) {
        snprintf(err, errcap, "--data_contract %s: %s", file, why);
        return SL_EINVAL;
    }
    return sl_agent_data_load_contract(str(cfg, "data"), *contract, spec, of, 0, fleet, seed, data,
                                       err, errcap);
}

static int run(const sl_config *cfg, sl_agent_options *o, char *err, size_t errcap)
{
    const char *spec = str(cfg, "partition");
    uint32_t fleet = (uint32_t)num(cfg, "fleet"), of = (uint32_t)num(cfg, "of");
    uint32_t client = (uint32_t)num(cfg, "client");
    sl_agent_data *data = NULL;
    sl_contract *contract = NULL;
    int rc;
    if (flag(cfg, "evaluator")) {
        if (contract_only(str(cfg, "data"))) {
            /* the test data through the task's data contract (fetched first) */
            if ((rc = sl_source_check_uri(str(cfg, "data"), err, errcap)) != SL_OK)
                return rc;
            o->data_source = str(cfg, "data");
            return sl_agent_evaluate(o, err, errcap);
        }
        rc = sl_agent_data_load_test(str(cfg, "data"), &data, err, errcap);
        if (rc == SL_OK) {
            o->data = data;
            rc = sl_agent_evaluate(o, err, errcap);
        }
        sl_agent_data_free(data);
        return rc;
    }
    if (fleet > 0) {
        if (spec == NULL)
            spec = "iid";
        if (of < fleet)
            of = fleet;
        if (contract_only(str(cfg, "data")))
            rc = load_fleet_contract(cfg, spec, of, fleet, o->seed, &contract, &data, err, errcap);
        else
            rc = sl_agent_data_load_source(str(cfg, "data"), spec, of, 0, fleet, o->seed, &data,
                                           err, errcap);
        if (rc == SL_OK) {
            sl_agent_fleet_summary s;
            o->data = data;
            rc = sl_agent_fleet_run(o, fleet, &s);
            printf("fleet of %u: %" PRIu64 " accepted (%" PRIu64 " duplicates), %" PRIu64
                   " folded, %" PRIu64 " discarded, %" PRIu64 " dropped, %" PRIu64
                   " crashes, %" PRIu64 " cuts, %" PRIu64 " resumes, %" PRIu64 " bytes up, %" PRIu64
                   " down, %u poisoned, %u devices failed\n",
                   s.devices, s.accepted, s.duplicates, s.folded, s.discarded, s.dropped, s.crashes,
                   s.cuts, s.resumes, s.bytes_up, s.bytes_down, s.poisoned, s.failed);
            if (rc != SL_OK)
                snprintf(err, errcap, "fleet: %s", sl_strerror(rc));
        }
        sl_agent_data_free(data);
        sl_contract_free(contract);
        return rc;
    }
    if (client >= of) {
        snprintf(err, errcap, "--client %u is not below --of %u", client, of);
        return SL_EINVAL;
    }
    /* a source read through the task's data contract, and, for a task without one, the data
     * that can be read without it (Fashion-MNIST, a CSV file with its label options) */
    o->data_source = sl_source_is_uri(str(cfg, "data")) ? str(cfg, "data") : NULL;
    if (contract_only(str(cfg, "data"))) {
        rc = sl_source_check_uri(str(cfg, "data"), err, errcap);
        if (rc != SL_OK)
            return rc;
        if (spec != NULL || of != 1) {
            snprintf(err, errcap,
                     "--partition and --of split a data set among simulated clients: %s is "
                     "this device's own",
                     str(cfg, "data"));
            return SL_EINVAL;
        }
        rc = SL_OK;
    } else {
        rc = sl_agent_data_load_source(str(cfg, "data"), spec, of, client, 1, o->seed, &data, err,
                                       errcap);
    }
    if (rc == SL_OK) {
        sl_agent *a = NULL;
        o->data = data;
        o->client = client;
        o->on_event = log_event;
        rc = sl_agent_create(o, &a, err, errcap);
        if (rc == SL_OK) {
            sl_agent_stats s;
            rc = sl_agent_run(a);
            sl_agent_get_stats(a, &s);
            print_stats(&s);
            if (rc != SL_OK)
                snprintf(err, errcap, "%s", sl_strerror(rc));
        }
        sl_agent_free(a);
    }
    sl_agent_data_free(data);
    return rc;
}

int sl_agent_main(int argc, char **argv)
{
    sl_config *cfg = NULL;
    sl_agent_options o;
    sl_log_level level;
    char *enrol = NULL, *admin = NULL, err[512] = "";
    uint64_t size = 0;
    int64_t task = 0;
    struct sigaction sa;
    int rc;

    /* first: a SIGTERM while the data loads must stop us cleanly too */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            char text[8192];
            if (sl_config_create(specs, NSPECS, &cfg) == SL_OK)
                sl_config_usage(cfg, text, sizeof text);
            else
                text[0] = '\0';
            printf("usage: starling-agent [--key value | --key=value]...\n"
                   "Each key may also be set as STARLING_<KEY> in the environment.\n\n%s",
                   text);
            sl_config_free(cfg);
            return 0;
        }
    if (load_config(argc, argv, &cfg) != SL_OK)
        return 2;
    if (sl_log_parse_level(str(cfg, "log_level"), &level) != SL_OK) {
        fprintf(stderr, "starling-agent: log_level: \"%s\" is not a level\n",
                str(cfg, "log_level"));
        sl_config_free(cfg);
        return 2;
    }
    sl_log_set_sink(sl_log_sink_stderr, NULL);
    sl_log_set_level(level);
    sl_agent_options_default(&o);
    o.coordinator = str(cfg, "coordinator");
    o.ca_file = str(cfg, "ca_file");
    o.pin = str(cfg, "pin");
    o.enrolment_token = str(cfg, "enrolment_token");
    o.state_dir = str(cfg, "state_dir");
    o.model = str(cfg, "model");
    sl_config_get_int(cfg, "task", &task);
    o.task_id = task;
    o.seed = (uint64_t)num(cfg, "seed");
    o.epochs = (uint32_t)num(cfg, "epochs");
    o.batch = (uint32_t)num(cfg, "batch");
    o.lr = dbl(cfg, "lr");
    o.threads = (unsigned)num(cfg, "threads");
    if (o.threads == 0)
        sl_nn_set_threads(0); /* one per CPU; the agent leaves a 0 as it finds it */
    o.max_train_seconds = dbl(cfg, "max_train_seconds");
    {
        int64_t v = 0;
        uint64_t bytes = 0;
        sl_config_get_int(cfg, "max_nodes", &v);
        o.max_nodes = (uint32_t)v;
        sl_config_get_int(cfg, "max_params", &v);
        o.max_params = (uint64_t)v;
        sl_config_get_size(cfg, "memory_budget", &bytes);
        o.memory_budget = bytes;
    }
    o.once = flag(cfg, "once");
    o.rounds = (uint32_t)num(cfg, "rounds");
    o.eval_interval_ms = ms(cfg, "eval_interval");
    o.faults.dropout = dbl(cfg, "dropout");
    o.faults.cut = dbl(cfg, "cut");
    o.faults.crash = dbl(cfg, "crash");
    o.speed_max = dbl(cfg, "speeds");
    sl_config_get_size(cfg, "cut_span", &size);
    o.faults.cut_span = (size_t)size;
    sl_config_get_size(cfg, "chunk", &size);
    o.chunk_bytes = (size_t)size;
    sl_config_get_size(cfg, "download_chunk", &size);
    o.download_chunk_bytes = (size_t)size;
    o.audit = flag(cfg, "audit");
    o.sessions = flag(cfg, "sessions");
    o.retry_base_ms = ms(cfg, "retry_base");
    o.max_attempts = (unsigned)num(cfg, "max_attempts");
    o.request_timeout_ms = ms(cfg, "request_timeout");
    o.stall_timeout_ms = ms(cfg, "stall_timeout");
    o.max_wait_ms = ms(cfg, "max_wait");
    o.bandwidth_aware = flag(cfg, "bandwidth_aware");
    o.min_density_fraction = dbl(cfg, "min_density_fraction");
    o.dgc_momentum = dbl(cfg, "dgc_momentum");
    o.split_positions = flag(cfg, "split_positions");
    o.stop = &stop_flag;
    sl_config_get_size(cfg, "data_memory", &o.data_memory);
    o.data_refresh_ms = ms(cfg, "data_refresh");
    rc = SL_OK;
    if (strcmp(str(cfg, "data_keep"), "newest") != 0 &&
        strcmp(str(cfg, "data_keep"), "reservoir") != 0) {
        snprintf(err, sizeof err, "--data_keep is newest or reservoir, not \"%s\"",
                 str(cfg, "data_keep"));
        rc = SL_EINVAL;
    }
    o.data_reservoir = strcmp(str(cfg, "data_keep"), "reservoir") == 0;
    if (rc != SL_OK) {
    } else if (o.coordinator == NULL || task <= 0) {
        snprintf(err, sizeof err, "--coordinator and --task are required (--help lists options)");
        rc = SL_EINVAL;
    } else if (parse_straggle(str(cfg, "straggle"), &o.faults.straggle,
                              &o.faults.straggle_factor) != SL_OK) {
        snprintf(err, sizeof err, "--straggle wants P:F with P in [0, 1] and F >= 1");
        rc = SL_EINVAL;
    } else if (str(cfg, "poison") != NULL &&
               parse_poison(str(cfg, "poison"), &o.faults.poison, &o.faults.poison_mode) != SL_OK) {
        snprintf(err, sizeof err,
                 "--poison wants P:MODE with P in [0, 1] and MODE scale100, flip "
                 "or nan");
        rc = SL_EINVAL;
    } else if (str(cfg, "links") != NULL &&
               parse_links(str(cfg, "links"), &o.link_min_bps, &o.link_max_bps) != SL_OK) {
        snprintf(err, sizeof err,
                 "--links wants MIN:MAX bits per second (a number, k or M: 64k:20M), MIN <= MAX");
        rc = SL_EINVAL;
    } else if ((num(cfg, "fleet") == 0 && !flag(cfg, "evaluator")) &&
               (o.faults.cut > 0 || o.faults.crash > 0 || o.speed_max > 1 || o.link_max_bps > 0)) {
        snprintf(err, sizeof err,
                 "--cut, --crash, --speeds and --links are fleet faults (--fleet N)");
        rc = SL_EINVAL;
    }
    if (rc == SL_OK && str(cfg, "enrolment_token_file") != NULL &&
        (rc = sl_fs_read_secret(str(cfg, "enrolment_token_file"), &enrol)) != SL_OK)
        snprintf(err, sizeof err, "enrolment_token_file: %s", sl_strerror(rc));
    if (rc == SL_OK && str(cfg, "admin_token_file") != NULL &&
        (rc = sl_fs_read_secret(str(cfg, "admin_token_file"), &admin)) != SL_OK)
        snprintf(err, sizeof err, "admin_token_file: %s", sl_strerror(rc));
    if (rc == SL_OK) {
        if (enrol != NULL)
            o.enrolment_token = enrol;
        o.admin_token = admin;
        rc = run(cfg, &o, err, sizeof err);
    }
    if (rc != SL_OK)
        fprintf(stderr, "starling-agent: %s\n", err[0] ? err : sl_strerror(rc));
    if (enrol != NULL)
        memset(enrol, 0, strlen(enrol));
    if (admin != NULL)
        memset(admin, 0, strlen(admin));
    free(enrol);
    free(admin);
    sl_config_free(cfg);
    return exit_code(rc);
}
