/* The cost model's four ways of reading a copy, each taken in a case built
 * so that it is the cheapest: exact runs (descriptors nearly free), a
 * coalesced box (gaps cheaper than descriptors, up to the one that is
 * not), the bound box of a source's copies (each copy alone is cheaper
 * exactly, together one run serves both without a byte to spare) and the
 * full pull (descriptors dear). Every plan is executed by mini_exec and
 * compared with a naive loop over the source; the cost model's parameters
 * are validated; the segment cap still forces a staged read. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mini_exec.h"
#include "reshard/reshard.h"

#define ROWS 64
#define MAX_ELEMS (ROWS * 4 * 16)

/* A bf16 source of shape [ROWS, A, B] (A = 1 for 2-D) in two row shards:
 * rank-0 holds rows 0..31, rank-1 rows 32..63; element i holds i. */
typedef struct env {
    int ndim;
    int64_t shape[3];
    uint16_t shard[2][MAX_ELEMS / 2];
    rs_sources_h srcs;
    rs_capture_h cap;
    uint16_t param[4][MAX_ELEMS];
    int64_t pnumel[4];
    int nparams;
    int has_v; /* a second source "v": w's layout and contents at v_addr */
} env_t;

static const uint64_t shard_addr[2] = {0x100000, 0x200000};
static const uint64_t v_addr[2] = {0x140000, 0x240000};

static void env_init(env_t *e, int ndim, const int64_t *shape)
{
    rs_diag_t d;
    memset(e, 0, sizeof(*e));
    e->ndim = ndim;
    int64_t per_row = 1, off[3] = {0, 0, 0}, sshape[3];
    for (int k = 0; k < ndim; k++) {
        e->shape[k] = shape[k];
        sshape[k] = shape[k];
        per_row *= k ? shape[k] : 1;
    }
    sshape[0] = ROWS / 2;
    assert_int_equal(rs_sources_create(&e->srcs), RS_OK);
    assert_int_equal(rs_capture_create(&e->cap), RS_OK);
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < ROWS / 2 * per_row; i++)
            e->shard[s][i] = (uint16_t)(s * ROWS / 2 * per_row + i);
        off[0] = s * ROWS / 2;
        rs_shard_desc_t sd = {"w", RS_DTYPE_BF16, 2, ndim, e->shape,
                              s ? "rank-1" : "rank-0", s, shard_addr[s], off,
                              sshape, NULL};
        assert_int_equal(rs_sources_add_shard(e->srcs, &sd, &d), RS_OK);
        sd.tensor = "v";
        sd.addr = v_addr[s];
        assert_int_equal(rs_sources_add_shard(e->srcs, &sd, &d), RS_OK);
    }
}

/* A copy of w narrowed to [lo[k], lo[k] + len[k]) per dim into a new
 * row-major param. */
static void env_copy_of(env_t *e, const char *src, const int64_t *lo,
                        const int64_t *len)
{
    rs_diag_t d;
    rs_op_t ops[3];
    int64_t stride[3], numel = 1;
    char name[16];
    memset(ops, 0, sizeof(ops));
    for (int k = e->ndim - 1; k >= 0; k--) {
        stride[k] = numel;
        numel *= len[k];
        ops[k] = (rs_op_t){.kind = RS_OP_NARROW, .arg = {k, lo[k], len[k]},
                           .has = 7};
    }
    snprintf(name, sizeof(name), "p%d", e->nparams);
    assert_int_equal(rs_capture_add_param(e->cap, name, e->ndim, len,
                                          RS_DTYPE_BF16, &d), RS_OK);
    rs_copy_desc_t c = {src, name, ops, (size_t)e->ndim, 0, e->ndim, len,
                        stride, RS_DTYPE_BF16};
    assert_int_equal(rs_capture_add_copy(e->cap, &c, &d), RS_OK);
    e->pnumel[e->nparams++] = numel;
}

static void env_copy(env_t *e, const int64_t *lo, const int64_t *len)
{
    env_copy_of(e, "w", lo, len);
}

static rs_plan_h env_plan(env_t *e, double nic_gbps, double descriptor_ns,
                          int64_t max_segments)
{
    rs_plan_params_t p;
    rs_diag_t d;
    rs_plan_h plan = NULL;
    rs_plan_params_init(&p);
    p.nic_gbps = nic_gbps;
    p.descriptor_ns = descriptor_ns;
    if (max_segments > 0)
        p.max_segments_per_copy = max_segments;
    rs_status_t st = rs_plan_build(e->cap, e->srcs, &p, &d, &plan);
    if (st != RS_OK)
        fail_msg("rs_plan_build: %s", d.msg);
    assert_true(rs_plan_is_complete(plan));
    return plan;
}

/* Runs the plan and checks each param against a naive loop: param k,
 * element (i, j, l) of copy k holds source element lo + (i, j, l). */
static void env_check(env_t *e, rs_plan_h plan, const int64_t (*lo)[3],
                      const int64_t (*len)[3])
{
    mini_exec_t *mx = mini_exec_create(plan);
    char err[256];
    for (int s = 0; s < 2; s++)
    {
        mini_exec_add_shard(mx, s ? "rank-1" : "rank-0", shard_addr[s],
                            e->shard[s], sizeof(e->shard[s]));
        mini_exec_add_shard(mx, s ? "rank-1" : "rank-0", v_addr[s],
                            e->shard[s], sizeof(e->shard[s]));
    }
    for (int p = 0; p < e->nparams; p++) {
        memset(e->param[p], 0xEE, sizeof(e->param[p]));
        mini_exec_set_param(mx, (size_t)p, e->param[p]);
    }
    if (mini_exec_run(mx, err, sizeof(err)) != 0)
        fail_msg("executing: %s", err);
    int64_t a = e->ndim == 3 ? e->shape[1] : 1, b = e->shape[e->ndim - 1];
    for (int p = 0; p < e->nparams; p++) {
        int64_t n1 = e->ndim == 3 ? len[p][1] : 1, n2 = len[p][e->ndim - 1];
        int64_t l1 = e->ndim == 3 ? lo[p][1] : 0, l2 = lo[p][e->ndim - 1];
        int64_t at = 0;
        for (int64_t i = 0; i < len[p][0]; i++)
            for (int64_t j = 0; j < n1; j++)
                for (int64_t k = 0; k < n2; k++, at++) {
                    int64_t g = ((lo[p][0] + i) * a + l1 + j) * b + l2 + k;
                    assert_int_equal(e->param[p][at], (uint16_t)g);
                }
        const uint8_t *w = mini_exec_param_writes(mx, (size_t)p);
        for (int64_t x = 0; x < e->pnumel[p] * 2; x++)
            assert_int_equal(w[x], 1);
    }
    mini_exec_destroy(mx);
}

static void env_free(env_t *e)
{
    rs_sources_destroy(e->srcs);
    rs_capture_destroy(e->cap);
}

static rs_plan_stats_t stats_of(rs_plan_h plan)
{
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    return st;
}

/* w[64, 64] and the row-parallel half w[:, :32], planned at 400 Gb/s with
 * descriptors of descriptor_ns and a cap of max_segments runs (0: none):
 * the plan, its runs and its staged reads. */
static const int64_t half_lo[1][3] = {{0, 0}}, half_len[1][3] = {{ROWS, 32}};

static rs_plan_h half_plan(env_t *e, double descriptor_ns,
                           int64_t max_segments, size_t *nseg_p,
                           size_t *nfp_p)
{
    const int64_t shape[] = {ROWS, 64};
    env_init(e, 2, shape);
    env_copy(e, half_lo[0], half_len[0]);
    rs_plan_h plan = env_plan(e, 400, descriptor_ns, max_segments);
    rs_plan_segments(plan, nseg_p);
    rs_plan_staged_reads(plan, nfp_p);
    return plan;
}

/* Runs a half_plan, checks what it wrote and frees it. */
static void half_check(env_t *e, rs_plan_h plan)
{
    env_check(e, plan, half_lo, half_len);
    rs_plan_destroy(plan);
    env_free(e);
}

/* w[64, 64], the row-parallel half w[:, :32]: 64 runs of 64 bytes. With a
 * descriptor nearly free the exact runs are cheapest (the full pull reads
 * twice the bytes). */
static void test_exact_when_descriptors_are_cheap(void **state)
{
    (void)state;
    env_t e;
    size_t n, nfp;
    rs_plan_h plan = half_plan(&e, 0.001, 0, &n, &nfp);
    assert_int_equal(nfp, 0);
    assert_int_equal(n, 64);
    rs_plan_stats_t st = stats_of(plan);
    assert_int_equal(st.bytes_planned, st.needed_bytes);
    assert_int_equal(st.needed_bytes, ROWS * 32 * 2);
    assert_true(st.est_seconds == st.exact_est_seconds);
    /* 32 runs of 64 B on each session, all of them through the receiver:
     * 4096 B / 50 B/ns + 64 * 0.001 ns */
    assert_true(fabs(st.est_seconds - (4096.0 / 50e9 + 64 * 1e-12)) < 1e-15);
    half_check(&e, plan);
}

/* The same copy with a dear descriptor: every gap is cheap, the copy's box
 * widens to whole rows of every row, the whole source: a full pull, one
 * run per shard. */
static void test_full_when_descriptors_are_dear(void **state)
{
    (void)state;
    env_t e;
    size_t n, nfp;
    rs_plan_h plan = half_plan(&e, 1e5, 0, &n, &nfp);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nfp);
    assert_int_equal(n, 0);
    assert_int_equal(nfp, 1);
    assert_int_equal(fp[0].kind, RS_STAGED_FULL);
    assert_int_equal(fp[0].nsegments, 2);
    assert_int_equal(fp[0].staging_bytes, ROWS * 64 * 2);
    assert_int_equal(fp[0].box_lo[0], 0);
    assert_int_equal(fp[0].box_shape[1], 64);
    rs_plan_stats_t st = stats_of(plan);
    assert_int_equal(st.needed_bytes, ROWS * 32 * 2);
    assert_int_equal(st.bytes_planned, ROWS * 64 * 2);
    assert_true(st.est_seconds < st.exact_est_seconds);
    half_check(&e, plan);
}

/* The deprecated names of the staged reads answer as the new ones do: the
 * same records, the same count. */
static void test_deprecated_staged_read_names(void **state)
{
    (void)state;
    env_t e;
    const int64_t shape[] = {ROWS, 64}, lo[1][3] = {{0, 0}},
                  len[1][3] = {{ROWS, 32}};
    env_init(&e, 2, shape);
    env_copy(&e, lo[0], len[0]);
    rs_plan_h plan = env_plan(&e, 400, 1e5, 0);
    size_t n = 0, nold = 99;
    const rs_staged_read_t *now = rs_plan_staged_reads(plan, &n);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const rs_full_pull_t *old = rs_plan_full_pulls(plan, &nold);
#pragma GCC diagnostic pop
    assert_int_equal(n, 1);
    assert_int_equal(nold, n);
    assert_ptr_equal(old, now);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* w[64, 4, 16], the copy w[8:24, 0:2, 0:12]: 32 runs of 24 B. At 400 Gb/s
 * (50 B/ns) and 1 ns a descriptor the 8-byte gaps inside a row (0.16 ns)
 * are worth reading, the 64-byte ones between rows (1.28 ns) are not: the
 * coalesced box [8:24, 0:2, 0:16], 16 runs of 64 B (36.5 ns), beats the
 * exact runs (47.4 ns), the bound box [8:24, 0:4, 0:16] (one run of
 * 2048 B, 42 ns) and the full pull (83 ns on rank-0). */
static void test_coalesced_through_cheap_gaps(void **state)
{
    (void)state;
    env_t e;
    const int64_t shape[] = {ROWS, 4, 16}, lo[1][3] = {{8, 0, 0}},
                  len[1][3] = {{16, 2, 12}};
    env_init(&e, 3, shape);
    env_copy(&e, lo[0], len[0]);
    rs_plan_h plan = env_plan(&e, 400, 1, 0);
    size_t nfp;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nfp);
    assert_int_equal(nfp, 1);
    assert_int_equal(fp[0].kind, RS_STAGED_COALESCED);
    const int64_t want_lo[] = {8, 0, 0}, want_shape[] = {16, 2, 16};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(fp[0].box_lo[k], want_lo[k]);
        assert_int_equal(fp[0].box_shape[k], want_shape[k]);
    }
    assert_int_equal(fp[0].nsegments, 16);
    rs_plan_stats_t st = stats_of(plan);
    assert_int_equal(st.needed_bytes, 16 * 2 * 12 * 2);
    assert_int_equal(st.bytes_planned, 16 * 2 * 16 * 2);
    assert_int_equal(st.exact_descriptor_count, 32);
    assert_true(fabs(st.est_seconds - (16e-9 + 1024.0 / 50e9)) < 1e-15);
    assert_true(st.est_seconds < st.exact_est_seconds);
    env_check(&e, plan, lo, len);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* w[64, 16], two copies w[8:24, 0:8] and w[8:24, 8:16]: 16 runs of 16 B
 * each. At 0.1 ns a descriptor the 16-byte gap (0.32 ns) is not worth
 * reading for either copy alone, but the bound box of both, rows 8..23
 * whole, is one run of exactly the bytes they need: read once, both
 * replayed from it. */
static void test_bound_box_of_a_source_s_copies(void **state)
{
    (void)state;
    env_t e;
    const int64_t shape[] = {ROWS, 16}, lo[2][3] = {{8, 0}, {8, 8}},
                  len[2][3] = {{16, 8}, {16, 8}};
    env_init(&e, 2, shape);
    env_copy(&e, lo[0], len[0]);
    env_copy(&e, lo[1], len[1]);
    rs_plan_h plan = env_plan(&e, 400, 0.1, 0);
    size_t n, nfp;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nfp);
    rs_plan_segments(plan, &n);
    assert_int_equal(n, 0);
    assert_int_equal(nfp, 1);
    assert_int_equal(fp[0].kind, RS_STAGED_BOUND);
    assert_int_equal(fp[0].ncopies, 2);
    assert_int_equal(fp[0].nsegments, 1);
    assert_int_equal(fp[0].box_lo[0], 8);
    assert_int_equal(fp[0].box_shape[0], 16);
    assert_int_equal(fp[0].box_lo[1], 0);
    assert_int_equal(fp[0].box_shape[1], 16);
    rs_plan_stats_t st = stats_of(plan);
    assert_int_equal(st.needed_bytes, 2 * 16 * 8 * 2);
    assert_int_equal(st.bytes_planned, st.needed_bytes);
    assert_int_equal(st.descriptor_count, 1);
    assert_true(st.est_seconds < st.exact_est_seconds);
    env_check(&e, plan, lo, len);
    rs_plan_destroy(plan);
    env_free(&e);
}

/* test_bound_box_of_a_source_s_copies for two sources, w and v, whose
 * copies the capture interleaves (w, v, w, v): the cost model then groups
 * them by source itself instead of taking them in capture order
 * (plan_cost.c by_source). The plan must be what the same copies give in
 * grouped order (w, w, v, v): one bound box per source, nothing else. */
static rs_plan_h interleaved_plan(env_t *e, const char *const *order,
                                  int64_t (*lo)[3], int64_t (*len)[3])
{
    const int64_t shape[] = {ROWS, 16}, blo[2][3] = {{8, 0}, {8, 8}},
                  blen[3] = {16, 8};
    int nw = 0, nv = 0;
    env_init(e, 2, shape);
    for (int i = 0; i < 4; i++) {
        int k = order[i][0] == 'w' ? nw++ : nv++;
        memcpy(lo[i], blo[k], sizeof(lo[i]));
        memcpy(len[i], blen, sizeof(len[i]));
        env_copy_of(e, order[i], lo[i], len[i]);
    }
    return env_plan(e, 400, 0.1, 0);
}

static void test_bound_boxes_of_interleaved_sources(void **state)
{
    (void)state;
    static const char *const mixed[] = {"w", "v", "w", "v"};
    static const char *const grouped[] = {"w", "w", "v", "v"};
    env_t e1, e2;
    int64_t lo1[4][3], len1[4][3], lo2[4][3], len2[4][3];
    rs_plan_h p1 = interleaved_plan(&e1, mixed, lo1, len1);
    rs_plan_h p2 = interleaved_plan(&e2, grouped, lo2, len2);
    size_t n1, n2, f1, f2;
    const rs_staged_read_t *fp1 = rs_plan_staged_reads(p1, &f1);
    const rs_staged_read_t *fp2 = rs_plan_staged_reads(p2, &f2);
    rs_plan_segments(p1, &n1);
    rs_plan_segments(p2, &n2);
    assert_int_equal(n1, 0);
    assert_int_equal(n2, 0);
    assert_int_equal(f1, 2);
    assert_int_equal(f2, 2);
    for (size_t k = 0; k < 2; k++) {
        assert_int_equal(fp1[k].kind, RS_STAGED_BOUND);
        assert_int_equal(fp2[k].kind, RS_STAGED_BOUND);
        assert_int_equal(fp1[k].ncopies, 2);
        assert_int_equal(fp1[k].nsegments, 1);
        assert_int_equal(fp1[k].box_lo[0], fp2[k].box_lo[0]);
        assert_int_equal(fp1[k].box_shape[0], fp2[k].box_shape[0]);
        assert_int_equal(fp1[k].box_shape[1], fp2[k].box_shape[1]);
    }
    rs_plan_stats_t s1 = stats_of(p1), s2 = stats_of(p2);
    assert_int_equal(s1.descriptor_count, 2);
    assert_int_equal(s1.descriptor_count, s2.descriptor_count);
    assert_int_equal(s1.bytes_planned, s2.bytes_planned);
    assert_true(s1.est_seconds == s2.est_seconds);
    assert_true(s1.exact_est_seconds == s2.exact_est_seconds);
    env_check(&e1, p1, (const int64_t(*)[3])lo1, (const int64_t(*)[3])len1);
    env_check(&e2, p2, (const int64_t(*)[3])lo2, (const int64_t(*)[3])len2);
    rs_plan_destroy(p1);
    rs_plan_destroy(p2);
    env_free(&e1);
    env_free(&e2);
}

/* The cap is hard: with descriptors nearly free the exact runs are the
 * cheapest, but 64 runs exceed a cap of 8, so a staged read is taken. */
static void test_cap_forces_a_staged_read(void **state)
{
    (void)state;
    env_t e;
    size_t n, nfp;
    rs_plan_h plan = half_plan(&e, 0.001, 8, &n, &nfp);
    assert_int_equal(n, 0);
    assert_int_equal(nfp, 1);
    assert_int_equal(rs_plan_num_unbounded(plan), 0);
    rs_plan_stats_t st = stats_of(plan);
    assert_true(st.est_seconds > st.exact_est_seconds); /* the cap's price */
    half_check(&e, plan);
}

static void expect_refused(env_t *e, double nic, double desc, const char *field)
{
    rs_plan_params_t p;
    rs_diag_t d;
    rs_plan_h plan = NULL;
    rs_plan_params_init(&p);
    p.nic_gbps = nic;
    p.descriptor_ns = desc;
    assert_int_equal(rs_plan_build(e->cap, e->srcs, &p, &d, &plan),
                     RS_ERR_INVALID_ARG);
    assert_null(plan);
    assert_non_null(strstr(d.msg, field));
}

static void test_bad_params(void **state)
{
    (void)state;
    env_t e;
    const int64_t shape[] = {ROWS, 64}, lo[] = {0, 0}, len[] = {ROWS, 32};
    env_init(&e, 2, shape);
    env_copy(&e, lo, len);
    const double bad[] = {0, -1, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_refused(&e, bad[i], 100, "nic_gbps");
        expect_refused(&e, 400, bad[i], "descriptor_ns");
    }
    rs_plan_params_t p;
    rs_plan_params_init(&p);
    assert_true(p.nic_gbps == RS_PLAN_DEFAULT_NIC_GBPS);
    assert_true(p.descriptor_ns == RS_PLAN_DEFAULT_DESCRIPTOR_NS);
    env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_when_descriptors_are_cheap),
        cmocka_unit_test(test_full_when_descriptors_are_dear),
        cmocka_unit_test(test_deprecated_staged_read_names),
        cmocka_unit_test(test_coalesced_through_cheap_gaps),
        cmocka_unit_test(test_bound_box_of_a_source_s_copies),
        cmocka_unit_test(test_bound_boxes_of_interleaved_sources),
        cmocka_unit_test(test_cap_forces_a_staged_read),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
