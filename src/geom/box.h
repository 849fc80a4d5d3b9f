/* What a view reads, per source dim: the indices start + sum(digit_j *
 * dmult_j) over the dim's factors, a set that the view visits in increasing
 * order of its visit index k (the digits read as a mixed radix). When the
 * factors chain exactly (dmult_{j+1} = dmult_j * count_j) the set is an
 * arithmetic progression (a strided box); looser chains (the gate half of a
 * fused [E*2*I] dim) are still ordered sets and are planned the same way. A
 * factor is one digit: `count` values, `mult` its weight in k, `dmult` its
 * step in source indices, landing `dstride` elements apart in the
 * destination. */
#ifndef RS_GEOM_BOX_H
#define RS_GEOM_BOX_H

#include <stdint.h>
#include "geom/view.h"

#define RS_MAX_FACTORS 64
/* Factors one source dim may be cut into (digits of its mixed radix). */
#define RS_MAX_DIM_FACTORS 8

typedef struct rs__factor {
    int sdim;        /* source dim */
    int64_t count;   /* > 1 */
    int64_t mult;    /* weight in the dim's visit index k */
    int64_t dmult;   /* step in source indices */
    int64_t dstride; /* destination stride in elements */
} rs__factor_t;

typedef struct rs__box {
    int ndim;                     /* source rank */
    int64_t start[RS_MAX_DIMS];
    int64_t count[RS_MAX_DIMS];   /* indices visited */
    int64_t step[RS_MAX_DIMS];    /* smallest factor step (1 without factors) */
    int nfactors;
    rs__factor_t factors[RS_MAX_FACTORS]; /* sorted by (sdim, mult) */
    int64_t numel;                /* product of counts */
} rs__box_t;

/* Maps a replayed view onto its source (row-major `src_shape`) and pairs it
 * with a destination stride per view dim. RS_ERR_UNSUPPORTED (with a reason
 * in `why`) when the view is not a strided box of the source. */
rs_status_t rs__box_from_view(const rs__view_t *view, int src_ndim,
                             const int64_t *src_shape,
                             const int64_t *dest_stride, rs__box_t *box,
                             char *why, size_t whylen);

/* The source index that visit index k of dim d reaches. */
int64_t rs__box_coord(const rs__box_t *box, int d, int64_t k);

/* How many visited indices of dim d lie below source index x. */
int64_t rs__box_count_below(const rs__box_t *box, int d, int64_t x);

/* Replays a whole chain from the full source and maps it: the one call the
 * planner makes per copy. On failure *bad_op is the index of the failing op
 * (nops when the failure is in the final mapping or the destination). */
rs_status_t rs__geom_resolve(int src_ndim, const int64_t *src_shape,
                            const rs_op_t *ops, size_t nops, int dest_ndim,
                            const int64_t *dest_shape,
                            const int64_t *dest_stride, rs__box_t *box,
                            size_t *bad_op, char *why, size_t whylen);

#endif
