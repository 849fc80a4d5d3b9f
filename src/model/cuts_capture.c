/* Cuts from a capture: every copy resolved against its declared source with
 * the planner's geometry (rs__geom_resolve), and the first and one past the
 * last index the resolved box reads in each source dim added as cuts. A
 * shard split there serves each copy's box as whole sub-boxes. Quantized
 * copies also add their (source, spec) request (cuts_quant.c). */
#include <string.h>

#include "core/diag.h"
#include "geom/box.h"
#include "model/capture_impl.h"
#include "model/cuts_impl.h"

/* Every declared source is checked first, so that a disagreement leaves
 * the set as it was. */
static rs_status_t check_declared(rs_cuts_h cuts, rs_capture_h cap,
                                  rs_diag_t *diag)
{
    for (size_t i = 0; i < cap->sources_len; i++) {
        const rs__capture_source_t *s = &cap->sources[i];
        const rs__cut_tensor_t *t = rs__cuts_find(cuts, s->name);
        if (t != NULL && !rs__cuts_same_shape(t, s->ndim, s->shape, diag))
            return RS_ERR_INPUT;
    }
    return RS_OK;
}

/* One past the largest source index that dim d of the box reaches: every
 * digit of the dim's mixed radix at its largest value. */
static int64_t box_hi(const rs__box_t *box, int d)
{
    int64_t hi = box->start[d] + 1;
    for (int j = 0; j < box->nfactors; j++)
        if (box->factors[j].sdim == d)
            hi += (box->factors[j].count - 1) * box->factors[j].dmult;
    return hi;
}

static int add_box(rs__cut_tensor_t *t, const rs__box_t *box)
{
    if (box->numel == 0)
        return 1;
    for (int d = 0; d < box->ndim; d++) {
        int64_t lo = box->start[d], hi = box_hi(box, d);
        if ((lo > 0 && !rs__cuts_insert(t, d, lo)) ||
            (hi < t->shape[d] && !rs__cuts_insert(t, d, hi)))
            return 0;
    }
    return 1;
}

/* Resolves one copy and adds its box; copies that do not resolve (the
 * planner reports them) and sources flagged unsupported add nothing. */
static rs_status_t add_copy(rs_cuts_h cuts, rs_capture_h cap,
                            const rs__capture_copy_t *c, rs_diag_t *diag)
{
    const rs__capture_source_t *s = rs__capture_find_source(cap, c->src);
    uint32_t ignored;
    rs__cut_tensor_t *t;
    rs__box_t box;
    size_t bad_op;
    char why[256];

    if (s == NULL || rs__strmap_get(&cap->unsupported_index, c->src, &ignored))
        return RS_OK;
    if (rs__geom_resolve(s->ndim, s->shape, c->ops, c->nops, c->ndim,
                         c->dest_shape, c->dest_stride, &box, &bad_op, why,
                         sizeof(why)) != RS_OK)
        return RS_OK;
    rs_status_t st = rs__cuts_tensor_for(cuts, s->name, s->ndim, s->shape,
                                         diag, &t);
    if (st == RS_OK && !add_box(t, &box))
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts: out of memory");
    return st;
}

rs_status_t rs_cuts_add_capture(rs_cuts_h cuts, rs_capture_h capture,
                                rs_diag_t *diag)
{
    if (cuts == NULL || capture == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set or "
                            "capture");
    rs_status_t st = check_declared(cuts, capture, diag);
    for (size_t i = 0; st == RS_OK && i < capture->copies_len; i++)
        st = add_copy(cuts, capture, &capture->copies[i], diag);
    rs__cuts_sort(cuts);
    if (st == RS_OK)
        st = rs__cuts_add_capture_quants(cuts, capture, diag);
    return st;
}
