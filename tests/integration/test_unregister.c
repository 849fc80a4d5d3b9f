/* Unregistering a publisher's shard. One publisher (ucx) holds tensor "w"
 * [ROWS, COLS] as two shards, rows [0, HALF) and [HALF, ROWS). After the
 * second is unregistered its buffer is freed at once (under ASan any later
 * read of it by the library is a use-after-free), version 2 is published
 * with digests (which read every registered shard) and lists one shard; a
 * receiver of the whole tensor reports the rows no table covers and does
 * not install, one of the first half receives it byte for byte.
 * Unregistering what is not registered is a clear error that changes
 * nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define MODEL "unreg"
#define ROWS 8
#define HALF 4
#define COLS 64
#define UNTOUCHED 0xEE

typedef struct world {
    dir_env_t env;
    rs_publisher_h pub;
    uint8_t *half[2];          /* rows [0, HALF) and [HALF, ROWS) */
    int installs;
} world_t;

/* The ground truth: element (r, c) of "w" in version v. */
static uint8_t value_at(int v, int r, int c)
{
    return (uint8_t)(v * 101 + r * 7 + c * 3);
}

static void fill(world_t *w, int v)
{
    for (int h = 0; h < 2; h++)
        if (w->half[h] != NULL)
            for (int r = 0; r < HALF; r++)
                for (int c = 0; c < COLS; c++)
                    w->half[h][r * COLS + c] = value_at(v, h * HALF + r, c);
}

static rs_status_t on_install(void *ctx, rs_exec_h exec)
{
    (void)exec;
    ((world_t *)ctx)->installs++;
    return RS_OK;
}

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (w == NULL || dir_env_setup(&w->env, "unregister") != 0)
        return -1;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    rs_publisher_destroy(w->pub);
    free(w->half[0]);
    free(w->half[1]);
    dir_env_teardown(&w->env);
    free(w);
    return 0;
}

static void open_publisher(world_t *w)
{
    rs_publisher_params_t pp;
    rs_diag_t d;
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {HALF, COLS};
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = "ucx";
    pp.heartbeat_s = 0.2; /* running when unregister stops it */
    ASSERT_ST(rs_publisher_create(&pp, &d, &w->pub), RS_OK, d);
    for (int h = 0; h < 2; h++) {
        const int64_t off[2] = {h * HALF, 0};
        w->half[h] = malloc(HALF * COLS);
        assert_non_null(w->half[h]);
        ASSERT_ST(rs_publisher_register(w->pub, "w", RS_DTYPE_U8, 2, full,
                                        off, shape, w->half[h], RS_MEM_HOST,
                                        &d), RS_OK, d);
    }
}

/* A capture of rows [0, rows) of "w" into one param "w". */
static rs_capture_h open_capture(int rows)
{
    rs_capture_h cap;
    rs_diag_t d;
    const int64_t shape[2] = {rows, COLS}, stride[2] = {COLS, 1};
    rs_op_t nar = {.kind = RS_OP_NARROW, .arg = {0, 0, rows}};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_add_param(cap, "w", 2, shape, RS_DTYPE_U8, &d),
              RS_OK, d);
    rs_copy_desc_t c = {"w", "w", &nar, 1, 0, 2, shape, stride, RS_DTYPE_U8};
    ASSERT_ST(rs_capture_add_copy(cap, &c, &d), RS_OK, d);
    return cap;
}

/* Pulls version v of rows [0, rows) into dest (rows * COLS bytes). */
static rs_status_t pull(world_t *w, int64_t v, int rows, uint8_t *dest,
                        rs_diag_t *d)
{
    rs_receiver_params_t rp;
    rs_receiver_h r;
    rs_pull_result_t res;
    rs_capture_h cap = open_capture(rows);
    rs_receiver_params_init(&rp);
    rp.directory = w->env.url;
    rp.model = MODEL;
    rp.backend = "ucx";
    rp.discover_timeout_s = 10;
    rp.timeout_s = 10;
    rp.install = on_install;
    rp.install_ctx = w;
    ASSERT_ST(rs_receiver_create(&rp, cap, d, &r), RS_OK, *d);
    memset(dest, UNTOUCHED, (size_t)rows * COLS);
    ASSERT_ST(rs_receiver_bind(r, 0, dest, (uint64_t)rows * COLS,
                               RS_MEM_HOST, d), RS_OK, *d);
    rs_diag_clear(d);
    rs_status_t st = rs_receiver_pull(r, v, d, &res);
    rs_receiver_destroy(r);
    rs_capture_destroy(cap);
    return st;
}

static void expect_version(const uint8_t *dest, int v, int rows)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < COLS; c++)
            if (dest[r * COLS + c] != value_at(v, r, c))
                fail_msg("version %d: w[%d][%d] = %u, want %u", v, r, c,
                         dest[r * COLS + c], value_at(v, r, c));
}

static void expect_untouched(const uint8_t *dest, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (dest[i] != UNTOUCHED)
            fail_msg("byte %zu written by a failed pull", i);
}

/* The shards listed in slot 0's table of version v. */
static size_t table_shards(world_t *w, int64_t v)
{
    rs_sources_h src = dir_env_table(&w->env, MODEL, v, 0);
    assert_non_null(src);
    size_t n = rs_sources_num_shards(src);
    for (size_t i = 0; i < n; i++) {
        rs_shard_desc_t sh;
        rs_sources_shard(src, i, &sh);
        assert_string_equal(sh.tensor, "w");
    }
    rs_sources_destroy(src);
    return n;
}

static void test_unregister(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    uint8_t dest[ROWS * COLS];
    const int64_t second[2] = {HALF, 0}, nowhere[2] = {1, 0};
    open_publisher(w);
    fill(w, 1);
    ASSERT_ST(rs_publisher_publish(w->pub, 1, &d), RS_OK, d);
    assert_int_equal(table_shards(w, 1), 2);
    ASSERT_ST(pull(w, 1, ROWS, dest, &d), RS_OK, d);
    expect_version(dest, 1, ROWS);

    /* not registered: a clear error, and nothing changes */
    ASSERT_ST(rs_publisher_unregister(w->pub, "w", nowhere, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "tensor 'w'");
    ASSERT_MSG_HAS(d, "at offset [1, 0]");
    ASSERT_ST(rs_publisher_unregister(w->pub, "v", second, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "tensor 'v'");

    ASSERT_ST(rs_publisher_unregister(w->pub, "w", second, &d), RS_OK, d);
    free(w->half[1]); /* the library must not read it again */
    w->half[1] = NULL;
    ASSERT_ST(rs_publisher_unregister(w->pub, "w", second, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "at offset [4, 0]");

    fill(w, 2);
    ASSERT_ST(rs_publisher_publish(w->pub, 2, &d), RS_OK, d);
    assert_int_equal(table_shards(w, 2), 1);
    w->installs = 0;
    ASSERT_ST(pull(w, 2, ROWS, dest, &d), RS_ERR_INCOMPLETE, d);
    ASSERT_MSG_HAS(d, "of 'w' into 'w' (256 elements missing)");
    assert_int_equal(w->installs, 0);
    expect_untouched(dest, sizeof(dest));
    ASSERT_ST(pull(w, 2, HALF, dest, &d), RS_OK, d);
    assert_int_equal(w->installs, 1);
    expect_version(dest, 2, HALF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unregister),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
