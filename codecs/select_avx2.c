/*
 * select_avx2.c - AVX2 kernels of top-k selection (see select_int.h).
 * Compiled with -mavx2 -mfma -mbmi2 -mf16c; used only when sl_cpu_features()
 * reports SL_CPU_AVX2.
 */
#include "select_int.h"

#if defined(SL_X86_SIMD)
#include <immintrin.h>
#include <string.h>

/*
 * AVX2 has no compress instruction: the 8-bit match mask picks a
 * permutation that moves the matching lanes to the front. Each entry packs
 * the source lane of output slot s into bits 4s..4s+3.
 */
static const uint32_t compress_lut[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

static inline __m256i keys8(const float *p)
{
    return _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(p)),
                            _mm256_set1_epi32((int)SL__KEY_MASK));
}

/* Keys are below 2^31, so a signed compare with lo - 1 is key >= lo (lo = 0
 * gives -1, which every key beats). */
static inline __m256i bound8(uint32_t lo)
{
    return _mm256_set1_epi32((int32_t)(lo - 1u));
}

static inline __m256i compress_perm(unsigned m)
{
    return _mm256_srlv_epi32(_mm256_set1_epi32((int)compress_lut[m]),
                             _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
}

static inline uint32_t hmax8(__m256i v)
{
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

static size_t count_ge_avx2(const float *x, size_t n, uint32_t lo, uint32_t *max_key)
{
    const __m256i vlo = bound8(lo);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, mx0 = c0, mx1 = c0;
    size_t i = 0, c = 0;
    uint32_t mx;

    /* Per-lane counters hold at most n / 8 < 2^32 since n <= 2^32 - 1. */
    for (; n - i >= 16; i += 16) {
        __m256i k0 = keys8(x + i), k1 = keys8(x + i + 8);
        c0 = _mm256_sub_epi32(c0, _mm256_cmpgt_epi32(k0, vlo));
        c1 = _mm256_sub_epi32(c1, _mm256_cmpgt_epi32(k1, vlo));
        mx0 = _mm256_max_epu32(mx0, k0);
        mx1 = _mm256_max_epu32(mx1, k1);
    }
    {
        uint32_t lane[16];
        _mm256_storeu_si256((__m256i *)(void *)lane, c0);
        _mm256_storeu_si256((__m256i *)(void *)(lane + 8), c1);
        for (int j = 0; j < 16; j++)
            c += lane[j];
    }
    mx = hmax8(_mm256_max_epu32(mx0, mx1));
    if (i < n) {
        uint32_t tail_max;
        c += sl__select_count_ge_scalar(x + i, n - i, lo, &tail_max);
        mx = tail_max > mx ? tail_max : mx;
    }
    *max_key = mx;
    return c;
}

static inline size_t filter_body(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                                 uint32_t *keys, uint32_t *max_key, const int with_keys)
{
    const __m256i vlo = bound8(lo), step = _mm256_set1_epi32(8);
    __m256i vi = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), mxv = _mm256_setzero_si256();
    size_t i = 0, j = 0;
    uint32_t mx;

    /* Fast path: whole-vector stores, the unused lanes are overwritten by
     * the next store; needs 32 free slots for 4 vectors. */
    while (n - i >= 32 && cap - j >= 32) {
        for (int u = 0; u < 4; u++, i += 8) {
            __m256i k = keys8(x + i);
            unsigned m =
                (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, vlo)));
            __m256i perm = compress_perm(m);
            mxv = _mm256_max_epu32(mxv, k);
            _mm256_storeu_si256((__m256i *)(void *)(idx + j),
                                _mm256_permutevar8x32_epi32(vi, perm));
            if (with_keys)
                _mm256_storeu_si256((__m256i *)(void *)(keys + j),
                                    _mm256_permutevar8x32_epi32(k, perm));
            j += (size_t)_mm_popcnt_u32(m);
            vi = _mm256_add_epi32(vi, step);
        }
    }
    /* Near the end of the room: store exactly the matches. */
    for (; n - i >= 8; i += 8) {
        __m256i k = keys8(x + i);
        unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, vlo)));
        size_t pc = (size_t)_mm_popcnt_u32(m);
        mxv = _mm256_max_epu32(mxv, k);
        if (pc != 0) {
            __m256i perm = compress_perm(m);
            uint32_t buf[8];
            if (pc > cap - j) {
                *max_key = hmax8(mxv);
                return cap + 1;
            }
            _mm256_storeu_si256((__m256i *)(void *)buf, _mm256_permutevar8x32_epi32(vi, perm));
            memcpy(idx + j, buf, pc * sizeof *buf);
            if (with_keys) {
                _mm256_storeu_si256((__m256i *)(void *)buf, _mm256_permutevar8x32_epi32(k, perm));
                memcpy(keys + j, buf, pc * sizeof *buf);
            }
            j += pc;
        }
        vi = _mm256_add_epi32(vi, step);
    }
    mx = hmax8(mxv);
    if (i < n) {
        uint32_t tail_max;
        size_t t = sl__select_filter_ge_scalar(x + i, n - i, lo, cap - j, idx + j,
                                               with_keys ? keys + j : NULL, &tail_max);
        mx = tail_max > mx ? tail_max : mx;
        if (t > cap - j) {
            *max_key = mx;
            return cap + 1;
        }
        for (size_t e = j + t; j < e; j++)
            idx[j] += (uint32_t)i;
    }
    *max_key = mx;
    return j;
}

static size_t filter_ge_avx2(const float *x, size_t n, uint32_t lo, size_t cap, uint32_t *idx,
                             uint32_t *keys, uint32_t *max_key)
{
    if (keys != NULL)
        return filter_body(x, n, lo, cap, idx, keys, max_key, 1);
    return filter_body(x, n, lo, cap, idx, NULL, max_key, 0);
}

static void stats_avx2(const float *x, size_t n, double lanes[SL__SELECT_SUM_LANES],
                       uint32_t *max_key, uint32_t *hist)
{
    /* acc0..acc3 hold the canonical lanes 0-3, 4-7, 8-11, 12-15. */
    __m256d acc0 = _mm256_loadu_pd(lanes), acc1 = _mm256_loadu_pd(lanes + 4);
    __m256d acc2 = _mm256_loadu_pd(lanes + 8), acc3 = _mm256_loadu_pd(lanes + 12);
    __m256i mxv = _mm256_setzero_si256();
    uint32_t bins[16], mx;
    size_t i = 0;

    for (; n - i >= 16; i += 16) {
        __m256i k0 = keys8(x + i), k1 = keys8(x + i + 8);
        __m256 f0 = _mm256_castsi256_ps(k0), f1 = _mm256_castsi256_ps(k1);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(f0)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)));
        acc2 = _mm256_add_pd(acc2, _mm256_cvtps_pd(_mm256_castps256_ps128(f1)));
        acc3 = _mm256_add_pd(acc3, _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1)));
        mxv = _mm256_max_epu32(mxv, _mm256_max_epu32(k0, k1));
        if (hist != NULL) {
            _mm256_storeu_si256((__m256i *)(void *)bins,
                                _mm256_srli_epi32(k0, SL__SELECT_HIST_SHIFT));
            _mm256_storeu_si256((__m256i *)(void *)(bins + 8),
                                _mm256_srli_epi32(k1, SL__SELECT_HIST_SHIFT));
            for (int b = 0; b < 16; b++)
                hist[bins[b]]++;
        }
    }
    _mm256_storeu_pd(lanes, acc0);
    _mm256_storeu_pd(lanes + 4, acc1);
    _mm256_storeu_pd(lanes + 8, acc2);
    _mm256_storeu_pd(lanes + 12, acc3);
    mx = hmax8(mxv);
    if (i < n) {
        /* i is a multiple of 16, so the tail keeps the canonical lanes. */
        uint32_t tail_max;
        sl__select_stats_scalar(x + i, n - i, lanes, &tail_max, hist);
        mx = tail_max > mx ? tail_max : mx;
    }
    *max_key = mx;
}

const sl__select_kernels sl__select_avx2 = {
    "avx2", SL_CPU_AVX2, count_ge_avx2, filter_ge_avx2, stats_avx2,
};

#else
typedef int sl__select_avx2_unused; /* ISO C wants a declaration in every file */
#endif
