/* The executor's lifecycle and one run: gate, wire, replay, casts, verify,
 * throughput check (the staged part), then install, which a caller may
 * also run later on its own. Each stage is timed; a failure anywhere stops
 * the run before install. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/params.h"
#include "core/diag.h"
#include "core/memory.h"
#include "exec/delta_read.h"
#include "exec/exec_impl.h"
#include "core/pool.h"
#include "core/convert.h"
#include "reshard/units.h"

static void exec_defaults(rs_exec_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->timeout_s = RS_EXEC_DEFAULT_TIMEOUT_S;
    p->coverage_floor = RS_EXEC_DEFAULT_COVERAGE_FLOOR;
}

RS__PARAMS_DEFINE(exec, exec_defaults, progress_chunk_bytes)

rs_status_t rs_exec_create(rs_plan_h plan, rs_transport_h transport,
                           const rs_exec_params_t *params, rs_diag_t *diag,
                           rs_exec_h *exec_p)
{
    if (plan == NULL || transport == NULL || exec_p == NULL ||
        rs_plan_capture(plan) == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    rs_exec_h x = calloc(1, sizeof(*x));
    if (x == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    x->plan = plan;
    x->cap = rs_plan_capture(plan);
    x->t = transport;
    rs_status_t st = rs__exec_params_take(params, diag, &x->params);
    /* a NaN floor would let every incomplete refit through the gate */
    if (st == RS_OK && !(x->params.coverage_floor > 0 &&
                         x->params.coverage_floor <= 1))
        st = rs__diag_set(diag, RS_ERR_INVALID_ARG,
                          "rs_exec_params_t: coverage_floor %g is not in "
                          "(0, 1]", x->params.coverage_floor);
    if (st != RS_OK) {
        free(x);
        return st;
    }
    x->nparams = rs_capture_num_params(x->cap);
    x->binds = calloc(x->nparams + 1, sizeof(rs__bind_t));
    if (x->binds == NULL) {
        free(x);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    for (int s = 0; s < RS_STAGE_COUNT_; s++)
        x->stage[s] = -1;
    *exec_p = x;
    return RS_OK;
}

void rs_exec_destroy(rs_exec_h x)
{
    if (x == NULL)
        return;
    rs__exec_release(x);
    rs__pool_destroy(x->pool);
    free(x->param_state);
    free(x->digests);
    free(x->binds);
    free(x);
}

rs_status_t rs_exec_bind(rs_exec_h x, size_t param, void *base,
                         uint64_t nbytes, rs_mem_type_t mem, rs_diag_t *diag)
{
    rs_param_info_t info;
    char who[RS_DIAG_MSG_MAX];
    if (x == NULL || param >= x->nparams)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "no param %zu", param);
    rs_capture_param(x->cap, param, &info);
    snprintf(who, sizeof(who), "exec: param '%s'", info.name);
    rs_status_t st = rs__mem_check(mem, who, diag);
    if (st != RS_OK)
        return st;
    if (nbytes < info.nbytes)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "param '%s' needs "
                            "%llu bytes, %llu bound", info.name,
                            (unsigned long long)info.nbytes,
                            (unsigned long long)nbytes);
    if (x->binds[param].base != base)
        x->prepared = 0; /* addresses changed: descriptors must be rebuilt */
    x->binds[param] = (rs__bind_t){base, nbytes};
    return RS_OK;
}

static rs_status_t fail(rs_exec_h x, rs_status_t st, const char *cause)
{
    x->failure = cause;
    return st;
}

void rs_exec_set_run_timeout(rs_exec_h x, double timeout_s)
{
    if (x != NULL)
        x->params.run_timeout_s = timeout_s;
}

/* RS_ERR_TIMEOUT: the run's deadline passed `where` ("in the wire stage"),
 * followed by `detail` (may be empty). */
static rs_status_t deadline_passed(rs_exec_h x, const char *where,
                                   const char *detail, rs_diag_t *diag)
{
    rs__diag_set(diag, RS_ERR_TIMEOUT, "deadline passed %s after %.3g s%s",
                 where, x->params.run_timeout_s, detail);
    return fail(x, RS_ERR_TIMEOUT, "deadline");
}

const char *rs__exec_wire_cause(rs_status_t st)
{
    return st == RS_ERR_CANCELLED ? "cancelled" : "transport";
}

/* Before a stage (and each wave): was the run cancelled, or has the
 * deadline passed already? */
rs_status_t rs__exec_check_deadline(rs_exec_h x, const char *stage,
                                    rs_diag_t *diag)
{
    char where[64];
    if (rs_cancel_raised(x->params.cancel)) {
        rs__diag_set(diag, RS_ERR_CANCELLED, "run cancelled before the %s "
                     "stage", stage);
        return fail(x, RS_ERR_CANCELLED, "cancelled");
    }
    if (x->deadline <= 0 || rs__now_s() < x->deadline)
        return RS_OK;
    snprintf(where, sizeof(where), "before the %s stage", stage);
    return deadline_passed(x, where, "", diag);
}

rs_status_t rs__exec_wait(rs_exec_h x, const char *stage, rs_diag_t *diag)
{
    double t = x->params.timeout_s, left = 0;
    int clipped = 0;
    if (x->deadline > 0) {
        left = x->deadline - rs__now_s();
        if (left < 1e-3)
            left = 1e-3; /* still wait: the transport drains what it posted */
        clipped = t <= 0 || left < t;
        if (clipped)
            t = left;
    }
    rs_status_t st = rs_transport_wait(x->t, t, diag);
    /* a stall names its sessions: the deadline did not end it */
    if (st != RS_ERR_TIMEOUT || !clipped || rs__transport_stalled(x->t))
        return st;
    char where[64], detail[RS_DIAG_MSG_MAX + 2];
    snprintf(where, sizeof(where), "in the %s stage", stage);
    snprintf(detail, sizeof(detail), ": %s", diag != NULL ? diag->msg : "");
    return deadline_passed(x, where, detail, diag);
}

/* Every fallback source with its reason, as many as fit in `size` (then
 * how many more): a user fixing one refused source at a time would need a
 * run per source to learn them all. */
static void fallback_names(rs_plan_h plan, char *buf, size_t size)
{
    size_t n = rs_plan_num_fallback(plan), used = 0, i = 0;
    buf[0] = '\0';
    for (; i < n; i++) {
        const char *src, *reason;
        rs_plan_fallback(plan, i, &src, &reason);
        char one[RS_DIAG_MSG_MAX];
        int len = snprintf(one, sizeof(one), "%s'%s': %s", i ? "; " : "",
                           src, reason);
        /* room is kept for the " and N more" tail */
        if (len < 0 || used + (size_t)len + 24 >= size)
            break;
        memcpy(buf + used, one, (size_t)len + 1);
        used += (size_t)len;
    }
    if (i < n)
        snprintf(buf + used, size - used, "%s and %zu more",
                 i ? ";" : "", n - i);
}

/* Refuses plans that cannot be installed, before any byte moves. */
static rs_status_t gate(rs_exec_h x, rs_diag_t *diag)
{
    size_t nunc;
    const char *src, *reason;
    rs_plan_uncovered(x->plan, &nunc);
    if (rs_plan_num_mismatched(x->plan) > 0) { /* fallback entry 0 */
        rs_plan_fallback(x->plan, 0, &src, &reason);
        rs__diag_set(diag, RS_ERR_INCOMPLETE, "model mismatch: %zu "
                     "source(s) published with another shape or dtype than "
                     "the capture assumes, first %s",
                     rs_plan_num_mismatched(x->plan), reason);
        return fail(x, RS_ERR_INCOMPLETE, "mismatch");
    }
    if (rs_plan_num_fallback(x->plan) > 0) {
        char names[RS_DIAG_MSG_MAX];
        fallback_names(x->plan, names, sizeof(names));
        rs__diag_set(diag, RS_ERR_UNSUPPORTED, "unsupported geometry: %zu "
                     "source(s) in fallback: %s",
                     rs_plan_num_fallback(x->plan), names);
        return fail(x, RS_ERR_UNSUPPORTED, "fallback");
    }
    if (nunc > 0) {
        const rs_uncovered_t *u = rs_plan_uncovered(x->plan, &nunc);
        rs__diag_set(diag, RS_ERR_INCOMPLETE, "incomplete refit: %zu copies "
                     "are not fully published, first copy %zu of '%s' into "
                     "'%s' (%llu elements missing)", nunc, u[0].copy, u[0].src,
                     u[0].param, (unsigned long long)u[0].missing_elements);
        return fail(x, RS_ERR_INCOMPLETE, "uncovered");
    }
    if (x->params.require_full_coverage &&
        x->cov.fraction < x->params.coverage_floor) {
        rs__diag_set(diag, RS_ERR_INCOMPLETE, "incomplete refit: the plan "
                     "covers %.4f of parameter bytes, below the floor %.4f",
                     x->cov.fraction, x->params.coverage_floor);
        return fail(x, RS_ERR_INCOMPLETE, "coverage");
    }
    return RS_OK;
}

/* Session runs of the (session-grouped) reads: group_at[2g], [2g+1] are
 * the begin and end of run g, followed by a terminator. Built once. */
static size_t session_runs(rs_exec_h x)
{
    size_t g = 0;
    for (size_t i = 0; i < x->nreads; g++) {
        size_t e = i;
        while (e < x->nreads && x->reads[e].session == x->reads[i].session)
            e++;
        x->group_at[2 * g] = i;
        x->group_at[2 * g + 1] = e;
        i = e;
    }
    return g;
}

/* Fills x->chunk with a share of every outstanding session's reads. */
static size_t next_chunk(rs_exec_h x, size_t ngroups, uint64_t chunk_bytes,
                         size_t *active_p)
{
    size_t active = 0, n = 0;
    for (size_t g = 0; g < ngroups; g++)
        active += x->group_at[2 * g] < x->group_at[2 * g + 1];
    uint64_t share = active ? chunk_bytes / active : 0;
    for (size_t g = 0; g < ngroups; g++) {
        size_t *at = &x->group_at[2 * g], end = x->group_at[2 * g + 1];
        uint64_t taken = 0;
        while (*at < end && (taken == 0 || taken < share)) {
            taken += x->reads[*at].nbytes;
            x->chunk[n++] = x->reads[(*at)++];
        }
    }
    *active_p = active;
    return n;
}

static rs_status_t wire_with_progress(rs_exec_h x, rs_diag_t *diag)
{
    uint64_t chunk_bytes = x->params.progress_chunk_bytes
        ? x->params.progress_chunk_bytes : (uint64_t)64 << 20;
    if (x->chunk == NULL) {
        x->chunk = malloc((x->nreads + 1) * sizeof(rs_read_t));
        x->group_at = malloc((2 * x->nreads + 2) * sizeof(size_t));
        if (x->chunk == NULL || x->group_at == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    size_t ngroups = session_runs(x), active;
    rs_progress_t p = {0, x->plan_bytes, 0, 0};
    double t0 = rs__now_s();
    for (;;) {
        size_t n = next_chunk(x, ngroups, chunk_bytes, &active);
        if (n == 0)
            return RS_OK;
        rs_status_t st = rs_transport_post(x->t, x->chunk, n, diag);
        if (st == RS_OK)
            st = rs__exec_wait(x, "wire", diag);
        if (st != RS_OK)
            return x->failure != NULL ? st
                                      : fail(x, st, rs__exec_wire_cause(st));
        for (size_t i = 0; i < n; i++)
            p.bytes_done += x->chunk[i].nbytes;
        p.elapsed_s = rs__now_s() - t0;
        p.sessions_outstanding = 0;
        for (size_t g = 0; g < ngroups; g++)
            p.sessions_outstanding += x->group_at[2 * g] < x->group_at[2 * g + 1];
        x->params.progress(x->params.progress_ctx, &p);
        if (x->deadline > 0 && rs__now_s() >= x->deadline &&
            p.sessions_outstanding > 0) {
            char detail[96];
            snprintf(detail, sizeof(detail), " (%llu of %llu bytes read)",
                     (unsigned long long)p.bytes_done,
                     (unsigned long long)p.bytes_total);
            return deadline_passed(x, "in the wire stage", detail, diag);
        }
    }
}

static rs_status_t wire(rs_exec_h x, rs_diag_t *diag)
{
    if (x->params.progress != NULL && !x->params.phased)
        return wire_with_progress(x, diag);
    size_t begin = 0;
    for (int phase = 0; phase < 3; phase++) {
        size_t end = x->params.phased ? x->phase_end[phase] : x->nreads;
        if (end > begin) {
            rs_status_t st = rs_transport_post(x->t, x->reads + begin,
                                               end - begin, diag);
            if (st == RS_OK)
                st = rs__exec_wait(x, "wire", diag);
            if (st != RS_OK)
                return x->failure != NULL
                           ? st : fail(x, st, rs__exec_wire_cause(st));
        }
        begin = end;
        if (!x->params.phased)
            break;
    }
    return RS_OK;
}

static rs_status_t check_throughput(rs_exec_h x, rs_diag_t *diag)
{
    double secs = x->stage[RS_STAGE_WIRE];
    if (x->params.max_gbps <= 0 || x->plan_bytes == 0)
        return RS_OK;
    double gbps = secs > 0 ? (double)x->plan_bytes * 8 / secs / 1e9 : 1e300;
    if (gbps <= x->params.max_gbps)
        return RS_OK;
    char rate[64], ceiling[64];
    rs_format_rate(rate, sizeof(rate), gbps * 1e9 / 8);
    rs_format_rate(ceiling, sizeof(ceiling), x->params.max_gbps * 1e9 / 8);
    rs__diag_set(diag, RS_ERR_VERIFY, "implausible throughput: %llu bytes in "
                 "%.6f s is %s, above the ceiling of %s (max_gbps, given in "
                 "gigabits per second)", (unsigned long long)x->plan_bytes,
                 secs, rate, ceiling);
    return fail(x, RS_ERR_VERIFY, "throughput");
}

/* Runs fn as a timed stage unless skip; a skipped stage stays absent. */
#define STAGE(x, idx, skip, call)                                             \
    do {                                                                      \
        if (!(skip)) {                                                        \
            double t_ = rs__now_s();                                            \
            rs_status_t st_ = (call);                                         \
            (x)->stage[idx] = rs__now_s() - t_;                                 \
            if (st_ != RS_OK)                                                 \
                return st_;                                                   \
        }                                                                     \
    } while (0)

static rs_status_t install(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st = x->params.install(x->params.install_ctx, x);
    if (st != RS_OK) {
        if (diag != NULL && diag->status == RS_OK)
            rs__diag_set(diag, st, "install callback failed");
        return fail(x, st, "install");
    }
    return RS_OK;
}

/* The stages one after another: wire, replays, casts, digests. */
static rs_status_t run_serial(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st;
    if ((st = rs__exec_check_deadline(x, "wire", diag)) != RS_OK)
        return st;
    STAGE(x, RS_STAGE_WIRE, 0, wire(x, diag));
    x->stats.wire_seconds = x->stage[RS_STAGE_WIRE];
    /* before any replay: quantized copies replay from its output */
    if ((st = rs__exec_quantize(x, diag)) != RS_OK)
        return st;
    STAGE(x, RS_STAGE_REPLAY, x->replays_len == 0,
          rs__exec_run_copies(x, RS_STAGE_REPLAY, diag));
    STAGE(x, RS_STAGE_CONVERT, x->casts_len == 0,
          rs__exec_run_copies(x, RS_STAGE_CONVERT, diag));
    rs__exec_quant_time(x);
    if (x->params.verify_digests &&
        (st = rs__exec_check_deadline(x, "verify", diag)) != RS_OK)
        return st;
    STAGE(x, RS_STAGE_VERIFY, !x->params.verify_digests,
          rs__exec_verify(x, diag));
    return RS_OK;
}

/* Delta reads (delta_read.h) patch staged reads in place when the staging
 * keeps each of them where it was from one run to the next: in one round
 * (several rounds share the buffer between boxes). */
static void staging_to_deltas(rs_exec_h x)
{
    if (!rs__delta_reads_is(x->t))
        return;
    const int kept = !x->bounded && x->staging != NULL;
    rs__delta_reads_staging(x->t, kept ? x->staging : NULL,
                            kept ? x->staging_len : 0, x->staging_gen);
}

rs_status_t rs_exec_run_staged(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st;
    if (x == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    for (int s = 0; s < RS_STAGE_COUNT_; s++)
        x->stage[s] = -1;
    x->run_s = -1;
    x->run_waves = 0;
    x->run_threads = 1;
    x->failure = NULL;
    x->staged = 0;
    x->deadline = x->params.run_timeout_s > 0
                      ? rs__now_s() + x->params.run_timeout_s : 0;
    x->stats.runs++;
    x->stats.shards_verified = 0;
    if (!x->have_coverage && (st = rs__exec_compute_coverage(x, diag)) != RS_OK)
        return fail(x, st, "coverage");
    if ((st = gate(x, diag)) != RS_OK)
        return st;
    if (!x->prepared && (st = rs__exec_prepare(x, diag)) != RS_OK)
        return fail(x, st, "prepare");
    staging_to_deltas(x);
    x->stats.bytes = x->plan_bytes;
    x->stats.descriptors = x->nreads;
    if (x->params.verify_digests &&
        (st = rs__exec_check_digests(x, diag)) != RS_OK)
        return st;
    double t0 = rs__now_s();
    rs__exec_taps_arm(x, x->params.verify_digests);
    st = x->bounded      ? rs__exec_run_rounds(x, diag)
         : x->nwaves > 0 ? rs__exec_run_pipelined(x, diag)
                         : run_serial(x, diag);
    rs__exec_taps_arm(x, 0);
    if (st != RS_OK)
        return st;
    x->run_s = rs__now_s() - t0;
    if ((st = check_throughput(x, diag)) != RS_OK)
        return st;
    x->staged = 1;
    return RS_OK;
}

/* No deadline here: a staged run may be installed long after it ended
 * (rs_exec_run checks the run's deadline before calling this). */
rs_status_t rs_exec_install(rs_exec_h x, rs_diag_t *diag)
{
    if (x == NULL || !x->staged)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "exec: no staged run "
                            "to install (the last run failed, or was "
                            "installed already)");
    x->staged = 0;
    STAGE(x, RS_STAGE_INSTALL, x->params.install == NULL, install(x, diag));
    return RS_OK;
}

rs_status_t rs_exec_run(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st = rs_exec_run_staged(x, diag);
    if (st == RS_OK && (st = rs__exec_check_deadline(x, "install", diag)) != RS_OK)
        x->staged = 0;
    return st == RS_OK ? rs_exec_install(x, diag) : st;
}

void rs_exec_stats(rs_exec_h x, rs_exec_stats_t *stats_p) { *stats_p = x->stats; }

rs_status_t rs_exec_prepare(rs_exec_h x, rs_diag_t *diag)
{
    if (x == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    return x->prepared ? RS_OK : rs__exec_prepare(x, diag);
}

void rs_exec_prepared(rs_exec_h x, uint64_t *bytes_p, uint64_t *descriptors_p)
{
    *bytes_p = x->prepared ? x->plan_bytes : 0;
    *descriptors_p = x->prepared ? x->nreads : 0;
}
