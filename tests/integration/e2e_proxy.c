/* e2e_proxy.c - see e2e_proxy.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "e2e_proxy.h"

#define MAX_CONNS  256
#define RECORD_MAX (8u << 20)

typedef struct conn {
    e2e_proxy *p;
    int client, server;
} conn;

struct e2e_proxy {
    int listen_fd, port, upstream_port;
    int stop_pipe[2];
    pthread_t acceptor;
    pthread_mutex_t lock;
    pthread_t threads[MAX_CONNS];
    size_t nthreads;
    long budget[2]; /* [0] down, [1] up: bytes before the cut, -1 when not armed */
    int times[2];   /* connections still to cut after this one */
    int cuts;
    unsigned long long wire[2]; /* [0] delivered to clients, [1] sent by clients */
    char *record;               /* what clients sent */
    size_t record_len;
};

static void die(const char *what)
{
    fprintf(stderr, "e2e_proxy: %s: %s\n", what, strerror(errno));
    abort();
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* How many of @n bytes in direction @dir may pass; *@cut set when the armed budget ends here. */
static size_t admit(e2e_proxy *p, int dir, const char *data, size_t n, int *cut)
{
    pthread_mutex_lock(&p->lock);
    *cut = 0;
    if (dir == 1)
        p->wire[1] += n; /* the client sent them, whether they pass or not */
    if (p->budget[dir] >= 0 && (long)n >= p->budget[dir]) {
        n = (size_t)p->budget[dir];
        /* the next connection (libcurl's own resend) dies at once */
        p->budget[dir] = p->times[dir]-- > 0 ? 0 : -1;
        p->cuts++;
        *cut = 1;
    } else if (p->budget[dir] >= 0) {
        p->budget[dir] -= (long)n;
    }
    if (dir == 0)
        p->wire[0] += n;
    if (dir == 1 && p->record_len + n <= RECORD_MAX) {
        memcpy(p->record + p->record_len, data, n);
        p->record_len += n;
    }
    pthread_mutex_unlock(&p->lock);
    return n;
}

static void *relay(void *arg)
{
    conn *c = arg;
    e2e_proxy *p = c->p;
    char *chunk = malloc(16384);
    if (chunk == NULL)
        die("malloc");
    for (;;) {
        struct pollfd fds[3] = {
            {c->server, POLLIN, 0}, {c->client, POLLIN, 0}, {p->stop_pipe[0], POLLIN, 0}};
        int cut = 0, done = 0;
        if (poll(fds, 3, 10000) <= 0 || fds[2].revents != 0)
            break;
        for (int dir = 0; dir < 2 && !done; dir++) {
            int from = dir == 0 ? c->server : c->client, to = dir == 0 ? c->client : c->server;
            ssize_t n;
            size_t pass;
            if (fds[dir].revents == 0)
                continue;
            n = recv(from, chunk, 16384, 0);
            if (n <= 0) {
                done = 1;
                break;
            }
            pass = admit(p, dir, chunk, (size_t)n, &cut);
            if (write_all(to, chunk, pass) != 0 || cut)
                done = 1;
        }
        if (done)
            break;
    }
    /* a cut looks like a reset link to both ends */
    shutdown(c->client, SHUT_RDWR);
    shutdown(c->server, SHUT_RDWR);
    close(c->client);
    close(c->server);
    free(chunk);
    free(c);
    return NULL;
}

static int connect_upstream(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void *acceptor(void *arg)
{
    e2e_proxy *p = arg;
    for (;;) {
        struct pollfd fds[2] = {{p->listen_fd, POLLIN, 0}, {p->stop_pipe[0], POLLIN, 0}};
        conn *c;
        int fd;
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents != 0)
            break;
        if ((fds[0].revents & POLLIN) == 0)
            continue;
        fd = accept(p->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        c = malloc(sizeof *c);
        if (c == NULL)
            die("malloc");
        c->p = p;
        c->client = fd;
        c->server = connect_upstream(p->upstream_port);
        pthread_mutex_lock(&p->lock);
        if (c->server < 0 || p->nthreads == MAX_CONNS ||
            pthread_create(&p->threads[p->nthreads], NULL, relay, c) != 0) {
            pthread_mutex_unlock(&p->lock);
            close(fd);
            if (c->server >= 0)
                close(c->server);
            free(c);
            continue;
        }
        p->nthreads++;
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

e2e_proxy *e2e_proxy_start(int upstream_port)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int one = 1;
    e2e_proxy *p = calloc(1, sizeof *p);
    if (p == NULL || (p->record = malloc(RECORD_MAX)) == NULL)
        die("malloc");
    p->upstream_port = upstream_port;
    p->budget[0] = p->budget[1] = -1;
    pthread_mutex_init(&p->lock, NULL);
    if (pipe(p->stop_pipe) != 0)
        die("pipe");
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->listen_fd < 0)
        die("socket");
    setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->listen_fd, 64) != 0)
        die("bind/listen");
    if (getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) != 0)
        die("getsockname");
    p->port = ntohs(a.sin_port);
    if (pthread_create(&p->acceptor, NULL, acceptor, p) != 0)
        die("pthread_create");
    return p;
}

void e2e_proxy_stop(e2e_proxy *p)
{
    if (p == NULL)
        return;
    if (write(p->stop_pipe[1], "x", 1) != 1)
        die("write");
    pthread_join(p->acceptor, NULL);
    for (size_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    close(p->listen_fd);
    close(p->stop_pipe[0]);
    close(p->stop_pipe[1]);
    pthread_mutex_destroy(&p->lock);
    free(p->record);
    free(p);
}

int e2e_proxy_port(const e2e_proxy *p)
{
    return p->port;
}

static void arm(e2e_proxy *p, int dir, long after, int times)
{
    pthread_mutex_lock(&p->lock);
    p->budget[dir] = after;
    p->times[dir] = times - 1;
    pthread_mutex_unlock(&p->lock);
}

void e2e_proxy_cut_down(e2e_proxy *p, long after, int times)
{
    arm(p, 0, after, times);
}

void e2e_proxy_cut_up(e2e_proxy *p, long after, int times)
{
    arm(p, 1, after, times);
}

int e2e_proxy_cuts(e2e_proxy *p)
{
    int n;
    pthread_mutex_lock(&p->lock);
    n = p->cuts;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int e2e_proxy_count(e2e_proxy *p, const char *text)
{
    size_t tlen = strlen(text);
    int n = 0;
    pthread_mutex_lock(&p->lock);
    for (const char *at = p->record, *end = p->record + p->record_len;
         (at = memmem(at, (size_t)(end - at), text, tlen)) != NULL; at += tlen)
        n++;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void e2e_proxy_bytes(e2e_proxy *p, unsigned long long *up, unsigned long long *down)
{
    pthread_mutex_lock(&p->lock);
    *up = p->wire[1];
    *down = p->wire[0];
    pthread_mutex_unlock(&p->lock);
}
