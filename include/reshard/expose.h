/* The publishing side of a transport: memory a trainer rank exposes for
 * one-sided reads, and the packed peer description (the "blob") receivers
 * hand to rs_transport_connect. For ucx the blob carries the worker address
 * and one rkey per region; for cma the pid and the regions. Publishers keep
 * an exposer alive (and, for ucx, progressing) until their version is
 * released. */
#ifndef RESHARD_EXPOSE_H
#define RESHARD_EXPOSE_H

#include <stddef.h>
#include <stdint.h>
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

/* Exposes nbytes at ptr under the published address `addr` (the shard
 * table's addr; for ucx and cma it may simply be (uint64_t)ptr). Regions
 * must not overlap in published addresses. */
RS_API rs_status_t rs_exposer_add_region(rs_exposer_h exposer, uint64_t addr,
                                         void *ptr, uint64_t nbytes,
                                         rs_diag_t *diag);

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
