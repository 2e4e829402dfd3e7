/*
 * Fuzz target: a WAV file on a device (untrusted bytes): written to a
 * temporary file and read at 16 kHz and at 8 kHz into at most 4096 samples.
 * Anything may be refused; nothing may crash, read out of bounds or write
 * past the samples asked for, and what is read must be in [-1, 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "starling/wav.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned rates[2] = {16000, 8000};
    char path[] = "/tmp/fuzz_wav.XXXXXX", err[256];
    static float out[4096 + 1];
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    for (int r = 0; r < 2; r++) {
        size_t n = 0;
        out[4096] = 42.0f;
        if (sl_wav_load(path, rates[r], out, 4096, &n, err, sizeof err) == SL_OK) {
            if (n > 4096)
                abort();
            for (size_t i = 0; i < n; i++)
                if (!(out[i] >= -1.0f && out[i] < 1.0f))
                    abort();
        }
        if (out[4096] != 42.0f)
            abort();
    }
    unlink(path);
    return 0;
}
