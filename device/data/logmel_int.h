/*
 * logmel_int.h - internals of logmel.c that the tests reach (not installed).
 */
#ifndef STARLING_LOGMEL_INT_H
#define STARLING_LOGMEL_INT_H

#include <stddef.h>

/*
 * sl__rfft - the discrete Fourier transform of @n real values,
 * X_k = sum_i x[i] exp(-2 pi j i k / n) for k = 0 .. n / 2, into @re and
 * @im (n / 2 + 1 values each), by the radix-2 real FFT sl_logmel() uses.
 * @n: a power of two, 2 .. 2^20. Allocates its tables for the call.
 * Returns SL_OK, SL_EINVAL or SL_ENOMEM.
 */
int sl__rfft(const double *x, size_t n, double *re, double *im);

#endif /* STARLING_LOGMEL_INT_H */
