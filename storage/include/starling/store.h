/*
 * starling/store.h - the coordinator's crash-safe store (SQLite).
 *
 * One database file holds tasks, model versions, rounds, participants,
 * devices, acknowledged updates, resumable upload sessions and an audit
 * log. No SQL exists outside storage/: callers use these typed functions.
 *
 * Durability: every write goes through one writer thread that commits in
 * WAL mode with synchronous=FULL. Callers block until the transaction that
 * holds their write is durable (or their timeout passes): many concurrent
 * writes share one fsync (group commit). A function that returns SL_OK for
 * a write has made it durable; no other return value means durable, but a
 * write whose caller timed out (SL_ETIMEDOUT) or saw an I/O error may still
 * have committed: every write is idempotent, so the caller retries.
 * Reads use their own connections and never wait for the writer.
 *
 * Thread safety: every function may be called from any thread. Functions
 * that write block (on the writer and on disk); reads block on disk only.
 * Errors: SL_EIO, SL_ENOSPC (disk full), SL_ECORRUPT (a damaged database),
 * SL_EBUSY (locked by another process beyond the busy timeout),
 * SL_ETIMEDOUT, SL_ENOENT (no such row), SL_EINVAL, SL_ENOMEM; others as
 * noted. Outputs are untouched on error.
 */
#ifndef STARLING_STORE_H
#define STARLING_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The schema version this build writes. Older databases are migrated. */
#define SL_STORE_SCHEMA_VERSION 15

/** What to verify when opening. */
typedef enum sl_store_check {
    SL_STORE_CHECK_NONE = 0,
    SL_STORE_CHECK_QUICK = 1, /* PRAGMA quick_check (default) */
    SL_STORE_CHECK_FULL = 2   /* PRAGMA integrity_check */
} sl_store_check;

/** Options of sl_store_open(); sl_store_options_default() fills them. */
typedef struct sl_store_options {
    const char *path;          /* the database file (created when missing) */
    sl_store_check check;      /* at open */
    int64_t busy_timeout_ms;   /* waiting for another process's lock (default 5000) */
    uint32_t max_batch;        /* group commit: most writes per transaction (default 512) */
    uint32_t readers;          /* reader connections (default 4) */
    uint32_t checkpoint_pages; /* WAL size that triggers a checkpoint (default 1000) */
    const sl_clock *clock;     /* for timestamps; NULL: the system clock */
    const char *vfs;           /* SQLite VFS name; NULL: the default (tests inject faults) */
} sl_store_options;

/** sl_store_options_default - the defaults above, @path NULL. */
void sl_store_options_default(sl_store_options *o);

/** An open store. Opaque. */
typedef struct sl_store sl_store;

/**
 * sl_store_open - open or create the database at @o->path: check it, enable
 * WAL, foreign keys and the busy timeout, migrate an older schema in one
 * transaction per step, start the writer thread. A database written by a
 * newer build is refused (SL_EVERSION); a file that is not a database or
 * fails its check gives SL_ECORRUPT. @err receives a one-line reason.
 */
int sl_store_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap);

/**
 * sl_store_is_url - whether @path names a PostgreSQL database (a
 * postgresql:// or postgres:// URI) rather than an SQLite file: the test
 * sl_store_open() makes to pick its backend.
 */
int sl_store_is_url(const char *path);

/** sl_store_backend - "sqlite" or "postgresql"; "" for NULL. */
const char *sl_store_backend(const sl_store *s);

/**
 * sl_store_close - finish queued writes, stop the writer, checkpoint the WAL
 * and close every connection. NULL is a no-op.
 */
void sl_store_close(sl_store *s);

/** sl_store_schema_version - the database's schema version (after migration). */
int sl_store_schema_version(sl_store *s, int *version);

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

#define SL_STORE_MAX_KEY  160  /* bytes of a device public key (DER or raw point) */
#define SL_STORE_MAX_TEXT 4096 /* bytes of a capabilities / metrics / config text field */

/** A device as the store knows it. */
typedef struct sl_device_record {
    int64_t id;
    uint8_t public_key[SL_STORE_MAX_KEY];
    size_t key_len;
    int64_t enrolled_at_ms;
    int64_t last_seen_ms;
    char capabilities[SL_STORE_MAX_TEXT]; /* JSON, as given at enrolment */
    int disabled;                         /* an operator disabled it: refused until enabled */
} sl_device_record;

/**
 * sl_store_enrol_device - record a device by its public key; enrolling the
 * same key again returns the same id (idempotent). @capabilities: JSON text
 * (at most SL_STORE_MAX_TEXT - 1 bytes). Durable on SL_OK.
 */
int sl_store_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                          int64_t *device_id);

/** sl_store_get_device - read a device; SL_ENOENT when unknown. */
int sl_store_get_device(sl_store *s, int64_t device_id, sl_device_record *out);

/**
 * sl_store_set_device_disabled - disable (@disabled 1) or enable (0) a
 * device: its state becomes "disabled" or "active". SL_ENOENT when unknown.
 * Durable on SL_OK.
 */
int sl_store_set_device_disabled(sl_store *s, int64_t device_id, int disabled);

/** sl_store_touch_device - set last_seen to now. */
int sl_store_touch_device(sl_store *s, int64_t device_id);

/** sl_store_count_devices - how many devices are enrolled. Reads only. */
int sl_store_count_devices(sl_store *s, uint64_t *count);

/** A device with what it did, for operators (sl_store_list_devices()). */
typedef struct sl_device_summary {
    int64_t id;
    int64_t enrolled_at_ms;
    int64_t last_seen_ms;
    char state[16];          /* "active", ... (cut to fit) */
    uint32_t participations; /* rounds it was selected for (participant rows) */
    uint32_t reported;       /* acknowledged updates it sent, over every round */
    uint32_t rejected;       /* participations that ended SL_PART_REJECTED */
    uint32_t late;           /* participations that ended SL_PART_LATE */
} sl_device_summary;

/**
 * sl_store_list_devices - the devices whose id is above @after (0: from the
 * first), in id order, skipping @offset of them, at most @limit (0: none),
 * each with its counts; calls @fn for each (the record is valid during the
 * call only) and stops at the first non-zero return of @fn, which it
 * returns. A page that starts @after the last id of the one before reads
 * the same few rows wherever it is in the fleet (the primary key); an
 * @offset reads the rows it skips. One read transaction: the counts and the
 * page are one snapshot. SL_EINVAL for a negative @after. Reads only; never
 * waits for the writer.
 */
int sl_store_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                          int (*fn)(void *ctx, const sl_device_summary *d), void *ctx);

/**
 * sl_store_list_reporters - the devices with an acknowledged update in
 * round @round_id, in ascending id order (@fn as for sl_store_list_devices()).
 * An unknown round has none (SL_OK). Reads only.
 */
int sl_store_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                            void *ctx);

/* ------------------------------------------------------------------------ */
/* Tasks and model versions                                                 */
/* ------------------------------------------------------------------------ */

/**
 * sl_store_create_task - a task with its configuration (JSON) and parameter
 * layout (text form of codecs/FORMAT.md). Names are unique: creating an
 * existing name with the same config and layout returns its id; with a
 * different one SL_ECONFLICT.
 */
int sl_store_create_task(sl_store *s, const char *name, const char *config_json,
                         const char *layout_text, int64_t *task_id);

/**
 * sl_store_create_task_spec - sl_store_create_task() with the task's model
 * spec (JSON text, device/nn/MODEL_SPEC.md; NULL for none, never ""): stored
 * as given and part of the idempotency check (the same name with another
 * spec is SL_ECONFLICT). The store does not read it.
 */
int sl_store_create_task_spec(sl_store *s, const char *name, const char *config_json,
                              const char *layout_text, const char *model_spec, int64_t *task_id);

/**
 * sl_store_create_task_docs - sl_store_create_task_spec() with the task's
 * data contract too (JSON text, device/data/DATA_CONTRACT.md; NULL for none,
 * never ""): stored as given and part of the idempotency check.
 */
int sl_store_create_task_docs(sl_store *s, const char *name, const char *config_json,
                              const char *layout_text, const char *model_spec,
                              const char *data_contract, int64_t *task_id);

/** A task (strings owned by the record; free with sl_store_task_free()). */
typedef struct sl_task_record {
    int64_t id;
    char *name;
    char *config_json;
    char *layout_text;
    char *model_spec;    /* NULL when the task has none */
    char *data_contract; /* NULL when the task has none */
    int64_t created_at_ms;
} sl_task_record;

/** sl_store_get_task - read a task; SL_ENOENT when unknown. */
int sl_store_get_task(sl_store *s, int64_t task_id, sl_task_record *out);

/**
 * sl_store_list_tasks - call @fn with every task id, oldest first; stops at
 * the first non-zero return of @fn and returns it.
 */
int sl_store_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx);

/** sl_store_task_free - release the strings of a record filled by sl_store_get_task(). */
void sl_store_task_free(sl_task_record *t);

/** One device's evaluation of a round's base model on its held-out samples. */
typedef struct sl_store_eval {
    uint32_t samples; /* held-out samples evaluated (> 0) */
    double loss;      /* mean loss over them (finite, >= 0) */
    double accuracy;  /* in [0, 1]; NaN when the loss has none (regression) */
    double mae, rmse; /* regression; NaN when the loss has none */
} sl_store_eval;

/**
 * sl_store_put_eval - record device @device_id's evaluation @ev of round
 * @round_id's base model (federated evaluation). A device reports once per
 * round: the same report again is SL_OK, a different one SL_ECONFLICT.
 * Durable on SL_OK. SL_EINVAL for values out of range.
 */
int sl_store_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev);

/** The sample-weighted aggregate of a round's evaluations. */
typedef struct sl_store_eval_sum {
    uint32_t devices; /* reports */
    uint64_t samples; /* their samples */
    double loss;      /* weighted means; NaN when no report has the metric */
    double accuracy;
    double mae;
    double rmse; /* sqrt of the weighted mean of squared RMSEs (the pooled RMSE) */
} sl_store_eval_sum;

/** sl_store_round_eval - aggregate round @round_id's evaluations (devices 0: none yet). */
int sl_store_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out);

/**
 * sl_store_last_eval - the newest round of task @task_id that has
 * evaluations: its id into *@round_id and their aggregate into @out;
 * *@round_id 0 (and @out zeroed, metrics NaN) when no round has any.
 */
int sl_store_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out);

/* ---- device sessions (#20) ---------------------------------------------- */

#define SL_STORE_SECRET_LEN 32

/**
 * sl_store_session_secret - the newest session secret and its epoch; the
 * first call makes epoch 1 (from getrandom()). With @rotate, a new secret
 * (epoch + 1) is made and returned: sessions of the previous epoch stay
 * valid as long as the caller accepts that epoch. Durable on SL_OK.
 */
int sl_store_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                            uint8_t secret[SL_STORE_SECRET_LEN]);

/** sl_store_session_secret_of - the secret of @epoch; SL_ENOENT when there is none. */
int sl_store_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN]);

/** A session the coordinator issued. */
typedef struct sl_store_session {
    char id[33]; /* 32 lowercase hex digits */
    int64_t device_id;
    uint32_t epoch;
    int64_t issued_at_ms, expires_at_ms;
    int64_t revoked_at_ms; /* 0: not revoked */
} sl_store_session;

/**
 * sl_store_put_session - record an issued session. Durable on SL_OK. The
 * same record again (a retried write) is SL_OK and changes nothing; another
 * record under a recorded id is SL_ECONFLICT.
 */
int sl_store_put_session(sl_store *s, const sl_store_session *rec);

/**
 * sl_store_list_sessions - call @fn with every session of @device_id (0:
 * every device) not expired at @now_ms, oldest first; stops at the first
 * non-zero return of @fn and returns it.
 */
int sl_store_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                           int (*fn)(void *ctx, const sl_store_session *rec), void *ctx);

/**
 * sl_store_revoke_sessions - revoke session @id of @device_id (NULL: every
 * live session of the device); *@count (may be NULL) the sessions revoked
 * now. Durable on SL_OK.
 */
int sl_store_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count);

/**
 * sl_store_set_refusal - record why @device_id refuses the model of
 * @task_id (its agent's limits: "the model needs 300 MB of activations ...";
 * at most SL_STORE_MAX_TEXT - 1 bytes), replacing an earlier reason; an
 * empty @reason clears it (the device takes part again). Durable on SL_OK.
 */
int sl_store_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason);

/**
 * sl_store_list_refusals - call @fn with every refusal of task @task_id (0:
 * any task) by device @device_id (0: any device), in task then device order,
 * with the reason and the time it was given; stops at the first non-zero
 * return of @fn and returns it. Reads only.
 */
int sl_store_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                           int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                     const char *reason, int64_t at_ms),
                           void *ctx);

/** A model version to store. */
typedef struct sl_model_put {
    int64_t task_id;
    int64_t version;   /* > 0, unique per task */
    int64_t parent;    /* version it came from, 0 for the initial model */
    const void *frame; /* the full-model frame (codecs), as stored */
    size_t frame_len;
    const uint8_t *sha256; /* 32 bytes: digest of the frame (the ETag) */
    const char *metrics;   /* JSON or NULL */
    const void *opt_state; /* server optimiser state (opaque) or NULL */
    size_t opt_state_len;
} sl_model_put;

/**
 * sl_store_put_model - store a model version (a frame of at least one byte: an empty
 * frame is what marks a retired version). Putting the same version with the same digest
 * again is a no-op (SL_OK; a retired version stays retired); with another digest
 * SL_ECONFLICT.
 */
int sl_store_put_model(sl_store *s, const sl_model_put *m);

/** A stored model version (buffers malloc'd; free with sl_store_model_free()). */
typedef struct sl_model_record {
    int64_t task_id, version, parent, created_at_ms;
    void *frame;      /* NULL from sl_store_get_model_info() */
    size_t frame_len; /* from sl_store_get_model_info(): the frame's stored size, 0 if retired */
    uint8_t sha256[32];
    char *metrics;   /* JSON or NULL */
    void *opt_state; /* or NULL (always from sl_store_get_model_info()) */
    size_t opt_state_len;
    int retired; /* 1: retention took its bytes (sl_store_retain_models()); the record stays */
} sl_model_record;

/**
 * sl_store_get_model - read a version with its bytes (@version 0: the latest). SL_ENOENT when
 * absent or retired (its bytes are gone).
 */
int sl_store_get_model(sl_store *s, int64_t task_id, int64_t version, sl_model_record *out);

/**
 * sl_store_get_model_info - read a version's record without its bytes (frame and opt_state
 * NULL; frame_len the frame's stored size), retired or not (@version 0: the latest).
 * SL_ENOENT when absent. What a listing of versions and their metrics reads.
 */
int sl_store_get_model_info(sl_store *s, int64_t task_id, int64_t version, sl_model_record *out);

/** sl_store_model_free - release the buffers of a record. */
void sl_store_model_free(sl_model_record *m);

/** sl_store_set_model_metrics - replace a version's metrics JSON (evaluator reports). */
int sl_store_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics);

/**
 * sl_store_retain_models - retire the model versions of @task_id except the latest
 * @keep_last (>= 1) and every version divisible by @keep_every (0: none kept that way);
 * version 1 (the initial model) and any version a round not yet closed or abandoned has as
 * its base are kept. A retired version's bytes (frame, optimiser state) go; its record
 * (parent, digest, time, metrics) stays, so rounds keep their accuracy history;
 * sl_store_get_model() no longer finds it. The coordinator calls it after each close of a
 * task with "retain_last" (coordinator/config.c), before the next round opens: a split
 * update (codecs/FORMAT.md) is read at its round's close against the version it names, so
 * no version an update not yet aggregated names is retired. @retired: how many went now
 * (may be NULL).
 */
int sl_store_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                           uint32_t *retired);

/**
 * sl_store_retain_updates - retire the bytes of the updates of @task_id's rounds that are
 * over (closed or abandoned), except the latest @keep_rounds (>= 1) of those, and drop
 * those rounds' partial sums (sl_store_put_partial()). Each update's record (round, device,
 * samples, local steps, digest, time) stays, so receipts, device histories and the device
 * list are unchanged; sl_store_foreach_update() gives a retired update's frame as empty. A
 * round's updates are read only by its close and, for an abandoned round, by the next close
 * of the same base version, which carries them; the coordinator calls this after each close
 * of a task with "retain_last", when every round that is over was aggregated or carried.
 * Each round is retired once (rounds.updates_retired), so a close reads only the rounds
 * not yet retired. @retired: how many updates lost their bytes now (may be NULL).
 */
int sl_store_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired);

/* ------------------------------------------------------------------------ */
/* Rounds and participants                                                  */
/* ------------------------------------------------------------------------ */

/** Round states; a round ends CLOSED or ABANDONED. */
typedef enum sl_round_state {
    SL_ROUND_SELECTING = 0,
    SL_ROUND_TRAINING = 1,
    SL_ROUND_AGGREGATING = 2,
    SL_ROUND_CLOSED = 3,
    SL_ROUND_ABANDONED = 4
} sl_round_state;

/** A round's persisted record. */
typedef struct sl_round_record {
    int64_t id; /* assigned by sl_store_create_round() */
    int64_t task_id;
    int64_t round_no; /* 1, 2, ... within the task */
    int64_t base_version;
    sl_round_state state;
    uint32_t target, quorum;
    int64_t opened_at_ms, select_deadline_ms, report_deadline_ms, closed_at_ms;
    uint32_t selected, reported, dropped, late, rejected;
    int64_t bytes_up, bytes_down;
    char error[256];
    uint32_t downloads; /* devices whose model downloads bytes_down counts (schema 12; 0 in
                           rounds stored before it) */
} sl_round_record;

/** sl_store_create_round - insert a round (its id is written back into @r). */
int sl_store_create_round(sl_store *s, sl_round_record *r);

/** sl_store_update_round - write a round's state, deadlines, counters (by id). */
int sl_store_update_round(sl_store *s, const sl_round_record *r);

/** sl_store_get_round - read a round; SL_ENOENT when unknown. */
int sl_store_get_round(sl_store *s, int64_t round_id, sl_round_record *out);

/**
 * sl_store_list_rounds - rounds of @task_id, newest first, skipping
 * @offset; calls @fn for each of at most @limit; stops when @fn returns
 * non-zero (and returns that value).
 */
int sl_store_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                         int (*fn)(void *ctx, const sl_round_record *r), void *ctx);

/** sl_store_unfinished_rounds - rounds not CLOSED or ABANDONED (for recovery), oldest first. */
int sl_store_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r),
                               void *ctx);

/**
 * sl_store_close_round - in ONE transaction: write @r (its final state) and,
 * when @m is not NULL, the new model version: a reader sees both or neither.
 */
int sl_store_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m);

/** A device's part in a round. */
typedef enum sl_participant_state {
    SL_PART_SELECTED = 0,
    SL_PART_DOWNLOADING = 1,
    SL_PART_TRAINING = 2,
    SL_PART_REPORTED = 3,
    SL_PART_DROPPED = 4,
    SL_PART_LATE = 5,
    SL_PART_REJECTED = 6
} sl_participant_state;

/** sl_store_set_participant - insert or update (round, device) with a state and reason. */
int sl_store_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                             sl_participant_state state, const char *reason);

/**
 * sl_store_mark_participant - update the state and reason of a device that is a participant
 * of the round; SL_ENOENT, nothing written, when it is not one (as a device that was never
 * selected is not made one by what it sends).
 */
int sl_store_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                              sl_participant_state state, const char *reason);

/**
 * sl_store_select_participants - in ONE transaction: insert @n devices as
 * SELECTED participants of round @r->id and write @r (its new state and
 * counters). Devices already present keep their rows.
 */
int sl_store_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                                 size_t n);

/** A participant row. */
typedef struct sl_participant_record {
    int64_t round_id, device_id;
    sl_participant_state state;
    char reason[128];
    int64_t updated_at_ms;
} sl_participant_record;

/** sl_store_list_participants - every participant of a round in device-id order. */
int sl_store_list_participants(sl_store *s, int64_t round_id,
                               int (*fn)(void *ctx, const sl_participant_record *p), void *ctx);

/* ------------------------------------------------------------------------ */
/* Acknowledged updates                                                     */
/* ------------------------------------------------------------------------ */

/** What the store returns for an acknowledged update. */
typedef struct sl_store_receipt {
    int64_t update_id;
    int64_t received_at_ms;
    int duplicate; /* 1: this exact update was stored before; the original receipt */
} sl_store_receipt;

/** An update to store. */
typedef struct sl_update_put {
    int64_t round_id;
    int64_t device_id;
    const void *frame; /* the encoded frame, as received */
    size_t frame_len;
    uint32_t num_samples;
    const uint8_t *sha256; /* 32 bytes: digest of the frame */
    uint32_t local_steps;  /* the optimiser steps the device ran for it; 0: not reported */
} sl_update_put;

/**
 * sl_store_put_update - store an update and return once it is durable (the
 * group commit shares the fsync with concurrent writers), or after
 * @timeout_ms (SL_ETIMEDOUT; the write may still land). The same (round,
 * device, digest) again returns the original receipt with duplicate = 1; a
 * different update for the same (round, device) is SL_ECONFLICT and changes
 * nothing. The round and device must exist (SL_ENOENT), and the round must
 * take updates (SELECTING or TRAINING): once a round is AGGREGATING, CLOSED
 * or ABANDONED a new update is SL_ESTATE and changes nothing (a retry of one
 * stored before still gets its receipt). So the updates a round aggregates,
 * read after its move to AGGREGATING, are all it will ever acknowledge, even
 * when other replicas accept updates meanwhile.
 */
int sl_store_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                        sl_store_receipt *out);

/**
 * sl_store_get_receipt - the receipt of the update (round, device) if its
 * digest is @sha256: SL_OK (duplicate = 1), SL_ECONFLICT (another update is
 * stored for them), SL_ENOENT (none). Writes nothing.
 */
int sl_store_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                         sl_store_receipt *out);

/** sl_store_count_updates - how many updates a round has. */
int sl_store_count_updates(sl_store *s, int64_t round_id, uint64_t *count);

/**
 * sl_store_foreach_update - call @fn for every update of @round_id in
 * device-id order (the order aggregation needs for bit-identical results).
 * The frame pointer is valid during the call only; an update retention
 * retired (sl_store_retain_updates()) comes with no bytes (length 0), only in
 * a round that is over. Stops at the first
 * non-zero return of @fn and returns it.
 */
int sl_store_foreach_update(sl_store *s, int64_t round_id,
                            int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                      uint32_t num_samples, const uint8_t *sha256),
                            void *ctx);

/**
 * sl_store_list_steps - call @fn with the local steps each update of round
 * @round_id reports (0: none reported), in device-id order (the order of
 * sl_store_foreach_update()); stops at the first non-zero return of @fn and
 * returns it. Reads only.
 */
int sl_store_list_steps(sl_store *s, int64_t round_id,
                        int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx);

/* ------------------------------------------------------------------------ */
/* Resumable upload sessions                                                */
/* ------------------------------------------------------------------------ */

#define SL_STORE_UPLOAD_ID 32 /* bytes of an upload id (text, [A-Za-z0-9_-]) */

/** A resumable upload session. */
typedef struct sl_upload_record {
    char id[SL_STORE_UPLOAD_ID + 1];
    int64_t device_id, round_id;
    uint64_t length; /* declared total */
    uint64_t offset; /* bytes received and durable */
    uint8_t sha256[32];
    uint32_t num_samples;
    int64_t expires_at_ms;
    uint32_t local_steps; /* as sl_update_put's, carried into the update */
} sl_upload_record;

/** The live upload sessions a device may hold for rounds other than a new one's. */
#define SL_STORE_UPLOADS_PER_DEVICE 8

/**
 * sl_store_create_upload - a session for @r->length bytes (space reserved,
 * offset 0). An existing id is SL_EEXIST. A device holds at most one live
 * session a round: the new one replaces (deletes, in the same transaction)
 * any other live session of @r->device_id for @r->round_id, whose update
 * it can no longer be (a device makes one update a round). A device that
 * already holds SL_STORE_UPLOADS_PER_DEVICE live sessions for other rounds
 * gets SL_ELIMIT. SL_EEXIST and SL_ELIMIT change nothing.
 */
int sl_store_create_upload(sl_store *s, const sl_upload_record *r);

/** How long an expired session stays known as expired: 7 days (sl_store_expire_uploads()). */
#define SL_STORE_UPLOAD_TOMBSTONE_MS (7 * 24 * 3600 * 1000LL)

/**
 * sl_store_get_upload - read a session. Returns SL_OK for a live session,
 * SL_ETIMEDOUT for one whose expires_at_ms passed (until its row is purged,
 * SL_STORE_UPLOAD_TOMBSTONE_MS after expiry; @out is untouched), SL_ENOENT
 * when the id is unknown (never created, finished, deleted or purged),
 * SL_EINVAL for an id that is not [A-Za-z0-9_-]{1,SL_STORE_UPLOAD_ID}.
 * The other upload calls treat an expired session as unknown (SL_ENOENT).
 * Reads only; does not block on the writer.
 */
int sl_store_get_upload(sl_store *s, const char *id, sl_upload_record *out);

/**
 * sl_store_append_upload - write @len bytes at @offset, which must equal the
 * session's offset (SL_ECONFLICT otherwise, nothing written) and stay within
 * its length (SL_ETOOBIG). Durable on SL_OK; @new_offset receives the offset.
 */
int sl_store_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data,
                           size_t len, int64_t timeout_ms, uint64_t *new_offset);

/**
 * sl_store_read_upload - copy the session's received bytes into a new
 * buffer (@out, malloc'd) of *@len bytes.
 */
int sl_store_read_upload(sl_store *s, const char *id, void **out, size_t *len);

/**
 * sl_store_finish_upload - in one transaction: turn a complete session into
 * an update (as sl_store_put_update() with the session's fields) and delete
 * the session. SL_ESTATE when the session is not complete.
 */
int sl_store_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out);

/**
 * sl_store_delete_upload - delete session @id (live or expired) with its
 * bytes, so a session that will never complete (digest mismatch, update
 * rejected) gives back its reserved space at once instead of at expiry.
 * Durable on SL_OK. Returns SL_OK, SL_ENOENT (no such session: nothing to
 * do), SL_EINVAL (malformed id) or a storage error. Blocks on the writer.
 */
int sl_store_delete_upload(sl_store *s, const char *id);

/**
 * sl_store_expire_uploads - release the bytes of every session whose expiry
 * passed, keeping a small row so sl_store_get_upload() can still answer
 * SL_ETIMEDOUT (expired) rather than SL_ENOENT (unknown), and delete the
 * rows of sessions expired for more than SL_STORE_UPLOAD_TOMBSTONE_MS.
 * @deleted (may be NULL): sessions whose bytes were released by this call.
 */
int sl_store_expire_uploads(sl_store *s, uint32_t *deleted);

/**
 * sl_store_probe_write - a durable write transaction that always reaches the
 * disk (it bumps the database header's user_version, a probe counter, so a
 * WAL frame is written and synced):
 * SL_OK proves the database takes writes now (readiness probes). Returns
 * SL_OK or the storage error (SL_EFULL, SL_EIO, ...). Blocks on the writer.
 */
int sl_store_probe_write(sl_store *s);

/* ------------------------------------------------------------------------ */
/* Leadership of replicas                                                   */
/* ------------------------------------------------------------------------ */

#define SL_STORE_MAX_OWNER 64 /* bytes of a replica's name, with its NUL */

/**
 * sl_store_lead - take or keep the leadership of the coordinator replicas
 * that share this store, as @owner (a replica's name, 1 to
 * SL_STORE_MAX_OWNER - 1 bytes), for @lease_ms (> 0). SL_OK with *@epoch
 * when this store now leads: a renewal by the store that holds the lease
 * keeps the epoch; a takeover (the lease expired, or a restarted replica of
 * the same name) increments it. SL_EBUSY when another owner's lease has not
 * expired (*@epoch: its epoch). From its first SL_OK on, the store fences
 * every write of a round's record (create, update, select, close): such a
 * write is refused with SL_EFENCED, changing nothing, once the leader row
 * holds a newer epoch, so a paused old leader can never close a round.
 * Lease times run on the database server's clock for PostgreSQL (replicas'
 * clocks may differ) and on the store's clock for SQLite. Durable on SL_OK.
 */
int sl_store_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch);

/**
 * sl_store_leader - who leads: the owner (cut to @cap), its epoch and the
 * ms left on its lease (negative: expired). SL_ENOENT when no replica has
 * ever led. Any output may be NULL. Reads only.
 */
int sl_store_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms);

/**
 * sl_store_resign - end this store's lease now when it holds it (a replica
 * stopping cleanly hands over without waiting for the lease to expire); the
 * store stays fenced at its epoch. SL_OK also when it did not lead.
 */
int sl_store_resign(sl_store *s, const char *owner);

/**
 * sl_store_put_checkin - record that device @device_id checked in for task
 * @task_id now (the store's clock), replacing its earlier check-in: a
 * replica that does not lead takes check-ins this way, and the leader draws
 * its selection from them too. SL_ENOENT for an unknown task or device.
 * Durable on SL_OK.
 */
int sl_store_put_checkin(sl_store *s, int64_t task_id, int64_t device_id);

/**
 * sl_store_list_checkins - call @fn with each device that checked in for
 * @task_id at or after @since_ms, with the time, in device-id order; stops
 * at the first non-zero return of @fn and returns it. Reads only.
 */
int sl_store_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                           int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx);

/**
 * sl_store_put_partial - record replica @replica's partial sum of round
 * @round_id (@data, @len bytes: the aggregation's export, opaque here) over
 * exactly the updates of the @n devices @devices, replacing its earlier one.
 * The leader adds the partials at the round's close and reads only the
 * updates no partial covers. SL_ENOENT for an unknown round. Durable on SL_OK.
 */
int sl_store_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                         size_t len, const int64_t *devices, size_t n);

/**
 * sl_store_foreach_partial - call @fn with each replica's partial sum of
 * @round_id (in replica-name order; the pointers are valid during the call
 * only); stops at the first non-zero return of @fn and returns it. Reads only.
 */
int sl_store_foreach_partial(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                       const int64_t *devices, size_t n),
                             void *ctx);

/**
 * sl_store_put_downloads - record what replica @replica served of round
 * @round_id's model downloads so far: @bytes in all, to the @n devices
 * @devices (ascending), replacing its earlier record. Replicas record theirs
 * as they go; the leader sums every replica's into the round's bytes_down
 * and downloads at its close. A record written once the round is closed or
 * abandoned (what a replica served after its last write before the close)
 * raises the round's bytes_down and downloads, in the same transaction, to
 * the sum of every replica's bytes and the number of distinct devices over
 * their records, where those are larger (they never fall). SL_ENOENT for an
 * unknown round; SL_EINVAL (and nothing written) for device ids that are not
 * positive and strictly ascending. Durable on SL_OK.
 */
int sl_store_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                           const int64_t *devices, size_t n);

/**
 * sl_store_foreach_downloads - call @fn with each replica's record of round
 * @round_id's downloads (in replica-name order; the pointers are valid
 * during the call only); stops at the first non-zero return of @fn and
 * returns it. Reads only.
 */
int sl_store_foreach_downloads(sl_store *s, int64_t round_id,
                               int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                         const int64_t *devices, size_t n),
                               void *ctx);

/** What a device measured of itself for a task: its pace (time budgets). */
typedef struct sl_store_pace {
    double step_ms;  /* one optimiser step of the task's model */
    double up_bps;   /* upload bytes per second */
    double down_bps; /* download bytes per second (0: not measured) */
    int64_t at_ms;   /* when it said so */
} sl_store_pace;

/**
 * sl_store_put_pace - record device @device_id's pace for task @task_id
 * (values finite and >= 0), replacing the earlier one; the time is the
 * store's clock. SL_ENOENT for an unknown task or device. Durable on SL_OK.
 */
int sl_store_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p);

/** sl_store_get_pace - the pace last recorded; SL_ENOENT when none. Reads only. */
int sl_store_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out);

/**
 * sl_store_get_paces - call @fn with the pace last recorded for task
 * @task_id of each of the @n devices @ids that has one (a round's selected
 * devices: one read for them all, not one per device; in no stated order),
 * from one snapshot; stops at the first non-zero return of @fn and returns
 * it. Reads only.
 */
int sl_store_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                       int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace),
                       void *ctx);

/**
 * sl_store_device_history - for task @task_id, call @fn with each device that
 * was ever a participant of its rounds: how many rounds selected it, how many
 * of those it reported to (an acknowledged update), and the number of the
 * last round that selected it; in device-id order. Derived from the rounds,
 * participants and updates the store keeps, so it survives restarts as they
 * do. Stops at the first non-zero return of @fn and returns it. Reads only.
 */
int sl_store_device_history(sl_store *s, int64_t task_id,
                            int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                      uint32_t reported, int64_t last_round_no),
                            void *ctx);

/**
 * sl_store_device_history_before - sl_store_device_history() over the task's
 * rounds numbered below @before_round_no only (the closed ones, when it is
 * the open round's number: what no later request changes).
 */
int sl_store_device_history_before(sl_store *s, int64_t task_id, int64_t before_round_no,
                                   int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                             uint32_t reported, int64_t last_round_no),
                                   void *ctx);

/**
 * sl_store_device_history_of - sl_store_device_history() for the @n devices
 * @ids only (a selection's pool: one read for them all, whatever the task's
 * length), calling @fn for those that were ever participants of the task's
 * rounds, in no stated order, from one snapshot; stops at the first non-zero
 * return of @fn and returns it. Reads only.
 */
int sl_store_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                               int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                         uint32_t reported, int64_t last_round_no),
                               void *ctx);

/**
 * sl_store_device_rounds - in @out, how many of task @task_id's rounds
 * numbered below @before_round_no device @device_id took part in: rounds that
 * selected it, or whose update from it the store keeps (FedBuff's buffers
 * select no one), each once; 0 for none. From the participants and updates
 * the store keeps, so it survives restarts and is the same at every replica.
 * A device's assignment carries it (the density warm-up counts from it).
 * Reads only.
 * On an error @out is 0.
 */
int sl_store_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                           uint32_t *out);

/**
 * sl_store_report_delays - for task @task_id's rounds numbered above
 * @after_round_no, call @fn with each acknowledged update's delay: the time
 * from its round's selection deadline to its arrival (ms, 0 when earlier),
 * in (round, device) order. Adaptive deadlines take a percentile of them.
 * Stops at the first non-zero return of @fn and returns it. Reads only.
 */
int sl_store_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                           int (*fn)(void *ctx, int64_t delay_ms), void *ctx);

/* ------------------------------------------------------------------------ */
/* Audit and maintenance                                                    */
/* ------------------------------------------------------------------------ */

/** sl_store_audit - append (actor, action, detail) to the audit log with the time. */
int sl_store_audit(sl_store *s, const char *actor, const char *action, const char *detail);

/** sl_store_count_audit - rows in the audit log. */
int sl_store_count_audit(sl_store *s, uint64_t *count);

/**
 * sl_store_backup - copy the whole database to @dest_path while the store
 * keeps running: VACUUM INTO from one read transaction, so writes continue,
 * the copy is a consistent snapshot however many commits come meanwhile, and
 * it holds the rows without the pages the store freed (retired models'
 * bytes). The file is written atomically (a ".partial" file, synced, then
 * renamed). PostgreSQL: SL_EUNSUPPORTED (pg_dump).
 */
int sl_store_backup(sl_store *s, const char *dest_path);

/**
 * sl_store_migrate - copy the SQLite store at @from_path into the empty
 * PostgreSQL store at @to_uri (created or migrated to this build's schema
 * first; the source too, which is otherwise only read; a @from_path that is
 * not a file is SL_ENOENT, nothing created): every row of every
 * table with its id, in one transaction, so the target has all of it or
 * none. A target that already holds tasks, devices, rounds or audit rows is
 * refused (SL_EEXIST). *@rows (may be NULL): rows copied. @err: a one-line
 * reason. Stop the coordinator first: uploads acknowledged during the copy
 * would not be in it.
 */
int sl_store_migrate(const char *from_path, const char *to_uri, uint64_t *rows, char *err,
                     size_t errcap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_STORE_H */
