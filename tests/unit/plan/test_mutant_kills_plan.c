/* Planner cases the mutation gate (tests/mutate) found untested: a cell
 * held by several replicas and cut across them (split_bytes), which the
 * property test never reaches since its sources are far below the
 * default split. Executed by the tests' own executor (mini_exec) and
 * compared byte for byte with the source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mini_exec.h"
#include "reshard/reshard.h"

/* Slices of a cut cell are read from the least loaded replica only when
 * they are large (64 KiB and up: smaller ones stay on a session already
 * read, plan_walk.c), so the cells here are 256 KiB. */
#define ROWS 512
#define COLS 256
#define REPLICAS 3
#define HALF (ROWS / 2 * COLS * 4) /* bytes of one half, one grid cell */

static uint64_t addr_of(int j) { return 0x1000000u * (uint64_t)(j + 1); }

/* The [ROWS, COLS] f32 tensor "w" in two row halves (two grid cells of
 * HALF bytes), each half published by every replica, read whole into a
 * parameter of the same shape with split_bytes = `split`. Returns how many
 * sessions the plan reads from. */
static int split_run(uint64_t split)
{
    static const int64_t full[2] = {ROWS, COLS}, half[2] = {ROWS / 2, COLS};
    static const int64_t stride[2] = {COLS, 1};
    const size_t bytes = (size_t)ROWS * COLS * sizeof(float);
    float *src = malloc(bytes), *got = malloc(bytes);
    char session[REPLICAS][16];
    rs_sources_h s;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_plan_params_t pp;
    rs_diag_t d;
    assert_non_null(src);
    assert_non_null(got);
    for (int i = 0; i < ROWS * COLS; i++)
        src[i] = (float)i + 0.25f;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    for (int j = 0; j < REPLICAS; j++) {
        snprintf(session[j], sizeof(session[j]), "r%d", j);
        for (int h = 0; h < 2; h++) {
            const int64_t off[2] = {h * (ROWS / 2), 0};
            rs_shard_desc_t sh = {"w", RS_DTYPE_F32, 4, 2, full, session[j],
                                  0, addr_of(j) + (uint64_t)h * HALF, off,
                                  half, NULL};
            assert_int_equal(rs_sources_add_shard(s, &sh, &d), RS_OK);
        }
    }
    assert_int_equal(rs_capture_add_param(cap, "p", 2, full, RS_DTYPE_F32,
                                          &d), RS_OK);
    rs_copy_desc_t c = {"w", "p", NULL, 0, 0, 2, full, stride, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(cap, &c, &d), RS_OK);
    rs_plan_params_init(&pp);
    pp.split_bytes = split;
    assert_int_equal(rs_plan_build(cap, s, &pp, &d, &plan), RS_OK);

    mini_exec_t *mx = mini_exec_create(plan);
    memset(got, 0xEE, bytes);
    mini_exec_set_param(mx, 0, got);
    for (int j = 0; j < REPLICAS; j++)
        mini_exec_add_shard(mx, session[j], addr_of(j), src, bytes);
    char err[256];
    if (mini_exec_run(mx, err, sizeof(err)) != 0)
        fail_msg("split %llu: %s", (unsigned long long)split, err);
    const uint8_t *writes = mini_exec_param_writes(mx, 0);
    for (size_t i = 0; i < bytes; i++)
        if (writes[i] != 1)
            fail_msg("split %llu: byte %zu written %d times",
                     (unsigned long long)split, i, writes[i]);
    assert_memory_equal(got, src, bytes);
    free(src);
    free(got);
    mini_exec_destroy(mx);

    size_t n;
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    int used[REPLICAS] = {0}, sessions = 0;
    for (size_t i = 0; i < n; i++)
        used[seg[i].session] = 1;
    for (int j = 0; j < REPLICAS; j++)
        sessions += used[j];
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
    return sessions;
}

/* Two 256 KiB cells over three replicas: with a 64 KiB split each cell
 * is cut into one slice per replica (every byte read once, from all
 * three); a cell of exactly split_bytes is cut too; with splitting off, or
 * cells below split_bytes, each cell is read from one replica. */
static void test_replica_split(void **state)
{
    (void)state;
    assert_int_equal(split_run(64 << 10), REPLICAS);
    assert_int_equal(split_run(HALF), REPLICAS);
    assert_true(split_run(HALF + 1) < REPLICAS);
    assert_true(split_run(0) < REPLICAS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
