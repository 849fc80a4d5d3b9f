/* The receiver's stage and apply: stage discovers a READY version, takes
 * a lease on it, and transfers (tables, the cached or a new plan,
 * connecting, the executor's reads into staging, verify; again from other
 * publishers of a slot whose publisher failed); apply proves the lease
 * unbroken, copies the staging into the bound parameters (under a group
 * commit when there is a group) and runs the caller's install; discard
 * drops the lease. A pull is a stage and an apply within one deadline. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/diag.h"
#include "exec/transport_impl.h" /* the stall bound */
#include "refit/receiver_impl.h"
#include "reshard/plan.h"

/* The executor's install stage, run by apply (rs_exec_install): once the
 * lease is proven unbroken (every byte was read while the version could
 * not be released, hence not refilled), the staging is copied into the
 * bound parameters (on the executor's threads, receiver_install.c; under a
 * group, swapped, so the staging keeps the old bytes), then the caller's
 * own install runs. No bound byte is written before the proof. */
static rs_status_t install_now(rs_receiver_h r, rs_exec_h exec)
{
    double patience = r->deadline > 0 ? r->deadline - rs__now_s()
                                      : r->params.lease_ttl_s;
    rs_status_t st = rs__lease_confirm(&r->lease, r->dir, patience, r->diag);
    if (st != RS_OK)
        return st;
    if (r->group != NULL) { /* keep the old bytes */
        for (size_t p = 0; p < r->nparams; p++) {
            const rs__receiver_bind_t *b = &r->binds[p];
            if (b->shadow == NULL)
                continue;
            rs__group_swap(b->base, b->shadow, (size_t)b->nbytes);
            r->slot.res.bytes_installed += b->nbytes;
        }
        r->swapped = 1;
    } else {
        r->slot.res.bytes_installed += rs__receiver_install_copy(r, exec);
    }
    if (r->params.install != NULL)
        return r->params.install(r->params.install_ctx, exec);
    return RS_OK;
}

/* The group commit's view of the install (group.h): after a swap the
 * staging holds the replaced bytes until the group decides. */
typedef struct group_install {
    rs_receiver_h r;
    rs_exec_h exec;
} group_install_t;

static rs_status_t group_install(void *ctx, rs_diag_t *diag)
{
    group_install_t *gi = ctx;
    (void)diag; /* install_now reports through r->diag, the same one */
    return install_now(gi->r, gi->exec);
}

/* Copies each staged parameter between its staging and its bound storage
 * (to_base: staging -> bound, else bound -> staging), ending the swap. */
static void copy_swapped(rs_receiver_h r, int to_base)
{
    if (r->swapped && to_base) /* the staging holds the old bytes again */
        r->shadow_epoch++;
    for (size_t p = 0; r->swapped && p < r->nparams; p++) {
        const rs__receiver_bind_t *b = &r->binds[p];
        if (b->shadow != NULL)
            memcpy(to_base ? b->base : b->shadow,
                   to_base ? b->shadow : b->base, (size_t)b->nbytes);
    }
    r->swapped = 0;
}

/* Aborted: the bound parameters get back their old bytes, which the
 * staging holds since the swap. */
static void group_undo(void *ctx)
{
    copy_swapped(((group_install_t *)ctx)->r, 1);
}

/* Committed: the staging mirrors the bound parameters again, as it does
 * between pulls. */
static void group_keep(void *ctx)
{
    copy_swapped(((group_install_t *)ctx)->r, 0);
}

static rs_status_t install_staged(void *ctx, rs_exec_h exec)
{
    rs_receiver_h r = ctx;
    if (r->group == NULL)
        return install_now(r, exec);
    group_install_t gi = {r, exec};
    rs__group_io_t io = {&gi, group_install, group_undo, group_keep};
    return rs__group_apply(r->group, r->dir, r->model, r->slot.version, &io,
                           r->diag);
}

/* The executor's parameters: the receiver's settings, and its own install
 * step (lease proof, then staging -> bound parameters, then the user's). */
void rs__receiver_exec_params(rs_receiver_h r, rs_exec_params_t *ep)
{
    const rs_receiver_params_t *p = &r->params;
    rs_exec_params_init(ep);
    ep->timeout_s = p->timeout_s;
    ep->verify_digests = p->verify_digests;
    ep->verify_partial = p->verify_partial;
    ep->require_full_coverage = p->require_full_coverage;
    ep->coverage_floor = p->coverage_floor;
    ep->max_gbps = p->max_gbps;
    ep->progress = p->progress;
    ep->progress_ctx = p->progress_ctx;
    ep->progress_chunk_bytes = p->progress_chunk_bytes;
    ep->staging_budget = p->staging_budget;
    ep->install = install_staged;
    ep->install_ctx = r;
    ep->cancel = &r->cancel;
}

/* The executor's run into the staging, with the listed deltas where the
 * receiver takes them (docs/delta.md, "Receivers"). A run whose
 * verification fails after it patched with deltas is run again with every
 * read whole: a wrong patch costs a second run, never an install. */
static rs_status_t run_reads(rs_receiver_h r, int64_t version,
                             rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_status_t st = rs__receiver_deltas_arm(r, version, diag);
    uint64_t patched = res->delta_runs;
    if (st == RS_OK)
        st = rs_exec_run_staged(r->exec, diag);
    rs__receiver_deltas_done(r, st == RS_OK, res);
    if (st != RS_ERR_VERIFY || res->delta_runs == patched)
        return st;
    res->delta_retried = 1;
    st = rs__receiver_deltas_arm(r, -1, diag); /* no copy holds a version */
    if (st == RS_OK)
        st = rs_exec_run_staged(r->exec, diag);
    rs__receiver_deltas_done(r, st == RS_OK, res);
    return st;
}

/* The transfer: reads the tables, plans (or reuses the plan), connects and
 * runs the executor into the staging, stopping before install. With
 * `stall`, reads that make no progress for stall_s end the run, while some
 * slot has another publisher to fail over to. */
static rs_status_t transfer(rs_receiver_h r, const rs_version_info_t *v,
                            double t0, int stall, rs_pull_result_t *res,
                            rs_diag_t *diag)
{
    rs_sources_h sources = NULL;
    rs__tables_figures_t fig = {0, 0, 0};
    double tt = rs__now_s();
    rs_status_t st = rs__receiver_read_tables(r, v, diag, &sources, &fig);
    res->tables_s = rs__now_s() - tt;
    res->discover_s = rs__now_s() - t0;
    res->tables_reused += fig.reused;
    res->tables_parsed += fig.parsed;
    res->table_bytes_read += fig.bytes;
    if (st == RS_OK &&
        (st = rs__receiver_enter(r, "plan", v->version, diag)) != RS_OK)
        rs__receiver_sources_drop(r, sources);
    if (st == RS_OK)
        st = rs__receiver_prepare(r, sources,
                                  rs__receiver_fingerprint(r, sources), 1,
                                  res, diag);
    if (st == RS_OK)
        st = rs__receiver_enter(r, "wire", v->version, diag);
    if (st == RS_OK) {
        rs_exec_set_run_timeout(r->exec, r->deadline > 0
                                             ? rs__receiver_budget(r, 0) : 0);
        rs__transport_set_stall(r->transport,
                                stall && rs__replicas_backed(&r->replicas)
                                    ? r->params.stall_s : 0);
        r->stage = NULL; /* the executor names its stages itself */
        st = run_reads(r, v->version, res, diag);
        if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT)
            rs__diag_prefix(diag, "reading from the publishers: ");
        else if (st == RS_ERR_CANCELLED)
            rs__diag_prefix(diag, "stage of version %lld of '%s': ",
                            (long long)v->version, r->model);
    }
    return rs__receiver_deadline_status(r, v->version, st, diag);
}

/* Keeps one failed publisher in the result (rs__replicas_failures). */
static void note_failure(void *ctx, const char *publisher, int64_t slot,
                         const char *why)
{
    rs_pull_result_t *res = ctx;
    if (res->nfailures < RS_PULL_FAILURES_MAX) {
        rs_pull_failure_t *f = &res->failures[res->nfailures];
        snprintf(f->publisher, sizeof(f->publisher), "%s", publisher);
        f->slot = slot;
        snprintf(f->why, sizeof(f->why), "%s", why);
    }
    res->nfailures++;
}

/* Whether the run's failure was its reads stalling (the stall bound). */
static int stalled(rs_receiver_h r, rs_status_t st)
{
    return st == RS_ERR_TIMEOUT && rs__transport_stalled(r->transport);
}

/* transfer, again from other publishers of the slots whose chosen
 * publisher failed, while there are any and the deadline allows. A lease
 * the directory ended meanwhile (the version released or abandoned) is
 * the failure reported: no other publisher serves a version that went. */
static rs_status_t transfer_replicas(rs_receiver_h r,
                                     const rs_version_info_t *v, double t0,
                                     rs_pull_result_t *res, rs_diag_t *diag)
{
    rs_diag_t own; /* failures name their peers, also for a NULL diag */
    if (diag == NULL) {
        rs_diag_clear(&own);
        diag = &own;
    }
    int keep_waiting = 0; /* a stalled slot had no other publisher */
    rs__replicas_reset(&r->replicas);
    rs_status_t st = transfer(r, v, t0, 1, res, diag);
    while (st != RS_OK &&
           (st = rs__receiver_lease_cause(r, v->version, st, diag)) != RS_OK &&
           (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT) &&
           !rs__receiver_past_deadline(r) &&
           rs__replicas_failover(&r->replicas, st, stalled(r, st), diag,
                                 &keep_waiting)) {
        /* a peer failed: connect the new choice afresh */
        rs__receiver_drop_cache(r);
        st = transfer(r, v, t0, !keep_waiting, res, diag);
    }
    res->failovers = r->replicas.failovers;
    snprintf(res->failover_msg, sizeof(res->failover_msg), "%s",
             r->replicas.record);
    res->nfailures = 0;
    rs__replicas_failures(&r->replicas, note_failure, res);
    rs__replicas_reset(&r->replicas);
    return st;
}

rs_status_t rs__receiver_discover(rs_receiver_h r, int64_t version,
                                  rs_diag_t *diag, rs_version_info_t *v_p)
{
    if (rs_cancel_raised(&r->cancel)) { /* raised before the call */
        if (version >= 0)
            return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled before "
                                "waiting for version %lld of '%s' (receiver "
                                "%s; rs_receiver_cancel_clear lets it run "
                                "again)", (long long)version, r->model,
                                r->holder);
        return rs__diag_set(diag, RS_ERR_CANCELLED, "cancelled before "
                            "waiting for the newest READY version of '%s' "
                            "(receiver %s; rs_receiver_cancel_clear lets it "
                            "run again)", r->model, r->holder);
    }
    rs__receiver_announce_once(r);
    r->deadline = r->params.pull_timeout_s > 0
                      ? rs__now_s() + r->params.pull_timeout_s : 0;
    r->stage = "discover";
    double wait = rs__receiver_budget(r, r->params.discover_timeout_s);
    rs_status_t st = rs_dir_wait_ready(r->dir, r->model, version, wait,
                                       r->params.stale_s, diag, v_p);
    return rs__receiver_deadline_status(r, version, st, diag);
}

rs_status_t rs__receiver_tables(rs_receiver_h r, const rs_version_info_t *v,
                                rs_diag_t *diag, rs_sources_h *sources_p,
                                rs__tables_figures_t *fig)
{
    r->stage = "tables";
    rs_status_t st = rs__receiver_read_tables(r, v, diag, sources_p, fig);
    return rs__receiver_deadline_status(r, v->version, st, diag);
}

/* Discover, lease, transfer: into r->slot on success; on error nothing is
 * staged and the lease is dropped. */
static rs_status_t stage_version(rs_receiver_h r, int64_t version,
                                 rs_diag_t *diag)
{
    rs_version_info_t v;
    rs_pull_result_t *res = &r->slot.res;
    memset(res, 0, sizeof(*res));
    double t0 = rs__now_s();
    rs_status_t st = rs__receiver_discover(r, version, diag, &v);
    if (st == RS_OK &&
        (st = rs__receiver_start_lease(r, v.version, diag)) != RS_OK)
        st = rs__receiver_deadline_status(r, version, st, diag);
    if (st != RS_OK)
        return st; /* discovery named the deadline itself */
    res->version = v.version;
    st = transfer_replicas(r, &v, t0, res, diag);
    if (st != RS_OK) {
        /* a peer failed, or reads were cut short: reconnect from scratch
         * next time */
        if (st == RS_ERR_TRANSPORT || st == RS_ERR_TIMEOUT ||
            st == RS_ERR_CANCELLED)
            rs__receiver_drop_cache(r);
        rs__receiver_end_lease(r, v.version, res);
        return st;
    }
    res->lease_epoch = r->lease.epoch;
    res->sessions = rs__receiver_sessions_read(r->plan);
    res->stage_s = rs__now_s() - t0;
    r->slot.version = v.version;
    r->slot.active = 1;
    return RS_OK;
}

/* The staged version's install under the deadline in r->deadline (0: none),
 * then the end of its lease, consuming the slot either way. */
static rs_status_t apply_slot(rs_receiver_h r, rs_diag_t *diag,
                              rs_pull_result_t *result_p, size_t size)
{
    rs_pull_result_t *res = &r->slot.res;
    double t0 = rs__now_s();
    res->bytes_installed = 0;
    r->diag = diag;
    rs_status_t st = rs_exec_install(r->exec, diag);
    r->diag = NULL;
    rs_exec_stats(r->exec, &res->exec);
    rs_exec_stages(r->exec, &res->stages);
    rs__receiver_end_lease(r, r->slot.version, res);
    r->slot.active = 0;
    if (st == RS_OK && r->params.release_after)
        rs__receiver_release(r, r->slot.version, res);
    res->apply_s = rs__now_s() - t0;
    if (st == RS_OK && result_p != NULL) /* only what the caller's holds */
        memcpy(result_p, res, size);
    return st;
}

/* RS_OK when a caller's result of `size` bytes is one this library writes
 * (rs_receiver_pull_sized). */
static rs_status_t check_result_size(size_t size, rs_diag_t *diag)
{
    if (size >= RS_PULL_RESULT_V1_SIZE && size <= sizeof(rs_pull_result_t))
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "rs_pull_result_t: size "
                        "%zu is not one this library knows (%zu to %zu "
                        "bytes); pass the struct through rs_receiver_pull or "
                        "rs_receiver_apply", size,
                        (size_t)RS_PULL_RESULT_V1_SIZE,
                        sizeof(rs_pull_result_t));
}

rs_status_t rs__receiver_refuse_if_staged(rs_receiver_h r, const char *what,
                                          rs_diag_t *diag)
{
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL");
    if (!r->slot.active)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: cannot %s: "
                        "version %lld of '%s' is staged (apply or discard it "
                        "first)", what, (long long)r->slot.version, r->model);
}

rs_status_t rs_receiver_stage(rs_receiver_h r, int64_t version,
                              rs_diag_t *diag, rs_staged_h *staged_p)
{
    rs_status_t st = rs__receiver_refuse_if_staged(r, "stage another version",
                                                   diag);
    if (st != RS_OK)
        return st;
    if (staged_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: NULL "
                            "staged_p");
    if (!r->params.shadow)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: staging "
                            "needs shadow = 1 (with shadow = 0 the bytes "
                            "would land in the bound parameters: use "
                            "rs_receiver_pull)");
    if ((st = stage_version(r, version, diag)) != RS_OK)
        return st;
    *staged_p = &r->slot;
    return RS_OK;
}

rs_status_t rs_receiver_apply_sized(rs_receiver_h r, rs_staged_h staged,
                                    rs_diag_t *diag,
                                    rs_pull_result_t *result_p, size_t size)
{
    if (result_p != NULL && check_result_size(size, diag) != RS_OK)
        return RS_ERR_INVALID_ARG; /* the staged version stays staged */
    if (r == NULL || staged == NULL || staged != &r->slot || !staged->active)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "receiver: nothing to "
                            "apply: the handle is not this receiver's staged "
                            "version (it was applied or discarded already, "
                            "or its stage failed)");
    r->deadline = 0; /* the deadline bounds the stage, not the safe point */
    return apply_slot(r, diag, result_p, size);
}

rs_status_t(rs_receiver_apply)(rs_receiver_h r, rs_staged_h staged,
                               rs_diag_t *diag, rs_pull_result_t *result_p)
{
    return rs_receiver_apply_sized(r, staged, diag, result_p,
                                   RS_PULL_RESULT_V1_SIZE);
}

void rs_receiver_discard(rs_receiver_h r, rs_staged_h staged)
{
    if (r == NULL || staged == NULL || staged != &r->slot || !staged->active)
        return;
    rs__receiver_end_lease(r, staged->version, &staged->res);
    staged->active = 0;
}

uint32_t rs_receiver_failures(rs_receiver_h r, rs_pull_failure_t *out,
                              uint32_t cap)
{
    if (r == NULL)
        return 0;
    const rs_pull_result_t *res = &r->slot.res;
    uint32_t kept = res->nfailures < RS_PULL_FAILURES_MAX
                        ? res->nfailures : RS_PULL_FAILURES_MAX;
    for (uint32_t i = 0; out != NULL && i < kept && i < cap; i++)
        out[i] = res->failures[i];
    return res->nfailures;
}

int64_t rs_staged_version(rs_staged_h staged)
{
    return staged != NULL && staged->active ? staged->version : -1;
}

rs_status_t rs_receiver_pull_sized(rs_receiver_h r, int64_t version,
                                   rs_diag_t *diag,
                                   rs_pull_result_t *result_p, size_t size)
{
    rs_status_t st = result_p != NULL ? check_result_size(size, diag) : RS_OK;
    if (st == RS_OK)
        st = rs__receiver_refuse_if_staged(r, "pull", diag);
    if (st == RS_OK)
        st = stage_version(r, version, diag);
    if (st != RS_OK)
        return st;
    if (rs_cancel_raised(&r->cancel)) { /* staged, but not to be installed */
        int64_t staged = r->slot.version;
        rs_receiver_discard(r, &r->slot);
        return rs__diag_set(diag, RS_ERR_CANCELLED, "pull of version %lld "
                            "of '%s' cancelled before the install stage",
                            (long long)staged, r->model);
    }
    /* as the executor's own check before install */
    if (rs__receiver_past_deadline(r)) {
        r->stage = NULL;
        st = rs__diag_set(diag, RS_ERR_TIMEOUT, "deadline passed before the "
                          "install stage");
        st = rs__receiver_deadline_status(r, version, st, diag);
        rs_receiver_discard(r, &r->slot);
        return st;
    }
    return apply_slot(r, diag, result_p, size);
}

rs_status_t(rs_receiver_pull)(rs_receiver_h r, int64_t version,
                              rs_diag_t *diag, rs_pull_result_t *result_p)
{
    return rs_receiver_pull_sized(r, version, diag, result_p,
                                  RS_PULL_RESULT_V1_SIZE);
}
