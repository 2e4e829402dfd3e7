/*
 * idx.c - IDX image and label files (plain or gzip), normalisation, and the
 * Fashion-MNIST loader.
 *
 * IDX layout (big-endian): 0x00 0x00 <type> <ndims>, then ndims uint32
 * sizes, then the elements. Only unsigned bytes (type 0x08) are accepted:
 * images have 3 dims (n, rows, cols), labels 1 (n).
 *
 * Nothing in a header is trusted. The expected size is computed (with
 * overflow checks) from the header, but memory is only committed as data
 * actually arrives: the body buffer starts at 1 MiB and doubles up to the
 * declared size, so a header that claims 2^52 bytes in front of a 100-byte
 * file fails at once with SL_ETRUNCATED. Reading stops one byte past the
 * declared size, so a gzip bomb costs at most the declared size (plus the
 * zlib window) in memory and is rejected as trailing data.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "data_int.h"
#include "starling/data.h"

#define IDX_TYPE_UBYTE 0x08u
#define IDX_MAX_SIDE   4096u
#define IDX_MAX_N      ((uint64_t)1 << 28)
#define IDX_FIRST_BUF  ((size_t)1 << 20)  /* first body buffer; doubles as data arrives */
#define IDX_INBUF      ((size_t)64 << 10) /* file read size */

/* A byte source over a plain or gzip file; gzip members may be concatenated. */
typedef struct idx_src {
    FILE *file;
    const char *path;
    unsigned char *in; /* IDX_INBUF bytes read from the file */
    size_t in_len;     /* plain: valid bytes in @in */
    size_t in_pos;     /* plain: next unread byte of @in */
    int gz;            /* the file starts with the gzip magic 1f 8b */
    int zinit;         /* @zs needs inflateEnd() */
    int eof;           /* the file has no more bytes */
    int member_done;   /* the current gzip member ended cleanly */
    int gz_truncated;  /* the file ended inside a gzip member */
    z_stream zs;
} idx_src;

static void src_close(idx_src *src)
{
    if (src->zinit)
        inflateEnd(&src->zs);
    if (src->file != NULL)
        fclose(src->file);
    free(src->in);
    memset(src, 0, sizeof *src);
}

static int src_open(idx_src *src, const char *path, char *err, size_t errcap)
{
    int rc;
    memset(src, 0, sizeof *src);
    src->path = path;
    src->file = fopen(path, "rb");
    if (src->file == NULL) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return sl__data_errf(err, errcap, SL_ENOENT, "%s: no such file", path);
        int rc_open = sl_status_from_errno(e);
        return sl__data_errf(err, errcap, rc_open, "%s: cannot open: %s", path,
                             sl_strerror(rc_open));
    }
    src->in = malloc(IDX_INBUF);
    if (src->in == NULL) {
        rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    src->in_len = fread(src->in, 1, IDX_INBUF, src->file);
    if (src->in_len < IDX_INBUF) {
        if (ferror(src->file)) {
            rc = sl__data_errf(err, errcap, SL_EIO, "%s: read error", path);
            goto fail;
        }
        src->eof = 1;
    }
    src->gz = src->in_len >= 2 && src->in[0] == 0x1f && src->in[1] == 0x8b;
    if (src->gz) {
        /* 16 + MAX_WBITS: a gzip wrapper only, with its CRC-32 and length checked */
        if (inflateInit2(&src->zs, 16 + MAX_WBITS) != Z_OK) {
            rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: cannot start zlib", path);
            goto fail;
        }
        src->zinit = 1;
        src->zs.next_in = src->in;
        src->zs.avail_in = (uInt)src->in_len;
    }
    return SL_OK;
fail:
    src_close(src);
    return rc;
}

static int src_fill(idx_src *src, char *err, size_t errcap)
{
    size_t got = fread(src->in, 1, IDX_INBUF, src->file);
    if (got < IDX_INBUF) {
        if (ferror(src->file))
            return sl__data_errf(err, errcap, SL_EIO, "%s: read error", src->path);
        src->eof = 1;
    }
    src->zs.next_in = src->in;
    src->zs.avail_in = (uInt)got;
    return SL_OK;
}

static int src_read_gz(idx_src *src, unsigned char *dst, size_t len, size_t *got, char *err,
                       size_t errcap)
{
    size_t done = 0;
    int rc;
    while (done < len) {
        if (src->zs.avail_in == 0 && !src->eof && (rc = src_fill(src, err, errcap)) != SL_OK)
            return rc;
        if (src->member_done) {
            if (src->zs.avail_in == 0) {
                if (src->eof)
                    break;
                continue;
            }
            /* more bytes after a member: another member (`cat a.gz b.gz`), or garbage
             * that inflate rejects as a bad header */
            inflateReset(&src->zs);
            src->member_done = 0;
        }
        size_t want = len - done;
        if (want > UINT_MAX)
            want = UINT_MAX;
        src->zs.next_out = dst + done;
        src->zs.avail_out = (uInt)want;
        int zrc = inflate(&src->zs, Z_NO_FLUSH);
        done += want - src->zs.avail_out;
        if (zrc == Z_STREAM_END) {
            src->member_done = 1;
        } else if (zrc == Z_OK) {
            continue;
        } else if (zrc == Z_BUF_ERROR) {
            if (src->zs.avail_in == 0 && src->eof) {
                src->gz_truncated = 1;
                break;
            }
            if (src->zs.avail_in != 0)
                return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: corrupt gzip data", src->path);
        } else if (zrc == Z_MEM_ERROR) {
            return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory in zlib", src->path);
        } else {
            return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: corrupt gzip data: %s", src->path,
                                 src->zs.msg != NULL ? src->zs.msg : "stream error");
        }
    }
    *got = done;
    return SL_OK;
}

/* Read up to @len bytes; *@got < @len only at the end of the data (or where a
 * gzip member is cut short, which sets gz_truncated). */
static int src_read(idx_src *src, void *dst, size_t len, size_t *got, char *err, size_t errcap)
{
    unsigned char *out = dst;
    size_t done;
    if (src->gz)
        return src_read_gz(src, out, len, got, err, errcap);
    done = src->in_len - src->in_pos;
    if (done > len)
        done = len;
    memcpy(out, src->in + src->in_pos, done);
    src->in_pos += done;
    if (done < len && !src->eof) {
        size_t more = fread(out + done, 1, len - done, src->file);
        if (more < len - done) {
            if (ferror(src->file))
                return sl__data_errf(err, errcap, SL_EIO, "%s: read error", src->path);
            src->eof = 1;
        }
        done += more;
    }
    *got = done;
    return SL_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Read and check the header of an IDX file with @ndims dimensions into @dims. */
static int idx_header(idx_src *src, unsigned ndims, uint64_t dims[3], char *err, size_t errcap)
{
    unsigned char head[16];
    size_t want = 4 + 4 * (size_t)ndims, got;
    int rc = src_read(src, head, 4, &got, err, errcap);
    if (rc != SL_OK)
        return rc;
    if (got == 4 && (head[0] != 0 || head[1] != 0))
        return sl__data_errf(err, errcap, SL_EMAGIC,
                             "%s: not an IDX file (magic 0x%02x%02x%02x%02x)", src->path, head[0],
                             head[1], head[2], head[3]);
    if (got == 4 && head[2] != IDX_TYPE_UBYTE)
        return sl__data_errf(err, errcap, SL_EMAGIC,
                             "%s: IDX element type 0x%02x, expected 0x08 (unsigned byte)",
                             src->path, head[2]);
    if (got == 4 && head[3] != ndims)
        return sl__data_errf(err, errcap, SL_EMAGIC, "%s: IDX file has %u dimensions, expected %u",
                             src->path, head[3], ndims);
    if (got == 4) {
        size_t more;
        if ((rc = src_read(src, head + 4, want - 4, &more, err, errcap)) != SL_OK)
            return rc;
        got += more;
    }
    if (got < want)
        return sl__data_errf(err, errcap, SL_ETRUNCATED,
                             "%s: truncated: header needs %zu bytes, got %zu", src->path, want,
                             got);
    for (unsigned d = 0; d < ndims; d++)
        dims[d] = be32(head + 4 + 4 * d);
    if (dims[0] == 0)
        return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: declares no samples", src->path);
    if (dims[0] > IDX_MAX_N)
        return sl__data_errf(err, errcap, SL_ETOOBIG,
                             "%s: declares %llu samples, more than the limit 2^28", src->path,
                             (unsigned long long)dims[0]);
    for (unsigned d = 1; d < ndims; d++) {
        if (dims[d] == 0)
            return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: dimension %u is zero", src->path,
                                 d);
        if (dims[d] > IDX_MAX_SIDE)
            return sl__data_errf(err, errcap, SL_ETOOBIG,
                                 "%s: dimension %u is %llu, more than the limit %u", src->path, d,
                                 (unsigned long long)dims[d], IDX_MAX_SIDE);
    }
    return SL_OK;
}

/*
 * Read exactly @body bytes after a header of @head bytes into a new buffer,
 * then make sure the data ends there.
 */
static int idx_body(idx_src *src, size_t head, size_t body, unsigned char **out, char *err,
                    size_t errcap)
{
    size_t cap = body < IDX_FIRST_BUF ? body : IDX_FIRST_BUF, have = 0, got;
    unsigned char extra, *buf = malloc(cap), *grown;
    int rc;
    if (buf == NULL)
        return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", src->path);
    for (;;) {
        if ((rc = src_read(src, buf + have, cap - have, &got, err, errcap)) != SL_OK)
            goto fail;
        have += got;
        if (have < cap || cap == body)
            break;
        cap = cap <= body / 2 ? cap * 2 : body;
        if ((grown = realloc(buf, cap)) == NULL) {
            rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", src->path);
            goto fail;
        }
        buf = grown;
    }
    if (have < body) {
        rc = sl__data_errf(err, errcap, SL_ETRUNCATED,
                           "%s: truncated: expected %llu bytes, got %llu", src->path,
                           (unsigned long long)head + body, (unsigned long long)head + have);
        goto fail;
    }
    if ((rc = src_read(src, &extra, 1, &got, err, errcap)) != SL_OK)
        goto fail;
    if (got != 0) {
        rc = sl__data_errf(err, errcap, SL_ECORRUPT, "%s: trailing data after %llu bytes",
                           src->path, (unsigned long long)head + body);
        goto fail;
    }
    if (src->gz_truncated) {
        rc = sl__data_errf(err, errcap, SL_ETRUNCATED,
                           "%s: truncated: the gzip stream ends without its trailer", src->path);
        goto fail;
    }
    *out = buf;
    return SL_OK;
fail:
    free(buf);
    return rc;
}

int sl_data_load_idx(const char *images_path, const char *labels_path, float mean, float std,
                     sl_dataset **out, char *err, size_t errcap)
{
    idx_src images, labels;
    uint64_t idims[3] = {0}, ldims[3] = {0};
    unsigned char *pixels = NULL, *tags = NULL;
    sl_dataset *ds = NULL;
    float lut[256];
    uint64_t total;
    size_t n, pixel_count, max_label = 0;
    int rc;

    if (images_path == NULL || labels_path == NULL || out == NULL)
        return sl__data_errf(err, errcap, SL_EINVAL, "load_idx: NULL argument");
    if (!isfinite(mean) || !isfinite(std) || !(std > 0.0f))
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "load_idx: mean must be finite and std finite and > 0");
    memset(&images, 0, sizeof images);
    memset(&labels, 0, sizeof labels);
    if ((rc = src_open(&images, images_path, err, errcap)) != SL_OK)
        return rc;
    if ((rc = idx_header(&images, 3, idims, err, errcap)) != SL_OK)
        goto done;
    if ((rc = src_open(&labels, labels_path, err, errcap)) != SL_OK)
        goto done;
    if ((rc = idx_header(&labels, 1, ldims, err, errcap)) != SL_OK)
        goto done;
    if (idims[0] != ldims[0]) {
        rc = sl__data_errf(err, errcap, SL_ECORRUPT, "%s has %llu images but %s has %llu labels",
                           images_path, (unsigned long long)idims[0], labels_path,
                           (unsigned long long)ldims[0]);
        goto done;
    }
    /* at most 2^28 * 4096 * 4096 = 2^52: no overflow in 64 bits, but maybe in size_t */
    total = idims[0] * idims[1] * idims[2];
    if (total > (SIZE_MAX - 16) / sizeof(float)) {
        rc = sl__data_errf(err, errcap, SL_ETOOBIG, "%s: %llu pixels do not fit in memory",
                           images_path, (unsigned long long)total);
        goto done;
    }
    n = (size_t)idims[0];
    pixel_count = (size_t)total;
    if ((rc = idx_body(&images, 16, pixel_count, &pixels, err, errcap)) != SL_OK)
        goto done;
    if ((rc = idx_body(&labels, 8, n, &tags, err, errcap)) != SL_OK)
        goto done;

    ds = calloc(1, sizeof *ds);
    if (ds == NULL || (ds->x = malloc(pixel_count * sizeof(float))) == NULL ||
        (ds->y = malloc(n * sizeof(int32_t))) == NULL) {
        rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory for %zu samples", images_path,
                           n);
        goto done;
    }
    for (unsigned p = 0; p < 256; p++)
        lut[p] = ((float)p / 255.0f - mean) / std;
    for (size_t i = 0; i < pixel_count; i++)
        ds->x[i] = lut[pixels[i]];
    for (size_t i = 0; i < n; i++) {
        ds->y[i] = tags[i];
        if (tags[i] > max_label)
            max_label = tags[i];
    }
    ds->n = n;
    ds->rows = (size_t)idims[1];
    ds->cols = (size_t)idims[2];
    ds->classes = max_label + 1;
    *out = ds;
    ds = NULL;
    rc = SL_OK;
done:
    sl_dataset_free(ds);
    free(pixels);
    free(tags);
    src_close(&images);
    src_close(&labels);
    return rc;
}

#define FASHION_HINT "install it: apt-get install dataset-fashion-mnist"

int sl_data_load_fashion_mnist(const char *dir, int train, sl_dataset **out, char *err,
                               size_t errcap)
{
    const char *prefix = train ? "train" : "t10k";
    char images[4096], labels[4096], inner[512];
    struct stat st;
    int rc;

    if (out == NULL)
        return sl__data_errf(err, errcap, SL_EINVAL, "load_fashion_mnist: NULL argument");
    if (dir == NULL) {
        const char *env = getenv("STARLING_FASHION_MNIST_DIR");
        dir = env != NULL && env[0] != '\0' ? env : SL_DATA_FASHION_MNIST_DIR;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sl__data_errf(err, errcap, SL_ENOENT,
                             "Fashion-MNIST not found: no directory %s; " FASHION_HINT
                             " (or set STARLING_FASHION_MNIST_DIR)",
                             dir);
    int li = snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    int ll = snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    if (li < 0 || ll < 0 || (size_t)li >= sizeof images || (size_t)ll >= sizeof labels)
        return sl__data_errf(err, errcap, SL_EINVAL, "Fashion-MNIST: directory name too long");
    inner[0] = '\0';
    rc = sl_data_load_idx(images, labels, SL_DATA_FASHION_MEAN, SL_DATA_FASHION_STD, out, inner,
                          sizeof inner);
    if (rc == SL_ENOENT)
        return sl__data_errf(err, errcap, rc, "Fashion-MNIST: %s; " FASHION_HINT, inner);
    if (rc != SL_OK)
        return sl__data_errf(err, errcap, rc, "%s", inner);
    return SL_OK;
}

void sl_dataset_free(sl_dataset *ds)
{
    if (ds == NULL)
        return;
    free(ds->x);
    free(ds->y);
    free(ds);
}
