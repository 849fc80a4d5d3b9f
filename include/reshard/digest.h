/* Position-sensitive digest of shard bytes ("rsd64"), computed by publishers
 * over each shard's row-major bytes and re-computed by receivers over what
 * they reassembled. Streaming: feeding a buffer in pieces gives the same
 * digest as feeding it whole. The algorithm is specified in docs/formats.md.
 * Threads: an rs_digest_t is used by one thread at a time; the functions
 * keep no other state, so distinct digests run on any threads at once.
 * Cost: linear in the bytes fed. */
#ifndef RESHARD_DIGEST_H
#define RESHARD_DIGEST_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Text form: "rsd64:" followed by 16 lowercase hex digits, NUL-terminated. */
#define RS_DIGEST_STR_LEN 23

typedef struct rs_digest {
    uint64_t lane[4];
    uint64_t total;          /* bytes fed so far */
    unsigned char tail[32];  /* bytes not yet forming a whole stripe */
    size_t ntail;
} rs_digest_t;

RS_API void rs_digest_init(rs_digest_t *d);
RS_API void rs_digest_update(rs_digest_t *d, const void *data, size_t len);
RS_API uint64_t rs_digest_final(const rs_digest_t *d);

/* One-shot digest of a buffer. */
RS_API uint64_t rs_digest(const void *data, size_t len);

/* Formats as "rsd64:%016llx" into out (RS_DIGEST_STR_LEN + 1 bytes). */
RS_API void rs_digest_format(uint64_t digest, char *out);

/* Parses the text form; RS_ERR_INPUT when it is not one. */
RS_API rs_status_t rs_digest_parse(const char *text, uint64_t *digest_p);

#ifdef __cplusplus
}
#endif
#endif
