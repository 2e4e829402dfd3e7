/* sl_test.h - helpers shared by the test programs (header-only). */
#ifndef SL_TEST_H
#define SL_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Make a fresh, empty directory for one test and write its path into @out. */
static inline void sl_test_mkdtemp(char *out, size_t cap, const char *name)
{
    const char *base = getenv("SL_TEST_TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(out, cap, "%s/%s.XXXXXX", base, name);
    if (mkdtemp(out) == NULL) {
        fprintf(stderr, "mkdtemp(%s) failed\n", out);
        abort();
    }
}

/* Remove a directory tree made by sl_test_mkdtemp(). */
static inline void sl_test_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* xorshift64*: a tiny seeded generator for test data. */
static inline uint64_t sl_test_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/*
 * Run another program of this build from a test (after fork). In a cross
 * build ctest runs the tests under qemu-user, whose children cannot exec a
 * foreign binary directly; SL_TEST_EMULATOR (set by tests/CMakeLists.txt to
 * the emulator command, space-separated) is put in front. Returns only on
 * failure.
 */
static inline void sl_test_execv(const char *path, char *const argv[])
{
    const char *emu = getenv("SL_TEST_EMULATOR");
    if (emu != NULL && emu[0] != '\0') {
        char *words = strdup(emu), *args[64], *save = NULL;
        size_t n = 0;
        for (char *w = strtok_r(words, " ", &save); w != NULL && n < 32;
             w = strtok_r(NULL, " ", &save))
            args[n++] = w;
        args[n++] = (char *)path;
        for (size_t i = 1; argv[i] != NULL && n < 63; i++)
            args[n++] = argv[i];
        args[n] = NULL;
        execvp(args[0], args);
        free(words);
        return;
    }
    execv(path, argv);
}

/*
 * How much slower than native this run is: SL_TEST_TIME_SCALE (set by
 * tests/CMakeLists.txt to 8 for cross builds that run under qemu-user).
 * Tests with real-time windows and sleeps multiply them by it.
 */
static inline int sl_test_time_scale(void)
{
    const char *v = getenv("SL_TEST_TIME_SCALE");
    long n = v ? strtol(v, NULL, 10) : 1;
    return n >= 1 && n <= 100 ? (int)n : 1;
}

#endif /* SL_TEST_H */
