/* Views over a staged box (view_box.h): the whole-tensor view rebased onto
 * a buffer that holds one box of it, and the span a view reads. */
#include "core/checked.h"
#include "geom/view_box.h"

rs_status_t rs__view_init_box(rs__view_t *v, int ndim, const int64_t *shape,
                              const int64_t *lo, const int64_t *box_shape)
{
    int64_t numel, off = 0, t;
    if (ndim < 0 || ndim > RS_MAX_DIMS || !rs__numel(shape, ndim, &numel) ||
        !rs__numel(box_shape, ndim, &numel))
        return RS_ERR_INPUT;
    for (int d = 0; d < ndim; d++) {
        if (lo[d] < 0 || box_shape[d] < 0 || lo[d] > shape[d] ||
            box_shape[d] > shape[d] - lo[d])
            return RS_ERR_INPUT;
    }
    if (!rs__row_major(box_shape, ndim, v->stride))
        return RS_ERR_INPUT;
    for (int d = 0; d < ndim; d++) {
        if (!rs__mul_i64(lo[d], v->stride[d], &t) || !rs__add_i64(off, t, &off))
            return RS_ERR_INPUT;
        v->shape[d] = shape[d];
    }
    v->ndim = ndim;
    v->offset = -off;
    return RS_OK;
}

int rs__view_span(const rs__view_t *v, int64_t *lo_p, int64_t *hi_p)
{
    int64_t lo = v->offset;
    int64_t hi = lo;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 0)
            return 0;
        /* |stride| * (shape - 1) stays inside the int64 element space the
         * view was built in: every op keeps offsets of real elements. */
        int64_t reach = v->stride[d] * (v->shape[d] - 1);
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    *lo_p = lo;
    *hi_p = hi;
    return 1;
}
