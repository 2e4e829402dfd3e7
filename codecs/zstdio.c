/* zstdio.c - Zstandard with content size, checksum and a bounded decoder window. */
#include <pthread.h>
#include <zstd.h>

#include "codec_int.h"

/*
 * One compression and one decompression context per thread, made on first
 * use and freed when the thread exits: creating a context costs more than
 * compressing a small tensor's values.
 */
static pthread_key_t cctx_key, dctx_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static int keys_ok;

static void free_cctx(void *p)
{
    ZSTD_freeCCtx(p);
}

static void free_dctx(void *p)
{
    ZSTD_freeDCtx(p);
}

static void make_keys(void)
{
    keys_ok = pthread_key_create(&cctx_key, free_cctx) == 0 &&
              pthread_key_create(&dctx_key, free_dctx) == 0;
}

static ZSTD_CCtx *thread_cctx(void)
{
    ZSTD_CCtx *c;
    pthread_once(&keys_once, make_keys);
    if (!keys_ok)
        return NULL;
    c = pthread_getspecific(cctx_key);
    if (c == NULL) {
        c = ZSTD_createCCtx();
        if (c != NULL && pthread_setspecific(cctx_key, c) != 0) {
            ZSTD_freeCCtx(c);
            c = NULL;
        }
    }
    return c;
}

static ZSTD_DCtx *thread_dctx(void)
{
    ZSTD_DCtx *d;
    pthread_once(&keys_once, make_keys);
    if (!keys_ok)
        return NULL;
    d = pthread_getspecific(dctx_key);
    if (d == NULL) {
        d = ZSTD_createDCtx();
        if (d != NULL && pthread_setspecific(dctx_key, d) != 0) {
            ZSTD_freeDCtx(d);
            d = NULL;
        }
    }
    return d;
}

int sl__zstd_append(const void *src, size_t len, int level, sl__buf *out)
{
    ZSTD_CCtx *cctx;
    size_t bound = ZSTD_compressBound(len), n;
    int rc;

    if (ZSTD_isError(bound))
        return SL_ETOOBIG;
    rc = sl__buf_reserve(out, bound);
    if (rc != SL_OK)
        return rc;
    cctx = thread_cctx();
    if (cctx == NULL)
        return SL_ENOMEM;
    /* a reset drops parameters left from the last call on this thread */
    if (ZSTD_isError(ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1)))
        return SL_ECOMPRESS;
    n = ZSTD_compress2(cctx, out->data + out->len, bound, src, len);
    if (ZSTD_isError(n))
        return SL_ECOMPRESS;
    out->len += n;
    return SL_OK;
}

int sl__zstd_decode_exact(const void *src, size_t len, void *dst, size_t dst_len)
{
    unsigned long long declared;
    ZSTD_DCtx *dctx;
    size_t frame_size, n;

    /* exactly one frame, and it says how large it is before we decode anything */
    frame_size = ZSTD_findFrameCompressedSize(src, len);
    if (ZSTD_isError(frame_size) || frame_size != len)
        return SL_ECOMPRESS;
    declared = ZSTD_getFrameContentSize(src, len);
    if (declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR ||
        declared != (unsigned long long)dst_len)
        return SL_ECOMPRESS;
    dctx = thread_dctx();
    if (dctx == NULL)
        return SL_ENOMEM;
    if (ZSTD_isError(ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters)) ||
        ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, SL__ZSTD_WINDOW_LOG_MAX)))
        return SL_ECOMPRESS;
    n = ZSTD_decompressDCtx(dctx, dst, dst_len, src, len);
    if (ZSTD_isError(n) || n != dst_len)
        return SL_ECOMPRESS;
    return SL_OK;
}
