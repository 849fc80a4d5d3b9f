/* The planner's main pass: sources whose published shape or dtype differs
 * from what the capture declares are refused, then every selected copy is
 * resolved to a box of its source and walked into per-copy segments; a
 * rejected copy sends its whole source to fallback; then the cost model
 * chooses how each copy is read (plan_cost.c). Also the builder's
 * set-up and tear-down. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "plan/box_memo.h"
#include "model/capture_impl.h"
#include "plan/plan_quant.h"
#include "plan/planner.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

static rs_status_t copy_sessions(rs_plan_h plan, rs_sources_h srcs)
{
    plan->nsessions = srcs->sessions_len;
    plan->sessions = rs__arena_alloc(&plan->arena,
                                    (plan->nsessions + 1) * sizeof(char *));
    plan->session_bytes = rs__arena_alloc(&plan->arena,
                                         (plan->nsessions + 1) * sizeof(uint64_t));
    if (plan->sessions == NULL || plan->session_bytes == NULL)
        return RS_ERR_NO_MEMORY;
    for (size_t i = 0; i < plan->nsessions; i++) {
        plan->sessions[i] = rs__arena_strdup(&plan->arena, srcs->sessions[i]);
        if (plan->sessions[i] == NULL)
            return RS_ERR_NO_MEMORY;
    }
    return RS_OK;
}

rs_status_t rs__planner_init(rs__planner_t *b, rs_capture_h cap,
                             rs_sources_h srcs, const rs_plan_params_t *params,
                             rs_diag_t *diag)
{
    memset(b, 0, sizeof(*b));
    b->cap = cap;
    b->srcs = srcs;
    b->params = params;
    b->walk_pair = UINT32_MAX;
    b->last_walked = SIZE_MAX;
    b->diag = diag;
    b->plan = calloc(1, sizeof(*b->plan));
    b->psrc_of_name = calloc(cap->names_len + 1, sizeof(uint32_t));
    b->memo = rs__box_memo_create();
    /* cleared copy by copy as rs__planner_run reaches it: a MoE rank's
     * ten thousand records are a megabyte that calloc would clear apart */
    b->copies = malloc((cap->copies_len + 1) * sizeof(rs__planned_copy_t));
    b->load = calloc(srcs->sessions_len + 1, sizeof(uint64_t));
    b->agg_slot = malloc((srcs->sessions_len + 1) * sizeof(long));
    if (b->plan == NULL || b->psrc_of_name == NULL || b->memo == NULL ||
        b->copies == NULL || b->load == NULL || b->agg_slot == NULL)
        return OOM(b);
    for (size_t k = 0; k <= srcs->sessions_len; k++)
        b->agg_slot[k] = -1;
    rs__arena_init(&b->plan->arena);
    b->plan->capture = cap;
    /* most copies read one run of a source seen once: sized up front */
    if (copy_sessions(b->plan, srcs) != RS_OK ||
        !rs__vec_reserve((void **)&b->tmp.v, &b->tmp.v_cap, cap->copies_len,
                         sizeof(rs_segment_t)) ||
        !rs__vec_reserve((void **)&b->psrc, &b->psrc_cap, cap->names_len,
                         sizeof(rs__planned_source_t)))
        return OOM(b);
    return RS_OK;
}

void rs__planner_free(rs__planner_t *b)
{
    rs_plan_destroy(b->plan);
    free(b->psrc);
    free(b->psrc_of_name);
    free(b->copies);
    free(b->tmp.v);
    free(b->load);
    for (size_t i = 0; i < b->stages_len; i++)
        free(b->stages[i].segs.v);
    free(b->stages);
    free(b->picks);
    free(b->drops);
    free(b->drop_aggs);
    free(b->shard_marks);
    free(b->agg_slot);
    rs__box_memo_destroy(b->memo);
}

rs_plan_h rs__planner_take(rs__planner_t *b)
{
    rs_plan_h plan = b->plan;
    b->plan = NULL;
    return plan;
}

rs_status_t rs__planner_fallback(rs__planner_t *b, uint32_t src,
                                 const char *reason)
{
    rs__planned_source_t *s = &b->psrc[src];
    rs__plan_fallback_t f;
    if (s->fallback != NULL)
        return RS_OK;
    s->fallback = rs__arena_strdup(&b->plan->arena, reason);
    f.src = s->name;
    f.reason = s->fallback;
    if (s->fallback == NULL || !RS_VEC_PUSH(b->plan, fallback, f))
        return OOM(b);
    return RS_OK;
}

static rs_status_t psrc_new(rs__planner_t *b, uint32_t name_id,
                            uint32_t *id_p);

/* The planner's record for a capture source name (by its interned id),
 * created on first use: records keep the order of first use. Inline: every
 * copy asks twice, and only the first time for a source creates. */
static inline rs_status_t psrc_for(rs__planner_t *b, uint32_t name_id,
                                   uint32_t *id_p)
{
    if (b->psrc_of_name[name_id] != 0) {
        *id_p = b->psrc_of_name[name_id] - 1;
        return RS_OK;
    }
    return psrc_new(b, name_id, id_p);
}

/* Room for a derived tensor's shard marks, cleared. */
static int reserve_marks(rs__planner_t *b, const rs__source_tensor_t *t,
                         long *marks_p)
{
    size_t at = b->shard_marks_len, n = t->shards_len;
    if (!rs__vec_reserve((void **)&b->shard_marks, &b->shard_marks_cap,
                         at + n + 1, 1))
        return 0;
    memset(b->shard_marks + at, 0, n);
    b->shard_marks_len = at + n;
    *marks_p = (long)at;
    return 1;
}

static rs_status_t psrc_new(rs__planner_t *b, uint32_t name_id, uint32_t *id_p)
{
    const rs__capture_name_t *n = &b->cap->names[name_id];
    rs__source_tensor_t *t;
    int known = rs__quant_known_tensor(b, name_id, &t);
    if (!known)
        t = rs__sources_find_hashed(b->srcs, n->name, n->hash);
    long marks = -1;
    if ((known == RS_QUANT_KNOWN_DERIVED && t != NULL &&
         !reserve_marks(b, t, &marks)) ||
        !rs__vec_reserve((void **)&b->psrc, &b->psrc_cap, b->psrc_len + 1,
                         sizeof(*b->psrc)))
        return OOM(b);
    /* written in place: a record built on the stack and pushed was copied
     * in wider loads than its fields had just been stored with, a stall
     * per field, a record per source a rank reads */
    rs__planned_source_t *s = &b->psrc[b->psrc_len++];
    memset(s, 0, sizeof(*s));
    s->name = n->name;
    s->tensor = t;
    s->full_pull = -1;
    s->marks = marks;
    b->psrc_of_name[name_id] = (uint32_t)b->psrc_len;
    *id_p = (uint32_t)b->psrc_len - 1;
    return RS_OK;
}

rs_status_t rs__planner_psrc(rs__planner_t *b, uint32_t name_id,
                             uint32_t *id_p)
{
    return psrc_for(b, name_id, id_p);
}

int rs__plan_selected(const rs_plan_params_t *p, const char *param)
{
    if (p->nonly == 0)
        return 1;
    for (size_t i = 0; i < p->nonly; i++) {
        if (fnmatch(p->only[i], param, 0) == 0)
            return 1;
    }
    return 0;
}

static int same_tensor(const rs__capture_source_t *d, const rs__source_tensor_t *t)
{
    if (d->ndim != t->ndim || d->dtype != t->dtype)
        return 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] != t->shape[i])
            return 0;
    }
    return 1;
}

static rs_status_t refuse_mismatch(rs__planner_t *b, uint32_t id,
                                   const rs__capture_source_t *d)
{
    const rs__source_tensor_t *t = b->psrc[id].tensor;
    char want[160], got[160], reason[512];
    snprintf(reason, sizeof(reason), "tensor '%s': capture assumes shape %s "
             "%s, published %s %s", d->name,
             rs__format_dims(want, sizeof(want), d->shape, d->ndim),
             rs_dtype_name(d->dtype),
             rs__format_dims(got, sizeof(got), t->shape, t->ndim),
             rs_dtype_name(t->dtype));
    b->plan->mismatched++;
    return rs__planner_fallback(b, id, reason);
}

/* A declared source read by a selected copy must be published with the
 * declared full shape and dtype: the copies' ops were computed against it,
 * and on another tensor they may still resolve, to the wrong elements.
 * Runs first, so that refused sources lead the fallback list. Derived
 * copies whose names no declaration can have are not looked at
 * (rs__quant_declared_copies), and the quantized copies' sources the
 * expansion found as declared are passed over: a thousand a MoE rank,
 * most of them never read (the publisher path reads the FP8 tensors),
 * whose records and shapes this loop would otherwise read one after
 * another. */
static rs_status_t refuse_mismatches(rs__planner_t *b)
{
    rs_capture_h cap = b->cap;
    size_t n = rs__quant_declared_copies(b);
    for (size_t ci = 0; ci < n; ci++) {
        const rs__capture_copy_t *c = &cap->copies[ci];
        long decl = cap->names[c->src_id].decl;
        uint32_t id;
        if (decl < 0 || (b->params->nonly != 0 &&
                         !rs__plan_selected(b->params, c->param)) ||
            rs__quant_decl_checked(b, ci))
            continue;
        const rs__capture_source_t *d = &cap->sources[decl];
        rs_status_t st = psrc_for(b, c->src_id, &id);
        if (st != RS_OK)
            return st;
        const rs__planned_source_t *s = &b->psrc[id];
        if (s->fallback != NULL || s->tensor == NULL ||
            same_tensor(d, s->tensor))
            continue;
        if ((st = refuse_mismatch(b, id, d)) != RS_OK)
            return st;
    }
    return RS_OK;
}

/* Capture-flagged sources are fallback up front; with a selection, only
 * those that a selected copy reads. */
static rs_status_t flag_unsupported(rs__planner_t *b)
{
    rs_capture_h cap = b->cap;
    for (size_t i = 0; i < cap->unsupported_len; i++) {
        const rs__capture_unsupported_t *u = &cap->unsupported[i];
        int wanted = b->params->nonly == 0;
        for (size_t c = 0; !wanted && c < cap->copies_len; c++)
            wanted = cap->copies[c].src_id == u->src_id &&
                     rs__plan_selected(b->params, cap->copies[c].param);
        if (!wanted)
            continue;
        uint32_t id;
        rs_status_t st = psrc_for(b, u->src_id, &id);
        if (st == RS_OK)
            st = rs__planner_fallback(b, id, u->reason);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

/* Highest element the destination view touches must stay inside the
 * param, and the view must not write any element twice (sufficient test:
 * sorted by stride, each dim steps past everything the inner dims span).
 * An empty view writes nothing but still names a place in the param: it
 * must start inside it or at its end, since the executor forms its
 * destination pointer from dest_offset. */
static const char *check_dest(const rs__capture_copy_t *c, const rs__capture_param_t *p,
                              rs__dest_fact_t *fact)
{
    int64_t numel = 1, last = c->dest_offset, span[RS_MAX_DIMS];
    int order[RS_MAX_DIMS], n = 0;
    for (int i = 0; i < c->ndim; i++)
        numel *= c->dest_shape[i]; /* checked when the copy was added */
    if (numel == 0)
        return c->dest_offset > p->numel
                   ? "destination region leaves its parameter"
                   : NULL;
    for (int i = 0; i < c->ndim; i++) {
        if (c->dest_shape[i] == 1)
            continue;
        if (!rs__mul_i64(c->dest_shape[i] - 1, c->dest_stride[i], &span[i]) ||
            !rs__add_i64(last, span[i], &last))
            return "destination region overflows";
        order[n++] = i;
    }
    if (last >= p->numel)
        return "destination region leaves its parameter";
    for (int a = 1; a < n; a++) {
        int t = order[a], k = a;
        for (; k > 0 && c->dest_stride[order[k - 1]] > c->dest_stride[t]; k--)
            order[k] = order[k - 1];
        order[k] = t;
    }
    int64_t reach = 0; /* elements spanned by the dims so far, minus one */
    for (int a = 0; a < n; a++) {
        if (c->dest_stride[order[a]] <= reach)
            return "destination view writes some elements twice";
        reach += span[order[a]];
    }
    if (fact != NULL) { /* the shape and strides hold for any offset */
        fact->known = 1;
        fact->span = last - c->dest_offset;
    }
    return NULL;
}

const char *rs__plan_check_dest(const rs__capture_copy_t *c,
                                const rs__capture_param_t *p)
{
    return check_dest(c, p, NULL);
}

const char *rs__plan_check_dest_span(const rs__capture_copy_t *c,
                                     const rs__capture_param_t *p,
                                     int *known_p, int64_t *span_p)
{
    rs__dest_fact_t fact = {0, 0, 0, 0, 0};
    const char *err = check_dest(c, p, &fact);
    *known_p = err == NULL && fact.known;
    *span_p = fact.span;
    return err;
}

/* check_dest for a geometry checked before: only the offset can differ,
 * so only the bounds are left (in check_dest's order of complaints). */
static const char *check_dest_known(const rs__capture_copy_t *c,
                                    const rs__capture_param_t *p,
                                    const rs__dest_fact_t *fact)
{
    int64_t last;
    if (!rs__add_i64(c->dest_offset, fact->span, &last))
        return "destination region overflows";
    return last >= p->numel ? "destination region leaves its parameter"
                            : NULL;
}

/* The copy's box: remembered for its geometry, else resolved (and
 * remembered when its strides are the capture's, which outlive the build). */
static rs_status_t geometry_box(rs__planner_t *b, const rs__capture_copy_t *c,
                                const rs__planned_source_t *s, const int64_t *dest_stride,
                                const rs__box_t **box_p, rs__dest_fact_t **fact_p,
                                size_t *bad_op, char *why, size_t whylen)
{
    rs__geom_key_t key = {c->geom, s->tensor->ndim, s->tensor->shape};
    int memo = dest_stride == c->dest_stride;
    uint64_t hash = 0;
    const rs__box_t *box =
        memo ? rs__box_memo_find(b->memo, &key, &hash, fact_p) : NULL;
    if (box != NULL) {
        *box_p = box;
        return RS_OK;
    }
    rs_status_t st = rs__geom_resolve(s->tensor->ndim, s->tensor->shape, c->ops,
                                     c->nops, c->ndim, c->dest_shape,
                                     dest_stride, &b->box, bad_op, why, whylen);
    /* a failed put costs a later copy a resolve */
    *fact_p = st == RS_OK && memo
                  ? rs__box_memo_put(b->memo, &key, hash, &b->box) : NULL;
    *box_p = &b->box;
    return st;
}

/* Resolves the copy's geometry; on rejection the source goes to fallback.
 * Kept out of line: its message buffers give it a large frame and a stack
 * guard, which resolve_copy's common case would otherwise pay per copy. */
__attribute__((noinline))
static rs_status_t resolve_general(rs__planner_t *b, size_t ci, rs__planned_source_t *s,
                                   const int64_t *dest_stride,
                                   const rs__box_t **box, int *ok)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    const rs__capture_param_t *p = &b->cap->params[b->copies[ci].param];
    char why[512], reason[768];
    size_t bad_op = c->nops;
    rs__dest_fact_t *fact = NULL;
    rs_status_t st = geometry_box(b, c, s, dest_stride, box, &fact, &bad_op,
                                  why, sizeof(why));
    b->walk_fact = *box != &b->box ? fact : NULL;
    const char *dest_err = st != RS_OK ? NULL
                           : fact != NULL && fact->known
                               ? check_dest_known(c, p, fact)
                               : check_dest(c, p, fact);
    *ok = st == RS_OK && dest_err == NULL;
    if (*ok)
        return RS_OK;
    if (dest_err != NULL)
        snprintf(reason, sizeof(reason), "copy %zu into '%s': %s", ci,
                 c->param, dest_err);
    else if (bad_op < c->nops)
        snprintf(reason, sizeof(reason), "copy %zu into '%s': op %zu (%s): %s",
                 ci, c->param, bad_op, rs_op_name(c->ops[bad_op].kind), why);
    else
        snprintf(reason, sizeof(reason), "copy %zu into '%s': %s", ci,
                 c->param, why);
    return rs__planner_fallback(b, b->copies[ci].src, reason);
}

/* The copy's box. Most copies repeat a recent geometry whose destination
 * already checked out (a hit on the memo's recent slots with its fact
 * known), and for them only the bounds are left: resolve_general's
 * check_dest_known, inline, with no call, so this path needs no frame.
 * Anything else (a geometry further back, a miss, a convert's staging
 * strides, an unknown fact, a copy out of bounds) takes the general path,
 * which finds the same answer or refuses with its message. */
static rs_status_t resolve_copy(rs__planner_t *b, size_t ci, rs__planned_source_t *s,
                                const int64_t *dest_stride,
                                const rs__box_t **box, int *ok)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    if (dest_stride == c->dest_stride) {
        rs__memo_entry_t *e = rs__box_memo_recent(b->memo, c->geom,
                                                 s->tensor->ndim,
                                                 s->tensor->shape);
        int64_t last;
        if (e != NULL && e->dest.known &&
            rs__add_i64(c->dest_offset, e->dest.span, &last) &&
            last < b->cap->params[b->copies[ci].param].numel) {
            b->walk_fact = &e->dest;
            *box = e->box;
            *ok = 1;
            return RS_OK;
        }
    }
    return resolve_general(b, ci, s, dest_stride, box, ok);
}

/* Checks the copy against its parameter; an inconsistency here is bad
 * input, not an unsupported source. */
static rs_status_t bind_param(rs__planner_t *b, size_t ci)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    uint32_t p = c->param_id; /* else declared after the copy was added */
    if (p == UINT32_MAX && !rs__strmap_get(&b->cap->param_index, c->param, &p))
        return rs__diag_set(b->diag, RS_ERR_INPUT, "copy %zu: param '%s' is "
                            "not declared", ci, c->param);
    if (b->cap->params[p].dtype != c->dest_dtype)
        return rs__diag_set(b->diag, RS_ERR_INPUT, "copy %zu: dest_dtype %s "
                            "differs from param '%s' dtype %s", ci,
                            rs_dtype_name(c->dest_dtype), c->param,
                            rs_dtype_name(b->cap->params[p].dtype));
    b->copies[ci].param = p;
    return RS_OK;
}

static rs_status_t plan_copy(rs__planner_t *b, size_t ci)
{
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    rs__planned_copy_t *pc = &b->copies[ci];
    const rs__box_t *box;
    int64_t staging[RS_MAX_DIMS];
    int ok;
    rs_status_t st;

    if ((st = bind_param(b, ci)) != RS_OK || (st = psrc_for(b, c->src_id, &pc->src)))
        return st;
    rs__planned_source_t *s = &b->psrc[pc->src];
    if (s->fallback != NULL)
        return RS_OK;
    if (s->tensor == NULL)
        return rs__planner_fallback(b, pc->src, "not published by any shard "
                                    "table");
    s->read = 1;
    int convert = s->tensor->dtype != c->dest_dtype;
    if ((st = resolve_copy(b, ci, s, c->dest_stride, &box, &ok)) != RS_OK || !ok)
        return st;
    if (convert) { /* same geometry, landing in row-major staging */
        if (!rs__row_major(c->dest_shape, c->ndim, staging))
            return rs__planner_fallback(b, pc->src, "destination strides "
                                        "overflow int64");
        if ((st = resolve_copy(b, ci, s, staging, &box, &ok)) != RS_OK || !ok)
            return st;
    }
    pc->seg_begin = b->tmp.v_len;
    pc->pick_begin = b->picks_len;
    rs__walk_tally_t tally;
    /* A copy over the cap keeps only its sums per session and its ends
     * (what the cost model reads of it); a convert is always read by its
     * runs, and keeps them. */
    size_t keep = convert || b->keep_all
                      ? SIZE_MAX : (size_t)b->params->max_segments_per_copy;
    st = rs__planner_walk_copy(b, s, box, pc->param,
                               convert ? 0 : c->dest_offset, keep, NULL,
                               &b->tmp, &pc->missing, &tally);
    if (st == RS_ERR_UNSUPPORTED)
        return rs__planner_fallback(b, pc->src, "shard layout too fragmented "
                                    "to index");
    if (st != RS_OK)
        return rs__diag_set(b->diag, st, "out of memory");
    pc->seg_end = b->tmp.v_len;
    pc->kind = convert ? RS_PLANNED_COPY_CONVERT : RS_PLANNED_COPY_EXACT;
    pc->pair = tally.paired ? b->walk_pair + 1 : 0;
    b->last_walked = ci;
    b->last_first = tally.first;
    pc->nexact = tally.nsegs;
    pc->exact_bytes = tally.bytes;
    pc->dropped = tally.dropped;
    pc->drop = b->drops_len;
    if (pc->dropped && !RS_VEC_PUSH(b, drops, tally.drop))
        return OOM(b);
    b->ndropped += (size_t)pc->dropped;
    if (!pc->dropped)
        b->picks_len = pc->pick_begin; /* choices only a re-walk needs */
    if (!convert) {
        s->exact_segments += tally.nsegs;
        if (tally.nsegs > (uint64_t)b->params->max_segments_per_copy)
            s->candidate = 1;
    }
    return RS_OK;
}

/* A dropped copy that the cost model reads by its exact runs after all
 * (no staged way, or the all-exact plan kept) walks again, repeating its
 * shard choices: the same runs as if they had been kept the first time. */
static rs_status_t rewalk(rs__planner_t *b, size_t ci)
{
    rs__planned_copy_t *pc = &b->copies[ci];
    rs__planned_source_t *s = &b->psrc[pc->src];
    const rs__capture_copy_t *c = &b->cap->copies[ci];
    rs__walk_tally_t tally;
    uint64_t missing = 0;
    const rs__box_t *box;
    int ok;
    rs_status_t st = resolve_copy(b, ci, s, c->dest_stride, &box, &ok);
    if (st != RS_OK || !ok) /* it resolved the first time; else in fallback */
        return st;
    pc->seg_begin = b->tmp.v_len;
    if (pc->pair != 0) { /* the same shard, taken the same way */
        b->walk_pair = pc->pair - 1;
        b->walk_pair_session = s->tensor->shards[pc->pair - 1].session;
    }
    st = rs__planner_walk_copy(b, s, box, pc->param, c->dest_offset,
                               SIZE_MAX, b->picks + pc->pick_begin, &b->tmp,
                               &missing, &tally);
    b->walk_pair = UINT32_MAX;
    if (st != RS_OK)
        return rs__diag_set(b->diag, st, "out of memory");
    pc->seg_end = b->tmp.v_len;
    pc->dropped = 0;
    b->nrewalked++;
    return RS_OK;
}

static rs_status_t rewalk_dropped(rs__planner_t *b)
{
    for (size_t ci = 0; ci < b->cap->copies_len; ci++) {
        const rs__planned_copy_t *pc = &b->copies[ci];
        if (!pc->dropped || pc->kind != RS_PLANNED_COPY_EXACT ||
            b->psrc[pc->src].fallback != NULL || pc->stage >= 0)
            continue;
        rs_status_t st = rewalk(b, ci);
        if (st != RS_OK)
            return st;
    }
    return RS_OK;
}

rs_status_t rs__planner_run(rs__planner_t *b)
{
    /* copied, not a compound literal: for a record this size the compiler
     * clears with a string store, slower than the few vector moves */
    static const rs__planned_copy_t clear;
    rs_status_t st = refuse_mismatches(b);
    if (st == RS_OK)
        st = flag_unsupported(b);
    for (size_t ci = 0; st == RS_OK && ci < b->cap->copies_len; ci++) {
        b->copies[ci] = clear;
        /* quantized copies: plan_quant.c; both tests inline for the
         * common plan, without quantized copies or a selection */
        int role = b->quant == NULL ? RS_QROLE_PLAIN : rs__quant_role(b, ci);
        if (b->quant != NULL)
            rs__quant_ready_walk(b, ci);
        if (role == RS_QROLE_DERIVED ||
            (role == RS_QROLE_PLAIN &&
             (b->params->nonly == 0 ||
              rs__plan_selected(b->params, b->cap->copies[ci].param)))) {
            b->plan->stats.copies_selected += role == RS_QROLE_PLAIN;
            if (role == RS_QROLE_DERIVED)
                rs__quant_scale_pair(b, ci);
            st = plan_copy(b, ci);
            b->walk_pair = UINT32_MAX;
        }
    }
    if (st == RS_OK && b->quant != NULL)
        st = rs__quant_plan(b);
    if (st == RS_OK)
        st = rs__planner_choose(b);
    if (st == RS_OK)
        st = rewalk_dropped(b);
    if (st == RS_OK)
        st = rs__planner_assemble(b);
    return st;
}
