/* The full pull of a source: its whole box read once into row-major
 * staging, from which every copy of it can be replayed locally. Possible
 * only when the published shards cover the source without gaps; whether
 * it is taken is the cost model's call (plan_cost.c). */
#include <stdlib.h>

#include "core/diag.h"
#include "plan/planner.h"

rs_status_t rs__planner_full_stage(rs_planner_t *b, rs_psrc_t *s)
{
    const rs_src_tensor_t *t = s->tensor;
    int64_t lo[RS_MAX_DIMS] = {0};
    rs_segvec_t segs = {0};
    int complete = 0;
    s->full_pull = -1;
    rs_status_t st = rs__stage_walk(b, s, lo, t->shape, &segs, &complete);
    if (st != RS_OK || !complete) {
        free(segs.v);
        return st;
    }
    rs_pstage_t ps = {(uint32_t)(s - b->psrc), RS_STAGED_FULL, {0}, {0}, segs,
                      0};
    for (int d = 0; d < t->ndim; d++)
        ps.shape[d] = t->shape[d];
    if (!RS_VEC_PUSH(b, stages, ps)) {
        free(segs.v);
        return rs__diag_set(b->diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    s->full_pull = (long)b->stages_len - 1;
    return RS_OK;
}
