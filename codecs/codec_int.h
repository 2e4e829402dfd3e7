/*
 * codec_int.h - internals shared between the files of libstarling-codecs.
 * Not part of the public API; nothing outside codecs/ (and its tests)
 * includes it.
 */
#ifndef STARLING_CODEC_INT_H
#define STARLING_CODEC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "starling/codec.h"

/* ------------------------------------------------------------------------ */
/* Growable byte buffer (buf.c)                                             */
/* ------------------------------------------------------------------------ */

typedef struct sl__buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} sl__buf;

/** Make room for @extra more bytes. SL_ENOMEM, SL_ETOOBIG on size overflow. */
int sl__buf_reserve(sl__buf *b, size_t extra);
/** Append @n bytes. */
int sl__buf_append(sl__buf *b, const void *p, size_t n);
/** Append a LEB128 varint (1..10 bytes). */
int sl__buf_put_varint(sl__buf *b, uint64_t v);
/** Append little-endian fixed-width integers / a float's bit pattern. */
int sl__buf_put_u8(sl__buf *b, uint8_t v);
int sl__buf_put_u16(sl__buf *b, uint16_t v);
int sl__buf_put_u32(sl__buf *b, uint32_t v);
int sl__buf_put_u64(sl__buf *b, uint64_t v);
int sl__buf_put_f32(sl__buf *b, float v);
/** Release the storage; the struct may be reused after. */
void sl__buf_free(sl__buf *b);

/* A bounds-checked reader over untrusted bytes. Every get returns SL_OK or
 * SL_ETRUNCATED (varints: SL_ECORRUPT when longer than 10 bytes or > 64 bits
 * or not minimally encoded). */
typedef struct sl__reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
} sl__reader;

int sl__rd_u8(sl__reader *r, uint8_t *v);
int sl__rd_u16(sl__reader *r, uint16_t *v);
int sl__rd_u32(sl__reader *r, uint32_t *v);
int sl__rd_u64(sl__reader *r, uint64_t *v);
int sl__rd_f32(sl__reader *r, float *v);
int sl__rd_varint(sl__reader *r, uint64_t *v);
/** Point *@p at the next @n bytes and skip them. */
int sl__rd_bytes(sl__reader *r, size_t n, const uint8_t **p);

static inline uint32_t sl__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float sl__bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/** 1 when every one of @n floats is finite. */
int sl__all_finite(const float *x, size_t n);

/* ------------------------------------------------------------------------ */
/* Byte shuffle and Zstandard (shuffle.c, zstdio.c)                         */
/* ------------------------------------------------------------------------ */

/**
 * sl__shuffle - transpose @n elements of @size bytes into @size byte planes:
 * dst[b * n + i] = src[i * size + b]. @src and @dst must not overlap.
 * @size is 1..8.
 */
void sl__shuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst);

/** sl__unshuffle - the inverse of sl__shuffle(). */
void sl__unshuffle(const uint8_t *src, size_t n, size_t size, uint8_t *dst);

/** Largest window a decoder accepts (2^27 = 128 MiB); bounds decoder memory. */
#define SL__ZSTD_WINDOW_LOG_MAX 27

/**
 * sl__zstd_append - compress @len bytes of @src at @level (with the zstd
 * content checksum and content size in the frame) and append the zstd frame
 * to @out. SL_ECOMPRESS on a library error.
 */
int sl__zstd_append(const void *src, size_t len, int level, sl__buf *out);

/**
 * sl__zstd_decode_exact - decompress the single zstd frame in @src (@len
 * bytes, nothing after it) into exactly @dst_len bytes of @dst. The frame's
 * declared content size must equal @dst_len; the window is bounded by
 * SL__ZSTD_WINDOW_LOG_MAX; the checksum is verified. Errors: SL_ECOMPRESS
 * (invalid stream, wrong size, checksum), SL_ENOMEM.
 */
int sl__zstd_decode_exact(const void *src, size_t len, void *dst, size_t dst_len);

/* ------------------------------------------------------------------------ */
/* Value sections (values.c + values_{avx2,avx512,neon}.c)                  */
/* ------------------------------------------------------------------------ */

/**
 * sl__values_encode - quantize @n values (all finite) of tensor number
 * @tensor_index with @mode and append the value section (FORMAT.md,
 * "Value sections") to @out.
 * @seed: stochastic rounding seed (int8); rounding of element i uses a
 * counter-based generator of (seed, tensor_index, i), so the result does
 * not depend on SIMD width or call order.
 * @recon: NULL or @n floats; receives the values the decoder will produce,
 * bit for bit.
 * Errors: SL_EINVAL (bad mode), SL_ENONFINITE, SL_ENOMEM, SL_ECOMPRESS.
 */
int sl__values_encode(sl_value_mode mode, const float *v, size_t n, int zstd_level, uint64_t seed,
                      uint32_t tensor_index, sl__buf *out, float *recon);

/**
 * sl__values_decode - decode the value section of exactly @len bytes at @p
 * holding @n values in @mode into @out (@n floats). The section must be
 * consumed exactly. Errors: SL_ETRUNCATED, SL_ECORRUPT (bad fields,
 * trailing bytes, non-zero padding bits), SL_ECOMPRESS, SL_ENONFINITE,
 * SL_ENOMEM.
 */
int sl__values_decode(sl_value_mode mode, const uint8_t *p, size_t len, size_t n, float *out);

/**
 * sl__coded_put - append a coded part (FORMAT.md, "Coded bytes"): a tag, then
 * the @len bytes of @raw (elements of @size bytes, little-endian) stored, or
 * one Zstandard frame of their @size byte planes at @level when that is
 * smaller (never tried below 64 bytes). Errors: SL_ENOMEM, SL_ECOMPRESS.
 */
int sl__coded_put(const void *raw, size_t len, size_t size, int level, sl__buf *out);

/**
 * sl__coded_get - read the coded part that runs from @r's position to its end,
 * of exactly @len raw bytes in elements of @size bytes. *@raw points into @r's
 * bytes (stored) or at the unshuffled bytes: in @dst when given (@len bytes),
 * else in *@scratch, which the caller frees (untouched when nothing was
 * allocated: pass it NULL).
 * Errors: SL_ETRUNCATED, SL_ECORRUPT (a bad tag, bytes left over),
 * SL_ECOMPRESS, SL_ENOMEM.
 */
int sl__coded_get(sl__reader *r, size_t len, size_t size, uint8_t *dst, const uint8_t **raw,
                  uint8_t **scratch);

/* ------------------------------------------------------------------------ */
/* Position sections (positions.c)                                          */
/* ------------------------------------------------------------------------ */

/**
 * sl__pos_plan - choose the coding for @n strictly ascending indices < @d:
 * with @mode SL_POS_AUTO, the one of RICE, BITMAP, DENSE (only when n == d)
 * and, when a one-pass estimate says the gaps are clustered, ADAPTIVE, with
 * the smallest exact size; otherwise @mode itself (SL_EINVAL when it
 * cannot code this set, such as DENSE with n < d). For ADAPTIVE the exact
 * size is found by running the coder.
 * @param: receives the Rice parameter (0 for other codings).
 * @bytes: receives the exact section size in bytes.
 */
int sl__pos_plan(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d, sl_pos_mode *chosen,
                 uint8_t *param, size_t *bytes);

/**
 * sl__pos_encode - append the position section (FORMAT.md, "Position
 * sections") for @idx coded with @mode/@param, exactly the size that
 * sl__pos_plan() reported. Padding bits in the last byte are zero.
 */
int sl__pos_encode(sl_pos_mode mode, uint8_t param, const uint32_t *idx, size_t n, uint64_t d,
                   sl__buf *out);

/**
 * sl__pos_write - plan and append in one step, with the choice of
 * sl__pos_plan(): the result is what sl__pos_plan() + sl__pos_encode() give,
 * but the ADAPTIVE coder, whose size is only known by running it, runs once.
 * On error @out keeps its old length.
 */
int sl__pos_write(sl_pos_mode mode, const uint32_t *idx, size_t n, uint64_t d, sl_pos_mode *chosen,
                  uint8_t *param, sl__buf *out);

/**
 * sl__pos_decode - decode @n indices < @d from a section of exactly @len
 * bytes. Rejects (without reading past @len): a section of the wrong size,
 * an index >= @d, indices not strictly ascending (can only come from a
 * malformed stream), a bitmap whose popcount is not @n, non-zero padding,
 * a Rice parameter above 31, a unary run longer than the largest gap.
 * Errors: SL_ETRUNCATED, SL_ECOUNT, SL_ECORRUPT.
 */
int sl__pos_decode(sl_pos_mode mode, uint8_t param, const uint8_t *p, size_t len, size_t n,
                   uint64_t d, uint32_t *idx);

/* ------------------------------------------------------------------------ */
/* Frame envelope (frame.c)                                                 */
/* ------------------------------------------------------------------------ */

#define SL__FRAME_MAGIC     "SLFR"
#define SL__FRAME_CRC_BYTES 4

/** CRC-32 (zlib's, ISO-HDLC) of @len bytes: the frames' checksum and the supports' digest. */
uint32_t sl__crc32(const uint8_t *p, size_t len);

/** Append the frame header (magic, version, kind, flags, hash, base, round; ref_version
 *  when split). */
int sl__frame_begin(sl__buf *b, const sl_frame_header *h);

/** Append the CRC-32 of everything in @b: the frame is complete. */
int sl__frame_finish(sl__buf *b);

/**
 * sl__frame_open - check magic, version, flags, kind, the size limit and the
 * CRC, parse the header into @h and set @body to the bytes between the
 * header and the CRC.
 */
int sl__frame_open(const void *frame, size_t len, const sl_decode_limits *limits,
                   sl_frame_header *h, sl__reader *body);

/** The decode limits in force (@limits or the defaults). */
void sl__limits(const sl_decode_limits *limits, sl_decode_limits *out);

/* ------------------------------------------------------------------------ */
/* Dense accumulation (accumulate.c)                                        */
/* ------------------------------------------------------------------------ */

/** dst[idx[i]] += w * val[i] for i < n (the indices are already validated). */
void sl__scatter_add(float *dst, const uint32_t *idx, const float *val, size_t n, float w);

/* ------------------------------------------------------------------------ */
/* Supports of split updates (support.c)                                    */
/* ------------------------------------------------------------------------ */

struct sl_support {
    uint64_t d;     /* coordinates */
    uint8_t *bits;  /* ceil(d / 8) bytes, LSB-first */
    size_t len;     /* ceil(d / 8) */
    uint64_t count; /* set bits */
    uint32_t crc;   /* sl__crc32 of bits */
};

/**
 * sl__split_ranks - the @n strictly ascending flat indices @flat (< d) as
 * ranks within the support (@in, *@nin of them) and within its complement
 * (@out, *@nout); each list ascending. @in and @out have room for @n.
 */
void sl__split_ranks(const sl_support *s, const uint32_t *flat, size_t n, uint32_t *in, size_t *nin,
                     uint32_t *out, size_t *nout);

/**
 * sl__split_merge - the inverse: ascending ranks (@in < count, @out < d -
 * count) back to @nin + @nout ascending flat indices in @flat. SL_ECOUNT when
 * a rank is past its part.
 */
int sl__split_merge(const sl_support *s, const uint32_t *in, size_t nin, const uint32_t *out,
                    size_t nout, uint32_t *flat);

#endif /* STARLING_CODEC_INT_H */
