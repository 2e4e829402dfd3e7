/*
 * starling/contract.h - a task's data contract: what one sample is, for
 * every device and every evaluator of the task (device/data/DATA_CONTRACT.md).
 *
 * The task declares the contract, each device declares its source
 * (starling/source.h). The contract says what a sample's input is (named
 * feature columns, or a tensor shape), what its label is (a class among named
 * classes, several classes at once, or regression targets), how raw values
 * become the model's input (image decode and resize, windows of a time
 * series, log-mel features of 16 kHz audio, scaling, standardisation), the
 * fewest samples a device needs to take part, and the share of its samples a
 * device holds out to evaluate each new global model.
 *
 * Conventions: SL_OK or a negative sl_status; @err receives a one-line reason
 * that names the offending member by its JSON path (may be NULL).
 */
#ifndef STARLING_CONTRACT_H
#define STARLING_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The most values one sample may have after preprocessing. */
#define SL_CONTRACT_MAX_SAMPLE ((size_t)1 << 24)
/** The most named features, label columns or classes. */
#define SL_CONTRACT_MAX_NAMES 65536u
/** The largest contract document, in bytes. */
#define SL_CONTRACT_MAX_BYTES ((size_t)16 << 20)

/** What a sample's label is. */
typedef enum sl_label_kind {
    SL_LABEL_CLASS = 0,      /* one class among classes[] (an index, or a class name) */
    SL_LABEL_MULTILABEL = 1, /* a 0/1 value per class (label columns, or a [classes] row) */
    SL_LABEL_TARGET = 2      /* tdim regression targets */
} sl_label_kind;

/** How a window of a time series takes its label from its rows. */
typedef enum sl_window_rule {
    SL_WINDOW_LAST = 0,     /* the last row's label */
    SL_WINDOW_MAJORITY = 1, /* the most frequent class (the smallest index on a tie) */
    SL_WINDOW_MEAN = 2      /* the mean of the rows' targets (regression) */
} sl_window_rule;

/** The raw form the preprocessing expects from a source. */
typedef enum sl_contract_raw {
    SL_RAW_VALUES = 0, /* raw_size numbers per sample (CSV row, NumPy row, spool row) */
    SL_RAW_IMAGE = 1,  /* an image file, decoded and resized to image_* */
    SL_RAW_AUDIO = 2,  /* a 16 kHz mono clip, turned into log-mel features */
    SL_RAW_SERIES = 3  /* rows of raw_size values, windowed */
} sl_contract_raw;

/** The element type a device's arrays hold (input.dtype); ANY when the contract names none. */
typedef enum sl_contract_dtype {
    SL_DTYPE_ANY = 0,
    SL_DTYPE_FLOAT32 = 1,
    SL_DTYPE_FLOAT64 = 2,
    SL_DTYPE_UINT8 = 3,
    SL_DTYPE_INT64 = 4
} sl_contract_dtype;

/**
 * A parsed contract. Read-only for its users; every pointer is owned by it.
 * Sizes are consistent: sample_size = product(shape) is what the source
 * produces after preprocessing, raw_size what a source reads per row.
 */
typedef struct sl_contract {
    /* input */
    char **features;         /* named feature columns in order (NULL: unnamed, by shape) */
    size_t nfeatures;        /* entries of features */
    size_t shape[4];         /* per-sample tensor the model takes */
    size_t ndim;             /* 1..4 */
    size_t sample_size;      /* product of shape */
    sl_contract_dtype dtype; /* what npy:/npz: arrays must hold (idx: holds uint8); samples are
                                float32 after preprocessing whatever it is */
    sl_contract_raw raw;
    size_t raw_size; /* SL_RAW_VALUES / SL_RAW_SERIES: values per row */
    /* label */
    sl_label_kind label_kind;
    char **label_columns; /* CSV / spool columns of the label (NULL: the source's default) */
    size_t nlabel_columns;
    char **classes;  /* class names in index order (CLASS / MULTILABEL) */
    size_t nclasses; /* CLASS / MULTILABEL; 0 for TARGET */
    size_t tdim;     /* floats of label per sample: 1 (CLASS: the index), nclasses, or targets */
    /* preprocessing, applied in this order: decode (image / logmel / window), scale, standardize */
    unsigned image_width, image_height, image_channels; /* SL_RAW_IMAGE */
    unsigned sample_rate, n_fft, hop, n_mels, frames;   /* SL_RAW_AUDIO */
    float fmin, fmax;                                   /* SL_RAW_AUDIO, Hz */
    size_t window, stride;                              /* SL_RAW_SERIES: rows per window, step */
    sl_window_rule window_rule;                         /* SL_RAW_SERIES */
    int has_scale;
    float scale, offset; /* x * scale + offset */
    float *mean, *std;   /* standardisation: (x - mean) / std, NULL when none */
    size_t nstats;       /* 1 (every value), raw_size (per feature / channel) or sample_size */
    /* participation */
    size_t min_samples; /* fewest training samples a device needs (default 1) */
    double eval_share;  /* held-out share for federated evaluation, [0, 0.9]; 0: none */
} sl_contract;

/**
 * sl_contract_parse - parse and check the JSON contract @text (@len bytes,
 * need not be NUL-terminated; white space may follow the object, nothing
 * else). Every member is checked: unknown members, members given twice,
 * wrong types, sizes that disagree (shape against features, image, window or
 * log-mel; standardisation lengths; label columns against the kind), a
 * std <= 0, non-finite numbers. Returns SL_OK and *@out, or SL_ESYNTAX (not
 * JSON), SL_EINVAL (a contract that is not valid: @err says where and why),
 * SL_ETOOBIG, SL_ENOMEM.
 */
int sl_contract_parse(const char *text, size_t len, sl_contract **out, char *err, size_t errcap);

/** sl_contract_free - NULL is a no-op. */
void sl_contract_free(sl_contract *c);

/**
 * sl_contract_class - the index of class @name in @c, or -1 when the
 * contract has no such class.
 */
long sl_contract_class(const sl_contract *c, const char *name);

/**
 * sl_contract_finish - apply the contract's scaling and standardisation to
 * @n samples of @c->sample_size values at @x, in place. For SL_RAW_SERIES
 * per-feature statistics apply to each feature's row of the window (the
 * sample is [nfeatures][window]).
 */
void sl_contract_finish(const sl_contract *c, float *x, size_t n);

/**
 * sl_contract_heldout - 1 when the sample (its @len bytes of preprocessed
 * input at @x and the label at @y, @c->tdim floats) belongs to the share held
 * out for federated evaluation: a stable split by the sample's hash, the same
 * on every device and across restarts and growth. 0 when eval_share is 0.
 */
int sl_contract_heldout(const sl_contract *c, const float *x, const float *y);

#ifdef __cplusplus
}
#endif

#endif
