/* Cut points: for each source tensor and each of its dims, the sorted
 * element indices where some receiver's needed box begins or ends. A
 * shard stored row-major serves a box that slices an inner dim one row at
 * a time; a publisher that stores its shard as the sub-boxes between the
 * cuts inside it (cut-aligned publishing, docs/design.md) serves every
 * receiver's box as a few whole sub-boxes, each one contiguous run.
 *
 * Receivers derive their cuts from their capture (rs_cuts_add_capture) and
 * announce them through the directory; publishers merge every announced
 * set and split their shards with rs_cuts_split. The reshard.cuts.v1 JSON
 * form (docs/formats.md) is what travels and what `--cuts FILE` reads.
 *
 * Threads: a cut set is used by one thread at a time; a set only read
 * (get, split, write) may be read from several threads at once.
 * Cost: adding is O(log cuts) per point; split is O(sub-boxes) plus a
 * binary search per dim. */
#ifndef RESHARD_CUTS_H
#define RESHARD_CUTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/capture.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_cuts *rs_cuts_h;

RS_API rs_status_t rs_cuts_create(rs_diag_t *diag, rs_cuts_h *cuts_p);
RS_API void rs_cuts_destroy(rs_cuts_h cuts);

/* Adds the bounds of every box the capture reads: each copy resolved
 * against its declared source (rs_capture_declare_source); for every dim
 * of the resolved box, its first index and one past its last. Copies of
 * undeclared or unsupported sources, and copies whose ops do not resolve,
 * add nothing (the planner reports them). Errors: RS_ERR_INPUT when the
 * capture declares a tensor with another shape than this set holds for
 * it (naming the tensor and both shapes), RS_ERR_NO_MEMORY. */
RS_API rs_status_t rs_cuts_add_capture(rs_cuts_h cuts, rs_capture_h capture,
                                       rs_diag_t *diag);

/* Adds one cut: index `at` of dim `dim` of `tensor`, whose full shape is
 * (ndim, shape). Cuts at 0 and at shape[dim] are kept out (they cut
 * nothing). Errors: RS_ERR_INVALID_ARG for a dim or index out of range,
 * RS_ERR_INPUT for a shape that differs from the one the set holds for
 * the tensor. */
RS_API rs_status_t rs_cuts_add(rs_cuts_h cuts, const char *tensor, int ndim,
                               const int64_t *shape, int dim, int64_t at,
                               rs_diag_t *diag);

/* Adds every cut of `from` into `into` (a union); shape disagreements are
 * RS_ERR_INPUT naming the tensor, `into` unchanged then. */
RS_API rs_status_t rs_cuts_merge(rs_cuts_h into, rs_cuts_h from,
                                 rs_diag_t *diag);

RS_API size_t rs_cuts_num_tensors(rs_cuts_h cuts);
/* The name of tensor `index` (in name order), NULL past the end. */
RS_API const char *rs_cuts_tensor(rs_cuts_h cuts, size_t index);
/* The cuts of dim `dim` of `tensor`, sorted and strictly inside
 * (0, shape[dim]); NULL with *count_p = 0 when there are none. */
RS_API const int64_t *rs_cuts_get(rs_cuts_h cuts, const char *tensor,
                                  int dim, size_t *count_p);

/* Called once per sub-box, in row-major order of the grid of sub-boxes;
 * offset and shape are in the full tensor's coordinates (ndim entries,
 * valid during the call). A non-RS_OK return stops the split and is
 * returned by rs_cuts_split. */
typedef rs_status_t (*rs_cuts_box_fn)(void *ctx, const int64_t *offset,
                                      const int64_t *shape);

/* Splits the box (offset, shape) of `tensor` at every cut strictly inside
 * it, calling fn for each sub-box; a tensor without cuts (or a box that
 * no cut crosses) is one sub-box, the box itself. An empty box calls fn
 * once with it. Errors: RS_ERR_INPUT when the set holds the tensor with
 * another ndim, RS_ERR_INVALID_ARG for a negative extent. */
RS_API rs_status_t rs_cuts_split(rs_cuts_h cuts, const char *tensor, int ndim,
                                 const int64_t *offset, const int64_t *shape,
                                 rs_cuts_box_fn fn, void *ctx,
                                 rs_diag_t *diag);

/* reshard.cuts.v1 (docs/formats.md). The reader refuses bad input with
 * RS_ERR_INPUT naming the field and tensor; `origin` (a file name, a
 * directory record) prefixes its messages. */
RS_API rs_status_t rs_cuts_read_json(const char *text, size_t len,
                                     const char *origin, rs_diag_t *diag,
                                     rs_cuts_h *cuts_p);
RS_API rs_status_t rs_cuts_write_json(rs_cuts_h cuts, FILE *out,
                                      rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
