/* State of the `ucx` transport shared by its two files: ucx.c (sessions:
 * blob decoding, endpoints, rkeys, checked queueing of reads at post) and
 * ucx_wait.c (issuing every queued read, checking each one's completion,
 * progress, timeout and drain). */
#ifndef RS_EXEC_TRANSPORTS_UCX_IMPL_H
#define RS_EXEC_TRANSPORTS_UCX_IMPL_H

#include "core/vec.h"
#include "core/clock.h"
#include "exec/transports/peers.h"
#include "exec/transports/ucx/ucx_ctx.h"

/* One published region of a session, in the session table's sorted order. */
typedef struct ucx_rinfo {
    uint64_t remote;   /* the region's address in the exposing process */
    size_t rkey_off;   /* packed rkey inside the session's blob copy */
    uint32_t rkey_len;
    ucp_rkey_h rkey;   /* unpacked while the endpoint is up */
    /* The region mapped into this process (ucp_rkey_ptr: memory a
     * shared-memory domain of UCX allocated), valid while rkey is; NULL
     * when it must be read with gets. */
    const uint8_t *direct;
} ucx_rinfo_t;

/* A session's endpoint and keys. Kept at a stable address (the endpoint's
 * error handler points at it) and rebuilt from the blob copy after a
 * forced close, so a timeout does not cost the caller a reconnect. */
typedef struct ucx_sess {
    uint32_t session;
    ucp_ep_h ep;          /* NULL while down */
    ucs_status_t failed;  /* set by the error handler */
    uint8_t *blob;        /* owned copy of the peer's blob */
    size_t addr_off, addr_len;
    size_t nregions;
    ucx_rinfo_t *regions;
} ucx_sess_t;

/* One get: part of a read inside one region. */
typedef struct ucx_piece {
    uint8_t *dst;
    uint64_t remote;
    uint64_t n;
    uint32_t region;
    void *req;            /* its request until the wait releases it */
    rs__tap_t *tap;       /* the digest a mapped copy of it feeds, or NULL */
} ucx_piece_t;

/* One post (a session's reads) and its pieces. A get's completion callback
 * counts it off and keeps the first failed status. */
typedef struct ucx_group {
    uint32_t session;
    uint64_t reads, bytes;
    size_t first, end;    /* pieces */
    size_t outstanding;   /* gets issued and not yet completed */
    ucs_status_t get_status; /* UCS_OK, or the first get that failed */
    ucs_status_t status;  /* UCS_INPROGRESS until settled */
} ucx_group_t;

typedef struct ucx_state {
    rs__ucx_t u;
    rs__peers_t peers;
    ucx_sess_t **sess;    /* by session index, NULL when never connected */
    size_t nsess;
    RS_VEC(ucx_piece_t, pieces);
    RS_VEC(ucx_group_t, groups);
    /* For tests: when not UCS_OK, the wait lets every get of the batch
     * complete, then marks the endpoint of every post failed with it, as
     * its error handler would when the peer fails before the post is
     * settled. */
    ucs_status_t fail_after_issue;
} ucx_state_t;

/* Creates the endpoint and unpacks every rkey; RS_ERR_TRANSPORT names the
 * session (`name` is for messages). No-op when already up. */
rs_status_t rs__ucx_sess_up(ucx_state_t *s, ucx_sess_t *x, const char *name,
                            rs_diag_t *diag);

/* Releases the rkeys and closes the endpoint: forced (outstanding gets
 * complete as cancelled and write nothing more) or flushed. Bounded. */
void rs__ucx_sess_down(ucx_state_t *s, ucx_sess_t *x, int force);

/* Appends " (UCX: <its latest error line>)" when UCX kept one in a quiet
 * section since `mark` (see ucx_ctx.h). */
void rs__ucx_add_cause(rs_diag_t *diag, unsigned long mark);

/* 1 when a failure with this status (and UCX's error line `cause`, or
 * NULL) means the peer's process is gone or cannot be reached
 * (ucx_gone.c). */
int rs__ucx_peer_gone(ucs_status_t us, const char *cause);

/* Sets RS_ERR_TRANSPORT naming the session: "the publisher is gone or
 * unreachable (WHAT: <status>; UCX: <line>)" when rs__ucx_peer_gone says
 * so, else "WHAT: <status> (UCX: <line>)"; UCX's line is the first it
 * kept in a quiet section since `mark`, given once. */
rs_status_t rs__ucx_peer_failed(rs_diag_t *diag, uint32_t session,
                                const char *name, const char *what,
                                ucs_status_t us, unsigned long mark);

rs_status_t rs__ucx_wait(rs_transport_h t, double timeout_s, rs_diag_t *diag);

/* The completion callback of every get (user_data: its group). */
void rs__ucx_get_done(void *request, ucs_status_t status, void *user_data);

/* What a post has come to, given its endpoint's state (UCS_OK, or what
 * the error handler recorded): the first failed get's status, else the
 * endpoint's failure (even when every get has completed: a peer that
 * failed during the post fails the post), else UCS_OK once every get has
 * completed, else UCS_INPROGRESS. `what_p` gets "read failed" or
 * "endpoint failed" with an error. */
ucs_status_t rs__ucx_group_verdict(const ucx_group_t *g, ucs_status_t ep,
                                   const char **what_p);

#endif
