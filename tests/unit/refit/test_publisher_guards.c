/* What a publisher refuses so that nothing is published by accident, on a
 * file: directory with heartbeats off (so only the calls under test touch
 * the directory):
 * - a box registered twice, or overlapping a registered box of its tensor,
 *   named with both boxes; neighbours and other tensors are accepted, and
 *   after an unregister the index follows the shards that are left;
 * - a backend that cannot serve other processes, at create;
 * - wait_released for a version the publisher never published, or one it
 *   no longer serves as published, when the directory lacks it: refused
 *   naming the version, and the directory still lacks it. The version it
 *   published last and still serves is published again from its kept
 *   table (the table read back is that publish's, digest included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "reshard/dir.h"
#include "reshard/reshard.h"
#include "assert_status.h"

#define MODEL "guards"
#define ROWS 8
#define COLS 8

typedef struct world {
    dir_env_t env;
    rs_publisher_h pub;
    float w[ROWS * COLS];
    float spare[ROWS * COLS];
    int notices;
    char last_notice[1024];
} world_t;

static void on_notice(void *ctx, const char *msg)
{
    world_t *w = ctx;
    w->notices++;
    snprintf(w->last_notice, sizeof(w->last_notice), "%s", msg);
}

static rs_status_t create(world_t *w, const char *backend, rs_diag_t *d,
                          rs_publisher_h *pub_p)
{
    rs_publisher_params_t pp;
    rs_publisher_params_init(&pp);
    pp.directory = w->env.url;
    pp.model = MODEL;
    pp.world = 1;
    pp.backend = backend;
    pp.heartbeat_s = 0; /* only the calls under test touch the directory */
    pp.notice = on_notice;
    pp.notice_ctx = w;
    return rs_publisher_create(&pp, d, pub_p);
}

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    rs_diag_t d;
    if (w == NULL || dir_env_setup(&w->env, "pubguards") != 0)
        return -1;
    for (int i = 0; i < ROWS * COLS; i++)
        w->w[i] = (float)i * 0.5f;
    if (create(w, "cma", &d, &w->pub) != RS_OK) {
        fprintf(stderr, "create: %s\n", d.msg);
        return -1;
    }
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    rs_publisher_destroy(w->pub);
    dir_env_teardown(&w->env);
    free(w);
    return 0;
}

/* Registers rows [row, row + rows) x cols [col, col + cols) of the full
 * [ROWS, COLS] tensor `name`, at `base`. */
static rs_status_t reg(world_t *w, const char *name, int64_t row,
                       int64_t rows, int64_t col, int64_t cols, float *base,
                       rs_diag_t *d)
{
    const int64_t full[2] = {ROWS, COLS}, off[2] = {row, col};
    const int64_t shape[2] = {rows, cols};
    return rs_publisher_register(w->pub, name, RS_DTYPE_F32, 2, full, off,
                                 shape, base, RS_MEM_HOST, d);
}

static void test_same_box_twice_refused(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    ASSERT_ST(reg(w, "w", 0, 4, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(reg(w, "w", 0, 4, 0, COLS, w->spare, &d), RS_ERR_INVALID_ARG,
              d);
    ASSERT_MSG_HAS(d, "tensor 'w': box [0:4, 0:8] is registered twice");
    ASSERT_ST(reg(w, "w", 2, 4, 0, COLS, w->spare, &d), RS_ERR_INVALID_ARG,
              d);
    ASSERT_MSG_HAS(d, "tensor 'w': box [2:6, 0:8] overlaps box [0:4, 0:8] "
                      "registered before on this rank (both hold [2:4, "
                      "0:8])");
    ASSERT_ST(reg(w, "w", 3, 1, 7, 1, w->spare, &d), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "box [3:4, 7:8] overlaps box [0:4, 0:8]");
    /* a box of another number of dims is refused too */
    const int64_t full1[1] = {ROWS * COLS}, off1[1] = {0}, shape1[1] = {4};
    ASSERT_ST(rs_publisher_register(w->pub, "w", RS_DTYPE_F32, 1, full1, off1,
                                    shape1, w->spare, RS_MEM_HOST, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "a box of 1 dims cannot join the box of 2 dims");
    /* the neighbour, an empty box and another tensor's same box are fine */
    ASSERT_ST(reg(w, "w", 4, 4, 0, COLS, w->w + 4 * COLS, &d), RS_OK, d);
    ASSERT_ST(reg(w, "w", 2, 0, 0, COLS, w->spare, &d), RS_OK, d);
    ASSERT_ST(reg(w, "v", 0, 4, 0, COLS, w->spare, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_publish(w->pub, 1, &d), RS_OK, d);
    assert_int_equal(rs_publisher_num_served(w->pub), 3);
}

static void test_index_follows_unregister(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    const int64_t top[2] = {0, 0};
    ASSERT_ST(reg(w, "a", 0, 4, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(reg(w, "w", 0, 4, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(reg(w, "w", 4, 4, 0, COLS, w->w + 4 * COLS, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_unregister(w->pub, "w", top, &d), RS_OK, d);
    /* rows [0, 4) are free again, rows [4, 8) still taken */
    ASSERT_ST(reg(w, "w", 2, 2, 0, COLS, w->spare, &d), RS_OK, d);
    ASSERT_ST(reg(w, "w", 3, 2, 0, COLS, w->spare, &d), RS_ERR_INVALID_ARG,
              d);
    ASSERT_MSG_HAS(d, "box [3:5, 0:8] overlaps box");
    ASSERT_ST(reg(w, "a", 3, 1, 0, COLS, w->spare, &d), RS_ERR_INVALID_ARG,
              d);
    ASSERT_MSG_HAS(d, "tensor 'a': box [3:4, 0:8] overlaps box [0:4, 0:8]");
}

static void test_backend_checked_at_create(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    rs_publisher_h p = NULL;
    ASSERT_ST(create(w, "nccl", &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "publisher: backend 'nccl' is unknown (publishers use "
                      "ucx or cma)");
    ASSERT_ST(create(w, "local", &d, &p), RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "backend 'local' cannot serve other processes");
    assert_null(p);
}

/* The directory's state of version v: RS_ERR_INPUT when it lacks it. */
static rs_status_t dir_has(world_t *w, int64_t v)
{
    rs_dir_h dir;
    rs_diag_t d;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    rs_status_t st = rs_dir_wait_released(dir, MODEL, v, 0, &d);
    rs_dir_close(dir);
    return st;
}

/* Slot 0's table of version v, as the directory holds it. */
static char *table_of(world_t *w, int64_t v, size_t *len_p)
{
    rs_dir_h dir;
    rs_diag_t d;
    void *table = NULL;
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_read(dir, MODEL, v, 0, &d, &table, len_p), RS_OK, d);
    rs_dir_close(dir);
    return table;
}

/* The directory restarted without its data. */
static void wipe(world_t *w)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/dir/%s'", w->env.tmp, MODEL);
    assert_int_equal(system(cmd), 0);
}

static void test_never_published_is_refused(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    ASSERT_ST(reg(w, "w", 0, ROWS, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_wait_released(w->pub, 1, 0.2, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "publisher: version 1 was never published by "
                      "trainer-0 (rank 0)");
    ASSERT_ST(rs_publisher_publish(w->pub, 2, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_wait_released(w->pub, 7, 0, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "publisher: version 7 was never published by "
                      "trainer-0");
    assert_int_equal(dir_has(w, 7), RS_ERR_INPUT);
    assert_int_equal(dir_has(w, 1), RS_ERR_INPUT);
    assert_int_equal(w->notices, 0);
}

static void test_lost_version_published_again(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    rs_dir_h dir;
    ASSERT_ST(reg(w, "w", 0, ROWS, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_publish(w->pub, 3, &d), RS_OK, d);
    size_t want_len = 0, got_len = 0;
    char *want = table_of(w, 3, &want_len);
    wipe(w);
    assert_int_equal(dir_has(w, 3), RS_ERR_INPUT);
    /* the bytes change after the publish: the table published again is
     * still version 3's (its digest is of the bytes then) */
    w->w[0] = -1.0f;
    ASSERT_ST(rs_publisher_wait_released(w->pub, 3, 0.3, &d), RS_ERR_TIMEOUT,
              d);
    assert_int_equal(w->notices, 1);
    assert_non_null(strstr(w->last_notice, "version 3 vanished from "
                                           "directory"));
    char *got = table_of(w, 3, &got_len);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    ASSERT_ST(rs_dir_open(w->env.url, &d, &dir), RS_OK, d);
    ASSERT_ST(rs_dir_release(dir, MODEL, 3, &d), RS_OK, d);
    rs_dir_close(dir);
    ASSERT_ST(rs_publisher_wait_released(w->pub, 3, 5, &d), RS_OK, d);
    free(want);
    free(got);
}

static void test_superseded_version_is_refused(void **state)
{
    world_t *w = *state;
    rs_diag_t d;
    ASSERT_ST(reg(w, "w", 0, ROWS, 0, COLS, w->w, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_publish(w->pub, 1, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_publish(w->pub, 2, &d), RS_OK, d);
    wipe(w);
    ASSERT_ST(rs_publisher_wait_released(w->pub, 1, 0.2, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "publisher: version 1 of trainer-0 vanished from "
                      "directory");
    ASSERT_MSG_HAS(d, "cannot be published again: it now serves a later "
                      "version (version 2)");
    assert_int_equal(dir_has(w, 1), RS_ERR_INPUT);
    /* version 2 changes its registrations after its publish */
    const int64_t top[2] = {0, 0};
    ASSERT_ST(rs_publisher_unregister(w->pub, "w", top, &d), RS_OK, d);
    ASSERT_ST(rs_publisher_wait_released(w->pub, 2, 0.2, &d),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "its registrations changed since it was published");
    assert_int_equal(dir_has(w, 2), RS_ERR_INPUT);
    assert_int_equal(w->notices, 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_same_box_twice_refused),
        T(test_index_follows_unregister),
        T(test_backend_checked_at_create),
        T(test_never_published_is_refused),
        T(test_lost_version_published_again),
        T(test_superseded_version_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
