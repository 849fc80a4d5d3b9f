/* Verification that reaches past staging into the parameters: digests
 * prove the staged bytes are the ones the publisher digested, and each
 * replay from a staged box is then checked on a few of its elements right
 * after it ran: the parameter's bytes at the element against the staged
 * bytes it must come from. Where they lie is worked out at prepare from the
 * copy's box as the geometry maps it (source index and destination offset
 * of each element), not from the strides the replay itself runs with, so a
 * wrong replay program (or kernel) is caught on the elements sampled.
 * Checked right after the copy: copies that overlap another write run
 * alone and in order, so nothing has overwritten the destination yet. Only
 * replays that do not cast (same dtype in staging and parameter). */
#include <string.h>

#include "core/checked.h"
#include "core/diag.h"
#include "exec/exec_impl.h"
#include "geom/box.h"

static uint64_t mix(uint64_t v)
{
    v ^= v >> 31;
    v *= 0x9e3779b97f4a7c15ull;
    v ^= v >> 29;
    return v;
}

/* Digit of factor j in sample k: the first and last elements of the copy,
 * then spread over it, fixed by the copy so that runs repeat. */
static int64_t digit(const rs__factor_t *f, size_t copy, int k, int j)
{
    if (k == 0)
        return 0;
    if (k == 1)
        return f->count - 1;
    uint64_t h = mix(((uint64_t)copy << 16) ^ ((uint64_t)k << 8) ^
                     (uint64_t)j);
    return (int64_t)(h % (uint64_t)f->count);
}

void rs__exec_replay_samples(rs__exec_copy_t *xc, const rs_staged_read_t *fp,
                             const unsigned char *staging,
                             const rs__box_t *box)
{
    int64_t stride[RS_MAX_DIMS];
    const int64_t *bshape = fp->box_shape != NULL ? fp->box_shape
                                                  : fp->global_shape;
    int64_t es = (int64_t)rs_dtype_size(fp->dtype);
    xc->nsamples = 0;
    xc->box = staging;
    if (box->numel == 0 || xc->from != xc->to || es == 0 ||
        !rs__row_major(bshape, fp->ndim, stride))
        return;
    for (int k = 0; k < RS_EXEC_SAMPLES; k++) {
        int64_t coord[RS_MAX_DIMS], at = 0, dst = 0;
        int in = 1;
        memcpy(coord, box->start, (size_t)fp->ndim * sizeof(int64_t));
        for (int j = 0; j < box->nfactors; j++) {
            const rs__factor_t *f = &box->factors[j];
            int64_t g = digit(f, xc->copy, k, j);
            coord[f->sdim] += g * f->dmult;
            dst += g * f->dstride;
        }
        for (int d = 0; d < fp->ndim; d++) {
            int64_t r = coord[d] - (fp->box_lo != NULL ? fp->box_lo[d] : 0);
            in &= r >= 0 && r < bshape[d];
            at += r * stride[d];
        }
        if (!in) /* refused by the guard; nothing to compare with */
            continue;
        xc->sample_src[xc->nsamples] = (uint64_t)(at * es);
        xc->sample_dst[xc->nsamples++] = dst * es;
    }
}

rs_status_t rs__exec_replay(rs_exec_h x, const rs__exec_copy_t *xc,
                            rs_diag_t *diag)
{
    rs_status_t st = rs__exec_copy(xc);
    size_t es = rs_dtype_size(xc->to);
    if (st != RS_OK)
        return rs__diag_set(diag, st, "local copy of copy %zu failed",
                            xc->copy);
    for (unsigned k = 0; k < xc->nsamples; k++) {
        if (memcmp(xc->dst + xc->sample_dst[k], xc->box + xc->sample_src[k],
                   es) == 0)
            continue;
        rs_copy_desc_t c;
        rs_capture_copy(x->cap, xc->copy, &c);
        return rs__diag_set(diag, RS_ERR_VERIFY, "replay check: after the "
                            "replay of copy %zu ('%s' into '%s'), the element "
                            "at element %lld of its destination differs from "
                            "the staged element it comes from (staging byte "
                            "%llu)", xc->copy, c.src, c.param,
                            (long long)(xc->sample_dst[k] / (int64_t)es),
                            (unsigned long long)xc->sample_src[k]);
    }
    return RS_OK;
}
