/*
 * mini_http.h - a tiny scripted HTTP/1.1 server on 127.0.0.1 for the client
 * tests: one thread, one connection at a time, one request per connection
 * ("Connection: close"), plain or TLS (mbedTLS). The test's handler decides
 * what goes back on the wire, including nothing at all or half a response,
 * which is what a real server cannot be made to do on purpose.
 *
 * Also: a throw-away PKI (a CA and a server certificate for 127.0.0.1) made
 * with mbedTLS, so the TLS tests need no openssl binary and no files in git.
 */
#ifndef MINI_HTTP_H
#define MINI_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define MH_MAX_HEADERS 48

typedef struct mh_request {
    char method[16];
    char path[2048];
    size_t nheaders;
    char names[MH_MAX_HEADERS][64];
    char values[MH_MAX_HEADERS][512];
    size_t content_length; /* 0 when absent */
} mh_request;

typedef struct mh_conn mh_conn;
typedef struct mh_server mh_server;

/* Called on the server thread for each request. When it returns, the
 * connection is closed (an abrupt close if no response was sent). */
typedef void (*mh_handler)(void *ctx, mh_conn *conn, const mh_request *rq);

/* PEM strings of a server identity for TLS (NULL for plain HTTP). */
typedef struct mh_tls {
    const char *cert_chain_pem; /* server certificate */
    const char *key_pem;
} mh_tls;

/* Start a server on an ephemeral port. Aborts the test program on failure. */
mh_server *mh_start(mh_handler handler, void *ctx, const mh_tls *tls);
void mh_stop(mh_server *s);
int mh_port(const mh_server *s);
/* Connections accepted so far (TLS: handshakes attempted). */
unsigned mh_connections(const mh_server *s);

/* The value of header @name (case-insensitive), or NULL. */
const char *mh_header(const mh_request *rq, const char *name);

/* Read up to @n body bytes (fewer at the end of the body or on error). */
size_t mh_read_body(mh_conn *c, void *buf, size_t n);

/* Send a complete response (after draining the unread body). @headers:
 * extra "Name: value\r\n" lines or NULL. HEAD answers carry no body. */
void mh_respond(mh_conn *c, int status, const char *headers, const void *body, size_t len);

/* Send raw bytes (for half responses); returns 0 on success. */
int mh_write(mh_conn *c, const void *data, size_t len);

/* ---------------------------------------------------------------- PKI */

typedef struct mh_pki {
    char ca_pem[4096];   /* the CA certificate */
    char cert_pem[4096]; /* server certificate (CN and SAN 127.0.0.1), signed by the CA */
    char key_pem[1024];  /* server private key */
    char pin[128];       /* "sha256//<base64>" of the server's public key */
} mh_pki;

/* Make a fresh CA and server identity (P-256). Aborts on failure. */
void mh_pki_make(mh_pki *pki);

#endif /* MINI_HTTP_H */
