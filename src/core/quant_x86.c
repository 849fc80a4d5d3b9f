/* x86-64 block quantization kernels: AVX2 (with F16C) encoders and
 * largest-magnitude scans, and an AVX-512 (F + BW) scan; the AVX-512 level
 * encodes with the AVX2 encoders. Each is compiled for its own target with
 * __attribute__((target)) and chosen at run time (core/simd.h), so the
 * build needs no -march flag. They give
 * what the portable kernels give, lane by lane. The largest magnitude is an
 * unsigned integer max over the sign-cleared bits. The encoding is one IEEE
 * division (the instruction the scalar `/` compiles to), then the rounding
 * to FP8 done by the FPU: |q| is first capped at fmax (saturation, and no
 * overflow below), then added to a power of two whose ulp is the FP8 ulp
 * at |q|'s exponent (held at the format's smallest normal exponent, which
 * gives the subnormal spacing), so the add rounds to nearest even at
 * exactly the FP8 precision; the sum less that power is the rounded value,
 * exact, and scaled by 2^-(127 - bias) its float32 bits shifted right by
 * 23 - M are the code, normal or subnormal alike (float32's subnormals are
 * the same fixed-point encoding as the format's). f32 and f16 take it
 * for the segments the fast path (a product by the reciprocal, below)
 * cannot vouch for. bf16 rows are encoded by per-block tables
 * (quant_bf16_x86.c); the bf16 encoder here makes their tables and takes
 * their uncertain segments: it widens by interleaving with zeros, which
 * orders the lanes so that one unsigned pack per 16 lanes puts the codes
 * back in order. Row tails run the scalar encoder. */
#include "core/quant_impl.h"

#if RS__QUANT_X86
#include <immintrin.h>
#include <string.h>

#define TGT_AVX2 __attribute__((target("avx2,f16c")))
#define TGT_AVX512 __attribute__((target("avx512f,avx512bw,avx2,f16c")))
#define INLINE inline __attribute__((always_inline))

/* One format's constants: fmax's bits, the f32 exponent bits of its
 * smallest normal, the exponent step from a value to the power of two
 * whose ulp is the FP8 ulp at that value, the shift from f32 bits to FP8
 * bits (23 - M) and the factor 2^-(127 - bias) that aligns the exponents. */
/* The fast path's constants: half the FP8 step in p's low bits less the
 * exponent rebase, ((1 << (22 - M)) - ((127 - bias) << 23)), fmax's
 * code, and the code a zero's u gives, -((127 - bias) << M) (see
 * store32_fast). */
typedef struct narrow_k {
    int cap, emin, step, sh;
    float down;
    int rebase, top, zero;
} narrow_k_t;

#define NARROW_E4M3 {0x43e00000, (127 - 6) << 23, (23 - 3) << 23, 23 - 3,      \
                     0x1p-120f, (1 << 19) - (120 << 23), 0x7e, -(120 << 3)}
#define NARROW_E5M2 {0x47600000, (127 - 14) << 23, (23 - 2) << 23, 23 - 2,    \
                     0x1p-112f, (1 << 20) - (112 << 23), 0x7b, -(112 << 2)}

/* How far, in float32 ulps, x * (1 / scale) may lie from x / scale: each
 * of the two roundings moves it by at most half an ulp of its result, so
 * the product is within 2 ulps of the exact quotient and 3 of its rounding
 * (4 leaves room for a binade edge). */
#define TIE_ULPS 4

/* The reciprocal the fast path multiplies by, or 0 when it may not: a
 * scale so small that 1 / scale overflows (a subnormal scale) takes the
 * division throughout. */
static inline float fast_rcp(float scale)
{
    const float r = 1.0f / scale;
    return r <= 0x1p126f ? r : 0.0f;
}

static INLINE void scalar_tail(uint8_t *d, const unsigned char *s, size_t n,
                               float scale, int fmt, int src)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        uint16_t h;
        if (src == RS__QUANT_SOURCE_F32)
            memcpy(&v, s + 4 * i, sizeof(v));
        else {
            memcpy(&h, s + 2 * i, sizeof(h));
            v = src == RS__QUANT_SOURCE_BF16 ? rs__f32_from((uint32_t)h << 16)
                                     : rs__f16_to_f32(h);
        }
        d[i] = rs__quant_enc(fmt, v / scale);
    }
}

/* ---------------------------------------------------------------- AVX2 */

/* 8 non-negative quotients to 8 codes without sign, one per 32-bit lane. */
TGT_AVX2 static INLINE __m256i narrow8_abs(__m256i a, narrow_k_t k)
{
    a = _mm256_min_epu32(a, _mm256_set1_epi32(k.cap));
    __m256i e = _mm256_and_si256(a, _mm256_set1_epi32(0x7f800000));
    e = _mm256_max_epu32(e, _mm256_set1_epi32(k.emin));
    const __m256i magic = _mm256_add_epi32(e, _mm256_set1_epi32(k.step));
    const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(a),
                                     _mm256_castsi256_ps(magic));
    const __m256 r = _mm256_sub_ps(sum, _mm256_castsi256_ps(magic));
    const __m256 rebased = _mm256_mul_ps(r, _mm256_set1_ps(k.down));
    return _mm256_srli_epi32(_mm256_castps_si256(rebased), k.sh);
}

/* 8 quotients to 8 codes, one per 32-bit lane. */
TGT_AVX2 static INLINE __m256i narrow8(__m256 q, narrow_k_t k)
{
    const __m256i x = _mm256_castps_si256(q);
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24),
                                          _mm256_set1_epi32(0x80));
    return _mm256_or_si256(narrow8_abs(a, k), sign);
}

/* 32 codes (one per 32-bit lane of r0..r3, in order) into 32 bytes. */
TGT_AVX2 static INLINE void store32(uint8_t *d, __m256i r0, __m256i r1,
                                    __m256i r2, __m256i r3)
{
    const __m256i p01 = _mm256_packus_epi32(r0, r1);
    const __m256i p23 = _mm256_packus_epi32(r2, r3);
    const __m256i b = _mm256_packus_epi16(p01, p23);
    const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)(void *)d,
                        _mm256_permutevar8x32_epi32(b, fix));
}

TGT_AVX2 static INLINE __m256 ld8_f32(const unsigned char *s)
{
    return _mm256_loadu_ps((const float *)(const void *)s);
}

TGT_AVX2 static INLINE __m256 ld8_f16(const unsigned char *s)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)s));
}

/* The fast path. p = |x| * (1 / scale) (float32 bits, not negative); in
 * the normal range its code is p's bits rounded half up to M mantissa
 * bits and rebased, u >> (23 - M) with u = p + half - ((127 - bias) << 23)
 * (+ TIE_ULPS, see below). p may differ from the correctly rounded
 * quotient q by up to 3 in their bits, so a lane is certain only when no
 * rounding midpoint's bits lie within TIE_ULPS - 1 of p's: a midpoint has
 * exactly half the step in the bits below the kept mantissa (also the one
 * under a power of two, which lies in the binade below), so with TIE_ULPS
 * added that is one mask and one unsigned compare of u's low bits,
 * uncertain below 2 * TIE_ULPS. Exact midpoints are uncertain too (the
 * half-up rounding is not the rule's to even). Codes are monotone in the
 * quotient, so a certain lane's code is q's. Lanes below the smallest
 * normal (subnormal codes) are uncertain, except zeros and products too
 * small to matter; see store32_fast. */
TGT_AVX2 static INLINE __m256i fast_u(__m256 x, __m256 rcp, narrow_k_t k)
{
    const __m256i a = _mm256_and_si256(
        _mm256_castps_si256(_mm256_mul_ps(x, rcp)), _mm256_set1_epi32(0x7fffffff));
    return _mm256_add_epi32(a, _mm256_set1_epi32(k.rebase + TIE_ULPS));
}

/* 32 codes from the fast path's u and the sources' signs, into 32 bytes.
 * u >> (23 - M), taken arithmetically and packed to 16 bits with signed
 * saturation, is the code for a normal quotient (at least 1 << M), and
 * exactly k.zero = -((127 - bias) << M) for a zero or for a product below
 * 2^(sh - 1 - 149) (an f32 subnormal, whose quotient's code is 0 too);
 * in between the lane is in the FP8 subnormal range and uncertain. The
 * least of code - k.zero - 1 as unsigned 16 bits is kept in *zmin: below
 * (1 << M) - k.zero - 1 where a lane is uncertain. The unsigned pack to
 * bytes makes the negative codes 0 and the cap holds large ones at fmax's
 * code; the signed packs of the sources keep each one's sign in the top
 * bit of its byte, in the same lane order. The packs leave 4 values of
 * each vector in turn in each 128-bit lane, so x[j] holding elements 4j to
 * 4j + 3 and 16 + 4j to 19 + 4j (`in_order`) stores them in order; vectors
 * of 8 consecutive elements take a permute. */
TGT_AVX2 static INLINE void store32_fast(uint8_t *d, const __m256i *u,
                                         const __m256 *x, narrow_k_t k,
                                         __m256i *zmin, int in_order)
{
    const __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(u[0], k.sh),
                                           _mm256_srai_epi32(u[1], k.sh));
    const __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(u[2], k.sh),
                                           _mm256_srai_epi32(u[3], k.sh));
    const __m256i lift = _mm256_set1_epi16((short)(-k.zero - 1));
    *zmin = _mm256_min_epu16(*zmin, _mm256_min_epu16(
                                        _mm256_add_epi16(p01, lift),
                                        _mm256_add_epi16(p23, lift)));
    const __m256i c = _mm256_min_epu8(_mm256_packus_epi16(p01, p23),
                                      _mm256_set1_epi8((char)k.top));
    const __m256i s01 = _mm256_packs_epi32(_mm256_castps_si256(x[0]),
                                           _mm256_castps_si256(x[1]));
    const __m256i s23 = _mm256_packs_epi32(_mm256_castps_si256(x[2]),
                                           _mm256_castps_si256(x[3]));
    const __m256i sg = _mm256_and_si256(_mm256_packs_epi16(s01, s23),
                                        _mm256_set1_epi8((char)0x80));
    const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i r = _mm256_or_si256(c, sg);
    _mm256_storeu_si256((__m256i *)(void *)d,
                        in_order ? r : _mm256_permutevar8x32_epi32(r, fix));
}

/* Whether a lane of a segment was uncertain, from the least of u's low
 * bits (tmin: see fast_u) and the least lifted 16-bit code (zmin: see
 * store32_fast) over its lanes. */
TGT_AVX2 static INLINE int unsure_acc(__m256i tmin, __m256i zmin, narrow_k_t k)
{
    const __m256i tie = _mm256_set1_epi32(2 * TIE_ULPS - 1);
    const __m256i edge = _mm256_set1_epi16((short)((1 << (23 - k.sh)) - k.zero - 2));
    const __m256i bad = _mm256_or_si256(
        _mm256_cmpeq_epi32(_mm256_min_epu32(tmin, tie), tmin),
        _mm256_cmpeq_epi16(_mm256_min_epu16(zmin, edge), zmin));
    return _mm256_movemask_epi8(bad) != 0;
}

/* The fast path over a segment's whole steps of 32, the lanes' certainty
 * gathered over the segment and checked once at its end; 1 when a lane
 * was uncertain. `exact` keeps the least of u's low 23 - M bits (an and
 * and a 32-bit min per 8 lanes); otherwise the least of u's low 16 bits,
 * kept by a 16-bit min over u itself (one operation per 8 lanes; the
 * high halves' minima are cleared at the end): a lane whose low 23 - M
 * bits are below 8 has its low 16 below 8 too, so this finds every
 * uncertain lane, and some certain ones (odds about 8 in 2^16 a lane).
 * Checking each step instead cost more than its codes. */
#define FAST_PASS(NAME, LD4, ES, IN_ORDER)                                    \
    TGT_AVX2 static INLINE int NAME(uint8_t *d, const unsigned char *s,       \
                                    size_t n, __m256 rcp, narrow_k_t k,       \
                                    const unsigned char *ahead, int exact)    \
    {                                                                         \
        const __m256i low = _mm256_set1_epi32((1 << k.sh) - 1);               \
        __m256i tmin = _mm256_set1_epi32(-1), zmin = tmin;                    \
        for (size_t i = 0; i + 32 <= n; i += 32) {                            \
            const unsigned char *p = s + (ES) * i;                            \
            for (size_t l = 0; l < (size_t)32 * (ES); l += 64)                \
                _mm_prefetch((const char *)(ahead + (ES) * i + l),            \
                             _MM_HINT_T0);                                    \
            __m256 x[4];                                                      \
            LD4(x, p);                                                        \
            __m256i u[4];                                                     \
            for (int j = 0; j < 4; j++) {                                     \
                u[j] = fast_u(x[j], rcp, k);                                  \
                tmin = exact ? _mm256_min_epu32(tmin, _mm256_and_si256(u[j], low)) \
                             : _mm256_min_epu16(tmin, u[j]);                  \
            }                                                                 \
            store32_fast(d + i, u, x, k, &zmin, IN_ORDER);                    \
        }                                                                     \
        if (!exact)                                                           \
            tmin = _mm256_and_si256(tmin, _mm256_set1_epi32(0xffff));          \
        return unsure_acc(tmin, zmin, k);                                     \
    }

/* A segment by the fast path where it is certain: first with the 16-bit
 * check, then, if that found a lane (one segment of 128 in about 60 for
 * values spread like trained weights), again with the exact one; an
 * uncertain lane there (one segment in about 1,000) has the segment
 * encoded by the division. Each pass stores over the one before. */
#define ENC8_NATURAL(NAME, FAST, LD, ES, SRC)                                 \
    TGT_AVX2 static INLINE void NAME(uint8_t *d, const unsigned char *s,      \
                                     size_t n, float scale, narrow_k_t k,     \
                                     int fmt, const unsigned char *ahead)     \
    {                                                                         \
        const float inv = fast_rcp(scale);                                    \
        const size_t whole = n / 32 * 32;                                     \
        const __m256 rcp = _mm256_set1_ps(inv);                               \
        if (inv == 0.0f || (FAST(d, s, n, rcp, k, ahead, 0) &&                \
                            FAST(d, s, n, rcp, k, s, 1))) {                   \
            const __m256 sc = _mm256_set1_ps(scale);                          \
            for (size_t i = 0; i < whole; i += 32) {                          \
                const unsigned char *p = s + (ES) * i;                        \
                store32(d + i,                                                \
                        narrow8(_mm256_div_ps(LD(p), sc), k),                 \
                        narrow8(_mm256_div_ps(LD(p + (size_t)8 * (ES)), sc), k), \
                        narrow8(_mm256_div_ps(LD(p + (size_t)16 * (ES)), sc), k), \
                        narrow8(_mm256_div_ps(LD(p + (size_t)24 * (ES)), sc), k)); \
            }                                                                 \
        }                                                                     \
        scalar_tail(d + whole, s + (ES) * whole, n - whole, scale, fmt, SRC); \
    }

/* A step's 32 values as four vectors: f32 in the order that lets the
 * packs store them in order (see store32_fast; on cores that split
 * 256-bit registers, filling each half from its own 16 bytes costs no
 * more than one load, and it saves a lane-crossing permute), f16 as 8
 * consecutive values a vector. */
#define LD4_F32(x, p)                                                         \
    for (size_t j = 0; j < 4; j++)                                            \
        (x)[j] = _mm256_loadu2_m128(                                          \
            (const float *)(const void *)((p) + 64 + (size_t)16 * j),         \
            (const float *)(const void *)((p) + (size_t)16 * j))
#define LD4_F16(x, p)                                                         \
    for (size_t j = 0; j < 4; j++)                                            \
        (x)[j] = ld8_f16((p) + (size_t)16 * j)

FAST_PASS(fast_f32, LD4_F32, 4, 1)
FAST_PASS(fast_f16, LD4_F16, 2, 0)
ENC8_NATURAL(encv8_f32, fast_f32, ld8_f32, 4, RS__QUANT_SOURCE_F32)
ENC8_NATURAL(encv8_f16, fast_f16, ld8_f16, 2, RS__QUANT_SOURCE_F16)

/* 16 bf16 to 16 codes as 16-bit lanes in order: magnitudes divided (the
 * quotient's sign is the source's: the scale is positive), the sign put
 * back on the codes. The zero interleave gives elements 0-3 | 8-11 and
 * 4-7 | 12-15, which the pack puts back in order. */
TGT_AVX2 static INLINE __m256i bf16x16(const unsigned char *p, __m256 sc,
                                       __m256 rcp, narrow_k_t k)
{
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    const __m256i m = _mm256_and_si256(v, _mm256_set1_epi16(0x7fff));
    const __m256i z = _mm256_setzero_si256();
    const __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, m));
    const __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, m));
    /* fast8_abs on both halves, compared and capped once packed to 16
     * bits (the unsigned pack keeps every code and turns a negative
     * upper rounding into 0, which never equals a lower one) */
    const __m256i a_lo = _mm256_castps_si256(_mm256_mul_ps(lo, rcp));
    const __m256i a_hi = _mm256_castps_si256(_mm256_mul_ps(hi, rcp));
    const __m256i emin = _mm256_set1_epi32(k.emin);
    const __m256i kd = _mm256_set1_epi32(k.rebase - TIE_ULPS);
    const __m256i ku = _mm256_set1_epi32(k.rebase + TIE_ULPS);
    const __m256i up = _mm256_packus_epi32(
        _mm256_srai_epi32(_mm256_add_epi32(a_lo, ku), k.sh),
        _mm256_srai_epi32(_mm256_add_epi32(a_hi, ku), k.sh));
    const __m256i d_lo = _mm256_add_epi32(_mm256_max_epi32(a_lo, emin), kd);
    const __m256i d_hi = _mm256_add_epi32(_mm256_max_epi32(a_hi, emin), kd);
    const __m256i dn = _mm256_packus_epi32(_mm256_srai_epi32(d_lo, k.sh),
                                           _mm256_srai_epi32(d_hi, k.sh));
    __m256i c = _mm256_min_epu16(up, _mm256_set1_epi16((short)k.top));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(up, dn)) != -1)
        c = _mm256_packus_epi32(
            narrow8_abs(_mm256_castps_si256(_mm256_div_ps(lo, sc)), k),
            narrow8_abs(_mm256_castps_si256(_mm256_div_ps(hi, sc)), k));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi16(v, 8),
                                          _mm256_set1_epi16(0x80));
    return _mm256_or_si256(c, sign);
}

/* No reciprocal (a subnormal scale): a negative NaN, which every product
 * then is, so every step is uncertain and divides. */
static inline float rcp_or_nan(float inv)
{
    const uint32_t nan_bits = 0xffc00000u;
    float n;
    memcpy(&n, &nan_bits, sizeof(n));
    return inv != 0.0f ? inv : n;
}

TGT_AVX2 static INLINE void encv8_bf16(uint8_t *d, const unsigned char *s,
                                      size_t n, float scale, narrow_k_t k,
                                      int fmt, const void *ahead)
{
    (void)ahead; /* its rows are quant_bf16_x86.c's */
    const __m256 sc = _mm256_set1_ps(scale);
    const __m256 rcp = _mm256_set1_ps(rcp_or_nan(fast_rcp(scale)));
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = bf16x16(s + 2 * i, sc, rcp, k);
        const __m256i b = bf16x16(s + 2 * i + 32, sc, rcp, k);
        const __m256i r = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b),
                                                   0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(d + i), r);
    }
    scalar_tail(d + i, s + 2 * i, n - i, scale, fmt, RS__QUANT_SOURCE_BF16);
}

TGT_AVX2 static uint32_t hmax8_epu32(__m256i m)
{
    __m128i v = _mm_max_epu32(_mm256_castsi256_si128(m),
                              _mm256_extracti128_si256(m, 1));
    v = _mm_max_epu32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_max_epu32(v, _mm_shuffle_epi32(v, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(v);
}

TGT_AVX2 static INLINE uint32_t amax8_f32(const void *src, size_t n)
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
    const uint32_t m = hmax8_epu32(_mm256_max_epu32(m0, m1));
    const uint32_t t = rs__quant_ops_portable.amax[RS__QUANT_SOURCE_F32](s + 4 * i, n - i);
    return t > m ? t : m;
}

TGT_AVX2 static INLINE uint32_t amax8_16(const void *src, size_t n)
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
    /* the 16-bit maxima, widened to 32 bits and reduced */
    const __m256i m = _mm256_max_epu16(m0, m1);
    const __m256i lo = _mm256_and_si256(m, _mm256_set1_epi32(0xffff));
    const uint32_t r = hmax8_epu32(_mm256_max_epu32(lo, _mm256_srli_epi32(m, 16)));
    const uint32_t t = rs__quant_ops_portable.amax[RS__QUANT_SOURCE_BF16](s + 2 * i, n - i);
    return t > r ? t : r;
}

/* ------------------------------------------------------------- AVX-512 */

/* The AVX-512 level encodes with the AVX2 encoders above (their 256-bit
 * forms run on every AVX-512 machine): only they are tested bit for bit
 * on hardware at hand. The amax below is the 512-bit one measured on an
 * AVX-512 machine. */

TGT_AVX512 static INLINE uint32_t amax16_f32(const void *src, size_t n)
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

TGT_AVX512 static INLINE uint32_t amax16_16(const void *src, size_t n)
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

/* ------------------------------------------------------ the ops tables */

/* Segment and row entry points of the AVX2 encoders (v8), per source and
 * format; both vector levels use them. */
#define TGT_v8 TGT_AVX2
#define SEGMENT(LV, SRC)                                                      \
    TGT_##LV static void LV##_##SRC##_e4m3(uint8_t *d, const void *s,         \
                                           size_t n, float scale)             \
    {                                                                         \
        const narrow_k_t k = NARROW_E4M3;                                     \
        enc##LV##_##SRC(d, s, n, scale, k, RS__QFMT_E4M3, s);                 \
    }                                                                         \
    TGT_##LV static void LV##_##SRC##_e5m2(uint8_t *d, const void *s,         \
                                           size_t n, float scale)             \
    {                                                                         \
        const narrow_k_t k = NARROW_E5M2;                                     \
        enc##LV##_##SRC(d, s, n, scale, k, RS__QFMT_E5M2, s);                 \
    }
/* Rows: each segment prefetches its part of the row read next. */
#define ROW(LV, SRC, ES, FMT, NAME)                                           \
    TGT_##LV static void NAME(uint8_t *d, const void *src, size_t width,      \
                              size_t seg, const float *scale,                 \
                              const rs__quant_tab_t *tab, const void *ahead)  \
    {                                                                         \
        const unsigned char *s = src, *a = ahead;                             \
        const narrow_k_t k = NARROW_##FMT;                                    \
        (void)tab;                                                            \
        for (size_t j = 0, c = 0; c < width; j++, c += seg) {                 \
            const size_t n = width - c < seg ? width - c : seg;               \
            enc##LV##_##SRC(d + c, s + (ES) * c, n, scale[j], k,              \
                            RS__QFMT_##FMT, a + (ES) * c);                    \
        }                                                                     \
    }
#define ENTRIES(LV, SRC, ES)                                                  \
    SEGMENT(LV, SRC)                                                          \
    ROW(LV, SRC, ES, E4M3, LV##_##SRC##_e4m3_row)                             \
    ROW(LV, SRC, ES, E5M2, LV##_##SRC##_e5m2_row)

ENTRIES(v8, f32, 4)
SEGMENT(v8, bf16) /* bf16 rows: the table encoders' */
ENTRIES(v8, f16, 2)

TGT_AVX2 static uint32_t amax8_f32_fn(const void *s, size_t n) { return amax8_f32(s, n); }
TGT_AVX2 static uint32_t amax8_16_fn(const void *s, size_t n) { return amax8_16(s, n); }
TGT_AVX512 static uint32_t amax16_f32_fn(const void *s, size_t n) { return amax16_f32(s, n); }
TGT_AVX512 static uint32_t amax16_16_fn(const void *s, size_t n) { return amax16_16(s, n); }
RS__QUANT_AMAX_ROW(TGT_AVX2, amax8_f32_row, 4, amax8_f32)
RS__QUANT_AMAX_ROW(TGT_AVX2, amax8_16_row, 2, amax8_16)
RS__QUANT_AMAX_ROW(TGT_AVX512, amax16_f32_row, 4, amax16_f32)
RS__QUANT_AMAX_ROW(TGT_AVX512, amax16_16_row, 2, amax16_16)

const rs__quant_encode_fn rs__quant_bf16_div_avx2[RS__QFMT_COUNT] = {
    v8_bf16_e4m3, v8_bf16_e5m2};

/* bf16 sources encode by their tables (quant_bf16_x86.c), f32 and f16 by
 * the fast path above. */
const rs__quant_ops_t rs__quant_ops_avx2 = {
    .amax = {amax8_f32_fn, amax8_16_fn, amax8_16_fn},
    .enc = {{v8_f32_e4m3, v8_f32_e5m2},
            {rs__quant_bf16_tab_e4m3, rs__quant_bf16_tab_e5m2},
            {v8_f16_e4m3, v8_f16_e5m2}},
    .amax_row = {amax8_f32_row, amax8_16_row, amax8_16_row},
    .enc_row = {{v8_f32_e4m3_row, v8_f32_e5m2_row},
                {rs__quant_bf16_tab_e4m3_row, rs__quant_bf16_tab_e5m2_row},
                {v8_f16_e4m3_row, v8_f16_e5m2_row}},
    .prep = {{NULL, NULL},
             {rs__quant_bf16_prep_e4m3, rs__quant_bf16_prep_e5m2},
             {NULL, NULL}},
};

const rs__quant_ops_t rs__quant_ops_avx512 = {
    .amax = {amax16_f32_fn, amax16_16_fn, amax16_16_fn},
    .enc = {{v8_f32_e4m3, v8_f32_e5m2},
            {rs__quant_bf16_tab_e4m3, rs__quant_bf16_tab_e5m2},
            {v8_f16_e4m3, v8_f16_e5m2}},
    .amax_row = {amax16_f32_row, amax16_16_row, amax16_16_row},
    .enc_row = {{v8_f32_e4m3_row, v8_f32_e5m2_row},
                {rs__quant_bf16_tab_e4m3_row, rs__quant_bf16_tab_e5m2_row},
                {v8_f16_e4m3_row, v8_f16_e5m2_row}},
    .prep = {{NULL, NULL},
             {rs__quant_bf16_prep_e4m3, rs__quant_bf16_prep_e5m2},
             {NULL, NULL}},
};

#endif
