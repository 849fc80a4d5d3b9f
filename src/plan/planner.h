/* The planner's working state while one plan is built, shared by the files
 * that each do one step: copies (resolve and walk), full pulls, assembly. */
#ifndef RS_PLAN_PLANNER_H
#define RS_PLAN_PLANNER_H

#include "core/strmap.h"
#include "core/vec.h"
#include "geom/box.h"
#include "plan/plan_impl.h"
#include "model/sources_impl.h"

/* One source as the capture names it. */
typedef struct rs__planned_source {
    const char *name;
    rs__source_tensor_t *tensor;    /* NULL when nothing publishes it */
    const char *fallback;       /* reason, non-NULL once in fallback */
    int candidate;              /* some copy exceeded the descriptor bound */
    uint32_t nmarked;           /* shards marked (below), when marks >= 0 */
    uint64_t exact_segments;    /* per-copy segments of its same-dtype copies */
    long full_pull;             /* its whole-source stage (rs__planner_t
                                 * stages), or -1 when none is possible */
    int listed_unbounded;       /* already in the plan's unbounded list */
    int read;                   /* some copy or receiver box reads it */
    /* A tensor derived from a quantized copy's source: its shards that
     * some walk took are marked at b->shard_marks[marks + shard], and
     * only those are listed (others, -1, list every shard). */
    long marks;
    /* The first shard marked and its session: with nmarked 1, what
     * assembly lists of the tensor, without reading its records again. */
    uint32_t mark_shard, mark_session;
} rs__planned_source_t;

enum { RS_PLANNED_COPY_SKIP = 0, RS_PLANNED_COPY_EXACT, RS_PLANNED_COPY_CONVERT };

typedef struct rs__planned_copy {
    uint32_t src;
    uint32_t param;
    int kind;
    uint32_t pair; /* walked from b->walk_pair: that shard + 1, else 0 */
    size_t seg_begin, seg_end; /* into rs__planner_t.tmp */
    uint64_t missing;
    long stage;  /* read through rs__planner_t stages[stage]; -1: exact runs */
    int capped;  /* more exact runs than the cap, and a staged way exists */
    /* The copy's exact runs (merged) and their bytes, kept or not. */
    uint64_t nexact, exact_bytes;
    /* More runs than max_segments_per_copy: tmp holds none of them (a
     * staged way usually takes the copy instead), b->drops[drop] holds
     * what the cost model needs of them, and picks[pick_begin..] are the
     * shards its walk chose, so that a second walk produces the same runs
     * if the copy is read exactly after all. */
    int dropped;
    size_t drop;
    size_t pick_begin;
} rs__planned_copy_t;

/* A copy's exact runs on one session: what the cost model needs of them,
 * so that a choice costs the sessions a copy reads, not its runs. */
typedef struct rs__session_cost {
    uint32_t session;
    uint64_t bytes, descs;
} rs__session_cost_t;

/* What a dropped copy's walk kept of its runs (merged as if kept): its
 * first and last run (assembly may join them to its neighbours') and its
 * per-session sums, drop_aggs[agg_begin .. agg_end) in the order their
 * sessions first appear. */
typedef struct rs__dropped_copy {
    rs_segment_t first, last;
    size_t agg_begin, agg_end;
} rs__dropped_copy_t;

typedef struct rs__segment_vec {
    RS_VEC(rs_segment_t, v);
} rs__segment_vec_t;

/* A candidate staged read of one source (plan_stage.c): its box and the
 * runs that fill its row-major staging. */
typedef struct rs__planned_stage {
    uint32_t src;
    rs_staged_kind_t kind;
    int64_t lo[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    rs__segment_vec_t segs;
    size_t users; /* copies reading it in the working plan */
} rs__planned_stage_t;

typedef struct rs__planner {
    rs_plan_h plan;
    rs_capture_h cap;
    rs_sources_h srcs;
    const rs_plan_params_t *params;
    rs_diag_t *diag;
    RS_VEC(rs__planned_source_t, psrc);
    uint32_t *psrc_of_name; /* per capture name id: psrc index + 1, or 0 */
    rs__planned_copy_t *copies;
    rs__segment_vec_t tmp;
    uint64_t *load; /* running bytes per session, for replica choice */
    RS_VEC(rs__planned_stage_t, stages);
    RS_VEC(uint32_t, picks); /* shard choices of dropped copies, in order */
    RS_VEC(rs__dropped_copy_t, drops);
    RS_VEC(rs__session_cost_t, drop_aggs);
    RS_VEC(unsigned char, shard_marks); /* rs__planned_source_t.marks */
    long *agg_slot; /* per session: its drop_aggs entry in the walk, or -1 */
    size_t ndropped, nrewalked; /* copies dropped, and walked again */
    int keep_all; /* every copy keeps its runs (tests compare the plans) */
    struct rs__box_memo *memo; /* resolved boxes by geometry (box_memo.h) */
    rs__box_t box;             /* a box resolved outside the memo */
    struct rs__quant_expansion *quant;    /* quantized copies (plan_quant.h), or NULL */
    /* The memo's facts of the box the last resolve returned (NULL when
     * it came from outside the memo): the copy walk that follows keeps
     * whether that box is one run in a whole-source shard there. */
    struct rs__dest_fact *walk_fact;
    /* The shard the next copy walk reads its whole box from when that
     * shard holds it and is on session walk_pair_session (UINT32_MAX:
     * none): a scale copy reads its scales where its weight copy read
     * its first FP8 values (rs__quant_scale_pair). */
    uint32_t walk_pair, walk_pair_session;
    /* The last copy walked (SIZE_MAX: none yet) and the first shard its
     * walk read (UINT32_MAX: none). */
    size_t last_walked;
    uint32_t last_first;
    int oom;
} rs__planner_t;

rs_status_t rs__planner_init(rs__planner_t *b, rs_capture_h cap,
                             rs_sources_h srcs, const rs_plan_params_t *params,
                             rs_diag_t *diag);
rs_status_t rs__planner_run(rs__planner_t *b);
rs_plan_h rs__planner_take(rs__planner_t *b);
void rs__planner_free(rs__planner_t *b);

/* Marks shard `id` (on `session`) of a derived tensor as read: marks is
 * src's part of b->shard_marks. Counts the shards marked and keeps the
 * first, which assembly then lists without reading the tensor's records
 * again. O(1). */
static inline void rs__planner_mark(rs__planned_source_t *src,
                                    unsigned char *marks, uint32_t id,
                                    uint32_t session)
{
    if (marks[id])
        return;
    marks[id] = 1;
    if (src->nmarked++ == 0) {
        src->mark_shard = id;
        src->mark_session = session;
    }
}

/* Marks a source as fallback (first reason wins). */
rs_status_t rs__planner_fallback(rs__planner_t *b, uint32_t src,
                                 const char *reason);

/* Walks `box` of source `src` against its grid, appending runs to `out`
 * (merging only with segments at index >= out's length on entry) with the
 * box's first element at dst_base elements. Adds elements published by no
 * shard to *missing. */
rs_status_t rs__planner_walk(rs__planner_t *b, rs__planned_source_t *src,
                             const rs__box_t *box, uint32_t param,
                             int64_t dst_base, rs__segment_vec_t *out,
                             uint64_t *missing);

/* The whole-source stage of a source (plan_stage.c): walked into
 * b->stages and recorded in src->full_pull when every element is
 * published, else src->full_pull stays -1. */
rs_status_t rs__planner_full_stage(rs__planner_t *b, rs__planned_source_t *src);

/* Staged boxes (plan_stage.c). The bounding box [lo, lo + shape) of what
 * copy ci reads; 0 when it reads nothing. */
int rs__stage_bbox(rs__planner_t *b, size_t ci, int64_t *lo, int64_t *shape);
/* 1 when copy ci's chain, replayed over the box (rs__view_init_box),
 * reads only inside it. */
int rs__stage_fits(rs__planner_t *b, size_t ci, const int64_t *lo,
                   const int64_t *shape);
/* The candidate boxes of a copy with bounding box (lo, shape): the
 * coalesced one (inner dims widened while the gaps are cheap) and the
 * bound one (inner dims widened to the shards touched). */
void rs__stage_coalesced(rs__planner_t *b, const rs__planned_source_t *src,
                         const int64_t *lo, const int64_t *shape,
                         int64_t *out_lo, int64_t *out_shape);
void rs__stage_bound(rs__planner_t *b, const rs__planned_source_t *src, const int64_t *lo,
                     const int64_t *shape, int64_t *out_lo,
                     int64_t *out_shape);
/* A lower bound on the runs any walk of a box of this shape takes (a run
 * lies inside one shard): a box that cannot beat a copy's runs is not
 * walked. */
uint64_t rs__stage_min_runs(const rs__planned_source_t *src, const int64_t *shape);
/* Walks a box of a source into *segs (replica loads left as they were);
 * *complete is 0 when some element of it is published by no shard. The
 * caller lifts the loads of the runs the box would replace first, so that
 * replicas are chosen as if those runs were not read. */
/* The box [lo, lo + shape) of a source as a planner box landing
 * row-major; 0 when it does not resolve. */
int rs__stage_plain_box(const rs__source_tensor_t *t, const int64_t *lo,
                        const int64_t *shape, rs__box_t *box);
rs_status_t rs__stage_walk(rs__planner_t *b, rs__planned_source_t *src, const int64_t *lo,
                           const int64_t *shape, rs__segment_vec_t *segs,
                           int *complete);

/* Chooses how every copy is read by the cost model (plan_cost.c): sets
 * each copy's stage, the stats' exact_est_seconds. */
rs_status_t rs__planner_choose(rs__planner_t *b);
/* Seconds the model gives a session's bytes and descriptors. */
double rs__cost_seconds(const rs_plan_params_t *p, uint64_t bytes,
                        uint64_t descriptors);
/* A plan's time: its most loaded session's, the receiver counted as one
 * more session that carries every session's bytes and descriptors. */
double rs__cost_plan_seconds(const rs_plan_params_t *p, const uint64_t *bytes,
                             const uint64_t *descs, size_t nsessions);

/* What a capped walk saw: its runs (merged as if kept) and their bytes;
 * `dropped` when there were more than `keep`, and `out` holds none; then
 * `drop` is what it kept of them (agg_begin .. agg_end into b->drop_aggs),
 * else `drop` is left unset. */
typedef struct rs__walk_tally {
    uint64_t nsegs, bytes;
    int dropped;
    int paired;      /* the box was read from b->walk_pair */
    uint32_t first;  /* the first shard read (UINT32_MAX: none) */
    rs__dropped_copy_t drop;
} rs__walk_tally_t;

/* rs__planner_walk for one copy: keeps at most `keep` runs in `out` (beyond
 * that it only counts them, summing them per session into b->drop_aggs,
 * and out is left as on entry), records each shard choice in b->picks, or,
 * with `replay`, repeats those choices without adding to the sessions'
 * load. `box` is the one the last resolve returned: b->walk_fact holds its
 * memo facts (or is NULL), which the walk reads and completes. With
 * b->walk_pair set and its shard holding the whole box on the session
 * asked, the box is read from that shard (tally->paired), with no grid
 * and no choice among replicas. */
rs_status_t rs__planner_walk_copy(rs__planner_t *b, rs__planned_source_t *src,
                                  const rs__box_t *box, uint32_t param,
                                  int64_t dst_base, size_t keep,
                                  const uint32_t *replay, rs__segment_vec_t *out,
                                  uint64_t *missing, rs__walk_tally_t *tally);

/* Moves the per-copy results into the plan and computes stats. */
rs_status_t rs__planner_assemble(rs__planner_t *b);

#endif
