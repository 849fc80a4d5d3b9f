/* Assembly: per-copy segments become the plan's exact segments (merged
 * across copies where runs continue each other), converts, and the staged
 * reads the cost model kept with their copy lists; copies of fallback
 * sources are dropped; then the stats, the model's estimate among them. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "plan/capture_impl.h"
#include "plan/plan_quant.h"
#include "plan/planner.h"
#include "plan/shard_sort.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

static int live(const rs_planner_t *b, const rs_pcopy_t *pc)
{
    return pc->kind != RS_PCOPY_SKIP && b->psrc[pc->src].fallback == NULL;
}

static rs_status_t append_exact(rs_planner_t *b, const rs_pcopy_t *pc)
{
    rs_plan_h plan = b->plan;
    for (size_t i = pc->seg_begin; i < pc->seg_end; i++) {
        const rs_segment_t *s = &b->tmp.v[i];
        if (plan->segments_len > 0) {
            rs_segment_t *last = &plan->segments[plan->segments_len - 1];
            if (last->session == s->session && last->param == s->param &&
                last->src_addr + last->nbytes == s->src_addr &&
                last->dst_byte + last->nbytes == s->dst_byte) {
                last->nbytes += s->nbytes;
                continue;
            }
        }
        if (!RS_VEC_PUSH(plan, segments, *s))
            return OOM(b);
    }
    return RS_OK;
}

static rs_status_t add_convert(rs_planner_t *b, size_t ci, const rs_pcopy_t *pc)
{
    const rs_cap_copy_t *c = &b->cap->copies[ci];
    const rs_psrc_t *s = &b->psrc[pc->src];
    rs_convert_t cv;
    int64_t numel = 1, bytes;

    for (int i = 0; i < c->ndim; i++)
        numel *= c->dest_shape[i]; /* checked when the copy was added */
    if (!rs__mul_i64(numel, (int64_t)s->tensor->elsize, &bytes))
        return rs__diag_set(b->diag, RS_ERR_INPUT, "copy %zu: staging size "
                            "overflows", ci);
    cv.copy = ci;
    cv.param = pc->param;
    cv.src_dtype = s->tensor->dtype;
    cv.dest_dtype = c->dest_dtype;
    cv.staging_bytes = (uint64_t)bytes;
    cv.nsegments = pc->seg_end - pc->seg_begin;
    /* an empty copy has no segments, and tmp may still be unallocated */
    cv.segments = rs__arena_memdup(&b->plan->arena,
                                  cv.nsegments > 0 ? b->tmp.v + pc->seg_begin
                                                   : NULL,
                                  cv.nsegments * sizeof(rs_segment_t));
    if (cv.segments == NULL || !RS_VEC_PUSH(b->plan, converts, cv))
        return OOM(b);
    return RS_OK;
}

static rs_status_t add_uncovered(rs_planner_t *b, size_t ci,
                                 const rs_pcopy_t *pc)
{
    rs_uncovered_t u = {ci, b->psrc[pc->src].name, b->cap->copies[ci].param,
                        pc->missing};
    return RS_VEC_PUSH(b->plan, uncovered, u) ? RS_OK : OOM(b);
}

/* One staged read of the plan from a stage the cost model kept, with room
 * for the copies that read it. */
static rs_status_t add_staged(rs_planner_t *b, const rs_pstage_t *ps,
                              size_t ncopies)
{
    rs_plan_h plan = b->plan;
    const rs_psrc_t *s = &b->psrc[ps->src];
    const rs_src_tensor_t *t = s->tensor;
    size_t dims = (size_t)t->ndim * sizeof(int64_t);
    rs_full_pull_t fp;
    uint64_t numel = 1;

    memset(&fp, 0, sizeof(fp));
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)ps->shape[d]; /* inside the checked source */
    fp.src = s->name;
    fp.ndim = t->ndim;
    fp.global_shape = t->shape;
    fp.dtype = t->dtype;
    fp.staging_bytes = numel * t->elsize;
    fp.kind = ps->kind;
    /* (a 0-dim source has an empty box; the arena still returns room) */
    fp.box_lo = rs__arena_memdup(&plan->arena, ps->lo, dims);
    fp.box_shape = rs__arena_memdup(&plan->arena, ps->shape, dims);
    fp.copies = rs__arena_alloc(&plan->arena, (ncopies + 1) * sizeof(size_t));
    fp.nsegments = ps->segs.v_len;
    fp.segments = rs__arena_memdup(&plan->arena, ps->segs.v,
                                   ps->segs.v_len * sizeof(rs_segment_t));
    if (fp.box_lo == NULL || fp.box_shape == NULL || fp.copies == NULL ||
        fp.segments == NULL || !RS_VEC_PUSH(plan, full_pulls, fp))
        return OOM(b);
    return RS_OK;
}

/* The stages that some copy reads become the plan's staged reads, in the
 * order the planner made them; *index_p maps a stage to its read. */
static rs_status_t add_stages(rs_planner_t *b, long **index_p)
{
    size_t n = b->stages_len;
    size_t *counts = calloc(n + 1, sizeof(size_t));
    long *index = malloc((n + 1) * sizeof(long));
    rs_status_t st = RS_OK;
    if (counts == NULL || index == NULL) {
        free(counts);
        free(index);
        return OOM(b);
    }
    for (size_t ci = 0; ci < b->cap->copies_len; ci++) {
        const rs_pcopy_t *pc = &b->copies[ci];
        if (live(b, pc) && pc->kind == RS_PCOPY_EXACT && pc->stage >= 0)
            counts[pc->stage]++;
    }
    for (size_t k = 0; k < n && st == RS_OK; k++) {
        index[k] = counts[k] > 0 ? (long)b->plan->full_pulls_len : -1;
        if (counts[k] > 0)
            st = add_staged(b, &b->stages[k], counts[k]);
    }
    free(counts);
    if (st != RS_OK) {
        free(index);
        return st;
    }
    *index_p = index;
    return RS_OK;
}

/* A source whose copy needs more runs than the cap and still reads them
 * exactly (nothing else can read it) is listed once as unbounded. */
static rs_status_t note_unbounded(rs_planner_t *b, const rs_pcopy_t *pc)
{
    rs_psrc_t *s = &b->psrc[pc->src];
    if (pc->nexact <= (uint64_t)b->params->max_segments_per_copy ||
        s->listed_unbounded)
        return RS_OK;
    s->listed_unbounded = 1;
    return RS_VEC_PUSH(b->plan, unbounded, s->name) ? RS_OK : OOM(b);
}

static rs_status_t place_copy(rs_planner_t *b, size_t ci, const long *index)
{
    const rs_pcopy_t *pc = &b->copies[ci];
    rs_status_t st = RS_OK;

    if (pc->missing > 0 && (st = add_uncovered(b, ci, pc)) != RS_OK)
        return st;
    if (pc->kind == RS_PCOPY_CONVERT)
        return add_convert(b, ci, pc);
    if (pc->stage >= 0) {
        rs_full_pull_t *f = &b->plan->full_pulls[index[pc->stage]];
        ((size_t *)f->copies)[f->ncopies++] = ci;
        return RS_OK;
    }
    if ((st = note_unbounded(b, pc)) != RS_OK)
        return st;
    return append_exact(b, pc);
}

static void tally(rs_plan_h plan, const rs_segment_t *s, size_t n,
                  uint64_t *descs)
{
    for (size_t i = 0; i < n; i++) {
        plan->session_bytes[s[i].session] += s[i].nbytes;
        plan->stats.bytes_planned += s[i].nbytes;
        descs[s[i].session]++;
    }
    plan->stats.descriptor_count += n;
}

/* The model's time of the plan as built (rs__cost_plan_seconds). */
static double plan_seconds(const rs_planner_t *b, const uint64_t *descs)
{
    return rs__cost_plan_seconds(b->params, b->plan->session_bytes, descs,
                                 b->plan->nsessions);
}

static rs_status_t compute_stats(rs_planner_t *b)
{
    rs_plan_h plan = b->plan;
    rs_plan_stats_t *st = &plan->stats;
    uint64_t *descs = calloc(plan->nsessions + 1, sizeof(uint64_t));
    if (descs == NULL)
        return OOM(b);
    tally(plan, plan->segments, plan->segments_len, descs);
    for (size_t i = 0; i < plan->converts_len; i++)
        tally(plan, plan->converts[i].segments, plan->converts[i].nsegments,
              descs);
    for (size_t i = 0; i < plan->full_pulls_len; i++)
        tally(plan, plan->full_pulls[i].segments, plan->full_pulls[i].nsegments,
              descs);
    st->est_seconds = plan_seconds(b, descs);
    free(descs);
    for (size_t i = 0; i < b->cap->copies_len; i++) {
        const rs_pcopy_t *pc = &b->copies[i];
        if (!live(b, pc))
            continue;
        st->copies_planned++;
        st->exact_descriptor_count += pc->nexact;
        st->exact_bytes += pc->exact_bytes;
    }
    st->needed_bytes = st->exact_bytes;
    st->descriptor_savings = st->exact_descriptor_count > st->descriptor_count
        ? st->exact_descriptor_count - st->descriptor_count : 0;
    st->extra_wire_bytes = st->bytes_planned > st->exact_bytes
        ? st->bytes_planned - st->exact_bytes : 0;
    for (size_t i = 0; i < plan->nsessions; i++)
        st->nsessions_used += plan->session_bytes[i] > 0;
    return RS_OK;
}

static int lists_shards(const rs_psrc_t *s)
{
    return s->fallback == NULL && s->tensor != NULL;
}

/* Per session, where its shards start in the list (at[k] .. at[k + 1]),
 * and their total: the shards of every live source, counted. */
static size_t *session_starts(const rs_planner_t *b)
{
    size_t ns = b->plan->nsessions;
    size_t *at = calloc(ns + 2, sizeof(size_t));
    if (at == NULL)
        return NULL;
    for (size_t i = 0; i < b->psrc_len; i++) {
        const rs_src_tensor_t *t = b->psrc[i].tensor;
        if (lists_shards(&b->psrc[i]))
            for (size_t k = 0; k < t->shards_len; k++)
                at[t->shards[k].session + 1]++;
    }
    for (size_t k = 0; k < ns; k++)
        at[k + 1] += at[k];
    return at;
}

/* 1 when each session's addresses are in order (the usual case: sources
 * are listed in the order the trainers published them). */
static int sessions_sorted(const struct rs_plan *plan)
{
    for (size_t i = 1; i < plan->shards_len; i++) {
        const rs_shard_ref_t *a = &plan->shards[i - 1], *c = &plan->shards[i];
        if (a->session == c->session && a->addr > c->addr)
            return 0;
    }
    return 1;
}

/* Lists the shards of every live source, for digest checks downstream,
 * each placed straight into its session's part of the list in listing
 * order (sessions are few): what rs__shard_refs_sort makes of the listing,
 * but for the addresses, which are sorted only in the rare list where some
 * session's are out of order (a stable sort, so equal keys keep their
 * listing order either way). */
static rs_status_t list_shards(rs_planner_t *b)
{
    rs_plan_h plan = b->plan;
    size_t *at = session_starts(b);
    size_t total = at != NULL ? at[plan->nsessions] : 0;
    if (at == NULL || !rs__vec_reserve((void **)&plan->shards,
                                       &plan->shards_cap, total,
                                       sizeof(rs_shard_ref_t))) {
        free(at);
        return OOM(b);
    }
    for (size_t i = 0; i < b->psrc_len; i++) {
        const rs_psrc_t *s = &b->psrc[i];
        if (!lists_shards(s))
            continue;
        for (size_t k = 0; k < s->tensor->shards_len; k++) {
            const rs_src_shard_t *sh = &s->tensor->shards[k];
            rs_shard_ref_t r = {sh->session, sh->addr,
                                (uint64_t)sh->numel * s->tensor->elsize,
                                s->name, NULL};
            if (sh->digest != NULL &&
                (r.digest = rs__arena_strdup(&plan->arena, sh->digest)) ==
                    NULL) {
                free(at);
                return OOM(b);
            }
            plan->shards[at[sh->session]++] = r;
        }
    }
    free(at);
    plan->shards_len = total;
    if (sessions_sorted(plan))
        return RS_OK;
    if (!rs__shard_refs_sort(&plan->shards, plan->shards_len))
        return OOM(b);
    plan->shards_cap = plan->shards_len; /* a sorted copy, sized to fit */
    return RS_OK;
}

rs_status_t rs__planner_assemble(rs_planner_t *b)
{
    long *index = NULL;
    rs_status_t st = add_stages(b, &index);
    if (st == RS_OK)
        st = list_shards(b);
    for (size_t ci = 0; st == RS_OK && ci < b->cap->copies_len; ci++) {
        if (live(b, &b->copies[ci]))
            st = place_copy(b, ci, index);
    }
    free(index);
    if (st == RS_OK)
        st = compute_stats(b);
    if (st == RS_OK && b->quant != NULL)
        st = rs__quant_assemble(b); /* plan_quant_run.c */
    return st;
}
