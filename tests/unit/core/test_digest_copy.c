/* The copy that digests as it copies (rs__digest_copy) gives, over odd
 * sizes, alignments and cuts into pieces mixed with plain updates, the
 * copied bytes exactly, nothing written outside them, and the rsd64 digest
 * of those bytes as computed independently here: a byte-at-a-time reading
 * of docs/formats.md, "Digest: rsd64", sharing no code with digest.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/digest_copy.h"

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
}

static uint64_t rot(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t word(const unsigned char *p)
{
    uint64_t w = 0;
    for (int i = 0; i < 8; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

/* rsd64 as the specification words it, one whole buffer at a time. */
static uint64_t ref_rsd64(const unsigned char *p, size_t n)
{
    const uint64_t K1 = 0x243185be4ee4b2afull, K2 = 0x550c7dc3d5ffb507ull,
                   K3 = 0x72be5d74f27b89abull, K4 = 0x80deb1fe3b1696ffull,
                   K5 = 0x9bdc06a725c7125bull;
    uint64_t v[4], h = K5;
    for (int i = 0; i < 4; i++)
        v[i] = K4 * (uint64_t)(2 * i + 1);
    size_t stripes = n / 32;
    for (size_t s = 0; s < stripes; s++)
        for (int i = 0; i < 4; i++)
            v[i] = rot((v[i] ^ word(p + 32 * s + 8 * i)) * K1, 29) * K2;
    for (int i = 0; i < 4; i++)
        h = (h ^ (rot(v[i] * K2, 27) * K1)) * K3 + K4;
    h = (h ^ (uint64_t)n) * K2;
    size_t at = 32 * stripes;
    for (; n - at >= 8; at += 8)
        h = rot(h ^ (word(p + at) * K1), 29) * K2 + K4;
    for (; at < n; at++)
        h = rot(h ^ (p[at] * K5), 11) * K1;
    h ^= h >> 31;
    h *= K2;
    h ^= h >> 29;
    h *= K3;
    h ^= h >> 32;
    return h;
}

/* The reference itself against the published vectors (rsd64_ref.py). */
static void test_reference_vectors(void **state)
{
    (void)state;
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(i % 251);
    assert_int_equal(ref_rsd64(buf, 0), 0x261a09bbc8ddb3b2ull);
    assert_int_equal(ref_rsd64((const unsigned char *)"abc", 3),
                     0x9d45a5eaa330e7f1ull);
    assert_int_equal(ref_rsd64(buf, 1000), 0xad6d1044f71ce8feull);
}

#define GUARD 64

/* One copy of n bytes from src + sa to a fresh dst + da, cut at random
 * points into fused copies and (for some pieces) a memcpy followed by a
 * plain update, as a stream of reads of one shard would be. */
static void check_one(size_t n, size_t sa, size_t da, int mixed)
{
    unsigned char *src = malloc(n + 2 * GUARD), *dst = malloc(n + 2 * GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < n + 2 * GUARD; i++)
        src[i] = (unsigned char)rnd(256);
    memset(dst, 0xA5, n + 2 * GUARD);
    rs_digest_t d;
    rs_digest_init(&d);
    for (size_t at = 0; at < n;) {
        size_t piece = 1 + rnd(rnd(4) == 0 ? 40 : n);
        piece = piece < n - at ? piece : n - at;
        if (mixed && rnd(3) == 0) {
            memcpy(dst + GUARD + da + at, src + sa + at, piece);
            rs_digest_update(&d, dst + GUARD + da + at, piece);
        } else {
            rs__digest_copy(&d, dst + GUARD + da + at, src + sa + at, piece);
        }
        at += piece;
    }
    assert_memory_equal(dst + GUARD + da, src + sa, n);
    for (size_t i = 0; i < GUARD + da; i++)
        assert_int_equal(dst[i], 0xA5);
    for (size_t i = GUARD + da + n; i < n + 2 * GUARD; i++)
        assert_int_equal(dst[i], 0xA5);
    assert_int_equal(d.total, n);
    assert_int_equal(rs_digest_final(&d), ref_rsd64(src + sa, n));
    assert_int_equal(rs_digest_final(&d), rs_digest(src + sa, n));
    free(src);
    free(dst);
}

static void test_sizes_and_alignments(void **state)
{
    (void)state;
    rng = 7;
    static const size_t sizes[] = {0,  1,  7,   8,   9,   31,   32,   33,  63,
                                   64, 65, 100, 127, 129, 1000, 4099, 8192,
                                   (size_t)128 * 1024 + 17};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        for (size_t sa = 0; sa < 8; sa += 3)
            for (size_t da = 0; da < 8; da += 5) {
                check_one(sizes[k], sa, da, 0);
                check_one(sizes[k], sa, da, 1);
            }
}

static void test_random_cuts(void **state)
{
    (void)state;
    rng = 11;
    for (int it = 0; it < 300; it++)
        check_one(rnd(3000), rnd(32), rnd(32), it & 1);
}

/* A whole buffer in one call, so the prefetching stripe loop runs long. */
static void test_large(void **state)
{
    (void)state;
    rng = 13;
    check_one((size_t)3 << 20, 5, 3, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_sizes_and_alignments),
        cmocka_unit_test(test_random_cuts),
        cmocka_unit_test(test_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
