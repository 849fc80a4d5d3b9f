/* Maps a replayed view onto the source: which strided box of the row-major
 * source it reads, and in what order. Each view dim is cut into factors that
 * each stay inside one source dim (a view dim that merged whole source dims
 * wraps from one into the next); the factors of one source dim must form a
 * mixed radix, which is exactly when the dim's visited indices are an
 * arithmetic progression. Anything else is refused, never approximated. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "geom/box.h"
#include "geom/why.h"

/* Refusals (geom/why.h): a chain this geometry cannot express, and input
 * that is wrong. */
#define refuse(...) rs__geom_why(RS_ERR_UNSUPPORTED, __VA_ARGS__)
#define resolve_fail(...) rs__geom_why(RS_ERR_INPUT, __VA_ARGS__)

typedef struct {
    int ndim;
    const int64_t *shape;
    int64_t pitch[RS_MAX_DIMS]; /* row-major strides of the source */
} src_layout_t;

static void layout_init(src_layout_t *l, int ndim, const int64_t *shape)
{
    int64_t p = 1;
    l->ndim = ndim;
    l->shape = shape;
    for (int d = ndim - 1; d >= 0; d--) {
        l->pitch[d] = p;
        p *= shape[d];
    }
}

/* The source dim a stride steps in: the innermost dim of size > 1 whose
 * pitch is <= stride and whose whole extent is > stride. -1 if none. */
static int dim_for_stride(const src_layout_t *l, int64_t stride)
{
    for (int d = l->ndim - 1; d >= 0; d--) {
        if (l->shape[d] <= 1 || l->pitch[d] > stride)
            continue;
        if (stride / l->pitch[d] < l->shape[d])
            return d;
    }
    return -1;
}

typedef struct {
    int n;
    rs__factor_t f[RS_MAX_FACTORS];
    int64_t q[RS_MAX_FACTORS]; /* index step in source-dim units */
} factor_list_t;

static int push_factor(factor_list_t *fl, int d, int64_t count, int64_t q,
                       int64_t dstride)
{
    if (fl->n >= RS_MAX_FACTORS)
        return 0;
    fl->f[fl->n] = (rs__factor_t){d, count, 0, q, dstride};
    fl->q[fl->n] = q;
    fl->n++;
    return 1;
}

/* Cuts one view dim (n elements, source stride s) into factors. */
static rs_status_t split_view_dim(const src_layout_t *l, int vd, int64_t n,
                                  int64_t s, int64_t dstride,
                                  factor_list_t *fl, char *why, size_t whylen)
{
    while (n > 1) {
        int d = s > 0 ? dim_for_stride(l, s) : -1;
        if (d < 0)
            return refuse(why, whylen, "view dim %d has stride %lld, which "
                          "does not step inside the source", vd, (long long)s);
        if (s % l->pitch[d] != 0)
            return refuse(why, whylen, "view dim %d (stride %lld) mixes "
                          "source dims", vd, (long long)s);
        int64_t q = s / l->pitch[d], span;
        if (rs__mul_i64(n - 1, q, &span) && span < l->shape[d])
            return push_factor(fl, d, n, q, dstride) ? RS_OK
                   : refuse(why, whylen, "too many factors");
        /* The dim runs past source dim d: it must wrap into the next outer
         * dim exactly at d's end. */
        int64_t inner = l->shape[d] / q;
        if (l->shape[d] % q != 0 || n % inner != 0)
            return refuse(why, whylen, "view dim %d merges a partial source "
                          "dim %d", vd, d);
        if (!push_factor(fl, d, inner, q, dstride) ||
            !rs__mul_i64(dstride, inner, &dstride))
            return refuse(why, whylen, "too many factors");
        n /= inner;
        s = l->pitch[d] * l->shape[d];
    }
    return RS_OK;
}

static int factor_before(const rs__factor_t *x, const rs__factor_t *y)
{
    return x->sdim != y->sdim ? x->sdim < y->sdim : x->mult < y->mult;
}

/* By (sdim, mult): a handful of factors, resolved once per copy, so an
 * insertion sort (equal keys are refused by close_box either way). */
static void sort_factors(rs__factor_t *f, int n)
{
    for (int a = 1; a < n; a++) {
        rs__factor_t t = f[a];
        int b = a;
        for (; b > 0 && factor_before(&t, &f[b - 1]); b--)
            f[b] = f[b - 1];
        f[b] = t;
    }
}

/* Checks that each source dim's factors are ordered (every digit steps
 * past all the inner digits span, so indices grow with k and never repeat)
 * and fills the box. */
static rs_status_t close_box(const src_layout_t *l, factor_list_t *fl,
                             rs__box_t *box, char *why, size_t whylen)
{
    for (int i = 0; i < fl->n; i++)
        fl->f[i].mult = fl->f[i].dmult; /* sort key */
    sort_factors(fl->f, fl->n);
    box->numel = 1;
    for (int d = 0; d < l->ndim; d++) {
        box->count[d] = 1;
        box->step[d] = 1;
    }
    for (int i = 0; i < fl->n;) {
        int d = fl->f[i].sdim, begin = i;
        int64_t span = 0, count = 1; /* span: largest inner index offset */
        box->step[d] = fl->f[i].dmult;
        for (; i < fl->n && fl->f[i].sdim == d; i++) {
            if (i - begin >= RS_MAX_DIM_FACTORS)
                return refuse(why, whylen, "source dim %d is cut into more "
                              "than %d pieces", d, RS_MAX_DIM_FACTORS);
            if (fl->f[i].dmult <= span)
                return refuse(why, whylen, "source dim %d is visited out of "
                              "order (not a strided box)", d);
            fl->f[i].mult = count;
            span += (fl->f[i].count - 1) * fl->f[i].dmult; /* < dim extent */
            count *= fl->f[i].count;
        }
        box->count[d] = count;
        if (span >= l->shape[d] - box->start[d])
            return refuse(why, whylen, "source dim %d is left by the view "
                          "(not a strided box)", d);
    }
    for (int d = 0; d < l->ndim; d++)
        box->numel *= box->count[d];
    box->nfactors = fl->n;
    memcpy(box->factors, fl->f, (size_t)fl->n * sizeof(rs__factor_t));
    return RS_OK;
}

/* The factors of dim d: [first, first + n). */
static int dim_factors(const rs__box_t *box, int d, int *first)
{
    int n = 0;
    *first = -1;
    for (int j = 0; j < box->nfactors; j++) {
        if (box->factors[j].sdim == d) {
            if (*first < 0)
                *first = j;
            n++;
        }
    }
    return n;
}

int64_t rs__box_coord(const rs__box_t *box, int d, int64_t k)
{
    int first, n = dim_factors(box, d, &first);
    int64_t c = box->start[d];
    for (int j = first; j < first + n; j++) {
        const rs__factor_t *f = &box->factors[j];
        c += (k / f->mult) % f->count * f->dmult;
    }
    return c;
}

int64_t rs__box_count_below(const rs__box_t *box, int d, int64_t x)
{
    int first, n = dim_factors(box, d, &first);
    int64_t below = 0;
    x -= box->start[d];
    /* Outermost digit first: whole blocks below x, then recurse inside the
     * block x falls in (inner digits span less than one outer step). */
    for (int j = first + n - 1; j >= first; j--) {
        const rs__factor_t *f = &box->factors[j];
        if (x <= 0)
            return below;
        int64_t q = x / f->dmult;
        if (q >= f->count)
            return below + f->count * f->mult;
        below += q * f->mult;
        x -= q * f->dmult;
    }
    return below + (x > 0 ? 1 : 0);
}

rs_status_t rs__box_from_view(const rs__view_t *v, int src_ndim,
                             const int64_t *src_shape,
                             const int64_t *dest_stride, rs__box_t *box,
                             char *why, size_t whylen)
{
    src_layout_t l;
    factor_list_t fl;
    int64_t numel = 1;

    layout_init(&l, src_ndim, src_shape);
    /* the header only: factors past nfactors are never read, and the
     * whole box is kilobytes, resolved once per copy */
    memset(box, 0, offsetof(rs__box_t, factors));
    box->numel = 0;
    box->ndim = src_ndim;
    fl.n = 0;
    for (int i = 0; i < v->ndim; i++)
        numel *= v->shape[i];
    if (numel == 0) { /* reads nothing */
        for (int d = 0; d < src_ndim; d++) {
            box->count[d] = 0;
            box->step[d] = 1;
        }
        return RS_OK;
    }
    for (int d = 0; d < src_ndim; d++)
        box->start[d] = (v->offset / l.pitch[d]) % src_shape[d];
    for (int i = 0; i < v->ndim; i++) {
        rs_status_t st = split_view_dim(&l, i, v->shape[i], v->stride[i],
                                        dest_stride[i], &fl, why, whylen);
        if (st != RS_OK)
            return st;
    }
    return close_box(&l, &fl, box, why, whylen);
}

rs_status_t rs__geom_resolve(int src_ndim, const int64_t *src_shape,
                            const rs_op_t *ops, size_t nops, int dest_ndim,
                            const int64_t *dest_shape,
                            const int64_t *dest_stride, rs__box_t *box,
                            size_t *bad_op, char *why, size_t whylen)
{
    rs__view_t v;
    *bad_op = nops;
    if (rs__view_init(&v, src_ndim, src_shape) != RS_OK)
        return resolve_fail(why, whylen, "source shape is invalid");
    for (size_t i = 0; i < nops; i++) {
        rs_status_t st = rs__view_apply(&v, &ops[i], why, whylen);
        if (st != RS_OK) {
            *bad_op = i;
            return st;
        }
    }
    if (v.ndim != dest_ndim ||
        (dest_ndim > 0 &&
         memcmp(v.shape, dest_shape, (size_t)dest_ndim * sizeof(int64_t)) != 0))
        return resolve_fail(why, whylen, "the ops yield a view of rank %d "
                            "whose shape differs from dest_shape (rank %d)",
                            v.ndim, dest_ndim);
    return rs__box_from_view(&v, src_ndim, src_shape, dest_stride, box, why,
                            whylen);
}
