/* Regressions found by tests/fuzz/fuzz_geom: the saved reproducers replayed
 * through the harness, and each bug pinned by a direct call. */
#include "../../fuzz/fuzz_geom.c"
#include "../../fuzz/replay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* A zero dim made the element count 0, so a huge dim beside it passed the
 * overflow check and the row-major strides overflowed. */
static void test_zero_dim_beside_huge_dim(void **state)
{
    (void)state;
    const int64_t shape[3] = {0, INT64_MAX, 2}, stride[3] = {1, 1, 1};
    rs__view_t v;
    rs__box_t box;
    size_t bad = 99;
    char why[256] = "";
    assert_int_equal(rs__view_init(&v, 3, shape), RS_ERR_INPUT);
    assert_int_equal(rs__geom_resolve(3, shape, NULL, 0, 3, shape, stride, &box,
                                     &bad, why, sizeof(why)),
                     RS_ERR_INPUT);
    assert_string_equal(why, "source shape is invalid");
    /* zero-size tensors whose strides fit stay valid */
    const int64_t small[3] = {0, 1 << 20, 2};
    assert_int_equal(rs__view_init(&v, 3, small), RS_OK);
    assert_int_equal(v.stride[0], (int64_t)2 << 20);
}

/* A slice step near INT64_MAX overflowed the element count; PyTorch gives
 * one element (x[0:4:huge] is x[0:1]). */
static void test_slice_huge_step(void **state)
{
    (void)state;
    const int64_t shape[1] = {4};
    rs__view_t v;
    rs_op_t op = {.kind = RS_OP_SLICE, .arg = {0, 0, 4, INT64_MAX}, .has = 0xf};
    assert_int_equal(rs__view_init(&v, 1, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 1);
    assert_int_equal(v.shape[0], 1);
    op.arg[1] = 3; /* x[3:4:huge] is x[3:4] */
    assert_int_equal(rs__view_init(&v, 1, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_OK);
    assert_int_equal(v.shape[0], 1);
    assert_int_equal(v.offset, 3);
}

/* flatten on a 0-d view returned [1] before checking its dims; PyTorch
 * wraps them first (a 0-d tensor names dims 0 and -1 only). */
static void test_flatten_0d_checks_dims(void **state)
{
    (void)state;
    rs__view_t v;
    char why[128] = "";
    rs_op_t bad = {.kind = RS_OP_FLATTEN, .arg = {0, -2}, .has = 2};
    assert_int_equal(rs__view_init(&v, 0, NULL), RS_OK);
    assert_int_equal(rs__view_apply(&v, &bad, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "end_dim -2"));
    rs_op_t ok = {.kind = RS_OP_FLATTEN, .arg = {-1, 0}, .has = 3};
    assert_int_equal(rs__view_init(&v, 0, NULL), RS_OK);
    assert_int_equal(rs__view_apply(&v, &ok, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 1);
    assert_int_equal(v.shape[0], 1);
}

/* Reshaping a zero-size view: a 0 in the new sizes hid the overflow of
 * the others, whose strides then overflowed. */
static void test_reshape_zero_size_overflow(void **state)
{
    (void)state;
    const int64_t shape[1] = {0};
    const int64_t sizes[5] = {1, 0, (int64_t)1 << 40, (int64_t)1 << 40,
                              (int64_t)1 << 40};
    rs__view_t v;
    char why[128] = "";
    rs_op_t op = {.kind = RS_OP_RESHAPE, .list = sizes, .nlist = 5};
    assert_int_equal(rs__view_init(&v, 1, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "overflow"));
    op.kind = RS_OP_VIEW;
    assert_int_equal(rs__view_init(&v, 1, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_ERR_INPUT);
    const int64_t fine[3] = {4, 0, 1 << 20}; /* strides fit: still a view */
    op.list = fine;
    op.nlist = 3;
    assert_int_equal(rs__view_init(&v, 1, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 3);
}

/* unflatten of an empty dim checked only its own sizes: beside the other
 * dims of the view their product (and the strides) overflowed. */
static void test_unflatten_empty_view_overflow(void **state)
{
    (void)state;
    const int64_t shape[2] = {0, 1 << 20};
    const int64_t sizes[3] = {(int64_t)1 << 30, (int64_t)1 << 30, -1};
    rs__view_t v;
    char why[128] = "";
    rs_op_t op = {.kind = RS_OP_UNFLATTEN, .arg = {0}, .list = sizes,
                  .nlist = 3};
    assert_int_equal(rs__view_init(&v, 2, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "overflow"));
    const int64_t fine[3] = {4, 4, -1};
    op.list = fine;
    assert_int_equal(rs__view_init(&v, 2, shape), RS_OK);
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 4);
    assert_int_equal(v.shape[2], 0);
}

static void test_replay_saved_inputs(void **state)
{
    (void)state;
    assert_true(fz_replay("fuzz_geom", LLVMFuzzerTestOneInput) >= 1);
}

/* unsqueeze gave the new dim the stride size * stride of the dim it goes
 * before, unchecked: beside an empty dim that product can overflow
 * (found by fuzz_plan). */
static void test_unsqueeze_stride_overflow(void **state)
{
    (void)state;
    /* an empty view (a dim of 0) whose other dim has a huge stride, as
     * strided slices of empty tensors leave them */
    rs__view_t v = {.offset = 0, .ndim = 2, .shape = {4, 0},
                    .stride = {(int64_t)1 << 62, 1}};
    char why[128] = "";
    rs_op_t op = {.kind = RS_OP_UNSQUEEZE, .arg = {0}, .has = 1};
    assert_int_equal(rs__view_apply(&v, &op, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "overflow"));
    op.arg[0] = 1; /* before the empty dim: 0 x 1 */
    assert_int_equal(rs__view_apply(&v, &op, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 3);
    assert_int_equal(v.shape[1], 1);
    assert_int_equal(v.stride[1], 0);
}

/* select and slices moved the offset by index * stride unchecked: with the
 * huge strides of an empty view that overflows (found by fuzz_plan). */
static void test_offset_overflow(void **state)
{
    (void)state;
    rs__view_t v = {.offset = INT64_MAX - 1, .ndim = 2, .shape = {4, 0},
                    .stride = {2, 1}};
    const rs__view_t before = v;
    char why[128] = "";
    rs_op_t sel = {.kind = RS_OP_SELECT, .arg = {0, 2}, .has = 3};
    assert_int_equal(rs__view_apply(&v, &sel, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "overflow"));
    rs_op_t slice = {.kind = RS_OP_SLICE, .arg = {0, 1, 4, 1}, .has = 0xf};
    v = before;
    assert_int_equal(rs__view_apply(&v, &slice, why, sizeof(why)),
                     RS_ERR_INPUT);
    assert_non_null(strstr(why, "overflow"));
    sel.arg[1] = 0; /* index 0 moves nothing */
    v = before;
    assert_int_equal(rs__view_apply(&v, &sel, NULL, 0), RS_OK);
    assert_int_equal(v.offset, INT64_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_dim_beside_huge_dim),
        cmocka_unit_test(test_slice_huge_step),
        cmocka_unit_test(test_flatten_0d_checks_dims),
        cmocka_unit_test(test_reshape_zero_size_overflow),
        cmocka_unit_test(test_unflatten_empty_view_overflow),
        cmocka_unit_test(test_unsqueeze_stride_overflow),
        cmocka_unit_test(test_offset_overflow),
        cmocka_unit_test(test_replay_saved_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
