/* Tests of the reshard.capture.v1 loader: every op kind lands in the rs_op_t
 * fields documented in capture.h, declared sources land in order, and every
 * kind of bad input is refused with a message naming the origin, the JSON
 * path and the cause. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/json.h"
#include "reshard/capture.h"
#include "tmp_path.h"

#define ORIGIN "cap.json"

/* A capture with one bf16 parameter w[8, 4] and one copy applying `ops`. */
static char *with_ops(const char *ops)
{
    static char buf[8192];
    snprintf(buf, sizeof(buf),
             "{\"schema\": \"reshard.capture.v1\","
             " \"params\": {\"w\": {\"shape\": [8, 4], \"dtype\": \"bf16\"}},"
             " \"copies\": [{\"src\": \"s\", \"ops\": [%s], \"param\": \"w\","
             " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
             " \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"}]}",
             ops);
    return buf;
}

/* Substitutes `copy_fields` for the whole copy object. */
static char *with_copy(const char *copy_fields)
{
    static char buf[8192];
    snprintf(buf, sizeof(buf),
             "{\"schema\": \"reshard.capture.v1\","
             " \"params\": {\"w\": {\"shape\": [8, 4], \"dtype\": \"bf16\"}},"
             " \"copies\": [{%s}]}",
             copy_fields);
    return buf;
}

static rs_capture_h load_ok(const char *text)
{
    rs_diag_t d;
    rs_capture_h cap = NULL;
    rs_diag_clear(&d);
    rs_status_t st = rs_capture_load_string(text, strlen(text), ORIGIN, &d, &cap);
    if (st != RS_OK)
        fail_msg("unexpected failure %s: %s", rs_status_str(st), d.msg);
    assert_non_null(cap);
    return cap;
}

/* Asserts the load fails with RS_ERR_INPUT, leaves the out-handle alone and
 * that the message starts with the origin and contains path and cause. */
static void load_bad(const char *text, const char *path, const char *cause)
{
    rs_diag_t d;
    int sentinel;
    rs_capture_h cap = (rs_capture_h)&sentinel;
    rs_diag_clear(&d);
    rs_status_t st = rs_capture_load_string(text, strlen(text), ORIGIN, &d, &cap);
    if (st != RS_ERR_INPUT || strncmp(d.msg, ORIGIN ": ", 10) != 0 ||
        strstr(d.msg, path) == NULL || strstr(d.msg, cause) == NULL)
        fail_msg("status %s, message \"%s\"; wanted path \"%s\" and cause "
                 "\"%s\"", rs_status_str(st), d.msg, path, cause);
    assert_int_equal(d.status, RS_ERR_INPUT);
    assert_ptr_equal(cap, (rs_capture_h)&sentinel);
}

/* The single op of the single copy of a capture built by with_ops. */
static rs_op_t one_op(rs_capture_h cap)
{
    rs_copy_desc_t c;
    assert_int_equal(rs_capture_num_copies(cap), 1);
    rs_capture_copy(cap, 0, &c);
    assert_int_equal(c.nops, 1);
    return c.ops[0];
}

static void test_full_capture(void **state)
{
    (void)state;
    const char *text =
        "{\"schema\": \"reshard.capture.v1\","
        " \"params\": {\"layers.0.qkv\": {\"shape\": [12, 4], \"dtype\": "
        "\"torch.bfloat16\"}, \"b\": {\"shape\": [], \"dtype\": \"float32\"}},"
        " \"copies\": ["
        "  {\"src\": \"q\", \"ops\": [], \"param\": \"layers.0.qkv\","
        "   \"dest_offset\": 0, \"dest_shape\": [4, 4], \"dest_stride\": [4, 1],"
        "   \"dest_dtype\": \"bf16\"},"
        "  {\"src\": \"k\", \"ops\": [[\"narrow\", 0, 2, 4], [\"t\"]],"
        "   \"param\": \"layers.0.qkv\", \"dest_offset\": 16,"
        "   \"dest_shape\": [4, 4], \"dest_stride\": [1, 4],"
        "   \"dest_dtype\": \"bfloat16\", \"extra\": true},"
        "  {\"src\": \"bias\", \"ops\": [], \"param\": \"b\", \"dest_offset\": 0,"
        "   \"dest_shape\": [], \"dest_stride\": [], \"dest_dtype\": \"f32\"}],"
        " \"unsupported\": {\"moe.gate\": \"index_select\"},"
        " \"unattributed\": 5, \"future_key\": {}}";
    rs_capture_h cap = load_ok(text);
    rs_param_info_t p;
    rs_copy_desc_t c;
    const char *src, *reason;

    assert_int_equal(rs_capture_num_params(cap), 2);
    rs_capture_param(cap, 0, &p);
    assert_string_equal(p.name, "layers.0.qkv");
    assert_int_equal(p.ndim, 2);
    assert_int_equal(p.shape[0], 12);
    assert_int_equal(p.shape[1], 4);
    assert_int_equal(p.dtype, RS_DTYPE_BF16);
    assert_int_equal(p.nbytes, 96);
    rs_capture_param(cap, 1, &p);
    assert_int_equal(p.ndim, 0);
    assert_int_equal(p.nbytes, 4);
    assert_int_equal(rs_capture_find_param(cap, "b"), 1);

    assert_int_equal(rs_capture_num_copies(cap), 3);
    rs_capture_copy(cap, 1, &c);
    assert_string_equal(c.src, "k");
    assert_string_equal(c.param, "layers.0.qkv");
    assert_int_equal(c.nops, 2);
    assert_int_equal(c.ops[0].kind, RS_OP_NARROW);
    assert_int_equal(c.ops[0].arg[0], 0);
    assert_int_equal(c.ops[0].arg[1], 2);
    assert_int_equal(c.ops[0].arg[2], 4);
    assert_int_equal(c.ops[0].has, 7);
    assert_int_equal(c.ops[1].kind, RS_OP_T);
    assert_int_equal(c.dest_offset, 16);
    assert_int_equal(c.ndim, 2);
    assert_int_equal(c.dest_stride[0], 1);
    assert_int_equal(c.dest_stride[1], 4);
    assert_int_equal(c.dest_dtype, RS_DTYPE_BF16);
    rs_capture_copy(cap, 2, &c);
    assert_int_equal(c.ndim, 0);
    assert_int_equal(c.dest_dtype, RS_DTYPE_F32);

    assert_int_equal(rs_capture_num_unsupported(cap), 1);
    rs_capture_unsupported(cap, 0, &src, &reason);
    assert_string_equal(src, "moe.gate");
    assert_string_equal(reason, "index_select");
    assert_int_equal(rs_capture_unattributed(cap), 5);
    rs_capture_destroy(cap);
}

static void test_optional_keys_absent(void **state)
{
    (void)state;
    rs_capture_h cap = load_ok("{\"schema\": \"reshard.capture.v1\", "
                               "\"params\": {}, \"copies\": []}");
    assert_int_equal(rs_capture_num_params(cap), 0);
    assert_int_equal(rs_capture_num_sources(cap), 0);
    assert_int_equal(rs_capture_num_unsupported(cap), 0);
    assert_int_equal(rs_capture_unattributed(cap), 0);
    rs_capture_destroy(cap);
    /* a null "sources" is absent, like any optional key */
    cap = load_ok("{\"schema\": \"reshard.capture.v1\", \"params\": {}, "
                  "\"sources\": null, \"copies\": []}");
    assert_int_equal(rs_capture_num_sources(cap), 0);
    rs_capture_destroy(cap);
}

/* "sources": every entry lands in declaration order with its shape (rank 0
 * included) and its dtype in any accepted spelling; a declared source no
 * copy reads is kept. */
static void test_sources_key(void **state)
{
    (void)state;
    const char *text =
        "{\"schema\": \"reshard.capture.v1\","
        " \"params\": {\"w\": {\"shape\": [4, 4], \"dtype\": \"bf16\"}},"
        " \"sources\": {\"q\": {\"shape\": [8, 4], \"dtype\": \"torch.bfloat16\"},"
        "  \"scale\": {\"shape\": [], \"dtype\": \"float32\", \"note\": 1},"
        "  \"unread\": {\"shape\": [0, 3], \"dtype\": \"f8e4m3\"}},"
        " \"copies\": [{\"src\": \"q\", \"ops\": [[\"narrow\", 0, 0, 4]],"
        "  \"param\": \"w\", \"dest_offset\": 0, \"dest_shape\": [4, 4],"
        "  \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"}]}";
    rs_capture_h cap = load_ok(text);
    rs_source_info_t s;

    assert_int_equal(rs_capture_num_sources(cap), 3);
    rs_capture_source(cap, 0, &s);
    assert_string_equal(s.name, "q");
    assert_int_equal(s.ndim, 2);
    assert_int_equal(s.shape[0], 8);
    assert_int_equal(s.shape[1], 4);
    assert_int_equal(s.dtype, RS_DTYPE_BF16);
    rs_capture_source(cap, 1, &s);
    assert_string_equal(s.name, "scale");
    assert_int_equal(s.ndim, 0);
    assert_int_equal(s.dtype, RS_DTYPE_F32);
    rs_capture_source(cap, 2, &s);
    assert_string_equal(s.name, "unread");
    assert_int_equal(s.ndim, 2);
    assert_int_equal(s.shape[0], 0);
    assert_int_equal(s.dtype, RS_DTYPE_F8E4M3);
    assert_int_equal(rs_capture_find_source(cap, "scale"), 1);
    assert_int_equal(rs_capture_find_source(cap, "w"), -1);
    assert_int_equal(rs_capture_num_copies(cap), 1);
    rs_capture_destroy(cap);
}

static void test_ops_int_args(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        rs_op_kind_t kind;
        int n;
        int64_t a[3];
        uint32_t has;
    } cases[] = {
        {"[\"narrow\", -1, 1, 2]", RS_OP_NARROW, 3, {-1, 1, 2}, 7},
        {"[\"select\", 1, -2]", RS_OP_SELECT, 2, {1, -2}, 3},
        {"[\"transpose\", 0, -1]", RS_OP_TRANSPOSE, 2, {0, -1}, 3},
        {"[\"t\"]", RS_OP_T, 0, {0}, 0},
        {"[\"unsqueeze\", 2]", RS_OP_UNSQUEEZE, 1, {2}, 1},
        {"[\"squeeze\"]", RS_OP_SQUEEZE, 0, {0}, 0},
        {"[\"squeeze\", -1]", RS_OP_SQUEEZE, 1, {-1}, 1},
        {"[\"flatten\"]", RS_OP_FLATTEN, 0, {0}, 0},
        {"[\"flatten\", 1]", RS_OP_FLATTEN, 1, {1}, 1},
        {"[\"flatten\", 0, 1]", RS_OP_FLATTEN, 2, {0, 1}, 3},
        {"[\"chunk\", 3, 0, 2]", RS_OP_CHUNK, 3, {3, 0, 2}, 7},
        {"[\"unbind\", 1, 3]", RS_OP_UNBIND, 2, {1, 3}, 3},
        {"[\"contiguous\"]", RS_OP_CONTIGUOUS, 0, {0}, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rs_capture_h cap = load_ok(with_ops(cases[i].json));
        rs_op_t op = one_op(cap);
        assert_int_equal(op.kind, cases[i].kind);
        assert_int_equal(op.has, cases[i].has);
        for (int j = 0; j < cases[i].n; j++)
            assert_int_equal(op.arg[j], cases[i].a[j]);
        assert_int_equal(op.nlist, 0);
        assert_int_equal(op.nkeys, 0);
        rs_capture_destroy(cap);
    }
}

static void test_op_slice(void **state)
{
    (void)state;
    rs_capture_h cap = load_ok(with_ops("[\"slice\", 1, null, 6, 2]"));
    rs_op_t op = one_op(cap);
    assert_int_equal(op.kind, RS_OP_SLICE);
    assert_int_equal(op.arg[0], 1);
    assert_int_equal(op.arg[2], 6);
    assert_int_equal(op.arg[3], 2);
    assert_int_equal(op.has, 1u | 4u | 8u);
    rs_capture_destroy(cap);

    cap = load_ok(with_ops("[\"slice\", 0, 1, null]"));
    op = one_op(cap);
    assert_int_equal(op.arg[1], 1);
    assert_int_equal(op.arg[3], 1); /* omitted step is 1 */
    assert_int_equal(op.has, 1u | 2u);
    rs_capture_destroy(cap);
}

static void test_op_lists(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        rs_op_kind_t kind;
        size_t n;
        int64_t list[4];
    } cases[] = {
        {"[\"permute\", [1, 0]]", RS_OP_PERMUTE, 2, {1, 0}},
        {"[\"view\", [-1]]", RS_OP_VIEW, 1, {-1}},
        {"[\"reshape\", [2, 2, 8]]", RS_OP_RESHAPE, 3, {2, 2, 8}},
        {"[\"view\", []]", RS_OP_VIEW, 0, {0}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rs_capture_h cap = load_ok(with_ops(cases[i].json));
        rs_op_t op = one_op(cap);
        assert_int_equal(op.kind, cases[i].kind);
        assert_int_equal(op.nlist, cases[i].n);
        for (size_t j = 0; j < cases[i].n; j++)
            assert_int_equal(op.list[j], cases[i].list[j]);
        rs_capture_destroy(cap);
    }
}

static void test_op_unflatten_split(void **state)
{
    (void)state;
    rs_capture_h cap = load_ok(with_ops("[\"unflatten\", 0, [2, -1]]"));
    rs_op_t op = one_op(cap);
    assert_int_equal(op.kind, RS_OP_UNFLATTEN);
    assert_int_equal(op.arg[0], 0);
    assert_int_equal(op.has, 1);
    assert_int_equal(op.nlist, 2);
    assert_int_equal(op.list[0], 2);
    assert_int_equal(op.list[1], -1);
    rs_capture_destroy(cap);

    cap = load_ok(with_ops("[\"split\", 3, 0, 1]"));
    op = one_op(cap);
    assert_int_equal(op.kind, RS_OP_SPLIT);
    assert_int_equal(op.nlist, 0);
    assert_int_equal(op.arg[0], 3);
    assert_int_equal(op.arg[1], 0);
    assert_int_equal(op.arg[2], 1);
    rs_capture_destroy(cap);

    cap = load_ok(with_ops("[\"split\", [2, 3, 4], -1, 2]"));
    op = one_op(cap);
    assert_int_equal(op.kind, RS_OP_SPLIT);
    assert_int_equal(op.nlist, 3);
    assert_int_equal(op.list[0], 2);
    assert_int_equal(op.list[1], 3);
    assert_int_equal(op.list[2], 4);
    assert_int_equal(op.arg[1], -1);
    assert_int_equal(op.arg[2], 2);
    rs_capture_destroy(cap);
}

static void test_op_getitem(void **state)
{
    (void)state;
    rs_capture_h cap = load_ok(
        with_ops("[\"getitem\", [3, null, [1, null, 2], [null, -1, null]]]"));
    rs_op_t op = one_op(cap);
    assert_int_equal(op.kind, RS_OP_GETITEM);
    assert_int_equal(op.nkeys, 4);
    assert_int_equal(op.keys[0].kind, RS_KEY_INDEX);
    assert_int_equal(op.keys[0].index, 3);
    assert_int_equal(op.keys[1].kind, RS_KEY_FULL);
    assert_int_equal(op.keys[2].kind, RS_KEY_SLICE);
    assert_int_equal(op.keys[2].start, 1);
    assert_int_equal(op.keys[2].step, 2);
    assert_int_equal(op.keys[2].has_start, 1);
    assert_int_equal(op.keys[2].has_stop, 0);
    assert_int_equal(op.keys[2].has_step, 1);
    assert_int_equal(op.keys[3].kind, RS_KEY_SLICE);
    assert_int_equal(op.keys[3].stop, -1);
    assert_int_equal(op.keys[3].step, 1);
    assert_int_equal(op.keys[3].has_start, 0);
    assert_int_equal(op.keys[3].has_stop, 1);
    assert_int_equal(op.keys[3].has_step, 0);
    rs_capture_destroy(cap);
}

/* An unknown op makes the source unsupported and skips only that copy. */
static void test_unknown_op_is_unsupported(void **state)
{
    (void)state;
    const char *text =
        "{\"schema\": \"reshard.capture.v1\","
        " \"params\": {\"w\": {\"shape\": [8, 4], \"dtype\": \"bf16\"}},"
        " \"copies\": ["
        "  {\"src\": \"a\", \"ops\": [[\"narrow\", 0, 0, 4], [\"expand\", 4, 4]],"
        "   \"param\": \"w\", \"dest_offset\": 0, \"dest_shape\": [4, 4],"
        "   \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\"},"
        "  {\"src\": \"b\", \"ops\": [], \"param\": \"w\", \"dest_offset\": 16,"
        "   \"dest_shape\": [4, 4], \"dest_stride\": [4, 1],"
        "   \"dest_dtype\": \"bf16\"}]}";
    rs_capture_h cap = load_ok(text);
    rs_copy_desc_t c;
    const char *src, *reason;
    /* the copy keeps its index (plans name copies by position) */
    assert_int_equal(rs_capture_num_copies(cap), 2);
    rs_capture_copy(cap, 0, &c);
    assert_string_equal(c.src, "a");
    assert_int_equal(c.nops, 0);
    rs_capture_copy(cap, 1, &c);
    assert_string_equal(c.src, "b");
    assert_int_equal(rs_capture_num_unsupported(cap), 1);
    rs_capture_unsupported(cap, 0, &src, &reason);
    assert_string_equal(src, "a");
    assert_string_equal(reason, "op 'expand' is not supported");
    rs_capture_destroy(cap);
}

static void test_malformed_json(void **state)
{
    (void)state;
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {",
             "line 1, column", "malformed JSON");
    load_bad("{\"schema\": \"reshard.\xff\"}", "line 1", "unable to decode byte");
    load_bad("{\"schema\": \"reshard.capture.v1\",\n\"schema\": \"x\"}",
             "line 2", "duplicate object key");
    load_bad("", "line 1", "malformed JSON");
    load_bad("{\"a\": 9223372036854775808}", "line 1", "too big integer");
}

static void test_schema(void **state)
{
    (void)state;
    load_bad("{\"schema\": \"reshard.capture.v2\", \"params\": {}, "
             "\"copies\": []}",
             ": schema: ", "expected \"reshard.capture.v1\"");
    load_bad("{\"params\": {}, \"copies\": []}", ": schema: ",
             "required key is missing");
    load_bad("[]", "(root)", "expected an object, got an array");
    load_bad("{\"schema\": 1}", ": schema: ", "expected a string, got an integer");
}

static void test_missing_keys(void **state)
{
    (void)state;
    load_bad("{\"schema\": \"reshard.capture.v1\", \"copies\": []}",
             ": params: ", "required key is missing");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {}}",
             ": copies: ", "required key is missing");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_dtype\": \"bf16\""),
             ": copies[0].dest_stride: ", "required key is missing");
    load_bad(with_copy("\"src\": null, \"ops\": [], \"param\": \"w\""),
             ": copies[0].src: ", "required key is null");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [2]}}, \"copies\": []}",
             ": params.w.dtype: ", "required key is missing");
}

static void test_wrong_types(void **state)
{
    (void)state;
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": \"0\""),
             ": copies[0].dest_offset: ",
             "expected a non-negative integer, got a string");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 1.5"),
             ": copies[0].dest_offset: ", "got a real number");
    load_bad(with_copy("\"src\": \"s\", \"ops\": {}, \"param\": \"w\""),
             ": copies[0].ops: ", "expected an array, got an object");
    load_bad(with_ops("[\"narrow\", 0, true, 4]"), ": copies[0].ops[0][2]: ",
             "expected an integer, got a boolean");
    load_bad(with_ops("[\"narrow\", 0, 0, 4], [\"select\", 0, 1.0]"),
             ": copies[0].ops[1][2]: ", "expected an integer, got a real number");
    load_bad(with_ops("[\"permute\", [1, \"0\"]]"), ": copies[0].ops[0][1][1]: ",
             "expected an integer, got a string");
    load_bad(with_ops("\"t\""), ": copies[0].ops[0]: ",
             "expected an array, got a string");
    load_bad(with_ops("[]"), ": copies[0].ops[0]: ", "empty array");
    load_bad(with_ops("[3, 1]"), ": copies[0].ops[0][0]: ",
             "expected a string, got an integer");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": [], "
             "\"copies\": []}", ": params: ", "expected an object, got an array");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {}, "
             "\"copies\": [], \"unsupported\": {\"x.y\": 3}}",
             ": unsupported[\"x.y\"]: ", "expected a string, got an integer");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {}, "
             "\"copies\": [], \"unattributed\": -2}",
             ": unattributed: ", "expected a non-negative integer, got -2");
}

static void test_op_arguments(void **state)
{
    (void)state;
    load_bad(with_ops("[\"narrow\", 0, 4]"), ": copies[0].ops[0]: ",
             "op 'narrow' takes [\"narrow\", dim, start, length], got 2 "
             "arguments");
    load_bad(with_ops("[\"t\", 0]"), ": copies[0].ops[0]: ", "op 't' takes");
    load_bad(with_ops("[\"flatten\", 0, 1, 2]"), ": copies[0].ops[0]: ",
             "got 3 arguments");
    load_bad(with_ops("[\"slice\", 0, 0, 4, 0]"), ": copies[0].ops[0][4]: ",
             "must be at least 1, got 0");
    load_bad(with_ops("[\"slice\", 0, 0, 4, -1]"), ": copies[0].ops[0][4]: ",
             "must be at least 1, got -1");
    load_bad(with_ops("[\"getitem\", [0, \"a\"]]"),
             ": copies[0].ops[0][1][1]: ", "a getitem key is an integer");
    load_bad(with_ops("[\"getitem\", [[0, 4, 0]]]"),
             ": copies[0].ops[0][1][0][2]: ", "must be at least 1, got 0");
    load_bad(with_ops("[\"getitem\", [[0, 4]]]"), ": copies[0].ops[0][1][0]: ",
             "got 2 elements");
    load_bad(with_ops("[\"getitem\", 0]"), ": copies[0].ops[0][1]: ",
             "expected an array, got an integer");
    load_bad(with_ops("[\"split\", [2, -1], 0, 0]"),
             ": copies[0].ops[0][1][1]: ", "non-negative integer, got -1");
    load_bad(with_ops("[\"split\", [], 0, 0]"), ": copies[0].ops[0][1]: ",
             "must not be empty");
    load_bad(with_ops("[\"view\", [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]"),
             ": copies[0].ops[0][1]: ", "more than the limit of 16");
    load_bad(with_ops("[\"unflatten\", 0, 2]"), ": copies[0].ops[0][2]: ",
             "expected an array");
}

static void test_shapes(void **state)
{
    (void)state;
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [2, -4], \"dtype\": \"bf16\"}}, \"copies\": []}",
             ": params.w.shape[1]: ", "expected a non-negative integer, got -4");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [4611686018427387904, 4], \"dtype\": \"u8\"}}, "
             "\"copies\": []}",
             ": params.w.shape: ", "shape [4611686018427387904, 4] overflows");
    /* 2^62 one-byte elements fit; 2^62 two-byte elements do not */
    rs_capture_h cap = load_ok("{\"schema\": \"reshard.capture.v1\", "
                               "\"params\": {\"w\": {\"shape\": "
                               "[4611686018427387904], \"dtype\": \"u8\"}}, "
                               "\"copies\": []}");
    rs_capture_destroy(cap);
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [4611686018427387904], \"dtype\": \"bf16\"}}, "
             "\"copies\": []}",
             ": params.w.shape: ", "2 per element");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], \"dtype\": "
             "\"bf16\"}}, \"copies\": []}",
             ": params.w.shape: ", "17 elements, more than the limit of 16");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_stride\": [1], \"dest_dtype\": \"bf16\""),
             ": copies[0].dest_stride: ", "has 1 entries but dest_shape has 2");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [3037000500, "
                       "3037000500, 2], \"dest_stride\": [1, 1, 1],"
                       " \"dest_dtype\": \"bf16\""),
             ": copies[0].dest_shape: ", "overflows");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_stride\": [4, -1], \"dest_dtype\": \"bf16\""),
             ": copies[0].dest_stride[1]: ", "got -1");
}

static void test_param_and_dtype_checks(void **state)
{
    (void)state;
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"nope\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_stride\": [4, 1], \"dest_dtype\": \"bf16\""),
             ": copies[0].param: ",
             "parameter 'nope' (copy of 's') is not declared in params");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_stride\": [4, 1], \"dest_dtype\": \"f32\""),
             ": copies[0].dest_dtype: ",
             "f32 differs from parameter 'w' dtype bf16");
    load_bad(with_copy("\"src\": \"s\", \"ops\": [], \"param\": \"w\","
                       " \"dest_offset\": 0, \"dest_shape\": [8, 4],"
                       " \"dest_stride\": [4, 1], \"dest_dtype\": \"float128\""),
             ": copies[0].dest_dtype: ", "unknown dtype \"float128\"");
    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": {\"a.b\": "
             "{\"shape\": [2], \"dtype\": \"fp32\"}}, \"copies\": []}",
             ": params[\"a.b\"].dtype: ", "unknown dtype \"fp32\"");
}

/* The path names the right copy and op among several. */
static void test_path_indices(void **state)
{
    (void)state;
    const char *copy = "{\"src\": \"s\", \"ops\": [[\"t\"], [\"t\"]],"
                       " \"param\": \"w\", \"dest_offset\": 0,"
                       " \"dest_shape\": [8, 4], \"dest_stride\": [4, 1],"
                       " \"dest_dtype\": \"bf16\"}";
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"schema\": \"reshard.capture.v1\", \"params\": {\"w\": "
             "{\"shape\": [8, 4], \"dtype\": \"bf16\"}}, \"copies\": [%s, %s, "
             "%s, {\"src\": \"s\", \"ops\": [[\"t\"], [\"transpose\", 0, "
             "null]], \"param\": \"w\"}]}",
             copy, copy, copy);
    load_bad(text, ": copies[3].ops[1][2]: ", "expected an integer, got null");
}

/* Keys longer than the path buffer are cut with "..." instead of
 * overflowing; keys with quotes are escaped. */
static void test_long_and_odd_keys(void **state)
{
    (void)state;
    size_t n = 3000;
    char *text = malloc(n + 256);
    int len = snprintf(text, n + 256, "{\"schema\": \"reshard.capture.v1\", "
                       "\"params\": {\"");
    memset(text + len, 'p', n);
    snprintf(text + len + n, 256, "\": {\"shape\": [1], \"dtype\": 7}}, "
             "\"copies\": []}");
    rs_diag_t d;
    rs_capture_h cap = NULL;
    assert_int_equal(rs_capture_load_string(text, strlen(text), ORIGIN, &d,
                                            &cap), RS_ERR_INPUT);
    assert_null(cap);
    assert_non_null(strstr(d.msg, "cap.json: params.pppp"));
    assert_non_null(strstr(d.msg, "...: expected a string, got an integer"));
    free(text);

    load_bad("{\"schema\": \"reshard.capture.v1\", \"params\": "
             "{\"a\\\"b\": {\"shape\": [1], \"dtype\": 7}}, \"copies\": []}",
             ": params[\"a\\\"b\"].dtype: ", "expected a string");
    /* a NULL origin still yields a well-formed message */
    assert_int_equal(rs_capture_load_string("[", 1, NULL, &d, &cap),
                     RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "<json>: line 1"));
    assert_int_equal(rs_capture_load_string("{}", 2, "x", &d, NULL),
                     RS_ERR_INVALID_ARG);
}

static char *write_text(const char *text)
{
    return tmp_write("capture-json", text, strlen(text));
}

static void test_load_file(void **state)
{
    (void)state;
    rs_diag_t d;
    rs_capture_h cap = NULL;
    char *path = write_text(with_ops("[\"narrow\", 0, 0, 8]"));

    assert_int_equal(rs_capture_load_file(path, &d, &cap), RS_OK);
    assert_int_equal(one_op(cap).kind, RS_OP_NARROW);
    rs_capture_destroy(cap);
    cap = NULL;
    unlink(path);
    free(path);

    path = write_text("{\"schema\": \"reshard.capture.v1\", \"params\": 7}");
    assert_int_equal(rs_capture_load_file(path, &d, &cap), RS_ERR_INPUT);
    assert_null(cap);
    assert_ptr_equal(strstr(d.msg, path), d.msg);
    assert_non_null(strstr(d.msg, ": params: expected an object"));
    unlink(path);

    assert_int_equal(rs_capture_load_file(path, &d, &cap), RS_ERR_IO);
    assert_null(cap);
    assert_ptr_equal(strstr(d.msg, path), d.msg);
    assert_non_null(strstr(d.msg, "No such file"));
    free(path);

    assert_int_equal(rs_capture_load_file("/tmp", &d, &cap), RS_ERR_IO);
    assert_non_null(strstr(d.msg, "/tmp: cannot read file"));
    /* a NULL diag is allowed */
    assert_int_equal(rs_capture_load_file("/nonexistent/x.json", NULL, &cap),
                     RS_ERR_IO);
    assert_null(cap);
}

static void test_size_limit(void **state)
{
    (void)state;
    rs_diag_t d;
    rs__json_ctx_t c;
    char *data = NULL;
    size_t len = 0;
    json_t *root = NULL;
    char *path = write_text("{\"schema\": \"reshard.capture.v1\"}");

    assert_int_equal(rs__json_read_file(path, 10, &d, &data, &len), RS_ERR_INPUT);
    assert_null(data);
    assert_non_null(strstr(d.msg, "more than the 10-byte limit"));
    assert_int_equal(rs__json_read_file(path, 32, &d, &data, &len), RS_OK);
    assert_int_equal(len, 32);
    assert_string_equal(data, "{\"schema\": \"reshard.capture.v1\"}");
    free(data);
    /* files whose size is not known up front are capped while reading */
    assert_int_equal(rs__json_read_file("/proc/self/status", 16, &d, &data,
                                       &len), RS_ERR_INPUT);
    assert_non_null(strstr(d.msg, "larger than the 16-byte limit"));
    unlink(path);
    free(path);

    rs__json_ctx_init(&c, "mem", &d);
    assert_int_equal(rs__json_parse(&c, "[1, 2]", 6, 5, &root), RS_ERR_INPUT);
    assert_null(root);
    assert_non_null(strstr(d.msg, "mem: document is 6 bytes, more than the "
                                  "5-byte limit"));
}

/* A capture with an f8e4m3 parameter q[8, 4], an f32 parameter sc[4, 2]
 * and one copy of source "w" into q carrying `quant` (the whole member,
 * e.g. "\"quant\": {...}"); `dest_dtype` is the copy's dtype. */
static char *with_quant(const char *dest_dtype, const char *quant)
{
    static char buf[8192];
    snprintf(buf, sizeof(buf),
             "{\"schema\": \"reshard.capture.v1\","
             " \"params\": {\"q\": {\"shape\": [8, 4], \"dtype\": \"f8e4m3\"},"
             "  \"sc\": {\"shape\": [4, 2], \"dtype\": \"f32\"},"
             "  \"b\": {\"shape\": [4], \"dtype\": \"bf16\"}},"
             " \"copies\": [{\"src\": \"o\", \"ops\": [], \"param\": \"b\","
             " \"dest_offset\": 0, \"dest_shape\": [4], \"dest_stride\": [1],"
             " \"dest_dtype\": \"bf16\"},"
             " {\"src\": \"w\", \"ops\": [[\"narrow\", 0, 8, 8]],"
             " \"param\": \"q\", \"dest_offset\": 0, \"dest_shape\": [8, 4],"
             " \"dest_stride\": [4, 1], \"dest_dtype\": \"%s\", %s}]}",
             dest_dtype, quant);
    return buf;
}

#define QSCALE(shape, stride)                                                 \
    "\"scale\": {\"param\": \"sc\", \"dest_offset\": 2, \"dest_shape\": "    \
    shape ", \"dest_stride\": " stride "}"

/* Every field of a quant object lands in the descriptor the accessor
 * returns; a copy without one reads back as not quantized. */
static void test_quant_copy(void **state)
{
    (void)state;
    rs_capture_h cap = load_ok(with_quant(
        "f8e4m3", "\"quant\": {\"scheme\": \"fp8_block\", \"format\":"
        " \"float8_e4m3fn\", \"block\": [4, 2], " QSCALE("[2, 2]", "[2, 1]")
        "}"));
    rs_quant_desc_t q, untouched;

    memset(&untouched, 0x5a, sizeof(untouched));
    q = untouched;
    assert_int_equal(rs_capture_copy_quant(cap, 0, &q), 0);
    assert_memory_equal(&q, &untouched, sizeof(q));
    assert_int_equal(rs_capture_copy_quant(cap, 1, &q), 1);
    assert_int_equal(q.scheme, RS_QUANT_FP8_BLOCK);
    assert_int_equal(q.format, RS_DTYPE_F8E4M3);
    assert_int_equal(q.block_ndim, 2);
    assert_int_equal(q.block[0], 4);
    assert_int_equal(q.block[1], 2);
    assert_string_equal(q.scale_param, "sc");
    assert_int_equal(q.scale_offset, 2);
    assert_int_equal(q.scale_ndim, 2);
    assert_int_equal(q.scale_shape[0], 2);
    assert_int_equal(q.scale_shape[1], 2);
    assert_int_equal(q.scale_stride[0], 2);
    assert_int_equal(q.scale_stride[1], 1);
    rs_capture_destroy(cap);

    cap = load_ok(with_quant("f8e4m3", "\"quant\": {\"scheme\":"
                             " \"fp8_tensor\", \"format\": \"f8e4m3\", "
                             QSCALE("[]", "[]") "}"));
    assert_int_equal(rs_capture_copy_quant(cap, 1, &q), 1);
    assert_int_equal(q.scheme, RS_QUANT_FP8_TENSOR);
    assert_int_equal(q.block_ndim, 0);
    assert_int_equal(q.scale_ndim, 0);
    rs_capture_destroy(cap);
    cap = load_ok(with_quant("f8e4m3", "\"quant\": null"));
    assert_int_equal(rs_capture_copy_quant(cap, 1, &q), 0);
    rs_capture_destroy(cap);
}

/* Each malformed quant object is refused at the JSON path of the field,
 * naming the copy. */
static void test_quant_bad(void **state)
{
    (void)state;
    const char *P = "copies[1].quant";
    load_bad(with_quant("f8e4m3", "\"quant\": [1]"), P, "expected an object");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", \"blok\": [1], "
                        QSCALE("[]", "[]") "}"),
             "copies[1].quant.blok", "unknown key");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp4\","
                        " \"format\": \"f8e4m3\", " QSCALE("[]", "[]") "}"),
             "copies[1].quant.scheme", "unknown scheme 'fp4'");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"format\": \"f8e4m3\", "
                        QSCALE("[]", "[]") "}"),
             "copies[1].quant.scheme", "missing");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"bf16\", " QSCALE("[]", "[]") "}"),
             "copies[1].quant.format", "not an FP8 format");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_block\","
                        " \"format\": \"f8e4m3\", \"block\": [4, 0], "
                        QSCALE("[2, 2]", "[2, 1]") "}"),
             "copies[1].quant.block[1]", "");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_block\","
                        " \"format\": \"f8e4m3\", \"block\": [], "
                        QSCALE("[2, 2]", "[2, 1]") "}"),
             "copies[1].quant.block", "at least one");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_block\","
                        " \"format\": \"f8e4m3\", "
                        QSCALE("[2, 2]", "[2, 1]") "}"),
             "copies[1].quant.block", "missing");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_channel\","
                        " \"format\": \"f8e4m3\", \"block\": [1, 4], "
                        QSCALE("[8]", "[1]") "}"),
             "copies[1].quant.block", "only fp8_block");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_channel\","
                        " \"format\": \"f8e4m3\", " QSCALE("[8]", "[1, 1]")
                        "}"),
             "copies[1].quant.scale.dest_stride", "dest_shape has 1");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", \"scale\": {\"param\":"
                        " \"sc\", \"dest_offset\": 0, \"dest_shape\": [],"
                        " \"dest_stride\": [], \"extra\": 1}}"),
             "copies[1].quant.scale.extra", "unknown key");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", \"scale\": {\"param\":"
                        " \"nope\", \"dest_offset\": 0, \"dest_shape\": [],"
                        " \"dest_stride\": []}}"),
             "copies[1].quant.scale.param", "'nope' is not a declared");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", \"scale\": {\"param\":"
                        " \"b\", \"dest_offset\": 0, \"dest_shape\": [],"
                        " \"dest_stride\": []}}"),
             "copies[1].quant.scale.param", "'b' is bf16");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e5m2\", " QSCALE("[]", "[]") "}"),
             "copies[1].dest_dtype", "not the quantization format f8e5m2");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", " QSCALE("[2]", "[1]") "}"),
             "copies[1].quant.scale.dest_shape", "one scale");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_channel\","
                        " \"format\": \"f8e4m3\", " QSCALE("[8]", "[1]") "}"),
             "copies[1].quant.scale.dest_shape", "reaches element 9");
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_channel\","
                        " \"format\": \"f8e4m3\", \"scale\": {\"param\":"
                        " \"sc\", \"dest_offset\": -1, \"dest_shape\": [1],"
                        " \"dest_stride\": [1]}}"),
             "copies[1].quant.scale.dest_offset", "");
    /* every refusal names the copy */
    load_bad(with_quant("f8e4m3", "\"quant\": {\"scheme\": \"fp8_tensor\","
                        " \"format\": \"f8e4m3\", " QSCALE("[2]", "[1]") "}"),
             P, "copy of 'w' into 'q'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_capture),
        cmocka_unit_test(test_optional_keys_absent),
        cmocka_unit_test(test_sources_key),
        cmocka_unit_test(test_ops_int_args),
        cmocka_unit_test(test_op_slice),
        cmocka_unit_test(test_op_lists),
        cmocka_unit_test(test_op_unflatten_split),
        cmocka_unit_test(test_op_getitem),
        cmocka_unit_test(test_unknown_op_is_unsupported),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_op_arguments),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_param_and_dtype_checks),
        cmocka_unit_test(test_path_indices),
        cmocka_unit_test(test_long_and_odd_keys),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_quant_copy),
        cmocka_unit_test(test_quant_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
