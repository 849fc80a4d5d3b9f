/* rs_sources_merge: every shard, session and table of one set lands in
 * another in order, and a merge that meets a disagreeing shard leaves the
 * destination exactly as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "reshard/sources.h"

static const int64_t full[2] = {4, 6};
static const int64_t off0[2] = {0, 0}, off1[2] = {2, 0};
static const int64_t half[2] = {2, 6};

static rs_shard_desc_t shard(const char *tensor, const char *session,
                             const int64_t *off, uint64_t addr)
{
    rs_shard_desc_t d = {tensor, RS_DTYPE_BF16, 2, 2, full, session, 0,
                         addr, off, half, NULL};
    return d;
}

static void add(rs_sources_h s, rs_shard_desc_t d)
{
    assert_int_equal(rs_sources_add_shard(s, &d, NULL), RS_OK);
}

static void test_merge_copies_in_order(void **state)
{
    (void)state;
    rs_sources_h a, b;
    rs_table_info_t t = {"rank-1", NULL, NULL, 7};
    rs_shard_desc_t got;
    assert_int_equal(rs_sources_create(&a), RS_OK);
    assert_int_equal(rs_sources_create(&b), RS_OK);
    add(a, shard("w", "rank-0", off0, 4096));
    add(b, shard("w", "rank-1", off1, 8192));
    add(b, shard("v", "rank-1", off0, 9000));
    assert_int_equal(rs_sources_add_table(b, &t, NULL), RS_OK);
    assert_int_equal(rs_sources_merge(a, b, NULL), RS_OK);
    assert_int_equal(rs_sources_num_tensors(a), 2);
    assert_int_equal(rs_sources_num_shards(a), 3);
    assert_int_equal(rs_sources_num_tables(a), 1);
    rs_sources_shard(a, 1, &got);
    assert_string_equal(got.tensor, "w");
    assert_string_equal(got.session, "rank-1");
    assert_int_equal(got.addr, 8192);
    assert_int_equal(got.offset[0], 2);
    rs_sources_shard(a, 2, &got);
    assert_string_equal(got.tensor, "v");
    assert_int_equal(rs_sources_num_shards(b), 2); /* `from` is only read */
    rs_sources_destroy(a);
    rs_sources_destroy(b);
}

static void test_merge_all_or_nothing(void **state)
{
    (void)state;
    rs_sources_h a, b;
    rs_diag_t d;
    rs_table_info_t t = {"rank-1", NULL, NULL, 7};
    rs_shard_desc_t bad = shard("w", "rank-1", off1, 8192);
    bad.dtype = RS_DTYPE_F16; /* disagrees with a's "w" */
    assert_int_equal(rs_sources_create(&a), RS_OK);
    assert_int_equal(rs_sources_create(&b), RS_OK);
    add(a, shard("w", "rank-0", off0, 4096));
    add(b, shard("u", "rank-1", off0, 100));
    add(b, bad);
    assert_int_equal(rs_sources_add_table(b, &t, NULL), RS_OK);
    rs_diag_clear(&d);
    assert_int_equal(rs_sources_merge(a, b, &d), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "'w'"));
    assert_int_equal(rs_sources_num_tensors(a), 1);
    assert_int_equal(rs_sources_num_shards(a), 1);
    assert_int_equal(rs_sources_num_tables(a), 0);
    assert_int_equal(rs_sources_merge(a, a, NULL), RS_ERR_INVALID_ARG);
    assert_int_equal(rs_sources_merge(NULL, b, NULL), RS_ERR_INVALID_ARG);
    rs_sources_destroy(a);
    rs_sources_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_copies_in_order),
        cmocka_unit_test(test_merge_all_or_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
