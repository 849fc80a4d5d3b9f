/* Fuzz target for the delta codec (docs/delta.md). The input chooses an
 * element size, a chunk, a shard of up to about a thousand elements, its old
 * bytes, which elements change and to what, and then edits to the encoded
 * delta: byte flips, a truncation, a wrong base, optionally re-signed
 * (every check and digest recomputed, so only the structure is wrong).
 * The encoding copy must leave the new bytes; the untouched delta must
 * patch the old bytes into the new ones, whole and over a sub-range; an
 * edited delta must be refused with a message and the buffer left as it
 * was, or, when accepted, give exactly what a correct patch gives (an edit
 * that re-signs an equivalent delta). Buffers are exactly sized, so ASan
 * catches a read or write past them. */
#include <stdlib.h>
#include <string.h>

#include "core/delta_impl.h"
#include "fuzz_input.h"
#include "reshard/digest.h"

static void resign(unsigned char *d, size_t len)
{
    const uint64_t n = rs__le64(d + RS__DH_N);
    const uint32_t chunk = rs__le32(d + RS__DH_CHUNK);
    const uint64_t nchunks = rs__delta_nchunks(n, chunk);
    const size_t pay = RS__DELTA_HEADER + RS__DELTA_ENTRY * (nchunks + 1);
    if (pay > len)
        return;
    unsigned char *idx = d + RS__DELTA_HEADER;
    for (uint64_t c = 0; c < nchunks; c++) {
        const uint64_t word = rs__le64(idx + 16 * c);
        const uint64_t end = rs__le64(idx + 16 * (c + 1)) & RS__DE_OFFSET_MASK;
        const uint64_t off = word & RS__DE_OFFSET_MASK;
        if (end < off || pay + end > len)
            continue;
        rs__put_le64(idx + 16 * c + 8,
                     rs__delta_chunk_check(c, word, end, d + pay + off,
                                           (size_t)(end - off)));
    }
    rs__put_le64(d + RS__DH_INDEX_DIGEST,
                 rs_digest(idx, pay - RS__DELTA_HEADER));
    rs__put_le64(d + RS__DH_CHECK, rs_digest(d, RS__DH_CHECK));
}

/* One element changed as an optimizer step changes one (the codec's
 * relative kinds): +1 or -1 as an integer of its es bytes (wrapping), a
 * step of a signed byte, or its top byte changed (an escaped exception). */
static void change_element(unsigned char *el, uint32_t es, unsigned how,
                           uint8_t v)
{
    switch (how) {
    case 0: rs__delta_add(el, es, 1); break;
    case 1: rs__delta_add(el, es, UINT32_MAX); break;
    case 2: rs__delta_add(el, es, (uint32_t)(int32_t)(int8_t)(v | 1)); break;
    default: el[es - 1] ^= (unsigned char)(v | 1); break;
    }
}

static void sub_range(fz_in_t *in, const unsigned char *d, uint64_t n,
                      uint32_t es, const unsigned char *old,
                      const unsigned char *neu)
{
    rs__delta_hdr_t h;
    uint64_t first, count, ioff, ilen, poff, plen;
    if (n == 0 ||
        rs__delta_parse_header(d, RS__DELTA_HEADER, NULL, &h) != RS_OK)
        abort();
    const uint64_t a = (uint64_t)fz_below(in, (int64_t)n);
    const uint64_t b = a + 1 + (uint64_t)fz_below(in, (int64_t)(n - a));
    if (rs__delta_index_span(&h, a, b, NULL, &first, &count, &ioff, &ilen) !=
            RS_OK ||
        rs__delta_payload_span(&h, d + ioff, count, NULL, &poff, &plen) !=
            RS_OK)
        abort();
    unsigned char *ents = malloc(ilen), *pay = malloc(plen + 1);
    unsigned char *buf = malloc((b - a) * es);
    memcpy(ents, d + ioff, ilen);
    memcpy(pay, d + poff, plen);
    memcpy(buf, old + a * es, (b - a) * es);
    rs_diag_t diag = {0};
    if (rs__delta_apply_range(buf, a, b, 1, d, ents, first, count, pay, plen,
                              &diag) != RS_OK ||
        memcmp(buf, neu + a * es, (b - a) * es) != 0)
        abort();
    free(ents);
    free(pay);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = {data, size, 0};
    static const uint32_t sizes[] = {1, 2, 4};
    const uint32_t es = sizes[fz_below(&in, 3)];
    const uint32_t chunk = 8 * (uint32_t)(1 + fz_below(&in, 64));
    const uint64_t n = (uint64_t)fz_below(&in, 256) * (1 + fz_below(&in, 4));
    const size_t bytes = (size_t)n * es;
    unsigned char *old = malloc(bytes + 1), *neu = malloc(bytes + 1);
    unsigned char *arena = malloc(bytes + 1);
    const uint8_t seed = fz_u8(&in), rate = fz_u8(&in);
    const int steps = (int)fz_below(&in, 2); /* optimizer-like changes */
    for (size_t i = 0; i < bytes; i++) {
        old[i] = (unsigned char)(seed + i * 37);
        neu[i] = old[i];
        if (!steps && (uint8_t)(i * 151 + seed) < rate)
            neu[i] ^= (unsigned char)(1 + fz_below(&in, 255));
    }
    for (uint64_t i = 0; steps && i < n; i++)
        if ((uint8_t)(i * 151 + seed) < rate) /* +-1, a byte's step, any */
            change_element(neu + i * es, es, (unsigned)fz_below(&in, 4),
                           fz_u8(&in));
    memcpy(arena, old, bytes);
    const size_t bound = rs__delta_bound(n, es, chunk);
    unsigned char *d = malloc(bound);
    size_t len = 0;
    rs_diag_t diag = {0};
    if (rs__delta_encode(arena, neu, n, es, chunk, 1, 2, d, &diag, &len) !=
            RS_OK ||
        memcmp(arena, neu, bytes) != 0)
        abort();
    int64_t v = 0;
    memcpy(arena, old, bytes);
    if (rs__delta_apply(arena, bytes, 1, d, len, &diag, &v) != RS_OK ||
        v != 2 || memcmp(arena, neu, bytes) != 0)
        abort();
    if (n > 0)
        sub_range(&in, d, n, es, old, neu);

    /* edits, then the verdict */
    unsigned char *orig = malloc(len + 1);
    memcpy(orig, d, len);
    const int flips = (int)fz_below(&in, 4);
    for (int f = 0; f < flips && len > 0; f++) {
        const size_t at = (size_t)fz_below(&in, 256) * len / 256;
        d[at] ^= (unsigned char)(1 + fz_below(&in, 255));
    }
    size_t elen = len;
    if (fz_below(&in, 8) == 0)
        elen = (size_t)fz_below(&in, 256) * len / 256;
    const int resigned = (int)fz_below(&in, 2);
    if (resigned)
        resign(d, elen);
    const int64_t held = fz_below(&in, 8) == 0 ? 2 : 1;
    const int edited = elen != len || memcmp(d, orig, len) != 0;
    memcpy(arena, old, bytes);
    diag.msg[0] = '\0';
    const rs_status_t st = rs__delta_apply(arena, bytes, held, d, elen, &diag,
                                           &v);
    if (st != RS_OK) {
        /* refused: a message, and the buffer as it was */
        if (diag.msg[0] == '\0' || memcmp(arena, old, bytes) != 0)
            abort();
    } else if (held != 1 || (edited && !resigned) ||
               (!edited && memcmp(arena, neu, bytes) != 0)) {
        /* a wrong base, or damage no check caught, or a wrong patch; a
         * re-signed edit may pass (its values are then what the receiver's
         * digest of the full new bytes refuses) */
        abort();
    }
    free(orig);
    free(old);
    free(neu);
    free(arena);
    free(d);
    return 0;
}
