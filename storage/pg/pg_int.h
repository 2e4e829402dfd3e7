/*
 * pg_int.h - internals of the store's PostgreSQL backend (backend.h).
 *
 * One sl__pg per process: a pool of libpq connections (one per concurrent
 * caller, up to the options' readers + 4), each used by one thread at a
 * time. Every operation runs as one transaction through sl__pg_tx(): a
 * function of (store, connection, argument) that issues its statements
 * with sl__pg_exec() and returns a status. The transaction is retried
 * (from its start, on a fresh connection when the old one broke) after a
 * lost connection, a serialization failure or a deadlock until the caller's
 * deadline, and up to 3 times after a unique violation (two replicas
 * inserting the same idempotent row: the next attempt reads the row the
 * other one committed; a body may also answer SL_ECONFLICT itself, which is
 * never retried): every write of the store is idempotent (store.h), so a retry
 * of a transaction whose COMMIT was sent but not answered is safe.
 *
 * Results come back in binary format (bytea as raw bytes, no unescaping);
 * sl__pg_int() and sl__pg_double() read int2/int4/int8 and float8 columns
 * in network byte order. Cast aggregates in SQL (count(*)::bigint,
 * sum(...)::float8): numeric results are not decoded.
 *
 * Layers, bottom to top (a file calls only into the layers below it:
 * .ci/check_layers.py): pg_db.c (connections, transactions, parameters,
 * column readers); pg_schema.c, pg_meta.c, pg_sessions.c, pg_models.c,
 * pg_updates.c, pg_lead.c, pg_fleet.c, pg_migrate.c (the operations);
 * pg_rounds.c (rounds, closing one with its model); pg_store.c (open, close,
 * the table of operations).
 */
#ifndef STARLING_STORE_PG_INT_H
#define STARLING_STORE_PG_INT_H

#include <pthread.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "../backend.h"

typedef struct sl__pgconn {
    PGconn *conn;
    int in_use;
} sl__pgconn;

typedef struct sl__pg {
    sl__store_head base; /* first: the backend table */
    sl_store_options opt;
    char *conninfo;
    pthread_mutex_t lock;
    pthread_cond_t free_c; /* a connection came back */
    sl__pgconn *conns;
    uint32_t nconns;
    uint64_t fence;   /* under lock: the leader epoch round writes carry (0: none) */
    uint64_t retries; /* under lock: transactions retried (tests) */
} sl__pg;

/* A statement's parameters, in order ($1, $2, ...). */
#define SL__PG_MAXP 24
typedef struct sl__pgq {
    int n;
    const char *val[SL__PG_MAXP];
    int len[SL__PG_MAXP];
    int fmt[SL__PG_MAXP]; /* 0 text, 1 binary */
    char num[SL__PG_MAXP][32];
} sl__pgq;

/* Append a parameter: an integer, a double (NaN: NULL), text (NULL: NULL), bytes (binary). */
void sl__pgq_int(sl__pgq *q, int64_t v);
void sl__pgq_double(sl__pgq *q, double v);
void sl__pgq_text(sl__pgq *q, const char *t);
void sl__pgq_bytes(sl__pgq *q, const void *p, size_t n);

/* The backend's transaction body. */
typedef int (*sl__pg_fn)(sl__pg *p, PGconn *c, void *arg);

/*
 * sl__pg_tx - run @fn in one transaction (BEGIN ... COMMIT; ROLLBACK when
 * @fn fails) on a pooled connection, retrying as the header says until
 * @timeout_ms passes (SL_ETIMEDOUT then). @readonly: a READ ONLY
 * REPEATABLE READ transaction (one snapshot for every statement).
 */
int sl__pg_tx(sl__pg *p, int readonly, int64_t timeout_ms, sl__pg_fn fn, void *arg);

/* A new connection to @conninfo (pg_db.c); NULL with the reason in @err. */
PGconn *sl__pg_connect(const char *conninfo, char *err, size_t cap);

/*
 * sl__pg_exec - run @sql with @q (NULL: no parameters); binary results.
 * Returns SL_OK with *@out the result (the caller PQclear()s it; may be NULL
 * when not wanted) or the status the error maps to (sl__pg_status()); the
 * transaction-level retry decisions are sl__pg_tx()'s.
 */
int sl__pg_exec(PGconn *c, const char *sql, const sl__pgq *q, PGresult **out);

/* sl__pg_script - run @sql, one or more statements without parameters or wanted rows (the
 * schema's steps, session settings); SL_OK or the status of the error. */
int sl__pg_script(PGconn *c, const char *sql);

/* The status of a failed result: SQLSTATE 23505 SL_ECONFLICT, 23503 SL_ENOENT,
 * 53100 SL_ENOSPC, 57014 SL_ETIMEDOUT, 22xxx SL_EINVAL, 40001/40P01/08xxx and
 * a broken connection SL_EBUSY (sl__pg_tx() retries those), others SL_EIO. */
int sl__pg_status(PGconn *c, const PGresult *r);

/* Column readers (binary results). NULL reads as 0, NaN, "" or no bytes. */
int64_t sl__pg_int(const PGresult *r, int row, int col);
double sl__pg_double(const PGresult *r, int row, int col);
int sl__pg_isnull(const PGresult *r, int row, int col);
/* Copy text into a fixed buffer (cut to fit); malloc'd copy (NULL for SQL NULL). */
void sl__pg_copy_text(const PGresult *r, int row, int col, char *dst, size_t cap);
int sl__pg_dup_text(const PGresult *r, int row, int col, char **out);
/* malloc'd copy of a bytea column (NULL, 0 for SQL NULL). */
int sl__pg_dup_bytes(const PGresult *r, int row, int col, void **out, size_t *len);

/* Rows changed by the result's command (UPDATE/DELETE/INSERT). */
uint64_t sl__pg_changes(const PGresult *r);

/* The store's clock in ms (opt.clock; the system clock when NULL). */
int64_t sl__pg_now_ms(const sl__pg *p);

/* The backend's operations (backend.h): pg_db.c, pg_meta.c (devices, tasks, refusals,
 * evaluations, audit, probe), pg_sessions.c, pg_models.c, pg_rounds.c, pg_updates.c. */
int sl__pg_schema_version(sl_store *s, int *version);
int sl__pg_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                        int64_t *device_id);
int sl__pg_set_device_disabled(sl_store *s, int64_t device_id, int disabled);
int sl__pg_get_device(sl_store *s, int64_t device_id, sl_device_record *out);
int sl__pg_touch_device(sl_store *s, int64_t device_id);
int sl__pg_create_task_docs(sl_store *s, const char *name, const char *config_json,
                            const char *layout_text, const char *model_spec,
                            const char *data_contract, int64_t *task_id);
int sl__pg_get_task(sl_store *s, int64_t task_id, sl_task_record *out);
int sl__pg_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx);
int sl__pg_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason);
int sl__pg_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                         int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                   const char *reason, int64_t at_ms),
                         void *ctx);
int sl__pg_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev);
int sl__pg_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out);
int sl__pg_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out);
int sl__pg_audit(sl_store *s, const char *actor, const char *action, const char *detail);
int sl__pg_count_audit(sl_store *s, uint64_t *count);
int sl__pg_probe_write(sl_store *s);
int sl__pg_count_devices(sl_store *s, uint64_t *count);
int sl__pg_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                        int (*fn)(void *ctx, const sl_device_summary *d), void *ctx);
int sl__pg_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                          void *ctx);
int sl__pg_put_model(sl_store *s, const sl_model_put *m);
int sl__pg_get_model(sl_store *s, int64_t task_id, int64_t version, int info, sl_model_record *out);
int sl__pg_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics);
int sl__pg_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                         uint32_t *retired);
int sl__pg_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired);
int sl__pg_create_round(sl_store *s, sl_round_record *r);
int sl__pg_update_round(sl_store *s, const sl_round_record *r);
int sl__pg_get_round(sl_store *s, int64_t round_id, sl_round_record *out);
int sl__pg_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                       int (*fn)(void *ctx, const sl_round_record *r), void *ctx);
int sl__pg_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r),
                             void *ctx);
int sl__pg_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m);
int sl__pg_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                            sl_participant_state state, const char *reason);
int sl__pg_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                           sl_participant_state state, const char *reason);
int sl__pg_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                               size_t n);
int sl__pg_list_participants(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const sl_participant_record *p), void *ctx);
int sl__pg_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                      sl_store_receipt *out);
int sl__pg_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                       sl_store_receipt *out);
int sl__pg_count_updates(sl_store *s, int64_t round_id, uint64_t *count);
int sl__pg_foreach_update(sl_store *s, int64_t round_id,
                          int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                    uint32_t num_samples, const uint8_t *sha256),
                          void *ctx);
int sl__pg_create_upload(sl_store *s, const sl_upload_record *r);
int sl__pg_get_upload(sl_store *s, const char *id, sl_upload_record *out);
int sl__pg_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data, size_t len,
                         int64_t timeout_ms, uint64_t *new_offset);
int sl__pg_read_upload(sl_store *s, const char *id, void **out, size_t *len);
int sl__pg_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out);
int sl__pg_delete_upload(sl_store *s, const char *id);
int sl__pg_expire_uploads(sl_store *s, uint32_t *retired);
int sl__pg_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                          uint8_t secret[SL_STORE_SECRET_LEN]);
int sl__pg_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN]);
int sl__pg_put_session(sl_store *s, const sl_store_session *rec);
int sl__pg_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                         int (*fn)(void *ctx, const sl_store_session *rec), void *ctx);
int sl__pg_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count);
int sl__pg_backup(sl_store *s, const char *dest_path);
int sl__pg_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch);
int sl__pg_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms);
int sl__pg_resign(sl_store *s, const char *owner);
int sl__pg_put_checkin(sl_store *s, int64_t task_id, int64_t device_id);
int sl__pg_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p);
int sl__pg_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                         int (*fn)(void *ctx, int64_t delay_ms), void *ctx);
int sl__pg_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                         uint32_t *out);
int sl__pg_device_history(sl_store *s, int64_t task_id, int64_t before_round_no,
                          int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                    uint32_t reported, int64_t last_round_no),
                          void *ctx);
int sl__pg_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out);
int sl__pg_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                             int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                       uint32_t reported, int64_t last_round_no),
                             void *ctx);
int sl__pg_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                     int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace), void *ctx);
int sl__pg_list_steps(sl_store *s, int64_t round_id,
                      int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx);
int sl__pg_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                       size_t len, const int64_t *devices, size_t n);
int sl__pg_foreach_partial(sl_store *s, int64_t round_id,
                           int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                     const int64_t *devices, size_t n),
                           void *ctx);
int sl__pg_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                         const int64_t *devices, size_t n);
int sl__pg_foreach_downloads(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx);
int sl__pg_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                         int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx);
/* pg_migrate.c: sl_store_migrate() into the open PostgreSQL store @to. */
int sl__pg_migrate_from(const char *from_path, sl_store *to, uint64_t *rows, char *err,
                        size_t errcap);

/* Shared inside transactions: a model version (pg_models.c), an update (pg_updates.c). */
int sl__pg_put_model_exec(sl__pg *p, PGconn *c, const sl_model_put *m);
int sl__pg_put_update_exec(sl__pg *p, PGconn *c, const sl_update_put *u, sl_store_receipt *out);

/* pg_rounds.c: SL_OK when this process holds no fence or the leader row still holds its
 * epoch (the row is share-locked until the transaction ends), SL_EFENCED when a newer
 * leader took over. Every write of a round's record calls it first. */
int sl__pg_fenced(sl__pg *p, PGconn *c);

/* A list operation's body calls the caller's fn only after its query succeeded, records a
 * non-zero answer of fn and returns SL_OK (the answer is passed back as it is, never taken
 * for a retryable error). */

/* Default wait for writes whose API takes no timeout. */
#define SL__PG_TIMEOUT_MS 30000

#endif /* STARLING_STORE_PG_INT_H */
