/*
 * starling/wav.h - WAV files on a device (RIFF/WAVE, PCM), read into floats
 * for an audio model.
 *
 * Read: format 1 (PCM) or WAVE_FORMAT_EXTENSIBLE (0xFFFE) with the PCM
 * sub-format, one channel, 16-bit signed or 8-bit unsigned samples, at
 * exactly the rate the caller wants. Anything else is refused, never
 * converted, with a reason that says what the file is and what is wanted:
 *   "a.wav: 16-bit PCM, mono, 22050 Hz; the task wants 16000 Hz"
 *   "b.wav: 32-bit float, 2 channels, 16000 Hz; the task wants 16-bit PCM, mono"
 *
 * Layout: "RIFF", a size, "WAVE", then chunks (id, little-endian u32 size,
 * data, a pad byte after an odd size). The chunks are walked from the start:
 * "fmt " and "data" are read, every other chunk (LIST, fact, cue, ...) is
 * skipped, anything after the data chunk once both are found is ignored. The
 * RIFF size is not used (writers get it wrong); the data chunk's size is,
 * and it must fit in the file: a file cut short is refused (SL_ETRUNCATED).
 * The one exception is a stream whose writer could not go back to fill the
 * sizes in: a data chunk whose size is 0xFFFFFFFF (FFmpeg's placeholder) or
 * 0x7FFFF000 (espeak-ng's, e.g. `espeak-ng --stdout`) and larger than what
 * is left of the file runs to the end of the file (whole samples only).
 *
 * Samples: 16-bit s becomes s / 32768, 8-bit u becomes (u - 128) / 128,
 * both in [-1, 1).
 *
 * Conventions: SL_OK or a negative sl_status, outputs untouched on error;
 * @err receives a one-line reason that names the file (may be NULL). The
 * call blocks on file I/O, keeps no state and is thread-safe.
 */
#ifndef STARLING_WAV_H
#define STARLING_WAV_H

#include <stddef.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * sl_wav_load - read the samples of the WAV file @path.
 * @path: the file (a regular file).
 * @rate: the sample rate wanted, in Hz (> 0); a file at another rate is
 *        refused (SL_EUNSUPPORTED), never resampled.
 * @out:  room for @max floats; the first *@n are written. May be NULL when
 *        @max is 0.
 * @max:  the most samples read: a clip longer than @max is cut to its first
 *        @max samples, without an error (*@n == @max then; ask for one more
 *        than you need to tell a cut clip). Memory used is O(@max), whatever
 *        the file's size.
 * @n:    the number of samples written (0 for an empty data chunk).
 * Returns SL_OK; SL_EINVAL (an argument); SL_ENOENT or SL_EIO (opening or
 * reading the file); SL_EMAGIC (not RIFF/WAVE; an empty file);
 * SL_ETRUNCATED (cut short: in the header, a chunk or the samples);
 * SL_ECORRUPT (no fmt or data chunk, a fmt chunk that contradicts itself, a
 * data size not a whole number of samples); SL_EUNSUPPORTED (another
 * encoding, sample size, channel count or rate; RIFX, RF64); SL_ENOMEM.
 */
int sl_wav_load(const char *path, unsigned rate, float *out, size_t max, size_t *n, char *err,
                size_t errcap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_WAV_H */
