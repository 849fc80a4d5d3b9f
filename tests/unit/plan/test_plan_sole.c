/* A tensor one shard publishes whole is walked without a cell grid, and a
 * copy whose geometry is known to be one run of it goes straight to its
 * segment. The same tensors published with one more, empty, shard each
 * take the grid path: both plans must read the same runs, stage the same
 * boxes and count the same bytes, for whole copies, row and column
 * narrows, empty narrows and copies over the descriptor cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "reshard/reshard.h"

#define TENSORS 6
#define PLAIN 4 /* tensors without a whole copy */
#define ROWS 8
#define COLS 12

static const int64_t full[2] = {ROWS, COLS};

/* Tensor k whole on session "s<k % 2>"; with `padded`, also an empty
 * shard of it (no rows, at the last row) on the other session. */
static rs_sources_h make_sources(int padded)
{
    static const int64_t zero[2] = {0, 0}, empty[2] = {0, COLS},
                         last[2] = {ROWS, 0};
    rs_sources_h s;
    rs_diag_t d;
    char name[16];
    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int k = 0; k < TENSORS; k++) {
        snprintf(name, sizeof(name), "t%d", k);
        rs_shard_desc_t sh = {name, RS_DTYPE_BF16, 2, 2, full,
                              k % 2 ? "s1" : "s0", 0,
                              0x10000u + (uint64_t)k * 0x1000u, zero, full,
                              NULL};
        assert_int_equal(rs_sources_add_shard(s, &sh, &d), RS_OK);
        if (!padded)
            continue;
        rs_shard_desc_t e = sh;
        e.session = k % 2 ? "s0" : "s1";
        e.offset = last;
        e.shape = empty;
        e.addr = 0x90000u;
        assert_int_equal(rs_sources_add_shard(s, &e, &d), RS_OK);
    }
    return s;
}

static void add_copy(rs_capture_h cap, const char *src, const char *param,
                     const rs_op_t *op, int64_t rows, int64_t cols)
{
    const int64_t shape[2] = {rows, cols}, stride[2] = {cols, 1};
    rs_diag_t d;
    assert_int_equal(rs_capture_add_param(cap, param, 2, shape, RS_DTYPE_BF16,
                                          &d), RS_OK);
    rs_copy_desc_t c = {src, param, op, op != NULL, 0, 2, shape, stride,
                        RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(cap, &c, &d), RS_OK);
}

/* Each geometry appears on every tensor: the memo learns its facts from
 * the first two copies of it (the first resolves it, the second walks the
 * remembered box), the others take the fast path. */
static rs_capture_h make_capture(void)
{
    static const rs_op_t rows = {.kind = RS_OP_NARROW, .arg = {0, 2, 3}};
    static const rs_op_t cols = {.kind = RS_OP_NARROW, .arg = {1, 2, 5}};
    static const rs_op_t none = {.kind = RS_OP_NARROW, .arg = {0, 4, 0}};
    rs_capture_h cap;
    char src[16], param[16];
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    for (int k = 0; k < TENSORS; k++) {
        snprintf(src, sizeof(src), "t%d", k);
        if (k >= PLAIN) { /* a whole copy makes a full pull free */
            snprintf(param, sizeof(param), "whole%d", k);
            add_copy(cap, src, param, NULL, ROWS, COLS);
        }
        snprintf(param, sizeof(param), "rows%d", k);
        add_copy(cap, src, param, &rows, 3, COLS);
        snprintf(param, sizeof(param), "cols%d", k);
        add_copy(cap, src, param, &cols, ROWS, 5);
        snprintf(param, sizeof(param), "none%d", k);
        add_copy(cap, src, param, &none, 0, COLS);
    }
    return cap;
}

static rs_plan_h plan_of(rs_capture_h cap, rs_sources_h s, int64_t cap_segs)
{
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_diag_t d;
    rs_plan_params_init(&p);
    p.max_segments_per_copy = cap_segs;
    /* descriptors nearly free: under the cap every copy keeps its runs */
    if (cap_segs >= ROWS)
        p.descriptor_ns = 1e-6;
    assert_int_equal(rs_plan_build(cap, s, &p, &d, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));
    return plan;
}

/* Sessions are compared by name: the padded sources may number them in
 * another order. */
static void same_segments(rs_plan_h a, rs_plan_h b)
{
    size_t na, nb;
    const rs_segment_t *sa = rs_plan_segments(a, &na);
    const rs_segment_t *sb = rs_plan_segments(b, &nb);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_string_equal(rs_plan_session_name(a, sa[i].session),
                            rs_plan_session_name(b, sb[i].session));
        assert_int_equal(sa[i].param, sb[i].param);
        assert_int_equal(sa[i].src_addr, sb[i].src_addr);
        assert_int_equal(sa[i].dst_byte, sb[i].dst_byte);
        assert_int_equal(sa[i].nbytes, sb[i].nbytes);
    }
}

static void same_plans(int64_t cap_segs)
{
    rs_capture_h cap = make_capture();
    rs_sources_h sole = make_sources(0), padded = make_sources(1);
    rs_plan_h a = plan_of(cap, sole, cap_segs);
    rs_plan_h b = plan_of(cap, padded, cap_segs);
    rs_plan_stats_t x, y;
    size_t fa, fb;
    same_segments(a, b);
    rs_plan_staged_reads(a, &fa);
    rs_plan_staged_reads(b, &fb);
    assert_int_equal(fa, fb);
    rs_plan_stats(a, &x);
    rs_plan_stats(b, &y);
    assert_int_equal(x.bytes_planned, y.bytes_planned);
    assert_int_equal(x.needed_bytes, y.needed_bytes);
    /* on the tensors without a whole copy, a row narrow is one run and a
     * column narrow a run per row: the fast path must not have merged or
     * lost any; the others are pulled whole */
    size_t n;
    rs_plan_segments(a, &n);
    if (cap_segs >= ROWS) {
        assert_int_equal(n, (size_t)PLAIN * (1 + ROWS));
        assert_int_equal(fa, TENSORS - PLAIN);
    }
    rs_plan_destroy(a);
    rs_plan_destroy(b);
    rs_sources_destroy(sole);
    rs_sources_destroy(padded);
    rs_capture_destroy(cap);
}

static void test_exact_runs(void **state)
{
    (void)state;
    same_plans(64);
}

/* A cap below the column narrows' runs: those copies are counted and
 * staged, the one-run copies are still read by their runs. */
static void test_over_the_cap(void **state)
{
    (void)state;
    same_plans(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_runs),
        cmocka_unit_test(test_over_the_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
