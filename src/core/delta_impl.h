/* What the delta codec's files share: little-endian fields and the check
 * that binds a chunk's payload to its place (docs/delta.md). */
#ifndef RS_CORE_DELTA_IMPL_H
#define RS_CORE_DELTA_IMPL_H

#include <stdint.h>
#include <string.h>

#include "core/delta.h"

/* Header fields' offsets. */
#define RS__DH_ESIZE 16
#define RS__DH_CHUNK 20
#define RS__DH_N 24
#define RS__DH_BASE 32
#define RS__DH_VERSION 40
#define RS__DH_PAYLOAD 48
#define RS__DH_INDEX_DIGEST 56
#define RS__DH_RESERVED 64
#define RS__DH_CHECK 72

/* An entry's first word: the payload offset in the low 48 bits, the kind
 * above it; the top byte stays zero. */
#define RS__DE_OFFSET_MASK (((uint64_t)1 << 48) - 1)
#define RS__DE_KIND_SHIFT 48

static inline uint64_t rs__le64(const unsigned char *p)
{
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--)
        w = (w << 8) | p[i];
    return w;
}

static inline uint32_t rs__le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline void rs__put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

static inline void rs__put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Elements of chunk c of a shard of n elements. */
static inline uint32_t rs__delta_chunk_len(uint64_t n, uint32_t chunk,
                                           uint64_t c)
{
    const uint64_t start = c * chunk;
    return (uint32_t)(n - start < chunk ? n - start : chunk);
}

/* The relative kinds (docs/formats.md, "Deltas"). A steps byte is an op
 * in its top two bits and a gap in its low six; a step map gives each
 * element a 2-bit code. An exception is a signed byte step (-127 .. 127,
 * not 0), or RS__DELTA_ESCAPE and the element's E new bytes. */
#define RS__DS_PLUS 0u  /* op and code: new = old + 1 */
#define RS__DS_MINUS 1u /* new = old - 1 */
#define RS__DS_EXC 2u   /* an exception follows */
#define RS__DS_SKIP 3u  /* steps only: 64 (gap + 1) elements skipped */
#define RS__DS_GAP 64u  /* gaps 0 .. 63 fit an op byte */
#define RS__DM_PLUS 1u  /* a step map's codes (0: the element stayed) */
#define RS__DM_MINUS 2u
#define RS__DM_EXC 3u
#define RS__DELTA_ESCAPE 0x80u

/* The E-byte little-endian integer at p. */
static inline uint32_t rs__delta_load(const unsigned char *p, uint32_t es)
{
    switch (es) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return rs__le32(p);
    }
}

/* The E-byte integer at p gets + d, modulo 2^(8E): the format's step
 * arithmetic wraps, so any bytes held give defined bytes. */
static inline void rs__delta_add(unsigned char *p, uint32_t es, uint32_t d)
{
    const uint32_t v = rs__delta_load(p, es) + d;
    switch (es) {
    case 1: p[0] = (unsigned char)v; break;
    case 2: p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); break;
    default: rs__put_le32(p, v); break;
    }
}

/* rsd64 over chunk c's number, its entry's first word, its payload's end
 * and the payload itself: a chunk read alone (a sub-range) is checked
 * against its own place, kind and length, not only its bytes. */
uint64_t rs__delta_chunk_check(uint64_t c, uint64_t word, uint64_t end,
                               const unsigned char *payload, size_t len);

#endif
