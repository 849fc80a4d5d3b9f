/* The executor's local stages as jobs of independent tasks: replays and
 * casts whose destinations overlap no other write, and digests of fully
 * read shards, run on the executor's pool (one thread per transport
 * worker, plus the calling thread once it joins). Copies that overlap
 * another run after them, alone and in the loader's order. */
#include <string.h>

#include "core/clock.h"
#include "core/convert.h"
#include "core/diag.h"
#include "exec/exec_impl.h"
#include "core/pool.h"
#include "exec/exec_tasks.h"
#include "exec/transport_impl.h"

rs_status_t rs__exec_copy(const rs__exec_copy_t *c)
{
    return rs__convert_strided(c->to, c->dst, c->dst_stride, c->from, c->src,
                               c->src_stride, c->ndim, c->shape);
}

rs_status_t rs__exec_pool(rs_exec_h x, rs_diag_t *diag)
{
    if (x->pool != NULL)
        return RS_OK;
    return rs__pool_create(rs__transport_workers(x->t), "exec", diag,
                           &x->pool);
}

/* The first failure of a job wins; later tasks are skipped. */
static void job_failed(rs__stage_job_t *j, rs_status_t st, const char *cause,
                       const rs_diag_t *d)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&j->failed, &expected, 1))
        return;
    j->status = st;
    j->cause = cause;
    j->diag = *d;
}

/* Tasks past the replays, casts and digests: quantizing box i, timed
 * into the convert stage. */
static void run_quant(rs__stage_job_t *j, size_t i)
{
    rs_diag_t d = {RS_OK, ""};
    if (atomic_load(&j->failed))
        return;
    double t0 = rs__now_s();
    rs_status_t st = rs__exec_quantize_one(j->x, i, &d);
    atomic_fetch_add(&j->busy_ns[1],
                     (uint_fast64_t)((rs__now_s() - t0) * 1e9));
    if (st != RS_OK)
        job_failed(j, st, "quantize", &d);
}

/* Task k of the job: a replay, a cast, a digest or a quantized box, timed
 * into its stage. */
static void run_task(void *ctx, size_t k)
{
    rs__stage_job_t *j = ctx;
    rs_exec_h x = j->x;
    size_t nrep = j->rep_end - j->rep_begin;
    size_t ncast = j->cast_end - j->cast_begin;
    size_t nver = j->ver_end - j->ver_begin;
    rs_diag_t d = {RS_OK, ""};
    rs_status_t st = RS_OK;
    if (k >= nrep + ncast + nver) {
        run_quant(j, j->quant_begin + (k - nrep - ncast - nver));
        return;
    }
    int kind = k < nrep ? 0 : k < nrep + ncast ? 1 : 2;
    size_t i = kind == 0 ? j->rep_begin + k
             : kind == 1 ? j->cast_begin + (k - nrep)
                         : j->ver_begin + (k - nrep - ncast);
    const unsigned char *ordered = kind == 0 ? x->replay_ordered
                                             : x->cast_ordered;
    if (atomic_load(&j->failed) || (kind < 2 && j->skip_ordered && ordered[i]))
        return;
    double t0 = rs__now_s();
    if (kind == 0) {
        st = rs__exec_replay(x, &x->replays[i], &d);
    } else if (kind == 1) {
        st = rs__exec_copy(&x->casts[i]);
        if (st != RS_OK)
            rs__diag_set(&d, st, "local copy %zu failed", i);
    } else if ((st = rs__exec_verify_group(x, x->verify_at[i], &d)) == RS_OK) {
        atomic_fetch_add(&j->verified, 1);
    }
    atomic_fetch_add(&j->busy_ns[kind],
                     (uint_fast64_t)((rs__now_s() - t0) * 1e9));
    if (st != RS_OK)
        job_failed(j, st, st == RS_ERR_VERIFY && kind == 0 ? "replay check"
                          : kind < 2 ? "local copy" : "digest", &d);
}

static size_t job_tasks(const rs__stage_job_t *j)
{
    return (j->rep_end - j->rep_begin) + (j->cast_end - j->cast_begin) +
           (j->ver_end - j->ver_begin) + (j->quant_end - j->quant_begin);
}

void rs__exec_job_start(rs_exec_h x)
{
    x->job.x = x;
    atomic_store(&x->job.failed, 0);
    if (x->pool != NULL && job_tasks(&x->job) > 0)
        rs__pool_start(x->pool, run_task, &x->job, job_tasks(&x->job));
}

rs_status_t rs__exec_job_join(rs_exec_h x, rs_diag_t *diag)
{
    rs__stage_job_t *j = &x->job;
    if (x->pool != NULL && job_tasks(j) > 0)
        rs__pool_join(x->pool);
    else
        for (size_t k = 0; k < job_tasks(j); k++)
            run_task(j, k);
    x->stats.shards_verified += atomic_exchange(&j->verified, 0);
    if (!atomic_load(&j->failed))
        return RS_OK;
    if (diag != NULL)
        *diag = j->diag;
    x->failure = j->cause;
    return j->status;
}

/* Copies [begin, end) of `kind` in loader order: all of them, or the
 * ordered ones. */
static rs_status_t in_order(rs_exec_h x, int kind, size_t begin, size_t end,
                            int only_ordered, rs_diag_t *diag)
{
    const rs__exec_copy_t *c = kind == RS_STAGE_REPLAY ? x->replays : x->casts;
    const unsigned char *ord = kind == RS_STAGE_REPLAY ? x->replay_ordered
                                                       : x->cast_ordered;
    for (size_t i = begin; i < end; i++) {
        if (only_ordered && !ord[i])
            continue;
        rs_status_t st = kind == RS_STAGE_REPLAY ? rs__exec_replay(x, &c[i], diag)
                                                 : rs__exec_copy(&c[i]);
        if (st != RS_OK) {
            if (kind != RS_STAGE_REPLAY)
                rs__diag_set(diag, st, "local copy %zu failed", i);
            x->failure = st == RS_ERR_VERIFY ? "replay check" : "local copy";
            return st;
        }
    }
    return RS_OK;
}

static size_t num_copies(const rs_exec_h x, int kind)
{
    return kind == RS_STAGE_REPLAY ? x->replays_len : x->casts_len;
}

rs_status_t rs__exec_run_ordered(rs_exec_h x, int kind, rs_diag_t *diag)
{
    return in_order(x, kind, 0, num_copies(x, kind), 1, diag);
}

rs_status_t rs__exec_run_copy_range(rs_exec_h x, int kind, size_t begin,
                                    size_t end, int use_pool, rs_diag_t *diag)
{
    if (!use_pool || end - begin < 2 || rs__transport_workers(x->t) < 2)
        return in_order(x, kind, begin, end, 0, diag);
    rs_status_t st = rs__exec_pool(x, diag);
    if (st != RS_OK) {
        x->failure = "prepare"; /* its threads could not start */
        return st;
    }
    rs__stage_job_t *j = &x->job;
    j->rep_begin = j->rep_end = j->cast_begin = j->cast_end = 0;
    j->ver_begin = j->ver_end = 0;
    j->quant_begin = j->quant_end = 0;
    *(kind == RS_STAGE_REPLAY ? &j->rep_begin : &j->cast_begin) = begin;
    *(kind == RS_STAGE_REPLAY ? &j->rep_end : &j->cast_end) = end;
    j->skip_ordered = 1;
    rs__exec_job_start(x);
    if ((st = rs__exec_job_join(x, diag)) != RS_OK)
        return st;
    x->run_threads = rs__pool_workers(x->pool) + 1;
    return in_order(x, kind, begin, end, 1, diag);
}

rs_status_t rs__exec_run_copies(rs_exec_h x, int kind, rs_diag_t *diag)
{
    return rs__exec_run_copy_range(x, kind, 0, num_copies(x, kind), 1, diag);
}

void rs__exec_run_tasks(rs_exec_h x, rs__pool_task_fn fn, void *ctx,
                        size_t ntasks)
{
    /* the pool has a thread per transport worker, one at least: with the
     * calling thread, two or more; a failed start costs the parallelism,
     * not the job */
    if (ntasks > 1 && rs__exec_pool(x, NULL) == RS_OK) {
        rs__pool_start(x->pool, fn, ctx, ntasks);
        rs__pool_join(x->pool);
        return;
    }
    for (size_t k = 0; k < ntasks; k++)
        fn(ctx, k);
}
