/* The executor's own checks of a plan (src/exec/guard.c, replay_check.c),
 * fed bad plans directly: a real plan is built, then one entry is altered
 * in place (the plan's arrays are its own memory, handed out const) the
 * way a planner bug would produce it, and the executor must refuse it
 * before any byte reaches a parameter, naming the copy and the plan entry:
 * a staged box one element too small in one dim (the span of the staging
 * buffer still holds every read, so only a per-dim check sees it), an
 * exact segment outside its copy's bytes, two segments on the same bytes,
 * a destination leaving its parameter, a cast reading past its convert
 * staging. A declared overlap (two copies on
 * the same bytes) still runs, the later copy winning. A replay program
 * gone wrong after prepare is caught by the sampled replay check, and
 * nothing is installed. With the checks off the too-small box installs
 * wrong bytes: the check is what refuses it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_impl.h"
#include "reshard/reshard.h"

#define N 8     /* w is N x N, transposed into p */
#define VR 4    /* v is VR x N; its row 2 lands in q */
#define QN 20
#define ADDR 4096

typedef struct world {
    int32_t w[2][N * N / 2]; /* w's column halves, per session */
    int32_t v[2][VR * N / 2];
    int32_t p[N * N];
    int32_t q[QN];
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan;
    rs_transport_h t;
    int installs;
} world_t;

static const char *sess[2] = {"s0", "s1"};

static int32_t wval(int r, int c) { return 1000 + r * N + c; }
static int32_t vval(int r, int c) { return 5000 + r * N + c; }

/* Both sources split by columns between the two sessions: w's and v's
 * halves of session k lie back to back at ADDR. */
static void add_sources(world_t *wd)
{
    static int64_t wfull[2] = {N, N}, vfull[2] = {VR, N};
    static int64_t off[2][2] = {{0, 0}, {0, N / 2}};
    static int64_t wsh[2] = {N, N / 2}, vsh[2] = {VR, N / 2};
    assert_int_equal(rs_sources_create(&wd->srcs), RS_OK);
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < N; r++)
            for (int c = 0; c < N / 2; c++)
                wd->w[k][r * N / 2 + c] = wval(r, k * N / 2 + c);
        for (int r = 0; r < VR; r++)
            for (int c = 0; c < N / 2; c++)
                wd->v[k][r * N / 2 + c] = vval(r, k * N / 2 + c);
        rs_shard_desc_t a = {"w", RS_DTYPE_I32, 4, 2, wfull, sess[k], 0,
                             ADDR, off[k], wsh, NULL};
        rs_shard_desc_t b = {"v", RS_DTYPE_I32, 4, 2, vfull, sess[k], 0,
                             ADDR + sizeof(wd->w[k]), off[k], vsh, NULL};
        assert_int_equal(rs_sources_add_shard(wd->srcs, &a, NULL), RS_OK);
        assert_int_equal(rs_sources_add_shard(wd->srcs, &b, NULL), RS_OK);
    }
}

/* p = w transposed (a staged read: exact runs would be single elements);
 * q[4..12) = v's row 2 (two exact segments), and with `overlap` also
 * v's row 3 onto the same bytes, declared after it. */
static void build(world_t *wd, int overlap)
{
    static int64_t pshape[2] = {N, N}, qshape[1] = {QN};
    static int64_t ds[2] = {N, N}, dst[2] = {N, 1};
    static int64_t rs_[2] = {1, N}, rst[2] = {N, 1};
    static rs_op_t tr = {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}};
    static rs_op_t row2 = {.kind = RS_OP_NARROW, .arg = {0, 2, 1}};
    static rs_op_t row3 = {.kind = RS_OP_NARROW, .arg = {0, 3, 1}};
    rs_plan_params_t pp;
    rs_diag_t diag;
    memset(wd, 0, sizeof(*wd));
    add_sources(wd);
    assert_int_equal(rs_capture_create(&wd->cap), RS_OK);
    assert_int_equal(rs_capture_add_param(wd->cap, "p", 2, pshape,
                                          RS_DTYPE_I32, NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(wd->cap, "q", 1, qshape,
                                          RS_DTYPE_I32, NULL), RS_OK);
    rs_copy_desc_t c0 = {"w", "p", &tr, 1, 0, 2, ds, dst, RS_DTYPE_I32};
    rs_copy_desc_t c1 = {"v", "q", &row2, 1, 4, 2, rs_, rst, RS_DTYPE_I32};
    rs_copy_desc_t c2 = {"v", "q", &row3, 1, 4, 2, rs_, rst, RS_DTYPE_I32};
    assert_int_equal(rs_capture_add_copy(wd->cap, &c0, NULL), RS_OK);
    assert_int_equal(rs_capture_add_copy(wd->cap, &c1, NULL), RS_OK);
    if (overlap)
        assert_int_equal(rs_capture_add_copy(wd->cap, &c2, NULL), RS_OK);
    rs_plan_params_init(&pp);
    pp.descriptor_ns = 100000; /* descriptors dear: w is staged whole */
    assert_int_equal(rs_plan_build(wd->cap, wd->srcs, &pp, &diag, &wd->plan),
                     RS_OK);
    size_t nfp, nseg;
    rs_plan_staged_reads(wd->plan, &nfp);
    rs_plan_segments(wd->plan, &nseg);
    assert_int_equal(nfp, 1);
    assert_int_equal(nseg, overlap ? 4 : 2);
    assert_int_equal(rs_transport_create(NULL, &diag, &wd->t), RS_OK);
    for (uint32_t k = 0; k < rs_plan_num_sessions(wd->plan); k++) {
        int s = strcmp(rs_plan_session_name(wd->plan, k), "s1") == 0;
        rs_region_t reg[2] = {{ADDR, sizeof(wd->w[s]), wd->w[s]},
                              {ADDR + sizeof(wd->w[s]), sizeof(wd->v[s]),
                               wd->v[s]}};
        rs_peer_t peer = {sess[s], 0, reg, 2, NULL, 0};
        assert_int_equal(rs_transport_connect(wd->t, k, &peer, &diag), RS_OK);
    }
}

static void destroy(world_t *wd)
{
    rs_transport_destroy(wd->t);
    rs_plan_destroy(wd->plan);
    rs_capture_destroy(wd->cap);
    rs_sources_destroy(wd->srcs);
}

static rs_status_t on_install(void *ctx, rs_exec_h x)
{
    (void)x;
    ((world_t *)ctx)->installs++;
    return RS_OK;
}

static rs_exec_h exec_of(world_t *wd)
{
    rs_exec_params_t ep;
    rs_exec_h x;
    rs_diag_t diag;
    rs_exec_params_init(&ep);
    ep.install = on_install;
    ep.install_ctx = wd;
    assert_int_equal(rs_exec_create(wd->plan, wd->t, &ep, &diag, &x), RS_OK);
    memset(wd->p, 0xEE, sizeof(wd->p));
    memset(wd->q, 0xEE, sizeof(wd->q));
    assert_int_equal(rs_exec_bind(x, 0, wd->p, sizeof(wd->p), RS_MEM_HOST,
                                  &diag), RS_OK);
    assert_int_equal(rs_exec_bind(x, 1, wd->q, sizeof(wd->q), RS_MEM_HOST,
                                  &diag), RS_OK);
    return x;
}

/* Runs the plan; its status, the message in msg. */
static rs_status_t run(world_t *wd, char *msg)
{
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_exec_h x = exec_of(wd);
    rs_status_t st = rs_exec_run(x, &diag);
    snprintf(msg, RS_DIAG_MSG_MAX, "%s", diag.msg);
    rs_exec_destroy(x);
    return st;
}

static int p_right(const world_t *wd)
{
    for (int r = 0; r < N; r++)
        for (int c = 0; c < N; c++)
            if (wd->p[r * N + c] != wval(c, r))
                return 0;
    return 1;
}

/* q[4..12) holds v's row `row`; the rest of q is as bound (0xEE). */
static int q_is_row(const world_t *wd, int row)
{
    for (int i = 0; i < QN; i++) {
        int in = i >= 4 && i < 4 + N;
        if (wd->q[i] != (in ? vval(row, i - 4) : (int32_t)0xEEEEEEEE))
            return 0;
    }
    return 1;
}

static void assert_untouched(const world_t *wd)
{
    const unsigned char *p = (const unsigned char *)wd->p;
    const unsigned char *q = (const unsigned char *)wd->q;
    for (size_t i = 0; i < sizeof(wd->p); i++)
        assert_int_equal(p[i], 0xEE);
    for (size_t i = 0; i < sizeof(wd->q); i++)
        assert_int_equal(q[i], 0xEE);
    assert_int_equal(wd->installs, 0);
}

static void assert_has(const char *msg, const char *part)
{
    if (strstr(msg, part) == NULL)
        fail_msg("'%s' does not say '%s'", msg, part);
}

/* The plan, as altered, is refused at prepare: RS_ERR_INPUT, a message
 * holding every given part (NULL ends them), nothing written, nothing
 * installed. */
static void expect_refused(world_t *wd, const char *a, const char *b,
                           const char *c)
{
    char msg[RS_DIAG_MSG_MAX];
    const char *parts[3] = {a, b, c};
    assert_int_equal(run(wd, msg), RS_ERR_INPUT);
    for (int i = 0; i < 3 && parts[i] != NULL; i++)
        assert_has(msg, parts[i]);
    assert_untouched(wd);
}

static void test_plan_as_built_installs(void **state)
{
    (void)state;
    world_t wd;
    char msg[RS_DIAG_MSG_MAX];
    build(&wd, 0);
    assert_int_equal(run(&wd, msg), RS_OK);
    assert_true(p_right(&wd));
    assert_true(q_is_row(&wd, 2));
    assert_int_equal(wd.installs, 1);
    destroy(&wd);
}

/* The cost-model bug: the box one element short in dim 1. Its staging and
 * segments are as planned, so every read stays inside the buffer. */
static void test_staged_box_too_small(void **state)
{
    (void)state;
    world_t wd;
    char msg[RS_DIAG_MSG_MAX];
    size_t n;
    build(&wd, 0);
    int64_t *shape = (int64_t *)rs_plan_staged_reads(wd.plan, &n)[0].box_shape;
    shape[1]--;
    expect_refused(&wd, "copy 0 of 'w' into 'p'",
                   "staged read 0 (full pull of 'w')", "dim 1");
    /* without the checks the same plan installs wrong bytes */
    rs__exec_guard_on = 0;
    rs_status_t st = run(&wd, msg);
    rs__exec_guard_on = 1;
    assert_int_equal(st, RS_OK);
    assert_false(p_right(&wd));
    destroy(&wd);
}

static void test_segment_outside_its_copy(void **state)
{
    (void)state;
    world_t wd;
    size_t n;
    build(&wd, 0);
    rs_segment_t *s = (rs_segment_t *)rs_plan_segments(wd.plan, &n);
    s[1].dst_byte = 0; /* inside q, before the copy's bytes 16..47 */
    expect_refused(&wd, "exact segment 1 (16 bytes at byte 0 of 'q')",
                   "outside every copy's destination", NULL);
    destroy(&wd);
}

static void test_segment_written_twice(void **state)
{
    (void)state;
    world_t wd;
    size_t n;
    build(&wd, 0);
    rs_segment_t *s = (rs_segment_t *)rs_plan_segments(wd.plan, &n);
    s[1].dst_byte = s[0].dst_byte + 4;
    expect_refused(&wd, "exact segment 0", "exact segment 1",
                   "write the same 12 bytes");
    destroy(&wd);
}

/* Two declared copies on the same bytes: the loader's order, not a bug. */
static void test_declared_overlap_runs(void **state)
{
    (void)state;
    world_t wd;
    char msg[RS_DIAG_MSG_MAX];
    build(&wd, 1);
    assert_int_equal(run(&wd, msg), RS_OK);
    assert_true(p_right(&wd));
    assert_true(q_is_row(&wd, 3));
    destroy(&wd);
}

static void test_destination_leaves_param(void **state)
{
    (void)state;
    world_t wd;
    rs_copy_desc_t c;
    build(&wd, 0);
    rs_capture_copy(rs_plan_capture(wd.plan), 0, &c);
    ((int64_t *)c.dest_stride)[0] = N + 1; /* rows one element apart more */
    expect_refused(&wd, "copy 0 of 'w' writes elements 0..70 of param 'p'",
                   NULL, NULL);
    destroy(&wd);
}

/* A replay program that reads the wrong elements (w as it lies, not
 * transposed): every element sampled differs from its staged one. */
static void test_replay_checked(void **state)
{
    (void)state;
    world_t wd;
    rs_diag_t diag;
    build(&wd, 0);
    rs_exec_h x = exec_of(&wd);
    assert_int_equal(rs_exec_prepare(x, &diag), RS_OK);
    assert_int_equal(x->replays_len, 1);
    assert_true(x->replays[0].nsamples >= 2);
    int64_t s0 = x->replays[0].src_stride[0];
    x->replays[0].src_stride[0] = x->replays[0].src_stride[1];
    x->replays[0].src_stride[1] = s0;
    rs_diag_clear(&diag);
    assert_int_equal(rs_exec_run(x, &diag), RS_ERR_VERIFY);
    assert_has(diag.msg, "replay check: after the replay of copy 0 ('w' "
                         "into 'p')");
    assert_int_equal(wd.installs, 0);
    rs_exec_destroy(x);
    destroy(&wd);
}

/* A cast reading more than its convert staging holds (the copy's shape
 * grown after planning, inside its parameter): refused at prepare. */
static void test_cast_past_its_staging(void **state)
{
    (void)state;
    static int64_t full[1] = {8}, off[1] = {0}, pshape[1] = {16};
    static int64_t one[1] = {1};
    static uint16_t x[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0,
                            0x40e0, 0x4100}; /* bf16 1..8 */
    static float r[16];
    rs_shard_desc_t d = {"x", RS_DTYPE_BF16, 2, 1, full, "s0", 0, ADDR, off,
                         full, NULL};
    rs_copy_desc_t c = {"x", "r", NULL, 0, 0, 1, full, one, RS_DTYPE_F32};
    rs_sources_h srcs;
    rs_capture_h cap;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x_;
    rs_diag_t diag;
    size_t ncv;
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    assert_int_equal(rs_sources_add_shard(srcs, &d, &diag), RS_OK);
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    assert_int_equal(rs_capture_add_param(cap, "r", 1, pshape, RS_DTYPE_F32,
                                          &diag), RS_OK);
    assert_int_equal(rs_capture_add_copy(cap, &c, &diag), RS_OK);
    assert_int_equal(rs_plan_build(cap, srcs, NULL, &diag, &plan), RS_OK);
    rs_plan_converts(plan, &ncv);
    assert_int_equal(ncv, 1);
    rs_capture_copy(rs_plan_capture(plan), 0, &c);
    ((int64_t *)c.dest_shape)[0] = 9;
    assert_int_equal(rs_transport_create(NULL, &diag, &t), RS_OK);
    rs_region_t reg = {ADDR, sizeof(x), x};
    rs_peer_t peer = {"s0", 0, &reg, 1, NULL, 0};
    assert_int_equal(rs_transport_connect(t, 0, &peer, &diag), RS_OK);
    assert_int_equal(rs_exec_create(plan, t, NULL, &diag, &x_), RS_OK);
    memset(r, 0xEE, sizeof(r));
    assert_int_equal(rs_exec_bind(x_, 0, r, sizeof(r), RS_MEM_HOST, &diag),
                     RS_OK);
    rs_diag_clear(&diag);
    assert_int_equal(rs_exec_run(x_, &diag), RS_ERR_INPUT);
    assert_has(diag.msg, "plan check: the cast of copy 0 ('x' into 'r') "
                         "reads 18 bytes of its convert staging, which "
                         "holds 16");
    for (size_t i = 0; i < sizeof(r); i++)
        assert_int_equal(((unsigned char *)r)[i], 0xEE);
    rs_exec_destroy(x_);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_as_built_installs),
        cmocka_unit_test(test_staged_box_too_small),
        cmocka_unit_test(test_segment_outside_its_copy),
        cmocka_unit_test(test_segment_written_twice),
        cmocka_unit_test(test_declared_overlap_runs),
        cmocka_unit_test(test_destination_leaves_param),
        cmocka_unit_test(test_replay_checked),
        cmocka_unit_test(test_cast_past_its_staging),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
