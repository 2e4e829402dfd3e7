/* sl_store_test.h - helpers for the storage tests (header-only). */
#ifndef SL_STORE_TEST_H
#define SL_STORE_TEST_H

#include "sl_test.h"
#include "starling/store.h"

/* Open (or create) the store at @dir/store.db with the defaults and @vfs. */
static inline sl_store *sl_test_store_open(const char *dir, const char *vfs, const sl_clock *clock)
{
    sl_store_options o;
    char path[600], err[512];
    sl_store *s = NULL;
    sl_store_options_default(&o);
    snprintf(path, sizeof path, "%s/store.db", dir);
    o.path = path;
    o.vfs = vfs;
    o.clock = clock;
    o.check = SL_STORE_CHECK_FULL;
    if (sl_store_open(&o, &s, err, sizeof err) != SL_OK) {
        fprintf(stderr, "sl_store_open: %s\n", err);
        return NULL;
    }
    return s;
}

/* A task, a round and @ndevices devices to hang updates on. */
static inline void sl_test_store_fixture(sl_store *s, int64_t *round_id, int64_t *devices,
                                         size_t ndevices)
{
    int64_t task;
    sl_round_record r;
    if (sl_store_create_task(s, "t", "{}", "w 10\n", &task) != SL_OK)
        abort();
    memset(&r, 0, sizeof r);
    r.task_id = task;
    r.round_no = 1;
    r.base_version = 1;
    r.state = SL_ROUND_TRAINING;
    r.target = 10;
    r.quorum = 5;
    if (sl_store_create_round(s, &r) != SL_OK)
        abort();
    *round_id = r.id;
    for (size_t i = 0; i < ndevices; i++) {
        uint8_t key[8];
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)((i + 1) >> (8 * b));
        if (sl_store_enrol_device(s, key, sizeof key, "{}", &devices[i]) != SL_OK)
            abort();
    }
}

/* A deterministic frame and its (test) digest for update number @i. */
static inline void sl_test_update_bytes(uint64_t i, uint8_t *frame, size_t len, uint8_t *digest)
{
    uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
    for (size_t j = 0; j < len; j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        frame[j] = (uint8_t)x;
    }
    for (int j = 0; j < 32; j++)
        digest[j] = (uint8_t)(i >> (8 * (j % 8))) ^ (uint8_t)j ^ frame[j % len];
}

#endif /* SL_STORE_TEST_H */
