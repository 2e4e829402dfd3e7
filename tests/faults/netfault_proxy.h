/*
 * netfault_proxy.h - a fault-injecting TCP proxy for the real-network
 * fault tests (tests/faults/test_net_faults.c, issue #9): it listens on an
 * IPv4 address, relays every connection to one target, and on the way
 *   - delays every chunk by delay_ms +- jitter_ms (uniform), per
 *     direction, keeping the byte order (a chunk never overtakes the one
 *     before it), so it adds latency without capping the rate;
 *   - stalls one direction of a connection for stall_ms once it carried a
 *     random number of bytes in [1, stall_span] (probability stall_p per
 *     connection, direction drawn at random);
 *   - resets a connection (RST to both ends: SO_LINGER 0, then close) once
 *     a random number of bytes in [1, reset_span] went up (client to
 *     target; probability reset_up_p per connection) or down (reset_down_p).
 * Every draw comes from @seed and the connection's index, so a run with
 * the same seed and the same arrival order makes the same faults.
 *
 * Threads: one acceptor, and one thread per direction of each connection
 * (poll() with a short tick, so stopping takes at most ~50 ms). The
 * functions below are thread-safe; none of them calls cmocka.
 */
#ifndef NETFAULT_PROXY_H
#define NETFAULT_PROXY_H

#include <stddef.h>
#include <stdint.h>

typedef struct nf_proxy nf_proxy;

typedef struct nf_options {
    const char *listen_host; /* numeric IPv4, e.g. "10.201.0.1" */
    unsigned listen_port;    /* 0: an ephemeral port (see nf_proxy_port) */
    const char *target_host; /* numeric IPv4 */
    unsigned target_port;
    unsigned delay_ms, jitter_ms; /* per chunk and direction; jitter <= delay */
    size_t chunk_bytes;           /* largest read relayed as one chunk; 0: 16 KiB */
    double stall_p;               /* per connection, in [0, 1] */
    unsigned stall_ms;
    uint64_t stall_span; /* bytes; 0: 64 KiB */
    double reset_up_p, reset_down_p;
    uint64_t reset_span; /* bytes; 0: 64 KiB */
    uint64_t seed;
} nf_options;

typedef struct nf_stats {
    uint64_t connections;          /* accepted */
    uint64_t refused;              /* the target did not accept the relayed connection */
    uint64_t bytes_up, bytes_down; /* relayed (TCP payload, HTTP headers included) */
    uint64_t chunks_delayed;
    uint64_t stalls;
    uint64_t stall_aborts; /* stalls the client gave up on (closed or reset) */
    uint64_t stall_abort_min_ms,
        stall_abort_max_ms;          /* from a stall's start to the client giving up */
    uint64_t stalls_outlived;        /* stalls that ended with the client still waiting */
    uint64_t resets_up, resets_down; /* resets this proxy injected */
    uint64_t peer_resets;            /* resets (or errors) from an end, passed on */
} nf_stats;

/* Listen and start relaying. 0 and *@out, or -1 with a reason in @err. */
int nf_proxy_start(const nf_options *o, nf_proxy **out, char *err, size_t errcap);
/* The port it listens on. */
unsigned nf_proxy_port(const nf_proxy *p);
/* The counters so far (a snapshot). */
void nf_proxy_stats(nf_proxy *p, nf_stats *out);
/* Close the listener and every connection, join the threads, free. NULL: no-op. */
void nf_proxy_stop(nf_proxy *p);

#endif /* NETFAULT_PROXY_H */
