/* FP8 quantization against a reference written here, apart from the
 * library's kernels: its own FP8 codes (decoded from their bit fields, the
 * encoding found by searching all 256 codes for the nearest value, ties to
 * the even code), its own f16 decoding and its own block walk (element by
 * element, each element's block found by division). Compared bit for bit,
 * at every instruction-set level this machine has (rs__simd_force), over
 * seeded random and adversarial inputs: every scheme, format and source
 * dtype, ragged edges in 1 to 3 dims, sub-boxes, zero and tiny blocks,
 * subnormals, values at and past the format's maximum, NaN and infinity
 * refused by block. Then the spec's text, its parser on hostile input and
 * the block shape's errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant_impl.h"
#include "core/simd.h"
#include "simd_levels.h"
#include "reshard/quant.h"

#define GUARD 64
#define GUARD_BYTE 0xA5

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t rnd_below(int64_t n)
{
    return (int64_t)(rnd64() % (uint64_t)n);
}

/* ---------------------------------------------------- the reference */

/* The value of an FP8 code from its fields; NaN for codes that are not
 * finite (e4m3fn: S.1111.111; e5m2: exponent all ones). */
static double ref_fp8_value(rs_dtype_t fmt, unsigned code)
{
    const int e4 = fmt == RS_DTYPE_F8E4M3;
    const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
    const unsigned emask = e4 ? 15 : 31;
    const unsigned e = (code >> mbits) & emask, m = code & ((1u << mbits) - 1);
    const double sign = (code & 0x80) ? -1.0 : 1.0;
    if (e4 && (code & 0x7f) == 0x7f)
        return NAN;
    if (!e4 && e == 31)
        return NAN;
    if (e == 0)
        return sign * ldexp((double)m, 1 - bias - mbits);
    return sign * ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
}

/* The values of codes 0..0x7f of each format, decoded once. */
static double ref_codes[2][0x80];
static int ref_codes_ready;

static const double *ref_table(rs_dtype_t fmt)
{
    if (!ref_codes_ready) {
        for (unsigned c = 0; c < 0x80; c++) {
            ref_codes[0][c] = ref_fp8_value(RS_DTYPE_F8E4M3, c);
            ref_codes[1][c] = ref_fp8_value(RS_DTYPE_F8E5M2, c);
        }
        ref_codes_ready = 1;
    }
    return ref_codes[fmt == RS_DTYPE_F8E4M3 ? 0 : 1];
}

/* Nearest finite code to v (finite), ties to the even code, which is the
 * even mantissa; past the largest code the largest (saturation). The sign
 * of v, zero included, is the code's sign. Exhaustive over the codes. */
static uint8_t ref_encode(rs_dtype_t fmt, float v)
{
    const double *val = ref_table(fmt);
    const double a = fabs((double)v);
    unsigned best = 0, last = 0;
    for (unsigned c = 1; c < 0x80 && !isnan(val[c]); c++) {
        last = c;
        if (val[c] <= a)
            best = c;
    }
    unsigned code = best;
    if (best < last && val[best] != a) {
        const double mid = (val[best] + val[best + 1]) / 2; /* exact */
        if (a > mid || (a == mid && (best & 1)))
            code = best + 1;
    }
    return (uint8_t)(code | (signbit(v) ? 0x80 : 0));
}

static float ref_fmax(rs_dtype_t fmt)
{
    return fmt == RS_DTYPE_F8E4M3 ? 448.0f : 57344.0f;
}

/* Source element i of a buffer of dtype dt, decoded from its fields. */
static float ref_load(rs_dtype_t dt, const unsigned char *s, size_t i)
{
    if (dt == RS_DTYPE_F32) {
        float f;
        memcpy(&f, s + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    if (dt == RS_DTYPE_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const unsigned e = (h >> 10) & 31, m = h & 1023;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31)
        return m ? NAN : (float)(sign * INFINITY);
    if (e == 0)
        return (float)(sign * ldexp((double)m, -24));
    return (float)(sign * ldexp((double)(1024 + m), (int)e - 25));
}

typedef struct ref_case {
    rs_quant_desc_t q;
    int64_t qblock[RS_MAX_DIMS];
    rs_dtype_t dt;
    int ndim;
    int64_t full[RS_MAX_DIMS], lo[RS_MAX_DIMS], box[RS_MAX_DIMS];
} ref_case_t;

/* The block extents, from the scheme's definition. */
static void ref_block(const ref_case_t *c, int64_t *block)
{
    for (int d = 0; d < c->ndim; d++) {
        const int64_t whole = c->full[d] > 0 ? c->full[d] : 1;
        if (c->q.scheme == RS_QUANT_FP8_TENSOR)
            block[d] = whole;
        else if (c->q.scheme == RS_QUANT_FP8_CHANNEL)
            block[d] = d == 0 ? 1 : whole;
        else {
            const int lead = c->ndim - c->q.block_ndim;
            block[d] = d < lead ? 1 : c->q.block[d - lead];
        }
    }
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a == 0 ? 0 : (a - 1) / b + 1;
}

/* The reference outputs, element by element. Returns the linear index of
 * the first non-finite block of the box's grid, or -1. */
static int64_t ref_quantize(const ref_case_t *c, const unsigned char *src,
                            uint8_t *q, float *scale, int64_t *nscale_out)
{
    int64_t block[RS_MAX_DIMS], grid[RS_MAX_DIMS], nel = 1, nblk = 1;
    ref_block(c, block);
    for (int d = 0; d < c->ndim; d++) {
        grid[d] = ceil_div(c->box[d], block[d]);
        nel *= c->box[d];
        nblk *= grid[d];
    }
    float *amax = calloc((size_t)nblk + 1, sizeof(float));
    int64_t *blk_of = malloc(((size_t)nel + 1) * sizeof(int64_t));
    int64_t bad = -1;
    for (int64_t i = 0; i < nel; i++) {
        int64_t rest = i, b = 0, mul = 1;
        for (int d = c->ndim - 1; d >= 0; d--) {
            b += (rest % c->box[d]) / block[d] * mul;
            mul *= grid[d];
            rest /= c->box[d];
        }
        blk_of[i] = b;
        const float x = ref_load(c->dt, src, (size_t)i);
        if (!isfinite(x)) {
            if (bad < 0 || b < bad)
                bad = b;
        } else if (fabsf(x) > amax[b])
            amax[b] = fabsf(x);
    }
    for (int64_t b = 0; b < nblk; b++) {
        const float s = amax[b] / ref_fmax(c->q.format);
        scale[b] = s == 0.0f ? 1.0f : s;
    }
    for (int64_t i = 0; bad < 0 && i < nel; i++) {
        const float x = ref_load(c->dt, src, (size_t)i);
        q[i] = ref_encode(c->q.format, x / scale[blk_of[i]]);
    }
    free(amax);
    free(blk_of);
    *nscale_out = nblk;
    return bad;
}

/* ------------------------------------------------------ test inputs */

static int64_t box_numel(const ref_case_t *c)
{
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++)
        n *= c->box[d];
    return n;
}

/* Random finite bits of dtype dt, exponent field drawn in [e0, e0 + w]
 * (clipped below the all-ones field); a few zeros of either sign. */
static void gen_values(rs_dtype_t dt, unsigned char *s, int64_t n, int e0,
                       int w)
{
    const int f32 = dt == RS_DTYPE_F32, bf = dt == RS_DTYPE_BF16;
    const int mbits = f32 ? 23 : bf ? 7 : 10, ebits = f32 || bf ? 8 : 5;
    const int emax = (1 << ebits) - 2;
    for (int64_t i = 0; i < n; i++) {
        int e = e0 + (int)rnd_below(w + 1);
        e = e < 0 ? 0 : e > emax ? emax : e;
        uint32_t bits = ((uint32_t)e << mbits) |
                        (uint32_t)(rnd64() & ((1u << mbits) - 1));
        if (rnd_below(16) == 0)
            bits = 0;
        bits |= (uint32_t)(rnd64() & 1) << (mbits + ebits);
        if (f32)
            memcpy(s + 4 * i, &bits, 4);
        else {
            const uint16_t h = (uint16_t)bits;
            memcpy(s + 2 * i, &h, 2);
        }
    }
}

/* Runs rs_quant_box at the active level into guarded outputs and compares
 * with the reference: the same status, and on success the same bytes and
 * scale bits, nothing written past the outputs. */
static void check_case(const ref_case_t *c, const unsigned char *src)
{
    const int64_t nel = box_numel(c);
    int64_t nblk = 0;
    uint8_t *rq = malloc((size_t)nel + 1);
    float *rs = malloc(((size_t)nel + 1) * sizeof(float));
    const int64_t bad = ref_quantize(c, src, rq, rs, &nblk);
    uint8_t *q = malloc((size_t)nel + GUARD);
    unsigned char *sc = malloc((size_t)nblk * 4 + GUARD);
    memset(q, GUARD_BYTE, (size_t)nel + GUARD);
    memset(sc, GUARD_BYTE, (size_t)nblk * 4 + GUARD);
    rs_diag_t diag = {0};
    const rs_status_t st =
        rs_quant_box(&c->q, c->dt, src, c->ndim, c->full, c->lo, c->box, "w",
                     &diag, q, (float *)(void *)sc);
    if (bad >= 0) {
        assert_int_equal(st, RS_ERR_INPUT);
        assert_non_null(strstr(diag.msg, "'w'"));
    } else {
        if (st != RS_OK)
            fail_msg("%s: %s", rs__simd_name(rs__simd_active()), diag.msg);
        for (int64_t i = 0; i < nel; i++) {
            if (q[i] != rq[i])
                fail_msg("%s src %s fmt %s scheme %d: element %lld: got 0x%02x "
                         "want 0x%02x (x = %a)",
                         rs__simd_name(rs__simd_active()), rs_dtype_name(c->dt),
                         rs_dtype_name(c->q.format), (int)c->q.scheme,
                         (long long)i, q[i], rq[i],
                         (double)ref_load(c->dt, src, (size_t)i));
        }
        assert_memory_equal(sc, rs, (size_t)nblk * 4);
    }
    for (int k = 0; k < GUARD; k++) {
        assert_int_equal(q[nel + k], GUARD_BYTE);
        assert_int_equal(sc[nblk * 4 + k], GUARD_BYTE);
    }
    free(rq);
    free(rs);
    free(q);
    free(sc);
}

static const rs_dtype_t src_dtypes[] = {RS_DTYPE_BF16, RS_DTYPE_F16,
                                        RS_DTYPE_F32};
static const rs_dtype_t formats[] = {RS_DTYPE_F8E4M3, RS_DTYPE_F8E5M2};

/* A random case: scheme, shape, block and a block-aligned box in it. */
static void random_case(ref_case_t *c, rs_quant_scheme_t scheme)
{
    static const int64_t blocks[] = {1, 3, 7, 16, 32, 33, 64, 128};
    memset(c, 0, sizeof(*c));
    c->ndim = 1 + (int)rnd_below(3);
    c->q.scheme = scheme;
    for (int d = 0; d < c->ndim; d++)
        c->full[d] = 1 + rnd_below(c->ndim == 1 ? 700 : c->ndim == 2 ? 300 : 40);
    if (scheme == RS_QUANT_FP8_BLOCK) {
        c->q.block_ndim = 1 + (int)rnd_below(c->ndim);
        for (int d = 0; d < c->q.block_ndim; d++)
            c->qblock[d] = blocks[rnd_below(8)];
        c->q.block = c->qblock;
    }
    int64_t block[RS_MAX_DIMS];
    ref_block(c, block);
    for (int d = 0; d < c->ndim; d++) {
        const int64_t g = ceil_div(c->full[d], block[d]);
        const int64_t g0 = rnd_below(g), g1 = g0 + 1 + rnd_below(g - g0);
        c->lo[d] = g0 * block[d];
        const int64_t end = g1 * block[d];
        c->box[d] = (end < c->full[d] ? end : c->full[d]) - c->lo[d];
    }
}

static unsigned char *random_source(const ref_case_t *c)
{
    const int64_t n = box_numel(c);
    unsigned char *s = malloc((size_t)n * rs_dtype_size(c->dt) + 1);
    const int f16 = c->dt == RS_DTYPE_F16;
    const int e0 = (int)rnd_below(f16 ? 28 : 250), w = (int)rnd_below(f16 ? 8 : 30);
    gen_values(c->dt, s, n, e0, w);
    return s;
}

static void test_random(void **state)
{
    (void)state;
    static const rs_quant_scheme_t schemes[] = {
        RS_QUANT_FP8_BLOCK, RS_QUANT_FP8_CHANNEL, RS_QUANT_FP8_TENSOR};
    rng_state = 20260101;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (int iter = 0; iter < 40; iter++) {
            for (int si = 0; si < 3; si++) {
                ref_case_t c;
                random_case(&c, schemes[si]);
                c.q.format = formats[iter % 2];
                c.dt = src_dtypes[(iter / 2) % 3];
                unsigned char *s = random_source(&c);
                check_case(&c, s);
                free(s);
            }
        }
    }
}

/* ---------------------------------------------------- adversarial */

static void set_f32(unsigned char *s, size_t i, float v)
{
    memcpy(s + 4 * i, &v, 4);
}

static void one_d_case(ref_case_t *c, rs_dtype_t fmt, rs_dtype_t dt,
                       int64_t n, int64_t block)
{
    memset(c, 0, sizeof(*c));
    c->q.scheme = RS_QUANT_FP8_BLOCK;
    c->q.format = fmt;
    c->q.block_ndim = 1;
    c->qblock[0] = block;
    c->q.block = c->qblock;
    c->dt = dt;
    c->ndim = 1;
    c->full[0] = c->box[0] = n;
}

/* Runs one 1-D f32 case and returns the outputs for spot checks. */
static void run_f32(const ref_case_t *c, unsigned char *s, uint8_t *q,
                    float *scale)
{
    rs_diag_t diag = {0};
    check_case(c, s);
    assert_int_equal(rs_quant_box(&c->q, c->dt, s, 1, c->full, c->lo, c->box,
                                  "w", &diag, q, scale), RS_OK);
}

/* All-zero blocks get scale 1.0 and keep each zero's sign; a block of
 * values too small for a nonzero scale gets 1.0 too (and its values round
 * to signed zeros); one just big enough gets the smallest subnormal. */
static void test_zero_and_tiny_blocks(void **state)
{
    (void)state;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (int f = 0; f < 2; f++) {
            const float fmax = ref_fmax(formats[f]);
            ref_case_t c;
            one_d_case(&c, formats[f], RS_DTYPE_F32, 4 * 40, 40);
            unsigned char s[4 * 160];
            uint8_t q[160];
            float scale[4];
            for (int i = 0; i < 160; i++)
                set_f32(s, (size_t)i, (i % 3) ? 0.0f : -0.0f);
            /* block 1: the smallest subnormal only: amax / fmax rounds to 0 */
            set_f32(s, 45, 0x1p-149f);
            set_f32(s, 46, -0x1p-149f);
            /* block 2: fmax * 2^-149 exactly: the scale is 2^-149 */
            set_f32(s, 85, fmax * 0x1p-149f);
            set_f32(s, 86, -0x1p-149f);
            /* block 3: f32 subnormals of several sizes */
            for (int i = 120; i < 160; i++)
                set_f32(s, (size_t)i, (float)(i - 139) * 0x1p-134f);
            run_f32(&c, s, q, scale);
            assert_true(scale[0] == 1.0f && scale[1] == 1.0f);
            assert_true(scale[2] == 0x1p-149f);
            assert_true(scale[3] > 0.0f && scale[3] < 0x1p-126f);
            assert_int_equal(q[0], 0x80);
            assert_int_equal(q[1], 0x00);
            assert_int_equal(q[45], 0x00);
            assert_int_equal(q[46], 0x80);
            assert_int_equal(q[85], (uint8_t)rs__quant_format_top[f]);
            /* -2^-149 / 2^-149 = -1: a normal code */
            assert_int_equal(q[86], ref_encode(formats[f], -1.0f));
        }
    }
}

/* Each level's encoder, with scale 1 so the division is exact, over f32
 * values from below the formats' subnormals to past twice their maximum,
 * 2^-10 apart with a few ulps either side (so every midpoint of both
 * formats, and its neighbours), both signs: round to nearest even and
 * saturation (e5m2 too) exactly as the reference. */
static void test_encoder_sweep_f32(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N), *want = malloc(N);
    for (int f = 0; f < 2; f++) {
        for (int chunk = 0; chunk < 9; chunk++) {
            for (int i = 0; i < N; i++) {
                const int e = -18 + chunk * 4 + (i >> 14);
                const int m = (i >> 1) & 0x1fff;
                x[i] = ldexpf(1.0f + (float)(m >> 3) * 0x1p-10f +
                                  (float)((m & 7) - 3) * 0x1p-23f, e);
                if (i & 1)
                    x[i] = -x[i];
                want[i] = ref_encode(formats[f], x[i]);
            }
            for (int lv = 0; lv < simd_nlevels(); lv++) {
                const rs__quant_ops_t *ops = rs__quant_ops((rs__simd_t)lv);
                ops->enc[RS__QUANT_SOURCE_F32][f](q, x, N, 1.0f);
                for (int i = 0; i < N; i++) {
                    if (q[i] != want[i])
                        fail_msg("%s %s: x = %a: got 0x%02x want 0x%02x",
                                 rs__simd_name((rs__simd_t)lv),
                                 rs_dtype_name(formats[f]), (double)x[i],
                                 q[i], want[i]);
                }
            }
        }
    }
    /* values past the maximum saturate, unlike a plain cast to e5m2 */
    assert_int_equal(rs__quant_enc(RS__QFMT_E5M2, 57344.0f * 1.01f), 0x7b);
    assert_int_equal(rs__quant_enc(RS__QFMT_E5M2, -61440.0f), 0xfb);
    assert_int_equal(rs__quant_enc(RS__QFMT_E4M3, 464.0f), 0x7e);
    assert_int_equal(rs__quant_enc(RS__QFMT_E4M3, 447.0f), 0x7e);
    free(x);
    free(q);
    free(want);
}

/* Each level's bf16 and f16 encoders over every finite 16-bit pattern
 * (both signs, subnormals), under scales that make some values overflow
 * the format, some land in its subnormals, and one that is itself an f32
 * subnormal. Starting offsets 0..3 move the vector loop against the row. */
static void test_encoder_sweep_16(void **state)
{
    (void)state;
    static const float scales[] = {1.0f, 0x1p-12f, 3.0f / 448.0f, 700.0f,
                                   0x1p-140f};
    enum { N = 1 << 16 };
    uint16_t *x = malloc(N * sizeof(uint16_t));
    uint8_t *q = malloc(N), *want = malloc(N);
    for (int dt = 0; dt < 2; dt++) {
        const rs_dtype_t src = dt == 0 ? RS_DTYPE_BF16 : RS_DTYPE_F16;
        size_t n = 0;
        for (uint32_t b = 0; b < N; b++) {
            const uint16_t h = (uint16_t)b;
            if (isfinite(ref_load(src, (const unsigned char *)&h, 0)))
                x[n++] = h;
        }
        for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++) {
            for (int f = 0; f < 2; f++) {
                for (size_t i = 0; i < n; i++)
                    want[i] = ref_encode(formats[f],
                                         ref_load(src, (const unsigned char *)x,
                                                  i) / scales[k]);
                for (int lv = 0; lv < simd_nlevels(); lv++) {
                    const rs__quant_ops_t *ops = rs__quant_ops((rs__simd_t)lv);
                    const size_t off = (size_t)lv % 4;
                    ops->enc[dt == 0 ? RS__QUANT_SOURCE_BF16 : RS__QUANT_SOURCE_F16][f](
                        q + off, x + off, n - off, scales[k]);
                    for (size_t i = off; i < n; i++) {
                        if (q[i] != want[i])
                            fail_msg("%s %s -> %s scale %a: 0x%04x: got 0x%02x "
                                     "want 0x%02x", rs__simd_name((rs__simd_t)lv),
                                     rs_dtype_name(src), rs_dtype_name(formats[f]),
                                     (double)scales[k], x[i], q[i], want[i]);
                    }
                }
            }
        }
        /* the amax kernels: every finite pattern, then one NaN or inf */
        for (int lv = 0; lv < simd_nlevels(); lv++) {
            const rs__quant_ops_t *ops = rs__quant_ops((rs__simd_t)lv);
            const int si = dt == 0 ? RS__QUANT_SOURCE_BF16 : RS__QUANT_SOURCE_F16;
            assert_int_equal(ops->amax[si](x, n), dt == 0 ? 0x7f7f : 0x7bff);
            assert_int_equal(ops->amax[si](x, 1000), 1000 - 1);
            assert_int_equal(ops->amax[si](x, 0), 0);
        }
    }
    free(x);
    free(q);
    free(want);
}

/* The vector encoders multiply by 1 / scale where that provably gives the
 * division's code and divide where it might not (near a rounding
 * midpoint, in the subnormal range). Scales whose reciprocal is inexact,
 * drawn at random in [2^-20, 2^4), over every finite bf16 and f16 pattern
 * and f32 values put on and around every midpoint under that scale; bf16
 * values under scales that put them on each midpoint; and the documented
 * example where x * (1 / scale) misses the midpoint 368 that x / scale
 * hits. */
static void check_encoder(int lv, int si, int f, const void *x, size_t n,
                          float scale, const uint8_t *want, uint8_t *q)
{
    const rs__quant_ops_t *ops = rs__quant_ops((rs__simd_t)lv);
    ops->enc[si][f](q, x, n, scale);
    for (size_t i = 0; i < n; i++)
        if (q[i] != want[i])
            fail_msg("%s source %d %s scale %a: element %zu: got 0x%02x "
                     "want 0x%02x", rs__simd_name((rs__simd_t)lv), si,
                     rs_dtype_name(formats[f]), (double)scale, i, q[i],
                     want[i]);
}

static void test_encoder_reciprocal(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    uint16_t *h = malloc(N * sizeof(uint16_t));
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N), *want = malloc(N);
    rng_state = 77;
    for (int k = 0; k < 6; k++) {
        const float scale = ldexpf(1.0f + (float)(rnd64() % 8388607 + 1) * 0x1p-23f,
                                   (int)(rnd64() % 24) - 20);
        for (int f = 0; f < 2; f++) {
            for (int dt = 0; dt < 2; dt++) {
                const rs_dtype_t src = dt == 0 ? RS_DTYPE_BF16 : RS_DTYPE_F16;
                size_t n = 0;
                for (uint32_t b = 0; b < N; b++) {
                    const uint16_t v = (uint16_t)b;
                    if (isfinite(ref_load(src, (const unsigned char *)&v, 0)))
                        h[n++] = v;
                }
                for (size_t i = 0; i < n; i++)
                    want[i] = ref_encode(formats[f],
                                         ref_load(src, (const unsigned char *)h,
                                                  i) / scale);
                for (int lv = 0; lv < simd_nlevels(); lv++)
                    check_encoder(lv, dt == 0 ? RS__QUANT_SOURCE_BF16
                                              : RS__QUANT_SOURCE_F16,
                                  f, h, n, scale, want, q);
            }
            /* f32: each code's value and each midpoint times the scale,
             * and 7 ulps either side of it, both signs */
            const double *val = ref_table(formats[f]);
            size_t n = 0;
            for (unsigned c = 0; c + 1 < 0x80 && !isnan(val[c + 1]); c++) {
                const double pts[2] = {val[c], (val[c] + val[c + 1]) / 2};
                for (int p = 0; p < 2; p++) {
                    const float base = (float)(pts[p] * (double)scale);
                    for (int u = -7; u <= 7 && n + 2 <= N; u++) {
                        uint32_t bits;
                        memcpy(&bits, &base, 4);
                        if ((int64_t)bits + u < 0)
                            continue; /* below zero: not a magnitude */
                        bits = (uint32_t)((int64_t)bits + u);
                        memcpy(&x[n], &bits, 4);
                        x[n + 1] = -x[n];
                        n += 2;
                    }
                }
            }
            for (size_t i = 0; i < n; i++)
                want[i] = ref_encode(formats[f], x[i] / scale);
            for (int lv = 0; lv < simd_nlevels(); lv++)
                check_encoder(lv, RS__QUANT_SOURCE_F32, f, x, n, scale, want, q);
        }
    }
    /* bf16 values put on every midpoint by their scale (scale = v / mid,
     * rounded), so x / scale is on or an ulp beside it and x * (1 / scale)
     * often on the other side; runs of 32 so the vector loops take them */
    static const uint16_t vals[] = {0x3f80, 0x3fc0, 0x3f62, 0x4049, 0xbf35,
                                    0x3e9b, 0x42f7, 0x3c23};
    for (int f = 0; f < 2; f++) {
        const double *val = ref_table(formats[f]);
        for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
            for (unsigned c = 0; c + 1 < 0x80 && !isnan(val[c + 1]); c++) {
                const float xv = ref_load(RS_DTYPE_BF16,
                                          (const unsigned char *)&vals[v], 0);
                const float sc = fabsf(xv) / (float)((val[c] + val[c + 1]) / 2);
                if (!(sc > 0x1p-126f) || !isfinite(sc))
                    continue;
                for (int i = 0; i < 32; i++)
                    h[i] = vals[v];
                memset(want, ref_encode(formats[f], xv / sc), 32);
                for (int lv = 0; lv < simd_nlevels(); lv++)
                    check_encoder(lv, RS__QUANT_SOURCE_BF16, f, h, 32, sc,
                                  want, q);
            }
        }
    }
    /* docs/quantized-refit.md's example, in a run of 32 so vectors take it */
    const float scale = 0x1.39a9f4p-9f;
    for (int i = 0; i < 32; i++)
        x[i] = 0x1.c2e44ep-1f;
    memset(want, 0x7c, 32);
    for (int lv = 0; lv < simd_nlevels(); lv++)
        check_encoder(lv, RS__QUANT_SOURCE_F32, 0, x, 32, scale, want, q);
    free(h);
    free(x);
    free(q);
    free(want);
}

/* The f32 fast path's margin around rounding midpoints. Values whose
 * product with the rounded reciprocal lies on the other side of a
 * midpoint than their quotient (or on it while the quotient is not, or
 * the reverse): the product a bit pattern above the midpoint and the
 * quotient below, and the reverse, both signs, under random scales whose
 * reciprocals are inexact; each scale's values in runs of at least 32 so
 * the vector loops take them. The test checks it found both kinds, so a
 * margin that covers only one side of a midpoint, or only the midpoint
 * itself, fails here. */
static size_t margin_cases(rs_dtype_t fmt, float scale, float *x, size_t cap,
                           int *above, int *below)
{
    const double *val = ref_table(fmt);
    const float r = 1.0f / scale;
    size_t n = 0;
    for (unsigned c = 0; c + 1 < 0x80 && !isnan(val[c + 1]); c++) {
        const float mid = (float)((val[c] + val[c + 1]) / 2); /* exact */
        const float base = (float)((double)mid * (double)scale);
        for (int u = -4; u <= 4 && n + 2 <= cap; u++) {
            uint32_t bits;
            memcpy(&bits, &base, 4);
            bits = (uint32_t)((int64_t)bits + u);
            float v;
            memcpy(&v, &bits, 4);
            const float p = v * r, q = v / scale;
            if ((p > mid) == (q > mid) && (p < mid) == (q < mid))
                continue; /* the same side: not a margin case */
            *above += p > mid;
            *below += p < mid;
            x[n] = v;
            x[n + 1] = -v;
            n += 2;
        }
    }
    return n;
}

static void test_encoder_margin(void **state)
{
    (void)state;
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N), *want = malloc(N);
    rng_state = 2027;
    for (int f = 0; f < 2; f++) {
        int above = 0, below = 0;
        for (int k = 0; k < 64; k++) {
            const float scale = ldexpf(1.0f + (float)(rnd64() % 8388607 + 1) *
                                                  0x1p-23f,
                                       (int)(rnd64() % 24) - 20);
            size_t n = margin_cases(formats[f], scale, x, N, &above, &below);
            if (n == 0)
                continue;
            for (size_t i = n; i < 32; i++)
                x[i] = x[i % n];
            n = n < 32 ? 32 : n;
            for (size_t i = 0; i < n; i++)
                want[i] = ref_encode(formats[f], x[i] / scale);
            for (int lv = 0; lv < simd_nlevels(); lv++)
                check_encoder(lv, RS__QUANT_SOURCE_F32, f, x, n, scale, want, q);
        }
        assert_true(above > 0);
        assert_true(below > 0);
    }
    free(x);
    free(q);
    free(want);
}

/* One margin value among certain ones: the f32 encoders check a whole
 * segment's lanes once, at its end, so a single uncertain lane in a
 * segment's last step (or in the second segment of a row) must still
 * send that segment to the division. Each margin value is put last in
 * runs of 128 and 256 whose other lanes are 1.5 times the scale (certain:
 * a code's value, far from every midpoint), encoded as one segment and as
 * a row of two 128-wide segments. */
static void test_encoder_late_margin(void **state)
{
    (void)state;
    enum { N = 4096, W = 256 };
    float *m = malloc(N * sizeof(float)), *x = malloc(W * sizeof(float));
    uint8_t *q = malloc(W), *want = malloc(W);
    rng_state = 2029;
    int tried = 0;
    for (int f = 0; f < 2; f++) {
        for (int k = 0; k < 16; k++) {
            const float scale = ldexpf(1.0f + (float)(rnd64() % 8388607 + 1) *
                                                  0x1p-23f,
                                       (int)(rnd64() % 24) - 20);
            int above = 0, below = 0;
            const size_t n = margin_cases(formats[f], scale, m, N, &above,
                                          &below);
            const float scales[2] = {scale, scale};
            for (size_t c = 0; c < n; c += 7) {
                for (size_t i = 0; i < W; i++)
                    x[i] = 1.5f * scale;
                x[W / 2 - 1] = m[c];
                x[W - 1] = m[c];
                for (size_t i = 0; i < W; i++)
                    want[i] = ref_encode(formats[f], x[i] / scale);
                for (int lv = 0; lv < simd_nlevels(); lv++) {
                    const rs__quant_ops_t *ops = rs__quant_ops((rs__simd_t)lv);
                    check_encoder(lv, RS__QUANT_SOURCE_F32, f, x, W / 2, scale,
                                  want, q);
                    memset(q, 0, W);
                    ops->enc_row[RS__QUANT_SOURCE_F32][f](q, x, W, W / 2,
                                                          scales, NULL, x);
                    assert_memory_equal(q, want, W);
                }
                tried++;
            }
        }
    }
    assert_true(tried > 0);
    free(m);
    free(x);
    free(q);
    free(want);
}

/* A block whose amax / scale lands just above fmax (the scale rounded
 * down): the block's largest element saturates to the maximum code. */
static void test_round_past_max(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        const float fmax = ref_fmax(formats[f]);
        float amax = 1.0f;
        int found = 0;
        for (int k = 0; k < 100000 && !found; k++) {
            amax = nextafterf(amax, 2.0f);
            found = amax / (amax / fmax) > fmax;
        }
        assert_true(found);
        for (int lv = 0; lv < simd_nlevels(); lv++) {
            rs__simd_force((rs__simd_t)lv);
            ref_case_t c;
            one_d_case(&c, formats[f], RS_DTYPE_F32, 64, 64);
            unsigned char s[4 * 64];
            uint8_t q[64];
            float scale[1];
            for (int i = 0; i < 64; i++)
                set_f32(s, (size_t)i, amax * (float)(i - 32) / 32.0f);
            set_f32(s, 63, amax);
            run_f32(&c, s, q, scale);
            assert_int_equal(q[0], 0x80 | rs__quant_format_top[f]);
            assert_int_equal(q[63], rs__quant_format_top[f]);
        }
    }
}

/* A subnormal scale is coarse: amax = 85443 * 2^-149 into e5m2 gives
 * amax / 57344 = 1.49 * 2^-149, rounded to the scale 2^-149, so the
 * block's largest q is 85443, past e5m2's midpoint to infinity (61440):
 * saturated to 57344 (0x7b), where the plain cast gives infinity (0x7c). */
static void test_coarse_scale_saturates(void **state)
{
    (void)state;
    const float amax = 85443.0f * 0x1p-149f;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        ref_case_t c;
        one_d_case(&c, RS_DTYPE_F8E5M2, RS_DTYPE_F32, 40, 40);
        unsigned char s[4 * 40];
        uint8_t q[40];
        float scale[1];
        for (int i = 0; i < 40; i++)
            set_f32(s, (size_t)i, (float)(i - 20) * 0x1p-149f);
        set_f32(s, 3, amax);
        set_f32(s, 4, -amax);
        run_f32(&c, s, q, scale);
        assert_true(scale[0] == 0x1p-149f);
        assert_int_equal(q[3], 0x7b);
        assert_int_equal(q[4], 0xfb);
        assert_int_equal(rs__f32_to_e5m2(amax / scale[0]), 0x7c);
    }
}

/* Ragged edges and sub-boxes in 1, 2 and 3 dims, every dtype and format,
 * random values; blocks larger than the tensor. */
static void test_ragged_boxes(void **state)
{
    (void)state;
    static const struct {
        int ndim;
        int64_t full[3], block[3], lo[3], box[3];
    } cases[] = {
        {1, {300}, {128}, {0}, {300}},
        {1, {300}, {128}, {256}, {44}},
        {1, {300}, {128}, {128}, {128}},
        {2, {300, 200}, {128, 128}, {0, 0}, {300, 200}},
        {2, {300, 200}, {128, 128}, {128, 128}, {172, 72}},
        {2, {300, 200}, {128, 128}, {256, 0}, {44, 128}},
        {2, {5, 7}, {2, 3}, {2, 3}, {3, 4}},
        {3, {5, 33, 20}, {4, 16, 8}, {4, 16, 8}, {1, 17, 12}},
        {3, {5, 33, 20}, {4, 16, 8}, {0, 0, 0}, {5, 33, 20}},
        /* a block far larger than the tensor: one ragged block */
        {2, {5, 7}, {INT64_MAX, 3}, {0, 3}, {5, 4}},
        {1, {300}, {INT64_MAX}, {0}, {300}},
    };
    rng_state = 7;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            for (int t = 0; t < 6; t++) {
                ref_case_t c;
                memset(&c, 0, sizeof(c));
                c.q.scheme = RS_QUANT_FP8_BLOCK;
                c.q.format = formats[t % 2];
                c.dt = src_dtypes[t / 2];
                c.ndim = c.q.block_ndim = cases[k].ndim;
                c.q.block = c.qblock;
                for (int d = 0; d < c.ndim; d++) {
                    c.full[d] = cases[k].full[d];
                    c.qblock[d] = cases[k].block[d];
                    c.lo[d] = cases[k].lo[d];
                    c.box[d] = cases[k].box[d];
                }
                unsigned char *s = random_source(&c);
                check_case(&c, s);
                free(s);
            }
        }
    }
}

/* Puts a NaN or infinity of dtype dt at box element i. */
static void put_nonfinite(rs_dtype_t dt, unsigned char *s, int64_t i, int kind)
{
    static const uint32_t f32[] = {0x7fc00000u, 0x7f800000u, 0xff800000u,
                                   0x7f800001u};
    static const uint16_t bf[] = {0x7fc0, 0x7f80, 0xff80, 0x7f81};
    static const uint16_t hf[] = {0x7e00, 0x7c00, 0xfc00, 0x7c01};
    if (dt == RS_DTYPE_F32)
        memcpy(s + 4 * i, &f32[kind], 4);
    else
        memcpy(s + 2 * i, dt == RS_DTYPE_BF16 ? &bf[kind] : &hf[kind], 2);
}

/* A NaN or infinity anywhere refuses the call, naming the tensor and the
 * block by its index in the full tensor's grid and its elements. */
static void test_nonfinite_refused(void **state)
{
    (void)state;
    rng_state = 99;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (int t = 0; t < 12; t++) {
            ref_case_t c;
            memset(&c, 0, sizeof(c));
            c.q.scheme = RS_QUANT_FP8_BLOCK;
            c.q.format = formats[t % 2];
            c.dt = src_dtypes[(t / 2) % 3];
            c.ndim = c.q.block_ndim = 2;
            c.q.block = c.qblock;
            c.qblock[0] = c.qblock[1] = 32;
            c.full[0] = 100;
            c.full[1] = 90;
            c.lo[0] = 32;
            c.lo[1] = 64;
            c.box[0] = 68;
            c.box[1] = 26;
            unsigned char *s = random_source(&c);
            /* box element (40, 21) is (72, 85) of the tensor: block [2, 2],
             * rows 64:96 and the ragged columns 64:90 */
            put_nonfinite(c.dt, s, 40 * 26 + 21, t % 4);
            check_case(&c, s);
            uint8_t q[68 * 26];
            float scale[3];
            rs_diag_t diag = {0};
            assert_int_equal(rs_quant_box(&c.q, c.dt, s, 2, c.full, c.lo, c.box,
                                          "layers.0.w", &diag, q, scale),
                             RS_ERR_INPUT);
            assert_non_null(strstr(diag.msg, "'layers.0.w'"));
            assert_non_null(strstr(diag.msg, "block [2, 2]"));
            assert_non_null(strstr(diag.msg, "[64:96, 64:90]"));
            free(s);
        }
    }
}

/* Bands wider than one chunk (CHUNK_MAX_BLOCKS blocks), 1-D and 2-D, at
 * every level; then non-finite values in two blocks of a later chunk: the
 * first of them in grid order is the one named. */
static void test_many_chunks(void **state)
{
    (void)state;
    static const struct {
        int ndim;
        int64_t full[2], block[2];
    } cases[] = {
        {1, {128 * 300 + 77}, {128}},
        {2, {3, 128 * 200 + 5}, {2, 128}},
        {2, {300, 5000}, {1, 16}},
    };
    rng_state = 31;
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            ref_case_t c;
            memset(&c, 0, sizeof(c));
            c.q.scheme = RS_QUANT_FP8_BLOCK;
            c.q.format = formats[k % 2];
            c.dt = src_dtypes[k % 3];
            c.ndim = c.q.block_ndim = cases[k].ndim;
            c.q.block = c.qblock;
            for (int d = 0; d < c.ndim; d++) {
                c.full[d] = c.box[d] = cases[k].full[d];
                c.qblock[d] = cases[k].block[d];
            }
            unsigned char *s = random_source(&c);
            check_case(&c, s);
            free(s);
        }
    }
    ref_case_t c;
    memset(&c, 0, sizeof(c));
    c.q.scheme = RS_QUANT_FP8_BLOCK;
    c.q.format = RS_DTYPE_F8E4M3;
    c.dt = RS_DTYPE_BF16;
    c.ndim = c.q.block_ndim = 1;
    c.q.block = c.qblock;
    c.qblock[0] = 128;
    c.full[0] = c.box[0] = 128 * 300;
    unsigned char *s = random_source(&c);
    put_nonfinite(c.dt, s, 128 * 270 + 5, 1);  /* block 270 */
    put_nonfinite(c.dt, s, 128 * 200 + 99, 0); /* block 200: named */
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        check_case(&c, s);
        uint8_t *q = malloc(128 * 300);
        float scale[300];
        rs_diag_t diag = {0};
        assert_int_equal(rs_quant_box(&c.q, c.dt, s, 1, c.full, c.lo, c.box,
                                      "w", &diag, q, scale), RS_ERR_INPUT);
        assert_non_null(strstr(diag.msg, "block [200] (elements [25600:25728])"));
        free(q);
    }
    free(s);
}

#if defined(__SSE2__)
#include <xmmintrin.h>

/* A thread running with flush-to-zero, denormals-are-zero and round toward
 * zero still quantizes by the rule (subnormal scales, subnormal inputs and
 * FP8 subnormals as the reference computes them under IEEE defaults), and
 * gets its control bits back. */
static void test_control_bits(void **state)
{
    (void)state;
    ref_case_t c;
    one_d_case(&c, RS_DTYPE_F8E4M3, RS_DTYPE_F32, 256, 64);
    unsigned char s[4 * 256];
    for (int i = 0; i < 256; i++)
        set_f32(s, (size_t)i, (float)(i - 100) * (i < 128 ? 0x1p-140f : 0x1p-3f));
    set_f32(s, 200, 448.0f * 0x1p-2f);
    int64_t nblk;
    uint8_t want[256], got[256];
    float want_scale[4], got_scale[4];
    assert_int_equal(ref_quantize(&c, s, want, want_scale, &nblk), -1);
    const unsigned csr = _mm_getcsr();
    for (int lv = 0; lv < simd_nlevels(); lv++) {
        rs__simd_force((rs__simd_t)lv);
        const unsigned odd = (csr & ~0xe040u) | 0x8040u | 0x6000u;
        _mm_setcsr(odd);
        rs_diag_t diag = {0};
        const rs_status_t st = rs_quant_box(&c.q, c.dt, s, 1, c.full, c.lo,
                                            c.box, "w", &diag, got, got_scale);
        const unsigned after = _mm_getcsr();
        _mm_setcsr(csr);
        assert_int_equal(st, RS_OK);
        assert_int_equal(after, odd);
        assert_memory_equal(got, want, sizeof(want));
        assert_memory_equal(got_scale, want_scale, sizeof(want_scale));
    }
}
#endif

static rs_status_t quant_2d(const rs_quant_desc_t *q, rs_dtype_t dt,
                            const int64_t *full, int64_t lo0, int64_t lo1,
                            int64_t n0, int64_t n1, rs_diag_t *diag)
{
    static uint16_t src[64 * 64];
    static uint8_t out[64 * 64];
    static float scale[64 * 64];
    const int64_t lo[2] = {lo0, lo1}, box[2] = {n0, n1};
    return rs_quant_box(q, dt, src, 2, full, lo, box, "t", diag, out, scale);
}

/* Boxes that cut a block, leave the tensor, or bring a dtype that is not
 * quantized are refused, naming the tensor and the dim. */
static void test_bad_boxes(void **state)
{
    (void)state;
    const int64_t block[2] = {8, 16}, full[2] = {20, 40};
    const rs_quant_desc_t q = {.scheme = RS_QUANT_FP8_BLOCK,
                               .format = RS_DTYPE_F8E4M3,
                               .block_ndim = 2,
                               .block = block};
    rs_diag_t diag = {0};
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, 0, 0, 20, 40, &diag),
                     RS_OK);
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, 8, 32, 12, 8, &diag),
                     RS_OK);
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, 4, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "'t': box dim 0 [4, 12)"));
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, 0, 0, 8, 20, &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "box dim 1 [0, 20)"));
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, 16, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "outside the tensor"));
    assert_int_equal(quant_2d(&q, RS_DTYPE_BF16, full, -8, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    assert_int_equal(quant_2d(&q, RS_DTYPE_F64, full, 0, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "f64"));
    assert_int_equal(quant_2d(&q, RS_DTYPE_I8, full, 0, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    /* an empty box writes nothing and succeeds */
    uint8_t out = 0x5a;
    float sc = 2.0f;
    const int64_t lo[2] = {8, 16}, box[2] = {0, 16};
    assert_int_equal(rs_quant_box(&q, RS_DTYPE_BF16, NULL, 2, full, lo, box,
                                  "t", &diag, &out, &sc), RS_OK);
    assert_int_equal(out, 0x5a);
    /* the spec itself is checked */
    const rs_quant_desc_t bad = {.scheme = RS_QUANT_FP8_BLOCK,
                                 .format = RS_DTYPE_BF16,
                                 .block_ndim = 2,
                                 .block = block};
    assert_int_equal(quant_2d(&bad, RS_DTYPE_BF16, full, 0, 0, 8, 16, &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "quantizing 't': quant.format"));
    /* refused without a diag too */
    const int64_t lo0[2] = {0, 0}, box8[2] = {8, 16};
    uint8_t q8[8 * 16];
    float s8[1];
    static const uint16_t zeros[8 * 16];
    assert_int_equal(rs_quant_box(&bad, RS_DTYPE_BF16, zeros, 2, full, lo0,
                                  box8, "t", NULL, q8, s8), RS_ERR_INPUT);
    assert_int_equal(rs_quant_box(&q, RS_DTYPE_BF16, zeros, 2, full, lo0,
                                  box8, "t", NULL, q8, s8), RS_OK);
    assert_true(s8[0] == 1.0f);
}

/* A 0-d tensor is one block of one element. */
static void test_scalar_tensor(void **state)
{
    (void)state;
    const rs_quant_desc_t q = {.scheme = RS_QUANT_FP8_TENSOR,
                               .format = RS_DTYPE_F8E4M3};
    const float x = -3.0f;
    uint8_t out = 0;
    float sc = 0.0f;
    rs_diag_t diag = {0};
    assert_int_equal(rs_quant_box(&q, RS_DTYPE_F32, &x, 0, NULL, NULL, NULL,
                                  "s", &diag, &out, &sc), RS_OK);
    assert_true(sc == 3.0f / 448.0f);
    assert_int_equal(out, ref_encode(RS_DTYPE_F8E4M3, x / sc));
}

/* ------------------------------------------------------------- specs */

static void test_spec_text(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "fp8_block:128x128:f8e4m3", "fp8_block:1x128:f8e5m2",
        "fp8_block:64:f8e4m3", "fp8_block:2x3x4:f8e5m2",
        "fp8_channel:f8e4m3", "fp8_channel:f8e5m2", "fp8_tensor:f8e4m3",
        "fp8_tensor:f8e5m2", "fp8_block:9223372036854775807:f8e4m3"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        int64_t store[RS_MAX_DIMS];
        rs_quant_desc_t q;
        rs_diag_t diag = {0};
        char out[128];
        assert_int_equal(rs_quant_spec_parse(texts[i], store, &diag, &q), RS_OK);
        assert_null(q.scale_param);
        assert_int_equal(q.scale_ndim, 0);
        assert_int_equal(rs_quant_spec_format(&q, out, sizeof(out)),
                         strlen(texts[i]));
        assert_string_equal(out, texts[i]);
    }
    int64_t store[RS_MAX_DIMS];
    rs_quant_desc_t q;
    assert_int_equal(rs_quant_spec_parse("fp8_block:128x64:f8e5m2", store, NULL,
                                         &q), RS_OK);
    assert_int_equal(q.scheme, RS_QUANT_FP8_BLOCK);
    assert_int_equal(q.format, RS_DTYPE_F8E5M2);
    assert_int_equal(q.block_ndim, 2);
    assert_ptr_equal(q.block, store);
    assert_int_equal(store[0], 128);
    assert_int_equal(store[1], 64);
    /* a short buffer gets a cut, terminated text and the full length */
    char small[8];
    assert_int_equal(rs_quant_spec_format(&q, small, sizeof(small)), 23);
    assert_string_equal(small, "fp8_blo");
    assert_int_equal(rs_quant_spec_format(&q, NULL, 0), 23);
    /* an invalid spec has no text */
    q.block_ndim = 0;
    assert_int_equal(rs_quant_spec_format(&q, small, sizeof(small)), 0);
    q.scheme = RS_QUANT_NONE;
    assert_int_equal(rs_quant_spec_format(&q, small, sizeof(small)), 0);
}

static void test_spec_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *text, *names;
    } bad[] = {
        {"fp8_block:0x128:f8e4m3", "block[0]"},
        {"fp8_block:128x:f8e4m3", "block[1]"},
        {"fp8_block:128x0:f8e4m3", "block[1]"},
        {"fp8_block:0128:f8e4m3", "leading zero"},
        {"fp8_block:+128:f8e4m3", "block[0]"},
        {"fp8_block:-1:f8e4m3", "block[0]"},
        {"fp8_block:128 :f8e4m3", "after block[0]"},
        {"fp8_block:f8e4m3", "block[0]"},
        {"fp8_block:128x128", "after block[1]"},
        {"fp8_block:9223372036854775808:f8e4m3", "overflows"},
        {"fp8_block:99999999999999999999999x1:f8e4m3", "overflows"},
        {"fp8_block:1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1:f8e4m3", "more than 16"},
        {"fp8_row:f8e4m3", "scheme"},
        {"FP8_TENSOR:f8e4m3", "scheme"},
        {"fp8_tensor", "scheme"},
        {"", "scheme"},
        {"fp8_tensor:e4m3", "format"},
        {"fp8_tensor:float8_e4m3fn", "format"},
        {"fp8_tensor:bf16", "format"},
        {"fp8_tensor:f8e4m3x", "format"},
        {"fp8_tensor:f8e4m3:", "format"},
        {"fp8_channel:128:f8e4m3", "format"},
        {"fp8_tensor:", "format"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t store[RS_MAX_DIMS];
        rs_quant_desc_t q;
        memset(&q, 0x5a, sizeof(q));
        rs_diag_t diag = {0};
        const rs_status_t st = rs_quant_spec_parse(bad[i].text, store, &diag, &q);
        if (st != RS_ERR_INPUT || strstr(diag.msg, bad[i].names) == NULL)
            fail_msg("'%s': status %d, message '%s' should name '%s'",
                     bad[i].text, (int)st, diag.msg, bad[i].names);
        assert_int_equal((int)q.scheme, 0x5a5a5a5a); /* output untouched */
    }
    rs_diag_t diag = {0};
    rs_quant_desc_t q;
    assert_int_equal(rs_quant_spec_parse(NULL, NULL, &diag, &q),
                     RS_ERR_INVALID_ARG);
}

static rs_status_t shape_of(rs_quant_scheme_t scheme, rs_dtype_t fmt,
                            int block_ndim, const int64_t *block, int ndim,
                            const int64_t *shape, rs_diag_t *diag,
                            int64_t *out)
{
    const rs_quant_desc_t q = {.scheme = scheme, .format = fmt,
                               .block_ndim = block_ndim, .block = block};
    return rs_quant_block_shape(&q, ndim, shape, diag, out);
}

static void test_block_shape(void **state)
{
    (void)state;
    const int64_t shape[3] = {4, 300, 0}, b2[2] = {128, 64};
    int64_t out[3] = {-1, -1, -1};
    rs_diag_t diag = {0};
    assert_int_equal(shape_of(RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, b2, 3,
                              shape, &diag, out), RS_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 128);
    assert_int_equal(out[2], 64);
    assert_int_equal(shape_of(RS_QUANT_FP8_CHANNEL, RS_DTYPE_F8E5M2, 0, NULL, 3,
                              shape, &diag, out), RS_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 300);
    assert_int_equal(out[2], 1);
    assert_int_equal(shape_of(RS_QUANT_FP8_TENSOR, RS_DTYPE_F8E4M3, 0, NULL, 3,
                              shape, &diag, out), RS_OK);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 300);
    assert_int_equal(out[2], 1);

    static const struct {
        rs_quant_scheme_t scheme;
        rs_dtype_t fmt;
        int block_ndim;
        int64_t block[2];
        int ndim;
        const char *names;
    } bad[] = {
        {(rs_quant_scheme_t)7, RS_DTYPE_F8E4M3, 0, {0, 0}, 3, "quant.scheme"},
        {RS_QUANT_NONE, RS_DTYPE_F8E4M3, 0, {0, 0}, 3, "quant.scheme"},
        {RS_QUANT_FP8_TENSOR, RS_DTYPE_BF16, 0, {0, 0}, 3, "quant.format"},
        {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, {128, 0}, 3, "quant.block[1]"},
        {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, {-4, 8}, 3, "quant.block[0]"},
        {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 0, {0, 0}, 3, "quant.block_ndim"},
        {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 17, {1, 1}, 3, "quant.block_ndim"},
        {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, {8, 8}, 1, "quant.block: 2 dims"},
        {RS_QUANT_FP8_CHANNEL, RS_DTYPE_F8E4M3, 1, {8, 0}, 3, "quant.block_ndim"},
        {RS_QUANT_FP8_CHANNEL, RS_DTYPE_F8E4M3, 0, {0, 0}, 0, "fp8_channel"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t o[3] = {-1, -1, -1};
        const rs_status_t st = shape_of(bad[i].scheme, bad[i].fmt,
                                        bad[i].block_ndim, bad[i].block,
                                        bad[i].ndim, shape, &diag, o);
        if (st != RS_ERR_INPUT || strstr(diag.msg, bad[i].names) == NULL)
            fail_msg("case %zu: status %d, message '%s' should name '%s'", i,
                     (int)st, diag.msg, bad[i].names);
        assert_int_equal(o[0], -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_text),
        cmocka_unit_test(test_spec_hostile),
        cmocka_unit_test(test_block_shape),
        cmocka_unit_test_teardown(test_encoder_sweep_f32, simd_restore_level),
        cmocka_unit_test_teardown(test_encoder_sweep_16, simd_restore_level),
        cmocka_unit_test_teardown(test_encoder_reciprocal, simd_restore_level),
        cmocka_unit_test_teardown(test_encoder_margin, simd_restore_level),
        cmocka_unit_test_teardown(test_encoder_late_margin, simd_restore_level),
        cmocka_unit_test_teardown(test_zero_and_tiny_blocks, simd_restore_level),
        cmocka_unit_test_teardown(test_round_past_max, simd_restore_level),
        cmocka_unit_test_teardown(test_coarse_scale_saturates, simd_restore_level),
        cmocka_unit_test_teardown(test_ragged_boxes, simd_restore_level),
        cmocka_unit_test_teardown(test_nonfinite_refused, simd_restore_level),
        cmocka_unit_test_teardown(test_random, simd_restore_level),
        cmocka_unit_test_teardown(test_many_chunks, simd_restore_level),
#if defined(__SSE2__)
        cmocka_unit_test_teardown(test_control_bits, simd_restore_level),
#endif
        cmocka_unit_test_teardown(test_bad_boxes, simd_restore_level),
        cmocka_unit_test_teardown(test_scalar_tensor, simd_restore_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
