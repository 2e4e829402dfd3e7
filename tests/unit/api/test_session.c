/*
 * test_session.c - api_sign.h's sessions: tokens (one spelling each), the
 * derived key and the MAC against values computed independently (Python's
 * hmac and hashlib, RFC 5869's HKDF written out), and every field of the
 * token and of the request bound: changing any one fails the check.
 */
#include <string.h>

#include "../../support/sl_test.h"
#include "starling/api_sign.h"

/* The vectors: secret 00 01 .. 1f; the token of epoch 3, device 42, expiry
 * 1767225600000, id 00 01 .. 0f; POST /v1/checkin at 1767225500000 with nonce
 * abcdefghijklmnop0123 and the body {"task_id":1}. Computed with:
 *   prk = hmac(b"starling-session-v1", secret, sha256)
 *   key = hmac(prk, token + b"\x01", sha256)
 *   mac = b64(hmac(key, "\n".join(["STARLING-S1", token, method, path, ts, nonce,
 *                                  sha256(body).hex()]), sha256)) */
#define TOKEN   "s1.3.42.1767225600000.000102030405060708090a0b0c0d0e0f"
#define KEY_HEX "85a99a52260dd4707a3eae2755a0e670a4af58d0f9fc32f44bccc86f958530f2"
#define MAC     "olFGCo++vUMOUanxH+g3WCoM0ItuC7N92C6HnVQq/g0="
#define BODY    "{\"task_id\":1}"
#define NONCE   "abcdefghijklmnop0123"
#define STAMP   1767225500000LL

static void secret_of(uint8_t s[SL_SESSION_SECRET_LEN])
{
    for (int i = 0; i < SL_SESSION_SECRET_LEN; i++)
        s[i] = (uint8_t)i;
}

static void test_token_round_trip(void **state)
{
    sl_session s = {3, 42, 1767225600000LL, {0}}, back;
    char text[SL_SESSION_TOKEN_MAX];
    (void)state;
    for (int i = 0; i < SL_SESSION_ID_LEN; i++)
        s.id[i] = (uint8_t)i;
    assert_int_equal(sl_session_token(&s, text, sizeof text), SL_OK);
    assert_string_equal(text, TOKEN);
    assert_int_equal(sl_session_parse(text, &back), SL_OK);
    assert_int_equal(back.epoch, 3);
    assert_int_equal(back.device_id, 42);
    assert_true(back.expires_ms == 1767225600000LL);
    assert_memory_equal(back.id, s.id, SL_SESSION_ID_LEN);
    assert_int_equal(sl_session_token(&s, text, 20), SL_EINVAL); /* no room */
}

static void test_token_refusals(void **state)
{
    static const char *const bad[] = {
        "",
        "s2.3.42.1767225600000.000102030405060708090a0b0c0d0e0f",          /* version */
        "s1.03.42.1767225600000.000102030405060708090a0b0c0d0e0f",         /* leading zero */
        "s1.3.-42.1767225600000.000102030405060708090a0b0c0d0e0f",         /* sign */
        "s1.3.0.1767225600000.000102030405060708090a0b0c0d0e0f",           /* device 0 */
        "s1.3.42.1767225600000.000102030405060708090A0B0C0D0E0F",          /* uppercase */
        "s1.3.42.1767225600000.000102030405060708090a0b0c0d0e",            /* short id */
        "s1.3.42.1767225600000.000102030405060708090a0b0c0d0e0f00",        /* long id */
        "s1.3.42.1767225600000.000102030405060708090a0b0c0d0e0g",          /* not hex */
        "s1.4294967296.42.1767225600000.000102030405060708090a0b0c0d0e0f", /* epoch > 32 bits */
        "s1.3.42.99999999999999999999.000102030405060708090a0b0c0d0e0f",   /* overflow */
        "s1.3.42.000102030405060708090a0b0c0d0e0f",                        /* a field missing */
        "s1.3.42.1767225600000.1.000102030405060708090a0b0c0d0e0f",        /* one too many */
        "s1.3.42.1767225600000.000102030405060708090a0b0c0d0e0f\n",        /* a newline */
    };
    sl_session s;
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (sl_session_parse(bad[i], &s) != SL_ESYNTAX)
            fail_msg("accepted \"%s\"", bad[i]);
    assert_int_equal(sl_session_parse(NULL, &s), SL_ESYNTAX);
}

static void test_vectors(void **state)
{
    uint8_t secret[SL_SESSION_SECRET_LEN], key[SL_SESSION_KEY_LEN], want[SL_SESSION_KEY_LEN];
    uint8_t body[32];
    char mac[SL_SESSION_MAC_B64_MAX];
    (void)state;
    secret_of(secret);
    assert_int_equal(sl_session_key(secret, TOKEN, key), SL_OK);
    assert_int_equal(sl_unhex(KEY_HEX, want, sizeof want), SL_OK);
    assert_memory_equal(key, want, sizeof key);
    sl_sha256(BODY, strlen(BODY), body);
    assert_int_equal(
        sl_session_mac(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, mac, sizeof mac),
        SL_OK);
    assert_string_equal(mac, MAC);
    assert_int_equal(sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, MAC),
                     SL_OK);
}

/* Every field of the token derives another key; every field of the request changes the MAC. */
static void test_everything_bound(void **state)
{
    static const char *const tokens[] = {
        "s1.4.42.1767225600000.000102030405060708090a0b0c0d0e0f", /* another epoch */
        "s1.3.43.1767225600000.000102030405060708090a0b0c0d0e0f", /* another device */
        "s1.3.42.1767225600001.000102030405060708090a0b0c0d0e0f", /* a later expiry */
        "s1.3.42.1767225600000.100102030405060708090a0b0c0d0e0f", /* another id */
    };
    uint8_t secret[SL_SESSION_SECRET_LEN], key[SL_SESSION_KEY_LEN], other[SL_SESSION_KEY_LEN];
    uint8_t body[32], body2[32];
    (void)state;
    secret_of(secret);
    assert_int_equal(sl_session_key(secret, TOKEN, key), SL_OK);
    sl_sha256(BODY, strlen(BODY), body);
    sl_sha256("{\"task_id\":2}", 13, body2);
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        /* the MAC presented under an altered token: the server derives that token's key */
        assert_int_equal(sl_session_key(secret, tokens[i], other), SL_OK);
        assert_memory_not_equal(other, key, sizeof key);
        assert_int_equal(
            sl_session_verify(other, tokens[i], "POST", "/v1/checkin", STAMP, NONCE, body, MAC),
            SL_EPERM);
    }
    /* another secret (a rotated epoch, a forger's guess) */
    secret[0] ^= 1;
    assert_int_equal(sl_session_key(secret, TOKEN, other), SL_OK);
    assert_int_equal(
        sl_session_verify(other, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, MAC), SL_EPERM);
    /* the request: method, path, query, timestamp, nonce, body */
    assert_int_equal(sl_session_verify(key, TOKEN, "PUT", "/v1/checkin", STAMP, NONCE, body, MAC),
                     SL_EPERM);
    assert_int_equal(
        sl_session_verify(key, TOKEN, "POST", "/v1/checkin?x=1", STAMP, NONCE, body, MAC),
        SL_EPERM);
    assert_int_equal(
        sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP + 1, NONCE, body, MAC),
        SL_EPERM);
    assert_int_equal(sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP,
                                       "abcdefghijklmnop0124", body, MAC),
                     SL_EPERM);
    assert_int_equal(sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body2, MAC),
                     SL_EPERM);
    /* another MAC, malformed ones (a strict decoder: padding bits must be 0) */
    assert_int_equal(sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body,
                                       "plFGCo++vUMOUanxH+g3WCoM0ItuC7N92C6HnVQq/g0="),
                     SL_EPERM);
    assert_int_equal(
        sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, "olFGCo=="),
        SL_ESYNTAX);
    assert_int_equal(
        sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, "not base64!"),
        SL_ESYNTAX);
    assert_int_equal(sl_session_verify(key, TOKEN, "POST", "/v1/checkin", STAMP, NONCE, body, NULL),
                     SL_ESYNTAX);
    assert_int_equal(
        sl_session_verify(key, TOKEN, "POST", "/v1/che\nckin", STAMP, NONCE, body, MAC),
        SL_ESYNTAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_round_trip),
        cmocka_unit_test(test_token_refusals),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_everything_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
