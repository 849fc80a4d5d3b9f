/* `reshard pull`: one inference rank of a vllm layout pulling its
 * parameters from the publishers of a directory and printing the stage
 * record; with --check every parameter byte is compared with contents
 * rebuilt independently of the transfer (pull_check.c). On a terminal a
 * ticker line shows the pull in flight (pull_ticker.c); --dry-run is
 * pull_dry_run.c. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct pull_args {
    const char *directory, *model, *layout, *config, *backend;
    int64_t version;
    uint64_t rank, versions;
    double timeout_s, stale_s;
    double stall_s;             /* --stall-after */
    double nic_gbps, descriptor_ns; /* 0 = not given */
    int have_version, have_rank, verify, check, release, json;
    int dry_run, no_announce;
    const char *announce_as;
    const char *group;          /* --group: NULL without */
    uint64_t group_size, group_rank;
    int have_group_rank;
    double group_timeout_s;
    uint64_t staging_budget;    /* 0: the library's default */
    uint64_t fraction_q;        /* --changed-fraction (rs_cli_fill_box) */
    int delta;                  /* --delta 1, --no-delta 0, neither -1 */
    uint64_t delta_budget;      /* --delta-budget */
} pull_args_t;

typedef struct pull_state {
    rs_model_h model;
    rs_layout_t layout;
    rs_capture_h cap;
    size_t nparams;
    unsigned char **param;    /* live parameter storage, bound to the receiver */
    unsigned char **expected; /* --check: what each parameter must hold */
    rs_receiver_h recv;
} pull_state_t;

/* One pulled version, as the JSON line and the summary report it. */
typedef struct pull_outcome {
    int64_t version;
    int ok, checked, check_ok;
    rs_pull_result_t res;
    double wall_s, check_s;
    char error[RS_DIAG_MSG_MAX + 64];
} pull_outcome_t;

enum { OPT_DIRECTORY = 256, OPT_MODEL, OPT_VERSION, OPT_RANK, OPT_LAYOUT,
       OPT_CONFIG, OPT_BACKEND, OPT_VERIFY, OPT_CHECK, OPT_RELEASE, OPT_JSON,
       OPT_TIMEOUT, OPT_VERSIONS, OPT_STALE, OPT_NO_VERIFY, OPT_DRY_RUN,
       OPT_NO_ANNOUNCE, OPT_ANNOUNCE_AS, OPT_NIC, OPT_DESC, OPT_GROUP,
       OPT_GROUP_SIZE, OPT_GROUP_RANK, OPT_GROUP_TIMEOUT, OPT_BUDGET,
       OPT_CHANGED_FRACTION, OPT_STALL, OPT_DELTA, OPT_NO_DELTA,
       OPT_DELTA_BUDGET };

/* Publishers heartbeat every second: five silent periods make a version
 * stale. */
#define DEFAULT_STALE_S 5.0

static const struct option long_opts[] = {
    {"directory", required_argument, NULL, OPT_DIRECTORY},
    {"model", required_argument, NULL, OPT_MODEL},
    {"version", required_argument, NULL, OPT_VERSION},
    {"rank", required_argument, NULL, OPT_RANK},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"model-config", required_argument, NULL, OPT_CONFIG},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"no-verify", no_argument, NULL, OPT_NO_VERIFY},
    {"check", no_argument, NULL, OPT_CHECK},
    {"release", no_argument, NULL, OPT_RELEASE},
    {"json", no_argument, NULL, OPT_JSON},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"versions", required_argument, NULL, OPT_VERSIONS},
    {"stale-after", required_argument, NULL, OPT_STALE},
    {"stall-after", required_argument, NULL, OPT_STALL},
    {"no-announce", no_argument, NULL, OPT_NO_ANNOUNCE},
    {"announce-as", required_argument, NULL, OPT_ANNOUNCE_AS},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"descriptor-ns", required_argument, NULL, OPT_DESC},
    {"group", required_argument, NULL, OPT_GROUP},
    {"group-size", required_argument, NULL, OPT_GROUP_SIZE},
    {"group-rank", required_argument, NULL, OPT_GROUP_RANK},
    {"group-timeout", required_argument, NULL, OPT_GROUP_TIMEOUT},
    {"staging-budget", required_argument, NULL, OPT_BUDGET},
    {"changed-fraction", required_argument, NULL, OPT_CHANGED_FRACTION},
    {"delta", no_argument, NULL, OPT_DELTA},
    {"no-delta", no_argument, NULL, OPT_NO_DELTA},
    {"delta-budget", required_argument, NULL, OPT_DELTA_BUDGET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void pull_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard pull --directory D --model M --version V --rank R\n"
        "                    --layout LAYOUT --model-config CONFIG.json\n"
        "                    [--backend ucx|cma] [--no-verify] [--check] [--release]\n"
        "                    [--changed-fraction F]\n"
        "                    [--delta | --no-delta] [--delta-budget B]\n"
        "                    [--json] [--timeout S] [--versions K] [--stale-after S]\n"
        "                    [--stall-after S]\n"
        "                    [--dry-run] [--no-announce] [--announce-as NAME]\n"
        "                    [--nic-gbps G] [--descriptor-ns N] [--staging-budget B]\n"
        "                    [--group NAME --group-size N [--group-rank G]\n"
        "                     [--group-timeout S]]\n"
        "\n"
        "Pulls inference rank R's parameters of version V (-1: the newest READY\n"
        "version) from the publishers of directory D, and prints the stage\n"
        "record. Parameters start filled with the byte 0xEE.\n"
        "\n"
        "options:\n"
        "  --directory D       file:DIR (must exist) or redis://[:password@]host:port\n"
        "                      [?timeout=S&password_file=F] (or RESHARD_REDIS_PASSWORD)\n"
        "  --model M           model name in the directory\n"
        "  --version V         version to pull, or -1 for the newest READY one\n"
        "  --rank R            this inference rank (0 <= R < the layout's world)\n"
        "  --layout LAYOUT     vllm:tp=T,pp=P,ep=E,dp=D\n"
        "  --model-config FILE a Hugging Face config.json (examples/models/)\n"
        "  --backend B         transport: ucx (default; UCX_TLS picks the wire) or cma\n"
        "  --no-verify         do not re-digest reassembled shards against the digests\n"
        "                      their tables published (verification is on by default,\n"
        "                      and a shard published without a digest fails the pull;\n"
        "                      --verify, the default, is still accepted)\n"
        "  --check             compare every parameter byte with the demo contents\n"
        "                      (docs/formats.md, \"Demo contents\") computed locally\n"
        RS_CLI_FRACTION_HELP("With --check only: the publisher's F")
        "  --delta             (the default) read, of the next version, only the\n"
        "                      deltas its publishers list where the cost model\n"
        "                      prefers them, patching in place the shadows (and a\n"
        "                      staging of one round) that hold the version before\n"
        "                      (docs/delta.md); every digest is verified as for a\n"
        "                      full pull. Given, it needs verification; --no-verify\n"
        "                      alone turns deltas off\n"
        "  --no-delta          read every byte whole\n"
        "  --delta-budget B    the most memory kept as copies of reads patched in\n"
        "                      neither (staged, cast and quantized reads when the\n"
        "                      staging takes rounds), e.g. 2GiB; the reads that\n"
        "                      save most per byte kept get them first, the others\n"
        "                      are read whole. Default 0: no copies; 'unbounded':\n"
        "                      every read worth a copy\n"
        "  --release           release the version after installing it\n"
        "  --json              print one JSON object per version on one line\n"
        "  --dry-run           read the tables and plan (as `reshard plan --salt R`\n"
        "                      would), then print what the pull would move (bytes,\n"
        "                      descriptors, sessions and the bytes of each) and\n"
        "                      hold (parameters, shadows, staging under the\n"
        "                      budget); with --json one object, docs/formats.md.\n"
        "                      It allocates neither parameters nor staging,\n"
        "                      connects to no publisher, takes no lease and moves\n"
        "                      no byte. Exit 0 complete plan, 1 incomplete, 2 on\n"
        "                      bad usage or when the dry run fails. Not with\n"
        "                      --check, --release or --versions\n"
        RS_CLI_BUDGET_HELP
        "  --nic-gbps G        NIC rate (Gb/s) the planner's cost model assumes for\n"
        "                      every session; default 400\n"
        "  --descriptor-ns N   cost of one read descriptor (ns) in the cost model;\n"
        "                      default 100\n"
        "  --timeout S         the whole pull of a version (waiting for READY,\n"
        "                      planning, connecting, reading, verifying) must end\n"
        "                      within S seconds (default 60), or it fails naming\n"
        "                      the stage it was in, with nothing installed\n"
        "                      (directory outages are ridden out until then)\n"
        "  --stale-after S     a READY version with a publisher silent for S seconds\n"
        "                      is stale (default 5; 0: off): -1 skips it for the\n"
        "                      newest live one, an explicit V waits, then fails\n"
        "                      naming the stale slots\n"
        "  --stall-after S     a publisher whose reads make no progress for S seconds\n"
        "                      (frozen, or a link that drops everything) counts as\n"
        "                      failed while its slot has another publisher: the\n"
        "                      pull reads that slot from it (default 5; 0: off);\n"
        "                      without one the reads wait until --timeout\n"
        "  --versions K        pull K versions one after another, V, V+1, ...,\n"
        "                      reusing the plan while the topology is unchanged\n"
        "  --announce-as NAME  before the first pull, the rank's cut points are\n"
        "                      announced to the directory as cuts record NAME\n"
        "                      (default <layout>-rank<R>, with every character\n"
        "                      outside [A-Za-z0-9._-] as '-': vllm-tp-2-rank0),\n"
        "                      which `reshard publish --cut-aligned` reads before\n"
        "                      staging its next version; a failed announcement is\n"
        "                      a notice, never a failed pull\n"
        "  --no-announce       announce nothing\n"
        "  --group NAME        apply every version together with the other ranks\n"
        "                      of engine replica NAME (--group-size N of them):\n"
        "                      all install it or none does; a rank that fails or\n"
        "                      never comes rolls the others back (docs/refit.md,\n"
        "                      \"Group commit\")\n"
        "  --group-rank G      this rank's place in the group (default --rank)\n"
        "  --group-timeout S   bound of each wait for the group (default 60)\n"
        "  -h, --help          show this help and exit\n"
        "\n"
        "A pull first checks that the parameters and their shadows fit the memory\n"
        "there is (MemAvailable, RLIMIT_AS; RESHARD_MEMORY_AVAILABLE=SIZE replaces\n"
        "the figure) and exits 1 naming both before allocating anything; the\n"
        "executor checks its staging the same way before it allocates it.\n"
        "\n"
        "On a terminal, a pull taking longer than a second shows a progress line\n"
        "(bytes pulled, rate, sessions outstanding), then one line per stage.\n"
        "\n"
        "exit status: 0 every version pulled (and checked, and released); 1 a pull\n"
        "failed or timed out, a check found a wrong byte, or --release was refused\n"
        "(another receiver's live lease, named); 2 bad usage or input (a file:\n"
        "directory that does not exist: \"no such directory\").\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("pull", fmt, what);
}

static int parse_version(const char *arg, pull_args_t *a)
{
    uint64_t v;
    a->have_version = 1;
    if (strcmp(arg, "-1") == 0) {
        a->version = -1;
        return RS_CLI_OK;
    }
    if (!rs_cli_parse_u64(arg, &v) || v > INT64_MAX / 2)
        return usage_error("--version must be a non-negative integer or -1, "
                           "got '%s'", arg);
    a->version = (int64_t)v;
    return RS_CLI_OK;
}

static int parse_count(const char *opt, const char *arg, uint64_t *out)
{
    return rs_cli_take_count("pull", opt, arg, out);
}

/* A number of seconds, the whole of `arg`: above 0 (or 0 too, with
 * zero_ok) and at most max; else the usage error `fmt` naming arg. */
static int parse_seconds(const char *arg, int zero_ok, double max,
                         const char *fmt, double *out)
{
    char *end;
    *out = strtod(arg, &end);
    if (end == arg || *end != '\0' || !(zero_ok ? *out >= 0 : *out > 0) ||
        *out > max)
        return usage_error(fmt, arg);
    return RS_CLI_OK;
}

static int take_option(void *args, int c, const char *arg)
{
    pull_args_t *a = args;
    switch (c) {
    case OPT_DIRECTORY: a->directory = arg; return RS_CLI_OK;
    case OPT_MODEL: a->model = arg; return RS_CLI_OK;
    case OPT_LAYOUT: a->layout = arg; return RS_CLI_OK;
    case OPT_CONFIG: a->config = arg; return RS_CLI_OK;
    case OPT_BACKEND: a->backend = arg; return RS_CLI_OK;
    case OPT_VERIFY: a->verify = 1; return RS_CLI_OK;
    case OPT_NO_VERIFY: a->verify = 0; return RS_CLI_OK;
    case OPT_CHECK: a->check = 1; return RS_CLI_OK;
    case OPT_RELEASE: a->release = 1; return RS_CLI_OK;
    case OPT_JSON: a->json = 1; return RS_CLI_OK;
    case OPT_DELTA: a->delta = 1; return RS_CLI_OK;
    case OPT_NO_DELTA: a->delta = 0; return RS_CLI_OK;
    case OPT_DELTA_BUDGET:
        return rs_cli_take_size("pull", "--delta-budget", arg, 1,
                                RS_DELTA_UNBOUNDED, &a->delta_budget);
    case OPT_DRY_RUN: a->dry_run = 1; return RS_CLI_OK;
    case OPT_NO_ANNOUNCE: a->no_announce = 1; return RS_CLI_OK;
    case OPT_ANNOUNCE_AS: a->announce_as = arg; return RS_CLI_OK;
    case OPT_GROUP: a->group = arg; return RS_CLI_OK;
    case OPT_GROUP_SIZE:
        return parse_count("--group-size", arg, &a->group_size);
    case OPT_GROUP_RANK:
        a->have_group_rank = 1;
        return parse_count("--group-rank", arg, &a->group_rank);
    case OPT_GROUP_TIMEOUT:
        return parse_seconds(arg, 0, 1e6, "--group-timeout must be a positive "
                             "number of seconds, got '%s'",
                             &a->group_timeout_s);
    case OPT_BUDGET:
        return rs_cli_take_budget("pull", arg, &a->staging_budget);
    case OPT_CHANGED_FRACTION:
        return rs_cli_take_fraction("pull", arg, &a->fraction_q);
    case OPT_NIC:
        return rs_cli_take_cost("pull", "--nic-gbps", arg, &a->nic_gbps);
    case OPT_DESC:
        return rs_cli_take_cost("pull", "--descriptor-ns", arg,
                                &a->descriptor_ns);
    case OPT_VERSION: return parse_version(arg, a);
    case OPT_RANK:
        a->have_rank = 1;
        return parse_count("--rank", arg, &a->rank);
    case OPT_VERSIONS: return parse_count("--versions", arg, &a->versions);
    case OPT_STALE:
        return parse_seconds(arg, 1, 1e7, "--stale-after must be a number of "
                             "seconds >= 0, got '%s'", &a->stale_s);
    case OPT_STALL:
        return parse_seconds(arg, 1, 1e7, "--stall-after must be a number of "
                             "seconds >= 0, got '%s'", &a->stall_s);
    case OPT_TIMEOUT:
        return parse_seconds(arg, 0, 1e7, "--timeout must be a positive "
                             "number of seconds, got '%s'", &a->timeout_s);
    default: return usage_error("%s", "unknown option");
    }
}

/* --group needs --group-size and a rank inside it; the others need
 * --group. */
static int check_group(pull_args_t *a)
{
    if (a->group == NULL) {
        if (a->group_size > 0 || a->have_group_rank)
            return usage_error("%s", "--group-size and --group-rank need "
                               "--group");
        return RS_CLI_OK;
    }
    if (a->group_size == 0)
        return usage_error("--group '%s' needs --group-size", a->group);
    if (a->dry_run)
        return usage_error("%s", "--dry-run installs nothing: not with "
                           "--group");
    if (!a->have_group_rank)
        a->group_rank = a->rank;
    if (a->group_rank >= a->group_size)
        return usage_error("%s", "the group rank (--group-rank, default "
                           "--rank) must be below --group-size");
    return RS_CLI_OK;
}

static int parse_args(int argc, char **argv, pull_args_t *a)
{
    int rc;
    a->backend = "ucx";
    a->verify = 1;
    a->versions = 1;
    a->timeout_s = 60;
    a->stale_s = DEFAULT_STALE_S;
    a->stall_s = RS_RECEIVER_DEFAULT_STALL_S;
    a->group_timeout_s = 60;
    a->delta = -1;
    a->delta_budget = RS_RECEIVER_DEFAULT_DELTA_BUDGET;
    rc = rs_cli_options("pull", argc, argv, long_opts, pull_usage,
                        take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->directory == NULL || a->model == NULL || !a->have_version ||
        !a->have_rank || a->layout == NULL || a->config == NULL)
        return usage_error("%s", "--directory, --model, --version, --rank, "
                           "--layout and --model-config are required");
    if (strcmp(a->backend, "ucx") != 0 && strcmp(a->backend, "cma") != 0)
        return usage_error("--backend takes ucx or cma, got '%s'", a->backend);
    if (a->versions == 0)
        return usage_error("%s", "--versions must be at least 1");
    if (a->fraction_q != 0 && !a->check)
        return usage_error("%s", "--changed-fraction shapes the contents "
                           "--check expects: it needs --check");
    if (a->delta == 1 && !a->verify)
        return usage_error("%s", "--delta needs verification: a patched "
                           "version installs only once its digests match; "
                           "not with --no-verify");
    /* on by default, where a patched version can be verified */
    a->delta = a->delta != 0 && a->verify;
    if (a->dry_run && (a->check || a->release || a->versions != 1))
        return usage_error("%s", "--dry-run moves nothing: not with --check, "
                           "--release or --versions");
    return check_group(a);
}

/* --check, timed: the outcome's verdict and, on a mismatch, its cause. */
static void run_check(const pull_args_t *a, pull_state_t *s,
                      pull_outcome_t *o)
{
    double t0 = rs_clock_seconds();
    o->checked = 1;
    o->check_ok = rs_cli_pull_check(s->model, s->cap, s->param, s->expected,
                                    o->version, a->fraction_q, o->error,
                                    sizeof(o->error));
    o->check_s = rs_clock_seconds() - t0;
}

/* ---- setting up and pulling ------------------------------------------ */

#define PARAM_ALIGN ((size_t)64)

static int allocate_params(pull_state_t *s, int check)
{
    s->nparams = rs_capture_num_params(s->cap);
    s->param = calloc(s->nparams + 1, sizeof(unsigned char *));
    s->expected = calloc(s->nparams + 1, sizeof(unsigned char *));
    if (s->param == NULL || s->expected == NULL)
        return 0;
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        /* on cache lines, as an engine's allocator places its tensors
         * (torch's CPU allocator: 64 bytes): the install streams whole
         * lines from the page-aligned staging */
        s->param[p] = aligned_alloc(PARAM_ALIGN, (info.nbytes + PARAM_ALIGN - 1) /
                                                 PARAM_ALIGN * PARAM_ALIGN +
                                             (info.nbytes ? 0 : PARAM_ALIGN));
        if (s->param[p] == NULL)
            return 0;
        memset(s->param[p], 0xEE, info.nbytes);
        if (check && (s->expected[p] = malloc(info.nbytes ? info.nbytes : 1)) ==
                         NULL)
            return 0;
    }
    return 1;
}

/* The parameters (and with --check their expected bytes) and the
 * receiver's shadows against the memory there is, before any of them is
 * allocated: a pull that cannot fit says so instead of being killed. */
static int check_fits(const pull_args_t *a, pull_state_t *s)
{
    uint64_t params = 0, have;
    const char *source;
    char n[RS_UNITS_TEXT_MAX], d[RS_UNITS_TEXT_MAX], h[RS_UNITS_TEXT_MAX];
    for (size_t p = 0; p < rs_capture_num_params(s->cap); p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        params += info.nbytes;
    }
    /* the parameters, the shadows, and --check's expected copy */
    uint64_t need = params * (a->check ? 3 : 2);
    if (rs_memory_available(&have, &source) != RS_OK) {
        fprintf(stderr, "reshard pull: RESHARD_MEMORY_AVAILABLE='%s' is not "
                "a size\n", getenv("RESHARD_MEMORY_AVAILABLE"));
        return RS_CLI_USAGE;
    }
    if (need <= have)
        return RS_CLI_OK;
    fprintf(stderr, "reshard pull: rank %llu: the parameters (%s) and their "
            "shadows%s need %s (%llu bytes), and there is %s (%llu bytes, "
            "%s): nothing was allocated\n", (unsigned long long)a->rank,
            rs_format_bytes(n, sizeof(n), params),
            a->check ? " and --check's expected copy" : "",
            rs_format_bytes(d, sizeof(d), need), (unsigned long long)need,
            rs_format_bytes(h, sizeof(h), have), (unsigned long long)have,
            source);
    return RS_CLI_INCOMPLETE;
}

static int setup(const pull_args_t *a, pull_state_t *s)
{
    rs_diag_t diag;
    rs_status_t st;
    uint64_t padding = 0;
    int rc = rs_cli_load_layout("pull", "--layout", a->config, a->layout, 1,
                                &s->model, &s->layout);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->rank >= (uint64_t)s->layout.world) {
        fprintf(stderr, "reshard pull: --rank %llu is outside the layout '%s', "
                "which has %lld ranks\n", (unsigned long long)a->rank,
                a->layout, (long long)s->layout.world);
        return RS_CLI_USAGE;
    }
    rs_diag_clear(&diag);
    st = rs_layout_capture(s->model, &s->layout, (int64_t)a->rank, &diag,
                           &s->cap, &padding);
    if (st != RS_OK)
        return rs_cli_input_error("pull", &diag, st, "capturing");
    if (a->dry_run) /* a dry run holds no parameter */
        return RS_CLI_OK;
    if ((rc = check_fits(a, s)) != RS_CLI_OK)
        return rc;
    if (!allocate_params(s, a->check)) {
        fprintf(stderr, "reshard pull: out of memory for the parameters\n");
        return RS_CLI_INCOMPLETE;
    }
    return RS_CLI_OK;
}

/* Directory outage notices, one line each, naming the rank. */
static void on_notice(void *ctx, const char *msg)
{
    const pull_args_t *a = ctx;
    fprintf(stderr, "reshard pull: rank %llu: %s\n",
            (unsigned long long)a->rank, msg);
    fflush(stderr);
}

/* "<layout>-rank<R>" in the directory's name alphabet: the same record
 * for every pull of this rank, so a pull run again replaces it. */
static void default_announce_name(const pull_args_t *a, char *out, size_t cap)
{
    snprintf(out, cap, "%.100s-rank%llu", a->layout,
             (unsigned long long)a->rank);
    for (char *c = out; *c != '\0'; c++) {
        int ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                 (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' ||
                 *c == '-';
        *c = ok ? *c : '-';
    }
}

static int open_receiver(const pull_args_t *a, pull_state_t *s)
{
    rs_receiver_params_t rp;
    rs_diag_t diag;
    rs_status_t st;
    rs_receiver_params_init(&rp);
    rp.directory = a->directory;
    rp.model = a->model;
    rp.backend = a->backend;
    rp.salt = a->rank;
    rp.discover_timeout_s = a->timeout_s;
    rp.pull_timeout_s = a->timeout_s; /* one deadline for each whole pull */
    rp.release_after = a->release;
    rp.stale_s = a->stale_s;
    rp.stall_s = a->stall_s;
    rp.group = a->group;
    rp.group_size = (int64_t)a->group_size;
    rp.group_rank = (int64_t)a->group_rank;
    rp.group_timeout_s = a->group_timeout_s;
    if (a->nic_gbps > 0)
        rp.nic_gbps = a->nic_gbps;
    if (a->descriptor_ns > 0)
        rp.descriptor_ns = a->descriptor_ns;
    rp.notice = on_notice;
    rp.notice_ctx = (void *)a;
    rp.verify_digests = a->verify;
    rp.delta = a->delta;
    rp.delta_budget = a->delta_budget;
    rp.staging_budget = a->staging_budget;
    char announce[RS_DIR_NAME_MAX + 1];
    default_announce_name(a, announce, sizeof(announce));
    rp.announce_cuts = !a->no_announce;
    rp.announce_as = a->announce_as != NULL ? a->announce_as : announce;
    if (isatty(STDOUT_FILENO)) /* a progress line on a terminal */
        rp.progress = rs_cli_ticker_progress;
    rs_diag_clear(&diag);
    st = rs_receiver_create(&rp, s->cap, &diag, &s->recv);
    for (size_t p = 0; st == RS_OK && !a->dry_run && p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        st = rs_receiver_bind(s->recv, p, s->param[p], info.nbytes, RS_MEM_HOST, &diag);
    }
    if (st == RS_OK)
        return RS_CLI_OK;
    char shown[512];
    rs_dir_redact_url(a->directory, shown, sizeof(shown));
    fprintf(stderr, "reshard pull: %s: %s\n", shown,
            diag.msg[0] ? diag.msg : rs_status_str(st));
    return st == RS_ERR_INPUT || st == RS_ERR_INVALID_ARG ? RS_CLI_USAGE
                                                          : RS_CLI_INCOMPLETE;
}

/* The pull's wire rate, as every human line prints it. */
static const char *wire_rate(const rs_pull_result_t *r, char *buf, size_t len)
{
    return rs_format_rate(buf, len, r->exec.wire_seconds > 0
                                        ? (double)r->exec.bytes /
                                              r->exec.wire_seconds
                                        : 0.0);
}

/* Ends the ticker; a line it showed is followed by the stage times. */
static void end_ticker(rs_cli_ticker_t *t, const pull_outcome_t *o)
{
    if (!rs_cli_ticker_stop(t))
        return;
    const rs_pull_result_t *r = &o->res;
    char size[RS_UNITS_TEXT_MAX], rate[RS_UNITS_TEXT_MAX];
    fprintf(stderr, "\n  discover %.3f s\n  plan+connect %.3f s\n  "
            "wire %.3f s (%s, %s)\n  total %.3f s\n",
            r->discover_s, r->plan_s, r->exec.wire_seconds,
            rs_format_bytes(size, sizeof(size), r->exec.bytes),
            wire_rate(r, rate, sizeof(rate)), o->wall_s);
}

static void pull_one(const pull_args_t *a, pull_state_t *s, int64_t version,
                     pull_outcome_t *o)
{
    rs_diag_t diag;
    memset(o, 0, sizeof(*o));
    o->version = version;
    rs_diag_clear(&diag);
    rs_cli_ticker_t *tick = rs_cli_ticker_start((int64_t)a->rank, version);
    double t0 = rs_clock_seconds();
    rs_status_t st = rs_receiver_pull(s->recv, version, &diag, &o->res);
    o->wall_s = rs_clock_seconds() - t0;
    end_ticker(tick, o);
    if (st != RS_OK) {
        snprintf(o->error, sizeof(o->error), "%s",
                 diag.msg[0] ? diag.msg : rs_status_str(st));
        return;
    }
    o->ok = 1;
    o->version = o->res.version;
    if (a->check)
        run_check(a, s, o);
    if (a->release && o->res.release_status != RS_OK && o->error[0] == '\0')
        snprintf(o->error, sizeof(o->error), "pulled, but --release was "
                 "refused: %s", o->res.release_msg[0]
                     ? o->res.release_msg
                     : rs_status_str(o->res.release_status));
}

/* ---- output ------------------------------------------------------------ */

/* The JSON line is written key by key: scalars through jansson, the two
 * records by the library's own writers (one writer per format), from the
 * figures it hands over as structs; nothing is parsed back. */
typedef struct json_line {
    FILE *out;
    int keys;
} json_line_t;

static void put_key(json_line_t *l, const char *key)
{
    fputs(l->keys++ == 0 ? "{" : ",", l->out);
    json_t *k = json_string(key);
    json_dumpf(k, l->out, JSON_ENCODE_ANY);
    json_decref(k);
    fputc(':', l->out);
}

static void put(json_line_t *l, const char *key, json_t *value)
{
    put_key(l, key);
    json_dumpf(value, l->out, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(value);
}

/* The executor's records of this pull: a successful pull's figures are in
 * its result; a failed one's in the executor it left (if any). */
static void put_records(json_line_t *l, pull_state_t *s)
{
    rs_exec_h x = rs_receiver_exec(s->recv);
    rs_coverage_t cov;
    rs_diag_t diag;
    if (x == NULL)
        return;
    put_key(l, "stage"); /* the executor's last run: this pull's */
    rs_exec_write_stage_record(x, -1, RS_RECORD_COMPACT, l->out, &diag);
    if (rs_exec_coverage(x, &diag, &cov) == RS_OK) {
        put_key(l, "coverage");
        rs_exec_write_coverage_record(x, RS_RECORD_COMPACT, l->out, &diag);
    }
}

/* The publishers that failed within the pull and why: [{"publisher",
 * "slot", "error"}, ...] (the first RS_PULL_FAILURES_MAX; "failures"
 * counts them all). */
static void put_failures(json_line_t *l, pull_state_t *s)
{
    rs_pull_failure_t failed[RS_PULL_FAILURES_MAX];
    json_t *list = json_array();
    /* a failed pull writes no result: its failures are the receiver's */
    uint32_t all = rs_receiver_failures(s->recv, failed, RS_PULL_FAILURES_MAX);
    uint32_t n = all < RS_PULL_FAILURES_MAX ? all : RS_PULL_FAILURES_MAX;
    put(l, "failures", json_integer((json_int_t)all));
    for (uint32_t i = 0; i < n; i++) {
        const rs_pull_failure_t *f = &failed[i];
        json_array_append_new(list, json_pack("{s:s,s:I,s:s}", "publisher",
                                              f->publisher, "slot",
                                              (json_int_t)f->slot, "error",
                                              f->why));
    }
    put(l, "failed_publishers", list);
}

/* What the pull read through deltas, beside what it read whole. */
static json_t *delta_json(const rs_pull_result_t *r)
{
    return json_pack("{sI,sI,sI,sI,sI,sI,sb,sI,sI,sI,sI}",
                     "runs", (json_int_t)r->delta_runs,
                     "bytes", (json_int_t)r->delta_bytes,
                     "full_bytes", (json_int_t)r->delta_full_bytes,
                     "whole_runs", (json_int_t)r->whole_runs,
                     "whole_bytes", (json_int_t)r->whole_bytes,
                     "refused", (json_int_t)r->delta_refused,
                     "retried", r->delta_retried,
                     "held_bytes", (json_int_t)r->delta_held_bytes,
                     "in_place_bytes", (json_int_t)r->delta_in_place_bytes,
                     "over_budget_bytes",
                     (json_int_t)r->delta_over_budget_bytes,
                     "no_memory_bytes", (json_int_t)r->delta_no_memory_bytes);
}

static void print_json(const pull_args_t *a, pull_state_t *s,
                       const pull_outcome_t *o)
{
    json_line_t l = {stdout, 0};
    put(&l, "version", json_integer(o->version));
    put(&l, "rank", json_integer((json_int_t)a->rank));
    put(&l, "ok", json_boolean(o->ok && (!o->checked || o->check_ok)));
    put(&l, "replanned", json_boolean(o->res.replanned));
    put(&l, "failovers", json_integer((json_int_t)o->res.failovers));
    put_failures(&l, s);
    put(&l, "tables_parsed", json_integer((json_int_t)o->res.tables_parsed));
    put(&l, "tables_reused", json_integer((json_int_t)o->res.tables_reused));
    put(&l, "table_bytes_read",
        json_integer((json_int_t)o->res.table_bytes_read));
    /* when its reads went through deltas: a publisher serves them */
    if (a->delta && o->res.delta_runs + o->res.whole_runs > 0)
        put(&l, "delta", delta_json(&o->res));
    put_records(&l, s);
    put(&l, "discover_s", json_real(o->res.discover_s));
    put(&l, "plan_s", json_real(o->res.plan_s));
    put(&l, "wall_s", json_real(o->wall_s));
    if (o->checked) {
        put(&l, "check", json_boolean(o->check_ok));
        put(&l, "check_s", json_real(o->check_s));
    }
    if (a->release)
        put(&l, "released", json_boolean(o->ok && o->res.release_status ==
                                                      RS_OK));
    if (o->error[0] != '\0')
        put(&l, "error", json_string(o->error));
    fputs("}\n", stdout);
}

static void print_human(const pull_args_t *a, pull_state_t *s,
                        const pull_outcome_t *o)
{
    const rs_pull_result_t *r = &o->res;
    rs_diag_t diag;
    if (!o->ok)
        return;
    char size[RS_UNITS_TEXT_MAX], rate[RS_UNITS_TEXT_MAX];
    printf("reshard pull: rank %llu version %lld: %s in %llu "
           "descriptors, %.3f s (discover %.3f, plan+connect %.3f, wire %.3f, "
           "%s), %s", (unsigned long long)a->rank,
           (long long)o->version,
           rs_format_bytes(size, sizeof(size), r->exec.bytes),
           (unsigned long long)r->exec.descriptors, o->wall_s, r->discover_s,
           r->plan_s, r->exec.wire_seconds, wire_rate(r, rate, sizeof(rate)),
           r->replanned ? "planned" : "cached plan");
    if (a->verify)
        printf(", %llu shards verified",
               (unsigned long long)r->exec.shards_verified);
    if (o->checked && o->check_ok)
        printf(", check: %zu parameters byte-exact", s->nparams);
    if (r->failovers > 0)
        printf(", failed over: %s", r->failover_msg);
    if (a->delta && r->delta_runs + r->whole_runs > 0)
        printf(", deltas: %llu of %llu reads, %llu bytes for %llu (%llu "
               "refused)", (unsigned long long)r->delta_runs,
               (unsigned long long)r->delta_runs +
                   (unsigned long long)r->whole_runs,
               (unsigned long long)r->delta_bytes,
               (unsigned long long)r->delta_full_bytes,
               (unsigned long long)r->delta_refused);
    printf("\n");
    rs_exec_stages_t stages = r->stages;
    stages.plan_s = r->plan_s;
    rs_exec_write_stages(&stages, 0, stdout, &diag);
}

static int pull_all(const pull_args_t *a, pull_state_t *s)
{
    int64_t v = a->version;
    for (uint64_t k = 0; k < a->versions; k++) {
        pull_outcome_t o;
        pull_one(a, s, v, &o);
        if (a->json)
            print_json(a, s, &o);
        else
            print_human(a, s, &o);
        fflush(stdout);
        if (!o.ok || (o.checked && !o.check_ok) ||
            (a->release && o.res.release_status != RS_OK)) {
            fprintf(stderr, "reshard pull: rank %llu version %lld: %s\n",
                    (unsigned long long)a->rank, (long long)o.version,
                    o.error);
            return RS_CLI_INCOMPLETE;
        }
        v = o.version + 1;
    }
    return RS_CLI_OK;
}

static void teardown(pull_state_t *s)
{
    rs_receiver_destroy(s->recv);
    for (size_t p = 0; p < s->nparams; p++) {
        if (s->param != NULL)
            free(s->param[p]);
        if (s->expected != NULL)
            free(s->expected[p]);
    }
    free(s->param);
    free(s->expected);
    rs_capture_destroy(s->cap);
    rs_model_destroy(s->model);
}

int rs_cli_pull(int argc, char **argv)
{
    pull_args_t a;
    pull_state_t s;
    memset(&a, 0, sizeof(a));
    memset(&s, 0, sizeof(s));
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    if (rc == RS_CLI_OK)
        rc = setup(&a, &s);
    if (rc == RS_CLI_OK)
        rc = open_receiver(&a, &s);
    if (rc == RS_CLI_OK)
        rc = a.dry_run ? rs_cli_pull_dry_run(s.recv, a.version, a.rank, a.json)
                       : pull_all(&a, &s);
    teardown(&s);
    return rc;
}