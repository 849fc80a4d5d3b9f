/* Broken JSON against both loaders (captures and shard tables), from
 * strings and from files: truncated at every byte, over the size limit
 * (RESHARD_JSON_MAX_BYTES lowered for the test), nested 100000 deep,
 * invalid UTF-8, duplicate keys, and empty input. Each is RS_ERR_INPUT
 * naming the origin and the problem; no handle is returned, the sources
 * stay empty, and no file descriptor is left open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"
#include "reshard/reshard.h"
#include "tmp_path.h"

static const char good_capture[] =
    "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\": [4],"
    " \"dtype\": \"u8\"}}, \"copies\": [{\"src\": \"w\", \"ops\": [],"
    " \"param\": \"p\", \"dest_offset\": 0, \"dest_shape\": [4],"
    " \"dest_stride\": [1], \"dest_dtype\": \"u8\"}]}";

static const char good_table[] =
    "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r0\","
    " \"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", \"elsize\": 1,"
    " \"full_shape\": [4], \"shards\": [{\"addr\": 4096,"
    " \"shard_offset\": [0], \"shape\": [4]}]}]}";

/* Feeds text to both loaders; each must refuse it with every fragment. */
static void expect_both_refuse(const char *text, size_t len, const char *f1,
                               const char *f2)
{
    rs_capture_h cap = NULL;
    rs_sources_h s = NULL;
    rs_diag_t diag;

    HOSTILE_EXPECT(rs_capture_load_string(text, len, "c.json", &diag, &cap),
                   RS_ERR_INPUT, &diag, "c.json", f1, f2);
    assert_null(cap);
    assert_int_equal(rs_sources_create(&s), RS_OK);
    HOSTILE_EXPECT(rs_sources_load_string(s, text, len, "t.json", &diag),
                   RS_ERR_INPUT, &diag, "t.json", f1, f2);
    assert_int_equal(rs_sources_num_shards(s), 0);
    assert_int_equal(rs_sources_num_tables(s), 0);
    rs_sources_destroy(s);
}

/* Every proper prefix of a valid document is refused. */
static void test_truncated(void **state)
{
    (void)state;
    for (size_t n = 0; n < strlen(good_capture); n++) {
        rs_capture_h cap = NULL;
        rs_diag_t diag;
        rs_status_t st = rs_capture_load_string(good_capture, n, "c.json",
                                                &diag, &cap);
        HOSTILE_EXPECT(st, RS_ERR_INPUT, &diag, "c.json");
        assert_null(cap);
    }
    for (size_t n = 0; n < strlen(good_table); n++) {
        rs_sources_h s = NULL;
        rs_diag_t diag;
        assert_int_equal(rs_sources_create(&s), RS_OK);
        HOSTILE_EXPECT(rs_sources_load_string(s, good_table, n, "t.json",
                                              &diag), RS_ERR_INPUT, &diag,
                       "t.json");
        assert_int_equal(rs_sources_num_shards(s), 0);
        rs_sources_destroy(s);
    }
    expect_both_refuse(good_table, strlen(good_table) - 1, "malformed JSON",
                       "line 1");
    expect_both_refuse("", 0, "malformed JSON", "");
}

/* With the limit lowered to 64 bytes, both documents (well over it) are
 * refused before parsing, from strings and from files; at the default
 * limit they load. */
static void test_oversized(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    rs_sources_h s = NULL;
    rs_diag_t diag;
    char *cpath = tmp_write("hostile-json", good_capture, strlen(good_capture));
    char *tpath = tmp_write("hostile-json", good_table, strlen(good_table));
    int fds = hostile_count_fds();

    assert_int_equal(setenv("RESHARD_JSON_MAX_BYTES", "64", 1), 0);
    expect_both_refuse(good_capture, strlen(good_capture),
                       "more than the 64-byte limit", "");
    HOSTILE_EXPECT(rs_capture_load_file(cpath, &diag, &cap), RS_ERR_INPUT,
                   &diag, cpath, "more than the 64-byte limit");
    assert_int_equal(rs_sources_create(&s), RS_OK);
    HOSTILE_EXPECT(rs_sources_load_file(s, tpath, &diag), RS_ERR_INPUT, &diag,
                   tpath, "more than the 64-byte limit");
    /* a pipe has no size up front: the limit holds while reading */
    HOSTILE_EXPECT(rs_sources_load_file(s, "/proc/self/status", &diag),
                   RS_ERR_INPUT, &diag, "larger than the 64-byte limit");
    assert_int_equal(hostile_count_fds(), fds);

    /* values that do not parse are refused, naming the variable and the
     * value, never replaced by the default */
    static const char *const bad[] = {"0", "-5", "12abc", "1e6", " 64",
                                      "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[96];
        assert_int_equal(setenv("RESHARD_JSON_MAX_BYTES", bad[i], 1), 0);
        snprintf(want, sizeof(want), "RESHARD_JSON_MAX_BYTES='%s'", bad[i]);
        HOSTILE_EXPECT(rs_sources_load_file(s, tpath, &diag), RS_ERR_INPUT,
                       &diag, want, "not a whole number");
        HOSTILE_EXPECT(rs_capture_load_file(cpath, &diag, &cap), RS_ERR_INPUT,
                       &diag, want, "not a whole number");
        HOSTILE_EXPECT(rs_capture_load_string(good_capture,
                                              strlen(good_capture), "x",
                                              &diag, &cap),
                       RS_ERR_INPUT, &diag, want, "not a whole number");
    }
    /* empty means unset: the default */
    assert_int_equal(setenv("RESHARD_JSON_MAX_BYTES", "", 1), 0);
    assert_int_equal(rs_capture_load_file(cpath, &diag, &cap), RS_OK);
    rs_capture_destroy(cap);
    assert_int_equal(unsetenv("RESHARD_JSON_MAX_BYTES"), 0);
    rs_sources_destroy(s);
    unlink(cpath);
    unlink(tpath);
    free(cpath);
    free(tpath);
}

/* 100000 nested arrays (and objects): jansson stops at its depth limit
 * instead of recursing until the stack runs out. */
static void test_deeply_nested(void **state)
{
    (void)state;
    const size_t depth = 100000;
    char *text = malloc(2 * depth + 1);
    assert_non_null(text);
    memset(text, '[', depth);
    memset(text + depth, ']', depth);
    text[2 * depth] = '\0';
    expect_both_refuse(text, 2 * depth, "malformed JSON", "depth");

    /* inside a valid prefix, where a loader would look for copies */
    const char head[] = "{\"schema\": \"reshard.capture.v1\", \"params\": {},"
                        " \"copies\": ";
    size_t hl = strlen(head), n = hl + 2 * depth + 1;
    char *doc = malloc(n + 1);
    assert_non_null(doc);
    memcpy(doc, head, hl);
    memcpy(doc + hl, text, 2 * depth);
    doc[n - 1] = '}';
    doc[n] = '\0';
    expect_both_refuse(doc, n, "malformed JSON", "depth");
    free(doc);

    for (size_t i = 0; i < depth; i++) {
        text[i] = i % 2 ? '{' : '[';
    }
    expect_both_refuse(text, 2 * depth, "malformed JSON", "");
    free(text);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    /* a parameter name with a lone continuation byte, an overlong '/', and
     * a surrogate encoded in UTF-8 */
    static const char *bad[] = {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char doc[512];
        snprintf(doc, sizeof(doc),
                 "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p%s\":"
                 " {\"shape\": [4], \"dtype\": \"u8\"}}, \"copies\": []}",
                 bad[i]);
        expect_both_refuse(doc, strlen(doc), "malformed JSON", "");
        snprintf(doc, sizeof(doc),
                 "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\":"
                 " \"r%s\", \"tensors\": []}", bad[i]);
        expect_both_refuse(doc, strlen(doc), "malformed JSON", "");
    }
    /* an escaped NUL inside a name would cut it short: refused as well */
    static const char nul[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r\","
        " \"tensors\": [{\"name\": \"w\\u0000x\", \"dtype\": \"u8\","
        " \"elsize\": 1, \"full_shape\": [4], \"shards\": []}]}";
    expect_both_refuse(nul, strlen(nul), "", "");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    static const char cap[] =
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"u8\"}, \"p\": {\"shape\": [8], \"dtype\": \"u8\"}},"
        " \"copies\": []}";
    expect_both_refuse(cap, strlen(cap), "malformed JSON", "duplicate");
    static const char tab[] =
        "{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": \"r0\","
        " \"tensors\": [{\"name\": \"w\", \"dtype\": \"u8\", \"elsize\": 1,"
        " \"full_shape\": [4], \"shards\": [{\"addr\": 0, \"addr\": 64,"
        " \"shard_offset\": [0], \"shape\": [4]}]}]}";
    expect_both_refuse(tab, strlen(tab), "malformed JSON", "duplicate");
}

/* Failing file loads of every kind above release their descriptors. */
static void test_file_errors_release_fds(void **state)
{
    (void)state;
    char *trunc = tmp_write("hostile-json", good_table, strlen(good_table) / 2);
    char *dup = tmp_write("hostile-json", "{\"a\": 1, \"a\": 2}", 16);
    rs_sources_h s = NULL;
    rs_capture_h cap = NULL;
    rs_diag_t diag;
    int fds = hostile_count_fds();

    assert_int_equal(rs_sources_create(&s), RS_OK);
    for (int i = 0; i < 20; i++) {
        HOSTILE_EXPECT(rs_sources_load_file(s, trunc, &diag), RS_ERR_INPUT,
                       &diag, trunc, "malformed JSON");
        HOSTILE_EXPECT(rs_capture_load_file(trunc, &diag, &cap), RS_ERR_INPUT,
                       &diag, trunc, "malformed JSON");
        HOSTILE_EXPECT(rs_capture_load_file(dup, &diag, &cap), RS_ERR_INPUT,
                       &diag, dup, "duplicate");
        HOSTILE_EXPECT(rs_capture_load_file("/", &diag, &cap), RS_ERR_IO,
                       &diag, "/");
    }
    assert_null(cap);
    assert_int_equal(hostile_count_fds(), fds);
    rs_sources_destroy(s);
    unlink(trunc);
    unlink(dup);
    free(trunc);
    free(dup);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_deeply_nested),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_file_errors_release_fds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
