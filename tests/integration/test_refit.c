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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc_fixture.h"
#include "rank_fixture.h"
#include "redis_fixture.h"
#include "tmp_path.h"
#include "reshard/reshard.h"
#include "reshard_layout/layout.h"

#define TRAIN "megatron:tp=2,dp=2"
#define INFER "vllm:tp=2"
#define MODEL "tiny"

typedef struct world {
    pfx_world_t pw; /* the directory: a file: folder or a redis server */
    const char *backend;
    pfx_proc_t pubs[16]; /* a command byte: publish that version next */
    pfx_rank_t ranks[2];
} world_t;

static world_t world;

/* Trainers are fresh processes (fork + exec of this test binary): UCX is
 * not fork-safe once this process has a context. Each publishes version
 * `first`, then one more version per byte read from its command pipe. */
static void start_publisher(world_t *w, int64_t rank, int64_t first)
{
    pfx_publish_t s = {.config = w->pw.config, .train = TRAIN,
                       .directory = w->pw.directory, .model = MODEL,
                       .backend = w->backend, .rank = rank, .first = first,
                       .flags = PFX_NEXT_VERSIONS};
    pfx_start(&w->pubs[rank], &s);
}

static void publish_version(world_t *w, unsigned char version)
{
    for (int64_t r = 0; r < w->pw.train.world; r++)
        assert_int_equal(pfx_send(&w->pubs[r], version), 0);
}

static void open_rank(world_t *w, int64_t rank, pfx_rank_t *ir, double timeout)
{
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    rp.directory = w->pw.directory;
    rp.model = MODEL;
    rp.backend = w->backend;
    rp.salt = (uint64_t)rank;
    rp.discover_timeout_s = timeout;
    rp.timeout_s = timeout;
    rp.verify_digests = 1;
    pfx_rank_open(ir, w->pw.model, &w->pw.infer, rank, &rp, 0xEE);
}

/* Every parameter equals the direct build (padding stays 0xEE). */
static void expect_params(world_t *w, int64_t rank, pfx_rank_t *ir)
{
    pfx_expect_direct(ir, w->pw.model, &w->pw.infer, rank);
}

static void pull_ok(pfx_rank_t *ir, int64_t version, int expect_replan)
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
    memset(w, 0, sizeof(*w));
    assert_int_equal(pfx_world_open(&w->pw, "tiny-llama.json", TRAIN, INFER,
                                    NULL), 0);
    snprintf(w->pw.directory, sizeof(w->pw.directory), "%s", directory);
    w->backend = backend;
    for (int64_t r = 0; r < w->pw.train.world; r++)
        start_publisher(w, r, 1);
}

/* Also the teardown of every test: after a failed assertion it kills the
 * publishers still running. */
static void world_close(world_t *w, int kill_them)
{
    for (int r = 0; r < 2; r++)
        if (w->ranks[r].cap != NULL)
            pfx_rank_close(&w->ranks[r]);
    for (size_t r = 0; r < sizeof(w->pubs) / sizeof(w->pubs[0]); r++)
        pfx_stop(&w->pubs[r], kill_them);
    pfx_world_close(&w->pw);
}

/* The whole scenario on one directory and one backend. */
static void scenario(const char *directory, const char *backend)
{
    world_t *w = &world;
    pfx_rank_t *ranks = w->ranks;
    world_open(w, directory, backend);
    for (int64_t r = 0; r < 2; r++) {
        open_rank(w, r, &ranks[r], 5);
        pull_ok(&ranks[r], 1, 1);                /* cold: plan */
        expect_params(w, r, &ranks[r]);
    }
    publish_version(w, 2);
    for (int64_t r = 0; r < 2; r++) {
        memset(ranks[r].params[0], 0xEE, 16);   /* must be rewritten */
        pull_ok(&ranks[r], 2, 0);                /* warm: same topology */
        expect_params(w, r, &ranks[r]);
    }
    /* trainer 0 restarts: new process, new addresses and keys */
    pfx_stop(&w->pubs[0], 1);
    start_publisher(w, 0, 3);
    for (int64_t r = 1; r < w->pw.train.world; r++)
        assert_int_equal(pfx_send(&w->pubs[r], 3), 0);
    for (int64_t r = 0; r < 2; r++) {
        pull_ok(&ranks[r], 3, 1);                /* re-planned */
        expect_params(w, r, &ranks[r]);
    }
    /* a publisher dies after publishing version 4: the pull fails within its
     * timeout, install is not called, the destination keeps its bytes */
    publish_version(w, 4);
    rs_version_info_t info;
    rs_dir_h dir;
    rs_diag_t diag;
    assert_int_equal(rs_dir_open(w->pw.directory, &diag, &dir), RS_OK);
    assert_int_equal(rs_dir_wait_ready(dir, MODEL, 4, 20, 0, &diag, &info), RS_OK);
    for (int64_t r = 0; r < w->pw.train.world; r++)
        pfx_stop(&w->pubs[r], 1);
    pfx_rank_t *ir = &ranks[0];
    int before = ir->installs;
    pfx_rank_fill(ir, 0x5A);
    rs_pull_result_t res;
    rs_status_t st = rs_receiver_pull(ir->recv, 4, &diag, &res);
    if (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT)
        fail_msg("pull from a dead publisher: %s: %s", rs_status_str(st), diag.msg);
    assert_int_equal(ir->installs, before);
    pfx_expect_untouched(ir);
    /* a conflicting replay of a published slot is refused */
    const char bogus[] = "{\"schema\": \"mx.reshard.shard_table.v1\"}";
    assert_int_equal(rs_dir_publish(dir, MODEL, 1, 0, bogus, sizeof(bogus) - 1, &diag),
                     RS_ERR_INPUT);
    rs_dir_close(dir);
    world_close(w, 0);
}

static char tmpdir[256];

static void file_dir(char *out, size_t n)
{
    tmp_dir(tmpdir, sizeof(tmpdir), "refit");
    snprintf(out, n, "file:%s", tmpdir);
}

/* Runs on every path, failed assertions included. */
static int world_teardown(void **state)
{
    (void)state;
    world_close(&world, 1);
    tmp_remove(tmpdir);
    tmpdir[0] = '\0';
    return 0;
}

static void test_file_ucx_sm(void **state)
{
    (void)state;
    char d[300];
    setenv("UCX_TLS", "sm", 1);
    file_dir(d, sizeof(d));
    scenario(d, "ucx");
}

static void test_file_ucx_tcp(void **state)
{
    (void)state;
    char d[300];
    setenv("UCX_TLS", "tcp", 1);
    file_dir(d, sizeof(d));
    scenario(d, "ucx");
}

static void test_file_cma(void **state)
{
    (void)state;
    char d[300];
    file_dir(d, sizeof(d));
    scenario(d, "cma");
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
    if (pfx_is_publisher(argc, argv))
        return pfx_publisher_main(argv[2], NULL);
    const char *only = getenv("RS_TEST_ONLY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_file_cma, world_teardown),
        cmocka_unit_test_teardown(test_file_ucx_sm, world_teardown),
        cmocka_unit_test_teardown(test_file_ucx_tcp, world_teardown),
        cmocka_unit_test_teardown(test_redis_ucx_sm, world_teardown),
        cmocka_unit_test_teardown(test_redis_ucx_tcp, world_teardown),
    };
    if (only != NULL)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
