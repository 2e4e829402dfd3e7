/*
 * writer.c - the single writer and its group commit.
 *
 * Callers queue a write and wait. The writer thread takes everything queued
 * (up to max_batch), runs each write in its own savepoint inside one
 * transaction, commits once (one fsync under synchronous=FULL) and wakes
 * the callers. Writes that queue up while a commit is on disk go together
 * into the next transaction, so the fsync cost is shared by all of them.
 */
#include <errno.h>
#include <time.h>

#include "store_int.h"

enum { QUEUED = 0, IN_FLIGHT = 1, DONE = 2 };

void (*sl__store_commit_hook)(void);

/*
 * Checkpoints, mostly off the writer's path. When the WAL has grown past
 * checkpoint_pages, the checkpointer thread runs a PASSIVE checkpoint on its
 * own connection: it copies the WAL into the database (and syncs that file)
 * while the writer goes on committing, as WAL mode allows. The WAL is
 * rewound only by a transaction that begins when every frame was copied,
 * which a busy writer seldom sees; so once the checkpointer has caught up,
 * the writer copies the few frames committed since (a PASSIVE checkpoint of
 * its own, between two transactions) and its next transaction rewinds it.
 * If the WAL still reaches four times the mark (long readers), the writer
 * runs a RESTART checkpoint, which waits for the readers up to the busy
 * timeout: back-pressure, so the WAL cannot grow without bound. Not while a
 * backup holds its snapshot (backup.c): that reader ends on its own, and
 * waiting for it would hold every commit (every acknowledgement) up to the
 * busy timeout, commit after commit, for as long as the copy takes.
 */
static void *checkpointer_main(void *arg)
{
    sl_store *s = arg;
    uint64_t done_at = 0; /* the WAL's pages when the last checkpoint started */
    pthread_setname_np(pthread_self(), "sl-store-ckpt"); /* for top -H and perf */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int log = -1, copied = -1, rc;
        /* nothing to do: below the mark, nothing new, caught up (the writer finishes), or far
         * past the mark (the writer's RESTART, which another checkpoint would only hold up) */
        while (!s->stop && (s->ckpt_pages < s->opt.checkpoint_pages || s->ckpt_pages == done_at ||
                            s->ckpt_caught_up || s->ckpt_pages >= 4ull * s->opt.checkpoint_pages))
            pthread_cond_wait(&s->ckpt_work, &s->lock);
        if (s->stop)
            break;
        done_at = s->ckpt_pages;
        s->ckpt_running = 1;
        pthread_mutex_unlock(&s->lock);
        rc = sqlite3_wal_checkpoint_v2(s->ckpt.db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
        pthread_mutex_lock(&s->lock);
        s->ckpt_running = 0;
        pthread_cond_broadcast(&s->ckpt_idle);
        s->checkpoints++;
        if (rc == SQLITE_OK && log > 0 && copied == log)
            s->ckpt_caught_up = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* After a commit: finish the checkpointer's work, or wake it (see above). */
static void after_commit(sl_store *s)
{
    uint64_t pages;
    int caught_up, restart;
    pthread_mutex_lock(&s->lock);
    pages = s->ckpt_pages = s->wal_pages;
    caught_up = s->ckpt_caught_up;
    restart = pages >= 4ull * s->opt.checkpoint_pages && s->backups == 0;
    /* far past the mark: let the checkpointer's copy end (it starts no other now), or the
     * RESTART below would find it busy and the WAL would grow meanwhile */
    while (restart && s->ckpt_running)
        pthread_cond_wait(&s->ckpt_idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (restart) {
        /* SQLITE_BUSY when readers hold on past the busy timeout: the next commit tries again */
        if (sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_RESTART, NULL, NULL) ==
            SQLITE_OK)
            pages = 0;
    } else if (caught_up) {
        (void)sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    }
    pthread_mutex_lock(&s->lock);
    s->ckpt_caught_up = 0;
    if (pages >= s->opt.checkpoint_pages)
        pthread_cond_signal(&s->ckpt_work);
    pthread_mutex_unlock(&s->lock);
}

static void run_batch(sl_store *s, sl__wop *batch)
{
    int rc = sl__exec(&s->writer, "BEGIN IMMEDIATE");
    int any_ok = 0;

    for (sl__wop *op = batch; op != NULL; op = op->next) {
        if (rc != SL_OK) {
            op->result = rc;
            continue;
        }
        /* one savepoint per write: a write that fails leaves the others alone */
        op->result = sl__exec(&s->writer, "SAVEPOINT w");
        if (op->result == SL_OK) {
            op->result = op->exec(s, &s->writer, op->arg);
            if (op->result != SL_OK)
                sl__exec(&s->writer, "ROLLBACK TO w");
            if (sl__exec(&s->writer, "RELEASE w") != SL_OK && op->result == SL_OK)
                op->result = SL_EIO;
        }
        any_ok |= op->result == SL_OK;
    }
    if (rc == SL_OK) {
        rc = any_ok ? sl__exec(&s->writer, "COMMIT") : sl__exec(&s->writer, "ROLLBACK");
        if (rc != SL_OK) {
            /* not durable: nobody in this batch may hear "ok" */
            if (!sqlite3_get_autocommit(s->writer.db))
                sl__exec(&s->writer, "ROLLBACK");
            for (sl__wop *op = batch; op != NULL; op = op->next)
                if (op->result == SL_OK)
                    op->result = rc;
        } else if (any_ok) {
            s->commits++;
            if (sl__store_commit_hook != NULL)
                sl__store_commit_hook();
        }
    }
    if (rc == SL_OK && any_ok)
        after_commit(s);
}

static void *writer_main(void *arg)
{
    sl_store *s = arg;

    pthread_setname_np(pthread_self(), "sl-store-writer"); /* for top -H and perf */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        sl__wop *batch, *last;
        uint32_t n = 1;

        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->work, &s->lock);
        if (s->head == NULL) /* stop, and nothing left to write */
            break;
        batch = last = s->head;
        batch->state = IN_FLIGHT;
        while (last->next != NULL && n < s->opt.max_batch) {
            last = last->next;
            last->state = IN_FLIGHT;
            n++;
        }
        s->head = last->next;
        if (s->head == NULL)
            s->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->lock);

        run_batch(s, batch);

        pthread_mutex_lock(&s->lock);
        for (sl__wop *op = batch, *next; op != NULL; op = next) {
            next = op->next; /* the caller may reuse op as soon as it sees DONE */
            op->state = DONE;
            pthread_cond_signal(&op->done); /* under the lock: op outlives the signal */
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int sl__writer_start(sl_store *s)
{
    int rc = sl__conn_open(s, &s->ckpt, 0);
    if (rc != SL_OK)
        return rc;
    if (pthread_create(&s->ckpt_thread, NULL, checkpointer_main, s) != 0)
        return SL_ENOMEM;
    s->ckpt_started = 1;
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0)
        return SL_ENOMEM;
    s->thread_started = 1;
    return SL_OK;
}

void sl__writer_stop(sl_store *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->work);
    pthread_cond_signal(&s->ckpt_work);
    pthread_mutex_unlock(&s->lock);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    if (s->ckpt_started)
        pthread_join(s->ckpt_thread, NULL);
    s->thread_started = s->ckpt_started = 0;
    if (s->ckpt.db != NULL)
        sl__conn_close(&s->ckpt);
}

static void deadline_after(int64_t ms, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int sl__write(sl_store *s, sl__write_fn fn, void *arg, int64_t timeout_ms)
{
    sl__wop op = {.exec = fn, .arg = arg, .result = SL_OK, .state = QUEUED, .next = NULL};
    struct timespec until;
    int rc;

    if (timeout_ms <= 0)
        timeout_ms = 1;
    deadline_after(timeout_ms, &until);
    pthread_cond_init(&op.done, NULL);
    pthread_mutex_lock(&s->lock);
    if (s->stop) {
        pthread_mutex_unlock(&s->lock);
        pthread_cond_destroy(&op.done);
        return SL_ESTATE;
    }
    if (s->tail != NULL)
        s->tail->next = &op;
    else
        s->head = &op;
    s->tail = &op;
    pthread_cond_signal(&s->work);
    while (op.state != DONE) {
        int w = op.state == QUEUED ? pthread_cond_timedwait(&op.done, &s->lock, &until)
                                   : pthread_cond_wait(&op.done, &s->lock);
        if (w == ETIMEDOUT && op.state == QUEUED) {
            /* still waiting for its turn: take it out, nothing was written */
            sl__wop **pp = &s->head, *prev = NULL;
            while (*pp != &op) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            *pp = op.next;
            if (s->tail == &op)
                s->tail = prev;
            pthread_mutex_unlock(&s->lock);
            pthread_cond_destroy(&op.done);
            return SL_ETIMEDOUT;
        }
        /* in flight: its transaction is on its way to disk; wait for the outcome,
         * since the writer still uses op and its arguments */
    }
    rc = op.result;
    pthread_mutex_unlock(&s->lock);
    pthread_cond_destroy(&op.done);
    return rc;
}
