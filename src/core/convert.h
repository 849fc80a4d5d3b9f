/* Element conversion between floating-point dtypes (f32, bf16, f16,
 * f8e4m3fn, f8e5m2, f64): round to nearest even, NaN stays NaN, signed
 * zeros and subnormals exact, e4m3fn saturates on overflow (it has no
 * infinities), and strided conversion for casting staging into a
 * destination region. */
#ifndef RS_CORE_CONVERT_H
#define RS_CORE_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/dtype.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when rs__convert can turn `from` into `to` (equal dtypes always can). */
int rs__convert_supported(rs_dtype_t from, rs_dtype_t to);

/* Converts n contiguous elements. RS_ERR_UNSUPPORTED for a pair that
 * rs_convert_supported refuses. Buffers must not overlap. */
rs_status_t rs__convert(rs_dtype_t to, void *dst, rs_dtype_t from,
                              const void *src, size_t n);

/* Strided copy with conversion: walks `shape` (ndim dims), reading from
 * src + sum(i*src_stride) and writing dst + sum(i*dst_stride), strides in
 * elements of each side's dtype. Contiguous inner dims are coalesced so
 * common layouts run as long contiguous loops. */
rs_status_t rs__convert_strided(rs_dtype_t to, void *dst,
                                      const int64_t *dst_stride,
                                      rs_dtype_t from, const void *src,
                                      const int64_t *src_stride, int ndim,
                                      const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
