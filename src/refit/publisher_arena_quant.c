/* Publisher-side quantization in arena staging: for each shard and each spec it
 * is quantized with (publisher_quant_rules.c), the box of the blocks that lie
 * wholly inside the shard (a ragged last block counts when the shard reaches
 * the tensor's end) is quantized from the live shard with rs_quant_box into two
 * arena slots after the shards' bytes: the FP8 values, served as that box of
 * "<src>#<spec>", and the scales, served as the matching box of the block grid
 * "<src>#<spec>#scale". A cut-aligned publisher cuts that box again at the
 * cuts on block boundaries (rs_cuts_split_blocks), as it cuts the shard.
 * Blocks that straddle shards are served by no one:
 * receivers quantize those themselves (docs/quantized-refit.md,
 * "Publisher-side quantization"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/cuts.h"
#include "reshard/digest.h"
#include "reshard/quant.h"

typedef struct qplan_ctx {
    rs_publisher_h p;
    size_t shard;
    uint64_t need;
} qplan_ctx_t;

/* Tells, once per (tensor, spec), why the tensor is served without it. */
static void tell_skip(rs_publisher_h p, const char *tensor, const char *spec,
                      const char *why)
{
    char key[RS_DIAG_MSG_MAX], line[RS_DIAG_MSG_MAX + 512];
    int n = snprintf(key, sizeof(key), "quantize\n%s\n%s", tensor, spec);
    uint64_t digest = rs_digest(key, n > 0 ? (size_t)n : 0);
    for (size_t i = 0; i < p->told_len; i++)
        if (p->told[i].digest == digest)
            return;
    rs__publish_told_t t;
    snprintf(t.holder, sizeof(t.holder), "%s", tensor);
    t.digest = digest;
    RS_VEC_PUSH(p, told, t); /* out of memory: told again next time */
    snprintf(line, sizeof(line), "publisher rank %lld: tensor '%s' is not "
             "quantized as %s: %s; served without it (told once)",
             (long long)p->params.rank, tensor, spec, why);
    rs__publisher_notify(p, line);
}

/* 1 when this staging already quantizes shard `shard` with `spec` (its
 * pieces are the last ones planned). */
static int planned(rs_publisher_h p, size_t shard, const char *spec)
{
    for (size_t i = p->next_qpieces_len; i-- > 0;) {
        const rs__publish_quant_piece_t *q = &p->next_qpieces[i];
        if (q->shard != shard)
            return 0;
        if (strcmp(q->spec, spec) == 0)
            return 1;
    }
    return 0;
}

/* The box of the whole blocks inside shard s, in elements and in blocks;
 * 0 when no block lies wholly inside it. */
static int whole_blocks(const rs__publish_shard_t *s, rs__publish_quant_piece_t *q)
{
    for (int d = 0; d < s->ndim; d++) {
        int64_t b = q->block[d], off = s->offset[d];
        int64_t end = off + s->shape[d];
        int64_t lo = off % b == 0 ? off : off + (b - off % b);
        int64_t hi = end == s->full_shape[d] ? end : end / b * b;
        if (hi <= lo)
            return 0;
        q->lo[d] = lo;
        q->len[d] = hi - lo;
        q->glo[d] = lo / b;
        q->glen[d] = (hi - lo + b - 1) / b;
        q->grid[d] = (s->full_shape[d] + b - 1) / b;
    }
    return 1;
}

/* Why shard s cannot take spec q, or NULL. */
static const char *unfit(const rs__publish_shard_t *s, const rs_quant_desc_t *q,
                         int64_t *block, char *why, size_t cap)
{
    rs_diag_t d;
    rs_diag_clear(&d);
    if (s->dtype != RS_DTYPE_BF16 && s->dtype != RS_DTYPE_F16 &&
        s->dtype != RS_DTYPE_F32) {
        snprintf(why, cap, "its dtype is %s (bf16, f16 and f32 are "
                 "quantized)", rs_dtype_name(s->dtype));
        return why;
    }
    if (s->ndim == 0) {
        snprintf(why, cap, "it is a scalar (rank 0)");
        return why;
    }
    if (rs_quant_block_shape(q, s->ndim, s->full_shape, &d, block) != RS_OK) {
        snprintf(why, cap, "%s", d.msg);
        return why;
    }
    return NULL;
}

typedef struct qsplit_ctx {
    qplan_ctx_t *c;
    const rs__publish_quant_piece_t *whole;
} qsplit_ctx_t;

/* Adds one piece: the box of whole blocks [lo, lo + len). */
static rs_status_t push_piece(qplan_ctx_t *c, const rs__publish_quant_piece_t *q,
                              const int64_t *lo, const int64_t *len)
{
    rs_publisher_h p = c->p;
    int nd = p->shards[c->shard].ndim;
    rs__publish_quant_piece_t piece = *q;
    piece.nbytes = rs_dtype_size(q->format);
    piece.scale_nbytes = sizeof(float);
    for (int k = 0; k < nd; k++) {
        piece.lo[k] = lo[k];
        piece.len[k] = len[k];
        piece.glo[k] = lo[k] / q->block[k];
        piece.glen[k] = (lo[k] + len[k] + q->block[k] - 1) / q->block[k] -
                        piece.glo[k];
        piece.nbytes *= (uint64_t)len[k];             /* at most the shard's */
        piece.scale_nbytes *= (uint64_t)piece.glen[k]; /* at most that */
    }
    if (!RS_VEC_PUSH(p, next_qpieces, piece))
        return RS_ERR_NO_MEMORY;
    c->need += rs__publisher_slot(piece.nbytes) +
               rs__publisher_slot(piece.scale_nbytes);
    return RS_OK;
}

/* rs_cuts_box_fn: one sub-box of whole blocks of a cut-aligned piece. */
static rs_status_t add_sub(void *arg, const int64_t *off, const int64_t *shape)
{
    qsplit_ctx_t *x = arg;
    return push_piece(x->c, x->whole, off, shape);
}

/* rs__publisher_spec_fn: plans shard ctx->shard's piece under `spec`. */
static rs_status_t add_spec(void *arg, const char *spec)
{
    qplan_ctx_t *c = arg;
    rs_publisher_h p = c->p;
    const rs__publish_shard_t *s = &p->shards[c->shard];
    rs__publish_quant_piece_t q;
    rs_quant_desc_t desc;
    char why[RS_DIAG_MSG_MAX];
    rs_diag_t d;
    rs_diag_clear(&d);
    if (planned(p, c->shard, spec))
        return RS_OK;
    memset(&q, 0, sizeof(q));
    if (rs_quant_spec_parse(spec, q.qblock, &d, &desc) != RS_OK) {
        tell_skip(p, s->tensor, spec, d.msg); /* canonical, so never */
        return RS_OK;
    }
    if (unfit(s, &desc, q.block, why, sizeof(why)) != NULL) {
        tell_skip(p, s->tensor, spec, why);
        return RS_OK;
    }
    if (!whole_blocks(s, &q))
        return RS_OK; /* every block straddles: receivers quantize them */
    q.shard = c->shard;
    snprintf(q.spec, sizeof(q.spec), "%s", spec);
    q.scheme = desc.scheme;
    q.format = desc.format;
    q.qblock_ndim = desc.block_ndim;
    if (!p->cut_mode || p->cut_union == NULL)
        return push_piece(c, &q, q.lo, q.len);
    /* cut-aligned: the FP8 box is cut where the shard is, at the cuts on
     * block boundaries, so a receiver's block-aligned box of it is whole
     * pieces (each still whole blocks, quantized as the box would be) */
    qsplit_ctx_t x = {c, &q};
    return rs_cuts_split_blocks(p->cut_union, s->tensor, s->ndim, q.block,
                                q.lo, q.len, add_sub, &x, &d);
}

/* With quantize_wanted alone (no cut_aligned, whose cut step reads them),
 * the cuts records are brought up to date here, and read again whole when
 * the registered tensors changed (the cache holds only theirs). */
static rs_status_t sync_wanted(rs_publisher_h p, rs_diag_t *diag)
{
    if (!p->params.quantize_wanted || p->params.cut_aligned)
        return RS_OK;
    uint64_t key = rs__publisher_tensor_key(p);
    if (key != p->qrecord_key)
        rs__publisher_forget_records(p);
    p->qrecord_key = key;
    rs_status_t st = rs__publisher_sync_records(p, diag);
    for (size_t i = 0; st == RS_OK && i < p->records_len; i++) {
        const rs__publish_record_t *rec = &p->records[i];
        const char *model = rs_cuts_model(rec->cuts);
        char why[RS_DIAG_MSG_MAX];
        if (rec->why != NULL)
            rs__publisher_tell_record(p, rec->holder, rec->generation,
                                      rec->why);
        if (rec->cuts == NULL || model == NULL || strcmp(model, p->model) == 0)
            continue;
        snprintf(why, sizeof(why), "it is a record of model '%s'", model);
        rs__publisher_tell_record(p, rec->holder, rec->generation, why);
    }
    return st;
}

rs_status_t rs__publisher_quant_plan(rs_publisher_h p, rs_diag_t *diag,
                                     uint64_t *need_p)
{
    qplan_ctx_t c = {p, 0, 0};
    p->next_qpieces_len = 0;
    if (p->qrules_len == 0 && !p->params.quantize_wanted) {
        *need_p = 0;
        return RS_OK;
    }
    rs_status_t st = sync_wanted(p, diag);
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++) {
        if (p->shards[i].nbytes == 0)
            continue;
        c.shard = i;
        st = rs__publisher_specs_of(p, i, add_spec, &c);
    }
    if (st != RS_OK)
        return st == RS_ERR_NO_MEMORY
                   ? rs__diag_set(diag, st, "publisher: out of memory "
                                  "planning the quantized shards")
                   : st;
    *need_p = c.need;
    return RS_OK;
}

/* The shard's bytes of q's box, row-major: the live shard itself when the
 * box is the whole shard, else a gathered copy in p->qscratch. */
static rs_status_t box_bytes(rs_publisher_h p, const rs__publish_quant_piece_t *q,
                             rs_diag_t *diag, const void **src_p)
{
    const rs__publish_shard_t *s = &p->shards[q->shard];
    rs__publish_piece_t box;
    uint64_t nbytes = rs_dtype_size(s->dtype);
    int whole = 1;
    memset(&box, 0, sizeof(box));
    box.shard = q->shard;
    for (int d = 0; d < s->ndim; d++) {
        whole &= q->lo[d] == s->offset[d] && q->len[d] == s->shape[d];
        box.offset[d] = q->lo[d];
        box.shape[d] = q->len[d];
        nbytes *= (uint64_t)q->len[d];
    }
    if (whole) {
        *src_p = s->ptr;
        return RS_OK;
    }
    if (nbytes > p->qscratch_cap) {
        void *grown = realloc(p->qscratch, (size_t)nbytes);
        if (grown == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "publisher: out of "
                                "memory gathering '%s' to quantize it",
                                s->tensor);
        p->qscratch = grown;
        p->qscratch_cap = nbytes;
    }
    rs__publisher_copy_box(s, &box, p->qscratch, NULL);
    *src_p = p->qscratch;
    return RS_OK;
}

/* Quantizes piece k (q) into its slots (through the delta encoder when
 * this staging writes deltas). */
static rs_status_t quantize_piece(rs_publisher_h p, size_t k,
                                  const rs__publish_quant_piece_t *q,
                                  int64_t version, rs_diag_t *diag)
{
    const rs__publish_shard_t *s = &p->shards[q->shard];
    const void *src = NULL;
    rs_quant_desc_t desc;
    rs_diag_t d;
    rs_diag_clear(&d);
    memset(&desc, 0, sizeof(desc));
    desc.scheme = q->scheme;
    desc.format = q->format;
    desc.block_ndim = q->qblock_ndim;
    desc.block = q->qblock;
    rs_status_t st = box_bytes(p, q, diag, &src);
    if (st != RS_OK)
        return st;
    /* with deltas, quantized aside: the slots still hold the version
     * before, which the encoding copy compares against */
    int aside = rs__publisher_delta_filling(p);
    unsigned char *vals = aside ? malloc((size_t)q->nbytes + 1) : q->served;
    unsigned char *scales = aside ? malloc((size_t)q->scale_nbytes + 1)
                                  : q->scale_served;
    if (vals == NULL || scales == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "publisher: out of memory "
                          "quantizing '%s'", s->tensor);
    if (st == RS_OK)
        st = rs_quant_box(&desc, s->dtype, src, s->ndim, s->full_shape, q->lo,
                          q->len, s->tensor, &d, vals, (float *)(void *)scales);
    if (st == RS_OK && aside) {
        rs__publisher_delta_copy(p, rs__publisher_quant_entry(p, k, 0),
                                 q->served, vals, q->nbytes);
        rs__publisher_delta_copy(p, rs__publisher_quant_entry(p, k, 1),
                                 q->scale_served, scales, q->scale_nbytes);
    }
    if (aside) {
        free(vals);
        free(scales);
    }
    if (st == RS_ERR_NO_MEMORY)
        return st;
    if (st != RS_OK)
        return rs__diag_set(diag, st, "publisher rank %lld: cannot publish "
                            "version %lld: quantizing '%s' as %s: %s "
                            "(nothing of version %lld is published)",
                            (long long)p->params.rank, (long long)version,
                            s->tensor, q->spec, d.msg[0] ? d.msg :
                            rs_status_str(st), (long long)version);
    return RS_OK;
}

/* Lays out the pieces of one (shard, spec), [a, b): their values, then
 * their scales, each in piece order, so that a plan listing the FP8
 * tensor's shards and then its scales' finds their addresses in order
 * (out of order, it sorts its whole shard list). */
static uint64_t lay_group(rs__publish_quant_piece_t *q, size_t a, size_t b,
                          char *base, uint64_t off)
{
    for (size_t i = a; i < b; i++) {
        q[i].served = base + off;
        off += rs__publisher_slot(q[i].nbytes);
    }
    for (size_t i = a; i < b; i++) {
        q[i].scale_served = base + off;
        off += rs__publisher_slot(q[i].scale_nbytes);
    }
    return off;
}

rs_status_t rs__publisher_quant_fill(rs_publisher_h p, void *base,
                                     int64_t version, rs_diag_t *diag)
{
    rs__publish_quant_piece_t *q = p->next_qpieces;
    uint64_t off = 0;
    for (size_t a = 0, b; a < p->next_qpieces_len; a = b) {
        for (b = a + 1; b < p->next_qpieces_len && q[b].shard == q[a].shard &&
                        strcmp(q[b].spec, q[a].spec) == 0;
             b++)
            ;
        off = lay_group(q, a, b, base, off);
    }
    for (size_t i = 0; i < p->next_qpieces_len; i++) {
        rs_status_t st = quantize_piece(p, i, &q[i], version, diag);
        if (st != RS_OK)
            return st;
    }
    RS_PUB_VEC_SWAP(p, qpieces);
    return RS_OK;
}
