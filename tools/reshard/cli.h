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
#include "reshard/reshard.h"

/* `reshard plan ...`; argv[0] is "plan". Returns the exit code. */
int rs_cli_plan(int argc, char **argv);

/* `reshard run ...`: plan and execute locally from shard files. */
int rs_cli_run(int argc, char **argv);

/* `reshard simulate ...`: plan a whole layout pair, move nothing. */
int rs_cli_simulate(int argc, char **argv);

/* Digits only: no sign, no blanks, no suffix; 0 on anything else. */
int rs_cli_parse_u64(const char *s, uint64_t *out);

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
