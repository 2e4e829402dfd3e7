/* mini_http.c - see mini_http.h. */
#include "mini_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "starling/api_sign.h"

#define MH_BUF 65536

static void die(const char *what)
{
    fprintf(stderr, "mini_http: %s failed\n", what);
    abort();
}

struct mh_server {
    int fd;
    int port;
    pthread_t thread;
    atomic_int stop;
    atomic_uint connections;
    mh_handler handler;
    void *ctx;
    int tls;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt cert;
    mbedtls_pk_context key;
};

struct mh_conn {
    mh_server *s;
    int fd;
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    int is_head;
    int responded;
    size_t body_left; /* unread body bytes */
    unsigned char buf[MH_BUF];
    size_t have; /* bytes in buf not consumed yet, from pos */
    size_t pos;
};

static long conn_recv(mh_conn *c, void *buf, size_t n)
{
    if (c->s->tls) {
        int r;
        do {
            r = mbedtls_ssl_read(&c->ssl, buf, n);
        } while (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE);
        return r < 0 ? -1 : r;
    }
    ssize_t r;
    do {
        r = recv(c->fd, buf, n, 0);
    } while (r < 0 && errno == EINTR);
    return (long)r;
}

int mh_write(mh_conn *c, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len > 0) {
        long w;
        if (c->s->tls) {
            int r = mbedtls_ssl_write(&c->ssl, p, len);
            if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE)
                continue;
            w = r;
        } else {
            w = (long)send(c->fd, p, len, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
        }
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

size_t mh_read_body(mh_conn *c, void *buf, size_t n)
{
    unsigned char *out = buf;
    size_t done = 0;
    if (n > c->body_left)
        n = c->body_left;
    while (done < n) {
        if (c->have > 0) {
            size_t k = c->have < n - done ? c->have : n - done;
            memcpy(out + done, c->buf + c->pos, k);
            c->pos += k;
            c->have -= k;
            done += k;
            continue;
        }
        long r = conn_recv(c, c->buf, sizeof c->buf);
        if (r <= 0)
            break;
        c->pos = 0;
        c->have = (size_t)r;
    }
    c->body_left -= done;
    return done;
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 409:
        return "Conflict";
    case 416:
        return "Range Not Satisfiable";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

void mh_respond(mh_conn *c, int status, const char *headers, const void *body, size_t len)
{
    unsigned char sink[4096];
    while (c->body_left > 0 && mh_read_body(c, sink, sizeof sink) > 0) {
    }
    char head[4096];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nConnection: close\r\n%s", status,
                     reason(status), headers != NULL ? headers : "");
    if (status != 204 && status != 304)
        n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n", len);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    c->responded = 1;
    if (mh_write(c, head, (size_t)n) != 0)
        return;
    if (!c->is_head && len > 0)
        mh_write(c, body, len);
}

const char *mh_header(const mh_request *rq, const char *name)
{
    for (size_t i = 0; i < rq->nheaders; i++) {
        if (strcasecmp(rq->names[i], name) == 0)
            return rq->values[i];
    }
    return NULL;
}

/* Reads and parses the request head; 0 on success. */
static int read_head(mh_conn *c, mh_request *rq)
{
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len == sizeof c->buf - 1)
            return -1;
        long r = conn_recv(c, c->buf + len, sizeof c->buf - 1 - len);
        if (r <= 0)
            return -1;
        len += (size_t)r;
        c->buf[len] = '\0';
        end = strstr((char *)c->buf, "\r\n\r\n");
    }
    size_t head_len = (size_t)(end - (char *)c->buf) + 4;
    *end = '\0';
    memset(rq, 0, sizeof *rq);
    char *line = (char *)c->buf;
    char *eol = strstr(line, "\r\n");
    if (eol != NULL)
        *eol = '\0';
    if (sscanf(line, "%15s %2047s", rq->method, rq->path) != 2)
        return -1;
    while (eol != NULL) {
        line = eol + 2;
        eol = strstr(line, "\r\n");
        if (eol != NULL)
            *eol = '\0';
        char *colon = strchr(line, ':');
        if (colon == NULL || rq->nheaders == MH_MAX_HEADERS)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        snprintf(rq->names[rq->nheaders], sizeof rq->names[0], "%s", line);
        snprintf(rq->values[rq->nheaders], sizeof rq->values[0], "%s", v);
        rq->nheaders++;
    }
    const char *cl = mh_header(rq, "Content-Length");
    rq->content_length = cl != NULL ? (size_t)strtoull(cl, NULL, 10) : 0;
    c->pos = head_len;
    c->have = len - head_len;
    c->body_left = rq->content_length;
    c->is_head = strcmp(rq->method, "HEAD") == 0;
    return 0;
}

static void serve(mh_server *s, int fd)
{
    mh_conn *c = calloc(1, sizeof *c);
    mh_request *rq = calloc(1, sizeof *rq);
    if (c == NULL || rq == NULL)
        die("calloc");
    c->s = s;
    c->fd = fd;
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int ok = 1;
    if (s->tls) {
        c->net.fd = fd;
        mbedtls_ssl_init(&c->ssl);
        if (mbedtls_ssl_setup(&c->ssl, &s->conf) != 0)
            die("ssl_setup");
        mbedtls_ssl_set_bio(&c->ssl, &c->net, mbedtls_net_send, mbedtls_net_recv, NULL);
        int r;
        do {
            r = mbedtls_ssl_handshake(&c->ssl);
        } while (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE);
        ok = r == 0;
    }
    if (ok && read_head(c, rq) == 0)
        s->handler(s->ctx, c, rq);
    if (s->tls) {
        if (ok && c->responded)
            mbedtls_ssl_close_notify(&c->ssl);
        mbedtls_ssl_free(&c->ssl);
    }
    close(fd);
    free(rq);
    free(c);
}

static void *server_main(void *arg)
{
    mh_server *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&s->connections, 1);
        serve(s, fd);
    }
    return NULL;
}

mh_server *mh_start(mh_handler handler, void *ctx, const mh_tls *tls)
{
    mh_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        die("calloc");
    s->handler = handler;
    s->ctx = ctx;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 16) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &alen) != 0)
        die("listen");
    s->port = ntohs(a.sin_port);
    if (tls != NULL) {
        s->tls = 1;
        mbedtls_entropy_init(&s->entropy);
        mbedtls_ctr_drbg_init(&s->drbg);
        mbedtls_ssl_config_init(&s->conf);
        mbedtls_x509_crt_init(&s->cert);
        mbedtls_pk_init(&s->key);
        if (mbedtls_ctr_drbg_seed(&s->drbg, mbedtls_entropy_func, &s->entropy, NULL, 0) != 0 ||
            mbedtls_x509_crt_parse(&s->cert, (const unsigned char *)tls->cert_chain_pem,
                                   strlen(tls->cert_chain_pem) + 1) != 0 ||
            mbedtls_pk_parse_key(&s->key, (const unsigned char *)tls->key_pem,
                                 strlen(tls->key_pem) + 1, NULL, 0) != 0 ||
            mbedtls_ssl_config_defaults(&s->conf, MBEDTLS_SSL_IS_SERVER,
                                        MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT) != 0 ||
            mbedtls_ssl_conf_own_cert(&s->conf, &s->cert, &s->key) != 0)
            die("tls setup");
        mbedtls_ssl_conf_rng(&s->conf, mbedtls_ctr_drbg_random, &s->drbg);
    }
    if (pthread_create(&s->thread, NULL, server_main, s) != 0)
        die("pthread_create");
    return s;
}

void mh_stop(mh_server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    close(s->fd);
    if (s->tls) {
        mbedtls_ssl_config_free(&s->conf);
        mbedtls_x509_crt_free(&s->cert);
        mbedtls_pk_free(&s->key);
        mbedtls_ctr_drbg_free(&s->drbg);
        mbedtls_entropy_free(&s->entropy);
    }
    free(s);
}

int mh_port(const mh_server *s)
{
    return s->port;
}

unsigned mh_connections(const mh_server *s)
{
    return atomic_load(&((mh_server *)s)->connections);
}

/* ---------------------------------------------------------------- PKI */

static void gen_key(mbedtls_pk_context *pk, mbedtls_ctr_drbg_context *drbg)
{
    mbedtls_pk_init(pk);
    if (mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) != 0 ||
        mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*pk), mbedtls_ctr_drbg_random,
                            drbg) != 0)
        die("gen_key");
}

static void write_cert(mbedtls_pk_context *subject_key, mbedtls_pk_context *issuer_key,
                       const char *subject, const char *issuer, int is_ca, int serial_no,
                       mbedtls_ctr_drbg_context *drbg, char *pem, size_t cap)
{
    /* subjectAltName: IP 127.0.0.1 and DNS localhost (DER by hand: 2.28 has no setter). */
    static const unsigned char san[] = {0x30, 0x11, 0x87, 0x04, 0x7f, 0x00, 0x00, 0x01, 0x82, 0x09,
                                        'l',  'o',  'c',  'a',  'l',  'h',  'o',  's',  't'};
    mbedtls_x509write_cert crt;
    mbedtls_mpi serial;
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
    mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&crt, subject_key);
    mbedtls_x509write_crt_set_issuer_key(&crt, issuer_key);
    int ok = mbedtls_mpi_lset(&serial, serial_no) == 0 &&
             mbedtls_x509write_crt_set_serial(&crt, &serial) == 0 &&
             mbedtls_x509write_crt_set_subject_name(&crt, subject) == 0 &&
             mbedtls_x509write_crt_set_issuer_name(&crt, issuer) == 0 &&
             mbedtls_x509write_crt_set_validity(&crt, "20200101000000", "20991231235959") == 0 &&
             mbedtls_x509write_crt_set_basic_constraints(&crt, is_ca, -1) == 0 &&
             mbedtls_x509write_crt_set_subject_key_identifier(&crt) == 0 &&
             mbedtls_x509write_crt_set_authority_key_identifier(&crt) == 0 &&
             mbedtls_x509write_crt_set_key_usage(
                 &crt, is_ca ? MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN
                             : MBEDTLS_X509_KU_DIGITAL_SIGNATURE) == 0;
    if (ok && !is_ca)
        ok = mbedtls_x509write_crt_set_extension(&crt, MBEDTLS_OID_SUBJECT_ALT_NAME,
                                                 MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0,
                                                 san, sizeof san) == 0;
    if (!ok || mbedtls_x509write_crt_pem(&crt, (unsigned char *)pem, cap, mbedtls_ctr_drbg_random,
                                         drbg) != 0)
        die("write_cert");
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
}

void mh_pki_make(mh_pki *pki)
{
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context ca_key, srv_key;
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, NULL, 0) != 0)
        die("drbg");
    gen_key(&ca_key, &drbg);
    gen_key(&srv_key, &drbg);
    write_cert(&ca_key, &ca_key, "CN=Starling Test CA,O=Starling", "CN=Starling Test CA,O=Starling",
               1, 1, &drbg, pki->ca_pem, sizeof pki->ca_pem);
    write_cert(&srv_key, &ca_key, "CN=127.0.0.1,O=Starling", "CN=Starling Test CA,O=Starling", 0, 2,
               &drbg, pki->cert_pem, sizeof pki->cert_pem);
    if (mbedtls_pk_write_key_pem(&srv_key, (unsigned char *)pki->key_pem, sizeof pki->key_pem) != 0)
        die("write key");
    /* The pin: SHA-256 of the DER SubjectPublicKeyInfo, which mbedTLS writes at the end. */
    unsigned char der[512];
    int n = mbedtls_pk_write_pubkey_der(&srv_key, der, sizeof der);
    if (n <= 0)
        die("pubkey der");
    uint8_t digest[32];
    char b64[64];
    sl_sha256(der + sizeof der - (size_t)n, (size_t)n, digest);
    if (sl_base64_encode(digest, sizeof digest, b64, sizeof b64) != 0)
        die("base64");
    snprintf(pki->pin, sizeof pki->pin, "sha256//%s", b64);
    mbedtls_pk_free(&ca_key);
    mbedtls_pk_free(&srv_key);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
}
