/*
 * starling/source.h - a device's own data, read through its task's data
 * contract (starling/contract.h) into samples the model takes.
 *
 * The device's configuration names its source by a URI:
 *
 *   csv:FILE[?label=COL][&delimiter=,|;|tab|space][&skip=N][&timestamp=COL]
 *       one sample per row (or, with a window, one row of a series); the
 *       contract's features by name (none named: every column but the label
 *       and the timestamp), the label from the contract's label column(s),
 *       else ?label=, else a column named "label". Rows appended later are
 *       read by later calls; a last line without its newline is not read.
 *   npy:XFILE?y=YFILE   two NumPy arrays: x (n, ...) of raw_size values a
 *       row, y (n,) class indices or targets, or (n, tdim).
 *   npz:FILE[?x=NAME&y=NAME]   the same arrays in an .npz archive (numpy.savez
 *       or savez_compressed); members "x" and "y" by default.
 *   idx:DIR   Fashion-MNIST's training files (train-images-idx3-ubyte and
 *       train-labels-idx1-ubyte, plain or .gz) in DIR; pixel values 0..255.
 *   images:DIR   one subfolder per class, named as the contract's class
 *       (a contract with a class named ".*" or holding a '/' is refused);
 *       PNG and JPEG files (by their signature) decoded, converted and
 *       resized to the contract's image, values 0..255.
 *   wav:DIR   one subfolder per class; 16-bit mono PCM WAV files at the
 *       contract's sample rate, turned into log-mel features.
 *   sqlite:FILE[?table=T][&label=COL][&blob=COL]   a spool table the device's
 *       application appends rows to (starling/spool.h); rows are read in
 *       rowid order, each once.
 *
 * In images: and wav: folders, names that start with '.' or end in ".tmp"
 * or ".part" are skipped: an application writes a new file under such a
 * name and renames it when complete, so a partly written file is never read.
 * A file whose size changes while it is decoded is left for the next read.
 *
 * Growth: every sl_source_read() returns the samples that arrived since the
 * last one (appended CSV rows, new spool rows, new files); NumPy and IDX
 * files are read once.
 *
 * Bad data is refused with a one-line reason that names the file (and line,
 * column, row or member) and the problem: a missing column, a wrong shape or
 * dtype, a non-finite value, a label outside the task's classes, an empty or
 * truncated file, a file that changed while it was read, a corrupt image or
 * WAV. A refused read returns no sample, and the source keeps refusing with
 * the same reason: open it anew (and read everything again) once the data is
 * fixed.
 *
 * Memory: a source holds one row, one window or one decoded file and the
 * names of the files it has taken, never the data set.
 */
#ifndef STARLING_SOURCE_H
#define STARLING_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"
#include "starling/contract.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An open source (opaque). Used by one thread at a time. */
typedef struct sl_source sl_source;

/**
 * sl_source_open - open the source named by @uri for samples of contract
 * @c (which must outlive the source). Checks what can be checked before a
 * sample is read: the URI's options, the file or folder, a CSV header's
 * columns, a NumPy header's shape and dtype, a spool table's columns, the
 * class folders' names. Returns SL_OK and *@out; SL_EINVAL (a URI that is
 * not valid, or a source that cannot give what the contract asks: the reason
 * says which), or the readers' statuses (SL_ENOENT, SL_ECORRUPT,
 * SL_ETRUNCATED, ...), with @err's reason.
 */
int sl_source_open(const char *uri, const sl_contract *c, sl_source **out, char *err,
                   size_t errcap);

/**
 * sl_source_read - up to @max samples that arrived since the last read.
 * @x: room for @max * c->sample_size floats: the samples, preprocessed
 *     (decoded, windowed, scaled and standardised).
 * @y: room for @max * c->tdim floats: the labels (a class index as a float,
 *     0/1 per class, or the targets).
 * *@n receives the count (0: nothing new). Returns SL_OK, or a refusal
 * (with @err's reason) that returns nothing; every later read of @s then
 * refuses the same way.
 */
int sl_source_read(sl_source *s, float *x, float *y, size_t max, size_t *n, char *err,
                   size_t errcap);

/** sl_source_close - NULL is a no-op. */
void sl_source_close(sl_source *s);

/**
 * sl_source_check_uri - check @uri's scheme, option names and values that
 * can be checked without a contract (csv:'s delimiter and skip, npy:'s y).
 * Returns SL_OK or SL_EINVAL with @err's reason.
 */
int sl_source_check_uri(const char *uri, char *err, size_t errcap);

/** sl_source_is_uri - 1 when @text starts with one of the schemes above. */
int sl_source_is_uri(const char *text);

#ifdef __cplusplus
}
#endif

#endif
