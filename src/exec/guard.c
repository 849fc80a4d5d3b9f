/* The executor's own checks of a plan, made while it prepares (before any
 * byte moves) and independent of the planner that made the plan, so that a
 * planner bug is refused instead of installed. Each check is per copy or
 * per segment, never per element:
 *  - a replay from a staged box reads only elements inside that box, dim by
 *    dim (the staging buffer's span is not enough: an element one past the
 *    box in an inner dim lies inside the span, in the next row of the box);
 *  - a copy's destination, from its first to its last byte, lies inside
 *    its parameter;
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
    int64_t lo = box->start[d], hi = box->start[d];
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
    int64_t lo = c->dest_offset, hi = c->dest_offset, span;
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

/* ---- writes: declared bytes and double writes ---- */

enum { W_SEGMENT, W_REPLAY, W_CAST };

typedef struct span {
    uintptr_t lo, hi; /* [lo, hi) */
    int kind;         /* W_*, for writes */
    size_t id;        /* plan segment, replay or cast */
} span_t;

typedef struct spans {
    span_t *v;
    size_t n;
} spans_t;

static int cmp_span(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorts s and merges spans that overlap or touch, in place. */
static void merge(spans_t *s)
{
    size_t out = 0;
    qsort(s->v, s->n, sizeof(span_t), cmp_span);
    for (size_t i = 0; i < s->n; i++) {
        if (out > 0 && s->v[i].lo <= s->v[out - 1].hi) {
            if (s->v[i].hi > s->v[out - 1].hi)
                s->v[out - 1].hi = s->v[i].hi;
            continue;
        }
        s->v[out++] = s->v[i];
    }
    s->n = out;
}

/* Whether [lo, hi) lies inside one span of merged s. */
static int inside(const spans_t *s, uintptr_t lo, uintptr_t hi)
{
    size_t a = 0, b = s->n;
    while (a < b) { /* the first span starting after lo */
        size_t m = a + (b - a) / 2;
        if (s->v[m].lo <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a > 0 && hi <= s->v[a - 1].hi;
}

/* Each copy's destination bytes (absolute), indexed by copy; empty for a
 * copy that writes nothing or whose param is not bound. */
static void copy_spans(rs_exec_h x, span_t *by_copy, size_t ncopies)
{
    for (size_t ci = 0; ci < ncopies; ci++) {
        rs_copy_desc_t c;
        int64_t first, end;
        rs_capture_copy(x->cap, ci, &c);
        long p = rs_capture_find_param(x->cap, c.param);
        uintptr_t es = rs_dtype_size(c.dest_dtype);
        by_copy[ci] = (span_t){0, 0, 0, ci};
        if (p < 0 || x->binds[p].base == NULL ||
            dest_elements(&c, &first, &end) != 1)
            continue;
        uintptr_t base = (uintptr_t)x->binds[p].base;
        by_copy[ci].lo = base + (uintptr_t)first * es;
        by_copy[ci].hi = base + (uintptr_t)end * es;
    }
}

/* The bytes where two declared copies overlap, merged. */
static void declared_overlaps(const span_t *by_copy, size_t n, spans_t *out,
                              spans_t *uni)
{
    size_t far = 0;
    uni->n = 0;
    for (size_t i = 0; i < n; i++)
        if (by_copy[i].hi > by_copy[i].lo)
            uni->v[uni->n++] = by_copy[i];
    qsort(uni->v, uni->n, sizeof(span_t), cmp_span);
    out->n = 0;
    for (size_t i = 1; i < uni->n; i++) {
        if (uni->v[i].lo < uni->v[far].hi) {
            uintptr_t hi = uni->v[i].hi < uni->v[far].hi ? uni->v[i].hi
                                                         : uni->v[far].hi;
            out->v[out->n++] = (span_t){uni->v[i].lo, hi, 0, 0};
        }
        if (uni->v[i].hi > uni->v[far].hi)
            far = i;
    }
    merge(out);
    merge(uni);
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

/* The writes: exact segments, replays and casts (their copy's bytes). */
static rs_status_t gather_writes(rs_exec_h x, const span_t *by_copy,
                                 const spans_t *uni, spans_t *w,
                                 rs_diag_t *diag)
{
    size_t n;
    char what[RS_DIAG_MSG_MAX / 2];
    const rs_segment_t *segs = rs_plan_segments(x->plan, &n);
    w->n = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t base = (uintptr_t)x->binds[segs[i].param].base;
        span_t s = {base + segs[i].dst_byte,
                    base + segs[i].dst_byte + segs[i].nbytes, W_SEGMENT, i};
        if (segs[i].nbytes == 0 || base == 0)
            continue;
        if (!inside(uni, s.lo, s.hi)) {
            name_write(x, &s, what, sizeof(what));
            return rs__diag_set(diag, RS_ERR_INPUT, "plan check: %s lies "
                                "outside every copy's destination there",
                                what);
        }
        w->v[w->n++] = s;
    }
    for (size_t i = 0; i < x->replays_len; i++)
        w->v[w->n++] = (span_t){by_copy[x->replays[i].copy].lo,
                                by_copy[x->replays[i].copy].hi, W_REPLAY, i};
    for (size_t i = 0; i < x->casts_len; i++)
        w->v[w->n++] = (span_t){by_copy[x->casts[i].copy].lo,
                                by_copy[x->casts[i].copy].hi, W_CAST, i};
    return RS_OK;
}

/* Every byte two writes share must lie where declared copies overlap. */
static rs_status_t twice(rs_exec_h x, spans_t *w, const spans_t *decl,
                         rs_diag_t *diag)
{
    char a[RS_DIAG_MSG_MAX / 3], b[RS_DIAG_MSG_MAX / 3];
    size_t far = 0;
    qsort(w->v, w->n, sizeof(span_t), cmp_span);
    for (size_t i = 1; i < w->n; i++) {
        /* sorted by start: write i shares bytes with an earlier one exactly
         * when it starts before the furthest end so far, and all it shares
         * lies before that end */
        if (w->v[i].hi > w->v[i].lo && w->v[i].lo < w->v[far].hi) {
            uintptr_t hi = w->v[i].hi < w->v[far].hi ? w->v[i].hi
                                                     : w->v[far].hi;
            if (!inside(decl, w->v[i].lo, hi)) {
                name_write(x, &w->v[far], a, sizeof(a));
                name_write(x, &w->v[i], b, sizeof(b));
                return rs__diag_set(diag, RS_ERR_INPUT, "plan check: %s and "
                                    "%s write the same %llu bytes, which no "
                                    "two copies declare", a, b,
                                    (unsigned long long)(hi - w->v[i].lo));
            }
        }
        if (w->v[i].hi > w->v[far].hi)
            far = i;
    }
    return RS_OK;
}

rs_status_t rs__exec_guard_writes(rs_exec_h x, rs_diag_t *diag)
{
    size_t nseg, ncopies = rs_capture_num_copies(x->cap);
    rs_plan_segments(x->plan, &nseg);
    size_t nw = nseg + x->replays_len + x->casts_len;
    span_t *by_copy = malloc((ncopies + 1) * sizeof(span_t));
    spans_t decl = {malloc((ncopies + 1) * sizeof(span_t)), 0};
    spans_t uni = {malloc((ncopies + 1) * sizeof(span_t)), 0};
    spans_t w = {malloc((nw + 1) * sizeof(span_t)), 0};
    rs_status_t st = RS_OK;
    if (by_copy == NULL || decl.v == NULL || uni.v == NULL || w.v == NULL) {
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    } else {
        copy_spans(x, by_copy, ncopies);
        declared_overlaps(by_copy, ncopies, &decl, &uni);
        st = gather_writes(x, by_copy, &uni, &w, diag);
        if (st == RS_OK)
            st = twice(x, &w, &decl, diag);
    }
    free(by_copy);
    free(decl.v);
    free(uni.v);
    free(w.v);
    return st;
}
