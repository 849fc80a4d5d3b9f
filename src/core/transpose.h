/* Matrix transpose for the strided copy engine: 1, 2, 4 or 8 byte elements
 * moved in cache-line tiles by the vector kernels of the active
 * instruction-set level (core/simd.h), with non-temporal stores on request,
 * so transposes and permutes replay at memory speed. */
#ifndef RS_CORE_TRANSPOSE_H
#define RS_CORE_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when rs__transpose handles elements of `elsize` bytes. */
int rs__transpose_ok(size_t elsize);

/* dst element (j, i) = src element (i, j) for i < rows, j < cols: src row i
 * starts at src + i * src_ld * elsize, dst row j at dst + j * dst_ld *
 * elsize (leading dims in elements, any alignment). Writes nothing else.
 * Walks 64-byte tiles in blocks that keep both sides' pages within the TLB's
 * reach, ragged edges in smaller blocks and element by element. `stream`
 * asks for non-temporal stores (used when dst and dst_ld * elsize are
 * multiples of 64 and the level has them; followed by a store fence): for
 * destinations larger than the caches. Buffers must not overlap and elsize
 * must pass rs__transpose_ok. Cost: O(rows * cols). Thread-safe. */
void rs__transpose(void *dst, int64_t dst_ld, const void *src, int64_t src_ld,
                   int64_t rows, int64_t cols, size_t elsize, int stream);

/* Destination bytes from which a copy is better streamed past the caches. */
#define RS__TRANSPOSE_STREAM_MIN ((size_t)8 << 20)

#endif
