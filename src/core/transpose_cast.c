/* Transposes with a bf16 <-> f32 cast: the walk over tiles that stay in
 * L1, the level's fused blocks inside them, and the scalar casts for the
 * ragged edges (columns past the last whole block, rows past the last
 * whole band). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert_scalar.h"
#include "core/simd.h"
#include "core/transpose_cast.h"
#include "core/transpose_cast_impl.h"

/* Tile edge in elements: 64 x 64 source elements, 8 KiB of bf16 and 16
 * KiB of f32 on the two sides, so a tile's lines stay in L1 while every
 * one of them is completed; blocks of TC_BLOCK x TC_BLOCK keep the pages
 * both sides touch within the TLB's reach. */
#ifndef TC_TILE
#define TC_TILE 64
#endif
/* The streamed walk: a band of RS__TCAST_RUN / element size source rows
 * (64 f32 or 128 bf16 destination elements: each destination row gets a
 * run of 256 bytes, four lines, per visit), read TC_PASS columns per pass,
 * TC_CHUNK columns at a time into an L2 buffer of TC_CHUNK destination
 * runs (256 KiB). Each source row is read 2 KiB (bf16) or 4 KiB (f32) at
 * a time: with 128 columns a visit (512 bytes of f32 from each of 128
 * rows) the reads ran at 8 GB/s where a sequential read of the same
 * matrix runs at 19, and f32 -> bf16 wrote 4 GB/s; with 1024, 6.5. */
#ifndef TC_CHUNK
#define TC_CHUNK 1024
#endif
#ifndef TC_PASS
#define TC_PASS 2048
#endif
#ifndef TC_BLOCK
#define TC_BLOCK 256
#endif

typedef struct tc_job {
    unsigned char *d;
    const unsigned char *s;
    size_t dld, sld, des, ses; /* row steps in bytes, element sizes */
    rs__tcast_block_fn block;
    int to_f32;
} tc_job_t;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void cast_one(const tc_job_t *j, int64_t i, int64_t c)
{
    unsigned char *d = j->d + (size_t)c * j->dld + (size_t)i * j->des;
    const unsigned char *s = j->s + (size_t)i * j->sld + (size_t)c * j->ses;
    if (j->to_f32) {
        uint16_t h;
        memcpy(&h, s, 2);
        const float f = rs__bf16_to_f32(h);
        memcpy(d, &f, 4);
    } else {
        float f;
        memcpy(&f, s, 4);
        const uint16_t h = rs__f32_to_bf16(f);
        memcpy(d, &h, 2);
    }
}

/* Element by element over source rows [i0, i1) x columns [c0, c1). */
static void edge(const tc_job_t *j, int64_t i0, int64_t i1, int64_t c0,
                 int64_t c1)
{
    for (int64_t c = c0; c < c1; c++)
        for (int64_t i = i0; i < i1; i++)
            cast_one(j, i, c);
}

/* The whole blocks of a tile at source (i0, c0), nr x nc elements, both
 * multiples of the block's: a band of destination rows at a time, written
 * on along its rows. */
static void tile(const tc_job_t *j, int64_t i0, int64_t c0, int64_t nr,
                 int64_t nc)
{
    for (int64_t c = c0; c < c0 + nc; c += RS__TCAST_COLS)
        for (int64_t i = i0; i < i0 + nr; i += RS__TCAST_ROWS)
            j->block(j->d + (size_t)c * j->dld + (size_t)i * j->des, j->dld,
                     j->s + (size_t)i * j->sld + (size_t)c * j->ses, j->sld);
}

/* Whole blocks and ragged edges over source rows [i0, i1) x columns [c0,
 * c1), in TC_BLOCK blocks of tiles. */
static void run_cached(const tc_job_t *j, int64_t i0, int64_t i1, int64_t c0,
                       int64_t c1)
{
    const int64_t rfull = i0 + (i1 - i0) / RS__TCAST_ROWS * RS__TCAST_ROWS;
    const int64_t cfull = c0 + (c1 - c0) / RS__TCAST_COLS * RS__TCAST_COLS;
    for (int64_t bc = c0; bc < cfull; bc += TC_BLOCK)
        for (int64_t bi = i0; bi < rfull; bi += TC_BLOCK) {
            const int64_t iend = min64(rfull, bi + TC_BLOCK);
            const int64_t cend = min64(cfull, bc + TC_BLOCK);
            for (int64_t c = bc; c < cend; c += TC_TILE)
                for (int64_t i = bi; i < iend; i += TC_TILE)
                    tile(j, i, c, min64(TC_TILE, iend - i),
                         min64(TC_TILE, cend - c));
        }
    edge(j, i0, rfull, cfull, c1);
    edge(j, rfull, i1, c0, c1);
}

/* Streamed walk over source rows [i0, i1) x columns [0, cols), i1 - i0 a
 * multiple of the band (RS__TCAST_RUN bytes of destination elements) and
 * cols of RS__TCAST_COLS: the band's source rows are read on along them,
 * TC_PASS elements of each per pass; each chunk of TC_CHUNK columns (the
 * pass's last may be narrower) is cast and transposed into buf, TC_CHUNK
 * destination runs with a line of slack in front (the row copy reads up
 * to 63 bytes before a run), which leave it with non-temporal stores. Runs of four lines rather than
 * one let the memory write each destination row in longer pieces, and the
 * band's 64 or 128 source rows are each read 256 or 512 bytes at a time.
 * Destination rows off cache lines keep the partial line at the end of
 * each run in `carry` until the next band completes it. Inside a chunk
 * the blocks go 8 rows at a time along it: with power-of-two strides the
 * rows share cache sets, and more than 8 of them would evict each other's
 * lines. */
static void run_streamed(const tc_job_t *j, rs__tcast_stream_fn stream,
                         unsigned char *buf, unsigned char *carry,
                         int64_t band, int64_t i0, int64_t i1, int64_t cols)
{
    const size_t w = RS__TCAST_RUN;
    for (int64_t bc = 0; bc < cols; bc += TC_PASS) {
        const int64_t cend = min64(cols, bc + TC_PASS);
        for (int64_t i = i0; i < i1; i += band)
            for (int64_t c = bc; c < cend; c += TC_CHUNK) {
                const int64_t width = min64(TC_CHUNK, cend - c);
                const unsigned char *s =
                    j->s + (size_t)i * j->sld + (size_t)c * j->ses;
                for (int64_t r = 0; r < band; r += RS__TCAST_ROWS)
                    for (int64_t k = 0; k < width; k += RS__TCAST_COLS)
                        j->block(buf + (size_t)k * w + (size_t)r * j->des, w,
                                 s + (size_t)r * j->sld + (size_t)k * j->ses,
                                 j->sld);
                /* no carry (NULL) when destination rows start on lines */
                stream(j->d + (size_t)c * j->dld + (size_t)i * j->des, j->dld,
                       buf, (size_t)width,
                       carry != NULL ? carry + (size_t)(c - bc) * 64 : NULL,
                       i == i0, i + band == i1);
            }
    }
}

#if RS__TR_X86
/* What the BF16 conversion's kernel needs beside AVX-512 F and BW. */
static int has_bf16(void)
{
    return __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
}
#endif

static const rs__tcast_ops_t *ops_for(rs__simd_t level)
{
#if RS__TR_X86
    if (level >= RS__SIMD_AVX512 && has_bf16())
        return &rs__tcast_ops_avx512bf16;
    if (level >= RS__SIMD_AVX2)
        return &rs__tcast_ops_avx2;
#else
    (void)level;
#endif
    return NULL;
}

/* Destination rows before the first whose start is on a cache line (all
 * of them are, or none: dld is a multiple of 64), so that every run of
 * the streamed walk is whole lines; -1 when none can be (the runs then
 * start and end inside lines). */
static int64_t lead(const tc_job_t *j, int64_t rows)
{
    const size_t mis = (uintptr_t)j->d % 64;
    if (j->dld % 64 != 0 || mis % j->des != 0)
        return -1;
    const int64_t n = (int64_t)((64 - mis) % 64 / j->des);
    return n < rows ? n : rows;
}

int rs__transpose_cast(rs_dtype_t to, void *dst, int64_t dst_ld,
                       rs_dtype_t from, const void *src, int64_t src_ld,
                       int64_t rows, int64_t cols, int stream)
{
    const rs__tcast_ops_t *ops = ops_for(rs__simd_active());
    const int to_f32 = to == RS_DTYPE_F32 && from == RS_DTYPE_BF16;
    if (ops == NULL || (!to_f32 && !(to == RS_DTYPE_BF16 &&
                                     from == RS_DTYPE_F32)))
        return 0;
    const size_t des = to_f32 ? 4 : 2, ses = to_f32 ? 2 : 4;
    const tc_job_t j = {dst, src, (size_t)dst_ld * des, (size_t)src_ld * ses,
                        des, ses, to_f32 ? ops->bf16_f32 : ops->f32_bf16,
                        to_f32};
    if (!stream) {
        run_cached(&j, 0, rows, 0, cols);
        return 1;
    }
    /* the streamed walk needs the level's streaming stores, and, where
     * runs do not start on lines, the carried partial lines */
    const int64_t lines = lead(&j, rows);
    unsigned char *carry =
        lines < 0 ? malloc((size_t)TC_PASS * 64 + 64) : NULL; /* + slack */
    unsigned char *slack =
        aligned_alloc(64, 64 + (size_t)TC_CHUNK * RS__TCAST_RUN);
    if (ops->stream == NULL || (lines < 0 && carry == NULL) || slack == NULL) {
        free(carry);
        free(slack);
        run_cached(&j, 0, rows, 0, cols);
        return 1;
    }
    const int64_t a = lines < 0 ? 0 : lines;
    const int64_t band = RS__TCAST_RUN / (int64_t)des;
    const int64_t rend = a + (rows - a) / band * band;
    const int64_t cend = cols / RS__TCAST_COLS * RS__TCAST_COLS;
    run_cached(&j, 0, a, 0, cols);
    run_streamed(&j, ops->stream, slack + 64, carry, band, a, rend, cend);
    run_cached(&j, a, rend, cend, cols);
    run_cached(&j, rend, rows, 0, cols);
    ops->tr->fence();
    free(carry);
    free(slack);
    return 1;
}
