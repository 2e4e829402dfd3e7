/* Atomic file replace: old or new content, never a mix, even under kill -9. */
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../../support/sl_test.h"
#include "starling/common.h"

#define BIG (4u << 20) /* large enough that a write takes a while */

static void fill(unsigned char *buf, size_t len, unsigned char tag)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(tag ^ (i * 131u >> 7));
}

static void test_write_and_read_back(void **state)
{
    char dir[512], path[600];
    void *data;
    size_t len;
    struct stat st;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "fs_rw");
    snprintf(path, sizeof path, "%s/key", dir);
    assert_int_equal(sl_fs_write_atomic(path, "secret", 6, 0600), SL_OK);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(sl_fs_read_file(path, 100, &data, &len), SL_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(data, "secret", 6);
    assert_int_equal(((char *)data)[6], '\0');
    free(data);
    /* replace */
    assert_int_equal(sl_fs_write_atomic(path, "x", 1, 0644), SL_OK);
    assert_int_equal(sl_fs_read_file(path, 100, &data, &len), SL_OK);
    assert_int_equal(len, 1);
    free(data);
    /* empty file */
    assert_int_equal(sl_fs_write_atomic(path, NULL, 0, 0644), SL_OK);
    assert_int_equal(sl_fs_read_file(path, 100, &data, &len), SL_OK);
    assert_int_equal(len, 0);
    free(data);
    sl_test_rmtree(dir);
}

static void test_errors(void **state)
{
    char dir[512], path[600];
    void *data = (void *)0x1;
    size_t len = 77;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "fs_err");
    snprintf(path, sizeof path, "%s/missing/file", dir);
    assert_int_equal(sl_fs_write_atomic(path, "a", 1, 0644), SL_ENOENT);
    assert_int_equal(sl_fs_read_file(path, 10, &data, &len), SL_ENOENT);
    assert_ptr_equal(data, (void *)0x1);
    assert_int_equal(len, 77);
    snprintf(path, sizeof path, "%s/big", dir);
    assert_int_equal(sl_fs_write_atomic(path, "0123456789", 10, 0644), SL_OK);
    assert_int_equal(sl_fs_read_file(path, 9, &data, &len), SL_ETOOBIG);
    assert_ptr_equal(data, (void *)0x1);
    assert_int_equal(sl_fs_write_atomic(NULL, "a", 1, 0644), SL_EINVAL);
    /* a failed write leaves no temporary file behind */
    {
        DIR *d = opendir(dir);
        struct dirent *e;
        int files = 0;
        assert_non_null(d);
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.')
                files++;
        closedir(d);
        assert_int_equal(files, 1);
    }
    sl_test_rmtree(dir);
}

static void test_read_secret(void **state)
{
    char dir[512], path[600];
    char *token = (char *)0x1;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "fs_secret");
    snprintf(path, sizeof path, "%s/token", dir);
    assert_int_equal(sl_fs_write_atomic(path, "  s3cret-token\n", 15, 0600), SL_OK);
    assert_int_equal(sl_fs_read_secret(path, &token), SL_OK);
    assert_string_equal(token, "s3cret-token");
    free(token);
    token = (char *)0x1;
    assert_int_equal(sl_fs_write_atomic(path, " \n\t", 3, 0600), SL_OK);
    assert_int_equal(sl_fs_read_secret(path, &token), SL_EINVAL); /* empty */
    assert_int_equal(sl_fs_write_atomic(path, "ab\0cd", 5, 0600), SL_OK);
    assert_int_equal(sl_fs_read_secret(path, &token), SL_EINVAL); /* NUL inside */
    assert_ptr_equal(token, (char *)0x1);
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(sl_fs_read_secret(path, &token), SL_ENOENT);
    sl_test_rmtree(dir);
}

/*
 * A child rewrites the file over and over with two alternating contents;
 * the parent kills it at random instants. Afterwards the file must equal
 * one of the two contents exactly.
 */
static void test_kill_mid_write(void **state)
{
    char dir[512], path[600];
    unsigned char *a = malloc(BIG), *b = malloc(BIG);
    uint64_t seed = (uint64_t)time(NULL) | 1;
    int saw_a = 0, saw_b = 0;
    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    fill(a, BIG, 0x11);
    fill(b, BIG, 0xee);
    sl_test_mkdtemp(dir, sizeof dir, "fs_kill");
    snprintf(path, sizeof path, "%s/state", dir);
    assert_int_equal(sl_fs_write_atomic(path, a, BIG, 0644), SL_OK);

    for (int round = 0; round < 30; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (unsigned i = 0;; i++)
                if (sl_fs_write_atomic(path, (i & 1) ? a : b, BIG, 0644) != SL_OK)
                    _exit(3);
        }
        usleep((useconds_t)(1000 + sl_test_rand(&seed) % 60000));
        kill(pid, SIGKILL);
        {
            int status;
            void *data;
            size_t len;
            assert_int_equal(waitpid(pid, &status, 0), pid);
            assert_true(WIFSIGNALED(status)); /* it was still writing, not failed */
            assert_int_equal(sl_fs_read_file(path, 2 * BIG, &data, &len), SL_OK);
            assert_int_equal(len, BIG);
            if (memcmp(data, a, BIG) == 0)
                saw_a++;
            else if (memcmp(data, b, BIG) == 0)
                saw_b++;
            else
                fail_msg("round %d: file is neither the old nor the new content", round);
            free(data);
        }
    }
    assert_int_equal(saw_a + saw_b, 30);
    free(a);
    free(b);
    sl_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_read_back),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_read_secret),
        cmocka_unit_test(test_kill_mid_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
