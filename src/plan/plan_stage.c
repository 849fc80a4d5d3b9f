/* Staged boxes: the candidate boxes of a copy (its bounding box widened so
 * that runs merge), whether the copy can be replayed from a box, the walk
 * that fills a box's row-major staging from the shards, and the full pull
 * of a source (its whole box, possible only when the published shards
 * cover it without gaps). The cost model (plan_cost.c) decides which of
 * them a plan reads. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "geom/view_box.h"
#include "model/capture_impl.h"
#include "plan/planner.h"

/* Above this many shards the hull of the touched shards is not computed:
 * the widened dims then reach the whole source. */
#define RS_STAGE_HULL_SHARDS 4096

int rs__stage_bbox(rs__planner_t *b, size_t ci, int64_t *lo, int64_t *shape)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    const rs__source_tensor_t *t = b->psrc[b->copies[ci].src].tensor;
    rs__box_t box;
    size_t bad_op;
    if (rs__geom_resolve(t->ndim, t->shape, c->ops, c->nops, c->ndim,
                         c->dest_shape, c->dest_stride, &box, &bad_op, NULL,
                         0) != RS_OK || box.numel == 0)
        return 0;
    for (int d = 0; d < t->ndim; d++) {
        lo[d] = box.start[d];
        shape[d] = rs__box_coord(&box, d, box.count[d] - 1) + 1 - lo[d];
    }
    return 1;
}

int rs__stage_fits(rs__planner_t *b, size_t ci, const int64_t *lo,
                   const int64_t *shape)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    const rs__source_tensor_t *t = b->psrc[b->copies[ci].src].tensor;
    rs__view_t v;
    int64_t numel, first, last;
    if (rs__view_init_box(&v, t->ndim, t->shape, lo, shape) != RS_OK ||
        !rs__numel(shape, t->ndim, &numel))
        return 0;
    for (size_t i = 0; i < c->nops; i++) {
        if (rs__view_apply(&v, &c->ops[i], NULL, 0) != RS_OK)
            return 0;
    }
    if (v.ndim != c->ndim || !rs__view_span(&v, &first, &last))
        return 0;
    return first >= 0 && last < numel;
}

static double gap_seconds(const rs_plan_params_t *p, uint64_t bytes)
{
    return (double)bytes * 8.0 / (p->nic_gbps * 1e9);
}

/* Per dim from the second on, the extent of the shards that the bounding
 * box touches (their whole extent, so that the box's part of each is
 * contiguous in it); the whole dim when there are too many shards. */
static void touched_hull(const rs__source_tensor_t *t, const int64_t *lo,
                         const int64_t *shape, int64_t *hlo, int64_t *hhi)
{
    for (int d = 0; d < t->ndim; d++) {
        hlo[d] = t->shards_len > RS_STAGE_HULL_SHARDS ? 0 : lo[d];
        hhi[d] = t->shards_len > RS_STAGE_HULL_SHARDS ? t->shape[d]
                                                       : lo[d] + shape[d];
    }
    for (size_t i = 0; t->shards_len <= RS_STAGE_HULL_SHARDS &&
                       i < t->shards_len; i++) {
        const rs__source_shard_t *sh = &t->shards[i];
        int meets = sh->numel > 0;
        for (int d = 0; meets && d < t->ndim; d++)
            meets = sh->offset[d] < lo[d] + shape[d] &&
                    lo[d] < sh->offset[d] + sh->shape[d];
        for (int d = 1; meets && d < t->ndim; d++) {
            if (sh->offset[d] < hlo[d])
                hlo[d] = sh->offset[d];
            if (sh->offset[d] + sh->shape[d] > hhi[d])
                hhi[d] = sh->offset[d] + sh->shape[d];
        }
    }
}

/* Widens dims from the innermost outwards as long as the gap each closes
 * (what lies between two consecutive runs of the dim above) reads faster
 * than a descriptor is posted; stops at the first that does not. */
void rs__stage_coalesced(rs__planner_t *b, const rs__planned_source_t *src,
                         const int64_t *lo, const int64_t *shape,
                         int64_t *out_lo, int64_t *out_shape)
{
    const rs__source_tensor_t *t = src->tensor;
    int64_t hlo[RS_MAX_DIMS], hhi[RS_MAX_DIMS];
    uint64_t inner = t->elsize;
    touched_hull(t, lo, shape, hlo, hhi);
    memcpy(out_lo, lo, (size_t)t->ndim * sizeof(int64_t));
    memcpy(out_shape, shape, (size_t)t->ndim * sizeof(int64_t));
    for (int d = t->ndim - 1; d >= 1; d--) {
        uint64_t gap = (uint64_t)(hhi[d] - hlo[d] - shape[d]) * inner;
        if (gap_seconds(b->params, gap) >= b->params->descriptor_ns * 1e-9)
            break;
        out_lo[d] = hlo[d];
        out_shape[d] = hhi[d] - hlo[d];
        inner *= (uint64_t)out_shape[d];
    }
}

void rs__stage_bound(rs__planner_t *b, const rs__planned_source_t *src, const int64_t *lo,
                     const int64_t *shape, int64_t *out_lo, int64_t *out_shape)
{
    const rs__source_tensor_t *t = src->tensor;
    int64_t hlo[RS_MAX_DIMS], hhi[RS_MAX_DIMS];
    (void)b;
    touched_hull(t, lo, shape, hlo, hhi);
    for (int d = 0; d < t->ndim; d++) {
        out_lo[d] = d == 0 ? lo[d] : hlo[d];
        out_shape[d] = d == 0 ? shape[d] : hhi[d] - hlo[d];
    }
}

uint64_t rs__stage_min_runs(const rs__planned_source_t *src, const int64_t *shape)
{
    const rs__source_tensor_t *t = src->tensor;
    uint64_t numel = 1, most = 0;
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)shape[d]; /* inside the checked source */
    for (size_t i = 0; i < t->shards_len; i++)
        if ((uint64_t)t->shards[i].numel > most)
            most = (uint64_t)t->shards[i].numel;
    return most == 0 ? UINT64_MAX : (numel + most - 1) / most;
}

/* The box as a planner box: the whole source narrowed per dim (one op at
 * a time), landing row-major. */
int rs__stage_plain_box(const rs__source_tensor_t *t, const int64_t *lo,
                        const int64_t *shape, rs__box_t *box)
{
    int64_t stride[RS_MAX_DIMS];
    rs__view_t v;
    if (rs__view_init(&v, t->ndim, t->shape) != RS_OK ||
        !rs__row_major(shape, t->ndim, stride))
        return 0;
    for (int d = 0; d < t->ndim; d++) {
        rs_op_t op;
        memset(&op, 0, sizeof(op));
        op.kind = RS_OP_NARROW;
        op.arg[0] = d;
        op.arg[1] = lo[d];
        op.arg[2] = shape[d];
        op.has = 7;
        if (rs__view_apply(&v, &op, NULL, 0) != RS_OK)
            return 0;
    }
    return rs__box_from_view(&v, t->ndim, t->shape, stride, box, NULL, 0) ==
           RS_OK;
}

rs_status_t rs__stage_walk(rs__planner_t *b, rs__planned_source_t *src, const int64_t *lo,
                           const int64_t *shape, rs__segment_vec_t *segs,
                           int *complete)
{
    rs__box_t box;
    uint64_t missing = 0;
    *complete = 0;
    if (!rs__stage_plain_box(src->tensor, lo, shape, &box))
        return RS_OK;
    rs_status_t st = rs__planner_walk(b, src, &box, UINT32_MAX, 0, segs,
                                      &missing);
    if (st == RS_ERR_UNSUPPORTED)
        return RS_OK; /* too fragmented to index: not a way to read it */
    if (st != RS_OK)
        return rs__diag_set(b->diag, st, "out of memory");
    /* A candidate only: its reads do not count towards replica balance
     * until the cost model takes it. */
    for (size_t i = 0; i < segs->v_len; i++)
        b->load[segs->v[i].session] -= segs->v[i].nbytes;
    *complete = missing == 0;
    return RS_OK;
}

/* The full pull of a source: its whole box read once into row-major
 * staging, from which every copy of it can be replayed locally. */
rs_status_t rs__planner_full_stage(rs__planner_t *b, rs__planned_source_t *s)
{
    const rs__source_tensor_t *t = s->tensor;
    int64_t lo[RS_MAX_DIMS] = {0};
    rs__segment_vec_t segs = {0};
    int complete = 0;
    s->full_pull = -1;
    rs_status_t st = rs__stage_walk(b, s, lo, t->shape, &segs, &complete);
    if (st != RS_OK || !complete) {
        free(segs.v);
        return st;
    }
    rs__planned_stage_t ps = {(uint32_t)(s - b->psrc), RS_STAGED_FULL, {0}, {0}, segs,
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
