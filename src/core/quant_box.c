/* rs_quant_box: checks that a box is made of whole blocks of the full
 * tensor, then walks its blocks in grid order, a chunk of neighbouring
 * blocks at a time, each chunk in two passes over its rows (the largest
 * magnitude of every block, then the encoding under the blocks' scales),
 * with the kernels of the active instruction-set level. */
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "core/quant_impl.h"
#include "reshard/quant.h"

typedef struct qwalk {
    int ndim; /* >= 1: a 0-d source is walked as shape [1] */
    int src, fmt;
    size_t es;
    const rs__quant_ops_t *ops;
    int64_t lo[RS_MAX_DIMS], box[RS_MAX_DIMS], block[RS_MAX_DIMS];
    int64_t grid[RS_MAX_DIMS], stride[RS_MAX_DIMS];
    size_t bytes; /* of the source box */
} qwalk_t;

static int src_index(rs_dtype_t dtype)
{
    switch (dtype) {
    case RS_DTYPE_F32: return RS__QSRC_F32;
    case RS_DTYPE_BF16: return RS__QSRC_BF16;
    case RS_DTYPE_F16: return RS__QSRC_F16;
    default: return -1;
    }
}

/* One dim of the box: inside the tensor, starting on a block boundary and
 * ending on one or at the tensor's end. */
static rs_status_t check_dim(qwalk_t *w, int d, int64_t full, const char *what,
                             rs_diag_t *diag)
{
    const int64_t lo = w->lo[d], n = w->box[d], b = w->block[d];
    int64_t end;
    if (lo < 0 || n < 0 || !rs__add_i64(lo, n, &end) || end > full)
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': box dim %d "
                            "[%lld, +%lld) is outside the tensor's extent %lld",
                            what, d, (long long)lo, (long long)n,
                            (long long)full);
    if (lo % b != 0 || (end != full && end % b != 0))
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': box dim %d "
                            "[%lld, %lld) does not start and end on blocks of "
                            "%lld (or the tensor's end %lld)", what, d,
                            (long long)lo, (long long)end, (long long)b,
                            (long long)full);
    w->grid[d] = n / b + (n % b != 0);
    return RS_OK;
}

static rs_status_t walk_init(const rs_quant_desc_t *q, rs_dtype_t src_dtype,
                             int ndim, const int64_t *full_shape,
                             const int64_t *box_lo, const int64_t *box_shape,
                             const char *what, rs_diag_t *diag, qwalk_t *w)
{
    const int64_t one = 1, zero = 0;
    rs_status_t st = rs_quant_block_shape(q, ndim, full_shape, diag, w->block);
    if (st != RS_OK)
        return st;
    w->src = src_index(src_dtype);
    if (w->src < 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': source "
                            "dtype %s is not bf16, f16 or f32", what,
                            rs_dtype_name(src_dtype));
    if (ndim > 0 && (box_lo == NULL || box_shape == NULL))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "quantizing '%s': NULL "
                            "box", what);
    w->ndim = ndim > 0 ? ndim : 1;
    w->fmt = q->format == RS_DTYPE_F8E4M3 ? RS__QFMT_E4M3 : RS__QFMT_E5M2;
    w->es = rs_dtype_size(src_dtype);
    w->ops = rs__quant_ops(rs__simd_active());
    if (ndim == 0)
        w->block[0] = 1;
    for (int d = 0; d < w->ndim; d++) {
        w->lo[d] = ndim > 0 ? box_lo[d] : zero;
        w->box[d] = ndim > 0 ? box_shape[d] : one;
        st = check_dim(w, d, ndim > 0 ? full_shape[d] : one, what, diag);
        if (st != RS_OK)
            return st;
    }
    if (!rs__row_major(w->box, w->ndim, w->stride))
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': box "
                            "overflows int64", what);
    return RS_OK;
}

/* Advances the odometer r over dims [0, n) of extents e; 0 when it wraps. */
static int odometer_next(int64_t *r, const int64_t *e, int n)
{
    for (int d = n - 1; d >= 0; d--) {
        if (++r[d] < e[d])
            return 1;
        r[d] = 0;
    }
    return 0;
}

/* Element offset in the box of row r of the block at origin o. */
static size_t row_offset(const qwalk_t *w, const int64_t *o, const int64_t *r)
{
    int64_t off = o[w->ndim - 1];
    for (int d = 0; d + 1 < w->ndim; d++)
        off += (o[d] + r[d]) * w->stride[d];
    return (size_t)off;
}

/* Blocks are taken a chunk at a time: blocks side by side along the last
 * dim, sharing their rows, so that each pass reads the rows of the chunk
 * front to back (long runs that the prefetchers follow) rather than a
 * block's short rows one after the other; the chunk's source is kept under
 * CHUNK_BYTES, so that the second pass finds it in L2. */
#define CHUNK_BYTES (512 * 1024)
#define CHUNK_MAX_BLOCKS 64

typedef struct qchunk {
    int64_t g[RS_MAX_DIMS]; /* grid index (in the box) of its first block */
    int64_t o[RS_MAX_DIMS]; /* origin in the box */
    int64_t e[RS_MAX_DIMS]; /* extents: its blocks' rows; its width */
    int nb;                 /* blocks in it */
} qchunk_t;

/* Runs BODY for each row of the chunk, `off` the row's element offset in the
 * box; rows run along the last dim, over the chunk's width. */
#define FOR_EACH_ROW(w, c, off, BODY)                                         \
    do {                                                                      \
        int64_t r_[RS_MAX_DIMS] = {0};                                        \
        do {                                                                  \
            const size_t off = row_offset((w), (c)->o, r_);                   \
            BODY;                                                             \
        } while (odometer_next(r_, (c)->e, (w)->ndim - 1));                   \
    } while (0)

static void chunk_amax(const qwalk_t *w, const unsigned char *src,
                       const qchunk_t *c, uint32_t *bits)
{
    const int L = w->ndim - 1;
    const rs__qamax_row_fn amax = w->ops->amax_row[w->src];
    memset(bits, 0, sizeof(uint32_t) * (size_t)c->nb);
    FOR_EACH_ROW(w, c, off, amax(src + off * w->es, (size_t)c->e[L],
                                 (size_t)w->block[L], bits));
}

/* While a chunk is encoded (bound by arithmetic), the rows of the band
 * below are prefetched, one row per row encoded, so that the next chunk's
 * first pass (bound by memory) finds them near. Only for chunks as wide as
 * the box, where the next chunk is that band. */
static void prefetch_below(const qwalk_t *w, const unsigned char *src,
                           const qchunk_t *c, size_t off)
{
#if defined(__GNUC__)
    const int L = w->ndim - 1;
    const size_t ahead = off + (size_t)(c->e[L - 1] * w->stride[L - 1]);
    const size_t bytes = (size_t)c->e[L] * w->es;
    if (ahead * w->es + bytes > w->bytes)
        return;
    for (size_t k = 0; k < bytes; k += 64)
        __builtin_prefetch(src + ahead * w->es + k, 0, 3);
#else
    (void)w, (void)src, (void)c, (void)off;
#endif
}

static void chunk_encode(const qwalk_t *w, const unsigned char *src,
                         const qchunk_t *c, const float *scale, uint8_t *q_out)
{
    const int L = w->ndim - 1;
    const rs__qenc_row_fn enc = w->ops->enc_row[w->src][w->fmt];
    const int ahead = L > 0 && c->e[L] == w->box[L];
    FOR_EACH_ROW(w, c, off, {
        if (ahead)
            prefetch_below(w, src, c, off);
        enc(q_out + off, src + off * w->es, (size_t)c->e[L],
            (size_t)w->block[L], scale);
    });
}

/* The rule's scale: amax / fmax rounded once in float32; 1.0 for zero. */
static float block_scale(int fmt, float amax)
{
    const float s = amax / rs__qfmt_max[fmt];
    return s == 0.0f ? 1.0f : s;
}

/* Names block k of the chunk by its index in the full tensor's grid and
 * the elements it covers. */
static rs_status_t refuse_block(const qwalk_t *w, const qchunk_t *c, int k,
                                const char *what, rs_diag_t *diag)
{
    char idx[256], range[512];
    int64_t full_g[RS_MAX_DIMS];
    size_t n = 0;
    const int L = w->ndim - 1;
    for (int d = 0; d < w->ndim; d++) {
        const int64_t gd = c->g[d] + (d == L ? k : 0);
        const int64_t a = gd * w->block[d];
        const int64_t len = w->box[d] - a < w->block[d] ? w->box[d] - a
                                                        : w->block[d];
        full_g[d] = w->lo[d] / w->block[d] + gd;
        n += (size_t)snprintf(range + n, sizeof(range) - n, "%s%lld:%lld",
                              d > 0 ? ", " : "", (long long)(w->lo[d] + a),
                              (long long)(w->lo[d] + a + len));
        if (n >= sizeof(range))
            n = sizeof(range) - 1;
    }
    return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': block %s "
                        "(elements [%s]) holds a NaN or an infinity; a "
                        "quantized block must be finite", what,
                        rs__format_dims(idx, sizeof(idx), full_g, w->ndim),
                        range);
}

/* Both passes over one chunk; its scales go to scale_out[0 .. nb). */
static rs_status_t do_chunk(const qwalk_t *w, const unsigned char *src,
                            const qchunk_t *c, const char *what,
                            rs_diag_t *diag, uint8_t *q_out, float *scale_out)
{
    uint32_t bits[CHUNK_MAX_BLOCKS];
    chunk_amax(w, src, c, bits);
    for (int k = 0; k < c->nb; k++) {
        if (bits[k] >= rs__qsrc_inf[w->src])
            return refuse_block(w, c, k, what, diag);
        scale_out[k] = block_scale(w->fmt, rs__qamax_value(w->src, bits[k]));
    }
    chunk_encode(w, src, c, scale_out, q_out);
    return RS_OK;
}

/* Blocks per chunk for rows of `rows` block rows. */
static int64_t chunk_blocks(const qwalk_t *w, int64_t rows)
{
    const int64_t bytes = rows * w->block[w->ndim - 1] * (int64_t)w->es;
    const int64_t n = bytes > 0 ? CHUNK_BYTES / bytes : CHUNK_MAX_BLOCKS;
    return n < 1 ? 1 : n > CHUNK_MAX_BLOCKS ? CHUNK_MAX_BLOCKS : n;
}

/* Bands (one block index for every dim but the last) in grid order, each
 * cut into chunks along the last dim: scales come out in grid order. */
static rs_status_t walk_blocks(const qwalk_t *w, const unsigned char *src,
                               const char *what, rs_diag_t *diag,
                               uint8_t *q_out, float *scale_out)
{
    const int L = w->ndim - 1;
    qchunk_t c;
    size_t k = 0;
    memset(&c, 0, sizeof(c));
    do {
        int64_t rows = 1;
        for (int d = 0; d < L; d++) {
            c.o[d] = c.g[d] * w->block[d];
            c.e[d] = w->box[d] - c.o[d] < w->block[d] ? w->box[d] - c.o[d]
                                                      : w->block[d];
            rows *= c.e[d];
        }
        const int64_t per = chunk_blocks(w, rows);
        for (int64_t j = 0; j < w->grid[L]; j += per) {
            c.g[L] = j;
            c.nb = (int)(w->grid[L] - j < per ? w->grid[L] - j : per);
            c.o[L] = j * w->block[L];
            c.e[L] = w->box[L] - c.o[L] < c.nb * w->block[L]
                         ? w->box[L] - c.o[L] : c.nb * w->block[L];
            rs_status_t st = do_chunk(w, src, &c, what, diag, q_out,
                                      scale_out + k);
            if (st != RS_OK)
                return st;
            k += (size_t)c.nb;
        }
        c.g[L] = 0;
    } while (odometer_next(c.g, w->grid, L));
    return RS_OK;
}

/* The rule is IEEE arithmetic: division and rounding to nearest even,
 * with subnormals. A thread may run with other settings (PyTorch's
 * set_flush_denormal sets flush-to-zero and denormals-are-zero), so the
 * walk runs under the default SSE control bits, restored after. */
#if defined(__SSE2__)
#include <xmmintrin.h>
#define MXCSR_IEEE_MASK 0xe040u /* FTZ, rounding control, DAZ */
static unsigned ieee_enter(void)
{
    const unsigned csr = _mm_getcsr();
    if (csr & MXCSR_IEEE_MASK)
        _mm_setcsr(csr & ~MXCSR_IEEE_MASK);
    return csr;
}

static void ieee_leave(unsigned csr)
{
    if (csr & MXCSR_IEEE_MASK)
        _mm_setcsr(csr);
}
#else
static unsigned ieee_enter(void) { return 0; }
static void ieee_leave(unsigned csr) { (void)csr; }
#endif

rs_status_t rs_quant_box(const rs_quant_desc_t *q, rs_dtype_t src_dtype,
                         const void *src, int ndim, const int64_t *full_shape,
                         const int64_t *box_lo, const int64_t *box_shape,
                         const char *what, rs_diag_t *diag, uint8_t *q_out,
                         float *scale_out)
{
    qwalk_t w;
    int64_t numel, bytes;
    if (what == NULL)
        what = "(unnamed)";
    rs_status_t st = walk_init(q, src_dtype, ndim, full_shape, box_lo,
                               box_shape, what, diag, &w);
    if (st != RS_OK)
        return st;
    if (!rs__numel(w.box, w.ndim, &numel) ||
        !rs__mul_i64(numel, (int64_t)w.es, &bytes))
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': box "
                            "overflows int64", what);
    if (numel == 0)
        return RS_OK;
    if (src == NULL || q_out == NULL || scale_out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "quantizing '%s': NULL "
                            "source or output", what);
    w.bytes = (size_t)bytes;
    const unsigned csr = ieee_enter();
    st = walk_blocks(&w, src, what, diag, q_out, scale_out);
    ieee_leave(csr);
    return st;
}
