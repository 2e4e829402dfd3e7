/*
 * backend.h - the store's backend interface (internal to storage/).
 *
 * starling/store.h is one API over two databases: SQLite (the files in storage/, the
 * embedded default) and PostgreSQL (storage/pg/, for replicas sharing one
 * database). Every backend's store object begins with an sl__store_head
 * whose table holds one function per operation; storage/store.c validates
 * the arguments of every public call (so both backends refuse the same bad
 * input the same way) and then calls the backend through the table.
 * A backend function may assume its arguments passed those checks.
 *
 * Each operation keeps the contract written in starling/store.h: the same
 * results, the same idempotency, the same errors, whichever backend runs it.
 */
#ifndef STARLING_STORE_BACKEND_H
#define STARLING_STORE_BACKEND_H

#include "starling/store.h"

typedef struct sl__store_ops {
    const char *name; /* "sqlite", "postgresql" */
    void (*close)(sl_store *s);
    int (*schema_version)(sl_store *s, int *version);
    int (*enrol_device)(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                        int64_t *device_id);
    int (*set_device_disabled)(sl_store *s, int64_t device_id, int disabled);
    int (*get_device)(sl_store *s, int64_t device_id, sl_device_record *out);
    int (*touch_device)(sl_store *s, int64_t device_id);
    int (*create_task_docs)(sl_store *s, const char *name, const char *config_json,
                            const char *layout_text, const char *model_spec,
                            const char *data_contract, int64_t *task_id);
    int (*get_task)(sl_store *s, int64_t task_id, sl_task_record *out);
    int (*list_tasks)(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx);
    int (*set_refusal)(sl_store *s, int64_t task_id, int64_t device_id, const char *reason);
    int (*list_refusals)(sl_store *s, int64_t task_id, int64_t device_id,
                         int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                   const char *reason, int64_t at_ms),
                         void *ctx);
    int (*put_eval)(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev);
    int (*round_eval)(sl_store *s, int64_t round_id, sl_store_eval_sum *out);
    int (*last_eval)(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out);
    int (*audit)(sl_store *s, const char *actor, const char *action, const char *detail);
    int (*count_audit)(sl_store *s, uint64_t *count);
    int (*probe_write)(sl_store *s);
    int (*count_devices)(sl_store *s, uint64_t *count);
    int (*list_devices)(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                        int (*fn)(void *ctx, const sl_device_summary *d), void *ctx);
    int (*list_reporters)(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                          void *ctx);
    int (*put_model)(sl_store *s, const sl_model_put *m);
    /* @info: the record without its bytes, retired or not (else SL_ENOENT when retired) */
    int (*get_model)(sl_store *s, int64_t task_id, int64_t version, int info, sl_model_record *out);
    int (*set_model_metrics)(sl_store *s, int64_t task_id, int64_t version, const char *metrics);
    int (*retain_models)(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                         uint32_t *retired);
    int (*retain_updates)(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired);
    int (*create_round)(sl_store *s, sl_round_record *r);
    int (*update_round)(sl_store *s, const sl_round_record *r);
    int (*get_round)(sl_store *s, int64_t round_id, sl_round_record *out);
    int (*list_rounds)(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                       int (*fn)(void *ctx, const sl_round_record *r), void *ctx);
    int (*unfinished_rounds)(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r),
                             void *ctx);
    int (*close_round)(sl_store *s, const sl_round_record *r, const sl_model_put *m);
    int (*set_participant)(sl_store *s, int64_t round_id, int64_t device_id,
                           sl_participant_state state, const char *reason);
    int (*mark_participant)(sl_store *s, int64_t round_id, int64_t device_id,
                            sl_participant_state state, const char *reason);
    int (*select_participants)(sl_store *s, const sl_round_record *r, const int64_t *devices,
                               size_t n);
    int (*list_participants)(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const sl_participant_record *p), void *ctx);
    int (*put_update)(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                      sl_store_receipt *out);
    int (*get_receipt)(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                       sl_store_receipt *out);
    int (*count_updates)(sl_store *s, int64_t round_id, uint64_t *count);
    int (*foreach_update)(sl_store *s, int64_t round_id,
                          int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                    uint32_t num_samples, const uint8_t *sha256),
                          void *ctx);
    int (*create_upload)(sl_store *s, const sl_upload_record *r);
    int (*get_upload)(sl_store *s, const char *id, sl_upload_record *out);
    int (*append_upload)(sl_store *s, const char *id, uint64_t offset, const void *data, size_t len,
                         int64_t timeout_ms, uint64_t *new_offset);
    int (*read_upload)(sl_store *s, const char *id, void **out, size_t *len);
    int (*finish_upload)(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out);
    int (*delete_upload)(sl_store *s, const char *id);
    int (*expire_uploads)(sl_store *s, uint32_t *deleted);
    int (*session_secret)(sl_store *s, int rotate, uint32_t *epoch,
                          uint8_t secret[SL_STORE_SECRET_LEN]);
    int (*session_secret_of)(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN]);
    int (*put_session)(sl_store *s, const sl_store_session *rec);
    int (*list_sessions)(sl_store *s, int64_t device_id, int64_t now_ms,
                         int (*fn)(void *ctx, const sl_store_session *rec), void *ctx);
    int (*revoke_sessions)(sl_store *s, int64_t device_id, const char *id, uint64_t *count);
    int (*backup)(sl_store *s, const char *dest_path);
    int (*lead)(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch);
    int (*leader)(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms);
    int (*resign)(sl_store *s, const char *owner);
    int (*put_checkin)(sl_store *s, int64_t task_id, int64_t device_id);
    int (*put_pace)(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p);
    int (*report_delays)(sl_store *s, int64_t task_id, int64_t after_round_no,
                         int (*fn)(void *ctx, int64_t delay_ms), void *ctx);
    int (*device_history)(sl_store *s, int64_t task_id, int64_t before_round_no,
                          int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                    uint32_t reported, int64_t last_round_no),
                          void *ctx);
    int (*get_pace)(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out);
    int (*device_rounds)(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                         uint32_t *out);
    int (*list_steps)(sl_store *s, int64_t round_id,
                      int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx);
    int (*list_checkins)(sl_store *s, int64_t task_id, int64_t since_ms,
                         int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx);
    int (*put_partial)(sl_store *s, int64_t round_id, const char *replica, const void *data,
                       size_t len, const int64_t *devices, size_t n);
    int (*foreach_partial)(sl_store *s, int64_t round_id,
                           int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                     const int64_t *devices, size_t n),
                           void *ctx);
    int (*device_history_of)(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                             int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                       uint32_t reported, int64_t last_round_no),
                             void *ctx);
    int (*get_paces)(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                     int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace), void *ctx);
    int (*put_downloads)(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                         const int64_t *devices, size_t n);
    int (*foreach_downloads)(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                       const int64_t *devices, size_t n),
                             void *ctx);
} sl__store_ops;

/* The first member of every backend's store. */
typedef struct sl__store_head {
    const sl__store_ops *ops;
} sl__store_head;

/* The SQLite backend (storage/db.c). */
extern const sl__store_ops sl__sqlite_ops;
int sl__sq_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap);

/* The PostgreSQL backend (storage/pg/), where it is built (SL_HAVE_PG). */
#ifdef SL_HAVE_PG
int sl__pg_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap);
int sl__pg_migrate_from(const char *from_path, sl_store *to, uint64_t *rows, char *err,
                        size_t errcap);
#endif

/* Argument checks shared by store.c and the backends (store.c). */
int sl__model_put_valid(const sl_model_put *m);
int sl__round_valid(const sl_round_record *r);
int sl__upload_id_ok(const char *id);

/* What sl_store_lead() does, given the leader row (@have_row 0: none yet) and the epoch
 * this store leads with (@fence, 0: none). Shared by both backends (store.c). */
typedef enum sl__lead_action { SL__LEAD_BUSY, SL__LEAD_RENEW, SL__LEAD_TAKE } sl__lead_action;
sl__lead_action sl__lead_decide(int have_row, const char *row_owner, uint64_t row_epoch,
                                int64_t row_expires_ms, int64_t now_ms, const char *owner,
                                uint64_t fence);

/* A partial's device list as stored: little-endian int64s (store.c). @out malloc'd. */
int sl__devices_encode(const int64_t *devices, size_t n, uint8_t **out, size_t *len);
/* Back: SL_ECORRUPT when @len is not a multiple of 8. @out malloc'd (NULL when n is 0). */
int sl__devices_decode(const void *data, size_t len, int64_t **out, size_t *n);

/* Replicas' download records of a closed round, summed (devlist.c): both backends' settling of
 * the round's bytes_down and downloads after a replica's last write (sl_store_put_downloads). */
typedef struct sl__dl_tally {
    uint64_t bytes; /* every record's bytes, at most INT64_MAX */
    int64_t *ids;   /* every record's devices, repeats included */
    size_t n, cap;
} sl__dl_tally;
void sl__dl_tally_init(sl__dl_tally *t);
/* One record: @bytes and its stored device list (@devices, @len). SL_ECORRUPT, SL_ENOMEM. */
int sl__dl_tally_add(sl__dl_tally *t, int64_t bytes, const void *devices, size_t len);
/* The distinct devices over the records added (sorts @t's ids). */
size_t sl__dl_tally_devices(sl__dl_tally *t);
void sl__dl_tally_free(sl__dl_tally *t);

/* The largest upload or update frame, bytes. */
#define SL__MAX_UPLOAD (256ull << 20)

#endif /* STARLING_STORE_BACKEND_H */
