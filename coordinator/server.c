/*
 * server.c - server optimisers (Reddi et al., "Adaptive Federated
 * Optimization", ICLR 2021) and their persistent state.
 *
 * @delta is the aggregated mean update (local - global), i.e. the negative
 * pseudo-gradient, so every rule moves the model along +delta:
 *   FedAvg, trimmed mean, median:  w += lr * delta
 *   FedAvgM:    m = beta * m + delta;                      w += lr * m
 *   FedAdam:    m = b1 m + (1 - b1) delta; v = b2 v + (1 - b2) delta^2
 *                                                          w += lr * m / (sqrt(v) + tau)
 *   FedYogi:    m as Adam; v = v - (1 - b2) delta^2 sign(v - delta^2)
 *   FedAdagrad: v = v + delta^2;                           w += lr * delta / (sqrt(v) + tau)
 * As in the paper: no bias correction; FedAdagrad has no first moment (it
 * uses delta itself, so it keeps only v); state starts at m = 0 and
 * v = tau^2 (the paper's v_{-1} >= tau^2), created on first use.
 *
 * Everything is computed in double and rounded into the float model once
 * per element, products and sums as separate statements so no compiler
 * fuses them (see aggregate.c): the same state and delta give the same bits.
 *
 * State bytes (little-endian), version 1, or 2 with bit 2:
 *   0   4  magic "SLOS"
 *   4   1  version (1; 2 when flags has bit 2)
 *   5   1  flags: bit 0 m present, bit 1 v present, bit 2 carried present; other bits 0
 *   6   2  reserved, 0
 *   8   8  n (elements per vector)
 *   16  8  steps
 *   24     m: n IEEE-754 doubles (when bit 0)
 *   ..     v: n IEEE-754 doubles (when bit 1)
 *   ..     carried (when bit 2): ceil(n / 8) bytes, coordinate i at byte i / 8, bit i % 8
 *          (bits past n are 0); then u64 d and d device ids (i64), strictly ascending
 *   end 4  CRC-32 (zlib's) of every byte before it
 * A state without bit 2 is written as version 1, byte for byte as before it existed.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "coord_int.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define STATE_MAGIC   "SLOS"
#define STATE_VERSION 1
#define STATE_CARRIED 2 /* the version with the carried section */
#define STATE_HEADER  24
#define STATE_TRAILER 4
#define HAS_M         0x1u
#define HAS_V         0x2u
#define HAS_CARRIED   0x4u

/* Which vectors an aggregator's optimiser keeps. */
static unsigned state_needs(sl_aggregator a)
{
    switch (a) {
    case SL_AGG_FEDAVGM:
        return HAS_M;
    case SL_AGG_FEDADAM:
    case SL_AGG_FEDYOGI:
        return HAS_M | HAS_V;
    case SL_AGG_FEDADAGRAD:
        return HAS_V;
    default:
        return 0;
    }
}

/* One element's step: from (m, v, w) and delta to the new (m, v, w). Pure,
 * so a checking pass and a writing pass compute the same values. */
static void step(const sl_task_config *cfg, double d, double *m, double *v, double *w)
{
    double upd, t;

    switch (cfg->aggregator) {
    case SL_AGG_FEDAVGM:
        t = cfg->server_momentum * *m;
        *m = t + d;
        upd = *m;
        break;
    case SL_AGG_FEDADAM:
    case SL_AGG_FEDYOGI: {
        double d2 = d * d, a, b;
        a = cfg->beta1 * *m;
        b = (1.0 - cfg->beta1) * d;
        *m = a + b;
        if (cfg->aggregator == SL_AGG_FEDADAM) {
            a = cfg->beta2 * *v;
            b = (1.0 - cfg->beta2) * d2;
            *v = a + b;
        } else {
            double diff = *v - d2;
            double sign = (diff > 0) - (diff < 0);
            b = (1.0 - cfg->beta2) * d2;
            b = b * sign;
            *v = *v - b;
        }
        t = sqrt(*v) + cfg->tau;
        upd = *m / t;
        break;
    }
    case SL_AGG_FEDADAGRAD: {
        double d2 = d * d;
        *v = *v + d2;
        t = sqrt(*v) + cfg->tau;
        upd = d / t;
        break;
    }
    default:
        upd = d;
        break;
    }
    t = cfg->server_lr * upd;
    *w = *w + t;
}

int sl_server_apply(const sl_task_config *cfg, const double *delta, size_t n, float *model,
                    sl_server_state *st)
{
    unsigned needs;
    double *m, *v, *fresh_m = NULL, *fresh_v = NULL;

    if (cfg == NULL || delta == NULL || model == NULL || n == 0 ||
        (unsigned)cfg->aggregator > SL_AGG_MEDIAN)
        return SL_EINVAL;
    needs = state_needs(cfg->aggregator);
    if (needs != 0 && st == NULL)
        return SL_EINVAL;
    if (st != NULL && st->n != n && (st->n != 0 || st->m != NULL || st->v != NULL))
        return SL_EINVAL; /* state of another model size */
    if (!isfinite(cfg->server_lr) || !isfinite(cfg->server_momentum) || !isfinite(cfg->beta1) ||
        !isfinite(cfg->beta2) || !(cfg->tau > 0) || !isfinite(cfg->tau))
        return SL_EINVAL;

    /* a vector the state lacks starts fresh (first round, or a state
     * decoded from a version that did not need it) */
    m = st != NULL ? st->m : NULL;
    v = st != NULL ? st->v : NULL;
    if ((needs & HAS_M) && m == NULL) {
        if ((fresh_m = calloc(n, sizeof *fresh_m)) == NULL)
            return SL_ENOMEM;
        m = fresh_m;
    }
    if ((needs & HAS_V) && v == NULL) {
        double tau2 = cfg->tau * cfg->tau;
        if ((fresh_v = malloc(n * sizeof *fresh_v)) == NULL) {
            free(fresh_m);
            return SL_ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
            fresh_v[i] = tau2;
        v = fresh_v;
    }

    /* first pass: check that every new value is finite and the model fits
     * in float, without writing anything (a failed call changes nothing) */
    for (size_t i = 0; i < n; i++) {
        double mi = m != NULL ? m[i] : 0, vi = v != NULL ? v[i] : 0, wi = (double)model[i];
        if (!isfinite(delta[i]))
            goto nonfinite;
        step(cfg, delta[i], &mi, &vi, &wi);
        if (!isfinite(mi) || !isfinite(vi) || !(fabs(wi) <= FLT_MAX))
            goto nonfinite;
    }
    for (size_t i = 0; i < n; i++) {
        double mi = m != NULL ? m[i] : 0, vi = v != NULL ? v[i] : 0, wi = (double)model[i];
        step(cfg, delta[i], &mi, &vi, &wi);
        if (m != NULL && (needs & HAS_M))
            m[i] = mi;
        if (v != NULL && (needs & HAS_V))
            v[i] = vi;
        model[i] = (float)wi;
    }
    if (st != NULL) {
        if (fresh_m != NULL)
            st->m = fresh_m;
        if (fresh_v != NULL)
            st->v = fresh_v;
        st->n = n;
        st->steps++;
    }
    return SL_OK;
nonfinite:
    free(fresh_m);
    free(fresh_v);
    return SL_ENONFINITE;
}

double sl_server_lr_at(const sl_task_config *cfg, int64_t version)
{
    double k, t;
    if (cfg->server_lr_ramp == 0 || version < 1 || version > (int64_t)cfg->server_lr_ramp)
        return cfg->server_lr;
    k = (double)version; /* the aggregate's number, 1 .. ramp */
    t = (k - 1.0) / (double)cfg->server_lr_ramp;
    t = t * (1.0 - cfg->server_lr_boost);
    t = cfg->server_lr_boost + t; /* the factor: boost at k = 1, 1 at k = ramp + 1 */
    return cfg->server_lr * t;
}

/* The weight at progress @participations of a fade of @r participations. */
static double sender_mean_over(const sl_task_config *cfg, double participations, double r)
{
    double t, p = participations >= 1 ? participations : 1; /* NaN too */
    if (r <= 0 || p >= r + 1)
        return 0;
    t = (p - 1.0) / r;
    t = 1.0 - t;
    return cfg->sender_mean * t; /* sender_mean at p = 1, 0 at p = rounds + 1 */
}

double sl_sender_mean_at(const sl_task_config *cfg, double participations)
{
    return sender_mean_over(cfg, participations, sl_sender_mean_length(cfg));
}

/* The share of rounds p / n the average device reported to, at most 1. */
static double share_of(double participations, int64_t round_no)
{
    double p = participations >= 1 ? participations : 1; /* NaN too */
    double n = round_no >= 1 ? (double)round_no : 1;
    return p < n ? p / n : 1;
}

double sl_sender_mean_weight(const sl_task_config *cfg, double participations, int64_t round_no)
{
    return sender_mean_over(cfg, sl_sender_mean_progress(cfg, participations, round_no),
                            sl_sender_mean_length_share(cfg, share_of(participations, round_no)));
}

int sl_sender_mean_fresh_at(const sl_task_config *cfg, double participations, int64_t round_no)
{
    if (!cfg->sender_mean_fresh || sl_sender_mean_length(cfg) <= 0)
        return 0;
    if (cfg->sender_mean_partial == 0)
        return 1;
    return sl_sender_mean_length_share(cfg, share_of(participations, round_no)) >
           (double)SL_SENDER_MEAN_ROUNDS_DEFAULT;
}

double sl_sender_mean_progress(const sl_task_config *cfg, double participations, int64_t round_no)
{
    double p = participations >= 1 ? participations : 1; /* NaN too */
    double n = round_no >= 1 ? (double)round_no : 1;
    if ((!cfg->sender_mean_share && !cfg->sender_mean_partial) || p >= n)
        return p; /* every device every round: p is the round's number */
    return p * (p / n);
}

void sl_server_state_free(sl_server_state *st)
{
    if (st == NULL)
        return;
    free(st->m);
    free(st->v);
    free(st->carried);
    free(st->devices);
    memset(st, 0, sizeof *st);
}

static void put_u64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

/* zlib's crc32() takes 32-bit lengths: feed large buffers in pieces. */
static uint32_t crc_of(const uint8_t *p, size_t len)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (len > 0) {
        uInt piece = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = crc32(crc, p, piece);
        p += piece;
        len -= piece;
    }
    return (uint32_t)crc;
}

/* Bytes of a state with @vectors vectors of @n doubles and, with @carried, its carried
 * section of @devices devices; 0 on overflow. */
static size_t state_size(unsigned vectors, uint64_t n, int carried, uint64_t devices)
{
    uint64_t max = ((uint64_t)SIZE_MAX - STATE_HEADER - STATE_TRAILER) / 32;
    if (n > max || n > SL_CODEC_MAX_PARAMS || devices > max)
        return 0;
    return STATE_HEADER + (size_t)vectors * 8 * (size_t)n +
           (carried ? (size_t)(n + 7) / 8 + 8 + 8 * (size_t)devices : 0) + STATE_TRAILER;
}

int sl_server_state_encode(const sl_server_state *st, void **out, size_t *len)
{
    unsigned flags, vectors;
    size_t size;
    uint8_t *buf, *p;

    if (st == NULL || out == NULL || len == NULL)
        return SL_EINVAL;
    flags = (st->m != NULL ? HAS_M : 0) | (st->v != NULL ? HAS_V : 0) |
            (st->carried != NULL ? HAS_CARRIED : 0);
    vectors = (flags & HAS_M ? 1u : 0u) + (flags & HAS_V ? 1u : 0u);
    if ((vectors > 0 || st->carried != NULL) && st->n == 0)
        return SL_EINVAL;
    if (st->carried != NULL && st->ndevices > 0 && st->devices == NULL)
        return SL_EINVAL;
    for (size_t i = 1; st->carried != NULL && i < st->ndevices; i++)
        if (st->devices[i] <= st->devices[i - 1])
            return SL_EINVAL;
    if ((size = state_size(vectors, st->n, st->carried != NULL, st->ndevices)) == 0)
        return SL_ETOOBIG;
    for (size_t i = 0; i < st->n; i++)
        if ((st->m != NULL && !isfinite(st->m[i])) || (st->v != NULL && !isfinite(st->v[i])))
            return SL_ENONFINITE;
    if ((buf = malloc(size)) == NULL)
        return SL_ENOMEM;
    memcpy(buf, STATE_MAGIC, 4);
    buf[4] = flags & HAS_CARRIED ? STATE_CARRIED : STATE_VERSION;
    buf[5] = (uint8_t)flags;
    buf[6] = buf[7] = 0;
    put_u64(buf + 8, st->n);
    put_u64(buf + 16, st->steps);
    p = buf + STATE_HEADER;
    for (int k = 0; k < 2; k++) {
        const double *vec = k == 0 ? st->m : st->v;
        if (vec == NULL)
            continue;
        for (size_t i = 0; i < st->n; i++, p += 8) {
            uint64_t bits;
            memcpy(&bits, &vec[i], sizeof bits);
            put_u64(p, bits);
        }
    }
    if (flags & HAS_CARRIED) {
        size_t nb = (st->n + 7) / 8;
        memcpy(p, st->carried, nb);
        if (st->n % 8 != 0)
            p[nb - 1] &= (uint8_t)((1u << (st->n % 8)) - 1u); /* bits past n: 0 */
        p += nb;
        put_u64(p, st->ndevices);
        p += 8;
        for (size_t i = 0; i < st->ndevices; i++, p += 8)
            put_u64(p, (uint64_t)st->devices[i]);
    }
    uint32_t crc = crc_of(buf, size - STATE_TRAILER);
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(crc >> (8 * i));
    *out = buf;
    *len = size;
    return SL_OK;
}

int sl_server_state_decode(const void *buf, size_t len, size_t n, sl_server_state *out)
{
    const uint8_t *b = buf, *p;
    unsigned flags, vectors;
    uint64_t hn;
    uint32_t crc;
    size_t size;
    double *vecs[2] = {NULL, NULL};
    uint8_t *carried = NULL;
    int64_t *devices = NULL;
    uint64_t ndev = 0;
    int rc = SL_OK;

    if (buf == NULL || out == NULL)
        return SL_EINVAL;
    if (len < STATE_HEADER + STATE_TRAILER)
        return len >= 4 && memcmp(b, STATE_MAGIC, 4) != 0 ? SL_EMAGIC : SL_ETRUNCATED;
    if (memcmp(b, STATE_MAGIC, 4) != 0)
        return SL_EMAGIC;
    if (b[4] != STATE_VERSION && b[4] != STATE_CARRIED)
        return SL_EVERSION;
    flags = b[5];
    if ((flags & ~(HAS_M | HAS_V | HAS_CARRIED)) != 0 || b[6] != 0 || b[7] != 0 ||
        (b[4] == STATE_CARRIED) != ((flags & HAS_CARRIED) != 0))
        return SL_ECORRUPT;
    hn = get_u64(b + 8);
    vectors = (flags & HAS_M ? 1u : 0u) + (flags & HAS_V ? 1u : 0u);
    if ((vectors > 0 || (flags & HAS_CARRIED)) && hn == 0)
        return SL_ECORRUPT;
    if (hn != (uint64_t)n)
        return SL_ELAYOUT; /* the state of another model */
    if ((size = state_size(vectors, hn, 0, 0)) == 0)
        return SL_ECORRUPT;
    if (flags & HAS_CARRIED) { /* its device count sits after the bits */
        size_t at = size - STATE_TRAILER + (size_t)(hn + 7) / 8;
        if (len < at + 8)
            return SL_ETRUNCATED;
        ndev = get_u64(b + at);
        if ((size = state_size(vectors, hn, 1, ndev)) == 0)
            return SL_ECORRUPT;
    }
    if (len < size)
        return SL_ETRUNCATED;
    if (len > size)
        return SL_ECORRUPT;
    crc = (uint32_t)b[size - 4] | (uint32_t)b[size - 3] << 8 | (uint32_t)b[size - 2] << 16 |
          (uint32_t)b[size - 1] << 24;
    if (crc != crc_of(b, size - STATE_TRAILER))
        return SL_ECHECKSUM;

    p = b + STATE_HEADER;
    for (int k = 0; k < 2; k++) {
        if (!(flags & (k == 0 ? HAS_M : HAS_V)))
            continue;
        if ((vecs[k] = malloc(n * sizeof(double))) == NULL) {
            rc = SL_ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < n; i++, p += 8) {
            uint64_t bits = get_u64(p);
            double x;
            memcpy(&x, &bits, sizeof x);
            if (!isfinite(x)) {
                rc = SL_ENONFINITE;
                goto fail;
            }
            if (k == 1 && x < 0) { /* a second moment is never negative */
                rc = SL_ECORRUPT;
                goto fail;
            }
            vecs[k][i] = x;
        }
    }
    if (flags & HAS_CARRIED) {
        size_t nb = (n + 7) / 8;
        if (n % 8 != 0 && (p[nb - 1] >> (n % 8)) != 0) { /* bits past n */
            rc = SL_ECORRUPT;
            goto fail;
        }
        if ((carried = malloc(nb)) == NULL ||
            (ndev > 0 && (devices = malloc((size_t)ndev * sizeof *devices)) == NULL)) {
            rc = SL_ENOMEM;
            goto fail;
        }
        memcpy(carried, p, nb);
        p += nb + 8;
        for (size_t i = 0; i < (size_t)ndev; i++, p += 8) {
            devices[i] = (int64_t)get_u64(p);
            if (i > 0 && devices[i] <= devices[i - 1]) {
                rc = SL_ECORRUPT;
                goto fail;
            }
        }
    }
    memset(out, 0, sizeof *out);
    out->n = n;
    out->m = vecs[0];
    out->v = vecs[1];
    out->steps = get_u64(b + 16);
    out->carried = carried;
    out->devices = devices;
    out->ndevices = (size_t)ndev;
    return SL_OK;
fail:
    free(vecs[0]);
    free(vecs[1]);
    free(carried);
    free(devices);
    return rc;
}
