/* rs_plan_build: resolve every captured copy to a box of its source, cut it
 * by the source's cell grid, pick one shard per cell (spreading load over
 * replicas), walk the runs, then decide full pulls and assemble the plan.
 * Per-copy segments are kept apart until the end so that a source can still
 * fall back (dropping every copy of it) or switch to a full pull. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "core/env.h"
#include "geom/box.h"
#include "geom/walk.h"
#include "model/capture_check.h"
#include "model/capture_impl.h"
#include "model/grid.h"
#include "plan/plan_impl.h"
#include "plan/plan_quant.h"
#include "plan/planner.h"
#include "model/sources_impl.h"
#include "core/params.h"

RS__PARAMS_DECLARE(plan); /* plan.c */

/* A set RESHARD_MAX_SEGMENTS_PER_COPY that does not parse is refused, even
 * when the caller set the field itself: the operator meant something. */
static rs_status_t check_env(rs_diag_t *diag)
{
    uint64_t v;
    return rs__env_count(RS_PLAN_ENV_MAX_SEGMENTS, 1, INT64_MAX, diag, &v);
}

/* Every --only pattern must select some parameter: a pattern that matches
 * nothing is a typo, and planning nothing would look like success. */
static rs_status_t check_only(rs_capture_h capture,
                              const rs_plan_params_t *params, rs_diag_t *diag)
{
    size_t n = rs_capture_num_params(capture);
    for (size_t i = 0; i < params->nonly; i++) {
        size_t k = 0;
        rs_param_info_t info;
        if (params->only[i] == NULL)
            return rs__diag_set(diag, RS_ERR_INVALID_ARG, "only[%zu] is NULL",
                                i);
        for (; k < n; k++) {
            rs_capture_param(capture, k, &info);
            if (fnmatch(params->only[i], info.name, 0) == 0)
                break;
        }
        if (k == n)
            return rs__diag_set(diag, RS_ERR_INPUT, "--only pattern '%s' "
                                "matches no parameter of the capture (%zu "
                                "parameters)", params->only[i], n);
    }
    return RS_OK;
}

/* The cost model's rates: a zero, negative or non-finite one would make
 * every estimate meaningless. */
static rs_status_t check_rates(const rs_plan_params_t *p, rs_diag_t *diag)
{
    if (!isfinite(p->nic_gbps) || p->nic_gbps <= 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "nic_gbps must be "
                            "positive and finite (got %g)", p->nic_gbps);
    if (!isfinite(p->descriptor_ns) || p->descriptor_ns <= 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "descriptor_ns must be "
                            "positive and finite (got %g)", p->descriptor_ns);
    return RS_OK;
}

rs_status_t rs_plan_build(rs_capture_h capture, rs_sources_h sources,
                          const rs_plan_params_t *params, rs_diag_t *diag,
                          rs_plan_h *plan_p)
{
    rs_plan_params_t given;
    rs__planner_t b;
    rs__quant_expansion_t *qx = NULL;
    rs_status_t st;

    if (capture == NULL || sources == NULL || plan_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if ((st = rs__plan_params_take(params, diag, &given)) != RS_OK)
        return st;
    params = &given;
    if (params->max_segments_per_copy < 1)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG,
                            "max_segments_per_copy must be at least 1");
    if ((st = check_rates(params, diag)) != RS_OK ||
        (st = check_env(diag)) != RS_OK ||
        (st = check_only(capture, params, diag)) != RS_OK ||
        (st = rs__capture_check_attributed(capture, diag)) != RS_OK)
        return st;
    /* quantized copies plan over a working capture (plan_quant.c) */
    if (rs__quant_any(capture) &&
        (st = rs__quant_expand(capture, sources, params, diag, &qx)) != RS_OK)
        return st;
    st = rs__planner_init(&b, qx != NULL ? qx->work : capture, sources,
                          params, diag);
    b.quant = qx;
    if (st == RS_OK)
        st = rs__planner_run(&b);
    if (st == RS_OK) {
        *plan_p = rs__planner_take(&b);
        if (qx != NULL) {
            (*plan_p)->owned_capture = qx->work;
            qx->work = NULL;
        }
    }
    rs__planner_free(&b);
    rs__quant_free(qx);
    return st;
}
