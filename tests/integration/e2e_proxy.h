/*
 * e2e_proxy.h - a TCP relay on 127.0.0.1 between a client and a real
 * server, for the end-to-end tests: it forwards bytes both ways unchanged
 * and, when armed, cuts a connection in the middle of a transfer (after a
 * given number of further bytes in one direction), which is what a flaky
 * link does to a download or an upload. It also keeps what clients sent,
 * so a test can check that a resume really asked for a Range or a HEAD.
 */
#ifndef E2E_PROXY_H
#define E2E_PROXY_H

#include <stddef.h>

typedef struct e2e_proxy e2e_proxy;

/* Listen on an ephemeral port of 127.0.0.1 and relay to 127.0.0.1:@upstream_port.
 * Aborts the test program on failure. */
e2e_proxy *e2e_proxy_start(int upstream_port);
/* Close every connection, join the threads, free. */
void e2e_proxy_stop(e2e_proxy *p);
int e2e_proxy_port(const e2e_proxy *p);

/* Arm cuts: after @after more bytes from the server to the client (down)
 * or from the client to the server (up), the connection carrying them is
 * closed; the next @times - 1 connections are then closed at their first byte.
 * (libcurl resends a request once, transparently, when a reused connection
 * dies before any answer: cutting an upload twice makes the client see it.)
 * Thread-safe (may be called from a client's progress callback). */
void e2e_proxy_cut_down(e2e_proxy *p, long after, int times);
void e2e_proxy_cut_up(e2e_proxy *p, long after, int times);
/* Cuts made so far. */
int e2e_proxy_cuts(e2e_proxy *p);
/* Bytes on the wire so far, headers included: @up what clients sent (also
 * bytes a cut kept from the server), @down what reached clients. Thread-safe. */
void e2e_proxy_bytes(e2e_proxy *p, unsigned long long *up, unsigned long long *down);
/* How often @text occurs in what clients sent (bounded record of 8 MiB). */
int e2e_proxy_count(e2e_proxy *p, const char *text);

#endif /* E2E_PROXY_H */
