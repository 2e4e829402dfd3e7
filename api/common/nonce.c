/*
 * nonce.c - replay protection: a bounded set of (device, nonce) pairs.
 *
 * Entries live in a ring in arrival order; when it is full the oldest is
 * evicted. A chained hash table over the ring finds a pair in O(1). Memory is
 * fixed at creation (capacity entries plus a table twice that size), so a
 * flood of requests cannot grow it.
 *
 * Nonces are attacker-chosen, so the table is keyed with SipHash-2-4 and a
 * random per-cache key: an attacker cannot aim many nonces at one chain.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "starling/api_sign.h"
#include "sign_int.h"

/* Past this the memory (about 100 bytes an entry) is surely a mistake. */
#define SL__NONCE_CAPACITY_MAX ((size_t)1 << 24)
#define SL__NO_ENTRY           UINT32_MAX

typedef struct nonce_entry {
    int64_t device_id;
    uint32_t next;   /* next entry in the same bucket, or SL__NO_ENTRY */
    uint32_t bucket; /* the bucket this entry is chained into */
    char nonce[SL__NONCE_MAX + 1];
} nonce_entry;

struct sl_nonce_cache {
    pthread_mutex_t lock;
    int64_t window_ms;
    size_t capacity;
    size_t count;      /* live entries, <= capacity */
    size_t head;       /* ring index of the oldest entry when count == capacity */
    nonce_entry *ring; /* capacity entries */
    uint32_t *buckets; /* nbuckets heads */
    uint32_t bucket_mask;
    uint64_t sipkey[2];
};

/* ------------------------------------------------------------------------ */
/* SipHash-2-4 (Aumasson and Bernstein), as in the reference implementation. */

#define ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = ROTL64(v[1], 13);
    v[1] ^= v[0];
    v[0] = ROTL64(v[0], 32);
    v[2] += v[3];
    v[3] = ROTL64(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = ROTL64(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = ROTL64(v[1], 17);
    v[1] ^= v[2];
    v[2] = ROTL64(v[2], 32);
}

static uint64_t siphash24(const uint64_t key[2], const uint8_t *in, size_t len)
{
    uint64_t v[4] = {key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL,
                     key[0] ^ 0x6c7967656e657261ULL, key[1] ^ 0x7465646279746573ULL};
    size_t full = len - len % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = 0;
        for (int b = 7; b >= 0; b--)
            m = m << 8 | in[i + (size_t)b];
        v[3] ^= m;
        sip_round(v);
        sip_round(v);
        v[0] ^= m;
    }
    uint64_t last = (uint64_t)len << 56;
    for (size_t b = 0; b < len % 8; b++)
        last |= (uint64_t)in[full + b] << (8 * b);
    v[3] ^= last;
    sip_round(v);
    sip_round(v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for (int r = 0; r < 4; r++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

static uint32_t bucket_of(const sl_nonce_cache *c, int64_t device_id, const char *nonce,
                          size_t nonce_len)
{
    uint8_t buf[8 + SL__NONCE_MAX];
    uint64_t id = (uint64_t)device_id;
    for (int b = 0; b < 8; b++)
        buf[b] = (uint8_t)(id >> (8 * b));
    memcpy(buf + 8, nonce, nonce_len);
    return (uint32_t)siphash24(c->sipkey, buf, 8 + nonce_len) & c->bucket_mask;
}

/* ------------------------------------------------------------------------ */

int sl_nonce_cache_create(int64_t window_ms, size_t capacity, sl_nonce_cache **out)
{
    if (out == NULL || window_ms <= 0 || capacity == 0 || capacity > SL__NONCE_CAPACITY_MAX)
        return SL_EINVAL;
    size_t nbuckets = 1;
    while (nbuckets < 2 * capacity)
        nbuckets <<= 1;
    sl_nonce_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return SL_ENOMEM;
    c->ring = calloc(capacity, sizeof *c->ring);
    c->buckets = malloc(nbuckets * sizeof *c->buckets);
    if (c->ring == NULL || c->buckets == NULL)
        goto fail;
    if (pthread_mutex_init(&c->lock, NULL) != 0)
        goto fail;
    if (sl__random_bytes(NULL, (unsigned char *)c->sipkey, sizeof c->sipkey) != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c->buckets);
        free(c->ring);
        free(c);
        return SL_EIO;
    }
    for (size_t i = 0; i < nbuckets; i++)
        c->buckets[i] = SL__NO_ENTRY;
    c->bucket_mask = (uint32_t)(nbuckets - 1);
    c->window_ms = window_ms;
    c->capacity = capacity;
    *out = c;
    return SL_OK;
fail:
    free(c->buckets);
    free(c->ring);
    free(c);
    return SL_ENOMEM;
}

void sl_nonce_cache_free(sl_nonce_cache *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    free(c->ring);
    free(c);
}

/* Unchain ring entry @idx from its bucket. */
static void unlink_entry(sl_nonce_cache *c, uint32_t idx)
{
    uint32_t *link = &c->buckets[c->ring[idx].bucket];
    while (*link != SL__NO_ENTRY) {
        if (*link == idx) {
            *link = c->ring[idx].next;
            return;
        }
        link = &c->ring[*link].next;
    }
}

int sl_nonce_check(sl_nonce_cache *c, int64_t device_id, const char *nonce, int64_t timestamp_ms,
                   int64_t now_ms)
{
    if (c == NULL)
        return SL_EINVAL;
    /* The window first: a stale request is refused whatever its nonce. The
     * comparison avoids overflow for timestamps near the int64 limits. */
    int64_t lo = now_ms > INT64_MIN + c->window_ms ? now_ms - c->window_ms : INT64_MIN;
    int64_t hi = now_ms < INT64_MAX - c->window_ms ? now_ms + c->window_ms : INT64_MAX;
    if (timestamp_ms < lo || timestamp_ms > hi)
        return SL_ETIMEDOUT;
    if (!sl__nonce_valid(nonce))
        return SL_ESYNTAX;
    size_t len = strlen(nonce);
    uint32_t bucket = bucket_of(c, device_id, nonce, len);

    pthread_mutex_lock(&c->lock);
    for (uint32_t i = c->buckets[bucket]; i != SL__NO_ENTRY; i = c->ring[i].next) {
        const nonce_entry *e = &c->ring[i];
        if (e->device_id == device_id && strcmp(e->nonce, nonce) == 0) {
            pthread_mutex_unlock(&c->lock);
            return SL_EDUPLICATE;
        }
    }
    uint32_t slot;
    if (c->count < c->capacity) {
        slot = (uint32_t)c->count++;
    } else {
        slot = (uint32_t)c->head;
        unlink_entry(c, slot);
        c->head = (c->head + 1) % c->capacity;
    }
    nonce_entry *e = &c->ring[slot];
    e->device_id = device_id;
    e->bucket = bucket;
    memcpy(e->nonce, nonce, len + 1);
    e->next = c->buckets[bucket];
    c->buckets[bucket] = slot;
    pthread_mutex_unlock(&c->lock);
    return SL_OK;
}
