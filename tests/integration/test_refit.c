/* Distributed refit end to end on one machine: trainer processes publish a
 * tiny model's shards through a directory and an exposer; this process is
 * every inference rank in turn, pulling with a receiver and comparing each
 * parameter byte for byte with an independent build of vLLM's loaders.
 * Runs over file and redis directories, ucx over shared memory and tcp, and
 * cma; covers the warm path (no re-plan), a restarted publisher (re-plan),
 * a dead publisher (error, no install, destination untouched) and a
 * conflicting replay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"
#include "reshard_layout/layout.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"
#include "vllm_direct.h"

#define TRAIN "megatron:tp=2,dp=2"
#define INFER "vllm:tp=2"
#define MODEL "tiny"

typedef struct world {
    char config[4096];
    char directory[4200];
    const char *backend;
    rs_model_h model;
    rs_layout_t train, infer;
    pid_t pubs[16];
    int cmd[16]; /* write end: one byte = publish the next version; close = quit */
} world_t;

/* Fills one shard with the values the direct build expects. */
typedef struct fill_ctx {
    rs_publisher_h pub;
    rs_status_t st;
    void **bufs;
    size_t nbufs;
} fill_ctx_t;

static rs_status_t on_shard(void *ctx, const rs_shard_desc_t *d)
{
    fill_ctx_t *f = ctx;
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    uint8_t *buf = malloc((size_t)(n ? n : 1) * d->elsize);
    vd_fill_box(buf, d);
    f->bufs[f->nbufs++] = buf;
    return rs_publisher_register(f->pub, d->tensor, d->dtype, d->ndim,
                                 d->full_shape, d->offset, d->shape, buf, RS_MEM_HOST, NULL);
}

/* A trainer rank: publish version 1, then one more version per byte read
 * from the command pipe, until it closes. */
static void publisher_main(const world_t *w, int64_t rank, int cmd,
                           int64_t first)
{
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t diag;
    void *bufs[4096];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rs_publisher_params_init(&pp);
    pp.directory = w->directory;
    pp.model = MODEL;
    pp.rank = rank;
    pp.world = w->train.world;
    pp.backend = w->backend;
    pp.heartbeat_s = 0.2;
    if (rs_publisher_create(&pp, &diag, &pub) != RS_OK)
        _exit(10);
    fill_ctx_t f = {pub, RS_OK, bufs, 0};
    if (rs_layout_trainer_shards(w->model, &w->train, rank, on_shard, &f, &diag) != RS_OK)
        _exit(11);
    int64_t version = first;
    char c;
    for (;;) {
        if (rs_publisher_publish(pub, version, &diag) != RS_OK) {
            fprintf(stderr, "publisher %lld: %s\n", (long long)rank, diag.msg);
            _exit(12);
        }
        if (read(cmd, &c, 1) != 1)
            break;
        version = (int64_t)(unsigned char)c;
    }
    rs_publisher_destroy(pub);
    for (size_t i = 0; i < f.nbufs; i++)
        free(bufs[i]);
    _exit(0);
}

/* Trainers are fresh processes (fork + exec of this test binary): UCX is
 * not fork-safe once this process has a context. */
static void start_publisher(world_t *w, int64_t rank, int64_t first)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char arg[16384];
        close(fd[1]);
        snprintf(arg, sizeof(arg), "%s|%s|%s|%lld|%lld|%d", w->config,
                 w->directory, w->backend, (long long)rank, (long long)first,
                 fd[0]);
        execl("/proc/self/exe", "test_refit", "--publisher", arg, (char *)NULL);
        _exit(13);
    }
    close(fd[0]);
    w->pubs[rank] = pid;
    w->cmd[rank] = fd[1];
}

static void stop_publisher(world_t *w, int64_t rank, int kill_it)
{
    if (w->pubs[rank] <= 0)
        return;
    if (kill_it)
        kill(w->pubs[rank], SIGKILL);
    close(w->cmd[rank]);
    waitpid(w->pubs[rank], NULL, 0);
    w->pubs[rank] = 0;
}

static void publish_version(world_t *w, unsigned char version)
{
    for (int64_t r = 0; r < w->train.world; r++)
        assert_int_equal(write(w->cmd[r], &version, 1), 1);
}

typedef struct inference_rank {
    rs_capture_h cap;
    rs_receiver_h recv;
    uint8_t **params;
    size_t nparams;
    int installs;
} inference_rank_t;

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((inference_rank_t *)ctx)->installs++;
    return RS_OK;
}

static void open_rank(world_t *w, int64_t rank, inference_rank_t *ir, double timeout)
{
    rs_receiver_params_t rp;
    rs_diag_t diag;
    uint64_t padding;
    memset(ir, 0, sizeof(*ir));
    assert_int_equal(rs_layout_capture(w->model, &w->infer, rank, &diag, &ir->cap, &padding), RS_OK);
    rs_receiver_params_init(&rp);
    rp.directory = w->directory;
    rp.model = MODEL;
    rp.backend = w->backend;
    rp.salt = (uint64_t)rank;
    rp.discover_timeout_s = timeout;
    rp.timeout_s = timeout;
    rp.verify_digests = 1;
    rp.install = on_install;
    rp.install_ctx = ir;
    assert_int_equal(rs_receiver_create(&rp, ir->cap, &diag, &ir->recv), RS_OK);
    ir->nparams = rs_capture_num_params(ir->cap);
    ir->params = calloc(ir->nparams, sizeof(uint8_t *));
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        ir->params[p] = malloc(info.nbytes ? info.nbytes : 1);
        memset(ir->params[p], 0xEE, info.nbytes);
        assert_int_equal(rs_receiver_bind(ir->recv, p, ir->params[p], info.nbytes, RS_MEM_HOST, &diag), RS_OK);
    }
}

static void close_rank(inference_rank_t *ir)
{
    rs_receiver_destroy(ir->recv);
    for (size_t p = 0; p < ir->nparams; p++)
        free(ir->params[p]);
    free(ir->params);
    rs_capture_destroy(ir->cap);
}

/* Every parameter equals the direct build (padding stays 0xEE). */
static void expect_params(world_t *w, int64_t rank, inference_rank_t *ir)
{
    vd_expect_t x;
    vd_init(&x, w->model, &w->infer, 0xEE);
    vd_expect_rank(&x, rank);
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t info;
        rs_capture_param(ir->cap, p, &info);
        const vd_param_t *e = vd_find(&x, info.name);
        assert_non_null(e);
        if (memcmp(e->bytes, ir->params[p], info.nbytes) != 0)
            fail_msg("rank %lld: param %s differs", (long long)rank, info.name);
    }
    vd_free(&x);
}

static void pull_ok(inference_rank_t *ir, int64_t version, int expect_replan)
{
    rs_diag_t diag;
    rs_pull_result_t res;
    rs_diag_clear(&diag);
    if (rs_receiver_pull(ir->recv, version, &diag, &res) != RS_OK)
        fail_msg("pull of version %lld: %s", (long long)version, diag.msg);
    assert_int_equal(res.version, version);
    assert_int_equal(res.replanned, expect_replan);
    assert_true(res.exec.shards_verified > 0);
}

static void world_open(world_t *w, const char *directory, const char *backend)
{
    rs_diag_t diag;
    memset(w, 0, sizeof(*w));
    const char *src = getenv("RESHARD_SOURCE_DIR");
    snprintf(w->config, sizeof(w->config), "%s/examples/models/tiny-llama.json",
             src ? src : ".");
    snprintf(w->directory, sizeof(w->directory), "%s", directory);
    w->backend = backend;
    assert_int_equal(rs_model_load(w->config, &diag, &w->model), RS_OK);
    assert_int_equal(rs_layout_parse(TRAIN, &diag, &w->train), RS_OK);
    assert_int_equal(rs_layout_check(&w->train, w->model, &diag), RS_OK);
    assert_int_equal(rs_layout_parse(INFER, &diag, &w->infer), RS_OK);
    assert_int_equal(rs_layout_check(&w->infer, w->model, &diag), RS_OK);
    for (int64_t r = 0; r < w->train.world; r++)
        start_publisher(w, r, 1);
}

static void world_close(world_t *w)
{
    for (int64_t r = 0; r < w->train.world; r++)
        stop_publisher(w, r, 0);
    rs_model_destroy(w->model);
}

/* The whole scenario on one directory and one backend. */
static void scenario(const char *directory, const char *backend)
{
    world_t w;
    inference_rank_t ranks[2];
    world_open(&w, directory, backend);
    for (int64_t r = 0; r < 2; r++) {
        open_rank(&w, r, &ranks[r], 5);
        pull_ok(&ranks[r], 1, 1);                /* cold: plan */
        expect_params(&w, r, &ranks[r]);
    }
    publish_version(&w, 2);
    for (int64_t r = 0; r < 2; r++) {
        memset(ranks[r].params[0], 0xEE, 16);   /* must be rewritten */
        pull_ok(&ranks[r], 2, 0);                /* warm: same topology */
        expect_params(&w, r, &ranks[r]);
    }
    /* trainer 0 restarts: new process, new addresses and keys */
    stop_publisher(&w, 0, 1);
    start_publisher(&w, 0, 3);
    unsigned char v3 = 3;
    for (int64_t r = 1; r < w.train.world; r++)
        assert_int_equal(write(w.cmd[r], &v3, 1), 1);
    for (int64_t r = 0; r < 2; r++) {
        pull_ok(&ranks[r], 3, 1);                /* re-planned */
        expect_params(&w, r, &ranks[r]);
    }
    /* a publisher dies after publishing version 4: the pull fails within its
     * timeout, install is not called, the destination keeps its bytes */
    publish_version(&w, 4);
    rs_version_info_t info;
    rs_dir_h dir;
    rs_diag_t diag;
    assert_int_equal(rs_dir_open(w.directory, &diag, &dir), RS_OK);
    assert_int_equal(rs_dir_wait_ready(dir, MODEL, 4, 20, 0, &diag, &info), RS_OK);
    for (int64_t r = 0; r < w.train.world; r++)
        stop_publisher(&w, r, 1);
    inference_rank_t *ir = &ranks[0];
    int before = ir->installs;
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t pi;
        rs_capture_param(ir->cap, p, &pi);
        memset(ir->params[p], 0x5A, pi.nbytes);
    }
    rs_receiver_h slow = ir->recv;
    (void)slow;
    rs_pull_result_t res;
    rs_status_t st = rs_receiver_pull(ir->recv, 4, &diag, &res);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull from a dead publisher: %s: %s", rs_status_str(st), diag.msg);
    assert_int_equal(ir->installs, before);
    for (size_t p = 0; p < ir->nparams; p++) {
        rs_param_info_t pi;
        rs_capture_param(ir->cap, p, &pi);
        for (uint64_t b = 0; b < pi.nbytes; b++)
            if (ir->params[p][b] != 0x5A)
                fail_msg("param %s written by a failed pull", pi.name);
    }
    /* a conflicting replay of a published slot is refused */
    const char bogus[] = "{\"schema\": \"mx.reshard.shard_table.v1\"}";
    assert_int_equal(rs_dir_publish(dir, MODEL, 1, 0, bogus, sizeof(bogus) - 1, &diag),
                     RS_ERR_INPUT);
    rs_dir_close(dir);
    for (int r = 0; r < 2; r++)
        close_rank(&ranks[r]);
    world_close(&w);
}

static char tmpdir[256];

static void file_dir(char *out, size_t n)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rs-refit-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(out, n, "file:%s", tmpdir);
}

static void rm_tmp(void)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

static void test_file_ucx_sm(void **state)
{
    (void)state;
    char d[300];
    setenv("UCX_TLS", "sm", 1);
    file_dir(d, sizeof(d));
    scenario(d, "ucx");
    rm_tmp();
}

static void test_file_ucx_tcp(void **state)
{
    (void)state;
    char d[300];
    setenv("UCX_TLS", "tcp", 1);
    file_dir(d, sizeof(d));
    scenario(d, "ucx");
    rm_tmp();
}

static void test_file_cma(void **state)
{
    (void)state;
    char d[300];
    file_dir(d, sizeof(d));
    scenario(d, "cma");
    rm_tmp();
}

static void test_redis_ucx_sm(void **state)
{
    (void)state;
    rfx_server_t s;
    char why[256];
    int rc = rfx_start(&s, NULL, why, sizeof(why));
    if (rc == 1)
        skip();
    assert_int_equal(rc, 0);
    setenv("UCX_TLS", "sm", 1);
    scenario(s.url, "ucx");
    rfx_stop(&s);
}

/* `--publisher CONFIG|DIRECTORY|BACKEND|RANK|FIRST|FD`: a trainer rank. */
static int publisher_entry(const char *arg)
{
    world_t w;
    rs_diag_t diag;
    char buf[16384], *f[6];
    snprintf(buf, sizeof(buf), "%s", arg);
    f[0] = strtok(buf, "|");
    for (int i = 1; i < 6; i++)
        f[i] = strtok(NULL, "|");
    if (f[5] == NULL)
        return 2;
    memset(&w, 0, sizeof(w));
    snprintf(w.config, sizeof(w.config), "%s", f[0]);
    snprintf(w.directory, sizeof(w.directory), "%s", f[1]);
    w.backend = f[2];
    if (rs_model_load(w.config, &diag, &w.model) != RS_OK ||
        rs_layout_parse(TRAIN, &diag, &w.train) != RS_OK ||
        rs_layout_check(&w.train, w.model, &diag) != RS_OK)
        return 3;
    publisher_main(&w, atoll(f[3]), atoi(f[5]), atoll(f[4]));
    return 0;
}

static void test_redis_ucx_tcp(void **state)
{
    (void)state;
    rfx_server_t s;
    char why[256];
    int rc = rfx_start(&s, "secret", why, sizeof(why));
    if (rc == 1)
        skip();
    assert_int_equal(rc, 0);
    setenv("UCX_TLS", "tcp", 1);
    scenario(s.url, "ucx"); /* with a password */
    rfx_stop(&s);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--publisher") == 0)
        return publisher_entry(argv[2]);
    const char *only = getenv("RS_TEST_ONLY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_cma),
        cmocka_unit_test(test_file_ucx_sm),
        cmocka_unit_test(test_file_ucx_tcp),
        cmocka_unit_test(test_redis_ucx_sm),
        cmocka_unit_test(test_redis_ucx_tcp),
    };
    if (only != NULL)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
