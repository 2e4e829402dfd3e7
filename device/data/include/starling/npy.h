/*
 * starling/npy.h - arrays a device's application saved with NumPy
 * (numpy.save: the .npy format, versions 1.0, 2.0 and 3.0; numpy.savez and
 * numpy.savez_compressed: a zip archive of .npy members, stored or deflated),
 * read row by row without holding the file in memory.
 *
 * A row is everything after the first axis: an array of shape (n, 8) has n
 * rows of 8 values, (n, 28, 28) n rows of 784, (n,) n rows of 1. Values are
 * converted to float32: float32, float64, uint8 and int64 arrays (little
 * endian; C order only). Every value read is checked: a NaN or infinity, a
 * float64 beyond float32's range or an int64 beyond 2^24 (not exact in
 * float32) is refused with the row and column.
 *
 * Conventions: SL_OK or a negative sl_status, outputs untouched on error;
 * @err receives a one-line reason that names the file (may be NULL).
 */
#ifndef STARLING_NPY_H
#define STARLING_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The element types read. */
typedef enum sl_npy_dtype {
    SL_NPY_F4 = 0, /* '<f4' */
    SL_NPY_F8 = 1, /* '<f8' */
    SL_NPY_U1 = 2, /* '|u1' (or '<u1') */
    SL_NPY_I8 = 3  /* '<i8' */
} sl_npy_dtype;

/** An open .npy file, or an array of an .npz archive. Opaque. */
typedef struct sl_npy sl_npy;

/**
 * sl_npy_open - open @path and check its header: the magic, the version, the
 * header dictionary ('descr', 'fortran_order', 'shape', nothing else), a
 * supported dtype, C order, 1 to 8 dimensions whose product fits, and the
 * file's size: exactly the header plus the data (a truncated or longer file
 * is refused). Returns SL_OK, SL_ENOENT, SL_EMAGIC (not .npy), SL_EVERSION,
 * SL_EUNSUPPORTED (dtype, Fortran order), SL_ECORRUPT (header),
 * SL_ETRUNCATED, SL_ETOOBIG, SL_EIO, SL_ENOMEM.
 */
int sl_npy_open(const char *path, sl_npy **out, char *err, size_t errcap);

/**
 * sl_npz_open - open the array @member of the .npz archive at @path (what
 * numpy.savez and numpy.savez_compressed write: a zip file whose members are
 * .npy files; @member "x" is the member "x.npy", the array np.load(path)["x"]).
 * The archive is read with minizip; members stored or deflated (zip64 too)
 * are read, encrypted ones and other methods are not. The member is read once
 * through at open: its size must be what the archive says, its CRC-32 must
 * match, and it must be a .npy whose header accounts for exactly that size
 * (the checks of sl_npy_open()). The handle then works with every sl_npy_*
 * call, sl_npy_close() included.
 *
 * Cost of sl_npy_read() on it: a stored member (numpy.savez) is read at any
 * row directly. A deflated one (numpy.savez_compressed) can only be inflated
 * from its start: reads in increasing row order continue where the last one
 * stopped (a whole pass costs one inflation of the member), while a read that
 * starts before the last row read inflates the member again from its start
 * and skips forward to that row. Read a compressed array in order.
 *
 * @path:   the archive (a regular file); kept open until sl_npy_close().
 * @member: the array's name in the archive, without ".npy" (at most 250 bytes).
 * @out:    on success, the new handle, owned by the caller (sl_npy_close()).
 * Returns SL_OK; SL_ENOENT (no such file, or no such member: the reason lists
 * the members the archive holds), SL_EMAGIC (not a zip archive),
 * SL_ETRUNCATED (an empty file, an archive or a member cut short),
 * SL_ECORRUPT (a CRC-32 mismatch, deflate data that does not inflate, zip
 * headers that disagree), SL_EUNSUPPORTED (an encrypted member, another
 * compression method), SL_EINVAL, SL_EIO, SL_ENOMEM, and those of
 * sl_npy_open() for the .npy inside. On error *@out is untouched. Blocks on
 * file I/O; reading a large compressed member takes as long as inflating it.
 */
int sl_npz_open(const char *path, const char *member, sl_npy **out, char *err, size_t errcap);

/** sl_npy_close - NULL is a no-op. */
void sl_npy_close(sl_npy *a);

/** sl_npy_rows - the length of the first axis (1 for a 0-d array). */
uint64_t sl_npy_rows(const sl_npy *a);

/** sl_npy_row_size - values per row: the product of the other axes (1 for 1-d). */
uint64_t sl_npy_row_size(const sl_npy *a);

/** sl_npy_type - the stored element type. */
sl_npy_dtype sl_npy_type(const sl_npy *a);

/** sl_npy_shape - the shape into @shape (room for 8) and *@ndim. */
void sl_npy_shape(const sl_npy *a, uint64_t *shape, size_t *ndim);

/**
 * sl_npy_read - rows @first .. @first + @count - 1 as float32 into @out
 * (@count x sl_npy_row_size() floats). Reads only those rows. Refuses a row
 * range beyond the array (SL_EINVAL), a NaN or infinity (SL_ENONFINITE), a
 * value float32 cannot hold (SL_ERANGE: a float64 beyond float32's range, an
 * int64 beyond +-2^24), each with its row and column, and a file that
 * changed since it was opened (another size, inode or modification time:
 * SL_ESTATE); @out is then unspecified. On an .npz member, see
 * sl_npz_open() for what reading out of order costs.
 */
int sl_npy_read(sl_npy *a, uint64_t first, size_t count, float *out, char *err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_NPY_H */
