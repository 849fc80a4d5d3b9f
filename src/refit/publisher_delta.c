/* A publisher's deltas (docs/delta.md): in arena staging the copy of a
 * new version over the previous one is the delta encoder's pass
 * (rs__delta_enc_*), which writes, per served entry (a shard, or a piece
 * in cut-aligned staging), a "reshard.delta.v1" delta against the version
 * the arena held. The deltas of the last delta_keep versions stay in ring
 * slots of memory of their own, exposed beside the arena, and each
 * version's table lists those that apply to its served entries
 * (docs/formats.md, "Deltas"). A delta is an addition: the full bytes
 * stay served, and a shard whose delta would pass half its bytes gets
 * none (a receiver would save too little for its extra reads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/delta.h"
#include "core/diag.h"
#include "refit/publisher_impl.h"
#include "reshard/digest.h"

/* What the entry about to be served (next layout) or served is. */
typedef struct entry_info {
    uint64_t nbytes;
    rs_dtype_t dtype;
} entry_info_t;

/* Served entries: the shards (or cut pieces) first, then two per
 * quantized piece, its FP8 values and its scales
 * (rs__publisher_quant_entry). */
static size_t base_entries(const rs_publisher_h p)
{
    return p->cut_mode ? p->next_pieces_len : p->shards_len;
}

static size_t next_entries(const rs_publisher_h p)
{
    return base_entries(p) + 2 * p->next_qpieces_len;
}

static entry_info_t next_entry(const rs_publisher_h p, size_t i)
{
    size_t nb = base_entries(p);
    if (i >= nb) {
        const rs__publish_quant_piece_t *q = &p->next_qpieces[(i - nb) / 2];
        return (i - nb) % 2 == 0
                   ? (entry_info_t){q->nbytes, q->format}
                   : (entry_info_t){q->scale_nbytes, RS_DTYPE_F32};
    }
    if (p->cut_mode) {
        const rs__publish_piece_t *q = &p->next_pieces[i];
        return (entry_info_t){q->nbytes, p->shards[q->shard].dtype};
    }
    return (entry_info_t){p->shards[i].nbytes, p->shards[i].dtype};
}

size_t rs__publisher_quant_entry(rs_publisher_h p, size_t piece, int scale)
{
    return (p->cut_mode ? p->pieces_len : p->shards_len) + 2 * piece +
           (scale ? 1 : 0);
}

/* The element size a delta of this dtype uses: its own when 1, 2 or 4
 * bytes; 8-byte elements as pairs of 4; any other size as bytes. */
static uint32_t delta_esize(rs_dtype_t dt)
{
    size_t es = rs_dtype_size(dt);
    return es == 1 || es == 2 || es == 4 ? (uint32_t)es : es == 8 ? 4u : 1u;
}

/* Elements per chunk: 16384 for one-byte elements (FP8 codes change so
 * rarely that a smaller index pays, docs/delta.md), else the default. */
static uint32_t delta_chunk(uint32_t esize)
{
    return esize == 1 ? 4 * RS__DELTA_CHUNK : RS__DELTA_CHUNK;
}

/* The payload cap: about half the shard's bytes. */
static uint64_t delta_limit(uint64_t nbytes)
{
    return nbytes / 2 > 0 ? nbytes / 2 : 1;
}

/* Ring bytes of an entry's delta, capped (the encoder never writes a
 * payload past its limit). */
static uint64_t delta_room(uint64_t nbytes, uint32_t esize)
{
    uint64_t n = nbytes / esize;
    return RS__DELTA_HEADER +
           RS__DELTA_ENTRY * (rs__delta_nchunks(n, delta_chunk(esize)) + 1) +
           delta_limit(nbytes);
}

uint64_t rs__publisher_layout_key(rs_publisher_h p)
{
    rs_digest_t d;
    rs_digest_init(&d);
    uint64_t n = base_entries(p), nq = p->next_qpieces_len;
    uint64_t head0[3] = {n, nq, (uint64_t)p->cut_mode};
    rs_digest_update(&d, head0, sizeof(head0));
    for (size_t i = 0; i < n; i++) {
        size_t k = p->cut_mode ? p->next_pieces[i].shard : i;
        const rs__publish_shard_t *s = &p->shards[k];
        const int64_t *off = p->cut_mode ? p->next_pieces[i].offset : s->offset;
        const int64_t *shape = p->cut_mode ? p->next_pieces[i].shape : s->shape;
        entry_info_t e = next_entry(p, i);
        uint64_t head[3] = {(uint64_t)k, e.nbytes, (uint64_t)e.dtype};
        rs_digest_update(&d, head, sizeof(head));
        rs_digest_update(&d, s->tensor, strlen(s->tensor) + 1);
        rs_digest_update(&d, off, (size_t)s->ndim * sizeof(*off));
        rs_digest_update(&d, shape, (size_t)s->ndim * sizeof(*shape));
    }
    for (size_t i = 0; i < nq; i++) {
        const rs__publish_quant_piece_t *q = &p->next_qpieces[i];
        int nd = p->shards[q->shard].ndim;
        uint64_t head[4] = {(uint64_t)q->shard, q->nbytes, q->scale_nbytes,
                            (uint64_t)q->format};
        rs_digest_update(&d, head, sizeof(head));
        rs_digest_update(&d, q->spec, strlen(q->spec) + 1);
        rs_digest_update(&d, q->lo, (size_t)nd * sizeof(*q->lo));
        rs_digest_update(&d, q->len, (size_t)nd * sizeof(*q->len));
    }
    return rs_digest_final(&d);
}

static void ring_clear(rs__publish_ring_t *r)
{
    r->version = -1;
    r->n = 0;
}

/* The slot the next version's deltas go into: an empty one, else the
 * oldest version's (no table of a version still served lists it: the
 * arena serves one version, whose table lists the newer ones). */
static rs__publish_ring_t *pick_slot(rs_publisher_h p)
{
    rs__publish_ring_t *best = &p->ring[0];
    for (size_t k = 0; k < p->nring; k++) {
        if (p->ring[k].version < 0)
            return &p->ring[k];
        if (p->ring[k].version < best->version)
            best = &p->ring[k];
    }
    return best;
}

/* Gives slot r memory for `need` bytes: replacing its region resets the
 * exposer (as growing the arena does), so everything is exposed again. */
static rs_status_t slot_memory(rs_publisher_h p, rs__publish_ring_t *r,
                               uint64_t need, rs_diag_t *diag)
{
    if (need <= r->cap)
        return RS_OK;
    return rs__publisher_replace_region(p, &r->mem, &r->cap, need,
                                        "delta memory", diag);
}

/* Lays slot r out for the next entries: each delta's place and sizes;
 * the bytes they take in *need_p. */
static rs_status_t slot_layout(rs_publisher_h p, rs__publish_ring_t *r,
                               rs_diag_t *diag, uint64_t *need_p)
{
    size_t n = next_entries(p);
    uint64_t off = 0;
    if (n > r->d_cap) {
        rs__publish_delta_t *d = realloc(r->d, n * sizeof(*d));
        if (d == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        r->d = d;
        r->d_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        entry_info_t e = next_entry(p, i);
        uint32_t es = delta_esize(e.dtype);
        r->d[i] = (rs__publish_delta_t){-1, e.nbytes, off, 0, es,
                                        delta_chunk(es), 0};
        if (e.nbytes > 0 && e.nbytes % es == 0)
            off += rs__publisher_slot(delta_room(e.nbytes, es));
    }
    r->n = n;
    *need_p = off;
    return RS_OK;
}

/* Every slot gets memory for the next layout's deltas, from the first
 * staging on: memory that appears later would change what the publisher
 * exposes, and with it the transport blob receivers plan by. */
static rs_status_t ring_memory(rs_publisher_h p, rs_diag_t *diag)
{
    uint64_t need = 0;
    for (size_t i = 0; i < next_entries(p); i++) {
        entry_info_t e = next_entry(p, i);
        uint32_t es = delta_esize(e.dtype);
        if (e.nbytes > 0 && e.nbytes % es == 0)
            need += rs__publisher_slot(delta_room(e.nbytes, es));
    }
    rs_status_t st = RS_OK;
    for (size_t k = 0; st == RS_OK && k < p->nring; k++)
        st = need > 0 ? slot_memory(p, &p->ring[k], need, diag) : RS_OK;
    return st;
}

rs_status_t rs__publisher_delta_begin(rs_publisher_h p, int64_t prev,
                                      int64_t version, uint64_t layout,
                                      rs_diag_t *diag)
{
    p->filling = NULL;
    if (p->params.delta_keep <= 0)
        return RS_OK;
    if (p->ring == NULL) {
        p->ring = calloc((size_t)p->params.delta_keep, sizeof(*p->ring));
        if (p->ring == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        p->nring = (size_t)p->params.delta_keep;
        for (size_t k = 0; k < p->nring; k++)
            ring_clear(&p->ring[k]);
    }
    int same = prev >= 0 && layout == p->arena_layout;
    if (!same) /* the kept deltas describe entries no longer served */
        for (size_t k = 0; k < p->nring; k++)
            ring_clear(&p->ring[k]);
    p->arena_layout = layout;
    rs_status_t st = ring_memory(p, diag);
    if (st != RS_OK || !same)
        return st;
    rs__publish_ring_t *r = pick_slot(p);
    ring_clear(r);
    uint64_t need = 0;
    st = slot_layout(p, r, diag, &need);
    if (st == RS_OK && need > r->cap)
        st = rs__diag_set(diag, RS_ERR_INVALID_ARG, "publisher: delta slot "
                          "of %llu bytes, %llu needed",
                          (unsigned long long)r->cap,
                          (unsigned long long)need);
    if (st != RS_OK) {
        ring_clear(r);
        return st;
    }
    r->version = -1; /* until end: a failed staging lists none of it */
    p->filling = r;
    p->filling_base = prev;
    p->filling_version = version;
    return RS_OK;
}

int rs__publisher_delta_filling(rs_publisher_h p)
{
    return p->filling != NULL;
}

int rs__publisher_delta_enc(rs_publisher_h p, size_t i, void *dst,
                            struct rs__delta_enc *enc)
{
    rs__publish_ring_t *r = p->filling;
    if (r == NULL || i >= r->n)
        return 0;
    rs__publish_delta_t *d = &r->d[i];
    if (d->nbytes == 0 || d->nbytes % d->esize != 0 ||
        rs__delta_enc_init(enc, dst, d->nbytes / d->esize, d->esize, d->chunk,
                           p->filling_base, p->filling_version,
                           (char *)r->mem + d->off, NULL) != RS_OK)
        return 0;
    rs__delta_enc_limit(enc, delta_limit(d->nbytes));
    return 1;
}

void rs__publisher_delta_done(rs_publisher_h p, size_t i,
                              struct rs__delta_enc *enc)
{
    rs__publish_ring_t *r = p->filling;
    rs__publish_delta_t *d = &r->d[i];
    size_t len = 0;
    if (rs__delta_enc_finish(enc, NULL, &len) != RS_OK || len == 0)
        return; /* no delta: receivers read this entry whole */
    d->base = p->filling_base;
    d->len = len;
    d->digest = rs_digest((char *)r->mem + d->off, len);
}

void rs__publisher_delta_copy(rs_publisher_h p, size_t i, void *dst,
                              const void *src, uint64_t nbytes)
{
    rs__delta_enc_t enc;
    if (!rs__publisher_delta_enc(p, i, dst, &enc)) {
        memcpy(dst, src, (size_t)nbytes);
        return;
    }
    const unsigned char *s = src;
    for (uint64_t left = nbytes; left > 0;) { /* size_t-sized runs */
        size_t take = left > ((size_t)1 << 30) ? (size_t)1 << 30
                                                : (size_t)left;
        rs__delta_enc_copy(&enc, s, take);
        s += take;
        left -= take;
    }
    rs__publisher_delta_done(p, i, &enc);
}

void rs__publisher_delta_end(rs_publisher_h p, int64_t version, int ok)
{
    if (p->filling != NULL) {
        if (ok)
            p->filling->version = version;
        else
            ring_clear(p->filling);
    }
    p->filling = NULL;
}

/* The kept slots whose deltas apply to entry i of the served layout,
 * newest first. */
static size_t kept_for(rs_publisher_h p, size_t i,
                       const rs__publish_ring_t **out)
{
    size_t n = 0;
    for (size_t k = 0; k < p->nring; k++) {
        const rs__publish_ring_t *r = &p->ring[k];
        if (r->version < 0 || r->version > p->arena_version ||
            i >= r->n || r->d[i].base < 0)
            continue;
        size_t at = n++;
        while (at > 0 && out[at - 1]->version < r->version) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = r;
    }
    return n;
}

rs_status_t rs__publisher_delta_json(rs_publisher_h p, size_t i,
                                     char **buf_p, size_t *len_p)
{
    const rs__publish_ring_t *kept[RS_PUB_DELTA_KEEP_MAX];
    char *buf = NULL;
    size_t len = 0;
    *buf_p = NULL;
    *len_p = 0;
    if (p->params.staging != RS_STAGING_ARENA || p->nring == 0)
        return RS_OK;
    FILE *out = open_memstream(&buf, &len);
    if (out == NULL)
        return RS_ERR_NO_MEMORY;
    size_t n = p->arena_version >= 0 ? kept_for(p, i, kept) : 0;
    fputs(", \"deltas\": [", out);
    for (size_t k = 0; k < n; k++) {
        const rs__publish_delta_t *d = &kept[k]->d[i];
        char text[RS_DIGEST_STR_LEN + 1];
        rs_digest_format(d->digest, text);
        fprintf(out, "%s{\"base\": %lld, \"version\": %lld, \"addr\": %llu, "
                "\"bytes\": %llu, \"esize\": %u, \"chunk\": %u, "
                "\"digest\": \"%s\"}", k > 0 ? ", " : "",
                (long long)d->base, (long long)kept[k]->version,
                (unsigned long long)(uintptr_t)((char *)kept[k]->mem + d->off),
                (unsigned long long)d->len, d->esize, d->chunk, text);
    }
    fputc(']', out);
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        free(buf);
        return RS_ERR_NO_MEMORY;
    }
    *buf_p = buf;
    *len_p = len;
    return RS_OK;
}

rs_status_t rs__publisher_delta_regions(rs_publisher_h p, rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    for (size_t k = 0; st == RS_OK && k < p->nring; k++) {
        const rs__publish_ring_t *r = &p->ring[k];
        if (r->mem != NULL && r->cap > 0)
            st = rs_exposer_add_region(p->exposer, (uint64_t)(uintptr_t)r->mem,
                                       r->mem, r->cap, RS_MEM_HOST, diag);
    }
    return st;
}

void rs__publisher_free_deltas(rs_publisher_h p)
{
    for (size_t k = 0; k < p->nring; k++)
        free(p->ring[k].d); /* the memory goes with the exposer */
    free(p->ring);
    p->ring = NULL;
    p->nring = 0;
}
