/*
 * starling/agent.h - the device agent: enrol, check in, download the model,
 * train on local data, compress the update with error feedback, upload it
 * resumably, and keep every piece of state in a directory so that a kill at
 * any instant loses nothing acknowledged and sends nothing twice.
 *
 * One sl_agent is one device: one state directory, one key, one residual.
 * The program `starling-agent` (device/agent/main.c) is a thin shell over
 * this header; the fleet simulator runs N agents in one process through the
 * same code and real HTTP; the evaluator is an agent that holds the test
 * split and reports metrics for every model version.
 *
 * State directory (every file replaced with sl_fs_write_atomic(), so it
 * holds the old or the new content, never a mix):
 *   device.key           P-256 private key (PEM, mode 0600)
 *   device.id            the id the coordinator gave at enrolment
 *   model.frame          full-model frame of the version held (the cache)
 *   model.version        "version=<v>" and "task=<t>" of that frame (written
 *                        after it; the cache is used only when they agree)
 *   model.support        the coordinates the delta that brought the held
 *                        version changed, and the version it came from: the
 *                        next update's positions are coded against them
 *                        (split frames, codecs/FORMAT.md); none after a
 *                        whole model
 *   model.partial        the download in progress: its path, ETag and the
 *                        bytes so far (appended range by range; a restart
 *                        continues with Range + If-Range, the SHA-256 is
 *                        checked at the end)
 *   model_spec.json      the task's model spec as the coordinator served it
 *                        (checked against the check-in's SHA-256 before use)
 *   residual             committed error-feedback residual (+ momentum),
 *                        tagged with the pending generation it resolved
 *   local                the device's own values of the task's local tensors
 *                        (FedBN: "local" params, local_norm), kept across rounds
 *   pending/frame        the update frame being delivered
 *   pending/accumulated  residual + delta the frame was made from
 *   pending/support      a split frame's support (the one the frame was coded
 *                        against, while model.support moves on)
 *   pending/upload       upload id, acknowledged offset
 *   pending/meta         round, task, versions, digests: written last, so
 *                        a pending upload exists exactly when it does
 *   counters             participations, outcomes, last round, bandwidth
 *   acks.log             append-only, fsync'd: one line per acknowledged
 *                        update ("gen= round= update= device= sha256= dup=")
 *   evaluated            (evaluator) the last version reported
 *   audit/trained.<gen>  (tests, sl_agent_options.audit) sum of the updates
 *                        trained up to generation <gen>
 * Temporary files of writes a kill interrupted ("<name>.tmp.<pid>.<n>") are
 * removed by sl_agent_create().
 * The byte formats are described in device/agent/state.c.
 *
 * Conventions: SL_OK or a negative sl_status; outputs untouched on error.
 * Calls that talk to the coordinator block (bounded by the client's
 * timeouts and retry budget). An sl_agent is not thread-safe, except
 * sl_agent_stop(); distinct agents may run on distinct threads.
 */
#ifndef STARLING_AGENT_H
#define STARLING_AGENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"
#include "starling/contract.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Local data                                                               */
/* ------------------------------------------------------------------------ */

/**
 * The training samples of one or more simulated clients: a compact copy
 * of just their images (normalised like sl_data_load_fashion_mnist()).
 * Opaque; read-only once loaded, so agents on several threads may share it.
 */
typedef struct sl_agent_data sl_agent_data;

/**
 * sl_agent_data_load - read the Fashion-MNIST training split from @dir
 * (NULL: the STARLING_FASHION_MNIST_DIR environment variable, else the
 * Debian path), split it among @of clients by @spec (sl_partition_create():
 * "iid", "dirichlet:<a>", "shards:<s>", "quantity:<b>"; NULL: one client
 * holding everything, @of must be 1), and keep the samples of clients
 * @first .. @first + @count - 1 only. The image file is streamed, so memory
 * is the kept samples plus the labels, not the whole split.
 * @seed: the partition's seed (every device of a fleet must use the same).
 * @err: one line on failure (may be NULL).
 * Returns SL_OK, SL_EINVAL (bad spec or range), SL_ENOENT (missing files),
 * SL_EMAGIC / SL_ECORRUPT / SL_ETRUNCATED (bad IDX files), SL_ENOMEM.
 */
int sl_agent_data_load(const char *dir, const char *spec, uint32_t of, uint32_t first,
                       uint32_t count, uint64_t seed, sl_agent_data **out, char *err,
                       size_t errcap);

/**
 * sl_agent_data_load_source - the device's data from @source, split as
 * sl_agent_data_load() splits Fashion-MNIST:
 *   "idx:DIR" or "DIR" (or NULL)  Fashion-MNIST's IDX files (sl_agent_data_load())
 *   "csv:FILE?label=COLUMN&..."   a CSV file (starling/csv.h) with a header line:
 *       label=NAME (required), kind=class (default; needs classes=N) or
 *       kind=target (a regression target), skip=N lines before the header,
 *       timestamp=COLUMN (not a feature), delimiter=,|;|tab|space. Every
 *       other column is a feature, in file order. Every whole row is read; a
 *       bad one refuses the file with "no usable data: FILE: line L, column C
 *       (...): why". A regression target splits as one class (iid or by
 *       quantity; a Dirichlet split of one class is a quantity skew).
 * Errors as sl_agent_data_load(), and those of sl_csv_open() / sl_csv_read().
 */
int sl_agent_data_load_source(const char *source, const char *spec, uint32_t of, uint32_t first,
                              uint32_t count, uint64_t seed, sl_agent_data **out, char *err,
                              size_t errcap);

/**
 * sl_agent_data_load_contract - every sample of @source (starling/source.h),
 * read through data contract @c (which must outlive the data), split among
 * @of clients as sl_agent_data_load() does (class labels skew the split; a
 * regression or multi-label task splits as one class), keeping clients
 * @first .. @first + @count - 1. Each client's samples held out by the
 * contract (evaluation.share, by sample hash) are its federated-evaluation
 * samples, never trained on. For fleets and benchmarks: a device reads its
 * own source as it grows (sl_agent_options.data_source).
 * Errors: SL_EINVAL (range), the source's refusals ("no usable data: ..."),
 * SL_ENOMEM.
 */
int sl_agent_data_load_contract(const char *source, const sl_contract *c, const char *spec,
                                uint32_t of, uint32_t first, uint32_t count, uint64_t seed,
                                sl_agent_data **out, char *err, size_t errcap);

/**
 * sl_agent_data_load_test - the test split (10,000 samples) of @dir, for
 * the evaluator, as one client. Errors as sl_agent_data_load().
 */
int sl_agent_data_load_test(const char *dir, sl_agent_data **out, char *err, size_t errcap);

/** sl_agent_data_samples - samples held for @client (0 when not loaded). */
size_t sl_agent_data_samples(const sl_agent_data *d, uint32_t client);

/**
 * sl_agent_data_sample - training sample @i (0 .. sl_agent_data_samples() - 1)
 * of @client, in the order the client trains from: *@x points at its input
 * (the contract's sample_size floats, owned by @d) and @y receives its label
 * (a class index as a float, or the targets: @ycap floats of room). For
 * benchmarks that train the same split elsewhere. Returns SL_OK, or SL_EINVAL
 * (no such client or sample, or @ycap too small).
 */
int sl_agent_data_sample(const sl_agent_data *d, uint32_t client, size_t i, const float **x,
                         float *y, size_t ycap);

/** sl_agent_data_free - NULL is a no-op. */
void sl_agent_data_free(sl_agent_data *d);

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

/** What happened (sl_agent_event.kind). */
typedef enum sl_agent_event_kind {
    SL_AGENT_EV_ENROLLED = 0,   /* device_id known (new or loaded) */
    SL_AGENT_EV_CHECKIN = 1,    /* value: 1 selected, 0 not; wait_ms: retry_after */
    SL_AGENT_EV_MODEL = 2,      /* model_version ready; bytes: downloaded (0: cache) */
    SL_AGENT_EV_EPOCH = 3,      /* epoch done: value = mean loss, total = epochs */
    SL_AGENT_EV_PREPARED = 4,   /* pending upload persisted: bytes = frame length,
                                   value = density; vectors below are set */
    SL_AGENT_EV_PROGRESS = 5,   /* upload offset moved: bytes of total */
    SL_AGENT_EV_ACCEPTED = 6,   /* acknowledged: update_id; residual committed */
    SL_AGENT_EV_FOLDED = 7,     /* the round closed: update folded into the residual */
    SL_AGENT_EV_DISCARDED = 8,  /* refused as invalid: dropped (reason) */
    SL_AGENT_EV_DROPPED = 9,    /* sat the round out after the download: a fault (reason
                                   "fault"), or training gave a NaN/Inf update, as a
                                   diverged model does ("nonfinite") */
    SL_AGENT_EV_CRASHED = 10,   /* fault: simulated crash (in-memory state dropped) */
    SL_AGENT_EV_EVALUATED = 11, /* evaluator: value = accuracy, loss = mean loss */
    SL_AGENT_EV_DOWNLOAD = 12   /* a range of the model arrived (and is on disk in
                                   model.partial): bytes of total */
} sl_agent_event_kind;

/** sl_agent_event_name - "enrolled", "checkin", ... for logs. */
const char *sl_agent_event_name(sl_agent_event_kind kind);

/**
 * One event, handed to sl_agent_options.on_event on the agent's thread.
 * Pointers are valid only during the call.
 */
typedef struct sl_agent_event {
    sl_agent_event_kind kind;
    uint32_t client; /* sl_agent_options.client */
    int64_t device_id;
    int64_t round_id;
    int64_t model_version;
    int64_t update_id; /* ACCEPTED */
    uint64_t gen;      /* the pending upload's generation (PREPARED .. DISCARDED) */
    uint64_t bytes, total;
    int64_t wait_ms;
    double value, loss;
    const char *reason; /* DISCARDED / FOLDED: the problem reason of the refusal
                           ("nonfinite", "late", ...; "" when resolved after a
                           restart); DROPPED: "fault" or "nonfinite"; CRASHED:
                           where; "" otherwise */
    /* PREPARED: sl_agent_params() floats each: the update (local - global),
     * the residual it was added to, and their sum the frame was cut from. */
    const float *delta, *residual, *accumulated;
} sl_agent_event;

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * How a poisoned device corrupts its updates (sl_agent_faults.poison_mode),
 * to test the coordinator's defences. SCALE100 and FLIP transform the dense
 * update (local - global) before error feedback, top-k and encoding, so the
 * frame is a well-formed one that the coordinator must defend against by
 * aggregation (clipping, trimmed mean, median) or max_update_norm. NAN
 * sends a frame that carries a NaN value: the encoder refuses non-finite
 * values, so the agent encodes the honest update, then writes a NaN into
 * one value (or into an int8 scale or ternary/sign mu) of the frame and
 * recomputes its CRC (codecs/FORMAT.md); the coordinator must refuse it.
 *
 * What a poisoned device's residual does:
 *   SCALE100, FLIP  error feedback runs on the poisoned update. Classic
 *                   residual: residual + T(update) - sent, committed on
 *                   acceptance, folded (kept whole) when late, unchanged when
 *                   refused; it stays finite and bounded as an honest
 *                   device's, x100 larger for SCALE100. Tracking: residual -
 *                   sent plus the model's moves, which pulls a FLIP
 *                   poisoner's later updates back toward the model's
 *                   direction (tests of the defences use the classic one).
 *   NAN             the pending upload on disk (pending/frame) is the honest
 *                   frame; the NaN is written into a copy at every delivery
 *                   (the same bytes every time, so an upload resumes), and
 *                   the residual bookkeeping uses the honest frame. When the
 *                   coordinator refuses the upload (422) the update is
 *                   discarded and the residual stays as it was; were it ever
 *                   accepted, the honest frame's values would be committed.
 */
typedef enum sl_agent_poison {
    SL_AGENT_POISON_NONE = 0,
    SL_AGENT_POISON_SCALE100 = 1, /* the update times 100 */
    SL_AGENT_POISON_FLIP = 2,     /* the update negated */
    SL_AGENT_POISON_NAN = 3       /* a NaN in the uploaded frame */
} sl_agent_poison;

/** sl_agent_poison_name - "none", "scale100", "flip", "nan" ("?" when unknown). */
const char *sl_agent_poison_name(sl_agent_poison mode);

/**
 * sl_agent_poison_parse - the inverse of sl_agent_poison_name() into *@out.
 * Returns SL_OK or SL_EINVAL (unknown name; *@out untouched).
 */
int sl_agent_poison_parse(const char *name, sl_agent_poison *out);

/** Simulated faults (fleet runs and tests); probabilities per participation. */
typedef struct sl_agent_faults {
    double dropout;         /* drop out after the download (never train nor report) */
    double cut;             /* per transfer (download, upload): cut it at a uniform byte of its
                               expected size, then resume (needs the fleet's relay) */
    size_t cut_span;        /* expected size when unknown (default 64 KiB) */
    double straggle;        /* be a straggler this round ... */
    double straggle_factor; /* ... training takes this many times longer (>= 1) */
    double crash;           /* simulated crash around the upload: drop everything, reload */
    /* poisoning (sl_agent_poison): not per participation but per device. A
     * lone agent is a poisoner when a draw from its seed and client is below
     * @poison (the same draw every time it starts; 1: always, 0: never); a
     * fleet poisons exactly round(@poison * devices) devices, chosen by its
     * seed. A poisoner corrupts every update it sends. */
    double poison;
    sl_agent_poison poison_mode;
    /* heterogeneous fleets (#22): this device trains @slowdown times slower every round
     * (>= 1; 1: its real speed), and its link carries @link_bps bytes per second each way
     * through the fleet's relay (0: unlimited). A fleet draws both per device from its
     * seed (sl_agent_options' speeds and links). */
    double slowdown;
    double link_bps;
} sl_agent_faults;

/**
 * Settings of an agent. sl_agent_options_default() fills every field;
 * strings and @data are borrowed and must outlive the agent.
 */
typedef struct sl_agent_options {
    /* the coordinator */
    const char *coordinator;     /* base URL, "https://host:port" (required) */
    const char *ca_file;         /* PEM bundle for https; NULL: the system's */
    const char *pin;             /* "sha256//<base64>[;...]" public key pin; NULL: none */
    const char *enrolment_token; /* needed once, to enrol */
    const char *admin_token;     /* the evaluator's operator token */
    int64_t task_id;             /* the task to work on (required) */
    /* the device */
    const char *state_dir;     /* created when missing (required) */
    const char *model;         /* registry name; NULL or "": found by the layout hash */
    const sl_agent_data *data; /* local samples (required to train without data_source) */
    uint32_t client;           /* which client of @data this device is */
    /* the device's own data read through the task's data contract (starling/source.h:
     * csv:, npy:, npz:, idx:, images:, wav:, sqlite:); replaces @data once the task's
     * contract arrives. NULL: @data only. */
    const char *data_source;
    uint64_t data_memory;    /* bytes the kept samples may use (default 256 MiB); beyond it
                                the newest are kept, or a reservoir sample */
    int data_reservoir;      /* 1: keep a uniform sample of all seen; 0 (default): the newest */
    int64_t data_refresh_ms; /* take up new samples at most this often before a check-in
                                (default 5000); always before training */
    /* training overrides: 0 (or lr <= 0) takes the coordinator's setting */
    uint32_t epochs;
    uint32_t batch;
    double lr;
    double max_train_seconds; /* stop after the epoch that crosses it; 0: no limit */
    /* limits a task's model spec is checked against before anything is trained (a model
     * over them is refused with the reason, which the coordinator records) */
    uint32_t max_nodes;     /* graph nodes (default 4096) */
    uint64_t max_params;    /* parameters (default 16,777,216) */
    uint64_t memory_budget; /* bytes a training step may use: parameters, optimiser state,
                               activations at the task's batch (default 512 MiB) */
    unsigned threads;       /* GEMM threads, process-wide (0: leave the process's
                               setting; fleets run 1) */
    /* how long to run: sl_agent_run() returns after @rounds resolved
     * participations (accepted, folded, discarded or dropped); 0: until
     * stopped. */
    uint32_t rounds;
    /* sl_agent_run(): one participation (rounds = 1 when rounds is 0);
     * sl_agent_evaluate(): report the versions not yet reported, return */
    int once;
    /* network */
    int sessions;                /* 1 (default): one signed session request, then HMAC'd
                                    requests (api_sign.h); 0: every request signed */
    size_t chunk_bytes;          /* upload PATCH size (default 64 KiB) */
    size_t download_chunk_bytes; /* model download Range size (default 256 KiB, at most
                                    4 MiB); each range is kept in model.partial */
    unsigned max_attempts;       /* per request (default 5) */
    int64_t retry_base_ms;       /* backoff base (default 500) */
    int64_t request_timeout_ms;  /* per attempt (default 120000) */
    int64_t stall_timeout_ms;    /* a transfer below 16 bytes/s for this long is cut and
                                    retried, resuming (default 30000, whole seconds) */
    int64_t max_wait_ms;         /* longest sleep between check-ins (default 60000) */
    /* compression (bandwidth-aware density, see agent.c) */
    int bandwidth_aware;         /* 1 (default): fit the frame to the time left */
    int split_positions;         /* 1 (default): code an update's positions against what the
                                    last delta downloaded changed, when that is smaller (split
                                    frames, codecs/FORMAT.md); 0: plain frames */
    double min_density_fraction; /* floor: this fraction of the scheduled density (0.1) */
    double dgc_momentum;         /* DGC momentum correction of the residual; 0: off */
    /* the evaluator */
    int64_t eval_interval_ms; /* polling for new versions (default 2000) */
    /* faults (see sl_agent_faults), seeded by @seed */
    sl_agent_faults faults;
    uint64_t seed;
    /* 1: local training's shuffles draw from @seed and the round alone; 0 (a lone agent): from
     * the device id as well, so real devices started with one seed shuffle apart. A fleet
     * (sl_agent_fleet_run) sets it on its devices, whose seeds differ already (seed + K) and
     * whose ids follow the order they enrol in (a race): its runs then repeat. */
    int seed_alone;
    /* a heterogeneous fleet (sl_agent_fleet_run): each device's slowdown drawn log-uniform in
     * [1, @speed_max] (1: none), its link log-uniform in [@link_min_bps, @link_max_bps]
     * bytes/s (both 0: unlimited); seeded by @seed, so a run can be repeated */
    double speed_max;
    double link_min_bps, link_max_bps;
    /* tests: keep audit/trained.<gen>, the running sum (n doubles, native
     * order) of every update trained into a pending generation up to <gen>
     * (written before the pending upload is committed), so that a test can
     * check residual mass: sum of accepted frames + residual == trained.
     * Costs a model-sized file per generation (the last three are kept). */
    int audit;
    /* observing and stopping */
    void (*on_event)(void *ctx, const sl_agent_event *ev);
    void *event_ctx;
    const volatile sig_atomic_t *stop; /* polled: non-zero ends the run; may be NULL */
} sl_agent_options;

/** sl_agent_options_default - the defaults documented in sl_agent_options. */
void sl_agent_options_default(sl_agent_options *o);

/* ------------------------------------------------------------------------ */
/* One device                                                               */
/* ------------------------------------------------------------------------ */

/** A device agent. Opaque. */
typedef struct sl_agent sl_agent;

/**
 * sl_agent_create - open (or create) the state directory, load the key,
 * device id, model cache, residual, counters and any pending upload, and
 * finish what a previous run left half done (an outcome recorded but not
 * yet logged). Does not talk to the coordinator.
 * @err: one line on failure (may be NULL).
 * Returns SL_OK, SL_EINVAL (missing coordinator, task or state_dir),
 * SL_ECORRUPT (an unreadable key), SL_EIO / SL_EPERM (the directory),
 * SL_ENOMEM.
 */
int sl_agent_create(const sl_agent_options *o, sl_agent **out, char *err, size_t errcap);

/** sl_agent_free - NULL is a no-op. Nothing is written: the directory is always current. */
void sl_agent_free(sl_agent *a);

/**
 * sl_agent_run - the device loop: enrol if needed, then repeatedly deliver
 * a pending upload or check in, download, train, compress, persist and
 * upload, honouring retry_after, until @rounds participations resolved or
 * the stop flag is raised. Transient failures (network, 5xx, 429) are
 * retried with capped backoff; nothing is lost by them.
 * Returns SL_OK (done or stopped), SL_EPERM (TLS refused: bad CA or pin, or
 * the coordinator refused the enrolment token), SL_ELAYOUT (the task's
 * model does not match @model), SL_ESTATE (a simulated crash: free the
 * agent and create it again), or another error that makes going on
 * pointless. Blocks.
 */
int sl_agent_run(sl_agent *a);

/**
 * sl_agent_stop - ask a running sl_agent_run() to return at its next wait
 * or step. Thread-safe and async-signal-safe.
 */
void sl_agent_stop(sl_agent *a);

/** Counters of an agent (persisted in the state directory). */
typedef struct sl_agent_stats {
    int64_t device_id;
    uint64_t participations; /* resolved: accepted + folded + discarded + dropped */
    uint64_t accepted, duplicates, folded, discarded, dropped;
    uint64_t crashes;              /* simulated, this process */
    uint64_t bytes_up, bytes_down; /* frames moved, this process */
    uint64_t download_resumes;     /* downloads continued from model.partial, this process */
    int64_t model_version;         /* held */
    int64_t last_round;            /* last round resolved */
    double upload_bytes_per_s;     /* EWMA of measured upload throughput; 0: unknown */
    double last_density;           /* density of the last frame */
    sl_agent_poison poison;        /* how this device poisons its updates (NONE: honest) */
} sl_agent_stats;

/** sl_agent_stats - copy the counters into @out. */
int sl_agent_get_stats(const sl_agent *a, sl_agent_stats *out);

/**
 * sl_agent_residual - the committed residual (@n floats, owned by the
 * agent, valid until the next call on it); NULL and 0 before the model
 * layout is known.
 */
const float *sl_agent_residual(const sl_agent *a, size_t *n);

/* ------------------------------------------------------------------------ */
/* Evaluator                                                                */
/* ------------------------------------------------------------------------ */

/**
 * sl_agent_evaluate - the evaluator loop: with the admin token, poll the
 * task's latest model (If-None-Match), and for every version after the
 * last one reported (remembered in state_dir/evaluated) download it,
 * evaluate it on @o->data (client 0: the test split) and POST
 * /v1/models/{v}/metrics, so the metrics become the version's. Stops after
 * @o->rounds versions (0: until stopped). Returns as sl_agent_run().
 */
int sl_agent_evaluate(const sl_agent_options *o, char *err, size_t errcap);

/* ------------------------------------------------------------------------ */
/* Fleet simulation                                                         */
/* ------------------------------------------------------------------------ */

/** Totals of a fleet run. */
typedef struct sl_agent_fleet_summary {
    unsigned devices;
    unsigned failed; /* devices whose loop ended with an error */
    uint64_t accepted, duplicates, folded, discarded, dropped, crashes;
    uint64_t bytes_up, bytes_down;
    uint64_t cuts;     /* transfers the relays cut */
    uint64_t resumes;  /* requests that resumed: HEAD of an upload, ranged GET */
    int first_error;   /* SL_OK or the first failing device's status */
    unsigned poisoned; /* devices that poisoned their updates (faults.poison) */
} sl_agent_fleet_summary;

/**
 * sl_agent_fleet_run - run @devices virtual devices on threads, each an
 * sl_agent with state directory @o->state_dir/dev-K, client K of @o->data
 * (which must hold clients 0 .. @devices - 1), its own key and residual,
 * seed @o->seed + K and the faults of @o->faults drawn per device (the
 * poisoners: round(poison * @devices) of them, picked by a shuffle seeded
 * with @o->seed, each logged at info level as "dev=K poisons its updates
 * (MODE)"). With
 * cut or crash faults and an http:// coordinator, each device talks
 * through its own loopback relay that cuts transfers (cut) or goes dark
 * mid-upload (crash). A simulated crash frees the agent and creates it
 * again from its directory. Logs one debug line per event and returns
 * when every device finished its @o->rounds (or the stop flag).
 * Returns SL_OK when every device ended cleanly, else the first error.
 */
int sl_agent_fleet_run(const sl_agent_options *o, unsigned devices,
                       sl_agent_fleet_summary *summary);

/* ------------------------------------------------------------------------ */
/* The program                                                              */
/* ------------------------------------------------------------------------ */

/**
 * sl_agent_main - the starling-agent program (flags, --config file,
 * STARLING_* environment; --help lists them). Installs SIGINT/SIGTERM
 * handlers that stop the run. Exit codes: 0 done, 1 failure, 2 usage or
 * configuration error, 3 the coordinator refused us (TLS CA or pin,
 * enrolment), 4 the model does not match the task's layout.
 */
int sl_agent_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_AGENT_H */
