/* `reshard plan`: load a capture and shard tables, build the transfer plan
 * and print it (a summary, or reshard.plan.v2 JSON). Inputs are checked in
 * full before anything reaches stdout, so bad input never yields a partial
 * plan. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reshard/reshard.h"

typedef struct plan_args {
    const char *capture;
    const char **sources;
    size_t nsources;
    const char **only;
    size_t nonly;
    int64_t max_segments; /* 0 = not given */
    uint64_t salt;
    int json;
    double nic_gbps, descriptor_ns; /* 0 = not given */
} plan_args_t;

enum { OPT_CAPTURE = 256, OPT_SOURCES, OPT_MAX_SEGS, OPT_ONLY, OPT_SALT, OPT_JSON,
       OPT_NIC, OPT_DESC };

static const struct option long_opts[] = {
    {"capture", required_argument, NULL, OPT_CAPTURE},
    {"sources", required_argument, NULL, OPT_SOURCES},
    {"max-segments-per-copy", required_argument, NULL, OPT_MAX_SEGS},
    {"only", required_argument, NULL, OPT_ONLY},
    {"salt", required_argument, NULL, OPT_SALT},
    {"json", no_argument, NULL, OPT_JSON},
    {"nic-gbps", required_argument, NULL, OPT_NIC},
    {"descriptor-ns", required_argument, NULL, OPT_DESC},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void plan_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard plan --capture CAP.json --sources SRC.json [--sources ...]\n"
        "                    [--max-segments-per-copy N] [--only GLOB ...]\n"
        "                    [--salt N] [--nic-gbps G] [--descriptor-ns N] [--json]\n"
        "\n"
        "Intersects what an inference rank's loader reads (the capture) with what\n"
        "the trainer ranks publish (shard tables) and prints the byte runs to read.\n"
        "\n"
        "options:\n"
        "  --capture FILE        reshard.capture.v1 JSON of one inference rank\n"
        "                        (required, once)\n"
        "  --sources FILE        shard tables (mx.reshard.shard_table.v1): one blob\n"
        "                        or an array of blobs per file; repeat for several\n"
        "                        files, all are merged (required)\n"
        "  --max-segments-per-copy N\n"
        "                        a copy needing more than N runs is read through a\n"
        "                        staged box or its source's full pull whenever one\n"
        "                        is possible (a hard cap; below it the cost model\n"
        "                        chooses); positive integer, default from the\n"
        "                        environment variable RESHARD_MAX_SEGMENTS_PER_COPY,\n"
        "                        else %d\n"
        RS_CLI_COST_USAGE
        "  --only GLOB           plan only parameters whose name matches the shell\n"
        "                        glob (partial refit); repeat to add patterns;\n"
        "                        stats then count only those parameters\n"
        "  --salt N              replica choice salt (say, this rank's index) so\n"
        "                        that receivers spread over replicas; default 0\n"
        "  --json                print the plan as reshard.plan.v2 JSON instead of\n"
        "                        the human summary\n"
        "  -h, --help            show this help and exit\n"
        "\n"
        "exit status: 0 complete plan; 1 incomplete plan (sources on fallback or\n"
        "uncovered copies; the plan is still printed); 2 bad usage or bad input\n"
        "(a message on stderr names the file, the JSON path and the problem).\n",
        RS_PLAN_DEFAULT_MAX_SEGMENTS_PER_COPY);
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("plan", fmt, what);
}

static int take_option(void *args, int c, const char *arg)
{
    plan_args_t *a = args;
    uint64_t v;
    switch (c) {
    case OPT_CAPTURE:
        if (a->capture != NULL)
            return usage_error("--capture given twice (%s)", arg);
        a->capture = arg;
        return RS_CLI_OK;
    case OPT_SOURCES:
        a->sources[a->nsources++] = arg;
        return RS_CLI_OK;
    case OPT_MAX_SEGS:
        if (!rs_cli_parse_u64(arg, &v) || v == 0 || v > INT64_MAX)
            return usage_error("--max-segments-per-copy must be a positive "
                               "integer, got '%s'", arg);
        a->max_segments = (int64_t)v;
        return RS_CLI_OK;
    case OPT_ONLY:
        a->only[a->nonly++] = arg;
        return RS_CLI_OK;
    case OPT_SALT:
        if (!rs_cli_parse_u64(arg, &a->salt))
            return usage_error("--salt must be a non-negative integer, got '%s'",
                               arg);
        return RS_CLI_OK;
    case OPT_JSON:
        a->json = 1;
        return RS_CLI_OK;
    case OPT_NIC:
        return rs_cli_take_cost("plan", "--nic-gbps", arg, &a->nic_gbps);
    case OPT_DESC:
        return rs_cli_take_cost("plan", "--descriptor-ns", arg,
                                &a->descriptor_ns);
    }
    return RS_CLI_USAGE;
}

static int parse_args(int argc, char **argv, plan_args_t *a)
{
    int rc = rs_cli_options("plan", argc, argv, long_opts, plan_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->capture == NULL)
        return usage_error("%s", "--capture FILE is required");
    if (a->nsources == 0)
        return usage_error("%s", "at least one --sources FILE is required");
    return RS_CLI_OK;
}

/* With --json the plan goes to stdout for a program; a person (or a log)
 * still learns on stderr why the exit status is 1. */
static void say_why_incomplete(rs_plan_h plan)
{
    size_t nfb = rs_plan_num_fallback(plan), nun = 0;
    const rs_uncovered_t *un = rs_plan_uncovered(plan, &nun);
    fprintf(stderr, "reshard plan: incomplete plan: %zu source(s) in "
            "fallback, %zu copy(ies) uncovered", nfb, nun);
    if (nfb > 0) {
        const char *src = NULL, *reason = NULL;
        rs_plan_fallback(plan, 0, &src, &reason);
        fprintf(stderr, "; first: '%s': %s", src, reason);
    } else if (nun > 0) {
        fprintf(stderr, "; first: copy %zu of '%s' into '%s'", un[0].copy,
                un[0].src, un[0].param);
    }
    fputc('\n', stderr);
}

static int build_and_print(const plan_args_t *a, rs_capture_h cap,
                           rs_sources_h src)
{
    rs_plan_params_t params;
    rs_plan_h plan = NULL;
    rs_diag_t diag;
    rs_status_t st;

    rs_diag_clear(&diag);
    rs_plan_params_init(&params);
    if (a->max_segments > 0)
        params.max_segments_per_copy = a->max_segments;
    params.only = a->only;
    params.nonly = a->nonly;
    params.replica_salt = a->salt;
    if (a->nic_gbps > 0)
        params.nic_gbps = a->nic_gbps;
    if (a->descriptor_ns > 0)
        params.descriptor_ns = a->descriptor_ns;
    if ((st = rs_plan_build(cap, src, &params, &diag, &plan)) != RS_OK)
        return rs_cli_input_error("plan", &diag, st, "planning");
    if (a->json)
        st = rs_plan_write_json(plan, stdout, &diag);
    else
        st = rs_plan_write_summary(plan, stdout, &diag);
    int rc = rs_plan_is_complete(plan) ? RS_CLI_OK : RS_CLI_INCOMPLETE;
    if (rc == RS_CLI_INCOMPLETE && a->json && st == RS_OK)
        say_why_incomplete(plan);
    rs_plan_destroy(plan);
    if (st != RS_OK)
        return rs_cli_input_error("plan", &diag, st, "writing the plan");
    return rc;
}

int rs_cli_plan(int argc, char **argv)
{
    plan_args_t a = {0};
    rs_capture_h cap = NULL;
    rs_sources_h src = NULL;
    int rc;

    /* Each list can hold at most one entry per argument. */
    a.sources = calloc((size_t)argc, sizeof(*a.sources));
    a.only = calloc((size_t)argc, sizeof(*a.only));
    if (a.sources == NULL || a.only == NULL) {
        fprintf(stderr, "reshard plan: out of memory\n");
        rc = RS_CLI_USAGE;
        goto free_args;
    }
    rc = parse_args(argc, argv, &a);
    if (rc < 0) {
        rc = RS_CLI_OK; /* --help */
        goto free_args;
    }
    if (rc != RS_CLI_OK)
        goto free_args;
    rc = rs_cli_load_inputs("plan", a.capture, a.sources, a.nsources, &cap,
                            &src);
    if (rc == RS_CLI_OK)
        rc = build_and_print(&a, cap, src);
    rs_sources_destroy(src);
    rs_capture_destroy(cap);
free_args:
    free(a.only);
    free(a.sources);
    return rc;
}
