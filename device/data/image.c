/*
 * image.c - PNG (libpng) and JPEG (libjpeg-turbo) files, decoded row by row
 * into a bilinear resampler (starling/image.h).
 *
 * Both libraries report errors by longjmp: libpng to png_jmpbuf() from the
 * error function installed here (its default prints to stderr first),
 * libjpeg to our jmp_buf from the error_exit installed here (its default
 * calls exit()). Locals of the function that called setjmp() are
 * indeterminate after the jump, so png_decode() and jpeg_decode() only set
 * the jump and call a body; everything to free lives in the image_job their
 * caller owns and frees, however the decoder returned.
 *
 * The resampler needs two source rows at a time: output row y blends source
 * rows y0 and y0 + 1 and y0 never decreases with y, so each source row is
 * converted to the output's channels, resampled along x at once and kept
 * until the next one arrives. Every row of the file is decoded even when the
 * output needs fewer, so that damage anywhere in the file is seen.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "data_int.h"
#include "starling/image.h"

#define SNIFF          24 /* bytes read to tell the format (and a PNG's IHDR size) */
#define JPEG_MAX_SCANS 500
#define PNG_CHUNK_MAX  ((png_alloc_size_t)8 << 20) /* bytes of one ancillary chunk */

enum { KIND_PNG = 1, KIND_JPEG = 2 };

/* Bilinear resizing of rows pushed in order (see the opening comment). */
typedef struct resampler {
    unsigned sw, sh, dw, dh, ch; /* source and output sizes, output channels */
    unsigned *x0, *x1, *y0, *y1; /* per output column / row: the two source indices */
    float *wx, *wy;              /* ... and the weight of the second */
    float *src;                  /* the current source row in the output's channels: [c][sw] */
    float *hrow[2];              /* source rows r - 1 and r along x: [c][dw], slot r & 1 */
    float *out;                  /* the result: [c][dh][dw] */
    unsigned rows;               /* source rows pushed */
    unsigned next_y;             /* output rows done */
} resampler;

typedef struct image_job {
    const char *path;
    char *err;
    size_t errcap;
    FILE *f;
    unsigned channels, out_w, out_h; /* wanted; channels 0: the header only */
    unsigned width, height, colours; /* the file's */
    int status;                      /* set by an error handler before it jumps */
    char why[JMSG_LENGTH_MAX];       /* the library's message */
    resampler rs;
    unsigned char *pixels; /* one decoded row, or a whole interlaced PNG */
    png_bytep *rows;
    png_structp png;
    png_infop info;
    struct jpeg_decompress_struct jpg;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    int jpg_live;
    jmp_buf jmp;
} image_job;

/* ---- resampling ------------------------------------------------------------------------------ */

/* One axis: output i samples the source at s = (i + 0.5) * src / dst - 0.5, clamped at 0. */
static void axis(unsigned src, unsigned dst, unsigned *i0, unsigned *i1, float *w)
{
    double scale = (double)src / (double)dst;
    for (unsigned i = 0; i < dst; i++) {
        double s = ((double)i + 0.5) * scale - 0.5;
        unsigned a;
        if (s < 0)
            s = 0;
        a = (unsigned)s;
        if (a > src - 1)
            a = src - 1;
        i0[i] = a;
        i1[i] = a < src - 1 ? a + 1 : a;
        w[i] = i1[i] == a ? 0.0f : (float)(s - a);
    }
}

static void resampler_free(resampler *rs)
{
    free(rs->x0);
    free(rs->x1);
    free(rs->y0);
    free(rs->y1);
    free(rs->wx);
    free(rs->wy);
    free(rs->src);
    free(rs->hrow[0]);
    free(rs->hrow[1]);
    free(rs->out);
    memset(rs, 0, sizeof *rs);
}

static int resampler_init(resampler *rs, unsigned sw, unsigned sh, unsigned dw, unsigned dh,
                          unsigned ch)
{
    size_t plane = (size_t)dw * dh;
    rs->sw = sw, rs->sh = sh, rs->dw = dw, rs->dh = dh, rs->ch = ch;
    rs->x0 = malloc(dw * sizeof *rs->x0);
    rs->x1 = malloc(dw * sizeof *rs->x1);
    rs->wx = malloc(dw * sizeof *rs->wx);
    rs->y0 = malloc(dh * sizeof *rs->y0);
    rs->y1 = malloc(dh * sizeof *rs->y1);
    rs->wy = malloc(dh * sizeof *rs->wy);
    rs->src = malloc((size_t)sw * ch * sizeof *rs->src);
    rs->hrow[0] = malloc((size_t)dw * ch * sizeof(float));
    rs->hrow[1] = malloc((size_t)dw * ch * sizeof(float));
    rs->out = malloc(plane * ch * sizeof *rs->out);
    if (!rs->x0 || !rs->x1 || !rs->wx || !rs->y0 || !rs->y1 || !rs->wy || !rs->src ||
        !rs->hrow[0] || !rs->hrow[1] || !rs->out)
        return SL_ENOMEM;
    axis(sw, dw, rs->x0, rs->x1, rs->wx);
    axis(sh, dh, rs->y0, rs->y1, rs->wy);
    return SL_OK;
}

static float sample_at(const unsigned char *p, int wide)
{
    return wide ? (float)((unsigned)p[0] << 8 | p[1]) / 257.0f : (float)p[0];
}

/*
 * The next source row: @px holds sw pixels of @stride samples (1 or 2 bytes
 * each, big-endian when @wide), the first @colours (1 or 3) of them the
 * colour, the rest alpha (ignored).
 */
static void resampler_push(resampler *rs, const unsigned char *px, unsigned stride,
                           unsigned colours, int wide)
{
    const unsigned sw = rs->sw, dw = rs->dw, dh = rs->dh, ch = rs->ch;
    const size_t bytes = wide ? 2 : 1, pixel = stride * bytes;
    float *src = rs->src, *slot = rs->hrow[rs->rows & 1];
    unsigned r;
    for (unsigned x = 0; x < sw; x++) {
        const unsigned char *p = px + x * pixel;
        if (colours == 1) {
            float v = sample_at(p, wide);
            for (unsigned c = 0; c < ch; c++)
                src[(size_t)c * sw + x] = v;
        } else if (ch == 3) {
            src[x] = sample_at(p, wide);
            src[sw + x] = sample_at(p + bytes, wide);
            src[2 * (size_t)sw + x] = sample_at(p + 2 * bytes, wide);
        } else {
            double red = sample_at(p, wide), green = sample_at(p + bytes, wide),
                   blue = sample_at(p + 2 * bytes, wide);
            src[x] = (float)(0.299 * red + 0.587 * green + 0.114 * blue);
        }
    }
    for (unsigned c = 0; c < ch; c++) {
        const float *s = src + (size_t)c * sw;
        float *d = slot + (size_t)c * dw;
        for (unsigned x = 0; x < dw; x++)
            d[x] = (1.0f - rs->wx[x]) * s[rs->x0[x]] + rs->wx[x] * s[rs->x1[x]];
    }
    r = rs->rows++;
    while (rs->next_y < dh && rs->y1[rs->next_y] <= r) {
        const unsigned y = rs->next_y++;
        const float w = rs->wy[y];
        const float *a = rs->hrow[rs->y0[y] & 1], *b = rs->hrow[rs->y1[y] & 1];
        for (unsigned c = 0; c < ch; c++) {
            float *o = rs->out + ((size_t)c * dh + y) * dw;
            const float *ac = a + (size_t)c * dw, *bc = b + (size_t)c * dw;
            for (unsigned x = 0; x < dw; x++)
                o[x] = (1.0f - w) * ac[x] + w * bc[x];
        }
    }
}

/* ---- shared ---------------------------------------------------------------------------------- */

static int check_size(image_job *job, const char *kind)
{
    if (job->width == 0 || job->height == 0)
        return sl__data_errf(job->err, job->errcap, SL_ECORRUPT, "%s: a %s of %ux%u pixels",
                             job->path, kind, job->width, job->height);
    if (job->width > SL_IMAGE_MAX_SIDE || job->height > SL_IMAGE_MAX_SIDE ||
        (uint64_t)job->width * job->height > SL_IMAGE_MAX_PIXELS)
        return sl__data_errf(job->err, job->errcap, SL_ETOOBIG,
                             "%s: a %s of %ux%u pixels (read: at most %u a side, %u Mpixel)",
                             job->path, kind, job->width, job->height, SL_IMAGE_MAX_SIDE,
                             SL_IMAGE_MAX_PIXELS >> 20);
    return SL_OK;
}

/* The reason for a library error recorded in job->status and job->why. */
static int lib_failed(image_job *job, const char *kind)
{
    switch (job->status) {
    case SL_ETRUNCATED:
        return sl__data_errf(job->err, job->errcap, SL_ETRUNCATED, "%s: the %s is cut short (%s)",
                             job->path, kind, job->why);
    case SL_EIO:
        return sl__data_errf(job->err, job->errcap, SL_EIO, "%s: read error", job->path);
    case SL_EUNSUPPORTED:
        return sl__data_errf(job->err, job->errcap, SL_EUNSUPPORTED, "%s: unsupported %s (%s)",
                             job->path, kind, job->why);
    case SL_ETOOBIG:
        return sl__data_errf(job->err, job->errcap, SL_ETOOBIG,
                             "%s: the %s needs more than %zu MiB to decode (%s)", job->path, kind,
                             SL_IMAGE_MAX_DECODE >> 20, job->why);
    case SL_ENOMEM:
        return SL_ENOMEM;
    default:
        return sl__data_errf(job->err, job->errcap, SL_ECORRUPT, "%s: corrupt %s (%s)", job->path,
                             kind, job->why);
    }
}

static int begin(image_job *job)
{
    if (job->channels == 0)
        return SL_OK;
    return resampler_init(&job->rs, job->width, job->height, job->out_w, job->out_h, job->channels);
}

/* ---- PNG ------------------------------------------------------------------------------------- */

static void png_on_error(png_structp png, png_const_charp msg)
{
    image_job *job = png_get_error_ptr(png);
    snprintf(job->why, sizeof job->why, "%s", msg);
    if (job->status == SL_OK)
        job->status = SL_ECORRUPT;
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png, (void)msg;
}

static void png_on_read(png_structp png, png_bytep data, size_t len)
{
    image_job *job = png_get_io_ptr(png);
    if (fread(data, 1, len, job->f) != len) {
        int failed = ferror(job->f);
        job->status = failed ? SL_EIO : SL_ETRUNCATED;
        png_error(png, failed ? "read error" : "unexpected end of file");
    }
}

static int png_body(image_job *job)
{
    png_structp png = job->png;
    png_infop info = job->info;
    png_uint_32 w, h;
    int depth, ctype, interlace, passes, rc, wide;
    unsigned stride;
    size_t rowbytes;
    png_set_read_fn(png, job, png_on_read);
    png_set_user_limits(png, SL_IMAGE_MAX_SIDE, SL_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, PNG_CHUNK_MAX);
    png_read_info(png, info);
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    job->width = w, job->height = h;
    job->colours = (ctype & PNG_COLOR_MASK_COLOR) ? 3 : 1;
    if ((rc = check_size(job, "PNG")) != SL_OK || (rc = begin(job)) != SL_OK || job->channels == 0)
        return rc;
    if (ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    stride = png_get_channels(png, info); /* alpha, when there is any, is skipped */
    wide = png_get_bit_depth(png, info) == 16;
    rowbytes = png_get_rowbytes(png, info);
    if (stride < 1 || stride > 4 || (stride < 3) != (job->colours == 1) ||
        rowbytes != (size_t)w * stride * (wide ? 2 : 1))
        return sl__data_errf(job->err, job->errcap, SL_ECORRUPT, "%s: unexpected PNG row layout",
                             job->path);
    if (passes == 1) {
        if ((job->pixels = malloc(rowbytes)) == NULL)
            return SL_ENOMEM;
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(png, job->pixels, NULL);
            resampler_push(&job->rs, job->pixels, stride, job->colours, wide);
        }
    } else {
        /* Adam7 fills rows in seven passes: the image is decoded whole. */
        if (rowbytes > SL_IMAGE_MAX_DECODE / h)
            return sl__data_errf(job->err, job->errcap, SL_ETOOBIG,
                                 "%s: an interlaced PNG of %ux%u pixels needs more than %zu MiB "
                                 "to decode",
                                 job->path, job->width, job->height, SL_IMAGE_MAX_DECODE >> 20);
        job->pixels = malloc(rowbytes * h);
        job->rows = malloc(h * sizeof *job->rows);
        if (job->pixels == NULL || job->rows == NULL)
            return SL_ENOMEM;
        for (png_uint_32 y = 0; y < h; y++)
            job->rows[y] = job->pixels + rowbytes * y;
        png_read_image(png, job->rows);
        for (png_uint_32 y = 0; y < h; y++)
            resampler_push(&job->rs, job->rows[y], stride, job->colours, wide);
    }
    png_read_end(png, NULL); /* the chunks after the image: CRCs, IEND */
    return SL_OK;
}

static int png_decode(image_job *job)
{
    job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, png_on_error, png_on_warning);
    if (job->png == NULL || (job->info = png_create_info_struct(job->png)) == NULL)
        return SL_ENOMEM;
    if (setjmp(png_jmpbuf(job->png)))
        return lib_failed(job, "PNG");
    return png_body(job);
}

/* ---- JPEG ------------------------------------------------------------------------------------ */

static void jpeg_fail(j_common_ptr cinfo, int status)
{
    image_job *job = cinfo->client_data;
    (*cinfo->err->format_message)(cinfo, job->why);
    job->status = status;
    longjmp(job->jmp, 1);
}

static void jpeg_on_error(j_common_ptr cinfo)
{
    switch (cinfo->err->msg_code) {
    case JERR_INPUT_EMPTY:
        jpeg_fail(cinfo, SL_ETRUNCATED);
        break;
    case JERR_BAD_PRECISION:
    case JERR_NOT_COMPILED:
    case JERR_CONVERSION_NOTIMPL:
        jpeg_fail(cinfo, SL_EUNSUPPORTED);
        break;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
        jpeg_fail(cinfo, SL_ETOOBIG);
        break;
    default:
        jpeg_fail(cinfo, SL_ECORRUPT);
    }
}

/* Warnings (@level -1) that mean damaged pixels end the decoding; others are ignored. */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    if (level >= 0)
        return;
    switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
        jpeg_fail(cinfo, SL_ETRUNCATED);
        break;
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
        jpeg_fail(cinfo, SL_ECORRUPT);
        break;
    default:
        cinfo->err->num_warnings++;
    }
}

static void jpeg_on_output(j_common_ptr cinfo)
{
    (void)cinfo;
}

static void jpeg_on_progress(j_common_ptr cinfo)
{
    image_job *job = cinfo->client_data;
    if (job->jpg.input_scan_number > JPEG_MAX_SCANS) {
        snprintf(job->why, sizeof job->why, "more than %d scans", JPEG_MAX_SCANS);
        job->status = SL_ECORRUPT;
        longjmp(job->jmp, 1);
    }
}

static int jpeg_body(image_job *job)
{
    struct jpeg_decompress_struct *d = &job->jpg;
    unsigned stride;
    int rc;
    jpeg_create_decompress(d);
    job->jpg_live = 1;
    d->client_data = job;
    d->mem->max_memory_to_use = (long)SL_IMAGE_MAX_DECODE;
    job->progress.progress_monitor = jpeg_on_progress;
    d->progress = &job->progress;
    jpeg_stdio_src(d, job->f);
    jpeg_read_header(d, TRUE);
    job->width = d->image_width, job->height = d->image_height;
    switch (d->jpeg_color_space) {
    case JCS_GRAYSCALE:
        job->colours = 1;
        d->out_color_space = JCS_GRAYSCALE;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        job->colours = 3;
        d->out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        return sl__data_errf(job->err, job->errcap, SL_EUNSUPPORTED,
                             "%s: a CMYK JPEG (read: grayscale, RGB; convert it to RGB)",
                             job->path);
    default:
        return sl__data_errf(job->err, job->errcap, SL_EUNSUPPORTED,
                             "%s: a JPEG of %d components in an unknown colour space", job->path,
                             d->num_components);
    }
    if ((rc = check_size(job, "JPEG")) != SL_OK || (rc = begin(job)) != SL_OK || job->channels == 0)
        return rc;
    jpeg_start_decompress(d);
    stride = (unsigned)d->output_components;
    if (d->output_width != job->width || d->output_height != job->height || stride != job->colours)
        return sl__data_errf(job->err, job->errcap, SL_ECORRUPT, "%s: unexpected JPEG output",
                             job->path);
    if ((job->pixels = malloc((size_t)job->width * stride)) == NULL)
        return SL_ENOMEM;
    while (d->output_scanline < d->output_height) {
        JSAMPROW row = job->pixels;
        if (jpeg_read_scanlines(d, &row, 1) != 1)
            return sl__data_errf(job->err, job->errcap, SL_ECORRUPT,
                                 "%s: corrupt JPEG (no scanline %u)", job->path,
                                 d->output_scanline);
        resampler_push(&job->rs, job->pixels, stride, job->colours, 0);
    }
    jpeg_finish_decompress(d); /* reads on to EOI: a file cut short says so here */
    return SL_OK;
}

static int jpeg_decode(image_job *job)
{
    job->jpg.err = jpeg_std_error(&job->jerr);
    job->jerr.error_exit = jpeg_on_error;
    job->jerr.emit_message = jpeg_on_message;
    job->jerr.output_message = jpeg_on_output;
    job->jpg.client_data = job;
    if (setjmp(job->jmp))
        return lib_failed(job, "JPEG");
    return jpeg_body(job);
}

/* ---- the file -------------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Open job->path, tell its format by its first bytes and decode it. */
static int image_run(image_job *job)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char jpeg_sig[3] = {0xff, 0xd8, 0xff};
    unsigned char head[SNIFF];
    struct stat st;
    size_t n;
    int fd = open(job->path, O_RDONLY | O_CLOEXEC), rc;
    if (fd < 0)
        return sl__data_errf(job->err, job->errcap, errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: %s",
                             job->path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sl__data_errf(job->err, job->errcap, SL_EIO, "%s: not a regular file", job->path);
    }
    if ((job->f = fdopen(fd, "rb")) == NULL) {
        close(fd);
        return SL_ENOMEM;
    }
    n = fread(head, 1, sizeof head, job->f);
    if (ferror(job->f))
        return sl__data_errf(job->err, job->errcap, SL_EIO, "%s: read error", job->path);
    if (n == 0)
        return sl__data_errf(job->err, job->errcap, SL_EMAGIC,
                             "%s: the file is empty (not a PNG or JPEG image)", job->path);
    if (memcmp(head, png_sig, n < 8 ? n : 8) == 0) {
        if (n < 8)
            return sl__data_errf(job->err, job->errcap, SL_ETRUNCATED,
                                 "%s: the PNG is cut short (%zu bytes)", job->path, n);
        if (n == SNIFF && memcmp(head + 12, "IHDR", 4) == 0) {
            /* the size before libpng allocates anything for it */
            job->width = be32(head + 16), job->height = be32(head + 20);
            if ((rc = check_size(job, "PNG")) != SL_OK)
                return rc;
        }
        rewind(job->f);
        return png_decode(job);
    }
    if (memcmp(head, jpeg_sig, n < 3 ? n : 3) == 0) {
        if (n < 3)
            return sl__data_errf(job->err, job->errcap, SL_ETRUNCATED,
                                 "%s: the JPEG is cut short (%zu bytes)", job->path, n);
        rewind(job->f);
        return jpeg_decode(job);
    }
    return sl__data_errf(job->err, job->errcap, SL_EMAGIC,
                         "%s: not a PNG or JPEG image (neither signature)", job->path);
}

static void image_done(image_job *job)
{
    if (job->png != NULL)
        png_destroy_read_struct(&job->png, job->info ? &job->info : NULL, NULL);
    if (job->jpg_live)
        jpeg_destroy_decompress(&job->jpg);
    free(job->rows);
    free(job->pixels);
    resampler_free(&job->rs);
    if (job->f != NULL)
        fclose(job->f);
}

int sl_image_load(const char *path, unsigned channels, unsigned width, unsigned height, float *out,
                  char *err, size_t errcap)
{
    image_job *job;
    int rc;
    if (path == NULL || out == NULL || (channels != 1 && channels != 3) || width == 0 ||
        height == 0 || width > SL_IMAGE_MAX_SIDE || height > SL_IMAGE_MAX_SIDE ||
        (uint64_t)width * height > SL_IMAGE_MAX_PIXELS)
        return sl__data_errf(err, errcap, SL_EINVAL, "%s: %u channels of %ux%u pixels asked for",
                             path ? path : "(null)", channels, width, height);
    if ((job = calloc(1, sizeof *job)) == NULL)
        return SL_ENOMEM;
    job->path = path, job->err = err, job->errcap = errcap;
    job->channels = channels, job->out_w = width, job->out_h = height;
    rc = image_run(job);
    if (rc == SL_OK && job->rs.next_y != height)
        rc = sl__data_errf(err, errcap, SL_ECORRUPT, "%s: %u of %u rows decoded", path,
                           job->rs.rows, job->height);
    if (rc == SL_OK)
        memcpy(out, job->rs.out, (size_t)channels * width * height * sizeof *out);
    image_done(job);
    free(job);
    return rc;
}

int sl_image_probe(const char *path, unsigned *width, unsigned *height, unsigned *channels,
                   char *err, size_t errcap)
{
    image_job *job;
    int rc;
    if (path == NULL || width == NULL || height == NULL || channels == NULL)
        return SL_EINVAL;
    if ((job = calloc(1, sizeof *job)) == NULL)
        return SL_ENOMEM;
    job->path = path, job->err = err, job->errcap = errcap;
    rc = image_run(job);
    if (rc == SL_OK)
        *width = job->width, *height = job->height, *channels = job->colours;
    image_done(job);
    free(job);
    return rc;
}
