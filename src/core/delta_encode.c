/* The publisher's copy that produces a delta (docs/delta.md): the new
 * version's bytes are written over the old ones in the arena, and the words
 * that differ are noted from the registers that hold both, so the pass
 * reads and writes what a memcpy into that arena would (a store there
 * first reads the line anyway). At the end of each chunk, while its bytes
 * are still in cache, the chunk is encoded the smallest way. */
#include <stdlib.h>

#include "core/delta_impl.h"
#include "core/diag.h"
#include "reshard/digest.h"

#define BLOCK 32 /* bytes compared and copied per step */

rs_status_t rs__delta_enc_init(rs__delta_enc_t *e, void *dst, uint64_t n,
                               uint32_t esize, uint32_t chunk, int64_t base,
                               int64_t version, void *out, rs_diag_t *diag)
{
    memset(e, 0, sizeof(*e));
    if (rs__delta_bound(n, esize, chunk) == 0)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta: element size "
                            "%u, chunk %u, %llu elements: not a valid shape",
                            esize, chunk, (unsigned long long)n);
    if (base < 0 || version <= base)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta: base version "
                            "%lld, new version %lld (want 0 <= base < new)",
                            (long long)base, (long long)version);
    e->changed = malloc(sizeof(*e->changed) * chunk);
    if (e->changed == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "delta: out of memory "
                            "for a chunk of %u elements", chunk);
    e->dst = dst;
    e->out = out;
    e->n = n;
    e->esize = esize;
    e->chunk = chunk;
    e->base = base;
    e->version = version;
    return RS_OK;
}

void rs__delta_enc_abandon(rs__delta_enc_t *e)
{
    free(e->changed);
    e->changed = NULL;
}

/* The elements a nonzero xor word covers, from chunk offset at. */
static uint32_t note_word(uint16_t *list, uint32_t k, uint64_t x,
                          uint32_t at, uint32_t esize)
{
    const unsigned bits = 8 * esize;
    const uint64_t mask = esize == 4 ? 0xffffffffull
                          : esize == 2 ? 0xffffull : 0xffull;
    while (x != 0) {
        const unsigned el = (unsigned)__builtin_ctzll(x) / bits;
        list[k++] = (uint16_t)(at + el);
        x &= ~(mask << (el * bits));
    }
    return k;
}

/* A native word of xor bits in little-endian order: byte j is then part of
 * element j / esize of the word. */
static inline uint64_t le_order(uint64_t x)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(x);
#else
    return x;
#endif
}

/* dst = src over nbytes within one chunk, starting at chunk offset at;
 * the offsets of elements that differed are appended to e->changed. */
static void scan_copy(rs__delta_enc_t *e, unsigned char *dst,
                      const unsigned char *src, size_t nbytes, uint32_t at)
{
    const uint32_t es = e->esize, per = 8 / es;
    uint16_t *list = e->changed;
    uint32_t k = e->nchanged;
    size_t i = 0;
    for (; i + BLOCK <= nbytes; i += BLOCK) {
        uint64_t nw[4], ow[4], x[4];
        memcpy(nw, src + i, BLOCK);
        memcpy(ow, dst + i, BLOCK);
        memcpy(dst + i, nw, BLOCK);
        for (int w = 0; w < 4; w++)
            x[w] = nw[w] ^ ow[w];
        if ((x[0] | x[1] | x[2] | x[3]) == 0)
            continue; /* the common case: nothing changed here */
        const uint32_t el = at + (uint32_t)(i / es);
        for (uint32_t w = 0; w < 4; w++)
            if (x[w] != 0)
                k = note_word(list, k, le_order(x[w]), el + w * per, es);
    }
    for (; i < nbytes; i += es) {
        if (memcmp(dst + i, src + i, es) != 0)
            list[k++] = (uint16_t)(at + i / es);
        memcpy(dst + i, src + i, es);
    }
    e->nchanged = k;
}

/* Payload bytes of chunk of len elements, k of them changed, per kind. */
static uint64_t kind_size(rs__delta_kind_t kind, uint32_t len, uint32_t k,
                          uint32_t es)
{
    switch (kind) {
    case RS__DELTA_SAME: return 0;
    case RS__DELTA_LIST: return (uint64_t)k * (2 + es);
    case RS__DELTA_BITMAP: return (uint64_t)(len + 7) / 8 + (uint64_t)k * es;
    case RS__DELTA_RAW: return (uint64_t)len * es;
    }
    return 0;
}

/* The smallest encoding; on a tie the simpler one (earlier in the enum). */
static rs__delta_kind_t choose(uint32_t len, uint32_t k, uint32_t es)
{
    if (k == 0)
        return RS__DELTA_SAME;
    rs__delta_kind_t best = RS__DELTA_LIST;
    for (int kind = RS__DELTA_BITMAP; kind <= RS__DELTA_RAW; kind++)
        if (kind_size((rs__delta_kind_t)kind, len, k, es) <
            kind_size(best, len, k, es))
            best = (rs__delta_kind_t)kind;
    return best;
}

static unsigned char *payload_base(const rs__delta_enc_t *e)
{
    return e->out + RS__DELTA_HEADER +
           RS__DELTA_ENTRY * (rs__delta_nchunks(e->n, e->chunk) + 1);
}

/* Writes chunk c's payload (its new bytes are at cb) and index entry. */
static void emit_chunk(rs__delta_enc_t *e, uint64_t c,
                       const unsigned char *cb, uint32_t len)
{
    const uint32_t es = e->esize, k = e->nchanged;
    const rs__delta_kind_t kind = choose(len, k, es);
    unsigned char *p = payload_base(e) + e->payload;
    switch (kind) {
    case RS__DELTA_SAME:
        break;
    case RS__DELTA_LIST:
        for (uint32_t i = 0; i < k; i++) {
            p[2 * i] = (unsigned char)e->changed[i];
            p[2 * i + 1] = (unsigned char)(e->changed[i] >> 8);
        }
        for (uint32_t i = 0; i < k; i++)
            memcpy(p + 2 * (size_t)k + (size_t)i * es,
                   cb + (size_t)e->changed[i] * es, es);
        break;
    case RS__DELTA_BITMAP: {
        const size_t nb = ((size_t)len + 7) / 8;
        memset(p, 0, nb);
        for (uint32_t i = 0; i < k; i++) {
            const uint32_t o = e->changed[i];
            p[o / 8] |= (unsigned char)(1u << (o % 8));
            memcpy(p + nb + (size_t)i * es, cb + (size_t)o * es, es);
        }
        break;
    }
    case RS__DELTA_RAW:
        memcpy(p, cb, (size_t)len * es);
        break;
    }
    const uint64_t size = kind_size(kind, len, k, es);
    const uint64_t word = e->payload | (uint64_t)kind << RS__DE_KIND_SHIFT;
    unsigned char *ent = e->out + RS__DELTA_HEADER + RS__DELTA_ENTRY * c;
    rs__put_le64(ent, word);
    rs__put_le64(ent + 8, rs__delta_chunk_check(c, word, e->payload + size,
                                                p, (size_t)size));
    e->payload += size;
    e->nchanged = 0;
}

void rs__delta_enc_copy(rs__delta_enc_t *e, const void *src, size_t nbytes)
{
    const unsigned char *s = src;
    const uint32_t es = e->esize;
    if (e->changed == NULL || e->pos > e->n || nbytes % es != 0 ||
        nbytes / es > e->n - e->pos) {
        e->pos = UINT64_MAX; /* finish refuses; nothing written past dst */
        return;
    }
    while (nbytes > 0) {
        const uint64_t c = e->pos / e->chunk, start = c * e->chunk;
        const uint32_t len = rs__delta_chunk_len(e->n, e->chunk, c);
        const uint32_t at = (uint32_t)(e->pos - start);
        const size_t take = nbytes / es < len - at ? nbytes : (size_t)(len - at) * es;
        scan_copy(e, e->dst + e->pos * es, s, take, at);
        e->pos += take / es;
        s += take;
        nbytes -= take;
        if (e->pos == start + len)
            emit_chunk(e, c, e->dst + start * es, len);
    }
}

rs_status_t rs__delta_enc_finish(rs__delta_enc_t *e, rs_diag_t *diag,
                                 size_t *len_p)
{
    const uint64_t pos = e->pos;
    const int ok = e->changed != NULL && pos == e->n;
    rs__delta_enc_abandon(e);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta: the copy fed "
                            "%s elements, the shard has %llu",
                            pos == UINT64_MAX ? "more (or a part of an)"
                                              : "fewer",
                            (unsigned long long)e->n);
    const uint64_t nchunks = rs__delta_nchunks(e->n, e->chunk);
    unsigned char *idx = e->out + RS__DELTA_HEADER;
    rs__put_le64(idx + RS__DELTA_ENTRY * nchunks, e->payload);
    rs__put_le64(idx + RS__DELTA_ENTRY * nchunks + 8, 0);
    unsigned char *h = e->out;
    memset(h, 0, RS__DELTA_HEADER);
    memcpy(h, RS__DELTA_SCHEMA, 16);
    rs__put_le32(h + RS__DH_ESIZE, e->esize);
    rs__put_le32(h + RS__DH_CHUNK, e->chunk);
    rs__put_le64(h + RS__DH_N, e->n);
    rs__put_le64(h + RS__DH_BASE, (uint64_t)e->base);
    rs__put_le64(h + RS__DH_VERSION, (uint64_t)e->version);
    rs__put_le64(h + RS__DH_PAYLOAD, e->payload);
    rs__put_le64(h + RS__DH_INDEX_DIGEST,
                 rs_digest(idx, RS__DELTA_ENTRY * (nchunks + 1)));
    rs__put_le64(h + RS__DH_CHECK, rs_digest(h, RS__DH_CHECK));
    *len_p = (size_t)(RS__DELTA_HEADER + RS__DELTA_ENTRY * (nchunks + 1) +
                      e->payload);
    return RS_OK;
}

rs_status_t rs__delta_encode(void *dst, const void *src, uint64_t n,
                             uint32_t esize, uint32_t chunk, int64_t base,
                             int64_t version, void *out, rs_diag_t *diag,
                             size_t *len_p)
{
    rs__delta_enc_t e;
    rs_status_t st = rs__delta_enc_init(&e, dst, n, esize, chunk, base,
                                        version, out, diag);
    if (st != RS_OK)
        return st;
    /* in pieces, so that n * esize beyond SIZE_MAX cannot truncate */
    const unsigned char *s = src;
    for (uint64_t left = n * esize; left > 0;) {
        const size_t take = left > ((size_t)1 << 30) ? (size_t)1 << 30
                                                      : (size_t)left;
        rs__delta_enc_copy(&e, s, take);
        s += take;
        left -= take;
    }
    return rs__delta_enc_finish(&e, diag, len_p);
}
