/*
 * Fuzz target: an .npz archive on a device (numpy.savez or savez_compressed;
 * its application wrote it, the agent trusts nothing of it): written to a
 * temporary file, its arrays "x" and "arr_0" (numpy's name for the first
 * unnamed one) opened, every row read in small ranges in order, then a few
 * out of order (a deflated member is inflated again from its start).
 * Anything may be refused; nothing may crash, read out of bounds, leak or
 * allocate beyond the rows asked for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "starling/npy.h"

static void read_rows(sl_npy *a)
{
    uint64_t rows = sl_npy_rows(a), row = sl_npy_row_size(a);
    char err[256];
    float *out;
    if (row == 0 || row > 4096)
        return;
    out = malloc(4 * row * sizeof *out);
    if (out == NULL)
        return;
    for (uint64_t r = 0; r < rows && r < 4096; r += 4) {
        size_t n = rows - r < 4 ? (size_t)(rows - r) : 4;
        if (sl_npy_read(a, r, n, out, err, sizeof err) != SL_OK)
            break;
    }
    if (rows > 0) {
        sl_npy_read(a, rows / 2, 1, out, err, sizeof err);
        sl_npy_read(a, 0, 1, out, err, sizeof err);
        sl_npy_read(a, rows - 1, 1, out, err, sizeof err);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const arrays[] = {"x", "arr_0"};
    char path[] = "/tmp/fuzz_npz.XXXXXX", err[256];
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        sl_npy *a = NULL;
        if (sl_npz_open(path, arrays[i], &a, err, sizeof err) == SL_OK) {
            read_rows(a);
            sl_npy_close(a);
        }
    }
    unlink(path);
    return 0;
}
