/*
 * live.c - a device's own data, through the task's data contract, as it grows.
 *
 * The store holds at most cap samples, cap derived from a byte budget: each
 * slot is the sample's floats, its label, a held-out flag, and its entry in
 * one of the two index lists (train / held out). When more samples arrive
 * than fit, the newest replace the oldest (a ring), or a uniform reservoir
 * sample of all seen is kept (Vitter's algorithm R, seeded): memory stays
 * at the budget whatever the size of the data.
 *
 * A refresh reads what the source has that is new. A refusal (bad data)
 * makes the data unusable: the agent says "no usable data: REASON" at its
 * check-ins and uploads nothing; the next refresh opens the source anew and
 * reads everything into an empty store (the application may have fixed or
 * replaced its file).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"
#include "starling/source.h"

#define READ_CHUNK 64 /* samples per source read */

struct sl__agent_live {
    char *uri;
    uint64_t cap_bytes;
    int reservoir;
    uint64_t seed, rng;
    char sha[65];
    sl_contract *contract;
    sl_source *src;
    int broken; /* the last refresh refused: start again from an empty store */
    /* the store: cap slots, n used */
    size_t cap, n;
    uint64_t seen;
    float *x, *lab;
    int32_t *y; /* class labels (SL_LABEL_CLASS) */
    unsigned char *held;
    uint32_t *train_ix; /* the training indices from the front, the held-out from the back */
    size_t train_n, eval_n, client_n_slot, eval_n_slot;
    uint32_t *client_ix_ptr, *eval_ix_ptr;
    float *chunk_x, *chunk_y; /* READ_CHUNK samples */
    sl_agent_data view;
};

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int sl__agent_live_create(const char *uri, uint64_t cap_bytes, int reservoir, uint64_t seed,
                          sl__agent_live **out)
{
    sl__agent_live *l;
    if (uri == NULL || out == NULL || cap_bytes == 0)
        return SL_EINVAL;
    if ((l = calloc(1, sizeof *l)) == NULL || (l->uri = strdup(uri)) == NULL) {
        free(l);
        return SL_ENOMEM;
    }
    l->cap_bytes = cap_bytes;
    l->reservoir = reservoir;
    l->seed = seed;
    *out = l;
    return SL_OK;
}

static void drop_store(sl__agent_live *l)
{
    free(l->x);
    free(l->lab);
    free(l->y);
    free(l->held);
    free(l->train_ix);
    free(l->chunk_x);
    free(l->chunk_y);
    l->x = l->lab = l->chunk_x = l->chunk_y = NULL;
    l->y = NULL;
    l->held = NULL;
    l->train_ix = NULL;
    l->cap = l->n = l->train_n = l->eval_n = 0;
    l->seen = 0;
    sl_source_close(l->src);
    l->src = NULL;
}

void sl__agent_live_free(sl__agent_live *l)
{
    if (l == NULL)
        return;
    drop_store(l);
    sl_contract_free(l->contract);
    free(l->uri);
    free(l);
}

/* Bytes one slot costs: sample, label, class label, held-out flag, its index entry. */
static size_t slot_bytes(const sl_contract *c)
{
    return (c->sample_size + c->tdim) * sizeof(float) +
           (c->label_kind == SL_LABEL_CLASS ? sizeof(int32_t) : 0) + 1 + sizeof(uint32_t);
}

/* An empty store for the contract, and the source opened. */
static int open_store(sl__agent_live *l, char *why, size_t cap)
{
    const sl_contract *c = l->contract;
    char err[512];
    size_t chunk = READ_CHUNK * (c->sample_size + c->tdim) * sizeof(float);
    int rc;
    drop_store(l);
    if (l->cap_bytes <= chunk || (l->cap_bytes - chunk) / slot_bytes(c) < 1) {
        snprintf(why, cap,
                 "no usable data: the data memory (%llu bytes) holds no sample of %zu values",
                 (unsigned long long)l->cap_bytes, c->sample_size);
        return SL_OK;
    }
    l->cap = (size_t)((l->cap_bytes - chunk) / slot_bytes(c));
    if (l->cap > UINT32_MAX)
        l->cap = UINT32_MAX;
    l->rng = l->seed;
    l->x = malloc(l->cap * c->sample_size * sizeof *l->x);
    l->lab = malloc(l->cap * c->tdim * sizeof *l->lab);
    l->y = c->label_kind == SL_LABEL_CLASS ? malloc(l->cap * sizeof *l->y) : NULL;
    l->held = malloc(l->cap);
    l->train_ix = malloc(l->cap * sizeof *l->train_ix);
    l->chunk_x = malloc(READ_CHUNK * c->sample_size * sizeof *l->chunk_x);
    l->chunk_y = malloc(READ_CHUNK * c->tdim * sizeof *l->chunk_y);
    if (l->x == NULL || l->lab == NULL || (c->label_kind == SL_LABEL_CLASS && l->y == NULL) ||
        l->held == NULL || l->train_ix == NULL || l->chunk_x == NULL || l->chunk_y == NULL) {
        drop_store(l);
        return SL_ENOMEM;
    }
    rc = sl_source_open(l->uri, c, &l->src, err, sizeof err);
    if (rc == SL_ENOMEM)
        return rc;
    if (rc != SL_OK)
        snprintf(why, cap, "no usable data: %s", err);
    return SL_OK;
}

int sl__agent_live_set_contract(sl__agent_live *l, const char *text, size_t len, const char *sha,
                                char *why, size_t cap)
{
    char err[400];
    sl_contract *c = NULL;
    int rc;
    why[0] = '\0';
    drop_store(l);
    sl_contract_free(l->contract);
    l->contract = NULL;
    snprintf(l->sha, sizeof l->sha, "%s", sha);
    memset(&l->view, 0, sizeof l->view);
    rc = sl_contract_parse(text, len, &c, err, sizeof err);
    if (rc == SL_ENOMEM)
        return rc;
    if (rc != SL_OK) {
        snprintf(why, cap, "no usable data: the task's data contract: %s", err);
        return SL_OK;
    }
    l->contract = c;
    rc = open_store(l, why, cap);
    l->broken = why[0] != '\0';
    return rc;
}

const sl_contract *sl__agent_live_contract(const sl__agent_live *l)
{
    return l != NULL ? l->contract : NULL;
}

const char *sl__agent_live_sha(const sl__agent_live *l)
{
    return l != NULL ? l->sha : "";
}

/* Sample @i of the chunk into the store: appended, or replacing per the policy. */
static void keep(sl__agent_live *l, size_t i)
{
    const sl_contract *c = l->contract;
    const float *x = l->chunk_x + i * c->sample_size, *y = l->chunk_y + i * c->tdim;
    size_t slot;
    if (l->n < l->cap) {
        slot = l->n++;
    } else if (!l->reservoir) {
        slot = (size_t)(l->seen % l->cap); /* the oldest */
    } else {
        uint64_t j = next_rand(&l->rng) % (l->seen + 1);
        if (j >= l->cap) {
            l->seen++;
            return;
        }
        slot = (size_t)j;
    }
    l->seen++;
    memcpy(l->x + slot * c->sample_size, x, c->sample_size * sizeof *x);
    memcpy(l->lab + slot * c->tdim, y, c->tdim * sizeof *y);
    if (l->y != NULL)
        l->y[slot] = (int32_t)y[0];
    l->held[slot] = (unsigned char)sl_contract_heldout(c, x, y);
}

/* The index lists and the view over the store. */
static void rebuild_view(sl__agent_live *l)
{
    const sl_contract *c = l->contract;
    size_t t = 0, e = l->n;
    for (size_t i = 0; i < l->n; i++) {
        if (l->held[i])
            l->train_ix[--e] = (uint32_t)i;
        else
            l->train_ix[t++] = (uint32_t)i;
    }
    l->train_n = t;
    l->eval_n = l->n - t;
    l->client_ix_ptr = l->train_ix;
    l->eval_ix_ptr = l->train_ix + t;
    l->client_n_slot = l->train_n;
    l->eval_n_slot = l->eval_n;
    memset(&l->view, 0, sizeof l->view);
    l->view.n = l->n;
    l->view.features = c->sample_size;
    l->view.x = l->x;
    l->view.y = l->y;
    l->view.t = c->label_kind == SL_LABEL_CLASS ? NULL : l->lab;
    l->view.tdim = c->label_kind == SL_LABEL_CLASS ? 0 : c->tdim;
    l->view.first = 0;
    l->view.count = 1;
    l->view.client_n = &l->client_n_slot;
    l->view.client_ix = &l->client_ix_ptr;
    l->view.eval_n = &l->eval_n_slot;
    l->view.eval_ix = &l->eval_ix_ptr;
    l->view.contract = c;
}

int sl__agent_live_refresh(sl__agent_live *l, char *why, size_t cap)
{
    const sl_contract *c = l != NULL ? l->contract : NULL;
    char err[512];
    size_t got;
    int rc;
    why[0] = '\0';
    if (c == NULL)
        return SL_EINVAL;
    if (l->broken || l->src == NULL) {
        if ((rc = open_store(l, why, cap)) != SL_OK)
            return rc;
        l->broken = why[0] != '\0';
        if (l->broken)
            return SL_OK;
    }
    do {
        rc = sl_source_read(l->src, l->chunk_x, l->chunk_y, READ_CHUNK, &got, err, sizeof err);
        if (rc == SL_ENOMEM)
            return rc;
        if (rc != SL_OK) {
            snprintf(why, cap, "no usable data: %s", err);
            l->broken = 1;
            memset(&l->view, 0, sizeof l->view);
            return SL_OK;
        }
        for (size_t i = 0; i < got; i++)
            keep(l, i);
    } while (got == READ_CHUNK);
    rebuild_view(l);
    if (l->train_n < c->min_samples)
        snprintf(why, cap, "too few samples: %zu to train on (%zu held out); the task needs %zu",
                 l->train_n, l->eval_n, c->min_samples);
    return SL_OK;
}

const sl_agent_data *sl__agent_live_data(const sl__agent_live *l)
{
    return l != NULL && !l->broken && l->view.count == 1 && l->train_n > 0 ? &l->view : NULL;
}

size_t sl__agent_live_bytes(const sl__agent_live *l)
{
    if (l == NULL || l->contract == NULL || l->cap == 0)
        return 0;
    return l->cap * slot_bytes(l->contract) +
           READ_CHUNK * (l->contract->sample_size + l->contract->tdim) * sizeof(float);
}

uint64_t sl__agent_live_seen(const sl__agent_live *l)
{
    return l != NULL ? l->seen : 0;
}
