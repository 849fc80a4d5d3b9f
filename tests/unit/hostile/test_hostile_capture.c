/* Hostile captures: destination regions that leave their parameter or
 * overflow, op chains out of range or overflowing, dtypes that do not
 * exist, declared source shapes and dtypes that are malformed or
 * contradict each other, quantized copies whose spec is malformed or
 * names a wrong scale parameter, and a million copies planned within a memory
 * budget. Bad geometry
 * puts the source in the plan's fallback list with a reason naming the
 * copy, the op and the parameter; nothing is ever written for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "hostile.h"
#include "mini_exec.h"
#include "reshard/reshard.h"

/* Sources: "w" is a [8, 8] u8 tensor published whole by session "r0". */
static rs_sources_h sources_8x8(void)
{
    int64_t full[2] = {8, 8}, off[2] = {0, 0};
    rs_shard_desc_t d = {.tensor = "w", .dtype = RS_DTYPE_U8, .elsize = 1,
                         .ndim = 2, .full_shape = full, .session = "r0",
                         .addr = 0x1000, .offset = off, .shape = full};
    rs_sources_h s = NULL;
    rs_diag_t diag;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    return s;
}

/* Plans one copy of "w" into a [4, 16] u8 parameter "p" and expects "w" in
 * fallback with a reason holding `frag`, and no byte planned. */
static void expect_fallback(const rs_op_t *ops, size_t nops, int ndim,
                            const int64_t *shape, const int64_t *stride,
                            int64_t dest_offset, const char *frag)
{
    int64_t pshape[2] = {4, 16};
    rs_copy_desc_t c = {.src = "w", .param = "p", .ops = ops, .nops = nops,
                        .dest_offset = dest_offset, .ndim = ndim,
                        .dest_shape = shape, .dest_stride = stride,
                        .dest_dtype = RS_DTYPE_U8};
    rs_sources_h s = sources_8x8();
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t params;
    rs_diag_t diag;
    const char *src = NULL, *reason = NULL;
    size_t n = 0;

    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 2, pshape, RS_DTYPE_U8,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    rs_plan_params_init(&params);
    assert_int_equal(rs_plan_build(cap, s, &params, &diag, &plan), RS_OK);
    assert_false(rs_plan_is_complete(plan));
    assert_int_equal(rs_plan_num_fallback(plan), 1);
    rs_plan_fallback(plan, 0, &src, &reason);
    assert_string_equal(src, "w");
    if (strstr(reason, frag) == NULL || strstr(reason, "'p'") == NULL)
        fail_msg("fallback reason \"%s\" lacks \"%s\" or 'p'", reason, frag);
    rs_plan_segments(plan, &n);
    assert_int_equal(n, 0);
    rs_plan_staged_reads(plan, &n);
    assert_int_equal(n, 0);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

static void test_dest_leaves_param(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 8}, stride[2] = {16, 1};
    /* rows 0..7 of stride 16: the last element is 7*16+7 = 119 >= 64 */
    expect_fallback(NULL, 0, 2, shape, stride, 0,
                    "destination region leaves its parameter");
    /* in shape, but shifted one element past the end */
    int64_t flat[1] = {64}, unit[1] = {1};
    rs_op_t view = {.kind = RS_OP_VIEW, .list = flat, .nlist = 1};
    expect_fallback(&view, 1, 1, flat, unit, 1,
                    "destination region leaves its parameter");
    /* strides whose span overflows int64 */
    int64_t huge[2] = {INT64_MAX / 4, 1};
    expect_fallback(NULL, 0, 2, shape, huge, 0,
                    "destination region overflows");
    /* a view that writes elements twice */
    int64_t twice[2] = {1, 1};
    expect_fallback(NULL, 0, 2, shape, twice, 0, "writes some elements twice");
}

static void test_ops_out_of_range(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 4}, stride[2] = {16, 1}, row[1] = {8},
            unit[1] = {1};
    rs_op_t narrow = {.kind = RS_OP_NARROW, .arg = {1, 6, 4}, .has = 7};
    expect_fallback(&narrow, 1, 2, shape, stride, 0, "op 0 (narrow)");
    rs_op_t narrow_dim = {.kind = RS_OP_NARROW, .arg = {5, 0, 4}, .has = 7};
    expect_fallback(&narrow_dim, 1, 2, shape, stride, 0, "op 0 (narrow)");
    rs_op_t select = {.kind = RS_OP_SELECT, .arg = {0, 100}, .has = 3};
    expect_fallback(&select, 1, 1, row, unit, 0, "op 0 (select)");
    rs_op_t sel_neg = {.kind = RS_OP_SELECT, .arg = {0, -9}, .has = 3};
    expect_fallback(&sel_neg, 1, 1, row, unit, 0, "op 0 (select)");
    rs_op_t transpose = {.kind = RS_OP_TRANSPOSE, .arg = {0, 7}, .has = 3};
    int64_t sq[2] = {8, 8};
    expect_fallback(&transpose, 1, 2, sq, stride, 0, "op 0 (transpose)");
    int64_t perm_list[2] = {0, 0};
    rs_op_t permute = {.kind = RS_OP_PERMUTE, .list = perm_list, .nlist = 2};
    expect_fallback(&permute, 1, 2, sq, stride, 0, "op 0 (permute)");
    /* the second op of a chain is the culprit */
    rs_op_t chain[2] = {{.kind = RS_OP_SELECT, .arg = {0, 1}, .has = 3},
                        {.kind = RS_OP_NARROW, .arg = {0, 4, 8}, .has = 7}};
    expect_fallback(chain, 2, 1, row, unit, 0, "op 1 (narrow)");
    /* the chain's result does not match the destination shape */
    expect_fallback(&chain[0], 1, 2, sq, stride, 0, "copy 0 into 'p'");
}

static void test_ops_overflow(void **state)
{
    (void)state;
    int64_t shape[2] = {8, 4}, stride[2] = {16, 1}, sq[2] = {8, 8};
    rs_op_t narrow = {.kind = RS_OP_NARROW, .arg = {1, INT64_MAX, 2},
                      .has = 7};
    expect_fallback(&narrow, 1, 2, shape, stride, 0, "op 0 (narrow)");
    rs_op_t narrow_len = {.kind = RS_OP_NARROW, .arg = {1, 2, INT64_MAX},
                          .has = 7};
    expect_fallback(&narrow_len, 1, 2, shape, stride, 0, "op 0 (narrow)");
    int64_t sizes[3] = {INT64_MAX / 2, 4, 2};
    rs_op_t view = {.kind = RS_OP_VIEW, .list = sizes, .nlist = 3};
    expect_fallback(&view, 1, 2, sq, stride, 0, "op 0 (view)");
    int64_t neg[2] = {-1, -1};
    rs_op_t view2 = {.kind = RS_OP_VIEW, .list = neg, .nlist = 2};
    expect_fallback(&view2, 1, 2, sq, stride, 0, "op 0 (view)");
    rs_op_t slice = {.kind = RS_OP_SLICE, .arg = {0, INT64_MIN, INT64_MAX,
                                                  INT64_MAX}, .has = 15};
    int64_t one[2] = {1, 8};
    expect_fallback(&slice, 1, 2, one, stride, 0, "op 0 (slice)");
    rs_op_t chunk = {.kind = RS_OP_CHUNK, .arg = {0, 0, 0}, .has = 7};
    expect_fallback(&chunk, 1, 2, sq, stride, 0, "op 0 (chunk)");
    int64_t unfl[2] = {INT64_MAX, 2};
    rs_op_t unflatten = {.kind = RS_OP_UNFLATTEN, .arg = {0}, .has = 1,
                         .list = unfl, .nlist = 2};
    expect_fallback(&unflatten, 1, 2, sq, stride, 0, "op 0 (unflatten)");
}

/* Shapes that overflow, ranks out of range and bad dtypes are refused when
 * the capture is built, naming the copy or parameter. */
static void test_capture_entry_checks(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    rs_diag_t diag;
    int64_t big[2] = {INT64_MAX, 2}, neg[1] = {-3}, ok[1] = {4}, st1[1] = {1};
    int64_t st2[2] = {1, 1};

    assert_int_equal(rs_capture_create(&cap), RS_OK);
    HOSTILE_EXPECT(rs_capture_add_param(cap, "big", 2, big, RS_DTYPE_U8,
                                        &diag), RS_ERR_INPUT, &diag, "'big'");
    HOSTILE_EXPECT(rs_capture_add_param(cap, "neg", 1, neg, RS_DTYPE_U8,
                                        &diag), RS_ERR_INPUT, &diag, "'neg'");
    HOSTILE_EXPECT(rs_capture_add_param(cap, "dt", 1, ok, (rs_dtype_t)77,
                                        &diag), RS_ERR_INPUT, &diag, "'dt'");
    HOSTILE_EXPECT(rs_capture_add_param(cap, "rank", 17, ok, RS_DTYPE_U8,
                                        &diag), RS_ERR_INPUT, &diag, "'rank'",
                   "rank 17");
    assert_int_equal(rs_capture_num_params(cap), 0);
    assert_int_equal(rs_capture_add_param(cap, "p", 1, ok, RS_DTYPE_U8,
                                          &diag), RS_OK);
    HOSTILE_EXPECT(rs_capture_add_param(cap, "p", 1, ok, RS_DTYPE_U8, &diag),
                   RS_ERR_INPUT, &diag, "'p'");

    rs_copy_desc_t c = {.src = "w", .param = "p", .ndim = 2,
                        .dest_shape = big, .dest_stride = st2,
                        .dest_dtype = RS_DTYPE_U8};
    HOSTILE_EXPECT(rs_capture_add_copy(cap, &c, &diag), RS_ERR_INPUT, &diag,
                   "'w'", "'p'", "overflows");
    c.ndim = 1;
    c.dest_shape = ok;
    c.dest_stride = st1;
    c.dest_offset = -1;
    HOSTILE_EXPECT(rs_capture_add_copy(cap, &c, &diag), RS_ERR_INPUT, &diag,
                   "'w'", "dest_offset is negative");
    c.dest_offset = 0;
    c.ndim = 40;
    HOSTILE_EXPECT(rs_capture_add_copy(cap, &c, &diag), RS_ERR_INPUT, &diag,
                   "rank 40");
    assert_int_equal(rs_capture_num_copies(cap), 0);
    rs_capture_destroy(cap);
}

static void expect_capture_refused(const char *json, const char *frag1,
                                   const char *frag2)
{
    rs_capture_h cap = NULL;
    rs_diag_t diag;
    HOSTILE_EXPECT(rs_capture_load_string(json, strlen(json), "cap.json",
                                          &diag, &cap),
                   RS_ERR_INPUT, &diag, "cap.json", frag1, frag2);
    assert_null(cap);
}

static void test_capture_json_dtypes(void **state)
{
    (void)state;
    expect_capture_refused(
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"f7\"}}, \"copies\": []}",
        "params.p.dtype", "unknown dtype \"f7\"");
    expect_capture_refused(
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"u8\"}}, \"copies\": [{\"src\": \"w\", \"ops\": [],"
        " \"param\": \"p\", \"dest_offset\": 0, \"dest_shape\": [4],"
        " \"dest_stride\": [1], \"dest_dtype\": 7}]}",
        "copies[0].dest_dtype", "expected a string");
    expect_capture_refused(
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"u8\"}}, \"copies\": [{\"src\": \"w\", \"ops\": [],"
        " \"param\": \"p\", \"dest_offset\": 0, \"dest_shape\": [4],"
        " \"dest_stride\": [1], \"dest_dtype\": \"torch.quint4\"}]}",
        "copies[0].dest_dtype", "unknown dtype");
    expect_capture_refused(
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"u8\"}}, \"copies\": [{\"src\": \"w\", \"ops\":"
        " [[\"narrow\", 0, 1]], \"param\": \"p\", \"dest_offset\": 0,"
        " \"dest_shape\": [4], \"dest_stride\": [1], \"dest_dtype\": \"u8\"}]}",
        "copies[0].ops[0]", "narrow");
    expect_capture_refused(
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": {\"shape\":"
        " [4], \"dtype\": \"u8\"}}, \"copies\": [{\"src\": \"w\", \"ops\": [],"
        " \"param\": \"q\", \"dest_offset\": 0, \"dest_shape\": [4],"
        " \"dest_stride\": [1], \"dest_dtype\": \"u8\"}]}",
        "copies[0].param", "'q'");
}

/* Declared sources: bad ranks, shapes and dtypes are refused naming the
 * source; a second declaration must repeat the first. */
static void test_declare_source_checks(void **state)
{
    (void)state;
    rs_capture_h cap = NULL;
    rs_diag_t diag;
    int64_t big[2] = {INT64_MAX, 2}, neg[2] = {4, -1}, ok[2] = {4, 8};
    int64_t other[2] = {8, 8}, half[2] = {INT64_MAX / 2 + 1, 1};

    assert_int_equal(rs_capture_create(&cap), RS_OK);
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "big", 2, big, RS_DTYPE_U8,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'big'", "overflows");
    /* fits as elements, not as bytes */
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "half", 2, half,
                                             RS_DTYPE_BF16, &diag),
                   RS_ERR_INPUT, &diag, "source 'half'", "overflows");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "neg", 2, neg, RS_DTYPE_U8,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'neg'", "negative");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "dt", 2, ok, (rs_dtype_t)77,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'dt'", "invalid dtype");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "dt0", 2, ok,
                                             RS_DTYPE_INVALID, &diag),
                   RS_ERR_INPUT, &diag, "source 'dt0'", "invalid dtype");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "rank", 17, ok, RS_DTYPE_U8,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'rank'", "rank 17");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "rank", -1, ok, RS_DTYPE_U8,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'rank'", "rank -1");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, NULL, 2, ok, RS_DTYPE_U8,
                                             &diag), RS_ERR_INVALID_ARG, &diag,
                   "NULL");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "w", 2, NULL, RS_DTYPE_U8,
                                             &diag), RS_ERR_INVALID_ARG, &diag,
                   "NULL");
    HOSTILE_EXPECT(rs_capture_declare_source(NULL, "w", 2, ok, RS_DTYPE_U8,
                                             &diag), RS_ERR_INVALID_ARG, &diag,
                   "NULL");
    assert_int_equal(rs_capture_num_sources(cap), 0);

    assert_int_equal(rs_capture_declare_source(cap, "w", 2, ok, RS_DTYPE_BF16,
                                               &diag), RS_OK);
    assert_int_equal(rs_capture_declare_source(cap, "w", 2, ok, RS_DTYPE_BF16,
                                               &diag), RS_OK);
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "w", 2, other,
                                             RS_DTYPE_BF16, &diag),
                   RS_ERR_INPUT, &diag, "source 'w' declared twice",
                   "[4, 8] bf16", "[8, 8] bf16");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "w", 2, ok, RS_DTYPE_F32,
                                             &diag), RS_ERR_INPUT, &diag,
                   "source 'w' declared twice", "[4, 8] bf16", "[4, 8] f32");
    HOSTILE_EXPECT(rs_capture_declare_source(cap, "w", 1, ok, RS_DTYPE_BF16,
                                             &diag), RS_ERR_INPUT, &diag,
                   "[4, 8] bf16, then [4] bf16");
    /* the first declaration stands */
    rs_source_info_t info;
    assert_int_equal(rs_capture_num_sources(cap), 1);
    assert_int_equal(rs_capture_find_source(cap, "w"), 0);
    rs_capture_source(cap, 0, &info);
    assert_string_equal(info.name, "w");
    assert_int_equal(info.ndim, 2);
    assert_int_equal(info.shape[0], 4);
    assert_int_equal(info.shape[1], 8);
    assert_int_equal(info.dtype, RS_DTYPE_BF16);
    rs_capture_destroy(cap);
}

/* A capture with `sources` spliced in as the value of the "sources" key. */
static const char *with_sources(const char *sources)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf),
             "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": "
             "{\"shape\": [4], \"dtype\": \"u8\"}}, \"sources\": %s, "
             "\"copies\": [{\"src\": \"w\", \"ops\": [], \"param\": \"p\", "
             "\"dest_offset\": 0, \"dest_shape\": [4], \"dest_stride\": [1], "
             "\"dest_dtype\": \"u8\"}]}", sources);
    return buf;
}

/* Bad input in the "sources" key is a load error naming the JSON path. */
static void test_capture_json_sources(void **state)
{
    (void)state;
    int fds = hostile_count_fds();
    expect_capture_refused(with_sources("[]"), "sources",
                           "expected an object, got an array");
    expect_capture_refused(with_sources("\"w\""), "sources",
                           "expected an object, got a string");
    expect_capture_refused(with_sources("{\"w\": [4]}"), "sources.w",
                           "expected an object, got an array");
    expect_capture_refused(with_sources("{\"w\": {\"dtype\": \"u8\"}}"),
                           "sources.w.shape", "missing");
    expect_capture_refused(with_sources("{\"w\": {\"shape\": [4]}}"),
                           "sources.w.dtype", "missing");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4, -2], \"dtype\": \"u8\"}}"),
        "sources.w.shape[1]", "-2");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4, 2.5], \"dtype\": \"u8\"}}"),
        "sources.w.shape[1]", "integer");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": \"4x2\", \"dtype\": \"u8\"}}"),
        "sources.w.shape", "array");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
                     " \"dtype\": \"u8\"}}"),
        "sources.w.shape", "16");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4611686018427387904, 4], "
                     "\"dtype\": \"u8\"}}"),
        "sources.w.shape", "overflow");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4], \"dtype\": \"f7\"}}"),
        "sources.w.dtype", "unknown dtype \"f7\"");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4], \"dtype\": 2}}"),
        "sources.w.dtype", "expected a string");
    expect_capture_refused(
        with_sources("{\"model.w\": {\"shape\": [4], \"dtype\": \"BF16\"}}"),
        "sources[\"model.w\"].dtype", "unknown dtype");
    /* duplicate keys are refused while parsing, at their position */
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4], \"dtype\": \"u8\"}, "
                     "\"w\": {\"shape\": [8], \"dtype\": \"u8\"}}"),
        "duplicate object key", "\"w\"");
    expect_capture_refused(
        with_sources("{\"w\": {\"shape\": [4], \"shape\": [8], "
                     "\"dtype\": \"u8\"}}"),
        "duplicate object key", "shape");
    assert_int_equal(hostile_count_fds(), fds);
}

static long max_rss_kib(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

/* 10^6 one-element copies of a 10^6-element source, each narrowing one
 * element into its own place, built through the API and planned; bytes are
 * checked for every copy. The peak RSS this adds must stay under 640 bytes
 * per copy (about twice what it takes: ~320) and 1280 under ASan, whose
 * redzones and quarantine double it. */
#define MANY 1000000
#define PER_COPY 640L
#define PER_COPY_ASAN 1280L

static void test_million_copies(void **state)
{
    (void)state;
    int64_t full = MANY, off = 0, one = 1, unit = 1;
    rs_shard_desc_t d = {.tensor = "w", .dtype = RS_DTYPE_U8, .elsize = 1,
                         .ndim = 1, .full_shape = &full, .session = "r0",
                         .addr = 0x10000, .offset = &off, .shape = &full};
    rs_op_t op = {.kind = RS_OP_NARROW, .has = 7};
    rs_copy_desc_t c = {.src = "w", .param = "p", .ops = &op, .nops = 1,
                        .ndim = 1, .dest_shape = &one, .dest_stride = &unit,
                        .dest_dtype = RS_DTYPE_U8};
    rs_sources_h s = NULL;
    rs_capture_h cap = NULL;
    rs_plan_h plan = NULL;
    rs_plan_params_t params;
    rs_diag_t diag;
    long before = max_rss_kib();

    assert_int_equal(rs_sources_create(&s), RS_OK);
    assert_int_equal(rs_sources_add_shard(s, &d, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "p", 1, &full, RS_DTYPE_U8,
                                          &diag), RS_OK);
    /* reversed, so nothing is adjacent in capture order */
    for (int64_t i = 0; i < MANY; i++) {
        int64_t e = MANY - 1 - i;
        op.arg[0] = 0;
        op.arg[1] = e;
        op.arg[2] = 1;
        c.dest_offset = e;
        if (rs_capture_add_copy(cap, &c, &diag) != RS_OK)
            fail_msg("copy %lld: %s", (long long)i, diag.msg);
    }
    rs_plan_params_init(&params);
    assert_int_equal(rs_plan_build(cap, s, &params, &diag, &plan), RS_OK);
    assert_true(rs_plan_is_complete(plan));
    size_t n = 0, nfp = 0;
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nfp);
    uint8_t *seen = calloc(MANY, 1);
    assert_non_null(seen);
    uint64_t total = 0;
    /* The copies tile the source: its full pull reads the same bytes with
     * one descriptor, so the cost model reads it whole and replays them. */
    assert_int_equal(nfp, 1);
    assert_int_equal(fp[0].kind, RS_STAGED_FULL);
    assert_int_equal(fp[0].ncopies, MANY);
    assert_int_equal(n, 0);
    seg = fp[0].segments;
    n = fp[0].nsegments;
    for (size_t i = 0; i < fp[0].ncopies; i++)
        seen[fp[0].copies[i]]++;
    for (int64_t i = 0; i < MANY; i++)
        assert_int_equal(seen[i], 1);
    memset(seen, 0, MANY);
    for (size_t i = 0; i < n; i++) {
        assert_true(seg[i].src_addr - 0x10000 == seg[i].dst_byte);
        assert_true(seg[i].dst_byte + seg[i].nbytes <= MANY);
        for (uint64_t b = 0; b < seg[i].nbytes; b++)
            seen[seg[i].dst_byte + b]++;
        total += seg[i].nbytes;
    }
    assert_int_equal(total, MANY);
    for (int64_t i = 0; i < MANY; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    long grown = max_rss_kib() - before;
#if defined(__SANITIZE_ADDRESS__)
#define HOSTILE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang's spelling */
#define HOSTILE_ASAN 1
#endif
#endif
#ifdef HOSTILE_ASAN
    long limit_kib = (long)(MANY * PER_COPY_ASAN / 1024);
#else
    long limit_kib = (long)(MANY * PER_COPY / 1024);
#endif
    fprintf(stderr, "10^6 copies: %zu segments, peak RSS grew %ld KiB "
            "(limit %ld KiB)\n", n, grown, limit_kib);
    assert_true(grown <= limit_kib);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(s);
}

/* A capture with f8e4m3 "q"[8, 8], f32 "s"[4] and bf16 "b"[4], and one
 * plain copy so that the quantized copy under test is copy 1. */
static rs_capture_h quant_capture(void)
{
    int64_t q[2] = {8, 8}, four = 4, one = 1;
    rs_capture_h cap = NULL;
    rs_copy_desc_t c = {.src = "o", .param = "b", .ndim = 1,
                        .dest_shape = &four, .dest_stride = &one,
                        .dest_dtype = RS_DTYPE_BF16};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "q", 2, q, RS_DTYPE_F8E4M3,
                                          NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "s", 1, &four, RS_DTYPE_F32,
                                          NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "b", 1, &four, RS_DTYPE_BF16,
                                          NULL), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
    return cap;
}

/* Adds copy 1 of "w" into "q" with spec `q` and expects the refusal to
 * name the copy, its source and parameter, the field and `cause`; nothing
 * is added. */
static void expect_quant_refused(rs_capture_h cap, const rs_copy_desc_t *c,
                                 const rs_quant_desc_t *q, const char *field,
                                 const char *cause)
{
    rs_diag_t diag;
    HOSTILE_EXPECT(rs_capture_add_quant_copy(cap, c, q, &diag), RS_ERR_INPUT,
                   &diag, "copy 1 ", "'w'", "'q'", field, cause);
    assert_int_equal(rs_capture_num_copies(cap), 1);
}

static void test_quant_copy_checks(void **state)
{
    (void)state;
    rs_capture_h cap = quant_capture();
    int64_t shape[2] = {8, 8}, stride[2] = {8, 1}, block[RS_MAX_DIMS + 1];
    int64_t sshape[2] = {2, 2}, sstride[2] = {2, 1}, neg[2] = {2, -1};
    rs_copy_desc_t c = {.src = "w", .param = "q", .ndim = 2,
                        .dest_shape = shape, .dest_stride = stride,
                        .dest_dtype = RS_DTYPE_F8E4M3};
    rs_quant_desc_t good = {.scheme = RS_QUANT_FP8_BLOCK,
                            .format = RS_DTYPE_F8E4M3, .block_ndim = 2,
                            .block = block, .scale_param = "s",
                            .scale_ndim = 2, .scale_shape = sshape,
                            .scale_stride = sstride};
    rs_quant_desc_t q;
    rs_diag_t diag;

    for (int i = 0; i <= RS_MAX_DIMS; i++)
        block[i] = 4;
    q = good, q.scheme = (rs_quant_scheme_t)9;
    expect_quant_refused(cap, &c, &q, "quant.scheme", "unknown scheme 9");
    q = good, q.scheme = RS_QUANT_NONE;
    expect_quant_refused(cap, &c, &q, "quant.scheme", "unknown scheme 0");
    q = good, q.format = RS_DTYPE_BF16;
    expect_quant_refused(cap, &c, &q, "quant.format", "not an FP8 format");
    q = good, q.block_ndim = 0;
    expect_quant_refused(cap, &c, &q, "quant.block", "1..");
    q = good, q.block_ndim = RS_MAX_DIMS + 1;
    expect_quant_refused(cap, &c, &q, "quant.block", "got 17");
    q = good, block[1] = 0;
    expect_quant_refused(cap, &c, &q, "quant.block", "extent 1 is 0");
    block[1] = -4;
    expect_quant_refused(cap, &c, &q, "quant.block", "extent 1 is -4");
    block[1] = 4;
    q = good, q.scheme = RS_QUANT_FP8_CHANNEL;
    expect_quant_refused(cap, &c, &q, "quant.block", "only fp8_block");
    q = good, q.scale_param = "nope";
    expect_quant_refused(cap, &c, &q, "quant.scale_param",
                         "'nope' is not a declared parameter");
    q = good, q.scale_param = "b";
    expect_quant_refused(cap, &c, &q, "quant.scale_param", "'b' is bf16");
    q = good, q.scale_offset = -1;
    expect_quant_refused(cap, &c, &q, "quant.scale_offset", "negative");
    q = good, q.scale_ndim = RS_MAX_DIMS + 1;
    expect_quant_refused(cap, &c, &q, "quant.scale_shape", "rank 17");
    q = good, q.scale_stride = neg;
    expect_quant_refused(cap, &c, &q, "quant.scale_stride", "entry 1");
    q = good, q.scale_shape = neg;
    expect_quant_refused(cap, &c, &q, "quant.scale_shape", "negative");
    q = good, q.scale_offset = 1; /* 1 + 2 + 1 = element 4 of 4 */
    expect_quant_refused(cap, &c, &q, "quant.scale_shape",
                         "reaches element 4 of scale parameter 's'");
    q = good, q.scheme = RS_QUANT_FP8_TENSOR, q.block_ndim = 0;
    expect_quant_refused(cap, &c, &q, "quant.scale_shape", "one scale");
    q = good, q.format = RS_DTYPE_F8E5M2;
    expect_quant_refused(cap, &c, &q, "dest_dtype",
                         "not the quantization format f8e5m2");
    c.dest_dtype = RS_DTYPE_F8E5M2; /* the copy agrees, its parameter not */
    expect_quant_refused(cap, &c, &q, "dest_dtype",
                         "parameter 'q' is f8e4m3");
    c.dest_dtype = RS_DTYPE_F8E4M3;
    /* a declared source bounds the block's rank */
    assert_int_equal(rs_capture_declare_source(cap, "w", 1, shape,
                                               RS_DTYPE_BF16, NULL), RS_OK);
    q = good;
    expect_quant_refused(cap, &c, &q, "quant.block",
                         "2 dims, source 'w' is declared with 1");
    HOSTILE_EXPECT(rs_capture_add_quant_copy(cap, &c, NULL, &diag),
                   RS_ERR_INVALID_ARG, &diag, "NULL");
    /* the good spec goes in, and the caller's arrays are not kept */
    c.src = "w2";
    assert_int_equal(rs_capture_add_quant_copy(cap, &c, &good, &diag), RS_OK);
    block[0] = 99, sshape[0] = 99;
    assert_int_equal(rs_capture_copy_quant(cap, 1, &q), 1);
    assert_int_equal(q.block[0], 4);
    assert_int_equal(q.scale_shape[0], 2);
    assert_int_equal(rs_capture_copy_quant(cap, 0, &q), 0);
    rs_capture_destroy(cap);
}

/* Hostile quant objects in a capture file: each is refused naming the
 * file, the JSON path of the field and the copy. */
static void test_capture_json_quant(void **state)
{
    (void)state;
#define QCAP(quant)                                                           \
    "{\"schema\": \"reshard.capture.v1\", \"params\": {\"q\": {\"shape\":"   \
    " [8, 8], \"dtype\": \"f8e4m3\"}, \"s\": {\"shape\": [4], \"dtype\":"     \
    " \"f32\"}, \"i\": {\"shape\": [4], \"dtype\": \"i32\"}}, \"copies\":"    \
    " [{\"src\": \"w\", \"ops\": [], \"param\": \"q\", \"dest_offset\": 0,"   \
    " \"dest_shape\": [8, 8], \"dest_stride\": [8, 1], \"dest_dtype\":"       \
    " \"f8e4m3\", \"quant\": " quant "}]}"
#define QSC "\"scale\": {\"param\": \"s\", \"dest_offset\": 0, "             \
    "\"dest_shape\": [2, 2], \"dest_stride\": [2, 1]}"
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"amax\": 1, "
                                QSC "}"),
                           "copies[0].quant.amax", "unknown key");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, -4], " QSC "}"),
                           "copies[0].quant.block[1]", "");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [1, 1, 1, 1, 1, 1, 1,"
                                " 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], " QSC "}"),
                           "copies[0].quant.block", "more than the limit");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4.5], " QSC "}"),
                           "copies[0].quant.block[1]", "integer");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_tensor\", \"format\": "
                                "\"f8e4m3\", \"block\": [4], " QSC "}"),
                           "copies[0].quant.block", "only fp8_block");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"scale\": "
                                "{\"param\": \"s\", \"dest_offset\": 0, "
                                "\"dest_shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1, "
                                "1, 1, 1, 1, 1, 1, 1, 1], \"dest_stride\": "
                                "[]}}"),
                           "copies[0].quant.scale.dest_shape", "");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"scale\": "
                                "{\"param\": \"s\", \"dest_offset\": 0, "
                                "\"dest_shape\": [2, 2], \"dest_stride\": "
                                "[2]}}"),
                           "copies[0].quant.scale.dest_stride",
                           "dest_shape has 2");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"scale\": "
                                "{\"param\": \"i\", \"dest_offset\": 0, "
                                "\"dest_shape\": [2, 2], \"dest_stride\": "
                                "[2, 1]}}"),
                           "copies[0].quant.scale.param", "'i' is i32");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"scale\": "
                                "{\"param\": \"t\", \"dest_offset\": 0, "
                                "\"dest_shape\": [2, 2], \"dest_stride\": "
                                "[2, 1]}}"),
                           "copies[0].quant.scale.param",
                           "copy of 'w' into 'q'");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e5m2\", \"block\": [4, 4], " QSC "}"),
                           "copies[0].dest_dtype", "f8e5m2");
    expect_capture_refused(QCAP("{\"scheme\": \"fp8_block\", \"format\": "
                                "\"f8e4m3\", \"block\": [4, 4], \"scale\": "
                                "[1]}"),
                           "copies[0].quant.scale", "object");
#undef QCAP
#undef QSC
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dest_leaves_param),
        cmocka_unit_test(test_ops_out_of_range),
        cmocka_unit_test(test_ops_overflow),
        cmocka_unit_test(test_capture_entry_checks),
        cmocka_unit_test(test_capture_json_dtypes),
        cmocka_unit_test(test_declare_source_checks),
        cmocka_unit_test(test_capture_json_sources),
        cmocka_unit_test(test_quant_copy_checks),
        cmocka_unit_test(test_capture_json_quant),
        cmocka_unit_test(test_million_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
