/* The disjoint cell index of one source tensor: published shard boxes cut
 * into a grid of cells, each listing the shards that hold it (replicas and
 * overlapping shards alike), so a needed box finds its cells by binary search
 * instead of scanning shards. */
#ifndef RS_PLAN_GRID_H
#define RS_PLAN_GRID_H

#include <stddef.h>
#include <stdint.h>

struct rs_src_tensor;
typedef struct rs_grid rs_grid_t;

void rs_grid_destroy(rs_grid_t *grid);

#endif
