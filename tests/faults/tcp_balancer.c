/* tcp_balancer.c - see tcp_balancer.h. One thread accepts; one thread per connection copies. */
#include "tcp_balancer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_BACKENDS 8

struct tcp_balancer {
    int listen_fd;
    int backends[MAX_BACKENDS];
    size_t n;
    atomic_uint next;
    atomic_int stop;
    atomic_int live; /* connection threads still running */
    pthread_t acceptor;
};

typedef struct pipe_pair {
    tcp_balancer *b;
    int client, server;
} pipe_pair;

static int connect_port(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

/* Copy what is readable on @from to @to; 0 when @from closed or failed. */
static int copy_some(int from, int to)
{
    char buf[16384];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return 0;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0)
            return 0;
        off += w;
    }
    return 1;
}

static void *pump(void *arg)
{
    pipe_pair *p = arg;
    struct pollfd fds[2] = {{p->client, POLLIN, 0}, {p->server, POLLIN, 0}};
    while (!atomic_load(&p->b->stop)) {
        int r = poll(fds, 2, 200);
        if (r < 0)
            break;
        if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !copy_some(p->client, p->server))
            break;
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !copy_some(p->server, p->client))
            break;
    }
    close(p->client);
    close(p->server);
    atomic_fetch_sub(&p->b->live, 1);
    free(p);
    return NULL;
}

/* The next backend that takes a connection, in turn; -1 when none does. */
static int pick(tcp_balancer *b)
{
    for (size_t tries = 0; tries < b->n; tries++) {
        unsigned i = atomic_fetch_add(&b->next, 1) % (unsigned)b->n;
        int fd = connect_port(b->backends[i]);
        if (fd >= 0)
            return fd;
    }
    return -1;
}

static void *accept_loop(void *arg)
{
    tcp_balancer *b = arg;
    struct pollfd pf = {b->listen_fd, POLLIN, 0};
    while (!atomic_load(&b->stop)) {
        int c, s;
        pipe_pair *p;
        pthread_t th;
        if (poll(&pf, 1, 100) <= 0)
            continue;
        c = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        s = pick(b);
        p = s >= 0 ? malloc(sizeof *p) : NULL;
        if (p == NULL) {
            close(c); /* no backend: the client sees the connection close, and retries */
            if (s >= 0)
                close(s);
            continue;
        }
        p->b = b;
        p->client = c;
        p->server = s;
        atomic_fetch_add(&b->live, 1);
        if (pthread_create(&th, NULL, pump, p) != 0) {
            atomic_fetch_sub(&b->live, 1);
            close(c);
            close(s);
            free(p);
            continue;
        }
        pthread_detach(th);
    }
    return NULL;
}

tcp_balancer *tb_start(const int *backends, size_t n, int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1;
    tcp_balancer *b;
    if (n == 0 || n > MAX_BACKENDS || (b = calloc(1, sizeof *b)) == NULL)
        return NULL;
    memcpy(b->backends, backends, n * sizeof *backends);
    b->n = n;
    b->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(b->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (b->listen_fd < 0 || bind(b->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(b->listen_fd, 256) != 0 ||
        getsockname(b->listen_fd, (struct sockaddr *)&a, &len) != 0 ||
        pthread_create(&b->acceptor, NULL, accept_loop, b) != 0) {
        if (b->listen_fd >= 0)
            close(b->listen_fd);
        free(b);
        return NULL;
    }
    *port = ntohs(a.sin_port);
    return b;
}

void tb_stop(tcp_balancer *b)
{
    if (b == NULL)
        return;
    atomic_store(&b->stop, 1);
    pthread_join(b->acceptor, NULL);
    close(b->listen_fd);
    while (atomic_load(&b->live) > 0) /* the pumps notice within a poll timeout */
        usleep(10000);
    free(b);
}
