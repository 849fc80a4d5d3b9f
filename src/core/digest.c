/* rsd64: the position-sensitive 64-bit digest of shard bytes (specified in
 * docs/formats.md, "Digest"). Four independent lanes each take one 64-bit
 * word of every 32-byte stripe, so the bulk loop is four parallel
 * multiply-rotate-multiply chains and runs near memory bandwidth. */
#include <stdio.h>
#include <string.h>

#include "core/digest_copy.h"
#include "reshard/digest.h"

/* Primes at or above frac(cbrt(p)) * 2^64 for p = 31, 37, 41, 43, 47. */
#define K1 0x243185be4ee4b2afull
#define K2 0x550c7dc3d5ffb507ull
#define K3 0x72be5d74f27b89abull
#define K4 0x80deb1fe3b1696ffull
#define K5 0x9bdc06a725c7125bull

#define STRIPE 32

/* "rsd64:" and 16 hex digits; RS_DIGEST_STR_LEN counts the NUL as well. */
#define TEXT_LEN 22

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* Little-endian 64-bit load from any address. */
static inline uint64_t load_le64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    return w;
#else
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--)
        w = (w << 8) | p[i];
    return w;
#endif
}

/* A lane step is a bijection of the word for a fixed lane value, so changing
 * any one word of a stripe always changes its lane. */
static inline uint64_t lane_round(uint64_t v, uint64_t w)
{
    return rotl64((v ^ w) * K1, 29) * K2;
}

/* Reading ahead by software prefetch keeps enough cache misses in flight for
 * one core to stream at memory bandwidth; hints only, so a plain no-op where
 * the compiler has none. */
#if defined(__GNUC__)
#define RS_PREFETCH(p) __builtin_prefetch(p)
#else
#define RS_PREFETCH(p) ((void)0)
#endif
#define PREFETCH_STRIPES ((size_t)128) /* 4 KiB ahead */

static void feed_stripes(uint64_t lane[4], const unsigned char *p, size_t n)
{
    uint64_t v0 = lane[0], v1 = lane[1], v2 = lane[2], v3 = lane[3];
    for (size_t i = 0; i < n; i++, p += STRIPE) {
        if ((i & 1) == 0 && i + PREFETCH_STRIPES < n)
            RS_PREFETCH(p + PREFETCH_STRIPES * STRIPE);
        v0 = lane_round(v0, load_le64(p));
        v1 = lane_round(v1, load_le64(p + 8));
        v2 = lane_round(v2, load_le64(p + 16));
        v3 = lane_round(v3, load_le64(p + 24));
    }
    lane[0] = v0;
    lane[1] = v1;
    lane[2] = v2;
    lane[3] = v3;
}

/* feed_stripes over src, storing each stripe to dst from the registers
 * that digest it. */
static void copy_stripes(uint64_t lane[4], unsigned char *dst,
                         const unsigned char *p, size_t n)
{
    uint64_t v0 = lane[0], v1 = lane[1], v2 = lane[2], v3 = lane[3];
    for (size_t i = 0; i < n; i++, p += STRIPE, dst += STRIPE) {
        if ((i & 1) == 0 && i + PREFETCH_STRIPES < n)
            RS_PREFETCH(p + PREFETCH_STRIPES * STRIPE);
        const uint64_t w0 = load_le64(p), w1 = load_le64(p + 8),
                       w2 = load_le64(p + 16), w3 = load_le64(p + 24);
        memcpy(dst, p, STRIPE); /* the same words: one load each */
        v0 = lane_round(v0, w0);
        v1 = lane_round(v1, w1);
        v2 = lane_round(v2, w2);
        v3 = lane_round(v3, w3);
    }
    lane[0] = v0;
    lane[1] = v1;
    lane[2] = v2;
    lane[3] = v3;
}

/* A partial stripe first (what an earlier call left), then whole stripes
 * fused, then the rest; the edges are copied, then digested from dst. */
void rs__digest_copy(rs_digest_t *d, void *dst, const void *src, size_t n)
{
    unsigned char *o = dst;
    const unsigned char *p = src;
    if (d->ntail > 0) {
        size_t take = STRIPE - d->ntail < n ? STRIPE - d->ntail : n;
        memcpy(o, p, take);
        rs_digest_update(d, o, take);
        o += take;
        p += take;
        n -= take;
        if (n == 0)
            return;
    }
    const size_t stripes = n / STRIPE;
    copy_stripes(d->lane, o, p, stripes);
    d->total += stripes * STRIPE;
    o += stripes * STRIPE;
    p += stripes * STRIPE;
    n -= stripes * STRIPE;
    if (n > 0) {
        memcpy(o, p, n);
        rs_digest_update(d, o, n);
    }
}

void rs_digest_init(rs_digest_t *d)
{
    memset(d, 0, sizeof(*d));
    for (int i = 0; i < 4; i++)
        d->lane[i] = K4 * (uint64_t)(2 * i + 1);
}

void rs_digest_update(rs_digest_t *d, const void *data, size_t len)
{
    const unsigned char *p = data;
    d->total += len;
    if (d->ntail > 0) {
        size_t take = STRIPE - d->ntail < len ? STRIPE - d->ntail : len;
        memcpy(d->tail + d->ntail, p, take);
        d->ntail += take;
        p += take;
        len -= take;
        if (d->ntail < STRIPE)
            return;
        feed_stripes(d->lane, d->tail, 1);
        d->ntail = 0;
    }
    size_t n = len / STRIPE;
    feed_stripes(d->lane, p, n);
    p += n * STRIPE;
    len -= n * STRIPE;
    if (len > 0)
        memcpy(d->tail, p, len);
    d->ntail = len;
}

/* Lanes folded in order (so exchanging two lanes' words changes the result),
 * then the length, then the tail one word and one byte at a time. */
uint64_t rs_digest_final(const rs_digest_t *d)
{
    uint64_t h = K5;
    for (int i = 0; i < 4; i++)
        h = (h ^ (rotl64(d->lane[i] * K2, 27) * K1)) * K3 + K4;
    h = (h ^ d->total) * K2;
    size_t i = 0;
    for (; i + 8 <= d->ntail; i += 8)
        h = rotl64(h ^ (load_le64(d->tail + i) * K1), 29) * K2 + K4;
    for (; i < d->ntail; i++)
        h = rotl64(h ^ (d->tail[i] * K5), 11) * K1;
    h ^= h >> 31;
    h *= K2;
    h ^= h >> 29;
    h *= K3;
    h ^= h >> 32;
    return h;
}

uint64_t rs_digest(const void *data, size_t len)
{
    rs_digest_t d;
    rs_digest_init(&d);
    rs_digest_update(&d, data, len);
    return rs_digest_final(&d);
}

void rs_digest_format(uint64_t digest, char *out)
{
    snprintf(out, TEXT_LEN + 1, "rsd64:%016llx",
             (unsigned long long)digest);
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Exactly "rsd64:" and 16 lowercase hex digits, nothing before or after. */
rs_status_t rs_digest_parse(const char *text, uint64_t *digest_p)
{
    if (text == NULL || strncmp(text, "rsd64:", 6) != 0 ||
        strlen(text) != TEXT_LEN)
        return RS_ERR_INPUT;
    uint64_t v = 0;
    for (int i = 6; i < TEXT_LEN; i++) {
        int x = hex_value(text[i]);
        if (x < 0)
            return RS_ERR_INPUT;
        v = (v << 4) | (uint64_t)x;
    }
    *digest_p = v;
    return RS_OK;
}
