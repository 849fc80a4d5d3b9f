/* The portable block quantization kernels (plain C, any machine; the
 * reference every vector level is tested against) and the choice of the
 * kernels for an instruction-set level. */
#include <string.h>

#include "core/quant_impl.h"

static inline float ld_f32(const unsigned char *s)
{
    float v;
    memcpy(&v, s, sizeof(v));
    return v;
}

static inline float ld_bf16(const unsigned char *s)
{
    uint16_t v;
    memcpy(&v, s, sizeof(v));
    return rs__f32_from((uint32_t)v << 16);
}

static inline float ld_f16(const unsigned char *s)
{
    uint16_t v;
    memcpy(&v, s, sizeof(v));
    return rs__f16_to_f32(v);
}

static uint32_t amax_f32(const void *src, size_t n)
{
    const unsigned char *s = src;
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, s + 4 * i, sizeof(v));
        v &= 0x7fffffffu;
        m = v > m ? v : m;
    }
    return m;
}

/* bf16 and f16 alike: 15 magnitude bits under the sign. */
static uint32_t amax_16(const void *src, size_t n)
{
    const unsigned char *s = src;
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, s + 2 * i, sizeof(v));
        v &= 0x7fffu;
        m = v > m ? v : m;
    }
    return m;
}

#define ENC(SRC, ES, FMT)                                                     \
    static void enc_##SRC##_##FMT(uint8_t *dst, const void *src, size_t n,   \
                                  float scale)                                \
    {                                                                         \
        const unsigned char *s = src;                                         \
        for (size_t i = 0; i < n; i++)                                        \
            dst[i] = rs__quant_enc(RS__QFMT_##FMT, ld_##SRC(s + (ES) * i) /  \
                                                       scale);                \
    }

ENC(f32, 4, E4M3)
ENC(f32, 4, E5M2)
ENC(bf16, 2, E4M3)
ENC(bf16, 2, E5M2)
ENC(f16, 2, E4M3)
ENC(f16, 2, E5M2)

RS__QUANT_AMAX_ROW(, amax_row_f32, 4, amax_f32)
RS__QUANT_AMAX_ROW(, amax_row_16, 2, amax_16)
RS__QUANT_ENC_ROW(, row_f32_E4M3, 4, enc_f32_E4M3)
RS__QUANT_ENC_ROW(, row_f32_E5M2, 4, enc_f32_E5M2)
RS__QUANT_ENC_ROW(, row_bf16_E4M3, 2, enc_bf16_E4M3)
RS__QUANT_ENC_ROW(, row_bf16_E5M2, 2, enc_bf16_E5M2)
RS__QUANT_ENC_ROW(, row_f16_E4M3, 2, enc_f16_E4M3)
RS__QUANT_ENC_ROW(, row_f16_E5M2, 2, enc_f16_E5M2)

const rs__quant_ops_t rs__quant_ops_portable = {
    .amax = {amax_f32, amax_16, amax_16},
    .enc = {{enc_f32_E4M3, enc_f32_E5M2},
            {enc_bf16_E4M3, enc_bf16_E5M2},
            {enc_f16_E4M3, enc_f16_E5M2}},
    .amax_row = {amax_row_f32, amax_row_16, amax_row_16},
    .enc_row = {{row_f32_E4M3, row_f32_E5M2},
                {row_bf16_E4M3, row_bf16_E5M2},
                {row_f16_E4M3, row_f16_E5M2}},
};

#if RS__QUANT_X86
#include <cpuid.h>

/* F16C came with AVX2 on every x86 CPU, but is not implied by it; the
 * AVX2 probe has checked that the OS saves the vector registers. CPUID
 * leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no "f16c"). */
static int has_f16c(void)
{
    /* -1 until probed (CPUID may trap to a hypervisor: once is enough);
     * racing threads store the same value. */
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

const rs__quant_ops_t *rs__quant_ops(rs__simd_t level)
{
#if RS__QUANT_X86
    if (level >= RS__SIMD_AVX2 && has_f16c())
        return level >= RS__SIMD_AVX512 ? &rs__quant_ops_avx512
                                        : &rs__quant_ops_avx2;
#else
    (void)level;
#endif
    return &rs__quant_ops_portable;
}
