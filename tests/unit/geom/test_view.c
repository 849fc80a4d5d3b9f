/* Op replay: each op against views worked out by hand from PyTorch's
 * semantics, and each op's error cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "geom/view.h"

static rs__view_t base(int ndim, const int64_t *shape)
{
    rs__view_t v;
    assert_int_equal(rs__view_init(&v, ndim, shape), RS_OK);
    return v;
}

static void expect_view(const rs__view_t *v, int64_t offset, int ndim,
                        const int64_t *shape, const int64_t *stride)
{
    assert_int_equal(v->offset, offset);
    assert_int_equal(v->ndim, ndim);
    for (int i = 0; i < ndim; i++) {
        assert_int_equal(v->shape[i], shape[i]);
        if (shape[i] != 1)
            assert_int_equal(v->stride[i], stride[i]);
    }
}

static rs_status_t apply(rs__view_t *v, rs_op_t op)
{
    char why[256];
    return rs__view_apply(v, &op, why, sizeof(why));
}

#define OP(k, ...) ((rs_op_t){.kind = (k), .arg = {__VA_ARGS__}, .has = 0xf})

static void test_narrow(void **state)
{
    (void)state;
    rs__view_t v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 1, 2, 3)), RS_OK);
    expect_view(&v, 2, 2, (int64_t[]){8, 3}, (int64_t[]){6, 1});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 0, -2, 2)), RS_OK);
    expect_view(&v, 38, 2, (int64_t[]){2, 3}, (int64_t[]){6, 1});
    /* errors: length past the end, start past the end, bad dim */
    v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 1, 4, 3)), RS_ERR_INPUT);
    v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 0, 9, 0)), RS_ERR_INPUT);
    v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 2, 0, 1)), RS_ERR_INPUT);
    v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, -3, 0, 1)), RS_ERR_INPUT);
    v = base(2, (int64_t[]){8, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 0, 1, INT64_MAX)), RS_ERR_INPUT);
}

static void test_slice(void **state)
{
    (void)state;
    rs__view_t v = base(2, (int64_t[]){4, 10});
    assert_int_equal(apply(&v, OP(RS_OP_SLICE, 1, 1, 0, 2)), RS_OK);
    /* has: dim, start given; stop null; step given */
    v = base(2, (int64_t[]){4, 10});
    rs_op_t s = {.kind = RS_OP_SLICE, .arg = {1, 1, 0, 3}, .has = 1 | 2 | 8};
    assert_int_equal(apply(&v, s), RS_OK); /* w[:, 1::3] -> 1,4,7 */
    expect_view(&v, 1, 2, (int64_t[]){4, 3}, (int64_t[]){10, 3});
    v = base(1, (int64_t[]){10});
    s = (rs_op_t){.kind = RS_OP_SLICE, .arg = {0, -4, -1, 2}, .has = 0xf};
    assert_int_equal(apply(&v, s), RS_OK); /* 6, 8 */
    expect_view(&v, 6, 1, (int64_t[]){2}, (int64_t[]){2});
    v = base(1, (int64_t[]){10});
    s = (rs_op_t){.kind = RS_OP_SLICE, .arg = {0, 7, 3, 1}, .has = 0xf};
    assert_int_equal(apply(&v, s), RS_OK); /* empty, like Python */
    assert_int_equal(v.shape[0], 0);
    /* errors: step 0, stop past the end (no clamping), start too negative */
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_SLICE, 0, 0, 5, 0)), RS_ERR_INPUT);
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_SLICE, 0, 0, 11, 1)), RS_ERR_INPUT);
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_SLICE, 0, -11, 5, 1)), RS_ERR_INPUT);
}

static void test_select_unbind(void **state)
{
    (void)state;
    rs__view_t v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, OP(RS_OP_SELECT, 1, -1)), RS_OK);
    expect_view(&v, 8, 2, (int64_t[]){2, 4}, (int64_t[]){12, 1});
    v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, OP(RS_OP_UNBIND, 0, 1)), RS_OK);
    expect_view(&v, 12, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1});
    v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, OP(RS_OP_SELECT, 2, 4)), RS_ERR_INPUT);
    v = base(0, NULL);
    assert_int_equal(apply(&v, OP(RS_OP_SELECT, 0, 0)), RS_ERR_INPUT);
}

static void test_getitem(void **state)
{
    (void)state;
    rs_key_t keys[3] = {
        {.kind = RS_KEY_INDEX, .index = -1},
        {.kind = RS_KEY_FULL},
        {.kind = RS_KEY_SLICE, .start = 1, .has_start = 1, .step = 2,
         .has_step = 1},
    };
    rs__view_t v = base(3, (int64_t[]){2, 3, 5});
    rs_op_t op = {.kind = RS_OP_GETITEM, .keys = keys, .nkeys = 3};
    assert_int_equal(apply(&v, op), RS_OK); /* w[-1, :, 1::2] */
    expect_view(&v, 16, 2, (int64_t[]){3, 2}, (int64_t[]){5, 2});
    v = base(1, (int64_t[]){4});
    op.nkeys = 2; /* two keys on a rank-1 tensor */
    assert_int_equal(apply(&v, op), RS_ERR_INPUT);
}

static void test_transpose_permute_t(void **state)
{
    (void)state;
    rs__view_t v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, OP(RS_OP_TRANSPOSE, 0, -1)), RS_OK);
    expect_view(&v, 0, 3, (int64_t[]){4, 3, 2}, (int64_t[]){1, 4, 12});
    v = base(3, (int64_t[]){2, 3, 4});
    int64_t perm[3] = {1, 2, 0};
    rs_op_t p = {.kind = RS_OP_PERMUTE, .list = perm, .nlist = 3};
    assert_int_equal(apply(&v, p), RS_OK);
    expect_view(&v, 0, 3, (int64_t[]){3, 4, 2}, (int64_t[]){4, 1, 12});
    int64_t dup[3] = {1, 1, 0};
    p.list = dup;
    v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, p), RS_ERR_INPUT);
    p.list = perm;
    p.nlist = 2; /* rank mismatch */
    v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, p), RS_ERR_INPUT);
    v = base(2, (int64_t[]){2, 3});
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_T}), RS_OK);
    expect_view(&v, 0, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3});
    v = base(3, (int64_t[]){2, 3, 4});
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_T}), RS_ERR_INPUT);
}

static void test_view_reshape(void **state)
{
    (void)state;
    int64_t sizes[3] = {2, -1, 2};
    rs_op_t op = {.kind = RS_OP_VIEW, .list = sizes, .nlist = 3};
    rs__view_t v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, op), RS_OK);
    expect_view(&v, 0, 3, (int64_t[]){2, 6, 2}, (int64_t[]){12, 2, 1});
    /* merging a column slice's rows is not a view: refused, not copied */
    int64_t flat[1] = {-1};
    rs_op_t f = {.kind = RS_OP_RESHAPE, .list = flat, .nlist = 1};
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 1, 0, 3)), RS_OK);
    assert_int_equal(apply(&v, f), RS_ERR_UNSUPPORTED);
    /* but a step slice of period dividing the row merges: stride 6 == 2*3 */
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, OP(RS_OP_SLICE, 1, 0, 6, 2)), RS_OK);
    assert_int_equal(apply(&v, f), RS_OK);
    expect_view(&v, 0, 1, (int64_t[]){12}, (int64_t[]){2});
    /* transposed view(-1) is not a view */
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_T}), RS_OK);
    f.kind = RS_OP_VIEW;
    assert_int_equal(apply(&v, f), RS_ERR_UNSUPPORTED);
    /* wrong element count, two -1, negative size */
    int64_t bad[2] = {5, 5};
    op.list = bad;
    op.nlist = 2;
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, op), RS_ERR_INPUT);
    int64_t two[2] = {-1, -1};
    op.list = two;
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, op), RS_ERR_INPUT);
    int64_t neg[2] = {-2, -12};
    op.list = neg;
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, op), RS_ERR_INPUT);
    /* overflowing sizes */
    int64_t huge[2] = {INT64_MAX, 4};
    op.list = huge;
    v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, op), RS_ERR_INPUT);
}

static void test_flatten_unflatten(void **state)
{
    (void)state;
    rs__view_t v = base(3, (int64_t[]){2, 3, 4});
    rs_op_t fl = {.kind = RS_OP_FLATTEN, .arg = {1, 2}, .has = 3};
    assert_int_equal(apply(&v, fl), RS_OK);
    expect_view(&v, 0, 2, (int64_t[]){2, 12}, (int64_t[]){12, 1});
    int64_t sizes[2] = {-1, 4};
    rs_op_t un = {.kind = RS_OP_UNFLATTEN, .arg = {1}, .list = sizes, .nlist = 2};
    assert_int_equal(apply(&v, un), RS_OK);
    expect_view(&v, 0, 3, (int64_t[]){2, 3, 4}, (int64_t[]){12, 4, 1});
    v = base(3, (int64_t[]){2, 3, 4});
    fl.arg[0] = 2;
    fl.arg[1] = 1;
    assert_int_equal(apply(&v, fl), RS_ERR_INPUT); /* start after end */
    int64_t wrong[2] = {5, 4};
    un.list = wrong;
    v = base(2, (int64_t[]){2, 12});
    assert_int_equal(apply(&v, un), RS_ERR_INPUT);
    /* default flatten of a transposed tensor would copy */
    v = base(2, (int64_t[]){2, 3});
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_T}), RS_OK);
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_FLATTEN}),
                     RS_ERR_UNSUPPORTED);
}

static void test_squeeze_unsqueeze(void **state)
{
    (void)state;
    rs__view_t v = base(3, (int64_t[]){1, 3, 1});
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_SQUEEZE}), RS_OK);
    expect_view(&v, 0, 1, (int64_t[]){3}, (int64_t[]){1});
    assert_int_equal(apply(&v, OP(RS_OP_UNSQUEEZE, -1)), RS_OK);
    expect_view(&v, 0, 2, (int64_t[]){3, 1}, (int64_t[]){1, 1});
    rs_op_t sq = {.kind = RS_OP_SQUEEZE, .arg = {0}, .has = 1};
    assert_int_equal(apply(&v, sq), RS_OK); /* size 3: a no-op */
    assert_int_equal(v.ndim, 2);
    sq.arg[0] = 5;
    assert_int_equal(apply(&v, sq), RS_ERR_INPUT);
    assert_int_equal(apply(&v, OP(RS_OP_UNSQUEEZE, 4)), RS_ERR_INPUT);
}

static void test_chunk_split(void **state)
{
    (void)state;
    rs__view_t v = base(2, (int64_t[]){10, 2});
    assert_int_equal(apply(&v, OP(RS_OP_CHUNK, 3, 0, 2)), RS_OK); /* 4,4,2 */
    expect_view(&v, 16, 2, (int64_t[]){2, 2}, (int64_t[]){2, 1});
    v = base(1, (int64_t[]){6});
    assert_int_equal(apply(&v, OP(RS_OP_CHUNK, 4, 0, 3)), RS_ERR_INPUT);
    /* 6 in 4 chunks -> pieces of 2: only 3 exist */
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_SPLIT, 4, 0, -1)), RS_OK);
    expect_view(&v, 8, 1, (int64_t[]){2}, (int64_t[]){1});
    int64_t sizes[3] = {2, 5, 3};
    rs_op_t sp = {.kind = RS_OP_SPLIT, .arg = {0, 0, 1}, .list = sizes, .nlist = 3};
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, sp), RS_OK);
    expect_view(&v, 2, 1, (int64_t[]){5}, (int64_t[]){1});
    v = base(1, (int64_t[]){11});
    assert_int_equal(apply(&v, sp), RS_ERR_INPUT); /* sizes sum to 10 */
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_SPLIT, 0, 0, 0)), RS_ERR_INPUT);
    v = base(1, (int64_t[]){10});
    assert_int_equal(apply(&v, OP(RS_OP_CHUNK, 0, 0, 0)), RS_ERR_INPUT);
}

static void test_contiguous(void **state)
{
    (void)state;
    rs__view_t v = base(2, (int64_t[]){4, 6});
    assert_int_equal(apply(&v, OP(RS_OP_NARROW, 0, 1, 2)), RS_OK);
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_CONTIGUOUS}), RS_OK);
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_T}), RS_OK);
    assert_int_equal(apply(&v, (rs_op_t){.kind = RS_OP_CONTIGUOUS}),
                     RS_ERR_UNSUPPORTED);
}

static void test_reason_is_given(void **state)
{
    (void)state;
    char why[256] = "";
    rs__view_t v = base(2, (int64_t[]){4, 6});
    rs_op_t op = OP(RS_OP_NARROW, 1, 4, 3);
    assert_int_equal(rs__view_apply(&v, &op, why, sizeof(why)), RS_ERR_INPUT);
    assert_non_null(strstr(why, "length 3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_narrow),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_select_unbind),
        cmocka_unit_test(test_getitem),
        cmocka_unit_test(test_transpose_permute_t),
        cmocka_unit_test(test_view_reshape),
        cmocka_unit_test(test_flatten_unflatten),
        cmocka_unit_test(test_squeeze_unsqueeze),
        cmocka_unit_test(test_chunk_split),
        cmocka_unit_test(test_contiguous),
        cmocka_unit_test(test_reason_is_given),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
