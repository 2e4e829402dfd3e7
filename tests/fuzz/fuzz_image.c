/*
 * Fuzz target: a PNG or JPEG file on a device (its application wrote it; the
 * agent trusts nothing of it): written to a temporary file, probed, then
 * decoded twice: to gray at a small size (a resize on both axes) and to RGB
 * at its own size when that is small (the copy path). Anything may be
 * refused; nothing may crash, read out of bounds, leak or take long: images
 * above 1 Mpixel are probed only, their decoding left to the unit tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "starling/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/fuzz_image.XXXXXX", err[256];
    static float small[7 * 5], own[3 * 64 * 64];
    unsigned w = 0, h = 0, ch = 0;
    int fd = mkstemp(path), rc;
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    rc = sl_image_probe(path, &w, &h, &ch, err, sizeof err);
    if (rc != SL_OK || (uint64_t)w * h <= (1u << 20)) {
        int loaded = sl_image_load(path, 1, 7, 5, small, err, sizeof err);
        if (rc != SL_OK && loaded == SL_OK)
            abort(); /* the probe refused what the load took */
        if (loaded == SL_OK && w <= 64 && h <= 64)
            sl_image_load(path, 3, w, h, own, err, sizeof err);
    }
    unlink(path);
    return 0;
}
