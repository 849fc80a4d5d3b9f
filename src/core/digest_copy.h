/* A copy that feeds an rsd64 digest with the bytes it writes, in the same
 * pass: each byte is read from memory once, stored, and taken into the
 * digest's lanes from the registers that stored it. The digest is the one
 * rs_digest_update would give over the destination bytes, in order, so a
 * stream of such copies digests exactly what a later pass over the
 * destinations would (docs/formats.md, "Digest: rsd64"). */
#ifndef RS_CORE_DIGEST_COPY_H
#define RS_CORE_DIGEST_COPY_H

#include <stddef.h>

#include "reshard/digest.h"

/* dst[0..n) = src[0..n), and d updated with those bytes. dst and src must
 * not overlap; any alignment. */
void rs__digest_copy(rs_digest_t *d, void *dst, const void *src, size_t n);

/* Copies made by someone else (the kernel's process_vm_readv) are digested
 * right after each step of this many bytes has landed, so the digest reads
 * them from the cache (within a core's L2) instead of from memory. */
#define RS__DIGEST_STEP ((size_t)256 << 10)

#endif
