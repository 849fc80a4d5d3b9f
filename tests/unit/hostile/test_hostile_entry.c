/* Hostile geometry given straight to the C entry points that take it, not
 * through a JSON reader that would refuse it first: rs_sources_add_shard
 * (negative offsets, boxes leaving or overflowing the full shape, negative
 * or overflowing extents, ranks out of range, an element size that
 * contradicts the dtype, byte ranges past the address space), rs_exec_bind
 * (no such param, too few bytes, no storage, an unknown memory type) and
 * rs_publisher_register (the same boxes, on a file: directory). Each is
 * refused with a message naming the tensor or param and what is wrong,
 * and adds nothing: the sources keep their shards, a later plan and run
 * are unaffected, the publisher serves nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_env.h"
#include "hostile.h"
#include "reshard/reshard.h"

typedef struct box_case {
    const char *what;
    int ndim;
    int64_t full[3], off[3], shape[3];
    const char *says; /* a fragment the refusal must hold */
} box_case_t;

#define BIG INT64_MAX

static const box_case_t bad_boxes[] = {
    {"negative offset in dim 0", 2, {8, 8}, {-1, 0}, {4, 8},
     "'w': shard of session 'r0' leaves the full shape in dim 0 (offset -1"},
    {"negative offset in dim 1", 2, {8, 8}, {0, -1}, {8, 4},
     "leaves the full shape in dim 1 (offset -1, shape 4, full 8)"},
    {"box past the full shape", 2, {8, 8}, {4, 0}, {5, 8},
     "leaves the full shape in dim 0 (offset 4, shape 5, full 8)"},
    {"one past in the last dim", 2, {8, 8}, {0, 1}, {8, 8},
     "leaves the full shape in dim 1 (offset 1, shape 8, full 8)"},
    {"offset past the full shape", 2, {8, 8}, {9, 0}, {0, 8},
     "leaves the full shape in dim 0 (offset 9, shape 0"},
    {"negative extent", 2, {8, 8}, {0, 0}, {-4, 8},
     "leaves the full shape in dim 0 (offset 0, shape -4"},
    {"negative full shape", 1, {-8}, {0}, {0},
     "'v': full_shape is negative or overflows"},
    {"offset + extent overflows int64", 1, {BIG / 8}, {BIG / 8 - 1},
     {BIG - 1}, "'v': shard of session 'r0' leaves the full shape in dim 0"},
    {"offset at INT64_MAX", 1, {8}, {BIG}, {1},
     "leaves the full shape in dim 0 (offset 9223372036854775807, shape 1"},
    {"full shape overflows int64 elements", 3, {BIG, BIG, 2}, {0, 0, 0},
     {1, 1, 1}, "'v': full_shape is negative or overflows"},
};

static rs_shard_desc_t desc_of(const box_case_t *c)
{
    rs_shard_desc_t d = {"w", RS_DTYPE_F32, 4, c->ndim, c->full, "r0", 0,
                         0x10000, c->off, c->shape, NULL};
    return d;
}

/* A good shard, so that each refusal can be shown to add nothing. */
static rs_sources_h one_good_shard(void)
{
    static const int64_t full[2] = {8, 8}, off[2] = {0, 0};
    rs_shard_desc_t d = {"w", RS_DTYPE_F32, 4, 2, full, "r0", 0, 0x10000,
                         off, full, NULL};
    rs_sources_h s;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    return s;
}

static void test_sources_add_shard(void **state)
{
    (void)state;
    rs_sources_h s = one_good_shard();
    rs_diag_t diag;
    for (size_t i = 0; i < sizeof(bad_boxes) / sizeof(bad_boxes[0]); i++) {
        const box_case_t *c = &bad_boxes[i];
        rs_shard_desc_t d = desc_of(c);
        d.tensor = c->ndim == 2 ? "w" : "v";
        print_message("%s\n", c->what);
        HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT,
                       &diag, c->says);
        assert_int_equal(rs_sources_num_shards(s), 1);
    }
    rs_sources_destroy(s);
}

static void test_sources_add_shard_fields(void **state)
{
    (void)state;
    static const box_case_t ok = {"", 2, {8, 8}, {0, 0}, {8, 8}, ""};
    static const int64_t other[2] = {8, 16};
    rs_sources_h s = one_good_shard();
    rs_diag_t diag;
    rs_shard_desc_t d = desc_of(&ok);
    d.tensor = "v";
    d.elsize = 2;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'v': elsize 2 disagrees with dtype f32 (4 bytes)");
    d = desc_of(&ok);
    d.tensor = "v";
    d.ndim = -1;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'v': rank -1 outside 0..16");
    d.ndim = RS_MAX_DIMS + 1;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'v': rank 17 outside 0..16");
    d = desc_of(&ok);
    d.tensor = "v";
    d.addr = UINT64_MAX - 16; /* 256 bytes from there wrap */
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'v': shard of session 'r0' at addr "
                   "18446744073709551599 overflows the address space");
    d = desc_of(&ok);
    d.tensor = "v";
    d.dtype = (rs_dtype_t)77;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'v': invalid dtype");
    d = desc_of(&ok);
    d.full_shape = other; /* "w" was published [8, 8] */
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INPUT, &diag,
                   "'w': full_shape disagrees with an earlier table");
    d = desc_of(&ok);
    d.tensor = NULL;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INVALID_ARG,
                   &diag, "NULL argument");
    d = desc_of(&ok);
    d.offset = NULL;
    HOSTILE_EXPECT(rs_sources_add_shard(s, &d, &diag), RS_ERR_INVALID_ARG,
                   &diag, "NULL");
    assert_int_equal(rs_sources_num_shards(s), 1);
    rs_sources_destroy(s);
}

/* ---- rs_exec_bind ---- */

static void test_exec_bind(void **state)
{
    (void)state;
    static const int64_t full[2] = {8, 8}, off[2] = {0, 0};
    rs_shard_desc_t d = {"w", RS_DTYPE_F32, 4, 2, full, "r0", 0, 0x10000,
                         off, full, NULL};
    static float w[64], p[64];
    rs_sources_h s;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 2, full, RS_DTYPE_F32,
                                          &diag), RS_OK);
    int64_t st[2] = {8, 1};
    rs_copy_desc_t c = {"w", "p", NULL, 0, 0, 2, full, st, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    assert_int_equal(rs_plan_build(cap, s, NULL, &diag, &plan), RS_OK);
    assert_int_equal(rs_transport_create(NULL, &diag, &t), RS_OK);
    rs_region_t reg = {0x10000, sizeof(w), w};
    rs_peer_t peer = {"r0", 0, &reg, 1, NULL, 0};
    assert_int_equal(rs_transport_connect(t, 0, &peer, &diag), RS_OK);
    assert_int_equal(rs_exec_create(plan, t, NULL, &diag, &x), RS_OK);
    HOSTILE_EXPECT(rs_exec_bind(x, 1, p, sizeof(p), RS_MEM_HOST, &diag),
                   RS_ERR_INVALID_ARG, &diag, "no param 1");
    HOSTILE_EXPECT(rs_exec_bind(x, SIZE_MAX, p, sizeof(p), RS_MEM_HOST,
                                &diag), RS_ERR_INVALID_ARG, &diag, "no param");
    HOSTILE_EXPECT(rs_exec_bind(x, 0, p, sizeof(p) - 1, RS_MEM_HOST, &diag),
                   RS_ERR_INVALID_ARG, &diag,
                   "param 'p' needs 256 bytes, 255 bound");
    HOSTILE_EXPECT(rs_exec_bind(x, 0, p, sizeof(p), (rs_mem_type_t)99,
                                &diag), RS_ERR_INVALID_ARG, &diag, "'p'");
    /* nothing bound: a run refuses before any byte moves */
    HOSTILE_EXPECT(rs_exec_run(x, &diag), RS_ERR_INVALID_ARG, &diag,
                   "param 'p' is written by the plan but not bound");
    /* NULL storage binds nothing: the run still refuses */
    assert_int_equal(rs_exec_bind(x, 0, NULL, sizeof(p), RS_MEM_HOST, &diag),
                     RS_OK);
    HOSTILE_EXPECT(rs_exec_run(x, &diag), RS_ERR_INVALID_ARG, &diag,
                   "param 'p' is written by the plan but not bound");
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* ---- rs_publisher_register ---- */

static void test_publisher_register(void **state)
{
    (void)state;
    dir_env_t env;
    rs_publisher_params_t pp;
    rs_publisher_h pub;
    rs_diag_t diag;
    static float buf[1024];
    assert_int_equal(dir_env_setup(&env, "hostile-entry"), 0);
    rs_publisher_params_init(&pp);
    pp.directory = env.url;
    pp.model = "hostile";
    pp.world = 1;
    pp.backend = "cma";
    pp.heartbeat_s = 0;
    assert_int_equal(rs_publisher_create(&pp, &diag, &pub), RS_OK);
    /* each box alone (one bad box must not be refused only as overlapping
     * another): registered and refused in turn; none is ever served */
    for (size_t i = 0; i < sizeof(bad_boxes) / sizeof(bad_boxes[0]); i++) {
        const box_case_t *c = &bad_boxes[i];
        char tensor[16];
        snprintf(tensor, sizeof(tensor), "w%zu", i);
        print_message("%s\n", c->what);
        rs_status_t st = rs_publisher_register(pub, tensor, RS_DTYPE_F32,
                                               c->ndim, c->full, c->off,
                                               c->shape, buf, RS_MEM_HOST,
                                               &diag);
        HOSTILE_EXPECT(st, RS_ERR_INVALID_ARG, &diag, "publisher: tensor '",
                       tensor, c->ndim == 2 || c->full[0] == 8 ? "leaves the "
                       "full shape in dim" : "shape");
    }
    const int64_t full[2] = {8, 8}, off[2] = {0, 0};
    HOSTILE_EXPECT(rs_publisher_register(pub, "n", RS_DTYPE_F32, 2, full,
                                         NULL, full, buf, RS_MEM_HOST, &diag),
                   RS_ERR_INVALID_ARG, &diag, "'n': NULL shape or offset");
    HOSTILE_EXPECT(rs_publisher_register(pub, "d", (rs_dtype_t)77, 2, full,
                                         off, full, buf, RS_MEM_HOST, &diag),
                   RS_ERR_INVALID_ARG, &diag, "bad shard of 'd'");
    HOSTILE_EXPECT(rs_publisher_register(pub, "r", RS_DTYPE_F32, -1, full,
                                         off, full, buf, RS_MEM_HOST, &diag),
                   RS_ERR_INVALID_ARG, &diag, "bad shard of 'r'");
    /* the good box still registers, and is all that is served */
    assert_int_equal(rs_publisher_register(pub, "w", RS_DTYPE_F32, 2, full,
                                           off, full, buf, RS_MEM_HOST,
                                           &diag), RS_OK);
    assert_int_equal(rs_publisher_publish(pub, 1, &diag), RS_OK);
    assert_int_equal(rs_publisher_num_served(pub), 1);
    rs_publisher_destroy(pub);
    dir_env_teardown(&env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sources_add_shard),
        cmocka_unit_test(test_sources_add_shard_fields),
        cmocka_unit_test(test_exec_bind),
        cmocka_unit_test(test_publisher_register),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
