/* Planning throughput on a synthetic model: 12,500 source tensors of
 * [4096, 1024] bf16, each row-sharded 8 ways (512 rows per trainer session),
 * and a 100,000-copy capture mixing fused row loads with column narrows.
 * Prints copies/s and segments/s against a memcpy of the emitted records. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard/reshard.h"

#define BENCH_NAME "plan_bench"
#include "bench_util.h"

#define NSOURCES 12500
#define NSESSIONS 8
#define ROWS 4096
#define COLS 1024
#define ROWS_PER_SESSION (ROWS / NSESSIONS)
#define COPIES_PER_SOURCE 8
#define ELSIZE 2
#define REPEATS 3

static void source_name(char *buf, size_t size, int s)
{
    snprintf(buf, size, "layers.%d.w%d", s / 8, s % 8);
}

/* Every session owns rows [r*512, (r+1)*512) of every tensor, packed back to
 * back in its address space. */
static rs_sources_h make_sources(void)
{
    static const int64_t full[2] = {ROWS, COLS};
    const uint64_t shard_bytes = (uint64_t)ROWS_PER_SESSION * COLS * ELSIZE;
    rs_sources_h src;
    rs_diag_t diag;
    char name[64], session[32];

    rs_diag_clear(&diag);
    check(rs_sources_create(&src), &diag, "rs_sources_create");
    for (int s = 0; s < NSOURCES; s++) {
        source_name(name, sizeof(name), s);
        for (int r = 0; r < NSESSIONS; r++) {
            int64_t off[2] = {(int64_t)r * ROWS_PER_SESSION, 0};
            int64_t shape[2] = {ROWS_PER_SESSION, COLS};
            snprintf(session, sizeof(session), "trainer-%d", r);
            rs_shard_desc_t d = {
                .tensor = name, .dtype = RS_DTYPE_BF16, .elsize = ELSIZE,
                .ndim = 2, .full_shape = full, .session = session,
                .device_id = r, .addr = 0x10000000000ull * (uint64_t)(r + 1) +
                                        (uint64_t)s * shard_bytes,
                .offset = off, .shape = shape, .digest = NULL};
            check(rs_sources_add_shard(src, &d, &diag), &diag, "add_shard");
        }
    }
    return src;
}

static void add_copy(rs_capture_h cap, const char *src, const char *param,
                     const rs_op_t *ops, size_t nops, int64_t dest_offset,
                     const int64_t *shape, const int64_t *stride)
{
    rs_diag_t diag;
    rs_copy_desc_t c = {.src = src, .param = param, .ops = ops, .nops = nops,
                        .dest_offset = dest_offset, .ndim = 2,
                        .dest_shape = shape, .dest_stride = stride,
                        .dest_dtype = RS_DTYPE_BF16};
    rs_diag_clear(&diag);
    check(rs_capture_add_copy(cap, &c, &diag), &diag, "add_copy");
}

/* Even sources, in pairs: a row-parallel inference rank reads rows
 * [0, 2048) of both into one fused [4096, 1024] param, 256 rows per copy. */
static void add_fused_pair(rs_capture_h cap, int s)
{
    static const int64_t pshape[2] = {ROWS, COLS};
    static const int64_t shape[2] = {256, COLS}, stride[2] = {COLS, 1};
    char param[64], name[64];
    rs_diag_t diag;

    rs_diag_clear(&diag);
    snprintf(param, sizeof(param), "fused.%d", s);
    check(rs_capture_add_param(cap, param, 2, pshape, RS_DTYPE_BF16, &diag),
          &diag, "add_param");
    for (int half = 0; half < 2; half++) {
        source_name(name, sizeof(name), s + 2 * half);
        for (int k = 0; k < COPIES_PER_SOURCE; k++) {
            rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, k * 256, 256},
                          .has = 7};
            int64_t dest = ((int64_t)half * 2048 + k * 256) * COLS;
            add_copy(cap, name, param, &op, 1, dest, shape, stride);
        }
    }
}

/* Odd sources: a column-parallel rank reads columns [0, 512) of 64 rows out
 * of every 512 (one band per session): 64 runs of 1 KiB per copy. */
static void add_column_reads(rs_capture_h cap, int s)
{
    static const int64_t pshape[2] = {512, 512};
    static const int64_t shape[2] = {64, 512}, stride[2] = {512, 1};
    char param[64], name[64];
    rs_diag_t diag;

    rs_diag_clear(&diag);
    snprintf(param, sizeof(param), "colpar.%d", s);
    source_name(name, sizeof(name), s);
    check(rs_capture_add_param(cap, param, 2, pshape, RS_DTYPE_BF16, &diag),
          &diag, "add_param");
    for (int k = 0; k < COPIES_PER_SOURCE; k++) {
        rs_op_t ops[2] = {
            {.kind = RS_OP_NARROW, .arg = {0, k * ROWS_PER_SESSION, 64}, .has = 7},
            {.kind = RS_OP_NARROW, .arg = {1, 0, 512}, .has = 7}};
        add_copy(cap, name, param, ops, 2, (int64_t)k * 64 * 512, shape, stride);
    }
}

static rs_capture_h make_capture(void)
{
    rs_capture_h cap;
    check(rs_capture_create(&cap), &(rs_diag_t){0}, "rs_capture_create");
    /* Sources come in blocks of 4: 0 and 2 fused, 1 and 3 column reads. */
    for (int s = 0; s < NSOURCES; s += 4) {
        add_fused_pair(cap, s);
        add_column_reads(cap, s + 1);
        add_column_reads(cap, s + 3);
    }
    return cap;
}

typedef struct run_result {
    double best_s;
    size_t segments;      /* every descriptor: exact + staging */
    rs_plan_stats_t stats;
    size_t full_pulls;
    int complete;
} run_result_t;

static size_t count_segments(rs_plan_h plan, size_t *full_pulls_p)
{
    size_t n, total;
    rs_plan_segments(plan, &total);
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; i < n; i++)
        total += cv[i].nsegments;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; i < n; i++)
        total += fp[i].nsegments;
    *full_pulls_p = n;
    return total;
}

static run_result_t time_build(rs_capture_h cap, rs_sources_h src,
                               int64_t max_segments)
{
    run_result_t r = {.best_s = 1e30};
    rs_plan_params_t params;
    rs_diag_t diag;

    rs_plan_params_init(&params);
    params.max_segments_per_copy = max_segments;
    for (int i = 0; i < REPEATS; i++) {
        rs_plan_h plan;
        rs_diag_clear(&diag);
        double t0 = rs_clock_seconds();
        check(rs_plan_build(cap, src, &params, &diag, &plan), &diag,
              "rs_plan_build");
        double dt = rs_clock_seconds() - t0;
        if (dt < r.best_s)
            r.best_s = dt;
        r.segments = count_segments(plan, &r.full_pulls);
        rs_plan_stats(plan, &r.stats);
        r.complete = rs_plan_is_complete(plan);
        rs_plan_destroy(plan);
    }
    return r;
}

/* Baseline: copying the same number of segment records with memcpy, the
 * least any planner that writes its output must spend. */
static double memcpy_records_per_s(size_t nrecords)
{
    size_t bytes = nrecords * sizeof(rs_segment_t);
    rs_segment_t *a = malloc(bytes), *b = malloc(bytes);
    double best = 1e30;

    if (a == NULL || b == NULL) {
        fprintf(stderr, "plan_bench: out of memory\n");
        exit(1);
    }
    memset(a, 0x5a, bytes);
    memset(b, 0, bytes);
    for (int i = 0; i < REPEATS; i++) {
        double t0 = rs_clock_seconds();
        memcpy(b, a, bytes);
        __asm__ __volatile__("" : : "r"(b) : "memory");
        double dt = rs_clock_seconds() - t0;
        if (dt < best)
            best = dt;
    }
    free(a);
    free(b);
    return (double)nrecords / best;
}

static void report(const char *label, const run_result_t *r, size_t ncopies,
                   double baseline)
{
    double seg_rate = (double)r->segments / r->best_s;
    printf("%s\n", label);
    printf("  plan build (best of %d)  %10.3f ms   %s\n", REPEATS,
           r->best_s * 1e3, r->complete ? "complete" : "INCOMPLETE");
    printf("  descriptors              %10zu   (exact plan %" PRIu64
           ", full pulls %zu)\n",
           r->segments, r->stats.exact_descriptor_count, r->full_pulls);
    printf("  bytes planned            %10.1f GiB (extra on the wire %.1f GiB)\n",
           (double)r->stats.bytes_planned / (1u << 30),
           (double)r->stats.extra_wire_bytes / (1u << 30));
    printf("  copies/s                 %10.0f\n", (double)ncopies / r->best_s);
    printf("  segments/s               %10.0f   (%.3f x memcpy of the records)\n",
           seg_rate, seg_rate / baseline);
}

int main(void)
{
    double t0 = rs_clock_seconds();
    rs_sources_h src = make_sources();
    rs_capture_h cap = make_capture();
    size_t ncopies = rs_capture_num_copies(cap);

    printf("plan_bench: %zu copies, %d sources [%d, %d] bf16, %zu shards over "
           "%d sessions (setup %.2f s)\n",
           ncopies, NSOURCES, ROWS, COLS, rs_sources_num_shards(src),
           NSESSIONS, rs_clock_seconds() - t0);
    run_result_t exact = time_build(cap, src, INT64_MAX);
    run_result_t bounded = time_build(cap, src, 16);
    double baseline = memcpy_records_per_s(exact.segments);
    printf("baseline: memcpy of %zu segment records (%zu B each): %.0f "
           "records/s\n\n", exact.segments, sizeof(rs_segment_t), baseline);
    report("exact plan (no descriptor bound)", &exact, ncopies, baseline);
    report("\nbounded plan (--max-segments-per-copy 16: column reads become "
           "full pulls)", &bounded, ncopies, baseline);
    rs_capture_destroy(cap);
    rs_sources_destroy(src);
    return 0;
}
