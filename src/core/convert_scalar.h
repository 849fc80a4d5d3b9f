/* Scalar element conversions between the float formats, written as
 * branch-free integer and float expressions so the loops in convert.c can be
 * vectorized by the compiler. Narrow formats are widened exactly through f32;
 * every narrowing rounds once, to nearest even. */
#ifndef RS_CORE_CONVERT_SCALAR_H
#define RS_CORE_CONVERT_SCALAR_H

#include <stdint.h>
#include <string.h>

static inline uint32_t rs__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float rs__f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint64_t rs__f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline double rs__f64_from(uint64_t u)
{
    double f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Branch-free selects: the float operations feeding them must run
 * unconditionally, or the compiler sinks them into a branch (they "could
 * trap") and the loop no longer vectorizes. */
static inline uint32_t rs__sel32(int c, uint32_t a, uint32_t b)
{
    const uint32_t m = 0u - (uint32_t)(c != 0);
    return (a & m) | (b & ~m);
}

static inline uint64_t rs__sel64(int c, uint64_t a, uint64_t b)
{
    const uint64_t m = 0u - (uint64_t)(c != 0);
    return (a & m) | (b & ~m);
}

/* A narrow format: E exponent bits, M mantissa bits, bias 2^(E-1)-1.
 * `fn` marks the e4m3fn style: no infinities, only all-ones is NaN, and
 * finite overflow saturates at the largest finite value. */

/* Exact widening of a narrow format's bits h to f32. Subnormals are the
 * integer mantissa times the smallest subnormal, both exact in f32. */
static inline float rs__widen(uint32_t h, int E, int M, int fn)
{
    const int B = (1 << (E - 1)) - 1;
    const uint32_t sign = (h >> (E + M) & 1u) << 31;
    const uint32_t a = h & ((1u << (E + M)) - 1);
    const uint32_t e = a >> M, m = a & ((1u << M) - 1);
    const float tiny = rs__f32_from((uint32_t)(127 + 1 - B - M) << 23);
    const uint32_t normal = (a << (23 - M)) + ((uint32_t)(127 - B) << 23);
    const uint32_t sub = rs__f32_bits((float)m * tiny);
    /* Infinity keeps a zero mantissa; any NaN comes out quiet. */
    const uint32_t special = 0x7f800000u | (m << (23 - M)) |
                             (m != 0 ? 0x400000u : 0);
    const uint32_t fn_nan = 0x7fc00000u;
    uint32_t r = rs__sel32(e == 0, sub, normal);
    if (fn)
        r = rs__sel32(a == (1u << (E + M)) - 1, fn_nan, r);
    else
        r = rs__sel32(e == (1u << E) - 1, special, r);
    return rs__f32_from(sign | r);
}

/* Rounds f32 to a narrow format. In the normal range the exponent is rebased
 * and the mantissa rounded with integer ops (a carry runs into the exponent,
 * up to infinity); below it, adding a power of two whose ulp is the target's
 * smallest subnormal lets the FPU round at the subnormal spacing. */
static inline uint32_t rs__narrow32(float f, int E, int M, int fn)
{
    const int B = (1 << (E - 1)) - 1, sh = 23 - M;
    const uint32_t x = rs__f32_bits(f);
    const uint32_t sign = (x >> 31) << (E + M);
    const uint32_t a = x & 0x7fffffffu;
    const uint32_t min_normal = (uint32_t)(127 + 1 - B) << 23;
    const uint32_t nr = (a - ((uint32_t)(127 - B) << 23) +
                         ((1u << (sh - 1)) - 1) + ((a >> sh) & 1)) >> sh;
    const float magic = rs__f32_from((uint32_t)(127 + 1 - B - M + 23) << 23);
    const uint32_t sr = rs__f32_bits(rs__f32_from(a) + magic) -
                        rs__f32_bits(magic);
    const uint32_t top = fn ? (1u << (E + M)) - 2 : ((1u << E) - 1) << M;
    uint32_t r = rs__sel32(a < min_normal, sr, nr);
    r = r < top ? r : top;
    const uint32_t nan = fn ? (1u << (E + M)) - 1
                            : top | (1u << (M - 1)) | ((a & 0x7fffffu) >> sh);
    r = rs__sel32(a > 0x7f800000u || (fn && a == 0x7f800000u), nan, r);
    return sign | r;
}

/* The same rounding from f64, so that f64 sources round once. */
static inline uint32_t rs__narrow64(double f, int E, int M, int fn)
{
    const int B = (1 << (E - 1)) - 1, sh = 52 - M;
    const uint64_t x = rs__f64_bits(f);
    const uint32_t sign = (uint32_t)(x >> 63) << (E + M);
    const uint64_t a = x & 0x7fffffffffffffffull;
    const uint64_t inf = 0x7ff0000000000000ull;
    const uint64_t min_normal = (uint64_t)(1023 + 1 - B) << 52;
    const uint64_t nr = (a - ((uint64_t)(1023 - B) << 52) +
                         ((1ull << (sh - 1)) - 1) + ((a >> sh) & 1)) >> sh;
    const double magic = rs__f64_from((uint64_t)(1023 + 1 - B - M + 52) << 52);
    const uint64_t sr = rs__f64_bits(rs__f64_from(a) + magic) -
                        rs__f64_bits(magic);
    const uint64_t top = fn ? (1u << (E + M)) - 2 : ((1u << E) - 1) << M;
    uint64_t r = rs__sel64(a < min_normal, sr, nr);
    r = r < top ? r : top;
    const uint64_t nan = fn ? (1u << (E + M)) - 1
                            : top | (1u << (M - 1)) |
                                  ((a & 0xfffffffffffffull) >> sh);
    r = rs__sel64(a > inf || (fn && a == inf), nan, r);
    return sign | (uint32_t)r;
}

/* bf16 shares f32's exponent, so both directions are shifts; only NaN needs
 * care (rounding must not carry a NaN payload into infinity). */
static inline float rs__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x400000u;
    return rs__f32_from(u);
}

/* Arithmetic shifts keep each result a sign-extended 16-bit value, which
 * lets the vectorizer narrow 32 -> 16 bits with one saturating pack. */
static inline uint16_t rs__f32_to_bf16(float f)
{
    const uint32_t x = rs__f32_bits(f);
    const int32_t r = (int32_t)(x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    const int32_t nan = ((int32_t)x >> 16) | 0x40;
    const int32_t m = -(int32_t)((x & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)(int16_t)((nan & m) | (r & ~m));
}

#define RS__F16 5, 10, 0
#define RS__E4M3 4, 3, 1
#define RS__E5M2 5, 2, 0
#define RS__BF16 8, 7, 0

static inline float rs__f16_to_f32(uint16_t h) { return rs__widen(h, RS__F16); }
static inline float rs__e4m3_to_f32(uint8_t h) { return rs__widen(h, RS__E4M3); }
static inline float rs__e5m2_to_f32(uint8_t h) { return rs__widen(h, RS__E5M2); }

static inline uint16_t rs__f32_to_f16(float f)
{
    return (uint16_t)rs__narrow32(f, RS__F16);
}

static inline uint8_t rs__f32_to_e4m3(float f)
{
    return (uint8_t)rs__narrow32(f, RS__E4M3);
}

static inline uint8_t rs__f32_to_e5m2(float f)
{
    return (uint8_t)rs__narrow32(f, RS__E5M2);
}

static inline uint16_t rs__f64_to_bf16(double f)
{
    return (uint16_t)rs__narrow64(f, RS__BF16);
}

static inline uint16_t rs__f64_to_f16(double f)
{
    return (uint16_t)rs__narrow64(f, RS__F16);
}

static inline uint8_t rs__f64_to_e4m3(double f)
{
    return (uint8_t)rs__narrow64(f, RS__E4M3);
}

static inline uint8_t rs__f64_to_e5m2(double f)
{
    return (uint8_t)rs__narrow64(f, RS__E5M2);
}

#endif
