/* The cost of the executor's own plan checks (src/exec/guard.c: staged
 * reads per dim, destinations, declared bytes and double writes, all at
 * prepare) and of the sampled replay check (src/exec/replay_check.c, in
 * every run), against the same executor with them switched off
 * (rs__exec_guard_on = 0), measured in one run, on and off alternating.
 * The model: NT tensors of ROWS x cols bf16, each split by columns over
 * NSESS in-process sessions; even tensors copied as they lie (exact
 * segments, one per row and shard), odd ones transposed (full pulls, one
 * replay each). Prints prepare and run times (best of REPEATS each) and
 * the ratios on/off, in CPU time of the process (all threads).
 *
 *   guard_bench [tensors] [cols]   (defaults 512 and 512) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec_impl.h"
#include "reshard/reshard.h"

#define BENCH_NAME "guard_bench"
#include "bench_util.h"

#define NSESS 4
#define ROWS 64
#define REPEATS 15
#define ADDR 65536

typedef struct world {
    int nt;
    int64_t cols;
    uint8_t *shard[NSESS]; /* every tensor's part of session s, back to back */
    uint64_t part;         /* bytes of one tensor's part */
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan;
    uint8_t **param;
    uint64_t pbytes;
    rs_transport_h t;
} world_t;

static void publish(world_t *w)
{
    int64_t full[2] = {ROWS, w->cols}, shape[2] = {ROWS, w->cols / NSESS};
    char name[32];
    rs_diag_t diag;
    w->part = (uint64_t)ROWS * (uint64_t)shape[1] * 2;
    check(rs_sources_create(&w->srcs), &diag, "sources");
    for (int s = 0; s < NSESS; s++) {
        w->shard[s] = malloc(w->part * (uint64_t)w->nt);
        for (uint64_t b = 0; b < w->part * (uint64_t)w->nt; b++)
            w->shard[s][b] = (uint8_t)(b * 7 + (uint64_t)s);
    }
    for (int k = 0; k < w->nt; k++) {
        snprintf(name, sizeof(name), "t%d", k);
        for (int s = 0; s < NSESS; s++) {
            int64_t off[2] = {0, s * shape[1]};
            char sess[8];
            snprintf(sess, sizeof(sess), "s%d", s);
            rs_shard_desc_t d = {name, RS_DTYPE_BF16, 2, 2, full, sess, 0,
                                 ADDR + (uint64_t)k * w->part, off, shape,
                                 NULL};
            check(rs_sources_add_shard(w->srcs, &d, &diag), &diag, "shard");
        }
    }
}

static void capture(world_t *w)
{
    int64_t pshape[2] = {ROWS, w->cols}, tshape[2] = {w->cols, ROWS};
    int64_t pst[2] = {w->cols, 1}, tst[2] = {ROWS, 1};
    rs_op_t tr = {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}};
    char src[32], par[32];
    rs_diag_t diag;
    check(rs_capture_create(&w->cap), &diag, "capture");
    w->pbytes = (uint64_t)ROWS * (uint64_t)w->cols * 2;
    w->param = calloc((size_t)w->nt, sizeof(uint8_t *));
    for (int k = 0; k < w->nt; k++) {
        int t = k % 2;
        snprintf(src, sizeof(src), "t%d", k);
        snprintf(par, sizeof(par), "p%d", k);
        check(rs_capture_add_param(w->cap, par, 2, t ? tshape : pshape,
                                   RS_DTYPE_BF16, &diag), &diag, "param");
        rs_copy_desc_t c = {src, par, &tr, (size_t)t, 0, 2,
                            t ? tshape : pshape, t ? tst : pst,
                            RS_DTYPE_BF16};
        check(rs_capture_add_copy(w->cap, &c, &diag), &diag, "copy");
        w->param[k] = malloc(w->pbytes);
    }
}

static void connect(world_t *w)
{
    rs_diag_t diag;
    check(rs_transport_create(NULL, &diag, &w->t), &diag, "transport");
    for (uint32_t s = 0; s < rs_plan_num_sessions(w->plan); s++) {
        int ps = rs_plan_session_name(w->plan, s)[1] - '0';
        rs_region_t reg = {ADDR, w->part * (uint64_t)w->nt, w->shard[ps]};
        rs_peer_t peer = {rs_plan_session_name(w->plan, s), 0, &reg, 1,
                          NULL, 0};
        check(rs_transport_connect(w->t, s, &peer, &diag), &diag, "connect");
    }
}

/* CPU seconds of the process (every thread): on a loaded machine far
 * steadier than wall time, and what the checks cost is CPU. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One executor with the checks on or off: its prepare and best run. */
static void measure(world_t *w, int on, double *prep_s, double *run_s)
{
    rs_exec_h x;
    rs_diag_t diag;
    rs__exec_guard_on = on;
    check(rs_exec_create(w->plan, w->t, NULL, &diag, &x), &diag, "exec");
    for (int k = 0; k < w->nt; k++)
        check(rs_exec_bind(x, (size_t)k, w->param[k], w->pbytes,
                           RS_MEM_HOST, &diag), &diag, "bind");
    double t0 = cpu_s();
    check(rs_exec_prepare(x, &diag), &diag, "prepare");
    double p = cpu_s() - t0;
    *prep_s = p < *prep_s ? p : *prep_s;
    for (int r = 0; r < 3; r++) {
        t0 = cpu_s();
        check(rs_exec_run(x, &diag), &diag, "run");
        double t = cpu_s() - t0;
        *run_s = t < *run_s ? t : *run_s;
    }
    rs_exec_destroy(x);
    rs__exec_guard_on = 1;
}

int main(int argc, char **argv)
{
    world_t w;
    rs_diag_t diag;
    rs_plan_params_t pp;
    rs_plan_stats_t st;
    size_t nseg, nfp;
    memset(&w, 0, sizeof(w));
    w.nt = argc > 1 ? atoi(argv[1]) : 512;
    w.cols = argc > 2 ? atoll(argv[2]) : 512;
    if (w.nt < 2 || w.cols < NSESS || w.cols % NSESS != 0) {
        fprintf(stderr, "usage: guard_bench [tensors >= 2] [cols, a "
                "multiple of %d]\n", NSESS);
        return 2;
    }
    publish(&w);
    capture(&w);
    rs_plan_params_init(&pp);
    check(rs_plan_build(w.cap, w.srcs, &pp, &diag, &w.plan), &diag, "plan");
    rs_plan_stats(w.plan, &st);
    rs_plan_segments(w.plan, &nseg);
    rs_plan_staged_reads(w.plan, &nfp);
    connect(&w);
    double prep[2] = {1e30, 1e30}, run[2] = {1e30, 1e30};
    for (int r = 0; r < REPEATS; r++)
        for (int on = 0; on < 2; on++)
            measure(&w, on, &prep[on], &run[on]);
    printf("%d tensors of %d x %lld bf16 (%.1f MiB): %zu exact segments, "
           "%zu staged reads, %llu descriptors\n", w.nt, ROWS,
           (long long)w.cols, (double)w.pbytes * w.nt / (1 << 20), nseg,
           nfp, (unsigned long long)st.descriptor_count);
    printf("  prepare  checks off %8.3f ms  on %8.3f ms  on/off %.3fx\n",
           prep[0] * 1e3, prep[1] * 1e3, prep[1] / prep[0]);
    printf("  run      checks off %8.3f ms  on %8.3f ms  on/off %.3fx\n",
           run[0] * 1e3, run[1] * 1e3, run[1] / run[0]);
    printf("  (CPU time, best of %d executors each, on and off "
           "alternating; runs: best of 3 per executor)\n", REPEATS);
    rs_transport_destroy(w.t);
    rs_plan_destroy(w.plan);
    rs_capture_destroy(w.cap);
    rs_sources_destroy(w.srcs);
    for (int k = 0; k < w.nt; k++)
        free(w.param[k]);
    free(w.param);
    for (int s = 0; s < NSESS; s++)
        free(w.shard[s]);
    return 0;
}
