/* `reshard pull`: one inference rank of a vllm layout pulling its
 * parameters from the publishers of a directory, printing the stage record,
 * and with --check comparing every parameter byte with contents rebuilt
 * independently of the transfer (whole sources filled locally, the same
 * capture replayed over them with the local transport; no directory, no
 * publisher, no wire). */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
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
    double nic_gbps, descriptor_ns; /* 0 = not given */
    int have_version, have_rank, verify, check, release, json;
    int dry_run, no_announce;
    const char *announce_as;
    const char *group;          /* --group: NULL without */
    uint64_t group_size, group_rank;
    int have_group_rank;
    double group_timeout_s;
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
       OPT_GROUP_SIZE, OPT_GROUP_RANK, OPT_GROUP_TIMEOUT };

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
    {"no-announce", no_argument, NULL, OPT_NO_ANNOUNCE},
    {"announce-as", required_argument, NULL, OPT_ANNOUNCE_AS},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"descriptor-ns", required_argument, NULL, OPT_DESC},
    {"group", required_argument, NULL, OPT_GROUP},
    {"group-size", required_argument, NULL, OPT_GROUP_SIZE},
    {"group-rank", required_argument, NULL, OPT_GROUP_RANK},
    {"group-timeout", required_argument, NULL, OPT_GROUP_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void pull_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard pull --directory D --model M --version V --rank R\n"
        "                    --layout LAYOUT --model-config CONFIG.json\n"
        "                    [--backend ucx|cma] [--no-verify] [--check] [--release]\n"
        "                    [--json] [--timeout S] [--versions K] [--stale-after S]\n"
        "                    [--dry-run] [--no-announce] [--announce-as NAME]\n"
        "                    [--nic-gbps G] [--descriptor-ns N]\n"
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
        "  --release           release the version after installing it\n"
        "  --json              print one JSON object per version on one line\n"
        "  --dry-run           read the tables, plan (as `reshard plan --salt R`\n"
        "                      would) and prepare, then print what the pull would\n"
        "                      move: bytes, descriptors, sessions and the bytes of\n"
        "                      each (with --json one object, docs/formats.md); it\n"
        "                      connects to no publisher, takes no lease and moves\n"
        "                      no byte. Exit 0 complete plan, 1 incomplete, 2 on\n"
        "                      bad usage or when the dry run fails. Not with\n"
        "                      --check, --release or --versions\n"
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
        "                      never comes rolls the others back (docs/design.md,\n"
        "                      \"Group commit\")\n"
        "  --group-rank G      this rank's place in the group (default --rank)\n"
        "  --group-timeout S   bound of each wait for the group (default 60)\n"
        "  -h, --help          show this help and exit\n"
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
    if (!rs_cli_parse_u64(arg, out) || *out > INT64_MAX / 2) {
        fprintf(stderr, "reshard pull: %s must be a non-negative integer, got "
                "'%s'\nTry 'reshard pull --help'.\n", opt, arg);
        return RS_CLI_USAGE;
    }
    return RS_CLI_OK;
}

static int take_option(void *args, int c, const char *arg)
{
    pull_args_t *a = args;
    char *end;
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
        a->group_timeout_s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(a->group_timeout_s > 0) ||
            a->group_timeout_s > 1e6)
            return usage_error("--group-timeout must be a positive number of "
                               "seconds, got '%s'", arg);
        return RS_CLI_OK;
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
        a->stale_s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(a->stale_s >= 0) ||
            a->stale_s > 1e7)
            return usage_error("--stale-after must be a number of seconds "
                               ">= 0, got '%s'", arg);
        return RS_CLI_OK;
    case OPT_TIMEOUT:
        a->timeout_s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(a->timeout_s > 0) ||
            a->timeout_s > 1e7)
            return usage_error("--timeout must be a positive number of "
                               "seconds, got '%s'", arg);
        return RS_CLI_OK;
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
    a->group_timeout_s = 60;
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
    if (a->dry_run && (a->check || a->release || a->versions != 1))
        return usage_error("%s", "--dry-run moves nothing: not with --check, "
                           "--release or --versions");
    return check_group(a);
}

/* ---- the independent check ------------------------------------------- */

typedef struct src_copy {
    const char *src;
    size_t copy;
} src_copy_t;

static int by_src(const void *a, const void *b)
{
    const src_copy_t *x = a, *y = b;
    int c = strcmp(x->src, y->src);
    return c != 0 ? c : (x->copy > y->copy) - (x->copy < y->copy);
}

/* A capture holding only `n` copies of one source, with the parameters
 * they land in; map[i] is sub-parameter i's index in the full capture. */
/* Adds parameter `name` of cap to sub (once), recording its index in
 * map. */
static rs_status_t sub_param(rs_capture_h cap, rs_capture_h sub,
                             const char *name, size_t *map, size_t *nmap,
                             rs_diag_t *diag)
{
    rs_param_info_t p;
    if (rs_capture_find_param(sub, name) >= 0)
        return RS_OK;
    size_t gp = (size_t)rs_capture_find_param(cap, name);
    rs_capture_param(cap, gp, &p);
    map[(*nmap)++] = gp;
    return rs_capture_add_param(sub, p.name, p.ndim, p.shape, p.dtype, diag);
}

/* The copies of g (one source) in a capture of their own; a quantized copy
 * stays quantized, with its scale parameter (map has room for two
 * parameters per copy). */
static rs_status_t sub_capture(rs_capture_h cap, const src_copy_t *g, size_t n,
                               size_t *map, size_t *nmap, rs_diag_t *diag,
                               rs_capture_h *sub_p)
{
    rs_capture_h sub;
    rs_status_t st = rs_capture_create(&sub);
    *nmap = 0;
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        rs_copy_desc_t c;
        rs_quant_desc_t q;
        rs_capture_copy(cap, g[i].copy, &c);
        int quant = rs_capture_copy_quant(cap, g[i].copy, &q);
        st = sub_param(cap, sub, c.param, map, nmap, diag);
        if (st == RS_OK && quant)
            st = sub_param(cap, sub, q.scale_param, map, nmap, diag);
        if (st == RS_OK)
            st = quant ? rs_capture_add_quant_copy(sub, &c, &q, diag)
                       : rs_capture_add_copy(sub, &c, diag);
    }
    if (st != RS_OK) {
        rs_capture_destroy(sub);
        return st;
    }
    *sub_p = sub;
    return RS_OK;
}

/* The whole source tensor, filled with the demo contents of `version`, as
 * one shard at its own address. */
static rs_status_t whole_source(rs_model_h model, const char *src,
                                int64_t version, rs_diag_t *diag,
                                unsigned char **buf_p, uint64_t *nbytes_p,
                                rs_sources_h *sources_p)
{
    long t = rs_model_find(model, src);
    rs_tensor_info_t info;
    int64_t zero[RS_MAX_DIMS] = {0};
    uint64_t numel = 1;
    if (t < 0) {
        snprintf(diag->msg, sizeof(diag->msg), "source '%s' is not a tensor "
                 "of the model", src);
        return RS_ERR_INPUT;
    }
    rs_model_tensor(model, (size_t)t, &info);
    for (int d = 0; d < info.ndim; d++)
        numel *= (uint64_t)info.shape[d];
    uint64_t nbytes = numel * rs_dtype_size(info.dtype);
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL)
        return RS_ERR_NO_MEMORY;
    rs_status_t st = rs_cli_fill_box(src, info.dtype, version, info.ndim,
                                     info.shape, zero, info.shape, buf);
    rs_shard_desc_t sh = {src, info.dtype, rs_dtype_size(info.dtype),
                          info.ndim, info.shape, "check", 0,
                          (uint64_t)(uintptr_t)buf, zero, info.shape, NULL};
    rs_sources_h s = NULL;
    if (st == RS_OK)
        st = rs_sources_create(&s);
    if (st == RS_OK)
        st = rs_sources_add_shard(s, &sh, diag);
    if (st != RS_OK) {
        rs_sources_destroy(s);
        free(buf);
        return st;
    }
    *buf_p = buf;
    *nbytes_p = nbytes;
    *sources_p = s;
    return RS_OK;
}

/* Plans the sub-capture against the one-shard source and runs it with the
 * local transport into the expected parameters. */
static rs_status_t replay_local(rs_capture_h sub, rs_sources_h src,
                                const unsigned char *buf, uint64_t nbytes,
                                unsigned char **targets, rs_diag_t *diag)
{
    rs_plan_params_t pp;
    rs_plan_h plan = NULL;
    rs_transport_h t = NULL;
    rs_exec_h x = NULL;
    rs_region_t region = {(uint64_t)(uintptr_t)buf, nbytes, buf};
    rs_plan_params_init(&pp);
    rs_status_t st = rs_plan_build(sub, src, &pp, diag, &plan);
    if (st == RS_OK && !rs_plan_is_complete(plan)) {
        snprintf(diag->msg, sizeof(diag->msg), "the local replay plan is "
                 "incomplete (unsupported geometry or uncovered copies)");
        st = RS_ERR_INCOMPLETE;
    }
    if (st == RS_OK)
        st = rs_transport_create(NULL, diag, &t);
    for (uint32_t k = 0; st == RS_OK && k < rs_plan_num_sessions(plan); k++) {
        rs_peer_t peer = {rs_plan_session_name(plan, k), 0, &region, 1, NULL, 0};
        st = rs_transport_connect(t, k, &peer, diag);
    }
    if (st == RS_OK)
        st = rs_exec_create(plan, t, NULL, diag, &x);
    for (size_t p = 0; st == RS_OK && p < rs_capture_num_params(sub); p++) {
        rs_param_info_t info;
        rs_capture_param(sub, p, &info);
        st = rs_exec_bind(x, p, targets[p], info.nbytes, RS_MEM_HOST, diag);
    }
    if (st == RS_OK)
        st = rs_exec_run(x, diag);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    return st;
}

static rs_status_t replay_group(pull_state_t *s, const src_copy_t *g, size_t n,
                                int64_t version, rs_diag_t *diag)
{
    size_t *map = calloc(2 * n, sizeof(size_t));
    unsigned char **targets = calloc(2 * n, sizeof(unsigned char *));
    size_t nmap = 0;
    rs_capture_h sub = NULL;
    rs_sources_h src = NULL;
    unsigned char *buf = NULL;
    uint64_t nbytes = 0;
    rs_status_t st = map && targets ? RS_OK : RS_ERR_NO_MEMORY;
    if (st == RS_OK)
        st = sub_capture(s->cap, g, n, map, &nmap, diag, &sub);
    if (st == RS_OK)
        st = whole_source(s->model, g[0].src, version, diag, &buf, &nbytes,
                          &src);
    for (size_t i = 0; i < nmap; i++)
        targets[i] = s->expected[map[i]];
    if (st == RS_OK)
        st = replay_local(sub, src, buf, nbytes, targets, diag);
    rs_sources_destroy(src);
    rs_capture_destroy(sub);
    free(buf);
    free(targets);
    free(map);
    return st;
}

/* Fills s->expected: 0xEE, then every copy replayed source by source. */
static rs_status_t expected_contents(pull_state_t *s, int64_t version,
                                     rs_diag_t *diag, const char **failed_p)
{
    size_t n = rs_capture_num_copies(s->cap);
    src_copy_t *order = calloc(n + 1, sizeof(*order));
    rs_status_t st = order ? RS_OK : RS_ERR_NO_MEMORY;
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        memset(s->expected[p], 0xEE, info.nbytes);
    }
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        rs_copy_desc_t c;
        rs_capture_copy(s->cap, i, &c);
        order[i] = (src_copy_t){c.src, i};
    }
    if (st == RS_OK)
        qsort(order, n, sizeof(*order), by_src);
    for (size_t i = 0, j; st == RS_OK && i < n; i = j) {
        for (j = i + 1; j < n && strcmp(order[j].src, order[i].src) == 0; j++)
            ;
        st = replay_group(s, order + i, j - i, version, diag);
        if (st != RS_OK)
            *failed_p = order[i].src; /* borrowed from the capture */
    }
    free(order);
    return st;
}

/* Byte-for-byte comparison; names the first wrong parameter and byte. */
static int compare(pull_state_t *s, char *err, size_t errlen)
{
    for (size_t p = 0; p < s->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(s->cap, p, &info);
        if (memcmp(s->param[p], s->expected[p], info.nbytes) == 0)
            continue;
        uint64_t first = UINT64_MAX, bad = 0;
        for (uint64_t b = 0; b < info.nbytes; b++) {
            if (s->param[p][b] != s->expected[p][b]) {
                first = first == UINT64_MAX ? b : first;
                bad++;
            }
        }
        snprintf(err, errlen, "check failed: parameter '%s': %llu of %llu "
                 "bytes differ, first at byte %llu (got 0x%02x, expected "
                 "0x%02x)", info.name, (unsigned long long)bad,
                 (unsigned long long)info.nbytes, (unsigned long long)first,
                 s->param[p][first], s->expected[p][first]);
        return 0;
    }
    return 1;
}

static void run_check(pull_state_t *s, pull_outcome_t *o)
{
    rs_diag_t diag;
    const char *src = "?";
    double t0 = rs_clock_seconds();
    rs_diag_clear(&diag);
    o->checked = 1;
    rs_status_t st = expected_contents(s, o->version, &diag, &src);
    if (st != RS_OK) {
        snprintf(o->error, sizeof(o->error), "check could not replay source "
                 "'%.200s' locally: %.700s", src,
                 diag.msg[0] ? diag.msg : rs_status_str(st));
        o->check_ok = 0;
    } else {
        o->check_ok = compare(s, o->error, sizeof(o->error));
    }
    o->check_s = rs_clock_seconds() - t0;
}

/* ---- setting up and pulling ------------------------------------------ */

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
        s->param[p] = malloc(info.nbytes ? info.nbytes : 1);
        if (s->param[p] == NULL)
            return 0;
        memset(s->param[p], 0xEE, info.nbytes);
        if (check && (s->expected[p] = malloc(info.nbytes ? info.nbytes : 1)) ==
                         NULL)
            return 0;
    }
    return 1;
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
    if (!allocate_params(s, a->check)) {
        fprintf(stderr, "reshard pull: out of memory for the parameters\n");
        return RS_CLI_INCOMPLETE;
    }
    return RS_CLI_OK;
}

static void on_wire_progress(void *ctx, const rs_progress_t *p);

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
    char announce[RS_DIR_NAME_MAX + 1];
    default_announce_name(a, announce, sizeof(announce));
    rp.announce_cuts = !a->no_announce;
    rp.announce_as = a->announce_as != NULL ? a->announce_as : announce;
    if (isatty(STDOUT_FILENO)) /* a progress line on a terminal */
        rp.progress = on_wire_progress;
    rs_diag_clear(&diag);
    st = rs_receiver_create(&rp, s->cap, &diag, &s->recv);
    for (size_t p = 0; st == RS_OK && p < s->nparams; p++) {
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

/* The terminal ticker: the executor reports nothing while it runs, so the
 * line says how long the pull has taken; stage lines follow at the end. */
typedef struct ticker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done, shown, running;
    int64_t rank, version;
    double t0;
    int have_progress;     /* the wire stage has reported at least once */
    rs_progress_t progress;
} ticker_t;

/* The ticker of the pull in flight, fed by the executor's progress
 * callback (which runs on the pulling thread). */
static ticker_t *active_ticker;

/* The pull's wire rate, as every human line prints it. */
static const char *wire_rate(const rs_pull_result_t *r, char *buf, size_t len)
{
    return rs_format_rate(buf, len, r->exec.wire_seconds > 0
                                        ? (double)r->exec.bytes /
                                              r->exec.wire_seconds
                                        : 0.0);
}

static void on_wire_progress(void *ctx, const rs_progress_t *p)
{
    (void)ctx;
    ticker_t *t = active_ticker;
    if (t == NULL || !t->running)
        return;
    pthread_mutex_lock(&t->lock);
    t->progress = *p;
    t->have_progress = 1;
    pthread_mutex_unlock(&t->lock);
}

static void *tick_main(void *arg)
{
    ticker_t *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->done_cv, &t->lock, &until);
        double el = rs_clock_seconds() - t->t0;
        if (!t->done && el >= 1.0 && t->have_progress) {
            const rs_progress_t *p = &t->progress;
            char done[RS_UNITS_TEXT_MAX], total[RS_UNITS_TEXT_MAX];
            char rate[RS_UNITS_TEXT_MAX];
            fprintf(stderr, "\rreshard pull: rank %lld version %lld: %s of "
                    "%s, %s, %zu sessions outstanding   ",
                    (long long)t->rank, (long long)t->version,
                    rs_format_bytes(done, sizeof(done), p->bytes_done),
                    rs_format_bytes(total, sizeof(total), p->bytes_total),
                    rs_format_rate(rate, sizeof(rate),
                                   p->elapsed_s > 0 ? (double)p->bytes_done /
                                                          p->elapsed_s
                                                    : 0.0),
                    p->sessions_outstanding);
            t->shown = 1;
        } else if (!t->done && el >= 1.0) {
            fprintf(stderr, "\rreshard pull: rank %lld version %lld: %.1f s "
                    "(discovering, planning, connecting)   ",
                    (long long)t->rank, (long long)t->version, el);
            t->shown = 1;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static void ticker_start(ticker_t *t, int64_t rank, int64_t version)
{
    memset(t, 0, sizeof(*t));
    if (!isatty(STDOUT_FILENO))
        return;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    t->rank = rank;
    t->version = version;
    t->t0 = rs_clock_seconds();
    t->running = pthread_create(&t->thread, NULL, tick_main, t) == 0;
    if (t->running)
        active_ticker = t;
}

static void ticker_stop(ticker_t *t, const pull_outcome_t *o)
{
    if (!t->running)
        return;
    pthread_mutex_lock(&t->lock);
    active_ticker = NULL;
    t->done = 1;
    pthread_cond_signal(&t->done_cv);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->done_cv);
    if (!t->shown)
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
    ticker_t tick;
    memset(o, 0, sizeof(*o));
    o->version = version;
    rs_diag_clear(&diag);
    ticker_start(&tick, (int64_t)a->rank, version);
    double t0 = rs_clock_seconds();
    rs_status_t st = rs_receiver_pull(s->recv, version, &diag, &o->res);
    o->wall_s = rs_clock_seconds() - t0;
    ticker_stop(&tick, o);
    if (st != RS_OK) {
        snprintf(o->error, sizeof(o->error), "%s",
                 diag.msg[0] ? diag.msg : rs_status_str(st));
        return;
    }
    o->ok = 1;
    o->version = o->res.version;
    if (a->check)
        run_check(s, o);
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
static void put_records(json_line_t *l, pull_state_t *s,
                        const pull_outcome_t *o)
{
    rs_exec_h x = rs_receiver_exec(s->recv);
    rs_exec_stages_t stages;
    rs_coverage_t cov;
    rs_diag_t diag;
    if (x == NULL)
        return;
    if (o->ok)
        stages = o->res.stages;
    else
        rs_exec_stages(x, &stages);
    stages.plan_s = -1;
    put_key(l, "stage");
    rs_exec_write_stages(&stages, RS_RECORD_COMPACT, l->out, &diag);
    if (rs_exec_coverage(x, &diag, &cov) == RS_OK) {
        put_key(l, "coverage");
        rs_exec_write_coverage_record(x, RS_RECORD_COMPACT, l->out, &diag);
    }
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
    put_records(&l, s, o);
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
