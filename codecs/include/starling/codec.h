/*
 * starling/codec.h - tensor layouts, top-k selection, error feedback,
 * quantizers and entropy-coded frames.
 *
 * Pure computation: no I/O, no network, no global state beyond the SIMD
 * dispatch chosen once at first use (SL_FORCE_SCALAR=1 forces the scalar
 * reference). The byte-level format of every frame is in codecs/FORMAT.md.
 *
 * Conventions: functions return SL_OK or a negative sl_status and leave
 * their outputs untouched on failure. Objects are not thread-safe; distinct
 * objects may be used from distinct threads. Nothing here blocks.
 */
#ifndef STARLING_CODEC_H
#define STARLING_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Limits                                                                   */
/* ------------------------------------------------------------------------ */

#define SL_CODEC_MAX_TENSORS 4096            /* tensors in one layout */
#define SL_CODEC_MAX_NAME    127             /* bytes in a tensor name */
#define SL_CODEC_MAX_DIMS    6               /* dimensions of one tensor */
#define SL_CODEC_MAX_PARAMS  (1ull << 31)    /* parameters in one layout (8 GiB of fp32) */
#define SL_CODEC_MAX_TENSOR  (0xffffffffull) /* elements in one tensor (indices are u32) */

/* ------------------------------------------------------------------------ */
/* Tensor layout                                                            */
/* ------------------------------------------------------------------------ */

/** One named fp32 tensor inside the flat parameter vector. */
typedef struct sl_tensor_desc {
    char name[SL_CODEC_MAX_NAME + 1];
    uint32_t ndim;
    uint64_t shape[SL_CODEC_MAX_DIMS];
    uint64_t offset; /* first element in the flat vector */
    uint64_t count;  /* product of the shape */
} sl_tensor_desc;

/** An ordered list of tensors (PyTorch parameter order). Opaque. */
typedef struct sl_layout sl_layout;

/** sl_layout_create - an empty layout. Caller frees with sl_layout_free(). */
int sl_layout_create(sl_layout **out);

/** sl_layout_free - NULL is a no-op. */
void sl_layout_free(sl_layout *layout);

/**
 * sl_layout_add - append a tensor after the last one.
 * @name: 1..SL_CODEC_MAX_NAME bytes of [A-Za-z0-9_.:/-], unique in the layout.
 * @shape, @ndim: 1..SL_CODEC_MAX_DIMS dimensions, each >= 1.
 * Returns SL_OK, SL_EINVAL (bad name, duplicate name, bad shape), SL_ETOOBIG
 * (more than SL_CODEC_MAX_TENSORS tensors, a tensor above SL_CODEC_MAX_TENSOR
 * elements or a layout above SL_CODEC_MAX_PARAMS), SL_ENOMEM.
 */
int sl_layout_add(sl_layout *layout, const char *name, const uint64_t *shape, uint32_t ndim);

/**
 * sl_layout_parse - build a layout from text lines "name d0 d1 ...", the
 * format of the fixtures' *.layout files. Blank lines and '#' comments are
 * skipped. Returns SL_OK, SL_ESYNTAX, or an sl_layout_add() error.
 */
int sl_layout_parse(const char *text, size_t len, sl_layout **out);

/**
 * sl_layout_format - write the layout in the text form sl_layout_parse()
 * reads. @out gets a NUL-terminated string cut to @cap; returns the length
 * needed (excluding the NUL).
 */
size_t sl_layout_format(const sl_layout *layout, char *out, size_t cap);

/** sl_layout_tensors - number of tensors. */
size_t sl_layout_tensors(const sl_layout *layout);

/** sl_layout_tensor - the i-th tensor (NULL when i is out of range). */
const sl_tensor_desc *sl_layout_tensor(const sl_layout *layout, size_t i);

/** sl_layout_params - total number of fp32 parameters. */
uint64_t sl_layout_params(const sl_layout *layout);

/**
 * sl_layout_hash - stable 64-bit hash of names and shapes in order
 * (FNV-1a 64 over the canonical bytes given in FORMAT.md). Two layouts
 * with the same hash are treated as the same layout.
 */
uint64_t sl_layout_hash(const sl_layout *layout);

/** sl_layout_equal - same tensors, names and shapes in the same order. */
int sl_layout_equal(const sl_layout *a, const sl_layout *b);

/* ------------------------------------------------------------------------ */
/* Selection                                                                */
/* ------------------------------------------------------------------------ */

/** How a tensor's top-k elements by magnitude are chosen. */
typedef enum sl_select_mode {
    SL_SELECT_EXACT = 0,   /* exactly k, radix select on the magnitude bits, ties to lower index */
    SL_SELECT_REDSYNC = 1, /* RedSync threshold binary search, count in [k, band_hi * k] */
    SL_SELECT_DGC = 2      /* DGC sampled threshold, exact fallback on overshoot */
} sl_select_mode;

/** Tuning of the approximate selectors; sl_select_params_default() fills it. */
typedef struct sl_select_params {
    double band_hi;         /* RedSync: accept counts in [k, band_hi * k]; >= 1 (default 2) */
    uint32_t max_iters;     /* RedSync: bisection steps before the exact fallback (default 20) */
    double sample_fraction; /* DGC: fraction of elements sampled, (0, 1] (default 0.01) */
    double overshoot;       /* DGC: exact fallback when count > overshoot * k (default 1.3) */
} sl_select_params;

/** sl_select_params_default - fill @p with the documented defaults. */
void sl_select_params_default(sl_select_params *p);

/**
 * sl_select_capacity - how many indices sl_select() may return for (d, k):
 * k for EXACT, floor(band_hi * k) for REDSYNC, floor(overshoot * k) for DGC,
 * never more than d. Size the @idx buffer with it.
 */
size_t sl_select_capacity(sl_select_mode mode, const sl_select_params *p, size_t d, size_t k);

/**
 * sl_select - indices of large-magnitude elements of @x, ascending.
 * @x: @d finite floats (NaN/Inf: SL_ENONFINITE). @k: 0..@d.
 * @p: NULL for the defaults.
 * @idx: room for sl_select_capacity() indices; receives the selection in
 * increasing index order. @n: receives the count (exactly k for EXACT; for
 * the approximate modes at least k and at most the capacity).
 * Magnitude compares the absolute value's bit pattern, so -0.0 == 0.0 and
 * denormals order correctly. Returns SL_OK, SL_EINVAL, SL_ENONFINITE,
 * SL_ETOOBIG (d above SL_CODEC_MAX_TENSOR), SL_ENOMEM.
 */
int sl_select(sl_select_mode mode, const sl_select_params *p, const float *x, size_t d, size_t k,
              uint32_t *idx, size_t *n);

/* ------------------------------------------------------------------------ */
/* Value quantizers                                                         */
/* ------------------------------------------------------------------------ */

/** How the selected values travel. */
typedef enum sl_value_mode {
    SL_VALUE_FP32 = 0,    /* lossless */
    SL_VALUE_FP16 = 1,    /* IEEE half, round to nearest even (saturates at +-65504) */
    SL_VALUE_BF16 = 2,    /* bfloat16, round to nearest even */
    SL_VALUE_INT8 = 3,    /* q * scale, scale = max|v| / 127, stochastic rounding */
    SL_VALUE_TERNARY = 4, /* +-mu, mu = mean |v| of the selected values */
    SL_VALUE_SIGN = 5     /* +-scale, scale = mean |v| (one bit per value) */
} sl_value_mode;

/** sl_value_mode_name - "fp32", "fp16", ... ("?" for an unknown mode). */
const char *sl_value_mode_name(sl_value_mode mode);

/** sl_value_mode_parse - the inverse of sl_value_mode_name(); SL_EINVAL when unknown. */
int sl_value_mode_parse(const char *name, sl_value_mode *out);

/* ------------------------------------------------------------------------ */
/* Frames                                                                   */
/* ------------------------------------------------------------------------ */

/** What a frame carries. */
typedef enum sl_frame_kind {
    SL_FRAME_UPDATE = 1,     /* sparse update of a model: per tensor positions + values */
    SL_FRAME_MODEL = 2,      /* full model, lossless */
    SL_FRAME_MODEL_DELTA = 3 /* lossless model, XOR of bit patterns against a base version */
} sl_frame_kind;

/** How positions are coded in an update frame (per tensor). */
typedef enum sl_pos_mode {
    SL_POS_AUTO = 0,    /* encoder picks the smallest exact size (never written to a frame) */
    SL_POS_RICE = 1,    /* gaps between sorted indices, Golomb-Rice */
    SL_POS_BITMAP = 2,  /* one bit per element */
    SL_POS_DENSE = 3,   /* every element present, in order (k == d): no position bits */
    SL_POS_ADAPTIVE = 4 /* gaps, adaptive binary arithmetic coding (clustered positions);
                           AUTO tries it only when the gaps look clustered */
} sl_pos_mode;

/** The fixed fields at the start of every frame. */
typedef struct sl_frame_header {
    uint8_t version;       /* format version (SL_FRAME_VERSION when encoding) */
    uint8_t kind;          /* sl_frame_kind */
    uint16_t flags;        /* 0, or SL_FRAME_FLAG_FLAT (and SL_FRAME_FLAG_SPLIT) on an update
                              (set by the encoder) */
    uint64_t layout_hash;  /* sl_layout_hash() of the layout the frame is for */
    uint64_t base_version; /* model version the update or delta is relative to */
    uint64_t round;        /* round id (0 for models) */
    uint64_t ref_version;  /* SL_FRAME_FLAG_SPLIT: the version whose change to base_version
                              splits the positions (set by the encoder); 0 otherwise */
} sl_frame_header;

#define SL_FRAME_VERSION 1

/**
 * Flag of an UPDATE frame: one position section over the whole parameter
 * vector instead of one per tensor, and one value mode for the frame
 * (codecs/FORMAT.md, "Update body, flat"). The values of each tensor are
 * still quantized on their own, so the reconstruction is the same as the
 * per-tensor body's; the frame saves the per-tensor table entries and
 * position streams, which dominate updates of a few hundred values.
 */
#define SL_FRAME_FLAG_FLAT 1u

/**
 * Flag of a flat UPDATE frame (always with SL_FRAME_FLAG_FLAT): its positions
 * are coded as two sets, those inside a *support* both ends know and those
 * outside it, each numbered within its part (codecs/FORMAT.md, "Update body,
 * flat and split"). The support is the set of coordinates whose bits differ
 * between model versions ref_version and base_version: what a device that
 * held ref_version downloaded as a sparse delta, and where its next update's
 * positions gather (on the demo's fleet 75% of them in a fifth of the
 * coordinates). The envelope names ref_version; the body carries the
 * support's size and CRC, so a decoder given another support refuses the
 * frame (SL_ESUPPORT) instead of misplacing its values. Decoders need the
 * support (sl_frame_decode_update_split(), or sl_frame_unsplit() for the
 * plain flat frame of the same update); the coordinator stores such a frame
 * as sent and reads it against the support it computes from its versions.
 */
#define SL_FRAME_FLAG_SPLIT 2u

/**
 * A set of coordinates of a layout's parameter vector, as a bitmap: bit j
 * (bit j % 8 of byte j / 8) set when coordinate j is in the set.
 */
typedef struct sl_support sl_support;

/**
 * sl_support_diff - the coordinates whose fp32 bit patterns differ between
 * @from and @to (sl_layout_params() floats each): the support of the
 * lossless delta from one to the other. @out: a new support, free with
 * sl_support_free(). Returns SL_OK, SL_EINVAL or SL_ENOMEM.
 */
int sl_support_diff(const sl_layout *layout, const float *from, const float *to, sl_support **out);

/**
 * sl_support_load - a support from its bitmap (@len must be
 * ceil(sl_layout_params() / 8) bytes, the padding bits of the last byte zero:
 * else SL_ECORRUPT). Returns SL_OK, SL_EINVAL, SL_ECORRUPT or SL_ENOMEM.
 */
int sl_support_load(const sl_layout *layout, const void *bits, size_t len, sl_support **out);

/** sl_support_bits - the bitmap (ceil(d / 8) bytes, in *@len). */
const uint8_t *sl_support_bits(const sl_support *s, size_t *len);

/** sl_support_count - how many coordinates the support holds. */
uint64_t sl_support_count(const sl_support *s);

/** sl_support_crc - CRC-32 (zlib's) of the bitmap's bytes: the digest a split frame carries. */
uint32_t sl_support_crc(const sl_support *s);

/** sl_support_free - NULL is a no-op. */
void sl_support_free(sl_support *s);

/**
 * sl_frame_peek_header - read and check the header of @frame without
 * decoding the body: magic, version, kind, sizes and the frame checksum.
 * Returns SL_OK, SL_ETRUNCATED, SL_EMAGIC, SL_EVERSION, SL_ECORRUPT,
 * SL_ECHECKSUM.
 */
int sl_frame_peek_header(const void *frame, size_t len, sl_frame_header *out);

/* --- model frames -------------------------------------------------------- */

/**
 * sl_frame_encode_model - a lossless frame of the full parameter vector
 * (@params, sl_layout_params() floats): byte-shuffled and compressed with
 * Zstandard, or stored when that is not smaller, so the frame is never more
 * than 64 bytes larger than the raw tensors. @version is written as the
 * frame's base_version field (the version this model is).
 * @out: receives a malloc'd frame; @out_len its size. NaN/Inf: SL_ENONFINITE.
 */
int sl_frame_encode_model(const sl_layout *layout, const float *params, uint64_t version,
                          int zstd_level, void **out, size_t *out_len);

/**
 * sl_frame_encode_model_delta - a lossless frame holding XOR(params, base)
 * of the bit patterns, byte-shuffled and compressed. Decoding needs the same
 * @base; @base_version is recorded to check that.
 */
int sl_frame_encode_model_delta(const sl_layout *layout, const float *params, const float *base,
                                uint64_t base_version, int zstd_level, void **out, size_t *out_len);

/**
 * sl_frame_encode_model_delta_sparse - as sl_frame_encode_model_delta(), but
 * the body is the sparse one (coding 2: the positions of the words that
 * differ, then those XOR words) whenever that is smaller than the dense
 * body. Decoders before coding 2 reject such a frame (SL_ECORRUPT), so the
 * coordinator serves it only to a client that asks for it (?sparse=1).
 */
int sl_frame_encode_model_delta_sparse(const sl_layout *layout, const float *params,
                                       const float *base, uint64_t base_version, int zstd_level,
                                       void **out, size_t *out_len);

/**
 * sl_frame_decode_model - reconstruct the parameters from a MODEL frame
 * (@base NULL) or a MODEL_DELTA frame (@base: the base version's parameters,
 * whose version must equal the frame's base_version, given as
 * @base_version). @params: room for sl_layout_params() floats; written only
 * on success (decoding goes through a scratch buffer).
 * Returns SL_OK or a decode error (see "Decode errors" below).
 */
int sl_frame_decode_model(const sl_layout *layout, const void *frame, size_t len, const float *base,
                          uint64_t base_version, float *params);

/* --- update frames ------------------------------------------------------- */

/** Per-frame encoding settings. */
typedef struct sl_encode_params {
    sl_value_mode values;    /* value quantizer for every tensor */
    sl_pos_mode positions;   /* SL_POS_AUTO: smallest exact size per tensor */
    int zstd_level;          /* for multi-byte values (default 3) */
    uint64_t seed;           /* stochastic rounding (int8); the same seed gives the same frame */
    int flat;                /* 1: SL_FRAME_FLAG_FLAT (one position section, for top-k over the
                                whole model); 0: per tensor */
    const sl_support *split; /* flat only, NULL for none: the support of the change from
                                @ref_version to the header's base_version; the encoder
                                writes SL_FRAME_FLAG_SPLIT when that frame is smaller */
    uint64_t ref_version;    /* with @split: 1 <= ref_version < base_version */
} sl_encode_params;

/** sl_encode_params_default - fp32 values, AUTO positions, zstd level 3, seed 0, per tensor,
 *  no split. */
void sl_encode_params_default(sl_encode_params *p);

/** One tensor's sparse content: @n indices (ascending, < the tensor's count) and values. */
typedef struct sl_sparse_tensor {
    size_t n;
    const uint32_t *idx;
    const float *val;
} sl_sparse_tensor;

/**
 * sl_frame_encode_update - encode a sparse update: for every tensor of
 * @layout, in order, @tensors[i] gives its selected indices and values.
 * Values are quantized with @p->values; elements that quantize to zero are
 * still sent (the caller drops exact zeros before if it wishes).
 * @recon: optional, one float array of @tensors[i].n per tensor (NULL to
 * skip); receives exactly the values the receiver will reconstruct, for
 * error feedback.
 * @out, @out_len: a malloc'd frame. Errors: SL_EINVAL (unsorted or duplicate
 * or out-of-range indices), SL_ENONFINITE, SL_ENOMEM, SL_ECOMPRESS.
 */
int sl_frame_encode_update(const sl_layout *layout, const sl_frame_header *hdr,
                           const sl_sparse_tensor *tensors, const sl_encode_params *p,
                           float *const *recon, void **out, size_t *out_len);

/** Limits a decoder enforces before it allocates. */
typedef struct sl_decode_limits {
    uint64_t max_frame_bytes;  /* larger frames: SL_ETOOBIG (default 256 MiB) */
    uint64_t max_output_bytes; /* decoded bytes in total: SL_ETOOBIG (default 4 GiB) */
} sl_decode_limits;

/** A decoded update: per tensor, ascending indices and reconstructed values. */
typedef struct sl_update {
    sl_frame_header header;
    size_t tensors;
    size_t *n;              /* [tensors] */
    uint32_t **idx;         /* [tensors][n[i]] */
    float **val;            /* [tensors][n[i]] */
    sl_value_mode *modes;   /* [tensors] value mode of each tensor */
    sl_pos_mode *pos_modes; /* [tensors] position coding of each tensor (flat: of the frame) */
    size_t *pos_bytes;      /* [tensors] size of the position section (flat: all of it on
                               the first tensor with n > 0, 0 on the others) */
    size_t *val_bytes;      /* [tensors] size of the value section */
} sl_update;

/**
 * sl_frame_decode_update - decode an UPDATE frame for @layout into a new
 * sl_update (free with sl_update_free()). @limits NULL for the defaults.
 * A split frame (SL_FRAME_FLAG_SPLIT) needs its support: SL_ESUPPORT here.
 */
int sl_frame_decode_update(const sl_layout *layout, const void *frame, size_t len,
                           const sl_decode_limits *limits, sl_update **out);

/**
 * sl_frame_decode_update_split - as sl_frame_decode_update(), and a split
 * frame's positions are read against @support (NULL: none known), the change
 * from the frame's ref_version to its base_version. A split frame whose
 * support size or CRC is not @support's, or without @support, is
 * SL_ESUPPORT; other frames ignore @support.
 */
int sl_frame_decode_update_split(const sl_layout *layout, const void *frame, size_t len,
                                 const sl_decode_limits *limits, const sl_support *support,
                                 sl_update **out);

/**
 * sl_frame_unsplit - the flat frame that reconstructs the same update as the
 * split @frame (decoded against @support, fully validated first): the same
 * header without SL_FRAME_FLAG_SPLIT and ref_version, the positions coded as
 * one set (SL_POS_AUTO), the value sections' bytes as they are. A frame that
 * is not split gives SL_EINVAL. @out, @out_len: a malloc'd frame. Errors:
 * every sl_frame_decode_update_split() error, SL_ENOMEM.
 */
int sl_frame_unsplit(const sl_layout *layout, const void *frame, size_t len,
                     const sl_decode_limits *limits, const sl_support *support, void **out,
                     size_t *out_len);

/** sl_update_free - NULL is a no-op. */
void sl_update_free(sl_update *u);

/**
 * sl_frame_accumulate_update - decode an UPDATE frame straight into a dense
 * accumulator: @dst[offset + idx] += @weight * value, for every tensor,
 * without materialising the dense update. @dst has sl_layout_params()
 * floats. The frame is fully validated before @dst is touched, so a
 * malformed frame leaves @dst unchanged.
 */
int sl_frame_accumulate_update(const sl_layout *layout, const void *frame, size_t len,
                               const sl_decode_limits *limits, float weight, float *dst);

/**
 * sl_frame_accumulate_update_f64 - as sl_frame_accumulate_update() into a
 * double accumulator: @dst[offset + idx] += @weight * (double)value. The
 * coordinator aggregates in double so that the sum of many updates does
 * not depend on float rounding order beyond the device-id order it uses.
 */
int sl_frame_accumulate_update_f64(const sl_layout *layout, const void *frame, size_t len,
                                   const sl_decode_limits *limits, double weight, double *dst);

/*
 * Decode errors, shared by every decoder (a malformed frame is an error
 * code, never a crash or an over-read):
 *   SL_ETRUNCATED  the buffer ends inside a field or section
 *   SL_EMAGIC      not a Starling frame
 *   SL_EVERSION    a format version this build does not read
 *   SL_ECHECKSUM   the frame checksum does not match
 *   SL_ELAYOUT     layout hash, tensor count or kind does not fit @layout
 *   SL_ECOUNT      a count or index is out of range, unsorted or duplicated
 *   SL_ECORRUPT    any other inconsistency (trailing bytes, bad mode, lengths)
 *   SL_ENONFINITE  a decoded value is NaN or infinite
 *   SL_ETOOBIG     a limit of sl_decode_limits would be exceeded
 *   SL_ECOMPRESS   the Zstandard stream is invalid or does not match its size
 *   SL_ESUPPORT    a split update without its support, or with another one
 */

/* ------------------------------------------------------------------------ */
/* Error feedback                                                           */
/* ------------------------------------------------------------------------ */

/**
 * Where top-k is taken. MODEL: one selection of ceil(density * d) over the
 * whole parameter vector, then split by tensor (a tensor none of whose
 * elements is among the largest is sent empty), so the budget goes where
 * the update's mass is: small layers whose elements move a lot (the first
 * convolution, the classifier) are not held to the density of the large
 * ones. TENSOR: ceil(density * count) (at least min_k) in every tensor.
 */
typedef enum sl_topk_scope { SL_TOPK_MODEL = 0, SL_TOPK_TENSOR = 1 } sl_topk_scope;

/** sl_topk_scope_name - "model" or "tensor"; NULL for anything else. */
const char *sl_topk_scope_name(sl_topk_scope s);

/** sl_topk_scope_parse - the scope named @name; SL_EINVAL for an unknown name. */
int sl_topk_scope_parse(const char *name, sl_topk_scope *out);

/**
 * What the residual keeps between rounds.
 *
 * RESIDUAL (classic error feedback): acc = decay * residual + delta;
 * residual = acc - sent on an acknowledged update, acc on a folded one.
 * With local training that starts each round from the global model, part of
 * what a round did not send is learnt again in the next round's delta (the
 * global model lacks it), so an undecayed residual counts that part twice:
 * for coordinates top-k does not pick it grows without bound and reaches
 * the model late, in bursts. The decay (SL_RESIDUAL_DECAY_DEFAULT, 0.9 at
 * each participation) forgets it at about the pace local training learns
 * it again, and keeps what is not: the default.
 *
 * TRACKING: the residual is the difference between the global model and the
 * model the coordinator holds for this device (FedAvg's global is the
 * average of those): an acknowledged update subtracts what it sent; a folded
 * one changes nothing (its delta is learnt again from the next model); and
 * when the model the update went into arrives, the device adds that round's
 * move of the global model (sl_compressor_absorb()). The delta itself is not
 * kept. Every acknowledged byte still reaches the model; what the device
 * wants but did not send is the next delta, against the model that lacks it.
 *
 * Tracking assumes that the next local training learns again everything the
 * model the coordinator holds lacks. Where every device takes part in every
 * round and trains long (10 devices, 10 epochs of 6,000 samples) that holds
 * and the terms that stand for other devices' progress cancel within the
 * next round; where a device takes part in one round in 2.5 and trains
 * briefly (the demo's fleet: 4 epochs of ~1,200 samples) they are stale when
 * it returns and it learns little again, and tracking did no better than no
 * error feedback at all (mean of rounds 30-50: 85.52% and 85.08%, classic
 * residual 86.55%). Taking the exact move of the update's version instead of
 * the average over the versions missed changed nothing measurable (85.45%
 * before). Tracking is also wrong under any aggregation whose move is not
 * the mean of the updates sent: the coordinator refuses it with server
 * optimisers, robust aggregators and a server_lr above 1.
 *
 * Measured (README: starling bench fl, lenet5, ternary 1% over the model,
 * mean accuracy of rounds 30-50): every device every round: residual with
 * decay 0.9 88.38%, tracking 87.98-88.36%, undecayed residual 87.48-87.91%,
 * dense 88.85-88.94%; the demo's fleet: decay 0.9 86.72%, residual 86.55%,
 * tracking 85.52%, dense 88.75%.
 */
typedef enum sl_error_feedback { SL_EF_RESIDUAL = 0, SL_EF_TRACKING = 1 } sl_error_feedback;

/** The residual decay of the default (RESIDUAL) error feedback, per participation. */
#define SL_RESIDUAL_DECAY_DEFAULT 0.9

/** sl_error_feedback_name - "residual" or "tracking"; NULL for anything else. */
const char *sl_error_feedback_name(sl_error_feedback f);

/** sl_error_feedback_parse - the mode named @name; SL_EINVAL for an unknown name. */
int sl_error_feedback_parse(const char *name, sl_error_feedback *out);

/** Settings of the device-side compressor (selection + quantization + residual). */
typedef struct sl_compress_params {
    sl_select_mode select;
    sl_select_params select_params;
    sl_encode_params encode;    /* encode.flat is set from @scope: flat frames for MODEL */
    sl_topk_scope scope;        /* where top-k is taken (default MODEL) */
    double density;             /* target fraction of elements sent, (0, 1] */
    uint64_t min_k;             /* at least this many per tensor (TENSOR) or in all (MODEL),
                                   capped at the size */
    uint32_t warmup_rounds;     /* density warm-up: rounds before reaching @density */
    double warmup_density;      /* density of participation 0; decays geometrically */
    double momentum;            /* DGC momentum correction, [0, 1); 0 = off */
    sl_error_feedback feedback; /* what the residual keeps (default RESIDUAL) */
    double residual_decay;      /* RESIDUAL: acc = decay * residual + delta, (0, 1];
                                   default SL_RESIDUAL_DECAY_DEFAULT; 1 keeps it whole;
                                   TRACKING: 1 */
} sl_compress_params;

/**
 * sl_compress_params_default - exact top-k over the whole model, fp32
 * values, 1% density, min_k 1, no warm-up, the classic residual decayed by
 * SL_RESIDUAL_DECAY_DEFAULT.
 */
void sl_compress_params_default(sl_compress_params *p);

/**
 * sl_compress_density - the density used at participation @step (0-based)
 * of a warm-up schedule: warmup_density * (density / warmup_density)^(step /
 * warmup_rounds) for step < warmup_rounds, then @density.
 */
double sl_compress_density(const sl_compress_params *p, uint32_t step);

/**
 * The compressor: residual (and momentum) state of one device. Each round:
 * sl_compressor_prepare() makes a frame from residual + delta without
 * changing the committed state; after the coordinator acknowledged the
 * upload, sl_compressor_commit() subtracts exactly what the receiver
 * reconstructs; when the round closed without it, sl_compressor_fold()
 * keeps the whole update in the residual so no work is lost.
 */
typedef struct sl_compressor sl_compressor;

/**
 * sl_compressor_create - a compressor for @layout with a zero residual.
 * @layout must outlive it. Caller frees with sl_compressor_free().
 */
int sl_compressor_create(const sl_layout *layout, const sl_compress_params *p, sl_compressor **out);

/** sl_compressor_free - NULL is a no-op. */
void sl_compressor_free(sl_compressor *c);

/**
 * sl_compressor_prepare - accumulate @delta (sl_layout_params() floats,
 * local - global) into a pending copy of the residual, select, quantize and
 * encode a frame for @hdr (kind UPDATE). The committed residual does not
 * change. A second prepare before commit/fold replaces the pending one.
 * @step: participation number for the density warm-up.
 * @out, @out_len: a malloc'd frame the caller frees.
 */
int sl_compressor_prepare(sl_compressor *c, const float *delta, const sl_frame_header *hdr,
                          uint32_t step, void **out, size_t *out_len);

/**
 * sl_compressor_commit - the pending frame was acknowledged. RESIDUAL:
 * residual = pending - sent. TRACKING: residual = residual - sent (the
 * committed residual, which may have absorbed a move since the prepare).
 */
int sl_compressor_commit(sl_compressor *c);

/**
 * sl_compressor_fold - the pending frame was not accepted. RESIDUAL:
 * residual = pending (all kept). TRACKING: the residual does not change.
 */
int sl_compressor_fold(sl_compressor *c);

/**
 * sl_compressor_absorb - TRACKING: add one round's move of the global model
 * to the committed residual, residual += (@to - @from) / @rounds, where @from
 * is the model an acknowledged update was trained from and @to a later model
 * @rounds versions on (> 0). The exact move is that of the round the update
 * went into (@rounds 1; the agent fetches that version first when it missed
 * some); more than 1 takes the average move of a round for it, which
 * misses the device's own part of its round's move.
 * The pending state is untouched. SL_EINVAL for bad arguments, SL_ESTATE
 * under RESIDUAL, SL_ENONFINITE (nothing changed) when a result would not be
 * finite.
 */
int sl_compressor_absorb(sl_compressor *c, const float *from, const float *to, double rounds);

/**
 * sl_compressor_state - the committed residual and momentum (NULL when
 * momentum is off), sl_layout_params() floats each, for persisting.
 * Pointers stay valid until the next call that changes the compressor.
 */
int sl_compressor_state(const sl_compressor *c, const float **residual, const float **momentum);

/**
 * sl_compressor_pending - the pending accumulated vector (residual + delta)
 * and momentum; SL_ESTATE when nothing is pending.
 */
int sl_compressor_pending(const sl_compressor *c, const float **accumulated,
                          const float **momentum);

/**
 * sl_compressor_set_split - code the positions of the frames sl_compressor_prepare()
 * makes against @support, the change from model version @ref_version to the frame's base
 * version (SL_FRAME_FLAG_SPLIT, written when smaller; top-k over the whole model only),
 * and decode a split frame given to sl_compressor_restore() against it. @support NULL:
 * neither. Borrowed: it must outlive the compressor's use of it. Returns SL_OK, or
 * SL_EINVAL for a support of another size or @ref_version 0 with a support.
 */
int sl_compressor_set_split(sl_compressor *c, const sl_support *support, uint64_t ref_version);

/**
 * sl_compressor_restore - load persisted state after a restart: the
 * committed @residual and @momentum (NULL when off), and optionally a pending
 * upload (@accumulated, @pending_momentum and the @frame made from them) so
 * that commit/fold work as if the process had never stopped. The frame is
 * decoded and checked against the layout (a split frame against the support
 * sl_compressor_set_split() gave: SL_ESUPPORT without it).
 */
int sl_compressor_restore(sl_compressor *c, const float *residual, const float *momentum,
                          const float *accumulated, const float *pending_momentum,
                          const void *frame, size_t frame_len);

/**
 * sl_effective_steps - FedNova's effective steps a of @steps local SGD steps
 * with momentum @momentum in [0, 1) (0 for other optimisers): @steps without
 * momentum, else (tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho) (Wang et
 * al., NeurIPS 2020). @steps 0 counts as 1. A device of a "fednova" task
 * divides its fresh update by it; the coordinator weighs the mean by it.
 */
double sl_effective_steps(uint32_t steps, double momentum);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_CODEC_H */
