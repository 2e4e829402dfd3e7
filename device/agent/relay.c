/*
 * relay.c - a loopback TCP relay between one simulated device and the
 * coordinator, for fault injection. "Armed" with a byte count by the agent
 * before a transfer, it forwards that many more bytes (both directions
 * counted, on whatever connection carries them) and then closes the
 * connection, wherever that falls: in a PATCH body, in a model download,
 * in an answer's headers. "Dark" closes every connection and refuses new
 * ones (a device that died mid-upload).
 *
 * It also counts requests that resume something, by looking at the bytes
 * the device sends (plain HTTP only): "HEAD /v1/uploads/" (an upload asks
 * for its offset after a failure) and "If-Range:" (a download continues
 * from bytes an earlier attempt kept). One thread per relay, poll() over every connection.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"

#define MAX_PAIRS 16
#define TAIL      11 /* shorter than every pattern: a match is never counted twice */

typedef struct pair {
    int dev, srv; /* -1: free slot */
    char tail[TAIL];
    size_t tail_len;
} pair;

struct sl__agent_relay {
    int listen_fd, port;
    struct sockaddr_storage target;
    socklen_t target_len;
    pthread_t thread;
    int started;
    atomic_int stop, dark;
    atomic_llong armed; /* bytes left before the cut; -1: none */
    double rate;        /* the link: bytes per second each way; 0: unlimited (set before use) */
    atomic_ullong cuts, resumes;
    pair pairs[MAX_PAIRS];
};

static void pair_close(pair *p)
{
    if (p->dev >= 0)
        close(p->dev);
    if (p->srv >= 0)
        close(p->srv);
    p->dev = p->srv = -1;
}

static void count_resumes(sl__agent_relay *r, pair *p, const char *data, size_t n)
{
    static const char *const patterns[] = {"HEAD /v1/uploads/", "\r\nIf-Range: "};
    char buf[TAIL + 16384];
    size_t len = p->tail_len;
    memcpy(buf, p->tail, p->tail_len);
    if (n > sizeof buf - len)
        n = sizeof buf - len;
    memcpy(buf + len, data, n);
    len += n;
    for (size_t i = 0; i < 2; i++) {
        size_t plen = strlen(patterns[i]);
        for (const char *s = buf; (s = memmem(s, len - (size_t)(s - buf), patterns[i], plen));
             s += plen)
            atomic_fetch_add(&r->resumes, 1);
    }
    p->tail_len = len < TAIL ? len : TAIL;
    memcpy(p->tail, buf + len - p->tail_len, p->tail_len);
}

static int send_all(int fd, const char *data, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Move what @from has to @to; 0 to keep the pair, -1 to close it. */
static int forward(sl__agent_relay *r, pair *p, int from, int to)
{
    char buf[16384];
    ssize_t got = recv(from, buf, sizeof buf, 0);
    size_t n;
    long long armed;
    if (got < 0 && errno == EINTR)
        return 0;
    if (got <= 0)
        return -1;
    n = (size_t)got;
    armed = atomic_load(&r->armed);
    if (from == p->dev)
        count_resumes(r, p, buf, n);
    if (armed >= 0 && (long long)n >= armed) {
        send_all(to, buf, (size_t)armed);
        atomic_store(&r->armed, -1);
        atomic_fetch_add(&r->cuts, 1);
        return -1; /* the cut */
    }
    if (armed >= 0)
        atomic_fetch_sub(&r->armed, (long long)n);
    if (send_all(to, buf, n) != 0)
        return -1;
    if (r->rate > 0) { /* a slow link: these bytes took n / rate seconds */
        double s = (double)n / r->rate;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !atomic_load(&r->stop))
            ;
    }
    return 0;
}

void sl__agent_relay_set_rate(sl__agent_relay *r, double bytes_per_s)
{
    r->rate = bytes_per_s > 0 ? bytes_per_s : 0;
}

static void accept_one(sl__agent_relay *r)
{
    int dev = accept(r->listen_fd, NULL, NULL), srv, one = 1;
    struct timeval send_timeout = {5, 0};
    pair *slot = NULL;
    if (dev < 0)
        return;
    for (size_t i = 0; i < MAX_PAIRS && slot == NULL; i++)
        if (r->pairs[i].dev < 0)
            slot = &r->pairs[i];
    if (slot == NULL || atomic_load(&r->dark)) {
        close(dev);
        return;
    }
    srv = socket(r->target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv < 0 || connect(srv, (struct sockaddr *)&r->target, r->target_len) != 0) {
        if (srv >= 0)
            close(srv);
        close(dev);
        return;
    }
    setsockopt(dev, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* a peer that stops reading must not block the relay's one thread */
    setsockopt(dev, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    setsockopt(srv, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    slot->dev = dev;
    slot->srv = srv;
    slot->tail_len = 0;
}

static void *relay_main(void *arg)
{
    sl__agent_relay *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd fds[1 + 2 * MAX_PAIRS];
        pair *owner[1 + 2 * MAX_PAIRS];
        nfds_t n = 1;
        fds[0].fd = r->listen_fd;
        fds[0].events = POLLIN;
        owner[0] = NULL;
        for (size_t i = 0; i < MAX_PAIRS; i++) {
            if (r->pairs[i].dev < 0)
                continue;
            fds[n].fd = r->pairs[i].dev;
            fds[n].events = POLLIN;
            owner[n++] = &r->pairs[i];
            fds[n].fd = r->pairs[i].srv;
            fds[n].events = POLLIN;
            owner[n++] = &r->pairs[i];
        }
        if (poll(fds, n, 50) <= 0 && !atomic_load(&r->dark))
            continue;
        if (atomic_load(&r->dark)) {
            /* checked after the wake-up: what a device sends once it went
             * dark never reaches the coordinator */
            for (size_t i = 0; i < MAX_PAIRS; i++)
                pair_close(&r->pairs[i]);
            if (fds[0].revents & POLLIN)
                accept_one(r);
            continue;
        }
        for (nfds_t i = 1; i < n; i++) {
            pair *p = owner[i];
            if (p->dev < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (fds[i].fd == p->dev ? forward(r, p, p->dev, p->srv) != 0
                                    : forward(r, p, p->srv, p->dev) != 0)
                pair_close(p);
        }
        if (fds[0].revents & POLLIN)
            accept_one(r);
    }
    for (size_t i = 0; i < MAX_PAIRS; i++)
        pair_close(&r->pairs[i]);
    return NULL;
}

int sl__agent_relay_create(const char *host, int port, sl__agent_relay **out)
{
    struct addrinfo hints, *res = NULL;
    struct sockaddr_in local;
    socklen_t len = sizeof local;
    char port_text[16];
    sl__agent_relay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return SL_ENOMEM;
    r->listen_fd = -1;
    for (size_t i = 0; i < MAX_PAIRS; i++)
        r->pairs[i].dev = r->pairs[i].srv = -1;
    atomic_store(&r->armed, -1);
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port_text, sizeof port_text, "%d", port);
    if (getaddrinfo(host, port_text, &hints, &res) != 0 || res == NULL ||
        res->ai_addrlen > sizeof r->target) {
        if (res != NULL)
            freeaddrinfo(res);
        free(r);
        return SL_ENOENT;
    }
    memcpy(&r->target, res->ai_addr, res->ai_addrlen);
    r->target_len = res->ai_addrlen;
    freeaddrinfo(res);
    memset(&local, 0, sizeof local);
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->listen_fd < 0 || bind(r->listen_fd, (struct sockaddr *)&local, sizeof local) != 0 ||
        listen(r->listen_fd, 16) != 0 ||
        getsockname(r->listen_fd, (struct sockaddr *)&local, &len) != 0) {
        sl__agent_relay_free(r);
        return SL_EIO;
    }
    r->port = ntohs(local.sin_port);
    if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        sl__agent_relay_free(r);
        return SL_ENOMEM;
    }
    r->started = 1;
    *out = r;
    return SL_OK;
}

void sl__agent_relay_free(sl__agent_relay *r)
{
    if (r == NULL)
        return;
    atomic_store(&r->stop, 1);
    if (r->started)
        pthread_join(r->thread, NULL);
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    free(r);
}

int sl__agent_relay_port(const sl__agent_relay *r)
{
    return r->port;
}

void sl__agent_relay_arm(sl__agent_relay *r, int64_t bytes)
{
    atomic_store(&r->armed, bytes < 0 ? -1 : (long long)bytes);
}

void sl__agent_relay_set_dark(sl__agent_relay *r, int dark)
{
    atomic_store(&r->dark, dark);
}

void sl__agent_relay_counts(const sl__agent_relay *r, uint64_t *cuts, uint64_t *resumes)
{
    *cuts = atomic_load(&((sl__agent_relay *)r)->cuts);
    *resumes = atomic_load(&((sl__agent_relay *)r)->resumes);
}

/* ---- the hooks an agent's link faults go through (runtime.c) -------------------------------- */

static void hook_arm(void *link, int64_t bytes)
{
    sl__agent_relay_arm(link, bytes);
}

static void hook_dark(void *link, int dark)
{
    sl__agent_relay_set_dark(link, dark);
}

const sl__agent_link_hooks sl__agent_relay_hooks = {hook_arm, hook_dark};
