/*
 * session.c - device sessions (issue #20): after one ECDSA-signed request a
 * device holds a short-lived session, and each later request carries an
 * HMAC-SHA256 of the canonical request under the session's key instead of
 * an ECDSA signature (two orders of magnitude cheaper to check).
 *
 * A session is named by its token, "s1.<epoch>.<device>.<expires_ms>.<id>",
 * and its key is derived, never stored: HKDF-SHA256 (RFC 5869, mbedTLS)
 * with the coordinator's secret of that epoch as the input key material, a
 * fixed salt, and the token as the info. Whoever holds the secret can
 * recompute any live session's key from the token alone; a token altered in
 * any field (another device, a later expiry, another epoch) derives another
 * key, so its MACs do not verify. MACs are compared in constant time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/hkdf.h>
#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>

#include "starling/api_sign.h"

#define SALT "starling-session-v1"

int sl_session_token(const sl_session *s, char *out, size_t cap)
{
    char id[2 * SL_SESSION_ID_LEN + 1];
    int n;
    if (s == NULL || out == NULL || s->device_id < 1 || s->expires_ms < 0)
        return SL_EINVAL;
    sl_hex(s->id, SL_SESSION_ID_LEN, id);
    n = snprintf(out, cap, "s1.%" PRIu32 ".%" PRId64 ".%" PRId64 ".%s", s->epoch, s->device_id,
                 s->expires_ms, id);
    return n < 0 || (size_t)n >= cap ? SL_EINVAL : SL_OK;
}

/* A decimal field of @text up to @stop into *@v in [lo, hi]; the rest after @stop. */
static const char *field(const char *text, char stop, int64_t lo, int64_t hi, int64_t *v)
{
    int64_t x = 0;
    const char *p = text;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
        return NULL; /* no sign, no leading zeros: one spelling per token */
    while (*p >= '0' && *p <= '9') {
        if (x > (INT64_MAX - (*p - '0')) / 10)
            return NULL;
        x = x * 10 + (*p++ - '0');
    }
    if (*p != stop || x < lo || x > hi)
        return NULL;
    *v = x;
    return p + 1;
}

int sl_session_parse(const char *token, sl_session *out)
{
    sl_session s;
    int64_t epoch, device, expires;
    const char *p;
    if (token == NULL || out == NULL || strncmp(token, "s1.", 3) != 0 ||
        strlen(token) >= SL_SESSION_TOKEN_MAX)
        return SL_ESYNTAX;
    if ((p = field(token + 3, '.', 0, UINT32_MAX, &epoch)) == NULL ||
        (p = field(p, '.', 1, INT64_MAX, &device)) == NULL ||
        (p = field(p, '.', 0, INT64_MAX, &expires)) == NULL || strlen(p) != 2 * SL_SESSION_ID_LEN)
        return SL_ESYNTAX;
    for (const char *h = p; *h != '\0'; h++)
        if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')))
            return SL_ESYNTAX; /* lowercase only: one spelling per token */
    if (sl_unhex(p, s.id, SL_SESSION_ID_LEN) != SL_OK)
        return SL_ESYNTAX;
    s.epoch = (uint32_t)epoch;
    s.device_id = device;
    s.expires_ms = expires;
    *out = s;
    return SL_OK;
}

int sl_session_key(const uint8_t secret[SL_SESSION_SECRET_LEN], const char *token,
                   uint8_t key[SL_SESSION_KEY_LEN])
{
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    if (secret == NULL || token == NULL || key == NULL || md == NULL)
        return SL_EINVAL;
    if (mbedtls_hkdf(md, (const unsigned char *)SALT, sizeof SALT - 1, secret,
                     SL_SESSION_SECRET_LEN, (const unsigned char *)token, strlen(token), key,
                     SL_SESSION_KEY_LEN) != 0)
        return SL_EIO;
    return SL_OK;
}

/* The request's fields may not contain the canonical string's separator. */
static int field_ok(const char *s)
{
    return s != NULL && s[0] != '\0' && strchr(s, '\n') == NULL;
}

/* The raw HMAC-SHA256 of the session's canonical string. */
static int raw_mac(const uint8_t key[SL_SESSION_KEY_LEN], const char *token, const char *method,
                   const char *path, int64_t timestamp_ms, const char *nonce,
                   const uint8_t body_sha256[32], uint8_t out[32])
{
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    mbedtls_md_context_t ctx;
    char ts[24], body_hex[65];
    int rc = 0;
    if (key == NULL || body_sha256 == NULL || md == NULL || !field_ok(token) || !field_ok(method) ||
        !field_ok(path) || !field_ok(nonce))
        return SL_EINVAL;
    snprintf(ts, sizeof ts, "%" PRId64, timestamp_ms);
    sl_hex(body_sha256, 32, body_hex);
    {
        const char *parts[] = {"STARLING-S1", token, method, path, ts, nonce, body_hex};
        mbedtls_md_init(&ctx);
        rc = mbedtls_md_setup(&ctx, md, 1);
        if (rc == 0)
            rc = mbedtls_md_hmac_starts(&ctx, key, SL_SESSION_KEY_LEN);
        for (size_t i = 0; rc == 0 && i < sizeof parts / sizeof parts[0]; i++) {
            if (i > 0)
                rc = mbedtls_md_hmac_update(&ctx, (const unsigned char *)"\n", 1);
            if (rc == 0)
                rc =
                    mbedtls_md_hmac_update(&ctx, (const unsigned char *)parts[i], strlen(parts[i]));
        }
        if (rc == 0)
            rc = mbedtls_md_hmac_finish(&ctx, out);
        mbedtls_md_free(&ctx);
    }
    return rc == 0 ? SL_OK : SL_EIO;
}

int sl_session_mac(const uint8_t key[SL_SESSION_KEY_LEN], const char *token, const char *method,
                   const char *path, int64_t timestamp_ms, const char *nonce,
                   const uint8_t body_sha256[32], char *mac, size_t cap)
{
    uint8_t raw[32];
    int rc = raw_mac(key, token, method, path, timestamp_ms, nonce, body_sha256, raw);
    if (rc == SL_OK)
        rc = sl_base64_encode(raw, sizeof raw, mac, cap);
    mbedtls_platform_zeroize(raw, sizeof raw);
    return rc;
}

int sl_session_verify(const uint8_t key[SL_SESSION_KEY_LEN], const char *token, const char *method,
                      const char *path, int64_t timestamp_ms, const char *nonce,
                      const uint8_t body_sha256[32], const char *mac)
{
    uint8_t want[32], got[33];
    size_t len = 0;
    unsigned char diff = 0;
    int rc;
    if (mac == NULL || sl_base64_decode(mac, got, sizeof got, &len) != SL_OK || len != 32)
        return SL_ESYNTAX;
    rc = raw_mac(key, token, method, path, timestamp_ms, nonce, body_sha256, want);
    if (rc != SL_OK)
        return rc == SL_EINVAL ? SL_ESYNTAX : rc;
    for (size_t i = 0; i < sizeof want; i++) /* constant time: every byte, always */
        diff |= (unsigned char)(want[i] ^ got[i]);
    mbedtls_platform_zeroize(want, sizeof want);
    return diff == 0 ? SL_OK : SL_EPERM;
}
