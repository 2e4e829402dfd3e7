/*
 * store_int.h - internals shared by the files of libstarling-storage.
 *
 * The SQLite backend's layers, bottom to top (a file calls only into the
 * layers below it: .ci/check_layers.py): db.c (connections, statements,
 * readers, column helpers) and devlist.c (a partial sum's device list, both
 * backends'); writer.c, schema.c (the writer thread and group
 * commit, migrations); meta.c, sessions.c, models.c, updates.c, lead.c,
 * fleet.c, backup.c (the operations); rounds.c (rounds, closing one with its
 * model); sqlite.c (open, close, the table of operations); store.c (the
 * public API over either backend's table).
 */
#ifndef STARLING_STORE_INT_H
#define STARLING_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>

#include "backend.h"

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
    sl__store_head base; /* first: the backend table (backend.h) */
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
    int backups;              /* under lock: backups holding their read snapshot (backup.c) */
    uint64_t fence;           /* under lock: the leader epoch round writes carry (lead.c) */
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

/* updates.c: also used by sl_store_finish_upload() */
int sl__put_update_exec(sl_store *s, sl__conn *c, const sl_update_put *u, sl_store_receipt *out);

/* Tests: called by the writer thread after every durable commit (NULL: none).
 * The crash tests use it to kill a process right after a transition. */
extern void (*sl__store_commit_hook)(void);
/* Tests: called now and then while a backup's copy runs, its snapshot held (backup.c). */
extern void (*sl__store_backup_hook)(void);

/* The backend's operations (backend.h), one per public function of starling/store.h. */
void sl__sq_close(sl_store *s);
int sl__sq_schema_version(sl_store *s, int *version);
int sl__sq_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                        int64_t *device_id);
int sl__sq_set_device_disabled(sl_store *s, int64_t device_id, int disabled);
int sl__sq_get_device(sl_store *s, int64_t device_id, sl_device_record *out);
int sl__sq_touch_device(sl_store *s, int64_t device_id);
int sl__sq_create_task_docs(sl_store *s, const char *name, const char *config_json,
                            const char *layout_text, const char *model_spec,
                            const char *data_contract, int64_t *task_id);
int sl__sq_get_task(sl_store *s, int64_t task_id, sl_task_record *out);
int sl__sq_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx);
int sl__sq_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason);
int sl__sq_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                         int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                   const char *reason, int64_t at_ms),
                         void *ctx);
int sl__sq_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev);
int sl__sq_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out);
int sl__sq_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out);
int sl__sq_audit(sl_store *s, const char *actor, const char *action, const char *detail);
int sl__sq_count_audit(sl_store *s, uint64_t *count);
int sl__sq_probe_write(sl_store *s);
int sl__sq_count_devices(sl_store *s, uint64_t *count);
int sl__sq_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                        int (*fn)(void *ctx, const sl_device_summary *d), void *ctx);
int sl__sq_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                          void *ctx);
int sl__sq_put_model(sl_store *s, const sl_model_put *m);
int sl__sq_get_model(sl_store *s, int64_t task_id, int64_t version, int info, sl_model_record *out);
int sl__sq_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics);
int sl__sq_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                         uint32_t *retired);
int sl__sq_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired);
int sl__sq_create_round(sl_store *s, sl_round_record *r);
int sl__sq_update_round(sl_store *s, const sl_round_record *r);
int sl__sq_get_round(sl_store *s, int64_t round_id, sl_round_record *out);
int sl__sq_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                       int (*fn)(void *ctx, const sl_round_record *r), void *ctx);
int sl__sq_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r),
                             void *ctx);
int sl__sq_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m);
int sl__sq_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                            sl_participant_state state, const char *reason);
int sl__sq_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                           sl_participant_state state, const char *reason);
int sl__sq_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                               size_t n);
int sl__sq_list_participants(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const sl_participant_record *p), void *ctx);
int sl__sq_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                      sl_store_receipt *out);
int sl__sq_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                       sl_store_receipt *out);
int sl__sq_count_updates(sl_store *s, int64_t round_id, uint64_t *count);
int sl__sq_foreach_update(sl_store *s, int64_t round_id,
                          int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                    uint32_t num_samples, const uint8_t *sha256),
                          void *ctx);
int sl__sq_create_upload(sl_store *s, const sl_upload_record *r);
int sl__sq_get_upload(sl_store *s, const char *id, sl_upload_record *out);
int sl__sq_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data, size_t len,
                         int64_t timeout_ms, uint64_t *new_offset);
int sl__sq_read_upload(sl_store *s, const char *id, void **out, size_t *len);
int sl__sq_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out);
int sl__sq_delete_upload(sl_store *s, const char *id);
int sl__sq_expire_uploads(sl_store *s, uint32_t *retired);
int sl__sq_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                          uint8_t secret[SL_STORE_SECRET_LEN]);
int sl__sq_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN]);
int sl__sq_put_session(sl_store *s, const sl_store_session *rec);
int sl__sq_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                         int (*fn)(void *ctx, const sl_store_session *rec), void *ctx);
int sl__sq_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count);
int sl__sq_backup(sl_store *s, const char *dest_path);
int sl__sq_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch);
int sl__sq_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms);
int sl__sq_resign(sl_store *s, const char *owner);
int sl__sq_put_checkin(sl_store *s, int64_t task_id, int64_t device_id);
int sl__sq_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p);
int sl__sq_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                         int (*fn)(void *ctx, int64_t delay_ms), void *ctx);
int sl__sq_device_history(sl_store *s, int64_t task_id, int64_t before_round_no,
                          int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                    uint32_t reported, int64_t last_round_no),
                          void *ctx);
int sl__sq_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out);
int sl__sq_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                             int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                       uint32_t reported, int64_t last_round_no),
                             void *ctx);
int sl__sq_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                     int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace), void *ctx);
int sl__sq_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                         uint32_t *out);
int sl__sq_list_steps(sl_store *s, int64_t round_id,
                      int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx);
int sl__sq_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                       size_t len, const int64_t *devices, size_t n);
int sl__sq_foreach_partial(sl_store *s, int64_t round_id,
                           int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                     const int64_t *devices, size_t n),
                           void *ctx);
int sl__sq_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                         const int64_t *devices, size_t n);
int sl__sq_foreach_downloads(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx);
int sl__sq_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                         int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx);
/* lead.c: SL_OK, or SL_EFENCED when a newer leader took over; every round write calls it. */
int sl__sq_fenced(sl_store *s, sl__conn *c);

/* Default wait for writes whose API takes no timeout. */
#define SL__WRITE_TIMEOUT_MS 30000

#endif /* STARLING_STORE_INT_H */
