/*
 * agent_int.h - internals shared by the files of device/agent.
 *
 * Layers, bottom to top; a file calls only into the layers below it (never
 * up, never in a circle: .ci/check_layers.py fails the style gate if one
 * does). Faults are injected through hooks (runtime.c), not by calls up.
 *   runtime.c      events, the stop flag, clock, random draws; link faults
 *                  through the hooks of the agent's link
 *   relay.c        loopback TCP relay that cuts connections (faults) and its
 *                  hooks; poison.c: poisoned updates (faults); data.c:
 *                  streaming IDX reader and partition (sl_agent_data); live.c:
 *                  the device's own data through the task's contract
 *   state.c        the state directory: files, formats, recovery, key=value text
 *   ledger.c       counters, acks.log
 *   model.c        the model trained (registry by layout, or the task's spec), the
 *                  vectors that depend on its layout, error feedback's compressor
 *                  over them and tracking's absorption of a new model
 *   net.c          the transport: enrolment, check-in, model download, metrics,
 *                  problems
 *   spec.c         the task's model spec: fetched, cached, checked against the
 *                  device's limits (or refused, with the reason); task_data.c:
 *                  the task's data contract applied to the device's data
 *   participate.c  the round: density, train, compress, persist, upload, resolve
 *                  the outcome
 *   agent.c        the program: options, create/free, the device loop
 *   evaluator.c    the evaluator loop; fleet.c: N agents on threads with seeded
 *                  faults; cli.c: the command line; main.c: starling-agent
 */
#ifndef STARLING_AGENT_INT_H
#define STARLING_AGENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/agent.h"
#include "starling/api_client.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/common.h"
#include "starling/contract.h"
#include "starling/nn.h"
#include "starling/optim.h"

#define SL__AGENT_PATH_MAX  4096
#define SL__AGENT_MAX_FRAME ((size_t)256 << 20) /* the coordinator's upload limit */
#define SL__AGENT_MAX_MODEL ((size_t)1 << 30)
#define SL__AGENT_FROZEN    1024 /* bytes of sl__agent_assignment.frozen, the NUL included */

/* ---- data.c ---------------------------------------------------------------- */

struct sl_agent_data {
    size_t n;        /* samples kept */
    size_t features; /* floats per sample (rows * cols) */
    float *x;        /* n * features */
    int32_t *y;      /* n class labels; NULL when the source gives targets */
    float *t;        /* n * tdim targets (regression); NULL for class labels */
    size_t tdim;     /* targets per sample */
    uint32_t first, count;
    size_t *client_n;     /* [count] */
    uint32_t **client_ix; /* [count][client_n[c]] indices into x / y */
    /* federated evaluation: each client's held-out samples (the data contract's share, by
     * sample hash), never trained on; NULL when the data has none */
    size_t *eval_n;                     /* [count] */
    uint32_t **eval_ix;                 /* [count][eval_n[c]] */
    const struct sl_contract *contract; /* what a sample is (NULL: a source without one) */
};

/* ---- live.c ---------------------------------------------------------------- */

/* A device's own data read through the task's data contract (starling/source.h),
 * kept in a store capped in bytes (the newest samples, or a reservoir sample of
 * all seen), taken up again before each check-in as it grows. */
typedef struct sl__agent_live sl__agent_live;

/* @uri: the device's source; @cap_bytes: the store's memory (samples, labels,
 * indices); @reservoir: 1 keeps a uniform sample of everything seen, 0 the
 * newest; @seed: the reservoir's. */
int sl__agent_live_create(const char *uri, uint64_t cap_bytes, int reservoir, uint64_t seed,
                          sl__agent_live **out);
void sl__agent_live_free(sl__agent_live *l);
/* The task's contract (@text, @len; hex SHA-256 @sha): the store is emptied and the
 * source opened anew. A contract or source that is not usable leaves the reason in
 * @why ("" when usable) and returns SL_OK; other statuses are out of memory. */
int sl__agent_live_set_contract(sl__agent_live *l, const char *text, size_t len, const char *sha,
                                char *why, size_t cap);
/* The contract held (NULL: none, or not valid). */
const sl_contract *sl__agent_live_contract(const sl__agent_live *l);
/* The hex SHA-256 of the contract held ("" none). */
const char *sl__agent_live_sha(const sl__agent_live *l);
/* Take up the samples that arrived since the last refresh (after a refusal: open the
 * source anew and read everything). @why as above ("no usable data: ..." or "too
 * few samples: ..."). */
int sl__agent_live_refresh(sl__agent_live *l, char *why, size_t cap);
/* The samples to train and evaluate on (one client, 0), or NULL while none is usable. */
const sl_agent_data *sl__agent_live_data(const sl__agent_live *l);
/* Bytes the store holds (capped), and samples seen since the contract arrived. */
size_t sl__agent_live_bytes(const sl__agent_live *l);
uint64_t sl__agent_live_seen(const sl__agent_live *l);

/* ---- relay.c --------------------------------------------------------------- */

typedef struct sl__agent_relay sl__agent_relay;

/* A relay on 127.0.0.1 (ephemeral port) to @host:@port. */
int sl__agent_relay_create(const char *host, int port, sl__agent_relay **out);
void sl__agent_relay_free(sl__agent_relay *r);
int sl__agent_relay_port(const sl__agent_relay *r);
/* Cut the connection after @bytes more bytes (-1: disarm). */
void sl__agent_relay_arm(sl__agent_relay *r, int64_t bytes);
/* Dark: every connection is closed at once, new ones too (a crash's link). */
void sl__agent_relay_set_dark(sl__agent_relay *r, int dark);
void sl__agent_relay_counts(const sl__agent_relay *r, uint64_t *cuts, uint64_t *resumes);
/* The link's speed, bytes per second each way (0: unlimited); set before the relay carries
 * anything (a heterogeneous fleet's device). */
void sl__agent_relay_set_rate(sl__agent_relay *r, double bytes_per_s);

/* ---- runtime.c: link faults through hooks ------------------------------------ */

/* What a link that faults can be told (a fleet's relay: sl__agent_relay_hooks). */
typedef struct sl__agent_link_hooks {
    void (*arm)(void *link, int64_t bytes); /* cut after @bytes more bytes (-1: disarm) */
    void (*dark)(void *link, int dark);     /* close every connection, new ones too (1), or not */
} sl__agent_link_hooks;

/* relay.c: a relay's hooks (the link is the sl__agent_relay). */
extern const sl__agent_link_hooks sl__agent_relay_hooks;

/* ---- state ----------------------------------------------------------------- */

/* How a pending upload ended (recorded in the residual file's header). */
enum { SL__OUT_NONE = 0, SL__OUT_ACCEPTED = 1, SL__OUT_FOLDED = 2, SL__OUT_DISCARDED = 3 };

/* The residual file's tag: which pending generation it resolved, and how. */
typedef struct sl__agent_resolved {
    uint64_t gen; /* 0: none yet */
    int outcome;
    int duplicate;
    int64_t round_id;
    int64_t update_id;
    uint8_t frame_sha[32];
} sl__agent_resolved;

typedef struct sl__agent_pending {
    int present;
    uint64_t gen;
    int64_t task_id, round_id, base_version, deadline_ms;
    uint32_t num_samples, participation;
    uint32_t local_steps; /* optimiser steps trained for it (0: unknown, a pending from before) */
    double density;
    sl_topk_scope topk_scope;
    sl_error_feedback feedback;
    uint64_t layout_hash;
    void *frame;
    size_t frame_len;
    uint8_t frame_sha[32];
    sl_support *support; /* a split frame's (pending/support), else NULL */
    int64_t support_ref; /* the version whose change to base_version it is */
    float *acc;          /* n */
    float *acc_mu;       /* n, or NULL without DGC momentum */
    char upload_id[SL_CLIENT_UPLOAD_ID_MAX + 1];
    uint64_t offset;
    unsigned digest_retries;
} sl__agent_pending;

typedef struct sl__agent_counters {
    uint64_t participations, accepted, duplicates, folded, discarded, dropped;
    uint64_t next_gen;      /* generation of the next pending upload */
    uint64_t resolved_gen;  /* last generation counted here */
    int64_t last_round;     /* never train twice for one round */
    double bw_ewma;         /* upload bytes/s, 0: unknown */
    double down_bw_ewma;    /* download bytes/s (models), 0: unknown */
    double bpnz_ewma;       /* frame bytes per selected element, 0: unknown */
    double step_ms_ewma;    /* one optimiser step of the task's model (straggling included) */
    uint64_t steps_trained; /* optimiser steps run, in every round (sent or not) */
} sl__agent_counters;

/* What a check-in assigned. */
typedef struct sl__agent_assignment {
    int selected;
    int64_t round_id, round_no, model_version, deadline_ms, retry_after_ms;
    uint32_t participation;
    sl_value_mode values;
    double density, warmup_density;
    sl_topk_scope topk_scope;   /* TENSOR when the coordinator does not say (older ones) */
    sl_error_feedback feedback; /* RESIDUAL when the coordinator does not say (older ones) */
    double residual_decay;      /* 1 when the coordinator does not say */
    uint32_t warmup_rounds;
    uint32_t epochs, batch;
    uint32_t max_steps; /* a time budget: at most this many steps, across epochs (0: epochs) */
    int fednova;        /* divide the fresh update by its effective steps (FedNova) */
    double lr, momentum, prox_mu;
    /* the local optimiser: SGD without any of it when the coordinator does not say */
    sl_optim_kind optimizer;
    int nesterov;                  /* SGD only, with momentum > 0 */
    double weight_decay;           /* >= 0 */
    double beta1, beta2;           /* Adam, AdamW (0.9, 0.999 when not said) */
    double eps;                    /* Adam, AdamW (1e-8 when not said) */
    double clip_norm;              /* the gradient's global L2 bound; 0 = off */
    int local_norm;                /* FedBN: normalisation layers' parameters stay here */
    char frozen[SL__AGENT_FROZEN]; /* names and module prefixes joined by commas; "" none */
    char model_spec_sha256[65];    /* "" when the task has no model spec */
    char data_contract_sha256[65]; /* "" when the task has no data contract */
} sl__agent_assignment;

struct sl_agent {
    sl_agent_options o;
    char dir[SL__AGENT_PATH_MAX];
    volatile sig_atomic_t stopped;
    uint64_t rng;
    /* identity */
    sl_device_key *key;
    int64_t device_id;
    sl_client *client; /* signed (or the admin's, for the evaluator) */
    const char *url;   /* where the client connects (a relay's, in fleets) */
    char url_buf[512];
    void *link;                             /* a fleet's relay (borrowed), or NULL */
    const sl__agent_link_hooks *link_hooks; /* its faults (runtime.c); NULL with no link */
    int admin;                              /* the client uses the admin token, not a key */
    /* the model */
    sl_model *model;        /* NULL until the layout is known */
    sl_spec *spec;          /* the task's model spec (the model runs it); NULL: none or registry */
    char spec_sha256[65];   /* hex SHA-256 of the spec checked last ("" none) */
    char spec_refusal[256]; /* why this device cannot train it ("" when it can) */
    int spec_refusal_sent;  /* a check-in carried spec_refusal */
    /* the device's own data through the task's data contract (o.data_source) */
    sl__agent_live *live;
    char data_refusal[256]; /* "no usable data: ..." / "too few samples: ..." ("" none) */
    int data_refusal_sent;  /* a check-in carried data_refusal */
    int64_t data_refreshed_ms;
    const sl_layout *layout;
    size_t n;
    int64_t version;         /* held; 0: none */
    size_t last_delta_bytes; /* size of the last delta downloaded (cut faults) */
    size_t download_range;   /* range size that got through lately; 0: the configured */
    float *global;           /* the held version's parameters */
    /* the change from version split_ref to the held one, when it arrived as a delta
     * (model.support): the next update's positions are coded against it */
    sl_support *split;
    int64_t split_ref;
    /* error feedback */
    float *residual, *momentum;
    /* TRACKING: an acknowledged update's round has not been absorbed into the
     * residual yet (the next model that arrives brings its move); saved with it */
    int absorb;
    sl__agent_resolved resolved;
    sl__agent_pending pending;
    sl__agent_counters counters;
    sl_agent_stats stats;
    /* fault of the participation in progress: 0 none, 1 before the upload,
     * 2 mid-upload, 3 after the answer */
    int crash_point;
    uint64_t crash_offset;
    int crash_now;
    /* poisoning (faults.poison): fixed at creation */
    sl_agent_poison poison;
    /* the problem reason of the refusal being resolved, for its event ("" after a restart) */
    char refusal[64];
};

/* net.c: a check-in answer (api/openapi.yaml, CheckinResponse) into @out;
 * SL_ESYNTAX (@out unchanged) for anything else: not JSON, a missing or
 * mistyped field, a value out of range, an unknown value mode, top-k scope
 * or error feedback, a residual decay below 1 without "residual". */
int sl__agent_parse_assignment(const char *json, size_t len, sl__agent_assignment *out);

/* participate.c: whether @asg asks for anything sl_train() with sl_sgd cannot
 * do (another optimiser, weight decay, Nesterov, clipping, frozen parameters,
 * FedBN): such rounds train with sl_train_opt(). */
int sl__agent_uses_optim(const sl__agent_assignment *asg);

/* runtime.c */
void sl__agent_emit(sl_agent *a, sl_agent_event *ev);
int sl__agent_stopping(const sl_agent *a);
/* Sleep @ms in slices, returning early (1) when asked to stop. */
int sl__agent_sleep(const sl_agent *a, int64_t ms);
double sl__agent_uniform(sl_agent *a);
int64_t sl__agent_now_ms(void);
/* Whether the agent's link takes faults (a fleet's relay). */
int sl__agent_link_faults(const sl_agent *a);
/* The cut fault: with probability faults.cut, arm the link to cut the
 * coming transfer of about @expected bytes at a uniform offset. */
void sl__agent_maybe_cut(sl_agent *a, uint64_t expected);
void sl__agent_disarm(sl_agent *a);
/* The link goes dark (1: a crash mid-upload) or comes back (0). */
void sl__agent_link_dark(sl_agent *a, int dark);

/* state.c */
int sl__agent_path(const sl_agent *a, const char *name, char *out, size_t cap);
int sl__agent_write_file(const sl_agent *a, const char *name, const void *data, size_t len);
int sl__agent_read_file(const sl_agent *a, const char *name, size_t max, void **out, size_t *len);
void sl__agent_sync_dir(const sl_agent *a, const char *name);
void sl__agent_remove(const sl_agent *a, const char *name);
int sl__agent_state_open(sl_agent *a, char *err, size_t errcap);
int sl__agent_write_text(const sl_agent *a, const char *name, const char *text);
int sl__agent_read_i64(const sl_agent *a, const char *name, int64_t *out);
int sl__agent_save_model(sl_agent *a, const void *frame, size_t len, int64_t version);
int sl__agent_load_model(sl_agent *a);
/* model.support: the support of the delta that brought the held version from @ref into
 * a->split (saved after the model; a support whose base is not the held version is not
 * loaded), or none (removed). */
int sl__agent_save_support(sl_agent *a, sl_support *s, int64_t ref);
void sl__agent_drop_support(sl_agent *a);
/* The layout hash of the cached model (model.frame), to find its registry model. */
int sl__agent_cached_layout(const sl_agent *a, uint64_t *hash);
/* model.partial: start it with the first bytes of @path's body (ETag @etag),
 * append more, or load the bytes kept for @path (SL_ENOENT: none, or of
 * another path; *@data malloc'd). */
int sl__agent_partial_start(const sl_agent *a, const char *path, const char *etag, const void *data,
                            size_t len);
int sl__agent_partial_append(const sl_agent *a, const void *data, size_t len);
int sl__agent_partial_load(const sl_agent *a, const char *path, char *etag, size_t ecap,
                           void **data, size_t *len);
void sl__agent_drop_partial(const sl_agent *a);
/* Remove what killed atomic writes left in @sub ("." for the top). */
void sl__agent_remove_tmp(const sl_agent *a, const char *sub);
/* audit/trained.<gen> = audit/trained.<gen - 1> + @delta (sl_agent_options.audit). */
int sl__agent_audit(const sl_agent *a, uint64_t gen, const float *delta);
int sl__agent_save_residual(sl_agent *a, const sl__agent_resolved *tag);
int sl__agent_load_residual(sl_agent *a);
int sl__agent_save_pending(sl_agent *a);
/* The device's own values of its local tensors (FedBN, the spec's "local"
 * parameters): @count floats, the local floats of the held layout in layout
 * order; @local_hash identifies which tensors are local (a different set
 * starts again from the global model). Saved atomically ("local" in the
 * state directory); the load fills @values (malloc'd, *@count floats) or
 * returns SL_ENOENT when there is none for this layout and set. */
int sl__agent_save_local(const sl_agent *a, uint64_t local_hash, const float *values, size_t count);
int sl__agent_load_local(const sl_agent *a, uint64_t local_hash, float **values, size_t *count);
int sl__agent_save_upload(const sl_agent *a);
int sl__agent_load_pending(sl_agent *a);
int sl__agent_clear_pending(sl_agent *a);
void sl__agent_pending_free(sl__agent_pending *p);
/* key=value text: the value of @key into @out; SL_ENOENT when absent */
int sl__agent_kv(const char *text, const char *key, char *out, size_t cap);
int sl__agent_kv_i64(const char *text, const char *key, int64_t *out);
int sl__agent_kv_u64(const char *text, const char *key, uint64_t *out);
int sl__agent_kv_f64(const char *text, const char *key, double *out);
/* ledger.c */
int sl__agent_save_counters(const sl_agent *a);
int sl__agent_load_counters(sl_agent *a);
int sl__agent_ack_logged(const sl_agent *a, uint64_t gen, int *found);
int sl__agent_ack_append(const sl_agent *a, const sl__agent_resolved *tag);
int sl__agent_repair_log(const sl_agent *a);

/* model.c (above state.c, below net.c) */
/* The registry model whose layout hashes to @hash; SL_ENOENT when none. */
int sl__agent_registry_model(uint64_t hash, sl_model **out);
/* Train @m (taken over, freed on failure too when a model is held): the first
 * model allocates the layout's vectors and loads the residual and pending upload
 * saved for it; a later one must have the held layout (SL_ELAYOUT) and replaces
 * the held model (a spec arriving for the registry model that served so far). */
int sl__agent_set_model(sl_agent *a, sl_model *m);
/* A compressor for the held layout (@values, @density, @scope, @feedback, residual
 * @decay, frame @seed; DGC momentum when the agent keeps it), to restore the
 * persisted vectors into (the warm-up is applied in the density handed over). */
int sl__agent_compressor(const sl_agent *a, sl_value_mode values, double density,
                         sl_topk_scope scope, sl_error_feedback feedback, double decay,
                         uint64_t seed, sl_compressor **out);
/* TRACKING error feedback: when an acknowledged update's round is still to be
 * absorbed (a->absorb), add the move from the held model to @next (@version),
 * averaged over the versions between, to the residual and save it, before the
 * model is replaced. SL_OK without anything to absorb. */
int sl__agent_absorb(sl_agent *a, const float *next, int64_t version);

/* spec.c (above net.c) */
/* The model spec a check-in names (@sha256 hex, "" for none): held, or read from
 * the state directory's cache, or fetched (GET /v1/tasks/{id}/model-spec, checked
 * against @sha256) and cached; then checked against the device's limits at
 * @batch. A spec the device cannot train leaves the reason in a->spec_refusal
 * (SL_OK); transport errors are returned (retried at the next check-in). */
int sl__agent_take_spec(sl_agent *a, const char *sha256, uint32_t batch);
/* The evaluator (no check-ins): the task's spec straight from GET
 * /v1/tasks/{id}/model-spec (none: SL_OK, the registry path), checked at @batch. */
int sl__agent_take_task_spec(sl_agent *a, uint32_t batch);
/* At start: the cached spec, when there is one and it still passes the checks,
 * becomes the model. SL_OK also when there is none. */
int sl__agent_restore_spec(sl_agent *a);

/* net.c */
int sl__agent_connect(sl_agent *a);
int sl__agent_enrol(sl_agent *a);
int sl__agent_checkin(sl_agent *a, sl__agent_assignment *out);
/* task_data.c (above net.c, state.c and live.c) */
/* At start: the live data of o.data_source, and the cached contract applied to it. */
int sl__agent_restore_contract(sl_agent *a);
/* The data contract a check-in names (@sha256 hex, "" none): held, cached, or fetched
 * and checked; applied to the device's source. What makes the data unusable is left
 * in a->data_refusal. SL_EBUSY / network statuses: try again. */
int sl__agent_take_contract(sl_agent *a, const char *sha256);
/* Take up new samples (@force, or when data_refresh_ms passed); a->o.data follows. */
int sl__agent_refresh_data(sl_agent *a, int force);
/* GET /v1/tasks/{task}/model-spec: the body (malloc'd) into @text, @len. */
int sl__agent_fetch_spec(sl_agent *a, void **text, size_t *len);
/* GET /v1/tasks/{task}/@doc ("model-spec", "data-contract"): the body (malloc'd);
 * SL_ENOENT when the task has none, SL_EPERM when refused. */
int sl__agent_fetch_task_doc(sl_agent *a, const char *doc, void **text, size_t *len);
/* Make version @version the held one (cache, delta from the held one, or
 * full); *@downloaded receives the bytes moved. With a tracking move to
 * absorb and versions missed, the version after the held one comes first
 * (its exact move goes into the residual), then @version. */
int sl__agent_fetch_model(sl_agent *a, int64_t version, uint64_t *downloaded);
int sl__agent_post_metrics(sl_agent *a, int64_t version, double loss, double accuracy,
                           size_t samples);
/* POST /v1/models/{version}/metrics with every metric of @m (null where NaN): the
 * evaluator's, or a device's federated evaluation of its round's base model. */
int sl__agent_post_eval(sl_agent *a, int64_t version, const sl_metrics *m);
/* The "type" (after .../problems/) and "reason" members of a problem body. */
void sl__agent_problem(const sl_client_response *r, char *type, size_t tcap, char *reason,
                       size_t rcap);
/* A short description of a failed exchange for logs. */
const char *sl__agent_failure(int rc, const sl_client_response *r, char *buf, size_t cap);

/* agent.c: fleets connect an agent through @relay (its port on 127.0.0.1; its
 * faults through sl__agent_relay_hooks). */
int sl__agent_use_relay(sl_agent *a, sl__agent_relay *relay);

/* participate.c */
int sl__agent_train_round(sl_agent *a, const sl__agent_assignment *asg);
/* Deliver the pending upload: SL_OK when resolved (accepted, folded or
 * discarded), SL_EAGAIN-like transient errors otherwise (pending kept). */
int sl__agent_deliver(sl_agent *a);
/* Finish a pending upload whose outcome the residual already records. */
int sl__agent_finish_resolved(sl_agent *a);

/* poison.c */
/* Whether a lone agent with options @o is a poisoner (the per-device draw
 * of sl_agent_faults.poison): its mode, or SL_AGENT_POISON_NONE. */
sl_agent_poison sl__agent_poison_draw(const sl_agent_options *o);
/* SCALE100 / FLIP: transform the @n floats of the dense update in place
 * (other modes leave it unchanged). */
void sl__agent_poison_update(sl_agent_poison mode, float *update, size_t n);
/* NAN: a malloc'd copy of the UPDATE frame @frame for @layout with one
 * value (or an int8 scale, a ternary or sign mu) set to NaN and the CRC
 * recomputed; the same bytes for the same frame. When no value section is
 * stored raw (all zstd-coded), the frame is re-encoded with its first
 * non-empty tensor cut to one value, which the encoder stores raw (needs
 * @layout; NULL: SL_ENOENT then). */
int sl__agent_poison_frame(const sl_layout *layout, const void *frame, size_t len, void **out,
                           size_t *out_len);

/* evaluator.c: nothing shared. fleet.c: nothing shared. */

#endif /* STARLING_AGENT_INT_H */
