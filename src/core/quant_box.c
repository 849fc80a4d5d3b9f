/* rs_quant_box: checks that a box is made of whole blocks of the full
 * tensor, then walks its blocks in grid order, each in two passes over its
 * rows (the largest magnitude, then the encoding under the block's scale),
 * with the kernels of the active instruction-set level. A block's rows are
 * contiguous runs of the box; a 128 x 128 bf16 block is 32 KiB, so the
 * second pass reads what the first left in cache. */
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

static uint32_t block_amax(const qwalk_t *w, const unsigned char *src,
                           const int64_t *o, const int64_t *e)
{
    int64_t r[RS_MAX_DIMS] = {0};
    const size_t len = (size_t)e[w->ndim - 1];
    uint32_t m = 0;
    do {
        const uint32_t v =
            w->ops->amax[w->src](src + row_offset(w, o, r) * w->es, len);
        m = v > m ? v : m;
    } while (odometer_next(r, e, w->ndim - 1));
    return m;
}

static void block_encode(const qwalk_t *w, const unsigned char *src,
                         const int64_t *o, const int64_t *e, float scale,
                         uint8_t *q_out)
{
    int64_t r[RS_MAX_DIMS] = {0};
    const size_t len = (size_t)e[w->ndim - 1];
    const rs__qenc_fn enc = w->ops->enc[w->src][w->fmt];
    do {
        const size_t off = row_offset(w, o, r);
        enc(q_out + off, src + off * w->es, len, scale);
    } while (odometer_next(r, e, w->ndim - 1));
}

/* The rule's scale: amax / fmax rounded once in float32; 1.0 for zero. */
static float block_scale(int fmt, float amax)
{
    const float s = amax / rs__qfmt_max[fmt];
    return s == 0.0f ? 1.0f : s;
}

/* Names the block of the full tensor's grid and the elements it covers. */
static rs_status_t refuse_block(const qwalk_t *w, const int64_t *g,
                                const int64_t *o, const int64_t *e,
                                const char *what, rs_diag_t *diag)
{
    char idx[256], range[512];
    int64_t full_g[RS_MAX_DIMS];
    size_t n = 0;
    for (int d = 0; d < w->ndim; d++) {
        full_g[d] = w->lo[d] / w->block[d] + g[d];
        const long long a = (long long)(w->lo[d] + o[d]);
        n += (size_t)snprintf(range + n, n < sizeof(range) ? sizeof(range) - n
                                                           : 0,
                              "%s%lld:%lld", d > 0 ? ", " : "", a,
                              a + (long long)e[d]);
        if (n >= sizeof(range))
            n = sizeof(range) - 1;
    }
    return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': block %s "
                        "(elements [%s]) holds a NaN or an infinity; a "
                        "quantized block must be finite", what,
                        rs__format_dims(idx, sizeof(idx), full_g, w->ndim),
                        range);
}

static rs_status_t walk_blocks(const qwalk_t *w, const unsigned char *src,
                               const char *what, rs_diag_t *diag,
                               uint8_t *q_out, float *scale_out)
{
    int64_t g[RS_MAX_DIMS] = {0}, o[RS_MAX_DIMS], e[RS_MAX_DIMS];
    size_t k = 0;
    do {
        for (int d = 0; d < w->ndim; d++) {
            o[d] = g[d] * w->block[d];
            e[d] = w->box[d] - o[d] < w->block[d] ? w->box[d] - o[d]
                                                  : w->block[d];
        }
        const uint32_t bits = block_amax(w, src, o, e);
        if (bits >= rs__qsrc_inf[w->src])
            return refuse_block(w, g, o, e, what, diag);
        const float scale = block_scale(w->fmt, rs__qamax_value(w->src, bits));
        block_encode(w, src, o, e, scale, q_out);
        scale_out[k++] = scale;
    } while (odometer_next(g, w->grid, w->ndim));
    return RS_OK;
}

rs_status_t rs_quant_box(const rs_quant_desc_t *q, rs_dtype_t src_dtype,
                         const void *src, int ndim, const int64_t *full_shape,
                         const int64_t *box_lo, const int64_t *box_shape,
                         const char *what, rs_diag_t *diag, uint8_t *q_out,
                         float *scale_out)
{
    qwalk_t w;
    int64_t numel;
    if (what == NULL)
        what = "(unnamed)";
    rs_status_t st = walk_init(q, src_dtype, ndim, full_shape, box_lo,
                               box_shape, what, diag, &w);
    if (st != RS_OK)
        return st;
    if (!rs__numel(w.box, w.ndim, &numel))
        return rs__diag_set(diag, RS_ERR_INPUT, "quantizing '%s': box "
                            "overflows int64", what);
    if (numel == 0)
        return RS_OK;
    if (src == NULL || q_out == NULL || scale_out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "quantizing '%s': NULL "
                            "source or output", what);
    return walk_blocks(&w, src, what, diag, q_out, scale_out);
}
