/*
 * bench_positions.c - `starling bench positions --store FILE`: what the
 * positions of a real run's sparse updates cost as sent, against what they
 * would cost if the coordinator and the device coded them knowing something
 * both hold.
 *
 * A sparse update names k of the model's d coordinates. The frames code the
 * positions with the adaptive range coder (codecs/FORMAT.md), which learns
 * the gaps' distribution. Its figure is set beside ideal costs (bits a
 * position, no coder's overhead) of coding the same set as subsets of a
 * split of the coordinates that both ends know before the update is sent:
 *
 *   uniform     log2 C(d, k): any k-subset alike
 *   tensors     the subset of each tensor, and the counts per tensor
 *   aggregate   the coordinates that the round's base model changed against
 *               the version before it (the last aggregate's support: what a
 *               device that held that version downloaded as a sparse delta),
 *               and the rest
 *   own         the coordinates the same device sent in its previous update
 *               in the store, and the rest
 *   both        tensors, each split by the last aggregate's support
 *   held        the coordinates that the round's base changed against the base of the
 *               device's previous update (the version it held: what it downloaded as a
 *               sparse delta, the last aggregate's support when it took part in the
 *               round before; a device's first update, downloaded whole, costs the
 *               uniform subset)
 *
 * A split into parts of sizes s_j holding a_j of the positions costs
 * sum_j log2 C(s_j, a_j) plus log2(k + 1) for each part's count after the
 * first. That is never more than log2 C(d, k) plus the counts (every term of
 * Vandermonde's sum C(d, k) = sum_a C(s, a) C(d - s, k - a) is at most the
 * sum), so a split saves what the positions' correlation with it is worth.
 * Rounds whose base is the first version (no aggregate before) are skipped.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "bench.h"
#include "codec_int.h" /* sl__pos_plan: the frames' coders, sizes only */
#include "starling/codec.h"

enum {
    POS_FRAME,
    POS_UNIFORM,
    POS_TENSORS,
    POS_AGG,
    POS_BOTH,
    POS_HELD,
    POS_HELD_CODED,
    POS_HELD_FLAT,
    POS_HELD_ORDER,
    POS_LAST_DL,
    POS_OWN,
    POS_KINDS
};

static const char *const pos_names[POS_KINDS] = {"the plain frames (adaptive coder)",
                                                 "uniform: log2 C(d, k)",
                                                 "split by tensor",
                                                 "split by the last aggregate's support",
                                                 "split by tensor and the last aggregate's support",
                                                 "split by the support of the delta it downloaded",
                                                 "  the same, each part by the frames' coders",
                                                 "  the same, flat: two sets over the model",
                                                 "  the same, one set, the part's positions first",
                                                 "  flat two sets, from its last selection's base",
                                                 "split by the device's previous update"};

typedef struct pos_totals {
    uint64_t rounds, updates, positions, in_agg, in_own, in_held, agg_size, held_size;
    uint64_t retired; /* updates skipped: retention took their bytes (the task's retain_last) */
    double bits[POS_KINDS];
} pos_totals;

typedef struct pos_ctx {
    const sl_layout *l;
    size_t d;
    uint8_t *agg;    /* [d] 1: the base model changed this coordinate against the version before */
    uint8_t *cur;    /* [d] the update's positions */
    uint32_t **prev; /* [devices] each device's previous positions, flat (NULL: none yet) */
    size_t *nprev;   /* [devices] how many */
    uint8_t *mark;   /* [d] scratch: one device's previous positions */
    uint8_t *seen;   /* [devices] a previous update is known */
    int64_t *held;   /* [devices] the base version of its previous update */
    int64_t *dl;     /* [devices] the base version of the last round that selected it (what it
                        last downloaded: a device that dropped out after the download holds a
                        newer version than its previous update's base) */
    uint8_t *dlmark; /* [d] the support of the delta from dl to this round's base */
    uint8_t *down;   /* [d] the support of the delta from held to this round's base */
    float *base;     /* [d] this round's base model */
    float *other;    /* [d] scratch: a held version */
    uint32_t *in;    /* [d] scratch: one tensor's positions inside the split's part, renumbered */
    uint32_t *out;   /* [d] and outside it */
    int64_t base_version;
    sqlite3_stmt *model;
    int64_t task;
    int64_t devices;
} pos_ctx;

static double log2_choose(double n, double k)
{
    if (k <= 0 || k >= n)
        return 0;
    return (lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)) / log(2.0);
}

/* The cost of coding @cur's k positions in [from, to) as subsets of the parts @mark splits
 * them into (NULL: one part), without the parts' counts. */
static double split_bits(const uint8_t *cur, const uint8_t *mark, size_t from, size_t to)
{
    size_t in_size = 0, in_k = 0, k = 0;
    for (size_t j = from; j < to; j++) {
        k += cur[j];
        if (mark != NULL && mark[j]) {
            in_size++;
            in_k += cur[j];
        }
    }
    return log2_choose((double)in_size, (double)in_k) +
           log2_choose((double)(to - from - in_size), (double)(k - in_k));
}

/* Bits the frames' coders (SL_POS_AUTO) spend on the positions of @cur in [from, to) coded
 * as two sets, those inside @mark's part and those outside, each renumbered within its part,
 * with the first set's count (a varint): the smaller of that and the positions coded whole,
 * with one bit to say which. */
static double split_coded_bits(pos_ctx *c, const uint8_t *mark, size_t from, size_t to)
{
    size_t nin = 0, nout = 0, rin = 0, rout = 0, bin = 0, bout = 0, ball = 0;
    sl_pos_mode chosen;
    uint8_t param;
    double split;
    for (size_t j = from; j < to; j++) {
        if (mark[j]) {
            if (c->cur[j])
                c->in[nin++] = (uint32_t)rin;
            rin++;
        } else {
            if (c->cur[j])
                c->out[nout++] = (uint32_t)rout;
            rout++;
        }
    }
    if (nin + nout == 0)
        return 0;
    if ((nin && sl__pos_plan(SL_POS_AUTO, c->in, nin, rin, &chosen, &param, &bin) != SL_OK) ||
        (nout && sl__pos_plan(SL_POS_AUTO, c->out, nout, rout, &chosen, &param, &bout) != SL_OK))
        abort();
    /* the positions whole, renumbered in the tensor */
    nout = 0;
    for (size_t j = from; j < to; j++)
        if (c->cur[j])
            c->out[nout++] = (uint32_t)(j - from);
    if (sl__pos_plan(SL_POS_AUTO, c->out, nout, to - from, &chosen, &param, &ball) != SL_OK)
        abort();
    split = 8.0 * (double)(bin + bout);
    for (size_t v = nin;; v >>= 7) { /* the count, a varint */
        split += 8.0;
        if (v < 128)
            break;
    }
    return 1.0 + (split < 8.0 * (double)ball ? split : 8.0 * (double)ball);
}

/* Bits the frames' coders spend on @cur's positions renumbered so that @mark's part comes
 * first: one ascending set over the model. */
static double order_coded_bits(pos_ctx *c, const uint8_t *mark)
{
    size_t n = 0, bytes = 0, in = 0, rin = 0, rout;
    sl_pos_mode chosen;
    uint8_t param;
    for (size_t j = 0; j < c->d; j++)
        in += mark[j];
    rout = in;
    for (size_t j = 0; j < c->d; j++) {
        if (mark[j]) {
            if (c->cur[j])
                c->in[n++] = (uint32_t)rin;
            rin++;
        }
    }
    for (size_t j = 0; j < c->d; j++) {
        if (!mark[j]) {
            if (c->cur[j])
                c->in[n++] = (uint32_t)rout;
            rout++;
        }
    }
    if (n == 0)
        return 0;
    if (sl__pos_plan(SL_POS_AUTO, c->in, n, c->d, &chosen, &param, &bytes) != SL_OK)
        abort();
    return 8.0 * (double)bytes;
}

static int read_model(sqlite3_stmt *st, int64_t task, int64_t version, const sl_layout *l,
                      float *out)
{
    int rc = SL_ENOENT;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, task);
    sqlite3_bind_int64(st, 2, version);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) > 0) /* else retired */
        rc = sl_frame_decode_model(l, sqlite3_column_blob(st, 0),
                                   (size_t)sqlite3_column_bytes(st, 0), NULL, 0, out);
    sqlite3_reset(st);
    return rc;
}

/* One update of a round whose base has an aggregate before it (@use: add to the totals). */
static int one_update(pos_ctx *c, int64_t device, const void *frame, size_t len, int use,
                      pos_totals *tot)
{
    sl_update *u = NULL;
    size_t k = 0, pos_bytes = 0, tensors = sl_layout_tensors(c->l);
    double lk;
    uint32_t *mine;
    int rc = sl_frame_decode_update(c->l, frame, len, NULL, &u);
    if (rc != SL_OK)
        return rc;
    if (device < 0 || device >= c->devices) {
        sl_update_free(u);
        return SL_ERANGE;
    }
    memset(c->cur, 0, c->d);
    for (size_t t = 0; t < u->tensors; t++) {
        const sl_tensor_desc *td = sl_layout_tensor(c->l, t);
        for (size_t i = 0; i < u->n[t]; i++)
            c->cur[td->offset + u->idx[t][i]] = 1;
        k += u->n[t];
        pos_bytes += u->pos_bytes[t];
    }
    for (size_t i = 0; i < c->nprev[device]; i++) /* its previous update, as a set */
        c->mark[c->prev[device][i]] = 1;
    if (use && k > 0) {
        size_t down = 0;
        int have = c->seen[device] && c->held[device] >= 1 && c->held[device] < c->base_version &&
                   read_model(c->model, c->task, c->held[device], c->l, c->other) == SL_OK;
        if (have)
            for (size_t j = 0; j < c->d; j++) {
                c->down[j] = memcmp(&c->base[j], &c->other[j], sizeof c->base[j]) != 0;
                down += c->down[j];
            }
        lk = log2((double)k + 1);
        tot->updates++;
        tot->positions += k;
        tot->bits[POS_FRAME] += 8.0 * (double)pos_bytes;
        tot->bits[POS_UNIFORM] += split_bits(c->cur, NULL, 0, c->d);
        tot->bits[POS_AGG] += split_bits(c->cur, c->agg, 0, c->d) + lk;
        if (c->seen[device])
            tot->bits[POS_OWN] += split_bits(c->cur, c->mark, 0, c->d) + lk;
        else /* no previous update: the uniform cost */
            tot->bits[POS_OWN] += split_bits(c->cur, NULL, 0, c->d);
        if (have) {
            tot->bits[POS_HELD] += split_bits(c->cur, c->down, 0, c->d) + lk;
            for (size_t t = 0; t < tensors; t++) {
                const sl_tensor_desc *td = sl_layout_tensor(c->l, t);
                tot->bits[POS_HELD_CODED] += split_coded_bits(c, c->down, (size_t)td->offset,
                                                              (size_t)(td->offset + td->count));
            }
            tot->bits[POS_HELD_FLAT] += split_coded_bits(c, c->down, 0, c->d);
            tot->bits[POS_HELD_ORDER] += order_coded_bits(c, c->down);
            if (c->dl[device] >= 1 && c->dl[device] < c->base_version &&
                read_model(c->model, c->task, c->dl[device], c->l, c->other) == SL_OK) {
                for (size_t j = 0; j < c->d; j++)
                    c->dlmark[j] = memcmp(&c->base[j], &c->other[j], sizeof c->base[j]) != 0;
                tot->bits[POS_LAST_DL] += split_coded_bits(c, c->dlmark, 0, c->d);
            } else {
                tot->bits[POS_LAST_DL] += 8.0 * (double)pos_bytes;
            }
            tot->held_size += down;
            for (size_t j = 0; j < c->d; j++)
                tot->in_held += c->cur[j] & c->down[j];
        } else {
            tot->bits[POS_HELD] += split_bits(c->cur, NULL, 0, c->d);
            tot->bits[POS_HELD_CODED] += 8.0 * (double)pos_bytes;
            tot->bits[POS_HELD_FLAT] += 8.0 * (double)pos_bytes;
            tot->bits[POS_HELD_ORDER] += 8.0 * (double)pos_bytes;
            tot->bits[POS_LAST_DL] += 8.0 * (double)pos_bytes;
            tot->held_size += c->d; /* downloaded whole */
            tot->in_held += k;
        }
        for (size_t t = 0; t < tensors; t++) {
            const sl_tensor_desc *td = sl_layout_tensor(c->l, t);
            size_t to = (size_t)(td->offset + td->count);
            tot->bits[POS_TENSORS] += split_bits(c->cur, NULL, (size_t)td->offset, to);
            tot->bits[POS_BOTH] += split_bits(c->cur, c->agg, (size_t)td->offset, to) + lk;
        }
        tot->bits[POS_TENSORS] += (double)(tensors - 1) * lk;
        tot->bits[POS_BOTH] += (double)(tensors - 1) * lk;
        for (size_t j = 0; j < c->d; j++) {
            tot->in_agg += c->cur[j] & c->agg[j];
            tot->in_own += c->cur[j] & c->mark[j];
        }
    }
    for (size_t i = 0; i < c->nprev[device]; i++)
        c->mark[c->prev[device][i]] = 0;
    mine = realloc(c->prev[device], (k > 0 ? k : 1) * sizeof *mine);
    if (mine == NULL) {
        sl_update_free(u);
        return SL_ENOMEM;
    }
    c->prev[device] = mine;
    c->nprev[device] = 0;
    for (size_t j = 0; j < c->d; j++)
        if (c->cur[j])
            mine[c->nprev[device]++] = (uint32_t)j;
    c->seen[device] = 1;
    c->held[device] = c->base_version;
    sl_update_free(u);
    return SL_OK;
}

static int one_task(sqlite3 *db, int64_t task, const sl_layout *l, pos_totals *tot)
{
    sqlite3_stmt *rounds = NULL, *ups = NULL, *model = NULL, *maxdev = NULL, *sel = NULL;
    pos_ctx c;
    float *a = NULL, *b = NULL;
    int rc = SL_OK;
    memset(&c, 0, sizeof c);
    c.l = l;
    c.d = (size_t)sl_layout_params(l);
    if (sqlite3_prepare_v2(db,
                           "SELECT id, base_version FROM rounds WHERE task_id = ?1 AND state = 3 "
                           "ORDER BY round_no",
                           -1, &rounds, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT device_id, frame FROM updates WHERE round_id = ?1 ORDER BY "
                           "device_id",
                           -1, &ups, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT frame FROM model_versions WHERE task_id = ?1 AND version = ?2",
                           -1, &model, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(id), 0) FROM devices", -1, &maxdev, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT device_id FROM round_participants WHERE round_id = ?1", -1,
                           &sel, NULL) != SQLITE_OK ||
        sqlite3_step(maxdev) != SQLITE_ROW) {
        fprintf(stderr, "starling bench positions: %s\n", sqlite3_errmsg(db));
        rc = SL_EIO;
        goto done;
    }
    c.devices = sqlite3_column_int64(maxdev, 0) + 1;
    a = malloc(c.d * sizeof *a);
    b = malloc(c.d * sizeof *b);
    c.agg = calloc(c.d, 1);
    c.cur = calloc(c.d, 1);
    c.prev = calloc((size_t)c.devices, sizeof *c.prev);
    c.nprev = calloc((size_t)c.devices, sizeof *c.nprev);
    c.mark = calloc(c.d, 1);
    c.seen = calloc((size_t)c.devices, 1);
    c.held = calloc((size_t)c.devices, sizeof *c.held);
    c.dl = calloc((size_t)c.devices, sizeof *c.dl);
    c.dlmark = calloc(c.d, 1);
    c.down = calloc(c.d, 1);
    c.other = malloc(c.d * sizeof *c.other);
    c.in = malloc(c.d * sizeof *c.in);
    c.out = malloc(c.d * sizeof *c.out);
    c.model = model;
    c.task = task;
    c.base = a;
    if (a == NULL || b == NULL || c.agg == NULL || c.cur == NULL || c.prev == NULL ||
        c.nprev == NULL || c.mark == NULL || c.seen == NULL || c.held == NULL || c.down == NULL ||
        c.dl == NULL || c.dlmark == NULL || c.other == NULL || c.in == NULL || c.out == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    sqlite3_bind_int64(rounds, 1, task);
    while (rc == SL_OK && sqlite3_step(rounds) == SQLITE_ROW) {
        int64_t round_id = sqlite3_column_int64(rounds, 0), base = sqlite3_column_int64(rounds, 1);
        size_t support = 0;
        int use = base >= 2 && read_model(model, task, base, l, a) == SL_OK &&
                  read_model(model, task, base - 1, l, b) == SL_OK;
        c.base_version = base;
        if (use) {
            for (size_t j = 0; j < c.d; j++) {
                c.agg[j] = memcmp(&a[j], &b[j], sizeof a[j]) != 0;
                support += c.agg[j];
            }
        }
        sqlite3_reset(ups);
        sqlite3_bind_int64(ups, 1, round_id);
        while (rc == SL_OK && sqlite3_step(ups) == SQLITE_ROW) {
            uint64_t before = tot->updates;
            int64_t device = sqlite3_column_int64(ups, 0);
            const void *frame = sqlite3_column_blob(ups, 1);
            size_t len = (size_t)sqlite3_column_bytes(ups, 1);
            void *plain = NULL;
            sl_frame_header h;
            if (len == 0) { /* its bytes retired: nothing to read */
                tot->retired++;
                continue;
            }
            if (sl_frame_peek_header(frame, len, &h) == SL_OK &&
                (h.flags & SL_FRAME_FLAG_SPLIT)) { /* stored as sent: its plain frame */
                sl_support *sup = NULL;
                rc = read_model(model, task, (int64_t)h.ref_version, l, c.other);
                if (rc == SL_ENOENT) { /* coded against a version whose bytes were retired */
                    tot->retired++;
                    rc = SL_OK;
                    continue;
                }
                if (rc == SL_OK && (int64_t)h.base_version != base)
                    rc = SL_ECORRUPT; /* an update of this round is of its base */
                if (rc == SL_OK)
                    rc = sl_support_diff(l, c.other, a, &sup);
                if (rc == SL_OK)
                    rc = sl_frame_unsplit(l, frame, len, NULL, sup, &plain, &len);
                sl_support_free(sup);
                frame = plain;
            }
            if (rc == SL_OK)
                rc = one_update(&c, device, frame, len, use, tot);
            free(plain);
            if (rc != SL_OK)
                fprintf(stderr,
                        "starling bench positions: task %" PRId64 ", round id %" PRId64
                        ", device %" PRId64 ": the update does not decode: %s\n",
                        task, round_id, device, sl_strerror(rc));
            if (tot->updates > before)
                tot->agg_size += support;
        }
        sqlite3_reset(sel); /* what the round's selected devices downloaded: its base */
        sqlite3_bind_int64(sel, 1, round_id);
        while (sqlite3_step(sel) == SQLITE_ROW) {
            int64_t device = sqlite3_column_int64(sel, 0);
            if (device >= 0 && device < c.devices)
                c.dl[device] = base;
        }
        tot->rounds += use;
    }
done:
    sqlite3_finalize(rounds);
    sqlite3_finalize(ups);
    sqlite3_finalize(model);
    sqlite3_finalize(maxdev);
    sqlite3_finalize(sel);
    free(a);
    free(b);
    free(c.agg);
    free(c.cur);
    for (int64_t i = 0; c.prev != NULL && i < c.devices; i++)
        free(c.prev[i]);
    free(c.prev);
    free(c.nprev);
    free(c.mark);
    free(c.seen);
    free(c.held);
    free(c.dl);
    free(c.dlmark);
    free(c.down);
    free(c.other);
    free(c.in);
    free(c.out);
    return rc;
}

int sl_bench_positions(int argc, char **argv)
{
    const char *path = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *tasks = NULL;
    int status = 0;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fprintf(stderr,
                    "usage: starling bench positions --store FILE\n"
                    "  the positions of a coordinator's stored sparse updates: bits a position\n"
                    "  as the frames sent them, beside the ideal costs of coding them as\n"
                    "  subsets of splits both ends know (tensors, the last aggregate's\n"
                    "  support, the delta each device downloaded, its previous update)\n");
            return 0;
        }
        if (strcmp(argv[i], "--store") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else {
            fprintf(stderr, "starling bench positions: unknown or incomplete option '%s'\n",
                    argv[i]);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "usage: starling bench positions --store FILE (a coordinator's store: "
                        "what its updates' positions cost)\n");
        return 2;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT id, name, layout FROM tasks ORDER BY id", -1, &tasks,
                           NULL) != SQLITE_OK) {
        fprintf(stderr, "starling bench positions: %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    while (sqlite3_step(tasks) == SQLITE_ROW) {
        int64_t task = sqlite3_column_int64(tasks, 0);
        const char *name = (const char *)sqlite3_column_text(tasks, 1);
        const char *ltext = (const char *)sqlite3_column_text(tasks, 2);
        sl_layout *l = NULL;
        pos_totals tot;
        double k;
        int rc;
        memset(&tot, 0, sizeof tot);
        if (sl_layout_parse(ltext, strlen(ltext), &l) != SL_OK) {
            fprintf(stderr, "task %" PRId64 ": its layout does not parse\n", task);
            status = 1;
            continue;
        }
        rc = one_task(db, task, l, &tot);
        if (rc != SL_OK) {
            fprintf(stderr, "task %" PRId64 ": %s\n", task, sl_strerror(rc));
            status = 1;
        }
        k = tot.updates ? (double)tot.positions / (double)tot.updates : 0;
        if (tot.retired > 0)
            printf("task %" PRId64 ": %" PRIu64 " updates skipped, their bytes or their split's "
                   "reference version retired (the task's retain_last)\n",
                   task, tot.retired);
        printf("task %" PRId64 " (%s): %" PRIu64 " rounds after the first aggregate, %" PRIu64
               " updates, %.1f positions an update (%.3f%% of %" PRIu64 ")\n",
               task, name, tot.rounds, tot.updates, k, 100.0 * k / (double)sl_layout_params(l),
               sl_layout_params(l));
        if (tot.positions > 0) {
            printf("  the last aggregate's support: %.2f%% of the coordinates, holding %.1f%% of "
                   "the positions\n",
                   100.0 * (double)tot.agg_size /
                       ((double)tot.updates * (double)sl_layout_params(l)),
                   100.0 * (double)tot.in_agg / (double)tot.positions);
            printf("  the delta each device downloaded (from the base of its previous update; "
                   "whole when none): %.2f%% of the coordinates, holding %.1f%% of the "
                   "positions\n",
                   100.0 * (double)tot.held_size /
                       ((double)tot.updates * (double)sl_layout_params(l)),
                   100.0 * (double)tot.in_held / (double)tot.positions);
            printf("  the device's previous update: holding %.1f%% of the positions\n",
                   100.0 * (double)tot.in_own / (double)tot.positions);
            printf("  bits a position:\n");
            for (int i = 0; i < POS_KINDS; i++)
                printf("    %-50s %6.3f\n", pos_names[i], tot.bits[i] / (double)tot.positions);
        }
        sl_layout_free(l);
    }
    sqlite3_finalize(tasks);
    sqlite3_close(db);
    return status;
}
