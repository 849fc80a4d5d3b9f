/* The streaming copy (rs__copy_stream) at every SIMD level up to the best
 * here: sizes below, at and above RS__COPY_STREAM_MIN, odd ones, every
 * destination alignment within a cache line against sources at other
 * offsets, gives the source bytes exactly and writes nothing outside
 * them (guard bytes either side), compared byte for byte with the source
 * it was copied from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/copy_stream.h"
#include "core/simd.h"
#include "simd_levels.h"

#define GUARD 128
#define GUARD_BYTE 0xA5

/* Byte i of source pattern `seed`: no period a misplaced copy could hide
 * behind within the sizes tested. */
static unsigned char pattern(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

/* Copies n bytes from offset so into offset dO of fresh buffers and checks
 * every byte of the destination buffer. */
static void check_one(size_t n, size_t so, size_t dO, unsigned seed)
{
    unsigned char *src = malloc(n + so + 64);
    unsigned char *dst = malloc(n + dO + 2 * GUARD + 64);
    assert_non_null(src);
    assert_non_null(dst);
    /* dst + GUARD is 64-aligned whatever malloc gave: dO is the offset
     * within a line */
    unsigned char *line = dst + GUARD + ((64 - ((uintptr_t)(dst + GUARD) & 63)) & 63);
    unsigned char *d = line + dO, *s = src + so;
    for (size_t i = 0; i < n; i++)
        s[i] = pattern(i, seed);
    memset(dst, GUARD_BYTE, n + dO + 2 * GUARD + 64);
    rs__copy_stream(d, s, n);
    for (size_t i = 0; i < n; i++)
        if (d[i] != pattern(i, seed))
            fail_msg("level %s, %zu bytes, src offset %zu, dst offset %zu: "
                     "byte %zu is 0x%02x, not 0x%02x",
                     rs__simd_name(rs__simd_active()), n, so, dO, i, d[i],
                     pattern(i, seed));
    for (unsigned char *g = dst; g < d; g++)
        if (*g != GUARD_BYTE)
            fail_msg("%zu bytes at dst offset %zu: wrote %td bytes before",
                     n, dO, d - g);
    for (size_t i = 0; i < GUARD; i++)
        if (d[n + i] != GUARD_BYTE)
            fail_msg("%zu bytes at dst offset %zu: wrote byte %zu past the "
                     "end", n, dO, i);
    free(src);
    free(dst);
}

static void test_sizes_and_alignments(void **state)
{
    (void)state;
    const size_t M = RS__COPY_STREAM_MIN;
    const size_t sizes[] = {0, 1, 15, 63, 64, 65, 4095, M - 1, M, M + 1,
                            M + 63, M + 64 + 17, 3 * M + 4097};
    const size_t offsets[] = {0, 1, 8, 16, 31, 48, 63};
    const size_t noff = sizeof(offsets) / sizeof(offsets[0]);
    unsigned seed = 1;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        assert_int_equal(rs__simd_force((rs__simd_t)lv), lv);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            for (size_t a = 0; a < noff; a++) /* every dst offset, sources
                                               * at another one */
                check_one(sizes[k], offsets[(a * 3 + k) % noff], offsets[a],
                          seed++);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sizes_and_alignments,
                                  simd_restore_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
