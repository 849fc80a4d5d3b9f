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

/* rsd64 over chunk c's number, its entry's first word, its payload's end
 * and the payload itself: a chunk read alone (a sub-range) is checked
 * against its own place, kind and length, not only its bytes. */
uint64_t rs__delta_chunk_check(uint64_t c, uint64_t word, uint64_t end,
                               const unsigned char *payload, size_t len);

#endif
