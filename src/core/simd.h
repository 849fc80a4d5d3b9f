/* Which vector instruction set the copy kernels use: the best the CPU and
 * the OS support, unless RESHARD_SIMD asks for a lower level (to compare or
 * to rule a kernel out) or a test forces one. Every level has its own
 * kernels and each is tested against the portable C ones. */
#ifndef RS_CORE_SIMD_H
#define RS_CORE_SIMD_H

/* Ordered: each level's machines also run every level below it. */
typedef enum rs__simd {
    RS__SIMD_PORTABLE = 0, /* plain C, any machine */
    RS__SIMD_SSE2 = 1,     /* x86-64 baseline */
    RS__SIMD_AVX2 = 2,
    RS__SIMD_AVX512 = 3, /* AVX-512 F and BW */
    RS__SIMD_COUNT = 4
} rs__simd_t;

/* The highest level this CPU (and its OS) supports; probed once. */
rs__simd_t rs__simd_best(void);

/* The level the kernels use: RESHARD_SIMD (auto, portable, sse2, avx2,
 * avx512) lowered to rs__simd_best() when it asks for more, else the best.
 * A value that is none of these is reported once on stderr, naming it, and
 * the best level is used. Read once; safe from any thread. */
rs__simd_t rs__simd_active(void);

/* Tests: makes every later kernel call use `level` (lowered to the best
 * supported) and returns the level now in use. Not for concurrent use with
 * running copies that must see one level throughout. */
rs__simd_t rs__simd_force(rs__simd_t level);

/* Parses a RESHARD_SIMD value: 1 and *level_p set for a known name ("auto"
 * and "" give rs__simd_best()), 0 otherwise (*level_p untouched). */
int rs__simd_parse(const char *name, rs__simd_t *level_p);

/* "portable", "sse2", "avx2", "avx512". */
const char *rs__simd_name(rs__simd_t level);

#endif
