/* A capture's source names (capture.c, capture_frame.c): whether some
 * name holds RS_QUANT_NAME_SEP (rs__capture_named_derived), set by a
 * copy's source, a declared source or an unsupported entry with one and
 * by nothing else (not by a name added unindexed), kept by the planner's
 * working copy; and names added unindexed: each add is a new id with its own entry, the name index
 * never finds them (a later intern of the same text gets a new id of
 * its own), and the indexed names keep answering as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "model/capture_impl.h"
#include "reshard/reshard.h"

static const int64_t SHAPE[2] = {4, 6}, STRIDE[2] = {6, 1};

static rs_capture_h capture_with_param(void)
{
    rs_capture_h cap;
    rs_diag_t d;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 2, SHAPE, RS_DTYPE_BF16,
                                          &d),
                     RS_OK);
    return cap;
}

static void add_copy(rs_capture_h cap, const char *src)
{
    rs_copy_desc_t c = {src, "p", NULL, 0, 0, 2, SHAPE, STRIDE, RS_DTYPE_BF16};
    rs_diag_t d;
    assert_int_equal(rs_capture_add_copy(cap, &c, &d), RS_OK);
}

static void test_flag_follows_the_names(void **state)
{
    (void)state;
    rs_capture_h cap = capture_with_param();
    assert_false(rs__capture_named_derived(cap));
    add_copy(cap, "model.layers.0.mlp.weight");
    add_copy(cap, "model.layers.1.mlp.weight");
    assert_false(rs__capture_named_derived(cap));
    rs_capture_h work;
    rs_diag_t d;
    assert_int_equal(rs__capture_work_copy(cap, 4, &work, &d), RS_OK);
    assert_false(rs__capture_named_derived(work));
    rs_capture_destroy(work);

    add_copy(cap, "model.layers.2.mlp.weight#fp8_block:128x128:f8e4m3");
    assert_true(rs__capture_named_derived(cap));
    assert_int_equal(rs__capture_work_copy(cap, 4, &work, &d), RS_OK);
    assert_true(rs__capture_named_derived(work));
    rs_capture_destroy(work);
    rs_capture_destroy(cap);

    /* a declared source and an unsupported entry name a source too */
    cap = capture_with_param();
    assert_int_equal(rs_capture_declare_source(cap, "a#b", 2, SHAPE,
                                           RS_DTYPE_BF16, &d),
                     RS_OK);
    assert_true(rs__capture_named_derived(cap));
    rs_capture_destroy(cap);
    cap = capture_with_param();
    assert_int_equal(rs_capture_add_unsupported(cap, "c#d", "why", &d), RS_OK);
    assert_true(rs__capture_named_derived(cap));
    rs_capture_destroy(cap);
}

static void test_unindexed_names(void **state)
{
    (void)state;
    rs_capture_h cap = capture_with_param();
    add_copy(cap, "x");
    uint32_t x = cap->copies[0].src_id, a, b, c, again;
    assert_true(rs__capture_add_name_unindexed(cap, "x#q", &a));
    assert_false(rs__capture_named_derived(cap)); /* interned names only */
    assert_true(rs__capture_add_name_unindexed(cap, "x#q", &b));
    assert_int_not_equal(a, b);
    assert_int_not_equal(a, x);
    assert_string_equal(cap->names[a].name, "x#q");
    assert_string_equal(cap->names[b].name, "x#q");
    assert_int_equal(cap->names[a].decl, -1);
    assert_int_equal(cap->names[a].hash, 0);
    /* not in the index: interning the same text is a third id, which
     * the index then answers */
    assert_true(rs__capture_intern_owned(cap, cap->names[a].name,
                                         rs__hash_str("x#q"), &c));
    assert_int_not_equal(c, a);
    assert_int_not_equal(c, b);
    assert_true(rs__capture_intern_owned(cap, "x#q", rs__hash_str("x#q"),
                                         &again));
    assert_int_equal(again, c);
    /* the indexed name from before still answers with its id */
    assert_true(rs__capture_intern_owned(cap, "x", rs__hash_str("x"), &again));
    assert_int_equal(again, x);
    assert_int_equal(cap->names_len, 4);
    rs_capture_destroy(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag_follows_the_names),
        cmocka_unit_test(test_unindexed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
