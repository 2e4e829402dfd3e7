/*
 * encoding.c - SHA-256, hex and base64 for the REST protocol.
 *
 * Base64 is RFC 4648 section 4 (standard alphabet, '=' padding). The decoder
 * is strict because it reads signatures off the network: no whitespace, no
 * missing padding, no characters after the padding and no non-zero bits in
 * the unused low bits of the last symbol, so every byte string has exactly
 * one accepted encoding.
 */
#include <string.h>

#include <mbedtls/sha256.h>

#include "starling/api_sign.h"

void sl_sha256(const void *data, size_t len, uint8_t out[32])
{
    static const unsigned char empty = 0;
    /* mbedTLS rejects a NULL input pointer even for zero bytes. */
    if (data == NULL)
        data = &empty;
    (void)mbedtls_sha256_ret(data, len, out, 0);
}

void sl_hex(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0x0f];
    }
    out[2 * len] = '\0';
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/*
 * Reads exactly 2 * len characters and never looks past them, so callers may
 * parse a digest embedded in a longer string (an ETag between quotes); a
 * caller that wants "nothing after the digits" checks the length itself.
 */
int sl_unhex(const char *in, uint8_t *out, size_t len)
{
    if (in == NULL || (len > 0 && out == NULL))
        return SL_EINVAL;
    /* Validate everything first: a failed call leaves @out untouched. */
    for (size_t i = 0; i < 2 * len; i++) {
        if (hex_value(in[i]) < 0)
            return SL_ESYNTAX; /* also stops at the NUL of a short string */
    }
    for (size_t i = 0; i < len; i++)
        out[i] = (uint8_t)(hex_value(in[2 * i]) << 4 | hex_value(in[2 * i + 1]));
    return SL_OK;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sl_base64_encode(const uint8_t *in, size_t len, char *out, size_t cap)
{
    if ((in == NULL && len > 0) || out == NULL)
        return SL_EINVAL;
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return SL_ETOOBIG;
    size_t need = (len + 2) / 3 * 4 + 1;
    if (cap < need)
        return SL_EINVAL;
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return SL_OK;
}

static int b64_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int sl_base64_decode(const char *in, uint8_t *out, size_t cap, size_t *len)
{
    if (in == NULL || len == NULL || (out == NULL && cap > 0))
        return SL_EINVAL;
    size_t n = strlen(in);
    if (n % 4 != 0)
        return SL_ESYNTAX;
    size_t pad = 0;
    if (n > 0 && in[n - 1] == '=')
        pad = (n > 1 && in[n - 2] == '=') ? 2 : 1;
    for (size_t i = 0; i < n - pad; i++) {
        if (b64_value(in[i]) < 0)
            return SL_ESYNTAX; /* junk, or '=' before the end */
    }
    /* Canonical form: the bits below the last byte must be zero. */
    if (pad == 2 && (b64_value(in[n - 3]) & 0x0f) != 0)
        return SL_ESYNTAX;
    if (pad == 1 && (b64_value(in[n - 2]) & 0x03) != 0)
        return SL_ESYNTAX;
    size_t total = n / 4 * 3 - pad;
    if (total > cap)
        return SL_ETOOBIG;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = (uint32_t)b64_value(in[i]) << 18 | (uint32_t)b64_value(in[i + 1]) << 12;
        int c2 = in[i + 2] == '=' ? 0 : b64_value(in[i + 2]);
        int c3 = in[i + 3] == '=' ? 0 : b64_value(in[i + 3]);
        v |= (uint32_t)c2 << 6 | (uint32_t)c3;
        out[o++] = (uint8_t)(v >> 16);
        if (o < total)
            out[o++] = (uint8_t)(v >> 8);
        if (o < total)
            out[o++] = (uint8_t)v;
    }
    *len = total;
    return SL_OK;
}
