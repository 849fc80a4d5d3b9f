/* A UCP context and one worker, set up the same way for both sides of the
 * ucx transport. UCX chooses its transports from its own environment
 * (UCX_TLS, UCX_NET_DEVICES, ...), read here at every setup. Also UCX's
 * log inside quiet sections: a peer that dies or is unreachable makes UCX
 * print errors and warnings of its own that reshard reports in its own
 * words (naming the publisher), so there they are kept, not printed. */
#ifndef RS_EXEC_TRANSPORTS_UCX_CTX_H
#define RS_EXEC_TRANSPORTS_UCX_CTX_H

#include <stddef.h>
#include <ucp/api/ucp.h>
#include "reshard/status.h"

typedef struct rs__ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd; /* the worker's event fd, or -1 without wakeup support */
} rs__ucx_t;

/* RMA, plus wakeup when `wakeup` is set (then efd is filled when UCX offers
 * it); `shared`: the context is used from several threads at once (memory
 * mapped beside a progressing worker). `who` prefixes messages ("ucx
 * transport", "exposer (ucx)"). */
rs_status_t rs__ucx_open(rs__ucx_t *u, int wakeup, int shared,
                         ucs_thread_mode_t mode, const char *who,
                         rs_diag_t *diag);
void rs__ucx_close(rs__ucx_t *u);

/* The worker alone, on u's open context: closing it closes every endpoint
 * peers had to it, while memory mapped on the context stays. */
rs_status_t rs__ucx_worker_open(rs__ucx_t *u, int wakeup,
                                ucs_thread_mode_t mode, const char *who,
                                rs_diag_t *diag);
void rs__ucx_worker_close(rs__ucx_t *u);

/* Before a worker is closed: flushes every endpoint it has (also those
 * UCX made for peers that connected to it) and progresses it until the
 * flush completes and no event has come for a moment, so that nothing UCX
 * started (wireup with a peer, replies to its gets, an endpoint closing)
 * is left half done when the worker goes. Bounded: a peer that died over
 * a transport that cannot tell leaves its flush pending. The caller owns
 * the worker (no thread progresses it). */
void rs__ucx_worker_quiesce(rs__ucx_t *u);

/* Quiet sections nest and may overlap across threads: while any is open,
 * UCX's error and warning lines are not printed; the latest few errors
 * are kept for rs__ucx_quiet_cause. When UCX_LOG_LEVEL is set, UCX prints as it
 * was told and nothing is kept. Returns a mark for rs__ucx_quiet_cause. */
unsigned long rs__ucx_quiet_begin(void);
void rs__ucx_quiet_end(void);

/* Copies (truncated to `len`) the first UCX error kept since `mark` (or
 * the oldest still kept) into buf and returns 1; 0 when there is none. */
int rs__ucx_quiet_cause(unsigned long mark, char *buf, size_t len);

#endif
