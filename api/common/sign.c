/*
 * sign.c - device keys (ECDSA P-256 through mbedTLS), request signatures
 * and nonces.
 *
 * The signed message is the canonical string of api_sign.h. It is hashed
 * piece by piece, so a long path costs no allocation and has no length limit
 * beyond what the HTTP layer already imposes.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <mbedtls/asn1.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>

#include "starling/api_sign.h"
#include "sign_int.h"

/* A PEM EC key is about 230 bytes; anything this large is not one of ours. */
#define SL__KEY_FILE_MAX 16384

/*
 * Signing and verifying multiply the curve's base point G, and mbedTLS
 * speeds that up with a table of multiples of G that it computes on the
 * first use of a group and keeps inside it (grp->T). A group loaded per
 * call recomputes the table every time, about a third of a verification.
 * So the P-256 group is loaded once into a small pool: a call borrows one
 * group for its duration (never shared by two threads at once, as mbedTLS
 * requires) and gives it back with its table. When every pooled group is in
 * use a call loads its own; beyond GROUP_POOL idle groups are freed.
 * Idle groups live as long as the process (about 3 KB each).
 */
#define GROUP_POOL 16

static pthread_mutex_t group_lock = PTHREAD_MUTEX_INITIALIZER;
static mbedtls_ecp_group *group_idle[GROUP_POOL];
static size_t group_nidle;

/* A loaded P-256 group for the caller's exclusive use, or NULL (no memory). */
static mbedtls_ecp_group *group_take(void)
{
    mbedtls_ecp_group *grp = NULL;
    pthread_mutex_lock(&group_lock);
    if (group_nidle > 0)
        grp = group_idle[--group_nidle];
    pthread_mutex_unlock(&group_lock);
    if (grp != NULL)
        return grp;
    grp = malloc(sizeof *grp);
    if (grp == NULL)
        return NULL;
    mbedtls_ecp_group_init(grp);
    if (mbedtls_ecp_group_load(grp, MBEDTLS_ECP_DP_SECP256R1) != 0) {
        mbedtls_ecp_group_free(grp);
        free(grp);
        return NULL;
    }
    return grp;
}

/* Give back a group from group_take() (NULL is a no-op). */
static void group_give(mbedtls_ecp_group *grp)
{
    if (grp == NULL)
        return;
    pthread_mutex_lock(&group_lock);
    if (group_nidle < GROUP_POOL) {
        group_idle[group_nidle++] = grp;
        grp = NULL;
    }
    pthread_mutex_unlock(&group_lock);
    if (grp != NULL) {
        mbedtls_ecp_group_free(grp);
        free(grp);
    }
}

struct sl_device_key {
    /* Read-only after creation: signing borrows a pooled group for the
     * curve arithmetic, so one key may sign from several threads at once. */
    mbedtls_pk_context pk;
};

int sl__random_bytes(void *ctx, unsigned char *buf, size_t len)
{
    (void)ctx;
    while (len > 0) {
        ssize_t got = getrandom(buf, len, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += got;
        len -= (size_t)got;
    }
    return 0;
}

int sl__nonce_valid(const char *nonce)
{
    if (nonce == NULL)
        return 0;
    size_t n = 0;
    for (; nonce[n] != '\0'; n++) {
        char ch = nonce[n];
        int ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-';
        if (!ok || n >= SL__NONCE_MAX)
            return 0;
    }
    return n >= SL__NONCE_MIN;
}

int sl_nonce_new(char *out, size_t cap)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char raw[32];
    if (out == NULL || cap < sizeof raw + 1)
        return SL_EINVAL;
    if (sl__random_bytes(NULL, raw, sizeof raw) != 0)
        return SL_EIO;
    /* 64 symbols: each byte's low 6 bits are uniform, 192 bits in all. */
    for (size_t i = 0; i < sizeof raw; i++)
        out[i] = alphabet[raw[i] & 63];
    out[sizeof raw] = '\0';
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

static sl_device_key *key_alloc(void)
{
    sl_device_key *key = calloc(1, sizeof *key);
    if (key == NULL)
        return NULL;
    mbedtls_pk_init(&key->pk);
    return key;
}

void sl_device_key_free(sl_device_key *key)
{
    if (key == NULL)
        return;
    mbedtls_pk_free(&key->pk); /* zeroes the private scalar */
    mbedtls_platform_zeroize(key, sizeof *key);
    free(key);
}

/* 1 when @pk holds a P-256 ECDSA-capable key pair. */
static int key_is_p256(const mbedtls_pk_context *pk)
{
    if (mbedtls_pk_get_type(pk) != MBEDTLS_PK_ECKEY)
        return 0;
    return mbedtls_pk_ec(*pk)->grp.id == MBEDTLS_ECP_DP_SECP256R1;
}

int sl_device_key_generate(sl_device_key **out)
{
    static const char personal[] = "starling-device-key";
    if (out == NULL)
        return SL_EINVAL;
    sl_device_key *key = key_alloc();
    if (key == NULL)
        return SL_ENOMEM;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    int rc = SL_EIO;
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy,
                              (const unsigned char *)personal, sizeof personal - 1) != 0)
        goto fail;
    if (mbedtls_pk_setup(&key->pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) != 0) {
        rc = SL_ENOMEM;
        goto fail;
    }
    if (mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key->pk),
                            mbedtls_ctr_drbg_random, &drbg) != 0)
        goto fail;
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    *out = key;
    return SL_OK;
fail:
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    sl_device_key_free(key);
    return rc;
}

int sl_device_key_save(const sl_device_key *key, const char *path)
{
    if (key == NULL || path == NULL)
        return SL_EINVAL;
    unsigned char pem[1024];
    /* mbedtls_pk_write_key_pem() takes a non-const context but only reads it. */
    mbedtls_pk_context *pk = (mbedtls_pk_context *)&key->pk;
    if (mbedtls_pk_write_key_pem(pk, pem, sizeof pem) != 0) {
        mbedtls_platform_zeroize(pem, sizeof pem);
        return SL_EINVAL;
    }
    int rc = sl_fs_write_atomic(path, pem, strlen((const char *)pem), 0600);
    mbedtls_platform_zeroize(pem, sizeof pem);
    return rc;
}

int sl_device_key_load(const char *path, sl_device_key **out)
{
    if (path == NULL || out == NULL)
        return SL_EINVAL;
    void *text = NULL;
    size_t len = 0;
    int rc = sl_fs_read_file(path, SL__KEY_FILE_MAX, &text, &len);
    if (rc == SL_ETOOBIG)
        return SL_ECORRUPT;
    if (rc != SL_OK)
        return rc;
    sl_device_key *key = key_alloc();
    if (key == NULL) {
        rc = SL_ENOMEM;
        goto done;
    }
    /* PEM input must include its terminating NUL (sl_fs_read_file adds one). */
    rc = SL_ECORRUPT;
    if (len == 0 || memchr(text, '\0', len) != NULL)
        goto done;
    if (mbedtls_pk_parse_key(&key->pk, text, len + 1, NULL, 0) != 0)
        goto done;
    if (!key_is_p256(&key->pk))
        goto done;
    const mbedtls_ecp_keypair *ec = mbedtls_pk_ec(key->pk);
    /* The file's public point must belong to its private scalar. */
    if (mbedtls_ecp_check_privkey(&ec->grp, &ec->d) != 0 ||
        mbedtls_ecp_check_pubkey(&ec->grp, &ec->Q) != 0 || mbedtls_ecp_check_pub_priv(ec, ec) != 0)
        goto done;
    *out = key;
    key = NULL;
    rc = SL_OK;
done:
    sl_device_key_free(key);
    mbedtls_platform_zeroize(text, len);
    free(text);
    return rc;
}

int sl_device_key_public(const sl_device_key *key, uint8_t out[SL_PUBKEY_LEN])
{
    if (key == NULL || out == NULL)
        return SL_EINVAL;
    const mbedtls_ecp_keypair *ec = mbedtls_pk_ec(key->pk);
    uint8_t point[SL_PUBKEY_LEN];
    size_t olen = 0;
    if (mbedtls_ecp_point_write_binary(&ec->grp, &ec->Q, MBEDTLS_ECP_PF_UNCOMPRESSED, &olen, point,
                                       sizeof point) != 0 ||
        olen != SL_PUBKEY_LEN)
        return SL_EINVAL;
    memcpy(out, point, SL_PUBKEY_LEN);
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Signatures                                                               */
/* ------------------------------------------------------------------------ */

/* The request's fields may not contain the canonical string's separator. */
static int field_ok(const char *s)
{
    return s != NULL && s[0] != '\0' && strchr(s, '\n') == NULL;
}

/* SHA-256 of the canonical string of api_sign.h. */
static void canonical_digest(const char *method, const char *path, int64_t timestamp_ms,
                             const char *nonce, const uint8_t body_sha256[32], uint8_t out[32])
{
    char ts[24];
    char body_hex[65];
    snprintf(ts, sizeof ts, "%" PRId64, timestamp_ms);
    sl_hex(body_sha256, 32, body_hex);
    const char *parts[] = {"STARLING-V1", method, path, ts, nonce, body_hex};
    mbedtls_sha256_context sha;
    mbedtls_sha256_init(&sha);
    (void)mbedtls_sha256_starts_ret(&sha, 0);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (i > 0)
            (void)mbedtls_sha256_update_ret(&sha, (const unsigned char *)"\n", 1);
        (void)mbedtls_sha256_update_ret(&sha, (const unsigned char *)parts[i], strlen(parts[i]));
    }
    (void)mbedtls_sha256_finish_ret(&sha, out);
    mbedtls_sha256_free(&sha);
}

/* One DER element was prepended (@written bytes, or an error < 0): 0 or the error. */
static int der_add(int written, size_t *len)
{
    if (written < 0)
        return written;
    *len += (size_t)written;
    return 0;
}

/*
 * The DER signature (SEQUENCE { r INTEGER, s INTEGER }) of @digest by @ec
 * into @der (MBEDTLS_ECDSA_MAX_LEN bytes), as mbedtls_ecdsa_write_signature()
 * makes it (deterministic k, RFC 6979, with blinding), but on a pooled group.
 * 0 or an mbedTLS error.
 */
static int signature_der(const mbedtls_ecp_keypair *ec, const uint8_t digest[32],
                         unsigned char der[MBEDTLS_ECDSA_MAX_LEN], size_t *der_len)
{
    mbedtls_ecp_group *grp = group_take();
    mbedtls_mpi r, s;
    unsigned char *p = der + MBEDTLS_ECDSA_MAX_LEN;
    size_t len = 0;
    int ret;
    if (grp == NULL)
        return MBEDTLS_ERR_ECP_ALLOC_FAILED;
    mbedtls_mpi_init(&r);
    mbedtls_mpi_init(&s);
    ret = mbedtls_ecdsa_sign_det_ext(grp, &r, &s, &ec->d, digest, 32, MBEDTLS_MD_SHA256,
                                     sl__random_bytes, NULL);
    group_give(grp);
    if (ret != 0)
        goto done;
    /* written backwards from the end of the buffer, as mbedTLS does */
    ret = der_add(mbedtls_asn1_write_mpi(&p, der, &s), &len);
    if (ret == 0)
        ret = der_add(mbedtls_asn1_write_mpi(&p, der, &r), &len);
    if (ret == 0)
        ret = der_add(mbedtls_asn1_write_len(&p, der, len), &len);
    if (ret == 0)
        ret = der_add(
            mbedtls_asn1_write_tag(&p, der, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE),
            &len);
    if (ret == 0) {
        memmove(der, p, len);
        *der_len = len;
    }
done:
    mbedtls_mpi_free(&r);
    mbedtls_mpi_free(&s);
    return ret;
}

/*
 * Verify the DER signature @der of @digest with the public point @q on
 * @grp: 0 when it verifies, else non-zero. As mbedtls_ecdsa_read_signature():
 * one SEQUENCE of two INTEGERs filling @der exactly.
 */
static int signature_check(mbedtls_ecp_group *grp, const mbedtls_ecp_point *q,
                           const uint8_t digest[32], unsigned char *der, size_t der_len)
{
    unsigned char *p = der;
    const unsigned char *end = der + der_len;
    mbedtls_mpi r, s;
    size_t len;
    int ret;
    mbedtls_mpi_init(&r);
    mbedtls_mpi_init(&s);
    ret = mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE);
    if (ret == 0 && p + len != end)
        ret = MBEDTLS_ERR_ASN1_LENGTH_MISMATCH;
    if (ret == 0)
        ret = mbedtls_asn1_get_mpi(&p, end, &r);
    if (ret == 0)
        ret = mbedtls_asn1_get_mpi(&p, end, &s);
    if (ret == 0 && p != end)
        ret = MBEDTLS_ERR_ASN1_LENGTH_MISMATCH;
    if (ret == 0)
        ret = mbedtls_ecdsa_verify(grp, digest, 32, q, &r, &s);
    mbedtls_mpi_free(&r);
    mbedtls_mpi_free(&s);
    return ret;
}

int sl_sign_request(const sl_device_key *key, const char *method, const char *path,
                    int64_t timestamp_ms, const char *nonce, const uint8_t body_sha256[32],
                    char *sig, size_t sigcap)
{
    if (key == NULL || !field_ok(method) || !field_ok(path) || !sl__nonce_valid(nonce) ||
        body_sha256 == NULL || sig == NULL)
        return SL_EINVAL;
    uint8_t digest[32];
    canonical_digest(method, path, timestamp_ms, nonce, body_sha256, digest);

    unsigned char der[MBEDTLS_ECDSA_MAX_LEN];
    size_t der_len = 0;
    int ret = signature_der(mbedtls_pk_ec(key->pk), digest, der, &der_len);
    if (ret != 0)
        return ret == MBEDTLS_ERR_ECP_ALLOC_FAILED || ret == MBEDTLS_ERR_MPI_ALLOC_FAILED
                   ? SL_ENOMEM
                   : SL_EIO;
    char b64[SL_SIGNATURE_B64_MAX];
    if (sl_base64_encode(der, der_len, b64, sizeof b64) != SL_OK)
        return SL_EIO; /* cannot happen: a P-256 DER signature is <= 72 bytes */
    size_t n = strlen(b64);
    if (sigcap < n + 1)
        return SL_EINVAL;
    memcpy(sig, b64, n + 1);
    return SL_OK;
}

int sl_verify_request(const uint8_t *pubkey, size_t pubkey_len, const char *method,
                      const char *path, int64_t timestamp_ms, const char *nonce,
                      const uint8_t body_sha256[32], const char *sig)
{
    if (method == NULL || path == NULL || body_sha256 == NULL)
        return SL_EINVAL;
    if (pubkey == NULL || pubkey_len != SL_PUBKEY_LEN || pubkey[0] != 0x04)
        return SL_ESYNTAX;
    if (!field_ok(method) || !field_ok(path) || !sl__nonce_valid(nonce) || sig == NULL)
        return SL_ESYNTAX;
    if (strlen(sig) >= SL_SIGNATURE_B64_MAX)
        return SL_ESYNTAX;
    uint8_t der[SL_SIGNATURE_B64_MAX];
    size_t der_len = 0;
    if (sl_base64_decode(sig, der, sizeof der, &der_len) != SL_OK || der_len == 0)
        return SL_ESYNTAX;

    mbedtls_ecp_group *grp = group_take();
    mbedtls_ecp_point q;
    int rc = SL_ESYNTAX;
    if (grp == NULL)
        return SL_ENOMEM;
    mbedtls_ecp_point_init(&q);
    if (mbedtls_ecp_point_read_binary(grp, &q, pubkey, pubkey_len) != 0 ||
        mbedtls_ecp_check_pubkey(grp, &q) != 0)
        goto done;
    uint8_t digest[32];
    canonical_digest(method, path, timestamp_ms, nonce, body_sha256, digest);
    /* Any failure from here on (bad DER, trailing bytes, wrong key) is a bad signature. */
    rc = signature_check(grp, &q, digest, der, der_len) == 0 ? SL_OK : SL_EPERM;
done:
    mbedtls_ecp_point_free(&q);
    group_give(grp);
    return rc;
}
