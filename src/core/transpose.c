/* Tile transpose: fixed-size micro-blocks (8x8 bytes, 4x4 of 2 and 4 byte
 * elements, 4x4 of 8 byte words) moved through 64-bit registers, with the
 * lanes swapped by shifts and masks; ragged edges go element by element.
 * Portable C: the lane tricks assume little-endian words, so other byte
 * orders take the element loop throughout. */
#include <string.h>

#include "core/transpose.h"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&           \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TR_SWAR 1
#else
#define TR_SWAR 0
#endif

static inline uint64_t ld64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void st64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* Transposes the 2x2 matrix of `sh`-bit lanes formed by each pair of lanes
 * (k, k+1) of x and y, for every lane pair the mask selects: afterwards x
 * holds the even lanes of both and y the odd ones. Applied with halving lane
 * widths it transposes a whole square of lanes. */
static inline void swap_lanes(uint64_t *x, uint64_t *y, int sh, uint64_t m)
{
    const uint64_t a = *x, b = *y;
    *x = (a & m) | ((b & m) << sh);
    *y = ((a >> sh) & m) | (b & ~m);
}

#define M8 0x00ff00ff00ff00ffull
#define M16 0x0000ffff0000ffffull
#define M32 0x00000000ffffffffull

/* 8x8 bytes: eight rows of one word each. */
static inline void micro_1(unsigned char *d, size_t dld, const unsigned char *s,
                    size_t sld)
{
    uint64_t r[8];
    for (int i = 0; i < 8; i++)
        r[i] = ld64(s + i * sld);
    for (int i = 0; i < 8; i += 2)
        swap_lanes(&r[i], &r[i + 1], 8, M8);
    for (int i = 0; i < 8; i += 4) {
        swap_lanes(&r[i], &r[i + 2], 16, M16);
        swap_lanes(&r[i + 1], &r[i + 3], 16, M16);
    }
    for (int i = 0; i < 4; i++)
        swap_lanes(&r[i], &r[i + 4], 32, M32);
    for (int i = 0; i < 8; i++)
        st64(d + i * dld, r[i]);
}

/* 4x4 elements of 2 bytes: four rows of one word each. */
static inline void micro_2(unsigned char *d, size_t dld, const unsigned char *s,
                    size_t sld)
{
    uint64_t r0 = ld64(s), r1 = ld64(s + sld), r2 = ld64(s + 2 * sld),
             r3 = ld64(s + 3 * sld);
    swap_lanes(&r0, &r1, 16, M16);
    swap_lanes(&r2, &r3, 16, M16);
    swap_lanes(&r0, &r2, 32, M32);
    swap_lanes(&r1, &r3, 32, M32);
    st64(d, r0);
    st64(d + dld, r1);
    st64(d + 2 * dld, r2);
    st64(d + 3 * dld, r3);
}

/* 4x4 elements of 4 bytes: each row is two words; every 2x2 block of words
 * is transposed in place and the off-diagonal blocks trade places. */
static inline void micro_4(unsigned char *d, size_t dld, const unsigned char *s,
                    size_t sld)
{
    uint64_t a[4], b[4]; /* a: columns 0-1 of each row, b: columns 2-3 */
    for (int i = 0; i < 4; i++) {
        a[i] = ld64(s + i * sld);
        b[i] = ld64(s + i * sld + 8);
    }
    swap_lanes(&a[0], &a[1], 32, M32);
    swap_lanes(&a[2], &a[3], 32, M32);
    swap_lanes(&b[0], &b[1], 32, M32);
    swap_lanes(&b[2], &b[3], 32, M32);
    st64(d, a[0]);
    st64(d + 8, a[2]);
    st64(d + dld, a[1]);
    st64(d + dld + 8, a[3]);
    st64(d + 2 * dld, b[0]);
    st64(d + 2 * dld + 8, b[2]);
    st64(d + 3 * dld, b[1]);
    st64(d + 3 * dld + 8, b[3]);
}

/* 4x4 words: nothing to shuffle, only to load a block before storing it. */
static inline void micro_8(unsigned char *d, size_t dld, const unsigned char *s,
                    size_t sld)
{
    uint64_t r[4][4];
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 4; j++)
            r[i][j] = ld64(s + i * sld + j * 8);
    for (size_t j = 0; j < 4; j++)
        for (size_t i = 0; i < 4; i++)
            st64(d + j * dld + i * 8, r[i][j]);
}

int rs__transpose_ok(size_t elsize)
{
    return elsize == 1 || elsize == 2 || elsize == 4 || elsize == 8;
}

/* Element by element over rows [i0, i1) x columns [j0, j1). */
static void edge_loop(unsigned char *d, size_t dld, const unsigned char *s,
                      size_t sld, size_t es, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1)
{
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
            memcpy(d + (size_t)j * dld + (size_t)i * es,
                   s + (size_t)i * sld + (size_t)j * es, es);
}

/* One loop per element size, so the micro-block inlines into it; the ragged
 * right and bottom edges go element by element. */
#define TR_TILE(ES, EDGE)                                                      \
    static void tile_##ES(unsigned char *d, size_t dld,                       \
                          const unsigned char *s, size_t sld, int64_t rows,   \
                          int64_t cols)                                       \
    {                                                                         \
        const int64_t rfull = rows - rows % (EDGE);                           \
        const int64_t cfull = cols - cols % (EDGE);                           \
        for (int64_t i = 0; i < rfull; i += (EDGE))                           \
            for (int64_t j = 0; j < cfull; j += (EDGE))                       \
                micro_##ES(d + (size_t)j * dld + (size_t)i * (ES), dld,       \
                           s + (size_t)i * sld + (size_t)j * (ES), sld);      \
        edge_loop(d, dld, s, sld, (ES), 0, rfull, cfull, cols);               \
        edge_loop(d, dld, s, sld, (ES), rfull, rows, 0, cols);                \
    }

TR_TILE(1, 8)
TR_TILE(2, 4)
TR_TILE(4, 4)
TR_TILE(8, 4)

void rs__transpose_tile(void *dst, int64_t dst_ld, const void *src,
                        int64_t src_ld, int64_t rows, int64_t cols,
                        size_t elsize)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    const size_t dld = (size_t)dst_ld * elsize, sld = (size_t)src_ld * elsize;
    if (!TR_SWAR) {
        edge_loop(d, dld, s, sld, elsize, 0, rows, 0, cols);
        return;
    }
    switch (elsize) {
    case 1: tile_1(d, dld, s, sld, rows, cols); break;
    case 2: tile_2(d, dld, s, sld, rows, cols); break;
    case 4: tile_4(d, dld, s, sld, rows, cols); break;
    default: tile_8(d, dld, s, sld, rows, cols); break;
    }
}
