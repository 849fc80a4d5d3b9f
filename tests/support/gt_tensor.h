/* Ground truth for op chains, independent of the planner: a tensor is an
 * explicit row-major array of source element indices, and every op gathers
 * into a fresh array. Tests compare what the planner emits with this. */
#ifndef RS_TEST_GT_TENSOR_H
#define RS_TEST_GT_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/capture.h"

typedef enum gt_status {
    GT_OK = 0,
    GT_ERR_OP = 1,       /* PyTorch raises: bad dim, out of range, bad sizes */
    GT_ERR_NOT_VIEW = 2, /* legal op but it would need a materializing copy */
} gt_status_t;

typedef struct gt_tensor {
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    int64_t numel;
    int64_t *idx; /* numel source element indices, row-major over shape */
} gt_tensor_t;

/* The full source: index i at position i. Returns GT_ERR_OP on a bad
 * shape (negative, too many dims, too large for a test). */
gt_status_t gt_full(int ndim, const int64_t *shape, gt_tensor_t *out);
void gt_free(gt_tensor_t *t);

/* Applies one op in place (t is left unchanged on failure). `why` receives
 * a short reason on failure when given. */
gt_status_t gt_apply(gt_tensor_t *t, const rs_op_t *op, char *why,
                     size_t whylen);

/* Full source of src_shape, then every op. On failure *out is empty. */
gt_status_t gt_replay(int src_ndim, const int64_t *src_shape,
                      const rs_op_t *ops, size_t nops, gt_tensor_t *out,
                      char *why, size_t whylen);

/* Strides (in source elements) that reproduce t from idx[0]; size-1 dims
 * get stride 0. Returns 1 when t is exactly that affine map. */
int gt_strides(const gt_tensor_t *t, int64_t *stride);

/* PyTorch's is_contiguous on the inferred strides. */
int gt_is_contiguous(const gt_tensor_t *t);

/* 1 when the elements of t are pairwise distinct and form an axis-aligned
 * strided box of the source (a product of arithmetic progressions, one per
 * source dim), whatever the visiting order. */
int gt_is_box(const gt_tensor_t *t, int src_ndim, const int64_t *src_shape);

/* gt_is_box, and moreover every step along any dim of t changes exactly
 * one source coordinate, the same one for the whole dim: each dim lies
 * within one source dim (a [3,2] source flattened and unflattened to
 * [2,3] is a box, but its dims straddle source rows). */
int gt_is_aligned_box(const gt_tensor_t *t, int src_ndim,
                      const int64_t *src_shape);

/* Row-major position of multi-index m in shape (helpers shared by tests). */
void gt_unravel(int64_t pos, int ndim, const int64_t *shape, int64_t *m);

#endif
