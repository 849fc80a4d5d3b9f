/* Fuzz target for the planner end to end. The input decodes into a few
 * source tensors, their shards over three sessions (replicas, gaps, high
 * addresses, hostile offsets), parameters and copies with random op chains
 * and destinations. The plan is executed twice: by the checking mini
 * executor (tests/support; counts writes per byte) and by rs_exec over the
 * `local` transport into parameters between poisoned guard zones. Checked:
 * no read outside a shard, no write outside a parameter (ASan and canary
 * guards), no byte written more often than copies cover it (exactly that
 * often when the plan is complete), every singly covered element holds the
 * source value the op chain selects (gt_tensor replay), rs_exec writes
 * exactly the bytes the plan names, with the same values, and a source the
 * capture declares with another shape or dtype than published is never
 * read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"
#include "geom/view.h"
#include "gt_tensor.h"
#include "mini_exec.h"
#include "reshard/exec.h"
#include "reshard/plan.h"
#include "reshard/transport.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define FZ_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FZ_POISON(p, n) ((void)(p), (void)(n))
#define FZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz_plan: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                  \
            abort();                                                         \
        }                                                                    \
    } while (0)

#define NSESS 3
#define MAX_SRC 3
#define MAX_SHARDS 16
#define MAX_PARAMS 3
#define MAX_COPIES 6
#define MAX_BYTES (1u << 16) /* larger buffers are planned, not executed */
#define GUARD 64
#define CANARY 0xC3

typedef struct fsrc {
    char name[16];
    int ndim;
    int64_t shape[RS_MAX_DIMS];
    rs_dtype_t dtype;
    int published; /* some shard of it was accepted */
    int declared;  /* 0 no, 1 as published, 2 another shape, 3 another dtype */
} fsrc_t;

typedef struct fshard {
    int src, sess;
    int64_t off[RS_MAX_DIMS], shape[RS_MAX_DIMS];
    uint64_t addr, nbytes;
    uint8_t *data;
} fshard_t;

typedef struct fparam {
    char name[16];
    int64_t shape[2];
    int ndim;
    rs_dtype_t dtype;
    uint64_t nbytes;
    uint8_t *mini;  /* the mini executor's target */
    uint8_t *block; /* guard | param | guard, for rs_exec */
    uint8_t *first; /* rs_exec's output of the first run */
} fparam_t;

typedef struct fcopy {
    int src, param; /* -1: an unknown source or undeclared param */
    gt_tensor_t gt;
    int gt_ok;
    int64_t dest_offset;
    int ndim;
    int64_t dshape[RS_MAX_DIMS], dstride[RS_MAX_DIMS];
    rs_dtype_t dtype;
} fcopy_t;

typedef struct world {
    int nsrc, nshards, nparams, ncopies;
    fsrc_t src[MAX_SRC];
    fshard_t shards[MAX_SHARDS];
    fparam_t params[MAX_PARAMS];
    fcopy_t copies[MAX_COPIES];
    int runnable; /* every buffer small enough to exist */
    int replayed; /* the ground truth knows every copy (small sources) */
    rs_capture_h cap;
    rs_sources_h srcs;
} world_t;

static const char *const sess_name[NSESS] = {"t0", "t1", "t2"};

static rs_dtype_t pick_dtype(fz_in_t *in)
{
    return fz_below(in, 2) ? RS_DTYPE_F32 : RS_DTYPE_BF16;
}

/* The value a trainer holds at element g of source s: finite, exact in
 * f32, and distinct enough that a misplaced element shows. */
static void source_value(const world_t *w, int s, int64_t g, uint8_t *out)
{
    uint64_t h = ((uint64_t)s + 1) * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)g * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    if (w->src[s].dtype == RS_DTYPE_BF16) {
        uint16_t v = (uint16_t)(h & 0x7f7f);
        memcpy(out, &v, 2);
    } else {
        float f = (float)((int64_t)(h % 20001) - 10000) / 64.0f;
        memcpy(out, &f, 4);
    }
}

static void make_sources(fz_in_t *in, world_t *w)
{
    w->nsrc = 1 + (int)fz_below(in, MAX_SRC);
    for (int s = 0; s < w->nsrc; s++) {
        fsrc_t *f = &w->src[s];
        snprintf(f->name, sizeof(f->name), "s%d", s);
        f->ndim = 1 + (int)fz_below(in, 3);
        for (int d = 0; d < f->ndim; d++)
            f->shape[d] = fz_dim(in, 0, 6);
        f->dtype = pick_dtype(in);
    }
}

static void fill_shard(const world_t *w, fshard_t *sh)
{
    const fsrc_t *f = &w->src[sh->src];
    size_t el = rs_dtype_size(f->dtype);
    int64_t n = (int64_t)(sh->nbytes / el), m[RS_MAX_DIMS];
    sh->data = malloc(sh->nbytes ? sh->nbytes : 1);
    CHECK(sh->data != NULL);
    for (int64_t k = 0; k < n; k++) {
        int64_t g = 0;
        gt_unravel(k, f->ndim, sh->shape, m);
        for (int d = 0; d < f->ndim; d++)
            g = g * f->shape[d] + m[d] + sh->off[d];
        source_value(w, sh->src, g, sh->data + (size_t)k * el);
    }
}

/* One shard: mostly inside its tensor, sometimes not; the sources decide. */
static void add_shard(fz_in_t *in, world_t *w, uint64_t *next)
{
    fshard_t *sh = &w->shards[w->nshards];
    sh->src = (int)fz_below(in, w->nsrc);
    sh->sess = (int)fz_below(in, NSESS);
    const fsrc_t *f = &w->src[sh->src];
    int hostile = fz_below(in, 16) == 0;
    uint64_t n = rs_dtype_size(f->dtype);
    for (int d = 0; d < f->ndim; d++) {
        int64_t full = f->shape[d] >= 0 && f->shape[d] < 64 ? f->shape[d] : 8;
        sh->off[d] = hostile ? fz_dim(in, -2, 8) : fz_below(in, full + 1);
        sh->shape[d] = hostile ? fz_dim(in, -2, 8)
                               : fz_below(in, full - sh->off[d] + 1);
        n *= sh->shape[d] >= 0 && sh->shape[d] < 4096 ? (uint64_t)sh->shape[d] : 4096;
    }
    sh->nbytes = n;
    sh->addr = next[sh->sess] + (uint64_t)fz_below(in, 3) * 8;
    size_t elsize = rs_dtype_size(f->dtype);
    if (fz_below(in, 32) == 0)
        elsize = 8; /* disagrees with the dtype */
    rs_shard_desc_t desc = {f->name, f->dtype, elsize, f->ndim, f->shape,
                            sess_name[sh->sess], sh->sess, sh->addr,
                            sh->off, sh->shape, NULL};
    rs_diag_t diag;
    if (rs_sources_add_shard(w->srcs, &desc, &diag) != RS_OK) {
        CHECK(diag.msg[0] != '\0');
        return;
    }
    w->src[sh->src].published = 1;
    next[sh->sess] = sh->addr + sh->nbytes;
    if (sh->nbytes > MAX_BYTES) {
        w->runnable = 0;
        return;
    }
    fill_shard(w, sh);
    w->nshards++;
}

static void make_shards(fz_in_t *in, world_t *w)
{
    static const uint64_t bases[] = {4096, (uint64_t)1 << 40,
                                     UINT64_MAX - ((uint64_t)1 << 20)};
    uint64_t next[NSESS];
    for (int s = 0; s < NSESS; s++)
        next[s] = bases[fz_below(in, 3)] + (uint64_t)s * 65536;
    int n = (int)fz_below(in, MAX_SHARDS + 1);
    for (int i = 0; i < n; i++)
        add_shard(in, w, next);
}

static void make_params(fz_in_t *in, world_t *w)
{
    w->nparams = 1 + (int)fz_below(in, MAX_PARAMS);
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        snprintf(f->name, sizeof(f->name), "p%d", p);
        f->ndim = 1 + (int)fz_below(in, 2);
        for (int d = 0; d < f->ndim; d++)
            f->shape[d] = fz_dim(in, 0, 40);
        f->dtype = pick_dtype(in);
        rs_diag_t diag;
        if (rs_capture_add_param(w->cap, f->name, f->ndim, f->shape, f->dtype,
                                 &diag) != RS_OK) {
            CHECK(diag.msg[0] != '\0');
            f->ndim = -1; /* undeclared: copies into it are refused */
            continue;
        }
        rs_param_info_t info;
        rs_capture_param(w->cap, (size_t)rs_capture_find_param(w->cap, f->name),
                         &info);
        f->nbytes = info.nbytes;
        if (f->nbytes > MAX_BYTES)
            w->runnable = 0;
    }
}

/* Destination strides: row-major, reversed, padded or arbitrary. */
static void pick_dest(fz_in_t *in, fcopy_t *c, const rs__view_t *v)
{
    int mode = (int)fz_below(in, 4);
    uint64_t acc = 1; /* wraps harmlessly on hostile shapes */
    c->ndim = v->ndim;
    memcpy(c->dshape, v->shape, sizeof(c->dshape));
    for (int k = 0; k < v->ndim; k++) {
        int i = mode == 1 ? k : v->ndim - 1 - k;
        c->dstride[i] = mode == 3 ? fz_small(in, 0) : (int64_t)(acc & INT64_MAX);
        acc *= (uint64_t)v->shape[i] * (uint64_t)(mode == 2 ? 1 + fz_below(in, 2) : 1);
    }
}

static void add_copy(fz_in_t *in, world_t *w)
{
    fcopy_t *c = &w->copies[w->ncopies];
    fz_chain_t chain;
    memset(c, 0, sizeof(*c));
    c->src = (int)fz_below(in, w->nsrc + 1);
    c->param = (int)fz_below(in, w->nparams + 1);
    if (c->src == w->nsrc)
        c->src = -1;
    if (c->param == w->nparams || w->params[c->param].ndim < 0)
        c->param = -1;
    fz_chain(in, &chain);
    const fsrc_t *f = c->src >= 0 ? &w->src[c->src] : &w->src[0];
    rs__view_t v;
    if (rs__view_init(&v, f->ndim, f->shape) != RS_OK)
        v.ndim = 0;
    for (size_t i = 0; i < chain.nops; i++)
        if (rs__view_apply(&v, &chain.ops[i], NULL, 0) != RS_OK)
            break;
    pick_dest(in, c, &v);
    int64_t pnumel = 1;
    if (c->param >= 0)
        for (int d = 0; d < w->params[c->param].ndim; d++)
            pnumel *= w->params[c->param].shape[d] & 0xffff;
    c->dest_offset = fz_below(in, 8) == 0 ? fz_dim(in, -4, 40) : fz_below(in, pnumel);
    c->dtype = c->param >= 0 ? w->params[c->param].dtype : RS_DTYPE_BF16;
    if (fz_below(in, 16) == 0)
        c->dtype = c->dtype == RS_DTYPE_F32 ? RS_DTYPE_BF16 : RS_DTYPE_F32;
    rs_copy_desc_t cd = {c->src >= 0 ? f->name : "unknown",
                         c->param >= 0 ? w->params[c->param].name : "undeclared",
                         chain.ops, chain.nops, c->dest_offset, c->ndim,
                         c->dshape, c->dstride, c->dtype};
    rs_diag_t diag;
    if (rs_capture_add_copy(w->cap, &cd, &diag) != RS_OK) {
        CHECK(diag.msg[0] != '\0');
        return;
    }
    if (c->src >= 0 && w->runnable) {
        gt_tensor_t full;
        if (!fz_chain_replayable(&chain, f->ndim, f->shape) ||
            gt_full(f->ndim, f->shape, &full) != GT_OK)
            w->replayed = 0; /* too large or hostile for the replay */
        else
            gt_free(&full);
        if (w->replayed)
            c->gt_ok = gt_replay(f->ndim, f->shape, chain.ops, chain.nops,
                                 &c->gt, NULL, 0) == GT_OK;
    }
    w->ncopies++;
}

static void world_free(world_t *w)
{
    for (int i = 0; i < w->nshards; i++)
        free(w->shards[i].data);
    for (int p = 0; p < w->nparams; p++) {
        free(w->params[p].mini);
        free(w->params[p].block);
        free(w->params[p].first);
    }
    for (int c = 0; c < w->ncopies; c++)
        if (w->copies[c].gt_ok)
            gt_free(&w->copies[c].gt);
    rs_capture_destroy(w->cap);
    rs_sources_destroy(w->srcs);
}

/* ---- ground truth ------------------------------------------------------ */

/* Destination element of view position k of copy c; -1 when it
 * overflows (a hostile offset the planner must refuse). */
static int64_t dest_elem(const fcopy_t *c, int64_t k)
{
    int64_t m[RS_MAX_DIMS], e = c->dest_offset, t;
    gt_unravel(k, c->gt.ndim, c->gt.shape, m);
    for (int d = 0; d < c->gt.ndim; d++)
        if (__builtin_mul_overflow(m[d], c->dstride[d], &t) ||
            __builtin_add_overflow(e, t, &e))
            return -1;
    return e;
}

/* Per byte of param p: how many copy elements land there (saturating). */
static uint8_t *cover_of(const world_t *w, int p)
{
    const fparam_t *f = &w->params[p];
    size_t el = rs_dtype_size(f->dtype);
    uint8_t *cover = calloc(f->nbytes + 1, 1);
    CHECK(cover != NULL);
    for (int i = 0; i < w->ncopies; i++) {
        const fcopy_t *c = &w->copies[i];
        if (c->param != p || !c->gt_ok)
            continue;
        for (int64_t k = 0; k < c->gt.numel; k++) {
            int64_t e = dest_elem(c, k);
            if (e < 0 || (uint64_t)e >= f->nbytes / el)
                continue; /* the planner must refuse such a copy */
            for (size_t b = 0; b < el; b++)
                if (cover[(size_t)e * el + b] < 255)
                    cover[(size_t)e * el + b]++;
        }
    }
    return cover;
}

/* Every element written once by a singly covering copy holds the cast
 * source value its op chain selects. */
static void check_values(const world_t *w, int p, const uint8_t *cover,
                         const uint8_t *writes)
{
    const fparam_t *f = &w->params[p];
    size_t el = rs_dtype_size(f->dtype);
    for (int i = 0; i < w->ncopies; i++) {
        const fcopy_t *c = &w->copies[i];
        if (c->param != p || !c->gt_ok || c->dtype != f->dtype)
            continue;
        for (int64_t k = 0; k < c->gt.numel; k++) {
            int64_t e = dest_elem(c, k);
            if (e < 0 || (uint64_t)e >= f->nbytes / el ||
                cover[(size_t)e * el] != 1 || writes[(size_t)e * el] != 1)
                continue;
            uint8_t raw[8], want[8];
            source_value(w, c->src, c->gt.idx[k], raw);
            CHECK(mini_exec_cast(w->src[c->src].dtype, raw, f->dtype, want));
            CHECK(memcmp(f->mini + (size_t)e * el, want, el) == 0);
        }
    }
}

/* ---- the mini executor ------------------------------------------------- */

/* Returns the write counts per param (owned by mx). */
static mini_exec_t *run_mini(world_t *w, rs_plan_h plan)
{
    mini_exec_t *mx = mini_exec_create(plan);
    for (int i = 0; i < w->nshards; i++) {
        const fshard_t *sh = &w->shards[i];
        mini_exec_add_shard(mx, sess_name[sh->sess], sh->addr, sh->data,
                            sh->nbytes);
    }
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        long idx = rs_capture_find_param(w->cap, f->name);
        if (f->ndim < 0 || idx < 0)
            continue;
        f->mini = calloc(f->nbytes + 1, 1);
        CHECK(f->mini != NULL);
        mini_exec_set_param(mx, (size_t)idx, f->mini);
    }
    char err[512] = "";
    if (mini_exec_run(mx, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_plan: the plan breaks a rule: %s\n", err);
        abort();
    }
    return mx;
}

static void check_mini(world_t *w, rs_plan_h plan, mini_exec_t *mx)
{
    int complete = rs_plan_is_complete(plan);
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        long idx = rs_capture_find_param(w->cap, f->name);
        if (f->ndim < 0 || idx < 0)
            continue;
        const uint8_t *writes = mini_exec_param_writes(mx, (size_t)idx);
        uint8_t *cover = cover_of(w, p);
        for (uint64_t b = 0; b < f->nbytes; b++) {
            if (writes[b] > cover[b] || (complete && writes[b] != cover[b])) {
                fprintf(stderr, "fuzz_plan: param %s byte %llu written %u "
                        "times, covered by %u copy elements (plan %s)\n",
                        f->name, (unsigned long long)b, writes[b], cover[b],
                        complete ? "complete" : "incomplete");
                abort();
            }
        }
        check_values(w, p, cover, writes);
        free(cover);
    }
    /* every copy was planned, so PyTorch accepts each chain (but for empty
     * views, which the replay splits differently: see fuzz_geom.c) */
    for (int i = 0; complete && i < w->ncopies; i++) {
        int64_t numel = 1;
        for (int d = 0; d < w->copies[i].ndim; d++)
            numel *= w->copies[i].dshape[d] != 0;
        CHECK(w->copies[i].gt_ok || numel == 0);
    }
}

/* ---- rs_exec over the local transport ---------------------------------- */

static void connect_sessions(world_t *w, rs_plan_h plan, rs_transport_h t)
{
    for (uint32_t k = 0; k < rs_plan_num_sessions(plan); k++) {
        const char *name = rs_plan_session_name(plan, k);
        rs_region_t reg[MAX_SHARDS];
        size_t n = 0;
        for (int i = 0; i < w->nshards; i++) {
            const fshard_t *sh = &w->shards[i];
            if (strcmp(sess_name[sh->sess], name) == 0 && sh->nbytes > 0)
                reg[n++] = (rs_region_t){sh->addr, sh->nbytes, sh->data};
        }
        rs_peer_t peer = {name, 0, reg, n, NULL, 0};
        rs_diag_t diag;
        CHECK(rs_transport_connect(t, k, &peer, &diag) == RS_OK);
    }
}

/* Fills each bound parameter with `fill` and re-arms the guards. */
static void prefill(world_t *w, uint8_t fill)
{
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        if (f->block == NULL)
            continue;
        memset(f->block + GUARD, fill, f->nbytes);
    }
}

static void check_guards(const world_t *w)
{
    for (int p = 0; p < w->nparams; p++) {
        const fparam_t *f = &w->params[p];
        if (f->block == NULL)
            continue;
        FZ_UNPOISON(f->block, GUARD);
        FZ_UNPOISON(f->block + GUARD + f->nbytes, GUARD);
        for (size_t b = 0; b < GUARD; b++) {
            CHECK(f->block[b] == CANARY);
            CHECK(f->block[GUARD + f->nbytes + b] == CANARY);
        }
        FZ_POISON(f->block, GUARD);
        FZ_POISON(f->block + GUARD + f->nbytes, GUARD);
    }
}

static void bind_params(world_t *w, rs_exec_h x)
{
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        long idx = rs_capture_find_param(w->cap, f->name);
        if (f->ndim < 0 || idx < 0)
            continue;
        f->block = malloc(f->nbytes + 2 * GUARD);
        CHECK(f->block != NULL);
        memset(f->block, CANARY, f->nbytes + 2 * GUARD);
        FZ_POISON(f->block, GUARD);
        FZ_POISON(f->block + GUARD + f->nbytes, GUARD);
        rs_diag_t diag;
        CHECK(rs_exec_bind(x, (size_t)idx, f->block + GUARD, f->nbytes, RS_MEM_HOST, &diag) == RS_OK);
    }
}

static void unpoison_all(world_t *w)
{
    for (int p = 0; p < w->nparams; p++)
        if (w->params[p].block != NULL)
            FZ_UNPOISON(w->params[p].block, w->params[p].nbytes + 2 * GUARD);
}

/* After a successful run with prefill `fill`: bytes the plan writes once
 * match the mini executor; bytes it never writes keep the prefill. */
static void compare_run(world_t *w, mini_exec_t *mx, uint8_t fill)
{
    for (int p = 0; p < w->nparams; p++) {
        fparam_t *f = &w->params[p];
        if (f->block == NULL)
            continue;
        long idx = rs_capture_find_param(w->cap, f->name);
        const uint8_t *writes = mini_exec_param_writes(mx, (size_t)idx);
        const uint8_t *got = f->block + GUARD;
        for (uint64_t b = 0; b < f->nbytes; b++) {
            if (writes[b] == 0 && got[b] != fill) {
                fprintf(stderr, "fuzz_plan: rs_exec wrote %s byte %llu, which "
                        "no segment targets\n", f->name, (unsigned long long)b);
                abort();
            }
            CHECK(writes[b] != 1 || got[b] == f->mini[b]);
        }
    }
}

static void run_exec(world_t *w, rs_plan_h plan, mini_exec_t *mx)
{
    rs_transport_h t = NULL;
    rs_exec_h x = NULL;
    rs_diag_t diag;
    CHECK(rs_transport_create(NULL, &diag, &t) == RS_OK);
    connect_sessions(w, plan, t);
    rs_exec_params_t ep;
    rs_exec_params_init(&ep);
    ep.timeout_s = 10;
    CHECK(rs_exec_create(plan, t, &ep, &diag, &x) == RS_OK);
    bind_params(w, x);
    static const uint8_t fills[2] = {0x00, 0xFF};
    for (int r = 0; r < 2; r++) {
        prefill(w, fills[r]);
        rs_diag_clear(&diag);
        rs_status_t st = rs_exec_run(x, &diag);
        check_guards(w);
        if (st != RS_OK) {
            CHECK(diag.msg[0] != '\0');
            CHECK(!rs_plan_is_complete(plan) || st == RS_ERR_UNSUPPORTED);
            break;
        }
        compare_run(w, mx, fills[r]);
    }
    unpoison_all(w);
    rs_exec_destroy(x);
    rs_transport_destroy(t);
}

/* ---- declared sources ------------------------------------------------ */

/* Decided after everything else, so that inputs saved before declarations
 * existed decode as they did (an exhausted input declares nothing): per
 * source none, as published, with one dim off, or with the other dtype. */
static void declare_sources(fz_in_t *in, world_t *w)
{
    for (int s = 0; s < w->nsrc; s++) {
        fsrc_t *f = &w->src[s];
        int mode = (int)fz_below(in, 4);
        int64_t shape[RS_MAX_DIMS];
        rs_dtype_t dt = f->dtype;
        if (mode == 0)
            continue;
        memcpy(shape, f->shape, sizeof(shape));
        if (mode == 2) {
            int d = (int)fz_below(in, f->ndim);
            shape[d] = shape[d] != 3 ? 3 : 4;
        }
        if (mode == 3)
            dt = dt == RS_DTYPE_F32 ? RS_DTYPE_BF16 : RS_DTYPE_F32;
        rs_diag_t diag;
        if (rs_capture_declare_source(w->cap, f->name, f->ndim, shape, dt,
                                      &diag) != RS_OK) {
            CHECK(diag.msg[0] != '\0'); /* a hostile published shape */
            continue;
        }
        f->declared = mode;
    }
}

/* A published source declared otherwise is refused and never read: no
 * shard of it is listed, no full pull or convert reads it; the refusals
 * lead the fallback list with their reason. */
static void check_declared(const world_t *w, rs_plan_h plan)
{
    size_t nmis = rs_plan_num_mismatched(plan), nsh, n;
    const rs_shard_ref_t *sh = rs_plan_shards(plan, &nsh);
    CHECK(nmis <= rs_plan_num_fallback(plan));
    for (size_t i = 0; i < nmis; i++) {
        const char *src, *why;
        rs_plan_fallback(plan, i, &src, &why);
        CHECK(strncmp(why, "tensor '", 8) == 0 &&
              strstr(why, "capture assumes shape") != NULL);
    }
    for (int s = 0; s < w->nsrc; s++) {
        const fsrc_t *f = &w->src[s];
        if (f->declared < 2 || !f->published)
            continue;
        for (size_t i = 0; i < nsh; i++)
            CHECK(strcmp(sh[i].tensor, f->name) != 0);
        const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
        for (size_t i = 0; i < n; i++)
            CHECK(strcmp(fp[i].src, f->name) != 0);
        const rs_convert_t *cv = rs_plan_converts(plan, &n);
        for (size_t i = 0; i < n; i++) {
            rs_copy_desc_t c;
            rs_capture_copy(w->cap, cv[i].copy, &c);
            CHECK(strcmp(c.src, f->name) != 0);
        }
    }
}

/* ---- the target -------------------------------------------------------- */

static void plan_world(fz_in_t *in, world_t *w)
{
    rs_plan_params_t params;
    rs_plan_params_init(&params);
    if (fz_below(in, 2))
        params.max_segments_per_copy = 1 + fz_below(in, 8);
    if (fz_below(in, 2))
        params.split_bytes = 8 * (uint64_t)fz_below(in, 4);
    params.replica_salt = fz_u8(in);
    declare_sources(in, w);
    rs_plan_h plan = NULL;
    rs_diag_t diag;
    rs_diag_clear(&diag);
    rs_status_t st = rs_plan_build(w->cap, w->srcs, &params, &diag, &plan);
    if (st != RS_OK) {
        CHECK(plan == NULL && diag.msg[0] != '\0');
        return;
    }
    check_declared(w, plan);
    if (w->runnable) {
        mini_exec_t *mx = run_mini(w, plan);
        if (w->replayed)
            check_mini(w, plan, mx);
        run_exec(w, plan, mx);
        mini_exec_destroy(mx);
    }
    rs_plan_destroy(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = {data, size, 0};
    world_t *w = calloc(1, sizeof(*w));
    CHECK(w != NULL);
    w->runnable = 1;
    w->replayed = 1;
    CHECK(rs_capture_create(&w->cap) == RS_OK);
    CHECK(rs_sources_create(&w->srcs) == RS_OK);
    make_sources(&in, w);
    make_shards(&in, w);
    make_params(&in, w);
    int ncopies = (int)fz_below(&in, MAX_COPIES + 1);
    for (int i = 0; i < ncopies; i++)
        add_copy(&in, w);
    plan_world(&in, w);
    world_free(w);
    free(w);
    return 0;
}
