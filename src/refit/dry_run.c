/* The receiver's dry run: every per-pull step short of the wire (discover,
 * tables, fingerprint, plan or reuse), against the real directory,
 * so an operator sees what a pull would move, and a benchmark sees what the
 * control path costs, without connecting to a publisher or taking a lease. */
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/diag.h"
#include "refit/receiver_impl.h"
#include "reshard/plan.h"

/* The figures a pull would see, from the plan alone: what it reads, and
 * what it holds (parameters, shadows, staging under the budget). */
static rs_status_t figures(rs_receiver_h r, rs_dry_run_t *res, rs_diag_t *diag)
{
    rs_plan_h plan = rs_receiver_plan(r);
    rs_plan_stats_t st;
    rs_staging_need_t need;
    rs_plan_stats(plan, &st);
    res->bytes = st.bytes_planned;
    res->descriptors = st.descriptor_count;
    res->complete = rs_plan_is_complete(plan);
    res->sessions = rs__receiver_sessions_read(plan);
    for (size_t p = 0; p < rs_capture_num_params(r->cap); p++) {
        rs_param_info_t info;
        rs_capture_param(r->cap, p, &info);
        res->param_bytes += info.nbytes;
    }
    res->shadow_bytes = r->params.shadow ? res->param_bytes : 0;
    rs_exec_params_t ep; /* the pull's executor's */
    rs__receiver_exec_params(r, &ep);
    rs_status_t s = rs_exec_staging_need(plan, &ep, diag, &need);
    if (s != RS_OK)
        return s;
    res->staging_bytes = need.bytes;
    res->staging_unbounded = need.unbounded;
    res->staging_rounds = need.rounds;
    return RS_OK;
}

/* Fingerprint, plan or reuse, and the figures: the step after the tables.
 * Owns `sources`. Nothing is prepared: preparing allocates the staging. */
static rs_status_t plan_step(rs_receiver_h r, rs_sources_h sources,
                             rs_dry_run_t *res, rs_diag_t *diag)
{
    rs_pull_result_t pr;
    memset(&pr, 0, sizeof(pr));
    res->tables = rs_sources_num_tables(sources);
    res->shards = rs_sources_num_shards(sources);
    double t0 = rs__now_s();
    uint64_t fp = rs__receiver_fingerprint(r, sources);
    double t1 = rs__now_s();
    res->fingerprint_s = t1 - t0;
    rs_status_t st = rs__receiver_prepare(r, sources, fp, 0, &pr, diag);
    double t2 = rs__now_s();
    res->plan_s = t2 - t1;
    res->replanned = pr.replanned;
    if (st == RS_OK)
        st = figures(r, res, diag);
    res->prepare_s = rs__now_s() - t2;
    return st;
}

/* RS_OK when a caller's result of `size` bytes is one this library
 * writes. */
static rs_status_t check_result_size(size_t size, rs_diag_t *diag)
{
    if (size >= RS_DRY_RUN_V1_SIZE && size <= sizeof(rs_dry_run_t))
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_dry_run_t: size %zu "
                        "is not one this library knows (%zu to %zu bytes); "
                        "pass the struct through rs_receiver_dry_run", size,
                        (size_t)RS_DRY_RUN_V1_SIZE, sizeof(rs_dry_run_t));
}

rs_status_t rs_receiver_dry_run_sized(rs_receiver_h r, int64_t version,
                                      rs_diag_t *diag, rs_dry_run_t *result_p,
                                      size_t size)
{
    rs_version_info_t v;
    rs_sources_h sources = NULL;
    rs_dry_run_t res;
    rs_status_t st = result_p != NULL ? check_result_size(size, diag) : RS_OK;
    if (st == RS_OK)
        st = rs__receiver_refuse_if_staged(r, "dry-run", diag);
    if (st != RS_OK)
        return st;
    memset(&res, 0, sizeof(res));
    double t0 = rs__now_s();
    st = rs__receiver_discover(r, version, diag, &v);
    double t1 = rs__now_s();
    res.discover_s = t1 - t0;
    if (st != RS_OK)
        return st;
    res.version = v.version;
    rs__tables_figures_t fig = {0, 0, 0};
    st = rs__receiver_tables(r, &v, diag, &sources, &fig);
    res.tables_s = rs__now_s() - t1;
    res.tables_reused = fig.reused;
    res.tables_parsed = fig.parsed;
    res.table_bytes_read = fig.bytes;
    if (st != RS_OK)
        return st;
    st = plan_step(r, sources, &res, diag);
    if (st != RS_OK)
        return st;
    res.total_s = rs__now_s() - t0;
    if (result_p != NULL) /* only what the caller's holds */
        memcpy(result_p, &res, size);
    return RS_OK;
}

rs_status_t(rs_receiver_dry_run)(rs_receiver_h r, int64_t version,
                                 rs_diag_t *diag, rs_dry_run_t *result_p)
{
    return rs_receiver_dry_run_sized(r, version, diag, result_p,
                                     RS_DRY_RUN_V1_SIZE);
}
