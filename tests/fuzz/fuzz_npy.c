/*
 * Fuzz target: a .npy file on a device (its application saved it; the agent
 * trusts nothing of it): written to a temporary file, opened, every row read
 * in small ranges. Anything may be refused; nothing may crash, read out of
 * bounds or allocate beyond the rows asked for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "starling/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/fuzz_npy.XXXXXX", err[256];
    int fd = mkstemp(path);
    sl_npy *a = NULL;
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    if (sl_npy_open(path, &a, err, sizeof err) == SL_OK) {
        uint64_t rows = sl_npy_rows(a), row = sl_npy_row_size(a);
        if (row > 0 && row <= 4096) {
            float *out = malloc(4 * row * sizeof *out);
            for (uint64_t r = 0; out != NULL && r < rows && r < 4096; r += 4) {
                size_t n = rows - r < 4 ? (size_t)(rows - r) : 4;
                if (sl_npy_read(a, r, n, out, err, sizeof err) != SL_OK)
                    break;
            }
            free(out);
        }
        sl_npy_close(a);
    }
    unlink(path);
    return 0;
}
