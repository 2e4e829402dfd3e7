/* Fuzz target: model and model-delta frames, and the header peek. */
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const sl_layout *l = sl_fuzz_layout();
    static float base[1100], out[1100];
    sl_frame_header h = {0};
    int peek = sl_frame_peek_header(data, size, &h);
    int rc;

    for (size_t i = 0; i < 1100; i++)
        base[i] = (float)i * 0.001f;
    memset(out, 0x5a, sizeof out);
    rc = sl_frame_decode_model(l, data, size, base, h.base_version, out);
    if (rc == SL_OK && peek != SL_OK)
        abort(); /* decoded a frame whose header is bad */
    if (rc != SL_OK) {
        for (size_t i = 0; i < 1100; i++) {
            uint32_t u;
            memcpy(&u, &out[i], 4);
            if (u != 0x5a5a5a5au)
                abort(); /* output written on failure */
        }
    }
    return 0;
}
