/*
 * store_int.h - internals shared by the files of libstarling-storage.
 */
#ifndef STARLING_STORE_INT_H
#define STARLING_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>

#include "starling/store.h"

/* A connection with its cache of prepared statements (keyed by the SQL
 * text's address: every statement is a string literal in storage/). */
#define SL__STMT_CACHE 64
typedef struct sl__conn {
    sqlite3 *db;
    size_t nstmt;
    struct {
        const char *sql;
        sqlite3_stmt *stmt;
    } cache[SL__STMT_CACHE];
    int in_use; /* readers: taken from the pool */
} sl__conn;

/* One queued write. Lives on the caller's stack: the caller waits until
 * the writer has finished with it, or removes it from the queue itself. */
typedef int (*sl__write_fn)(sl_store *s, sl__conn *c, void *arg);
typedef struct sl__wop {
    sl__write_fn exec;
    void *arg;
    int result;
    int state;           /* 0 queued, 1 in flight, 2 done */
    pthread_cond_t done; /* signalled when state becomes done: only its caller wakes */
    struct sl__wop *next;
} sl__wop;

struct sl_store {
    sl_store_options opt;
    char *path;
    sl__conn writer;
    sl__conn *readers;
    uint32_t nreaders;
    pthread_mutex_t lock;
    pthread_cond_t work;    /* writer: something queued, or stop */
    pthread_cond_t free_rd; /* a reader connection came back */
    sl__wop *head, *tail;   /* the queue */
    int stop;
    pthread_t thread;
    int thread_started;
    uint64_t wal_pages; /* pages in the WAL after the last commit (wal hook; writer thread) */
    uint64_t commits;   /* transactions committed (tests, metrics) */
    /* the checkpointer (writer.c): its own connection and thread, so that copying the WAL
     * into the database (and that file's fsync) never holds up a commit */
    sl__conn ckpt;
    pthread_t ckpt_thread;
    int ckpt_started;
    pthread_cond_t ckpt_work; /* under lock: ckpt_pages changed, or stop */
    uint64_t ckpt_pages;      /* under lock: the WAL's pages at the last commit */
    uint64_t checkpoints;     /* under lock: checkpoints run (tests) */
    int ckpt_caught_up;       /* under lock: the last one copied every frame it saw */
    int ckpt_running;         /* under lock: the checkpointer is copying */
    pthread_cond_t ckpt_idle; /* under lock: ckpt_running went back to 0 */
};

/* db.c */
int sl__status_from_sqlite(int rc);
int sl__conn_open(sl_store *s, sl__conn *c, int readonly);

/* The device list's query (meta.c), for the test of its plan. */
extern const char sl__list_devices_sql[];
void sl__conn_close(sl__conn *c);
int sl__exec(sl__conn *c, const char *sql);
/* A cached statement, reset and with its bindings cleared. */
int sl__stmt(sl__conn *c, const char *sql, sqlite3_stmt **out);
int sl__reader_get(sl_store *s, sl__conn **out);
void sl__reader_put(sl_store *s, sl__conn *c);
int64_t sl__now_ms(const sl_store *s);
/* The first column of the first row of @sql as an integer, on a reader
 * connection, with ?1 bound to @arg when @nbind > 0. */
int sl__query_int64(sl_store *s, const char *sql, int nbind, int64_t arg, int64_t *out);
/* Copy a text column into a fixed buffer (cut to fit, NUL-terminated). */
void sl__copy_text(sqlite3_stmt *st, int col, char *dst, size_t cap);
/* malloc'd copy of a text column (NULL for SQL NULL); SL_ENOMEM. */
int sl__dup_text(sqlite3_stmt *st, int col, char **out);

/* schema.c */
int sl__migrate(sl__conn *c, char *err, size_t errcap);
/* Tests: create the tables of an older schema version only. */
int sl__schema_create_at(sl__conn *c, int version);

/* writer.c */
int sl__writer_start(sl_store *s);
void sl__writer_stop(sl_store *s);
/* Run @fn inside the writer's next transaction; wait until it is durable. */
int sl__write(sl_store *s, sl__write_fn fn, void *arg, int64_t timeout_ms);

/* models.c: also used by sl_store_close_round() inside its transaction */
int sl__put_model_exec(sl_store *s, sl__conn *c, const sl_model_put *m);
int sl__model_put_valid(const sl_model_put *m);

/* updates.c: also used by sl_store_finish_upload() */
int sl__put_update_exec(sl_store *s, sl__conn *c, const sl_update_put *u, sl_store_receipt *out);

/* Tests: called by the writer thread after every durable commit (NULL: none).
 * The crash tests use it to kill a process right after a transition. */
extern void (*sl__store_commit_hook)(void);

/* Default wait for writes whose API takes no timeout. */
#define SL__WRITE_TIMEOUT_MS 30000

#endif /* STARLING_STORE_INT_H */
