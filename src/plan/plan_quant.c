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

static void refuse(rs__planned_quant_t *pq, const rs_copy_desc_t *c, const char *fmt,
                   ...) RS_PRINTF(3, 4);

/* The copy's reason for fallback: "copy 3 into 'w': ..." as for other
 * geometry errors, so the fallback list names the copy. */
static void refuse(rs__planned_quant_t *pq, const rs_copy_desc_t *c, const char *fmt,
                   ...)
{
    va_list ap;
    int n = snprintf(pq->why, sizeof(pq->why), "copy %zu into '%s': ",
                     pq->copy, c->param);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(pq->why))
        vsnprintf(pq->why + n, sizeof(pq->why) - (size_t)n, fmt, ap);
    va_end(ap);
    pq->refused = pq->why;
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

static int source_shape(rs_capture_h cap, rs__quant_tensors_t *qt,
                        const char *src, rs__planned_quant_t *pq)
{
    long d = rs_capture_find_source(cap, src);
    const rs__source_tensor_t *t;
    if (d >= 0) {
        rs_source_info_t info;
        rs_capture_source(cap, (size_t)d, &info);
        pq->ndim = info.ndim;
        memcpy(pq->shape, info.shape, (size_t)info.ndim * sizeof(int64_t));
        pq->src_dtype = info.dtype;
        return 1;
    }
    if ((t = rs__quant_source(qt)) == NULL && (t = qt->q) == NULL)
        return 0;
    pq->ndim = t->ndim;
    memcpy(pq->shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
    pq->src_dtype = strcmp(t->name, src) == 0 ? t->dtype : RS_DTYPE_INVALID;
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
    int na = squeeze(pq->gn, pq->ndim, a);
    int ns = squeeze(q->scale_shape, q->scale_ndim, s);
    return na == ns && memcmp(a, s, (size_t)na * sizeof(int64_t)) == 0;
}

/* The touched blocks: the view's box [lo, hi) rounded out to block
 * boundaries, clamped at the tensor's end. */
static void touched_blocks(rs__planned_quant_t *pq, const int64_t *lo,
                           const int64_t *hi)
{
    for (int d = 0; d < pq->ndim; d++) {
        int64_t b = pq->block[d];
        pq->grid[d] = (pq->shape[d] + b - 1) / b;
        pq->glo[d] = lo[d] / b;
        pq->gn[d] = (hi[d] + b - 1) / b - pq->glo[d];
        pq->lo[d] = pq->glo[d] * b;
        int64_t end = (pq->glo[d] + pq->gn[d]) * b;
        pq->box[d] = (end < pq->shape[d] ? end : pq->shape[d]) - pq->lo[d];
    }
}

/* A destination region checked as the planner checks a copy's. */
static const char *dest_error(rs_capture_h cap, const char *param, int64_t off,
                              int ndim, const int64_t *shape,
                              const int64_t *stride)
{
    rs__capture_copy_t cc;
    memset(&cc, 0, sizeof(cc));
    cc.dest_offset = off;
    cc.ndim = ndim;
    cc.dest_shape = (int64_t *)shape;   /* only read */
    cc.dest_stride = (int64_t *)stride; /* only read */
    long p = rs_capture_find_param(cap, param);
    return p < 0 ? "parameter is not declared"
                 : rs__plan_check_dest(&cc, &cap->params[p]);
}

/* The scale copy's ops over the whole scale tensor: a narrow per dim the
 * touched grid does not fill, then a view to the scale region's shape. */
static size_t scale_ops(const rs__planned_quant_t *pq, const rs_quant_desc_t *q,
                        rs_op_t *ops)
{
    size_t n = 0;
    int same = q->scale_ndim == pq->ndim;
    for (int d = 0; d < pq->ndim; d++) {
        same = same && q->scale_shape[d] == pq->gn[d];
        if (pq->gn[d] == pq->grid[d])
            continue;
        memset(&ops[n], 0, sizeof(rs_op_t));
        ops[n].kind = RS_OP_NARROW;
        ops[n].arg[0] = d;
        ops[n].arg[1] = pq->glo[d];
        ops[n].arg[2] = pq->gn[d];
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

/* Its geometry: the view's box, its touched blocks, the scale region. */
static void check_geometry(rs__planned_quant_t *pq, rs_capture_h cap,
                           const rs_copy_desc_t *c, const rs_quant_desc_t *q,
                           rs_op_t *ops, int64_t *vlo, int64_t *vhi)
{
    rs__box_t bx;
    size_t bad = c->nops;
    char why[256] = "";
    const char *err;
    if (rs__geom_resolve(pq->ndim, pq->shape, c->ops, c->nops, c->ndim,
                         c->dest_shape, c->dest_stride, &bx, &bad, why,
                         sizeof(why)) != RS_OK) {
        if (bad < c->nops)
            refuse(pq, c, "op %zu (%s): %s", bad, rs_op_name(c->ops[bad].kind),
                   why);
        else
            refuse(pq, c, "%s", why);
        return;
    }
    if (bx.numel == 0)
        return refuse(pq, c, "a quantized copy of an empty view");
    if (!in_dim_order(&bx, vlo, vhi))
        return refuse(pq, c, "a quantized copy's view must be a box of '%s' "
                      "in its dim order (its ops stride or reorder dims)",
                      c->src);
    touched_blocks(pq, vlo, vhi);
    char want[160], got[160];
    if (!scale_matches(pq, q))
        return refuse(pq, c, "scale region %s of '%s' does not match the "
                      "grid of touched blocks %s", rs__format_dims(got,
                      sizeof(got), q->scale_shape, q->scale_ndim),
                      q->scale_param, rs__format_dims(want, sizeof(want),
                      pq->gn, pq->ndim));
    if ((err = dest_error(cap, c->param, c->dest_offset, c->ndim,
                          c->dest_shape, c->dest_stride)) != NULL)
        return refuse(pq, c, "%s", err);
    if ((err = dest_error(cap, q->scale_param, q->scale_offset, q->scale_ndim,
                          q->scale_shape, q->scale_stride)) != NULL)
        return refuse(pq, c, "scale region in '%s': %s", q->scale_param, err);
    size_t n = scale_ops(pq, q, ops);
    if (rs__geom_resolve(pq->ndim, pq->grid, ops, n, q->scale_ndim,
                         q->scale_shape, q->scale_stride, &bx, &bad, why,
                         sizeof(why)) != RS_OK)
        refuse(pq, c, "scale region of '%s': %s", q->scale_param, why);
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

/* "<src>#<spec>" and "<src>#<spec>#scale", malloc'd; 0 on exhaustion. */
static int derived_names(const char *src, const char *spec, char **qname,
                         char **sname)
{
    size_t ns = strlen(src), np = strlen(spec);
    size_t len = ns + np + sizeof(RS_QUANT_SCALE_SUFFIX) + 2;
    *qname = malloc(len);
    *sname = malloc(len);
    if (*qname == NULL || *sname == NULL) {
        free(*qname);
        free(*sname);
        return 0;
    }
    memcpy(*qname, src, ns); /* a copy of every quantized copy: no printf */
    (*qname)[ns] = RS_QUANT_NAME_SEP;
    memcpy(*qname + ns + 1, spec, np + 1);
    memcpy(*sname, *qname, ns + np + 1);
    memcpy(*sname + ns + np + 1, RS_QUANT_SCALE_SUFFIX,
           sizeof(RS_QUANT_SCALE_SUFFIX));
    return 1;
}

/* Checks one quantized copy and chooses its path. */
static void analyze(rs__planned_quant_t *pq, rs_capture_h cap, rs_sources_h srcs,
                    const rs_plan_params_t *params, const rs_copy_desc_t *c,
                    const rs_quant_desc_t *q, rs_op_t *ops, const char *qname,
                    const char *sname)
{
    int64_t vlo[RS_MAX_DIMS] = {0}, vhi[RS_MAX_DIMS] = {0};
    rs_diag_t d = {RS_OK, ""};
    pq->served_q = rs__sources_find(srcs, qname);
    pq->served_s = rs__sources_find(srcs, sname);
    rs__quant_tensors_t qt = {pq->served_q, pq->served_s, srcs, c->src, NULL,
                              0};
    pq->src_dtype = RS_DTYPE_INVALID;
    if (!source_shape(cap, &qt, c->src, pq))
        return refuse(pq, c, "'%s' is not published by any shard table, nor "
                      "is '%s'", c->src, qname);
    if (pq->src_dtype != RS_DTYPE_INVALID && !quantizable(pq->src_dtype))
        return refuse(pq, c, "source '%s' is %s; only bf16, f16 and f32 "
                      "sources are quantized", c->src,
                      rs_dtype_name(pq->src_dtype));
    if (rs_quant_block_shape(q, pq->ndim, pq->shape, &d, pq->block) != RS_OK)
        return refuse(pq, c, "%s", d.msg);
    check_geometry(pq, cap, c, q, ops, vlo, vhi);
    if (pq->refused != NULL)
        return;
    if (rs__quant_publisher_serves(&qt, pq, c->src, qname, sname, vlo, vhi,
                                   pq->why, sizeof(pq->why))) {
        double pub, recv;
        rs__quant_path_costs(&qt, params, pq, vlo, vhi, &pub, &recv);
        if (recv < pub) {
            pq->path = RS_QUANT_PATH_RECEIVER;
            snprintf(pq->why, sizeof(pq->why), "'%s' is served, but reading "
                     "and quantizing '%s' is estimated at %.3g us against "
                     "%.3g us for the served copy", qname, c->src, recv * 1e6,
                     pub * 1e6);
            return;
        }
        pq->path = RS_QUANT_PATH_PUBLISHER;
        snprintf(pq->why, sizeof(pq->why), "'%s' and its scales are served "
                 "for every block the copy needs", qname);
        return;
    }
    pq->path = RS_QUANT_PATH_RECEIVER;
    if (pq->src_dtype == RS_DTYPE_INVALID) {
        char why[sizeof(pq->why)];
        memcpy(why, pq->why, sizeof(why));
        refuse(pq, c, "'%s' is not published, and %s", c->src, why);
    }
}

/* The two derived copies of an accepted quantized copy. */
static rs_status_t add_derived(rs__quant_expansion_t *qx, rs__planned_quant_t *pq,
                               const rs_copy_desc_t *c,
                               const rs_quant_desc_t *q, const char *qname,
                               const char *sname, rs_diag_t *diag)
{
    rs_op_t *ops = qx->ops;
    rs_copy_desc_t w = *c, s;
    w.src = qname;
    w.dest_dtype = q->format;
    s = (rs_copy_desc_t){sname, q->scale_param, ops, scale_ops(pq, q, ops),
                         q->scale_offset, q->scale_ndim, q->scale_shape,
                         q->scale_stride, RS_DTYPE_F32};
    pq->weight_copy = rs_capture_num_copies(qx->work);
    pq->scale_copy = pq->weight_copy + 1;
    rs_status_t st = rs_capture_add_copy(qx->work, &w, diag);
    if (st == RS_OK)
        st = rs_capture_add_copy(qx->work, &s, diag);
    return st;
}

/* Analyzes quantized copy ci and appends its derived copies. */
static rs_status_t expand_one(rs__quant_expansion_t *qx, rs_capture_h cap,
                              rs_sources_h srcs, const rs_plan_params_t *params,
                              size_t ci, rs_diag_t *diag)
{
    rs__planned_quant_t *pq = &qx->q[qx->nq++];
    rs_copy_desc_t c;
    rs_quant_desc_t q;
    char *qname, *sname;
    rs_capture_copy(cap, ci, &c);
    rs_capture_copy_quant(cap, ci, &q);
    memset(pq, 0, sizeof(*pq));
    pq->copy = ci;
    pq->weight_copy = pq->scale_copy = SIZE_MAX;
    pq->selected = rs__plan_selected(params, c.param);
    pq->format = q.format;
    if (!derived_names(c.src, spec_text(qx, &q), &qname, &sname))
        return OOM(diag);
    if (rs_capture_find_param(cap, c.param) < 0) {
        free(qname);
        free(sname);
        return rs__diag_set(diag, RS_ERR_INPUT, "copy %zu: param '%s' is not "
                            "declared", ci, c.param);
    }
    analyze(pq, cap, srcs, params, &c, &q, qx->ops, qname, sname);
    rs_status_t st = pq->refused != NULL
                         ? RS_OK
                         : add_derived(qx, pq, &c, &q, qname, sname, diag);
    free(qname);
    free(sname);
    return st;
}

/* The derived copies' sources as the analysis found them published. */
static void note_tensors(rs__quant_expansion_t *qx,
                         const rs__planned_quant_t *pq)
{
    const rs__capture_copy_t *w = &qx->work->copies[pq->weight_copy];
    const rs__capture_copy_t *s = &qx->work->copies[pq->scale_copy];
    qx->name_known[w->src_id] = qx->name_known[s->src_id] = 1;
    qx->tensor_of_name[w->src_id] = pq->served_q;
    qx->tensor_of_name[s->src_id] = pq->served_s;
}

/* Every working copy's role and owner, once the derived copies exist. */
static rs_status_t assign_roles(rs__quant_expansion_t *qx, rs_diag_t *diag)
{
    size_t n = rs_capture_num_copies(qx->work);
    size_t names = qx->work->names_len;
    qx->role = calloc(n + 1, 1);
    qx->owner = calloc(n + 1, sizeof(size_t));
    qx->name_known = calloc(names + 1, 1);
    qx->tensor_of_name = calloc(names + 1, sizeof(rs__source_tensor_t *));
    if (qx->role == NULL || qx->owner == NULL || qx->name_known == NULL ||
        qx->tensor_of_name == NULL)
        return OOM(diag);
    for (size_t i = 0; i < qx->nq; i++) {
        const rs__planned_quant_t *pq = &qx->q[i];
        qx->role[pq->copy] = RS_QROLE_QUANT;
        qx->owner[pq->copy] = i;
        if (pq->refused != NULL)
            continue;
        int r = pq->path == RS_QUANT_PATH_PUBLISHER ? RS_QROLE_DERIVED
                                                    : RS_QROLE_LOCAL;
        qx->role[pq->weight_copy] = qx->role[pq->scale_copy] =
            (unsigned char)r;
        qx->owner[pq->weight_copy] = qx->owner[pq->scale_copy] = i;
        note_tensors(qx, pq);
    }
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
    st = rs__capture_work_copy(capture, &qx->work, diag);
    for (size_t ci = 0; st == RS_OK && ci < n; ci++) {
        rs_quant_desc_t q;
        if (rs_capture_copy_quant(capture, ci, &q))
            st = expand_one(qx, capture, sources, params, ci, diag);
    }
    if (st == RS_OK)
        st = assign_roles(qx, diag);
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
    for (size_t i = 0; i < qx->nq; i++)
        free(qx->q[i].segs.v);
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
    return 1;
}

int rs__quant_role(const rs__planner_t *b, size_t ci)
{
    return b->quant == NULL ? RS_QROLE_PLAIN : b->quant->role[ci];
}
