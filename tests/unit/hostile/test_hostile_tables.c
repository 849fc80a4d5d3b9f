/* Hostile shard tables: shards that leave their full shape, negative or
 * overflowing offsets and shapes, ranks that disagree, addresses at and past
 * the top of the address space, element sizes that contradict the dtype,
 * one name declared with two shapes, unknown dtypes; each refused with a
 * message naming the tensor and the JSON path, leaving the sources as they
 * were. Overlapping shards with different bytes are not detectable, so what
 * is checked there is that a plan still writes each destination byte once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"
#include "mini_exec.h"
#include "reshard/reshard.h"

/* One table of rank "r0" with one tensor; the caller supplies the tensor
 * header fields and the shards array text. */
static char *table(const char *name, const char *dtype, int elsize,
                   const char *full_shape, const char *shards)
{
    static const char fmt[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r0\","
        " \"tensors\": [{\"name\": \"%s\", \"dtype\": \"%s\", \"elsize\": %d,"
        " \"full_shape\": %s, \"shards\": %s}]}";
    size_t n = strlen(fmt) + strlen(name) + strlen(dtype) +
               strlen(full_shape) + strlen(shards) + 32;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, fmt, name, dtype, elsize, full_shape, shards);
    return s;
}

/* Loads text into fresh sources that already hold one good tensor, expects
 * the failure, and checks that the good tensor is all that is left. */
static void expect_refused(const char *text, rs_status_t want, ...)
{
    static const char good[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"g\","
        " \"tensors\": [{\"name\": \"good\", \"dtype\": \"f32\", \"elsize\": 4,"
        " \"full_shape\": [4], \"shards\": [{\"addr\": 4096,"
        " \"shard_offset\": [0], \"shape\": [4]}]}]}";
    rs_sources_h s = NULL;
    rs_diag_t diag;
    va_list ap;
    const char *frag;

    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_load_string(s, good, strlen(good), "good.json",
                                            &diag), RS_OK);
    rs_status_t st = rs_sources_load_string(s, text, strlen(text),
                                            "hostile.json", &diag);
    HOSTILE_EXPECT(st, want, &diag, "hostile.json");
    va_start(ap, want);
    while ((frag = va_arg(ap, const char *)) != NULL)
        HOSTILE_EXPECT(st, want, &diag, frag);
    va_end(ap);
    /* all-or-nothing: only the earlier table's tensor remains */
    assert_int_equal(rs_sources_num_tensors(s), 1);
    assert_int_equal(rs_sources_num_shards(s), 1);
    assert_int_equal(rs_sources_num_tables(s), 1);
    rs_sources_destroy(s);
}

static void test_shard_leaves_full_shape(void **state)
{
    (void)state;
    char *t = table("w", "bf16", 2, "[8, 8]",
                    "[{\"addr\": 0, \"shard_offset\": [0, 4],"
                    " \"shape\": [8, 8]}]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].shards[0]", "'w'",
                   "leaves the full shape in dim 1", NULL);
    free(t);
    /* a valid first shard does not survive a bad second one */
    t = table("w", "bf16", 2, "[8]",
              "[{\"addr\": 0, \"shard_offset\": [0], \"shape\": [4]},"
              " {\"addr\": 64, \"shard_offset\": [6], \"shape\": [4]}]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].shards[1]",
                   "leaves the full shape in dim 0", NULL);
    free(t);
}

static void test_negative_offsets_and_shapes(void **state)
{
    (void)state;
    char *t = table("w", "f32", 4, "[8]",
                    "[{\"addr\": 0, \"shard_offset\": [-1], \"shape\": [4]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].shard_offset[0]",
                   "non-negative", NULL);
    free(t);
    t = table("w", "f32", 4, "[8]",
              "[{\"addr\": 0, \"shard_offset\": [0], \"shape\": [-4]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].shape[0]", "non-negative",
                   NULL);
    free(t);
    t = table("w", "f32", 4, "[-8]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].full_shape[0]",
                   "non-negative", NULL);
    free(t);
    t = table("w", "f32", 4, "[8]",
              "[{\"addr\": -4096, \"shard_offset\": [0], \"shape\": [8]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].addr", "non-negative", NULL);
    free(t);
}

static void test_overflowing_shapes(void **state)
{
    (void)state;
    /* element count fits, bytes do not */
    char *t = table("w", "f32", 4, "[4611686018427387904]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].full_shape", "overflows",
                   NULL);
    free(t);
    /* the product of the dims overflows */
    t = table("w", "u8", 1, "[4294967296, 4294967296]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].full_shape", "overflows",
                   NULL);
    free(t);
    /* offset + shape overflows int64 inside a huge dim */
    t = table("w", "u8", 1, "[9223372036854775807]",
              "[{\"addr\": 0, \"shard_offset\": [9223372036854775807],"
              " \"shape\": [1]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0]", "'w'", "leaves the full shape",
                   NULL);
    free(t);
    /* an integer past int64 is not JSON we accept */
    t = table("w", "u8", 1, "[99999999999999999999]", "[]");
    expect_refused(t, RS_ERR_INPUT, "malformed JSON", NULL);
    free(t);
}

static void test_ranks_disagree(void **state)
{
    (void)state;
    char *t = table("w", "bf16", 2, "[8, 8]",
                    "[{\"addr\": 0, \"shard_offset\": [0], \"shape\": [8, 8]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].shard_offset",
                   "rank 1 differs from full_shape rank 2", NULL);
    free(t);
    t = table("w", "bf16", 2, "[8, 8]",
              "[{\"addr\": 0, \"shard_offset\": [0, 0], \"shape\": [8, 8, 1]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].shape",
                   "rank 3 differs from full_shape rank 2", NULL);
    free(t);
    /* more dims than any tensor may have */
    t = table("w", "u8", 1, "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[]");
    expect_refused(t, RS_ERR_INPUT, "full_shape", "more than the limit of 16",
                   NULL);
    free(t);
    /* the same tensor published with another rank by a later table */
    t = table("good", "f32", 4, "[4, 1]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].full_shape", "'good'",
                   "disagrees with [4]", NULL);
    free(t);
}

static void test_elsize_and_dtype(void **state)
{
    (void)state;
    char *t = table("w", "bf16", 4, "[8]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].elsize", "'w'",
                   "elsize 4 disagrees with dtype bf16 (2 bytes)", NULL);
    free(t);
    t = table("w", "f12", 2, "[8]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].dtype", "unknown dtype \"f12\"",
                   NULL);
    free(t);
    /* the tensor of the earlier table, now with another dtype */
    t = table("good", "i32", 4, "[4]", "[]");
    expect_refused(t, RS_ERR_INPUT, "tensors[0].dtype", "'good'",
                   "dtype i32 disagrees with f32", NULL);
    free(t);

    /* the programmatic entry point holds shards to the same rule */
    rs_sources_h s = NULL;
    rs_diag_t diag;
    int64_t full = 8, off = 0, shape = 8;
    rs_shard_desc_t d = {.tensor = "w", .dtype = RS_DTYPE_BF16, .elsize = 4,
                         .ndim = 1, .full_shape = &full, .session = "r0",
                         .addr = 0, .offset = &off, .shape = &shape};
    assert_int_equal(rs_sources_create(&s), RS_OK);
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'w'", "elsize 4 disagrees with dtype bf16");
    d.elsize = 2;
    d.dtype = (rs_dtype_t)999;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'w'", "invalid dtype");
    assert_int_equal(rs_sources_num_shards(s), 0);
    rs_sources_destroy(s);
}

static void test_duplicate_names(void **state)
{
    (void)state;
    static const char two[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r0\","
        " \"tensors\": ["
        "{\"name\": \"w\", \"dtype\": \"f32\", \"elsize\": 4,"
        " \"full_shape\": [8, 8], \"shards\": [{\"addr\": 0,"
        " \"shard_offset\": [0, 0], \"shape\": [8, 8]}]},"
        "{\"name\": \"w\", \"dtype\": \"f32\", \"elsize\": 4,"
        " \"full_shape\": [4, 4], \"shards\": []}]}";
    expect_refused(two, RS_ERR_INPUT, "tensors[1].full_shape", "'w'",
                   "full_shape [4, 4] disagrees with [8, 8]", NULL);
}

/* Addresses are int64 in tables, so JSON tops out below 2^63; the API takes
 * any u64 range that does not wrap. */
static void test_addresses_near_the_top(void **state)
{
    (void)state;
    char *t = table("w", "f32", 4, "[8]",
                    "[{\"addr\": 9223372036854775800, \"shard_offset\": [0],"
                    " \"shape\": [8]}]");
    expect_refused(t, RS_ERR_INPUT, "shards[0].addr", "'w'",
                   "overflows the address space", NULL);
    free(t);
    /* the last byte exactly at 2^63-1 is fine */
    t = table("w", "f32", 4, "[8]",
              "[{\"addr\": 9223372036854775775, \"shard_offset\": [0],"
              " \"shape\": [8]}]");
    rs_sources_h s = NULL;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_load_string(s, t, strlen(t), "top.json",
                                            &diag), RS_OK);
    rs_sources_destroy(s);
    free(t);

    int64_t full = 8, off = 0, shape = 8;
    rs_shard_desc_t d = {.tensor = "w", .dtype = RS_DTYPE_U8, .elsize = 1,
                         .ndim = 1, .full_shape = &full, .session = "r0",
                         .addr = UINT64_MAX - 7, .offset = &off,
                         .shape = &shape};
    assert_int_equal(rs_sources_create(&s), RS_OK);
    /* UINT64_MAX - 7 + 8 wraps to 0 */
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'w'", "'r0'", "overflows the address space");
    d.addr = UINT64_MAX;
    shape = 1;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "overflows the address space");
    assert_int_equal(rs_sources_num_shards(s), 0);
    rs_sources_destroy(s);
}

/* A shard whose last byte is UINT64_MAX - 1 (end exactly UINT64_MAX) is
 * accepted and planned without wrapping: one segment at its address. */
static void test_plan_at_the_top(void **state)
{
    (void)state;
    rs_sources_h s = NULL;
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t params;
    rs_diag_t diag;
    int64_t full = 8, off = 0, shape = 8, stride = 1;
    rs_shard_desc_t d = {.tensor = "w", .dtype = RS_DTYPE_U8, .elsize = 1,
                         .ndim = 1, .full_shape = &full, .session = "r0",
                         .addr = UINT64_MAX - 8, .offset = &off,
                         .shape = &shape};
    rs_copy_desc_t c = {.src = "w", .param = "p", .ndim = 1,
                        .dest_shape = &full, .dest_stride = &stride,
                        .dest_dtype = RS_DTYPE_U8};
    size_t n = 0;

    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 1, &full, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    rs_plan_params_init(&params);
    assert_int_equal(rs_plan_build(cap, s, &params, &diag, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    assert_int_equal(n, 1);
    assert_true(seg[0].src_addr == UINT64_MAX - 8);
    assert_int_equal(seg[0].nbytes, 8);
    assert_int_equal(seg[0].dst_byte, 0);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* Sessions a and b publish overlapping boxes [0,6) and [4,8) of a 1-D
 * tensor with different bytes (a = 0x10+i, b = 0x80+i) - a lie we cannot
 * see. Planning must still write every destination byte exactly once, and
 * each from a shard that covers it. */
static void test_inconsistent_overlap(void **state)
{
    (void)state;
    uint8_t a[6], b[4], dst[8];
    int64_t full = 8, off_a = 0, len_a = 6, off_b = 4, len_b = 4, stride = 1;
    rs_shard_desc_t da = {.tensor = "w", .dtype = RS_DTYPE_U8, .elsize = 1,
                          .ndim = 1, .full_shape = &full, .session = "a",
                          .addr = 0x1000, .offset = &off_a, .shape = &len_a};
    rs_shard_desc_t db = da;
    rs_copy_desc_t c = {.src = "w", .param = "p", .ndim = 1,
                        .dest_shape = &full, .dest_stride = &stride,
                        .dest_dtype = RS_DTYPE_U8};
    rs_sources_h s = NULL;
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t params;
    rs_diag_t diag;
    char err[256];

    db.session = "b";
    db.addr = 0x2000;
    db.offset = &off_b;
    db.shape = &len_b;
    for (int i = 0; i < 6; i++)
        a[i] = (uint8_t)(0x10 + i);
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(0x80 + 4 + i);
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &da, &diag), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &db, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 1, &full, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    rs_plan_params_init(&params);
    assert_int_equal(rs_plan_build(cap, s, &params, &diag, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));

    mini_exec_t *mx = mini_exec_create(plan);
    assert_non_null(mx);
    mini_exec_add_shard(mx, "a", 0x1000, a, sizeof(a));
    mini_exec_add_shard(mx, "b", 0x2000, b, sizeof(b));
    memset(dst, 0, sizeof(dst));
    mini_exec_set_param(mx, 0, dst);
    assert_int_equal(mini_exec_run(mx, err, sizeof(err)), 0);
    const uint8_t *writes = mini_exec_param_writes(mx, 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(writes[i], 1);
        int from_a = i < 6 && dst[i] == 0x10 + i;
        int from_b = i >= 4 && dst[i] == 0x80 + i;
        if (!from_a && !from_b)
            fail_msg("byte %d is 0x%02x: from neither shard", i, dst[i]);
    }
    mini_exec_destroy(mx);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* Failing file loads close what they open. */
static void test_file_errors_release_fds(void **state)
{
    (void)state;
    char path[] = "/tmp/rs_hostile_tableXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *t = table("w", "bf16", 4, "[8]", "[]");
    assert_int_equal(write(fd, t, strlen(t)), (ssize_t)strlen(t));
    close(fd);
    free(t);

    rs_sources_h s = NULL;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    int before = hostile_count_fds();
    for (int i = 0; i < 50; i++) {
        HOSTILE_EXPECT(rs_sources_load_file(s, path, &diag), RS_ERR_INPUT,
                       &diag, path, "elsize 4 disagrees");
        HOSTILE_EXPECT(rs_sources_load_file(s, "/nonexistent/t.json", &diag),
                       RS_ERR_IO, &diag, "/nonexistent/t.json");
        HOSTILE_EXPECT(rs_sources_load_file(s, "/tmp", &diag), RS_ERR_IO,
                       &diag, "/tmp");
    }
    assert_int_equal(hostile_count_fds(), before);
    rs_sources_destroy(s);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_leaves_full_shape),
        cmocka_unit_test(test_negative_offsets_and_shapes),
        cmocka_unit_test(test_overflowing_shapes),
        cmocka_unit_test(test_ranks_disagree),
        cmocka_unit_test(test_elsize_and_dtype),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_addresses_near_the_top),
        cmocka_unit_test(test_plan_at_the_top),
        cmocka_unit_test(test_inconsistent_overlap),
        cmocka_unit_test(test_file_errors_release_fds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
