/*
 * make_corpus - writes the fuzz seed corpus: valid frames of every kind and
 * mode, plus hostile ones (truncated, bit-flipped with a fixed CRC, counts
 * larger than the tensor, zstd bombs). Usage: make_corpus <corpus-dir>
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include "fuzz_common.h"

static const char *root;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        abort();
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        abort();
}

static void fix_crc(uint8_t *frame, size_t len)
{
    uLong crc = crc32(crc32(0L, Z_NULL, 0), frame, (uInt)(len - 4));
    for (int i = 0; i < 4; i++)
        frame[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Variants of one valid frame: itself, 3 truncations, 4 bit flips with a good CRC. */
static void variants(const char *target, const char *stem, const uint8_t *frame, size_t len)
{
    char name[256];
    uint8_t *copy = malloc(len);
    snprintf(name, sizeof name, "%s", stem);
    put(target, name, frame, len);
    for (int i = 0; i < 3; i++) {
        size_t cut = i == 0 ? len - 1 : i == 1 ? len / 2 : 17;
        snprintf(name, sizeof name, "%s-trunc%zu", stem, cut);
        put(target, name, frame, cut < len ? cut : len);
    }
    for (int i = 0; i < 4; i++) {
        size_t pos = 16 + next() % (len > 20 ? len - 20 : 1);
        memcpy(copy, frame, len);
        copy[pos] ^= (uint8_t)(1u << (next() % 8));
        fix_crc(copy, len);
        snprintf(name, sizeof name, "%s-flip%zu", stem, pos);
        put(target, name, copy, len);
    }
    free(copy);
}

/* A zstd frame that declares (and would produce) @size zero bytes. */
static uint8_t *zstd_bomb(size_t size, size_t *len)
{
    uint8_t *zeros = calloc(size, 1);
    size_t cap = ZSTD_compressBound(size);
    uint8_t *out = malloc(cap);
    *len = ZSTD_compress(out, cap, zeros, size, 19);
    free(zeros);
    if (ZSTD_isError(*len))
        abort();
    return out;
}

/* An update's content for the fuzz layout's four tensors: one element in ten (all of a
 * tensor under ten), or with @split one in three of the fuzz support's coordinates (every
 * third flat index) and one in forty of the others. */
static void content(const sl_layout *l, int split, uint32_t idx[4][1000], float val[4][1000],
                    sl_sparse_tensor *st)
{
    for (size_t t = 0, off = 0; t < 4; off += (size_t)sl_layout_tensor(l, t)->count, t++) {
        const sl_tensor_desc *td = sl_layout_tensor(l, t);
        size_t n = 0;
        for (size_t i = 0; i < td->count; i++)
            if (split ? next() % ((off + i) % 3 == 0 ? 3 : 40) == 0
                      : next() % 10 == 0 || td->count < 10) {
                idx[t][n] = (uint32_t)i;
                val[t][n++] = (float)((int64_t)(next() % 2001) - 1000) * 1e-4f + 1e-5f;
            }
        st[t].n = n;
        st[t].idx = idx[t];
        st[t].val = val[t];
    }
}

/* The update @st in every value mode and position coding: per tensor, with a hostile count,
 * and flat; or with @split, split against the fuzz support wherever that is smaller (always
 * with AUTO positions). */
static void all_modes(const sl_layout *l, const sl_sparse_tensor *st, int split)
{
    static const char *const pos_names[] = {"auto", "rice", "bitmap", "dense", "adaptive"};
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, 3, 7, 0};
    for (int vm = SL_VALUE_FP32; vm <= SL_VALUE_SIGN; vm++) {
        for (int pm = SL_POS_AUTO; pm <= SL_POS_ADAPTIVE; pm++) {
            const char *vname = sl_value_mode_name((sl_value_mode)vm);
            sl_encode_params p;
            uint8_t *frame;
            size_t len;
            char stem[64];
            if (pm == SL_POS_DENSE)
                continue;
            sl_encode_params_default(&p);
            p.values = (sl_value_mode)vm;
            p.positions = (sl_pos_mode)pm;
            if (split) {
                p.flat = 1;
                p.split = sl_fuzz_support();
                p.ref_version = 2;
                if (sl_frame_encode_update(l, &h, st, &p, NULL, (void **)&frame, &len) != SL_OK ||
                    (pm == SL_POS_AUTO && !(frame[6] & SL_FRAME_FLAG_SPLIT)))
                    abort();
                if (frame[6] & SL_FRAME_FLAG_SPLIT) { /* a bitmap of two parts is no smaller */
                    snprintf(stem, sizeof stem, "update-split-%s-%s", vname, pos_names[pm]);
                    variants("fuzz_update", stem, frame, len);
                }
                free(frame);
                continue;
            }
            if (sl_frame_encode_update(l, &h, st, &p, NULL, (void **)&frame, &len) != SL_OK)
                abort();
            snprintf(stem, sizeof stem, "update-%s-%s", vname, pos_names[pm]);
            variants("fuzz_update", stem, frame, len);
            if (vm == SL_VALUE_FP32 && pm == SL_POS_AUTO) {
                /* oversized count: tensor 0 (36 elements) claims 127 */
                uint8_t *copy = malloc(len);
                memcpy(copy, frame, len);
                /* header 16 + base varint + round varint, then tensor count, then n0 */
                if (copy[18] != 4 || copy[19] != st[0].n)
                    abort();
                copy[19] = 0x7f;
                fix_crc(copy, len);
                put("fuzz_update", "update-oversized-count", copy, len);
                free(copy);
            }
            free(frame);
            /* the flat body of the same update */
            p.flat = 1;
            if (sl_frame_encode_update(l, &h, st, &p, NULL, (void **)&frame, &len) != SL_OK)
                abort();
            snprintf(stem, sizeof stem, "update-flat-%s-%s", vname, pos_names[pm]);
            variants("fuzz_update", stem, frame, len);
            free(frame);
        }
    }
}

/* Update frames, or with @split the split ones: written after every other kind, so that the
 * others' bytes (and the draws of next() they took) stay as they were before split frames. */
static void update_frames(const sl_layout *l, int split)
{
    uint32_t idx[4][1000];
    float val[4][1000];
    sl_sparse_tensor st[4];
    content(l, split, idx, val, st);
    all_modes(l, st, split);
}

/* A model frame whose zstd body declares 64 MiB for a 4.2 KB layout. */
static void model_frames(const sl_layout *l)
{
    size_t n = (size_t)sl_layout_params(l), len, blen;
    float *w = malloc(n * sizeof *w), *base = malloc(n * sizeof *base);
    uint8_t *frame, *bomb, *bad;
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)((int64_t)(next() % 20001) - 10000) * 1e-5f;
        base[i] = (float)i * 0.001f;
    }
    if (sl_frame_encode_model(l, w, 9, 3, (void **)&frame, &len) != SL_OK)
        abort();
    variants("fuzz_model", "model", frame, len);
    free(frame);
    if (sl_frame_encode_model_delta(l, w, base, 4, 3, (void **)&frame, &len) != SL_OK)
        abort();
    variants("fuzz_model", "delta", frame, len);
    {
        /* the sparse delta body (coding 2): 3% of the base's parameters changed */
        float *moved = malloc(n * sizeof *moved);
        uint8_t *sparse;
        size_t slen;
        memcpy(moved, base, n * sizeof *moved);
        for (size_t j = 0; j < n / 33; j++)
            moved[(j * 37) % n] += 0.01f; /* not next(): the other files stay as they are */
        if (sl_frame_encode_model_delta_sparse(l, moved, base, 4, 3, (void **)&sparse, &slen) !=
            SL_OK)
            abort();
        variants("fuzz_model", "delta-sparse", sparse, slen);
        free(sparse);
        free(moved);
    }
    /* bomb: keep the header (16 + 1 + 1 bytes), n varint (2), coding 1 = zstd */
    bomb = zstd_bomb(64u << 20, &blen);
    bad = malloc(21 + blen + 4);
    memcpy(bad, frame, 21);
    bad[5] = SL_FRAME_MODEL;
    bad[20] = 1;
    memcpy(bad + 21, bomb, blen);
    fix_crc(bad, 21 + blen + 4);
    put("fuzz_model", "model-zstd-bomb", bad, 21 + blen + 4);
    put("fuzz_update", "update-zstd-bomb", bad, 21 + blen + 4);
    free(bad);
    free(bomb);
    free(frame);
    free(w);
    free(base);
    put("fuzz_model", "empty", "", 0);
    put("fuzz_model", "magic-only", "SLFR", 4);
    put("fuzz_update", "empty", "", 0);
}

static void layouts(void)
{
    static const char *const texts[] = {
        SL_FUZZ_LAYOUT,
        "c1.weight 6 1 5 5\nc1.bias 6\nc2.weight 16 6 5 5\nc2.bias 16\nf1.weight 120 256\n",
        "# comment\n\nw 1\n",
        "w 0\n",
        "w 2 2 2 2 2 2 2\n",
        "w 99999999999999999999\n",
        "dup 1\ndup 2\n",
        "name-with space 3\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "layout-%zu", i);
        put("fuzz_layout", name, texts[i], strlen(texts[i]));
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus <corpus-dir>\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return 1;
    update_frames(sl_fuzz_layout(), 0);
    model_frames(sl_fuzz_layout());
    layouts();
    update_frames(sl_fuzz_layout(), 1);
    return 0;
}
