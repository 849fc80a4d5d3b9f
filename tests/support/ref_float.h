/* Reference float formats for the conversion tests: decodes any supported
 * float dtype's bits into an exact double and rounds a double into a dtype by
 * searching the target's representable values (nearest, ties to the even bit
 * pattern). Slow on purpose and independent of src/core/convert*.c. */
#ifndef RS_TEST_REF_FLOAT_H
#define RS_TEST_REF_FLOAT_H

#include <stdint.h>

#include "reshard/dtype.h"

/* 1 for the float dtypes the reference knows (f32, f64, bf16, f16, f8e4m3,
 * f8e5m2). */
int ref_float_known(rs_dtype_t t);

/* 1 when bits encode a NaN in t. */
int ref_float_is_nan(rs_dtype_t t, uint64_t bits);

/* The exact value of bits in t (NaN for NaNs, signed zeros and infinities
 * kept). */
double ref_float_decode(rs_dtype_t t, uint64_t bits);

/* x rounded to t: nearest representable value, ties to the even pattern;
 * infinities to infinities (e4m3fn: NaN); finite values beyond the largest
 * finite go to infinity when rounding says so (e4m3fn: saturate at +-448);
 * NaN to some NaN with x's sign. */
uint64_t ref_float_encode(rs_dtype_t t, double x);

/* Equal bits, or both NaN. */
int ref_float_same(rs_dtype_t t, uint64_t a, uint64_t b);

/* Reads / writes one element of t at p (little-endian host layout). */
uint64_t ref_float_load(rs_dtype_t t, const void *p);
void ref_float_store(rs_dtype_t t, void *p, uint64_t bits);

#endif
