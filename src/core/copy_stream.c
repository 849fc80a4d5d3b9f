/* The streaming copy (core/copy_stream.h): SSE2 non-temporal stores, which
 * every x86-64 has; wider vectors gain nothing on a copy bound by memory.
 * Loads are unaligned: the source may sit at any offset from the
 * destination's lines (a page-aligned staging into a malloc'd parameter is
 * 16 bytes off), and 16-byte loads at a 16-byte offset never split a line. */
#include <stdint.h>
#include <string.h>

#include "core/copy_stream.h"
#include "core/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <emmintrin.h>

/* Whole 64-byte lines from a 64-byte aligned d; returns the bytes copied. */
static size_t stream_lines(unsigned char *d, const unsigned char *s,
                           size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    /* streaming stores are weakly ordered: fence them before anything
     * that publishes the bytes (a pool join, a lock release) */
    _mm_sfence();
    return i;
}
#endif

void rs__copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (n >= RS__COPY_STREAM_MIN && rs__simd_active() >= RS__SIMD_SSE2) {
        unsigned char *d = dst;
        const unsigned char *s = src;
        size_t head = (64 - ((uintptr_t)d & 63)) & 63;
        memcpy(d, s, head);
        size_t done = head + stream_lines(d + head, s + head, n - head);
        memcpy(d + done, s + done, n - done);
        return;
    }
#endif
    memcpy(dst, src, n);
}
