/* Fuzz target: layout text (it arrives from task configs and files). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_layout *l = NULL;
    if (sl_layout_parse((const char *)data, size, &l) == SL_OK) {
        char text[1 << 16];
        sl_layout *again = NULL;
        size_t need = sl_layout_format(l, text, sizeof text);
        if (need < sizeof text) {
            if (sl_layout_parse(text, need, &again) != SL_OK || !sl_layout_equal(l, again) ||
                sl_layout_hash(l) != sl_layout_hash(again))
                abort(); /* format and parse must round-trip */
            sl_layout_free(again);
        }
        sl_layout_free(l);
    }
    return 0;
}
