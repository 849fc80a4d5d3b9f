/* Internal layout of a capture, shared by the capture model, its JSON
 * loader and the planner. */
#ifndef RS_PLAN_CAPTURE_IMPL_H
#define RS_PLAN_CAPTURE_IMPL_H

#include "core/arena.h"
#include "core/strmap.h"
#include "core/vec.h"
#include "reshard/capture.h"

typedef struct rs__capture_param {
    const char *name;
    int ndim;
    int64_t *shape;
    rs_dtype_t dtype;
    int64_t numel;
    uint64_t nbytes;
} rs__capture_param_t;

typedef struct rs__capture_copy {
    const char *src;    /* the interned name: names[src_id].name */
    const char *param;
    uint32_t src_id;    /* index into names */
    uint32_t param_id;  /* index into params, or UINT32_MAX when the param
                         * was not yet declared when the copy was added */
    rs_op_t *ops;
    size_t nops;
    int64_t dest_offset;
    int ndim;
    int64_t *dest_shape;
    int64_t *dest_stride;
    rs_dtype_t dest_dtype;
    rs_quant_desc_t *quant; /* in the arena; NULL when not quantized */
    uint32_t geom;      /* geometry id: copies with equal ops, dest shape and
                         * dest strides share it (and those arrays) */
    uint32_t scale_param_id; /* quantized: its scale param's index (declared
                              * before the copy is added) */
} rs__capture_copy_t;

/* One numbered geometry: its hash and the first copy that has it. */
typedef struct rs__capture_geom {
    uint64_t hash;
    size_t copy;
} rs__capture_geom_t;

/* The full shape and dtype the loader assumed for one source. */
typedef struct rs__capture_source {
    const char *name;
    int ndim;
    int64_t *shape;
    rs_dtype_t dtype;
} rs__capture_source_t;

typedef struct rs__capture_unsupported {
    const char *src;
    const char *reason;
    uint32_t src_id;    /* index into names */
} rs__capture_unsupported_t;

/* Every source name a copy, declaration or unsupported entry uses, held
 * once: the planner indexes its per-source records by name id instead of
 * hashing a name per copy (docs/performance.md, "What a plan does per
 * copy"). */
typedef struct rs__capture_name {
    const char *name;
    long decl;          /* index into sources, or -1 when undeclared */
    uint64_t hash;      /* rs__hash_str(name), for the planner's lookups */
} rs__capture_name_t;

struct rs_capture {
    rs__arena_t arena;
    RS_VEC(rs__capture_param_t, params);
    rs__strmap_t param_index;
    RS_VEC(rs__capture_copy_t, copies);
    RS_VEC(rs__capture_source_t, sources);
    RS_VEC(rs__capture_unsupported_t, unsupported);
    rs__strmap_t unsupported_index;
    RS_VEC(rs__capture_name_t, names);
    rs__strmap_t name_index;
    /* some name interned so far holds RS_QUANT_NAME_SEP: it may be a
     * quantized copy's derived name (rs__capture_named_derived) */
    int named_derived;
    int64_t unattributed;
    RS_VEC(rs__capture_geom_t, geoms);   /* by geometry id */
    uint32_t *geom_slots;           /* open addressing: id + 1, 0 empty */
    size_t geom_slots_len;          /* a power of two, or 0 */
};

void rs__capture_set_unattributed(rs_capture_h capture, int64_t count);

/* The declared source of that name, or NULL (an older capture, or a source
 * its producer did not declare). */
const rs__capture_source_t *rs__capture_find_source(rs_capture_h capture,
                                               const char *name);

/* Geometry numbering (capture_geom.c). find: the copy already added with
 * the descriptor's op chain, dest shape and dest strides, or NULL; *hash_p
 * receives the hash for a following add. add: numbers a new geometry whose
 * first copy is `copy`; 0 on exhaustion. */
const rs__capture_copy_t *rs__capture_geom_find(rs_capture_h cap,
                                           const rs_copy_desc_t *d,
                                           uint64_t *hash_p);
int rs__capture_geom_add(rs_capture_h cap, size_t copy, uint64_t hash,
                         uint32_t *id_p);
void rs__capture_geom_free(rs_capture_h cap);

/* The fields of a quantized copy a check can refuse, so that each reader
 * names the field in its own terms (the C descriptor's, a JSON path). */
typedef enum rs__quant_field {
    RS__QF_SCHEME,
    RS__QF_FORMAT,
    RS__QF_BLOCK,
    RS__QF_SCALE_PARAM,
    RS__QF_SCALE_OFFSET,
    RS__QF_SCALE_SHAPE,
    RS__QF_SCALE_STRIDE,
    RS__QF_DEST_DTYPE,
    RS__QF_COUNT
} rs__quant_field_t;

/* The checks rs_capture_add_quant_copy makes (capture.h), with the message
 * naming the problem only: the caller names the copy and the field, which
 * *field_p holds on failure. */
rs_status_t rs__capture_check_quant(rs_capture_h capture,
                                    const rs_copy_desc_t *copy,
                                    const rs_quant_desc_t *quant,
                                    rs_diag_t *diag,
                                    rs__quant_field_t *field_p);

/* "quant.scheme", "quant.scale_param", ...: the C descriptor's field. */
const char *rs__quant_field_name(rs__quant_field_t field);

/* The capture's own copy of a checked spec whose scale parameter the
 * capture declares, and that parameter's index; NULL on exhaustion. */
rs_quant_desc_t *rs__capture_dup_quant(rs_capture_h cap,
                                       const rs_quant_desc_t *q,
                                       uint32_t *scale_param_p);

/* The id of a source name, interned when new; `hash` is rs__hash_str(name)
 * and `name` lives in the capture's arena already (it becomes the
 * interned name, not copied). 0 on exhaustion. */
int rs__capture_intern_owned(rs_capture_h capture, const char *name,
                             uint64_t hash, uint32_t *id_p);

/* A new name id for `name` (living as long as the capture), without the
 * name index: no lookup finds it, the same name added again gets another
 * id, its hash is 0, and rs__capture_named_derived does not count it.
 * For names their caller keeps unique and nothing looks up by text (the
 * planner's derived names, kept once per source when the capture holds
 * no name like them: interning each cost a hash of the name and a probe
 * of a table of tens of thousands of slots). 0 on exhaustion. O(1). */
int rs__capture_add_name_unindexed(rs_capture_h capture, const char *name,
                                   uint32_t *id_p);

/* 1 when some name the capture interned (a copy's source, a declared
 * source, an unsupported entry) holds RS_QUANT_NAME_SEP. O(1). */
int rs__capture_named_derived(rs_capture_h capture);

/* rs_capture_add_copy for a checked descriptor whose source is interned
 * name src_id (the copy->src field is not read). */
rs_status_t rs__capture_add_copy_id(rs_capture_h capture,
                                    const rs_copy_desc_t *copy,
                                    uint32_t src_id, rs_diag_t *diag);

/* Appends a copy that is copy `like` of the same capture but for its
 * source, interned name src_id, and its dest dtype: a quantized copy's
 * weight copy, with the geometry, param and destination the capture
 * already checked and numbered for `like`. Unquantized. RS_ERR_NO_MEMORY
 * (diag set). O(1). */
/* Appends a copy that is copy `like` of the same capture (its geometry,
 * numbered, and dest dtype) but for its source, interned name src_id, its
 * parameter, declared as param_id, and its dest offset: a quantized
 * copy's scale copy with the geometry of an earlier one. The caller has
 * checked the destination against the parameter. RS_ERR_NO_MEMORY (diag
 * set). O(1). */
rs_status_t rs__capture_add_like_at(rs_capture_h cap, size_t like,
                                    uint32_t src_id, uint32_t param_id,
                                    int64_t dest_offset, rs_diag_t *diag);
rs_status_t rs__capture_add_like(rs_capture_h cap, size_t like,
                                 uint32_t src_id, rs_dtype_t dtype,
                                 rs_diag_t *diag);

/* The planner's working capture (capture_frame.c): a new capture with
 * `from`'s params, sources, unsupported entries, names, copies and
 * geometries at the same indices and ids, borrowing what they point at
 * from `from`, which must outlive it, with room for `extra` more copies
 * and names (no table grows while they are added). RS_ERR_NO_MEMORY.
 * O(tables + extra). */
rs_status_t rs__capture_work_copy(rs_capture_h from, size_t extra,
                                  rs_capture_h *to_p, rs_diag_t *diag);

#endif
