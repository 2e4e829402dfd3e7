/*
 * coord_int.h - internals shared by the files of libstarling-coord.
 *
 * Layers, bottom to top; a file calls only into the layers below it (never
 * up, never in a circle: .ci/check_layers.py fails the style gate if one
 * does):
 *   config.c       task configuration: parse, validate, the rules its keys
 *                  derive (the senders' mean's length)
 *   aggregate.c, devices.c, server.c, spec_check.c, select.c, splits.c
 *                  aggregation, device and id sets, server optimisers,
 *                  model-spec checks, selection and time budgets' plans
 *                  (over the store), the supports of split updates
 *   tasks.c        the engine's tasks as the store keeps them: load, table,
 *                  paces of closed rounds, free
 *   replica.c      replicas sharing one store: lease, partial sums, reloads
 *   lifecycle.c    a round's life: open, select, close
 *   engine.c       the engine's API
 *   main.c         starling-coordinator
 */
#ifndef STARLING_COORD_INT_H
#define STARLING_COORD_INT_H

#include "starling/round.h"
#include "starling/store.h"

/* ------------------------------------------------------------------------ */
/* Aggregation of one round's updates (aggregate.c)                         */
/* ------------------------------------------------------------------------ */

/* An aggregation in progress. Updates are added in device-id order; the
 * result is a pure function of the sequence added. Memory: O(model) for the
 * mean-type aggregators; for the robust ones, the sparse updates themselves
 * (never one dense vector per device). */
typedef struct sl__agg sl__agg;

/* Start aggregating for @cfg (aggregator, clip_norm, trim_fraction,
 * dp_noise) over @layout's parameters. @layout is borrowed: it must outlive
 * the aggregation. */
int sl__agg_begin(const sl_task_config *cfg, const sl_layout *layout, sl__agg **out);

/* Add one update frame (already validated by the engine, but decoded and
 * checked again here) with its sample count (0: SL_EINVAL). Clipping to
 * cfg->clip_norm happens here. Adds after a finish are allowed. */
int sl__agg_add(sl__agg *a, const void *frame, size_t len, uint32_t num_samples);

/* The aggregated pseudo-gradient into @delta (sl_layout_params() doubles):
 * the sample-weighted mean (FedAvg family), or the coordinate-wise trimmed
 * mean / median (absent coordinates count as 0), plus DP Gaussian noise
 * seeded by @noise_seed when cfg->dp_noise > 0. @count: updates added.
 * SL_ESTATE when nothing was added. */
int sl__agg_finish(sl__agg *a, uint64_t noise_seed, double *delta, uint32_t *count);

/* The weight @weight in [0, 1] of the senders' mean at the next finish (aggregate.c's header;
 * sl_sender_mean_at() gives it by the devices' participations): each coordinate divided by (1 -
 * weight) W + weight S_j instead of W. SL_EINVAL out of range; SL_ESTATE for a weight above 0 when
 * the aggregation was begun for a task without it (sl_sender_mean_length() 0). */
int sl__agg_sender_mean(sl__agg *a, double weight);
/* sender_mean_fresh (#23): the coordinates set in @bits (params bits, coordinate i at byte
 * i / 8, bit i % 8; borrowed until the finish; NULL: none) are divided by W, left out of the
 * senders' mean. SL_ESTATE for @bits on an aggregation begun without the senders' mean. */
int sl__agg_sender_mean_skip(sl__agg *a, const uint8_t *bits);
/* The coordinates the added updates sent (S_j > 0) into @bits (params bits, as above, the
 * rest 0): what this aggregate carried, which the next one's sender_mean_fresh reads.
 * SL_ESTATE without the senders' mean. */
int sl__agg_carried(const sl__agg *a, uint8_t *bits);

/* As sl__agg_add() with a real-valued weight > 0 (FedBuff: the sample count
 * times the staleness discount 1/sqrt(1 + staleness)). */
int sl__agg_add_weighted(sl__agg *a, const void *frame, size_t len, double weight);

/* As sl__agg_add() with the update's local steps (0: not reported, counts as 1): for a
 * task with "fednova", the update is normalised by its effective steps
 * (sl__fednova_steps(); aggregate.c's header); otherwise exactly sl__agg_add(). In a
 * FedNova aggregation every add goes through here. SL_ERANGE for steps out of range. */
int sl__agg_add_steps(sl__agg *a, const void *frame, size_t len, uint32_t num_samples,
                      uint32_t steps);

/* FedNova's effective steps a of @steps local steps (0 counts as 1) of SGD with @momentum
 * (0 for other optimisers): steps itself without momentum. */
double sl__fednova_steps(uint32_t steps, double momentum);

/* The effective steps FedNova's fixed-point sums take (a * 2^32 below 2^62): an update of more
 * is refused at upload (sl__agg_steps_ok()), never acknowledged and then left out. */
#define SL_AGG_NOVA_STEPS_BOUND 0x1p30

/* 1 when @cfg's aggregation takes an update of @steps local steps: always without fednova;
 * with it, when their effective steps (sl__fednova_steps(), with the task's SGD momentum) are
 * below SL_AGG_NOVA_STEPS_BOUND. */
int sl__agg_steps_ok(const sl_task_config *cfg, uint32_t steps);

/* NULL is a no-op. */
void sl__agg_free(sl__agg *a);

/* The bound of an update's values (after clipping) where a task does not
 * clip, or clips at a larger norm: the FedAvg family sums in fixed point
 * (aggregate.c) and refuses a value at or above it. */
#define SL_AGG_VALUE_BOUND 65536.0

/* F, the fractional bits of the fixed-point sums for a task that clips at
 * @clip_norm (0: does not clip): values v become round(v * 2^F), below
 * 2^(62 - F) in magnitude (the clipping bound rounded up to a power of two,
 * or SL_AGG_VALUE_BOUND). */
int sl__agg_frac_bits(double clip_norm);

/* 1 when an update of L2 norm @norm whose largest value is @max_abs fits
 * @cfg's aggregation (after clipping, below the fixed-point bound; always
 * for the robust aggregators), 0 when the aggregation would refuse it. */
int sl__agg_value_ok(const sl_task_config *cfg, double norm, double max_abs);

/* The FedAvg family's partial sum as bytes (@out malloc'd, @len): the
 * model's size, F, the count of updates, the sum of weights and every
 * non-zero coordinate's 128-bit sum, little-endian. Partials of one round
 * made by any replicas over disjoint sets of updates, merged in any order
 * into a fresh aggregation (sl__agg_merge), finish to the same bits as one
 * aggregation of all the updates. SL_ESTATE for the robust aggregators. */
int sl__agg_export(const sl__agg *a, void **out, size_t *len);

/* Adds a partial sum made by sl__agg_export() under the same task
 * configuration and layout. SL_ECORRUPT (malformed), SL_ELAYOUT (another
 * model size or bound), SL_ETOOBIG (the count or the weights would
 * overflow), SL_ESTATE (robust aggregators); nothing changes on an error. */
int sl__agg_merge(sl__agg *a, const void *partial, size_t len);

/* The L2 norm of an update frame's values (decoded; a split frame against
 * @support, NULL for none), for the accept-time bound, and (when @max_abs is
 * not NULL) the largest magnitude of a value; SL_OK or a decode error. */
int sl__update_norm(const sl_layout *layout, const void *frame, size_t len,
                    const sl_decode_limits *limits, const sl_support *support, double *norm,
                    double *max_abs);

#endif /* STARLING_COORD_INT_H */

/* ------------------------------------------------------------------------ */
/* The engine's in-memory state (engine.c, lifecycle.c)                     */
/* ------------------------------------------------------------------------ */

#include <pthread.h>

/* What the engine remembers of a device: O(devices) small records, never
 * anything of the model's size. */
typedef struct sl__device {
    int64_t id;
    int64_t cooldown_until_ms;
} sl__device;

/* A sorted set of device ids. */
typedef struct sl__idset {
    int64_t *ids;
    size_t n, cap;
} sl__idset;

int sl__idset_add(sl__idset *s, int64_t id); /* SL_OK, or SL_EEXIST when present */
int sl__idset_has(const sl__idset *s, int64_t id);
int sl__idset_del(sl__idset *s, int64_t id); /* SL_OK, or SL_ENOENT when absent */
/* A store callback (int (*)(void *, int64_t)) adding @id to the set @ctx; ids that come in
 * ascending order are appended. */
int sl__idset_collect(void *ctx, int64_t id);
/* Add every id of @add to @s in one ordered merge (O(n + m)). */
int sl__idset_merge(sl__idset *s, const sl__idset *add);
void sl__idset_clear(sl__idset *s);
void sl__idset_free(sl__idset *s);

typedef struct sl__task {
    int64_t id;
    sl_task_config cfg;
    sl_layout *layout;
    size_t n;     /* parameters */
    float *model; /* the latest version */
    int64_t version;
    sl_server_state opt;
    int round_open; /* round holds a SELECTING or TRAINING (or AGGREGATING) round */
    int finished;   /* cfg.rounds reached */
    sl_round_record round;
    sl__idset pool;       /* SELECTING: eligible devices that checked in */
    sl__idset selected;   /* TRAINING: the round's participants */
    sl__idset downloaded; /* devices that fetched the model this round (from this
                             replica, with replicas) */
    /* replicas (replica.c): the bytes this replica served of round dl_round's downloads (to the
     * devices in `downloaded`), written to the store at each sync when dl_dirty, and the other
     * replicas' as last read (dl_others_bytes to the devices in dl_others). A round's
     * bytes_down and downloads at its close are every replica's. */
    int64_t dl_round;
    uint64_t dl_bytes, dl_others_bytes; /* at most INT64_MAX, what the store keeps */
    int dl_dirty;
    sl__idset dl_others;
    int64_t dl_adopt_round;   /* the round open when the task was loaded (a restart, a promotion):
                                 what this replica had served of it, as the store holds it, is
                                 still to join its counts (0: done, or none) */
    sl__idset refused;        /* devices that refuse the task's model (their agents' limits) */
    char spec_sha256[65];     /* hex SHA-256 of the task's model spec; "" when it has none */
    char contract_sha256[65]; /* hex SHA-256 of the task's data contract; "" when none */
    uint32_t contract_min_samples; /* the contract's min_samples (0: no contract) */
    sl__idset waiting;             /* TRAINING: eligible devices that checked in, not selected; they
                                      join the next round's pool (they would miss a selection window
                                      that opens while they wait) */
    uint32_t checked_in;
    int64_t quorum_at_ms;
    uint32_t rejected[SL_REJECT_REASONS];
    int select_idle; /* SELECTING with an empty pool: the window restarts at the first arrival */
    double down_bytes_ewma; /* model bytes a device downloaded in the last closed rounds
                             * (deltas included), on average (sl__task_load_paces); 0: none
                             * counted. What a time budget plans a download to weigh. */
    double train_ms_ewma;   /* how long the last closed rounds trained (select deadline to close),
                               on average; 0: none yet. Paces the check-ins of devices that wait
                               for the next round. */
    /* the senders' mean's count of the task's acknowledged updates (of its rounds' participants)
     * and of the devices that made them, through round sm_round: taken from the store's device
     * history at the first aggregate after the task is loaded, then added to with each closed
     * or abandoned round's reporters, so an aggregate does not read the whole history again.
     * sm_valid 0: not taken yet (or a close failed). */
    int sm_valid;
    int64_t sm_round;
    uint64_t sm_updates;
    sl__idset sm_devices;
    sl__idset sm_pending;     /* round sm_pending_round's reporters, read for its weight and */
    int64_t sm_pending_round; /* counted in once its close commits (0: none) */
    /* replicas (replica.c), under the engine's partial_lock: this replica's partial sum of
     * the updates it stored in round partial_round, over exactly the devices in partial_ids */
    sl__agg *partial;
    int64_t partial_round;
    sl__idset partial_ids;
    int partial_dirty; /* folded since the last flush to the store */
} sl__task;

/*
 * splits.c: the supports split updates are coded against, the change between two stored
 * versions of a task, for the SL__SPLITS_KEPT pairs used last (their own lock, taken alone).
 */
#define SL__SPLITS_KEPT 8

typedef struct sl__split_entry {
    int64_t task_id;
    uint64_t ref, base;
    uint64_t used;       /* the splits' clock when it was last read or made */
    sl_support *support; /* NULL: an empty slot */
} sl__split_entry;

typedef struct sl__splits {
    pthread_mutex_t lock;
    sl__split_entry kept[SL__SPLITS_KEPT];
    uint64_t clock;       /* ticks at every use: the least recently used pair goes */
    uint64_t reads, hits; /* pairs read from the store; found kept (tests) */
} sl__splits;

void sl__splits_init(sl__splits *c);
void sl__splits_free(sl__splits *c);

/* The support of the change from version @ref to @base of task @task_id (1 <= ref < base),
 * a new copy into *@out. SL_ENOENT when the store does not hold either version's bytes (never
 * made, or retired): with @check_kept a pair found in memory is checked against the store as
 * well (a task under retention: the close must read the versions again after a restart). */
int sl__splits_support(sl__splits *c, sl_store *store, int64_t task_id, const sl_layout *layout,
                       uint64_t ref, uint64_t base, int check_kept, sl_support **out);

/* The split update @frame as the flat frame of the same update (sl_frame_unsplit() against
 * the support its header names). SL_ESUPPORT when that support is not this task's to
 * compute (a version no longer kept) or not the frame's; SL_EINVAL for a frame that is not
 * split; any decode error. */
int sl__splits_unsplit(sl__splits *c, sl_store *store, int64_t task_id, const sl_layout *layout,
                       const sl_decode_limits *limits, const void *frame, size_t len, void **out,
                       size_t *out_len);

struct sl_engine {
    sl_store *store;
    sl_engine_options opt;
    pthread_mutex_t lock;  /* everything below */
    pthread_rwlock_t gate; /* accepts hold it shared; closing a round exclusive */
    sl__task **tasks;
    size_t ntasks;
    sl__device *devices; /* open-addressing hash table on id */
    size_t ndevices, devcap;
    uint64_t rng;
    /* replicas (replica.c): all under lock; without opt.replica the engine always leads */
    char replica[SL_STORE_MAX_OWNER]; /* this replica's name; "" when it is the only one */
    int leader;                       /* it holds the lease: it runs round transitions */
    int promoting;  /* the tasks are loaded for a promotion: resumed participants are busy */
    uint64_t epoch; /* its fencing epoch while it leads */
    int64_t renew_at_ms, renewed_ms; /* monotonic: next lease call; last successful renewal */
    int64_t synced_ms;               /* monotonic: last sync from the store (followers, leader) */
    uint64_t promotions, demotions;  /* role changes (metrics, tests) */
    pthread_mutex_t partial_lock;    /* every task's partial sum (accepts fold concurrently) */
    uint64_t partials_merged;        /* partial sums the leader added at closes (tests) */
    uint64_t updates_read;           /* updates it read one by one at closes (tests) */
    uint64_t history_reads;          /* device histories read for the senders' mean (tests) */
    uint64_t models_retired;         /* model versions its closes' retention retired (metrics) */
    uint64_t updates_retired;        /* stored updates whose bytes that retention took */
    /* a round's downloads this replica served but could not write once the round was over
     * (the leader's write at the close, a follower's last write when it sees the close): kept
     * and written again at each sync until the store takes them (replica.c) */
    struct sl__dl_late *dl_late;
    size_t ndl_late;
    sl__splits splits; /* supports of split updates (its own lock) */
};

/* tasks.c: the engine's clock in wall-clock ms. */
int64_t sl__engine_now(const sl_engine *e);

/* tasks.c: a task as the store holds it (model, optimiser state, open round, refusals, the
 * paces of its closed rounds), not yet in the engine; looking a task up and adding one (lock
 * held). */
int sl__engine_load_task(sl_engine *e, int64_t task_id, sl__task **out, char *err, size_t errcap);
sl__task *sl__engine_find_task(sl_engine *e, int64_t task_id);
int sl__engine_add_task(sl_engine *e, sl__task *t);

/*
 * replica.c: coordinator replicas sharing one store. Each tick (gate held exclusively, lock
 * held) sl__replica_tick() takes or renews the lease; a replica that leads refreshes the
 * counts other replicas changed (updates stored, check-ins relayed) and runs the round
 * transitions (*@lead 1); one that does not lead re-reads what the leader changed (rounds,
 * models, tasks) and runs none (*@lead 0). Without replicas: *@lead 1, nothing else.
 */
int sl__replica_tick(sl_engine *e, int *lead);
/* 1 when this engine runs round transitions (it leads, or is the only one); lock held. */
int sl__engine_leads(const sl_engine *e);
/* A round transition failed with SL_EFENCED: a newer leader took over; become a follower. */
void sl__replica_fenced(sl_engine *e);

/* Fold device @device_id's update, just stored for round @round_id of @t, into this
 * replica's partial sum of the round (replicas, FedAvg family: the leader then reads one
 * partial per replica instead of every update). Gate held shared; never fails the accept. */
void sl__replica_fold(sl_engine *e, sl__task *t, int64_t round_id, int64_t device_id,
                      const void *frame, size_t len, uint32_t num_samples, uint32_t local_steps);

/* The leader's close (lifecycle.c, gate held exclusively): add round @round_id's updates to
 * @agg through @add (called per update not covered), using every replica's stored partial
 * sum and reading one by one only the updates no partial covers; this replica's own partial
 * is stored first. Without replicas, or for aggregators without partial sums: every update
 * through @add. *@merged: the updates the partials added. */
int sl__replica_add_round(sl_engine *e, sl__task *t, int64_t round_id, sl__agg *agg,
                          int (*add)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                     uint32_t num_samples, const uint8_t *sha256),
                          void *ctx, uint32_t *merged);

/* The senders' mean's device history, read ahead of a round's close so that a long task's
 * history is not read under the engine's lock (engine.c's tick). sl__sm_wanted (lock held):
 * 1 when @t's open round will need it, *@before its number. sl__sm_read (no lock): the
 * acknowledged updates of the rounds before @before and the devices that made them (into
 * @devices, ascending). sl__sm_install (lock held): they become @t's counts when its open
 * round is still @before and nothing counted meanwhile (@devices then holds what it replaced,
 * for the caller to free). */
int sl__sm_wanted(const sl__task *t, int64_t *before);
int sl__sm_read(sl_engine *e, int64_t task_id, int64_t before, sl__idset *devices,
                uint64_t *updates);
void sl__sm_install(sl_engine *e, sl__task *t, int64_t before, sl__idset *devices,
                    uint64_t updates);

/* A model download of @bytes from this replica, for @t's open round (its device already in
 * t->downloaded; lock held): counted for the store (sl__replica_tick writes it). */
void sl__replica_count_download(sl__task *t, uint64_t bytes);

/* Every replica's downloads of @t's open round (lock held): this replica's count and the
 * others' as last read (the figures of its status). *@bytes and @devices (cleared first):
 * the bytes and the devices that downloaded. SL_ENOMEM. */
int sl__replica_downloads(const sl__task *t, uint64_t *bytes, sl__idset *devices);

/* The leader's close (lifecycle.c, lock held): round @r's bytes_down and downloads become
 * every replica's, as the store holds them after this replica's are written (when the store
 * fails, this replica's and the others' as last read). Without replicas: nothing. */
void sl__replica_close_downloads(sl_engine *e, sl__task *t, sl_round_record *r);

/* Downloads of ended rounds this replica still holds unwritten (lock held): written once more
 * (an engine that stops); what the store still refuses is logged and freed. */
void sl__replica_free(sl_engine *e);

/*
 * sl__spec_check_layout - the one thing the coordinator checks of a model spec
 * (JSON text): it is an object of format version 1 whose "params" are the
 * layout's tensors, in order, with their names and shapes. The rest (ops,
 * shapes, loss) is the agents' to check. SL_OK, or SL_ESPEC with the reason.
 */
int sl__spec_check_layout(const char *spec, const sl_layout *layout, char *err, size_t errcap);
sl__device *sl__engine_device(sl_engine *e, int64_t id); /* found or inserted; NULL on ENOMEM */
/* Release every device marked busy (selected for a round until it ends): a replica about to lead
 * forgets the marks of its earlier leadership, whose rounds another leader may have ended, before
 * it marks the participants of the rounds open now (tasks.c). */
void sl__engine_clear_busy(sl_engine *e);

/* select.c: order the @n pool devices @ids (sorted) for a task with paced_selection or
 * fairness_rounds, from the fleet's history in the store: the first ones are selected. */
int sl__select_order(sl_engine *e, const sl__task *t, int64_t *ids, size_t n);
/* select.c: the report window (ms after the selection deadline) of task @t's round @round_no:
 * its report_deadline_ms, or the adaptive one (deadline_percentile). */
int64_t sl__report_window(sl_engine *e, const sl__task *t, int64_t round_no);
/* Devices in a round's pool come back for the draw's answer spread over a time after the
 * selection deadline, so that they do not all ask at once: two milliseconds for each device
 * the round selects (its pool holds about as many or more; the server answers about a
 * thousand ECDSA-signed check-ins a second on two cores), within [SL__SELECT_SPREAD_MIN_MS,
 * SL__SELECT_SPREAD_MS]. They are told to come back then even when that is sooner than
 * retry_after_min_ms (a rendezvous once a round, not a poll), but not sooner than
 * SL__RENDEZVOUS_MIN_MS, and once the draw is later than the spread, not sooner than
 * retry_after_min_ms again. A planned round allows for the spread. */
#define SL__SELECT_SPREAD_MS     1000
#define SL__SELECT_SPREAD_MIN_MS 100
#define SL__RENDEZVOUS_MIN_MS    50
/* select.c: the spread (ms) over which the pool of a round of a task configured as @c comes
 * back for the draw's answer. */
int64_t sl__select_spread_ms(const sl_task_config *c);

/* select.c: the planned report window (ms) of task @t's round that selected the @n devices
 * @ids, when it has time budgets and max_local_steps: the percentile (deadline_percentile,
 * or target / n) of their full windows, from the paces the store keeps, plus the spread of
 * their check-ins after the selection (sl__select_spread_ms), within
 * [min_report_deadline_ms, report_deadline_ms]; 0 in @window when no selected device's
 * pace is known or the task is not planned. SL_OK or the store's error. */
int sl__budget_plan(sl_engine *e, const sl__task *t, const int64_t *ids, size_t n, int64_t *window);

/* lifecycle.c: called with the gate held exclusively and the lock held. */
int sl__task_open_round(sl_engine *e, sl__task *t);
int sl__task_select(sl_engine *e, sl__task *t);
/* sl__task_close: aggregate the round, or abandon it for @abandon_reason
 * (NULL: abandoned only when the quorum was not met). The acknowledged
 * updates of a round abandoned for its quorum are aggregated with the next
 * round that closes on the same model version (its record says so); those
 * of a round the operator aborted (SL__ABORTED) or of a task's last round
 * are not. */
#define SL__ABORTED "aborted by the operator"
int sl__task_close(sl_engine *e, sl__task *t, const char *abandon_reason);
int sl__task_advance(sl_engine *e, sl__task *t, int64_t *next_deadline);
/* tasks.c: free a task (not in the engine's table). */
void sl__task_free(sl__task *t);
/* tasks.c: what downloads weigh and how long rounds train (down_bytes_ewma, train_ms_ewma), from
 * the task's newest SL__PACE_ROUNDS closed rounds in the store: at load and after each close. */
#define SL__PACE_ROUNDS 16
int sl__task_load_paces(sl_engine *e, sl__task *t);
