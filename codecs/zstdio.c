/* zstdio.c - Zstandard with content size, checksum and a bounded decoder window. */
#include <zstd.h>

#include "codec_int.h"

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
    cctx = ZSTD_createCCtx();
    if (cctx == NULL)
        return SL_ENOMEM;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1))) {
        ZSTD_freeCCtx(cctx);
        return SL_ECOMPRESS;
    }
    n = ZSTD_compress2(cctx, out->data + out->len, bound, src, len);
    ZSTD_freeCCtx(cctx);
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
    dctx = ZSTD_createDCtx();
    if (dctx == NULL)
        return SL_ENOMEM;
    if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, SL__ZSTD_WINDOW_LOG_MAX))) {
        ZSTD_freeDCtx(dctx);
        return SL_ECOMPRESS;
    }
    n = ZSTD_decompressDCtx(dctx, dst, dst_len, src, len);
    ZSTD_freeDCtx(dctx);
    if (ZSTD_isError(n) || n != dst_len)
        return SL_ECOMPRESS;
    return SL_OK;
}
