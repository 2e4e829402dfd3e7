/* Clocks: the manual clock moves only by hand; UTC formatting is exact. */
#include "../../support/sl_test.h"
#include "starling/common.h"

static void test_manual_clock(void **state)
{
    sl_clock_manual m;
    (void)state;
    sl_clock_manual_init(&m, 1000, 1764465820123000000LL);
    assert_int_equal(sl_clock_monotonic_ns(&m.clock), 1000);
    assert_int_equal(sl_clock_wall_ns(&m.clock), 1764465820123000000LL);
    assert_int_equal(sl_clock_manual_advance(&m, 500), SL_OK);
    assert_int_equal(sl_clock_monotonic_ns(&m.clock), 1500);
    assert_int_equal(sl_clock_wall_ns(&m.clock), 1764465820123000500LL);
    assert_int_equal(sl_clock_manual_advance(&m, -1), SL_EINVAL);
    assert_int_equal(sl_clock_monotonic_ns(&m.clock), 1500);
}

static void test_system_clock_monotonic(void **state)
{
    int64_t prev = sl_clock_monotonic_ns(NULL);
    (void)state;
    for (int i = 0; i < 10000; i++) {
        int64_t now = sl_clock_monotonic_ns(sl_clock_system());
        assert_true(now >= prev);
        prev = now;
    }
    /* wall clock is after 2020-01-01 */
    assert_true(sl_clock_wall_ns(NULL) > 1577836800LL * 1000000000LL);
}

static void test_format_utc(void **state)
{
    char buf[32];
    (void)state;
    assert_int_equal(sl_clock_format_utc(0, buf, sizeof buf), SL_OK);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    assert_int_equal(sl_clock_format_utc(1764465820123456789LL, buf, sizeof buf), SL_OK);
    assert_string_equal(buf, "2025-11-30T01:23:40.123Z");
    assert_int_equal(sl_clock_format_utc(-1000000LL, buf, sizeof buf), SL_OK);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
    memcpy(buf, "untouched", 10);
    assert_int_equal(sl_clock_format_utc(0, buf, 10), SL_EINVAL);
    assert_string_equal(buf, "untouched");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manual_clock),
        cmocka_unit_test(test_system_clock_monotonic),
        cmocka_unit_test(test_format_utc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
