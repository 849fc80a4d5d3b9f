/* The session table every transport backend keeps: who each session is (a
 * name for messages, a pid, the published regions sorted by address) and the
 * checks that refuse a read before any byte of its batch moves. */
#ifndef RS_EXEC_TRANSPORTS_PEERS_H
#define RS_EXEC_TRANSPORTS_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include "exec/transport_impl.h"

/* Sessions are dense plan indices; this bound keeps a stray index from
 * turning into a huge table. */
#define RS_PEERS_MAX_SESSIONS (1u << 24)

typedef struct rs__peer {
    int connected;
    char *name;            /* owned copy, never NULL once connected */
    int64_t pid;
    rs_region_t *regions;  /* owned copy, sorted by addr, disjoint */
    size_t nregions;
} rs__peer_t;

typedef struct rs__peers {
    rs__peer_t *v;
    size_t len;
} rs__peers_t;

/* What a backend requires of a peer at connect. */
enum {
    RS_PEER_NEED_LOCAL = 1, /* every region carries its `local` pointer */
    RS_PEER_NEED_PID = 2,   /* pid > 0 */
};

/* Grows a zero-filled table of per-session entries (`elsize` bytes each,
 * *len of them) so that `session` indexes it, at least doubling; sessions
 * at or past RS_PEERS_MAX_SESSIONS are RS_ERR_INVALID_ARG. On failure the
 * table is as it was. `what` names the table in messages. */
rs_status_t rs__session_table_grow(void **table, size_t *len, size_t elsize,
                                   uint32_t session, const char *what,
                                   rs_diag_t *diag);

/* Copies, sorts and validates the peer into slot `session` (replacing any
 * previous peer). RS_ERR_INVALID_ARG names what is wrong. */
rs_status_t rs__peers_connect(rs__peers_t *peers, uint32_t session,
                              const rs_peer_t *peer, unsigned need,
                              rs_diag_t *diag);

/* The connected peer of `session`, or NULL with RS_ERR_TRANSPORT in diag. */
const rs__peer_t *rs__peers_get(const rs__peers_t *peers, uint32_t session,
                                rs_diag_t *diag);

/* Refuses (RS_ERR_TRANSPORT naming session, address and length) a read
 * outside every region of the peer; sets *region_p (NULL for a zero-length
 * read) on success. With `unbounded` and no regions, anything is allowed. */
rs_status_t rs__peer_check_read(const rs__peer_t *peer, uint32_t session,
                                const rs_read_t *read, int unbounded,
                                const rs_region_t **region_p, rs_diag_t *diag);

/* Receives one piece of a read that lies inside region r (NULL when the
 * peer is unbounded); returns 0 on exhaustion. */
typedef int (*rs__piece_fn)(void *ctx, const rs_region_t *r, uint64_t addr,
                            uint8_t *dst, uint64_t n);

/* Like rs__peer_check_read, but a read may run across regions that sit back
 * to back in the peer's address space (a publisher packs its shards in one
 * range and the planner merges runs that continue from one shard into the
 * next): it is handed to fn one region at a time. */
rs_status_t rs__peer_for_pieces(const rs__peer_t *peer, uint32_t session,
                                const rs_read_t *read, int unbounded,
                                rs__piece_fn fn, void *ctx, rs_diag_t *diag);

/* Name of a session for messages: the peer's name or "?". */
const char *rs__peers_name(const rs__peers_t *peers, uint32_t session);

void rs__peers_free(rs__peers_t *peers);

/* A timeout message built in two steps: the start ("timed out after 2.000 s;
 * sessions still outstanding:"), then one call per outstanding session. Both
 * accept a NULL diag; begin returns RS_ERR_TIMEOUT. */
rs_status_t rs__timeout_begin(rs_diag_t *diag, double timeout_s);
/* The same for a wait ended by the stall bound: "no progress for S s". */
rs_status_t rs__stall_begin(rs_diag_t *diag, double stall_s);
void rs__timeout_add(rs_diag_t *diag, const rs__peers_t *peers,
                     uint32_t session);

#endif
