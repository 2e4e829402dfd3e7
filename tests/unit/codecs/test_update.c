/* Update frames: round trips for every value and position mode, decode-accumulate, rejections. */
#include "../../support/sl_codec_test.h"

typedef struct sparse_set {
    size_t nt;
    sl_sparse_tensor *st;
    uint32_t **idx;
    float **val;
    float **recon;
} sparse_set;

/* Edit byte @off of @frame (@len bytes) into @copy, fix the CRC, and expect @expect from
 * decoding it against @sup (NULL: none), with nothing decoded. */
#define EDIT(off, value, expect)                                                             \
    do {                                                                                     \
        memcpy(copy, frame, len);                                                            \
        copy[off] = (uint8_t)(value);                                                        \
        sl_test_fix_crc(copy, len);                                                          \
        u = NULL;                                                                            \
        assert_int_equal(sl_frame_decode_update_split(l, copy, len, NULL, sup, &u), expect); \
        assert_null(u);                                                                      \
    } while (0)

/* Tensor @t of @s sends its first @n indices: random values, none exactly zero. */
static void fill_values(sparse_set *s, size_t t, size_t n, uint64_t seed)
{
    sl_test_gauss(s->val[t], n, seed + t, 0.01f);
    for (size_t i = 0; i < n; i++)
        if (s->val[t][i] == 0.0f)
            s->val[t][i] = 1e-7f;
    s->st[t].n = n;
    s->st[t].idx = s->idx[t];
    s->st[t].val = s->val[t];
}

/* Random sparse content: density per tensor, or all elements when dense. */
static sparse_set make_sparse(const sl_layout *l, double density, uint64_t seed)
{
    sparse_set s;
    s.nt = sl_layout_tensors(l);
    s.st = calloc(s.nt, sizeof *s.st);
    s.idx = calloc(s.nt, sizeof *s.idx);
    s.val = calloc(s.nt, sizeof *s.val);
    s.recon = calloc(s.nt, sizeof *s.recon);
    for (size_t t = 0; t < s.nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(l, t);
        size_t n = 0, d = (size_t)td->count;
        s.idx[t] = malloc(d * sizeof(uint32_t));
        s.val[t] = malloc(d * sizeof(float));
        s.recon[t] = malloc(d * sizeof(float));
        for (size_t i = 0; i < d; i++) {
            double u = (double)(sl_test_rand(&seed) >> 11) / 9007199254740992.0;
            if (density >= 1.0 || u < density)
                s.idx[t][n++] = (uint32_t)i;
        }
        fill_values(&s, t, n, seed);
    }
    return s;
}

static void free_sparse(sparse_set *s)
{
    for (size_t t = 0; t < s->nt; t++) {
        free(s->idx[t]);
        free(s->val[t]);
        free(s->recon[t]);
    }
    free(s->st);
    free(s->idx);
    free(s->val);
    free(s->recon);
}

static void roundtrip_body(const sl_layout *l, sparse_set *s, sl_value_mode vm, sl_pos_mode pm,
                           int flat)
{
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 17, 3, 0};
    sl_encode_params p;
    sl_update *u = NULL;
    void *frame;
    size_t len;
    float *dst, *expect;
    size_t d = (size_t)sl_layout_params(l);

    sl_encode_params_default(&p);
    p.values = vm;
    p.positions = pm;
    p.seed = 1234;
    p.flat = flat;
    assert_int_equal(sl_frame_encode_update(l, &h, s->st, &p, s->recon, &frame, &len), SL_OK);
    assert_int_equal(sl_frame_decode_update(l, frame, len, NULL, &u), SL_OK);
    assert_int_equal(u->header.flags, flat ? SL_FRAME_FLAG_FLAT : 0);
    assert_int_equal(u->header.base_version, 17);
    assert_int_equal(u->header.round, 3);
    assert_true(u->header.layout_hash == sl_layout_hash(l));
    assert_int_equal(u->tensors, s->nt);
    for (size_t t = 0; t < s->nt; t++) {
        assert_int_equal(u->n[t], s->st[t].n);
        if (u->n[t] == 0)
            continue;
        assert_memory_equal(u->idx[t], s->idx[t], u->n[t] * sizeof(uint32_t));
        /* recon is exactly what the decoder gives */
        assert_memory_equal(u->val[t], s->recon[t], u->n[t] * sizeof(float));
        if (vm == SL_VALUE_FP32)
            assert_memory_equal(u->val[t], s->val[t], u->n[t] * sizeof(float));
        assert_int_equal(u->modes[t], vm);
        if (pm != SL_POS_AUTO)
            assert_int_equal(u->pos_modes[t], pm);
    }
    /* decode-accumulate == decode + the same float arithmetic by hand */
    dst = malloc(d * sizeof *dst);
    expect = malloc(d * sizeof *expect);
    sl_test_gauss(dst, d, 77, 1.0f);
    memcpy(expect, dst, d * sizeof *dst);
    for (size_t t = 0; t < s->nt; t++) {
        size_t off = (size_t)sl_layout_tensor(l, t)->offset;
        for (size_t j = 0; j < u->n[t]; j++)
            expect[off + u->idx[t][j]] += 0.25f * u->val[t][j];
    }
    assert_int_equal(sl_frame_accumulate_update(l, frame, len, NULL, 0.25f, dst), SL_OK);
    assert_memory_equal(dst, expect, d * sizeof *dst);
    {
        /* the double accumulator: the same values, added in double */
        double *acc = calloc(d, sizeof *acc), *want = calloc(d, sizeof *want);
        for (size_t t = 0; t < s->nt; t++) {
            size_t off = (size_t)sl_layout_tensor(l, t)->offset;
            for (size_t j = 0; j < u->n[t]; j++)
                want[off + u->idx[t][j]] += 0.3 * (double)u->val[t][j];
        }
        assert_int_equal(sl_frame_accumulate_update_f64(l, frame, len, NULL, 0.3, acc), SL_OK);
        assert_memory_equal(acc, want, d * sizeof *acc);
        free(acc);
        free(want);
    }
    sl_update_free(u);
    free(dst);
    free(expect);
    free(frame);
}

/* Both bodies: each decodes to what the encoder says it reconstructs, and
 * the two reconstruct the same update (per-tensor quantization in both). */
static void roundtrip(const sl_layout *l, sparse_set *s, sl_value_mode vm, sl_pos_mode pm)
{
    size_t nt = s->nt;
    float **keep = calloc(nt ? nt : 1, sizeof *keep);
    roundtrip_body(l, s, vm, pm, 0);
    for (size_t t = 0; t < nt; t++) {
        keep[t] = malloc((s->st[t].n ? s->st[t].n : 1) * sizeof(float));
        memcpy(keep[t], s->recon[t], s->st[t].n * sizeof(float));
    }
    roundtrip_body(l, s, vm, pm, 1);
    for (size_t t = 0; t < nt; t++) {
        assert_memory_equal(keep[t], s->recon[t], s->st[t].n * sizeof(float));
        free(keep[t]);
    }
    free(keep);
}

static void test_roundtrip_all_modes(void **state)
{
    sl_layout *l = sl_test_layout();
    static const double densities[] = {0.001, 0.01, 0.1, 0.6};
    (void)state;
    for (size_t di = 0; di < 4; di++) {
        sparse_set s = make_sparse(l, densities[di], 100 + di);
        for (int vm = SL_VALUE_FP32; vm <= SL_VALUE_SIGN; vm++) {
            roundtrip(l, &s, (sl_value_mode)vm, SL_POS_AUTO);
            roundtrip(l, &s, (sl_value_mode)vm, SL_POS_RICE);
            roundtrip(l, &s, (sl_value_mode)vm, SL_POS_BITMAP);
            roundtrip(l, &s, (sl_value_mode)vm, SL_POS_ADAPTIVE);
        }
        free_sparse(&s);
    }
    {
        sparse_set s = make_sparse(l, 1.0, 9); /* every element: DENSE positions */
        roundtrip(l, &s, SL_VALUE_FP32, SL_POS_DENSE);
        roundtrip(l, &s, SL_VALUE_INT8, SL_POS_AUTO);
        free_sparse(&s);
    }
    sl_layout_free(l);
}

static void test_empty_update(void **state)
{
    sl_layout *l = sl_test_layout();
    sparse_set s = make_sparse(l, 0.0, 1);
    (void)state;
    for (size_t t = 0; t < s.nt; t++)
        s.st[t].n = 0;
    roundtrip(l, &s, SL_VALUE_TERNARY, SL_POS_AUTO);
    free_sparse(&s);
    sl_layout_free(l);
}

static void test_encoder_rejections(void **state)
{
    sl_layout *l = sl_test_layout();
    sparse_set s = make_sparse(l, 0.05, 3);
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 0, 0, 0};
    void *frame = (void *)0x1;
    size_t len = 5;
    uint32_t saved;
    (void)state;
    /* unsorted indices */
    saved = s.idx[10][1];
    s.idx[10][1] = s.idx[10][0];
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, NULL, NULL, &frame, &len), SL_EINVAL);
    s.idx[10][1] = saved;
    /* index out of range */
    saved = s.idx[1][s.st[1].n - 1];
    s.idx[1][s.st[1].n - 1] = 6;
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, NULL, NULL, &frame, &len), SL_EINVAL);
    s.idx[1][s.st[1].n - 1] = saved;
    /* flat: an index past its tensor (it would land in the next tensor), unsorted */
    {
        sl_encode_params p;
        sl_encode_params_default(&p);
        p.flat = 1;
        saved = s.idx[1][s.st[1].n - 1];
        s.idx[1][s.st[1].n - 1] = (uint32_t)sl_layout_tensor(l, 1)->count;
        assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, &frame, &len), SL_EINVAL);
        s.idx[1][s.st[1].n - 1] = saved;
        saved = s.idx[10][1];
        s.idx[10][1] = s.idx[10][0];
        assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, &frame, &len), SL_EINVAL);
        s.idx[10][1] = saved;
    }
    /* non-finite value */
    s.val[10][3] = INFINITY;
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, NULL, NULL, &frame, &len), SL_ENONFINITE);
    assert_ptr_equal(frame, (void *)0x1);
    assert_int_equal(len, 5);
    free_sparse(&s);
    sl_layout_free(l);
}

static uint8_t *encode(const sl_layout *l, sparse_set *s, sl_value_mode vm, int flat, size_t *len)
{
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 2, 0};
    sl_encode_params p;
    void *frame;
    sl_encode_params_default(&p);
    p.values = vm;
    p.flat = flat;
    assert_int_equal(sl_frame_encode_update(l, &h, s->st, &p, NULL, &frame, len), SL_OK);
    return frame;
}

/* Whatever the bytes, decoding returns a status, and dst changes only on success. */
static void test_hostile_frames(void **state)
{
    sl_layout *l = sl_test_layout(), *other = NULL;
    sparse_set s = make_sparse(l, 0.02, 4);
    size_t d = (size_t)sl_layout_params(l), len;
    float *dst = calloc(d, sizeof *dst);
    uint64_t seed = 2024;
    (void)state;
    assert_int_equal(sl_layout_parse("w 10\n", 5, &other), SL_OK);
    for (int m = 0; m < 2 * (SL_VALUE_SIGN + 1); m++) {
        sl_value_mode vm = (sl_value_mode)(m % (SL_VALUE_SIGN + 1));
        uint8_t *frame = encode(l, &s, vm, m > SL_VALUE_SIGN, &len);
        uint8_t *copy = malloc(len + 1);
        sl_update *u;
        /* every truncation */
        for (size_t cut = 0; cut < len; cut++)
            assert_int_not_equal(sl_frame_accumulate_update(l, frame, cut, NULL, 1.0f, dst), SL_OK);
        /* a trailing byte breaks the CRC position; with the CRC redone it is extra data */
        memcpy(copy, frame, len);
        copy[len] = 0;
        assert_int_not_equal(sl_frame_decode_update(l, copy, len + 1, NULL, &u), SL_OK);
        /* random corruption with a valid CRC: never a crash, dst untouched on error */
        for (int trial = 0; trial < 300; trial++) {
            size_t pos = 12 + sl_test_rand(&seed) % (len - 16);
            int rc;
            memcpy(copy, frame, len);
            copy[pos] ^= (uint8_t)(1 + sl_test_rand(&seed) % 255);
            sl_test_fix_crc(copy, len);
            rc = sl_frame_accumulate_update(l, copy, len, NULL, 1.0f, dst);
            if (rc != SL_OK) {
                for (size_t i = 0; i < d; i += 97)
                    assert_true(dst[i] == 0.0f);
            } else {
                memset(dst, 0, d * sizeof *dst); /* a value byte changed: still valid */
            }
        }
        assert_int_equal(sl_frame_decode_update(other, frame, len, NULL, &u), SL_ELAYOUT);
        {
            sl_decode_limits small = {len - 1, 0}, out_small = {0, 64};
            assert_int_equal(sl_frame_decode_update(l, frame, len, &small, &u), SL_ETOOBIG);
            assert_int_equal(sl_frame_decode_update(l, frame, len, &out_small, &u), SL_ETOOBIG);
        }
        free(copy);
        free(frame);
    }
    free(dst);
    free_sparse(&s);
    sl_layout_free(l);
    sl_layout_free(other);
}

/*
 * Targeted edits of the tensor table (CRC recomputed): the header is
 * 4+1+1+2+8 bytes, then varints base (1) and round (2: one byte each here),
 * then the tensor count and the first tensor's entry.
 */
static void test_table_rejections(void **state)
{
    const sl_support *sup = NULL;
    sl_layout *l = NULL;
    float v[3] = {0.5f, -0.25f, 1.0f};
    uint32_t idx[3] = {1, 4, 9};
    sl_sparse_tensor st = {3, idx, v};
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 2, 0};
    sl_update *u;
    uint8_t *frame, *copy;
    size_t len;
    const size_t table = 18; /* offset of the tensor count */
    (void)state;
    assert_int_equal(sl_layout_parse("w 10\n", 5, &l), SL_OK);
    assert_int_equal(sl_frame_encode_update(l, &h, &st, NULL, NULL, (void **)&frame, &len), SL_OK);
    assert_int_equal(frame[table], 1);     /* one tensor */
    assert_int_equal(frame[table + 1], 3); /* n = 3 */
    copy = malloc(len + 8);
    EDIT(table, 2, SL_ELAYOUT);          /* tensor count */
    EDIT(table + 1, 11, SL_ECOUNT);      /* n > tensor size */
    EDIT(table + 2, 0, SL_ECORRUPT);     /* position mode 0 (AUTO) is never written */
    EDIT(table + 2, 9, SL_ECORRUPT);     /* unknown position mode */
    EDIT(table + 4, 6, SL_ECORRUPT);     /* unknown value mode */
    EDIT(table + 5, 120, SL_ETRUNCATED); /* position section larger than the body */
    EDIT(6, 2, SL_ECORRUPT);             /* an unknown flag */
    EDIT(7, 1, SL_ECORRUPT);             /* an unknown flag (high byte) */
    EDIT(5, SL_FRAME_MODEL, SL_ELAYOUT); /* a model frame is not an update */
    /* sections shorter than the body: trailing garbage before the CRC */
    memcpy(copy, frame, len - 4);
    copy[len - 4] = 0xAA;
    memcpy(copy + len - 3, frame + len - 4, 4);
    sl_test_fix_crc(copy, len + 1);
    assert_int_equal(sl_frame_decode_update(l, copy, len + 1, NULL, &u), SL_ECORRUPT);
    free(copy);
    free(frame);
    sl_layout_free(l);
}

/*
 * Targeted edits of a flat body (CRC recomputed): layout "w 10", "b 6"
 * (d = 16); w sends {1, 4, 9}, b sends {2}. After the 18 bytes of header and
 * varints: n, position coding, Rice parameter, value mode, position bytes,
 * the positions, then per tensor a value size and section.
 */
static void test_flat_rejections(void **state)
{
    sl_layout *l = NULL;
    float v[3] = {0.5f, -0.25f, 1.0f}, bv[1] = {2.0f};
    uint32_t idx[3] = {1, 4, 9}, bidx[1] = {2};
    sl_sparse_tensor st[2] = {{3, idx, v}, {1, bidx, bv}};
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 1, 2, 0};
    sl_encode_params p;
    sl_update *u;
    uint8_t *frame, *copy, *model;
    size_t len, mlen, pos_bytes, first_val;
    const size_t body = 18;
    const sl_support *sup = NULL;
    float params[16] = {0};
    (void)state;
    assert_int_equal(sl_layout_parse("w 10\nb 6\n", 9, &l), SL_OK);
    sl_encode_params_default(&p);
    p.flat = 1;
    assert_int_equal(sl_frame_encode_update(l, &h, st, &p, NULL, (void **)&frame, &len), SL_OK);
    assert_int_equal(frame[6], SL_FRAME_FLAG_FLAT);
    assert_int_equal(frame[body], 4); /* n over the whole model */
    pos_bytes = frame[body + 4];
    first_val = body + 5 + pos_bytes; /* w's value size */
    assert_int_equal(frame[first_val], 13);
    assert_int_equal(sl_frame_decode_update(l, frame, len, NULL, &u), SL_OK);
    assert_int_equal(u->n[0], 3);
    assert_int_equal(u->n[1], 1);
    assert_int_equal(u->idx[1][0], 2);
    assert_true(u->val[1][0] == 2.0f);
    sl_update_free(u);
    copy = malloc(len + 8);
    EDIT(body, 17, SL_ECOUNT);           /* n > d */
    EDIT(body + 1, 0, SL_ECORRUPT);      /* position mode 0 (AUTO) is never written */
    EDIT(body + 1, 9, SL_ECORRUPT);      /* unknown position mode */
    EDIT(body + 3, 6, SL_ECORRUPT);      /* unknown value mode */
    EDIT(body + 4, 120, SL_ETRUNCATED);  /* position section larger than the body */
    EDIT(first_val, 100, SL_ETRUNCATED); /* a value section past the body */
    EDIT(6, 5, SL_ECORRUPT);             /* an unknown flag beside FLAT */
    EDIT(6, 2, SL_ECORRUPT);             /* SPLIT without FLAT */
    EDIT(6, 3, SL_ECORRUPT); /* SPLIT: the byte after the round is ref_version 4, not < base 1 */
    EDIT(6, 0, SL_ELAYOUT);  /* the flat body read as a tensor table: n 4 is not 2 tensors */
    /* fewer or more positions than n says: the position section does not decode */
    for (int dn = -1; dn <= 1; dn += 2) {
        memcpy(copy, frame, len);
        copy[body] = (uint8_t)(4 + dn);
        sl_test_fix_crc(copy, len);
        u = NULL;
        assert_int_not_equal(sl_frame_decode_update(l, copy, len, NULL, &u), SL_OK);
        assert_null(u);
    }
    /* trailing garbage before the CRC */
    memcpy(copy, frame, len - 4);
    copy[len - 4] = 0xAA;
    memcpy(copy + len - 3, frame + len - 4, 4);
    sl_test_fix_crc(copy, len + 1);
    assert_int_equal(sl_frame_decode_update(l, copy, len + 1, NULL, &u), SL_ECORRUPT);
    /* the decode limits hold before anything is allocated */
    {
        sl_decode_limits out_small = {0, 16};
        assert_int_equal(sl_frame_decode_update(l, frame, len, &out_small, &u), SL_ETOOBIG);
    }
    /* FLAT is a flag of updates only: a model frame carrying it is refused */
    assert_int_equal(sl_frame_encode_model(l, params, 3, 1, (void **)&model, &mlen), SL_OK);
    model[6] = SL_FRAME_FLAG_FLAT;
    sl_test_fix_crc(model, mlen);
    {
        sl_frame_header mh;
        assert_int_equal(sl_frame_peek_header(model, mlen, &mh), SL_ECORRUPT);
        assert_int_equal(sl_frame_decode_model(l, model, mlen, NULL, 0, params), SL_ECORRUPT);
    }
    /* an empty flat update is n = 0 and nothing else */
    {
        sl_sparse_tensor none[2] = {{0, NULL, NULL}, {0, NULL, NULL}};
        uint8_t *empty;
        size_t elen;
        assert_int_equal(sl_frame_encode_update(l, &h, none, &p, NULL, (void **)&empty, &elen),
                         SL_OK);
        assert_int_equal(elen, body + 1 + 4);
        assert_int_equal(empty[body], 0);
        assert_int_equal(sl_frame_decode_update(l, empty, elen, NULL, &u), SL_OK);
        assert_int_equal(u->n[0] + u->n[1], 0);
        sl_update_free(u);
        free(empty);
    }
    free(model);
    free(copy);
    free(frame);
    sl_layout_free(l);
}

/* Positions of a flat update for @l: @k of them, @share inside @bits' support (1 in 20 of
 * the coordinates), the others outside; values random. */
static sparse_set split_content(const sl_layout *l, const uint8_t *bits, size_t k, double share,
                                uint64_t seed)
{
    sparse_set s = make_sparse(l, 0.0, seed); /* empty tensors, arrays of full size */
    uint64_t d = sl_layout_params(l);
    uint8_t *pick = calloc((size_t)d, 1);
    size_t got = 0;
    while (got < k) {
        /* inside with probability @share: draw coordinates until one is on that side */
        double u = (double)(sl_test_rand(&seed) >> 11) / 9007199254740992.0;
        int want = u < share;
        uint64_t j;
        do
            j = sl_test_rand(&seed) % d;
        while (((bits[j >> 3] >> (j & 7)) & 1) != want);
        if (pick[j])
            continue;
        pick[j] = 1;
        got++;
    }
    for (size_t t = 0; t < s.nt; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(l, t);
        size_t n = 0;
        for (uint64_t i = 0; i < td->count; i++)
            if (pick[td->offset + i])
                s.idx[t][n++] = (uint32_t)i;
        fill_values(&s, t, n, seed);
    }
    free(pick);
    return s;
}

/* Split frames: smaller where the positions gather in the support, the same update as the
 * plain flat frame, refused without their support or with another, and unsplit back to the
 * plain frame's bytes. */
static void test_split(void **state)
{
    sl_layout *l = sl_test_layout();
    uint64_t d = sl_layout_params(l), seed = 99;
    size_t blen = (size_t)((d + 7) / 8), len, plen, ulen;
    uint8_t *bits = calloc(blen, 1), *frame, *plain, *un, *copy;
    float *a = malloc((size_t)d * sizeof *a), *b = malloc((size_t)d * sizeof *b);
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 17, 3, 0}, ph;
    sl_encode_params p;
    sl_support *sup = NULL, *other = NULL, *loaded = NULL;
    sl_update *u = NULL, *pu = NULL;
    sparse_set s;
    uint64_t count = 0;
    (void)state;
    /* the support of a change to one coordinate in 20, made by two models */
    for (uint64_t j = 0; j < d; j++) {
        a[j] = (float)j;
        b[j] = sl_test_rand(&seed) % 20 == 0 ? (float)j + 0.5f : (float)j;
        if (a[j] != b[j]) {
            bits[j >> 3] |= (uint8_t)(1u << (j & 7));
            count++;
        }
    }
    assert_int_equal(sl_support_diff(l, a, b, &sup), SL_OK);
    assert_int_equal(sl_support_count(sup), count);
    {
        size_t n;
        const uint8_t *got = sl_support_bits(sup, &n);
        assert_int_equal(n, blen);
        assert_memory_equal(got, bits, blen);
    }
    assert_int_equal(sl_support_load(l, bits, blen, &loaded), SL_OK);
    assert_int_equal(sl_support_count(loaded), count);
    assert_int_equal(sl_support_crc(loaded), sl_support_crc(sup));
    assert_int_equal(sl_support_load(l, bits, blen - 1, &other), SL_ECORRUPT);
    if (d % 8 != 0) { /* a padding bit set */
        bits[blen - 1] |= 0x80;
        assert_int_equal(sl_support_load(l, bits, blen, &other), SL_ECORRUPT);
        bits[blen - 1] &= 0x7f;
    }
    /* -0 against 0 changes the bits: it is in the support */
    b[0] = -0.0f;
    a[0] = 0.0f;
    assert_int_equal(sl_support_diff(l, a, b, &other), SL_OK);
    assert_int_equal(sl_support_bits(other, NULL)[0] & 1, 1);
    sl_support_free(other);
    other = NULL;

    /* three quarters of 1% of the positions in the support, as after a sparse download */
    s = split_content(l, bits, (size_t)(d / 100), 0.75, 7);
    sl_encode_params_default(&p);
    p.flat = 1;
    p.values = SL_VALUE_TERNARY;
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, (void **)&plain, &plen), SL_OK);
    p.split = sup;
    p.ref_version = 5;
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, (void **)&frame, &len), SL_OK);
    assert_int_equal(frame[6], SL_FRAME_FLAG_FLAT | SL_FRAME_FLAG_SPLIT);
    assert_true(len < plen * 0.9); /* coded within a part of 1 in 20 */
    assert_int_equal(sl_frame_peek_header(frame, len, &ph), SL_OK);
    assert_int_equal(ph.ref_version, 5);
    assert_int_equal(ph.base_version, 17);
    /* the same update as the plain frame, value for value */
    assert_int_equal(sl_frame_decode_update(l, plain, plen, NULL, &pu), SL_OK);
    assert_int_equal(sl_frame_decode_update_split(l, frame, len, NULL, loaded, &u), SL_OK);
    for (size_t t = 0; t < u->tensors; t++) {
        assert_int_equal(u->n[t], pu->n[t]);
        if (u->n[t] == 0)
            continue;
        assert_memory_equal(u->idx[t], pu->idx[t], u->n[t] * sizeof(uint32_t));
        assert_memory_equal(u->val[t], pu->val[t], u->n[t] * sizeof(float));
    }
    sl_update_free(u);
    u = NULL;
    /* unsplit: the plain frame, byte for byte */
    assert_int_equal(sl_frame_unsplit(l, frame, len, NULL, sup, (void **)&un, &ulen), SL_OK);
    assert_int_equal(ulen, plen);
    assert_memory_equal(un, plain, plen);
    free(un);
    assert_int_equal(sl_frame_unsplit(l, plain, plen, NULL, sup, (void **)&un, &ulen), SL_EINVAL);
    /* without the support, or with another one: refused, nothing decoded */
    assert_int_equal(sl_frame_decode_update(l, frame, len, NULL, &u), SL_ESUPPORT);
    assert_null(u);
    assert_int_equal(sl_frame_accumulate_update(l, frame, len, NULL, 1.0f, a), SL_ESUPPORT);
    bits[3] ^= 1; /* one coordinate more or less */
    assert_int_equal(sl_support_load(l, bits, blen, &other), SL_OK);
    assert_int_equal(sl_frame_decode_update_split(l, frame, len, NULL, other, &u), SL_ESUPPORT);
    assert_int_equal(sl_frame_unsplit(l, frame, len, NULL, other, (void **)&un, &ulen),
                     SL_ESUPPORT);
    assert_null(u);
    /* a plain frame ignores the support it is given */
    assert_int_equal(sl_frame_decode_update_split(l, plain, plen, NULL, other, &u), SL_OK);
    sl_update_free(u);
    u = NULL;

    /* hostile split bodies: the offsets after the envelope (ref 5 is one byte) */
    copy = malloc(len);
    {
        const size_t body = 19; /* 16 fixed, base 17, round 3, ref 5 */
        size_t nlen = 1, at;
        for (uint64_t v = d / 100; v >= 128; v >>= 7)
            nlen++;
        EDIT(18, 17, SL_ECORRUPT);               /* ref_version = base_version */
        EDIT(18, 0, SL_ECORRUPT);                /* ref_version 0 */
        EDIT(body, copy[body] ^ 1, SL_ESUPPORT); /* the support's CRC */
        EDIT(body + 3, copy[body + 3] ^ 1, SL_ESUPPORT);
        at = body + 4 + nlen; /* the value mode */
        EDIT(at, 6, SL_ECORRUPT);
        EDIT(at + 1, 0xff, SL_ETRUNCATED); /* n_in: a varint that does not end */
        EDIT(at + 2, 0x7f, SL_ECOUNT);     /* n_in above n (its second varint byte) */
        EDIT(at + 3, 0x07, SL_ECORRUPT);   /* the inside part's coding: 7 */
        EDIT(at + 3, 0x00, SL_ECORRUPT);   /* 0 (AUTO) is never written */
    }
    /* one position: the split's digest costs more than it saves, the plain frame */
    {
        sl_sparse_tensor none[11];
        uint32_t one = 0;
        float v = 1.0f;
        memset(none, 0, sizeof none);
        none[10].n = 1; /* one position in "big": n 1 */
        none[10].idx = &one;
        none[10].val = &v;
        free(copy);
        free(frame);
        p.values = SL_VALUE_FP32;
        assert_int_equal(sl_frame_encode_update(l, &h, none, &p, NULL, (void **)&frame, &len),
                         SL_OK);
        copy = malloc(len);
        /* a single position never splits smaller: the plain frame */
        assert_int_equal(frame[6], SL_FRAME_FLAG_FLAT);
    }
    /* the encoder's refusals */
    p.ref_version = 17; /* not before the base */
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, (void **)&un, &ulen), SL_EINVAL);
    p.ref_version = 0;
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, (void **)&un, &ulen), SL_EINVAL);
    /* positions that ignore the support: the plain frame */
    free_sparse(&s);
    s = make_sparse(l, 0.01, 5);
    p.ref_version = 5;
    free(frame);
    assert_int_equal(sl_frame_encode_update(l, &h, s.st, &p, NULL, (void **)&frame, &len), SL_OK);
    assert_int_equal(frame[6], SL_FRAME_FLAG_FLAT);
    free_sparse(&s);
    free(copy);
    free(frame);
    free(plain);
    sl_update_free(pu);
    sl_support_free(sup);
    sl_support_free(other);
    sl_support_free(loaded);
    free(bits);
    free(a);
    free(b);
    sl_layout_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_modes),
        cmocka_unit_test(test_empty_update),
        cmocka_unit_test(test_encoder_rejections),
        cmocka_unit_test(test_hostile_frames),
        cmocka_unit_test(test_table_rejections),
        cmocka_unit_test(test_flat_rejections),
        cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
