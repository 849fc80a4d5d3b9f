/* x86-64 transpose kernels: SSE2 (the x86-64 baseline), AVX2 and AVX-512
 * (F + BW), each compiled for its own target with
 * __attribute__((target)) and chosen at run time (core/simd.h), so the
 * build needs no -march flag. One scheme for all: a square micro-block of
 * one vector per row is transposed inside each 128-bit lane by log2(16 /
 * es) rounds of unpacks (pairing rows k and k + R/2, which interleaves them
 * a step further each round), then, with wider vectors, the 128-bit lanes
 * trade places across rows (permute2x128 for two lanes, two rounds of
 * shuffle_i64x2 for four). Line tiles (64-byte rows) are built from these
 * blocks; the streaming stores write whole cache lines. */
#include "core/transpose_impl.h"

#if RS__TR_X86
#include <immintrin.h>
#include <stdint.h>

#define TGT_AVX2 __attribute__((target("avx2")))
#define TGT_AVX512 __attribute__((target("avx512f,avx512bw")))
#define TGT_NONE

#define RS_PRAGMA(x) _Pragma(#x)
#define UNROLL RS_PRAGMA(GCC unroll 64)

/* In-lane rounds over the R rows x[g .. g + R): afterwards lane L of x[g +
 * k] holds row k of the transposed R x R block of that lane. */
#define TR_INLANE(VT, R, LO, HI, x, g)                                        \
    do {                                                                      \
        VT y_[R];                                                             \
        UNROLL for (int st_ = (R); st_ > 1; st_ /= 2) {                       \
            UNROLL for (size_t i_ = 0; i_ < (size_t)(R) / 2; i_++) {          \
                y_[2 * i_] = LO((x)[(g) + i_], (x)[(g) + i_ + (R) / 2]);      \
                y_[2 * i_ + 1] = HI((x)[(g) + i_], (x)[(g) + i_ + (R) / 2]);  \
            }                                                                 \
            UNROLL for (size_t i_ = 0; i_ < (size_t)(R); i_++)                \
                (x)[(g) + i_] = y_[i_];                                       \
        }                                                                     \
    } while (0)

/* A V x V micro-block of ES-byte elements, V = VB / ES: loads V rows,
 * transposes every lane, and hands the rows to STORE_ROWS, which puts the
 * lanes in place. */
#define TR_MICRO(NAME, TGT, VT, VB, ES, LOAD, LO, HI, STORE_ROWS)             \
    TGT static inline void NAME(unsigned char *d, size_t dld,                 \
                                const unsigned char *s, size_t sld)           \
    {                                                                         \
        enum { V = (VB) / (ES), R = 16 / (ES) };                              \
        VT x[V];                                                              \
        UNROLL for (size_t i = 0; i < V; i++) x[i] = LOAD(s + i * sld);       \
        UNROLL for (size_t g = 0; g < V; g += R)                              \
            TR_INLANE(VT, R, LO, HI, x, g);                                   \
        STORE_ROWS(d, dld, x, R);                                             \
    }

/* A line tile (64-byte rows) from micro-blocks of V x V elements. */
#define TR_LINE(NAME, TGT, MICRO, VB, ES)                                     \
    TGT static void NAME(unsigned char *d, size_t dld,                        \
                         const unsigned char *s, size_t sld)                  \
    {                                                                         \
        enum { E = RS__TR_LINE / (ES), V = (VB) / (ES) };                     \
        for (int i = 0; i < E; i += V)                                        \
            for (int j = 0; j < E; j += V)                                    \
                MICRO(d + (size_t)j * dld + (size_t)i * (ES), dld,            \
                      s + (size_t)i * sld + (size_t)j * (ES), sld);           \
    }

/* ---- SSE2: one lane, the in-lane rounds are the whole transpose ---- */

#define LD_128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST_128(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

#define STORE_SSE2(d, dld, x, R)                                              \
    UNROLL for (int k = 0; k < (R); k++) ST_128((d) + (size_t)k * (dld), (x)[k])

TR_MICRO(micro_sse2_1, TGT_NONE, __m128i, 16, 1, LD_128, _mm_unpacklo_epi8,
         _mm_unpackhi_epi8, STORE_SSE2)
TR_MICRO(micro_sse2_2, TGT_NONE, __m128i, 16, 2, LD_128, _mm_unpacklo_epi16,
         _mm_unpackhi_epi16, STORE_SSE2)
TR_MICRO(micro_sse2_4, TGT_NONE, __m128i, 16, 4, LD_128, _mm_unpacklo_epi32,
         _mm_unpackhi_epi32, STORE_SSE2)
TR_MICRO(micro_sse2_8, TGT_NONE, __m128i, 16, 8, LD_128, _mm_unpacklo_epi64,
         _mm_unpackhi_epi64, STORE_SSE2)
TR_LINE(line_sse2_1, TGT_NONE, micro_sse2_1, 16, 1)
TR_LINE(line_sse2_2, TGT_NONE, micro_sse2_2, 16, 2)
TR_LINE(line_sse2_4, TGT_NONE, micro_sse2_4, 16, 4)
TR_LINE(line_sse2_8, TGT_NONE, micro_sse2_8, 16, 8)

static void stream_sse2(unsigned char *d, size_t dld, const unsigned char *buf,
                        size_t rows)
{
    for (size_t r = 0; r < rows; r++, d += dld, buf += RS__TR_LINE) {
        const __m128i *b = (const __m128i *)(const void *)buf;
        __m128i *o = (__m128i *)(void *)d;
        _mm_stream_si128(o, _mm_load_si128(b));
        _mm_stream_si128(o + 1, _mm_load_si128(b + 1));
        _mm_stream_si128(o + 2, _mm_load_si128(b + 2));
        _mm_stream_si128(o + 3, _mm_load_si128(b + 3));
    }
}

static void fence_sfence(void)
{
    _mm_sfence();
}

const rs__transpose_ops_t rs__transpose_ops_sse2 = {
    {line_sse2_1, line_sse2_2, line_sse2_4, line_sse2_8},
    {NULL, NULL, NULL, NULL}, stream_sse2,
    fence_sfence};

/* ---- AVX2: two lanes; row k's upper lane goes to row R + k ---- */

#define LD_256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST_256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))

#define STORE_AVX2(d, dld, x, R)                                              \
    UNROLL for (int k = 0; k < (R); k++) {                                    \
        ST_256((d) + (size_t)k * (dld),                                       \
               _mm256_permute2x128_si256((x)[k], (x)[(R) + k], 0x20));        \
        ST_256((d) + (size_t)((R) + k) * (dld),                               \
               _mm256_permute2x128_si256((x)[k], (x)[(R) + k], 0x31));        \
    }

TR_MICRO(micro_avx2_2, TGT_AVX2, __m256i, 32, 2, LD_256,
         _mm256_unpacklo_epi16, _mm256_unpackhi_epi16, STORE_AVX2)
TR_MICRO(micro_avx2_4, TGT_AVX2, __m256i, 32, 4, LD_256,
         _mm256_unpacklo_epi32, _mm256_unpackhi_epi32, STORE_AVX2)
TR_MICRO(micro_avx2_8, TGT_AVX2, __m256i, 32, 8, LD_256,
         _mm256_unpacklo_epi64, _mm256_unpackhi_epi64, STORE_AVX2)
TR_LINE(line_avx2_2, TGT_AVX2, micro_avx2_2, 32, 2)
TR_LINE(line_avx2_4, TGT_AVX2, micro_avx2_4, 32, 4)
TR_LINE(line_avx2_8, TGT_AVX2, micro_avx2_8, 32, 8)

/* Bytes: a 16 x 32 block in two lanes is two 16 x 16 blocks side by side;
 * the in-lane rounds transpose both, the lower lane's rows go to rows 0-15
 * and the upper lane's to rows 16-31. */
#define STORE_AVX2_1(d, dld, x, R)                                            \
    UNROLL for (int k = 0; k < (R); k++) {                                    \
        ST_128((d) + (size_t)k * (dld), _mm256_castsi256_si128((x)[k]));      \
        ST_128((d) + (size_t)((R) + k) * (dld),                               \
               _mm256_extracti128_si256((x)[k], 1));                          \
    }

TGT_AVX2 static inline void micro_avx2_1(unsigned char *d, size_t dld,
                                         const unsigned char *s, size_t sld)
{
    __m256i (x)[16];
    UNROLL for (size_t i = 0; i < 16; i++) x[i] = LD_256(s + i * sld);
    TR_INLANE(__m256i, 16, _mm256_unpacklo_epi8, _mm256_unpackhi_epi8, x, 0);
    STORE_AVX2_1(d, dld, x, 16);
}

/* 16 source rows x 32 columns per block, so two per row band of 64. */
TGT_AVX2 static void line_avx2_1(unsigned char *d, size_t dld,
                                 const unsigned char *s, size_t sld)
{
    for (int i = 0; i < RS__TR_LINE; i += 16)
        for (int j = 0; j < RS__TR_LINE; j += 32)
            micro_avx2_1(d + (size_t)j * dld + (size_t)i,
                         dld, s + (size_t)i * sld + (size_t)j, sld);
}

TGT_AVX2 static void stream_avx2(unsigned char *d, size_t dld,
                                 const unsigned char *buf, size_t rows)
{
    for (size_t r = 0; r < rows; r++, d += dld, buf += RS__TR_LINE) {
        const __m256i *b = (const __m256i *)(const void *)buf;
        __m256i *o = (__m256i *)(void *)d;
        _mm256_stream_si256(o, _mm256_load_si256(b));
        _mm256_stream_si256(o + 1, _mm256_load_si256(b + 1));
    }
}

const rs__transpose_ops_t rs__transpose_ops_avx2 = {
    {line_avx2_1, line_avx2_2, line_avx2_4, line_avx2_8},
    {NULL, NULL, NULL, NULL}, stream_avx2,
    fence_sfence};

/* ---- AVX-512: four lanes, traded by two rounds of shuffle_i64x2 ---- */

#define LD_512(p) _mm512_loadu_si512((const void *)(p))
#define ST_512(p, v) _mm512_storeu_si512((void *)(p), (v))

/* Lane L of (x)[g R + k] belongs in row L R + k, lane g; ST stores a row. */
#define STORE_LANES4(ST, d, dld, x, R)                                        \
    UNROLL for (int k = 0; k < (R); k++) {                                    \
        const __m512i t0 = _mm512_shuffle_i64x2((x)[k], (x)[(R) + k], 0x44);  \
        const __m512i t1 = _mm512_shuffle_i64x2((x)[k], (x)[(R) + k], 0xEE);  \
        const __m512i t2 =                                                    \
            _mm512_shuffle_i64x2((x)[2 * (R) + k], (x)[3 * (R) + k], 0x44);   \
        const __m512i t3 =                                                    \
            _mm512_shuffle_i64x2((x)[2 * (R) + k], (x)[3 * (R) + k], 0xEE);   \
        ST((d) + (size_t)k * (dld), _mm512_shuffle_i64x2(t0, t2, 0x88));      \
        ST((d) + (size_t)((R) + k) * (dld),                                   \
           _mm512_shuffle_i64x2(t0, t2, 0xDD));                               \
        ST((d) + (size_t)(2 * (R) + k) * (dld),                               \
           _mm512_shuffle_i64x2(t1, t3, 0x88));                               \
        ST((d) + (size_t)(3 * (R) + k) * (dld),                               \
           _mm512_shuffle_i64x2(t1, t3, 0xDD));                               \
    }

/* A micro-block here is a whole line tile, every row one cache line: with
 * rows at multiples of 64 bytes they can be streamed straight from the
 * registers. */
#define NT_512(p, v) _mm512_stream_si512((void *)(p), (v))
#define STORE_AVX512(d, dld, x, R) STORE_LANES4(ST_512, d, dld, x, R)
#define STORE_AVX512_NT(d, dld, x, R) STORE_LANES4(NT_512, d, dld, x, R)

TR_MICRO(micro_avx512_2, TGT_AVX512, __m512i, 64, 2, LD_512,
         _mm512_unpacklo_epi16, _mm512_unpackhi_epi16, STORE_AVX512)
TR_MICRO(micro_avx512_4, TGT_AVX512, __m512i, 64, 4, LD_512,
         _mm512_unpacklo_epi32, _mm512_unpackhi_epi32, STORE_AVX512)
TR_MICRO(micro_avx512_8, TGT_AVX512, __m512i, 64, 8, LD_512,
         _mm512_unpacklo_epi64, _mm512_unpackhi_epi64, STORE_AVX512)
TR_LINE(line_avx512_2, TGT_AVX512, micro_avx512_2, 64, 2)
TR_LINE(line_avx512_4, TGT_AVX512, micro_avx512_4, 64, 4)
TR_LINE(line_avx512_8, TGT_AVX512, micro_avx512_8, 64, 8)
TR_MICRO(micro_avx512nt_2, TGT_AVX512, __m512i, 64, 2, LD_512,
         _mm512_unpacklo_epi16, _mm512_unpackhi_epi16, STORE_AVX512_NT)
TR_MICRO(micro_avx512nt_4, TGT_AVX512, __m512i, 64, 4, LD_512,
         _mm512_unpacklo_epi32, _mm512_unpackhi_epi32, STORE_AVX512_NT)
TR_MICRO(micro_avx512nt_8, TGT_AVX512, __m512i, 64, 8, LD_512,
         _mm512_unpacklo_epi64, _mm512_unpackhi_epi64, STORE_AVX512_NT)
TR_LINE(line_avx512nt_2, TGT_AVX512, micro_avx512nt_2, 64, 2)
TR_LINE(line_avx512nt_4, TGT_AVX512, micro_avx512nt_4, 64, 4)
TR_LINE(line_avx512nt_8, TGT_AVX512, micro_avx512nt_8, 64, 8)

TGT_AVX512 static void stream_avx512(unsigned char *d, size_t dld,
                                     const unsigned char *buf, size_t rows)
{
    for (size_t r = 0; r < rows; r++, d += dld, buf += RS__TR_LINE)
        _mm512_stream_si512((void *)d, _mm512_load_si512((const void *)buf));
}

/* Bytes stay with the AVX2 blocks: a 64 x 64 block would need 64 registers. */
const rs__transpose_ops_t rs__transpose_ops_avx512 = {
    {line_avx2_1, line_avx512_2, line_avx512_4, line_avx512_8},
    {NULL, line_avx512nt_2, line_avx512nt_4, line_avx512nt_8}, stream_avx512,
    fence_sfence};

#endif
