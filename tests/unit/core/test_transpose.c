/* The transpose kernels at every instruction-set level this machine has
 * (portable, SSE2, AVX2, AVX-512, forced one after the other through
 * rs__simd_force) against a naive element loop: all element sizes, shapes
 * from 1x1 to past several tiles, padded leading dims, misaligned
 * pointers, plain and streaming stores, with guard bytes before, between and
 * after the destination rows. Then the strided copy engine on the same
 * levels: batched transposes, permutes, casts with a transposition, and
 * copies large enough to take the streaming path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/simd.h"
#include "simd_levels.h"
#include "core/transpose.h"

#define GUARD 128
#define GUARD_BYTE 0xA5

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 11;
}

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rnd64();
}

typedef struct tcase {
    int64_t rows, cols;   /* source shape */
    int64_t sld, dld;     /* leading dims in elements (>= cols, >= rows) */
    size_t es;            /* element size */
    size_t soff, doff;    /* byte offsets from 64-byte aligned buffers */
    int stream;
} tcase_t;

/* Runs rs__transpose on random source bytes into a guarded destination and
 * compares every byte of the destination buffer (rows, their padding and
 * the guards) with the naive loop's. */
static void check_case(const tcase_t *t)
{
    const size_t sbytes = (size_t)((t->rows - 1) * t->sld + t->cols) * t->es;
    const size_t dbytes = (size_t)((t->cols - 1) * t->dld + t->rows) * t->es;
    const size_t dtotal = GUARD + t->doff + dbytes + GUARD;
    unsigned char *src = aligned_alloc(64, (t->soff + sbytes + 63) / 64 * 64);
    unsigned char *dst = aligned_alloc(64, (dtotal + 63) / 64 * 64);
    unsigned char *want = malloc(dtotal);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    const unsigned char *s = src + t->soff;
    fill_random(src + t->soff, sbytes);
    memset(dst, GUARD_BYTE, dtotal);
    memcpy(want, dst, dtotal);
    unsigned char *d = dst + GUARD + t->doff, *w = want + GUARD + t->doff;
    for (int64_t i = 0; i < t->rows; i++)
        for (int64_t j = 0; j < t->cols; j++)
            memcpy(w + (size_t)(j * t->dld + i) * t->es,
                   s + (size_t)(i * t->sld + j) * t->es, t->es);
    rs__transpose(d, t->dld, s, t->sld, t->rows, t->cols, t->es, t->stream);
    if (memcmp(dst, want, dtotal) != 0) {
        size_t k = 0;
        while (dst[k] == want[k])
            k++;
        fail_msg("level %s es %zu %lldx%lld sld %lld dld %lld soff %zu doff "
                 "%zu stream %d: first wrong byte at %zd from the destination "
                 "(got %02x, want %02x)",
                 rs__simd_name(rs__simd_active()), t->es,
                 (long long)t->rows, (long long)t->cols, (long long)t->sld,
                 (long long)t->dld, t->soff, t->doff, t->stream,
                 (ptrdiff_t)k - (ptrdiff_t)(GUARD + t->doff), dst[k],
                 want[k]);
    }
    free(src);
    free(dst);
    free(want);
}

static const size_t sizes[4] = {1, 2, 4, 8};

/* One shape at every level and element size, tight and padded, aligned and
 * not, plain and streamed. */
static void check_shape(int64_t rows, int64_t cols)
{
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        assert_int_equal(rs__simd_force((rs__simd_t)lv), lv);
        for (size_t k = 0; k < 4; k++)
            for (int v = 0; v < 4; v++) {
                const size_t es = sizes[k];
                /* v 0: tight, aligned; 1: padded to 64-byte rows, so the
                 * streaming stores apply; 2, 3: odd pads and offsets */
                const int64_t line = 64 / (int64_t)es;
                tcase_t t = {rows, cols, cols, rows, es, 0, 0,
                             v & 1};
                if (v == 1) {
                    t.sld = (cols + line - 1) / line * line;
                    t.dld = (rows + line - 1) / line * line;
                } else if (v >= 2) {
                    t.sld = cols + 3;
                    t.dld = rows + 1;
                    t.soff = es * (size_t)v;
                    t.doff = v == 2 ? es : 64 - es;
                }
                check_case(&t);
            }
    }
}

static void test_edge_shapes(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {
        {1, 1},   {1, 2},   {2, 1},    {1, 300},  {300, 1},  {3, 5},
        {8, 8},   {16, 16}, {17, 33},  {33, 17},  {31, 31},  {32, 32},
        {63, 65}, {64, 64}, {65, 63},  {64, 128}, {96, 32},  {128, 128},
        {8191, 3}, {3, 8191}, {7, 1000}, {1000, 9}};
    rng_state = 1;
    for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); z++)
        check_shape(shapes[z][0], shapes[z][1]);
}

/* Past the cached walk's blocks and the streamed walk's runs, with ragged
 * edges on both sides. */
static void test_large_shapes(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {
        {256, 256}, {300, 520}, {520, 300}, {1100, 130}, {130, 2500}};
    rng_state = 2;
    for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); z++)
        check_shape(shapes[z][0], shapes[z][1]);
}

/* Every size from 1 to 70 on both sides for bf16 and f32 at every level:
 * each count of whole tiles and every ragged remainder. */
static void test_all_small(void **state)
{
    (void)state;
    rng_state = 3;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (int64_t r = 1; r <= 70; r += 1 + (r > 34))
            for (int64_t c = 1; c <= 70; c += 1 + (c > 34)) {
                tcase_t a = {r, c, c, r, 2, 0, 0, (int)((r + c) & 1)};
                check_case(&a);
                tcase_t b = {r, c, c + 1, r + 2, 4, 4, 8, 1};
                check_case(&b);
            }
    }
}

/* ---- the strided copy engine on each level ---- */

/* Row-major strides of a layout visiting dims in `order` (outermost first),
 * each dim padded by pad[d]; returns the buffer's element count. */
static size_t layout(const int64_t *shape, int ndim, const int *order,
                     const int64_t *pad, int64_t *stride)
{
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        const int d = order[k];
        stride[d] = s;
        s *= shape[d] + pad[d];
    }
    return (size_t)s;
}

typedef struct scase {
    rs_dtype_t from, to;
    int ndim;
    int64_t shape[4], ss[4], ds[4];
    size_t src_elems, dst_elems;
} scase_t;

/* rs__convert_strided against an odometer walk whose elements go through
 * the contiguous converter one at a time (the cast itself is tested
 * against an independent reference in test_convert); source values are
 * finite (exponent below all ones), so no NaN payload question arises. */
static void check_strided(const scase_t *g)
{
    const size_t fs = rs_dtype_size(g->from), ts = rs_dtype_size(g->to);
    const size_t dbytes = g->dst_elems * ts;
    unsigned char *src = malloc(g->src_elems * fs);
    const size_t dtotal = dbytes + 2 * (size_t)GUARD;
    unsigned char *dst = aligned_alloc(64, (dtotal + 63) / 64 * 64);
    unsigned char *want = malloc(dbytes + 2 * GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    fill_random(src, g->src_elems * fs);
    for (size_t i = 0; g->from != g->to && i < g->src_elems; i++)
        src[i * fs + fs - 1] &= 0xBF; /* clears the exponent's top bit */
    memset(dst, GUARD_BYTE, dbytes + 2 * GUARD);
    memcpy(want, dst, dbytes + 2 * GUARD);
    int64_t total = 1;
    for (int i = 0; i < g->ndim; i++)
        total *= g->shape[i];
    for (int64_t k = 0; k < total; k++) {
        int64_t rem = k, so = 0, dof = 0;
        for (int i = g->ndim - 1; i >= 0; i--) {
            so += rem % g->shape[i] * g->ss[i];
            dof += rem % g->shape[i] * g->ds[i];
            rem /= g->shape[i];
        }
        assert_int_equal(rs__convert(g->to, want + GUARD + (size_t)dof * ts,
                                     g->from, src + (size_t)so * fs, 1),
                         RS_OK);
    }
    assert_int_equal(rs__convert_strided(g->to, dst + GUARD, g->ds, g->from,
                                         src, g->ss, g->ndim, g->shape),
                     RS_OK);
    if (memcmp(dst, want, dbytes + 2 * GUARD) != 0)
        fail_msg("level %s: %s -> %s, %d dims: destination differs",
                 rs__simd_name(rs__simd_active()), rs_dtype_name(g->from),
                 rs_dtype_name(g->to), g->ndim);
    free(src);
    free(dst);
    free(want);
}

static const rs_dtype_t pairs[][2] = {
    {RS_DTYPE_U8, RS_DTYPE_U8},     {RS_DTYPE_BF16, RS_DTYPE_BF16},
    {RS_DTYPE_F32, RS_DTYPE_F32},   {RS_DTYPE_F64, RS_DTYPE_F64},
    {RS_DTYPE_BF16, RS_DTYPE_F32},  {RS_DTYPE_F32, RS_DTYPE_BF16},
    {RS_DTYPE_F16, RS_DTYPE_F32}};
#define NPAIRS (sizeof(pairs) / sizeof(pairs[0]))

/* permute(0, 2, 1) of [B, M, N] and permute(2, 0, 1) of it, tight and with
 * padding, every pair, every level. */
static void test_strided_batched(void **state)
{
    (void)state;
    static const int id[3] = {0, 1, 2}, perm[3] = {0, 2, 1},
                     rot[3] = {2, 0, 1};
    static const int64_t shapes[][3] = {
        {3, 70, 130}, {2, 64, 64}, {4, 33, 17}, {2, 1, 200}, {5, 200, 1},
        {2, 128, 96}};
    const int64_t nopad[3] = {0, 0, 0}, pad[3] = {1, 3, 2};
    rng_state = 4;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); z++)
            for (size_t k = 0; k < NPAIRS; k++)
                for (int v = 0; v < 3; v++) {
                    scase_t g = {pairs[k][0], pairs[k][1], 3, {0}, {0}, {0},
                                 0, 0};
                    memcpy(g.shape, shapes[z], sizeof(shapes[z]));
                    g.src_elems = layout(g.shape, 3, v == 2 ? rot : perm,
                                         v == 1 ? pad : nopad, g.ss);
                    g.dst_elems = layout(g.shape, 3, id, v == 1 ? pad : nopad,
                                         g.ds);
                    check_strided(&g);
                }
    }
}

/* Copies of 8 MiB and more take the streaming stores: a transpose of f32,
 * a batched one of bf16 and one into a destination whose rows are not at
 * multiples of 64 bytes (plain stores after all), at every level. */
static void test_strided_streamed(void **state)
{
    (void)state;
    static const int id[3] = {0, 1, 2}, perm[3] = {0, 2, 1};
    const int64_t nopad[3] = {0, 0, 0}, dpad[3] = {0, 0, 3};
    rng_state = 5;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        scase_t a = {RS_DTYPE_F32, RS_DTYPE_F32, 3, {1, 1536, 1440}, {0},
                     {0}, 0, 0};
        a.src_elems = layout(a.shape, 3, perm, nopad, a.ss);
        a.dst_elems = layout(a.shape, 3, id, nopad, a.ds);
        assert_true(a.dst_elems * 4 >= RS__TRANSPOSE_STREAM_MIN);
        check_strided(&a);
        scase_t b = {RS_DTYPE_BF16, RS_DTYPE_BF16, 3, {5, 1024, 832}, {0},
                     {0}, 0, 0};
        b.src_elems = layout(b.shape, 3, perm, nopad, b.ss);
        b.dst_elems = layout(b.shape, 3, id, nopad, b.ds);
        assert_true(b.dst_elems * 2 >= RS__TRANSPOSE_STREAM_MIN);
        check_strided(&b);
        b.dst_elems = layout(b.shape, 3, id, dpad, b.ds);
        check_strided(&b);
    }
}

static void test_simd_levels(void **state)
{
    (void)state;
    rs__simd_t lv = RS__SIMD_PORTABLE;
    assert_int_equal(rs__simd_parse("sse2", &lv), 1);
    assert_int_equal(lv, RS__SIMD_SSE2);
    assert_int_equal(rs__simd_parse("avx512", &lv), 1);
    assert_int_equal(lv, RS__SIMD_AVX512);
    assert_int_equal(rs__simd_parse("portable", &lv), 1);
    assert_int_equal(lv, RS__SIMD_PORTABLE);
    assert_int_equal(rs__simd_parse("auto", &lv), 1);
    assert_int_equal(lv, rs__simd_best());
    lv = RS__SIMD_SSE2;
    assert_int_equal(rs__simd_parse("AVX2", &lv), 0);
    assert_int_equal(rs__simd_parse("avx", &lv), 0);
    assert_int_equal(lv, RS__SIMD_SSE2);
    /* forcing more than the machine has gives what it has */
    assert_int_equal(rs__simd_force(RS__SIMD_AVX512), rs__simd_best());
    assert_int_equal(rs__simd_active(), rs__simd_best());
    assert_int_equal(rs__simd_force(RS__SIMD_PORTABLE), RS__SIMD_PORTABLE);
    assert_int_equal(rs__simd_active(), RS__SIMD_PORTABLE);
    assert_string_equal(rs__simd_name(RS__SIMD_AVX2), "avx2");
    printf("  (levels tested here: portable to %s)\n",
           rs__simd_name(rs__simd_best()));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_simd_levels, simd_restore_level),
        cmocka_unit_test_teardown(test_edge_shapes, simd_restore_level),
        cmocka_unit_test_teardown(test_all_small, simd_restore_level),
        cmocka_unit_test_teardown(test_large_shapes, simd_restore_level),
        cmocka_unit_test_teardown(test_strided_batched, simd_restore_level),
        cmocka_unit_test_teardown(test_strided_streamed, simd_restore_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
