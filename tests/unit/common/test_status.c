/* Every status has a distinct name and message; values are pinned. */
#include <errno.h>

#include "../../support/sl_test.h"
#include "starling/common.h"

static const struct {
    int value;
    const char *name;
} pinned[] = {
#define PIN(name, value, msg) {value, "SL_" #name},
    SL_STATUS_MAP(PIN)
#undef PIN
};

static void test_every_status_has_name_and_message(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        const char *msg = sl_strerror(pinned[i].value);
        assert_string_equal(sl_errname(pinned[i].value), pinned[i].name);
        assert_non_null(msg);
        assert_true(strlen(msg) > 3);
        assert_string_not_equal(msg, "unknown status");
        assert_true(pinned[i].value < 0);
    }
    assert_string_equal(sl_errname(SL_OK), "SL_OK");
    assert_string_equal(sl_strerror(SL_OK), "ok");
}

static void test_names_and_values_unique(void **state)
{
    size_t n = sizeof pinned / sizeof pinned[0];
    (void)state;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(pinned[i].value, pinned[j].value);
            assert_string_not_equal(pinned[i].name, pinned[j].name);
            assert_string_not_equal(sl_strerror(pinned[i].value), sl_strerror(pinned[j].value));
        }
}

/* Released values never change meaning: a renumbering fails here. */
static void test_values_are_append_only(void **state)
{
    (void)state;
    assert_int_equal(SL_ENOMEM, -1);
    assert_int_equal(SL_EINVAL, -2);
    assert_int_equal(SL_EIO, -4);
    assert_int_equal(SL_ENOSPC, -7);
    assert_int_equal(SL_ECONFIG_KEY, -10);
    assert_int_equal(SL_ECONFIG_VALUE, -11);
    assert_int_equal(SL_ETRUNCATED, -15);
    assert_int_equal(SL_ENONFINITE, -17);
    assert_int_equal(SL_ESYNTAX, -27);
    /* values are dense from -1 down: nothing was skipped or reused */
    for (int v = -1; v >= -(int)(sizeof pinned / sizeof pinned[0]); v--)
        assert_string_not_equal(sl_errname(v), "SL_UNKNOWN");
}

static void test_unknown_values(void **state)
{
    (void)state;
    assert_string_equal(sl_errname(-9999), "SL_UNKNOWN");
    assert_string_equal(sl_strerror(-9999), "unknown status");
    assert_string_equal(sl_errname(7), "SL_UNKNOWN");
}

static void test_errno_mapping(void **state)
{
    (void)state;
    assert_int_equal(sl_status_from_errno(0), SL_OK);
    assert_int_equal(sl_status_from_errno(ENOSPC), SL_ENOSPC);
    assert_int_equal(sl_status_from_errno(ENOENT), SL_ENOENT);
    assert_int_equal(sl_status_from_errno(ENOMEM), SL_ENOMEM);
    assert_int_equal(sl_status_from_errno(EACCES), SL_EPERM);
    assert_int_equal(sl_status_from_errno(EXDEV), SL_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_status_has_name_and_message),
        cmocka_unit_test(test_names_and_values_unique),
        cmocka_unit_test(test_values_are_append_only),
        cmocka_unit_test(test_unknown_values),
        cmocka_unit_test(test_errno_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
