/* Views rebased on a staged box: every element a chain reads inside the
 * box is found where a naive row-major index of (element - box_lo) puts
 * it; chains the box's strides cannot express are refused; boxes leaving
 * the tensor are refused; the span covers exactly what a view reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "geom/view_box.h"

/* Offset of element (i, j, k) of a [.., 6, 8] tensor in the row-major
 * staging of box lo + [bs0, bs1, bs2]. */
static int64_t staged(const int64_t *lo, const int64_t *bs, int64_t i,
                      int64_t j, int64_t k)
{
    return ((i - lo[0]) * bs[1] + (j - lo[1])) * bs[2] + (k - lo[2]);
}

/* w[4, 6, 8], box [1:3, 2:5, 0:8]; the chain narrow(0, 1, 2),
 * narrow(1, 2, 3), select(2, 5) reads (i, j, 5) for i in 1..2, j in 2..4. */
static void test_rebased_chain_reads_inside_the_box(void **state)
{
    (void)state;
    const int64_t shape[] = {4, 6, 8}, lo[] = {1, 2, 0}, bs[] = {2, 3, 8};
    rs__view_t v;
    assert_int_equal(rs__view_init_box(&v, 3, shape, lo, bs), RS_OK);
    rs_op_t n0 = {.kind = RS_OP_NARROW, .arg = {0, 1, 2}, .has = 7};
    rs_op_t n1 = {.kind = RS_OP_NARROW, .arg = {1, 2, 3}, .has = 7};
    rs_op_t s2 = {.kind = RS_OP_SELECT, .arg = {2, 5}, .has = 3};
    assert_int_equal(rs__view_apply(&v, &n0, NULL, 0), RS_OK);
    assert_int_equal(rs__view_apply(&v, &n1, NULL, 0), RS_OK);
    assert_int_equal(rs__view_apply(&v, &s2, NULL, 0), RS_OK);
    assert_int_equal(v.ndim, 2);
    for (int64_t a = 0; a < 2; a++)
        for (int64_t b = 0; b < 3; b++)
            assert_int_equal(v.offset + a * v.stride[0] + b * v.stride[1],
                             staged(lo, bs, 1 + a, 2 + b, 5));
    int64_t first, last;
    assert_true(rs__view_span(&v, &first, &last));
    assert_int_equal(first, staged(lo, bs, 1, 2, 5));
    assert_int_equal(last, staged(lo, bs, 2, 4, 5));
}

/* flatten(1, 2) merges dims the box cuts (6 rows of 8 into 48) only when
 * the box spans dim 2 whole and dim 1 whole: [1:3, 0:6, 0:8] does, a box
 * narrowed in dim 1 and 2 does not (PyTorch would copy). */
static void test_merge_needs_whole_inner_dims(void **state)
{
    (void)state;
    const int64_t shape[] = {4, 6, 8};
    const int64_t lo_ok[] = {1, 0, 0}, bs_ok[] = {2, 6, 8};
    const int64_t lo_cut[] = {1, 2, 0}, bs_cut[] = {2, 3, 4};
    rs_op_t fl = {.kind = RS_OP_FLATTEN, .arg = {1, 2}, .has = 3};
    rs__view_t v;
    assert_int_equal(rs__view_init_box(&v, 3, shape, lo_ok, bs_ok), RS_OK);
    assert_int_equal(rs__view_apply(&v, &fl, NULL, 0), RS_OK);
    assert_int_equal(v.shape[1], 48);
    assert_int_equal(v.stride[1], 1);
    assert_int_equal(v.offset, -48);
    assert_int_equal(rs__view_init_box(&v, 3, shape, lo_cut, bs_cut), RS_OK);
    assert_int_equal(rs__view_apply(&v, &fl, NULL, 0), RS_ERR_UNSUPPORTED);
}

static void test_boxes_leaving_the_tensor(void **state)
{
    (void)state;
    const int64_t shape[] = {4, 6}, bad_lo[] = {3, 0}, bad_bs[] = {2, 6};
    const int64_t neg[] = {-1, 0}, ok[] = {1, 6};
    rs__view_t v;
    assert_int_equal(rs__view_init_box(&v, 2, shape, bad_lo, bad_bs),
                     RS_ERR_INPUT);
    assert_int_equal(rs__view_init_box(&v, 2, shape, neg, ok), RS_ERR_INPUT);
    int64_t many[RS_MAX_DIMS + 1];
    for (int d = 0; d <= RS_MAX_DIMS; d++)
        many[d] = 1;
    assert_int_equal(rs__view_init_box(&v, RS_MAX_DIMS + 1, many, many, many),
                     RS_ERR_INPUT);
}

/* The whole tensor as its own box: the plain row-major view. */
static void test_whole_box_is_the_plain_view(void **state)
{
    (void)state;
    const int64_t shape[] = {3, 5}, lo[] = {0, 0};
    rs__view_t a, b;
    assert_int_equal(rs__view_init_box(&a, 2, shape, lo, shape), RS_OK);
    assert_int_equal(rs__view_init(&b, 2, shape), RS_OK);
    assert_int_equal(a.offset, 0);
    assert_memory_equal(a.stride, b.stride, 2 * sizeof(int64_t));
    /* a transposed view spans the same first and last element */
    rs_op_t t = {.kind = RS_OP_T};
    assert_int_equal(rs__view_apply(&a, &t, NULL, 0), RS_OK);
    int64_t first, last;
    assert_true(rs__view_span(&a, &first, &last));
    assert_int_equal(first, 0);
    assert_int_equal(last, 14);
    rs_op_t empty = {.kind = RS_OP_NARROW, .arg = {0, 0, 0}, .has = 7};
    assert_int_equal(rs__view_apply(&a, &empty, NULL, 0), RS_OK);
    assert_false(rs__view_span(&a, &first, &last));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebased_chain_reads_inside_the_box),
        cmocka_unit_test(test_merge_needs_whole_inner_dims),
        cmocka_unit_test(test_boxes_leaving_the_tensor),
        cmocka_unit_test(test_whole_box_is_the_plain_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
