/* Helpers every verb shares: integer options and loading the inputs. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "cli.h"

int rs_cli_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (s[0] < '0' || s[0] > '9')
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return 0;
    *out = (uint64_t)v;
    return 1;
}

int rs_cli_parse_positive(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || !(v > 0))
        return 0;
    *out = v;
    return 1;
}

int rs_cli_take_cost(const char *verb, const char *flag, const char *arg,
                     double *out)
{
    char msg[128];
    if (rs_cli_parse_positive(arg, out))
        return RS_CLI_OK;
    snprintf(msg, sizeof(msg), "%s must be a positive number, got '%.60s'",
             flag, arg);
    return rs_cli_usage_error(verb, "%s", msg);
}

int rs_cli_take_size(const char *verb, const char *flag, const char *arg,
                     int zero_ok, uint64_t unbounded, uint64_t *out)
{
    char msg[256];
    if (strcmp(arg, "unbounded") == 0) {
        *out = unbounded;
        return RS_CLI_OK;
    }
    if (rs_parse_bytes(arg, out) == RS_OK && (zero_ok || *out > 0))
        return RS_CLI_OK;
    snprintf(msg, sizeof(msg), "%.40s must be a size%s (bytes, or with KiB, "
             "MiB, GiB, TiB) or 'unbounded', got '%.60s'", flag,
             zero_ok ? "" : " above 0", arg);
    return rs_cli_usage_error(verb, "%s", msg);
}

int rs_cli_take_budget(const char *verb, const char *arg, uint64_t *out)
{
    return rs_cli_take_size(verb, "--staging-budget", arg, 0,
                            RS_STAGING_UNBOUNDED, out);
}

int rs_cli_take_count(const char *verb, const char *flag, const char *arg,
                      uint64_t *out)
{
    char fmt[128];
    if (rs_cli_parse_u64(arg, out) && *out <= INT64_MAX / 2)
        return RS_CLI_OK;
    snprintf(fmt, sizeof(fmt), "%.60s must be a non-negative integer, got "
             "'%%s'", flag);
    return rs_cli_usage_error(verb, fmt, arg);
}

int rs_cli_input_error(const char *verb, const rs_diag_t *diag, rs_status_t st,
                       const char *what)
{
    if (diag->msg[0] != '\0')
        fprintf(stderr, "reshard %s: %s\n", verb, diag->msg);
    else
        fprintf(stderr, "reshard %s: %s: %s\n", verb, what, rs_status_str(st));
    return RS_CLI_USAGE;
}

int rs_cli_load_inputs(const char *verb, const char *capture,
                       const char **sources, size_t nsources,
                       rs_capture_h *cap_p, rs_sources_h *src_p)
{
    rs_diag_t diag;
    rs_status_t st;

    rs_diag_clear(&diag);
    if ((st = rs_capture_load_file(capture, &diag, cap_p)) != RS_OK)
        return rs_cli_input_error(verb, &diag, st, capture);
    if ((st = rs_sources_create(src_p)) != RS_OK)
        return rs_cli_input_error(verb, &diag, st, "creating sources");
    for (size_t i = 0; i < nsources; i++) {
        rs_diag_clear(&diag);
        st = rs_sources_load_file(*src_p, sources[i], &diag);
        if (st != RS_OK)
            return rs_cli_input_error(verb, &diag, st, sources[i]);
    }
    return RS_CLI_OK;
}

int rs_cli_usage_error(const char *verb, const char *fmt, const char *what)
{
    fprintf(stderr, "reshard %s: ", verb);
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nTry 'reshard %s --help'.\n", verb);
    return RS_CLI_USAGE;
}

int rs_cli_options(const char *verb, int argc, char **argv,
                   const struct option *opts, void (*usage)(FILE *out),
                   rs_cli_take_cb take, void *args)
{
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c == ':')
            return rs_cli_usage_error(verb, "option '%s' needs an argument",
                                      argv[optind - 1]);
        if (c == '?')
            return rs_cli_usage_error(verb, "unknown option '%s'",
                                      argv[optind - 1]);
        if ((rc = take(args, c, optarg)) != RS_CLI_OK)
            return rc;
    }
    if (optind < argc)
        return rs_cli_usage_error(verb, "unexpected argument '%s'",
                                  argv[optind]);
    return RS_CLI_OK;
}

int rs_cli_staging(const char *name)
{
    static const char *const names[] = {"caller", "in_place", "arena"};
    static const int modes[] = {RS_STAGING_CALLER, RS_STAGING_IN_PLACE,
                                RS_STAGING_ARENA};
    for (size_t i = 0; name != NULL && i < 3; i++)
        if (strcmp(name, names[i]) == 0)
            return modes[i];
    return -1;
}
