/* AVX2 transposes with the bf16 <-> f32 cast fused: each block is loaded,
 * cast and transposed in registers and stored straight into the
 * destination, so no buffer sits between the transpose and the cast.
 * transpose_cast.c walks matrices with them. The AVX-512 level uses them
 * too: they are the kernels tested on hardware at hand. */
#include "core/transpose_cast_impl.h"

#if RS__TR_X86
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TGT_AVX2 __attribute__((target("avx2")))
#define INLINE inline __attribute__((always_inline))

#define LD_256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST_256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define ST_128(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

/* The three in-lane rounds of a 16-bit transpose of 8 rows: afterwards
 * lane L of x[k] holds column k of lane L's 8 x 8 block. */
TGT_AVX2 static INLINE void inlane8x8_16(__m256i *x)
{
    __m256i y[8];
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < 4; i++) {
            y[2 * i] = _mm256_unpacklo_epi16(x[i], x[i + 4]);
            y[2 * i + 1] = _mm256_unpackhi_epi16(x[i], x[i + 4]);
        }
        for (size_t i = 0; i < 8; i++)
            x[i] = y[i];
    }
}

/* bf16 NaNs made quiet as rs__bf16_to_f32 does: the top mantissa bit set
 * where the magnitude is above infinity's. */
TGT_AVX2 static INLINE __m256i quiet16(__m256i v)
{
    const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi16(0x7fff));
    const __m256i nan = _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7f80));
    return _mm256_or_si256(v, _mm256_and_si256(nan, _mm256_set1_epi16(0x40)));
}

/* 8 source rows x 16 bf16 columns to 16 destination rows of 8 f32. After
 * the transpose, lane 0 of x[k] is destination row k and lane 1 row 8 + k;
 * interleaving with zeros below each bf16 widens it to its f32 bits. The
 * rows leave as 16-byte halves: a 256-bit lane exchange (permute2x128)
 * costs several times a store on cores that split 256-bit operations in
 * two, and measured a third slower there. */
TGT_AVX2 static void bf16_f32_block(unsigned char *d, size_t dld,
                                    const unsigned char *s, size_t sld)
{
    __m256i x[8];
    for (size_t i = 0; i < 8; i++)
        x[i] = quiet16(LD_256(s + i * sld));
    inlane8x8_16(x);
    const __m256i z = _mm256_setzero_si256();
    for (size_t k = 0; k < 8; k++) {
        const __m256i lo = _mm256_unpacklo_epi16(z, x[k]);
        const __m256i hi = _mm256_unpackhi_epi16(z, x[k]);
        ST_128(d + k * dld, _mm256_castsi256_si128(lo));
        ST_128(d + k * dld + 16, _mm256_castsi256_si128(hi));
        ST_128(d + (8 + k) * dld, _mm256_extracti128_si256(lo, 1));
        ST_128(d + (8 + k) * dld + 16, _mm256_extracti128_si256(hi, 1));
    }
}

/* f32 bits rounded to nearest even at bit 16 (rs__f32_to_bf16 without its
 * NaN case): x + 0x7fff + (bit 16 of x), the bf16 in the top 16 bits. The
 * bit is tested with a compare instead of shifted down: vector shifts
 * issue on one pipe only on some cores. */
TGT_AVX2 static INLINE __m256i round16(__m256i x)
{
    const __m256i even = _mm256_cmpeq_epi32(
        _mm256_and_si256(x, _mm256_set1_epi32(0x10000)),
        _mm256_setzero_si256());
    return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x8000)),
                            even);
}

/* The same with NaNs: the top 16 bits with the quiet bit set. */
TGT_AVX2 static INLINE __m256i round16_nan(__m256i x)
{
    const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
    return _mm256_blendv_epi8(round16(x), q, nan);
}

/* The top 16 bits of a's and b's 32-bit elements, interleaved: word 2j of
 * lane L is a's element 4L + j, word 2j + 1 b's. */
TGT_AVX2 static INLINE __m256i tops(__m256i a, __m256i b)
{
    return _mm256_blend_epi16(_mm256_srli_epi32(a, 16), b, 0xAA);
}

/* 8 source rows x 16 f32 columns to 16 destination rows of 8 bf16. Each
 * row's columns 0-7 (a) and 8-15 (b) are rounded and their top halves
 * interleaved, so word 2j of lane L is column 4L + j and word 2j + 1
 * column 8 + 4L + j; after the transpose lane L of x[k] is the
 * destination row of word k's column. NAN_AWARE selects the rounding; the
 * plain one also reports whether the block holds a NaN (an unordered
 * compare of each row's two halves), in which case the caller runs the
 * NaN-aware one over the block again. */
#define F32_BF16_BLOCK(NAME, ROUND)                                           \
    TGT_AVX2 static INLINE int NAME(unsigned char *d, size_t dld,             \
                                    const unsigned char *s, size_t sld)       \
    {                                                                         \
        __m256 un = _mm256_setzero_ps();                                      \
        __m256i x[8];                                                         \
        for (size_t i = 0; i < 8; i++) {                                      \
            const __m256i a = LD_256(s + i * sld), b = LD_256(s + i * sld + 32); \
            un = _mm256_or_ps(un, _mm256_cmp_ps(_mm256_castsi256_ps(a),       \
                                                _mm256_castsi256_ps(b),       \
                                                _CMP_UNORD_Q));               \
            x[i] = tops(ROUND(a), ROUND(b));                                  \
        }                                                                     \
        inlane8x8_16(x);                                                      \
        for (size_t j = 0; j < 4; j++) {                                      \
            ST_128(d + j * dld, _mm256_castsi256_si128(x[2 * j]));            \
            ST_128(d + (4 + j) * dld, _mm256_extracti128_si256(x[2 * j], 1)); \
            ST_128(d + (8 + j) * dld, _mm256_castsi256_si128(x[2 * j + 1]));  \
            ST_128(d + (12 + j) * dld,                                        \
                   _mm256_extracti128_si256(x[2 * j + 1], 1));                \
        }                                                                     \
        return _mm256_movemask_ps(un);                                        \
    }

F32_BF16_BLOCK(f32_bf16_plain, round16)
F32_BF16_BLOCK(f32_bf16_nan, round16_nan)

TGT_AVX2 static void f32_bf16_block(unsigned char *d, size_t dld,
                                    const unsigned char *s, size_t sld)
{
    if (f32_bf16_plain(d, dld, s, sld) != 0)
        (void)f32_bf16_nan(d, dld, s, sld);
}

#define NT_256(p, v) _mm256_stream_si256((__m256i *)(void *)(p), (v))

/* One line from 64 bytes anywhere. */
TGT_AVX2 static INLINE void nt_line(unsigned char *d, const unsigned char *s)
{
    NT_256(d, LD_256(s));
    NT_256(d + 32, LD_256(s + 32));
}

/* 64 bytes, one line, through two vector moves. */
TGT_AVX2 static INLINE void copy64(unsigned char *d, const unsigned char *s)
{
    ST_256(d, LD_256(s));
    ST_256(d + 32, LD_256(s + 32));
}

/* 0xff bytes, then zeros: 64 - m bytes on, the first m bytes are set. */
static const unsigned char first_m[128] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255};

/* A run at m bytes past a line start q: the line at q is the previous
 * run's last m bytes (the last 64 of it wait in carry) and this run's
 * first 64 - m, blended in registers from loads that reach m bytes before
 * the run (the buffer has a line of slack in front) and m bytes past
 * carry's (the carries have one in the back); the lines after it come
 * from the run shifted by 64 - m. Assembling the line in memory instead
 * stalls on store forwarding, and a library memcpy of a variable length
 * per run cost as much as the cast. */
TGT_AVX2 static void stream_rows(unsigned char *d, size_t dld,
                                const unsigned char *buf, size_t rows,
                                unsigned char *carry, int first, int last)
{
    for (size_t r = 0; r < rows; r++, d += dld, buf += RS__TCAST_RUN) {
        const size_t m = (uintptr_t)d % 64;
        if (m == 0) {
            for (size_t o = 0; o < RS__TCAST_RUN; o += 64)
                nt_line(d + o, buf + o);
            continue;
        }
        /* rows off lines have carries (carry is NULL only when none is) */
        unsigned char *cr = carry + r * 64;
        unsigned char *q = d - m;
        if (first) {
            memcpy(d, buf, 64 - m);
        } else {
            const unsigned char *k = first_m + 64 - m;
            for (size_t h = 0; h < 64; h += 32)
                NT_256(q + h, _mm256_blendv_epi8(LD_256(buf - m + h),
                                                 LD_256(cr + 64 - m + h),
                                                 LD_256(k + h)));
        }
        for (size_t o = 64; o < RS__TCAST_RUN; o += 64)
            nt_line(q + o, buf + o - m);
        if (last)
            memcpy(q + RS__TCAST_RUN, buf + RS__TCAST_RUN - m, m);
        else
            copy64(cr, buf + RS__TCAST_RUN - 64);
    }
}

const rs__tcast_ops_t rs__tcast_ops_avx2 = {bf16_f32_block, f32_bf16_block,
                                           stream_rows,
                                           &rs__transpose_ops_avx2};

#define TGT_BF16                                                              \
    __attribute__((target("avx2,avx512f,avx512vl,avx512dq,avx512bf16")))

/* 8 source rows x 16 f32 columns to 16 destination rows of 8 bf16, the
 * rounding done by the CPU's own conversion (vcvtne2ps2bf16: to nearest
 * even, NaNs kept quiet with their top bits, as rs__f32_to_bf16), two
 * halves of a row into one register in column order; then the transpose
 * bf16_f32_block uses, and the rows stored as 16-byte halves. The
 * conversion reads subnormal inputs as zero, which rs__f32_to_bf16 does
 * not: a block that holds one (fpclass, one compare per half row; rare in
 * weights) is done again by the AVX2 block, which rounds them exactly. */
TGT_BF16 static void f32_bf16_block_bf16(unsigned char *d, size_t dld,
                                         const unsigned char *s, size_t sld)
{
    __mmask8 sub = 0;
    __m256i x[8];
    for (size_t i = 0; i < 8; i++) {
        const __m256 a = _mm256_loadu_ps((const float *)(const void *)(s + i * sld));
        const __m256 b =
            _mm256_loadu_ps((const float *)(const void *)(s + i * sld + 32));
        sub |= (__mmask8)(_mm256_fpclass_ps_mask(a, 0x20) |
                          _mm256_fpclass_ps_mask(b, 0x20));
        x[i] = (__m256i)_mm256_cvtne2ps_pbh(b, a);
    }
    if (sub != 0) {
        f32_bf16_block(d, dld, s, sld);
        return;
    }
    inlane8x8_16(x);
    for (size_t k = 0; k < 8; k++) {
        ST_128(d + k * dld, _mm256_castsi256_si128(x[k]));
        ST_128(d + (8 + k) * dld, _mm256_extracti128_si256(x[k], 1));
    }
}

const rs__tcast_ops_t rs__tcast_ops_avx512bf16 = {
    bf16_f32_block, f32_bf16_block_bf16, stream_rows, &rs__transpose_ops_avx2};

#endif
