/* Internal view of the block quantization kernels: the loops one
 * instruction-set level provides (the largest magnitude of a run, and the
 * encoding of a run under a scale, alone and over a row of blocks), as one
 * ops table per level, and the
 * scalar encoding every level must match bit for bit. quant_box.c walks
 * blocks with them. */
#ifndef RS_CORE_QUANT_IMPL_H
#define RS_CORE_QUANT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/convert_scalar.h"
#include "core/simd.h"

/* Source dtypes and FP8 formats, as table indices. */
enum { RS__QUANT_SOURCE_F32, RS__QUANT_SOURCE_BF16, RS__QUANT_SOURCE_F16, RS__QUANT_SOURCE_COUNT };
enum { RS__QFMT_E4M3, RS__QFMT_E5M2, RS__QFMT_COUNT };

/* The largest |x| over n elements, as the source format's bits with the
 * sign cleared. Magnitude bits order like the magnitudes they encode, so an
 * integer max is exact; NaN and infinities have the largest bits of all, so
 * the result is at or above the format's infinity when any element is not
 * finite. 0 for n == 0. Any alignment. */
typedef uint32_t (*rs__quant_amax_fn)(const void *src, size_t n);

/* dst[i] = rs__quant_enc(format, (float)src[i] / scale), for finite
 * sources and a finite, nonzero scale. Any alignment. */
typedef void (*rs__quant_encode_fn)(uint8_t *dst, const void *src, size_t n,
                            float scale);

/* A row of `width` elements cut into segments of `seg` (the last may be
 * shorter), one block each: bits[k] = max(bits[k], the amax bits of
 * segment k). */
typedef void (*rs__quant_amax_row_fn)(const void *src, size_t width, size_t seg,
                                 uint32_t *bits);

/* What an encoder prepares once per block from its scale, for every row
 * of the block (the bf16 table encoder's, quant_bf16_x86.c): the code of
 * a normal bf16 x = 2^(ex - 127) (1 + f / 128) is
 * (ex << M) + a[f >> 3] + (f & 7 > b[f >> 3]) + k, the last two terms
 * folded as that encoder computes them; lanes whose code falls near or
 * below the smallest normal's take the division. ok is 0 where no table
 * applies (a subnormal or tiny scale, an exponent out of range): the
 * division throughout. */
typedef struct rs__quant_tab {
    uint8_t a[16];
    int8_t b[16];
    int16_t k;
    int ok;
} rs__quant_tab_t;

/* Fills *tab for a block under `scale`. */
typedef void (*rs__quant_prep_fn)(float scale, rs__quant_tab_t *tab);

/* The same row encoded, segment k under scale[k] (and tab[k], prepared
 * by the level's prep for the source and format; NULL where it has
 * none). `ahead` is a row as wide that the caller reads next (the next
 * chunk's, for its scan): an encoder may prefetch it as it goes, so
 * that its misses overlap the encoding rather than follow it. */
typedef void (*rs__quant_encode_row_fn)(uint8_t *dst, const void *src, size_t width,
                                size_t seg, const float *scale,
                                const rs__quant_tab_t *tab, const void *ahead);

typedef struct rs__quant_ops {
    rs__quant_amax_fn amax[RS__QUANT_SOURCE_COUNT];
    rs__quant_encode_fn enc[RS__QUANT_SOURCE_COUNT][RS__QFMT_COUNT];
    rs__quant_amax_row_fn amax_row[RS__QUANT_SOURCE_COUNT];
    rs__quant_encode_row_fn enc_row[RS__QUANT_SOURCE_COUNT][RS__QFMT_COUNT];
    rs__quant_prep_fn prep[RS__QUANT_SOURCE_COUNT][RS__QFMT_COUNT]; /* or NULL */
} rs__quant_ops_t;

/* Row loops over a level's segment kernels: AMAX_FN(src, n) and
 * ENC_FN(dst, src, n, scale), elements ES bytes. Defined in each level's
 * file, so that the segment kernels inline into them. */
#define RS__QUANT_AMAX_ROW(TGT, NAME, ES, AMAX_FN)                            \
    TGT static void NAME(const void *src, size_t width, size_t seg,          \
                         uint32_t *bits)                                      \
    {                                                                         \
        const unsigned char *s = src;                                         \
        for (size_t k = 0, c = 0; c < width; k++, c += seg) {                 \
            const size_t n = width - c < seg ? width - c : seg;               \
            const uint32_t v = AMAX_FN(s + (ES) * c, n);                      \
            bits[k] = v > bits[k] ? v : bits[k];                              \
        }                                                                     \
    }

#define RS__QUANT_ENC_ROW(TGT, NAME, ES, ENC_FN)                              \
    TGT static void NAME(uint8_t *dst, const void *src, size_t width,        \
                         size_t seg, const float *scale,                      \
                         const rs__quant_tab_t *tab, const void *ahead)       \
    {                                                                         \
        const unsigned char *s = src;                                         \
        (void)tab;                                                            \
        (void)ahead;                                                          \
        for (size_t k = 0, c = 0; c < width; k++, c += seg) {                 \
            const size_t n = width - c < seg ? width - c : seg;               \
            ENC_FN(dst + c, s + (ES) * c, n, scale[k]);                       \
        }                                                                     \
    }

/* The kernels for `level`: the best this build has at or below it. */
const rs__quant_ops_t *rs__quant_ops(rs__simd_t level);

extern const rs__quant_ops_t rs__quant_ops_portable;
#if defined(__x86_64__) && defined(__GNUC__)
#define RS__QUANT_X86 1
extern const rs__quant_ops_t rs__quant_ops_avx2; /* needs F16C too */
extern const rs__quant_ops_t rs__quant_ops_avx512;
/* The AVX2 bf16 encoders by the division (quant_x86.c), per format: the
 * table encoders' fallback and the source of their tables. */
extern const rs__quant_encode_fn rs__quant_bf16_div_avx2[RS__QFMT_COUNT];
/* The AVX2 bf16 table encoders (quant_bf16_x86.c): a segment under a
 * scale, a row under prepared tables, and the preparation, per format. */
void rs__quant_bf16_tab_e4m3(uint8_t *dst, const void *src, size_t n,
                             float scale);
void rs__quant_bf16_tab_e5m2(uint8_t *dst, const void *src, size_t n,
                             float scale);
void rs__quant_bf16_tab_e4m3_row(uint8_t *dst, const void *src, size_t width,
                                 size_t seg, const float *scale,
                                 const rs__quant_tab_t *tab, const void *ahead);
void rs__quant_bf16_tab_e5m2_row(uint8_t *dst, const void *src, size_t width,
                                 size_t seg, const float *scale,
                                 const rs__quant_tab_t *tab, const void *ahead);
void rs__quant_bf16_prep_e4m3(float scale, rs__quant_tab_t *tab);
void rs__quant_bf16_prep_e5m2(float scale, rs__quant_tab_t *tab);
#else
#define RS__QUANT_X86 0
#endif

/* Magnitude bits of each source's infinity: amax bits at or above it mean
 * a NaN or an infinity in the row. */
static const uint32_t rs__quant_source_inf[RS__QUANT_SOURCE_COUNT] = {0x7f800000u, 0x7f80u,
                                                      0x7c00u};

/* Largest finite value of each format and its magnitude code. */
static const float rs__quant_format_max[RS__QFMT_COUNT] = {448.0f, 57344.0f};
static const uint32_t rs__quant_format_top[RS__QFMT_COUNT] = {0x7eu, 0x7bu};

/* The value of amax bits of a source dtype (exact). */
static inline float rs__quant_amax_value(int src, uint32_t bits)
{
    if (src == RS__QUANT_SOURCE_F32)
        return rs__f32_from(bits);
    if (src == RS__QUANT_SOURCE_BF16)
        return rs__f32_from(bits << 16);
    return rs__f16_to_f32((uint16_t)bits);
}

/* A finite q rounded to the format to nearest even, saturating at +-fmax
 * (e5m2 too: rs__narrow32 would carry an overflow into its infinity), the
 * sign of zero kept. */
static inline uint8_t rs__quant_enc(int fmt, float q)
{
    const uint32_t r = fmt == RS__QFMT_E4M3 ? rs__narrow32(q, RS__E4M3)
                                            : rs__narrow32(q, RS__E5M2);
    const uint32_t mag = r & 0x7fu, top = rs__quant_format_top[fmt];
    return (uint8_t)((r & 0x80u) | (mag < top ? mag : top));
}

#endif
