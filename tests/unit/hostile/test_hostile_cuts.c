/* Hostile reshard.cuts.v1 documents: truncated at every byte, wrong types
 * at every level, cuts out of range, unsorted, repeated or at a dim's
 * edges, a cuts array of the wrong rank, tensors out of order or named
 * twice, shapes that overflow or exceed the rank limit, and a huge count of
 * cuts. Each is RS_ERR_INPUT naming the origin, the JSON path and (where
 * there is one) the tensor, and no set is returned; merging a good set
 * with one of a disagreeing shape leaves the target as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile.h"
#include "reshard/reshard.h"

static const char good[] =
    "{\"schema\": \"reshard.cuts.v1\", \"model\": \"m\", \"tensors\": ["
    "{\"name\": \"a\", \"shape\": [8, 6], \"cuts\": [[2, 4], []]},"
    "{\"name\": \"b\", \"shape\": [10], \"cuts\": [[5]]}]}";

/* One document with a single tensor entry whose text is given. */
static char *doc(const char *tensor)
{
    static const char fmt[] =
        "{\"schema\": \"reshard.cuts.v1\", \"tensors\": [%s]}";
    size_t n = strlen(fmt) + strlen(tensor) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, fmt, tensor);
    return s;
}

static void expect_refused_(const char *file, int line, const char *text,
                            const char *f1, const char *f2)
{
    rs_cuts_h c = NULL;
    rs_diag_t diag;
    rs_status_t st = rs_cuts_read_json(text, strlen(text), "cuts.json", &diag,
                                       &c);
    hostile_expect_(file, line, st, RS_ERR_INPUT, &diag, "cuts.json", f1, f2,
                    (const char *)NULL);
    assert_null(c);
}
#define expect_refused(text, f1, f2)                                          \
    expect_refused_(__FILE__, __LINE__, (text), (f1), (f2))

static void expect_tensor_refused(const char *tensor, const char *f1,
                                  const char *f2)
{
    char *t = doc(tensor);
    expect_refused(t, f1, f2);
    free(t);
}

static void test_good_reads(void **state)
{
    (void)state;
    rs_cuts_h c = NULL;
    rs_diag_t diag;
    size_t n;
    assert_int_equal(rs_cuts_read_json(good, strlen(good), "g", &diag, &c),
                     RS_OK);
    assert_int_equal(rs_cuts_num_tensors(c), 2);
    assert_non_null(rs_cuts_get(c, "a", 0, &n));
    assert_int_equal(n, 2);
    rs_cuts_destroy(c);
}

static void test_truncated(void **state)
{
    (void)state;
    for (size_t n = 0; n < strlen(good); n++) {
        rs_cuts_h c = NULL;
        rs_diag_t diag;
        rs_status_t st = rs_cuts_read_json(good, n, "cuts.json", &diag, &c);
        HOSTILE_EXPECT(st, RS_ERR_INPUT, &diag, "cuts.json");
        assert_null(c);
    }
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_refused("[]", "(root)", "object");
    expect_refused("{\"schema\": \"reshard.cuts.v2\", \"tensors\": []}",
                   "schema", "reshard.cuts.v1");
    expect_refused("{\"tensors\": []}", "schema", "missing");
    expect_refused("{\"schema\": \"reshard.cuts.v1\"}", "tensors", "missing");
    expect_refused("{\"schema\": \"reshard.cuts.v1\", \"tensors\": {}}",
                   "tensors", "array");
    expect_refused("{\"schema\": \"reshard.cuts.v1\", \"model\": 3,"
                   " \"tensors\": []}", "model", "string");
    expect_tensor_refused("3", "tensors[0]", "object");
    expect_tensor_refused("{\"shape\": [4], \"cuts\": [[]]}", "name",
                          "missing");
    expect_tensor_refused("{\"name\": 1, \"shape\": [4], \"cuts\": [[]]}",
                          "name", "string");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": \"4\", \"cuts\": [[]]}",
                          "shape", "array");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4]}", "cuts",
                          "missing");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [2]}",
                          "cuts[0]", "array");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[2.0]]}",
                          "cuts[0][0]", "integer");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[\"2\"]]}",
                          "cuts[0][0]", "integer");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[true]]}",
                          "cuts[0][0]", "boolean");
}

static void test_cuts_out_of_range(void **state)
{
    (void)state;
    /* at the edges, past them, negative, unsorted, repeated */
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[0]]}",
                          "cuts[0][0]", "'w'");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[4]]}",
                          "cuts[0][0]", "size 4");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[9]]}",
                          "cuts[0][0]", "strictly between");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4], \"cuts\": [[-1]]}",
                          "cuts[0][0]", "non-negative");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [8], "
                          "\"cuts\": [[3, 2]]}", "cuts[0][1]", "increase");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [8], "
                          "\"cuts\": [[3, 3]]}", "cuts[0][1]", "'w'");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [0], \"cuts\": [[0]]}",
                          "cuts[0][0]", "size 0");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4, 4], "
                          "\"cuts\": [[1], [1], [1]]}", "cuts", "rank 2");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4, 4], "
                          "\"cuts\": [[1]]}", "cuts", "rank 2");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [9223372036854775807],"
                          " \"cuts\": [[9223372036854775807]]}",
                          "cuts[0][0]", "'w'");
}

static void test_shapes_and_names(void **state)
{
    (void)state;
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [4294967296, "
                          "4294967296], \"cuts\": [[], []]}", "shape",
                          "overflows");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [1,1,1,1,1,1,1,1,1,1,"
                          "1,1,1,1,1,1,1], \"cuts\": []}", "shape", "limit");
    expect_tensor_refused("{\"name\": \"w\", \"shape\": [-4], \"cuts\": [[]]}",
                          "shape[0]", "non-negative");
    expect_tensor_refused("{\"name\": \"b\", \"shape\": [4], \"cuts\": [[]]},"
                          "{\"name\": \"a\", \"shape\": [4], \"cuts\": [[]]}",
                          "tensors[1].name", "sorted");
    expect_tensor_refused("{\"name\": \"a\", \"shape\": [4], \"cuts\": [[]]},"
                          "{\"name\": \"a\", \"shape\": [4], \"cuts\": [[1]]}",
                          "tensors[1].name", "'a'");
    expect_refused("{\"schema\": \"reshard.cuts.v1\", \"tensors\": [],"
                   " \"tensors\": []}", "duplicate", "tensors");
}

/* A million cuts in one dim read fine when they are in range; one more
 * than the dim can hold is refused at the first that is not. */
static void test_huge_count(void **state)
{
    (void)state;
    const int n = 1000000;
    size_t cap = (size_t)n * 9 + 200, used = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    used += (size_t)snprintf(s, cap, "{\"schema\": \"reshard.cuts.v1\", "
                             "\"tensors\": [{\"name\": \"w\", \"shape\": "
                             "[%d], \"cuts\": [[", n + 1);
    for (int i = 1; i <= n; i++)
        used += (size_t)snprintf(s + used, cap - used, i > 1 ? ",%d" : "%d", i);
    snprintf(s + used, cap - used, "]]}]}");
    rs_cuts_h c = NULL;
    rs_diag_t diag;
    size_t got;
    assert_int_equal(rs_cuts_read_json(s, strlen(s), "big", &diag, &c), RS_OK);
    assert_non_null(rs_cuts_get(c, "w", 0, &got));
    assert_int_equal(got, (size_t)n);
    rs_cuts_destroy(c);
    /* the same cuts in a dim one smaller: the last one is the dim's size */
    char *at = strstr(s, "[1000001]");
    assert_non_null(at);
    memcpy(at, "[1000000]", 9);
    HOSTILE_EXPECT(rs_cuts_read_json(s, strlen(s), "big", &diag, &c),
                   RS_ERR_INPUT, &diag, "cuts[0][999999]", "'w'");
    free(s);
}

static void test_merge_disagreeing_shape(void **state)
{
    (void)state;
    static const char other[] =
        "{\"schema\": \"reshard.cuts.v1\", \"tensors\": ["
        "{\"name\": \"a\", \"shape\": [8, 7], \"cuts\": [[1], [1]]}]}";
    rs_cuts_h g = NULL, o = NULL;
    rs_diag_t diag;
    size_t n;
    assert_int_equal(rs_cuts_read_json(good, strlen(good), "g", &diag, &g),
                     RS_OK);
    assert_int_equal(rs_cuts_read_json(other, strlen(other), "o", &diag, &o),
                     RS_OK);
    HOSTILE_EXPECT(rs_cuts_merge(g, o, &diag), RS_ERR_INPUT, &diag, "'a'",
                   "[8, 7]", "[8, 6]");
    assert_null(rs_cuts_get(g, "a", 1, &n));
    assert_int_equal(n, 0);
    rs_cuts_destroy(o);
    rs_cuts_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_reads),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_cuts_out_of_range),
        cmocka_unit_test(test_shapes_and_names),
        cmocka_unit_test(test_huge_count),
        cmocka_unit_test(test_merge_disagreeing_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
