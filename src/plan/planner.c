/* rs_plan_build: resolve every captured copy to a box of its source, cut it
 * by the source's cell grid, pick one shard per cell (spreading load over
 * replicas), walk the runs, then decide full pulls and assemble the plan.
 * Per-copy segments are kept apart until the end so that a source can still
 * fall back (dropping every copy of it) or switch to a full pull. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "geom/box.h"
#include "geom/walk.h"
#include "plan/capture_impl.h"
#include "plan/grid.h"
#include "plan/plan_impl.h"
#include "plan/planner.h"
#include "plan/sources_impl.h"

rs_status_t rs_plan_build(rs_capture_h capture, rs_sources_h sources,
                          const rs_plan_params_t *params, rs_diag_t *diag,
                          rs_plan_h *plan_p)
{
    rs_plan_params_t defaults;
    rs_planner_t b;
    rs_status_t st;

    if (capture == NULL || sources == NULL || plan_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (params == NULL) {
        rs_plan_params_init(&defaults);
        params = &defaults;
    }
    if (params->max_segments_per_copy < 1)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "max_segments_per_copy must be at least 1");
    st = rs__planner_init(&b, capture, sources, params, diag);
    if (st == RS_OK)
        st = rs__planner_run(&b);
    if (st == RS_OK)
        *plan_p = rs__planner_take(&b);
    rs__planner_free(&b);
    return st;
}
