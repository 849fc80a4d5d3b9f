/* `reshard simulate`: plan every inference rank of a layout against the
 * tables every trainer rank would publish, move no bytes, and report what a
 * refit costs and whether the layout fits: options, loading, planning rank
 * by rank (with progress on long runs) and the exit status. The reports are
 * in simulate_report.c and simulate_json.c. */
#include <errno.h>
#include <stddef.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "simulate.h"

enum { OPT_MODEL = 256, OPT_TRAIN, OPT_INFER, OPT_NIC, OPT_JSON, OPT_EMIT,
       OPT_MAX_SEGS, OPT_DEVICE_MEMORY, OPT_PROGRESS, OPT_NO_PROGRESS,
       OPT_DESC, OPT_CUT_ALIGNED, OPT_NO_PUB_QUANT, OPT_BUDGET,
       OPT_CHANGED, OPT_CHANGED_FP8, OPT_DELTA, OPT_NO_DELTA };

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"train", required_argument, NULL, OPT_TRAIN},
    {"infer", required_argument, NULL, OPT_INFER},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"json", no_argument, NULL, OPT_JSON},
    {"emit", required_argument, NULL, OPT_EMIT},
    {"max-segments-per-copy", required_argument, NULL, OPT_MAX_SEGS},
    {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
    {"descriptor-ns", required_argument, NULL, OPT_DESC},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"cut-aligned", no_argument, NULL, OPT_CUT_ALIGNED},
    {"no-publisher-quant", no_argument, NULL, OPT_NO_PUB_QUANT},
    {"staging-budget", required_argument, NULL, OPT_BUDGET},
    {"changed-fraction", required_argument, NULL, OPT_CHANGED},
    {"changed-fraction-fp8", required_argument, NULL, OPT_CHANGED_FP8},
    {"delta", no_argument, NULL, OPT_DELTA},
    {"no-delta", no_argument, NULL, OPT_NO_DELTA},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void sim_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard simulate --model CONFIG.json --train LAYOUT --infer LAYOUT\n"
        "                        [--nic-gbps G] [--descriptor-ns N]\n"
        "                        [--device-memory GIB] [--json]\n"
        "                        [--max-segments-per-copy N] [--emit DIR]\n"
        "                        [--progress | --no-progress] [--cut-aligned]\n"
        "                        [--no-publisher-quant] [--staging-budget B]\n"
        "                        [--changed-fraction F [--changed-fraction-fp8 G]\n"
        "                         [--delta | --no-delta]]\n"
        "\n"
        "Plans every inference rank against the shard tables every trainer rank\n"
        "would publish (no bytes move), reports what the refit costs per rank\n"
        "(min, median, max) and checks that every rank fits its device.\n"
        "\n"
        "options:\n"
        "  --model FILE     a Hugging Face config.json (see examples/models/);\n"
        "                   with an FP8 quantization_config the inference\n"
        "                   ranks load FP8 weights and scales, quantized from\n"
        "                   the trainers' torch_dtype weights\n"
        "  --train LAYOUT   fsdp:N or megatron:tp=T,pp=P,ep=E,dp=D,etp=X\n"
        "  --infer LAYOUT   vllm:tp=T,pp=P,ep=E,dp=D\n"
        "  --nic-gbps G     per-rank NIC line rate for the wire-time bound and\n"
        "                   the planner's cost model (default 400)\n"
        "  --descriptor-ns N\n"
        "                   cost of one read descriptor in the planner's cost\n"
        "                   model, ns (default 100)\n"
        "  --device-memory GIB\n"
        "                   memory per inference rank, in GiB (default 80): a\n"
        "                   rank fits when its parameters plus the staging its\n"
        "                   executor holds under --staging-budget fit in it\n"
        "  --staging-budget B\n"
        "                   the executor's staging budget (e.g. 256MiB; default\n"
        "                   1GiB or the largest single box; 'unbounded'): staging\n"
        "                   is reported under it and, beside it, every staged\n"
        "                   box at once; a box above an explicit budget fails\n"
        "                   the run (exit 1, naming the rank and the copy)\n"
        "  --json           print one reshard.simulate.v1 JSON object instead\n"
        "                   of the summary (docs/formats.md)\n"
        "  --max-segments-per-copy N\n"
        "                   descriptor bound before a full pull (default from\n"
        "                   RESHARD_MAX_SEGMENTS_PER_COPY, else 64)\n"
        "  --cut-aligned    trainer tables split at the cuts of every inference\n"
        "                   rank's boxes, as a cut-aligned publisher stages them\n"
        "  --no-publisher-quant\n"
        "                   FP8 targets: trainer tables without FP8 copies, so\n"
        "                   receivers quantize every block (by default both\n"
        "                   are planned and compared; the figures above the\n"
        "                   comparison are those with the copies)\n"
        "  --changed-fraction F\n"
        "                   the share of bf16 elements a version changes (0 to\n"
        "                   1, e.g. 0.0213): also report the wire bound of a\n"
        "                   receiver holding the previous version, each run read\n"
        "                   as a delta or in full by the cost model\n"
        "  --changed-fraction-fp8 G\n"
        "                   the share of FP8 codes and scales a version changes\n"
        "                   (default: from F by the measured shares, docs/delta.md)\n"
        "  --delta, --no-delta\n"
        "                   deltas on (the default with --changed-fraction) or off\n"
        "  --emit DIR       also write DIR/sources/<rank>.json (trainer tables)\n"
        "                   and DIR/captures/<rank>.json (inference captures)\n"
        "  --progress       a line on stderr per planned rank, from the start\n"
        "  --no-progress    no progress at all; by default a progress line is\n"
        "                   kept on stderr once planning has run 2 s, and only\n"
        "                   when stderr is a terminal\n"
        "  -h, --help       show this help and exit\n"
        "\n"
        "exit status: 0 every rank fully covered (but for documented vocab\n"
        "padding) and fitting in --device-memory; 1 some rank would be left\n"
        "with unwritten bytes or an incomplete plan, or does not fit (stderr\n"
        "names the ranks and by how much); 2 bad usage or input.\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("simulate", fmt, what);
}

/* A changed share: a decimal number from 0 to 1, all of arg. */
static int take_share(const char *flag, const char *arg, double *out)
{
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end != '\0' || !(v >= 0 && v <= 1)) {
        fprintf(stderr, "reshard simulate: %s must be a number from 0 to 1 "
                "(a share of elements, e.g. 0.0213), got '%s'\n", flag, arg);
        return RS_CLI_USAGE;
    }
    *out = v;
    return RS_CLI_OK;
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
    case OPT_NO_PUB_QUANT: a->no_publisher_quant = 1; break;
    case OPT_MAX_SEGS:
        if (!rs_cli_parse_u64(arg, &a->max_segments) ||
            a->max_segments == 0 || a->max_segments > INT64_MAX)
            return usage_error("--max-segments-per-copy must be a positive "
                               "integer, got '%s'", arg);
        break;
    case OPT_NIC:
        return rs_cli_take_cost("simulate", "--nic-gbps", arg, &a->nic_gbps);
    case OPT_DEVICE_MEMORY:
        a->device_gib = strtod(arg, &end);
        /* below 2^34 GiB the byte count fits 64 bits */
        if (*end != '\0' || end == arg || !(a->device_gib > 0) ||
            !(a->device_gib < 17179869184.0))
            return usage_error("--device-memory must be a positive number of "
                               "GiB (below 2^34), got '%s'", arg);
        break;
    case OPT_BUDGET:
        return rs_cli_take_budget("simulate", arg, &a->staging_budget);
    case OPT_DESC:
        return rs_cli_take_cost("simulate", "--descriptor-ns", arg,
                                &a->descriptor_ns);
    case OPT_CHANGED:
        return take_share("--changed-fraction", arg, &a->changed);
    case OPT_CHANGED_FP8:
        return take_share("--changed-fraction-fp8", arg, &a->changed_fp8);
    case OPT_DELTA: a->delta = 1; break;
    case OPT_NO_DELTA: a->delta = 0; break;
    case OPT_PROGRESS: a->progress = RS_SIM_PROGRESS_ON; break;
    case OPT_NO_PROGRESS: a->progress = RS_SIM_PROGRESS_OFF; break;
    default:
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

static int parse_args(int argc, char **argv, sim_args_t *a)
{
    a->nic_gbps = 400;
    a->descriptor_ns = RS_PLAN_DEFAULT_DESCRIPTOR_NS;
    a->device_gib = RS_SIM_DEFAULT_DEVICE_GIB;
    a->changed = a->changed_fp8 = -1;
    a->delta = -1;
    int rc = rs_cli_options("simulate", argc, argv, long_opts, sim_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->model == NULL || a->train == NULL || a->infer == NULL)
        return usage_error("%s", "--model, --train and --infer are required");
    if (a->changed < 0 && (a->delta == 1 || a->changed_fp8 >= 0))
        return usage_error("%s", "--delta and --changed-fraction-fp8 need "
                           "--changed-fraction F (the share of bf16 elements "
                           "a version changes)");
    if (a->delta < 0)
        a->delta = a->changed >= 0;
    return RS_CLI_OK;
}

static int fail_input(const rs_diag_t *diag, rs_status_t st, const char *what)
{
    return rs_cli_input_error("simulate", diag, st, what);
}

/* An FP8 target: the vllm layout loads FP8 weights when the config has
 * an FP8 quantization_config with a block size (without one, capturing
 * reports the refusal). The tables carry publisher-side copies unless
 * --no-publisher-quant. */
static void fp8_target(const sim_args_t *a, sim_t *s)
{
    const rs_model_quant_t *q = rs_model_quantization(s->model);
    if (q == NULL || q->method != RS_MODEL_QUANT_FP8 || q->weight_block[0] <= 0)
        return;
    rs_quant_desc_t d = {RS_QUANT_FP8_BLOCK, q->weight_dtype, 2,
                         q->weight_block, NULL, 0, 0, NULL, NULL};
    if (rs_quant_spec_format(&d, s->fp8_spec, sizeof(s->fp8_spec)) == 0)
        snprintf(s->fp8_spec, sizeof(s->fp8_spec), "fp8_block");
    s->fp8 = a->no_publisher_quant ? 1 : 2;
}

static unsigned table_flags(const sim_t *s)
{
    return s->fp8 == 2 ? RS_LAYOUT_FP8_COPIES : 0;
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
    fp8_target(a, s);
    if ((st = rs_sources_create(&s->sources)) != RS_OK ||
        (st = rs_layout_publish_all_ex(s->model, &s->train, s->cuts,
                                       table_flags(s), s->sources, &diag)) !=
            RS_OK)
        return fail_input(&diag, st, "publishing the trainer layout");
    if (s->fp8 == 2 &&
        ((st = rs_sources_create(&s->sources_bf16)) != RS_OK ||
         (st = rs_layout_publish_all_cut(s->model, &s->train, s->cuts,
                                         s->sources_bf16, &diag)) != RS_OK))
        return fail_input(&diag, st, "publishing the trainer layout");
    if ((st = rs_transport_create(NULL, &diag, &s->transport)) != RS_OK)
        return fail_input(&diag, st, "transport");
    s->device_bytes = (uint64_t)(a->device_gib * (double)((uint64_t)1 << 30));
    s->staging_budget = a->staging_budget;
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
        rs_status_t st = f ? rs_layout_write_table_ex(s->model, &s->train, r,
                                                      s->cuts, table_flags(s),
                                                      f, &diag)
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
    s->served_bf16 = calloc(s->nsess + 1, sizeof(uint64_t));
    if (s->names == NULL || s->served == NULL || s->fan_out == NULL ||
        s->served_bf16 == NULL)
        return 0;
    for (uint32_t k = 0; k < s->nsess; k++) {
        s->names[k] = strdup(rs_plan_session_name(plan, k));
        if (s->names[k] == NULL)
            return 0;
    }
    return 1;
}

static int is_scale(const rs_param_info_t *p)
{
    static const char suffix[] = "_scale_inv";
    size_t n = strlen(p->name), k = sizeof(suffix) - 1;
    return p->dtype == RS_DTYPE_F32 && n > k &&
           strcmp(p->name + n - k, suffix) == 0;
}

/* What the rank's loader fills: every parameter of its capture, and of
 * those the FP8 weights and their scales. */
static void param_bytes(rs_capture_h cap, receiver_t *r)
{
    r->param_bytes = r->fp8_bytes = r->scale_bytes = 0;
    for (size_t i = 0; i < rs_capture_num_params(cap); i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        r->param_bytes += p.nbytes;
        if (p.dtype == RS_DTYPE_F8E4M3 || p.dtype == RS_DTYPE_F8E5M2)
            r->fp8_bytes += p.nbytes;
        else if (is_scale(&p))
            r->scale_bytes += p.nbytes;
    }
}

/* The executor stages every full pull, convert and receiver-path box (the
 * bf16 block-rounded box a receiver quantizes) of a plan at once, for the
 * whole transfer, so the peak is their sum (before its rounding of each
 * buffer to a page). */
static uint64_t staging_bytes(rs_plan_h plan)
{
    size_t nfp, ncv, nq;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nfp);
    const rs_convert_t *cv = rs_plan_converts(plan, &ncv);
    const rs_quantized_t *q = rs_plan_quantized(plan, &nq);
    uint64_t sum = 0;
    for (size_t k = 0; k < nfp; k++)
        sum += fp[k].staging_bytes;
    for (size_t k = 0; k < ncv; k++)
        sum += cv[k].staging_bytes;
    for (size_t k = 0; k < nq; k++)
        if (q[k].path == RS_QUANT_PATH_RECEIVER)
            sum += q[k].staging_bytes;
    return sum;
}

/* One plan's figures for the FP8 comparison. */
static void path_of(const sim_t *s, rs_plan_h plan, sim_path_t *out)
{
    rs_staging_need_t need;
    rs_plan_stats_t st;
    size_t nq;
    const rs_quantized_t *q = rs_plan_quantized(plan, &nq);
    rs_plan_stats(plan, &st);
    memset(out, 0, sizeof(*out));
    out->bytes = st.bytes_planned;
    out->est_seconds = st.est_seconds;
    out->staging_bytes = staging_bytes(plan);
    /* a box above an explicit budget is reported by tally() */
    rs_exec_params_t ep;
    rs_exec_params_init(&ep);
    ep.staging_budget = s->staging_budget;
    out->staging_peak = rs_exec_staging_need(plan, &ep, NULL, &need) == RS_OK
                            ? need.bytes : out->staging_bytes;
    out->complete = rs_plan_is_complete(plan);
    for (size_t k = 0; k < nq; k++) {
        if (q[k].path == RS_QUANT_PATH_PUBLISHER)
            out->publisher++;
        else
            out->receiver++;
    }
}

/* The FP8 target's receiver-only plan: the same capture against tables
 * without FP8 copies. */
static int plan_bf16(sim_t *s, rs_capture_h cap, const rs_plan_params_t *pp,
                     receiver_t *r, rs_diag_t *diag)
{
    rs_plan_h plan = NULL;
    double t0 = rs_clock_seconds();
    rs_status_t st = rs_plan_build(cap, s->sources_bf16, pp, diag, &plan);
    s->plan_seconds += rs_clock_seconds() - t0;
    if (st != RS_OK)
        return fail_input(diag, st, "planning (receiver-side quantization)");
    path_of(s, plan, &r->receiver_only);
    size_t n = rs_plan_num_sessions(plan);
    for (uint32_t k = 0; k < n && k < s->nsess; k++)
        s->served_bf16[k] += rs_plan_session_bytes(plan, k);
    if (!r->receiver_only.complete)
        note_problem(s, "inference rank %lld: its plan without publisher-side "
                        "FP8 copies is incomplete", (long long)r->rank, 0);
    rs_plan_destroy(plan);
    return RS_CLI_OK;
}

/* The staging the executor holds under the budget (the largest round,
 * in whole pages) and its rounds; a box above an explicit budget makes
 * the rank's pull fail, so the run does. */
static void staging_under_budget(sim_t *s, rs_plan_h plan, receiver_t *r)
{
    rs_staging_need_t need;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_exec_params_t ep; /* a receiver's pipelined run */
    rs_exec_params_init(&ep);
    ep.staging_budget = s->staging_budget;
    if (rs_exec_staging_need(plan, &ep, &diag, &need) != RS_OK) {
        s->coverage_ok = 0;
        if (s->first_problem[0] == '\0')
            snprintf(s->first_problem, sizeof(s->first_problem),
                     "inference rank %lld: %.400s", (long long)r->rank,
                     diag.msg);
        return;
    }
    r->staging_peak = need.bytes;
    r->staging_rounds = need.rounds;
}

static void tally(sim_t *s, rs_plan_h plan, receiver_t *r)
{
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    r->bytes = st.bytes_planned;
    r->needed = st.needed_bytes;
    r->est_seconds = st.est_seconds;
    r->descriptors = st.descriptor_count;
    r->sources = st.nsessions_used;
    r->unbounded = rs_plan_num_unbounded(plan);
    r->staging_bytes = staging_bytes(plan);
    staging_under_budget(s, plan, r);
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
    param_bytes(cap, r);
    rs_plan_params_init(&pp);
    pp.replica_salt = (uint64_t)rank;
    if (a->max_segments > 0)
        pp.max_segments_per_copy = (int64_t)a->max_segments;
    pp.nic_gbps = a->nic_gbps;
    pp.descriptor_ns = a->descriptor_ns;
    double t0 = rs_clock_seconds();
    st = rs_plan_build(cap, s->sources, &pp, &diag, &plan);
    r->plan_seconds = rs_clock_seconds() - t0;
    s->plan_seconds += r->plan_seconds;
    int rc = st == RS_OK ? RS_CLI_OK : fail_input(&diag, st, "planning");
    if (rc == RS_CLI_OK && !sessions_init(s, plan))
        rc = usage_error("%s", "out of memory");
    if (rc == RS_CLI_OK) {
        tally(s, plan, r);
        rs_sim_delta_rank(a, s, plan, r);
        path_of(s, plan, &r->with_pub);
        if (!check_coverage(s, plan, r, &diag))
            rc = fail_input(&diag, diag.status, "coverage");
    }
    if (rc == RS_CLI_OK && s->sources_bf16 != NULL)
        rc = plan_bf16(s, cap, &pp, r, &diag);
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

/* Progress on stderr. Off with --no-progress; with --progress one line
 * per rank from the first, so that a log shows where a run is; by default
 * one line rewritten in place, only on a terminal and only once planning
 * has taken 2 s (short runs print nothing). */
typedef struct progress {
    int mode, tty, shown;
    double start, last;
} progress_t;

#define PROGRESS_AFTER_S 2.0
#define PROGRESS_EVERY_S 0.25

static void progress_init(progress_t *p, int mode)
{
    p->mode = mode;
    p->tty = isatty(STDERR_FILENO);
    p->shown = 0;
    p->start = p->last = rs_clock_seconds();
}

static void progress_rank(progress_t *p, int64_t done, int64_t world)
{
    if (p->mode == RS_SIM_PROGRESS_ON) {
        fprintf(stderr, "reshard simulate: planned inference rank %lld of "
                "%lld\n", (long long)done, (long long)world);
        return;
    }
    double t = rs_clock_seconds();
    if (p->mode == RS_SIM_PROGRESS_OFF || !p->tty ||
        t - p->start < PROGRESS_AFTER_S ||
        (p->shown && t - p->last < PROGRESS_EVERY_S && done < world))
        return;
    fprintf(stderr, "\rreshard simulate: planned %lld of %lld inference "
            "ranks, %.0f s so far ", (long long)done, (long long)world,
            t - p->start);
    p->shown = 1;
    p->last = t;
}

static void progress_end(const progress_t *p)
{
    if (p->shown)
        fputc('\n', stderr);
}

static void sim_free(sim_t *s)
{
    for (size_t k = 0; s->names != NULL && k < s->nsess; k++)
        free(s->names[k]);
    free(s->names);
    free(s->served);
    free(s->fan_out);
    free(s->served_bf16);
    free(s->recv);
    rs_sim_delta_free(s);
    rs_sources_destroy(s->sources_bf16);
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
        rc = rs_sim_delta_init(&a, &s);
    if (rc == RS_CLI_OK)
        rc = emit_tables(&a, &s);
    progress_t prog;
    progress_init(&prog, a.progress);
    for (int64_t r = 0; rc == RS_CLI_OK && r < s.infer.world; r++) {
        rc = plan_rank(&a, &s, r);
        if (rc == RS_CLI_OK)
            progress_rank(&prog, r + 1, s.infer.world);
    }
    progress_end(&prog);
    if (rc == RS_CLI_OK) {
        if (a.json)
            rs_sim_print_json(&a, &s);
        else
            rs_sim_print_summary(&a, &s);
        rs_sim_note_unfit(&s);
        rc = s.coverage_ok && rs_sim_num_unfit(&s) == 0 ? RS_CLI_OK
                                                         : RS_CLI_INCOMPLETE;
    }
    sim_free(&s);
    return rc;
}
