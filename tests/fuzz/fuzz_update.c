/* Fuzz target: update frames through both decoders (sparse and accumulate), and split ones
 * against the fuzz support, unsplit and decoded again. */
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const sl_layout *l = sl_fuzz_layout();
    static float dst[1100], zero[1100];
    sl_decode_limits lim = {1u << 20, 1u << 24};
    sl_update *u = NULL;
    int rc = sl_frame_decode_update(l, data, size, &lim, &u);
    int rc2;

    if (rc == SL_OK) {
        /* whatever decoded is within the layout */
        for (size_t t = 0; t < u->tensors; t++)
            for (size_t j = 0; j < u->n[t]; j++)
                if (u->idx[t][j] >= sl_layout_tensor(l, t)->count ||
                    (j > 0 && u->idx[t][j] <= u->idx[t][j - 1]))
                    abort();
        sl_update_free(u);
    }
    memset(dst, 0, sizeof dst);
    rc2 = sl_frame_accumulate_update(l, data, size, &lim, 0.5f, dst);
    if ((rc == SL_OK) != (rc2 == SL_OK))
        abort(); /* the two decoders must agree */
    if (rc2 != SL_OK && memcmp(dst, zero, sizeof dst) != 0)
        abort(); /* a rejected frame changed the accumulator */
    /* against the support: a frame that is not split decodes as without it; a split one
     * decodes to what its unsplit frame decodes to without one */
    u = NULL;
    rc2 = sl_frame_decode_update_split(l, data, size, &lim, sl_fuzz_support(), &u);
    if (rc == SL_OK && rc2 != SL_OK)
        abort();
    if (rc2 == SL_OK && rc != SL_OK) {
        void *flat = NULL;
        size_t flen = 0;
        sl_update *v = NULL;
        if (rc != SL_ESUPPORT ||
            sl_frame_unsplit(l, data, size, &lim, sl_fuzz_support(), &flat, &flen) != SL_OK ||
            sl_frame_decode_update(l, flat, flen, &lim, &v) != SL_OK)
            abort();
        for (size_t t = 0; t < u->tensors; t++)
            if (u->n[t] != v->n[t] ||
                (u->n[t] > 0 && (memcmp(u->idx[t], v->idx[t], u->n[t] * sizeof *u->idx[t]) ||
                                 memcmp(u->val[t], v->val[t], u->n[t] * sizeof *u->val[t]))))
                abort();
        sl_update_free(v);
        free(flat);
    }
    sl_update_free(u);
    return 0;
}
