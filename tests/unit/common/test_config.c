/* Configuration: typed keys from text, environment and argv, with clear errors. */
#include "../../support/sl_test.h"
#include "starling/common.h"

static const sl_config_spec specs[] = {
    {"data_dir", SL_CONFIG_STRING, "/var/lib/starling", 0, -1, "state directory"},
    {"epochs", SL_CONFIG_INT, "1", 1, 1000, "local epochs"},
    {"lr", SL_CONFIG_DOUBLE, "0.01", 0, 10, "learning rate"},
    {"insecure_http", SL_CONFIG_BOOL, "false", 0, -1, "plain HTTP"},
    {"max_body", SL_CONFIG_SIZE, "16M", 1, 1ull << 32, "largest request body"},
    {"deadline", SL_CONFIG_DURATION, "30s", 1, 86400000, "report deadline"},
    {"token", SL_CONFIG_STRING, NULL, 0, -1, "enrolment token"},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static int setup(void **state)
{
    sl_config *cfg;
    if (sl_config_create(specs, NSPECS, &cfg) != SL_OK)
        return -1;
    *state = cfg;
    return 0;
}

static int teardown(void **state)
{
    sl_config_free(*state);
    return 0;
}

static void test_defaults(void **state)
{
    sl_config *cfg = *state;
    const char *s;
    int64_t i;
    double d;
    int b;
    uint64_t u;
    assert_int_equal(sl_config_get_string(cfg, "data_dir", &s), SL_OK);
    assert_string_equal(s, "/var/lib/starling");
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 1);
    assert_int_equal(sl_config_get_double(cfg, "lr", &d), SL_OK);
    assert_true(d == 0.01);
    assert_int_equal(sl_config_get_bool(cfg, "insecure_http", &b), SL_OK);
    assert_int_equal(b, 0);
    assert_int_equal(sl_config_get_size(cfg, "max_body", &u), SL_OK);
    assert_int_equal(u, 16u << 20);
    assert_int_equal(sl_config_get_duration_ms(cfg, "deadline", &i), SL_OK);
    assert_int_equal(i, 30000);
    assert_int_equal(sl_config_get_string(cfg, "token", &s), SL_OK);
    assert_null(s);
    /* wrong type and unknown key */
    assert_int_equal(sl_config_get_int(cfg, "lr", &i), SL_EINVAL);
    assert_int_equal(sl_config_get_int(cfg, "nope", &i), SL_ECONFIG_KEY);
}

static void test_text(void **state)
{
    sl_config *cfg = *state;
    const char text[] = "# agent settings\n\n  epochs = 5\nlr=0.5\r\n"
                        "data_dir = \"/tmp/with space\"\ninsecure_http = yes\n"
                        "max_body = 64K\ndeadline = 2m\n";
    const char *s;
    int64_t i;
    uint64_t u;
    int b;
    assert_int_equal(sl_config_load_text(cfg, text, sizeof text - 1, "agent.conf"), SL_OK);
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 5);
    assert_int_equal(sl_config_get_string(cfg, "data_dir", &s), SL_OK);
    assert_string_equal(s, "/tmp/with space");
    assert_int_equal(sl_config_get_bool(cfg, "insecure_http", &b), SL_OK);
    assert_int_equal(b, 1);
    assert_int_equal(sl_config_get_size(cfg, "max_body", &u), SL_OK);
    assert_int_equal(u, 65536);
    assert_int_equal(sl_config_get_duration_ms(cfg, "deadline", &i), SL_OK);
    assert_int_equal(i, 120000);
}

static void test_unknown_key_rejected(void **state)
{
    sl_config *cfg = *state;
    const char text[] = "epochs = 7\nepoch = 3\n";
    int64_t i;
    assert_int_equal(sl_config_load_text(cfg, text, sizeof text - 1, "a.conf"), SL_ECONFIG_KEY);
    assert_string_equal(sl_config_error(cfg), "a.conf:2: unknown key \"epoch\"");
    assert_int_equal(sl_config_set(cfg, "bogus", "1", "test"), SL_ECONFIG_KEY);
    /* the earlier line still applied, nothing else changed */
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 7);
}

static void test_bad_values_keep_old(void **state)
{
    sl_config *cfg = *state;
    int64_t i;
    double d;
    uint64_t u;
    assert_int_equal(sl_config_set(cfg, "epochs", "0", "x.conf:4"), SL_ECONFIG_VALUE);
    assert_non_null(strstr(sl_config_error(cfg), "x.conf:4: epochs: 0 is outside [1, 1000]"));
    assert_int_equal(sl_config_set(cfg, "epochs", "1001", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "epochs", "12abc", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "epochs", "", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "epochs", "99999999999999999999", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 1);
    assert_int_equal(sl_config_set(cfg, "lr", "nan", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "lr", "inf", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "lr", "-0.1", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "lr", "1e400", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_get_double(cfg, "lr", &d), SL_OK);
    assert_true(d == 0.01);
    assert_int_equal(sl_config_set(cfg, "insecure_http", "maybe", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "max_body", "16T", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "max_body", "0", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "max_body", "-5", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_get_size(cfg, "max_body", &u), SL_OK);
    assert_int_equal(u, 16u << 20);
    assert_int_equal(sl_config_set(cfg, "deadline", "2d", NULL), SL_ECONFIG_VALUE);
    assert_int_equal(sl_config_set(cfg, "deadline", "25h", NULL), SL_ECONFIG_VALUE);
}

static void test_syntax_errors(void **state)
{
    sl_config *cfg = *state;
    assert_int_equal(sl_config_load_text(cfg, "epochs 5\n", 9, "s.conf"), SL_ESYNTAX);
    assert_string_equal(sl_config_error(cfg), "s.conf:1: expected key = value");
    assert_int_equal(sl_config_load_text(cfg, "= 5\n", 4, "s.conf"), SL_ESYNTAX);
    assert_int_equal(sl_config_load_text(cfg, "data_dir = \"x\n", 14, "s.conf"), SL_ESYNTAX);
}

static void test_env(void **state)
{
    sl_config *cfg = *state;
    char *env[] = {"PATH=/bin", "STARLING_EPOCHS=9", "STARLING_DATA_DIR=/data",
                   "STARLING_OTHER_PROGRAM=1", NULL};
    char *bad[] = {"STARLING_LR=fast", NULL};
    int64_t i;
    const char *s;
    assert_int_equal(sl_config_load_env(cfg, "STARLING_", env, 0), SL_OK);
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 9);
    assert_int_equal(sl_config_get_string(cfg, "data_dir", &s), SL_OK);
    assert_string_equal(s, "/data");
    assert_int_equal(sl_config_load_env(cfg, "STARLING_", env, SL_CONFIG_ENV_STRICT),
                     SL_ECONFIG_KEY);
    assert_non_null(strstr(sl_config_error(cfg), "STARLING_OTHER_PROGRAM"));
    assert_int_equal(sl_config_load_env(cfg, "STARLING_", bad, 0), SL_ECONFIG_VALUE);
    assert_non_null(strstr(sl_config_error(cfg), "STARLING_LR"));
}

static void test_args(void **state)
{
    sl_config *cfg = *state;
    char *argv[] = {"prog",       "--epochs", "3",     "--lr=0.2",   "--insecure-http",
                    "--data-dir", "/x",       "train", "--epochs=4", NULL};
    int first = -1, b;
    int64_t i;
    assert_int_equal(sl_config_load_args(cfg, 9, argv, &first), SL_OK);
    assert_int_equal(first, 7);
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 3);
    assert_int_equal(sl_config_get_bool(cfg, "insecure_http", &b), SL_OK);
    assert_int_equal(b, 1);
    {
        char *neg[] = {"prog", "--no-insecure-http", "--", "--epochs", NULL};
        assert_int_equal(sl_config_load_args(cfg, 4, neg, &first), SL_OK);
        assert_int_equal(first, 3);
        assert_int_equal(sl_config_get_bool(cfg, "insecure_http", &b), SL_OK);
        assert_int_equal(b, 0);
    }
    {
        char *unknown[] = {"prog", "--epoch", "3", NULL};
        assert_int_equal(sl_config_load_args(cfg, 3, unknown, NULL), SL_ECONFIG_KEY);
        assert_string_equal(sl_config_error(cfg), "command line: unknown option --epoch");
    }
    {
        char *missing[] = {"prog", "--epochs", NULL};
        assert_int_equal(sl_config_load_args(cfg, 2, missing, NULL), SL_ECONFIG_VALUE);
    }
    {
        char *range[] = {"prog", "--epochs=0", NULL};
        assert_int_equal(sl_config_load_args(cfg, 2, range, NULL), SL_ECONFIG_VALUE);
        assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
        assert_int_equal(i, 3);
    }
}

static void test_file_and_usage(void **state)
{
    sl_config *cfg = *state;
    char dir[512], path[600], usage[2048];
    int64_t i;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "config");
    snprintf(path, sizeof path, "%s/agent.conf", dir);
    assert_int_equal(sl_fs_write_atomic(path, "epochs = 11\n", 12, 0644), SL_OK);
    assert_int_equal(sl_config_load_file(cfg, path), SL_OK);
    assert_int_equal(sl_config_get_int(cfg, "epochs", &i), SL_OK);
    assert_int_equal(i, 11);
    snprintf(path, sizeof path, "%s/none.conf", dir);
    assert_int_equal(sl_config_load_file(cfg, path), SL_ENOENT);
    assert_non_null(strstr(sl_config_error(cfg), "cannot read"));
    assert_true(sl_config_usage(cfg, usage, sizeof usage) < sizeof usage);
    assert_non_null(strstr(usage, "--data-dir"));
    assert_non_null(strstr(usage, "(default 30s)"));
    sl_test_rmtree(dir);
}

static void test_bad_default_is_refused(void **state)
{
    static const sl_config_spec bad[] = {{"n", SL_CONFIG_INT, "zero", 0, 10, ""}};
    sl_config *cfg = NULL;
    (void)state;
    assert_int_equal(sl_config_create(bad, 1, &cfg), SL_ECONFIG_VALUE);
    assert_null(cfg);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_defaults),
        T(test_text),
        T(test_unknown_key_rejected),
        T(test_bad_values_keep_old),
        T(test_syntax_errors),
        T(test_env),
        T(test_args),
        T(test_file_and_usage),
        T(test_bad_default_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
