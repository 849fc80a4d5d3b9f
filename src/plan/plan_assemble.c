/* Assembly: per-copy segments become the plan's exact segments (merged
 * across copies where runs continue each other), converts, and the staged
 * reads the cost model kept with their copy lists; copies of fallback
 * sources are dropped; then the stats, the model's estimate among them. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "model/capture_impl.h"
#include "plan/plan_quant.h"
#include "plan/planner.h"
#include "plan/shard_sort.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

/* What the one pass over the copies carries besides the plan: descriptors
 * per session for the model's estimate, and the copies read through a
 * stage, placed once the pass knows how many each stage has. */
typedef struct asm_pass {
    uint64_t *descs;
    RS_VEC(size_t, staged);
} asm_pass_t;

/* Counts n segments, as the plan holds them, in the plan's totals. */
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

static rs_status_t add_convert(rs__planner_t *b, size_t ci, const rs__planned_copy_t *pc,
                               uint64_t *descs)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    const rs__planned_source_t *s = &b->psrc[pc->src];
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
    tally(b->plan, cv.segments, cv.nsegments, descs);
    return RS_OK;
}

static rs_status_t add_uncovered(rs__planner_t *b, size_t ci,
                                 const rs__planned_copy_t *pc)
{
    rs_uncovered_t u = {ci, b->psrc[pc->src].name, b->cap->copies[ci].param,
                        pc->missing};
    return RS_VEC_PUSH(b->plan, uncovered, u) ? RS_OK : OOM(b);
}

/* One staged read of the plan from a stage the cost model kept, with room
 * for the copies that read it. */
static rs_status_t add_staged(rs__planner_t *b, const rs__planned_stage_t *ps,
                              size_t ncopies)
{
    rs_plan_h plan = b->plan;
    const rs__planned_source_t *s = &b->psrc[ps->src];
    const rs__source_tensor_t *t = s->tensor;
    size_t dims = (size_t)t->ndim * sizeof(int64_t);
    rs_staged_read_t fp;
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
        fp.segments == NULL || !RS_VEC_PUSH(plan, staged_reads, fp))
        return OOM(b);
    return RS_OK;
}

/* The stages that some copy reads become the plan's staged reads, in the
 * order the planner made them, each listing its copies in capture order. */
static rs_status_t add_stages(rs__planner_t *b, const asm_pass_t *p)
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
    for (size_t i = 0; i < p->staged_len; i++)
        counts[b->copies[p->staged[i]].stage]++;
    for (size_t k = 0; k < n && st == RS_OK; k++) {
        index[k] = counts[k] > 0 ? (long)b->plan->staged_reads_len : -1;
        if (counts[k] > 0)
            st = add_staged(b, &b->stages[k], counts[k]);
    }
    for (size_t i = 0; st == RS_OK && i < p->staged_len; i++) {
        rs_staged_read_t *f =
            &b->plan->staged_reads[index[b->copies[p->staged[i]].stage]];
        ((size_t *)f->copies)[f->ncopies++] = p->staged[i];
    }
    free(counts);
    free(index);
    return st;
}

/* A source whose copy needs more runs than the cap and still reads them
 * exactly (nothing else can read it) is listed once as unbounded. */
static rs_status_t note_unbounded(rs__planner_t *b, const rs__planned_copy_t *pc)
{
    rs__planned_source_t *s = &b->psrc[pc->src];
    if (pc->nexact <= (uint64_t)b->params->max_segments_per_copy ||
        s->listed_unbounded)
        return RS_OK;
    s->listed_unbounded = 1;
    return RS_VEC_PUSH(b->plan, unbounded, s->name) ? RS_OK : OOM(b);
}

/* What a copy needs besides its exact runs: its uncovered count, a
 * convert, a stage, a place in the unbounded list. *done_p is set when
 * that is all of it (a convert or a staged copy). */
static rs_status_t place_special(rs__planner_t *b, size_t ci, asm_pass_t *p,
                                 int *done_p)
{
    const rs__planned_copy_t *pc = &b->copies[ci];
    rs_status_t st = RS_OK;

    *done_p = 1;
    if (pc->missing > 0 && (st = add_uncovered(b, ci, pc)) != RS_OK)
        return st;
    if (pc->kind == RS_PLANNED_COPY_CONVERT)
        return add_convert(b, ci, pc, p->descs);
    if (pc->stage >= 0)
        return RS_VEC_PUSH(p, staged, ci) ? RS_OK : OOM(b);
    *done_p = 0;
    return note_unbounded(b, pc);
}

/* The plan's exact segments while the pass appends to them, held in
 * locals: a model plan has about one segment per copy, so the pass's
 * cost is its per-copy work, and loads through the planner would be
 * repeated after every store. */
typedef struct seg_out {
    rs_segment_t *v;
    size_t len, cap;
    uint64_t bytes, pushed; /* totals of what was appended */
} seg_out_t;

/* Room for n more segments after len (the pass's seg_out_t stays in
 * registers: it is not handed to calls). */
static int seg_room(rs_plan_h plan, size_t len, size_t n)
{
    plan->segments_len = len;
    return rs__vec_reserve((void **)&plan->segments, &plan->segments_cap,
                           len + n, sizeof(rs_segment_t));
}

/* Appends a copy's segments, each merged into the last one when it
 * continues it, counting bytes and descriptors per session as they land
 * (a merged run is one descriptor). */
static inline void seg_append(seg_out_t *o, const rs_segment_t *s, size_t n,
                              uint64_t *sbytes, uint64_t *descs)
{
    rs_segment_t *last = o->len > 0 ? &o->v[o->len - 1] : NULL;
    for (const rs_segment_t *end = s + n; s < end; s++) {
        sbytes[s->session] += s->nbytes;
        o->bytes += s->nbytes;
        if (last != NULL && last->session == s->session &&
            last->param == s->param &&
            last->src_addr + last->nbytes == s->src_addr &&
            last->dst_byte + last->nbytes == s->dst_byte) {
            last->nbytes += s->nbytes;
            continue;
        }
        last = &o->v[o->len++];
        *last = *s;
        descs[s->session]++;
        o->pushed++;
    }
}

/* The sums of the live copies, kept in locals by the pass. */
typedef struct copy_sums {
    size_t planned;
    uint64_t nexact, exact_bytes;
} copy_sums_t;

static void add_sums(rs__planner_t *b, const copy_sums_t *c,
                     const seg_out_t *o)
{
    rs_plan_h plan = b->plan;
    plan->segments_len = o->len;
    plan->stats.copies_planned += c->planned;
    plan->stats.exact_descriptor_count += c->nexact;
    plan->stats.exact_bytes += c->exact_bytes;
    plan->stats.bytes_planned += o->bytes;
    plan->stats.descriptor_count += o->pushed;
}

/* One pass over the copies: each live one is placed and counted (copies
 * of fallback sources are dropped). The usual copy, exact, covered and
 * within the cap, takes no call. */
static rs_status_t place_copies(rs__planner_t *b, asm_pass_t *p)
{
    rs_plan_h plan = b->plan;
    const rs__planned_source_t *psrc = b->psrc;
    const rs__planned_copy_t *copies = b->copies;
    const rs_segment_t *tmp = b->tmp.v;
    uint64_t *sbytes = plan->session_bytes, *descs = p->descs;
    uint64_t cap_runs = (uint64_t)b->params->max_segments_per_copy;
    size_t ncopies = b->cap->copies_len;
    seg_out_t o = {plan->segments, plan->segments_len, plan->segments_cap,
                   0, 0};
    copy_sums_t c = {0, 0, 0};
    rs_status_t st = RS_OK;

    for (size_t ci = 0; ci < ncopies; ci++) {
        const rs__planned_copy_t *pc = &copies[ci];
        int done;
        if (pc->kind == RS_PLANNED_COPY_SKIP || psrc[pc->src].fallback != NULL)
            continue;
        c.planned++;
        c.nexact += pc->nexact;
        c.exact_bytes += pc->exact_bytes;
        if (pc->missing > 0 || pc->kind != RS_PLANNED_COPY_EXACT ||
            pc->stage >= 0 || pc->nexact > cap_runs) {
            if ((st = place_special(b, ci, p, &done)) != RS_OK)
                break;
            if (done)
                continue;
        }
        size_t n = pc->seg_end - pc->seg_begin;
        if (n == 0)
            continue; /* (tmp may be unallocated) */
        if (o.len + n > o.cap || o.v == NULL) {
            /* room for n > 0 is an array (said for the analyzer) */
            if (!seg_room(plan, o.len, n) || plan->segments == NULL) {
                st = OOM(b);
                break;
            }
            o.v = plan->segments;
            o.cap = plan->segments_cap;
        }
        seg_append(&o, tmp + pc->seg_begin, n, sbytes, descs);
    }
    add_sums(b, &c, &o);
    return st;
}

/* The model's time of the plan as built (rs__cost_plan_seconds). */
static double plan_seconds(const rs__planner_t *b, const uint64_t *descs)
{
    return rs__cost_plan_seconds(b->params, b->plan->session_bytes, descs,
                                 b->plan->nsessions);
}

/* The stats the pass did not count: the staged reads' segments, the
 * estimate, and what follows from the sums. */
static void finish_stats(rs__planner_t *b, uint64_t *descs)
{
    rs_plan_h plan = b->plan;
    rs_plan_stats_t *st = &plan->stats;
    for (size_t i = 0; i < plan->staged_reads_len; i++)
        tally(plan, plan->staged_reads[i].segments, plan->staged_reads[i].nsegments,
              descs);
    st->est_seconds = plan_seconds(b, descs);
    st->needed_bytes = st->exact_bytes;
    st->descriptor_savings = st->exact_descriptor_count > st->descriptor_count
        ? st->exact_descriptor_count - st->descriptor_count : 0;
    st->extra_wire_bytes = st->bytes_planned > st->exact_bytes
        ? st->bytes_planned - st->exact_bytes : 0;
    for (size_t i = 0; i < plan->nsessions; i++)
        st->nsessions_used += plan->session_bytes[i] > 0;
}

static int lists_shards(const rs__planned_source_t *s)
{
    return s->fallback == NULL && s->tensor != NULL && s->read;
}

/* The first shard at or after k of a listed source that the plan lists
 * (n when none): every shard, or for a tensor derived from a quantized
 * copy's source only those some walk took (a MoE rank reads one of the
 * eight tensor-parallel shards of each FP8 tensor and its scales, and
 * verification checks only what is read). Without marks that is k
 * itself, else the next marked shard, found a vector at a time: the
 * walks of a replicated tensor mark one or two of its hundred-odd
 * shards. */
static size_t next_listed(const unsigned char *marks, size_t k, size_t n)
{
    if (marks == NULL || k >= n)
        return k;
    const unsigned char *m = memchr(marks + k, 1, n - k);
    return m == NULL ? n : (size_t)(m - marks);
}

/* Per session, where its shards start in the list (at[k] .. at[k + 1]),
 * and their total: the shards of every live source, counted. (Sources
 * are about one per copy, so the loops keep what they read in locals: a
 * store into at[] could otherwise alias the tensor's fields.) */
static size_t *session_starts(const rs__planner_t *b)
{
    size_t ns = b->plan->nsessions, npsrc = b->psrc_len;
    const rs__planned_source_t *psrc = b->psrc;
    size_t *at = calloc(ns + 2, sizeof(size_t));
    if (at == NULL)
        return NULL;
    for (size_t i = 0; i < npsrc; i++) {
        if (!lists_shards(&psrc[i]))
            continue;
        const rs__source_shard_t *sh = psrc[i].tensor->shards;
        size_t n = psrc[i].tensor->shards_len;
        if (psrc[i].marks < 0) { /* every shard */
            for (size_t k = 0; k < n; k++)
                at[sh[k].session + 1]++;
            continue;
        }
        if (psrc[i].nmarked <= 1) { /* known without reading the tensor */
            at[psrc[i].mark_session + 1] += psrc[i].nmarked;
            continue;
        }
        /* an unlisted shard is not read */
        const unsigned char *marks = b->shard_marks + psrc[i].marks;
        for (size_t k = next_listed(marks, 0, n); k < n;
             k = next_listed(marks, k + 1, n))
            at[sh[k].session + 1]++;
    }
    for (size_t k = 0; k < ns; k++)
        at[k + 1] += at[k];
    return at;
}

/* One shard into its session's part of the list (place_shards). */
static inline int place_one(rs_shard_ref_t *out, const rs__source_shard_t *sh,
                            uint64_t elsize, const char *name, size_t *at,
                            uint64_t *last, unsigned char *unsorted)
{
    uint32_t k = sh->session;
    rs_shard_ref_t *r = &out[at[k]++];
    unsorted[k] |= sh->addr < last[k];
    last[k] = sh->addr;
    r->session = k;
    r->addr = sh->addr;
    r->nbytes = (uint64_t)sh->numel * elsize;
    r->tensor = name;
    r->digest = sh->digest;
    return sh->digest != NULL;
}

/* Places one live source's shards into their sessions' parts of the list,
 * their digests still the table's (own_digests copies them); marks
 * unsorted[k] when session k's addresses go down (last[] holds each
 * session's last address so far); returns 1 when a shard has a digest.
 * No call in the loop: sources are about one per copy. */
static int place_shards(rs_shard_ref_t *out, const rs__planned_source_t *s,
                        const unsigned char *marks, size_t *at,
                        uint64_t *last, unsigned char *unsorted)
{
    const rs__source_shard_t *shards = s->tensor->shards;
    size_t n = s->tensor->shards_len;
    uint64_t elsize = s->tensor->elsize;
    const char *name = s->name;
    int digests = 0;
    if (marks == NULL) { /* every shard */
        for (size_t i = 0; i < n; i++)
            digests |= place_one(out, &shards[i], elsize, name, at, last,
                                 unsorted);
        return digests;
    }
    if (s->nmarked == 1) /* the one its walks marked, no search */
        return place_one(out, &shards[s->mark_shard], elsize, name, at, last,
                         unsorted);
    for (size_t i = next_listed(marks, 0, n); i < n;
         i = next_listed(marks, i + 1, n))
        digests |= place_one(out, &shards[i], elsize, name, at, last,
                             unsorted);
    return digests;
}

/* The listed digests become the plan's own copies. */
static rs_status_t own_digests(rs__planner_t *b)
{
    rs_plan_h plan = b->plan;
    for (size_t i = 0; i < plan->shards_len; i++) {
        rs_shard_ref_t *r = &plan->shards[i];
        if (r->digest != NULL &&
            (r->digest = rs__arena_strdup(&plan->arena, r->digest)) == NULL)
            return OOM(b);
    }
    return RS_OK;
}

/* Lists the shards of every live source, for digest checks downstream,
 * each placed straight into its session's part of the list in listing
 * order (sessions are few): what a stable sort by (session, addr) makes
 * of the listing, but for the addresses, which are sorted only in the
 * parts where some of a session's go down. */
static rs_status_t list_shards(rs__planner_t *b)
{
    rs_plan_h plan = b->plan;
    size_t ns = plan->nsessions;
    size_t *at = session_starts(b);
    uint64_t *last = calloc(ns + 1, sizeof(uint64_t));
    unsigned char *unsorted = calloc(ns + 1, 1);
    size_t total = at != NULL ? at[ns] : 0;
    int digests = 0, ok;
    if (at == NULL || last == NULL || unsorted == NULL ||
        !rs__vec_reserve((void **)&plan->shards, &plan->shards_cap, total,
                         sizeof(rs_shard_ref_t))) {
        free(at);
        free(last);
        free(unsorted);
        return OOM(b);
    }
    for (size_t i = 0; i < b->psrc_len; i++) {
        const rs__planned_source_t *s = &b->psrc[i];
        if (lists_shards(s))
            digests |= place_shards(plan->shards, s,
                                    s->marks >= 0 ? b->shard_marks + s->marks
                                                  : NULL,
                                    at, last, unsorted);
    }
    plan->shards_len = total;
    /* at[k] is now the end of session k's part */
    ok = rs__shard_refs_sort_parts(plan->shards, at, ns, unsorted);
    free(at);
    free(last);
    free(unsorted);
    if (!ok)
        return OOM(b);
    return digests ? own_digests(b) : RS_OK;
}

/* Assembly in one pass over the copies and one over the sources: the
 * totals are counted as segments land, so nothing walks the plan again
 * but its staged reads. */
rs_status_t rs__planner_assemble(rs__planner_t *b)
{
    asm_pass_t p;
    rs_status_t st;
    memset(&p, 0, sizeof(p));
    p.descs = calloc(b->plan->nsessions + 1, sizeof(uint64_t));
    if (p.descs == NULL)
        return OOM(b);
    st = list_shards(b);
    if (st == RS_OK)
        st = place_copies(b, &p);
    if (st == RS_OK)
        st = add_stages(b, &p);
    if (st == RS_OK)
        finish_stats(b, p.descs);
    if (st == RS_OK && b->quant != NULL)
        st = rs__quant_assemble(b, p.descs); /* plan_quant_run.c */
    free(p.descs);
    free(p.staged);
    return st;
}
