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
    case RS_DTYPE_F32: return RS__QUANT_SOURCE_F32;
    case RS_DTYPE_BF16: return RS__QUANT_SOURCE_BF16;
    case RS_DTYPE_F16: return RS__QUANT_SOURCE_F16;
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
    if (st != RS_OK) {
        (void)rs__diag_prefix(diag, "quantizing '%s': ", what);
        return st; /* not the prefix's: it returns RS_OK for a NULL diag */
    }
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
 * front to back rather than a block's short rows one after the other. A
 * chunk is as wide as the box while its source stays under CHUNK_BYTES:
 * rows that run over whole pages keep the hardware prefetchers streaming
 * (on the machine measured in docs/quantized-refit.md, 7168x2048 bf16
 * quantized at about half the speed with chunks half as wide), and the
 * second pass finds the chunk in L2 or L3. The passes are pipelined: while a chunk is
 * encoded (bound by arithmetic), the next chunk's largest magnitudes are
 * taken row for row (bound by memory). */
#define CHUNK_BYTES ((int64_t)4 << 20)
#define CHUNK_MAX_BLOCKS 128

typedef struct qchunk {
    int64_t g[RS_MAX_DIMS]; /* grid index (in the box) of its first block */
    int64_t o[RS_MAX_DIMS]; /* origin in the box */
    int64_t e[RS_MAX_DIMS]; /* extents: its blocks' rows; its width */
    int64_t per;            /* blocks per chunk in its band */
    int nb;                 /* blocks in it */
    uint32_t bits[CHUNK_MAX_BLOCKS]; /* amax bits of its blocks */
} qchunk_t;

/* Blocks per chunk for bands of `rows` rows. */
static int64_t chunk_blocks(const qwalk_t *w, int64_t rows)
{
    const int L = w->ndim - 1;
    const int64_t b = w->block[L] < w->box[L] ? w->block[L] : w->box[L];
    const int64_t bytes = rows * b * (int64_t)w->es; /* <= the box's bytes */
    const int64_t n = bytes > 0 ? CHUNK_BYTES / bytes : CHUNK_MAX_BLOCKS;
    return n < 1 ? 1 : n > CHUNK_MAX_BLOCKS ? CHUNK_MAX_BLOCKS : n;
}

/* Fills origin, extents and block count from c->g. */
static void chunk_place(const qwalk_t *w, qchunk_t *c)
{
    const int L = w->ndim - 1;
    int64_t rows = 1;
    for (int d = 0; d <= L; d++) {
        c->o[d] = c->g[d] * w->block[d];
        c->e[d] = w->box[d] - c->o[d] < w->block[d] ? w->box[d] - c->o[d]
                                                    : w->block[d];
        rows *= d < L ? c->e[d] : 1;
    }
    c->per = chunk_blocks(w, rows);
    c->nb = (int)(w->grid[L] - c->g[L] < c->per ? w->grid[L] - c->g[L]
                                                : c->per);
    /* nb blocks, or the rest of the box (the product could overflow for
     * a huge block extent, which the rest then bounds) */
    const int64_t rest = w->box[L] - c->o[L];
    c->e[L] = c->nb > rest / w->block[L] ? rest : c->nb * w->block[L];
    memset(c->bits, 0, sizeof(c->bits));
}

/* The chunk after c in grid order (bands in order, chunks along the last
 * dim); 0 after the last. */
static int chunk_next(const qwalk_t *w, const qchunk_t *c, qchunk_t *next)
{
    const int L = w->ndim - 1;
    memcpy(next->g, c->g, sizeof(c->g));
    next->g[L] += c->per;
    if (next->g[L] >= w->grid[L]) {
        next->g[L] = 0;
        if (!odometer_next(next->g, w->grid, L))
            return 0;
    }
    chunk_place(w, next);
    return 1;
}

/* A chunk's rows one at a time: 1 and the row's element offset in the box
 * while there are rows. */
typedef struct rowcur {
    int64_t r[RS_MAX_DIMS];
    int state; /* 0 before the first row, 1 within, 2 done */
} rowcur_t;

static int row_next(const qwalk_t *w, const qchunk_t *c, rowcur_t *rc,
                    size_t *off)
{
    if (rc->state == 2)
        return 0;
    if (rc->state == 1 && !odometer_next(rc->r, c->e, w->ndim - 1)) {
        rc->state = 2;
        return 0;
    }
    rc->state = 1;
    *off = row_offset(w, c->o, rc->r);
    return 1;
}

static void scan_row(const qwalk_t *w, const unsigned char *src, qchunk_t *c,
                     size_t off)
{
    const int L = w->ndim - 1;
    w->ops->amax_row[w->src](src + off * w->es, (size_t)c->e[L],
                             (size_t)w->block[L], c->bits);
}

/* Encodes chunk c under `scale` (and `tab`, or NULL) while scanning
 * `next` (NULL: none). */
static void encode_and_scan(const qwalk_t *w, const unsigned char *src,
                            const qchunk_t *c, const float *scale,
                            const rs__quant_tab_t *tab, qchunk_t *next,
                            uint8_t *q_out)
{
    const int L = w->ndim - 1;
    const rs__quant_encode_row_fn enc = w->ops->enc_row[w->src][w->fmt];
    rowcur_t a = {{0}, 0}, b = {{0}, next != NULL ? 0 : 2};
    size_t oa = 0, ob = 0;
    int more_a = row_next(w, c, &a, &oa);
    int more_b = next != NULL && row_next(w, next, &b, &ob);
    while (more_a || more_b) {
        if (more_a) {
            /* the row scanned next (as far as this row is wide: past a
             * narrower one, the band's next chunk; prefetches never
             * fault), else this one (nothing new) */
            const size_t ahead = more_b ? ob : oa;
            enc(q_out + oa, src + oa * w->es, (size_t)c->e[L],
                (size_t)w->block[L], scale, tab, src + ahead * w->es);
            more_a = row_next(w, c, &a, &oa);
        }
        if (more_b) {
            scan_row(w, src, next, ob);
            more_b = row_next(w, next, &b, &ob);
        }
    }
}

/* The rule's scale: amax / fmax rounded once in float32; 1.0 for zero. */
static float block_scale(int fmt, float amax)
{
    const float s = amax / rs__quant_format_max[fmt];
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
        const int64_t a = w->lo[d] + gd * w->block[d];
        const int64_t rest = w->lo[d] + w->box[d] - a;
        const int64_t end = a + (rest < w->block[d] ? rest : w->block[d]);
        full_g[d] = w->lo[d] / w->block[d] + gd;
        n += (size_t)snprintf(range + n, sizeof(range) - n, "%s%lld:%lld",
                              d > 0 ? ", " : "", (long long)a, (long long)end);
        if (n >= sizeof(range))
            n = sizeof(range) - 1;
    }
    return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': block %s "
                        "(elements [%s]) holds a NaN or an infinity; a "
                        "quantized block must be finite", what,
                        rs__format_dims(idx, sizeof(idx), full_g, w->ndim),
                        range);
}

/* Chunks in grid order, so scales come out in grid order: the first is
 * scanned alone, then each is checked and encoded while the next is
 * scanned. */
static rs_status_t walk_blocks(const qwalk_t *w, const unsigned char *src,
                               const char *what, rs_diag_t *diag,
                               uint8_t *q_out, float *scale_out)
{
    qchunk_t ch[2];
    rs__quant_tab_t tab[CHUNK_MAX_BLOCKS]; /* per block, when the level prepares */
    const rs__quant_prep_fn prep = w->ops->prep[w->src][w->fmt];
    int cur = 0, more = 1;
    size_t k = 0, off;
    memset(ch, 0, sizeof(ch));
    chunk_place(w, &ch[0]);
    rowcur_t rc = {{0}, 0};
    while (row_next(w, &ch[0], &rc, &off))
        scan_row(w, src, &ch[0], off);
    while (more) {
        qchunk_t *c = &ch[cur], *next = &ch[cur ^ 1];
        for (int b = 0; b < c->nb; b++) {
            if (c->bits[b] >= rs__quant_source_inf[w->src])
                return refuse_block(w, c, b, what, diag);
            scale_out[k + (size_t)b] =
                block_scale(w->fmt, rs__quant_amax_value(w->src, c->bits[b]));
            if (prep != NULL)
                prep(scale_out[k + (size_t)b], &tab[b]);
        }
        more = chunk_next(w, c, next);
        encode_and_scan(w, src, c, scale_out + k, prep != NULL ? tab : NULL,
                        more ? next : NULL, q_out);
        k += (size_t)c->nb;
        cur ^= 1;
    }
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
