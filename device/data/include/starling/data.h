/*
 * starling/data.h - data sets on the device: IDX files (Fashion-MNIST, or a
 * user's own), normalisation, and deterministic partitioners that split a
 * data set among simulated clients.
 *
 * Conventions: SL_OK or a negative sl_status, outputs untouched on error;
 * functions that can fail on user input also write a one-line reason into
 * @err (NUL-terminated, cut to @errcap; @err may be NULL).
 */
#ifndef STARLING_DATA_H
#define STARLING_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Where Debian's dataset-fashion-mnist package puts the files. */
#define SL_DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/** Fashion-MNIST's per-pixel mean and standard deviation (of pixel / 255). */
#define SL_DATA_FASHION_MEAN 0.2860f
#define SL_DATA_FASHION_STD  0.3530f

/** A labelled image data set, normalised: x = (pixel / 255 - mean) / std. */
typedef struct sl_dataset {
    size_t n;       /* samples */
    size_t rows;    /* image height (28) */
    size_t cols;    /* image width (28) */
    size_t classes; /* 1 + the largest label */
    float *x;       /* n * rows * cols floats, sample-major */
    int32_t *y;     /* n labels */
} sl_dataset;

/**
 * sl_data_load_idx - read an IDX3 image file (unsigned bytes, n x rows x
 * cols) and an IDX1 label file (n unsigned bytes), each plain or gzipped
 * (detected by the gzip magic), and normalise with @mean and @std.
 * Checks: magic numbers and element types, dimensions (rows, cols 1..4096,
 * n up to 2^28), counts agreeing between the files, file sizes exact
 * (truncated or trailing data is an error), labels < 256.
 * Errors: SL_ENOENT (missing file), SL_EMAGIC, SL_ETRUNCATED, SL_ECORRUPT,
 * SL_ETOOBIG, SL_ENOMEM, SL_EIO.
 */
int sl_data_load_idx(const char *images_path, const char *labels_path, float mean, float std,
                     sl_dataset **out, char *err, size_t errcap);

/**
 * sl_data_load_fashion_mnist - the training (@train = 1, 60,000 samples) or
 * test (10,000) split from @dir (NULL: SL_DATA_FASHION_MNIST_DIR, or the
 * STARLING_FASHION_MNIST_DIR environment variable when set). A missing
 * directory gives SL_ENOENT and a message naming the Debian package
 * (dataset-fashion-mnist).
 */
int sl_data_load_fashion_mnist(const char *dir, int train, sl_dataset **out, char *err,
                               size_t errcap);

/** sl_dataset_free - NULL is a no-op. */
void sl_dataset_free(sl_dataset *ds);

/** Which samples each client holds. */
typedef struct sl_partition {
    uint32_t clients;
    size_t *count;  /* [clients] */
    uint32_t **idx; /* [clients][count[c]] sample indices, ascending */
} sl_partition;

/**
 * sl_partition_create - split samples 0..@n-1 among @clients, deterministic
 * by @seed, per @spec:
 *   "iid"              uniform random, sizes differ by at most one
 *   "dirichlet:<a>"    label skew: for every class, proportions ~ Dir(a)
 *   "shards:<s>"       sort by label, cut into clients*s shards, s each
 *                      (the FedAvg paper's pathological split)
 *   "quantity:<b>"     sizes ~ Dir(b), labels iid
 * Every sample goes to exactly one client; with dirichlet and quantity every
 * client gets at least one sample (a client left empty takes one from the
 * largest). Errors: SL_EINVAL (bad spec or parameters, clients == 0 or more
 * clients than samples), SL_ENOMEM.
 */
int sl_partition_create(const int32_t *labels, size_t n, uint32_t classes, const char *spec,
                        uint32_t clients, uint64_t seed, sl_partition **out, char *err,
                        size_t errcap);

/** sl_partition_free - NULL is a no-op. */
void sl_partition_free(sl_partition *p);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_DATA_H */
