/* Matrix transpose: the walk over cache-line tiles and the portable
 * kernels. Portable tiles are built from fixed micro-blocks (8x8 bytes, 4x4
 * of 2 and 4 byte elements, 4x4 of 8 byte words) moved through 64-bit
 * registers with the lanes swapped by shifts and masks (little-endian only:
 * other byte orders take the element loop throughout); the vector levels
 * live in transpose_x86.c. Ragged edges always take the portable blocks. */
#include <stdint.h>
#include <string.h>

#include "core/simd.h"
#include "core/transpose.h"
#include "core/transpose_impl.h"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&           \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TR_SWAR 1
#else
#define TR_SWAR 0
#endif

/* Walk parameters (see run_streamed and run_cached): the cached walk's
 * block edge in elements and how many tiles ahead it hints; the streamed
 * walk's run of each source row per pass, in bytes, and its hint
 * distance. Measured on the development machine (docs/executor.md,
 * "Measured"). */
#ifndef TR_BLOCK
#define TR_BLOCK 256
#endif
#ifndef TR_AHEAD_CACHED
#define TR_AHEAD_CACHED 2
#endif
#ifndef TR_STREAM_RUN
#define TR_STREAM_RUN 4096
#endif
#ifndef TR_AHEAD
#define TR_AHEAD 4
#endif

static inline uint64_t ld64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void st64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* Transposes the 2x2 matrix of `sh`-bit lanes formed by each pair of lanes
 * (k, k+1) of x and y, for every lane pair the mask selects: afterwards x
 * holds the even lanes of both and y the odd ones. Applied with halving lane
 * widths it transposes a whole square of lanes. */
static inline void swap_lanes(uint64_t *x, uint64_t *y, int sh, uint64_t m)
{
    const uint64_t a = *x, b = *y;
    *x = (a & m) | ((b & m) << sh);
    *y = ((a >> sh) & m) | (b & ~m);
}

#define M8 0x00ff00ff00ff00ffull
#define M16 0x0000ffff0000ffffull
#define M32 0x00000000ffffffffull

/* 8x8 bytes: eight rows of one word each. */
static inline void micro_1(unsigned char *d, size_t dld, const unsigned char *s,
                           size_t sld)
{
    uint64_t r[8];
    for (int i = 0; i < 8; i++)
        r[i] = ld64(s + i * sld);
    for (int i = 0; i < 8; i += 2)
        swap_lanes(&r[i], &r[i + 1], 8, M8);
    for (int i = 0; i < 8; i += 4) {
        swap_lanes(&r[i], &r[i + 2], 16, M16);
        swap_lanes(&r[i + 1], &r[i + 3], 16, M16);
    }
    for (int i = 0; i < 4; i++)
        swap_lanes(&r[i], &r[i + 4], 32, M32);
    for (int i = 0; i < 8; i++)
        st64(d + i * dld, r[i]);
}

/* 4x4 elements of 2 bytes: four rows of one word each. */
static inline void micro_2(unsigned char *d, size_t dld, const unsigned char *s,
                           size_t sld)
{
    uint64_t r0 = ld64(s), r1 = ld64(s + sld), r2 = ld64(s + 2 * sld),
             r3 = ld64(s + 3 * sld);
    swap_lanes(&r0, &r1, 16, M16);
    swap_lanes(&r2, &r3, 16, M16);
    swap_lanes(&r0, &r2, 32, M32);
    swap_lanes(&r1, &r3, 32, M32);
    st64(d, r0);
    st64(d + dld, r1);
    st64(d + 2 * dld, r2);
    st64(d + 3 * dld, r3);
}

/* 4x4 elements of 4 bytes: each row is two words; every 2x2 block of words
 * is transposed in place and the off-diagonal blocks trade places. */
static inline void micro_4(unsigned char *d, size_t dld, const unsigned char *s,
                           size_t sld)
{
    uint64_t a[4], b[4]; /* a: columns 0-1 of each row, b: columns 2-3 */
    for (int i = 0; i < 4; i++) {
        a[i] = ld64(s + i * sld);
        b[i] = ld64(s + i * sld + 8);
    }
    swap_lanes(&a[0], &a[1], 32, M32);
    swap_lanes(&a[2], &a[3], 32, M32);
    swap_lanes(&b[0], &b[1], 32, M32);
    swap_lanes(&b[2], &b[3], 32, M32);
    st64(d, a[0]);
    st64(d + 8, a[2]);
    st64(d + dld, a[1]);
    st64(d + dld + 8, a[3]);
    st64(d + 2 * dld, b[0]);
    st64(d + 2 * dld + 8, b[2]);
    st64(d + 3 * dld, b[1]);
    st64(d + 3 * dld + 8, b[3]);
}

/* 4x4 words: nothing to shuffle, only to load a block before storing it. */
static inline void micro_8(unsigned char *d, size_t dld, const unsigned char *s,
                           size_t sld)
{
    uint64_t r[4][4];
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 4; j++)
            r[i][j] = ld64(s + i * sld + j * 8);
    for (size_t j = 0; j < 4; j++)
        for (size_t i = 0; i < 4; i++)
            st64(d + j * dld + i * 8, r[i][j]);
}

int rs__transpose_ok(size_t elsize)
{
    return elsize == 1 || elsize == 2 || elsize == 4 || elsize == 8;
}

/* Element by element over rows [i0, i1) x columns [j0, j1). */
static void edge_loop(unsigned char *d, size_t dld, const unsigned char *s,
                      size_t sld, size_t es, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1)
{
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
            memcpy(d + (size_t)j * dld + (size_t)i * es,
                   s + (size_t)i * sld + (size_t)j * es, es);
}

/* Any rows x cols with the micro-blocks of one element size; the ragged
 * right and bottom edges element by element. */
#define TR_TILE(ES, EDGE)                                                     \
    static void tile_##ES(unsigned char *d, size_t dld,                       \
                          const unsigned char *s, size_t sld, int64_t rows,   \
                          int64_t cols)                                       \
    {                                                                         \
        const int64_t rfull = TR_SWAR ? rows - rows % (EDGE) : 0;             \
        const int64_t cfull = TR_SWAR ? cols - cols % (EDGE) : 0;             \
        for (int64_t i = 0; i < rfull; i += (EDGE))                           \
            for (int64_t j = 0; j < cfull; j += (EDGE))                       \
                micro_##ES(d + (size_t)j * dld + (size_t)i * (ES), dld,       \
                           s + (size_t)i * sld + (size_t)j * (ES), sld);      \
        edge_loop(d, dld, s, sld, (ES), 0, rfull, cfull, cols);               \
        edge_loop(d, dld, s, sld, (ES), rfull, rows, 0, cols);                \
    }                                                                         \
    static void line_##ES(unsigned char *d, size_t dld,                       \
                          const unsigned char *s, size_t sld)                 \
    {                                                                         \
        tile_##ES(d, dld, s, sld, RS__TR_LINE / (ES), RS__TR_LINE / (ES));    \
    }

TR_TILE(1, 8)
TR_TILE(2, 4)
TR_TILE(4, 4)
TR_TILE(8, 4)

const rs__transpose_ops_t rs__transpose_ops_portable = {
    {line_1, line_2, line_4, line_8}, {NULL, NULL, NULL, NULL}, NULL, NULL};

static void edge_tile(unsigned char *d, size_t dld, const unsigned char *s,
                      size_t sld, size_t es, int64_t rows, int64_t cols)
{
    switch (es) {
    case 1: tile_1(d, dld, s, sld, rows, cols); break;
    case 2: tile_2(d, dld, s, sld, rows, cols); break;
    case 4: tile_4(d, dld, s, sld, rows, cols); break;
    default: tile_8(d, dld, s, sld, rows, cols); break;
    }
}

static const rs__transpose_ops_t *ops_for(rs__simd_t level)
{
#if RS__TR_X86
    switch (level) {
    case RS__SIMD_SSE2: return &rs__transpose_ops_sse2;
    case RS__SIMD_AVX2: return &rs__transpose_ops_avx2;
    case RS__SIMD_AVX512: return &rs__transpose_ops_avx512;
    default: break;
    }
#else
    (void)level;
#endif
    return &rs__transpose_ops_portable;
}

/* One transpose in flight: both sides, in bytes, and the kernels. */
typedef struct tr_job {
    unsigned char *d;
    const unsigned char *s;
    size_t dld, sld, es;
    int64_t e; /* line tile edge in elements */
    rs__transpose_line_fn line;
    rs__transpose_line_fn line_nt;  /* streaming line tiles, or NULL */
    rs__transpose_stream_fn stream; /* streaming row copies, or NULL */
} tr_job_t;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The line tile at source row si, column sj. Streamed tiles without a
 * streaming kernel of their own go through an L1 buffer, so that each
 * destination line is still written whole, at once. */
static void tile_at(const tr_job_t *j, int64_t si, int64_t sj)
{
    unsigned char *td = j->d + (size_t)sj * j->dld + (size_t)si * j->es;
    const unsigned char *ts = j->s + (size_t)si * j->sld + (size_t)sj * j->es;
    if (j->line_nt != NULL) {
        j->line_nt(td, j->dld, ts, j->sld);
    } else if (j->stream != NULL) {
        _Alignas(64) unsigned char buf[RS__TR_LINE * RS__TR_LINE];
        j->line(buf, RS__TR_LINE, ts, j->sld);
        j->stream(td, j->dld, buf, (size_t)j->e);
    } else {
        j->line(td, j->dld, ts, j->sld);
    }
}

#if defined(__GNUC__)
#define TR_PREFETCH(addr, rw) __builtin_prefetch((addr), (rw))
#else
#define TR_PREFETCH(addr, rw) ((void)(addr))
#endif

/* Hints for the lines of the tile at (si, sj): its source rows and, when
 * the stores are not streamed, its destination rows (for writing). */
static void prefetch_tile(const tr_job_t *j, int64_t si, int64_t sj)
{
    const unsigned char *ts = j->s + (size_t)si * j->sld + (size_t)sj * j->es;
    for (int64_t r = 0; r < j->e; r++)
        TR_PREFETCH(ts + (size_t)r * j->sld, 0);
    if (j->stream != NULL)
        return;
    const unsigned char *td = j->d + (size_t)sj * j->dld + (size_t)si * j->es;
    for (int64_t r = 0; r < j->e; r++)
        TR_PREFETCH(td + (size_t)r * j->dld, 1);
}

/* Streamed walk over full tiles of source rows [0, rows) x columns [0,
 * cols): a band of one tile's source rows is read on along its rows, so
 * the reads are a few dozen sequential streams, while the destination
 * lines, scattered one per row, go past the caches. Bands cover
 * TR_STREAM_RUN bytes of each row at a time, so the destination rows one
 * pass touches stay within the second-level TLB. */
static void run_streamed(const tr_job_t *j, int64_t rows, int64_t cols)
{
    const int64_t run = TR_STREAM_RUN / (int64_t)j->es, ahead = TR_AHEAD * j->e;
    for (int64_t bj = 0; bj < cols; bj += run) {
        const int64_t jend = min64(cols, bj + run);
        for (int64_t i = 0; i < rows; i += j->e)
            for (int64_t c = bj; c < jend; c += j->e) {
                if (c + ahead < jend)
                    prefetch_tile(j, i, c + ahead);
                tile_at(j, i, c);
            }
    }
}

/* Cached walk: blocks of TR_BLOCK x TR_BLOCK elements, whose source and
 * destination rows stay within the TLB's and L2's reach; inside a block,
 * a band of destination rows is written on along its rows, with hints for
 * both sides of the tile after next. */
static void run_cached(const tr_job_t *j, int64_t rows, int64_t cols)
{
    const int64_t ahead = TR_AHEAD_CACHED * j->e;
    for (int64_t bj = 0; bj < cols; bj += TR_BLOCK)
        for (int64_t bi = 0; bi < rows; bi += TR_BLOCK) {
            const int64_t iend = min64(rows, bi + TR_BLOCK);
            const int64_t jend = min64(cols, bj + TR_BLOCK);
            for (int64_t c = bj; c < jend; c += j->e)
                for (int64_t i = bi; i < iend; i += j->e) {
                    if (i + ahead < iend)
                        prefetch_tile(j, i + ahead, c);
                    tile_at(j, i, c);
                }
        }
}

/* The portable walk: 64-bit registers build a destination line from 8-byte
 * pieces, so tiles of two lines per row are built in an L1 buffer and
 * leave it as whole rows (memcpy), in blocks of TR_BLOCK x TR_BLOCK, with
 * hints for the next tile on both sides; measured faster than line tiles
 * stored in place for plain C. */
#define TR_PORT_ROW 128

static void portable_tile(unsigned char *d, size_t dld, const unsigned char *s,
                          size_t sld, size_t es, int64_t rows, int64_t cols)
{
    unsigned char buf[TR_PORT_ROW * TR_PORT_ROW];
    edge_tile(buf, TR_PORT_ROW, s, sld, es, rows, cols);
    for (int64_t c = 0; c < cols; c++)
        memcpy(d + (size_t)c * dld, buf + (size_t)c * TR_PORT_ROW,
               (size_t)rows * es);
}

static void portable_hints(unsigned char *d, size_t dld,
                           const unsigned char *s, size_t sld, size_t es,
                           int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < cols * (int64_t)es; b += 64)
            TR_PREFETCH(s + (size_t)r * sld + (size_t)b, 0);
    for (int64_t c = 0; c < cols; c++)
        for (int64_t b = 0; b < rows * (int64_t)es; b += 64)
            TR_PREFETCH(d + (size_t)c * dld + (size_t)b, 1);
}

static void run_portable(unsigned char *d, size_t dld, const unsigned char *s,
                         size_t sld, size_t es, int64_t rows, int64_t cols)
{
    const int64_t t = TR_PORT_ROW / (int64_t)es;
    for (int64_t bj = 0; bj < cols; bj += TR_BLOCK)
        for (int64_t bi = 0; bi < rows; bi += TR_BLOCK) {
            const int64_t iend = min64(rows, bi + TR_BLOCK);
            for (int64_t c = bj; c < min64(cols, bj + TR_BLOCK); c += t)
                for (int64_t i = bi; i < iend; i += t) {
                    const int64_t nc = min64(t, cols - c);
                    unsigned char *td = d + (size_t)c * dld + (size_t)i * es;
                    const unsigned char *ts =
                        s + (size_t)i * sld + (size_t)c * es;
                    if (i + t < iend)
                        portable_hints(td + (size_t)t * es, dld,
                                       ts + (size_t)t * sld, sld, es,
                                       min64(t, iend - i - t), nc);
                    portable_tile(td, dld, ts, sld, es, min64(t, iend - i), nc);
                }
        }
}

/* The transpose with its tile grid at (0, 0). */
static void transpose_grid(const rs__transpose_ops_t *ops, unsigned char *d,
                           size_t dld, const unsigned char *s, size_t sld,
                           int64_t rows, int64_t cols, size_t es, int stream)
{
    const int k = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
    tr_job_t j = {d, s, dld, sld, es, RS__TR_LINE / (int64_t)es, ops->line[k],
                  NULL, NULL};
    if (stream && ops->stream != NULL &&
        ((uintptr_t)d % RS__TR_LINE | dld % RS__TR_LINE) == 0) {
        j.stream = ops->stream;
        j.line_nt = ops->line_nt[k];
    }
    const int64_t rfull = rows - rows % j.e, cfull = cols - cols % j.e;
    if (j.stream != NULL)
        run_streamed(&j, rfull, cfull);
    else
        run_cached(&j, rfull, cfull);
    if (cfull < cols)
        edge_tile(d + (size_t)cfull * dld, dld, s + (size_t)cfull * es, sld,
                  es, rfull, cols - cfull);
    if (rfull < rows)
        edge_tile(d + (size_t)rfull * es, dld, s + (size_t)rfull * sld, sld,
                  es, rows - rfull, cols);
    if (j.stream != NULL && ops->fence != NULL)
        ops->fence();
}

/* Elements before the first cache line boundary of every row of a side
 * whose rows start at p, ld bytes apart; 0 when no shift makes them line
 * up (ld not a multiple of a line, or p not a multiple of es). */
static int64_t lead(const void *p, size_t ld, size_t es, int64_t limit)
{
    const size_t mis = (uintptr_t)p % RS__TR_LINE;
    if (ld % RS__TR_LINE != 0 || mis % es != 0)
        return 0;
    const int64_t n = (int64_t)((RS__TR_LINE - mis) % RS__TR_LINE / es);
    return n < limit ? n : limit;
}

/* The tile grid is shifted so that tiles start on cache lines on both
 * sides: a source row offset lines up the destination, a column offset the
 * source. The rows and columns before the grid take the edge blocks. */
void rs__transpose(void *dst, int64_t dst_ld, const void *src, int64_t src_ld,
                   int64_t rows, int64_t cols, size_t elsize, int stream)
{
    const rs__transpose_ops_t *ops = ops_for(rs__simd_active());
    unsigned char *d = dst;
    const unsigned char *s = src;
    const size_t dld = (size_t)dst_ld * elsize, sld = (size_t)src_ld * elsize;
    if (ops == &rs__transpose_ops_portable) {
        run_portable(d, dld, s, sld, elsize, rows, cols);
        return;
    }
    const int64_t a = lead(d, dld, elsize, rows);
    const int64_t b = lead(s, sld, elsize, cols);
    if (a > 0)
        edge_tile(d, dld, s, sld, elsize, a, cols);
    if (b > 0)
        edge_tile(d + (size_t)a * elsize, dld, s + (size_t)a * sld, sld,
                  elsize, rows - a, b);
    transpose_grid(ops, d + (size_t)a * elsize + (size_t)b * dld, dld,
                   s + (size_t)a * sld + (size_t)b * elsize, sld, rows - a,
                   cols - b, elsize, stream);
}
