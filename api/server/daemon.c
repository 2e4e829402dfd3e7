/*
 * daemon.c - the server's life cycle, the libmicrohttpd glue, the ticker
 * thread and the in-process entry point.
 *
 * libmicrohttpd calls us three ways per request: the URI log callback
 * (the raw target, before any decoding: our request object is born there,
 * so the router sees what the device signed), the access handler (first
 * with the headers only, where a too large Content-Length is answered 413
 * before the body is read; then with body chunks; then once more to
 * answer), and the completion callback (metrics, access log, free).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/x509_crt.h>
#include <microhttpd.h>

#include "server_int.h"

#define MAX_TLS_FILE      (1u << 20)
#define EXPIRE_EVERY_MS   60000
#define MAX_DISCARD_RATIO 4 /* a body streamed past max_body this many times over: hang up */

struct sl_server_response {
    sl__resp r;
};

void sl_server_options_default(sl_server_options *o)
{
    memset(o, 0, sizeof *o);
    o->listen = "127.0.0.1:8443";
    o->max_body = 16u << 20;
    o->threads = 4;
    o->workers = 32;
    o->connection_limit = 1024;
    o->per_ip_connection_limit = 64;
    o->connection_timeout_s = 30;
    o->device_rate = 10;
    o->device_burst = 50;
    o->timestamp_window_ms = 300000;
    o->nonce_capacity = 262144;
    o->upload_ttl_ms = 24 * 3600 * 1000LL;
    o->session_ttl_ms = 3600 * 1000LL;
    o->model_cache_bytes = 64u << 20;
    o->tick_interval_ms = 100;
}

/* "a.b.c.d:port", "[v6]:port" or "localhost:port". */
static int parse_listen(const char *text, struct sockaddr_storage *out, int *ipv6)
{
    char host[64];
    const char *colon, *h = text;
    size_t hlen;
    int64_t port;
    memset(out, 0, sizeof *out);
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return SL_EINVAL;
        h = text + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL)
            return SL_EINVAL;
        hlen = (size_t)(colon - text);
    }
    if (hlen == 0 || hlen >= sizeof host || sl__parse_i64(colon + 1, 0, 65535, &port) != SL_OK)
        return SL_EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (strcmp(host, "localhost") == 0)
        memcpy(host, "127.0.0.1", 10);
    if (text[0] == '[') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)(void *)out;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return SL_EINVAL;
        *ipv6 = 1;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)(void *)out;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return SL_EINVAL;
        *ipv6 = 0;
    }
    return SL_OK;
}

static char *dup_text(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d != NULL)
        memcpy(d, s, n + 1);
    return d;
}

int sl_server_create(const sl_server_options *o, sl_store *store, sl_engine *engine,
                     sl_server **out, char *err, size_t errcap)
{
    char dummy[8];
    sl_server *s;
    size_t len;
    int rc;
    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (o == NULL || store == NULL || engine == NULL || out == NULL)
        return SL_EINVAL;
    if (o->threads < 1 || o->threads > 256 || o->workers > 256 || o->max_body < 1024 ||
        o->device_rate < 0 || (o->device_rate > 0 && o->device_burst < 1) ||
        o->timestamp_window_ms < 1000 || o->nonce_capacity < 16 || o->upload_ttl_ms < 1000 ||
        o->tick_interval_ms < 1) {
        snprintf(err, errcap, "server options out of range");
        return SL_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return SL_ENOMEM;
    s->quiesced_fd = -1;
    s->opt = *o;
    s->store = store;
    s->engine = engine;
    s->clock = o->clock;
    pthread_mutex_init(&s->rate_lock, NULL);
    pthread_rwlock_init(&s->sess_lock, NULL);
    pthread_rwlock_init(&s->token_lock, NULL);
    pthread_mutex_init(&s->cache_lock, NULL);
    pthread_mutex_init(&s->tomb_lock, NULL);
    pthread_mutex_init(&s->tick_lock, NULL);
    pthread_mutex_init(&s->backup_lock, NULL);
    pthread_mutex_init(&s->retire_lock, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->tick_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    atomic_init(&s->inflight, 0);
    atomic_init(&s->rid_counter, 1);
    rc = sl__metrics_init(&s->metrics, sl__route_label, sl__route_count());
    s->listen = dup_text(o->listen ? o->listen : "127.0.0.1:8443");
    s->buckets = calloc(SL__BUCKETS, sizeof *s->buckets);
    if (rc != SL_OK || s->listen == NULL || s->buckets == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    s->opt.listen = s->listen;
    if (parse_listen(s->listen, &s->addr, &s->ipv6) != SL_OK) {
        snprintf(err, errcap, "listen: \"%s\" is not host:port", s->listen);
        rc = SL_EINVAL;
        goto fail;
    }
    if (!o->insecure_http) {
        void *buf;
        if (o->tls_cert_file == NULL || o->tls_key_file == NULL) {
            snprintf(err, errcap, "HTTPS needs tls_cert and tls_key (or insecure_http)");
            rc = SL_EINVAL;
            goto fail;
        }
        rc = sl_fs_read_file(o->tls_cert_file, MAX_TLS_FILE, &buf, &len);
        if (rc != SL_OK) {
            snprintf(err, errcap, "tls_cert %s: %s", o->tls_cert_file, sl_strerror(rc));
            goto fail;
        }
        s->cert_pem = buf;
        rc = sl_fs_read_file(o->tls_key_file, MAX_TLS_FILE, &buf, &len);
        if (rc != SL_OK) {
            snprintf(err, errcap, "tls_key %s: %s", o->tls_key_file, sl_strerror(rc));
            goto fail;
        }
        s->key_pem = buf;
    }
    s->opt.tls_cert_file = s->opt.tls_key_file = NULL; /* borrowed; not needed any more */
    if (o->admin_token != NULL && o->admin_token[0] != '\0') {
        sl_sha256(o->admin_token, strlen(o->admin_token), s->admin_sha);
        s->have_admin = 1;
    }
    if (o->enrolment_token != NULL && o->enrolment_token[0] != '\0') {
        sl_sha256(o->enrolment_token, strlen(o->enrolment_token), s->enrol_sha);
        s->have_enrol = 1;
    }
    s->opt.admin_token = s->opt.enrolment_token = NULL; /* only their digests are kept */
    rc = sl_nonce_cache_create(o->timestamp_window_ms, o->nonce_capacity, &s->nonces);
    if (rc != SL_OK) {
        snprintf(err, errcap, "nonce cache: %s", sl_strerror(rc));
        goto fail;
    }
    sl__random(&s->rid_prefix, sizeof s->rid_prefix);
    sl__random(s->session_secret, sizeof s->session_secret);
    s->started_ms = sl__wall_ms(s);
    if ((rc = sl__sessions_init(s, err, errcap)) != SL_OK)
        goto fail;
    *out = s;
    return SL_OK;
fail:
    sl_server_free(s);
    return rc;
}

/* ---- libmicrohttpd glue ------------------------------------------------------ */

static void *uri_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
    sl_server *s = cls;
    const union MHD_ConnectionInfo *ci;
    sl__req *rq = sl__req_new(uri);
    atomic_fetch_add(&s->inflight, 1);
    if (rq == NULL)
        return NULL;
    rq->start_ns = sl__mono_ns(s);
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci != NULL && ci->client_addr != NULL) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr,
                      rq->client, sizeof rq->client);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                      rq->client, sizeof rq->client);
    }
    return rq;
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    /* past the header limit the request goes on without the rest: it will
     * fail its checks rather than be half-read */
    sl__req_add_header(cls, key, value ? value : "");
    return MHD_YES;
}

/* Queue the answer @rs (consumed) to @rq on @conn. */
static enum MHD_Result send_answer(struct MHD_Connection *conn, sl__req *rq, sl__resp *rs)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    uint64_t body_len = sl__resp_length(rs);
    if (rs->fd >= 0) {
        resp = MHD_create_response_from_fd_at_offset64(rs->fd_len, rs->fd, rs->fd_offset);
        if (resp != NULL)
            rs->fd = -1; /* now libmicrohttpd's: closed with the response */
    } else if (rs->len > 0) {
        resp = MHD_create_response_from_buffer(rs->len, rs->body, MHD_RESPMEM_MUST_FREE);
        if (resp != NULL)
            rs->body = NULL; /* now libmicrohttpd's */
    } else {
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    }
    if (resp == NULL) {
        sl__resp_reset(rs);
        return MHD_NO;
    }
    for (size_t i = 0; i < rs->nheaders; i++)
        MHD_add_response_header(resp, rs->headers[i].name, rs->headers[i].value);
    if (rs->content_type[0] != '\0')
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rs->content_type);
    rq->status = rs->status;
    rq->bytes_out = strcmp(rq->method, "HEAD") == 0 ? 0 : (size_t)body_len;
    ret = MHD_queue_response(conn, (unsigned)rs->status, resp);
    MHD_destroy_response(resp);
    sl__resp_reset(rs);
    return ret;
}

static enum MHD_Result respond(sl_server *s, struct MHD_Connection *conn, sl__req *rq)
{
    sl__resp rs;
    sl__resp_init(&rs);
    sl__dispatch(s, rq, &rs);
    return send_answer(conn, rq, &rs);
}

/*
 * The body is in: answer now, or hand a device request (signed, under a
 * session, or claiming to be one: it names a device) to a worker
 * (workers.c) so that this thread's other connections are not held up by
 * its authentication, decoding and durable write.
 */
static enum MHD_Result answer_or_defer(sl_server *s, struct MHD_Connection *conn, sl__req *rq)
{
    sl__resp rs;
    int rc;
    if (rq->answer_ready) /* resumed: the worker's answer */
        return rq->answer != NULL ? send_answer(conn, rq, rq->answer) : MHD_NO;
    if (s->pool == NULL || rq->too_big || sl__req_header(rq, SL_HDR_DEVICE) == NULL)
        return respond(s, conn, rq);
    rc = sl__pool_submit(s->pool, conn, rq);
    if (rc == SL_OK)
        return MHD_YES;
    sl__resp_init(&rs);
    sl__problem(&rs, rq, 503, "unavailable", NULL, "too many requests queued; retry later");
    sl__resp_header(&rs, "Retry-After", "1");
    sl__resp_header(&rs, "X-Request-Id", "%s", rq->request_id);
    return send_answer(conn, rq, &rs);
}

/* The most body memory reserved from a Content-Length before the bytes arrive. */
#define RESERVE_MAX (1u << 20)

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    sl_server *s = cls;
    sl__req *rq = *con_cls;
    (void)url;
    (void)version;
    if (rq == NULL)
        return MHD_NO; /* out of memory, or a target beyond any limit: hang up */
    if (!rq->started) {
        const char *cl;
        rq->started = 1;
        snprintf(rq->method, sizeof rq->method, "%s", method);
        MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, rq);
        sl__req_assign_id(s, rq);
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL) {
            char *end;
            unsigned long long n;
            errno = 0;
            n = strtoull(cl, &end, 10);
            if (errno == ERANGE || (*end == '\0' && end != cl && n > s->opt.max_body)) {
                rq->too_big = 1; /* answered now: the body is never read */
                return respond(s, conn, rq);
            }
            /* room for the declared body, up to RESERVE_MAX: a client that declares more than
             * it sends holds no more than that until its bytes arrive */
            if (*end == '\0' && end != cl && n > 0 &&
                sl__req_reserve_body(rq, (size_t)(n < RESERVE_MAX ? n : RESERVE_MAX)) != SL_OK)
                return MHD_NO;
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->status != 0)
            return MHD_YES; /* answered already; libmicrohttpd drains the rest */
        if (sl__req_add_body(rq, upload_data, n, s->opt.max_body) == SL_ENOMEM)
            return MHD_NO;
        if (rq->too_big && rq->discarded > MAX_DISCARD_RATIO * s->opt.max_body)
            return MHD_NO; /* a body without Content-Length that does not end */
        return MHD_YES;
    }
    if (rq->status != 0)
        return MHD_YES;
    return answer_or_defer(s, conn, rq);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sl_server *s = cls;
    sl__req *rq = *con_cls;
    (void)conn;
    if (rq != NULL) {
        if (rq->status == 0) /* nothing was answered: the client went away (nginx's 499) */
            rq->status = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? 408 : 499;
        if (rq->started)
            sl__request_done(s, rq);
        sl__req_free(rq);
        *con_cls = NULL;
    }
    atomic_fetch_sub(&s->inflight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;
    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    sl_log(SL_LOG_WARN, "mhd", "%s", line);
}

/* ---- tokens -------------------------------------------------------------------- */

int sl_server_set_tokens(sl_server *s, const char *admin_token, const char *enrolment_token)
{
    uint8_t admin[32], enrol[32];
    if (s == NULL)
        return SL_EINVAL;
    if (admin_token != NULL)
        sl_sha256(admin_token, strlen(admin_token), admin);
    if (enrolment_token != NULL)
        sl_sha256(enrolment_token, strlen(enrolment_token), enrol);
    pthread_rwlock_wrlock(&s->token_lock);
    if (admin_token != NULL) {
        memcpy(s->admin_sha, admin, sizeof admin);
        s->have_admin = admin_token[0] != '\0';
    }
    if (enrolment_token != NULL) {
        memcpy(s->enrol_sha, enrol, sizeof enrol);
        s->have_enrol = enrolment_token[0] != '\0';
    }
    pthread_rwlock_unlock(&s->token_lock);
    return SL_OK;
}

/* ---- certificates: the daemon, a reload, the daemons it retired ---------------- */

/* Overwrite a private key before freeing it: it does not outlive its use in memory. */
static void free_secret(char *p)
{
    if (p != NULL) {
        volatile char *v = p;
        for (size_t i = 0; v[i] != '\0'; i++)
            v[i] = 0;
    }
    free(p);
}

/* The notAfter of the first certificate of the chain @pem, in Unix seconds; 0 when mbedTLS
 * cannot parse it (GnuTLS serves some it does not: the expiry is then not reported). */
static int64_t cert_not_after(const char *pem)
{
    mbedtls_x509_crt crt;
    int64_t at = 0;
    mbedtls_x509_crt_init(&crt);
    if (pem != NULL &&
        mbedtls_x509_crt_parse(&crt, (const unsigned char *)pem, strlen(pem) + 1) >= 0 &&
        crt.version != 0) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        tm.tm_year = crt.valid_to.year - 1900;
        tm.tm_mon = crt.valid_to.mon - 1;
        tm.tm_mday = crt.valid_to.day;
        tm.tm_hour = crt.valid_to.hour;
        tm.tm_min = crt.valid_to.min;
        tm.tm_sec = crt.valid_to.sec;
        at = (int64_t)timegm(&tm);
    }
    mbedtls_x509_crt_free(&crt);
    return at;
}

/* Record the served certificate's expiry (metrics) and log it. */
static void note_certificate(sl_server *s)
{
    int64_t at = cert_not_after(s->cert_pem);
    pthread_mutex_lock(&s->retire_lock);
    s->cert_not_after = at;
    pthread_mutex_unlock(&s->retire_lock);
    if (at > 0) {
        char when[32];
        time_t t = (time_t)at;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        sl_log(SL_LOG_INFO, "http", "the TLS certificate is valid until %s", when);
    }
}

/* A daemon serving @s with @cert and @key (ignored for plain HTTP): on the listening socket
 * @fd when it is valid (a reload takes over the old daemon's), otherwise bound to the listen
 * address. NULL when libmicrohttpd refuses. */
static struct MHD_Daemon *start_daemon(sl_server *s, const char *cert, const char *key,
                                       MHD_socket fd)
{
    struct MHD_OptionItem extra[4] = {{MHD_OPTION_END, 0, NULL},
                                      {MHD_OPTION_END, 0, NULL},
                                      {MHD_OPTION_END, 0, NULL},
                                      {MHD_OPTION_END, 0, NULL}};
    unsigned flags =
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    size_t n = 0;
    if (!s->opt.insecure_http) {
        flags |= MHD_USE_TLS;
        extra[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key};
        extra[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert};
    }
    if (fd != MHD_INVALID_SOCKET)
        extra[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, (intptr_t)fd, NULL};
    else
        extra[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &s->addr};
    if (s->ipv6)
        flags |= MHD_USE_IPv6;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, access_cb, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->opt.threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->opt.connection_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)s->opt.per_ip_connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->opt.connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64u << 10), MHD_OPTION_URI_LOG_CALLBACK, uri_cb, s, MHD_OPTION_NOTIFY_COMPLETED,
        completed_cb, s, MHD_OPTION_ARRAY, extra, MHD_OPTION_END);
}

/* The first message libmicrohttpd (and GnuTLS through it) logs: why it refused. */
typedef struct first_log {
    char msg[256];
} first_log;

static void capture_log(void *cls, const char *fmt, va_list ap)
{
    first_log *f = cls;
    size_t n;
    if (f->msg[0] != '\0')
        return;
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    n = strlen(f->msg);
    while (n > 0 && (f->msg[n - 1] == '\n' || f->msg[n - 1] == '\r'))
        f->msg[--n] = '\0';
}

/* Whether libmicrohttpd takes @cert and @key, checked by a daemon that listens on nothing and
 * is stopped at once (GnuTLS parses both and checks that the key is the certificate's). */
static int check_credentials(const char *cert, const char *key, char *why, size_t cap)
{
    first_log f = {""};
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_TLS | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, access_cb, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, capture_log, &f, MHD_OPTION_HTTPS_MEM_KEY, key,
        MHD_OPTION_HTTPS_MEM_CERT, cert, MHD_OPTION_END);
    if (d == NULL) {
        snprintf(why, cap, "%s", f.msg[0] ? f.msg : "libmicrohttpd refused them");
        return SL_EINVAL;
    }
    MHD_stop_daemon(d);
    return SL_OK;
}

/* ---- quiescing around a race of libmicrohttpd's ---------------------------------- */

/* MHD_quiesce_daemon (0.9.75, Debian 12's, and still 1.0.1) marks each worker of a thread pool
 * quiesced, then removes the listening socket from that worker's epoll set and panics (abort)
 * when the removal fails. A worker that wakes meanwhile sees the mark and removes the socket
 * itself first (its own removal allows for ENOENT, "can happen due to race with
 * MHD_quiesce_daemon()"), so the quiesce's finds it gone: ENOENT, and the process aborted in
 * a certificate reload or at SIGTERM, about once in a hundred test runs on a loaded machine
 * (a core showed the panic in MHD_quiesce_daemon). The socket is out of that worker's set either
 * way, so the panic is spurious: our panic handler jumps back out of MHD_quiesce_daemon for
 * exactly that failure, in the thread that is quiescing, and we quiesce again; the worker has
 * cleared its flag by then (it does right after its removal), so the second pass moves on to the
 * next worker. Any other panic is reported and aborts, as libmicrohttpd's own handler does. The
 * jump leaves nothing half done: MHD_quiesce_daemon takes no lock and allocates nothing. The
 * same race the other way round is left to libmicrohttpd: a worker past its first check when
 * the quiesce marks it, whose second removal (which allows no ENOENT) comes between the
 * quiesce's removal and its clearing of the flag, a window of a few instructions; not seen. */
static pthread_mutex_t quiesce_lock = PTHREAD_MUTEX_INITIALIZER; /* one quiesce at a time */
static jmp_buf *quiescing;       /* under quiesce_lock, with the thread it belongs to: */
static pthread_t quiescing_in;   /* (not _Thread_local: that would make the program need */
static atomic_int quiesce_armed; /* the dynamic loader's __tls_get_addr) */

static void mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
    int e = errno;
    (void)cls;
    if (atomic_load(&quiesce_armed) && pthread_equal(pthread_self(), quiescing_in) && e == ENOENT &&
        reason != NULL && strstr(reason, "remove listen FD from epoll") != NULL)
        longjmp(*quiescing, 1);
    /* errno as the panic found it: which failure it was (ENOENT, EBADF, ...) */
    fprintf(stderr, "libmicrohttpd: fatal error at %s:%u (errno %d, %s): %s%s", file ? file : "?",
            line, e, strerror(e), reason ? reason : "(no reason)",
            reason && reason[0] && reason[strlen(reason) - 1] == '\n' ? "" : "\n");
    abort();
}

static pthread_once_t panic_once = PTHREAD_ONCE_INIT;

static void set_panic(void)
{
    MHD_set_panic_func(mhd_panic, NULL);
}

/* The listening socket a quiesce handed back, ours now: shut down, so it refuses new
 * connections at once, but closed only once the daemon's workers have stopped
 * (sl_server_free). A worker may still be about to remove it from its epoll set (it saw the
 * daemon quiesced before the quiesce cleared its flag): on the open socket that removal finds
 * it gone (ENOENT, which libmicrohttpd allows there), while on a closed one it failed with
 * EBADF and libmicrohttpd aborted the program (daemon.c:4940 of 0.9.75, seen once in
 * test_api_e2e on a loaded machine, 6 December 2026). */
static void keep_shut(sl_server *s, MHD_socket fd)
{
    if (shutdown(fd, SHUT_RDWR) != 0)
        sl_log(SL_LOG_WARN, "http", "shutting the listening socket down: %s", strerror(errno));
    if (s->quiesced_fd >= 0)
        close(s->quiesced_fd);
    s->quiesced_fd = fd;
}

/* MHD_quiesce_daemon, again after the race above (a few times at most: one per worker). */
static MHD_socket quiesce(struct MHD_Daemon *d)
{
    jmp_buf here;
    volatile int tries = 0;
    MHD_socket fd = MHD_INVALID_SOCKET;
    pthread_once(&panic_once, set_panic);
    pthread_mutex_lock(&quiesce_lock);
    quiescing = &here;
    quiescing_in = pthread_self();
    if (setjmp(here) != 0) {
        struct timespec ms = {0, 1000000};
        atomic_store(&quiesce_armed, 0);
        sl_log(SL_LOG_WARN, "http",
               "libmicrohttpd's quiesce raced a worker removing the listening socket (ENOENT); "
               "quiescing again");
        nanosleep(&ms, NULL); /* the worker clears its flag right after its removal */
        if (++tries > 64) {
            pthread_mutex_unlock(&quiesce_lock);
            return MHD_INVALID_SOCKET;
        }
    }
    atomic_store(&quiesce_armed, 1);
    fd = MHD_quiesce_daemon(d);
    atomic_store(&quiesce_armed, 0);
    pthread_mutex_unlock(&quiesce_lock);
    return fd;
}

/* Stop the retired daemons whose connections have all closed (@all: every one). */
static void sweep_retired(sl_server *s, int all)
{
    pthread_mutex_lock(&s->retire_lock);
    for (size_t i = 0; i < s->nretired;) {
        sl__retired *r = &s->retired[i];
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(r->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!all && (info == NULL || info->num_connections > 0)) {
            i++;
            continue;
        }
        MHD_stop_daemon(r->daemon);
        free(r->cert_pem);
        free_secret(r->key_pem);
        s->retired[i] = s->retired[--s->nretired];
        sl_log(SL_LOG_INFO, "http", "the daemon of the previous certificate stopped (%s)",
               all ? "server stopping" : "its connections closed");
    }
    pthread_mutex_unlock(&s->retire_lock);
}

int sl_server_reload_tls(sl_server *s, const char *cert_file, const char *key_file, char *err,
                         size_t errcap)
{
    char dummy[8], why[256];
    void *buf = NULL;
    char *cert = NULL, *key = NULL, *old_cert = NULL, *old_key = NULL;
    size_t len, retired;
    struct MHD_Daemon *d;
    MHD_socket fd;
    int rc;
    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (s == NULL || cert_file == NULL || key_file == NULL)
        return SL_EINVAL;
    if (s->daemon == NULL || s->quiesced) {
        snprintf(err, errcap, "the server is not accepting connections");
        return SL_ESTATE;
    }
    if (s->opt.insecure_http) {
        snprintf(err, errcap, "the server speaks plain HTTP: no certificate to reload");
        return SL_ESTATE;
    }
    if ((rc = sl_fs_read_file(cert_file, MAX_TLS_FILE, &buf, &len)) != SL_OK) {
        snprintf(err, errcap, "tls_cert %s: %s", cert_file, sl_strerror(rc));
        return rc;
    }
    cert = buf;
    if ((rc = sl_fs_read_file(key_file, MAX_TLS_FILE, &buf, &len)) != SL_OK) {
        snprintf(err, errcap, "tls_key %s: %s", key_file, sl_strerror(rc));
        free(cert);
        return rc;
    }
    key = buf;
    if ((rc = check_credentials(cert, key, why, sizeof why)) != SL_OK) {
        snprintf(err, errcap, "%s and %s refused: %s; the certificate in use stays", cert_file,
                 key_file, why);
        goto fail;
    }
    pthread_mutex_lock(&s->retire_lock);
    retired = s->nretired;
    pthread_mutex_unlock(&s->retire_lock);
    if (retired == SL__RETIRED) {
        snprintf(err, errcap,
                 "%zu earlier reloads still serve connections of older certificates; try again "
                 "when they have closed (at most connection_timeout)",
                 retired);
        rc = SL_EBUSY;
        goto fail;
    }
    /* copies of the certificate in use, for a daemon of its own should the new one fail */
    if ((old_cert = dup_text(s->cert_pem)) == NULL || (old_key = dup_text(s->key_pem)) == NULL) {
        snprintf(err, errcap, "out of memory");
        rc = SL_ENOMEM;
        goto fail;
    }
    /* the old daemon stops accepting and hands over its listening socket: connections that
     * arrive meanwhile wait in its backlog, none is refused */
    fd = quiesce(s->daemon);
    if (fd == MHD_INVALID_SOCKET) {
        snprintf(err, errcap, "cannot take over the listening socket");
        rc = SL_EIO;
        goto fail;
    }
    d = start_daemon(s, cert, key, fd);
    if (d == NULL) {
        /* checked above, so unlikely: back to the certificate in use, on the same socket */
        d = start_daemon(s, old_cert, old_key, fd);
        if (d == NULL) {
            keep_shut(s, fd);
            s->quiesced = 1;
            snprintf(err, errcap,
                     "libmicrohttpd refused to serve on the listening socket again: "
                     "no new connections are accepted");
            sl_log(SL_LOG_ERROR, "http", "%s", err);
        } else {
            snprintf(err, errcap, "libmicrohttpd refused %s and %s; the certificate in use stays",
                     cert_file, key_file);
            pthread_mutex_lock(&s->retire_lock);
            s->retired[s->nretired++] = (sl__retired){s->daemon, s->cert_pem, s->key_pem};
            pthread_mutex_unlock(&s->retire_lock);
            s->daemon = d;
            s->cert_pem = old_cert;
            s->key_pem = old_key;
            old_cert = old_key = NULL;
        }
        rc = SL_EIO;
        goto fail;
    }
    pthread_mutex_lock(&s->retire_lock);
    s->retired[s->nretired++] = (sl__retired){s->daemon, s->cert_pem, s->key_pem};
    s->tls_reloads++;
    pthread_mutex_unlock(&s->retire_lock);
    s->daemon = d;
    s->cert_pem = cert;
    s->key_pem = key;
    note_certificate(s);
    free(old_cert);
    free_secret(old_key);
    sl_log(SL_LOG_INFO, "http",
           "TLS certificate reloaded from %s; connections open before keep "
           "the previous one until they close",
           cert_file);
    return SL_OK;
fail:
    free(cert);
    free_secret(key);
    free(old_cert);
    free_secret(old_key);
    return rc;
}

/* ---- ticker ------------------------------------------------------------------- */

static void *ticker_main(void *arg)
{
    sl_server *s = arg;
    int64_t last_expire = sl__mono_ns(s), last_error = 0;
    pthread_setname_np(pthread_self(), "sl-api-ticker"); /* for top -H and perf */
    pthread_mutex_lock(&s->tick_lock);
    while (!s->stopping) {
        int64_t next = INT64_MAX, wait_ms = s->opt.tick_interval_ms, now;
        struct timespec until;
        int rc;
        pthread_mutex_unlock(&s->tick_lock);
        rc = sl_engine_tick(s->engine, &next);
        now = sl__wall_ms(s);
        if (rc != SL_OK) {
            if (last_error != rc)
                sl_log(SL_LOG_WARN, "http", "engine tick failed: %s", sl_strerror(rc));
            wait_ms = wait_ms < 10 ? 10 : wait_ms;
        } else if (next != INT64_MAX && next - now < wait_ms) {
            wait_ms = next - now < 1 ? 1 : next - now;
        }
        last_error = rc;
        sweep_retired(s, 0);
        if (sl__mono_ns(s) - last_expire > (int64_t)EXPIRE_EVERY_MS * 1000000) {
            last_expire = sl__mono_ns(s);
            rc = sl_store_expire_uploads(s->store, NULL);
            if (rc != SL_OK)
                sl_log(SL_LOG_WARN, "http", "expiring uploads failed: %s", sl_strerror(rc));
        }
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&s->tick_lock);
        if (!s->stopping)
            pthread_cond_timedwait(&s->tick_cond, &s->tick_lock, &until);
    }
    pthread_mutex_unlock(&s->tick_lock);
    return NULL;
}

/* ---- life cycle ---------------------------------------------------------------- */

int sl_server_start(sl_server *s, char *err, size_t errcap)
{
    const union MHD_DaemonInfo *info;
    struct MHD_Daemon *d;
    char dummy[8];
    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    err[0] = '\0';
    if (s == NULL || s->daemon != NULL || s->ticker_running)
        return SL_ESTATE;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES) {
        snprintf(err, errcap, "libmicrohttpd was built without epoll");
        return SL_EUNSUPPORTED;
    }
    if (!s->opt.insecure_http && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errcap, "libmicrohttpd was built without TLS");
        return SL_EUNSUPPORTED;
    }
    if (s->opt.workers > 0 &&
        sl__pool_start(s, s->opt.workers, s->opt.connection_limit, &s->pool) != SL_OK) {
        snprintf(err, errcap, "cannot start the worker threads");
        return SL_ENOMEM;
    }
    d = start_daemon(s, s->cert_pem, s->key_pem, MHD_INVALID_SOCKET);
    if (d == NULL) {
        sl__pool_free(s->pool);
        s->pool = NULL;
        snprintf(err, errcap, "cannot listen on %s (in use, no permission, or bad TLS files)",
                 s->listen);
        return SL_EIO;
    }
    if (!s->opt.insecure_http)
        note_certificate(s);
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    s->daemon = d;
    if (pthread_create(&s->ticker, NULL, ticker_main, s) != 0) {
        MHD_stop_daemon(d);
        s->daemon = NULL;
        sl__pool_free(s->pool);
        s->pool = NULL;
        snprintf(err, errcap, "cannot start the ticker thread");
        return SL_ENOMEM;
    }
    s->ticker_running = 1;
    sl_log(SL_LOG_INFO, "http", "listening on %s port %u (%s, %u threads, %u workers)", s->listen,
           (unsigned)s->port, s->opt.insecure_http ? "plain HTTP" : "HTTPS", s->opt.threads,
           s->opt.workers);
    return SL_OK;
}

uint16_t sl_server_port(const sl_server *s)
{
    return s ? s->port : 0;
}

void sl_server_quiesce(sl_server *s)
{
    MHD_socket fd;
    if (s == NULL || s->daemon == NULL || s->quiesced)
        return;
    s->quiesced = 1;
    fd = quiesce(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        keep_shut(s, fd);
}

int sl_server_drain(sl_server *s, int64_t grace_ms)
{
    int64_t until;
    if (s == NULL)
        return SL_OK;
    until = sl_clock_monotonic_ns(NULL) + grace_ms * 1000000;
    while (atomic_load(&s->inflight) > 0) {
        struct timespec ten_ms = {0, 10000000};
        if (sl_clock_monotonic_ns(NULL) >= until)
            return SL_ETIMEDOUT;
        nanosleep(&ten_ms, NULL);
    }
    return SL_OK;
}

void sl_server_free(sl_server *s)
{
    if (s == NULL)
        return;
    /* the workers first: each queued request resumes its connection, so
     * none is left suspended when the daemon stops; later requests are
     * answered 503 until it has */
    sl__pool_stop(s->pool);
    if (s->daemon != NULL)
        MHD_stop_daemon(s->daemon);
    sweep_retired(s, 1);
    if (s->quiesced_fd >= 0) /* every daemon that listened on it has stopped */
        close(s->quiesced_fd);
    s->quiesced_fd = -1;
    sl__pool_free(s->pool);
    s->pool = NULL;
    if (s->ticker_running) {
        pthread_mutex_lock(&s->tick_lock);
        s->stopping = 1;
        pthread_cond_signal(&s->tick_cond);
        pthread_mutex_unlock(&s->tick_lock);
        pthread_join(s->ticker, NULL);
    }
    sl__cache_free(s);
    sl__backups_free(s);
    sl_nonce_cache_free(s->nonces);
    sl__sessions_free(s);
    pthread_rwlock_destroy(&s->sess_lock);
    pthread_rwlock_destroy(&s->token_lock);
    sl__metrics_free(&s->metrics);
    pthread_mutex_destroy(&s->rate_lock);
    pthread_mutex_destroy(&s->cache_lock);
    pthread_mutex_destroy(&s->tomb_lock);
    pthread_mutex_destroy(&s->tick_lock);
    pthread_mutex_destroy(&s->backup_lock);
    pthread_mutex_destroy(&s->retire_lock);
    pthread_cond_destroy(&s->tick_cond);
    free_secret(s->key_pem); /* the private key does not outlive the server in memory */
    free(s->cert_pem);
    free(s->buckets);
    free(s->listen);
    free(s);
}

/* ---- in-process requests ------------------------------------------------------------ */

int sl_server_handle(sl_server *s, const char *method, const char *target,
                     const sl_server_header *headers, size_t nheaders, const void *body,
                     size_t body_len, sl_server_response **out)
{
    sl_server_response *resp;
    sl__req *rq;
    if (s == NULL || method == NULL || target == NULL || out == NULL ||
        (headers == NULL && nheaders > 0) || (body == NULL && body_len > 0))
        return SL_EINVAL;
    resp = malloc(sizeof *resp);
    rq = sl__req_new(target);
    if (resp == NULL || rq == NULL) {
        free(resp);
        sl__req_free(rq);
        return rq == NULL && resp != NULL ? SL_EINVAL : SL_ENOMEM;
    }
    atomic_fetch_add(&s->inflight, 1);
    rq->start_ns = sl__mono_ns(s);
    rq->started = 1;
    snprintf(rq->method, sizeof rq->method, "%s", method);
    snprintf(rq->client, sizeof rq->client, "in-process");
    for (size_t i = 0; i < nheaders; i++)
        sl__req_add_header(rq, headers[i].name, headers[i].value);
    sl__req_assign_id(s, rq);
    if ((uint64_t)body_len > s->opt.max_body) {
        rq->too_big = 1;
        rq->discarded = body_len;
    } else if (body_len > 0 && sl__req_add_body(rq, body, body_len, s->opt.max_body) != SL_OK) {
        atomic_fetch_sub(&s->inflight, 1);
        sl__req_free(rq);
        free(resp);
        return SL_ENOMEM;
    }
    sl__resp_init(&resp->r);
    sl__dispatch(s, rq, &resp->r);
    (void)sl__resp_load_file(&resp->r); /* a failure is the 5xx answer it leaves */
    if (resp->r.content_type[0] != '\0')
        sl__resp_header(&resp->r, "Content-Type", "%s", resp->r.content_type);
    rq->status = resp->r.status;
    rq->bytes_out = resp->r.len;
    sl__request_done(s, rq);
    sl__req_free(rq);
    atomic_fetch_sub(&s->inflight, 1);
    *out = resp;
    return SL_OK;
}

int sl_server_response_status(const sl_server_response *r)
{
    return r ? r->r.status : 0;
}

const void *sl_server_response_body(const sl_server_response *r, size_t *len)
{
    if (len != NULL)
        *len = r ? r->r.len : 0;
    return r ? r->r.body : NULL;
}

const char *sl_server_response_header(const sl_server_response *r, const char *name)
{
    return r && name ? sl__resp_get_header(&r->r, name) : NULL;
}

void sl_server_response_free(sl_server_response *r)
{
    if (r == NULL)
        return;
    free(r->r.body);
    free(r);
}
