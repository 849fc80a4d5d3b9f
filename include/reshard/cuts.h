/* Cut points: for each source tensor and each of its dims, the sorted
 * element indices where some receiver's needed box begins or ends. A
 * shard stored row-major serves a box that slices an inner dim one row at
 * a time; a publisher that stores its shard as the sub-boxes between the
 * cuts inside it (docs/cut-aligned.md) serves every
 * receiver's box as a few whole sub-boxes, each one contiguous run.
 *
 * Receivers derive their cuts from their capture (rs_cuts_add_capture) and
 * announce them through the directory; publishers merge every announced
 * set and split their shards with rs_cuts_split. The reshard.cuts.v1 JSON
 * form (docs/formats.md) is what travels and what `--cuts FILE` reads.
 *
 * Threads: a cut set is used by one thread at a time; a set only read
 * (get, split, write) may be read from several threads at once.
 * Cost: adding is a binary search per point plus moving the later cuts of
 * its dim (points arrive mostly in order); a call that adds new tensors
 * ends by restoring name order (one insertion, or a sort of all names).
 * Split is O(sub-boxes) plus a binary search per dim. */
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

/* An empty set. RS_ERR_INVALID_ARG for a NULL output, RS_ERR_NO_MEMORY. */
RS_API rs_status_t rs_cuts_create(rs_diag_t *diag, rs_cuts_h *cuts_p);
/* Frees the set and every name and array it returned; NULL is a no-op. */
RS_API void rs_cuts_destroy(rs_cuts_h cuts);

/* The model the cuts are for (the optional "model" of reshard.cuts.v1), or
 * NULL; valid until the set changes it or is destroyed. */
RS_API const char *rs_cuts_model(rs_cuts_h cuts);
/* Names the model (copied; NULL clears it). RS_ERR_INVALID_ARG for a NULL
 * set, RS_ERR_NO_MEMORY. */
RS_API rs_status_t rs_cuts_set_model(rs_cuts_h cuts, const char *model,
                                     rs_diag_t *diag);

/* Adds the bounds of every box the capture reads: each copy resolved
 * against its declared source (rs_capture_declare_source); for every dim
 * of the resolved box, its first index and one past its last. Copies of
 * undeclared or unsupported sources, and copies whose ops do not resolve,
 * add nothing (the planner reports them). Each quantized copy of a
 * source not marked unsupported also adds its (source, spec) pair (below),
 * whether or not its ops resolve. Errors: RS_ERR_INPUT when the
 * capture declares a tensor with another shape than this set holds for
 * it (naming the tensor and both shapes), RS_ERR_NO_MEMORY. */
RS_API rs_status_t rs_cuts_add_capture(rs_cuts_h cuts, rs_capture_h capture,
                                       rs_diag_t *diag);

/* Quantized copies wanted (docs/quantized-refit.md, "Publisher-side
 * quantization"): the set also holds (source tensor, spec) pairs, sorted by
 * source then spec and unique, each saying that a receiver's capture
 * quantizes `src` with the spec whose canonical text (rs_quant_spec_format)
 * is `spec`. rs_cuts_add_capture adds one per quantized copy
 * (rs_capture_copy_quant) of a supported source, and rs_cuts_merge takes
 * the union. A publisher serving what receivers want
 * (rs_publisher_params_t.quantize_wanted) serves "<src>#<spec>" and its
 * scales for every pair naming a tensor it registered. Adding a pair
 * already held is a no-op. Errors: RS_ERR_INVALID_ARG for NULL arguments,
 * RS_ERR_INPUT for an empty source or one holding '#', a spec that does
 * not parse or is not in its canonical spelling (naming source and spec),
 * RS_ERR_NO_MEMORY. Cost: a binary search, and moving the later pairs
 * (none when pairs arrive in order). */
RS_API rs_status_t rs_cuts_add_quant(rs_cuts_h cuts, const char *src,
                                     const char *spec, rs_diag_t *diag);
/* The pairs held. */
RS_API size_t rs_cuts_num_quants(rs_cuts_h cuts);
/* Pair `index` (in (src, spec) order): 1 and both strings set (valid until
 * the set next changes), or 0 past the end (outputs untouched). */
RS_API int rs_cuts_quant(rs_cuts_h cuts, size_t index, const char **src_p,
                         const char **spec_p);

/* Adds one cut: index `at` of dim `dim` of `tensor`, whose full shape is
 * (ndim, shape). Cuts at 0 and at shape[dim] are kept out (they cut
 * nothing). Errors: RS_ERR_INVALID_ARG for a dim or index out of range,
 * RS_ERR_INPUT for a shape that differs from the one the set holds for
 * the tensor. */
RS_API rs_status_t rs_cuts_add(rs_cuts_h cuts, const char *tensor, int ndim,
                               const int64_t *shape, int dim, int64_t at,
                               rs_diag_t *diag);

/* Adds every cut and quantized-copy pair of `from` into `into` (a union),
 * and from's model when `into` names none. Shape disagreements, and two different models, are
 * RS_ERR_INPUT naming the tensor (or both models), `into` unchanged then;
 * after RS_ERR_NO_MEMORY `into` may hold part of `from`. */
RS_API rs_status_t rs_cuts_merge(rs_cuts_h into, rs_cuts_h from,
                                 rs_diag_t *diag);

/* Tensors the set holds (each with its shape, with or without cuts). */
RS_API size_t rs_cuts_num_tensors(rs_cuts_h cuts);
/* The name of tensor `index` (in name order, strcmp), NULL past the end;
 * valid until the set is destroyed. */
RS_API const char *rs_cuts_tensor(rs_cuts_h cuts, size_t index);
/* The full shape the set holds for `tensor` (*ndim_p entries), or NULL
 * (*ndim_p = -1) when it does not hold the tensor. Valid until the set is
 * destroyed. Cost: a hash of the name. */
RS_API const int64_t *rs_cuts_shape(rs_cuts_h cuts, const char *tensor,
                                    int *ndim_p);
/* The cuts of dim `dim` of `tensor`, sorted and strictly inside
 * (0, shape[dim]); NULL with *count_p = 0 when there are none (or the set
 * does not hold the tensor, or dim is out of its range). Valid until the
 * set next changes. Cost: a hash of the name. */
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
 * another ndim, RS_ERR_INVALID_ARG for a negative offset or extent, an
 * end past 2^63-1, a rank outside 0..RS_MAX_DIMS or NULL arguments; fn's
 * own status when it stops the split. */
RS_API rs_status_t rs_cuts_split(rs_cuts_h cuts, const char *tensor, int ndim,
                                 const int64_t *offset, const int64_t *shape,
                                 rs_cuts_box_fn fn, void *ctx,
                                 rs_diag_t *diag);

/* rs_cuts_split for a box of a tensor quantized in blocks (block[d]
 * elements along dim d, docs/quantized-refit.md): the box is split only at
 * the cuts of `tensor` that fall on a multiple of block[d], so every
 * sub-box is whole blocks when the box is (each block lies in one sub-box
 * and is quantized whole there). A publisher serving a source's FP8 values
 * cuts them at the source's own cuts this way, and their scales at those
 * cuts divided by the block. Errors as rs_cuts_split, and
 * RS_ERR_INVALID_ARG for a block extent below 1 or a NULL block. */
RS_API rs_status_t rs_cuts_split_blocks(rs_cuts_h cuts, const char *tensor,
                                        int ndim, const int64_t *block,
                                        const int64_t *offset,
                                        const int64_t *shape,
                                        rs_cuts_box_fn fn, void *ctx,
                                        rs_diag_t *diag);

/* reshard.cuts.v1 (docs/formats.md). The reader refuses bad input with
 * RS_ERR_INPUT naming the field and tensor; `origin` (a file name, a
 * directory record) prefixes its messages. It makes a new set, owned by
 * the caller; *cuts_p is set only on success. The writer writes the one
 * spelling the reader accepts (tensors in name order, cuts increasing);
 * RS_ERR_IO when the stream fails. */
RS_API rs_status_t rs_cuts_read_json(const char *text, size_t len,
                                     const char *origin, rs_diag_t *diag,
                                     rs_cuts_h *cuts_p);
RS_API rs_status_t rs_cuts_write_json(rs_cuts_h cuts, FILE *out,
                                      rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
