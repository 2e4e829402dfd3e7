/* CPU features: consistent masks; SL_FORCE_SCALAR=1 forces the scalar reference. */
#include <sys/wait.h>

#include "../../support/sl_test.h"
#include "starling/common.h"

static void test_features_consistent(void **state)
{
    unsigned f = sl_cpu_features();
    (void)state;
    if (f & SL_CPU_AVX512) /* AVX-512 is only reported together with AVX2 */
        assert_true(f & SL_CPU_AVX2);
#if !defined(SL_X86_SIMD)
    assert_false(f & (SL_CPU_AVX2 | SL_CPU_AVX512));
#endif
#if defined(SL_NEON)
    assert_true(f & SL_CPU_NEON);
#endif
    assert_int_equal(sl_cpu_features(), f); /* stable */
    assert_string_equal(sl_cpu_describe(0), "scalar");
    assert_string_equal(sl_cpu_describe(SL_CPU_AVX2 | SL_CPU_AVX512), "avx512");
}

/*
 * The environment is read once per process, so each setting is checked in a
 * child forked before this process ever asks (exec would need binfmt under
 * qemu-user, which cross test runs do not have).
 */
static int forced_child_features(const char *value)
{
    int status;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setenv("SL_FORCE_SCALAR", value, 1);
        _exit((int)sl_cpu_features());
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static int forced_one = -1, forced_zero = -1;

static void test_force_scalar(void **state)
{
    (void)state;
    assert_int_equal(forced_one, 0);
    assert_int_equal(forced_zero, (int)sl_cpu_features());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features_consistent),
        cmocka_unit_test(test_force_scalar),
    };
    forced_one = forced_child_features("1");
    forced_zero = forced_child_features("0");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
