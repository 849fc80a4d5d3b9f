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
#include "reshard_layout/layout.h"

/* ---- the parent's side -------------------------------------------------- */

typedef struct pfx_proc {
    pid_t pid;  /* 0 when not running */
    int cmd;    /* write end: a byte per command, closing it ends the child */
    int ack;    /* read end of the child's acknowledgements, or -1 */
    int status; /* waitpid's status once reaped */
} pfx_proc_t;

/* What one publisher process publishes, and how it talks to the test. */
typedef struct pfx_publish {
    const char *config;    /* the model config file */
    const char *train;     /* the trainer layout */
    const char *directory;
    const char *model;     /* the model's name in the directory */
    const char *backend;
    int64_t rank, replica;
    int64_t first;         /* the version published first */
    unsigned flags;        /* PFX_* */
    int cmd_fd, ack_fd;    /* the child's ends of the pipes (-1: none) */
    /* In the test, just before the exec (the environment a sanitizer
     * reads at start), when not NULL. */
    void (*before_exec)(void);
} pfx_publish_t;

enum {
    PFX_ACK_PIPE = 1 << 0,      /* a second pipe, child to test */
    PFX_ACK_PUBLISHED = 1 << 1, /* one byte 'p' on it once `first` is out */
    PFX_UCX_QUIET = 1 << 2,     /* UCX_HANDLE_ERRORS=none: a dead peer is an
                                 * error, not a backtrace or a freeze */
    PFX_NEXT_VERSIONS = 1 << 3, /* a command byte is a version to publish
                                 * (with PFX_ACK_PUBLISHED, acknowledged
                                 * once published) */
    PFX_OWN_PAGES = 1 << 4,     /* every shard in its own pages, so that
                                 * pfx_shards_unreadable can protect them */
    PFX_QUANTIZE_WANTED = 1 << 5, /* arena staging, quantized copies served */
};

/* Starts `/proc/self/exe --publisher ARG`, ARG encoding s with the pipes'
 * child ends. Fails the test when a pipe or the fork fails. */
void pfx_start(pfx_proc_t *p, const pfx_publish_t *s);

/* Waits up to ms milliseconds for one byte on the ack pipe: 1 when it came. */
int pfx_await_ack(const pfx_proc_t *p, int ms);

/* Sends one command byte: 0 once written, -1 otherwise. */
int pfx_send(const pfx_proc_t *p, unsigned char c);

/* Kills the child first when asked (SIGKILL), closes its pipes and reaps it,
 * keeping its status; does nothing when it is not running. */
void pfx_stop(pfx_proc_t *p, int kill_it);

/* ---- the child's side --------------------------------------------------- */

/* 1 when this process was started by pfx_start (argv is `--publisher ARG`). */
int pfx_is_publisher(int argc, char **argv);

/* The publisher process, from pfx_start's ARG: `prepare` (when not NULL)
 * sees what it will publish first; then it loads the model and layout,
 * registers its rank's shards (filled as vllm_direct.h expects), publishes
 * and serves until the command pipe closes. Dies with its parent. Returns
 * the process's exit code: 0, or 2 (argument, model or layout), 3
 * (create), 4 (register or publish), 5 (ack). */
int pfx_publisher_main(const char *arg, void (*prepare)(const pfx_publish_t *));

/* Makes every shard of a PFX_OWN_PAGES publisher unreadable (PROT_NONE):
 * async-signal-safe, for a signal handler. */
void pfx_shards_unreadable(void);

/* ---- the world ---------------------------------------------------------- */

/* What the test process and its publishers share: a model from
 * examples/models, its trainer and inference layouts, a fresh folder and
 * a file: directory in it. */
typedef struct pfx_world {
    char config[1024];    /* the model config file */
    char tmp[64];         /* the folder, or "" */
    char directory[512];  /* file:<tmp>, unless the test sets another */
    const char *train_text;
    rs_model_h model;
    rs_layout_t train, infer;
} pfx_world_t;

/* Loads examples/models/<model_file> (RESHARD_SOURCE_DIR, or "."), parses
 * and checks the layouts (train may be NULL: pfx_world_train later) and,
 * when tag is not NULL, makes /tmp/rs-<tag>-XXXXXX with its directory.
 * 0, or -1 with the reason on stderr: for a cmocka setup. */
int pfx_world_open(pfx_world_t *w, const char *model_file, const char *train,
                   const char *infer, const char *tag);

/* Parses and checks the trainer layout; fails the test when it is bad. */
void pfx_world_train(pfx_world_t *w, const char *train);

/* Destroys the model and removes the folder; accepts a partial open. */
void pfx_world_close(pfx_world_t *w);

/* UCX_TLS=tls, on the loopback device for tcp. */
void pfx_use_tls(const char *tls);

#endif
