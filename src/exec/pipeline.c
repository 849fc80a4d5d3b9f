/* A pipelined run: wave i + 1 is posted and awaited on the calling thread
 * while the executor's pool replays, casts and digests wave i (its reads
 * have landed, and its copies touch nothing wave i + 1 writes). Copies
 * whose destinations overlap another write, and shards with such a piece,
 * wait for the end, where they run in the loader's order as in a serial
 * run. The first failure stops the run once the wave in flight is done;
 * nothing reaches install. */
#include "core/clock.h"
#include "core/diag.h"
#include "exec/exec_impl.h"
#include "core/pool.h"

rs_status_t rs__exec_wire_wave(rs_exec_h x, size_t w, rs_diag_t *diag)
{
    size_t b = w > 0 ? x->waves[w - 1].reads_end : 0;
    size_t e = x->waves[w].reads_end;
    double t0 = rs__now_s();
    rs_status_t st = rs__exec_check_deadline(x, "wire", diag);
    if (st == RS_OK && e > b) {
        st = rs_transport_post(x->t, x->wave_reads + b, e - b, diag);
        if (st == RS_OK)
            st = rs__exec_wait(x, "wire", diag);
        if (st != RS_OK && x->failure == NULL)
            x->failure = rs__exec_wire_cause(st);
    }
    x->stage[RS_STAGE_WIRE] += rs__now_s() - t0;
    return st;
}

/* Hands wave w's replays, casts, digests and quantized boxes to the pool. */
static void start_wave(rs_exec_h x, size_t w)
{
    const rs__wave_t *prev = w > 0 ? &x->waves[w - 1] : NULL;
    rs__stage_job_t *j = &x->job;
    j->rep_begin = prev != NULL ? prev->replays_end : 0;
    j->cast_begin = prev != NULL ? prev->casts_end : 0;
    j->ver_begin = prev != NULL ? prev->verify_end : 0;
    j->quant_begin = prev != NULL ? prev->quants_end : 0;
    /* waves exist (run_waves checked); the analyzer forgets it across the
     * transport calls between */
    j->rep_end = x->waves[w].replays_end; // NOLINT(clang-analyzer-core.NullDereference)
    j->cast_end = x->waves[w].casts_end;
    j->quant_end = x->waves[w].quants_end;
    j->ver_end = x->params.verify_digests ? x->waves[w].verify_end
                                          : j->ver_begin;
    j->skip_ordered = 1;
    rs__exec_job_start(x);
}

/* Every wave: wave w + 1 on the wire while wave w's local work runs. A
 * failed local stage is reported before a failed wire (it concerns bytes
 * that landed earlier). */
static rs_status_t run_waves(rs_exec_h x, rs_diag_t *diag)
{
    if (x->waves == NULL) /* a pipelined run is only chosen with waves */
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "executor: a "
                            "pipelined run without waves");
    rs_status_t st = rs__exec_wire_wave(x, 0, diag);
    for (size_t w = 0; st == RS_OK && w < x->nwaves; w++) {
        rs_diag_t wire_diag = {RS_OK, ""};
        rs_status_t wst = RS_OK;
        start_wave(x, w);
        if (w + 1 < x->nwaves)
            wst = rs__exec_wire_wave(x, w + 1, &wire_diag);
        st = rs__exec_job_join(x, diag);
        if (st == RS_OK && wst != RS_OK) {
            if (diag != NULL)
                *diag = wire_diag;
            st = wst;
        }
    }
    return st;
}

static void reset_job(rs_exec_h x)
{
    for (int k = 0; k < 3; k++)
        atomic_store(&x->job.busy_ns[k], 0);
    atomic_store(&x->job.verified, 0);
}

/* The stage figures: busy seconds summed over the threads (a stage the
 * plan does not have stays absent). */
static void record_busy(rs_exec_h x)
{
    static const int stage_of[3] = {RS_STAGE_REPLAY, RS_STAGE_CONVERT,
                                    RS_STAGE_VERIFY};
    int ran[3] = {x->replays_len > 0,
                  x->casts_len > 0 || rs__exec_quant_count(x) > 0,
                  x->params.verify_digests};
    for (int k = 0; k < 3; k++)
        x->stage[stage_of[k]] =
            ran[k] ? (double)atomic_load(&x->job.busy_ns[k]) / 1e9 : -1;
}

/* Adds the seconds since t0 to a stage that ran. */
static void add_time(rs_exec_h x, int stage, double t0)
{
    if (x->stage[stage] >= 0)
        x->stage[stage] += rs__now_s() - t0;
}

/* The end: overlapping copies in loader order (replays, then casts), then
 * the digests left for last and the partly read shards. */
static rs_status_t run_tail(rs_exec_h x, rs_diag_t *diag)
{
    static const int kinds[2] = {RS_STAGE_REPLAY, RS_STAGE_CONVERT};
    /* every box was quantized in its wave: the ordered replays of the
     * quantized copies may read the results */
    for (int k = 0; k < 2; k++) {
        double t0 = rs__now_s();
        rs_status_t st = rs__exec_run_ordered(x, kinds[k], diag);
        add_time(x, kinds[k], t0);
        if (st != RS_OK)
            return st;
    }
    if (!x->params.verify_digests)
        return RS_OK;
    rs_status_t st = rs__exec_check_deadline(x, "verify", diag);
    double t0 = rs__now_s();
    if (st == RS_OK)
        st = rs__exec_verify(x, diag);
    add_time(x, RS_STAGE_VERIFY, t0);
    return st;
}

rs_status_t rs__exec_run_pipelined(rs_exec_h x, rs_diag_t *diag)
{
    rs_status_t st = rs__exec_pool(x, diag);
    if (st != RS_OK) {
        x->failure = "prepare"; /* its threads could not start */
        return st;
    }
    reset_job(x);
    x->stage[RS_STAGE_WIRE] = 0;
    x->run_waves = x->nwaves;
    x->run_threads = rs__pool_workers(x->pool) + 1;
    st = run_waves(x, diag);
    x->stats.wire_seconds = x->stage[RS_STAGE_WIRE];
    record_busy(x);
    return st == RS_OK ? run_tail(x, diag) : st;
}
