/* Read access to a built plan, its defaults and its destruction. */
#include <stdlib.h>

#include "core/env.h"
#include "core/params.h"
#include "plan/plan_impl.h"

static void plan_defaults(rs_plan_params_t *params)
{
    uint64_t v = RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY;
    /* A value that does not parse keeps the default here; rs_plan_build
     * then refuses it, naming the variable. */
    rs__env_count(RS_PLAN_ENV_MAX_SEGMENTS, RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY,
                  INT64_MAX, NULL, &v);
    params->max_segments_per_copy = (int64_t)v;
    params->only = NULL;
    params->nonly = 0;
    params->replica_salt = 0;
    params->split_bytes = RS_PLAN_DEFAULT_SPLIT_BYTES;
    params->nic_gbps = RS_PLAN_DEFAULT_NIC_GBPS;
    params->descriptor_ns = RS_PLAN_DEFAULT_DESCRIPTOR_NS;
}

RS__PARAMS_DEFINE(plan, plan_defaults, split_bytes)

void rs_plan_destroy(rs_plan_h plan)
{
    if (plan == NULL)
        return;
    free(plan->segments);
    free(plan->converts);
    free(plan->staged_reads);
    free(plan->uncovered);
    free(plan->fallback);
    free(plan->unbounded);
    free(plan->shards);
    free(plan->quantized);
    rs_capture_destroy(plan->owned_capture);
    rs__arena_free(&plan->arena);
    free(plan);
}

int rs_plan_is_complete(rs_plan_h plan)
{
    return plan->fallback_len == 0 && plan->uncovered_len == 0;
}

rs_capture_h rs_plan_capture(rs_plan_h plan) { return plan->capture; }

const rs_segment_t *rs_plan_segments(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->segments_len;
    return plan->segments;
}

const rs_convert_t *rs_plan_converts(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->converts_len;
    return plan->converts;
}

const rs_staged_read_t *rs_plan_staged_reads(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->staged_reads_len;
    return plan->staged_reads;
}

const rs_staged_read_t *rs_plan_full_pulls(rs_plan_h plan, size_t *count_p)
{
    return rs_plan_staged_reads(plan, count_p);
}

const rs_quantized_t *rs_plan_quantized(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->quantized_len;
    return plan->quantized;
}

const rs_uncovered_t *rs_plan_uncovered(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->uncovered_len;
    return plan->uncovered;
}

size_t rs_plan_num_fallback(rs_plan_h plan) { return plan->fallback_len; }

void rs_plan_fallback(rs_plan_h plan, size_t index, const char **src_p,
                      const char **reason_p)
{
    *src_p = plan->fallback[index].src;
    *reason_p = plan->fallback[index].reason;
}

size_t rs_plan_num_mismatched(rs_plan_h plan) { return plan->mismatched; }

size_t rs_plan_num_unbounded(rs_plan_h plan) { return plan->unbounded_len; }

const char *rs_plan_unbounded(rs_plan_h plan, size_t index)
{
    return plan->unbounded[index];
}

size_t rs_plan_num_sessions(rs_plan_h plan) { return plan->nsessions; }

const char *rs_plan_session_name(rs_plan_h plan, uint32_t session)
{
    return session < plan->nsessions ? plan->sessions[session] : NULL;
}

uint64_t rs_plan_session_bytes(rs_plan_h plan, uint32_t session)
{
    return session < plan->nsessions ? plan->session_bytes[session] : 0;
}

void rs_plan_stats(rs_plan_h plan, rs_plan_stats_t *stats_p)
{
    *stats_p = plan->stats;
}

const rs_shard_ref_t *rs_plan_shards(rs_plan_h plan, size_t *count_p)
{
    *count_p = plan->shards_len;
    return plan->shards;
}
