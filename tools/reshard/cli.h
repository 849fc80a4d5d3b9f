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

/* `reshard plan ...`; argv[0] is "plan". Returns the exit code. */
int rs_cli_plan(int argc, char **argv);

#endif
