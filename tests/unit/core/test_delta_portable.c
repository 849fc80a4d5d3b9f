/* The delta encoder's portable scan (64-bit words, what machines without
 * SSE2 run, aarch64 among them) is compiled here beside the library's, under
 * other names, and must give byte for byte the library's deltas and arena
 * bytes at every SIMD level this machine has (SSE2, AVX2): for element
 * sizes 1, 2 and 4, 0 % to 100 % changed, odd sizes and runs of random
 * lengths fed to both (so that lines start anywhere in a chunk). The
 * library's own deltas are checked against an independent reference in
 * test_delta. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/delta.h" /* the library's names, before the renaming */
#include "core/simd.h"
#include "simd_levels.h"

#define RS_DELTA_PORTABLE 1
#define rs__delta_enc_init portable_enc_init
#define rs__delta_enc_limit portable_enc_limit
#define rs__delta_enc_abandon portable_enc_abandon
#define rs__delta_enc_copy portable_enc_copy
#define rs__delta_enc_finish portable_enc_finish
#define rs__delta_encode portable_encode
#include "core/delta_encode.c"
#undef rs__delta_enc_init
#undef rs__delta_enc_limit
#undef rs__delta_enc_abandon
#undef rs__delta_enc_copy
#undef rs__delta_enc_finish
#undef rs__delta_encode

static uint64_t rng = 9;

static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
}

/* An encoder's three calls: the library's or the portable copy's. */
typedef struct enc_fns {
    rs_status_t (*init)(rs__delta_enc_t *, void *, uint64_t, uint32_t,
                        uint32_t, int64_t, int64_t, void *, rs_diag_t *);
    void (*copy)(rs__delta_enc_t *, const void *, size_t);
    rs_status_t (*finish)(rs__delta_enc_t *, rs_diag_t *, size_t *);
} enc_fns_t;

/* Encodes new over arena (n elements of es bytes, chunks of 256) in runs
 * of 1 to max_run elements; *len_p = the delta's length. */
static void encode_in_runs(const enc_fns_t *f, unsigned char *arena,
                           const unsigned char *neu, uint64_t n, uint32_t es,
                           uint64_t max_run, unsigned char *out,
                           size_t *len_p)
{
    rs_diag_t diag = {0};
    rs__delta_enc_t e;
    assert_int_equal(f->init(&e, arena, n, es, 256, 3, 4, out, &diag), RS_OK);
    for (uint64_t at = 0; at < n;) {
        uint64_t run = 1 + rnd(max_run);
        if (run > n - at)
            run = n - at;
        f->copy(&e, neu + at * es, run * es);
        at += run;
    }
    assert_int_equal(f->finish(&e, &diag, len_p), RS_OK);
}

static void same_delta(uint64_t n, uint32_t es, uint32_t permille)
{
    const size_t bytes = n * es, bound = rs__delta_bound(n, es, 256);
    unsigned char *old = malloc(bytes + 1), *neu = malloc(bytes + 1);
    unsigned char *a1 = malloc(bytes + 1), *a2 = malloc(bytes + 1);
    unsigned char *d1 = malloc(bound), *d2 = malloc(bound);
    for (size_t i = 0; i < bytes; i++)
        old[i] = (unsigned char)rnd(256);
    memcpy(neu, old, bytes);
    for (uint64_t i = 0; i < n; i++)
        if (rnd(1000) < permille)
            neu[i * es + rnd(es)] ^= (unsigned char)(1 + rnd(255));
    memcpy(a1, old, bytes);
    memcpy(a2, old, bytes);
    size_t l1 = 0, l2 = 0;
    const enc_fns_t lib = {rs__delta_enc_init, rs__delta_enc_copy,
                           rs__delta_enc_finish};
    const enc_fns_t portable = {portable_enc_init, portable_enc_copy,
                                portable_enc_finish};
    encode_in_runs(&lib, a1, neu, n, es, 900, d1, &l1);
    encode_in_runs(&portable, a2, neu, n, es, 700, d2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(d1, d2, l1);
    assert_memory_equal(a1, neu, bytes);
    assert_memory_equal(a2, neu, bytes);
    free(old);
    free(neu);
    free(a1);
    free(a2);
    free(d1);
    free(d2);
}

static void test_portable_matches(void **state)
{
    (void)state;
    static const uint32_t permille[] = {0, 1, 20, 300, 1000};
    static const uint32_t sizes[] = {1, 2, 4};
    for (int level = 0; level < simd_nlevels(); level++) {
        rs__simd_force((rs__simd_t)level);
        for (size_t s = 0; s < 3; s++)
            for (size_t f = 0; f < 5; f++) {
                same_delta(5000 + 13, sizes[s], permille[f]);
                same_delta(3, sizes[s], permille[f]);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_portable_matches, simd_restore_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
