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
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest tensor rank anywhere in a chain (source, intermediate, destination). */
#define RS_MAX_DIMS 16

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
