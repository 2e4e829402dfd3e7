/* Logging: the sink gets one logfmt line per record; levels filter; nothing without a sink. */
#include "../../support/sl_test.h"
#include "starling/common.h"

typedef struct captured {
    int count;
    sl_log_level level;
    char line[8192];
} captured;

static void capture_sink(sl_log_level level, const char *line, void *userdata)
{
    captured *c = userdata;
    c->count++;
    c->level = level;
    snprintf(c->line, sizeof c->line, "%s", line);
}

static sl_clock_manual test_clock;

static int setup(void **state)
{
    static captured c;
    memset(&c, 0, sizeof c);
    sl_clock_manual_init(&test_clock, 0, 1764465820123000000LL);
    sl_log_set_clock(&test_clock.clock);
    sl_log_set_sink(capture_sink, &c);
    sl_log_set_level(SL_LOG_INFO);
    *state = &c;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_log_set_sink(NULL, NULL);
    sl_log_set_clock(NULL);
    return 0;
}

static void test_formatted_line(void **state)
{
    captured *c = *state;
    sl_log(SL_LOG_WARN, "store", "opened %s with %d pages", "db.sqlite", 42);
    assert_int_equal(c->count, 1);
    assert_int_equal(c->level, SL_LOG_WARN);
    assert_string_equal(c->line, "ts=2025-11-30T01:23:40.123Z level=warn component=store "
                                 "msg=\"opened db.sqlite with 42 pages\"");
}

static void test_level_filter(void **state)
{
    captured *c = *state;
    sl_log(SL_LOG_DEBUG, "codec", "hidden");
    assert_int_equal(c->count, 0);
    sl_log_set_level(SL_LOG_TRACE);
    sl_log(SL_LOG_TRACE, "codec", "shown");
    assert_int_equal(c->count, 1);
    assert_non_null(strstr(c->line, "level=trace"));
    sl_log_set_level(SL_LOG_ERROR);
    sl_log(SL_LOG_WARN, "codec", "hidden");
    sl_log(SL_LOG_ERROR, "codec", "shown");
    assert_int_equal(c->count, 2);
    assert_int_equal(sl_log_get_level(), SL_LOG_ERROR);
}

static void test_escaping_keeps_one_line(void **state)
{
    captured *c = *state;
    sl_log(SL_LOG_INFO, "api", "path=\"/v1\\x\"\nnext\tline");
    assert_string_equal(strstr(c->line, "msg="), "msg=\"path=\\\"/v1\\\\x\\\"\\nnext\\x09line\"");
    assert_null(strchr(c->line, '\n'));
}

static void test_long_message_is_cut(void **state)
{
    captured *c = *state;
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    sl_log(SL_LOG_INFO, "api", "%s", big);
    assert_int_equal(c->count, 1);
    assert_true(strlen(c->line) < 1200);
    assert_int_equal(c->line[strlen(c->line) - 1], '"');
}

static void test_no_sink_drops(void **state)
{
    captured *c = *state;
    sl_log_set_sink(NULL, NULL);
    sl_log(SL_LOG_ERROR, "x", "dropped");
    assert_int_equal(c->count, 0);
}

static void test_parse_level(void **state)
{
    sl_log_level l = SL_LOG_INFO;
    (void)state;
    assert_int_equal(sl_log_parse_level("debug", &l), SL_OK);
    assert_int_equal(l, SL_LOG_DEBUG);
    assert_int_equal(sl_log_parse_level("warning", &l), SL_OK);
    assert_int_equal(l, SL_LOG_WARN);
    assert_int_equal(sl_log_parse_level("loud", &l), SL_ECONFIG_VALUE);
    assert_int_equal(l, SL_LOG_WARN);
    assert_string_equal(sl_log_level_name(SL_LOG_ERROR), "error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_formatted_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escaping_keeps_one_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_message_is_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_sink_drops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_level, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
