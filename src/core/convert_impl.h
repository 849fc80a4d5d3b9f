/* Internal view of the conversion kernels: one contiguous and one strided
 * loop per (from, to) pair, shared by the contiguous and the strided entry
 * points. */
#ifndef RS_CORE_CONVERT_IMPL_H
#define RS_CORE_CONVERT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/dtype.h"

/* n contiguous elements; buffers do not overlap. */
typedef void (*rs__convert_contig_fn)(void *dst, const void *src, size_t n);

/* n elements, strides in elements of each side's dtype. */
typedef void (*rs__convert_strided_fn)(void *dst, int64_t dst_stride,
                                  const void *src, int64_t src_stride,
                                  size_t n);

typedef struct rs__convert_fns {
    rs__convert_contig_fn contig;
    rs__convert_strided_fn strided;
} rs__convert_kernel_t;

/* Kernels converting `from` into `to`; 0 when the pair is unsupported. */
int rs__convert_kernel(rs_dtype_t to, rs_dtype_t from, rs__convert_kernel_t *k_p);

#endif
