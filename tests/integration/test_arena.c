/* Publisher staging over ucx (UCX_TLS=sm and tcp) and cma. One publisher
 * holds tensor "w" [ROWS, COLS] (u8) as two row halves; this process pulls
 * the whole tensor with a receiver (digests verified) and compares every
 * byte with th_value(). Copy-in arenas: the caller's buffers are
 * overwritten right after each publish and the receiver still gets the
 * published version; table addresses are not the caller's; a new version
 * before the last is released is refused, accepted once it is; a shard
 * added later grows the arena. In place: shards in rs_publisher_alloc
 * memory, malloc'd memory refused, the memory surviving an unregister
 * (exposer reset) and serving again. Allocations: one-sided over sm and
 * cma, not over tcp; UCX_ALLOC_PRIO=heap forces UCX's silent fallback to
 * ordinary memory, told once through the notice callback, and reads still
 * byte-exact. Bad arguments get clear errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "two_halves.h"
#include "u8_rows.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define MODEL "arena"
#define ROWS TH_ROWS
#define HALF TH_HALF
#define COLS TH_COLS /* odd: slots are padded inside the arena */
#define GARBAGE TH_GARBAGE

typedef struct world {
    dir_env_t env;
    const char *backend;
    rs_publisher_h pub;
    uint8_t *half[2];     /* the caller's shards (malloc or alloc) */
    int owned;            /* half[] are malloc'd */
    int notices, fallback_notices;
    char notice[RS_DIAG_MSG_MAX];
} world_t;

static void on_notice(void *ctx, const char *msg)
{
    world_t *w = ctx;
    w->notices++;
    if (strstr(msg, "ordinary memory") != NULL) {
        w->fallback_notices++;
        snprintf(w->notice, sizeof(w->notice), "%s", msg);
    }
}

static world_t *world_open(const char *backend, const char *tls)
{
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    assert_int_equal(dir_env_setup(&w->env, "arena"), 0);
    w->backend = backend;
    if (tls != NULL)
        setenv("UCX_TLS", tls, 1);
    return w;
}

static void world_close(world_t *w)
{
    rs_publisher_destroy(w->pub);
    if (w->owned) {
        free(w->half[0]);
        free(w->half[1]);
    }
    dir_env_teardown(&w->env);
    unsetenv("UCX_TLS");
    free(w);
}

static void open_publisher(world_t *w, int staging)
{
    rs_publisher_params_t pp;
    rs_diag_t d;
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = w->backend;
    pp.heartbeat_s = 0.2;
    pp.staging = staging;
    pp.notice = on_notice;
    pp.notice_ctx = w;
    ASSERT_ST(rs_publisher_create(&pp, &d, &w->pub), RS_OK, d);
}

static rs_status_t register_half(world_t *w, int h, rs_diag_t *d)
{
    return th_register(w->pub, w->half[h], h, d);
}

static void malloc_halves(world_t *w)
{
    rs_diag_t d;
    w->owned = 1;
    for (int h = 0; h < 2; h++) {
        w->half[h] = malloc(HALF * COLS);
        assert_non_null(w->half[h]);
        ASSERT_ST(register_half(w, h, &d), RS_OK, d);
    }
}

/* A capture of the whole of "w" into one param "w". */
static rs_capture_h open_capture(void)
{
    return u8_whole_capture("w", ROWS, COLS);
}

/* Pulls version v of the whole tensor and checks every byte; releases the
 * version after installing when `release` is set. */
static void pull_exact(world_t *w, int64_t v, int release)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_pull_result_t res;
    rs_diag_t d;
    static uint8_t dest[ROWS * COLS];
    rs_capture_h cap = open_capture();
    rs_receiver_params_init(&rp);
    rp.directory = w->env.url;
    rp.model = MODEL;
    rp.backend = w->backend;
    rp.discover_timeout_s = 10;
    rp.timeout_s = 20;
    rp.release_after = release;
    ASSERT_ST(rs_receiver_create(&rp, cap, &d, &r), RS_OK, d);
    memset(dest, 0, sizeof(dest));
    ASSERT_ST(rs_receiver_bind(r, 0, dest, sizeof(dest), RS_MEM_HOST, &d),
              RS_OK, d);
    ASSERT_ST(rs_receiver_pull(r, v, &d, &res), RS_OK, d);
    assert_int_equal(res.version, v);
    rs_receiver_destroy(r);
    rs_capture_destroy(cap);
    th_expect(dest, 0, COLS, v, "");
}

/* The addresses slot 0's table of version v lists, in table order. */
static size_t table_addrs(world_t *w, int64_t v, uint64_t *addrs, size_t cap)
{
    rs_sources_h src = dir_env_table(&w->env, MODEL, v, 0);
    assert_non_null(src);
    size_t n = rs_sources_num_shards(src);
    for (size_t i = 0; i < n && i < cap; i++) {
        rs_shard_desc_t sh;
        rs_sources_shard(src, i, &sh);
        addrs[i] = sh.addr;
    }
    rs_sources_destroy(src);
    return n;
}

static void publish(world_t *w, int64_t v)
{
    rs_diag_t d;
    ASSERT_ST(rs_publisher_publish(w->pub, v, &d), RS_OK, d);
}

static void wait_released(world_t *w, int64_t v)
{
    rs_diag_t d;
    ASSERT_ST(rs_publisher_wait_released(w->pub, v, 20, &d), RS_OK, d);
}

static void release_in_directory(world_t *w, int64_t v)
{
    rs_dir_h dir;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, MODEL, v, &d), RS_OK, d);
    rs_dir_close(dir);
}

/* ---- copy-in arenas -------------------------------------------------- */

static int inside(uint64_t a, const uint8_t *buf)
{
    return a >= (uint64_t)(uintptr_t)buf &&
           a < (uint64_t)(uintptr_t)buf + HALF * COLS;
}

static void arena_versions(world_t *w)
{
    uint64_t addrs[4];
    for (int64_t v = 1; v <= 3; v++) {
        th_fill(w->half, v);
        publish(w, v);
        th_scribble(w->half); /* the trainer trains on: the arena holds v */
        assert_int_equal(table_addrs(w, v, addrs, 4), 2);
        for (int i = 0; i < 2; i++) {
            assert_false(inside(addrs[i], w->half[0]));
            assert_false(inside(addrs[i], w->half[1]));
            assert_int_equal(addrs[i] % 64, 0);
        }
        pull_exact(w, v, 1);
        wait_released(w, v);
    }
}

/* A new version while the arena's is not released is refused and leaves
 * the arena alone; released in the directory, it goes ahead. */
static void arena_refuses_unreleased(world_t *w)
{
    rs_diag_t d;
    th_fill(w->half, 4);
    publish(w, 4);
    pull_exact(w, 4, 0); /* read, not released */
    th_fill(w->half, 5);
    ASSERT_ST(rs_publisher_publish(w->pub, 5, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "cannot publish version 5");
    ASSERT_MSG_HAS(d, "still serves version 4");
    th_scribble(w->half);
    pull_exact(w, 4, 0); /* still version 4's bytes */
    publish(w, 4);       /* a republish copies nothing */
    pull_exact(w, 4, 0);
    release_in_directory(w, 4);
    th_fill(w->half, 5);
    publish(w, 5);
    th_scribble(w->half);
    pull_exact(w, 5, 1);
    wait_released(w, 5);
}

/* A third shard after publishing: the arena outgrows itself. */
static void arena_grows(world_t *w)
{
    rs_diag_t d;
    const int64_t full[1] = {20000}, off[1] = {0}, shape[1] = {20000};
    uint8_t *b = malloc(20000);
    assert_non_null(b);
    for (int i = 0; i < 20000; i++)
        b[i] = (uint8_t)(i * 13);
    ASSERT_ST(rs_publisher_register(w->pub, "b", RS_DTYPE_U8, 1, full, off,
                                    shape, b, RS_MEM_HOST, &d), RS_OK, d);
    th_fill(w->half, 6);
    publish(w, 6);
    memset(b, 0, 20000);
    th_scribble(w->half);
    pull_exact(w, 6, 1); /* "w" only; "b" travels in the table */
    wait_released(w, 6);
    ASSERT_ST(rs_publisher_unregister(w->pub, "b", off, &d), RS_OK, d);
    free(b);
    th_fill(w->half, 7);
    publish(w, 7);
    th_scribble(w->half);
    pull_exact(w, 7, 1);
    wait_released(w, 7);
}

static void arena_scenario(const char *backend, const char *tls)
{
    world_t *w = world_open(backend, tls);
    DIR_ENV_NEED(&w->env);
    open_publisher(w, RS_STAGING_ARENA);
    malloc_halves(w);
    arena_versions(w);
    arena_refuses_unreleased(w);
    arena_grows(w);
    assert_int_equal(w->fallback_notices, 0);
    world_close(w);
}

static void test_arena_ucx_sm(void **state)
{
    (void)state;
    arena_scenario("ucx", "sm");
}

static void test_arena_ucx_tcp(void **state)
{
    (void)state;
    arena_scenario("ucx", "tcp");
}

static void test_arena_cma(void **state)
{
    (void)state;
    arena_scenario("cma", NULL);
}

/* ---- in place ---------------------------------------------------------- */

static void in_place_scenario(const char *backend, const char *tls)
{
    rs_diag_t d;
    void *mem;
    uint64_t addrs[4];
    world_t *w = world_open(backend, tls);
    DIR_ENV_NEED(&w->env);
    open_publisher(w, RS_STAGING_IN_PLACE);
    /* malloc'd memory is refused, naming the tensor */
    uint8_t *heap = malloc(HALF * COLS);
    w->half[0] = heap;
    ASSERT_ST(register_half(w, 0, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "tensor 'w'");
    ASSERT_MSG_HAS(d, "in_place");
    free(heap);
    ASSERT_ST(rs_publisher_alloc(w->pub, 2 * HALF * COLS, &d, &mem), RS_OK, d);
    assert_int_equal((uintptr_t)mem % 4096, 0);
    w->half[0] = mem;
    w->half[1] = (uint8_t *)mem + HALF * COLS;
    for (int h = 0; h < 2; h++)
        ASSERT_ST(register_half(w, h, &d), RS_OK, d);
    for (int64_t v = 1; v <= 2; v++) {
        th_fill(w->half, v);
        publish(w, v);
        assert_int_equal(table_addrs(w, v, addrs, 4), 2);
        assert_true(inside(addrs[0], w->half[0]) ||
                    inside(addrs[0], w->half[1]));
        pull_exact(w, v, 1);
        wait_released(w, v);
    }
    /* unregistering resets the exposer; the allocation stays and serves
     * again once registered anew */
    const int64_t second[2] = {HALF, 0};
    ASSERT_ST(rs_publisher_free(w->pub, mem, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "tensor 'w' is registered in it");
    ASSERT_ST(rs_publisher_unregister(w->pub, "w", second, &d), RS_OK, d);
    th_fill(w->half, 3); /* the memory is still ours to write */
    ASSERT_ST(register_half(w, 1, &d), RS_OK, d);
    publish(w, 3);
    pull_exact(w, 3, 1);
    wait_released(w, 3);
    assert_int_equal(w->fallback_notices, 0);
    world_close(w);
}

static void test_in_place_ucx_sm(void **state)
{
    (void)state;
    in_place_scenario("ucx", "sm");
}

static void test_in_place_ucx_tcp(void **state)
{
    (void)state;
    in_place_scenario("ucx", "tcp");
}

static void test_in_place_cma(void **state)
{
    (void)state;
    in_place_scenario("cma", NULL);
}

/* ---- how allocations are reached --------------------------------------- */

static void expect_reach(const char *backend, int one_sided, int fallback)
{
    rs_exposer_h x;
    rs_exposer_memory_t m;
    rs_diag_t d;
    uint8_t *p;
    ASSERT_ST(rs_exposer_create(backend, &d, &x), RS_OK, d);
    ASSERT_ST(rs_exposer_alloc(x, 10000, &d, (void **)&p), RS_OK, d);
    assert_int_equal(rs_exposer_memory(x, p + 9999, &m), RS_OK);
    assert_ptr_equal(m.base, p);
    assert_true(m.nbytes >= 10000);
    for (uint64_t i = 0; i < m.nbytes; i++)
        if (p[i] != 0)
            fail_msg("allocation byte %llu is %u, not zero",
                     (unsigned long long)i, p[i]);
    if (m.one_sided != one_sided || m.fallback != fallback)
        fail_msg("%s (UCX_TLS=%s, UCX_ALLOC_PRIO=%s): one_sided %d fallback "
                 "%d, want %d %d", backend, getenv("UCX_TLS"),
                 getenv("UCX_ALLOC_PRIO"), m.one_sided, m.fallback,
                 one_sided, fallback);
    rs_exposer_destroy(x);
}

static void test_reach(void **state)
{
    (void)state;
    expect_reach("cma", 1, 0);
    setenv("UCX_TLS", "sm", 1);
    expect_reach("ucx", 1, 0);
    setenv("UCX_ALLOC_PRIO", "heap", 1);
    expect_reach("ucx", 0, 1);
    unsetenv("UCX_ALLOC_PRIO");
    setenv("UCX_TLS", "tcp", 1); /* no shared memory offered: no fallback */
    expect_reach("ucx", 0, 0);
    unsetenv("UCX_TLS");
}

/* UCX gives heap memory: the notice comes once, reads are still exact. */
static void test_fallback_notice(void **state)
{
    (void)state;
    rs_diag_t d;
    void *extra;
    world_t *w = world_open("ucx", "sm");
    DIR_ENV_NEED(&w->env);
    setenv("UCX_ALLOC_PRIO", "heap", 1);
    open_publisher(w, RS_STAGING_ARENA);
    malloc_halves(w);
    th_fill(w->half, 1);
    publish(w, 1); /* the arena's allocation falls back */
    ASSERT_ST(rs_publisher_alloc(w->pub, 4096, &d, &extra), RS_OK, d);
    unsetenv("UCX_ALLOC_PRIO");
    assert_int_equal(w->fallback_notices, 1);
    if (strstr(w->notice, "publisher rank 0") == NULL ||
        strstr(w->notice, "emulated reads") == NULL ||
        strstr(w->notice, "copy-in arena") == NULL)
        fail_msg("notice '%s' does not say what and why", w->notice);
    th_scribble(w->half);
    pull_exact(w, 1, 1);
    wait_released(w, 1);
    ASSERT_ST(rs_publisher_free(w->pub, extra, &d), RS_OK, d);
    world_close(w);
}

/* ---- bad arguments ------------------------------------------------------- */

static void exposer_bad_args(void)
{
    rs_exposer_h x;
    rs_exposer_memory_t m;
    rs_diag_t d;
    void *p;
    uint8_t other[64];
    ASSERT_ST(rs_exposer_create("cma", &d, &x), RS_OK, d);
    ASSERT_ST(rs_exposer_alloc(x, 0, &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_exposer_alloc(NULL, 64, &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_exposer_alloc(x, 64, &d, NULL), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_exposer_alloc(x, 4096, &d, &p), RS_OK, d);
    assert_int_equal(rs_exposer_memory(x, other, &m), RS_ERR_INVALID_ARG);
    ASSERT_ST(rs_exposer_add_region(x, 0x1000, (uint8_t *)p + 4000, 200,
                                    RS_MEM_HOST, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "past the end of the allocation");
    ASSERT_ST(rs_exposer_free(x, other, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "not an allocation");
    ASSERT_ST(rs_exposer_add_region(x, 0x1000, p, 100, RS_MEM_HOST, &d),
              RS_OK, d);
    ASSERT_ST(rs_exposer_free(x, p, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "region at 0x1000 lies in it");
    rs_exposer_reset(x);
    ASSERT_ST(rs_exposer_free(x, p, &d), RS_OK, d);
    ASSERT_ST(rs_exposer_free(x, p, &d), RS_ERR_INVALID_ARG, d);
    rs_exposer_reset(NULL);
    rs_exposer_destroy(x);
}

static void test_bad_args(void **state)
{
    (void)state;
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t d;
    void *p;
    uint8_t other[64];
    world_t *w = world_open("cma", NULL);
    DIR_ENV_NEED(&w->env);
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.staging = 3;
    ASSERT_ST(rs_publisher_create(&pp, &d, &pub), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "staging 3");
    open_publisher(w, RS_STAGING_CALLER);
    ASSERT_ST(rs_publisher_alloc(w->pub, 0, &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_publisher_alloc(NULL, 64, &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_publisher_alloc(w->pub, 64, &d, NULL), RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_publisher_free(w->pub, other, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "not memory from rs_publisher_alloc");
    ASSERT_ST(rs_publisher_alloc(w->pub, 64, &d, &p), RS_OK, d);
    ASSERT_ST(rs_publisher_free(w->pub, (uint8_t *)p + 8, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_publisher_free(w->pub, p, &d), RS_OK, d);
    world_close(w);
    exposer_bad_args();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_ucx_sm),
        cmocka_unit_test(test_arena_ucx_tcp),
        cmocka_unit_test(test_arena_cma),
        cmocka_unit_test(test_in_place_ucx_sm),
        cmocka_unit_test(test_in_place_ucx_tcp),
        cmocka_unit_test(test_in_place_cma),
        cmocka_unit_test(test_reach),
        cmocka_unit_test(test_fallback_notice),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
