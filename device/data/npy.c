/*
 * npy.c - the .npy format (NumPy's numpy.lib.format, versions 1.0-3.0):
 * "\x93NUMPY", major, minor, a little-endian header length (u16 for 1.0, u32
 * after), then a Python dict literal padded with spaces and '\n':
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * then the data. The header is parsed strictly (the three keys, each once,
 * nothing else); the data is read a chunk at a time in increasing offsets,
 * converted to float32 and checked. The bytes come through a source
 * (npy_int.h): a file of its own, read with pread(), or a member of an .npz
 * archive (npz.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"
#include "npy_int.h"
#include "starling/npy.h"

#define MAX_HEADER 65536u
#define MAX_DIMS   8
#define CHUNK      65536u /* bytes read at a time */

struct sl_npy {
    sl__npy_source src;
    char path[256]; /* for messages (cut): the file, or "archive.npz:member.npy" */
    sl_npy_dtype dtype;
    size_t item;
    uint64_t shape[MAX_DIMS];
    size_t ndim;
    uint64_t rows, row_size;
    uint64_t data_off, data_len;
};

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A quoted Python string at @p (single or double quotes, no escapes) into @out. */
static const char *parse_str(const char *p, const char *end, char *out, size_t cap)
{
    char q;
    size_t n = 0;
    if (p >= end || (*p != '\'' && *p != '"'))
        return NULL;
    q = *p++;
    while (p < end && *p != q) {
        if (*p == '\\' || n + 1 >= cap)
            return NULL;
        out[n++] = *p++;
    }
    if (p >= end)
        return NULL;
    out[n] = '\0';
    return p + 1;
}

static const char *parse_shape(const char *p, const char *end, uint64_t *shape, size_t *ndim)
{
    size_t n = 0;
    if (p >= end || *p != '(')
        return NULL;
    p = skip_ws(p + 1, end);
    while (p < end && *p != ')') {
        uint64_t v = 0;
        if (*p < '0' || *p > '9' || n == MAX_DIMS)
            return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return NULL;
            v = v * 10 + (uint64_t)(*p++ - '0');
        }
        if (p < end && *p == 'L') /* Python 2 longs */
            p++;
        shape[n++] = v;
        p = skip_ws(p, end);
        if (p < end && *p == ',')
            p = skip_ws(p + 1, end);
        else if (p < end && *p != ')')
            return NULL;
    }
    if (p >= end)
        return NULL;
    *ndim = n;
    return p + 1;
}

/* The header dict: exactly 'descr', 'fortran_order' and 'shape'. */
static int parse_header(sl_npy *a, const char *h, size_t len, char *err, size_t errcap)
{
    const char *p = skip_ws(h, h + len), *end = h + len;
    char key[32], descr[16] = "";
    int seen = 0, fortran = -1;
    if (p >= end || *p != '{')
        return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: the header is not a dictionary",
                             a->path);
    p = skip_ws(p + 1, end);
    while (p < end && *p != '}') {
        int bit;
        if ((p = parse_str(p, end, key, sizeof key)) == NULL)
            goto bad;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            goto bad;
        p = skip_ws(p + 1, end);
        if (strcmp(key, "descr") == 0) {
            bit = 1;
            p = parse_str(p, end, descr, sizeof descr);
        } else if (strcmp(key, "fortran_order") == 0) {
            bit = 2;
            if ((size_t)(end - p) >= 5 && memcmp(p, "False", 5) == 0)
                fortran = 0, p += 5;
            else if ((size_t)(end - p) >= 4 && memcmp(p, "True", 4) == 0)
                fortran = 1, p += 4;
            else
                p = NULL;
        } else if (strcmp(key, "shape") == 0) {
            bit = 4;
            p = parse_shape(p, end, a->shape, &a->ndim);
        } else {
            return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: unknown header key '%s'", a->path,
                                 key);
        }
        if (p == NULL || (seen & bit))
            goto bad;
        seen |= bit;
        p = skip_ws(p, end);
        if (p < end && *p == ',')
            p = skip_ws(p + 1, end);
        else if (p < end && *p != '}')
            goto bad;
    }
    if (p >= end || seen != 7)
        goto bad;
    p = skip_ws(p + 1, end);
    if (p != end)
        goto bad;
    if (fortran)
        return sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                             "%s: Fortran order (save a C-ordered array: np.ascontiguousarray)",
                             a->path);
    if (strcmp(descr, "<f4") == 0)
        a->dtype = SL_NPY_F4, a->item = 4;
    else if (strcmp(descr, "<f8") == 0)
        a->dtype = SL_NPY_F8, a->item = 8;
    else if (strcmp(descr, "|u1") == 0 || strcmp(descr, "<u1") == 0)
        a->dtype = SL_NPY_U1, a->item = 1;
    else if (strcmp(descr, "<i8") == 0)
        a->dtype = SL_NPY_I8, a->item = 8;
    else
        return sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                             "%s: dtype '%s' (read: float32, float64, uint8, int64, little "
                             "endian)",
                             a->path, descr);
    return SL_OK;
bad:
    return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: the header does not parse", a->path);
}

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int sl__npy_pread(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    if (off > (uint64_t)INT64_MAX - len)
        return SL_ETRUNCATED;
    while (done < len) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? SL_ETRUNCATED : SL_EIO;
        done += (size_t)r;
    }
    return SL_OK;
}

/* The source of a .npy file of its own: pread() at the offset. */
static int file_read(sl__npy_source *src, void *buf, size_t len, uint64_t off)
{
    return sl__npy_pread(src->fd, buf, len, off);
}

static void file_close(sl__npy_source *src)
{
    close(src->fd);
}

int sl_npy_open(const char *path, sl_npy **out, char *err, size_t errcap)
{
    sl__npy_source src = {.read = file_read, .close = file_close, .fd = -1, .name = path};
    if (path == NULL || out == NULL)
        return SL_EINVAL;
    src.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src.fd < 0)
        return sl__data_errf(err, errcap, errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s", path,
                             strerror(errno));
    if (fstat(src.fd, &src.st) != 0 || !S_ISREG(src.st.st_mode)) {
        close(src.fd);
        return sl__data_errf(err, errcap, SL_EIO, "%s: not a regular file", path);
    }
    src.size = (uint64_t)src.st.st_size;
    return sl__npy_open_source(&src, out, err, errcap);
}

int sl__npy_open_source(sl__npy_source *src, sl_npy **out, char *err, size_t errcap)
{
    sl_npy *a;
    uint8_t pre[12];
    char *h = NULL;
    const char *path = src->name;
    uint32_t hlen;
    size_t pre_len;
    uint64_t count = 1;
    int rc;
    a = calloc(1, sizeof *a);
    if (a == NULL) {
        src->close(src);
        return SL_ENOMEM;
    }
    a->src = *src;
    snprintf(a->path, sizeof a->path, "%s", src->name);
    a->src.name = a->path;
    path = a->path;
    rc = a->src.read(&a->src, pre, 10, 0);
    if (rc != SL_OK || memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = sl__data_errf(err, errcap, rc == SL_EIO || rc == SL_ENOMEM ? rc : SL_EMAGIC,
                           "%s: not a .npy file (no \\x93NUMPY magic)", path);
        goto fail;
    }
    if (pre[6] == 1 && pre[7] == 0) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
        pre_len = 10;
    } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
        if ((rc = a->src.read(&a->src, pre + 10, 2, 10)) != SL_OK) {
            rc = sl__data_errf(err, errcap, rc, "%s: the header is cut short", path);
            goto fail;
        }
        hlen = le32(pre + 8);
        pre_len = 12;
    } else {
        rc = sl__data_errf(err, errcap, SL_EVERSION, "%s: .npy version %u.%u (read: 1.0-3.0)", path,
                           pre[6], pre[7]);
        goto fail;
    }
    if (hlen == 0 || hlen > MAX_HEADER) {
        rc = sl__data_errf(err, errcap, SL_ECORRUPT, "%s: a header of %u bytes", path, hlen);
        goto fail;
    }
    h = malloc(hlen);
    if (h == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    if ((rc = a->src.read(&a->src, h, hlen, pre_len)) != SL_OK) {
        rc = sl__data_errf(err, errcap, rc, "%s: the header is cut short", path);
        goto fail;
    }
    if ((rc = parse_header(a, h, hlen, err, errcap)) != SL_OK)
        goto fail;
    for (size_t d = 0; d < a->ndim; d++) {
        if (a->shape[d] != 0 && count > (UINT64_MAX / 16) / a->shape[d]) {
            rc = sl__data_errf(err, errcap, SL_ETOOBIG, "%s: the shape is too large", path);
            goto fail;
        }
        count *= a->shape[d];
    }
    a->rows = a->ndim ? a->shape[0] : 1;
    a->row_size = 1;
    for (size_t d = 1; d < a->ndim; d++)
        a->row_size *= a->shape[d];
    a->data_off = pre_len + hlen;
    a->data_len = count * a->item;
    if (a->src.size != a->data_off + a->data_len) {
        rc = sl__data_errf(
            err, errcap, a->src.size < a->data_off + a->data_len ? SL_ETRUNCATED : SL_ECORRUPT,
            "%s: %llu bytes where the header says %llu", path, (unsigned long long)a->src.size,
            (unsigned long long)(a->data_off + a->data_len));
        goto fail;
    }
    free(h);
    *out = a;
    return SL_OK;
fail:
    free(h);
    a->src.close(&a->src);
    free(a);
    return rc;
}

void sl_npy_close(sl_npy *a)
{
    if (a == NULL)
        return;
    a->src.close(&a->src);
    free(a);
}

uint64_t sl_npy_rows(const sl_npy *a)
{
    return a->rows;
}

uint64_t sl_npy_row_size(const sl_npy *a)
{
    return a->row_size;
}

sl_npy_dtype sl_npy_type(const sl_npy *a)
{
    return a->dtype;
}

void sl_npy_shape(const sl_npy *a, uint64_t *shape, size_t *ndim)
{
    memcpy(shape, a->shape, sizeof a->shape);
    *ndim = a->ndim;
}

/* @n values of @src (a->dtype, little endian) into floats; the first bad one's index. */
static int convert(const sl_npy *a, const uint8_t *src, size_t n, float *dst, size_t *bad)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = src + i * a->item;
        switch (a->dtype) {
        case SL_NPY_F4: {
            uint32_t u = le32(b);
            float f;
            memcpy(&f, &u, 4);
            if (!isfinite(f))
                return *bad = i, SL_ENONFINITE;
            dst[i] = f;
            break;
        }
        case SL_NPY_F8: {
            uint64_t u = (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
            double d;
            memcpy(&d, &u, 8);
            if (!isfinite(d))
                return *bad = i, SL_ENONFINITE;
            if (fabs(d) > 3.4028234663852886e38)
                return *bad = i, SL_ERANGE;
            dst[i] = (float)d;
            break;
        }
        case SL_NPY_U1:
            dst[i] = (float)b[0];
            break;
        case SL_NPY_I8: {
            int64_t v = (int64_t)((uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32);
            if (v > (1 << 24) || v < -(1 << 24))
                return *bad = i, SL_ERANGE;
            dst[i] = (float)v;
            break;
        }
        }
    }
    return SL_OK;
}

int sl_npy_read(sl_npy *a, uint64_t first, size_t count, float *out, char *err, size_t errcap)
{
    struct stat now;
    uint8_t *buf;
    uint64_t total, done = 0;
    int rc = SL_OK;
    if (a == NULL || (out == NULL && count > 0) || first > a->rows || count > a->rows - first)
        return SL_EINVAL;
    if (fstat(a->src.fd, &now) != 0 || now.st_size != a->src.st.st_size ||
        now.st_ino != a->src.st.st_ino || now.st_mtim.tv_sec != a->src.st.st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != a->src.st.st_mtim.tv_nsec)
        return sl__data_errf(err, errcap, SL_ESTATE, "%s: the file changed since it was opened",
                             a->path);
    total = (uint64_t)count * a->row_size;
    buf = malloc(CHUNK);
    if (buf == NULL)
        return SL_ENOMEM;
    while (done < total && rc == SL_OK) {
        size_t n = (size_t)((total - done) * a->item < CHUNK ? total - done : CHUNK / a->item);
        size_t bad = 0;
        rc = a->src.read(&a->src, buf, n * a->item,
                         a->data_off + (first * a->row_size + done) * a->item);
        if (rc == SL_ENOMEM)
            break;
        if (rc != SL_OK) {
            /* its size and identity were checked just now: it changed, or the disk failed */
            rc = sl__data_errf(err, errcap, SL_ESTATE, "%s: the file changed while it was read",
                               a->path);
            break;
        }
        rc = convert(a, buf, n, out + done, &bad);
        if (rc != SL_OK) {
            uint64_t at = first * a->row_size + done + bad;
            sl__data_errf(err, errcap, rc, "%s: row %llu, column %llu: %s", a->path,
                          (unsigned long long)(at / a->row_size),
                          (unsigned long long)(at % a->row_size),
                          rc == SL_ENONFINITE ? "not a finite number"
                                              : "out of float32's range (or beyond 2^24)");
        }
        done += n;
    }
    free(buf);
    return rc;
}
