/*
 * npy_int.h - where the bytes of a .npy come from (not installed): a file of
 * its own (npy.c) or a member of a zip archive (npz.c, numpy.savez). The
 * header parser, the checks and the conversion in npy.c read through this
 * and do not know which it is.
 */
#ifndef STARLING_NPY_INT_H
#define STARLING_NPY_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "starling/npy.h"

typedef struct sl__npy_source sl__npy_source;

struct sl__npy_source {
    /*
     * Exactly @len bytes of the .npy from offset @off into @buf. SL_OK;
     * SL_ETRUNCATED (fewer bytes there), SL_ECORRUPT (bad compressed data, a
     * CRC mismatch), SL_EIO, SL_ENOMEM. Called with increasing offsets as the
     * rows are read; a source may be slower going back.
     */
    int (*read)(sl__npy_source *src, void *buf, size_t len, uint64_t off);
    /* Release everything, the descriptor included. */
    void (*close)(sl__npy_source *src);
    void *ctx;        /* the source's own state */
    int fd;           /* the file holding the bytes (the .npy, or the archive) */
    struct stat st;   /* @fd's identity when opened: a change since is refused */
    uint64_t size;    /* bytes of the .npy: the file's size, or the member's */
    const char *name; /* for messages: the path, or "archive.npz:member.npy" */
};

/*
 * sl__npy_open_source - check the .npy header read from @src (the magic, the
 * version, the dictionary, the dtype, the shape) against @src->size and make
 * the handle. Takes @src over: it is closed on failure, and by
 * sl_npy_close() after success. Statuses as sl_npy_open().
 */
int sl__npy_open_source(sl__npy_source *src, sl_npy **out, char *err, size_t errcap);

/* sl__npy_pread - exactly @len bytes at @off of @fd: SL_OK, SL_ETRUNCATED (the end), SL_EIO. */
int sl__npy_pread(int fd, void *buf, size_t len, uint64_t off);

#endif /* STARLING_NPY_INT_H */
