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
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reshard_layout/layout.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"
#include "vllm_direct.h"

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
    char config[1024];
    char tmp[64];
    char directory[80];
    rs_model_h model;
    rs_layout_t train, infer;
    pid_t pubs[2];
    int cmd[2];   /* write end: closing it lets the publisher exit */
    int ack[2];   /* read end: the publisher's "memory is gone" byte */
    int status[2];
} world_t;

static world_t world;

/* ---- the publisher (a fresh process: UCX is not fork-safe) ------------- */

#define MAX_BUFS 4096
static void *pub_buf[MAX_BUFS];
static size_t pub_len[MAX_BUFS];
static size_t pub_nbufs;
static int pub_ack_fd = -1;

/* Makes every shard unreadable, then says so. Only async-signal-safe
 * calls. */
static void on_strike(int sig)
{
    (void)sig;
    for (size_t i = 0; i < pub_nbufs; i++)
        mprotect(pub_buf[i], pub_len[i], PROT_NONE);
    char c = 'x';
    if (write(pub_ack_fd, &c, 1) != 1)
        _exit(20);
}

typedef struct fill_ctx {
    rs_publisher_h pub;
} fill_ctx_t;

/* One shard in its own pages, filled with the values the direct build
 * expects. */
static rs_status_t on_shard(void *ctx, const rs_shard_desc_t *d)
{
    fill_ctx_t *f = ctx;
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = ((size_t)(n ? n : 1) * d->elsize + page - 1) / page * page;
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED || pub_nbufs == MAX_BUFS)
        return RS_ERR_NO_MEMORY;
    vd_fill_box(buf, d);
    pub_buf[pub_nbufs] = buf;
    pub_len[pub_nbufs++] = len;
    return rs_publisher_register(f->pub, d->tensor, d->dtype, d->ndim,
                                 d->full_shape, d->offset, d->shape, buf, RS_MEM_HOST, NULL);
}

/* `--publisher CONFIG|DIRECTORY|RANK|CMD_FD|ACK_FD`: publishes version 1
 * and serves it until the command pipe closes. */
static int publisher_entry(const char *arg)
{
    char buf[8192], *f[5];
    rs_model_h model;
    rs_layout_t train;
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t diag;
    struct rlimit no_core = {0, 0};
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setrlimit(RLIMIT_CORE, &no_core); /* a crash is the point: no core */
    snprintf(buf, sizeof(buf), "%s", arg);
    f[0] = strtok(buf, "|");
    for (int i = 1; i < 5; i++)
        f[i] = strtok(NULL, "|");
    if (f[4] == NULL || rs_model_load(f[0], &diag, &model) != RS_OK ||
        rs_layout_parse(TRAIN, &diag, &train) != RS_OK ||
        rs_layout_check(&train, model, &diag) != RS_OK)
        return 2;
    int cmd = atoi(f[3]);
    pub_ack_fd = atoi(f[4]);
    signal(SIGUSR1, on_strike);
    rs_publisher_params_init(&pp);
    pp.directory = f[1];
    pp.model = MODEL;
    pp.rank = atoll(f[2]);
    pp.world = train.world;
    pp.backend = "ucx";
    pp.heartbeat_s = 0.2;
    if (rs_publisher_create(&pp, &diag, &pub) != RS_OK) {
        fprintf(stderr, "publisher %s: %s\n", f[2], diag.msg);
        return 3;
    }
    fill_ctx_t fc = {pub};
    if (rs_layout_trainer_shards(model, &train, pp.rank, on_shard, &fc,
                                 &diag) != RS_OK ||
        rs_publisher_publish(pub, 1, &diag) != RS_OK) {
        fprintf(stderr, "publisher %s: %s\n", f[2], diag.msg);
        return 4;
    }
    char c;
    for (;;) {
        ssize_t k = read(cmd, &c, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
    }
    rs_publisher_destroy(pub);
    rs_model_destroy(model);
    return 0;
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

static void start_publisher(world_t *w, int rank)
{
    int cmd[2], ack[2];
    assert_int_equal(pipe(cmd), 0);
    assert_int_equal(pipe(ack), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char arg[8192];
        close(cmd[1]);
        close(ack[0]);
        /* A fault in the publisher just ends it: no backtrace or freeze
         * from UCX, no report from a sanitizer in a sanitized build. */
        no_segv_handler("ASAN_OPTIONS");
        no_segv_handler("TSAN_OPTIONS");
        setenv("UCX_HANDLE_ERRORS", "none", 1);
        snprintf(arg, sizeof(arg), "%s|%s|%d|%d|%d", w->config, w->directory,
                 rank, cmd[0], ack[1]);
        execl("/proc/self/exe", "test_wire_faults", "--publisher", arg,
              (char *)NULL);
        _exit(13);
    }
    close(cmd[0]);
    close(ack[1]);
    w->pubs[rank] = pid;
    w->cmd[rank] = cmd[1];
    w->ack[rank] = ack[0];
}

/* Reaps a publisher (killing it first when asked); keeps its status. */
static void stop_publisher(world_t *w, int rank, int kill_it)
{
    if (w->pubs[rank] <= 0)
        return;
    if (kill_it)
        kill(w->pubs[rank], SIGKILL);
    close(w->cmd[rank]);
    close(w->ack[rank]);
    waitpid(w->pubs[rank], &w->status[rank], 0);
    w->pubs[rank] = 0;
}

static int world_setup(void **state)
{
    (void)state;
    world_t *w = &world;
    rs_diag_t diag;
    memset(w, 0, sizeof(*w));
    const char *src = getenv("RESHARD_SOURCE_DIR");
    snprintf(w->config, sizeof(w->config),
             "%.900s/examples/models/tiny-llama.json", src ? src : ".");
    snprintf(w->tmp, sizeof(w->tmp), "/tmp/rs-wire-XXXXXX");
    if (mkdtemp(w->tmp) == NULL)
        return -1;
    snprintf(w->directory, sizeof(w->directory), "file:%.60s", w->tmp);
    if (rs_model_load(w->config, &diag, &w->model) != RS_OK ||
        rs_layout_parse(TRAIN, &diag, &w->train) != RS_OK ||
        rs_layout_check(&w->train, w->model, &diag) != RS_OK ||
        rs_layout_parse(INFER, &diag, &w->infer) != RS_OK ||
        rs_layout_check(&w->infer, w->model, &diag) != RS_OK)
        return -1;
    return 0;
}

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_t *w = &world;
    char cmd[128];
    for (int r = 0; r < 2; r++)
        stop_publisher(w, r, 1);
    rs_model_destroy(w->model);
    w->model = NULL;
    snprintf(cmd, sizeof(cmd), "rm -rf '%.60s'", w->tmp);
    if (w->tmp[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", w->tmp);
    return 0;
}

static void use_tls(const char *tls)
{
    setenv("UCX_TLS", tls, 1);
    if (strcmp(tls, "tcp") == 0)
        setenv("UCX_NET_DEVICES", "lo", 1);
    else
        unsetenv("UCX_NET_DEVICES");
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
    rs_capture_h cap;
    rs_receiver_h recv;
    uint8_t **params, **prior;
    size_t nparams;
    int installs;
    strike_t strike;
} rank_t;

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((rank_t *)ctx)->installs++;
    return RS_OK;
}

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

/* Waits for the publisher's byte saying its memory is unreadable. */
static int await_ack(int fd)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    char c;
    while (poll(&pfd, 1, ACK_WAIT_MS) < 0 && errno == EINTR)
        ;
    return (pfd.revents & POLLIN) && read(fd, &c, 1) == 1;
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
    victim = s->w->pubs[VICTIM];
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
        stop_publisher(s->w, VICTIM, 1);
    } else if (s->how == STRIKE_FREEZE_KILL) {
        freeze_then_kill(s);
    } else {
        kill(s->w->pubs[VICTIM], SIGUSR1);
        s->ack_ok = await_ack(s->w->ack[VICTIM]);
    }
}

static void open_rank(world_t *w, rank_t *ir, int how, int at)
{
    rs_receiver_params_t rp;
    rs_diag_t diag;
    uint64_t padding;
    memset(ir, 0, sizeof(*ir));
    ir->strike = (strike_t){how, at, w, 0, 0, 0, 0};
    assert_int_equal(rs_layout_capture(w->model, &w->infer, 0, &diag,
                                       &ir->cap, &padding), RS_OK);
    rs_receiver_params_init(&rp);
    assert_int_equal(rp.verify_digests, 1); /* verify is the default */
    rp.directory = w->directory;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.discover_timeout_s = 20;
    rp.timeout_s = WAIT_TIMEOUT_S;
    rp.install = on_install;
    rp.install_ctx = ir;
    rp.progress = on_progress;
    rp.progress_ctx = &ir->strike;
    rp.progress_chunk_bytes = CHUNK_BYTES;
    assert_int_equal(rs_receiver_create(&rp, ir->cap, &diag, &ir->recv),
                     RS_OK);
    ir->nparams = rs_capture_num_params(ir->cap);
    ir->params = calloc(ir->nparams, sizeof(uint8_t *));
    ir->prior = calloc(ir->nparams, sizeof(uint8_t *));
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        size_t n = info.nbytes ? info.nbytes : 1;
        ir->params[p] = malloc(n);
        ir->prior[p] = malloc(n);
        for (size_t b = 0; b < n; b++) /* prior contents: not the fill */
            ir->params[p][b] = (uint8_t)(b * 131 + p * 7 + 1);
        memcpy(ir->prior[p], ir->params[p], n);
        assert_int_equal(rs_receiver_bind(ir->recv, p, ir->params[p],
                                          info.nbytes, RS_MEM_HOST, &diag), RS_OK);
    }
}

static void close_rank(rank_t *ir)
{
    rs_receiver_destroy(ir->recv);
    for (size_t p = 0; p < ir->nparams; p++) {
        free(ir->params[p]);
        free(ir->prior[p]);
    }
    free(ir->params);
    free(ir->prior);
    rs_capture_destroy(ir->cap);
}

static void expect_untouched(const rank_t *ir)
{
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        if (memcmp(ir->params[p], ir->prior[p], info.nbytes) != 0)
            fail_msg("param %s was written by a failed pull", info.name);
    }
}

static void expect_installed(world_t *w, const rank_t *ir)
{
    vd_expect_t x;
    vd_init(&x, w->model, &w->infer, 0xEE);
    vd_expect_rank(&x, 0);
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        const vd_param_t *e = vd_find(&x, info.name);
        assert_non_null(e);
        /* Padding the plan never writes keeps the prior bytes. */
        for (uint64_t b = 0; b < info.nbytes; b++) {
            uint8_t want = e->bytes[b];
            if (want == 0xEE && ir->params[p][b] == ir->prior[p][b])
                continue;
            if (ir->params[p][b] != want)
                fail_msg("param %s byte %llu: got 0x%02x, want 0x%02x",
                         info.name, (unsigned long long)b, ir->params[p][b],
                         want);
        }
    }
    vd_free(&x);
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
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    use_tls(tls);
    for (int r = 0; r < 2; r++)
        start_publisher(w, r);
    open_rank(w, &ir, how, at);
    rs_diag_clear(&diag);
    /* UCX's own lines about the failing peer must stay quiet: stdout (where
     * UCX logs by default) and stderr are caught during the pull. */
    char outpath[96];
    snprintf(outpath, sizeof(outpath), "%.60s/output", w->tmp);
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    int caught = open(outpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved1 >= 0 && saved2 >= 0 && caught >= 0);
    dup2(caught, 1);
    dup2(caught, 2);
    rs_status_t st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    close(caught);
    expect_no_ucx_lines(outpath);
    fprintf(stderr, "%s, strike %d at %d (%llu of %llu bytes): %s: %s\n",
            tls, how, at, (unsigned long long)ir.strike.done_at,
            (unsigned long long)ir.strike.total, rs_status_str(st), diag.msg);
    if (how == STRIKE_NONE) {
        if (st != RS_OK)
            fail_msg("control pull: %s", diag.msg);
        assert_int_equal(ir.installs, 1);
        assert_true(res.exec.shards_verified > 0); /* verify is the default */
        expect_installed(w, &ir);
        close_rank(&ir);
        return;
    }
    assert_true(ir.strike.fired);
    if (how != STRIKE_KILL)
        assert_true(ir.strike.ack_ok);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull with trainer %d struck: %s: %s", VICTIM,
                 rs_status_str(st), diag.msg);
    if (strstr(diag.msg, "trainer-1, slot 1") == NULL)
        fail_msg("the message does not name trainer-1 and its slot: %s",
                 diag.msg);
    assert_int_equal(ir.installs, 0);
    expect_untouched(&ir);
    close_rank(&ir);
    /* The victim died of what struck it: killed, or faulting while it
     * served a get. */
    stop_publisher(w, VICTIM, 0);
    assert_true(WIFSIGNALED(w->status[VICTIM]));
    assert_int_equal(WTERMSIG(w->status[VICTIM]),
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
    if (argc == 3 && strcmp(argv[1], "--publisher") == 0)
        return publisher_entry(argv[2]);
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
