/* The reference FP8 quantizer (ref_quant.h): per block of the full tensor,
 * amax, scale = amax / fmax in float (1.0 when that is 0), then each value
 * divided by its block's scale in float, clamped to +-fmax and rounded by
 * ref_float's search. Blocks are found by dividing each index by the
 * block extent, so no walk is shared with the library. */
#include "ref_quant.h"

#include <math.h>
#include <stdlib.h>

#include "ref_float.h"

static void block_of(const rs_quant_desc_t *q, int ndim, const int64_t *shape,
                     int64_t *block)
{
    for (int d = 0; d < ndim; d++) {
        int64_t b = shape[d];
        if (q->scheme == RS_QUANT_FP8_BLOCK) {
            int k = d - (ndim - q->block_ndim);
            b = k >= 0 ? q->block[k] : 1;
        } else if (q->scheme == RS_QUANT_FP8_CHANNEL && d == 0) {
            b = 1;
        }
        block[d] = b > 0 ? b : 1;
    }
}

/* The grid index of element `i` (row-major over shape). */
static int64_t grid_index(int64_t i, int ndim, const int64_t *shape,
                          const int64_t *block, const int64_t *grid)
{
    int64_t g = 0, stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t idx = i % shape[d];
        i /= shape[d];
        g += (idx / block[d]) * stride;
        stride *= grid[d];
    }
    return g;
}

int ref_quant_tensor(const rs_quant_desc_t *q, rs_dtype_t dt, const void *x,
                     int ndim, const int64_t *shape, uint8_t **q_out,
                     float **scale_out, int64_t *grid_out)
{
    int64_t block[RS_MAX_DIMS], n = 1, ng = 1;
    block_of(q, ndim, shape, block);
    for (int d = 0; d < ndim; d++) {
        grid_out[d] = (shape[d] + block[d] - 1) / block[d];
        n *= shape[d];
        ng *= grid_out[d];
    }
    size_t es = rs_dtype_size(dt);
    float fm = q->format == RS_DTYPE_F8E4M3 ? 448.0f : 57344.0f;
    float *amax = calloc((size_t)(ng ? ng : 1), sizeof(float));
    float *s = malloc((size_t)(ng ? ng : 1) * sizeof(float));
    uint8_t *out = malloc((size_t)(n ? n : 1));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ref_float_decode(dt, ref_float_load(dt, (const char *)x + i * es));
        if (!isfinite(v))
            bad = 1;
        int64_t g = grid_index(i, ndim, shape, block, grid_out);
        if ((float)fabs(v) > amax[g])
            amax[g] = (float)fabs(v);
    }
    for (int64_t g = 0; g < ng && !bad; g++) {
        float sc = amax[g] / fm;
        s[g] = sc == 0.0f ? 1.0f : sc;
    }
    for (int64_t i = 0; i < n && !bad; i++) {
        float v = (float)ref_float_decode(dt, ref_float_load(dt, (const char *)x + i * es));
        float r = v / s[grid_index(i, ndim, shape, block, grid_out)];
        r = r > fm ? fm : r < -fm ? -fm : r;
        out[i] = (uint8_t)ref_float_encode(q->format, (double)r);
    }
    free(amax);
    if (bad) {
        free(s);
        free(out);
        return -1;
    }
    *q_out = out;
    *scale_out = s;
    return 0;
}
