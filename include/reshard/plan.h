/* The transfer planner: intersect what a capture needs with what the sources
 * publish and emit the exact byte runs to read. A plan is immutable once
 * built; it owns every record it returns, and borrows its capture.
 *
 * Threads: rs_plan_build only reads its capture and sources (see
 * sources.h for the one index it builds there under a lock), so plans may
 * be built on several threads at once from the same inputs. A built plan is
 * only read: its accessors and writers (each with its own FILE) may be
 * called from any number of threads at once, and several executors may run
 * over one plan concurrently, each with its own transport
 * (tests/unit/plan/test_plan_threads.c).
 * Cost: every accessor is O(1) (arrays are returned whole); building is
 * roughly linear in the capture's copies and the shards of the sources they
 * read (indexed by a per-tensor grid; docs/performance.md, "Complexity"); the
 * writers are linear in the plan. */
#ifndef RESHARD_PLAN_H
#define RESHARD_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/capture.h"
#include "reshard/sources.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_plan *rs_plan_h;

#define RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY 64
#define RS_PLAN_DEFAULT_SPLIT_BYTES ((uint64_t)64 << 20)
#define RS_PLAN_DEFAULT_NIC_GBPS 400.0
#define RS_PLAN_DEFAULT_DESCRIPTOR_NS 100.0

/* Planner options. Always start from rs_plan_params_init. */
typedef struct rs_plan_params {
    size_t size; /* the caller's sizeof, set by rs_plan_params_init */
    /* A hard cap: a copy needing more exact runs than this is read through
     * a staged box or a full pull whenever one is possible. */
    int64_t max_segments_per_copy;
    /* Glob patterns (fnmatch) over parameter names; NULL/0 = every parameter. */
    const char *const *only;
    size_t nonly;
    /* Rotates the deterministic replica choice so that receivers with
     * different salts (their rank, say) spread over different replicas. */
    uint64_t replica_salt;
    /* A cell of at least this many bytes held by several replicas is cut
     * across them (one slice per replica); 0 never cuts. Default 64 MiB. */
    uint64_t split_bytes;
    /* The cost model (docs/cost-model.md): a way of moving a
     * copy's bytes is estimated to take, on the session it loads most,
     * its bytes over nic_gbps plus its descriptors times descriptor_ns;
     * the planner keeps the way whose plan finishes first.
     * max_segments_per_copy stays a hard cap on any one copy's exact runs.
     * Defaults RS_PLAN_DEFAULT_NIC_GBPS and RS_PLAN_DEFAULT_DESCRIPTOR_NS;
     * both must be positive and finite. */
    double nic_gbps;
    double descriptor_ns;
} rs_plan_params_t;

/* Defaults; max_segments_per_copy comes from RESHARD_MAX_SEGMENTS_PER_COPY
 * when that variable holds a positive integer, else 64. */
/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_plan_params_init_sized(rs_plan_params_t *params, size_t size);
#define rs_plan_params_init(p) rs_plan_params_init_sized((p), sizeof(*(p)))

/* One byte run to read: nbytes at src_addr of session into the target
 * (a parameter for exact segments, else the group's staging buffer). */
typedef struct rs_segment {
    uint32_t session;  /* index into rs_plan_session_name */
    uint32_t param;    /* capture param index (exact segments only) */
    uint64_t src_addr;
    uint64_t dst_byte;
    uint64_t nbytes;
} rs_segment_t;

/* A copy whose source dtype differs from its destination: its segments fill
 * a row-major staging buffer of dest_shape in src_dtype, which is then cast
 * into the copy's destination region. */
typedef struct rs_convert {
    size_t copy;       /* index into the capture's copies */
    uint32_t param;
    rs_dtype_t src_dtype;
    rs_dtype_t dest_dtype;
    uint64_t staging_bytes;
    const rs_segment_t *segments;
    size_t nsegments;
} rs_convert_t;

/* How a staged read's box was chosen (docs/cost-model.md). */
typedef enum rs_staged_kind {
    RS_STAGED_FULL = 0,      /* the whole source: a full pull */
    RS_STAGED_COALESCED = 1, /* the copy's bounding box, widened in its inner
                              * dims as far as the gaps it reads through are
                              * cheaper to read than a descriptor */
    RS_STAGED_BOUND = 2      /* the copy's bounding box widened in every dim
                              * but the first to the shards it touches, so
                              * that each shard's part is one run */
} rs_staged_kind_t;

/* A staged read: the box box_lo[d] .. box_lo[d] + box_shape[d] of a source
 * read into a row-major staging buffer of box_shape, from which its
 * captured copies are replayed locally (their op chains applied to the
 * whole source, rebased on the box: every element they read lies inside
 * it). A full pull is the staged read whose box is the whole source. */
typedef struct rs_staged_read {
    const char *src;
    int ndim;
    const int64_t *global_shape;
    rs_dtype_t dtype;
    uint64_t staging_bytes; /* box elements * element size */
    const size_t *copies;  /* indices into the capture's copies */
    size_t ncopies;
    const rs_segment_t *segments; /* dst_byte: into the staging buffer */
    size_t nsegments;
    const int64_t *box_lo;    /* ndim entries; all 0 for a full pull */
    const int64_t *box_shape; /* ndim entries; global_shape for a full pull */
    rs_staged_kind_t kind;
} rs_staged_read_t;

/* How a quantized copy (rs_capture_add_quant_copy) is served
 * (docs/quantized-refit.md). Either way the planner turns it
 * into two plain copies, appended to the plan's capture (rs_plan_capture):
 * weight_copy writes the FP8 values into the copy's destination and
 * scale_copy the scales into its scale region. On the publisher path they
 * read the FP8 tensor "<src>#<spec>" and its scales "<src>#<spec>#scale"
 * that a publisher serves, planned like any copy. On the receiver path the
 * block-rounded box of the bf16/f16/f32 source is read into staging
 * (segments), quantized there by rs_quant_box, and both copies are
 * replayed from the result. */
typedef enum rs_quant_path {
    RS_QUANT_PATH_RECEIVER = 0,
    RS_QUANT_PATH_PUBLISHER = 1
} rs_quant_path_t;

typedef struct rs_quantized {
    size_t copy;          /* the quantized copy: index into the capture the
                           * plan was built from */
    rs_quant_path_t path;
    const char *why;      /* one line: why this path was taken, or why the
                           * copy was refused */
    size_t weight_copy;   /* indices into rs_plan_capture's copies; both
                           * SIZE_MAX for a refused copy (its source is in
                           * the fallback list with `why` as its reason) */
    size_t scale_copy;
    /* The receiver path's staged read. src, ndim, global_shape and the box
     * (the touched blocks) are set on both paths; src_dtype is
     * RS_DTYPE_INVALID when only the FP8 copy is published; staging_bytes
     * and the segments are 0 unless the receiver path reads the box. */
    const char *src;
    rs_dtype_t src_dtype;
    int ndim;
    const int64_t *global_shape;
    const int64_t *box_lo;    /* block-aligned */
    const int64_t *box_shape;
    uint64_t staging_bytes;   /* box elements * size of src_dtype */
    const rs_segment_t *segments; /* dst_byte: into the staging buffer */
    size_t nsegments;
} rs_quantized_t;

typedef struct rs_uncovered {
    size_t copy;
    const char *src;
    const char *param;
    uint64_t missing_elements;
} rs_uncovered_t;

typedef struct rs_plan_stats {
    uint64_t bytes_planned;
    uint64_t descriptor_count;
    uint64_t exact_descriptor_count;
    uint64_t exact_bytes;
    uint64_t descriptor_savings;
    uint64_t extra_wire_bytes;
    size_t nsessions_used;
    size_t copies_selected; /* copies whose param the selection keeps */
    size_t copies_planned;  /* of those, copies whose source is planned */
    /* The bytes the planned copies need (what exact runs would read; a
     * quantized copy on the receiver path needs its block-rounded box):
     * bytes_planned - needed_bytes is what the plan reads beyond them.
     * copies_selected and copies_planned count a quantized copy once and
     * its derived copies not at all. */
    uint64_t needed_bytes;
    /* The cost model's estimate of the plan's wire time in seconds, and
     * of the plan that reads every copy by its exact runs. */
    double est_seconds;
    double exact_est_seconds;
} rs_plan_stats_t;

/* Builds a plan. Unsupported, unknown, mismatched (published with another
 * shape or dtype than the capture declares) or rejected sources do not fail
 * the call: they land in the plan's fallback list. Returns RS_ERR_INPUT only
 * for inconsistent inputs (a copy naming an undeclared parameter, a
 * destination dtype differing from its parameter) and for a capture with
 * unattributed writes (rs_capture_unattributed above 0: "the capture has N
 * unattributed write(s) ...; refusing it", the message a receiver gives),
 * RS_ERR_NO_MEMORY on exhaustion. */
RS_API rs_status_t rs_plan_build(rs_capture_h capture, rs_sources_h sources,
                                 const rs_plan_params_t *params,
                                 rs_diag_t *diag, rs_plan_h *plan_p);
RS_API void rs_plan_destroy(rs_plan_h plan);

/* 1 when nothing is in fallback or uncovered. */
RS_API int rs_plan_is_complete(rs_plan_h plan);

RS_API const rs_segment_t *rs_plan_segments(rs_plan_h plan, size_t *count_p);
RS_API const rs_convert_t *rs_plan_converts(rs_plan_h plan, size_t *count_p);
/* Every staged read (full pulls and staged boxes), in the order the
 * planner made them. */
RS_API const rs_staged_read_t *rs_plan_staged_reads(rs_plan_h plan, size_t *count_p);
/* The names these had while whole sources were the only staged reads;
 * deprecated, removed in the next release. */
typedef rs_staged_read_t rs_full_pull_t RS_DEPRECATED("use rs_staged_read_t");
RS_API RS_DEPRECATED("use rs_plan_staged_reads") const rs_staged_read_t *
rs_plan_full_pulls(rs_plan_h plan, size_t *count_p);
/* Every quantized copy the selection keeps (params.only), in capture
 * order. */
RS_API const rs_quantized_t *rs_plan_quantized(rs_plan_h plan, size_t *count_p);
RS_API const rs_uncovered_t *rs_plan_uncovered(rs_plan_h plan, size_t *count_p);
RS_API size_t rs_plan_num_fallback(rs_plan_h plan);
RS_API void rs_plan_fallback(rs_plan_h plan, size_t index, const char **src_p,
                             const char **reason_p);
/* Of the fallback sources, how many the planner refused because the shard
 * tables publish them with another full shape or dtype than the capture
 * declares (rs_capture_declare_source): a model mismatch, which no other way
 * of moving the bytes fixes. They are fallback entries 0 .. n-1, each with a
 * reason "tensor 'x': capture assumes shape [a, b] bf16, published [c, d]
 * bf16". */
RS_API size_t rs_plan_num_mismatched(rs_plan_h plan);
RS_API size_t rs_plan_num_unbounded(rs_plan_h plan);
RS_API const char *rs_plan_unbounded(rs_plan_h plan, size_t index);

/* Every session any source publishes (index space of rs_segment_t.session). */
RS_API size_t rs_plan_num_sessions(rs_plan_h plan);
RS_API const char *rs_plan_session_name(rs_plan_h plan, uint32_t session);
/* Bytes the plan reads from a session (0 for sessions it does not use). */
RS_API uint64_t rs_plan_session_bytes(rs_plan_h plan, uint32_t session);

RS_API void rs_plan_stats(rs_plan_h plan, rs_plan_stats_t *stats_p);

/* A published shard of a source the plan reads from. */
typedef struct rs_shard_ref {
    uint32_t session;
    uint64_t addr;
    uint64_t nbytes;
    const char *tensor;
    const char *digest; /* NULL when the table gave none */
} rs_shard_ref_t;

/* Every shard of every source the plan reads (fallback sources excluded;
 * of the FP8 values and scales of quantized copies, only the shards the
 * plan reads), sorted by (session, addr): what digest verification checks
 * against. */
RS_API const rs_shard_ref_t *rs_plan_shards(rs_plan_h plan, size_t *count_p);

/* The capture the plan executes. Without quantized copies it is the
 * capture the plan was built from (borrowed: the caller keeps it alive for
 * the life of the plan). With them it is a capture the plan owns: the
 * same params and the same copies at the same indices, followed by the
 * derived copies of rs_quantized_t. Convert records and full pulls refer
 * to its copies by index; a quantized copy itself is never planned
 * directly, only its derived copies are. */
RS_API rs_capture_h rs_plan_capture(rs_plan_h plan);

/* reshard.plan.v2 JSON, and the human summary that `reshard plan` prints. */
RS_API rs_status_t rs_plan_write_json(rs_plan_h plan, FILE *out,
                                      rs_diag_t *diag);
RS_API rs_status_t rs_plan_write_summary(rs_plan_h plan, FILE *out,
                                         rs_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
