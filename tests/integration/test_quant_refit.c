/* Quantized copies end to end over the local executor: bf16/f32 trainer
 * shards into FP8 weights and float32 scales, on the receiver path (the
 * block-rounded box read and quantized locally) and the publisher path
 * (the "<src>#<spec>" tensors and their scales read as plain copies),
 * compared byte for byte with a reference quantizer written here (plain
 * loops over the full tensor, the test support's own FP8 encoder).
 * Covers fp8_block (4x8 and 128x128), fp8_channel and fp8_tensor, ragged
 * edges, row and column slices, views that cut blocks, merged params,
 * partly served FP8 sources, hostile copies, non-finite values and stale
 * shards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assert_status.h"
#include "ref_float.h"
#include "reshard/digest.h"
#include "reshard/exec.h"
#include "reshard/reshard.h"

#define NSESS 4
#define MAXSH 64

static const char *const sessions[NSESS] = {"t0", "t1", "t2", "t3"};

typedef struct shard {
    int sess;
    uint64_t addr, nbytes;
    unsigned char *data;
} shard_t;

/* A full source tensor as the trainers hold it, and its reference
 * quantization. */
typedef struct tensor {
    const char *name;
    rs_dtype_t dtype;
    int64_t shape[2];
    float *x;            /* values */
    unsigned char *raw;  /* encoded in dtype */
} tensor_t;

typedef struct world {
    rs_sources_h srcs;
    rs_capture_h cap;
    shard_t sh[MAXSH];
    int nsh;
    uint64_t next[NSESS];
} world_t;

static void world_init(world_t *w)
{
    memset(w, 0, sizeof(*w));
    for (int s = 0; s < NSESS; s++)
        w->next[s] = 4096 + (uint64_t)s * (1u << 26);
    assert_int_equal(rs_sources_create(&w->srcs), RS_OK);
    assert_int_equal(rs_capture_create(&w->cap), RS_OK);
}

static void world_free(world_t *w)
{
    for (int i = 0; i < w->nsh; i++)
        free(w->sh[i].data);
    rs_sources_destroy(w->srcs);
    rs_capture_destroy(w->cap);
}

/* Deterministic values: random sign, exponents over a few octaves, a zero
 * now and then, so blocks have different scales. */
static float value_of(uint64_t seed, int64_t i)
{
    uint64_t h = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 32;
    if (h % 17 == 0)
        return 0.0f;
    uint16_t bits = (uint16_t)(((h >> 8) & 1u) << 15 | (uint16_t)((118 + h % 12) << 7) |
                               (uint16_t)((h >> 16) & 0x7f));
    return (float)ref_float_decode(RS_DTYPE_BF16, bits);
}

static void tensor_make(tensor_t *t, const char *name, rs_dtype_t dt, int64_t r,
                        int64_t c, uint64_t seed)
{
    int64_t n = r * c;
    size_t es = rs_dtype_size(dt);
    t->name = name;
    t->dtype = dt;
    t->shape[0] = r;
    t->shape[1] = c;
    t->x = malloc((size_t)n * sizeof(float) + 1);
    t->raw = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++) {
        t->x[i] = value_of(seed, i);
        ref_float_store(dt, t->raw + i * (int64_t)es,
                        ref_float_encode(dt, (double)t->x[i]));
    }
}

static void tensor_free(tensor_t *t)
{
    free(t->x);
    free(t->raw);
}

/* ---- the reference quantizer: the rule of quant.h in plain loops ---- */

typedef struct refq {
    int64_t block[2], grid[2];
    unsigned char *q; /* full tensor, FP8 bits */
    float *s;         /* full grid */
} refq_t;

static double fmax_of(rs_dtype_t f) { return f == RS_DTYPE_F8E4M3 ? 448.0 : 57344.0; }

static void ref_blocks(int scheme, const int64_t *blk, const int64_t *shape,
                       int64_t *block)
{
    for (int d = 0; d < 2; d++) {
        block[d] = scheme == RS_QUANT_FP8_BLOCK ? blk[d]
                   : scheme == RS_QUANT_FP8_CHANNEL ? (d == 0 ? 1 : shape[d])
                                                    : shape[d];
        if (block[d] == 0)
            block[d] = 1;
    }
}

static void ref_quantize(const tensor_t *t, int scheme, const int64_t *blk,
                         rs_dtype_t fmt, refq_t *r)
{
    int64_t R = t->shape[0], C = t->shape[1];
    ref_blocks(scheme, blk, t->shape, r->block);
    r->grid[0] = (R + r->block[0] - 1) / r->block[0];
    r->grid[1] = (C + r->block[1] - 1) / r->block[1];
    int64_t ng = r->grid[0] * r->grid[1];
    float *amax = calloc((size_t)ng, sizeof(float));
    r->s = malloc((size_t)ng * sizeof(float));
    r->q = malloc((size_t)(R * C) + 1);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            int64_t g = (i / r->block[0]) * r->grid[1] + j / r->block[1];
            float a = fabsf(t->x[i * C + j]);
            if (a > amax[g])
                amax[g] = a;
        }
    float fm = (float)fmax_of(fmt);
    for (int64_t g = 0; g < ng; g++) {
        float s = amax[g] / fm;
        r->s[g] = s == 0.0f ? 1.0f : s;
    }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            int64_t g = (i / r->block[0]) * r->grid[1] + j / r->block[1];
            float v = t->x[i * C + j] / r->s[g];
            if (v > fm)
                v = fm;
            if (v < -fm)
                v = -fm;
            r->q[i * C + j] = (unsigned char)ref_float_encode(fmt, (double)v);
        }
    free(amax);
}

static void refq_free(refq_t *r)
{
    free(r->q);
    free(r->s);
}

/* ---- publishing ---- */

/* Publishes rows [r0, r1) x cols [c0, c1) of a row-major full tensor of
 * `shape` and element size es from session sess. */
static void publish_tile(world_t *w, const char *name, rs_dtype_t dt,
                         const int64_t *shape, const unsigned char *full,
                         int sess, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    size_t es = rs_dtype_size(dt);
    shard_t *s = &w->sh[w->nsh++];
    int64_t off[2] = {r0, c0}, shp[2] = {r1 - r0, c1 - c0};
    assert_true(w->nsh <= MAXSH);
    s->sess = sess;
    s->nbytes = (uint64_t)(shp[0] * shp[1]) * es;
    s->data = malloc(s->nbytes + 1);
    for (int64_t i = 0; i < shp[0]; i++)
        memcpy(s->data + (size_t)(i * shp[1]) * es,
               full + (size_t)((r0 + i) * shape[1] + c0) * es, (size_t)shp[1] * es);
    s->addr = w->next[sess];
    w->next[sess] += (s->nbytes + 63) & ~(uint64_t)63;
    char dg[RS_DIGEST_STR_LEN + 1];
    rs_digest_format(rs_digest(s->data, s->nbytes), dg);
    rs_shard_desc_t d = {name, dt, es, 2, shape, sessions[sess], 0, s->addr,
                         off, shp, dg};
    rs_diag_t diag;
    ASSERT_ST(rs_sources_add_shard(w->srcs, &d, &diag), RS_OK, diag);
}

/* A trainer layout: the tensor cut into `rows` x `cols` equal-ish tiles
 * (cut points given), tile k on session k % NSESS. */
static void publish_grid(world_t *w, const tensor_t *t, const int64_t *rcut,
                         int nr, const int64_t *ccut, int nc)
{
    int k = 0;
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++)
            publish_tile(w, t->name, t->dtype, t->shape, t->raw, (k++) % NSESS,
                         rcut[i], rcut[i + 1], ccut[j], ccut[j + 1]);
}

/* What a publisher serving the spec would publish: the FP8 values and the
 * scales of the reference, tiled by block-aligned cuts (rows of blocks). */
static void publish_quant(world_t *w, const tensor_t *t, const refq_t *r,
                          const char *spec, rs_dtype_t fmt, const int64_t *rcut,
                          int nr)
{
    char qn[128], sn[160];
    snprintf(qn, sizeof(qn), "%s#%s", t->name, spec);
    snprintf(sn, sizeof(sn), "%s#scale", qn);
    for (int i = 0; i < nr; i++) {
        int64_t g0 = rcut[i] / r->block[0];
        int64_t g1 = (rcut[i + 1] + r->block[0] - 1) / r->block[0];
        publish_tile(w, qn, fmt, t->shape, r->q, i % NSESS, rcut[i], rcut[i + 1], 0,
                     t->shape[1]);
        publish_tile(w, sn, RS_DTYPE_F32, r->grid, (const unsigned char *)r->s,
                     i % NSESS, g0, g1, 0, r->grid[1]);
    }
}

/* ---- capture ---- */

typedef struct qcopy {
    const char *src, *param, *scale_param;
    int scheme;
    rs_dtype_t fmt;
    int64_t block[2];
    int64_t r0, nr, c0, nc;     /* the view: narrow rows, narrow cols */
    int64_t dest_row;           /* first dest row of the param */
    int64_t pcols;              /* the param's row length */
    int64_t scale_off;          /* elements into the scale param */
    int scale_ndim;
    int64_t scale_shape[2], scale_stride[2];
} qcopy_t;

static rs_status_t add_qcopy(world_t *w, const qcopy_t *c, rs_diag_t *diag)
{
    rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {0, c->r0, c->nr}, .has = 7},
                      {.kind = RS_OP_NARROW, .arg = {1, c->c0, c->nc}, .has = 7}};
    int64_t ds[2] = {c->nr, c->nc}, dst[2] = {c->pcols, 1};
    rs_copy_desc_t cd = {c->src, c->param, ops, 2, c->dest_row * c->pcols, 2, ds,
                         dst, c->fmt};
    rs_quant_desc_t q = {(rs_quant_scheme_t)c->scheme, c->fmt,
                         c->scheme == RS_QUANT_FP8_BLOCK ? 2 : 0, c->block,
                         c->scale_param, c->scale_off, c->scale_ndim,
                         c->scale_shape, c->scale_stride};
    return rs_capture_add_quant_copy(w->cap, &cd, &q, diag);
}

static void add_param(world_t *w, const char *name, int nd, int64_t a, int64_t b,
                      rs_dtype_t dt)
{
    int64_t s[2] = {a, b};
    rs_diag_t d;
    ASSERT_ST(rs_capture_add_param(w->cap, name, nd, s, dt, &d), RS_OK, d);
}

/* The expected bytes of a copy's destination and scale region. */
static void expect_copy(const qcopy_t *c, const tensor_t *t, const refq_t *r,
                        unsigned char *wexp, float *sexp)
{
    for (int64_t i = 0; i < c->nr; i++)
        for (int64_t j = 0; j < c->nc; j++)
            wexp[(c->dest_row + i) * c->pcols + j] =
                r->q[(c->r0 + i) * t->shape[1] + c->c0 + j];
    int64_t g0 = c->r0 / r->block[0], g1 = (c->r0 + c->nr + r->block[0] - 1) / r->block[0];
    int64_t h0 = c->c0 / r->block[1], h1 = (c->c0 + c->nc + r->block[1] - 1) / r->block[1];
    int64_t k = 0;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t h = h0; h < h1; h++, k++) {
            /* the scale region walks the touched grid row-major */
            int64_t gi = (g - g0), hi = (h - h0), at = c->scale_off;
            if (c->scale_ndim == 2)
                at += gi * c->scale_stride[0] + hi * c->scale_stride[1];
            else if (c->scale_ndim == 1)
                at += k * c->scale_stride[0];
            sexp[at] = r->s[g * r->grid[1] + h];
        }
}

/* ---- running ---- */

typedef struct run {
    rs_status_t st;
    rs_diag_t diag;
    int installs;
    int untouched;
    int exact;
    rs_exec_stages_t sg; /* of the run */
} run_t;

static rs_status_t on_install(void *ctx, rs_exec_h x)
{
    (void)x;
    (*(int *)ctx)++;
    return RS_OK;
}

static void connect_all(world_t *w, rs_transport_h t, rs_plan_h plan)
{
    for (uint32_t s = 0; s < rs_plan_num_sessions(plan); s++) {
        const char *name = rs_plan_session_name(plan, s);
        rs_region_t reg[MAXSH];
        size_t n = 0;
        for (int i = 0; i < w->nsh; i++)
            if (strcmp(sessions[w->sh[i].sess], name) == 0)
                reg[n++] = (rs_region_t){w->sh[i].addr, w->sh[i].nbytes, w->sh[i].data};
        rs_peer_t peer = {name, 0, reg, n, NULL, 0};
        rs_diag_t d;
        ASSERT_ST(rs_transport_connect(t, s, &peer, &d), RS_OK, d);
    }
}

/* Executes the plan into the capture's params (prefilled 0xEE), serial or
 * pipelined in small waves, verifying digests; compares with exp[p]. */
static const char *backend = "local";
static uint64_t staging_budget = 0; /* rs_exec_params_t's, for execute */

static run_t execute(world_t *w, rs_plan_h plan, int serial,
                     unsigned char *const *exp, void (*before)(world_t *))
{
    run_t r = {0};
    rs_transport_params_t tp;
    rs_transport_h t;
    rs_exec_h x;
    rs_exec_params_t ep;
    rs_capture_h cap = rs_plan_capture(plan);
    size_t np = rs_capture_num_params(cap);
    unsigned char *buf[10];
    rs_transport_params_init(&tp);
    tp.backend = backend;
    tp.threads = 2;
    assert_int_equal(rs_transport_create(&tp, &r.diag, &t), RS_OK);
    connect_all(w, t, plan);
    rs_exec_params_init(&ep);
    ep.verify_digests = 1;
    ep.require_full_coverage = 1;
    ep.coverage_floor = 1.0;
    ep.serial = serial;
    ep.wave_bytes = 64;
    ep.staging_budget = staging_budget;
    ep.install = on_install;
    ep.install_ctx = &r.installs;
    assert_int_equal(rs_exec_create(plan, t, &ep, &r.diag, &x), RS_OK);
    assert_true(np <= 10);
    for (size_t p = 0; p < np; p++) {
        rs_param_info_t info;
        rs_capture_param(cap, p, &info);
        buf[p] = malloc(info.nbytes + 1);
        memset(buf[p], 0xEE, info.nbytes);
        assert_int_equal(rs_exec_bind(x, p, buf[p], info.nbytes, RS_MEM_HOST, &r.diag),
                         RS_OK);
    }
    if (before != NULL)
        before(w);
    r.st = rs_exec_run(x, &r.diag);
    rs_exec_stages(x, &r.sg);
    r.untouched = r.exact = 1;
    for (size_t p = 0; p < np; p++) {
        rs_param_info_t info;
        rs_capture_param(cap, p, &info);
        for (uint64_t i = 0; i < info.nbytes; i++) {
            r.untouched &= buf[p][i] == 0xEE;
            if (exp != NULL && buf[p][i] != exp[p][i] && r.exact) {
                r.exact = 0;
                print_message("param %s byte %llu: got 0x%02x want 0x%02x\n", info.name,
                              (unsigned long long)i, buf[p][i], exp[p][i]);
            }
        }
        free(buf[p]);
    }
    rs_exec_destroy(x);
    rs_transport_destroy(t);
    return r;
}

static rs_plan_h plan_of(world_t *w)
{
    rs_plan_h plan;
    rs_diag_t d;
    ASSERT_ST(rs_plan_build(w->cap, w->srcs, NULL, &d, &plan), RS_OK, d);
    return plan;
}

/* Plans, runs serial and pipelined, and checks every param byte. */
static void run_exact(world_t *w, rs_plan_h plan, unsigned char *const *exp)
{
    for (int serial = 0; serial < 2; serial++) {
        run_t r = execute(w, plan, serial, exp, NULL);
        if (r.st != RS_OK)
            fail_msg("run (serial %d): %s: %s", serial, rs_status_str(r.st), r.diag.msg);
        assert_true(r.exact);
        assert_int_equal(r.installs, 1);
    }
}

static const rs_quantized_t *only_record(rs_plan_h plan, size_t want_n, size_t i)
{
    size_t n;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    assert_int_equal(n, want_n);
    return &q[i];
}

/* One copy, one weight param (the view's shape) and one scale param. */
typedef struct single {
    world_t w;
    tensor_t t;
    refq_t r;
    qcopy_t c;
    unsigned char *exp[2];
    uint64_t pbytes[2];
} single_t;

static void single_setup(single_t *s, rs_dtype_t dt, int64_t R, int64_t C,
                         const qcopy_t *c, int64_t sparam_n)
{
    world_init(&s->w);
    tensor_make(&s->t, "x", dt, R, C, 7);
    ref_quantize(&s->t, c->scheme, c->block, c->fmt, &s->r);
    s->c = *c;
    add_param(&s->w, "w", 2, c->dest_row + c->nr, c->pcols, c->fmt);
    add_param(&s->w, "w_scale", 1, sparam_n, 0, RS_DTYPE_F32);
    rs_diag_t d;
    ASSERT_ST(add_qcopy(&s->w, &s->c, &d), RS_OK, d);
    s->pbytes[0] = (uint64_t)((c->dest_row + c->nr) * c->pcols);
    s->pbytes[1] = (uint64_t)sparam_n * 4;
    s->exp[0] = malloc(s->pbytes[0]);
    s->exp[1] = malloc(s->pbytes[1]);
    memset(s->exp[0], 0xEE, s->pbytes[0]);
    memset(s->exp[1], 0xEE, s->pbytes[1]);
    expect_copy(&s->c, &s->t, &s->r, s->exp[0], (float *)(void *)s->exp[1]);
}

static void single_free(single_t *s)
{
    free(s->exp[0]);
    free(s->exp[1]);
    refq_free(&s->r);
    tensor_free(&s->t);
    world_free(&s->w);
}

static qcopy_t block_copy(int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t br,
                          int64_t bc)
{
    qcopy_t c = {"x", "w", "w_scale", RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, {br, bc},
                 r0, nr, c0, nc, 0, nc, 0, 2, {0, 0}, {0, 1}};
    c.scale_shape[0] = (r0 + nr + br - 1) / br - r0 / br;
    c.scale_shape[1] = (c0 + nc + bc - 1) / bc - c0 / bc;
    c.scale_stride[0] = c.scale_shape[1];
    return c;
}

/* fp8_block 4x8 on a ragged [10, 20] bf16 source in four trainer tiles,
 * a row slice (tensor parallel over rows) on the receiver path: the plan
 * reads the block-rounded box and the bytes match the reference. */
static void test_receiver_block_rows(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(4, 6, 0, 20, 4, 8); /* rows 4..10: ragged end */
    single_setup(&s, RS_DTYPE_BF16, 10, 20, &c, 6);
    int64_t rc[3] = {0, 5, 10}, cc[3] = {0, 11, 20};
    publish_grid(&s.w, &s.t, rc, 2, cc, 2);
    rs_plan_h plan = plan_of(&s.w);
    assert_true(rs_plan_is_complete(plan));
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->path, RS_QUANT_PATH_RECEIVER);
    assert_non_null(strstr(q->why, "no publisher serves x#fp8_block:4x8:f8e4m3"));
    assert_int_equal(q->box_lo[0], 4);
    assert_int_equal(q->box_shape[0], 6);
    assert_int_equal(q->box_shape[1], 20);
    assert_int_equal(q->staging_bytes, 6 * 20 * 2);
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_int_equal(st.bytes_planned, 6 * 20 * 2);
    assert_int_equal(st.needed_bytes, 6 * 20 * 2);
    assert_int_equal(st.copies_selected, 1);
    assert_int_equal(st.copies_planned, 1);
    /* the derived copies follow the user's, in the plan's capture */
    assert_int_equal(rs_capture_num_copies(rs_plan_capture(plan)), 3);
    assert_int_equal(q->weight_copy, 1);
    assert_int_equal(q->scale_copy, 2);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* A column slice that cuts blocks: the receiver reads whole blocks (cols
 * 0..16 for cols 3..13) and writes the scales of the blocks touched. */
static void test_receiver_block_cuts(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(1, 8, 3, 10, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 10, 20, &c, 3 * 2);
    int64_t rc[2] = {0, 10}, cc[3] = {0, 7, 20};
    publish_grid(&s.w, &s.t, rc, 1, cc, 2);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->box_lo[0], 0);
    assert_int_equal(q->box_lo[1], 0);
    assert_int_equal(q->box_shape[0], 10);
    assert_int_equal(q->box_shape[1], 16);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* fp8_channel (f8e5m2) over an f32 source, a column slice: a block is a
 * whole row, so the box is the rows' full width; one scale per row. */
static void test_receiver_channel_columns(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = {"x", "w", "w_scale", RS_QUANT_FP8_CHANNEL, RS_DTYPE_F8E5M2, {0, 0},
                 2, 5, 6, 7, 0, 7, 0, 2, {5, 1}, {1, 1}};
    single_setup(&s, RS_DTYPE_F32, 9, 16, &c, 5);
    int64_t rc[3] = {0, 4, 9}, cc[3] = {0, 8, 16};
    publish_grid(&s.w, &s.t, rc, 2, cc, 2);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->path, RS_QUANT_PATH_RECEIVER);
    assert_int_equal(q->box_shape[1], 16);
    assert_int_equal(q->src_dtype, RS_DTYPE_F32);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* fp8_tensor: one scale for the whole tensor, so a slice reads it all. */
static void test_receiver_tensor_scale(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = {"x", "w", "w_scale", RS_QUANT_FP8_TENSOR, RS_DTYPE_F8E4M3, {0, 0},
                 3, 4, 2, 9, 0, 9, 0, 1, {1, 0}, {1, 0}};
    single_setup(&s, RS_DTYPE_BF16, 12, 11, &c, 1);
    int64_t rc[3] = {0, 6, 12}, cc[2] = {0, 11};
    publish_grid(&s.w, &s.t, rc, 2, cc, 1);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->staging_bytes, 12 * 11 * 2);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* fp8_block 128x128 as DeepSeek checkpoints use it, on a ragged
 * [320, 200] source: a column slice of a tensor-parallel rank. */
static void test_receiver_block_128(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(0, 320, 128, 72, 128, 128);
    single_setup(&s, RS_DTYPE_BF16, 320, 200, &c, 3);
    int64_t rc[3] = {0, 160, 320}, cc[3] = {0, 100, 200};
    publish_grid(&s.w, &s.t, rc, 2, cc, 2);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->box_lo[1], 128);
    assert_int_equal(q->box_shape[1], 72);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* Publisher path: the FP8 tensor and its scales served in block-aligned
 * row tiles, so the plan reads FP8 and scales (about half the bytes of
 * bf16) and quantizes nothing. */
static void test_publisher_path(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(4, 8, 8, 12, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 16, 20, &c, 2 * 2);
    int64_t rc[3] = {0, 8, 16}, cc[3] = {0, 10, 20};
    publish_grid(&s.w, &s.t, rc, 2, cc, 2);
    publish_quant(&s.w, &s.t, &s.r, "fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, rc, 2);
    rs_plan_h plan = plan_of(&s.w);
    assert_true(rs_plan_is_complete(plan));
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->path, RS_QUANT_PATH_PUBLISHER);
    assert_int_equal(q->nsegments, 0);
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    /* 8 x 12 FP8 values and 2 x 2 scales, not a bf16 box */
    assert_int_equal(st.needed_bytes, 8 * 12 + 2 * 2 * 4);
    assert_true(st.bytes_planned >= st.needed_bytes);
    assert_true(st.bytes_planned < 8 * 16 * 2);
    assert_int_equal(st.copies_planned, 1);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* The session param `param`'s segments read from (all of them one). */
static int session_of_param(rs_plan_h plan, const char *param)
{
    size_t n;
    const rs_segment_t *sg = rs_plan_segments(plan, &n);
    long p = rs_capture_find_param(rs_plan_capture(plan), param);
    int at = -1;
    for (size_t i = 0; i < n; i++) {
        if (sg[i].param != (uint32_t)p)
            continue;
        assert_true(at < 0 || at == (int)sg[i].session);
        at = (int)sg[i].session;
    }
    assert_true(at >= 0);
    return at;
}

/* Every trainer serves the FP8 values whole; the scales are listed in
 * another table order for t0 and t1, and t2 serves only the first two
 * rows of blocks. The scales of block rows 2..4 come from the weight's
 * table when that table (at the weight shard's index) holds them, t3
 * here, and from a replica's shard of the scale tensor otherwise: the
 * bytes match the reference for every replica the weight lands on. */
static void test_publisher_replicas(void **state)
{
    (void)state;
    static const int order[NSESS] = {1, 0, 2, 3};
    single_t s;
    qcopy_t c = block_copy(8, 8, 0, 20, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 16, 20, &c, 2 * 3);
    const char *qn = "x#fp8_block:4x8:f8e4m3";
    const char *sn = "x#fp8_block:4x8:f8e4m3#scale";
    for (int k = 0; k < NSESS; k++)
        publish_tile(&s.w, qn, RS_DTYPE_F8E4M3, s.t.shape, s.r.q, k, 0, 16, 0,
                     20);
    for (int k = 0; k < NSESS; k++)
        publish_tile(&s.w, sn, RS_DTYPE_F32, s.r.grid,
                     (const unsigned char *)s.r.s, order[k], 0,
                     order[k] == 2 ? 2 : 4, 0, s.r.grid[1]);
    int seen[NSESS] = {0};
    for (uint64_t salt = 0; salt < NSESS; salt++) {
        rs_plan_params_t p;
        rs_plan_h plan;
        rs_diag_t d;
        rs_plan_params_init(&p);
        p.replica_salt = salt;
        ASSERT_ST(rs_plan_build(s.w.cap, s.w.srcs, &p, &d, &plan), RS_OK, d);
        assert_int_equal(only_record(plan, 1, 0)->path,
                         RS_QUANT_PATH_PUBLISHER);
        const char *ws = rs_plan_session_name(
            plan, (uint32_t)session_of_param(plan, "w"));
        const char *ss = rs_plan_session_name(
            plan, (uint32_t)session_of_param(plan, "w_scale"));
        seen[ws[1] - '0'] = 1;
        assert_string_not_equal(ss, "t2"); /* t2 lacks them */
        if (strcmp(ws, "t3") == 0)
            assert_string_equal(ss, "t3");
        run_exact(&s.w, plan, s.exp);
        rs_plan_destroy(plan);
    }
    assert_int_equal(seen[0] + seen[1] + seen[2] + seen[3], NSESS);
    single_free(&s);
}

/* FP8 tiles that cut a block (rows 0..6, 6..16 with 4-row blocks): block
 * row 1 straddles two publisher shards, so the copy takes the receiver
 * path with a reason naming the block and the share served. */
static void test_publisher_straddles(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(0, 16, 0, 20, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 16, 20, &c, 4 * 3);
    int64_t rc[3] = {0, 8, 16}, cc[2] = {0, 20}, qc[3] = {0, 6, 16};
    publish_grid(&s.w, &s.t, rc, 2, cc, 1);
    publish_quant(&s.w, &s.t, &s.r, "fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, qc, 2);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->path, RS_QUANT_PATH_RECEIVER);
    if (strstr(q->why, "block (1, 0) of x straddles publisher shards") == NULL ||
        strstr(q->why, "x#fp8_block:4x8:f8e4m3") == NULL || strstr(q->why, "%") == NULL)
        fail_msg("why: %s", q->why);
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* FP8 values served, scales of another shape: receiver path, saying so. */
static void test_publisher_wrong_scales(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(0, 8, 0, 8, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 2);
    int64_t rc[2] = {0, 8}, cc[2] = {0, 16};
    publish_grid(&s.w, &s.t, rc, 1, cc, 1);
    publish_tile(&s.w, "x#fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, s.t.shape, s.r.q, 1,
                 0, 8, 0, 16);
    int64_t bad[2] = {2, 1};
    publish_tile(&s.w, "x#fp8_block:4x8:f8e4m3#scale", RS_DTYPE_F32, bad,
                 (const unsigned char *)s.r.s, 1, 0, 2, 0, 1);
    rs_plan_h plan = plan_of(&s.w);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->path, RS_QUANT_PATH_RECEIVER);
    assert_non_null(strstr(q->why, "is published as [2, 1] f32, not [2, 2] f32"));
    run_exact(&s.w, plan, s.exp);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* Merged params: gate and up ([8, 16] each) quantized into rows 0..8 and
 * 8..16 of one FP8 param, their scales concatenated by rows in one scale
 * param; gate on the publisher path, up on the receiver path. */
static void test_merged_params(void **state)
{
    (void)state;
    world_t w;
    tensor_t g, u;
    refq_t rg, ru;
    int64_t blk[2] = {4, 8};
    world_init(&w);
    tensor_make(&g, "gate", RS_DTYPE_BF16, 8, 16, 1);
    tensor_make(&u, "up", RS_DTYPE_BF16, 8, 16, 2);
    ref_quantize(&g, RS_QUANT_FP8_BLOCK, blk, RS_DTYPE_F8E4M3, &rg);
    ref_quantize(&u, RS_QUANT_FP8_BLOCK, blk, RS_DTYPE_F8E4M3, &ru);
    add_param(&w, "gu", 2, 16, 16, RS_DTYPE_F8E4M3);
    add_param(&w, "gu_scale", 2, 4, 2, RS_DTYPE_F32);
    qcopy_t cg = {"gate", "gu", "gu_scale", RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3,
                  {4, 8}, 0, 8, 0, 16, 0, 16, 0, 2, {2, 2}, {2, 1}};
    qcopy_t cu = cg;
    cu.src = "up";
    cu.dest_row = 8;
    cu.scale_off = 4;
    rs_diag_t d;
    ASSERT_ST(add_qcopy(&w, &cg, &d), RS_OK, d);
    ASSERT_ST(add_qcopy(&w, &cu, &d), RS_OK, d);
    int64_t rc[3] = {0, 4, 8}, cc[3] = {0, 8, 16};
    publish_grid(&w, &g, rc, 2, cc, 2);
    publish_grid(&w, &u, rc, 2, cc, 2);
    publish_quant(&w, &g, &rg, "fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, rc, 2);
    unsigned char *exp[2] = {malloc(256), malloc(32)};
    memset(exp[0], 0xEE, 256);
    memset(exp[1], 0xEE, 32);
    expect_copy(&cg, &g, &rg, exp[0], (float *)(void *)exp[1]);
    expect_copy(&cu, &u, &ru, exp[0], (float *)(void *)exp[1]);
    rs_plan_h plan = plan_of(&w);
    assert_int_equal(only_record(plan, 2, 0)->path, RS_QUANT_PATH_PUBLISHER);
    assert_int_equal(only_record(plan, 2, 1)->path, RS_QUANT_PATH_RECEIVER);
    run_exact(&w, plan, exp);
    rs_plan_destroy(plan);
    free(exp[0]);
    free(exp[1]);
    refq_free(&rg);
    refq_free(&ru);
    tensor_free(&g);
    tensor_free(&u);
    world_free(&w);
}

/* One source quantized twice with one spec, into two params, both on the
 * receiver path: the two copies' derived names are the same text. Run
 * with no other name holding '#' (the planner adds them unindexed, one
 * id each, and hashes none), with a plain copy of a published tensor
 * named "y#raw" in the capture (interned, one id for both, their hashes
 * from the lookups of the tables, which may hold derived names), and
 * with a declared source "z#unread" that no table publishes (interned,
 * hashed before the analysis), and with the FP8 copies published (both
 * read on the publisher path, from one planned tensor: every shard of
 * the plan listed once): the same records, the derived copies named as
 * the spec says, every byte right. */
static void shared_derived_names(int variant)
{
    int hashed_name = variant == 1, served = variant == 3;
    world_t w;
    tensor_t x, y;
    refq_t r;
    int64_t blk[2] = {4, 8};
    world_init(&w);
    tensor_make(&x, "x", RS_DTYPE_BF16, 8, 16, 3);
    tensor_make(&y, "y#raw", RS_DTYPE_BF16, 4, 6, 4);
    ref_quantize(&x, RS_QUANT_FP8_BLOCK, blk, RS_DTYPE_F8E4M3, &r);
    add_param(&w, "wa", 2, 8, 16, RS_DTYPE_F8E4M3);
    add_param(&w, "wa_scale", 2, 2, 2, RS_DTYPE_F32);
    add_param(&w, "wb", 2, 4, 16, RS_DTYPE_F8E4M3);
    add_param(&w, "wb_scale", 2, 1, 2, RS_DTYPE_F32);
    if (hashed_name)
        add_param(&w, "p", 2, 4, 6, RS_DTYPE_BF16);
    qcopy_t ca = {"x", "wa", "wa_scale", RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3,
                  {4, 8}, 0, 8, 0, 16, 0, 16, 0, 2, {2, 2}, {2, 1}};
    qcopy_t cb = {"x", "wb", "wb_scale", RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3,
                  {4, 8}, 4, 4, 0, 16, 0, 16, 0, 2, {1, 2}, {2, 1}};
    rs_diag_t d;
    ASSERT_ST(add_qcopy(&w, &ca, &d), RS_OK, d);
    if (variant == 2) {
        int64_t zs[1] = {5};
        ASSERT_ST(rs_capture_declare_source(w.cap, "z#unread", 1, zs,
                                            RS_DTYPE_F32, &d),
                  RS_OK, d);
    }
    if (hashed_name) {
        int64_t shp[2] = {4, 6}, str[2] = {6, 1};
        rs_copy_desc_t c = {"y#raw", "p", NULL, 0, 0, 2, shp, str,
                            RS_DTYPE_BF16};
        ASSERT_ST(rs_capture_add_copy(w.cap, &c, &d), RS_OK, d);
    }
    ASSERT_ST(add_qcopy(&w, &cb, &d), RS_OK, d);
    int64_t rc[3] = {0, 4, 8}, cc[3] = {0, 8, 16};
    publish_grid(&w, &x, rc, 2, cc, 2);
    int64_t yr[2] = {0, 4}, yc[2] = {0, 6};
    if (hashed_name)
        publish_grid(&w, &y, yr, 1, yc, 1);
    if (served)
        publish_quant(&w, &x, &r, "fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, rc,
                      2);
    uint64_t nb[5] = {128, 16, 64, 8, 48};
    unsigned char *exp[5];
    for (int i = 0; i < 5; i++) {
        exp[i] = malloc(nb[i]);
        memset(exp[i], 0xEE, nb[i]);
    }
    expect_copy(&ca, &x, &r, exp[0], (float *)(void *)exp[1]);
    expect_copy(&cb, &x, &r, exp[2], (float *)(void *)exp[3]);
    if (hashed_name)
        memcpy(exp[4], y.raw, 48);
    rs_plan_h plan = plan_of(&w);
    rs_capture_h pc = rs_plan_capture(plan);
    for (size_t i = 0; i < 2; i++) {
        const rs_quantized_t *q = only_record(plan, 2, i);
        assert_int_equal(q->path, served ? RS_QUANT_PATH_PUBLISHER
                                         : RS_QUANT_PATH_RECEIVER);
        rs_copy_desc_t wc, sc;
        rs_capture_copy(pc, q->weight_copy, &wc);
        rs_capture_copy(pc, q->scale_copy, &sc);
        assert_string_equal(wc.src, "x#fp8_block:4x8:f8e4m3");
        assert_string_equal(sc.src, "x#fp8_block:4x8:f8e4m3#scale");
    }
    assert_true(rs_plan_is_complete(plan));
    /* both copies read the one FP8 tensor: each shard listed once */
    size_t nref;
    const rs_shard_ref_t *refs = rs_plan_shards(plan, &nref);
    for (size_t i = 0; i < nref; i++)
        for (size_t j = i + 1; j < nref; j++)
            assert_false(refs[i].session == refs[j].session &&
                         refs[i].addr == refs[j].addr);
    run_exact(&w, plan, exp);
    rs_plan_destroy(plan);
    for (int i = 0; i < 5; i++)
        free(exp[i]);
    refq_free(&r);
    tensor_free(&x);
    tensor_free(&y);
    world_free(&w);
}

static void test_shared_derived_names(void **state)
{
    (void)state;
    for (int variant = 0; variant < 4; variant++)
        shared_derived_names(variant);
}

/* The fallback reason of the plan's only fallback source. */
static void expect_refused(world_t *w, const char *src, const char *text)
{
    rs_plan_h plan = plan_of(w);
    const char *s, *reason;
    assert_false(rs_plan_is_complete(plan));
    assert_int_equal(rs_plan_num_fallback(plan), 1);
    rs_plan_fallback(plan, 0, &s, &reason);
    assert_string_equal(s, src);
    if (strstr(reason, "copy 0 into 'w'") == NULL || strstr(reason, text) == NULL)
        fail_msg("reason '%s' lacks '%s'", reason, text);
    const rs_quantized_t *q = only_record(plan, 1, 0);
    assert_int_equal(q->weight_copy, SIZE_MAX);
    assert_non_null(strstr(q->why, text));
    /* refused before any byte moves, nothing installed */
    run_t r = execute(w, plan, 1, NULL, NULL);
    assert_int_equal(r.st, RS_ERR_UNSUPPORTED);
    assert_int_equal(r.installs, 0);
    assert_true(r.untouched);
    rs_plan_destroy(plan);
}

/* Hostile quantized copies: refused per copy, naming it and the cause. */
static void test_hostile(void **state)
{
    (void)state;
    int64_t rc[2] = {0, 8}, cc[2] = {0, 16};
    rs_diag_t d;
    /* a scale region that is not the touched grid */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        c.scale_shape[1] = 3;
        c.scale_stride[0] = 3;
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 6);
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        expect_refused(&s.w, "x", "does not match the grid of touched blocks [2, 2]");
        single_free(&s);
    }
    /* a view that strides a dim (every other column) */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 8, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        rs_op_t ops[1] = {{.kind = RS_OP_SLICE, .arg = {1, 0, 16, 2}, .has = 15}};
        int64_t ds[2] = {8, 8}, dst[2] = {8, 1}, sb[2] = {4, 8}, ss[2] = {2, 2},
                sst[2] = {2, 1};
        rs_capture_destroy(s.w.cap);
        assert_int_equal(rs_capture_create(&s.w.cap), RS_OK);
        add_param(&s.w, "w", 2, 8, 8, RS_DTYPE_F8E4M3);
        add_param(&s.w, "w_scale", 1, 4, 0, RS_DTYPE_F32);
        rs_copy_desc_t cd = {"x", "w", ops, 1, 0, 2, ds, dst, RS_DTYPE_F8E4M3};
        rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, sb, "w_scale", 0,
                             2, ss, sst};
        ASSERT_ST(rs_capture_add_quant_copy(s.w.cap, &cd, &q, &d), RS_OK, d);
        expect_refused(&s.w, "x", "its ops stride or reorder dims");
        single_free(&s);
    }
    /* a destination leaving its param */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        rs_capture_destroy(s.w.cap);
        assert_int_equal(rs_capture_create(&s.w.cap), RS_OK);
        add_param(&s.w, "w", 2, 7, 16, RS_DTYPE_F8E4M3);
        add_param(&s.w, "w_scale", 1, 4, 0, RS_DTYPE_F32);
        ASSERT_ST(add_qcopy(&s.w, &c, &d), RS_OK, d);
        expect_refused(&s.w, "x", "destination region leaves its parameter");
        single_free(&s);
    }
    /* a source that is not bf16, f16 or f32 */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        single_setup(&s, RS_DTYPE_F8E5M2, 8, 16, &c, 4);
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        expect_refused(&s.w, "x", "only bf16, f16 and f32");
        single_free(&s);
    }
    /* a view that reorders dims (a transpose) */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 8, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        rs_op_t ops[2] = {{.kind = RS_OP_NARROW, .arg = {1, 0, 8}, .has = 7},
                          {.kind = RS_OP_T}};
        int64_t ds[2] = {8, 8}, dst[2] = {8, 1}, sb[2] = {4, 8}, ss[1] = {2},
                sst[1] = {1};
        rs_capture_destroy(s.w.cap);
        assert_int_equal(rs_capture_create(&s.w.cap), RS_OK);
        add_param(&s.w, "w", 2, 8, 8, RS_DTYPE_F8E4M3);
        add_param(&s.w, "w_scale", 1, 4, 0, RS_DTYPE_F32);
        rs_copy_desc_t cd = {"x", "w", ops, 2, 0, 2, ds, dst, RS_DTYPE_F8E4M3};
        rs_quant_desc_t q = {RS_QUANT_FP8_BLOCK, RS_DTYPE_F8E4M3, 2, sb, "w_scale", 0,
                             1, ss, sst};
        ASSERT_ST(rs_capture_add_quant_copy(s.w.cap, &cd, &q, &d), RS_OK, d);
        expect_refused(&s.w, "x", "in its dim order");
        single_free(&s);
    }
    /* nothing published at all */
    {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        expect_refused(&s.w, "x", "not published by any shard table");
        single_free(&s);
    }
}

/* A non-finite value: the run fails naming the tensor and the block, and
 * nothing is installed or written (serial and pipelined). */
static void test_non_finite(void **state)
{
    (void)state;
    for (int serial = 0; serial < 2; serial++) {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        /* element (5, 9) lies in block (1, 1); published with its digest */
        ref_float_store(RS_DTYPE_BF16, s.t.raw + (5 * 16 + 9) * 2, 0x7fc0);
        int64_t rc[3] = {0, 4, 8}, cc[2] = {0, 16};
        publish_grid(&s.w, &s.t, rc, 2, cc, 1);
        rs_plan_h plan = plan_of(&s.w);
        run_t r = execute(&s.w, plan, serial, NULL, NULL);
        assert_int_equal(r.st, RS_ERR_INPUT);
        if (strstr(r.diag.msg, "x") == NULL || strstr(r.diag.msg, "1, 1") == NULL)
            fail_msg("message: %s", r.diag.msg);
        assert_int_equal(r.installs, 0);
        assert_true(r.untouched);
        rs_plan_destroy(plan);
        single_free(&s);
    }
}

/* A torn publish: a shard changed after its digest was published fails
 * verification, on either path, before install. */
static void flip_first(world_t *w) { w->sh[0].data[3] ^= 0x40; }
static void flip_last(world_t *w) { w->sh[w->nsh - 1].data[1] ^= 0x40; }

static void test_stale_shards(void **state)
{
    (void)state;
    for (int path = 0; path < 2; path++) {
        single_t s;
        qcopy_t c = block_copy(0, 8, 0, 16, 4, 8);
        single_setup(&s, RS_DTYPE_BF16, 8, 16, &c, 4);
        int64_t rc[2] = {0, 8}, cc[2] = {0, 16};
        publish_grid(&s.w, &s.t, rc, 1, cc, 1);
        if (path == 1)
            publish_quant(&s.w, &s.t, &s.r, "fp8_block:4x8:f8e4m3", RS_DTYPE_F8E4M3, rc,
                          1);
        rs_plan_h plan = plan_of(&s.w);
        assert_int_equal(only_record(plan, 1, 0)->path,
                         path ? RS_QUANT_PATH_PUBLISHER : RS_QUANT_PATH_RECEIVER);
        run_t r = execute(&s.w, plan, 1, NULL, path ? flip_last : flip_first);
        assert_int_equal(r.st, RS_ERR_VERIFY);
        assert_int_equal(r.installs, 0);
        rs_plan_destroy(plan);
        single_free(&s);
    }
}

/* The plan JSON names the section, the path and the derived copies; the
 * summary says per path how many copies and bytes. */
static void test_plan_records(void **state)
{
    (void)state;
    single_t s;
    qcopy_t c = block_copy(4, 6, 0, 20, 4, 8);
    single_setup(&s, RS_DTYPE_BF16, 10, 20, &c, 6);
    int64_t rc[2] = {0, 10}, cc[2] = {0, 20};
    publish_grid(&s.w, &s.t, rc, 1, cc, 1);
    rs_plan_h plan = plan_of(&s.w);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    rs_diag_t d;
    ASSERT_ST(rs_plan_write_json(plan, f, &d), RS_OK, d);
    fclose(f);
    const char *want[] = {"\"quantized\": [", "\"path\": \"receiver\"",
                          "\"src\": \"x#fp8_block:4x8:f8e4m3#scale\"",
                          "\"spec\": \"fp8_block:4x8:f8e4m3\"", "\"weight_copy\": 1",
                          "\"box_shape\": [6, 20]"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("plan JSON lacks %s:\n%s", want[i], text);
    free(text);
    text = NULL;
    f = open_memstream(&text, &len);
    ASSERT_ST(rs_plan_write_summary(plan, f, &d), RS_OK, d);
    fclose(f);
    if (strstr(text, "quantized: 1 copies") == NULL ||
        strstr(text, "receiver 1 (240 B") == NULL)
        fail_msg("summary:\n%s", text);
    free(text);
    rs_plan_destroy(plan);
    single_free(&s);
}

/* Several quantized copies on the receiver path, pipelined over threads
 * (local-mt, waves of a box or two): each box is quantized in its wave,
 * the derived copies replayed at the end; byte for byte, and a NaN in one
 * box fails the run with nothing of any quantized copy written. */
/* rounds[serial]: the rounds expected under `budget` (0: unbounded) */
static void pipelined_boxes(uint64_t budget, const uint64_t rounds[2])
{
    static const char *const names[4] = {"a", "b", "c", "d"};
    static const char *const wn[4] = {"wa", "wb", "wc", "wd"};
    static const char *const sn[4] = {"sa", "sb", "sc", "sd"};
    backend = "local-mt";
    for (int poison = 0; poison < 2; poison++) {
        world_t w;
        tensor_t t[4];
        refq_t r[4];
        unsigned char *exp[8];
        world_init(&w);
        for (int k = 0; k < 4; k++) {
            qcopy_t c = block_copy(2, 10, 0, 24, 4, 8);
            c.src = names[k];
            c.param = wn[k];
            c.scale_param = sn[k];
            tensor_make(&t[k], names[k], RS_DTYPE_BF16, 12, 24, (uint64_t)k + 11);
            ref_quantize(&t[k], c.scheme, c.block, c.fmt, &r[k]);
            add_param(&w, wn[k], 2, 10, 24, RS_DTYPE_F8E4M3);
            add_param(&w, sn[k], 1, 3 * 3, 0, RS_DTYPE_F32);
            rs_diag_t d;
            ASSERT_ST(add_qcopy(&w, &c, &d), RS_OK, d);
            exp[2 * k] = malloc(240);
            exp[2 * k + 1] = malloc(36);
            memset(exp[2 * k], 0xEE, 240);
            memset(exp[2 * k + 1], 0xEE, 36);
            expect_copy(&c, &t[k], &r[k], exp[2 * k], (float *)(void *)exp[2 * k + 1]);
            if (poison && k == 2) /* an infinity in block (2, 1) of c */
                ref_float_store(RS_DTYPE_BF16, t[k].raw + (9 * 24 + 13) * 2, 0x7f80);
            int64_t rc[3] = {0, 6, 12}, cc[2] = {0, 24};
            publish_grid(&w, &t[k], rc, 2, cc, 1);
        }
        rs_plan_h plan = plan_of(&w);
        staging_budget = budget;
        for (int serial = 0; serial < 2; serial++) {
            run_t res = execute(&w, plan, serial, poison ? NULL : exp, NULL);
            if (budget > 0 && res.sg.staging_bytes > budget)
                fail_msg("staging %llu above the budget %llu",
                         (unsigned long long)res.sg.staging_bytes,
                         (unsigned long long)budget);
            if (budget > 0)
                assert_int_equal(res.sg.staging_rounds, rounds[serial]);
            if (!poison) {
                if (res.st != RS_OK || !res.exact)
                    fail_msg("serial %d: %s %s", serial, rs_status_str(res.st),
                             res.diag.msg);
                continue;
            }
            assert_int_equal(res.st, RS_ERR_INPUT);
            if (strstr(res.diag.msg, "c") == NULL || strstr(res.diag.msg, "2, 1") == NULL)
                fail_msg("message: %s", res.diag.msg);
            assert_int_equal(res.installs, 0);
            /* in rounds, the boxes of earlier rounds were replayed */
            if (budget == 0)
                assert_true(res.untouched);
        }
        staging_budget = 0;
        rs_plan_destroy(plan);
        for (int k = 0; k < 4; k++) {
            free(exp[2 * k]);
            free(exp[2 * k + 1]);
            refq_free(&r[k]);
            tensor_free(&t[k]);
        }
        world_free(&w);
    }
    backend = "local";
}

static void test_pipelined_boxes(void **state)
{
    (void)state;
    static const uint64_t one[2] = {1, 1};
    pipelined_boxes(0, one);
}

/* The same boxes under a staging budget of one box (12 KiB: its bf16
 * source, FP8 box and scales a page each): four rounds (serial or not: one
 * box does not fit half the budget), each box read,
 * quantized and replayed before the next is read into the same buffer;
 * byte for byte as the reference says, and a refused block still fails
 * the run before install. */
static void test_boxes_in_rounds(void **state)
{
    (void)state;
    static const uint64_t four[2] = {4, 4};
    pipelined_boxes(12288, four);
}

/* Under two boxes' worth (24 KiB) a serial run takes two rounds of two
 * boxes; a pipelined one four rounds of one box in two 12 KiB halves, each
 * box quantized and replayed on a pool thread while the next is read. */
static void test_boxes_in_overlapped_rounds(void **state)
{
    (void)state;
    static const uint64_t rounds[2] = {4, 2};
    pipelined_boxes(24576, rounds);
}

static uint64_t rng_state;
static int64_t rnd(int64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n > 0 ? (int64_t)((rng_state >> 33) % (uint64_t)n) : 0;
}

/* Cut points 0 = c[0] < .. < c[n] = len, n in 1..3; aligned to `align`
 * (inner cuts on multiples of it) when align > 0. */
static int random_cuts(int64_t len, int64_t align, int64_t *c)
{
    int n = 1;
    c[0] = 0;
    for (int k = 0; k < 2; k++) {
        int64_t at = 1 + rnd(len - 1 > 0 ? len - 1 : 1);
        if (align > 0)
            at = at / align * align;
        if (at > c[n - 1] && at < len)
            c[n++] = at;
    }
    c[n] = len;
    return n;
}

/* Random quantized copies (fixed seed): shapes with ragged edges, block
 * shapes, schemes and formats, views of any rows and columns, trainer
 * tilings, and now and then a publisher's FP8 copy tiled on block rows or
 * across them; every plan is complete and lands byte for byte as the
 * reference says, on the path the tiling allows. */
static void test_random_quant(void **state)
{
    (void)state;
    rng_state = 20261201;
    int paths[2] = {0, 0};
    for (int it = 0; it < 150; it++) {
        single_t s;
        int64_t R = 1 + rnd(20), C = 1 + rnd(24);
        int scheme = 1 + (int)rnd(3);
        qcopy_t c = block_copy(0, 1, 0, 1, 1 + rnd(6), 1 + rnd(9));
        c.scheme = scheme;
        c.fmt = rnd(2) ? RS_DTYPE_F8E4M3 : RS_DTYPE_F8E5M2;
        c.r0 = rnd(R);
        c.nr = 1 + rnd(R - c.r0);
        c.c0 = rnd(C);
        c.nc = 1 + rnd(C - c.c0);
        c.pcols = c.nc;
        int64_t blk[2];
        ref_blocks(scheme, c.block, (int64_t[2]){R, C}, blk);
        c.scale_shape[0] = (c.r0 + c.nr + blk[0] - 1) / blk[0] - c.r0 / blk[0];
        c.scale_shape[1] = (c.c0 + c.nc + blk[1] - 1) / blk[1] - c.c0 / blk[1];
        c.scale_stride[0] = c.scale_shape[1];
        single_setup(&s, rnd(2) ? RS_DTYPE_BF16 : RS_DTYPE_F32, R, C, &c,
                     c.scale_shape[0] * c.scale_shape[1]);
        int64_t rc[4], cc[4];
        int nr = random_cuts(R, 0, rc), nc = random_cuts(C, 0, cc);
        publish_grid(&s.w, &s.t, rc, nr, cc, nc);
        int served = (int)rnd(3); /* 0 none, 1 block rows, 2 any rows */
        if (served > 0) {
            char spec[64];
            rs_quant_desc_t q = {(rs_quant_scheme_t)scheme, c.fmt,
                                 scheme == RS_QUANT_FP8_BLOCK ? 2 : 0, c.block,
                                 NULL, 0, 0, NULL, NULL};
            assert_true(rs_quant_spec_format(&q, spec, sizeof(spec)) < sizeof(spec));
            int64_t qc[4];
            int nq = random_cuts(R, served == 1 ? blk[0] : 0, qc);
            publish_quant(&s.w, &s.t, &s.r, spec, c.fmt, qc, nq);
        }
        rs_plan_h plan = plan_of(&s.w);
        if (!rs_plan_is_complete(plan))
            fail_msg("iteration %d: plan incomplete", it);
        const rs_quantized_t *q = only_record(plan, 1, 0);
        if (served == 1)
            assert_int_equal(q->path, RS_QUANT_PATH_PUBLISHER);
        if (served == 0)
            assert_int_equal(q->path, RS_QUANT_PATH_RECEIVER);
        paths[q->path]++;
        run_t r = execute(&s.w, plan, (int)rnd(2), s.exp, NULL);
        if (r.st != RS_OK || !r.exact)
            fail_msg("iteration %d (%lldx%lld, scheme %d, path %d): %s %s", it,
                     (long long)R, (long long)C, scheme, (int)q->path,
                     rs_status_str(r.st), r.diag.msg);
        rs_plan_destroy(plan);
        single_free(&s);
    }
    /* both paths were exercised */
    assert_true(paths[0] > 20);
    assert_true(paths[1] > 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_receiver_block_rows),
        cmocka_unit_test(test_receiver_block_cuts),
        cmocka_unit_test(test_receiver_channel_columns),
        cmocka_unit_test(test_receiver_tensor_scale),
        cmocka_unit_test(test_receiver_block_128),
        cmocka_unit_test(test_publisher_path),
        cmocka_unit_test(test_publisher_replicas),
        cmocka_unit_test(test_publisher_straddles),
        cmocka_unit_test(test_publisher_wrong_scales),
        cmocka_unit_test(test_merged_params),
        cmocka_unit_test(test_shared_derived_names),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_stale_shards),
        cmocka_unit_test(test_plan_records),
        cmocka_unit_test(test_random_quant),
        cmocka_unit_test(test_pipelined_boxes),
        cmocka_unit_test(test_boxes_in_rounds),
        cmocka_unit_test(test_boxes_in_overlapped_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
