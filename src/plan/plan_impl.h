/* Internal layout of a built plan: what the planner fills and the accessors
 * read. */
#ifndef RS_PLAN_PLAN_IMPL_H
#define RS_PLAN_PLAN_IMPL_H

#include "core/arena.h"
#include "core/vec.h"
#include "reshard/plan.h"

/* Overrides RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY (rs_plan_params_init). */
#define RS_PLAN_ENV_MAX_SEGMENTS "RESHARD_MAX_SEGMENTS_PER_COPY"

typedef struct rs__plan_fallback {
    const char *src;
    const char *reason;
} rs__plan_fallback_t;

struct rs_plan {
    rs__arena_t arena;
    rs_capture_h capture;
    size_t nsessions;
    const char **sessions;
    uint64_t *session_bytes;
    RS_VEC(rs_segment_t, segments);
    RS_VEC(rs_convert_t, converts);
    RS_VEC(rs_staged_read_t, staged_reads);
    RS_VEC(rs_uncovered_t, uncovered);
    RS_VEC(rs__plan_fallback_t, fallback);
    size_t mismatched; /* the first fallback entries: model mismatches */
    RS_VEC(const char *, unbounded);
    RS_VEC(rs_shard_ref_t, shards);
    RS_VEC(rs_quantized_t, quantized);
    /* the working capture of a capture with quantized copies (plan_quant.c);
     * NULL when `capture` is the caller's */
    rs_capture_h owned_capture;
    rs_plan_stats_t stats;
};

#endif
