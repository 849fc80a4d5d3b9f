/* Instruction-set level for the copy kernels: probed with
 * __builtin_cpu_supports (which also checks that the OS saves the vector
 * registers), chosen once from RESHARD_SIMD, overridable by tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/simd.h"

#define SIMD_ENV "RESHARD_SIMD"

static const char *const names[RS__SIMD_COUNT] = {"portable", "sse2", "avx2",
                                                  "avx512"};

/* -1 until chosen; then a level. Relaxed atomics: every thread that races
 * to choose computes the same value. */
static int active_level = -1;

rs__simd_t rs__simd_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2"))
        return RS__SIMD_SSE2;
    /* the AVX-512 kernels use AVX2 ones for bytes */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return RS__SIMD_AVX512;
    return RS__SIMD_AVX2;
    return RS__SIMD_SSE2;
#else
    return RS__SIMD_PORTABLE;
#endif
}

const char *rs__simd_name(rs__simd_t level)
{
    return (unsigned)level < RS__SIMD_COUNT ? names[level] : "unknown";
}

int rs__simd_parse(const char *name, rs__simd_t *level_p)
{
    if (name == NULL || *name == '\0' || strcmp(name, "auto") == 0) {
        *level_p = rs__simd_best();
        return 1;
    }
    for (int i = 0; i < RS__SIMD_COUNT; i++) {
        if (strcmp(name, names[i]) == 0) {
            *level_p = (rs__simd_t)i;
            return 1;
        }
    }
    return 0;
}

static rs__simd_t lowered(rs__simd_t level)
{
    const rs__simd_t best = rs__simd_best();
    return level > best ? best : level;
}

static rs__simd_t from_env(void)
{
    const char *env = getenv(SIMD_ENV);
    rs__simd_t level;
    if (rs__simd_parse(env, &level))
        return lowered(level);
    fprintf(stderr, "reshard: environment variable %s='%.40s' is not one of "
            "auto, portable, sse2, avx2, avx512; using %s\n", SIMD_ENV, env,
            rs__simd_name(rs__simd_best()));
    return rs__simd_best();
}

rs__simd_t rs__simd_active(void)
{
    int level = __atomic_load_n(&active_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = (int)from_env();
        __atomic_store_n(&active_level, level, __ATOMIC_RELAXED);
    }
    return (rs__simd_t)level;
}

rs__simd_t rs__simd_force(rs__simd_t level)
{
    const rs__simd_t used = lowered(level);
    __atomic_store_n(&active_level, (int)used, __ATOMIC_RELAXED);
    return used;
}
