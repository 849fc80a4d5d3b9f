/* Views over a staged box: a box of a source tensor copied row-major into
 * its own buffer, read through the same op chains as the whole tensor. The
 * full pull is the box that is the whole tensor. */
#ifndef RS_GEOM_VIEW_BOX_H
#define RS_GEOM_VIEW_BOX_H

#include <stdint.h>
#include "geom/view.h"

/* The whole tensor of `shape` as it lies in a row-major buffer holding only
 * the box lo[d] .. lo[d] + box_shape[d] (per dim, inside the tensor): the
 * tensor's shape with the buffer's strides and the offset that puts
 * element lo at 0. Elements outside the box have offsets outside the
 * buffer or aliasing others, so a chain replayed over this view is only
 * meaningful when everything it reads lies inside the box. RS_ERR_INPUT
 * when the box leaves the tensor or its extent overflows. */
rs_status_t rs__view_init_box(rs__view_t *view, int ndim, const int64_t *shape,
                              const int64_t *lo, const int64_t *box_shape);

/* The lowest and highest element offsets a view reads; 0 for an empty
 * view (nothing read), else 1. */
int rs__view_span(const rs__view_t *view, int64_t *lo_p, int64_t *hi_p);

#endif
