/* Random op chains for the structured fuzz targets: every op kind, small
 * arguments around the valid range (negative dims, -1 sizes, null slice
 * bounds) and now and then a hostile one. */
#ifndef RS_FUZZ_OPS_H
#define RS_FUZZ_OPS_H

#include "fuzz_input.h"
#include "reshard/capture.h"

#define FZ_MAX_OPS 6
#define FZ_MAX_LIST 6
#define FZ_MAX_KEYS 4

typedef struct fz_chain {
    rs_op_t ops[FZ_MAX_OPS];
    int64_t lists[FZ_MAX_OPS][FZ_MAX_LIST];
    rs_key_t keys[FZ_MAX_OPS][FZ_MAX_KEYS];
    size_t nops;
} fz_chain_t;

static inline void fz_key(fz_in_t *in, rs_key_t *k)
{
    k->kind = (rs_key_kind_t)(1 + fz_below(in, 3));
    k->index = fz_small(in, -4);
    k->start = fz_small(in, -4);
    k->stop = fz_small(in, -4);
    k->step = fz_small(in, -1);
    uint8_t has = fz_u8(in);
    k->has_start = has & 1;
    k->has_stop = (has >> 1) & 1;
    k->has_step = (has >> 2) & 1;
}

static inline void fz_op(fz_in_t *in, fz_chain_t *c, size_t i)
{
    rs_op_t *op = &c->ops[i];
    op->kind = (rs_op_kind_t)(1 + fz_below(in, RS_OP_CONTIGUOUS));
    for (int a = 0; a < 4; a++)
        op->arg[a] = fz_dim(in, -3, 12);
    op->has = fz_u8(in);
    op->list = NULL;
    op->nlist = 0;
    op->keys = NULL;
    op->nkeys = 0;
    switch (op->kind) {
    case RS_OP_PERMUTE:
    case RS_OP_VIEW:
    case RS_OP_RESHAPE:
    case RS_OP_UNFLATTEN:
    case RS_OP_SPLIT:
        op->nlist = (size_t)fz_below(in, FZ_MAX_LIST + 1);
        for (size_t k = 0; k < op->nlist; k++)
            c->lists[i][k] = fz_dim(in, -1, 9);
        op->list = c->lists[i];
        break;
    case RS_OP_GETITEM:
        op->nkeys = (size_t)fz_below(in, FZ_MAX_KEYS + 1);
        for (size_t k = 0; k < op->nkeys; k++)
            fz_key(in, &c->keys[i][k]);
        op->keys = c->keys[i];
        break;
    default:
        break;
    }
}

static inline void fz_chain(fz_in_t *in, fz_chain_t *c)
{
    c->nops = (size_t)fz_below(in, FZ_MAX_OPS + 1);
    for (size_t i = 0; i < c->nops; i++)
        fz_op(in, c, i);
}

/* 1 when the gt_tensor replay can take the chain and source: it is a
 * plain test model that does unchecked arithmetic on arguments (slice and
 * chunk counts, strides of empty tensors), so hostile values, which only
 * the library must survive, skip the replay. */
static inline int fz_tame(int64_t v)
{
    return v >= -((int64_t)1 << 20) && v <= ((int64_t)1 << 20);
}

static inline int fz_chain_replayable(const fz_chain_t *c, int src_ndim,
                                      const int64_t *src_shape)
{
    for (int d = 0; d < src_ndim; d++)
        if (src_shape[d] < 0 || src_shape[d] >= 64)
            return 0;
    for (size_t i = 0; i < c->nops; i++) {
        const rs_op_t *op = &c->ops[i];
        for (int a = 0; a < 4; a++)
            if (!fz_tame(op->arg[a]))
                return 0;
        for (size_t k = 0; k < op->nlist; k++)
            if (!fz_tame(op->list[k]))
                return 0;
        for (size_t k = 0; k < op->nkeys; k++) {
            const rs_key_t *key = &op->keys[k];
            if (!fz_tame(key->index) || !fz_tame(key->start) ||
                !fz_tame(key->stop) || !fz_tame(key->step))
                return 0;
        }
    }
    return 1;
}

#endif
