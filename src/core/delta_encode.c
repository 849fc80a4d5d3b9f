/* The publisher's copy that produces a delta (docs/delta.md): the new
 * version's bytes are compared with the old ones in the arena a cache line
 * at a time, and only a line that differs is stored, its changed elements
 * noted from the registers that hold both. A line that did not change stays
 * clean, so the pass reads the two versions and writes only the lines that
 * changed, where a memcpy reads one and writes every line; the old bytes of
 * a changed line go to a chunk-sized scratch (in cache), for the relative
 * kinds. At the end of each chunk, while its bytes are still in cache, the
 * chunk is encoded the smallest way. */
#include <stdlib.h>
#if defined(__SSE2__) && !defined(RS_DELTA_PORTABLE)
#include <emmintrin.h>
#include <pthread.h>
#endif

#include "core/delta_impl.h"
#include "core/diag.h"
#include "reshard/digest.h"

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
/* p is opaque to the optimizer here: a loop storing through it stays a
 * loop (not a library call) */
#define OPAQUE(p) __asm__("" : "+r"(p))
#else
#define NOINLINE
#define OPAQUE(p) ((void)0)
#endif

#define BLOCK ((size_t)64) /* bytes compared per step: a cache line */
#define WORDS 8 /* 64-bit words in a line */

#if defined(__SSE2__) && !defined(RS_DELTA_PORTABLE)
/* Per byte value g: the positions of its set bits (padded to 8) and their
 * count, so that the changed elements of 8 at a time are appended with one
 * 16-byte store and no branch: at the change rates measured, whether an
 * element changed is a coin toss no branch predictor can follow. */
static uint16_t g_pos[256][8];
static uint8_t g_count[256];
static pthread_once_t g_pos_once = PTHREAD_ONCE_INIT;

static void pos_init(void)
{
    for (unsigned g = 0; g < 256; g++) {
        unsigned k = 0;
        for (unsigned b = 0; b < 8; b++)
            if (g & (1u << b))
                g_pos[g][k++] = (uint16_t)b;
        g_count[g] = (uint8_t)k;
    }
}
#endif

void rs__delta_enc_abandon(rs__delta_enc_t *e)
{
    free(e->changed);
    free(e->old);
    free(e->ops);
    free(e->bits);
    e->changed = NULL;
    e->old = NULL;
    e->ops = NULL;
    e->bits = NULL;
}

/* The most bytes a chunk's steps encoding takes: per element an op byte
 * and an escaped exception, and the skips before them (one per 64
 * elements at most). */
static size_t steps_room(uint32_t chunk, uint32_t esize)
{
    return (size_t)chunk * (2 + esize) + chunk / RS__DS_GAP + 8;
}

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
#if defined(__SSE2__) && !defined(RS_DELTA_PORTABLE)
    pthread_once(&g_pos_once, pos_init);
#endif
    /* 8 entries of room: changes are appended 8 positions at a time */
    e->changed = malloc(sizeof(*e->changed) * (chunk + 8));
    /* zeroed: a dense chunk's map loads the old bytes of whole lines,
     * those of lines never saved too (their codes are masked off) */
    e->old = calloc(chunk, esize);
    e->ops = malloc(steps_room(chunk, esize));
    e->bits = calloc(chunk / 64 + 2, sizeof(*e->bits));
    e->limit = UINT64_MAX;
    e->eshift = esize == 4 ? 2 : esize == 2 ? 1 : 0;
    if (e->changed == NULL || e->old == NULL || e->ops == NULL ||
        e->bits == NULL) {
        rs__delta_enc_abandon(e);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "delta: out of memory "
                            "for a chunk of %u elements", chunk);
    }
    e->dst = dst;
    e->out = out;
    e->n = n;
    e->esize = esize;
    e->chunk = chunk;
    e->base = base;
    e->version = version;
    return RS_OK;
}

void rs__delta_enc_limit(rs__delta_enc_t *e, uint64_t max_payload)
{
    e->limit = max_payload == 0 ? 1 : max_payload;
}

/* One element of 1, 2 or 4 bytes, copied with a fixed-size move. */
static inline void copy_elem(unsigned char *d, const unsigned char *s,
                             uint32_t es)
{
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    default: memcpy(d, s, 4); break;
    }
}

/* Marks the changed elements el + i (bits i of m) in the chunk's bitmap
 * of changes, which a dense chunk's step map reads (a line's mask at
 * once, where the change list would take a step per change). */
static inline void mark(uint64_t *bits, uint32_t el, uint64_t m)
{
    const unsigned sh = el % 64;
    bits[el / 64] |= m << sh;
    if (sh != 0)
        bits[el / 64 + 1] |= m >> (64 - sh);
}

/* The elements past the last whole line, one at a time; old (the
 * scratch at chunk offset at) keeps the old bytes of those that changed. */
static uint32_t scan_tail(uint16_t *list, uint64_t *bits, uint32_t k,
                          unsigned char *dst, unsigned char *old,
                          const unsigned char *src, size_t i, size_t nbytes,
                          uint32_t at, unsigned eshift)
{
    const size_t es = (size_t)1 << eshift;
    for (; i < nbytes; i += es) {
        if (memcmp(dst + i, src + i, es) != 0) {
            list[k++] = (uint16_t)(at + (i >> eshift));
            mark(bits, at + (uint32_t)(i >> eshift), 1);
            copy_elem(old + i, dst + i, (uint32_t)es);
            copy_elem(dst + i, src + i, (uint32_t)es);
        }
    }
    return k;
}

/* The scratch of old bytes at chunk offset at. */
static inline unsigned char *old_at(const rs__delta_enc_t *e, uint32_t at)
{
    return e->old + ((size_t)at << e->eshift);
}

#if defined(__SSE2__) && !defined(RS_DELTA_PORTABLE)
/* Bit i set when element i of the 64-byte lines a and b differs. */
static inline uint64_t line_changed(const unsigned char *a,
                                    const unsigned char *b, unsigned eshift)
{
    __m128i x[4], y[4];
    for (size_t q = 0; q < 4; q++) {
        x[q] = _mm_loadu_si128((const void *)(a + 16 * q));
        y[q] = _mm_loadu_si128((const void *)(b + 16 * q));
    }
    uint64_t same = 0;
    if (eshift == 0) {
        for (size_t q = 0; q < 4; q++)
            same |= (uint64_t)(uint16_t)_mm_movemask_epi8(
                        _mm_cmpeq_epi8(x[q], y[q])) << (16 * q);
        return ~same;
    }
    if (eshift == 1) {
        for (size_t q = 0; q < 2; q++)
            same |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_packs_epi16(
                        _mm_cmpeq_epi16(x[2 * q], y[2 * q]),
                        _mm_cmpeq_epi16(x[2 * q + 1], y[2 * q + 1])))
                    << (16 * q);
        return ~same & 0xffffffffull;
    }
    for (size_t q = 0; q < 4; q++)
        same |= (uint64_t)_mm_movemask_ps(_mm_castsi128_ps(
                    _mm_cmpeq_epi32(x[q], y[q]))) << (4 * q);
    return ~same & 0xffffull;
}

/* Appends chunk offsets at + i for the set bits i of m (64 >> eshift of
 * them); list has 8 entries of room past any count. */
static inline uint32_t append(uint16_t *list, uint32_t k, uint64_t m,
                              uint32_t at, unsigned eshift)
{
    for (unsigned g = 0; g < (64u >> eshift); g += 8) {
        const unsigned byte = (unsigned)(m >> g) & 0xff;
        const __m128i pos = _mm_add_epi16(
            _mm_loadu_si128((const void *)g_pos[byte]),
            _mm_set1_epi16((short)(uint16_t)(at + g)));
        _mm_storeu_si128((void *)(list + k), pos);
        k += g_count[byte];
    }
    return k;
}

#define GROUP ((size_t)4) /* lines looked at before one branch */

/* dst = src over nbytes within one chunk, starting at chunk offset at;
 * the offsets of elements that differed are appended to e->changed.
 * Four lines at a time, for one branch where none changed; then only the
 * lines that changed are stored, so the others stay clean (at 2 % of
 * 2-byte elements changed, half of the lines but nearly every group of
 * four has a change), and their changes appended without a branch. */
static void scan_copy_sse2(rs__delta_enc_t *e, unsigned char *dst,
                           const unsigned char *src, size_t nbytes,
                           uint32_t at)
{
    const unsigned eshift = e->eshift;
    uint16_t *list = e->changed;
    unsigned char *old = old_at(e, at);
    uint32_t k = e->nchanged;
    size_t i = 0;
    for (; i + GROUP * BLOCK <= nbytes; i += GROUP * BLOCK) {
        uint64_t m[GROUP], any = 0;
        for (size_t l = 0; l < GROUP; l++) {
            m[l] = line_changed(src + i + l * BLOCK, dst + i + l * BLOCK,
                                eshift);
            any |= m[l];
        }
        if (any == 0)
            continue; /* the common case at low rates: four clean lines */
        for (size_t l = 0; l < GROUP; l++) {
            if (m[l] == 0)
                continue;
            memcpy(old + i + l * BLOCK, dst + i + l * BLOCK, BLOCK);
            memcpy(dst + i + l * BLOCK, src + i + l * BLOCK, BLOCK);
            const uint32_t el = at + (uint32_t)((i + l * BLOCK) >> eshift);
            k = append(list, k, m[l], el, eshift);
            mark(e->bits, el, m[l]);
        }
    }
    for (; i + BLOCK <= nbytes; i += BLOCK) {
        const uint64_t m = line_changed(src + i, dst + i, eshift);
        if (m == 0)
            continue;
        memcpy(old + i, dst + i, BLOCK);
        memcpy(dst + i, src + i, BLOCK);
        k = append(list, k, m, at + (uint32_t)(i >> eshift), eshift);
        mark(e->bits, at + (uint32_t)(i >> eshift), m);
    }
    e->nchanged =
        scan_tail(list, e->bits, k, dst, old, src, i, nbytes, at, eshift);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "core/simd.h"
#define DELTA_AVX2 1
#define TGT_AVX2 __attribute__((target("avx2,popcnt,bmi")))
#define PREFETCH 1024 /* bytes ahead: a few groups, both versions */

/* Bit i set when element i of the line whose two halves are x0, x1
 * differs from y0, y1; for 2-byte elements the bytes of the mask come in
 * the order the in-lane pack leaves them (elements 0-7, 16-23, 8-15,
 * 24-31), put right by line_order only for lines that changed. */
TGT_AVX2 static inline uint64_t line_mask_avx2(__m256i x0, __m256i x1,
                                               __m256i y0, __m256i y1,
                                               unsigned eshift)
{
    if (eshift == 0)
        return ~((uint64_t)(uint32_t)_mm256_movemask_epi8(
                     _mm256_cmpeq_epi8(x0, y0)) |
                 (uint64_t)(uint32_t)_mm256_movemask_epi8(
                     _mm256_cmpeq_epi8(x1, y1)) << 32);
    if (eshift == 1)
        return ~(uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_packs_epi16(
                   _mm256_cmpeq_epi16(x0, y0), _mm256_cmpeq_epi16(x1, y1))) &
               0xffffffffull;
    return ~((uint64_t)(uint32_t)_mm256_movemask_ps(
                 _mm256_castsi256_ps(_mm256_cmpeq_epi32(x0, y0))) |
             (uint64_t)(uint32_t)_mm256_movemask_ps(
                 _mm256_castsi256_ps(_mm256_cmpeq_epi32(x1, y1))) << 8) &
           0xffffull;
}

static inline uint64_t line_order(uint64_t m, unsigned eshift)
{
    if (eshift != 1)
        return m;
    return (m & 0xff0000ffull) | (m >> 8 & 0x0000ff00ull) |
           (m << 8 & 0x00ff0000ull);
}

/* Appends chunk offsets at + i for the set bits i of m (a changed line):
 * at the rates measured a changed line holds one or two changes (at 2 % of
 * 2-byte elements, 95 % of them), which are written without a branch
 * (tzcnt of nothing is 64: an entry the next append overwrites) where the
 * table of append() takes a step per 8 elements; denser lines take the
 * table. list has 8 entries of room past any count. */
TGT_AVX2 static inline uint32_t append_few(uint16_t *list, uint32_t k,
                                           uint64_t m, uint32_t at,
                                           unsigned eshift)
{
    const uint32_t n = (uint32_t)_mm_popcnt_u64(m);
    if (n > 2)
        return append(list, k, m, at, eshift);
    list[k] = (uint16_t)(at + (uint32_t)_tzcnt_u64(m));
    list[k + 1] = (uint16_t)(at + (uint32_t)_tzcnt_u64(_blsr_u64(m)));
    return k + n;
}

/* line when m is not 0, else sink, without a branch. */
static inline unsigned char *sink_or(unsigned char *line, unsigned char *sink,
                                     uint64_t m)
{
    const uintptr_t take = (uintptr_t)0 - (uintptr_t)(m != 0);
    return (unsigned char *)(((uintptr_t)line & take) |
                             ((uintptr_t)sink & ~take));
}

/* The AVX2 scan: as scan_copy_sse2, with each group's four lines held in
 * registers, their differences tested at once (one xor per half line and
 * one test), masks formed only for groups that changed, the changed lines
 * stored from the registers, and both versions prefetched a few groups
 * ahead (two streams of reads). eshift is a constant in each caller, so
 * every element size gets its own loop. */
TGT_AVX2 static inline __attribute__((always_inline)) void
scan_avx2(rs__delta_enc_t *e, unsigned char *dst, const unsigned char *src,
          size_t nbytes, uint32_t at, unsigned eshift)
{
    uint16_t *list = e->changed;
    unsigned char *old = old_at(e, at);
    uint32_t k = e->nchanged;
    _Alignas(64) unsigned char sink[BLOCK];
    size_t i = 0;
    for (; i + GROUP * BLOCK <= nbytes; i += GROUP * BLOCK) {
        __m256i x[2 * GROUP], y[2 * GROUP], diff = _mm256_setzero_si256();
        /* unrolled, so that the eight halves stay in registers */
#pragma GCC unroll 4
        for (size_t h = 0; h < GROUP * BLOCK; h += BLOCK) {
            _mm_prefetch((const char *)(src + i + PREFETCH + h), _MM_HINT_T0);
            _mm_prefetch((const char *)(dst + i + PREFETCH + h), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (size_t h = 0; h < 2 * GROUP; h++) {
            x[h] = _mm256_loadu_si256((const void *)(src + i + 32 * h));
            y[h] = _mm256_loadu_si256((const void *)(dst + i + 32 * h));
            diff = _mm256_or_si256(diff, _mm256_xor_si256(x[h], y[h]));
        }
        if (_mm256_testz_si256(diff, diff))
            continue; /* four clean lines */
        /* Whether a line changed is a coin toss at the rates measured (at
         * 2 % of 2-byte elements, half the lines), so the lines of a group
         * that changed are handled without a branch: the old bytes always
         * go to the scratch (an unchanged line's equal the new ones, and
         * its codes are masked off wherever the scratch is read), the new
         * ones to the arena when the line changed and otherwise to a sink
         * line in cache, chosen by a conditional move, so clean lines stay
         * clean; a line with no change appends nothing and marks nothing. */
#pragma GCC unroll 4
        for (size_t l = 0; l < GROUP; l++) {
            const uint64_t m = line_mask_avx2(x[2 * l], x[2 * l + 1],
                                              y[2 * l], y[2 * l + 1], eshift);
            unsigned char *line = dst + i + l * BLOCK;
            unsigned char *d = sink_or(line, sink, m);
            unsigned char *o = old + i + l * BLOCK;
            _mm256_storeu_si256((void *)o, y[2 * l]);
            _mm256_storeu_si256((void *)(o + 32), y[2 * l + 1]);
            _mm256_storeu_si256((void *)d, x[2 * l]);
            _mm256_storeu_si256((void *)(d + 32), x[2 * l + 1]);
            const uint64_t mo = line_order(m, eshift);
            const uint32_t el = at + (uint32_t)((i + l * BLOCK) >> eshift);
            k = append_few(list, k, mo, el, eshift);
            mark(e->bits, el, mo);
        }
    }
    for (; i + BLOCK <= nbytes; i += BLOCK) {
        const __m256i x0 = _mm256_loadu_si256((const void *)(src + i));
        const __m256i x1 = _mm256_loadu_si256((const void *)(src + i + 32));
        const __m256i y0 = _mm256_loadu_si256((const void *)(dst + i));
        const __m256i y1 = _mm256_loadu_si256((const void *)(dst + i + 32));
        const uint64_t m = line_mask_avx2(x0, x1, y0, y1, eshift);
        if (m == 0)
            continue;
        _mm256_storeu_si256((void *)(old + i), y0);
        _mm256_storeu_si256((void *)(old + i + 32), y1);
        _mm256_storeu_si256((void *)(dst + i), x0);
        _mm256_storeu_si256((void *)(dst + i + 32), x1);
        const uint64_t mo = line_order(m, eshift);
        k = append_few(list, k, mo, at + (uint32_t)(i >> eshift), eshift);
        mark(e->bits, at + (uint32_t)(i >> eshift), mo);
    }
    e->nchanged =
        scan_tail(list, e->bits, k, dst, old, src, i, nbytes, at, eshift);
}

TGT_AVX2 static void scan_avx2_1(rs__delta_enc_t *e, unsigned char *dst,
                                 const unsigned char *src, size_t nbytes,
                                 uint32_t at)
{
    scan_avx2(e, dst, src, nbytes, at, 0);
}

TGT_AVX2 static void scan_avx2_2(rs__delta_enc_t *e, unsigned char *dst,
                                 const unsigned char *src, size_t nbytes,
                                 uint32_t at)
{
    scan_avx2(e, dst, src, nbytes, at, 1);
}

TGT_AVX2 static void scan_avx2_4(rs__delta_enc_t *e, unsigned char *dst,
                                 const unsigned char *src, size_t nbytes,
                                 uint32_t at)
{
    scan_avx2(e, dst, src, nbytes, at, 2);
}

/* AVX2 and the bit instructions its appends use (every AVX2 machine has
 * them; checked all the same), at the level core/simd.h allows. */
static int use_avx2(void)
{
    return rs__simd_active() >= RS__SIMD_AVX2 &&
           __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi");
}
#endif

/* The best scan the CPU runs (RESHARD_SIMD may lower it). */
static void scan_copy(rs__delta_enc_t *e, unsigned char *dst,
                      const unsigned char *src, size_t nbytes, uint32_t at)
{
#ifdef DELTA_AVX2
    if (use_avx2()) {
        if (e->eshift == 0)
            scan_avx2_1(e, dst, src, nbytes, at);
        else if (e->eshift == 1)
            scan_avx2_2(e, dst, src, nbytes, at);
        else
            scan_avx2_4(e, dst, src, nbytes, at);
        return;
    }
#endif
    scan_copy_sse2(e, dst, src, nbytes, at);
}
#else
/* Bit j set when byte j of the two 64-byte lines differs, from 64-bit
 * words. */
static inline uint64_t line_diff(const unsigned char *a, const unsigned char *b)
{
    uint64_t diff = 0;
    for (int w = 0; w < WORDS; w++) {
        uint64_t x = rs__le64(a + 8 * w) ^ rs__le64(b + 8 * w);
        /* each byte's low bit: whether the byte is nonzero; then the eight
         * low bits gathered into the top byte */
        x |= x >> 4;
        x |= x >> 2;
        x |= x >> 1;
        x &= 0x0101010101010101ull;
        diff |= ((x * 0x0102040810204080ull) >> 56) << (8 * w);
    }
    return diff;
}

/* From a line's byte mask to one bit per element, at its first byte. */
static inline uint64_t element_bits(uint64_t d, unsigned eshift)
{
    if (eshift == 0)
        return d;
    if (eshift == 1)
        return (d | d >> 1) & 0x5555555555555555ull;
    d |= d >> 1;
    return (d | d >> 2) & 0x1111111111111111ull;
}

/* dst = src over nbytes within one chunk, starting at chunk offset at;
 * the offsets of elements that differed are appended to e->changed. */
static void scan_copy(rs__delta_enc_t *e, unsigned char *dst,
                      const unsigned char *src, size_t nbytes, uint32_t at)
{
    const unsigned eshift = e->eshift;
    uint16_t *list = e->changed;
    unsigned char *old = old_at(e, at);
    uint32_t k = e->nchanged;
    size_t i = 0;
    for (; i + BLOCK <= nbytes; i += BLOCK) {
        const uint64_t diff = line_diff(src + i, dst + i);
        if (diff == 0)
            continue; /* the common case: the line stays as it is, clean */
        memcpy(old + i, dst + i, BLOCK);
        memcpy(dst + i, src + i, BLOCK);
        const uint32_t el = at + (uint32_t)(i >> eshift);
        for (uint64_t b = element_bits(diff, eshift); b != 0; b &= b - 1) {
            const uint32_t o = el + ((unsigned)__builtin_ctzll(b) >> eshift);
            list[k++] = (uint16_t)o;
            mark(e->bits, o, 1);
        }
    }
    e->nchanged =
        scan_tail(list, e->bits, k, dst, old, src, i, nbytes, at, eshift);
}
#endif

/* The step of an element, new - old as an integer of es bytes modulo
 * 2^(8 es) (mask = 2^(8 es) - 1), and its op: +1, -1 or an exception. */
static inline uint32_t step_of(const unsigned char *old,
                               const unsigned char *cb, uint32_t o,
                               uint32_t es, uint32_t mask)
{
    return (rs__delta_load(cb + (size_t)o * es, es) -
            rs__delta_load(old + (size_t)o * es, es)) & mask;
}

/* Whether a change is +1, -1 or an exception (one in ten) is a coin toss
 * no branch predictor follows, so the op is arithmetic: t = d + 1 is 2 for
 * +1 and 0 for -1 (1 cannot occur: d is not 0), above 2 for an
 * exception. */
static inline unsigned op_of(uint32_t d, uint32_t mask)
{
    /* by t, capped at 3: -1, (1 cannot occur), +1, an exception */
    static const unsigned char ops[4] = {RS__DS_MINUS, RS__DS_EXC,
                                         RS__DS_PLUS, RS__DS_EXC};
    const uint32_t t = (d + 1) & mask;
    return ops[t < 3 ? t : 3];
}

/* Whether a step d needs the escape (beyond a signed byte); only an
 * exception's can: +1 and -1 give 128 and 126 here. */
static inline int escaped(uint32_t d, uint32_t mask)
{
    return ((d + 127) & mask) > 254;
}

/* The chunk's steps encoding into e->ops (its k changes, new bytes at cb,
 * old ones in e->old): a byte per change, skips before long gaps, the
 * exceptions inline. Returns its bytes; *xbytes_p = the exceptions' bytes
 * (what a step map adds to its codes). es is a constant wherever this is
 * inlined. */
static inline uint64_t steps_encode_es(const rs__delta_enc_t *e,
                                       const unsigned char *cb, uint32_t k,
                                       uint64_t *xbytes_p, uint32_t es)
{
    const uint32_t mask = es == 4 ? UINT32_MAX : (1u << (8 * es)) - 1;
    /* locals the stores through q cannot alias */
    const uint16_t *restrict changed = e->changed;
    const unsigned char *restrict old = e->old;
    unsigned char *restrict q = e->ops;
    uint64_t xbytes = 0;
    uint32_t p = 0; /* the first element the next op can name */
    for (uint32_t i = 0; i < k; i++) {
        const uint32_t o = changed[i];
        const uint32_t d = step_of(old, cb, o, es, mask);
        uint32_t gap = o - p;
        /* skip bytes of 64 to 4096 elements until one byte is left to
         * skip: a gap of 64 .. 4159 takes one, written without a branch
         * (a quarter of the gaps at 2 % changed, a coin toss again) */
        while (gap >= RS__DS_GAP * (RS__DS_GAP + 1)) {
            *q++ = (unsigned char)(RS__DS_SKIP << 6 | (RS__DS_GAP - 1));
            gap -= RS__DS_GAP * RS__DS_GAP;
            /* kept a loop: as a library memset call it would make the
             * walk keep its pointers on the stack */
            OPAQUE(q);
        }
        const uint32_t t = gap / RS__DS_GAP; /* 0 .. 64 */
        *q = (unsigned char)(RS__DS_SKIP << 6 | ((t - 1) & (RS__DS_GAP - 1)));
        q += t != 0; /* left as scratch the op overwrites when t is 0 */
        gap -= RS__DS_GAP * t;
        const unsigned op = op_of(d, mask);
        q[0] = (unsigned char)(op << 6 | gap);
        /* an exception's signed byte is the step's low byte; it is kept
         * (q moves past it) only for an exception, without a branch (one
         * change in ten); a step beyond a signed byte (one in a thousand)
         * is escaped */
        q[1] = (unsigned char)d;
        const unsigned exc = op == RS__DS_EXC;
        q += 1 + exc;
        xbytes += exc;
        if (escaped(d, mask)) {
            q[-1] = RS__DELTA_ESCAPE;
            memcpy(q, cb + (size_t)o * es, es);
            q += es;
            xbytes += es;
        }
        p = o + 1;
    }
    *xbytes_p = xbytes;
    return (uint64_t)(q - e->ops);
}

/* Not inlined: in its own frame the walk's locals stay in registers. */
static NOINLINE uint64_t
steps_encode(const rs__delta_enc_t *e, const unsigned char *cb, uint32_t k,
             uint64_t *xbytes_p)
{
    switch (e->esize) {
    case 1: return steps_encode_es(e, cb, k, xbytes_p, 1);
    case 2: return steps_encode_es(e, cb, k, xbytes_p, 2);
    default: return steps_encode_es(e, cb, k, xbytes_p, 4);
    }
}

/* Stores the codes of elements 32 word .. 32 word + 31 into the map's
 * first nb bytes at p. */
static inline void put_codes(unsigned char *p, size_t nb, uint32_t word,
                             uint64_t codes)
{
    const size_t at = 8 * (size_t)word;
    if (at + 8 <= nb) {
        rs__put_le64(p + at, codes);
        return;
    }
    for (size_t j = at; j < nb; j++, codes >>= 8)
        p[j] = (unsigned char)codes;
}

/* The chunk's step map at p, from its steps encoding (e->ops, size
 * bytes, as steps_encode left it): 2 bits per element (the op + 1; 0 for
 * an element that stayed), then the exceptions in order, the same bytes
 * as in the steps. */
static void map_encode(const rs__delta_enc_t *e, unsigned char *p,
                       uint32_t len, uint64_t size)
{
    const unsigned char *restrict ops = e->ops;
    const size_t nb = ((size_t)len + 3) / 4;
    unsigned char *restrict x = p + nb;
    memset(p, 0, nb);
    /* the codes of 32 elements gather in a register and are stored once:
     * an OR into memory per element would wait on the store before it */
    uint64_t acc = 0;
    uint32_t word = 0, at = 0;
    for (uint64_t i = 0; i < size;) {
        const unsigned op = ops[i] >> 6, g = ops[i] & (RS__DS_GAP - 1);
        i++;
        if (op == RS__DS_SKIP) {
            at += RS__DS_GAP * (g + 1);
            continue;
        }
        at += g;
        if (at / 32 != word) {
            put_codes(p, nb, word, acc);
            acc = 0;
            word = at / 32;
        }
        acc |= (uint64_t)(op + 1) << (2 * (at % 32));
        at++;
        if (op == RS__DS_EXC) { /* a signed byte, or the escape and E */
            const size_t n = ops[i] == RS__DELTA_ESCAPE ? 1 + e->esize : 1;
            memcpy(x, ops + i, n);
            x += n;
            i += n;
        }
    }
    put_codes(p, nb, word, acc);
}

/* The chunk's step map built straight from its changes (no steps walk)
 * into e->ops: 2 bits per element, then the exceptions in order, the
 * bytes map_encode makes from the steps. For a dense chunk, where the
 * steps cannot be the smallest kind (see choose), this is the one pass
 * over its changes. Returns its bytes. es is a constant wherever this is
 * inlined. */
static inline uint64_t map_direct_es(const rs__delta_enc_t *e,
                                     const unsigned char *cb, uint32_t len,
                                     uint32_t k, uint32_t es)
{
    const uint32_t mask = es == 4 ? UINT32_MAX : (1u << (8 * es)) - 1;
    const uint16_t *restrict changed = e->changed;
    const unsigned char *restrict old = e->old;
    unsigned char *restrict p = e->ops;
    const size_t nb = ((size_t)len + 3) / 4;
    unsigned char *restrict x = p + nb;
    memset(p, 0, nb);
    uint64_t acc = 0;
    uint32_t word = 0;
    for (uint32_t i = 0; i < k; i++) {
        const uint32_t o = changed[i];
        const uint32_t d = step_of(old, cb, o, es, mask);
        if (o / 32 != word) { /* every 3rd change or so when dense */
            put_codes(p, nb, word, acc);
            acc = 0;
            word = o / 32;
        }
        const unsigned op = op_of(d, mask);
        acc |= (uint64_t)(op + 1) << (2 * (o % 32));
        /* the exception's signed byte, kept without a branch (x moves
         * past it only for an exception); the rare escape is a branch */
        const unsigned exc = op == RS__DS_EXC;
        x[0] = (unsigned char)d;
        x += exc;
        if (escaped(d, mask)) {
            x[-1] = RS__DELTA_ESCAPE;
            memcpy(x, cb + (size_t)o * es, es);
            x += es;
        }
    }
    put_codes(p, nb, word, acc);
    return (uint64_t)(x - p);
}

#ifdef DELTA_AVX2

/* The low 32 bits of v spread to the even bits of the result (bit i to
 * bit 2i): a step map's low code bits. */
static inline uint64_t spread(uint64_t v)
{
    v &= 0xffffffffull;
    v = (v | v << 16) & 0x0000ffff0000ffffull;
    v = (v | v << 8) & 0x00ff00ff00ff00ffull;
    v = (v | v << 4) & 0x0f0f0f0f0f0f0f0full;
    v = (v | v << 2) & 0x3333333333333333ull;
    return (v | v << 1) & 0x5555555555555555ull;
}

/* Appends the exceptions of the elements el + bit for the set bits of x
 * (rising), as map_direct_es does. */
static inline unsigned char *put_exceptions(unsigned char *x, uint64_t xm,
                                            uint32_t el,
                                            const unsigned char *old,
                                            const unsigned char *cb,
                                            uint32_t es, uint32_t mask)
{
    for (; xm != 0; xm &= xm - 1) {
        const uint32_t o = el + (uint32_t)__builtin_ctzll(xm);
        const uint32_t d = step_of(old, cb, o, es, mask);
        x[0] = (unsigned char)d;
        x++;
        if (escaped(d, mask)) {
            x[-1] = RS__DELTA_ESCAPE;
            memcpy(x, cb + (size_t)o * es, es);
            x += es;
        }
    }
    return x;
}

/* The step map of a dense chunk from its bytes, a line (64 bytes) at a
 * time: the steps new - old of all its elements in two registers, +1 and
 * -1 found by two compares (masks formed as the scan forms its own),
 * limited to the changed elements (the scan's bitmap of changes: the old
 * bytes of a line that did not change were never saved), the line's codes
 * interleaved from those masks by shifts (pdep would take one instruction,
 * but is microcoded, hundreds of cycles, on AMD before Zen 3) and stored
 * at once; only the exceptions are taken one at a time, and the elements
 * past the last whole line. */
TGT_AVX2 static inline __attribute__((always_inline)) uint64_t
map_dense_avx2(const rs__delta_enc_t *e, const unsigned char *cb,
               uint32_t len, unsigned eshift)
{
    const uint32_t es = 1u << eshift;
    const uint32_t mask = es == 4 ? UINT32_MAX : (1u << (8 * es)) - 1;
    const uint32_t per = 64u >> eshift; /* elements per line */
    const unsigned char *restrict old = e->old;
    const uint64_t *restrict bits = e->bits;
    unsigned char *restrict p = e->ops;
    const size_t nb = ((size_t)len + 3) / 4;
    unsigned char *restrict x = p + nb;
    const __m256i one = eshift == 0   ? _mm256_set1_epi8(1)
                        : eshift == 1 ? _mm256_set1_epi16(1)
                                      : _mm256_set1_epi32(1);
    const __m256i minus = _mm256_set1_epi8(-1);
    const uint32_t lines = len / per;
    for (uint32_t l = 0; l < lines; l++) {
        const unsigned char *a = cb + 64 * (size_t)l;
        const unsigned char *b = old + 64 * (size_t)l;
        const __m256i x0 = _mm256_loadu_si256((const void *)a);
        const __m256i x1 = _mm256_loadu_si256((const void *)(a + 32));
        const __m256i y0 = _mm256_loadu_si256((const void *)b);
        const __m256i y1 = _mm256_loadu_si256((const void *)(b + 32));
        __m256i d0, d1;
        if (eshift == 0) {
            d0 = _mm256_sub_epi8(x0, y0);
            d1 = _mm256_sub_epi8(x1, y1);
        } else if (eshift == 1) {
            d0 = _mm256_sub_epi16(x0, y0);
            d1 = _mm256_sub_epi16(x1, y1);
        } else {
            d0 = _mm256_sub_epi32(x0, y0);
            d1 = _mm256_sub_epi32(x1, y1);
        }
        /* the elements whose step is not +1 (not -1), as the scan's masks */
        const uint64_t full = per == 64 ? ~0ull : (1ull << per) - 1;
        const uint64_t not_plus =
            line_order(line_mask_avx2(d0, d1, one, one, eshift), eshift);
        const uint64_t not_minus =
            line_order(line_mask_avx2(d0, d1, minus, minus, eshift), eshift);
        const uint32_t el = l * per; /* a multiple of per: one word */
        const uint64_t chg =
            per == 64 ? bits[el / 64] : bits[el / 64] >> (el % 64) & full;
        const uint64_t plus = ~not_plus & chg;
        const uint64_t minu = ~not_minus & chg;
        const uint64_t exc = chg & not_plus & not_minus;
        const uint64_t lo = plus | exc, hi = minu | exc;
        /* codes of elements el .. el + per - 1: bytes el / 4 on */
        unsigned char *c = p + el / 4;
        if (per == 64) {
            rs__put_le64(c, spread(lo) | spread(hi) << 1);
            rs__put_le64(c + 8, spread(lo >> 32) | spread(hi >> 32) << 1);
        } else {
            const uint64_t codes = spread(lo) | spread(hi) << 1;
            for (uint32_t j = 0; j < per / 4; j++)
                c[j] = (unsigned char)(codes >> (8 * j));
        }
        x = put_exceptions(x, exc, el, old, cb, es, mask);
    }
    /* the elements past the last whole line, one at a time */
    const uint32_t rest = lines * per;
    memset(p + rest / 4, 0, nb - rest / 4);
    for (uint32_t o = rest; o < len; o++) {
        if ((bits[o / 64] >> (o % 64) & 1) == 0)
            continue;
        const uint32_t d = step_of(old, cb, o, es, mask);
        const unsigned op = op_of(d, mask);
        p[o / 4] |= (unsigned char)((op + 1) << (2 * (o % 4)));
        if (op == RS__DS_EXC)
            x = put_exceptions(x, 1, o, old, cb, es, mask);
    }
    return (uint64_t)(x - p);
}

TGT_AVX2 static uint64_t map_dense_1(const rs__delta_enc_t *e,
                                     const unsigned char *cb, uint32_t len)
{
    return map_dense_avx2(e, cb, len, 0);
}

TGT_AVX2 static uint64_t map_dense_2(const rs__delta_enc_t *e,
                                     const unsigned char *cb, uint32_t len)
{
    return map_dense_avx2(e, cb, len, 1);
}

TGT_AVX2 static uint64_t map_dense_4(const rs__delta_enc_t *e,
                                     const unsigned char *cb, uint32_t len)
{
    return map_dense_avx2(e, cb, len, 2);
}

#endif

static uint64_t map_direct(const rs__delta_enc_t *e, const unsigned char *cb,
                           uint32_t len, uint32_t k)
{
#ifdef DELTA_AVX2
    if (use_avx2()) {
        switch (e->esize) {
        case 1: return map_dense_1(e, cb, len);
        case 2: return map_dense_2(e, cb, len);
        default: return map_dense_4(e, cb, len);
        }
    }
#endif
    switch (e->esize) {
    case 1: return map_direct_es(e, cb, len, k, 1);
    case 2: return map_direct_es(e, cb, len, k, 2);
    default: return map_direct_es(e, cb, len, k, 4);
    }
}

/* The payload bytes of each kind for a chunk of len elements, k > 0 of
 * them changed, and the smallest kind (a tie to the lower one). The steps
 * take at least a byte per change plus the exceptions' bytes, the step map
 * ceil(len / 4) plus the same exceptions: with more changes than
 * ceil(len / 4) the steps are always larger, so a dense chunk skips their
 * walk and builds its step map directly (*map_ready set: e->ops holds the
 * map); otherwise e->ops holds the steps encoding. Same kinds, same bytes
 * either way. */
static rs__delta_kind_t choose(const rs__delta_enc_t *e,
                               const unsigned char *cb, uint32_t len,
                               uint32_t k, uint64_t size[RS__DELTA_KINDS],
                               int *map_ready)
{
    const uint32_t es = e->esize;
    const uint64_t nb = ((uint64_t)len + 3) / 4;
    size[RS__DELTA_SAME] = 0;
    size[RS__DELTA_LIST] = (uint64_t)k * (2 + es);
    size[RS__DELTA_BITMAP] = ((uint64_t)len + 7) / 8 + (uint64_t)k * es;
    size[RS__DELTA_RAW] = (uint64_t)len * es;
    *map_ready = k > nb;
    if (*map_ready) {
        size[RS__DELTA_STEPMAP] = map_direct(e, cb, len, k);
        size[RS__DELTA_STEPS] = UINT64_MAX; /* larger, never taken */
    } else {
        uint64_t xbytes = 0;
        size[RS__DELTA_STEPS] = steps_encode(e, cb, k, &xbytes);
        size[RS__DELTA_STEPMAP] = nb + xbytes;
    }
    rs__delta_kind_t best = RS__DELTA_LIST;
    for (int kind = RS__DELTA_BITMAP; kind < RS__DELTA_KINDS; kind++)
        if (size[kind] < size[best])
            best = (rs__delta_kind_t)kind;
    return best;
}

static unsigned char *payload_base(const rs__delta_enc_t *e)
{
    return e->out + RS__DELTA_HEADER +
           RS__DELTA_ENTRY * (rs__delta_nchunks(e->n, e->chunk) + 1);
}

/* The k offsets as u16 little-endian. */
static void put_offsets(unsigned char *p, const uint16_t *pos, uint32_t k)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, pos, 2 * (size_t)k); /* already in the format's order */
#else
    for (uint32_t i = 0; i < k; i++) {
        p[2 * (size_t)i] = (unsigned char)pos[i];
        p[2 * (size_t)i + 1] = (unsigned char)(pos[i] >> 8);
    }
#endif
}

/* The new values of the k elements at pos (from the chunk's bytes cb), in
 * order: one loop per element size, so each is one load and one store. */
static void gather(unsigned char *vals, const uint16_t *pos, uint32_t k,
                   const unsigned char *cb, uint32_t es)
{
    switch (es) {
    case 1:
        for (uint32_t i = 0; i < k; i++)
            vals[i] = cb[pos[i]];
        break;
    case 2:
        for (uint32_t i = 0; i < k; i++)
            memcpy(vals + 2 * (size_t)i, cb + 2 * (size_t)pos[i], 2);
        break;
    default:
        for (uint32_t i = 0; i < k; i++)
            memcpy(vals + 4 * (size_t)i, cb + 4 * (size_t)pos[i], 4);
        break;
    }
}

/* Writes chunk c's payload (its new bytes are at cb) and index entry. */
static void emit_payload(rs__delta_enc_t *e, uint64_t c,
                         const unsigned char *cb, uint32_t len, uint32_t k)
{
    const uint32_t es = e->esize;
    if (e->limit == 0)
        return;
    uint64_t sizes[RS__DELTA_KINDS];
    int map_ready = 0;
    const rs__delta_kind_t kind =
        k == 0 ? RS__DELTA_SAME : choose(e, cb, len, k, sizes, &map_ready);
    const uint64_t size = k == 0 ? 0 : sizes[kind];
    if (e->payload + size > e->limit) {
        e->limit = 0; /* past it: from here on only the copy */
        return;
    }
    unsigned char *p = payload_base(e) + e->payload;
    switch (kind) {
    case RS__DELTA_SAME:
        break;
    case RS__DELTA_LIST:
        put_offsets(p, e->changed, k);
        gather(p + 2 * (size_t)k, e->changed, k, cb, es);
        break;
    case RS__DELTA_BITMAP: {
        const size_t nb = ((size_t)len + 7) / 8;
        memset(p, 0, nb);
        for (uint32_t i = 0; i < k; i++) {
            const uint32_t o = e->changed[i];
            p[o / 8] |= (unsigned char)(1u << (o % 8));
        }
        gather(p + nb, e->changed, k, cb, es);
        break;
    }
    case RS__DELTA_RAW:
        memcpy(p, cb, (size_t)len * es);
        break;
    case RS__DELTA_STEPS:
        memcpy(p, e->ops, (size_t)size);
        break;
    case RS__DELTA_STEPMAP:
        if (map_ready)
            memcpy(p, e->ops, (size_t)size);
        else
            map_encode(e, p, len, sizes[RS__DELTA_STEPS]);
        break;
    }
    const uint64_t word = e->payload | (uint64_t)kind << RS__DE_KIND_SHIFT;
    unsigned char *ent = e->out + RS__DELTA_HEADER + RS__DELTA_ENTRY * c;
    rs__put_le64(ent, word);
    rs__put_le64(ent + 8, rs__delta_chunk_check(c, word, e->payload + size,
                                                p, (size_t)size));
    e->payload += size;
}

/* Chunk c is copied: its payload and entry, then its scratch left for
 * the next chunk (the change list empty, the bitmap of changes zeroed). */
static void emit_chunk(rs__delta_enc_t *e, uint64_t c,
                       const unsigned char *cb, uint32_t len)
{
    const uint32_t k = e->nchanged;
    emit_payload(e, c, cb, len, k);
    e->nchanged = 0;
    if (k != 0)
        memset(e->bits, 0, sizeof(*e->bits) * (len / 64 + 2));
}

void rs__delta_enc_copy(rs__delta_enc_t *e, const void *src, size_t nbytes)
{
    const unsigned char *s = src;
    const uint32_t es = e->esize, chunk = e->chunk;
    if (e->changed == NULL || es == 0 || chunk == 0 || e->pos > e->n ||
        nbytes % es != 0 || nbytes / es > e->n - e->pos) {
        e->pos = UINT64_MAX; /* finish refuses; nothing written past dst */
        return;
    }
    if (e->limit == 0) { /* no delta any more: the copy alone */
        memcpy(e->dst + e->pos * es, s, nbytes);
        e->pos += nbytes / es;
        return;
    }
    while (nbytes > 0) {
        /* chunk >= 8 (checked above; the analyzer loses it in the loop) */
        // NOLINTNEXTLINE(clang-analyzer-core.DivideZero)
        const uint64_t c = e->pos / chunk, start = c * chunk;
        const uint32_t len = rs__delta_chunk_len(e->n, chunk, c);
        const uint32_t at = (uint32_t)(e->pos - start);
        const size_t take =
            nbytes / es < len - at ? nbytes : (size_t)(len - at) * es;
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
    if (e->limit == 0) {
        *len_p = 0; /* more changed than the limit: no delta */
        return RS_OK;
    }
    const uint64_t nchunks = rs__delta_nchunks(e->n, e->chunk);
    unsigned char *idx = e->out + RS__DELTA_HEADER;
    rs__put_le64(idx + RS__DELTA_ENTRY * nchunks, e->payload);
    rs__put_le64(idx + RS__DELTA_ENTRY * nchunks + 8, 0);
    unsigned char *h = e->out;
    memset(h, 0, RS__DELTA_HEADER);
    /* the schema's 16 characters, no NUL: the format's magic */
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
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
