/*
 * starling/logmel.h - log-mel spectrogram features of a clip of audio (16 kHz
 * speech, typically), the input of a keyword-spotting model.
 *
 * Definition (tests/unit/data/logmel_ref.py computes the same with NumPy):
 *
 *   N = n_fft, K = N / 2 + 1 frequency bins, L = (frames - 1) * hop + N.
 *   The clip is x[i] = pcm[i] for i < min(n, L), 0 for n <= i < L (samples
 *   past L are not used; a shorter clip is zero-padded at its end).
 *   Frame t (0 <= t < frames) covers x[t * hop .. t * hop + N - 1].
 *   Window: periodic Hann, w[i] = 0.5 - 0.5 cos(2 pi i / N), i = 0 .. N - 1.
 *   Power:  P[t][k] = |sum_i w[i] x[t * hop + i] exp(-2 pi j i k / N)|^2,
 *           k = 0 .. K - 1 (no normalisation).
 *   Mel filters (torchaudio.functional.melscale_fbanks with norm=None,
 *   mel_scale="htk"): mel(f) = 2595 log10(1 + f / 700); n_mels + 2 points
 *   m_0 .. m_{n_mels+1} evenly spaced from mel(fmin) to mel(fmax), back in
 *   Hz as h_i = 700 (10^(m_i / 2595) - 1); bin k sits at f_k = k rate / N;
 *   filter m (0-based) weighs bin k by
 *     W[m][k] = max(0, min((f_k - h_m) / (h_{m+1} - h_m),
 *                          (h_{m+2} - f_k) / (h_{m+2} - h_{m+1}))).
 *   Output: out[m * frames + t] = ln(sum_k W[m][k] P[t][k] + 1e-6), the
 *   natural logarithm; row-major [mel][frame].
 *
 * The FFT is a radix-2 real FFT written here (no library), computed in
 * double precision; the result is rounded to float at the end. The result
 * depends only on the arguments (deterministic, bit for bit on one
 * platform). A 1 s clip at 16 kHz with n_fft 512, hop 160 and 40 mels takes
 * a fraction of a millisecond.
 *
 * Thread safety: the calls keep no state; safe from any number of threads.
 */
#ifndef STARLING_LOGMEL_H
#define STARLING_LOGMEL_H

#include <stddef.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The features' parameters (see the definition above). */
typedef struct sl_logmel_config {
    unsigned sample_rate; /* Hz of the samples, 1 .. 1000000 (e.g. 16000) */
    unsigned n_fft;       /* samples a frame: a power of two, 64 .. 4096 (e.g. 512) */
    unsigned hop;         /* samples between frame starts, 1 .. 1048576 (e.g. 160) */
    unsigned n_mels;      /* mel bands, 1 .. n_fft / 2 + 1 (e.g. 40) */
    unsigned frames;      /* frames, 1 .. 1048576 (e.g. 101 for 1 s at hop 160) */
    float fmin, fmax;     /* Hz, 0 <= fmin < fmax <= sample_rate / 2 (e.g. 20, 8000) */
} sl_logmel_config;

/**
 * sl_logmel_check - whether @c is a configuration sl_logmel() takes: each
 * field within the bounds given beside it in sl_logmel_config.
 * Returns SL_OK, or SL_EINVAL with a one-line reason in @err (may be NULL)
 * naming the field and its value.
 */
int sl_logmel_check(const sl_logmel_config *c, char *err, size_t errcap);

/**
 * sl_logmel - the log-mel features of the clip @pcm (@n samples at
 * c->sample_rate, values typically in [-1, 1]; finite, else the output is
 * not) into @out: c->n_mels * c->frames floats, row-major [mel][frame], as
 * defined above. @pcm may be NULL when @n is 0 (a silent clip: every value
 * is ln(1e-6)).
 * Allocates one scratch block per call (O(n_fft + n_mels * n_fft / 2)
 * bytes; for the example values above about 30 KiB), freed before it returns.
 * Returns SL_OK; SL_EINVAL (a NULL argument, or a configuration
 * sl_logmel_check() refuses; @out untouched); SL_ENOMEM.
 */
int sl_logmel(const sl_logmel_config *c, const float *pcm, size_t n, float *out);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_LOGMEL_H */
