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

#endif /* SL_FUZZ_COMMON_H */
