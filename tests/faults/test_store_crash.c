/*
 * kill -9 at random instants: a child writes updates through group commit
 * from several threads and reports every acknowledged one on a pipe; the
 * parent SIGKILLs it, reopens the store with integrity_check and checks that
 * every acknowledged update is there, exactly once, byte for byte.
 * Usage: test_store_crash [kills]   (default 100; the slow label runs 1000)
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "../support/sl_store_test.h"

#define FRAME     4096
#define THREADS   4
#define PER_CHILD 4000 /* device numbers reserved for one child */

static long kills = 100;
static char dir[512];

typedef struct child_thread {
    sl_store *s;
    int64_t round_id;
    uint64_t first, count;
    int fd;
} child_thread;

static void *child_writer(void *arg)
{
    child_thread *t = arg;
    uint8_t frame[FRAME], sha[32];
    for (uint64_t i = t->first; i < t->first + t->count; i++) {
        uint8_t key[8];
        int64_t dev;
        sl_store_receipt r;
        sl_update_put u;
        for (int b = 0; b < 8; b++)
            key[b] = (uint8_t)(i >> (8 * b));
        if (sl_store_enrol_device(t->s, key, sizeof key, "{}", &dev) != SL_OK)
            _exit(3);
        sl_test_update_bytes(i, frame, sizeof frame, sha);
        u = (sl_update_put){t->round_id, dev, frame, sizeof frame, (uint32_t)(i & 0xffff), sha, 0};
        if (sl_store_put_update(t->s, &u, 30000, &r) != SL_OK)
            _exit(4);
        if (write(t->fd, &i, sizeof i) != (ssize_t)sizeof i) /* acknowledged */
            _exit(5);
    }
    return NULL;
}

static void run_child(int64_t round_id, uint64_t first, int fd)
{
    sl_store *s = sl_test_store_open(dir, NULL, NULL);
    pthread_t th[THREADS];
    child_thread t[THREADS];
    if (s == NULL)
        _exit(2);
    for (int k = 0; k < THREADS; k++) {
        t[k] = (child_thread){s, round_id, first + (uint64_t)k * (PER_CHILD / THREADS),
                              PER_CHILD / THREADS, fd};
        pthread_create(&th[k], NULL, child_writer, &t[k]);
    }
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    _exit(0);
}

typedef struct check_ctx {
    uint8_t *acked; /* by update number */
    uint64_t seen, max;
} check_ctx;

static int check_update(void *ctx, int64_t device_id, const void *frame, size_t len,
                        uint32_t num_samples, const uint8_t *sha256)
{
    check_ctx *c = ctx;
    uint8_t expect[FRAME], sha[32];
    (void)device_id;
    /* the device's key is the update number; recover it from num_samples + digest */
    for (uint64_t i = num_samples; i < c->max; i += 0x10000) {
        sl_test_update_bytes(i, expect, sizeof expect, sha);
        if (memcmp(sha, sha256, 32) == 0) {
            assert_int_equal(len, FRAME);
            assert_memory_equal(frame, expect, FRAME);
            if (c->acked[i] == 2)
                fail_msg("update %llu stored twice", (unsigned long long)i);
            c->acked[i] = 2;
            c->seen++;
            return 0;
        }
    }
    fail_msg("an update that no child wrote");
    return 1;
}

static void test_kill_at_random_instants(void **state)
{
    sl_store *s;
    int64_t round_id, unused;
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u + 1, total_acked = 0;
    uint64_t max = (uint64_t)kills * PER_CHILD;
    uint8_t *acked = calloc(max, 1);
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "crash");
    s = sl_test_store_open(dir, NULL, NULL);
    assert_non_null(s);
    sl_test_store_fixture(s, &round_id, &unused, 0);
    sl_store_close(s);

    for (long k = 0; k < kills; k++) {
        int fds[2], status;
        pid_t pid;
        uint64_t id;
        check_ctx c = {acked, 0, max};
        assert_int_equal(pipe(fds), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            run_child(round_id, (uint64_t)k * PER_CHILD, fds[1]);
        }
        close(fds[1]);
        usleep((useconds_t)(2000 + sl_test_rand(&seed) % 60000));
        kill(pid, SIGKILL);
        /* every acknowledgement written before the kill is in the pipe */
        while (read(fds[0], &id, sizeof id) == (ssize_t)sizeof id) {
            assert_true(id < max);
            acked[id] = 1;
            total_acked++;
        }
        close(fds[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status))
            fail_msg("child exited with %d before the kill", WEXITSTATUS(status));
        /* restart: integrity_check, then every acknowledged update exactly once */
        s = sl_test_store_open(dir, NULL, NULL);
        assert_non_null(s);
        for (uint64_t i = 0; i < max; i++)
            if (acked[i] == 2)
                acked[i] = 1;
        assert_int_equal(sl_store_foreach_update(s, round_id, check_update, &c), SL_OK);
        for (uint64_t i = 0; i < max; i++)
            if (acked[i] == 1)
                fail_msg("acknowledged update %llu lost", (unsigned long long)i);
        sl_store_close(s);
    }
    print_message("%ld kills, %llu acknowledged updates, none lost or doubled\n", kills,
                  (unsigned long long)total_acked);
    assert_true(total_acked > 0);
    free(acked);
    sl_test_rmtree(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_at_random_instants),
    };
    if (argc > 1)
        kills = strtol(argv[1], NULL, 10);
    if (kills <= 0)
        kills = 100;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
