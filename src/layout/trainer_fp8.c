/* Publisher-side FP8 copies in trainer tables: after each shard of a
 * tensor the checkpoint stores in FP8, the rank publishes the FP8 values
 * of the blocks lying wholly inside the shard as "<src>#<spec>" (the full
 * shape of src) and their scales as "<src>#<spec>#scale" (the full block
 * grid), as a publisher that quantizes its own shards serves them: a block
 * cut by the shard's edge is not quantized there (its bytes are split
 * across ranks), so receivers needing it quantize from the bf16 shards. */
#include <string.h>

#include "core/diag.h"
#include "layout/quant_impl.h"
#include "layout/trainer_impl.h"

/* Per dim, the blocks inside [lo, lo + n) of a dim of `full`: [*glo, *ghi)
 * in block units; 0 when none. The last block may be short (ends at
 * `full`). */
static int inner_blocks(int64_t lo, int64_t n, int64_t full, int64_t b,
                        int64_t *glo, int64_t *ghi)
{
    int64_t hi = lo + n;
    *glo = lo / b + (lo % b != 0);
    *ghi = hi == full ? hi / b + (hi % b != 0) : hi / b;
    return *ghi > *glo;
}

typedef struct fp8_ctx {
    struct walk *w;
    const rs_tensor_info_t *t; /* the FP8 values, or their scales */
    const int64_t *block;
    int scale;
} fp8_ctx_t;

/* rs_cuts_box_fn: one sub-box of whole blocks, as values or as scales. */
static rs_status_t emit_sub(void *arg, const int64_t *off, const int64_t *shape)
{
    fp8_ctx_t *c = arg;
    int64_t soff[2], sshape[2];
    if (!c->scale)
        return rs__trainer_emit(c->w, c->t, off, shape);
    for (int d = 0; d < 2; d++) {
        soff[d] = off[d] / c->block[d];
        sshape[d] = (off[d] + shape[d] + c->block[d] - 1) / c->block[d] -
                    soff[d];
    }
    return rs__trainer_emit(c->w, c->t, soff, sshape);
}

rs_status_t rs__trainer_emit_fp8(struct walk *w, const rs__trainer_plan_t *plan,
                                 const rs_tensor_info_t *t,
                                 const int64_t *off, const int64_t *shape,
                                 rs_diag_t *diag)
{
    char qname[512], sname[512];
    int64_t glo[2], ghi[2], qoff[2], qshape[2], grid[2];
    const int64_t *b = plan->quant.block;
    if (t->ndim != 2)
        return RS_OK;
    for (int d = 0; d < 2; d++) {
        if (!inner_blocks(off[d], shape[d], t->shape[d], b[d], &glo[d],
                          &ghi[d]))
            return RS_OK;
        grid[d] = t->shape[d] / b[d] + (t->shape[d] % b[d] != 0);
        qoff[d] = glo[d] * b[d];
        qshape[d] = (ghi[d] * b[d] < t->shape[d] ? ghi[d] * b[d]
                                                   : t->shape[d]) - qoff[d];
    }
    if (!rs__layout_quant_name(&plan->quant, t->name, 0, qname, sizeof(qname)) ||
        !rs__layout_quant_name(&plan->quant, t->name, 1, sname, sizeof(sname)))
        return rs__diag_set(diag, RS_ERR_INPUT, "tensor '%s': name too long "
                            "for its FP8 copy", t->name);
    rs_tensor_info_t q = *t, s = *t;
    q.name = qname;
    q.dtype = plan->quant.format;
    s.name = sname;
    s.dtype = RS_DTYPE_F32;
    s.shape = grid;
    /* cut-aligned: the values and scales are cut where the source is, at
     * the cuts on block boundaries, so a receiver's block-aligned box of
     * them is whole sub-boxes as its box of the source is. All values
     * first, then all scales, each in address order: a plan lists each
     * tensor's shards in turn, and addresses in order need no sort. */
    rs_status_t st = RS_OK;
    for (int scale = 0; st == RS_OK && scale < 2; scale++) {
        fp8_ctx_t c = {w, scale ? &s : &q, b, scale};
        st = plan->cuts == NULL
                 ? emit_sub(&c, qoff, qshape)
                 : rs_cuts_split_blocks(plan->cuts, t->name, 2, b, qoff,
                                        qshape, emit_sub, &c, diag);
    }
    return st;
}
