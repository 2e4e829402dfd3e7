/*
 * workers.c - a pool of threads that runs device requests (signed, or
 * under a session) off the libmicrohttpd threads.
 *
 * A device request costs an authentication (an ECDSA verification, about
 * a millisecond of CPU, or a session's MAC), hashing and decoding its
 * update, and often a durable write that waits for the store's group commit.
 * Run on a libmicrohttpd thread, it holds up every other connection of
 * that thread, /v1/status included. So daemon.c suspends such a connection
 * once its body is in (MHD_suspend_connection), queues it here, and a
 * worker dispatches it and resumes the connection with the answer ready;
 * libmicrohttpd then calls the access handler again, which sends it.
 *
 * The queue is bounded (beyond it the request is answered 503 at once) and
 * FIFO; a worker stuck in a slow store write holds only its own request,
 * and every store call has a deadline. On stop the workers finish what is
 * queued (each job resumes its connection) before they end, so no
 * connection stays suspended when the daemon stops.
 */
#include <stdlib.h>

#include <microhttpd.h>

#include "server_int.h"

typedef struct sl__job {
    struct sl__job *next;
    struct MHD_Connection *conn;
    sl__req *rq;
} sl__job;

struct sl__pool {
    sl_server *server;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    sl__job *head, *tail;
    size_t queued, cap;
    int stopping;
    unsigned nthreads;
    pthread_t threads[];
};

static void *worker_main(void *arg)
{
    sl__pool *p = arg;
    pthread_setname_np(pthread_self(), "sl-api-worker"); /* for top -H and perf */
    for (;;) {
        sl__job *job;
        sl__resp *answer;
        pthread_mutex_lock(&p->lock);
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        job = p->head;
        if (job == NULL) { /* stopping, and nothing is left */
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        pthread_mutex_unlock(&p->lock);

        answer = malloc(sizeof *answer);
        if (answer != NULL) {
            sl__resp_init(answer);
            sl__dispatch(p->server, job->rq, answer);
        }
        /* NULL: out of memory; the access handler hangs up */
        job->rq->answer = answer;
        job->rq->answer_ready = 1;
        /* after this the connection (and job->rq) belong to libmicrohttpd again */
        MHD_resume_connection(job->conn);
        free(job);
    }
}

int sl__pool_start(sl_server *s, unsigned nthreads, size_t cap, sl__pool **out)
{
    sl__pool *p = calloc(1, sizeof *p + nthreads * sizeof p->threads[0]);
    if (p == NULL)
        return SL_ENOMEM;
    p->server = s;
    p->cap = cap;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (unsigned i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            sl__pool_free(p);
            return SL_ENOMEM;
        }
        p->nthreads++;
    }
    *out = p;
    return SL_OK;
}

int sl__pool_submit(sl__pool *p, struct MHD_Connection *conn, sl__req *rq)
{
    sl__job *job = malloc(sizeof *job);
    if (job == NULL)
        return SL_ENOMEM;
    job->next = NULL;
    job->conn = conn;
    job->rq = rq;
    pthread_mutex_lock(&p->lock);
    if (p->stopping || p->queued >= p->cap) {
        pthread_mutex_unlock(&p->lock);
        free(job);
        return SL_EBUSY;
    }
    /* suspended under the lock: no worker can resume it before it is suspended */
    MHD_suspend_connection(conn);
    if (p->tail != NULL)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    p->queued++;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return SL_OK;
}

void sl__pool_stop(sl__pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
}

void sl__pool_free(sl__pool *p)
{
    if (p == NULL)
        return;
    sl__pool_stop(p);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}
