/* Element types reshard understands, their sizes and their names.
 * Threads: the functions read constant tables only: callable from any
 * thread. Every function is O(1) except name lookups, O(dtypes). */
#ifndef RESHARD_DTYPE_H
#define RESHARD_DTYPE_H

#include <stddef.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rs_dtype {
    RS_DTYPE_INVALID = 0,
    RS_DTYPE_F32,
    RS_DTYPE_BF16,
    RS_DTYPE_F16,
    RS_DTYPE_F8E4M3,
    RS_DTYPE_F8E5M2,
    RS_DTYPE_F64,
    RS_DTYPE_I8,
    RS_DTYPE_U8,
    RS_DTYPE_I16,
    RS_DTYPE_I32,
    RS_DTYPE_I64,
    RS_DTYPE_BOOL,
    RS_DTYPE_COUNT_
} rs_dtype_t;

/* Parses any accepted spelling ("bf16", "bfloat16", "torch.bfloat16", ...).
 * Returns RS_DTYPE_INVALID for anything else. */
RS_API rs_dtype_t rs_dtype_parse(const char *name);

/* Short canonical name ("bf16"); "invalid" for RS_DTYPE_INVALID. */
RS_API const char *rs_dtype_name(rs_dtype_t dtype);

/* The name PyTorch prints ("torch.bfloat16"), which shard tables carry;
 * "invalid" for RS_DTYPE_INVALID. */
RS_API const char *rs_dtype_torch_name(rs_dtype_t dtype);

/* Size of one element in bytes; 0 for RS_DTYPE_INVALID. */
RS_API size_t rs_dtype_size(rs_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif
