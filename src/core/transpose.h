/* Tile transpose for the strided copy engine: moves a small 2-D block of
 * 1, 2, 4 or 8 byte elements with its two dims swapped, several elements per
 * step, so transposes and permutes replay at a useful share of memcpy. */
#ifndef RS_CORE_TRANSPOSE_H
#define RS_CORE_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when rs__transpose_tile handles elements of `elsize` bytes. */
int rs__transpose_ok(size_t elsize);

/* dst element (j, i) = src element (i, j) for i < rows, j < cols: src row i
 * starts at src + i * src_ld * elsize, dst row j at dst + j * dst_ld *
 * elsize (leading dims in elements). Meant for tiles that fit in L1; the
 * caller walks large matrices tile by tile. Buffers must not overlap and
 * elsize must pass rs__transpose_ok. */
void rs__transpose_tile(void *dst, int64_t dst_ld, const void *src,
                        int64_t src_ld, int64_t rows, int64_t cols,
                        size_t elsize);

#endif
