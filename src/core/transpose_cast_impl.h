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

typedef struct rs__tcast_ops {
    rs__tcast_block_fn bf16_f32;
    rs__tcast_block_fn f32_bf16;
    const rs__transpose_ops_t *tr; /* the level's streaming row copy, fence */
} rs__tcast_ops_t;

#if RS__TR_X86
extern const rs__tcast_ops_t rs__tcast_ops_avx2;
#endif

#endif
