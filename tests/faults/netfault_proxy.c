/* netfault_proxy.c - see netfault_proxy.h. */
#include "netfault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS     50
#define QUEUE_LIMIT (1u << 20) /* bytes held in one direction's delay line */
#define UP          0
#define DOWN        1

struct nf_proxy {
    nf_options o;
    int listen_fd;
    unsigned port;
    pthread_t acceptor;
    atomic_int stopping;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned active; /* pump threads running */
    atomic_uint_fast64_t connections, refused, bytes[2], chunks_delayed, stalls, stalls_outlived,
        resets[2], peer_resets;
    uint64_t stall_aborts, stall_abort_min_ms, stall_abort_max_ms; /* under lock */
};

typedef struct chunk {
    struct chunk *next;
    int64_t due_ms;
    size_t len;
    unsigned char data[];
} chunk;

/* One relayed connection: fd[UP] faces the client, fd[DOWN] the target. */
typedef struct conn {
    nf_proxy *p;
    int fd[2];
    atomic_int dead;  /* stop both directions */
    atomic_int reset; /* close with RST */
    atomic_int refs;
    uint64_t reset_at[2]; /* bytes read in that direction before the reset; 0: none */
    uint64_t stall_at[2]; /* bytes read in that direction before the stall; 0: none */
} conn;

typedef struct pump {
    conn *c;
    int dir; /* UP: read fd[UP], write fd[DOWN] */
    uint64_t rng;
} pump;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return (double)(next_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

static void set_linger0(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

static void conn_release(conn *c)
{
    nf_proxy *p = c->p;
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        for (int d = 0; d < 2; d++) {
            if (atomic_load(&c->reset))
                set_linger0(c->fd[d]);
            close(c->fd[d]);
        }
        free(c);
    }
    pthread_mutex_lock(&p->lock);
    if (--p->active == 0)
        pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->lock);
}

/* Kill the connection with RST on both ends (the sockets close when the
 * second thread lets go, at most a tick later). */
static void conn_reset(conn *c)
{
    atomic_store(&c->reset, 1);
    atomic_store(&c->dead, 1);
    for (int d = 0; d < 2; d++)
        set_linger0(c->fd[d]);
}

/* Write all of @len bytes unless the connection dies or the proxy stops. */
static int write_all(conn *c, int fd, const unsigned char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (atomic_load(&c->dead) || atomic_load(&c->p->stopping))
                return -1;
            continue; /* SO_SNDTIMEO bounds each wait */
        }
        return -1;
    }
    return 0;
}

static void free_queue(chunk *q)
{
    while (q != NULL) {
        chunk *next = q->next;
        free(q);
        q = next;
    }
}

static void *pump_main(void *arg)
{
    pump *pm = arg;
    conn *c = pm->c;
    nf_proxy *p = c->p;
    const nf_options *o = &p->o;
    int src = c->fd[pm->dir], dst = c->fd[!pm->dir], src_open = 1, stalled = 0;
    size_t cap = o->chunk_bytes ? o->chunk_bytes : 16384, queued = 0;
    uint64_t seen = 0;
    int64_t last_due = 0, stall_from = 0, stall_until = 0;
    chunk *head = NULL, **tail = &head;
    unsigned char *buf = malloc(cap);

    while (buf != NULL && !atomic_load(&c->dead) && !atomic_load(&p->stopping)) {
        int64_t now = now_ms(), wait = TICK_MS;
        /* send what is due */
        while (head != NULL && head->due_ms <= now && now >= stall_until) {
            chunk *ch = head;
            if (write_all(c, dst, ch->data, ch->len) != 0) {
                if (!atomic_load(&c->dead))
                    atomic_fetch_add(&p->peer_resets, 1);
                conn_reset(c);
                break;
            }
            atomic_fetch_add(&p->bytes[pm->dir], ch->len);
            queued -= ch->len;
            head = ch->next;
            if (head == NULL)
                tail = &head;
            free(ch);
            now = now_ms();
        }
        if (atomic_load(&c->dead))
            break;
        if (!src_open && head == NULL) {
            shutdown(dst, SHUT_WR); /* pass the end of the stream on */
            break;
        }
        if (head != NULL) {
            int64_t due = head->due_ms > stall_until ? head->due_ms : stall_until;
            wait = due - now < TICK_MS ? (due - now > 0 ? due - now : 0) : TICK_MS;
        }
        struct pollfd pf = {src, POLLIN, 0};
        int ready = 0;
        if (stalled && now >= stall_until) {
            stalled = 0; /* the stall ran its course with the client still waiting */
            atomic_fetch_add(&p->stalls_outlived, 1);
        }
        if (now < stall_until) {
            /* a stalled direction reads nothing: the sender feels it. Watch
             * the client: if it gives up on the stalled transfer, note when */
            struct pollfd cf = {c->fd[UP], POLLRDHUP, 0};
            if (poll(&cf, 1, (int)wait) > 0 && (cf.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                uint64_t waited = (uint64_t)(now_ms() - stall_from);
                pthread_mutex_lock(&p->lock);
                p->stall_aborts++;
                if (p->stall_aborts == 1 || waited < p->stall_abort_min_ms)
                    p->stall_abort_min_ms = waited;
                if (waited > p->stall_abort_max_ms)
                    p->stall_abort_max_ms = waited;
                pthread_mutex_unlock(&p->lock);
                atomic_store(&c->dead, 1);
                break;
            }
            continue;
        }
        if (src_open && queued < QUEUE_LIMIT)
            ready = poll(&pf, 1, (int)wait);
        else if (wait > 0) {
            struct timespec ts = {0, (long)wait * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (ready <= 0 || !(pf.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = recv(src, buf, cap, 0);
        if (n == 0) {
            src_open = 0;
            continue;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            if (!atomic_load(&c->dead))
                atomic_fetch_add(&p->peer_resets, 1);
            conn_reset(c); /* the peer reset: the other end gets an RST too */
            break;
        }
        size_t len = (size_t)n;
        int cut = 0;
        if (c->reset_at[pm->dir] > 0 && seen + len >= c->reset_at[pm->dir]) {
            len = (size_t)(c->reset_at[pm->dir] - seen);
            cut = 1;
        }
        if (c->stall_at[pm->dir] > 0 && seen < c->stall_at[pm->dir] &&
            seen + len >= c->stall_at[pm->dir]) {
            stall_from = now_ms();
            stall_until = stall_from + o->stall_ms;
            stalled = 1;
            atomic_fetch_add(&p->stalls, 1);
        }
        seen += len;
        if (len > 0) {
            chunk *ch = malloc(sizeof *ch + len);
            int64_t due = now_ms();
            if (ch == NULL)
                break;
            if (o->delay_ms > 0) {
                int64_t jitter =
                    o->jitter_ms > 0
                        ? (int64_t)(next_rand(&pm->rng) % (2 * (uint64_t)o->jitter_ms + 1)) -
                              (int64_t)o->jitter_ms
                        : 0;
                due += (int64_t)o->delay_ms + jitter;
                atomic_fetch_add(&p->chunks_delayed, 1);
            }
            if (due < last_due)
                due = last_due; /* no overtaking: the stream keeps its order */
            last_due = due;
            ch->next = NULL;
            ch->due_ms = due;
            ch->len = len;
            memcpy(ch->data, buf, len);
            *tail = ch;
            tail = &ch->next;
            queued += len;
        }
        if (cut) {
            /* the first reset_at bytes reach the other end, then the RST */
            for (chunk *ch = head; ch != NULL; ch = ch->next)
                if (write_all(c, dst, ch->data, ch->len) == 0)
                    atomic_fetch_add(&p->bytes[pm->dir], ch->len);
            atomic_fetch_add(&p->resets[pm->dir], 1);
            conn_reset(c);
            break;
        }
    }
    free_queue(head);
    free(buf);
    free(pm);
    conn_release(c);
    return NULL;
}

static int connect_target(const nf_options *o)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)o->target_port);
    if (inet_pton(AF_INET, o->target_host, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void tune(int fd)
{
    struct timeval tv = {0, TICK_MS * 1000};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Draw the connection's faults and start its two pumps. */
static void relay(nf_proxy *p, int client, uint64_t index)
{
    const nf_options *o = &p->o;
    uint64_t rng = o->seed ^ (index * 0xD6E8FEB86659FD93ULL);
    uint64_t stall_span = o->stall_span ? o->stall_span : 65536;
    uint64_t reset_span = o->reset_span ? o->reset_span : 65536;
    conn *c;
    int target = connect_target(o);
    if (target < 0) {
        atomic_fetch_add(&p->refused, 1);
        set_linger0(client);
        close(client);
        return;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        close(client);
        close(target);
        return;
    }
    c->p = p;
    c->fd[UP] = client;
    c->fd[DOWN] = target;
    tune(client);
    tune(target);
    if (uniform01(&rng) < o->reset_up_p)
        c->reset_at[UP] = 1 + next_rand(&rng) % reset_span;
    if (uniform01(&rng) < o->reset_down_p)
        c->reset_at[DOWN] = 1 + next_rand(&rng) % reset_span;
    if (uniform01(&rng) < o->stall_p)
        c->stall_at[next_rand(&rng) & 1] = 1 + next_rand(&rng) % stall_span;
    atomic_store(&c->refs, 2);
    for (int d = 0; d < 2; d++) {
        pump *pm = calloc(1, sizeof *pm);
        pthread_t t;
        pthread_attr_t attr;
        int rc = -1;
        pthread_mutex_lock(&p->lock);
        p->active++; /* conn_release() gives it back */
        pthread_mutex_unlock(&p->lock);
        if (pm != NULL) {
            pm->c = c;
            pm->dir = d;
            pm->rng = next_rand(&rng);
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            rc = pthread_create(&t, &attr, pump_main, pm);
            pthread_attr_destroy(&attr);
        }
        if (rc != 0) {
            /* this direction never runs: kill the connection */
            free(pm);
            conn_reset(c);
            conn_release(c);
        }
    }
}

static void *accept_main(void *arg)
{
    nf_proxy *p = arg;
    uint64_t index = 0;
    while (!atomic_load(&p->stopping)) {
        struct pollfd pf = {p->listen_fd, POLLIN, 0};
        int fd;
        if (poll(&pf, 1, TICK_MS) <= 0)
            continue;
        fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        atomic_fetch_add(&p->connections, 1);
        relay(p, fd, index++);
    }
    return NULL;
}

int nf_proxy_start(const nf_options *o, nf_proxy **out, char *err, size_t errcap)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1;
    nf_proxy *p;
    if (o->jitter_ms > o->delay_ms || o->stall_p < 0 || o->stall_p > 1 || o->reset_up_p < 0 ||
        o->reset_up_p > 1 || o->reset_down_p < 0 || o->reset_down_p > 1) {
        snprintf(err, errcap, "bad options (jitter above delay, or a probability outside [0, 1])");
        return -1;
    }
    p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    p->o = *o;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)o->listen_port);
    if (p->listen_fd < 0 || inet_pton(AF_INET, o->listen_host, &a.sin_addr) != 1 ||
        setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->listen_fd, 128) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0) {
        snprintf(err, errcap, "listen on %s:%u: %s", o->listen_host, o->listen_port,
                 strerror(errno));
        goto fail;
    }
    p->port = ntohs(a.sin_port);
    if (pthread_create(&p->acceptor, NULL, accept_main, p) != 0) {
        snprintf(err, errcap, "no thread");
        goto fail;
    }
    *out = p;
    return 0;
fail:
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->idle);
    free(p);
    return -1;
}

unsigned nf_proxy_port(const nf_proxy *p)
{
    return p->port;
}

void nf_proxy_stats(nf_proxy *p, nf_stats *out)
{
    memset(out, 0, sizeof *out);
    out->connections = atomic_load(&p->connections);
    out->refused = atomic_load(&p->refused);
    out->bytes_up = atomic_load(&p->bytes[UP]);
    out->bytes_down = atomic_load(&p->bytes[DOWN]);
    out->chunks_delayed = atomic_load(&p->chunks_delayed);
    out->stalls = atomic_load(&p->stalls);
    pthread_mutex_lock(&p->lock);
    out->stall_aborts = p->stall_aborts;
    out->stall_abort_min_ms = p->stall_abort_min_ms;
    out->stall_abort_max_ms = p->stall_abort_max_ms;
    pthread_mutex_unlock(&p->lock);
    out->stalls_outlived = atomic_load(&p->stalls_outlived);
    out->resets_up = atomic_load(&p->resets[UP]);
    out->resets_down = atomic_load(&p->resets[DOWN]);
    out->peer_resets = atomic_load(&p->peer_resets);
}

void nf_proxy_stop(nf_proxy *p)
{
    if (p == NULL)
        return;
    atomic_store(&p->stopping, 1);
    pthread_join(p->acceptor, NULL);
    close(p->listen_fd);
    pthread_mutex_lock(&p->lock);
    while (p->active > 0)
        pthread_cond_wait(&p->idle, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->idle);
    free(p);
}
