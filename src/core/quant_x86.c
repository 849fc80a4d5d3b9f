/* x86-64 block quantization kernels: AVX2 (with F16C) and AVX-512 (F + BW),
 * each compiled for its own target with __attribute__((target)) and chosen
 * at run time (core/simd.h), so the build needs no -march flag. They do
 * what the portable kernels do, lane by lane: the largest magnitude is an
 * unsigned integer max over the sign-cleared bits, and the encoding is one
 * IEEE division (the same instruction semantics as the scalar `/`)
 * followed by rs__narrow32's integer rounding, written with vector integer
 * ops, saturated and packed to bytes. Row tails run the scalar encoder, so
 * every element is computed by the same arithmetic whatever the level. */
#include "core/quant_impl.h"

#if RS__QUANT_X86
#include <immintrin.h>
#include <string.h>

#define TGT_AVX2 __attribute__((target("avx2,f16c")))
#define TGT_AVX512 __attribute__((target("avx512f,avx512bw,avx2,f16c")))

/* The constants of rs__narrow32 for one format (E, M; bias B): the exponent
 * rebase, the rounding addend, the smallest normal's bits and the magic
 * number whose ulp is the format's smallest subnormal. */
typedef struct narrow_k {
    uint32_t rebase, half, min_normal, magic, top;
    int sh;
} narrow_k_t;

static const narrow_k_t narrow_e4m3 = {
    (127u - 7u) << 23, (1u << 19) - 1, (127u + 1u - 7u) << 23,
    (127u + 1u - 7u - 3u + 23u) << 23, 0x7eu, 20};
static const narrow_k_t narrow_e5m2 = {
    (127u - 15u) << 23, (1u << 20) - 1, (127u + 1u - 15u) << 23,
    (127u + 1u - 15u - 2u + 23u) << 23, 0x7bu, 21};

static inline void scalar_tail_f32(uint8_t *d, const unsigned char *s,
                                   size_t n, float scale, int fmt)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, s + 4 * i, sizeof(v));
        d[i] = rs__quant_enc(fmt, v / scale);
    }
}

static inline void scalar_tail_16(uint8_t *d, const unsigned char *s,
                                  size_t n, float scale, int fmt, int bf16)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, sizeof(h));
        const float v = bf16 ? rs__f32_from((uint32_t)h << 16)
                             : rs__f16_to_f32(h);
        d[i] = rs__quant_enc(fmt, v / scale);
    }
}

/* ---------------------------------------------------------------- AVX2 */

TGT_AVX2 static inline __m256i narrow8(__m256 q, const narrow_k_t *k)
{
    const __m256i x = _mm256_castps_si256(q);
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24),
                                          _mm256_set1_epi32(0x80));
    const __m256i odd = _mm256_and_si256(_mm256_srl_epi32(a, _mm_cvtsi32_si128(k->sh)),
                                         _mm256_set1_epi32(1));
    __m256i nr = _mm256_sub_epi32(a, _mm256_set1_epi32((int)k->rebase));
    nr = _mm256_add_epi32(nr, _mm256_add_epi32(_mm256_set1_epi32((int)k->half), odd));
    nr = _mm256_srl_epi32(nr, _mm_cvtsi32_si128(k->sh));
    const __m256i magic = _mm256_set1_epi32((int)k->magic);
    const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(a),
                                     _mm256_castsi256_ps(magic));
    const __m256i sr = _mm256_sub_epi32(_mm256_castps_si256(sum), magic);
    const __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k->min_normal), a);
    __m256i r = _mm256_blendv_epi8(nr, sr, sub);
    r = _mm256_min_epu32(r, _mm256_set1_epi32((int)k->top));
    return _mm256_or_si256(r, sign);
}

/* 32 codes (one per 32-bit lane of r0..r3, in order) into 32 bytes. */
TGT_AVX2 static inline void store32(uint8_t *d, __m256i r0, __m256i r1,
                                    __m256i r2, __m256i r3)
{
    const __m256i p01 = _mm256_packus_epi32(r0, r1);
    const __m256i p23 = _mm256_packus_epi32(r2, r3);
    const __m256i b = _mm256_packus_epi16(p01, p23);
    const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)(void *)d,
                        _mm256_permutevar8x32_epi32(b, fix));
}

TGT_AVX2 static inline __m256 ld8_f32(const unsigned char *s)
{
    return _mm256_loadu_ps((const float *)(const void *)s);
}

TGT_AVX2 static inline __m256 ld8_bf16(const unsigned char *s)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)s);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TGT_AVX2 static inline __m256 ld8_f16(const unsigned char *s)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)s));
}

#define ENC_AVX2(NAME, LD, ES, TAIL)                                          \
    TGT_AVX2 static void NAME(uint8_t *d, const void *src, size_t n,          \
                              float scale, const narrow_k_t *k, int fmt)      \
    {                                                                         \
        const unsigned char *s = src;                                         \
        const __m256 sc = _mm256_set1_ps(scale);                              \
        size_t i = 0;                                                         \
        for (; i + 32 <= n; i += 32) {                                        \
            const unsigned char *p = s + (ES) * i;                            \
            store32(d + i, narrow8(_mm256_div_ps(LD(p), sc), k),              \
                    narrow8(_mm256_div_ps(LD(p + 8 * (ES)), sc), k),          \
                    narrow8(_mm256_div_ps(LD(p + 16 * (ES)), sc), k),         \
                    narrow8(_mm256_div_ps(LD(p + 24 * (ES)), sc), k));        \
        }                                                                     \
        TAIL;                                                                 \
    }

ENC_AVX2(enc8_f32, ld8_f32, 4, scalar_tail_f32(d + i, s + 4 * i, n - i, scale, fmt))
ENC_AVX2(enc8_bf16, ld8_bf16, 2,
         scalar_tail_16(d + i, s + 2 * i, n - i, scale, fmt, 1))
ENC_AVX2(enc8_f16, ld8_f16, 2,
         scalar_tail_16(d + i, s + 2 * i, n - i, scale, fmt, 0))

#define ENC_PAIR(LEVEL, SRC)                                                  \
    static void LEVEL##_##SRC##_e4m3(uint8_t *d, const void *s, size_t n,     \
                                     float scale)                             \
    {                                                                         \
        LEVEL##_##SRC(d, s, n, scale, &narrow_e4m3, RS__QFMT_E4M3);           \
    }                                                                         \
    static void LEVEL##_##SRC##_e5m2(uint8_t *d, const void *s, size_t n,     \
                                     float scale)                             \
    {                                                                         \
        LEVEL##_##SRC(d, s, n, scale, &narrow_e5m2, RS__QFMT_E5M2);           \
    }

ENC_PAIR(enc8, f32)
ENC_PAIR(enc8, bf16)
ENC_PAIR(enc8, f16)

TGT_AVX2 static uint32_t hmax8_epu32(__m256i m)
{
    __m128i v = _mm_max_epu32(_mm256_castsi256_si128(m),
                              _mm256_extracti128_si256(m, 1));
    v = _mm_max_epu32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_max_epu32(v, _mm_shuffle_epi32(v, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(v);
}

TGT_AVX2 static uint32_t amax8_f32(const void *src, size_t n)
{
    const unsigned char *s = src;
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i *p = (const __m256i *)(const void *)(s + 4 * i);
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(p), mask));
        m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256(p + 1), mask));
    }
    uint32_t m = hmax8_epu32(_mm256_max_epu32(m0, m1));
    const uint32_t t = rs__quant_ops_portable.amax[RS__QSRC_F32](s + 4 * i, n - i);
    return t > m ? t : m;
}

TGT_AVX2 static uint32_t amax8_16(const void *src, size_t n)
{
    const unsigned char *s = src;
    const __m256i mask = _mm256_set1_epi16(0x7fff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i *p = (const __m256i *)(const void *)(s + 2 * i);
        m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256(p), mask));
        m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256(p + 1), mask));
    }
    /* widen the 16 halves to 32 bits and reduce those */
    const __m256i m = _mm256_max_epu16(m0, m1);
    const __m256i lo = _mm256_and_si256(m, _mm256_set1_epi32(0xffff));
    uint32_t r = hmax8_epu32(_mm256_max_epu32(lo, _mm256_srli_epi32(m, 16)));
    const uint32_t t = rs__quant_ops_portable.amax[RS__QSRC_BF16](s + 2 * i, n - i);
    return t > r ? t : r;
}

const rs__quant_ops_t rs__quant_ops_avx2 = {
    .amax = {amax8_f32, amax8_16, amax8_16},
    .enc = {{enc8_f32_e4m3, enc8_f32_e5m2},
            {enc8_bf16_e4m3, enc8_bf16_e5m2},
            {enc8_f16_e4m3, enc8_f16_e5m2}},
};

/* ------------------------------------------------------------- AVX-512 */

TGT_AVX512 static inline __m128i narrow16(__m512 q, const narrow_k_t *k)
{
    const __m512i x = _mm512_castps_si512(q);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 24),
                                          _mm512_set1_epi32(0x80));
    const __m128i sh = _mm_cvtsi32_si128(k->sh);
    const __m512i odd = _mm512_and_si512(_mm512_srl_epi32(a, sh),
                                         _mm512_set1_epi32(1));
    __m512i nr = _mm512_sub_epi32(a, _mm512_set1_epi32((int)k->rebase));
    nr = _mm512_add_epi32(nr, _mm512_add_epi32(_mm512_set1_epi32((int)k->half), odd));
    nr = _mm512_srl_epi32(nr, sh);
    const __m512i magic = _mm512_set1_epi32((int)k->magic);
    const __m512 sum = _mm512_add_ps(_mm512_castsi512_ps(a),
                                     _mm512_castsi512_ps(magic));
    const __m512i sr = _mm512_sub_epi32(_mm512_castps_si512(sum), magic);
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32((int)k->min_normal));
    __m512i r = _mm512_mask_blend_epi32(sub, nr, sr);
    r = _mm512_min_epu32(r, _mm512_set1_epi32((int)k->top));
    return _mm512_cvtepi32_epi8(_mm512_or_si512(r, sign));
}

TGT_AVX512 static inline __m512 ld16_f32(const unsigned char *s)
{
    return _mm512_loadu_ps((const void *)s);
}

TGT_AVX512 static inline __m512 ld16_bf16(const unsigned char *s)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)s);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TGT_AVX512 static inline __m512 ld16_f16(const unsigned char *s)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)s));
}

#define ST16(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

#define ENC_AVX512(NAME, LD, ES, TAIL)                                        \
    TGT_AVX512 static void NAME(uint8_t *d, const void *src, size_t n,        \
                                float scale, const narrow_k_t *k, int fmt)    \
    {                                                                         \
        const unsigned char *s = src;                                         \
        const __m512 sc = _mm512_set1_ps(scale);                              \
        size_t i = 0;                                                         \
        for (; i + 32 <= n; i += 32) {                                        \
            const unsigned char *p = s + (ES) * i;                            \
            ST16(d + i, narrow16(_mm512_div_ps(LD(p), sc), k));               \
            ST16(d + i + 16, narrow16(_mm512_div_ps(LD(p + 16 * (ES)), sc), k)); \
        }                                                                     \
        TAIL;                                                                 \
    }

ENC_AVX512(enc16_f32, ld16_f32, 4,
           scalar_tail_f32(d + i, s + 4 * i, n - i, scale, fmt))
ENC_AVX512(enc16_bf16, ld16_bf16, 2,
           scalar_tail_16(d + i, s + 2 * i, n - i, scale, fmt, 1))
ENC_AVX512(enc16_f16, ld16_f16, 2,
           scalar_tail_16(d + i, s + 2 * i, n - i, scale, fmt, 0))

ENC_PAIR(enc16, f32)
ENC_PAIR(enc16, bf16)
ENC_PAIR(enc16, f16)

TGT_AVX512 static uint32_t amax16_f32(const void *src, size_t n)
{
    const unsigned char *s = src;
    const __m512i mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const unsigned char *p = s + 4 * i;
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(p), mask));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(p + 64), mask));
    }
    const uint32_t m = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
    const uint32_t t = amax8_f32(s + 4 * i, n - i);
    return t > m ? t : m;
}

TGT_AVX512 static uint32_t amax16_16(const void *src, size_t n)
{
    const unsigned char *s = src;
    const __m512i mask = _mm512_set1_epi16(0x7fff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const unsigned char *p = s + 2 * i;
        m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_loadu_si512(p), mask));
        m1 = _mm512_max_epu16(m1, _mm512_and_si512(_mm512_loadu_si512(p + 64), mask));
    }
    const __m512i m = _mm512_max_epu16(m0, m1);
    const __m512i lo = _mm512_and_si512(m, _mm512_set1_epi32(0xffff));
    const uint32_t r = _mm512_reduce_max_epu32(_mm512_max_epu32(lo, _mm512_srli_epi32(m, 16)));
    const uint32_t t = amax8_16(s + 2 * i, n - i);
    return t > r ? t : r;
}

const rs__quant_ops_t rs__quant_ops_avx512 = {
    .amax = {amax16_f32, amax16_16, amax16_16},
    .enc = {{enc16_f32_e4m3, enc16_f32_e5m2},
            {enc16_bf16_e4m3, enc16_bf16_e5m2},
            {enc16_f16_e4m3, enc16_f16_e5m2}},
};

#endif
