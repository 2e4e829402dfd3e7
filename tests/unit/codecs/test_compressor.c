/* Error feedback (residual and tracking): two-phase commit, conservation of mass, fold,
 * absorb, momentum, restore. */
#include "../../support/sl_codec_test.h"

static const sl_frame_header hdr = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 5, 9, 0};

/* Run one prepare; return the decoded frame and a copy of the pending accumulator. */
static sl_update *prepare(sl_compressor *c, const sl_layout *l, const float *delta, uint32_t step,
                          float **acc_copy)
{
    const float *acc;
    void *frame;
    size_t len, d = (size_t)sl_layout_params(l);
    sl_update *u = NULL;
    assert_int_equal(sl_compressor_prepare(c, delta, &hdr, step, &frame, &len), SL_OK);
    assert_int_equal(sl_frame_decode_update(l, frame, len, NULL, &u), SL_OK);
    assert_int_equal(sl_compressor_pending(c, &acc, NULL), SL_OK);
    *acc_copy = malloc(d * sizeof(float));
    memcpy(*acc_copy, acc, d * sizeof(float));
    free(frame);
    return u;
}

static void check_mode(sl_value_mode vm, sl_select_mode sm, sl_topk_scope scope,
                       sl_error_feedback fb)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l), nt = sl_layout_tensors(l);
    sl_compress_params p;
    sl_compressor *c;
    float *delta = malloc(d * sizeof *delta), *old = malloc(d * sizeof *old), *acc;
    const float *res;
    sl_update *u;

    sl_compress_params_default(&p);
    p.encode.values = vm;
    p.select = sm;
    p.scope = scope;
    p.feedback = fb;
    p.residual_decay = 1; /* undecayed arithmetic here; test_residual_decay has the decay */
    p.density = 0.02;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);
    for (uint32_t round = 0; round < 3; round++) {
        sl_test_gauss(delta, d, 1000 + round, 0.01f);
        assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
        memcpy(old, res, d * sizeof *old);
        u = prepare(c, l, delta, round, &acc);
        /* prepare changes nothing committed */
        assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
        assert_memory_equal(res, old, d * sizeof *old);
        for (size_t i = 0; i < d; i++) /* acc is exactly old residual + delta, in fp32 */
            assert_true(acc[i] == old[i] + delta[i]);
        assert_int_equal(sl_compressor_commit(c), SL_OK);
        assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
        size_t total = 0;
        float min_sent = INFINITY, max_unsent = 0.0f;
        for (size_t t = 0; t < nt; t++) {
            const sl_tensor_desc *td = sl_layout_tensor(l, t);
            size_t want = (size_t)ceil(0.02 * (double)td->count);
            size_t off = (size_t)td->offset, j = 0;
            total += u->n[t];
            if (scope == SL_TOPK_MODEL)
                ; /* checked over the whole model below */
            else if (sm == SL_SELECT_EXACT)
                assert_int_equal(u->n[t], want); /* gaussian deltas: no exact zeros */
            else
                assert_true(u->n[t] >= want);
            for (size_t i = 0; i < td->count; i++) {
                float r = res[off + i], a = acc[off + i], o = old[off + i];
                if (j < u->n[t] && u->idx[t][j] == i) {
                    float q = u->val[t][j++];
                    min_sent = fminf(min_sent, fabsf(a));
                    if (fb == SL_EF_TRACKING) {
                        /* the old residual minus exactly what the receiver reconstructs */
                        assert_true(r == o - q);
                        if (vm == SL_VALUE_FP32)
                            assert_true(q == a);
                        continue;
                    }
                    /* the residual is exactly acc minus what the receiver reconstructs */
                    assert_true(r == a - q);
                    if (vm == SL_VALUE_FP32) { /* lossless: mass conserved bit-exactly */
                        assert_true(q == a);
                        assert_true(r == 0.0f);
                    } else { /* q + r == acc up to the one rounding of the subtraction */
                        double err = fabs((double)q + (double)r - (double)a);
                        assert_true(err <= ldexp(fabs((double)a - (double)q), -24));
                    }
                } else {
                    /* unsent: kept whole (residual), or the delta is not kept (tracking) */
                    assert_true(r == (fb == SL_EF_TRACKING ? o : a));
                    max_unsent = fmaxf(max_unsent, fabsf(a));
                }
            }
            assert_int_equal(j, u->n[t]);
        }
        if (scope == SL_TOPK_MODEL) { /* the largest of the whole vector, wherever they are */
            size_t want = (size_t)ceil(0.02 * (double)d);
            if (sm == SL_SELECT_EXACT) {
                assert_int_equal(total, want);
                assert_true(min_sent >= max_unsent);
            } else {
                assert_true(total >= want);
            }
        }
        sl_update_free(u);
        free(acc);
    }
    assert_int_equal(sl_compressor_commit(c), SL_ESTATE); /* nothing pending */
    sl_compressor_free(c);
    free(delta);
    free(old);
    sl_layout_free(l);
}

static void test_all_value_modes(void **state)
{
    (void)state;
    for (int vm = SL_VALUE_FP32; vm <= SL_VALUE_SIGN; vm++)
        for (int fb = SL_EF_RESIDUAL; fb <= SL_EF_TRACKING; fb++) {
            check_mode((sl_value_mode)vm, SL_SELECT_EXACT, SL_TOPK_MODEL, (sl_error_feedback)fb);
            check_mode((sl_value_mode)vm, SL_SELECT_EXACT, SL_TOPK_TENSOR, (sl_error_feedback)fb);
        }
}

static void test_approximate_selectors(void **state)
{
    (void)state;
    for (int scope = SL_TOPK_MODEL; scope <= SL_TOPK_TENSOR; scope++) {
        check_mode(SL_VALUE_FP32, SL_SELECT_REDSYNC, (sl_topk_scope)scope, SL_EF_RESIDUAL);
        check_mode(SL_VALUE_TERNARY, SL_SELECT_DGC, (sl_topk_scope)scope, SL_EF_TRACKING);
    }
}

/* RESIDUAL: a round that closed without us: the whole update stays in the residual. */
static void test_fold_keeps_everything(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l);
    sl_compress_params p;
    sl_compressor *c;
    float *delta = malloc(d * sizeof *delta), *acc;
    const float *res;
    sl_update *u;
    (void)state;
    sl_compress_params_default(&p);
    p.feedback = SL_EF_RESIDUAL;
    p.residual_decay = 1;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);
    sl_test_gauss(delta, d, 5, 1.0f);
    u = prepare(c, l, delta, 0, &acc);
    assert_int_equal(sl_compressor_fold(c), SL_OK);
    assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
    assert_memory_equal(res, delta, d * sizeof *delta); /* 0 + delta */
    assert_int_equal(sl_compressor_fold(c), SL_ESTATE);
    sl_update_free(u);
    free(acc);
    /* the next participation carries it: acc = delta + delta2 */
    {
        float *delta2 = malloc(d * sizeof *delta2), *acc2;
        sl_test_gauss(delta2, d, 6, 1.0f);
        u = prepare(c, l, delta2, 1, &acc2);
        for (size_t i = 0; i < d; i++)
            assert_true(acc2[i] == delta[i] + delta2[i]);
        sl_update_free(u);
        free(acc2);
        free(delta2);
    }
    sl_compressor_free(c);
    free(delta);
    sl_layout_free(l);
}

/* TRACKING: fold changes nothing; absorb adds a round's move; commit subtracts what was
 * sent from the residual as it is then (after an absorb made while the upload was out). */
static void test_tracking(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l);
    sl_compress_params p;
    sl_compressor *c, *r;
    sl_error_feedback f;
    float *delta = malloc(d * sizeof *delta), *from = malloc(d * sizeof *from),
          *to = malloc(d * sizeof *to), *before = malloc(d * sizeof *before), *acc;
    const float *res;
    sl_update *u;
    (void)state;
    assert_string_equal(sl_error_feedback_name(SL_EF_RESIDUAL), "residual");
    assert_string_equal(sl_error_feedback_name(SL_EF_TRACKING), "tracking");
    assert_null(sl_error_feedback_name((sl_error_feedback)2));
    assert_int_equal(sl_error_feedback_parse("residual", &f), SL_OK);
    assert_int_equal(f, SL_EF_RESIDUAL);
    assert_int_equal(sl_error_feedback_parse("tracking", &f), SL_OK);
    assert_int_equal(f, SL_EF_TRACKING);
    assert_int_equal(sl_error_feedback_parse("none", &f), SL_EINVAL);
    assert_int_equal(f, SL_EF_TRACKING); /* unchanged */
    sl_compress_params_default(&p);
    assert_int_equal(p.feedback, SL_EF_RESIDUAL);
    assert_true(p.residual_decay == SL_RESIDUAL_DECAY_DEFAULT && p.residual_decay == 0.9);
    p.feedback = (sl_error_feedback)2;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL);
    p.feedback = SL_EF_TRACKING;
    p.encode.values = SL_VALUE_TERNARY;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL); /* the default decay */
    p.residual_decay = 1;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);

    /* absorb: residual += (to - from) / rounds */
    sl_test_gauss(from, d, 70, 1.0f);
    sl_test_gauss(to, d, 71, 1.0f);
    assert_int_equal(sl_compressor_absorb(c, from, to, 2.0), SL_OK);
    assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
    for (size_t i = 0; i < d; i++)
        assert_true(res[i] == (float)(((double)to[i] - (double)from[i]) / 2.0));
    memcpy(before, res, d * sizeof *before);
    assert_int_equal(sl_compressor_absorb(c, from, to, 0.0), SL_EINVAL);
    assert_int_equal(sl_compressor_absorb(c, from, to, NAN), SL_EINVAL);
    assert_int_equal(sl_compressor_absorb(c, NULL, to, 1.0), SL_EINVAL);
    to[3] = INFINITY;
    assert_int_equal(sl_compressor_absorb(c, from, to, 1.0), SL_ENONFINITE);
    to[3] = 0.0f;
    assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
    assert_memory_equal(res, before, d * sizeof *before); /* refusals change nothing */

    /* fold: the residual is what it was; the delta is learnt again next round */
    sl_test_gauss(delta, d, 72, 0.5f);
    u = prepare(c, l, delta, 0, &acc);
    for (size_t i = 0; i < d; i++)
        assert_true(acc[i] == before[i] + delta[i]);
    assert_int_equal(sl_compressor_fold(c), SL_OK);
    assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
    assert_memory_equal(res, before, d * sizeof *before);
    sl_update_free(u);
    free(acc);

    /* an upload out while the next model arrives: restore (a restart), absorb, commit */
    u = prepare(c, l, delta, 1, &acc);
    {
        void *frame;
        size_t len;
        assert_int_equal(sl_compressor_prepare(c, delta, &hdr, 1, &frame, &len), SL_OK);
        assert_int_equal(sl_compressor_create(l, &p, &r), SL_OK);
        assert_int_equal(sl_compressor_restore(r, before, NULL, acc, NULL, frame, len), SL_OK);
        free(frame);
    }
    sl_test_gauss(to, d, 73, 1.0f);
    assert_int_equal(sl_compressor_absorb(r, from, to, 1.0), SL_OK);
    assert_int_equal(sl_compressor_state(r, &res, NULL), SL_OK);
    memcpy(before, res, d * sizeof *before);
    assert_int_equal(sl_compressor_commit(r), SL_OK);
    assert_int_equal(sl_compressor_state(r, &res, NULL), SL_OK);
    {
        size_t sent = 0;
        for (size_t t = 0; t < u->tensors; t++) {
            size_t off = (size_t)sl_layout_tensor(l, t)->offset, j = 0;
            for (size_t i = 0; i < sl_layout_tensor(l, t)->count; i++) {
                float q = 0.0f;
                if (j < u->n[t] && u->idx[t][j] == i)
                    q = u->val[t][j++];
                assert_true(res[off + i] == before[off + i] - q);
            }
            sent += u->n[t];
        }
        assert_int_equal(sent, (size_t)ceil(p.density * (double)d));
    }
    sl_update_free(u);
    free(acc);
    /* a residual decay is for RESIDUAL only, in (0, 1] */
    p.feedback = SL_EF_TRACKING;
    p.residual_decay = 0.5;
    assert_int_equal(sl_compressor_create(l, &p, &r), SL_EINVAL);
    p.feedback = SL_EF_RESIDUAL;
    p.residual_decay = 0.0;
    assert_int_equal(sl_compressor_create(l, &p, &r), SL_EINVAL);
    p.residual_decay = 1.5;
    assert_int_equal(sl_compressor_create(l, &p, &r), SL_EINVAL);
    p.residual_decay = NAN;
    assert_int_equal(sl_compressor_create(l, &p, &r), SL_EINVAL);
    p.residual_decay = 1.0;
    /* RESIDUAL has nothing to absorb */
    p.feedback = SL_EF_RESIDUAL;
    sl_compressor_free(r);
    assert_int_equal(sl_compressor_create(l, &p, &r), SL_OK);
    assert_int_equal(sl_compressor_absorb(r, from, to, 1.0), SL_ESTATE);
    sl_compressor_free(r);
    sl_compressor_free(c);
    free(delta);
    free(from);
    free(to);
    free(before);
    sl_layout_free(l);
}

/* RESIDUAL with a decay: acc = decay * residual + delta; commit and fold as without. */
static void test_residual_decay(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l);
    sl_compress_params p;
    sl_compressor *c;
    float *delta = malloc(d * sizeof *delta), *old = malloc(d * sizeof *old), *acc;
    const float *res;
    sl_update *u;
    (void)state;
    sl_compress_params_default(&p);
    p.feedback = SL_EF_RESIDUAL;
    p.residual_decay = 0.75;
    p.encode.values = SL_VALUE_INT8;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);
    for (uint32_t round = 0; round < 3; round++) {
        sl_test_gauss(delta, d, 300 + round, 0.1f);
        assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
        memcpy(old, res, d * sizeof *old);
        u = prepare(c, l, delta, round, &acc);
        for (size_t i = 0; i < d; i++)
            assert_true(acc[i] == 0.75f * old[i] + delta[i]);
        if (round == 1) {
            assert_int_equal(sl_compressor_fold(c), SL_OK);
            assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
            assert_memory_equal(res, acc, d * sizeof *acc); /* the decayed sum, kept */
        } else {
            assert_int_equal(sl_compressor_commit(c), SL_OK);
            assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
            for (size_t t = 0; t < u->tensors; t++) {
                size_t off = (size_t)sl_layout_tensor(l, t)->offset, j = 0;
                for (size_t i = 0; i < sl_layout_tensor(l, t)->count; i++) {
                    int sent = j < u->n[t] && u->idx[t][j] == i;
                    float q = sent ? u->val[t][j++] : 0.0f;
                    assert_true(res[off + i] == (sent ? acc[off + i] - q : acc[off + i]));
                }
            }
        }
        if (round == 2) { /* there was mass to decay: the folded round's */
            size_t nonzero = 0;
            for (size_t i = 0; i < d; i++)
                nonzero += old[i] != 0.0f;
            assert_true(nonzero > d / 2);
        }
        sl_update_free(u);
        free(acc);
    }
    sl_compressor_free(c);
    free(delta);
    free(old);
    sl_layout_free(l);
}

/* Killed between upload and acknowledgement: restore from persisted state, same result. */
static void test_restore_pending(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l), len;
    sl_compress_params p;
    sl_compressor *a, *b;
    float *delta = malloc(d * sizeof *delta);
    const float *res_a, *res_b, *mu_a, *mu_b, *acc, *pmu;
    void *frame;
    (void)state;
    sl_compress_params_default(&p);
    p.momentum = 0.9;
    p.encode.values = SL_VALUE_INT8;
    assert_int_equal(sl_compressor_create(l, &p, &a), SL_OK);
    assert_int_equal(sl_compressor_create(l, &p, &b), SL_OK);
    for (uint32_t round = 0; round < 2; round++) {
        sl_test_gauss(delta, d, 40 + round, 0.1f);
        assert_int_equal(sl_compressor_prepare(a, delta, &hdr, round, &frame, &len), SL_OK);
        assert_int_equal(sl_compressor_state(a, &res_a, &mu_a), SL_OK);
        assert_int_equal(sl_compressor_pending(a, &acc, &pmu), SL_OK);
        /* what the agent persists, loaded into a fresh process */
        assert_int_equal(sl_compressor_restore(b, res_a, mu_a, acc, pmu, frame, len), SL_OK);
        assert_int_equal(sl_compressor_commit(a), SL_OK);
        assert_int_equal(sl_compressor_commit(b), SL_OK);
        assert_int_equal(sl_compressor_state(a, &res_a, &mu_a), SL_OK);
        assert_int_equal(sl_compressor_state(b, &res_b, &mu_b), SL_OK);
        assert_memory_equal(res_a, res_b, d * sizeof(float));
        assert_memory_equal(mu_a, mu_b, d * sizeof(float));
        free(frame);
    }
    /* a frame for another layout is refused and nothing changes */
    {
        sl_layout *other = NULL;
        sl_frame_header h = hdr;
        float v = 1.0f;
        uint32_t i0 = 0;
        sl_sparse_tensor st = {1, &i0, &v};
        assert_int_equal(sl_layout_parse("w 10\n", 5, &other), SL_OK);
        assert_int_equal(sl_frame_encode_update(other, &h, &st, NULL, NULL, &frame, &len), SL_OK);
        assert_int_equal(sl_compressor_state(b, &res_b, &mu_b), SL_OK);
        assert_int_equal(sl_compressor_restore(b, res_b, mu_b, res_b, mu_b, frame, len),
                         SL_ELAYOUT);
        assert_int_equal(sl_compressor_commit(b), SL_ESTATE);
        free(frame);
        sl_layout_free(other);
    }
    sl_compressor_free(a);
    sl_compressor_free(b);
    free(delta);
    sl_layout_free(l);
}

/* DGC momentum masking: momentum is cleared where values were sent, kept elsewhere. */
static void test_momentum_masking(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l);
    sl_compress_params p;
    sl_compressor *c;
    float *delta = malloc(d * sizeof *delta), *acc;
    const float *res, *mu;
    sl_update *u;
    (void)state;
    sl_compress_params_default(&p);
    p.momentum = 0.5;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);
    sl_test_gauss(delta, d, 8, 1.0f);
    u = prepare(c, l, delta, 0, &acc);
    assert_int_equal(sl_compressor_commit(c), SL_OK);
    assert_int_equal(sl_compressor_state(c, &res, &mu), SL_OK);
    for (size_t t = 0, sent = 0; t < u->tensors; t++) {
        size_t off = (size_t)sl_layout_tensor(l, t)->offset;
        for (size_t j = 0; j < u->n[t]; j++, sent++)
            assert_true(mu[off + u->idx[t][j]] == 0.0f);
        if (u->n[t] < sl_layout_tensor(l, t)->count) {
            size_t probe = u->n[t] > 0 && u->idx[t][0] == 0 ? 1 : 0;
            int sent_probe = 0;
            for (size_t j = 0; j < u->n[t]; j++)
                sent_probe |= u->idx[t][j] == probe;
            if (!sent_probe) /* momentum = 0.5 * 0 + delta */
                assert_true(mu[off + probe] == delta[off + probe]);
        }
    }
    sl_update_free(u);
    free(acc);
    sl_compressor_free(c);
    free(delta);
    sl_layout_free(l);
}

/* MODEL scope: a tensor whose elements move most takes the budget; the
 * others are sent empty. TENSOR scope keeps the density in every tensor. */
static void test_model_scope_follows_mass(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l), nt = sl_layout_tensors(l);
    const sl_tensor_desc *last = sl_layout_tensor(l, nt - 1);
    sl_compress_params p;
    sl_compressor *c;
    float *delta = malloc(d * sizeof *delta), *acc;
    sl_update *u;
    sl_topk_scope s;
    (void)state;
    assert_string_equal(sl_topk_scope_name(SL_TOPK_MODEL), "model");
    assert_string_equal(sl_topk_scope_name(SL_TOPK_TENSOR), "tensor");
    assert_null(sl_topk_scope_name((sl_topk_scope)7));
    assert_int_equal(sl_topk_scope_parse("model", &s), SL_OK);
    assert_int_equal(s, SL_TOPK_MODEL);
    assert_int_equal(sl_topk_scope_parse("tensor", &s), SL_OK);
    assert_int_equal(s, SL_TOPK_TENSOR);
    assert_int_equal(sl_topk_scope_parse("global", &s), SL_EINVAL);
    assert_int_equal(s, SL_TOPK_TENSOR); /* unchanged */
    sl_compress_params_default(&p);
    assert_int_equal(p.scope, SL_TOPK_MODEL);
    p.scope = (sl_topk_scope)2;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL);
    assert_true(last->count >= 8);
    p.scope = SL_TOPK_MODEL;
    p.density = (double)(last->count / 2) / (double)d;
    sl_test_gauss(delta, d, 11, 0.001f);
    for (size_t i = 0; i < last->count; i++) /* the last tensor moves 1000x more */
        delta[last->offset + i] *= 1000.0f;
    for (int scope = SL_TOPK_MODEL; scope <= SL_TOPK_TENSOR; scope++) {
        p.scope = (sl_topk_scope)scope;
        assert_int_equal(sl_compressor_create(l, &p, &c), SL_OK);
        u = prepare(c, l, delta, 0, &acc);
        for (size_t t = 0; t + 1 < nt; t++) {
            size_t k = (size_t)ceil(p.density * (double)sl_layout_tensor(l, t)->count);
            assert_int_equal(u->n[t], scope == SL_TOPK_MODEL ? 0 : (k ? k : 1));
        }
        assert_int_equal(u->n[nt - 1], scope == SL_TOPK_MODEL
                                           ? (size_t)ceil(p.density * (double)d)
                                           : (size_t)ceil(p.density * (double)last->count));
        sl_update_free(u);
        free(acc);
        sl_compressor_free(c);
    }
    free(delta);
    sl_layout_free(l);
}

static void test_warmup_schedule(void **state)
{
    sl_compress_params p;
    (void)state;
    sl_compress_params_default(&p);
    p.density = 0.001;
    p.warmup_rounds = 4;
    p.warmup_density = 0.25;
    assert_true(fabs(sl_compress_density(&p, 0) - 0.25) < 1e-12);
    assert_true(sl_compress_density(&p, 1) < 0.25 && sl_compress_density(&p, 1) > 0.001);
    assert_true(sl_compress_density(&p, 3) < sl_compress_density(&p, 2));
    assert_true(sl_compress_density(&p, 4) == 0.001);
    assert_true(sl_compress_density(&p, 1000) == 0.001);
}

static void test_rejections(void **state)
{
    sl_layout *l = sl_test_layout();
    size_t d = (size_t)sl_layout_params(l), len = 0;
    sl_compress_params p;
    sl_compressor *c = NULL;
    float *delta = calloc(d, sizeof *delta);
    const float *res;
    void *frame = NULL;
    (void)state;
    sl_compress_params_default(&p);
    p.density = 0;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL);
    p.density = 1.5;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL);
    p.density = 0.01;
    p.momentum = 1.0;
    assert_int_equal(sl_compressor_create(l, &p, &c), SL_EINVAL);
    assert_null(c);
    assert_int_equal(sl_compressor_create(l, NULL, &c), SL_OK);
    delta[17] = NAN;
    assert_int_equal(sl_compressor_prepare(c, delta, &hdr, 0, &frame, &len), SL_ENONFINITE);
    assert_null(frame);
    assert_int_equal(sl_compressor_commit(c), SL_ESTATE);
    assert_int_equal(sl_compressor_state(c, &res, NULL), SL_OK);
    for (size_t i = 0; i < d; i++)
        assert_true(res[i] == 0.0f);
    /* an all-zero delta sends nothing, and that is a valid frame */
    delta[17] = 0.0f;
    assert_int_equal(sl_compressor_prepare(c, delta, &hdr, 0, &frame, &len), SL_OK);
    assert_int_equal(sl_compressor_commit(c), SL_OK);
    free(frame);
    sl_compressor_free(c);
    free(delta);
    sl_layout_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_value_modes),
        cmocka_unit_test(test_approximate_selectors),
        cmocka_unit_test(test_fold_keeps_everything),
        cmocka_unit_test(test_tracking),
        cmocka_unit_test(test_residual_decay),
        cmocka_unit_test(test_restore_pending),
        cmocka_unit_test(test_momentum_masking),
        cmocka_unit_test(test_model_scope_follows_mass),
        cmocka_unit_test(test_warmup_schedule),
        cmocka_unit_test(test_rejections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
