/* Little-endian packing for transport blobs, written byte by byte so the
 * format does not depend on the host's endianness or alignment. */
#include <stdlib.h>
#include <string.h>

#include "core/vec.h"
#include "exec/transports/blob.h"

void rs__blob_write_bytes(rs__blob_writer_t *w, const void *data, size_t n)
{
    if (w->failed || n == 0)
        return;
    if (n > SIZE_MAX - w->len ||
        !rs__vec_reserve((void **)&w->p, &w->cap, w->len + n, 1)) {
        w->failed = 1;
        return;
    }
    memcpy(w->p + w->len, data, n);
    w->len += n;
}

void rs__blob_write_u8(rs__blob_writer_t *w, uint8_t v)
{
    rs__blob_write_bytes(w, &v, 1);
}

/* The low n bytes of v, least significant first. */
static void put_le(rs__blob_writer_t *w, uint64_t v, int n)
{
    uint8_t b[8];
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    rs__blob_write_bytes(w, b, (size_t)n);
}

void rs__blob_write_u32(rs__blob_writer_t *w, uint32_t v) { put_le(w, v, 4); }

void rs__blob_write_u64(rs__blob_writer_t *w, uint64_t v) { put_le(w, v, 8); }

void rs__blob_write_header(rs__blob_writer_t *w, uint8_t backend)
{
    rs__blob_write_bytes(w, RS_BLOB_MAGIC, RS_BLOB_MAGIC_LEN);
    rs__blob_write_u8(w, backend);
}

void rs__blob_write_free(rs__blob_writer_t *w)
{
    free(w->p);
    memset(w, 0, sizeof(*w));
}

int rs__blob_read_bytes(rs__blob_reader_t *r, size_t n, const uint8_t **p)
{
    if (n > r->len - r->off)
        return 0;
    *p = r->p + r->off;
    r->off += n;
    return 1;
}

int rs__blob_read_u8(rs__blob_reader_t *r, uint8_t *v)
{
    const uint8_t *b;
    if (!rs__blob_read_bytes(r, 1, &b))
        return 0;
    *v = b[0];
    return 1;
}

/* n bytes, least significant first; 0 when fewer are left. */
static int get_le(rs__blob_reader_t *r, int n, uint64_t *v)
{
    const uint8_t *b;
    if (!rs__blob_read_bytes(r, (size_t)n, &b))
        return 0;
    *v = 0;
    for (int i = n - 1; i >= 0; i--)
        *v = *v << 8 | b[i];
    return 1;
}

int rs__blob_read_u32(rs__blob_reader_t *r, uint32_t *v)
{
    uint64_t x;
    if (!get_le(r, 4, &x))
        return 0;
    *v = (uint32_t)x;
    return 1;
}

int rs__blob_read_u64(rs__blob_reader_t *r, uint64_t *v) { return get_le(r, 8, v); }

int rs__blob_read_header(rs__blob_reader_t *r)
{
    const uint8_t *m;
    uint8_t backend;
    size_t start = r->off;
    if (!rs__blob_read_bytes(r, RS_BLOB_MAGIC_LEN, &m) ||
        memcmp(m, RS_BLOB_MAGIC, RS_BLOB_MAGIC_LEN) != 0 ||
        !rs__blob_read_u8(r, &backend)) {
        r->off = start;
        return -1;
    }
    return backend;
}

const char *rs__blob_backend_name(int backend)
{
    switch (backend) {
    case RS_BLOB_CMA: return "cma";
    case RS_BLOB_UCX: return "ucx";
    default: return "unknown";
    }
}
