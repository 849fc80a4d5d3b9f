/* Tests of the mx.reshard.shard_table.v1 loader: single blobs and arrays of
 * blobs, defaults of optional keys, errors naming origin, JSON path and
 * cause, cross-table agreement, and all-or-nothing loading of a file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/sources_impl.h"
#include "reshard/sources.h"
#include "tmp_path.h"

#define ORIGIN "src.json"

/* One blob of agent `agent` publishing tensor w (bf16, full [8, 4]) with
 * the given shard objects. */
static char *blob(const char *agent, const char *shards)
{
    static char buf[2][8192];
    static int which;
    char *out = buf[which ^= 1];
    snprintf(out, sizeof(buf[0]),
             "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"%s\","
             " \"tensors\": [{\"name\": \"w\", \"dtype\": \"torch.bfloat16\","
             " \"elsize\": 2, \"full_shape\": [8, 4], \"shards\": [%s]}]}",
             agent, shards);
    return out;
}

/* A blob whose only tensor is `tensor_fields` (no braces). */
static char *with_tensor(const char *tensor_fields)
{
    static char buf[8192];
    snprintf(buf, sizeof(buf),
             "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"a\","
             " \"tensors\": [{%s}]}",
             tensor_fields);
    return buf;
}

static rs_sources_h new_sources(void)
{
    rs_sources_h s = NULL;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    return s;
}

static void load_ok(rs_sources_h s, const char *text)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_sources_load_string(s, text, strlen(text), ORIGIN, &d);
    if (st != RS_OK)
        fail_msg("unexpected failure %s: %s", rs_status_str(st), d.msg);
}

/* Asserts RS_ERR_INPUT with a message "src.json: ..." holding path and
 * cause, and that the sources are unchanged (counts as before). */
static void load_bad_into(rs_sources_h s, const char *text, const char *path,
                          const char *cause)
{
    rs_diag_t d;
    size_t tensors = rs_sources_num_tensors(s);
    size_t shards = rs_sources_num_shards(s);
    size_t tables = rs_sources_num_tables(s);
    size_t sessions = s->sessions_len;

    rs_diag_clear(&d);
    rs_status_t st = rs_sources_load_string(s, text, strlen(text), ORIGIN, &d);
    if (st != RS_ERR_INPUT || strncmp(d.msg, ORIGIN ": ", 10) != 0 ||
        strstr(d.msg, path) == NULL || strstr(d.msg, cause) == NULL)
        fail_msg("status %s, message \"%s\"; wanted path \"%s\" and cause "
                 "\"%s\"", rs_status_str(st), d.msg, path, cause);
    assert_int_equal(rs_sources_num_tensors(s), tensors);
    assert_int_equal(rs_sources_num_shards(s), shards);
    assert_int_equal(rs_sources_num_tables(s), tables);
    assert_int_equal(s->sessions_len, sessions);
}

static void load_bad(const char *text, const char *path, const char *cause)
{
    rs_sources_h s = new_sources();
    load_bad_into(s, text, path, cause);
    assert_int_equal(rs_sources_num_shards(s), 0);
    rs_sources_destroy(s);
}

static void test_single_blob(void **state)
{
    (void)state;
    rs_sources_h s = new_sources();
    rs_table_info_t info;
    load_ok(s,
            "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r0\","
            " \"metadata_endpoint\": \"10.0.0.1:5555\", \"agent_meta_b64\": "
            "\"QUJD\", \"publisher_step\": 7, \"unknown\": [1],"
            " \"tensors\": [{\"name\": \"w\", \"dtype\": \"torch.bfloat16\","
            "  \"elsize\": 2, \"full_shape\": [8, 4], \"shards\": ["
            "   {\"agent_name\": \"r0\", \"device_id\": 3, \"addr\": 4096,"
            "    \"shard_offset\": [0, 0], \"shape\": [4, 4], \"digest\": \"ab\"},"
            "   {\"addr\": 9223372036854775775, \"shard_offset\": [4, 0],"
            "    \"shape\": [4, 4], \"extra\": null}]},"
            "  {\"name\": \"b\", \"dtype\": \"f32\", \"elsize\": 4,"
            "   \"full_shape\": [], \"shards\": [{\"agent_name\": \"r9\","
            "   \"addr\": 0, \"shard_offset\": [], \"shape\": []}]}]}");
    assert_int_equal(rs_sources_num_tables(s), 1);
    rs_sources_table(s, 0, &info);
    assert_string_equal(info.agent_name, "r0");
    assert_string_equal(info.metadata_endpoint, "10.0.0.1:5555");
    assert_string_equal(info.agent_meta_b64, "QUJD");
    assert_int_equal(info.publisher_step, 7);
    assert_int_equal(rs_sources_num_tensors(s), 2);
    assert_int_equal(rs_sources_num_shards(s), 3);

    const rs__source_tensor_t *w = rs__sources_find(s, "w");
    assert_non_null(w);
    assert_int_equal(w->dtype, RS_DTYPE_BF16);
    assert_int_equal(w->elsize, 2);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 8);
    assert_int_equal(w->shards_len, 2);
    assert_string_equal(s->sessions[w->shards[0].session], "r0");
    assert_int_equal(w->shards[0].device_id, 3);
    assert_int_equal(w->shards[0].addr, 4096);
    assert_string_equal(w->shards[0].digest, "ab");
    /* defaults: the blob's agent, device 0, no digest */
    assert_string_equal(s->sessions[w->shards[1].session], "r0");
    assert_int_equal(w->shards[1].device_id, 0);
    assert_int_equal(w->shards[1].addr, 9223372036854775775ULL);
    assert_int_equal(w->shards[1].offset[0], 4);
    assert_int_equal(w->shards[1].shape[0], 4);
    assert_null(w->shards[1].digest);
    const rs__source_tensor_t *b = rs__sources_find(s, "b");
    assert_non_null(b);
    assert_int_equal(b->ndim, 0);
    assert_string_equal(s->sessions[b->shards[0].session], "r9");
    rs_sources_destroy(s);
}

static void test_array_of_blobs(void **state)
{
    (void)state;
    rs_sources_h s = new_sources();
    rs_table_info_t info;
    char text[8192];
    snprintf(text, sizeof(text), "[%s, %s]",
             blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4]}"),
             blob("r1", "{\"addr\": 64, \"shard_offset\": [4, 0], "
                        "\"shape\": [4, 4]}"));
    load_ok(s, text);
    assert_int_equal(rs_sources_num_tables(s), 2);
    assert_int_equal(rs_sources_num_tensors(s), 1);
    assert_int_equal(rs_sources_num_shards(s), 2);
    rs_sources_table(s, 1, &info);
    assert_string_equal(info.agent_name, "r1");
    assert_null(info.metadata_endpoint);
    assert_null(info.agent_meta_b64);
    assert_int_equal(info.publisher_step, -1);
    const rs__source_tensor_t *w = rs__sources_find(s, "w");
    assert_string_equal(s->sessions[w->shards[1].session], "r1");
    assert_int_equal(w->shards[1].addr, 64);

    load_ok(s, "[]"); /* an empty array adds nothing */
    assert_int_equal(rs_sources_num_tables(s), 2);
    rs_sources_destroy(s);
}

static void test_malformed(void **state)
{
    (void)state;
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"tensors\": [",
             "line 1, column", "malformed JSON");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"\xc3\x28\"}", "line 1", "unable to decode byte");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"a\",\n \"agent_name\": \"b\", \"tensors\": []}",
             "line 2", "duplicate object key");
    load_bad("\"blob\"", "line 1", "malformed JSON");
}

static void test_schema_and_keys(void **state)
{
    (void)state;
    char text[8192];
    snprintf(text, sizeof(text), "[%s, %s]", blob("r0", ""),
             "{\"schema\": \"mx.reshard.shard_table.v2\"}");
    load_bad(text, ": [1].schema: ", "expected \"mx.reshard.shard_table.v1\", "
             "got \"mx.reshard.shard_table.v2\"");
    load_bad("[1]", ": [0]: ", "expected an object, got an integer");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"tensors\": []}",
             ": agent_name: ", "required key is missing");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"a\"}", ": tensors: ", "required key is missing");
    load_bad(with_tensor("\"dtype\": \"bf16\", \"elsize\": 2, "
                         "\"full_shape\": [2], \"shards\": []"),
             ": tensors[0].name: ", "required key is missing");
    load_bad(blob("r0", "{\"shard_offset\": [0, 0], \"shape\": [4, 4]}"),
             ": tensors[0].shards[0].addr: ", "required key is missing");
    load_bad(blob("r0", "{\"addr\": 0, \"shape\": [4, 4]}"),
             ": tensors[0].shards[0].shard_offset: ", "required key is missing");
    load_bad(with_tensor("\"name\": \"w\", \"dtype\": \"bf16\", \"elsize\": 2, "
                         "\"full_shape\": [2]"),
             ": tensors[0].shards: ", "required key is missing");
}

static void test_wrong_types(void **state)
{
    (void)state;
    load_bad(blob("r0", "{\"addr\": \"4096\", \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4]}"),
             ": tensors[0].shards[0].addr: ",
             "expected a non-negative integer, got a string");
    load_bad(blob("r0", "{\"addr\": 4096.0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4]}"),
             ": tensors[0].shards[0].addr: ", "got a real number");
    load_bad(blob("r0", "{\"addr\": -8, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4]}"),
             ": tensors[0].shards[0].addr: ",
             "expected a non-negative integer, got -8");
    load_bad(blob("r0", "{\"addr\": 18446744073709551615, "
                        "\"shard_offset\": [0, 0], \"shape\": [4, 4]}"),
             "line 1", "too big integer");
    load_bad(blob("r0", "{\"addr\": 0, \"device_id\": false, "
                        "\"shard_offset\": [0, 0], \"shape\": [4, 4]}"),
             ": tensors[0].shards[0].device_id: ", "got a boolean");
    load_bad(blob("r0", "{\"addr\": 0, \"agent_name\": 5, "
                        "\"shard_offset\": [0, 0], \"shape\": [4, 4]}"),
             ": tensors[0].shards[0].agent_name: ",
             "expected a string, got an integer");
    load_bad(blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4], \"digest\": []}"),
             ": tensors[0].shards[0].digest: ", "expected a string, got an array");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"a\", \"publisher_step\": \"7\", \"tensors\": []}",
             ": publisher_step: ", "got a string");
    load_bad("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"a\", \"tensors\": {}}", ": tensors: ",
             "expected an array, got an object");
}

static void test_shapes(void **state)
{
    (void)state;
    load_bad(with_tensor("\"name\": \"w\", \"dtype\": \"bf16\", \"elsize\": 2, "
                         "\"full_shape\": [8, -4], \"shards\": []"),
             ": tensors[0].full_shape[1]: ",
             "expected a non-negative integer, got -4");
    load_bad(with_tensor("\"name\": \"w\", \"dtype\": \"u8\", \"elsize\": 1, "
                         "\"full_shape\": [4611686018427387904, 4], "
                         "\"shards\": []"),
             ": tensors[0].full_shape: ",
             "shape [4611686018427387904, 4] overflows");
    load_bad(blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, -1]}"),
             ": tensors[0].shards[0].shape[1]: ",
             "expected a non-negative integer, got -1");
    load_bad(blob("r0", "{\"addr\": 0, \"shard_offset\": [0], "
                        "\"shape\": [4, 4]}"),
             ": tensors[0].shards[0].shard_offset: ",
             "rank 1 differs from full_shape rank 2");
    load_bad(blob("r0", "{\"addr\": 0, \"shard_offset\": [6, 0], "
                        "\"shape\": [4, 4]}"),
             ": tensors[0].shards[0]: ", "leaves the full shape in dim 0");
}

/* addr + shard bytes past 2^63-1: 9223372036854775000 + (2^61-1) * 4. */
static void test_addr_overflow(void **state)
{
    (void)state;
    load_bad(with_tensor("\"name\": \"big\", \"dtype\": \"f32\", \"elsize\": 4,"
                         " \"full_shape\": [2305843009213693951], \"shards\":"
                         " [{\"addr\": 9223372036854775000, \"shard_offset\":"
                         " [0], \"shape\": [2305843009213693951]}]"),
             ": tensors[0].shards[0].addr: ", "overflows the address space");
    /* 32 bytes ending exactly at 2^63 are one byte too many; see
     * test_single_blob for the same shard at one address lower */
    load_bad(blob("r0", "{\"addr\": 9223372036854775776, "
                        "\"shard_offset\": [0, 0], \"shape\": [4, 4]}"),
             ": tensors[0].shards[0].addr: ", "with 32 bytes overflows");
    /* a small shard just fits at a lower address */
    rs_sources_h s = new_sources();
    load_ok(s, with_tensor("\"name\": \"big\", \"dtype\": \"f32\", \"elsize\": 4,"
                           " \"full_shape\": [2305843009213693951], \"shards\":"
                           " [{\"addr\": 9223372036854775000, \"shard_offset\":"
                           " [0], \"shape\": [1]}]"));
    rs_sources_destroy(s);
}

static void test_dtypes(void **state)
{
    (void)state;
    load_bad(with_tensor("\"name\": \"w\", \"dtype\": \"torch.bfloat16\", "
                         "\"elsize\": 4, \"full_shape\": [2], \"shards\": []"),
             ": tensors[0].elsize: ",
             "tensor 'w': elsize 4 disagrees with dtype bf16 (2 bytes)");
    load_bad(with_tensor("\"name\": \"w\", \"dtype\": \"torch.complex64\", "
                         "\"elsize\": 8, \"full_shape\": [2], \"shards\": []"),
             ": tensors[0].dtype: ", "unknown dtype \"torch.complex64\"");
    rs_sources_h s = new_sources();
    load_ok(s, with_tensor("\"name\": \"w\", \"dtype\": \"float8_e4m3fn\", "
                           "\"elsize\": 1, \"full_shape\": [2], \"shards\": "
                           "[{\"addr\": 0, \"shard_offset\": [0], \"shape\": [2]}]"));
    assert_int_equal(rs__sources_find(s, "w")->dtype, RS_DTYPE_F8E4M3);
    rs_sources_destroy(s);
}

/* The same tensor must be declared alike in every blob and every file. */
static void test_cross_blob_agreement(void **state)
{
    (void)state;
    char text[8192];
    const char *other =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r1\","
        " \"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", \"elsize\": 2,"
        " \"full_shape\": [8, 8], \"shards\": [{\"addr\": 0, \"shard_offset\":"
        " [4, 0], \"shape\": [4, 4]}]}]}";
    snprintf(text, sizeof(text), "[%s, %s]",
             blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 4]}"), other);
    load_bad(text, ": [1].tensors[0].full_shape: ",
             "tensor 'w': full_shape [8, 8] disagrees with [8, 4] from an "
             "earlier table");

    rs_sources_h s = new_sources();
    load_ok(s, blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                          "\"shape\": [4, 4]}"));
    load_bad_into(s, other, ": tensors[0].full_shape: ", "disagrees with [8, 4]");
    load_bad_into(s, with_tensor("\"name\": \"w\", \"dtype\": \"f16\", "
                                 "\"elsize\": 2, \"full_shape\": [8, 4], "
                                 "\"shards\": []"),
                  ": tensors[0].dtype: ",
                  "tensor 'w': dtype f16 disagrees with bf16");
    rs_sources_destroy(s);
}

/* A file that fails half way leaves no trace: not its tables, tensors,
 * shards or sessions, and later files load as if it never came. */
static void test_rollback(void **state)
{
    (void)state;
    rs_sources_h s = new_sources();
    char text[8192];
    load_ok(s, blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                          "\"shape\": [4, 4]}"));
    assert_int_equal(rs_sources_num_shards(s), 1);

    /* adds a shard to w, a new tensor v, a new session r7, a table, then
     * fails in the second blob */
    snprintf(text, sizeof(text),
             "[{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"r7\", \"tensors\": [{\"name\": \"w\", \"dtype\": \"bf16\", "
             "\"elsize\": 2, \"full_shape\": [8, 4], \"shards\": [{\"addr\": 0,"
             " \"shard_offset\": [4, 0], \"shape\": [4, 4]}]}, {\"name\": \"v\","
             " \"dtype\": \"f32\", \"elsize\": 4, \"full_shape\": [3], "
             "\"shards\": [{\"addr\": 0, \"shard_offset\": [0], \"shape\": "
             "[3]}]}]}, %s]",
             blob("r8", "{\"addr\": 0, \"shard_offset\": [0, 0], "
                        "\"shape\": [4, 5]}"));
    load_bad_into(s, text, ": [1].tensors[0].shards[0]: ",
                  "leaves the full shape in dim 1");
    assert_null(rs__sources_find(s, "v"));
    assert_int_equal(rs__sources_find(s, "w")->shards_len, 1);
    assert_int_equal(s->sessions_len, 1);

    /* the same content, fixed, now loads and indexes cleanly */
    snprintf(text, sizeof(text),
             "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": "
             "\"r7\", \"tensors\": [{\"name\": \"v\", \"dtype\": \"f32\", "
             "\"elsize\": 4, \"full_shape\": [3], \"shards\": [{\"addr\": 8, "
             "\"shard_offset\": [0], \"shape\": [3]}]}]}");
    load_ok(s, text);
    assert_int_equal(rs_sources_num_tensors(s), 2);
    assert_int_equal(rs_sources_num_tables(s), 2);
    const rs__source_tensor_t *v = rs__sources_find(s, "v");
    assert_non_null(v);
    assert_int_equal(v->shards_len, 1);
    assert_int_equal(v->shards[0].addr, 8);
    assert_string_equal(s->sessions[v->shards[0].session], "r7");
    rs_sources_destroy(s);
}

static char *write_text(const char *text)
{
    return tmp_write("sources-json", text, strlen(text));
}

static void test_load_file(void **state)
{
    (void)state;
    rs_sources_h s = new_sources();
    rs_diag_t d;
    char *good = write_text(blob("r0", "{\"addr\": 0, \"shard_offset\": [0, 0],"
                                       " \"shape\": [4, 4]}"));
    char *bad = write_text(blob("r1", "{\"addr\": 0, \"shard_offset\": [4, 0],"
                                      " \"shape\": [4, 4]}, {\"addr\": -1}"));

    assert_int_equal(rs_sources_load_file(s, good, &d), RS_OK);
    assert_int_equal(rs_sources_load_file(s, bad, &d), RS_ERR_INPUT);
    assert_ptr_equal(strstr(d.msg, bad), d.msg);
    assert_non_null(strstr(d.msg, ": tensors[0].shards[1].addr: "));
    assert_int_equal(rs_sources_num_shards(s), 1);
    assert_int_equal(rs_sources_num_tables(s), 1);
    unlink(bad);
    assert_int_equal(rs_sources_load_file(s, bad, &d), RS_ERR_IO);
    assert_ptr_equal(strstr(d.msg, bad), d.msg);
    assert_non_null(strstr(d.msg, "No such file"));
    assert_int_equal(rs_sources_load_file(s, bad, NULL), RS_ERR_IO);
    assert_int_equal(rs_sources_num_shards(s), 1);
    unlink(good);
    free(good);
    free(bad);
    rs_sources_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_blob),
        cmocka_unit_test(test_array_of_blobs),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_schema_and_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_addr_overflow),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_cross_blob_agreement),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
