/* Transports move bytes for the executor: one-sided reads of (session,
 * src_addr, nbytes) into local memory. A backend (local, local-mt, cma, and
 * later ucx) is chosen by name at creation and fills one ops table; the
 * calls below never branch on the backend.
 *
 * Threads: a transport is used by one thread at a time (connect, post,
 * wait, cancel, counters); use one per thread. local-mt runs worker threads
 * of its own, joined by rs_transport_destroy; the others run none. */
#ifndef RESHARD_TRANSPORT_H
#define RESHARD_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/cancel.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_transport *rs_transport_h;

/* A published memory range of a peer: `addr` is the address its table
 * publishes; `local` is where the bytes really are: in this process for the
 * in-process backends (local, local-mt; required), in the peer process for
 * cma (optional: NULL means the published address is the peer's own).
 * Regions back to back in published addresses may be read across. */
typedef struct rs_region {
    uint64_t addr;
    uint64_t nbytes;
    const void *local;
} rs_region_t;

/* How to reach one session. Backends read the fields they need: local and
 * local-mt the regions, cma the pid (and the regions, which then bound
 * what may be read and translate addresses), ucx the packed address blob. */
typedef struct rs_peer {
    const char *name;
    int64_t pid;
    const rs_region_t *regions;
    size_t nregions;
    const void *blob;
    size_t blob_len;
} rs_peer_t;

/* One read: nbytes at src_addr of session into dst. */
typedef struct rs_read {
    uint32_t session;
    uint64_t src_addr;
    void *dst;
    uint64_t nbytes;
} rs_read_t;

typedef struct rs_transport_params {
    size_t size; /* the caller's sizeof, set by rs_transport_params_init */
    const char *backend; /* "local", "local-mt", "cma" */
    unsigned threads;    /* local-mt workers; 0 = one per online core */
    /* Borrowed; NULL (default): none. Raised, a wait of the cma and ucx
     * backends drains what it posted, as for a timeout, and returns
     * RS_ERR_CANCELLED within RS_CANCEL_POLL_S (the local backends only
     * copy memory and finish). */
    const rs_cancel_t *cancel;
} rs_transport_params_t;

typedef struct rs_transport_counters {
    uint64_t reads;      /* descriptors completed */
    uint64_t bytes;      /* bytes completed */
    uint64_t posts;      /* post calls (one per session per batch) */
    uint64_t errors;
} rs_transport_counters_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_transport_params_init_sized(rs_transport_params_t *params,
                                           size_t size);
#define rs_transport_params_init(p) \
    rs_transport_params_init_sized((p), sizeof(*(p)))

/* NULL params mean the defaults (local). RS_ERR_UNSUPPORTED for an unknown
 * backend name. */
RS_API rs_status_t rs_transport_create(const rs_transport_params_t *params,
                                       rs_diag_t *diag,
                                       rs_transport_h *transport_p);
RS_API void rs_transport_destroy(rs_transport_h transport);
RS_API const char *rs_transport_backend(rs_transport_h transport);

/* Makes `session` reachable. Sessions are small dense integers (a plan's
 * session indices). Connecting a session again replaces its peer. */
RS_API rs_status_t rs_transport_connect(rs_transport_h transport,
                                        uint32_t session,
                                        const rs_peer_t *peer,
                                        rs_diag_t *diag);

/* Posts a batch. Reads are grouped per session and every group is posted
 * before anything is awaited; if posting fails part-way, what was posted is
 * drained before the error returns. A read outside the session's regions
 * is refused before any byte moves (RS_ERR_TRANSPORT). */
RS_API rs_status_t rs_transport_post(rs_transport_h transport,
                                     const rs_read_t *reads, size_t n,
                                     rs_diag_t *diag);

/* Waits for everything posted. RS_ERR_TIMEOUT names the sessions still
 * outstanding (after draining them); RS_ERR_TRANSPORT names the failed
 * session and cause. timeout_s <= 0 waits without limit. */
RS_API rs_status_t rs_transport_wait(rs_transport_h transport, double timeout_s,
                                     rs_diag_t *diag);

/* Cancels and drains whatever is outstanding; safe to call at any time. */
RS_API void rs_transport_cancel(rs_transport_h transport);

RS_API void rs_transport_counters(rs_transport_h transport,
                                  rs_transport_counters_t *counters_p);

#ifdef __cplusplus
}
#endif
#endif
