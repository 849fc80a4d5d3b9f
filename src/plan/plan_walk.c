/* From a resolved box to segments: visit the source grid's cells, choose one
 * shard per cell, and turn each run into a segment, merging runs that
 * continue the previous one in both the shard and the destination. A copy
 * with more runs than it may keep is only counted (holding its runs would
 * cost gigabytes where a full pull then replaces them), summed per session
 * for the cost model as its kept runs would be, with its shard choices
 * recorded so that a second walk can repeat it exactly. */
#include <stdint.h>

#include "core/checked.h"
#include "plan/box_memo.h"
#include "model/grid.h"
#include "plan/planner.h"

typedef struct {
    rs__planner_t *b;
    const rs__source_tensor_t *t;
    const rs__box_t *box;
    int64_t dst_base;
    uint32_t param;
    rs__segment_vec_t *out;
    size_t floor;       /* first segment of this walk: merge only from here */
    uint32_t session;   /* of the shard being walked */
    uint64_t addr;
    uint64_t *missing;
    size_t keep;        /* runs kept before the walk only counts */
    int counting;       /* over `keep`: runs are counted, `last` is the tail */
    rs_segment_t last;  /* set when counting starts (ctx_init leaves it) */
    const uint32_t *replay; /* shard choices to repeat, or NULL */
    int record;         /* push each choice to b->picks */
    rs__walk_tally_t tally; /* drop: set when counting starts, as last */
    long agg;           /* b->drop_aggs entry of the last run summed, or -1 */
    rs__dest_fact_t *fact; /* the memo's facts of the box, or NULL */
    int whole;          /* every shard of the grid holds the whole source */
    unsigned char *marks; /* the source's shard marks, or NULL */
    rs__planned_source_t *src; /* whose marks they are */
    uint32_t first;     /* the first shard taken, UINT32_MAX before */
    int pair;           /* a copy walk: b->walk_pair may be taken */
    int paired;         /* it was */
} walk_ctx_t;

static int continues(const rs_segment_t *last, const rs_segment_t *s)
{
    return last->session == s->session && last->param == s->param &&
           last->src_addr + last->nbytes == s->src_addr &&
           last->dst_byte + last->nbytes == s->dst_byte;
}

/* Adds a complete run of a dropped copy to its session's sum, entries
 * made in the order sessions first appear (as rs__cost_aggs_build sums a
 * kept copy's runs). */
static void sum_run(walk_ctx_t *w, const rs_segment_t *s)
{
    rs__planner_t *b = w->b;
    if (w->agg < 0 || b->drop_aggs[w->agg].session != s->session) {
        w->agg = b->agg_slot[s->session];
        if (w->agg < 0) {
            rs__session_cost_t a = {s->session, 0, 0};
            if (!RS_VEC_PUSH(b, drop_aggs, a)) {
                b->oom = 1;
                return;
            }
            w->agg = (long)b->drop_aggs_len - 1;
            b->agg_slot[s->session] = w->agg;
        }
    }
    b->drop_aggs[w->agg].bytes += s->nbytes;
    b->drop_aggs[w->agg].descs++;
}

/* One run more than the copy may keep: the kept runs (all complete) are
 * summed and dropped, the first of them remembered. */
static void start_counting(walk_ctx_t *w)
{
    rs__segment_vec_t *o = w->out;
    w->counting = 1;
    w->tally.drop.agg_begin = w->b->drop_aggs_len;
    const rs_segment_t *kept = o->v; /* NULL only when nothing is kept */
    for (size_t i = w->floor; kept != NULL && i < o->v_len; i++)
        sum_run(w, &kept[i]);
    if (kept != NULL && o->v_len > w->floor)
        w->tally.drop.first = kept[w->floor];
    o->v_len = w->floor;
}

static void emit_run(void *ctx, int64_t src_elem, int64_t dst_elem,
                     int64_t nelem)
{
    walk_ctx_t *w = ctx;
    uint64_t es = w->t->elsize;
    rs_segment_t s = {w->session, w->param, w->addr + (uint64_t)src_elem * es,
                      (uint64_t)dst_elem * es, (uint64_t)nelem * es};
    rs__segment_vec_t *o = w->out;
    rs_segment_t *last = w->counting ? &w->last
                         : o->v_len > w->floor ? &o->v[o->v_len - 1] : NULL;
    w->tally.bytes += s.nbytes;
    if (last != NULL && continues(last, &s)) {
        last->nbytes += s.nbytes;
        return;
    }
    w->tally.nsegs++;
    if (w->counting) { /* the run before is complete */
        sum_run(w, &w->last);
        if (w->tally.nsegs == 2) /* keep 0: the first run was never kept */
            w->tally.drop.first = w->last;
        w->last = s;
    } else if (o->v_len - w->floor >= w->keep) {
        start_counting(w);
        w->last = s;
    } else if (!RS_VEC_PUSH(o, v, s)) {
        w->b->oom = 1;
    }
}

/* Cells below this many bytes go to a session the plan already reads from
 * when a replica there holds them, so small replicated tensors (norms,
 * routers) do not add a connection to every trainer. */
#define RS_PLAN_AFFINITY_BYTES ((uint64_t)64 << 10)

/* The replica (or overlapping shard) with the least load so far, among the
 * sessions already read from when `affine` and any qualifies; ties go to a
 * rotation that depends on the cell and the caller's salt, so receivers with
 * different salts start on different replicas. */
static uint32_t choose_shard(const walk_ctx_t *w, size_t cell,
                             const uint32_t *shards, size_t n, int affine)
{
    if (n == 1)
        return shards[0]; /* what the passes below pick for one shard */
    size_t rot = (size_t)((w->b->params->replica_salt + cell) % n);
    uint32_t pick = shards[rot];
    uint64_t best = UINT64_MAX;
    for (int pass = affine ? 0 : 1; pass < 2 && best == UINT64_MAX; pass++) {
        for (size_t i = 0; i < n; i++) {
            uint32_t id = shards[(rot + i) % n];
            uint64_t load = w->b->load[w->t->shards[id].session];
            if (pass == 0 && load == 0)
                continue; /* first pass: only sessions already in use */
            if (load < best) {
                best = load;
                pick = id;
            }
        }
    }
    return pick;
}

static uint64_t krange_elems(const rs__box_t *box, const rs__index_range_t *kr)
{
    uint64_t elems = 1;
    for (int d = 0; d < box->ndim; d++)
        elems *= (uint64_t)(kr->hi[d] - kr->lo[d]); /* <= box numel */
    return elems;
}

/* The shard a part of `bytes` is read from (a replayed choice, or the
 * least loaded one, charged), made the walk's current session and base. */
static const rs__source_shard_t *take_shard(walk_ctx_t *w, size_t cell,
                                        uint64_t bytes, const uint32_t *shards,
                                        size_t n)
{
    uint32_t id;
    if (w->replay != NULL) {
        id = *w->replay++; /* its load was counted by the first walk */
    } else {
        id = choose_shard(w, cell, shards, n, bytes < RS_PLAN_AFFINITY_BYTES);
        w->b->load[w->t->shards[id].session] += bytes;
        if (w->record && !RS_VEC_PUSH(w->b, picks, id))
            w->b->oom = 1;
    }
    const rs__source_shard_t *sh = &w->t->shards[id];
    if (w->marks != NULL)
        rs__planner_mark(w->src, w->marks, id, sh->session);
    if (w->first == UINT32_MAX)
        w->first = id;
    w->session = sh->session;
    w->addr = sh->addr;
    return sh;
}

static void walk_part(walk_ctx_t *w, size_t cell, const rs__index_range_t *kr,
                      const uint32_t *shards, size_t n)
{
    uint64_t bytes = krange_elems(w->box, kr) * w->t->elsize;
    const rs__source_shard_t *sh = take_shard(w, cell, bytes, shards, n);
    rs__source_buffer_t buf = {sh->offset, sh->shape};
    rs__walk_runs(w->box, kr, &buf, w->dst_base, emit_run, w);
}

/* rs__walk_one_run of the box in buf; in a shard holding the whole source
 * the answer is a property of the geometry, asked once per plan of the
 * memo's box and kept with it. */
static int one_run(walk_ctx_t *w, const rs__source_buffer_t *buf, int64_t *src)
{
    rs__dest_fact_t *f = w->whole ? w->fact : NULL;
    if (f == NULL)
        return rs__walk_one_run(w->box, buf, src);
    if (!f->run_known) {
        f->one_run = rs__walk_one_run(w->box, buf, &f->run_src);
        f->run_known = 1;
    }
    if (f->one_run)
        *src = f->run_src;
    return f->one_run;
}

/* The whole box from one shard, as plan_cell walks a one-shard cell the
 * box lies in; a box that is one run in the shard and the destination
 * goes straight to its segment. */
static void walk_whole(walk_ctx_t *w, size_t cell, uint32_t id)
{
    const rs__box_t *box = w->box;
    const rs__source_shard_t *sh =
        take_shard(w, cell, (uint64_t)box->numel * w->t->elsize, &id, 1);
    rs__source_buffer_t buf = {sh->offset, sh->shape};
    int64_t src = 0;
    if (one_run(w, &buf, &src)) {
        emit_run(w, src, w->dst_base, box->numel);
        return;
    }
    rs__index_range_t kr;
    for (int d = 0; d < box->ndim; d++) {
        kr.lo[d] = 0;
        kr.hi[d] = box->count[d];
    }
    rs__walk_runs(box, &kr, &buf, w->dst_base, emit_run, w);
}

static void plan_cell(void *ctx, size_t cell, const rs__index_range_t *kr,
                      const uint32_t *shards, size_t n)
{
    walk_ctx_t *w = ctx;
    uint64_t elems = krange_elems(w->box, kr);
    int d = 0;
    if (n == 0) {
        *w->missing += elems;
        return;
    }
    while (d < w->box->ndim && kr->hi[d] - kr->lo[d] < 2)
        d++;
    uint64_t split = w->b->params->split_bytes;
    if (n < 2 || d == w->box->ndim || split == 0 ||
        elems * w->t->elsize < split) {
        walk_part(w, cell, kr, shards, n);
        return;
    }
    /* A large replicated cell: one slice of its outermost dim per replica. */
    int64_t len = kr->hi[d] - kr->lo[d];
    int64_t parts = (int64_t)n < len ? (int64_t)n : len;
    for (int64_t i = 0; i < parts; i++) {
        rs__index_range_t part = *kr;
        part.lo[d] = kr->lo[d] + len * i / parts;
        part.hi[d] = kr->lo[d] + len * (i + 1) / parts;
        walk_part(w, cell + (size_t)i, &part, shards, n);
    }
}

/* The one-cell grid of a tensor whose shards each hold all of it, built
 * without the lock (a few hundred instructions, where the lock costs a
 * fifth of that, ten thousand times in a MoE model's first plan) and
 * published by compare-and-swap: a thread that loses the race frees its
 * copy and takes the winner's, equal to it. RS_ERR_UNSUPPORTED for any
 * other tensor, whose grid the locked path builds. */
static rs_status_t whole_grid(rs__source_tensor_t *t, rs__grid_t **grid_p)
{
    rs__grid_t *g = NULL, *seen = NULL;
    rs_status_t st = rs__grid_build_whole(t, RS_GRID_MAX_CELLS, &g);
    if (st != RS_OK)
        return st;
    if (!__atomic_compare_exchange_n(&t->grid, &seen, g, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        rs__grid_destroy(g);
        g = seen;
    }
    *grid_p = g;
    return RS_OK;
}

/* The tensor's cell grid, built by the first plan that needs it. Plans may
 * be built from several threads against one sources, and the grid is the
 * only part of the sources a build writes: it is built under the sources'
 * lock (a one-cell grid by whole_grid) and published with release order;
 * once there it is only read. */
static rs_status_t tensor_grid(rs_sources_h s, rs__source_tensor_t *t,
                               const rs__grid_t **grid_p)
{
    rs__grid_t *g = __atomic_load_n(&t->grid, __ATOMIC_ACQUIRE);
    rs_status_t st = g == NULL ? whole_grid(t, &g) : RS_OK;
    if (st == RS_ERR_UNSUPPORTED) {
        st = RS_OK;
        pthread_mutex_lock(&s->grid_lock);
        g = __atomic_load_n(&t->grid, __ATOMIC_ACQUIRE);
        if (g == NULL) {
            st = rs__grid_build(t, RS_GRID_MAX_CELLS, &g);
            if (st == RS_OK)
                __atomic_store_n(&t->grid, g, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&s->grid_lock);
    }
    if (st == RS_OK)
        *grid_p = g;
    return st;
}

/* 1 when shard `sh` holds every element of the box (a non-empty one). */
static int shard_holds_box(const rs__source_shard_t *sh, const rs__box_t *box)
{
    if (sh->numel <= 0 || box->numel == 0)
        return 0;
    for (int d = 0; d < box->ndim; d++) {
        int64_t last = rs__box_coord(box, d, box->count[d] - 1);
        if (box->start[d] < sh->offset[d] ||
            last >= sh->offset[d] + sh->shape[d])
            return 0;
    }
    return 1;
}

/* The box read from the planner's paired shard (b->walk_pair) when that
 * shard is on the session asked and holds the whole box: a scale copy
 * reads its few hundred bytes of scales from the table its weight copy
 * reads, where walking the scale tensor's grid chose among every replica
 * of its cell for them. 0 (nothing done) otherwise. */
static int walk_paired(rs__planner_t *b, walk_ctx_t *w)
{
    uint32_t id = b->walk_pair;
    if (id == UINT32_MAX || id >= w->t->shards_len)
        return 0;
    const rs__source_shard_t *sh = &w->t->shards[id];
    if (sh->session != b->walk_pair_session || !shard_holds_box(sh, w->box))
        return 0;
    walk_whole(w, 0, id);
    return 1;
}

static rs_status_t walk(rs__planner_t *b, rs__planned_source_t *src, walk_ctx_t *w)
{
    /* Most tensors of a MoE model are published whole by one rank: their
     * walk is what plan_cell does for the one cell, with no grid built (a
     * first plan built ten thousand of them, a sixth of its time). */
    if (src->tensor->sole_whole) {
        w->whole = 1;
        if (w->box->numel != 0)
            walk_whole(w, 0, 0);
        return b->oom ? RS_ERR_NO_MEMORY : RS_OK;
    }
    if (w->pair && walk_paired(b, w)) {
        w->paired = 1;
        return b->oom ? RS_ERR_NO_MEMORY : RS_OK;
    }
    const rs__grid_t *grid = NULL;
    rs_status_t st = tensor_grid(b->srcs, src->tensor, &grid);
    if (st != RS_OK)
        return st;
    size_t cell = 0;
    uint32_t id = 0;
    w->whole = rs__grid_whole(grid);
    if (w->box->numel != 0 && rs__grid_sole(grid, w->box, &cell, &id)) {
        walk_whole(w, cell, id);
    } else {
        st = rs__grid_visit(grid, w->box, plan_cell, w);
    }
    if (st == RS_OK && b->oom)
        st = RS_ERR_NO_MEMORY;
    return st;
}

/* Sets every field a walk reads before it writes it: all but `last` and
 * `tally.drop`, which only a walk that starts counting reads, after
 * start_counting and end_counting set them (the compiler clears a whole
 * context with a string store, which cost more than the rest of a one-run
 * copy's walk set-up). */
static void ctx_init(walk_ctx_t *w, rs__planner_t *b, rs__planned_source_t *src,
                     const rs__box_t *box, uint32_t param, int64_t dst_base,
                     rs__segment_vec_t *out, uint64_t *missing, size_t keep)
{
    w->b = b;
    w->t = src->tensor;
    w->box = box;
    w->dst_base = dst_base;
    w->param = param;
    w->out = out;
    w->floor = out->v_len;
    w->session = 0;
    w->addr = 0;
    w->missing = missing;
    w->keep = keep;
    w->counting = 0;
    w->replay = NULL;
    w->record = 0;
    w->tally.nsegs = 0;
    w->tally.bytes = 0;
    w->tally.dropped = 0;
    w->agg = -1;
    w->fact = NULL;
    w->whole = 0;
    w->marks = src->marks >= 0 ? b->shard_marks + src->marks : NULL;
    w->src = src;
    w->first = UINT32_MAX;
    w->pair = 0;
    w->paired = 0;
}

rs_status_t rs__planner_walk(rs__planner_t *b, rs__planned_source_t *src,
                             const rs__box_t *box, uint32_t param,
                             int64_t dst_base, rs__segment_vec_t *out,
                             uint64_t *missing)
{
    walk_ctx_t w;
    ctx_init(&w, b, src, box, param, dst_base, out, missing, SIZE_MAX);
    return walk(b, src, &w);
}

/* The end of a dropped copy's walk: its last run summed, its ends and
 * sums recorded, the session slots cleared for the next copy. */
static void end_counting(walk_ctx_t *w)
{
    rs__planner_t *b = w->b;
    rs__dropped_copy_t *d = &w->tally.drop;
    sum_run(w, &w->last);
    if (w->tally.nsegs == 1)
        d->first = w->last;
    d->last = w->last;
    d->agg_end = b->drop_aggs_len;
    for (size_t i = d->agg_begin; i < d->agg_end; i++)
        b->agg_slot[b->drop_aggs[i].session] = -1;
}

/* The copy most of a MoE rank's copies are: its box one run of a tensor
 * one shard publishes whole, known from the memo's facts of its geometry
 * (learnt by the first copy of it, which takes the general walk). Its
 * segment is what walk_whole would emit, charged as take_shard would, and
 * it never starts counting; the shard choice is not recorded, since only a
 * dropped copy's choices are kept. Returns 0 (nothing done) for any other
 * copy. About a fifth of the general walk's instructions. */
static int walk_sole_run(rs__planner_t *b, const rs__source_tensor_t *t,
                         const rs__box_t *box, uint32_t param,
                         int64_t dst_base, size_t keep,
                         const uint32_t *replay, rs__segment_vec_t *out,
                         rs__walk_tally_t *tally)
{
    const rs__dest_fact_t *f = b->walk_fact;
    if (!t->sole_whole || f == NULL || !f->run_known || !f->one_run ||
        box->numel == 0 || keep == 0 || replay != NULL)
        return 0;
    const rs__source_shard_t *sh = &t->shards[0];
    uint64_t es = t->elsize, nbytes = (uint64_t)box->numel * es;
    rs_segment_t s = {sh->session, param, sh->addr + (uint64_t)f->run_src * es,
                      (uint64_t)dst_base * es, nbytes};
    if (!RS_VEC_PUSH(out, v, s)) {
        b->oom = 1;
        return 0;
    }
    b->load[sh->session] += nbytes;
    tally->nsegs = 1;
    tally->bytes = nbytes;
    tally->dropped = 0;
    tally->paired = 0;
    tally->first = 0;
    return 1;
}

rs_status_t rs__planner_walk_copy(rs__planner_t *b, rs__planned_source_t *src,
                                  const rs__box_t *box, uint32_t param,
                                  int64_t dst_base, size_t keep,
                                  const uint32_t *replay, rs__segment_vec_t *out,
                                  uint64_t *missing, rs__walk_tally_t *tally)
{
    if (walk_sole_run(b, src->tensor, box, param, dst_base, keep, replay, out,
                      tally)) {
        if (src->marks >= 0) /* its one shard */
            rs__planner_mark(src, b->shard_marks + src->marks, 0,
                             src->tensor->shards[0].session);
        return RS_OK;
    }
    if (b->oom)
        return RS_ERR_NO_MEMORY;
    walk_ctx_t w;
    ctx_init(&w, b, src, box, param, dst_base, out, missing, keep);
    w.replay = replay;
    w.record = replay == NULL;
    w.fact = b->walk_fact;
    w.pair = 1;
    rs_status_t st = walk(b, src, &w);
    if (w.counting)
        end_counting(&w);
    if (st == RS_OK && b->oom)
        st = RS_ERR_NO_MEMORY;
    if (st != RS_OK)
        return st;
    tally->nsegs = w.tally.nsegs;
    tally->bytes = w.tally.bytes;
    tally->dropped = w.counting;
    tally->paired = w.paired;
    tally->first = w.first;
    if (w.counting) /* what a copy that keeps its runs has none of */
        tally->drop = w.tally.drop;
    return RS_OK;
}
