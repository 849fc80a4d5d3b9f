/* The shard-table writer: what it writes loads back through the reader into
 * the same shards and table metadata, dtypes are spelled the PyTorch way,
 * names that need escaping survive, and a failing stream is an error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reshard/sources.h"

static const int64_t full[2] = {4, 6}, off0[2] = {0, 0}, off1[2] = {2, 0};
static const int64_t half[2] = {2, 6};

static rs_shard_desc_t shard(const char *tensor, rs_dtype_t dt,
                             const int64_t *off, uint64_t addr,
                             const char *digest)
{
    rs_shard_desc_t d = {tensor, dt, rs_dtype_size(dt), 2, full, "rank\"0",
                         3, addr, off, half, digest};
    return d;
}

/* Writes a table of `n` shards to a malloc'd string. */
static char *write_table(const rs_table_info_t *info,
                         const rs_shard_desc_t *shards, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    rs_table_writer_h w;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_int_equal(rs_table_writer_open(out, info, NULL, &w), RS_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rs_table_writer_add(w, &shards[i], NULL), RS_OK);
    assert_int_equal(rs_table_writer_close(w, NULL), RS_OK);
    fclose(out);
    return text;
}

static void test_round_trip(void **state)
{
    (void)state;
    rs_table_info_t info = {"rank\"0", "10.0.0.5:5555", "AAEC", 7}, got_t;
    rs_shard_desc_t in[3] = {
        shard("w\\1", RS_DTYPE_BF16, off0, 4096, "rsd64:0123456789abcdef"),
        shard("w\\1", RS_DTYPE_BF16, off1, 8192, NULL),
        shard("v\n", RS_DTYPE_F8E4M3, off0, 100, ""),
    };
    char *text = write_table(&info, in, 3);
    rs_sources_h s;
    rs_diag_t d;
    assert_non_null(strstr(text, "\"torch.bfloat16\""));
    assert_non_null(strstr(text, "\"torch.float8_e4m3fn\""));
    assert_null(strstr(text, "\"bf16\""));
    assert_int_equal(rs_sources_create(&s), RS_OK);
    rs_diag_clear(&d);
    if (rs_sources_load_string(s, text, strlen(text), "t", &d) != RS_OK)
        fail_msg("%s\n%s", d.msg, text);
    assert_int_equal(rs_sources_num_tensors(s), 2);
    assert_int_equal(rs_sources_num_shards(s), 3);
    for (size_t i = 0; i < 3; i++) {
        rs_shard_desc_t g;
        rs_sources_shard(s, i, &g);
        assert_string_equal(g.tensor, in[i].tensor);
        assert_string_equal(g.session, in[i].session);
        assert_int_equal(g.dtype, in[i].dtype);
        assert_int_equal(g.device_id, 3);
        assert_int_equal(g.addr, in[i].addr);
        assert_memory_equal(g.offset, in[i].offset, 2 * sizeof(int64_t));
        assert_memory_equal(g.shape, half, sizeof(half));
        if (i == 0)
            assert_string_equal(g.digest, in[0].digest);
        else
            assert_true(g.digest == NULL || g.digest[0] == '\0');
    }
    rs_sources_table(s, 0, &got_t);
    assert_string_equal(got_t.agent_name, info.agent_name);
    assert_string_equal(got_t.metadata_endpoint, info.metadata_endpoint);
    assert_string_equal(got_t.agent_meta_b64, info.agent_meta_b64);
    assert_int_equal(got_t.publisher_step, 7);
    rs_sources_destroy(s);
    free(text);
}

/* No shards and no optional fields: still a valid, loadable blob. */
static void test_empty_table(void **state)
{
    (void)state;
    rs_table_info_t info = {"t0", NULL, NULL, -1}, got;
    char *text = write_table(&info, NULL, 0);
    rs_sources_h s;
    assert_null(strstr(text, "publisher_step"));
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_load_string(s, text, strlen(text), "t", NULL),
                     RS_OK);
    assert_int_equal(rs_sources_num_shards(s), 0);
    rs_sources_table(s, 0, &got);
    assert_int_equal(got.publisher_step, -1);
    assert_null(got.metadata_endpoint);
    rs_sources_destroy(s);
    free(text);
}

static void test_bad_arguments_and_io(void **state)
{
    (void)state;
    rs_table_info_t info = {"t0", NULL, NULL, 0}, nameless = {0};
    rs_table_writer_h w = NULL;
    rs_diag_t d;
    rs_shard_desc_t one = shard("w", RS_DTYPE_BF16, off0, 1, NULL);
    FILE *ro = fopen("/dev/null", "r"); /* every write fails */
    assert_non_null(ro);
    assert_int_equal(rs_table_writer_open(NULL, &info, NULL, &w),
                     RS_ERR_INVALID_ARG);
    assert_int_equal(rs_table_writer_open(ro, &nameless, NULL, &w),
                     RS_ERR_INVALID_ARG);
    assert_null(w);
    assert_int_equal(rs_table_writer_open(ro, &info, NULL, &w), RS_OK);
    rs_diag_clear(&d);
    assert_int_equal(rs_table_writer_add(w, &one, &d), RS_ERR_IO);
    assert_non_null(strstr(d.msg, "write failed"));
    assert_int_equal(rs_table_writer_close(w, NULL), RS_ERR_IO);
    fclose(ro);
    rs_table_writer_discard(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_table),
        cmocka_unit_test(test_bad_arguments_and_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
