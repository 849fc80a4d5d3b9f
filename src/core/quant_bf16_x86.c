/* The AVX2 bf16 encoders: a per-block table instead of a division or a
 * multiplication per value.
 *
 * Why a table is exact. For a normal bf16 x = 2^(ex - 127) (1 + f / 128)
 * under a block's scale, the rule's code is the FP8 rounding of the
 * float32 quotient x / scale. Multiplying x by a power of two multiplies
 * the quotient by it exactly (both stay normal float32), and rounding to
 * an FP8 format with an unbounded exponent commutes with that, so the
 * code is (ex << M) plus a term that depends on the mantissa f alone:
 * c[f] - (xr << M), c[f] being the code of the reference value with
 * exponent xr and mantissa f. That holds while the code is a normal one:
 * at or above the smallest normal's code (1 << M) the bounded format
 * rounds the same (a value rounding up to the smallest normal does so in
 * both), and past the largest code the rule saturates, which the cap
 * does. Below it (FP8 subnormals and values rounding to zero) the lane is
 * uncertain and the segment takes the division (quant_x86.c); so does a
 * bf16 subnormal source, whose mantissa has no implicit one.
 *
 * Why 32 bytes of table. c[f] is nondecreasing in f and climbs by one at
 * each rounding midpoint; between two midpoints the mantissa moves by
 * more than 8 (the quotient spans one binade over the 128 mantissas, split
 * into at most 16 codes' spans over its lower half and 8 over its upper),
 * so within a group of 8 mantissas (f >> 3 fixed) it climbs at most once:
 * c[f] = a[f >> 3] + (f & 7 >= b[f >> 3] + 1 ? 1 : 0). Two byte shuffles
 * look a and b up for 32 lanes at once. The preparation checks that shape
 * and falls back to the division where it does not hold.
 *
 * Per 16 values: two shifts, two shuffles, and ten one-cycle integer
 * operations, all in 16-bit lanes; codes saturate to bytes in one pack and
 * are capped with one byte min. The signs are the pack of the sources
 * themselves with signed saturation (a negative bf16 saturates to -128,
 * whose top bit is the sign). */
#include "core/quant_impl.h"

#if RS__QUANT_X86
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx2,f16c")))
#define INLINE inline __attribute__((always_inline))

static const int mant_bits[RS__QFMT_COUNT] = {3, 2};

/* The table of one scale (see rs__quant_tab_t). */
static void prep(int fmt, float scale, rs__quant_tab_t *t)
{
    uint32_t sb;
    memcpy(&sb, &scale, sizeof(sb));
    const int es = (int)(sb >> 23 & 0xffu), M = mant_bits[fmt], one = 1 << M;
    memset(t, 0, sizeof(*t));
    /* the reference exponent puts the quotients in (1, 4), well inside
     * either format's normal range; a subnormal or non-finite scale, or
     * one too large for it, takes the division */
    if (es == 0 || es + 1 > 254)
        return;
    const int xr = es + 1;
    uint16_t xs[128];
    uint8_t c[128];
    for (int f = 0; f < 128; f++)
        xs[f] = (uint16_t)(xr << 7 | f);
    rs__quant_bf16_div_avx2[fmt](c, xs, 128, scale);
    /* c is nondecreasing (the division and the rounding are monotone), so
     * a group that climbs at most once over its 8 is a run of a then a
     * run of a + 1, b + 1 long */
    for (size_t h = 0; h < 16; h++) {
        const uint8_t *g = c + 8 * h;
        const int base = g[0];
        if (g[7] - base > 1)
            return; /* not the shape above: the division */
        int b = 0;
        for (size_t j = 0; j < 8; j++)
            b += g[j] == base;
        t->a[h] = (uint8_t)base;
        t->b[h] = (int8_t)(b - 1);
    }
    /* The 16-bit lanes index the shuffles with their low byte; the high
     * byte's index is 0, so it holds a[0] less the compare's constant
     * there (b[0] < 0, from the source's zero high byte). k takes that and
     * the reference exponent out. */
    const int hi = t->a[0] + (t->b[0] < 0);
    t->k = (int16_t)(-(one * xr) - 256 * hi);
    /* Lanes are checked by their codes d: below -(M << M) the quotient
     * rounds to zero in the format (under 2^-10 for e4m3, 2^-17 for e5m2,
     * whose extended codes are -24 and -8), and the pack gives 0; from
     * there to 1 << M the code may be subnormal or nonzero, and the lane
     * takes the division. bf16 zeros and subnormals get codes in [d0, d0 +
     * (1 << M)], d0 = c[0] - (xr << M), which must lie below that range
     * (so zeros are certain): a scale so small that they do not divides. */
    if (c[0] - one * xr + one >= -M * one)
        return;
    t->ok = 1;
}

/* The constants of the encoding loop, made once a row. */
typedef struct tab_k {
    __m256i f_hi, f_lo, e_mask, top, sign, lift, edge;
} tab_k_t;

TGT static INLINE tab_k_t tab_consts(int fmt)
{
    tab_k_t c;
    c.f_hi = _mm256_set1_epi16(0x0f);
    c.f_lo = _mm256_set1_epi16(7);
    c.e_mask = _mm256_set1_epi16(mant_bits[fmt] == 3 ? 0x7f8 : 0x3fc);
    c.top = _mm256_set1_epi8((char)rs__quant_format_top[fmt]);
    c.sign = _mm256_set1_epi8((char)0x80);
    const int M = mant_bits[fmt];
    c.lift = _mm256_set1_epi16((short)(M << M));
    c.edge = _mm256_set1_epi16((short)((M + 1) << M));
    return c;
}

/* 16 bf16 to their codes d, unsigned and uncapped, in 16-bit lanes (below
 * 0 for zeros and values under the table's range); acc keeps the least
 * d + (M << M) as unsigned, below (M + 1) << M where a lane is uncertain
 * (see prep). */
TGT static INLINE __m256i codes16(__m256i v, __m256i ta, __m256i tb,
                                  __m256i k, int M, const tab_k_t *kc,
                                  __m256i *acc)
{
    const __m256i idx = _mm256_and_si256(_mm256_srli_epi16(v, 3), kc->f_hi);
    const __m256i a = _mm256_shuffle_epi8(ta, idx);
    const __m256i b = _mm256_shuffle_epi8(tb, idx);
    const __m256i step = _mm256_cmpgt_epi8(
        _mm256_and_si256(v, kc->f_lo), b);
    const __m256i t = _mm256_sub_epi8(a, step);
    const __m256i e = _mm256_and_si256(_mm256_srli_epi16(v, M == 3 ? 4 : 5),
                                       kc->e_mask);
    const __m256i d = _mm256_add_epi16(_mm256_add_epi16(e, t), k);
    *acc = _mm256_min_epu16(*acc, _mm256_add_epi16(d, kc->lift));
    return d;
}

/* n values under table t, 32 a step, the tail (< 32) by the division.
 * If a lane was uncertain *bad is nonzero after (its least d + (M << M)
 * below (M + 1) << M), a check the caller makes once a row. */
TGT static INLINE void enc_tab(uint8_t *d, const unsigned char *s, size_t n,
                               float scale, const rs__quant_tab_t *t, int fmt,
                               const unsigned char *ahead, const tab_k_t *kc,
                               __m256i *bad)
{
    const int M = mant_bits[fmt];
    const __m256i ta = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)t->a));
    const __m256i tb = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)t->b));
    const __m256i k = _mm256_set1_epi16(t->k);
    __m256i acc = _mm256_set1_epi16(-1);
    size_t i = 0;
#pragma GCC unroll 4
    for (; i + 32 <= n; i += 32) {
        const __m256i *p = (const __m256i *)(const void *)(s + 2 * i);
        _mm_prefetch((const char *)(ahead + 2 * i), _MM_HINT_T0);
        const __m256i v0 = _mm256_loadu_si256(p), v1 = _mm256_loadu_si256(p + 1);
        const __m256i c0 = codes16(v0, ta, tb, k, M, kc, &acc);
        const __m256i c1 = codes16(v1, ta, tb, k, M, kc, &acc);
        const __m256i c = _mm256_min_epu8(_mm256_packus_epi16(c0, c1), kc->top);
        const __m256i sg = _mm256_and_si256(_mm256_packs_epi16(v0, v1), kc->sign);
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            _mm256_permute4x64_epi64(_mm256_or_si256(c, sg),
                                                     0xd8));
    }
    if (i < n)
        rs__quant_bf16_div_avx2[fmt](d + i, s + 2 * i, n - i, scale);
    *bad = _mm256_or_si256(*bad, _mm256_subs_epu16(kc->edge, acc));
}

/* A row's segments under their tables (the division where a block has
 * none); then, if some lane was uncertain, each segment again, checked
 * alone, the uncertain ones by the division. */
TGT static INLINE void enc_row(uint8_t *d, const unsigned char *s,
                               size_t width, size_t seg, const float *scale,
                               const rs__quant_tab_t *tab, int fmt,
                               const unsigned char *ahead)
{
    const tab_k_t kc = tab_consts(fmt);
    __m256i bad = _mm256_setzero_si256();
    for (size_t k = 0, c = 0; c < width; k++, c += seg) {
        const size_t n = width - c < seg ? width - c : seg;
        if (tab[k].ok && n == 128) /* the usual block: a loop unrolled */
            enc_tab(d + c, s + 2 * c, 128, scale[k], &tab[k], fmt,
                    ahead + 2 * c, &kc, &bad);
        else if (tab[k].ok)
            enc_tab(d + c, s + 2 * c, n, scale[k], &tab[k], fmt, ahead + 2 * c,
                    &kc, &bad);
        else
            rs__quant_bf16_div_avx2[fmt](d + c, s + 2 * c, n, scale[k]);
    }
    if (_mm256_testz_si256(bad, bad))
        return;
    for (size_t k = 0, c = 0; c < width; k++, c += seg) {
        const size_t n = width - c < seg ? width - c : seg;
        __m256i one = _mm256_setzero_si256();
        if (!tab[k].ok)
            continue;
        enc_tab(d + c, s + 2 * c, n, scale[k], &tab[k], fmt, s + 2 * c, &kc,
                &one);
        if (!_mm256_testz_si256(one, one))
            rs__quant_bf16_div_avx2[fmt](d + c, s + 2 * c, n, scale[k]);
    }
}

/* Per format: a segment under a scale (its table made there), a row under
 * prepared tables, and the preparation. */
#define ENTRIES(FMT, NAME)                                                    \
    TGT void rs__quant_bf16_tab_##NAME(uint8_t *dst, const void *src,         \
                                       size_t n, float scale)                 \
    {                                                                         \
        rs__quant_tab_t t;                                                    \
        prep(RS__QFMT_##FMT, scale, &t);                                      \
        enc_row(dst, src, n, n, &scale, &t, RS__QFMT_##FMT, src);             \
    }                                                                         \
    TGT void rs__quant_bf16_tab_##NAME##_row(                                 \
        uint8_t *dst, const void *src, size_t width, size_t seg,              \
        const float *scale, const rs__quant_tab_t *tab, const void *ahead)    \
    {                                                                         \
        enc_row(dst, src, width, seg, scale, tab, RS__QFMT_##FMT, ahead);     \
    }                                                                         \
    void rs__quant_bf16_prep_##NAME(float scale, rs__quant_tab_t *tab)        \
    {                                                                         \
        prep(RS__QFMT_##FMT, scale, tab);                                     \
    }

ENTRIES(E4M3, e4m3)
ENTRIES(E5M2, e5m2)

#endif
