/* The publishing side of a transport: memory a trainer rank exposes for
 * one-sided reads, and the packed peer description (the "blob") receivers
 * hand to rs_transport_connect. For ucx the blob carries the worker address
 * and one rkey per region; for cma the pid and the regions. Publishers keep
 * an exposer alive (and, for ucx, progressing) until their version is
 * released.
 *
 * Threads: an exposer is set up (create, add_region, start) and destroyed
 * by one thread at a time. Once started, ucx runs a progress thread of its
 * own, stopped and joined by rs_exposer_destroy; the blob does not change
 * after start, so rs_exposer_blob and its bytes may be read from any
 * thread until the exposer is destroyed. */
#ifndef RESHARD_EXPOSE_H
#define RESHARD_EXPOSE_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/memory.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_exposer *rs_exposer_h;

/* backend: "ucx" or "cma". RS_ERR_UNSUPPORTED for others. */
RS_API rs_status_t rs_exposer_create(const char *backend, rs_diag_t *diag,
                                     rs_exposer_h *exposer_p);
/* Stops progress, unregisters every region, frees. Accepts NULL. */
RS_API void rs_exposer_destroy(rs_exposer_h exposer);

/* Exposes nbytes at ptr (memory of type `mem`, borrowed until the exposer
 * is destroyed) under the published address `addr` (the shard table's addr;
 * for ucx and cma it may simply be (uint64_t)ptr). Regions must not overlap
 * in published addresses. Errors: RS_ERR_UNSUPPORTED for any mem but
 * RS_MEM_HOST (naming the type and the address; ptr is not read),
 * RS_ERR_INVALID_ARG for a mem outside rs_mem_type_t, an empty, wrapping or
 * overlapping region, or a region added after start; nothing is added
 * then. */
RS_API rs_status_t rs_exposer_add_region(rs_exposer_h exposer, uint64_t addr,
                                         void *ptr, uint64_t nbytes,
                                         rs_mem_type_t mem, rs_diag_t *diag);

/* Starts serving (ucx: a progress thread, since UCX emulates RMA over tcp
 * and shared memory and the target must keep progressing). Regions added
 * after start are refused. */
RS_API rs_status_t rs_exposer_start(rs_exposer_h exposer, rs_diag_t *diag);

/* The packed peer description of everything exposed, valid until the
 * exposer is destroyed. Transports of the same backend decode it in
 * rs_transport_connect (rs_peer_t.blob). */
RS_API rs_status_t rs_exposer_blob(rs_exposer_h exposer, const void **blob_p,
                                   size_t *len_p);


#ifdef __cplusplus
}
#endif
#endif
