/* The executor's run structure on every backend (local, local-mt with 1
 * and 3 threads, cma, ucx over sm and tcp): a plan with full pulls
 * (transposes), converts (bf16 -> f32) and direct segments, run serially
 * and pipelined (one wave per item, and a few items per wave), compared
 * byte for byte with values computed from the fixture's pattern alone.
 * Two full pulls write the same destination: the later one in loader
 * order wins in every mode. A read that fails after earlier waves were
 * replayed fails the run, names its session and never reaches install, so
 * the parameters behind the staging keep their bytes. Staging is
 * page-aligned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_impl.h"
#include "reshard/digest.h"
#include "reshard/reshard.h"
#include "transport_fixture.h"

#define H 48 /* rows per session */
#define W 40 /* columns */
#define NSESS 2
#define SHARD_BYTES ((uint64_t)H * W * 2)

/* Source tensors w, v, u [2H, W] bf16: rows [sH, (s+1)H) of source k are
 * session s's region k, row-major. */
#define NSRC 3
static const char *const snames[NSRC] = {"w", "v", "u"};

static uint16_t src_at(int k, int64_t row, int64_t col)
{
    uint32_t s = (uint32_t)(row / H);
    uint64_t off = ((uint64_t)(row % H) * W + (uint64_t)col) * 2;
    return (uint16_t)(tfx_byte(s, (size_t)k, off) |
                      tfx_byte(s, (size_t)k, off + 1) << 8);
}

enum { P_WT, P_WF, P_WD, P_O, P_TAIL, NPARAMS };
static const char *const pnames[NPARAMS] = {"wt", "wf", "wd", "o", "tail"};
static const rs_dtype_t pdtypes[NPARAMS] = {RS_DTYPE_BF16, RS_DTYPE_F32,
                                            RS_DTYPE_BF16, RS_DTYPE_BF16,
                                            RS_DTYPE_BF16};
static const int64_t pnumel[NPARAMS] = {2 * H * W, 2 * H * W, H * W,
                                        W * H, W};

static void add_copy(rs_capture_h cap, const char *src, const char *param,
                     const rs_op_t *ops, size_t nops, const int64_t *shape,
                     const int64_t *stride, rs_dtype_t dt)
{
    rs_copy_desc_t c = {src, param, ops, nops, 0, 2, shape, stride, dt};
    assert_int_equal(rs_capture_add_copy(cap, &c, NULL), RS_OK);
}

/* Loader order: wt = w^T (w's full pull), wf = u as f32 (a convert), wd =
 * u's rows [H/2, H/2 + H) (direct segments from both sessions), o = (v's
 * rows [0, H))^T then o = (v's rows [H, 2H))^T (v's full pull, two
 * overlapping copies: the second wins), tail = u's last row (direct). */
static rs_capture_h make_capture(void)
{
    rs_capture_h cap;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    for (int p = 0; p < NPARAMS; p++)
        assert_int_equal(rs_capture_add_param(cap, pnames[p], 1, &pnumel[p],
                                              pdtypes[p], NULL), RS_OK);
    rs_op_t tr = {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}};
    int64_t tshape[2] = {W, 2 * H}, tstride[2] = {2 * H, 1};
    add_copy(cap, "w", "wt", &tr, 1, tshape, tstride, RS_DTYPE_BF16);
    int64_t fshape[2] = {2 * H, W}, fstride[2] = {W, 1};
    add_copy(cap, "u", "wf", NULL, 0, fshape, fstride, RS_DTYPE_F32);
    rs_op_t mid = {.kind = RS_OP_NARROW, .arg = {0, H / 2, H}};
    int64_t dshape[2] = {H, W};
    add_copy(cap, "u", "wd", &mid, 1, dshape, fstride, RS_DTYPE_BF16);
    int64_t oshape[2] = {W, H}, ostride[2] = {H, 1};
    for (int half = 0; half < 2; half++) {
        rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {0, half * H, H}},
                          {.kind = RS_OP_TRANSPOSE, .arg = {0, 1}}};
        add_copy(cap, "v", "o", ops, 2, oshape, ostride, RS_DTYPE_BF16);
    }
    rs_op_t last = {.kind = RS_OP_NARROW, .arg = {0, 2 * H - 1, 1}};
    int64_t lshape[2] = {1, W};
    add_copy(cap, "u", "tail", &last, 1, lshape, fstride, RS_DTYPE_BF16);
    return cap;
}

/* Each session's shard, its digest computed from the pattern. */
static rs_sources_h make_sources(const tfx_world_t *w)
{
    rs_sources_h srcs;
    int64_t full[2] = {2 * H, W}, shape[2] = {H, W};
    uint8_t *bytes = malloc(SHARD_BYTES);
    assert_int_equal(rs_sources_create(&srcs), RS_OK);
    for (uint32_t s = 0; s < NSESS; s++) {
        for (int k = 0; k < NSRC; k++) {
            char name[8], dg[RS_DIGEST_STR_LEN + 1];
            int64_t off[2] = {(int64_t)s * H, 0};
            for (uint64_t b = 0; b < SHARD_BYTES; b++)
                bytes[b] = tfx_byte(s, (size_t)k, b);
            rs_digest_format(rs_digest(bytes, SHARD_BYTES), dg);
            snprintf(name, sizeof(name), "s%u", s);
            rs_shard_desc_t d = {snames[k], RS_DTYPE_BF16, 2, 2, full, name, 0,
                                 tfx_region(w, s, (size_t)k)->addr, off,
                                 shape, dg};
            assert_int_equal(rs_sources_add_shard(srcs, &d, NULL), RS_OK);
        }
    }
    free(bytes);
    return srcs;
}

static void put16(uint8_t *p, int64_t i, uint16_t v) { memcpy(p + i * 2, &v, 2); }

/* bf16 widens to f32 by a shift; a NaN comes out quiet (the library's
 * documented cast), its payload kept. */
static uint32_t bf16_to_f32(uint16_t h)
{
    uint32_t f = (uint32_t)h << 16;
    return (f & 0x7fffffffu) > 0x7f800000u ? f | 0x00400000u : f;
}

/* Every parameter's bytes, from the pattern and the loader's semantics. */
static void expect(uint8_t **want)
{
    for (int64_t r = 0; r < 2 * H; r++) {
        for (int64_t c = 0; c < W; c++) {
            uint16_t w = src_at(0, r, c), v = src_at(1, r, c);
            uint16_t u = src_at(2, r, c);
            put16(want[P_WT], c * 2 * H + r, w);
            uint32_t f = bf16_to_f32(u);
            memcpy(want[P_WF] + (r * W + c) * 4, &f, 4);
            if (r >= H / 2 && r < H / 2 + H)
                put16(want[P_WD], (r - H / 2) * W + c, u);
            if (r >= H) /* the second copy into o wins */
                put16(want[P_O], c * H + (r - H), v);
            if (r == 2 * H - 1)
                put16(want[P_TAIL], c, u);
        }
    }
}

typedef struct shadowed {
    uint8_t *real[NPARAMS];   /* what install publishes */
    uint8_t *staged[NPARAMS]; /* what the executor writes */
    uint64_t nbytes[NPARAMS];
    int installs;
} shadowed_t;

/* Install as a receiver does: the staged bytes become the real ones. */
static rs_status_t on_install(void *ctx, rs_exec_h x)
{
    shadowed_t *sh = ctx;
    (void)x;
    for (int p = 0; p < NPARAMS; p++)
        memcpy(sh->real[p], sh->staged[p], sh->nbytes[p]);
    sh->installs++;
    return RS_OK;
}

typedef struct rig {
    tfx_world_t world;
    rs_capture_h cap;
    rs_sources_h srcs;
    rs_plan_h plan;
    rs_transport_h t;
    shadowed_t sh;
    uint8_t *want[NPARAMS];
} rig_t;

/* 0: ready; 1: the backend cannot run here (skip). */
static int rig_open(rig_t *g, const tfx_backend_t *b)
{
    char why[256];
    rs_diag_t diag;
    uint64_t sizes[NSRC] = {SHARD_BYTES, SHARD_BYTES, SHARD_BYTES};
    memset(g, 0, sizeof(*g));
    int rc = tfx_world_open(&g->world, b, NSESS, sizes, NSRC, why,
                            sizeof(why));
    if (rc == 1) {
        print_message("skipping %s: %s\n", b->name, why);
        return 1;
    }
    assert_int_equal(rc, 0);
    g->cap = make_capture();
    g->srcs = make_sources(&g->world);
    rs_plan_params_t pp;
    rs_plan_params_init(&pp);
    pp.max_segments_per_copy = 4; /* the transposes become full pulls */
    pp.descriptor_ns = 0.01;      /* and the rest stays exact runs */
    assert_int_equal(rs_plan_build(g->cap, g->srcs, &pp, &diag, &g->plan), RS_OK);
    assert_true(rs_plan_is_complete(g->plan));
    for (uint32_t s = 0; s < rs_plan_num_sessions(g->plan); s++) {
        char name[8];
        snprintf(name, sizeof(name), "s%u", s); /* the fixture's numbering */
        assert_string_equal(rs_plan_session_name(g->plan, s), name);
    }
    size_t nfp, ncv, nseg;
    rs_plan_staged_reads(g->plan, &nfp);
    rs_plan_converts(g->plan, &ncv);
    rs_plan_segments(g->plan, &nseg);
    assert_true(nfp >= 2); /* w's and v's */
    assert_true(ncv >= 1);
    assert_true(nseg >= 3); /* wd from both sessions, tail */
    if (tfx_transport(&g->world, &diag, &g->t) != RS_OK)
        fail_msg("%s: %s", b->name, diag.msg);
    for (int p = 0; p < NPARAMS; p++) {
        g->sh.nbytes[p] = (uint64_t)pnumel[p] * rs_dtype_size(pdtypes[p]);
        g->sh.real[p] = malloc(g->sh.nbytes[p]);
        g->sh.staged[p] = malloc(g->sh.nbytes[p]);
        g->want[p] = malloc(g->sh.nbytes[p]);
        memset(g->want[p], 0xEE, g->sh.nbytes[p]);
    }
    expect(g->want);
    return 0;
}

static void rig_close(rig_t *g)
{
    for (int p = 0; p < NPARAMS; p++) {
        free(g->sh.real[p]);
        free(g->sh.staged[p]);
        free(g->want[p]);
    }
    rs_transport_destroy(g->t);
    rs_plan_destroy(g->plan);
    rs_sources_destroy(g->srcs);
    rs_capture_destroy(g->cap);
    tfx_world_close(&g->world);
}

static rs_exec_h make_exec_budget(rig_t *g, int serial, uint64_t wave_bytes,
                                  uint64_t budget)
{
    rs_exec_params_t ep;
    rs_exec_h x;
    rs_diag_t diag;
    rs_exec_params_init(&ep);
    ep.serial = serial;
    ep.wave_bytes = wave_bytes;
    ep.staging_budget = budget;
    ep.verify_digests = 1;
    ep.install = on_install;
    ep.install_ctx = &g->sh;
    assert_int_equal(rs_exec_create(g->plan, g->t, &ep, &diag, &x), RS_OK);
    for (int p = 0; p < NPARAMS; p++)
        assert_int_equal(rs_exec_bind(x, (size_t)p, g->sh.staged[p],
                                      g->sh.nbytes[p], RS_MEM_HOST, &diag),
                         RS_OK);
    if (rs_exec_prepare(x, &diag) != RS_OK)
        fail_msg("prepare: %s", diag.msg);
    return x;
}

static rs_exec_h make_exec(rig_t *g, int serial, uint64_t wave_bytes)
{
    return make_exec_budget(g, serial, wave_bytes, 0);
}

static void assert_staging_aligned(rs_exec_h x)
{
    size_t n;
    assert_true((uintptr_t)x->staging % 4096 == 0);
    rs_plan_staged_reads(x->plan, &n);
    for (size_t i = 0; i < n; i++)
        assert_true((uintptr_t)x->fp_staging[i] % 4096 == 0);
    rs_plan_converts(x->plan, &n);
    for (size_t i = 0; i < n; i++)
        assert_true((uintptr_t)x->cv_staging[i] % 4096 == 0);
}

/* Two runs (the second on the prepared state), installed, byte-exact. */
static void run_exact(rig_t *g, const char *what, int serial,
                      uint64_t wave_bytes)
{
    rs_diag_t diag;
    rs_exec_stages_t sg;
    rs_exec_h x = make_exec(g, serial, wave_bytes);
    assert_staging_aligned(x);
    for (int round = 0; round < 2; round++) {
        for (int p = 0; p < NPARAMS; p++) {
            memset(g->sh.staged[p], 0xEE, g->sh.nbytes[p]);
            memset(g->sh.real[p], 0x11, g->sh.nbytes[p]);
        }
        if (rs_exec_run(x, &diag) != RS_OK)
            fail_msg("%s: %s", what, diag.msg);
        for (int p = 0; p < NPARAMS; p++)
            assert_memory_equal(g->sh.real[p], g->want[p], g->sh.nbytes[p]);
    }
    rs_exec_stages(x, &sg);
    assert_true(sg.ok);
    assert_int_equal(sg.shards_verified, NSESS * NSRC);
    assert_true(sg.wire_s >= 0 && sg.replay_s >= 0 && sg.convert_s >= 0 &&
                sg.verify_s >= 0 && sg.run_s >= 0);
    if (serial)
        assert_int_equal(sg.waves, 0);
    else
        assert_true(sg.waves >= 2);
    rs_exec_destroy(x);
}

static void each_backend(void (*body)(rig_t *, const tfx_backend_t *))
{
    size_t ran = 0;
    for (size_t i = 0; i < tfx_nbackends + tfx_nucx_backends; i++) {
        const tfx_backend_t *b = i < tfx_nbackends
                                     ? &tfx_backends[i]
                                     : &tfx_ucx_backends[i - tfx_nbackends];
        rig_t g;
        if (rig_open(&g, b) != 0)
            continue;
        print_message("  %s/%u%s%s\n", b->name, b->threads,
                      b->tls != NULL ? " UCX_TLS=" : "",
                      b->tls != NULL ? b->tls : "");
        body(&g, b);
        rig_close(&g);
        ran++;
    }
    assert_true(ran >= tfx_nbackends); /* only ucx may be unavailable */
}

static void exact_body(rig_t *g, const tfx_backend_t *b)
{
    char what[64];
    snprintf(what, sizeof(what), "%s/%u serial", b->name, b->threads);
    run_exact(g, what, 1, 0);
    snprintf(what, sizeof(what), "%s/%u one item per wave", b->name,
             b->threads);
    run_exact(g, what, 0, 1);
    snprintf(what, sizeof(what), "%s/%u 8 KiB waves", b->name, b->threads);
    run_exact(g, what, 0, 8192);
}

static void test_byte_exact(void **state)
{
    (void)state;
    each_backend(exact_body);
}

/* The copies into o overlap: both marked ordered; the others are not. */
static void test_overlap_marks(void **state)
{
    (void)state;
    rig_t g;
    assert_int_equal(rig_open(&g, &tfx_backends[0]), 0);
    rs_exec_h x = make_exec(&g, 0, 1);
    size_t marked = 0;
    for (size_t i = 0; i < x->replays_len; i++) {
        int into_o = x->replays[i].dst == g.sh.staged[P_O];
        assert_int_equal(x->replay_ordered[i], into_o);
        marked += into_o;
    }
    assert_int_equal(marked, 2);
    for (size_t i = 0; i < x->casts_len; i++)
        assert_int_equal(x->cast_ordered[i], 0);
    rs_exec_destroy(x);
    rig_close(&g);
}

/* The last wave's first read points outside session 1's region: the
 * transport refuses it when that wave is posted, after the earlier waves
 * were replayed into staging. */
static void fail_body(rig_t *g, const tfx_backend_t *b)
{
    rs_diag_t diag;
    rs_exec_stages_t sg;
    rs_exec_h x = make_exec(g, 0, 1);
    assert_true(x->nwaves >= 3);
    size_t last = x->nwaves - 1;
    rs_read_t *r = &x->wave_reads[x->waves[last - 1].reads_end];
    char victim[8];
    snprintf(victim, sizeof(victim), "s%u", r->session);
    r->src_addr += 2 * SHARD_BYTES; /* past every region's end */
    for (int p = 0; p < NPARAMS; p++) {
        memset(g->sh.staged[p], 0xEE, g->sh.nbytes[p]);
        memset(g->sh.real[p], 0x11, g->sh.nbytes[p]);
    }
    rs_status_t st = rs_exec_run(x, &diag);
    if (st != RS_ERR_TRANSPORT)
        fail_msg("%s/%u: %s: %s", b->name, b->threads, rs_status_str(st),
                 diag.msg);
    if (strstr(diag.msg, victim) == NULL)
        fail_msg("%s: '%s' does not name %s", b->name, diag.msg, victim);
    assert_int_equal(g->sh.installs, 0);
    for (int p = 0; p < NPARAMS; p++)
        for (uint64_t k = 0; k < g->sh.nbytes[p]; k++)
            assert_int_equal(g->sh.real[p][k], 0x11);
    /* earlier waves were replayed: wt holds its bytes in staging */
    assert_memory_equal(g->sh.staged[P_WT], g->want[P_WT],
                        g->sh.nbytes[P_WT]);
    rs_exec_stages(x, &sg);
    assert_false(sg.ok);
    assert_string_equal(sg.failure, "transport");
    assert_int_equal(rs_exec_install(x, &diag), RS_ERR_INVALID_ARG);
    rs_exec_destroy(x);
}

static void test_failure_mid_pipeline(void **state)
{
    (void)state;
    each_backend(fail_body);
}

/* Staging budgets: w's full pull and u's convert take 8 KiB of staging
 * each (whole pages), v's two staged halves 4 KiB each, in that order. A
 * budget of 8 KiB runs three rounds (w | v v | u), of 12 KiB two (w v | v
 * u: the two copies into o in different rounds), of 16 KiB two serially
 * (w v v | u) and three pipelined (w | v v | u, in two 8 KiB halves), the
 * default and an unbounded one a single round; every
 * run, serial or not, installs the bytes the pattern says (the second
 * copy into o still wins), verifies every shard, and holds no more
 * staging than its budget. */
static void budget_body(rig_t *g, const tfx_backend_t *b)
{
    /* rounds and bytes held: serial runs, then pipelined ones */
    static const struct { uint64_t budget, rounds[2], held[2]; } cases[] = {
        {8192, {3, 3}, {8192, 8192}}, {12288, {2, 2}, {12288, 12288}},
        {16384, {2, 3}, {16384, 16384}}, {0, {1, 1}, {24576, 24576}},
        {RS_STAGING_UNBOUNDED, {1, 1}, {24576, 24576}}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int serial = 0; serial < 2; serial++) {
            rs_diag_t diag;
            rs_exec_stages_t sg;
            rs_staging_need_t need;
            rs_exec_h x = make_exec_budget(g, serial, 1, cases[c].budget);
            assert_staging_aligned(x);
            for (int again = 0; again < 2; again++) { /* prepared state reused */
                for (int p = 0; p < NPARAMS; p++) {
                    memset(g->sh.staged[p], 0xEE, g->sh.nbytes[p]);
                    memset(g->sh.real[p], 0x11, g->sh.nbytes[p]);
                }
                if (rs_exec_run(x, &diag) != RS_OK)
                    fail_msg("%s/%u budget %llu: %s", b->name, b->threads,
                             (unsigned long long)cases[c].budget, diag.msg);
                for (int p = 0; p < NPARAMS; p++)
                    assert_memory_equal(g->sh.real[p], g->want[p],
                                        g->sh.nbytes[p]);
            }
            rs_exec_stages(x, &sg);
            assert_int_equal(sg.staging_rounds, cases[c].rounds[!serial]);
            assert_int_equal(sg.staging_unbounded, 3 * 8192);
            assert_int_equal(sg.staging_bytes, cases[c].held[!serial]);
            /* pipelined with 16 KiB: w | v v | u alternate between two
             * 8 KiB halves, each round replayed on a pool thread while
             * the next is read */
            if (!serial && cases[c].budget == 16384)
                assert_int_equal(sg.threads, 2);
            if (cases[c].budget > 0)
                assert_true(sg.staging_bytes <= cases[c].budget);
            assert_int_equal(sg.shards_verified, NSESS * NSRC);
            rs_exec_params_t ep;
            rs_exec_params_init(&ep);
            ep.serial = serial;
            ep.staging_budget = cases[c].budget;
            assert_int_equal(rs_exec_staging_need(g->plan, &ep, &diag, &need),
                             RS_OK);
            assert_int_equal(need.bytes, sg.staging_bytes);
            assert_int_equal(need.rounds, sg.staging_rounds);
            rs_exec_destroy(x);
        }
    }
}

static void test_staging_budget(void **state)
{
    (void)state;
    each_backend(budget_body);
}

/* Prepares an executor of the rig's plan under `budget`: its status, and
 * whether it holds staging afterwards. */
static rs_status_t try_prepare(rig_t *g, uint64_t budget, rs_diag_t *diag,
                               int *holds_staging)
{
    rs_exec_params_t ep;
    rs_exec_h x;
    rs_exec_params_init(&ep);
    ep.staging_budget = budget;
    assert_int_equal(rs_exec_create(g->plan, g->t, &ep, diag, &x), RS_OK);
    for (int p = 0; p < NPARAMS; p++)
        assert_int_equal(rs_exec_bind(x, (size_t)p, g->sh.staged[p],
                                      g->sh.nbytes[p], RS_MEM_HOST, diag),
                         RS_OK);
    rs_status_t st = rs_exec_prepare(x, diag);
    *holds_staging = x->staging != NULL;
    rs_exec_destroy(x);
    return st;
}

/* A box above an explicit budget is refused at prepare, naming the copy
 * and both sizes; so is staging above the memory there is
 * (RESHARD_MEMORY_AVAILABLE stands for the machine), and a malformed
 * figure. Nothing is allocated then. */
static void test_staging_refused(void **state)
{
    (void)state;
    rig_t g;
    rs_diag_t diag;
    int holds;
    assert_int_equal(rig_open(&g, &tfx_backends[0]), 0);
    assert_int_equal(try_prepare(&g, 4096, &diag, &holds), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(diag.msg, "staging budget of 4.00 KiB (4096 bytes)"));
    assert_non_null(strstr(diag.msg, "copy 0 of 'w' into 'wt'"));
    assert_non_null(strstr(diag.msg, "(8192 bytes)"));
    assert_false(holds);

    assert_int_equal(setenv("RESHARD_MEMORY_AVAILABLE", "20 KiB", 1), 0);
    assert_int_equal(try_prepare(&g, 0, &diag, &holds), RS_ERR_NO_MEMORY);
    assert_non_null(strstr(diag.msg, "executor staging needs 24.0 KiB "
                                     "(24576 bytes), and there is 20.0 KiB "
                                     "(20480 bytes, RESHARD_MEMORY_AVAILABLE)"));
    assert_false(holds);
    /* under a budget that fits, the same plan prepares */
    assert_int_equal(try_prepare(&g, 16384, &diag, &holds), RS_OK);
    assert_true(holds);
    assert_int_equal(setenv("RESHARD_MEMORY_AVAILABLE", "lots", 1), 0);
    assert_int_equal(try_prepare(&g, 0, &diag, &holds), RS_ERR_INPUT);
    assert_non_null(strstr(diag.msg, "RESHARD_MEMORY_AVAILABLE='lots'"));
    assert_false(holds);
    assert_int_equal(unsetenv("RESHARD_MEMORY_AVAILABLE"), 0);
    rig_close(&g);
}

/* A shard read by boxes of two rounds: f = w[0 : H + 8] and g = w[H - 8 :
 * 2H], both cast to f32, are two converts (two pages of staging each), and
 * each of w's shards is read by both. Under a budget of one convert they
 * take a round each and no round holds all of a shard's pieces: both
 * shards are read whole once more for their digests (the buffer counted in
 * the staging held), and the run is byte-exact. */
static void test_shard_across_rounds(void **state)
{
    (void)state;
    enum { ROWS = H + 8 };
    rig_t g;
    rs_diag_t diag;
    assert_int_equal(rig_open(&g, &tfx_backends[0]), 0);
    rs_capture_h cap;
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    int64_t numel = (int64_t)W * ROWS;
    int64_t shape[2] = {ROWS, W}, stride[2] = {W, 1};
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "g" : "f";
        assert_int_equal(rs_capture_add_param(cap, name, 1, &numel,
                                              RS_DTYPE_F32, NULL), RS_OK);
        rs_op_t narrow = {.kind = RS_OP_NARROW,
                          .arg = {0, k * (2 * H - ROWS), ROWS}};
        add_copy(cap, "w", name, &narrow, 1, shape, stride, RS_DTYPE_F32);
    }
    rs_plan_h plan;
    assert_int_equal(rs_plan_build(cap, g.srcs, NULL, &diag, &plan), RS_OK);
    size_t ncv;
    rs_plan_converts(plan, &ncv);
    assert_int_equal(ncv, 2);
    uint8_t *out[2], *want[2];
    for (int k = 0; k < 2; k++) {
        out[k] = malloc((size_t)numel * 4);
        want[k] = malloc((size_t)numel * 4);
        for (int64_t r = 0; r < ROWS; r++)
            for (int64_t c = 0; c < W; c++) {
                uint32_t f = bf16_to_f32(src_at(0, k * (2 * H - ROWS) + r, c));
                memcpy(want[k] + (r * W + c) * 4, &f, 4);
            }
    }
    for (int bounded = 0; bounded < 2; bounded++) {
        rs_exec_params_t ep;
        rs_exec_h x;
        rs_exec_stages_t sg;
        rs_exec_params_init(&ep);
        ep.verify_digests = 1;
        ep.staging_budget = bounded ? 8192 : RS_STAGING_UNBOUNDED;
        assert_int_equal(rs_exec_create(plan, g.t, &ep, &diag, &x), RS_OK);
        for (int k = 0; k < 2; k++) {
            memset(out[k], 0xEE, (size_t)numel * 4);
            assert_int_equal(rs_exec_bind(x, (size_t)k, out[k],
                                          (uint64_t)numel * 4, RS_MEM_HOST,
                                          &diag), RS_OK);
        }
        if (rs_exec_run(x, &diag) != RS_OK)
            fail_msg("bounded %d: %s", bounded, diag.msg);
        for (int k = 0; k < 2; k++)
            assert_memory_equal(out[k], want[k], (size_t)numel * 4);
        rs_exec_stages(x, &sg);
        assert_int_equal(sg.shards_verified, NSESS);
        assert_int_equal(sg.staging_rounds, bounded ? 2 : 1);
        assert_int_equal(sg.staging_bytes,
                         bounded ? 8192 + SHARD_BYTES : 2 * 8192);
        rs_exec_destroy(x);
    }
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        free(want[k]);
    }
    rs_plan_destroy(plan);
    rs_capture_destroy(cap);
    rig_close(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap_marks),
        cmocka_unit_test(test_byte_exact),
        cmocka_unit_test(test_failure_mid_pipeline),
        cmocka_unit_test(test_staging_budget),
        cmocka_unit_test(test_staging_refused),
        cmocka_unit_test(test_shard_across_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
