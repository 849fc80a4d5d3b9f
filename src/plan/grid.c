/* Placeholder until the grid lands. */
#include <stdlib.h>
#include "plan/grid.h"
void rs_grid_destroy(rs_grid_t *grid) { free(grid); }
