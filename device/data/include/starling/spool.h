/*
 * starling/spool.h - labelled samples that the device's own application
 * appends to a table of an SQLite database while the agent runs (a sensor
 * log, an app's user events), read by rowid after the last row read.
 *
 * The table the application writes: one row per sample, a label column and
 * either one column per feature or one BLOB column holding every feature as
 * little-endian float32 values. For example (tests/unit/data/test_spool.c
 * runs the indented lines of this comment and reads them back):
 *
 *   CREATE TABLE samples (
 *       id    INTEGER PRIMARY KEY AUTOINCREMENT, -- the rowid, never reused
 *       label INTEGER NOT NULL,                  -- a class index (REAL: a target)
 *       temp  REAL NOT NULL,                     -- the features, a column each
 *       hum   REAL NOT NULL
 *   );
 *   INSERT INTO samples (label, temp, hum) VALUES (1, 21.5, 0.25);
 *
 * read with {.label = "label", .features = {"temp", "hum"}, .nfeatures = 2};
 * or, the features in one BLOB, read with {.table = "frames", .label = "label",
 * .blob = "x", .nfeatures = 2}:
 *
 *   CREATE TABLE frames (
 *       id    INTEGER PRIMARY KEY AUTOINCREMENT,
 *       label REAL NOT NULL,
 *       x     BLOB NOT NULL                      -- nfeatures float32, 4 bytes each
 *   );
 *   INSERT INTO frames (label, x) VALUES (-0.5, x'0000803f000000c0'); -- 1.0, -2.0
 *
 * What the application must do, and why:
 * - Let SQLite assign the rowid (do not give one) and declare it INTEGER
 *   PRIMARY KEY AUTOINCREMENT: the reader goes on after the last rowid read,
 *   so a row must never get a rowid at or below one already committed (without
 *   AUTOINCREMENT, deleting the newest row lets the next insert reuse its
 *   rowid, and that sample would be skipped).
 * - Commit a sample whole (an INSERT, or several in a transaction). The
 *   reader sees only committed rows, so a row being written is never read;
 *   rows committed later are read by later calls.
 * - Values: a feature or label is an INTEGER within +-2^24 (exact in
 *   float32), a finite REAL within float32's range, or TEXT that is such a
 *   decimal number ("2.5"); a BLOB of features is exactly 4 x nfeatures bytes
 *   of finite float32 values. Anything else (NULL, other text, Inf, a blob of
 *   another length) is refused, naming the table, the rowid and the column.
 *   (SQLite stores a NaN REAL as NULL.)
 * - Rollback-journal or WAL mode both work. Deleting rows (already read or
 *   not) is fine. In WAL mode the reader, which opens the database read-only,
 *   needs the -wal and -shm files to exist (they do while the application has
 *   the database open) or the right to create them.
 *
 * The agent opens the database read-only (it never writes, creates or
 * recovers it). A writer's lock is waited for (up to busy_timeout_ms), not an
 * error. Each read is one short read transaction: no lock is held between
 * calls, so the application's writes and checkpoints go on.
 *
 * Conventions: SL_OK or a negative sl_status; functions that can fail on
 * user input write a one-line reason into @err (NUL-terminated, cut to
 * @errcap; @err may be NULL). A handle is used by one thread at a time;
 * distinct handles are independent.
 */
#ifndef STARLING_SPOOL_H
#define STARLING_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The most features per row (a blob's; feature columns stop at SQLite's limit, 2000 columns). */
#define SL_SPOOL_MAX_FEATURES ((size_t)1 << 20)

/** Which table and columns to read. Zero-initialise, then set what is needed. */
typedef struct sl_spool_options {
    const char *table; /* the table; NULL: "samples" */
    const char *label; /* the label column (required): INTEGER class index or REAL target */
    const char *const *features; /* feature column names in order, or NULL with @blob */
    size_t nfeatures;            /* entries in @features, or float32 values in each @blob */
    const char *blob;            /* NULL, or one BLOB column of @nfeatures little-endian float32
                                    values, instead of @features */
    int64_t busy_timeout_ms;     /* how long to wait for a writer's lock; 0: 5000 */
} sl_spool_options;

/** An open spool (opaque). */
typedef struct sl_spool sl_spool;

/**
 * sl_spool_open - open the SQLite database at @path read-only and check that
 * the table and every named column exist (SQLite's names: case does not
 * matter) and that the table has rowids (not a view, not WITHOUT ROWID). The statements
 * are prepared here, once. Reads no row.
 * @path: the database file; kept open until sl_spool_close().
 * @o:    the table and columns; copied, need not outlive the call.
 * @out:  on success, the new spool, owned by the caller (sl_spool_close()).
 * Returns SL_OK; SL_EINVAL (bad options: no label, both or neither of
 * @features and @blob, no feature, more than SL_SPOOL_MAX_FEATURES; a path
 * that is not a regular file), SL_EDUPLICATE (a column named twice, the label
 * among the features), SL_ENOENT (no such file; no such table: the reason
 * lists the tables there are; no such column: the reason lists the table's
 * columns), SL_ETRUNCATED (an empty file: the application has not written
 * the database yet), SL_EMAGIC (not an SQLite database), SL_EUNSUPPORTED (a
 * view, a WITHOUT ROWID table), SL_EBUSY (locked past the timeout), SL_ECORRUPT,
 * SL_EIO, SL_ENOMEM. On error *@out is untouched. May block (file I/O, a
 * writer's lock up to the timeout).
 */
int sl_spool_open(const char *path, const sl_spool_options *o, sl_spool **out, char *err,
                  size_t errcap);

/**
 * sl_spool_read - the rows with rowid > @after, in rowid order, at most @max
 * of them, as committed when the call starts (one read transaction).
 * @x:     room for @max * sl_spool_features() floats: *@n rows of features,
 *         row-major, in @features order (or the blob's order).
 * @y:     room for @max floats: *@n labels.
 * @max:   the most rows (0 reads nothing and succeeds; @x and @y may then be NULL).
 * @n:     on success, the rows read (0 when there is none after @after yet).
 * @last:  on success, the rowid of the last row read (@after when none): pass
 *         it as @after next time.
 * Returns SL_OK; SL_ECORRUPT for a value refused (see the file comment; the
 * reason names the table, the rowid and the column, and sl_spool_refused()
 * gives the rowid) or a damaged database;
 * SL_EBUSY (locked past the timeout), SL_EIO, SL_ENOMEM, SL_EINVAL. On error
 * nothing is returned from the call: *@n and *@last are untouched and the
 * contents of @x and @y are unspecified; the same row is met again by a call
 * with the same @after (to go past a refused row, read after its rowid). May
 * block like sl_spool_open().
 */
int sl_spool_read(sl_spool *s, int64_t after, float *x, float *y, size_t max, size_t *n,
                  int64_t *last, char *err, size_t errcap);

/**
 * sl_spool_count - the number of committed rows with rowid > @after into
 * *@count (@after 0: every row whose rowid SQLite assigned). Errors as
 * sl_spool_read() (but for the value checks), with *@count untouched.
 * Counting walks those rows' rowids.
 */
int sl_spool_count(sl_spool *s, int64_t after, uint64_t *count, char *err, size_t errcap);

/** sl_spool_features - the floats per row in @x (at least 1). */
size_t sl_spool_features(const sl_spool *s);

/**
 * sl_spool_refused - the rowid of the row whose value the last
 * sl_spool_read() refused into *@rowid: SL_OK; SL_ENOENT (*@rowid untouched)
 * when the last read refused none.
 */
int sl_spool_refused(const sl_spool *s, int64_t *rowid);

/** sl_spool_close - close the database and free the spool. NULL is a no-op. */
void sl_spool_close(sl_spool *s);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_SPOOL_H */
