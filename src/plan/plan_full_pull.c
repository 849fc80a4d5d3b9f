/* Full pulls bound the descriptor count of copies that need many runs: the
 * whole source is read once into row-major staging and its copies are
 * replayed locally. Taken only when the published shards tile the source
 * without gaps and the pull needs fewer descriptors than the exact plan. */
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "plan/planner.h"

static rs_status_t keep_exact(rs_planner_t *b, rs_psrc_t *s)
{
    if (!RS_VEC_PUSH(b->plan, unbounded, s->name))
        return rs__diag_set(b->diag, RS_ERR_NO_MEMORY, "out of memory");
    return RS_OK;
}

static rs_status_t add_full_pull(rs_planner_t *b, rs_psrc_t *s,
                                 const rs_segvec_t *segs)
{
    rs_plan_h plan = b->plan;
    const rs_src_tensor_t *t = s->tensor;
    rs_full_pull_t fp;
    uint64_t numel = 1;

    memset(&fp, 0, sizeof(fp));
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)t->shape[d]; /* checked when the shard was added */
    fp.src = s->name;
    fp.ndim = t->ndim;
    fp.global_shape = t->shape;
    fp.dtype = t->dtype;
    fp.staging_bytes = numel * t->elsize;
    fp.nsegments = segs->v_len;
    fp.segments = rs__arena_memdup(&plan->arena, segs->v,
                                  segs->v_len * sizeof(rs_segment_t));
    if (fp.segments == NULL || !RS_VEC_PUSH(plan, full_pulls, fp))
        return rs__diag_set(b->diag, RS_ERR_NO_MEMORY, "out of memory");
    s->full_pull = (long)plan->full_pulls_len - 1;
    return RS_OK;
}

static rs_status_t consider(rs_planner_t *b, rs_psrc_t *s)
{
    const rs_src_tensor_t *t = s->tensor;
    int64_t stride[RS_MAX_DIMS];
    rs_segvec_t segs = {0};
    uint64_t missing = 0;
    rs_box_t box;
    size_t bad_op;

    if (!rs__row_major(t->shape, t->ndim, stride) ||
        rs__geom_resolve(t->ndim, t->shape, NULL, 0, t->ndim, t->shape, stride,
                        &box, &bad_op, NULL, 0) != RS_OK)
        return keep_exact(b, s);
    rs_status_t st = rs__planner_walk(b, s, &box, UINT32_MAX, 0, &segs,
                                      &missing);
    if (st == RS_OK) {
        if (missing == 0 && segs.v_len < s->exact_segments)
            st = add_full_pull(b, s, &segs);
        else
            st = keep_exact(b, s);
    } else {
        st = rs__diag_set(b->diag, st, "out of memory");
    }
    free(segs.v);
    return st;
}

rs_status_t rs__planner_full_pulls(rs_planner_t *b)
{
    for (size_t i = 0; i < b->psrc_len; i++) {
        rs_psrc_t *s = &b->psrc[i];
        if (s->candidate && s->fallback == NULL) {
            rs_status_t st = consider(b, s);
            if (st != RS_OK)
                return st;
        }
    }
    return RS_OK;
}
