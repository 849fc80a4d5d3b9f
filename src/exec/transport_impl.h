/* The backend ops table behind rs_transport_h, and the state shared by the
 * dispatch layer (transport.c) and every backend under transports/. */
#ifndef RS_EXEC_TRANSPORT_IMPL_H
#define RS_EXEC_TRANSPORT_IMPL_H

#include "reshard/digest.h"
#include "reshard/transport.h"

typedef struct rs__transport_ops {
    const char *name;
    rs_status_t (*open)(rs_transport_h t, rs_diag_t *diag);
    void (*close)(rs_transport_h t);
    rs_status_t (*connect)(rs_transport_h t, uint32_t session,
                           const rs_peer_t *peer, rs_diag_t *diag);
    /* reads all belong to `session` */
    rs_status_t (*post)(rs_transport_h t, uint32_t session,
                        const rs_read_t *reads, size_t n, rs_diag_t *diag);
    rs_status_t (*wait)(rs_transport_h t, double timeout_s, rs_diag_t *diag);
    void (*cancel)(rs_transport_h t);
    /* Optional: the worker threads the backend runs its copies on (NULL:
     * it has none of its own). Sizes the executor's own pool. */
    unsigned (*workers)(rs_transport_h t);
    /* 1 when the backend copies with the CPU itself and feeds each tap
     * (below) as it copies, or may (a tap left unfed is digested after the
     * wire); 0: the executor digests every shard after the wire. */
    int fuses_digests;
} rs__transport_ops_t;

/* A read whose bytes feed a digest as the backend copies them, in order
 * (exec/fused.c): a verified byte is then touched once, not copied and
 * later read again. The executor sets one per read that brings a whole
 * shard; a backend that fuses feeds `digest` with the bytes it writes to
 * [dst, dst + nbytes), first to last, on one thread. */
typedef struct rs__tap {
    const uint8_t *dst;
    uint64_t nbytes;
    rs_digest_t digest;
} rs__tap_t;

struct rs_transport {
    const rs__transport_ops_t *ops;
    rs_transport_params_t params;
    rs_transport_counters_t counters;
    void *priv; /* the backend's own state */
    rs__tap_t *taps; /* sorted by dst, disjoint; borrowed; NULL: none */
    size_t ntaps;
    /* > 0: a wait whose reads make no progress for this long ends as a
     * timeout naming the sessions still outstanding, and sets `stalled`
     * (backends whose reads depend on the peer running: ucx) */
    double stall_s;
    int stalled; /* the last wait ended by the stall bound */
};

/* Sets the stall bound of the following waits (<= 0: none). */
void rs__transport_set_stall(rs_transport_h t, double stall_s);

/* Whether the last wait ended because its reads made no progress for the
 * stall bound (its RS_ERR_TIMEOUT names the stalled sessions). */
int rs__transport_stalled(rs_transport_h t);

/* Lends the taps of the reads posted from now on (n == 0: none). */
void rs__transport_set_taps(rs_transport_h t, rs__tap_t *taps, size_t n);

/* The tap of the read that lands on [dst, dst + n), or NULL: posts look
 * it up once per resolved copy. */
rs__tap_t *rs__transport_tap(rs_transport_h t, const uint8_t *dst,
                             uint64_t n);

/* The backend's worker threads (ops->workers), 1 for a backend without. */
unsigned rs__transport_workers(rs_transport_h t);

/* Shared stub for operations a backend does not support. */
rs_status_t rs__transport_unsupported(rs_transport_h t, rs_diag_t *diag);

/* Each backend's reading half (transports/<name>/), listed in its
 * rs__backend_t (exec/backend.h). */
extern const rs__transport_ops_t rs__transport_local;
extern const rs__transport_ops_t rs__transport_local_mt;
extern const rs__transport_ops_t rs__transport_cma;
extern const rs__transport_ops_t rs__transport_ucx;

/* Region lookup shared by backends: the region of `regions` holding
 * [addr, addr + nbytes), or NULL. Regions are sorted by addr. */
const rs_region_t *rs__region_find(const rs_region_t *regions, size_t n,
                                   uint64_t addr, uint64_t nbytes);

#endif
