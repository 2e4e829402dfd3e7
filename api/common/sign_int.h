/*
 * sign_int.h - internals shared by the files of api/common (not installed,
 * not for other components).
 */
#ifndef STARLING_API_SIGN_INT_H
#define STARLING_API_SIGN_INT_H

#include <stddef.h>

/*
 * sl__random_bytes - fill @buf with @len bytes from the kernel's CSPRNG
 * (getrandom). Has the shape of an mbedTLS f_rng: returns 0 on success and a
 * non-zero value on failure. @ctx is unused. Thread-safe.
 */
int sl__random_bytes(void *ctx, unsigned char *buf, size_t len);

/* A nonce is 16..64 characters of [A-Za-z0-9_-] (api_sign.h). */
#define SL__NONCE_MIN 16
#define SL__NONCE_MAX 64

/* sl__nonce_valid - 1 when @nonce has the nonce syntax, 0 otherwise (NULL too). */
int sl__nonce_valid(const char *nonce);

#endif /* STARLING_API_SIGN_INT_H */
