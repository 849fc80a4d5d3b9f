/* A reference FP8 quantizer for tests: the rule of include/reshard/quant.h
 * written from its text with plain loops over a whole row-major tensor,
 * values decoded and encoded by ref_float (a search over the target's
 * values), independent of src/core/quant*.c. Slow on purpose. */
#ifndef RS_TEST_REF_QUANT_H
#define RS_TEST_REF_QUANT_H

#include <stdint.h>

#include "reshard/quant.h"

/* Quantizes the whole tensor `x` (ndim dims, `shape`, dtype `dt`: bf16,
 * f16 or f32) under scheme/block/format of `q`. Returns 0 and fills
 * *q_out (prod(shape) FP8 codes) and *scale_out (the block grid, row-major;
 * its extents in grid_out) as malloc'd arrays; returns -1 for a block
 * holding NaN or an infinity (nothing allocated). */
int ref_quant_tensor(const rs_quant_desc_t *q, rs_dtype_t dt, const void *x,
                     int ndim, const int64_t *shape, uint8_t **q_out,
                     float **scale_out, int64_t *grid_out);

#endif
