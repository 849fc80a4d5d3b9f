/* Dtype conversion against the independent reference in support/ref_float:
 * every 8- and 16-bit pattern of each narrow format into every other float
 * format, millions of f32 and f64 patterns (a strided sweep plus every
 * rounding boundary of each target) into the narrower ones, hand-worked
 * cases, and strided conversion against element-by-element enumeration with
 * guard bytes around the destination. The sanitizer trees run the large
 * sweeps as fixed subsets (support/test_scale.h), each named where it is
 * cut; the optimized trees run them whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_float.h"
#include "test_scale.h"
#include "core/convert.h"

static const rs_dtype_t floats[] = {RS_DTYPE_F32,    RS_DTYPE_F64,
                                    RS_DTYPE_BF16,   RS_DTYPE_F16,
                                    RS_DTYPE_F8E4M3, RS_DTYPE_F8E5M2};
#define NFLOATS (sizeof(floats) / sizeof(floats[0]))

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t hi = rng_state >> 32;
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (hi << 32) | (rng_state >> 32);
}

static uint64_t rnd(uint64_t n) { return rnd64() % n; }

/* ---- growable list of source patterns ---- */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} pats_t;

static void pats_add(pats_t *p, uint64_t bits)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 1024;
        p->v = realloc(p->v, p->cap * sizeof(uint64_t));
        assert_non_null(p->v);
    }
    p->v[p->n++] = bits;
}

static uint64_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint64_t bits_of_f64(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* Adds x (a double) to a pattern list of `src` dtype, with both signs and
 * the neighbouring values of src around it, when x is exact in src. */
static void add_around(pats_t *p, rs_dtype_t src, double x)
{
    for (int sgn = 0; sgn < 2; sgn++) {
        double y = sgn ? -x : x;
        if (src == RS_DTYPE_F32) {
            float f = (float)y;
            if ((double)f != y)
                continue;
            pats_add(p, bits_of_f32(f));
            pats_add(p, bits_of_f32(nextafterf(f, INFINITY)));
            pats_add(p, bits_of_f32(nextafterf(f, -INFINITY)));
        } else {
            pats_add(p, bits_of_f64(y));
            pats_add(p, bits_of_f64(nextafter(y, INFINITY)));
            pats_add(p, bits_of_f64(nextafter(y, -INFINITY)));
        }
    }
}

/* Every representable value of `target` and every midpoint between two
 * neighbours (the tie cases), plus the step just past the largest finite. */
static void add_boundaries(pats_t *p, rs_dtype_t src, rs_dtype_t target,
                           uint64_t step)
{
    const size_t bits = rs_dtype_size(target) * 8;
    const uint64_t top = 1ull << (bits - 1); /* positive patterns */
    for (uint64_t b = 0; b + step < top; b += step) {
        double lo = ref_float_decode(target, b);
        double hi = ref_float_decode(target, b + 1);
        if (isnan(lo) || isinf(lo))
            break;
        if (isnan(hi)) /* e4m3fn: 480 would come next */
            hi = lo + (lo - ref_float_decode(target, b - 1));
        if (isinf(hi))
            hi = lo + (lo - ref_float_decode(target, b - 1));
        add_around(p, src, lo);
        add_around(p, src, lo / 2 + hi / 2);
    }
}

static void add_specials32(pats_t *p)
{
    static const uint32_t sp[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7f800001,
        0x7fc00000, 0x7fffffff, 0xffc00001, 0xff800001, 0x7fa00000,
        0x7f802000, 0x7f808000, 0x00000001, 0x80000001, 0x007fffff,
        0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0x477fe000,
        0x477ff000, 0x477fefff, 0x43e00000, 0x43e80000, 0x43f00000,
        0x47600000, 0x47700000, 0x476fffff};
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
        pats_add(p, sp[i]);
}

static void add_specials64(pats_t *p)
{
    static const uint64_t sp[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
        0xfff0000000000000ull, 0x7ff0000000000001ull, 0x7ff8000000000000ull,
        0xfff8000000000001ull, 0x7ff4000000000000ull, 0x0000000000000001ull,
        0x000fffffffffffffull, 0x0010000000000000ull, 0x7fefffffffffffffull,
        0xffefffffffffffffull, 0x3ff0100000400000ull, 0x47efffffe0000000ull,
        0x47efffffefffffffull, 0x47effffff0000000ull, 0x36a0000000000000ull,
        0x3690000000000000ull, 0x3690000000000001ull};
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
        pats_add(p, sp[i]);
}

/* ---- the comparison ---- */

/* Converts the whole pattern list with one rs__convert call and compares
 * every element with the reference; prints the first few differences. */
static size_t check_list(rs_dtype_t from, rs_dtype_t to, const uint64_t *pats,
                         size_t n)
{
    const size_t fs = rs_dtype_size(from), ts = rs_dtype_size(to);
    unsigned char *src = malloc(n * fs + 1), *dst = malloc(n * ts + 1);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < n; i++)
        ref_float_store(from, src + i * fs, pats[i]);
    assert_int_equal(rs__convert(to, dst, from, src, n), RS_OK);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t got = ref_float_load(to, dst + i * ts);
        uint64_t want = from == to ? pats[i]
                                   : ref_float_encode(to, ref_float_decode(
                                                              from, pats[i]));
        if (ref_float_same(to, got, want) && (from != to || got == want))
            continue;
        if (bad++ < 8)
            fprintf(stderr, "%s 0x%llx -> %s: got 0x%llx want 0x%llx\n",
                    rs_dtype_name(from), (unsigned long long)pats[i],
                    rs_dtype_name(to), (unsigned long long)got,
                    (unsigned long long)want);
    }
    free(src);
    free(dst);
    return bad;
}

static void check_all_targets(rs_dtype_t from, const pats_t *p)
{
    size_t bad = 0;
    for (size_t t = 0; t < NFLOATS; t++)
        bad += check_list(from, floats[t], p->v, p->n);
    assert_int_equal(bad, 0);
}

static void exhaustive(rs_dtype_t from)
{
    pats_t p = {0};
    const uint64_t count = 1ull << (8 * rs_dtype_size(from));
    for (uint64_t b = 0; b < count; b++)
        pats_add(&p, b);
    check_all_targets(from, &p);
    free(p.v);
}

static void test_exhaustive_bf16(void **state) { (void)state; exhaustive(RS_DTYPE_BF16); }
static void test_exhaustive_f16(void **state) { (void)state; exhaustive(RS_DTYPE_F16); }
static void test_exhaustive_e4m3(void **state) { (void)state; exhaustive(RS_DTYPE_F8E4M3); }
static void test_exhaustive_e5m2(void **state) { (void)state; exhaustive(RS_DTYPE_F8E5M2); }

/* The step through a 16-bit target's values in add_boundaries: every value
 * in full, every 7th (still every exponent) in a sanitizer tree. */
static uint64_t boundary_step16(void)
{
    return tscale_exhaustive() ? 1 : 7;
}

/* f32: every 997th pattern (about 4.3 million, both signs, all exponents),
 * every boundary of every narrower target, and special values. Sanitizer
 * trees: every 65521st pattern (65 thousand, still every exponent of both
 * signs 128 times), every 7th boundary of the 16-bit targets and every one
 * of the 8-bit targets. */
static void test_sampled_f32(void **state)
{
    (void)state;
    pats_t p = {0};
    const uint64_t stride = tscale_exhaustive() ? 997 : 65521;
    for (uint64_t b = 0; b < (1ull << 32); b += stride)
        pats_add(&p, b);
    add_specials32(&p);
    add_boundaries(&p, RS_DTYPE_F32, RS_DTYPE_BF16, boundary_step16());
    add_boundaries(&p, RS_DTYPE_F32, RS_DTYPE_F16, boundary_step16());
    add_boundaries(&p, RS_DTYPE_F32, RS_DTYPE_F8E4M3, 1);
    add_boundaries(&p, RS_DTYPE_F32, RS_DTYPE_F8E5M2, 1);
    check_all_targets(RS_DTYPE_F32, &p);
    free(p.v);
}

/* f64: random patterns, every boundary of the 8/16-bit targets, a strided
 * sample of f32 boundaries (f64 -> f32 ties), and special values. Sanitizer
 * trees: the first 25 thousand of each random stream, every 7th boundary of
 * the 16-bit targets, every one of the 8-bit targets, f32 boundaries 16
 * times further apart. */
static void test_sampled_f64(void **state)
{
    (void)state;
    pats_t p = {0};
    const int full = tscale_exhaustive();
    const int nrandom = full ? 400000 : 25000;
    rng_state = 0x5eed64;
    for (int i = 0; i < nrandom; i++)
        pats_add(&p, rnd64());
    /* Exponents near the narrow formats' ranges, random mantissas. */
    for (int i = 0; i < nrandom; i++) {
        uint64_t e = 1023 - 160 + rnd(320);
        pats_add(&p, (rnd64() & 0x800fffffffffffffull) | (e << 52));
    }
    add_specials64(&p);
    add_boundaries(&p, RS_DTYPE_F64, RS_DTYPE_BF16, boundary_step16());
    add_boundaries(&p, RS_DTYPE_F64, RS_DTYPE_F16, boundary_step16());
    add_boundaries(&p, RS_DTYPE_F64, RS_DTYPE_F8E4M3, 1);
    add_boundaries(&p, RS_DTYPE_F64, RS_DTYPE_F8E5M2, 1);
    add_boundaries(&p, RS_DTYPE_F64, RS_DTYPE_F32, full ? 9973 : 9973 * 16);
    check_all_targets(RS_DTYPE_F64, &p);
    free(p.v);
}

/* ---- hand-worked cases (do not trust the reference alone) ---- */

typedef struct {
    rs_dtype_t from;
    uint64_t in;
    rs_dtype_t to;
    uint64_t out;
} hand_t;

static void test_hand_cases(void **state)
{
    (void)state;
    static const hand_t cases[] = {
        {RS_DTYPE_F32, 0x3f800000, RS_DTYPE_BF16, 0x3f80},
        {RS_DTYPE_F32, 0x3f800000, RS_DTYPE_F16, 0x3c00},
        {RS_DTYPE_F32, 0x3f800000, RS_DTYPE_F8E4M3, 0x38},
        {RS_DTYPE_F32, 0x3f800000, RS_DTYPE_F8E5M2, 0x3c},
        {RS_DTYPE_F32, 0x3f808000, RS_DTYPE_BF16, 0x3f80}, /* tie, even */
        {RS_DTYPE_F32, 0x3f818000, RS_DTYPE_BF16, 0x3f82}, /* tie, odd */
        {RS_DTYPE_F32, 0x3f808001, RS_DTYPE_BF16, 0x3f81},
        {RS_DTYPE_F32, 0x7f7fffff, RS_DTYPE_BF16, 0x7f80}, /* to inf */
        {RS_DTYPE_F32, 0x80000000, RS_DTYPE_BF16, 0x8000},
        {RS_DTYPE_F32, 0x00000001, RS_DTYPE_BF16, 0x0000},
        {RS_DTYPE_F32, 0x00008000, RS_DTYPE_BF16, 0x0000}, /* subnormal tie */
        {RS_DTYPE_F32, 0x00018000, RS_DTYPE_BF16, 0x0002},
        {RS_DTYPE_F32, 0x477fe000, RS_DTYPE_F16, 0x7bff}, /* 65504 */
        {RS_DTYPE_F32, 0x477fefff, RS_DTYPE_F16, 0x7bff},
        {RS_DTYPE_F32, 0x477ff000, RS_DTYPE_F16, 0x7c00}, /* 65520: inf */
        {RS_DTYPE_F32, 0x33800000, RS_DTYPE_F16, 0x0001}, /* 2^-24 */
        {RS_DTYPE_F32, 0x33000000, RS_DTYPE_F16, 0x0000}, /* 2^-25 tie */
        {RS_DTYPE_F32, 0x33000001, RS_DTYPE_F16, 0x0001},
        {RS_DTYPE_F32, 0xb3c00000, RS_DTYPE_F16, 0x8002}, /* -1.5 * 2^-24 */
        {RS_DTYPE_F32, 0x387fe000, RS_DTYPE_F16, 0x0400}, /* up to normal */
        {RS_DTYPE_F32, 0x43e00000, RS_DTYPE_F8E4M3, 0x7e}, /* 448 */
        {RS_DTYPE_F32, 0x43e80000, RS_DTYPE_F8E4M3, 0x7e}, /* 464 */
        {RS_DTYPE_F32, 0x4e6e6b28, RS_DTYPE_F8E4M3, 0x7e}, /* 1e9 saturates */
        {RS_DTYPE_F32, 0xce6e6b28, RS_DTYPE_F8E4M3, 0xfe},
        {RS_DTYPE_F32, 0x7f800000, RS_DTYPE_F8E4M3, 0x7f}, /* inf -> NaN */
        {RS_DTYPE_F32, 0xff800000, RS_DTYPE_F8E4M3, 0xff},
        {RS_DTYPE_F32, 0x3b000000, RS_DTYPE_F8E4M3, 0x01}, /* 2^-9 */
        {RS_DTYPE_F32, 0x3a800000, RS_DTYPE_F8E4M3, 0x00}, /* 2^-10 tie */
        {RS_DTYPE_F32, 0x3b400000, RS_DTYPE_F8E4M3, 0x02}, /* 3*2^-10 tie */
        {RS_DTYPE_F32, 0x3c700000, RS_DTYPE_F8E4M3, 0x08}, /* 7.5*2^-9 */
        {RS_DTYPE_F32, 0x47600000, RS_DTYPE_F8E5M2, 0x7b}, /* 57344 */
        {RS_DTYPE_F32, 0x47700000, RS_DTYPE_F8E5M2, 0x7c}, /* 61440: inf */
        {RS_DTYPE_F32, 0x476fffff, RS_DTYPE_F8E5M2, 0x7b},
        {RS_DTYPE_F8E5M2, 0x01, RS_DTYPE_F16, 0x0100},
        {RS_DTYPE_F8E5M2, 0x7c, RS_DTYPE_F16, 0x7c00},
        {RS_DTYPE_F8E4M3, 0x7e, RS_DTYPE_F32, 0x43e00000},
        {RS_DTYPE_F8E4M3, 0x01, RS_DTYPE_F32, 0x3b000000},
        {RS_DTYPE_F8E4M3, 0x80, RS_DTYPE_F32, 0x80000000},
        {RS_DTYPE_F16, 0x0001, RS_DTYPE_F32, 0x33800000},
        {RS_DTYPE_F16, 0x5f00, RS_DTYPE_F8E4M3, 0x7e},
        {RS_DTYPE_F16, 0x7c00, RS_DTYPE_F8E4M3, 0x7f},
        {RS_DTYPE_BF16, 0x47c3, RS_DTYPE_F16, 0x7c00},
        {RS_DTYPE_BF16, 0x0001, RS_DTYPE_F32, 0x00010000},
        {RS_DTYPE_F64, 0x3ff0100000400000ull, RS_DTYPE_BF16, 0x3f81},
        {RS_DTYPE_F64, 0x3e60000000000000ull, RS_DTYPE_F16, 0x0000},
        {RS_DTYPE_F64, 0x3e60000000000001ull, RS_DTYPE_F16, 0x0001},
        {RS_DTYPE_F64, 0x7fefffffffffffffull, RS_DTYPE_F8E4M3, 0x7e},
        {RS_DTYPE_F64, 0x7fefffffffffffffull, RS_DTYPE_F16, 0x7c00},
        {RS_DTYPE_F64, 0x0000000000000001ull, RS_DTYPE_F32, 0x00000000},
    };
    size_t bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const hand_t *c = &cases[i];
        unsigned char in[8], out[8];
        ref_float_store(c->from, in, c->in);
        assert_int_equal(rs__convert(c->to, out, c->from, in, 1), RS_OK);
        uint64_t got = ref_float_load(c->to, out);
        if (got != c->out && bad++ < 8)
            fprintf(stderr, "case %zu: got 0x%llx want 0x%llx\n", i,
                    (unsigned long long)got, (unsigned long long)c->out);
    }
    assert_int_equal(bad, 0);
}

/* A NaN never turns into an infinity or a number, whatever its payload. */
static void test_nan_stays_nan(void **state)
{
    (void)state;
    static const uint32_t nans[] = {0x7f800001, 0xff800001, 0x7f80ffff,
                                    0x7fc00000, 0x7fbfffff, 0xffffffff};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        for (size_t t = 0; t < NFLOATS; t++) {
            unsigned char out[8];
            assert_int_equal(rs__convert(floats[t], out, RS_DTYPE_F32,
                                        &nans[i], 1), RS_OK);
            assert_true(ref_float_is_nan(floats[t],
                                         ref_float_load(floats[t], out)));
        }
    }
}

/* Unaligned buffers and odd lengths give the same bytes as aligned ones. */
static void test_unaligned(void **state)
{
    (void)state;
    const size_t n = 1001;
    rng_state = 77;
    for (size_t a = 0; a < NFLOATS; a++) {
        for (size_t b = 0; b < NFLOATS; b++) {
            size_t fs = rs_dtype_size(floats[a]), ts = rs_dtype_size(floats[b]);
            unsigned char *src = malloc(n * fs + 1), *d0 = malloc(n * ts);
            unsigned char *d1 = malloc(n * ts + 1);
            for (size_t i = 0; i < n * fs + 1; i++)
                src[i] = (unsigned char)rnd(256);
            memmove(src + 1, src, n * fs); /* keep the aligned copy too */
            assert_int_equal(rs__convert(floats[b], d0, floats[a], src + 1, n),
                             RS_OK);
            unsigned char *al = malloc(n * fs);
            memcpy(al, src + 1, n * fs);
            assert_int_equal(rs__convert(floats[b], d1 + 1, floats[a], al, n),
                             RS_OK);
            assert_memory_equal(d0, d1 + 1, n * ts);
            free(al);
            free(src);
            free(d0);
            free(d1);
        }
    }
}

static void test_supported(void **state)
{
    (void)state;
    for (size_t a = 0; a < NFLOATS; a++)
        for (size_t b = 0; b < NFLOATS; b++)
            assert_true(rs__convert_supported(floats[a], floats[b]));
    for (int d = RS_DTYPE_F32; d < RS_DTYPE_COUNT_; d++)
        assert_true(rs__convert_supported((rs_dtype_t)d, (rs_dtype_t)d));
    assert_false(rs__convert_supported(RS_DTYPE_I32, RS_DTYPE_F32));
    assert_false(rs__convert_supported(RS_DTYPE_F32, RS_DTYPE_I64));
    assert_false(rs__convert_supported(RS_DTYPE_I8, RS_DTYPE_U8));
    assert_false(rs__convert_supported(RS_DTYPE_INVALID, RS_DTYPE_INVALID));
    float f = 1.0f;
    int32_t i = 0;
    assert_int_equal(rs__convert(RS_DTYPE_I32, &i, RS_DTYPE_F32, &f, 1),
                     RS_ERR_UNSUPPORTED);
    assert_int_equal(i, 0);
    /* Equal dtypes copy any kind bit for bit. */
    int64_t a[3] = {-1, 5, INT64_MIN}, b[3] = {0};
    assert_int_equal(rs__convert(RS_DTYPE_I64, b, RS_DTYPE_I64, a, 3), RS_OK);
    assert_memory_equal(a, b, sizeof(a));
}

/* ---- strided conversion ---- */

#define GUARD 48
#define GUARD_BYTE 0xA5
#define FILL_BYTE 0xEE

/* Element conversion of the reference (a byte copy for equal dtypes). */
static void ref_elem(rs_dtype_t to, unsigned char *d, rs_dtype_t from,
                     const unsigned char *s)
{
    if (to == from) {
        memcpy(d, s, rs_dtype_size(to));
        return;
    }
    ref_float_store(to, d, ref_float_encode(to, ref_float_decode(
                                                     from, ref_float_load(from, s))));
}

typedef struct {
    rs_dtype_t from, to;
    int ndim;
    int64_t shape[16], ss[16], ds[16];
    size_t src_elems, dst_elems; /* buffer sizes in elements */
} sgeom_t;

/* Runs rs_convert_strided on random source bytes and compares the whole
 * destination (and its guard bytes) with an odometer walk of the reference. */
static void check_strided(const sgeom_t *g)
{
    const size_t fs = rs_dtype_size(g->from), ts = rs_dtype_size(g->to);
    const size_t dbytes = g->dst_elems * ts;
    unsigned char *src = malloc(g->src_elems * fs + 1);
    unsigned char *dst = malloc(dbytes + 2 * GUARD);
    unsigned char *want = malloc(dbytes + 2 * GUARD);
    for (size_t i = 0; i < g->src_elems * fs; i++)
        src[i] = (unsigned char)rnd(256);
    memset(dst, GUARD_BYTE, dbytes + 2 * GUARD);
    memset(dst + GUARD, FILL_BYTE, dbytes);
    memcpy(want, dst, dbytes + 2 * GUARD);
    int64_t idx[16] = {0}, total = 1;
    for (int i = 0; i < g->ndim; i++)
        total *= g->shape[i];
    for (int64_t k = 0; k < total; k++) {
        int64_t rem = k, so = 0, dof = 0;
        for (int i = g->ndim - 1; i >= 0; i--) {
            idx[i] = rem % g->shape[i];
            rem /= g->shape[i];
            so += idx[i] * g->ss[i];
            dof += idx[i] * g->ds[i];
        }
        ref_elem(g->to, want + GUARD + (size_t)dof * ts, g->from,
                 src + (size_t)so * fs);
    }
    assert_int_equal(rs__convert_strided(g->to, dst + GUARD, g->ds, g->from,
                                        src, g->ss, g->ndim, g->shape),
                     RS_OK);
    /* Any NaN matches any NaN: take the produced NaN bytes as expected. */
    for (size_t i = 0; g->from != g->to && i < g->dst_elems; i++) {
        unsigned char *w = want + GUARD + i * ts, *d = dst + GUARD + i * ts;
        if (ref_float_is_nan(g->to, ref_float_load(g->to, w)) &&
            ref_float_is_nan(g->to, ref_float_load(g->to, d)))
            memcpy(w, d, ts);
    }
    assert_memory_equal(dst, want, dbytes + 2 * GUARD);
    free(src);
    free(dst);
    free(want);
}

/* Row-major strides of a (possibly padded) layout visiting dims in `order`
 * (outermost first); returns the element count of the buffer. */
static size_t layout(const int64_t *shape, int ndim, const int *order,
                     const int64_t *pad, int64_t *stride)
{
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        int d = order[k];
        stride[d] = s;
        s *= shape[d] + pad[d];
    }
    return (size_t)(s > 0 ? s : 1);
}

static void test_strided_transpose(void **state)
{
    (void)state;
    static const int64_t sizes[][2] = {{1, 1}, {3, 5}, {64, 64}, {70, 130},
                                       {200, 65}, {1, 300}, {129, 2},
                                       {300, 520}};
    static const int id[2] = {0, 1}, tr[2] = {1, 0};
    static const int64_t nopad[2] = {0, 0};
    rng_state = 11;
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        sgeom_t g = {.ndim = 2};
        g.shape[0] = sizes[z][0];
        g.shape[1] = sizes[z][1];
        const rs_dtype_t pairs[][2] = {{RS_DTYPE_BF16, RS_DTYPE_BF16},
                                       {RS_DTYPE_BF16, RS_DTYPE_F32},
                                       {RS_DTYPE_F32, RS_DTYPE_F8E4M3}};
        for (size_t p = 0; p < 3; p++) {
            g.from = pairs[p][0];
            g.to = pairs[p][1];
            g.src_elems = layout(g.shape, 2, tr, nopad, g.ss);
            g.dst_elems = layout(g.shape, 2, id, nopad, g.ds);
            check_strided(&g);
            /* and the other way round: strided writes, contiguous reads */
            g.src_elems = layout(g.shape, 2, id, nopad, g.ss);
            g.dst_elems = layout(g.shape, 2, tr, nopad, g.ds);
            check_strided(&g);
        }
    }
}

/* A region of a wider destination: the padding must stay untouched. */
static void test_strided_padded(void **state)
{
    (void)state;
    static const int id[3] = {0, 1, 2};
    static const int64_t nopad[3] = {0, 0, 0}, pad[3] = {1, 0, 7};
    sgeom_t g = {.ndim = 3, .from = RS_DTYPE_F32, .to = RS_DTYPE_BF16};
    g.shape[0] = 4;
    g.shape[1] = 5;
    g.shape[2] = 33;
    rng_state = 12;
    g.src_elems = layout(g.shape, 3, id, nopad, g.ss);
    g.dst_elems = layout(g.shape, 3, id, pad, g.ds);
    check_strided(&g);
    g.from = g.to = RS_DTYPE_I32;
    check_strided(&g);
}

static void test_strided_ndim0(void **state)
{
    (void)state;
    sgeom_t g = {.ndim = 0, .from = RS_DTYPE_F16, .to = RS_DTYPE_F64,
                 .src_elems = 1, .dst_elems = 1};
    rng_state = 13;
    for (int i = 0; i < 20; i++)
        check_strided(&g);
    g.from = g.to = RS_DTYPE_BOOL;
    check_strided(&g);
}

/* Random shapes, dim orders, paddings and dtype pairs. Sanitizer trees: the
 * first 600 of the same 3000 (60 of them with two long dims). */
static void test_strided_random(void **state)
{
    (void)state;
    static const rs_dtype_t kinds[] = {
        RS_DTYPE_F32,    RS_DTYPE_F64,    RS_DTYPE_BF16, RS_DTYPE_F16,
        RS_DTYPE_F8E4M3, RS_DTYPE_F8E5M2, RS_DTYPE_I64,  RS_DTYPE_I16,
        RS_DTYPE_U8};
    const int iterations = tscale_exhaustive() ? 3000 : 600;
    rng_state = 14;
    for (int it = 0; it < iterations; it++) {
        sgeom_t g = {.ndim = 1 + (int)rnd(5)};
        int so[16], dord[16];
        int64_t spad[16], dpad[16];
        for (int i = 0; i < g.ndim; i++) {
            /* now and then two long dims, to reach the tiled walk */
            int big = it % 10 == 0 && i >= g.ndim - 2;
            g.shape[i] = 1 + (int64_t)rnd(big ? 150 : 6);
            so[i] = dord[i] = i;
            spad[i] = rnd(3) == 0 ? (int64_t)rnd(3) : 0;
            dpad[i] = rnd(3) == 0 ? (int64_t)rnd(3) : 0;
        }
        for (int i = g.ndim - 1; i > 0; i--) {
            int j = (int)rnd((uint64_t)i + 1), t = so[i];
            so[i] = so[j];
            so[j] = t;
            j = (int)rnd((uint64_t)i + 1);
            t = dord[i];
            dord[i] = dord[j];
            dord[j] = t;
        }
        g.from = kinds[rnd(9)];
        g.to = g.from >= RS_DTYPE_I8 || rnd(4) == 0 ? g.from : kinds[rnd(6)];
        g.src_elems = layout(g.shape, g.ndim, so, spad, g.ss);
        g.dst_elems = layout(g.shape, g.ndim, dord, dpad, g.ds);
        check_strided(&g);
    }
}

/* Equal-dtype transposes, both ways round, of every element size the
 * register kernels take, over every shape up to 67 x 67 (ragged micro-block
 * and tile edges everywhere) and shapes around the tile (16 to 128
 * elements) and block (256) edges; guard bytes around the destination. */
static const rs_dtype_t by_size[] = {RS_DTYPE_U8, RS_DTYPE_BF16, RS_DTYPE_F32,
                                     RS_DTYPE_I64};

static void check_transpose(rs_dtype_t dt, int64_t rows, int64_t cols,
                            int64_t pad)
{
    static const int id[2] = {0, 1}, tr[2] = {1, 0};
    const int64_t nopad[2] = {0, 0}, padded[2] = {pad, pad};
    sgeom_t g = {.ndim = 2, .from = dt, .to = dt};
    g.shape[0] = rows;
    g.shape[1] = cols;
    g.src_elems = layout(g.shape, 2, tr, padded, g.ss);
    g.dst_elems = layout(g.shape, 2, id, nopad, g.ds);
    check_strided(&g);
    g.src_elems = layout(g.shape, 2, id, nopad, g.ss);
    g.dst_elems = layout(g.shape, 2, tr, padded, g.ds);
    check_strided(&g);
}

/* In a sanitizer tree, the shapes of test_transpose_small_shapes: for every
 * row count r, the column counts 1, 2, 3, r, 68 - r and one spread over the
 * range, so every count up to 67 (every remainder of every micro-block and
 * tile) meets small, equal and large counts on the other side. */
static int small_shape_sampled(int64_t r, int64_t c)
{
    return c <= 3 || c == r || c == 68 - r || c == 1 + (r * 29) % 67;
}

static void test_transpose_small_shapes(void **state)
{
    (void)state;
    const int full = tscale_exhaustive();
    rng_state = 15;
    for (size_t k = 0; k < 4; k++)
        for (int64_t r = 1; r <= 67; r++)
            for (int64_t c = 1; c <= 67; c++)
                if (full || small_shape_sampled(r, c))
                    check_transpose(by_size[k], r, c, (r + c) % 3 == 0);
}

static void test_transpose_tile_edges(void **state)
{
    (void)state;
    static const int64_t sizes[][2] = {
        {15, 17},  {16, 16},  {31, 33},   {32, 32},   {63, 65},
        {64, 64},  {127, 129}, {128, 128}, {129, 127}, {255, 257},
        {256, 256}, {257, 300}, {520, 33}, {33, 520},  {513, 70}};
    rng_state = 16;
    for (size_t k = 0; k < 4; k++)
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            check_transpose(by_size[k], sizes[z][0], sizes[z][1], 0);
            check_transpose(by_size[k], sizes[z][0], sizes[z][1], 5);
        }
}

/* permute(0, 2, 1) of [E, I, H]: a batch of transposes, with and without
 * padding between rows and batches, as copies and as casts. */
static void test_transpose_batched(void **state)
{
    (void)state;
    static const int id[3] = {0, 1, 2}, perm[3] = {0, 2, 1};
    static const int64_t shapes[][3] = {
        {3, 70, 130}, {5, 64, 64}, {2, 129, 33}, {4, 1, 200}, {3, 200, 1}};
    static const rs_dtype_t pairs[][2] = {
        {RS_DTYPE_U8, RS_DTYPE_U8},     {RS_DTYPE_BF16, RS_DTYPE_BF16},
        {RS_DTYPE_F32, RS_DTYPE_F32},   {RS_DTYPE_F64, RS_DTYPE_F64},
        {RS_DTYPE_BF16, RS_DTYPE_F32},  {RS_DTYPE_F32, RS_DTYPE_BF16},
        {RS_DTYPE_F8E4M3, RS_DTYPE_F16}, {RS_DTYPE_F64, RS_DTYPE_F8E5M2}};
    const int64_t nopad[3] = {0, 0, 0}, pad[3] = {1, 3, 2};
    rng_state = 17;
    for (size_t z = 0; z < sizeof(shapes) / sizeof(shapes[0]); z++)
        for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++)
            for (int padded = 0; padded < 2; padded++) {
                sgeom_t g = {.ndim = 3, .from = pairs[k][0],
                             .to = pairs[k][1]};
                memcpy(g.shape, shapes[z], sizeof(shapes[z]));
                g.src_elems = layout(g.shape, 3, perm,
                                     padded ? pad : nopad, g.ss);
                g.dst_elems = layout(g.shape, 3, id, padded ? pad : nopad,
                                     g.ds);
                check_strided(&g);
            }
}

/* A cast through the tiled transpose at sizes crossing tile edges on both
 * sides, for every float pair. */
static void test_transpose_casts(void **state)
{
    (void)state;
    static const int id[2] = {0, 1}, tr[2] = {1, 0};
    static const int64_t nopad[2] = {0, 0};
    rng_state = 18;
    for (size_t f = 0; f < NFLOATS; f++)
        for (size_t t = 0; t < NFLOATS; t++) {
            sgeom_t g = {.ndim = 2, .from = floats[f], .to = floats[t]};
            g.shape[0] = 67 + (int64_t)f * 31;
            g.shape[1] = 129 - (int64_t)t * 13;
            g.src_elems = layout(g.shape, 2, tr, nopad, g.ss);
            g.dst_elems = layout(g.shape, 2, id, nopad, g.ds);
            check_strided(&g);
        }
}

static void test_strided_errors(void **state)
{
    (void)state;
    float src[4] = {1, 2, 3, 4};
    uint16_t dst[4] = {7, 7, 7, 7};
    int64_t shape[17], st[17];
    for (int i = 0; i < 17; i++) {
        shape[i] = 1;
        st[i] = 1;
    }
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst, st, RS_DTYPE_F32,
                                        src, st, 17, shape),
                     RS_ERR_INVALID_ARG);
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst, st, RS_DTYPE_F32,
                                        src, st, -1, shape),
                     RS_ERR_INVALID_ARG);
    shape[0] = -2;
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst, st, RS_DTYPE_F32,
                                        src, st, 1, shape),
                     RS_ERR_INVALID_ARG);
    shape[0] = 4;
    st[0] = -1;
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst + 3, st,
                                        RS_DTYPE_F32, src, st + 1, 1, shape),
                     RS_ERR_INVALID_ARG);
    st[0] = INT64_MAX / 2;
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst, st, RS_DTYPE_F32,
                                        src, st + 1, 1, shape),
                     RS_ERR_INVALID_ARG);
    st[0] = 1;
    assert_int_equal(rs__convert_strided(RS_DTYPE_I32, dst, st, RS_DTYPE_F32,
                                        src, st, 1, shape),
                     RS_ERR_UNSUPPORTED);
    /* An empty region writes nothing, even with a huge other dim. */
    int64_t shp2[2] = {0, 1000000}, st2[2] = {1000000, 1};
    assert_int_equal(rs__convert_strided(RS_DTYPE_BF16, dst, st2, RS_DTYPE_F32,
                                        src, st2, 2, shp2),
                     RS_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(dst[i], 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_nan_stays_nan),
        cmocka_unit_test(test_supported),
        cmocka_unit_test(test_unaligned),
        cmocka_unit_test(test_exhaustive_bf16),
        cmocka_unit_test(test_exhaustive_f16),
        cmocka_unit_test(test_exhaustive_e4m3),
        cmocka_unit_test(test_exhaustive_e5m2),
        cmocka_unit_test(test_sampled_f32),
        cmocka_unit_test(test_sampled_f64),
        cmocka_unit_test(test_strided_transpose),
        cmocka_unit_test(test_strided_padded),
        cmocka_unit_test(test_strided_ndim0),
        cmocka_unit_test(test_strided_random),
        cmocka_unit_test(test_strided_errors),
        cmocka_unit_test(test_transpose_small_shapes),
        cmocka_unit_test(test_transpose_tile_edges),
        cmocka_unit_test(test_transpose_batched),
        cmocka_unit_test(test_transpose_casts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
