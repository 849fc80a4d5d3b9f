/* The view-op vocabulary captures are written in: PyTorch view ops over a
 * full source tensor (narrow, slice, getitem, permute, view, ...), as the
 * geometry layer replays them. Plain data; no handles, no locking needed. */
#ifndef RESHARD_VIEW_H
#define RESHARD_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/limits.h" /* RS_MAX_DIMS */
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* View ops with PyTorch semantics. Argument layout in rs_op_t per kind:
 *   NARROW     arg = {dim, start, length}
 *   SLICE      arg = {dim, start, stop, step}; has bit 1/2 clear = start/stop null
 *   SELECT     arg = {dim, index}
 *   GETITEM    keys[nkeys]
 *   TRANSPOSE  arg = {d0, d1}
 *   T          (none)
 *   PERMUTE    list = dims
 *   VIEW       list = sizes (one -1 allowed)
 *   RESHAPE    list = sizes (accepted only where it is a pure view)
 *   FLATTEN    arg = {start_dim, end_dim}; has bit 0/1 clear = default 0 / -1
 *   UNFLATTEN  arg = {dim}, list = sizes (one -1 allowed)
 *   UNSQUEEZE  arg = {dim}
 *   SQUEEZE    has bit 0 set = arg[0] is the dim; clear = all size-1 dims
 *   CHUNK      arg = {chunks, dim, i}
 *   SPLIT      arg = {split_size, dim, i}, or list = sizes with arg = {_, dim, i}
 *   UNBIND     arg = {dim, i}
 *   CONTIGUOUS (none; a no-op on contiguous views, unsupported otherwise) */
typedef enum rs_op_kind {
    RS_OP_NARROW = 1,
    RS_OP_SLICE,
    RS_OP_SELECT,
    RS_OP_GETITEM,
    RS_OP_TRANSPOSE,
    RS_OP_T,
    RS_OP_PERMUTE,
    RS_OP_VIEW,
    RS_OP_RESHAPE,
    RS_OP_FLATTEN,
    RS_OP_UNFLATTEN,
    RS_OP_UNSQUEEZE,
    RS_OP_SQUEEZE,
    RS_OP_CHUNK,
    RS_OP_SPLIT,
    RS_OP_UNBIND,
    RS_OP_CONTIGUOUS,
} rs_op_kind_t;

/* One element of a getitem key tuple. */
typedef enum rs_key_kind {
    RS_KEY_INDEX = 1, /* an int: selects and removes the dim */
    RS_KEY_FULL,      /* null: the whole dim */
    RS_KEY_SLICE,     /* [start|null, stop|null, step|null] */
} rs_key_kind_t;

typedef struct rs_key {
    rs_key_kind_t kind;
    int64_t index;              /* RS_KEY_INDEX */
    int64_t start, stop, step;  /* RS_KEY_SLICE */
    uint8_t has_start, has_stop, has_step;
} rs_key_t;

typedef struct rs_op {
    rs_op_kind_t kind;
    int64_t arg[4];
    uint32_t has;          /* bit i set: arg[i] was given (not null / not omitted) */
    const int64_t *list;   /* PERMUTE, VIEW, RESHAPE, UNFLATTEN, SPLIT sizes */
    size_t nlist;          /* SPLIT uses list when nlist > 0 */
    const rs_key_t *keys;  /* GETITEM */
    size_t nkeys;
} rs_op_t;

/* Name of an op kind as written in captures ("narrow"); "?" when unknown. */
RS_API const char *rs_op_name(rs_op_kind_t kind);

#ifdef __cplusplus
}
#endif
#endif
