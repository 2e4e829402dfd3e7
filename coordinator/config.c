/*
 * config.c - a task's JSON configuration: strict parsing, validation and
 * the canonical JSON form.
 *
 * Keys are the field names of sl_task_config. Every key is optional except
 * "target"; absent keys take the defaults below. The table lists the bounds
 * (inclusive unless marked open). Bounds are chosen to catch typos and unit
 * mistakes (seconds given as milliseconds, percent given as a fraction), not
 * to limit what a real deployment needs.
 *
 *   key                  JSON type       bounds                 default
 *   name                 string          1..63 bytes, no ctrl   "task"
 *   rounds               integer         0 .. 1e6 (0: forever)  0
 *   target               integer         1 .. 1e6               required
 *   over_selection       number          1 .. 10                1.3
 *   quorum               integer/number  1 .. target, or a      ceil(0.5 * target)
 *                                        fraction in (0, 1)
 *   selection_window_ms  integer         1 .. 1 day             10000
 *   report_deadline_ms   integer         1 .. 7 days            60000
 *   cooldown_ms          integer         0 .. 30 days           0
 *   min_samples          integer         0 .. 1e9               0
 *   required_caps        string          0..127 of [A-Za-z0-9_.:-]  ""
 *   values               string          sl_value_mode_name()   "ternary"
 *   density              number          (0, 1]                 0.01
 *   topk_scope           string          "model" or "tensor"    "model"
 *   error_feedback       string          "residual" or "tracking"  "residual"
 *   residual_decay       number          (0, 1]; < 1 only with   0.9 (residual),
 *                                        error_feedback "residual"  1 (tracking)
 *   warmup_rounds        integer         0 .. 10000             0
 *   warmup_density       number          (0, 1], >= density     0.25
 *   local_epochs         integer         1 .. 1000              1
 *   batch                integer         1 .. 65536             32
 *   local_lr             number          (0, 10]                0.01
 *   local_momentum       number          [0, 1)                 0.9
 *   prox_mu              number          0 .. 1000              0
 *   local_optimizer      string          "sgd", "adam", "adamw" "sgd"
 *   local_nesterov       boolean         sgd only               false
 *   local_weight_decay   number          0 .. 100               0 (adamw: 0.01)
 *   local_betas          [number, number] each [0, 1)          [0.9, 0.999]
 *   local_eps            number          (0, 1]                 1e-8
 *   local_clip_norm      number          0 .. 1e9 (0: off)      0
 *   frozen               array of strings  layout names or      []
 *                                        module prefixes
 *   local_norm           boolean                                false
 *   aggregator           string          sl_aggregator_name()   "fedavg"
 *   server_lr            number          (0, 100]               1
 *   server_lr_boost      number          (0, 100]               3
 *   server_lr_ramp       integer         0 .. 10000 (0: off)    0
 *   sender_mean          number          [0, 1]                 1
 *   sender_mean_rounds   integer         0 .. 10000 (0: off)    0
 *   sender_mean_share    boolean                                true in a new task
 *                                                               with sender_mean_rounds
 *                                                               above 0 (a stored task
 *                                                               without it: false)
 *   sender_mean_epochs   integer         0 .. 1e6 (0: off)      60 (sparse fedavg with
 *                                                               the residual, not
 *                                                               fedbuff, no
 *                                                               server_lr_ramp or
 *                                                               dp_noise, no
 *                                                               sender_mean_rounds),
 *                                                               else 0
 *   sender_mean_fresh    boolean                                true in a new task with
 *                                                               a senders' mean (a
 *                                                               stored task without
 *                                                               it: false)
 *   sender_mean_partial  integer         0 .. 16 (0: off)       5 in a new task with
 *                                                               sender_mean_epochs (a
 *                                                               stored task without
 *                                                               it: 0)
 *   server_momentum      number          [0, 1)                 0.9
 *   beta1, beta2         number          [0, 1)                 0.9, 0.99
 *   tau                  number          1e-9 .. 10             1e-3
 *   clip_norm            number          0 .. 1e9 (0: off)      0
 *   trim_fraction        number          [0, 0.5)               0.1
 *   dp_noise             number          0 .. 100 (0: off)      0
 *   max_update_norm      number          0 .. 1e12 (0: off)     0
 *   seed                 integer/string  uint64                 0
 *   fedbuff              boolean                                false
 *   buffer_size          integer         1 .. 1e5               10
 *   max_staleness        integer         0 .. 1e5               10
 *   fednova              boolean                                false
 *   time_budget          boolean                                false
 *   min_local_steps      integer         1 .. 1e6               1
 *   max_local_steps      integer         0 .. 1e6 (0: epochs)   0
 *   paced_selection      boolean                                false
 *   fairness_rounds      integer         0 .. 1e6 (0: off)      0
 *   deadline_percentile  integer         0 .. 100 (0: off)      0
 *   deadline_rounds      integer         1 .. 1000              10
 *   min_report_deadline_ms integer       1 .. 7 d               1000
 *   retain_last          integer         0 .. 1e9 (0: keep all)  0
 *   retain_every         integer         0 .. 1e9 (0: none)      0
 *
 * The local_* keys above local_lr's line configure the devices' optimiser
 * (device/nn/include/starling/optim.h, PyTorch's torch.optim semantics):
 * local_momentum and local_nesterov are SGD's; local_betas and local_eps are
 * Adam's and AdamW's; local_weight_decay is L2 in the gradient for sgd and
 * adam, decoupled for adamw (PyTorch's default 0.01 when the key is absent);
 * local_clip_norm bounds the global L2 norm of each step's gradient. "frozen"
 * lists parameters no device trains (their update entries are zero): tensor
 * names, or module prefixes ("fc1" and "fc1." freeze "fc1.weight" and
 * "fc1.bias", not "fc10.weight"); sl_task_config_check_layout() checks them
 * against the task's layout. "local_norm" is FedBN: the parameters of every
 * BatchNormalization and LayerNormalization node (scale, bias, running
 * statistics) stay on each device, as the spec's "local" parameters always
 * do (device/nn/MODEL_SPEC.md); devices send no change of them. The defaults
 * (sgd, no clipping, nothing frozen, no FedBN) train as before these keys.
 *
 * Cross-field rules: quorum <= target; residual_decay < 1 needs error_feedback
 * "residual" (tracking keeps no stale mass to decay); dp_noise > 0 needs clip_norm > 0
 * (the noise is calibrated to the clipping bound); warmup_density >= density
 * when warmup_rounds > 0 (warm-up starts denser and decays); error_feedback
 * "tracking" needs aggregator "fedavg", server_lr <= 1 and, under a
 * server_lr_ramp, a server_lr_boost whose rate stays <= 1 (it absorbs the
 * model's move, which must be the mean of the updates sent); a
 * sender_mean_rounds or sender_mean_epochs above 0 (with sender_mean above 0; not both)
 * excludes tracking, dp_noise, trimmed_mean and median, and, in a new task, fedbuff;
 * the fade lasts sender_mean_rounds participations of the average device, or
 * sender_mean_epochs / local_epochs of them (sl_sender_mean_length); sender_mean_fresh
 * needs one of them, sender_mean_partial sender_mean_epochs (sl_sender_mean_length_share);
 * local_nesterov
 * needs local_optimizer "sgd" and local_momentum > 0; local_optimizer "adam"
 * or "adamw" needs local_momentum 0 (0 when absent: the key's default 0.9 is
 * SGD's); local_betas and local_eps other than their defaults need "adam" or
 * "adamw"; fednova (FedNova's normalised averaging, by each update's local
 * steps) excludes fedbuff, dp_noise and error_feedback "tracking"; retain_every needs
 * retain_last (retention: sl_store_retain_models() and sl_store_retain_updates(), run after
 * each close; a retired version's bytes go, its record and metrics stay; a device holding
 * one downloads the full model, and its split update against one is refused with reason
 * "reference"; under fedbuff a retain_last at or below max_staleness also retires the bases
 * of stale updates, which still aggregate when plain; the stored updates of the rounds over
 * but the last retain_last lose their bytes too, their records staying).
 *
 * Two representation choices keep parse(to_json(c)) == c exact:
 * - quorum: JSON cannot tell 1 from 1.0, so an integer >= 1 is a count and
 *   only a number strictly inside (0, 1) is a fraction; "all of target" is
 *   written as the target itself. A fraction becomes ceil(f * target), where
 *   a product within 1e-9 of an integer counts as that integer (0.3 * 10 is
 *   3.0000000000000004 in binary and must give 3, not 4).
 * - seed: a JSON number is a double, exact only up to 2^53, so larger seeds
 *   are written (and may be given) as a decimal string.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "coord_int.h"

#define CONFIG_MAX_BYTES (64u * 1024u) /* a config is a few hundred bytes; refuse huge inputs */
#define DAY_MS           86400000.0
#define SEED_EXACT_MAX   9007199254740992.0 /* 2^53 */

static const char *const aggregator_names[] = {
    "fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "trimmed_mean", "median",
};
#define AGGREGATOR_COUNT (sizeof aggregator_names / sizeof aggregator_names[0])

static const char *const optimizer_names[] = {"sgd", "adam", "adamw"};
#define OPTIMIZER_COUNT (sizeof optimizer_names / sizeof optimizer_names[0])

#define BETA1_DEFAULT   0.9
#define BETA2_DEFAULT   0.999
#define EPS_DEFAULT     1e-8
#define ADAMW_DECAY     0.01 /* torch.optim.AdamW's default weight decay */
#define FROZEN_NAME     127  /* a layout name's longest (codecs/FORMAT.md) */

const char *sl_aggregator_name(sl_aggregator a)
{
    return (unsigned)a < AGGREGATOR_COUNT ? aggregator_names[a] : "?";
}

const char *sl_local_optimizer_name(sl_local_optimizer o)
{
    return (unsigned)o < OPTIMIZER_COUNT ? optimizer_names[o] : "?";
}

typedef enum key_kind {
    K_NAME,   /* char name[64] */
    K_CAPS,   /* char required_caps[128] */
    K_U32,    /* uint32_t, integral number */
    K_I64,    /* int64_t, integral number */
    K_F64,    /* double */
    K_VALUES, /* sl_value_mode as its name */
    K_AGG,    /* sl_aggregator as its name */
    K_SCOPE,  /* sl_topk_scope as its name */
    K_EF,     /* sl_error_feedback as its name */
    K_BOOL,   /* int, JSON true/false */
    K_OPTIM,  /* sl_local_optimizer as its name */
    K_BETAS,  /* double[2], each in [min, max) */
    K_FROZEN, /* char frozen[SL_TASK_FROZEN_MAX], a JSON array of names */
    K_SEED,   /* uint64_t, number <= 2^53 or decimal string */
    K_QUORUM  /* uint32_t, count or fraction of target */
} key_kind;

typedef struct key_spec {
    const char *key;
    key_kind kind;
    size_t offset;
    double min, max;
    unsigned char min_open, max_open; /* 1: the bound itself is excluded */
    double def;                       /* default of a numeric key */
} key_spec;

#define F(field) offsetof(sl_task_config, field)

/* In struct order, which is also the canonical JSON order. */
static const key_spec keys[] = {
    {"name", K_NAME, F(name), 0, 0, 0, 0, 0},
    {"rounds", K_U32, F(rounds), 0, 1e6, 0, 0, 0},
    {"target", K_U32, F(target), 1, 1e6, 0, 0, 0},
    {"over_selection", K_F64, F(over_selection), 1, 10, 0, 0, 1.3},
    {"quorum", K_QUORUM, F(quorum), 1, 1e6, 0, 0, 0},
    {"selection_window_ms", K_I64, F(selection_window_ms), 1, DAY_MS, 0, 0, 10000},
    {"report_deadline_ms", K_I64, F(report_deadline_ms), 1, 7 * DAY_MS, 0, 0, 60000},
    {"cooldown_ms", K_I64, F(cooldown_ms), 0, 30 * DAY_MS, 0, 0, 0},
    {"min_samples", K_U32, F(min_samples), 0, 1e9, 0, 0, 0},
    {"required_caps", K_CAPS, F(required_caps), 0, 0, 0, 0, 0},
    {"values", K_VALUES, F(values), 0, 0, 0, 0, 0},
    {"density", K_F64, F(density), 0, 1, 1, 0, 0.01},
    {"topk_scope", K_SCOPE, F(topk_scope), 0, 0, 0, 0, 0},
    {"error_feedback", K_EF, F(error_feedback), 0, 0, 0, 0, 0},
    {"residual_decay", K_F64, F(residual_decay), 0, 1, 1, 0, SL_RESIDUAL_DECAY_DEFAULT},
    {"warmup_rounds", K_U32, F(warmup_rounds), 0, 10000, 0, 0, 0},
    {"warmup_density", K_F64, F(warmup_density), 0, 1, 1, 0, 0.25},
    {"local_epochs", K_U32, F(local_epochs), 1, 1000, 0, 0, 1},
    {"batch", K_U32, F(batch), 1, 65536, 0, 0, 32},
    {"local_lr", K_F64, F(local_lr), 0, 10, 1, 0, 0.01},
    {"local_momentum", K_F64, F(local_momentum), 0, 1, 0, 1, 0.9},
    {"prox_mu", K_F64, F(prox_mu), 0, 1000, 0, 0, 0},
    {"local_optimizer", K_OPTIM, F(local_optimizer), 0, 0, 0, 0, 0},
    {"local_nesterov", K_BOOL, F(local_nesterov), 0, 0, 0, 0, 0},
    {"local_weight_decay", K_F64, F(local_weight_decay), 0, 100, 0, 0, 0},
    {"local_betas", K_BETAS, F(local_betas), 0, 1, 0, 1, 0},
    {"local_eps", K_F64, F(local_eps), 0, 1, 1, 0, EPS_DEFAULT},
    {"local_clip_norm", K_F64, F(local_clip_norm), 0, 1e9, 0, 0, 0},
    {"frozen", K_FROZEN, F(frozen), 0, 0, 0, 0, 0},
    {"local_norm", K_BOOL, F(local_norm), 0, 0, 0, 0, 0},
    {"aggregator", K_AGG, F(aggregator), 0, 0, 0, 0, 0},
    {"server_lr", K_F64, F(server_lr), 0, 100, 1, 0, 1},
    {"server_lr_boost", K_F64, F(server_lr_boost), 0, 100, 1, 0, 3},
    {"server_lr_ramp", K_U32, F(server_lr_ramp), 0, 10000, 0, 0, 0},
    {"sender_mean", K_F64, F(sender_mean), 0, 1, 0, 0, 1},
    {"sender_mean_rounds", K_U32, F(sender_mean_rounds), 0, 10000, 0, 0, 0},
    {"sender_mean_share", K_BOOL, F(sender_mean_share), 0, 0, 0, 0, 0},
    {"sender_mean_epochs", K_U32, F(sender_mean_epochs), 0, 1e6, 0, 0, 0},
    {"sender_mean_fresh", K_BOOL, F(sender_mean_fresh), 0, 0, 0, 0, 0},
    {"sender_mean_partial", K_U32, F(sender_mean_partial), 0, 16, 0, 0, 0},
    {"server_momentum", K_F64, F(server_momentum), 0, 1, 0, 1, 0.9},
    {"beta1", K_F64, F(beta1), 0, 1, 0, 1, 0.9},
    {"beta2", K_F64, F(beta2), 0, 1, 0, 1, 0.99},
    {"tau", K_F64, F(tau), 1e-9, 10, 0, 0, 1e-3},
    {"clip_norm", K_F64, F(clip_norm), 0, 1e9, 0, 0, 0},
    {"trim_fraction", K_F64, F(trim_fraction), 0, 0.5, 0, 1, 0.1},
    {"dp_noise", K_F64, F(dp_noise), 0, 100, 0, 0, 0},
    {"max_update_norm", K_F64, F(max_update_norm), 0, 1e12, 0, 0, 0},
    {"seed", K_SEED, F(seed), 0, 0, 0, 0, 0},
    {"fedbuff", K_BOOL, F(fedbuff), 0, 0, 0, 0, 0},
    {"buffer_size", K_U32, F(buffer_size), 1, 1e5, 0, 0, 10},
    {"max_staleness", K_U32, F(max_staleness), 0, 1e5, 0, 0, 10},
    {"fednova", K_BOOL, F(fednova), 0, 0, 0, 0, 0},
    {"time_budget", K_BOOL, F(time_budget), 0, 0, 0, 0, 0},
    {"min_local_steps", K_U32, F(min_local_steps), 1, 1e6, 0, 0, 1},
    {"max_local_steps", K_U32, F(max_local_steps), 0, 1e6, 0, 0, 0},
    {"paced_selection", K_BOOL, F(paced_selection), 0, 0, 0, 0, 0},
    {"fairness_rounds", K_U32, F(fairness_rounds), 0, 1e6, 0, 0, 0},
    {"deadline_percentile", K_U32, F(deadline_percentile), 0, 100, 0, 0, 0},
    {"deadline_rounds", K_U32, F(deadline_rounds), 1, 1000, 0, 0, 10},
    {"min_report_deadline_ms", K_I64, F(min_report_deadline_ms), 1, 7 * DAY_MS, 0, 0, 1000},
    {"retain_last", K_U32, F(retain_last), 0, 1e9, 0, 0, 0},
    {"retain_every", K_U32, F(retain_every), 0, 1e9, 0, 0, 0},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

static size_t key_index(const char *key)
{
    size_t i = 0;
    while (i < KEY_COUNT && strcmp(keys[i].key, key) != 0)
        i++;
    return i;
}

/* A numeric field (K_U32, K_QUORUM, K_I64, K_F64) as a double: exact, as
 * the bounds keep integers far below 2^53. */
static double field_number(const sl_task_config *c, const key_spec *k)
{
    const char *field = (const char *)c + k->offset;
    double d;
    int64_t i64;
    uint32_t u32;
    if (k->kind == K_F64) {
        memcpy(&d, field, sizeof d);
        return d;
    }
    if (k->kind == K_I64) {
        memcpy(&i64, field, sizeof i64);
        return (double)i64;
    }
    memcpy(&u32, field, sizeof u32);
    return (double)u32;
}

/* Stores @v (in range, integral for the integer kinds) into a numeric field. */
static void store_number(sl_task_config *c, const key_spec *k, double v)
{
    char *field = (char *)c + k->offset;
    int64_t i64 = (int64_t)v;
    uint32_t u32 = (uint32_t)v;
    if (k->kind == K_F64)
        memcpy(field, &v, sizeof v);
    else if (k->kind == K_I64)
        memcpy(field, &i64, sizeof i64);
    else
        memcpy(field, &u32, sizeof u32);
}

static int is_number_kind(key_kind kind)
{
    return kind == K_U32 || kind == K_QUORUM || kind == K_I64 || kind == K_F64;
}

static void set_err(char *err, size_t errcap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void set_err(char *err, size_t errcap, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errcap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
}

/* Short text that reads back as exactly the same double: the value the user
 * wrote in messages (0.1, not 0.10000000000000001), and exact canonical
 * JSON. Assumes the "C" numeric locale (the library never calls setlocale). */
static void fmt_num(double v, char *out, size_t cap)
{
    snprintf(out, cap, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, cap, "%.17g", v);
}

/* A key from the input, made printable for a message. */
static void fmt_key(const char *key, char *out, size_t cap)
{
    size_t i = 0;
    for (; key[i] != '\0' && i + 1 < cap && i < 64; i++)
        out[i] = isprint((unsigned char)key[i]) ? key[i] : '?';
    out[i] = '\0';
}

static const char *json_type_name(const cJSON *item)
{
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsArray(item))
        return "an array";
    return "an object";
}

static int check_range(const key_spec *k, double v, char *err, size_t errcap)
{
    char vs[32], bs[32];
    fmt_num(v, vs, sizeof vs);
    if (v < k->min || (k->min_open && v == k->min)) {
        fmt_num(k->min, bs, sizeof bs);
        set_err(err, errcap, "%s: %s is %s %s", k->key, vs,
                k->min_open ? "not above" : "below the minimum", bs);
        return SL_ECONFIG_VALUE;
    }
    if (v > k->max || (k->max_open && v == k->max)) {
        fmt_num(k->max, bs, sizeof bs);
        set_err(err, errcap, "%s: %s is %s %s", k->key, vs,
                k->max_open ? "not below" : "above the maximum", bs);
        return SL_ECONFIG_VALUE;
    }
    return SL_OK;
}

static int check_text(const key_spec *k, const char *s, size_t cap, char *err, size_t errcap)
{
    size_t n = strnlen(s, cap);
    if (n >= cap) {
        set_err(err, errcap, "%s: longer than %zu bytes", k->key, cap - 1);
        return SL_ECONFIG_VALUE;
    }
    if (k->kind == K_NAME && n == 0) {
        set_err(err, errcap, "%s: must not be empty", k->key);
        return SL_ECONFIG_VALUE;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        /* names are shown in logs and the dashboard: no control characters;
         * a capability is one token of a comma-separated list */
        int ok = k->kind == K_NAME ? (ch >= 0x20 && ch != 0x7f)
                                   : (isalnum(ch) || strchr("_.:-", ch) != NULL);
        if (!ok) {
            set_err(err, errcap, "%s: byte 0x%02x at offset %zu is not allowed", k->key, ch, i);
            return SL_ECONFIG_VALUE;
        }
    }
    return SL_OK;
}

static int parse_seed_string(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t n = strlen(s);
    if (n == 0 || n > 20)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* One "frozen" entry (@len bytes at @s; not terminated): a layout name or a
 * module prefix, so 1..127 bytes of the layout's name characters.
 * @where names it in messages ("frozen[2]"). */
static int check_frozen_entry(const char *s, size_t len, const char *where, char *err,
                              size_t errcap)
{
    if (len == 0 || len > FROZEN_NAME) {
        set_err(err, errcap, "%s: %s", where,
                len == 0 ? "must not be empty" : "longer than 127 bytes (no layout name is)");
        return SL_ECONFIG_VALUE;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && strchr("_.:/-", ch) == NULL) {
            set_err(err, errcap,
                    "%s: byte 0x%02x at offset %zu is not in a layout name ([A-Za-z0-9_.:/-])",
                    where, ch, i);
            return SL_ECONFIG_VALUE;
        }
    }
    return SL_OK;
}

/* The stored form: entries joined by commas, terminated inside the field. */
static int check_frozen(const char *frozen, char *err, size_t errcap)
{
    size_t n = strnlen(frozen, SL_TASK_FROZEN_MAX), i = 0, k = 0;
    char where[32];
    if (n >= SL_TASK_FROZEN_MAX) {
        set_err(err, errcap, "frozen: longer than %d bytes in all", SL_TASK_FROZEN_MAX - 1);
        return SL_ECONFIG_VALUE;
    }
    while (n > 0 && i <= n) {
        size_t len = strcspn(frozen + i, ",");
        int rc;
        snprintf(where, sizeof where, "frozen[%zu]", k++);
        if ((rc = check_frozen_entry(frozen + i, len, where, err, errcap)) != SL_OK)
            return rc;
        i += len + 1;
    }
    return SL_OK;
}

static int parse_frozen(const cJSON *item, sl_task_config *c, char *err, size_t errcap)
{
    const cJSON *e;
    char joined[SL_TASK_FROZEN_MAX], where[32];
    size_t used = 0, k = 0;
    int rc;
    if (!cJSON_IsArray(item)) {
        set_err(err, errcap, "frozen: expected an array of parameter names, got %s",
                json_type_name(item));
        return SL_ECONFIG_VALUE;
    }
    memset(joined, 0, sizeof joined);
    cJSON_ArrayForEach(e, item)
    {
        size_t len;
        snprintf(where, sizeof where, "frozen[%zu]", k++);
        if (!cJSON_IsString(e)) {
            set_err(err, errcap, "%s: expected a string, got %s", where, json_type_name(e));
            return SL_ECONFIG_VALUE;
        }
        len = strlen(e->valuestring);
        if ((rc = check_frozen_entry(e->valuestring, len, where, err, errcap)) != SL_OK)
            return rc;
        if (used + (used > 0) + len >= sizeof joined) {
            set_err(err, errcap, "frozen: the names take more than %d bytes in all",
                    SL_TASK_FROZEN_MAX - 1);
            return SL_ECONFIG_VALUE;
        }
        if (used > 0)
            joined[used++] = ',';
        memcpy(joined + used, e->valuestring, len);
        used += len;
    }
    memcpy(c->frozen, joined, sizeof joined);
    return SL_OK;
}

/* local_betas: an array [beta1, beta2], each in the key's range. */
static int parse_betas(const key_spec *k, const cJSON *item, sl_task_config *c, char *err,
                       size_t errcap)
{
    double b[2];
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2) {
        set_err(err, errcap, "%s: expected an array of two numbers [beta1, beta2], got %s", k->key,
                cJSON_IsArray(item) ? "another length" : json_type_name(item));
        return SL_ECONFIG_VALUE;
    }
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(item, i);
        char name[32];
        key_spec one = *k;
        int rc;
        snprintf(name, sizeof name, "%s[%d]", k->key, i);
        one.key = name;
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble)) {
            set_err(err, errcap, "%s: expected a finite number, got %s", name,
                    cJSON_IsNumber(e) ? "infinity" : json_type_name(e));
            return SL_ECONFIG_VALUE;
        }
        if ((rc = check_range(&one, e->valuedouble, err, errcap)) != SL_OK)
            return rc;
        b[i] = e->valuedouble;
    }
    memcpy(c->local_betas, b, sizeof b);
    return SL_OK;
}

/* The JSON value of one key into @c. @quorum_fraction receives a fraction
 * of target, resolved once every key is read. */
static int parse_key(const key_spec *k, const cJSON *item, sl_task_config *c,
                     double *quorum_fraction, char *err, size_t errcap)
{
    char *field = (char *)c + k->offset;
    int rc;

    switch (k->kind) {
    case K_NAME:
    case K_CAPS:
    case K_VALUES:
    case K_SCOPE:
    case K_EF:
    case K_AGG: {
        size_t cap = k->kind == K_NAME ? sizeof c->name : sizeof c->required_caps;
        if (!cJSON_IsString(item)) {
            set_err(err, errcap, "%s: expected a string, got %s", k->key, json_type_name(item));
            return SL_ECONFIG_VALUE;
        }
        if (k->kind == K_VALUES) {
            if (sl_value_mode_parse(item->valuestring, &c->values) != SL_OK) {
                set_err(err, errcap, "%s: unknown value mode (fp32 ... sign)", k->key);
                return SL_ECONFIG_VALUE;
            }
            return SL_OK;
        }
        if (k->kind == K_SCOPE) {
            if (sl_topk_scope_parse(item->valuestring, &c->topk_scope) != SL_OK) {
                set_err(err, errcap, "%s: expected \"model\" or \"tensor\"", k->key);
                return SL_ECONFIG_VALUE;
            }
            return SL_OK;
        }
        if (k->kind == K_EF) {
            if (sl_error_feedback_parse(item->valuestring, &c->error_feedback) != SL_OK) {
                set_err(err, errcap, "%s: expected \"tracking\" or \"residual\"", k->key);
                return SL_ECONFIG_VALUE;
            }
            return SL_OK;
        }
        if (k->kind == K_AGG) {
            for (unsigned i = 0; i < AGGREGATOR_COUNT; i++) {
                if (strcmp(item->valuestring, aggregator_names[i]) == 0) {
                    c->aggregator = (sl_aggregator)i;
                    return SL_OK;
                }
            }
            set_err(err, errcap, "%s: unknown aggregator (fedavg ... median)", k->key);
            return SL_ECONFIG_VALUE;
        }
        if ((rc = check_text(k, item->valuestring, cap, err, errcap)) != SL_OK)
            return rc;
        memset(field, 0, cap);
        memcpy(field, item->valuestring, strlen(item->valuestring));
        return SL_OK;
    }
    case K_BOOL: {
        int b = cJSON_IsTrue(item) ? 1 : 0;
        if (!cJSON_IsBool(item)) {
            set_err(err, errcap, "%s: expected true or false, got %s", k->key,
                    json_type_name(item));
            return SL_ECONFIG_VALUE;
        }
        memcpy(field, &b, sizeof b);
        return SL_OK;
    }
    case K_OPTIM:
        if (cJSON_IsString(item)) {
            for (unsigned i = 0; i < OPTIMIZER_COUNT; i++) {
                if (strcmp(item->valuestring, optimizer_names[i]) == 0) {
                    c->local_optimizer = (sl_local_optimizer)i;
                    return SL_OK;
                }
            }
        }
        set_err(err, errcap, "%s: expected \"sgd\", \"adam\" or \"adamw\"", k->key);
        return SL_ECONFIG_VALUE;
    case K_BETAS:
        return parse_betas(k, item, c, err, errcap);
    case K_FROZEN:
        return parse_frozen(item, c, err, errcap);
    case K_SEED:
        if (cJSON_IsString(item)) {
            if (!parse_seed_string(item->valuestring, &c->seed)) {
                set_err(err, errcap, "%s: expected a decimal integer in [0, 2^64)", k->key);
                return SL_ECONFIG_VALUE;
            }
            return SL_OK;
        }
        break;
    default:
        break;
    }

    /* numbers from here on */
    if (!cJSON_IsNumber(item)) {
        set_err(err, errcap, "%s: expected a number, got %s", k->key, json_type_name(item));
        return SL_ECONFIG_VALUE;
    }
    double v = item->valuedouble;
    char vs[32];
    if (!isfinite(v)) { /* cJSON reads 1e999 as infinity */
        set_err(err, errcap, "%s: not a finite number", k->key);
        return SL_ECONFIG_VALUE;
    }
    fmt_num(v, vs, sizeof vs);
    if (k->kind == K_QUORUM && v > 0 && v < 1) {
        *quorum_fraction = v;
        return SL_OK;
    }
    if (k->kind != K_F64 && v != floor(v)) {
        if (k->kind == K_QUORUM)
            set_err(err, errcap, "%s: %s is neither a count >= 1 nor a fraction in (0, 1)", k->key,
                    vs);
        else
            set_err(err, errcap, "%s: %s is not an integer", k->key, vs);
        return SL_ECONFIG_VALUE;
    }
    if (k->kind == K_SEED) {
        if (v < 0 || v > SEED_EXACT_MAX) {
            set_err(err, errcap, "%s: %s is outside [0, 2^53] (larger: a decimal string)", k->key,
                    vs);
            return SL_ECONFIG_VALUE;
        }
        c->seed = (uint64_t)v;
        return SL_OK;
    }
    if ((rc = check_range(k, v, err, errcap)) != SL_OK)
        return rc;
    store_number(c, k, v);
    if (k->kind == K_QUORUM)
        *quorum_fraction = 0;
    return SL_OK;
}

static void set_defaults(sl_task_config *c)
{
    memset(c, 0, sizeof *c); /* fedavg, top-k over the model, seed 0, fedbuff off, no caps */
    memcpy(c->name, "task", 5);
    /* ternary at 1% over the whole model: about 300x fewer upload bytes than
     * dense fp32 on lenet5 (README: starling bench fl) */
    c->values = SL_VALUE_TERNARY;
    /* the classic residual, decayed by 0.9 at each participation: on lenet5 at
     * the default density it led tracking on a fleet where every device takes
     * part in every round (mean of rounds 30-50 88.38% against 87.98-88.36%,
     * 85% in round 6 against 8-9) and on the demo's fleet, where a device takes
     * part in about one round in 2.5 (86.72% against 85.52%) (README: starling
     * bench fl; codec.h, sl_error_feedback) */
    c->error_feedback = SL_EF_RESIDUAL;
    c->local_betas[0] = BETA1_DEFAULT; /* torch.optim.Adam's */
    c->local_betas[1] = BETA2_DEFAULT;
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (is_number_kind(keys[i].kind))
            store_number(c, &keys[i], keys[i].def);
}

/* The local optimiser's cross-field rules: settings that belong to another
 * optimiser are mistakes, not no-ops (optim.h refuses them too). */
static int validate_local(const sl_task_config *c, char *err, size_t errcap)
{
    const char *name = sl_local_optimizer_name(c->local_optimizer);
    if (c->local_nesterov && (c->local_optimizer != SL_LOCAL_SGD || c->local_momentum <= 0)) {
        set_err(
            err, errcap, "local_nesterov: needs local_optimizer \"sgd\" and local_momentum > 0%s",
            c->local_optimizer != SL_LOCAL_SGD ? "" : " (Nesterov without momentum is plain SGD)");
        return SL_ECONFIG_VALUE;
    }
    if (c->local_optimizer != SL_LOCAL_SGD && c->local_momentum != 0) {
        set_err(err, errcap,
                "local_momentum: SGD's; local_optimizer \"%s\" takes local_betas (omit "
                "local_momentum or set it to 0)",
                name);
        return SL_ECONFIG_VALUE;
    }
    if (c->local_optimizer == SL_LOCAL_SGD &&
        (c->local_betas[0] != BETA1_DEFAULT || c->local_betas[1] != BETA2_DEFAULT)) {
        set_err(err, errcap, "local_betas: only for local_optimizer \"adam\" or \"adamw\"");
        return SL_ECONFIG_VALUE;
    }
    if (c->local_optimizer == SL_LOCAL_SGD && c->local_eps != EPS_DEFAULT) {
        set_err(err, errcap, "local_eps: only for local_optimizer \"adam\" or \"adamw\"");
        return SL_ECONFIG_VALUE;
    }
    return SL_OK;
}

double sl_sender_mean_length(const sl_task_config *cfg)
{
    if (cfg->sender_mean <= 0)
        return 0;
    if (cfg->sender_mean_epochs > 0) /* 60 / 10 is 6 exactly: the weights of 6 rounds */
        return (double)cfg->sender_mean_epochs /
               (double)(cfg->local_epochs > 0 ? cfg->local_epochs : 1);
    return (double)cfg->sender_mean_rounds;
}

double sl_sender_mean_length_share(const sl_task_config *cfg, double share)
{
    double r = sl_sender_mean_length(cfg), floor = SL_SENDER_MEAN_ROUNDS_DEFAULT, x = r;
    if (cfg->sender_mean_partial == 0 || !(share < 1))
        return r; /* NaN too */
    if (share < 0)
        share = 0;
    for (uint32_t i = 0; i < cfg->sender_mean_partial; i++)
        x = x * share;
    if (x < floor)
        x = floor;
    return x < r ? x : r;
}

/* The key that gives the task's senders' mean its length, for errors. */
static const char *sender_mean_key(const sl_task_config *c)
{
    return c->sender_mean_epochs > 0 ? "sender_mean_epochs" : "sender_mean_rounds";
}

/* Ranges of every field and the cross-field rules: run on the parsed
 * configuration and on any configuration given to sl_task_config_to_json(). */
static int validate(const sl_task_config *c, char *err, size_t errcap)
{
    int rc;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_spec *k = &keys[i];
        const char *field = (const char *)c + k->offset;
        double v;
        switch (k->kind) {
        case K_NAME:
        case K_CAPS:
            rc = check_text(k, field, k->kind == K_NAME ? sizeof c->name : sizeof c->required_caps,
                            err, errcap);
            if (rc != SL_OK)
                return rc;
            continue;
        case K_VALUES:
            if ((unsigned)c->values > SL_VALUE_SIGN) {
                set_err(err, errcap, "%s: unknown value mode %d", k->key, (int)c->values);
                return SL_ECONFIG_VALUE;
            }
            continue;
        case K_SCOPE:
            if (sl_topk_scope_name(c->topk_scope) == NULL) {
                set_err(err, errcap, "%s: unknown scope %d", k->key, (int)c->topk_scope);
                return SL_ECONFIG_VALUE;
            }
            continue;
        case K_EF:
            if (sl_error_feedback_name(c->error_feedback) == NULL) {
                set_err(err, errcap, "%s: unknown mode %d", k->key, (int)c->error_feedback);
                return SL_ECONFIG_VALUE;
            }
            continue;
        case K_AGG:
            if ((unsigned)c->aggregator >= AGGREGATOR_COUNT) {
                set_err(err, errcap, "%s: unknown aggregator %d", k->key, (int)c->aggregator);
                return SL_ECONFIG_VALUE;
            }
            continue;
        case K_BOOL: {
            int b;
            memcpy(&b, field, sizeof b);
            if (b != 0 && b != 1) {
                set_err(err, errcap, "%s: must be 0 or 1", k->key);
                return SL_ECONFIG_VALUE;
            }
            continue;
        }
        case K_OPTIM:
            if ((unsigned)c->local_optimizer >= OPTIMIZER_COUNT) {
                set_err(err, errcap, "%s: unknown optimiser %d", k->key, (int)c->local_optimizer);
                return SL_ECONFIG_VALUE;
            }
            continue;
        case K_BETAS:
            for (int b = 0; b < 2; b++) {
                if (!isfinite(c->local_betas[b])) {
                    set_err(err, errcap, "%s: not a finite number", k->key);
                    return SL_ECONFIG_VALUE;
                }
                if ((rc = check_range(k, c->local_betas[b], err, errcap)) != SL_OK)
                    return rc;
            }
            continue;
        case K_FROZEN:
            if ((rc = check_frozen(c->frozen, err, errcap)) != SL_OK)
                return rc;
            continue;
        default: /* K_SEED: every value is valid */
            if (!is_number_kind(k->kind))
                continue;
            break;
        }
        v = field_number(c, k);
        if (!isfinite(v)) {
            set_err(err, errcap, "%s: not a finite number", k->key);
            return SL_ECONFIG_VALUE;
        }
        if ((rc = check_range(k, v, err, errcap)) != SL_OK)
            return rc;
    }
    if (c->quorum > c->target) {
        set_err(err, errcap, "quorum: %u is above target %u", c->quorum, c->target);
        return SL_ECONFIG_VALUE;
    }
    if (c->residual_decay < 1 && c->error_feedback != SL_EF_RESIDUAL) {
        set_err(err, errcap,
                "residual_decay: below 1 needs error_feedback \"residual\" (tracking has no "
                "residual mass to decay)");
        return SL_ECONFIG_VALUE;
    }
    /* tracking keeps the global model minus the model the coordinator holds for the
     * device, the held models' weighted mean being the global: only FedAvg's move
     * (the weighted mean of the decoded updates) keeps it so. A server optimiser's or
     * a larger server_lr's move is absorbed and sent again: bench fl diverged to 10%
     * (fedavgm at server_lr 1 and 0.3, fedavg at server_lr 2); a robust statistic
     * moves the model by other than what the devices count as delivered. */
    if (c->error_feedback == SL_EF_TRACKING &&
        (c->aggregator != SL_AGG_FEDAVG || c->server_lr > 1 ||
         (c->server_lr_ramp > 0 && c->server_lr * c->server_lr_boost > 1))) {
        set_err(err, errcap,
                "error_feedback: tracking needs aggregator \"fedavg\" with "
                "server_lr <= 1 (it counts the model's move as the mean of the updates sent); "
                "set \"error_feedback\": \"residual\" for aggregator %s%s",
                sl_aggregator_name(c->aggregator),
                c->aggregator == SL_AGG_FEDAVG
                    ? " and a server rate above 1 (server_lr, times server_lr_boost under a "
                      "server_lr_ramp)"
                    : "");
        return SL_ECONFIG_VALUE;
    }
    /* the senders' mean is a FedAvg-family sum's; a robust statistic counts unsent
     * coordinates as zeros, the noise is calibrated to a clipped update's share of the mean
     * of all, and tracking counts the model's move as that mean */
    if (c->sender_mean_fresh && sl_sender_mean_length(c) <= 0) {
        set_err(err, errcap,
                "sender_mean_fresh: only with the senders' mean (sender_mean_epochs or "
                "sender_mean_rounds above 0, sender_mean above 0)");
        return SL_ECONFIG_VALUE;
    }
    if (c->sender_mean_partial > 0 && (c->sender_mean_epochs == 0 || c->sender_mean <= 0)) {
        set_err(err, errcap,
                "sender_mean_partial: only with sender_mean_epochs above 0 (and sender_mean above "
                "0): it shortens the fade by local epochs where devices sit out rounds");
        return SL_ECONFIG_VALUE;
    }
    if (c->sender_mean_rounds > 0 && c->sender_mean_epochs > 0) {
        set_err(err, errcap,
                "sender_mean_epochs: not with sender_mean_rounds (the fade's length in local "
                "epochs or in participations: set one)");
        return SL_ECONFIG_VALUE;
    }
    if (sl_sender_mean_length(c) > 0 &&
        (c->aggregator == SL_AGG_TRIMMED_MEAN || c->aggregator == SL_AGG_MEDIAN ||
         c->dp_noise > 0 || c->error_feedback == SL_EF_TRACKING)) {
        set_err(err, errcap, "%s: not with %s (%s)", sender_mean_key(c),
                c->dp_noise > 0                       ? "dp_noise"
                : c->error_feedback == SL_EF_TRACKING ? "error_feedback \"tracking\""
                                                      : sl_aggregator_name(c->aggregator),
                c->dp_noise > 0 ? "the noise is calibrated to an update's share of the mean of all"
                : c->error_feedback == SL_EF_TRACKING
                    ? "it counts the model's move as the mean of the updates sent; set "
                      "\"error_feedback\": \"residual\""
                    : "its statistic counts a coordinate an update did not send as 0");
        return SL_ECONFIG_VALUE;
    }
    if (c->fednova && (c->fedbuff || c->dp_noise > 0 || c->error_feedback == SL_EF_TRACKING)) {
        set_err(err, errcap, "fednova: not with %s (%s)",
                c->fedbuff        ? "fedbuff"
                : c->dp_noise > 0 ? "dp_noise"
                                  : "error_feedback \"tracking\"",
                c->fedbuff ? "its buffers weigh updates by staleness, not steps"
                : c->dp_noise > 0
                    ? "the noise is calibrated to the mean of clipped updates"
                    : "tracking counts the model's move as the mean of the updates sent; "
                      "set \"error_feedback\": \"residual\"");
        return SL_ECONFIG_VALUE;
    }
    if (c->max_local_steps > 0 && c->max_local_steps < c->min_local_steps) {
        set_err(err, errcap, "max_local_steps: %u is below min_local_steps %u", c->max_local_steps,
                c->min_local_steps);
        return SL_ECONFIG_VALUE;
    }
    if (c->retain_every > 0 && c->retain_last == 0) {
        set_err(err, errcap,
                "retain_every: needs retain_last >= 1 (retain_last 0 keeps every version)");
        return SL_ECONFIG_VALUE;
    }
    if (c->dp_noise > 0 && c->clip_norm <= 0) {
        set_err(err, errcap, "dp_noise: needs clip_norm > 0 (noise scales with the bound)");
        return SL_ECONFIG_VALUE;
    }
    if ((rc = validate_local(c, err, errcap)) != SL_OK)
        return rc;
    if (c->warmup_rounds > 0 && c->warmup_density < c->density) {
        char a[32], b[32];
        fmt_num(c->warmup_density, a, sizeof a);
        fmt_num(c->density, b, sizeof b);
        set_err(err, errcap, "warmup_density: %s is below density %s (warm-up starts denser)", a,
                b);
        return SL_ECONFIG_VALUE;
    }
    return SL_OK;
}

static uint32_t quorum_of(double fraction, uint32_t target)
{
    double q = fraction * (double)target;
    double r = nearbyint(q);
    double up = fabs(q - r) <= 1e-9 * (double)target ? r : ceil(q);
    return up < 1 ? 1u : (uint32_t)up;
}

static int is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* The key whose value starts at @pos, when the text before it is "key":
 * (a best effort for messages: keys with escaped quotes are not found). */
static int key_before(const char *json, size_t pos, char *key, size_t cap)
{
    size_t i = pos, close;
    while (i > 0 && is_ws(json[i - 1]))
        i--;
    if (i == 0 || json[--i] != ':')
        return 0;
    while (i > 0 && is_ws(json[i - 1]))
        i--;
    if (i == 0 || json[--i] != '"')
        return 0;
    close = i;
    while (i > 0 && json[i - 1] != '"' && close - i < cap - 1)
        i--;
    if (i == 0 || json[i - 1] != '"' || close == i)
        return 0;
    for (size_t j = i; j < close; j++)
        key[j - i] = isprint((unsigned char)json[j]) ? json[j] : '?';
    key[close - i] = '\0';
    return 1;
}

/* A syntax error: the key whose value did not parse when there is one
 * ("server_lr": NaN), else the position and the text around it. */
static void syntax_error(const char *json, size_t len, const char *at, char *err, size_t errcap)
{
    size_t pos = (at != NULL && at >= json && at <= json + len) ? (size_t)(at - json) : len;
    size_t from = pos > 40 ? pos - 40 : 0, to = pos + 8 < len ? pos + 8 : len;
    char ctx[64], key[72];
    size_t n = 0;
    if (key_before(json, pos, key, sizeof key)) {
        set_err(err, errcap,
                "%s: the value is not valid JSON (NaN and Infinity are not JSON "
                "numbers), at byte %zu",
                key, pos);
        return;
    }
    for (size_t i = from; i < to && n + 1 < sizeof ctx; i++)
        ctx[n++] = isprint((unsigned char)json[i]) ? json[i] : ' ';
    ctx[n] = '\0';
    set_err(err, errcap, "config: JSON syntax error at byte %zu near '%s'", pos, ctx);
}

/* @stored: a configuration a coordinator stored (canonical JSON): a key it lacks was
 * written before the key existed, and takes the behaviour of then. */
static int parse_config(const char *json, size_t len, int stored, sl_task_config *out, char *err,
                        size_t errcap)
{
    sl_task_config c;
    const char *end = NULL;
    cJSON *root;
    const cJSON *item;
    double quorum_fraction = 0.5; /* the default quorum */
    unsigned char seen[KEY_COUNT] = {0};
    int rc = SL_OK;

    if (err != NULL && errcap > 0)
        err[0] = '\0';
    if (json == NULL || out == NULL)
        return SL_EINVAL;
    if (len > CONFIG_MAX_BYTES) {
        set_err(err, errcap, "config: %zu bytes, above the limit of %u", len, CONFIG_MAX_BYTES);
        return SL_ECONFIG_VALUE;
    }
    if (len == 0 || memchr(json, '\0', len) != NULL) {
        set_err(err, errcap, "config: %s", len == 0 ? "empty" : "contains a NUL byte");
        return SL_ECONFIG_VALUE;
    }
    /* cJSON keeps its last error in a global too; we only use the position
     * it hands back through @end. */
    root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (root == NULL) {
        syntax_error(json, len, end, err, errcap);
        return SL_ECONFIG_VALUE;
    }
    for (const char *p = end; p != NULL && p < json + len; p++) {
        if (!is_ws(*p)) {
            syntax_error(json, len, p, err, errcap);
            rc = SL_ECONFIG_VALUE;
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        set_err(err, errcap, "config: expected a JSON object, got %s", json_type_name(root));
        rc = SL_ECONFIG_VALUE;
        goto done;
    }

    set_defaults(&c);
    cJSON_ArrayForEach(item, root)
    {
        size_t i = key_index(item->string);
        char ks[80];
        if (i == KEY_COUNT || seen[i]) {
            fmt_key(item->string, ks, sizeof ks);
            set_err(err, errcap, "%s: %s", ks, i == KEY_COUNT ? "unknown key" : "duplicate key");
            rc = SL_ECONFIG_KEY;
            goto done;
        }
        seen[i] = 1;
        if ((rc = parse_key(&keys[i], item, &c, &quorum_fraction, err, errcap)) != SL_OK)
            goto done;
    }
    /* the decay belongs to the classic residual: tracking keeps no stale mass */
    if (c.error_feedback == SL_EF_TRACKING && !seen[key_index("residual_decay")])
        c.residual_decay = 1;
    /* sparse FedAvg with the classic residual starts with each coordinate's mean over the
     * updates that sent it (#23); it is FedAvg's: other rules move the model by other than
     * the updates' mean, tracking counts the move as that mean, a dense update sends every
     * coordinate, FedBuff's versions are buffers, DP's noise is calibrated to the mean of
     * all. A task that asks for a server rate ramp gets that instead (both at once
     * overshoot: bench fl fell to 11% in round 2). */
    /* its fade is by local epochs, and it leaves out what the last aggregate carried after an
     * aggregate some of its devices missed (sender_mean_fresh; README: Fast starts); a task
     * may fade by participations instead (sender_mean_rounds, times their share of rounds);
     * a task stored before a key keeps the rule it ran */
    if (!seen[key_index("sender_mean_rounds")] && !seen[key_index("sender_mean_epochs")] &&
        !stored && c.aggregator == SL_AGG_FEDAVG && c.error_feedback == SL_EF_RESIDUAL &&
        c.density < 1 && !c.fedbuff && c.server_lr_ramp == 0 && c.dp_noise == 0)
        c.sender_mean_epochs = SL_SENDER_MEAN_EPOCHS_DEFAULT;
    if (!seen[key_index("sender_mean_share")] && !stored && c.sender_mean_rounds > 0)
        c.sender_mean_share = 1;
    if (!seen[key_index("sender_mean_fresh")] && !stored && sl_sender_mean_length(&c) > 0)
        c.sender_mean_fresh = 1;
    /* where devices sit out rounds, the fade by local epochs is shortened (README: Fast starts) */
    if (!seen[key_index("sender_mean_partial")] && !stored && c.sender_mean_epochs > 0 &&
        c.sender_mean > 0)
        c.sender_mean_partial = SL_SENDER_MEAN_PARTIAL_DEFAULT;
    /* local_momentum's default is SGD's; AdamW's decay defaults as in PyTorch */
    if (c.local_optimizer != SL_LOCAL_SGD && !seen[key_index("local_momentum")])
        c.local_momentum = 0;
    if (c.local_optimizer == SL_LOCAL_ADAMW && !seen[key_index("local_weight_decay")])
        c.local_weight_decay = ADAMW_DECAY;
    if (!seen[key_index("target")]) {
        set_err(err, errcap, "target: required (the number of reports that closes a round)");
        rc = SL_ECONFIG_VALUE;
        goto done;
    }
    if (quorum_fraction > 0)
        c.quorum = quorum_of(quorum_fraction, c.target);
    if ((rc = validate(&c, err, errcap)) != SL_OK)
        goto done;
    /* FedBuff's buffers record no participants, so the participations the senders' mean fades
     * by would stay at none and its weight would never fall: a new task is refused (one stored
     * so by an earlier build keeps loading, as it ran) */
    if (!stored && c.fedbuff && sl_sender_mean_length(&c) > 0) {
        set_err(err, errcap,
                "%s: not with fedbuff (its buffers record no participants, so the weight would "
                "never fade); set \"%s\": 0",
                sender_mean_key(&c), sender_mean_key(&c));
        rc = SL_ECONFIG_VALUE;
        goto done;
    }
    /* FedNova's sums take effective steps below SL_AGG_NOVA_STEPS_BOUND: a task whose devices
     * may report enough steps to pass it would have their updates refused at upload, so a new
     * one is refused here (SGD momentum above about 0.999 without max_local_steps) */
    if (!stored && c.fednova && c.local_optimizer == SL_LOCAL_SGD) {
        uint32_t most =
            c.time_budget && c.max_local_steps > 0 ? c.max_local_steps : SL_ENGINE_MAX_STEPS;
        if (!(sl_effective_steps(most, c.local_momentum) < SL_AGG_NOVA_STEPS_BOUND)) {
            set_err(err, errcap,
                    "fednova: local_momentum %g makes %u local steps %.3g effective steps, "
                    "beyond the aggregation's 2^30; lower local_momentum, or set time_budget "
                    "with a smaller max_local_steps",
                    c.local_momentum, most, sl_effective_steps(most, c.local_momentum));
            rc = SL_ECONFIG_VALUE;
            goto done;
        }
    }
    *out = c;
done:
    cJSON_Delete(root);
    return rc;
}

int sl_task_config_parse(const char *json, size_t len, sl_task_config *out, char *err,
                         size_t errcap)
{
    return parse_config(json, len, 0, out, err, errcap);
}

int sl_task_config_parse_stored(const char *json, size_t len, sl_task_config *out, char *err,
                                size_t errcap)
{
    return parse_config(json, len, 1, out, err, errcap);
}

int sl_task_config_to_json(const sl_task_config *c, char **out)
{
    cJSON *root;
    char *text = NULL, *copy;
    int ok = 1;

    if (c == NULL || out == NULL)
        return SL_EINVAL;
    if (validate(c, NULL, 0) != SL_OK)
        return SL_EINVAL;
    root = cJSON_CreateObject();
    if (root == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < KEY_COUNT && ok; i++) {
        const key_spec *k = &keys[i];
        const char *field = (const char *)c + k->offset;
        char num[32];
        switch (k->kind) {
        case K_NAME:
        case K_CAPS:
            ok = cJSON_AddStringToObject(root, k->key, field) != NULL;
            break;
        case K_VALUES:
            ok = cJSON_AddStringToObject(root, k->key, sl_value_mode_name(c->values)) != NULL;
            break;
        case K_SCOPE:
            ok = cJSON_AddStringToObject(root, k->key, sl_topk_scope_name(c->topk_scope)) != NULL;
            break;
        case K_EF:
            ok = cJSON_AddStringToObject(root, k->key, sl_error_feedback_name(c->error_feedback)) !=
                 NULL;
            break;
        case K_AGG:
            ok = cJSON_AddStringToObject(root, k->key, sl_aggregator_name(c->aggregator)) != NULL;
            break;
        case K_BOOL: {
            int b;
            memcpy(&b, field, sizeof b);
            ok = cJSON_AddBoolToObject(root, k->key, b) != NULL;
            break;
        }
        case K_OPTIM:
            ok = cJSON_AddStringToObject(root, k->key,
                                         sl_local_optimizer_name(c->local_optimizer)) != NULL;
            break;
        case K_BETAS: {
            char b1[32], b2[32], pair[80];
            fmt_num(c->local_betas[0], b1, sizeof b1);
            fmt_num(c->local_betas[1], b2, sizeof b2);
            snprintf(pair, sizeof pair, "[%s,%s]", b1, b2);
            ok = cJSON_AddRawToObject(root, k->key, pair) != NULL;
            break;
        }
        case K_FROZEN: {
            cJSON *list = cJSON_AddArrayToObject(root, k->key);
            char name[FROZEN_NAME + 1];
            ok = list != NULL;
            for (size_t at = 0, n = strlen(c->frozen); ok && n > 0 && at <= n;) {
                size_t len = strcspn(c->frozen + at, ",");
                memcpy(name, c->frozen + at, len); /* <= 127 bytes: validate() checked */
                name[len] = '\0';
                ok = cJSON_AddItemToArray(list, cJSON_CreateString(name));
                at += len + 1;
            }
            break;
        }
        case K_SEED:
            /* a number while a double holds it exactly, else a string */
            snprintf(num, sizeof num, c->seed <= (UINT64_C(1) << 53) ? "%llu" : "\"%llu\"",
                     (unsigned long long)c->seed);
            ok = cJSON_AddRawToObject(root, k->key, num) != NULL;
            break;
        default:
            /* our own exact text (integers print as integers): cJSON's
             * printer accepts %.15g when it reads back within an epsilon,
             * so 0.30000000000000004 would come back as 0.3 */
            fmt_num(field_number(c, k), num, sizeof num);
            ok = cJSON_AddRawToObject(root, k->key, num) != NULL;
            break;
        }
    }
    if (ok)
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (text == NULL)
        return SL_ENOMEM;
    /* hand back plain malloc memory whatever allocator cJSON's hooks use */
    copy = malloc(strlen(text) + 1);
    if (copy != NULL)
        memcpy(copy, text, strlen(text) + 1);
    cJSON_free(text);
    if (copy == NULL)
        return SL_ENOMEM;
    *out = copy;
    return SL_OK;
}

int sl_task_config_check_layout(const sl_task_config *c, const sl_layout *layout, char *err,
                                size_t errcap)
{
    size_t n, nt;
    if (err != NULL && errcap > 0)
        err[0] = '\0';
    if (c == NULL || layout == NULL)
        return SL_EINVAL;
    n = strnlen(c->frozen, sizeof c->frozen);
    nt = sl_layout_tensors(layout);
    for (size_t i = 0, k = 0; n > 0 && n < sizeof c->frozen && i <= n; k++) {
        const char *entry = c->frozen + i;
        size_t len = strcspn(entry, ","), t = 0;
        /* optim.c's rule: the tensor itself, or a module path above it */
        for (; t < nt; t++) {
            const char *name = sl_layout_tensor(layout, t)->name;
            if (len > 0 && strncmp(name, entry, len) == 0 &&
                (name[len] == '\0' || name[len] == '.' || entry[len - 1] == '.'))
                break;
        }
        if (t == nt) {
            char list[160];
            size_t used = 0;
            list[0] = '\0';
            for (size_t j = 0; j < nt && used + 8 < sizeof list; j++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "",
                                 sl_layout_tensor(layout, j)->name);
                if (w < 0 || (size_t)w >= sizeof list - used) {
                    snprintf(list + used, sizeof list - used, ", ...");
                    break;
                }
                used += (size_t)w;
            }
            set_err(err, errcap,
                    "frozen[%zu]: \"%.*s\" names no parameter of the task's model, nor a module "
                    "of one (its parameters: %s)",
                    k, (int)len, entry, list);
            return SL_ECONFIG_VALUE;
        }
        i += len + 1;
    }
    return SL_OK;
}
