/* sl_engine_test.h - helpers of the engine tests (header-only): simulated devices' updates. */
#ifndef SL_ENGINE_TEST_H
#define SL_ENGINE_TEST_H

#include "sl_test.h"
#include "starling/codec.h"

/* Device @i's update for (round, version) of @layout (two tensors at most): a deterministic
 * sparse update with values in [-scale/2, scale/2], and a test digest unique per content. */
static inline void sl_test_make_update(const sl_layout *layout, size_t i, int64_t round_id,
                                       int64_t version, float scale, void **frame, size_t *len,
                                       uint8_t *sha)
{
    sl_frame_header h = {SL_FRAME_VERSION,  SL_FRAME_UPDATE,    0, 0,
                         (uint64_t)version, (uint64_t)round_id, 0};
    size_t nt = sl_layout_tensors(layout);
    sl_sparse_tensor st[2];
    uint32_t idx[2][64];
    float val[2][64];
    uint64_t x = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)round_id;
    for (size_t t = 0; t < nt; t++) {
        uint32_t d = (uint32_t)sl_layout_tensor(layout, t)->count, pos = 0;
        size_t n = 0;
        while (n < 20) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pos += 1 + (uint32_t)(x % (d / 25 + 1));
            if (pos >= d)
                break;
            idx[t][n] = pos;
            val[t][n++] = scale * ((float)(x >> 40) / 16777216.0f - 0.5f);
        }
        st[t].n = n;
        st[t].idx = idx[t];
        st[t].val = val[t];
    }
    assert_int_equal(sl_frame_encode_update(layout, &h, st, NULL, NULL, frame, len), SL_OK);
    for (int b = 0; b < 32; b++) /* a test digest: unique per (device, round) content */
        sha[b] = ((const uint8_t *)*frame)[(size_t)b * 7 % *len] ^ (uint8_t)(i * 31 + (size_t)b);
}

#endif /* SL_ENGINE_TEST_H */
