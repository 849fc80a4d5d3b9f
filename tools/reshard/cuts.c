/* `reshard cuts`: the cut points an inference layout needs, as a
 * reshard.cuts.v1 file for `reshard publish --cuts` (or any publisher's
 * cuts_file): the union of the cuts of every inference rank's capture of a
 * model config and vllm layout (rs_layout_capture), or of capture files. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reshard/cuts.h"

typedef struct cuts_args {
    const char *config, *infer, *out, *model;
    char **captures;
    int ncaptures;
} cuts_args_t;

enum { OPT_CONFIG = 256, OPT_INFER, OPT_MODEL };

static const struct option long_opts[] = {
    {"model-config", required_argument, NULL, OPT_CONFIG},
    {"infer", required_argument, NULL, OPT_INFER},
    {"model", required_argument, NULL, OPT_MODEL},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void cuts_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard cuts --model-config CONFIG.json --infer LAYOUT\n"
        "                    [--model M] [-o FILE]\n"
        "       reshard cuts CAPTURE.json... [--model M] [-o FILE]\n"
        "\n"
        "Writes the cut points (reshard.cuts.v1, docs/formats.md) where the\n"
        "boxes an inference layout reads begin and end: the union over every\n"
        "rank of LAYOUT (vllm:tp=T,pp=P,ep=E,dp=D) of CONFIG.json, or over the\n"
        "given capture files. `reshard publish --cuts FILE` serves its shards\n"
        "cut at them, so each rank's slices are a few whole runs.\n"
        "\n"
        "options:\n"
        "  --model-config FILE a Hugging Face config.json (examples/models/)\n"
        "  --infer LAYOUT      the inference layout whose ranks are cut for\n"
        "  --model M           the model name the file states (optional; a\n"
        "                      publisher of another model refuses the file)\n"
        "  -o, --output FILE   write there instead of standard output\n"
        "  -h, --help          show this help and exit\n"
        "\n"
        "exit status: 0 written; 2 bad usage or input.\n");
}

static int take_option(void *args, int c, const char *arg)
{
    cuts_args_t *a = args;
    switch (c) {
    case OPT_CONFIG: a->config = arg; return RS_CLI_OK;
    case OPT_INFER: a->infer = arg; return RS_CLI_OK;
    case OPT_MODEL: a->model = arg; return RS_CLI_OK;
    case 'o': a->out = arg; return RS_CLI_OK;
    default: return rs_cli_usage_error("cuts", "%s", "unknown option");
    }
}

static int fail(rs_status_t st, const rs_diag_t *diag, const char *what)
{
    fprintf(stderr, "reshard cuts: %s: %s\n", what,
            diag->msg[0] ? diag->msg : rs_status_str(st));
    return RS_CLI_USAGE;
}

/* Every rank of the layout: its capture's cuts into `cuts`. */
static int add_layout(const cuts_args_t *a, rs_cuts_h cuts)
{
    rs_model_h model = NULL;
    rs_layout_t layout;
    rs_diag_t diag;
    int rc = rs_cli_load_layout("cuts", "--infer", a->config, a->infer, 1,
                                &model, &layout);
    for (int64_t r = 0; rc == RS_CLI_OK && r < layout.world; r++) {
        rs_capture_h cap = NULL;
        uint64_t padding = 0;
        char what[64];
        rs_diag_clear(&diag);
        snprintf(what, sizeof(what), "inference rank %lld", (long long)r);
        rs_status_t st = rs_layout_capture(model, &layout, r, &diag, &cap,
                                           &padding);
        if (st == RS_OK)
            st = rs_cuts_add_capture(cuts, cap, &diag);
        rs_capture_destroy(cap);
        if (st != RS_OK)
            rc = fail(st, &diag, what);
    }
    rs_model_destroy(model);
    return rc;
}

static int add_captures(const cuts_args_t *a, rs_cuts_h cuts)
{
    rs_diag_t diag;
    for (int i = 0; i < a->ncaptures; i++) {
        rs_capture_h cap = NULL;
        rs_diag_clear(&diag);
        rs_status_t st = rs_capture_load_file(a->captures[i], &diag, &cap);
        if (st == RS_OK)
            st = rs_cuts_add_capture(cuts, cap, &diag);
        rs_capture_destroy(cap);
        if (st != RS_OK)
            return fail(st, &diag, a->captures[i]);
    }
    return RS_CLI_OK;
}

static int write_out(const cuts_args_t *a, rs_cuts_h cuts)
{
    rs_diag_t diag;
    FILE *f = a->out != NULL ? fopen(a->out, "w") : stdout;
    if (f == NULL) {
        fprintf(stderr, "reshard cuts: cannot write %s\n", a->out);
        return RS_CLI_USAGE;
    }
    rs_diag_clear(&diag);
    rs_status_t st = rs_cuts_write_json(cuts, f, &diag);
    int closed = f != stdout ? fclose(f) : fflush(stdout);
    if (st == RS_OK && closed != 0) {
        fprintf(stderr, "reshard cuts: cannot write %s\n",
                a->out ? a->out : "stdout");
        return RS_CLI_USAGE;
    }
    return st == RS_OK ? RS_CLI_OK
                       : fail(st, &diag, a->out ? a->out : "stdout");
}

static int check_args(const cuts_args_t *a)
{
    int layout = a->config != NULL || a->infer != NULL;
    if (layout && (a->config == NULL || a->infer == NULL))
        return rs_cli_usage_error("cuts", "%s", "--model-config and --infer "
                                  "go together");
    if (layout == (a->ncaptures > 0))
        return rs_cli_usage_error("cuts", "%s", "give either --model-config "
                                  "and --infer, or capture files");
    return RS_CLI_OK;
}

/* The options, with capture files as operands (rs_cli_options takes
 * none); -1 after --help. */
static int parse(int argc, char **argv, cuts_args_t *a)
{
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":ho:", long_opts, NULL)) != -1) {
        if (c == 'h') {
            cuts_usage(stdout);
            return -1;
        }
        if (c == ':')
            return rs_cli_usage_error("cuts", "option '%s' needs an "
                                      "argument", argv[optind - 1]);
        if (c == '?')
            return rs_cli_usage_error("cuts", "unknown option '%s'",
                                      argv[optind - 1]);
        if ((rc = take_option(a, c, optarg)) != RS_CLI_OK)
            return rc;
    }
    a->captures = argv + optind;
    a->ncaptures = argc - optind;
    return RS_CLI_OK;
}

int rs_cli_cuts(int argc, char **argv)
{
    cuts_args_t a;
    rs_cuts_h cuts = NULL;
    rs_diag_t diag;
    memset(&a, 0, sizeof(a));
    int rc = parse(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    if (rc == RS_CLI_OK)
        rc = check_args(&a);
    rs_diag_clear(&diag);
    if (rc == RS_CLI_OK && rs_cuts_create(&diag, &cuts) != RS_OK)
        rc = fail(RS_ERR_NO_MEMORY, &diag, "cuts");
    if (rc == RS_CLI_OK && a.model != NULL &&
        rs_cuts_set_model(cuts, a.model, &diag) != RS_OK)
        rc = fail(RS_ERR_NO_MEMORY, &diag, "--model");
    if (rc == RS_CLI_OK)
        rc = a.ncaptures > 0 ? add_captures(&a, cuts) : add_layout(&a, cuts);
    if (rc == RS_CLI_OK)
        rc = write_out(&a, cuts);
    rs_cuts_destroy(cuts);
    return rc;
}
