/* The publishing side of a transport: memory a trainer rank exposes for
 * one-sided reads, and the packed peer description (the "blob") receivers
 * hand to rs_transport_connect. For ucx the blob carries the worker address
 * and one rkey per region; for cma the pid and the regions. Publishers keep
 * an exposer alive (and, for ucx, progressing) until their version is
 * released.
 *
 * An exposer also allocates memory (rs_exposer_alloc): memory the backend
 * can serve best. For ucx that is UCX's own allocation (sysv or posix
 * shared memory on one machine, also registered with the network domains),
 * which a reader on the same machine copies one-sided with no help from
 * this process; caller memory that is only registered is read through
 * UCX's emulation, answered by the progress thread (docs/transports.md, "UCX
 * on one machine"). Allocations outlive rs_exposer_reset, so one exposer
 * can serve them under changing sets of regions.
 *
 * Threads: an exposer is set up (create, alloc, add_region, start, reset)
 * and destroyed by one thread at a time. Once started, ucx runs a progress
 * thread of its own, stopped and joined by rs_exposer_reset and
 * rs_exposer_destroy; the blob does not change after start, so
 * rs_exposer_blob and its bytes may be read from any thread until the
 * exposer is reset or destroyed. rs_exposer_alloc and rs_exposer_free may
 * be called while the exposer serves. */
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
/* Stops progress, unregisters every region, frees every allocation (and
 * the exposer). Accepts NULL. */
RS_API void rs_exposer_destroy(rs_exposer_h exposer);

/* Exposes nbytes at ptr (memory of type `mem`, borrowed until the exposer
 * is destroyed) under the published address `addr` (the shard table's addr;
 * for ucx and cma it may simply be (uint64_t)ptr). Regions must not overlap
 * in published addresses. Errors: RS_ERR_UNSUPPORTED for any mem but
 * RS_MEM_HOST (naming the type and the address; ptr is not read),
 * RS_ERR_INVALID_ARG for a mem outside rs_mem_type_t, an empty, wrapping or
 * overlapping region, one straddling the end of an allocation of this
 * exposer, or a region added after start; nothing is added then. */
RS_API rs_status_t rs_exposer_add_region(rs_exposer_h exposer, uint64_t addr,
                                         void *ptr, uint64_t nbytes,
                                         rs_mem_type_t mem, rs_diag_t *diag);

/* Starts serving (ucx: a progress thread, since UCX emulates RMA over tcp
 * and shared memory and the target must keep progressing). Regions added
 * after start are refused. */
RS_API rs_status_t rs_exposer_start(rs_exposer_h exposer, rs_diag_t *diag);

/* The packed peer description of everything exposed, valid until the
 * exposer is reset or destroyed. Transports of the same backend decode it
 * in rs_transport_connect (rs_peer_t.blob). RS_ERR_INVALID_ARG before
 * start. */
RS_API rs_status_t rs_exposer_blob(rs_exposer_h exposer, const void **blob_p,
                                   size_t *len_p);

/* Stops serving and drops every region, keeping the exposer's backend
 * context and every allocation: regions may then be added and the exposer
 * started again, with a new blob. For ucx the progress thread stops and
 * the worker closes, so every receiver's endpoint fails and no read of a
 * dropped region is answered any more; caller memory is unregistered and
 * may be freed once this returns. Accepts NULL. Cost: the backend's
 * teardown (ucx: joining the thread, closing the worker). */
RS_API void rs_exposer_reset(rs_exposer_h exposer);

/* Allocates `nbytes` (> 0) of zeroed, page-aligned memory this exposer
 * serves best, owned by the exposer until rs_exposer_free or
 * rs_exposer_destroy (not rs_exposer_reset). Regions added inside an
 * allocation are served from it (for ucx under the allocation's own key,
 * with no further registration); a region that starts inside one and ends
 * outside is refused. ucx: ucp_mem_map with UCP_MEM_MAP_ALLOCATE (UCX's
 * choice among sysv, posix, huge pages, mmap and heap, UCX_ALLOC_PRIO);
 * cma: anonymous pages. Errors: RS_ERR_INVALID_ARG (no exposer or output,
 * nbytes 0), RS_ERR_NO_MEMORY (the backend could not allocate; the
 * message names the size). Cost: the allocation and, for ucx, a probe of
 * how readers on this machine reach it (a loopback endpoint, unpacking
 * the allocation's key); pages are touched by the backend when it zeroes
 * them (sysv and posix segments are fresh, so zero already). */
RS_API rs_status_t rs_exposer_alloc(rs_exposer_h exposer, uint64_t nbytes,
                                    rs_diag_t *diag, void **ptr_p);

/* Frees an allocation of this exposer (ptr as rs_exposer_alloc returned
 * it). Errors: RS_ERR_INVALID_ARG when ptr is not one of its allocations,
 * or a region of the exposer (added and not dropped by reset) lies in it;
 * nothing is freed then. */
RS_API rs_status_t rs_exposer_free(rs_exposer_h exposer, void *ptr,
                                   rs_diag_t *diag);

/* How an allocation is served. */
typedef struct rs_exposer_memory {
    void *base;          /* the allocation holding the address asked about */
    uint64_t nbytes;     /* its usable bytes from base */
    /* 1: a reader on this machine copies the bytes itself, one-sided
     * (ucx: the key covers a shared-memory domain, sysv or posix, that the
     * reader maps; cma: process_vm_readv). 0: ucx reads of it are emulated
     * with messages this exposer's progress thread answers (slower), as
     * for registered caller memory. */
    int one_sided;
    /* 1: UCX offered shared memory (a sysv or posix domain is configured)
     * but gave ordinary memory (sysv limits, a small /dev/shm, or
     * UCX_ALLOC_PRIO), so one_sided is 0 where it could have been 1. */
    int fallback;
} rs_exposer_memory_t;

/* Describes the allocation of this exposer holding `ptr` (any address in
 * it). RS_ERR_INVALID_ARG when no allocation holds it. O(allocations). */
RS_API rs_status_t rs_exposer_memory(rs_exposer_h exposer, const void *ptr,
                                     rs_exposer_memory_t *info_p);


#ifdef __cplusplus
}
#endif
#endif
