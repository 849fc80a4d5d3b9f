/* Shared declarations of the reshard CLI: one entry point per verb, each in
 * its own file, all dispatched from main.c. The CLI uses only the public API. */
#ifndef RESHARD_TOOLS_CLI_H
#define RESHARD_TOOLS_CLI_H

/* Exit codes every verb follows. */
enum {
    RS_CLI_OK = 0,         /* the job is complete */
    RS_CLI_INCOMPLETE = 1, /* the job ran but its result is incomplete */
    RS_CLI_USAGE = 2,      /* bad usage or bad input; nothing was printed */
};

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard_layout/layout.h"
#include "reshard/reshard.h"

/* `reshard plan ...`; argv[0] is "plan". Returns the exit code. */
int rs_cli_plan(int argc, char **argv);

/* `reshard run ...`: plan and execute locally from shard files. */
int rs_cli_run(int argc, char **argv);

/* `reshard simulate ...`: plan a whole layout pair, move nothing. */
int rs_cli_simulate(int argc, char **argv);

/* `reshard publish ...`: serve one trainer rank's demo shards until released. */
int rs_cli_publish(int argc, char **argv);
/* `reshard cuts ...`: write the cut points an inference layout needs. */
int rs_cli_cuts(int argc, char **argv);

/* `reshard pull ...`: pull one inference rank from a directory. */
int rs_cli_pull(int argc, char **argv);

/* `reshard pull --dry-run`: runs the receiver's dry run of `version` and
 * prints what a pull would move (text, or one JSON line). RS_CLI_OK for a
 * complete plan, RS_CLI_INCOMPLETE for an incomplete one, RS_CLI_USAGE when
 * the dry run failed (the message on stderr). */
int rs_cli_pull_dry_run(rs_receiver_h recv, int64_t version, uint64_t rank,
                        int json);

/* `reshard pull --check` (pull_check.c): rebuilds what each parameter of
 * `cap` must hold at `version` (changed fraction fraction_q, 0 for the
 * plain contents: rs_cli_fill_box) independently of the transfer (the demo
 * contents of each source, the capture replayed over them locally) into
 * `expected` (one buffer per parameter, the parameter's size) and compares
 * `param` with it. 1 when every byte matches; else 0, the first wrong
 * parameter and byte (or why the replay failed) in err. */
int rs_cli_pull_check(rs_model_h model, rs_capture_h cap,
                      unsigned char **param, unsigned char **expected,
                      int64_t version, uint64_t fraction_q, char *err,
                      size_t errlen);

/* The pull's terminal ticker (pull_ticker.c): one line on stderr,
 * rewritten every 250 ms from a second in, with the wire's progress once
 * the executor reports it. Start returns NULL (no ticker) unless stdout is
 * a terminal; it times with rs_clock_seconds. Progress is the
 * receiver's progress callback, feeding the ticker in flight. Stop
 * ends it (NULL is fine) and returns 1 when it showed a line. */
typedef struct rs_cli_ticker rs_cli_ticker_t;
rs_cli_ticker_t *rs_cli_ticker_start(int64_t rank, int64_t version);
void rs_cli_ticker_progress(void *ctx, const rs_progress_t *p);
int rs_cli_ticker_stop(rs_cli_ticker_t *t);

/* `reshard release ...`: release or abandon a version in a directory. */
int rs_cli_release(int argc, char **argv);

/* `reshard demo ...`: trainers and inference ranks as processes, two versions. */
int rs_cli_demo(int argc, char **argv);

/* The rs_staging_t named by --staging ("caller", "in_place", "arena"),
 * or -1 (common.c). */
int rs_cli_staging(const char *name);

/* Demo contents (fill.c, docs/formats.md "Demo contents"): whether a dtype
 * can be filled (bf16, f16, f32, f64), and the fill of a row-major box
 * (offset, shape) of a full tensor into dst at `version`; fraction_q is
 * the changed fraction F as floor(F * 2^32) (1 .. 2^32), 0 for the plain
 * contents. RS_ERR_UNSUPPORTED for other dtypes. */
int rs_cli_fill_supported(rs_dtype_t dtype);
rs_status_t rs_cli_fill_box(const char *tensor, rs_dtype_t dtype,
                            int64_t version, uint64_t fraction_q, int ndim,
                            const int64_t *full_shape, const int64_t *offset,
                            const int64_t *shape, void *dst);
/* The decimal text of a changed fraction F in (0, 1] (digits with at most
 * 18 after an optional point) as floor(F * 2^32) into *q; 0 when s is no
 * such number or F is below 2^-32. */
int rs_cli_parse_fraction(const char *s, uint64_t *q);
/* Takes --changed-fraction's value into *q (rs_cli_parse_fraction), else
 * a usage error naming the flag and the value (RS_CLI_USAGE). */
int rs_cli_take_fraction(const char *verb, const char *arg, uint64_t *q);

/* The help text of --changed-fraction, for verbs whose options are aligned
 * at column 22 (publish, pull), ending with the verb's own words `last`. */
#define RS_CLI_FRACTION_HELP(last)                                          \
    "  --changed-fraction F demo contents where each version changes about\n" \
    "                      a fraction F (0 < F <= 1, decimal, e.g. 0.02) of\n" \
    "                      every tensor's elements, deterministically; the\n" \
    "                      others keep their bytes (docs/formats.md, \"Demo\n" \
    "                      contents\"). " last "\n"

/* Loads a config.json and parses and checks a layout (given as option
 * `opt`) against it; want_vllm says which side the layout must be. Prints the error and returns
 * RS_CLI_USAGE on failure (*model_p may then need destroying). */
int rs_cli_load_layout(const char *verb, const char *opt, const char *config,
                       const char *spec, int want_vllm, rs_model_h *model_p,
                       rs_layout_t *layout_p);

/* Prints "reshard VERB: <fmt with what>" and the --help hint to stderr;
 * returns RS_CLI_USAGE. */
int rs_cli_usage_error(const char *verb, const char *fmt, const char *what);

struct option;
/* Takes one parsed option (its getopt code and argument) into `args`;
 * returns RS_CLI_OK or an exit code. */
typedef int (*rs_cli_take_cb)(void *args, int opt, const char *arg);

/* The option loop every verb shares: -h/--help prints usage and returns
 * -1; a missing argument, an unknown option or a leftover positional
 * argument is a usage error naming it; every other option goes to take. */
int rs_cli_options(const char *verb, int argc, char **argv,
                   const struct option *opts, void (*usage)(FILE *out),
                   rs_cli_take_cb take, void *args);

/* Digits only: no sign, no blanks, no suffix; 0 on anything else. */
int rs_cli_parse_u64(const char *s, uint64_t *out);
/* A positive finite number (strtod syntax, nothing after it); 0 else. */
int rs_cli_parse_positive(const char *s, double *out);

/* The cost model's options, shared by plan, pull and simulate. */
#define RS_CLI_COST_USAGE                                                     \
    "  --nic-gbps G          NIC rate (Gb/s) the planner's cost model assumes\n" \
    "                        for every session; default 400\n"                \
    "  --descriptor-ns N     cost of one read descriptor (ns: posting plus the\n" \
    "                        NIC's per-message work) in the cost model;\n"   \
    "                        default 100\n"

/* Takes the value of a cost-model flag (--nic-gbps, --descriptor-ns): a
 * positive finite number into *out and RS_CLI_OK, else a usage error
 * naming the flag and the value (RS_CLI_USAGE). */
int rs_cli_take_cost(const char *verb, const char *flag, const char *arg,
                     double *out);

/* Takes the value of --staging-budget: a size (rs_parse_bytes) above 0,
 * or "unbounded" (RS_STAGING_UNBOUNDED); else a usage error naming the
 * value (RS_CLI_USAGE). */
int rs_cli_take_budget(const char *verb, const char *arg, uint64_t *out);
/* The same for any size flag: a size (0 too with zero_ok), or "unbounded"
 * (`unbounded`). */
int rs_cli_take_size(const char *verb, const char *flag, const char *arg,
                     int zero_ok, uint64_t unbounded, uint64_t *out);

/* The help text of --staging-budget, for verbs whose options are aligned
 * at column 22 (pull). */
#define RS_CLI_BUDGET_HELP                                                  \
    "  --staging-budget B  the most staging (staged reads, converts,\n"      \
    "                      quantized boxes) held at once, e.g. 256MiB; a\n"  \
    "                      plan staging more runs in rounds that share it.\n" \
    "                      Default 1GiB (or the largest single box), a box\n" \
    "                      above an explicit budget is refused;\n"          \
    "                      'unbounded': every box at once\n"

/* Takes the value of a count flag (--rank, --versions, ...): a
 * non-negative integer up to INT64_MAX / 2 into *out and RS_CLI_OK, else a
 * usage error naming the flag and the value (RS_CLI_USAGE). */
int rs_cli_take_count(const char *verb, const char *flag, const char *arg,
                      uint64_t *out);

/* Prints "reshard VERB: <diag message>" (or what + status) and returns
 * RS_CLI_USAGE. */
int rs_cli_input_error(const char *verb, const rs_diag_t *diag, rs_status_t st,
                       const char *what);

/* Loads a capture and merges shard-table files; on failure prints the
 * loader's message and returns RS_CLI_USAGE (outputs may then hold partial
 * objects the caller destroys). */
int rs_cli_load_inputs(const char *verb, const char *capture,
                       const char **sources, size_t nsources,
                       rs_capture_h *cap_p, rs_sources_h *src_p);

#endif
