/* client_tests.h - helpers shared by the sl_client integration tests. */
#ifndef CLIENT_TESTS_H
#define CLIENT_TESTS_H

#include "../support/sl_test.h"
#include "mini_http.h"
#include "starling/api_client.h"

/* Records the retry delays instead of sleeping, so the tests run fast. */
typedef struct sleeps {
    int n;
    int64_t ms[64];
} sleeps;

static inline void record_sleep(void *ctx, int64_t ms)
{
    sleeps *s = ctx;
    if (s->n < 64)
        s->ms[s->n] = ms;
    s->n++;
}

/* Options every test starts from: short timeouts, recorded sleeps, seeded jitter. */
static inline void test_options(sl_client_options *o, char *url, size_t cap, const char *scheme,
                                int port, sleeps *sl)
{
    memset(o, 0, sizeof *o);
    snprintf(url, cap, "%s://127.0.0.1:%d", scheme, port);
    o->base_url = url;
    o->connect_timeout_ms = 2000;
    o->request_timeout_ms = 5000;
    o->max_attempts = 4;
    o->retry_base_ms = 100;
    o->retry_cap_ms = 1000;
    o->retry_after_cap_ms = 7000;
    o->sleep = record_sleep;
    o->sleep_ctx = sl;
    o->random_seed = 42;
}

static inline sl_client *make_client(const sl_client_options *o)
{
    sl_client *c = NULL;
    assert_int_equal(sl_client_create(o, &c), SL_OK);
    return c;
}

/* The upload and download tests (test_transfer.c). */
void test_upload_plain(void **state);
void test_upload_create_with_bytes(void **state);
void test_upload_create_with_bytes_cut(void **state);
void test_upload_conflict_and_resume(void **state);
void test_upload_drops_at_random_offsets(void **state);
void test_upload_lost_final_answer(void **state);
void test_upload_expired_session(void **state);
void test_download_resume(void **state);
void test_download_corrupt_body(void **state);
void test_download_not_modified(void **state);
void test_download_changed_resource(void **state);
void test_download_too_big(void **state);

#endif /* CLIENT_TESTS_H */
