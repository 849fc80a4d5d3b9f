/* A plain copy whose stores bypass the caches: for copies into memory that
 * is not read again soon (the receiver's install of a version into the
 * bound parameters). A cached store first reads the line it writes (three
 * memory transfers per line: source, destination, write-back); a streaming
 * store writes whole lines without reading them (two). glibc's memcpy
 * streams only above its own threshold (a fraction of the last-level
 * cache), so parameters of a few MiB copy at the cached rate without
 * this. */
#ifndef RS_CORE_COPY_STREAM_H
#define RS_CORE_COPY_STREAM_H

#include <stddef.h>

/* dst[0..n) = src[0..n): the 64-byte lines of dst written with
 * non-temporal stores, then a store fence, so the bytes are in place for
 * any later reader (another thread after a join included); the ragged ends
 * with memcpy. Plain memcpy below RS__COPY_STREAM_MIN bytes and at the
 * portable level (core/simd.h, RESHARD_SIMD=portable). dst and src must not
 * overlap; any alignment. Thread-safe. */
void rs__copy_stream(void *dst, const void *src, size_t n);

/* Below this many bytes a copy is likely to stay in the caches, where a
 * cached store is as fast and leaves the bytes close to the next reader. */
#define RS__COPY_STREAM_MIN ((size_t)256 << 10)

#endif
