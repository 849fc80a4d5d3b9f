/* Whole refits between real layouts: every trainer shard materialized with
 * deterministic contents, every vllm rank captured, planned against all the
 * published tables and executed by the local transport into parameters
 * prefilled with 0xEE, then compared byte for byte with the parameters
 * vLLM's loaders would build straight from the full tensors
 * (tests/support/vllm_direct.c), with full coverage but for vocab padding.
 * Every layout pair runs twice: with whole shards, and with cut-aligned
 * tables (every shard split at the cuts of all inference ranks' captures),
 * where each plan must also read at most 1.01x the bytes it needs and few
 * descriptors per (tensor, receiver, publisher). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layout_env.h"
#include "reshard/exec.h"
#include "reshard_layout/layout.h"
#include "reshard_layout/model.h"
#include "reshard/plan.h"
#include "reshard/transport.h"
#include "geom/box.h"
#include "vllm_direct.h"

#define PREFILL 0xEE

/* Under AddressSanitizer every byte costs several times more: Qwen2.5-0.5B
 * then runs with a few of its layers (same shapes, same vocab). */
#if defined(__SANITIZE_ADDRESS__)
#define REFIT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REFIT_ASAN 1
#endif
#endif
#ifndef REFIT_ASAN
#define REFIT_ASAN 0
#endif

/* ---- trainer memory: one buffer per published shard ----------------- */

#define BOX_DIMS 4 /* the models here have tensors of rank <= 3 */

/* Where a region sits in its full tensor. */
typedef struct box_at {
    const char *tensor; /* the model's name, which outlives the test */
    int ndim;
    int64_t off[BOX_DIMS], ext[BOX_DIMS];
} box_at_t;

typedef struct rank_mem {
    rs_region_t *regions; /* addr, nbytes, local = the shard's own buffer */
    box_at_t *box;        /* per region: the (sub-)box it holds */
    size_t n, cap;
} rank_mem_t;

typedef struct trainer_mem {
    int64_t world;
    rank_mem_t *ranks;
    uint64_t bytes;
} trainer_mem_t;

typedef struct shard_ctx {
    rank_mem_t *rank;
    uint64_t *bytes;
} shard_ctx_t;

static rs_status_t on_shard(void *ctx, const rs_shard_desc_t *s)
{
    shard_ctx_t *c = ctx;
    rank_mem_t *rm = c->rank;
    uint64_t numel = 1;
    assert_int_equal(s->elsize, rs_dtype_size(s->dtype));
    for (int d = 0; d < s->ndim; d++)
        numel *= (uint64_t)s->shape[d];
    if (numel == 0) /* fsdp's trailing empty shards publish no bytes */
        return RS_OK;
    uint8_t *buf = malloc(numel * s->elsize);
    assert_non_null(buf);
    vd_fill_box(buf, s);
    if (rm->n == rm->cap) {
        rm->cap = rm->cap ? 2 * rm->cap : 64;
        rm->regions = realloc(rm->regions, rm->cap * sizeof(rs_region_t));
        rm->box = realloc(rm->box, rm->cap * sizeof(box_at_t));
        assert_non_null(rm->regions);
        assert_non_null(rm->box);
    }
    /* the walk places a rank's boxes at increasing addresses */
    assert_true(rm->n == 0 || rm->regions[rm->n - 1].addr < s->addr);
    assert_true(s->ndim <= BOX_DIMS);
    box_at_t *b = &rm->box[rm->n];
    b->tensor = s->tensor;
    b->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++) {
        b->off[d] = s->offset[d];
        b->ext[d] = s->shape[d];
    }
    rm->regions[rm->n++] = (rs_region_t){s->addr, numel * s->elsize, buf};
    *c->bytes += numel * s->elsize;
    return RS_OK;
}

static void trainer_materialize(rs_model_h m, const rs_layout_t *l,
                                rs_cuts_h cuts, trainer_mem_t *tm)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    tm->world = l->world;
    tm->bytes = 0;
    tm->ranks = calloc((size_t)l->world, sizeof(rank_mem_t));
    assert_non_null(tm->ranks);
    for (int64_t r = 0; r < l->world; r++) {
        shard_ctx_t c = {&tm->ranks[r], &tm->bytes};
        if (rs_layout_trainer_shards_cut(m, l, r, cuts, on_shard, &c, &d) !=
            RS_OK)
            fail_msg("trainer rank %lld: %s", (long long)r, d.msg);
    }
}

static void trainer_free(trainer_mem_t *tm)
{
    for (int64_t r = 0; r < tm->world; r++) {
        for (size_t i = 0; i < tm->ranks[r].n; i++)
            free((void *)tm->ranks[r].regions[i].local);
        free(tm->ranks[r].regions);
        free(tm->ranks[r].box);
    }
    free(tm->ranks);
}

/* ---- one inference rank ---------------------------------------------- */

typedef struct refit {
    rs_model_h model;
    rs_layout_t train, infer;
    const char *what;     /* "model: train -> infer", for messages */
    rs_sources_h sources;
    rs_cuts_h cuts;       /* cut-aligned tables: their cuts; else NULL */
    trainer_mem_t mem;
} refit_t;

/* The trainer rank behind plan session s. */
static rank_mem_t *session_mem(refit_t *rf, rs_plan_h plan, uint32_t s)
{
    const char *name = rs_plan_session_name(plan, s);
    long long r = -1;
    char tail;
    if (name == NULL || sscanf(name, "trainer-%lld%c", &r, &tail) != 1 ||
        r < 0 || r >= rf->mem.world)
        fail_msg("%s: unexpected session %s", rf->what, name ? name : "?");
    return &rf->mem.ranks[r];
}

static void connect_sessions(refit_t *rf, rs_transport_h t, rs_plan_h plan)
{
    rs_diag_t d;
    for (uint32_t s = 0; s < rs_plan_num_sessions(plan); s++) {
        const char *name = rs_plan_session_name(plan, s);
        rank_mem_t *rm = session_mem(rf, plan, s);
        rs_peer_t peer = {name, 0, rm->regions, rm->n, NULL, 0};
        if (rs_transport_connect(t, s, &peer, &d) != RS_OK)
            fail_msg("%s: connecting %s: %s", rf->what, name, d.msg);
    }
}

static void check_plan(refit_t *rf, int64_t rank, rs_plan_h plan)
{
    size_t nunc = 0;
    const rs_uncovered_t *unc = rs_plan_uncovered(plan, &nunc);
    if (nunc > 0)
        fail_msg("%s rank %lld: copy of %s into %s misses %llu elements",
                 rf->what, (long long)rank, unc[0].src, unc[0].param,
                 (unsigned long long)unc[0].missing_elements);
    if (rs_plan_num_fallback(plan) > 0) {
        const char *src, *why;
        rs_plan_fallback(plan, 0, &src, &why);
        fail_msg("%s rank %lld: %s in fallback: %s", rf->what,
                 (long long)rank, src, why);
    }
    assert_true(rs_plan_is_complete(plan));
}

static void check_coverage(refit_t *rf, int64_t rank, rs_exec_h x,
                           uint64_t padding)
{
    rs_coverage_t cov;
    rs_diag_t d;
    assert_int_equal(rs_exec_coverage(x, &d, &cov), RS_OK);
    if (cov.bytes_total - cov.bytes_covered != padding || cov.bytes_multi)
        fail_msg("%s rank %lld: %llu of %llu bytes covered (%llu written "
                 "twice), padding %llu", rf->what, (long long)rank,
                 (unsigned long long)cov.bytes_covered,
                 (unsigned long long)cov.bytes_total,
                 (unsigned long long)cov.bytes_multi,
                 (unsigned long long)padding);
}

/* Parameters that differ from the direct build; the first is described in
 * msg. Also checks names, shapes, dtypes and the padding count. */
static size_t compare(refit_t *rf, int64_t rank, rs_capture_h cap,
                      uint8_t **bufs, const vd_expect_t *x, uint64_t padding,
                      char *msg, size_t msglen)
{
    size_t np = rs_capture_num_params(cap), bad = 0;
    uint64_t expect_pad = 0;
    assert_int_equal(np, x->n);
    for (size_t i = 0; i < np; i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        const vd_param_t *e = vd_find(x, p.name);
        if (e == NULL)
            fail_msg("%s rank %lld: unexpected parameter %s", rf->what,
                     (long long)rank, p.name);
        assert_int_equal(p.ndim, e->ndim);
        for (int k = 0; k < p.ndim; k++)
            assert_int_equal(p.shape[k], e->shape[k]);
        assert_int_equal(p.dtype, e->dtype);
        expect_pad += (uint64_t)e->padding * rs_dtype_size(e->dtype);
        if (memcmp(bufs[i], e->bytes, p.nbytes) == 0)
            continue;
        uint64_t b = 0;
        while (bufs[i][b] == e->bytes[b])
            b++;
        if (bad++ == 0)
            snprintf(msg, msglen, "%s rank %lld: %s differs from vLLM's "
                     "loader at byte %llu of %llu (0x%02x, expected 0x%02x)",
                     rf->what, (long long)rank, p.name, (unsigned long long)b,
                     (unsigned long long)p.nbytes, bufs[i][b], e->bytes[b]);
    }
    assert_int_equal(expect_pad, padding);
    return bad;
}

/* ---- cut-aligned plans: bytes and descriptors ------------------------ */

/* One descriptor, attributed to the (tensor, publisher) whose sub-box it
 * starts in: `first` is the index of the tensor's first sub-box among its
 * publisher's regions (a rank's sub-boxes of one tensor are consecutive). */
typedef struct desc_ref {
    uint32_t session;
    size_t first;
} desc_ref_t;

static int cmp_desc(const void *a, const void *b)
{
    const desc_ref_t *x = a, *y = b;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

/* Index of the region holding address a (regions sorted by address). */
static size_t find_region(const rank_mem_t *rm, uint64_t a)
{
    size_t lo = 0, hi = rm->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (rm->regions[mid].addr <= a)
            lo = mid;
        else
            hi = mid;
    }
    if (rm->n == 0 || a < rm->regions[lo].addr ||
        a - rm->regions[lo].addr >= rm->regions[lo].nbytes)
        fail_msg("segment at 0x%llx reads no published sub-box",
                 (unsigned long long)a);
    return lo;
}

static void ref_segments(refit_t *rf, rs_plan_h plan, const rs_segment_t *seg,
                         size_t n, desc_ref_t *out, size_t *len)
{
    for (size_t i = 0; i < n; i++) {
        rank_mem_t *rm = session_mem(rf, plan, seg[i].session);
        size_t k = find_region(rm, seg[i].src_addr);
        while (k > 0 && rm->box[k - 1].tensor == rm->box[k].tensor)
            k--;
        out[(*len)++] = (desc_ref_t){seg[i].session, k};
    }
}

/* What one copy reads of its source: the box (start, ext) and whether its
 * elements land row-major in the destination (no transposing op, a
 * contiguous destination), which is when a sub-box of it that spans it in
 * every dim inside dim k is one destination run per index of dims < k. */
typedef struct copy_box {
    const char *src;
    int ndim, row_major;
    int64_t start[BOX_DIMS], ext[BOX_DIMS];
} copy_box_t;

static int dest_row_major(const rs_copy_desc_t *c)
{
    int64_t stride = 1;
    for (size_t i = 0; i < c->nops; i++)
        if (c->ops[i].kind == RS_OP_TRANSPOSE || c->ops[i].kind == RS_OP_T ||
            c->ops[i].kind == RS_OP_PERMUTE)
            return 0;
    for (int d = c->ndim - 1; d >= 0; d--) {
        if (c->dest_shape[d] > 1 && c->dest_stride[d] != stride)
            return 0;
        stride *= c->dest_shape[d];
    }
    return 1;
}

static copy_box_t *copy_boxes(rs_capture_h cap)
{
    size_t n = rs_capture_num_copies(cap);
    copy_box_t *out = calloc(n + 1, sizeof(*out));
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        rs_copy_desc_t c;
        rs_source_info_t src;
        rs__box_t box;
        size_t bad;
        char why[256];
        rs_capture_copy(cap, i, &c);
        long si = rs_capture_find_source(cap, c.src);
        assert_true(si >= 0);
        rs_capture_source(cap, (size_t)si, &src);
        assert_int_equal(rs__geom_resolve(src.ndim, src.shape, c.ops, c.nops,
                                          c.ndim, c.dest_shape, c.dest_stride,
                                          &box, &bad, why, sizeof(why)), RS_OK);
        assert_true(box.ndim <= BOX_DIMS);
        out[i].src = c.src;
        out[i].ndim = box.ndim;
        out[i].row_major = dest_row_major(&c);
        for (int d = 0; d < box.ndim; d++) {
            out[i].start[d] = box.start[d];
            out[i].ext[d] = box.count[d] == 0 ? 0 : box.step[d] *
                            (box.count[d] - 1) + 1;
            out[i].row_major &= box.step[d] == 1 || box.count[d] <= 1;
        }
    }
    return out;
}

/* Destination runs of sub-box b inside copy box c: prod of b's extents
 * over the dims outside the innermost dims where b spans c. A sub-box that
 * only partly overlaps a copy's box is a cut missing: a failure. A copy
 * that does not land row-major is held to one run per element. */
static uint64_t runs_in(const refit_t *rf, const box_at_t *b,
                        const copy_box_t *c)
{
    int inside = 1, k = b->ndim - 1;
    uint64_t runs = 1;
    for (int d = 0; d < b->ndim; d++) {
        int64_t lo = b->off[d], hi = lo + b->ext[d];
        int64_t clo = c->start[d], chi = clo + c->ext[d];
        if (hi <= clo || lo >= chi)
            return 0;
        inside &= lo >= clo && hi <= chi;
    }
    if (!inside)
        fail_msg("%s: a sub-box of '%s' straddles a copy's box", rf->what,
                 b->tensor);
    while (k > 0 && c->row_major && b->ext[k] == c->ext[k])
        k--;
    for (int d = 0; d < (c->row_major ? k : b->ndim); d++)
        runs *= (uint64_t)b->ext[d];
    if (!c->row_major && b->ndim > 0)
        runs *= (uint64_t)b->ext[b->ndim - 1];
    return runs;
}

/* The bound for one (tensor, publisher): over every copy of the tensor and
 * every sub-box of it the publisher holds, the sub-box's destination runs,
 * plus one for a sub-box large enough to be cut across replicas (each
 * replica's slice may start inside a run). */
static uint64_t run_bound(const refit_t *rf, const rank_mem_t *rm,
                          size_t first, const copy_box_t *cb, size_t ncopies,
                          uint64_t split_bytes)
{
    const char *tensor = rm->box[first].tensor;
    uint64_t bound = 0;
    for (size_t i = 0; i < ncopies; i++) {
        if (strcmp(cb[i].src, tensor) != 0)
            continue;
        for (size_t k = first; k < rm->n && rm->box[k].tensor == tensor; k++) {
            uint64_t runs = runs_in(rf, &rm->box[k], &cb[i]);
            bound += runs + (runs > 0 && rm->regions[k].nbytes >= split_bytes);
        }
    }
    return bound;
}

/* Every copy's box is a union of whole sub-boxes (its bounds are cuts), and
 * a whole sub-box is one contiguous run of the source, landing as the
 * destination runs runs_in counts: one when the sub-box spans the copy's
 * box in every inner dim (the case cut-aligned tables are for). */
static void check_descriptors(refit_t *rf, int64_t rank, rs_capture_h cap,
                              rs_plan_h plan)
{
    size_t n, nc, nf, total = 0, len = 0;
    const rs_segment_t *seg = rs_plan_segments(plan, &n);
    const rs_convert_t *cv = rs_plan_converts(plan, &nc);
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &nf);
    rs_plan_params_t pp;
    rs_plan_params_init(&pp);
    total = n;
    for (size_t i = 0; i < nc; i++)
        total += cv[i].nsegments;
    for (size_t i = 0; i < nf; i++)
        total += fp[i].nsegments;
    desc_ref_t *refs = calloc(total + 1, sizeof(*refs));
    copy_box_t *cb = copy_boxes(cap);
    assert_non_null(refs);
    ref_segments(rf, plan, seg, n, refs, &len);
    for (size_t i = 0; i < nc; i++)
        ref_segments(rf, plan, cv[i].segments, cv[i].nsegments, refs, &len);
    for (size_t i = 0; i < nf; i++)
        ref_segments(rf, plan, fp[i].segments, fp[i].nsegments, refs, &len);
    qsort(refs, len, sizeof(*refs), cmp_desc);
    for (size_t i = 0, j; i < len; i = j) {
        for (j = i; j < len && cmp_desc(&refs[i], &refs[j]) == 0; j++)
            ;
        rank_mem_t *rm = session_mem(rf, plan, refs[i].session);
        uint64_t bound = run_bound(rf, rm, refs[i].first, cb,
                                   rs_capture_num_copies(cap), pp.split_bytes);
        if (j - i > bound)
            fail_msg("%s rank %lld: %zu descriptors read '%s' from %s, more "
                     "than the %llu destination runs of its sub-boxes there",
                     rf->what, (long long)rank, j - i,
                     rm->box[refs[i].first].tensor,
                     rs_plan_session_name(plan, refs[i].session),
                     (unsigned long long)bound);
    }
    free(cb);
    free(refs);
}

/* A cut-aligned plan reads what it needs: at most 1.01x the needed bytes. */
static void check_cut_aligned(refit_t *rf, int64_t rank, rs_capture_h cap,
                              rs_plan_h plan)
{
    rs_plan_stats_t st;
    rs_plan_stats(plan, &st);
    assert_true(st.needed_bytes > 0);
    if ((double)st.bytes_planned > 1.01 * (double)st.needed_bytes)
        fail_msg("%s rank %lld (cut-aligned): %llu bytes planned for %llu "
                 "needed", rf->what, (long long)rank,
                 (unsigned long long)st.bytes_planned,
                 (unsigned long long)st.needed_bytes);
    check_descriptors(rf, rank, cap, plan);
}

/* Plans `cap` for `rank`, executes it and returns how many parameters
 * differ from the direct build in x (0 for a correct refit). */
static size_t refit_rank(refit_t *rf, int64_t rank, rs_capture_h cap,
                         uint64_t padding, const vd_expect_t *x, char *msg,
                         size_t msglen)
{
    rs_plan_params_t pp;
    rs_plan_h plan;
    rs_transport_h t;
    rs_exec_h ex;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_plan_params_init(&pp);
    pp.replica_salt = (uint64_t)rank;
    if (rs_plan_build(cap, rf->sources, &pp, &d, &plan) != RS_OK)
        fail_msg("%s rank %lld: %s", rf->what, (long long)rank, d.msg);
    check_plan(rf, rank, plan);
    if (rf->cuts != NULL)
        check_cut_aligned(rf, rank, cap, plan);
    assert_int_equal(rs_transport_create(NULL, &d, &t), RS_OK);
    connect_sessions(rf, t, plan);
    assert_int_equal(rs_exec_create(plan, t, NULL, &d, &ex), RS_OK);
    check_coverage(rf, rank, ex, padding);
    size_t np = rs_capture_num_params(cap);
    uint8_t **bufs = calloc(np + 1, sizeof(uint8_t *));
    assert_non_null(bufs);
    for (size_t i = 0; i < np; i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        bufs[i] = malloc(p.nbytes ? p.nbytes : 1);
        assert_non_null(bufs[i]);
        memset(bufs[i], PREFILL, p.nbytes);
        assert_int_equal(rs_exec_bind(ex, i, bufs[i], p.nbytes, RS_MEM_HOST, &d), RS_OK);
    }
    if (rs_exec_run(ex, &d) != RS_OK)
        fail_msg("%s rank %lld: %s", rf->what, (long long)rank, d.msg);
    size_t bad = compare(rf, rank, cap, bufs, x, padding, msg, msglen);
    for (size_t i = 0; i < np; i++)
        free(bufs[i]);
    free(bufs);
    rs_exec_destroy(ex);
    rs_transport_destroy(t);
    rs_plan_destroy(plan);
    return bad;
}

static rs_capture_h capture(refit_t *rf, int64_t rank, uint64_t *padding)
{
    rs_capture_h cap = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rs_layout_capture(rf->model, &rf->infer, rank, &d, &cap, padding) !=
        RS_OK)
        fail_msg("%s rank %lld: %s", rf->what, (long long)rank, d.msg);
    return cap;
}

/* ---- drivers --------------------------------------------------------- */

static void refit_open(refit_t *rf, rs_model_h m, const char *train,
                       const char *infer, int cut_aligned, char *what,
                       size_t whatlen)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    memset(rf, 0, sizeof(*rf));
    snprintf(what, whatlen, "%s: %s -> %s%s", rs_model_config(m)->model_type,
             train, infer, cut_aligned ? " (cut-aligned)" : "");
    rf->what = what;
    rf->model = m;
    rf->train = lx_layout(m, train);
    rf->infer = lx_layout(m, infer);
    if (cut_aligned &&
        rs_layout_infer_cuts(m, &rf->infer, &d, &rf->cuts) != RS_OK)
        fail_msg("%s: %s", what, d.msg);
    assert_int_equal(rs_sources_create(&rf->sources), RS_OK);
    if (rs_layout_publish_all_cut(m, &rf->train, rf->cuts, rf->sources, &d) !=
        RS_OK)
        fail_msg("%s: %s", what, d.msg);
    trainer_materialize(m, &rf->train, rf->cuts, &rf->mem);
    /* every replica set publishes the whole model once */
    assert_true(rf->mem.bytes >= rs_model_num_bytes(m));
}

static void refit_close(refit_t *rf)
{
    trainer_free(&rf->mem);
    rs_sources_destroy(rf->sources);
    rs_cuts_destroy(rf->cuts);
}

/* Every inference rank of one layout pair. Without expert parallelism the
 * dp replicas of a rank hold the same parameters, so the direct build of a
 * (tp, pp) position serves all its replicas. */
static void check_pair_as(rs_model_h m, const char *train, const char *infer,
                          int cut_aligned)
{
    refit_t rf;
    char what[256], msg[512] = "";
    refit_open(&rf, m, train, infer, cut_aligned, what, sizeof(what));
    int64_t plane = rf.infer.tp * rf.infer.pp, dp = rf.infer.dp;
    int shared = rf.infer.ep == 1;
    vd_expect_t x;
    vd_init(&x, m, &rf.infer, PREFILL);
    assert_int_equal(rf.infer.world, plane * dp);
    for (int64_t p = 0; p < plane; p++) {
        for (int64_t k = 0; k < dp; k++) {
            int64_t rank = p + plane * k;
            uint64_t padding = 0;
            if (k == 0 || !shared) {
                vd_free(&x);
                vd_expect_rank(&x, rank);
            }
            rs_capture_h cap = capture(&rf, rank, &padding);
            if (refit_rank(&rf, rank, cap, padding, &x, msg, sizeof(msg)))
                fail_msg("%s", msg);
            rs_capture_destroy(cap);
        }
    }
    vd_free(&x);
    refit_close(&rf);
}

/* Whole shards, then cut-aligned tables: both byte-exact. */
static void check_pair(rs_model_h m, const char *train, const char *infer)
{
    check_pair_as(m, train, infer, 0);
    check_pair_as(m, train, infer, 1);
}

static rs_model_h load_text(const char *text, const char *origin)
{
    rs_diag_t d;
    rs_model_h m = NULL;
    rs_diag_clear(&d);
    if (rs_model_load_string(text, strlen(text), origin, &d, &m) != RS_OK)
        fail_msg("%s: %s", origin, d.msg);
    return m;
}

/* The bundled config, with num_hidden_layers cut to `layers` when > 0. */
static rs_model_h load_example(const char *file, int layers)
{
    char *text = lx_read_model_file(file), *fixed = text;
    if (layers > 0) {
        const char *key = "\"num_hidden_layers\":";
        char *at = strstr(text, key);
        assert_non_null(at);
        char *end = at + strlen(key);
        strtol(end, &end, 10);
        size_t len = strlen(text) + 32;
        fixed = malloc(len);
        assert_non_null(fixed);
        snprintf(fixed, len, "%.*s %d%s", (int)(at + strlen(key) - text), text,
                 layers, end);
    }
    rs_model_h m = load_text(fixed, file);
    if (fixed != text)
        free(fixed);
    free(text);
    return m;
}

static void test_qwen2_5_0_5b(void **state)
{
    (void)state;
    rs_model_h m = load_example("qwen2.5-0.5b.json", REFIT_ASAN ? 3 : 0);
    if (!REFIT_ASAN)
        assert_int_equal(rs_model_num_params(m), 494032768);
    /* 14 heads: vllm tp is 1, 2 or 7 */
    check_pair(m, "fsdp:4", "vllm:tp=2");
    check_pair(m, "megatron:tp=2,pp=2", "vllm:tp=2");
    check_pair(m, "megatron:tp=2,dp=2", "vllm:tp=2,dp=2");
    rs_model_destroy(m);
}

static void test_tiny_moe(void **state)
{
    (void)state;
    rs_model_h m = load_example("tiny-moe.json", 0);
    check_pair(m, "fsdp:4", "vllm:tp=2");
    check_pair(m, "megatron:tp=2,pp=2", "vllm:tp=4");
    check_pair(m, "megatron:ep=4", "vllm:tp=2,ep=2");
    check_pair(m, "megatron:tp=2,dp=2", "vllm:tp=2,dp=2");
    check_pair(m, "megatron:tp=2,ep=4", "vllm:tp=2,ep=4,dp=2");
    check_pair(m, "megatron:tp=2,ep=2,etp=2", "vllm:tp=4");
    check_pair(m, "fsdp:3", "vllm:tp=2,pp=3");
    check_pair(m, "megatron:tp=4,pp=3,ep=2", "vllm:tp=1,ep=2,dp=2");
    rs_model_destroy(m);
}

static void test_tiny_deepseek(void **state)
{
    (void)state;
    rs_model_h m = load_example("tiny-deepseek.json", 0);
    check_pair(m, "fsdp:4", "vllm:tp=2");
    check_pair(m, "megatron:tp=2,pp=2", "vllm:tp=4");
    check_pair(m, "megatron:ep=4", "vllm:tp=2,ep=2");
    check_pair(m, "megatron:tp=2,dp=2,ep=2", "vllm:tp=2,dp=2,ep=4");
    check_pair(m, "megatron:tp=4,pp=3", "vllm:tp=2,pp=2,dp=2");
    rs_model_destroy(m);
}

static void test_tiny_llama(void **state)
{
    (void)state;
    rs_model_h m = load_example("tiny-llama.json", 0);
    check_pair(m, "fsdp:4", "vllm:tp=2");
    check_pair(m, "megatron:tp=2,pp=2", "vllm:tp=4");
    check_pair(m, "megatron:tp=4,dp=2", "vllm:tp=2,pp=2,dp=2");
    rs_model_destroy(m);
}

/* ---- the comparison catches a broken refit --------------------------- */

/* A copy of `cap` in which copies a and b trade destination offsets: what a
 * planner or layout that sends the gate rows of an expert where its up rows
 * belong would produce. */
static rs_capture_h swapped(rs_capture_h cap, size_t a, size_t b)
{
    rs_capture_h out;
    assert_int_equal(rs_capture_create(&out), RS_OK);
    for (size_t i = 0; i < rs_capture_num_params(cap); i++) {
        rs_param_info_t p;
        rs_capture_param(cap, i, &p);
        assert_int_equal(rs_capture_add_param(out, p.name, p.ndim, p.shape,
                                              p.dtype, NULL), RS_OK);
    }
    rs_copy_desc_t ca, cb;
    rs_capture_copy(cap, a, &ca);
    rs_capture_copy(cap, b, &cb);
    for (size_t i = 0; i < rs_capture_num_copies(cap); i++) {
        rs_copy_desc_t c;
        rs_capture_copy(cap, i, &c);
        if (i == a)
            c.dest_offset = cb.dest_offset;
        else if (i == b)
            c.dest_offset = ca.dest_offset;
        assert_int_equal(rs_capture_add_copy(out, &c, NULL), RS_OK);
    }
    return out;
}

/* Two copies of the same shape into the same parameter, different
 * sources (the gate and up halves of an expert's w13 slot, say). */
static int find_twins(rs_capture_h cap, size_t *a_p, size_t *b_p)
{
    size_t n = rs_capture_num_copies(cap);
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++) {
            rs_copy_desc_t ca, cb;
            rs_capture_copy(cap, a, &ca);
            rs_capture_copy(cap, b, &cb);
            if (strcmp(ca.param, cb.param) != 0 ||
                strcmp(ca.src, cb.src) == 0 || ca.ndim != cb.ndim ||
                ca.dest_offset == cb.dest_offset)
                continue;
            int same = 1;
            for (int k = 0; k < ca.ndim; k++)
                same &= ca.dest_shape[k] == cb.dest_shape[k] &&
                        ca.dest_stride[k] == cb.dest_stride[k];
            if (same) {
                *a_p = a;
                *b_p = b;
                return 1;
            }
        }
    return 0;
}

static void test_detects_broken_refit(void **state)
{
    (void)state;
    rs_model_h m = load_example("tiny-moe.json", 0);
    refit_t rf;
    char what[256], msg[512] = "";
    refit_open(&rf, m, "megatron:tp=2,ep=2", "vllm:tp=2", 0, what,
               sizeof(what));
    vd_expect_t x;
    vd_init(&x, m, &rf.infer, PREFILL);
    vd_expect_rank(&x, 1);
    uint64_t padding = 0;
    rs_capture_h cap = capture(&rf, 1, &padding);
    assert_int_equal(refit_rank(&rf, 1, cap, padding, &x, msg, sizeof(msg)), 0);
    size_t a = 0, b = 0;
    assert_true(find_twins(cap, &a, &b));
    rs_capture_h bad = swapped(cap, a, b);
    rs_copy_desc_t ca;
    rs_capture_copy(cap, a, &ca);
    assert_int_equal(refit_rank(&rf, 1, bad, padding, &x, msg, sizeof(msg)), 1);
    assert_non_null(strstr(msg, ca.param));
    rs_capture_destroy(bad);
    rs_capture_destroy(cap);
    vd_free(&x);
    refit_close(&rf);
    rs_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detects_broken_refit),
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_moe),
        cmocka_unit_test(test_tiny_deepseek),
        cmocka_unit_test(test_qwen2_5_0_5b),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
