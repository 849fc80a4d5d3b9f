/* Fuzz target for FP8 quantization. Inputs starting with 's' are spec
 * texts: a refused one must come with a message; an accepted one must
 * format back to the same bytes and have a block shape for a source of as
 * many dims. Other inputs decode to a spec, a source shape, a box and the
 * box's values (any bits, NaN and infinities included): rs_quant_box must
 * refuse with a message or succeed; on success every scale is finite and
 * positive, and the portable kernels give the same bytes and scales as the
 * best level this machine has. Outputs live in exactly-sized heap buffers,
 * so ASan catches a write past them. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/simd.h"
#include "fuzz_input.h"
#include "reshard/quant.h"

static void fuzz_spec(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    int64_t store[RS_MAX_DIMS];
    rs_quant_desc_t q;
    rs_diag_t diag = {0};
    if (rs_quant_spec_parse(text, store, &diag, &q) != RS_OK) {
        if (diag.msg[0] == '\0')
            abort();
        free(text);
        return;
    }
    char out[512];
    const size_t n = rs_quant_spec_format(&q, out, sizeof(out));
    if (n != strlen(text) || strcmp(out, text) != 0)
        abort();
    int64_t shape[RS_MAX_DIMS], block[RS_MAX_DIMS];
    const int ndim = q.block_ndim > 0 ? q.block_ndim : 2;
    for (int d = 0; d < ndim; d++)
        shape[d] = 3;
    if (rs_quant_block_shape(&q, ndim, shape, &diag, block) != RS_OK)
        abort();
    free(text);
}

typedef struct qcase {
    rs_quant_desc_t q;
    int64_t block[RS_MAX_DIMS];
    rs_dtype_t dt;
    int ndim;
    int64_t full[RS_MAX_DIMS], lo[RS_MAX_DIMS], box[RS_MAX_DIMS];
} qcase_t;

/* 0 .. 70, now and then -1. */
static int64_t fz_extent(fz_in_t *in)
{
    const uint8_t b = fz_u8(in);
    return b == 0xff ? -1 : (int64_t)(b % 71);
}

static void decode(fz_in_t *in, qcase_t *c)
{
    static const rs_dtype_t dts[] = {RS_DTYPE_BF16, RS_DTYPE_F16, RS_DTYPE_F32,
                                     RS_DTYPE_F64};
    memset(c, 0, sizeof(*c));
    c->q.scheme = (rs_quant_scheme_t)fz_below(in, 5);
    c->q.format = fz_below(in, 8) == 0 ? RS_DTYPE_BF16
                  : fz_below(in, 2)    ? RS_DTYPE_F8E5M2 : RS_DTYPE_F8E4M3;
    c->dt = dts[fz_below(in, 4)];
    c->ndim = (int)fz_below(in, 4);
    c->q.block_ndim = c->q.scheme == RS_QUANT_FP8_BLOCK
                          ? (int)fz_below(in, c->ndim + 2) : 0;
    c->q.block = c->block;
    for (int d = 0; d < c->q.block_ndim; d++)
        c->block[d] = fz_dim(in, 0, 40);
    for (int d = 0; d < c->ndim; d++) {
        c->full[d] = fz_extent(in);
        c->lo[d] = fz_extent(in);
        c->box[d] = fz_extent(in);
    }
}

/* Elements of the box and scales of its blocks; 0 when the spec has no
 * block shape or an extent is negative (the call must then be refused). */
static int counts(const qcase_t *c, size_t *numel, size_t *nscale)
{
    int64_t b[RS_MAX_DIMS];
    *numel = 1;
    *nscale = 1;
    if (rs_quant_block_shape(&c->q, c->ndim, c->full, NULL, b) != RS_OK)
        return 0;
    for (int d = 0; d < c->ndim; d++) {
        if (c->box[d] < 0 || c->full[d] < 0 || c->lo[d] < 0)
            return 0;
        *numel *= (size_t)c->box[d];
        *nscale *= c->box[d] == 0 ? 0 : (size_t)((c->box[d] - 1) / b[d] + 1);
    }
    return 1;
}

static void fuzz_box(const uint8_t *data, size_t size)
{
    fz_in_t in = {data, size, 0};
    qcase_t c;
    decode(&in, &c);
    size_t numel, nscale;
    const int valid = counts(&c, &numel, &nscale);
    const size_t es = rs_dtype_size(c.dt), nb = valid ? numel * es : 0;
    /* exactly sized: ASan sees any read or write past them */
    unsigned char *src = malloc(nb + 1);
    for (size_t i = 0; i < nb; i++)
        src[i] = in.off < size ? data[in.off + i % (size - in.off)] : 0;
    uint8_t *q = malloc(numel + 1), *q2 = malloc(numel + 1);
    float *sc = malloc(nscale * sizeof(float) + 1);
    float *sc2 = malloc(nscale * sizeof(float) + 1);
    rs_diag_t diag = {0};
    rs__simd_force(rs__simd_best());
    const rs_status_t st = rs_quant_box(&c.q, c.dt, src, c.ndim, c.full, c.lo,
                                        c.box, "f", &diag, q, sc);
    if (st != RS_OK) {
        if (diag.msg[0] == '\0')
            abort();
        goto done;
    }
    if (!valid)
        abort();
    for (size_t i = 0; i < nscale; i++)
        if (!isfinite(sc[i]) || !(sc[i] > 0.0f))
            abort();
    rs__simd_force(RS__SIMD_PORTABLE);
    if (rs_quant_box(&c.q, c.dt, src, c.ndim, c.full, c.lo, c.box, "f", &diag,
                     q2, sc2) != RS_OK ||
        memcmp(q, q2, numel) != 0 ||
        memcmp(sc, sc2, nscale * sizeof(float)) != 0)
        abort();
done:
    free(src);
    free(q);
    free(q2);
    free(sc);
    free(sc2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == 's')
        fuzz_spec(data + 1, size - 1);
    else
        fuzz_box(data, size);
    return 0;
}
