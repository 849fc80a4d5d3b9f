/* One pass over the copies for the cost model (rs__session_costs_t): every
 * live copy's exact runs summed per session (the all-exact plan) and
 * chained as assembly will append them, and, for the copies of sources
 * with an alternative to weigh, their runs summed per session
 * (rs__session_cost_t): the model moves such a copy between ways of reading it
 * many times, and each move then costs the sessions it reads rather than
 * its runs. Most copies (a whole expert tensor published by one shard:
 * one run) have no alternative: for them the pass does the sums and the
 * chain and nothing else, instead of an aggregate, a by-source list and
 * a second and third pass each. A kept copy's runs are summed here; a
 * dropped copy's were summed by its walk. */
#include <stdlib.h>

#include "core/diag.h"
#include "core/vec.h"
#include "model/capture_impl.h"
#include "plan/plan_cost.h"

typedef struct agg_vec {
    RS_VEC(rs__session_cost_t, v);
} agg_vec_t;

/* Sums one copy's runs into out, slot[] mapping a session to its entry
 * (reset to -1 afterwards). 0 when out of memory. */
static int sum_copy(const rs_segment_t *s, size_t n, long *slot,
                    agg_vec_t *out)
{
    size_t first = out->v_len;
    if (n == 1) { /* most copies: one run, one session */
        rs__session_cost_t a = {s[0].session, s[0].nbytes, 1};
        return RS_VEC_PUSH(out, v, a);
    }
    for (size_t i = 0; i < n; i++) {
        if (slot[s[i].session] < 0) {
            rs__session_cost_t a = {s[i].session, 0, 0};
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
static int copy_sums(const rs__planner_t *b, const rs__dropped_copy_t *d,
                     agg_vec_t *out)
{
    for (size_t i = d->agg_begin; i < d->agg_end; i++)
        if (!RS_VEC_PUSH(out, v, b->drop_aggs[i]))
            return 0;
    return 1;
}

/* The copy's exact runs into the all-exact plan's per-session sums. */
static void add_sums(const rs__planner_t *b, const rs__planned_copy_t *pc,
                     rs__session_costs_t *a)
{
    if (pc->dropped) {
        const rs__dropped_copy_t *d = &b->drops[pc->drop];
        for (size_t i = d->agg_begin; i < d->agg_end; i++) {
            a->bytes[b->drop_aggs[i].session] += b->drop_aggs[i].bytes;
            a->descs[b->drop_aggs[i].session] += b->drop_aggs[i].descs;
        }
        return;
    }
    for (size_t i = pc->seg_begin; i < pc->seg_end; i++) {
        a->bytes[b->tmp.v[i].session] += b->tmp.v[i].nbytes;
        a->descs[b->tmp.v[i].session]++;
    }
}

/* Appends the copy to the chain when assembly appends its runs (every
 * copy but the converts, that has some: s0 its first run, sn its last),
 * its first run joining the last run of the copy before (whose end is
 * where any run merged into it ends). Its position, or RS_COST_NO_CHAIN. */
static size_t chain_copy(const rs__planned_copy_t *pc, size_t ci,
                         const rs_segment_t *s0, const rs_segment_t *sn,
                         rs__session_costs_t *a, const rs_segment_t **last)
{
    if (pc->kind == RS_PLANNED_COPY_CONVERT || pc->nexact == 0)
        return RS_COST_NO_CHAIN;
    int join = a->nchain > 0 && *last != NULL && /* set with nchain */
               rs__cost_continues(*last, s0);
    a->joins[a->nchain] = (unsigned char)join;
    a->joined[s0->session] += (uint64_t)join;
    *last = sn;
    a->chain[a->nchain] = ci;
    return a->nchain++;
}

/* add_sums and chain_copy of a live copy. Most copies keep one run: it
 * is their sums and both their ends, read once. */
static size_t note_live(const rs__planner_t *b, size_t ci, rs__session_costs_t *a,
                        const rs_segment_t **last)
{
    const rs__planned_copy_t *pc = &b->copies[ci];
    const rs_segment_t *s0 = NULL, *sn = NULL;
    if (!pc->dropped && pc->seg_end - pc->seg_begin == 1) {
        const rs_segment_t *r = &b->tmp.v[pc->seg_begin];
        a->bytes[r->session] += r->nbytes;
        a->descs[r->session]++;
        return chain_copy(pc, ci, r, r, a, last);
    }
    add_sums(b, pc, a);
    rs__cost_ends(b, pc, &s0, &sn);
    return chain_copy(pc, ci, s0, sn, a, last);
}

static int aggs_alloc(rs__session_costs_t *a, size_t nc, size_t ns)
{
    *a = (rs__session_costs_t){0};
    /* the per-copy arrays in one block, the per-session ones in another */
    a->at = malloc((4 * nc + 1) * sizeof(size_t) + nc + 1);
    a->bytes = calloc(3 * (ns + 1), sizeof(uint64_t));
    if (a->at == NULL || a->bytes == NULL)
        return 0;
    a->chain = a->at + nc + 1;
    a->act = a->chain + nc;
    a->act_pos = a->act + nc;
    a->joins = (unsigned char *)(a->act + nc);
    a->descs = a->bytes + ns + 1;
    a->joined = a->descs + ns + 1;
    return 1;
}

rs_status_t rs__cost_aggs_build(rs__planner_t *b, rs__session_costs_t *a)
{
    size_t nc = b->cap->copies_len, ns = b->plan->nsessions;
    long *slot = malloc((ns + 1) * sizeof(long));
    agg_vec_t out = {0};
    const rs_segment_t *last = NULL;
    int ok = aggs_alloc(a, nc, ns) && slot != NULL;
    for (size_t k = 0; ok && k < ns; k++)
        slot[k] = -1;
    for (size_t ci = 0; ok && ci < nc; ci++) {
        rs__planned_copy_t *pc = &b->copies[ci];
        pc->stage = -1;
        pc->capped = 0;
        a->at[ci] = out.v_len;
        if (pc->kind == RS_PLANNED_COPY_SKIP)
            continue; /* the model never reads it */
        const rs__planned_source_t *s = &b->psrc[pc->src];
        if (s->fallback != NULL)
            continue; /* nor this one (rs__cost_live) */
        size_t pos = note_live(b, ci, a, &last);
        if (!rs__cost_active_src(s))
            continue; /* one run at most: nothing to weigh */
        size_t n;
        const rs_segment_t *ex = rs__cost_exact(b, pc, &n);
        a->act[a->nact] = ci;
        a->act_pos[a->nact++] = pos;
        ok = pc->dropped ? copy_sums(b, &b->drops[pc->drop], &out)
                         : sum_copy(ex, n, slot, &out);
    }
    free(slot);
    a->v = out.v;
    if (!ok) {
        rs__cost_aggs_free(a);
        return rs__diag_set(b->diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    a->at[nc] = out.v_len;
    return RS_OK;
}

void rs__cost_aggs_free(rs__session_costs_t *a)
{
    free(a->v);
    free(a->at);
    free(a->bytes);
    *a = (rs__session_costs_t){0};
}
