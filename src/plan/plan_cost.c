/* The cost model's choice of how each copy is read: by its exact runs, from
 * a staged box (coalesced through cheap gaps, or bounded so that each
 * shard's part is one run), or from its source's full pull. A session's
 * time is its bytes over the NIC rate plus its descriptors times the
 * per-descriptor cost; a plan's time is its most loaded session's.
 * Copies are decided greedily, source by source, against the plan built so
 * far; then plan_cost_guard.c compares the result with the all-exact plan
 * and the full-pull plan and keeps the fastest of the three, so the choice
 * is never estimated slower than either (docs/cost-model.md,
 * "Guarantee"). */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "model/capture_impl.h"
#include "plan/plan_cost.h"
#include "plan/planner.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

double rs__cost_seconds(const rs_plan_params_t *p, uint64_t bytes,
                        uint64_t descriptors)
{
    return (double)bytes * 8.0 / (p->nic_gbps * 1e9) +
           (double)descriptors * p->descriptor_ns * 1e-9;
}

/* Every session's bytes and descriptors also cross the receiver's own NIC
 * (and its descriptors are all posted there), so the receiver is one more
 * session, carrying the sum: without it, a plan pulling whole sources
 * from a thousand publishers would look as fast as its busiest one. */
double rs__cost_plan_seconds(const rs_plan_params_t *p, const uint64_t *bytes,
                             const uint64_t *descs, size_t nsessions)
{
    uint64_t tb = 0, td = 0;
    double worst = 0;
    for (size_t k = 0; k < nsessions; k++) {
        double t = rs__cost_seconds(p, bytes[k], descs[k]);
        worst = t > worst ? t : worst;
        tb += bytes[k];
        td += descs[k];
    }
    double recv = rs__cost_seconds(p, tb, td);
    return recv > worst ? recv : worst;
}

/* The working plan per session, and one change to it under evaluation. */
typedef struct cost {
    rs__planner_t *b;
    size_t ns;
    rs__session_costs_t aggs;    /* every copy's exact runs per session */
    uint64_t *bytes, *descs;
    uint64_t tot_bytes, tot_descs; /* the receiver's: every session's sum */
    double max_t;           /* its most loaded session's time, or more */
    int64_t *db, *dd;       /* the change, on the sessions it touches */
    uint32_t *touched;
    size_t ntouched;
    unsigned char *mark;
} cost_t;

typedef struct score {
    double max_t, sum_t; /* plan time after the change; its own cost */
} score_t;

static int better(score_t a, score_t b)
{
    return a.max_t < b.max_t || (a.max_t == b.max_t && a.sum_t < b.sum_t);
}

static void delta_add(cost_t *c, const rs_segment_t *s, size_t n, int sign)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t k = s[i].session;
        if (!c->mark[k]) {
            c->mark[k] = 1;
            c->touched[c->ntouched++] = k;
            c->db[k] = c->dd[k] = 0;
        }
        c->db[k] += sign * (int64_t)s[i].nbytes;
        c->dd[k] += sign;
    }
}

/* delta_add for copy ci's exact runs, by their per-session sums. */
static void delta_exact(cost_t *c, size_t ci, int sign)
{
    for (size_t i = c->aggs.at[ci]; i < c->aggs.at[ci + 1]; i++) {
        const rs__session_cost_t *a = &c->aggs.v[i];
        uint32_t k = a->session;
        if (!c->mark[k]) {
            c->mark[k] = 1;
            c->touched[c->ntouched++] = k;
            c->db[k] = c->dd[k] = 0;
        }
        c->db[k] += sign * (int64_t)a->bytes;
        c->dd[k] += sign * (int64_t)a->descs;
    }
}

/* Takes copy ci's exact runs out of the replica loads (lift) or puts them
 * back: a candidate box replacing them is walked as if they were not
 * read, so it balances over replicas as they would. */
static void lift_exact(cost_t *c, size_t ci, int lift)
{
    for (size_t i = c->aggs.at[ci]; i < c->aggs.at[ci + 1]; i++) {
        if (lift)
            c->b->load[c->aggs.v[i].session] -= c->aggs.v[i].bytes;
        else
            c->b->load[c->aggs.v[i].session] += c->aggs.v[i].bytes;
    }
}

/* Scores the pending change, then applies it when `apply`, and clears it. */
static score_t delta_end(cost_t *c, int apply)
{
    const rs_plan_params_t *p = c->b->params;
    score_t sc = {c->max_t, 0};
    int64_t tdb = 0, tdd = 0;
    for (size_t i = 0; i < c->ntouched; i++) {
        uint32_t k = c->touched[i];
        uint64_t nb = (uint64_t)((int64_t)c->bytes[k] + c->db[k]);
        uint64_t nd = (uint64_t)((int64_t)c->descs[k] + c->dd[k]);
        tdb += c->db[k];
        tdd += c->dd[k];
        double now = rs__cost_seconds(p, nb, nd);
        sc.sum_t += now - rs__cost_seconds(p, c->bytes[k], c->descs[k]);
        if (now > sc.max_t)
            sc.max_t = now;
        if (apply) {
            c->bytes[k] = nb;
            c->descs[k] = nd;
        }
        c->mark[k] = 0;
    }
    c->ntouched = 0;
    /* the receiver (rs__cost_plan_seconds); the sum over sessions already
     * tells its change, so sum_t needs nothing more */
    uint64_t tb = (uint64_t)((int64_t)c->tot_bytes + tdb);
    uint64_t td = (uint64_t)((int64_t)c->tot_descs + tdd);
    double recv = rs__cost_seconds(p, tb, td);
    if (recv > sc.max_t)
        sc.max_t = recv;
    if (apply) {
        c->tot_bytes = tb;
        c->tot_descs = td;
        c->max_t = sc.max_t;
    }
    return sc;
}

static int box_equal(const rs__planned_stage_t *s, int nd, const int64_t *lo,
                     const int64_t *shape)
{
    for (int d = 0; d < nd; d++) {
        if (s->lo[d] != lo[d] || s->shape[d] != shape[d])
            return 0;
    }
    return 1;
}

static int box_contains(const rs__planned_stage_t *s, int nd, const int64_t *lo,
                        const int64_t *shape)
{
    for (int d = 0; d < nd; d++) {
        if (lo[d] < s->lo[d] || lo[d] + shape[d] > s->lo[d] + s->shape[d])
            return 0;
    }
    return 1;
}

static int is_whole(int nd, const int64_t *lo, const int64_t *shape,
                    const int64_t *full)
{
    for (int d = 0; d < nd; d++) {
        if (lo[d] != 0 || shape[d] != full[d])
            return 0;
    }
    return 1;
}

/* The best way found so far for one copy. */
typedef struct pick {
    int found;
    score_t sc;
    long stage;          /* existing stage, or -1 */
    rs__planned_stage_t fresh;   /* a new stage when stage < 0 and found */
} pick_t;

static score_t score_stage(cost_t *c, size_t ci, const rs__segment_vec_t *segs,
                           int paid)
{
    if (!paid)
        delta_add(c, segs->v, segs->v_len, +1);
    delta_exact(c, ci, -1);
    return delta_end(c, 0);
}

/* A stage is worth reading instead of the copy's exact runs only when it
 * takes fewer descriptors (one already read takes none): moving bytes
 * into staging for the same descriptors would only add a local copy. */
static int fewer(const rs__planner_t *b, const rs__planned_copy_t *pc,
                 const rs__planned_stage_t *st)
{
    (void)b;
    return st->users > 0 || st->segs.v_len < pc->nexact;
}

/* The stages already made for this source that hold the copy's box. */
static void try_existing(cost_t *c, size_t ci, size_t first, const int64_t *lo,
                         const int64_t *shape, pick_t *pk)
{
    rs__planner_t *b = c->b;
    const rs__planned_copy_t *pc = &b->copies[ci];
    int nd = b->psrc[pc->src].tensor->ndim;
    for (size_t k = first; k < b->stages_len; k++) {
        const rs__planned_stage_t *st = &b->stages[k];
        if (!box_contains(st, nd, lo, shape) || !fewer(b, pc, st) ||
            !rs__stage_fits(b, ci, st->lo, st->shape))
            continue;
        score_t sc = score_stage(c, ci, &st->segs, st->users > 0);
        if (!pk->found || better(sc, pk->sc)) {
            free(pk->found && pk->stage < 0 ? pk->fresh.segs.v : NULL);
            pk->found = 1;
            pk->sc = sc;
            pk->stage = (long)k;
        }
    }
}

/* A new box for the copy, unless one of the source's stages has it. */
static rs_status_t try_fresh(cost_t *c, size_t ci, size_t first,
                             rs_staged_kind_t kind, const int64_t *lo,
                             const int64_t *shape, pick_t *pk)
{
    rs__planner_t *b = c->b;
    const rs__planned_copy_t *pc = &b->copies[ci];
    rs__planned_source_t *s = &b->psrc[pc->src];
    int nd = s->tensor->ndim, complete = 0;
    for (size_t k = first; k < b->stages_len; k++) {
        if (box_equal(&b->stages[k], nd, lo, shape))
            return RS_OK;
    }
    if (is_whole(nd, lo, shape, s->tensor->shape) ||
        rs__stage_min_runs(s, shape) >= pc->nexact ||
        !rs__stage_fits(b, ci, lo, shape))
        return RS_OK; /* the whole source is the full stage's */
    rs__planned_stage_t ps = {pc->src, kind, {0}, {0}, {0}, 0};
    memcpy(ps.lo, lo, (size_t)nd * sizeof(int64_t));
    memcpy(ps.shape, shape, (size_t)nd * sizeof(int64_t));
    rs_status_t st = rs__stage_walk(b, s, lo, shape, &ps.segs, &complete);
    if (st != RS_OK || !complete || !fewer(b, pc, &ps)) {
        free(ps.segs.v);
        return st;
    }
    score_t sc = score_stage(c, ci, &ps.segs, 0);
    if (pk->found && !better(sc, pk->sc)) {
        free(ps.segs.v);
        return RS_OK;
    }
    free(pk->found && pk->stage < 0 ? pk->fresh.segs.v : NULL);
    *pk = (pick_t){1, sc, -1, ps};
    return RS_OK;
}

/* Moves the working plan from the copy's exact runs to the pick. */
static rs_status_t take_pick(cost_t *c, size_t ci, pick_t *pk)
{
    rs__planner_t *b = c->b;
    rs__planned_copy_t *pc = &b->copies[ci];
    if (pk->stage < 0) {
        if (!RS_VEC_PUSH(b, stages, pk->fresh)) {
            free(pk->fresh.segs.v);
            return OOM(b);
        }
        pk->stage = (long)b->stages_len - 1;
    }
    rs__planned_stage_t *st = &b->stages[pk->stage];
    if (st->users++ == 0)
        delta_add(c, st->segs.v, st->segs.v_len, +1);
    delta_exact(c, ci, -1);
    delta_end(c, 1);
    /* replica balance follows the reads */
    for (size_t i = c->aggs.at[ci]; i < c->aggs.at[ci + 1]; i++)
        b->load[c->aggs.v[i].session] -= c->aggs.v[i].bytes;
    if (st->users == 1)
        for (size_t i = 0; i < st->segs.v_len; i++)
            b->load[st->segs.v[i].session] += st->segs.v[i].nbytes;
    pc->stage = pk->stage;
    return RS_OK;
}

static rs_status_t decide_copy(cost_t *c, size_t ci, size_t first)
{
    rs__planner_t *b = c->b;
    rs__planned_copy_t *pc = &b->copies[ci];
    const rs__planned_source_t *s = &b->psrc[pc->src];
    int64_t lo[RS_MAX_DIMS], shape[RS_MAX_DIMS], wlo[RS_MAX_DIMS],
        wshape[RS_MAX_DIMS];
    rs_status_t st;
    /* one run is as few as a copy can take */
    if (pc->nexact < 2 || !rs__cost_stageable(b, pc) ||
        !rs__stage_bbox(b, ci, lo, shape))
        return RS_OK;
    pick_t pk = {0, {0, 0}, -1, {0}}; /* a few hundred bytes: only here */
    try_existing(c, ci, first, lo, shape, &pk);
    lift_exact(c, ci, 1);
    rs__stage_coalesced(b, s, lo, shape, wlo, wshape);
    st = try_fresh(c, ci, first, RS_STAGED_COALESCED, wlo, wshape, &pk);
    rs__stage_bound(b, s, lo, shape, wlo, wshape);
    if (st == RS_OK)
        st = try_fresh(c, ci, first, RS_STAGED_BOUND, wlo, wshape, &pk);
    lift_exact(c, ci, 0);
    if (st != RS_OK) {
        free(pk.found && pk.stage < 0 ? pk.fresh.segs.v : NULL);
        return st;
    }
    uint64_t runs = pc->nexact;
    pc->capped = pk.found && runs > (uint64_t)b->params->max_segments_per_copy;
    score_t exact = {c->max_t, 0};
    if (!pk.found || (!pc->capped && !better(pk.sc, exact))) {
        free(pk.found && pk.stage < 0 ? pk.fresh.segs.v : NULL);
        return RS_OK;
    }
    return take_pick(c, ci, &pk);
}

static void mark_exact(cost_t *c, const size_t *ids, size_t nids, int on);

/* The change from the ways the source's copies were given (exact runs and
 * the stages made for them) to stage k for all of them. */
static void whole_delta(cost_t *c, long k, const size_t *ids, size_t nids,
                        size_t first)
{
    rs__planner_t *b = c->b;
    const rs__planned_stage_t *to = &b->stages[k];
    delta_add(c, to->segs.v, to->segs.v_len, +1);
    for (size_t j = first; j < b->stages_len; j++)
        if (b->stages[j].users > 0)
            delta_add(c, b->stages[j].segs.v, b->stages[j].segs.v_len, -1);
    for (size_t i = 0; i < nids; i++) {
        const rs__planned_copy_t *pc = &b->copies[ids[i]];
        if (rs__cost_stageable(b, pc) && pc->stage < 0)
            delta_exact(c, ids[i], -1);
    }
}

/* The exact runs of the source's copies that a stage could serve. */
static uint64_t exact_runs(const rs__planner_t *b, const size_t *ids,
                           size_t nids)
{
    uint64_t exact = 0;
    for (size_t i = 0; i < nids; i++) {
        const rs__planned_copy_t *pc = &b->copies[ids[i]];
        if (rs__cost_stageable(b, pc))
            exact += pc->nexact;
    }
    return exact;
}

/* A stage for all of a source's copies is worth considering when it reads
 * them with fewer descriptors than their exact runs. */
static int whole_worth(const rs__planner_t *b, long k, const size_t *ids,
                       size_t nids)
{
    return k >= 0 && b->stages[k].segs.v_len < exact_runs(b, ids, nids);
}

/* After its copies: stage k (the full pull, or the bound box of all the
 * copies) for every one of them, when that beats the ways they were
 * given. */
static void decide_whole(cost_t *c, long k, const size_t *ids, size_t nids,
                         size_t first)
{
    rs__planner_t *b = c->b;
    score_t stay = {c->max_t, 0};
    if (!whole_worth(b, k, ids, nids))
        return;
    whole_delta(c, k, ids, nids, first);
    if (!better(delta_end(c, 0), stay))
        return;
    whole_delta(c, k, ids, nids, first);
    delta_end(c, 1);
    for (size_t j = first; j < b->stages_len; j++)
        b->stages[j].users = 0;
    for (size_t i = 0; i < nids; i++) {
        rs__planned_copy_t *pc = &b->copies[ids[i]];
        if (rs__cost_stageable(b, pc)) {
            pc->stage = k;
            b->stages[k].users++;
        }
    }
}

/* The bounding box of every stageable copy of the source, widened as
 * rs__stage_bound does; 0 when there is none. */
static int union_box(rs__planner_t *b, const rs__planned_source_t *s, const size_t *ids,
                     size_t nids, int64_t *lo, int64_t *shape)
{
    int64_t clo[RS_MAX_DIMS], csh[RS_MAX_DIMS], hi[RS_MAX_DIMS];
    int nd = s->tensor->ndim, any = 0;
    for (size_t i = 0; i < nids; i++) {
        if (!rs__cost_stageable(b, &b->copies[ids[i]]) ||
            !rs__stage_bbox(b, ids[i], clo, csh))
            continue;
        for (int d = 0; d < nd; d++) {
            if (!any || clo[d] < lo[d])
                lo[d] = clo[d];
            if (!any || clo[d] + csh[d] > hi[d])
                hi[d] = clo[d] + csh[d];
        }
        any = 1;
    }
    for (int d = 0; any && d < nd; d++)
        shape[d] = hi[d] - lo[d];
    if (any)
        rs__stage_bound(b, s, lo, shape, lo, shape);
    return any;
}

/* The stage of the union box, made (walked) unless one of the source's
 * stages has that box; -1 when it cannot serve every copy. */
static rs_status_t union_stage(cost_t *c, rs__planned_source_t *s, const size_t *ids,
                               size_t nids, size_t first, long *k_p)
{
    rs__planner_t *b = c->b;
    int64_t lo[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    int nd = s->tensor->ndim, complete = 0;
    *k_p = -1;
    if (!union_box(b, s, ids, nids, lo, shape) ||
        is_whole(nd, lo, shape, s->tensor->shape) ||
        rs__stage_min_runs(s, shape) >= exact_runs(b, ids, nids))
        return RS_OK; /* the whole source is the full pull's */
    for (size_t i = 0; i < nids; i++)
        if (rs__cost_stageable(b, &b->copies[ids[i]]) &&
            !rs__stage_fits(b, ids[i], lo, shape))
            return RS_OK;
    for (size_t k = first; k < b->stages_len; k++) {
        if (box_equal(&b->stages[k], nd, lo, shape)) {
            *k_p = (long)k;
            return RS_OK;
        }
    }
    rs__planned_stage_t ps = {(uint32_t)(s - b->psrc), RS_STAGED_BOUND, {0}, {0},
                      {0}, 0};
    memcpy(ps.lo, lo, (size_t)nd * sizeof(int64_t));
    memcpy(ps.shape, shape, (size_t)nd * sizeof(int64_t));
    mark_exact(c, ids, nids, 1);
    rs_status_t st = rs__stage_walk(b, s, lo, shape, &ps.segs, &complete);
    mark_exact(c, ids, nids, 0);
    if (st == RS_OK && complete && RS_VEC_PUSH(b, stages, ps)) {
        *k_p = (long)b->stages_len - 1;
        return RS_OK;
    }
    free(ps.segs.v);
    return st != RS_OK || !complete ? st : OOM(b);
}

/* ---- the greedy pass ---- */

static rs_status_t cost_init(cost_t *c, rs__planner_t *b)
{
    size_t ns = b->plan->nsessions;
    memset(c, 0, sizeof(*c));
    c->b = b;
    c->ns = ns;
    c->bytes = calloc(ns + 1, sizeof(uint64_t));
    c->descs = calloc(ns + 1, sizeof(uint64_t));
    c->db = calloc(ns + 1, sizeof(int64_t));
    c->dd = calloc(ns + 1, sizeof(int64_t));
    c->touched = calloc(ns + 1, sizeof(uint32_t));
    c->mark = calloc(ns + 1, 1);
    if (c->bytes == NULL || c->descs == NULL || c->db == NULL ||
        c->dd == NULL || c->touched == NULL || c->mark == NULL)
        return OOM(b);
    rs_status_t st = rs__cost_aggs_build(b, &c->aggs);
    if (st != RS_OK)
        return st;
    /* every live copy's exact runs: the pass's sums (what delta_exact of
     * each and delta_end would sum, without the marks) */
    for (size_t k = 0; k < ns; k++) {
        c->bytes[k] = c->aggs.bytes[k];
        c->descs[k] = c->aggs.descs[k];
        c->tot_bytes += c->bytes[k];
        c->tot_descs += c->descs[k];
    }
    c->max_t = rs__cost_plan_seconds(b->params, c->bytes, c->descs, ns);
    return RS_OK;
}

static void cost_free(cost_t *c)
{
    free(c->bytes);
    free(c->descs);
    free(c->db);
    free(c->dd);
    free(c->touched);
    free(c->mark);
    rs__cost_aggs_free(&c->aggs);
}

/* The active copies of each source (rs__session_costs_t act), in capture
 * order: ids[at[s] .. at[s + 1]); every other source has none. */
static rs_status_t by_source(rs__planner_t *b, const rs__session_costs_t *a,
                             size_t **ids_p, size_t **at_p)
{
    size_t np = b->psrc_len;
    size_t *at = calloc(np + 2, sizeof(size_t)), *ids = malloc((a->nact + 1) *
                                                               sizeof(size_t));
    if (at == NULL || ids == NULL) {
        free(at);
        free(ids);
        return OOM(b);
    }
    for (size_t i = 0; i < a->nact; i++)
        at[b->copies[a->act[i]].src + 2]++;
    for (size_t s = 2; s < np + 2; s++)
        at[s] += at[s - 1];
    for (size_t i = 0; i < a->nact; i++)
        ids[at[b->copies[a->act[i]].src + 1]++] = a->act[i];
    *ids_p = ids;
    *at_p = at;
    return RS_OK;
}

/* Whether the active copies' sources never decrease in capture order:
 * then act is already grouped by source, in source order, and by_source's
 * per-source counts (an array as long as the sources, for a handful of
 * active copies) are not needed. */
static int act_grouped(const rs__planner_t *b, const rs__session_costs_t *a)
{
    for (size_t i = 1; i < a->nact; i++)
        if (b->copies[a->act[i]].src < b->copies[a->act[i - 1]].src)
            return 0;
    return 1;
}

/* Lifts (on) or restores the copies' exact runs in the replica loads,
 * for the walk of a stage that would replace them all. */
static void mark_exact(cost_t *c, const size_t *ids, size_t nids, int on)
{
    for (size_t i = 0; i < nids; i++)
        if (rs__cost_stageable(c->b, &c->b->copies[ids[i]]))
            lift_exact(c, ids[i], on);
}

static rs_status_t decide_source(cost_t *c, uint32_t si, const size_t *ids,
                                 size_t nids)
{
    rs__planner_t *b = c->b;
    rs__planned_source_t *s = &b->psrc[si];
    size_t first = b->stages_len;
    uint64_t exact = exact_runs(b, ids, nids);
    rs_status_t st = RS_OK;
    s->full_pull = -1;
    /* one run is as few as its copies can take: no stage of any kind (a
     * staged read takes a run or more) can do better, so none is tried */
    if (exact <= 1)
        return RS_OK;
    /* no full pull where no walk of the source can take fewer runs */
    if (rs__stage_min_runs(s, s->tensor->shape) < exact) {
        mark_exact(c, ids, nids, 1);
        st = rs__planner_full_stage(b, s);
        mark_exact(c, ids, nids, 0);
    }
    if (st != RS_OK)
        return st;
    long box = -1;
    for (size_t i = 0; i < nids && st == RS_OK; i++)
        st = decide_copy(c, ids[i], first);
    if (st == RS_OK && nids > 1)
        st = union_stage(c, s, ids, nids, first, &box);
    if (st != RS_OK)
        return st;
    decide_whole(c, box, ids, nids, first);
    decide_whole(c, s->full_pull, ids, nids, first);
    return RS_OK;
}

static rs_status_t decide_sources(cost_t *c, const size_t *ids,
                                  const size_t *at)
{
    rs_status_t st = RS_OK;
    for (size_t s = 0; st == RS_OK && s < c->b->psrc_len; s++) {
        if (at[s + 1] > at[s])
            st = decide_source(c, (uint32_t)s, ids + at[s], at[s + 1] - at[s]);
    }
    return st;
}

/* decide_sources over act when it is grouped (act_grouped): each run of
 * one source's copies is that source's ids. */
static rs_status_t decide_grouped(cost_t *c)
{
    const size_t *act = c->aggs.act;
    rs_status_t st = RS_OK;
    for (size_t i = 0, j; st == RS_OK && i < c->aggs.nact; i = j) {
        uint32_t s = c->b->copies[act[i]].src;
        for (j = i + 1; j < c->aggs.nact && c->b->copies[act[j]].src == s; j++)
            ;
        st = decide_source(c, s, act + i, j - i);
    }
    return st;
}

rs_status_t rs__planner_choose(rs__planner_t *b)
{
    cost_t c;
    size_t *ids = NULL, *at = NULL;
    rs_status_t st = cost_init(&c, b);
    /* a source without active copies has one run at most: decide_source
     * would leave it as it is (full_pull -1, from psrc_new), so only the
     * sources of active copies are visited, in source order */
    if (st == RS_OK && c.aggs.nact > 0) {
        if (act_grouped(b, &c.aggs))
            st = decide_grouped(&c);
        else if ((st = by_source(b, &c.aggs, &ids, &at)) == RS_OK)
            st = decide_sources(&c, ids, at);
    }
    if (st == RS_OK)
        st = rs__cost_guarantee(b, &c.aggs);
    free(ids);
    free(at);
    cost_free(&c);
    return st;
}
