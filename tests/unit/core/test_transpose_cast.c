/* The fused cast-and-transpose kernels (bf16 <-> f32) at every
 * instruction-set level this machine has, against a reference written
 * here: bf16 widened by a shift (NaNs made quiet), f32 narrowed by
 * rounding the low 16 bits to nearest even (NaNs keep their top bits and
 * become quiet). Shapes that are not multiples of a block or a tile,
 * padded rows, misaligned pointers, plain and streaming stores, guard
 * bytes around and between the destination rows; every bf16 value, and
 * f32 specials (NaN payloads of both signs, infinities, subnormals, zeros,
 * exact halfway cases) scattered among random bits. Then the same through
 * rs__convert_strided, which also covers the levels without the kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/convert_scalar.h"
#include "core/simd.h"
#include "core/transpose_cast.h"
#include "simd_levels.h"

#define GUARD 96
#define GUARD_BYTE 0xA5

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 11;
}

static uint32_t ref_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    const int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    return nan ? u | 0x00400000u : u;
}

static uint16_t ref_narrow(uint32_t x)
{
    const uint32_t exp = x >> 23 & 0xff, man = x & 0x7fffff;
    uint16_t hi = (uint16_t)(x >> 16);
    if (exp == 0xff && man != 0)
        return (uint16_t)(hi | 0x40);
    const uint32_t lo = x & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
        hi++; /* a carry runs into the exponent, up to infinity */
    return hi;
}

static const uint32_t f32_specials[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001,
    0x7fbfffff, 0xffbfffff, 0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff,
    0x7f808000, 0x7fff8000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff,
    0x00008000, 0x00018000, 0x00400000, 0x3f808000, 0x3f818000, 0xbf808000,
    0xbf818000, 0x3f808001, 0x3f807fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000,
    0x7f7e8000, 0x00800000, 0x80800000, 0x3f800000, 0x477fe000};
#define NSPECIAL (sizeof(f32_specials) / sizeof(f32_specials[0]))

/* Source elements: every bf16 value in turn, or f32 random bits with a
 * special at about every fifth place (and, for NaN-free blocks, long
 * stretches of finite values). */
static void fill(unsigned char *p, size_t n, int f32)
{
    for (size_t i = 0; i < n; i++) {
        if (!f32) {
            const uint16_t h = (uint16_t)(i * 40503u); /* odd: all 65536 */
            memcpy(p + 2 * i, &h, 2);
            continue;
        }
        const uint64_t r = rnd64();
        uint32_t x = (uint32_t)r;
        if ((i / 256) % 3 == 2 || (r >> 40 & 1))
            x &= 0xbfffffffu; /* finite */
        else if (r % 5 == 0)
            x = f32_specials[(r >> 33) % NSPECIAL];
        memcpy(p + 4 * i, &x, 4);
    }
}

typedef struct tc_case {
    int64_t rows, cols, sld, dld; /* leading dims in elements */
    size_t soff, doff;            /* byte offsets from aligned buffers */
    int to_f32, stream;
} tc_case_t;

static void expect(const tc_case_t *t, unsigned char *want,
                   const unsigned char *src)
{
    const size_t ses = t->to_f32 ? 2 : 4, des = t->to_f32 ? 4 : 2;
    for (int64_t i = 0; i < t->rows; i++)
        for (int64_t j = 0; j < t->cols; j++) {
            const unsigned char *s = src + (size_t)(i * t->sld + j) * ses;
            unsigned char *d = want + (size_t)(j * t->dld + i) * des;
            if (t->to_f32) {
                uint16_t h;
                memcpy(&h, s, 2);
                const uint32_t u = ref_widen(h);
                assert_int_equal(u, rs__f32_bits(rs__bf16_to_f32(h)));
                memcpy(d, &u, 4);
            } else {
                uint32_t x;
                memcpy(&x, s, 4);
                const uint16_t h = ref_narrow(x);
                assert_int_equal(h, rs__f32_to_bf16(rs__f32_from(x)));
                memcpy(d, &h, 2);
            }
        }
}

/* 1 when the level ran a kernel; the destination (rows, padding, guards)
 * byte for byte against the reference either way it ran. `via` 1 goes
 * through rs__convert_strided. */
static int check_case(const tc_case_t *t, int via)
{
    const size_t ses = t->to_f32 ? 2 : 4, des = t->to_f32 ? 4 : 2;
    const size_t sbytes = (size_t)((t->rows - 1) * t->sld + t->cols) * ses;
    const size_t dbytes = (size_t)((t->cols - 1) * t->dld + t->rows) * des;
    const size_t dtotal = GUARD + t->doff + dbytes + GUARD;
    unsigned char *src = aligned_alloc(64, (t->soff + sbytes + 63) / 64 * 64);
    unsigned char *dst = aligned_alloc(64, (dtotal + 63) / 64 * 64);
    unsigned char *want = malloc(dtotal);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(want);
    fill(src + t->soff, sbytes / ses, !t->to_f32);
    memset(dst, GUARD_BYTE, dtotal);
    memset(want, GUARD_BYTE, dtotal);
    expect(t, want + GUARD + t->doff, src + t->soff);
    const rs_dtype_t to = t->to_f32 ? RS_DTYPE_F32 : RS_DTYPE_BF16;
    const rs_dtype_t from = t->to_f32 ? RS_DTYPE_BF16 : RS_DTYPE_F32;
    int ran = 1;
    if (via) {
        const int64_t shape[2] = {t->cols, t->rows}, ds[2] = {t->dld, 1},
                      ss[2] = {1, t->sld};
        assert_int_equal(rs__convert_strided(to, dst + GUARD + t->doff, ds,
                                             from, src + t->soff, ss, 2,
                                             shape),
                         RS_OK);
    } else {
        ran = rs__transpose_cast(to, dst + GUARD + t->doff, t->dld, from,
                                 src + t->soff, t->sld, t->rows, t->cols,
                                 t->stream);
    }
    if (ran && memcmp(dst, want, dtotal) != 0) {
        size_t k = 0;
        while (dst[k] == want[k])
            k++;
        fail_msg("level %s: %s %lldx%lld (ld %lld, %lld; offsets %zu, %zu; "
                 "stream %d): byte %zu of the destination buffer is 0x%02x, "
                 "want 0x%02x", rs__simd_name(rs__simd_active()),
                 t->to_f32 ? "bf16->f32" : "f32->bf16", (long long)t->rows,
                 (long long)t->cols, (long long)t->sld, (long long)t->dld,
                 t->soff, t->doff, t->stream, k, dst[k], want[k]);
    }
    free(src);
    free(dst);
    free(want);
    return ran;
}

static const int64_t shapes[][2] = {
    {1, 300}, {300, 1}, {7, 9}, {8, 16}, {16, 8}, {63, 65}, {64, 64},
    {129, 257}, {72, 200}, {256, 256}, {33, 1030}};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

/* Every shape, tight and padded (the padding puts destination rows at
 * multiples of 64 bytes, so streaming applies, or off them), aligned and
 * misaligned, plain and streaming, both directions, at every level. */
static void test_kernels(void **state)
{
    (void)state;
    static const size_t offs[][2] = {{0, 0}, {2, 4}, {6, 34}, {1, 3},
                                     {60, 62}};
    rng_state = 7;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        const int want_ran = rs__simd_active() >= RS__SIMD_AVX2;
        for (size_t z = 0; z < NSHAPES; z++)
            for (int pad = 0; pad < 3; pad++)
                for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]); o++)
                    for (int v = 0; v < 4; v++) {
                        tc_case_t t = {shapes[z][0], shapes[z][1], 0, 0,
                                       offs[o][0], offs[o][1], v & 1, v >> 1};
                        const int64_t line = t.to_f32 ? 16 : 32;
                        t.sld = t.cols + (pad ? 3 : 0);
                        t.dld = pad == 2 ? (t.rows + line) / line * line
                                         : t.rows + pad;
                        assert_int_equal(check_case(&t, 0), want_ran);
                    }
    }
}

/* Large enough for the streamed walk's passes (2216 columns: a pass of
 * 2048 in two chunks of 1024 and part of another, a narrower chunk of 160
 * and a ragged rest of 8; 400 rows:
 * three or more bands of 64 or 128 rows and a ragged rest), with the
 * destination on a cache line, starting off one (rows before the first
 * whole run), and with rows off cache lines (each run's partial lines
 * carried to the next band, or stored plainly at the first and last). */
static void test_streamed(void **state)
{
    (void)state;
    rng_state = 8;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        const int want_ran = rs__simd_active() >= RS__SIMD_AVX2;
        for (int v = 0; v < 2; v++) {
            tc_case_t t = {400, 2216, 2219, 448, 0, 32, v, 1}; /* on a line */
            assert_int_equal(check_case(&t, 0), want_ran);
            t.doff = 16;
            assert_int_equal(check_case(&t, 0), want_ran);
            t.soff = 6;
            t.dld = 401;
            assert_int_equal(check_case(&t, 0), want_ran);
        }
    }
}

/* rs__convert_strided hands true transposes to the kernels (or, at the
 * levels without them, to its tile buffer): the same values either way. */
static void test_strided(void **state)
{
    (void)state;
    rng_state = 9;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (size_t z = 0; z < NSHAPES; z++)
            for (int v = 0; v < 2; v++) {
                tc_case_t t = {shapes[z][0], shapes[z][1], shapes[z][1] + 1,
                               shapes[z][0] + 2, 4, 8, v, 0};
                assert_int_equal(check_case(&t, 1), 1);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kernels, simd_restore_level),
        cmocka_unit_test_teardown(test_streamed, simd_restore_level),
        cmocka_unit_test_teardown(test_strided, simd_restore_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
