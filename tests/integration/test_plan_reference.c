/* The reference design's own cases, planned and executed with mini_exec and
 * checked byte for byte against values worked out by hand: column slices of
 * row shards, transposed and permuted destinations, fused QKV, a bf16 source
 * into an f32 parameter, full pulls, gaps, fallbacks, replicas, selection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mini_exec.h"
#include "plan/planner.h"
#include "reshard/reshard.h"

#define REF_MAX_TENSORS 8
#define REF_MAX_BUFS 64
#define REF_MAX_PARAMS 8

typedef struct ref_tensor {
    char name[32];
    rs_dtype_t dtype;
    int ndim;
    int64_t shape[4];
    int base; /* element i holds base + i (in its dtype) */
} ref_tensor_t;

typedef struct ref_buf {
    char session[16];
    uint64_t addr, nbytes;
    uint8_t *buf;
} ref_buf_t;

/* A capture, merged sources and the buffers behind them. */
typedef struct ref_env {
    rs_capture_h cap;
    rs_sources_h srcs;
    ref_tensor_t tensors[REF_MAX_TENSORS];
    int ntensors;
    ref_buf_t bufs[REF_MAX_BUFS];
    int nbufs;
    uint8_t *params[REF_MAX_PARAMS];
    uint64_t param_bytes[REF_MAX_PARAMS];
    int nparams;
    uint64_t cursor; /* next shard address, shared by every session */
} ref_env_t;

static void env_init(ref_env_t *e)
{
    memset(e, 0, sizeof(*e));
    assert_int_equal(rs_capture_create(&e->cap), RS_OK);
    assert_int_equal(rs_sources_create(&e->srcs), RS_OK);
    e->cursor = 0x100000;
}

static void env_free(ref_env_t *e)
{
    for (int i = 0; i < e->nbufs; i++)
        free(e->bufs[i].buf);
    for (int i = 0; i < e->nparams; i++)
        free(e->params[i]);
    rs_capture_destroy(e->cap);
    rs_sources_destroy(e->srcs);
}

static uint16_t bf16_of(float f)
{
    uint32_t w;
    memcpy(&w, &f, 4);
    return (uint16_t)(w >> 16); /* small integers are exact in bf16 */
}

static void put_value(rs_dtype_t dtype, int64_t v, uint8_t *out)
{
    float f = (float)v;
    uint16_t h;
    switch (dtype) {
    case RS_DTYPE_F32: memcpy(out, &f, 4); break;
    case RS_DTYPE_BF16:
        h = bf16_of(f);
        memcpy(out, &h, 2);
        break;
    case RS_DTYPE_U8: *out = (uint8_t)v; break;
    default: fail_msg("unexpected dtype");
    }
}

static void env_tensor(ref_env_t *e, const char *name, rs_dtype_t dtype,
                       int ndim, const int64_t *shape, int base)
{
    ref_tensor_t *t = &e->tensors[e->ntensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
    t->base = base;
}

static ref_tensor_t *env_find(ref_env_t *e, const char *name)
{
    for (int i = 0; i < e->ntensors; i++) {
        if (strcmp(e->tensors[i].name, name) == 0)
            return &e->tensors[i];
    }
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Publishes the box (off, shape) of tensor `name` from session. */
static void env_shard(ref_env_t *e, const char *name, const char *session,
                      const int64_t *off, const int64_t *shape)
{
    ref_tensor_t *t = env_find(e, name);
    ref_buf_t *b = &e->bufs[e->nbufs++];
    size_t es = rs_dtype_size(t->dtype);
    int64_t numel = 1, m[4] = {0};
    for (int k = 0; k < t->ndim; k++)
        numel *= shape[k];
    snprintf(b->session, sizeof(b->session), "%s", session);
    b->nbytes = (uint64_t)numel * es;
    b->addr = e->cursor;
    e->cursor += b->nbytes + 256;
    b->buf = malloc(b->nbytes + 1);
    for (int64_t j = 0; j < numel; j++) {
        int64_t rest = j, g = 0;
        for (int k = t->ndim - 1; k >= 0; k--) {
            m[k] = rest % shape[k];
            rest /= shape[k];
        }
        for (int k = 0; k < t->ndim; k++)
            g = g * t->shape[k] + off[k] + m[k];
        put_value(t->dtype, t->base + g, b->buf + (uint64_t)j * es);
    }
    rs_shard_desc_t d = {.tensor = t->name, .dtype = t->dtype, .elsize = es,
                         .ndim = t->ndim, .full_shape = t->shape,
                         .session = session, .addr = b->addr, .offset = off,
                         .shape = shape};
    rs_diag_t diag;
    rs_status_t st = rs_sources_add_shard(e->srcs, &d, &diag);
    if (st != RS_OK)
        fail_msg("add shard: %s", diag.msg);
}

/* Publishes tensor `name` split into `parts` row blocks over sessions. */
static void env_row_shards(ref_env_t *e, const char *name, int parts,
                           const char *const *sessions)
{
    ref_tensor_t *t = env_find(e, name);
    int64_t off[4] = {0}, shape[4];
    memcpy(shape, t->shape, sizeof(shape));
    for (int p = 0; p < parts; p++) {
        off[0] = t->shape[0] * p / parts;
        shape[0] = t->shape[0] * (p + 1) / parts - off[0];
        env_shard(e, name, sessions[p], off, shape);
    }
}

static int env_param(ref_env_t *e, const char *name, int ndim,
                     const int64_t *shape, rs_dtype_t dtype)
{
    rs_diag_t diag;
    int64_t numel = 1;
    assert_int_equal(rs_capture_add_param(e->cap, name, ndim, shape, dtype, &diag),
                     RS_OK);
    for (int k = 0; k < ndim; k++)
        numel *= shape[k];
    e->param_bytes[e->nparams] = (uint64_t)numel * rs_dtype_size(dtype);
    e->params[e->nparams] = malloc(e->param_bytes[e->nparams] + 1);
    memset(e->params[e->nparams], 0xEE, e->param_bytes[e->nparams]);
    return e->nparams++;
}

static void env_copy(ref_env_t *e, const char *src, const char *param,
                     const rs_op_t *ops, size_t nops, int64_t dest_offset,
                     int ndim, const int64_t *shape, const int64_t *stride,
                     rs_dtype_t dtype)
{
    rs_copy_desc_t d = {.src = src, .param = param, .ops = ops, .nops = nops,
                        .dest_offset = dest_offset, .ndim = ndim,
                        .dest_shape = shape, .dest_stride = stride,
                        .dest_dtype = dtype};
    rs_diag_t diag;
    rs_status_t st = rs_capture_add_copy(e->cap, &d, &diag);
    if (st != RS_OK)
        fail_msg("add copy: %s", diag.msg);
}

static rs_plan_h env_plan(ref_env_t *e, const rs_plan_params_t *params)
{
    rs_plan_params_t defaults;
    rs_plan_h plan;
    rs_diag_t diag;
    if (params == NULL) {
        rs_plan_params_init(&defaults);
        params = &defaults;
    }
    rs_status_t st = rs_plan_build(e->cap, e->srcs, params, &diag, &plan);
    if (st != RS_OK)
        fail_msg("rs_plan_build: %s", diag.msg);
    return plan;
}

/* env_plan through the planner's steps, so that a test sees how many
 * copies were dropped while walked and walked again, or keeps every copy's
 * runs (keep_all) for the plan to compare with. */
static rs_plan_h env_plan_counted(ref_env_t *e, const rs_plan_params_t *params,
                                  int keep_all, size_t *ndropped,
                                  size_t *nrewalked)
{
    rs__planner_t b;
    rs_diag_t diag;
    rs_status_t st = rs__planner_init(&b, e->cap, e->srcs, params, &diag);
    b.keep_all = keep_all;
    if (st == RS_OK)
        st = rs__planner_run(&b);
    if (st != RS_OK) {
        rs__planner_free(&b);
        fail_msg("planner: %s", diag.msg);
    }
    *ndropped = b.ndropped;
    *nrewalked = b.nrewalked;
    rs_plan_h plan = rs__planner_take(&b);
    rs__planner_free(&b);
    return plan;
}

/* The plan as `reshard plan --json` writes it, compared byte for byte. */
static void expect_same_json(rs_plan_h a, rs_plan_h b)
{
    char *ja = NULL, *jb = NULL;
    size_t la = 0, lb = 0;
    rs_diag_t diag;
    FILE *fa = open_memstream(&ja, &la), *fb = open_memstream(&jb, &lb);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(rs_plan_write_json(a, fa, &diag), RS_OK);
    assert_int_equal(rs_plan_write_json(b, fb, &diag), RS_OK);
    fclose(fa);
    fclose(fb);
    assert_true(la > 0);
    assert_int_equal(la, lb);
    assert_memory_equal(ja, jb, la);
    free(ja);
    free(jb);
}

/* Runs the plan into the params and checks that no byte is written twice. */
static void env_exec(ref_env_t *e, rs_plan_h plan)
{
    mini_exec_t *mx = mini_exec_create(plan);
    char err[512];
    for (int p = 0; p < e->nparams; p++)
        mini_exec_set_param(mx, (size_t)p, e->params[p]);
    for (int i = 0; i < e->nbufs; i++)
        mini_exec_add_shard(mx, e->bufs[i].session, e->bufs[i].addr,
                            e->bufs[i].buf, e->bufs[i].nbytes);
    if (mini_exec_run(mx, err, sizeof(err)) != 0)
        fail_msg("executing the plan: %s", err);
    for (int p = 0; p < e->nparams; p++) {
        const uint8_t *w = mini_exec_param_writes(mx, (size_t)p);
        for (uint64_t b = 0; b < e->param_bytes[p]; b++) {
            if (w[b] > 1)
                fail_msg("param %d byte %llu written %u times", p,
                         (unsigned long long)b, w[b]);
        }
    }
    mini_exec_destroy(mx);
}

static float f32_at(const ref_env_t *e, int param, int64_t elem)
{
    float f;
    memcpy(&f, e->params[param] + 4 * elem, 4);
    return f;
}

/* Every byte of the param still holds the 0xEE fill. */
static void expect_untouched(const ref_env_t *e, int param)
{
    for (uint64_t b = 0; b < e->param_bytes[param]; b++)
        assert_int_equal(e->params[param][b], 0xEE);
}

static uint64_t segment_bytes(rs_plan_h plan)
{
    size_t n;
    uint64_t sum = 0;
    const rs_segment_t *s = rs_plan_segments(plan, &n);
    for (size_t i = 0; i < n; i++)
        sum += s[i].nbytes;
    return sum;
}

static const char *const two_ranks[] = {"rank-0", "rank-1"};

/* w[8,6] sharded by rows, read as w[:, 2:5]: one run per row. */
static void test_column_slice_of_row_shards(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {8, 6}, pshape[] = {8, 3}, pstride[] = {3, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_F32, 2, full, 1000);
    env_row_shards(&e, "w", 2, two_ranks);
    int p = env_param(&e, "w_tp", 2, pshape, RS_DTYPE_F32);
    rs_op_t ops[] = {{.kind = RS_OP_NARROW, .arg = {1, 2, 3}, .has = 7}};
    env_copy(&e, "w", "w_tp", ops, 1, 0, 2, pshape, pstride, RS_DTYPE_F32);
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.descriptor_ns = 0.01; /* descriptors nearly free: exact runs */
    rs_plan_h plan = env_plan(&e, &params);
    assert_true(rs_plan_is_complete(plan));
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(plan, &n);
    assert_int_equal(n, 8); /* rows are not adjacent in the shards */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(segs[i].nbytes, 12);
    env_exec(&e, plan);
    for (int r = 0; r < 8; r++) {
        for (int c = 0; c < 3; c++)
            assert_true(f32_at(&e, p, r * 3 + c) == (float)(1000 + r * 6 + 2 + c));
    }
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_int_equal(st.bytes_planned, 96);
    assert_int_equal(st.nsessions_used, 2);
    rs_plan_destroy(plan);

    /* At the default 100 ns a descriptor, the 12-byte gaps between the
     * rows cost less to read than the 4 descriptors they save per shard:
     * the source is pulled whole (one run per shard) and replayed. */
    plan = env_plan(&e, NULL);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(fp[0].kind, RS_STAGED_FULL);
    assert_int_equal(fp[0].nsegments, 2);
    rs_plan_stats(plan, &st);
    assert_int_equal(st.needed_bytes, 96);
    assert_int_equal(st.bytes_planned, 192);
    assert_true(st.est_seconds < st.exact_est_seconds);
    memset(e.params[p], 0, e.param_bytes[p]);
    env_exec(&e, plan);
    for (int r = 0; r < 8; r++) {
        for (int c = 0; c < 3; c++)
            assert_true(f32_at(&e, p, r * 3 + c) == (float)(1000 + r * 6 + 2 + c));
    }
    rs_plan_destroy(plan);
    env_free(&e);
}

/* w[4,6] lands as w.t() three ways: a t() op into a contiguous [6,4]; no op
 * into transposed destination strides; and x[2,3,4].permute(2,0,1). */
static void test_transposed_and_permuted(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t w[] = {4, 6}, x[] = {2, 3, 4}, s64[] = {6, 4}, c64[] = {4, 1};
    int64_t s46[] = {4, 6}, t46[] = {1, 4}, s423[] = {4, 2, 3}, c423[] = {6, 3, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_F32, 2, w, 0);
    env_tensor(&e, "x", RS_DTYPE_F32, 3, x, 500);
    env_row_shards(&e, "w", 2, two_ranks);
    env_row_shards(&e, "x", 2, two_ranks);
    int pa = env_param(&e, "wt_op", 2, s64, RS_DTYPE_F32);
    int pb = env_param(&e, "wt_dest", 2, s64, RS_DTYPE_F32);
    int pc = env_param(&e, "x_perm", 3, s423, RS_DTYPE_F32);
    rs_op_t t[] = {{.kind = RS_OP_T}};
    int64_t perm[] = {2, 0, 1};
    rs_op_t pm[] = {{.kind = RS_OP_PERMUTE, .list = perm, .nlist = 3}};
    env_copy(&e, "w", "wt_op", t, 1, 0, 2, s64, c64, RS_DTYPE_F32);
    env_copy(&e, "w", "wt_dest", NULL, 0, 0, 2, s46, t46, RS_DTYPE_F32);
    env_copy(&e, "x", "x_perm", pm, 1, 0, 3, s423, c423, RS_DTYPE_F32);
    rs_plan_h plan = env_plan(&e, NULL);
    assert_true(rs_plan_is_complete(plan));
    env_exec(&e, plan);
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < 4; j++) {
            assert_true(f32_at(&e, pa, i * 4 + j) == (float)(j * 6 + i));
            assert_true(f32_at(&e, pb, i * 4 + j) == (float)(j * 6 + i));
        }
    }
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 2; b++) {
            for (int c = 0; c < 3; c++)
                assert_true(f32_at(&e, pc, a * 6 + b * 3 + c)
                            == (float)(500 + b * 12 + c * 4 + a));
        }
    }
    rs_plan_destroy(plan);
    env_free(&e);
}

/* q[4,8], k[2,8], v[2,8] published back to back by one rank land at
 * dest_offsets 0, 32 and 48 of qkv[8,8]: one coalesced run across copies
 * (every byte of it inside a published shard). */
static void test_fused_qkv(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t q[] = {4, 8}, kv[] = {2, 8}, qkv[] = {8, 8}, st[] = {8, 1};
    int64_t zero[] = {0, 0};
    env_init(&e);
    env_tensor(&e, "q", RS_DTYPE_F32, 2, q, 0);
    env_tensor(&e, "k", RS_DTYPE_F32, 2, kv, 100);
    env_tensor(&e, "v", RS_DTYPE_F32, 2, kv, 200);
    e.cursor = 0x1000;
    env_shard(&e, "q", "rank-0", zero, q);
    e.cursor = 0x1000 + 128;
    env_shard(&e, "k", "rank-0", zero, kv);
    e.cursor = 0x1000 + 192;
    env_shard(&e, "v", "rank-0", zero, kv);
    int p = env_param(&e, "qkv", 2, qkv, RS_DTYPE_F32);
    env_copy(&e, "q", "qkv", NULL, 0, 0, 2, q, st, RS_DTYPE_F32);
    env_copy(&e, "k", "qkv", NULL, 0, 32, 2, kv, st, RS_DTYPE_F32);
    env_copy(&e, "v", "qkv", NULL, 0, 48, 2, kv, st, RS_DTYPE_F32);
    rs_plan_h plan = env_plan(&e, NULL);
    assert_true(rs_plan_is_complete(plan));
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(segs[0].src_addr, 0x1000);
    assert_int_equal(segs[0].dst_byte, 0);
    assert_int_equal(segs[0].nbytes, 256);
    env_exec(&e, plan);
    for (int i = 0; i < 32; i++)
        assert_true(f32_at(&e, p, i) == (float)i);
    for (int i = 0; i < 16; i++) {
        assert_true(f32_at(&e, p, 32 + i) == (float)(100 + i));
        assert_true(f32_at(&e, p, 48 + i) == (float)(200 + i));
    }
    rs_plan_destroy(plan);
    env_free(&e);
}

/* A bf16 source read into an f32 parameter goes through a convert. */
static void test_bf16_into_f32(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {4, 4}, pshape[] = {2, 4}, pstride[] = {4, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_BF16, 2, full, 7);
    env_row_shards(&e, "w", 2, two_ranks);
    int p = env_param(&e, "w_half", 2, pshape, RS_DTYPE_F32);
    rs_op_t ops[] = {{.kind = RS_OP_CHUNK, .arg = {2, 0, 1}, .has = 7}};
    env_copy(&e, "w", "w_half", ops, 1, 0, 2, pshape, pstride, RS_DTYPE_F32);
    rs_plan_h plan = env_plan(&e, NULL);
    assert_true(rs_plan_is_complete(plan));
    size_t n, nseg;
    const rs_convert_t *cv = rs_plan_converts(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(cv[0].copy, 0);
    assert_int_equal(cv[0].src_dtype, RS_DTYPE_BF16);
    assert_int_equal(cv[0].dest_dtype, RS_DTYPE_F32);
    assert_int_equal(cv[0].staging_bytes, 16);
    rs_plan_segments(plan, &nseg);
    assert_int_equal(nseg, 0);
    env_exec(&e, plan);
    for (int i = 0; i < 8; i++)
        assert_true(f32_at(&e, p, i) == (float)(7 + 8 + i));
    rs_plan_destroy(plan);
    env_free(&e);
}

/* The executor's casts, on values whose rounding is known. */
static void test_casts(void **state)
{
    (void)state;
    uint16_t h;
    float f;
    uint32_t w;
    h = 0x3FC0; /* bf16 1.5 */
    assert_true(mini_exec_cast(RS_DTYPE_BF16, &h, RS_DTYPE_F32, &f));
    assert_true(f == 1.5f);
    h = 0xC000; /* f16 -2.0 */
    assert_true(mini_exec_cast(RS_DTYPE_F16, &h, RS_DTYPE_F32, &f));
    assert_true(f == -2.0f);
    h = 0x0001; /* smallest f16 subnormal */
    assert_true(mini_exec_cast(RS_DTYPE_F16, &h, RS_DTYPE_F32, &f));
    assert_true(f == 1.0f / 16777216.0f);
    w = 0x3F808000; /* 1 + 2^-8: a tie, rounds to the even 1.0 */
    assert_true(mini_exec_cast(RS_DTYPE_F32, &w, RS_DTYPE_BF16, &h));
    assert_int_equal(h, 0x3F80);
    w = 0x3F818000; /* 1 + 3*2^-8: a tie, rounds to the even 1 + 2^-6 */
    assert_true(mini_exec_cast(RS_DTYPE_F32, &w, RS_DTYPE_BF16, &h));
    assert_int_equal(h, 0x3F82);
    w = 0x3F808001; /* just above the tie: rounds up */
    assert_true(mini_exec_cast(RS_DTYPE_F32, &w, RS_DTYPE_BF16, &h));
    assert_int_equal(h, 0x3F81);
    assert_false(mini_exec_cast(RS_DTYPE_I32, &w, RS_DTYPE_F32, &f));
}

/* u8 w[16,16] in two row shards, read as w[:, :8] (16 runs) with at most
 * 4 descriptors per copy: pulled whole (2 runs) and replayed locally. */
static void test_full_pull(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {16, 16}, pshape[] = {16, 8}, pstride[] = {8, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_U8, 2, full, 0);
    env_row_shards(&e, "w", 2, two_ranks);
    int p = env_param(&e, "w_left", 2, pshape, RS_DTYPE_U8);
    rs_op_t ops[] = {{.kind = RS_OP_NARROW, .arg = {1, 0, 8}, .has = 7}};
    env_copy(&e, "w", "w_left", ops, 1, 0, 2, pshape, pstride, RS_DTYPE_U8);
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.max_segments_per_copy = 4;
    rs_plan_h plan = env_plan(&e, &params);
    assert_true(rs_plan_is_complete(plan));
    size_t n, nseg;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    assert_int_equal(n, 1);
    assert_string_equal(fp[0].src, "w");
    assert_int_equal(fp[0].ncopies, 1);
    assert_int_equal(fp[0].copies[0], 0);
    assert_int_equal(fp[0].staging_bytes, 256);
    assert_int_equal(fp[0].nsegments, 2);
    rs_plan_segments(plan, &nseg);
    assert_int_equal(nseg, 0);
    assert_int_equal(rs_plan_num_unbounded(plan), 0);
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_int_equal(st.descriptor_count, 2);
    assert_int_equal(st.exact_descriptor_count, 16);
    assert_true(st.descriptor_savings > 0);
    assert_int_equal(st.bytes_planned, 256);
    assert_int_equal(st.exact_bytes, 128);
    assert_int_equal(st.extra_wire_bytes, 128);
    env_exec(&e, plan);
    for (int r = 0; r < 16; r++) {
        for (int c = 0; c < 8; c++)
            assert_int_equal(e.params[p][r * 8 + c], r * 16 + c);
    }
    rs_plan_destroy(plan);

    /* With descriptors nearly free and the default bound it stays exact. */
    rs_plan_params_init(&params);
    params.descriptor_ns = 0.01;
    plan = env_plan(&e, &params);
    rs_plan_staged_reads(plan, &n);
    rs_plan_segments(plan, &nseg);
    assert_int_equal(n, 0);
    assert_int_equal(nseg, 16);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* The right half of w's lower rows is never published: a descriptor-heavy
 * copy of the left half cannot be fully pulled and stays exact (listed as
 * unbounded); a copy needing the gap is uncovered. */
static void test_gap_prevents_full_pull(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {16, 16}, top[] = {8, 16}, low[] = {8, 8};
    int64_t o0[] = {0, 0}, o8[] = {8, 0};
    int64_t lshape[] = {16, 8}, lstride[] = {8, 1}, rshape[] = {16, 2};
    int64_t rstride[] = {2, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_U8, 2, full, 0);
    env_shard(&e, "w", "rank-0", o0, top);
    env_shard(&e, "w", "rank-1", o8, low);
    int pl = env_param(&e, "w_left", 2, lshape, RS_DTYPE_U8);
    rs_op_t left[] = {{.kind = RS_OP_NARROW, .arg = {1, 0, 8}, .has = 7}};
    env_copy(&e, "w", "w_left", left, 1, 0, 2, lshape, lstride, RS_DTYPE_U8);
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.max_segments_per_copy = 4;
    rs_plan_h plan = env_plan(&e, &params);
    size_t n, nseg;
    rs_plan_staged_reads(plan, &n);
    assert_int_equal(n, 0);
    rs_plan_segments(plan, &nseg);
    assert_int_equal(nseg, 9); /* 8 upper half-rows, one run of the lower box */
    assert_int_equal(rs_plan_num_unbounded(plan), 1);
    assert_string_equal(rs_plan_unbounded(plan, 0), "w");
    assert_true(rs_plan_is_complete(plan));
    env_exec(&e, plan);
    for (int r = 0; r < 16; r++) {
        for (int c = 0; c < 8; c++)
            assert_int_equal(e.params[pl][r * 8 + c], r * 16 + c);
    }
    rs_plan_destroy(plan);

    /* Columns 7..8 of every row: half of them lie in the gap. */
    int pr = env_param(&e, "w_mid", 2, rshape, RS_DTYPE_U8);
    rs_op_t mid[] = {{.kind = RS_OP_NARROW, .arg = {1, 7, 2}, .has = 7}};
    env_copy(&e, "w", "w_mid", mid, 1, 0, 2, rshape, rstride, RS_DTYPE_U8);
    memset(e.params[pl], 0xEE, e.param_bytes[pl]);
    plan = env_plan(&e, &params);
    assert_false(rs_plan_is_complete(plan));
    const rs_uncovered_t *u = rs_plan_uncovered(plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(u[0].copy, 1);
    assert_string_equal(u[0].src, "w");
    assert_string_equal(u[0].param, "w_mid");
    assert_int_equal(u[0].missing_elements, 8);
    assert_int_equal(rs_plan_num_fallback(plan), 0);
    env_exec(&e, plan);
    for (int r = 0; r < 16; r++) {
        assert_int_equal(e.params[pr][r * 2], r * 16 + 7);
        if (r < 8)
            assert_int_equal(e.params[pr][r * 2 + 1], r * 16 + 8);
        else
            assert_int_equal(e.params[pr][r * 2 + 1], 0xEE);
    }
    rs_plan_destroy(plan);
    env_free(&e);
}

/* A source flagged unsupported and an unknown source fall back; the third
 * source is still planned and byte-exact. */
static void test_unsupported_does_not_stop_others(void **state)
{
    (void)state;
    ref_env_t e;
    rs_diag_t diag;
    int64_t full[] = {4, 4}, st[] = {4, 1};
    env_init(&e);
    env_tensor(&e, "a", RS_DTYPE_F32, 2, full, 0);
    env_tensor(&e, "b", RS_DTYPE_F32, 2, full, 100);
    env_row_shards(&e, "a", 2, two_ranks);
    env_row_shards(&e, "b", 2, two_ranks);
    int pa = env_param(&e, "pa", 2, full, RS_DTYPE_F32);
    int pb = env_param(&e, "pb", 2, full, RS_DTYPE_F32);
    int pc = env_param(&e, "pc", 2, full, RS_DTYPE_F32);
    env_copy(&e, "a", "pa", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    env_copy(&e, "b", "pb", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    env_copy(&e, "nowhere", "pc", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    assert_int_equal(rs_capture_add_unsupported(e.cap, "b", "custom dequant", &diag),
                     RS_OK);
    rs_plan_h plan = env_plan(&e, NULL);
    assert_false(rs_plan_is_complete(plan));
    assert_int_equal(rs_plan_num_fallback(plan), 2);
    int seen_b = 0, seen_unknown = 0;
    for (size_t i = 0; i < 2; i++) {
        const char *src, *reason;
        rs_plan_fallback(plan, i, &src, &reason);
        assert_true(reason != NULL && reason[0] != '\0');
        seen_b |= strcmp(src, "b") == 0;
        seen_unknown |= strcmp(src, "nowhere") == 0;
    }
    assert_true(seen_b && seen_unknown);
    env_exec(&e, plan);
    for (int i = 0; i < 16; i++)
        assert_true(f32_at(&e, pa, i) == (float)i);
    expect_untouched(&e, pb);
    expect_untouched(&e, pc);
    rs_plan_stats_t s;
    rs_plan_stats(plan, &s);
    assert_int_equal(s.bytes_planned, 64);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* Eight row tiles of w[512,512], each published by three ranks: every byte
 * is read once, the reads spread over ranks, and the salt moves them. */
static void test_replicas_spread(void **state)
{
    (void)state;
    ref_env_t e;
    static const char *const ranks[] = {"rank-0", "rank-1", "rank-2"};
    /* tiles of 128 KiB: above the size below which reads stick to
     * sessions already in use */
    int64_t full[] = {512, 512}, tile[] = {64, 512}, st[] = {512, 1};
    uint64_t bytes[2][3];
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_F32, 2, full, 0);
    for (int t = 0; t < 8; t++) {
        int64_t off[] = {64 * t, 0};
        for (int r = 0; r < 3; r++)
            env_shard(&e, "w", ranks[r], off, tile);
    }
    int p = env_param(&e, "w", 2, full, RS_DTYPE_F32);
    env_copy(&e, "w", "w", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    for (int salt = 0; salt < 2; salt++) {
        rs_plan_params_t params;
        rs_plan_params_init(&params);
        params.replica_salt = (uint64_t)salt;
        rs_plan_h plan = env_plan(&e, &params);
        assert_true(rs_plan_is_complete(plan));
        assert_int_equal(segment_bytes(plan), 512 * 512 * 4);
        memset(e.params[p], 0xEE, e.param_bytes[p]);
        env_exec(&e, plan); /* fails on any byte written twice */
        for (int i = 0; i < 512 * 512; i++)
            assert_true(f32_at(&e, p, i) == (float)i);
        rs_plan_stats_t s;
        rs_plan_stats(plan, &s);
        assert_true(s.nsessions_used > 1);
        for (uint32_t k = 0; k < 3; k++) {
            uint32_t idx = UINT32_MAX;
            for (uint32_t j = 0; j < rs_plan_num_sessions(plan); j++) {
                if (strcmp(rs_plan_session_name(plan, j), ranks[k]) == 0)
                    idx = j;
            }
            assert_true(idx != UINT32_MAX);
            bytes[salt][k] = rs_plan_session_bytes(plan, idx);
        }
        rs_plan_destroy(plan);
    }
    assert_true(memcmp(bytes[0], bytes[1], sizeof(bytes[0])) != 0);
    env_free(&e);
}

/* A large cell held by three replicas is cut across them; a small tensor
 * replicated everywhere is read from a session already in use. */
static void test_replica_split_and_affinity(void **state)
{
    (void)state;
    ref_env_t e;
    static const char *const ranks[] = {"rank-0", "rank-1", "rank-2"};
    int64_t big[] = {2048, 2048}, bst[] = {2048, 1}, zero[] = {0, 0};
    int64_t small[] = {64}, sst[] = {1}, zero1[] = {0};
    env_init(&e);
    env_tensor(&e, "big", RS_DTYPE_F32, 2, big, 0);
    env_tensor(&e, "norm", RS_DTYPE_F32, 1, small, 0);
    for (int r = 0; r < 3; r++) {
        env_shard(&e, "big", ranks[r], zero, big);
        env_shard(&e, "norm", ranks[r], zero1, small);
    }
    env_shard(&e, "norm", "rank-3", zero1, small); /* idle otherwise */
    int pb = env_param(&e, "big", 2, big, RS_DTYPE_F32);
    int pn = env_param(&e, "norm", 1, small, RS_DTYPE_F32);
    env_copy(&e, "big", "big", NULL, 0, 0, 2, big, bst, RS_DTYPE_F32);
    env_copy(&e, "norm", "norm", NULL, 0, 0, 1, small, sst, RS_DTYPE_F32);
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.split_bytes = 8 << 20; /* the cell is 16 MiB */
    rs_plan_h plan = env_plan(&e, &params);
    assert_true(rs_plan_is_complete(plan));
    memset(e.params[pb], 0xEE, e.param_bytes[pb]);
    memset(e.params[pn], 0xEE, e.param_bytes[pn]);
    env_exec(&e, plan); /* fails on any byte written twice */
    for (int i = 0; i < 2048 * 2048; i += 4099)
        assert_true(f32_at(&e, pb, i) == (float)i);
    for (int i = 0; i < 64; i++)
        assert_true(f32_at(&e, pn, i) == (float)i);
    rs_plan_stats_t s;
    rs_plan_stats(plan, &s);
    /* 16 MiB spread over all three; the norm not read from idle rank-3 */
    assert_int_equal(s.nsessions_used, 3);
    rs_plan_stats_t whole;
    rs_plan_params_init(&params); /* default: 16 MiB is below the cut */
    rs_plan_h plan2 = env_plan(&e, &params);
    rs_plan_stats(plan2, &whole);
    assert_int_equal(whole.nsessions_used, 1);
    rs_plan_destroy(plan2);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++) {
        uint64_t b = rs_plan_session_bytes(plan, k);
        if (strcmp(rs_plan_session_name(plan, k), "rank-3") == 0) {
            assert_int_equal(b, 0);
            continue;
        }
        lo = b < lo ? b : lo;
        hi = b > hi ? b : hi;
    }
    assert_true(hi - lo <= 2048 * 4 + 64 * 4); /* one row apart, plus norm */
    rs_plan_destroy(plan);
    env_free(&e);
}

/* --only "*.0.*" plans only layer 0; the stats count only its bytes. */
static void test_only_selection(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {4, 4}, st[] = {4, 1};
    env_init(&e);
    env_tensor(&e, "l0.q", RS_DTYPE_F32, 2, full, 0);
    env_tensor(&e, "l0.k", RS_DTYPE_F32, 2, full, 100);
    env_tensor(&e, "l1.q", RS_DTYPE_F32, 2, full, 200);
    env_row_shards(&e, "l0.q", 2, two_ranks);
    env_row_shards(&e, "l0.k", 2, two_ranks);
    env_row_shards(&e, "l1.q", 2, two_ranks);
    int p0 = env_param(&e, "model.layers.0.q", 2, full, RS_DTYPE_F32);
    int p1 = env_param(&e, "model.layers.0.k", 2, full, RS_DTYPE_F32);
    int p2 = env_param(&e, "model.layers.1.q", 2, full, RS_DTYPE_F32);
    env_copy(&e, "l0.q", "model.layers.0.q", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    env_copy(&e, "l0.k", "model.layers.0.k", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    env_copy(&e, "l1.q", "model.layers.1.q", NULL, 0, 0, 2, full, st, RS_DTYPE_F32);
    static const char *const only[] = {"*.0.*"};
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.only = only;
    params.nonly = 1;
    rs_plan_h plan = env_plan(&e, &params);
    assert_true(rs_plan_is_complete(plan));
    size_t n;
    const rs_segment_t *segs = rs_plan_segments(plan, &n);
    for (size_t i = 0; i < n; i++)
        assert_true(segs[i].param == (uint32_t)p0 || segs[i].param == (uint32_t)p1);
    rs_plan_stats_t s;
    rs_plan_stats(plan, &s);
    assert_int_equal(s.bytes_planned, 2 * 64);
    assert_int_equal(s.descriptor_count, n);
    env_exec(&e, plan);
    for (int i = 0; i < 16; i++) {
        assert_true(f32_at(&e, p0, i) == (float)i);
        assert_true(f32_at(&e, p1, i) == (float)(100 + i));
    }
    expect_untouched(&e, p2);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* Copies over the descriptor bound are only counted while walked; when the
 * full pull is refused (here a gap in w) they are walked again and must
 * repeat the first walk's replica choices: the plan equals the one built
 * with a bound no copy reaches, segment for segment, down to the replica
 * the later copy of v picks by load. */
static void test_dropped_copy_walks_again(void **state)
{
    (void)state;
    ref_env_t e;
    static const char *const ranks[] = {"rank-0", "rank-1", "rank-2"};
    /* 128 KiB tiles: above the affinity size, so choices follow load */
    int64_t full[] = {512, 512}, tile[] = {64, 512}, half[] = {64, 256};
    int64_t vshape[] = {64, 512}, vst[] = {512, 1}, o0[] = {0, 0};
    int64_t lshape[] = {512, 256}, lst[] = {256, 1};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_F32, 2, full, 0);
    env_tensor(&e, "v", RS_DTYPE_F32, 2, vshape, 7);
    for (int t = 0; t < 8; t++) {
        int64_t off[] = {64 * t, 0};
        for (int r = 0; r < 3; r++) /* rows 448.. keep only cols 0..255 */
            env_shard(&e, "w", ranks[r], off, t == 7 ? half : tile);
    }
    for (int r = 0; r < 3; r++)
        env_shard(&e, "v", ranks[r], o0, vshape);
    int pl = env_param(&e, "w_left", 2, lshape, RS_DTYPE_F32);
    int pv = env_param(&e, "v", 2, vshape, RS_DTYPE_F32);
    rs_op_t left[] = {{.kind = RS_OP_NARROW, .arg = {1, 0, 256}, .has = 7}};
    env_copy(&e, "w", "w_left", left, 1, 0, 2, lshape, lst, RS_DTYPE_F32);
    env_copy(&e, "v", "v", NULL, 0, 0, 2, vshape, vst, RS_DTYPE_F32);
    rs_plan_params_t capped, open;
    rs_plan_params_init(&capped);
    rs_plan_params_init(&open);
    capped.max_segments_per_copy = 4;
    open.max_segments_per_copy = 100000;
    for (uint64_t salt = 0; salt < 3; salt++) {
        capped.replica_salt = open.replica_salt = salt;
        size_t ndrop, nrewalk, kdrop, krewalk;
        rs_plan_h a = env_plan_counted(&e, &capped, 0, &ndrop, &nrewalk);
        rs_plan_h kept = env_plan_counted(&e, &capped, 1, &kdrop, &krewalk);
        rs_plan_h b = env_plan(&e, &open);
        assert_int_equal(ndrop, 1); /* w_left: 449 runs; v: one */
        assert_int_equal(nrewalk, 1);
        assert_int_equal(kdrop, 0);
        assert_int_equal(krewalk, 0);
        expect_same_json(a, kept);
        rs_plan_destroy(kept);
        size_t na, nb, nfp;
        const rs_segment_t *sa = rs_plan_segments(a, &na);
        const rs_segment_t *sb = rs_plan_segments(b, &nb);
        rs_plan_staged_reads(a, &nfp);
        assert_int_equal(nfp, 0);
        assert_int_equal(rs_plan_num_unbounded(a), 1);
        assert_int_equal(rs_plan_num_unbounded(b), 0);
        assert_int_equal(na, nb);
        assert_int_equal(na, 448 + 1 + 1); /* a run per full-width row of w,
                                            * the half-width tile, v */
        assert_memory_equal(sa, sb, na * sizeof(rs_segment_t));
        rs_plan_stats_t st;
        rs_plan_stats(a, &st);
        assert_int_equal(st.exact_descriptor_count, na);
        assert_int_equal(st.exact_bytes, (512 * 256 + 64 * 512) * 4);
        memset(e.params[pl], 0xEE, e.param_bytes[pl]);
        memset(e.params[pv], 0xEE, e.param_bytes[pv]);
        env_exec(&e, a);
        for (int i = 0; i < 512 * 256; i++)
            assert_true(f32_at(&e, pl, i) == (float)(i / 256 * 512 + i % 256));
        for (int i = 0; i < 64 * 512; i++)
            assert_true(f32_at(&e, pv, i) == (float)(7 + i));
        rs_plan_destroy(a);
        rs_plan_destroy(b);
    }
    env_free(&e);
}

/* A source whose full pull is possible, read by three copies of 8 runs
 * each (one per row shard), over a cap of 4: all three are dropped while
 * walked. No box of one copy takes fewer runs, so only the full pull could
 * serve them; at 100 ns a descriptor it does (24 descriptors become 16) and
 * no copy walks again, while at 0.001 ns the model reads them exactly (768
 * bytes instead of 4 KiB) and all three walk again. Either way the plan is
 * the one built with every copy's runs kept, and executes byte for byte. */
static void test_model_reads_dropped_copies_exactly(void **state)
{
    (void)state;
    static const char *const ranks[] = {"rank-0", "rank-1", "rank-2",
                                        "rank-3"};
    static const double ns[] = {100, 0.001};
    ref_env_t e;
    int64_t full[] = {16, 64}, row[] = {1, 64}, box[] = {8, 8}, bst[] = {8, 1};
    int64_t at[3][2] = {{0, 0}, {8, 0}, {0, 8}};
    int p[3];
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_F32, 2, full, 0);
    for (int r = 0; r < 16; r++) {
        int64_t off[] = {r, 0};
        env_shard(&e, "w", ranks[r % 4], off, row);
    }
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof(name), "p%d", k);
        p[k] = env_param(&e, name, 2, box, RS_DTYPE_F32);
        rs_op_t ops[] = {{.kind = RS_OP_NARROW, .arg = {0, at[k][0], 8}, .has = 7},
                         {.kind = RS_OP_NARROW, .arg = {1, at[k][1], 8}, .has = 7}};
        env_copy(&e, "w", name, ops, 2, 0, 2, box, bst, RS_DTYPE_F32);
    }
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    params.max_segments_per_copy = 4;
    for (int i = 0; i < 2; i++) {
        params.descriptor_ns = ns[i];
        size_t ndrop, nrewalk, kdrop, krewalk, nseg, nfp;
        rs_plan_h a = env_plan_counted(&e, &params, 0, &ndrop, &nrewalk);
        rs_plan_h kept = env_plan_counted(&e, &params, 1, &kdrop, &krewalk);
        assert_int_equal(ndrop, 3);
        assert_int_equal(nrewalk, i == 0 ? 0 : 3);
        assert_int_equal(kdrop, 0);
        expect_same_json(a, kept);
        rs_plan_segments(a, &nseg);
        rs_plan_staged_reads(a, &nfp);
        assert_int_equal(nseg, i == 0 ? 0 : 24);
        assert_int_equal(nfp, i == 0 ? 1 : 0);
        assert_true(rs_plan_is_complete(a));
        for (int k = 0; k < 3; k++)
            memset(e.params[p[k]], 0xEE, e.param_bytes[p[k]]);
        env_exec(&e, a);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 64; j++)
                assert_true(f32_at(&e, p[k], j) ==
                            (float)((at[k][0] + j / 8) * 64 + at[k][1] + j % 8));
        rs_plan_destroy(a);
        rs_plan_destroy(kept);
    }
    env_free(&e);
}

/* Copies with one geometry are resolved once, and their destination's
 * shape and strides checked once; the bounds still depend on each copy's
 * offset: a second copy of w's rows that ends past its parameter is refused
 * with the reason the first check would give. */
static void test_same_geometry_bounds_per_copy(void **state)
{
    (void)state;
    ref_env_t e;
    int64_t full[] = {8, 4}, half[] = {4, 4}, st[] = {4, 1}, pshape[] = {6, 4};
    env_init(&e);
    env_tensor(&e, "w", RS_DTYPE_U8, 2, full, 0);
    env_row_shards(&e, "w", 2, two_ranks);
    env_param(&e, "p", 2, pshape, RS_DTYPE_U8);
    rs_op_t top[] = {{.kind = RS_OP_NARROW, .arg = {0, 0, 4}, .has = 7}};
    env_copy(&e, "w", "p", top, 1, 0, 2, half, st, RS_DTYPE_U8);
    env_copy(&e, "w", "p", top, 1, 12, 2, half, st, RS_DTYPE_U8); /* rows 3..6 */
    rs_plan_h plan = env_plan(&e, NULL);
    const char *src, *reason;
    assert_int_equal(rs_plan_num_fallback(plan), 1);
    rs_plan_fallback(plan, 0, &src, &reason);
    assert_string_equal(src, "w");
    assert_string_equal(reason, "copy 1 into 'p': destination region leaves "
                                "its parameter");
    rs_plan_destroy(plan);
    env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_column_slice_of_row_shards),
        cmocka_unit_test(test_transposed_and_permuted),
        cmocka_unit_test(test_fused_qkv),
        cmocka_unit_test(test_bf16_into_f32),
        cmocka_unit_test(test_casts),
        cmocka_unit_test(test_full_pull),
        cmocka_unit_test(test_gap_prevents_full_pull),
        cmocka_unit_test(test_dropped_copy_walks_again),
        cmocka_unit_test(test_model_reads_dropped_copies_exactly),
        cmocka_unit_test(test_same_geometry_bounds_per_copy),
        cmocka_unit_test(test_unsupported_does_not_stop_others),
        cmocka_unit_test(test_replica_split_and_affinity),
        cmocka_unit_test(test_replicas_spread),
        cmocka_unit_test(test_only_selection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
