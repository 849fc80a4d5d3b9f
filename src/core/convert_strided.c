/* Strided conversion (and strided copy, for equal dtypes): validates the
 * geometry, drops unit dims, merges dims whose strides chain on both sides,
 * then walks the outer dims and hands each innermost row to the contiguous
 * or the strided kernel. Rows with a large stride on one side are walked in
 * tiles so a transpose touches each cache line once; a true transpose of
 * 1, 2, 4 or 8 byte elements goes through the vector kernels of
 * transpose.c, straight into the destination for equal dtypes (streamed
 * past the caches when it is larger than them), through the fused
 * cast-and-transpose kernels of transpose_cast.c for bf16 <-> f32 where
 * the level has them, through a tile buffer cast out row by row
 * otherwise. */
#include <string.h>

#include "core/checked.h"
#include "core/convert_impl.h"
#include "core/transpose.h"
#include "core/transpose_cast.h"
#include "core/convert.h"

#define CV_MAX_DIMS 16

/* Tile edge for two-dim walks where one side is contiguous and the other
 * is not: a 32 x 32 tile of 8-byte elements is an 8 KiB stack buffer. */
#define CV_TILE 32
#ifndef CV_BLOCK
#define CV_BLOCK 256
#endif

/* A transpose with a cast goes through square tiles of CV_CAST_TILE
 * elements (CV_CAST_TILE_8 for 8-byte sources), transposed into a buffer
 * in L1 and cast out row by row: 64 elements is one whole block of the
 * vectorized cast loops (shorter rows would take their scalar tail), and
 * every line on either side is read or written whole while its tile is in
 * flight. */
#define CV_CAST_TILE 64
#define CV_CAST_TILE_8 16

static int64_t cast_tile(size_t ssize)
{
    return ssize == 8 ? CV_CAST_TILE_8 : CV_CAST_TILE;
}

typedef struct cv_geom {
    int ndim;
    int same;   /* equal dtypes: a plain copy */
    int stream; /* destination larger than the caches: stream it */
    int64_t shape[CV_MAX_DIMS];
    int64_t ds[CV_MAX_DIMS], ss[CV_MAX_DIMS];
    size_t dsize, ssize;
    rs_dtype_t to, from;
} cv_geom_t;

/* Highest element offset reachable on one side must fit, in bytes. */
static int extent_ok(const int64_t *shape, const int64_t *stride, int ndim,
                     size_t elsize)
{
    int64_t total = 0, term;
    for (int i = 0; i < ndim; i++) {
        if (stride[i] < 0)
            return 0;
        if (!rs__mul_i64(shape[i] - 1, stride[i], &term) ||
            !rs__add_i64(total, term, &total))
            return 0;
    }
    return rs__mul_i64(total, (int64_t)elsize, &total) && total < PTRDIFF_MAX;
}

/* Drops unit dims and merges an outer dim into the next inner one when
 * both sides' strides chain. Leaves at least one dim. */
static void coalesce(cv_geom_t *g, const int64_t *shape, const int64_t *ds,
                     const int64_t *ss, int ndim)
{
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        int64_t dchain, schain;
        if (n > 0 && rs__mul_i64(ds[i], shape[i], &dchain) &&
            rs__mul_i64(ss[i], shape[i], &schain) && dchain == g->ds[n - 1] &&
            schain == g->ss[n - 1]) {
            g->shape[n - 1] *= shape[i];
            g->ds[n - 1] = ds[i];
            g->ss[n - 1] = ss[i];
            continue;
        }
        g->shape[n] = shape[i];
        g->ds[n] = ds[i];
        g->ss[n] = ss[i];
        n++;
    }
    if (n == 0) {
        g->shape[0] = 1;
        g->ds[0] = g->ss[0] = 1;
        n = 1;
    }
    g->ndim = n;
}

static void run_row(const rs__convert_kernel_t *k, unsigned char *d, int64_t ds,
                    const unsigned char *s, int64_t ss, int64_t n)
{
    if (ds == 1 && ss == 1)
        k->contig(d, s, (size_t)n);
    else
        k->strided(d, ds, s, ss, (size_t)n);
}

/* One tile of a transpose-like pair (see run_tiled): converted into a small
 * buffer along p (contiguous reads), then copied out along q (contiguous
 * writes). */
static void run_tile(const rs__convert_kernel_t *k, const rs__convert_kernel_t *copy,
                     const cv_geom_t *g, int p, int q, int64_t np,
                     int64_t nq, unsigned char *d, const unsigned char *s)
{
    unsigned char tmp[CV_TILE * CV_TILE * 8];
    const size_t row = CV_TILE * g->dsize;
    for (int64_t j = 0; j < nq; j++)
        run_row(k, tmp + (size_t)j * g->dsize, CV_TILE,
                s + (size_t)(j * g->ss[q]) * g->ssize, g->ss[p], np);
    for (int64_t i = 0; i < np; i++)
        run_row(copy, d + (size_t)(i * g->ds[p]) * g->dsize, g->ds[q],
                tmp + (size_t)i * row, 1, nq);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* One tile of a true transpose with a cast (source contiguous along p,
 * destination along q): a register transpose into a buffer whose rows are
 * destination rows in the source dtype, then each row cast out
 * contiguously. */
static void run_tile_fast(const rs__convert_kernel_t *k, const cv_geom_t *g,
                          int p, int q, int64_t np, int64_t nq,
                          unsigned char *d, const unsigned char *s)
{
    _Alignas(64) unsigned char tmp[CV_CAST_TILE * CV_CAST_TILE * 4];
    const int64_t edge = cast_tile(g->ssize);
    const size_t row = (size_t)edge * g->ssize;
    const size_t dstep = (size_t)g->ds[p] * g->dsize;
    rs__transpose(tmp, edge, s, g->ss[q], nq, np, g->ssize, 0);
    for (int64_t i = 0; i < np; i++)
        k->contig(d + (size_t)i * dstep, tmp + (size_t)i * row, (size_t)nq);
}

/* The pair (p, q) is a true transpose the register kernels can take. */
static int fast_pair(const cv_geom_t *g, int p, int q)
{
    return g->ss[p] == 1 && g->ds[q] == 1 && rs__transpose_ok(g->ssize);
}

#if defined(__GNUC__)
#define CV_PREFETCH(addr, rw) __builtin_prefetch((addr), (rw))
#else
#define CV_PREFETCH(addr, rw) ((void)(addr))
#endif

/* Hints for every line of the next tile on both sides (the destination for
 * writing): a tile touches a hundred or so lines in as many pages, more than
 * the core would otherwise have in flight. */
static void prefetch_tile(const cv_geom_t *g, int p, int q, int64_t np,
                          int64_t nq, const unsigned char *d,
                          const unsigned char *s)
{
    const size_t sbytes = (size_t)np * g->ssize, dbytes = (size_t)nq * g->dsize;
    for (int64_t j = 0; j < nq; j++)
        for (size_t b = 0; b < sbytes; b += 64)
            CV_PREFETCH(s + (size_t)(j * g->ss[q]) * g->ssize + b, 0);
    for (int64_t i = 0; i < np; i++)
        for (size_t b = 0; b < dbytes; b += 64)
            CV_PREFETCH(d + (size_t)(i * g->ds[p]) * g->dsize + b, 1);
}

/* The tile at (p0, q0) of a true transpose with a cast, with hints for the
 * next one along p (`more`: there is one in this block). */
static void fast_tile_at(const rs__convert_kernel_t *k, const cv_geom_t *g, int p,
                         int q, int64_t p0, int64_t q0, int more,
                         unsigned char *d, const unsigned char *s)
{
    const int64_t t = cast_tile(g->ssize);
    const int64_t np = min64(t, g->shape[p] - p0);
    const int64_t nq = min64(t, g->shape[q] - q0);
    unsigned char *td = d + (size_t)(p0 * g->ds[p] + q0) * g->dsize;
    const unsigned char *ts = s + (size_t)(p0 + q0 * g->ss[q]) * g->ssize;
    if (more)
        prefetch_tile(g, p, q, min64(t, g->shape[p] - p0 - t), nq,
                      td + (size_t)(t * g->ds[p]) * g->dsize,
                      ts + (size_t)t * g->ssize);
    run_tile_fast(k, g, p, q, np, nq, td, ts);
}

/* A true transpose: with equal dtypes the transpose kernels write the
 * destination directly (streaming past the caches when the whole copy is
 * larger than them); with a cast, tiles go through a buffer, in blocks of
 * `blk` x `blk` elements that keep the pages both sides touch within the
 * TLB's reach. */
static void run_tiled_fast(const rs__convert_kernel_t *k, const cv_geom_t *g,
                           int p, int q, unsigned char *d,
                           const unsigned char *s)
{
    const int64_t P = g->shape[p], Q = g->shape[q];
    if (g->same) {
        rs__transpose(d, g->ds[p], s, g->ss[q], Q, P, g->ssize, g->stream);
        return;
    }
    if (rs__transpose_cast(g->to, d, g->ds[p], g->from, s, g->ss[q], Q, P,
                           g->stream))
        return;
    const int64_t t = cast_tile(g->ssize);
    const int64_t blk = t > CV_BLOCK ? t : CV_BLOCK;
    for (int64_t bq = 0; bq < Q; bq += blk)
        for (int64_t bp = 0; bp < P; bp += blk) {
            const int64_t pend = min64(P, bp + blk);
            for (int64_t q0 = bq; q0 < min64(Q, bq + blk); q0 += t)
                for (int64_t p0 = bp; p0 < pend; p0 += t)
                    fast_tile_at(k, g, p, q, p0, q0, p0 + t < pend, d, s);
        }
}

/* Two innermost dims where p is the dim the source is contiguous along and
 * q the one the destination is. Blocks of CV_BLOCK x CV_BLOCK keep the pages
 * both sides touch within the TLB's reach; inside a block, tiles small
 * enough for L1 make every cache line on either side be touched once. */
static void run_tiled(const rs__convert_kernel_t *k, const rs__convert_kernel_t *copy,
                      const cv_geom_t *g, int r, unsigned char *d,
                      const unsigned char *s)
{
    const int p = g->ss[r + 1] == 1 ? r + 1 : r, q = p == r ? r + 1 : r;
    const int64_t P = g->shape[p], Q = g->shape[q];
    if (fast_pair(g, p, q)) {
        run_tiled_fast(k, g, p, q, d, s);
        return;
    }
    for (int64_t bq = 0; bq < Q; bq += CV_BLOCK)
        for (int64_t bp = 0; bp < P; bp += CV_BLOCK)
            for (int64_t q0 = bq; q0 < min64(Q, bq + CV_BLOCK); q0 += CV_TILE)
                for (int64_t p0 = bp; p0 < min64(P, bp + CV_BLOCK);
                     p0 += CV_TILE)
                    run_tile(k, copy, g, p, q, min64(CV_TILE, P - p0),
                             min64(CV_TILE, Q - q0),
                             d + (size_t)(p0 * g->ds[p] + q0 * g->ds[q]) *
                                     g->dsize,
                             s + (size_t)(p0 * g->ss[p] + q0 * g->ss[q]) *
                                     g->ssize);
}

/* A transpose-like pair of inner dims: the columns are contiguous on one
 * side only and the rows are long enough for tiling to pay. */
static int wants_tiles(const cv_geom_t *g)
{
    if (g->ndim < 2)
        return 0;
    const int c = g->ndim - 1, r = c - 1;
    if (g->shape[c] < CV_TILE || g->shape[r] < CV_TILE)
        return 0;
    return (g->ds[c] == 1) != (g->ss[c] == 1);
}

/* Bytes written, from the coalesced shape: past the caches' size, the
 * transpose kernels store around them. */
static int wants_stream(const cv_geom_t *g)
{
    uint64_t n = g->dsize;
    for (int i = 0; i < g->ndim; i++) {
        if (!rs__mul_u64(n, (uint64_t)g->shape[i], &n))
            return 1;
    }
    return n >= RS__TRANSPOSE_STREAM_MIN;
}

static void walk(const rs__convert_kernel_t *k, const rs__convert_kernel_t *copy,
                 const cv_geom_t *g, unsigned char *dst,
                 const unsigned char *src)
{
    const int tiled = wants_tiles(g);
    const int inner = g->ndim - (tiled ? 2 : 1); /* dims walked below */
    int64_t idx[CV_MAX_DIMS] = {0};
    for (;;) {
        int64_t doff = 0, soff = 0;
        for (int i = 0; i < inner; i++) {
            doff += idx[i] * g->ds[i];
            soff += idx[i] * g->ss[i];
        }
        unsigned char *d = dst + (size_t)doff * g->dsize;
        const unsigned char *s = src + (size_t)soff * g->ssize;
        if (tiled)
            run_tiled(k, copy, g, inner, d, s);
        else
            run_row(k, d, g->ds[inner], s, g->ss[inner], g->shape[inner]);
        int i = inner - 1;
        while (i >= 0 && ++idx[i] == g->shape[i])
            idx[i--] = 0;
        if (i < 0)
            return;
    }
}

rs_status_t rs__convert_strided(rs_dtype_t to, void *dst,
                               const int64_t *dst_stride, rs_dtype_t from,
                               const void *src, const int64_t *src_stride,
                               int ndim, const int64_t *shape)
{
    rs__convert_kernel_t k, copy;
    if (!rs__convert_kernel(to, from, &k) ||
        !rs__convert_kernel(to, to, &copy))
        return RS_ERR_UNSUPPORTED;
    if (ndim < 0 || ndim > CV_MAX_DIMS ||
        (ndim > 0 && (shape == NULL || dst_stride == NULL ||
                      src_stride == NULL)))
        return RS_ERR_INVALID_ARG;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return RS_ERR_INVALID_ARG;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return RS_OK;
    }
    cv_geom_t g = {.same = to == from, .dsize = rs_dtype_size(to),
                   .ssize = rs_dtype_size(from), .to = to, .from = from};
    if (!extent_ok(shape, dst_stride, ndim, g.dsize) ||
        !extent_ok(shape, src_stride, ndim, g.ssize) || dst == NULL ||
        src == NULL)
        return RS_ERR_INVALID_ARG;
    coalesce(&g, shape, dst_stride, src_stride, ndim);
    g.stream = wants_stream(&g);
    walk(&k, &copy, &g, dst, src);
    return RS_OK;
}
