/*
 * The local optimiser and FedBN, through the real coordinator and the
 * starling-agent program:
 *   - the check-in answer's optimiser keys: their meaning when an older
 *     coordinator leaves them out (plain SGD, the old training path), every
 *     key read, and a refusal (nothing changed) for every bad value;
 *   - a fleet trains the registry mlp with Adam, gradient clipping and a
 *     frozen tensor: the frozen tensor is bit-identical in the final global
 *     model, every other tensor moved;
 *   - FedBN (local_norm) on the depthwise-separable CNN with BatchNorm: the
 *     global model's BatchNorm tensors never change, each device's own
 *     (the "local" file of its state directory) differ from them after
 *     training, and a restarted device trains on from the values it saved.
 * Updates are sent dense (density 1) so that any nonzero entry of a frozen
 * or local tensor would reach the global model.
 */
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "../../device/agent/agent_int.h"
#include "../support/sl_test.h"
#include "agent_harness.h"
#include "starling/codec.h"
#include "starling/nn.h"

#define TASK(name, extra)                                                           \
    "{\"name\":\"" name "\",\"target\":2,\"quorum\":1,\"over_selection\":1,"        \
    "\"selection_window_ms\":400,\"report_deadline_ms\":20000,\"values\":\"fp32\"," \
    "\"density\":1,\"topk_scope\":\"model\",\"local_epochs\":1,\"batch\":32," extra "}"

static char *read_spec(const char *name)
{
    char path[600];
    void *text;
    size_t len;
    snprintf(path, sizeof path, "%s/device/nn/models/%s", SL_SOURCE_DIR, name);
    if (sl_fs_read_file(path, 1 << 24, &text, &len) != SL_OK)
        fail_msg("cannot read %s", path);
    return text;
}

/* starling-agent --fleet @devices --rounds @rounds for @task; fails the test
 * (with the log's tail) unless it exits 0. */
static void run_fleet(const ag_coord *c, int64_t task, const char *data, const char *fleet,
                      const char *log, const char *devices, const char *rounds)
{
    char task_s[32];
    int code;
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    {
        const char *args[] = {"--coordinator", c->url,         "--task",
                              task_s,          "--data",       data,
                              "--state-dir",   fleet,          "--enrolment-token",
                              AG_ENROL,        "--retry-base", "20ms",
                              "--max-wait",    "1s",           "--log-level",
                              "warn",          "--fleet",      devices,
                              "--rounds",      rounds,         NULL};
        code = ag_wait(ag_spawn_agent(args, log), 180000);
    }
    if (code != 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log);
        (void)!system(cmd);
        fail_msg("starling-agent --fleet %s --rounds %s exited %d", devices, rounds, code);
    }
}

/* The task's latest version once it reached @want (a round the fleet's last
 * reports went into may close a moment after the program exits). */
static int64_t wait_version(ag_coord *c, int64_t task, int64_t want)
{
    int64_t v = ag_model_version(c, task);
    for (int i = 0; i < 600 && v < want; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        v = ag_model_version(c, task);
    }
    if (v < want)
        fail_msg("task %lld reached version %lld, not %lld", (long long)task, (long long)v,
                 (long long)want);
    return v;
}

static float *stored_model(ag_coord *c, int64_t task, int64_t version, const sl_layout *l)
{
    sl_model_record mr;
    float *w = malloc((size_t)sl_layout_params(l) * sizeof *w);
    assert_non_null(w);
    assert_int_equal(sl_store_get_model(c->store, task, version, &mr), SL_OK);
    assert_int_equal(sl_frame_decode_model(l, mr.frame, mr.frame_len, NULL, 0, w), SL_OK);
    sl_store_model_free(&mr);
    return w;
}

static int tensor_equal(const float *a, const float *b, const sl_tensor_desc *d)
{
    return memcmp(a + d->offset, b + d->offset, (size_t)d->count * sizeof *a) == 0;
}

/* ---- the check-in answer ------------------------------------------------------------------- */

static int parse_training(const char *extra, sl__agent_assignment *out)
{
    char json[1536];
    int n = snprintf(json, sizeof json,
                     "{\"selected\":true,\"task_id\":1,\"round_id\":7,\"round_no\":3,"
                     "\"model_version\":4,\"report_deadline_ms\":1000,\"retry_after_ms\":0,"
                     "\"participation\":2,\"compression\":{\"values\":\"ternary\","
                     "\"density\":0.01,\"warmup_rounds\":0,\"warmup_density\":0.25},"
                     "\"training\":{\"epochs\":1,\"batch\":32,\"lr\":0.01,\"prox_mu\":0%s}}",
                     extra);
    assert_true(n > 0 && (size_t)n < sizeof json);
    return sl__agent_parse_assignment(json, (size_t)n, out);
}

static void test_checkin_optimizer(void **state)
{
    sl__agent_assignment a, keep;
    static const char *const bad[] = {
        ",\"momentum\":0.9,\"optimizer\":\"rmsprop\"",
        ",\"momentum\":0.9,\"optimizer\":1",
        ",\"momentum\":0.9,\"optimizer\":\"adam\"", /* Adam's momentum is its betas */
        ",\"momentum\":0,\"nesterov\":true",        /* Nesterov needs momentum */
        ",\"momentum\":0,\"optimizer\":\"adam\",\"nesterov\":true",
        ",\"momentum\":0.9,\"nesterov\":1",
        ",\"momentum\":0.9,\"weight_decay\":-1",
        ",\"momentum\":0.9,\"weight_decay\":\"0\"",
        ",\"momentum\":0.9,\"clip_norm\":-0.5",
        ",\"momentum\":0,\"optimizer\":\"adam\",\"betas\":[0.9]",
        ",\"momentum\":0,\"optimizer\":\"adam\",\"betas\":[0.9,1]",
        ",\"momentum\":0,\"optimizer\":\"adam\",\"betas\":[-0.1,0.9]",
        ",\"momentum\":0,\"optimizer\":\"adam\",\"betas\":0.9",
        ",\"momentum\":0,\"optimizer\":\"adam\",\"eps\":0",
        ",\"momentum\":0.9,\"frozen\":\"f1\"",
        ",\"momentum\":0.9,\"frozen\":[\"\"]",
        ",\"momentum\":0.9,\"frozen\":[\"a,b\"]",
        ",\"momentum\":0.9,\"frozen\":[3]",
        ",\"momentum\":0.9,\"local_norm\":\"yes\"",
    };
    (void)state;
    /* an older coordinator: plain SGD, the old training path */
    assert_int_equal(parse_training(",\"momentum\":0.9", &a), SL_OK);
    assert_int_equal(a.optimizer, SL_OPTIM_SGD);
    assert_true(a.momentum == 0.9 && a.weight_decay == 0 && a.clip_norm == 0);
    assert_int_equal(a.nesterov, 0);
    assert_int_equal(a.local_norm, 0);
    assert_string_equal(a.frozen, "");
    assert_false(sl__agent_uses_optim(&a));
    /* today's coordinator with a default task says the same */
    assert_int_equal(parse_training(",\"momentum\":0.9,\"optimizer\":\"sgd\",\"nesterov\":false,"
                                    "\"weight_decay\":0,\"clip_norm\":0,\"local_norm\":false,"
                                    "\"frozen\":[]",
                                    &a),
                     SL_OK);
    assert_false(sl__agent_uses_optim(&a));
    /* every key */
    assert_int_equal(parse_training(",\"momentum\":0,\"optimizer\":\"adamw\",\"nesterov\":false,"
                                    "\"weight_decay\":0.01,\"betas\":[0.8,0.95],\"eps\":1e-6,"
                                    "\"clip_norm\":2,\"local_norm\":true,"
                                    "\"frozen\":[\"f1.bias\",\"layer1.\"]",
                                    &a),
                     SL_OK);
    assert_int_equal(a.optimizer, SL_OPTIM_ADAMW);
    assert_true(a.weight_decay == 0.01 && a.beta1 == 0.8 && a.beta2 == 0.95 && a.eps == 1e-6);
    assert_true(a.clip_norm == 2);
    assert_int_equal(a.local_norm, 1);
    assert_string_equal(a.frozen, "f1.bias,layer1.");
    assert_true(sl__agent_uses_optim(&a));
    assert_int_equal(parse_training(",\"momentum\":0.5,\"nesterov\":true", &a), SL_OK);
    assert_int_equal(a.nesterov, 1);
    assert_true(sl__agent_uses_optim(&a));
    /* betas and eps with SGD: unused, not refused */
    assert_int_equal(parse_training(",\"momentum\":0.9,\"betas\":[0.9,0.999],\"eps\":1e-8", &a),
                     SL_OK);
    assert_false(sl__agent_uses_optim(&a));
    /* refusals change nothing */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        memcpy(&keep, &a, sizeof a);
        rc = parse_training(bad[i], &a);
        if (rc != SL_ESYNTAX)
            fail_msg("training with %s: %d, expected SL_ESYNTAX", bad[i], rc);
        assert_memory_equal(&keep, &a, sizeof a);
    }
}

/* ---- Adam, clipping, a frozen tensor -------------------------------------------------------- */

static void test_adam_frozen(void **state)
{
    char dir[512], data[600], fleet[600], log[600];
    ag_coord c;
    sl_model *m = NULL;
    const sl_layout *l;
    float *first, *last;
    int64_t task, version;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_adam");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(fleet, sizeof fleet, "%s/fleet", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_make_data(data, 400, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          TASK("adam", "\"local_optimizer\":\"adam\",\"local_lr\":0.002,"
                                       "\"local_clip_norm\":1,\"frozen\":[\"f2.weight\"]"));
    run_fleet(&c, task, data, fleet, log, "2", "2");
    version = wait_version(&c, task, 3); /* two rounds closed */
    assert_int_equal(sl_model_create("mlp", &m), SL_OK);
    l = sl_model_layout(m);
    first = stored_model(&c, task, 1, l);
    last = stored_model(&c, task, version, l);
    {
        /* Adam moved each trained float by about lr per step (its first step by exactly lr
         * where the gradient is not 0): far more in all than the clipped gradient would
         * with SGD at this rate (at most lr * clip_norm per step, about 0.03 in two rounds) */
        double move = 0;
        for (size_t i = 0; i < sl_layout_params(l); i++)
            move += ((double)last[i] - first[i]) * ((double)last[i] - first[i]);
        move = sqrt(move);
        if (!(move > 0.15))
            fail_msg("the model moved by %g in L2 norm: not Adam's steps", move);
    }
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        int same = tensor_equal(first, last, d);
        if (strcmp(d->name, "f2.weight") == 0 && !same)
            fail_msg("the frozen tensor %s moved", d->name);
        if (strcmp(d->name, "f2.weight") != 0 && same)
            fail_msg("%s did not move in %lld versions", d->name, (long long)version - 1);
    }
    free(first);
    free(last);
    sl_model_free(m);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

/* ---- FedBN ---------------------------------------------------------------------------------- */

/* The local file of a device (state.c: "SLLO" u32 1, u64 layout hash, u64 set
 * hash, u64 count, SHA-256 of the payload, count floats): its values. */
static float *read_local(const char *dev, size_t *count)
{
    char path[800];
    void *raw;
    size_t len;
    uint64_t n;
    uint8_t sum[32];
    float *v;
    snprintf(path, sizeof path, "%s/local", dev);
    if (sl_fs_read_file(path, 1 << 26, &raw, &len) != SL_OK)
        fail_msg("%s: no local tensors saved", path);
    assert_true(len >= 64 && memcmp(raw, "SLLO", 4) == 0);
    memcpy(&n, (uint8_t *)raw + 24, 8);
    assert_int_equal(len, 64 + n * sizeof(float));
    sl_sha256((uint8_t *)raw + 64, len - 64, sum);
    assert_memory_equal(sum, (uint8_t *)raw + 32, 32);
    v = malloc(n * sizeof *v);
    assert_non_null(v);
    memcpy(v, (uint8_t *)raw + 64, n * sizeof *v);
    free(raw);
    *count = (size_t)n;
    return v;
}

/* Replace the values of @dev's local file (same header, new digest). */
static void write_local(const char *dev, const float *v, size_t count)
{
    char path[800];
    void *raw;
    size_t len;
    snprintf(path, sizeof path, "%s/local", dev);
    assert_int_equal(sl_fs_read_file(path, 1 << 26, &raw, &len), SL_OK);
    assert_int_equal(len, 64 + count * sizeof *v);
    memcpy((uint8_t *)raw + 64, v, count * sizeof *v);
    sl_sha256((uint8_t *)raw + 64, count * sizeof *v, (uint8_t *)raw + 32);
    assert_int_equal(sl_fs_write_atomic(path, raw, len, 0600), SL_OK);
    free(raw);
}

/* dwsep_cnn's BatchNorm tensors are the ".1." ones (stem.1.weight, ...). */
static int is_bn(const char *name)
{
    return strstr(name, ".1.") != NULL;
}

static int is_scale(const char *name)
{
    size_t n = strlen(name);
    return is_bn(name) && n > 7 && strcmp(name + n - 7, ".weight") == 0;
}

/* Every BatchNorm tensor of @global equal to the version-1 model @first, and
 * some other tensor moved. */
static void check_global_bn(const sl_layout *l, const float *first, const float *global)
{
    int moved = 0;
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        if (is_bn(d->name) && !tensor_equal(first, global, d))
            fail_msg("the global model's %s changed under FedBN", d->name);
        moved += !is_bn(d->name) && !tensor_equal(first, global, d);
    }
    assert_true(moved > 0);
}

/* The device's local values against the global model's BatchNorm tensors:
 * the number of tensors that differ; @scale_min/max: the range of its scales. */
static size_t local_differs(const sl_layout *l, const float *global, const float *local,
                            size_t count, float *scale_min, float *scale_max)
{
    size_t j = 0, differ = 0;
    *scale_min = INFINITY;
    *scale_max = -INFINITY;
    for (size_t t = 0; t < sl_layout_tensors(l); t++) {
        const sl_tensor_desc *d = sl_layout_tensor(l, t);
        if (!is_bn(d->name))
            continue;
        assert_true(j + d->count <= count);
        differ += memcmp(local + j, global + d->offset, (size_t)d->count * sizeof *local) != 0;
        for (size_t i = 0; i < d->count && is_scale(d->name); i++) {
            *scale_min = fminf(*scale_min, local[j + i]);
            *scale_max = fmaxf(*scale_max, local[j + i]);
        }
        j += (size_t)d->count;
    }
    assert_int_equal(j, count); /* the local floats are exactly the BatchNorm tensors' */
    return differ;
}

static void test_fedbn(void **state)
{
    char dir[512], data[600], fleet[600], log[600], dev[2][700];
    char *text = read_spec("dwsep_cnn.json"), err[256];
    sl_spec *spec = NULL;
    const sl_layout *l;
    ag_coord c;
    float *first, *global, *local[2], lo, hi;
    size_t count[2], bn_tensors = 0;
    int64_t task, version;
    (void)state;
    assert_int_equal(sl_spec_parse(text, strlen(text), &spec, err, sizeof err), SL_OK);
    l = sl_spec_layout(spec);
    for (size_t t = 0; t < sl_layout_tensors(l); t++)
        bn_tensors += is_bn(sl_layout_tensor(l, t)->name);
    assert_int_equal(bn_tensors, 20); /* 5 BatchNorm nodes of 4 tensors */
    sl_test_mkdtemp(dir, sizeof dir, "agent_fedbn");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(fleet, sizeof fleet, "%s/fleet", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    for (int i = 0; i < 2; i++)
        snprintf(dev[i], sizeof dev[i], "%s/dev-%d", fleet, i);
    ag_make_data(data, 600, 100);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_spec(
        &c, text, TASK("fedbn", "\"local_lr\":0.01,\"local_momentum\":0.9,\"local_norm\":true"));
    first = stored_model(&c, task, 1, l);

    run_fleet(&c, task, data, fleet, log, "2", "2");
    version = wait_version(&c, task, 3);
    global = stored_model(&c, task, version, l);
    check_global_bn(l, first, global);
    for (int i = 0; i < 2; i++) {
        local[i] = read_local(dev[i], &count[i]);
        /* every BatchNorm tensor trained (scales, biases) or tracked (statistics) */
        assert_int_equal(local_differs(l, global, local[i], count[i], &lo, &hi), bn_tensors);
    }
    /* two devices, two partitions of the data: two sets of statistics */
    assert_int_equal(count[0], count[1]);
    assert_memory_not_equal(local[0], local[1], count[0] * sizeof(float));
    free(global);

    /* a restart trains on from the saved values: device 0's scales are set to 5 in its
     * file (the global model's are 1); after another round they are still near 5 */
    {
        size_t j = 0;
        for (size_t t = 0; t < sl_layout_tensors(l); t++) {
            const sl_tensor_desc *d = sl_layout_tensor(l, t);
            if (!is_bn(d->name))
                continue;
            for (size_t i = 0; i < d->count && is_scale(d->name); i++)
                local[0][j + i] = 5.0f;
            j += (size_t)d->count;
        }
        write_local(dev[0], local[0], count[0]);
    }
    run_fleet(&c, task, data, fleet, log, "2", "1");
    version = wait_version(&c, task, version + 1);
    global = stored_model(&c, task, version, l);
    check_global_bn(l, first, global);
    for (int i = 0; i < 2; i++) {
        size_t n;
        float *after = read_local(dev[i], &n);
        assert_int_equal(n, count[i]);
        assert_int_equal(local_differs(l, global, after, n, &lo, &hi), bn_tensors);
        if (i == 0 && !(lo > 4.0f && hi < 6.0f))
            fail_msg("device 0's scales after the restart: [%g, %g], not near the saved 5",
                     (double)lo, (double)hi);
        if (i == 1 && !(hi < 3.0f))
            fail_msg("device 1's scales: up to %g", (double)hi);
        /* and they trained on */
        assert_memory_not_equal(after, local[i], n * sizeof *after);
        free(after);
    }
    free(global);
    free(local[0]);
    free(local[1]);
    free(first);
    free(text);
    sl_spec_free(spec);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkin_optimizer),
        cmocka_unit_test(test_adam_frozen),
        cmocka_unit_test(test_fedbn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
