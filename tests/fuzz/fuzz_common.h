/* fuzz_common.h - the layout every frame fuzzer decodes against. */
#ifndef SL_FUZZ_COMMON_H
#define SL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "starling/codec.h"

#define SL_FUZZ_LAYOUT "conv.weight 4 1 3 3\nconv.bias 4\nfc.weight 10 100\nfc.bias 10\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline const sl_layout *sl_fuzz_layout(void)
{
    static sl_layout *layout;
    if (layout == NULL &&
        sl_layout_parse(SL_FUZZ_LAYOUT, sizeof SL_FUZZ_LAYOUT - 1, &layout) != SL_OK)
        abort();
    return layout;
}

/* The support split frames of the fuzz layout are decoded against: every third coordinate
 * (make_corpus writes its split frames with it). */
static inline const sl_support *sl_fuzz_support(void)
{
    static sl_support *support;
    if (support == NULL) {
        const sl_layout *l = sl_fuzz_layout();
        size_t d = (size_t)sl_layout_params(l);
        uint8_t bits[(1100 + 7) / 8] = {0};
        if (d > 1100)
            abort();
        for (size_t j = 0; j < d; j += 3)
            bits[j >> 3] |= (uint8_t)(1u << (j & 7));
        if (sl_support_load(l, bits, (d + 7) / 8, &support) != SL_OK)
            abort();
    }
    return support;
}

#endif /* SL_FUZZ_COMMON_H */
