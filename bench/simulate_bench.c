/* What `reshard simulate` costs at real sizes: Llama-3.1-70B
 * (megatron:tp=8,pp=4,dp=2 -> vllm:tp=8,dp=4), Kimi-K2
 * (megatron:tp=8,pp=16,ep=16 -> vllm:tp=8,ep=8,dp=16, FP8 without
 * publisher-side copies; and -> vllm:tp=8,ep=128,dp=16, the FP8 pair with
 * and without them), DeepSeek-V3
 * (megatron:tp=1,pp=16,ep=64 -> vllm:tp=16), Qwen3-30B-A3B and
 * Qwen2.5-0.5B. Each run publishes every trainer table, then captures,
 * plans and coverage-checks every inference rank, in a child process so
 * that its peak RSS is its own. Prints planning time per rank and in total
 * (wall and CPU time of the planning thread, so a busy machine shows as the
 * gap between them) against the time to generate the same captures (the
 * baseline), and per rank the bytes the copies need, the bytes on the wire,
 * descriptors, and peak memory.
 * usage: simulate_bench [SOURCE_DIR [NAME]] (default: the current
 * directory, every scenario; NAME runs those whose config starts with it) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "reshard_layout/layout.h"

#define BENCH_NAME "simulate_bench"
#include "bench_util.h"

typedef struct scenario {
    const char *config, *train, *infer;
    unsigned flags; /* RS_LAYOUT_FP8_COPIES: publisher-side FP8 copies */
} scenario_t;

static const scenario_t scenarios[] = {
    {"llama-3.1-70b.json", "megatron:tp=8,pp=4,dp=2", "vllm:tp=8,dp=4", 0},
    {"kimi-k2.json", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=8,dp=16", 0},
    /* The FP8 pair: the same FP8 captures against tables with and
     * without publisher-side FP8 copies (receivers quantize every block). */
    {"kimi-k2.json", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=128,dp=16",
     RS_LAYOUT_FP8_COPIES},
    {"kimi-k2.json", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=128,dp=16", 0},
    {"deepseek-v3.json", "megatron:tp=1,pp=16,ep=64", "vllm:tp=16", 0},
    {"qwen3-30b-a3b.json", "megatron:tp=2,ep=4", "vllm:tp=2,ep=2,dp=2", 0},
    {"qwen2.5-0.5b.json", "fsdp:4", "vllm:tp=2", 0},
};

typedef struct rank_fig {
    double plan_s, plan_cpu_s, capture_s;
    uint64_t descriptors, bytes, needed;
} rank_fig_t;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min, median and max of n values (sorted in place). */
static void spread(double *v, size_t n, double out[3])
{
    qsort(v, n, sizeof(double), cmp_double);
    out[0] = v[0];
    out[1] = v[n / 2];
    out[2] = v[n - 1];
}

/* Every byte of rank r's parameters written but the vocab padding. */
static void check_coverage(rs_plan_h plan, rs_transport_h t, int64_t r,
                           uint64_t padding)
{
    rs_exec_h x;
    rs_coverage_t cov;
    rs_diag_t d;
    rs_diag_clear(&d);
    check(rs_exec_create(plan, t, NULL, &d, &x), &d, "rs_exec_create");
    check(rs_exec_coverage(x, &d, &cov), &d, "rs_exec_coverage");
    rs_exec_destroy(x);
    if (!rs_plan_is_complete(plan) || cov.bytes_multi != 0 ||
        cov.bytes_total - cov.bytes_covered != padding) {
        fprintf(stderr, "simulate_bench: inference rank %lld is not fully "
                "covered\n", (long long)r);
        exit(1);
    }
}

static void plan_rank(rs_model_h m, const rs_layout_t *infer,
                      rs_sources_h src, rs_transport_h t, int64_t r,
                      rank_fig_t *f)
{
    rs_capture_h cap;
    rs_plan_h plan;
    rs_plan_params_t pp;
    rs_plan_stats_t st;
    rs_diag_t d;
    uint64_t padding = 0;
    rs_diag_clear(&d);
    double t0 = rs_clock_seconds();
    check(rs_layout_capture(m, infer, r, &d, &cap, &padding), &d,
          "rs_layout_capture");
    double t1 = rs_clock_seconds();
    rs_plan_params_init(&pp);
    pp.replica_salt = (uint64_t)r;
    double c1 = cpu_s();
    check(rs_plan_build(cap, src, &pp, &d, &plan), &d, "rs_plan_build");
    double t2 = rs_clock_seconds();
    f->plan_cpu_s = cpu_s() - c1;
    check_coverage(plan, t, r, padding);
    rs_plan_stats(plan, &st);
    f->capture_s = t1 - t0;
    f->plan_s = t2 - t1;
    f->descriptors = st.descriptor_count;
    f->bytes = st.bytes_planned;
    f->needed = st.needed_bytes;
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
}

static void layout(rs_model_h m, const char *spec, rs_layout_t *l)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    check(rs_layout_parse(spec, &d, l), &d, spec);
    check(rs_layout_check(l, m, &d), &d, spec);
}

/* unit "B": a size (B/KiB/MiB/GiB); otherwise v * k with two decimals
 * and the unit after it; never in scientific notation. */
static const char *fig(char *buf, size_t len, double v, double k,
                       const char *unit)
{
    if (strcmp(unit, "B") == 0)
        return rs_format_bytes(buf, len, (uint64_t)v);
    snprintf(buf, len, k == 1 ? "%.0f%s%s" : "%.2f%s%s", v * k,
             *unit ? " " : "", unit);
    return buf;
}

static void print_spread(const char *what, double *v, size_t n, double k,
                         const char *unit)
{
    double s[3];
    char a[RS_UNITS_TEXT_MAX], b[RS_UNITS_TEXT_MAX], c[RS_UNITS_TEXT_MAX];
    spread(v, n, s);
    printf("  %-28s min %s  median %s  max %s\n", what,
           fig(a, sizeof(a), s[0], k, unit), fig(b, sizeof(b), s[1], k, unit),
           fig(c, sizeof(c), s[2], k, unit));
}

static void report(const rank_fig_t *f, size_t n, double publish_s)
{
    double *v = malloc(n * sizeof(double));
    double plan = 0, plan_cpu = 0, capture = 0;
    if (v == NULL)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        plan += f[i].plan_s;
        plan_cpu += f[i].plan_cpu_s;
        capture += f[i].capture_s;
    }
    printf("  publishing every table       %.3f s\n", publish_s);
    printf("  planning, all ranks          %.3f s, %.3f s CPU  (%.2fx the "
           "%.3f s to generate the captures)\n", plan, plan_cpu,
           capture > 0 ? plan / capture : 0, capture);
    for (size_t i = 0; i < n; i++)
        v[i] = f[i].plan_s;
    print_spread("planning per rank", v, n, 1e3, "ms");
    for (size_t i = 0; i < n; i++)
        v[i] = f[i].plan_cpu_s;
    print_spread("planning per rank (CPU)", v, n, 1e3, "ms");
    for (size_t i = 0; i < n; i++)
        v[i] = (double)f[i].needed;
    print_spread("bytes needed per rank", v, n, 1, "B");
    for (size_t i = 0; i < n; i++)
        v[i] = (double)f[i].descriptors;
    print_spread("descriptors per rank", v, n, 1, "");
    for (size_t i = 0; i < n; i++)
        v[i] = (double)f[i].bytes;
    print_spread("bytes on the wire per rank", v, n, 1, "B");
    free(v);
}

static void run(const char *dir, const scenario_t *s)
{
    char path[4096];
    rs_model_h m;
    rs_layout_t train, infer;
    rs_sources_h src;
    rs_transport_h t;
    rs_diag_t d;
    rs_diag_clear(&d);
    snprintf(path, sizeof(path), "%s/examples/models/%s", dir, s->config);
    check(rs_model_load(path, &d, &m), &d, path);
    layout(m, s->train, &train);
    layout(m, s->infer, &infer);
    printf("%s: %s (%lld ranks) -> %s (%lld ranks), %.1f B parameters%s\n",
           s->config, s->train, (long long)train.world, s->infer,
           (long long)infer.world, (double)rs_model_num_params(m) / 1e9,
           rs_model_quantization(m) == NULL ? ""
           : s->flags & RS_LAYOUT_FP8_COPIES ? ", FP8, publisher-side copies"
                                             : ", FP8, receiver-side only");
    fflush(stdout);
    double t0 = rs_clock_seconds();
    check(rs_sources_create(&src), &d, "rs_sources_create");
    check(rs_layout_publish_all_ex(m, &train, NULL, s->flags, src, &d), &d,
          "publish_all");
    double publish_s = rs_clock_seconds() - t0;
    check(rs_transport_create(NULL, &d, &t), &d, "rs_transport_create");
    rank_fig_t *f = calloc((size_t)infer.world, sizeof(rank_fig_t));
    if (f == NULL)
        exit(1);
    for (int64_t r = 0; r < infer.world; r++)
        plan_rank(m, &infer, src, t, r, &f[r]);
    report(f, (size_t)infer.world, publish_s);
    fflush(stdout);
    free(f);
    rs_transport_destroy(t);
    rs_sources_destroy(src);
    rs_model_destroy(m);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    const char *only = argc > 2 ? argv[2] : "";
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        if (strncmp(scenarios[i].config, only, strlen(only)) != 0)
            continue;
        fflush(stdout);
        pid_t child = fork();
        if (child < 0)
            return 1;
        if (child == 0) {
            run(dir, &scenarios[i]);
            _exit(0);
        }
        int status;
        struct rusage ru;
        if (wait4(child, &status, 0, &ru) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 1;
        printf("  peak memory (max RSS)        %.1f MiB\n\n",
               (double)ru.ru_maxrss / 1024.0);
    }
    return 0;
}
