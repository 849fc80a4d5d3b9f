/* Fuzz target for op-chain resolution: a random source shape and op chain
 * go through rs__geom_resolve; when it succeeds the box is walked with
 * rs__walk_runs (whole, and a random sub-box out of a tight buffer) and
 * every run is checked against an independent replay (tests/support
 * gt_tensor): inside the destination extent and the buffer, reading
 * exactly the source element the view puts at that destination. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"
#include "geom/box.h"
#include "geom/view.h"
#include "geom/walk.h"
#include "gt_tensor.h"

#define MAX_NUMEL 4096

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz_geom: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #cond);                                                  \
            abort();                                                         \
        }                                                                    \
    } while (0)

typedef struct walk_ctx {
    const rs__box_t *box;
    int src_ndim;
    const int64_t *src_shape;
    const int64_t *buf_off, *buf_shape;
    int64_t buf_numel;
    int64_t extent;    /* destination elements: max offset + 1 */
    int64_t *expect;   /* per destination element: source index, -1 none */
    uint8_t *hits;     /* per destination element (the guarded buffer) */
    const rs__index_range_t *kr;
    int64_t walked;
} walk_ctx_t;

/* Source element index of buffer element e. */
static int64_t global_of(const walk_ctx_t *w, int64_t e)
{
    int64_t m[RS_MAX_DIMS], g = 0;
    gt_unravel(e, w->src_ndim, w->buf_shape, m);
    for (int d = 0; d < w->src_ndim; d++)
        g = g * w->src_shape[d] + m[d] + w->buf_off[d];
    return g;
}

/* 1 when source coordinate x of dim d is visited by k in [lo, hi). */
static int in_krange(const walk_ctx_t *w, int d, int64_t x)
{
    int64_t below = rs__box_count_below(w->box, d, x);
    return below >= w->kr->lo[d] && below < w->kr->hi[d] &&
           rs__box_coord(w->box, d, below) == x;
}

static void on_run(void *ctx, int64_t src, int64_t dst, int64_t n)
{
    walk_ctx_t *w = ctx;
    CHECK(n > 0);
    CHECK(src >= 0 && src <= w->buf_numel - n);
    CHECK(dst >= 0 && dst <= w->extent - n);
    for (int64_t t = 0; t < n; t++) {
        int64_t g = global_of(w, src + t), m[RS_MAX_DIMS];
        CHECK(w->expect[dst + t] == g);
        CHECK(w->hits[dst + t] == 0); /* no element twice */
        w->hits[dst + t] = 1;
        gt_unravel(g, w->src_ndim, w->src_shape, m);
        for (int d = 0; d < w->src_ndim; d++)
            CHECK(in_krange(w, d, m[d]));
    }
    w->walked += n;
}

typedef struct dest {
    int ndim;
    int64_t shape[RS_MAX_DIMS], stride[RS_MAX_DIMS];
} dest_t;

/* Destination strides: row-major, reversed, padded or arbitrary. */
static void pick_dest(fz_in_t *in, const rs__view_t *v, dest_t *d)
{
    int mode = (int)fz_below(in, 4);
    uint64_t acc = 1; /* wraps harmlessly on hostile shapes */
    d->ndim = v->ndim;
    memcpy(d->shape, v->shape, sizeof(d->shape));
    for (int k = 0; k < v->ndim; k++) {
        int i = mode == 1 ? k : v->ndim - 1 - k;
        d->stride[i] = mode == 3 ? fz_small(in, 0) : (int64_t)(acc & INT64_MAX);
        acc *= (uint64_t)v->shape[i] * (uint64_t)(mode == 2 ? 1 + fz_below(in, 3) : 1);
    }
    if (fz_below(in, 16) == 0 && d->ndim > 0) /* a shape the ops do not give */
        d->shape[fz_below(in, d->ndim)] ^= 1;
}

/* Expected source index per destination element from the replayed view;
 * 0 when the destination overlaps itself (no one answer per element). */
static int expected(const gt_tensor_t *t, const dest_t *d, int64_t extent,
                    int64_t *expect)
{
    int64_t m[RS_MAX_DIMS];
    for (int64_t e = 0; e < extent; e++)
        expect[e] = -1;
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t e = 0;
        gt_unravel(k, t->ndim, t->shape, m);
        for (int i = 0; i < t->ndim; i++)
            e += m[i] * d->stride[i];
        if (expect[e] >= 0)
            return 0;
        expect[e] = t->idx[k];
    }
    return 1;
}

/* A random sub-range of the box and the tight buffer around it. */
static void pick_sub(fz_in_t *in, const rs__box_t *box, rs__index_range_t *kr,
                     int64_t *off, int64_t *shape)
{
    for (int d = 0; d < box->ndim; d++) {
        int64_t c = box->count[d];
        kr->lo[d] = fz_below(in, c);
        kr->hi[d] = kr->lo[d] + 1 + fz_below(in, c - kr->lo[d]);
        off[d] = rs__box_coord(box, d, kr->lo[d]);
        shape[d] = rs__box_coord(box, d, kr->hi[d] - 1) - off[d] + 1;
    }
}

static void walk_check(walk_ctx_t *w, const rs__box_t *box, const rs__index_range_t *kr,
                       const int64_t *off, const int64_t *shape)
{
    rs__source_buffer_t buf = {off, shape};
    int64_t want = 1;
    w->kr = kr;
    w->buf_off = off;
    w->buf_shape = shape;
    w->buf_numel = 1;
    for (int d = 0; d < box->ndim; d++) {
        w->buf_numel *= shape[d];
        want *= kr->hi[d] - kr->lo[d];
    }
    memset(w->hits, 0, (size_t)w->extent);
    w->walked = 0;
    rs__walk_runs(box, kr, &buf, 0, on_run, w);
    CHECK(w->walked == want);
}

static void check_box(fz_in_t *in, int src_ndim, const int64_t *src_shape,
                      const rs__box_t *box, const gt_tensor_t *t,
                      const dest_t *d)
{
    int64_t extent = 1;
    for (int i = 0; i < d->ndim; i++)
        extent += (d->shape[i] - 1) * d->stride[i];
    if (t->numel == 0 || extent > 16 * MAX_NUMEL)
        return;
    walk_ctx_t w = {.box = box, .src_ndim = src_ndim, .src_shape = src_shape,
                    .extent = extent};
    w.expect = malloc((size_t)extent * sizeof(int64_t));
    w.hits = malloc((size_t)extent);
    CHECK(w.expect != NULL && w.hits != NULL);
    if (expected(t, d, extent, w.expect)) {
        rs__index_range_t kr;
        int64_t zero[RS_MAX_DIMS] = {0}, off[RS_MAX_DIMS], shape[RS_MAX_DIMS];
        CHECK(box->numel == t->numel);
        for (int k = 0; k < box->ndim; k++) {
            kr.lo[k] = 0;
            kr.hi[k] = box->count[k];
        }
        walk_check(&w, box, &kr, zero, src_shape);
        pick_sub(in, box, &kr, off, shape);
        walk_check(&w, box, &kr, off, shape);
    }
    free(w.expect);
    free(w.hits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = {data, size, 0};
    int src_ndim = (int)fz_below(&in, 5);
    int64_t src_shape[RS_MAX_DIMS], numel = 1;
    for (int d = 0; d < src_ndim; d++) {
        src_shape[d] = fz_dim(&in, 0, 7);
        /* too large for the replay: any dim of 64 or more counts as 4096 */
        numel *= src_shape[d] >= 0 && src_shape[d] < 64 ? src_shape[d] : MAX_NUMEL + 1;
        numel = numel > MAX_NUMEL ? MAX_NUMEL + 1 : numel;
    }
    fz_chain_t chain;
    fz_chain(&in, &chain);

    /* the destination takes the view's shape, as a capture records it */
    rs__view_t v;
    dest_t d = {0};
    if (rs__view_init(&v, src_ndim, src_shape) == RS_OK) {
        size_t i = 0;
        while (i < chain.nops && rs__view_apply(&v, &chain.ops[i], NULL, 0) == RS_OK)
            i++;
        pick_dest(&in, &v, &d);
    }
    rs__box_t box;
    size_t bad = 0;
    char why[256] = "";
    rs_status_t st = rs__geom_resolve(src_ndim, src_shape, chain.ops, chain.nops,
                                     d.ndim, d.shape, d.stride, &box, &bad,
                                     why, sizeof(why));
    if (st != RS_OK) {
        CHECK(why[0] != '\0' && bad <= chain.nops);
        return 0;
    }
    if (numel > MAX_NUMEL || !fz_chain_replayable(&chain, src_ndim, src_shape))
        return 0;
    gt_tensor_t t;
    if (gt_replay(src_ndim, src_shape, chain.ops, chain.nops, &t, NULL, 0) != GT_OK) {
        /* The replay splits an empty dim into one piece where PyTorch's
         * chunk makes `chunks` empty ones; an empty view reads nothing
         * either way. Anything else the replay refuses must be refused. */
        CHECK(box.numel == 0);
        return 0;
    }
    CHECK(t.ndim == d.ndim &&
          memcmp(t.shape, d.shape, sizeof(int64_t) * (size_t)t.ndim) == 0);
    check_box(&in, src_ndim, src_shape, &box, &t, &d);
    gt_free(&t);
    return 0;
}
