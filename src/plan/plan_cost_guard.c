/* The cost model's guarantee: the greedy choice is compared with the plan
 * that reads every copy by its exact runs and the plan that pulls every
 * source it can whole, each estimated as assembly will build it (exact runs
 * merged across copies where they continue each other), and the fastest is
 * kept: the chosen plan is never estimated slower than either.
 * The cost model's pass over the copies (plan_cost_agg.c) made the
 * all-exact plan's per-session sums, its chain of runs and the list of
 * active copies, the only ones any contender can stage; a contender's
 * estimate starts from those sums and changes only what its staged copies
 * change, so it costs those copies and the sessions, not every copy of
 * the plan. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "model/capture_impl.h"
#include "plan/plan_cost.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

/* The contenders, per copy: g the greedy choice, x the all-exact plan
 * (copies over the cap keep their staged way), f the full-pull plan (every
 * source that can be pulled whole is, the rest as in x). */
enum { WAY_G, WAY_X, WAY_F };

/* The plan's exact runs in assembly order: every live copy but the
 * converts, that has some run (what assembly appends one after another),
 * and whether each one's first run continues the run before it (assembly
 * then merges the two: one descriptor less). */
/* The plan's exact runs in assembly order (rs__session_costs_t chain, joins)
 * and the copies some contender stages. */
typedef struct est {
    rs__planner_t *b;
    const rs__session_costs_t *aggs;
    uint64_t *bytes, *descs;           /* one estimate's sums */
    uint64_t *all_bytes, *all_descs;   /* the all-exact plan's */
    const size_t *chain;
    size_t nchain;
    const unsigned char *joins;        /* per chain position */
    size_t *cand, *cand_at, ncand;     /* staged by some contender: the
                                        * copy and its chain position */
    unsigned char *used;               /* per stage */
} est_t;

typedef struct {
    int x, g, f;
} differs_t;

/* Stage of copy pc in contender `way`, or -1 for its exact runs. */
static long way_of(const rs__planner_t *b, const rs__planned_copy_t *pc, int way)
{
    long x = pc->capped ? pc->stage : -1;
    if (way == WAY_G)
        return pc->stage;
    if (way == WAY_X)
        return x;
    long full = rs__cost_live(b, pc) ? b->psrc[pc->src].full_pull : -1;
    return full >= 0 && rs__cost_stageable(b, pc) ? full : x;
}

static const rs_segment_t *first_run(const est_t *e, size_t at)
{
    const rs_segment_t *s0 = NULL, *sn = NULL;
    rs__cost_ends(e->b, &e->b->copies[e->chain[at]], &s0, &sn);
    return s0;
}

static const rs_segment_t *last_run(const est_t *e, size_t at)
{
    const rs_segment_t *s0 = NULL, *sn = NULL;
    rs__cost_ends(e->b, &e->b->copies[e->chain[at]], &s0, &sn);
    return sn;
}

/* Adds copy ci to the candidates when some contender stages it. A staged
 * copy is stageable, so in the chain; a staged copy without exact runs
 * would only trade its (empty) sums for the stage (RS_COST_NO_CHAIN). */
static void note_copy(est_t *e, size_t ci, size_t pos, differs_t *df)
{
    const rs__planner_t *b = e->b;
    const rs__planned_copy_t *pc = &b->copies[ci];
    /* way_of for a live copy, the full pull looked at only when there is
     * one */
    long g = pc->stage, x = pc->capped ? g : -1, full =
        b->psrc[pc->src].full_pull;
    long f = full >= 0 && rs__cost_stageable(b, pc) ? full : x;
    df->x |= pc->capped;
    df->g |= g != x;
    df->f |= f != x;
    if (g >= 0 || x >= 0 || f >= 0) {
        e->cand[e->ncand] = ci;
        e->cand_at[e->ncand++] = pos;
    }
}

/* The all-exact plan: every live copy's sums (converts' too), less the
 * joins; and the candidates of the other contenders. Only an active copy
 * (a copy of a source with an alternative) can be one: no other is ever
 * staged, nor has a full pull. */
static differs_t prepare(est_t *e)
{
    const rs__session_costs_t *a = e->aggs;
    size_t ns = e->b->plan->nsessions;
    differs_t df = {0, 0, 0};
    for (size_t k = 0; k < ns; k++) {
        e->all_bytes[k] = a->bytes[k];
        e->all_descs[k] = a->descs[k] - a->joined[k];
    }
    for (size_t i = 0; i < a->nact; i++)
        note_copy(e, a->act[i], a->act_pos[i], &df);
    return df;
}

/* Staged chain positions p..q leave the chain: the joins at p..q+1 go,
 * and the copies on either side may join instead. */
static void unjoin(est_t *e, size_t p, size_t q)
{
    for (size_t i = p; i <= q + 1 && i < e->nchain; i++)
        if (e->joins[i])
            e->descs[first_run(e, i)->session]++;
    if (p > 0 && q + 1 < e->nchain) {
        const rs_segment_t *s0 = first_run(e, q + 1);
        if (rs__cost_continues(last_run(e, p - 1), s0))
            e->descs[s0->session]--;
    }
}

/* Copy ci read through stage k instead of its exact runs. */
static void stage_copy(est_t *e, size_t ci, long k)
{
    const rs__session_costs_t *a = e->aggs;
    for (size_t i = a->at[ci]; i < a->at[ci + 1]; i++) {
        e->bytes[a->v[i].session] -= a->v[i].bytes;
        e->descs[a->v[i].session] -= a->v[i].descs;
    }
    if (e->used[k])
        return;
    e->used[k] = 1;
    const rs__planned_stage_t *st = &e->b->stages[k];
    for (size_t i = 0; i < st->segs.v_len; i++) {
        e->bytes[st->segs.v[i].session] += st->segs.v[i].nbytes;
        e->descs[st->segs.v[i].session]++;
    }
}

/* The model's time for contender `way`, as assembly will build it. */
static double est_way(est_t *e, int way)
{
    rs__planner_t *b = e->b;
    size_t ns = b->plan->nsessions, p = 0, q = 0;
    int open = 0;
    memcpy(e->bytes, e->all_bytes, (ns + 1) * sizeof(uint64_t));
    memcpy(e->descs, e->all_descs, (ns + 1) * sizeof(uint64_t));
    memset(e->used, 0, b->stages_len + 1);
    for (size_t i = 0; i < e->ncand; i++) {
        long k = way_of(b, &b->copies[e->cand[i]], way);
        if (k < 0)
            continue;
        stage_copy(e, e->cand[i], k);
        size_t at = e->cand_at[i];
        if (at == RS_COST_NO_CHAIN)
            continue;
        if (open && at == q + 1) {
            q = at;
            continue;
        }
        if (open)
            unjoin(e, p, q);
        p = q = at;
        open = 1;
    }
    if (open)
        unjoin(e, p, q);
    return rs__cost_plan_seconds(b->params, e->bytes, e->descs, ns);
}

/* Keeps the fastest of the contenders: the exact one on a tie, then the
 * greedy one. Also the stats' exact_est_seconds (every copy exact). A
 * contender equal by construction to the one it is compared with (x to
 * all-exact, g and f to x) is not estimated again: most plans stage
 * nothing, and then all four are the same. */
static void keep_fastest(rs__planner_t *b, est_t *e)
{
    differs_t df = prepare(e);
    size_t ns = b->plan->nsessions;
    double all = rs__cost_plan_seconds(b->params, e->all_bytes, e->all_descs,
                                       ns);
    b->plan->stats.exact_est_seconds = all;
    int best = WAY_X;
    double t = df.x ? est_way(e, WAY_X) : all;
    double tg = df.g ? est_way(e, WAY_G) : t, tf = df.f ? est_way(e, WAY_F) : t;
    if (tg < t) {
        best = WAY_G;
        t = tg;
    }
    if (tf < t)
        best = WAY_F;
    /* a copy no contender stages is exact in all of them */
    for (size_t i = 0; best != WAY_G && i < e->ncand; i++) {
        rs__planned_copy_t *pc = &b->copies[e->cand[i]];
        pc->stage = way_of(b, pc, best);
    }
}

rs_status_t rs__cost_guarantee(rs__planner_t *b, const rs__session_costs_t *aggs)
{
    size_t ns = b->plan->nsessions, na = aggs->nact;
    /* the sessions' four sums in one block, the candidates' two lists in
     * another: they are as many as the active copies */
    uint64_t *sums = calloc(4 * (ns + 1), sizeof(uint64_t));
    size_t *cands = malloc((2 * na + 1) * sizeof(size_t));
    est_t e = {b, aggs, sums, NULL, NULL, NULL, aggs->chain, aggs->nchain,
               aggs->joins, cands, NULL, 0, malloc(b->stages_len + 1)};
    rs_status_t st = RS_OK;
    if (sums == NULL || cands == NULL || e.used == NULL) {
        st = OOM(b);
    } else {
        e.descs = sums + ns + 1;
        e.all_bytes = e.descs + ns + 1;
        e.all_descs = e.all_bytes + ns + 1;
        e.cand_at = cands + na;
        keep_fastest(b, &e);
    }
    free(sums);
    free(cands);
    free(e.used);
    return st;
}
