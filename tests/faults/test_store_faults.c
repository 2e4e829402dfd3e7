/*
 * I/O faults on the acknowledgement path, as SQLite's own tests inject
 * them: the N-th write or fsync fails (EIO, or disk full) for every N until
 * the operation gets through untouched. Invariants: the caller hears "ok"
 * only for a durable write; an error is a specific status; the database is
 * intact afterwards and the write can be retried.
 */
#include <sqlite3.h>

#include "../support/sl_faultvfs.h"
#include "../support/sl_store_test.h"

static char base_dir[512];
static int64_t round_id, device_id;

static int setup(void **state)
{
    sl_store *s;
    (void)state;
    sl_faultvfs_register();
    sl_test_mkdtemp(base_dir, sizeof base_dir, "faults");
    s = sl_test_store_open(base_dir, NULL, NULL);
    if (s == NULL)
        return -1;
    sl_test_store_fixture(s, &round_id, &device_id, 1);
    sl_store_close(s); /* checkpointed: one self-contained file */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(base_dir);
    return 0;
}

/* A fresh copy of the base database in its own directory. */
static void fresh_copy(char *dir, size_t cap)
{
    char cmd[2048];
    sl_test_mkdtemp(dir, cap, "faultrun");
    snprintf(cmd, sizeof cmd, "cp '%s/store.db' '%s/store.db'", base_dir, dir);
    assert_int_equal(system(cmd), 0);
}

static int update_present(const char *dir, const uint8_t *sha)
{
    sl_store *s = sl_test_store_open(dir, NULL, NULL); /* integrity_check at open */
    uint64_t n = 0;
    assert_non_null(s);
    assert_int_equal(sl_store_count_updates(s, round_id, &n), SL_OK);
    if (n == 1) {
        uint8_t frame[8192];
        sl_store_receipt r;
        sl_update_put u = {round_id, device_id, frame, sizeof frame, 1, sha, 0};
        sl_test_update_bytes(1, frame, sizeof frame, (uint8_t[32]){0});
        /* the stored one is exactly ours: the same put is a duplicate, not a conflict */
        assert_int_equal(sl_store_put_update(s, &u, 5000, &r), SL_OK);
        assert_int_equal(r.duplicate, 1);
    }
    sl_store_close(s);
    return n == 1;
}

static void run_matrix(int what, int err, int expect_status)
{
    uint8_t frame[8192], sha[32];
    long n;
    int oks = 0, fails = 0;
    sl_test_update_bytes(1, frame, sizeof frame, sha);
    for (n = 1; n < 500; n++) {
        char dir[512];
        sl_store *s;
        sl_store_receipt r;
        sl_update_put u = {round_id, device_id, frame, sizeof frame, 1, sha, 0};
        int rc;
        long injected;

        fresh_copy(dir, sizeof dir);
        s = sl_test_store_open(dir, SL_FAULTVFS_NAME, NULL);
        assert_non_null(s);
        sl_faultvfs_arm(what, n, err);
        rc = sl_store_put_update(s, &u, 10000, &r);
        injected = sl_faultvfs_injected();
        sl_faultvfs_disarm();
        if (rc == SL_OK) {
            oks++;
        } else {
            fails++;
            assert_int_equal(rc, expect_status); /* a specific status, not a generic one */
            /* the device retries on the same store: it gets through */
            rc = sl_store_put_update(s, &u, 10000, &r);
            assert_int_equal(rc, SL_OK);
        }
        sl_store_close(s);
        /* after any outcome: intact, and an acknowledged update is there */
        assert_true(update_present(dir, sha));
        sl_test_rmtree(dir);
        if (injected == 0)
            break; /* the put never reached the N-th call: every N was tried */
    }
    print_message("fault %s/%d: %ld injection points, %d failed cleanly, %d got through\n",
                  what == SL_FAULT_WRITE ? "write" : "sync", err, n - 1, fails, oks);
    assert_true(n > 1 && n < 500);
    assert_true(fails > 0);
}

static void test_write_eio(void **state)
{
    (void)state;
    run_matrix(SL_FAULT_WRITE, SQLITE_IOERR_WRITE, SL_EIO);
}

static void test_write_enospc(void **state)
{
    (void)state;
    run_matrix(SL_FAULT_WRITE, SQLITE_FULL, SL_ENOSPC);
}

static void test_sync_eio(void **state)
{
    (void)state;
    run_matrix(SL_FAULT_SYNC, SQLITE_IOERR_FSYNC, SL_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_eio),
        cmocka_unit_test(test_write_enospc),
        cmocka_unit_test(test_sync_eio),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
