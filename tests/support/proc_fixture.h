/* Trainer ranks as separate processes for the integration tests. A test
 * starts its own binary again (fork + exec: UCX is not fork-safe once the
 * parent has a context) as `--publisher ARG|CMD_FD[|ACK_FD]`; the child
 * publishes a model's shards for one rank and serves them until the parent
 * closes the command pipe. The parent waits on the child with a bounded
 * wait, kills and reaps it, also from a teardown after a failed assertion. */
#ifndef RS_TEST_PROC_FIXTURE_H
#define RS_TEST_PROC_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "reshard/reshard.h"

/* ---- the parent's side ---------------------------------------------------- */

typedef struct pfx_proc {
    pid_t pid;  /* 0 when not running */
    int cmd;    /* write end: a byte per command, closing it ends the child */
    int ack;    /* read end of the child's acknowledgements, or -1 */
    int status; /* waitpid's status once reaped */
} pfx_proc_t;

enum {
    PFX_ACK = 1,         /* a second pipe: its write end is ARG's last field */
    PFX_UCX_QUIET = 2,   /* UCX_HANDLE_ERRORS=none: a dead peer is an error,
                          * not a backtrace or a freeze */
};

/* Starts `/proc/self/exe --publisher ARG|CMD_FD[|ACK_FD]`; child_setup, when
 * not NULL, runs in the child just before the exec. Fails the test when the
 * pipes or the fork fail. */
void pfx_start(pfx_proc_t *p, const char *arg, unsigned flags,
               void (*child_setup)(void));

/* Waits up to ms milliseconds for one byte on the ack pipe: 1 when it came. */
int pfx_await_ack(const pfx_proc_t *p, int ms);

/* Sends one command byte: 0 once written, -1 otherwise. */
int pfx_send(const pfx_proc_t *p, unsigned char c);

/* Kills the child first when asked (SIGKILL), closes its pipes and reaps it,
 * keeping its status; does nothing when it is not running. */
void pfx_stop(pfx_proc_t *p, int kill_it);

/* ---- the child's side ------------------------------------------------------ */

/* What one publisher process publishes: pp is filled by the caller
 * (directory, model, rank, replica, backend, ...); world comes from the
 * layout. */
typedef struct pfx_publish {
    const char *config;   /* the model config file */
    const char *train;    /* the trainer layout */
    int64_t first;        /* the version published first */
    int cmd_fd;           /* commands; end of file: unpublish and return */
    int ack_fd;           /* >= 0: one byte 'p' once `first` is published */
    int next_versions;    /* each command byte is a version to publish next */
    int own_pages;        /* every shard in its own pages (pfx_shards_unmap) */
} pfx_publish_t;

/* Splits `arg` (copied into buf) at '|' into n fields: 0, or -1 when it
 * has fewer. */
int pfx_fields(const char *arg, char *buf, size_t len, char **f, int n);

/* The publisher process: loads the model and layout, registers rank
 * pp->rank's shards (filled as vllm_direct.h expects), publishes and
 * serves until the command pipe closes. Dies with its parent. Returns the
 * process's exit code: 0, or 2 (model or layout), 3 (create), 4 (register
 * or publish), 5 (ack). */
int pfx_publisher_main(const pfx_publish_t *s, rs_publisher_params_t *pp);

/* Makes every shard of an own_pages publisher unreadable (PROT_NONE):
 * async-signal-safe, for a signal handler. */
void pfx_shards_unreadable(void);

/* ---- the world's files and transport -------------------------------------- */

/* `$RESHARD_SOURCE_DIR/examples/models/<file>` (the source dir defaults
 * to "."). */
void pfx_model_path(char *out, size_t n, const char *file);

/* Removes a temporary folder and what it holds; accepts an empty name. */
void pfx_remove_tmp(const char *tmp);

/* UCX_TLS=tls, on the loopback device for tcp. */
void pfx_use_tls(const char *tls);

#endif
