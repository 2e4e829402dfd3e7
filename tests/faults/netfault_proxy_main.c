/*
 * netfault-proxy: netfault_proxy.h as a program, for reproducing a fault
 * test's cell by hand (e.g. under `ip netns exec`):
 *
 *   netfault-proxy --listen 10.201.0.1:9000 --target 127.0.0.1:8443 \
 *       [--delay MS] [--jitter MS] [--stall-p P --stall-ms MS] \
 *       [--reset-up P] [--reset-down P] [--span BYTES] [--seed N]
 *
 * Relays until SIGINT or SIGTERM, then prints its counters.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netfault_proxy.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* "host:port" into @host (numeric IPv4) and *@port. */
static int split(const char *text, char *host, size_t cap, unsigned *port)
{
    const char *colon = strrchr(text, ':');
    char *end;
    unsigned long p;
    if (colon == NULL || (size_t)(colon - text) >= cap)
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    p = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || p > 65535)
        return -1;
    *port = (unsigned)p;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: netfault-proxy --listen HOST:PORT --target HOST:PORT [--delay MS] "
                    "[--jitter MS] [--stall-p P] [--stall-ms MS] [--reset-up P] [--reset-down P] "
                    "[--span BYTES] [--seed N]\n");
    return 2;
}

int main(int argc, char **argv)
{
    char listen_host[64] = "", target_host[64] = "", err[200];
    nf_options o;
    nf_proxy *p;
    nf_stats s;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            return usage();
        i++;
        if (strcmp(k, "--listen") == 0) {
            if (split(v, listen_host, sizeof listen_host, &o.listen_port) != 0)
                return usage();
        } else if (strcmp(k, "--target") == 0) {
            if (split(v, target_host, sizeof target_host, &o.target_port) != 0)
                return usage();
        } else if (strcmp(k, "--delay") == 0) {
            o.delay_ms = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(k, "--jitter") == 0) {
            o.jitter_ms = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(k, "--stall-p") == 0) {
            o.stall_p = strtod(v, NULL);
        } else if (strcmp(k, "--stall-ms") == 0) {
            o.stall_ms = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(k, "--reset-up") == 0) {
            o.reset_up_p = strtod(v, NULL);
        } else if (strcmp(k, "--reset-down") == 0) {
            o.reset_down_p = strtod(v, NULL);
        } else if (strcmp(k, "--span") == 0) {
            o.reset_span = o.stall_span = strtoull(v, NULL, 10);
        } else if (strcmp(k, "--seed") == 0) {
            o.seed = strtoull(v, NULL, 0);
        } else {
            return usage();
        }
    }
    if (listen_host[0] == '\0' || target_host[0] == '\0')
        return usage();
    o.listen_host = listen_host;
    o.target_host = target_host;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (nf_proxy_start(&o, &p, err, sizeof err) != 0) {
        fprintf(stderr, "netfault-proxy: %s\n", err);
        return 1;
    }
    printf("netfault-proxy: %s:%u -> %s:%u\n", listen_host, nf_proxy_port(p), target_host,
           o.target_port);
    fflush(stdout);
    while (!stop)
        pause();
    nf_proxy_stats(p, &s);
    nf_proxy_stop(p);
    printf("netfault-proxy: %llu connections (%llu refused), %llu bytes up, %llu down, %llu "
           "delayed chunks, %llu stalls (%llu given up by the client, %llu outlived), %llu/%llu "
           "resets up/down, %llu passed on\n",
           (unsigned long long)s.connections, (unsigned long long)s.refused,
           (unsigned long long)s.bytes_up, (unsigned long long)s.bytes_down,
           (unsigned long long)s.chunks_delayed, (unsigned long long)s.stalls,
           (unsigned long long)s.stall_aborts, (unsigned long long)s.stalls_outlived,
           (unsigned long long)s.resets_up, (unsigned long long)s.resets_down,
           (unsigned long long)s.peer_resets);
    return 0;
}
