/* The executor's own checks of a plan, made while it prepares (before any
 * byte moves) and independent of the planner that made the plan, so that a
 * planner bug is refused instead of installed. Each check is per copy or
 * per segment, never per element:
 *  - a replay from a staged box reads only elements inside that box, dim by
 *    dim (the staging buffer's span is not enough: an element one past the
 *    box in an inner dim lies inside the span, in the next row of the box);
 *  - a copy's destination, from its first to its last byte, lies inside
 *    its parameter, and a cast reads no more than its convert staging
 *    holds;
 *  - each exact segment lands inside the bytes that the plan's copies
 *    declare, and no destination byte is written twice except where two
 *    declared copies overlap (the loader's "later copy wins").
 * A violation is RS_ERR_INPUT naming the copy and the plan entry. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "exec/exec_impl.h"
#include "geom/box.h"

int rs__exec_guard_on = 1;

static const char *kind_name(rs_staged_kind_t k)
{
    return k == RS_STAGED_FULL        ? "full pull"
           : k == RS_STAGED_COALESCED ? "coalesced box"
                                      : "bound box";
}

/* "staged read 3 (coalesced box of 'w')", or the quantized box. */
static void name_entry(rs_exec_h x, const rs_staged_read_t *fp, char *out,
                       size_t cap)
{
    size_t n;
    uintptr_t all = (uintptr_t)rs_plan_staged_reads(x->plan, &n);
    uintptr_t at = (uintptr_t)fp;
    if (at >= all && at < all + n * sizeof(*fp))
        snprintf(out, cap, "staged read %zu (%s of '%s')",
                 (size_t)((at - all) / sizeof(*fp)), kind_name(fp->kind),
                 fp->src);
    else
        snprintf(out, cap, "the receiver-side quantized box of '%s'",
                 fp->src);
}

/* The lowest and highest index of source dim d that the box visits. */
static void dim_range(const rs__box_t *box, int d, int64_t *lo_p,
                      int64_t *hi_p)
{
    int64_t lo = box->start[d];
    int64_t hi = lo;
    for (int j = 0; j < box->nfactors; j++) {
        const rs__factor_t *f = &box->factors[j];
        if (f->sdim != d)
            continue;
        int64_t reach = (f->count - 1) * f->dmult; /* inside the source */
        *(reach < 0 ? &lo : &hi) += reach;
    }
    *lo_p = lo;
    *hi_p = hi;
}

rs_status_t rs__exec_guard_replay(rs_exec_h x, const rs_staged_read_t *fp,
                                  size_t ci, rs__box_t *box, rs_diag_t *diag)
{
    rs_copy_desc_t c;
    size_t bad;
    char entry[160];
    rs_capture_copy(x->cap, ci, &c);
    if (rs__geom_resolve(fp->ndim, fp->global_shape, c.ops, c.nops, c.ndim,
                         c.dest_shape, c.dest_stride, box, &bad, NULL,
                         0) != RS_OK) {
        name_entry(x, fp, entry, sizeof(entry));
        return rs__diag_set(diag, RS_ERR_INPUT, "plan check: copy %zu of "
                            "'%s' into '%s' is no strided box of its "
                            "source (op %zu), yet %s replays it", ci, c.src,
                            c.param, bad, entry);
    }
    for (int d = 0; box->numel > 0 && d < fp->ndim; d++) {
        int64_t lo, hi;
        int64_t blo = fp->box_lo != NULL ? fp->box_lo[d] : 0;
        int64_t bn = fp->box_shape != NULL ? fp->box_shape[d]
                                           : fp->global_shape[d];
        dim_range(box, d, &lo, &hi);
        if (lo >= blo && hi < blo + bn)
            continue;
        name_entry(x, fp, entry, sizeof(entry));
        return rs__diag_set(diag, RS_ERR_INPUT, "plan check: copy %zu of "
                            "'%s' into '%s' reads indices %lld..%lld of dim "
                            "%d, outside %s, which holds %lld..%lld there; "
                            "refused before any byte moved", ci, c.src,
                            c.param, (long long)lo, (long long)hi, d, entry,
                            (long long)blo, (long long)(blo + bn - 1));
    }
    return RS_OK;
}

/* The element offsets a copy writes, from its first to one past its last,
 * relative to element 0 of its parameter: 1, 0 when it writes nothing, -1
 * when they overflow int64. */
static int dest_elements(const rs_copy_desc_t *c, int64_t *first_p,
                         int64_t *end_p)
{
    int64_t lo = c->dest_offset, span;
    int64_t hi = lo;
    for (int d = 0; d < c->ndim; d++)
        if (c->dest_shape[d] <= 0)
            return 0;
    for (int d = 0; d < c->ndim; d++) {
        if (!rs__mul_i64(c->dest_shape[d] - 1, c->dest_stride[d], &span) ||
            !rs__add_i64(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
            return -1;
    }
    if (!rs__add_i64(hi, 1, &hi))
        return -1;
    *first_p = lo;
    *end_p = hi;
    return 1;
}

rs_status_t rs__exec_guard_dest(const rs_copy_desc_t *c, size_t ci,
                                uint64_t param_bytes, rs_diag_t *diag)
{
    int64_t first = 0, end = 0;
    uint64_t es = rs_dtype_size(c->dest_dtype);
    int k = dest_elements(c, &first, &end);
    if (k == 0)
        return RS_OK;
    if (k < 0 || first < 0 || es == 0 ||
        (uint64_t)end > param_bytes / es)
        return rs__diag_set(diag, RS_ERR_INPUT, "plan check: copy %zu of "
                            "'%s' writes elements %lld..%lld of param '%s', "
                            "which holds %llu bytes", ci, c->src,
                            (long long)first, (long long)end - 1, c->param,
                            (unsigned long long)param_bytes);
    return RS_OK;
}

rs_status_t rs__exec_guard_cast(const rs_exec_h x, const rs_convert_t *cv,
                                const rs__exec_copy_t *xc, rs_diag_t *diag)
{
    uint64_t need = rs_dtype_size(cv->src_dtype);
    for (int d = 0; d < xc->ndim; d++)
        if (!rs__mul_u64(need, (uint64_t)(xc->shape[d] > 0 ? xc->shape[d] : 0),
                         &need))
            need = UINT64_MAX;
    if (need <= cv->staging_bytes)
        return RS_OK;
    rs_copy_desc_t c;
    rs_capture_copy(x->cap, cv->copy, &c);
    return rs__diag_set(diag, RS_ERR_INPUT, "plan check: the cast of copy "
                        "%zu ('%s' into '%s') reads %llu bytes of its convert "
                        "staging, which holds %llu", cv->copy, c.src, c.param,
                        (unsigned long long)need,
                        (unsigned long long)cv->staging_bytes);
}

/* ---- writes: declared bytes and double writes, parameter by parameter ---- */

enum { W_SEGMENT, W_REPLAY, W_CAST };

/* Bytes [lo, hi) of one parameter. */
typedef struct span {
    uint64_t lo, hi;
    int kind;  /* writes: W_* */
    size_t id; /* copy, plan segment, replay or cast */
} span_t;

/* Spans grouped by parameter: group p is v[at[p], at[p + 1]). */
typedef struct groups {
    span_t *v;
    size_t *at;
} groups_t;

/* The end of the ascending run of v[0, n) that starts at i. */
static size_t run_end(const span_t *v, size_t n, size_t i)
{
    while (i + 1 < n && v[i + 1].lo >= v[i].lo)
        i++;
    return i + 1;
}

/* Sorted by start, stably: a natural merge sort (pairs of ascending runs
 * merged through tmp until one is left), linear on the plan's usual order
 * of a few ascending runs per parameter, one per shard read. */
static void sort_spans(span_t *v, size_t n, span_t *tmp)
{
    while (n > 0 && run_end(v, n, 0) < n) {
        for (size_t a = 0; a < n;) {
            size_t m = run_end(v, n, a), b = m < n ? run_end(v, n, m) : n;
            size_t i = a, j = m, k = a;
            while (i < m || j < b)
                tmp[k++] = j >= b || (i < m && v[i].lo <= v[j].lo) ? v[i++]
                                                                   : v[j++];
            a = b;
        }
        memcpy(v, tmp, n * sizeof(span_t));
    }
}

/* Merges sorted spans that overlap or touch, in place; their count. */
static size_t merge(span_t *v, size_t n)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && v[i].lo <= v[out - 1].hi) {
            if (v[i].hi > v[out - 1].hi)
                v[out - 1].hi = v[i].hi;
            continue;
        }
        v[out++] = v[i];
    }
    return out;
}

/* Whether [lo, hi) lies inside one of merged v[0, n). */
static int inside(const span_t *v, size_t n, uint64_t lo, uint64_t hi)
{
    size_t a = 0, b = n;
    while (a < b) { /* the first span starting after lo */
        size_t m = a + (b - a) / 2;
        if (v[m].lo <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a > 0 && hi <= v[a - 1].hi;
}

/* Groups spans[i] (param of[i], or none when of[i] < 0) by parameter,
 * keeping their order. */
static void group(const span_t *spans, const long *of, size_t n,
                  size_t nparams, groups_t *g)
{
    memset(g->at, 0, (nparams + 2) * sizeof(size_t));
    for (size_t i = 0; i < n; i++)
        if (of[i] >= 0)
            g->at[of[i] + 2]++;
    for (size_t p = 2; p < nparams + 2; p++)
        g->at[p] += g->at[p - 1];
    for (size_t i = 0; i < n; i++)
        if (of[i] >= 0)
            g->v[g->at[of[i] + 1]++] = spans[i];
}

/* Each copy's destination bytes in its parameter, and the parameter
 * (-1 when it writes nothing or its param is not bound). */
static void copy_spans(rs_exec_h x, span_t *by_copy, long *param, size_t n)
{
    for (size_t ci = 0; ci < n; ci++) {
        rs_copy_desc_t c;
        int64_t first = 0, end = 0;
        rs_capture_copy(x->cap, ci, &c);
        long p = rs_capture_find_param(x->cap, c.param);
        uint64_t es = rs_dtype_size(c.dest_dtype);
        by_copy[ci] = (span_t){0, 0, 0, ci};
        param[ci] = -1;
        if (p < 0 || x->binds[p].base == NULL ||
            dest_elements(&c, &first, &end) != 1)
            continue;
        by_copy[ci].lo = (uint64_t)first * es;
        by_copy[ci].hi = (uint64_t)end * es;
        param[ci] = p;
    }
}

/* Per parameter, from its copies' spans (grouped in decl): in `uni` their
 * union, in `decl` where two of them overlap, both merged; the ends of
 * each group in uend and dend. */
static void declared(groups_t *decl, span_t *uni, size_t *uend, size_t *dend,
                     size_t nparams, span_t *tmp)
{
    for (size_t p = 0; p < nparams; p++) {
        span_t *v = decl->v + decl->at[p], *s = uni + decl->at[p];
        size_t n = decl->at[p + 1] - decl->at[p], far = 0, nd = 0;
        sort_spans(v, n, tmp);
        memcpy(s, v, n * sizeof(span_t));
        for (size_t i = 1; i < n; i++) { /* the sweep of check_param */
            uint64_t hi = s[far].hi, end = s[i].hi;
            if (s[i].lo < hi)
                v[nd++] = (span_t){s[i].lo, end < hi ? end : hi, 0, 0};
            if (s[i].hi > s[far].hi)
                far = i;
        }
        sort_spans(v, nd, tmp);
        dend[p] = decl->at[p] + merge(v, nd);
        uend[p] = decl->at[p] + merge(uni + decl->at[p], n);
    }
}

static void name_write(rs_exec_h x, const span_t *w, char *out, size_t cap)
{
    size_t n;
    if (w->kind == W_SEGMENT) {
        const rs_segment_t *s = &rs_plan_segments(x->plan, &n)[w->id];
        rs_param_info_t info;
        rs_capture_param(x->cap, s->param, &info);
        snprintf(out, cap, "exact segment %zu (%llu bytes at byte %llu of "
                 "'%s')", w->id, (unsigned long long)s->nbytes,
                 (unsigned long long)s->dst_byte, info.name);
        return;
    }
    const rs__exec_copy_t *xc = w->kind == W_REPLAY ? &x->replays[w->id]
                                                    : &x->casts[w->id];
    rs_copy_desc_t c;
    rs_capture_copy(x->cap, xc->copy, &c);
    snprintf(out, cap, "the %s of copy %zu ('%s' into '%s')",
             w->kind == W_REPLAY ? "replay" : "cast", xc->copy, c.src,
             c.param);
}

/* The writes, in plan order: exact segments, then replays and casts (their
 * copy's bytes), with the parameter of each in `of`. */
static size_t gather_writes(rs_exec_h x, const span_t *by_copy,
                            const long *cparam, span_t *w, long *of)
{
    size_t n, k = 0;
    const rs_segment_t *segs = rs_plan_segments(x->plan, &n);
    for (size_t i = 0; i < n; i++, k++) {
        w[k] = (span_t){segs[i].dst_byte, segs[i].dst_byte + segs[i].nbytes,
                        W_SEGMENT, i};
        of[k] = segs[i].nbytes > 0 && x->binds[segs[i].param].base != NULL
                    ? (long)segs[i].param : -1;
    }
    for (size_t i = 0; i < x->replays_len; i++, k++) {
        w[k] = by_copy[x->replays[i].copy];
        w[k].kind = W_REPLAY;
        w[k].id = i;
        of[k] = cparam[x->replays[i].copy];
    }
    for (size_t i = 0; i < x->casts_len; i++, k++) {
        w[k] = by_copy[x->casts[i].copy];
        w[k].kind = W_CAST;
        w[k].id = i;
        of[k] = cparam[x->casts[i].copy];
    }
    return k;
}

/* One parameter's writes v[0, n): each exact segment inside its copies'
 * union u[0, nu); every byte two writes share inside their declared
 * overlaps d[0, nd). */
static rs_status_t check_param(rs_exec_h x, span_t *v, size_t n,
                               const span_t *u, size_t nu, const span_t *d,
                               size_t nd, span_t *tmp, rs_diag_t *diag)
{
    char a[RS_DIAG_MSG_MAX / 3], b[RS_DIAG_MSG_MAX / 3];
    size_t far = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].kind != W_SEGMENT || inside(u, nu, v[i].lo, v[i].hi))
            continue;
        name_write(x, &v[i], a, sizeof(a));
        return rs__diag_set(diag, RS_ERR_INPUT, "plan check: %s lies "
                            "outside every copy's destination there", a);
    }
    sort_spans(v, n, tmp);
    for (size_t i = 1; i < n; i++) {
        /* sorted by start: write i shares bytes with an earlier one exactly
         * when it starts before the furthest end so far, and all it shares
         * lies before that end */
        if (v[i].hi > v[i].lo && v[i].lo < v[far].hi) {
            uint64_t hi = v[i].hi < v[far].hi ? v[i].hi : v[far].hi;
            if (!inside(d, nd, v[i].lo, hi)) {
                name_write(x, &v[far], a, sizeof(a));
                name_write(x, &v[i], b, sizeof(b));
                return rs__diag_set(diag, RS_ERR_INPUT, "plan check: %s and "
                                    "%s write the same %llu bytes, which no "
                                    "two copies declare", a, b,
                                    (unsigned long long)(hi - v[i].lo));
            }
        }
        if (v[i].hi > v[far].hi)
            far = i;
    }
    return RS_OK;
}

typedef struct work {
    span_t *by_copy, *uni, *w;
    long *cparam, *of;
    size_t *uend, *dend;
    groups_t decl, writes;
    void *block; /* everything above, in one allocation */
} work_t;

/* Carves n items of `size` bytes from *at (every item size a multiple of
 * 8, so each array stays aligned). */
static void *carve(unsigned char **at, size_t n, size_t size)
{
    void *p = *at;
    *at += (n + 1) * size;
    return p;
}

static int work_alloc(work_t *k, size_t nc, size_t nw, size_t np)
{
    /* w is the sorts' scratch once grouped: room for the copies too */
    size_t spans = 3 * (nc + 1) + (nw + nc + 1) + (nw + 1);
    size_t bytes = spans * sizeof(span_t) + (nc + nw + 2) * sizeof(long) +
                   (4 * np + 8) * sizeof(size_t);
    memset(k, 0, sizeof(*k));
    unsigned char *at = k->block = calloc(1, bytes);
    if (at == NULL)
        return 0;
    k->by_copy = carve(&at, nc, sizeof(span_t));
    k->uni = carve(&at, nc, sizeof(span_t));
    k->decl.v = carve(&at, nc, sizeof(span_t));
    k->w = carve(&at, nw + nc, sizeof(span_t));
    k->writes.v = carve(&at, nw, sizeof(span_t));
    k->cparam = carve(&at, nc, sizeof(long));
    k->of = carve(&at, nw, sizeof(long));
    k->uend = carve(&at, np, sizeof(size_t));
    k->dend = carve(&at, np, sizeof(size_t));
    k->decl.at = carve(&at, np + 1, sizeof(size_t));
    k->writes.at = carve(&at, np + 1, sizeof(size_t));
    return 1;
}

rs_status_t rs__exec_guard_writes(rs_exec_h x, rs_diag_t *diag)
{
    size_t nseg, ncopies = rs_capture_num_copies(x->cap), np = x->nparams;
    rs_plan_segments(x->plan, &nseg);
    size_t nw = nseg + x->replays_len + x->casts_len;
    work_t k;
    rs_status_t st = RS_OK;
    if (!work_alloc(&k, ncopies, nw, np))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    copy_spans(x, k.by_copy, k.cparam, ncopies);
    group(k.by_copy, k.cparam, ncopies, np, &k.decl);
    declared(&k.decl, k.uni, k.uend, k.dend, np, k.w);
    nw = gather_writes(x, k.by_copy, k.cparam, k.w, k.of);
    group(k.w, k.of, nw, np, &k.writes);
    for (size_t p = 0; st == RS_OK && p < np; p++) {
        size_t c0 = k.decl.at[p];
        st = check_param(x, k.writes.v + k.writes.at[p],
                         k.writes.at[p + 1] - k.writes.at[p], k.uni + c0,
                         k.uend[p] - c0, k.decl.v + c0, k.dend[p] - c0, k.w,
                         diag);
    }
    free(k.block);
    return st;
}
