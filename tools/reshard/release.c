/* `reshard release`: releases a version of a model in a directory, so its
 * publishers stop serving it, or abandons one (released whatever its
 * leases, for versions whose publishers or receivers died). A refusal names
 * the lease holder; --timeout retries refusals and directory outages. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct rel_args {
    const char *directory, *model;
    uint64_t version;
    double timeout_s;
    int have_version, abandon;
} rel_args_t;

enum { OPT_DIRECTORY = 256, OPT_MODEL, OPT_VERSION, OPT_ABANDON,
       OPT_TIMEOUT };

static const struct option long_opts[] = {
    {"directory", required_argument, NULL, OPT_DIRECTORY},
    {"model", required_argument, NULL, OPT_MODEL},
    {"version", required_argument, NULL, OPT_VERSION},
    {"abandon", no_argument, NULL, OPT_ABANDON},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void rel_usage(FILE *out)
{
    fprintf(out,
        "usage: reshard release --directory D --model M --version V [--abandon]\n"
        "                       [--timeout S]\n"
        "\n"
        "Releases version V of model M: its publishers stop serving it and its\n"
        "tables are removed. A release is refused while a receiver holds a live\n"
        "lease on the version. --abandon releases it whatever its leases (they\n"
        "are dropped): for a version whose publishers or receivers died.\n"
        "\n"
        "options:\n"
        "  --directory D   file:DIR (must exist) or redis://[:password@]host:port\n"
        "                  [?timeout=S&password_file=F] (or RESHARD_REDIS_PASSWORD)\n"
        "  --model M       model name in the directory\n"
        "  --version V     the version (>= 0)\n"
        "  --abandon       release even while leases are live\n"
        "  --timeout S     retry a refused release and ride out directory outages\n"
        "                  for up to S seconds (default 0: one attempt)\n"
        "  -h, --help      show this help and exit\n"
        "\n"
        "messages (stdout on success, stderr otherwise):\n"
        "  released version V of 'M'\n"
        "  abandoned version V of 'M' (N live leases dropped)\n"
        "  version V of 'M' cannot be released: leased by 'H' for T s more ...\n"
        "\n"
        "exit status: 0 released or abandoned (or already released); 1 refused\n"
        "(a live lease, naming its holder) or the directory could not be reached\n"
        "in time; 2 bad usage or input (no such version, no such directory).\n");
}

static int usage_error(const char *fmt, const char *what)
{
    return rs_cli_usage_error("release", fmt, what);
}

static int take_option(void *args, int c, const char *arg)
{
    rel_args_t *a = args;
    char *end;
    switch (c) {
    case OPT_DIRECTORY: a->directory = arg; return RS_CLI_OK;
    case OPT_MODEL: a->model = arg; return RS_CLI_OK;
    case OPT_ABANDON: a->abandon = 1; return RS_CLI_OK;
    case OPT_VERSION:
        a->have_version = 1;
        if (!rs_cli_parse_u64(arg, &a->version) || a->version > INT64_MAX / 2)
            return usage_error("--version must be a non-negative integer, "
                               "got '%s'", arg);
        return RS_CLI_OK;
    case OPT_TIMEOUT:
        a->timeout_s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(a->timeout_s >= 0) ||
            a->timeout_s > 1e7)
            return usage_error("--timeout must be a number of seconds >= 0, "
                               "got '%s'", arg);
        return RS_CLI_OK;
    default: return usage_error("%s", "unknown option");
    }
}

static int parse_args(int argc, char **argv, rel_args_t *a)
{
    int rc = rs_cli_options("release", argc, argv, long_opts, rel_usage,
                            take_option, a);
    if (rc != RS_CLI_OK)
        return rc;
    if (a->directory == NULL || a->model == NULL || !a->have_version)
        return usage_error("%s", "--directory, --model and --version are "
                           "required");
    return RS_CLI_OK;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One attempt; *dropped_p counts the leases an abandon dropped. */
static rs_status_t attempt(const rel_args_t *a, rs_dir_h dir, rs_diag_t *diag,
                           size_t *dropped_p)
{
    rs_diag_clear(diag);
    if (a->abandon)
        return rs_dir_abandon(dir, a->model, (int64_t)a->version, diag,
                              dropped_p);
    return rs_dir_release(dir, a->model, (int64_t)a->version, diag);
}

/* Attempts until done, a permanent failure, or the deadline. */
static int release(const rel_args_t *a, rs_dir_h dir)
{
    rs_diag_t diag;
    size_t dropped = 0;
    double deadline = rs_clock_seconds() + a->timeout_s, delay = 0.05;
    rs_status_t st;
    while ((st = attempt(a, dir, &diag, &dropped)) != RS_OK) {
        int retry = st == RS_ERR_INCOMPLETE || rs_dir_transient(dir);
        if (!retry || rs_clock_seconds() >= deadline)
            break;
        nap(fmin(delay, deadline - rs_clock_seconds()));
        delay = fmin(delay * 2, 1.0);
    }
    if (st == RS_OK && a->abandon)
        printf("reshard release: abandoned version %llu of '%s' (%zu live "
               "lease%s dropped)\n", (unsigned long long)a->version, a->model,
               dropped, dropped == 1 ? "" : "s");
    else if (st == RS_OK)
        printf("reshard release: released version %llu of '%s'\n",
               (unsigned long long)a->version, a->model);
    if (st == RS_OK)
        return RS_CLI_OK;
    fprintf(stderr, "reshard release: %s: %s%s\n", rs_dir_name(dir),
            diag.msg[0] ? diag.msg : rs_status_str(st),
            st == RS_ERR_INCOMPLETE && !a->abandon
                ? " (--abandon releases it anyway)" : "");
    return st == RS_ERR_INPUT || st == RS_ERR_INVALID_ARG ? RS_CLI_USAGE
                                                          : RS_CLI_INCOMPLETE;
}

int rs_cli_release(int argc, char **argv)
{
    rel_args_t a;
    rs_dir_params_t dp;
    rs_diag_t diag;
    rs_dir_h dir = NULL;
    memset(&a, 0, sizeof(a));
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return RS_CLI_OK;
    if (rc != RS_CLI_OK)
        return rc;
    rs_dir_params_init(&dp);
    dp.create = 0;        /* a mistyped file: path is never created */
    dp.connect_later = 1; /* unreachable now: retried within --timeout */
    rs_diag_clear(&diag);
    rs_status_t st = rs_dir_open_params(a.directory, &dp, &diag, &dir);
    if (st != RS_OK) {
        char shown[512];
        rs_dir_redact_url(a.directory, shown, sizeof(shown));
        fprintf(stderr, "reshard release: %s: %s\n", shown,
                diag.msg[0] ? diag.msg : rs_status_str(st));
        return st == RS_ERR_INPUT || st == RS_ERR_INVALID_ARG
                   ? RS_CLI_USAGE : RS_CLI_INCOMPLETE;
    }
    rc = release(&a, dir);
    rs_dir_close(dir);
    return rc;
}
