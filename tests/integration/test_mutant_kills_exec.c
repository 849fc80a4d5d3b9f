/* Executor cases the mutation gate (tests/mutate) found untested, each run
 * through the public API over the local transport against bytes the test
 * wrote itself:
 * - digest verification of a shard of one-byte elements whose last byte
 *   is read on its own (a read that starts at a shard's last byte belongs
 *   to that shard);
 * - the executor's own bounds, which a correct plan never reaches, so
 *   they are driven directly (exec/exec_impl.h): a replay from staging that
 *   would read one element past its staged box, and a segment that would
 *   end past its parameter, are refused; one that ends exactly at the end
 *   is not. */
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

#define ROWS 4
#define COLS 4
#define PCOLS 8 /* the parameter is twice as wide: the copy covers half */
#define ADDR 4096

typedef struct world {
    float src[ROWS * COLS];
    float param[ROWS * PCOLS];
    rs_sources_h srcs;
    rs_capture_h cap;
} world_t;

/* "w" [ROWS, COLS] f32 published whole by session "t0"; the copy writes
 * it into the left half of "p" [ROWS, PCOLS]. */
static void world_init(world_t *w)
{
    static const int64_t full[2] = {ROWS, COLS}, off[2] = {0, 0};
    static const int64_t pshape[2] = {ROWS, PCOLS}, pstride[2] = {PCOLS, 1};
    for (int i = 0; i < ROWS * COLS; i++)
        w->src[i] = (float)i * 0.5f + 1.0f;
    assert_int_equal(rs_sources_create(&w->srcs), RS_OK);
    rs_shard_desc_t d = {"w", RS_DTYPE_F32, 4, 2, full, "t0", 0, ADDR, off,
                         full, NULL};
    assert_int_equal(rs_sources_add_shard(w->srcs, &d, NULL), RS_OK);
    assert_int_equal(rs_capture_create(&w->cap), RS_OK);
    assert_int_equal(rs_capture_add_param(w->cap, "p", 2, pshape,
                                          RS_DTYPE_F32, NULL), RS_OK);
    rs_copy_desc_t c = {"w", "p", NULL, 0, 0, 2, full, pstride, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(w->cap, &c, NULL), RS_OK);
}

static void world_free(world_t *w)
{
    rs_capture_destroy(w->cap);
    rs_sources_destroy(w->srcs);
}

/* Plans, connects "t0" to w->src, runs with `ep` into w->param (filled
 * with 0xEE first). Returns the run's status, its message in msg. */
typedef struct ready {
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
} ready_t;

/* Plans (max_segments_per_copy = cap_segs when > 0), connects "t0" to
 * w->src, creates the executor with `ep` and binds w->param (filled with
 * 0xEE). */
static ready_t ready(world_t *w, rs_exec_params_t ep, int64_t cap_segs)
{
    ready_t r;
    rs_diag_t diag;
    rs_plan_params_t pp;
    rs_transport_params_t tp;
    rs_plan_params_init(&pp);
    if (cap_segs > 0)
        pp.max_segments_per_copy = cap_segs;
    assert_int_equal(rs_plan_build(w->cap, w->srcs, &pp, &diag, &r.plan), RS_OK);
    rs_transport_params_init(&tp);
    assert_int_equal(rs_transport_create(&tp, &diag, &r.t), RS_OK);
    assert_int_equal(rs_plan_num_sessions(r.plan), 1);
    rs_region_t reg = {ADDR, sizeof(w->src), w->src};
    rs_peer_t peer = {"t0", 0, &reg, 1, NULL, 0};
    assert_int_equal(rs_transport_connect(r.t, 0, &peer, &diag), RS_OK);
    assert_int_equal(rs_exec_create(r.plan, r.t, &ep, &diag, &r.x), RS_OK);
    memset(w->param, 0xEE, sizeof(w->param));
    assert_int_equal(rs_exec_bind(r.x, 0, w->param, sizeof(w->param),
                                  RS_MEM_HOST, &diag), RS_OK);
    return r;
}

static void ready_free(ready_t *r)
{
    rs_exec_destroy(r->x);
    rs_transport_destroy(r->t);
    rs_plan_destroy(r->plan);
}

/* Runs with `ep`; the run's status, its message in msg. */
static rs_status_t run(world_t *w, rs_exec_params_t ep, int64_t cap_segs,
                       char *msg, size_t cap)
{
    rs_diag_t diag;
    ready_t r = ready(w, ep, cap_segs);
    rs_diag_clear(&diag);
    rs_status_t st = rs_exec_run(r.x, &diag);
    snprintf(msg, cap, "%s", diag.msg);
    ready_free(&r);
    return st;
}

static void expect_installed(const world_t *w)
{
    for (int r = 0; r < ROWS; r++) {
        assert_memory_equal(&w->param[r * PCOLS], &w->src[r * COLS],
                            COLS * sizeof(float));
        for (int c = COLS; c < PCOLS; c++) {
            uint32_t bits;
            memcpy(&bits, &w->param[r * PCOLS + c], 4);
            assert_int_equal(bits, 0xEEEEEEEEu);
        }
    }
}

static rs_status_t count_install(void *ctx, rs_exec_h x)
{
    (void)x;
    ++*(int *)ctx;
    return RS_OK;
}

/* "b" [8] f8e4m3, one shard of "t0" with its digest, read as elements
 * 0..6 into "lo" (f8e4m3, an exact run) and element 7 alone into "hi"
 * (f32: a convert, which is never staged, so neither is the exact run: the
 * last byte is a read of its own). The shard is read whole, so it is
 * verified; with its last byte flipped the run fails naming it and
 * installs nothing (the install callback is not called). */
static rs_status_t last_byte_run(int corrupt, uint64_t *verified_p,
                                 char *msg, size_t cap)
{
    static const int64_t full[1] = {8}, off[1] = {0}, one[1] = {1};
    static const int64_t seven[1] = {7};
    uint8_t src[8], lo[7];
    float hi[1];
    char dg[RS_DIGEST_STR_LEN + 1];
    rs_sources_h s;
    rs_capture_h c;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h x;
    rs_diag_t diag;
    for (int i = 0; i < 8; i++) /* finite e4m3 values, 0x38 is 1.0 */
        src[i] = (uint8_t)(0x30 + i);
    rs_digest_format(rs_digest(src, sizeof(src)), dg);
    if (corrupt)
        src[7] ^= 0x40;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    rs_shard_desc_t d = {"b", RS_DTYPE_F8E4M3, 1, 1, full, "t0", 0, ADDR,
                         off, full, dg};
    assert_int_equal(rs_sources_add_shard(s, &d, NULL), RS_OK);
    assert_int_equal(rs_capture_create(&c), RS_OK);
    assert_int_equal(rs_capture_add_param(c, "lo", 1, seven, RS_DTYPE_F8E4M3,
                                          NULL), RS_OK);
    assert_int_equal(rs_capture_add_param(c, "hi", 1, one, RS_DTYPE_F32,
                                          NULL), RS_OK);
    rs_op_t first = {.kind = RS_OP_NARROW, .arg = {0, 0, 7}};
    rs_op_t last = {.kind = RS_OP_NARROW, .arg = {0, 7, 1}};
    rs_copy_desc_t a = {"b", "lo", &first, 1, 0, 1, seven, one,
                        RS_DTYPE_F8E4M3};
    rs_copy_desc_t b = {"b", "hi", &last, 1, 0, 1, one, one, RS_DTYPE_F32};
    assert_int_equal(rs_capture_add_copy(c, &a, NULL), RS_OK);
    assert_int_equal(rs_capture_add_copy(c, &b, NULL), RS_OK);
    assert_int_equal(rs_plan_build(c, s, NULL, &diag, &plan), RS_OK);
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    assert_int_equal(rs_transport_create(&tp, &diag, &t), RS_OK);
    rs_region_t reg = {ADDR, sizeof(src), src};
    rs_peer_t peer = {"t0", 0, &reg, 1, NULL, 0};
    assert_int_equal(rs_transport_connect(t, 0, &peer, &diag), RS_OK);
    rs_exec_params_t ep;
    rs_exec_params_init(&ep);
    ep.verify_digests = 1;
    int installs = 0;
    ep.install = count_install;
    ep.install_ctx = &installs;
    assert_int_equal(rs_exec_create(plan, t, &ep, &diag, &x), RS_OK);
    memset(lo, 0xEE, sizeof(lo));
    memset(hi, 0xEE, sizeof(hi));
    assert_int_equal(rs_exec_bind(x, 0, lo, sizeof(lo), RS_MEM_HOST, &diag),
                     RS_OK);
    assert_int_equal(rs_exec_bind(x, 1, hi, sizeof(hi), RS_MEM_HOST, &diag),
                     RS_OK);
    rs_diag_clear(&diag);
    rs_status_t st = rs_exec_run(x, &diag);
    snprintf(msg, cap, "%s", diag.msg);
    rs_exec_stats_t stats;
    rs_exec_stats(x, &stats);
    *verified_p = stats.shards_verified;
    assert_int_equal(installs, st == RS_OK);
    if (st == RS_OK) {
        assert_memory_equal(lo, src, 7);
        assert_true(hi[0] == 0.9375f); /* 0x37: 2^(6 - 7) * (1 + 7/8) */
    }
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    rs_capture_destroy(c);
    rs_sources_destroy(s);
    return st;
}

static void test_last_byte_verified(void **state)
{
    (void)state;
    uint64_t verified = 0;
    char msg[RS_DIAG_MSG_MAX];
    assert_int_equal(last_byte_run(0, &verified, msg, sizeof(msg)), RS_OK);
    assert_int_equal(verified, 1);
    assert_int_equal(last_byte_run(1, &verified, msg, sizeof(msg)),
                     RS_ERR_VERIFY);
    assert_non_null(strstr(msg, "digest mismatch: tensor 'b'"));
}

/* One run per row would exceed a cap of one segment per copy, so the copy
 * is read through staging and replayed; the run installs it byte for
 * byte. The same staged read with one element less of staging is refused
 * when its replay program is built: the replay reads the box's last
 * element. */
static void test_replay_past_staging(void **state)
{
    (void)state;
    world_t w;
    rs_exec_params_t ep;
    rs_diag_t diag;
    char msg[RS_DIAG_MSG_MAX];
    world_init(&w);
    rs_exec_params_init(&ep);
    assert_int_equal(run(&w, ep, 1, msg, sizeof(msg)), RS_OK);
    expect_installed(&w);

    ready_t r = ready(&w, ep, 1);
    assert_int_equal(rs_exec_prepare(r.x, &diag), RS_OK);
    size_t n;
    const rs_staged_read_t *fp = rs_plan_staged_reads(r.plan, &n);
    assert_int_equal(n, 1);
    assert_int_equal(fp[0].ncopies, 1);
    assert_int_equal(fp[0].staging_bytes, sizeof(w.src));
    unsigned char staging[sizeof(w.src)];
    rs_staged_read_t short_box = fp[0];
    short_box.staging_bytes -= sizeof(float);
    rs_diag_clear(&diag);
    assert_int_equal(rs__exec_replay_program(r.x, &short_box, staging,
                                             fp[0].copies[0], &diag),
                     RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "outside its staged box"));
    ready_free(&r);
    world_free(&w);
}

/* rs__exec_add_reads on an executor holding only its read array: a
 * segment of a 64-byte target ending at byte 64 is taken, one ending at
 * 65 (starting inside, or past the end) is refused naming the target. */
static void test_segment_past_param(void **state)
{
    (void)state;
    struct rs_exec *x = calloc(1, sizeof(*x));
    rs_read_t reads[4];
    unsigned char target[64];
    rs_diag_t diag;
    assert_non_null(x);
    x->reads = reads;
    const rs_segment_t fits = {0, 0, ADDR, 48, 16};
    const rs_segment_t over[] = {{0, 0, ADDR, 49, 16}, {0, 0, ADDR, 65, 1},
                                 {0, 0, ADDR, 0, 65}};
    assert_int_equal(rs__exec_add_reads(x, &fits, 1, target, sizeof(target),
                                        "param 'p'", &diag), RS_OK);
    assert_int_equal(x->nreads, 1);
    assert_ptr_equal(reads[0].dst, target + 48);
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        rs_diag_clear(&diag);
        assert_int_equal(rs__exec_add_reads(x, &over[i], 1, target,
                                            sizeof(target), "param 'p'",
                                            &diag), RS_ERR_INPUT);
        assert_non_null(strstr(diag.msg, "leaves param 'p' (64 bytes)"));
        assert_int_equal(x->nreads, 1);
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_byte_verified),
        cmocka_unit_test(test_replay_past_staging),
        cmocka_unit_test(test_segment_past_param),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
