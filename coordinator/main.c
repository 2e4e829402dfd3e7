/*
 * starling-coordinator - the coordinator program: opens the store
 * (<data-dir>/starling.db), the round engine (which recovers open rounds)
 * and the HTTPS server, then waits for SIGTERM or SIGINT; SIGHUP reloads the
 * TLS certificate and key (sl_server_reload_tls()) and the token files
 * (sl_server_set_tokens()), as file_watch does for the files that changed.
 *
 * Configuration: defaults < --config FILE (key = value lines) <
 * STARLING_* environment < command-line flags. `--help` lists every key.
 *
 * Shutdown: stop accepting connections, let requests in flight finish
 * within the grace period, stop the daemon and the ticker, close the
 * engine and the store (which finishes queued writes and checkpoints), and
 * exit 0. Every acknowledged update was durable before its answer, so a
 * kill -9 instead loses nothing acknowledged either.
 *
 * Exit status: 0 after a clean shutdown, 1 when something failed at
 * run time, 2 for a configuration error.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "starling/api_server.h"
#include "starling/common.h"
#include "starling/round.h"
#include "starling/store.h"

extern char **environ;

static const sl_config_spec specs[] = {
    {"config", SL_CONFIG_STRING, NULL, 0, 0, "a file of key = value lines (read first)"},
    {"listen", SL_CONFIG_STRING, "127.0.0.1:8443", 0, 0, "address:port to serve on"},
    {"data_dir", SL_CONFIG_STRING, "./starling-data", 0, 0, "directory of starling.db"},
    {"store", SL_CONFIG_STRING, NULL, 0, 0,
     "the store: a postgresql:// URI (replicas share it) or an SQLite file "
     "(unset: <data_dir>/starling.db)"},
    {"store_file", SL_CONFIG_STRING, NULL, 0, 0,
     "a file holding the store's URI (a secret: the URI may carry a password)"},
    {"replica", SL_CONFIG_STRING, NULL, 0, 0,
     "this replica's name among coordinators sharing a PostgreSQL store, unique, of "
     "A-Z a-z 0-9 . _ : - (unset: the host name; refused for an SQLite store)"},
    {"leader_lease", SL_CONFIG_DURATION, "5s", 100, 600000,
     "the leader's lease: a dead leader's rounds move on within about this"},
    {"tls_cert", SL_CONFIG_STRING, NULL, 0, 0, "TLS certificate chain (PEM)"},
    {"tls_key", SL_CONFIG_STRING, NULL, 0, 0, "TLS private key (PEM)"},
    {"file_watch", SL_CONFIG_DURATION, "60s", 0, 86400000,
     "how often tls_cert, tls_key and the token files are checked for a change, which reloads "
     "what changed as SIGHUP reloads them all (0: on SIGHUP only)"},
    {"insecure_http", SL_CONFIG_BOOL, "false", 0, 0,
     "serve plain HTTP (loopback demos, TLS-terminating ingress)"},
    {"admin_token_file", SL_CONFIG_STRING, NULL, 0, 0,
     "file holding the operators' bearer token (unset: operator writes refused)"},
    {"enrolment_token_file", SL_CONFIG_STRING, NULL, 0, 0,
     "file holding the device enrolment token (unset: enrolment refused)"},
    {"public_status", SL_CONFIG_BOOL, "false", 0, 0,
     "read-only operator endpoints (status, rounds, metrics, page) need no token"},
    {"max_body", SL_CONFIG_SIZE, "16M", 1024, 1073741824.0, "largest request body"},
    {"threads", SL_CONFIG_INT, "4", 1, 256, "HTTP worker threads"},
    {"connection_limit", SL_CONFIG_INT, "1024", 1, 1000000, "concurrent connections"},
    {"per_ip_limit", SL_CONFIG_INT, "64", 1, 1000000, "concurrent connections per client IP"},
    {"connection_timeout", SL_CONFIG_DURATION, "30s", 1000, 3600000,
     "idle or too slow connections are closed after this"},
    {"device_rate", SL_CONFIG_DOUBLE, "10", 0, 1e6, "requests per second per device (0: off)"},
    {"device_burst", SL_CONFIG_DOUBLE, "50", 1, 1e6, "burst of requests per device"},
    {"timestamp_window", SL_CONFIG_DURATION, "5m", 1000, 86400000,
     "allowed clock skew of signed requests"},
    {"upload_ttl", SL_CONFIG_DURATION, "24h", 1000, 2592000000.0,
     "upload sessions expire after this"},
    {"session_ttl", SL_CONFIG_DURATION, "1h", 1000, 2592000000.0,
     "how long a device session lasts (one ECDSA handshake, then HMAC-signed requests)"},
    {"model_cache", SL_CONFIG_SIZE, "64M", 0, 17179869184.0, "memory for encoded models"},
    {"log_level", SL_CONFIG_STRING, "info", 0, 0, "error, warn, info, debug or trace"},
    {"grace", SL_CONFIG_DURATION, "10s", 0, 3600000,
     "on SIGTERM, how long requests in flight may take to finish"},
};

#define NSPECS (sizeof specs / sizeof specs[0])

/* What tells a file's new content: its inode, size and change time (stat follows symbolic
 * links, so a Kubernetes Secret's swapped ..data link counts). All zero when it is missing. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} file_id;

static file_id file_id_of(const char *path)
{
    struct stat st;
    file_id id;
    memset(&id, 0, sizeof id);
    if (path != NULL && stat(path, &st) == 0) {
        id.dev = st.st_dev;
        id.ino = st.st_ino;
        id.size = st.st_size;
        id.mtime = st.st_mtim;
        id.ctime = st.st_ctim;
    }
    return id;
}

static int file_id_same(const file_id *a, const file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The files SIGHUP reloads and file_watch watches: the certificate and its key (reloaded
 * together), and each token file. */
enum { W_CERT, W_KEY, W_ADMIN, W_ENROL, W_FILES };

static const char *const watched[W_FILES] = {"tls_cert", "tls_key", "admin_token_file",
                                             "enrolment_token_file"};

/* Reload, for @why (SIGHUP, or the files changed), the certificate and key when either is in
 * @which, and each token file in @which that is configured; log each. What cannot be read or
 * used is logged and keeps what is in use. */
static void reload_files(sl_server *server, const sl_config *cfg, int insecure_http,
                         const int which[W_FILES], const char *why)
{
    const char *path[W_FILES];
    for (int i = 0; i < W_FILES; i++)
        if (sl_config_get_string(cfg, watched[i], &path[i]) != SL_OK)
            path[i] = NULL;
    if (!insecure_http && (which[W_CERT] || which[W_KEY])) {
        char err[768];
        if (sl_server_reload_tls(server, path[W_CERT], path[W_KEY], err, sizeof err) != SL_OK)
            sl_log(SL_LOG_ERROR, "main", "%s: the TLS certificate was not reloaded: %s", why, err);
        else
            sl_log(SL_LOG_INFO, "main", "%s: TLS certificate and key reloaded from %s and %s", why,
                   path[W_CERT], path[W_KEY]);
    }
    for (int i = W_ADMIN; i <= W_ENROL; i++) {
        char *token = NULL;
        int rc;
        if (!which[i] || path[i] == NULL)
            continue;
        rc = sl_fs_read_secret(path[i], &token);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "main", "%s: %s %s: %s; the token in use stays", why, watched[i],
                   path[i], rc == SL_EINVAL ? "empty" : sl_strerror(rc));
            continue;
        }
        sl_server_set_tokens(server, i == W_ADMIN ? token : NULL, i == W_ENROL ? token : NULL);
        sl_log(SL_LOG_INFO, "main", "%s: the %s token reloaded from %s", why,
               i == W_ADMIN ? "admin" : "enrolment", path[i]);
        memset(token, 0, strlen(token));
        free(token);
    }
}

static void usage(const sl_config *cfg)
{
    char text[8192];
    sl_config_usage(cfg, text, sizeof text);
    fprintf(stderr,
            "usage: starling-coordinator [--key value | --key=value]...\n"
            "Each key may also be set as STARLING_<KEY> in the environment.\n\n%s",
            text);
}

/* defaults < --config file < environment < flags */
static int load_config(int argc, char **argv, sl_config **out)
{
    sl_config *cfg = NULL;
    const char *file = NULL;
    int rc = sl_config_create(specs, NSPECS, &cfg);
    if (rc == SL_OK)
        rc = sl_config_load_env(cfg, "STARLING_", environ, 0);
    if (rc == SL_OK)
        rc = sl_config_load_args(cfg, argc, argv, NULL);
    if (rc == SL_OK && sl_config_get_string(cfg, "config", &file) == SL_OK && file != NULL) {
        sl_config *full = NULL;
        char path[4096];
        snprintf(path, sizeof path, "%s", file);
        rc = sl_config_create(specs, NSPECS, &full);
        if (rc == SL_OK)
            rc = sl_config_load_file(full, path);
        if (rc == SL_OK)
            rc = sl_config_load_env(full, "STARLING_", environ, 0);
        if (rc == SL_OK)
            rc = sl_config_load_args(full, argc, argv, NULL);
        if (full != NULL) {
            sl_config_free(cfg);
            cfg = full;
        }
    }
    if (rc != SL_OK) {
        fprintf(stderr, "starling-coordinator: %s\n", cfg ? sl_config_error(cfg) : sl_strerror(rc));
        sl_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return SL_OK;
}

/* A replica's name: 1 to SL_STORE_MAX_OWNER - 1 of [A-Za-z0-9._:-] (kept whole: two
 * replicas whose names shared a cut prefix would both hold the lease). */
static int replica_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= SL_STORE_MAX_OWNER)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (!isalnum(ch) && ch != '.' && ch != '_' && ch != ':' && ch != '-')
            return 0;
    }
    return 1;
}

static const char *str(const sl_config *cfg, const char *key)
{
    const char *v = NULL;
    sl_config_get_string(cfg, key, &v);
    return v;
}

/* @uri with the password of a postgresql://user:password@host/... URI as "***" (logs). */
static void redact_password(const char *uri, char *out, size_t cap)
{
    const char *scheme = strstr(uri, "://"), *at, *colon;
    snprintf(out, cap, "%s", uri);
    if (scheme == NULL)
        return;
    at = strchr(scheme + 3, '@');
    colon = strchr(scheme + 3, ':');
    if (at != NULL && colon != NULL && colon < at)
        snprintf(out, cap, "%.*s***%s", (int)(colon + 1 - uri), uri, at);
}

int main(int argc, char **argv)
{
    sl_config *cfg = NULL;
    sl_server_options so;
    sl_store_options sto;
    sl_engine_options eo;
    sl_store *store = NULL;
    sl_engine *engine = NULL;
    sl_server *server = NULL;
    char *admin = NULL, *enrol = NULL, db[4200], shown[4200], err[512];
    char replica[SL_STORE_MAX_OWNER] = "";
    const char *data_dir;
    sl_log_level level;
    int64_t v, grace = 0, watch = 0;
    file_id seen[W_FILES];
    uint64_t size;
    double d;
    int flag, rc, sig, status = 1;
    sigset_t stop;

    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (sl_config_create(specs, NSPECS, &cfg) == SL_OK)
                usage(cfg);
            sl_config_free(cfg);
            return 0;
        }
    if (load_config(argc, argv, &cfg) != SL_OK)
        return 2;
    if (sl_log_parse_level(str(cfg, "log_level"), &level) != SL_OK) {
        fprintf(stderr, "starling-coordinator: log_level: \"%s\" is not a level\n",
                str(cfg, "log_level"));
        sl_config_free(cfg);
        return 2;
    }
    sl_log_set_sink(sl_log_sink_stderr, NULL);
    sl_log_set_level(level);

    sl_server_options_default(&so);
    so.listen = str(cfg, "listen");
    so.tls_cert_file = str(cfg, "tls_cert");
    so.tls_key_file = str(cfg, "tls_key");
    sl_config_get_bool(cfg, "insecure_http", &so.insecure_http);
    sl_config_get_bool(cfg, "public_status", &flag);
    so.public_status = flag;
    sl_config_get_size(cfg, "max_body", &so.max_body);
    sl_config_get_int(cfg, "threads", &v);
    so.threads = (unsigned)v;
    sl_config_get_int(cfg, "connection_limit", &v);
    so.connection_limit = (unsigned)v;
    sl_config_get_int(cfg, "per_ip_limit", &v);
    so.per_ip_connection_limit = (unsigned)v;
    sl_config_get_duration_ms(cfg, "connection_timeout", &v);
    so.connection_timeout_s = (unsigned)((v + 999) / 1000);
    sl_config_get_double(cfg, "device_rate", &d);
    so.device_rate = d;
    sl_config_get_double(cfg, "device_burst", &d);
    so.device_burst = d;
    sl_config_get_duration_ms(cfg, "timestamp_window", &so.timestamp_window_ms);
    sl_config_get_duration_ms(cfg, "upload_ttl", &so.upload_ttl_ms);
    sl_config_get_duration_ms(cfg, "session_ttl", &so.session_ttl_ms);
    sl_config_get_size(cfg, "model_cache", &size);
    so.model_cache_bytes = size > SIZE_MAX ? SIZE_MAX : (size_t)size;
    sl_config_get_duration_ms(cfg, "grace", &grace);
    /* what the watched files are before anything reads them: a file replaced while the
     * coordinator starts is seen as changed by the first check, not taken for the one read */
    for (int i = 0; i < W_FILES; i++)
        seen[i] = file_id_of(str(cfg, watched[i]));
    if (str(cfg, "admin_token_file") != NULL &&
        (rc = sl_fs_read_secret(str(cfg, "admin_token_file"), &admin)) != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "admin_token_file %s: %s", str(cfg, "admin_token_file"),
               rc == SL_EINVAL ? "empty" : sl_strerror(rc));
        status = 2;
        goto out;
    }
    if (str(cfg, "enrolment_token_file") != NULL &&
        (rc = sl_fs_read_secret(str(cfg, "enrolment_token_file"), &enrol)) != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "enrolment_token_file %s: %s",
               str(cfg, "enrolment_token_file"), rc == SL_EINVAL ? "empty" : sl_strerror(rc));
        status = 2;
        goto out;
    }
    so.admin_token = admin;
    so.enrolment_token = enrol;
    if (admin == NULL)
        sl_log(SL_LOG_WARN, "main", "no admin_token_file: operator writes are refused");
    if (enrol == NULL)
        sl_log(SL_LOG_WARN, "main", "no enrolment_token_file: enrolment is refused");
    if (so.insecure_http)
        sl_log(SL_LOG_WARN, "main", "serving plain HTTP (insecure_http)");

    /* SIGTERM/SIGINT (and SIGHUP) go to sigwait() below, never to another
     * thread: block them before any thread starts so every thread inherits
     * the mask */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    data_dir = str(cfg, "data_dir");
    if (str(cfg, "store_file") != NULL && str(cfg, "store") != NULL) {
        sl_log(SL_LOG_ERROR, "main", "store and store_file: give one of them");
        status = 2;
        goto out;
    }
    if (str(cfg, "replica") != NULL && !replica_name_ok(str(cfg, "replica"))) {
        sl_log(SL_LOG_ERROR, "main",
               "replica: \"%.80s\" is not 1 to %d of A-Z a-z 0-9 . _ : - (a name among the "
               "coordinators sharing the store; two must never share one)",
               str(cfg, "replica"), SL_STORE_MAX_OWNER - 1);
        status = 2;
        goto out;
    }
    if (str(cfg, "store_file") != NULL) {
        char *uri = NULL;
        rc = sl_fs_read_secret(str(cfg, "store_file"), &uri);
        if (rc != SL_OK) {
            sl_log(SL_LOG_ERROR, "main", "store_file %s: %s", str(cfg, "store_file"),
                   rc == SL_EINVAL ? "empty" : sl_strerror(rc));
            status = 2;
            goto out;
        }
        snprintf(db, sizeof db, "%s", uri);
        memset(uri, 0, strlen(uri));
        free(uri);
    } else if (str(cfg, "store") != NULL)
        snprintf(db, sizeof db, "%s", str(cfg, "store"));
    else
        snprintf(db, sizeof db, "%s/starling.db", data_dir);
    sl_store_options_default(&sto);
    sto.path = db;
    redact_password(db, shown, sizeof shown);
    if (!sl_store_is_url(db) && str(cfg, "replica") != NULL) {
        sl_log(SL_LOG_ERROR, "main",
               "replica: replicas share a postgresql:// store; %s is an SQLite file, which one "
               "coordinator owns",
               shown);
        status = 2;
        goto out;
    }
    if (mkdir(data_dir, 0700) != 0 && errno != EEXIST) {
        sl_log(SL_LOG_ERROR, "main", "data_dir %s: %s", data_dir, strerror(errno));
        goto out;
    }
    rc = sl_store_open(&sto, &store, err, sizeof err);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "store %s: %s", shown, err);
        goto out;
    }
    sl_log(SL_LOG_INFO, "main", "store: %s (%s)", shown, sl_store_backend(store));
    sl_engine_options_default(&eo);
    if (sl_store_is_url(db)) { /* replicas may share the store: leadership through the lease */
        if (str(cfg, "replica") != NULL)
            snprintf(replica, sizeof replica, "%s", str(cfg, "replica"));
        else if (gethostname(replica, sizeof replica - 1) != 0 || replica[0] == '\0')
            snprintf(replica, sizeof replica, "coordinator-%ld", (long)getpid());
        eo.replica = replica;
        sl_config_get_duration_ms(cfg, "leader_lease", &eo.lease_ms);
        sl_log(SL_LOG_INFO, "main", "replica %s (leader lease %lld ms)", replica,
               (long long)eo.lease_ms);
    }
    rc = sl_engine_open(store, &eo, &engine, err, sizeof err);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "engine: %s", err);
        goto out;
    }
    rc = sl_server_create(&so, store, engine, &server, err, sizeof err);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "server: %s", err);
        status = rc == SL_EINVAL ? 2 : 1;
        goto out;
    }
    rc = sl_server_start(server, err, sizeof err);
    if (rc != SL_OK) {
        sl_log(SL_LOG_ERROR, "main", "server: %s", err);
        goto out;
    }
    sl_log(SL_LOG_INFO, "main", "coordinator ready: %s (port %u), data in %s", so.listen,
           (unsigned)sl_server_port(server), data_dir);

    /* SIGHUP reloads the certificate with its key (for new connections; open ones keep
     * theirs) and the token files; every file_watch, the files whose content changed are
     * reloaded the same way. A change is tried once: files refused (a key not yet replaced
     * beside its certificate) are tried again when one of them changes again. */
    sl_config_get_duration_ms(cfg, "file_watch", &watch);
    for (;;) {
        static const int all[W_FILES] = {1, 1, 1, 1};
        int changed[W_FILES], any = 0;
        if (watch > 0) {
            struct timespec every = {(time_t)(watch / 1000), (long)(watch % 1000) * 1000000};
            sig = sigtimedwait(&stop, NULL, &every);
            if (sig < 0 && errno != EAGAIN)
                continue; /* EINTR */
        } else if (sigwait(&stop, &sig) != 0) {
            continue;
        }
        if (sig >= 0 && sig != SIGHUP)
            break;
        for (int i = 0; i < W_FILES; i++) {
            file_id now = file_id_of(str(cfg, watched[i]));
            changed[i] = !file_id_same(&now, &seen[i]);
            any |= changed[i];
            seen[i] = now;
        }
        if (sig == SIGHUP)
            reload_files(server, cfg, so.insecure_http, all, "SIGHUP");
        else if (any)
            reload_files(server, cfg, so.insecure_http, changed, "a watched file changed");
    }
    sl_log(SL_LOG_INFO, "main", "%s: stopping (grace %lld ms)",
           sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)grace);
    sl_server_quiesce(server);
    if (sl_server_drain(server, grace) != SL_OK)
        sl_log(SL_LOG_WARN, "main", "requests still running after the grace period: closed");
    status = 0;
out:
    sl_server_free(server);
    sl_engine_close(engine);
    sl_store_close(store);
    if (status == 0)
        sl_log(SL_LOG_INFO, "main", "stopped cleanly");
    if (admin != NULL)
        memset(admin, 0, strlen(admin));
    if (enrol != NULL)
        memset(enrol, 0, strlen(enrol));
    free(admin);
    free(enrol);
    sl_config_free(cfg);
    return status;
}
