/* Per copy, its exact runs summed per session (rs_cost_agg_t): the cost
 * model moves a copy between ways of reading it many times, and each move
 * then costs the sessions it reads rather than its runs. A kept copy's
 * runs are summed here; a dropped copy's were summed by its walk. */
#include <stdlib.h>

#include "core/diag.h"
#include "core/vec.h"
#include "plan/capture_impl.h"
#include "plan/plan_cost.h"

typedef struct agg_vec {
    RS_VEC(rs_cost_agg_t, v);
} agg_vec_t;

/* Sums one copy's runs into out, slot[] mapping a session to its entry
 * (reset to -1 afterwards). 0 when out of memory. */
static int sum_copy(const rs_segment_t *s, size_t n, long *slot,
                    agg_vec_t *out)
{
    size_t first = out->v_len;
    if (n == 1) { /* most copies: one run, one session */
        rs_cost_agg_t a = {s[0].session, s[0].nbytes, 1};
        return RS_VEC_PUSH(out, v, a);
    }
    for (size_t i = 0; i < n; i++) {
        if (slot[s[i].session] < 0) {
            rs_cost_agg_t a = {s[i].session, 0, 0};
            if (!RS_VEC_PUSH(out, v, a))
                return 0;
            slot[s[i].session] = (long)out->v_len - 1;
        }
        out->v[slot[s[i].session]].bytes += s[i].nbytes;
        out->v[slot[s[i].session]].descs++;
    }
    for (size_t k = first; k < out->v_len; k++)
        slot[out->v[k].session] = -1;
    return 1;
}

/* A dropped copy's sums, made by its walk (plan_walk.c) in sum_copy's
 * order. 0 when out of memory. */
static int copy_sums(const rs_planner_t *b, const rs_pdrop_t *d,
                     agg_vec_t *out)
{
    for (size_t i = d->agg_begin; i < d->agg_end; i++)
        if (!RS_VEC_PUSH(out, v, b->drop_aggs[i]))
            return 0;
    return 1;
}

rs_status_t rs__cost_aggs_build(rs_planner_t *b, rs_cost_aggs_t *a)
{
    size_t nc = b->cap->copies_len, ns = b->plan->nsessions;
    long *slot = malloc((ns + 1) * sizeof(long));
    agg_vec_t out = {0};
    /* at most one entry per kept run or dropped copy's sum: sized once */
    int ok = slot != NULL &&
             rs__vec_reserve((void **)&out.v, &out.v_cap,
                             b->tmp.v_len + b->drop_aggs_len + 1,
                             sizeof(rs_cost_agg_t));
    a->v = NULL;
    a->at = malloc((nc + 1) * sizeof(size_t));
    for (size_t k = 0; ok && k < ns; k++)
        slot[k] = -1;
    for (size_t ci = 0; ok && a->at != NULL && ci < nc; ci++) {
        const rs_pcopy_t *pc = &b->copies[ci];
        size_t n;
        a->at[ci] = out.v_len;
        if (!rs__cost_live(b, pc))
            continue; /* the model never reads it */
        const rs_segment_t *ex = rs__cost_exact(b, pc, &n);
        ok = pc->dropped ? copy_sums(b, &b->drops[pc->drop], &out)
                         : sum_copy(ex, n, slot, &out);
    }
    free(slot);
    if (!ok || a->at == NULL) {
        free(out.v);
        free(a->at);
        a->at = NULL;
        return rs__diag_set(b->diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    a->at[nc] = out.v_len;
    a->v = out.v;
    return RS_OK;
}

void rs__cost_aggs_free(rs_cost_aggs_t *a)
{
    free(a->v);
    free(a->at);
}
