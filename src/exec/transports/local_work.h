/* The work list of the in-process backends (local, local-mt): reads checked
 * against their session's regions and resolved to plain (src, dst, n)
 * copies at post time, run at wait time, so a refused batch moves nothing.
 * Also what those backends share (state, connect/post/cancel) and the
 * timeout settlement of the in-order backends (local, cma). */
#ifndef RS_EXEC_TRANSPORTS_LOCAL_WORK_H
#define RS_EXEC_TRANSPORTS_LOCAL_WORK_H

#include <stdint.h>
#include "core/vec.h"
#include "exec/transport_impl.h"
#include "exec/transports/peers.h"

typedef struct rs__copy {
    const uint8_t *src;
    uint8_t *dst;
    uint64_t n;
    uint64_t off;   /* where this copy starts in the list's byte stream */
    uint32_t group; /* index into groups */
    rs__tap_t *tap; /* the digest it feeds (transport_impl.h), or NULL */
    uint64_t tap_off; /* with a tap: stream offset of the tap's first copy,
                       * so one thread runs all of a tap's copies */
} rs__copy_t;

/* One post: a session's reads, as counted by the transport counters. */
typedef struct rs__group {
    uint32_t session;
    uint64_t reads;
    uint64_t bytes;
} rs__group_t;

typedef struct rs__worklist {
    RS_VEC(rs__copy_t, copies);
    RS_VEC(rs__group_t, groups);
    uint64_t bytes; /* total over copies */
} rs__worklist_t;

/* Appends one session's reads, or nothing (with the refusal in diag).
 * Copies contiguous in both source and destination are merged, unless one
 * feeds a tap of t's. */
rs_status_t rs__worklist_add(rs_transport_h t, rs__worklist_t *w,
                             const rs__peers_t *peers,
                             uint32_t session, const rs_read_t *reads,
                             size_t n, rs_diag_t *diag);

/* The end of a batch that ran out of time at group `first` of
 * groups[0..n) for the backends that run groups in order (local, cma): the
 * groups before `first` are credited to the counters, and the sessions of
 * the rest are named in diag, once per run of one session. Returns
 * RS_ERR_TIMEOUT. */
rs_status_t rs__groups_timed_out(rs_transport_h t, const rs__peers_t *peers,
                                 const rs__group_t *groups, size_t n,
                                 size_t first, double timeout_s,
                                 rs_diag_t *diag);

/* Forgets the work but keeps the buffers for the next batch. */
void rs__worklist_clear(rs__worklist_t *w);
void rs__worklist_free(rs__worklist_t *w);

/* What the state of both in-process backends starts with: their sessions
 * and their work list. */
typedef struct rs__local_base {
    rs__peers_t peers;
    rs__worklist_t work;
} rs__local_base_t;

void rs__local_base_free(rs__local_base_t *b);

/* Transport ops both in-process backends share; t->priv must point at a
 * state whose first member is an rs__local_base_t. connect needs each
 * region's `local` pointer, post resolves the reads into the work list (or
 * refuses the whole batch), cancel forgets the work list. */
rs_status_t rs__local_connect(rs_transport_h t, uint32_t session,
                              const rs_peer_t *peer, rs_diag_t *diag);
rs_status_t rs__local_post(rs_transport_h t, uint32_t session,
                           const rs_read_t *reads, size_t n, rs_diag_t *diag);
void rs__local_cancel(rs_transport_h t);

/* Runs one copy, feeding its tap when it has one. */
void rs__copy_run(const rs__copy_t *c, uint64_t skip, uint64_t n);

#endif
