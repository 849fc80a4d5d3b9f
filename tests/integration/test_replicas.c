/* Several publishers per slot, end to end. Trainer ranks of a tiny model
 * (megatron tp=2: two slots) run as separate processes, each rank with up
 * to two data-parallel replicas publishing the same shards to the same
 * directory slot over UCX (tcp on loopback); this process pulls as one
 * inference rank (vllm tp=1) with a small progress chunk, so its progress
 * callback can strike publishers while the wire stage runs:
 * - one replica of slot 1, the one the receiver reads from, is SIGKILLed
 *   mid-pull: the same pull completes from the other replica, byte-exact
 *   against an independent build of vLLM's loaders, and the result records
 *   the failover; the next pull reads from the live replica directly;
 *   a replica frozen mid-pull (SIGSTOP: its reads time out) the same;
 * - both replicas of slot 1 are SIGKILLed mid-pull: the pull fails naming
 *   both, install is not called, the bound parameters keep their bytes;
 * - a rank (one publisher per slot) is killed after a pull and started
 *   again with the same geometry at new addresses: it rejoins its slot of
 *   the same version and the next pull of that version is byte-exact;
 * - a table changed in the directory after it was published (one byte of
 *   its file) is refused before it is parsed: the pull fails with
 *   RS_ERR_VERIFY naming model, version, slot and publisher, and nothing
 *   is installed or touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "vllm_direct.h"

#define TRAIN "megatron:tp=2"
#define INFER "vllm:tp=1"
#define MODEL "tiny"
#define CHUNK_BYTES (16u << 10)
#define WAIT_TIMEOUT_S 3.0
#define ACK_WAIT_MS 20000
#define MAX_BUFS 4096
/* The receiver's salt. Publishers join in a fixed order (replica 0 of
 * every rank first), and a receiver reads slot s from its publisher
 * (salt + s) mod count: with salt 1, slot 1 is read from replica 0. */
#define SALT 1

typedef struct world {
    char config[1024];
    char tmp[64];
    char directory[80];
    rs_model_h model;
    rs_layout_t train, infer;
    pid_t pubs[2][2];    /* [rank][replica] */
    int cmd[2][2];       /* write end: closing it lets the publisher exit */
    int ack[2][2];       /* read end: the publisher's "published" byte */
    int status[2][2];
} world_t;

static world_t world;

/* ---- the publisher (a fresh process: UCX is not fork-safe) ------------- */

static void *pub_buf[MAX_BUFS];
static size_t pub_len[MAX_BUFS];
static size_t pub_nbufs;

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

/* `--publisher CONFIG|DIRECTORY|RANK|REPLICA|CMD_FD|ACK_FD`: publishes
 * version 1, says so on ACK_FD, and serves it until CMD_FD closes. */
static int publisher_entry(const char *arg)
{
    char buf[8192], *f[6];
    rs_model_h model;
    rs_layout_t train;
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t diag;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(buf, sizeof(buf), "%s", arg);
    f[0] = strtok(buf, "|");
    for (int i = 1; i < 6; i++)
        f[i] = strtok(NULL, "|");
    if (f[5] == NULL || rs_model_load(f[0], &diag, &model) != RS_OK ||
        rs_layout_parse(TRAIN, &diag, &train) != RS_OK ||
        rs_layout_check(&train, model, &diag) != RS_OK)
        return 2;
    int cmd = atoi(f[4]), ack = atoi(f[5]);
    rs_publisher_params_init(&pp);
    pp.directory = f[1];
    pp.model = MODEL;
    pp.rank = atoll(f[2]);
    pp.replica = atoll(f[3]);
    pp.world = train.world;
    pp.backend = "ucx";
    pp.heartbeat_s = 0.2;
    if (rs_publisher_create(&pp, &diag, &pub) != RS_OK) {
        fprintf(stderr, "publisher %s/%s: %s\n", f[2], f[3], diag.msg);
        return 3;
    }
    fill_ctx_t fc = {pub};
    if (rs_layout_trainer_shards(model, &train, pp.rank, on_shard, &fc,
                                 &diag) != RS_OK ||
        rs_publisher_publish(pub, 1, &diag) != RS_OK) {
        fprintf(stderr, "publisher %s/%s: %s\n", f[2], f[3], diag.msg);
        return 4;
    }
    char c = 'p';
    if (write(ack, &c, 1) != 1)
        return 5;
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

/* Waits for the publisher's byte saying its memory is unreadable. */
static int await_ack(int fd)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    char c;
    while (poll(&pfd, 1, ACK_WAIT_MS) < 0 && errno == EINTR)
        ;
    return (pfd.revents & POLLIN) && read(fd, &c, 1) == 1;
}

/* Starts publisher (rank, replica) and waits until it has published, so
 * publishers join their slots in the order they are started. */
static void start_publisher(world_t *w, int rank, int replica)
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
        setenv("UCX_HANDLE_ERRORS", "none", 1);
        snprintf(arg, sizeof(arg), "%s|%s|%d|%d|%d|%d", w->config,
                 w->directory, rank, replica, cmd[0], ack[1]);
        execl("/proc/self/exe", "test_replicas", "--publisher", arg,
              (char *)NULL);
        _exit(13);
    }
    close(cmd[0]);
    close(ack[1]);
    w->pubs[rank][replica] = pid;
    w->cmd[rank][replica] = cmd[1];
    w->ack[rank][replica] = ack[0];
    if (!await_ack(ack[0]))
        fail_msg("publisher rank %d replica %d did not publish", rank,
                 replica);
}

/* Reaps a publisher (killing it first when asked); keeps its status. */
static void stop_publisher(world_t *w, int rank, int replica, int kill_it)
{
    if (w->pubs[rank][replica] <= 0)
        return;
    if (kill_it)
        kill(w->pubs[rank][replica], SIGKILL);
    close(w->cmd[rank][replica]);
    close(w->ack[rank][replica]);
    waitpid(w->pubs[rank][replica], &w->status[rank][replica], 0);
    w->pubs[rank][replica] = 0;
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
    snprintf(w->tmp, sizeof(w->tmp), "/tmp/rs-replicas-XXXXXX");
    if (mkdtemp(w->tmp) == NULL)
        return -1;
    snprintf(w->directory, sizeof(w->directory), "file:%.60s", w->tmp);
    if (rs_model_load(w->config, &diag, &w->model) != RS_OK ||
        rs_layout_parse(TRAIN, &diag, &w->train) != RS_OK ||
        rs_layout_check(&w->train, w->model, &diag) != RS_OK ||
        rs_layout_parse(INFER, &diag, &w->infer) != RS_OK ||
        rs_layout_check(&w->infer, w->model, &diag) != RS_OK)
        return -1;
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    return 0;
}

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_t *w = &world;
    char cmd[128];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++)
            stop_publisher(w, r, k, 1);
    rs_model_destroy(w->model);
    w->model = NULL;
    snprintf(cmd, sizeof(cmd), "rm -rf '%.60s'", w->tmp);
    if (w->tmp[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", w->tmp);
    return 0;
}

/* Both ranks, with `replicas` publishers each (replica 0 of every rank
 * first). */
static void start_all(world_t *w, int replicas)
{
    for (int k = 0; k < replicas; k++)
        for (int r = 0; r < 2; r++)
            start_publisher(w, r, k);
}

/* ---- the inference rank ------------------------------------------------ */

typedef struct strike {
    world_t *w;
    int nvictims;          /* replicas of rank 1 to strike: 0, 1 or 2 */
    int freeze;            /* stop them (SIGSTOP) instead of killing */
    int fired;
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

/* Halfway through the first transfer, while both slots' publishers still
 * have reads to serve: rank 1's replicas are killed and reaped, or
 * frozen. */
static void on_progress(void *ctx, const rs_progress_t *p)
{
    strike_t *s = ctx;
    if (s->nvictims == 0 || s->fired || p->bytes_done >= p->bytes_total ||
        p->sessions_outstanding < 2 || p->bytes_done * 2 < p->bytes_total)
        return;
    s->fired = 1;
    for (int k = 0; k < s->nvictims; k++) {
        if (s->freeze)
            kill(s->w->pubs[1][k], SIGSTOP); /* its gets stay in flight */
        else
            stop_publisher(s->w, 1, k, 1);
    }
}

static void open_rank(world_t *w, rank_t *ir, int nvictims, int freeze)
{
    rs_receiver_params_t rp;
    rs_diag_t diag;
    uint64_t padding;
    memset(ir, 0, sizeof(*ir));
    ir->strike = (strike_t){w, nvictims, freeze, 0};
    assert_int_equal(rs_layout_capture(w->model, &w->infer, 0, &diag,
                                       &ir->cap, &padding), RS_OK);
    rs_receiver_params_init(&rp);
    rp.directory = w->directory;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.salt = SALT;
    rp.discover_timeout_s = 20;
    rp.pull_timeout_s = 60;
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

/* Puts the prior bytes back, so a later pull is checked afresh. */
static void restore_prior(rank_t *ir)
{
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        memcpy(ir->params[p], ir->prior[p], info.nbytes);
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

static void expect_message(const rs_diag_t *d, const char *text)
{
    if (strstr(d->msg, text) == NULL)
        fail_msg("message lacks '%s': %s", text, d->msg);
}

/* ---- the cases ------------------------------------------------------------ */

static void test_replica_killed_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    start_all(w, 2);
    open_rank(w, &ir, 1, 0);
    rs_status_t st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    fprintf(stderr, "one replica of slot 1 killed: %s: %s; failovers %u: "
            "%s\n", rs_status_str(st), st ? diag.msg : "", res.failovers,
            st == RS_OK ? res.failover_msg : "");
    assert_true(ir.strike.fired);
    if (st != RS_OK)
        fail_msg("pull with a replica killed: %s", diag.msg);
    assert_int_equal(ir.installs, 1);
    assert_true(res.exec.shards_verified > 0);
    expect_installed(w, &ir);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    /* the next pull goes to the live replica first */
    restore_prior(&ir);
    st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("pull after the failover: %s", diag.msg);
    assert_int_equal(res.failovers, 0);
    assert_int_equal(ir.installs, 2);
    expect_installed(w, &ir);
    close_rank(&ir);
    stop_publisher(w, 1, 0, 0);
    assert_true(WIFSIGNALED(w->status[1][0]));
    assert_int_equal(WTERMSIG(w->status[1][0]), SIGKILL);
}

/* The same failover inside rs_receiver_stage: the stage completes from the
 * other replica into staging, the bound parameters keep their prior bytes
 * until apply, and apply installs the version byte-exact. */
static void test_replica_killed_mid_stage(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    rs_staged_h staged = NULL;
    start_all(w, 2);
    open_rank(w, &ir, 1, 0);
    rs_status_t st = rs_receiver_stage(ir.recv, 1, &diag, &staged);
    assert_true(ir.strike.fired);
    if (st != RS_OK)
        fail_msg("stage with a replica killed: %s", diag.msg);
    assert_int_equal(rs_staged_version(staged), 1);
    assert_int_equal(ir.installs, 0);
    expect_untouched(&ir); /* staged, not applied */
    st = rs_receiver_apply(ir.recv, staged, &diag, &res);
    if (st != RS_OK)
        fail_msg("apply after a failover: %s", diag.msg);
    assert_int_equal(ir.installs, 1);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    expect_installed(w, &ir);
    close_rank(&ir);
    stop_publisher(w, 1, 0, 0);
    assert_true(WIFSIGNALED(w->status[1][0]));
}

/* A frozen replica answers nothing: its reads time out (exec.timeout_s)
 * and the pull moves to the other replica. */
static void test_replica_frozen_mid_pull(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_pull_result_t res;
    start_all(w, 2);
    open_rank(w, &ir, 1, 1);
    /* no diag: the failover does not depend on the caller's */
    rs_status_t st = rs_receiver_pull(ir.recv, 1, NULL, &res);
    fprintf(stderr, "one replica of slot 1 frozen: %s; failovers %u: %s\n",
            rs_status_str(st), res.failovers,
            st == RS_OK ? res.failover_msg : "");
    assert_true(ir.strike.fired);
    assert_int_equal(st, RS_OK);
    assert_int_equal(ir.installs, 1);
    expect_installed(w, &ir);
    assert_int_equal(res.failovers, 1);
    assert_string_equal(res.failover_msg, "trainer-1, slot 1 -> trainer-1-r1");
    close_rank(&ir);
}

static void test_both_replicas_killed(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    start_all(w, 2);
    open_rank(w, &ir, 2, 0);
    rs_status_t st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    fprintf(stderr, "both replicas of slot 1 killed: %s: %s\n",
            rs_status_str(st), diag.msg);
    assert_true(ir.strike.fired);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull with both replicas killed: %s: %s", rs_status_str(st),
                 diag.msg);
    expect_message(&diag, "slot 1 of version 1: reading from each of its 2 "
                   "publishers failed");
    expect_message(&diag, "trainer-1, slot 1: ");
    expect_message(&diag, "trainer-1-r1, slot 1: ");
    assert_int_equal(ir.installs, 0);
    expect_untouched(&ir);
    close_rank(&ir);
}

static void test_restarted_rank_rejoins(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    start_all(w, 1);
    open_rank(w, &ir, 0, 0);
    rs_status_t st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("first pull: %s", diag.msg);
    expect_installed(w, &ir);
    /* rank 1 dies and comes back: same session and shards, new memory and
     * UCX address; its publish replaces its own entry in slot 1 */
    stop_publisher(w, 1, 0, 1);
    start_publisher(w, 1, 0);
    restore_prior(&ir);
    st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    if (st != RS_OK)
        fail_msg("pull after rank 1 restarted: %s", diag.msg);
    assert_int_equal(res.replanned, 1); /* new addresses: a new topology */
    assert_int_equal(res.failovers, 0);
    assert_int_equal(ir.installs, 2);
    expect_installed(w, &ir);
    close_rank(&ir);
}

static void test_corrupted_table_refused(void **state)
{
    (void)state;
    world_t *w = &world;
    rank_t ir;
    rs_diag_t diag;
    rs_pull_result_t res;
    char path[512];
    start_all(w, 1);
    /* one byte near the end of trainer-1's table (its JSON, past the
     * digest line), flipped behind the directory's back */
    snprintf(path, sizeof(path), "%s/%s/1/slot-1@trainer-1", w->tmp, MODEL);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, -3, SEEK_END), 0);
    assert_int_equal(fputc(c ^ 0x01, f), c ^ 0x01);
    assert_int_equal(fclose(f), 0);
    open_rank(w, &ir, 0, 0);
    rs_status_t st = rs_receiver_pull(ir.recv, 1, &diag, &res);
    fprintf(stderr, "corrupted table: %s: %s\n", rs_status_str(st), diag.msg);
    assert_int_equal(st, RS_ERR_VERIFY);
    expect_message(&diag, "table of publisher 'trainer-1' of slot 1 of "
                   "version 1 of 'tiny' is corrupted");
    assert_int_equal(ir.installs, 0);
    expect_untouched(&ir);
    close_rank(&ir);
}

#define T(name) cmocka_unit_test_setup_teardown(name, world_setup, world_teardown)

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--publisher") == 0)
        return publisher_entry(argv[2]);
    const struct CMUnitTest tests[] = {
        T(test_replica_killed_mid_pull),
        T(test_replica_killed_mid_stage),
        T(test_replica_frozen_mid_pull),
        T(test_both_replicas_killed),
        T(test_restarted_rank_rejoins),
        T(test_corrupted_table_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
