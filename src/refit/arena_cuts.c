/* Cut-aligned staging: before a new version is copied into the arena,
 * the publisher gathers the cuts receivers announced (every cuts record of
 * the model) and those it was given (a set, a reshard.cuts.v1 file), splits
 * each registered shard at the cuts inside it and copies every sub-box out
 * of the shard into its own arena slot, so each sub-box is served, and
 * published, as a contiguous row-major box (docs/design.md, "Cut-aligned
 * publishing"). Records that cannot be used are told once and left out:
 * the cuts only decide how the arena is cut, never which bytes it holds,
 * so any partition still serves exactly the registered shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/refit_impl.h"
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

/* Whether (holder, bytes) was told already; records it otherwise. */
static int told_before(rs_publisher_h p, const char *holder, uint64_t digest)
{
    for (size_t i = 0; i < p->told_len; i++)
        if (p->told[i].digest == digest &&
            strcmp(p->told[i].holder, holder) == 0)
            return 1;
    rs_pub_told_t t;
    snprintf(t.holder, sizeof(t.holder), "%s", holder);
    t.digest = digest;
    RS_VEC_PUSH(p, told, t); /* out of memory: told again next time */
    return 0;
}

static void tell_record(rs_publisher_h p, const rs_dir_cuts_record_t *rec,
                        const char *why)
{
    char line[RS_DIAG_MSG_MAX + 512];
    uint64_t digest = rec->json != NULL ? rs_digest(rec->json, rec->len)
                                        : (uint64_t)rec->len;
    if (told_before(p, rec->holder, digest))
        return;
    snprintf(line, sizeof(line), "publisher rank %lld: ignoring the cuts "
             "record of holder '%s' for '%s': %s; its cuts are left out "
             "(told once while the record stays the same)",
             (long long)p->params.rank, rec->holder, p->model, why);
    rs__publisher_notify(p, line);
}

/* Merges one record into `into`, or tells why it cannot be used. */
static rs_status_t take_record(rs_publisher_h p, rs_cuts_h into,
                               const rs_dir_cuts_record_t *rec,
                               rs_diag_t *diag)
{
    char origin[RS_DIR_NAME_MAX + 64], why[RS_DIAG_MSG_MAX + 64];
    rs_cuts_h one = NULL;
    rs_diag_t d;
    rs_diag_clear(&d);
    if (rec->json == NULL) {
        snprintf(why, sizeof(why), "%zu bytes, more than the %zu-byte limit",
                 rec->len, RS_DIR_CUTS_MAX);
        tell_record(p, rec, why);
        return RS_OK;
    }
    snprintf(origin, sizeof(origin), "cuts record '%s'", rec->holder);
    rs_status_t st = rs_cuts_read_json(rec->json, rec->len, origin, &d, &one);
    if (st == RS_OK)
        st = rs_cuts_merge(into, one, &d);
    rs_cuts_destroy(one);
    if (st == RS_ERR_NO_MEMORY)
        return rs__diag_set(diag, st, "publisher: out of memory merging the "
                            "cuts record of '%s'", rec->holder);
    if (st != RS_OK)
        tell_record(p, rec, d.msg[0] ? d.msg : rs_status_str(st));
    return RS_OK;
}

/* Every record of the model; a directory that cannot be read is told and
 * the version staged without them. */
static rs_status_t take_records(rs_publisher_h p, rs_cuts_h into,
                                rs_diag_t *diag)
{
    rs_dir_cuts_record_t *recs = NULL;
    size_t n = 0;
    rs_diag_t d;
    rs_diag_clear(&d);
    rs_status_t st = rs_dir_read_cuts(p->dir, p->model, &d, &recs, &n);
    if (st != RS_OK) {
        char line[RS_DIAG_MSG_MAX + 256];
        snprintf(line, sizeof(line), "publisher rank %lld: cannot read the "
                 "cuts records of '%s' (%s); staging without them",
                 (long long)p->params.rank, p->model, d.msg);
        rs__publisher_notify(p, line);
        return RS_OK;
    }
    for (size_t i = 0; st == RS_OK && i < n; i++)
        st = take_record(p, into, &recs[i], diag);
    rs_dir_cuts_free(recs, n);
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
        const rs_pub_shard_t *s = &p->shards[i];
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
    if (st == RS_OK && p->params.cut_aligned)
        st = take_records(p, cuts, diag);
    if (st != RS_OK) {
        rs_cuts_destroy(cuts);
        return st;
    }
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
    const rs_pub_shard_t *s = &c->p->shards[c->shard];
    rs_pub_piece_t piece;
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
    c->need += (piece.nbytes + RS_PUB_SLOT_ALIGN - 1) / RS_PUB_SLOT_ALIGN *
               RS_PUB_SLOT_ALIGN;
    return RS_OK;
}

rs_status_t rs__publisher_cut(rs_publisher_h p, rs_diag_t *diag,
                              uint64_t *need_p)
{
    rs_cuts_h cuts = NULL;
    rs_status_t st = gather(p, diag, &cuts);
    if (st != RS_OK)
        return st;
    cut_ctx_t c = {p, 0, 0};
    p->next_pieces_len = 0;
    for (size_t i = 0; st == RS_OK && i < p->shards_len; i++) {
        const rs_pub_shard_t *s = &p->shards[i];
        if (s->nbytes == 0)
            continue;
        c.shard = i;
        st = rs_cuts_split(cuts, s->tensor, s->ndim, s->offset, s->shape,
                           add_piece, &c, diag);
    }
    rs_cuts_destroy(cuts);
    if (st != RS_OK)
        return st == RS_ERR_NO_MEMORY
                   ? rs__diag_set(diag, st, "publisher: out of memory "
                                  "cutting the shards")
                   : st;
    *need_p = c.need;
    return RS_OK;
}

/* Copies the sub-box (piece) of shard s into dst, row-major: the inner
 * dims the piece spans whole form one run, the outer ones are walked. */
static void copy_piece(const rs_pub_shard_t *s, const rs_pub_piece_t *piece,
                       char *dst)
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
        rs_pub_piece_t *piece = &p->next_pieces[i];
        piece->served = (char *)base + off;
        copy_piece(&p->shards[piece->shard], piece, piece->served);
        off += (piece->nbytes + RS_PUB_SLOT_ALIGN - 1) / RS_PUB_SLOT_ALIGN *
               RS_PUB_SLOT_ALIGN;
    }
    /* swap, so both buffers are reused by the next staging */
    rs_pub_piece_t *v = p->pieces;
    size_t cap = p->pieces_cap;
    p->pieces = p->next_pieces;
    p->pieces_len = p->next_pieces_len;
    p->pieces_cap = p->next_pieces_cap;
    p->next_pieces = v;
    p->next_pieces_len = 0;
    p->next_pieces_cap = cap;
}
