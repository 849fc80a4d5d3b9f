/* The executor's run structure, measured in one run: a plan of full pulls
 * (transposes), converts (bf16 -> f32) and direct copies over in-process
 * sessions, executed serially and pipelined (wall time per run, best of
 * several), and the replay stage of serial runs on local-mt (one batch
 * across the executor's threads) against local (one copy after another on
 * the calling thread). Then the same plan under a staging budget of a
 * quarter of its staging, or twice its largest box when more (so rounds
 * can overlap: docs/executor.md, "Staging budget"), against the unbounded
 * run. Prints figures and ratios, with a memcpy of
 * the plan's bytes as the baseline.
 *
 *   pipeline_bench [MiB per source] [threads]   (defaults 4 and 2) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

#define BENCH_NAME "pipeline_bench"
#include "bench_util.h"

#define NSRC 9
#define NSESS 2
#define REPEATS 5

typedef struct world {
    int64_t rows, cols;           /* per source, bf16 */
    uint8_t *shard[NSRC][NSESS];  /* rows split between the sessions */
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan;
    uint8_t *param[NSRC];
    uint64_t pbytes[NSRC];
} world_t;

static uint64_t shard_bytes(const world_t *w)
{
    return (uint64_t)(w->rows / NSESS) * (uint64_t)w->cols * 2;
}

static uint64_t addr_of(const world_t *w, int k, int s)
{
    return 4096 + ((uint64_t)s << 40) + (uint64_t)k * shard_bytes(w);
}

static void publish(world_t *w)
{
    int64_t full[2] = {w->rows, w->cols}, shape[2] = {w->rows / NSESS, w->cols};
    check(rs_sources_create(&w->srcs), NULL, "sources");
    for (int k = 0; k < NSRC; k++) {
        char name[16];
        snprintf(name, sizeof(name), "t%d", k);
        for (int s = 0; s < NSESS; s++) {
            char sess[16];
            int64_t off[2] = {s * shape[0], 0};
            snprintf(sess, sizeof(sess), "s%d", s);
            w->shard[k][s] = malloc(shard_bytes(w));
            for (uint64_t b = 0; b < shard_bytes(w); b++)
                w->shard[k][s][b] = (uint8_t)(b * 131 + (uint64_t)k * 7 + (uint64_t)s);
            rs_shard_desc_t d = {name, RS_DTYPE_BF16, 2, 2, full, sess, 0,
                                 addr_of(w, k, s), off, shape, NULL};
            check(rs_sources_add_shard(w->srcs, &d, NULL), NULL, "shard");
        }
    }
}

/* Source k: a transpose (full pull), a cast to f32 (convert) or a plain
 * copy (direct segments), in turn. */
static void capture(world_t *w)
{
    check(rs_capture_create(&w->cap), NULL, "capture");
    for (int k = 0; k < NSRC; k++) {
        char src[16], par[16];
        snprintf(src, sizeof(src), "t%d", k);
        snprintf(par, sizeof(par), "p%d", k);
        int kind = k % 3;
        rs_dtype_t dt = kind == 1 ? RS_DTYPE_F32 : RS_DTYPE_BF16;
        int64_t numel = w->rows * w->cols;
        check(rs_capture_add_param(w->cap, par, 1, &numel, dt, NULL), NULL,
              "param");
        rs_op_t tr = {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}};
        int64_t tshape[2] = {w->cols, w->rows}, tstride[2] = {w->rows, 1};
        int64_t shape[2] = {w->rows, w->cols}, stride[2] = {w->cols, 1};
        rs_copy_desc_t c = {src, par, kind == 0 ? &tr : NULL, kind == 0,
                            0, 2, kind == 0 ? tshape : shape,
                            kind == 0 ? tstride : stride, dt};
        check(rs_capture_add_copy(w->cap, &c, NULL), NULL, "copy");
        w->pbytes[k] = (uint64_t)numel * rs_dtype_size(dt);
        w->param[k] = malloc(w->pbytes[k]);
        memset(w->param[k], 0, w->pbytes[k]);
    }
}

static rs_transport_h connect_world(const world_t *w, const char *backend,
                              unsigned threads)
{
    rs_transport_params_t tp;
    rs_transport_h t;
    rs_diag_t diag;
    rs_transport_params_init(&tp);
    tp.backend = backend;
    tp.threads = threads;
    check(rs_transport_create(&tp, &diag, &t), &diag, "transport");
    for (uint32_t s = 0; s < rs_plan_num_sessions(w->plan); s++) {
        int ps = rs_plan_session_name(w->plan, s)[1] - '0';
        rs_region_t reg[NSRC];
        for (int k = 0; k < NSRC; k++)
            reg[k] = (rs_region_t){addr_of(w, k, ps), shard_bytes(w),
                                   w->shard[k][ps]};
        rs_peer_t peer = {rs_plan_session_name(w->plan, s), 0, reg, NSRC,
                          NULL, 0};
        check(rs_transport_connect(t, s, &peer, &diag), &diag, "connect");
    }
    return t;
}

typedef struct figures {
    double run_s, replay_s, wire_s;
    uint64_t waves, threads, staging, rounds;
} figures_t;

/* Best of REPEATS runs (after one that prepares and faults in staging). */
static figures_t measure(const world_t *w, rs_transport_h t, int serial,
                         uint64_t budget)
{
    rs_exec_params_t ep;
    rs_exec_h x;
    rs_diag_t diag;
    rs_exec_stages_t sg;
    figures_t f = {1e30, 1e30, 1e30, 0, 0, 0, 0};
    rs_exec_params_init(&ep);
    ep.serial = serial;
    ep.staging_budget = budget;
    check(rs_exec_create(w->plan, t, &ep, &diag, &x), &diag, "exec");
    for (int k = 0; k < NSRC; k++)
        check(rs_exec_bind(x, (size_t)k, w->param[k], w->pbytes[k],
                           RS_MEM_HOST, &diag), &diag, "bind");
    for (int r = 0; r <= REPEATS; r++) {
        double t0 = rs_clock_seconds();
        check(rs_exec_run(x, &diag), &diag, "run");
        double wall = rs_clock_seconds() - t0;
        rs_exec_stages(x, &sg);
        if (r == 0)
            continue;
        f.run_s = wall < f.run_s ? wall : f.run_s;
        f.replay_s = sg.replay_s < f.replay_s ? sg.replay_s : f.replay_s;
        f.wire_s = sg.wire_s < f.wire_s ? sg.wire_s : f.wire_s;
        f.waves = sg.waves;
        f.threads = sg.threads;
        f.staging = sg.staging_bytes;
        f.rounds = sg.staging_rounds;
    }
    rs_exec_destroy(x);
    return f;
}

static double memcpy_s(uint64_t bytes)
{
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    double best = 1e30;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int r = 0; r < REPEATS; r++) {
        double t0 = rs_clock_seconds();
        memcpy(b, a, bytes);
        double t = rs_clock_seconds() - t0;
        best = t < best ? t : best;
    }
    free(a);
    free(b);
    return best;
}

static void print_run(const char *what, const figures_t *f, double base)
{
    printf("  %-28s %8.2f ms  (waves %llu, threads %llu, staging %.1f MiB "
           "in %llu round(s))  memcpy/run %.2fx\n", what, f->run_s * 1e3,
           (unsigned long long)f->waves, (unsigned long long)f->threads,
           (double)f->staging / (1 << 20), (unsigned long long)f->rounds,
           base / f->run_s);
}

int main(int argc, char **argv)
{
    world_t w;
    rs_diag_t diag;
    rs_plan_params_t pp;
    double mib = argc > 1 ? atof(argv[1]) : 4;
    unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    memset(&w, 0, sizeof(w));
    w.rows = 1024;
    w.cols = (int64_t)(mib * (1 << 20) / 2 / 1024);
    w.cols = w.cols < 16 ? 16 : w.cols;
    publish(&w);
    capture(&w);
    rs_plan_params_init(&pp);
    check(rs_plan_build(w.cap, w.srcs, &pp, &diag, &w.plan), &diag, "plan");
    uint64_t bytes = 0;
    for (int k = 0; k < NSRC; k++)
        bytes += w.pbytes[k];
    double base = memcpy_s(bytes);
    printf("pipeline_bench: %d sources of %lldx%lld bf16 (%.1f MiB written "
           "per run), memcpy of that: %.2f ms\n", NSRC, (long long)w.rows,
           (long long)w.cols, (double)bytes / (1 << 20), base * 1e3);
    rs_transport_h local = connect_world(&w, "local", 0);
    rs_transport_h mt = connect_world(&w, "local-mt", threads);
    figures_t ls = measure(&w, local, 1, 0), lp = measure(&w, local, 0, 0);
    figures_t ms = measure(&w, mt, 1, 0), mp = measure(&w, mt, 0, 0);
    print_run("local serial", &ls, base);
    print_run("local pipelined", &lp, base);
    print_run("local-mt serial", &ms, base);
    print_run("local-mt pipelined", &mp, base);
    printf("  pipelined vs serial wall: local %.2fx, local-mt %.2fx "
           "(serial time / pipelined time)\n", ls.run_s / lp.run_s,
           ms.run_s / mp.run_s);
    printf("  replay stage of serial runs: local %.2f ms, local-mt/%u "
           "batch %.2f ms: %.2fx\n", ls.replay_s * 1e3, threads,
           ms.replay_s * 1e3, ls.replay_s / ms.replay_s);
    rs_staging_need_t need;
    check(rs_exec_staging_need(w.plan, NULL, &diag, &need), &diag, "need");
    uint64_t budget = need.unbounded / 4 > 2 * need.largest
                          ? need.unbounded / 4 : 2 * need.largest;
    figures_t bs = measure(&w, mt, 1, budget), bp = measure(&w, mt, 0, budget);
    char what[64];
    snprintf(what, sizeof(what), "local-mt serial, %.1f MiB",
             (double)budget / (1 << 20));
    print_run(what, &bs, base);
    snprintf(what, sizeof(what), "local-mt pipelined, %.1f MiB",
             (double)budget / (1 << 20));
    print_run(what, &bp, base);
    printf("  staging budget vs unbounded wall (unbounded time / bounded "
           "time): serial %.2fx, pipelined %.2fx\n",
           ms.run_s / bs.run_s, mp.run_s / bp.run_s);
    rs_transport_destroy(local);
    rs_transport_destroy(mt);
    rs_plan_destroy(w.plan);
    rs_capture_destroy(w.cap);
    rs_sources_destroy(w.srcs);
    for (int k = 0; k < NSRC; k++) {
        free(w.param[k]);
        for (int s = 0; s < NSESS; s++)
            free(w.shard[k][s]);
    }
    return 0;
}
