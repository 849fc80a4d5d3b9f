/* A quantized copy on the publisher path reads its scales from the table
 * its weight copy reads its FP8 values from: the scale tensor's shard
 * listed at the same index, on the same session, when it holds every
 * scale the copy needs. Otherwise the scales are walked as any copy is.
 * Covers the replica the pairing overrides (a session the affinity rule
 * would prefer), scale shards listed in another order, a paired shard
 * that lacks some scales, a weight copy cut across replicas, and a scale
 * copy over the descriptor cap walked a second time with the same
 * choice. Plans only: the bytes are checked end to end by
 * test_quant_refit's replicated publishers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "assert_status.h"
#include "plan/plan_impl.h"
#include "plan/plan_quant.h"
#include "plan/planner.h"
#include "reshard/reshard.h"

#define SPEC "fp8_block:128x128:f8e4m3"
#define NREP 4

static const int64_t full[2] = {1024, 512}, grid[2] = {8, 4};
static const char *const reps[NREP] = {"r0", "r1", "r2", "r3"};

static void shard(rs_sources_h s, const char *name, rs_dtype_t dt,
                  const int64_t *shape, const int64_t *off,
                  const int64_t *shp, const char *sess, uint64_t addr)
{
    rs_shard_desc_t d = {name, dt, rs_dtype_size(dt), 2, shape, sess, 0, addr,
                         off, shp, NULL};
    rs_diag_t diag;
    ASSERT_ST(rs_sources_add_shard(s, &d, &diag), RS_OK, diag);
}

/* How the scale tensor is published next to the FP8 values, which every
 * replica holds whole. */
enum { SCALES_SAME, SCALES_REORDERED, SCALES_CUT };

/* The FP8 values and scales of x [1024, 512] on four replicas (a table
 * each: its FP8 shard, then its scale shard); "y" [4] f32 on r1 only.
 * SCALES_REORDERED lists the scale shards r1, r0, r3, r2; SCALES_CUT
 * gives r0 and r2 only the first row of blocks. */
static rs_sources_h publish(int how)
{
    static const int64_t zero[2] = {0, 0}, ys[2] = {1, 4}, row0[2] = {1, 4};
    static const int order[2][NREP] = {{0, 1, 2, 3}, {1, 0, 3, 2}};
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    shard(s, "y", RS_DTYPE_F32, ys, zero, ys, "r1", 0x100);
    for (int k = 0; k < NREP; k++)
        shard(s, "x#" SPEC, RS_DTYPE_F8E4M3, full, zero, full, reps[k],
              0x10000);
    for (int k = 0; k < NREP; k++) {
        int r = order[how == SCALES_REORDERED][k];
        int cut = how == SCALES_CUT && r % 2 == 0;
        shard(s, "x#" SPEC "#scale", RS_DTYPE_F32, grid, zero,
              cut ? row0 : grid, reps[r], 0x40000);
    }
    return s;
}

/* A plain copy of y, then the quantized copy of x's rows [r0, r0 + nr)
 * and columns [c0, c0 + nc) into "w", its scales into "w_scale". */
static rs_capture_h capture(int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
    rs_capture_h cap;
    rs_diag_t d;
    int64_t ys[2] = {1, 4}, yst[2] = {4, 1}, ws[2] = {nr, nc}, wst[2] = {nc, 1};
    int64_t blk[2] = {128, 128};
    int64_t ss[2] = {(r0 + nr + 127) / 128 - r0 / 128,
                     (c0 + nc + 127) / 128 - c0 / 128};
    int64_t sst[2] = {ss[1], 1};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_add_param(cap, "y", 2, ys, RS_DTYPE_F32, &d), RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "w", 2, ws, RS_DTYPE_F8E4M3, &d), RS_OK,
              d);
    ASSERT_ST(rs_capture_add_param(cap, "w_scale", 2, ss, RS_DTYPE_F32, &d),
              RS_OK, d);
    rs_copy_desc_t y = {"y", "y", NULL, 0, 0, 2, ys, yst, RS_DTYPE_F32};
    ASSERT_ST(rs_capture_add_copy(cap, &y, &d), RS_OK, d);
    rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {0, r0, nr}, .has = 7},
                      {.kind = RS_OP_NARROW, .arg = {1, c0, nc}, .has = 7}};
    rs_copy_desc_t c = {"x", "w", ops, 2, 0, 2, ws, wst, RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk,
                         "w_scale", 0, 2, ss, sst};
    ASSERT_ST(rs_capture_declare_source(cap, "x", 2, full, RS_DTYPE_BF16, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
    return cap;
}


/* rs_plan_build through the planner's steps, so that the test sees how
 * many copies were dropped and walked again and how many were read from
 * a paired shard, or keeps every copy's runs (keep_all) for a plan to
 * compare with. */
static rs_plan_h plan_counted(rs_capture_h cap, rs_sources_h srcs,
                              const rs_plan_params_t *p, int keep_all,
                              size_t *ndropped, size_t *nrewalked,
                              size_t *npaired)
{
    rs__quant_expansion_t *qx = NULL;
    rs__planner_t b;
    rs_diag_t d;
    ASSERT_ST(rs__quant_expand(cap, srcs, p, &d, &qx), RS_OK, d);
    ASSERT_ST(rs__planner_init(&b, qx->work, srcs, p, &d), RS_OK, d);
    b.quant = qx;
    b.keep_all = keep_all;
    ASSERT_ST(rs__planner_run(&b), RS_OK, d);
    *ndropped = b.ndropped;
    *nrewalked = b.nrewalked;
    *npaired = 0;
    for (size_t i = 0; i < qx->work->copies_len; i++)
        *npaired += b.copies[i].pair != 0;
    rs_plan_h plan = rs__planner_take(&b);
    plan->owned_capture = qx->work;
    qx->work = NULL;
    rs__planner_free(&b);
    rs__quant_free(qx);
    return plan;
}

static rs_plan_h plan_salted(rs_capture_h cap, rs_sources_h srcs,
                             uint64_t salt)
{
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_diag_t d;
    rs_plan_params_init(&p);
    p.replica_salt = salt;
    ASSERT_ST(rs_plan_build(cap, srcs, &p, &d, &plan), RS_OK, d);
    return plan;
}

/* The session of param `param`'s first segment, asserting that all of
 * its segments share it. */
static const char *session_of(rs_plan_h plan, const char *param)
{
    size_t n;
    const rs_segment_t *sg = rs_plan_segments(plan, &n);
    long p = rs_capture_find_param(rs_plan_capture(plan), param);
    const char *at = NULL;
    assert_true(p >= 0);
    for (size_t i = 0; i < n; i++) {
        if (sg[i].param != (uint32_t)p)
            continue;
        const char *s = rs_plan_session_name(plan, sg[i].session);
        if (at != NULL && strcmp(at, s) != 0)
            fail_msg("%s read from %s and %s", param, at, s);
        at = s;
    }
    if (at == NULL)
        fail_msg("no segment of %s", param);
    return at;
}

/* Rows 128..256: the weight (64 KiB, chosen by load) lands off r1, where
 * y is read; the scales (16 bytes) would follow y's session by the
 * affinity rule, and follow the weight instead. Every salt. */
static void test_scales_follow_weight(void **state)
{
    (void)state;
    rs_sources_h srcs = publish(SCALES_SAME);
    rs_capture_h cap = capture(128, 128, 0, 512);
    for (uint64_t salt = 0; salt < NREP; salt++) {
        rs_plan_h plan = plan_salted(cap, srcs, salt);
        size_t n;
        assert_true(rs_plan_is_complete(plan));
        assert_int_equal(rs_plan_quantized(plan, &n)[0].path,
                         RS_QUANT_PATH_PUBLISHER);
        const char *ws = session_of(plan, "w");
        assert_string_not_equal(ws, "r1");
        assert_string_equal(session_of(plan, "w_scale"), ws);
        assert_string_equal(session_of(plan, "y"), "r1");
        rs_plan_destroy(plan);
    }
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

/* Scale shards listed in another order than the FP8 shards: the shard at
 * the weight's index is another session's, so the scales are walked as
 * any copy (to y's session, r1, the least loaded one in use); the same
 * when the weight's session lacks a row of the blocks (r0 and r2). */
static void test_unpaired_scales_walked(void **state)
{
    (void)state;
    for (int how = SCALES_REORDERED; how <= SCALES_CUT; how++) {
        rs_sources_h srcs = publish(how);
        rs_capture_h cap = capture(128, 128, 0, 512);
        int paired = 0, walked = 0;
        for (uint64_t salt = 0; salt < NREP; salt++) {
            rs_plan_h plan = plan_salted(cap, srcs, salt);
            assert_true(rs_plan_is_complete(plan));
            const char *ws = session_of(plan, "w");
            const char *ss = session_of(plan, "w_scale");
            int holds = how == SCALES_CUT && (ws[1] - '0') % 2 == 1;
            if (holds) {
                assert_string_equal(ss, ws);
                paired++;
            } else {
                assert_string_equal(ss, "r1");
                walked++;
            }
            rs_plan_destroy(plan);
        }
        /* SCALES_CUT: both ways, as the weight's session changes */
        assert_int_equal(paired + walked, NREP);
        assert_true(how == SCALES_CUT ? paired > 0 && walked > 0 : paired == 0);
        rs_capture_destroy(cap);
        rs_sources_destroy(srcs);
    }
}

/* A weight copy cut across the replicas (split_bytes below its 512 KiB,
 * a 128 KiB part each): the scales come from the first part's table. */
static void test_split_weight(void **state)
{
    (void)state;
    rs_sources_h srcs = publish(SCALES_SAME);
    rs_capture_h cap = capture(0, 1024, 0, 512);
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_diag_t d;
    rs_plan_params_init(&p);
    p.split_bytes = 4096;
    ASSERT_ST(rs_plan_build(cap, srcs, &p, &d, &plan), RS_OK, d);
    size_t n;
    const rs_segment_t *sg = rs_plan_segments(plan, &n);
    long w = rs_capture_find_param(rs_plan_capture(plan), "w");
    const char *first = NULL;
    int sessions[NREP] = {0};
    for (size_t i = 0; i < n; i++)
        if (sg[i].param == (uint32_t)w) {
            const char *s = rs_plan_session_name(plan, sg[i].session);
            if (first == NULL && sg[i].dst_byte == 0)
                first = s;
            sessions[s[1] - '0'] = 1;
        }
    assert_non_null(first);
    assert_int_equal(sessions[0] + sessions[1] + sessions[2] + sessions[3],
                     NREP);
    assert_string_equal(session_of(plan, "w_scale"), first);
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

/* The plan as `reshard plan --json` writes it. */
static char *plan_json(rs_plan_h plan, size_t *len)
{
    char *j = NULL;
    rs_diag_t d;
    FILE *f = open_memstream(&j, len);
    assert_non_null(f);
    ASSERT_ST(rs_plan_write_json(plan, f, &d), RS_OK, d);
    fclose(f);
    return j;
}

/* Each replica's table publishes rows 0..896 of the FP8 values and
 * their seven rows of scales only in the first three quarters of the
 * columns, then the last 128 rows and their row of scales whole: two
 * shards of each, at the same indices. A last table on r3 adds the
 * first row of scales whole, so that a box of the scales widened to the
 * shards it meets reaches columns no shard publishes for the rows
 * below. */
static rs_sources_h publish_halves(void)
{
    static const int64_t zero[2] = {0, 0}, qa[2] = {896, 384},
                         qo[2] = {896, 0}, qb[2] = {128, 512},
                         sa[2] = {7, 3}, so[2] = {7, 0}, sb[2] = {1, 4};
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    shard(s, "y", RS_DTYPE_F32, sb, zero, sb, "r1", 0x100);
    for (int k = 0; k < NREP; k++) {
        shard(s, "x#" SPEC, RS_DTYPE_F8E4M3, full, zero, qa, reps[k], 0x10000);
        shard(s, "x#" SPEC, RS_DTYPE_F8E4M3, full, qo, qb, reps[k], 0x80000);
    }
    for (int k = 0; k < NREP; k++) {
        shard(s, "x#" SPEC "#scale", RS_DTYPE_F32, grid, zero, sa, reps[k],
              0x40000);
        shard(s, "x#" SPEC "#scale", RS_DTYPE_F32, grid, so, sb, reps[k],
              0x48000);
    }
    shard(s, "x#" SPEC "#scale", RS_DTYPE_F32, grid, zero, sb, "r3", 0x4c000);
    return s;
}

/* Rows 0..896, columns 0..256: 896 runs of FP8 values and seven of
 * scales (one per row of blocks), over a cap of one run, both dropped
 * while walked. No box of the scales is published whole, so the model
 * reads them by their runs after all: the scale copy walks again, from
 * the shard it was paired with (the weight copy is staged). The plan
 * equals the one that kept every copy's runs, for every salt. */
static void test_dropped_scales_walk_again(void **state)
{
    (void)state;
    rs_sources_h srcs = publish_halves();
    rs_capture_h cap = capture(0, 896, 0, 256);
    rs_plan_params_t p;
    rs_plan_params_init(&p);
    p.max_segments_per_copy = 1;
    p.descriptor_ns = 0.001;
    for (uint64_t salt = 0; salt < NREP; salt++) {
        size_t ndrop, nrewalk, npair, kdrop, krewalk, kpair, la, lb;
        p.replica_salt = salt;
        rs_plan_h a = plan_counted(cap, srcs, &p, 0, &ndrop, &nrewalk, &npair);
        rs_plan_h kept = plan_counted(cap, srcs, &p, 1, &kdrop, &krewalk,
                                      &kpair);
        assert_int_equal(ndrop, 2);
        assert_int_equal(nrewalk, 1);
        assert_int_equal(npair, 1);
        assert_int_equal(kdrop, 0);
        assert_int_equal(kpair, 1);
        char *ja = plan_json(a, &la), *jb = plan_json(kept, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(ja, jb, la);
        size_t ns;
        const rs_staged_read_t *sr = rs_plan_staged_reads(a, &ns);
        assert_int_equal(ns, 1); /* the FP8 values' box */
        assert_string_equal(sr[0].src, "x#" SPEC);
        assert_true(rs_plan_is_complete(a));
        session_of(a, "w_scale"); /* one session */
        free(ja);
        free(jb);
        rs_plan_destroy(a);
        rs_plan_destroy(kept);
    }
    rs_capture_destroy(cap);
    rs_sources_destroy(srcs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scales_follow_weight),
        cmocka_unit_test(test_unpaired_scales_walked),
        cmocka_unit_test(test_split_weight),
        cmocka_unit_test(test_dropped_scales_walk_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
