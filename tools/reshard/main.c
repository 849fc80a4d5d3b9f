/* reshard: the command-line front end. Dispatches to one verb per file
 * (plan, simulate, run, cuts, publish, pull, release, demo) and answers --help and --version itself. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "reshard/reshard.h"

typedef struct verb {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} verb_t;

static const verb_t verbs[] = {
    {"plan", rs_cli_plan,
     "intersect a capture with published shard tables and print the plan"},
    {"simulate", rs_cli_simulate,
     "plan every inference rank of a layout pair and report the cost"},
    {"run", rs_cli_run,
     "plan and execute on this machine from shard files, then verify"},
    {"cuts", rs_cli_cuts,
     "write the cut points an inference layout needs (reshard.cuts.v1)"},
    {"publish", rs_cli_publish,
     "serve one trainer rank's shards through a directory until released"},
    {"pull", rs_cli_pull,
     "pull one inference rank's parameters from a directory"},
    {"release", rs_cli_release,
     "release a version (or abandon one whose publishers died)"},
    {"demo", rs_cli_demo,
     "trainer and inference processes move two versions, then verify"},
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

static void usage(FILE *out)
{
    fprintf(out,
            "usage: reshard <command> [options]\n"
            "       reshard --help | --version\n"
            "\n"
            "Moves a model version from trainer ranks to inference ranks with a\n"
            "different parallel layout, reading exact byte runs.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(out, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out,
            "\n"
            "options:\n"
            "  -h, --help     show this help and exit\n"
            "  -V, --version  print the version and exit\n"
            "\n"
            "Run 'reshard <command> --help' for the options of a command.\n"
            "Exit codes: 0 complete, 1 incomplete result, 2 bad usage or input.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return RS_CLI_USAGE;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0 ||
        strcmp(arg, "help") == 0) {
        usage(stdout);
        return RS_CLI_OK;
    }
    if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
        printf("reshard %s\n", rs_version_string());
        return RS_CLI_OK;
    }
    for (size_t i = 0; i < NVERBS; i++) {
        if (strcmp(arg, verbs[i].name) == 0)
            return verbs[i].run(argc - 1, argv + 1);
    }
    if (arg[0] == '-')
        fprintf(stderr, "reshard: unknown option '%s'\n", arg);
    else
        fprintf(stderr, "reshard: unknown command '%s'\n", arg);
    fprintf(stderr, "Try 'reshard --help'.\n");
    return RS_CLI_USAGE;
}
