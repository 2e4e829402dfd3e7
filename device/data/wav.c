/*
 * wav.c - RIFF/WAVE PCM files (starling/wav.h).
 *
 * Every size comes from the file and is checked against the file's size
 * before it is used; the samples are read with pread() into a buffer of at
 * most @max samples and converted only when all of them arrived, so a
 * failed call writes nothing.
 *
 * Streams: a writer that cannot seek back leaves its placeholder sizes in
 * the header. espeak-ng writes RIFF 0x7FFFF024 and data 0x7FFFF000 (seen:
 * `espeak-ng --stdout word > f.wav`); FFmpeg's RIFF writer 0xFFFFFFFF. Only
 * these two, and only when larger than the rest of the file, stand for
 * "to the end of the file"; any other data size beyond the end is a
 * truncated file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"
#include "starling/wav.h"

#define PLACEHOLDER_FFMPEG 0xFFFFFFFFu
#define PLACEHOLDER_ESPEAK 0x7FFFF000u
#define FMT_READ           40 /* bytes of a fmt chunk used: WAVE_FORMAT_EXTENSIBLE's */

enum { ENC_PCM, ENC_FLOAT, ENC_OTHER };

typedef struct wav_fmt {
    int enc;
    unsigned tag, channels, rate, block, bits;
} wav_fmt;

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static unsigned le16(const uint8_t *b)
{
    return (unsigned)b[0] | (unsigned)b[1] << 8;
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
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

/* A chunk id for a message: control and non-ASCII bytes as '?'. */
static void show_id(const uint8_t *id, char out[5])
{
    for (int i = 0; i < 4; i++)
        out[i] = id[i] >= 0x20 && id[i] < 0x7f ? (char)id[i] : '?';
    out[4] = '\0';
}

static int parse_fmt(const char *path, const uint8_t *b, uint32_t size, wav_fmt *f, char *err,
                     size_t errcap)
{
    /* KSDATAFORMAT_SUBTYPE_*: the format code, then these 14 bytes */
    static const uint8_t guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                          0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};
    unsigned code;
    f->tag = code = le16(b);
    f->channels = le16(b + 2);
    f->rate = le32(b + 4);
    f->block = le16(b + 12);
    f->bits = le16(b + 14);
    if (f->tag == 0xfffe) {
        if (size < FMT_READ || le16(b + 16) < 22)
            return sl__data_errf(err, errcap, SL_ECORRUPT,
                                 "%s: a WAVE_FORMAT_EXTENSIBLE fmt chunk of %u bytes", path, size);
        code = memcmp(b + 26, guid_tail, sizeof guid_tail) == 0 ? le16(b + 24) : 0xffff;
    }
    f->enc = code == 1 ? ENC_PCM : code == 3 ? ENC_FLOAT : ENC_OTHER;
    if (f->channels == 0 || f->rate == 0 || f->bits == 0)
        return sl__data_errf(err, errcap, SL_ECORRUPT,
                             "%s: a fmt chunk of %u channels, %u Hz, %u-bit samples", path,
                             f->channels, f->rate, f->bits);
    return SL_OK;
}

/* What the file is and, when that is not what is wanted, what is. */
static int check_fmt(const char *path, const wav_fmt *f, unsigned rate, char *err, size_t errcap)
{
    char is[96], want[96] = "", channels[32];
    int enc_ok = f->enc == ENC_PCM && (f->bits == 16 || f->bits == 8);
    size_t len = 0;
    if (f->enc == ENC_PCM)
        snprintf(is, sizeof is, "%u-bit PCM", f->bits);
    else if (f->enc == ENC_FLOAT)
        snprintf(is, sizeof is, "%u-bit float", f->bits);
    else
        snprintf(is, sizeof is, "format 0x%04x (%u-bit)", f->tag, f->bits);
    if (f->channels == 1)
        snprintf(channels, sizeof channels, "mono");
    else
        snprintf(channels, sizeof channels, "%u channels", f->channels);
    if (!enc_ok)
        len += (size_t)snprintf(want + len, sizeof want - len, "16-bit PCM");
    if (f->channels != 1)
        len += (size_t)snprintf(want + len, sizeof want - len, "%smono", len ? ", " : "");
    if (f->rate != rate)
        snprintf(want + len, sizeof want - len, "%s%u Hz", len ? ", " : "", rate);
    if (want[0] != '\0')
        return sl__data_errf(err, errcap, SL_EUNSUPPORTED, "%s: %s, %s, %u Hz; the task wants %s",
                             path, is, channels, f->rate, want);
    if (f->block != f->bits / 8)
        return sl__data_errf(err, errcap, SL_ECORRUPT,
                             "%s: a block align of %u bytes for mono %u-bit samples", path,
                             f->block, f->bits);
    return SL_OK;
}

/* Walk the chunks: the format into @f, the samples' place into @data_off, @data_len. */
static int walk(int fd, const char *path, uint64_t size, wav_fmt *f, uint64_t *data_off,
                uint64_t *data_len, int *stream, char *err, size_t errcap)
{
    uint64_t pos = 12;
    int have_fmt = 0, have_data = 0, rc;
    while (!(have_fmt && have_data)) {
        uint8_t head[8], fmt[FMT_READ];
        uint32_t csize;
        uint64_t left;
        char id[5];
        if (pos >= size)
            return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: no %s chunk", path,
                                 have_fmt ? "data" : "fmt");
        if (size - pos < 8)
            return sl__data_errf(err, errcap, SL_ETRUNCATED,
                                 "%s: cut short in a chunk header at byte %llu", path,
                                 (unsigned long long)pos);
        if ((rc = read_at(fd, head, 8, pos)) != SL_OK)
            return sl__data_errf(err, errcap, SL_EIO, "%s: read error", path);
        csize = le32(head + 4);
        left = size - pos - 8;
        show_id(head, id);
        if (memcmp(head, "data", 4) == 0) {
            if (have_data)
                return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: two data chunks", path);
            if (csize > left && csize != PLACEHOLDER_FFMPEG && csize != PLACEHOLDER_ESPEAK)
                return sl__data_errf(err, errcap, SL_ETRUNCATED,
                                     "%s: the data chunk says %u bytes, the file has %llu after "
                                     "its header",
                                     path, csize, (unsigned long long)left);
            *stream = csize > left;
            *data_off = pos + 8;
            *data_len = *stream ? left : csize;
            have_data = 1;
            pos = *stream ? size : pos + 8 + csize + (csize & 1);
            continue;
        }
        if (csize > left)
            return sl__data_errf(err, errcap, SL_ETRUNCATED,
                                 "%s: a '%s' chunk of %u bytes, the file has %llu after its header",
                                 path, id, csize, (unsigned long long)left);
        if (memcmp(head, "fmt ", 4) == 0) {
            if (have_fmt)
                return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: two fmt chunks", path);
            if (csize < 16)
                return sl__data_errf(err, errcap, SL_ECORRUPT, "%s: a fmt chunk of %u bytes", path,
                                     csize);
            memset(fmt, 0, sizeof fmt);
            if ((rc = read_at(fd, fmt, csize < FMT_READ ? csize : FMT_READ, pos + 8)) != SL_OK)
                return sl__data_errf(err, errcap, SL_EIO, "%s: read error", path);
            if ((rc = parse_fmt(path, fmt, csize, f, err, errcap)) != SL_OK)
                return rc;
            have_fmt = 1;
        }
        pos += 8 + (uint64_t)csize + (csize & 1);
    }
    return SL_OK;
}

int sl_wav_load(const char *path, unsigned rate, float *out, size_t max, size_t *n, char *err,
                size_t errcap)
{
    uint8_t riff[12], *buf = NULL;
    struct stat st;
    wav_fmt f = {0};
    uint64_t size, data_off = 0, data_len = 0, total;
    size_t count;
    int fd, rc, stream = 0;
    if (path == NULL || n == NULL || rate == 0 || (out == NULL && max > 0))
        return SL_EINVAL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl__data_errf(err, errcap, errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s", path,
                             strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = sl__data_errf(err, errcap, SL_EIO, "%s: not a regular file", path);
        goto done;
    }
    size = (uint64_t)st.st_size;
    if (size == 0) {
        rc = sl__data_errf(err, errcap, SL_EMAGIC, "%s: the file is empty (not a WAV file)", path);
        goto done;
    }
    memset(riff, 0, sizeof riff);
    if ((rc = read_at(fd, riff, size < 12 ? (size_t)size : 12, 0)) != SL_OK) {
        rc = sl__data_errf(err, errcap, SL_EIO, "%s: read error", path);
        goto done;
    }
    if (size < 12 && memcmp(riff, "RIFF", size < 4 ? (size_t)size : 4) == 0 &&
        (size <= 8 || memcmp(riff + 8, "WAVE", (size_t)size - 8) == 0)) {
        rc = sl__data_errf(err, errcap, SL_ETRUNCATED,
                           "%s: cut short in the RIFF header (%llu "
                           "bytes)",
                           path, (unsigned long long)size);
        goto done;
    }
    if (memcmp(riff, "RIFX", 4) == 0 || memcmp(riff, "RF64", 4) == 0) {
        rc = sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                           "%s: a %.4s file (read: RIFF WAVE, "
                           "little endian, under 4 GiB)",
                           path, (const char *)riff);
        goto done;
    }
    if (memcmp(riff, "RIFF", 4) != 0 || memcmp(riff + 8, "WAVE", 4) != 0) {
        rc =
            sl__data_errf(err, errcap, SL_EMAGIC, "%s: not a WAV file (no RIFF/WAVE header)", path);
        goto done;
    }
    if ((rc = walk(fd, path, size, &f, &data_off, &data_len, &stream, err, errcap)) != SL_OK ||
        (rc = check_fmt(path, &f, rate, err, errcap)) != SL_OK)
        goto done;
    if (data_len % f.block != 0) {
        if (!stream) {
            rc = sl__data_errf(err, errcap, SL_ECORRUPT,
                               "%s: a data chunk of %llu bytes is not a whole number of %u-byte "
                               "samples",
                               path, (unsigned long long)data_len, f.block);
            goto done;
        }
        data_len -= data_len % f.block; /* a stream cut in the middle of a sample */
    }
    total = data_len / f.block;
    count = total < max ? (size_t)total : max;
    if (count > 0) {
        if ((buf = malloc(count * f.block)) == NULL) {
            rc = SL_ENOMEM;
            goto done;
        }
        if ((rc = read_at(fd, buf, count * f.block, data_off)) != SL_OK) {
            rc = sl__data_errf(err, errcap, rc, "%s: %s while its samples were read", path,
                               rc == SL_ETRUNCATED ? "cut short" : "read error");
            goto done;
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (f.bits == 16) {
            unsigned u = le16(buf + 2 * i);
            out[i] = (float)(u >= 32768 ? (int)u - 65536 : (int)u) / 32768.0f;
        } else
            out[i] = (float)((int)buf[i] - 128) / 128.0f;
    }
    *n = count;
    rc = SL_OK;
done:
    free(buf);
    close(fd);
    return rc;
}
