/* Cut-aligned staging: before a new version is copied into the arena, the
 * publisher gathers the cuts receivers announced (its copy of the model's cuts
 * records, publisher_cut_records.c, kept up to date by generation) and those it
 * was given (a set, a reshard.cuts.v1 file) into a union it keeps while nothing
 * changes, splits each registered shard at the cuts inside it and copies every
 * sub-box out of the shard into its own arena slot, so each sub-box is served,
 * and published, as a contiguous row-major box (docs/cut-aligned.md,
 * "Publishing cut-aligned"). Records that cannot be used are told once and left out: the
 * cuts only decide how the arena is cut, never which bytes it holds, so any
 * partition still serves exactly the registered shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/delta.h"
#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/cuts.h"
#include "reshard/digest.h"

rs_status_t rs__publisher_load_cuts_file(rs_publisher_h p, rs_diag_t *diag)
{
    const char *path = p->cuts_file;
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    if (f == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, "publisher: cuts file %s: "
                            "cannot open it", path);
    char buf[65536];
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            char *grown = realloc(text, cap);
            if (grown == NULL) {
                free(text);
                fclose(f);
                return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
            }
            text = grown;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    int failed = ferror(f);
    fclose(f);
    rs_status_t st = failed ? rs__diag_set(diag, RS_ERR_IO, "publisher: cuts "
                                           "file %s: read error", path)
                            : rs_cuts_read_json(text ? text : "", len, path,
                                                diag, &p->file_cuts);
    free(text);
    return st;
}

/* A set naming the model and holding the shape of every registered tensor,
 * so a record about another model or shape is refused by the merge. */
static rs_status_t base_set(rs_publisher_h p, rs_diag_t *diag,
                            rs_cuts_h *cuts_p)
{
    rs_cuts_h cuts = NULL;
    rs_status_t st = rs_cuts_create(diag, &cuts);
    if (st == RS_OK)
        st = rs_cuts_set_model(cuts, p->model, diag);
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++) {
        const rs__publish_shard_t *s = &p->shards[i];
        if (s->ndim > 0) /* a cut at 0 cuts nothing: it records the shape */
            st = rs_cuts_add(cuts, s->tensor, s->ndim, s->full_shape, 0, 0,
                             diag);
    }
    if (st != RS_OK) {
        rs_cuts_destroy(cuts);
        return st;
    }
    *cuts_p = cuts;
    return RS_OK;
}

/* The union of every source of cuts for this staging. */
static rs_status_t gather(rs_publisher_h p, rs_diag_t *diag,
                          rs_cuts_h *cuts_p)
{
    rs_cuts_h cuts = NULL;
    rs_status_t st = base_set(p, diag, &cuts);
    if (st == RS_OK && p->params.cuts != NULL &&
        (st = rs_cuts_merge(cuts, p->params.cuts, diag)) != RS_OK)
        rs__diag_prefix(diag, "publisher: the given cut set: ");
    if (st == RS_OK && p->file_cuts != NULL &&
        (st = rs_cuts_merge(cuts, p->file_cuts, diag)) != RS_OK)
        rs__diag_prefix(diag, "publisher: cuts file %s: ",
                        p->cuts_file);
    if (st == RS_OK)
        st = rs__publisher_merge_records(p, cuts, diag);
    if (st != RS_OK) {
        rs_cuts_destroy(cuts);
        return st;
    }
    *cuts_p = cuts;
    return RS_OK;
}

/* A digest of what base_set records: each registered tensor's name and
 * full shape. */
uint64_t rs__publisher_tensor_key(rs_publisher_h p)
{
    rs_digest_t d;
    rs_digest_init(&d);
    for (size_t i = 0; i < p->shards_len; i++) {
        const rs__publish_shard_t *s = &p->shards[i];
        int64_t nd = s->ndim;
        rs_digest_update(&d, s->tensor, strlen(s->tensor) + 1);
        rs_digest_update(&d, &nd, sizeof(nd));
        rs_digest_update(&d, s->full_shape, (size_t)s->ndim * sizeof(int64_t));
    }
    return rs_digest_final(&d);
}

/* The union for this staging, kept in p->cut_union: rebuilt only when a
 * record changed, the registered tensors changed (the cached records hold
 * only the registered tensors' cuts, so they are read again) or
 * params.cuts is set. */
static rs_status_t current_union(rs_publisher_h p, rs_diag_t *diag,
                                 rs_cuts_h *cuts_p)
{
    uint64_t key = rs__publisher_tensor_key(p);
    if (key != p->cut_key || p->cut_union == NULL)
        rs__publisher_forget_records(p);
    rs_status_t st = p->params.cut_aligned
                         ? rs__publisher_sync_records(p, diag) : RS_OK;
    if (st != RS_OK)
        return st;
    if (p->cut_union != NULL && !p->records_changed &&
        p->params.cuts == NULL) {
        *cuts_p = p->cut_union;
        return RS_OK;
    }
    rs_cuts_h cuts = NULL;
    if ((st = gather(p, diag, &cuts)) != RS_OK)
        return st;
    rs_cuts_destroy(p->cut_union);
    p->cut_union = cuts;
    p->cut_key = key;
    p->records_changed = 0;
    *cuts_p = cuts;
    return RS_OK;
}

typedef struct cut_ctx {
    rs_publisher_h p;
    size_t shard;
    uint64_t need;
} cut_ctx_t;

static rs_status_t add_piece(void *arg, const int64_t *offset,
                             const int64_t *shape)
{
    cut_ctx_t *c = arg;
    const rs__publish_shard_t *s = &c->p->shards[c->shard];
    rs__publish_piece_t piece;
    memset(&piece, 0, sizeof(piece));
    piece.shard = c->shard;
    piece.nbytes = rs_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++) {
        piece.offset[d] = offset[d];
        piece.shape[d] = shape[d];
        piece.nbytes *= (uint64_t)shape[d]; /* at most the shard's bytes */
    }
    if (!RS_VEC_PUSH(c->p, next_pieces, piece))
        return RS_ERR_NO_MEMORY;
    c->need += rs__publisher_slot(piece.nbytes);
    return RS_OK;
}

rs_status_t rs__publisher_cut(rs_publisher_h p, rs_diag_t *diag,
                              uint64_t *need_p)
{
    rs_cuts_h cuts = NULL;
    rs_status_t st = current_union(p, diag, &cuts);
    if (st != RS_OK)
        return st;
    cut_ctx_t c = {p, 0, 0};
    p->next_pieces_len = 0;
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++) {
        const rs__publish_shard_t *s = &p->shards[i];
        if (s->nbytes == 0)
            continue;
        c.shard = i;
        st = rs_cuts_split(cuts, s->tensor, s->ndim, s->offset, s->shape,
                           add_piece, &c, diag);
    }
    if (st != RS_OK)
        return st == RS_ERR_NO_MEMORY
                   ? rs__diag_set(diag, st, "publisher: out of memory "
                                  "cutting the shards")
                   : st;
    *need_p = c.need;
    return RS_OK;
}

/* The inner dims the piece spans whole form one run, the outer ones are
 * walked. */
void rs__publisher_copy_box(const rs__publish_shard_t *s,
                            const rs__publish_piece_t *piece, char *dst,
                            struct rs__delta_enc *enc)
{
    int nd = s->ndim, inner = nd;
    size_t es = rs_dtype_size(s->dtype);
    int64_t stride[RS_MAX_DIMS] = {0}, run = (int64_t)es;
    int64_t at[RS_MAX_DIMS] = {0};
    for (int d = nd - 1; d >= 0; d--)
        stride[d] = d == nd - 1 ? (int64_t)es : stride[d + 1] * s->shape[d + 1];
    /* the run: the innermost dims spanned whole, and the next one's piece */
    while (inner > 0 && piece->shape[inner - 1] == s->shape[inner - 1])
        run *= s->shape[--inner];
    if (inner > 0)
        run *= piece->shape[--inner];
    for (;;) {
        int64_t src = 0;
        for (int d = 0; d < nd; d++)
            src += (piece->offset[d] - s->offset[d] + (d < inner ? at[d] : 0)) *
                   stride[d];
        if (enc != NULL)
            rs__delta_enc_copy(enc, (const char *)s->ptr + src, (size_t)run);
        else
            memcpy(dst, (const char *)s->ptr + src, (size_t)run);
        dst += run;
        int d = inner - 1;
        while (d >= 0 && ++at[d] == piece->shape[d])
            at[d--] = 0;
        if (d < 0)
            return;
    }
}

void rs__publisher_fill_pieces(rs_publisher_h p, void *base)
{
    uint64_t off = 0;
    for (size_t i = 0; i < p->next_pieces_len; i++) {
        rs__publish_piece_t *piece = &p->next_pieces[i];
        rs__delta_enc_t enc;
        piece->served = (char *)base + off;
        int delta = rs__publisher_delta_enc(p, i, piece->served, &enc);
        rs__publisher_copy_box(&p->shards[piece->shard], piece,
                               piece->served, delta ? &enc : NULL);
        if (delta)
            rs__publisher_delta_done(p, i, &enc);
        off += rs__publisher_slot(piece->nbytes);
    }
    RS_PUB_VEC_SWAP(p, pieces);
}
