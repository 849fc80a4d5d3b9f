/* The quantized-copy requests of a cut set ({"src", "spec"} pairs of
 * reshard.cuts.v1's "quantize"): kept sorted by (src, spec) and unique
 * whatever order they arrive in; specs that do not parse or are not
 * canonical, and sources that are empty or derived names, are refused
 * naming them; merges are unions; the JSON form reads back to the same
 * pairs and the same text, a set without pairs writes no "quantize" key,
 * and the reader refuses unsorted, repeated and malformed entries naming
 * the entry; a capture adds one pair per quantized copy (two copies of one
 * source and spec: one pair), beside the cuts of the boxes they read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "assert_status.h"
#include "reshard/capture.h"
#include "reshard/cuts.h"

#define B128 "fp8_block:128x128:f8e4m3"
#define CH5 "fp8_channel:f8e5m2"
#define T4 "fp8_tensor:f8e4m3"

static rs_cuts_h new_set(void)
{
    rs_cuts_h c = NULL;
    assert_int_equal(rs_cuts_create(NULL, &c), RS_OK);
    return c;
}

/* The set's pairs are exactly want[0..n) (src, spec, src, spec, ...). */
static void expect_pairs(rs_cuts_h c, const char *const *want, size_t n)
{
    const char *src = NULL, *spec = NULL;
    assert_int_equal(rs_cuts_num_quants(c), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rs_cuts_quant(c, i, &src, &spec), 1);
        if (strcmp(src, want[2 * i]) != 0 || strcmp(spec, want[2 * i + 1]))
            fail_msg("pair %zu: (%s, %s), want (%s, %s)", i, src, spec,
                     want[2 * i], want[2 * i + 1]);
    }
    src = "untouched";
    assert_int_equal(rs_cuts_quant(c, n, &src, &spec), 0);
    assert_string_equal(src, "untouched");
}

static void test_sorted_unique(void **state)
{
    (void)state;
    rs_cuts_h c = new_set();
    rs_diag_t d;
    const char *in[] = {"w", B128, "a", CH5, "w", T4, "a", CH5, "w", B128,
                        "m", B128, "a", B128};
    const char *want[] = {"a", B128, "a", CH5, "m", B128, "w", B128,
                          "w", T4};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i += 2)
        ASSERT_ST(rs_cuts_add_quant(c, in[i], in[i + 1], &d), RS_OK, d);
    expect_pairs(c, want, 5);
    rs_cuts_destroy(c);
}

static void expect_refused(rs_cuts_h c, const char *src, const char *spec,
                           const char *needle)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    assert_int_equal(rs_cuts_add_quant(c, src, spec, &d), RS_ERR_INPUT);
    if (strstr(d.msg, needle) == NULL)
        fail_msg("(%s, %s): '%s' does not say '%s'", src, spec, d.msg,
                 needle);
}

static void test_refusals(void **state)
{
    (void)state;
    rs_cuts_h c = new_set();
    rs_diag_t d;
    expect_refused(c, "w", "fp8_block:0x128:f8e4m3", "'fp8_block:0x128");
    expect_refused(c, "w", "fp8_block:128x128:f8e4m9", "source 'w'");
    expect_refused(c, "w", "int8", "spec 'int8'");
    expect_refused(c, "", B128, "not a source tensor name");
    expect_refused(c, "w#" B128, B128, "not a source tensor name");
    assert_int_equal(rs_cuts_add_quant(c, NULL, B128, &d),
                     RS_ERR_INVALID_ARG);
    assert_int_equal(rs_cuts_add_quant(NULL, "w", B128, &d),
                     RS_ERR_INVALID_ARG);
    assert_int_equal(rs_cuts_num_quants(c), 0);
    assert_int_equal(rs_cuts_num_quants(NULL), 0);
    rs_cuts_destroy(c);
}

static void test_merge_union(void **state)
{
    (void)state;
    rs_cuts_h a = new_set(), b = new_set();
    rs_diag_t d;
    const int64_t shape[2] = {256, 256};
    ASSERT_ST(rs_cuts_add_quant(a, "w", B128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(a, "x", T4, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(b, "w", B128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(b, "v", CH5, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add(b, "w", 2, shape, 1, 128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_merge(a, b, &d), RS_OK, d);
    const char *want[] = {"v", CH5, "w", B128, "x", T4};
    expect_pairs(a, want, 3);
    size_t n = 0;
    assert_non_null(rs_cuts_get(a, "w", 1, &n));
    assert_int_equal(n, 1);
    rs_cuts_destroy(a);
    rs_cuts_destroy(b);
}

static char *write_text(rs_cuts_h c, size_t *len_p)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len_p);
    rs_diag_t d;
    assert_non_null(f);
    ASSERT_ST(rs_cuts_write_json(c, f, &d), RS_OK, d);
    fclose(f);
    return buf;
}

static void test_json_round_trip(void **state)
{
    (void)state;
    rs_cuts_h c = new_set(), back = NULL;
    rs_diag_t d;
    size_t n1, n2;
    const int64_t shape[2] = {300, 260};
    char *plain = write_text(c, &n1);
    assert_null(strstr(plain, "quantize"));
    free(plain);
    ASSERT_ST(rs_cuts_add(c, "w", 2, shape, 0, 150, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(c, "w", B128, &d), RS_OK, d);
    ASSERT_ST(rs_cuts_add_quant(c, "q\"uote", CH5, &d), RS_OK, d);
    char *t1 = write_text(c, &n1);
    ASSERT_ST(rs_cuts_read_json(t1, n1, "t1", &d, &back), RS_OK, d);
    char *t2 = write_text(back, &n2);
    assert_string_equal(t1, t2);
    const char *want[] = {"q\"uote", CH5, "w", B128};
    expect_pairs(back, want, 2);
    assert_non_null(strstr(t1, "\"quantize\": ["));
    free(t1);
    free(t2);
    rs_cuts_destroy(back);
    rs_cuts_destroy(c);
}

static void expect_bad_json(const char *quantize, const char *needle)
{
    char text[1024];
    rs_cuts_h c = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    snprintf(text, sizeof(text), "{\"schema\": \"reshard.cuts.v1\", "
             "\"tensors\": [], \"quantize\": %s}", quantize);
    assert_int_equal(rs_cuts_read_json(text, strlen(text), "rec", &d, &c),
                     RS_ERR_INPUT);
    assert_null(c);
    if (strstr(d.msg, needle) == NULL || strstr(d.msg, "rec") == NULL)
        fail_msg("%s: '%s' does not say '%s' (and the origin)", quantize,
                 d.msg, needle);
}

static void test_json_refusals(void **state)
{
    (void)state;
    expect_bad_json("[{\"src\": \"w\", \"spec\": \"" B128 "\"}, "
                    "{\"src\": \"a\", \"spec\": \"" B128 "\"}]",
                    "must be sorted");
    expect_bad_json("[{\"src\": \"w\", \"spec\": \"" B128 "\"}, "
                    "{\"src\": \"w\", \"spec\": \"" B128 "\"}]",
                    "each pair named once");
    expect_bad_json("[{\"src\": \"w\", \"spec\": "
                    "\"fp8_block:0128x128:f8e4m3\"}]", "quantize[0]");
    expect_bad_json("[{\"spec\": \"" B128 "\"}]", "src");
    expect_bad_json("[{\"src\": \"w\"}]", "spec");
    expect_bad_json("[\"w\"]", "quantize[0]");
    expect_bad_json("{\"w\": 1}", "quantize");
}

/* Rows [r0, r0 + 16) of "w" [32, 32] quantized in 16x16 blocks into rows
 * of param "q" [32, 32], scales into "s" [2, 2]. */
static void add_quant_rows(rs_capture_h cap, int64_t r0, const char *spec)
{
    int64_t store[8];
    rs_quant_desc_t q;
    rs_diag_t d;
    const int64_t shape[2] = {16, 32}, stride[2] = {32, 1};
    const int64_t sshape[2] = {1, 2}, sstride[2] = {2, 1};
    ASSERT_ST(rs_quant_spec_parse(spec, store, &d, &q), RS_OK, d);
    q.scale_param = "s";
    q.scale_offset = r0 / 16 * 2;
    q.scale_ndim = 2;
    q.scale_shape = sshape;
    q.scale_stride = sstride;
    rs_op_t nar = {.kind = RS_OP_NARROW, .arg = {0, r0, 16}};
    rs_copy_desc_t c = {"w", "q", &nar, 1, r0 * 32, 2, shape, stride,
                        q.format};
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
}

static void test_from_capture(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    rs_cuts_h c = new_set();
    rs_diag_t d;
    const int64_t full[2] = {32, 32}, s2[2] = {2, 2};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_declare_source(cap, "w", 2, full, RS_DTYPE_BF16, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "q", 2, full, RS_DTYPE_F8E4M3, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "s", 2, s2, RS_DTYPE_F32, &d), RS_OK,
              d);
    add_quant_rows(cap, 16, "fp8_block:16x16:f8e4m3");
    add_quant_rows(cap, 0, "fp8_block:16x16:f8e4m3");
    ASSERT_ST(rs_cuts_add_capture(c, cap, &d), RS_OK, d);
    const char *want[] = {"w", "fp8_block:16x16:f8e4m3"};
    expect_pairs(c, want, 1);
    size_t n = 0;
    const int64_t *at = rs_cuts_get(c, "w", 0, &n);
    assert_int_equal(n, 1);
    assert_int_equal(at[0], 16);
    rs_cuts_destroy(c);
    rs_capture_destroy(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sorted_unique),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_merge_union),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_refusals),
        cmocka_unit_test(test_from_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
