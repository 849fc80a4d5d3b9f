/* A receiver's patch (docs/delta.md): every byte it was given is checked
 * (header, the base version against the one held, each index entry, each
 * chunk's check and the structure of its payload) before one element is
 * written, so a refused delta leaves what the receiver holds as it was. */
#include "core/delta_impl.h"
#include "core/diag.h"
#include "reshard/digest.h"

/* One chunk as its index entries describe it. */
typedef struct chunk_ref {
    uint64_t c;
    rs__delta_kind_t kind;
    uint32_t len, k;         /* elements; changed ones */
    const unsigned char *p;  /* its payload */
    uint64_t size;
} chunk_ref_t;

/* Offset i of a list. */
static inline uint32_t u16_at(const unsigned char *p, size_t i)
{
    return (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
}

static rs_status_t bad_chunk(rs_diag_t *diag, uint64_t c, const char *what)
{
    return rs__diag_set(diag, RS_ERR_INPUT, "delta chunk %llu: %s",
                        (unsigned long long)c, what);
}

/* A list's offsets rise strictly and stay inside the chunk. */
static int list_ok(const chunk_ref_t *r)
{
    uint32_t prev = 0;
    for (uint32_t i = 0; i < r->k; i++) {
        const uint32_t o = u16_at(r->p, i);
        if (o >= r->len || (i > 0 && o <= prev))
            return 0;
        prev = o;
    }
    return 1;
}

/* Set bits of a 64-bit word, without the library call a compiler makes of
 * __builtin_popcount where the CPU baseline has no popcnt instruction. */
static inline uint32_t bits_set(uint64_t w)
{
    w -= w >> 1 & 0x5555555555555555ull;
    w = (w & 0x3333333333333333ull) + (w >> 2 & 0x3333333333333333ull);
    w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((w * 0x0101010101010101ull) >> 56);
}

/* Set bits of a bitmap of len bits, or UINT32_MAX when a bit past len is
 * set. */
static uint32_t bitmap_count(const unsigned char *p, uint32_t len)
{
    uint32_t k = 0;
    const uint32_t nb = (len + 7) / 8;
    uint32_t i = 0;
    for (; i + 8 <= nb; i += 8)
        k += bits_set(rs__le64(p + i));
    for (; i < nb; i++)
        k += bits_set(p[i]);
    if (len % 8 != 0 && (p[nb - 1] >> (len % 8)) != 0)
        return UINT32_MAX;
    return k;
}

/* Where element `at` of the shard goes in dst (elements [a, b)), or NULL
 * outside that range or when only checking (dst NULL). */
static inline unsigned char *elem_at(unsigned char *dst, uint64_t a,
                                     uint64_t b, uint64_t at, uint32_t es)
{
    return dst == NULL || at < a || at >= b ? NULL : dst + (at - a) * es;
}

/* One exception at p[*i]: a signed byte step, or the escape and E new
 * bytes; applied to el when it is not NULL. 0 when it is malformed (a
 * step of 0, or bytes past end). */
static inline int exception_at(const unsigned char *p, uint64_t end,
                               uint64_t *i, uint32_t es, unsigned char *el)
{
    if (*i >= end)
        return 0;
    const unsigned s = p[(*i)++];
    if (s == 0)
        return 0;
    if (s != RS__DELTA_ESCAPE) {
        if (el != NULL)
            rs__delta_add(el, es, (uint32_t)(int32_t)(int8_t)s);
        return 1;
    }
    if (end - *i < es)
        return 0;
    if (el != NULL)
        memcpy(el, p + *i, es);
    *i += es;
    return 1;
}

/* A steps payload (RS__DELTA_STEPS), walked: checked when dst is NULL,
 * applied to the elements of [a, b) otherwise (start: the chunk's first
 * element). Every change lies inside the chunk, the stream ends with a
 * change, exactly at the payload's end. */
static inline int steps_walk(const chunk_ref_t *r, uint32_t es,
                             unsigned char *dst, uint64_t a, uint64_t b,
                             uint64_t start)
{
    const unsigned char *p = r->p;
    uint64_t i = 0;
    uint32_t at = 0;
    int last_skip = 1;
    while (i < r->size) {
        const unsigned op = p[i] >> 6, g = p[i] & (RS__DS_GAP - 1);
        i++;
        if (op == RS__DS_SKIP) {
            at += RS__DS_GAP * (g + 1);
            if (at >= r->len)
                return 0;
            last_skip = 1;
            continue;
        }
        at += g;
        if (at >= r->len)
            return 0;
        unsigned char *el = elem_at(dst, a, b, start + at, es);
        if (op == RS__DS_EXC) {
            if (!exception_at(p, r->size, &i, es, el))
                return 0;
        } else if (el != NULL) { /* +1 or -1, without a branch */
            rs__delta_add(el, es, 1u - 2u * (op - RS__DS_PLUS));
        }
        at++;
        last_skip = 0;
    }
    return !last_skip;
}

/* Exceptions (code 3) of a step map's bytes. */
static uint64_t map_exceptions(const unsigned char *p, uint32_t nb)
{
    uint64_t x = 0;
    uint32_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        const uint64_t w = rs__le64(p + i);
        x += bits_set(w & w >> 1 & 0x5555555555555555ull);
    }
    for (; i < nb; i++)
        x += bits_set((unsigned)p[i] & ((unsigned)p[i] >> 1) & 0x55u);
    return x;
}

/* A step map's exceptions end exactly at the payload's end, and no code is
 * set past the chunk. */
static int map_ok(const chunk_ref_t *r, uint32_t es)
{
    const uint32_t nb = (r->len + 3) / 4;
    if (r->size < nb)
        return 0;
    if (r->len % 4 != 0 && (r->p[nb - 1] >> (2 * (r->len % 4))) != 0)
        return 0;
    uint64_t i = nb;
    for (uint64_t x = map_exceptions(r->p, nb); x > 0; x--)
        if (!exception_at(r->p, r->size, &i, es, NULL))
            return 0;
    return i == r->size;
}

/* Word w of a step map's nb code bytes (the codes of elements 32 w on),
 * little-endian, the bytes past nb read as 0. */
static inline uint64_t codes_word(const unsigned char *codes, uint32_t nb,
                                  uint32_t w)
{
    uint64_t word = 0;
    for (uint32_t j = 8 * w + 8 < nb ? 8 * w + 8 : nb; j > 8 * w; j--)
        word = word << 8 | codes[j - 1];
    return word;
}

/* Applies a checked step map to a whole chunk at d: every element gets
 * its code's +1, -1 or 0 (an exception's code, 3, adds 0 too) in one
 * loop without a branch, which the compiler vectorizes (a step map is
 * taken by dense chunks, where skipping the elements that stayed saves
 * little and each skip is a mispredicted branch); then the exceptions, in
 * order. */
static inline void map_patch_whole(const chunk_ref_t *r, uint32_t es,
                                   unsigned char *d)
{
    const unsigned char *codes = r->p;
    const uint32_t nb = (r->len + 3) / 4;
    for (uint32_t j = 0; j < r->len; j++) {
        const unsigned code = (unsigned)(codes[j / 4] >> (2 * (j % 4))) & 3u;
        rs__delta_add(d + (size_t)j * es, es, (code & 1u) - (code >> 1));
    }
    uint64_t i = nb; /* the next exception */
    for (uint32_t w = 0; w < (nb + 7) / 8; w++) {
        const uint64_t word = codes_word(codes, nb, w);
        for (uint64_t x = word & word >> 1 & 0x5555555555555555ull; x != 0;
             x &= x - 1) {
            const uint32_t at =
                32 * w + (uint32_t)__builtin_ctzll(x) / 2;
            (void)exception_at(r->p, r->size, &i, es,
                               d + (size_t)at * es);
        }
    }
}

/* Applies a checked step map to the elements of [a, b): a word of codes
 * at a time, skipping the elements that stayed. */
static inline void map_patch(const chunk_ref_t *r, uint32_t es,
                             unsigned char *dst, uint64_t a, uint64_t b,
                             uint64_t start)
{
    const uint32_t nb = (r->len + 3) / 4;
    uint64_t i = nb; /* the next exception */
    for (uint32_t w = 0; w < (nb + 7) / 8; w++) {
        const uint64_t codes = codes_word(r->p, nb, w);
        for (uint64_t set = (codes | codes >> 1) & 0x5555555555555555ull;
             set != 0; set &= set - 1) {
            const unsigned bit = (unsigned)__builtin_ctzll(set);
            const unsigned code = (unsigned)(codes >> bit) & 3u;
            unsigned char *el =
                elem_at(dst, a, b, start + 32 * (uint64_t)w + bit / 2, es);
            if (code == RS__DM_EXC) /* walked even outside [a, b) */
                (void)exception_at(r->p, r->size, &i, es, el);
            else if (el != NULL) /* +1 or -1, without a branch */
                rs__delta_add(el, es, 1u - 2u * (code - RS__DM_PLUS));
        }
    }
}

/* The payload's structure against its kind and size. */
static rs_status_t check_payload(chunk_ref_t *r, uint32_t es, rs_diag_t *diag)
{
    switch (r->kind) {
    case RS__DELTA_SAME:
        return r->size == 0 ? RS_OK
                            : bad_chunk(diag, r->c, "unchanged, yet it has "
                                        "a payload");
    case RS__DELTA_LIST:
        if (r->size == 0 || r->size % (2 + es) != 0 ||
            r->size / (2 + es) > r->len)
            return bad_chunk(diag, r->c, "a list's size is not a whole "
                             "number of offsets and values");
        r->k = (uint32_t)(r->size / (2 + es));
        return list_ok(r) ? RS_OK
                          : bad_chunk(diag, r->c, "a list's offsets do not "
                                      "rise within the chunk");
    case RS__DELTA_BITMAP: {
        const uint64_t nb = ((uint64_t)r->len + 7) / 8;
        if (r->size < nb)
            return bad_chunk(diag, r->c, "a bitmap shorter than the chunk");
        r->k = bitmap_count(r->p, r->len);
        if (r->k == UINT32_MAX || r->size != nb + (uint64_t)r->k * es)
            return bad_chunk(diag, r->c, "a bitmap's set bits and values "
                             "do not agree");
        return RS_OK;
    }
    case RS__DELTA_RAW:
        return r->size == (uint64_t)r->len * es
                   ? RS_OK
                   : bad_chunk(diag, r->c, "raw, of another size than the "
                               "chunk");
    case RS__DELTA_STEPS:
        return steps_walk(r, es, NULL, 0, 0, 0)
                   ? RS_OK
                   : bad_chunk(diag, r->c, "a steps payload whose ops leave "
                               "the chunk, hold a malformed exception or "
                               "do not end with a change at its end");
    case RS__DELTA_STEPMAP:
        return map_ok(r, es) ? RS_OK
                             : bad_chunk(diag, r->c, "a step map's codes "
                                         "and exceptions do not agree");
    }
    return bad_chunk(diag, r->c, "unknown kind");
}

/* Entry i of the span (chunk first + i) and where its payload lies. */
static rs_status_t read_entry(const rs__delta_hdr_t *h,
                              const unsigned char *entries, uint64_t i,
                              uint64_t first, const unsigned char *payload,
                              uint64_t payload_len, int verify,
                              rs_diag_t *diag, chunk_ref_t *r)
{
    const unsigned char *ent = entries + RS__DELTA_ENTRY * i;
    const uint64_t word = rs__le64(ent);
    const uint64_t lo0 = rs__le64(entries) & RS__DE_OFFSET_MASK;
    const uint64_t off = word & RS__DE_OFFSET_MASK;
    const uint64_t end = rs__le64(ent + RS__DELTA_ENTRY) & RS__DE_OFFSET_MASK;
    r->c = first + i;
    if ((word >> RS__DE_KIND_SHIFT) >= RS__DELTA_KINDS)
        return bad_chunk(diag, r->c, "its index entry's kind is unknown");
    r->kind = (rs__delta_kind_t)(word >> RS__DE_KIND_SHIFT);
    if (end < off || off < lo0 || end - lo0 > payload_len)
        return bad_chunk(diag, r->c, "its payload offsets are not within "
                         "the payload read");
    r->len = rs__delta_chunk_len(h->n, h->chunk, r->c);
    r->p = payload + (off - lo0);
    r->size = end - off;
    r->k = r->kind == RS__DELTA_LIST ? (uint32_t)(r->size / (2 + h->esize)) : 0;
    if (!verify)
        return RS_OK; /* the second pass, over entries already verified */
    if (rs__le64(ent + 8) !=
        rs__delta_chunk_check(r->c, word, end, r->p, (size_t)r->size))
        return bad_chunk(diag, r->c, "its check does not match its index "
                         "entry and payload (damaged)");
    return check_payload(r, h->esize, diag);
}

/* Element at (shard position) gets the value v when inside [a, b). es is
 * a constant wherever this is inlined, so the move is a fixed-size one. */
static inline void put(unsigned char *dst, uint64_t a, uint64_t b,
                       uint64_t at, const unsigned char *v, uint32_t es)
{
    if (at < a || at >= b)
        return;
    memcpy(dst + (at - a) * es, v, es);
}

/* Bits 64w .. 64w + 63 of a bitmap of nb bytes. */
static inline uint64_t bitmap_word(const unsigned char *p, uint32_t nb,
                                   uint32_t w)
{
    if (8 * w + 8 <= nb)
        return rs__le64(p + 8 * (size_t)w);
    uint64_t x = 0;
    for (uint32_t i = nb; i > 8 * w; i--)
        x = x << 8 | p[i - 1];
    return x;
}

static inline void patch_es(unsigned char *dst, uint64_t a, uint64_t b,
                            const chunk_ref_t *r, uint64_t start, uint32_t es)
{
    switch (r->kind) {
    case RS__DELTA_SAME:
        return;
    case RS__DELTA_LIST: {
        const unsigned char *v = r->p + 2 * (size_t)r->k;
        for (uint32_t i = 0; i < r->k; i++)
            put(dst, a, b, start + u16_at(r->p, i), v + (size_t)i * es, es);
        return;
    }
    case RS__DELTA_BITMAP: {
        /* a word of bits at a time: one mispredicted loop exit per 64
         * elements, not per 8 */
        const uint32_t nb = (r->len + 7) / 8;
        const unsigned char *v = r->p + nb;
        for (uint32_t w = 0; w < (nb + 7) / 8; w++)
            for (uint64_t bits = bitmap_word(r->p, nb, w); bits != 0;
                 bits &= bits - 1) {
                put(dst, a, b,
                    start + 64 * (uint64_t)w +
                        (uint64_t)__builtin_ctzll(bits),
                    v, es);
                v += es;
            }
        return;
    }
    case RS__DELTA_RAW: {
        const uint64_t lo = start > a ? start : a;
        const uint64_t hi = start + r->len < b ? start + r->len : b;
        memcpy(dst + (lo - a) * es, r->p + (lo - start) * es,
               (size_t)(hi - lo) * es);
        return;
    }
    case RS__DELTA_STEPS:
        (void)steps_walk(r, es, dst, a, b, start); /* checked before */
        return;
    case RS__DELTA_STEPMAP:
        if (start >= a && start + r->len <= b) /* the whole chunk */
            map_patch_whole(r, es, dst + (start - a) * es);
        else
            map_patch(r, es, dst, a, b, start);
        return;
    }
}

static void patch(unsigned char *dst, uint64_t a, uint64_t b,
                  const chunk_ref_t *r, uint32_t es, uint32_t chunk)
{
    const uint64_t start = r->c * chunk;
    switch (es) {
    case 1: patch_es(dst, a, b, r, start, 1); break;
    case 2: patch_es(dst, a, b, r, start, 2); break;
    default: patch_es(dst, a, b, r, start, 4); break;
    }
}

/* The span given is exactly the chunks that cover [a, b), of a shard
 * whose base is the version held. */
static rs_status_t check_span(const rs__delta_hdr_t *h, uint64_t a,
                              uint64_t b, int64_t held, uint64_t first,
                              uint64_t count, rs_diag_t *diag)
{
    if (h->base != held)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: applies to version "
                            "%lld, the shard holds version %lld",
                            (long long)h->base, (long long)held);
    if (a >= b || b > h->n)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: elements [%llu, "
                            "%llu) are not a range of its %llu",
                            (unsigned long long)a, (unsigned long long)b,
                            (unsigned long long)h->n);
    if (first != a / h->chunk || count != (b - 1) / h->chunk - first + 1)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: chunks %llu .. +%llu "
                            "are not those covering elements [%llu, %llu)",
                            (unsigned long long)first,
                            (unsigned long long)count, (unsigned long long)a,
                            (unsigned long long)b);
    return RS_OK;
}

rs_status_t rs__delta_apply_range(void *dst, uint64_t a, uint64_t b,
                                  int64_t held, const void *header,
                                  const void *entries, uint64_t first,
                                  uint64_t count, const void *payload,
                                  uint64_t payload_len, rs_diag_t *diag)
{
    rs__delta_hdr_t h;
    rs_status_t st = rs__delta_parse_header(header, RS__DELTA_HEADER, diag, &h);
    if (st == RS_OK)
        st = check_span(&h, a, b, held, first, count, diag);
    if (st != RS_OK)
        return st;
    const unsigned char *ents = entries;
    const uint64_t lo = rs__le64(ents) & RS__DE_OFFSET_MASK;
    const uint64_t hi = rs__le64(ents + RS__DELTA_ENTRY * count) &
                        RS__DE_OFFSET_MASK;
    if (hi < lo || hi > h.payload || hi - lo != payload_len)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta index: the chunks' "
                            "payload [%llu, %llu) is not the %llu bytes "
                            "given, within the %llu of the delta",
                            (unsigned long long)lo, (unsigned long long)hi,
                            (unsigned long long)payload_len,
                            (unsigned long long)h.payload);
    if (first + count == rs__delta_nchunks(h.n, h.chunk) &&
        (hi != h.payload || rs__le64(ents + RS__DELTA_ENTRY * count + 8) != 0 ||
         rs__le64(ents + RS__DELTA_ENTRY * count) >> RS__DE_KIND_SHIFT != 0))
        return rs__diag_set(diag, RS_ERR_INPUT, "delta index: its last entry "
                            "does not end the payload");
    /* every chunk checked first; only then written */
    for (uint64_t i = 0; i < count; i++) {
        chunk_ref_t r = {0};
        st = read_entry(&h, ents, i, first, payload, payload_len, 1, diag,
                        &r);
        if (st != RS_OK)
            return st;
    }
    for (uint64_t i = 0; i < count; i++) {
        chunk_ref_t r = {0};
        if (read_entry(&h, ents, i, first, payload, payload_len, 0, NULL,
                       &r) == RS_OK) /* always, once verified */
            patch(dst, a, b, &r, h.esize, h.chunk);
    }
    return RS_OK;
}

rs_status_t rs__delta_apply(void *dst, size_t dst_len, int64_t held,
                            const void *delta, size_t len, rs_diag_t *diag,
                            int64_t *version_p)
{
    rs__delta_hdr_t h;
    rs_status_t st = rs__delta_parse_header(delta, len, diag, &h);
    if (st != RS_OK)
        return st;
    if (h.n * h.esize != (uint64_t)dst_len)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: describes %llu "
                            "elements of %u bytes, the shard has %zu bytes",
                            (unsigned long long)h.n, h.esize, dst_len);
    if (rs__delta_size(&h) != (uint64_t)len)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: %zu bytes, its header "
                            "and index describe %llu", len,
                            (unsigned long long)rs__delta_size(&h));
    const uint64_t nchunks = rs__delta_nchunks(h.n, h.chunk);
    const unsigned char *idx = (const unsigned char *)delta + RS__DELTA_HEADER;
    if (rs_digest(idx, RS__DELTA_ENTRY * (nchunks + 1)) != h.index_digest)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta index: its digest "
                            "does not match the header's (damaged)");
    if (h.base != held)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta: applies to version "
                            "%lld, the shard holds version %lld",
                            (long long)h.base, (long long)held);
    if (nchunks > 0) {
        st = rs__delta_apply_range(dst, 0, h.n, held, delta, idx, 0, nchunks,
                                   idx + RS__DELTA_ENTRY * (nchunks + 1),
                                   h.payload, diag);
        if (st != RS_OK)
            return st;
    }
    *version_p = h.version;
    return RS_OK;
}
