/* Matrix transpose with a bf16 <-> f32 cast fused into it, for the strided
 * copy engine: the vector levels cast and transpose blocks in registers
 * and store them straight into the destination. */
#ifndef RS_CORE_TRANSPOSE_CAST_H
#define RS_CORE_TRANSPOSE_CAST_H

#include <stdint.h>

#include "reshard/dtype.h"

/* dst element (j, i) = src element (i, j) cast from `from` to `to`, for i <
 * rows, j < cols; leading dims in elements of each side's dtype, any
 * alignment; writes nothing else; bit for bit what rs__bf16_to_f32 and
 * rs__f32_to_bf16 give. `stream` asks for non-temporal stores of whole
 * destination lines (any dst_ld: lines split between two visits of a row
 * are completed before they are stored; followed by a store fence), for
 * destinations larger than the caches; it allocates a 256 KiB buffer, and
 * a 128 KiB scratch where destination rows start off cache lines
 * (without them, the stores stay in the cache).
 * Returns 0, touching nothing, when the active
 * instruction-set level has no kernel for the pair (the caller takes its
 * general path), 1 when done. Buffers must not overlap. Cost: O(rows *
 * cols). Thread-safe. */
int rs__transpose_cast(rs_dtype_t to, void *dst, int64_t dst_ld,
                       rs_dtype_t from, const void *src, int64_t src_ld,
                       int64_t rows, int64_t cols, int stream);

#endif
