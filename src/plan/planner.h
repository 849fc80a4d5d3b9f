/* The planner's working state while one plan is built, shared by the files
 * that each do one step: copies (resolve and walk), full pulls, assembly. */
#ifndef RS_PLAN_PLANNER_H
#define RS_PLAN_PLANNER_H

#include "core/strmap.h"
#include "core/vec.h"
#include "geom/box.h"
#include "plan/plan_impl.h"
#include "plan/sources_impl.h"

/* One source as the capture names it. */
typedef struct rs_psrc {
    const char *name;
    rs_src_tensor_t *tensor;    /* NULL when nothing publishes it */
    const char *fallback;       /* reason, non-NULL once in fallback */
    int candidate;              /* some copy exceeded the descriptor bound */
    uint64_t exact_segments;    /* per-copy segments of its same-dtype copies */
    long full_pull;             /* index into plan full_pulls, or -1 */
} rs_psrc_t;

enum { RS_PCOPY_SKIP = 0, RS_PCOPY_EXACT, RS_PCOPY_CONVERT };

typedef struct rs_pcopy {
    uint32_t src;
    uint32_t param;
    int kind;
    size_t seg_begin, seg_end; /* into rs_planner_t.tmp */
    uint64_t missing;
    /* The copy's exact runs (merged) and their bytes, kept or not. */
    uint64_t nexact, exact_bytes;
    /* More runs than max_segments_per_copy: tmp holds none of them (a full
     * pull usually takes the copy instead); picks[pick_begin..] are the
     * shards its walk chose, so that rs__planner_rewalk can produce the
     * same runs if the copy is read exactly after all. */
    int dropped;
    size_t pick_begin;
} rs_pcopy_t;

typedef struct rs_segvec {
    RS_VEC(rs_segment_t, v);
} rs_segvec_t;

typedef struct rs_planner {
    rs_plan_h plan;
    rs_capture_h cap;
    rs_sources_h srcs;
    const rs_plan_params_t *params;
    rs_diag_t *diag;
    RS_VEC(rs_psrc_t, psrc);
    uint32_t *psrc_of_name; /* per capture name id: psrc index + 1, or 0 */
    rs_pcopy_t *copies;
    rs_segvec_t tmp;
    uint64_t *load; /* running bytes per session, for replica choice */
    RS_VEC(uint32_t, picks); /* shard choices of dropped copies, in order */
    struct rs_box_memo *memo; /* resolved boxes by geometry (box_memo.h) */
    rs_box_t box;             /* a box resolved outside the memo */
    int oom;
} rs_planner_t;

rs_status_t rs__planner_init(rs_planner_t *b, rs_capture_h cap,
                             rs_sources_h srcs, const rs_plan_params_t *params,
                             rs_diag_t *diag);
rs_status_t rs__planner_run(rs_planner_t *b);
rs_plan_h rs__planner_take(rs_planner_t *b);
void rs__planner_free(rs_planner_t *b);

/* Marks a source as fallback (first reason wins). */
rs_status_t rs__planner_fallback(rs_planner_t *b, uint32_t src,
                                 const char *reason);

/* Walks `box` of source `src` against its grid, appending runs to `out`
 * (merging only with segments at index >= out's length on entry) with the
 * box's first element at dst_base elements. Adds elements published by no
 * shard to *missing. */
rs_status_t rs__planner_walk(rs_planner_t *b, rs_psrc_t *src,
                             const rs_box_t *box, uint32_t param,
                             int64_t dst_base, rs_segvec_t *out,
                             uint64_t *missing);

/* What a capped walk saw: its runs (merged as if kept) and their bytes;
 * `dropped` when there were more than `keep`, and `out` holds none. */
typedef struct rs_walk_tally {
    uint64_t nsegs, bytes;
    int dropped;
} rs_walk_tally_t;

/* rs__planner_walk for one copy: keeps at most `keep` runs in `out` (beyond
 * that it only counts them, and out is left as on entry), records each
 * shard choice in b->picks, or, with `replay`, repeats those choices
 * without adding to the sessions' load. */
rs_status_t rs__planner_walk_copy(rs_planner_t *b, rs_psrc_t *src,
                                  const rs_box_t *box, uint32_t param,
                                  int64_t dst_base, size_t keep,
                                  const uint32_t *replay, rs_segvec_t *out,
                                  uint64_t *missing, rs_walk_tally_t *tally);

/* Decides the full pulls among candidate sources (plan_full_pull.c). */
rs_status_t rs__planner_full_pulls(rs_planner_t *b);

/* Moves the per-copy results into the plan and computes stats. */
rs_status_t rs__planner_assemble(rs_planner_t *b);

#endif
