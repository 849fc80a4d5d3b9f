/* The planner's part of quantized copies once the working capture is
 * built: refused copies send their source to fallback, the receiver path
 * reads the block-rounded box of its source into staging (one walk, as a
 * staged box is read), and assembly turns each quantized copy into its
 * rs_quantized_t record and counts the receiver boxes in the stats: on
 * that path the box is what the copy needs. */
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "plan/plan_quant.h"
#include "model/sources_impl.h"

#define OOM(b) rs__diag_set((b)->diag, RS_ERR_NO_MEMORY, "out of memory")

/* The last few block-rounded boxes resolved (rs__stage_plain_box) and
 * what each was resolved from: a MoE rank's experts repeat a few source
 * shapes and boxes (gate, up and down projections in turn), and
 * resolving each one again (a view replayed through a narrow per dim)
 * was a tenth of planning their receiver path. */
#define RS_PLAIN_BOX_MEMO 4

typedef struct plain_box_entry {
    int ndim; /* 0: empty */
    int64_t shape[RS_MAX_DIMS], lo[RS_MAX_DIMS], extent[RS_MAX_DIMS];
    rs__box_t box;
} plain_box_entry_t;

typedef struct plain_box_memo {
    plain_box_entry_t e[RS_PLAIN_BOX_MEMO];
    unsigned next; /* the entry a miss replaces */
} plain_box_memo_t;

/* The plain box [lo, lo + extent) of tensor t, from the memo when it
 * holds the same; NULL when it does not resolve. */
static const rs__box_t *plain_box(plain_box_memo_t *memo,
                                  const rs__source_tensor_t *t,
                                  const int64_t *lo, const int64_t *extent)
{
    int n = t->ndim;
    for (int k = 0; n > 0 && k < RS_PLAIN_BOX_MEMO; k++) {
        const plain_box_entry_t *m = &memo->e[k];
        if (m->ndim == n && rs__quant_same_dims(m->shape, t->shape, n) &&
            rs__quant_same_dims(m->lo, lo, n) &&
            rs__quant_same_dims(m->extent, extent, n))
            return &m->box;
    }
    plain_box_entry_t *m = &memo->e[memo->next++ % RS_PLAIN_BOX_MEMO];
    m->ndim = 0;
    if (!rs__stage_plain_box(t, lo, extent, &m->box))
        return NULL;
    size_t dims = (size_t)n * sizeof(int64_t);
    m->ndim = n;
    memcpy(m->shape, t->shape, dims);
    memcpy(m->lo, lo, dims);
    memcpy(m->extent, extent, dims);
    return &m->box;
}

/* Walks the receiver path's box of its source. */
static rs_status_t walk_box(rs__planner_t *b, plain_box_memo_t *memo,
                            rs__planned_quant_t *pq, uint32_t id)
{
    rs__planned_source_t *s = &b->psrc[id];
    if (s->fallback != NULL)
        return RS_OK;
    if (s->tensor == NULL)
        return rs__planner_fallback(b, id, "not published by any shard table");
    s->read = 1;
    const rs__box_t *box = plain_box(memo, s->tensor, pq->bl.lo, pq->bl.box);
    if (box == NULL)
        return rs__planner_fallback(b, id, "the block-rounded box of a "
                                    "quantized copy does not resolve");
    rs__segment_vec_t *segs = &b->quant->segs;
    size_t at = segs->v_len;
    rs_status_t st = rs__planner_walk(b, s, box, UINT32_MAX, 0, segs,
                                      &pq->missing);
    if (st != RS_OK)
        segs->v_len = at; /* none of a box that is not read */
    pq->seg_at = at;
    pq->seg_n = segs->v_len - at;
    if (st == RS_ERR_UNSUPPORTED)
        return rs__planner_fallback(b, id, "shard layout too fragmented to "
                                    "index");
    if (st != RS_OK)
        return rs__diag_set(b->diag, st, "out of memory");
    pq->src_dtype = s->tensor->dtype;
    return RS_OK;
}

/* The selected quantized copy after pq (NULL: the first); NULL past the
 * last. */
static rs__planned_quant_t *next_selected(rs__quant_expansion_t *qx, const rs__planned_quant_t *pq)
{
    size_t i = pq == NULL ? 0 : (size_t)(pq - qx->q) + 1;
    while (i < qx->nq && !qx->q[i].selected)
        i++;
    return i < qx->nq ? &qx->q[i] : NULL;
}

/* How many records ahead the passes below ready the one they will read,
 * and how many ahead the data a record points to (its lines have landed
 * by then, so reading the pointers costs no wait). */
#define RS_QUANT_RECORD_AHEAD 8
#define RS_QUANT_POINTED_AHEAD 4

/* The record k after pq, or NULL past the last. */
static const rs__planned_quant_t *record_after(const rs__quant_expansion_t *qx,
                                               const rs__planned_quant_t *pq,
                                               size_t k)
{
    size_t i = (size_t)(pq - qx->q) + k;
    return i < qx->nq ? &qx->q[i] : NULL;
}

/* Prefetches the lines of record i + RS_QUANT_RECORD_AHEAD, addresses
 * only (no load of the record itself). The records were written by the
 * expansion long before; a MoE rank with the experts quantized on the
 * receiver has ten thousand of them, and each pass took their misses one
 * after another. Only a hint. */
static void ready_record(const rs__quant_expansion_t *qx,
                         const rs__planned_quant_t *pq)
{
    const rs__planned_quant_t *r = record_after(qx, pq, RS_QUANT_RECORD_AHEAD);
    if (r == NULL)
        return;
    for (size_t at = 0; at < sizeof(*r); at += 64)
        __builtin_prefetch((const char *)r + at);
}

/* Prefetches what record i + RS_QUANT_POINTED_AHEAD points to and
 * the passes read: its FP8 tensor's name (the reason names it), its
 * arrays of dims and a receiver box's runs. */
static void ready_pointed(const rs__quant_expansion_t *qx,
                          const rs__planned_quant_t *pq)
{
    const rs__planned_quant_t *r = record_after(qx, pq, RS_QUANT_POINTED_AHEAD);
    if (r == NULL)
        return;
    __builtin_prefetch(r->qname);
    if (r->shape != NULL) /* its arrays of dims: a line or two */
        __builtin_prefetch(r->shape);
    if (r->seg_n > 0)
        __builtin_prefetch(&qx->segs.v[r->seg_at]);
}

rs_status_t rs__quant_plan(rs__planner_t *b)
{
    rs_status_t st = RS_OK;
    plain_box_memo_t *memo = calloc(1, sizeof(*memo));
    if (memo == NULL)
        return OOM(b);
    for (rs__planned_quant_t *pq = next_selected(b->quant, NULL);
         st == RS_OK && pq != NULL; pq = next_selected(b->quant, pq)) {
        uint32_t id;
        ready_record(b->quant, pq);
        b->plan->stats.copies_selected++;
        st = rs__planner_psrc(b, b->cap->copies[pq->copy].src_id, &id);
        if (st != RS_OK)
            break;
        if (pq->refused != NULL)
            st = rs__planner_fallback(b, id, pq->refused);
        else if (pq->path == RS_QUANT_PATH_RECEIVER)
            st = walk_box(b, memo, pq, id);
    }
    free(memo);
    return st;
}

/* A derived copy the plan reads: planned, its source not in fallback. */
static int derived_live(const rs__planner_t *b, size_t ci)
{
    const rs__planned_copy_t *pc = &b->copies[ci];
    return pc->kind != RS_PLANNED_COPY_SKIP && b->psrc[pc->src].fallback == NULL;
}

/* Whether the quantized copy is read: its derived copies (publisher) or
 * its box (receiver), with its source not in fallback. */
static int quant_live(rs__planner_t *b, const rs__planned_quant_t *pq)
{
    uint32_t id;
    if (pq->refused != NULL)
        return 0;
    if (pq->path == RS_QUANT_PATH_PUBLISHER)
        return derived_live(b, pq->weight_copy) &&
               derived_live(b, pq->scale_copy);
    if (rs__planner_psrc(b, b->cap->copies[pq->copy].src_id, &id) != RS_OK)
        return 0;
    return b->psrc[id].fallback == NULL && b->psrc[id].tensor != NULL;
}

/* The publisher path's reason, "'<FP8 tensor>' and its scales are served
 * for every block the copy needs", written straight into the plan's
 * arena (formatting it for every copy while analyzing, then copying it
 * here, was a few percent of an FP8 plan); a name too long for the
 * record's buffer is cut as that buffer cut it. NULL on exhaustion. */
static char *served_why(rs__arena_t *a, const rs__planned_quant_t *pq)
{
    static const char tail[] = "' and its scales are served for every "
                               "block the copy needs";
    size_t nq = strlen(pq->qname), nt = sizeof(tail) - 1;
    size_t len = 1 + nq + nt;
    if (len > RS_QUANT_WHY_MAX - 1)
        len = RS_QUANT_WHY_MAX - 1;
    char *w = rs__arena_alloc(a, len + 1);
    if (w == NULL)
        return NULL;
    size_t kq = nq < len - 1 ? nq : len - 1;
    w[0] = '\'';
    memcpy(w + 1, pq->qname, kq);
    memcpy(w + 1 + kq, tail, len - 1 - kq);
    w[len] = '\0';
    return w;
}

/* The receiver path's reason when the FP8 tensor (unserved 1) or its
 * scales (2) are not published, "no publisher serves <name>", as the
 * publisher check words it: for the FP8 tensor the string the expansion
 * wrote with its name (pq->qwhy), else written straight into the plan's
 * arena. NULL on exhaustion. */
static const char *unserved_why(rs__arena_t *a, const rs__planned_quant_t *pq)
{
    if (pq->unserved == 1 && pq->qwhy != NULL)
        return pq->qwhy;
    static const char head[] = RS_QUANT_UNSERVED;
    const char *name = pq->unserved == 1 ? pq->qname : pq->sname;
    size_t nh = sizeof(head) - 1, nn = strlen(name);
    size_t len = nh + nn < RS_QUANT_WHY_MAX - 1 ? nh + nn : RS_QUANT_WHY_MAX - 1;
    char *w = rs__arena_alloc(a, len + 1);
    if (w == NULL)
        return NULL;
    memcpy(w, head, nh);
    memcpy(w + nh, name, len - nh);
    w[len] = '\0';
    return w;
}

/* The plan's record of pq, written in place: the room for every record
 * is made before assembly (a record built on the stack and pushed was
 * copied in wider loads than its fields had just been stored with, a
 * stall per field). Counted once complete. */
static rs_status_t add_record(rs__planner_t *b, rs__planned_quant_t *pq)
{
    static const int64_t zeros[RS_MAX_DIMS]; /* a box not yet known */
    rs__arena_t *a = &b->plan->arena;
    size_t dims = (size_t)pq->ndim * sizeof(int64_t);
    rs_plan_h plan = b->plan;
    if (plan->quantized_len >= plan->quantized_cap)
        return OOM(b); /* not reached: rs__quant_assemble made the room */
    rs_quantized_t *r = &plan->quantized[plan->quantized_len];
    memset(r, 0, sizeof(*r));
    r->copy = pq->copy;
    r->path = pq->path;
    r->why = pq->refused != NULL ? rs__arena_strdup(a, pq->refused)
             : pq->served    ? served_why(a, pq)
             : pq->unserved  ? unserved_why(a, pq)
                             : rs__arena_strdup(a, pq->why);
    r->weight_copy = pq->weight_copy;
    r->scale_copy = pq->scale_copy;
    r->src = b->cap->copies[pq->copy].src; /* the plan owns the capture */
    r->src_dtype = pq->src_dtype;
    r->ndim = pq->ndim;
    /* the three arrays in one allocation (rs__quant_copy_dims) */
    const size_t nd = (size_t)pq->ndim;
    int64_t *arrays = rs__arena_alloc(a, 3 * dims + sizeof(int64_t));
    if (arrays != NULL) {
        rs__quant_copy_dims(arrays, pq->shape, pq->ndim);
        rs__quant_copy_dims(arrays + nd, pq->blocks ? pq->bl.lo : zeros,
                            pq->ndim);
        rs__quant_copy_dims(arrays + 2 * nd, pq->blocks ? pq->bl.box : zeros,
                            pq->ndim);
    }
    r->global_shape = arrays;
    r->box_lo = arrays != NULL ? arrays + nd : NULL;
    r->box_shape = arrays != NULL ? arrays + 2 * nd : NULL;
    if (pq->live && pq->path == RS_QUANT_PATH_RECEIVER) {
        uint64_t n = 1;
        for (int d = 0; d < pq->ndim; d++)
            n *= (uint64_t)pq->bl.box[d]; /* inside the checked source */
        r->staging_bytes = n * rs_dtype_size(pq->src_dtype);
        r->nsegments = pq->seg_n;
        r->segments = rs__arena_memdup(
            a, pq->seg_n > 0 ? b->quant->segs.v + pq->seg_at : NULL,
            r->nsegments * sizeof(rs_segment_t));
    }
    if (r->why == NULL || r->global_shape == NULL || r->box_lo == NULL ||
        r->box_shape == NULL || (r->nsegments > 0 && r->segments == NULL))
        return OOM(b);
    plan->quantized_len++;
    return RS_OK;
}

static rs_status_t add_uncovered(rs__planner_t *b, const rs__planned_quant_t *pq)
{
    const rs__capture_copy_t *c = &b->cap->copies[pq->copy];
    rs_uncovered_t u = {pq->copy, c->src, c->param, pq->missing};
    return RS_VEC_PUSH(b->plan, uncovered, u) ? RS_OK : OOM(b);
}

/* The receiver box's reads in the stats and the descriptors per
 * session: it is what the copy needs. */
static void count_receiver(rs__planner_t *b, const rs_quantized_t *r,
                           uint64_t *descs)
{
    rs_plan_h plan = b->plan;
    rs_plan_stats_t *st = &plan->stats;
    for (size_t i = 0; i < r->nsegments; i++) {
        plan->session_bytes[r->segments[i].session] += r->segments[i].nbytes;
        st->bytes_planned += r->segments[i].nbytes;
        descs[r->segments[i].session]++;
    }
    st->descriptor_count += r->nsegments;
    st->exact_descriptor_count += r->nsegments;
    st->exact_bytes += r->staging_bytes;
    st->copies_planned++;
}

/* The stats derived from the counts, again (plan_assemble.c's rules),
 * and the model's estimate over every read (`descs`: the descriptors
 * per session of all of them). */
static void restate(rs__planner_t *b, const uint64_t *descs)
{
    rs_plan_h plan = b->plan;
    rs_plan_stats_t *st = &plan->stats;
    st->est_seconds = rs__cost_plan_seconds(b->params, plan->session_bytes,
                                            descs, plan->nsessions);
    st->needed_bytes = st->exact_bytes;
    st->descriptor_savings = st->exact_descriptor_count > st->descriptor_count
        ? st->exact_descriptor_count - st->descriptor_count : 0;
    st->extra_wire_bytes = st->bytes_planned > st->exact_bytes
        ? st->bytes_planned - st->exact_bytes : 0;
    st->nsessions_used = 0;
    for (size_t i = 0; i < plan->nsessions; i++)
        st->nsessions_used += plan->session_bytes[i] > 0;
}

rs_status_t rs__quant_assemble(rs__planner_t *b, uint64_t *descs)
{
    rs__quant_expansion_t *qx = b->quant;
    rs_status_t st = RS_OK;
    /* a record per quantized copy at most: room made once */
    if (!rs__vec_reserve((void **)&b->plan->quantized, &b->plan->quantized_cap,
                         b->plan->quantized_len + qx->nq + 1,
                         sizeof(rs_quantized_t)))
        return OOM(b);
    for (rs__planned_quant_t *pq = next_selected(qx, NULL);
         st == RS_OK && pq != NULL; pq = next_selected(qx, pq)) {
        ready_record(qx, pq);
        ready_pointed(qx, pq);
        pq->live = quant_live(b, pq);
        if (pq->path == RS_QUANT_PATH_PUBLISHER && pq->refused == NULL)
            b->plan->stats.copies_planned -=
                (size_t)derived_live(b, pq->weight_copy) +
                (size_t)derived_live(b, pq->scale_copy) - (size_t)pq->live;
        st = add_record(b, pq);
        if (st != RS_OK || !pq->live || pq->path != RS_QUANT_PATH_RECEIVER)
            continue;
        if (pq->missing > 0)
            st = add_uncovered(b, pq);
        count_receiver(b, &b->plan->quantized[b->plan->quantized_len - 1],
                       descs);
    }
    if (st == RS_OK)
        restate(b, descs);
    return st;
}
