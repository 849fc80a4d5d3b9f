/* Reference float formats for the conversion tests (see ref_float.h): values
 * are exact doubles built with ldexp, and rounding is a binary search over the
 * target's bit patterns (monotone in value for non-negative patterns) followed
 * by an exact comparison with the midpoint of the two neighbours. */
#include "ref_float.h"

#include <math.h>
#include <string.h>

typedef struct {
    int ebits, mbits;
    int fn; /* e4m3fn: no infinities, only all-ones is NaN, saturating */
} ref_fmt_t;

static int ref_fmt(rs_dtype_t t, ref_fmt_t *f)
{
    switch (t) {
    case RS_DTYPE_F64: *f = (ref_fmt_t){11, 52, 0}; return 1;
    case RS_DTYPE_F32: *f = (ref_fmt_t){8, 23, 0}; return 1;
    case RS_DTYPE_BF16: *f = (ref_fmt_t){8, 7, 0}; return 1;
    case RS_DTYPE_F16: *f = (ref_fmt_t){5, 10, 0}; return 1;
    case RS_DTYPE_F8E4M3: *f = (ref_fmt_t){4, 3, 1}; return 1;
    case RS_DTYPE_F8E5M2: *f = (ref_fmt_t){5, 2, 0}; return 1;
    default: return 0;
    }
}

int ref_float_known(rs_dtype_t t)
{
    ref_fmt_t f;
    return ref_fmt(t, &f);
}

static uint64_t field(uint64_t bits, int lo, int n)
{
    return (bits >> lo) & ((n == 64 ? 0 : (1ull << n)) - 1);
}

int ref_float_is_nan(rs_dtype_t t, uint64_t bits)
{
    ref_fmt_t f;
    if (!ref_fmt(t, &f))
        return 0;
    uint64_t e = field(bits, f.mbits, f.ebits), m = field(bits, 0, f.mbits);
    uint64_t emax = (1ull << f.ebits) - 1, mmax = (1ull << f.mbits) - 1;
    if (f.fn)
        return e == emax && m == mmax;
    return e == emax && m != 0;
}

/* Magnitude of a non-NaN pattern without its sign. */
static double magnitude(const ref_fmt_t *f, uint64_t bits)
{
    const int bias = (1 << (f->ebits - 1)) - 1;
    uint64_t e = field(bits, f->mbits, f->ebits), m = field(bits, 0, f->mbits);
    if (!f->fn && e == (1ull << f->ebits) - 1)
        return INFINITY;
    if (e == 0)
        return ldexp((double)m, 1 - bias - f->mbits);
    return ldexp((double)(m + (1ull << f->mbits)), (int)e - bias - f->mbits);
}

double ref_float_decode(rs_dtype_t t, uint64_t bits)
{
    ref_fmt_t f;
    if (!ref_fmt(t, &f) || ref_float_is_nan(t, bits))
        return NAN;
    double v = magnitude(&f, bits);
    return field(bits, f.ebits + f.mbits, 1) ? -v : v;
}

static uint64_t max_finite(const ref_fmt_t *f)
{
    if (f->fn)
        return (1ull << (f->ebits + f->mbits)) - 2;
    return ((((1ull << f->ebits) - 1)) << f->mbits) - 1;
}

/* Largest pattern in [0, max_finite] whose value is <= ax (ax >= 0). */
static uint64_t floor_pattern(const ref_fmt_t *f, double ax)
{
    uint64_t lo = 0, hi = max_finite(f);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (magnitude(f, mid) <= ax)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Rounds a finite ax >= 0 to a non-negative pattern. */
static uint64_t round_magnitude(const ref_fmt_t *f, double ax)
{
    const int bias = (1 << (f->ebits - 1)) - 1;
    uint64_t b = floor_pattern(f, ax);
    double lo = magnitude(f, b), hi;
    if (lo == ax)
        return b;
    if (b == max_finite(f)) {
        if (f->fn)
            return b; /* saturate */
        /* The next step up is 2^(emax+1), encoded as infinity. */
        hi = ldexp(1.0, (int)((1ull << f->ebits) - 2) - bias + 1);
    } else {
        hi = magnitude(f, b + 1);
    }
    double mid = lo / 2 + hi / 2; /* exact: both have few significant bits */
    if (ax < mid)
        return b;
    if (ax > mid)
        return b + 1;
    return (b & 1) ? b + 1 : b;
}

uint64_t ref_float_encode(rs_dtype_t t, double x)
{
    ref_fmt_t f;
    if (!ref_fmt(t, &f))
        return 0;
    const uint64_t sign = (uint64_t)(signbit(x) ? 1 : 0) << (f.ebits + f.mbits);
    const uint64_t all_e = ((1ull << f.ebits) - 1) << f.mbits;
    if (isnan(x))
        return sign | (f.fn ? max_finite(&f) + 1 : all_e | 1);
    if (isinf(x))
        return sign | (f.fn ? max_finite(&f) + 1 : all_e);
    if (t == RS_DTYPE_F64) {
        uint64_t u;
        memcpy(&u, &x, sizeof(u));
        return u;
    }
    return sign | round_magnitude(&f, fabs(x));
}

int ref_float_same(rs_dtype_t t, uint64_t a, uint64_t b)
{
    if (ref_float_is_nan(t, a) || ref_float_is_nan(t, b))
        return ref_float_is_nan(t, a) && ref_float_is_nan(t, b);
    return a == b;
}

uint64_t ref_float_load(rs_dtype_t t, const void *p)
{
    const unsigned char *b = p;
    size_t n = rs_dtype_size(t);
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

void ref_float_store(rs_dtype_t t, void *p, uint64_t bits)
{
    unsigned char *b = p;
    size_t n = rs_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(bits >> (8 * i));
}
