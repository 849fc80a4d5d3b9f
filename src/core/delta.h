/* Deltas of served shards ("reshard.delta.v1", docs/delta.md): what changed
 * in a shard's bytes from one version to the next, encoded chunk by chunk
 * with an index, so that a receiver holding the previous version patches
 * what it holds, and one needing only elements [a, b) reads only the header,
 * the index entries and the chunks that cover them.
 *
 * Layout (little-endian):
 *   header  RS__DELTA_HEADER bytes: schema, element size, chunk elements,
 *           element count, base and new version, payload length, the
 *           digest of the index, a check of the header itself
 *   index   nchunks + 1 entries of RS__DELTA_ENTRY bytes: each chunk's
 *           payload offset and kind, and a check binding the chunk's
 *           number, offset, length and payload; the last entry ends the
 *           payload
 *   payload the chunks' encodings, in order
 *
 * The encoder is the publisher's copy: it writes the new bytes over the old
 * ones in the arena and, in the same pass, notes what differed. The
 * applier validates everything it was given before it writes a byte. */
#ifndef RS_CORE_DELTA_H
#define RS_CORE_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/status.h"

#define RS__DELTA_SCHEMA "reshard.delta.v1" /* 16 bytes, no NUL */
#define RS__DELTA_HEADER 80u
#define RS__DELTA_ENTRY 16u
#define RS__DELTA_CHUNK 4096u      /* the default chunk, in elements */
#define RS__DELTA_MAX_CHUNK 65536u /* offsets within a chunk are u16 */
#define RS__DELTA_MAX_PAYLOAD ((uint64_t)1 << 48)

/* How one chunk is encoded (the entry's kind byte). */
typedef enum rs__delta_kind {
    RS__DELTA_SAME = 0,   /* no element changed: no payload */
    RS__DELTA_LIST = 1,   /* k u16 offsets, ascending, then k values */
    RS__DELTA_BITMAP = 2, /* ceil(len / 8) bytes of bits, then the values */
    RS__DELTA_RAW = 3,    /* every element's new value */
    /* Relative kinds: new - old of a changed element as an integer of its
     * E bytes (modulo 2^(8E)), which an optimizer step on fp32 masters
     * makes +1 or -1 for most changed bf16 elements and FP8 codes. */
    RS__DELTA_STEPS = 4,  /* a byte per change: gap + op; exceptions inline */
    RS__DELTA_STEPMAP = 5 /* 2 bits per element, then the exceptions */
} rs__delta_kind_t;

#define RS__DELTA_KINDS 6 /* kinds a reader of this library takes */

/* A parsed, checked header. */
typedef struct rs__delta_hdr {
    uint32_t esize;    /* 1, 2 or 4 bytes per element */
    uint32_t chunk;    /* elements per chunk, a multiple of 8 */
    uint64_t n;        /* elements of the shard */
    int64_t base;      /* the version the delta applies to */
    int64_t version;   /* the version it produces */
    uint64_t payload;  /* bytes of payload */
    uint64_t index_digest;
} rs__delta_hdr_t;

/* Chunks of a shard of n elements: ceil(n / chunk). */
uint64_t rs__delta_nchunks(uint64_t n, uint32_t chunk);

/* The most bytes a delta can take: header, index, and every element raw.
 * 0 when the sizes are not valid or do not fit a size_t. */
size_t rs__delta_bound(uint64_t n, uint32_t esize, uint32_t chunk);

/* Bytes of a delta whose header is h. */
uint64_t rs__delta_size(const rs__delta_hdr_t *h);

/* ---- encoding: the publisher's copy ---------------------------------- */

typedef struct rs__delta_enc {
    unsigned char *dst; /* the shard in the arena: old bytes, then new */
    unsigned char *out; /* the delta, at least rs__delta_bound bytes */
    uint64_t n, pos;    /* elements in all, elements copied so far */
    uint32_t esize, chunk;
    int64_t base, version;
    uint64_t payload;   /* payload bytes written so far */
    uint64_t limit;     /* most payload bytes; 0 once passed */
    uint16_t *changed;  /* offsets that differ in the current chunk */
    unsigned char *old; /* the old bytes of the chunk's changed lines */
    unsigned char *ops; /* scratch: the chunk's steps encoding */
    uint64_t *bits;     /* scratch: a dense chunk's changed elements */
    uint32_t nchanged;
    unsigned eshift;    /* log2 of esize */
} rs__delta_enc_t;

/* Starts a delta of the n elements of esize bytes at dst (which hold
 * version base), to be produced while copying version `version` over them.
 * out must hold rs__delta_bound(n, esize, chunk) bytes; pages it never
 * writes are never touched, so a lazily committed buffer of that size costs
 * only what the delta takes. RS_ERR_INVALID_ARG names a bad size,
 * RS_ERR_NO_MEMORY when the chunk's scratch cannot be had. */
rs_status_t rs__delta_enc_init(rs__delta_enc_t *e, void *dst, uint64_t n,
                               uint32_t esize, uint32_t chunk, int64_t base,
                               int64_t version, void *out, rs_diag_t *diag);

/* Caps the payload at max_payload bytes (at least 1): once the chunks
 * encoded so far would pass it, the rest is only copied, and
 * rs__delta_enc_finish gives no delta (length 0). A publisher serves the
 * full bytes alone when a delta would save too little to be worth a
 * receiver's extra reads, and then writes nothing but the copy. */
void rs__delta_enc_limit(rs__delta_enc_t *e, uint64_t max_payload);

/* Copies the next nbytes (a multiple of the element size) of the new
 * version from src to where the copy stands in dst, noting what changed:
 * the shard may come in as many runs as its source has. src must not
 * overlap dst. */
void rs__delta_enc_copy(rs__delta_enc_t *e, const void *src, size_t nbytes);

/* Ends the delta once all n elements are copied: writes the index's end,
 * the digests and the header; *len_p = the delta's bytes, or 0 when the
 * payload passed the limit (rs__delta_enc_limit). Frees the
 * scratch (also on error). RS_ERR_INVALID_ARG when fewer or more than n
 * elements were copied. */
rs_status_t rs__delta_enc_finish(rs__delta_enc_t *e, rs_diag_t *diag,
                                 size_t *len_p);

/* Frees the scratch of an encoding abandoned before rs__delta_enc_finish. */
void rs__delta_enc_abandon(rs__delta_enc_t *e);

/* The whole shard at once: dst[0..n*esize) = src, and the delta against
 * what dst held. */
rs_status_t rs__delta_encode(void *dst, const void *src, uint64_t n,
                             uint32_t esize, uint32_t chunk, int64_t base,
                             int64_t version, void *out, rs_diag_t *diag,
                             size_t *len_p);

/* ---- reading: what a receiver fetches -------------------------------- */

/* Parses and checks the header (schema, check, sizes); RS_ERR_INPUT names
 * the field. */
rs_status_t rs__delta_parse_header(const void *buf, size_t len,
                                   rs_diag_t *diag, rs__delta_hdr_t *h);

/* The chunks that cover elements [a, b) (a < b <= n): chunks first ..
 * first + count - 1, whose index entries are the bytes
 * [*off_p, *off_p + *len_p) of the delta (count + 1 entries). */
rs_status_t rs__delta_index_span(const rs__delta_hdr_t *h, uint64_t a,
                                 uint64_t b, rs_diag_t *diag,
                                 uint64_t *first_p, uint64_t *count_p,
                                 uint64_t *off_p, uint64_t *len_p);

/* The payload bytes of the chunks whose count + 1 index entries are at
 * entries: the delta's bytes [*off_p, *off_p + *len_p). RS_ERR_INPUT when
 * the entries' offsets are not a valid span. */
rs_status_t rs__delta_payload_span(const rs__delta_hdr_t *h,
                                   const void *entries, uint64_t count,
                                   rs_diag_t *diag, uint64_t *off_p,
                                   uint64_t *len_p);

/* ---- applying: the receiver's patch ---------------------------------- */

/* Patches elements [a, b) of a shard, held at dst ((b - a) * esize bytes,
 * the old version's), with the chunks first .. first + count - 1 of a delta:
 * header (RS__DELTA_HEADER bytes), their count + 1 index entries, and their
 * payload (the span rs__delta_payload_span gives). held is the version dst
 * holds. Everything is checked first (header, sizes, base version against
 * held, each entry and each chunk's check, the structure of each payload);
 * on any error dst is untouched and RS_ERR_INPUT names what is wrong. */
rs_status_t rs__delta_apply_range(void *dst, uint64_t a, uint64_t b,
                                  int64_t held, const void *header,
                                  const void *entries, uint64_t first,
                                  uint64_t count, const void *payload,
                                  uint64_t payload_len, rs_diag_t *diag);

/* Patches a whole shard (dst_len bytes, holding version held) with a whole
 * delta (len bytes), after checking it all, the index digest included;
 * *version_p = the version dst then holds. */
rs_status_t rs__delta_apply(void *dst, size_t dst_len, int64_t held,
                            const void *delta, size_t len, rs_diag_t *diag,
                            int64_t *version_p);

#endif
