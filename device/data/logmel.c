/*
 * logmel.c - log-mel features (starling/logmel.h).
 *
 * The real FFT of N samples is a complex FFT of N/2 points on the packed
 * pairs z[i] = x[2i] + j x[2i+1] (iterative radix-2, decimation in time),
 * then one pass that separates the even and odd halves:
 *   X_k = E_k + W^k O_k, E_k = (Z_k + conj Z_{M-k}) / 2,
 *   O_k = (Z_k - conj Z_{M-k}) / 2j, W = exp(-2 pi j / N), M = N/2.
 * One table of cos/sin(2 pi k / N), k = 0 .. N/2, serves both: the M-point
 * FFT's twiddles are its even entries. All of it in double: in float, the
 * rounding error of the large bins would show in the logarithm of the small
 * ones.
 *
 * Each bin falls in at most two triangles (filter m is positive only
 * strictly between h_m and h_{m+2}), so the filter bank is kept as one run
 * of weights per filter, 2 (N/2 + 1) weights at most in all.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data_int.h"
#include "logmel_int.h"
#include "starling/logmel.h"

#define PI        3.14159265358979323846
#define LOG_FLOOR 1e-6

typedef struct fft_plan {
    size_t n;          /* real points */
    const double *cs;  /* cos(2 pi k / n), k = 0 .. n/2 */
    const double *sn;  /* sin(2 pi k / n), k = 0 .. n/2 */
    const double *twr; /* the n/2-point FFT's twiddles, stage by stage (below) */
    const double *twi;
    const unsigned *rev; /* bit reversal of 0 .. n/2 - 1 */
} fft_plan;

/*
 * The tables of an @n-point real FFT: @cs, @sn (n/2 + 1 each), @twr, @twi
 * (n/2 each: the stage of butterflies @half apart uses exp(-2 pi j k / (2 half)),
 * k < half, at [half - 1 + k]) and @rev (n/2).
 */
static void plan_tables(size_t n, double *cs, double *sn, double *twr, double *twi, unsigned *rev)
{
    size_t m = n / 2;
    unsigned bits = 0;
    for (size_t k = 0; k <= m; k++) {
        cs[k] = cos(2.0 * PI * (double)k / (double)n);
        sn[k] = sin(2.0 * PI * (double)k / (double)n);
    }
    sn[0] = sn[m] = 0.0, cs[0] = 1.0, cs[m] = -1.0;
    if (m % 2 == 0)
        cs[m / 2] = 0.0, sn[m / 2] = 1.0;
    for (size_t half = 1; half < m; half <<= 1) {
        const size_t step = m / half; /* exp(-2 pi j k / (2 half)) = W_n^(k * step) */
        for (size_t k = 0; k < half; k++)
            twr[half - 1 + k] = cs[k * step], twi[half - 1 + k] = -sn[k * step];
    }
    while (((size_t)1 << bits) < m)
        bits++;
    for (size_t i = 0; i < m; i++) {
        unsigned r = 0;
        for (unsigned b = 0; b < bits; b++)
            r |= (unsigned)((i >> b) & 1u) << (bits - 1 - b);
        rev[i] = r;
    }
}

/* X_0 .. X_{n/2} of the real @x into @xr, @xi; @zr, @zi: n/2 values of scratch. */
static void rfft(const fft_plan *p, const double *restrict x, double *restrict zr,
                 double *restrict zi, double *restrict xr, double *restrict xi)
{
    const size_t n = p->n, m = n / 2;
    const double *cs = p->cs, *sn = p->sn;
    for (size_t i = 0; i < m; i++) {
        zr[p->rev[i]] = x[2 * i];
        zi[p->rev[i]] = x[2 * i + 1];
    }
    for (size_t i = 0; i + 1 < m; i += 2) { /* butterflies 1 apart: no twiddle */
        const double ar = zr[i], ai = zi[i], br = zr[i + 1], bi = zi[i + 1];
        zr[i] = ar + br, zi[i] = ai + bi;
        zr[i + 1] = ar - br, zi[i + 1] = ai - bi;
    }
    for (size_t half = 2; half < m; half <<= 1) {
        const double *wr = p->twr + half - 1, *wi = p->twi + half - 1;
        for (size_t i = 0; i < m; i += 2 * half) {
            double *ar = zr + i, *ai = zi + i, *br = zr + i + half, *bi = zi + i + half;
            for (size_t k = 0; k < half; k++) {
                const double tr = br[k] * wr[k] - bi[k] * wi[k];
                const double ti = br[k] * wi[k] + bi[k] * wr[k];
                br[k] = ar[k] - tr, bi[k] = ai[k] - ti;
                ar[k] += tr, ai[k] += ti;
            }
        }
    }
    for (size_t k = 0; k <= m; k++) {
        const size_t a = k == m ? 0 : k, b = k == 0 ? 0 : m - k;
        const double er = 0.5 * (zr[a] + zr[b]), ei = 0.5 * (zi[a] - zi[b]);
        const double orr = 0.5 * (zi[a] + zi[b]), oi = -0.5 * (zr[a] - zr[b]);
        xr[k] = er + cs[k] * orr + sn[k] * oi;
        xi[k] = ei + cs[k] * oi - sn[k] * orr;
    }
}

int sl__rfft(const double *x, size_t n, double *re, double *im)
{
    double *work;
    unsigned *rev;
    fft_plan p;
    size_t m = n / 2;
    if (x == NULL || re == NULL || im == NULL || n < 2 || n > ((size_t)1 << 20) || (n & (n - 1)))
        return SL_EINVAL;
    work = malloc((2 * (m + 1) + 4 * m) * sizeof *work);
    rev = malloc(m * sizeof *rev);
    if (work == NULL || rev == NULL) {
        free(work);
        free(rev);
        return SL_ENOMEM;
    }
    p.n = n, p.cs = work, p.sn = work + m + 1, p.twr = work + 2 * (m + 1), p.twi = p.twr + m;
    p.rev = rev;
    plan_tables(n, work, work + m + 1, work + 2 * (m + 1), work + 2 * (m + 1) + m, rev);
    rfft(&p, x, work + 2 * (m + 1) + 2 * m, work + 2 * (m + 1) + 3 * m, re, im);
    free(work);
    free(rev);
    return SL_OK;
}

int sl_logmel_check(const sl_logmel_config *c, char *err, size_t errcap)
{
    if (c == NULL)
        return sl__data_errf(err, errcap, SL_EINVAL, "log-mel: no configuration");
    if (c->sample_rate < 1 || c->sample_rate > 1000000)
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "log-mel: sample_rate %u Hz (read: 1 .. 1000000)", c->sample_rate);
    if (c->n_fft < 64 || c->n_fft > 4096 || (c->n_fft & (c->n_fft - 1)) != 0)
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "log-mel: n_fft %u is not a power of two from 64 to 4096", c->n_fft);
    if (c->hop < 1 || c->hop > (1u << 20))
        return sl__data_errf(err, errcap, SL_EINVAL, "log-mel: hop %u (read: 1 .. 1048576)",
                             c->hop);
    if (c->frames < 1 || c->frames > (1u << 20))
        return sl__data_errf(err, errcap, SL_EINVAL, "log-mel: frames %u (read: 1 .. 1048576)",
                             c->frames);
    if (c->n_mels < 1 || c->n_mels > c->n_fft / 2 + 1)
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "log-mel: n_mels %u (read: 1 .. n_fft / 2 + 1 = %u)", c->n_mels,
                             c->n_fft / 2 + 1);
    if (!(c->fmin >= 0.0f) || !(c->fmin < c->fmax) || !((double)c->fmax <= c->sample_rate / 2.0))
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "log-mel: fmin %g Hz, fmax %g Hz (read: 0 <= fmin < fmax <= "
                             "sample_rate / 2 = %g Hz)",
                             (double)c->fmin, (double)c->fmax, c->sample_rate / 2.0);
    if ((uint64_t)(c->frames - 1) * c->hop + c->n_fft > SIZE_MAX ||
        (uint64_t)c->n_mels * c->frames > SIZE_MAX / sizeof(float))
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "log-mel: %u frames of hop %u are more than this platform addresses",
                             c->frames, c->hop);
    return SL_OK;
}

static double hz_to_mel(double f)
{
    return 2595.0 * log10(1.0 + f / 700.0);
}

static double mel_to_hz(double m)
{
    return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
}

/*
 * The filter bank: filter m weighs bins first[m] .. first[m] + count[m] - 1
 * by weight[at[m] ..]. @h: n_mels + 2 doubles of scratch.
 */
static void filter_bank(const sl_logmel_config *c, double *h, unsigned *first, unsigned *count,
                        unsigned *at, double *weight)
{
    const double mlo = hz_to_mel(c->fmin), mhi = hz_to_mel(c->fmax);
    const double bin_hz = (double)c->sample_rate / c->n_fft;
    const unsigned bins = c->n_fft / 2 + 1;
    unsigned used = 0;
    for (unsigned i = 0; i < c->n_mels + 2; i++)
        h[i] = mel_to_hz(mlo + (mhi - mlo) * i / (c->n_mels + 1));
    for (unsigned m = 0; m < c->n_mels; m++) {
        const double left = h[m], centre = h[m + 1], right = h[m + 2];
        double lo = floor(left / bin_hz), hi = ceil(right / bin_hz);
        unsigned k0 = lo < 0 ? 0 : (unsigned)lo, k1 = hi > bins - 1 ? bins - 1 : (unsigned)hi;
        first[m] = k0, count[m] = 0, at[m] = used;
        for (unsigned k = k0; k <= k1; k++) {
            const double f = k * bin_hz;
            const double up = (f - left) / (centre - left), down = (right - f) / (right - centre);
            const double w = up < down ? up : down;
            if (w <= 0.0) {
                if (count[m] > 0)
                    break;
                first[m] = k + 1;
                continue;
            }
            weight[used++] = w;
            count[m]++;
        }
    }
}

int sl_logmel(const sl_logmel_config *c, const float *pcm, size_t n, float *out)
{
    size_t nfft, m, bins, span, use, doubles;
    double *win, *frame, *cs, *sn, *twr, *twi, *zr, *zi, *xr, *xi, *h, *weight, *block;
    unsigned *rev, *first, *count, *at;
    fft_plan p;
    if (c == NULL || out == NULL || (pcm == NULL && n > 0) || sl_logmel_check(c, NULL, 0) != SL_OK)
        return SL_EINVAL;
    nfft = c->n_fft, m = nfft / 2, bins = m + 1;
    span = (size_t)(c->frames - 1) * c->hop + nfft;
    use = n < span ? n : span;
    doubles = 2 * nfft + 2 * bins + 4 * m + 2 * bins + (c->n_mels + 2) + 2 * bins;
    block = malloc(doubles * sizeof(double) + (m + 3 * (size_t)c->n_mels) * sizeof(unsigned));
    if (block == NULL)
        return SL_ENOMEM;
    win = block, frame = win + nfft, cs = frame + nfft, sn = cs + bins, twr = sn + bins;
    twi = twr + m, zr = twi + m, zi = zr + m, xr = zi + m, xi = xr + bins, h = xi + bins;
    weight = h + c->n_mels + 2;
    rev = (unsigned *)(void *)(weight + 2 * bins);
    first = rev + m, count = first + c->n_mels, at = count + c->n_mels;

    plan_tables(nfft, cs, sn, twr, twi, rev);
    p.n = nfft, p.cs = cs, p.sn = sn, p.twr = twr, p.twi = twi, p.rev = rev;
    for (size_t i = 0; i < nfft; i++) /* periodic Hann; cos(2 pi i / N) from the table */
        win[i] = 0.5 - 0.5 * cs[i <= m ? i : nfft - i];
    filter_bank(c, h, first, count, at, weight);

    for (unsigned t = 0; t < c->frames; t++) {
        const size_t start = (size_t)t * c->hop;
        for (size_t i = 0; i < nfft; i++)
            frame[i] = start + i < use ? win[i] * pcm[start + i] : 0.0;
        rfft(&p, frame, zr, zi, xr, xi);
        for (size_t k = 0; k < bins; k++)
            xr[k] = xr[k] * xr[k] + xi[k] * xi[k]; /* the power, in place */
        for (unsigned mel = 0; mel < c->n_mels; mel++) {
            const double *w = weight + at[mel], *pw = xr + first[mel];
            double e = 0.0;
            for (unsigned k = 0; k < count[mel]; k++)
                e += w[k] * pw[k];
            out[(size_t)mel * c->frames + t] = (float)log(e + LOG_FLOOR);
        }
    }
    free(block);
    return SL_OK;
}
