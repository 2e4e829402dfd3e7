/*
 * starling/round.h - the coordinator's round engine: task configuration,
 * the round state machine, check-in and selection with pace steering,
 * accepting updates, deterministic aggregation with server optimisers and
 * robust options, recovery after a restart, and asynchronous buffered
 * aggregation (FedBuff).
 *
 * Pure logic over the store (starling/store.h) and the codecs: no HTTP.
 * Time comes from an injectable clock, so tests drive thousands of
 * simulated devices through rounds in milliseconds.
 *
 * Every state has a deadline; sl_engine_tick() moves rounds on when their
 * deadlines pass or their targets are met. Every transition is persisted
 * through the store before it takes effect. The model after a round is a
 * pure function of the accepted updates (read in device-id order, summed in
 * double): the same bits after any restart and any arrival order.
 *
 * Thread safety: all functions may be called from any thread; accepts of
 * different devices proceed in parallel (their durable writes share group
 * commits).
 */
#ifndef STARLING_ROUND_H
#define STARLING_ROUND_H

#include <stddef.h>
#include <stdint.h>

#include "starling/codec.h"
#include "starling/common.h"
#include "starling/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Task configuration                                                       */
/* ------------------------------------------------------------------------ */

/** How accepted updates become the next model. */
typedef enum sl_aggregator {
    SL_AGG_FEDAVG = 0,  /* weighted by sample count; server lr applied to the mean */
    SL_AGG_FEDAVGM = 1, /* FedAvg with server momentum */
    SL_AGG_FEDADAM = 2, /* adaptive server optimisers (Reddi et al. 2021) */
    SL_AGG_FEDYOGI = 3,
    SL_AGG_FEDADAGRAD = 4,
    SL_AGG_TRIMMED_MEAN = 5, /* coordinate-wise, trim_fraction from each end */
    SL_AGG_MEDIAN = 6        /* coordinate-wise median */
} sl_aggregator;

/** sl_aggregator_name - "fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", ... */
const char *sl_aggregator_name(sl_aggregator a);

/** The devices' local optimiser (device/nn/include/starling/optim.h, PyTorch's semantics). */
typedef enum sl_local_optimizer {
    SL_LOCAL_SGD = 0,  /* torch.optim.SGD (momentum, Nesterov, weight decay) */
    SL_LOCAL_ADAM = 1, /* torch.optim.Adam (weight decay as L2 in the gradient) */
    SL_LOCAL_ADAMW = 2 /* torch.optim.AdamW (decoupled weight decay) */
} sl_local_optimizer;

/** sl_local_optimizer_name - "sgd", "adam", "adamw"; "?" for any other value. */
const char *sl_local_optimizer_name(sl_local_optimizer o);

/** Bytes of sl_task_config.frozen, the terminating NUL included. */
#define SL_TASK_FROZEN_MAX 1024

/** The default sender_mean_rounds of sparse FedAvg with the classic residual from 3 to 6
 * December 2026 (tasks created then name it and keep it; since, a new task fades by
 * SL_SENDER_MEAN_EPOCHS_DEFAULT), with sender_mean 1. It replaced a server rate ramp
 * (server_lr_ramp 8, server_lr_boost 3: the default for part of 3 December 2026; a task created
 * then names it and keeps it). bench fl, every device every round, 6-round runs (3 December 2026):
 * a fade of 6 reached 85% in round 4 in all of its seven runs (85.1% to 86.1%), one of 8 (the
 * default for a day) in five of seven (84.5% and 84.8% in the others), 4 in two of three, 5 in two
 * of two; 16 and a weight of 0.5 were slower; no fade fell from 78.7% in round 4 to 65% in round 6,
 * and with the ramp besides it fell to 11% in round 2 (README: Fast starts). Since 4 December a new
 * task counts those participations times their share of the task's rounds (sender_mean_share): the
 * same fade where every device reports to every round, a longer one on the demo's fleet, where
 * fades of 12 and 20 had ended higher than 6. */
#define SL_SENDER_MEAN_ROUNDS_DEFAULT 6

/** The default sender_mean_epochs of a new task with a senders' mean (config.c; since 6 December
 * 2026, with sender_mean_fresh): the fade lasts while the average device trains 60 local epochs
 * in its updates, 60 / local_epochs of them: SL_SENDER_MEAN_ROUNDS_DEFAULT's 6 participations of
 * bench fl's 10 local epochs (the same weights, bit for bit, there). With one local epoch
 * (--quick) it ended 0.58 points below dense on the mean of seeds 1-6 where 6 participations
 * ended 3.08 below, and the examples co2 and kws reached their targets sooner. Alone it cost 2-5
 * points where devices sit out rounds (test_fl_poison's logreg fleet, 7 of 10 a round), which
 * sender_mean_fresh takes back part of (README: Fast starts), and sender_mean_partial the rest. */
#define SL_SENDER_MEAN_EPOCHS_DEFAULT 60

/** The default sender_mean_partial of a new task with sender_mean_epochs (config.c; since 6
 * December 2026): where the average device reports to a share s of the rounds, the fade by local
 * epochs lasts s^5 of its length, no less than SL_SENDER_MEAN_ROUNDS_DEFAULT participations
 * (sl_sender_mean_length_share). Chosen from measurements on test_fl_poison's logreg fleet at one
 * local epoch (24 runs each, README: Fast starts): fades (with the share) of 6 / 12 / 20 / 30 /
 * 60 participations ended at 80.08 / 80.48 / 79.54 / 79.00 / 77.69% where 7 of 10 report a
 * round (s^5 x 60: 10), at 80.29 / 80.83 / 80.86 / 80.82 (35) / 80.01% where 9 of 10 do (s^5 x 60:
 * 35), while where every device reports to every round 60 did better than 6 (81.05 against
 * 80.85%; bench fl --quick: 0.58 points below dense against 3.08). Not everywhere better: lenet5
 * on bench fl's demo fleet at one epoch with 70% of the devices a round ended its rounds 10-30
 * about a point below the whole fade (3 seeds; README: Fast starts). */
#define SL_SENDER_MEAN_PARTIAL_DEFAULT 5

/** A task's configuration, as parsed and validated from JSON. */
typedef struct sl_task_config {
    char name[64];
    uint32_t rounds;       /* rounds to run; 0 = until stopped */
    uint32_t target;       /* K: reports that close a round early */
    double over_selection; /* devices selected = ceil(K * this); >= 1 (default 1.3) */
    uint32_t quorum;       /* minimum reports at the deadline (absolute, after parsing) */
    int64_t selection_window_ms;
    int64_t report_deadline_ms; /* from the end of selection */
    int64_t cooldown_ms;        /* a device rests this long after participating */
    uint32_t min_samples;       /* eligibility */
    char required_caps[128];    /* eligibility: a capability name the device must report */
    /* handed to devices */
    sl_value_mode values;
    double density;
    sl_topk_scope topk_scope;         /* where devices take top-k (default model) */
    sl_error_feedback error_feedback; /* what device residuals keep (default residual) */
    double residual_decay; /* the residual's factor each round (0.9 with residual, 1 tracking) */
    uint32_t warmup_rounds;
    double warmup_density;
    uint32_t local_epochs, batch;
    double local_lr, local_momentum, prox_mu;
    /* the local optimiser (config.c's table gives ranges, defaults and cross-field rules) */
    sl_local_optimizer local_optimizer; /* default SGD */
    int local_nesterov;                 /* SGD: Nesterov momentum (needs local_momentum > 0) */
    double local_weight_decay;          /* L2 (sgd, adam) or decoupled (adamw); >= 0 */
    double local_betas[2];              /* adam, adamw (0.9, 0.999) */
    double local_eps;                   /* adam, adamw (1e-8) */
    double local_clip_norm;             /* the gradient's global L2 norm bound; 0 = off */
    /* frozen parameters: tensor names or module prefixes (optim.h, sl_optim_mask_layout),
     * joined by commas (a layout name has none); "" when nothing is frozen */
    char frozen[SL_TASK_FROZEN_MAX];
    int local_norm; /* FedBN: normalisation layers' parameters stay on each device */
    /* aggregation */
    sl_aggregator aggregator;
    double server_lr; /* default 1 */
    /* the server learning rate times server_lr_boost at the first aggregate, the factor
     * moving linearly to 1 over the first server_lr_ramp aggregates (sl_server_lr_at): sparse
     * updates' mean moves the model less than dense ones', most at the start; ramp 0 = off */
    double server_lr_boost;  /* default 3 */
    uint32_t server_lr_ramp; /* default 0 */
    /* each coordinate's mean over the updates that sent it, weighted sender_mean at the
     * first aggregate against the mean over all updates, the weight moving linearly to 0
     * over the first sender_mean_rounds participations of the average device
     * (sl_sender_mean_at): a coordinate one
     * device of ten sent moves by its value, not a tenth of it; rounds 0 = off */
    double sender_mean; /* default 1 */
    /* the fade's length in participations of the average device; 0 by default (a new task
     * fades by sender_mean_epochs; tasks created from 3 to 6 December 2026 got
     * SL_SENDER_MEAN_ROUNDS_DEFAULT, which their stored configuration keeps) */
    uint32_t sender_mean_rounds;
    /* 1: the fade counts the average device's participations times the share of the task's
     * rounds it took part in (sl_sender_mean_progress): on a fleet where every device reports
     * to every round, its participations; where it reports to one round in 2.5, longer.
     * Default 1 in a new task with a senders' mean; a stored task without the key keeps 0 */
    int sender_mean_share;
    /* the fade's length in local epochs instead of participations: it lasts
     * sender_mean_epochs / local_epochs participations of the average device (sl_sender_mean_
     * length); exclusive with sender_mean_rounds. Default SL_SENDER_MEAN_EPOCHS_DEFAULT for
     * sparse FedAvg with the classic residual (not FedBuff, no server_lr_ramp or dp_noise)
     * unless the task sets sender_mean_rounds, else 0; a stored task without the key keeps 0 */
    uint32_t sender_mean_epochs;
    /* 1: an aggregate that takes an update from a device the last aggregate did not take (it
     * missed it, or it is new) leaves the coordinates the last aggregate's updates sent out of
     * the senders' mean (each divided by all the weights): such a device's residual may still
     * hold mass that aggregate already moved, which the senders' mean would magnify. Default 1
     * in a new task with a senders' mean; a stored task without the key keeps 0 */
    int sender_mean_fresh;
    /* k: where the average device reports to a share s < 1 of the task's rounds, the fade by
     * sender_mean_epochs lasts s^k of its length, no less than SL_SENDER_MEAN_ROUNDS_DEFAULT
     * participations, and counts them times s as sender_mean_share does
     * (sl_sender_mean_length_share, sl_sender_mean_weight): a fleet whose devices sit out rounds
     * needs a shorter fade than one whose devices train every round; sender_mean_fresh's rule
     * then applies only where that fade is longer than its floor (sl_sender_mean_fresh_at).
     * 0 = off; only with sender_mean_epochs. Default SL_SENDER_MEAN_PARTIAL_DEFAULT in a new
     * task with sender_mean_epochs; a stored task without the key keeps 0 */
    uint32_t sender_mean_partial;
    double server_momentum;   /* FedAvgM beta (default 0.9) */
    double beta1, beta2, tau; /* FedAdam/Yogi/Adagrad (defaults 0.9, 0.99, 1e-3) */
    double clip_norm;         /* per-update L2 clipping; 0 = off */
    double trim_fraction;     /* trimmed mean: fraction cut at each end, [0, 0.5) */
    double dp_noise; /* DP-FedAvg: Gaussian sigma = dp_noise * clip_norm / reports; 0 = off */
    double max_update_norm; /* reject updates with a larger L2 norm; 0 = no bound */
    uint64_t seed;          /* selection and noise */
    /* asynchronous buffered mode */
    int fedbuff; /* 1: no rounds; aggregate every buffer_size accepted updates */
    uint32_t buffer_size;
    uint32_t max_staleness;
    /* FedNova: each update divided by its effective local steps, the mean rescaled
     * (coordinator/aggregate.c); 0: FedAvg's weighting by samples */
    int fednova;
    /* time budgets: a selected device trains as many steps as fit before the deadline at its
     * pace, between min_local_steps and max_local_steps (0: local_epochs' worth). Such a
     * round is planned at its selection (coordinator/select.c): its report window becomes a
     * percentile of the selected devices' full windows (sl_engine_full_window: download,
     * max_local_steps, upload at the pace each last reported) - deadline_percentile, or
     * target / selected when that is 0 - plus the second over which the selected devices
     * come back for their answer, within [min_report_deadline_ms,
     * report_deadline_ms], and it closes when every selected device has reported (or at
     * that deadline), not at its target: the devices slower than the plan train fewer
     * steps instead of being cut off, so no computed update is left out. A round whose
     * selected devices' paces are all unknown (the first) closes at its target as without
     * budgets. */
    int time_budget;
    uint32_t min_local_steps, max_local_steps;
    /* selection that knows the fleet (coordinator/select.c): prefer devices that report in
     * time; every eligible device selected at least once in fairness_rounds rounds (0: off) */
    int paced_selection;
    uint32_t fairness_rounds;
    /* adaptive deadline: a round's report window is this percentile of the updates' delays
     * after selection over the last deadline_rounds rounds, times 1.25, within
     * [min_report_deadline_ms, report_deadline_ms] (0: off, the fixed report_deadline_ms);
     * under time budgets, the percentile of the selected devices' full windows instead */
    uint32_t deadline_percentile;
    uint32_t deadline_rounds;
    int64_t min_report_deadline_ms;
    /* retention (sl_store_retain_models): after each close the bytes of every version but the
     * latest retain_last, every retain_every-th, version 1 and the open round's base are
     * retired; their records (digest, metrics) stay. 0: every version kept (the default) */
    uint32_t retain_last, retain_every;
} sl_task_config;

/**
 * sl_task_config_parse - parse and validate a task's JSON configuration.
 * Unknown keys, wrong types, out-of-range values and inconsistent ones
 * (quorum above target, ...) are errors: SL_ECONFIG_KEY or
 * SL_ECONFIG_VALUE, with a message naming the key in @err. "quorum" may be
 * an integer or a fraction of target strictly inside (0, 1) (1 means one
 * report). "seed" above 2^53 is written as a decimal string. Defaults fill
 * the rest.
 */
int sl_task_config_parse(const char *json, size_t len, sl_task_config *out, char *err,
                         size_t errcap);

/**
 * sl_task_config_parse_stored - the same for a configuration a coordinator
 * stored (its canonical JSON, which names every key it knew): a key the
 * text lacks was added after the task was created and takes the behaviour
 * the task was created with, not today's default, so an upgrade does not
 * change how a running task aggregates (server_lr_ramp: 0; sender_mean_rounds:
 * SL_SENDER_MEAN_ROUNDS_DEFAULT where a new task of then had it; sender_mean_share and
 * sender_mean_fresh: false).
 */
int sl_task_config_parse_stored(const char *json, size_t len, sl_task_config *out, char *err,
                                size_t errcap);

/** sl_task_config_to_json - the canonical JSON of a configuration (malloc'd). */
int sl_task_config_to_json(const sl_task_config *c, char **out);

/**
 * sl_task_config_check_layout - the rules of a configuration that need the
 * task's parameter layout: every "frozen" entry must name a tensor of
 * @layout or a module prefix of one ("fc1" or "fc1." for "fc1.weight"), as
 * the devices' sl_optim_mask_layout() reads them. Returns SL_OK,
 * SL_ECONFIG_VALUE with a message naming the entry in @err (may be NULL),
 * SL_EINVAL for NULL @c or @layout. Thread-safe.
 */
int sl_task_config_check_layout(const sl_task_config *c, const sl_layout *layout, char *err,
                                size_t errcap);

/* ------------------------------------------------------------------------ */
/* Aggregation (pure functions, also used by tests as references)           */
/* ------------------------------------------------------------------------ */

/**
 * Server state stored with a model version: the optimiser's one or two vectors of the
 * model's size, and for the senders' mean's sender_mean_fresh (#23) what the aggregate that
 * made the version took: the coordinates its updates sent and the devices they came from
 * (all malloc'd).
 */
typedef struct sl_server_state {
    size_t n;
    double *m; /* momentum / first moment, or NULL */
    double *v; /* second moment (Adam/Yogi/Adagrad), or NULL */
    uint64_t steps;
    uint8_t *carried; /* n bits (coordinate i: byte i / 8, bit i % 8), or NULL */
    int64_t *devices; /* ascending; with carried */
    size_t ndevices;
} sl_server_state;

/** sl_server_state_free - release the vectors. */
void sl_server_state_free(sl_server_state *st);

/**
 * sl_server_state_encode / _decode - the opaque bytes stored with a model
 * version (starling/store.h's opt_state), so a restart continues the
 * optimiser exactly (format: server.c). Encode: SL_EINVAL for vectors or a
 * carried section without n, or devices not strictly ascending; SL_ENONFINITE
 * for a non-finite vector element. Decode: SL_EMAGIC, SL_EVERSION,
 * SL_ETRUNCATED, SL_ECHECKSUM, SL_ECORRUPT (flags, a negative second moment,
 * carried bits past n, device ids out of order), SL_ENONFINITE, SL_ELAYOUT
 * (the state of another model size); @out is untouched on error.
 */
int sl_server_state_encode(const sl_server_state *st, void **out, size_t *len);
int sl_server_state_decode(const void *buf, size_t len, size_t n, sl_server_state *out);

/**
 * sl_server_apply - apply the server optimiser of @cfg to @model (n floats)
 * given the aggregated pseudo-gradient @delta (the weighted mean update, in
 * double): FedAvg: w += lr * delta; FedAvgM: m = beta m + delta, w += lr m;
 * FedAdam/Yogi/Adagrad as in "Adaptive Federated Optimization". @st is
 * created on first use and updated; it may be NULL for FedAvg and the
 * robust aggregators. A state for another n: SL_EINVAL. A NaN/Inf delta or
 * a float overflow: SL_ENONFINITE, nothing changed.
 */
int sl_server_apply(const sl_task_config *cfg, const double *delta, size_t n, float *model,
                    sl_server_state *st);

/**
 * sl_server_lr_at - the server learning rate of the aggregate that makes
 * version @version + 1 from @version (version 1 is the initial model, so
 * the first aggregate is k = 1): with server_lr_ramp R > 0, server_lr * (B +
 * (1 - B) * (k - 1) / R) for k <= R, B the server_lr_boost, and server_lr
 * from then on; server_lr when R is 0. A function of the version alone, so
 * a restarted coordinator or a new leader applies the same rate.
 */
double sl_server_lr_at(const sl_task_config *cfg, int64_t version);

/**
 * sl_sender_mean_at - the weight of the senders' mean in an aggregate at
 * which the task's devices have made @participations acknowledged updates
 * each on average (the task's acknowledged updates, this aggregate's
 * included, over the devices that made them; below 1 counts as 1): with
 * R = sl_sender_mean_length() > 0, sender_mean * (1 - (p - 1) / R) for
 * p <= R + 1, and 0 from then on; 0 when R is 0. When every device reports to every
 * round, p is the aggregate's number k (version k makes k + 1), so the
 * weight fades over R aggregates; when a device takes part in one round in
 * 2.5, over 2.5 R. What makes the senders' mean overshoot is a device's own
 * residual grown over its participations, not the rounds the others ran.
 * Each coordinate j of the FedAvg mean is then sum_i w_i u_ij / ((1 - a) W +
 * a S_j), W the sum of the weights and S_j that of the updates that sent j
 * (sl__agg_finish). The engine counts p from the store's device history, so a
 * restarted coordinator or a new leader uses the same weight.
 */
double sl_sender_mean_at(const sl_task_config *cfg, double participations);

/**
 * sl_sender_mean_length - R, the participations of the average device over
 * which the senders' mean fades (sl_sender_mean_at): sender_mean_epochs /
 * local_epochs when the task sets sender_mean_epochs, else
 * sender_mean_rounds; 0 when the task has no senders' mean (either is 0 or
 * sender_mean is 0). A participation of few local epochs moves a device's
 * model less from the global one, so its update stays nearer the other
 * devices' and the mean over a coordinate's senders stays right for more of
 * them: bench fl with one local epoch ended 0.67 points below dense with a
 * fade of 60 participations and 3.33 below with 6, while with ten epochs 6
 * reached 85% sooner than 8 or 12; but test_fl_poison's logreg fleet, with
 * one epoch of 13 steps and 7 of 10 devices a round, ended 3-7 points lower
 * with 60 than with 6: where devices sit out rounds, the engine shortens it
 * (sender_mean_partial, sl_sender_mean_length_share; README: Fast starts).
 * The length where every device reports to every round.
 */
double sl_sender_mean_length(const sl_task_config *cfg);

/**
 * sl_sender_mean_progress - how far the senders' mean's fade has gone at the
 * aggregate of round @round_no (the task's round number, 1 for its first)
 * when the task's devices have made @participations acknowledged updates each
 * on average (as for sl_sender_mean_at, which takes the result): p itself
 * without sender_mean_share or sender_mean_partial, else p times the share
 * s = p / @round_no of the task's rounds the average device reported to (s at
 * most 1). When every
 * device reports to every round p is @round_no, s is 1 and the progress is p
 * (the same bits); when a device reports to one round in 2.5, s is 0.4 and
 * the fade of R participations lasts 2.5 R of them instead of R, about 6.25 R
 * rounds instead of 2.5 R. Chosen from measurements, not derived: bench fl's
 * demo fleet ended higher with fades of 12-20 participations than of 6
 * (README: Fast starts), while on the first fleet 6 reached 85% sooner.
 * @round_no below 1 counts as 1, @participations below 1 as 1 (NaN too).
 */
double sl_sender_mean_progress(const sl_task_config *cfg, double participations, int64_t round_no);

/**
 * sl_sender_mean_length_share - the fade's length R' in participations at an
 * aggregate where the average device reported to a share @share of the task's
 * rounds (p / round_no, as in sl_sender_mean_progress; above 1 or NaN counts
 * as 1, below 0 as 0): with R = sl_sender_mean_length() and k = the task's
 * sender_mean_partial, R' = R * share^k (k multiplications), raised to
 * SL_SENDER_MEAN_ROUNDS_DEFAULT where it falls below it and never above R;
 * R itself when k is 0 or the share is 1. So a fleet where every device
 * reports to every round keeps its fade bit for bit, and one where devices sit
 * out rounds gets a shorter one: with k = 5 and R = 60, a share of 0.9 fades
 * over 35 participations, 0.7 over 10, 0.4 over 6.
 */
double sl_sender_mean_length_share(const sl_task_config *cfg, double share);

/**
 * sl_sender_mean_weight - the senders' mean's weight in the aggregate of round
 * @round_no when the task's devices have made @participations acknowledged
 * updates each on average (as for sl_sender_mean_at): the weight of
 * sl_sender_mean_at() at sl_sender_mean_progress(), over the length
 * sl_sender_mean_length_share() gives for the share p / @round_no; with
 * sender_mean_partial the progress counts that share as sender_mean_share
 * does. A task without sender_mean_partial gets sl_sender_mean_at(cfg,
 * sl_sender_mean_progress(cfg, p, round_no)) bit for bit. What the engine
 * uses at each aggregate, from the store's device history.
 */
double sl_sender_mean_weight(const sl_task_config *cfg, double participations, int64_t round_no);

/**
 * sl_sender_mean_fresh_at - whether sender_mean_fresh's rule applies to the
 * aggregate of round @round_no at @participations (as for
 * sl_sender_mean_weight): 0 without sender_mean_fresh or a senders' mean; 1
 * with them and without sender_mean_partial; with sender_mean_partial, 1 only
 * where the fade sl_sender_mean_length_share() gives is longer than
 * SL_SENDER_MEAN_ROUNDS_DEFAULT participations (with k = 5 and 60: a share
 * above 0.63). A short fade leaves little stale mass to magnify, and leaving
 * the last support out there measured worse (README: Fast starts).
 */
int sl_sender_mean_fresh_at(const sl_task_config *cfg, double participations, int64_t round_no);

/* ------------------------------------------------------------------------ */
/* The engine                                                               */
/* ------------------------------------------------------------------------ */

/** The engine. Opaque. */
typedef struct sl_engine sl_engine;

/** Engine options. */
typedef struct sl_engine_options {
    const sl_clock *clock;      /* NULL: the system clock */
    sl_decode_limits limits;    /* for incoming frames */
    int64_t retry_after_min_ms; /* pace steering bounds (defaults 1 s .. 5 min) */
    int64_t retry_after_max_ms;
    /* Replicas sharing the store (coordinator/replica.c): this replica's name (1 to
     * SL_STORE_MAX_OWNER - 1 bytes, unique among them); NULL when this engine is the only
     * coordinator of its store, which then always leads. */
    const char *replica;
    int64_t lease_ms; /* the leader's lease: a dead leader is replaced within about this
                         plus a tick (default 5000) */
} sl_engine_options;

/** sl_engine_options_default - the defaults. */
void sl_engine_options_default(sl_engine_options *o);

/**
 * sl_engine_open - an engine over @store. Recovery happens here: rounds
 * found SELECTING or TRAINING resume with their original deadlines (or are
 * closed or abandoned at once when those passed); AGGREGATING is redone.
 * @store must outlive the engine.
 */
int sl_engine_open(sl_store *store, const sl_engine_options *o, sl_engine **out, char *err,
                   size_t errcap);

/**
 * sl_engine_role - whether this engine runs round transitions (*@leader 1:
 * it leads its replicas, or it is the only coordinator of its store), its
 * fencing epoch while it leads (0 without replicas), and how many times it
 * became the leader. Any output may be NULL.
 */
int sl_engine_role(sl_engine *e, int *leader, uint64_t *epoch, uint64_t *promotions);

/**
 * sl_engine_models_retired - how many model versions the retention of this engine's closes
 * retired since it opened (tasks with "retain_last"; sl_store_retain_models()).
 */
uint64_t sl_engine_models_retired(sl_engine *e);

/**
 * sl_engine_updates_retired - how many stored updates the retention of this engine's closes
 * took the bytes of since it opened (tasks with "retain_last"; sl_store_retain_updates()).
 */
uint64_t sl_engine_updates_retired(sl_engine *e);

/**
 * sl_engine_close - NULL is a no-op. Does not close the store, which must
 * still be open: a replica writes once more what it served of rounds that
 * ended while the store refused it (logged when it still does).
 */
void sl_engine_close(sl_engine *e);

/**
 * sl_engine_create_task - store a task from its JSON configuration, its
 * parameter layout (text form, codecs/FORMAT.md) and initial model (a
 * full-model frame for that layout, stored as version 1), and open its
 * first round on the next tick. Errors as sl_task_config_parse(),
 * sl_layout_parse() and the frame decoder (the model must decode, be
 * finite and match the layout: SL_ELAYOUT).
 */
int sl_engine_create_task(sl_engine *e, const char *config_json, const char *layout_text,
                          const void *model_frame, size_t frame_len, int64_t *task_id, char *err,
                          size_t errcap);

/**
 * sl_engine_create_task_spec - sl_engine_create_task() with the task's model
 * spec (JSON text, device/nn/MODEL_SPEC.md; NULL for none). The engine checks
 * only the layout it implies: format version 1, "params" naming the layout's
 * tensors in order with their shapes (SL_ESPEC, @err starting "model_spec:");
 * agents check the rest. Stored as given; check-ins carry its SHA-256.
 */
int sl_engine_create_task_spec(sl_engine *e, const char *config_json, const char *layout_text,
                               const char *model_spec, const void *model_frame, size_t frame_len,
                               int64_t *task_id, char *err, size_t errcap);

/**
 * sl_engine_create_task_docs - sl_engine_create_task_spec() with the task's
 * data contract too (JSON text, device/data/DATA_CONTRACT.md; NULL for
 * none): parsed and checked in full (SL_ESPEC, @err starting
 * "data_contract:", nothing stored). Stored as given; check-ins carry its
 * SHA-256, and a device with fewer samples than its min_samples is not
 * selected.
 */
int sl_engine_create_task_docs(sl_engine *e, const char *config_json, const char *layout_text,
                               const char *model_spec, const char *data_contract,
                               const void *model_frame, size_t frame_len, int64_t *task_id,
                               char *err, size_t errcap);

/** What a device reports about itself when it checks in. */
typedef struct sl_checkin_info {
    uint32_t num_samples;
    char capabilities[256]; /* comma-separated names */
    char refusal[256];      /* why it cannot train the task's model (its limits); "" when it can */
    /* its pace as it measured it (0: not measured): one optimiser step of the task's model,
     * upload and download bytes per second. Kept in the store (time budgets). */
    double step_ms, up_bps, down_bps;
} sl_checkin_info;

/** The answer to a check-in. */
typedef struct sl_checkin_result {
    int selected; /* 1: take part in round_id */
    int64_t task_id, round_id, round_no;
    int64_t model_version;         /* the version to train from */
    int64_t report_deadline_ms;    /* wall-clock ms */
    int64_t retry_after_ms;        /* when not selected: come back after this long */
    uint32_t participation;        /* rounds of this task the device took part in before this
                                      one: selected it, or (FedBuff) took its update
                                      (sl_store_device_rounds; the density warm-up's step) */
    char model_spec_sha256[65];    /* hex SHA-256 of the task's model spec; "" when it has none */
    char data_contract_sha256[65]; /* hex SHA-256 of the task's data contract; "" for none */
    int refusal_changed;           /* the device began or stopped refusing: record it (the store's
                                      sl_store_set_refusal(); the engine keeps only who refuses) */
    uint32_t max_steps; /* selected, task with time_budget: train at most this many steps (the
                           time until the round likely closes, its deadline or sooner when
                           rounds have been closing at their target, at the device's pace);
                           0: the task's epochs */
} sl_checkin_result;

/**
 * sl_engine_budget_steps - the steps a device of pace @step_ms (0: unknown),
 * @up_bps and @down_bps (0: unknown) can train for task @cfg, whose model has
 * @params parameters and downloads as @down_bytes (0: @params in fp32; the
 * engine passes what closed rounds' downloads averaged, deltas included),
 * between now @now_ms and the report deadline @deadline_ms: the time left
 * less the model's download, the update's upload and a margin (a tenth of
 * the time left, at least 250 ms), over the step time, within
 * [min_local_steps, max_local_steps]. 0 when the task has no time budget.
 * Unknown speeds count as 1 MB/s (down) and 100 kB/s (up); an unknown step
 * time gives max_local_steps (0: the task's epochs).
 */
uint32_t sl_engine_budget_steps(const sl_task_config *cfg, uint64_t params, uint64_t down_bytes,
                                int64_t now_ms, int64_t deadline_ms, double step_ms, double up_bps,
                                double down_bps);

/**
 * sl_engine_full_window - the report window (ms after selection) in which a
 * device of pace @step_ms, @up_bps and @down_bps (0: unknown, counted as in
 * sl_engine_budget_steps) downloads the model of @params parameters
 * (@down_bytes, as there), trains the task's max_local_steps and uploads,
 * with sl_engine_budget_steps's margin: a window at least this long gives it
 * its whole max_local_steps. 0 when the task has no time budget or no
 * max_local_steps, or the step time is unknown. A time-budget round's window
 * is a percentile of its selected devices' full windows (see
 * sl_task_config.time_budget).
 */
int64_t sl_engine_full_window(const sl_task_config *cfg, uint64_t params, uint64_t down_bytes,
                              double step_ms, double up_bps, double down_bps);

/**
 * sl_engine_checkin - a device asks for work. A device already selected in
 * the open round gets the same assignment again (idempotent). Others are
 * selected at random (seeded) while the round is SELECTING and has room,
 * if eligible and not cooling down; otherwise they get a retry_after that
 * spreads the next check-ins over the next selection window. A device that
 * gives a refusal is never selected (and leaves the pool) until a check-in
 * without one.
 */
int sl_engine_checkin(sl_engine *e, int64_t task_id, int64_t device_id, const sl_checkin_info *info,
                      sl_checkin_result *out);

/** Why an update was not accepted (stable; the REST API maps them to problem types). */
typedef enum sl_reject_reason {
    SL_REJECT_NONE = 0,
    SL_REJECT_UNKNOWN_ROUND = 1,
    SL_REJECT_LATE = 2, /* the round closed: fold the update into the residual */
    SL_REJECT_NOT_SELECTED = 3,
    SL_REJECT_LAYOUT = 4,    /* frame for another layout or base version */
    SL_REJECT_MALFORMED = 5, /* the frame does not decode */
    SL_REJECT_NONFINITE = 6,
    SL_REJECT_NORM = 7,               /* L2 norm above max_update_norm */
    SL_REJECT_DUPLICATE_CONFLICT = 8, /* a different update from this device this round */
    SL_REJECT_STALE = 9,              /* FedBuff: older than max_staleness */
    SL_REJECT_RANGE = 10,             /* a value at or above the aggregation's fixed-point bound */
    SL_REJECT_STEPS = 11,    /* local_steps beyond sl_engine_steps_limit(), or for FedNova none or
                              * beyond its sums' bound */
    SL_REJECT_REFERENCE = 12 /* a split update (codecs/FORMAT.md) against a version the store no
                              * longer keeps, or whose support is not the one of its versions:
                              * the device folds it */
} sl_reject_reason;

/** The number of sl_reject_reason values (SL_REJECT_NONE included). */
#define SL_REJECT_REASONS 13

/** sl_reject_reason_name - "late", "not_selected", ... (stable identifiers). */
const char *sl_reject_reason_name(sl_reject_reason r);

/** The answer to an upload. */
typedef struct sl_accept_result {
    int accepted;            /* 1: durable and counted (or a retry of one that was) */
    sl_reject_reason reason; /* when not accepted */
    sl_store_receipt receipt;
} sl_accept_result;

/**
 * sl_engine_accept - validate an update (round, selection, layout, frame,
 * finiteness, norm), store it durably, count it. Returns SL_OK with
 * @out->accepted or a reason; other statuses are storage failures (nothing
 * acknowledged).
 */
int sl_engine_accept(sl_engine *e, int64_t round_id, int64_t device_id, const void *frame,
                     size_t len, uint32_t num_samples, const uint8_t *sha256,
                     sl_accept_result *out);

/**
 * sl_engine_accept_steps - sl_engine_accept() with the local steps the
 * device ran for the update (0: not reported): stored with it, and what a
 * task with "fednova" scales the mean by. An update that reports more steps
 * than sl_engine_steps_limit() allows, or (FedNova) none, or (FedNova) so
 * many that their effective steps reach the bound of the aggregation's
 * fixed-point sums (2^30: about 10^8 steps of SGD at momentum 0.9, 10^6 at
 * 0.999), is refused with SL_REJECT_STEPS, never acknowledged and then left
 * out: a device claiming a million steps would otherwise multiply FedNova's
 * move by its claim.
 */
/**
 * sl_engine_steps_limit - the most local steps an update of a task with
 * @cfg may report: max_local_steps under a time budget that sets one (the
 * device is told at most that many), SL_ENGINE_MAX_STEPS otherwise (a
 * device may run more epochs than the task's; the agent's "epochs").
 */
uint32_t sl_engine_steps_limit(const sl_task_config *cfg);

/** The most local steps any update may report (max_local_steps' bound). */
#define SL_ENGINE_MAX_STEPS 1000000u

int sl_engine_accept_steps(sl_engine *e, int64_t round_id, int64_t device_id, const void *frame,
                           size_t len, uint32_t num_samples, uint32_t local_steps,
                           const uint8_t *sha256, sl_accept_result *out);

/**
 * sl_engine_tick - advance every task by the clock: close selection
 * windows, close rounds whose target is met or whose deadline passed
 * (aggregate if the quorum is met, else abandon), open the next round.
 * Call it periodically (the coordinator does, every 100 ms) and after
 * accepts. @next_deadline_ms receives the earliest pending deadline
 * (wall-clock ms, INT64_MAX when none), so the caller knows when to tick.
 */
int sl_engine_tick(sl_engine *e, int64_t *next_deadline_ms);

/**
 * sl_engine_update_limit - the most bytes an update frame for the open
 * round @round_id can take: a dense fp32 update of its task's model with
 * every position named (4 bytes and an eighth a parameter, 64 bytes a
 * tensor, 4 KiB besides), what the upload API reserves at most for one
 * session. SL_ENOENT when no task this engine holds has that round open.
 */
int sl_engine_update_limit(sl_engine *e, int64_t round_id, uint64_t *max_bytes);

/**
 * sl_engine_upload_allowed - whether device @device_id may begin an upload
 * for round @round_id, asked before the upload API reserves a session's
 * space: *@why receives SL_REJECT_NOT_SELECTED when this engine knows that
 * round is open and the device is not one of its participants (a round
 * still selecting, or a training round that did not select it; FedBuff's
 * rounds take any device), else SL_REJECT_NONE, including for a round this
 * engine does not hold open (the completion decides, as for any update).
 * Reads only. Returns SL_OK, or SL_EINVAL.
 */
int sl_engine_upload_allowed(sl_engine *e, int64_t round_id, int64_t device_id,
                             sl_reject_reason *why);

/** A task's state now. */
typedef struct sl_task_status {
    int64_t task_id;
    sl_task_config cfg;
    int64_t model_version; /* the latest */
    int round_open;        /* round is the open round (else the last one, or zeroed) */
    int finished;          /* all configured rounds ran */
    sl_round_record round;
    uint32_t checked_in; /* in the open round */
} sl_task_status;

/** sl_engine_task_status - the task's configuration, model version and current round. */
int sl_engine_task_status(sl_engine *e, int64_t task_id, sl_task_status *out);

/** Statistics of one round, for the API and the dashboard. */
typedef struct sl_round_stats {
    sl_round_record round;
    uint32_t checked_in;
    uint32_t downloaded; /* devices that fetched the model in the open round */
    /* Open round only (0 once it ended): devices that fetched the model and have
     * no acknowledged update yet (training), and selected devices that have
     * neither fetched the model nor reported (downloading, or not started). */
    uint32_t training;
    uint32_t downloading;
    uint32_t rejected_by_reason[SL_REJECT_REASONS];
    double compression_vs_dense;     /* dense fp32 bytes / received bytes */
    int64_t time_to_quorum_ms;       /* -1 when not reached */
    double mean_loss, mean_accuracy; /* = eval.loss, eval.accuracy (NaN if none) */
    sl_store_eval_sum eval; /* the devices' evaluation of the base model (federated evaluation) */
} sl_round_stats;

/** sl_engine_round_stats - statistics of a round (open or finished). */
int sl_engine_round_stats(sl_engine *e, int64_t round_id, sl_round_stats *out);

/**
 * sl_engine_report_metrics - sl_engine_report_eval() of a loss and an
 * accuracy.
 */
int sl_engine_report_metrics(sl_engine *e, int64_t task_id, int64_t version, int64_t device_id,
                             double loss, double accuracy, uint32_t samples);

/**
 * sl_engine_report_eval - metrics of model @version of task @task_id.
 * An evaluator's (@device_id 0) become the version's own (the store's
 * model metrics). A device's are its federated evaluation of the base model
 * of the open round it was selected for, on its held-out samples: stored
 * with the round (sl_store_put_eval()), aggregated in sl_engine_round_stats().
 * @ev: samples > 0, a finite loss >= 0, and at least one of accuracy (in
 * [0, 1]), mae, rmse (finite, >= 0); NaN for a metric the loss has not.
 * Returns SL_OK, SL_EINVAL (values), SL_ENOENT (no such task), SL_ESTATE (a
 * device not selected in an open round of that base version), SL_ECONFLICT
 * (the device reported other values for the round), or a storage error.
 */
int sl_engine_report_eval(sl_engine *e, int64_t task_id, int64_t version, int64_t device_id,
                          const sl_store_eval *ev);

/**
 * sl_engine_count_download - add @bytes (model bytes device @device_id
 * received: a full model, a delta or a range of one) to the bytes_down of
 * @task_id's open round, and count the device among the round's downloaded
 * devices (once, when @device_id > 0). Kept in memory under the engine lock and persisted with the
 * round's next write (selection, close); a crash before it loses the count,
 * never anything else. Does not block on storage.
 * Returns SL_OK (counted), SL_ESTATE (no open round: not counted),
 * SL_ENOENT (no such task), SL_EINVAL (@e NULL). Thread-safe.
 */
int sl_engine_count_download(sl_engine *e, int64_t task_id, int64_t device_id, uint64_t bytes);

/**
 * sl_engine_abort_round - an operator ends the open round: ABANDONED, the
 * model unchanged, the next round opens. SL_ESTATE when it already ended.
 */
int sl_engine_abort_round(sl_engine *e, int64_t round_id);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_ROUND_H */
