/* The answers of the quantized-copy analysis that plans of one sources
 * share (plan/quant_memo.c): a plan that reuses an answer kept by an
 * earlier plan must be the plan built without it. Each test plans against
 * sources an earlier plan filled, and compares the plan's JSON and shard
 * list with those of the same capture planned against fresh sources built
 * alike (an empty memo, so every copy is analyzed): two ranks whose copies
 * share a view but not their copy index, param or offsets, the same copy
 * under other cost rates (which flip its path), a capture that declares
 * its source as another dtype, tables that changed between two pulls
 * (which flip the path the other way), and plans built on several threads
 * at once. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "assert_status.h"
#include "plan/quant_memo.h"
#include "reshard/reshard.h"

#define SPEC "fp8_block:4x8:f8e4m3"
#define THREADS 4

static const int64_t full[2] = {8, 16}, grid[2] = {2, 2};

/* Publishes rows [r0, r1) of tensor `name` (shape `shape`) from `sess`. */
static void shard(rs_sources_h s, const char *name, rs_dtype_t dt,
                  const int64_t *shape, int64_t r0, int64_t r1,
                  const char *sess, uint64_t addr)
{
    int64_t off[2] = {r0, 0}, shp[2] = {r1 - r0, shape[1]};
    rs_shard_desc_t d = {name, dt, rs_dtype_size(dt), 2, shape, sess, 0, addr,
                         off, shp, NULL};
    rs_diag_t diag;
    ASSERT_ST(rs_sources_add_shard(s, &d, &diag), RS_OK, diag);
}

/* The FP8 rows [4, 8) the first tables lack, from another session. */
static void add_fp8_rest(rs_sources_h s)
{
    shard(s, "x#" SPEC, RS_DTYPE_F8E4M3, full, 4, 8, "t3", 0x30000);
}

/* x [8, 16] in two row halves (t0, t1: several shards, so its copies'
 * answers are kept), its FP8 values rows [0, fp8_rows) and all its
 * scales from t2; `rest` adds the FP8 rows [4, 8) after them. */
static rs_sources_h tables(int64_t fp8_rows, int rest)
{
    rs_sources_h s;
    assert_int_equal(rs_sources_create(&s), RS_OK);
    shard(s, "x", RS_DTYPE_BF16, full, 0, 4, "t0", 0x10000);
    shard(s, "x", RS_DTYPE_BF16, full, 4, 8, "t1", 0x10000);
    shard(s, "x#" SPEC, RS_DTYPE_F8E4M3, full, 0, fp8_rows, "t2", 0x20000);
    shard(s, "x#" SPEC "#scale", RS_DTYPE_F32, grid, 0, 2, "t2", 0x40000);
    if (rest)
        add_fp8_rest(s);
    return s;
}

/* Rank 0 quantizes rows 4..8 of x into "w" [4, 16] and its scales into
 * "w_scale" [2]. Rank 1 the same view, as its second copy (a plain copy
 * of x comes first), into "w" [8, 16] at offset 64 and "w_scale" [4] at
 * offset 2. Rank 2 is rank 0 declaring x as float32. */
static rs_capture_h rank(int r)
{
    rs_capture_h cap;
    rs_diag_t d;
    int64_t ws[2] = {r == 1 ? 8 : 4, 16}, ss[1] = {r == 1 ? 4 : 2};
    int64_t region[2] = {4, 16}, st[2] = {16, 1}, blk[2] = {4, 8},
            sshape[1] = {2}, sst[1] = {1};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    if (r == 1) {
        ASSERT_ST(rs_capture_add_param(cap, "b", 2, full, RS_DTYPE_BF16, &d),
                  RS_OK, d);
        rs_copy_desc_t plain = {"x", "b", NULL, 0, 0, 2, full, st,
                                RS_DTYPE_BF16};
        ASSERT_ST(rs_capture_add_copy(cap, &plain, &d), RS_OK, d);
    }
    if (r == 2)
        ASSERT_ST(rs_capture_declare_source(cap, "x", 2, full, RS_DTYPE_F32,
                                            &d), RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "w", 2, ws, RS_DTYPE_F8E4M3, &d),
              RS_OK, d);
    ASSERT_ST(rs_capture_add_param(cap, "w_scale", 1, ss, RS_DTYPE_F32, &d),
              RS_OK, d);
    rs_op_t op = {.kind = RS_OP_NARROW, .arg = {0, 4, 4}, .has = 7};
    rs_copy_desc_t c = {"x", "w", &op, 1, r == 1 ? 64 : 0, 2, region, st,
                        RS_DTYPE_F8E4M3};
    rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, blk,
                         "w_scale", r == 1 ? 2 : 0, 1, sshape, sst};
    ASSERT_ST(rs_capture_add_quant_copy(cap, &c, &q, &d), RS_OK, d);
    return cap;
}

/* The plan's JSON and shard list as one text (malloc'd), and its one
 * quantized copy's path. */
static char *plan_text(rs_capture_h cap, rs_sources_h s, double desc_ns,
                       rs_quant_path_t *path_p)
{
    rs_plan_params_t p;
    rs_plan_h plan;
    rs_diag_t d;
    char *buf = NULL;
    size_t len = 0, n;
    rs_plan_params_init(&p);
    if (desc_ns > 0)
        p.descriptor_ns = desc_ns;
    ASSERT_ST(rs_plan_build(cap, s, &p, &d, &plan), RS_OK, d);
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    ASSERT_ST(rs_plan_write_json(plan, out, &d), RS_OK, d);
    const rs_shard_ref_t *sh = rs_plan_shards(plan, &n);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%u %llu %llu %s\n", sh[i].session,
                (unsigned long long)sh[i].addr,
                (unsigned long long)sh[i].nbytes, sh[i].tensor);
    fclose(out);
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(n, 1);
    if (path_p != NULL)
        *path_p = q[0].path;
    rs_plan_destroy(plan);
    return buf;
}

/* The capture planned against fresh sources built as `tables` builds
 * them: the plan without any kept answer. */
static char *fresh_text(rs_capture_h cap, int64_t fp8_rows, int rest,
                        double desc_ns)
{
    rs_sources_h s = tables(fp8_rows, rest);
    char *t = plan_text(cap, s, desc_ns, NULL);
    assert_int_equal(rs__quant_memo_size(s), 1); /* it kept its own */
    rs_sources_destroy(s);
    return t;
}

static void assert_same(char *got, char *want)
{
    assert_string_equal(got, want);
    free(got);
    free(want);
}

/* Rank 1 takes the answer rank 0 kept (the memo holds one answer after
 * both), and each plan is its plan without it. */
static void test_shared_view(void **state)
{
    (void)state;
    rs_sources_h s = tables(8, 0);
    rs_capture_h r0 = rank(0), r1 = rank(1);
    rs_quant_path_t path;
    char *t0 = plan_text(r0, s, 0, &path);
    assert_int_equal(path, RS_QUANT_PATH_PUBLISHER);
    assert_int_equal(rs__quant_memo_size(s), 1);
    char *t1 = plan_text(r1, s, 0, &path);
    assert_int_equal(path, RS_QUANT_PATH_PUBLISHER);
    assert_int_equal(rs__quant_memo_size(s), 1); /* reused, not kept again */
    assert_same(t1, fresh_text(r1, 8, 0, 0));
    assert_same(t0, fresh_text(r0, 8, 0, 0));
    /* and rank 0 again, now from the memo */
    assert_same(plan_text(r0, s, 0, NULL), fresh_text(r0, 8, 0, 0));
    rs_capture_destroy(r0);
    rs_capture_destroy(r1);
    rs_sources_destroy(s);
}

/* Under a descriptor cost of 5 us the publisher path's two reads cost
 * more than reading and quantizing the bf16 box: the same copy takes the
 * receiver path, not the answer kept under the default rates. */
static void test_other_rates(void **state)
{
    (void)state;
    rs_sources_h s = tables(8, 0);
    rs_capture_h r0 = rank(0);
    rs_quant_path_t path;
    free(plan_text(r0, s, 0, &path));
    assert_int_equal(path, RS_QUANT_PATH_PUBLISHER);
    char *t = plan_text(r0, s, 5000, &path);
    assert_int_equal(path, RS_QUANT_PATH_RECEIVER);
    assert_int_equal(rs__quant_memo_size(s), 2);
    assert_same(t, fresh_text(r0, 8, 0, 5000));
    rs_capture_destroy(r0);
    rs_sources_destroy(s);
}

/* A capture that declares x as float32 sees another source dtype (its
 * receiver path would read twice the bytes): its own answer, as planned
 * without the memo. */
static void test_declared_dtype(void **state)
{
    (void)state;
    rs_sources_h s = tables(8, 0);
    rs_capture_h r0 = rank(0), r2 = rank(2);
    free(plan_text(r0, s, 0, NULL));
    char *t = plan_text(r2, s, 0, NULL);
    assert_int_equal(rs__quant_memo_size(s), 2);
    assert_same(t, fresh_text(r2, 8, 0, 0));
    rs_capture_destroy(r0);
    rs_capture_destroy(r2);
    rs_sources_destroy(s);
}

/* A pull plans against tables whose FP8 values miss rows 4..8: the copy
 * takes the receiver path. The next pull's tables add those rows: the
 * answer kept is stale, and the copy is served, as planned against fresh
 * tables. */
static void test_tables_changed(void **state)
{
    (void)state;
    rs_sources_h s = tables(4, 0);
    rs_capture_h r0 = rank(0);
    rs_quant_path_t path;
    char *before = plan_text(r0, s, 0, &path);
    assert_int_equal(path, RS_QUANT_PATH_RECEIVER);
    assert_int_equal(rs__quant_memo_size(s), 1);
    assert_same(before, fresh_text(r0, 4, 0, 0));
    add_fp8_rest(s);
    assert_int_equal(rs__quant_memo_size(s), 0); /* dropped */
    char *after = plan_text(r0, s, 0, &path);
    assert_int_equal(path, RS_QUANT_PATH_PUBLISHER);
    assert_same(after, fresh_text(r0, 4, 1, 0));
    rs_capture_destroy(r0);
    rs_sources_destroy(s);
}

typedef struct job {
    rs_capture_h cap;
    rs_sources_h srcs;
    char *text;
} job_t;

static void *plan_job(void *arg)
{
    job_t *j = arg;
    j->text = plan_text(j->cap, j->srcs, 0, NULL);
    return NULL;
}

/* Ranks 0 and 1 planned on several threads at once against one sources
 * (an empty memo: the threads keep and take answers together). */
static void test_threads(void **state)
{
    (void)state;
    rs_sources_h s = tables(8, 0);
    rs_capture_h caps[2] = {rank(0), rank(1)};
    char *want[2] = {fresh_text(caps[0], 8, 0, 0),
                     fresh_text(caps[1], 8, 0, 0)};
    pthread_t th[THREADS];
    job_t jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (job_t){caps[i % 2], s, NULL};
        assert_int_equal(pthread_create(&th[i], NULL, plan_job, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_string_equal(jobs[i].text, want[i % 2]);
        free(jobs[i].text);
    }
    assert_int_equal(rs__quant_memo_size(s), 1);
    free(want[0]);
    free(want[1]);
    rs_capture_destroy(caps[0]);
    rs_capture_destroy(caps[1]);
    rs_sources_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_view),
        cmocka_unit_test(test_other_rates),
        cmocka_unit_test(test_declared_dtype),
        cmocka_unit_test(test_tables_changed),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
