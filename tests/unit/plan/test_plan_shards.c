/* The plan's shard list (rs_plan_shards): every shard of the sources the
 * plan reads, grouped by session in session order, each session's by
 * address, equal keys in listing order, digests the plan's own copies.
 * Drives the two rare branches of assembly's listing that the model pairs
 * do not: a session whose addresses go down in listing order (sorted
 * after) and tables with digests (copied after the listing), against a
 * ground truth computed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "reshard/reshard.h"

#define TENSORS 4
#define SESSIONS 2
#define ROWS 8
#define COLS 4

/* Tensor k's shard on session j: its address, going down with k on
 * session 0 when `descending` (the listing is then out of order there). */
static uint64_t addr_of(int k, int j, int descending)
{
    int slot = descending && j == 0 ? TENSORS - 1 - k : k;
    return 0x10000u * (uint64_t)(j + 1) + 0x100u * (uint64_t)slot;
}

static void build(rs_sources_h s, rs_capture_h cap, int descending,
                  int digests)
{
    const int64_t full[2] = {ROWS, COLS}, shape[2] = {ROWS / 2, COLS};
    const int64_t stride[2] = {COLS, 1};
    char tensor[16], session[16], digest[32], param[16];
    rs_diag_t d;
    for (int k = 0; k < TENSORS; k++)
        for (int j = 0; j < SESSIONS; j++) {
            const int64_t off[2] = {j * (ROWS / 2), 0};
            snprintf(tensor, sizeof(tensor), "t%d", k);
            snprintf(session, sizeof(session), "s%d", j);
            snprintf(digest, sizeof(digest), "d%d.%d", k, j);
            rs_shard_desc_t sh = {tensor, RS_DTYPE_F32, 4, 2, full, session,
                                  0, addr_of(k, j, descending), off, shape,
                                  digests && k % 2 == 0 ? digest : NULL};
            assert_int_equal(rs_sources_add_shard(s, &sh, &d), RS_OK);
        }
    for (int k = 0; k < TENSORS; k++) {
        snprintf(tensor, sizeof(tensor), "t%d", k);
        snprintf(param, sizeof(param), "p%d", k);
        assert_int_equal(rs_capture_add_param(cap, param, 2, full,
                                              RS_DTYPE_F32, &d), RS_OK);
        rs_copy_desc_t c = {tensor, param, NULL, 0, 0, 2, full, stride,
                            RS_DTYPE_F32};
        assert_int_equal(rs_capture_add_copy(cap, &c, &d), RS_OK);
    }
}

static void check(int descending, int digests)
{
    rs_sources_h s;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_diag_t d;
    size_t n = 0, i = 0;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    build(s, cap, descending, digests);
    assert_int_equal(rs_plan_build(cap, s, NULL, &d, &plan), RS_OK);
    const rs_shard_ref_t *r = rs_plan_shards(plan, &n);
    assert_int_equal(n, TENSORS * SESSIONS);
    for (int j = 0; j < SESSIONS; j++) {
        char want_session[16];
        snprintf(want_session, sizeof(want_session), "s%d", j);
        /* the truth: session j's tensors by address */
        for (int slot = 0; slot < TENSORS; slot++, i++) {
            int k = descending && j == 0 ? TENSORS - 1 - slot : slot;
            char name[16], digest[32];
            snprintf(name, sizeof(name), "t%d", k);
            snprintf(digest, sizeof(digest), "d%d.%d", k, j);
            assert_string_equal(rs_plan_session_name(plan, r[i].session),
                                want_session);
            assert_string_equal(r[i].tensor, name);
            assert_int_equal(r[i].addr, addr_of(k, j, descending));
            assert_int_equal(r[i].nbytes, (ROWS / 2) * COLS * 4);
            if (digests && k % 2 == 0)
                assert_string_equal(r[i].digest, digest);
            else
                assert_null(r[i].digest);
        }
    }
    rs_sources_destroy(s); /* the plan's digests are its own */
    for (i = 0; i < n; i++)
        if (r[i].digest != NULL)
            assert_int_equal(r[i].digest[0], 'd');
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
}

static void test_in_order(void **state)
{
    (void)state;
    check(0, 0);
}

static void test_addresses_down(void **state)
{
    (void)state;
    check(1, 0);
}

static void test_digests(void **state)
{
    (void)state;
    check(0, 1);
    check(1, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_addresses_down),
        cmocka_unit_test(test_digests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
