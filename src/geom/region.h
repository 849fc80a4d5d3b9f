/* The elements a strided region covers, as maximal contiguous runs: what
 * coverage accounting needs, at a cost proportional to runs. */
#ifndef RS_GEOM_REGION_H
#define RS_GEOM_REGION_H

#include <stdint.h>

/* Receives one run of nelem elements starting at element `start`. */
typedef void (*rs__region_cb)(void *ctx, int64_t start, int64_t nelem);

/* Emits the runs of the region offset + sum(i_k * stride_k), i_k < shape_k.
 * Strides must be non-negative; an empty region emits nothing. */
void rs__region_runs(int ndim, const int64_t *shape, const int64_t *stride,
                    int64_t offset, rs__region_cb cb, void *ctx);

#endif
