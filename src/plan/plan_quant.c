/* The expansion of a capture with quantized copies: each quantized copy is
 * checked (its view a box of the source in the source's dim order, a
 * bf16/f16/f32 source, a scale region matching the grid of touched
 * blocks), its path chosen (publisher when "<src>#<spec>" and its scales
 * are served for every block it needs, else receiver), and the plan's
 * working capture built: the user's params, sources and copies at the
 * same indices, then per quantized copy its weight copy (the copy's ops
 * over the FP8 tensor) and its scale copy (the touched blocks of the scale
 * tensor into the scale region). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "geom/box.h"
#include "plan/plan_quant.h"
#include "model/sources_impl.h"

#define OOM(diag) rs__diag_set((diag), RS_ERR_NO_MEMORY, "out of memory")

/* Asked by every plan: the copies' own field, not the public accessor
 * that copies the descriptor out (30 instructions a copy, where a MoE
 * rank's copy costs about a thousand in all). */
int rs__quant_any(rs_capture_h capture)
{
    for (size_t i = 0; i < capture->copies_len; i++)
        if (capture->copies[i].quant != NULL)
            return 1;
    return 0;
}

static void refuse(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                   const rs_copy_desc_t *c, const char *fmt, ...)
    RS_PRINTF(4, 5);

/* The reason in qx->why, kept for the copy's record (qx->oom on
 * exhaustion). */
static const char *keep_why(rs__quant_expansion_t *qx)
{
    const char *w = rs__arena_strdup(&qx->work->arena, qx->why);
    qx->oom |= w == NULL;
    return w;
}

/* The copy's reason for fallback: "copy 3 into 'w': ..." as for other
 * geometry errors, so the fallback list names the copy. */
static void refuse(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                   const rs_copy_desc_t *c, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(qx->why, sizeof(qx->why), "copy %zu into '%s': ",
                     pq->copy, c->param);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(qx->why))
        vsnprintf(qx->why + n, sizeof(qx->why) - (size_t)n, fmt, ap);
    va_end(ap);
    pq->why = pq->refused = keep_why(qx);
    if (pq->refused == NULL)
        pq->refused = "out of memory"; /* refused still: the plan fails */
}

/* The source's full shape and dtype: as declared by the capture, else as
 * published, else as the FP8 tensor is published (dtype unknown then). */
const rs__source_tensor_t *rs__quant_source(rs__quant_tensors_t *t)
{
    if (!t->src_found) {
        t->src = rs__sources_find(t->sources, t->src_name);
        t->src_found = 1;
    }
    return t->src;
}

/* The record's rank and its arrays of that many dims, one run of the
 * expansion's dims in the order of the records (a pass over the
 * records reads them in the order they lie); 0 on exhaustion. */
static int set_rank(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                    int ndim)
{
    size_t n = (size_t)(ndim > 0 ? ndim : 0);
    int64_t *a = rs__arena_alloc(&qx->dims, 7 * n * sizeof(int64_t));
    if (a == NULL) {
        qx->oom = 1;
        return 0;
    }
    pq->ndim = ndim;
    pq->shape = a;
    pq->block = a + n;
    pq->bl.lo = a + 2 * n;
    pq->bl.box = a + 3 * n;
    pq->bl.glo = a + 4 * n;
    pq->bl.gn = a + 5 * n;
    pq->bl.grid = a + 6 * n;
    return 1;
}

/* The source's shape and dtype as declared, else as published; 0 when
 * neither knows the source (or on exhaustion: qx->oom). */
static int source_shape(rs__quant_expansion_t *qx, rs_capture_h cap,
                        rs__quant_tensors_t *qt, uint32_t src_id,
                        rs__planned_quant_t *pq)
{
    long d = cap->names[src_id].decl; /* rs_capture_find_source's answer */
    const rs__source_tensor_t *t;
    if (d >= 0) {
        const rs__capture_source_t *info = &cap->sources[d];
        if (!set_rank(qx, pq, info->ndim))
            return 0;
        rs__quant_copy_dims(pq->shape, info->shape, info->ndim);
        pq->src_dtype = info->dtype;
        t = qt->src; /* found by ready_step, its shape readied */
        pq->decl_same = t != NULL && t->ndim == info->ndim &&
                        t->dtype == info->dtype &&
                        rs__quant_same_dims(t->shape, info->shape, info->ndim);
        return 1;
    }
    if ((t = rs__quant_source(qt)) == NULL && (t = qt->q) == NULL)
        return 0;
    if (!set_rank(qx, pq, t->ndim))
        return 0;
    rs__quant_copy_dims(pq->shape, t->shape, t->ndim);
    pq->src_dtype = strcmp(t->name, cap->names[src_id].name) == 0
                        ? t->dtype : RS_DTYPE_INVALID;
    return 1;
}

/* The view reads a box of the source, each dim's indices contiguous, and
 * lands in the source's dim order (dims and digits by falling
 * destination stride): the block grid order the scales are written in. */
static int in_dim_order(const rs__box_t *bx, int64_t *lo, int64_t *hi)
{
    int64_t prev = INT64_MAX;
    for (int d = 0; d < bx->ndim; d++) {
        int64_t last = rs__box_coord(bx, d, bx->count[d] - 1);
        if (last - bx->start[d] + 1 != bx->count[d])
            return 0;
        lo[d] = bx->start[d];
        hi[d] = last + 1;
    }
    for (int i = 0; i < bx->nfactors;) {
        int j = i;
        while (j < bx->nfactors && bx->factors[j].sdim == bx->factors[i].sdim)
            j++;
        for (int k = j - 1; k >= i; k--) {
            if (bx->factors[k].dstride <= 0 || bx->factors[k].dstride >= prev)
                return 0;
            prev = bx->factors[k].dstride;
        }
        i = j;
    }
    return 1;
}

/* Dims of extent 1 dropped, as the contract compares scale regions. */
static int squeeze(const int64_t *dims, int n, int64_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (dims[i] != 1)
            out[k++] = dims[i];
    return k;
}

static int scale_matches(const rs__planned_quant_t *pq, const rs_quant_desc_t *q)
{
    int64_t a[RS_MAX_DIMS], s[RS_MAX_DIMS];
    int na = squeeze(pq->bl.gn, pq->ndim, a);
    int ns = squeeze(q->scale_shape, q->scale_ndim, s);
    return na == ns && rs__quant_same_dims(a, s, na);
}

/* The touched blocks: the view's box [lo, hi) rounded out to block
 * boundaries, clamped at the tensor's end. */
static void touched_blocks(rs__planned_quant_t *pq, const int64_t *lo,
                           const int64_t *hi)
{
    pq->blocks = 1;
    for (int d = 0; d < pq->ndim; d++) {
        int64_t b = pq->block[d];
        pq->bl.grid[d] = (pq->shape[d] + b - 1) / b;
        /* lo[0 .. ndim) is the view's box, which view_box or
         * geometry_known set (the analyzer does not follow the memo's
         * copy of it) */
        pq->bl.glo[d] = lo[d] / b; // NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult)
        pq->bl.gn[d] = (hi[d] + b - 1) / b - pq->bl.glo[d];
        pq->bl.lo[d] = pq->bl.glo[d] * b;
        int64_t end = (pq->bl.glo[d] + pq->bl.gn[d]) * b;
        pq->bl.box[d] = (end < pq->shape[d] ? end : pq->shape[d]) - pq->bl.lo[d];
    }
}

/* A destination region checked as the planner checks a copy's; `param`
 * is the param's index, or -1 to look its name up. On success *span_p is
 * what it spans past its offset (rs__plan_check_dest_span), -1 when that
 * is not known (an empty region). */
static const char *dest_error(rs_capture_h cap, const char *name, long param,
                              int64_t off, int ndim, const int64_t *shape,
                              const int64_t *stride, int64_t *span_p)
{
    int known = 0;
    rs__capture_copy_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.dest_offset = off;
    cc.ndim = ndim;
    cc.dest_shape = (int64_t *)shape;   /* only read */
    cc.dest_stride = (int64_t *)stride; /* only read */
    long p = param >= 0 ? param : rs_capture_find_param(cap, name);
    const char *err = p < 0 ? "parameter is not declared"
                            : rs__plan_check_dest_span(&cc, &cap->params[p],
                                                       &known, span_p);
    if (!known)
        *span_p = -1;
    return err;
}

/* The copy's param index, or -1 when the capture declares none of its
 * name: bound when the copy was added, else looked up now. */
static long param_of(rs_capture_h cap, size_t ci)
{
    const rs__capture_copy_t *c = &cap->copies[ci];
    return c->param_id != UINT32_MAX ? (long)c->param_id
                                     : rs_capture_find_param(cap, c->param);
}

/* The scale copy's ops over the whole scale tensor: a narrow per dim the
 * touched grid does not fill, then a view to the scale region's shape. */
static size_t scale_ops(const rs__planned_quant_t *pq, const rs_quant_desc_t *q,
                        rs_op_t *ops)
{
    size_t n = 0;
    int same = q->scale_ndim == pq->ndim;
    for (int d = 0; d < pq->ndim; d++) {
        same = same && q->scale_shape[d] == pq->bl.gn[d];
        if (pq->bl.gn[d] == pq->bl.grid[d])
            continue;
        memset(&ops[n], 0, sizeof(rs_op_t));
        ops[n].kind = RS_OP_NARROW;
        ops[n].arg[0] = d;
        ops[n].arg[1] = pq->bl.glo[d];
        ops[n].arg[2] = pq->bl.gn[d];
        ops[n++].has = 7;
    }
    if (!same) {
        memset(&ops[n], 0, sizeof(rs_op_t));
        ops[n].kind = RS_OP_VIEW;
        ops[n].list = q->scale_shape;
        ops[n++].nlist = (size_t)q->scale_ndim;
    }
    return n;
}

/* The memo's entry for a geometry over a source shape, or NULL. */
static rs__quant_view_memo_t *view_memo(rs__quant_expansion_t *qx,
                                        uint32_t geom,
                                        const rs__planned_quant_t *pq)
{
    rs__quant_view_memo_t *m = &qx->views[geom % RS_QUANT_VIEW_MEMO];
    if (m->ndim != pq->ndim || m->geom != geom ||
        !rs__quant_same_dims(m->shape, pq->shape, pq->ndim))
        return NULL;
    return m;
}

/* The view's box [vlo, vhi) in the source; 0 with the copy refused when
 * it is not a box in the source's dim order. A geometry resolved before
 * over the same shape is the memo's (only boxes that passed are kept). */
static int view_box(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                    uint32_t geom, const rs_copy_desc_t *c, int64_t *vlo,
                    int64_t *vhi)
{
    rs__box_t bx;
    size_t bad = c->nops;
    char why[256]; /* its first byte cleared, not all: per copy */
    why[0] = '\0';
    const rs__quant_view_memo_t *hit = view_memo(qx, geom, pq);
    size_t dims = (size_t)pq->ndim * sizeof(int64_t);
    if (hit != NULL) {
        rs__quant_copy_dims(vlo, hit->vlo, pq->ndim);
        rs__quant_copy_dims(vhi, hit->vhi, pq->ndim);
        return 1;
    }
    if (rs__geom_resolve(pq->ndim, pq->shape, c->ops, c->nops, c->ndim,
                         c->dest_shape, c->dest_stride, &bx, &bad, why,
                         sizeof(why)) != RS_OK) {
        if (bad < c->nops)
            refuse(qx, pq, c, "op %zu (%s): %s", bad, rs_op_name(c->ops[bad].kind),
                   why);
        else
            refuse(qx, pq, c, "%s", why);
        return 0;
    }
    if (bx.numel == 0) {
        refuse(qx, pq, c, "a quantized copy of an empty view");
        return 0;
    }
    if (!in_dim_order(&bx, vlo, vhi)) {
        refuse(qx, pq, c, "a quantized copy's view must be a box of '%s' in its "
               "dim order (its ops stride or reorder dims)", c->src);
        return 0;
    }
    rs__quant_view_memo_t *m = &qx->views[geom % RS_QUANT_VIEW_MEMO];
    m->geom = geom;
    m->ndim = pq->ndim;
    m->scale_ndim = -1;
    m->known = 0;
    memcpy(m->shape, pq->shape, dims);
    memcpy(m->vlo, vlo, dims);
    memcpy(m->vhi, vhi, dims);
    return 1;
}

/* 1 when the memo's view last resolved this scale region with this block
 * shape (the scale ops, a function of those and the touched blocks, then
 * resolve as they did); `keep` records it as resolved instead. */
static int scale_seen(rs__quant_view_memo_t *m, const rs__planned_quant_t *pq,
                      const rs_quant_desc_t *q, int keep)
{
    size_t dims = (size_t)pq->ndim * sizeof(int64_t);
    size_t sdims = (size_t)q->scale_ndim * sizeof(int64_t);
    if (m == NULL || q->scale_ndim > RS_MAX_DIMS)
        return 0;
    if (keep) {
        m->known = 0; /* its check was of another scale region */
        m->scale_copy = SIZE_MAX;
        m->scale_ndim = q->scale_ndim;
        memcpy(m->block, pq->block, dims);
        memcpy(m->scale_shape, q->scale_shape, sdims);
        memcpy(m->scale_stride, q->scale_stride, sdims);
        return 1;
    }
    return m->scale_ndim == q->scale_ndim &&
           rs__quant_same_dims(m->block, pq->block, pq->ndim) &&
           rs__quant_same_dims(m->scale_shape, q->scale_shape, q->scale_ndim) &&
           rs__quant_same_dims(m->scale_stride, q->scale_stride, q->scale_ndim);
}

/* 1 when the memo entry's check was under spec q. */
static int same_spec(const rs__quant_view_memo_t *m, const rs_quant_desc_t *q)
{
    if (m->scheme != q->scheme || m->format != q->format ||
        m->block_ndim != q->block_ndim || q->block_ndim > RS_MAX_DIMS)
        return 0;
    for (int d = 0; d < q->block_ndim; d++)
        if (m->spec_block[d] != q->block[d])
            return 0;
    return 1;
}

/* A memo entry's touched blocks seen as a record keeps them. */
static rs__quant_blocks_at_t blocks_at(rs__quant_blocks_t *b)
{
    rs__quant_blocks_at_t a = {b->lo, b->box, b->glo, b->gn, b->grid};
    return a;
}

/* The first n dims of each of the touched blocks' arrays (from a memo
 * entry to a record and back). */
static void copy_blocks(const rs__quant_blocks_at_t *to,
                        const rs__quant_blocks_at_t *from, int n)
{
    rs__quant_copy_dims(to->lo, from->lo, n);
    rs__quant_copy_dims(to->box, from->box, n);
    rs__quant_copy_dims(to->glo, from->glo, n);
    rs__quant_copy_dims(to->gn, from->gn, n);
    rs__quant_copy_dims(to->grid, from->grid, n);
}

/* Keeps a passed check in the view's memo entry (whose scale region is
 * q's): both regions non-empty, so that their spans decide them. */
static void remember(rs__quant_view_memo_t *m, const rs__planned_quant_t *pq,
                     const rs_quant_desc_t *q, int64_t wspan, int64_t sspan)
{
    m->known = wspan >= 0 && sspan >= 0 && q->block_ndim <= RS_MAX_DIMS;
    if (!m->known)
        return;
    m->scheme = q->scheme;
    m->format = q->format;
    m->block_ndim = q->block_ndim;
    for (int d = 0; d < q->block_ndim; d++)
        m->spec_block[d] = q->block[d];
    rs__quant_blocks_at_t to = blocks_at(&m->bl);
    copy_blocks(&to, &pq->bl, pq->ndim);
    m->weight_span = wspan;
    m->scale_span = sspan;
}

/* 1 when a region of `span` at `off` ends inside param p (a declared
 * one: p >= 0). */
static int ends_inside(rs_capture_h cap, long p, int64_t off, int64_t span)
{
    int64_t last;
    return p >= 0 && (size_t)p < cap->params_len &&
           rs__add_i64(off, span, &last) && last < cap->params[p].numel;
}

/* The check of a copy whose view, spec and scale region passed it before
 * (the memo's entry): its block shape, touched blocks and view box taken
 * from there, only the ends of its two regions checked. 0, with nothing
 * set, for any other copy (or one whose region leaves its param: the
 * full check then says how). */
static int geometry_known(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                          rs_capture_h cap, const rs_quant_desc_t *q,
                          int64_t *vlo, int64_t *vhi)
{
    const rs__capture_copy_t *cc = &cap->copies[pq->copy];
    rs__quant_view_memo_t *m = view_memo(qx, cc->geom, pq);
    if (m == NULL || !m->known || !same_spec(m, q) ||
        m->scale_ndim != q->scale_ndim ||
        !rs__quant_same_dims(m->scale_shape, q->scale_shape, q->scale_ndim) ||
        !rs__quant_same_dims(m->scale_stride, q->scale_stride, q->scale_ndim))
        return 0;
    long sp = cc->scale_param_id == UINT32_MAX ? -1 : (long)cc->scale_param_id;
    if (!ends_inside(cap, param_of(cap, pq->copy), cc->dest_offset,
                     m->weight_span) ||
        !ends_inside(cap, sp, q->scale_offset, m->scale_span))
        return 0;
    rs__quant_copy_dims(vlo, m->vlo, pq->ndim);
    rs__quant_copy_dims(vhi, m->vhi, pq->ndim);
    rs__quant_copy_dims(pq->block, m->block, pq->ndim);
    pq->blocks = 1;
    rs__quant_blocks_at_t from = blocks_at(&m->bl);
    copy_blocks(&pq->bl, &from, pq->ndim);
    qx->scale_like = m;
    return 1;
}

/* Its geometry: the view's box, its touched blocks, the scale region. */
static void check_geometry(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                           rs_capture_h cap, const rs_copy_desc_t *c,
                           const rs_quant_desc_t *q, int64_t *vlo,
                           int64_t *vhi)
{
    rs__box_t bx;
    size_t bad = 0;
    char why[256]; /* its first byte cleared, not all: per copy */
    why[0] = '\0';
    const char *err;
    int64_t wspan, sspan;
    rs_op_t *ops = qx->ops;
    if (!view_box(qx, pq, cap->copies[pq->copy].geom, c, vlo, vhi))
        return;
    touched_blocks(pq, vlo, vhi);
    char want[160], got[160];
    if (!scale_matches(pq, q))
        return refuse(qx, pq, c, "scale region %s of '%s' does not match the "
                      "grid of touched blocks %s", rs__format_dims(got,
                      sizeof(got), q->scale_shape, q->scale_ndim),
                      q->scale_param, rs__format_dims(want, sizeof(want),
                      pq->bl.gn, pq->ndim));
    if ((err = dest_error(cap, c->param, param_of(cap, pq->copy),
                          c->dest_offset, c->ndim, c->dest_shape,
                          c->dest_stride, &wspan)) != NULL)
        return refuse(qx, pq, c, "%s", err);
    if ((err = dest_error(cap, q->scale_param,
                          cap->copies[pq->copy].scale_param_id,
                          q->scale_offset, q->scale_ndim, q->scale_shape,
                          q->scale_stride, &sspan)) != NULL)
        return refuse(qx, pq, c, "scale region in '%s': %s", q->scale_param, err);
    rs__quant_view_memo_t *m = view_memo(qx, cap->copies[pq->copy].geom, pq);
    if (scale_seen(m, pq, q, 0)) {
        qx->scale_like = m;
        remember(m, pq, q, wspan, sspan);
        return;
    }
    size_t n = scale_ops(pq, q, ops);
    if (rs__geom_resolve(pq->ndim, pq->bl.grid, ops, n, q->scale_ndim,
                         q->scale_shape, q->scale_stride, &bx, &bad, why,
                         sizeof(why)) != RS_OK)
        return refuse(qx, pq, c, "scale region of '%s': %s", q->scale_param,
                      why);
    if (scale_seen(m, pq, q, 1)) {
        qx->scale_like = m;
        remember(m, pq, q, wspan, sspan);
    }
}

static int quantizable(rs_dtype_t d)
{
    return d == RS_DTYPE_BF16 || d == RS_DTYPE_F16 || d == RS_DTYPE_F32;
}

/* The spec's text, kept for the next copy: a capture's quantized copies
 * mostly share one spec, and formatting it was a tenth of a plan. */
static const char *spec_text(rs__quant_expansion_t *qx,
                             const rs_quant_desc_t *q)
{
    rs_quant_desc_t *k = &qx->spec_of;
    int same = qx->spec[0] != '\0' && k->scheme == q->scheme &&
               k->format == q->format && k->block_ndim == q->block_ndim;
    for (int d = 0; same && d < q->block_ndim; d++)
        same = qx->spec_block[d] == q->block[d];
    if (same)
        return qx->spec;
    size_t n = rs_quant_spec_format(q, qx->spec, sizeof(qx->spec));
    if (n == 0 || n >= sizeof(qx->spec))
        snprintf(qx->spec, sizeof(qx->spec), "invalid");
    *k = *q;
    for (int d = 0; d < q->block_ndim && d < RS_MAX_DIMS; d++)
        qx->spec_block[d] = q->block[d];
    if (q->block_ndim > RS_MAX_DIMS)
        qx->spec[0] = '\0'; /* not kept */
    return qx->spec;
}

/* "<src>#<spec>" and "<src>#<spec>#scale" in the working capture's arena
 * (they become its interned names), the first right after the words of
 * the receiver path's reason when no table publishes it, so that the
 * reason is that whole string (pq->qwhy, unless the plan's record would
 * cut it); 0 on exhaustion. The working capture lives as long as the
 * plan, its records included. */
static int derived_names(rs__quant_expansion_t *qx, const char *src,
                         const char *spec, rs__planned_quant_t *pq)
{
    size_t ns = strlen(src), np = strlen(spec);
    size_t qlen = ns + np + 2; /* with its NUL */
    size_t nh = sizeof(RS_QUANT_UNSERVED) - 1;
    char *w = rs__arena_alloc(&qx->work->arena,
                              nh + qlen + qlen - 1 +
                                  sizeof(RS_QUANT_SCALE_SUFFIX));
    if (w == NULL)
        return 0;
    memcpy(w, RS_QUANT_UNSERVED, nh); // NOLINT(bugprone-not-null-terminated-result)
    char *q = w + nh;
    char *sn = q + qlen;
    pq->qwhy = nh + qlen - 1 <= RS_QUANT_WHY_MAX - 1 ? w : NULL;
    /* a copy of every quantized copy: no printf; the spec's copy below
     * brings the NUL */
    memcpy(q, src, ns); // NOLINT(bugprone-not-null-terminated-result)
    q[ns] = RS_QUANT_NAME_SEP;
    memcpy(q + ns + 1, spec, np + 1);
    memcpy(sn, q, qlen - 1);
    memcpy(sn + qlen - 1, RS_QUANT_SCALE_SUFFIX,
           sizeof(RS_QUANT_SCALE_SUFFIX));
    pq->qname = q;
    pq->sname = sn;
    return 1; /* their hashes: found with their tensors (after_or_find) */
}

/* The published tensor `name`: the one after `prev` in the sources when
 * that is it, else looked up; *hash_p is rs__hash_str(name) either way.
 * Publishers list a shard's FP8 values right after it and their scales
 * right after those (docs/quantized-refit.md), so the sources mostly hold
 * "<src>#<spec>" and its "#scale" right after the tensor they derive
 * from: a name compare in lines the previous tensor brought in, and the
 * hash the sources keep with it, where a lookup in a table of some
 * 200,000 tensors is a few cache and TLB misses and the name's hash a
 * pass over it. */
static rs__source_tensor_t *after_or_find(rs_sources_h srcs,
                                          const rs__source_tensor_t *prev,
                                          const char *name, int hashed,
                                          uint64_t *hash_p)
{
    /* tables without FP8 copies (every copy on the receiver path): the
     * lookup of a name no tensor has was a sixth of such a plan, the
     * compare with the tensor after the source a cold line a copy, and
     * the name's hash is needed only to intern it (ready_own) */
    if (!rs__sources_may_derive(srcs))
        return NULL;
    if (prev != NULL) {
        size_t next = (size_t)(prev - srcs->tensors) + 1;
        if (next < srcs->tensors_len &&
            strcmp(srcs->tensors[next].name, name) == 0) {
            *hash_p = srcs->tensors[next].hash;
            return &srcs->tensors[next];
        }
    }
    if (!hashed)
        *hash_p = rs__hash_str(name);
    return rs__sources_find_hashed(srcs, name, *hash_p);
}

/* The refusal of a copy whose block shape does not apply to its source,
 * with the reason rs_quant_block_shape gives (asked again here: its
 * diagnostic is a kilobyte the common path does not carry). */
__attribute__((noinline))
static void refuse_block(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                         const rs_copy_desc_t *c, const rs_quant_desc_t *q)
{
    int64_t block[RS_MAX_DIMS];
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_quant_block_shape(q, pq->ndim, pq->shape, &d, block);
    refuse(qx, pq, c, "%s", d.msg);
}

/* Checks one quantized copy and chooses its path. */
static void analyze(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                    rs_capture_h cap, rs_sources_h srcs,
                    const rs_plan_params_t *params, const rs_copy_desc_t *c,
                    const rs_quant_desc_t *q)
{
    /* not cleared (set for the view's dims before they are read): per
     * copy, a cleared pair is a string store slower than the rest */
    int64_t vlo[RS_MAX_DIMS], vhi[RS_MAX_DIMS];
    const char *qname = pq->qname, *sname = pq->sname;
    /* pq->source: found while its batch was readied (ready_step) */
    pq->served_q = after_or_find(srcs, pq->source, qname, pq->hashed,
                                 &pq->qhash);
    pq->served_s = after_or_find(srcs, pq->served_q, sname, pq->hashed,
                                 &pq->shash);
    pq->hashed |= rs__sources_may_derive(srcs);
    rs__quant_tensors_t qt = {pq->served_q, pq->served_s, srcs, c->src,
                              pq->source, 1, SIZE_MAX, SIZE_MAX};
    pq->src_dtype = RS_DTYPE_INVALID;
    if (!source_shape(qx, cap, &qt, cap->copies[pq->copy].src_id, pq)) {
        if (qx->oom)
            return;
        return refuse(qx, pq, c, "'%s' is not published by any shard table, nor "
                      "is '%s'", c->src, qname);
    }
    if (pq->src_dtype != RS_DTYPE_INVALID && !quantizable(pq->src_dtype))
        return refuse(qx, pq, c, "source '%s' is %s; only bf16, f16 and f32 "
                      "sources are quantized", c->src,
                      rs_dtype_name(pq->src_dtype));
    if (!geometry_known(qx, pq, cap, q, vlo, vhi)) {
        if (rs_quant_block_shape(q, pq->ndim, pq->shape, NULL, pq->block) !=
            RS_OK)
            return refuse_block(qx, pq, c, q);
        check_geometry(qx, pq, cap, c, q, vlo, vhi);
        if (pq->refused != NULL)
            return;
    }
    if ((qt.q == NULL || qt.s == NULL) && pq->src_dtype != RS_DTYPE_INVALID) {
        /* the receiver path over tables without this copy's FP8 tensors,
         * every copy's where no publisher quantizes: formatting and
         * keeping the same reason per copy was a twentieth of a plan */
        pq->path = RS_QUANT_PATH_RECEIVER;
        pq->unserved = qt.q == NULL ? 1 : 2;
        return;
    }
    if (rs__quant_publisher_serves(&qt, pq, c->src, qname, sname, vlo, vhi,
                                   qx->why, sizeof(qx->why))) {
        double pub, recv;
        rs__quant_path_costs(&qt, params, pq, vlo, vhi, &pub, &recv);
        if (recv < pub) {
            pq->path = RS_QUANT_PATH_RECEIVER;
            snprintf(qx->why, sizeof(qx->why), "'%s' is served, but reading "
                     "and quantizing '%s' is estimated at %.3g us against "
                     "%.3g us for the served copy", qname, c->src, recv * 1e6,
                     pub * 1e6);
            pq->why = keep_why(qx);
            return;
        }
        pq->path = RS_QUANT_PATH_PUBLISHER;
        pq->served = 1; /* the reason is written by assembly */
        return;
    }
    pq->path = RS_QUANT_PATH_RECEIVER;
    if (pq->src_dtype == RS_DTYPE_INVALID) {
        char why[sizeof(qx->why)];
        memcpy(why, qx->why, sizeof(why));
        refuse(qx, pq, c, "'%s' is not published, and %s", c->src, why);
        return;
    }
    pq->why = keep_why(qx);
}

/* Quantized copy pq's role, and its source as published: the planner's
 * record needs no lookup of its own. A name already noted as derived
 * stays derived. */
static void note_quant(rs__quant_expansion_t *qx, const rs__planned_quant_t *pq,
                       uint32_t src)
{
    /* its declared source checked by the analysis: a mark in the roles,
     * which the planner's check of declared sources reads for every copy
     * (the record would be a cold line a quantized copy) */
    qx->role[pq->copy] = pq->decl_same ? RS_QROLE_QUANT_CHECKED
                                       : RS_QROLE_QUANT;
    qx->owner[pq->copy] = (size_t)(pq - qx->q);
    if (qx->name_known[src] == 0) {
        qx->name_known[src] = RS_QUANT_KNOWN_SOURCE;
        qx->tensor_of_name[src] = pq->source;
    }
}

/* An accepted copy's derived copies (weight name wid, scales sid): their
 * role by its path and their sources as the analysis found them. */
static void note_derived(rs__quant_expansion_t *qx,
                         const rs__planned_quant_t *pq, uint32_t wid,
                         uint32_t sid)
{
    unsigned char r = pq->path == RS_QUANT_PATH_PUBLISHER ? RS_QROLE_DERIVED
                                                          : RS_QROLE_LOCAL;
    size_t i = (size_t)(pq - qx->q);
    qx->role[pq->weight_copy] = qx->role[pq->scale_copy] = r;
    qx->owner[pq->weight_copy] = qx->owner[pq->scale_copy] = i;
    qx->name_known[wid] = qx->name_known[sid] = RS_QUANT_KNOWN_DERIVED;
    qx->tensor_of_name[wid] = pq->served_q;
    qx->tensor_of_name[sid] = pq->served_s;
}

/* The scale copy: the geometry of the last one made for the same view
 * and scale region when there is one (its ops, a narrow of the touched
 * blocks and a view, are then equal), else its ops built and numbered. */
static rs_status_t add_scale(rs__quant_expansion_t *qx,
                             rs__planned_quant_t *pq, const rs_quant_desc_t *q,
                             uint32_t sid, rs_diag_t *diag)
{
    rs__quant_view_memo_t *m = qx->scale_like;
    const rs__capture_copy_t *c = &qx->work->copies[pq->copy];
    if (m != NULL && m->scale_copy != SIZE_MAX)
        return rs__capture_add_like_at(qx->work, m->scale_copy, sid,
                                       c->scale_param_id, q->scale_offset,
                                       diag);
    rs_op_t *ops = qx->ops;
    rs_copy_desc_t s = {pq->sname, q->scale_param, ops, scale_ops(pq, q, ops),
                        q->scale_offset, q->scale_ndim, q->scale_shape,
                        q->scale_stride, RS_DTYPE_F32};
    rs_status_t st = rs__capture_add_copy_id(qx->work, &s, sid, diag);
    if (st == RS_OK && m != NULL)
        m->scale_copy = pq->scale_copy;
    return st;
}

/* The working capture's ids of the copy's two derived names. With no
 * name of the user's like them and the expansion's first spec, they are
 * the ids of the source's derived names, added unindexed on the first
 * copy of that source: the same names exactly, found without their hash
 * (a hash and a probe of the name index per name was a tenth of a
 * receiver-only plan; the planner finds a derived copy's tensor by its
 * name id, rs__quant_known_tensor). Else interned (with their hashes). */
static int derived_ids(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                       uint32_t *wid, uint32_t *sid)
{
    rs_capture_h w = qx->work;
    if (qx->fresh_names && pq->first_spec) {
        uint32_t src = w->copies[pq->copy].src_id; /* a user's name */
        if (qx->derived_of[src] != 0) {
            *wid = qx->derived_of[src] - 1;
            *sid = *wid + 1;
            return 1;
        }
        if (!rs__capture_add_name_unindexed(w, pq->qname, wid) ||
            !rs__capture_add_name_unindexed(w, pq->sname, sid))
            return 0;
        qx->derived_of[src] = *wid + 1; /* the scales' is *wid + 1 */
        return 1;
    }
    if (!pq->hashed) {
        pq->qhash = rs__hash_str(pq->qname);
        pq->shash = rs__hash_str(pq->sname);
        pq->hashed = 1;
    }
    return rs__capture_intern_owned(w, pq->qname, pq->qhash, wid) &&
           rs__capture_intern_owned(w, pq->sname, pq->shash, sid);
}

/* The two derived copies of an accepted quantized copy: the weight copy
 * is the quantized copy itself but for its source and dtype. Their names
 * are already in the working capture's arena. */
static rs_status_t add_derived(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                               const rs_quant_desc_t *q, rs_diag_t *diag)
{
    uint32_t wid, sid;
    pq->weight_copy = rs_capture_num_copies(qx->work);
    pq->scale_copy = pq->weight_copy + 1;
    if (!derived_ids(qx, pq, &wid, &sid))
        return OOM(diag);
    note_derived(qx, pq, wid, sid);
    rs_status_t st = rs__capture_add_like(qx->work, pq->copy, wid, q->format,
                                          diag);
    if (st == RS_OK)
        st = add_scale(qx, pq, q, sid, diag);
    return st;
}

/* The first pass over a quantized copy: its record and its derived
 * names (their hashes come with their tensors, after_or_find). */
static rs_status_t name_one(rs__quant_expansion_t *qx, rs_capture_h cap,
                            size_t ci, rs_diag_t *diag)
{
    rs__planned_quant_t *pq = &qx->q[qx->nq++];
    const rs__capture_copy_t *c = &cap->copies[ci];
    memset(pq, 0, sizeof(*pq));
    pq->copy = ci;
    pq->weight_copy = pq->scale_copy = SIZE_MAX;
    const char *spec = spec_text(qx, c->quant);
    if (qx->first_spec[0] == '\0')
        snprintf(qx->first_spec, sizeof(qx->first_spec), "%s", spec);
    pq->first_spec = strcmp(spec, qx->first_spec) == 0;
    if (!derived_names(qx, c->src, spec, pq))
        return OOM(diag);
    return RS_OK;
}

/* Analyzes quantized copy pq and appends its derived copies. */
static rs_status_t expand_one(rs__quant_expansion_t *qx, rs_capture_h cap,
                              rs_sources_h srcs, const rs_plan_params_t *params,
                              rs__planned_quant_t *pq, rs_diag_t *diag)
{
    rs_copy_desc_t c;
    rs_quant_desc_t q;
    size_t ci = pq->copy;
    rs_capture_copy(cap, ci, &c);
    rs_capture_copy_quant(cap, ci, &q);
    pq->selected = rs__plan_selected(params, c.param);
    pq->format = q.format;
    qx->scale_like = NULL; /* set by the analysis */
    if (param_of(cap, ci) < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu: param '%s' is not "
                            "declared", ci, c.param);
    analyze(qx, pq, cap, srcs, params, &c, &q);
    if (qx->oom)
        return OOM(diag);
    note_quant(qx, pq, cap->copies[ci].src_id);
    return pq->refused != NULL ? RS_OK : add_derived(qx, pq, &q, diag);
}

/* Copies readied and analyzed together: enough that the misses of one
 * step over the batch overlap, few enough that what the steps bring in
 * is still in the core's caches when the analysis reads it. */
#define RS_QUANT_BATCH 32

/* The published tensor at index i, or NULL past the last. */
static const rs__source_tensor_t *tensor_at(rs_sources_h srcs, size_t i)
{
    return i < srcs->tensors_len ? &srcs->tensors[i] : NULL;
}

/* The first step's part for the record itself: its lines past the first
 * (written by the naming pass, long before) readied for the analysis to
 * write, and, where the tables hold no FP8 copies but the
 * derived names are interned all the same (the user's capture has names
 * like them, derived_ids), the names hashed now so that their slots in
 * the working capture's name index are readied for add_derived. */
static void ready_own(const rs__quant_expansion_t *qx, rs_sources_h srcs,
                      rs__planned_quant_t *pq)
{
    for (size_t at = 64; at < sizeof(*pq); at += 64)
        __builtin_prefetch((const char *)pq + at, 1);
    if (rs__sources_may_derive(srcs))
        return; /* the hashes come with the tensors found */
    if (qx->fresh_names && pq->first_spec)
        return; /* its derived names are not interned (derived_ids) */
    const rs__strmap_t *names = &qx->work->name_index;
    pq->qhash = rs__hash_str(pq->qname);
    pq->shash = rs__hash_str(pq->sname);
    pq->hashed = 1;
    __builtin_prefetch(&names->slots[pq->qhash & (names->cap - 1)], 1);
    __builtin_prefetch(&names->slots[pq->shash & (names->cap - 1)], 1);
}

/* One step of readying what a quantized copy's analysis reads, each step
 * loading only what the step before brought in and prefetching what the
 * next reads: 0 its source's table slot and its quantization record, 1
 * the slot's key and tensor record and the record's scale region, 2 the
 * source found (kept for the analysis) and the records after it, where
 * publishers put "<src>#<spec>" and its scales, 3 the source's shape and
 * those records' names, shapes, shard lists and slots in the working
 * capture's name index, 4 their first shard's box, which the publisher
 * check and the path estimate read. Prefetches only: the analysis reads
 * the same data whether they land or not. */
static void ready_step(const rs__quant_expansion_t *qx, rs_sources_h srcs,
                       rs_capture_h cap, rs__planned_quant_t *pq, int step)
{
    const rs__capture_copy_t *c = &cap->copies[pq->copy];
    const rs__capture_name_t *src = &cap->names[c->src_id];
    if (step < 2) {
        rs__sources_prefetch(srcs, src->hash, step);
        if (step == 0) {
            __builtin_prefetch(c->quant);
            ready_own(qx, srcs, pq);
        } else { /* the scale region the analysis checks */
            __builtin_prefetch(c->quant->scale_shape);
            __builtin_prefetch(c->quant->scale_stride);
        }
        return;
    }
    if (step == 2)
        pq->source = rs__sources_find_hashed(srcs, src->name, src->hash);
    if (pq->source == NULL)
        return;
    if (step == 3) /* source_shape compares it with the declared one */
        __builtin_prefetch(pq->source->shape);
    if (!rs__sources_may_derive(srcs))
        return; /* no table holds "<src>#<spec>": nothing after it to read */
    const rs__strmap_t *names = &qx->work->name_index;
    size_t at = (size_t)(pq->source - srcs->tensors);
    for (size_t k = at + 1; k <= at + 2; k++) {
        const rs__source_tensor_t *t = tensor_at(srcs, k);
        if (t == NULL)
            return;
        if (step == 2) { /* a record may span two lines */
            __builtin_prefetch(t);
            __builtin_prefetch((const char *)(t + 1) - 1);
        } else if (step == 3) {
            __builtin_prefetch(t->name);
            __builtin_prefetch(t->shape);
            __builtin_prefetch(t->shards);
            /* the slot add_derived interns its name in, when it is the
             * copy's "<src>#<spec>" or scales (a table of 60,000 slots
             * for a rank with its experts quantized) */
            __builtin_prefetch(&names->slots[t->hash & (names->cap - 1)], 1);
        } else if (t->shards_len > 0) {
            __builtin_prefetch(t->shards[0].offset);
            __builtin_prefetch(t->shards[0].shape);
        }
    }
}

/* The names of every quantized copy first, then the copies analyzed and
 * expanded in order a batch at a time, each batch readied in steps over
 * all of its copies first (ready_step): a MoE rank's thousand quantized
 * copies each read a source's slot in a table of some 200,000 tensors,
 * the tensors after it and their first shard, a dozen cache misses a
 * copy that then overlap instead of coming one after another. */
static rs_status_t expand_all(rs__quant_expansion_t *qx, rs_capture_h cap,
                              rs_sources_h srcs, const rs_plan_params_t *params,
                              rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    for (size_t ci = 0; st == RS_OK && ci < cap->copies_len; ci++)
        if (cap->copies[ci].quant != NULL)
            st = name_one(qx, cap, ci, diag);
    for (size_t at = 0; st == RS_OK && at < qx->nq; at += RS_QUANT_BATCH) {
        size_t end = qx->nq - at < RS_QUANT_BATCH ? qx->nq : at + RS_QUANT_BATCH;
        for (int step = 0; step <= 4; step++)
            for (size_t i = at; i < end; i++)
                ready_step(qx, srcs, cap, &qx->q[i], step);
        for (size_t i = at; st == RS_OK && i < end; i++)
            st = expand_one(qx, cap, srcs, params, &qx->q[i], diag);
    }
    return st;
}

/* The per-copy and per-name tables, made before the expansion at the
 * most it can add (two copies and two names per quantized copy), so that
 * each copy's role and tensors are noted while its record is at hand. */
static rs_status_t alloc_roles(rs__quant_expansion_t *qx, size_t ncopies,
                               size_t nnames, rs_diag_t *diag)
{
    qx->role = calloc(ncopies + 1, 1);
    qx->owner = calloc(ncopies + 1, sizeof(size_t));
    qx->name_known = calloc(nnames + 1, 1);
    qx->tensor_of_name = calloc(nnames + 1, sizeof(rs__source_tensor_t *));
    if (qx->role == NULL || qx->owner == NULL || qx->name_known == NULL ||
        qx->tensor_of_name == NULL)
        return OOM(diag);
    return RS_OK;
}

rs_status_t rs__quant_expand(rs_capture_h capture, rs_sources_h sources,
                             const rs_plan_params_t *params, rs_diag_t *diag,
                             rs__quant_expansion_t **qx_p)
{
    rs__quant_expansion_t *qx = calloc(1, sizeof(*qx));
    size_t n = rs_capture_num_copies(capture), nquant = 0;
    rs_status_t st;
    for (size_t i = 0; i < n; i++)
        nquant += capture->copies[i].quant != NULL;
    /* one record per quantized copy, each cleared as it is analyzed: a
     * record per copy, cleared up front, was a megabyte per MoE rank */
    if (qx == NULL ||
        (qx->q = malloc((nquant + 1) * sizeof(rs__planned_quant_t))) == NULL ||
        (qx->ops = calloc(RS_MAX_DIMS + 1, sizeof(rs_op_t))) == NULL) {
        rs__quant_free(qx);
        return OOM(diag);
    }
    qx->nuser = n;
    qx->fresh_names = !rs__capture_named_derived(capture);
    if (qx->fresh_names &&
        (qx->derived_of = calloc(capture->names_len + 1,
                                 sizeof(uint32_t))) == NULL) {
        rs__quant_free(qx);
        return OOM(diag);
    }
    /* room for the two derived copies and names of each quantized copy */
    st = rs__capture_work_copy(capture, 2 * nquant, &qx->work, diag);
    if (st == RS_OK)
        st = alloc_roles(qx, n + 2 * nquant, capture->names_len + 2 * nquant,
                         diag);
    if (st == RS_OK)
        st = expand_all(qx, capture, sources, params, diag);
    if (st != RS_OK) {
        rs__quant_free(qx);
        return st;
    }
    *qx_p = qx;
    return RS_OK;
}

void rs__quant_free(rs__quant_expansion_t *qx)
{
    if (qx == NULL)
        return;
    free(qx->segs.v);
    free(qx->derived_of);
    rs__arena_free(&qx->dims);
    free(qx->q);
    free(qx->ops);
    free(qx->role);
    free(qx->owner);
    free(qx->name_known);
    free(qx->tensor_of_name);
    rs_capture_destroy(qx->work);
    free(qx);
}

int rs__quant_known_tensor(const rs__planner_t *b, uint32_t name_id,
                           struct rs__source_tensor **t_p)
{
    const rs__quant_expansion_t *qx = b->quant;
    if (qx == NULL || !qx->name_known[name_id])
        return 0;
    *t_p = qx->tensor_of_name[name_id];
    return qx->name_known[name_id];
}

/* How far ahead of the walk the derived copies' tensors are readied:
 * the record two steps ahead, then its shard list and grid one step
 * ahead (a derived copy's walk is otherwise a few cache misses on data
 * the expansion left long before). */
#define RS_QUANT_WALK_AHEAD 4

/* The published tensor of working copy ci when it is a derived copy on
 * the publisher path the analysis found published, else NULL. */
static const rs__source_tensor_t *derived_tensor(const rs__quant_expansion_t *qx,
                                                 size_t ci)
{
    if (qx->role[ci] != RS_QROLE_DERIVED)
        return NULL;
    return qx->tensor_of_name[qx->work->copies[ci].src_id];
}

void rs__quant_ready_walk(const rs__planner_t *b, size_t ci)
{
    const rs__quant_expansion_t *qx = b->quant;
    size_t n = qx->work->copies_len;
    size_t far = ci + (size_t)2 * RS_QUANT_WALK_AHEAD;
    const rs__source_tensor_t *t;
    if (far < n && (t = derived_tensor(qx, far)) != NULL) {
        __builtin_prefetch(t); /* a record may span two lines */
        __builtin_prefetch((const char *)(t + 1) - 1);
    }
    if (ci + RS_QUANT_WALK_AHEAD < n &&
        (t = derived_tensor(qx, ci + RS_QUANT_WALK_AHEAD)) != NULL) {
        __builtin_prefetch(t->shards);
        __builtin_prefetch(t->shape); /* the box memo's key */
        if (t->grid != NULL)
            __builtin_prefetch(t->grid);
    }
}

void rs__quant_scale_pair(rs__planner_t *b, size_t ci)
{
    const rs__quant_expansion_t *qx = b->quant;
    const rs__planned_quant_t *pq = &qx->q[qx->owner[ci]];
    const rs__source_tensor_t *tq = pq->served_q;
    uint32_t first = b->last_first;
    if (pq->scale_copy != ci || b->last_walked != pq->weight_copy ||
        tq == NULL || first >= tq->shards_len)
        return;
    b->walk_pair = first;
    b->walk_pair_session = tq->shards[first].session;
}

int rs__quant_decl_checked(const rs__planner_t *b, size_t ci)
{
    const rs__quant_expansion_t *qx = b->quant;
    return qx != NULL && qx->role[ci] == RS_QROLE_QUANT_CHECKED;
}

size_t rs__quant_declared_copies(const rs__planner_t *b)
{
    const rs__quant_expansion_t *qx = b->quant;
    if (qx == NULL || !qx->fresh_names)
        return b->cap->copies_len;
    return qx->nuser;
}

int rs__quant_role(const rs__planner_t *b, size_t ci)
{
    if (b->quant == NULL)
        return RS_QROLE_PLAIN;
    int r = b->quant->role[ci];
    return r == RS_QROLE_QUANT_CHECKED ? RS_QROLE_QUANT : r;
}
