/* Transport blobs: the packed, little-endian peer descriptions exposers
 * publish and transports decode at connect (layout in docs/formats.md,
 * "Transport blobs"). A writer that remembers exhaustion and a reader that
 * never reads past the end. */
#ifndef RS_EXEC_TRANSPORTS_BLOB_H
#define RS_EXEC_TRANSPORTS_BLOB_H

#include <stddef.h>
#include <stdint.h>

#define RS_BLOB_MAGIC "RSB1"
#define RS_BLOB_MAGIC_LEN 4

/* The backend byte after the magic. */
enum { RS_BLOB_CMA = 1, RS_BLOB_UCX = 2 };

typedef struct rs__blob_writer {
    uint8_t *p;
    size_t len, cap;
    int failed; /* an allocation failed; the bytes are incomplete */
} rs__blob_writer_t;

void rs__blob_write_bytes(rs__blob_writer_t *w, const void *data, size_t n);
void rs__blob_write_u8(rs__blob_writer_t *w, uint8_t v);
void rs__blob_write_u32(rs__blob_writer_t *w, uint32_t v);
void rs__blob_write_u64(rs__blob_writer_t *w, uint64_t v);
/* The magic and the backend byte. */
void rs__blob_write_header(rs__blob_writer_t *w, uint8_t backend);
void rs__blob_write_free(rs__blob_writer_t *w);

typedef struct rs__blob_reader {
    const uint8_t *p;
    size_t len, off;
} rs__blob_reader_t;

/* Each returns 1, or 0 (consuming nothing) when the blob is too short. */
int rs__blob_read_u8(rs__blob_reader_t *r, uint8_t *v);
int rs__blob_read_u32(rs__blob_reader_t *r, uint32_t *v);
int rs__blob_read_u64(rs__blob_reader_t *r, uint64_t *v);
/* Points *p at the next n bytes inside the blob. */
int rs__blob_read_bytes(rs__blob_reader_t *r, size_t n, const uint8_t **p);

/* Checks the magic and returns the backend byte, or -1 when the blob does
 * not start with a header. */
int rs__blob_read_header(rs__blob_reader_t *r);
const char *rs__blob_backend_name(int backend);

#endif
