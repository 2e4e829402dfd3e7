/*
 * starling/csv.h - a streaming reader of labelled samples in a CSV file that
 * may keep growing while it is read (a device application's sensor log).
 *
 * A row is one sample: its feature columns become floats in a chosen order,
 * its label column a class index or a regression target. Rows are read in
 * batches after the last row read; rows appended later are read by later
 * calls. A last line without its newline is not read until it is complete,
 * so a row the application is still writing is never taken up.
 *
 * Accepted: ',' (default), '\t', ';' or ' ' delimiters; an optional header
 * line; lines to skip before it; a UTF-8 byte order mark; LF or CRLF line
 * ends; RFC 4180 quoted fields ("a,b", "" for a quote, newlines inside
 * quotes). Spaces and tabs around a value or a column name are ignored.
 * Blank lines carry no sample and are skipped.
 *
 * Refused, with a one-line reason naming the file, line and column: a
 * missing or empty file, a column named twice, a label, feature or timestamp
 * column the file lacks (the reason lists the columns it has), a row with
 * the wrong number of fields, an empty field, a value that is not a number
 * or not finite, a class outside [0, classes) or an unknown class name, a
 * quote inside an unquoted field or text after a closing quote, a NUL byte,
 * a row longer than SL_CSV_MAX_ROW bytes.
 *
 * Memory: one row (at most SL_CSV_MAX_ROW bytes) and a 64 KiB read buffer,
 * whatever the size of the file.
 *
 * Conventions: SL_OK or a negative sl_status; functions that can fail on
 * user input write a one-line reason into @err (NUL-terminated, cut to
 * @errcap; @err may be NULL). A handle is used by one thread at a time;
 * distinct handles are independent.
 */
#ifndef STARLING_CSV_H
#define STARLING_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The longest row accepted, in bytes of the file (quotes and line end included). */
#define SL_CSV_MAX_ROW ((size_t)1 << 20)

/** The most classes a label column may have (class indices stay exact in a float). */
#define SL_CSV_MAX_CLASSES ((size_t)1 << 24)

/** What the label column holds. */
typedef enum sl_csv_label_kind {
    SL_CSV_CLASS = 0, /* a class index in [0, classes), or one of class_names */
    SL_CSV_TARGET = 1 /* a finite number (regression) */
} sl_csv_label_kind;

/** How to read a file. Start from sl_csv_options_init(), then set what differs. */
typedef struct sl_csv_options {
    char delimiter;    /* ',' (default; 0 means ','), '\t', ';' or ' ' */
    int header;        /* 1 (default): the first line names the columns; 0: @columns does */
    size_t skip_lines; /* lines before the header (or the data when @header is 0); default 0 */
    const char *const *columns;     /* @header 0: the names of the columns, in file order */
    size_t ncolumns;                /* entries in @columns */
    const char *label;              /* the label column's name (required) */
    sl_csv_label_kind label_kind;   /* default SL_CSV_CLASS */
    size_t classes;                 /* SL_CSV_CLASS: the number of classes, 1..SL_CSV_MAX_CLASSES */
    const char *const *class_names; /* NULL: labels are indices; else @classes names, the
                                       label field holds one of them, mapped to its index,
                                       or (when no name matches) an index */
    const char *const *features;    /* NULL: every column but the label and the timestamp,
                                       in file order; else these columns, in this order */
    size_t nfeatures;               /* entries in @features */
    const char *timestamp;          /* NULL, or a column that is neither feature nor label */
} sl_csv_options;

/** An open CSV file being read (opaque). */
typedef struct sl_csv sl_csv;

/**
 * sl_csv_options_init - fill @o with the defaults: ',' delimiter, a header
 * line, no lines skipped, class labels, everything else zero or NULL.
 * @o: the options to fill (not NULL).
 */
void sl_csv_options_init(sl_csv_options *o);

/**
 * sl_csv_open - open the CSV file at @path and read what comes before the
 * data: the byte order mark, the @o->skip_lines lines and the header line,
 * which must be complete (end with a newline). Resolves the label, feature
 * and timestamp columns. No data row is read; a file with a header and no
 * rows is fine (it has 0 samples so far).
 * @path: the file (a regular file); kept open until sl_csv_close().
 * @o:    how to read it (see sl_csv_options); copied, need not outlive the call.
 * @out:  on success, the new reader, owned by the caller (sl_csv_close()).
 * Returns SL_OK; SL_EINVAL (bad options, a non-regular file, no feature
 * column), SL_ENOENT (missing file, a named column the file lacks),
 * SL_ETRUNCATED (empty file, the skipped lines or the header incomplete),
 * SL_EDUPLICATE (a column named twice), SL_ESYNTAX (bad quoting, an empty
 * column name), SL_ETOOBIG (a header line longer than SL_CSV_MAX_ROW),
 * SL_ENOMEM, SL_EIO. On error *@out is untouched. May block on file I/O.
 */
int sl_csv_open(const char *path, const sl_csv_options *o, sl_csv **out, char *err, size_t errcap);

/**
 * sl_csv_read - read up to @max whole rows after the last row read.
 * A last line without its newline is left for a later call; rows appended to
 * the file since the last call are read.
 * @c:   the reader.
 * @x:   room for @max * sl_csv_features(@c) floats: on success, *@n rows of
 *       features, row-major, in sl_csv_feature_name() order.
 * @y:   room for @max floats: on success, *@n labels (a class index as a
 *       float, or the target).
 * @max: the most rows to read (0 reads nothing and succeeds; @x and @y may
 *       then be NULL).
 * @n:   on success, the number of rows read (0 when none is complete yet).
 * Returns SL_OK; on a bad row, the status of its refusal (see sl_csv_open()
 * and the file comment: SL_ECOUNT for a wrong number of fields, SL_ESYNTAX,
 * SL_ENONFINITE, SL_ERANGE for a class, SL_ETOOBIG), with nothing returned
 * from this call: *@n and the position are untouched, so the next call meets
 * the same row again (the caller decides what to do). SL_ESTATE when the
 * file was replaced, removed or truncated below the position read ("the file
 * changed while it was read"); the reader then stays in that state. SL_EIO.
 * On any error the contents of @x and @y are unspecified (rows before the bad
 * one may have been written there) and *@n is untouched. May block on I/O.
 */
int sl_csv_read(sl_csv *c, float *x, float *y, size_t max, size_t *n, char *err, size_t errcap);

/** sl_csv_features - the number of features per row (at least 1). */
size_t sl_csv_features(const sl_csv *c);

/**
 * sl_csv_feature_name - the column name of feature @i (0-based, in the order
 * of the rows sl_csv_read() returns), or NULL when @i >= sl_csv_features().
 * The string is owned by @c and lives until sl_csv_close().
 */
const char *sl_csv_feature_name(const sl_csv *c, size_t i);

/** sl_csv_rows_read - the rows returned so far by sl_csv_read() (blank lines not counted). */
uint64_t sl_csv_rows_read(const sl_csv *c);

/** sl_csv_close - close the file and free the reader. NULL is a no-op. */
void sl_csv_close(sl_csv *c);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_CSV_H */
