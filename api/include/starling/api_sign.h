/*
 * starling/api_sign.h - what both ends of the REST protocol share: device
 * keys (ECDSA P-256, mbedTLS), request signing and verification, replay
 * protection, SHA-256 and hex/base64 helpers, and the header names.
 *
 * A device request carries these headers:
 *   X-Starling-Device      the device id (decimal)
 *   X-Starling-Timestamp   milliseconds since the epoch (decimal)
 *   X-Starling-Nonce       16..64 characters of [A-Za-z0-9_-], unique per request
 *   X-Starling-Signature   base64 of the DER ECDSA signature over the canonical string
 * The canonical string is
 *   "STARLING-V1\n" METHOD "\n" PATH-WITH-QUERY "\n" TIMESTAMP "\n" NONCE "\n"
 *   lowercase-hex(SHA-256(body))
 * (the empty body's digest for requests without one).
 */
#ifndef STARLING_API_SIGN_H
#define STARLING_API_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_HDR_DEVICE        "X-Starling-Device"
#define SL_HDR_TIMESTAMP     "X-Starling-Timestamp"
#define SL_HDR_NONCE         "X-Starling-Nonce"
#define SL_HDR_SIGNATURE     "X-Starling-Signature"

#define SL_PUBKEY_LEN        65 /* uncompressed P-256 point: 0x04 || X || Y */
#define SL_SIGNATURE_B64_MAX 128

/** sl_sha256 - SHA-256 of @len bytes (mbedTLS). */
void sl_sha256(const void *data, size_t len, uint8_t out[32]);

/** sl_hex - lowercase hex of @len bytes into @out (2 * len + 1 bytes). */
void sl_hex(const uint8_t *in, size_t len, char *out);

/** sl_unhex - parse exactly 2 * @len hex digits; SL_ESYNTAX otherwise. */
int sl_unhex(const char *in, uint8_t *out, size_t len);

/** A device's private key. Opaque. */
typedef struct sl_device_key sl_device_key;

/** sl_device_key_generate - a fresh P-256 key pair from the system's entropy. */
int sl_device_key_generate(sl_device_key **out);

/** sl_device_key_save - write the key (PEM) atomically with mode 0600. */
int sl_device_key_save(const sl_device_key *key, const char *path);

/** sl_device_key_load - read a key written by sl_device_key_save(); SL_ECORRUPT if invalid. */
int sl_device_key_load(const char *path, sl_device_key **out);

/** sl_device_key_public - the public key as an uncompressed point (SL_PUBKEY_LEN bytes). */
int sl_device_key_public(const sl_device_key *key, uint8_t out[SL_PUBKEY_LEN]);

/** sl_device_key_free - NULL is a no-op (the key material is zeroed). */
void sl_device_key_free(sl_device_key *key);

/**
 * sl_sign_request - sign the canonical string of a request; writes the
 * base64 signature (NUL-terminated) into @sig (at least SL_SIGNATURE_B64_MAX).
 * @path includes the query string. @body_sha256: digest of the body.
 */
int sl_sign_request(const sl_device_key *key, const char *method, const char *path,
                    int64_t timestamp_ms, const char *nonce, const uint8_t body_sha256[32],
                    char *sig, size_t sigcap);

/**
 * sl_verify_request - check a signature against a public key. Returns SL_OK,
 * SL_EPERM (bad signature, wrong key), SL_ESYNTAX (malformed base64, nonce
 * or key). Thread-safe.
 */
int sl_verify_request(const uint8_t *pubkey, size_t pubkey_len, const char *method,
                      const char *path, int64_t timestamp_ms, const char *nonce,
                      const uint8_t body_sha256[32], const char *sig);

/** sl_nonce_new - a random nonce (32 characters of [A-Za-z0-9_-]) into @out (>= 33 bytes). */
int sl_nonce_new(char *out, size_t cap);

/** Replay protection: remembers (device, nonce) for the timestamp window. Opaque. */
typedef struct sl_nonce_cache sl_nonce_cache;

/**
 * sl_nonce_cache_create - a cache accepting timestamps within +-@window_ms
 * of now and holding at most @capacity nonces (oldest evicted first; a
 * nonce older than the window is refused anyway by its timestamp).
 */
int sl_nonce_cache_create(int64_t window_ms, size_t capacity, sl_nonce_cache **out);

/** sl_nonce_cache_free - NULL is a no-op. */
void sl_nonce_cache_free(sl_nonce_cache *c);

/**
 * sl_nonce_check - admit one request: SL_OK (and the nonce is remembered),
 * SL_ETIMEDOUT (timestamp outside the window of @now_ms), SL_EDUPLICATE
 * (this device used this nonce already). Thread-safe.
 */
int sl_nonce_check(sl_nonce_cache *c, int64_t device_id, const char *nonce, int64_t timestamp_ms,
                   int64_t now_ms);

/* ------------------------------------------------------------------------ */
/* Sessions (api/common/session.c)                                          */
/* ------------------------------------------------------------------------ */

/*
 * A device request under a session carries X-Starling-Device,
 * X-Starling-Timestamp and X-Starling-Nonce as a signed one does, the
 * session's token in X-Starling-Session and, instead of X-Starling-Signature,
 * X-Starling-Mac: base64 of HMAC-SHA256 under the session's key of
 *   "STARLING-S1\n" TOKEN "\n" METHOD "\n" PATH-WITH-QUERY "\n" TIMESTAMP "\n"
 *   NONCE "\n" lowercase-hex(SHA-256(body))
 * The token is "s1.<epoch>.<device>.<expires_ms>.<id: 32 lowercase hex>";
 * the key is HKDF-SHA256(salt "starling-session-v1", the coordinator's secret
 * of that epoch, info = the token): bound to the device, the expiry, the
 * epoch and the id, and never stored.
 */
#define SL_HDR_SESSION         "X-Starling-Session"
#define SL_HDR_MAC             "X-Starling-Mac"
#define SL_SESSION_SECRET_LEN  32
#define SL_SESSION_KEY_LEN     32
#define SL_SESSION_ID_LEN      16
#define SL_SESSION_TOKEN_MAX   96 /* bytes of a token, its NUL included */
#define SL_SESSION_MAC_B64_MAX 48

/** A session, as its token names it. */
typedef struct sl_session {
    uint32_t epoch;                /* which coordinator secret derives its key */
    int64_t device_id;             /* the device it belongs to */
    int64_t expires_ms;            /* wall-clock ms after which it is refused */
    uint8_t id[SL_SESSION_ID_LEN]; /* random */
} sl_session;

/** sl_session_token - @s as its token (at most SL_SESSION_TOKEN_MAX bytes) into @out. */
int sl_session_token(const sl_session *s, char *out, size_t cap);

/**
 * sl_session_parse - a token into @out. One spelling per session: no signs,
 * no leading zeros, lowercase hex. Returns SL_OK or SL_ESYNTAX.
 */
int sl_session_parse(const char *token, sl_session *out);

/**
 * sl_session_key - the session key of @token under the epoch's @secret
 * (HKDF-SHA256). Returns SL_OK, SL_EINVAL, SL_EIO.
 */
int sl_session_key(const uint8_t secret[SL_SESSION_SECRET_LEN], const char *token,
                   uint8_t key[SL_SESSION_KEY_LEN]);

/**
 * sl_session_mac - the base64 HMAC of a request's canonical string under
 * @key into @mac (at least SL_SESSION_MAC_B64_MAX bytes). Fields may not be
 * empty or hold a newline (SL_EINVAL).
 */
int sl_session_mac(const uint8_t key[SL_SESSION_KEY_LEN], const char *token, const char *method,
                   const char *path, int64_t timestamp_ms, const char *nonce,
                   const uint8_t body_sha256[32], char *mac, size_t cap);

/**
 * sl_session_verify - check @mac against the request, in constant time.
 * Returns SL_OK, SL_EPERM (another MAC), SL_ESYNTAX (malformed MAC or
 * fields). Thread-safe.
 */
int sl_session_verify(const uint8_t key[SL_SESSION_KEY_LEN], const char *token, const char *method,
                      const char *path, int64_t timestamp_ms, const char *nonce,
                      const uint8_t body_sha256[32], const char *mac);

/** sl_base64_encode / _decode - standard alphabet with padding; decode rejects junk. */
int sl_base64_encode(const uint8_t *in, size_t len, char *out, size_t cap);
int sl_base64_decode(const char *in, uint8_t *out, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_API_SIGN_H */
