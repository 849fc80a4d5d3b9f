/* Quantized copies in the planner (docs/quantized-refit.md): the
 * expansion of a capture with quantized copies into the plan's working
 * capture (the same copies followed by the two derived copies of each
 * quantized one), the choice of path per copy, the receiver path's staged
 * read of the block-rounded box, and the plan's rs_quantized_t records. */
#ifndef RS_PLAN_PLAN_QUANT_H
#define RS_PLAN_PLAN_QUANT_H

#include "model/capture_impl.h"
#include "plan/planner.h"
#include "reshard/quant.h"

/* What the planner does with a copy of the working capture. */
enum {
    RS_QROLE_PLAIN = 0,  /* a copy of the user's capture, planned as ever */
    RS_QROLE_QUANT,      /* a quantized copy: never planned directly */
    RS_QROLE_DERIVED,    /* a derived copy on the publisher path: planned,
                          * selected when its quantized copy is */
    RS_QROLE_LOCAL,      /* a derived copy on the receiver path: replayed
                          * from the quantized box, not read */
    /* kept in the expansion's roles only (rs__quant_role answers
     * RS_QROLE_QUANT): a quantized copy whose declared source the
     * analysis found published as declared (rs__quant_decl_checked) */
    RS_QROLE_QUANT_CHECKED
};

/* A quantized copy's touched blocks: the block-rounded box [lo, lo +
 * box) of its source, and the grid of blocks it touches [glo, glo + gn)
 * of the whole grid. */
typedef struct rs__quant_blocks {
    int64_t lo[RS_MAX_DIMS], box[RS_MAX_DIMS];
    int64_t glo[RS_MAX_DIMS], gn[RS_MAX_DIMS];
    int64_t grid[RS_MAX_DIMS];
} rs__quant_blocks_t;

/* The same arrays as a quantized copy's record keeps them: ndim entries
 * each, in one run of the expansion's dims (rs__quant_expansion_t). */
typedef struct rs__quant_blocks_at {
    int64_t *lo, *box, *glo, *gn, *grid;
} rs__quant_blocks_at_t;

/* The longest reason a quantized copy's record keeps (with its NUL):
 * longer ones are cut there. */
#define RS_QUANT_WHY_MAX 320

/* One quantized copy while the plan is built, cleared when it is made
 * (name_one). Small, since every pass over the quantized copies reads
 * them all (ten thousand a MoE rank): its arrays of dims lie in the
 * expansion's dims, seven times its rank each (records holding arrays of
 * RS_MAX_DIMS were a kilobyte, of which a copy of two dims used a
 * tenth, spread over a dozen lines). */
typedef struct rs__planned_quant {
    size_t copy;               /* its index in the user's capture */
    int selected;              /* its param passes the selection */
    const char *refused;       /* set: the copy is refused (its source goes
                                * to fallback with this reason) */
    rs_quant_path_t path;
    /* the reason for the path, kept in the working capture's arena for a
     * refused copy (then also `refused`) and the receiver path; on the
     * publisher path, `served` is set instead and assembly writes it (the
     * text names the FP8 tensor) */
    const char *why;
    int served;
    /* on the receiver path because "<src>#<spec>" (1) or its scales (2)
     * are not published: assembly writes that reason, `why` is unset */
    int unserved;
    int blocks;                /* `bl` is set (a record lists zeros for its
                                * box until then) */
    /* "<src>#<spec>" and "<src>#<spec>#scale" (in the working capture's
     * arena) and their rs__hash_str (set by the analysis) */
    const char *qname, *sname;
    /* RS_QUANT_UNSERVED followed by qname, in the same string (qname is
     * its tail), or NULL where the record would cut that reason */
    const char *qwhy;
    uint64_t qhash, shash;
    int first_spec;            /* its spec is the expansion's first_spec */
    int hashed;                /* qhash and shash are set (ready_own, or
                                * the analysis where tables may hold
                                * derived names) */
    size_t weight_copy, scale_copy; /* SIZE_MAX while refused */
    rs_dtype_t src_dtype;      /* RS_DTYPE_INVALID when not known */
    rs_dtype_t format;         /* the FP8 format */
    int ndim;
    uint64_t needed_bytes;     /* what the view needs (receiver: the box) */
    /* the receiver path's staged read: seg_n runs from seg_at of the
     * expansion's segs (one vector for every box: a vector each was a
     * million allocations and frees a pass over Kimi-K2's ranks) */
    size_t seg_at, seg_n;
    uint64_t missing;
    /* the source, "<src>#<spec>" and its scales as published (NULL: not
     * published), looked up once by the analysis for the planner's
     * records too */
    struct rs__source_tensor *source, *served_q, *served_s;
    int live;                  /* planned and not in fallback (assembly) */
    /* its source is declared and published with the declared shape and
     * dtype: the planner's check of declared sources passes it over
     * (rs__quant_decl_checked, by its role) */
    int decl_same;
    /* the source's full shape, the block shape and the touched blocks,
     * ndim entries each (set with ndim by the analysis; NULL before) */
    int64_t *shape, *block;
    rs__quant_blocks_at_t bl;
} rs__planned_quant_t;

/* A view already resolved against a source shape: the box [vlo, vhi) a
 * copy of that geometry reads (quantized copies of a MoE rank's experts
 * share a handful of geometries and source shapes). */
typedef struct rs__quant_view_memo {
    uint32_t geom;
    int ndim;                  /* 0: empty entry */
    int64_t shape[RS_MAX_DIMS];
    int64_t vlo[RS_MAX_DIMS], vhi[RS_MAX_DIMS];
    /* the last scale region whose ops resolved over this view's touched
     * blocks: its block shape and its region's rank, sizes and strides
     * (scale_ndim -1: none yet); the same again resolves the same */
    int scale_ndim;
    int64_t block[RS_MAX_DIMS];
    int64_t scale_shape[RS_MAX_DIMS], scale_stride[RS_MAX_DIMS];
    size_t scale_copy; /* the working capture's last scale copy of that
                        * region (SIZE_MAX: none yet), whose geometry the
                        * next one shares */
    /* The whole check of a copy of this view with that scale region under
     * spec `spec` (known: 1), kept once one passed: its block shape and
     * touched blocks, and what its two destination regions span past
     * their offsets. A copy with the same view, spec and scale region
     * then checks only that both regions' ends lie inside their params. */
    int known;
    rs_quant_scheme_t scheme;
    rs_dtype_t format;
    int block_ndim;
    int64_t spec_block[RS_MAX_DIMS];
    rs__quant_blocks_t bl;
    int64_t weight_span, scale_span;
} rs__quant_view_memo_t;

#define RS_QUANT_VIEW_MEMO 16

typedef struct rs__quant_expansion {
    rs_capture_h work;         /* the working capture, owned until the plan
                                * takes it */
    size_t nuser;              /* copies of the user's capture */
    rs__planned_quant_t *q;
    size_t nq;
    unsigned char *role;       /* per working copy: RS_QROLE_* */
    size_t *owner;             /* per working copy: its rs__planned_quant_t */
    /* per name of the working capture: 1 when tensor_of_name holds its
     * published tensor (NULL: not published), found by the analysis */
    unsigned char *name_known;
    struct rs__source_tensor **tensor_of_name;
    rs__segment_vec_t segs;    /* the receiver boxes' runs (seg_at) */
    rs__arena_t dims;          /* the records' arrays of dims */
    /* the user's capture holds no name with RS_QUANT_NAME_SEP: no name
     * of the user's can be a derived name, and "<src>#<spec>" is the
     * same name exactly when src and spec are the same. Derived names
     * of the first spec are then added to the working capture
     * unindexed, once per source (derived_of) */
    int fresh_names;
    char first_spec[128];      /* that spec ("" before the first copy) */
    /* per name of the user's capture: 1 + the id of its derived FP8
     * name under first_spec (its scales' is the next), 0 while none */
    uint32_t *derived_of;
    rs_op_t *ops;              /* room for a scale copy's ops (one narrow
                                * per dim and a view) */
    rs__quant_view_memo_t views[RS_QUANT_VIEW_MEMO]; /* by geometry id */
    rs__quant_view_memo_t *scale_like; /* the entry whose scale region the
                                        * copy being expanded has, or NULL */
    char why[RS_QUANT_WHY_MAX]; /* the copy's reason while it is made */
    int oom;                   /* keeping a reason ran out of memory */
    rs_quant_desc_t spec_of;   /* the spec `spec` is the text of */
    int64_t spec_block[RS_MAX_DIMS];
    char spec[128];            /* "" while none is kept */
} rs__quant_expansion_t;

/* 1 when the first n entries of a and b are equal: the shapes the
 * quantized planner compares are a few dims, where a call to memcmp cost
 * more than the loop (and read them back in other widths than they were
 * just written). */
static inline int rs__quant_same_dims(const int64_t *a, const int64_t *b,
                                      int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* Copies the first n entries of src to dst, an element at a time: the
 * dims the quantized planner copies are a few, read back soon after as
 * single elements, and a call to memcpy for them cost more than the
 * copy (its wide stores do not forward to the narrower loads that read
 * them, and a record's three arrays copied by memcpy were a sixth of a
 * receiver-only Kimi-K2 FP8 plan). */
static inline void rs__quant_copy_dims(int64_t *dst, const int64_t *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = src[i];
}

/* The start of the receiver path's reason when no table publishes a
 * copy's FP8 tensor or its scales: "no publisher serves <name>". */
#define RS_QUANT_UNSERVED "no publisher serves "

/* 1 when some copy of the capture is quantized. O(copies). */
int rs__quant_any(rs_capture_h capture);

/* Builds the expansion of a capture with quantized copies: checks each
 * quantized copy (geometry, dtype, scale region; a refused copy keeps its
 * reason), chooses its path against the sources and builds the working
 * capture. RS_ERR_NO_MEMORY, or an error of the capture calls (diag set). */
rs_status_t rs__quant_expand(rs_capture_h capture, rs_sources_h sources,
                             const rs_plan_params_t *params, rs_diag_t *diag,
                             rs__quant_expansion_t **qx_p);
void rs__quant_free(rs__quant_expansion_t *qx);

/* Nonzero with *t_p set when the expansion already looked name `name_id`
 * of the working capture up in the sources: RS_QUANT_KNOWN_SOURCE for a
 * quantized copy's source, RS_QUANT_KNOWN_DERIVED for a derived copy's.
 * The planner's record then needs no second lookup. O(1). */
enum { RS_QUANT_KNOWN_SOURCE = 1, RS_QUANT_KNOWN_DERIVED = 2 };
int rs__quant_known_tensor(const rs__planner_t *b, uint32_t name_id,
                           struct rs__source_tensor **t_p);

/* Before derived copy ci is walked: when it is a scale copy whose weight
 * copy was the last copy walked, b->walk_pair is the index of the first
 * FP8 shard that walk read and b->walk_pair_session its session. The
 * scale tensor's shard of that index, listed by the same table when the
 * session matches, then serves the scales if it holds them all
 * (rs__planner_walk_copy). Else b->walk_pair is left as it is. O(1). */
void rs__quant_scale_pair(rs__planner_t *b, size_t ci);

/* 1 when working copy ci is a quantized copy whose declared source the
 * expansion found published with the declared shape and dtype: the
 * planner's check of declared sources has nothing to refuse there, and
 * a source the plan may never read needs no record of its own. O(1). */
int rs__quant_decl_checked(const rs__planner_t *b, size_t ci);

/* How many working copies, from the first, may read a declared source:
 * all of them, but where no name of the user's capture holds
 * RS_QUANT_NAME_SEP only the user's own copies (the derived copies'
 * sources are then names no declaration has). O(1). */
size_t rs__quant_declared_copies(const rs__planner_t *b);

/* The role of working copy ci (RS_QROLE_PLAIN without an expansion). */
int rs__quant_role(const rs__planner_t *b, size_t ci);

/* Prefetches what the walks of the derived copies a few places after
 * working copy ci will read (their tensor record, shard list and grid):
 * only a hint, the walks read the same whether it lands or not. O(1). */
void rs__quant_ready_walk(const rs__planner_t *b, size_t ci);

/* After every copy is walked: the refused copies' sources to fallback,
 * the receiver path's boxes walked. */
rs_status_t rs__quant_plan(rs__planner_t *b);

/* At the end of assembly: the plan's records (and the uncovered entries
 * of receiver boxes not fully published), the stats with the receiver
 * boxes' bytes and descriptors, and the copy counts of the user's
 * capture (a quantized copy counts once, its derived copies not).
 * `descs` holds the descriptors per session of every other read of the
 * plan (its segments, converts and staged reads), as assembly counted
 * them; the receiver boxes' are added to it. */
rs_status_t rs__quant_assemble(rs__planner_t *b, uint64_t *descs);

/* The published tensors a quantized copy may read, looked up once per
 * copy: its source, "<src>#<spec>" and "<src>#<spec>#scale" (NULL when not
 * published). */
typedef struct rs__quant_tensors {
    const struct rs__source_tensor *q, *s;
    rs_sources_h sources;
    const char *src_name;
    const struct rs__source_tensor *src; /* rs__quant_source: on demand */
    int src_found;
    /* the first shard of q holding the view's whole box and of s holding
     * its whole block grid, as the publisher check found them (SIZE_MAX:
     * not looked for); the path estimate then reads them, not the lists */
    size_t q_holder, s_holder;
} rs__quant_tensors_t;

/* The copy's published source, looked up on first use (most copies never
 * need it: their source is declared and the publisher path wins). */
const struct rs__source_tensor *rs__quant_source(rs__quant_tensors_t *t);

/* Publisher path (plan_quant_pub.c): 1 when "<src>#<spec>" (qname) and its
 * scales (sname) are published with the right shapes and dtypes and their
 * shards hold every element the copy needs; else 0 with `why` saying what
 * is missing. O(shards + touched blocks), O(shards) when one shard of each
 * holds all the copy needs (then t->q_holder and t->s_holder say which). */
int rs__quant_publisher_serves(rs__quant_tensors_t *t,
                               const rs__planned_quant_t *pq,
                               const char *src, const char *qname,
                               const char *sname, const int64_t *view_lo,
                               const int64_t *view_hi, char *why,
                               size_t whylen);

/* 1 when the shard holds the box [lo, hi) of its n-dim tensor whole (and
 * is not empty). */
int rs__quant_shard_holds(const struct rs__source_shard *sh, int n,
                          const int64_t *lo, const int64_t *hi);

/* The estimated seconds of each path (plan_quant_cost.c): the publisher
 * path's reads of the FP8 values and scales, the receiver path's read of
 * the block-rounded bf16 box plus a fixed cost per box; each shard by its runs
 * or as one span, whichever is cheaper, at the plan's nic_gbps and
 * descriptor_ns. *recv_p is a lower bound when it cannot win (the source's
 * shards are then not looked at), INFINITY when the source's dtype is
 * unknown. O(shards of the tensors read). */
void rs__quant_path_costs(rs__quant_tensors_t *t,
                          const rs_plan_params_t *params,
                          const rs__planned_quant_t *pq, const int64_t *vlo,
                          const int64_t *vhi, double *pub_p, double *recv_p);

/* Copy `index` of a capture as the capture format writes it (one JSON
 * object, no newline; capture_write.c): the plan writer lists derived
 * copies, which no capture file holds. RS_ERR_INPUT for an unknown op. */
rs_status_t rs__capture_put_copy(FILE *out, rs_capture_h capture, size_t index,
                                 rs_diag_t *diag);

/* Shared planner helpers the quantized expansion reuses (plan_copies.c). */
int rs__plan_selected(const rs_plan_params_t *p, const char *param);
const char *rs__plan_check_dest(const rs__capture_copy_t *c,
                                const rs__capture_param_t *p);
/* rs__plan_check_dest, and on success with a non-empty region *known_p
 * set and *span_p the elements it spans past its offset, minus one: the
 * same shape and strides at offset o check out exactly when o + span is
 * inside the param (and does not overflow). */
const char *rs__plan_check_dest_span(const rs__capture_copy_t *c,
                                     const rs__capture_param_t *p,
                                     int *known_p, int64_t *span_p);
rs_status_t rs__planner_psrc(rs__planner_t *b, uint32_t name_id,
                             uint32_t *id_p);

#endif
