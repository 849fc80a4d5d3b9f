/* The cost model's guarantee: the greedy choice is compared with the plan
 * that reads every copy by its exact runs and the plan that pulls every
 * source it can whole, each estimated as assembly will build it (exact runs
 * merged across copies where they continue each other), and the fastest is
 * kept: the chosen plan is never estimated slower than either. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "plan/capture_impl.h"
#include "plan/plan_cost.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

typedef struct est {
    rs_planner_t *b;
    const rs_cost_aggs_t *aggs;
    uint64_t *bytes, *descs;
    unsigned char *used; /* per stage */
} est_t;

static void est_add(est_t *e, const rs_segment_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        e->bytes[s[i].session] += s[i].nbytes;
        e->descs[s[i].session]++;
    }
}

static void est_add_exact(est_t *e, size_t ci)
{
    for (size_t i = e->aggs->at[ci]; i < e->aggs->at[ci + 1]; i++) {
        e->bytes[e->aggs->v[i].session] += e->aggs->v[i].bytes;
        e->descs[e->aggs->v[i].session] += e->aggs->v[i].descs;
    }
}

/* Copy ci's exact runs as assembly places them: a run continuing the last
 * placed one (same session and param, contiguous on both sides) joins it.
 * Inside a copy the walk already joined every such pair, so only its first
 * run can join the run placed before it: its ends are all it takes, kept
 * or dropped. */
static void est_exact(est_t *e, size_t ci, rs_segment_t *last, int *have)
{
    const rs_segment_t *s0 = NULL, *sn = NULL;
    uint64_t n = rs__cost_ends(e->b, &e->b->copies[ci], &s0, &sn);
    if (n == 0)
        return;
    est_add_exact(e, ci);
    if (*have && last->session == s0->session && last->param == s0->param &&
        last->src_addr + last->nbytes == s0->src_addr &&
        last->dst_byte + last->nbytes == s0->dst_byte) {
        e->descs[s0->session]--;
        if (n == 1) {
            last->nbytes += s0->nbytes;
            return;
        }
    }
    *last = *sn;
    *have = 1;
}

/* The model's time for the plan that reads copy i through stage dec[i]
 * (-1: its exact runs), computed as assembly will build it. */
static double est_of(est_t *e, const long *dec)
{
    rs_planner_t *b = e->b;
    size_t ns = b->plan->nsessions;
    rs_segment_t last = {0, 0, 0, 0, 0};
    int have = 0;
    memset(e->bytes, 0, (ns + 1) * sizeof(uint64_t));
    memset(e->descs, 0, (ns + 1) * sizeof(uint64_t));
    memset(e->used, 0, b->stages_len + 1);
    for (size_t ci = 0; ci < b->cap->copies_len; ci++) {
        const rs_pcopy_t *pc = &b->copies[ci];
        if (!rs__cost_live(b, pc))
            continue;
        if (pc->kind == RS_PCOPY_CONVERT) {
            est_add_exact(e, ci);
        } else if (dec[ci] >= 0 && !e->used[dec[ci]]) {
            e->used[dec[ci]] = 1;
            est_add(e, b->stages[dec[ci]].segs.v, b->stages[dec[ci]].segs.v_len);
        } else if (dec[ci] < 0) {
            est_exact(e, ci, &last, &have);
        }
    }
    return rs__cost_plan_seconds(b->params, e->bytes, e->descs, ns);
}

/* The three contenders, per copy: g the greedy choice, x the all-exact
 * plan (copies over the cap keep their staged way), f the full-pull plan
 * (every source that can be pulled whole is, the rest as in x); and every
 * copy exact. Sets which contenders differ from the one they are compared
 * with (x from all, g from x, f from x): an estimate equal by construction
 * is not computed again (most plans stage nothing, and then all four are
 * the same). */
typedef struct {
    int x, g, f;
} differs_t;

static differs_t contenders(const rs_planner_t *b, long *g, long *x, long *f,
                            long *all)
{
    differs_t df = {0, 0, 0};
    for (size_t ci = 0; ci < b->cap->copies_len; ci++) {
        const rs_pcopy_t *pc = &b->copies[ci];
        long full = rs__cost_live(b, pc) ? b->psrc[pc->src].full_pull : -1;
        g[ci] = pc->stage;
        x[ci] = pc->capped ? pc->stage : -1;
        f[ci] = full >= 0 && rs__cost_stageable(b, pc) ? full : x[ci];
        all[ci] = -1;
        df.x |= pc->capped;
        df.g |= g[ci] != x[ci];
        df.f |= f[ci] != x[ci];
    }
    return df;
}

/* Keeps the fastest of the contenders: the exact one on a tie, then the
 * greedy one. Also the stats' exact_est_seconds (every copy exact). */
static void keep_fastest(rs_planner_t *b, est_t *e, long *dec)
{
    size_t nc = b->cap->copies_len;
    long *g = dec, *x = dec + nc, *f = dec + 2 * nc, *all = dec + 3 * nc;
    differs_t df = contenders(b, g, x, f, all);
    b->plan->stats.exact_est_seconds = est_of(e, all);
    long *best = x;
    double t = df.x ? est_of(e, x) : b->plan->stats.exact_est_seconds;
    double tg = df.g ? est_of(e, g) : t, tf = df.f ? est_of(e, f) : t;
    if (tg < t) {
        best = g;
        t = tg;
    }
    if (tf < t)
        best = f;
    for (size_t ci = 0; ci < nc; ci++)
        b->copies[ci].stage = best[ci];
}

rs_status_t rs__cost_guarantee(rs_planner_t *b, const rs_cost_aggs_t *aggs)
{
    size_t nc = b->cap->copies_len, ns = b->plan->nsessions;
    est_t e = {b, aggs, calloc(ns + 1, sizeof(uint64_t)),
               calloc(ns + 1, sizeof(uint64_t)), malloc(b->stages_len + 1)};
    long *dec = calloc(4 * nc + 1, sizeof(long));
    rs_status_t st = RS_OK;
    if (e.bytes == NULL || e.descs == NULL || e.used == NULL || dec == NULL)
        st = OOM(b);
    else
        keep_fastest(b, &e, dec);
    free(e.bytes);
    free(e.descs);
    free(e.used);
    free(dec);
    return st;
}

