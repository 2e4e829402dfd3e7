/*
 * Fuzz target: a CSV file as a device's application may leave it (untrusted
 * bytes), written to a temporary file, opened with fixed options (header
 * line, label "y" with 3 classes, timestamp "t") and read to the end in
 * batches of up to 3 rows. Anything may be refused; nothing may crash, read
 * out of bounds, leak, or break the reader's promises: a refusal has a
 * message, a call returns at most the rows asked for, and the rows counted
 * are the rows returned.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "starling/csv.h"

#define BATCH 3

static void write_all(int fd, const uint8_t *data, size_t size)
{
    while (size > 0) {
        ssize_t w = write(fd, data, size);
        if (w <= 0)
            abort();
        data += w;
        size -= (size_t)w;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/fuzz_csv.XXXXXX", err[256];
    sl_csv_options o;
    sl_csv *c = NULL;
    uint64_t total = 0;
    float *x = NULL, y[BATCH];
    size_t n;
    int fd = mkstemp(path);

    if (fd < 0)
        abort();
    write_all(fd, data, size);
    close(fd);
    sl_csv_options_init(&o);
    o.label = "y";
    o.classes = 3;
    o.timestamp = "t";
    err[0] = '\0';
    if (sl_csv_open(path, &o, &c, err, sizeof err) != SL_OK) {
        if (err[0] == '\0' || memchr(err, '\0', sizeof err) == NULL)
            abort();
        goto done;
    }
    if (sl_csv_features(c) == 0 || sl_csv_feature_name(c, sl_csv_features(c) - 1) == NULL ||
        sl_csv_feature_name(c, sl_csv_features(c)) != NULL)
        abort();
    x = malloc(BATCH * sl_csv_features(c) * sizeof *x);
    if (x == NULL)
        abort();
    for (;;) {
        err[0] = '\0';
        n = BATCH + 1;
        int rc = sl_csv_read(c, x, y, BATCH, &n, err, sizeof err);
        if (rc != SL_OK) {
            if (err[0] == '\0' || n != BATCH + 1)
                abort();
            break;
        }
        if (n > BATCH)
            abort();
        for (size_t i = 0; i < n; i++)
            if (!(y[i] == 0 || y[i] == 1 || y[i] == 2))
                abort();
        total += n;
        if (n < BATCH)
            break;
    }
    if (sl_csv_rows_read(c) != total)
        abort();
done:
    free(x);
    sl_csv_close(c);
    unlink(path);
    return 0;
}
