/* What cut-aligned trainer tables buy (docs/cut-aligned.md): for each model
 * and layout pair, every inference rank is planned against whole-shard
 * tables (the baseline) and against tables
 * split at the union of all inference ranks' cuts, in the same run. Prints
 * per rank the bytes needed and on the wire, descriptors, the largest
 * number of descriptors one (tensor, receiver, publisher) takes, the wire
 * lower bound, the size of the tables and the time to derive the cuts.
 * usage: cuts_bench [SOURCE_DIR] [SCENARIO_INDEX] (default: ".", all) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"
#include "reshard_layout/layout.h"

#define BENCH_NAME "cuts_bench"
#include "bench_util.h"

typedef struct scenario {
    const char *config, *train, *infer;
} scenario_t;

static const scenario_t scenarios[] = {
    {"deepseek-v3.json", "megatron:tp=1,pp=16,ep=64", "vllm:tp=16"},
    {"qwen2.5-0.5b.json", "fsdp:4", "vllm:tp=2"},
    {"llama-3.1-70b.json", "megatron:tp=8,pp=4,dp=2", "vllm:tp=8,dp=4"},
    {"kimi-k2.json", "megatron:tp=8,pp=16,ep=16", "vllm:tp=8,ep=8,dp=16"},
};

/* One published box, for attributing a descriptor to its tensor. */
typedef struct shard_at {
    const char *session, *tensor;
    uint64_t addr, nbytes;
} shard_at_t;

typedef struct tables {
    shard_at_t *s;
    size_t n;
    uint64_t json_bytes;
} tables_t;

typedef struct fig {
    double needed, wire, desc, max_per, plan_s;
    const char *max_tensor; /* a tensor taking max_per descriptors */
} fig_t;

static int cmp_shard(const void *a, const void *b)
{
    const shard_at_t *x = a, *y = b;
    int c = strcmp(x->session, y->session);
    return c ? c : (x->addr > y->addr) - (x->addr < y->addr);
}

static void index_tables(rs_sources_h src, tables_t *t)
{
    t->n = rs_sources_num_shards(src);
    t->s = calloc(t->n + 1, sizeof(*t->s));
    if (t->s == NULL)
        exit(1);
    for (size_t i = 0; i < t->n; i++) {
        rs_shard_desc_t d;
        uint64_t nb = d.elsize = 0;
        rs_sources_shard(src, i, &d);
        nb = d.elsize;
        for (int k = 0; k < d.ndim; k++)
            nb *= (uint64_t)d.shape[k];
        t->s[i] = (shard_at_t){d.session, d.tensor, d.addr, nb};
    }
    qsort(t->s, t->n, sizeof(*t->s), cmp_shard);
}

/* The shard of `session` holding addr. */
static const shard_at_t *find(const tables_t *t, const char *session,
                              uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    shard_at_t key = {session, NULL, addr, 0};
    while (lo < hi) { /* first shard after key */
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_shard(&t->s[mid], &key) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || strcmp(t->s[lo - 1].session, session) != 0)
        return NULL;
    return &t->s[lo - 1];
}

typedef struct key {
    uint32_t session;
    const char *tensor;
} key_t_;

static int cmp_key(const void *a, const void *b)
{
    const key_t_ *x = a, *y = b;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

static void add_keys(const tables_t *t, rs_plan_h plan, const rs_segment_t *s,
                     size_t n, key_t_ *out, size_t *len)
{
    for (size_t i = 0; i < n; i++) {
        const shard_at_t *sh = find(t, rs_plan_session_name(plan, s[i].session),
                                    s[i].src_addr);
        out[(*len)++] = (key_t_){s[i].session, sh ? sh->tensor : NULL};
    }
}

/* The most descriptors any one (tensor, publisher) takes in the plan;
 * *tensor_p names the first tensor that takes them. */
static uint64_t max_per_pair(const tables_t *t, rs_plan_h plan,
                             uint64_t total, const char **tensor_p)
{
    size_t n, len = 0, best = 0;
    key_t_ *k = calloc(total + 1, sizeof(*k));
    if (k == NULL)
        exit(1);
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    add_keys(t, plan, seg, n, k, &len);
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; i < n; i++)
        add_keys(t, plan, cv[i].segments, cv[i].nsegments, k, &len);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; i < n; i++)
        add_keys(t, plan, fp[i].segments, fp[i].nsegments, k, &len);
    qsort(k, len, sizeof(*k), cmp_key);
    for (size_t i = 0, j; i < len; i = j) {
        for (j = i; j < len && cmp_key(&k[i], &k[j]) == 0; j++)
            ;
        if (j - i > best) {
            best = j - i;
            *tensor_p = k[i].tensor;
        }
    }
    free(k);
    return best;
}

static void plan_rank(rs_model_h m, const rs_layout_t *infer,
                      rs_sources_h src, const tables_t *t, int64_t r,
                      fig_t *f)
{
    rs_capture_h cap;
    rs_plan_h plan;
    rs_plan_params_t pp;
    rs_plan_stats_t st;
    rs_diag_t d;
    uint64_t padding = 0;
    rs_diag_clear(&d);
    check(rs_layout_capture(m, infer, r, &d, &cap, &padding), &d, "capture");
    rs_plan_params_init(&pp);
    pp.replica_salt = (uint64_t)r;
    double t0 = rs_clock_seconds();
    check(rs_plan_build(cap, src, &pp, &d, &plan), &d, "rs_plan_build");
    f->plan_s = rs_clock_seconds() - t0;
    if (!rs_plan_is_complete(plan)) {
        fprintf(stderr, "cuts_bench: rank %lld: incomplete plan\n",
                (long long)r);
        exit(1);
    }
    rs_plan_stats(plan, &st);
    f->needed = (double)st.needed_bytes;
    f->wire = (double)st.bytes_planned;
    f->desc = (double)st.descriptor_count;
    f->max_per = (double)max_per_pair(t, plan, st.descriptor_count,
                                      &f->max_tensor);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
}

/* A FILE that only counts what is written to it. */
static ssize_t count_write(void *c, const char *buf, size_t n)
{
    (void)buf;
    *(uint64_t *)c += n;
    return (ssize_t)n;
}

static uint64_t cuts_bytes(rs_cuts_h cuts)
{
    uint64_t n = 0;
    rs_diag_t d;
    cookie_io_functions_t io = {NULL, count_write, NULL, NULL};
    FILE *f = fopencookie(&n, "w", io);
    if (f == NULL)
        exit(1);
    check(rs_cuts_write_json(cuts, f, &d), &d, "cuts_write_json");
    fclose(f);
    return n;
}

static uint64_t table_bytes(rs_model_h m, const rs_layout_t *train,
                            rs_cuts_h cuts)
{
    uint64_t n = 0;
    rs_diag_t d;
    cookie_io_functions_t io = {NULL, count_write, NULL, NULL};
    FILE *f = fopencookie(&n, "w", io);
    if (f == NULL)
        exit(1);
    for (int64_t r = 0; r < train->world; r++)
        check(rs_layout_write_table_cut(m, train, r, cuts, f, &d), &d,
              "write_table");
    fclose(f);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min / median / max of field `off` over n figures. */
static void spread(const fig_t *f, size_t n, size_t off, double out[3])
{
    double *v = malloc(n * sizeof(double));
    if (v == NULL)
        exit(1);
    for (size_t i = 0; i < n; i++)
        v[i] = *(const double *)((const char *)&f[i] + off);
    qsort(v, n, sizeof(double), cmp_double);
    out[0] = v[0];
    out[1] = v[n / 2];
    out[2] = v[n - 1];
    free(v);
}

static void row(const char *what, const fig_t *f, size_t n, size_t off,
                int bytes)
{
    double s[3];
    char a[RS_UNITS_TEXT_MAX], b[RS_UNITS_TEXT_MAX], c[RS_UNITS_TEXT_MAX];
    spread(f, n, off, s);
    if (bytes)
        printf("    %-30s min %s  median %s  max %s\n", what,
               rs_format_bytes(a, sizeof(a), (uint64_t)s[0]),
               rs_format_bytes(b, sizeof(b), (uint64_t)s[1]),
               rs_format_bytes(c, sizeof(c), (uint64_t)s[2]));
    else
        printf("    %-30s min %.0f  median %.0f  max %.0f\n", what, s[0], s[1],
               s[2]);
}

/* Plans every rank against `src` and prints the figures; returns the
 * largest wire-to-needed ratio of any rank. */
static double report(const char *name, rs_model_h m, const rs_layout_t *infer,
                     rs_sources_h src, double nic_bytes_s)
{
    tables_t t = {0};
    size_t n = (size_t)infer->world;
    fig_t *f = calloc(n, sizeof(*f));
    double worst = 0, wire_max = 0, plan_s = 0;
    if (f == NULL)
        exit(1);
    index_tables(src, &t);
    for (int64_t r = 0; r < infer->world; r++) {
        plan_rank(m, infer, src, &t, r, &f[r]);
        double ratio = f[r].needed > 0 ? f[r].wire / f[r].needed : 0;
        worst = ratio > worst ? ratio : worst;
        wire_max = f[r].wire > wire_max ? f[r].wire : wire_max;
        plan_s += f[r].plan_s;
    }
    printf("  %s: %zu published boxes\n", name, t.n);
    row("bytes needed per rank", f, n, offsetof(fig_t, needed), 1);
    row("bytes on the wire per rank", f, n, offsetof(fig_t, wire), 1);
    printf("    %-30s %.4f\n", "worst wire / needed", worst);
    row("descriptors per rank", f, n, offsetof(fig_t, desc), 0);
    row("max per (tensor, publisher)", f, n, offsetof(fig_t, max_per), 0);
    printf("    %-30s %s\n", "  on rank 0, e.g.",
           f[0].max_tensor ? f[0].max_tensor : "-");
    printf("    %-30s %.3f s\n", "wire lower bound", wire_max / nic_bytes_s);
    printf("    %-30s %.3f s\n", "planning, all ranks", plan_s);
    free(f);
    free(t.s);
    return worst;
}

static void layout(rs_model_h m, const char *spec, rs_layout_t *l)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    check(rs_layout_parse(spec, &d, l), &d, spec);
    check(rs_layout_check(l, m, &d), &d, spec);
}

static void run(const char *dir, const scenario_t *s)
{
    char path[4096];
    rs_model_h m;
    rs_layout_t train, infer;
    rs_sources_h whole, cut;
    rs_cuts_h cuts;
    rs_plan_params_t pp;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_plan_params_init(&pp);
    snprintf(path, sizeof(path), "%s/examples/models/%s", dir, s->config);
    check(rs_model_load(path, &d, &m), &d, path);
    layout(m, s->train, &train);
    layout(m, s->infer, &infer);
    printf("%s: %s (%lld ranks) -> %s (%lld ranks)\n", s->config, s->train,
           (long long)train.world, s->infer, (long long)infer.world);
    fflush(stdout);
    double t0 = rs_clock_seconds();
    check(rs_layout_infer_cuts(m, &infer, &d, &cuts), &d, "infer_cuts");
    double cuts_s = rs_clock_seconds() - t0;
    check(rs_sources_create(&whole), &d, "rs_sources_create");
    check(rs_sources_create(&cut), &d, "rs_sources_create");
    check(rs_layout_publish_all(m, &train, whole, &d), &d, "publish_all");
    check(rs_layout_publish_all_cut(m, &train, cuts, cut, &d), &d,
          "publish_all_cut");
    uint64_t jw = table_bytes(m, &train, NULL), jc = table_bytes(m, &train,
                                                                 cuts);
    char a[RS_UNITS_TEXT_MAX], b[RS_UNITS_TEXT_MAX];
    printf("  cuts: %zu tensors, derived in %.3f s (one capture per rank), "
           "%s as reshard.cuts.v1\n", rs_cuts_num_tensors(cuts), cuts_s,
           rs_format_bytes(a, sizeof(a), cuts_bytes(cuts)));
    printf("  tables: %s whole, %s cut-aligned (%.2fx)\n",
           rs_format_bytes(a, sizeof(a), jw), rs_format_bytes(b, sizeof(b), jc),
           jw ? (double)jc / (double)jw : 0);
    double nic = pp.nic_gbps * 1e9 / 8;
    report("whole shards", m, &infer, whole, nic);
    double worst = report("cut-aligned", m, &infer, cut, nic);
    printf("  cut-aligned worst wire / needed %.4f (%s 1.01)\n\n", worst,
           worst <= 1.01 ? "within" : "ABOVE");
    fflush(stdout);
    rs_sources_destroy(whole);
    rs_sources_destroy(cut);
    rs_cuts_destroy(cuts);
    rs_model_destroy(m);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    long only = argc > 2 ? strtol(argv[2], NULL, 10) : -1;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        if (only < 0 || (size_t)only == i)
            run(dir, &scenarios[i]);
    return 0;
}
