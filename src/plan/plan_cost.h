/* Helpers the cost model's files share (plan_cost.c, plan_cost_guard.c):
 * which copies it may stage, and their exact runs. */
#ifndef RS_PLAN_PLAN_COST_H
#define RS_PLAN_PLAN_COST_H

#include "plan/planner.h"

/* A copy the plan reads: planned, its source not in fallback. */
static inline int rs__cost_live(const rs__planner_t *b, const rs__planned_copy_t *pc)
{
    return pc->kind != RS_PLANNED_COPY_SKIP && b->psrc[pc->src].fallback == NULL;
}

/* A kept copy's exact runs (in the planner's tmp vector) and their count;
 * a dropped copy has none there (rs__cost_ends, rs__dropped_copy_t). */
static inline const rs_segment_t *rs__cost_exact(const rs__planner_t *b,
                                                 const rs__planned_copy_t *pc,
                                                 size_t *n)
{
    *n = pc->dropped ? 0 : pc->seg_end - pc->seg_begin;
    return *n > 0 ? b->tmp.v + pc->seg_begin : NULL;
}

/* The copy's first and last exact run, kept or dropped, and the number of
 * its runs (pc->nexact; 0 leaves *first and *last unset). */
static inline uint64_t rs__cost_ends(const rs__planner_t *b,
                                     const rs__planned_copy_t *pc,
                                     const rs_segment_t **first,
                                     const rs_segment_t **last)
{
    if (pc->nexact == 0)
        return 0;
    if (pc->dropped) {
        *first = &b->drops[pc->drop].first;
        *last = &b->drops[pc->drop].last;
    } else {
        *first = &b->tmp.v[pc->seg_begin];
        *last = &b->tmp.v[pc->seg_end - 1];
    }
    return pc->nexact;
}

/* Whether run s continues run last: assembly merges the two into one
 * descriptor. */
static inline int rs__cost_continues(const rs_segment_t *last,
                                     const rs_segment_t *s)
{
    return last->session == s->session && last->param == s->param &&
           last->src_addr + last->nbytes == s->src_addr &&
           last->dst_byte + last->nbytes == s->dst_byte;
}

/* A copy the model may stage: same dtype, reads something, all of it
 * published. */
static inline int rs__cost_stageable(const rs__planner_t *b,
                                     const rs__planned_copy_t *pc)
{
    return rs__cost_live(b, pc) && pc->kind == RS_PLANNED_COPY_EXACT &&
           pc->missing == 0 && pc->nexact > 0;
}

/* What one pass over the copies learns for the cost model
 * (plan_cost_agg.c). Only a source whose copies take more than one run
 * in all (psrc exact_segments) has an alternative to weigh: its live
 * copies are the active ones, listed in capture order in act, and only
 * they get aggregates, v[at[ci] .. at[ci + 1]) (empty for every other
 * copy). Every live copy's exact runs are summed per session in bytes and
 * descs (the all-exact plan before assembly's joins), and the copies with
 * runs that assembly appends one after another form the chain, joins[p]
 * telling whether position p's first run continues the run before it
 * (joined[k]: such joins on session k); act_pos[i] is act[i]'s chain
 * position (RS_COST_NO_CHAIN when it has none). */
#define RS_COST_NO_CHAIN SIZE_MAX
typedef struct rs__session_costs {
    rs__session_cost_t *v;
    size_t *at;
    uint64_t *bytes, *descs, *joined; /* per session, nsessions + 1 */
    size_t *chain, nchain;
    unsigned char *joins;
    size_t *act, *act_pos, nact;
} rs__session_costs_t;

/* A source some choice could read in fewer runs than one: more than one
 * exact run over its copies (stageable ones take no more than all). */
static inline int rs__cost_active_src(const rs__planned_source_t *s)
{
    return s->exact_segments > 1 && s->fallback == NULL && s->tensor != NULL;
}

/* Builds the above in one pass over the copies, and resets every copy's
 * stage (-1) and cap flag: O(copies + active copies' runs).
 * RS_ERR_NO_MEMORY (a diag set) or RS_OK. */
rs_status_t rs__cost_aggs_build(rs__planner_t *b, rs__session_costs_t *a);
void rs__cost_aggs_free(rs__session_costs_t *a);

/* Compares the greedy choice (each copy's stage) with the all-exact and
 * the full-pull plans, keeps the fastest, and sets the stats'
 * exact_est_seconds (plan_cost_guard.c): O(sessions + active copies'
 * sessions + staged runs) per plan compared. */
rs_status_t rs__cost_guarantee(rs__planner_t *b, const rs__session_costs_t *a);

#endif
