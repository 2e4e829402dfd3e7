/* test_sign.c - api_sign.h: encodings, keys, signatures, nonces, replay cache. */
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>

#include "../../support/sl_test.h"
#include "starling/api_sign.h"

/* ---------------------------------------------------------------- encodings */

static void test_base64_rfc4648_vectors(void **state)
{
    (void)state;
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                        "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char out[16];
        assert_int_equal(
            sl_base64_encode((const uint8_t *)plain[i], strlen(plain[i]), out, sizeof out), SL_OK);
        assert_string_equal(out, coded[i]);
        uint8_t back[16];
        size_t n = 99;
        assert_int_equal(sl_base64_decode(coded[i], back, sizeof back, &n), SL_OK);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(back, plain[i], n);
    }
    /* All 256 byte values survive a round trip. */
    uint8_t all[256], back[256];
    char text[400];
    size_t n = 0;
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    assert_int_equal(sl_base64_encode(all, sizeof all, text, sizeof text), SL_OK);
    assert_int_equal(sl_base64_decode(text, back, sizeof back, &n), SL_OK);
    assert_int_equal(n, 256);
    assert_memory_equal(all, back, 256);
}

static void test_base64_rejects_junk(void **state)
{
    (void)state;
    static const char *const junk[] = {
        "Zg=",      /* length not a multiple of 4 */
        "Zg",       /* padding missing */
        "Z===",     /* too much padding */
        "====",     /* only padding */
        "Zh==",     /* non-zero unused bits */
        "Zm9=",     /* non-zero unused bits */
        "Zm9v\n",   /* whitespace */
        "Zm9 v",    /* space */
        "Zg==Zg==", /* padding in the middle */
        "Zm9-",     /* URL-safe alphabet */
        "Zm9_",     /* URL-safe alphabet */
        "Zm\x80v",  /* high byte */
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        uint8_t out[8] = {0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA};
        size_t n = 1234;
        assert_int_equal(sl_base64_decode(junk[i], out, sizeof out, &n), SL_ESYNTAX);
        assert_int_equal(n, 1234); /* outputs untouched */
        assert_int_equal(out[0], 0xAA);
    }
    uint8_t small[2];
    size_t n = 7;
    assert_int_equal(sl_base64_decode("Zm9v", small, sizeof small, &n), SL_ETOOBIG);
    assert_int_equal(n, 7);
    char tiny[4];
    assert_int_equal(sl_base64_encode((const uint8_t *)"foo", 3, tiny, sizeof tiny), SL_EINVAL);
}

static void test_hex_vectors(void **state)
{
    (void)state;
    char out[16];
    sl_hex((const uint8_t *)"foobar", 6, out);
    assert_string_equal(out, "666f6f626172"); /* RFC 4648 section 10, base16 */
    sl_hex((const uint8_t *)"", 0, out);
    assert_string_equal(out, "");
    uint8_t bytes[6];
    assert_int_equal(sl_unhex("666F6f626172", bytes, 6), SL_OK);
    assert_memory_equal(bytes, "foobar", 6);
    /* Exactly 2 * len digits are read; a trailing quote is not looked at. */
    uint8_t one;
    assert_int_equal(sl_unhex("ff\"", &one, 1), SL_OK);
    assert_int_equal(one, 0xff);
    memset(bytes, 0x55, sizeof bytes);
    assert_int_equal(sl_unhex("666f6f62617", bytes, 6), SL_ESYNTAX); /* short */
    assert_int_equal(sl_unhex("666f6f62617g", bytes, 6), SL_ESYNTAX);
    assert_int_equal(sl_unhex(" 66f6f626172", bytes, 6), SL_ESYNTAX);
    assert_int_equal(bytes[0], 0x55); /* untouched */
}

static void test_sha256_vectors(void **state)
{
    (void)state;
    uint8_t d[32];
    char hex[65];
    sl_sha256("abc", 3, d);
    sl_hex(d, 32, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sl_sha256(NULL, 0, d);
    sl_hex(d, 32, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* ---------------------------------------------------------------- signatures */

typedef struct fixture {
    sl_device_key *key;
    uint8_t pub[SL_PUBKEY_LEN];
    uint8_t body[32];
    char sig[SL_SIGNATURE_B64_MAX];
} fixture;

static const char *const NONCE = "abcdefghijklmnop_0123-XYZ";
static const int64_t TS = 1764465820123;

static int setup_key(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(sl_device_key_generate(&f->key), SL_OK);
    assert_int_equal(sl_device_key_public(f->key, f->pub), SL_OK);
    sl_sha256("{\"round\":7}", 11, f->body);
    assert_int_equal(sl_sign_request(f->key, "POST", "/v1/checkin?x=1", TS, NONCE, f->body, f->sig,
                                     sizeof f->sig),
                     SL_OK);
    *state = f;
    return 0;
}

static int teardown_key(void **state)
{
    fixture *f = *state;
    sl_device_key_free(f->key);
    free(f);
    return 0;
}

static void test_sign_verify_round_trip(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->pub[0], 0x04);
    assert_true(strlen(f->sig) > 80 && strlen(f->sig) < SL_SIGNATURE_B64_MAX);
    assert_int_equal(sl_verify_request(f->pub, sizeof f->pub, "POST", "/v1/checkin?x=1", TS, NONCE,
                                       f->body, f->sig),
                     SL_OK);
    /* A signature cap that is too small is refused, not cut. */
    char small[16];
    assert_int_equal(sl_sign_request(f->key, "GET", "/", TS, NONCE, f->body, small, sizeof small),
                     SL_EINVAL);
    /* Empty body: the digest of zero bytes. */
    uint8_t empty[32];
    char sig[SL_SIGNATURE_B64_MAX];
    sl_sha256(NULL, 0, empty);
    assert_int_equal(
        sl_sign_request(f->key, "GET", "/v1/models/3", -5, NONCE, empty, sig, sizeof sig), SL_OK);
    assert_int_equal(
        sl_verify_request(f->pub, sizeof f->pub, "GET", "/v1/models/3", -5, NONCE, empty, sig),
        SL_OK);
}

static void test_verify_rejects_tampering(void **state)
{
    fixture *f = *state;
    const uint8_t *p = f->pub;
    size_t pl = sizeof f->pub;
    assert_int_equal(sl_verify_request(p, pl, "PUT", "/v1/checkin?x=1", TS, NONCE, f->body, f->sig),
                     SL_EPERM);
    assert_int_equal(
        sl_verify_request(p, pl, "POST", "/v1/checkin?x=2", TS, NONCE, f->body, f->sig), SL_EPERM);
    assert_int_equal(sl_verify_request(p, pl, "POST", "/v1/checkin", TS, NONCE, f->body, f->sig),
                     SL_EPERM);
    assert_int_equal(
        sl_verify_request(p, pl, "POST", "/v1/checkin?x=1", TS + 1, NONCE, f->body, f->sig),
        SL_EPERM);
    assert_int_equal(sl_verify_request(p, pl, "POST", "/v1/checkin?x=1", TS,
                                       "abcdefghijklmnop_0123-XYz", f->body, f->sig),
                     SL_EPERM);
    uint8_t body[32];
    memcpy(body, f->body, 32);
    body[31] ^= 1;
    assert_int_equal(sl_verify_request(p, pl, "POST", "/v1/checkin?x=1", TS, NONCE, body, f->sig),
                     SL_EPERM);
    /* Every position of the signature text, swapped for another valid symbol. */
    size_t n = strlen(f->sig);
    for (size_t i = 0; i < n; i++) {
        char sig[SL_SIGNATURE_B64_MAX];
        memcpy(sig, f->sig, n + 1);
        if (sig[i] == '=')
            continue;
        sig[i] = sig[i] == 'A' ? 'B' : 'A';
        int rc = sl_verify_request(p, pl, "POST", "/v1/checkin?x=1", TS, NONCE, f->body, sig);
        /* Changing the last symbol before padding may leave junk bits: syntax. */
        assert_true(rc == SL_EPERM || rc == SL_ESYNTAX);
        if (i < n - 3)
            assert_int_equal(rc, SL_EPERM);
    }
}

static void test_verify_rejects_other_key(void **state)
{
    fixture *f = *state;
    sl_device_key *other = NULL;
    uint8_t other_pub[SL_PUBKEY_LEN];
    assert_int_equal(sl_device_key_generate(&other), SL_OK);
    assert_int_equal(sl_device_key_public(other, other_pub), SL_OK);
    assert_memory_not_equal(other_pub, f->pub, SL_PUBKEY_LEN);
    assert_int_equal(sl_verify_request(other_pub, sizeof other_pub, "POST", "/v1/checkin?x=1", TS,
                                       NONCE, f->body, f->sig),
                     SL_EPERM);
    sl_device_key_free(other);
}

static void test_verify_rejects_malformed(void **state)
{
    fixture *f = *state;
    const char *path = "/v1/checkin?x=1";
    assert_int_equal(sl_verify_request(f->pub, 64, "POST", path, TS, NONCE, f->body, f->sig),
                     SL_ESYNTAX);
    uint8_t bad[SL_PUBKEY_LEN];
    memcpy(bad, f->pub, sizeof bad);
    bad[0] = 0x02; /* compressed form is not accepted */
    assert_int_equal(sl_verify_request(bad, sizeof bad, "POST", path, TS, NONCE, f->body, f->sig),
                     SL_ESYNTAX);
    memcpy(bad, f->pub, sizeof bad);
    bad[64] ^= 1; /* no longer on the curve */
    assert_int_equal(sl_verify_request(bad, sizeof bad, "POST", path, TS, NONCE, f->body, f->sig),
                     SL_ESYNTAX);
    memset(bad + 1, 0, 64); /* the point at infinity's coordinates */
    assert_int_equal(sl_verify_request(bad, sizeof bad, "POST", path, TS, NONCE, f->body, f->sig),
                     SL_ESYNTAX);
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", path, TS, NONCE, f->body, "not base64!"),
                     SL_ESYNTAX);
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", path, TS, NONCE, f->body, ""),
                     SL_ESYNTAX);
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", path, TS, NONCE, f->body, "AAAA"),
                     SL_EPERM); /* valid base64, not a DER signature */
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", path, TS, "short", f->body, f->sig),
                     SL_ESYNTAX);
    assert_int_equal(
        sl_verify_request(f->pub, 65, "POST", path, TS, "abcdefghijklmnop!", f->body, f->sig),
        SL_ESYNTAX);
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", "/a\nb", TS, NONCE, f->body, f->sig),
                     SL_ESYNTAX);
    char longsig[300];
    memset(longsig, 'A', sizeof longsig - 1);
    longsig[sizeof longsig - 1] = '\0';
    assert_int_equal(sl_verify_request(f->pub, 65, "POST", path, TS, NONCE, f->body, longsig),
                     SL_ESYNTAX);
    /* Signing refuses what could not be verified. */
    char sig[SL_SIGNATURE_B64_MAX];
    assert_int_equal(
        sl_sign_request(f->key, "GET", "/", TS, "bad nonce here!!", f->body, sig, sizeof sig),
        SL_EINVAL);
    assert_int_equal(sl_sign_request(f->key, "GET", "/x\n", TS, NONCE, f->body, sig, sizeof sig),
                     SL_EINVAL);
}

typedef struct sign_thread {
    fixture *f;
    int failures;
} sign_thread;

static void *sign_many(void *arg)
{
    sign_thread *t = arg;
    for (int i = 0; i < 20; i++) {
        char sig[SL_SIGNATURE_B64_MAX];
        if (sl_sign_request(t->f->key, "GET", "/v1/status", TS + i, NONCE, t->f->body, sig,
                            sizeof sig) != SL_OK ||
            sl_verify_request(t->f->pub, SL_PUBKEY_LEN, "GET", "/v1/status", TS + i, NONCE,
                              t->f->body, sig) != SL_OK)
            t->failures++;
    }
    return NULL;
}

static void test_sign_from_threads(void **state)
{
    fixture *f = *state;
    pthread_t th[4];
    sign_thread args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (sign_thread){.f = f};
        assert_int_equal(pthread_create(&th[i], NULL, sign_many, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
}

/* ---------------------------------------------------------------- key files */

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, len, fp), len);
    fclose(fp);
}

static void test_key_save_load(void **state)
{
    fixture *f = *state;
    char dir[512], path[600];
    sl_test_mkdtemp(dir, sizeof dir, "sign");
    snprintf(path, sizeof path, "%s/device.key", dir);
    assert_int_equal(sl_device_key_save(f->key, path), SL_OK);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    sl_device_key *loaded = NULL;
    assert_int_equal(sl_device_key_load(path, &loaded), SL_OK);
    uint8_t pub[SL_PUBKEY_LEN];
    assert_int_equal(sl_device_key_public(loaded, pub), SL_OK);
    assert_memory_equal(pub, f->pub, SL_PUBKEY_LEN);
    char sig[SL_SIGNATURE_B64_MAX];
    assert_int_equal(
        sl_sign_request(loaded, "GET", "/v1/status", TS, NONCE, f->body, sig, sizeof sig), SL_OK);
    assert_int_equal(sl_verify_request(f->pub, 65, "GET", "/v1/status", TS, NONCE, f->body, sig),
                     SL_OK);
    sl_device_key_free(loaded);
    sl_device_key_free(NULL);
    sl_test_rmtree(dir);
}

/* An mbedTLS f_rng for the blinding of the reference signatures. */
static int test_rng(void *ctx, unsigned char *buf, size_t len)
{
    (void)ctx;
    return getrandom(buf, len, 0) == (ssize_t)len ? 0 : -1;
}

/* SHA-256 of the canonical string of api_sign.h, computed here independently. */
static void canonical_sha(const char *method, const char *path, int64_t ts, const char *nonce,
                          const uint8_t body[32], uint8_t out[32])
{
    char hex[65], text[512];
    sl_hex(body, 32, hex);
    int n = snprintf(text, sizeof text, "STARLING-V1\n%s\n%s\n%lld\n%s\n%s", method, path,
                     (long long)ts, nonce, hex);
    assert_true(n > 0 && (size_t)n < sizeof text);
    sl_sha256(text, (size_t)n, out);
}

/*
 * The pooled-group signing and verification give what mbedTLS's own
 * one-context calls give: the same (deterministic, RFC 6979) signature
 * bytes, and the same verdicts both ways, over many keys and messages and
 * from several threads at once (each thread's pooled groups carry the table
 * of G computed by another).
 */
typedef struct agree_thread {
    int keys, failures;
    char dir[512];
} agree_thread;

static void *agree_many(void *arg)
{
    agree_thread *t = arg;
    for (int k = 0; k < t->keys; k++) {
        char path[600], sig[SL_SIGNATURE_B64_MAX];
        sl_device_key *key = NULL;
        uint8_t pub[SL_PUBKEY_LEN], body[32], hash[32], der[MBEDTLS_ECDSA_MAX_LEN];
        uint8_t ref_der[MBEDTLS_ECDSA_MAX_LEN];
        size_t der_len = 0, ref_len = 0;
        mbedtls_pk_context pk;
        mbedtls_ecdsa_context ecdsa;
        snprintf(path, sizeof path, "%s/k%d-%p.key", t->dir, k, (void *)t);
        sl_sha256(path, strlen(path), body);
        if (sl_device_key_generate(&key) != SL_OK || sl_device_key_public(key, pub) != SL_OK ||
            sl_device_key_save(key, path) != SL_OK) {
            t->failures++;
            sl_device_key_free(key);
            continue;
        }
        mbedtls_pk_init(&pk);
        mbedtls_ecdsa_init(&ecdsa);
        const char *route = k % 2 ? "/v1/uploads/abc" : "/v1/rounds/3/uploads?length=9";
        int ok =
            mbedtls_pk_parse_keyfile(&pk, path, NULL) == 0 &&
            mbedtls_ecdsa_from_keypair(&ecdsa, mbedtls_pk_ec(pk)) == 0 &&
            sl_sign_request(key, "POST", route, TS + k, NONCE, body, sig, sizeof sig) == SL_OK &&
            sl_base64_decode(sig, der, sizeof der, &der_len) == SL_OK;
        canonical_sha("POST", route, TS + k, NONCE, body, hash);
        /* mbedTLS's reference signature of the same message: the same bytes */
        ok = ok &&
             mbedtls_ecdsa_write_signature(&ecdsa, MBEDTLS_MD_SHA256, hash, 32, ref_der, &ref_len,
                                           test_rng, NULL) == 0 &&
             ref_len == der_len && memcmp(ref_der, der, der_len) == 0;
        /* mbedTLS verifies ours, and we verify mbedTLS's */
        ok = ok && mbedtls_ecdsa_read_signature(&ecdsa, hash, 32, der, der_len) == 0;
        ok = ok &&
             sl_verify_request(pub, sizeof pub, "POST", route, TS + k, NONCE, body, sig) == SL_OK;
        /* both refuse a changed message */
        hash[0] ^= 1;
        ok = ok && mbedtls_ecdsa_read_signature(&ecdsa, hash, 32, der, der_len) != 0;
        ok = ok && sl_verify_request(pub, sizeof pub, "POST", route, TS + k + 1, NONCE, body,
                                     sig) == SL_EPERM;
        if (!ok)
            t->failures++;
        mbedtls_ecdsa_free(&ecdsa);
        mbedtls_pk_free(&pk);
        sl_device_key_free(key);
    }
    return NULL;
}

static void test_pooled_groups_agree_with_mbedtls(void **state)
{
    (void)state;
    pthread_t th[3];
    agree_thread args[3];
    char dir[512];
    sl_test_mkdtemp(dir, sizeof dir, "sign-agree");
    for (int i = 0; i < 3; i++) {
        args[i] = (agree_thread){.keys = 8};
        snprintf(args[i].dir, sizeof args[i].dir, "%s", dir);
        assert_int_equal(pthread_create(&th[i], NULL, agree_many, &args[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    sl_test_rmtree(dir);
}

/* A P-384 key in PEM: a valid key file, but not a device key. */
static void write_p384_key(const char *path)
{
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context pk;
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_pk_init(&pk);
    assert_int_equal(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, NULL, 0), 0);
    assert_int_equal(mbedtls_pk_setup(&pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
    assert_int_equal(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP384R1, mbedtls_pk_ec(pk),
                                         mbedtls_ctr_drbg_random, &drbg),
                     0);
    unsigned char pem[2048];
    assert_int_equal(mbedtls_pk_write_key_pem(&pk, pem, sizeof pem), 0);
    write_text(path, (const char *)pem, strlen((const char *)pem));
    mbedtls_pk_free(&pk);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
}

static void test_key_load_rejects_corrupt(void **state)
{
    fixture *f = *state;
    char dir[512], path[600];
    sl_test_mkdtemp(dir, sizeof dir, "sign-corrupt");
    snprintf(path, sizeof path, "%s/device.key", dir);
    sl_device_key *key = (sl_device_key *)0x1; /* must stay untouched */

    assert_int_equal(sl_device_key_load(path, &key), SL_ENOENT);
    write_text(path, "hello, I am not a key\n", 22);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);
    write_text(path, "", 0);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);

    /* A real key file cut in half, then one with a flipped character. */
    assert_int_equal(sl_device_key_save(f->key, path), SL_OK);
    char pem[1024];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(pem, 1, sizeof pem, fp);
    fclose(fp);
    write_text(path, pem, n / 2);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);
    pem[n / 2] = pem[n / 2] == 'A' ? 'B' : 'A';
    write_text(path, pem, n);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);
    write_text(path, "\0\0\0\0", 4);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);

    write_p384_key(path);
    assert_int_equal(sl_device_key_load(path, &key), SL_ECORRUPT);
    assert_ptr_equal(key, (sl_device_key *)0x1);
    sl_test_rmtree(dir);
}

/* ---------------------------------------------------------------- nonces */

static void test_nonce_new(void **state)
{
    (void)state;
    char a[33], b[33];
    assert_int_equal(sl_nonce_new(a, sizeof a), SL_OK);
    assert_int_equal(sl_nonce_new(b, sizeof b), SL_OK);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"),
                     32);
    assert_string_not_equal(a, b);
    char small[32];
    assert_int_equal(sl_nonce_new(small, sizeof small), SL_EINVAL);
}

static void make_nonce(char *out, unsigned i)
{
    snprintf(out, 40, "nonce-%010u-padding", i);
}

static void test_nonce_cache_replay(void **state)
{
    (void)state;
    sl_nonce_cache *c = NULL;
    assert_int_equal(sl_nonce_cache_create(300000, 100, &c), SL_OK);
    int64_t now = 1764465820000;
    assert_int_equal(sl_nonce_check(c, 7, NONCE, now, now), SL_OK);
    assert_int_equal(sl_nonce_check(c, 7, NONCE, now, now), SL_EDUPLICATE);
    assert_int_equal(sl_nonce_check(c, 7, NONCE, now + 10, now + 20), SL_EDUPLICATE);
    assert_int_equal(sl_nonce_check(c, 8, NONCE, now, now), SL_OK); /* other device */
    assert_int_equal(sl_nonce_check(c, 7, "short", now, now), SL_ESYNTAX);
    sl_nonce_cache_free(c);
    sl_nonce_cache_free(NULL);
    assert_int_equal(sl_nonce_cache_create(0, 10, &c), SL_EINVAL);
    assert_int_equal(sl_nonce_cache_create(1000, 0, &c), SL_EINVAL);
}

static void test_nonce_cache_window(void **state)
{
    (void)state;
    sl_nonce_cache *c = NULL;
    int64_t w = 300000, now = 1764465820000;
    assert_int_equal(sl_nonce_cache_create(w, 100, &c), SL_OK);
    assert_int_equal(sl_nonce_check(c, 1, NONCE, now - w - 1, now), SL_ETIMEDOUT);
    assert_int_equal(sl_nonce_check(c, 1, NONCE, now + w + 1, now), SL_ETIMEDOUT);
    /* The refused request was not remembered; the edges of the window are in. */
    assert_int_equal(sl_nonce_check(c, 1, NONCE, now - w, now), SL_OK);
    /* A replay of a stale request is refused by its timestamp first. */
    assert_int_equal(sl_nonce_check(c, 1, NONCE, now - w, now + 1), SL_ETIMEDOUT);
    char n2[40];
    make_nonce(n2, 2);
    assert_int_equal(sl_nonce_check(c, 1, n2, now + w, now), SL_OK);
    /* Extreme values do not overflow. */
    assert_int_equal(sl_nonce_check(c, 1, NONCE, INT64_MIN, INT64_MAX), SL_ETIMEDOUT);
    assert_int_equal(sl_nonce_check(c, 1, NONCE, INT64_MAX, INT64_MIN), SL_ETIMEDOUT);
    sl_nonce_cache_free(c);
}

static void test_nonce_cache_eviction(void **state)
{
    (void)state;
    sl_nonce_cache *c = NULL;
    int64_t now = 1000000;
    char n[40];
    assert_int_equal(sl_nonce_cache_create(60000, 4, &c), SL_OK);
    for (unsigned i = 1; i <= 5; i++) {
        make_nonce(n, i);
        assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_OK);
    }
    /* Nonce 1 was the oldest and is gone; 2..5 are remembered. */
    for (unsigned i = 2; i <= 5; i++) {
        make_nonce(n, i);
        assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_EDUPLICATE);
    }
    make_nonce(n, 1);
    assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_OK); /* evicts 2 */
    make_nonce(n, 2);
    assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_OK); /* evicts 3 */
    make_nonce(n, 4);
    assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_EDUPLICATE);
    /* Many more than the capacity: still bounded and consistent. */
    for (unsigned i = 100; i < 5000; i++) {
        make_nonce(n, i);
        assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_OK);
    }
    for (unsigned i = 4996; i < 5000; i++) {
        make_nonce(n, i);
        assert_int_equal(sl_nonce_check(c, 3, n, now, now), SL_EDUPLICATE);
    }
    sl_nonce_cache_free(c);
}

typedef struct cache_thread {
    sl_nonce_cache *c;
    int accepted;
} cache_thread;

static void *check_many(void *arg)
{
    cache_thread *t = arg;
    char n[40];
    for (unsigned i = 0; i < 2000; i++) {
        make_nonce(n, i);
        if (sl_nonce_check(t->c, 42, n, 5000, 5000) == SL_OK)
            t->accepted++;
    }
    return NULL;
}

static void test_nonce_cache_threads(void **state)
{
    (void)state;
    sl_nonce_cache *c = NULL;
    assert_int_equal(sl_nonce_cache_create(60000, 10000, &c), SL_OK);
    pthread_t th[4];
    cache_thread args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (cache_thread){.c = c};
        assert_int_equal(pthread_create(&th[i], NULL, check_many, &args[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += args[i].accepted;
    }
    assert_int_equal(total, 2000); /* each nonce admitted exactly once */
    sl_nonce_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_rfc4648_vectors),
        cmocka_unit_test(test_base64_rejects_junk),
        cmocka_unit_test(test_hex_vectors),
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test_setup_teardown(test_sign_verify_round_trip, setup_key, teardown_key),
        cmocka_unit_test_setup_teardown(test_verify_rejects_tampering, setup_key, teardown_key),
        cmocka_unit_test_setup_teardown(test_verify_rejects_other_key, setup_key, teardown_key),
        cmocka_unit_test_setup_teardown(test_verify_rejects_malformed, setup_key, teardown_key),
        cmocka_unit_test_setup_teardown(test_sign_from_threads, setup_key, teardown_key),
        cmocka_unit_test_setup_teardown(test_key_save_load, setup_key, teardown_key),
        cmocka_unit_test(test_pooled_groups_agree_with_mbedtls),
        cmocka_unit_test_setup_teardown(test_key_load_rejects_corrupt, setup_key, teardown_key),
        cmocka_unit_test(test_nonce_new),
        cmocka_unit_test(test_nonce_cache_replay),
        cmocka_unit_test(test_nonce_cache_window),
        cmocka_unit_test(test_nonce_cache_eviction),
        cmocka_unit_test(test_nonce_cache_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
