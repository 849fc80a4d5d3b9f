/* Tests of the test ground truth itself: small op chains worked out by hand,
 * so the property tests compare the planner against something trustworthy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gt_tensor.h"

static rs_op_t op2(rs_op_kind_t kind, int64_t a0, int64_t a1)
{
    rs_op_t op = {.kind = kind, .arg = {a0, a1, 0, 0}, .has = 3};
    return op;
}

static rs_op_t op3(rs_op_kind_t kind, int64_t a0, int64_t a1, int64_t a2)
{
    rs_op_t op = {.kind = kind, .arg = {a0, a1, a2, 0}, .has = 7};
    return op;
}

static rs_op_t oplist(rs_op_kind_t kind, int64_t a0, const int64_t *list,
                      size_t n)
{
    rs_op_t op = {.kind = kind, .arg = {a0, 0, 0, 0}, .has = 1, .list = list,
                  .nlist = n};
    return op;
}

/* Replays ops over src_shape and checks status, shape and indices. */
static void expect_chain(int sn, const int64_t *src, const rs_op_t *ops,
                         size_t nops, gt_status_t want_st, int nd,
                         const int64_t *shape, const int64_t *idx)
{
    gt_tensor_t t;
    char why[256] = "";
    gt_status_t st = gt_replay(sn, src, ops, nops, &t, why, sizeof(why));
    if (st != want_st)
        print_error("status %d, want %d (%s)\n", (int)st, (int)want_st, why);
    assert_int_equal(st, want_st);
    if (st != GT_OK)
        return;
    assert_int_equal(t.ndim, nd);
    int64_t numel = 1;
    for (int k = 0; k < nd; k++) {
        assert_int_equal(t.shape[k], shape[k]);
        numel *= shape[k];
    }
    assert_int_equal(t.numel, numel);
    for (int64_t j = 0; j < numel; j++)
        assert_int_equal(t.idx[j], idx[j]);
    int64_t stride[RS_MAX_DIMS];
    assert_true(gt_strides(&t, stride));
    gt_free(&t);
}

static void test_transpose_2x3(void **state)
{
    (void)state;
    int64_t src[] = {2, 3}, shape[] = {3, 2}, idx[] = {0, 3, 1, 4, 2, 5};
    rs_op_t ops[] = {op2(RS_OP_TRANSPOSE, 0, 1)};
    expect_chain(2, src, ops, 1, GT_OK, 2, shape, idx);
    rs_op_t t[] = {{.kind = RS_OP_T}};
    expect_chain(2, src, t, 1, GT_OK, 2, shape, idx);
    rs_op_t neg[] = {op2(RS_OP_TRANSPOSE, -1, -2)};
    expect_chain(2, src, neg, 1, GT_OK, 2, shape, idx);
    int64_t src3[] = {2, 3, 4};
    expect_chain(3, src3, t, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_op_t bad[] = {op2(RS_OP_TRANSPOSE, 0, 2)};
    expect_chain(2, src, bad, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_narrow(void **state)
{
    (void)state;
    int64_t src[] = {3, 4}, shape[] = {3, 2};
    int64_t idx[] = {1, 2, 5, 6, 9, 10}, tail[] = {2, 3, 6, 7, 10, 11};
    rs_op_t ops[] = {op3(RS_OP_NARROW, 1, 1, 2)};
    expect_chain(2, src, ops, 1, GT_OK, 2, shape, idx);
    rs_op_t neg[] = {op3(RS_OP_NARROW, -1, -2, 2)};
    expect_chain(2, src, neg, 1, GT_OK, 2, shape, tail);
    rs_op_t out[] = {op3(RS_OP_NARROW, 0, 2, 2)};
    expect_chain(2, src, out, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_op_t far[] = {op3(RS_OP_NARROW, 0, -4, 1)};
    expect_chain(2, src, far, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_op_t dim[] = {op3(RS_OP_NARROW, 2, 0, 1)};
    expect_chain(2, src, dim, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_chunk_pieces(void **state)
{
    (void)state;
    int64_t src[] = {10}, one[] = {1}, last[] = {9};
    int64_t three[] = {3}, mid[] = {3, 4, 5};
    rs_op_t ops[] = {op3(RS_OP_CHUNK, 4, 0, 3)};
    expect_chain(1, src, ops, 1, GT_OK, 1, one, last);
    rs_op_t p1[] = {op3(RS_OP_CHUNK, 4, 0, 1)};
    expect_chain(1, src, p1, 1, GT_OK, 1, three, mid);
    /* 6 in 4 chunks gives pieces of 2: only three of them exist. */
    int64_t six[] = {6};
    rs_op_t p3[] = {op3(RS_OP_CHUNK, 4, 0, 3)};
    expect_chain(1, six, p3, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_op_t zero[] = {op3(RS_OP_CHUNK, 0, 0, 0)};
    expect_chain(1, six, zero, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_split(void **state)
{
    (void)state;
    int64_t src[] = {10}, sizes[] = {2, 5, 3}, bad[] = {2, 5, 2};
    int64_t five[] = {5}, mid[] = {2, 3, 4, 5, 6}, two[] = {2}, tail[] = {8, 9};
    rs_op_t ops[] = {oplist(RS_OP_SPLIT, 0, sizes, 3)};
    ops[0].arg[1] = 0;
    ops[0].arg[2] = 1;
    expect_chain(1, src, ops, 1, GT_OK, 1, five, mid);
    ops[0].list = bad;
    expect_chain(1, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_op_t by4[] = {op3(RS_OP_SPLIT, 4, 0, 2)};
    expect_chain(1, src, by4, 1, GT_OK, 1, two, tail);
    rs_op_t past[] = {op3(RS_OP_SPLIT, 4, 0, 3)};
    expect_chain(1, src, past, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_getitem(void **state)
{
    (void)state;
    int64_t src[] = {4, 5}, s3[] = {3}, row[] = {15, 17, 19};
    rs_key_t k1[] = {{.kind = RS_KEY_INDEX, .index = -1},
                     {.kind = RS_KEY_SLICE, .step = 2, .has_step = 1}};
    rs_op_t ops[] = {{.kind = RS_OP_GETITEM, .keys = k1, .nkeys = 2}};
    expect_chain(2, src, ops, 1, GT_OK, 1, s3, row);
    int64_t s2[] = {2}, col[] = {8, 13};
    rs_key_t k2[] = {{.kind = RS_KEY_SLICE, .start = 1, .stop = -1,
                      .has_start = 1, .has_stop = 1},
                     {.kind = RS_KEY_INDEX, .index = -2}};
    ops[0].keys = k2;
    expect_chain(2, src, ops, 1, GT_OK, 1, s2, col);
    int64_t s22[] = {2, 5}, rows[] = {0, 1, 2, 3, 4, 10, 11, 12, 13, 14};
    rs_key_t k3[] = {{.kind = RS_KEY_SLICE, .step = 2, .has_step = 1}};
    ops[0].keys = k3;
    ops[0].nkeys = 1;
    expect_chain(2, src, ops, 1, GT_OK, 2, s22, rows);
    rs_key_t k4[] = {{.kind = RS_KEY_FULL}, {.kind = RS_KEY_FULL},
                     {.kind = RS_KEY_FULL}};
    ops[0].keys = k4;
    ops[0].nkeys = 3;
    expect_chain(2, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
    rs_key_t k5[] = {{.kind = RS_KEY_INDEX, .index = 4}};
    ops[0].keys = k5;
    ops[0].nkeys = 1;
    expect_chain(2, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_slice_no_clamp(void **state)
{
    (void)state;
    int64_t src[] = {6}, s2[] = {2}, idx[] = {1, 4};
    rs_op_t ops[] = {{.kind = RS_OP_SLICE, .arg = {0, 1, 6, 3}, .has = 15}};
    expect_chain(1, src, ops, 1, GT_OK, 1, s2, idx);
    ops[0].arg[2] = 7;
    expect_chain(1, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
    ops[0].arg[2] = 6;
    ops[0].arg[3] = 0;
    expect_chain(1, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_unflatten(void **state)
{
    (void)state;
    int64_t src[] = {6}, sizes[] = {2, -1}, s23[] = {2, 3};
    int64_t idx[] = {0, 1, 2, 3, 4, 5}, bad[] = {4, -1}, two[] = {-1, -1};
    rs_op_t ops[] = {oplist(RS_OP_UNFLATTEN, 0, sizes, 2)};
    expect_chain(1, src, ops, 1, GT_OK, 2, s23, idx);
    ops[0].list = bad;
    expect_chain(1, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
    ops[0].list = two;
    expect_chain(1, src, ops, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_view_legality(void **state)
{
    (void)state;
    int64_t s23[] = {2, 3}, six[] = {6}, flat[] = {-1};
    rs_op_t tv[] = {op2(RS_OP_TRANSPOSE, 0, 1), oplist(RS_OP_VIEW, 0, six, 1)};
    expect_chain(2, s23, tv, 2, GT_ERR_NOT_VIEW, 0, NULL, NULL);
    rs_op_t tc[] = {op2(RS_OP_TRANSPOSE, 0, 1), {.kind = RS_OP_CONTIGUOUS}};
    expect_chain(2, s23, tc, 2, GT_ERR_NOT_VIEW, 0, NULL, NULL);
    int64_t idx6[] = {0, 1, 2, 3, 4, 5};
    rs_op_t c[] = {{.kind = RS_OP_CONTIGUOUS}, oplist(RS_OP_RESHAPE, 0, flat, 1)};
    expect_chain(2, s23, c, 2, GT_OK, 1, six, idx6);

    int64_t s46[] = {4, 6}, s12[] = {12};
    int64_t rows[] = {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    rs_op_t nr[] = {op3(RS_OP_NARROW, 0, 1, 2), oplist(RS_OP_VIEW, 0, flat, 1)};
    expect_chain(2, s46, nr, 2, GT_OK, 1, s12, rows);
    rs_op_t nc[] = {op3(RS_OP_NARROW, 1, 0, 3), oplist(RS_OP_VIEW, 0, flat, 1)};
    expect_chain(2, s46, nc, 2, GT_ERR_NOT_VIEW, 0, NULL, NULL);
    int64_t v223[] = {2, 2, 3}, cols[] = {0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20};
    rs_op_t ns[] = {op3(RS_OP_NARROW, 1, 0, 3), oplist(RS_OP_VIEW, 0, v223, 3)};
    expect_chain(2, s46, ns, 2, GT_OK, 3, v223, cols);

    /* [2,3,4] with dims 0,1 swapped: strides 4,12,1, nothing merges. */
    int64_t s234[] = {2, 3, 4}, v38[] = {3, 8}, v64[] = {6, 4}, v3222[] = {3, 2, 2, 2};
    rs_op_t p[] = {op2(RS_OP_TRANSPOSE, 0, 1), oplist(RS_OP_VIEW, 0, v38, 2)};
    expect_chain(3, s234, p, 2, GT_ERR_NOT_VIEW, 0, NULL, NULL);
    p[1].list = v64;
    expect_chain(3, s234, p, 2, GT_ERR_NOT_VIEW, 0, NULL, NULL);
    p[1].list = v3222;
    p[1].nlist = 4;
    gt_tensor_t t;
    assert_int_equal(gt_replay(3, s234, p, 2, &t, NULL, 0), GT_OK);
    assert_int_equal(t.idx[1], 1);  /* [0,0,0,1] */
    assert_int_equal(t.idx[2], 2);  /* [0,0,1,0] */
    assert_int_equal(t.idx[4], 12); /* [0,1,0,0] */
    assert_int_equal(t.idx[8], 4);  /* [1,0,0,0] */
    gt_free(&t);

    /* Size-1 dims never block a view, whatever their stride. */
    int64_t s31[] = {3, 1}, v13[] = {1, 3}, idx3[] = {0, 1, 2};
    rs_op_t u[] = {{.kind = RS_OP_UNSQUEEZE, .arg = {1}, .has = 1},
                   op2(RS_OP_TRANSPOSE, 0, 1), oplist(RS_OP_VIEW, 0, s31, 2)};
    int64_t three[] = {3};
    expect_chain(1, three, u, 3, GT_OK, 2, s31, idx3);
    u[2].list = v13;
    expect_chain(1, three, u, 3, GT_OK, 2, v13, idx3);

    int64_t twoneg[] = {-1, -1}, wrong[] = {5};
    rs_op_t bad[] = {oplist(RS_OP_VIEW, 0, twoneg, 2)};
    expect_chain(2, s23, bad, 1, GT_ERR_OP, 0, NULL, NULL);
    bad[0].list = wrong;
    bad[0].nlist = 1;
    expect_chain(2, s23, bad, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_flatten_squeeze_select(void **state)
{
    (void)state;
    int64_t s234[] = {2, 3, 4}, s2_12[] = {2, 12};
    int64_t idx24[24];
    for (int i = 0; i < 24; i++)
        idx24[i] = i;
    rs_op_t f[] = {op2(RS_OP_FLATTEN, 1, 2)};
    expect_chain(3, s234, f, 1, GT_OK, 2, s2_12, idx24);
    rs_op_t fb[] = {op2(RS_OP_FLATTEN, 2, 1)};
    expect_chain(3, s234, fb, 1, GT_ERR_OP, 0, NULL, NULL);
    int64_t s24[] = {24};
    rs_op_t fd[] = {{.kind = RS_OP_FLATTEN}};
    expect_chain(3, s234, fd, 1, GT_OK, 1, s24, idx24);

    int64_t s1314[] = {1, 3, 1, 4}, s34[] = {3, 4}, s314[] = {3, 1, 4};
    rs_op_t sq[] = {{.kind = RS_OP_SQUEEZE}};
    expect_chain(4, s1314, sq, 1, GT_OK, 2, s34, idx24);
    rs_op_t sq0[] = {{.kind = RS_OP_SQUEEZE, .arg = {0}, .has = 1}};
    expect_chain(4, s1314, sq0, 1, GT_OK, 3, s314, idx24);
    rs_op_t sq1[] = {{.kind = RS_OP_SQUEEZE, .arg = {1}, .has = 1}};
    expect_chain(4, s1314, sq1, 1, GT_OK, 4, s1314, idx24);

    int64_t s4[] = {4}, sel[] = {20, 21, 22, 23};
    rs_op_t se[] = {op2(RS_OP_SELECT, 0, -1), op2(RS_OP_SELECT, 0, 2)};
    expect_chain(3, s234, se, 2, GT_OK, 1, s4, sel);
    rs_op_t ub[] = {op2(RS_OP_UNBIND, 0, 1), op2(RS_OP_UNBIND, 0, 2)};
    expect_chain(3, s234, ub, 2, GT_OK, 1, s4, sel);
    rs_op_t so[] = {op2(RS_OP_SELECT, 1, 3)};
    expect_chain(3, s234, so, 1, GT_ERR_OP, 0, NULL, NULL);

    int64_t perm[] = {2, 0, 1}, s423[] = {4, 2, 3};
    rs_op_t pm[] = {oplist(RS_OP_PERMUTE, 0, perm, 3)};
    gt_tensor_t t;
    assert_int_equal(gt_replay(3, s234, pm, 1, &t, NULL, 0), GT_OK);
    assert_memory_equal(t.shape, s423, sizeof(s423));
    assert_int_equal(t.idx[1], 4);  /* [0,0,1] */
    assert_int_equal(t.idx[3], 12); /* [0,1,0] */
    assert_int_equal(t.idx[6], 1);  /* [1,0,0] */
    gt_free(&t);
    int64_t dup[] = {0, 0, 1};
    pm[0].list = dup;
    expect_chain(3, s234, pm, 1, GT_ERR_OP, 0, NULL, NULL);
}

static void test_is_box(void **state)
{
    (void)state;
    gt_tensor_t t;
    int64_t s12[] = {12}, v34[] = {3, 4};
    rs_op_t ops[] = {oplist(RS_OP_VIEW, 0, v34, 2), op3(RS_OP_NARROW, 1, 0, 2)};
    assert_int_equal(gt_replay(1, s12, ops, 2, &t, NULL, 0), GT_OK);
    assert_false(gt_is_box(&t, 1, s12)); /* {0,1,4,5,8,9} */
    gt_free(&t);
    assert_int_equal(gt_replay(1, s12, ops, 1, &t, NULL, 0), GT_OK);
    assert_true(gt_is_box(&t, 1, s12));
    gt_free(&t);
    int64_t s46[] = {4, 6};
    rs_op_t st[] = {{.kind = RS_OP_SLICE, .arg = {1, 1, 0, 2}, .has = 11},
                    op2(RS_OP_TRANSPOSE, 0, 1), op3(RS_OP_NARROW, 1, 1, 2)};
    assert_int_equal(gt_replay(2, s46, st, 3, &t, NULL, 0), GT_OK);
    assert_true(gt_is_box(&t, 2, s46));
    assert_true(gt_is_aligned_box(&t, 2, s46));
    assert_false(gt_is_contiguous(&t));
    gt_free(&t);

    /* Every element, but the [2,3] dims straddle the rows of [3,2]. */
    int64_t s32[] = {3, 2}, v23[] = {2, 3};
    rs_op_t fu[] = {{.kind = RS_OP_FLATTEN}, oplist(RS_OP_UNFLATTEN, 0, v23, 2)};
    assert_int_equal(gt_replay(2, s32, fu, 2, &t, NULL, 0), GT_OK);
    assert_true(gt_is_box(&t, 2, s32));
    assert_false(gt_is_aligned_box(&t, 2, s32));
    gt_free(&t);
    /* A whole dim split in two and the halves swapped stays aligned. */
    rs_op_t ut[] = {oplist(RS_OP_UNFLATTEN, 0, v34, 2), op2(RS_OP_TRANSPOSE, 0, 1)};
    assert_int_equal(gt_replay(1, s12, ut, 2, &t, NULL, 0), GT_OK);
    assert_true(gt_is_aligned_box(&t, 1, s12));
    gt_free(&t);
    /* [2,8,3] as [2,12,2]: the last dim crosses the size-3 source dim. */
    int64_t s283[] = {2, 8, 3}, v2122[] = {2, 12, 2};
    rs_op_t vv[] = {oplist(RS_OP_VIEW, 0, v2122, 3)};
    assert_int_equal(gt_replay(3, s283, vv, 1, &t, NULL, 0), GT_OK);
    assert_true(gt_is_box(&t, 3, s283));
    assert_false(gt_is_aligned_box(&t, 3, s283));
    gt_free(&t);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static int64_t rnd(int64_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int64_t)(rng_state % (uint64_t)n);
}

/* The chunk rule for views must agree with the plain definition: a shape
 * is a view iff the same elements in the same order form a strided map. */
static void test_view_rule_matches_affinity(void **state)
{
    (void)state;
    int agree_legal = 0, agree_illegal = 0;
    for (int iter = 0; iter < 3000; iter++) {
        int64_t src[3] = {1 + rnd(4), 1 + rnd(4), 1 + rnd(4)};
        int64_t perm[3] = {0, 1, 2};
        for (int k = 2; k > 0; k--) {
            int j = (int)rnd(k + 1);
            int64_t tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
        rs_op_t ops[2] = {oplist(RS_OP_PERMUTE, 0, perm, 3),
                          op3(RS_OP_NARROW, rnd(3), 0, 1)};
        gt_tensor_t t;
        assert_int_equal(gt_replay(3, src, ops, 1, &t, NULL, 0), GT_OK);
        int64_t len = 1 + rnd(t.shape[ops[1].arg[0]]);
        ops[1].arg[2] = len;
        ops[1].arg[1] = rnd(t.shape[ops[1].arg[0]] - len + 1);
        gt_free(&t);
        assert_int_equal(gt_replay(3, src, ops, 2, &t, NULL, 0), GT_OK);
        /* A random factorization of numel into up to 4 sizes. */
        int64_t sizes[4], rest = t.numel;
        int nd = 0;
        while (nd < 3 && rest > 1) {
            int64_t f = 1 + rnd(rest);
            if (rest % f != 0)
                continue;
            sizes[nd++] = f;
            rest /= f;
        }
        sizes[nd++] = rest;
        gt_tensor_t copy = t;
        copy.ndim = nd;
        memcpy(copy.shape, sizes, (size_t)nd * sizeof(int64_t));
        int64_t stride[RS_MAX_DIMS];
        int affine = gt_strides(&copy, stride);
        rs_op_t view = oplist(RS_OP_VIEW, 0, sizes, (size_t)nd);
        gt_status_t st = gt_apply(&t, &view, NULL, 0);
        assert_int_equal(st, affine ? GT_OK : GT_ERR_NOT_VIEW);
        agree_legal += affine;
        agree_illegal += !affine;
        gt_free(&t);
    }
    assert_true(agree_legal > 100);
    assert_true(agree_illegal > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transpose_2x3),
        cmocka_unit_test(test_narrow),
        cmocka_unit_test(test_chunk_pieces),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_getitem),
        cmocka_unit_test(test_slice_no_clamp),
        cmocka_unit_test(test_unflatten),
        cmocka_unit_test(test_view_legality),
        cmocka_unit_test(test_flatten_squeeze_select),
        cmocka_unit_test(test_is_box),
        cmocka_unit_test(test_view_rule_matches_affinity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
