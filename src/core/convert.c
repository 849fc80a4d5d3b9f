/* Contiguous dtype conversion: one generated loop per (from, to) pair over
 * the scalar kernels of convert_scalar.h, a table to find them, and plain
 * copies for equal dtypes of any kind. */
#include <string.h>

#include "core/convert_impl.h"
#include "core/convert_scalar.h"
#include "core/convert.h"

/* Element loads into f32 (exact) and stores from f32 (one rounding). */
static inline float ld_f32(float v) { return v; }
static inline float ld_bf16(uint16_t v) { return rs__bf16_to_f32(v); }
static inline float ld_f16(uint16_t v) { return rs__f16_to_f32(v); }
static inline float ld_e4m3(uint8_t v) { return rs__e4m3_to_f32(v); }
static inline float ld_e5m2(uint8_t v) { return rs__e5m2_to_f32(v); }

static inline float st_f32(float v) { return v; }
static inline double st_f64(float v) { return (double)v; }
static inline uint16_t st_bf16(float v) { return rs__f32_to_bf16(v); }
static inline uint16_t st_f16(float v) { return rs__f32_to_f16(v); }
static inline uint8_t st_e4m3(float v) { return rs__f32_to_e4m3(v); }
static inline uint8_t st_e5m2(float v) { return rs__f32_to_e5m2(v); }

/* f64 sources round straight from f64: going through f32 would round twice. */
static inline double ld64(double v) { return v; }
static inline float st64_f32(double v) { return (float)v; }
static inline uint16_t st64_bf16(double v) { return rs__f64_to_bf16(v); }
static inline uint16_t st64_f16(double v) { return rs__f64_to_f16(v); }
static inline uint8_t st64_e4m3(double v) { return rs__f64_to_e4m3(v); }
static inline uint8_t st64_e5m2(double v) { return rs__f64_to_e5m2(v); }

typedef float t_f32;
typedef double t_f64;
typedef uint16_t t_bf16;
typedef uint16_t t_f16;
typedef uint8_t t_e4m3;
typedef uint8_t t_e5m2;

/* Loads and stores go through memcpy so unaligned buffers are fine; the
 * compiler turns them into plain (vector) moves. The fixed-size inner block
 * lets even the cheapest vectorizer cost model (GCC's -O2 default) replace
 * it whole with vector code; the remainder runs element by element. */
#define RS_CV_BLOCK 64

/* With GCC on x86-64 ELF, each contiguous loop is also compiled for AVX2 and
 * AVX-512 machines and picked once at load time (the baseline x86-64 has no
 * 32 -> 16 bit pack, which the narrowing casts need). Plain C elsewhere. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&        \
    defined(__ELF__) && __GNUC__ >= 11 && !defined(RS_NO_CLONES)
#define RS_CV_CLONES                                                          \
    __attribute__((target_clones("default", "arch=x86-64-v3",                 \
                                 "arch=x86-64-v4")))
#else
#define RS_CV_CLONES
#endif

/* Software prefetch RS_CV_AHEAD elements ahead: one hint per cache line of
 * the block on each side (the destination for writing, so its lines are
 * owned before the stores arrive); a single core then keeps enough misses in
 * flight to stream at memory bandwidth. Hints only: a no-op elsewhere. */
#define RS_CV_AHEAD 2048
#if defined(__GNUC__)
#define RS_CV_PREFETCH_BLOCK(s, d, ssize, dsize)                              \
    do {                                                                      \
        for (size_t k_ = 0; k_ < (ssize); k_++)                               \
            __builtin_prefetch((s) + 64 * k_, 0);                             \
        for (size_t k_ = 0; k_ < (dsize); k_++)                               \
            __builtin_prefetch((d) + 64 * k_, 1);                             \
    } while (0)
#else
#define RS_CV_PREFETCH_BLOCK(s, d, ssize, dsize) ((void)0)
#endif

#define RS_CV_ELEM(F, T, LD, ST, s, d, k)                                     \
    do {                                                                      \
        t_##F v_;                                                             \
        memcpy(&v_, (s) + (k) * sizeof(t_##F), sizeof(v_));                   \
        t_##T r_ = ST(LD(v_));                                                \
        memcpy((d) + (k) * sizeof(t_##T), &r_, sizeof(r_));                   \
    } while (0)

#define RS_CV_PAIR(F, T, LD, ST)                                              \
    RS_CV_CLONES static void cv_##F##_##T(void *restrict dst,                 \
                                          const void *restrict src, size_t n) \
    {                                                                         \
        const unsigned char *restrict s = src;                                \
        unsigned char *restrict d = dst;                                      \
        size_t i = 0;                                                         \
        for (; i + RS_CV_BLOCK <= n; i += RS_CV_BLOCK) {                      \
            const unsigned char *restrict bs = s + i * sizeof(t_##F);         \
            unsigned char *restrict bd = d + i * sizeof(t_##T);               \
            if (i + RS_CV_BLOCK + RS_CV_AHEAD <= n)                           \
                RS_CV_PREFETCH_BLOCK(bs + RS_CV_AHEAD * sizeof(t_##F),        \
                                     bd + RS_CV_AHEAD * sizeof(t_##T),        \
                                     sizeof(t_##F), sizeof(t_##T));           \
            for (size_t j = 0; j < RS_CV_BLOCK; j++)                          \
                RS_CV_ELEM(F, T, LD, ST, bs, bd, j);                          \
        }                                                                     \
        for (; i < n; i++)                                                    \
            RS_CV_ELEM(F, T, LD, ST, s, d, i);                                \
    }                                                                         \
    static void cvs_##F##_##T(void *dst, int64_t ds, const void *src,         \
                              int64_t ss, size_t n)                           \
    {                                                                         \
        const unsigned char *s = src;                                         \
        unsigned char *d = dst;                                               \
        const size_t sstep = (size_t)ss * sizeof(t_##F);                      \
        const size_t dstep = (size_t)ds * sizeof(t_##T);                      \
        for (size_t i = 0; i < n; i++, s += sstep, d += dstep)                \
            RS_CV_ELEM(F, T, LD, ST, s, d, 0);                                \
    }

/* Every ordered pair of distinct float dtypes. */
RS_CV_PAIR(f32, f64, ld_f32, st_f64)
RS_CV_PAIR(f32, bf16, ld_f32, st_bf16)
RS_CV_PAIR(f32, f16, ld_f32, st_f16)
RS_CV_PAIR(f32, e4m3, ld_f32, st_e4m3)
RS_CV_PAIR(f32, e5m2, ld_f32, st_e5m2)
RS_CV_PAIR(bf16, f32, ld_bf16, st_f32)
RS_CV_PAIR(bf16, f64, ld_bf16, st_f64)
RS_CV_PAIR(bf16, f16, ld_bf16, st_f16)
RS_CV_PAIR(bf16, e4m3, ld_bf16, st_e4m3)
RS_CV_PAIR(bf16, e5m2, ld_bf16, st_e5m2)
RS_CV_PAIR(f16, f32, ld_f16, st_f32)
RS_CV_PAIR(f16, f64, ld_f16, st_f64)
RS_CV_PAIR(f16, bf16, ld_f16, st_bf16)
RS_CV_PAIR(f16, e4m3, ld_f16, st_e4m3)
RS_CV_PAIR(f16, e5m2, ld_f16, st_e5m2)
RS_CV_PAIR(e4m3, f32, ld_e4m3, st_f32)
RS_CV_PAIR(e4m3, f64, ld_e4m3, st_f64)
RS_CV_PAIR(e4m3, bf16, ld_e4m3, st_bf16)
RS_CV_PAIR(e4m3, f16, ld_e4m3, st_f16)
RS_CV_PAIR(e4m3, e5m2, ld_e4m3, st_e5m2)
RS_CV_PAIR(e5m2, f32, ld_e5m2, st_f32)
RS_CV_PAIR(e5m2, f64, ld_e5m2, st_f64)
RS_CV_PAIR(e5m2, bf16, ld_e5m2, st_bf16)
RS_CV_PAIR(e5m2, f16, ld_e5m2, st_f16)
RS_CV_PAIR(e5m2, e4m3, ld_e5m2, st_e4m3)
RS_CV_PAIR(f64, f32, ld64, st64_f32)
RS_CV_PAIR(f64, bf16, ld64, st64_bf16)
RS_CV_PAIR(f64, f16, ld64, st64_f16)
RS_CV_PAIR(f64, e4m3, ld64, st64_e4m3)
RS_CV_PAIR(f64, e5m2, ld64, st64_e5m2)

/* Equal dtypes: a byte copy, or a strided copy by element size. */
static void copy_contig(void *dst, const void *src, size_t n, size_t elsize)
{
    if (n > 0)
        memcpy(dst, src, n * elsize);
}

#define RS_COPY_STRIDED(BYTES)                                                \
    static void copy_strided_##BYTES(void *dst, int64_t ds, const void *src,  \
                                     int64_t ss, size_t n)                    \
    {                                                                         \
        const unsigned char *s = src;                                         \
        unsigned char *d = dst;                                               \
        for (size_t i = 0; i < n; i++)                                        \
            memcpy(d + (size_t)ds * i * (BYTES),                              \
                   s + (size_t)ss * i * (BYTES), (BYTES));                    \
    }                                                                         \
    static void copy_contig_##BYTES(void *dst, const void *src, size_t n)     \
    {                                                                         \
        copy_contig(dst, src, n, (BYTES));                                    \
    }

RS_COPY_STRIDED(1)
RS_COPY_STRIDED(2)
RS_COPY_STRIDED(4)
RS_COPY_STRIDED(8)

enum { F_F32, F_F64, F_BF16, F_F16, F_E4M3, F_E5M2, F_COUNT };

static int float_index(rs_dtype_t dtype)
{
    switch (dtype) {
    case RS_DTYPE_F32: return F_F32;
    case RS_DTYPE_F64: return F_F64;
    case RS_DTYPE_BF16: return F_BF16;
    case RS_DTYPE_F16: return F_F16;
    case RS_DTYPE_F8E4M3: return F_E4M3;
    case RS_DTYPE_F8E5M2: return F_E5M2;
    default: return -1;
    }
}

#define K(F, T) {cv_##F##_##T, cvs_##F##_##T}
#define NONE {NULL, NULL}

/* [from][to]; the diagonal is handled as a copy before this is consulted. */
static const rs__convert_kernel_t float_kernels[F_COUNT][F_COUNT] = {
    [F_F32] = {NONE, K(f32, f64), K(f32, bf16), K(f32, f16), K(f32, e4m3),
               K(f32, e5m2)},
    [F_F64] = {K(f64, f32), NONE, K(f64, bf16), K(f64, f16), K(f64, e4m3),
               K(f64, e5m2)},
    [F_BF16] = {K(bf16, f32), K(bf16, f64), NONE, K(bf16, f16),
                K(bf16, e4m3), K(bf16, e5m2)},
    [F_F16] = {K(f16, f32), K(f16, f64), K(f16, bf16), NONE, K(f16, e4m3),
               K(f16, e5m2)},
    [F_E4M3] = {K(e4m3, f32), K(e4m3, f64), K(e4m3, bf16), K(e4m3, f16),
                NONE, K(e4m3, e5m2)},
    [F_E5M2] = {K(e5m2, f32), K(e5m2, f64), K(e5m2, bf16), K(e5m2, f16),
                K(e5m2, e4m3), NONE},
};

static const rs__convert_kernel_t copy_kernels[9] = {
    [1] = {copy_contig_1, copy_strided_1},
    [2] = {copy_contig_2, copy_strided_2},
    [4] = {copy_contig_4, copy_strided_4},
    [8] = {copy_contig_8, copy_strided_8},
};

int rs__convert_kernel(rs_dtype_t to, rs_dtype_t from, rs__convert_kernel_t *k_p)
{
    if (to == from) {
        size_t size = rs_dtype_size(from);
        if (size == 0 || size > 8 || copy_kernels[size].contig == NULL)
            return 0;
        *k_p = copy_kernels[size];
        return 1;
    }
    int f = float_index(from), t = float_index(to);
    if (f < 0 || t < 0)
        return 0;
    *k_p = float_kernels[f][t];
    return 1;
}

int rs__convert_supported(rs_dtype_t from, rs_dtype_t to)
{
    rs__convert_kernel_t k;
    return rs__convert_kernel(to, from, &k);
}

rs_status_t rs__convert(rs_dtype_t to, void *dst, rs_dtype_t from,
                       const void *src, size_t n)
{
    rs__convert_kernel_t k;
    if (!rs__convert_kernel(to, from, &k))
        return RS_ERR_UNSUPPORTED;
    if (n > 0 && (dst == NULL || src == NULL))
        return RS_ERR_INVALID_ARG;
    k.contig(dst, src, n);
    return RS_OK;
}
