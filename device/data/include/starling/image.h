/*
 * starling/image.h - PNG and JPEG files on a device, decoded into the
 * floats an image model takes: @channels x @height x @width, values 0..255.
 *
 * The format is told by the file's first bytes (its signature), never by its
 * name. PNG is decoded with libpng: every bit depth and colour type
 * (grayscale 1/2/4/8/16-bit, RGB, palette, with or without alpha or tRNS),
 * interlaced or not. JPEG is decoded with libjpeg-turbo: grayscale and
 * YCbCr/RGB (baseline, progressive, arithmetic); CMYK and YCCK JPEGs are
 * refused (SL_EUNSUPPORTED). Alpha is dropped (the stored colour is kept,
 * as PIL's convert("RGB") does); gAMA, iCCP and EXIF orientation are
 * ignored. A 16-bit PNG sample v becomes v / 257 (65535 -> 255.0), so it is
 * not rounded to 8 bits first.
 *
 * Conversion, on the decoded pixels, before any resizing:
 *   channels 1 from colour:  Y = 0.299 R + 0.587 G + 0.114 B (ITU-R 601
 *                            luma, in double, then rounded to float);
 *   channels 3 from gray:    R = G = B = Y.
 * Resizing, when the file's size is not exactly @width x @height (per axis;
 * an axis of the right size is copied unchanged): bilinear interpolation with
 * half-pixel centres and no antialiasing, as
 * torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
 * antialias=False) and torchvision's Resize(antialias=False): output pixel x
 * samples the source at s = (x + 0.5) * W_src / W_dst - 0.5, clamped below
 * at 0; x0 = floor(s), x1 = min(x0 + 1, W_src - 1), weight s - x0 on x1;
 * the same along y. Shrinking an image by more than 2 therefore skips
 * source pixels (aliasing), exactly as those functions do.
 *
 * Bounds: an image wider or taller than SL_IMAGE_MAX_SIDE or with more than
 * SL_IMAGE_MAX_PIXELS pixels is refused from its header (SL_ETOOBIG) before
 * anything is allocated. Pixels are decoded row by row: memory is a few rows
 * of the source plus the output, except for an interlaced PNG (decoded whole)
 * and a progressive JPEG (libjpeg keeps its coefficients), each refused with
 * SL_ETOOBIG when that takes more than SL_IMAGE_MAX_DECODE bytes. A
 * progressive JPEG of more than 500 scans is refused as corrupt (a known
 * way to make a small file decode for minutes).
 *
 * A damaged file is refused, never decoded into whatever the library could
 * make of it: a file cut short (the libjpeg warning "premature end of JPEG
 * file" included), a bad CRC on a critical PNG chunk, corrupt compressed data
 * (libjpeg's "Corrupt JPEG data" warnings, except "extraneous bytes before
 * marker", which damages nothing).
 *
 * Conventions: SL_OK or a negative sl_status, outputs untouched on error;
 * @err receives a one-line reason that names the file (may be NULL). The
 * calls block on file I/O, keep no state between calls and are thread-safe.
 */
#ifndef STARLING_IMAGE_H
#define STARLING_IMAGE_H

#include <stddef.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_IMAGE_MAX_SIDE   16384u              /* pixels, either axis (source and output) */
#define SL_IMAGE_MAX_PIXELS (64u << 20)         /* width x height (source and output) */
#define SL_IMAGE_MAX_DECODE ((size_t)256 << 20) /* bytes: interlaced PNG, progressive JPEG */

/**
 * sl_image_load - decode the PNG or JPEG file @path into @out.
 * @path:     the file (a regular file; its signature decides the format).
 * @channels: 1 (grayscale) or 3 (RGB), whatever the file holds.
 * @width, @height: the output size in pixels, 1 .. SL_IMAGE_MAX_SIDE each,
 *            at most SL_IMAGE_MAX_PIXELS together.
 * @out:      @channels * @height * @width floats, channel-major (CHW):
 *            out[(c * height + y) * width + x], values in [0, 255]. Written
 *            only on success.
 * Returns SL_OK; SL_EINVAL (an argument); SL_ENOENT or SL_EIO (opening or
 * reading the file); SL_EMAGIC (neither signature: a text file, another
 * format, an empty file); SL_ETRUNCATED (cut short, or shorter than a
 * signature it starts like); SL_ECORRUPT (a bad header, CRC or compressed
 * data; a zero width or height); SL_EUNSUPPORTED (CMYK/YCCK JPEG, 12-bit
 * JPEG); SL_ETOOBIG (beyond the bounds above); SL_ENOMEM.
 */
int sl_image_load(const char *path, unsigned channels, unsigned width, unsigned height, float *out,
                  char *err, size_t errcap);

/**
 * sl_image_probe - read only the header of the PNG or JPEG file @path: its
 * size and whether it is grayscale or colour. It applies the header checks
 * of sl_image_load() (signature, bounds, colour space), so a file it accepts
 * fails to load only for damage further in.
 * @width, @height: the stored size in pixels.
 * @channels: 1 for a grayscale image (with or without alpha), 3 for colour
 *            (RGB, palette, YCbCr), alpha never counted.
 * Returns the statuses of sl_image_load(); the outputs are written only on
 * success.
 */
int sl_image_probe(const char *path, unsigned *width, unsigned *height, unsigned *channels,
                   char *err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_IMAGE_H */
