/* The delta's sizes, its header and where a receiver's reads fall in it
 * (docs/delta.md, "Byte layout"). */
#include <stdio.h>

#include "core/delta_impl.h"
#include "core/diag.h"
#include "reshard/digest.h"

uint64_t rs__delta_nchunks(uint64_t n, uint32_t chunk)
{
    return chunk == 0 ? 0 : n / chunk + (n % chunk != 0);
}

/* Element size, chunk and shard size a delta can describe. */
static int sizes_ok(uint64_t n, uint32_t esize, uint32_t chunk)
{
    return (esize == 1 || esize == 2 || esize == 4) && chunk >= 8 &&
           chunk <= RS__DELTA_MAX_CHUNK && chunk % 8 == 0 &&
           n <= RS__DELTA_MAX_PAYLOAD / esize;
}

size_t rs__delta_bound(uint64_t n, uint32_t esize, uint32_t chunk)
{
    if (!sizes_ok(n, esize, chunk))
        return 0;
    const uint64_t b = RS__DELTA_HEADER +
                       RS__DELTA_ENTRY * (rs__delta_nchunks(n, chunk) + 1) +
                       n * esize;
    return b > (uint64_t)SIZE_MAX ? 0 : (size_t)b;
}

uint64_t rs__delta_size(const rs__delta_hdr_t *h)
{
    return RS__DELTA_HEADER +
           RS__DELTA_ENTRY * (rs__delta_nchunks(h->n, h->chunk) + 1) +
           h->payload;
}

uint64_t rs__delta_chunk_check(uint64_t c, uint64_t word, uint64_t end,
                               const unsigned char *payload, size_t len)
{
    unsigned char place[24];
    rs__put_le64(place, c);
    rs__put_le64(place + 8, word);
    rs__put_le64(place + 16, end);
    rs_digest_t d;
    rs_digest_init(&d);
    rs_digest_update(&d, place, sizeof(place));
    rs_digest_update(&d, payload, len);
    return rs_digest_final(&d);
}

static rs_status_t bad(rs_diag_t *diag, const char *what)
{
    return rs__diag_set(diag, RS_ERR_INPUT, "delta header: %s", what);
}

rs_status_t rs__delta_parse_header(const void *buf, size_t len,
                                   rs_diag_t *diag, rs__delta_hdr_t *h)
{
    const unsigned char *p = buf;
    if (len < RS__DELTA_HEADER)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta header: %zu bytes, "
                            "a header takes %u", len, RS__DELTA_HEADER);
    if (memcmp(p, RS__DELTA_SCHEMA, 16) != 0)
        return bad(diag, "schema is not " RS__DELTA_SCHEMA);
    const uint64_t check = rs_digest(p, RS__DH_CHECK);
    if (rs__le64(p + RS__DH_CHECK) != check)
        return bad(diag, "its check does not match its bytes (damaged)");
    if (rs__le64(p + RS__DH_RESERVED) != 0)
        return bad(diag, "reserved field is not zero");
    rs__delta_hdr_t r;
    r.esize = rs__le32(p + RS__DH_ESIZE);
    r.chunk = rs__le32(p + RS__DH_CHUNK);
    r.n = rs__le64(p + RS__DH_N);
    r.base = (int64_t)rs__le64(p + RS__DH_BASE);
    r.version = (int64_t)rs__le64(p + RS__DH_VERSION);
    r.payload = rs__le64(p + RS__DH_PAYLOAD);
    r.index_digest = rs__le64(p + RS__DH_INDEX_DIGEST);
    if (!sizes_ok(r.n, r.esize, r.chunk))
        return rs__diag_set(diag, RS_ERR_INPUT, "delta header: element size "
                            "%u, chunk %u, %llu elements: not a valid shape "
                            "(sizes 1, 2 or 4; chunks of 8 .. %u elements, "
                            "a multiple of 8)", r.esize, r.chunk,
                            (unsigned long long)r.n, RS__DELTA_MAX_CHUNK);
    if (r.payload > r.n * r.esize)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta header: payload of "
                            "%llu bytes, more than the %llu of the shard",
                            (unsigned long long)r.payload,
                            (unsigned long long)(r.n * r.esize));
    if (r.base < 0 || r.version <= r.base)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta header: base version "
                            "%lld, new version %lld (want 0 <= base < new)",
                            (long long)r.base, (long long)r.version);
    *h = r;
    return RS_OK;
}

rs_status_t rs__delta_index_span(const rs__delta_hdr_t *h, uint64_t a,
                                 uint64_t b, rs_diag_t *diag,
                                 uint64_t *first_p, uint64_t *count_p,
                                 uint64_t *off_p, uint64_t *len_p)
{
    if (a >= b || b > h->n)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta: elements "
                            "[%llu, %llu) are not a range of the %llu of the "
                            "shard", (unsigned long long)a,
                            (unsigned long long)b, (unsigned long long)h->n);
    const uint64_t first = a / h->chunk, count = (b - 1) / h->chunk - first + 1;
    *first_p = first;
    *count_p = count;
    *off_p = RS__DELTA_HEADER + RS__DELTA_ENTRY * first;
    *len_p = RS__DELTA_ENTRY * (count + 1);
    return RS_OK;
}

rs_status_t rs__delta_payload_span(const rs__delta_hdr_t *h,
                                   const void *entries, uint64_t count,
                                   rs_diag_t *diag, uint64_t *off_p,
                                   uint64_t *len_p)
{
    const unsigned char *e = entries;
    const uint64_t lo = rs__le64(e) & RS__DE_OFFSET_MASK;
    const uint64_t hi = rs__le64(e + RS__DELTA_ENTRY * count) &
                        RS__DE_OFFSET_MASK;
    if (hi < lo || hi > h->payload)
        return rs__diag_set(diag, RS_ERR_INPUT, "delta index: payload span "
                            "[%llu, %llu) is not within the %llu bytes of "
                            "payload", (unsigned long long)lo,
                            (unsigned long long)hi,
                            (unsigned long long)h->payload);
    *off_p = RS__DELTA_HEADER +
             RS__DELTA_ENTRY * (rs__delta_nchunks(h->n, h->chunk) + 1) + lo;
    *len_p = hi - lo;
    return RS_OK;
}
