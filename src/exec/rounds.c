/* A run whose staging takes more than one round under the staging budget
 * (staging.c): the direct reads and the first round's boxes are read, the
 * round's boxes quantized, replayed and cast and the shards it completed
 * verified; then the next round is read into the same buffer, and so on.
 * Rounds follow plan order and each runs its copies as a serial run does
 * (quantize, replays, casts; overlapping copies in the loader's order), so
 * the bytes written, and which write wins where destinations overlap, are
 * those of a serial run. A shard whose staged pieces lie in two rounds
 * cannot be digested from where they landed (the first round's buffer is
 * reused before the second is read), so it is read whole once more at the
 * end, as verify_partial reads a partly read shard. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/diag.h"
#include "core/pool.h"
#include "exec/exec_impl.h"

#define OOM(diag) rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory")

/* Cutting state: reads copied in round order, the running counts. */
typedef struct rcut {
    rs_exec_h x;
    size_t nreads, replays, casts, quants, nrounds;
} rcut_t;

static void close_round(rcut_t *c)
{
    c->x->waves[c->nrounds++] =
        (rs__wave_t){c->nreads, c->replays, c->casts, 0, c->quants};
}

/* Box k of the layout: its reads from `at` in x->reads, and its work. */
static void add_box(rcut_t *c, size_t k, size_t at, size_t nreads,
                    size_t replays, size_t casts, size_t quants)
{
    rs_exec_h x = c->x;
    if (c->nrounds < x->layout.round[k]) /* the boxes before filled a round */
        close_round(c);
    memcpy(x->wave_reads + c->nreads, x->reads + at,
           nreads * sizeof(rs_read_t));
    c->nreads += nreads;
    c->replays += replays;
    c->casts += casts;
    c->quants += quants;
}

static void cut_rounds(rcut_t *c)
{
    rs_exec_h x = c->x;
    size_t n, at = x->phase_end[0], k = 0;
    /* the direct reads need no staging: they land with the first round,
     * before any replay, as in a serial run */
    memcpy(x->wave_reads, x->reads, at * sizeof(rs_read_t));
    c->nreads = at;
    const rs_staged_read_t *fp = rs_plan_staged_reads(x->plan, &n);
    for (size_t i = 0; i < n; at += fp[i].nsegments, i++)
        add_box(c, k++, at, fp[i].nsegments, fp[i].ncopies, 0, 0);
    for (size_t i = 0; i < rs__exec_quant_count(x); i++) {
        add_box(c, k++, at, rs__exec_quant_nreads(x, i), 2, 0, 1);
        at += rs__exec_quant_nreads(x, i);
    }
    const rs_convert_t *cv = rs_plan_converts(x->plan, &n);
    for (size_t i = 0; i < n; at += cv[i].nsegments, i++)
        add_box(c, k++, at, cv[i].nsegments, 0, 1, 0);
    close_round(c);
}

rs_status_t rs__exec_prepare_rounds(rs_exec_h x, rs_diag_t *diag)
{
    size_t nrounds = (size_t)x->layout.need.rounds;
    x->wave_reads = malloc((x->nreads + 1) * sizeof(rs_read_t));
    x->waves = malloc((nrounds + 1) * sizeof(rs__wave_t));
    if (x->wave_reads == NULL || x->waves == NULL)
        return OOM(diag);
    rcut_t c = {x, 0, 0, 0, 0, 0};
    cut_rounds(&c);
    x->nwaves = c.nrounds;
    size_t nsess = rs_plan_num_sessions(x->plan);
    for (size_t w = 0, begin = 0; w < x->nwaves; w++) {
        if (!rs__exec_group_reads(x->wave_reads, begin, x->waves[w].reads_end,
                                  nsess))
            return OOM(diag);
        begin = x->waves[w].reads_end;
    }
    return RS_OK;
}

static int in_staging(const rs_exec_h x, const void *p)
{
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)x->staging;
    return a >= s && a - s < x->staging_len;
}

/* The one round whose staging holds pieces of the group, nwaves when none
 * does (only direct pieces: verified after the last round), -2 when two
 * rounds do. */
static long staged_round(const rs_exec_h x, size_t i, size_t end)
{
    long r = -1;
    for (size_t k = i; k < end; k++) {
        const rs__piece_t *p = &x->pieces[k];
        if (!in_staging(x, p->at))
            continue;
        if (r >= 0 && r != (long)p->wave)
            return -2;
        r = (long)p->wave;
    }
    return r < 0 ? (long)x->nwaves : r;
}

long rs__exec_group_round(const rs_exec_h x, size_t i, size_t end)
{
    size_t ns;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    if (rs__pieces_covered(x->pieces, i, end) != sh[x->pieces[i].shard].nbytes)
        return -1;
    long r = staged_round(x, i, end);
    return r == -2 ? -1 : r;
}

rs_status_t rs__exec_rounds_spanning(rs_exec_h x, rs_diag_t *diag)
{
    size_t ns, n = x->pieces_len;
    const rs_shard_ref_t *sh = rs_plan_shards(x->plan, &ns);
    if (!x->bounded)
        return RS_OK;
    for (size_t i = 0; i < n; i = rs__piece_group_end(x->pieces, n, i)) {
        size_t end = rs__piece_group_end(x->pieces, n, i), s = x->pieces[i].shard;
        if (rs__pieces_covered(x->pieces, i, end) != sh[s].nbytes ||
            staged_round(x, i, end) != -2)
            continue;
        if (!RS_VEC_PUSH(x, partial, s))
            return OOM(diag);
        if (sh[s].nbytes > x->verify_buf_len) {
            unsigned char *b = realloc(x->verify_buf, (size_t)sh[s].nbytes);
            if (b == NULL)
                return OOM(diag);
            x->verify_buf = b;
            x->verify_buf_len = sh[s].nbytes;
        }
    }
    return RS_OK;
}

/* Round w's reads, posted and awaited; the progress callback told after
 * it. */
static rs_status_t wire_round(rs_exec_h x, size_t w, uint64_t *done,
                              double t_wire, rs_diag_t *diag)
{
    size_t b = w > 0 ? x->waves[w - 1].reads_end : 0, e = x->waves[w].reads_end;
    rs_status_t st = rs__exec_wire_wave(x, w, diag);
    for (size_t i = b; st == RS_OK && i < e; i++)
        *done += x->wave_reads[i].nbytes;
    if (st == RS_OK && x->params.progress != NULL) {
        rs_progress_t p = {*done, x->plan_bytes, rs__now_s() - t_wire,
                           w + 1 < x->nwaves ? 1 : 0};
        x->params.progress(x->params.progress_ctx, &p);
    }
    return st;
}

static void add_stage(rs_exec_h x, int stage, double t0)
{
    double *s = &x->stage[stage];
    *s = (*s < 0 ? 0 : *s) + (rs__now_s() - t0);
}

/* A round's boxes quantized, then its replays and casts: those from
 * where the round before ended (`prev`, zeros for the first) to `cur`. */
static rs_status_t copy_round(rs_exec_h x, const rs__wave_t *prev,
                              const rs__wave_t *cur, int use_pool,
                              rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    double t0 = rs__now_s();
    for (size_t i = prev->quants_end; st == RS_OK && i < cur->quants_end; i++)
        if ((st = rs__exec_quantize_one(x, i, diag)) != RS_OK)
            x->failure = "quantize";
    if (cur->quants_end > prev->quants_end)
        add_stage(x, RS_STAGE_CONVERT, t0);
    size_t rb = prev->replays_end, cb = prev->casts_end;
    t0 = rs__now_s();
    if (st == RS_OK && cur->replays_end > rb) {
        st = rs__exec_run_copy_range(x, RS_STAGE_REPLAY, rb, cur->replays_end,
                                     use_pool, diag);
        add_stage(x, RS_STAGE_REPLAY, t0);
    }
    t0 = rs__now_s();
    if (st == RS_OK && cur->casts_end > cb) {
        st = rs__exec_run_copy_range(x, RS_STAGE_CONVERT, cb, cur->casts_end,
                                     use_pool, diag);
        add_stage(x, RS_STAGE_CONVERT, t0);
    }
    return st;
}

/* The shards a round completed, digested before its buffer is reused. */
static rs_status_t verify_round(rs_exec_h x, const rs__wave_t *prev,
                                const rs__wave_t *cur, rs_diag_t *diag)
{
    size_t b = prev->verify_end;
    rs_status_t st = RS_OK;
    if (!x->params.verify_digests || cur->verify_end == b)
        return RS_OK;
    double t0 = rs__now_s();
    for (size_t k = b; st == RS_OK && k < cur->verify_end; k++)
        if ((st = rs__exec_verify_group(x, x->verify_at[k], diag)) == RS_OK)
            x->stats.shards_verified++;
    if (st != RS_OK)
        x->failure = "digest";
    add_stage(x, RS_STAGE_VERIFY, t0);
    return st;
}

/* One round's local work: a task of the executor's pool in an overlapped
 * run (its copies on that one thread, in loader order). */
typedef struct round_job {
    rs_exec_h x;
    rs__wave_t prev, cur;
    rs_status_t st;
    rs_diag_t diag;
} round_job_t;

static rs_status_t local_round(rs_exec_h x, const rs__wave_t *prev,
                               const rs__wave_t *cur, int use_pool,
                               rs_diag_t *diag)
{
    rs_status_t st = copy_round(x, prev, cur, use_pool, diag);
    return st == RS_OK ? verify_round(x, prev, cur, diag) : st;
}

static void round_task(void *ctx, size_t task)
{
    round_job_t *j = ctx;
    (void)task;
    j->st = local_round(j->x, &j->prev, &j->cur, 0, &j->diag);
}

static void round_bounds(const rs_exec_h x, size_t w, rs__wave_t *prev,
                         rs__wave_t *cur)
{
    *prev = (rs__wave_t){0, 0, 0, 0, 0};
    if (w > 0)
        *prev = x->waves[w - 1];
    *cur = x->waves[w];
}

/* Round w + 1 on the wire while round w is quantized, replayed, cast and
 * verified on a pool thread: the two rounds' boxes lie in the two halves
 * of the buffer, and the direct reads all landed with round 0. A failed
 * local step is reported before a failed wire (it concerns bytes that
 * landed earlier). */
static rs_status_t run_overlapped(rs_exec_h x, uint64_t *done, double t_wire,
                                  rs_diag_t *diag)
{
    rs_status_t st = rs__exec_pool(x, diag);
    if (st != RS_OK) {
        x->failure = "prepare"; /* its threads could not start */
        return st;
    }
    x->run_threads = 2;
    st = wire_round(x, 0, done, t_wire, diag);
    for (size_t w = 0; st == RS_OK && w < x->nwaves; w++) {
        round_job_t j = {x, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, RS_OK,
                         {RS_OK, ""}};
        rs_diag_t wire_diag = {RS_OK, ""};
        rs_status_t wst = RS_OK;
        round_bounds(x, w, &j.prev, &j.cur);
        rs__pool_start(x->pool, round_task, &j, 1);
        if (w + 1 < x->nwaves)
            wst = wire_round(x, w + 1, done, t_wire, &wire_diag);
        rs__pool_join(x->pool);
        if (j.st != RS_OK) {
            if (diag != NULL)
                *diag = j.diag;
            st = j.st;
        } else if (wst != RS_OK) {
            if (diag != NULL)
                *diag = wire_diag;
            st = wst;
        }
    }
    return st;
}

static rs_status_t run_in_turn(rs_exec_h x, uint64_t *done, double t_wire,
                               rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    for (size_t w = 0; st == RS_OK && w < x->nwaves; w++) {
        rs__wave_t prev, cur;
        round_bounds(x, w, &prev, &cur);
        st = wire_round(x, w, done, t_wire, diag);
        if (st == RS_OK)
            st = local_round(x, &prev, &cur, 1, diag);
    }
    return st;
}

rs_status_t rs__exec_run_rounds(rs_exec_h x, rs_diag_t *diag)
{
    if (x->waves == NULL) /* a bounded run is only chosen with rounds */
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "executor: a run in "
                            "rounds without rounds");
    uint64_t done = 0;
    double t_wire = rs__now_s();
    x->stage[RS_STAGE_WIRE] = 0;
    rs_status_t st = x->layout.overlapped
                         ? run_overlapped(x, &done, t_wire, diag)
                         : run_in_turn(x, &done, t_wire, diag);
    x->stats.wire_seconds = x->stage[RS_STAGE_WIRE];
    if (st != RS_OK || !x->params.verify_digests)
        return st;
    /* the shards of direct reads only, and those re-read whole */
    if ((st = rs__exec_check_deadline(x, "verify", diag)) != RS_OK)
        return st;
    double t0 = rs__now_s();
    st = rs__exec_verify(x, diag);
    add_stage(x, RS_STAGE_VERIFY, t0);
    return st;
}
