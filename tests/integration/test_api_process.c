/*
 * The server on the wire and as a program: the 413 that comes before the
 * body, the curl program, TLS and configuration errors of
 * starling-coordinator, SIGTERM with a request in flight, kill -9 in the
 * middle of an upload and the restart that resumes it, and every JSON
 * answer of the run checked against api/openapi.yaml.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../support/sl_test.h"
#include "api_harness.h"

void test_413_before_body(void **state)
{
    ah_fx f;
    char req[512], reply[4096];
    int fd, port;
    ah_resp r;
    (void)state;
    ah_fx_open(&f, "api_413", NULL);
    port = (int)sl_server_port(f.server);
    /* a declared length above max_body: answered before a byte of the body */
    fd = ah_raw_connect(port);
    snprintf(req, sizeof req,
             "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
             "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n",
             AH_ADMIN);
    ah_raw_send(fd, req, strlen(req));
    ah_raw_read(fd, reply, sizeof reply);
    close(fd);
    if (strncmp(reply, "HTTP/1.1 413", 12) != 0)
        fail_msg("expected 413 before the body, got: %s", reply);
    assert_non_null(strstr(reply, "https://starling.dev/problems/payload-too-large"));
    assert_non_null(strstr(reply, "X-Request-Id: "));
    fd = ah_raw_connect(port);
    snprintf(req, sizeof req,
             "PATCH /v1/uploads/abcdef HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\n"
             "Content-Length: 2000000\r\n\r\n");
    ah_raw_send(fd, req, strlen(req));
    ah_raw_read(fd, reply, sizeof reply);
    close(fd);
    assert_int_equal(strncmp(reply, "HTTP/1.1 413", 12), 0);

    /* no Content-Length: read up to the limit, then 413 */
    {
        static char chunk[65536];
        char line[32];
        fd = ah_raw_connect(port);
        snprintf(req, sizeof req,
                 "POST /v1/devices HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                 "Content-Type: application/json\r\n\r\n");
        ah_raw_send(fd, req, strlen(req));
        memset(chunk, ' ', sizeof chunk);
        for (int i = 0; i < 18; i++) { /* 1.125 MiB > the fixture's 1 MiB */
            snprintf(line, sizeof line, "%zx\r\n", sizeof chunk);
            ah_raw_send(fd, line, strlen(line));
            ah_raw_send(fd, chunk, sizeof chunk);
            ah_raw_send(fd, "\r\n", 2);
        }
        ah_raw_send(fd, "0\r\n\r\n", 5);
        ah_raw_read(fd, reply, sizeof reply);
        close(fd);
        if (strncmp(reply, "HTTP/1.1 413", 12) != 0)
            fail_msg("chunked: expected 413, got: %s", reply);
    }
    ah_get(&f, "/healthz", NULL, 0, &r); /* still serving */
    assert_int_equal(r.status, 200);
    ah_resp_free(&r);
    ah_fx_close(&f);
}

/* ---- the curl program ------------------------------------------------------------------ */

void test_curl_cli(void **state)
{
    ah_fx f;
    char args[1024], out[4096], big[700];
    FILE *fp;
    (void)state;
    if (!ah_have("curl")) {
        fprintf(stderr, "test_curl_cli: no curl program; skipped\n");
        skip();
    }
    ah_fx_open(&f, "api_curl", NULL);
    snprintf(args, sizeof args, "-o /dev/null -w '%%{http_code}' %s/healthz", f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_string_equal(out, "200");
    snprintf(args, sizeof args, "-I -o /dev/null -w '%%{http_code}' %s/readyz", f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_string_equal(out, "200");
    snprintf(args, sizeof args, "-o /dev/null -w '%%{http_code}' -X DELETE %s/v1/status", f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_string_equal(out, "405");
    snprintf(args, sizeof args, "-D - -o /dev/null %s/v1/unknown", f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_int_equal(strncmp(out, "HTTP/1.1 404", 12), 0);
    assert_non_null(strcasestr(out, "content-type: application/problem+json"));
    snprintf(args, sizeof args,
             "-H 'Content-Type: application/json' -d '{bad' %s/v1/devices -w ' %%{http_code}'",
             f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_non_null(strstr(out, "https://starling.dev/problems/bad-request"));
    assert_non_null(strstr(out, " 400"));
    /* 2 MiB against a 1 MiB limit: curl asks "Expect: 100-continue" and
     * hears 413 instead, so it sends (almost) none of the body */
    snprintf(big, sizeof big, "%s/big.json", f.dir);
    fp = fopen(big, "w");
    assert_non_null(fp);
    for (int i = 0; i < 2048; i++) {
        static char kib[1024];
        memset(kib, ' ', sizeof kib);
        fwrite(kib, 1, sizeof kib, fp);
    }
    fclose(fp);
    snprintf(args, sizeof args,
             "-o /dev/null -w '%%{http_code} %%{size_upload}' -H 'Authorization: Bearer %s' "
             "-H 'Content-Type: application/json' --data-binary @%s %s/v1/tasks",
             AH_ADMIN, big, f.base);
    ah_curl_cli(args, out, sizeof out);
    assert_int_equal(strncmp(out, "413 ", 4), 0);
    assert_true(strtol(out + 4, NULL, 10) < 2 * 1024 * 1024);
    ah_fx_close(&f);
}

/* ---- the program: TLS, configuration errors, SIGTERM ------------------------------------- */

/* A self-signed certificate for 127.0.0.1, valid for @days, and its key (openssl). */
static void make_cert(const char *cert, const char *key, int days)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s -out %s -days %d -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
             key, cert, days);
    assert_int_equal(system(cmd), 0);
}

/* The served certificate's expiry in /metrics, minus now, in days (rounded). */
static long expiry_days(int port, const char *ca, const char *token)
{
    char url[128];
    const char *at;
    ah_resp r;
    long days = -1;
    snprintf(url, sizeof url, "https://127.0.0.1:%d/metrics", port);
    ah_https_bearer("GET", url, ca, token, &r);
    assert_int_equal(r.status, 200);
    at = strstr(r.body, "\nstarling_tls_certificate_expiry_timestamp_seconds ");
    if (at != NULL)
        days = lround(
            (strtod(at + strlen("\nstarling_tls_certificate_expiry_timestamp_seconds "), NULL) -
             (double)time(NULL)) /
            86400.0);
    ah_resp_free(&r);
    return days;
}

/* Copy @from to @to through a rename (the way a Secret or certbot replaces it). */
static void replace_file(const char *from, const char *to)
{
    char tmp[700], cmd[1600];
    snprintf(tmp, sizeof tmp, "%s.new", to);
    snprintf(cmd, sizeof cmd, "cp %s %s", from, tmp);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(rename(tmp, to), 0);
}

/* Whether a new connection to @port trusting @ca gets /healthz 200, within @ms. */
static int served_with(int port, const char *ca, int ms)
{
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/healthz", port);
    for (int waited = 0;; waited += 50) {
        ah_resp r;
        int ok;
        ah_https("GET", url, ca, &r);
        ok = r.status == 200;
        ah_resp_free(&r);
        if (ok || waited >= ms)
            return ok;
        usleep(50000);
    }
}

/* The status of GET /v1/status on @port (trusting @ca) with the bearer @token. */
static long status_with(int port, const char *ca, const char *token)
{
    char url[128];
    ah_resp r;
    long status;
    snprintf(url, sizeof url, "https://127.0.0.1:%d/v1/status", port);
    ah_https_bearer("GET", url, ca, token, &r);
    status = r.status;
    ah_resp_free(&r);
    return status;
}

/* The running program's certificate renewed by SIGHUP (its file_watch is an hour: the signal
 * reloads), after a SIGHUP whose files it cannot use (another certificate's key), which keeps
 * the one in use. @cert and @key are the files it was started with. */
static void renew_by_sighup(pid_t pid, int port, const char *dir, const char *cert, const char *key)
{
    char first[600], c1[600], k1[600], c2[600], k2[600], admin[600], token[600];
    snprintf(first, sizeof first, "%s/cert0.pem", dir); /* the first, for its clients */
    snprintf(c1, sizeof c1, "%s/cert1.pem", dir);
    snprintf(k1, sizeof k1, "%s/key1.pem", dir);
    snprintf(c2, sizeof c2, "%s/cert2.pem", dir);
    snprintf(k2, sizeof k2, "%s/key2.pem", dir);
    make_cert(c1, k1, 30);
    make_cert(c2, k2, 2);
    replace_file(cert, first);
    replace_file(c1, cert); /* a certificate whose key is not there yet */
    assert_int_equal(kill(pid, SIGHUP), 0);
    usleep(300000);
    assert_true(served_with(port, first, 0));
    assert_false(served_with(port, c1, 0));
    assert_int_equal(expiry_days(port, first, AH_ADMIN), 2);
    replace_file(k1, key);
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(served_with(port, c1, 5000));
    assert_false(served_with(port, first, 0));
    assert_int_equal(expiry_days(port, c1, AH_ADMIN), 30); /* the renewed one's */
    /* the files alone change nothing within the hour; SIGHUP reloads the token files too */
    replace_file(c2, cert);
    replace_file(k2, key);
    snprintf(admin, sizeof admin, "%s/admin", dir);
    snprintf(token, sizeof token, "%s/admin.next", dir);
    ah_write_file(token, "rotated-by-sighup\n");
    replace_file(token, admin);
    usleep(500000);
    assert_true(served_with(port, c1, 0));
    assert_int_equal(status_with(port, c1, AH_ADMIN), 200);
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(served_with(port, c2, 5000));
    assert_int_equal(status_with(port, c2, "rotated-by-sighup"), 200);
    assert_int_equal(status_with(port, c2, AH_ADMIN), 401);
}

/* The program with file_watch 200 ms: new files are served without a signal; a pair it cannot
 * use is refused (logged, the certificate in use kept) until the key that goes with it
 * arrives. */
static void renew_by_watch(const char *const *args, int port, const char *dir, const char *cert,
                           const char *key)
{
    char in_use[600], c3[600], k3[600], c4[600], k4[600], log[600], admin[600], next[600], *text;
    void *buf = NULL;
    size_t len;
    pid_t pid;
    snprintf(in_use, sizeof in_use, "%s/cert2.pem", dir); /* what renew_by_sighup left */
    snprintf(c3, sizeof c3, "%s/cert3.pem", dir);
    snprintf(k3, sizeof k3, "%s/key3.pem", dir);
    snprintf(c4, sizeof c4, "%s/cert4.pem", dir);
    snprintf(k4, sizeof k4, "%s/key4.pem", dir);
    snprintf(log, sizeof log, "%s/watch.log", dir);
    make_cert(c3, k3, 2);
    make_cert(c4, k4, 2);
    setenv("AH_CHILD_LOG", log, 1);
    pid = ah_spawn(args, port, "https", in_use);
    unsetenv("AH_CHILD_LOG");
    replace_file(c3, cert);
    replace_file(k3, key);
    assert_true(served_with(port, c3, 5000));
    assert_false(served_with(port, in_use, 0));
    replace_file(c4, cert); /* its key comes later */
    usleep(800000);
    assert_true(served_with(port, c3, 0));
    replace_file(k4, key);
    assert_true(served_with(port, c4, 5000));
    /* the admin token file alone: the new token without a signal; an empty file keeps it */
    snprintf(admin, sizeof admin, "%s/admin", dir);
    snprintf(next, sizeof next, "%s/admin.next", dir);
    assert_int_equal(status_with(port, c4, "rotated-by-sighup"), 200);
    ah_write_file(next, "rotated-by-watch\n");
    replace_file(next, admin);
    for (int i = 0; i < 100 && status_with(port, c4, "rotated-by-watch") != 200; i++)
        usleep(50000);
    assert_int_equal(status_with(port, c4, "rotated-by-watch"), 200);
    assert_int_equal(status_with(port, c4, "rotated-by-sighup"), 401);
    ah_write_file(next, "");
    replace_file(next, admin);
    usleep(800000);
    assert_int_equal(status_with(port, c4, "rotated-by-watch"), 200);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(ah_wait_exit(pid, 10000), 0);
    assert_int_equal(sl_fs_read_file(log, 1 << 20, &buf, &len), SL_OK);
    text = buf;
    if (strstr(text, "a watched file changed: TLS certificate and key reloaded") == NULL ||
        strstr(text, "a watched file changed: the TLS certificate was not reloaded") == NULL ||
        strstr(text, "a watched file changed: the admin token reloaded from") == NULL ||
        strstr(text, "admin_token_file") == NULL ||
        strstr(text, "empty; the token in use stays") == NULL)
        fail_msg("the program's log:\n%s", text);
    free(text);
}

/* A TLS coordinator's files in a new temporary folder: tokens, a certificate for 2 days, a
 * data folder's path and a free port; -1 (after a message) without the openssl program. */
typedef struct tls_files {
    char dir[512], cert[600], key[600], data[600], admin[600], enrol[600], listen[64];
    int port;
} tls_files;

static int tls_files_init(tls_files *t, const char *test, const char *prefix)
{
    if (!ah_have("openssl")) {
        fprintf(stderr, "%s: no openssl program to make a certificate; skipped\n", test);
        return -1;
    }
    sl_test_mkdtemp(t->dir, sizeof t->dir, prefix);
    snprintf(t->cert, sizeof t->cert, "%s/cert.pem", t->dir);
    snprintf(t->key, sizeof t->key, "%s/key.pem", t->dir);
    snprintf(t->data, sizeof t->data, "%s/data", t->dir);
    snprintf(t->admin, sizeof t->admin, "%s/admin", t->dir);
    snprintf(t->enrol, sizeof t->enrol, "%s/enrol", t->dir);
    ah_write_file(t->admin, AH_ADMIN "\n");
    ah_write_file(t->enrol, AH_ENROL "\n");
    make_cert(t->cert, t->key, 2);
    t->port = ah_free_port();
    snprintf(t->listen, sizeof t->listen, "127.0.0.1:%d", t->port);
    return 0;
}

#define WATCH_ARG 18 /* the value of --file-watch in test_tls_and_sigterm's arguments */

void test_tls_and_sigterm(void **state)
{
    tls_files t;
    char cmd[2400], url[128], port_s[16];
    char *dir = t.dir, *cert = t.cert, *key = t.key, *data = t.data, *admin = t.admin,
         *enrol = t.enrol, *listen = t.listen;
    ah_resp r;
    pid_t pid;
    int port, status;
    (void)state;
    if (tls_files_init(&t, "test_tls_and_sigterm", "api_tls") != 0)
        skip();
    port = t.port;
    snprintf(port_s, sizeof port_s, "%d", port);

    /* HTTPS without a certificate is a configuration error (exit 2) */
    {
        const char *args[] = {SL_COORDINATOR_BIN, "--listen", listen, "--data-dir", data, NULL};
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 2);
            sl_test_execv(SL_COORDINATOR_BIN, (char *const *)args);
            _exit(127);
        }
        assert_int_equal(ah_wait_exit(pid, 10000), 2);
    }
    /* the program with TLS; file_watch an hour here (the signal reloads), 200 ms below */
    const char *args[] = {SL_COORDINATOR_BIN,
                          "--listen",
                          listen,
                          "--data-dir",
                          data,
                          "--tls-cert",
                          cert,
                          "--tls-key",
                          key,
                          "--admin-token-file",
                          admin,
                          "--enrolment-token-file",
                          enrol,
                          "--threads",
                          "2",
                          "--grace",
                          "2s",
                          "--file-watch",
                          "1h",
                          NULL};
    pid = ah_spawn(args, port, "https", cert);
    snprintf(url, sizeof url, "https://127.0.0.1:%d/v1/openapi.yaml", port);
    ah_https("GET", url, cert, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(strncmp(r.body, "openapi: 3.1", 12), 0);
    ah_resp_free(&r);
    snprintf(url, sizeof url, "https://127.0.0.1:%d/v1/status", port);
    ah_https("GET", url, cert, &r);
    assert_int_equal(r.status, 401);
    ah_resp_free(&r);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", port);
    ah_http("GET", url, NULL, 0, NULL, 0, &r);
    assert_true(r.status != 200); /* no plain HTTP on the TLS port */
    ah_resp_free(&r);
    if (ah_have("curl")) {
        char out[64];
        snprintf(cmd, sizeof cmd,
                 "--cacert %s -o /dev/null -w '%%{http_code}' https://127.0.0.1:%d/healthz", cert,
                 port);
        ah_curl_cli(cmd, out, sizeof out);
        assert_string_equal(out, "200");
    }
    renew_by_sighup(pid, port, dir, cert, key);
    assert_int_equal(kill(pid, SIGTERM), 0);
    status = ah_wait_exit(pid, 10000);
    assert_int_equal(status, 0);
    assert_string_equal(args[WATCH_ARG - 1], "--file-watch");
    args[WATCH_ARG] = "200ms";
    renew_by_watch(args, port, dir, cert, key);
    sl_test_rmtree(dir);
}

/* ---- libmicrohttpd's quiesce racing its workers ----------------------------------------- */

/* A quiesce whose removal of the listening socket from a worker's epoll set finds it gone
 * (ENOENT: the worker removed it first) made libmicrohttpd abort the program in a certificate
 * reload or at SIGTERM (api/server/daemon.c, quiesce()). With the shim epoll_enoent.c preloaded,
 * every other removal by the main thread fails so: the program reloads (the new certificate
 * served, the retries logged) and stops cleanly (exit 0). */
void test_quiesce_race(void **state)
{
    tls_files t;
    char c1[600], k1[600], log[600], asan[512];
    const char *was_asan = getenv("ASAN_OPTIONS");
    char *text = NULL, *at;
    size_t len, retries = 0;
    pid_t pid;
    (void)state;
    if (tls_files_init(&t, "test_quiesce_race", "api_quiesce") != 0)
        skip();
    snprintf(c1, sizeof c1, "%s/cert1.pem", t.dir);
    snprintf(k1, sizeof k1, "%s/key1.pem", t.dir);
    snprintf(log, sizeof log, "%s/coordinator.log", t.dir);
    make_cert(c1, k1, 30);
    const char *args[] = {SL_COORDINATOR_BIN,
                          "--listen",
                          t.listen,
                          "--data-dir",
                          t.data,
                          "--tls-cert",
                          t.cert,
                          "--tls-key",
                          t.key,
                          "--admin-token-file",
                          t.admin,
                          "--enrolment-token-file",
                          t.enrol,
                          "--threads",
                          "2",
                          "--grace",
                          "1s",
                          NULL};
    /* the shim after a sanitizer's runtime, which must come first in the list */
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", was_asan ? was_asan : "",
             was_asan ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    setenv("LD_PRELOAD", SL_EPOLL_ENOENT_LIB, 1);
    setenv("AH_CHILD_LOG", log, 1);
    pid = ah_spawn(args, t.port, "https", t.cert);
    unsetenv("AH_CHILD_LOG");
    unsetenv("LD_PRELOAD");
    if (was_asan != NULL)
        setenv("ASAN_OPTIONS", was_asan, 1);
    else
        unsetenv("ASAN_OPTIONS");
    replace_file(c1, t.cert);
    replace_file(k1, t.key);
    assert_int_equal(kill(pid, SIGHUP), 0);
    assert_true(served_with(t.port, c1, 5000)); /* reloaded, not aborted */
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(ah_wait_exit(pid, 10000), 0);
    assert_int_equal(sl_fs_read_file(log, 1 << 20, (void **)&text, &len), SL_OK);
    for (at = text; (at = strstr(at, "quiescing again")) != NULL; at++)
        retries++;
    if (retries < 2 || strstr(text, "stopped cleanly") == NULL) /* the reload's, SIGTERM's */
        fail_msg("%zu retries; the program's log:\n%s", retries, text);
    free(text);
    sl_test_rmtree(t.dir);
}

/* ---- kill -9 in the middle of an upload ------------------------------------------------- */

#define KILL_TASK                                                                       \
    "{\"config\":{\"name\":\"kill\",\"target\":1,\"quorum\":1,\"selection_window_ms\":" \
    "%d,\"report_deadline_ms\":30000},\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%%s\"}"

/* The coordinator with @args (after the program's name) and stderr into @log: its exit status. */
static int run_coordinator(const char *const *args, const char *log)
{
    char *argv[24];
    size_t n = 0;
    pid_t pid;
    argv[n++] = SL_COORDINATOR_BIN;
    for (; *args != NULL && n < 23; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        dup2(fd, 1);
        sl_test_execv(SL_COORDINATOR_BIN, argv);
        _exit(127);
    }
    return ah_wait_exit(pid, 10000);
}

/* The store's options (replicas): each refusal is exit 2 with its reason on stderr, before
 * the data directory or a store file is made. */
void test_store_options(void **state)
{
    static const struct {
        const char *opt[4];
        const char *said;
    } bad[] = {
        {{"--replica", "a", NULL}, "is an SQLite file, which one coordinator owns"},
        {{"--replica", "two words", NULL}, "two words\\\" is not 1 to 63"},
        {{"--replica", "", NULL}, "replica:"},
        {{"--replica", "a234567890123456789012345678901234567890123456789012345678901234", NULL},
         "is not 1 to 63"},
        {{"--replica", "r\n1", NULL}, "replica:"},
        {{"--store", "x.db", "--store-file", "/etc/hostname"}, "give one of them"},
        {{"--store", "postgresql://u@127.0.0.1:1/x", "--leader-lease", "50ms"},
         "leader_lease: 50ms is outside [100, 600000] ms"},
        {{"--store", "postgresql://u@127.0.0.1:1/x", "--leader-lease", "soon"}, "leader_lease"},
    };
    char dir[512], data[600], log[600];
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "api_store_opts");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(log, sizeof log, "%s/stderr", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[12] = {"--data-dir", data, "--insecure-http", "--listen", "127.0.0.1:0"};
        char *text = NULL;
        size_t len = 0, n = 5;
        struct stat st;
        for (size_t k = 0; k < 4 && bad[i].opt[k] != NULL; k++)
            args[n++] = bad[i].opt[k];
        args[n] = NULL;
        assert_int_equal(run_coordinator(args, log), 2);
        assert_int_equal(sl_fs_read_file(log, 1 << 20, (void **)&text, &len), SL_OK);
        if (text == NULL || memmem(text, len, bad[i].said, strlen(bad[i].said)) == NULL)
            fail_msg("case %zu: no \"%s\" in: %.*s", i, bad[i].said, (int)len, text ? text : "");
        free(text);
        assert_int_equal(stat(data, &st), -1); /* nothing made */
    }
    sl_test_rmtree(dir);
}

void test_kill9_mid_upload(void **state)
{
    char dir[512], data[600], admin[600], enrol[600], listen[64], req[2048], id[40], path[96];
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    ah_fx g;
    ah_dev a;
    ah_resp r;
    sl_layout *layout;
    void *frame;
    size_t len;
    int64_t task, round;
    long status;
    pid_t pid;
    int port, fd, fd_status_unused;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "api_kill");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(admin, sizeof admin, "%s/admin", dir);
    snprintf(enrol, sizeof enrol, "%s/enrol", dir);
    ah_write_file(admin, AH_ADMIN);
    ah_write_file(enrol, AH_ENROL);
    port = ah_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    const char *args[] = {SL_COORDINATOR_BIN,
                          "--listen",
                          listen,
                          "--data-dir",
                          data,
                          "--insecure-http",
                          "--admin-token-file",
                          admin,
                          "--enrolment-token-file",
                          enrol,
                          "--log-level",
                          "warn",
                          NULL};
    pid = ah_spawn(args, port, "http", NULL);
    memset(&g, 0, sizeof g);
    snprintf(g.base, sizeof g.base, "http://127.0.0.1:%d", port);

    {
        char fmt[512];
        snprintf(fmt, sizeof fmt, KILL_TASK, 300 * sl_test_time_scale());
        task = ah_create_task(&g, fmt);
    }
    ah_dev_enrol(&g, &a);
    ah_checkin(&g, &a, task, &r);
    ah_resp_free(&r);
    usleep((useconds_t)(450000 * sl_test_time_scale()));
    ah_checkin(&g, &a, task, &r);
    assert_int_equal(ah_json_int(r.body, "selected"), 1);
    round = ah_json_int(r.body, "round_id");
    ah_resp_free(&r);
    assert_int_equal(sl_layout_parse(AH_LAYOUT, strlen(AH_LAYOUT), &layout), SL_OK);
    ah_update(layout, round, 1, 0.25f, &frame, &len);
    ah_upload_create(&g, &a, round, frame, len, NULL, id, sizeof id);
    ah_upload_patch(&g, &a, id, 0, frame, 25, &r);
    assert_int_equal(r.status, 204);
    ah_resp_free(&r);

    /* a PATCH whose body is still arriving when the process dies */
    {
        char nonce[64];
        ah_sig sig;
        snprintf(path, sizeof path, "/v1/uploads/%s", id);
        assert_int_equal(sl_nonce_new(nonce, sizeof nonce), SL_OK);
        ah_sign(a.key, a.id, "PATCH", path, ah_now_ms(), nonce, (char *)frame + 25, len - 25, &sig);
        snprintf(req, sizeof req,
                 "PATCH %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 "application/offset+octet-stream\r\nUpload-Offset: 25\r\nContent-Length: %zu\r\n"
                 "%s\r\n%s\r\n%s\r\n%s\r\n\r\n",
                 path, len - 25, sig.lines[0], sig.lines[1], sig.lines[2], sig.lines[3]);
        fd = ah_raw_connect(port);
        ah_raw_send(fd, req, strlen(req));
        ah_raw_send(fd, (char *)frame + 25, 7);
        usleep(100000);
        assert_int_equal(kill(pid, SIGKILL), 0);
        assert_int_equal(ah_wait_exit(pid, 5000), 128 + SIGKILL);
        close(fd);
    }

    pid = ah_spawn(args, port, "http", NULL);
    assert_int_equal(ah_upload_head(&g, &a, id, &status), 25); /* the durable offset */
    assert_int_equal(status, 200);
    ah_upload_patch(&g, &a, id, 25, (char *)frame + 25, len - 25, &r);
    if (r.status != 200)
        fail_msg("completing after the restart: %ld %s", r.status, r.body);
    assert_int_equal(ah_json_int(r.body, "accepted"), 1);
    ah_resp_free(&r);
    ah_admin(&g, "GET", "/v1/status", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"model_version\":2")); /* target 1: the round closed */
    ah_resp_free(&r);
    (void)auth;
    /* SIGTERM with a request in flight: it still gets its answer, then exit 0 */
    {
        const char *rest = "\"public_key\":\"04\"}";
        char reply[4096];
        size_t body_len = strlen("{\"enrolment_token\":\"wrong\",") + strlen(rest);
        snprintf(req, sizeof req,
                 "POST /v1/devices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\n\r\n{\"enrolment_token\":\"wrong\",",
                 body_len);
        fd = ah_raw_connect(port);
        ah_raw_send(fd, req, strlen(req));
        usleep(100000);
        assert_int_equal(kill(pid, SIGTERM), 0);
        usleep(300000);
        assert_int_equal(waitpid(pid, &fd_status_unused, WNOHANG), 0); /* still draining */
        ah_raw_send(fd, rest, strlen(rest));
        ah_raw_read(fd, reply, sizeof reply);
        close(fd);
        if (strncmp(reply, "HTTP/1.1 401", 12) != 0)
            fail_msg("the request in flight at SIGTERM got: %s", reply);
    }
    assert_int_equal(ah_wait_exit(pid, 10000), 0);
    free(frame);
    sl_layout_free(layout);
    ah_dev_free(&a);
    sl_test_rmtree(dir);
}

/* ---- every JSON answer above against api/openapi.yaml ---------------------------------- */

void test_openapi_schemas(void **state)
{
    char cmd[2048];
    int rc;
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_openapi_schemas: no /usr/bin/python3; skipped\n");
        skip();
    }
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/integration/check_openapi.py %s/api/openapi.yaml %s",
             SL_SOURCE_DIR, SL_SOURCE_DIR, ah_records_file());
    rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
        fprintf(stderr, "test_openapi_schemas: python3-yaml is missing (apt-get install "
                        "python3-yaml); skipped\n");
        skip();
    }
    assert_true(WIFEXITED(rc));
    assert_int_equal(WEXITSTATUS(rc), 0);
}
