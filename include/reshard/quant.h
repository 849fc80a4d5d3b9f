/* FP8 quantization: how a captured copy asks for its source to be quantized
 * (scheme, FP8 format, block shape, and the region its scales land in), the
 * one rule that turns bf16/f16/f32 values into FP8 values and float32
 * scales, and the names under which a publisher serves a quantized copy of
 * a tensor (docs/quantized-refit.md; docs/formats.md, "`quant`"
 * and "Quantization specs and derived tensor names").
 *
 * The rule, per block of the full source tensor (blocks tile the tensor
 * from element 0; the last block along a dim may be shorter):
 *   amax  = max |x| over the block (exact: max does not round);
 *   scale = amax / fmax in float32, rounded to nearest even, where fmax is
 *           the format's largest finite value (448 for f8e4m3, 57344 for
 *           f8e5m2); a scale that is 0 (an all-zero block, or amax below
 *           fmax * 2^-149) is 1.0 instead;
 *   q     = x / scale in float32 (one IEEE division, round to nearest even),
 *           then rounded to the format to nearest even, saturating at
 *           +-fmax; the sign of zero is kept.
 * The stored scale is the dequantization multiplier (x ~ q * scale), as
 * the weight_scale_inv tensors of FP8 checkpoints are. A block holding NaN
 * or an infinity is refused (RS_ERR_INPUT naming the tensor and block):
 * its scale would poison every value of the block.
 *
 * Threads: every function here is pure; call from any thread. */
#ifndef RESHARD_QUANT_H
#define RESHARD_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/dtype.h"
#include "reshard/limits.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rs_quant_scheme {
    RS_QUANT_NONE = 0,
    RS_QUANT_FP8_BLOCK = 1,   /* one scale per block of `block` */
    RS_QUANT_FP8_CHANNEL = 2, /* one scale per index of dim 0 (an output
                               * channel): block [1, full dims...] */
    RS_QUANT_FP8_TENSOR = 3   /* one scale for the whole tensor */
} rs_quant_scheme_t;

/* How one captured copy is quantized. The copy's dest_dtype (and its
 * parameter's dtype) is `format`; its view selects the values to write,
 * and the scales of every block the view touches are written, row-major in
 * block-grid order, into scale_param.as_strided(scale_shape, scale_stride,
 * scale_offset). The scale parameter is float32. scale_shape, with dims of
 * extent 1 dropped, equals the grid of touched blocks with dims of extent
 * 1 dropped. */
typedef struct rs_quant_desc {
    rs_quant_scheme_t scheme;
    rs_dtype_t format;      /* RS_DTYPE_F8E4M3 or RS_DTYPE_F8E5M2 */
    int block_ndim;         /* RS_QUANT_FP8_BLOCK: 1..RS_MAX_DIMS extents
                             * for the source's trailing dims (leading dims
                             * get 1); 0 for the other schemes */
    const int64_t *block;
    const char *scale_param;
    int64_t scale_offset;   /* elements */
    int scale_ndim;
    const int64_t *scale_shape;
    const int64_t *scale_stride; /* elements */
} rs_quant_desc_t;

/* The block extent per dim of a source of `ndim` dims and `shape` under
 * `q` (scheme and block only are read): fp8_block's trailing extents with
 * leading 1s, [1, shape[1], ...] for fp8_channel, `shape` for fp8_tensor
 * (a dim of extent 0 gets block 1). RS_ERR_INPUT when the scheme or format
 * is unknown, a block extent is not positive, or the block has more dims
 * than the source; the diag names the field. Output set only on success. */
RS_API rs_status_t rs_quant_block_shape(const rs_quant_desc_t *q, int ndim,
                                        const int64_t *shape, rs_diag_t *diag,
                                        int64_t *block_out);

/* The canonical text of a spec, the suffix of the names a publisher serves
 * it under: "fp8_block:128x128:f8e4m3", "fp8_channel:f8e5m2",
 * "fp8_tensor:f8e4m3". Writes at most `cap` bytes with the NUL; returns the
 * length it needs (without the NUL), or 0 for an invalid spec. */
RS_API size_t rs_quant_spec_format(const rs_quant_desc_t *q, char *out,
                                   size_t cap);

/* Parses that text. The block array is written into block_store (room for
 * RS_MAX_DIMS) and q->block points at it; the scale fields are zeroed.
 * RS_ERR_INPUT naming what is wrong. */
RS_API rs_status_t rs_quant_spec_parse(const char *text, int64_t *block_store,
                                       rs_diag_t *diag, rs_quant_desc_t *q_out);

/* The names a publisher serves a quantized copy of tensor `src` under:
 * "<src>#<spec>" holds the FP8 values (full shape of `src`, dtype the
 * format), "<src>#<spec>#scale" the float32 scales (full shape: the block
 * grid of `src`, ceil(shape[d] / block[d]) per dim). */
#define RS_QUANT_NAME_SEP '#'
#define RS_QUANT_SCALE_SUFFIX "#scale"

/* Quantizes a box of a source tensor of full_shape: `src` holds the box's
 * elements only, row-major in box_shape (dtype src_dtype: bf16, f16 or
 * f32), as a shard or a staging buffer does. The box starts on block boundaries of the full tensor
 * (box_lo[d] % block[d] == 0) and each dim ends on one or at the tensor's
 * end, so every block it touches lies inside it whole. Writes the FP8
 * values row-major in box order to q_out (box elements bytes) and the
 * scales row-major in block-grid order to scale_out (prod ceil(box/block)
 * floats). `what` names the tensor in errors. RS_ERR_INPUT for a box that
 * is not block-aligned, an unsupported dtype or a non-finite value (the
 * diag names `what` and the block's grid index); outputs may then be
 * partly written. The arithmetic is IEEE whatever the calling thread's
 * floating-point mode (flush-to-zero, denormals-are-zero and the rounding
 * mode are reset for the call and restored). Cost: two passes over the
 * box. */
RS_API rs_status_t rs_quant_box(const rs_quant_desc_t *q, rs_dtype_t src_dtype,
                                const void *src, int ndim,
                                const int64_t *full_shape,
                                const int64_t *box_lo, const int64_t *box_shape,
                                const char *what, rs_diag_t *diag,
                                uint8_t *q_out, float *scale_out);

#ifdef __cplusplus
}
#endif
#endif
