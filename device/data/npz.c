/*
 * npz.c - an array inside an .npz archive (numpy.savez: stored members;
 * numpy.savez_compressed: deflated ones), a zip file of .npy members read
 * with minizip's unzip API; npy.c parses and checks the .npy through the
 * source made here (npy_int.h).
 *
 * minizip reads the archive through I/O callbacks over the one descriptor
 * opened here (pread() at a position of our own), so the file whose identity
 * npy.c checks on every read is the file minizip reads, and no FILE offset is
 * shared. A stored member's bytes are then read with pread() at any offset.
 * A deflated member can only be inflated from its start: the source keeps it
 * open at the last offset read, goes on from there when the next read starts
 * at or after it (skipping forward through a scratch buffer) and opens it
 * again when a read starts before it.
 *
 * The member is read once through at open, so its CRC-32 and its size are
 * known good before any row is returned; every later pass that reaches the
 * member's end has its CRC-32 checked again by minizip.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <minizip/unzip.h>

#include "data_int.h"
#include "npy_int.h"
#include "starling/npy.h"

#define MAX_MEMBER 250u     /* bytes of an array's name (".npy" not counted) */
#define SCRATCH    65536u   /* bytes inflated at a time when skipping or checking */
#define READ_MAX   1048576u /* bytes asked of unzReadCurrentFile() at a time (it returns int) */

typedef struct npz_member {
    int fd;
    uint64_t file_size; /* at open */
    uint64_t io_pos;    /* minizip's position in the archive */
    int io_failed;      /* a pread() failed (not the end of the file) */
    int io_short;       /* the last read stopped short (the end of the file, or a failure) */
    unzFile zip;
    int deflated;
    uint64_t size;    /* the member's bytes, uncompressed */
    uint64_t data_at; /* stored: where its bytes start in the archive */
    int open;         /* open in minizip, @pos bytes inflated */
    uint64_t pos;
    uint8_t *scratch;
    char name[300]; /* "archive.npz:member.npy" for messages (cut) */
} npz_member;

/* minizip's I/O over m->fd. @opaque is the member; the "stream" is too. */
static voidpf ZCALLBACK io_open(voidpf opaque, const void *filename, int mode)
{
    (void)filename;
    return (mode & ZLIB_FILEFUNC_MODE_WRITE) ? NULL : opaque;
}

static uLong ZCALLBACK io_read(voidpf opaque, voidpf stream, void *buf, uLong size)
{
    npz_member *m = opaque;
    uLong done = 0;
    (void)stream;
    while (done < size && m->io_pos <= (uint64_t)INT64_MAX - size) {
        ssize_t r = pread(m->fd, (char *)buf + done, size - done, (off_t)(m->io_pos + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            m->io_failed = 1;
        if (r <= 0)
            break;
        done += (uLong)r;
    }
    m->io_pos += done;
    m->io_short = done < size;
    return done;
}

static uLong ZCALLBACK io_write(voidpf opaque, voidpf stream, const void *buf, uLong size)
{
    (void)opaque, (void)stream, (void)buf, (void)size;
    return 0;
}

static ZPOS64_T ZCALLBACK io_tell(voidpf opaque, voidpf stream)
{
    (void)stream;
    return ((npz_member *)opaque)->io_pos;
}

static long ZCALLBACK io_seek(voidpf opaque, voidpf stream, ZPOS64_T off, int origin)
{
    npz_member *m = opaque;
    (void)stream;
    if (origin == ZLIB_FILEFUNC_SEEK_SET)
        m->io_pos = off;
    else if (origin == ZLIB_FILEFUNC_SEEK_CUR)
        m->io_pos += off;
    else if (origin == ZLIB_FILEFUNC_SEEK_END)
        m->io_pos = m->file_size + off;
    else
        return -1;
    return 0;
}

static int ZCALLBACK io_close(voidpf opaque, voidpf stream)
{
    (void)opaque, (void)stream; /* the descriptor is closed with the member */
    return 0;
}

/*
 * minizip asks this after a short read of a header field and takes a field
 * cut by the end of the file for zeros unless it says "error" (ferror() does
 * not, at the end of a FILE): a short read is an error here, so an archive
 * cut short anywhere in its directory does not open.
 */
static int ZCALLBACK io_error(voidpf opaque, voidpf stream)
{
    const npz_member *m = opaque;
    (void)stream;
    return m->io_short || m->io_failed;
}

/* A minizip or zlib status as ours. */
static int unz_status(const npz_member *m, int r)
{
    switch (r) {
    case UNZ_ERRNO: /* a short read: the end of the file, or the disk */
        return m->io_failed ? SL_EIO : SL_ETRUNCATED;
    case Z_BUF_ERROR: /* the compressed bytes ran out before the stream ended */
        return SL_ETRUNCATED;
    case Z_MEM_ERROR:
    case UNZ_INTERNALERROR: /* minizip's allocations */
        return SL_ENOMEM;
    default: /* UNZ_CRCERROR, UNZ_BADZIPFILE, Z_DATA_ERROR, ... */
        return SL_ECORRUPT;
    }
}

static void member_shut(npz_member *m)
{
    if (m->open)
        unzCloseCurrentFile(m->zip);
    m->open = 0;
}

static int member_start(npz_member *m)
{
    int r;
    member_shut(m);
    m->io_failed = 0;
    if ((r = unzOpenCurrentFile(m->zip)) != UNZ_OK)
        return unz_status(m, r);
    m->open = 1;
    m->pos = 0;
    return SL_OK;
}

/* At the member's end: closing it checks the CRC-32 of everything inflated. */
static int member_finish(npz_member *m)
{
    int r = unzCloseCurrentFile(m->zip);
    m->open = 0;
    return r == UNZ_OK ? SL_OK : r == UNZ_CRCERROR ? SL_ECHECKSUM : unz_status(m, r);
}

/* The next @len bytes of the open member. */
static int member_next(npz_member *m, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        unsigned ask = len - done > READ_MAX ? READ_MAX : (unsigned)(len - done);
        int r = unzReadCurrentFile(m->zip, (char *)buf + done, ask);
        if (r <= 0)
            return r == 0 ? SL_ETRUNCATED : unz_status(m, r);
        done += (size_t)r;
        m->pos += (uint64_t)r;
    }
    return SL_OK;
}

static int member_read(sl__npy_source *src, void *buf, size_t len, uint64_t off)
{
    npz_member *m = src->ctx;
    int rc = SL_OK;
    if (off > m->size || len > m->size - off)
        return SL_ETRUNCATED;
    if (len == 0)
        return SL_OK;
    if (!m->deflated)
        return sl__npy_pread(m->fd, buf, len, m->data_at + off);
    if (!m->open || off < m->pos)
        rc = member_start(m);
    while (rc == SL_OK && m->pos < off) {
        uint64_t gap = off - m->pos;
        rc = member_next(m, m->scratch, gap < SCRATCH ? (size_t)gap : SCRATCH);
    }
    if (rc == SL_OK)
        rc = member_next(m, buf, len);
    if (rc == SL_OK && m->pos == m->size)
        rc = member_finish(m);
    if (rc == SL_ECHECKSUM)
        rc = SL_ECORRUPT;
    if (rc != SL_OK)
        member_shut(m); /* the next read starts over */
    return rc;
}

static void member_free(npz_member *m)
{
    if (m->zip != NULL) {
        member_shut(m);
        unzClose(m->zip);
    }
    if (m->fd >= 0)
        close(m->fd);
    free(m->scratch);
    free(m);
}

static void member_close(sl__npy_source *src)
{
    member_free(src->ctx);
}

/* Why minizip would not open @path as a zip archive: look at its first bytes. */
static int not_zip(const npz_member *m, const char *path, const char *member, char *err,
                   size_t errcap)
{
    uint8_t head[6] = {0};
    if (m->file_size == 0)
        return sl__data_errf(err, errcap, SL_ETRUNCATED, "%s: an empty file, not an .npz archive",
                             path);
    sl__npy_pread(m->fd, head, m->file_size < 6 ? (size_t)m->file_size : 6, 0);
    /* an end-of-directory record first: numpy.savez() of nothing (minizip opens no empty zip) */
    if (memcmp(head, "PK\x05\x06", 4) == 0 && m->file_size >= 22)
        return sl__data_errf(err, errcap, SL_ENOENT,
                             "%s: no array '%s' (the archive holds: nothing)", path, member);
    if (memcmp(head, "PK\x03\x04", 4) == 0)
        return sl__data_errf(err, errcap, SL_ETRUNCATED,
                             "%s: a zip archive without its central directory (cut short?)", path);
    if (memcmp(head, "\x93NUMPY", 6) == 0)
        return sl__data_errf(err, errcap, SL_EMAGIC,
                             "%s: a .npy file, not an .npz archive (open it as .npy)", path);
    return sl__data_errf(err, errcap, SL_EMAGIC, "%s: not an .npz archive (not a zip file)", path);
}

/* The archive's members, ".npy" dropped, into @out: "a, b, c" (cut to @cap). */
static void list_members(unzFile zip, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int r = unzGoToFirstFile(zip); r == UNZ_OK && used + 1 < cap; r = unzGoToNextFile(zip)) {
        char name[256];
        unz_file_info64 info;
        size_t len;
        int w;
        if (unzGetCurrentFileInfo64(zip, &info, name, sizeof name, NULL, 0, NULL, 0) != UNZ_OK)
            break;
        len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, ".npy") == 0)
            name[len - 4] = '\0';
        w = snprintf(out + used, cap - used, "%s'%s'", used ? ", " : "", name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* Read the member once through: its size and CRC-32, and a stored one's place. */
static int member_check(npz_member *m, char *err, size_t errcap)
{
    uint64_t left = m->size;
    int rc = member_start(m);
    if (rc != SL_OK)
        return sl__data_errf(err, errcap, rc, "%s: %s", m->name,
                             rc == SL_ECORRUPT ? "its local header disagrees with the archive's "
                                                 "directory"
                                               : "its local header cannot be read");
    if (!m->deflated)
        m->data_at = unzGetCurrentFileZStreamPos64(m->zip);
    while (left > 0 && rc == SL_OK) {
        size_t n = left < SCRATCH ? (size_t)left : SCRATCH;
        rc = member_next(m, m->scratch, n);
        left -= n;
    }
    if (rc == SL_OK)
        rc = member_finish(m);
    member_shut(m);
    switch (rc) {
    case SL_OK:
        return SL_OK;
    case SL_ETRUNCATED:
        return sl__data_errf(err, errcap, rc,
                             "%s: cut short: %llu bytes of the %llu the archive lists", m->name,
                             (unsigned long long)m->pos, (unsigned long long)m->size);
    case SL_ECHECKSUM:
        return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: CRC-32 mismatch (corrupt member)",
                             m->name);
    case SL_ECORRUPT:
        return sl__data_errf(err, errcap, rc, "%s: corrupt compressed data after %llu bytes",
                             m->name, (unsigned long long)m->pos);
    default:
        return sl__data_errf(err, errcap, rc, "%s: %s", m->name,
                             rc == SL_ENOMEM ? "out of memory" : "read error");
    }
}

int sl_npz_open(const char *path, const char *member, sl_npy **out, char *err, size_t errcap)
{
    zlib_filefunc64_def io = {io_open, io_read,  io_write, io_tell,
                              io_seek, io_close, io_error, NULL};
    sl__npy_source src = {.read = member_read, .close = member_close};
    unz_file_info64 info;
    char entry[MAX_MEMBER + 8];
    npz_member *m;
    size_t mlen;
    int r, rc;
    if (path == NULL || member == NULL || out == NULL)
        return SL_EINVAL;
    mlen = strlen(member);
    if (mlen == 0 || mlen > MAX_MEMBER)
        return sl__data_errf(err, errcap, SL_EINVAL, "%s: an array name of %zu bytes (1 to %u)",
                             path, mlen, MAX_MEMBER);
    snprintf(entry, sizeof entry, "%s.npy", member);
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return SL_ENOMEM;
    snprintf(m->name, sizeof m->name, "%s:%s", path, entry);
    m->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (m->fd < 0) {
        rc = sl__data_errf(err, errcap, errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s", path,
                           strerror(errno));
        goto fail;
    }
    if (fstat(m->fd, &src.st) != 0 || !S_ISREG(src.st.st_mode)) {
        rc = sl__data_errf(err, errcap, SL_EIO, "%s: not a regular file", path);
        goto fail;
    }
    m->file_size = (uint64_t)src.st.st_size;
    if ((m->scratch = malloc(SCRATCH)) == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    io.opaque = m;
    if ((m->zip = unzOpen2_64(path, &io)) == NULL) {
        rc = not_zip(m, path, member, err, errcap);
        goto fail;
    }
    r = unzLocateFile(m->zip, entry, 1);
    if (r == UNZ_END_OF_LIST_OF_FILE) {
        char names[200];
        list_members(m->zip, names, sizeof names);
        rc = sl__data_errf(err, errcap, SL_ENOENT, "%s: no array '%s' (the archive holds: %s)",
                           path, member, names[0] ? names : "nothing");
        goto fail;
    }
    if (r == UNZ_OK)
        r = unzGetCurrentFileInfo64(m->zip, &info, NULL, 0, NULL, 0, NULL, 0);
    if (r != UNZ_OK) {
        rc = sl__data_errf(err, errcap, unz_status(m, r),
                           "%s: the archive's directory does not read", path);
        goto fail;
    }
    if (info.flag & 1u) {
        rc = sl__data_errf(err, errcap, SL_EUNSUPPORTED, "%s: encrypted", m->name);
        goto fail;
    }
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
        rc = sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                           "%s: compression method %lu (read: stored, deflate)", m->name,
                           (unsigned long)info.compression_method);
        goto fail;
    }
    if (info.compression_method == 0 && info.compressed_size != info.uncompressed_size) {
        rc = sl__data_errf(
            err, errcap, SL_ECORRUPT, "%s: stored, but %llu bytes in the archive for %llu", m->name,
            (unsigned long long)info.compressed_size, (unsigned long long)info.uncompressed_size);
        goto fail;
    }
    m->deflated = info.compression_method == Z_DEFLATED;
    m->size = info.uncompressed_size;
    if ((rc = member_check(m, err, errcap)) != SL_OK)
        goto fail;
    src.ctx = m;
    src.fd = m->fd;
    src.size = m->size;
    src.name = m->name;
    return sl__npy_open_source(&src, out, err, errcap);
fail:
    member_free(m);
    return rc;
}
