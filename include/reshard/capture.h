/* Captures: what one inference rank's weight loader reads. A capture lists the
 * destination parameters, the full shape and dtype the loader assumed for each
 * source it reads, and, for every copy, a chain of view ops over a full source
 * tensor and the strided destination region it lands in. Captures are loaded
 * from reshard.capture.v1 JSON or built programmatically.
 *
 * Threads: a capture is not locked; build it (add, declare, load) from one
 * thread at a time, with no reader meanwhile. A built capture is only read
 * (by the accessors, rs_capture_write_json and the planner), from any number
 * of threads at once: several plans may be built from one capture
 * concurrently (tests/unit/plan/test_plan_threads.c). Accessors are O(1);
 * the find functions hash the name. */
#ifndef RESHARD_CAPTURE_H
#define RESHARD_CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/dtype.h"
#include "reshard/quant.h"
#include "reshard/status.h"
#include "reshard/view.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_capture *rs_capture_h;

/* One captured copy, as handed to rs_capture_add_copy. The capture copies
 * every array and string; the caller keeps ownership of its own. */
typedef struct rs_copy_desc {
    const char *src;
    const char *param;
    const rs_op_t *ops;
    size_t nops;
    int64_t dest_offset;        /* elements from element 0 of the param storage */
    int ndim;
    const int64_t *dest_shape;
    const int64_t *dest_stride; /* elements */
    rs_dtype_t dest_dtype;
} rs_copy_desc_t;

RS_API rs_status_t rs_capture_create(rs_capture_h *capture_p);
RS_API void rs_capture_destroy(rs_capture_h capture);

/* Declares a destination parameter. RS_ERR_INPUT on a duplicate name, a
 * negative or overflowing shape or an invalid dtype. */
RS_API rs_status_t rs_capture_add_param(rs_capture_h capture, const char *name,
                                        int ndim, const int64_t *shape,
                                        rs_dtype_t dtype, rs_diag_t *diag);

/* Appends a copy. Only shapes are checked here (rank, non-negative sizes);
 * geometry and bounds are checked by the planner, which reports per source. */
RS_API rs_status_t rs_capture_add_copy(rs_capture_h capture,
                                       const rs_copy_desc_t *copy,
                                       rs_diag_t *diag);

/* Appends a copy whose values are quantized to FP8 on the way
 * (reshard/quant.h): copy->dest_dtype is quant->format, and the scales of
 * the blocks the copy's view touches land in quant's scale region. The
 * capture copies both descriptors. Checked here: the scheme, format and
 * block (rs_quant_block_shape's rules; against the source's rank when it
 * is already declared), a declared float32 scale parameter, the scale
 * region's rank, sizes, strides and offset and that it stays inside the
 * scale parameter (one element for fp8_tensor), and that dest_dtype, and
 * the copy's parameter's dtype when it is declared, is the format. The
 * copy's own shape is checked as rs_capture_add_copy does. RS_ERR_INPUT
 * with the diag naming the copy (by index, source and parameter) and the
 * field ("copy 3 ('w' into 'p'): quant.scale_param: ..."); RS_ERR_INVALID_ARG
 * for NULL arguments; RS_ERR_NO_MEMORY. Nothing is added on failure.
 * Whether the scale region matches the touched blocks, and the source's
 * dtype (bf16, f16 or f32), are checked by the planner, which needs the
 * source's full shape. */
RS_API rs_status_t rs_capture_add_quant_copy(rs_capture_h capture,
                                             const rs_copy_desc_t *copy,
                                             const rs_quant_desc_t *quant,
                                             rs_diag_t *diag);

/* Declares the full shape and dtype the loader assumed for source `src`:
 * the tensor its ops were computed against (for a Hugging Face loader, the
 * checkpoint tensor as the model config describes it). The planner compares
 * every declared source a planned copy reads with what the shard tables
 * publish and refuses one whose full shape or dtype differs: the source goes
 * to the plan's fallback list with a reason naming the tensor and both
 * shapes and dtypes, so the plan is incomplete and nothing of it is
 * installed. A source no declaration names is planned against whatever is
 * published, as captures without declarations always were.
 *
 * Declaring a source again with the same shape and dtype is a no-op.
 * RS_ERR_INPUT when it was declared with another shape or dtype, for a rank
 * outside 0..RS_MAX_DIMS, a negative or overflowing shape or an invalid
 * dtype; RS_ERR_INVALID_ARG for NULL arguments; RS_ERR_NO_MEMORY. The
 * capture copies the name and the shape. */
RS_API rs_status_t rs_capture_declare_source(rs_capture_h capture,
                                             const char *src, int ndim,
                                             const int64_t *shape,
                                             rs_dtype_t dtype, rs_diag_t *diag);

/* Records a source the loader read through an op capture could not express. */
RS_API rs_status_t rs_capture_add_unsupported(rs_capture_h capture,
                                              const char *src,
                                              const char *reason,
                                              rs_diag_t *diag);

/* Loads reshard.capture.v1 JSON. On failure the diag names the file, the JSON
 * path and the problem; *capture_p is untouched. */
RS_API rs_status_t rs_capture_load_file(const char *path, rs_diag_t *diag,
                                        rs_capture_h *capture_p);
RS_API rs_status_t rs_capture_load_string(const char *json, size_t len,
                                          const char *origin, rs_diag_t *diag,
                                          rs_capture_h *capture_p);

/* Read access. Indices are in insertion order; pointers stay valid until the
 * capture is destroyed. */
typedef struct rs_param_info {
    const char *name;
    int ndim;
    const int64_t *shape;
    rs_dtype_t dtype;
    uint64_t nbytes; /* prod(shape) * element size */
} rs_param_info_t;

RS_API size_t rs_capture_num_params(rs_capture_h capture);
RS_API void rs_capture_param(rs_capture_h capture, size_t index,
                             rs_param_info_t *info_p);
/* Index of a parameter by name, or -1. */
RS_API long rs_capture_find_param(rs_capture_h capture, const char *name);
RS_API size_t rs_capture_num_copies(rs_capture_h capture);
RS_API void rs_capture_copy(rs_capture_h capture, size_t index,
                            rs_copy_desc_t *copy_p);
/* 1 and *quant_p filled (pointers owned by the capture) when copy `index`
 * is quantized, else 0 and *quant_p untouched. */
RS_API int rs_capture_copy_quant(rs_capture_h capture, size_t index,
                                 rs_quant_desc_t *quant_p);
/* Declared sources (rs_capture_declare_source, or the "sources" key of the
 * JSON), in declaration order. */
typedef struct rs_source_info {
    const char *name;
    int ndim;
    const int64_t *shape;
    rs_dtype_t dtype;
} rs_source_info_t;

RS_API size_t rs_capture_num_sources(rs_capture_h capture);
RS_API void rs_capture_source(rs_capture_h capture, size_t index,
                              rs_source_info_t *info_p);
/* Index of a declared source by name, or -1 when it is not declared. */
RS_API long rs_capture_find_source(rs_capture_h capture, const char *name);
RS_API size_t rs_capture_num_unsupported(rs_capture_h capture);
RS_API void rs_capture_unsupported(rs_capture_h capture, size_t index,
                                   const char **src_p, const char **reason_p);
RS_API int64_t rs_capture_unattributed(rs_capture_h capture);

/* Writes a capture as reshard.capture.v1 JSON (it loads back identically).
 * RS_ERR_IO when the stream fails. */
RS_API rs_status_t rs_capture_write_json(rs_capture_h capture, FILE *out,
                                         rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
