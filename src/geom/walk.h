/* Walks part of a box as maximal runs that are contiguous in both the
 * buffer read (a row-major shard) and the destination. Cost is proportional
 * to the runs emitted, never to the elements. */
#ifndef RS_GEOM_WALK_H
#define RS_GEOM_WALK_H

#include <stdint.h>
#include "geom/box.h"

/* Per source dim, the progression indices [lo, hi) of the box to walk. */
typedef struct rs__index_range {
    int64_t lo[RS_MAX_DIMS];
    int64_t hi[RS_MAX_DIMS];
} rs__index_range_t;

/* The row-major buffer the box is read from: its box inside the source. */
typedef struct rs__source_buffer {
    const int64_t *offset; /* per source dim */
    const int64_t *shape;  /* per source dim */
} rs__source_buffer_t;

/* Receives one run: nelem elements at src_elem (from element 0 of the
 * buffer) landing at dst_elem (from the destination's element 0). */
typedef void (*rs__run_cb)(void *ctx, int64_t src_elem, int64_t dst_elem,
                          int64_t nelem);

/* Walks the sub-box `kr` of `box` (which must lie inside `buf`), with the
 * destination offset of the box's first element at dst_base. Runs come in
 * increasing destination order within each aligned block. */
void rs__walk_runs(const rs__box_t *box, const rs__index_range_t *kr,
                  const rs__source_buffer_t *buf, int64_t dst_base, rs__run_cb cb,
                  void *ctx);

/* When the whole box (every dim's full index range) is one run contiguous
 * in `buf` and in the destination, sets its first buffer element and
 * returns 1: rs__walk_runs over the whole box would report exactly that one
 * run (at dst_base, numel elements). Returns 0 (output untouched) when the
 * box takes more runs. O(factors^2), no allocation. */
int rs__walk_one_run(const rs__box_t *box, const rs__source_buffer_t *buf,
                     int64_t *src_elem_p);

#endif
