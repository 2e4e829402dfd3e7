/* Task configuration: defaults, every key, canonical JSON round trips, rejections. */
#include <math.h>

#include "../../support/sl_test.h"
#include "starling/codec.h"
#include "starling/round.h"

static int parse(const char *json, sl_task_config *c, char *err, size_t errcap)
{
    return sl_task_config_parse(json, strlen(json), c, err, errcap);
}

/* parse(to_json(c)) == c, and to_json is stable. */
static void assert_roundtrip(const sl_task_config *c)
{
    char *a = NULL, *b = NULL, err[256];
    sl_task_config back;

    memset(&back, 0x5a, sizeof back);
    assert_int_equal(sl_task_config_to_json(c, &a), SL_OK);
    assert_int_equal(parse(a, &back, err, sizeof err), SL_OK);
    assert_memory_equal(c, &back, sizeof back);
    assert_int_equal(sl_task_config_to_json(&back, &b), SL_OK);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

/* Each of @json refused as a value error naming @needle, the output untouched. */
static void refused_untouched(const char *const *json, size_t n, const char *needle)
{
    char err[256];
    for (size_t i = 0; i < n; i++) {
        sl_task_config keep, o;
        memset(&keep, 0x5a, sizeof keep);
        o = keep;
        assert_int_equal(parse(json[i], &o, err, sizeof err), SL_ECONFIG_VALUE);
        if (strstr(err, needle) == NULL)
            fail_msg("%s: %s", json[i], err);
        assert_memory_equal(&o, &keep, sizeof keep);
    }
}

/* sender_mean_partial: its default, the shortened length and weight, refusals. */
static void test_sender_mean_partial(void)
{
    sl_task_config o;
    char err[256];
    double r;
    static const char *const refused[] = {
        "{\"target\": 10, \"sender_mean_rounds\": 6, \"sender_mean_partial\": 5}",
        "{\"target\": 10, \"sender_mean_epochs\": 0, \"sender_mean_partial\": 5}",
        "{\"target\": 10, \"density\": 1, \"sender_mean_partial\": 5}",
        "{\"target\": 10, \"sender_mean\": 0, \"sender_mean_partial\": 5}",
        "{\"target\": 10, \"sender_mean_partial\": 17}",
        "{\"target\": 10, \"sender_mean_partial\": 2.5}",
        "{\"target\": 10, \"sender_mean_partial\": true}",
    };
    assert_int_equal(parse("{\"target\": 10, \"local_epochs\": 1}", &o, err, sizeof err), SL_OK);
    assert_int_equal(o.sender_mean_partial, SL_SENDER_MEAN_PARTIAL_DEFAULT);
    /* every device every round: the whole fade; a share s: 60 s^5, at least 6, at most 60 */
    assert_true(sl_sender_mean_length_share(&o, 1) == 60.0);
    assert_true(sl_sender_mean_length_share(&o, 1.5) == 60.0);
    assert_true(sl_sender_mean_length_share(&o, NAN) == 60.0);
    r = 60.0 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9;
    assert_true(sl_sender_mean_length_share(&o, 0.9) == r); /* 35.43: multiplications, exact */
    assert_float_equal(sl_sender_mean_length_share(&o, 0.7), 10.0842, 1e-9);
    assert_true(sl_sender_mean_length_share(&o, 0.4) == (double)SL_SENDER_MEAN_ROUNDS_DEFAULT);
    assert_true(sl_sender_mean_length_share(&o, -1) == (double)SL_SENDER_MEAN_ROUNDS_DEFAULT);
    /* the weight: progress p s over that length; where p reaches the round's number, the
     * whole fade's weight, bit for bit */
    assert_true(sl_sender_mean_weight(&o, 7, 7) == sl_sender_mean_at(&o, 7));
    assert_true(sl_sender_mean_weight(&o, 1, 1) == 1.0);
    r = 60.0 * 0.75 * 0.75 * 0.75 * 0.75 * 0.75; /* p 3 in round 4: s 0.75, progress 2.25 */
    assert_float_equal(sl_sender_mean_weight(&o, 3, 4), 1.0 - 1.25 / r, 1e-15);
    assert_true(sl_sender_mean_weight(&o, 3, 4) < sl_sender_mean_at(&o, 3)); /* shorter */
    o.sender_mean_partial = 0; /* off: the weight of the whole fade by participations */
    assert_true(sl_sender_mean_weight(&o, 3, 4) == sl_sender_mean_at(&o, 3));
    /* a fade shorter than the floor stays as it is: 60 epochs of 20 are 3 updates */
    assert_int_equal(parse("{\"target\": 10, \"local_epochs\": 20}", &o, err, sizeof err), SL_OK);
    assert_true(sl_sender_mean_length_share(&o, 0.5) == 3.0);
    assert_int_equal(parse("{\"target\": 10, \"sender_mean_partial\": 3}", &o, err, sizeof err),
                     SL_OK);
    assert_int_equal(o.sender_mean_partial, 3);
    assert_true(sl_sender_mean_length_share(&o, 0.9) == 60.0 * 0.9 * 0.9 * 0.9);
    assert_int_equal(parse("{\"target\": 10, \"sender_mean_partial\": 0}", &o, err, sizeof err),
                     SL_OK);
    assert_int_equal(o.sender_mean_partial, 0);
    assert_int_equal(o.sender_mean_epochs, SL_SENDER_MEAN_EPOCHS_DEFAULT);
    /* refused (only with the fade by local epochs; an integer 0 .. 16), the output untouched */
    refused_untouched(refused, sizeof refused / sizeof refused[0], "sender_mean_partial");
}

static void test_defaults(void **state)
{
    (void)state;
    sl_task_config c;
    char err[256];

    assert_int_equal(parse("{\"target\": 10}", &c, err, sizeof err), SL_OK);
    assert_string_equal(err, "");
    assert_string_equal(c.name, "task");
    assert_int_equal(c.target, 10);
    assert_int_equal(c.quorum, 5);
    assert_int_equal(c.rounds, 0);
    assert_true(c.over_selection == 1.3);
    assert_true(c.server_lr == 1.0 && c.server_momentum == 0.9);
    assert_true(c.beta1 == 0.9 && c.beta2 == 0.99 && c.tau == 1e-3);
    assert_true(c.density == 0.01);
    assert_int_equal(c.topk_scope, SL_TOPK_MODEL);
    assert_int_equal(c.error_feedback, SL_EF_RESIDUAL);
    assert_true(c.residual_decay == 0.9);
    assert_int_equal(c.values, SL_VALUE_TERNARY);
    /* sparse FedAvg with the residual: the senders' mean (#23); nothing else gets it, and
     * no server rate ramp unless asked for */
    assert_int_equal(c.sender_mean_rounds, 0);
    assert_int_equal(c.sender_mean_epochs, SL_SENDER_MEAN_EPOCHS_DEFAULT); /* by local epochs */
    assert_true(c.sender_mean == 1.0);
    assert_int_equal(c.sender_mean_share, 0); /* the share is the fade by participations' */
    assert_int_equal(c.sender_mean_fresh, 1);
    assert_int_equal(c.sender_mean_partial, SL_SENDER_MEAN_PARTIAL_DEFAULT);
    assert_true(sl_sender_mean_length(&c) == (double)SL_SENDER_MEAN_EPOCHS_DEFAULT); /* 1 epoch */
    assert_int_equal(c.server_lr_ramp, 0);
    assert_true(c.server_lr_boost == 3.0);
    assert_int_equal(c.retain_last, 0); /* every model version kept */
    assert_int_equal(c.retain_every, 0);
    {
        static const char *const none[] = {
            "{\"target\": 10, \"density\": 1}",
            "{\"target\": 10, \"error_feedback\": \"tracking\"}",
            "{\"target\": 10, \"aggregator\": \"fedavgm\"}",
            "{\"target\": 10, \"aggregator\": \"median\"}",
            "{\"target\": 10, \"fedbuff\": true}",
            "{\"target\": 10, \"dp_noise\": 1, \"clip_norm\": 1}",
            "{\"target\": 10, \"server_lr_ramp\": 8}",
        };
        sl_task_config o;
        for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
            assert_int_equal(parse(none[i], &o, err, sizeof err), SL_OK);
            if (o.sender_mean_rounds != 0 || o.sender_mean_epochs != 0 ||
                sl_sender_mean_length(&o) != 0 || o.sender_mean_fresh != 0 ||
                o.sender_mean_partial != 0)
                fail_msg("%s: sender_mean_rounds %u, sender_mean_epochs %u, fresh %d", none[i],
                         o.sender_mean_rounds, o.sender_mean_epochs, o.sender_mean_fresh);
            if (o.server_lr_ramp != (strstr(none[i], "ramp") ? 8u : 0u))
                fail_msg("%s: server_lr_ramp %u", none[i], o.server_lr_ramp);
        }
        /* a stored configuration without a key predates it: neither rule (a task created
         * with the ramp's default, 3 December 2026, names its ramp and keeps it) */
        assert_int_equal(sl_task_config_parse_stored("{\"target\": 10}", 14, &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.server_lr_ramp, 0);
        assert_int_equal(o.sender_mean_rounds, 0);
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(sl_task_config_parse_stored("{\"target\": 10, \"server_lr_ramp\": 8}", 35,
                                                     &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.server_lr_ramp, 8);
        assert_int_equal(o.sender_mean_rounds, 0);
        /* a task stored with the senders' mean before sender_mean_share fades as it did */
        assert_int_equal(sl_task_config_parse_stored("{\"target\": 10, \"sender_mean_rounds\": 6}",
                                                     39, &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_rounds, 6);
        assert_int_equal(o.sender_mean_share, 0);
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(o.sender_mean_fresh, 0); /* nor leaves anything out */
        assert_true(sl_sender_mean_length(&o) == 6.0);
        /* one stored with the share (4-5 December 2026) keeps it: the rule it ran */
        assert_int_equal(sl_task_config_parse_stored("{\"target\": 10, \"sender_mean_rounds\": "
                                                     "6, \"sender_mean_share\": true}",
                                                     66, &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_rounds, 6);
        assert_int_equal(o.sender_mean_share, 1);
        assert_int_equal(o.sender_mean_epochs, 0);
        /* and one stored with a fade by local epochs keeps that */
        assert_int_equal(sl_task_config_parse_stored("{\"target\": 10, \"local_epochs\": 4, "
                                                     "\"sender_mean_epochs\": 60}",
                                                     59, &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_epochs, 60);
        assert_true(sl_sender_mean_length(&o) == 15.0);
        assert_int_equal(o.sender_mean_fresh, 0);
        assert_int_equal(o.sender_mean_partial, 0); /* the whole fade, as it ran */
        assert_true(sl_sender_mean_length_share(&o, 0.5) == 15.0);
        {
            static const char fresh[] = "{\"target\": 10, \"sender_mean_epochs\": 60, "
                                        "\"sender_mean_fresh\": true}";
            assert_int_equal(
                sl_task_config_parse_stored(fresh, sizeof fresh - 1, &o, err, sizeof err), SL_OK);
            assert_int_equal(o.sender_mean_fresh, 1);
        }
        /* a new task that names sender_mean_rounds fades by participations, times their
         * share of rounds unless it says otherwise (the rule of 4-5 December 2026), and
         * leaves out what the last aggregate carried unless it says otherwise */
        assert_int_equal(parse("{\"target\": 10, \"sender_mean_rounds\": 6}", &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_rounds, 6);
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(o.sender_mean_share, 1);
        assert_int_equal(o.sender_mean_fresh, 1);
        assert_int_equal(o.sender_mean_partial, 0); /* sender_mean_epochs' */
        assert_int_equal(
            parse("{\"target\": 10, \"sender_mean_fresh\": false}", &o, err, sizeof err), SL_OK);
        assert_int_equal(o.sender_mean_fresh, 0);
        assert_int_equal(o.sender_mean_epochs, SL_SENDER_MEAN_EPOCHS_DEFAULT);
        /* it belongs to the senders' mean: refused without one, the output untouched */
        {
            static const char *const alone[] = {
                "{\"target\": 10, \"sender_mean_rounds\": 0, \"sender_mean_fresh\": true}",
                "{\"target\": 10, \"density\": 1, \"sender_mean_fresh\": true}",
                "{\"target\": 10, \"sender_mean\": 0, \"sender_mean_fresh\": true}",
                "{\"target\": 10, \"aggregator\": \"median\", \"sender_mean_fresh\": true}",
            };
            refused_untouched(alone, sizeof alone / sizeof alone[0],
                              "sender_mean_fresh: only with the senders' mean");
            assert_int_equal(
                parse("{\"target\": 10, \"sender_mean_fresh\": 1}", &o, err, sizeof err),
                SL_ECONFIG_VALUE); /* a boolean */
            assert_non_null(strstr(err, "sender_mean_fresh"));
        }
        assert_int_equal(parse("{\"target\": 10, \"sender_mean_rounds\": 6, "
                               "\"sender_mean_share\": false}",
                               &o, err, sizeof err),
                         SL_OK); /* by participations alone */
        assert_int_equal(o.sender_mean_share, 0);
        /* a new task may ask for the fade by participations alone */
        assert_int_equal(parse("{\"target\": 10, \"sender_mean_rounds\": 6, "
                               "\"sender_mean_share\": false}",
                               &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_rounds, SL_SENDER_MEAN_ROUNDS_DEFAULT);
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(o.sender_mean_share, 0);
        /* or by local epochs: no share, and the length in participations is sender_mean_epochs /
         * local_epochs, fractions kept */
        assert_int_equal(parse("{\"target\": 10, \"local_epochs\": 10, \"sender_mean_epochs\": 60}",
                               &o, err, sizeof err),
                         SL_OK);
        assert_int_equal(o.sender_mean_rounds, 0);
        assert_int_equal(o.sender_mean_share, 0);
        assert_true(sl_sender_mean_length(&o) == 6.0); /* the default's 6, exactly */
        assert_int_equal(parse("{\"target\": 10, \"local_epochs\": 7, \"sender_mean_epochs\": 20}",
                               &o, err, sizeof err),
                         SL_OK);
        assert_true(sl_sender_mean_length(&o) == 20.0 / 7.0);
        assert_true(sl_sender_mean_at(&o, 1) == 1.0);
        assert_true(sl_sender_mean_at(&o, 1 + 20.0 / 7.0) == 0);
        assert_true(sl_sender_mean_at(&o, 2) > 0.64 && sl_sender_mean_at(&o, 2) < 0.66);
        o.sender_mean = 0; /* no weight, no senders' mean */
        assert_true(sl_sender_mean_length(&o) == 0 && sl_sender_mean_at(&o, 1) == 0);
        test_sender_mean_partial();
        assert_int_equal(parse("{\"target\": 10, \"sender_mean_epochs\": 0}", &o, err, sizeof err),
                         SL_OK); /* switched off */
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(o.sender_mean_rounds, 0);
        assert_true(sl_sender_mean_length(&o) == 0);
        assert_int_equal(parse("{\"target\": 10, \"sender_mean_rounds\": 0}", &o, err, sizeof err),
                         SL_OK); /* switched off: naming either length stops the default */
        assert_int_equal(o.sender_mean_rounds, 0);
        assert_int_equal(o.sender_mean_epochs, 0);
        assert_int_equal(o.sender_mean_share, 0);
        assert_int_equal(o.sender_mean_fresh, 0);
        assert_true(sl_sender_mean_length(&o) == 0);
        assert_int_equal(parse("{\"target\": 10, \"aggregator\": \"fedadam\", \"server_lr\": "
                               "0.01, \"server_lr_ramp\": 4, \"sender_mean_rounds\": 3, "
                               "\"sender_mean\": 0.5}",
                               &o, err, sizeof err),
                         SL_OK); /* asked for: any rule of the FedAvg family */
        assert_int_equal(o.server_lr_ramp, 4);
        assert_int_equal(o.sender_mean_rounds, 3);
        assert_true(o.sender_mean == 0.5);
        { /* FedBuff with the senders' mean: refused in a new task, loaded when stored */
            static const char both[] = "{\"target\": 10, \"fedbuff\": true, "
                                       "\"sender_mean_rounds\": 4}";
            assert_int_equal(parse(both, &o, err, sizeof err), SL_ECONFIG_VALUE);
            assert_int_equal(
                sl_task_config_parse_stored(both, sizeof both - 1, &o, err, sizeof err), SL_OK);
            assert_true(o.fedbuff);
            assert_int_equal(o.sender_mean_rounds, 4);
            assert_int_equal(parse("{\"target\": 10, \"fedbuff\": true, "
                                   "\"sender_mean_epochs\": 4}",
                                   &o, err, sizeof err),
                             SL_ECONFIG_VALUE);
            assert_non_null(strstr(err, "sender_mean_epochs: not with fedbuff"));
        }
    }
    /* the decay is the classic residual's: tracking without one gets 1 */
    assert_int_equal(
        parse("{\"target\": 10, \"error_feedback\": \"tracking\"}", &c, err, sizeof err), SL_OK);
    assert_int_equal(c.error_feedback, SL_EF_TRACKING);
    assert_true(c.residual_decay == 1.0);
    assert_roundtrip(&c);
    assert_int_equal(parse("{\"target\": 10, \"residual_decay\": 1}", &c, err, sizeof err), SL_OK);
    assert_int_equal(c.error_feedback, SL_EF_RESIDUAL);
    assert_true(c.residual_decay == 1.0);
    assert_int_equal(parse("{\"target\": 10}", &c, err, sizeof err), SL_OK);
    assert_int_equal(c.selection_window_ms, 10000);
    assert_int_equal(c.report_deadline_ms, 60000);
    assert_int_equal(c.local_epochs, 1);
    assert_int_equal(c.batch, 32);
    assert_true(c.local_lr == 0.01 && c.local_momentum == 0.9);
    assert_int_equal(c.aggregator, SL_AGG_FEDAVG);
    assert_true(c.clip_norm == 0 && c.dp_noise == 0 && c.max_update_norm == 0);
    assert_int_equal(c.fedbuff, 0);
    assert_roundtrip(&c);

    /* default quorum rounds up: ceil(0.5 * 7) = 4 */
    assert_int_equal(parse("{\"target\": 7}", &c, err, sizeof err), SL_OK);
    assert_int_equal(c.quorum, 4);
}

static void test_every_key(void **state)
{
    (void)state;
    static const char json[] =
        "{\"name\": \"fmnist-cnn v2\", \"rounds\": 300, \"target\": 50, \"over_selection\": 1.5,"
        " \"quorum\": 40, \"selection_window_ms\": 2500, \"report_deadline_ms\": 90000,"
        " \"cooldown_ms\": 3600000, \"min_samples\": 64, \"required_caps\": \"avx2\","
        " \"values\": \"int8\", \"density\": 0.005, \"topk_scope\": \"tensor\","
        " \"error_feedback\": \"residual\", \"residual_decay\": 0.9,"
        " \"warmup_rounds\": 5,"
        " \"warmup_density\": 0.25, \"local_epochs\": 2, \"batch\": 64, \"local_lr\": 0.05,"
        " \"local_momentum\": 0, \"prox_mu\": 0.01, \"aggregator\": \"fedyogi\","
        " \"server_lr\": 0.03, \"server_momentum\": 0.5, \"beta1\": 0.8, \"beta2\": 0.999,"
        " \"tau\": 1e-6, \"clip_norm\": 2.5, \"trim_fraction\": 0.2, \"dp_noise\": 0.7,"
        " \"max_update_norm\": 100, \"seed\": 12345, \"fedbuff\": true, \"buffer_size\": 16,"
        " \"max_staleness\": 4, \"retain_last\": 3, \"retain_every\": 100}";
    sl_task_config c;
    char err[256];

    assert_int_equal(parse(json, &c, err, sizeof err), SL_OK);
    assert_string_equal(c.name, "fmnist-cnn v2");
    assert_int_equal(c.rounds, 300);
    assert_int_equal(c.target, 50);
    assert_true(c.over_selection == 1.5);
    assert_int_equal(c.quorum, 40);
    assert_int_equal(c.selection_window_ms, 2500);
    assert_int_equal(c.report_deadline_ms, 90000);
    assert_int_equal(c.cooldown_ms, 3600000);
    assert_int_equal(c.min_samples, 64);
    assert_string_equal(c.required_caps, "avx2");
    assert_int_equal(c.values, SL_VALUE_INT8);
    assert_true(c.density == 0.005);
    assert_int_equal(c.topk_scope, SL_TOPK_TENSOR);
    assert_int_equal(c.error_feedback, SL_EF_RESIDUAL);
    assert_true(c.residual_decay == 0.9);
    assert_int_equal(c.warmup_rounds, 5);
    assert_true(c.warmup_density == 0.25);
    assert_int_equal(c.local_epochs, 2);
    assert_int_equal(c.batch, 64);
    assert_true(c.local_lr == 0.05 && c.local_momentum == 0 && c.prox_mu == 0.01);
    assert_int_equal(c.aggregator, SL_AGG_FEDYOGI);
    assert_true(c.server_lr == 0.03 && c.server_momentum == 0.5);
    assert_true(c.beta1 == 0.8 && c.beta2 == 0.999 && c.tau == 1e-6);
    assert_true(c.clip_norm == 2.5 && c.trim_fraction == 0.2 && c.dp_noise == 0.7);
    assert_true(c.max_update_norm == 100);
    assert_int_equal(c.seed, 12345);
    assert_int_equal(c.fedbuff, 1);
    assert_int_equal(c.buffer_size, 16);
    assert_int_equal(c.max_staleness, 4);
    assert_int_equal(c.retain_last, 3);
    assert_int_equal(c.retain_every, 100);
    assert_roundtrip(&c);
}

static void test_enums(void **state)
{
    (void)state;
    static const char *const modes[] = {"fp32", "fp16", "bf16", "int8", "ternary", "sign"};
    static const char *const aggs[] = {"fedavg",     "fedavgm",      "fedadam", "fedyogi",
                                       "fedadagrad", "trimmed_mean", "median"};
    sl_task_config c;
    char json[128], err[256];

    for (int i = 0; i < 6; i++) {
        snprintf(json, sizeof json, "{\"target\":3,\"values\":\"%s\"}", modes[i]);
        assert_int_equal(parse(json, &c, err, sizeof err), SL_OK);
        assert_int_equal(c.values, i);
        assert_roundtrip(&c);
    }
    for (int i = 0; i < 7; i++) {
        /* tracking error feedback takes FedAvg only; the default residual takes any */
        snprintf(json, sizeof json,
                 "{\"target\":3,\"aggregator\":\"%s\",\"error_feedback\":\"tracking\"}", aggs[i]);
        assert_int_equal(parse(json, &c, err, sizeof err), i == 0 ? SL_OK : SL_ECONFIG_VALUE);
        snprintf(json, sizeof json, "{\"target\":3,\"aggregator\":\"%s\"}", aggs[i]);
        assert_int_equal(parse(json, &c, err, sizeof err), SL_OK);
        assert_int_equal(c.aggregator, i);
        assert_string_equal(sl_aggregator_name((sl_aggregator)i), aggs[i]);
        assert_roundtrip(&c);
    }
    assert_string_equal(sl_aggregator_name((sl_aggregator)99), "?");
}

static void test_quorum_forms(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        uint32_t quorum;
    } cases[] = {
        {"{\"target\":10,\"quorum\":7}", 7},      {"{\"target\":10,\"quorum\":10}", 10},
        {"{\"target\":10,\"quorum\":1}", 1},      {"{\"target\":10,\"quorum\":0.3}", 3},
        {"{\"target\":10,\"quorum\":0.25}", 3},   {"{\"target\":10,\"quorum\":0.999}", 10},
        {"{\"target\":100,\"quorum\":0.29}", 29}, {"{\"target\":3,\"quorum\":1e-6}", 1},
        {"{\"quorum\":0.5,\"target\":9}", 5}, /* the fraction applies whatever the key order */
    };
    sl_task_config c;
    char err[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(cases[i].json, &c, err, sizeof err), SL_OK);
        assert_int_equal(c.quorum, cases[i].quorum);
        assert_roundtrip(&c);
    }
}

static void test_seed_and_strings(void **state)
{
    (void)state;
    sl_task_config c;
    char err[256], *json = NULL;

    assert_int_equal(parse("{\"target\":2,\"seed\":\"18446744073709551615\"}", &c, err, sizeof err),
                     SL_OK);
    assert_true(c.seed == UINT64_MAX);
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_OK);
    assert_non_null(strstr(json, "\"seed\":\"18446744073709551615\""));
    free(json);
    assert_roundtrip(&c);

    assert_int_equal(parse("{\"target\":2,\"seed\":9007199254740992}", &c, err, sizeof err), SL_OK);
    assert_true(c.seed == (UINT64_C(1) << 53));
    assert_roundtrip(&c);
    c.seed = (UINT64_C(1) << 53) + 1;
    assert_roundtrip(&c);

    /* doubles come back bit for bit, including ones %.15g does not hold */
    c.local_lr = 0.1 + 0.2;
    c.error_feedback = SL_EF_RESIDUAL; /* a server_lr above 1 needs it */
    c.server_lr = nextafter(1.0, 2.0);
    c.tau = 1.2345678901234567e-7;
    c.over_selection = 1.0000000000000002;
    assert_roundtrip(&c);

    /* 63 bytes of name fit, with JSON escapes and UTF-8 */
    char name[64];
    memset(name, 'n', 63);
    name[63] = '\0';
    char text[160];
    snprintf(text, sizeof text, "{\"target\":2,\"name\":\"%s\"}", name);
    assert_int_equal(parse(text, &c, err, sizeof err), SL_OK);
    assert_string_equal(c.name, name);
    assert_roundtrip(&c);
    assert_int_equal(parse("{\"target\":2,\"name\":\"a \\\"q\\\" \xc3\xa9\"}", &c, err, sizeof err),
                     SL_OK);
    assert_string_equal(c.name, "a \"q\" \xc3\xa9");
    assert_roundtrip(&c);

    /* whitespace around the object is fine */
    assert_int_equal(parse(" \n{\"target\":2}\r\n\t ", &c, err, sizeof err), SL_OK);
}

/* Each rejection: the status, and the key (or what is wrong) in the message. */
static void test_rejections(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rc;
        const char *in_message;
    } cases[] = {
        {"{\"target\":10,\"bogus\":1}", SL_ECONFIG_KEY, "bogus: unknown key"},
        {"{\"target\":10,\"target\":11}", SL_ECONFIG_KEY, "target: duplicate key"},
        {"{\"target\":\"10\"}", SL_ECONFIG_VALUE, "target: expected a number, got a string"},
        {"{\"target\":10.5}", SL_ECONFIG_VALUE, "target: 10.5 is not an integer"},
        {"{\"target\":0}", SL_ECONFIG_VALUE, "target: 0 is below the minimum 1"},
        {"{\"rounds\":3}", SL_ECONFIG_VALUE, "target: required"},
        {"{\"target\":10,\"server_lr\":NaN}", SL_ECONFIG_VALUE, "server_lr: the value is not"},
        {"{\"target\":10,\"tau\" : -Infinity}", SL_ECONFIG_VALUE, "tau: the value is not"},
        {"{\"target\":10,\"tau\":0.1,}", SL_ECONFIG_VALUE, "syntax error at byte 23 near"},
        {"{\"target\":10,\"server_lr\":1e999}", SL_ECONFIG_VALUE, "server_lr: not a finite"},
        {"{\"target\":10,\"report_deadline_ms\":-5}", SL_ECONFIG_VALUE,
         "report_deadline_ms: -5 is below the minimum 1"},
        {"{\"target\":10,\"over_selection\":0.9}", SL_ECONFIG_VALUE,
         "over_selection: 0.9 is below the minimum 1"},
        {"{\"target\":10,\"quorum\":12}", SL_ECONFIG_VALUE, "quorum: 12 is above target 10"},
        {"{\"target\":10,\"quorum\":1.5}", SL_ECONFIG_VALUE, "quorum: 1.5 is neither"},
        {"{\"target\":10,\"quorum\":0}", SL_ECONFIG_VALUE, "quorum: 0 is below the minimum 1"},
        {"{\"target\":10,\"quorum\":-0.5}", SL_ECONFIG_VALUE, "quorum:"},
        {"{\"target\":10,\"trim_fraction\":0.5}", SL_ECONFIG_VALUE,
         "trim_fraction: 0.5 is not below 0.5"},
        {"{\"target\":10,\"density\":0}", SL_ECONFIG_VALUE, "density: 0 is not above 0"},
        {"{\"target\":10,\"aggregator\":\"krum\"}", SL_ECONFIG_VALUE, "aggregator: unknown"},
        {"{\"target\":10,\"aggregator\":\"fedavgm\",\"error_feedback\":\"tracking\"}",
         SL_ECONFIG_VALUE,
         "error_feedback: tracking needs aggregator \"fedavg\" with server_lr <= 1 "
         "(it counts the model's move as the mean of the updates sent); set \"error_feedback\": "
         "\"residual\" for aggregator fedavgm"},
        {"{\"target\":10,\"aggregator\":\"median\",\"error_feedback\":\"tracking\"}",
         SL_ECONFIG_VALUE, "for aggregator median"},
        {"{\"target\":10,\"server_lr\":2,\"error_feedback\":\"tracking\"}", SL_ECONFIG_VALUE,
         "for aggregator fedavg and a server rate above 1 (server_lr, times"},
        {"{\"target\":10,\"server_lr_ramp\":3,\"error_feedback\":\"tracking\"}", SL_ECONFIG_VALUE,
         "for aggregator fedavg and a server rate above 1 (server_lr, times"},
        {"{\"target\":10,\"server_lr_ramp\":3,\"error_feedback\":\"tracking\","
         "\"server_lr\":0.5,\"server_lr_boost\":2.5}",
         SL_ECONFIG_VALUE, "and a server rate above 1"},
        {"{\"target\":10,\"server_lr_ramp\":3,\"server_lr_boost\":0}", SL_ECONFIG_VALUE,
         "server_lr_boost: 0 is not above 0"},
        {"{\"target\":10,\"server_lr_boost\":101}", SL_ECONFIG_VALUE, "server_lr_boost:"},
        {"{\"target\":10,\"server_lr_ramp\":10001}", SL_ECONFIG_VALUE, "server_lr_ramp:"},
        {"{\"target\":10,\"server_lr_ramp\":1.5}", SL_ECONFIG_VALUE, "server_lr_ramp:"},
        {"{\"target\":10,\"sender_mean\":1.5}", SL_ECONFIG_VALUE,
         "sender_mean: 1.5 is above the maximum 1"},
        {"{\"target\":10,\"sender_mean\":-0.1}", SL_ECONFIG_VALUE, "sender_mean:"},
        {"{\"target\":10,\"sender_mean_rounds\":10001}", SL_ECONFIG_VALUE, "sender_mean_rounds:"},
        {"{\"target\":10,\"sender_mean_epochs\":1000001}", SL_ECONFIG_VALUE, "sender_mean_epochs:"},
        {"{\"target\":10,\"sender_mean_epochs\":-1}", SL_ECONFIG_VALUE, "sender_mean_epochs:"},
        {"{\"target\":10,\"sender_mean_epochs\":2.5}", SL_ECONFIG_VALUE, "sender_mean_epochs:"},
        {"{\"target\":10,\"sender_mean_epochs\":\"60\"}", SL_ECONFIG_VALUE, "sender_mean_epochs:"},
        {"{\"target\":10,\"sender_mean_epochs\":null}", SL_ECONFIG_VALUE, "sender_mean_epochs:"},
        {"{\"target\":10,\"sender_mean_epochs\":60,\"dp_noise\":1,\"clip_norm\":1}",
         SL_ECONFIG_VALUE, "sender_mean_epochs: not with dp_noise"},
        {"{\"target\":10,\"sender_mean_epochs\":60,\"sender_mean_rounds\":6}", SL_ECONFIG_VALUE,
         "sender_mean_epochs: not with sender_mean_rounds"},
        {"{\"target\":10,\"sender_mean_epochs\":60,\"aggregator\":\"median\"}", SL_ECONFIG_VALUE,
         "sender_mean_epochs: not with median"},
        {"{\"target\":10,\"sender_mean_rounds\":2.5}", SL_ECONFIG_VALUE, "sender_mean_rounds:"},
        {"{\"target\":10,\"sender_mean_rounds\":4,\"error_feedback\":\"tracking\"}",
         SL_ECONFIG_VALUE,
         "sender_mean_rounds: not with error_feedback \"tracking\" (it counts the model's move "
         "as the mean of the updates sent; set \"error_feedback\": \"residual\")"},
        {"{\"target\":10,\"sender_mean_rounds\":4,\"dp_noise\":1,\"clip_norm\":1}",
         SL_ECONFIG_VALUE, "sender_mean_rounds: not with dp_noise (the noise is calibrated"},
        {"{\"target\":10,\"sender_mean_rounds\":4,\"aggregator\":\"median\"}", SL_ECONFIG_VALUE,
         "sender_mean_rounds: not with median (its statistic counts a coordinate an update did "
         "not send as 0)"},
        {"{\"target\":10,\"sender_mean_rounds\":4,\"fedbuff\":true}", SL_ECONFIG_VALUE,
         "sender_mean_rounds: not with fedbuff (its buffers record no participants"},
        {"{\"target\":10,\"sender_mean_rounds\":4,\"aggregator\":\"trimmed_mean\"}",
         SL_ECONFIG_VALUE, "sender_mean_rounds: not with trimmed_mean"},
        {"{\"target\":10,\"aggregator\":3}", SL_ECONFIG_VALUE, "aggregator: expected a string"},
        {"{\"target\":10,\"values\":\"fp64\"}", SL_ECONFIG_VALUE, "values: unknown value mode"},
        {"{\"target\":10,\"topk_scope\":\"global\"}", SL_ECONFIG_VALUE,
         "topk_scope: expected \"model\" or \"tensor\""},
        {"{\"target\":10,\"topk_scope\":1}", SL_ECONFIG_VALUE, "topk_scope: expected a string"},
        {"{\"target\":10,\"error_feedback\":\"none\"}", SL_ECONFIG_VALUE,
         "error_feedback: expected \"tracking\" or \"residual\""},
        {"{\"target\":10,\"error_feedback\":true}", SL_ECONFIG_VALUE,
         "error_feedback: expected a string"},
        {"{\"target\":10,\"error_feedback\":\"residual\",\"residual_decay\":0}", SL_ECONFIG_VALUE,
         "residual_decay"},
        {"{\"target\":10,\"error_feedback\":\"residual\",\"residual_decay\":1.5}", SL_ECONFIG_VALUE,
         "residual_decay"},
        {"{\"target\":10,\"error_feedback\":\"tracking\",\"residual_decay\":0.9}", SL_ECONFIG_VALUE,
         "residual_decay: below 1 needs error_feedback \"residual\""},
        {"{\"target\":10,\"dp_noise\":1}", SL_ECONFIG_VALUE, "dp_noise: needs clip_norm"},
        {"{\"target\":10,\"fedbuff\":1}", SL_ECONFIG_VALUE, "fedbuff: expected true or false"},
        {"{\"target\":10,\"required_caps\":\"a,b\"}", SL_ECONFIG_VALUE, "required_caps: byte 0x2c"},
        {"{\"target\":10,\"name\":\"\"}", SL_ECONFIG_VALUE, "name: must not be empty"},
        {"{\"target\":10,\"name\":\"a\\nb\"}", SL_ECONFIG_VALUE, "name: byte 0x0a"},
        {"{\"target\":10,\"seed\":-1}", SL_ECONFIG_VALUE, "seed:"},
        {"{\"target\":10,\"seed\":\"12x\"}", SL_ECONFIG_VALUE, "seed:"},
        {"{\"target\":10,\"seed\":\"18446744073709551616\"}", SL_ECONFIG_VALUE, "seed:"},
        {"{\"target\":10,\"seed\":1e17}", SL_ECONFIG_VALUE, "seed:"},
        {"{\"target\":10,\"warmup_rounds\":3,\"warmup_density\":0.001}", SL_ECONFIG_VALUE,
         "warmup_density: 0.001 is below density 0.01"},
        {"{\"target\":10,\"local_momentum\":1}", SL_ECONFIG_VALUE,
         "local_momentum: 1 is not below"},
        {"{\"target\":10,\"batch\":null}", SL_ECONFIG_VALUE, "batch: expected a number, got null"},
        {"{\"target\":10,\"cooldown_ms\":[1]}", SL_ECONFIG_VALUE, "cooldown_ms: expected a number"},
        /* heterogeneous fleets (#22): FedNova's conflicts, budgets, selection, deadlines */
        {"{\"target\":10,\"fednova\":true,\"fedbuff\":true}", SL_ECONFIG_VALUE,
         "fednova: not with fedbuff"},
        {"{\"target\":10,\"fednova\":true,\"clip_norm\":1,\"dp_noise\":1}", SL_ECONFIG_VALUE,
         "fednova: not with dp_noise"},
        {"{\"target\":10,\"fednova\":true,\"error_feedback\":\"tracking\"}", SL_ECONFIG_VALUE,
         "fednova: not with error_feedback \"tracking\""},
        {"{\"target\":10,\"fednova\":1}", SL_ECONFIG_VALUE, "fednova: expected true or false"},
        {"{\"target\":10,\"fednova\":true,\"local_momentum\":0.9995}", SL_ECONFIG_VALUE,
         "fednova: local_momentum 0.9995 makes 1000000 local steps 2e+09 effective steps"},
        {"{\"target\":10,\"fednova\":true,\"local_momentum\":0.9995,\"max_local_steps\":1000}",
         SL_ECONFIG_VALUE, "fednova: local_momentum 0.9995 makes 1000000 local steps"},
        {"{\"target\":10,\"sender_mean_share\":1}", SL_ECONFIG_VALUE,
         "sender_mean_share: expected true or false"},
        {"{\"target\":10,\"sender_mean_share\":null}", SL_ECONFIG_VALUE,
         "sender_mean_share: expected true or false"},
        {"{\"target\":10,\"time_budget\":\"yes\"}", SL_ECONFIG_VALUE,
         "time_budget: expected true or false"},
        {"{\"target\":10,\"min_local_steps\":0}", SL_ECONFIG_VALUE,
         "min_local_steps: 0 is below the minimum 1"},
        {"{\"target\":10,\"max_local_steps\":1000001}", SL_ECONFIG_VALUE,
         "max_local_steps: 1000001 is above the maximum"},
        {"{\"target\":10,\"max_local_steps\":2.5}", SL_ECONFIG_VALUE,
         "max_local_steps: 2.5 is not an integer"},
        {"{\"target\":10,\"min_local_steps\":9,\"max_local_steps\":3}", SL_ECONFIG_VALUE,
         "max_local_steps: 3 is below min_local_steps 9"},
        {"{\"target\":10,\"paced_selection\":0}", SL_ECONFIG_VALUE,
         "paced_selection: expected true or false"},
        {"{\"target\":10,\"fairness_rounds\":-1}", SL_ECONFIG_VALUE,
         "fairness_rounds: -1 is below the minimum 0"},
        {"{\"target\":10,\"deadline_percentile\":101}", SL_ECONFIG_VALUE,
         "deadline_percentile: 101 is above the maximum"},
        {"{\"target\":10,\"deadline_rounds\":0}", SL_ECONFIG_VALUE,
         "deadline_rounds: 0 is below the minimum 1"},
        {"{\"target\":10,\"min_report_deadline_ms\":0}", SL_ECONFIG_VALUE,
         "min_report_deadline_ms: 0 is below the minimum 1"},
        {"{\"target\":10,\"min_report_deadline_ms\":1e300}", SL_ECONFIG_VALUE,
         "min_report_deadline_ms:"},
        {"{\"target\":10,\"retain_every\":5}", SL_ECONFIG_VALUE,
         "retain_every: needs retain_last >= 1"},
        {"{\"target\":10,\"retain_last\":-1}", SL_ECONFIG_VALUE,
         "retain_last: -1 is below the minimum 0"},
        {"{\"target\":10,\"retain_last\":2.5}", SL_ECONFIG_VALUE, "retain_last:"},
        {"{\"target\":10,\"retain_last\":1e10}", SL_ECONFIG_VALUE,
         "retain_last: 10000000000 is above the maximum 1000000000"},
        {"{\"target\":10,\"retain_last\":2,\"retain_every\":-1}", SL_ECONFIG_VALUE,
         "retain_every: -1 is below the minimum 0"},
        {"{\"target\":10,\"retain_last\":\"2\"}", SL_ECONFIG_VALUE, "retain_last:"},
        {"[1, 2]", SL_ECONFIG_VALUE, "expected a JSON object, got an array"},
        {"\"target\"", SL_ECONFIG_VALUE, "expected a JSON object"},
        {"{\"target\":10} x", SL_ECONFIG_VALUE, "syntax error at byte 14"},
        {"{\"target\":10}{}", SL_ECONFIG_VALUE, "syntax error"},
        {"{\"target\":10", SL_ECONFIG_VALUE, "syntax error"},
        {"", SL_ECONFIG_VALUE, "empty"},
    };
    char err[256];
    sl_task_config c, untouched;

    memset(&untouched, 0xab, sizeof untouched);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = untouched;
        int rc = parse(cases[i].json, &c, err, sizeof err);
        if (rc != cases[i].rc || strstr(err, cases[i].in_message) == NULL)
            fail_msg("case %zu %s: got %s \"%s\", want %s \"%s\"", i, cases[i].json, sl_errname(rc),
                     err, sl_errname(cases[i].rc), cases[i].in_message);
        assert_memory_equal(&c, &untouched, sizeof c); /* a failed parse leaves @out alone */
    }

    /* a name of 64 bytes does not fit */
    char text[160];
    snprintf(text, sizeof text, "{\"target\":2,\"name\":\"%064d\"}", 0);
    assert_int_equal(parse(text, &c, err, sizeof err), SL_ECONFIG_VALUE);
    assert_non_null(strstr(err, "name: longer than 63 bytes"));

    /* a NUL byte inside the length */
    assert_int_equal(sl_task_config_parse("{\"target\":2}\0", 13, &c, err, sizeof err),
                     SL_ECONFIG_VALUE);
    /* the length is honoured: the text after it is not read */
    assert_int_equal(sl_task_config_parse("{\"target\":2}garbage", 12, &c, err, sizeof err), SL_OK);

    /* a tiny or absent error buffer is fine */
    assert_int_equal(parse("{\"target\":10,\"bogus\":1}", &c, err, 6), SL_ECONFIG_KEY);
    assert_string_equal(err, "bogus");
    assert_int_equal(parse("{\"target\":10,\"bogus\":1}", &c, NULL, 0), SL_ECONFIG_KEY);
    assert_int_equal(sl_task_config_parse(NULL, 0, &c, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_task_config_parse("{}", 2, NULL, err, sizeof err), SL_EINVAL);
}

/* The local optimiser's keys: defaults (today's SGD), every key, the
 * defaults that depend on the optimiser, round trips, rejections, and the
 * frozen names checked against a layout. */
static void test_local_optimizer(void **state)
{
    (void)state;
    sl_task_config c, untouched;
    char err[256], *json = NULL;
    sl_layout *layout = NULL;
    static const char layout_text[] = "fc1.weight 4 3\nfc1.bias 4\nfc10.weight 2 4\n"
                                      "bn.1.weight 2\nbn.1.running_mean 2\n";
    static const struct {
        const char *json, *in_message;
    } bad[] = {
        {"{\"target\":2,\"local_optimizer\":\"rmsprop\"}",
         "local_optimizer: expected \"sgd\", \"adam\" or \"adamw\""},
        {"{\"target\":2,\"local_optimizer\":1}", "local_optimizer: expected"},
        {"{\"target\":2,\"local_nesterov\":1}", "local_nesterov: expected true or false"},
        {"{\"target\":2,\"local_nesterov\":true,\"local_momentum\":0}",
         "local_nesterov: needs local_optimizer \"sgd\" and local_momentum > 0"},
        {"{\"target\":2,\"local_nesterov\":true,\"local_optimizer\":\"adam\"}",
         "local_nesterov: needs"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_momentum\":0.9}",
         "local_momentum: SGD's; local_optimizer \"adam\" takes local_betas"},
        {"{\"target\":2,\"local_weight_decay\":-0.1}",
         "local_weight_decay: -0.1 is below the minimum 0"},
        {"{\"target\":2,\"local_weight_decay\":1000}", "local_weight_decay: 1000 is above"},
        {"{\"target\":2,\"local_betas\":[0.9,0.99]}",
         "local_betas: only for local_optimizer \"adam\" or \"adamw\""},
        {"{\"target\":2,\"local_eps\":1e-6}", "local_eps: only for local_optimizer"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_betas\":[0.9]}",
         "local_betas: expected an array of two numbers [beta1, beta2], got another length"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_betas\":0.9}",
         "local_betas: expected an array of two numbers [beta1, beta2], got a number"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_betas\":[0.9,1]}",
         "local_betas[1]: 1 is not below 1"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_betas\":[-0.1,0.9]}",
         "local_betas[0]: -0.1 is below the minimum 0"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_betas\":[\"0.9\",0.9]}",
         "local_betas[0]: expected a finite number, got a string"},
        {"{\"target\":2,\"local_optimizer\":\"adam\",\"local_eps\":0}",
         "local_eps: 0 is not above 0"},
        {"{\"target\":2,\"local_clip_norm\":-1}", "local_clip_norm: -1 is below the minimum 0"},
        {"{\"target\":2,\"frozen\":\"fc1\"}",
         "frozen: expected an array of parameter names, got a string"},
        {"{\"target\":2,\"frozen\":[\"fc1\",2]}", "frozen[1]: expected a string, got a number"},
        {"{\"target\":2,\"frozen\":[\"\"]}", "frozen[0]: must not be empty"},
        {"{\"target\":2,\"frozen\":[\"a,b\"]}", "frozen[0]: byte 0x2c at offset 1"},
        {"{\"target\":2,\"local_norm\":\"yes\"}", "local_norm: expected true or false"},
    };

    /* the defaults: SGD as before the keys existed */
    assert_int_equal(parse("{\"target\": 4}", &c, err, sizeof err), SL_OK);
    assert_int_equal(c.local_optimizer, SL_LOCAL_SGD);
    assert_int_equal(c.local_nesterov, 0);
    assert_true(c.local_weight_decay == 0 && c.local_clip_norm == 0);
    assert_true(c.local_betas[0] == 0.9 && c.local_betas[1] == 0.999 && c.local_eps == 1e-8);
    assert_string_equal(c.frozen, "");
    assert_int_equal(c.local_norm, 0);
    assert_true(c.local_momentum == 0.9);
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_OK);
    assert_non_null(strstr(json, "\"local_optimizer\":\"sgd\",\"local_nesterov\":false,"
                                 "\"local_weight_decay\":0,\"local_betas\":[0.9,0.999],"
                                 "\"local_eps\":1e-08,\"local_clip_norm\":0,\"frozen\":[],"
                                 "\"local_norm\":false,"));
    free(json);
    assert_roundtrip(&c);

    /* every key of SGD */
    assert_int_equal(parse("{\"target\":4,\"local_nesterov\":true,\"local_weight_decay\":5e-4,"
                           "\"local_clip_norm\":1.5,\"frozen\":[\"fc1\",\"bn.1.\"],"
                           "\"local_norm\":true}",
                           &c, err, sizeof err),
                     SL_OK);
    assert_int_equal(c.local_nesterov, 1);
    assert_true(c.local_weight_decay == 5e-4 && c.local_clip_norm == 1.5);
    assert_string_equal(c.frozen, "fc1,bn.1.");
    assert_int_equal(c.local_norm, 1);
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_OK);
    assert_non_null(strstr(json, "\"frozen\":[\"fc1\",\"bn.1.\"]"));
    free(json);
    assert_roundtrip(&c);

    /* adam: momentum 0 when absent, betas and eps; adamw: PyTorch's decay when absent */
    assert_int_equal(parse("{\"target\":4,\"local_optimizer\":\"adam\",\"local_lr\":1e-3,"
                           "\"local_betas\":[0.8,0.95],\"local_eps\":1e-6}",
                           &c, err, sizeof err),
                     SL_OK);
    assert_int_equal(c.local_optimizer, SL_LOCAL_ADAM);
    assert_true(c.local_momentum == 0 && c.local_weight_decay == 0);
    assert_true(c.local_betas[0] == 0.8 && c.local_betas[1] == 0.95 && c.local_eps == 1e-6);
    assert_roundtrip(&c);
    assert_int_equal(parse("{\"target\":4,\"local_optimizer\":\"adamw\",\"local_momentum\":0}", &c,
                           err, sizeof err),
                     SL_OK);
    assert_int_equal(c.local_optimizer, SL_LOCAL_ADAMW);
    assert_true(c.local_weight_decay == 0.01);
    assert_roundtrip(&c);
    assert_int_equal(parse("{\"target\":4,\"local_optimizer\":\"adamw\","
                           "\"local_weight_decay\":0}",
                           &c, err, sizeof err),
                     SL_OK);
    assert_true(c.local_weight_decay == 0);
    assert_roundtrip(&c);
    assert_string_equal(sl_local_optimizer_name(SL_LOCAL_ADAMW), "adamw");
    assert_string_equal(sl_local_optimizer_name((sl_local_optimizer)9), "?");

    memset(&untouched, 0xab, sizeof untouched);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        c = untouched;
        rc = parse(bad[i].json, &c, err, sizeof err);
        if (rc != SL_ECONFIG_VALUE || strstr(err, bad[i].in_message) == NULL)
            fail_msg("case %zu %s: got %s \"%s\", want \"%s\"", i, bad[i].json, sl_errname(rc), err,
                     bad[i].in_message);
        assert_memory_equal(&c, &untouched, sizeof c);
    }
    {
        /* names of 127 bytes: 8 take 1023 bytes with their commas and fit, 9 do not */
        char text[2048], name[128];
        memset(name, 'a', 127);
        name[127] = '\0';
        for (int count = 8; count <= 9; count++) {
            size_t n = (size_t)snprintf(text, sizeof text, "{\"target\":2,\"frozen\":[");
            for (int i = 0; i < count; i++)
                n += (size_t)snprintf(text + n, sizeof text - n, "%s\"%s\"", i ? "," : "", name);
            snprintf(text + n, sizeof text - n, "]}");
            if (count == 8) {
                assert_int_equal(parse(text, &c, err, sizeof err), SL_OK);
                assert_int_equal(strlen(c.frozen), 1023);
                assert_roundtrip(&c);
            } else {
                assert_int_equal(parse(text, &c, err, sizeof err), SL_ECONFIG_VALUE);
                assert_non_null(strstr(err, "frozen: the names take more than 1023 bytes"));
            }
        }
        name[0] = 'b';
        snprintf(text, sizeof text, "{\"target\":2,\"frozen\":[\"%s\"]}", name);
        assert_int_equal(parse(text, &c, err, sizeof err), SL_OK);
        assert_roundtrip(&c);
        snprintf(text, sizeof text, "{\"target\":2,\"frozen\":[\"%sa\"]}", name);
        assert_int_equal(parse(text, &c, err, sizeof err), SL_ECONFIG_VALUE);
        assert_non_null(strstr(err, "frozen[0]: longer than 127 bytes"));
    }
    /* to_json refuses what parse would, and leaves its output alone */
    json = NULL;
    assert_int_equal(parse("{\"target\":4}", &c, err, sizeof err), SL_OK);
    c.local_nesterov = 2;
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    c.local_nesterov = 0;
    c.local_optimizer = (sl_local_optimizer)3;
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    c.local_optimizer = SL_LOCAL_SGD;
    memcpy(c.frozen, "fc1,,fc2", 9);
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    memset(c.frozen, 'x', sizeof c.frozen); /* not terminated */
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    assert_null(json);

    /* frozen against the task's layout: a tensor, a module ("fc1", "fc1."), a typo */
    assert_int_equal(sl_layout_parse(layout_text, strlen(layout_text), &layout), SL_OK);
    assert_int_equal(parse("{\"target\":2,\"frozen\":[\"fc1\",\"fc10.weight\",\"bn.1.\","
                           "\"bn\"]}",
                           &c, err, sizeof err),
                     SL_OK);
    assert_int_equal(sl_task_config_check_layout(&c, layout, err, sizeof err), SL_OK);
    assert_string_equal(err, "");
    assert_int_equal(parse("{\"target\":2,\"frozen\":[\"fc1\",\"fc2\"]}", &c, err, sizeof err),
                     SL_OK);
    assert_int_equal(sl_task_config_check_layout(&c, layout, err, sizeof err), SL_ECONFIG_VALUE);
    assert_non_null(strstr(err,
                           "frozen[1]: \"fc2\" names no parameter of the task's model, nor a "
                           "module of one (its parameters: fc1.weight, fc1.bias, fc10.weight,"));
    /* "fc" is not a module of "fc1.weight", nor "bn.1.w" a tensor */
    assert_int_equal(parse("{\"target\":2,\"frozen\":[\"fc\"]}", &c, err, sizeof err), SL_OK);
    assert_int_equal(sl_task_config_check_layout(&c, layout, err, sizeof err), SL_ECONFIG_VALUE);
    assert_int_equal(parse("{\"target\":2,\"frozen\":[\"bn.1.w\"]}", &c, err, sizeof err), SL_OK);
    assert_int_equal(sl_task_config_check_layout(&c, layout, err, sizeof err), SL_ECONFIG_VALUE);
    assert_int_equal(parse("{\"target\":2}", &c, err, sizeof err), SL_OK);
    assert_int_equal(sl_task_config_check_layout(&c, layout, NULL, 0), SL_OK);
    assert_int_equal(sl_task_config_check_layout(NULL, layout, NULL, 0), SL_EINVAL);
    assert_int_equal(sl_task_config_check_layout(&c, NULL, NULL, 0), SL_EINVAL);
    sl_layout_free(layout);
}

/* FedNova's sums take effective steps below 2^30: a new task whose devices could report more
 * (SGD momentum close to 1, no time budget bounding the steps) is refused; a budget's
 * max_local_steps, another optimiser or a stored task (an earlier build's) load. */
static void test_fednova_steps_bound(void **state)
{
    static const char *ok[] = {
        "{\"target\":10,\"fednova\":true,\"local_momentum\":0.999}",
        "{\"target\":10,\"fednova\":true,\"local_momentum\":0.9995,\"time_budget\":true,"
        "\"max_local_steps\":1000}",
        "{\"target\":10,\"fednova\":true,\"local_optimizer\":\"adam\",\"local_momentum\":0}",
        "{\"target\":10,\"local_momentum\":0.9999}",
    };
    const char *bad = "{\"target\":10,\"fednova\":true,\"local_momentum\":0.9999}";
    char err[256];
    sl_task_config c;
    (void)state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (parse(ok[i], &c, err, sizeof err) != SL_OK)
            fail_msg("%s: %s", ok[i], err);
    assert_int_equal(parse(bad, &c, err, sizeof err), SL_ECONFIG_VALUE);
    assert_non_null(strstr(err, "lower local_momentum, or set time_budget"));
    assert_int_equal(sl_task_config_parse_stored(bad, strlen(bad), &c, err, sizeof err), SL_OK);
    assert_true(c.fednova && c.local_momentum == 0.9999);
}

static void test_to_json_rejects_invalid(void **state)
{
    (void)state;
    sl_task_config c;
    char err[256], *json = NULL;

    assert_int_equal(parse("{\"target\":4}", &c, err, sizeof err), SL_OK);
    c.quorum = 5;
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    c.quorum = 2;
    c.server_lr = NAN;
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    c.server_lr = 1;
    c.error_feedback = (sl_error_feedback)2;
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    c.error_feedback = SL_EF_TRACKING;
    memset(c.name, 'x', sizeof c.name); /* not terminated */
    assert_int_equal(sl_task_config_to_json(&c, &json), SL_EINVAL);
    assert_null(json);
    assert_int_equal(sl_task_config_to_json(NULL, &json), SL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_enums),
        cmocka_unit_test(test_quorum_forms),
        cmocka_unit_test(test_seed_and_strings),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_local_optimizer),
        cmocka_unit_test(test_fednova_steps_bound),
        cmocka_unit_test(test_to_json_rejects_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
