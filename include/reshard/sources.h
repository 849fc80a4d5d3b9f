/* Published sources: the merged shard tables of every trainer rank. Each
 * table (mx.reshard.shard_table.v1) says which box of which full tensor a
 * session holds and at which address. Tables from many ranks merge into one
 * rs_sources; identical boxes from several sessions are replicas.
 *
 * Threads: sources are not locked while they are built: add and load from
 * one thread at a time, with no reader meanwhile. Built sources are only
 * read (by the accessors, rs_plan_build and rs_exec_set_digests), from any
 * number of threads at once; the two indexes a reader may build in them
 * (each tensor's cell grid, and rs_sources_shard's position index) are
 * built once under the sources' own lock, so plans may be built against
 * one sources concurrently
 * (tests/unit/plan/test_plan_threads.c). Adding shards later is building
 * again: no plan build may run meanwhile.
 * Cost: adding a shard or a table is amortized O(1) plus its validation;
 * loading is linear in the text. Every accessor below is O(1), except that
 * the first rs_sources_shard after shards arrived out of the global order
 * rebuilds its position index in O(shards), so a walk over all shards is
 * O(shards) whatever the tables. */
#ifndef RESHARD_SOURCES_H
#define RESHARD_SOURCES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "reshard/dtype.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_sources *rs_sources_h;

/* One published shard. */
typedef struct rs_shard_desc {
    const char *tensor;       /* full source tensor name */
    rs_dtype_t dtype;
    size_t elsize;            /* must equal rs_dtype_size(dtype) */
    int ndim;
    const int64_t *full_shape;
    const char *session;      /* the publishing agent */
    int64_t device_id;
    uint64_t addr;            /* address of element 0 of the row-major shard */
    const int64_t *offset;    /* shard_offset, per dim */
    const int64_t *shape;     /* shard shape, per dim */
    const char *digest;       /* optional, may be NULL */
} rs_shard_desc_t;

/* Per-table metadata, kept for the control plane. */
typedef struct rs_table_info {
    const char *agent_name;
    const char *metadata_endpoint; /* NULL when absent */
    const char *agent_meta_b64;    /* NULL when absent */
    int64_t publisher_step;        /* -1 when absent */
} rs_table_info_t;

RS_API rs_status_t rs_sources_create(rs_sources_h *sources_p);
RS_API void rs_sources_destroy(rs_sources_h sources);

/* Adds one shard. RS_ERR_INPUT when it disagrees with earlier shards of the
 * same tensor (full shape, dtype, elsize), leaves the full shape, or its
 * byte range overflows the address space. */
RS_API rs_status_t rs_sources_add_shard(rs_sources_h sources,
                                        const rs_shard_desc_t *shard,
                                        rs_diag_t *diag);

/* Records a table's metadata (one per publishing agent). */
RS_API rs_status_t rs_sources_add_table(rs_sources_h sources,
                                        const rs_table_info_t *table,
                                        rs_diag_t *diag);

/* Loads a file holding one shard-table blob or a JSON array of blobs and
 * merges it in. All-or-nothing: on failure nothing of this file is added. */
RS_API rs_status_t rs_sources_load_file(rs_sources_h sources, const char *path,
                                        rs_diag_t *diag);
RS_API rs_status_t rs_sources_load_string(rs_sources_h sources,
                                          const char *json, size_t len,
                                          const char *origin, rs_diag_t *diag);

/* Adds every session, shard and table of `from` to `sources`, in `from`'s
 * order, as rs_sources_add_shard and rs_sources_add_table would. All or
 * nothing: on failure (RS_ERR_INPUT naming the tensor that disagrees,
 * RS_ERR_NO_MEMORY) `sources` is as it was. `from` is only read. Not
 * thread-safe on `sources`; O(shards of `from`). */
RS_API rs_status_t rs_sources_merge(rs_sources_h sources, rs_sources_h from,
                                    rs_diag_t *diag);

/* Counts, O(1). */
RS_API size_t rs_sources_num_tensors(rs_sources_h sources);
RS_API size_t rs_sources_num_shards(rs_sources_h sources);
/* Shards in a stable order (tensor by tensor, in insertion order); index
 * ranges over 0..rs_sources_num_shards()-1. Strings and arrays are borrowed
 * from the sources until the next change. O(1) (see the cost note above). */
RS_API void rs_sources_shard(rs_sources_h sources, size_t index,
                             rs_shard_desc_t *shard_p);
/* Tables in the order they were added; O(1). */
RS_API size_t rs_sources_num_tables(rs_sources_h sources);
RS_API void rs_sources_table(rs_sources_h sources, size_t index,
                             rs_table_info_t *table_p);
/* Index of the first table added with this agent_name, or -1 (also for
 * NULL arguments). O(1) expected: the names are hashed. */
RS_API long rs_sources_find_table(rs_sources_h sources,
                                  const char *agent_name);

/* Writing shard tables: the one writer of mx.reshard.shard_table.v1
 * (docs/formats.md), which rs_sources_load_* read back. Dtypes are written
 * with their PyTorch names ("torch.bfloat16"). A writer streams one blob to
 * `out`: open it with the table's metadata (metadata_endpoint and
 * agent_meta_b64 are written when not NULL, publisher_step when >= 0), add
 * shards (their `session` is the shard's agent_name; `digest` is written
 * when neither NULL nor empty), close it. Shards of one tensor should come
 * back to back: a tensor given again after another opens a second entry,
 * which loaders merge. A writer is used by one thread at a time; each call
 * costs O(size of what it writes). */
typedef struct rs_table_writer *rs_table_writer_h;

/* Writes the blob's head. RS_ERR_INVALID_ARG for a NULL out, table or
 * agent_name; RS_ERR_NO_MEMORY. *writer_p is set only on success. */
RS_API rs_status_t rs_table_writer_open(FILE *out,
                                        const rs_table_info_t *table,
                                        rs_diag_t *diag,
                                        rs_table_writer_h *writer_p);
/* Writes one shard. RS_ERR_INVALID_ARG for NULL pointers, RS_ERR_IO when
 * `out` reports an error, RS_ERR_NO_MEMORY. The writer stays open either
 * way (close or discard it). */
RS_API rs_status_t rs_table_writer_add(rs_table_writer_h writer,
                                       const rs_shard_desc_t *shard,
                                       rs_diag_t *diag);
/* Ends the blob (with a newline), flushes `out` and frees the writer, which
 * is gone whatever the result: RS_ERR_IO when writing or flushing failed.
 * `out` stays open (the caller's). */
RS_API rs_status_t rs_table_writer_close(rs_table_writer_h writer,
                                         rs_diag_t *diag);
/* Frees a writer without ending the blob (after an error); NULL is a
 * no-op. */
RS_API void rs_table_writer_discard(rs_table_writer_h writer);

#ifdef __cplusplus
}
#endif
#endif
