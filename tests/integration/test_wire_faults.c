/* A publisher that fails inside the wire stage fails the pull. Two trainer
 * processes publish a tiny model over UCX (tcp on loopback, and shared
 * memory); this process pulls it as one inference rank with a small
 * progress chunk, and its progress callback strikes trainer 1 at a chosen
 * point of the wire stage (after the first chunk, halfway, near the end):
 * either killed outright (SIGKILL, reaped before the next chunk is read)
 * or made to crash while serving the next get (its shard memory is made
 * unreadable, so its progress thread faults on the reply it is sending).
 * Each case asserts: the pull fails with a transport error or timeout
 * naming trainer 1 and its slot, install is not called, the bound
 * parameters keep their prior bytes, and UCX printed no line of its own
 * during the pull.
 * A third way of striking freezes trainer 1 (SIGSTOP: its gets stay in
 * flight) and kills it while the pull waits on them. A pull with no fault is the control:
 * byte-exact against an independent build of vLLM's loaders, digests
 * verified by default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "proc_fixture.h"
#include "rank_fixture.h"

#define TRAIN "megatron:tp=2"
#define INFER "vllm:tp=1"
#define MODEL "tiny"
#define VICTIM 1
#define CHUNK_BYTES (16u << 10)
/* Over shared memory a dead peer is only noticed by the wait's timeout. */
#define WAIT_TIMEOUT_S 3.0
#define ACK_WAIT_MS 20000

enum { STRIKE_NONE, STRIKE_KILL, STRIKE_CRASH, STRIKE_FREEZE_KILL };
/* A frozen publisher is killed this long after the strike, while the
 * pull's next gets wait on it (the outcome does not depend on when). */
#define FREEZE_KILL_US 300000
enum { AT_FIRST, AT_MIDDLE, AT_END };

typedef struct world {
    pfx_world_t pw;
    pfx_proc_t pubs[2]; /* ack: the publisher's "memory is gone" byte */
} world_t;

static world_t world;

/* ---- the publisher (a fresh process: UCX is not fork-safe) ------------- */

static int pub_ack_fd = -1;

/* Makes every shard unreadable, then says so. Only async-signal-safe
 * calls. */
static void on_strike(int sig)
{
    (void)sig;
    pfx_shards_unreadable();
    char c = 'x';
    if (write(pub_ack_fd, &c, 1) != 1)
        _exit(20);
}

/* The publisher's side: SIGUSR1 strikes it, and a crash is the point
 * (no core file). */
static void prepare_publisher(const pfx_publish_t *s)
{
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    pub_ack_fd = s->ack_fd;
    signal(SIGUSR1, on_strike);
}

/* ---- the world ----------------------------------------------------------- */

/* Adds handle_segv=0 to a sanitizer's options variable. */
static void no_segv_handler(const char *var)
{
    char opts[1024];
    const char *prev = getenv(var);
    snprintf(opts, sizeof(opts), "%.900s%shandle_segv=0", prev ? prev : "",
             prev && prev[0] ? (strchr(prev, ':') || !strchr(prev, ' ')
                                    ? ":" : " ")
                             : "");
    setenv(var, opts, 1);
}

/* A fault in the publisher just ends it: no backtrace or freeze from UCX
 * (PFX_UCX_QUIET), no report from a sanitizer in a sanitized build. */
static void no_segv_handlers(void)
{
    no_segv_handler("ASAN_OPTIONS");
    no_segv_handler("TSAN_OPTIONS");
}

static void start_publisher(world_t *w, int rank)
{
    pfx_publish_t s = {.config = w->pw.config, .train = TRAIN,
                       .directory = w->pw.directory, .model = MODEL,
                       .backend = "ucx", .rank = rank, .first = 1,
                       .flags = PFX_ACK_PIPE | PFX_UCX_QUIET | PFX_OWN_PAGES,
                       .before_exec = no_segv_handlers};
    pfx_start(&w->pubs[rank], &s);
}

static int world_setup(void **state)
{
    (void)state;
    world_t *w = &world;
    memset(w, 0, sizeof(*w));
    return pfx_world_open(&w->pw, "tiny-llama.json", TRAIN, INFER, "wire");
}

/* ---- the inference rank ------------------------------------------------ */

typedef struct strike {
    int how, at;
    world_t *w;
    int fired;
    uint64_t done_at, total;
    int ack_ok;
} strike_t;

typedef struct rank {
    pfx_rank_t r;
    strike_t strike;
} rank_t;

static int strike_due(const strike_t *s, const rs_progress_t *p)
{
    /* Only while both publishers still have reads to serve. */
    if (p->bytes_done >= p->bytes_total || p->sessions_outstanding < 2)
        return 0;
    switch (s->at) {
    case AT_FIRST: return 1;
    case AT_MIDDLE: return p->bytes_done * 2 >= p->bytes_total;
    default: return p->bytes_done * 10 >= p->bytes_total * 9;
    }
}

static void *kill_later(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    usleep(FREEZE_KILL_US);
    kill(pid, SIGKILL);
    return NULL;
}

/* Stops the victim (it answers nothing more: its gets stay in flight) and
 * has it killed while the pull waits on them. */
static void freeze_then_kill(strike_t *s)
{
    static pid_t victim;
    int status;
    pthread_t th;
    victim = s->w->pubs[VICTIM].pid;
    kill(victim, SIGSTOP);
    s->ack_ok = waitpid(victim, &status, WUNTRACED) == victim &&
                WIFSTOPPED(status);
    if (pthread_create(&th, NULL, kill_later, &victim) == 0)
        pthread_detach(th);
    else
        kill(victim, SIGKILL);
}

static void on_progress(void *ctx, const rs_progress_t *p)
{
    strike_t *s = ctx;
    if (s->how == STRIKE_NONE || s->fired || !strike_due(s, p))
        return;
    s->fired = 1;
    s->done_at = p->bytes_done;
    s->total = p->bytes_total;
    if (s->how == STRIKE_KILL) {
        pfx_stop(&s->w->pubs[VICTIM], 1);
    } else if (s->how == STRIKE_FREEZE_KILL) {
        freeze_then_kill(s);
    } else {
        kill(s->w->pubs[VICTIM].pid, SIGUSR1);
        s->ack_ok = pfx_await_ack(&s->w->pubs[VICTIM], ACK_WAIT_MS);
    }
}

static void open_rank(world_t *w, rank_t *ir, int how, int at)
{
    rs_receiver_params_t rp;
    ir->strike = (strike_t){how, at, w, 0, 0, 0, 0};
    rs_receiver_params_init(&rp);
    assert_int_equal(rp.verify_digests, 1); /* verify is the default */
    rp.directory = w->pw.directory;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.discover_timeout_s = 20;
    rp.timeout_s = WAIT_TIMEOUT_S;
    rp.progress = on_progress;
    rp.progress_ctx = &ir->strike;
    rp.progress_chunk_bytes = CHUNK_BYTES;
    pfx_rank_open(&ir->r, w->pw.model, &w->pw.infer, 0, &rp, PFX_FILL_PATTERN);
}

/* The rank of the running case: the teardown closes it after a failed
 * assertion. */
static rank_t rank;

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_t *w = &world;
    pfx_teardown(&rank.r, w->pubs, 2, &w->pw);
    return 0;
}

/* No line UCX printed itself ("... UCX  ERROR ...", "UCX  WARN"). */
static void expect_no_ucx_lines(const char *path)
{
    char line[1024];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "UCX  ERROR") != NULL ||
            strstr(line, "UCX  WARN") != NULL)
            fail_msg("UCX printed during the pull: %s", line);
    }
    fclose(f);
}

/* ---- the cases ------------------------------------------------------------ */

static void pull_case(const char *tls, int how, int at)
{
    world_t *w = &world;
    rank_t *ir = &rank;
    rs_diag_t diag;
    rs_pull_result_t res;
    pfx_use_tls(tls);
    for (int r = 0; r < 2; r++)
        start_publisher(w, r);
    open_rank(w, ir, how, at);
    rs_diag_clear(&diag);
    /* UCX's own lines about the failing peer must stay quiet: stdout (where
     * UCX logs by default) and stderr are caught during the pull. */
    char outpath[96];
    snprintf(outpath, sizeof(outpath), "%.60s/output", w->pw.tmp);
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    int caught = open(outpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved1 >= 0 && saved2 >= 0 && caught >= 0);
    dup2(caught, 1);
    dup2(caught, 2);
    rs_status_t st = rs_receiver_pull(ir->r.recv, 1, &diag, &res);
    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    close(caught);
    expect_no_ucx_lines(outpath);
    fprintf(stderr, "%s, strike %d at %d (%llu of %llu bytes): %s: %s\n",
            tls, how, at, (unsigned long long)ir->strike.done_at,
            (unsigned long long)ir->strike.total, rs_status_str(st), diag.msg);
    if (how == STRIKE_NONE) {
        if (st != RS_OK)
            fail_msg("control pull: %s", diag.msg);
        assert_int_equal(ir->r.installs, 1);
        assert_true(res.exec.shards_verified > 0); /* verify is the default */
        pfx_expect_direct(&ir->r, w->pw.model, &w->pw.infer, 0);
        pfx_rank_close(&ir->r);
        return;
    }
    assert_true(ir->strike.fired);
    if (how != STRIKE_KILL)
        assert_true(ir->strike.ack_ok);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull with trainer %d struck: %s: %s", VICTIM,
                 rs_status_str(st), diag.msg);
    if (strstr(diag.msg, "trainer-1, slot 1") == NULL)
        fail_msg("the message does not name trainer-1 and its slot: %s",
                 diag.msg);
    assert_int_equal(ir->r.installs, 0);
    pfx_expect_untouched(&ir->r);
    pfx_rank_close(&ir->r);
    /* The victim died of what struck it: killed, or faulting while it
     * served a get. */
    pfx_stop(&w->pubs[VICTIM], 0);
    assert_true(WIFSIGNALED(w->pubs[VICTIM].status));
    assert_int_equal(WTERMSIG(w->pubs[VICTIM].status),
                     how == STRIKE_CRASH ? SIGSEGV : SIGKILL);
}

#define CASE(name, tls, how, at)                                            \
    static void name(void **state)                                          \
    {                                                                       \
        (void)state;                                                        \
        pull_case(tls, how, at);                                            \
    }

CASE(test_tcp_control, "tcp", STRIKE_NONE, 0)
CASE(test_tcp_kill_first, "tcp", STRIKE_KILL, AT_FIRST)
CASE(test_tcp_kill_middle, "tcp", STRIKE_KILL, AT_MIDDLE)
CASE(test_tcp_kill_end, "tcp", STRIKE_KILL, AT_END)
CASE(test_tcp_crash_first, "tcp", STRIKE_CRASH, AT_FIRST)
CASE(test_tcp_crash_middle, "tcp", STRIKE_CRASH, AT_MIDDLE)
CASE(test_tcp_crash_end, "tcp", STRIKE_CRASH, AT_END)
CASE(test_tcp_freeze_kill_first, "tcp", STRIKE_FREEZE_KILL, AT_FIRST)
CASE(test_tcp_freeze_kill_middle, "tcp", STRIKE_FREEZE_KILL, AT_MIDDLE)
CASE(test_tcp_freeze_kill_end, "tcp", STRIKE_FREEZE_KILL, AT_END)
CASE(test_sm_control, "sm", STRIKE_NONE, 0)
CASE(test_sm_kill_first, "sm", STRIKE_KILL, AT_FIRST)
CASE(test_sm_kill_middle, "sm", STRIKE_KILL, AT_MIDDLE)
CASE(test_sm_kill_end, "sm", STRIKE_KILL, AT_END)
CASE(test_sm_crash_first, "sm", STRIKE_CRASH, AT_FIRST)
CASE(test_sm_crash_middle, "sm", STRIKE_CRASH, AT_MIDDLE)
CASE(test_sm_crash_end, "sm", STRIKE_CRASH, AT_END)

#define T(name) cmocka_unit_test_setup_teardown(name, world_setup, world_teardown)

int main(int argc, char **argv)
{
    if (pfx_is_publisher(argc, argv))
        return pfx_publisher_main(argv[2], prepare_publisher);
    const struct CMUnitTest tests[] = {
        T(test_tcp_control),     T(test_tcp_kill_first),
        T(test_tcp_kill_middle), T(test_tcp_kill_end),
        T(test_tcp_crash_first), T(test_tcp_crash_middle),
        T(test_tcp_crash_end),   T(test_tcp_freeze_kill_first),
        T(test_tcp_freeze_kill_middle), T(test_tcp_freeze_kill_end),
        T(test_sm_control),
        T(test_sm_kill_first),   T(test_sm_kill_middle),
        T(test_sm_kill_end),     T(test_sm_crash_first),
        T(test_sm_crash_middle), T(test_sm_crash_end),
    };
    const char *only = getenv("RS_TEST_ONLY");
    if (only != NULL)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
