/* `reshard simulate`: plan every inference rank of a layout against the
 * tables every trainer rank would publish, move no bytes, and report what a
 * refit costs: bytes and descriptors per receiver, fan-in and fan-out, load
 * per trainer, redundant bytes, coverage and the wire-time lower bound. */
#include <errno.h>
#include <stddef.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"

typedef struct sim_args {
    const char *model, *train, *infer, *emit;
    double nic_gbps;
    uint64_t max_segments;
    int json, cut_aligned;
} sim_args_t;

typedef struct receiver {
    int64_t rank;
    uint64_t bytes, descriptors, sources, padding, uncovered;
    double plan_seconds;
    int coverage_ok;
} receiver_t;

typedef struct sim {
    rs_model_h model;
    rs_layout_t train, infer;
    rs_sources_h sources;
    rs_cuts_h cuts;        /* --cut-aligned: what the tables are split at */
    rs_transport_h transport;
    receiver_t *recv;
    size_t nsess;
    char **names;          /* per trainer session (plan session order) */
    uint64_t *served;      /* bytes per trainer session */
    uint64_t *fan_out;     /* receivers per trainer session */
    uint64_t redundant;    /* destination bytes read more than once */
    uint64_t extra_wire;   /* bytes pulled beyond those installed (full pulls) */
    double plan_seconds;
    int coverage_ok;
    char first_problem[512];
} sim_t;

enum { OPT_MODEL = 256, OPT_TRAIN, OPT_INFER, OPT_NIC, OPT_JSON, OPT_EMIT,
       OPT_MAX_SEGS, OPT_CUT_ALIGNED };

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"train", required_argument, NULL, OPT_TRAIN},
    {"infer", required_argument, NULL, OPT_INFER},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"json", no_argument, NULL, OPT_JSON},
    {"emit", required_argument, NULL, OPT_EMIT},
    {"max-segments-per-copy", required_argument, NULL, OPT_MAX_SEGS},
    {"cut-aligned", no_argument, NULL, OPT_CUT_ALIGNED},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void sim_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard simulate --model CONFIG.json --train LAYOUT --infer LAYOUT\n"
        "                        [--nic-gbps G] [--json] [--emit DIR] [--cut-aligned]\n"
        "\n"
        "Plans every inference rank against the shard tables every trainer rank\n"
        "would publish (no bytes move) and reports what the refit costs.\n"
        "\n"
        "options:\n"
        "  --model FILE     a Hugging Face config.json (see examples/models/)\n"
        "  --train LAYOUT   fsdp:N or megatron:tp=T,pp=P,ep=E,dp=D,etp=X\n"
        "  --infer LAYOUT   vllm:tp=T,pp=P,ep=E,dp=D\n"
        "  --nic-gbps G     per-rank NIC line rate for the wire-time bound\n"
        "                   (default 400)\n"
        "  --json           print one JSON object instead of the summary\n"
        "  --max-segments-per-copy N\n"
        "                   descriptor bound before a full pull (default from\n"
        "                   RESHARD_MAX_SEGMENTS_PER_COPY, else 64)\n"
        "  --cut-aligned    trainer tables split at the cuts of every inference\n"
        "                   rank's boxes, as a cut-aligned publisher stages them\n"
        "  --emit DIR       also write DIR/sources/<rank>.json (trainer tables)\n"
        "                   and DIR/captures/<rank>.json (inference captures)\n"
        "  -h, --help       show this help and exit\n"
        "\n"
        "exit status: 0 every rank fully covered (but for documented vocab\n"
        "padding); 1 some rank would be left with unwritten bytes or an\n"
        "incomplete plan; 2 bad usage or input.\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("simulate", fmt, what);
}

static int take_option(void *args, int c, const char *arg)
{
    sim_args_t *a = args;
    char *end;
    switch (c) {
    case OPT_MODEL: a->model = arg; break;
    case OPT_TRAIN: a->train = arg; break;
    case OPT_INFER: a->infer = arg; break;
    case OPT_EMIT: a->emit = arg; break;
    case OPT_JSON: a->json = 1; break;
    case OPT_CUT_ALIGNED: a->cut_aligned = 1; break;
    case OPT_MAX_SEGS:
        if (!rs_cli_parse_u64(arg, &a->max_segments) ||
            a->max_segments == 0 || a->max_segments > INT64_MAX)
            return usage_error("--max-segments-per-copy must be a positive "
                               "integer, got '%s'", arg);
        break;
    case OPT_NIC:
        a->nic_gbps = strtod(arg, &end);
        if (*end != '\0' || end == arg || !(a->nic_gbps > 0))
            return usage_error("--nic-gbps must be a positive number, got "
                               "'%s'", arg);
        break;
    default:
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

static int parse_args(int argc, char **argv, sim_args_t *a)
{
    a->nic_gbps = 400;
    int rc = rs_cli_options("simulate", argc, argv, long_opts, sim_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->model == NULL || a->train == NULL || a->infer == NULL)
        return usage_error("%s", "--model, --train and --infer are required");
    return RS_CLI_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail_input(const rs_diag_t *diag, rs_status_t st, const char *what)
{
    return rs_cli_input_error("simulate", diag, st, what);
}

static int load(const sim_args_t *a, sim_t *s)
{
    rs_diag_t diag;
    rs_status_t st;
    rs_diag_clear(&diag);
    if ((st = rs_model_load(a->model, &diag, &s->model)) != RS_OK)
        return fail_input(&diag, st, a->model);
    if ((st = rs_layout_parse(a->train, &diag, &s->train)) != RS_OK ||
        (st = rs_layout_check(&s->train, s->model, &diag)) != RS_OK)
        return fail_input(&diag, st, "--train");
    if (s->train.kind == RS_LAYOUT_VLLM)
        return usage_error("--train takes fsdp or megatron, got '%s'", a->train);
    if ((st = rs_layout_parse(a->infer, &diag, &s->infer)) != RS_OK ||
        (st = rs_layout_check(&s->infer, s->model, &diag)) != RS_OK)
        return fail_input(&diag, st, "--infer");
    if (s->infer.kind != RS_LAYOUT_VLLM)
        return usage_error("--infer takes a vllm layout, got '%s'", a->infer);
    if (a->cut_aligned &&
        (st = rs_layout_infer_cuts(s->model, &s->infer, &diag, &s->cuts)) != RS_OK)
        return fail_input(&diag, st, "the inference layout's cuts");
    if ((st = rs_sources_create(&s->sources)) != RS_OK ||
        (st = rs_layout_publish_all_cut(s->model, &s->train, s->cuts,
                                        s->sources, &diag)) != RS_OK)
        return fail_input(&diag, st, "publishing the trainer layout");
    if ((st = rs_transport_create(NULL, &diag, &s->transport)) != RS_OK)
        return fail_input(&diag, st, "transport");
    s->recv = calloc((size_t)s->infer.world + 1, sizeof(receiver_t));
    if (s->recv == NULL)
        return usage_error("%s", "out of memory");
    return RS_CLI_OK;
}

static int mkdirs(const char *dir, const char *sub)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    if ((mkdir(dir, 0777) != 0 && errno != EEXIST) ||
        (mkdir(path, 0777) != 0 && errno != EEXIST)) {
        fprintf(stderr, "reshard simulate: %s: %s\n", path, strerror(errno));
        return 0;
    }
    return 1;
}

static FILE *open_emit(const char *dir, const char *sub, int64_t rank)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%lld.json", dir, sub, (long long)rank);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fprintf(stderr, "reshard simulate: %s: %s\n", path, strerror(errno));
    return f;
}

static int emit_tables(const sim_args_t *a, sim_t *s)
{
    rs_diag_t diag;
    if (a->emit == NULL)
        return RS_CLI_OK;
    if (!mkdirs(a->emit, "sources"))
        return RS_CLI_USAGE;
    for (int64_t r = 0; r < s->train.world; r++) {
        FILE *f = open_emit(a->emit, "sources", r);
        rs_status_t st = f ? rs_layout_write_table_cut(s->model, &s->train, r,
                                                       s->cuts, f, &diag)
                           : RS_ERR_IO;
        if (f != NULL && fclose(f) != 0)
            st = RS_ERR_IO;
        if (st != RS_OK)
            return RS_CLI_USAGE;
    }
    return mkdirs(a->emit, "captures") ? RS_CLI_OK : RS_CLI_USAGE;
}

static void note_problem(sim_t *s, const char *fmt, long long a, long long b)
{
    s->coverage_ok = 0;
    if (s->first_problem[0] == '\0')
        snprintf(s->first_problem, sizeof(s->first_problem), fmt, a, b);
}

/* Coverage of one rank: every parameter byte written but the padding. */
static int check_coverage(sim_t *s, rs_plan_h plan, receiver_t *r,
                          rs_diag_t *diag)
{
    rs_exec_h x;
    rs_coverage_t cov;
    rs_status_t st = rs_exec_create(plan, s->transport, NULL, diag, &x);
    if (st != RS_OK)
        return 0;
    st = rs_exec_coverage(x, diag, &cov);
    rs_exec_destroy(x);
    if (st != RS_OK)
        return 0;
    r->uncovered = cov.bytes_total - cov.bytes_covered;
    r->coverage_ok = rs_plan_is_complete(plan) && cov.bytes_multi == 0 &&
                     r->uncovered == r->padding;
    if (!r->coverage_ok)
        note_problem(s, "inference rank %lld: %lld parameter bytes unwritten "
                        "or the plan is incomplete", (long long)r->rank,
                     (long long)(r->uncovered - r->padding));
    s->redundant += cov.bytes_multi;
    s->extra_wire += r->bytes > cov.bytes_covered ? r->bytes - cov.bytes_covered : 0;
    return 1;
}

/* Session tables, sized on the first plan (every plan over the same
 * sources has the same sessions). */
static int sessions_init(sim_t *s, rs_plan_h plan)
{
    if (s->names != NULL)
        return 1;
    s->nsess = rs_plan_num_sessions(plan);
    s->names = calloc(s->nsess + 1, sizeof(char *));
    s->served = calloc(s->nsess + 1, sizeof(uint64_t));
    s->fan_out = calloc(s->nsess + 1, sizeof(uint64_t));
    if (s->names == NULL || s->served == NULL || s->fan_out == NULL)
        return 0;
    for (uint32_t k = 0; k < s->nsess; k++) {
        s->names[k] = strdup(rs_plan_session_name(plan, k));
        if (s->names[k] == NULL)
            return 0;
    }
    return 1;
}

static void tally(sim_t *s, rs_plan_h plan, receiver_t *r)
{
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    r->bytes = st.bytes_planned;
    r->descriptors = st.descriptor_count;
    r->sources = st.nsessions_used;
    for (uint32_t k = 0; k < s->nsess; k++) {
        uint64_t b = rs_plan_session_bytes(plan, k);
        s->served[k] += b;
        s->fan_out[k] += b > 0;
    }
}

static int plan_rank(const sim_args_t *a, sim_t *s, int64_t rank)
{
    rs_diag_t diag;
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t pp;
    receiver_t *r = &s->recv[rank];
    rs_status_t st;
    rs_diag_clear(&diag);
    r->rank = rank;
    if ((st = rs_layout_capture(s->model, &s->infer, rank, &diag, &cap,
                                &r->padding)) != RS_OK)
        return fail_input(&diag, st, "capturing");
    rs_plan_params_init(&pp);
    pp.replica_salt = (uint64_t)rank;
    if (a->max_segments > 0)
        pp.max_segments_per_copy = (int64_t)a->max_segments;
    double t0 = now();
    st = rs_plan_build(cap, s->sources, &pp, &diag, &plan);
    r->plan_seconds = now() - t0;
    s->plan_seconds += r->plan_seconds;
    int rc = st == RS_OK ? RS_CLI_OK : fail_input(&diag, st, "planning");
    if (rc == RS_CLI_OK && !sessions_init(s, plan))
        rc = usage_error("%s", "out of memory");
    if (rc == RS_CLI_OK) {
        tally(s, plan, r);
        if (!check_coverage(s, plan, r, &diag))
            rc = fail_input(&diag, diag.status, "coverage");
    }
    if (rc == RS_CLI_OK && a->emit != NULL) {
        FILE *f = open_emit(a->emit, "captures", rank);
        st = f ? rs_capture_write_json(cap, f, &diag) : RS_ERR_IO;
        if ((f != NULL && fclose(f) != 0) || st != RS_OK)
            rc = RS_CLI_USAGE;
    }
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* min, median, max of one receiver field. */
typedef struct { double min, median, max; } spread_t;

static spread_t spread(const sim_t *s, size_t field_offset, int seconds)
{
    size_t n = (size_t)s->infer.world;
    uint64_t *v = malloc((n + 1) * sizeof(uint64_t));
    spread_t out = {0, 0, 0};
    if (v == NULL || n == 0) {
        free(v);
        return out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *base = (const char *)&s->recv[i];
        double sec;
        if (seconds) {
            memcpy(&sec, base + field_offset, sizeof(sec));
            v[i] = (uint64_t)(sec * 1e9);
        } else {
            memcpy(&v[i], base + field_offset, sizeof(v[i]));
        }
    }
    qsort(v, n, sizeof(uint64_t), cmp_u64);
    double k = seconds ? 1e-9 : 1;
    size_t mid = n / 2; /* the median's index */
    out = (spread_t){v[0] * k, v[mid] * k, v[n - 1] * k};
    free(v);
    return out;
}

typedef struct totals {
    double imbalance, wire_bound;
    uint64_t max_served, max_in, serving;
    double mean_served;
} totals_t;

static totals_t totals(const sim_args_t *a, const sim_t *s)
{
    totals_t t = {0};
    uint64_t sum = 0;
    for (size_t k = 0; k < s->nsess; k++) {
        if (s->served[k] == 0)
            continue;
        t.serving++;
        sum += s->served[k];
        if (s->served[k] > t.max_served)
            t.max_served = s->served[k];
    }
    for (int64_t r = 0; r < s->infer.world; r++) {
        if (s->recv[r].bytes > t.max_in)
            t.max_in = s->recv[r].bytes;
    }
    t.mean_served = t.serving ? (double)sum / (double)t.serving : 0;
    t.imbalance = t.mean_served > 0 ? (double)t.max_served / t.mean_served : 0;
    uint64_t worst = t.max_in > t.max_served ? t.max_in : t.max_served;
    t.wire_bound = (double)worst * 8 / (a->nic_gbps * 1e9);
    return t;
}

static void print_json(const sim_args_t *a, const sim_t *s)
{
    totals_t t = totals(a, s);
    printf("{\"params_total\": %llu, \"bytes_total\": %llu, \"trainer_ranks\": %lld, "
           "\"inference_ranks\": %lld, \"plan_seconds\": %.6f,\n \"receivers\": [",
           (unsigned long long)rs_model_num_params(s->model),
           (unsigned long long)rs_model_num_bytes(s->model),
           (long long)s->train.world, (long long)s->infer.world, s->plan_seconds);
    for (int64_t r = 0; r < s->infer.world; r++) {
        const receiver_t *x = &s->recv[r];
        printf("%s\n  {\"rank\": %lld, \"bytes\": %llu, \"descriptors\": %llu, "
               "\"sources\": %llu, \"plan_seconds\": %.6f, \"padding_bytes\": %llu, "
               "\"coverage_ok\": %s}", r ? "," : "", (long long)x->rank,
               (unsigned long long)x->bytes, (unsigned long long)x->descriptors,
               (unsigned long long)x->sources, x->plan_seconds,
               (unsigned long long)x->padding, x->coverage_ok ? "true" : "false");
    }
    printf("],\n \"sources\": [");
    for (size_t k = 0; k < s->nsess; k++)
        printf("%s\n  {\"session\": \"%s\", \"bytes_served\": %llu, "
               "\"receivers\": %llu}", k ? "," : "", s->names[k],
               (unsigned long long)s->served[k],
               (unsigned long long)s->fan_out[k]);
    printf("],\n \"imbalance\": %.6f, \"redundant_bytes\": %llu, "
           "\"extra_wire_bytes\": %llu, "
           "\"wire_lower_bound_s\": %.6f, \"nic_gbps\": %.3f, \"coverage_ok\": %s}\n",
           t.imbalance, (unsigned long long)s->redundant,
           (unsigned long long)s->extra_wire, t.wire_bound,
           a->nic_gbps, s->coverage_ok ? "true" : "false");
}

enum { AS_SECONDS, AS_BYTES, AS_COUNT };

/* One value of a spread in its unit: seconds, a size, or a plain count. */
static const char *spread_value(char *buf, size_t len, double v, int unit)
{
    if (unit == AS_BYTES)
        return rs_format_bytes(buf, len, (uint64_t)v);
    snprintf(buf, len, unit == AS_SECONDS ? "%.6f s" : "%.0f", v);
    return buf;
}

static void print_spread(const char *what, spread_t v, int unit)
{
    char lo[RS_UNITS_TEXT_MAX], mid[RS_UNITS_TEXT_MAX], hi[RS_UNITS_TEXT_MAX];
    printf("  %-26s min %s  median %s  max %s\n", what,
           spread_value(lo, sizeof(lo), v.min, unit),
           spread_value(mid, sizeof(mid), v.median, unit),
           spread_value(hi, sizeof(hi), v.max, unit));
}

static void print_summary(const sim_args_t *a, const sim_t *s)
{
    totals_t t = totals(a, s);
    uint64_t fan_max = 0, fan_sum = 0, fan_n = 0;
    for (size_t k = 0; k < s->nsess; k++) {
        if (s->fan_out[k] == 0)
            continue;
        fan_n++;
        fan_sum += s->fan_out[k];
        fan_max = s->fan_out[k] > fan_max ? s->fan_out[k] : fan_max;
    }
    printf("reshard simulate: %s\n", rs_model_config(s->model)->model_type);
    char b1[RS_UNITS_TEXT_MAX], b2[RS_UNITS_TEXT_MAX], rate[RS_UNITS_TEXT_MAX];
    printf("  model                      %llu parameters, %s\n",
           (unsigned long long)rs_model_num_params(s->model),
           rs_format_bytes(b1, sizeof(b1), rs_model_num_bytes(s->model)));
    printf("  trainer ranks              %lld (%s)\n", (long long)s->train.world,
           a->train);
    printf("  inference ranks            %lld (%s)\n", (long long)s->infer.world,
           a->infer);
    printf("  planning                   %.3f s total\n", s->plan_seconds);
    print_spread("planning per rank",
                 spread(s, offsetof(receiver_t, plan_seconds), 1), AS_SECONDS);
    print_spread("bytes per receiver", spread(s, offsetof(receiver_t, bytes), 0),
                 AS_BYTES);
    print_spread("descriptors per receiver",
                 spread(s, offsetof(receiver_t, descriptors), 0), AS_COUNT);
    print_spread("sources per receiver",
                 spread(s, offsetof(receiver_t, sources), 0), AS_COUNT);
    printf("  receivers per source       mean %.2f  max %llu\n",
           fan_n ? (double)fan_sum / (double)fan_n : 0.0,
           (unsigned long long)fan_max);
    printf("  bytes served per trainer   max %s  mean %s  (imbalance %.3f)\n",
           rs_format_bytes(b1, sizeof(b1), t.max_served),
           rs_format_bytes(b2, sizeof(b2), (uint64_t)t.mean_served),
           t.imbalance);
    printf("  redundant bytes            %s\n",
           rs_format_bytes(b1, sizeof(b1), s->redundant));
    printf("  extra wire bytes           %s (full pulls trading bytes for "
           "descriptors)\n", rs_format_bytes(b1, sizeof(b1), s->extra_wire));
    printf("  wire lower bound           %.6f s at %s per rank (--nic-gbps "
           "%.0f)\n", t.wire_bound,
           rs_format_rate(rate, sizeof(rate), a->nic_gbps * 1e9 / 8),
           a->nic_gbps);
    if (s->coverage_ok)
        printf("  coverage                   every rank complete (vocab padding "
               "excepted)\n");
    else
        printf("  coverage                   FAILED: %s\n", s->first_problem);
}

static void sim_free(sim_t *s)
{
    for (size_t k = 0; s->names != NULL && k < s->nsess; k++)
        free(s->names[k]);
    free(s->names);
    free(s->served);
    free(s->fan_out);
    free(s->recv);
    rs_transport_destroy(s->transport);
    rs_sources_destroy(s->sources);
    rs_cuts_destroy(s->cuts);
    rs_model_destroy(s->model);
}

int rs_cli_simulate(int argc, char **argv)
{
    sim_args_t a = {0};
    sim_t s;
    memset(&s, 0, sizeof(s));
    s.coverage_ok = 1;
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    if (rc == RS_CLI_OK)
        rc = load(&a, &s);
    if (rc == RS_CLI_OK)
        rc = emit_tables(&a, &s);
    for (int64_t r = 0; rc == RS_CLI_OK && r < s.infer.world; r++)
        rc = plan_rank(&a, &s, r);
    if (rc == RS_CLI_OK) {
        if (a.json)
            print_json(&a, &s);
        else
            print_summary(&a, &s);
        rc = s.coverage_ok ? RS_CLI_OK : RS_CLI_INCOMPLETE;
    }
    sim_free(&s);
    return rc;
}
