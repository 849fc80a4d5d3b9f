/* The shared small helpers: checked row-major strides (against strides
 * computed by hand, with empty dims and overflow) and the clock's deadline
 * arithmetic (normalised nanoseconds, never behind the clock). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/checked.h"
#include "core/clock.h"

static void test_row_major(void **state)
{
    (void)state;
    const int64_t shape[4] = {2, 3, 4, 5}, empty[3] = {4, 0, 7};
    int64_t st[4];
    assert_true(rs__row_major(shape, 4, st));
    assert_int_equal(st[0], 60);
    assert_int_equal(st[1], 20);
    assert_int_equal(st[2], 5);
    assert_int_equal(st[3], 1);
    assert_true(rs__row_major(empty, 3, st)); /* a size-0 dim counts as 1 */
    assert_int_equal(st[0], 7);
    assert_int_equal(st[1], 7);
    assert_int_equal(st[2], 1);
    assert_true(rs__row_major(shape, 0, st));
}

static void test_row_major_overflow(void **state)
{
    (void)state;
    const int64_t big[3] = {1, INT64_C(1) << 31, INT64_C(1) << 31};
    const int64_t fits[2] = {INT64_MAX, 1}; /* the outer size is no stride */
    const int64_t over[3] = {1, INT64_C(1) << 32, INT64_C(1) << 31};
    int64_t st[3];
    assert_true(rs__row_major(big, 3, st));
    assert_int_equal(st[0], INT64_C(1) << 62);
    assert_int_equal(st[1], INT64_C(1) << 31);
    assert_true(rs__row_major(fits, 2, st));
    assert_int_equal(st[0], 1);
    assert_false(rs__row_major(over, 3, st)); /* st[0] would be 2^63 */
}

static void test_clock(void **state)
{
    (void)state;
    double a = rs__now_s(), b = rs__now_s();
    assert_true(b >= a);
    struct timespec t = rs__mono_after(1.75), w = rs__wall_after(0.999999999);
    assert_true(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L);
    assert_true(w.tv_nsec >= 0 && w.tv_nsec < 1000000000L);
    assert_true((double)t.tv_sec + (double)t.tv_nsec * 1e-9 >= b + 1.75 - 1e-6);
    assert_true(rs__wall_s() > 1.6e9); /* after 2020: the epoch clock */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_major),
        cmocka_unit_test(test_row_major_overflow),
        cmocka_unit_test(test_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
