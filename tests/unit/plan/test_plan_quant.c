/* The planner's expansion of quantized copies, without moving bytes: the
 * derived copies it appends (their sources, ops and destinations), the
 * selection, the order of fallback entries, a plain copy beside a
 * quantized one of the same source, the reasons for the receiver path,
 * the publisher path without the bf16 source, uncovered receiver boxes,
 * the shards a plan lists, the plan JSON's quantized section, and copies
 * that repeat a checked geometry. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "assert_status.h"
#include "reshard/reshard.h"

#define SPEC "fp8_block:4x8:f8e4m3"

static const int64_t full[2] = {8, 16};

/* Publishes rows [r0, r1) of a [8, 16] tensor of `dt` (grid: [2, 2] of
 * float32 for "#scale" names) from session `sess`. */
static void shard(rs_sources_h s, const char *name, rs_dtype_t dt,
                  const int64_t *shape, int64_t r0, int64_t r1, const char *sess,
                  uint64_t addr)
{
    int64_t off[2] = {r0, 0}, shp[2] = {r1 - r0, shape[1]};
    rs_shard_desc_t d = {name, dt, rs_dtype_size(dt), 2, shape, sess, 0, addr,
                         off, shp, NULL};
    rs_diag_t diag;
    ASSERT_ST(rs_sources_add_shard(s, &d, &diag), RS_OK, diag);
}

typedef struct env {
    rs_capture_h cap;
    rs_sources_h srcs;
} env_t;

/* Copy 0 quantizes rows 4..8 of x into "w" [4, 16], its scales (one row
 * of blocks, [1, 2]) into "w_scale" [2]. */
static void env_init(env_t *e, int publish_src)
{
    rs_diag_t d;
    int64_t ws[2] = {4, 16}, ss[1] = {2};
    assert_int_equal(rs_capture_create(&e->cap), RS_OK);
    assert_int_equal(rs_sources_create(&e->srcs), RS_OK);
    ASSERT_ST(rs_capture_add_param(e->cap, "w", 2, ws, RS_DTYPE_F8E4M3, &d), RS_OK, d);
    ASSERT_ST(rs_capture_add_param(e->cap, "w_scale", 1, ss, RS_DTYPE_F32, &d), RS_OK, d);
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, 4, 4}, .has = 7};
    int64_t st[2] = {16, 1}, blk[2] = {4, 8}, sst[1] = {1};
    rs_copy_desc_t c = {"x", "w", &op, 1, 0, 2, ws, st, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk, "w_scale", 0,
                         1, ss, sst};
    ASSERT_ST(rs_capture_add_quant_copy(e->cap, &c, &q, &d), RS_OK, d);
    if (publish_src) {
        shard(e->srcs, "x", RS_DTYPE_BF16, full, 0, 4, "t0", 0x10000);
        shard(e->srcs, "x", RS_DTYPE_BF16, full, 4, 8, "t1", 0x10000);
    }
}

static void env_free(env_t *e)
{
    rs_capture_destroy(e->cap);
    rs_sources_destroy(e->srcs);
}

static rs_plan_h build(env_t *e, const char *const *only, size_t nonly)
{
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_diag_t d;
    rs_plan_params_init(&p);
    p.only = only;
    p.nonly = nonly;
    ASSERT_ST(rs_plan_build(e->cap, e->srcs, &p, &d, &plan), RS_OK, d);
    return plan;
}

static void serve_quant(env_t *e, int64_t r1)
{
    int64_t grid[2] = {2, 2};
    shard(e->srcs, "x#" SPEC, RS_DTYPE_F8E4M3, full, 0, r1, "t2", 0x20000);
    shard(e->srcs, "x#" SPEC "#scale", RS_DTYPE_F32, grid, 0, 2, "t2", 0x40000);
}

/* The derived copies: the copy's ops over the FP8 tensor into the same
 * destination, and a narrow of the scale grid viewed as the region. */
static void test_derived_copies(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 1);
    rs_plan_h plan = build(&e, NULL, 0);
    rs_capture_h pc = rs_plan_capture(plan);
    assert_ptr_not_equal(pc, e.cap);
    assert_int_equal(rs_capture_num_copies(pc), 3);
    assert_int_equal(rs_capture_num_params(pc), 2);
    rs_quant_desc_t q;
    assert_true(rs_capture_copy_quant(pc, 0, &q)); /* same copy, same index */
    assert_false(rs_capture_copy_quant(pc, 1, &q));
    rs_copy_desc_t w, s;
    rs_capture_copy(pc, 1, &w);
    rs_capture_copy(pc, 2, &s);
    assert_string_equal(w.src, "x#" SPEC);
    assert_string_equal(w.param, "w");
    assert_int_equal(w.nops, 1);
    assert_int_equal(w.ops[0].arg[1], 4);
    assert_int_equal(w.dest_dtype, RS_DTYPE_F8E4M3);
    assert_string_equal(s.src, "x#" SPEC "#scale");
    assert_string_equal(s.param, "w_scale");
    assert_int_equal(s.dest_dtype, RS_DTYPE_F32);
    /* narrow(0, 1, 1) of the [2, 2] grid, then view([2]) */
    assert_int_equal(s.nops, 2);
    assert_int_equal(s.ops[0].kind, RS_OP_NARROW);
    assert_int_equal(s.ops[0].arg[0], 0);
    assert_int_equal(s.ops[0].arg[1], 1);
    assert_int_equal(s.ops[1].kind, RS_OP_VIEW);
    assert_int_equal(s.ops[1].nlist, 1);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* A selection naming the weight param keeps the copy and both derived
 * copies (the scale param is not selected itself); one naming neither
 * leaves no record. */
static void test_selection(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 1);
    serve_quant(&e, 8);
    const char *only_w[] = {"w"}, *only_s[] = {"w_scale"};
    rs_plan_h plan = build(&e, only_w, 1);
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(q[0].path, RS_QUANT_PATH_PUBLISHER);
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_int_equal(st.copies_selected, 1);
    assert_int_equal(st.copies_planned, 1);
    assert_int_equal(st.needed_bytes, 4 * 16 + 2 * 4);
    assert_true(rs_plan_is_complete(plan));
    rs_plan_destroy(plan);
    plan = build(&e, only_s, 1);
    rs_plan_quantized(plan, &n);
    assert_int_equal(n, 0);
    rs_plan_stats(plan, &st);
    assert_int_equal(st.copies_selected, 0);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* A declared source published with another shape or dtype: the
 * mismatch leads the fallback list, and the quantized copy reads
 * nothing. */
static void test_mismatch_first(void **state)
{
    (void)state;
    static const int64_t other[2][2] = {{8, 32}, {8, 16}};
    static const rs_dtype_t dt[2] = {RS_DTYPE_BF16, RS_DTYPE_F32};
    static const char *const want[2] = {"capture assumes shape [8, 32] bf16",
                                        "capture assumes shape [8, 16] f32"};
    for (int k = 0; k < 2; k++) {
        env_t e;
        rs_diag_t d;
        env_init(&e, 1);
        ASSERT_ST(rs_capture_declare_source(e.cap, "x", 2, other[k], dt[k], &d),
                  RS_OK, d);
        rs_plan_h plan = build(&e, NULL, 0);
        assert_int_equal(rs_plan_num_mismatched(plan), 1);
        const char *src, *reason;
        rs_plan_fallback(plan, 0, &src, &reason);
        if (strstr(reason, want[k]) == NULL)
            fail_msg("reason: %s", reason);
        size_t n;
        const rs_quantized_t *q = rs_plan_quantized(plan, &n);
        assert_int_equal(n, 1);
        assert_int_equal(q[0].nsegments, 0);
        rs_plan_stats_t st;
        rs_plan_stats(plan, &st);
        assert_int_equal(st.bytes_planned, 0);
        rs_plan_destroy(plan);
        env_free(&e);
    }
}

/* A plain copy of the same source beside the quantized one (a bf16 view
 * of rows 0..4) is planned as ever; the box is counted once per copy. */
static void test_plain_beside(void **state)
{
    (void)state;
    env_t e;
    rs_diag_t d;
    env_init(&e, 1);
    int64_t bs[2] = {4, 16}, st[2] = {16, 1};
    ASSERT_ST(rs_capture_add_param(e.cap, "b", 2, bs, RS_DTYPE_BF16, &d), RS_OK, d);
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, 0, 4}, .has = 7};
    rs_copy_desc_t c = {"x", "b", &op, 1, 0, 2, bs, st, RS_DTYPE_BF16};
    ASSERT_ST(rs_capture_add_copy(e.cap, &c, &d), RS_OK, d);
    rs_plan_h plan = build(&e, NULL, 0);
    assert_true(rs_plan_is_complete(plan));
    rs_plan_stats_t s;
    rs_plan_stats(plan, &s);
    assert_int_equal(s.copies_selected, 2);
    assert_int_equal(s.copies_planned, 2);
    assert_int_equal(s.bytes_planned, 2 * 4 * 16 * 2);
    assert_int_equal(s.needed_bytes, s.bytes_planned);
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(q[0].weight_copy, 2); /* after both user copies */
    assert_int_equal(q[0].scale_copy, 3);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* FP8 values served for rows 0..4 only: the copy's row of blocks is not
 * published, so the receiver path, saying which block and how much. */
static void test_partly_served(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 1);
    serve_quant(&e, 4);
    rs_plan_h plan = build(&e, NULL, 0);
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(q[0].path, RS_QUANT_PATH_RECEIVER);
    if (strstr(q[0].why, "block (1, 0) of x is not published in x#" SPEC) == NULL ||
        strstr(q[0].why, "0% of the blocks needed") == NULL)
        fail_msg("why: %s", q[0].why);
    assert_true(rs_plan_is_complete(plan));
    rs_plan_destroy(plan);
    env_free(&e);
}

/* Only the FP8 copy is published: the publisher path needs no bf16. */
static void test_publisher_only(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 0);
    serve_quant(&e, 8);
    rs_plan_h plan = build(&e, NULL, 0);
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(q[0].path, RS_QUANT_PATH_PUBLISHER);
    assert_true(rs_plan_is_complete(plan));
    rs_plan_destroy(plan);
    env_free(&e);
}

/* The plan's shards at session `sess`, and that every listed shard is of
 * `a` or `b`. */
static size_t listed(rs_plan_h plan, const char *sess, const char *a,
                     const char *b)
{
    size_t n, at = 0;
    const rs_shard_ref_t *sh = rs_plan_shards(plan, &n);
    for (size_t i = 0; i < n; i++) {
        const char *t = sh[i].tensor;
        if (strcmp(t, a) != 0 && (b == NULL || strcmp(t, b) != 0))
            fail_msg("tensor '%s' listed", t);
        at += strcmp(rs_plan_session_name(plan, sh[i].session), sess) == 0;
    }
    return at;
}

/* The shards listed for verification are those the plan reads: on the
 * publisher path those of the FP8 values and scales it reads (here one of
 * the two halves of the FP8 tensor), not the bf16 source's; on the
 * receiver path the source's (all of them). The derived tensors are found
 * however the sources order them (next to the source or not). */
static void test_listed_shards(void **state)
{
    (void)state;
    for (int order = 0; order < 2; order++) {
        env_t e;
        int64_t grid[2] = {2, 2};
        env_init(&e, order == 0);
        if (order == 0) { /* the FP8 values in row halves, t2 and t3 */
            shard(e.srcs, "x#" SPEC, RS_DTYPE_F8E4M3, full, 0, 4, "t3",
                  0x20000);
            shard(e.srcs, "x#" SPEC, RS_DTYPE_F8E4M3, full, 4, 8, "t2",
                  0x20000);
            shard(e.srcs, "x#" SPEC "#scale", RS_DTYPE_F32, grid, 0, 2, "t2",
                  0x40000);
        } else { /* the scales first, the source last */
            shard(e.srcs, "x#" SPEC "#scale", RS_DTYPE_F32, grid, 0, 2, "t2",
                  0x40000);
            shard(e.srcs, "x#" SPEC, RS_DTYPE_F8E4M3, full, 0, 8, "t2",
                  0x20000);
            shard(e.srcs, "x", RS_DTYPE_BF16, full, 0, 4, "t0", 0x10000);
            shard(e.srcs, "x", RS_DTYPE_BF16, full, 4, 8, "t1", 0x10000);
        }
        rs_plan_h plan = build(&e, NULL, 0);
        size_t n;
        const rs_quantized_t *q = rs_plan_quantized(plan, &n);
        assert_int_equal(q[0].path, RS_QUANT_PATH_PUBLISHER);
        assert_int_equal(listed(plan, "t2", "x#" SPEC, "x#" SPEC "#scale"), 2);
        rs_plan_shards(plan, &n);
        assert_int_equal(n, 2);
        rs_plan_destroy(plan);
        env_free(&e);
    }
    env_t e;
    env_init(&e, 1);
    serve_quant(&e, 4); /* the copy's blocks not served: receiver path */
    rs_plan_h plan = build(&e, NULL, 0);
    size_t n;
    assert_int_equal(rs_plan_quantized(plan, &n)[0].path,
                     RS_QUANT_PATH_RECEIVER);
    assert_int_equal(listed(plan, "t1", "x", NULL), 1);
    rs_plan_shards(plan, &n);
    assert_int_equal(n, 2);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* The receiver box partly published: an uncovered entry for the copy. */
static void test_uncovered_box(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 0);
    shard(e.srcs, "x", RS_DTYPE_BF16, full, 0, 6, "t0", 0x10000);
    rs_plan_h plan = build(&e, NULL, 0);
    size_t n;
    const rs_uncovered_t *u = rs_plan_uncovered(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(u[0].copy, 0);
    assert_int_equal(u[0].missing_elements, 2 * 16);
    assert_false(rs_plan_is_complete(plan));
    rs_plan_destroy(plan);
    env_free(&e);
}

/* The plan JSON parses, with the record and the derived definitions. */
static void test_plan_json(void **state)
{
    (void)state;
    env_t e;
    env_init(&e, 1);
    rs_plan_h plan = build(&e, NULL, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    rs_diag_t d;
    ASSERT_ST(rs_plan_write_json(plan, f, &d), RS_OK, d);
    fclose(f);
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (root == NULL)
        fail_msg("plan JSON: %s\n%s", err.text, text);
    json_t *q = json_array_get(json_object_get(root, "quantized"), 0);
    assert_string_equal(json_string_value(json_object_get(q, "path")), "receiver");
    assert_string_equal(json_string_value(json_object_get(q, "spec")), SPEC);
    json_t *der = json_object_get(q, "derived");
    assert_int_equal(json_array_size(der), 2);
    json_t *def = json_object_get(json_array_get(der, 1), "definition");
    assert_string_equal(json_string_value(json_object_get(def, "src")), "x#" SPEC "#scale");
    assert_int_equal(json_array_size(json_object_get(def, "ops")), 2);
    assert_int_equal(json_array_size(json_object_get(q, "segments")), 1);
    json_decref(root);
    free(text);
    rs_plan_destroy(plan);
    env_free(&e);
}


/* The path by estimated time: x [256, 4096] in column quarters of bf16
 * (cut-aligned), a copy quantizing quarter 1 (128 x 128 blocks). With the
 * FP8 copy served whole, the quarter is 256 runs of 1 KiB inside 1 MiB of
 * FP8 (at least 21 us at 400 Gb/s) against one 512 KiB bf16 read (10.5 us):
 * the receiver quantizes it. With the FP8 copy cut into quarters too, its
 * 256 KiB are one read: the publisher's. */
static void cut_env(env_t *e, int fp8_cut)
{
    rs_diag_t d;
    int64_t shape[2] = {256, 4096}, grid[2] = {2, 32};
    int64_t ws[2] = {256, 1024}, ss[2] = {2, 8}, st[2] = {1024, 1},
            sst[2] = {8, 1}, blk[2] = {128, 128};
    assert_int_equal(rs_capture_create(&e->cap), RS_OK);
    assert_int_equal(rs_sources_create(&e->srcs), RS_OK);
    ASSERT_ST(rs_capture_add_param(e->cap, "w", 2, ws, RS_DTYPE_F8E4M3, &d), RS_OK, d);
    ASSERT_ST(rs_capture_add_param(e->cap, "w_scale", 2, ss, RS_DTYPE_F32, &d), RS_OK, d);
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {1, 1024, 1024}, .has = 7};
    rs_copy_desc_t c = {"x", "w", &op, 1, 0, 2, ws, st, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk, "w_scale",
                         0, 2, ss, sst};
    ASSERT_ST(rs_capture_add_quant_copy(e->cap, &c, &q, &d), RS_OK, d);
    const char *qn = "x#fp8_block:128x128:f8e4m3";
    const char *sn = "x#fp8_block:128x128:f8e4m3#scale";
    for (int k = 0; k < 4; k++) {
        int64_t off[2] = {0, (int64_t)1024 * k}, shp[2] = {256, 1024};
        rs_shard_desc_t b = {"x", RS_DTYPE_BF16, 2, 2, shape, "t0", 0,
                             0x100000u * (uint64_t)(k + 1), off, shp, NULL};
        ASSERT_ST(rs_sources_add_shard(e->srcs, &b, &d), RS_OK, d);
    }
    for (int k = 0; k < (fp8_cut ? 4 : 1); k++) {
        int64_t off[2] = {0, fp8_cut ? 1024 * k : 0},
                shp[2] = {256, fp8_cut ? 1024 : 4096},
                goff[2] = {0, fp8_cut ? 8 * k : 0},
                gshp[2] = {2, fp8_cut ? 8 : 32};
        rs_shard_desc_t f = {qn, RS_DTYPE_F8E4M3, 1, 2, shape, "t0", 0,
                             0x1000000u * (uint64_t)(k + 1), off, shp, NULL};
        rs_shard_desc_t g = {sn, RS_DTYPE_F32, 4, 2, grid, "t0", 0,
                             0x10000000u * (uint64_t)(k + 1), goff, gshp, NULL};
        ASSERT_ST(rs_sources_add_shard(e->srcs, &f, &d), RS_OK, d);
        ASSERT_ST(rs_sources_add_shard(e->srcs, &g, &d), RS_OK, d);
    }
}

static void test_path_by_time(void **state)
{
    (void)state;
    for (int fp8_cut = 0; fp8_cut < 2; fp8_cut++) {
        env_t e;
        cut_env(&e, fp8_cut);
        rs_plan_h plan = build(&e, NULL, 0);
        size_t n;
        const rs_quantized_t *q = rs_plan_quantized(plan, &n);
        rs_plan_stats_t st;
        rs_plan_stats(plan, &st);
        assert_int_equal(n, 1);
        assert_int_equal(q[0].path, fp8_cut ? RS_QUANT_PATH_PUBLISHER
                                            : RS_QUANT_PATH_RECEIVER);
        if (!fp8_cut && strstr(q[0].why, "estimated at") == NULL)
            fail_msg("why: %s", q[0].why);
        /* what is read: the bf16 quarter, or its FP8 bytes and scales */
        assert_int_equal(st.bytes_planned,
                         fp8_cut ? 256 * 1024 + 2 * 8 * 4 : 256 * 1024 * 2);
        assert_true(rs_plan_is_complete(plan));
        rs_plan_destroy(plan);
        env_free(&e);
    }
}

/* What a published table holds of one quantized copy's tensors. */
enum { SERVE_VALUES = 1, SERVE_SCALES = 2 };

/* The plan of one quantized copy of rows 4..8 of bf16 source `name` into
 * an FP8 param "w" [4, 16] (block 4x8, scales into "w_scale" [2]), over
 * tables publishing the source and what `serve` says of its FP8 values
 * and scales. The caller destroys the three. */
static rs_plan_h plan_named(const char *name, int serve, rs_capture_h *cap_p,
                            rs_sources_h *srcs_p)
{
    char fp8[500], scale[500];
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_diag_t d;
    int64_t ws[2] = {4, 16}, ss[1] = {2}, grid[2] = {2, 2};
    int64_t st[2] = {16, 1}, blk[2] = {4, 8}, sst[1] = {1};
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, 4, 4}, .has = 7};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    ASSERT_ST(rs_capture_add_param(cap, "w", 2, ws, RS_DTYPE_F8E4M3, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "w_scale", 1, ss, RS_DTYPE_F32, &d),
              RS_OK, d);
    rs_copy_desc_t c = {name, "w", &op, 1, 0, 2, ws, st, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk,
                         "w_scale", 0, 1, ss, sst};
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
    snprintf(fp8, sizeof(fp8), "%s#%s", name, SPEC);
    snprintf(scale, sizeof(scale), "%s#%s#scale", name, SPEC);
    shard(srcs, name, RS_DTYPE_BF16, full, 0, 8, "t0", 0x10000);
    if (serve & SERVE_VALUES)
        shard(srcs, fp8, RS_DTYPE_F8E4M3, full, 0, 8, "t2", 0x20000);
    if (serve & SERVE_SCALES)
        shard(srcs, scale, RS_DTYPE_F32, grid, 0, 2, "t2", 0x40000);
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_plan_params_init(&p);
    ASSERT_ST(rs_plan_build(cap, srcs, &p, &d, &plan), RS_OK, d);
    *cap_p = cap;
    *srcs_p = srcs;
    return plan;
}

/* The publisher path's reason names the FP8 tensor; one whose name does
 * not fit the 320 bytes a reason had is cut at 319 as it always was. */
static void test_served_reason(void **state)
{
    (void)state;
    char longname[301], want[320], fp8[400];
    memset(longname, 'n', 300);
    longname[300] = '\0';
    const char *names[2] = {"x", longname};
    for (int i = 0; i < 2; i++) {
        rs_capture_h cap;
        rs_sources_h srcs;
        rs_plan_h plan = plan_named(names[i], SERVE_VALUES | SERVE_SCALES,
                                    &cap, &srcs);
        snprintf(fp8, sizeof(fp8), "%s#%s", names[i], SPEC);
        size_t n;
        const rs_quantized_t *r = rs_plan_quantized(plan, &n);
        assert_int_equal(n, 1);
        assert_int_equal(r[0].path, RS_QUANT_PATH_PUBLISHER);
        /* the reason as a 320-byte buffer held it */
        size_t len = (size_t)snprintf(want, sizeof(want), "'%s", fp8);
        const char *tail = "' and its scales are served for every block the "
                           "copy needs";
        if (len < sizeof(want) - 1)
            strncat(want, tail, sizeof(want) - 1 - len);
        assert_string_equal(r[0].why, want);
        assert_int_equal(strlen(r[0].why), i == 0 ? strlen(want) : 319);
        rs_plan_destroy(plan);
        rs_capture_destroy(cap);
        rs_sources_destroy(srcs);
    }
}

/* The receiver path's reason when no table publishes the FP8 tensor, or
 * only its values and not its scales: "no publisher serves <name>", the
 * name whole while the reason fits the 320 bytes a reason had and cut
 * at 319 past that, for names whose reason is just under, at and just
 * over that length. */
static void test_unserved_reason(void **state)
{
    (void)state;
    const size_t head = strlen("no publisher serves ");
    /* "<name>#" SPEC is the name and 21 more: a reason of 319 at 278 */
    const size_t lens[] = {1, 2, 40, 272, 273, 276, 277, 278, 279, 280, 300};
    char name[400], fp8[500], scale[500], want[600];
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
        for (int scales_only = 0; scales_only < 2; scales_only++) {
            memset(name, 'n', lens[k]);
            name[lens[k]] = '\0';
            rs_capture_h cap;
            rs_sources_h srcs;
            /* scales_only: the values served, their scales not */
            rs_plan_h plan = plan_named(name, scales_only ? SERVE_VALUES : 0,
                                        &cap, &srcs);
            snprintf(fp8, sizeof(fp8), "%s#%s", name, SPEC);
            snprintf(scale, sizeof(scale), "%s#%s#scale", name, SPEC);
            size_t n;
            const rs_quantized_t *r = rs_plan_quantized(plan, &n);
            assert_int_equal(n, 1);
            assert_int_equal(r[0].path, RS_QUANT_PATH_RECEIVER);
            snprintf(want, sizeof(want), "no publisher serves %s",
                     scales_only ? scale : fp8);
            if (strlen(want) > 319)
                want[319] = '\0';
            assert_string_equal(r[0].why, want);
            assert_int_equal(strlen(r[0].why),
                             head + strlen(scales_only ? scale : fp8) < 319
                                 ? head + strlen(scales_only ? scale : fp8)
                                 : 319);
            rs_plan_destroy(plan);
            rs_capture_destroy(cap);
            rs_sources_destroy(srcs);
        }
}

/* One quantized copy of rows 4..8 of `src` into `param` [4, 16] at
 * `off`, its scales into `sparam` at `soff` as `sn` dims of `sshape`
 * (strides `sstride`); params declared by the caller. */
static void add_repeated(rs_capture_h cap, const char *src, const char *param,
                         int64_t off, const char *sparam, int64_t soff, int sn,
                         const int64_t *sshape, const int64_t *sstride)
{
    rs_diag_t d;
    int64_t ws[2] = {4, 16}, st[2] = {16, 1}, blk[2] = {4, 8};
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, 4, 4}, .has = 7};
    rs_copy_desc_t c = {src, param, &op, 1, off, 2, ws, st, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk, sparam,
                         soff, sn, sshape, sstride};
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
}

/* The five copies of test_repeated_geometry, from `first` on (copy k of
 * the whole list is copy k - first here), with their sources served. */
static rs_plan_h plan_repeated(int first, rs_capture_h *cap_p,
                               rs_sources_h *srcs_p)
{
    static const char *const src[5] = {"x0", "x1", "x2", "x3", "x4"};
    int64_t ws[2] = {4, 16}, ss[1] = {2}, ss3[1] = {4}, ss2[2] = {1, 2},
            sst[1] = {1}, sst2[2] = {2, 1}, grid[2] = {2, 2};
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_diag_t d;
    char name[64];
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    for (int k = 0; k < 5; k++) {
        snprintf(name, sizeof(name), "w%d", k);
        ASSERT_ST(rs_capture_add_param(cap, name, 2, ws, RS_DTYPE_F8E4M3, &d),
                  RS_OK, d);
        snprintf(name, sizeof(name), "w%d_scale", k);
        ASSERT_ST(rs_capture_add_param(cap, name, k == 4 ? 2 : 1,
                                       k == 4 ? ss2 : k == 3 ? ss3 : ss,
                                       RS_DTYPE_F32, &d),
                  RS_OK, d);
        shard(srcs, src[k], RS_DTYPE_BF16, full, 0, 8, "t0", 0x10000);
        snprintf(name, sizeof(name), "%s#%s", src[k], SPEC);
        shard(srcs, name, RS_DTYPE_F8E4M3, full, 0, 8, "t2", 0x20000);
        snprintf(name, sizeof(name), "%s#%s#scale", src[k], SPEC);
        shard(srcs, name, RS_DTYPE_F32, grid, 0, 2, "t2", 0x40000);
    }
    /* 0 and 1 alike; 2's region leaves "w2"; 3's scales lie further
     * into a larger "w3_scale"; 4's scales are another region of the same
     * blocks (a scale region out of its param is refused when the copy is
     * added) */
    const struct {
        int64_t off, soff;
    } at[5] = {{0, 0}, {0, 0}, {16, 0}, {0, 1}, {0, 0}};
    for (int k = first; k < 5; k++) {
        char param[32], sparam[32];
        snprintf(param, sizeof(param), "w%d", k);
        snprintf(sparam, sizeof(sparam), "w%d_scale", k);
        add_repeated(cap, src[k], param, at[k].off, sparam, at[k].soff,
                     k == 4 ? 2 : 1, k == 4 ? ss2 : ss, k == 4 ? sst2 : sst);
    }
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_plan_params_init(&p);
    ASSERT_ST(rs_plan_build(cap, srcs, &p, &d, &plan), RS_OK, d);
    *cap_p = cap;
    *srcs_p = srcs;
    return plan;
}

/* The reason past "copy N into '...': ", which names the copy's index. */
static const char *past_copy(const char *why)
{
    const char *at = strstr(why, "': ");
    return at != NULL && strncmp(why, "copy ", 5) == 0 ? at + 3 : why;
}

/* Copies with one view, spec and scale region are checked in full once;
 * each one after it in the same plan is decided by where its regions end
 * (the memo of plan_quant.c). Each copy's record, planned after the
 * others, equals its record planned first (the full check): a repeated
 * copy is served alike, one whose region or scales leave their param is
 * refused for that, and one with another scale region is checked in
 * full. */
static void test_repeated_geometry(void **state)
{
    (void)state;
    rs_capture_h cap;
    rs_sources_h srcs;
    size_t n;
    rs_plan_h all = plan_repeated(0, &cap, &srcs);
    const rs_quantized_t *r = rs_plan_quantized(all, &n);
    assert_int_equal(n, 5);
    static const rs_quant_path_t path[5] = {
        RS_QUANT_PATH_PUBLISHER, RS_QUANT_PATH_PUBLISHER,
        RS_QUANT_PATH_RECEIVER, RS_QUANT_PATH_PUBLISHER,
        RS_QUANT_PATH_PUBLISHER};
    assert_string_equal(past_copy(r[2].why),
                        "destination region leaves its parameter");
    for (int k = 0; k < 5; k++) {
        rs_capture_h solo_cap;
        rs_sources_h solo_srcs;
        size_t m;
        rs_plan_h solo = plan_repeated(k, &solo_cap, &solo_srcs);
        const rs_quantized_t *f = rs_plan_quantized(solo, &m);
        assert_int_equal(m, (size_t)(5 - k));
        assert_int_equal(r[k].path, path[k]);
        assert_int_equal(r[k].path, f[0].path);
        assert_string_equal(past_copy(r[k].why), past_copy(f[0].why));
        assert_int_equal(r[k].ndim, 2);
        assert_memory_equal(r[k].box_lo, f[0].box_lo, 2 * sizeof(int64_t));
        assert_memory_equal(r[k].box_shape, f[0].box_shape,
                            2 * sizeof(int64_t));
        assert_int_equal(r[k].weight_copy == SIZE_MAX,
                         f[0].weight_copy == SIZE_MAX);
        if (r[k].weight_copy != SIZE_MAX) { /* the scale copies alike */
            rs_copy_desc_t a, b;
            rs_capture_copy(rs_plan_capture(all), r[k].scale_copy, &a);
            rs_capture_copy(rs_plan_capture(solo), f[0].scale_copy, &b);
            assert_int_equal(a.nops, b.nops);
            assert_int_equal(a.dest_offset, b.dest_offset);
            assert_int_equal(a.ndim, b.ndim);
            assert_memory_equal(a.dest_shape, b.dest_shape,
                                (size_t)a.ndim * sizeof(int64_t));
        }
        rs_plan_destroy(solo);
        rs_capture_destroy(solo_cap);
        rs_sources_destroy(solo_srcs);
    }
    /* served copies read rows 4..8 as blocks: box [4, 0] + [4, 16]; copy
     * 3's scales land 1 element into their param */
    assert_int_equal(r[1].box_lo[0], 4);
    assert_int_equal(r[1].box_shape[1], 16);
    rs_copy_desc_t s3;
    rs_capture_copy(rs_plan_capture(all), r[3].scale_copy, &s3);
    assert_int_equal(s3.dest_offset, 1);
    rs_plan_destroy(all);
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived_copies),
        cmocka_unit_test(test_selection),
        cmocka_unit_test(test_mismatch_first),
        cmocka_unit_test(test_plain_beside),
        cmocka_unit_test(test_partly_served),
        cmocka_unit_test(test_publisher_only),
        cmocka_unit_test(test_listed_shards),
        cmocka_unit_test(test_uncovered_box),
        cmocka_unit_test(test_plan_json),
        cmocka_unit_test(test_path_by_time),
        cmocka_unit_test(test_served_reason),
        cmocka_unit_test(test_unserved_reason),
        cmocka_unit_test(test_repeated_geometry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
