/* Regressions found by tests/fuzz/fuzz_plan and fuzz_sources: the saved
 * reproducers replayed through the harnesses (each builds, plans and
 * executes what its input decodes to, checking every rule). */
#include "../../fuzz/fuzz_plan.c"
#include "../../fuzz/replay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

/* Param "p" [4] f32 gets the empty narrow(0, start, 0) of source "w" [4]
 * (src_dt, published whole by t0) at dest_offset: the plan of that one
 * copy, its capture and sources for the caller to destroy. */
static rs_plan_h empty_copy_plan(rs_dtype_t src_dt, int64_t start,
                                 int64_t dest_offset, rs_capture_h *cap_p,
                                 rs_sources_h *srcs_p)
{
    rs_plan_h plan = NULL;
    rs_diag_t diag;
    const int64_t pshape[1] = {4}, full[1] = {4}, off[1] = {0};
    const int64_t zero[1] = {0}, stride[1] = {1};
    assert_int_equal(rs_capture_create(cap_p), RS_OK);
    assert_int_equal(rs_sources_create(srcs_p), RS_OK);
    assert_int_equal(rs_capture_add_param(*cap_p, "p", 1, pshape,
                                          RS_DTYPE_F32, &diag), RS_OK);
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, start, 0}};
    rs_copy_desc_t cd = {"w", "p", &op, 1, dest_offset, 1, zero, stride,
                         RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(*cap_p, &cd, &diag), RS_OK);
    rs_shard_desc_t sd = {"w", src_dt, rs_dtype_size(src_dt), 1, full, "t0",
                          0, 4096, off, full, NULL};
    assert_int_equal(rs_sources_add_shard(*srcs_p, &sd, &diag), RS_OK);
    assert_int_equal(rs_plan_build(*cap_p, *srcs_p, NULL, &diag, &plan),
                     RS_OK);
    return plan;
}

/* A convert (bf16 source into an f32 param) of an empty destination has
 * no segments: the planner took their address from an empty vector (null
 * plus zero, undefined behaviour under UBSan). */
static void test_convert_without_segments(void **state)
{
    (void)state;
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan = empty_copy_plan(RS_DTYPE_BF16, 0, 0, &cap, &srcs);
    size_t n = 0;
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cv[i].staging_bytes, 0);
    rs_plan_destroy(plan);
    rs_sources_destroy(srcs);
    rs_capture_destroy(cap);
}

/* An empty destination (narrow to 0 elements) whose dest_offset lies far
 * past its parameter: the destination check skipped empty views, so the
 * executor formed the cast's destination pointer that far outside (past the
 * end of the address space, so it wrapped to before the parameter), which
 * UBSan reports as pointer overflow. An empty view still has to start inside
 * (or at the end of) its parameter. */
static void test_empty_dest_offset_outside(void **state)
{
    (void)state;
    const int64_t offsets[] = {5, ((int64_t)1 << 61) + 3, INT64_MAX};
    for (size_t t = 0; t < sizeof(offsets) / sizeof(offsets[0]); t++) {
        rs_capture_h cap;
        rs_sources_h srcs;
        rs_plan_h plan = empty_copy_plan(RS_DTYPE_BF16, 0, offsets[t], &cap,
                                         &srcs);
        size_t n = 0;
        rs_plan_converts(plan, &n);
        assert_int_equal(n, 0);
        assert_int_equal(rs_plan_num_fallback(plan), 1);
        const char *src = NULL, *reason = NULL;
        rs_plan_fallback(plan, 0, &src, &reason);
        assert_string_equal(src, "w");
        assert_non_null(strstr(reason, "leaves its parameter"));
        rs_plan_destroy(plan);
        rs_sources_destroy(srcs);
        rs_capture_destroy(cap);
    }
}

/* At the end of its parameter an empty destination is fine (PyTorch
 * narrows to [n, n) all the time): planned, nothing written. */
static void test_empty_dest_at_end(void **state)
{
    (void)state;
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan = empty_copy_plan(RS_DTYPE_F32, 4, 4, &cap, &srcs);
    assert_int_equal(rs_plan_num_fallback(plan), 0);
    rs_plan_destroy(plan);
    rs_sources_destroy(srcs);
    rs_capture_destroy(cap);
}

static void test_replay_plan_inputs(void **state)
{
    (void)state;
    assert_true(fz_replay("fuzz_plan", LLVMFuzzerTestOneInput) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_without_segments),
        cmocka_unit_test(test_empty_dest_offset_outside),
        cmocka_unit_test(test_empty_dest_at_end),
        cmocka_unit_test(test_replay_plan_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
