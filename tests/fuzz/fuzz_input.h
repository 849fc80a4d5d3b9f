/* Turns fuzzer bytes into small numbers for the structured fuzz targets:
 * every read succeeds (zeros once the input runs out), so any input
 * decodes to something and mutations of a byte change one choice. */
#ifndef RS_FUZZ_INPUT_H
#define RS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct fz_in {
    const uint8_t *p;
    size_t n, off;
} fz_in_t;

static inline uint8_t fz_u8(fz_in_t *in)
{
    return in->off < in->n ? in->p[in->off++] : 0;
}

/* 0 .. n-1 (0 when n == 0). */
static inline int64_t fz_below(fz_in_t *in, int64_t n)
{
    return n > 0 ? (int64_t)(fz_u8(in) % (uint64_t)n) : 0;
}

/* A small signed value lo .. lo + 15. */
static inline int64_t fz_small(fz_in_t *in, int64_t lo)
{
    return lo + (int64_t)(fz_u8(in) & 15);
}

static inline uint64_t fz_u64(fz_in_t *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | fz_u8(in);
    return v;
}

/* Mostly small, sometimes hostile: an extreme value now and then so that
 * overflow checks are reached. */
static inline int64_t fz_dim(fz_in_t *in, int64_t lo, int64_t hi)
{
    uint8_t b = fz_u8(in);
    if (b == 0xff) {
        static const int64_t wild[] = {-1, INT64_MAX, INT64_MIN, (int64_t)1 << 40,
                                       (int64_t)1 << 62, -((int64_t)1 << 33)};
        return wild[fz_u8(in) % (sizeof(wild) / sizeof(wild[0]))];
    }
    return lo + (int64_t)(b % (uint64_t)(hi - lo + 1));
}

#endif
