/* Memory types at every entry point that takes caller memory: device memory
 * (RS_MEM_CUDA, RS_MEM_ROCM) is refused with RS_ERR_UNSUPPORTED naming the
 * type and the tensor or param, a value outside the enum with
 * RS_ERR_INVALID_ARG, and the refused pointer is never read: it points at a
 * PROT_NONE page, so any dereference (a digest, a shadow copy, a read by
 * the wire) would crash the test. After a refusal nothing is registered or
 * bound: the publish lists only the host shard, a previous binding keeps
 * receiving byte-exact data, and an only-refused param stays unbound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dir_env.h"
#include "reshard/reshard.h"
#include "assert_status.h"
#include "u8_rows.h"

#define MODEL "memtypes"
#define ROWS 4
#define COLS 8
#define NBYTES (ROWS * COLS)
#define UNTOUCHED 0xEE

typedef struct world {
    dir_env_t env;
    void *noaccess;            /* one PROT_NONE page */
    size_t page;
    uint8_t src[NBYTES];       /* the published shard of "a" */
    rs_publisher_h pub;
    rs_capture_h cap;
    int installs;
} world_t;

/* The ground truth: element (r, c) of tensor "a". */
static uint8_t value_at(int r, int c) { return (uint8_t)(r * 37 + c * 5 + 1); }

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((world_t *)ctx)->installs++;
    return RS_OK;
}

static void expect_truth(const uint8_t *dest)
{
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            if (dest[r * COLS + c] != value_at(r, c))
                fail_msg("a[%d][%d] = %u, want %u", r, c,
                         dest[r * COLS + c], value_at(r, c));
}

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (w == NULL || dir_env_setup(&w->env, "memtypes") != 0)
        return -1;
    w->page = (size_t)sysconf(_SC_PAGESIZE);
    w->noaccess = mmap(NULL, w->page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (w->noaccess == MAP_FAILED)
        return -1;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            w->src[r * COLS + c] = value_at(r, c);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    rs_publisher_destroy(w->pub);
    rs_capture_destroy(w->cap);
    munmap(w->noaccess, w->page);
    dir_env_teardown(&w->env);
    free(w);
    return 0;
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(rs_mem_type_str(RS_MEM_HOST), "host");
    assert_string_equal(rs_mem_type_str(RS_MEM_CUDA), "cuda");
    assert_string_equal(rs_mem_type_str(RS_MEM_ROCM), "rocm");
    assert_string_equal(rs_mem_type_str((rs_mem_type_t)9), "invalid");
}

/* "a" is registered from host memory; "b" from the PROT_NONE page as
 * device memory, refused. Version 1 is published with digests, which read
 * every registered shard: a registered "b" would crash here. */
static void test_publisher_register(void **state)
{
    world_t *w = *state;
    rs_publisher_params_t pp;
    rs_diag_t d;
    const int64_t full[2] = {ROWS, COLS}, off[2] = {0, 0};
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    ASSERT_ST(rs_publisher_create(&pp, &d, &w->pub), RS_OK, d);
    ASSERT_ST(rs_publisher_register(w->pub, "a", RS_DTYPE_U8, 2, full, off,
                                    full, w->src, RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_register(w->pub, "b", RS_DTYPE_U8, 2, full, off,
                                    full, w->noaccess, RS_MEM_CUDA, &d),
              RS_ERR_UNSUPPORTED, d);
    ASSERT_MSG_HAS(d, "cuda");
    ASSERT_MSG_HAS(d, "tensor 'b'");
    ASSERT_ST(rs_publisher_register(w->pub, "b", RS_DTYPE_U8, 2, full, off,
                                    full, (void *)1, RS_MEM_ROCM, &d),
              RS_ERR_UNSUPPORTED, d);
    ASSERT_MSG_HAS(d, "rocm");
    ASSERT_ST(rs_publisher_register(w->pub, "b", RS_DTYPE_U8, 2, full, off,
                                    full, w->noaccess, (rs_mem_type_t)7, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "invalid memory type 7");
    ASSERT_ST(rs_publisher_publish(w->pub, 1, &d), RS_OK, d);

    rs_dir_h dir;
    void *table;
    size_t len;
    rs_sources_h src;
    rs_shard_desc_t sh;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_read(dir, MODEL, 1, 0, &d, &table, &len), RS_OK, d);
    rs_dir_close(dir);
    assert_int_equal(rs_sources_create(&src), RS_OK);
    ASSERT_ST(rs_sources_load_string(src, table, len, "slot 0", &d), RS_OK, d);
    free(table);
    assert_int_equal(rs_sources_num_shards(src), 1);
    rs_sources_shard(src, 0, &sh);
    assert_string_equal(sh.tensor, "a");
    rs_sources_destroy(src);
}

/* One param "a" [ROWS, COLS] u8, read whole from tensor "a". */
static void open_capture(world_t *w)
{
    if (w->cap == NULL)
        w->cap = u8_whole_capture("a", ROWS, COLS);
}

static rs_receiver_h open_receiver(world_t *w)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_diag_t d;
    open_capture(w);
    rs_receiver_params_init(&rp);
    rp.directory = w->env.url;
    rp.model = MODEL;
    rp.backend = "cma";
    rp.discover_timeout_s = 10;
    rp.timeout_s = 10;
    rp.install = on_install;
    rp.install_ctx = w;
    ASSERT_ST(rs_receiver_create(&rp, w->cap, &d, &r), RS_OK, d);
    return r;
}

/* A refused rebind keeps the previous binding (the pull lands there, byte
 * for byte); a param only ever refused stays unbound (the pull says so and
 * does not install). Neither reads the PROT_NONE page. */
static void test_receiver_bind(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    rs_pull_result_t res;
    uint8_t dest[NBYTES];
    memset(dest, UNTOUCHED, sizeof(dest));
    rs_receiver_h r = open_receiver(w);
    ASSERT_ST(rs_receiver_bind(r, 0, dest, NBYTES, RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_receiver_bind(r, 0, w->noaccess, NBYTES, RS_MEM_CUDA, &d),
              RS_ERR_UNSUPPORTED, d);
    ASSERT_MSG_HAS(d, "cuda");
    ASSERT_MSG_HAS(d, "param 'a'");
    ASSERT_ST(rs_receiver_bind(r, 0, w->noaccess, NBYTES, (rs_mem_type_t)-1,
                               &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "invalid memory type");
    w->installs = 0;
    ASSERT_ST(rs_receiver_pull(r, 1, &d, &res), RS_OK, d);
    assert_int_equal(w->installs, 1);
    expect_truth(dest);
    rs_receiver_destroy(r);

    r = open_receiver(w);
    ASSERT_ST(rs_receiver_bind(r, 0, w->noaccess, NBYTES, RS_MEM_ROCM, &d),
              RS_ERR_UNSUPPORTED, d);
    ASSERT_MSG_HAS(d, "rocm");
    w->installs = 0;
    ASSERT_ST(rs_receiver_pull(r, 1, &d, &res), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "not bound");
    assert_int_equal(w->installs, 0);
    rs_receiver_destroy(r);
}

/* The executor over the local transport, reading w->src as session 0. */
static void test_exec_bind(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    rs_sources_h src;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    const int64_t full[2] = {ROWS, COLS}, off[2] = {0, 0};
    uint8_t dest[NBYTES];
    open_capture(w);
    assert_int_equal(rs_sources_create(&src), RS_OK);
    rs_shard_desc_t sh = {"a", RS_DTYPE_U8, 1, 2, full, "s0", 0, 0x4000,
                          off, full, NULL};
    ASSERT_ST(rs_sources_add_shard(src, &sh, &d), RS_OK, d);
    ASSERT_ST(rs_plan_build(w->cap, src, NULL, &d, &plan), RS_OK, d);
    ASSERT_ST(rs_transport_create(NULL, &d, &t), RS_OK, d);
    rs_region_t region = {0x4000, NBYTES, w->src};
    rs_peer_t peer = {"s0", 0, &region, 1, NULL, 0};
    ASSERT_ST(rs_transport_connect(t, 0, &peer, &d), RS_OK, d);
    ASSERT_ST(rs_exec_create(plan, t, NULL, &d, &x), RS_OK, d);
    ASSERT_ST(rs_exec_bind(x, 0, w->noaccess, NBYTES, RS_MEM_CUDA, &d),
              RS_ERR_UNSUPPORTED, d);
    ASSERT_MSG_HAS(d, "cuda");
    ASSERT_MSG_HAS(d, "param 'a'");
    ASSERT_ST(rs_exec_bind(x, 0, w->noaccess, NBYTES, (rs_mem_type_t)3, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_ST(rs_exec_run(x, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "not bound");
    memset(dest, UNTOUCHED, sizeof(dest));
    ASSERT_ST(rs_exec_bind(x, 0, dest, NBYTES, RS_MEM_HOST, &d), RS_OK, d);
    ASSERT_ST(rs_exec_run(x, &d), RS_OK, d);
    expect_truth(dest);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_sources_destroy(src);
}

/* A refused region is not added: a host region at the same published
 * address is accepted afterwards (an added one would overlap it). */
static void test_exposer_region(void **state)
{
    world_t *w = *state;
    static const char *const backends[] = {"cma", "ucx"};
    for (size_t b = 0; b < 2; b++) {
        rs_exposer_h x;
        rs_diag_t d;
        const void *blob;
        size_t len;
        ASSERT_ST(rs_exposer_create(backends[b], &d, &x), RS_OK, d);
        ASSERT_ST(rs_exposer_add_region(x, 0x1000, w->noaccess, w->page,
                                        RS_MEM_CUDA, &d),
                  RS_ERR_UNSUPPORTED, d);
        ASSERT_MSG_HAS(d, "cuda");
        ASSERT_MSG_HAS(d, "0x1000");
        ASSERT_ST(rs_exposer_add_region(x, 0x1000, w->noaccess, w->page,
                                        (rs_mem_type_t)5, &d),
                  RS_ERR_INVALID_ARG, d);
        ASSERT_ST(rs_exposer_add_region(x, 0x1000, w->src, NBYTES,
                                        RS_MEM_HOST, &d), RS_OK, d);
        ASSERT_ST(rs_exposer_start(x, &d), RS_OK, d);
        ASSERT_ST(rs_exposer_blob(x, &blob, &len), RS_OK, d);
        rs_exposer_destroy(x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_publisher_register),
        cmocka_unit_test(test_receiver_bind),
        cmocka_unit_test(test_exec_bind),
        cmocka_unit_test(test_exposer_region),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
