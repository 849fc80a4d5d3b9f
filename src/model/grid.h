/* The disjoint cell index of one source tensor: published shard boxes cut
 * into a grid of cells, each listing the shards that hold it (replicas and
 * overlapping shards alike), so a needed box finds its cells by binary search
 * instead of scanning shards. */
#ifndef RS_PLAN_GRID_H
#define RS_PLAN_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "geom/box.h"
#include "geom/walk.h"
#include "reshard/status.h"

struct rs__source_tensor;
typedef struct rs__grid rs__grid_t;

/* Default ceiling on cells per tensor (and on shard-cell incidences). */
#define RS_GRID_MAX_CELLS ((size_t)1 << 22)

/* Builds the grid of a tensor's non-empty shards. RS_ERR_UNSUPPORTED when
 * the layout is too fragmented (more than max_cells), RS_ERR_NO_MEMORY. */
rs_status_t rs__grid_build(const struct rs__source_tensor *tensor, size_t max_cells,
                          rs__grid_t **grid_p);
void rs__grid_destroy(rs__grid_t *grid);

/* rs__grid_build when every non-empty shard holds the whole tensor and no
 * dim is empty (one cell listing them: a tensor one rank publishes whole,
 * or its replicas), in one allocation, O(shards x ndim);
 * RS_ERR_UNSUPPORTED (nothing built) for any other tensor. */
rs_status_t rs__grid_build_whole(const struct rs__source_tensor *tensor,
                                size_t max_cells, rs__grid_t **grid_p);

/* Receives each cell a box touches: the box's progression indices inside the
 * cell, and the shards (indices into the tensor's shards) holding the cell,
 * empty when nothing publishes it. */
typedef void (*rs__cell_cb)(void *ctx, size_t cell, const rs__index_range_t *kr,
                           const uint32_t *shards, size_t nshards);

/* Visits every cell holding at least one element of the box, in row-major
 * cell order. RS_ERR_NO_MEMORY only. */
rs_status_t rs__grid_visit(const rs__grid_t *grid, const rs__box_t *box,
                          rs__cell_cb cb, void *ctx);

/* For a non-empty box lying in one cell that exactly one shard holds: sets
 * that cell and shard and returns 1; what rs__grid_visit would report then
 * is that one cell with the box's whole index range ([0, count) per dim).
 * Returns 0 (outputs untouched) otherwise. O(ndim log intervals). */
int rs__grid_sole(const rs__grid_t *grid, const rs__box_t *box, size_t *cell_p,
                  uint32_t *shard_p);

/* 1 when every shard the grid lists holds the whole tensor (offset 0 in
 * every dim, the tensor's shape). O(1). */
int rs__grid_whole(const rs__grid_t *grid);

#endif
