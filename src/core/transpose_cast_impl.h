/* The fused cast-and-transpose blocks of one instruction-set level, as one
 * ops table; transpose_cast.c walks matrices with them. */
#ifndef RS_CORE_TRANSPOSE_CAST_IMPL_H
#define RS_CORE_TRANSPOSE_CAST_IMPL_H

#include <stddef.h>

#include "core/transpose_impl.h"

/* Source rows and columns of one block. */
#define RS__TCAST_ROWS 8
#define RS__TCAST_COLS 16

/* One block: RS__TCAST_ROWS source rows of RS__TCAST_COLS elements (rows sld
 * bytes apart) into RS__TCAST_COLS destination rows of RS__TCAST_ROWS
 * elements (dld bytes apart), cast on the way. Any alignment. */
typedef void (*rs__tcast_block_fn)(unsigned char *d, size_t dld,
                                   const unsigned char *s, size_t sld);

/* Bytes of each destination row one pass of the streamed walk writes. */
#define RS__TCAST_RUN 256

/* Copies `rows` runs of RS__TCAST_RUN bytes from a 64-byte aligned buffer
 * (runs RS__TCAST_RUN apart, 64 readable bytes before the first) to d,
 * rows dld apart, any alignment, each destination cache line with one
 * non-temporal store. A run whose start is off a line keeps its last 64
 * bytes in `carry` (64 bytes per row, and 64 readable bytes after the
 * last) and completes the line those end in from the run before it in
 * the same row, so a line split between two runs is stored whole, once;
 * `first` (no run before) and `last` (no run after) store those partial
 * lines plainly instead. The caller fences. */
typedef void (*rs__tcast_stream_fn)(unsigned char *d, size_t dld,
                                    const unsigned char *buf, size_t rows,
                                    unsigned char *carry, int first,
                                    int last);

typedef struct rs__tcast_ops {
    rs__tcast_block_fn bf16_f32;
    rs__tcast_block_fn f32_bf16;
    rs__tcast_stream_fn stream; /* NULL: the level has no streaming stores */
    const rs__transpose_ops_t *tr; /* the level's store fence */
} rs__tcast_ops_t;

#if RS__TR_X86
extern const rs__tcast_ops_t rs__tcast_ops_avx2;
/* AVX2's, with f32 -> bf16 rounded by AVX-512 BF16's conversion: for
 * the AVX-512 level on CPUs that also have BF16, VL and DQ. */
extern const rs__tcast_ops_t rs__tcast_ops_avx512bf16;
#endif

#endif
