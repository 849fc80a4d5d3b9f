/* The delta codec (docs/delta.md): for seeded random changes at 0 %, 0.1 %,
 * 2 %, 30 % and 100 % of the elements, element sizes 1, 2 and 4, odd
 * element counts and changes on chunk edges, the encoding copy leaves the
 * new bytes in the arena, each chunk takes the kind (and payload size) this
 * test computes as the smallest from its own count of changed elements and
 * of their integer steps, for random changes and for optimizer-like ones
 * (+-1 steps, wrapping ones on chunk edges, small and escaped exceptions,
 * so that every kind occurs), and applying the
 * delta (whole, or the chunks covering a sub-range) to the old bytes gives
 * the new bytes exactly. Every damaged delta (a flipped byte anywhere in
 * the header, the index or the payload, a truncation, a wrong base
 * version, a wrong shard size, and payloads whose checks were recomputed
 * so that only their structure is wrong: offsets past the chunk or the
 * payload, unsorted lists, stray bitmap bits, steps that leave the chunk or
 * end on a skip, zero or cut exceptions, step-map codes past the chunk or
 * without their exceptions, unknown kinds) is refused with a message, and
 * the buffer it was applied to is untouched. Steps and step maps are also
 * checked byte for byte against payloads written out by hand from the
 * format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/delta_impl.h"
#include "reshard/digest.h"

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
}

/* A shard's two versions: old random, new = old with about permille / 1000
 * of the elements changed (each to a different value), plus the elements
 * listed in edges. */
typedef struct pair {
    unsigned char *old, *neu;
    uint64_t n;
    uint32_t es;
} pair_t;

static pair_t make_pair(uint64_t n, uint32_t es, uint32_t permille,
                        const uint64_t *edges, size_t nedges)
{
    pair_t p = {malloc(n * es + 1), malloc(n * es + 1), n, es};
    assert_non_null(p.old);
    assert_non_null(p.neu);
    for (uint64_t i = 0; i < n * es; i++)
        p.old[i] = (unsigned char)rnd(256);
    memcpy(p.neu, p.old, n * es);
    for (uint64_t i = 0; i < n; i++)
        if (rnd(1000) < permille)
            p.neu[i * es + rnd(es)] ^= (unsigned char)(1 + rnd(255));
    for (size_t j = 0; j < nedges; j++)
        if (edges[j] < n)
            p.neu[edges[j] * es] ^= 0x5a;
    return p;
}

/* x + d as a little-endian integer of es bytes, modulo 2^(8 es), byte by
 * byte with a carry. */
static void add_le(unsigned char *x, uint32_t es, int d)
{
    const uint64_t u = (uint64_t)(int64_t)d; /* two's complement bytes */
    unsigned carry = 0;
    for (uint32_t i = 0; i < es; i++) {
        const unsigned byte = (unsigned)(u >> (8 * i)) & 0xff;
        const unsigned sum = x[i] + byte + carry;
        x[i] = (unsigned char)sum;
        carry = sum >> 8;
    }
}

/* As make_pair, with changes as an optimizer step makes them: of the
 * changed elements 80 % +1 or -1 as an integer of their bytes, 12 % a
 * step of 2 to 127 either way, 8 % their top byte flipped by 0x80 (a
 * step no signed byte holds); the edges wrap: all ones + 1, zero - 1. */
static pair_t make_step_pair(uint64_t n, uint32_t es, uint32_t permille,
                             const uint64_t *edges, size_t nedges)
{
    pair_t p = make_pair(n, es, 0, NULL, 0);
    for (uint64_t i = 0; i < n; i++) {
        if (rnd(1000) >= permille)
            continue;
        unsigned char *el = p.neu + i * es;
        const uint64_t r = rnd(100);
        if (r < 80)
            add_le(el, es, rnd(2) ? 1 : -1);
        else if (r < 92)
            add_le(el, es, (int)(2 + rnd(126)) * (rnd(2) ? 1 : -1));
        else
            el[es - 1] ^= 0x80;
    }
    for (size_t j = 0; j < nedges; j++) {
        if (edges[j] >= n)
            continue;
        memset(p.old + edges[j] * es, j % 2 ? 0 : 0xff, es);
        memset(p.neu + edges[j] * es, j % 2 ? 0xff : 0, es);
    }
    return p;
}

static void free_pair(pair_t *p)
{
    free(p->old);
    free(p->neu);
}

/* The step of element i, new - old as an integer of es bytes, in
 * -2^(8 es - 1) .. 2^(8 es - 1) - 1. */
static int64_t step_of(const pair_t *p, uint64_t i)
{
    uint64_t o = 0, w = 0;
    for (uint32_t b = p->es; b > 0; b--) {
        o = o << 8 | p->old[i * p->es + b - 1];
        w = w << 8 | p->neu[i * p->es + b - 1];
    }
    const uint64_t m = (uint64_t)1 << (8 * p->es);
    const uint64_t d = (w + m - o) % m;
    return d >= m / 2 ? (int64_t)d - (int64_t)m : (int64_t)d;
}

/* The payload bytes of every kind for chunk [lo, lo + len) of p, from the
 * format's rules (docs/formats.md); sizes[0] = 0 means unchanged. */
static void kind_sizes(const pair_t *p, uint64_t lo, uint32_t len,
                       uint64_t sizes[6], uint32_t *k_p)
{
    const uint32_t es = p->es;
    uint64_t k = 0, xbytes = 0, skips = 0, prev = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (memcmp(p->old + (lo + i) * es, p->neu + (lo + i) * es, es) == 0)
            continue;
        const int64_t d = step_of(p, lo + i);
        if (d != 1 && d != -1)
            xbytes += d >= -127 && d <= 127 ? 1 : 1 + es;
        /* a gap of g takes ceil(floor(g / 64) / 64) skip bytes */
        skips += ((i - prev) / 64 + 63) / 64;
        prev = i + 1;
        k++;
    }
    sizes[0] = 0;
    sizes[1] = k * (2 + es);
    sizes[2] = (len + 7) / 8 + k * es;
    sizes[3] = (uint64_t)len * es;
    sizes[4] = k + skips + xbytes;
    sizes[5] = (len + 3) / 4 + xbytes;
    *k_p = (uint32_t)k;
}

/* Each chunk's kind is the smallest (the earlier of equals) and its
 * payload that kind's size; *seen gets a bit per kind met. */
static void check_kinds(const pair_t *p, uint32_t chunk,
                        const unsigned char *delta, unsigned *seen)
{
    const uint64_t nchunks = (p->n + chunk - 1) / chunk;
    for (uint64_t c = 0; c < nchunks; c++) {
        const uint64_t lo = c * chunk;
        const uint32_t len = (uint32_t)(p->n - lo < chunk ? p->n - lo : chunk);
        uint64_t sizes[6];
        uint32_t k = 0;
        kind_sizes(p, lo, len, sizes, &k);
        unsigned kind = 0;
        if (k > 0) {
            kind = 1;
            for (unsigned t = 2; t < 6; t++)
                if (sizes[t] < sizes[kind])
                    kind = t;
        }
        const unsigned char *ent = delta + 80 + 16 * c;
        assert_int_equal(ent[6], kind);
        assert_int_equal(ent[7], 0);
        const uint64_t off = rs__le64(ent) & RS__DE_OFFSET_MASK;
        const uint64_t end = rs__le64(ent + 16) & RS__DE_OFFSET_MASK;
        assert_int_equal(end - off, sizes[kind]);
        *seen |= 1u << kind;
    }
}

/* Encodes p (old in a scratch arena); returns the delta, *len_p its size. */
static unsigned char *encode(const pair_t *p, uint32_t chunk, int64_t base,
                             size_t *len_p)
{
    const size_t bound = rs__delta_bound(p->n, p->es, chunk);
    assert_true(bound > 0);
    unsigned char *arena = malloc(p->n * p->es + 1);
    unsigned char *out = malloc(bound);
    memcpy(arena, p->old, p->n * p->es);
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_encode(arena, p->neu, p->n, p->es, chunk, base,
                                      base + 1, out, &diag, len_p),
                     RS_OK);
    assert_true(*len_p <= bound);
    assert_memory_equal(arena, p->neu, p->n * p->es);
    free(arena);
    return out;
}

/* The same delta when the copy comes in runs of random lengths. */
static void check_runs(const pair_t *p, uint32_t chunk, int64_t base,
                       const unsigned char *whole, size_t whole_len)
{
    unsigned char *arena = malloc(p->n * p->es + 1);
    unsigned char *out = malloc(rs__delta_bound(p->n, p->es, chunk));
    memcpy(arena, p->old, p->n * p->es);
    rs__delta_enc_t e;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_enc_init(&e, arena, p->n, p->es, chunk, base,
                                        base + 1,
                                        out, &diag),
                     RS_OK);
    for (uint64_t at = 0; at < p->n;) {
        uint64_t run = 1 + rnd(3 * chunk / 2);
        if (run > p->n - at)
            run = p->n - at;
        rs__delta_enc_copy(&e, p->neu + at * p->es, run * p->es);
        at += run;
    }
    size_t len = 0;
    assert_int_equal(rs__delta_enc_finish(&e, &diag, &len), RS_OK);
    assert_int_equal(len, whole_len);
    assert_memory_equal(out, whole, len);
    assert_memory_equal(arena, p->neu, p->n * p->es);
    free(arena);
    free(out);
}

static void apply_whole(const pair_t *p, const unsigned char *delta,
                        size_t len, int64_t held)
{
    unsigned char *buf = malloc(p->n * p->es + 1);
    memcpy(buf, p->old, p->n * p->es);
    int64_t v = -1;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_apply(buf, p->n * p->es, held, delta, len,
                                     &diag, &v),
                     RS_OK);
    assert_int_equal(v, held + 1);
    assert_memory_equal(buf, p->neu, p->n * p->es);
    free(buf);
}

/* Elements [a, b) patched from only the bytes a receiver would read. */
static void apply_sub(const pair_t *p, const unsigned char *delta, uint64_t a,
                      uint64_t b, int64_t held)
{
    rs__delta_hdr_t h;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_parse_header(delta, 80, &diag, &h), RS_OK);
    uint64_t first, count, ioff, ilen, poff, plen;
    assert_int_equal(rs__delta_index_span(&h, a, b, &diag, &first, &count,
                                          &ioff, &ilen),
                     RS_OK);
    assert_int_equal(ilen, 16 * (count + 1));
    /* copies, exactly sized, so ASan sees any read outside them */
    unsigned char *ents = malloc(ilen);
    memcpy(ents, delta + ioff, ilen);
    assert_int_equal(rs__delta_payload_span(&h, ents, count, &diag, &poff,
                                            &plen),
                     RS_OK);
    unsigned char *pay = malloc(plen + 1);
    memcpy(pay, delta + poff, plen);
    unsigned char *buf = malloc((b - a) * p->es);
    memcpy(buf, p->old + a * p->es, (b - a) * p->es);
    assert_int_equal(rs__delta_apply_range(buf, a, b, held, delta, ents, first,
                                           count, pay, plen, &diag),
                     RS_OK);
    assert_memory_equal(buf, p->neu + a * p->es, (b - a) * p->es);
    free(ents);
    free(pay);
    free(buf);
}

static unsigned g_seen; /* the kinds the round trips met */

static void round_trip(uint64_t n, uint32_t es, uint32_t chunk,
                       uint32_t permille, int steps)
{
    const uint64_t edges[] = {0, chunk - 1, chunk, 2 * (uint64_t)chunk - 1,
                              n - 1};
    pair_t p = (steps ? make_step_pair : make_pair)(
        n, es, permille, permille ? edges : NULL, permille ? 5 : 0);
    size_t len = 0;
    unsigned char *delta = encode(&p, chunk, 41, &len);
    check_kinds(&p, chunk, delta, &g_seen);
    if (permille == 0)
        assert_int_equal(len, 80 + 16 * ((n + chunk - 1) / chunk + 1));
    check_runs(&p, chunk, 41, delta, len);
    apply_whole(&p, delta, len, 41);
    if (n > 0) {
        apply_sub(&p, delta, 0, n, 41);
        apply_sub(&p, delta, n - 1, n, 41);
        for (int t = 0; t < 6; t++) {
            uint64_t a = rnd(n), b = a + 1 + rnd(n - a);
            apply_sub(&p, delta, a, b, 41);
        }
        if (n > chunk + 1)
            apply_sub(&p, delta, chunk - 1, chunk + 1, 41);
    }
    free(delta);
    free_pair(&p);
}

static void test_round_trips(void **state)
{
    (void)state;
    static const uint32_t permille[] = {0, 1, 20, 300, 1000};
    static const uint32_t sizes[] = {1, 2, 4};
    rng = 1;
    g_seen = 0;
    for (int steps = 0; steps < 2; steps++)
        for (size_t s = 0; s < 3; s++)
            for (size_t f = 0; f < 5; f++) {
                round_trip(3 * 4096 + 777, sizes[s], 4096, permille[f],
                           steps);
                round_trip(1001, sizes[s], 8, permille[f], steps);
                round_trip(8 * 64, sizes[s], 64, permille[f], steps);
            }
    /* offsets up to 65535 in chunks of the largest size; skips of up to
     * 4096 elements */
    round_trip(2 * 65536 + 5, 2, 65536, 300, 0);
    round_trip(2 * 65536 + 5, 1, 65536, 1, 1);
    round_trip(1, 4, 4096, 1000, 0);
    assert_int_equal(g_seen, 0x3f); /* every kind, 0 to 5 */
}

static void test_empty_shard(void **state)
{
    (void)state;
    pair_t p = make_pair(0, 2, 0, NULL, 0);
    size_t len = 0;
    unsigned char *delta = encode(&p, 4096, 3, &len);
    assert_int_equal(len, 80 + 16);
    apply_whole(&p, delta, len, 3);
    free(delta);
    free_pair(&p);
}

/* Refused with a message, and buf as it was. */
static void refused_whole(const pair_t *p, const unsigned char *delta,
                          size_t len, int64_t held, size_t dst_len)
{
    unsigned char *buf = malloc(dst_len + 1);
    memcpy(buf, p->old, dst_len);
    int64_t v = -7;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_apply(buf, dst_len, held, delta, len, &diag,
                                     &v),
                     RS_ERR_INPUT);
    assert_true(diag.msg[0] != '\0');
    assert_int_equal(v, -7);
    assert_memory_equal(buf, p->old, dst_len);
    free(buf);
}

static void test_flipped_bytes_refused(void **state)
{
    (void)state;
    rng = 2;
    static const uint32_t permille[] = {1, 20, 300, 1000};
    for (size_t f = 0; f < 4; f++) {
        pair_t p = make_pair(2 * 64 + 13, 2, permille[f], NULL, 0);
        size_t len = 0;
        unsigned char *delta = encode(&p, 64, 5, &len);
        unsigned char *bad = malloc(len);
        for (size_t i = 0; i < len; i++) {
            memcpy(bad, delta, len);
            bad[i] ^= (unsigned char)(1u << rnd(8));
            refused_whole(&p, bad, len, 5, p.n * p.es);
        }
        free(bad);
        free(delta);
        free_pair(&p);
    }
}

static void test_truncated_wrong_base_wrong_size(void **state)
{
    (void)state;
    rng = 3;
    pair_t p = make_pair(3000, 4, 20, NULL, 0);
    size_t len = 0;
    unsigned char *delta = encode(&p, 512, 9, &len);
    for (size_t cut = 0; cut < len; cut += cut < 100 ? 1 : 97) {
        unsigned char *t = malloc(cut + 1);
        memcpy(t, delta, cut);
        refused_whole(&p, t, cut, 9, p.n * p.es);
        free(t);
    }
    refused_whole(&p, delta, len, 8, p.n * p.es);  /* an older base */
    refused_whole(&p, delta, len, 10, p.n * p.es); /* a newer one */
    refused_whole(&p, delta, len, 9, p.n * p.es - 4);
    free(delta);
    free_pair(&p);
}

/* Re-signs a delta after an edit: every chunk check, the index digest and
 * the header check recomputed, so only the structure is wrong. */
static void resign(unsigned char *d)
{
    const uint64_t n = rs__le64(d + RS__DH_N);
    const uint32_t chunk = rs__le32(d + RS__DH_CHUNK);
    const uint64_t nchunks = (n + chunk - 1) / chunk;
    unsigned char *idx = d + 80, *pay = idx + 16 * (nchunks + 1);
    for (uint64_t c = 0; c < nchunks; c++) {
        const uint64_t word = rs__le64(idx + 16 * c);
        const uint64_t end = rs__le64(idx + 16 * (c + 1)) & RS__DE_OFFSET_MASK;
        const uint64_t off = word & RS__DE_OFFSET_MASK;
        const uint64_t size = end >= off ? end - off : 0;
        rs__put_le64(idx + 16 * c + 8,
                     rs__delta_chunk_check(c, word, end, pay + off,
                                           (size_t)size));
    }
    rs__put_le64(d + RS__DH_INDEX_DIGEST, rs_digest(idx, 16 * (nchunks + 1)));
    rs__put_le64(d + RS__DH_CHECK, rs_digest(d, RS__DH_CHECK));
}

/* A one-chunk delta of 40 elements of 2 bytes (chunk 64) with the given
 * changes, as the encoder writes it. */
static unsigned char *one_chunk(pair_t *p, const uint64_t *at, size_t nat,
                                size_t *len_p)
{
    *p = make_pair(40, 2, 0, at, nat);
    for (size_t i = 0; i < nat; i++) /* steps no signed byte holds, so the
                                      * steps kind ties and a list is kept */
        p->neu[at[i] * 2 + 1] ^= 0x80;
    return encode(p, 64, 1, len_p);
}

static void test_structure_refused(void **state)
{
    (void)state;
    rng = 4;
    pair_t p;
    size_t len;
    const uint64_t two[] = {3, 9};
    unsigned char *d = one_chunk(&p, two, 2, &len); /* a list: 3, 9 */
    unsigned char *pay = d + 80 + 32;
    assert_int_equal(d[80 + 6], RS__DELTA_LIST);
    /* an offset past the chunk's 40 elements */
    pay[2] = 40;
    resign(d);
    refused_whole(&p, d, len, 1, 80);
    /* offsets that do not rise */
    pay[2] = 3;
    resign(d);
    refused_whole(&p, d, len, 1, 80);
    pay[2] = 9;
    resign(d);
    apply_whole(&p, d, len, 1); /* restored: accepted again */
    /* an unknown kind, and a kind with a payload of another size (steps
     * may read a list's bytes as valid ops: tested on its own below) */
    for (unsigned kind = 0; kind < 8; kind++) {
        if (kind == RS__DELTA_LIST || kind == RS__DELTA_STEPS)
            continue;
        d[80 + 6] = (unsigned char)kind;
        resign(d);
        refused_whole(&p, d, len, 1, 80);
    }
    d[80 + 6] = RS__DELTA_LIST;
    /* the chunk's end (the closing entry) past the payload */
    rs__put_le64(d + 80 + 16, rs__le64(d + 80 + 16) + 2);
    resign(d);
    refused_whole(&p, d, len, 1, 80);
    free(d);
    free_pair(&p);

    /* a bitmap with a bit past the chunk's end */
    uint64_t many[12];
    for (int i = 0; i < 12; i++)
        many[i] = (uint64_t)i;
    pair_t q = make_pair(20, 1, 0, many, 12);
    size_t qlen = 0;
    unsigned char *b = encode(&q, 64, 1, &qlen);
    assert_int_equal(b[80 + 6], RS__DELTA_BITMAP);
    unsigned char *bits = b + 80 + 32;
    bits[2] |= 0x10; /* bit 20 */
    bits[0] &= 0xfe; /* and one fewer inside, so the count agrees */
    resign(b);
    refused_whole(&q, b, qlen, 1, 20);
    free(b);
    free_pair(&q);
}

/* A delta of n elements of es bytes (one chunk of `chunk`) whose changes
 * are the steps d[i] at elements at[i] (an escaped one when |d| > 127):
 * old zero-filled but for a pattern, new = old + d. */
static unsigned char *steps_delta(pair_t *p, uint64_t n, uint32_t es,
                                  uint32_t chunk, const uint64_t *at,
                                  const int *d, size_t nat, size_t *len_p)
{
    *p = make_pair(n, es, 0, NULL, 0);
    for (size_t i = 0; i < nat; i++)
        add_le(p->neu + at[i] * es, es, d[i]);
    return encode(p, chunk, 1, len_p);
}

/* x (len bytes) with byte at set to v and re-signed: refused whole, the
 * shard of dst_len bytes untouched. */
static void refused_edit(const pair_t *p, const unsigned char *x, size_t len,
                         size_t at, unsigned char v, size_t dst_len)
{
    unsigned char *bad = malloc(len);
    memcpy(bad, x, len);
    bad[at] = v;
    resign(bad);
    refused_whole(p, bad, len, 1, dst_len);
    free(bad);
}

static void test_steps_by_hand(void **state)
{
    (void)state;
    rng = 7;
    pair_t p;
    size_t len;
    /* E = 2, 40 elements: +1 at 3, -1 at 9, +5 at 10, +300 (escaped) at
     * 30: a list would take 16 bytes, a bitmap 13, a step map 14; steps
     * take 8: op byte (op << 6 | gap), exceptions inline */
    const uint64_t at[] = {3, 9, 10, 30};
    const int d[] = {1, -1, 5, 300};
    unsigned char *x = steps_delta(&p, 40, 2, 64, at, d, 4, &len);
    const unsigned char *pay = x + 80 + 32;
    assert_int_equal(x[80 + 6], RS__DELTA_STEPS);
    assert_int_equal(len, 80 + 32 + 8);
    const unsigned char want[] = {0x03, 0x45, 0x80, 0x05, 0x93, 0x80,
                                  p.neu[60], p.neu[61]};
    assert_memory_equal(pay, want, 8);
    apply_whole(&p, x, len, 1);
    /* a change past the chunk's 40 elements: refused */
    refused_edit(&p, x, len, 80 + 32 + 4, 0x80 | 63, 80);
    /* an exception of step 0 */
    refused_edit(&p, x, len, 80 + 32 + 3, 0, 80);
    /* an escape cut short: one byte less of payload, header and index
     * saying so */
    unsigned char *bad = malloc(len);
    memcpy(bad, x, len);
    rs__put_le64(bad + RS__DH_PAYLOAD, 7);
    rs__put_le64(bad + 80 + 16, 7);
    resign(bad);
    refused_whole(&p, bad, len - 1, 1, 80);
    free(bad);
    free(x);
    free_pair(&p);

    /* E = 2, one chunk of 8192: +1 at 0, +1 at 5000:
     * a skip of 64 x 64, one of 64 x 14, then the gap of 7 */
    const uint64_t at2[] = {0, 5000};
    const int d2[] = {1, 1};
    x = steps_delta(&p, 8192, 2, 8192, at2, d2, 2, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPS);
    const unsigned char want2[] = {0x00, 0xff, 0xcd, 0x07};
    assert_int_equal(len, 80 + 32 + 4);
    assert_memory_equal(x + 80 + 32, want2, 4);
    apply_whole(&p, x, len, 1);
    free(x);
    free_pair(&p);

    /* a skip at the end (nothing after it): refused */
    const uint64_t at3[] = {3, 9};
    const int d3[] = {1, -1};
    x = steps_delta(&p, 200, 2, 256, at3, d3, 2, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPS);
    assert_int_equal(x[80 + 32 + 1], 0x45);
    refused_edit(&p, x, len, 80 + 32 + 1, 0xc0, 400);
    free(x);
    free_pair(&p);

    /* E = 1, 38 elements, 0 to 35 changed: +1, but -1 at 4 and 7, +9 at 20:
     * a step map (10 bytes of codes, 1 exception byte) */
    uint64_t at4[36];
    int d4[36];
    for (int i = 0; i < 36; i++) {
        at4[i] = (uint64_t)i;
        d4[i] = i == 4 || i == 7 ? -1 : i == 20 ? 9 : 1;
    }
    x = steps_delta(&p, 38, 1, 64, at4, d4, 36, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPMAP);
    assert_int_equal(len, 80 + 32 + 11);
    /* codes 1 (+1), 2 (-1), 3 (exception), 0 (same), 2 bits each from the
     * low bits of byte 0 */
    const unsigned char want4[] = {0x55, 0x96, 0x55, 0x55, 0x55,
                                   0x57, 0x55, 0x55, 0x55, 0x00, 0x09};
    assert_memory_equal(x + 80 + 32, want4, 11);
    apply_whole(&p, x, len, 1);
    /* a code past the chunk's 38 elements */
    refused_edit(&p, x, len, 80 + 32 + 9, 0x10, 38);
    /* a code turned exception whose byte is missing */
    refused_edit(&p, x, len, 80 + 32 + 0, 0x57, 38);
    /* an exception of step 0 */
    refused_edit(&p, x, len, 80 + 32 + 10, 0, 38);
    free(x);
    free_pair(&p);
}

/* Flipping a byte of what a sub-range reader fetches: refused, untouched. */
/* Where the steps can no longer win: a chunk of len elements with k
 * changes takes at least k bytes of steps (plus the exceptions), its step
 * map ceil(len / 4) (plus the same), so up to k = ceil(len / 4) the steps
 * are measured (a tie goes to them), past it the map is built directly. */
static void test_dense_boundary(void **state)
{
    (void)state;
    rng = 11;
    pair_t p;
    size_t len;
    uint64_t at[19];
    int d[19];
    for (int i = 0; i < 17; i++) {
        at[i] = (uint64_t)i;
        d[i] = 1;
    }
    /* E = 2, 64 elements, 0 to 15 +1: steps 16 op bytes of gap 0, map
     * 16 bytes of codes (list 64, bitmap 40): a tie, the steps */
    unsigned char *x = steps_delta(&p, 64, 2, 64, at, d, 16, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPS);
    assert_int_equal(len, 80 + 32 + 16);
    for (int i = 0; i < 16; i++)
        assert_int_equal(x[80 + 32 + i], 0x00);
    apply_whole(&p, x, len, 1);
    free(x);
    free_pair(&p);
    /* 0 to 16: steps 17, the map 16: the map (codes 1 for 0..16) */
    x = steps_delta(&p, 64, 2, 64, at, d, 17, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPMAP);
    assert_int_equal(len, 80 + 32 + 16);
    unsigned char want[16] = {0x55, 0x55, 0x55, 0x55, 0x01};
    assert_memory_equal(x + 80 + 32, want, 16);
    apply_whole(&p, x, len, 1);
    free(x);
    free_pair(&p);
    /* and -1 at 40, +300 at 50 (escaped, in the second line): the map's
     * 16 bytes, then the escape and element 50's new bytes */
    at[17] = 40;
    d[17] = -1;
    at[18] = 50;
    d[18] = 300;
    x = steps_delta(&p, 64, 2, 64, at, d, 19, &len);
    assert_int_equal(x[80 + 6], RS__DELTA_STEPMAP);
    assert_int_equal(len, 80 + 32 + 19);
    want[10] = 0x02; /* element 40: -1 */
    want[12] = 0x30; /* element 50: an exception */
    assert_memory_equal(x + 80 + 32, want, 16);
    const unsigned char xs[] = {0x80, p.neu[100], p.neu[101]};
    assert_memory_equal(x + 80 + 32 + 16, xs, 3);
    apply_whole(&p, x, len, 1);
    apply_sub(&p, x, 45, 60, 1);
    free(x);
    free_pair(&p);
}

static void test_sub_range_damage_refused(void **state)
{
    (void)state;
    rng = 5;
    pair_t p = make_pair(10 * 64 + 3, 2, 20, NULL, 0);
    size_t len = 0;
    unsigned char *d = encode(&p, 64, 11, &len);
    rs__delta_hdr_t h;
    rs_diag_t diag = {0};
    assert_int_equal(rs__delta_parse_header(d, 80, &diag, &h), RS_OK);
    const uint64_t a = 100, b = 300;
    uint64_t first, count, ioff, ilen, poff, plen;
    assert_int_equal(rs__delta_index_span(&h, a, b, &diag, &first, &count,
                                          &ioff, &ilen), RS_OK);
    assert_int_equal(rs__delta_payload_span(&h, d + ioff, count, &diag, &poff,
                                            &plen), RS_OK);
    /* the bytes that matter: the header, the span's entries, the closing
     * entry's offset, the payload */
    size_t where[4096], nwhere = 0;
    for (size_t i = 0; i < 80; i++)
        where[nwhere++] = i;
    for (size_t i = 0; i < ilen - 16 + 6; i++)
        where[nwhere++] = ioff + i;
    for (size_t i = 0; i < plen; i++)
        where[nwhere++] = poff + i;
    unsigned char *bad = malloc(len);
    unsigned char *buf = malloc((b - a) * 2);
    for (size_t w = 0; w < nwhere; w++) {
        memcpy(bad, d, len);
        bad[where[w]] ^= (unsigned char)(1u << rnd(8));
        memcpy(buf, p.old + a * 2, (b - a) * 2);
        assert_int_equal(rs__delta_apply_range(buf, a, b, 11, bad, bad + ioff,
                                               first, count, bad + poff, plen,
                                               &diag),
                         RS_ERR_INPUT);
        assert_memory_equal(buf, p.old + a * 2, (b - a) * 2);
    }
    /* a span that is not the covering one, a wrong base, a short payload */
    memcpy(buf, p.old + a * 2, (b - a) * 2);
    assert_int_equal(rs__delta_apply_range(buf, a, b, 11, d, d + ioff - 16,
                                           first - 1, count + 1, d + poff,
                                           plen, &diag), RS_ERR_INPUT);
    assert_int_equal(rs__delta_apply_range(buf, a, b, 10, d, d + ioff, first,
                                           count, d + poff, plen, &diag),
                     RS_ERR_INPUT);
    assert_int_equal(rs__delta_apply_range(buf, a, b, 11, d, d + ioff, first,
                                           count, d + poff, plen - 1, &diag),
                     RS_ERR_INPUT);
    assert_memory_equal(buf, p.old + a * 2, (b - a) * 2);
    assert_int_equal(rs__delta_apply_range(buf, a, b, 11, d, d + ioff, first,
                                           count, d + poff, plen, &diag),
                     RS_OK);
    assert_memory_equal(buf, p.neu + a * 2, (b - a) * 2);
    free(bad);
    free(buf);
    free(d);
    free_pair(&p);
}

static void test_encoder_refusals(void **state)
{
    (void)state;
    unsigned char arena[64] = {0}, src[80] = {0}, out[1024];
    rs__delta_enc_t e;
    rs_diag_t diag = {0};
    size_t len = 0;
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 3, 64, 0, 1, out,
                                        &diag), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 4, 12, 0, 1, out,
                                        &diag), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 4, 65544, 0, 1, out,
                                        &diag), RS_ERR_INVALID_ARG);
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 4, 64, 2, 2, out,
                                        &diag), RS_ERR_INVALID_ARG);
    /* more than the shard: nothing written past it, and refused */
    unsigned char *exact = malloc(64);
    memset(exact, 0, 64);
    memset(src, 1, sizeof(src));
    assert_int_equal(rs__delta_enc_init(&e, exact, 16, 4, 64, 0, 1, out,
                                        &diag), RS_OK);
    rs__delta_enc_copy(&e, src, 40);
    rs__delta_enc_copy(&e, src, 40);
    rs__delta_enc_copy(&e, src, 4);
    assert_int_equal(rs__delta_enc_finish(&e, &diag, &len), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(diag.msg, "more"));
    free(exact);
    /* fewer, and a part of an element */
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 4, 64, 0, 1, out,
                                        &diag), RS_OK);
    rs__delta_enc_copy(&e, src, 8);
    assert_int_equal(rs__delta_enc_finish(&e, &diag, &len), RS_ERR_INVALID_ARG);
    assert_non_null(strstr(diag.msg, "fewer"));
    assert_int_equal(rs__delta_enc_init(&e, arena, 16, 4, 64, 0, 1, out,
                                        &diag), RS_OK);
    rs__delta_enc_copy(&e, src, 6);
    assert_int_equal(rs__delta_enc_finish(&e, &diag, &len), RS_ERR_INVALID_ARG);
    (void)arena;
}

/* Past its payload limit the encoder still copies, and gives no delta. */
static void test_limit(void **state)
{
    (void)state;
    rng = 6;
    pair_t p = make_pair(5000, 2, 300, NULL, 0);
    unsigned char *arena = malloc(p.n * 2);
    unsigned char *out = malloc(rs__delta_bound(p.n, 2, 256));
    static const uint64_t limits[] = {1, 1000, 5000 * 2};
    for (size_t l = 0; l < 3; l++) {
        memcpy(arena, p.old, p.n * 2);
        rs__delta_enc_t e;
        rs_diag_t diag = {0};
        assert_int_equal(rs__delta_enc_init(&e, arena, p.n, 2, 256, 0, 1, out,
                                            &diag), RS_OK);
        rs__delta_enc_limit(&e, limits[l]);
        for (uint64_t at = 0; at < p.n; at += 700)
            rs__delta_enc_copy(&e, p.neu + at * 2,
                               (p.n - at < 700 ? p.n - at : 700) * 2);
        size_t len = 99;
        assert_int_equal(rs__delta_enc_finish(&e, &diag, &len), RS_OK);
        assert_memory_equal(arena, p.neu, p.n * 2);
        if (l < 2) {
            assert_int_equal(len, 0);
        } else {
            assert_true(len > 0);
            apply_whole(&p, out, len, 0);
        }
    }
    free(arena);
    free(out);
    free_pair(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_empty_shard),
        cmocka_unit_test(test_flipped_bytes_refused),
        cmocka_unit_test(test_truncated_wrong_base_wrong_size),
        cmocka_unit_test(test_structure_refused),
        cmocka_unit_test(test_steps_by_hand),
        cmocka_unit_test(test_dense_boundary),
        cmocka_unit_test(test_sub_range_damage_refused),
        cmocka_unit_test(test_encoder_refusals),
        cmocka_unit_test(test_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
