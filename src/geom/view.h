/* Strided views and op-chain replay with PyTorch view semantics. A view is
 * (offset, shape, stride) in elements of a row-major source tensor. */
#ifndef RS_GEOM_VIEW_H
#define RS_GEOM_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/view.h"
#include "reshard/status.h"

typedef struct rs__view {
    int64_t offset;
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    int64_t stride[RS_MAX_DIMS];
} rs__view_t;

/* The whole row-major tensor of the given shape. RS_ERR_INPUT when the
 * shape is negative, overflows or has more than RS_MAX_DIMS dims. */
rs_status_t rs__view_init(rs__view_t *view, int ndim, const int64_t *shape);

/* Applies one op in place. On failure the view is unspecified and `why`
 * (when given) receives the reason without the op's name. Returns
 * RS_ERR_INPUT for out-of-range or malformed arguments and
 * RS_ERR_UNSUPPORTED for ops that would materialize a copy. */
rs_status_t rs__view_apply(rs__view_t *view, const rs_op_t *op, char *why,
                          size_t whylen);

/* 1 when the view is contiguous in PyTorch's sense. */
int rs__view_is_contiguous(const rs__view_t *view);

#endif
