/* rs_format_bytes, rs_format_rate and rs_format_seconds: one unit per
 * quantity, never in scientific notation, enough digits that a small value
 * is not 0; and rs_clock_seconds never goes back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "reshard/units.h"

static void test_bytes(void **state)
{
    (void)state;
    static const struct { uint64_t v; const char *want; } cases[] = {
        {0, "0 B"}, {1, "1 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"},
        {1536, "1.50 KiB"}, {10 * 1024, "10.0 KiB"}, {425088, "415 KiB"},
        {1048575, "1024 KiB"}, {1048576, "1.00 MiB"},
        {(uint64_t)3 << 30, "3.00 GiB"}, {(uint64_t)2 << 40, "2.00 TiB"},
        {UINT64_MAX, "16.0 EiB"}};
    char buf[RS_UNITS_TEXT_MAX];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(rs_format_bytes(buf, sizeof(buf), cases[i].v),
                            cases[i].want);
}

static void test_rate(void **state)
{
    (void)state;
    static const struct { double v; const char *want; } cases[] = {
        {9.31e9, "9.31 GB/s"}, {0, "0.00 GB/s"}, {4.3e7, "0.043 GB/s"},
        {130, "0.00000013 GB/s"}, {1, "0.000000001 GB/s"},
        {5e10, "50.00 GB/s"}, {1e300, "more than 10^12 GB/s"}};
    char buf[RS_UNITS_TEXT_MAX];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(rs_format_rate(buf, sizeof(buf), cases[i].v),
                            cases[i].want);
    /* every rate from 1 B/s to 1 TB/s: digits, no exponent, not zero */
    for (double v = 1; v < 1e12; v *= 1.7) {
        rs_format_rate(buf, sizeof(buf), v);
        assert_null(strchr(buf, 'e'));
        assert_true(strspn(buf, "0.") < strlen(buf) - strlen(" GB/s"));
    }
}

static void test_seconds(void **state)
{
    (void)state;
    static const struct { double v; const char *want; } cases[] = {
        {0, "0 s"}, {-1, "0 s"}, {2e-6, "2 us"}, {850e-6, "850 us"},
        {0.0144, "14.4 ms"}, {0.2162, "216.2 ms"}, {1, "1.00 s"},
        {2.314, "2.31 s"}, {5.17, "5.17 s"}, {3600, "3600.00 s"}};
    char buf[RS_UNITS_TEXT_MAX];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(rs_format_seconds(buf, sizeof(buf), cases[i].v),
                            cases[i].want);
    /* every duration from a nanosecond to a year: no exponent */
    for (double v = 1e-9; v < 4e7; v *= 1.7)
        assert_null(strchr(rs_format_seconds(buf, sizeof(buf), v), 'e'));
}

static void test_clock(void **state)
{
    (void)state;
    double prev = rs_clock_seconds();
    for (int i = 0; i < 1000; i++) {
        double t = rs_clock_seconds();
        assert_true(t >= prev);
        prev = t;
    }
}

static void test_short_buffer(void **state)
{
    (void)state;
    char buf[4];
    assert_string_equal(rs_format_bytes(buf, sizeof(buf), 425088), "415");
    assert_string_equal(rs_format_rate(buf, sizeof(buf), 9.31e9), "9.3");
    assert_string_equal(rs_format_seconds(buf, sizeof(buf), 2.31), "2.3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_seconds),
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_short_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
